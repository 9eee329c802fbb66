//! Publishing on the bus, in one place: events, commands and log batches are validated,
//! given their de-duplication id (`Nats-Msg-Id`) and trace context, and published on their
//! subject; each call returns once JetStream acknowledged storage.

use async_nats::HeaderMap;
use async_nats::jetstream::{self, context::PublishAckFuture, publish::PublishAck};
use bytes::Bytes;
use tink_proto::workflow::v2::{Event, GetWorkflowsResponse, LogBatch};

use crate::codec::{encode_command, encode_event, event_msg_id, validate_command, validate_event};
use crate::error::BusError;
use crate::logs::{encode_log_batch, log_batch_msg_id, logs_subject, validate_log_batch};
use crate::subjects::{dispatch_subject, events_subject, inventory_subject};
use crate::token::agent_token;

/// The JetStream de-duplication header.
pub const MSG_ID_HEADER: &str = "Nats-Msg-Id";

/// Headers carrying a de-duplication id and the W3C trace context of `cx`.
pub fn headers_with(msg_id: &str, cx: &opentelemetry::Context) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(MSG_ID_HEADER, msg_id);
    tink_telemetry::propagation::inject_nats(cx, &mut headers);
    headers
}

async fn publish(
    jetstream: &jetstream::Context,
    subject: String,
    headers: HeaderMap,
    payload: Bytes,
) -> Result<PublishAck, BusError> {
    let future: PublishAckFuture = jetstream
        .publish_with_headers(subject.clone(), headers, payload)
        .await
        .map_err(|source| BusError::Publish {
            subject: subject.clone(),
            source,
        })?;
    future
        .await
        .map_err(|source| BusError::Publish { subject, source })
}

/// Validates and publishes an event on its workflow's subject with the trace context `cx`, and
/// waits for JetStream's acknowledgement (`PublishAck::duplicate` tells a de-duplicated retry).
pub async fn publish_event(
    jetstream: &jetstream::Context,
    event: &Event,
    cx: &opentelemetry::Context,
) -> Result<PublishAck, BusError> {
    let mut headers = HeaderMap::new();
    tink_telemetry::propagation::inject_nats(cx, &mut headers);
    publish_event_with_headers(jetstream, event, headers).await
}

/// Like [`publish_event`] with headers given as is (for example `traceparent` copied from an
/// agent's request); the de-duplication id is added.
pub async fn publish_event_with_headers(
    jetstream: &jetstream::Context,
    event: &Event,
    mut headers: HeaderMap,
) -> Result<PublishAck, BusError> {
    validate_event(event)?;
    let subject = events_subject(&event.workflow_id)?;
    headers.insert(MSG_ID_HEADER, event_msg_id(event).as_str());
    publish(jetstream, subject, headers, encode_event(event)).await
}

/// Validates and publishes a command for an agent and waits for JetStream's acknowledgement.
/// `msg_id` de-duplicates repeated publications of the same command (for example
/// `<workflow uid>.start.<attempt>`).
pub async fn publish_command(
    jetstream: &jetstream::Context,
    agent_id: &str,
    command: &GetWorkflowsResponse,
    msg_id: &str,
    cx: &opentelemetry::Context,
) -> Result<PublishAck, BusError> {
    validate_command(command)?;
    let subject = dispatch_subject(agent_id)?;
    publish(
        jetstream,
        subject,
        headers_with(msg_id, cx),
        encode_command(command),
    )
    .await
}

/// Validates and stores a batch on its subject, de-duplicated by [`log_batch_msg_id`]; returns
/// once JetStream acknowledged it.
pub async fn publish_log_batch(
    jetstream: &jetstream::Context,
    batch: &LogBatch,
) -> Result<PublishAck, BusError> {
    validate_log_batch(batch)?;
    let subject = logs_subject(&batch.workflow_id, &batch.action_id)?;
    let mut headers = HeaderMap::new();
    headers.insert(MSG_ID_HEADER, log_batch_msg_id(batch).as_str());
    publish(jetstream, subject, headers, encode_log_batch(batch)).await
}

/// The largest inventory (JSON) [`publish_inventory`] stores: tink-inventory's
/// `MAX_SERIALIZED_BYTES` (1 MiB).
pub const MAX_INVENTORY_BYTES: usize = 1 << 20;

/// The header that marks an inventory as an enrollment: a machine no Hardware named reported
/// it without credentials (issue 30). Its value is the address the server saw it from.
pub const ENROLLMENT_HEADER: &str = "Tink-Enrollment";

/// The de-duplication id of an agent's inventory: `inv.<agent token>.<SHA-256 of the JSON>`, so
/// an identical report (a retry, a restarted agent on the same machine) is stored once.
pub fn inventory_msg_id(agent_id: &str, json: &[u8]) -> Result<String, crate::TokenError> {
    let digest = ring::digest::digest(&ring::digest::SHA256, json);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("inv.{}.{hex}", agent_token(agent_id)?))
}

/// Refuses an inventory above [`MAX_INVENTORY_BYTES`].
fn check_inventory_size(json: &[u8]) -> Result<(), BusError> {
    if json.len() > MAX_INVENTORY_BYTES {
        return Err(BusError::Invalid(crate::InvalidMessage::new(
            "inventory",
            format!(
                "{} bytes, above the limit of {MAX_INVENTORY_BYTES}",
                json.len()
            ),
        )));
    }
    Ok(())
}

/// The header naming the inventory request an authenticated report answers (its id, as the
/// controller sent it; see [`check_inventory_request_id`]).
pub const INVENTORY_REQUEST_HEADER: &str = "Tink-Inventory-Request";

/// The longest inventory request id.
pub const MAX_INVENTORY_REQUEST_ID: usize = 64;

/// Checks an inventory request id: at most [`MAX_INVENTORY_REQUEST_ID`] characters of
/// `[A-Za-z0-9_-]` (it travels in a header and a de-duplication id).
pub fn check_inventory_request_id(id: &str) -> Result<(), crate::InvalidMessage> {
    if id.len() > MAX_INVENTORY_REQUEST_ID {
        return Err(crate::InvalidMessage::new(
            "request_id",
            format!("longer than {MAX_INVENTORY_REQUEST_ID} characters"),
        ));
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(crate::InvalidMessage::new(
            "request_id",
            format!("{c:?} is not one of [A-Za-z0-9_-]"),
        ));
    }
    Ok(())
}

/// Stores `json` (an inventory the caller validated) as the latest inventory of `agent_id`
/// (the authenticated agent), de-duplicated by [`inventory_msg_id`]; returns once JetStream
/// acknowledged it (`PublishAck::duplicate` tells an identical earlier report). A report
/// answering an inventory request (`request_id` not empty) carries it in
/// [`INVENTORY_REQUEST_HEADER`] and is de-duplicated apart (`req.<id>.` ids): the answer must
/// reach the controller even when the inventory did not change.
pub async fn publish_inventory(
    jetstream: &jetstream::Context,
    agent_id: &str,
    json: Vec<u8>,
    request_id: &str,
) -> Result<PublishAck, BusError> {
    check_inventory_size(&json)?;
    check_inventory_request_id(request_id).map_err(BusError::Invalid)?;
    let subject = inventory_subject(agent_id)?;
    let id = inventory_msg_id(agent_id, &json)?;
    let mut headers = HeaderMap::new();
    if request_id.is_empty() {
        headers.insert(MSG_ID_HEADER, id.as_str());
    } else {
        headers.insert(MSG_ID_HEADER, format!("req.{request_id}.{id}").as_str());
        headers.insert(INVENTORY_REQUEST_HEADER, request_id);
    }
    publish(jetstream, subject, headers, Bytes::from(json)).await
}

/// Stores `json` (validated by the caller) as the enrollment of `agent_id`, an id no Hardware
/// names, reported without credentials from `address`: on the agent's inventory subject (its
/// latest report), marked with [`ENROLLMENT_HEADER`], de-duplicated apart from authenticated
/// reports (`enr.` ids) so an enrollment never hides one.
pub async fn publish_enrollment(
    jetstream: &jetstream::Context,
    agent_id: &str,
    address: &str,
    json: Vec<u8>,
) -> Result<PublishAck, BusError> {
    check_inventory_size(&json)?;
    let subject = inventory_subject(agent_id)?;
    let id = inventory_msg_id(agent_id, &json)?;
    let mut headers = HeaderMap::new();
    headers.insert(MSG_ID_HEADER, format!("enr.{id}").as_str());
    headers.insert(ENROLLMENT_HEADER, address);
    publish(jetstream, subject, headers, Bytes::from(json)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inventory_request_ids_are_short_and_plain() {
        assert!(
            check_inventory_request_id("").is_ok(),
            "none: a report at start"
        );
        assert!(check_inventory_request_id("0123abcdEF_-").is_ok());
        assert!(check_inventory_request_id(&"a".repeat(MAX_INVENTORY_REQUEST_ID)).is_ok());
        let long = check_inventory_request_id(&"a".repeat(MAX_INVENTORY_REQUEST_ID + 1))
            .expect_err("too long");
        assert_eq!(long.field, "request_id");
        for bad in ["a b", "a.b", "a*", "a>", "é", "a\nb"] {
            let e = check_inventory_request_id(bad).expect_err(bad);
            assert_eq!(e.field, "request_id", "{bad}");
        }
    }
}
