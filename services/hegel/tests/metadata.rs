//! The EC2 metadata endpoints against kube-lite, each machine known by its source address.

mod common;
#[path = "common/server.rs"]
mod server;

use std::time::{Duration, Instant};

use common::{Env, eventually};
use pretty_assertions::assert_eq;
use serde_json::json;

/// User data with bytes a careless server would change: CRLF, tabs, trailing spaces, no final
/// newline, non-ASCII.
const USER_DATA: &str = "#cloud-config\r\nhostname: w1 \n\tusers: [\"é\"]\n\n  ";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_with_and_without_user_data() {
    let env = Env::new().await;
    let with = env
        .create_hardware(
            "with-data",
            json!({"networkInterfaces": {
                "02:00:00:00:00:02": {"dhcp": {"ip": "127.0.0.2", "hostname": "worker-2"}}},
                "instance": {"userdata": USER_DATA, "vendordata": "#vendor\n"}}),
        )
        .await;
    let without = env
        .create_hardware(
            "no-data",
            json!({"networkInterfaces": {"02:00:00:00:00:03": {"dhcp": {"ip": "127.0.0.3"}}}}),
        )
        .await;
    let hegel = env.hegel(|_| {}).await;

    let r = hegel.get("127.0.0.2", "/").await;
    assert_eq!((r.status, r.text()), (200, "2009-04-04\nlatest".into()));

    for v in ["2009-04-04", "latest"] {
        let r = hegel.get("127.0.0.2", &format!("/{v}/")).await;
        assert_eq!(r.text(), "meta-data\nuser-data\nvendor-data");
        let r = hegel.get("127.0.0.2", &format!("/{v}/meta-data/")).await;
        assert_eq!(r.status, 200);
        assert_eq!(
            r.text(),
            "hostname\ninstance-id\nlocal-hostname\nlocal-ipv4\nmac"
        );
        assert_eq!(
            hegel
                .get("127.0.0.2", &format!("/{v}/meta-data"))
                .await
                .text(),
            r.text()
        );
        let uid = with.metadata.uid.clone().expect("uid");
        for (leaf, want) in [
            ("instance-id", uid.as_str()),
            ("hostname", "worker-2"),
            ("local-hostname", "worker-2"),
            ("local-ipv4", "127.0.0.2"),
            ("mac", "02:00:00:00:00:02"),
        ] {
            let r = hegel
                .get("127.0.0.2", &format!("/{v}/meta-data/{leaf}"))
                .await;
            assert_eq!((r.status, r.text()), (200, want.to_owned()), "{leaf}");
        }
        let r = hegel.get("127.0.0.2", &format!("/{v}/user-data")).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.body, USER_DATA.as_bytes(), "user-data is byte-exact");
        assert_eq!(r.header("content-type"), Some("application/octet-stream"));
        let r = hegel.get("127.0.0.2", &format!("/{v}/vendor-data")).await;
        assert_eq!((r.status, r.text()), (200, "#vendor\n".into()));
        // No keys in v1alpha2 Hardware: no public-keys.
        let r = hegel
            .get("127.0.0.2", &format!("/{v}/meta-data/public-keys/"))
            .await;
        assert_eq!(r.status, 404);
        assert!(
            r.text()
                .contains("meta-data/public-keys/ is not served for Hardware machines/with-data"),
            "{}",
            r.text()
        );
    }

    // The machine without instance data.
    let r = hegel.get("127.0.0.3", "/2009-04-04/").await;
    assert_eq!(r.text(), "meta-data");
    let r = hegel.get("127.0.0.3", "/2009-04-04/user-data").await;
    assert_eq!(r.status, 404, "no user data is 404, as EC2");
    assert_eq!(
        r.text(),
        "Hardware machines/no-data has no spec.instance.userdata\n"
    );
    assert_eq!(
        hegel.get("127.0.0.3", "/latest/vendor-data").await.status,
        404
    );
    let r = hegel
        .get("127.0.0.3", "/2009-04-04/meta-data/instance-id")
        .await;
    assert_eq!(r.text(), without.metadata.uid.clone().expect("uid"));
    // No hostname anywhere: the Hardware's name.
    let r = hegel
        .get("127.0.0.3", "/2009-04-04/meta-data/hostname")
        .await;
    assert_eq!(r.text(), "no-data");

    // Versions cloud-init probes that this server does not serve.
    let r = hegel
        .get("127.0.0.2", "/2021-03-23/meta-data/instance-id")
        .await;
    assert_eq!(r.status, 404);
    assert!(
        r.text().contains("serves 2009-04-04 and latest"),
        "{}",
        r.text()
    );

    // An address no Hardware has: 404, never another machine's data.
    for path in [
        "/2009-04-04/meta-data/instance-id",
        "/latest/user-data",
        "/2009-04-04/meta-data/",
    ] {
        let r = hegel.get("127.0.0.9", path).await;
        assert_eq!(r.status, 404, "{path}");
        assert_eq!(
            r.text(),
            "no Hardware has the IP 127.0.0.9 (spec.networkInterfaces[*].dhcp.ip)\n"
        );
    }
    assert_eq!(hegel.metrics.misses_of("ip", "unknown"), 3);
    assert!(hegel.metrics.requests_of("meta-data/instance-id", 200) >= 3);
    assert_eq!(hegel.metrics.requests_of("user-data", 404), 2);
    hegel.stop().await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_for_is_believed_only_from_trusted_proxies() {
    let env = Env::new().await;
    env.create_hardware(
        "m",
        json!({"networkInterfaces": {"02:00:00:00:00:02": {"dhcp": {"ip": "127.0.0.2"}}},
               "instance": {"userdata": "secret"}}),
    )
    .await;
    let hegel = env
        .hegel(|c| c.trusted_proxies = vec!["127.0.0.5/32".parse().expect("cidr")])
        .await;
    let xff = [("X-Forwarded-For", "127.0.0.2")];
    // Untrusted peer (a machine with no Hardware) naming the machine's IP: ignored.
    let r = hegel
        .get_with("127.0.0.4", "/2009-04-04/user-data", &xff)
        .await;
    assert_eq!(r.status, 404);
    assert!(r.text().contains("127.0.0.4"), "{}", r.text());
    assert!(!r.text().contains("secret"));
    // The trusted proxy: its header names the client.
    let r = hegel
        .get_with("127.0.0.5", "/2009-04-04/user-data", &xff)
        .await;
    assert_eq!((r.status, r.text()), (200, "secret".into()));
    // A client-written element before the proxy's is not believed.
    let r = hegel
        .get_with(
            "127.0.0.5",
            "/2009-04-04/user-data",
            &[("X-Forwarded-For", "127.0.0.2, 127.0.0.8")],
        )
        .await;
    assert_eq!(r.status, 404);
    assert!(r.text().contains("127.0.0.8"), "{}", r.text());
    // Garbage from a trusted proxy is a clear 400.
    let r = hegel
        .get_with(
            "127.0.0.5",
            "/2009-04-04/user-data",
            &[("X-Forwarded-For", "nope")],
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.text(),
        "X-Forwarded-For element \"nope\" is not an IP address\n"
    );
    hegel.stop().await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hardware_changes_are_served_promptly() {
    let env = Env::new().await;
    let hegel = env.hegel(|_| {}).await;
    // Created after Hegel synced.
    env.create_hardware(
        "m",
        json!({"networkInterfaces": {"02:00:00:00:00:06": {"dhcp": {"ip": "127.0.0.6", "hostname": "old"}}}}),
    )
    .await;
    let path = "/2009-04-04/meta-data/hostname";
    eventually("the new Hardware", Duration::from_secs(10), || async {
        (hegel.get("127.0.0.6", path).await.status == 200).then_some(())
    })
    .await;

    let started = Instant::now();
    env.patch_hardware(
        "m",
        json!({"spec": {"networkInterfaces": {"02:00:00:00:00:06": {"dhcp": {"hostname": "new"}}}}}),
    )
    .await;
    eventually("the changed hostname", Duration::from_secs(10), || async {
        (hegel.get("127.0.0.6", path).await.text() == "new").then_some(())
    })
    .await;
    eprintln!("hostname change served after {:?}", started.elapsed());

    // The IP moves: the old address gets nothing, the new one the machine.
    env.patch_hardware(
        "m",
        json!({"spec": {"networkInterfaces": {"02:00:00:00:00:06": {"dhcp": {"ip": "127.0.0.7"}}}}}),
    )
    .await;
    eventually("the moved IP", Duration::from_secs(10), || async {
        (hegel.get("127.0.0.7", path).await.text() == "new").then_some(())
    })
    .await;
    assert_eq!(hegel.get("127.0.0.6", path).await.status, 404);

    // Two Hardware claiming one IP: neither is served.
    env.create_hardware(
        "twin",
        json!({"networkInterfaces": {"02:00:00:00:00:08": {"dhcp": {"ip": "127.0.0.7"}}}}),
    )
    .await;
    let r = eventually("the conflict", Duration::from_secs(10), || async {
        let r = hegel.get("127.0.0.7", path).await;
        (r.status == 409).then_some(r)
    })
    .await;
    assert_eq!(
        r.text(),
        "the IP 127.0.0.7 is claimed by several Hardware (machines/m, machines/twin); nothing is served to it\n"
    );

    // Deleted: 404.
    for name in ["m", "twin"] {
        env.hardware_api()
            .delete(name, &Default::default())
            .await
            .expect("delete");
    }
    eventually("the deletion", Duration::from_secs(10), || async {
        (hegel.get("127.0.0.7", path).await.status == 404).then_some(())
    })
    .await;
    hegel.stop().await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_address_is_rate_limited() {
    let env = Env::new().await;
    env.create_hardware(
        "m",
        json!({"networkInterfaces": {"02:00:00:00:00:02": {"dhcp": {"ip": "127.0.0.2"}}}}),
    )
    .await;
    let hegel = env
        .hegel(|c| {
            c.rate_limit = hegel::RateLimit {
                per_second: 1,
                burst: 3,
            }
        })
        .await;
    let path = "/2009-04-04/meta-data/instance-id";
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(hegel.get("127.0.0.2", path).await.status);
    }
    assert_eq!(&statuses[..3], [200, 200, 200]);
    assert!(statuses[3..].contains(&429), "{statuses:?}");
    let r = hegel.get("127.0.0.2", path).await;
    if r.status == 429 {
        assert_eq!(r.header("retry-after"), Some("1"));
        assert!(r.text().starts_with("too many requests from 127.0.0.2"));
    }
    // Another address has its own bucket.
    assert_eq!(hegel.get("127.0.0.3", path).await.status, 404);
    assert!(hegel.metrics.rate_limited.get() >= 1);
    hegel.stop().await;
    env.stop().await;
}
