//! Hostile input: arbitrary bytes, mutated JSON, odd content types and paths never crash the
//! server and always get a Kubernetes `Status` with a 4xx code (or a success).

use proptest::prelude::*;
use serde_json::{Value, json};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Sends a raw request and returns (status, body).
async fn send(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    ct: &str,
    body: Vec<u8>,
) -> (u16, Vec<u8>) {
    use http_body_util::{BodyExt, Full};
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .expect("handshake");
    tokio::spawn(conn);
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string())
        .header("content-type", ct)
        .body(Full::new(bytes::Bytes::from(body)))
        .expect("request");
    let res = sender.send_request(req).await.expect("the server answers");
    let status = res.status().as_u16();
    let body = res
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes()
        .to_vec();
    (status, body)
}

fn check(status: u16, body: &[u8]) {
    assert!(
        status < 500,
        "server error {status}: {}",
        String::from_utf8_lossy(body)
    );
    if status >= 400 {
        let v: Value = serde_json::from_slice(body).expect("errors are JSON");
        assert_eq!(v["kind"], json!("Status"));
        assert_eq!(v["code"], json!(status));
    }
}

fn seed_objects() -> Vec<Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"a": "b"}}, "data": {"k": "v"}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "dg=="}, "stringData": {"x": "y"}}),
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}, "spec": {"holderIdentity": "h"}}),
    ]
}

/// Replaces one value somewhere in the document with `replacement`.
fn mutate(v: &mut Value, path: &[usize], replacement: Value) {
    if path.is_empty() {
        *v = replacement;
        return;
    }
    match v {
        Value::Object(m) if !m.is_empty() => {
            let n = m.len();
            let key = m.keys().nth(path[0] % n).cloned().unwrap_or_default();
            if let Some(child) = m.get_mut(&key) {
                mutate(child, &path[1..], replacement);
            }
        }
        Value::Array(a) if !a.is_empty() => {
            let n = a.len();
            mutate(&mut a[path[0] % n], &path[1..], replacement);
        }
        other => *other = replacement,
    }
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

const CONTENT_TYPES: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/merge-patch+json",
    "application/json-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
    "application/vnd.kubernetes.protobuf",
    "text/plain",
    "",
];

const PATHS: &[&str] = &[
    "/api/v1/namespaces/default/configmaps",
    "/api/v1/namespaces/default/configmaps/c",
    "/api/v1/namespaces/default/secrets",
    "/api/v1/namespaces/default/secrets/s?fieldManager=fuzz",
    "/apis/coordination.k8s.io/v1/namespaces/default/leases/l?dryRun=All",
    "/api/v1/namespaces",
    "/api/v1/namespaces/default/status",
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    "/api/v1/namespaces/default/configmaps?labelSelector=a%20in%20(b",
    "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=abc",
    "/apis/nope/v1/things",
    "/api/v1/namespaces/default/configmaps/c?limit=x",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, .. ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_get_status_errors(
        body in prop::collection::vec(any::<u8>(), 0..256),
        method in prop::sample::select(vec!["POST", "PUT", "PATCH", "DELETE"]),
        path in prop::sample::select(PATHS.to_vec()),
        ct in prop::sample::select(CONTENT_TYPES.to_vec()),
    ) {
        let rt = runtime();
        rt.block_on(async {
            let server = kube_lite::Server::start(kube_lite::Config::default()).await.expect("start");
            let (status, resp) = send(server.addr(), method, path, ct, body).await;
            check(status, &resp);
            server.shutdown().await;
        });
    }

    #[test]
    fn mutated_objects_get_status_errors(
        seed in 0usize..3,
        mutation in prop::collection::vec(0usize..8, 0..4),
        replacement in any_json(),
        method in prop::sample::select(vec!["POST", "PUT", "PATCH"]),
        ct in prop::sample::select(CONTENT_TYPES[..6].to_vec()),
    ) {
        let rt = runtime();
        rt.block_on(async {
            let server = kube_lite::Server::start(kube_lite::Config::default()).await.expect("start");
            let addr = server.addr();
            let objects = seed_objects();
            let paths = ["/api/v1/namespaces/default/configmaps", "/api/v1/namespaces/default/secrets", "/apis/coordination.k8s.io/v1/namespaces/default/leases"];
            // The object exists, so updates and patches reach the decoding and merge code.
            let (status, resp) = send(addr, "POST", paths[seed], "application/json", serde_json::to_vec(&objects[seed]).expect("json")).await;
            assert_eq!(status, 201, "{}", String::from_utf8_lossy(&resp));
            let mut doc = objects[seed].clone();
            mutate(&mut doc, &mutation, replacement);
            let name = objects[seed]["metadata"]["name"].as_str().unwrap_or_default();
            let path = if method == "POST" { paths[seed].to_string() } else { format!("{}/{name}?fieldManager=fuzz", paths[seed]) };
            let (status, resp) = send(addr, method, &path, ct, serde_json::to_vec(&doc).expect("json")).await;
            check(status, &resp);
            server.shutdown().await;
        });
    }
}

#[test]
fn protobuf_decoding_never_panics() {
    proptest!(|(body in prop::collection::vec(any::<u8>(), 0..512))| {
        let mut framed = b"k8s\0".to_vec();
        framed.extend_from_slice(&body);
        if let Err(e) = kube_lite::decode_body("application/vnd.kubernetes.protobuf", &framed) {
            prop_assert!(e.code == 400 || e.code == 415);
        }
    });
}

#[test]
fn decode_body_never_panics_on_arbitrary_input() {
    proptest!(|(body in prop::collection::vec(any::<u8>(), 0..512), ct in prop::sample::select(CONTENT_TYPES.to_vec()))| {
        if let Err(e) = kube_lite::decode_body(ct, &body) {
            prop_assert!(e.code == 400 || e.code == 415);
        }
    });
}
