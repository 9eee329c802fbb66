//! The watched Hardware index: every Hardware by MAC, by IP and by agent id, kept current by a
//! kube-runtime watch, answered in memory with one hash lookup and no API call.
//!
//! One crate so the services that look a machine up (Hegel by source IP, netboot by DHCP
//! client MAC, the webhook for MAC and IP uniqueness, the controller by agent id, the console
//! by name) read one implementation of the same rules:
//!
//! - **Entries are the caller's.** [`Index<T>`] holds one `T` per Hardware: Hegel's
//!   pre-rendered meta-data, netboot's interfaces, the webhook's claims, or the [`Hardware`]
//!   itself. An [`Entry`] says what it claims ([`Claims`]: MACs, IPs, agent ids, each with a
//!   *slot* the lookup hands back, e.g. the matching interface).
//! - **Conflicts are data.** A value two Hardware claim is a [`Lookup::Conflict`] naming both,
//!   or the list [`Index::mac_owners`] / [`Index::ip_owners`] return; the index never picks one
//!   and never only logs it. Whoever asks decides: Hegel and netboot answer neither machine,
//!   the webhook refuses the second claim.
//! - **Canonical forms come from the API crate.** MACs and agent ids are spelled as
//!   [`tink_api::AgentId`] spells them ([`canonical_mac`]); IPs are keyed by address, or by
//!   their trimmed text when they do not parse ([`IpKey`]).
//! - **Whole lists or nothing.** The [`feed`] replaces the index at the end of each (re)list,
//!   so a reader never sees half a list; a malformed Hardware is skipped and counted, not a
//!   stalled watch.
//! - **Reservations** ([`Index::reserve`]) let an admission count claims the watch has not
//!   delivered yet; the owner's next watch event or a TTL ends them.
//!
//! Who uses it how:
//!
//! | service | entry `T` | fed by | reads |
//! |---|---|---|---|
//! | Hegel | its `Machine` (meta-data trees, boot) | [`feed`] with OSIEs ([`Index::new`]) | [`Index::by_ip`], [`Index::by_mac`], [`Index::osie`] |
//! | netboot | its `Machine` (interfaces) | [`feed`] with OSIEs | [`Index::by_mac`] |
//! | webhook | its claims read from JSON (either version) | [`feed`], no OSIEs | [`Index::mac_owners`], [`Index::ip_owners`], [`Index::reserve`], [`Index::contains`] |
//! | controller | [`Hardware`] | its own typed watch through an [`Applier`] | [`Index::agent_claimants`], [`Index::get`] |
//! | console | [`Hardware`] | its own typed watch through an [`Applier`] | [`Index::get`], [`Index::all`], [`Index::agent_claimants`] |
//!
//! ```
//! use tink_hardware_index::{Index, Lookup};
//! use tink_api::v1alpha2::Hardware;
//!
//! let hw: Hardware = serde_json::from_value(serde_json::json!({
//!     "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
//!     "metadata": {"name": "m1", "namespace": "ns"},
//!     "spec": {"networkInterfaces": {"aa:bb:cc:00:00:01": {"dhcp": {"ip": "10.0.0.1"}}}},
//! })).unwrap();
//! let index: Index<Hardware> = Index::default();
//! index.upsert(&hw);
//! assert!(matches!(index.by_ip("10.0.0.1".parse().unwrap()), Lookup::Found(_, 0)));
//! ```
#![forbid(unsafe_code)]

mod claims;
mod feed;
mod index;
mod interface;
mod metrics;

pub use claims::{Claims, IpKey, canonical_mac};
pub use feed::{
    Applier, Change, DecodeError, FeedEnded, FeedMetrics, decode, decode_hardware, feed,
    hardware_resource, serve,
};
pub use index::{DEFAULT_RESERVATION_TTL, Entry, FromHardware, Index, InterfaceEntry, Lookup, key};
pub use interface::{Interface, non_empty};
pub use metrics::IndexMetrics;
pub use tink_api::v1alpha2::Hardware;
