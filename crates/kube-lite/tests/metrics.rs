//! `/metrics`: requests on resource paths counted by verb, resource, subresource and code.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

#[tokio::test]
async fn requests_are_counted_by_verb_resource_and_code() {
    let server = kube_lite::Server::start(kube_lite::Config::default())
        .await
        .expect("start");
    let client = server.client().expect("client");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "a"}, "data": {"k": "v"}}))
            .expect("configmap");
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("create");
    // A second create of the same name is a 409, counted apart.
    assert!(cms.create(&PostParams::default(), &cm).await.is_err());
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "w"}})),
    )
    .await
    .expect("patch");
    cms.get("a").await.expect("get");

    let counts = server.request_counts();
    let n = |verb: &str, code: u16| {
        counts
            .iter()
            .filter(|(k, _)| k.verb == verb && k.resource == "configmaps" && k.code == code)
            .map(|(_, n)| *n)
            .sum::<u64>()
    };
    assert_eq!(n("create", 201), 1);
    assert_eq!(n("create", 409), 1);
    assert_eq!(n("patch", 200), 1);
    assert_eq!(n("get", 200), 1);
    let writes: u64 = counts
        .iter()
        .filter(|(k, _)| k.is_write() && k.resource == "configmaps")
        .map(|(_, n)| *n)
        .sum();
    assert_eq!(writes, 3);

    let text = http_get(server.addr(), "/metrics").await;
    assert!(
        text.contains(
            "kube_lite_requests_total{verb=\"patch\",group=\"\",resource=\"configmaps\",subresource=\"\",code=\"200\"} 1"
        ),
        "{text}"
    );
    server.shutdown().await;
}

/// A plain HTTP/1.1 GET over a TCP stream; the body as text.
async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.expect("write");
    let mut out = String::new();
    tcp.read_to_string(&mut out).await.expect("read");
    out
}
