//! The BMC side of the stack for the tests that boot machines through a BMC: the BMC
//! controller (services/bmc) in this process, its Secrets and Machines, and a Redfish client
//! reading sushy-tools back. Included with `#[path = "common/bmc.rs"] mod bmc;` by the test
//! files that need it (tests/common is shared with other packages that lack these crates).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Secret, SecretReference};
use kube::Api;
use kube::api::PostParams;
use tink_api::bmc::{Connection, Machine, MachineSpec, ProviderOptions, RedfishOptions};
use tink_bmc::redfish::{Redfish, RedfishConfig};
use tink_bmc::{Credentials, Limits, Policy, TlsConfig};
use tink_bmc_controller::BmcConfig;
use tink_testkit::bmc::{BMC_PASSWORD, BMC_USER, Sushy};
use tokio_util::sync::CancellationToken;

use crate::common::{NS, Stack};

/// The BMC controller, in this process, watching the test namespace.
pub struct BmcController {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), tink_bmc_controller::Error>>,
}

impl BmcController {
    pub fn start(stack: &Stack, ca_pem: &[u8]) -> Self {
        let mut c = BmcConfig {
            replica_id: "bmc-0".into(),
            namespace: Some(NS.into()),
            power_poll: Duration::from_secs(2),
            power_wait: Duration::from_secs(30),
            power_recheck: Duration::from_millis(300),
            ca_pem: Some(ca_pem.to_vec()),
            ..BmcConfig::default()
        };
        c.policy.timeout = Duration::from_secs(5);
        c.policy.attempts = 2;
        c.policy.backoff = Duration::from_millis(100);
        c.lease.namespace = "tink-system".into();
        c.lease.duration = Duration::from_secs(3);
        c.lease.renew_period = Duration::from_millis(500);
        c.lease.renew_deadline = Duration::from_secs(2);
        c.lease.retry_period = Duration::from_millis(300);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(tink_bmc_controller::run(
            c,
            stack.client.clone(),
            tink_runtime::Health::new(),
            tink_bmc_controller::Metrics::default(),
            shutdown.clone(),
        ));
        Self { shutdown, task }
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
    }
}

pub async fn bmc_secret(stack: &Stack, name: &str, password: &str) {
    let mut s = Secret::default();
    s.metadata.name = Some(name.into());
    s.metadata.namespace = Some(NS.into());
    s.type_ = Some("kubernetes.io/basic-auth".into());
    s.data = Some(BTreeMap::from([
        (
            "username".to_string(),
            ByteString(BMC_USER.as_bytes().to_vec()),
        ),
        (
            "password".to_string(),
            ByteString(password.as_bytes().to_vec()),
        ),
    ]));
    Api::<Secret>::namespaced(stack.client.clone(), NS)
        .create(&PostParams::default(), &s)
        .await
        .expect("create Secret");
}

pub async fn bmc_machine(stack: &Stack, name: &str, host: &str, secret: &str) {
    let connection = Connection {
        host: host.into(),
        auth_secret_ref: SecretReference {
            name: Some(secret.into()),
            namespace: Some(NS.into()),
        },
        provider_options: Some(ProviderOptions {
            preferred_order: vec!["gofish".into()],
            redfish: Some(RedfishOptions::default()),
            ..ProviderOptions::default()
        }),
        ..Connection::default()
    };
    let mut m = Machine::new(name, MachineSpec { connection });
    m.metadata.namespace = Some(NS.into());
    Api::<Machine>::namespaced(stack.client.clone(), NS)
        .create(&PostParams::default(), &m)
        .await
        .expect("create Machine");
}

pub fn redfish(sushy: &Sushy) -> Redfish {
    Redfish::new(
        RedfishConfig {
            host: sushy.host(),
            port: None,
            credentials: Credentials::new(BMC_USER, BMC_PASSWORD),
            tls: TlsConfig {
                insecure: false,
                ca_pem: Some(sushy.cert_pem().to_vec()),
            },
            use_basic_auth: false,
            system_name: String::new(),
        },
        Policy::default(),
        Limits::default(),
    )
    .expect("redfish client")
}
