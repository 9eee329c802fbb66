//! deploy/: `kubectl kustomize deploy/` renders the whole installation, every object validates
//! against the upstream Kubernetes schemas (PyPI kubernetes-validate, strict, Kubernetes 1.32)
//! and is accepted by kube-lite with dryRun=All, and the Deployments carry what an operator
//! expects (replicas, probes, requests, non-root read-only containers, spread, PDBs).

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
const NOT_SERVED_BY_KUBE_LITE: [&str; 3] = ["StatefulSet", "DaemonSet", "PodDisruptionBudget"];

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
    assert_eq!(cm["data"]["NATS_URL"], "nats://nats.nats.svc:4222");
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
