//! What the streams prove about a command's delivery: whether an agent received a dispatch,
//! whether a command still waits in the dispatch stream, and withdrawing one that provably was
//! never delivered.
//!
//! The facts these rely on:
//! - every event of a dispatch is stored on its own subject, `tink.events.<token of the
//!   dispatch id>`, and the agent's first event about a dispatch is its delivery receipt (or,
//!   for an agent that sends no receipts, its first event), so "an event exists on that subject"
//!   means "an agent process received the command";
//! - the server deletes a command from the dispatch stream only after its receipt is stored,
//!   so a command still in the stream was not yet confirmed delivered;
//! - a server forwards a start only after recording its target in the dispatch targets bucket
//!   and then reading the command again from the stream: a start deleted before that read can
//!   never be forwarded, and one read after the record was written is seen by whoever reads
//!   the bucket after deleting it (both through the streams' leaders, never a direct get).

use async_nats::jetstream::kv;
use async_nats::jetstream::message::StreamMessage;
use async_nats::jetstream::stream::{
    DeleteMessageErrorKind, LastRawMessageError, LastRawMessageErrorKind, Stream,
};

use crate::error::BusError;
use crate::publish::MSG_ID_HEADER;
use crate::subjects::{dispatch_subject, events_subject};

/// The most commands looked at on one agent's subject when searching for one (the work queue
/// holds one or two per agent in practice; the stream keeps at most
/// [`crate::BusConfig::dispatch_max_per_agent`]).
const MAX_SCAN: usize = 64;

/// Errors of the delivery look-ups.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// An id cannot be used on the bus.
    #[error(transparent)]
    Bus(#[from] BusError),
    /// JetStream did not answer the look-up.
    #[error("JetStream look-up failed: {0}")]
    Lookup(String),
}

impl From<crate::token::TokenError> for DeliveryError {
    fn from(e: crate::token::TokenError) -> Self {
        DeliveryError::Bus(BusError::Token(e))
    }
}

/// A message read by subject or sequence: `None` when there is none.
fn found(
    read: Result<StreamMessage, LastRawMessageError>,
) -> Result<Option<StreamMessage>, DeliveryError> {
    match read {
        Ok(message) => Ok(Some(message)),
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
        Err(e) => Err(DeliveryError::Lookup(e.to_string())),
    }
}

/// Whether any event of `dispatch_id` is stored in the events stream: an agent process
/// received the dispatch (and may have run it).
pub async fn dispatch_received(events: &Stream, dispatch_id: &str) -> Result<bool, DeliveryError> {
    let subject = events_subject(dispatch_id)?;
    Ok(found(events.get_first_raw_message_by_subject(&subject, 1).await)?.is_some())
}

/// Whether an event of `dispatch_id` published by `agent_id` is stored: that agent received the
/// dispatch. Events of other agents do not count (one that published an event for another
/// machine's dispatch must not make the server withhold the command from its target). At most
/// [`MAX_SCAN`] events are read; past that the answer is `false`.
pub async fn dispatch_received_by(
    events: &Stream,
    dispatch_id: &str,
    agent_id: &str,
) -> Result<bool, DeliveryError> {
    let subject = events_subject(dispatch_id)?;
    Ok(first_matching(events, &subject, |message| {
        crate::codec::decode_event(&message.payload).is_ok_and(|e| e.agent_id == agent_id)
    })
    .await?
    .is_some())
}

/// The first message on `subject` (oldest first, read from the stream's leader) that `wanted`
/// accepts; `None` when none does within [`MAX_SCAN`] messages.
async fn first_matching(
    stream: &Stream,
    subject: &str,
    wanted: impl Fn(&StreamMessage) -> bool,
) -> Result<Option<StreamMessage>, DeliveryError> {
    let mut from = 1;
    for _ in 0..MAX_SCAN {
        let Some(message) = found(stream.get_first_raw_message_by_subject(subject, from).await)?
        else {
            return Ok(None);
        };
        if wanted(&message) {
            return Ok(Some(message));
        }
        from = message.sequence + 1;
    }
    Ok(None)
}

/// The stream sequence of the command with de-duplication id `msg_id` while it still waits in
/// `agent_id`'s queue of the dispatch stream; `None` when it is not there (acknowledged after
/// its receipt, never published, or expired).
pub async fn queued_command(
    dispatch: &Stream,
    agent_id: &str,
    msg_id: &str,
) -> Result<Option<u64>, DeliveryError> {
    let subject = dispatch_subject(agent_id)?;
    Ok(first_matching(dispatch, &subject, |message| {
        message
            .headers
            .get(MSG_ID_HEADER)
            .is_some_and(|v| v.as_str() == msg_id)
    })
    .await?
    .map(|message| message.sequence))
}

/// The oldest command in `agent_id`'s queue at stream sequence `from` or later, read from the
/// stream's leader (a direct get may be answered by a follower that has not stored it yet).
pub async fn next_command(
    dispatch: &Stream,
    agent_id: &str,
    from: u64,
) -> Result<Option<StreamMessage>, DeliveryError> {
    let subject = dispatch_subject(agent_id)?;
    found(
        dispatch
            .get_first_raw_message_by_subject(&subject, from.max(1))
            .await,
    )
}

/// Whether the command at stream sequence `sequence` is still in the dispatch stream (not
/// deleted after its receipt, withdrawn, or aged out), read from the stream's leader.
pub async fn command_queued(dispatch: &Stream, sequence: u64) -> Result<bool, DeliveryError> {
    Ok(found(dispatch.get_raw_message(sequence).await)?.is_some())
}

/// Deletes the command at `sequence` from the dispatch stream; `false` when it was already gone.
pub async fn delete_command(dispatch: &Stream, sequence: u64) -> Result<bool, DeliveryError> {
    match dispatch.delete_message(sequence).await {
        Ok(deleted) => Ok(deleted),
        // "no message found" (10037) or "message delete failed" (10057, no such message).
        Err(e) if matches!(e.kind(), DeleteMessageErrorKind::JetStream(ref j) if matches!(j.error_code().0, 10037 | 10057)) => {
            Ok(false)
        }
        Err(e) => Err(DeliveryError::Lookup(e.to_string())),
    }
}

/// Whether a server recorded a target for `dispatch_id` in the dispatch targets bucket: it was
/// about to forward, or forwarded, the start. Read from the bucket stream's leader (the KV
/// get may be a direct get, answered by a follower a moment behind).
pub async fn dispatch_forwarded(
    targets: &kv::Store,
    dispatch_id: &str,
) -> Result<bool, DeliveryError> {
    let key = crate::token::workflow_token(dispatch_id)?;
    let subject = format!("{}{key}", targets.prefix);
    Ok(found(
        targets
            .stream
            .get_last_raw_message_by_subject(&subject)
            .await,
    )?
    .is_some())
}

/// The result of [`withdraw_command`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withdrawal {
    /// The command was deleted before any delivery: the agent can never receive it.
    Withdrawn,
    /// The command is not in the queue (delivered and confirmed, never published, or expired).
    NotQueued,
    /// The command was deleted, but a server had already taken it to forward: the agent may
    /// have it.
    MaybeDelivered,
}

/// Withdraws the start of `dispatch_id` while it waits in `agent_id`'s queue: deletes it, then
/// proves it is with no agent: no server recorded a target for it (a server records one before
/// its last read of the command, and forwards only what that read still finds) and no event of
/// the dispatch is stored (an agent that received it, even one that never sends receipts, has
/// published something). Otherwise [`Withdrawal::MaybeDelivered`]: the caller must stop it like
/// a delivered one. `targets` is the dispatch targets bucket.
pub async fn withdraw_command(
    dispatch: &Stream,
    events: &Stream,
    targets: &kv::Store,
    agent_id: &str,
    dispatch_id: &str,
) -> Result<Withdrawal, DeliveryError> {
    let msg_id = format!("{dispatch_id}/start");
    let Some(sequence) = queued_command(dispatch, agent_id, &msg_id).await? else {
        return Ok(Withdrawal::NotQueued);
    };
    if !delete_command(dispatch, sequence).await? {
        // Gone meanwhile: deleted after its receipt.
        return Ok(Withdrawal::NotQueued);
    }
    let in_flight = dispatch_forwarded(targets, dispatch_id).await?;
    if in_flight || dispatch_received(events, dispatch_id).await? {
        return Ok(Withdrawal::MaybeDelivered);
    }
    Ok(Withdrawal::Withdrawn)
}
