//! `ReportInventory`: an agent's hardware inventory (issue 30), stored in the inventory stream
//! for the controller, which writes it to the Hardware's `status.attributes.inBand`.
//!
//! - **Who.** The caller authenticates exactly as for `PublishEvent` (client certificate or the
//!   session token of its stream, [`crate::auth`]), and the inventory is recorded for that
//!   authenticated agent: an `agent_id` naming another agent is refused (`PERMISSION_DENIED`,
//!   naming `agent_id`), and so is a caller without credentials, even with
//!   `--allow-unauthenticated-agents` (an inventory must never be spoofable: it ends up on a
//!   Hardware). The agent id must be admitted (a Hardware names it), and reports count against
//!   the agent's rate limit.
//! - **What.** `tink_inventory::Inventory::from_json`: at most 1 MiB, parsed with the field
//!   path of a type error, then validated (limits and formats); a refusal is
//!   `INVALID_ARGUMENT` naming the field path under `inventory` (`inventory.disks[3].serial:
//!   longer than 256 bytes`). The validated inventory is stored re-serialized, so unknown
//!   fields never reach the controller.
//! - **Stored.** On `tink.inventory.<agent token>` ([`tink_bus::publish_inventory`]): one
//!   message per agent, de-duplicated by content; OK means JetStream acknowledged it. A report
//!   answering an inventory request (`request_id`, echoed from the `RequestInventory` command
//!   of the agent's stream) carries the id in [`tink_bus::INVENTORY_REQUEST_HEADER`] and is
//!   stored even when the inventory did not change, so the controller learns it was answered.
//!
//! - **Enrollment** (`--enrollment`, off by default): a report WITHOUT credentials for an agent
//!   id that no Hardware names is an unknown machine enrolling itself. It is validated the same
//!   way, limited per replica (`--enrollments-per-second`, bursts of ten times that), and stored
//!   on the agent's inventory subject marked [`tink_bus::ENROLLMENT_HEADER`] with the address
//!   the call came from; the controller creates a discovered Hardware from it, which gets no
//!   Workflow until approved. A report without credentials for an id a Hardware names is
//!   refused (UNAUTHENTICATED) and stores nothing: a machine that spoofs a known MAC changes
//!   nothing. With enrollment on, the stream of an unknown id is refused with the trailer
//!   [`crate::auth::ENROLLMENT_TRAILER`], which tells the agent to enroll.
//!
//! Metrics: `tink_server_inventory_reports{result}` (`enrollment`, `enrollment_duplicate`
//! among them).

use std::net::IpAddr;

use tink_bus::BusError;
use tink_bus::proto::{ReportInventoryRequest, ReportInventoryResponse};
use tink_inventory::{Inventory, InventoryError};
use tonic::{Code, Status};
use tracing::{debug, info, warn};

use crate::auth::{Auth, Caller, TOKEN_HEADER};
use crate::session::Shared;

/// The `INVALID_ARGUMENT` message of a refused inventory: each field path under `inventory`.
pub(crate) fn refusal(error: &InventoryError) -> String {
    let under = |path: &str| {
        if path.is_empty() || path == "(root)" {
            "inventory".to_string()
        } else if path.starts_with('[') {
            format!("inventory{path}")
        } else {
            format!("inventory.{path}")
        }
    };
    match error {
        InventoryError::TooLarge { size, limit } => {
            format!("inventory: {size} bytes, above the limit of {limit}")
        }
        InventoryError::Json { path, message } => format!("{}: {message}", under(path)),
        InventoryError::Invalid(errors) => errors
            .iter()
            .map(|e| format!("{}: {}", under(&e.path), e.problem))
            .collect::<Vec<_>>()
            .join("; "),
    }
}

fn result_of(status: &Status) -> &'static str {
    match status.code() {
        Code::InvalidArgument => "invalid",
        Code::PermissionDenied | Code::Unauthenticated => "denied",
        _ => "unavailable",
    }
}

/// Authenticates, validates and stores one report.
pub(crate) async fn report(
    shared: &Shared,
    auth: Auth,
    peer: Option<IpAddr>,
    request: ReportInventoryRequest,
) -> Result<ReportInventoryResponse, Status> {
    let result = if shared.limits.enrollment && !auth.presented_credentials() {
        enroll(shared, peer, request).await
    } else {
        store(shared, auth, request).await
    };
    match &result {
        Ok(r) if r.enrolled && r.duplicate => {
            shared.metrics.inventory_report("enrollment_duplicate")
        }
        Ok(r) if r.enrolled => shared.metrics.inventory_report("enrollment"),
        Ok(r) if r.duplicate => shared.metrics.inventory_report("duplicate"),
        Ok(_) => shared.metrics.inventory_report("accepted"),
        Err(status) => shared.metrics.inventory_report(result_of(status)),
    }
    result
}

/// An inventory without credentials, with enrollment on: taken only for an agent id that no
/// Hardware names (a known id needs its session token or certificate, whatever it claims),
/// within the replica's enrollment rate, validated as any other, and stored as an enrollment
/// with the address it came from.
async fn enroll(
    shared: &Shared,
    peer: Option<IpAddr>,
    request: ReportInventoryRequest,
) -> Result<ReportInventoryResponse, Status> {
    let agent = crate::auth::claimed_agent("agent_id", &request.agent_id)?;
    let token = tink_bus::agent_token(agent.as_str())
        .map_err(|e| Status::invalid_argument(format!("agent_id: {e}")))?;
    if !request.request_id.is_empty() {
        return Err(Status::invalid_argument(
            "request_id: only an authenticated report answers an inventory request; an enrollment names none",
        ));
    }
    if !shared.admitted.is_loaded() {
        return Err(Status::unavailable(
            "this server replica has not loaded the admitted agents yet; retry",
        ));
    }
    if shared.admitted.contains(&token) {
        shared.metrics.error("enrollment_of_known_agent");
        return Err(Status::unauthenticated(format!(
            "agent {agent} is known (a Hardware names it): its inventory needs its session token in `{TOKEN_HEADER}` (issued on its GetWorkflows stream) or its client certificate; enrollment is only for machines no Hardware names"
        )));
    }
    if let Some(limiter) = &shared.enrollments
        && limiter.check().is_err()
    {
        shared.metrics.error("enrollment_rate_limited");
        return Err(Status::resource_exhausted(format!(
            "more than {} enrollments per second reach this server; retry after a pause",
            shared.limits.enrollments_per_second
        )));
    }
    let inventory = Inventory::from_json(request.inventory.as_bytes()).map_err(|e| {
        debug!(agent_id = %agent, error = %e, "refusing an invalid enrollment");
        Status::invalid_argument(refusal(&e))
    })?;
    let json = inventory
        .to_json()
        .map_err(|e| Status::internal(format!("cannot serialize the inventory: {e}")))?;
    let address = peer
        .map(|ip| ip.to_canonical().to_string())
        .unwrap_or_default();
    match tink_bus::publish_enrollment(&shared.bus.jetstream, agent.as_str(), &address, json).await
    {
        Ok(ack) => {
            info!(agent_id = %agent, address, duplicate = ack.duplicate, "enrollment stored");
            Ok(ReportInventoryResponse {
                duplicate: ack.duplicate,
                enrolled: true,
            })
        }
        Err(e) => {
            shared.metrics.error("publish_inventory");
            warn!(agent_id = %agent, error = %e, "enrollment not stored");
            Err(Status::unavailable(format!(
                "enrollment not stored, retry: {e}"
            )))
        }
    }
}

async fn store(
    shared: &Shared,
    auth: Auth,
    request: ReportInventoryRequest,
) -> Result<ReportInventoryResponse, Status> {
    let agent = match shared
        .authenticate_identity(&auth, "agent_id", &request.agent_id)
        .await?
    {
        Caller::Agent(agent) => agent,
        Caller::Anonymous(_) => {
            return Err(Status::unauthenticated(format!(
                "an inventory is accepted only from an authenticated agent: present its session token in `{TOKEN_HEADER}` (issued on its GetWorkflows stream) or its client certificate"
            )));
        }
    };
    let token = tink_bus::agent_token(agent.as_str())
        .map_err(|e| Status::invalid_argument(format!("agent_id: {e}")))?;
    shared.check_admitted(&agent, &token)?;
    if let Some(limiter) = &shared.agent_calls
        && limiter.check_key(&token).is_err()
    {
        shared.metrics.error("agent_rate_limited");
        return Err(Status::resource_exhausted(format!(
            "agent {agent} sends more than {} calls per second; retry after a pause",
            shared.limits.agent_calls_per_second
        )));
    }
    tink_bus::check_inventory_request_id(&request.request_id)
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    let inventory = Inventory::from_json(request.inventory.as_bytes()).map_err(|e| {
        debug!(agent_id = %agent, error = %e, "refusing an invalid inventory");
        Status::invalid_argument(refusal(&e))
    })?;
    let json = inventory
        .to_json()
        .map_err(|e| Status::invalid_argument(refusal(&e)))?;
    match tink_bus::publish_inventory(
        &shared.bus.jetstream,
        agent.as_str(),
        json,
        &request.request_id,
    )
    .await
    {
        Ok(ack) => Ok(ReportInventoryResponse {
            duplicate: ack.duplicate,
            enrolled: false,
        }),
        Err(BusError::Invalid(e)) => Err(Status::invalid_argument(e.to_string())),
        Err(BusError::Token(e)) => Err(Status::invalid_argument(format!("agent_id: {e}"))),
        Err(e) => {
            shared.metrics.error("publish_inventory");
            warn!(agent_id = %agent, error = %e, "inventory not stored");
            Err(Status::unavailable(format!(
                "inventory not stored, retry: {e}"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tink_inventory::FieldError;

    #[test]
    fn refusals_name_the_field_under_inventory() {
        let invalid = InventoryError::Invalid(vec![
            FieldError {
                path: "disks[3].serial".into(),
                problem: "longer than 256 bytes".into(),
            },
            FieldError {
                path: "cpu.threads".into(),
                problem: "above 65536".into(),
            },
        ]);
        assert_eq!(
            refusal(&invalid),
            "inventory.disks[3].serial: longer than 256 bytes; inventory.cpu.threads: above 65536"
        );
        let json = InventoryError::Json {
            path: "(root)".into(),
            message: "expected value".into(),
        };
        assert_eq!(refusal(&json), "inventory: expected value");
        let large = InventoryError::TooLarge {
            size: 2_000_000,
            limit: 1 << 20,
        };
        assert_eq!(
            refusal(&large),
            "inventory: 2000000 bytes, above the limit of 1048576"
        );
    }
}
