//! Service runtime shared by every tinkerbell-rs binary: graceful shutdown on SIGTERM/SIGINT, the
//! health and readiness state, and the admin HTTP endpoint serving `/healthz`, `/readyz` and
//! Prometheus `/metrics`.
//!
//! Libraries never read the environment; binaries flatten [`AdminArgs`] into their clap
//! arguments and pass the values in.
#![forbid(unsafe_code)]

mod admin;
mod health;
mod shutdown;

pub use admin::{AdminArgs, admin_router, serve_admin};
pub use health::Health;
pub use shutdown::{shutdown_token, wait_for_signal};
