//! Service runtime shared by every tinkerbell-rs binary: graceful shutdown on SIGTERM/SIGINT, the
//! health and readiness state, the admin HTTP endpoint serving `/healthz`, `/readyz` and
//! Prometheus `/metrics`, the one way to run a service's tasks and stop ([`TaskGroup`]), and the
//! frame of every binary's `main` ([`Service`]).
//!
//! Libraries never read the environment; binaries flatten [`AdminArgs`] into their clap
//! arguments and pass the values in.
#![forbid(unsafe_code)]

mod admin;
mod health;
mod jitter;
mod service;
mod shutdown;
mod tasks;

pub use admin::{AdminArgs, AdminServer, admin_router, serve_admin};
pub use health::Health;
pub use jitter::jittered;
pub use service::{Service, ServiceError};
pub use shutdown::{
    DEFAULT_SHUTDOWN_GRACE, shutdown_token, shutdown_token_with_grace, wait_for_signal,
};
pub use tasks::{Activator, PeriodicStatus, TaskFailure, TaskGroup};

/// The name a replica uses for itself (presence entries, the Lease, Events, logs): `explicit`
/// when given, else the host name (the pod name in Kubernetes), else `{service}-{pid}`.
pub fn replica_id(explicit: Option<String>, service: &str) -> String {
    explicit
        .map(|id| id.trim().to_owned())
        .filter(|id| !id.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|host| host.trim().to_owned())
                .filter(|host| !host.is_empty())
        })
        .unwrap_or_else(|| format!("{service}-{}", std::process::id()))
}
