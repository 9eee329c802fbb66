//! Keeping an [`Index`] current: a kube-runtime watcher of Hardware, read untyped and decoded
//! one object at a time (so one malformed Hardware is skipped, counted and logged instead of
//! stalling the watch), and, for an index with OSIEs, a kube-runtime reflector of OSIEs.
//!
//! A relist (the first list, or one after a broken watch) collects the whole list and then
//! replaces the index at once ([`Index::replace`]), so readers never see a half-loaded index.
//! Errors are retried with back-off by the watcher; the stream ending is an error
//! ([`FeedEnded`]): a dead feed must end the process, not serve a stale index forever.
//!
//! The caller learns of every event through its `after_event` hook with a [`Change`]: that is
//! where it turns readiness on, sets its gauges, or renders what changed.

use std::sync::Arc;

use futures::StreamExt as _;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher::{self, Event};
use prometheus_client::metrics::counter::Counter;
use tink_api::v1alpha2::{Hardware, Osie};
use tink_runtime::Health;
use tokio_util::sync::CancellationToken;

use crate::index::{Entry, FromHardware, Index};
use crate::metrics::IndexMetrics;

/// Why a watched Hardware has no entry.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The object could not be turned into JSON again.
    #[error("cannot encode Hardware: {0}")]
    Encode(#[source] serde_json::Error),
    /// The object is no valid v1alpha2 Hardware (the path names the field).
    #[error("invalid Hardware: {0}")]
    Invalid(#[source] tink_api::ParseError),
}

/// A watched object as a typed Hardware.
pub fn decode_hardware(obj: DynamicObject) -> Result<Hardware, DecodeError> {
    let value = serde_json::to_value(&obj).map_err(DecodeError::Encode)?;
    tink_api::from_value::<Hardware>(value).map_err(DecodeError::Invalid)
}

/// A watched object as the entry of a typed Hardware ([`Entry::decode`] of such entries).
pub fn decode<T: FromHardware>(obj: DynamicObject) -> Result<T, DecodeError> {
    decode_hardware(obj).map(|hw| T::from_hardware(&hw))
}

/// The counters a feed moves; clones share the same values (register them where the service
/// wants them).
#[derive(Clone, Debug, Default)]
pub struct FeedMetrics {
    /// Hardware objects that could not be decoded (not indexed).
    pub invalid_hardware: Counter,
    /// Errors of the watches (retried with back-off).
    pub watch_errors: Counter,
}

/// A watch stream ended on its own (it retries errors itself, so this is a bug or a shutdown
/// of the client). The text names the watch.
#[derive(Debug, thiserror::Error)]
#[error("the {0} watch ended")]
pub struct FeedEnded(pub &'static str);

/// What one watch event did to the index.
#[derive(Debug)]
pub enum Change<T> {
    /// A Hardware was added or replaced: its new entry.
    Applied(Arc<T>),
    /// A Hardware was deleted or became invalid: its entry, when it had one.
    Removed(Option<Arc<T>>),
    /// A list completed and replaced every entry.
    Relisted,
    /// Nothing the caller needs to act on (list progress, an OSIE event, a watch error).
    Other,
}

/// Applies the events of a typed Hardware watch to an index, with the same whole-list rule as
/// [`feed`]: for a caller whose watch stream also goes elsewhere (the controller hands it to a
/// kube `Controller`, the console to its live view), so it cannot let [`feed`] own the watch.
/// Call [`Applier::apply`] from the stream's `inspect`, before anything reads the index.
#[derive(Debug)]
pub struct Applier<T> {
    initial: Vec<T>,
}

impl<T> Default for Applier<T> {
    fn default() -> Self {
        Self {
            initial: Vec::new(),
        }
    }
}

impl<T: FromHardware> Applier<T> {
    /// Applies one event to `index`; what it did.
    pub fn apply(&mut self, index: &Index<T>, event: &Event<Hardware>) -> Change<T> {
        match event {
            Event::Init => {
                self.initial.clear();
                Change::Other
            }
            Event::InitApply(hw) => {
                self.initial.push(T::from_hardware(hw));
                Change::Other
            }
            Event::InitDone => {
                index.replace(std::mem::take(&mut self.initial));
                Change::Relisted
            }
            Event::Apply(hw) => Change::Applied(index.insert(T::from_hardware(hw))),
            Event::Delete(hw) => Change::Removed(index.remove(&hw.key())),
        }
    }
}

/// The v1alpha2 Hardware resource, read untyped.
pub fn hardware_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(tink_api::GROUP, tink_api::v1alpha2::VERSION, "Hardware"),
        "hardware",
    )
}

fn key_of(obj: &DynamicObject) -> Option<String> {
    let name = obj.metadata.name.as_deref()?;
    let ns = obj.metadata.namespace.as_deref().unwrap_or_default();
    Some(crate::key(ns, name))
}

fn entry_of<T: Entry>(obj: DynamicObject, metrics: &FeedMetrics) -> Result<T, ()> {
    let key = key_of(&obj).unwrap_or_default();
    T::decode(obj).map_err(|error| {
        match &error {
            DecodeError::Encode(error) => {
                tracing::warn!(hardware = %key, %error, "cannot encode Hardware; skipped")
            }
            DecodeError::Invalid(error) => {
                tracing::warn!(hardware = %key, %error, "invalid Hardware; not served")
            }
        }
        metrics.invalid_hardware.inc();
    })
}

/// Keeps `index` current until `shutdown`, calling `after_event` after every event. Watches
/// Hardware (and OSIEs into `osies` when given: pass the writer of the store the index was
/// made with, [`Index::new`]) in `namespace`, or in all namespaces when `None`.
pub async fn feed<T: Entry>(
    client: kube::Client,
    namespace: Option<String>,
    index: Arc<Index<T>>,
    osies: Option<Writer<Osie>>,
    metrics: FeedMetrics,
    mut after_event: impl FnMut(&Index<T>, Change<T>) + Send,
    shutdown: CancellationToken,
) -> Result<(), FeedEnded> {
    let (hw_api, osie_api): (Api<DynamicObject>, Api<Osie>) = match &namespace {
        Some(ns) => (
            Api::namespaced_with(client.clone(), ns, &hardware_resource()),
            Api::namespaced(client, ns),
        ),
        None => (
            Api::all_with(client.clone(), &hardware_resource()),
            Api::all(client),
        ),
    };
    let mut hardware = watcher::watcher(hw_api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut osies = osies.map(|writer| {
        reflector::reflector(
            writer,
            watcher::watcher(osie_api, watcher::Config::default()).default_backoff(),
        )
        .boxed()
    });
    let mut initial: Vec<T> = Vec::new();
    loop {
        let next_osie = async {
            match osies.as_mut() {
                Some(s) => s.next().await,
                None => std::future::pending().await,
            }
        };
        let change = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            event = hardware.next() => match event {
                None => return Err(FeedEnded("Hardware")),
                Some(Err(error)) => {
                    metrics.watch_errors.inc();
                    tracing::warn!(%error, "Hardware watch error; retrying");
                    Change::Other
                }
                Some(Ok(Event::Init)) => {
                    initial.clear();
                    Change::Other
                }
                Some(Ok(Event::InitApply(obj))) => {
                    if let Ok(entry) = entry_of(obj, &metrics) {
                        initial.push(entry);
                    }
                    Change::Other
                }
                Some(Ok(Event::InitDone)) => {
                    index.replace(std::mem::take(&mut initial));
                    tracing::info!(hardware = index.len(), "Hardware index synced");
                    Change::Relisted
                }
                Some(Ok(Event::Apply(obj))) => match key_of(&obj) {
                    None => Change::Other,
                    Some(key) => match entry_of::<T>(obj, &metrics) {
                        Ok(entry) => Change::Applied(index.insert(entry)),
                        // A Hardware that became invalid is no longer served.
                        Err(()) => Change::Removed(index.remove(&key)),
                    },
                },
                Some(Ok(Event::Delete(obj))) => match key_of(&obj) {
                    None => Change::Other,
                    Some(key) => Change::Removed(index.remove(&key)),
                },
            },
            event = next_osie => match event {
                None => return Err(FeedEnded("OSIE")),
                Some(Err(error)) => {
                    metrics.watch_errors.inc();
                    tracing::warn!(%error, "OSIE watch error; retrying");
                    Change::Other
                }
                Some(Ok(Event::InitDone)) => {
                    index.mark_osies_synced();
                    if index.has_osies() {
                        tracing::info!(osies = index.osie_count(), "OSIE cache synced");
                    }
                    Change::Other
                }
                Some(Ok(_)) => Change::Other,
            },
        };
        after_event(&index, change);
    }
}

/// Serves `index` until `shutdown`: [`feed`] with OSIEs into `osies` (the writer of the store
/// the index was made with, [`Index::new`]), keeping `metrics.indexed` at the index's size and
/// `health` ready once the index is synced (Hardware and OSIEs listed). `namespace` limits the
/// watches to one namespace (all when `None`). Hegel's and netboot's feed.
pub async fn serve<T: Entry>(
    client: kube::Client,
    namespace: Option<String>,
    index: Arc<Index<T>>,
    osies: Writer<Osie>,
    metrics: IndexMetrics,
    health: Health,
    shutdown: CancellationToken,
) -> Result<(), FeedEnded> {
    let counters = metrics.feed_metrics();
    feed(
        client,
        namespace,
        index,
        Some(osies),
        counters,
        move |index, _| {
            metrics
                .indexed
                .set(i64::try_from(index.len()).unwrap_or(i64::MAX));
            if index.synced() {
                health.set_ready(true);
            }
        },
        shutdown,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hw(name: &str, mac: &str) -> Hardware {
        serde_json::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"networkInterfaces": {mac: {}}},
        }))
        .expect("hardware")
    }

    #[test]
    fn a_typed_relist_replaces_the_index_only_when_complete() {
        let index: Index<Hardware> = Index::default();
        let mut applier = Applier::default();
        index.upsert(&hw("gone", "aa:00:00:00:00:09"));
        applier.apply(&index, &Event::Init);
        applier.apply(&index, &Event::InitApply(hw("a", "aa:00:00:00:00:01")));
        // Half a list is not served: the old content stays until the list is complete.
        assert!(index.contains("ns/gone") && !index.contains("ns/a"));
        assert!(!index.synced());
        assert!(matches!(
            applier.apply(&index, &Event::InitDone),
            Change::Relisted
        ));
        assert!(index.synced() && index.contains("ns/a") && !index.contains("ns/gone"));
        let applied = applier.apply(&index, &Event::Apply(hw("b", "aa:00:00:00:00:02")));
        assert!(matches!(applied, Change::Applied(h) if h.key() == "ns/b"));
        let removed = applier.apply(&index, &Event::Delete(hw("a", "aa:00:00:00:00:01")));
        assert!(matches!(removed, Change::Removed(Some(h)) if h.key() == "ns/a"));
        assert_eq!(index.len(), 1);
    }

    #[test]
    fn watched_objects_decode_or_say_why() {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": "m", "namespace": "ns"},
            "spec": {"networkInterfaces": {"aa:00:00:00:00:01": {}}},
        }))
        .expect("object");
        let hw: Hardware = decode(obj.clone()).expect("valid");
        assert_eq!(hw.key(), "ns/m");
        assert_eq!(key_of(&obj).as_deref(), Some("ns/m"));
        let mut bad = obj;
        bad.data["spec"] = json!({"networkInterfaces": 3});
        match decode_hardware(bad) {
            Err(DecodeError::Invalid(e)) => assert!(e.path.contains("networkInterfaces"), "{e}"),
            other => panic!("{other:?}"),
        }
    }
}
