//! `tinkctl bmc` end to end: kube-lite, the real BMC controller (in this process), and
//! sushy-tools' Redfish emulator (TLS, credentials checked). `boot pxe --efi --and-cycle`
//! follows its Job to Completed while the emulator's machine powers on, and `power status`
//! prints what the BMC reports.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use serde_json::json;
use tink_api::bmc::Machine;
use tink_testkit::bmc::{BMC_PASSWORD, BMC_USER, Sushy};
use tokio_util::sync::CancellationToken;

async fn tinkctl(kubeconfig: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_tinkctl"))
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output()
        .await
        .expect("tinkctl runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    );
    eprintln!("tinkctl {args:?}\n{stdout}{stderr}");
    (out.status.success(), stdout, stderr)
}

#[tokio::test]
async fn tinkctl_bmc_drives_a_redfish_bmc_through_the_controller() {
    let sushy = Sushy::start().await.expect("sushy-emulator");
    let dir = tempfile::tempdir().expect("tmp");
    let server = kube_lite::Server::start(kube_lite::Config::default())
        .await
        .expect("kube-lite");
    let client = server.client().expect("client");
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let crds = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for kind in ["machines", "jobs", "tasks"] {
        let text = std::fs::read_to_string(crds.join(format!("{kind}.bmc.tinkerbell.org.yaml")))
            .expect("read CRD");
        let crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("CRD YAML");
        api.create(&PostParams::default(), &crd)
            .await
            .expect("create CRD");
    }
    for ns in ["lab", "tink-system"] {
        let n: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns");
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &n)
            .await
            .expect("namespace");
    }
    let mut secret = Secret::default();
    secret.metadata.name = Some("m1-auth".into());
    secret.type_ = Some("kubernetes.io/basic-auth".into());
    secret.data = Some(BTreeMap::from([
        ("username".to_string(), ByteString(BMC_USER.into())),
        ("password".to_string(), ByteString(BMC_PASSWORD.into())),
    ]));
    Api::<Secret>::namespaced(client.clone(), "lab")
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret");
    let machine: Machine = tink_api::from_value(json!({
        "apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Machine",
        "metadata": {"name": "m1", "namespace": "lab"},
        "spec": {"connection": {
            "host": sushy.host(),
            "authSecretRef": {"name": "m1-auth", "namespace": "lab"},
            "providerOptions": {"preferredOrder": ["gofish"]},
        }},
    }))
    .expect("machine");
    Api::<Machine>::namespaced(client.clone(), "lab")
        .create(&PostParams::default(), &machine)
        .await
        .expect("create machine");

    let mut config = tink_bmc_controller::BmcConfig {
        replica_id: "e2e".into(),
        ca_pem: Some(sushy.cert_pem().to_vec()),
        power_wait: Duration::from_secs(60),
        power_recheck: Duration::from_millis(300),
        ..Default::default()
    };
    config.policy.timeout = Duration::from_secs(5);
    let shutdown = CancellationToken::new();
    let controller = tokio::spawn(tink_bmc_controller::run(
        config,
        client.clone(),
        tink_runtime::Health::new(),
        tink_bmc_controller::Metrics::default(),
        shutdown.clone(),
    ));

    let (ok, out, _) = tinkctl(
        &kubeconfig,
        &[
            "bmc",
            "boot",
            "pxe",
            "m1",
            "-n",
            "lab",
            "--efi",
            "--and-cycle",
            "--timeout",
            "90s",
        ],
    )
    .await;
    assert!(ok, "boot pxe --and-cycle failed");
    assert!(out.contains("task 0 boot pxe (efi): completed"), "{out}");
    assert!(out.contains("task 1 power cycle: completed"), "{out}");
    assert!(out.contains("completed"), "{out}");

    let (ok, out, _) = tinkctl(&kubeconfig, &["bmc", "power", "status", "m1", "-n", "lab"]).await;
    assert!(ok, "power status failed");
    assert!(out.contains("power state of m1: on"), "{out}");

    // A Machine whose BMC refuses the credentials: the command fails with the BMC's error.
    let mut wrong = secret.clone();
    wrong.metadata.name = Some("wrong".into());
    wrong.data = Some(BTreeMap::from([
        ("username".to_string(), ByteString(BMC_USER.into())),
        ("password".to_string(), ByteString(b"not-it".to_vec())),
    ]));
    Api::<Secret>::namespaced(client.clone(), "lab")
        .create(&PostParams::default(), &wrong)
        .await
        .expect("secret");
    let mut m2 = machine.clone();
    m2.metadata.name = Some("m2".into());
    m2.metadata.resource_version = None;
    m2.metadata.uid = None;
    m2.spec.connection.auth_secret_ref.name = Some("wrong".into());
    Api::<Machine>::namespaced(client.clone(), "lab")
        .create(&PostParams::default(), &m2)
        .await
        .expect("create m2");
    let (ok, out, err) = tinkctl(&kubeconfig, &["bmc", "power", "off", "m2", "-n", "lab"]).await;
    assert!(!ok, "a refused BMC fails the command");
    assert!(
        format!("{out}{err}").contains("credentials refused"),
        "{out}{err}"
    );
    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), controller).await;
}
