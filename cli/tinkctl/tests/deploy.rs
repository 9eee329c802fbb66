//! deploy/: `kubectl kustomize deploy/` renders the whole installation, every object validates
//! against the upstream Kubernetes schemas (PyPI kubernetes-validate, strict, Kubernetes 1.32)
//! and is accepted by kube-lite with dryRun=All, and the Deployments carry what an operator
//! expects (replicas, probes, requests, non-root read-only containers, spread, PDBs), and the
//! network: NetworkPolicies for every workload (NATS admits clients only from the services
//! that use it, routes only from its own pods, monitoring from nobody), no Service publishes
//! NATS's monitoring port, and the services reach NATS over TLS trusting its CA.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use kube::api::{Api, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use serde::Deserialize;
use serde_json::Value;

/// The Kubernetes version the manifests target (the kubectl on the machine is 1.32).
const TARGET_VERSION: &str = "1.32";

/// Kinds kube-lite does not serve (it is a test API server with the types the services use);
/// they are still validated against the upstream schemas. A kind outside this list that
/// kube-lite refuses fails the test.
const NOT_SERVED_BY_KUBE_LITE: [&str; 4] = [
    "StatefulSet",
    "DaemonSet",
    "PodDisruptionBudget",
    "NetworkPolicy",
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn kustomize(dir: &str) -> String {
    let out = Command::new("kubectl")
        .args(["kustomize", dir])
        .current_dir(repo())
        .output()
        .expect("kubectl runs (scripts/install-deps.sh)");
    assert!(
        out.status.success(),
        "kubectl kustomize {dir} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf8")
}

fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|d| Value::deserialize(d).expect("YAML document"))
        .filter(|v| !v.is_null())
        .collect()
}

fn kind(v: &Value) -> &str {
    v["kind"].as_str().unwrap_or_default()
}

fn name(v: &Value) -> &str {
    v["metadata"]["name"].as_str().unwrap_or_default()
}

fn by_kind<'a>(docs: &'a [Value], k: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| kind(d) == k).collect()
}

#[test]
fn the_base_renders_with_every_part() {
    let docs = documents(&kustomize("deploy/"));
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for d in &docs {
        *kinds.entry(kind(d)).or_default() += 1;
        if kind(d) != "Namespace" && d["metadata"].get("namespace").is_some() {
            assert_eq!(
                d["metadata"]["namespace"],
                "tink-system",
                "{} {}",
                kind(d),
                name(d)
            );
        }
    }
    // tinkerbell.org's four and the Cluster API provider's three.
    assert_eq!(kinds.get("CustomResourceDefinition"), Some(&7), "{kinds:?}");
    // The provider's role is aggregated into Cluster API's manager.
    let aggregated: Vec<&str> = by_kind(&docs, "ClusterRole")
        .into_iter()
        .filter(|r| r["metadata"]["labels"]["cluster.x-k8s.io/aggregate-to-manager"] == "true")
        .map(name)
        .collect();
    assert_eq!(aggregated, ["tink-capi-manager"]);
    assert_eq!(kinds.get("Namespace"), Some(&1), "{kinds:?}");

    let replicas: BTreeMap<&str, i64> = by_kind(&docs, "Deployment")
        .into_iter()
        .map(|d| (name(d), d["spec"]["replicas"].as_i64().unwrap_or(1)))
        .collect();
    let want: BTreeMap<&str, i64> = [
        ("tink-controller", 2),
        ("tink-server", 3),
        ("hegel", 2),
        ("tink-webhook", 2),
        ("tink-console", 2),
    ]
    .into();
    assert_eq!(replicas, want);
    let nats = by_kind(&docs, "StatefulSet");
    assert_eq!(nats.len(), 1);
    assert_eq!(nats[0]["spec"]["replicas"], 3);

    let service_accounts: Vec<&str> = by_kind(&docs, "ServiceAccount")
        .into_iter()
        .map(name)
        .collect();
    let pdbs = by_kind(&docs, "PodDisruptionBudget");
    for d in by_kind(&docs, "Deployment").into_iter().chain(nats) {
        let n = name(d);
        let pod = &d["spec"]["template"]["spec"];
        let labels = &d["spec"]["template"]["metadata"]["labels"];
        assert_eq!(
            &d["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"],
            &labels["app.kubernetes.io/name"],
            "{n}"
        );
        assert_eq!(
            pod["securityContext"]["runAsNonRoot"], true,
            "{n}: runAsNonRoot"
        );
        // Spread across nodes: topology spread constraints or pod anti-affinity.
        let spread = pod["topologySpreadConstraints"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
            || pod["affinity"]["podAntiAffinity"].is_object();
        assert!(spread, "{n}: spread across nodes");
        if kind(d) == "Deployment" {
            let sa = pod["serviceAccountName"].as_str().unwrap_or_default();
            assert!(
                service_accounts.contains(&sa),
                "{n}: service account {sa} is not defined"
            );
        }
        for c in pod["containers"].as_array().expect("containers") {
            assert!(c["livenessProbe"].is_object(), "{n}: liveness probe");
            assert!(c["readinessProbe"].is_object(), "{n}: readiness probe");
            assert!(
                c["resources"]["requests"]["cpu"].is_string(),
                "{n}: cpu request"
            );
            assert!(
                c["resources"]["requests"]["memory"].is_string(),
                "{n}: memory request"
            );
            assert_eq!(
                c["securityContext"]["readOnlyRootFilesystem"], true,
                "{n}: read-only root"
            );
            assert_eq!(
                c["securityContext"]["allowPrivilegeEscalation"], false,
                "{n}"
            );
            assert_eq!(
                c["securityContext"]["capabilities"]["drop"],
                serde_json::json!(["ALL"]),
                "{n}"
            );
        }
        let covered = pdbs.iter().any(|p| {
            p["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]
                == labels["app.kubernetes.io/name"]
        });
        assert!(covered, "{n}: no PodDisruptionBudget selects it");
    }
    // tink-netboot: DHCP is layer 2, so a DaemonSet on the host network of labelled nodes. It
    // runs as uid 0 only because Kubernetes grants added capabilities to root alone: every
    // capability but the two its ports and SO_BINDTODEVICE need is dropped, the root is
    // read-only, and it has its own least-privilege ServiceAccount.
    let daemonsets = by_kind(&docs, "DaemonSet");
    assert_eq!(daemonsets.len(), 1, "only tink-netboot is a DaemonSet");
    let nb = daemonsets[0];
    assert_eq!(name(nb), "tink-netboot");
    let pod = &nb["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["nodeSelector"]["tinkerbell.org/netboot"], "true");
    assert!(service_accounts.contains(&pod["serviceAccountName"].as_str().unwrap_or_default()));
    let c = &pod["containers"][0];
    assert!(c["livenessProbe"].is_object() && c["readinessProbe"].is_object());
    assert!(c["resources"]["requests"]["cpu"].is_string());
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(
        c["securityContext"]["capabilities"],
        serde_json::json!({"drop": ["ALL"], "add": ["NET_BIND_SERVICE", "NET_RAW"]})
    );
    let rules = by_kind(&docs, "ClusterRole")
        .into_iter()
        .find(|r| name(r) == "tink-netboot")
        .expect("tink-netboot ClusterRole");
    assert_eq!(
        rules["rules"],
        serde_json::json!([{"apiGroups": ["tinkerbell.org"], "resources": ["hardware", "osies"],
                            "verbs": ["list", "watch"]}]),
        "tink-netboot reads Hardware and OSIEs, nothing else"
    );
    // The controller's replicas elect a leader in their own namespace.
    let ctl = by_kind(&docs, "Deployment")
        .into_iter()
        .find(|d| name(d) == "tink-controller")
        .expect("controller");
    let env = ctl["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .expect("env");
    assert!(env.iter().any(|e| e["name"] == "TINK_LEASE_NAMESPACE"));
    // The controller writes the agent secret copies, and Hegel reads them, in their own
    // namespace, where their Secret Roles are; Hegel has no Secret rule cluster-wide.
    for deployment in ["tink-controller", "hegel"] {
        let d = by_kind(&docs, "Deployment")
            .into_iter()
            .find(|d| name(d) == deployment)
            .expect("deployment");
        let env = d["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .expect("env");
        assert!(
            env.iter().any(|e| e["name"] == "TINK_SYSTEM_NAMESPACE"
                && e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"),
            "{deployment}: TINK_SYSTEM_NAMESPACE from the pod's namespace"
        );
    }
    let secret_rules = |kind: &str, role: &str| -> Vec<Value> {
        by_kind(&docs, kind)
            .into_iter()
            .filter(|r| name(r) == role)
            .flat_map(|r| r["rules"].as_array().cloned().unwrap_or_default())
            .filter(|rule| {
                rule["resources"]
                    .as_array()
                    .is_some_and(|r| r.iter().any(|x| x == "secrets" || x == "*"))
            })
            .collect()
    };
    assert_eq!(secret_rules("ClusterRole", "hegel"), Vec::<Value>::new());
    assert_eq!(
        secret_rules("Role", "hegel-agent-secrets"),
        vec![
            serde_json::json!({"apiGroups": [""], "resources": ["secrets"],
                                "verbs": ["get", "list", "watch"]})
        ]
    );
    // The controller only reads Secrets cluster-wide; it writes them in tink-system only.
    assert_eq!(
        secret_rules("ClusterRole", "tink-controller"),
        vec![serde_json::json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]})]
    );
}

#[test]
fn the_external_nats_overlay_drops_the_statefulset_and_points_elsewhere() {
    let docs = documents(&kustomize("deploy/overlays/external-nats"));
    assert!(by_kind(&docs, "StatefulSet").is_empty());
    assert!(
        by_kind(&docs, "CustomResourceDefinition").is_empty(),
        "CRDs are applied from deploy/crds"
    );
    let cm = by_kind(&docs, "ConfigMap")
        .into_iter()
        .find(|c| name(c) == "tink-nats")
        .expect("tink-nats");
    assert_eq!(cm["data"]["NATS_URL"], "tls://nats.nats.svc:4222");
    assert_eq!(by_kind(&docs, "Deployment").len(), 5);
}

fn validate(file: &std::path::Path) -> std::process::Output {
    Command::new("kubernetes-validate")
        .args(["--strict", "--quiet", "-k", TARGET_VERSION])
        .arg(file)
        .output()
        .expect("kubernetes-validate runs (scripts/install-deps.sh installs it from PyPI)")
}

#[test]
fn every_object_validates_against_the_upstream_schemas() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (i, overlay) in ["deploy/", "deploy/overlays/external-nats"]
        .into_iter()
        .enumerate()
    {
        let file = dir.path().join(format!("{i}.yaml"));
        std::fs::write(&file, kustomize(overlay)).expect("write");
        let out = validate(&file);
        assert!(
            out.status.success(),
            "{overlay} does not validate against Kubernetes {TARGET_VERSION}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The validator is strict: an unknown field fails it (so the pass above means something).
    let bad = dir.path().join("bad.yaml");
    let text = kustomize("deploy/").replacen("  replicas: 2\n", "  replicas: 2\n  replica: 2\n", 1);
    std::fs::write(&bad, text).expect("write");
    assert!(
        !validate(&bad).status.success(),
        "an unknown field must fail strict validation"
    );
}

#[tokio::test]
async fn every_object_is_accepted_by_kube_lite_with_dry_run() {
    let server = kube_lite::Server::start(kube_lite::Config::default())
        .await
        .expect("kube-lite");
    let client = server.client().expect("client");
    let docs = documents(&kustomize("deploy/"));
    // The namespace and the CRDs for real (the CRDs are what the other objects need to exist).
    let mut refused_unserved = Vec::new();
    for (i, d) in docs.iter().enumerate() {
        let k = kind(d);
        let (group, version) = match d["apiVersion"]
            .as_str()
            .expect("apiVersion")
            .split_once('/')
        {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (
                String::new(),
                d["apiVersion"].as_str().unwrap_or_default().to_string(),
            ),
        };
        let gvk = GroupVersionKind::gvk(&group, &version, k);
        let Ok((resource, caps)) = kube::discovery::pinned_kind(&client, &gvk).await else {
            assert!(
                NOT_SERVED_BY_KUBE_LITE.contains(&k),
                "kube-lite does not serve {group}/{version} {k}"
            );
            refused_unserved.push(k.to_string());
            continue;
        };
        let api: Api<DynamicObject> = match caps.scope {
            kube::discovery::Scope::Namespaced => Api::namespaced_with(
                client.clone(),
                d["metadata"]["namespace"].as_str().unwrap_or("default"),
                &resource,
            ),
            kube::discovery::Scope::Cluster => Api::all_with(client.clone(), &resource),
        };
        let obj: DynamicObject = serde_json::from_value(d.clone()).expect("object");
        let real = matches!(k, "Namespace" | "CustomResourceDefinition");
        let pp = PostParams {
            dry_run: !real,
            ..Default::default()
        };
        if let Err(e) = api.create(&pp, &obj).await {
            panic!("document {i} ({k} {}) refused by kube-lite: {e}", name(d));
        }
        if !real {
            assert!(
                api.get_opt(name(d)).await.expect("get").is_none(),
                "dryRun=All stored {k} {}",
                name(d)
            );
        }
    }
    refused_unserved.sort();
    refused_unserved.dedup();
    eprintln!("validated upstream only (kube-lite does not serve them): {refused_unserved:?}");
    server.shutdown().await;
}

/// Whether `selector` (a LabelSelector) selects pods labelled `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let label = |k: &str| labels[k].as_str();
    let match_labels = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| label(k) == v.as_str());
    let expressions = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e["key"].as_str().unwrap_or_default();
            let values: Vec<&str> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            match e["operator"].as_str().unwrap_or_default() {
                "In" => label(key).is_some_and(|v| values.contains(&v)),
                "NotIn" => !label(key).is_some_and(|v| values.contains(&v)),
                "Exists" => label(key).is_some(),
                "DoesNotExist" => label(key).is_none(),
                other => panic!("unknown operator {other}"),
            }
        });
    match_labels && expressions
}

/// The ingress rules of every policy that selects pods labelled `labels`.
fn ingress_rules<'a>(policies: &[&'a Value], labels: &Value) -> Vec<&'a Value> {
    policies
        .iter()
        .filter(|p| selects(&p["spec"]["podSelector"], labels))
        .flat_map(|p| p["spec"]["ingress"].as_array().into_iter().flatten())
        .collect()
}

/// Whether an ingress rule admits TCP `port` (a rule without ports admits every port).
fn admits_port(rule: &Value, port: i64) -> bool {
    match rule["ports"].as_array() {
        None => true,
        Some(ports) => ports.iter().any(|p| {
            p["protocol"].as_str().unwrap_or("TCP") == "TCP"
                && (p["port"].is_null() || p["port"].as_i64() == Some(port))
        }),
    }
}

fn pod_labels<'a>(docs: &'a [Value], workload: &str) -> &'a Value {
    &docs
        .iter()
        .find(|d| matches!(kind(d), "Deployment" | "StatefulSet") && name(d) == workload)
        .unwrap_or_else(|| panic!("workload {workload}"))["spec"]["template"]["metadata"]["labels"]
}

#[test]
fn network_policies_deny_ingress_but_what_each_component_serves() {
    for overlay in ["deploy/", "deploy/overlays/external-nats"] {
        let docs = documents(&kustomize(overlay));
        let policies = by_kind(&docs, "NetworkPolicy");
        // Default deny: every pod of the namespace is selected by a policy with no rule.
        assert!(
            policies.iter().any(|p| p["spec"]["podSelector"]
                .as_object()
                .is_some_and(|s| s.is_empty())
                && p["spec"]["policyTypes"] == serde_json::json!(["Ingress"])
                && p["spec"]["ingress"].is_null()),
            "{overlay}: no default-deny ingress policy"
        );
        // And each workload has a policy of its own (not only the default deny).
        for w in by_kind(&docs, "Deployment")
            .into_iter()
            .chain(by_kind(&docs, "StatefulSet"))
        {
            let labels = &w["spec"]["template"]["metadata"]["labels"];
            let own = policies.iter().any(|p| {
                let selector = &p["spec"]["podSelector"];
                selector.as_object().is_some_and(|s| !s.is_empty()) && selects(selector, labels)
            });
            assert!(
                own,
                "{overlay}: no NetworkPolicy selects {}'s pods",
                name(w)
            );
        }
        // Admin ports admit only the monitoring namespaces (and the kubelet, not subject to
        // policies); the served ports admit every source.
        let served: [(&str, &[i64]); 5] = [
            ("tink-server", &[42113]),
            ("hegel", &[50061]),
            ("tink-console", &[8080]),
            ("tink-webhook", &[9443]),
            ("tink-controller", &[]),
        ];
        for (workload, open) in served {
            let rules = ingress_rules(&policies, pod_labels(&docs, workload));
            for port in open {
                assert!(
                    rules
                        .iter()
                        .any(|r| admits_port(r, *port) && r["from"].is_null()),
                    "{overlay}: {workload} port {port} is not open"
                );
            }
            let admin: Vec<&&Value> = rules.iter().filter(|r| admits_port(r, 9090)).collect();
            assert!(
                !admin.is_empty(),
                "{overlay}: {workload}: admin port closed to monitoring"
            );
            for r in admin {
                assert_eq!(
                    r["from"],
                    serde_json::json!([{"namespaceSelector":
                        {"matchLabels": {"tinkerbell.org/monitoring": "true"}}}]),
                    "{overlay}: {workload}: admin port from anything but monitoring namespaces"
                );
            }
        }
    }
}

#[test]
fn nats_admits_clients_from_its_users_routes_from_itself_and_monitoring_from_nobody() {
    let docs = documents(&kustomize("deploy/"));
    let policies = by_kind(&docs, "NetworkPolicy");
    let nats = pod_labels(&docs, "tink-nats");
    let rules = ingress_rules(&policies, nats);
    // The pods of which workloads each NATS port admits (a rule without `from` admits any).
    let workloads: Vec<&str> = by_kind(&docs, "Deployment")
        .into_iter()
        .chain(by_kind(&docs, "StatefulSet"))
        .chain(by_kind(&docs, "DaemonSet"))
        .map(name)
        .collect();
    let admitted = |port: i64| -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for r in rules.iter().filter(|r| admits_port(r, port)) {
            let peers = r["from"]
                .as_array()
                .unwrap_or_else(|| panic!("NATS port {port} is open to every source"));
            for peer in peers {
                assert!(
                    peer["namespaceSelector"].is_null() && peer["ipBlock"].is_null(),
                    "NATS port {port} admits another namespace or addresses: {peer}"
                );
                for w in &workloads {
                    if selects(&peer["podSelector"], pod_labels_any(&docs, w)) {
                        out.push(w);
                    }
                }
            }
        }
        out.sort();
        out.dedup();
        out
    };
    assert_eq!(
        admitted(4222),
        ["tink-console", "tink-controller", "tink-server"]
    );
    assert_eq!(admitted(6222), ["tink-nats"]);
    assert_eq!(admitted(8222), Vec::<&str>::new());

    // No Service publishes monitoring; the routes' port only on the headless Service, whose
    // pod names the routes dial.
    for svc in by_kind(&docs, "Service") {
        for p in svc["spec"]["ports"].as_array().into_iter().flatten() {
            let port = p["port"].as_i64();
            let target = &p["targetPort"];
            assert!(
                port != Some(8222) && target != "monitor" && target != 8222,
                "Service {} publishes NATS's monitoring port",
                name(svc)
            );
            if port == Some(6222) || target == "cluster" {
                assert_eq!(name(svc), "tink-nats-headless");
                assert_eq!(svc["spec"]["clusterIP"], "None");
            }
        }
    }
    let routes_svc = by_kind(&docs, "Service")
        .into_iter()
        .find(|s| name(s) == "tink-nats-headless")
        .expect("headless Service");
    assert!(
        routes_svc["spec"]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .any(|p| p["port"] == 6222)
    );
}

/// The pod labels of any workload kind.
fn pod_labels_any<'a>(docs: &'a [Value], workload: &str) -> &'a Value {
    &docs
        .iter()
        .find(|d| {
            matches!(kind(d), "Deployment" | "StatefulSet" | "DaemonSet") && name(d) == workload
        })
        .unwrap_or_else(|| panic!("workload {workload}"))["spec"]["template"]["metadata"]["labels"]
}

#[test]
fn the_services_that_use_nats_reach_it_over_tls_trusting_its_ca() {
    for overlay in ["deploy/", "deploy/overlays/external-nats"] {
        let docs = documents(&kustomize(overlay));
        let cm = by_kind(&docs, "ConfigMap")
            .into_iter()
            .find(|c| name(c) == "tink-nats")
            .expect("tink-nats ConfigMap");
        for url in cm["data"]["NATS_URL"]
            .as_str()
            .expect("NATS_URL")
            .split(',')
        {
            assert!(url.starts_with("tls://"), "{overlay}: {url} is not TLS");
        }
        for workload in ["tink-controller", "tink-server", "tink-console"] {
            let d = by_kind(&docs, "Deployment")
                .into_iter()
                .find(|d| name(d) == workload)
                .expect("deployment");
            let pod = &d["spec"]["template"]["spec"];
            let c = &pod["containers"][0];
            let ca = c["env"]
                .as_array()
                .expect("env")
                .iter()
                .find(|e| e["name"] == "NATS_TLS_CA")
                .and_then(|e| e["value"].as_str())
                .unwrap_or_else(|| panic!("{overlay}: {workload} has no NATS_TLS_CA"));
            let (dir, file) = ca.rsplit_once('/').expect("a path");
            let mount = c["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|m| m["mountPath"] == dir)
                .unwrap_or_else(|| panic!("{overlay}: {workload}: nothing mounted at {dir}"));
            let volume = pod["volumes"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|v| v["name"] == mount["name"])
                .expect("volume");
            assert_eq!(
                volume["secret"]["secretName"], "tink-nats-tls",
                "{workload}"
            );
            // Only the CA, not the servers' key.
            assert_eq!(
                volume["secret"]["items"],
                serde_json::json!([{"key": "ca.crt", "path": file}]),
                "{workload}"
            );
        }
    }
}
