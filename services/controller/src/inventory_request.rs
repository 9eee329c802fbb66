//! Inventory on request: `kubectl annotate hardware M tinkerbell.org/inventory-request=<anything>`
//! (or `tinkctl hardware inventory M --refresh`) asks the machine's agent for a fresh inventory.
//!
//! The leader sees the annotation in its Hardware watch and derives the request's id from the
//! Hardware's uid and the annotation's value ([`request_id`]: a new value is a new request; the
//! operator's text never travels to the machine). It publishes the id on the core-NATS subject
//! of each agent id of the machine ([`tink_bus::inventory_request_subject`]); the server replica
//! holding that agent's stream forwards it as a `RequestInventory` command, and the agent
//! collects its inventory again and reports it naming the request. Core NATS delivers at most
//! once and only to a connected agent, so the request is sent again every [`RESEND`] (by default) until it is
//! answered: the inventory consumer records an authenticated report naming the current request
//! in `status.inventoryRequest` (with the inventory, even an unchanged one, and a new
//! `status.inventoryReportedAt`); then the annotation is removed with a JSON patch that tests its
//! value (a newer request written meanwhile stays) and a Kubernetes Event `InventoryReported`
//! records it. An agent that is down simply gets the request when it is back (and reports at
//! start anyway). A leader that dies in between leaves the annotation: the next one asks again,
//! and an agent answering twice is harmless.
//!
//! Only the machine's authenticated agent can answer (the server refuses a request id on an
//! enrollment, and the consumer ignores a request id that is not the Hardware's current one).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource as _, ResourceExt as _};
use tink_api::v1alpha2::Hardware;
use tink_workflow::{EventReason, EventType, agent_ids};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::locks::lock;
use crate::metrics::Metrics;
use crate::recorder::{KubeEvent, KubeEvents};
use crate::tasks::Spawner;

pub use tink_api::v1alpha2::INVENTORY_REQUEST_ANNOTATION;

/// How often an unanswered request is sent again (the default of
/// `ControllerConfig::inventory_request_resend`).
pub const RESEND: Duration = Duration::from_secs(30);

/// The id of the request the annotation value `value` makes on the Hardware with `uid`
/// ([`tink_api::v1alpha2::inventory_request_id`]).
pub fn request_id(uid: &str, value: &str) -> String {
    tink_api::v1alpha2::inventory_request_id(uid, value)
}

/// The id of the Hardware's pending request (its annotation), if any.
pub fn pending_request(hw: &Hardware) -> Option<String> {
    let value = hw.annotations().get(INVENTORY_REQUEST_ANNOTATION)?;
    Some(request_id(&hw.uid().unwrap_or_default(), value))
}

/// Whether the Hardware's status says its agent answered request `id`.
fn answered(hw: &Hardware, id: &str) -> bool {
    hw.status
        .as_ref()
        .and_then(|s| s.inventory_request.as_deref())
        == Some(id)
}

/// The inventory requests of the leader's term.
pub(crate) struct InventoryRequests {
    client: Client,
    nats: async_nats::Client,
    metrics: Metrics,
    kube_events: KubeEvents,
    spawner: Spawner,
    hardware: Store<Hardware>,
    cancel: CancellationToken,
    resend: Duration,
    /// Requests being followed, by Hardware uid and request id, with a bell rung on every
    /// change of that Hardware (so an answer is seen at once, not at the next resend).
    in_flight: Mutex<HashMap<(String, String), Arc<Notify>>>,
}

impl InventoryRequests {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Client,
        bus: &tink_bus::Bus,
        metrics: Metrics,
        kube_events: KubeEvents,
        spawner: Spawner,
        hardware: Store<Hardware>,
        cancel: CancellationToken,
        resend: Duration,
    ) -> Self {
        Self {
            client,
            nats: bus.jetstream.client(),
            metrics,
            kube_events,
            spawner,
            hardware,
            cancel,
            resend,
            in_flight: Mutex::new(HashMap::new()),
        }
    }

    /// Follows the Hardware's request when it carries the annotation: starts following it, or
    /// wakes the follower (the change may be its answer).
    pub fn observe(self: &Arc<Self>, hw: &Hardware) {
        if hw.metadata.deletion_timestamp.is_some() {
            return;
        }
        let Some(value) = hw.annotations().get(INVENTORY_REQUEST_ANNOTATION).cloned() else {
            return;
        };
        let uid = hw.uid().unwrap_or_default();
        let id = request_id(&uid, &value);
        let key = (uid, id.clone());
        let bell = {
            let mut in_flight = lock(&self.in_flight);
            if let Some(bell) = in_flight.get(&key) {
                bell.notify_one();
                return;
            }
            let bell = Arc::new(Notify::new());
            in_flight.insert(key.clone(), bell.clone());
            bell
        };
        let (this, hw) = (self.clone(), hw.clone());
        let task = format!(
            "inventory request of {}/{}",
            hw.namespace().unwrap_or_default(),
            hw.name_any()
        );
        self.spawner.spawn(task, async move {
            this.follow(&hw, &value, &id, &bell).await;
            lock(&this.in_flight).remove(&key);
        });
    }

    /// Sends the request until it is answered, withdrawn (the annotation changed or is gone),
    /// the Hardware is gone, or the term ends.
    async fn follow(&self, first: &Hardware, value: &str, id: &str, bell: &Notify) {
        let ns = first.namespace().unwrap_or_default();
        let name = first.name_any();
        let uid = first.uid().unwrap_or_default();
        let at = ObjectRef::<Hardware>::new(&name).within(&ns);
        let mut sent = 0u32;
        loop {
            let current = self.hardware.get(&at);
            let Some(hw) = current.as_deref().or(Some(first).filter(|_| sent == 0)) else {
                return;
            };
            if hw.uid().unwrap_or_default() != uid
                || hw
                    .annotations()
                    .get(INVENTORY_REQUEST_ANNOTATION)
                    .map(String::as_str)
                    != Some(value)
            {
                debug!(hardware = %format!("{ns}/{name}"), "inventory request withdrawn or replaced");
                return;
            }
            if answered(hw, id) {
                self.close(hw, value, id).await;
                return;
            }
            if self.cancel.is_cancelled() {
                return;
            }
            let agents = agent_ids(&hw.spec);
            if agents.is_empty() {
                self.metrics.error("inventory_request");
                warn!(hardware = %format!("{ns}/{name}"), "an inventory request for a Hardware without an agent id (no interface MAC): nothing to ask");
                return;
            }
            for agent in &agents {
                match tink_bus::inventory_request_subject(agent) {
                    Ok(subject) => {
                        if let Err(e) = self.nats.publish(subject, id.to_string().into()).await {
                            self.metrics.error("inventory_request");
                            warn!(agent_id = %agent, error = %e, "cannot send an inventory request; sent again later");
                        }
                    }
                    Err(e) => {
                        warn!(agent_id = %agent, error = %e, "an agent id that names no subject")
                    }
                }
            }
            sent += 1;
            self.metrics.inventory("request_sent");
            debug!(hardware = %format!("{ns}/{name}"), request_id = id, sent, "inventory request sent");
            tokio::select! {
                () = self.cancel.cancelled() => return,
                () = bell.notified() => {}
                () = tokio::time::sleep(self.resend) => {}
            }
        }
    }

    /// The request is answered: remove the annotation (if it still holds `value`) and record it.
    async fn close(&self, hw: &Hardware, value: &str, id: &str) {
        let ns = hw.namespace().unwrap_or_default();
        let name = hw.name_any();
        let path = format!(
            "/metadata/annotations/{}",
            INVENTORY_REQUEST_ANNOTATION
                .replace('~', "~0")
                .replace('/', "~1")
        );
        let patch: json_patch::Patch = match serde_json::from_value(serde_json::json!([
            {"op": "test", "path": path, "value": value},
            {"op": "remove", "path": path},
        ])) {
            Ok(p) => p,
            Err(e) => {
                warn!(error = %e, "cannot build the annotation patch");
                return;
            }
        };
        let api: Api<Hardware> = Api::namespaced(self.client.clone(), &ns);
        self.metrics.write("inventory_request");
        match api
            .patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
            .await
        {
            Ok(_) => {}
            // A newer request (or none) by now: its own watch event handles it.
            Err(kube::Error::Api(e)) if e.code == 422 || e.code == 404 => return,
            Err(e) => {
                self.metrics.error("inventory_request");
                warn!(hardware = %format!("{ns}/{name}"), error = %e, "cannot remove the answered inventory request; retried on the next change of the Hardware");
                return;
            }
        }
        let reported_at = hw
            .status
            .as_ref()
            .and_then(|s| s.inventory_reported_at.clone())
            .unwrap_or_default();
        info!(hardware = %format!("{ns}/{name}"), request_id = id, "inventory request answered");
        self.kube_events.record(KubeEvent {
            regarding: hw.object_ref(&()),
            type_: EventType::Normal,
            reason: EventReason::InventoryReported,
            message: format!(
                "tinkerbell.org/inventory-request: the agent reported a fresh inventory at {reported_at} (request {id})"
            ),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_differ_by_value_and_by_hardware() {
        let a = request_id("uid-1", "2026-11-27");
        assert_eq!(a.len(), 32);
        assert!(tink_bus::check_inventory_request_id(&a).is_ok());
        assert_eq!(a, request_id("uid-1", "2026-11-27"));
        assert_ne!(a, request_id("uid-1", "2026-11-28"));
        assert_ne!(a, request_id("uid-2", "2026-11-27"));
        // The separator keeps "ab"+"c" apart from "a"+"bc".
        assert_ne!(request_id("ab", "c"), request_id("a", "bc"));
    }
}
