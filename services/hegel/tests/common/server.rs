//! Hegel running in this process, on the environment of [`crate::common`] (a module of its
//! own so netboot's tests, which include `common/mod.rs`, need no hegel crate).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::common::{Env, Reply, get_from, within};

/// Hegel running in this process.
pub struct Hegel {
    pub addr: SocketAddr,
    pub metrics: hegel::Metrics,
    pub health: tink_runtime::Health,
    pub shutdown: CancellationToken,
    pub task: tokio::task::JoinHandle<Result<(), hegel::Error>>,
}

impl Hegel {
    pub async fn get(&self, from: &str, path: &str) -> Reply {
        get_from(self.addr, from, path, &[]).await
    }

    pub async fn get_with(&self, from: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
        get_from(self.addr, from, path, headers).await
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        within("hegel to stop", self.task)
            .await
            .expect("no panic")
            .expect("clean shutdown");
    }
}

pub fn ipxe_config() -> hegel::IpxeConfig {
    let mut c = hegel::IpxeConfig::new("127.0.0.1:42113");
    c.syslog_host = Some("127.0.0.1".into());
    c
}

impl Env {
    /// Hegel on 127.0.0.1, ready (Hardware and OSIEs listed).
    pub async fn hegel(&self, configure: impl FnOnce(&mut hegel::HegelConfig)) -> Hegel {
        self.hegel_at("127.0.0.1:0", configure).await
    }

    /// Hegel listening on `bind`, ready.
    pub async fn hegel_at(
        &self,
        bind: &str,
        configure: impl FnOnce(&mut hegel::HegelConfig),
    ) -> Hegel {
        let listener = tokio::net::TcpListener::bind(bind).await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut config = hegel::HegelConfig::new(addr, ipxe_config());
        configure(&mut config);
        let health = tink_runtime::Health::new();
        let metrics = hegel::Metrics::default();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(hegel::run_on(
            listener,
            config,
            self.client.clone(),
            health.clone(),
            metrics.clone(),
            shutdown.clone(),
        ));
        within("hegel to become ready", async {
            while !health.is_ready() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        Hegel {
            addr,
            metrics,
            health,
            shutdown,
            task,
        }
    }
}
