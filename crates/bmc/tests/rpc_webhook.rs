//! The RPC provider against a consumer that checks bmclib's HMAC signature format.

mod fixture;

use std::collections::BTreeMap;
use std::time::Duration;

use ring::hmac;
use serde_json::{Value, json};
use tink_api::bmc::{BootDevice, PowerState, RpcOptions};
use tink_bmc::rpc::{Rpc, RpcConfig};
use tink_bmc::{Bmc, ErrorKind, Limits, Policy, PowerChange, Secret, TlsConfig};

const KEY_A: &str = "superSecret1";
const KEY_B: &str = "superSecret2";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A consumer that answers only requests signed with `KEY_A` or `KEY_B` (sha256 and sha512),
/// the way bmclib signs them: body followed by the timestamp header's value.
fn consumer(req: &fixture::Request) -> fixture::Reply {
    let Some(ts) = req.header("X-Rufio-Timestamp") else {
        return fixture::Reply::json(
            400,
            json!({"error": {"code": 1, "message": "no timestamp"}}),
        );
    };
    let mut signed = req.body.clone();
    signed.extend_from_slice(ts.as_bytes());
    for (header, alg, prefix) in [
        ("X-Rufio-Signature-256", hmac::HMAC_SHA256, "sha256="),
        ("X-Rufio-Signature-512", hmac::HMAC_SHA512, "sha512="),
    ] {
        let got = req.header(header).unwrap_or_default();
        let want: Vec<String> = [KEY_A, KEY_B]
            .iter()
            .map(|k| {
                let key = hmac::Key::new(alg, k.as_bytes());
                format!("{prefix}{}", hex(hmac::sign(&key, &signed).as_ref()))
            })
            .collect();
        if got != want.join(",") {
            return fixture::Reply::json(
                401,
                json!({"error": {"code": 401, "message": "bad signature"}}),
            );
        }
    }
    let body: Value = serde_json::from_slice(&req.body).unwrap_or_default();
    let result = match body["method"].as_str() {
        Some("getPowerState") => json!("on"),
        Some("setPowerState") if body["params"]["state"] == "cycle" => {
            return fixture::Reply::json(
                200,
                json!({"id": body["id"], "host": body["host"],
                "error": {"code": 500, "message": "cycle refused by the PDU"}}),
            );
        }
        Some(_) => json!("ok"),
        None => json!(null),
    };
    fixture::Reply::json(
        200,
        json!({"id": body["id"], "host": body["host"], "result": result}),
    )
}

fn client(url: &str, secrets: &[(&str, &str)]) -> Rpc {
    client_in(url, secrets, "")
}

/// A client allowed into `nets` (comma-separated; any network when empty).
fn client_in(url: &str, secrets: &[(&str, &str)], nets: &str) -> Rpc {
    let mut map: BTreeMap<String, Vec<Secret>> = BTreeMap::new();
    for (algo, s) in secrets {
        map.entry((*algo).into()).or_default().push(Secret::new(*s));
    }
    Rpc::new(
        RpcConfig {
            host: "10.0.0.9".into(),
            options: RpcOptions {
                consumer_url: url.into(),
                ..RpcOptions::default()
            },
            secrets: map,
            tls: TlsConfig::default(),
        },
        Policy {
            timeout: Duration::from_secs(2),
            attempts: 2,
            backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(50),
            allowed_networks: tink_bmc::net::parse_networks(nets).expect("networks"),
        },
        Limits::default(),
    )
    .expect("client")
}

#[tokio::test]
async fn signed_requests_in_bmclibs_format() {
    let server = fixture::serve(consumer).await;
    let url = format!("http://{}/rpc", server.addr);
    let keys = [
        ("sha256", KEY_A),
        ("sha256", KEY_B),
        ("sha512", KEY_A),
        ("sha512", KEY_B),
    ];
    let bmc = client(&url, &keys);
    assert_eq!(bmc.power_state().await.expect("state"), PowerState::On);
    bmc.set_power(PowerChange::Off).await.expect("off");
    bmc.set_boot_once(BootDevice::Pxe, true).await.expect("pxe");
    bmc.insert_media("http://10.0.0.1/a.iso")
        .await
        .expect("media");
    let reqs = server.requests();
    let bodies: Vec<Value> = reqs
        .iter()
        .map(|r| serde_json::from_slice(&r.body).expect("json"))
        .collect();
    assert!(reqs.iter().all(|r| r.path == "/rpc" && r.method == "POST"));
    assert_eq!(bodies[0]["method"], "getPowerState");
    assert_eq!(bodies[0]["host"], "10.0.0.9");
    assert_eq!(bodies[1]["params"], json!({"state": "off"}));
    assert_eq!(
        bodies[2]["params"],
        json!({"device": "pxe", "persistent": false, "efiBoot": true})
    );
    assert_eq!(
        bodies[3]["params"],
        json!({"mediaUrl": "http://10.0.0.1/a.iso", "kind": "CD"})
    );
    // the consumer's error is the provider's error
    let e = bmc
        .set_power(PowerChange::Cycle)
        .await
        .expect_err("refused");
    assert!(e.to_string().contains("cycle refused by the PDU"), "{e}");
    // a key the consumer does not know: refused, and the key is never printed
    let wrong = client(&url, &[("sha256", "guessed"), ("sha512", "guessed")]);
    let e = wrong.power_state().await.expect_err("bad signature");
    assert!(matches!(e.kind, ErrorKind::Unauthorized(_)), "{e}");
    assert!(!format!("{e} {e:?} {wrong:?}").contains("guessed"));
}

#[tokio::test]
async fn the_consumer_url_host_is_checked_against_the_allowed_networks() {
    let server = fixture::serve(consumer).await;
    let keys = [
        ("sha256", KEY_A),
        ("sha256", KEY_B),
        ("sha512", KEY_A),
        ("sha512", KEY_B),
    ];
    for url in [
        format!("http://{}/rpc", server.addr),
        format!("http://localhost:{}/rpc", server.addr.port()),
    ] {
        let e = client_in(&url, &keys, "10.0.0.0/8")
            .power_state()
            .await
            .expect_err("outside 10.0.0.0/8");
        let ErrorKind::NotAllowed(m) = &e.kind else {
            panic!("{e}")
        };
        assert!(m.contains("127.0.0.1") && m.contains("10.0.0.0/8"), "{m}");
        assert!(server.requests().is_empty(), "nothing sent");
    }
    let ok = client_in(
        &format!("http://localhost:{}/rpc", server.addr.port()),
        &keys,
        "127.0.0.0/8",
    );
    assert_eq!(ok.power_state().await.expect("allowed"), PowerState::On);
    assert_eq!(server.requests().len(), 1);
}

/// A client whose Machine sets `request.timestampFormat` to `format`.
fn client_with_format(url: &str, format: &str) -> Result<Rpc, tink_bmc::Error> {
    let mut secrets: BTreeMap<String, Vec<Secret>> = BTreeMap::new();
    for (algo, key) in [
        ("sha256", KEY_A),
        ("sha256", KEY_B),
        ("sha512", KEY_A),
        ("sha512", KEY_B),
    ] {
        secrets
            .entry(algo.into())
            .or_default()
            .push(Secret::new(key));
    }
    Rpc::new(
        RpcConfig {
            host: "10.0.0.9".into(),
            options: RpcOptions {
                consumer_url: url.into(),
                request: Some(tink_api::bmc::RequestOpts {
                    timestamp_format: format.into(),
                    ..Default::default()
                }),
                ..RpcOptions::default()
            },
            secrets,
            tls: TlsConfig::default(),
        },
        Policy {
            timeout: Duration::from_secs(2),
            attempts: 1,
            ..Policy::default()
        },
        Limits::default(),
    )
}

#[tokio::test]
async fn the_timestamp_is_rfc3339_unless_the_machine_names_another_go_layout() {
    let server = fixture::serve(consumer).await;
    let url = format!("http://{}/rpc", server.addr);
    let timestamps = || -> Vec<String> {
        server
            .requests()
            .iter()
            .filter_map(|r| r.header("X-Rufio-Timestamp"))
            .collect()
    };
    // Default: RFC 3339, this very second (give or take), signed as sent.
    let before = jiff::Timestamp::now();
    client(
        &url,
        &[
            ("sha256", KEY_A),
            ("sha256", KEY_B),
            ("sha512", KEY_A),
            ("sha512", KEY_B),
        ],
    )
    .power_state()
    .await
    .expect("signed with the RFC 3339 timestamp");
    let sent: jiff::Timestamp = timestamps()[0].parse().expect("RFC 3339");
    assert!(timestamps()[0].ends_with('Z'), "{:?}", timestamps());
    let skew = sent.as_second() - before.as_second();
    assert!((0..=2).contains(&skew), "{sent} vs {before}");
    // Go's layout spelled out is the same.
    client_with_format(&url, "2006-01-02T15:04:05Z07:00")
        .expect("RFC 3339 layout")
        .power_state()
        .await
        .expect("signed");
    assert!(
        timestamps()[1].parse::<jiff::Timestamp>().is_ok(),
        "{:?}",
        timestamps()
    );
    // Another Go layout (time.RFC1123Z): sent in that form, and signed with it.
    client_with_format(&url, "Mon, 02 Jan 2006 15:04:05 -0700")
        .expect("RFC 1123 layout")
        .power_state()
        .await
        .expect("signed with the RFC 1123 timestamp");
    let rfc1123 = &timestamps()[2];
    let parsed = jiff::fmt::rfc2822::parse(rfc1123).expect("RFC 1123 is RFC 2822");
    assert!(rfc1123.ends_with(" +0000"), "{rfc1123}");
    assert!(
        (parsed.timestamp().as_second() - before.as_second()).abs() <= 3,
        "{rfc1123}"
    );
    // Layouts that cannot be meant are configuration errors, before anything is sent.
    for (format, says) in [
        ("RFC3339", "write its layout"),
        ("unix", "no Go time element"),
        (
            "2006-01-02\r\nX-Injected: 1",
            "not a valid HTTP header value",
        ),
    ] {
        let e = client_with_format(&url, format).expect_err(format);
        assert!(matches!(e.kind, ErrorKind::Config(_)), "{e}");
        assert!(e.to_string().contains(says), "{format}: {e}");
    }
    assert_eq!(server.requests().len(), 3);
}
