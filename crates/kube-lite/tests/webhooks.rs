//! Admission and conversion webhooks called over HTTPS. These run against an in-process
//! kube-lite only: a real cluster cannot reach a webhook on this machine's loopback.
//! Certificates come from the `openssl` command line tool.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use futures::TryStreamExt;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{
    DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use tokio_rustls::rustls;

struct Cert {
    pem: Vec<u8>,
    key: Vec<u8>,
}

fn make_cert(dir: &Path, name: &str, dns: &str) -> Cert {
    let key = dir.join(format!("{name}.key"));
    let crt = dir.join(format!("{name}.crt"));
    let status = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
        ])
        .arg(format!("/CN={name}"))
        .arg("-addext")
        .arg(format!("subjectAltName=IP:127.0.0.1,DNS:{dns}"))
        .args(["-addext", "basicConstraints=critical,CA:FALSE", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("running openssl (Debian package openssl)");
    assert!(status.success(), "openssl failed");
    Cert {
        pem: std::fs::read(&crt).expect("cert"),
        key: std::fs::read(&key).expect("key"),
    }
}

#[derive(Default)]
struct Calls {
    validate: AtomicUsize,
    mutate: AtomicUsize,
    convert: AtomicUsize,
}

fn convert_object(mut obj: Value, to: &str) -> Value {
    let from = obj["apiVersion"].as_str().unwrap_or_default().to_string();
    let (src, dst) = if from.ends_with("/v1beta1") && to.ends_with("/v1") {
        ("legacySize", "size")
    } else if from.ends_with("/v1") && to.ends_with("/v1beta1") {
        ("size", "legacySize")
    } else {
        ("", "")
    };
    if let Some(v) = obj["spec"].as_object_mut().and_then(|s| s.remove(src)) {
        obj["spec"][dst] = v;
    }
    obj["apiVersion"] = json!(to);
    obj
}

async fn answer(path: &str, review: Value, calls: &Calls) -> Value {
    match path {
        "/validate" => {
            calls.validate.fetch_add(1, Ordering::SeqCst);
            let req = &review["request"];
            let deny = req["object"]["data"]["deny"] == json!("yes");
            let mut resp = json!({"uid": req["uid"], "allowed": !deny});
            if let Some(w) = req["object"]["data"]["warn"].as_str() {
                // Twice: the API server writes each text once.
                let text = format!("data.warn: {w:?} is deprecated; use data.note");
                resp["warnings"] = json!([text, text, "a second warning"]);
            }
            if deny {
                resp["status"] =
                    json!({"code": 403, "message": "configmaps with deny=yes are refused"});
            }
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp})
        }
        "/mutate" => {
            calls.mutate.fetch_add(1, Ordering::SeqCst);
            let req = &review["request"];
            let has_labels = req["object"]["metadata"].get("labels").is_some();
            let patch = if has_labels {
                json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}])
            } else {
                json!([{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}])
            };
            let patch = base64::engine::general_purpose::STANDARD.encode(patch.to_string());
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": req["uid"], "allowed": true, "patchType": "JSONPatch", "patch": patch}})
        }
        "/whoami" => {
            // Refuses with the request's userInfo as the message, so the client sees it.
            let req = &review["request"];
            let resp = json!({"uid": req["uid"], "allowed": false,
                "status": {"code": 403, "message": req["userInfo"].to_string()}});
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp})
        }
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(5)).await;
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": review["request"]["uid"], "allowed": true}})
        }
        "/convert" => {
            calls.convert.fetch_add(1, Ordering::SeqCst);
            let req = &review["request"];
            let to = req["desiredAPIVersion"].as_str().unwrap_or_default();
            let objects: Vec<Value> = req["objects"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|o| convert_object(o, to))
                .collect();
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                "response": {"uid": req["uid"], "result": {"status": "Success"}, "convertedObjects": objects}})
        }
        _ => json!({}),
    }
}

/// An HTTPS webhook server on loopback.
async fn webhook_server(cert: &Cert, calls: Arc<Calls>) -> SocketAddr {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert.pem)
        .collect::<Result<_, _>>()
        .expect("certs");
    let key = PrivateKeyDer::from_pem_slice(&cert.key).expect("key");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("tls versions")
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .expect("server cert");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let calls = calls.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let calls = calls.clone();
                        async move {
                            let path = req.uri().path().to_string();
                            let body = req
                                .into_body()
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let review: Value =
                                serde_json::from_slice(&body).unwrap_or(Value::Null);
                            let out = answer(&path, review, &calls).await;
                            Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from(
                                out.to_string(),
                            ))))
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    addr
}

fn ca(cert: &Cert) -> String {
    base64::engine::general_purpose::STANDARD.encode(&cert.pem)
}

async fn create_ns(client: &kube::Client, ns: &str) {
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns"),
    )
    .await
    .expect("namespace");
}

async fn apply(client: &kube::Client, v: Value) {
    let obj: DynamicObject = serde_json::from_value(v.clone()).expect("object");
    let av = v["apiVersion"].as_str().unwrap_or_default();
    let (g, ver) = av.split_once('/').unwrap_or(("", av));
    let kind = v["kind"].as_str().unwrap_or_default();
    let plural = format!("{}s", kind.to_lowercase());
    let ar = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk(g, ver, kind),
        &plural,
    );
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let name = v["metadata"]["name"].as_str().unwrap_or_default();
    api.patch(
        name,
        &PatchParams::apply("webhook-test"),
        &Patch::Apply(&obj),
    )
    .await
    .expect("apply");
}

fn cm(name: &str, deny: bool) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name}, "data": {"deny": if deny { "yes" } else { "no" }}}),
    )
    .expect("cm")
}

#[tokio::test]
async fn validating_webhook_honours_ca_failure_policy_and_timeout() {
    let dir = tempfile::tempdir().expect("tmp");
    let cert = make_cert(dir.path(), "webhook", "localhost");
    let other = make_cert(dir.path(), "other", "localhost");
    let calls = Arc::new(Calls::default());
    let addr = webhook_server(&cert, calls.clone()).await;
    let server = kube_lite::Server::start(kube_lite::Config::default())
        .await
        .expect("kube-lite");
    let client = server.client().expect("client");
    create_ns(&client, "hooked").await;
    create_ns(&client, "free").await;
    let webhook = |name: &str, path: &str, ca_pem: String, policy: &str, timeout: u64| {
        json!({"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": policy, "timeoutSeconds": timeout,
            "clientConfig": {"url": format!("https://127.0.0.1:{}{path}", addr.port()), "caBundle": ca_pem},
            "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "hooked"}},
            "objectSelector": {"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]}})
    };
    apply(&client, json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "deny"}, "webhooks": [webhook("deny.lite.example.com", "/validate", ca(&cert), "Fail", 5)]}))
    .await;
    let hooked: Api<ConfigMap> = Api::namespaced(client.clone(), "hooked");
    hooked
        .create(&PostParams::default(), &cm("fine", false))
        .await
        .expect("allowed");
    let e = match hooked
        .create(&PostParams::default(), &cm("bad", true))
        .await
    {
        Err(kube::Error::Api(s)) => s,
        other => panic!("expected a denial, got {other:?}"),
    };
    assert_eq!(e.code, 403);
    assert_eq!(
        e.message,
        "admission webhook \"deny.lite.example.com\" denied the request: configmaps with deny=yes are refused"
    );
    let e = hooked
        .patch(
            "fine",
            &PatchParams::default(),
            &Patch::Merge(&json!({"data": {"deny": "yes"}})),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, kube::Error::Api(s) if s.code == 403));
    // Not selected: another namespace, or an object with the skip label.
    let free: Api<ConfigMap> = Api::namespaced(client.clone(), "free");
    free.create(&PostParams::default(), &cm("bad", true))
        .await
        .expect("namespaceSelector excludes");
    let mut skipped = cm("skipped", true);
    skipped.metadata.labels = Some([("skip".to_string(), "1".to_string())].into());
    hooked
        .create(&PostParams::default(), &skipped)
        .await
        .expect("objectSelector excludes");
    // Dry run still asks the webhook.
    let before = calls.validate.load(Ordering::SeqCst);
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    assert!(hooked.create(&dry, &cm("dry", true)).await.is_err());
    assert_eq!(calls.validate.load(Ordering::SeqCst), before + 1);

    // A caBundle that did not sign the webhook's certificate: Fail refuses, Ignore lets through.
    apply(&client, json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "deny"}, "webhooks": [webhook("deny.lite.example.com", "/validate", ca(&other), "Fail", 5)]}))
    .await;
    let e = match hooked
        .create(&PostParams::default(), &cm("tls", false))
        .await
    {
        Err(kube::Error::Api(s)) => s,
        other => panic!("expected a TLS failure, got {other:?}"),
    };
    assert_eq!(e.code, 500);
    assert!(
        e.message
            .contains("failed calling webhook \"deny.lite.example.com\""),
        "{}",
        e.message
    );
    apply(&client, json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "deny"}, "webhooks": [webhook("deny.lite.example.com", "/validate", ca(&other), "Ignore", 5)]}))
    .await;
    hooked
        .create(&PostParams::default(), &cm("tls-ignored", true))
        .await
        .expect("failurePolicy Ignore");

    // A webhook slower than its timeoutSeconds.
    apply(&client, json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "deny"}, "webhooks": [webhook("slow.lite.example.com", "/slow", ca(&cert), "Fail", 1)]}))
    .await;
    let e = match hooked
        .create(&PostParams::default(), &cm("slow", false))
        .await
    {
        Err(kube::Error::Api(s)) => s,
        other => panic!("expected a timeout, got {other:?}"),
    };
    assert_eq!(e.code, 500);
    assert!(e.message.contains("deadline exceeded"), "{}", e.message);
    server.shutdown().await;
}

/// POSTs a ConfigMap to kube-lite over plain HTTP: the status and the `Warning` headers.
async fn post_configmap(
    server: &kube_lite::RunningServer,
    ns: &str,
    cm: &ConfigMap,
) -> (u16, Vec<String>) {
    let (code, warnings, _) = post_configmap_as(server, ns, cm, None).await;
    (code, warnings)
}

/// POSTs a ConfigMap with `Authorization: Bearer <token>` when given: the status, the
/// `Warning` headers and the answer's body.
async fn post_configmap_as(
    server: &kube_lite::RunningServer,
    ns: &str,
    cm: &ConfigMap,
    token: Option<&str>,
) -> (u16, Vec<String>, Value) {
    let tcp = tokio::net::TcpStream::connect(server.addr())
        .await
        .expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let mut req = http::Request::post(format!("/api/v1/namespaces/{ns}/configmaps"))
        .header("host", "kube-lite")
        .header("content-type", "application/json");
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    let req = req
        .body(Full::new(Bytes::from(
            serde_json::to_vec(cm).expect("json"),
        )))
        .expect("request");
    let resp = sender.send_request(req).await.expect("response");
    let warnings = resp
        .headers()
        .get_all(http::header::WARNING)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect();
    let code = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    (
        code,
        warnings,
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn admission_reviews_name_the_user_of_the_bearer_token() {
    let dir = tempfile::tempdir().expect("tmp");
    let cert = make_cert(dir.path(), "webhook", "localhost");
    let addr = webhook_server(&cert, Arc::new(Calls::default())).await;
    let tokens = "t-alice,alice,u-1,\"ops,dev\"\nt-bob,bob,u-2\n";
    let server = kube_lite::Server::start_with_tokens(dir.path(), tokens)
        .await
        .expect("kube-lite");
    let client = server.client().expect("client");
    create_ns(&client, "who").await;
    apply(&client, json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "whoami"}, "webhooks": [{"name": "whoami.lite.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": {"url": format!("https://127.0.0.1:{}/whoami", addr.port()), "caBundle": ca(&cert)},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]}]}))
    .await;
    let user_info = |body: &Value| -> Value {
        let message = body["message"].as_str().unwrap_or_default();
        let json = message
            .split_once("denied the request: ")
            .map(|(_, m)| m)
            .unwrap_or_default();
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {body}"))
    };
    let admin = json!({"username": "kube-lite-admin", "uid": "kube-lite-admin",
        "groups": ["system:masters", "system:authenticated"]});
    let cases = [
        (
            Some("t-alice"),
            json!({"username": "alice", "uid": "u-1", "groups": ["ops", "dev", "system:authenticated"]}),
        ),
        (
            Some("t-bob"),
            json!({"username": "bob", "uid": "u-2", "groups": ["system:authenticated"]}),
        ),
        (Some(kube_lite::auth::ADMIN_TOKEN), admin.clone()),
        // No token or an unknown one: admin, as kube-lite treats every request.
        (
            None,
            json!({"username": "kube-lite-admin", "groups": ["system:masters", "system:authenticated"]}),
        ),
        (
            Some("t-nobody"),
            json!({"username": "kube-lite-admin", "groups": ["system:masters", "system:authenticated"]}),
        ),
    ];
    for (token, want) in cases {
        let (code, _, body) = post_configmap_as(&server, "who", &cm("c", false), token).await;
        assert_eq!(code, 403, "{token:?}: {body}");
        assert_eq!(user_info(&body), want, "{token:?}");
    }
    server.shutdown().await;
}

fn warned_cm(name: &str, deny: bool) -> ConfigMap {
    let mut c = cm(name, deny);
    c.data
        .get_or_insert_with(Default::default)
        .insert("warn".into(), "old".into());
    c
}

#[tokio::test]
async fn admission_warnings_reach_the_client_as_warning_headers() {
    let dir = tempfile::tempdir().expect("tmp");
    let cert = make_cert(dir.path(), "webhook", "localhost");
    let calls = Arc::new(Calls::default());
    let addr = webhook_server(&cert, calls.clone()).await;
    let server = kube_lite::Server::start(kube_lite::Config::default())
        .await
        .expect("kube-lite");
    let client = server.client().expect("client");
    create_ns(&client, "warned").await;
    apply(&client, json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "warn"}, "webhooks": [{"name": "warn.lite.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": {"url": format!("https://127.0.0.1:{}/validate", addr.port()), "caBundle": ca(&cert)},
            "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]}]}))
    .await;
    let expected = vec![
        r#"299 - "data.warn: \"old\" is deprecated; use data.note""#.to_string(),
        r#"299 - "a second warning""#.to_string(),
    ];
    // Allowed: the warnings, once each, in order.
    let (code, warnings) = post_configmap(&server, "warned", &warned_cm("w1", false)).await;
    assert_eq!(code, 201);
    assert_eq!(warnings, expected);
    // Denied: the warnings still come back with the 403.
    let (code, warnings) = post_configmap(&server, "warned", &warned_cm("w2", true)).await;
    assert_eq!(code, 403);
    assert_eq!(warnings, expected);
    // No warnings from the webhook, no header.
    let (code, warnings) = post_configmap(&server, "warned", &cm("quiet", false)).await;
    assert_eq!(code, 201);
    assert!(warnings.is_empty(), "{warnings:?}");

    // kubectl (client-go) parses the headers and prints them on stderr.
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let manifest = dir.path().join("cm.json");
    let mut with_kind = serde_json::to_value(warned_cm("w3", false)).expect("json");
    with_kind["apiVersion"] = json!("v1");
    with_kind["kind"] = json!("ConfigMap");
    std::fs::write(&manifest, with_kind.to_string()).expect("manifest");
    let out = tokio::process::Command::new("kubectl")
        .arg("apply")
        .arg("-n")
        .arg("warned")
        .arg("-f")
        .arg(&manifest)
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .await
        .expect("running kubectl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("Warning: data.warn: \"old\" is deprecated; use data.note\n"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("Warning: a second warning").count(),
        1,
        "{stderr}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn mutating_webhook_patches_objects() {
    let dir = tempfile::tempdir().expect("tmp");
    let cert = make_cert(dir.path(), "webhook", "localhost");
    let calls = Arc::new(Calls::default());
    let addr = webhook_server(&cert, calls.clone()).await;
    let server = kube_lite::Server::start(kube_lite::Config::default())
        .await
        .expect("kube-lite");
    let client = server.client().expect("client");
    create_ns(&client, "mut").await;
    apply(&client, json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "label"}, "webhooks": [{"name": "label.lite.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": {"url": format!("https://127.0.0.1:{}/mutate", addr.port()), "caBundle": ca(&cert)},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]}]}))
    .await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "mut");
    let created = api
        .create(&PostParams::default(), &cm("m", false))
        .await
        .expect("create");
    assert_eq!(
        created
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("mutated"))
            .map(String::as_str),
        Some("yes")
    );
    assert_eq!(calls.mutate.load(Ordering::SeqCst), 1);
    // UPDATE is not in the rules.
    api.patch(
        "m",
        &PatchParams::default(),
        &Patch::Merge(&json!({"data": {"x": "y"}})),
    )
    .await
    .expect("update");
    assert_eq!(calls.mutate.load(Ordering::SeqCst), 1);
    server.shutdown().await;
}

fn gadget_crd() -> Value {
    let schema = |field: &str| json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {field: {"type": "integer", "minimum": 0}}}}});
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.lite.example.com"},
        "spec": {
            "group": "lite.example.com", "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "conversion": {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
                "clientConfig": {"service": {"namespace": "tink-system", "name": "tink-webhook", "path": "/convert"}}}},
            "versions": [
                {"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": schema("size")}},
                {"name": "v1beta1", "served": true, "storage": false, "schema": {"openAPIV3Schema": schema("legacySize")}}
            ]
        }
    })
}

#[tokio::test]
async fn conversion_webhook_serves_every_version() {
    let dir = tempfile::tempdir().expect("tmp");
    // A real API server checks the certificate for <service>.<namespace>.svc.
    let cert = make_cert(dir.path(), "webhook", "tink-webhook.tink-system.svc");
    let calls = Arc::new(Calls::default());
    // The API server first (a webhook usually needs it), then the webhook and its Service.
    let server = kube_lite::Server::start(kube_lite::Config::default())
        .await
        .expect("kube-lite");
    let addr = webhook_server(&cert, calls.clone()).await;
    server.map_service(
        "tink-system/tink-webhook",
        format!("https://127.0.0.1:{}", addr.port()),
    );
    let client = server.client().expect("client");
    create_ns(&client, "conv").await;
    let mut crd = gadget_crd();
    crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"] = json!(ca(&cert));
    apply(&client, crd).await;
    let gvk = |v: &str| kube::api::GroupVersionKind::gvk("lite.example.com", v, "Gadget");
    let api = |v: &str| -> Api<DynamicObject> {
        Api::namespaced_with(
            client.clone(),
            "conv",
            &kube::api::ApiResource::from_gvk_with_plural(&gvk(v), "gadgets"),
        )
    };
    let beta = api("v1beta1");
    let stable = api("v1");
    let obj: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "lite.example.com/v1beta1", "kind": "Gadget",
        "metadata": {"name": "g1"}, "spec": {"legacySize": 7}}),
    )
    .expect("gadget");
    let created = beta
        .create(&PostParams::default(), &obj)
        .await
        .expect("create as v1beta1");
    assert_eq!(created.data["spec"]["legacySize"], json!(7));
    let as_v1 = stable.get("g1").await.expect("get as v1");
    assert_eq!(as_v1.data["spec"], json!({"size": 7}));
    assert!(calls.convert.load(Ordering::SeqCst) >= 2);

    let listed = beta
        .list(&ListParams::default())
        .await
        .expect("list as v1beta1");
    assert_eq!(listed.items[0].data["spec"], json!({"legacySize": 7}));
    let rv = listed.metadata.resource_version.expect("rv");
    stable
        .patch(
            "g1",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"size": 8}})),
        )
        .await
        .expect("patch as v1");
    let mut events = Box::pin(
        beta.watch(&WatchParams::default(), &rv)
            .await
            .expect("watch as v1beta1"),
    );
    match events.try_next().await.expect("watch").expect("event") {
        WatchEvent::Modified(o) => assert_eq!(o.data["spec"], json!({"legacySize": 8})),
        other => panic!("unexpected {other:?}"),
    }
    // Validation uses the schema of the version the client speaks.
    let bad: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "lite.example.com/v1beta1", "kind": "Gadget",
        "metadata": {"name": "g2"}, "spec": {"legacySize": -1}}),
    )
    .expect("gadget");
    let e = beta.create(&PostParams::default(), &bad).await.unwrap_err();
    assert!(
        matches!(e, kube::Error::Api(s) if s.code == 422 && s.message.contains("spec.legacySize"))
    );
    server.shutdown().await;
}
