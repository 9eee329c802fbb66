//! The inventory consumer: agents' hardware inventories (the inventory stream, one message per
//! agent, [`tink_bus::INVENTORY_STREAM`]) written to their Hardware's status.
//!
//! For each message: the agent id comes from the subject (the server publishes on the subject
//! of the *authenticated* agent, never of a body's claim), the payload is validated again
//! ([`tink_inventory::Inventory::from_json`]: the bus is not trusted more than the network),
//! and the agent id is mapped to its Hardware through the same index dispatch uses
//! ([`tink_hardware_index::Index::by_agent`]). The Hardware's `status.attributes.inBand`
//! becomes the inventory's [`tink_inventory::Inventory::to_attributes`] (Tinkerbell's shape) and
//! `status.inventoryReportedAt` the time of the write, through the status subresource with a
//! JSON patch that touches only those two fields, and only when `inBand` changed
//! ([`status_patch`]): an identical report costs no write. Writes per machine: one per changed
//! inventory (an agent reports once per boot; identical reports are also de-duplicated by the
//! stream).
//!
//! An inventory for an agent id that no Hardware names (or several do) is dropped and counted
//! (discovery of unknown machines comes later); so is an invalid one. Messages are acked after
//! the write (or the drop); a failed write is handed back and delivered again.
//!
//! Metrics: `tink_controller_inventories{value}` and `tink_controller_api_writes{value="hardware_status"}`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Api, Client, ResourceExt as _};
use serde_json::{Value, json};
use tink_api::AgentId;
use tink_api::v1alpha2::{Hardware, HardwareStatus};
use tink_hardware_index::{Index, Lookup};
use tink_inventory::Inventory;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::locks::lock;
use crate::metrics::Metrics;

/// Inventories applied at once.
const CONCURRENCY: usize = 32;
/// How long a message handed back waits before JetStream delivers it again.
const NAK_DELAY: Duration = Duration::from_secs(2);
/// Pause before binding the consumer again after a failure.
const REBIND_DELAY: Duration = Duration::from_secs(1);
/// How long JetStream waits for an ack before delivering a message again.
const ACK_WAIT: Duration = Duration::from_secs(30);

/// The JSON patch writing `in_band` and the report time `now` into a Hardware whose status is
/// `current`, touching nothing else; `None` when `status.attributes.inBand` already is `in_band`.
pub fn status_patch(current: Option<&HardwareStatus>, in_band: &Value, now: &str) -> Option<Value> {
    let attributes = current.and_then(|s| s.attributes.as_ref());
    if attributes.and_then(|a| a.in_band.as_ref()) == Some(in_band) {
        return None;
    }
    Some(match (current, attributes) {
        (None, _) => json!([{"op": "add", "path": "/status", "value": {
            "attributes": {"inBand": in_band},
            "inventoryReportedAt": now,
        }}]),
        (Some(_), None) => json!([
            {"op": "add", "path": "/status/attributes", "value": {"inBand": in_band}},
            {"op": "add", "path": "/status/inventoryReportedAt", "value": now},
        ]),
        (Some(_), Some(_)) => json!([
            {"op": "add", "path": "/status/attributes/inBand", "value": in_band},
            {"op": "add", "path": "/status/inventoryReportedAt", "value": now},
        ]),
    })
}

fn digest(value: &Value) -> String {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    let d = ring::digest::digest(&ring::digest::SHA256, &bytes);
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// What this leader last wrote to a Hardware: the resourceVersion the write was based on and
/// the SHA-256 of the `inBand` it wrote, so a report arriving before the watch delivered our
/// own write is not written twice.
#[derive(Debug, Default)]
struct Written(Mutex<HashMap<String, (String, String)>>);

/// The inventory consumer of one term.
pub(crate) struct Inventories {
    client: Client,
    metrics: Metrics,
    index: Arc<Index<Hardware>>,
    written: Written,
}

enum Outcome {
    Ack(&'static str),
    Retry(&'static str),
}

impl Inventories {
    pub fn new(client: Client, metrics: Metrics, index: Arc<Index<Hardware>>) -> Self {
        Self {
            client,
            metrics,
            index,
            written: Written::default(),
        }
    }

    /// Runs the consumer until `cancel`, once the Hardware cache has synced (an inventory
    /// read before would find no Hardware and be dropped).
    pub async fn run(
        self: Arc<Self>,
        stream: jetstream::stream::Stream,
        hardware: Store<Hardware>,
        cancel: CancellationToken,
    ) {
        // Asked again every second: a waiter of the store's readiness that is not the last
        // one polled may never be woken (kube-runtime's DelayedInit keeps one waker), so it
        // never waits for long on one future.
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                ready = tokio::time::timeout(Duration::from_secs(1), hardware.wait_until_ready()) => match ready {
                    Ok(Ok(())) => break,
                    Ok(Err(_)) => return,
                    Err(_) => continue,
                },
            }
        }
        let config = tink_bus::inventory_consumer_config(ACK_WAIT);
        let name = tink_bus::CONTROLLER_INVENTORY_CONSUMER;
        while !cancel.is_cancelled() {
            let consumer = match stream.get_or_create_consumer(name, config.clone()).await {
                Ok(c) => c,
                Err(e) => {
                    self.metrics.error("inventory_consumer");
                    warn!(error = %e, "cannot bind the inventory consumer; retrying");
                    pause(&cancel, REBIND_DELAY).await;
                    continue;
                }
            };
            let messages = consumer
                .stream()
                .max_messages_per_batch(CONCURRENCY)
                .heartbeat(Duration::from_secs(5))
                .expires(Duration::from_secs(30))
                .messages()
                .await;
            let mut messages = match messages {
                Ok(m) => m,
                Err(e) => {
                    self.metrics.error("inventory_consumer");
                    warn!(error = %e, "cannot read the inventory consumer; retrying");
                    pause(&cancel, REBIND_DELAY).await;
                    continue;
                }
            };
            info!(consumer = name, "inventory consumer bound");
            let mut in_flight = FuturesUnordered::new();
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    Some(()) = in_flight.next(), if !in_flight.is_empty() => {}
                    m = messages.next(), if in_flight.len() < CONCURRENCY => match m {
                        Some(Ok(m)) => in_flight.push(self.clone().handle(m)),
                        Some(Err(e)) => {
                            self.metrics.error("inventory_consumer");
                            warn!(error = %e, "inventory consumer error");
                        }
                        None => break,
                    },
                }
            }
            while in_flight.next().await.is_some() {}
        }
    }

    async fn handle(self: Arc<Self>, message: jetstream::Message) {
        let outcome = self.apply(&message.subject, &message.payload).await;
        let (ack, outcome) = match outcome {
            Outcome::Ack(o) => (AckKind::Ack, o),
            Outcome::Retry(o) => (AckKind::Nak(Some(NAK_DELAY)), o),
        };
        self.metrics.inventory(outcome);
        if let Err(e) = message.ack_with(ack).await {
            self.metrics.error("inventory_ack");
            debug!(error = %e, "cannot acknowledge an inventory; it comes again");
        }
    }

    async fn apply(&self, subject: &str, payload: &[u8]) -> Outcome {
        let Some(agent) =
            tink_bus::agent_from_inventory_subject(subject).and_then(|id| AgentId::parse(&id).ok())
        else {
            warn!(
                subject,
                "dropping an inventory on a subject that names no agent"
            );
            return Outcome::Ack("invalid");
        };
        let inventory = match Inventory::from_json(payload) {
            Ok(i) => i,
            Err(e) => {
                warn!(agent_id = %agent, error = %e, "dropping an invalid inventory");
                return Outcome::Ack("invalid");
            }
        };
        let hardware = match self.index.by_agent(&agent) {
            Lookup::Found(hw, _) => hw,
            Lookup::Unknown => {
                debug!(agent_id = %agent, "no Hardware names this agent; inventory dropped");
                return Outcome::Ack("unknown_agent");
            }
            Lookup::Conflict(owners) => {
                warn!(agent_id = %agent, ?owners, "several Hardware name this agent; inventory dropped");
                return Outcome::Ack("conflict");
            }
        };
        let in_band = match serde_json::to_value(inventory.to_attributes()) {
            Ok(v) => v,
            Err(e) => {
                warn!(agent_id = %agent, error = %e, "cannot serialize an inventory's attributes");
                return Outcome::Ack("invalid");
            }
        };
        self.write(&hardware, &in_band).await
    }

    /// Writes `in_band` to `cached` (the index's copy) when it changed; on a failed patch
    /// (the copy was stale: a status path that no longer exists) once more from a fresh read.
    async fn write(&self, cached: &Hardware, in_band: &Value) -> Outcome {
        let namespace = cached.namespace().unwrap_or_default();
        let name = cached.name_any();
        let key = format!("{namespace}/{name}");
        let sum = digest(in_band);
        let cached_rv = cached.resource_version().unwrap_or_default();
        if let Some((based_on, written)) = lock(&self.written.0).get(&key)
            && *based_on == cached_rv
            && *written == sum
        {
            return Outcome::Ack("unchanged");
        }
        let api: Api<Hardware> = Api::namespaced(self.client.clone(), &namespace);
        let mut current = cached.clone();
        for attempt in 0..2 {
            let now = jiff::Timestamp::now().to_string();
            let Some(patch) = status_patch(current.status.as_ref(), in_band, &now) else {
                return Outcome::Ack("unchanged");
            };
            let patch: json_patch::Patch = match serde_json::from_value(patch) {
                Ok(p) => p,
                Err(_) => return Outcome::Ack("invalid"),
            };
            let based_on = current.resource_version().unwrap_or_default();
            match api
                .patch_status(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
                .await
            {
                Ok(_) => {
                    self.metrics.write("hardware_status");
                    lock(&self.written.0).insert(key, (based_on, sum));
                    info!(hardware = %format!("{namespace}/{name}"), "inventory written to the Hardware's status");
                    return Outcome::Ack("written");
                }
                Err(kube::Error::Api(e)) if e.code == 404 => return Outcome::Ack("gone"),
                Err(e) if attempt == 0 => {
                    debug!(hardware = %key, error = %e, "status patch failed; reading the Hardware again");
                    match api.get_status(&name).await {
                        Ok(fresh) => current = fresh,
                        Err(kube::Error::Api(e)) if e.code == 404 => return Outcome::Ack("gone"),
                        Err(e) => {
                            self.metrics.error("hardware_status");
                            warn!(hardware = %key, error = %e, "cannot read the Hardware; the inventory comes again");
                            return Outcome::Retry("failed");
                        }
                    }
                }
                Err(e) => {
                    self.metrics.error("hardware_status");
                    warn!(hardware = %key, error = %e, "cannot write the inventory; it comes again");
                    return Outcome::Retry("failed");
                }
            }
        }
        Outcome::Retry("failed")
    }
}

async fn pause(cancel: &CancellationToken, d: Duration) {
    tokio::select! {
        _ = cancel.cancelled() => {}
        _ = tokio::time::sleep(d) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tink_api::v1alpha2::HardwareAttributes;

    fn status(in_band: Option<Value>, out_of_band: Option<Value>) -> HardwareStatus {
        HardwareStatus {
            attributes: Some(HardwareAttributes {
                in_band,
                out_of_band,
            }),
            inventory_reported_at: Some("2026-01-01T00:00:00Z".into()),
        }
    }

    #[test]
    fn patches_touch_only_in_band_and_the_report_time() {
        let new = json!({"cpu": {"totalThreads": 8}});
        let now = "2026-11-27T12:00:00Z";
        // No status yet: the whole status.
        assert_eq!(
            status_patch(None, &new, now),
            Some(json!([{"op": "add", "path": "/status", "value": {
                "attributes": {"inBand": new}, "inventoryReportedAt": now}}]))
        );
        // A status without attributes: attributes added, nothing else replaced.
        let empty = HardwareStatus::default();
        assert_eq!(
            status_patch(Some(&empty), &new, now),
            Some(json!([
                {"op": "add", "path": "/status/attributes", "value": {"inBand": new}},
                {"op": "add", "path": "/status/inventoryReportedAt", "value": now},
            ]))
        );
        // Out-of-band attributes are kept: only inBand is replaced (stale keys included).
        let old = status(
            Some(json!({"cpu": {"totalThreads": 4}, "bios": {}})),
            Some(json!({"bios": {}})),
        );
        assert_eq!(
            status_patch(Some(&old), &new, now),
            Some(json!([
                {"op": "add", "path": "/status/attributes/inBand", "value": new},
                {"op": "add", "path": "/status/inventoryReportedAt", "value": now},
            ]))
        );
    }

    #[test]
    fn an_unchanged_inventory_is_not_written() {
        let same = json!({"cpu": {"totalThreads": 8}, "memory": {"totalBytes": 1}});
        let current = status(Some(same.clone()), None);
        assert_eq!(status_patch(Some(&current), &same, "now"), None);
        // Any difference is written.
        let other = json!({"cpu": {"totalThreads": 8}, "memory": {"totalBytes": 2}});
        assert!(status_patch(Some(&current), &other, "now").is_some());
    }
}
