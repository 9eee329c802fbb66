//! The conformance environment: an in-process kube-lite, or the cluster named by the kubeconfig
//! in `TINK_CONFORMANCE_KUBECONFIG`; every test gets its own namespace.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

/// Environment variable naming a kubeconfig of a real cluster to run the suite against.
pub const KUBECONFIG_ENV: &str = "TINK_CONFORMANCE_KUBECONFIG";

/// One test's view of the API server.
pub struct Env {
    pub client: kube::Client,
    pub kubeconfig: PathBuf,
    pub ns: String,
    pub in_process: bool,
    server: Option<kube_lite::RunningServer>,
    dir: tempfile::TempDir,
}

pub fn unique(prefix: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}-{}", &id[..10])
}

impl Env {
    /// Starts (or connects to) the API server and creates a fresh namespace.
    pub async fn new(prefix: &str) -> Env {
        Self::with_config(
            prefix,
            kube_lite::Config {
                watch_history: 200,
                bookmark_interval: Duration::from_millis(300),
                ..Default::default()
            },
        )
        .await
    }

    pub async fn with_config(prefix: &str, config: kube_lite::Config) -> Env {
        let dir = tempfile::tempdir().expect("temporary directory");
        let (client, kubeconfig, server) = match std::env::var(KUBECONFIG_ENV) {
            Ok(path) if !path.is_empty() => {
                let kc = Kubeconfig::read_from(&path).expect("reading the conformance kubeconfig");
                let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                    .await
                    .expect("loading the conformance kubeconfig");
                (
                    kube::Client::try_from(cfg).expect("client"),
                    PathBuf::from(path),
                    None,
                )
            }
            _ => {
                let server = kube_lite::Server::start(config)
                    .await
                    .expect("starting kube-lite");
                let path = dir.path().join("kubeconfig");
                server
                    .write_kubeconfig(&path)
                    .expect("writing the kubeconfig");
                (server.client().expect("client"), path, Some(server))
            }
        };
        let ns = unique(prefix);
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("namespace"),
            )
            .await
            .expect("creating the test namespace");
        let in_process = server.is_some();
        Env {
            client,
            kubeconfig,
            ns,
            in_process,
            server,
            dir,
        }
    }

    /// A scratch directory for this test.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The running in-process server, if any.
    pub fn server(&self) -> Option<&kube_lite::RunningServer> {
        self.server.as_ref()
    }

    /// Deletes the namespace (the in-process server simply stops).
    pub async fn cleanup(self) {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let _ = namespaces.delete(&self.ns, &DeleteParams::default()).await;
        if let Some(s) = self.server {
            s.shutdown().await;
        }
    }

    /// Runs kubectl against this environment and returns (success, stdout, stderr).
    pub async fn kubectl(&self, args: &[&str]) -> (bool, String, String) {
        let out = self
            .kubectl_cmd(args)
            .output()
            .await
            .expect("running kubectl (is /usr/bin/kubectl installed?)");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// A kubectl command with the kubeconfig, namespace and a private cache directory set.
    pub fn kubectl_cmd(&self, args: &[&str]) -> tokio::process::Command {
        let mut c = tokio::process::Command::new("kubectl");
        c.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.path().join("kube-cache"))
            .arg("--namespace")
            .arg(&self.ns)
            .args(args)
            .kill_on_drop(true);
        c
    }
}

/// The test CRD: group lite.example.com, kind Widget, v1 (storage) and v1beta1 served, status
/// subresource, schema with patterns, enums, bounds and CEL rules (one a transition rule).
pub fn widget_crd() -> Value {
    let schema = json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["size"],
                "properties": {
                    "size": {"type": "integer", "minimum": 1, "maximum": 1000},
                    "color": {"type": "string", "enum": ["red", "green", "blue"]},
                    "owner": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 16},
                    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
                    "mode": {"type": "string", "default": "auto"},
                    "immutableId": {"type": "string"},
                    "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                },
                "x-kubernetes-validations": [
                    {"rule": "self.size <= 100 || self.color == 'red'", "message": "only red widgets may be larger than 100"},
                    {"rule": "!has(oldSelf.immutableId) || (has(self.immutableId) && self.immutableId == oldSelf.immutableId)", "message": "immutableId is immutable"}
                ]
            },
            "status": {
                "type": "object",
                "properties": {
                    "phase": {"type": "string"},
                    "observedGeneration": {"type": "integer"}
                }
            }
        }
    });
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.lite.example.com"},
        "spec": {
            "group": "lite.example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList", "shortNames": ["wdg"]},
            "versions": [
                {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}, "schema": {"openAPIV3Schema": schema.clone()}},
                {"name": "v1beta1", "served": true, "storage": false, "subresources": {"status": {}}, "schema": {"openAPIV3Schema": schema}}
            ]
        }
    })
}

/// Applies the Widget CRD (idempotent, shared by tests) and waits until it is served.
pub async fn ensure_widget_crd(client: &kube::Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(widget_crd()).expect("crd");
    crds.patch(
        "widgets.lite.example.com",
        &PatchParams::apply("conformance").force(),
        &Patch::Apply(&crd),
    )
    .await
    .expect("applying the Widget CRD");
    let cond = kube::runtime::wait::conditions::is_crd_established();
    tokio::time::timeout(
        Duration::from_secs(30),
        kube::runtime::wait::await_condition(crds, "widgets.lite.example.com", cond),
    )
    .await
    .expect("CRD established in time")
    .expect("waiting for the CRD");
    // Discovery of a new CRD can lag behind Established on a real cluster.
    let gvk = kube::api::GroupVersionKind::gvk("lite.example.com", "v1", "Widget");
    for _ in 0..100 {
        if kube::discovery::pinned_kind(client, &gvk).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("Widget never appeared in discovery");
}

/// A dynamic Api for Widgets in a namespace at a version.
pub fn widgets(client: &kube::Client, ns: &str, version: &str) -> Api<kube::api::DynamicObject> {
    let gvk = kube::api::GroupVersionKind::gvk("lite.example.com", version, "Widget");
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, "widgets");
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// A Widget object.
pub fn widget(name: &str, spec: Value) -> kube::api::DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "lite.example.com/v1", "kind": "Widget",
        "metadata": {"name": name}, "spec": spec
    }))
    .expect("widget")
}

/// The API error code of a kube error, or panics.
pub fn code(e: kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// The API error Status of a kube error, or panics.
pub fn status(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Polls `f` until it returns Some, for at most 30 seconds.
pub async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    for _ in 0..300 {
        if let Some(v) = f().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("gave up waiting for {what}");
}
