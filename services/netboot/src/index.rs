//! The Hardware index DHCP answers from: the shared watched index ([`tink_hardware_index`]) of
//! every Hardware's [`Machine`] by the MACs of its interfaces, one hash lookup per packet and
//! no API call. A MAC claimed by two Hardware answers neither ([`Lookup::Conflict`]).
//!
//! The feed also keeps an OSIE cache, as Hegel's does, and netboot turns ready only once both
//! lists are in.

use std::sync::Arc;

use kube::runtime::reflector;
use tink_api::v1alpha2::Osie;
use tink_runtime::Health;
use tokio_util::sync::CancellationToken;

use crate::machine::Machine;
use crate::metrics::IndexMetrics;

pub use tink_hardware_index::FeedEnded;

/// The index; share it in an `Arc`. [`Index::new`] takes the OSIE store the feed fills.
pub type Index = tink_hardware_index::Index<Machine>;

/// The result of a lookup: the machine and the index of the matching interface, nothing, or
/// the Hardware (`namespace/name`) that all claim it.
pub type Lookup = tink_hardware_index::Lookup<Machine>;

/// Keeps `index` current until `shutdown`, and `health` ready while it is synced.
/// `namespace` limits the watches to one namespace (all when `None`).
pub async fn feed(
    client: kube::Client,
    namespace: Option<String>,
    index: Arc<Index>,
    osie_writer: reflector::store::Writer<Osie>,
    metrics: IndexMetrics,
    health: Health,
    shutdown: CancellationToken,
) -> Result<(), FeedEnded> {
    let counters = metrics.feed_metrics();
    tink_hardware_index::feed(
        client,
        namespace,
        index,
        Some(osie_writer),
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
