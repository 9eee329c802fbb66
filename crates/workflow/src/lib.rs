//! The pure Workflow state machine: (status, input) -> (status, effects).
#![forbid(unsafe_code)]
