//! The tinkerbell controller: the only writer of Workflow status.
#![forbid(unsafe_code)]

pub mod render;
