//! Certificate rotation: the webhook serves new files without a restart; the API server trusts
//! whatever its caBundle says (failurePolicy Fail refuses writes while they disagree).

mod common;

use std::time::Duration;

use common::{Env, certificates, post, within};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_certificates_are_served_without_a_restart() {
    let env = Env::new("tls", true).await;
    let hw = |name: &str, mac: &str| {
        json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": name}, "spec": {"networkInterfaces": {mac: {}}}})
    };
    let file = env.write("a.json", &hw("a", "aa:00:00:00:00:01"));
    env.kubectl_ok(&["create", "-f", &file]).await;

    // Rotate to a new CA and certificate, key first (a torn pair is skipped, then loaded).
    let rotated = certificates();
    std::fs::write(&env.webhook.key, &rotated.key_pem).unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    std::fs::write(&env.webhook.cert, &rotated.cert_pem).unwrap();
    within("the new certificate to be served", async {
        while post(
            env.webhook.addr,
            &rotated.ca_pem,
            "/validate",
            b"{}".to_vec(),
        )
        .await
        .is_err()
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_eq!(env.webhook.metrics.tls_reloads_of("ok"), 1);
    assert!(
        post(
            env.webhook.addr,
            &env.certs.ca_pem,
            "/validate",
            b"{}".to_vec()
        )
        .await
        .is_err(),
        "new connections no longer get the old certificate"
    );

    // The API server still trusts the old CA: writes are refused, not let through.
    let file = env.write("b.json", &hw("b", "aa:00:00:00:00:02"));
    let (ok, _, err) = env.kubectl(&["create", "-f", &file]).await;
    assert!(!ok);
    assert!(err.contains("failed calling webhook"), "{err}");

    // With the new caBundle, admission works again.
    env.install_admission(&rotated.ca_pem).await;
    env.kubectl_ok(&["create", "-f", &file]).await;

    // Files that do not load leave the current certificate serving.
    std::fs::write(&env.webhook.cert, "not a certificate").unwrap();
    within("the bad files to be noticed", async {
        while env.webhook.metrics.tls_reloads_of("error") == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let (status, _) = post(
        env.webhook.addr,
        &rotated.ca_pem,
        "/validate",
        b"{}".to_vec(),
    )
    .await
    .expect("still serving the rotated certificate");
    assert_eq!(status, 400);
    let file = env.write("c.json", &hw("c", "aa:00:00:00:00:03"));
    env.kubectl_ok(&["create", "-f", &file]).await;
    env.stop().await;
}
