//! The crate's error types, in one place: [`BusError`] (talking to JetStream), [`CodecError`]
//! (a message that does not decode) and [`InvalidMessage`] (one that breaks the protocol).
//! Every other module returns these; this one depends on no other but `token`.

use async_nats::jetstream;

use crate::token::TokenError;

/// Errors talking to JetStream.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    /// A stream could not be created or updated.
    #[error("cannot create or update stream {stream}: {source}")]
    Stream {
        /// The stream.
        stream: &'static str,
        /// Why.
        source: jetstream::context::CreateStreamError,
    },
    /// A stream could not be read back after it was created.
    #[error("cannot get stream {stream}: {source}")]
    GetStream {
        /// The stream.
        stream: &'static str,
        /// Why.
        source: jetstream::context::GetStreamError,
    },
    /// A KV bucket could not be opened.
    #[error("cannot open the KV bucket {bucket}: {source}")]
    Bucket {
        /// The bucket.
        bucket: &'static str,
        /// Why.
        source: jetstream::context::KeyValueError,
    },
    /// A stream or bucket another service must create does not exist (yet).
    #[error(
        "the JetStream {what} {name} does not exist: tink-controller (or an admin job running `ensure_streams`) creates it; start the controller, or check that it uses the same NATS account"
    )]
    Missing {
        /// `stream` or `KV bucket`.
        what: &'static str,
        /// Its name.
        name: &'static str,
    },
    /// A stream or bucket exists with a setting this service cannot work with.
    #[error(
        "the JetStream stream {stream} has {field} {found}, expected {expected}: it was created by another version or configuration; let tink-controller update it"
    )]
    Mismatch {
        /// The stream.
        stream: &'static str,
        /// The setting.
        field: &'static str,
        /// What this service needs.
        expected: String,
        /// What the stream has.
        found: String,
    },
    /// An id cannot be used on the bus.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// A message is invalid and was not published.
    #[error("invalid message: {0}")]
    Invalid(#[from] InvalidMessage),
    /// Publishing failed or JetStream did not acknowledge storage.
    #[error("publish to {subject} failed: {source}")]
    Publish {
        /// The subject.
        subject: String,
        /// Why.
        source: jetstream::context::PublishError,
    },
}

/// A message that decodes but breaks the protocol's rules; `field` is the path of the offending
/// field (e.g. `event.action_failed.action_id`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct InvalidMessage {
    /// The path of the offending field.
    pub field: String,
    /// What is wrong with it.
    pub problem: String,
}

impl InvalidMessage {
    pub(crate) fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        InvalidMessage {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

/// A message that cannot be decoded or is invalid.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// Not a valid protobuf encoding of the expected message.
    #[error("not a valid protobuf message: {0}")]
    Decode(#[from] prost::DecodeError),
    /// Decodes, but breaks the protocol's rules.
    #[error("invalid message: {0}")]
    Invalid(#[from] InvalidMessage),
}
