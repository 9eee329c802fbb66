//! The Tinkerbell agent: holds a command stream to a server, runs one workflow at a time, each
//! action as a Docker container, and reports every step as an event the server must confirm.
#![forbid(unsafe_code)]

pub mod reason;
pub mod runtime;
pub mod spec;
