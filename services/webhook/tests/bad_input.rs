//! Malformed AdmissionReview and ConversionReview bodies over HTTPS: always an error answer
//! (HTTP 400 with a Status, or a refusal / Failure carrying the uid), never a crash or a dropped
//! connection. Arbitrary bytes, arbitrary JSON and valid reviews with one value replaced.

mod common;

use std::sync::Arc;

use common::{certificates, post};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use tink_webhook::{AppState, Index, Metrics, ServeLimits, router, serve};
use tokio_util::sync::CancellationToken;

fn admission_review() -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": "tinkerbell.org", "version": "v1alpha1", "kind": "Template"},
        "resource": {"group": "tinkerbell.org", "version": "v1alpha1", "resource": "templates"},
        "namespace": "ns", "name": "t", "operation": "UPDATE",
        "object": {"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Template", "metadata": {"name": "t"},
            "spec": {"data": "version: \"0.1\"\nname: t\ntasks:\n- name: a\n  worker: x\n  actions:\n  - name: b\n    image: alpine\n    timeout: 1\n"}},
        "oldObject": {"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow", "metadata": {"name": "w"},
            "spec": {"hardwareRef": {"name": "h"}, "templateRef": {"name": "t"}}, "status": {"state": "Running"}},
    }})
}

fn conversion_review() -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "request": {
    "uid": "c", "desiredAPIVersion": "tinkerbell.org/v1alpha2", "objects": [
        {"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Hardware", "metadata": {"name": "h", "uid": "x"},
            "spec": {"interfaces": [{"dhcp": {"mac": "aa:bb:cc:dd:ee:ff", "ip": {"address": "10.0.0.1"}}}]}},
        {"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Workflow", "metadata": {"name": "w"},
            "spec": {"hardwareRef": "h", "templateRef": "t", "hardwareMap": {"device_1": "x"}}},
    ]}})
}

fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                pointers(
                    x,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                pointers(x, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,20}".prop_map(Value::String),
        Just(json!("tinkerbell.org/v1alpha1")),
        Just(json!("{{ if }")),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

#[derive(Debug, Clone)]
enum Body {
    Bytes(Vec<u8>),
    Json(Value),
    Mutated {
        review: usize,
        at: usize,
        with: Value,
    },
}

fn body() -> impl Strategy<Value = Body> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256).prop_map(Body::Bytes),
        json_value().prop_map(Body::Json),
        (0..2usize, any::<usize>(), json_value()).prop_map(|(review, at, with)| Body::Mutated {
            review,
            at,
            with
        }),
    ]
}

fn render(b: &Body) -> Vec<u8> {
    match b {
        Body::Bytes(b) => b.clone(),
        Body::Json(v) => v.to_string().into_bytes(),
        Body::Mutated { review, at, with } => {
            let mut doc = if *review == 0 {
                admission_review()
            } else {
                conversion_review()
            };
            let mut ps = Vec::new();
            pointers(&doc, String::new(), &mut ps);
            let p = &ps[at % ps.len()];
            if p.is_empty() {
                doc = with.clone();
            } else if let Some(slot) = doc.pointer_mut(p) {
                *slot = with.clone();
            }
            doc.to_string().into_bytes()
        }
    }
}

#[test]
fn malformed_reviews_are_answered_with_an_error_never_a_crash() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let certs = certificates();
    let shutdown = CancellationToken::new();
    let index = Arc::new(Index::default());
    index.mark_synced();
    let limits = ServeLimits {
        max_body_bytes: 1 << 20,
        ..ServeLimits::default()
    };
    let (addr, server) = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let key =
            tink_webhook::tls::certified_key(certs.cert_pem.as_bytes(), certs.key_pem.as_bytes())
                .unwrap();
        let store = tink_webhook::tls::CertStore::new(key);
        let tls = Arc::new(store.server_config().unwrap());
        let app = router(AppState::new(index, Metrics::default(), &limits), &limits);
        (
            addr,
            tokio::spawn(serve(listener, tls, app, limits.clone(), shutdown.clone())),
        )
    });

    let mut runner = TestRunner::new(Config {
        cases: 200,
        ..Config::default()
    });
    runner
        .run(&(body(), any::<bool>()), |(b, admission)| {
            let path = if admission { "/validate" } else { "/convert" };
            let sent = render(&b);
            let (status, answer) = rt
                .block_on(post(addr, &certs.ca_pem, path, sent))
                .map_err(|e| TestCaseError::fail(format!("no answer: {e}")))?;
            prop_assert!(status == 200 || status == 400, "status {status}: {answer}");
            prop_assert!(answer.is_object(), "not a JSON object: {answer}");
            if status == 200 {
                let r = &answer["response"];
                prop_assert!(r["uid"].is_string(), "{answer}");
                if admission {
                    prop_assert!(r["allowed"].is_boolean(), "{answer}");
                } else {
                    let s = r["result"]["status"].as_str();
                    prop_assert!(s == Some("Success") || s == Some("Failure"), "{answer}");
                }
            } else {
                prop_assert_eq!(&answer["kind"], "Status");
                prop_assert!(
                    answer["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("malformed")),
                    "{answer}"
                );
            }
            Ok(())
        })
        .unwrap();

    // Still serving, and a valid review gets a real answer.
    let (status, answer) = rt
        .block_on(post(
            addr,
            &certs.ca_pem,
            "/convert",
            conversion_review().to_string().into_bytes(),
        ))
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        answer["response"]["result"]["status"], "Success",
        "{answer}"
    );
    assert_eq!(
        answer["response"]["convertedObjects"][0]["metadata"]["uid"],
        "x"
    );
    // Oversized bodies are refused before they are read: the 413 may come back before the
    // client has written the whole body, which then fails to write (the server closed).
    match rt.block_on(post(
        addr,
        &certs.ca_pem,
        "/validate",
        vec![b' '; limits.max_body_bytes + 1],
    )) {
        Ok((status, _)) => assert_eq!(status, 413),
        Err(e) => assert!(e.contains("writing a body"), "{e}"),
    }
    shutdown.cancel();
    rt.block_on(server).unwrap().unwrap();
}
