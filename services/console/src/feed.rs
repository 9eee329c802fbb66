//! The one driver of the live fan-out: the watches ([`crate::cache::watch`]) and the presence
//! watch ([`crate::presence::watch`]) apply what they see to their own state and return it as
//! a change; the [`Feed`] reads what else a change touches from the cache (a workflow's
//! machine, a machine's latest workflow and agent) and hands each affected fragment to
//! [`Live`], which renders it once and broadcasts it. Nothing else calls [`Live`]'s `*_changed`
//! methods, so what a browser is told about follows from one place.
//!
//! The module graph stays a DAG: `cache` and `presence` know nothing of `live` or of this
//! module; this module depends on them and on `live`.

use std::sync::Arc;

use tink_api::v1alpha2::Hardware;

use crate::cache::{Cache, Change, key_of};
use crate::live::Live;
use crate::presence::AgentChanged;

/// Hands the changes of the watches to the live streams (clones share the same cache and
/// broadcaster).
#[derive(Clone)]
pub struct Feed {
    cache: Arc<Cache>,
    live: Arc<Live>,
}

impl Feed {
    /// The feed of `live` from `cache`.
    pub fn new(cache: Arc<Cache>, live: Arc<Live>) -> Feed {
        Feed { cache, live }
    }

    /// A change the watches applied to the cache: its fragments, and for a workflow its
    /// machine's tile (the tile shows the latest workflow).
    pub fn apply(&self, change: Change<'_>) {
        match change {
            Change::Machine { hw, deleted } => self.machine(hw, deleted),
            Change::Workflow { w, deleted } => {
                self.live.workflow_changed(w, deleted);
                let (ns, _) = key_of(w);
                if let Some(hw) = self.cache.machine(&ns, &w.spec.hardware_ref.name) {
                    self.machine(&hw, false);
                }
            }
            Change::Event(e) => self.live.event_changed(e),
            // The machines whose bmcRef names it: their tiles and BMC parts.
            Change::BmcMachine(m) => {
                let (ns, name) = key_of(m);
                for hw in self.cache.hardware_of_bmc(&ns, &name) {
                    self.machine(&hw, false);
                }
            }
            Change::BmcJob(j) => {
                let (ns, _) = key_of(j);
                if j.spec.machine_ref.namespace == ns {
                    for hw in self.cache.hardware_of_bmc(&ns, &j.spec.machine_ref.name) {
                        self.machine(&hw, false);
                    }
                }
            }
            Change::Resync => self.live.resync(),
        }
    }

    /// An agent connected or left: the tile of its machine.
    pub fn agent_changed(&self, change: &AgentChanged) {
        // The index knows each machine's agent ids (both claimants when two machines claim
        // one); an id that is no valid agent id (the presence watch keeps its trimmed, lower-
        // cased text) is in no index, so only then one pass compares the keys as spelled.
        match tink_api::AgentId::normalize(&change.0) {
            Ok(id) => {
                for hw in self.cache.hardware.agent_claimants(&id) {
                    self.machine(&hw, false);
                }
            }
            Err(_) => {
                for hw in self.cache.hardware.all() {
                    if hw
                        .spec
                        .network_interfaces
                        .keys()
                        .any(|k| tink_workflow::normalize_agent_id(k) == change.0)
                    {
                        self.machine(&hw, false);
                    }
                }
            }
        }
    }

    fn machine(&self, hw: &Hardware, deleted: bool) {
        if deleted {
            self.live.machine_changed(hw, None);
            return;
        }
        let (ns, name) = key_of(hw);
        let agent = self.cache.presence.of(hw);
        let latest = self.cache.latest_workflow(&ns, &name);
        let bmc = self.cache.bmc(hw, jiff::Timestamp::now());
        self.live
            .machine_changed(hw, Some((latest.as_deref(), agent, &bmc)));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;
    use tink_api::v1alpha2::Workflow;

    use super::*;
    use crate::live::{Kind, Update};
    use crate::metrics::Metrics;

    fn machine(name: &str, mac: &str) -> Hardware {
        tink_api::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": name, "namespace": "a"},
            "spec": {"networkInterfaces": {mac: {}}},
        }))
        .unwrap()
    }

    fn workflow(name: &str, machine: &str) -> Workflow {
        tink_api::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
            "metadata": {"name": name, "namespace": "a", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"hardwareRef": {"name": machine}, "templateRef": {"name": "t"}},
            "status": {"state": "Running"},
        }))
        .unwrap()
    }

    fn drain(rx: &mut tokio::sync::broadcast::Receiver<Arc<Update>>) -> Vec<(Kind, String)> {
        let mut out = Vec::new();
        while let Ok(u) = rx.try_recv() {
            out.push((u.kind, u.id.clone()));
        }
        out
    }

    #[test]
    fn the_feed_turns_each_change_into_the_fragments_it_touches() {
        let (cache, mut writers) = Cache::new(10);
        let (m1, m2) = (
            machine("m1", "02:00:00:00:00:01"),
            machine("m2", "02:00:00:00:00:02"),
        );
        Cache::fill(&mut writers, &cache, vec![m1.clone(), m2], vec![]);
        let live = Arc::new(Live::new(64, Metrics::default()));
        let feed = Feed::new(cache.clone(), live.clone());
        let (mut rx, _) = live.subscribe(None);

        // A workflow: its row and page, then its machine's tile, which now names it.
        let w = workflow("wf", "m1");
        feed.apply(cache.apply_workflow(&mut writers, &w));
        assert_eq!(
            drain(&mut rx),
            [
                (Kind::Workflow, "w/a/wf".into()),
                (Kind::Machine, "m/a/m1".into())
            ]
        );
        // A machine that went: its tile is removed.
        feed.apply(Change::Machine {
            hw: &m1,
            deleted: true,
        });
        let (_, backlog) = live.subscribe(Some(2));
        let gone = backlog.unwrap();
        assert_eq!(gone.len(), 1);
        assert!(gone[0].html.is_none() && gone[0].kind == Kind::Machine);
        assert!(
            live.subscribe(Some(1)).1.unwrap()[0]
                .html
                .as_deref()
                .is_some_and(|h| h.contains("wf")),
            "the tile named its latest workflow"
        );
        drain(&mut rx);
        // An agent that connected: the tile of the machine with that MAC, and only it.
        cache.presence.enable(Duration::from_secs(30));
        let now = jiff::Timestamp::now();
        cache.presence.observe_replica(tink_bus::ReplicaHeartbeat {
            replica: "server-a".into(),
            instance: "p1".into(),
            started: now,
            heartbeat: now,
        });
        assert!(cache.presence.observe(
            "02:00:00:00:00:02",
            Some(&tink_bus::Presence {
                agent_id: "02:00:00:00:00:02".into(),
                server: "server-a".into(),
                session: "s".into(),
                connected_since: now,
                heartbeat: now,
                replica_instance: "p1".into(),
                instance: String::new(),
                token_sha256: String::new(),
                certificate: false,
            })
        ));
        feed.agent_changed(&AgentChanged("02:00:00:00:00:02".into()));
        assert_eq!(drain(&mut rx), [(Kind::Machine, "m/a/m2".into())]);
        // A relist: every page reloads.
        feed.apply(Change::Resync);
        assert_eq!(drain(&mut rx), [(Kind::Resync, String::new())]);
    }
}
