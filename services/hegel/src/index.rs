//! The in-memory index requests are answered from: the shared Hardware index
//! ([`tink_hardware_index`]) of every Hardware's [`Machine`] by each of its IPs and MACs (one
//! hash lookup per request, no API call), and the OSIEs by `namespace/name`.
//!
//! [`feed`] keeps it current: a kube-runtime watcher of Hardware (objects are decoded one by
//! one, so a malformed Hardware is skipped with a log line instead of stalling the watch) and a
//! kube-runtime reflector of OSIEs. A relist (after a broken watch) replaces the Hardware index
//! at once when the list is complete, so requests never see a half-loaded index.
//!
//! An IP or MAC claimed by two Hardware answers neither ([`Lookup::Conflict`]): Hegel never
//! guesses which machine is asking.

use std::sync::Arc;

use kube::runtime::reflector;
use tink_api::v1alpha2::Osie;
use tink_runtime::Health;
use tokio_util::sync::CancellationToken;

use crate::machine::Machine;
use crate::metrics::Metrics;

pub use tink_hardware_index::FeedEnded;

/// The index; share it in an `Arc`. [`Index::new`] takes the OSIE store it also serves.
pub type Index = tink_hardware_index::Index<Machine>;

/// The result of a lookup: the machine and the index of the matching interface, nothing, or
/// the Hardware (`namespace/name`) that all claim it.
pub type Lookup = tink_hardware_index::Lookup<Machine>;

/// Keeps `index` current until `shutdown`, and `health` ready while it is synced
/// ([`tink_hardware_index::serve`], as netboot's). `namespace` limits the watches to one
/// namespace (all when `None`).
pub async fn feed(
    client: kube::Client,
    namespace: Option<String>,
    index: Arc<Index>,
    osie_writer: reflector::store::Writer<Osie>,
    metrics: Metrics,
    health: Health,
    shutdown: CancellationToken,
) -> Result<(), FeedEnded> {
    let index_metrics = metrics.index;
    tink_hardware_index::serve(
        client,
        namespace,
        index,
        osie_writer,
        index_metrics,
        health,
        shutdown,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::net::IpAddr;
    use tink_api::v1alpha2::Hardware;

    fn hw(name: &str, mac: &str, ip: &str) -> Hardware {
        serde_json::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"networkInterfaces": {mac: {"dhcp": {"ip": ip}}}},
        }))
        .expect("hardware")
    }

    fn index() -> Index {
        let (store, _writer) = reflector::store();
        Index::new(store)
    }

    #[test]
    fn lookups_follow_updates_and_refuse_conflicts() {
        let idx = index();
        idx.upsert(&hw("a", "aa:00:00:00:00:01", "10.0.0.1"));
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        assert!(matches!(idx.by_ip(ip), Lookup::Found(m, 0) if m.key == "ns/a"));
        assert!(matches!(idx.by_mac("aa:00:00:00:00:01"), Lookup::Found(..)));
        // The IP moves to another address: the old one is unknown.
        idx.upsert(&hw("a", "aa:00:00:00:00:01", "10.0.0.2"));
        assert!(matches!(idx.by_ip(ip), Lookup::Unknown));
        // Two Hardware with one IP: neither is served.
        idx.upsert(&hw("b", "aa:00:00:00:00:02", "10.0.0.2"));
        match idx.by_ip("10.0.0.2".parse().unwrap()) {
            Lookup::Conflict(keys) => assert_eq!(keys, ["ns/a", "ns/b"]),
            other => panic!("{other:?}"),
        }
        idx.remove("ns/a");
        assert!(
            matches!(idx.by_ip("10.0.0.2".parse().unwrap()), Lookup::Found(m, _) if m.key == "ns/b")
        );
        assert!(matches!(idx.by_mac("aa:00:00:00:00:01"), Lookup::Unknown));
        assert!(!idx.synced());
        idx.replace(vec![]);
        assert!(idx.is_empty());
    }
}
