//! The machine's hardware inventory, reported once per agent start and on request (issue 30).
//!
//! At start the agent reads the machine ([`tink_inventory::collect`] on
//! [`AgentConfig::inventory_root`], `/` in the OSIE, in a blocking task: it reads `/proc`,
//! `/sys` and the SMBIOS tables) and, once its command stream is open (so it holds its session
//! token), sends it with `ReportInventory`. Transient failures (no server, NATS down, rate
//! limited) are retried with the usual capped back-off, across servers; a refusal that
//! retrying cannot change (`INVALID_ARGUMENT`: the server names the field;
//! `PERMISSION_DENIED`, `UNAUTHENTICATED` after the stream opened; `UNIMPLEMENTED`: a server
//! without the extension) is logged with the server's message and the agent stops reporting.
//! Nothing here delays workflows.
//!
//! A machine no Hardware names yet has no stream; when a server refuses its stream saying it
//! takes enrollments ([`crate::client::ENROLLMENT_TRAILER`]), the inventory is sent once
//! without credentials to enroll (the controller makes a discovered Hardware of it), and again,
//! authenticated, once the stream opens.
//!
//! On request: an operator annotates the machine's Hardware (`tinkerbell.org/inventory-request`)
//! and the controller asks, through the server holding the agent's stream, for a fresh
//! inventory (`RequestInventory`); [`serve`] collects it again and reports it naming the
//! request, so the controller knows the request was answered.

use std::path::PathBuf;
use std::sync::Arc;

use tink_proto::workflow::v2::ReportInventoryRequest;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tracing::{error, info, warn};

use crate::client::ServerPool;
use crate::config::{AgentConfig, Backoff};

/// What became of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reported {
    /// A server stored it (`duplicate`: it had this exact inventory already).
    Stored { duplicate: bool },
    /// A server refused it for good (the code and the server's message).
    Refused { code: Code, message: String },
    /// The agent stopped before a server stored it.
    Abandoned,
}

/// Collects the inventory under `root` without blocking the runtime, as JSON.
pub async fn collect_json(root: PathBuf) -> Result<String, String> {
    let collected = tokio::task::spawn_blocking(move || {
        let inventory = tink_inventory::collect(&root);
        for warning in &inventory.warnings {
            warn!(root = %root.display(), warning, "inventory");
        }
        inventory.to_json()
    })
    .await
    .map_err(|e| format!("the inventory task failed: {e}"))?;
    let bytes = collected.map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|e| e.to_string())
}

/// Reports the inventory at start ([`report`]), then again each time a server forwards an
/// inventory request (collected afresh, naming the request), until `shutdown`. Requests that
/// come while one is being answered are coalesced: the latest is answered next.
pub async fn serve(
    pool: ServerPool,
    config: Arc<AgentConfig>,
    connected: watch::Receiver<bool>,
    shutdown: CancellationToken,
) {
    let mut requests = pool.inventory_requests();
    let first = report(
        pool.clone(),
        config.clone(),
        connected.clone(),
        shutdown.clone(),
    )
    .await;
    if first == Reported::Abandoned && shutdown.is_cancelled() {
        return;
    }
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            changed = requests.changed() => if changed.is_err() { return },
        }
        let Some(request_id) = requests.borrow_and_update().clone() else {
            continue;
        };
        let Some(root) = config.inventory_root.clone() else {
            warn!(
                request_id,
                "a server asked for the inventory, and this agent collects none (no inventory root)"
            );
            continue;
        };
        let inventory = match collect_json(root.clone()).await {
            Ok(json) => json,
            Err(e) => {
                error!(root = %root.display(), error = %e, "cannot collect the inventory a server asked for");
                continue;
            }
        };
        let reported = send(
            &pool,
            &config,
            inventory,
            &request_id,
            connected.clone(),
            &shutdown,
        )
        .await;
        info!(request_id, ?reported, "inventory request answered");
    }
}

/// Collects and reports the inventory once `connected` turns true; returns what became of it.
pub async fn report(
    pool: ServerPool,
    config: Arc<AgentConfig>,
    connected: watch::Receiver<bool>,
    shutdown: CancellationToken,
) -> Reported {
    let Some(root) = config.inventory_root.clone() else {
        return Reported::Abandoned;
    };
    let inventory = match collect_json(root.clone()).await {
        Ok(json) => json,
        Err(e) => {
            error!(root = %root.display(), error = %e, "cannot collect the inventory; not reporting it");
            return Reported::Abandoned;
        }
    };
    send(&pool, &config, inventory, "", connected, &shutdown).await
}

/// Sends `inventory` (answering `request_id`, or the report at start when empty) until a
/// server stores it or refuses it for good. Only the report at start may enroll.
async fn send(
    pool: &ServerPool,
    config: &AgentConfig,
    inventory: String,
    request_id: &str,
    mut connected: watch::Receiver<bool>,
    shutdown: &CancellationToken,
) -> Reported {
    let mut enrollment = pool.enrollment_open();
    // A request comes on an open stream: it is answered authenticated, never as an enrollment.
    let mut enrolled = !request_id.is_empty();
    let mut backoff = Backoff::new(config.backoff_initial, config.backoff_max);
    let mut index = pool.preferred_index();
    loop {
        // Wait for the command stream: it brings the session token every call presents. A
        // machine no Hardware names yet enrolls first (once), without credentials, when a
        // server said it takes enrollments.
        tokio::select! {
            () = shutdown.cancelled() => return Reported::Abandoned,
            open = connected.wait_for(|c| *c) => if open.is_err() { return Reported::Abandoned },
            open = enrollment.wait_for(|e| *e), if !enrolled => if open.is_err() { return Reported::Abandoned },
        }
        let enrolling = !*connected.borrow();
        let (address, mut client) = pool.get(index);
        let mut request = tonic::Request::new(ReportInventoryRequest {
            agent_id: config.agent_id.clone(),
            inventory: inventory.clone(),
            request_id: if enrolling {
                String::new()
            } else {
                request_id.to_string()
            },
        });
        request.set_timeout(config.request_timeout);
        if !enrolling {
            pool.authenticate(&mut request);
        }
        let result = tokio::select! {
            () = shutdown.cancelled() => return Reported::Abandoned,
            r = tokio::time::timeout(config.request_timeout, client.report_inventory(request)) => r,
        };
        match result {
            Ok(Ok(response)) if enrolling => {
                let response = response.into_inner();
                info!(
                    server = address,
                    enrolled = response.enrolled,
                    duplicate = response.duplicate,
                    "inventory reported to enroll this machine; it is reported again once the stream opens"
                );
                enrolled = true;
                backoff.reset();
                continue;
            }
            Ok(Ok(response)) => {
                let duplicate = response.into_inner().duplicate;
                info!(
                    server = address,
                    duplicate,
                    bytes = inventory.len(),
                    "inventory reported"
                );
                return Reported::Stored { duplicate };
            }
            // While enrolling, a refusal may only mean the discovered Hardware exists by now
            // (credentials needed): wait for the stream instead of giving up.
            Ok(Err(status))
                if enrolling
                    && matches!(
                        status.code(),
                        Code::PermissionDenied | Code::Unauthenticated
                    ) =>
            {
                warn!(server = address, code = ?status.code(), message = status.message(), "the enrollment was not taken; waiting for the stream");
                enrolled = true;
                continue;
            }
            Ok(Err(status))
                if matches!(
                    status.code(),
                    Code::InvalidArgument
                        | Code::PermissionDenied
                        | Code::Unauthenticated
                        | Code::Unimplemented
                ) =>
            {
                error!(server = address, code = ?status.code(), message = status.message(), "the server refused the inventory; not reporting it again");
                return Reported::Refused {
                    code: status.code(),
                    message: status.message().to_string(),
                };
            }
            Ok(Err(status)) => {
                warn!(server = address, code = ?status.code(), message = status.message(), "reporting the inventory failed; retrying");
            }
            Err(_) => warn!(
                server = address,
                "reporting the inventory timed out; retrying"
            ),
        }
        index = index.wrapping_add(1);
        let delay = backoff.next_delay();
        tokio::select! {
            () = shutdown.cancelled() => return Reported::Abandoned,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_collected_inventory_is_what_the_server_accepts() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../crates/inventory/tests/fixtures/machine-a");
        let json = collect_json(root).await.expect("collected");
        let inventory =
            tink_inventory::Inventory::from_json(json.as_bytes()).expect("valid for the server");
        assert!(inventory.cpu.threads > 0);
        assert!(!inventory.disks.is_empty() || !inventory.nics.is_empty());
    }

    #[tokio::test]
    async fn no_root_no_report() {
        let mut config = AgentConfig::new(
            "aa:bb:cc:00:00:01",
            vec!["127.0.0.1:1".parse().expect("address")],
        );
        config.inventory_root = None;
        let pool = ServerPool::new(&config).expect("pool");
        let (_tx, rx) = watch::channel(true);
        let reported = report(pool, Arc::new(config), rx, CancellationToken::new()).await;
        assert_eq!(reported, Reported::Abandoned);
    }
}
