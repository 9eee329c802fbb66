//! Test helpers: real nats-server processes, local Docker action images, an OTLP trace receiver.
//!
//! Each module is owned by the part of the system that needs it most; all of them start real
//! processes or listeners on loopback only and clean up on drop.
#![forbid(unsafe_code)]

pub mod bmc;
pub mod docker;
pub mod nats;
pub mod otlp;
