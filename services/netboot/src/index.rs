//! The Hardware index DHCP answers from: the shared watched index ([`tink_hardware_index`]) of
//! every Hardware's [`Machine`] by the MACs of its interfaces, one hash lookup per packet and
//! no API call. A MAC claimed by two Hardware answers neither ([`Lookup::Conflict`]).
//!
//! The feed also keeps an OSIE cache, as Hegel's does, and netboot turns ready only once both
//! lists are in.

use crate::machine::Machine;

pub use tink_hardware_index::FeedEnded;
/// Keeps the index current until `shutdown`, and `health` ready while it is synced:
/// [`tink_hardware_index::serve`], as Hegel's.
pub use tink_hardware_index::serve as feed;

/// The index; share it in an `Arc`. [`Index::new`] takes the OSIE store the feed fills.
pub type Index = tink_hardware_index::Index<Machine>;

/// The result of a lookup: the machine and the index of the matching interface, nothing, or
/// the Hardware (`namespace/name`) that all claim it.
pub type Lookup = tink_hardware_index::Lookup<Machine>;
