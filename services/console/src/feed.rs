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
            Change::Resync => self.live.resync(),
        }
    }

    /// An agent connected or left: the tile of its machine.
    pub fn agent_changed(&self, change: &AgentChanged) {
        // A connection change is rare (heartbeats are not): one pass to find the machine.
        for hw in self.cache.hardware.state() {
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

    fn machine(&self, hw: &Hardware, deleted: bool) {
        if deleted {
            self.live.machine_changed(hw, None);
            return;
        }
        let (ns, name) = key_of(hw);
        let agent = self.cache.presence.of(hw);
        let latest = self.cache.latest_workflow(&ns, &name);
        self.live
            .machine_changed(hw, Some((latest.as_deref(), agent)));
    }
}
