//! A machine's hardware inventory, read without extra tools from `/proc`, `/sys` and the
//! SMBIOS tables: the foundation of enrollment (issue 30). The agent collects it, the server
//! and the controller validate it, and the controller stores it on the Hardware in Tinkerbell's
//! `attributes` shape.
//!
//! - [`collect`] reads a machine whose `/proc` and `/sys` are under a root directory (`/` in
//!   the OSIE; a fixture tree in tests). It never fails as a whole: what cannot be read is
//!   absent and explained in [`Inventory::warnings`], and lists are cut at the validation
//!   limits, so its output always passes [`Inventory::validate`].
//! - [`smbios`] is a hand-written, bounds-checked SMBIOS reader (BIOS, system with UUID byte
//!   order, baseboard, chassis, processor sockets, memory devices); `/sys/class/dmi/id` is the
//!   fallback when the raw tables are unreadable.
//! - [`Inventory::from_json`] is the receiving side: size first, then parse with the field path
//!   of a type error, then [`Inventory::validate`] (limits and formats, errors naming the field
//!   path, e.g. `disks[3].serial: longer than 256 bytes`).
//! - [`Inventory::to_attributes`] converts to upstream Tinkerbell's `Attributes`
//!   ([`attributes`]), the `Hardware.status.attributes.inBand` subtree.
//!
//! The binary `tink-inventory [--root DIR]` prints a machine's inventory as JSON.

#![forbid(unsafe_code)]

pub mod attributes;
mod collect;
mod model;
pub mod smbios;
mod text;
pub mod validate;

pub use collect::{collect, parse_cpuinfo, parse_mem_total, read_limited, vpd_serial};
pub use model::*;
pub use validate::{FieldError, InventoryError};
