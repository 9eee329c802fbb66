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
//! An inventory for an agent id that no Hardware names (or several do) is dropped and counted;
//! so is an invalid one. One agent's reports are applied one at a time and in stream order: a
//! report older (by stream sequence) than the last one applied is dropped (`stale`), so an old
//! inventory is never written last.
//!
//! **Discovery** ([`DiscoveryConfig`], off by default): a report marked as an enrollment
//! ([`tink_bus::ENROLLMENT_HEADER`]: a machine no Hardware named reported it without
//! credentials) creates the Hardware `discovery-<mac>` in the discovery namespace, labelled
//! [`DISCOVERED_LABEL`], with `spec.discovery.approved: false` (no Workflow until approved),
//! its MAC with the address it came from, and the discovery OSIE; then its inventory is written
//! as any other. At most `max` discovered Hardware wait for approval (counted from the cache
//! plus what this leader just created, one creation at a time); more enrollments are dropped
//! and counted
//! (`discovery_limit`). An enrollment for an id a Hardware names already changes nothing
//! (`enrollment_known`): only that machine's authenticated agent reports for it. Messages are acked after
//! the write (or the drop); a failed write is handed back and delivered again.
//!
//! Metrics: `tink_controller_inventories{value}` and `tink_controller_api_writes{value="hardware_status"}`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use kube::{Api, Client, ResourceExt as _};
use serde_json::{Value, json};
use tink_api::AgentId;
use tink_api::v1alpha2::{
    Hardware, HardwareStatus, INVENTORY_SOURCE_AGENT, INVENTORY_SOURCE_ENROLLMENT,
};
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

/// The JSON patch writing `in_band`, who reported it (`source`: [`INVENTORY_SOURCE_AGENT`] or
/// [`INVENTORY_SOURCE_ENROLLMENT`]), the inventory request it answers (if any) and the report
/// time `now` into a Hardware whose status is `current`, touching nothing else; `None` when the
/// status says all of that already (an unchanged report costs no write).
pub fn status_patch(
    current: Option<&HardwareStatus>,
    in_band: &Value,
    source: &str,
    request: Option<&str>,
    now: &str,
) -> Option<Value> {
    let attributes = current.and_then(|s| s.attributes.as_ref());
    let same_inventory = attributes.and_then(|a| a.in_band.as_ref()) == Some(in_band);
    let same_source = current.and_then(|s| s.inventory_source.as_deref()) == Some(source);
    let answered =
        request.is_none_or(|r| current.and_then(|s| s.inventory_request.as_deref()) == Some(r));
    if same_inventory && same_source && answered {
        return None;
    }
    let Some(_) = current else {
        let mut status = json!({
            "attributes": {"inBand": in_band},
            "inventoryReportedAt": now,
            "inventorySource": source,
        });
        if let Some(r) = request {
            status["inventoryRequest"] = json!(r);
        }
        return Some(json!([{"op": "add", "path": "/status", "value": status}]));
    };
    let mut ops = vec![
        match attributes {
            None => {
                json!({"op": "add", "path": "/status/attributes", "value": {"inBand": in_band}})
            }
            Some(_) => json!({"op": "add", "path": "/status/attributes/inBand", "value": in_band}),
        },
        json!({"op": "add", "path": "/status/inventoryReportedAt", "value": now}),
        json!({"op": "add", "path": "/status/inventorySource", "value": source}),
    ];
    if let Some(r) = request {
        ops.push(json!({"op": "add", "path": "/status/inventoryRequest", "value": r}));
    }
    Some(Value::Array(ops))
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

/// Discovery of unknown machines (issue 30): what the controller does with an enrollment.
#[derive(Clone, Debug)]
pub struct DiscoveryConfig {
    /// Create discovered Hardware from enrollments. Off by default: enrollments are dropped.
    pub enabled: bool,
    /// The namespace discovered Hardware are created in.
    pub namespace: String,
    /// The most discovered Hardware waiting for approval (labelled [`DISCOVERED_LABEL`], not
    /// approved) in that namespace; further enrollments are dropped and counted until some
    /// are approved or deleted.
    pub max: usize,
    /// The OSIE discovered machines boot (their `spec.osie.osieRef`), so a machine that reboots
    /// before approval comes back into the OSIE.
    pub osie: Option<String>,
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            namespace: "default".into(),
            max: 100,
            osie: None,
        }
    }
}

/// The label of a Hardware the controller created for an enrolled machine.
pub const DISCOVERED_LABEL: &str = "tinkerbell.org/discovered";

/// The name of the discovered Hardware of the machine with this MAC:
/// `discovery-aa-bb-cc-dd-ee-ff`.
pub fn discovered_name(mac: &str) -> String {
    format!("discovery-{}", mac.replace(':', "-"))
}

/// The discovered Hardware of an enrolled machine: its MAC as the one interface (with the
/// address it enrolled from, so Hegel knows it), the discovery OSIE, the label, and
/// `spec.discovery` not approved.
pub fn discovered_hardware(
    config: &DiscoveryConfig,
    mac: &str,
    address: &str,
    now: &str,
) -> Result<Hardware, serde_json::Error> {
    let mut dhcp = json!({});
    if address.parse::<std::net::Ipv4Addr>().is_ok() {
        dhcp = json!({"ip": address});
    }
    let mut spec = json!({
        "networkInterfaces": {mac: {"dhcp": dhcp}},
        "discovery": {"approved": false, "discoveredAt": now},
    });
    if !address.is_empty() {
        spec["discovery"]["address"] = json!(address);
    }
    if let Some(osie) = &config.osie {
        spec["osie"] = json!({"osieRef": {"name": osie}});
    }
    serde_json::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2",
        "kind": "Hardware",
        "metadata": {
            "name": discovered_name(mac),
            "namespace": config.namespace,
            "labels": {DISCOVERED_LABEL: "true"},
        },
        "spec": spec,
    }))
}

/// The inventory consumer of one term.
pub(crate) struct Inventories {
    client: Client,
    metrics: Metrics,
    index: Arc<Index<Hardware>>,
    hardware: Store<Hardware>,
    discovery: DiscoveryConfig,
    written: Written,
    /// One agent's reports one at a time and in stream order.
    order: Order,
    /// One discovered Hardware created at a time, and the names this leader created that the
    /// cache may not show yet (counted against the bound).
    creating: tokio::sync::Mutex<std::collections::HashSet<String>>,
}

enum Outcome {
    Ack(&'static str),
    Retry(&'static str),
}

impl Inventories {
    pub fn new(
        client: Client,
        metrics: Metrics,
        index: Arc<Index<Hardware>>,
        hardware: Store<Hardware>,
        discovery: DiscoveryConfig,
    ) -> Self {
        Self {
            client,
            metrics,
            index,
            hardware,
            discovery,
            written: Written::default(),
            order: Order::default(),
            creating: tokio::sync::Mutex::new(std::collections::HashSet::new()),
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
        let sequence = message.info().map(|i| i.stream_sequence).unwrap_or(0);
        let enrollment = message
            .headers
            .as_ref()
            .and_then(|h| h.get(tink_bus::ENROLLMENT_HEADER))
            .map(|v| v.as_str().to_string());
        let request = message
            .headers
            .as_ref()
            .and_then(|h| h.get(tink_bus::INVENTORY_REQUEST_HEADER))
            .map(|v| v.as_str().to_string());
        let subject = message.subject.to_string();
        let turn = self.order.turn(&subject);
        let outcome = {
            let _turn = turn.lock().await;
            if sequence != 0 && sequence < self.order.last(&subject) {
                Outcome::Ack("stale")
            } else {
                let outcome = self
                    .apply(
                        &subject,
                        &message.payload,
                        enrollment.as_deref(),
                        request.as_deref(),
                    )
                    .await;
                if matches!(outcome, Outcome::Ack(_)) {
                    self.order.applied(&subject, sequence);
                }
                outcome
            }
        };
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

    async fn apply(
        &self,
        subject: &str,
        payload: &[u8],
        enrollment: Option<&str>,
        request: Option<&str>,
    ) -> Outcome {
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
        let source = match enrollment {
            Some(_) => INVENTORY_SOURCE_ENROLLMENT,
            None => INVENTORY_SOURCE_AGENT,
        };
        let hardware = match (self.index.by_agent(&agent), enrollment) {
            // An enrollment carries no credentials: it never changes a Hardware that names
            // the machine already (a spoofed MAC changes nothing), discovered or not.
            (Lookup::Found(hw, _), Some(_)) => {
                info!(agent_id = %agent, hardware = %hw.name_any(), "an enrollment for an agent a Hardware names: dropped (only its authenticated agent reports for it)");
                return Outcome::Ack("enrollment_known");
            }
            (Lookup::Conflict(_), Some(_)) => return Outcome::Ack("enrollment_known"),
            (Lookup::Unknown, Some(address)) => match self.discover(&agent, address).await {
                Ok(hw) => Arc::new(hw),
                Err(outcome) => return outcome,
            },
            (Lookup::Found(hw, _), None) => hw,
            (Lookup::Unknown, None) => {
                debug!(agent_id = %agent, "no Hardware names this agent; inventory dropped");
                return Outcome::Ack("unknown_agent");
            }
            (Lookup::Conflict(owners), None) => {
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
        // Only an authenticated report answers a request, and only the Hardware's current one.
        let request = request.filter(|_| enrollment.is_none()).filter(|r| {
            crate::inventory_request::pending_request(&hardware).as_deref() == Some(*r)
        });
        self.write(&hardware, &in_band, source, request).await
    }

    /// Creates the discovered Hardware of an enrolled machine, within the bound; returns it
    /// (or the outcome to count when none is made).
    async fn discover(&self, agent: &AgentId, address: &str) -> Result<Hardware, Outcome> {
        if !self.discovery.enabled {
            debug!(agent_id = %agent, "an enrollment, and discovery is off: dropped");
            return Err(Outcome::Ack("discovery_off"));
        }
        let mac = agent.as_str();
        if !agent.is_mac() {
            warn!(agent_id = %agent, "an enrollment whose agent id is not a MAC address: dropped");
            return Err(Outcome::Ack("invalid"));
        }
        let name = discovered_name(mac);
        let mut creating = self.creating.lock().await;
        let namespace = &self.discovery.namespace;
        let cached: Vec<Arc<Hardware>> = self
            .hardware
            .state()
            .into_iter()
            .filter(|h| h.namespace().as_deref() == Some(namespace.as_str()))
            .filter(|h| {
                h.labels()
                    .get(DISCOVERED_LABEL)
                    .is_some_and(|v| v == "true")
            })
            .collect();
        // Names created earlier that the cache shows by now need no memory any more.
        creating.retain(|n| !cached.iter().any(|h| h.name_any() == *n));
        let mut discovered: std::collections::HashSet<String> = cached
            .iter()
            .filter(|h| !h.spec.approved())
            .map(|h| h.name_any())
            .collect();
        discovered.extend(creating.iter().cloned());
        if !discovered.contains(&name) && discovered.len() >= self.discovery.max {
            self.metrics.error("discovery_limit");
            warn!(agent_id = %agent, address, limit = self.discovery.max, "an enrollment beyond the bound of discovered Hardware: dropped (approve or delete some)");
            return Err(Outcome::Ack("discovery_limit"));
        }
        let now = jiff::Timestamp::now().to_string();
        let hw = discovered_hardware(&self.discovery, mac, address, &now).map_err(|e| {
            warn!(agent_id = %agent, error = %e, "cannot build a discovered Hardware");
            Outcome::Ack("invalid")
        })?;
        let api: Api<Hardware> = Api::namespaced(self.client.clone(), namespace);
        match api.create(&PostParams::default(), &hw).await {
            Ok(created) => {
                self.metrics.write("hardware");
                creating.insert(name.clone());
                info!(agent_id = %agent, address, hardware = %format!("{namespace}/{name}"), "a machine enrolled: discovered Hardware created (no Workflow until approved)");
                Ok(created)
            }
            // Made already (by an earlier delivery, or a person): an enrollment changes no
            // existing Hardware.
            Err(kube::Error::Api(e)) if e.code == 409 => Err(Outcome::Ack("enrollment_known")),
            Err(e) => {
                self.metrics.error("discovery_create");
                warn!(agent_id = %agent, error = %e, "cannot create the discovered Hardware; the enrollment comes again");
                Err(Outcome::Retry("failed"))
            }
        }
    }

    /// Writes `in_band` to `cached` (the index's copy) when it changed; on a failed patch
    /// (the copy was stale: a status path that no longer exists) once more from a fresh read.
    async fn write(
        &self,
        cached: &Hardware,
        in_band: &Value,
        source: &str,
        request: Option<&str>,
    ) -> Outcome {
        let namespace = cached.namespace().unwrap_or_default();
        let name = cached.name_any();
        let key = format!("{namespace}/{name}");
        let sum = digest(&json!({"inBand": in_band, "source": source, "request": request}));
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
            let Some(patch) = status_patch(current.status.as_ref(), in_band, source, request, &now)
            else {
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

/// The most agents whose last applied report [`Order`] remembers; beyond it, the entries of
/// agents with no report in hand are forgotten (an enrollment flood must not grow it forever).
const ORDER_MAX: usize = 100_000;

/// Per agent (inventory subject): a lock that keeps its reports one at a time, and the stream
/// sequence of the last one applied, so an older report delivered again later (handed back,
/// or its ack lost) is dropped instead of being written over a newer one.
#[derive(Default)]
struct Order(Mutex<HashMap<String, (Turn, u64)>>);

/// The lock one agent's reports take in turn.
type Turn = Arc<tokio::sync::Mutex<()>>;

impl Order {
    /// The lock of `subject`'s reports.
    fn turn(&self, subject: &str) -> Turn {
        let mut map = lock(&self.0);
        if map.len() >= ORDER_MAX && !map.contains_key(subject) {
            map.retain(|_, (turn, _)| Arc::strong_count(turn) > 1);
        }
        map.entry(subject.to_string())
            .or_insert_with(|| (Arc::new(tokio::sync::Mutex::new(())), 0))
            .0
            .clone()
    }

    /// The stream sequence of `subject`'s last applied report (0: none known).
    fn last(&self, subject: &str) -> u64 {
        lock(&self.0).get(subject).map_or(0, |(_, last)| *last)
    }

    fn applied(&self, subject: &str, sequence: u64) {
        if let Some((_, last)) = lock(&self.0).get_mut(subject) {
            *last = (*last).max(sequence);
        }
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

    const AGENT: &str = INVENTORY_SOURCE_AGENT;

    fn status(in_band: Option<Value>, out_of_band: Option<Value>) -> HardwareStatus {
        HardwareStatus {
            attributes: Some(HardwareAttributes {
                in_band,
                out_of_band,
            }),
            inventory_reported_at: Some("2026-01-01T00:00:00Z".into()),
            inventory_source: Some(AGENT.into()),
            inventory_request: None,
        }
    }

    #[test]
    fn patches_touch_only_in_band_the_source_and_the_report_time() {
        let new = json!({"cpu": {"totalThreads": 8}});
        let now = "2026-11-27T12:00:00Z";
        // No status yet: the whole status.
        assert_eq!(
            status_patch(None, &new, AGENT, None, now),
            Some(json!([{"op": "add", "path": "/status", "value": {
                "attributes": {"inBand": new}, "inventoryReportedAt": now,
                "inventorySource": AGENT}}]))
        );
        // A status without attributes: attributes added, nothing else replaced.
        let empty = HardwareStatus::default();
        assert_eq!(
            status_patch(Some(&empty), &new, AGENT, None, now),
            Some(json!([
                {"op": "add", "path": "/status/attributes", "value": {"inBand": new}},
                {"op": "add", "path": "/status/inventoryReportedAt", "value": now},
                {"op": "add", "path": "/status/inventorySource", "value": AGENT},
            ]))
        );
        // Out-of-band attributes are kept: only inBand is replaced (stale keys included).
        let old = status(
            Some(json!({"cpu": {"totalThreads": 4}, "bios": {}})),
            Some(json!({"bios": {}})),
        );
        assert_eq!(
            status_patch(Some(&old), &new, AGENT, None, now),
            Some(json!([
                {"op": "add", "path": "/status/attributes/inBand", "value": new},
                {"op": "add", "path": "/status/inventoryReportedAt", "value": now},
                {"op": "add", "path": "/status/inventorySource", "value": AGENT},
            ]))
        );
    }

    #[test]
    fn an_unchanged_inventory_is_not_written() {
        let same = json!({"cpu": {"totalThreads": 8}, "memory": {"totalBytes": 1}});
        let current = status(Some(same.clone()), None);
        assert_eq!(
            status_patch(Some(&current), &same, AGENT, None, "now"),
            None
        );
        // Any difference is written.
        let other = json!({"cpu": {"totalThreads": 8}, "memory": {"totalBytes": 2}});
        assert!(status_patch(Some(&current), &other, AGENT, None, "now").is_some());
    }

    #[test]
    fn the_same_inventory_from_the_authenticated_agent_replaces_an_enrollment() {
        let same = json!({"cpu": {"totalThreads": 8}});
        let mut enrolled = status(Some(same.clone()), None);
        enrolled.inventory_source = Some(INVENTORY_SOURCE_ENROLLMENT.into());
        assert_eq!(
            status_patch(
                Some(&enrolled),
                &same,
                INVENTORY_SOURCE_ENROLLMENT,
                None,
                "now"
            ),
            None
        );
        let patch = status_patch(Some(&enrolled), &same, AGENT, None, "now").expect("written");
        assert!(patch.to_string().contains(r#""value":"Agent""#), "{patch}");
    }

    #[test]
    fn an_answer_to_a_request_is_written_even_when_the_inventory_is_the_same() {
        let same = json!({"cpu": {"totalThreads": 8}});
        let current = status(Some(same.clone()), None);
        let patch = status_patch(Some(&current), &same, AGENT, Some("r1"), "t2").expect("written");
        assert_eq!(
            patch.as_array().and_then(|a| a.last()),
            Some(&json!({"op": "add", "path": "/status/inventoryRequest", "value": "r1"}))
        );
        assert!(
            patch.to_string().contains(r#""value":"t2""#),
            "the report time moves"
        );
        // Answered already: nothing to write.
        let mut answered = current;
        answered.inventory_request = Some("r1".into());
        assert_eq!(
            status_patch(Some(&answered), &same, AGENT, Some("r1"), "t3"),
            None
        );
    }
}
