//! `tinkctl hardware approve` and `hardware list` against kube-lite with the CRDs and the real
//! webhook in process: a user bound to the ClusterRole `tinkerbell-hardware-approver`
//! (deploy/rbac) approves a discovered machine, a user without it gets the webhook's refusal,
//! and a Hardware that was not discovered has nothing to approve.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tink_api::v1alpha2::Hardware;

const NAME: &str = "discovery-52-54-00-0b-5e-02";
const NS: &str = "tink";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Creates (server-side apply) any object of `docs`.
async fn apply(client: &kube::Client, doc: &Value) {
    let obj: DynamicObject = serde_json::from_value(doc.clone()).expect("object");
    let gvk =
        kube::api::GroupVersionKind::try_from(obj.types.as_ref().expect("types")).expect("gvk");
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .expect("discovered kind");
    let api: Api<DynamicObject> = match (&caps.scope, obj.metadata.namespace.as_deref()) {
        (kube::discovery::Scope::Namespaced, Some(ns)) => {
            Api::namespaced_with(client.clone(), ns, &resource)
        }
        _ => Api::all_with(client.clone(), &resource),
    };
    let name = obj.metadata.name.clone().expect("name");
    api.patch(
        &name,
        &PatchParams::apply("tinkctl-test"),
        &Patch::Apply(&obj),
    )
    .await
    .unwrap_or_else(|e| panic!("applying {gvk:?} {name}: {e}"));
}

fn yaml_docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("read manifest");
    text.split("\n---\n")
        .map(|d| serde_yaml::from_str::<Value>(d).expect("YAML"))
        .filter(|d| d.is_object())
        .collect()
}

/// A kubeconfig whose user presents `token`.
fn kubeconfig(server: &kube_lite::RunningServer, dir: &Path, token: &str) -> PathBuf {
    let path = dir.join(format!("kubeconfig-{token}"));
    std::fs::write(&path, server.kubeconfig_as(token)).expect("kubeconfig");
    path
}

async fn tinkctl(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_tinkctl"))
        .arg("hardware")
        .args(args)
        .args(["-n", NS, "--kubeconfig"])
        .arg(kubeconfig)
        .output()
        .await
        .expect("tinkctl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_follows_rbac_through_the_webhook() {
    let dir = tempfile::tempdir().expect("tmp");
    let tokens = "t-alice,alice,u-alice\nt-bob,bob,u-bob\n";
    let server = kube_lite::Server::start_with_tokens(dir.path(), tokens)
        .await
        .expect("kube-lite");
    let client = server.client().expect("client");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for kind in ["hardware", "templates", "workflows"] {
        let path = repo().join(format!("deploy/crds/{kind}.tinkerbell.org.yaml"));
        let crd: CustomResourceDefinition =
            serde_yaml::from_str(&std::fs::read_to_string(&path).expect("read CRD"))
                .expect("CRD YAML");
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("create CRD");
    }

    // The webhook, in process, with its own (admin) client for the index and the reviews.
    let certs =
        tink_webhook::dev_certificates(&["localhost".into()], &["127.0.0.1".parse().expect("ip")])
            .expect("certificates");
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert, &certs.cert_pem).expect("cert");
    std::fs::write(&key, &certs.key_pem).expect("key");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let health = tink_runtime::Health::new();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let webhook = tokio::spawn(tink_webhook::run_on(
        listener,
        tink_webhook::WebhookConfig::new(addr, &cert, &key),
        client.clone(),
        health.clone(),
        Default::default(),
        shutdown.clone(),
    ));
    tokio::time::timeout(Duration::from_secs(20), async {
        while !health.is_ready() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the webhook turns ready");
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(&certs.ca_pem);
    apply(&client, &json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "tink-webhook"},
        "webhooks": [{"name": "validate.tinkerbell.org", "admissionReviewVersions": ["v1"],
            "sideEffects": "None", "failurePolicy": "Fail",
            "clientConfig": {"url": format!("https://127.0.0.1:{}/validate", addr.port()), "caBundle": ca},
            "rules": [{"apiGroups": ["tinkerbell.org"], "apiVersions": ["v1alpha2"],
                "operations": ["CREATE", "UPDATE"], "resources": ["hardware", "workflows"]}]}]}))
    .await;

    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}})).expect("ns"),
        )
        .await
        .expect("namespace");
    // Only bob may approve (the shipped ClusterRole); both may edit Hardware (kube-lite does
    // not enforce that, the webhook asks only about approve).
    for doc in yaml_docs(&repo().join("deploy/rbac/hardware-approver.yaml")) {
        apply(&client, &doc).await;
    }
    apply(
        &client,
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "bob-approves", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
            "name": "tinkerbell-hardware-approver"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"}]}),
    )
    .await;

    let hardware: Api<Hardware> = Api::namespaced(client.clone(), NS);
    for doc in [
        json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": NAME, "namespace": NS},
            "spec": {"networkInterfaces": {"52:54:00:0b:5e:02": {}},
                "discovery": {"approved": false, "address": "10.0.2.15"}},
            "status": {}}),
        json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": "sm01", "namespace": NS},
            "spec": {"networkInterfaces": {"aa:bb:cc:dd:ee:01": {}}}}),
    ] {
        let hw: Hardware = tink_api::from_value(doc).expect("Hardware");
        hardware
            .create(&PostParams::default(), &hw)
            .await
            .expect("create Hardware");
    }
    let approved = || async {
        hardware
            .get(NAME)
            .await
            .expect("get")
            .spec
            .discovery
            .map(|d| d.approved)
    };
    let (alice, bob) = (
        kubeconfig(&server, dir.path(), "t-alice"),
        kubeconfig(&server, dir.path(), "t-bob"),
    );

    let (ok, out, _) = tinkctl(&alice, &["list"]).await;
    assert!(ok);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].starts_with("NAME") && lines[0].ends_with("APPROVED"),
        "{out}"
    );
    assert!(
        lines[1].starts_with(NAME) && lines[1].ends_with(" no"),
        "{out}"
    );
    assert!(
        lines[2].starts_with("sm01") && lines[2].ends_with(" -"),
        "{out}"
    );

    // alice: the webhook's refusal, as it worded it.
    let (ok, out, err) = tinkctl(&alice, &["approve", NAME]).await;
    assert!(!ok, "{out}");
    assert!(
        err.contains(&format!("approving hardware/{NAME} in namespace \"{NS}\" was refused: admission webhook \"validate.tinkerbell.org\" denied the request: Hardware.tinkerbell.org \"{NAME}\" is forbidden: spec.discovery.approved: user \"alice\" may not approve hardware \"{NAME}\" in namespace \"{NS}\": approving a discovered machine needs the verb approve on hardware.tinkerbell.org (RBAC), not only update")),
        "{err}"
    );
    assert_eq!(approved().await, Some(false));

    // bob approves.
    let (ok, out, err) = tinkctl(&bob, &["approve", NAME]).await;
    assert!(ok, "{err}");
    assert_eq!(out, format!("hardware/{NAME} approved\n"));
    assert_eq!(approved().await, Some(true));
    let (ok, out, _) = tinkctl(&bob, &["approve", NAME]).await;
    assert!(ok);
    assert_eq!(out, format!("hardware/{NAME} is already approved\n"));
    let (_, out, _) = tinkctl(&bob, &["list", "-o", "wide"]).await;
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].ends_with("THREADS   MEMORY   SERIAL   INVENTORY"),
        "{out}"
    );
    assert!(lines[1].contains(" yes "), "{out}");

    // Nothing to approve on a Hardware a person wrote, nor on one that does not exist.
    let (ok, _, err) = tinkctl(&bob, &["approve", "sm01"]).await;
    assert!(!ok);
    assert!(
        err.contains("hardware/sm01 in namespace \"tink\" has no spec.discovery: it was not discovered (a person wrote it), so there is nothing to approve"),
        "{err}"
    );
    let (ok, _, err) = tinkctl(&bob, &["approve", "nope"]).await;
    assert!(!ok);
    assert!(
        err.contains("no Hardware \"nope\" in namespace \"tink\""),
        "{err}"
    );

    shutdown.cancel();
    let _ = webhook.await;
    server.shutdown().await;
}

/// `tinkctl hardware inventory`: prints the reported inventory; `--refresh` sets the request
/// annotation and waits until `status.inventoryRequest` names the request (here written by the
/// test, as the controller does when the agent answered), and fails, naming the annotation, when
/// no answer comes in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inventory_prints_and_refresh_waits_for_the_answer() {
    let dir = tempfile::tempdir().expect("tmp");
    let server = kube_lite::Server::start_with_tokens(dir.path(), "t-admin,admin,u-admin\n")
        .await
        .expect("kube-lite");
    let client = server.client().expect("client");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let path = repo().join("deploy/crds/hardware.tinkerbell.org.yaml");
    let crd: CustomResourceDefinition =
        serde_yaml::from_str(&std::fs::read_to_string(&path).expect("read CRD")).expect("CRD");
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("create CRD");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}})).expect("ns"),
        )
        .await
        .expect("namespace");
    let api: Api<Hardware> = Api::namespaced(client.clone(), NS);
    let hw: Hardware = serde_json::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
        "metadata": {"name": "m1", "namespace": NS},
        "spec": {"networkInterfaces": {"52:54:00:0b:5e:09": {}}},
    }))
    .expect("hardware");
    api.create(&PostParams::default(), &hw)
        .await
        .expect("create");
    let config = kubeconfig(&server, dir.path(), "t-admin");

    // No inventory yet: said so.
    let (ok, _, err) = tinkctl(&config, &["inventory", "m1"]).await;
    assert!(!ok);
    assert!(err.contains("no inventory yet"), "{err}");

    // An inventory: printed as JSON, with who reported it.
    let status = json!({"status": {"attributes": {"inBand": {"cpu": {"totalThreads": 8}}},
        "inventoryReportedAt": "2026-11-27T10:00:00Z", "inventorySource": "Agent"}});
    api.patch_status("m1", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("status");
    let (ok, out, err) = tinkctl(&config, &["inventory", "m1"]).await;
    assert!(ok, "{err}");
    let printed: Value = serde_json::from_str(&out).expect("JSON on stdout");
    assert_eq!(printed["cpu"]["totalThreads"], 8);
    assert!(err.contains("authenticated agent"), "{err}");

    // No answer in time: an error naming the annotation, which stays for the agent.
    let (ok, _, err) = tinkctl(
        &config,
        &["inventory", "m1", "--refresh", "--timeout", "1s"],
    )
    .await;
    assert!(!ok);
    assert!(err.contains("did not answer within 1s"), "{err}");
    assert!(err.contains("tinkerbell.org/inventory-request"), "{err}");

    let annotation = |hw: &Hardware| {
        hw.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(tink_api::v1alpha2::INVENTORY_REQUEST_ANNOTATION))
            .cloned()
    };
    let first = annotation(&api.get("m1").await.expect("get")).expect("the request stays");

    // Answered while it waits: it returns with the inventory.
    let waiting = tokio::spawn({
        let config = config.clone();
        async move {
            tinkctl(
                &config,
                &["inventory", "m1", "--refresh", "--timeout", "30s"],
            )
            .await
        }
    });
    let mut answered = false;
    for _ in 0..300 {
        let hw = api.get("m1").await.expect("get");
        // The new refresh's value (a later time than the first one's).
        if let Some(value) = annotation(&hw).filter(|v| *v != first) {
            let uid = hw.metadata.uid.clone().unwrap_or_default();
            let id = tink_api::v1alpha2::inventory_request_id(&uid, &value);
            let answer = json!({"status": {"inventoryRequest": id,
                "attributes": {"inBand": {"cpu": {"totalThreads": 16}}}}});
            api.patch_status("m1", &PatchParams::default(), &Patch::Merge(&answer))
                .await
                .expect("answer");
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(answered, "the refresh set its annotation");
    let (ok, out, err) = waiting.await.expect("joined");
    assert!(ok, "{err}");
    let printed: Value = serde_json::from_str(&out).expect("JSON on stdout");
    assert_eq!(printed["cpu"]["totalThreads"], 16, "the fresh inventory");
    server.shutdown().await;
}
