//! The trace of one Workflow: every controller span about it (reconcile, render, dispatch,
//! events applied) is in the trace whose id is the Workflow's uid, under the same fixed remote
//! parent, so a trace viewer shows the Workflow's whole story in one place. Its own test
//! binary: it installs the process-wide tracing subscriber.
#![forbid(unsafe_code)]

mod common;

use common::*;
use serde_json::json;
use tink_api::v1alpha2::WorkflowState;
use tink_testkit::otlp::{OtlpReceiver, RecordedSpan};

const MAC: &str = "aa:bb:cc:00:00:21";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_spans_of_a_workflow_share_its_trace() {
    let receiver = OtlpReceiver::start().await.expect("OTLP receiver");
    let args = tink_telemetry::TelemetryArgs {
        otlp_endpoint: Some(receiver.endpoint()),
        log_filter: "info".into(),
        ..Default::default()
    };
    let _telemetry = tink_telemetry::init("tink-controller-test", &args).expect("telemetry");

    let stack = Stack::start().await;
    let controller = stack.leader("c0").await;
    stack.create_hardware("m1", MAC).await;
    stack.create_template("ubuntu", three_actions()).await;
    let mut agent = stack.agent(MAC).await;
    stack
        .create_workflow("traced", "m1", "ubuntu", json!({}))
        .await;
    let (id, actions) = agent.next_start().await;
    agent.run_all(&id, &actions).await;
    let w = stack.wait_state("traced", WorkflowState::Succeeded).await;
    let trace_id = w.metadata.uid.clone().expect("uid").replace('-', "");
    // The exporter batches: wait_for waits for its next export.

    let named = |spans: &[RecordedSpan], name: &str| -> Vec<RecordedSpan> {
        spans
            .iter()
            .filter(|s| s.name == name && s.trace_id == trace_id)
            .cloned()
            .collect()
    };
    let spans = receiver
        .wait_for(|spans| {
            ["reconcile", "render", "dispatch", "apply_events"]
                .iter()
                .all(|n| !named(spans, n).is_empty())
        })
        .await
        .expect("the controller's spans of the workflow");

    let reconciles = named(&spans, "reconcile");
    let dispatch = named(&spans, "dispatch");
    let applied = named(&spans, "apply_events");
    // One dispatch, and the events (six) applied in at least one group.
    assert_eq!(dispatch.len(), 1, "{dispatch:#?}");
    let events: usize = applied
        .iter()
        .filter_map(|s| s.attribute("events")?.parse::<usize>().ok())
        .sum();
    assert!(events >= 6, "six events applied, got {applied:#?}");
    assert_eq!(
        dispatch[0].attribute("dispatch"),
        Some(id.as_str()),
        "{dispatch:#?}"
    );
    // Reconcile, dispatch and events-applied spans hang under the same remote parent (the
    // Workflow's fixed root), never under each other's or a random root.
    let roots: Vec<&RecordedSpan> = reconciles
        .iter()
        .chain(dispatch.iter())
        .chain(applied.iter())
        .collect();
    let parent = roots[0].parent_span_id.clone();
    assert!(
        parent.is_some(),
        "the spans have the Workflow's root as parent"
    );
    for s in &roots {
        assert_eq!(s.parent_span_id, parent, "{s:#?}");
        assert_eq!(s.service_name.as_deref(), Some("tink-controller-test"));
    }
    // Rendering happens inside a reconcile of this Workflow.
    for r in named(&spans, "render") {
        assert!(
            reconciles
                .iter()
                .any(|p| Some(&p.span_id) == r.parent_span_id.as_ref()),
            "render is a child of a reconcile: {r:#?}"
        );
    }
    // No controller span about the Workflow escaped into another trace.
    let strays: Vec<&RecordedSpan> = spans
        .iter()
        .filter(|s| {
            s.service_name.as_deref() == Some("tink-controller-test")
                && s.trace_id != trace_id
                && s.attribute("workflow") == Some("tink/traced")
        })
        .collect();
    assert!(strays.is_empty(), "{strays:#?}");

    controller.stop().await;
    stack.stop().await;
}
