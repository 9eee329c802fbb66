//! The agent secrets Hegel puts in boot scripts (`tink_agent_secret=`), from a watched cache.
//!
//! Hegel never reads the Secret a Hardware's `tinkerbell.org/agent-secret` annotation names:
//! that Secret lives in the Hardware's namespace, where Hegel has no access. The controller
//! checks it (type `tinkerbell.org/agent-secret`, a usable `secret` key) and copies it into the
//! system namespace (`--system-namespace`, default `tink-system`) under a name derived from the
//! Hardware ([`tink_api::agent_secret::copy_name`]). Hegel watches those copies (label
//! `tinkerbell.org/agent-secret-copy=true`, that namespace only) with a kube-runtime reflector,
//! so a script request reads memory, never the API server, and a rotated or removed copy is
//! seen as soon as the watch delivers it.
//!
//! A copy is used only for the Hardware and the source Secret it names (a Hardware whose
//! annotation now names another Secret gets no secret until the controller copied that one).

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use tink_api::agent_secret::{AGENT_SECRET_TYPE, COPY_LABEL, copy_name, copy_value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::index::FeedEnded;
use crate::metrics::Metrics;

/// The copies of agent secrets in the system namespace.
#[derive(Debug, Clone)]
pub struct AgentSecrets {
    namespace: String,
    store: Store<Secret>,
}

impl AgentSecrets {
    /// The copies in `namespace`, read from `store` (fed by [`feed`]).
    pub fn new(namespace: impl Into<String>, store: Store<Secret>) -> Self {
        Self {
            namespace: namespace.into(),
            store,
        }
    }

    /// The namespace the copies are read from.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The agent secret of Hardware `hw_namespace/hw_name`, whose annotation names the Secret
    /// `source`, or why there is none.
    pub fn value(&self, hw_namespace: &str, hw_name: &str, source: &str) -> Result<String, String> {
        let name = copy_name(hw_namespace, hw_name);
        let Some(copy) = self
            .store
            .get(&ObjectRef::new(&name).within(&self.namespace))
        else {
            return Err(format!(
                "Secret {hw_namespace}/{source} has no copy in {} (the controller copies it once \
                 it is a Secret of type {AGENT_SECRET_TYPE} with a usable `secret` key; the \
                 Hardware's Events say what is wrong)",
                self.namespace
            ));
        };
        copy_value(&copy, hw_namespace, hw_name, source)
            .map_err(|why| format!("Secret {hw_namespace}/{source}: {why}"))
    }
}

/// Keeps the copies in `namespace` in `writer`'s store until `shutdown`; `synced` turns true
/// once they have been listed (and stays true: a relist replaces the store only when it is
/// complete).
pub async fn feed(
    client: kube::Client,
    namespace: String,
    writer: reflector::store::Writer<Secret>,
    metrics: Metrics,
    synced: watch::Sender<bool>,
    shutdown: CancellationToken,
) -> Result<(), FeedEnded> {
    let api: Api<Secret> = Api::namespaced(client, &namespace);
    let config = watcher::Config::default().labels(&format!("{COPY_LABEL}=true"));
    let mut copies =
        reflector::reflector(writer, watcher::watcher(api, config).default_backoff()).boxed();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            event = copies.next() => match event {
                None => return Err(FeedEnded("agent secret copies")),
                Some(Err(error)) => {
                    metrics.index.watch_errors.inc();
                    tracing::warn!(%error, namespace = %namespace, "agent secret copies watch error; retrying");
                }
                Some(Ok(Event::InitDone)) => {
                    synced.send_replace(true);
                    tracing::info!(namespace = %namespace, "agent secret copies synced");
                }
                Some(Ok(_)) => {}
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tink_api::agent_secret::copy_for;

    fn secrets(copies: Vec<Secret>) -> AgentSecrets {
        let (store, mut writer) = reflector::store();
        writer.apply_watcher_event(&Event::Init);
        for c in copies {
            writer.apply_watcher_event(&Event::InitApply(c));
        }
        writer.apply_watcher_event(&Event::InitDone);
        AgentSecrets::new("tink-system", store)
    }

    #[test]
    fn only_the_hardwares_own_copy_of_the_named_secret_is_used() {
        let s = secrets(vec![
            copy_for("tink-system", "ns", "m1", "m1-agent", "v-1"),
            // A copy in another namespace is not one of ours.
            copy_for("elsewhere", "ns", "m2", "m2-agent", "v-2"),
        ]);
        assert_eq!(s.value("ns", "m1", "m1-agent").as_deref(), Ok("v-1"));
        // The annotation now names another Secret: not copied yet.
        assert!(
            s.value("ns", "m1", "other")
                .unwrap_err()
                .contains("not made yet")
        );
        let none = s.value("ns", "m2", "m2-agent").unwrap_err();
        assert!(none.contains("has no copy in tink-system"), "{none}");
        assert!(none.contains("tinkerbell.org/agent-secret"), "{none}");
    }
}
