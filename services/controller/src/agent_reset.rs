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
use kube::{Resource as _, ResourceExt as _};
use tink_api::v1alpha2::Hardware;
use tink_workflow::{EventReason, EventType, agent_ids};
use tracing::{info, warn};

use crate::shared::{KubeEvent, Shared};

/// The annotation that asks for a reset. Its value is free (a date, a ticket number).
pub const AGENT_RESET_ANNOTATION: &str = "tinkerbell.org/agent-reset";

/// Resets in flight, by Hardware uid and annotation value (a watch may show one object
/// several times before the patch lands).
#[derive(Default)]
pub(crate) struct InFlight(Mutex<HashSet<(String, String)>>);

/// Starts a reset when the Hardware carries the annotation and none is in flight for it.
pub(crate) fn observe(shared: &Arc<Shared>, hw: &Hardware) {
    let Some(value) = hw.annotations().get(AGENT_RESET_ANNOTATION).cloned() else {
        return;
    };
    if hw.metadata.deletion_timestamp.is_some() {
        return;
    }
    let key = (hw.uid().unwrap_or_default(), value.clone());
    {
        let mut inflight = shared.resets.0.lock().unwrap_or_else(|e| e.into_inner());
        if !inflight.insert(key.clone()) {
            return;
        }
    }
    let (shared, hw) = (shared.clone(), hw.clone());
    tokio::spawn(async move {
        if let Err(e) = reset(&shared, &hw, &value).await {
            shared.metrics.error("agent_reset");
            warn!(hardware = %hw.name_any(), error = %e, "agent session reset failed; retried on the next change of the Hardware");
        }
        let mut inflight = shared.resets.0.lock().unwrap_or_else(|e| e.into_inner());
        inflight.remove(&key);
    });
}

async fn reset(shared: &Shared, hw: &Hardware, value: &str) -> anyhow::Result<()> {
    let ids = agent_ids(&hw.spec);
    let mut ended = Vec::new();
    for id in &ids {
        let key = tink_bus::agent_token(id)?;
        shared.bus.presence.purge(&key).await?;
        shared.bus.agent_secrets_used.purge(&key).await?;
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
    let api: Api<Hardware> = Api::namespaced(shared.client.clone(), &ns);
    shared.metrics.write("agent_reset");
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
        "tinkerbell.org/agent-reset: the Hardware has no agent id (no interface MAC)".to_string()
    } else {
        format!(
            "tinkerbell.org/agent-reset: ended the session of agent {}; the next stream of each gets a new token",
            ended.join(", ")
        )
    };
    info!(hardware = %format!("{ns}/{name}"), agents = ?ended, "agent sessions reset");
    shared.kube_event_raw(KubeEvent {
        regarding: hw.object_ref(&()),
        type_: EventType::Normal,
        reason: EventReason::AgentSessionReset,
        message,
    });
    Ok(())
}
