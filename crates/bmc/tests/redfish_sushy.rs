//! The Redfish provider against a real sushy-emulator (fake driver, TLS with its own
//! self-signed certificate, an auth file so credentials are checked), and against small
//! fixture servers for what sushy cannot show: a BMC that drops a boot override, a session
//! service, a BMC that hangs mid-response.

mod fixture;

use std::time::{Duration, Instant};

use tink_api::bmc::{BootDevice, PowerState};
use tink_bmc::redfish::{Redfish, RedfishConfig};
use tink_bmc::{Bmc, Credentials, ErrorKind, Limits, Policy, PowerChange, TlsConfig};
use tink_testkit::bmc::{BMC_PASSWORD, BMC_USER, SilentListener, Sushy, free_tcp_port};

fn policy() -> Policy {
    Policy {
        timeout: Duration::from_secs(5),
        attempts: 3,
        backoff: Duration::from_millis(100),
        max_backoff: Duration::from_millis(400),
        ..Policy::default()
    }
}

fn client(host: &str, password: &str, tls: TlsConfig) -> Redfish {
    Redfish::new(
        RedfishConfig {
            host: host.into(),
            port: None,
            credentials: Credentials::new(BMC_USER, password),
            tls,
            use_basic_auth: false,
            system_name: String::new(),
        },
        policy(),
        Limits::default(),
    )
    .expect("client")
}

fn trusting(sushy: &Sushy) -> TlsConfig {
    TlsConfig {
        insecure: false,
        ca_pem: Some(sushy.cert_pem().to_vec()),
    }
}

/// Polls until the BMC reports `want` (sushy's fake driver applies changes 1-11 s late).
async fn wait_for(bmc: &dyn Bmc, want: PowerState) -> Duration {
    let start = Instant::now();
    loop {
        let got = bmc.power_state().await.expect("power state");
        if got == want {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "still {got} after 30 s, wanted {want}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test]
async fn power_round_trips_over_verified_tls() {
    let sushy = Sushy::start().await.expect("sushy-emulator");
    // No scheme: https, verified against the emulator's own certificate.
    let bmc = client(&sushy.host(), BMC_PASSWORD, trusting(&sushy));
    assert_eq!(bmc.power_state().await.expect("status"), PowerState::Off);
    bmc.set_power(PowerChange::On).await.expect("on");
    wait_for(&bmc, PowerState::On).await;
    // Asking for on again sends nothing (the state is read first).
    bmc.set_power(PowerChange::On).await.expect("on again");
    // A cycle: sushy powers off at once and on a few seconds later.
    bmc.set_power(PowerChange::Cycle).await.expect("cycle");
    assert_eq!(bmc.power_state().await.expect("status"), PowerState::Off);
    wait_for(&bmc, PowerState::On).await;
    bmc.set_power(PowerChange::Off).await.expect("off");
    wait_for(&bmc, PowerState::Off).await;
    bmc.set_power(PowerChange::Reset)
        .await
        .expect("reset of an off machine powers it on");
    wait_for(&bmc, PowerState::On).await;
    bmc.set_power(PowerChange::Soft).await.expect("soft");
    wait_for(&bmc, PowerState::Off).await;
}

#[tokio::test]
async fn pxe_once_is_set_and_read_back() {
    let sushy = Sushy::start().await.expect("sushy-emulator");
    let bmc = client(&sushy.host(), BMC_PASSWORD, trusting(&sushy));
    assert_eq!(bmc.boot_override().await.expect("read").0, "Hdd");
    bmc.set_boot_once(BootDevice::Pxe, true).await.expect("pxe");
    assert_eq!(
        bmc.boot_override().await.expect("read"),
        ("Pxe".to_string(), Some("UEFI".to_string()))
    );
    bmc.set_boot_once(BootDevice::Cdrom, false)
        .await
        .expect("cd");
    assert_eq!(
        bmc.boot_override().await.expect("read"),
        ("Cd".to_string(), Some("Legacy".to_string()))
    );
    let e = bmc
        .set_boot_once(BootDevice::Safe, false)
        .await
        .expect_err("no Redfish target for safe mode");
    assert!(matches!(e.kind, ErrorKind::Unsupported(_)), "{e}");
}

#[tokio::test]
async fn wrong_credentials_and_untrusted_certificates_are_clear_errors() {
    let sushy = Sushy::start().await.expect("sushy-emulator");
    let wrong = "not-the-password";
    let e = client(&sushy.host(), wrong, trusting(&sushy))
        .power_state()
        .await
        .expect_err("wrong password");
    assert!(matches!(e.kind, ErrorKind::Unauthorized(_)), "{e}");
    let text = format!("{e} {e:?}");
    assert!(text.contains("credentials refused"), "{text}");
    assert!(!text.contains(wrong), "the password leaked: {text}");
    // Without the emulator's certificate (and without insecureTLS) nothing is sent.
    let e = client(&sushy.host(), BMC_PASSWORD, TlsConfig::default())
        .power_state()
        .await
        .expect_err("self-signed certificate");
    assert!(matches!(e.kind, ErrorKind::Tls(_)), "{e}");
    // insecureTLS accepts it.
    let insecure = TlsConfig {
        insecure: true,
        ca_pem: None,
    };
    assert_eq!(
        client(&sushy.host(), BMC_PASSWORD, insecure)
            .power_state()
            .await
            .expect("insecure"),
        PowerState::Off
    );
    assert!(
        !sushy.log().contains(BMC_PASSWORD),
        "the emulator never saw the password in a URL"
    );
}

/// A Redfish client for `host` (plain http unless the host says https) allowed into `nets`.
fn allowed_client(host: &str, nets: &str, tls: TlsConfig) -> Redfish {
    Redfish::new(
        RedfishConfig {
            host: host.into(),
            port: None,
            credentials: Credentials::new(BMC_USER, BMC_PASSWORD),
            tls,
            use_basic_auth: true,
            system_name: String::new(),
        },
        Policy {
            allowed_networks: tink_bmc::net::parse_networks(nets).expect("networks"),
            ..policy()
        },
        Limits::default(),
    )
    .expect("client")
}

#[tokio::test]
async fn only_hosts_inside_the_allowed_networks_are_reached() {
    let server = fixture::serve(dropping_bmc).await;
    let port = server.addr.port();
    for host in [
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}"),
    ] {
        let name = if host.contains("localhost") {
            "localhost"
        } else {
            "127.0.0.1"
        };
        // Outside 10.0.0.0/8: refused at once, nothing sent, not retried.
        let before = server.requests().len();
        let start = Instant::now();
        let e = allowed_client(&host, "10.0.0.0/8", TlsConfig::default())
            .power_state()
            .await
            .expect_err("not allowed");
        let ErrorKind::NotAllowed(m) = &e.kind else {
            panic!("{e}")
        };
        assert!(
            m.contains(name) && m.contains("127.0.0.1") && m.contains("10.0.0.0/8"),
            "{m}"
        );
        assert!(e.to_string().contains("not allowed"), "{e}");
        assert!(
            start.elapsed() < Duration::from_millis(500),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(server.requests().len(), before, "nothing sent");
        // Inside 127.0.0.0/8 (a name checked by the addresses it resolves to): reached.
        let ok = allowed_client(&host, "10.0.0.0/8, 127.0.0.0/8", TlsConfig::default());
        assert_eq!(ok.power_state().await.expect(&host), PowerState::On);
        assert!(server.requests().len() > before);
        let ok_v6_only = allowed_client(&host, "::1/128", TlsConfig::default());
        let e = ok_v6_only
            .power_state()
            .await
            .expect_err("127.0.0.1 is not ::1");
        assert!(matches!(e.kind, ErrorKind::NotAllowed(_)), "{e}");
    }
}

#[tokio::test]
async fn the_checked_address_is_connected_and_tls_still_checks_the_name() {
    let sushy = Sushy::start().await.expect("sushy-emulator");
    // sushy's certificate is for IP 127.0.0.1: allowed and verified.
    let bmc = allowed_client(&sushy.host(), "127.0.0.0/8", trusting(&sushy));
    assert_eq!(bmc.power_state().await.expect("allowed"), PowerState::Off);
    // `localhost` resolves into the allowed network and is connected to 127.0.0.1, but the
    // certificate is verified against the name asked for, which it does not carry.
    let by_name = allowed_client(
        &format!("localhost:{}", sushy.port()),
        "127.0.0.0/8",
        trusting(&sushy),
    );
    let e = by_name
        .power_state()
        .await
        .expect_err("no certificate for localhost");
    assert!(matches!(e.kind, ErrorKind::Tls(_)), "{e}");
}

#[tokio::test]
async fn virtual_media_insert_and_eject() {
    let sushy = Sushy::start().await.expect("sushy-emulator");
    // sushy downloads the image it is given: serve one on loopback.
    let images =
        fixture::serve(|_req| fixture::Reply::bytes(200, b"not really an ISO".to_vec())).await;
    let url = format!("http://{}/boot.iso", images.addr);
    let bmc = client(&sushy.host(), BMC_PASSWORD, trusting(&sushy));
    bmc.eject_media()
        .await
        .expect("eject when empty does nothing");
    bmc.insert_media(&url).await.expect("insert");
    assert_eq!(bmc.media().await.expect("read"), (url.clone(), true));
    // inserting again replaces it
    let url2 = format!("http://{}/other.iso", images.addr);
    bmc.insert_media(&url2).await.expect("insert again");
    assert_eq!(bmc.media().await.expect("read"), (url2, true));
    bmc.eject_media().await.expect("eject");
    assert!(!bmc.media().await.expect("read").1);
    assert!(images.requests().iter().any(|r| r.path == "/boot.iso"));
}

#[tokio::test]
async fn an_unreachable_bmc_fails_fast_and_clearly() {
    let port = free_tcp_port().expect("port");
    let bmc = client(
        &format!("127.0.0.1:{port}"),
        BMC_PASSWORD,
        TlsConfig::default(),
    );
    let start = Instant::now();
    let e = bmc.power_state().await.expect_err("nobody listens");
    assert!(matches!(e.kind, ErrorKind::Connect(_)), "{e}");
    assert!(e.to_string().contains("cannot connect"), "{e}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn a_bmc_that_hangs_mid_response_times_out() {
    let silent = SilentListener::start().await.expect("listener");
    let bmc = Redfish::new(
        RedfishConfig {
            host: format!("http://{}", silent.addr()),
            port: None,
            credentials: Credentials::new(BMC_USER, BMC_PASSWORD),
            tls: TlsConfig::default(),
            use_basic_auth: true,
            system_name: String::new(),
        },
        Policy {
            timeout: Duration::from_millis(500),
            attempts: 2,
            backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(50),
            ..Policy::default()
        },
        Limits::default(),
    )
    .expect("client");
    let start = Instant::now();
    let e = bmc.power_state().await.expect_err("no answer");
    assert!(matches!(e.kind, ErrorKind::Timeout(_)), "{e}");
    assert!(e.to_string().contains("no answer within 500ms"), "{e}");
    // two attempts of 500 ms and a 50 ms back-off, never hung
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    // A non-idempotent action is not retried after a timeout: it may have been applied.
    let start = Instant::now();
    let e = bmc
        .set_power(PowerChange::Cycle)
        .await
        .expect_err("no answer");
    assert!(matches!(e.kind, ErrorKind::Timeout(_)), "{e}");
    assert!(start.elapsed() < Duration::from_secs(3));
}

/// A fixture BMC: one system whose boot override always reads back `Hdd`.
fn dropping_bmc(req: &fixture::Request) -> fixture::Reply {
    use serde_json::json;
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/redfish/v1/Systems") => fixture::Reply::json(
            200,
            json!({"Members": [{"@odata.id": "/redfish/v1/Systems/1"}]}),
        ),
        ("GET", "/redfish/v1/Systems/1") => fixture::Reply::json(
            200,
            json!({"Id": "1", "PowerState": "On", "Boot": {
                "BootSourceOverrideTarget": "Hdd",
                "BootSourceOverrideEnabled": "Disabled",
                "BootSourceOverrideMode": "UEFI"}}),
        ),
        ("PATCH", "/redfish/v1/Systems/1") => fixture::Reply::bytes(204, Vec::new()),
        _ => fixture::Reply::bytes(404, Vec::new()),
    }
}

#[tokio::test]
async fn a_boot_override_accepted_and_dropped_is_reported() {
    let bmc_server = fixture::serve(dropping_bmc).await;
    let bmc = Redfish::new(
        RedfishConfig {
            host: format!("http://{}", bmc_server.addr),
            port: None,
            credentials: Credentials::new(BMC_USER, BMC_PASSWORD),
            tls: TlsConfig::default(),
            use_basic_auth: true,
            system_name: String::new(),
        },
        policy(),
        Limits::default(),
    )
    .expect("client");
    let e = bmc
        .set_boot_once(BootDevice::Pxe, true)
        .await
        .expect_err("dropped");
    assert!(
        matches!(&e.kind, ErrorKind::BootOverrideDropped { reported, .. } if reported.contains("Hdd")),
        "{e}"
    );
    assert!(
        e.to_string().contains("accepted the boot override to Pxe"),
        "{e}"
    );
    let reqs = bmc_server.requests();
    let patch = reqs.iter().find(|r| r.method == "PATCH").expect("a PATCH");
    let body: serde_json::Value = serde_json::from_slice(&patch.body).expect("json");
    assert_eq!(body["Boot"]["BootSourceOverrideTarget"], "Pxe");
    assert_eq!(body["Boot"]["BootSourceOverrideEnabled"], "Once");
    assert_eq!(body["Boot"]["BootSourceOverrideMode"], "UEFI");
}

#[tokio::test]
async fn sessions_are_opened_once_and_renewed_when_expired() {
    use serde_json::json;
    use std::sync::Mutex;
    // A fixture with a session service (sushy-tools has none): token `t1`, then `t2` after
    // the first expires; basic auth is refused.
    let issued = std::sync::Arc::new(Mutex::new(0u32));
    let expired = std::sync::Arc::new(Mutex::new(false));
    let (i2, x2) = (issued.clone(), expired.clone());
    let server = fixture::serve(move |req| {
        let token = req.header("x-auth-token");
        match (req.method.as_str(), req.path.as_str()) {
            ("GET", "/redfish/v1") => fixture::Reply::json(
                200,
                json!({"Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}}}),
            ),
            ("POST", "/redfish/v1/SessionService/Sessions") => {
                let body: serde_json::Value =
                    serde_json::from_slice(&req.body).unwrap_or_default();
                if body["UserName"] != BMC_USER || body["Password"] != BMC_PASSWORD {
                    return fixture::Reply::bytes(401, Vec::new());
                }
                let mut n = i2.lock().expect("lock");
                *n += 1;
                fixture::Reply::json(201, json!({})).with_header("X-Auth-Token", &format!("t{n}"))
            }
            ("GET", "/redfish/v1/Systems") => match token.as_deref() {
                Some("t1") if !*x2.lock().expect("lock") => fixture::Reply::json(
                    200,
                    json!({"Members": [{"@odata.id": "/redfish/v1/Systems/1"}]}),
                ),
                _ => fixture::Reply::bytes(401, Vec::new()),
            },
            ("GET", "/redfish/v1/Systems/1") => match token.as_deref() {
                Some("t1") if !*x2.lock().expect("lock") => {
                    fixture::Reply::json(200, json!({"PowerState": "On"}))
                }
                Some("t2") => fixture::Reply::json(200, json!({"PowerState": "Off"})),
                _ => fixture::Reply::bytes(401, Vec::new()),
            },
            _ => fixture::Reply::bytes(404, Vec::new()),
        }
    })
    .await;
    let config = RedfishConfig {
        host: format!("http://{}", server.addr),
        port: None,
        credentials: Credentials::new(BMC_USER, BMC_PASSWORD),
        tls: TlsConfig::default(),
        use_basic_auth: false,
        system_name: String::new(),
    };
    let bmc = Redfish::new(config.clone(), policy(), Limits::default()).expect("client");
    assert_eq!(bmc.power_state().await.expect("state"), PowerState::On);
    assert_eq!(bmc.power_state().await.expect("state"), PowerState::On);
    assert_eq!(
        *issued.lock().expect("lock"),
        1,
        "one session for both calls"
    );
    *expired.lock().expect("lock") = true;
    assert_eq!(bmc.power_state().await.expect("renewed"), PowerState::Off);
    assert_eq!(*issued.lock().expect("lock"), 2);
    assert!(
        server
            .requests()
            .iter()
            .all(|r| r.header("authorization").is_none()),
        "no basic auth sent to a BMC with sessions"
    );
    let bad = Redfish::new(
        RedfishConfig {
            credentials: Credentials::new(BMC_USER, "wrong"),
            ..config
        },
        policy(),
        Limits::default(),
    )
    .expect("client");
    let e = bad.power_state().await.expect_err("refused");
    assert!(matches!(e.kind, ErrorKind::Unauthorized(_)), "{e}");
}

/// A fixture BMC with a session service whose login answers only a `Location` (absolute, as
/// many BMCs send it); sessions are `/redfish/v1/SessionService/Sessions/<n>`, token `t<n>`,
/// and a DELETE with its own token removes one.
fn session_bmc(
    open: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) -> impl Fn(&fixture::Request) -> fixture::Reply + Send + Sync + 'static {
    use serde_json::json;
    let issued = std::sync::atomic::AtomicU32::new(0);
    move |req| {
        let token = req.header("x-auth-token").unwrap_or_default();
        let mut open = open.lock().expect("lock");
        let valid = open.contains(&token);
        match (req.method.as_str(), req.path.as_str()) {
            ("GET", "/redfish/v1") => fixture::Reply::json(
                200,
                json!({"Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}}}),
            ),
            ("POST", "/redfish/v1/SessionService/Sessions") => {
                let n = issued.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                open.push(format!("t{n}"));
                let host = req.header("host").unwrap_or_default();
                fixture::Reply::json(201, json!({}))
                    .with_header("X-Auth-Token", &format!("t{n}"))
                    .with_header(
                        "Location",
                        &format!("http://{host}/redfish/v1/SessionService/Sessions/{n}"),
                    )
            }
            ("DELETE", p) if valid && p.starts_with("/redfish/v1/SessionService/Sessions/") => {
                // a session is deleted with its own token
                let n = p.rsplit('/').next().unwrap_or_default();
                if token != format!("t{n}") {
                    return fixture::Reply::bytes(403, Vec::new());
                }
                open.retain(|t| *t != token);
                fixture::Reply::bytes(204, Vec::new())
            }
            (_, _) if !valid => fixture::Reply::bytes(401, Vec::new()),
            ("GET", "/redfish/v1/Systems") => fixture::Reply::json(
                200,
                json!({"Members": [{"@odata.id": "/redfish/v1/Systems/1"}]}),
            ),
            ("GET", "/redfish/v1/Systems/1") => {
                fixture::Reply::json(200, json!({"PowerState": "On"}))
            }
            _ => fixture::Reply::bytes(404, Vec::new()),
        }
    }
}

/// Waits up to 5 s for `cond`.
async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "not within 5 s: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn sessions_the_provider_opened_are_deleted_on_close_and_on_drop() {
    let open: std::sync::Arc<std::sync::Mutex<Vec<String>>> = std::sync::Arc::default();
    let server = fixture::serve(session_bmc(open.clone())).await;
    let config = RedfishConfig {
        host: format!("http://{}", server.addr),
        port: None,
        credentials: Credentials::new(BMC_USER, BMC_PASSWORD),
        tls: TlsConfig::default(),
        use_basic_auth: false,
        system_name: String::new(),
    };
    let deletes = |server: &fixture::Server| -> Vec<(String, Option<String>)> {
        server
            .requests()
            .into_iter()
            .filter(|r| r.method == "DELETE")
            .map(|r| (r.path.clone(), r.header("x-auth-token")))
            .collect()
    };
    // close(): the session is deleted before it returns; a later call opens a new one.
    let bmc = Redfish::new(config.clone(), policy(), Limits::default()).expect("client");
    assert_eq!(bmc.power_state().await.expect("state"), PowerState::On);
    assert_eq!(*open.lock().expect("lock"), ["t1"]);
    bmc.close().await;
    assert!(open.lock().expect("lock").is_empty(), "t1 deleted");
    assert_eq!(
        deletes(&server),
        [(
            "/redfish/v1/SessionService/Sessions/1".to_string(),
            Some("t1".to_string())
        )]
    );
    assert_eq!(
        bmc.power_state().await.expect("a new session"),
        PowerState::On
    );
    assert_eq!(*open.lock().expect("lock"), ["t2"]);
    // drop: deleted in the background.
    drop(bmc);
    eventually("t2 deleted after drop", || {
        open.lock().expect("lock").is_empty()
    })
    .await;
    assert_eq!(deletes(&server).len(), 2);
    // A provider that never opened a session deletes nothing; neither does basic auth.
    drop(Redfish::new(config.clone(), policy(), Limits::default()).expect("client"));
    let basic = Redfish::new(
        RedfishConfig {
            use_basic_auth: true,
            ..config
        },
        policy(),
        Limits::default(),
    )
    .expect("client");
    let _ = basic.power_state().await;
    basic.close().await;
    drop(basic);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(deletes(&server).len(), 2, "{:?}", deletes(&server));
}
