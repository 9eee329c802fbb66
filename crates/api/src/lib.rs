//! The tinkerbell.org API: v1alpha2 (storage) and v1alpha1 types, conversion between them, CRD
//! generation.
//!
//! - [`v1alpha2`]: Hardware, OSIE, Template, Workflow as seeds/000 defines them, plus the
//!   execution additions of seeds/004 (documented on each type).
//! - [`conversion`]: lossless conversion both ways, typed and on raw JSON ([`conversion::convert`]).
//! - [`crds`] / [`render_crds`]: the CustomResourceDefinitions, both versions merged, and the
//!   Cluster API provider's ([`capi`]).
//! - [`bmc`]: Rufio's `bmc.tinkerbell.org/v1alpha1` Machine, Job and Task.
//! - [`AgentId`]: the one canonical spelling of an agent id, refused in any other.
//! - [`Timeout`]: the Go-syntax duration (`90m`, `1h30m`) of `Workflow.spec.timeout` and
//!   `Action.timeout`.
//! - [`from_yaml`] / [`from_json`] / [`from_value`]: typed parsing whose errors name the field
//!   path (`spec.networkInterfaces.aa:bb:cc:dd:ee:ff.dhcp.leaseTime: invalid type ...`).
#![forbid(unsafe_code)]
// kube's `printcolumn(type_ = "string", ...)` repeats keys clippy takes for duplicated attributes.
#![allow(clippy::duplicated_attributes)]

pub mod agent_id;
pub mod agent_secret;
pub mod bmc;
pub mod capi;
pub mod conversion;
mod crds;
mod duration;
mod serde_util;
pub mod v1alpha1;
pub mod v1alpha2;

pub use agent_id::{AgentId, AgentIdError, MAX_AGENT_ID_LEN};
pub use crds::{ConversionWebhook, CrdError, REGENERATE_COMMAND, crds, render_crds};
pub use duration::{DurationError, TIMEOUT_PATTERN, Timeout};

/// The API group of every kind here.
pub const GROUP: &str = "tinkerbell.org";

/// The annotation holding, on an object of one version, the fields that have no home in it
/// but came from (and are restored into) the other version.
pub const CONVERSION_DATA_ANNOTATION: &str = "tinkerbell.org/conversion-data";

/// The annotation the controller writes on a Workflow when it first takes it: the id of the
/// Workflow's trace (32 hex digits), under which every service records its spans.
pub const TRACE_ID_ANNOTATION: &str = "tinkerbell.org/trace-id";

/// A document that did not deserialize; the message names the field path.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ParseError {
    /// The path of the offending field, e.g. `spec.actions[2].timeout` (`.` for the root).
    pub path: String,
    /// What was wrong.
    pub message: String,
}

impl ParseError {
    fn from_track<E: std::fmt::Display>(err: serde_path_to_error::Error<E>) -> Self {
        Self {
            path: err.path().to_string(),
            message: err.inner().to_string(),
        }
    }
}

/// Parses a YAML document into `T`; errors name the field path.
pub fn from_yaml<T: serde::de::DeserializeOwned>(yaml: &str) -> Result<T, ParseError> {
    let de = serde_yaml::Deserializer::from_str(yaml);
    serde_path_to_error::deserialize(de).map_err(ParseError::from_track)
}

/// Parses a JSON document into `T`; errors name the field path.
pub fn from_json<T: serde::de::DeserializeOwned>(json: &str) -> Result<T, ParseError> {
    let mut de = serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(&mut de).map_err(ParseError::from_track)
}

/// Converts a JSON value into `T`; errors name the field path.
pub fn from_value<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
) -> Result<T, ParseError> {
    serde_path_to_error::deserialize(value).map_err(ParseError::from_track)
}
