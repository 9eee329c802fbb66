//! One trace per Workflow.
//!
//! The trace id is derived from the Workflow's `metadata.uid` (a UUID's 16 bytes, so the trace
//! id *is* the uid without dashes; any other uid is hashed), and every controller span about a
//! Workflow (reconcile, render, dispatch, events applied) is a child of a fixed remote parent
//! in that trace. No annotation has to be written to remember it, and it survives restarts and
//! leader changes. The StartWorkflow and StopWorkflow commands carry the context in their NATS
//! headers (the server forwards it to the agent), so the server's and the agent's spans join
//! the same trace.

use opentelemetry::Context;
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
};

/// The remote parent context of every span about the Workflow with this uid.
pub fn workflow_context(uid: &str) -> Context {
    let bytes = match uuid::Uuid::parse_str(uid) {
        Ok(u) => *u.as_bytes(),
        Err(_) => hash16(uid),
    };
    let mut trace = bytes;
    if trace == [0; 16] {
        trace[15] = 1;
    }
    // The root "span" id: the last 8 bytes folded with the first 8, never zero.
    let mut span = [0u8; 8];
    for i in 0..8 {
        span[i] = bytes[i] ^ bytes[i + 8] ^ 0x5a;
    }
    if span == [0; 8] {
        span[7] = 1;
    }
    let sc = SpanContext::new(
        TraceId::from_bytes(trace),
        SpanId::from_bytes(span),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    Context::new().with_remote_span_context(sc)
}

/// The trace id of the Workflow with this uid, as 32 hex digits (the value of the
/// `tinkerbell.org/trace-id` annotation).
pub fn trace_id(uid: &str) -> String {
    workflow_context(uid)
        .span()
        .span_context()
        .trace_id()
        .to_string()
}

/// The context to send with a command: the current span's when tracing is exported, otherwise
/// the Workflow's own context, so the agent's spans still land in the Workflow's trace.
pub fn command_context(uid: &str) -> Context {
    let cx = tink_telemetry::propagation::current_context();
    if cx.span().span_context().is_valid() {
        cx
    } else {
        workflow_context(uid)
    }
}

/// FNV-1a over the text, twice with different offsets, for 16 bytes.
fn hash16(text: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (half, offset) in [
        (0usize, 0xcbf2_9ce4_8422_2325u64),
        (8, 0x8422_2325_cbf2_9ce4),
    ] {
        let mut h = offset;
        for b in text.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        out[half..half + 8].copy_from_slice(&h.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trace_id_is_the_uid() {
        let cx = workflow_context("0af76519-16cd-43dd-8448-eb211c80319c");
        let sc = cx.span().span_context().clone();
        assert!(sc.is_valid() && sc.is_remote() && sc.is_sampled());
        assert_eq!(
            sc.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        // Stable: the same uid gives the same parent.
        let again = workflow_context("0af76519-16cd-43dd-8448-eb211c80319c");
        assert_eq!(again.span().span_context().span_id(), sc.span_id());
    }

    #[test]
    fn other_uids_are_hashed_into_distinct_valid_traces() {
        let a = workflow_context("not-a-uuid");
        let b = workflow_context("not-a-uuid-2");
        let (a, b) = (
            a.span().span_context().clone(),
            b.span().span_context().clone(),
        );
        assert!(a.is_valid() && b.is_valid());
        assert_ne!(a.trace_id(), b.trace_id());
        assert!(workflow_context("").span().span_context().is_valid());
    }
}
