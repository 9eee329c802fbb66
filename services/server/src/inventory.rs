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
//!   message per agent, de-duplicated by content; OK means JetStream acknowledged it.
//!
//! Metrics: `tink_server_inventory_reports{result}`.

use tink_bus::BusError;
use tink_bus::proto::{ReportInventoryRequest, ReportInventoryResponse};
use tink_inventory::{Inventory, InventoryError};
use tonic::{Code, Status};
use tracing::{debug, warn};

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
    request: ReportInventoryRequest,
) -> Result<ReportInventoryResponse, Status> {
    let result = store(shared, auth, request).await;
    match &result {
        Ok(r) if r.duplicate => shared.metrics.inventory_report("duplicate"),
        Ok(_) => shared.metrics.inventory_report("accepted"),
        Err(status) => shared.metrics.inventory_report(result_of(status)),
    }
    result
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
    let inventory = Inventory::from_json(request.inventory.as_bytes()).map_err(|e| {
        debug!(agent_id = %agent, error = %e, "refusing an invalid inventory");
        Status::invalid_argument(refusal(&e))
    })?;
    let json = inventory
        .to_json()
        .map_err(|e| Status::invalid_argument(refusal(&e)))?;
    match tink_bus::publish_inventory(&shared.bus.jetstream, agent.as_str(), json).await {
        Ok(ack) => Ok(ReportInventoryResponse {
            duplicate: ack.duplicate,
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
