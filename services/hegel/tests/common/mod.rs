//! kube-lite with the tinkerbell CRDs and an HTTP client whose source address is chosen per
//! request (127.0.0.x addresses stand for different machines). Nothing here uses the hegel
//! crate: netboot's tests include this file too. Hegel running in this process is
//! `server.rs` beside it, which Hegel's own tests declare.
#![allow(dead_code)]

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tink_api::v1alpha2::{Hardware, Osie};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

pub const NS: &str = "machines";
/// Where the controller keeps the copies of agent secrets (Hegel's default).
pub const SYSTEM_NS: &str = "tink-system";

pub async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// An HTTP response.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// `GET path` to `server` from the source address `from`, with extra `headers`.
pub async fn get_from(
    server: SocketAddr,
    from: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Reply {
    let from: IpAddr = from.parse().expect("source IP");
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind(SocketAddr::new(from, 0))
        .expect("bind the source address");
    let mut stream = socket.connect(server).await.expect("connect to hegel");
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: hegel\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).await.expect("send");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read");
    parse_reply(&raw)
}

fn parse_reply(raw: &[u8]) -> Reply {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of headers");
    let head = std::str::from_utf8(&raw[..split]).expect("ASCII headers");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().expect("status line");
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status code");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let rest = &raw[split + 4..];
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    let body = if chunked {
        let mut body = Vec::new();
        let mut rest = rest;
        loop {
            let eol = rest
                .windows(2)
                .position(|w| w == b"\r\n")
                .expect("chunk size");
            let size = usize::from_str_radix(std::str::from_utf8(&rest[..eol]).expect("hex"), 16)
                .expect("chunk size");
            if size == 0 {
                break;
            }
            body.extend_from_slice(&rest[eol + 2..eol + 2 + size]);
            rest = &rest[eol + 2 + size + 2..];
        }
        body
    } else {
        rest.to_vec()
    };
    Reply {
        status,
        headers,
        body,
    }
}

pub struct Env {
    pub kube: kube_lite::RunningServer,
    pub client: kube::Client,
    pub dir: tempfile::TempDir,
}

impl Env {
    /// kube-lite with the CRDs from deploy/crds and the namespaces [`NS`] and [`SYSTEM_NS`].
    pub async fn new() -> Env {
        let kube = kube_lite::Server::start(kube_lite::Config::default())
            .await
            .expect("kube-lite starts");
        let client = kube.client().expect("client");
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .expect("deploy/crds")
            .filter_map(Result::ok)
            .map(|e| e.path())
            .collect();
        files.sort();
        for path in files {
            let text = std::fs::read_to_string(&path).expect("read CRD");
            let crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("CRD YAML");
            crds.create(&PostParams::default(), &crd)
                .await
                .expect("create CRD");
        }
        let namespaces: Api<Namespace> = Api::all(client.clone());
        for name in [NS, SYSTEM_NS] {
            let ns: Namespace =
                serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace");
            namespaces
                .create(&PostParams::default(), &ns)
                .await
                .expect("namespace");
        }
        let dir = tempfile::tempdir().expect("tempdir");
        Env { kube, client, dir }
    }

    pub fn kubeconfig(&self) -> PathBuf {
        let path = self.dir.path().join("kubeconfig");
        self.kube.write_kubeconfig(&path).expect("kubeconfig");
        path
    }

    pub fn hardware_api(&self) -> Api<Hardware> {
        Api::namespaced(self.client.clone(), NS)
    }

    pub async fn create_hardware(&self, name: &str, spec: Value) -> Hardware {
        let hw: Hardware = serde_json::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": name, "namespace": NS},
            "spec": spec,
        }))
        .expect("Hardware");
        self.hardware_api()
            .create(&PostParams::default(), &hw)
            .await
            .expect("create Hardware")
    }

    pub async fn patch_hardware(&self, name: &str, patch: Value) {
        self.hardware_api()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch Hardware");
    }

    pub async fn create_osie(&self, name: &str, kernel: &str, initrd: &str) {
        let osie: Osie = serde_json::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "OSIE",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"kernelUrl": kernel, "initrdUrl": initrd},
        }))
        .expect("OSIE");
        Api::<Osie>::namespaced(self.client.clone(), NS)
            .create(&PostParams::default(), &osie)
            .await
            .expect("create OSIE");
    }

    pub async fn stop(self) {
        self.kube.shutdown().await;
    }
}

/// Polls `f` until it returns `Some`, for at most `deadline`.
pub async fn eventually<T, F, Fut>(what: &str, deadline: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    tokio::time::timeout(deadline, async {
        loop {
            if let Some(v) = f().await {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}: not within {deadline:?}"))
}
