//! A kube-lite API server with the tinkerbell and bmc.tinkerbell.org CRDs and the webhook
//! configuration from deploy/, calling an in-process webhook over HTTPS (the Services
//! `tink-system/tink-webhook` and `tink-system/tink-webhook-conversion` mapped to it, the dev
//! CA as `caBundle`), plus kubectl.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tink_webhook::{DevCertificates, Metrics, WebhookConfig, dev_certificates};
use tokio_rustls::rustls;
use tokio_util::sync::CancellationToken;

pub const SERVICE_DNS: &str = "tink-webhook.tink-system.svc";
pub const CONVERSION_DNS: &str = "tink-webhook-conversion.tink-system.svc";

pub fn certificates() -> DevCertificates {
    dev_certificates(
        &[SERVICE_DNS.to_string(), CONVERSION_DNS.to_string()],
        &["127.0.0.1".parse().expect("ip")],
    )
    .expect("dev certificates")
}

pub async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// The deploy/ manifests as kustomize builds them: the CRDs with the crd-conversion component,
/// and the webhook's own objects.
pub fn deploy_manifests() -> Vec<Value> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
    let dir = tempfile::tempdir().expect("tempdir");
    let deploy = dir.path().join("deploy");
    copy_dir(&root.join("crds"), &deploy.join("crds"));
    copy_dir(&root.join("webhook"), &deploy.join("webhook"));
    std::fs::write(
        deploy.join("kustomization.yaml"),
        "resources:\n- crds/hardware.tinkerbell.org.yaml\n- crds/osies.tinkerbell.org.yaml\n- crds/templates.tinkerbell.org.yaml\n- crds/workflows.tinkerbell.org.yaml\n- crds/workflowsets.tinkerbell.org.yaml\n- crds/machines.bmc.tinkerbell.org.yaml\n- crds/jobs.bmc.tinkerbell.org.yaml\n- crds/tasks.bmc.tinkerbell.org.yaml\n- webhook\ncomponents:\n- webhook/crd-conversion\n",
    )
    .expect("kustomization");
    let out = std::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(&deploy)
        .output()
        .expect("running kubectl kustomize");
    assert!(
        out.status.success(),
        "kubectl kustomize: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    text.split("\n---\n")
        .map(|doc| serde_yaml::from_str::<Value>(doc).expect("manifest YAML"))
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let path = entry.path();
        if path.is_dir() {
            copy_dir(&path, &to.join(entry.file_name()));
        } else {
            std::fs::copy(&path, to.join(entry.file_name())).expect("copy");
        }
    }
}

/// A webhook running in this process.
pub struct Webhook {
    pub addr: std::net::SocketAddr,
    pub metrics: Metrics,
    pub health: tink_runtime::Health,
    pub shutdown: CancellationToken,
    pub task: tokio::task::JoinHandle<Result<(), tink_webhook::Error>>,
    pub cert: PathBuf,
    pub key: PathBuf,
}

pub struct Env {
    pub server: kube_lite::RunningServer,
    pub client: kube::Client,
    pub kubeconfig: PathBuf,
    pub ns: String,
    pub certs: DevCertificates,
    pub webhook: Webhook,
    pub manifests: Vec<Value>,
    dir: tempfile::TempDir,
}

pub fn ca_bundle(ca_pem: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(ca_pem)
}

impl Env {
    /// kube-lite with the CRDs (webhook conversion), the webhook running and ready, and a
    /// fresh namespace. The admission configuration is installed when `admission` is set.
    pub async fn new(ns: &str, admission: bool) -> Env {
        Self::with_tokens(ns, admission, None).await
    }

    /// As [`Env::new`], kube-lite knowing the bearer tokens of `tokens` (its `--token-file`
    /// CSV: `token,user,uid[,"groups"]`), whose users its AdmissionReviews name.
    pub async fn with_tokens(ns: &str, admission: bool, tokens: Option<&str>) -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = match tokens {
            Some(tokens) => kube_lite::Server::start_with_tokens(dir.path(), tokens).await,
            None => kube_lite::Server::start(kube_lite::Config::default()).await,
        }
        .expect("kube-lite");
        let kubeconfig = dir.path().join("kubeconfig");
        server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
        let client = server.client().expect("client");
        let certs = certificates();
        let cert = dir.path().join("tls.crt");
        let key = dir.path().join("tls.key");
        std::fs::write(&cert, &certs.cert_pem).expect("cert");
        std::fs::write(&key, &certs.key_pem).expect("key");

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let base = format!("https://127.0.0.1:{}", addr.port());
        server.map_service("tink-system/tink-webhook", base.clone());
        server.map_service("tink-system/tink-webhook-conversion", base);

        let manifests = deploy_manifests();
        let env_ca = ca_bundle(&certs.ca_pem);
        for m in manifests
            .iter()
            .filter(|m| m["kind"] == "CustomResourceDefinition")
        {
            let mut crd = m.clone();
            if crd
                .pointer("/spec/conversion/webhook/clientConfig")
                .is_some()
            {
                crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"] =
                    json!(env_ca.clone());
            }
            create(&client, &crd).await;
        }

        let mut config = WebhookConfig::new(addr, &cert, &key);
        config.tls.reload_interval = Duration::from_millis(100);
        let shutdown = CancellationToken::new();
        let health = tink_runtime::Health::new();
        let metrics = Metrics::default();
        let task = tokio::spawn(tink_webhook::run_on(
            listener,
            config,
            client.clone(),
            health.clone(),
            metrics.clone(),
            shutdown.clone(),
        ));
        within("the webhook to be ready", async {
            while !health.is_ready() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;

        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns"),
            )
            .await
            .expect("namespace");
        let env = Env {
            server,
            client,
            kubeconfig,
            ns: ns.to_string(),
            certs,
            webhook: Webhook {
                addr,
                metrics,
                health,
                shutdown,
                task,
                cert,
                key,
            },
            manifests,
            dir,
        };
        if admission {
            env.install_admission(&env.certs.ca_pem).await;
        }
        env
    }

    /// Creates (or replaces the caBundle of) the ValidatingWebhookConfiguration from deploy/.
    pub async fn install_admission(&self, ca_pem: &str) {
        let mut vwc = self
            .manifests
            .iter()
            .find(|m| m["kind"] == "ValidatingWebhookConfiguration")
            .cloned()
            .expect("deploy/webhook has a ValidatingWebhookConfiguration");
        for wh in vwc["webhooks"].as_array_mut().expect("webhooks") {
            wh["clientConfig"]["caBundle"] = json!(ca_bundle(ca_pem));
        }
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingWebhookConfiguration",
            ),
            "validatingwebhookconfigurations",
        );
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
        let obj: DynamicObject = serde_json::from_value(vwc).expect("vwc");
        let name = obj.metadata.name.clone().expect("name");
        if let Ok(mut live) = api.get(&name).await {
            live.data["webhooks"] = obj.data["webhooks"].clone();
            api.replace(&name, &PostParams::default(), &live)
                .await
                .expect("replace vwc");
        } else {
            api.create(&PostParams::default(), &obj)
                .await
                .expect("create vwc");
        }
    }

    /// [`Env::api`] as the user of `token`.
    pub fn api_as(&self, token: &str, kind: &str, version: &str) -> Api<DynamicObject> {
        let client = self.server.client_as(token).expect("client");
        Api::namespaced_with(client, &self.ns, &resource(kind, version))
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `value` as a JSON manifest file and returns its path.
    pub fn write(&self, name: &str, value: &Value) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, serde_json::to_vec_pretty(value).expect("json")).expect("write");
        path.to_string_lossy().into_owned()
    }

    /// Runs kubectl: (success, stdout, stderr).
    pub async fn kubectl(&self, args: &[&str]) -> (bool, String, String) {
        let mut cmd = tokio::process::Command::new("kubectl");
        cmd.args(args).env("KUBECONFIG", &self.kubeconfig);
        if !args
            .iter()
            .any(|a| *a == "-n" || a.starts_with("--namespace"))
        {
            cmd.arg("--namespace").arg(&self.ns);
        }
        let out = cmd.output().await.expect("running kubectl");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    pub async fn kubectl_ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.kubectl(args).await;
        assert!(ok, "kubectl {args:?} failed: {err}");
        out
    }

    pub fn api(&self, kind: &str, version: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.ns, &resource(kind, version))
    }

    /// POSTs `body` to the webhook over HTTPS, trusting `ca_pem`.
    pub async fn post(&self, path: &str, body: Vec<u8>) -> (u16, Value) {
        post(self.webhook.addr, &self.certs.ca_pem, path, body)
            .await
            .expect("webhook call")
    }

    pub async fn stop(self) {
        self.webhook.shutdown.cancel();
        let result = within("the webhook to stop", self.webhook.task)
            .await
            .expect("webhook task");
        result.expect("webhook ended cleanly");
        self.server.shutdown().await;
    }
}

/// The resource of one of the webhook's kinds.
pub fn resource(kind: &str, version: &str) -> ApiResource {
    let (group, plural) = match kind {
        "Hardware" => ("tinkerbell.org", "hardware"),
        "Template" => ("tinkerbell.org", "templates"),
        "Workflow" => ("tinkerbell.org", "workflows"),
        "Machine" => ("bmc.tinkerbell.org", "machines"),
        "Job" => ("bmc.tinkerbell.org", "jobs"),
        "Task" => ("bmc.tinkerbell.org", "tasks"),
        "WorkflowSet" => ("tinkerbell.org", "workflowsets"),
        _ => ("tinkerbell.org", "osies"),
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

async fn create(client: &kube::Client, manifest: &Value) {
    let api_version = manifest["apiVersion"].as_str().expect("apiVersion");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = manifest["kind"].as_str().expect("kind");
    let plural = format!("{}s", kind.to_lowercase());
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), &plural);
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let obj: DynamicObject = serde_json::from_value(manifest.clone()).expect("object");
    api.create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("creating {kind}: {e}"));
}

/// A TLS client trusting only `ca_pem`, checking the name `tink-webhook.tink-system.svc`.
pub fn client_config(ca_pem: &str) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.expect("CA PEM")).expect("CA");
    }
    Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}

/// One HTTPS POST on a new connection: the status and the JSON answer; `Err` when TLS or
/// HTTP fails.
pub async fn post(
    addr: std::net::SocketAddr,
    ca_pem: &str,
    path: &str,
    body: Vec<u8>,
) -> Result<(u16, Value), String> {
    let connector = tokio_rustls::TlsConnector::from(client_config(ca_pem));
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(SERVICE_DNS).map_err(|e| e.to_string())?;
    let tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = http::Request::post(path)
        .header("host", SERVICE_DNS)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    // A body that is not JSON comes back as a string (the test decides whether that is wrong).
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Ok((status, value))
}

/// Real-shaped v1alpha1 objects (Tinkerbell's playground): Hardware `sm01`, Template `ubuntu`,
/// Workflow `sm01-ubuntu`.
pub fn v1alpha1_objects(ns: &str) -> Vec<Value> {
    vec![
        json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Hardware",
        "metadata": {"name": "sm01", "namespace": ns, "labels": {"rack": "r12"}},
        "spec": {
            "disks": [{"device": "/dev/nvme0n1"}],
            "userData": "#cloud-config\nhostname: sm01\n",
            "metadata": {"state": "provisioning", "instance": {"id": "3c:ec:ef:4c:4f:54", "hostname": "sm01"}},
            "interfaces": [{
                "dhcp": {"arch": "x86_64", "hostname": "sm01", "mac": "3c:ec:ef:4c:4f:54",
                    "ip": {"address": "192.168.2.148", "gateway": "192.168.2.1", "netmask": "255.255.255.0"},
                    "lease_time": 86400, "name_servers": ["1.1.1.1"], "uefi": true, "vlan_id": "10"},
                "netboot": {"allowPXE": true, "allowWorkflow": true,
                    "osie": {"baseURL": "http://192.168.2.1:8080/hook"}}
            }]
        }}),
        json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Template",
            "metadata": {"name": "ubuntu", "namespace": ns},
            "spec": {"data": "version: \"0.1\"\nname: ubuntu\nglobal_timeout: 1800\ntasks:\n  - name: \"os installation\"\n    worker: \"{{.device_1}}\"\n    volumes:\n      - /dev:/dev\n    actions:\n      - name: \"stream image\"\n        image: quay.io/tinkerbell/actions/image2disk:v1.0.0\n        timeout: 600\n        environment:\n          DEST_DISK: {{ index .Hardware.Disks 0 }}\n          IMG_URL: http://192.168.2.1:8080/jammy.raw.gz\n      - name: \"kexec\"\n        image: quay.io/tinkerbell/actions/kexec:v1.0.0\n        timeout: 90\n        pid: host\n"}}),
        json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "sm01-ubuntu", "namespace": ns},
            "spec": {"templateRef": "ubuntu", "hardwareRef": "sm01",
                "hardwareMap": {"device_1": "3c:ec:ef:4c:4f:54"}}}),
    ]
}

/// v1alpha2 objects: Hardware `sm02`, Template `debian`, Workflow `sm02-debian`.
pub fn v1alpha2_objects(ns: &str) -> Vec<Value> {
    vec![
        // `disableDhcp: false` is written out: the CRD schema defaults it, so the stored object has it.
        json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
        "metadata": {"name": "sm02", "namespace": ns},
        "spec": {
            "networkInterfaces": {"3c:ec:ef:4c:4f:55": {"dhcp": {"ip": "192.168.2.149",
                "netmask": "255.255.255.0", "gateway": "192.168.2.1", "hostname": "sm02",
                "nameservers": ["1.1.1.1"], "leaseTime": 3600}, "disableDhcp": false, "disableNetboot": true}},
            "storageDevices": ["/dev/sda"],
            "instance": {"userdata": "#cloud-config\n"},
            "osie": {"osieRef": {"name": "hook"}, "kernelParams": ["console=ttyS0"]},
        }}),
        json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Template",
            "metadata": {"name": "debian", "namespace": ns},
            "spec": {"actions": [
                {"name": "stream", "image": "quay.io/tinkerbell/actions/image2disk:v1.0.0",
                    "env": {"DEST_DISK": "{{ index .Hardware.Disks 0 }}"}, "timeout": "600s"},
                {"name": "reboot", "image": "busybox", "cmd": "/bin/sh", "args": ["-c", "reboot"],
                    "networkNamespace": "host"},
            ], "volumes": ["/dev:/dev"], "env": {"PROXY": "http://proxy:3128"}}}),
        json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
            "metadata": {"name": "sm02-debian", "namespace": ns},
            "spec": {"hardwareRef": {"name": "sm02"}, "templateRef": {"name": "debian"},
                "templateData": {"device_1": "3c:ec:ef:4c:4f:55"}, "timeout": "1h"}}),
    ]
}
