//! What the streams prove about a command's delivery: whether an agent received a dispatch,
//! whether a command still waits in the dispatch stream, and withdrawing one that provably was
//! never delivered.
//!
//! The facts these rely on:
//! - every event of a dispatch is stored on its own subject, `tink.events.<token of the
//!   dispatch id>`, and the agent's first event about a dispatch is its delivery receipt (or,
//!   for an agent that sends no receipts, its first event), so "an event exists on that subject"
//!   means "an agent process received the command";
//! - the dispatch stream is a work queue whose commands the server acknowledges only after the
//!   receipt is stored, so a command still in the stream was not yet confirmed delivered;
//! - the agent's consumer records the highest stream sequence it ever delivered, so a command
//!   deleted while that sequence is below it can never reach the agent.

use async_nats::jetstream::context::ConsumerInfoErrorKind;
use async_nats::jetstream::stream::{LastRawMessageErrorKind, Stream};

use crate::error::BusError;
use crate::publish::MSG_ID_HEADER;
use crate::streams::agent_consumer_name;
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

/// Whether any event of `dispatch_id` is stored in the events stream: an agent process
/// received the dispatch (and may have run it).
pub async fn dispatch_received(events: &Stream, dispatch_id: &str) -> Result<bool, DeliveryError> {
    let subject = events_subject(dispatch_id)?;
    match events.get_first_raw_message_by_subject(&subject, 1).await {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(false),
        Err(e) => Err(DeliveryError::Lookup(e.to_string())),
    }
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
    let mut from = 1;
    for _ in 0..MAX_SCAN {
        let message = match events
            .get_first_raw_message_by_subject(&subject, from)
            .await
        {
            Ok(m) => m,
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => return Ok(false),
            Err(e) => return Err(DeliveryError::Lookup(e.to_string())),
        };
        if crate::codec::decode_event(&message.payload).is_ok_and(|e| e.agent_id == agent_id) {
            return Ok(true);
        }
        from = message.sequence + 1;
    }
    Ok(false)
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
    let mut from = 1;
    for _ in 0..MAX_SCAN {
        let message = match dispatch
            .get_first_raw_message_by_subject(&subject, from)
            .await
        {
            Ok(m) => m,
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => return Ok(None),
            Err(e) => return Err(DeliveryError::Lookup(e.to_string())),
        };
        let id = message
            .headers
            .get(MSG_ID_HEADER)
            .map(|v| v.as_str().to_string());
        if id.as_deref() == Some(msg_id) {
            return Ok(Some(message.sequence));
        }
        from = message.sequence + 1;
    }
    Ok(None)
}

/// The result of [`withdraw_command`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withdrawal {
    /// The command was deleted before any delivery: the agent can never receive it.
    Withdrawn,
    /// The command is not in the queue (delivered and confirmed, never published, or expired).
    NotQueued,
    /// The command was deleted, but the agent's consumer had already handed it to a server:
    /// the agent may have it.
    MaybeDelivered,
}

/// Withdraws the start of `dispatch_id` while it waits in `agent_id`'s queue: deletes it, then
/// proves it is with no agent: nothing is in flight on the agent's consumer (a command handed
/// back unconfirmed returns to the queue, one in flight is pending acknowledgement) and no
/// event of the dispatch is stored (an agent that received it, even one that never sends
/// receipts, has published something). Otherwise [`Withdrawal::MaybeDelivered`]: the caller
/// must stop it like a delivered one.
pub async fn withdraw_command(
    dispatch: &Stream,
    events: &Stream,
    agent_id: &str,
    dispatch_id: &str,
) -> Result<Withdrawal, DeliveryError> {
    let msg_id = format!("{dispatch_id}/start");
    let Some(sequence) = queued_command(dispatch, agent_id, &msg_id).await? else {
        return Ok(Withdrawal::NotQueued);
    };
    match dispatch.delete_message(sequence).await {
        Ok(true) => {}
        // Gone meanwhile: acknowledged after its receipt.
        Ok(false) => return Ok(Withdrawal::NotQueued),
        Err(e) => return Err(DeliveryError::Lookup(e.to_string())),
    }
    let name = agent_consumer_name(agent_id)?;
    let in_flight = match dispatch.consumer_info(&name).await {
        Ok(info) => info.delivered.stream_sequence >= sequence && info.num_ack_pending > 0,
        // No consumer: the agent never connected since the command was queued (a consumer
        // removed for inactivity has nothing in flight).
        Err(e) if e.kind() == ConsumerInfoErrorKind::NotFound => false,
        // Unknown: the caller must assume the worst (the command may have been delivered).
        Err(e) => {
            return Err(DeliveryError::Lookup(format!(
                "deleted the command but cannot read the agent's consumer: {e}"
            )));
        }
    };
    if in_flight || dispatch_received(events, dispatch_id).await? {
        return Ok(Withdrawal::MaybeDelivered);
    }
    Ok(Withdrawal::Withdrawn)
}
