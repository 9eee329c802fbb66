//! Which agent ids may connect: the admitted agents bucket ([`tink_bus::ADMITTED_AGENTS_BUCKET`]).
//!
//! The leader keeps one entry per agent id a Hardware names (the keys of its
//! `spec.networkInterfaces`, canonical by the CRD's rule; [`Claims::of_hardware`], the one
//! definition the index shares): agent token -> `<namespace>/<name>`.
//! The servers mirror the bucket and refuse every other id, so a made-up id gets no session, no
//! consumer and no presence entry.
//!
//! - Every Hardware the watch applies adds its ids at once (written only when they differ from
//!   what this leader last wrote), so a machine can connect within moments of its Hardware.
//! - A deleted Hardware's ids go at once, unless another Hardware still names them.
//! - Every `agent_secrets_sweep` (30 s by default) the whole bucket is reconciled with the
//!   Hardware cache, only once that cache has synced: an empty cache at start must never
//!   remove every machine's admission.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use async_nats::jetstream::kv;
use futures::TryStreamExt as _;
use kube::ResourceExt as _;
use kube::runtime::reflector::Store;
use tink_api::v1alpha2::Hardware;
use tink_hardware_index::Claims;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::error::UpkeepError;
use crate::locks::lock;
use crate::metrics::Metrics;
use crate::tasks::Spawner;

/// What this leader last wrote (agent token -> value), so unchanged Hardware cost no write.
#[derive(Debug, Default)]
struct Written(Mutex<HashMap<String, String>>);

impl Written {
    fn get(&self, token: &str) -> Option<String> {
        lock(&self.0).get(token).cloned()
    }

    fn set(&self, token: &str, value: Option<String>) {
        let mut map = lock(&self.0);
        match value {
            Some(v) => map.insert(token.to_string(), v),
            None => map.remove(token),
        };
    }
}

/// The admitted agents bucket, kept by the leader.
pub(crate) struct Admitted {
    metrics: Metrics,
    /// The admitted agents bucket.
    bucket: kv::Store,
    hardware: Store<Hardware>,
    written: Written,
    spawner: Spawner,
}

/// The bucket value of a Hardware: `<namespace>/<name>`.
fn owner(hw: &Hardware) -> String {
    format!("{}/{}", hw.namespace().unwrap_or_default(), hw.name_any())
}

/// The entries the bucket should hold for these Hardware: agent token -> owner (the first
/// owner in name order when several Hardware name one id; the webhook refuses that, but a
/// conflict must not take the machine's admission away).
fn desired<'a>(hardware: impl IntoIterator<Item = &'a Hardware>) -> BTreeMap<String, String> {
    let mut want = BTreeMap::new();
    let mut all: Vec<&Hardware> = hardware.into_iter().collect();
    all.sort_by_key(|h| owner(h));
    for hw in all {
        for (id, _) in Claims::of_hardware(hw).agent_ids {
            if let Ok(token) = tink_bus::agent_token(id.as_str()) {
                want.entry(token).or_insert_with(|| owner(hw));
            }
        }
    }
    want
}

impl Admitted {
    pub fn new(
        metrics: Metrics,
        bucket: kv::Store,
        hardware: Store<Hardware>,
        spawner: Spawner,
    ) -> Self {
        Self {
            metrics,
            bucket,
            hardware,
            written: Written::default(),
            spawner,
        }
    }

    /// Called for every Hardware the watch applies: admits its agent ids.
    pub fn observe(self: &Arc<Self>, hw: &Hardware) {
        let want = desired([hw]);
        let missing: Vec<(String, String)> = want
            .into_iter()
            .filter(|(token, _)| self.written.get(token).is_none())
            .collect();
        if missing.is_empty() {
            return;
        }
        let this = self.clone();
        let task = format!("agent id admission of {}", owner(hw));
        self.spawner.spawn(task, async move {
            for (token, value) in missing {
                match this.bucket.put(&token, value.clone().into()).await {
                    Ok(_) => this.written.set(&token, Some(value)),
                    Err(e) => {
                        this.metrics.error("admitted_agents");
                        warn!(key = %token, error = %e, "cannot admit an agent id; the sweep retries");
                    }
                }
            }
        });
    }

    /// Called for every Hardware the watch sees deleted: removes its ids that no other Hardware
    /// names.
    pub fn forget(self: &Arc<Self>, hw: &Hardware) {
        let gone: HashSet<String> = desired([hw]).into_keys().collect();
        if gone.is_empty() {
            return;
        }
        let others: Vec<Arc<Hardware>> = self
            .hardware
            .state()
            .into_iter()
            .filter(|h| owner(h) != owner(hw))
            .collect();
        let still = desired(others.iter().map(|h| h.as_ref()));
        let remove: Vec<String> = gone
            .into_iter()
            .filter(|t| !still.contains_key(t))
            .collect();
        let this = self.clone();
        let task = format!("agent id removal of {}", owner(hw));
        self.spawner.spawn(task, async move {
            for token in remove {
                match this.bucket.delete(&token).await {
                    Ok(()) => this.written.set(&token, None),
                    Err(e) => {
                        this.metrics.error("admitted_agents");
                        warn!(key = %token, error = %e, "cannot remove a deleted Hardware's agent id; the sweep retries");
                    }
                }
            }
        });
    }

    /// Reconciles the whole bucket with the Hardware cache once (the term runs it at once and
    /// then every `agent_secrets_sweep`), after waiting until the cache has synced (or `term`
    /// is cancelled: no sweep); a failure is counted.
    pub async fn sweep(&self, term: &CancellationToken) -> Result<(), UpkeepError> {
        tokio::select! {
            _ = term.cancelled() => return Ok(()),
            ready = self.hardware.wait_until_ready() => ready?,
        }
        self.sweep_once()
            .await
            .inspect_err(|_| self.metrics.error("admitted_agents"))
    }

    async fn sweep_once(&self) -> Result<(), UpkeepError> {
        let state = self.hardware.state();
        let want = desired(state.iter().map(|h| h.as_ref()));
        let bucket = &self.bucket;
        let keys: HashSet<String> = bucket.keys().await?.try_collect().await?;
        let mut removed = 0usize;
        for key in keys.iter().filter(|k| !want.contains_key(*k)) {
            bucket.delete(key).await?;
            self.written.set(key, None);
            removed += 1;
        }
        let mut added = 0usize;
        for (token, value) in want {
            let current = match bucket.entry(&token).await? {
                Some(e) if e.operation == kv::Operation::Put => {
                    Some(String::from_utf8_lossy(&e.value).into_owned())
                }
                _ => None,
            };
            if current.as_deref() != Some(value.as_str()) {
                bucket.put(&token, value.clone().into()).await?;
                added += 1;
            }
            self.written.set(&token, Some(value));
        }
        if added + removed > 0 {
            info!(added, removed, "admitted agents brought up to date");
        } else {
            debug!("admitted agents up to date");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hw(ns: &str, name: &str, macs: &[&str]) -> Hardware {
        let interfaces: serde_json::Map<String, serde_json::Value> = macs
            .iter()
            .map(|m| (m.to_string(), serde_json::json!({})))
            .collect();
        tink_api::from_value(serde_json::json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"networkInterfaces": interfaces},
        }))
        .expect("hardware")
    }

    #[test]
    fn every_id_of_every_hardware_is_admitted_once() {
        let a = hw("ns", "a", &["aa:bb:cc:00:00:01", "aa:bb:cc:00:00:02"]);
        let b = hw("ns", "b", &["aa:bb:cc:00:00:02", "aa:bb:cc:00:00:03"]);
        let want = desired([&b, &a]);
        let token = |m: &str| tink_bus::agent_token(m).expect("token");
        assert_eq!(want.len(), 3);
        assert_eq!(want[&token("aa:bb:cc:00:00:01")], "ns/a");
        assert_eq!(
            want[&token("aa:bb:cc:00:00:02")],
            "ns/a",
            "the first owner by name"
        );
        assert_eq!(want[&token("aa:bb:cc:00:00:03")], "ns/b");
        assert!(desired([&hw("ns", "c", &[])]).is_empty());
    }

    #[test]
    fn keys_that_are_no_agent_id_admit_nothing_as_before() {
        // Keys the CRD refuses (a kube-lite or pre-rule object may still hold them): the ids
        // of Claims::of_hardware give the bucket the entries tink_workflow::agent_ids did.
        let keys = [
            "Not A Mac",
            "AA-BB-CC-00-00-09",
            "worker-1",
            " -x",
            "",
            &"a".repeat(81),
        ];
        let h = hw("ns", "odd", &keys);
        let token = |m: &str| tink_bus::agent_token(m).expect("token");
        let want = desired([&h]);
        assert_eq!(want.keys().cloned().collect::<Vec<_>>(), {
            let mut t = vec![token("aa:bb:cc:00:00:09"), token("worker-1")];
            t.sort();
            t
        });
        let before: BTreeMap<String, String> = tink_workflow::agent_ids(&h.spec)
            .iter()
            .filter_map(|id| tink_bus::agent_token(id).ok())
            .map(|t| (t, "ns/odd".to_string()))
            .collect();
        assert_eq!(want, before);
    }
}
