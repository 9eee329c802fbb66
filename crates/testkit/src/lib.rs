//! Test helpers: real nats-server processes (one, or a 3-node cluster in network namespaces),
//! local Docker action images, an OTLP trace receiver.
//!
//! Each module is owned by the part of the system that needs it most; all of them start real
//! processes or listeners on loopback only and clean up on drop.
#![forbid(unsafe_code)]

/// Certificates for tests that serve TLS: a throw-away CA and a serving certificate it signs.
/// The code lives in `tink-dev-certs` because `tinkctl dev up` makes the development stack's
/// with it at run time, and no shipped binary may depend on the test kit.
pub use tink_dev_certs as certs;
pub mod bmc;
pub mod cluster;
pub mod docker;
pub mod nats;
pub mod netdelay;
pub mod otlp;
