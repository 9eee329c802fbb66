//! The operator's session reset through the Hardware: `kubectl annotate hardware M
//! tinkerbell.org/agent-reset=<anything>` ends the sessions of the machine's agents, as
//! `tinkctl agent reset MAC` does, for operators who only have kubectl.
//!
//! The leader sees the annotation in its Hardware watch, purges the presence entry (which holds
//! the session token's hash) and the exchanged boot secret entry (so the agent of the same boot
//! may exchange its boot secret once more) of every agent id of the machine, then removes the
//! annotation
//! with a JSON patch that tests its value: a new reset written meanwhile is not lost (the test
//! fails and the next watch event resets again). Purging twice is harmless, so a leader that
//! dies between the purge and the patch only makes the next one reset again. A Kubernetes
//! Event on the Hardware records each reset.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource as _, ResourceExt as _};
use tink_api::v1alpha2::Hardware;
use tink_workflow::{EventReason, EventType, agent_ids};
use tracing::{info, warn};

use crate::error::UpkeepError;
use crate::locks::lock;
use crate::metrics::Metrics;
use crate::recorder::{KubeEvent, KubeEvents};
use crate::tasks::Spawner;

/// The annotation that asks for a reset. Its value is free (a date, a ticket number).
pub const AGENT_RESET_ANNOTATION: &str = "tinkerbell.org/agent-reset";

/// The session resets of the leader's term.
pub(crate) struct AgentResets {
    client: Client,
    bus: tink_bus::Bus,
    metrics: Metrics,
    kube_events: KubeEvents,
    spawner: Spawner,
    /// Resets in flight, by Hardware uid and annotation value (a watch may show one object
    /// several times before the patch lands).
    in_flight: Mutex<HashSet<(String, String)>>,
}

impl AgentResets {
    pub fn new(
        client: Client,
        bus: tink_bus::Bus,
        metrics: Metrics,
        kube_events: KubeEvents,
        spawner: Spawner,
    ) -> Self {
        Self {
            client,
            bus,
            metrics,
            kube_events,
            spawner,
            in_flight: Mutex::new(HashSet::new()),
        }
    }

    /// Starts a reset when the Hardware carries the annotation and none is in flight for it.
    pub fn observe(self: &Arc<Self>, hw: &Hardware) {
        let Some(value) = hw.annotations().get(AGENT_RESET_ANNOTATION).cloned() else {
            return;
        };
        if hw.metadata.deletion_timestamp.is_some() {
            return;
        }
        let key = (hw.uid().unwrap_or_default(), value.clone());
        if !lock(&self.in_flight).insert(key.clone()) {
            return;
        }
        let (this, hw) = (self.clone(), hw.clone());
        let task = format!(
            "agent session reset of {}/{}",
            hw.namespace().unwrap_or_default(),
            hw.name_any()
        );
        self.spawner.spawn(task, async move {
            if let Err(e) = this.reset(&hw, &value).await {
                this.metrics.error("agent_reset");
                warn!(hardware = %hw.name_any(), error = %e, "agent session reset failed; retried on the next change of the Hardware");
            }
            lock(&this.in_flight).remove(&key);
        });
    }

    async fn reset(&self, hw: &Hardware, value: &str) -> Result<(), UpkeepError> {
        let ids = agent_ids(&hw.spec);
        let mut ended = Vec::new();
        for id in &ids {
            let key = tink_bus::agent_token(id)?;
            self.bus.presence.purge(&key).await?;
            self.bus.agent_secrets_used.purge(&key).await?;
            ended.push(id.as_str());
        }
        let ns = hw.namespace().unwrap_or_default();
        let name = hw.name_any();
        let path = format!(
            "/metadata/annotations/{}",
            AGENT_RESET_ANNOTATION.replace('~', "~0").replace('/', "~1")
        );
        let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
            {"op": "test", "path": path, "value": value},
            {"op": "remove", "path": path},
        ]))?;
        let api: Api<Hardware> = Api::namespaced(self.client.clone(), &ns);
        self.metrics.write("agent_reset");
        match api
            .patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
            .await
        {
            Ok(_) => {}
            // The value changed (a new reset) or the annotation is gone: that one is handled by
            // its own watch event.
            Err(kube::Error::Api(e)) if e.code == 422 || e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        let message = if ended.is_empty() {
            "tinkerbell.org/agent-reset: the Hardware has no agent id (no interface MAC)"
                .to_string()
        } else {
            format!(
                "tinkerbell.org/agent-reset: ended the session of agent {}; the next stream of each gets a new token",
                ended.join(", ")
            )
        };
        info!(hardware = %format!("{ns}/{name}"), agents = ?ended, "agent sessions reset");
        self.kube_events.record(KubeEvent {
            regarding: hw.object_ref(&()),
            type_: EventType::Normal,
            reason: EventReason::AgentSessionReset,
            message,
        });
        Ok(())
    }
}
