//! The controller's Kubernetes Event recorder against a real API server (kube-lite): one Event
//! object per occurrence, an identical repeat counted in the first one's `series`, and many
//! Events published at once all land.

use k8s_openapi::api::core::v1::{Namespace, ObjectReference};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;
use tink_controller::recorder::{Kind, Occurrence, Recorder};

fn regarding(name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("tinkerbell.org/v1alpha2".into()),
        kind: Some("Workflow".into()),
        namespace: Some("rec".into()),
        name: Some(name.into()),
        uid: Some(format!("uid-{name}")),
        ..Default::default()
    }
}

fn occurrence(name: &str, reason: &str, note: &str) -> Occurrence {
    Occurrence {
        regarding: regarding(name),
        kind: Kind::Normal,
        reason: reason.into(),
        note: note.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeats_are_counted_and_concurrent_events_all_land() {
    let kube = kube_lite::Server::start(kube_lite::Config::default())
        .await
        .expect("kube-lite starts");
    let client = kube.client().expect("client");
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "rec"}})).expect("ns");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    let recorder = Recorder::new(client.clone(), "tinkerbell.org/workflow-controller", "c0");
    let events: Api<Event> = Api::namespaced(client.clone(), "rec");

    // The same occurrence three times: one object, counted 3.
    for _ in 0..3 {
        recorder
            .publish(&occurrence("wf1", "Rejected", "the agent is busy"))
            .await
            .expect("publish");
    }
    // Another note on the same object is another Event.
    recorder
        .publish(&occurrence("wf1", "Rejected", "no such action"))
        .await
        .expect("publish");
    let list = events.list(&ListParams::default()).await.expect("list");
    assert_eq!(list.items.len(), 2, "{:#?}", list.items);
    let busy = list
        .items
        .iter()
        .find(|e| e.note.as_deref() == Some("the agent is busy"))
        .expect("the repeated Event");
    assert_eq!(busy.series.as_ref().map(|s| s.count), Some(3));
    assert_eq!(busy.reason.as_deref(), Some("Rejected"));
    assert_eq!(busy.type_.as_deref(), Some("Normal"));
    assert_eq!(
        busy.reporting_controller.as_deref(),
        Some("tinkerbell.org/workflow-controller")
    );
    assert_eq!(busy.reporting_instance.as_deref(), Some("c0"));
    assert_eq!(
        busy.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("wf1")
    );

    // 500 distinct Events from 50 tasks at once: all of them are stored, none twice.
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..50 {
        let recorder = recorder.clone();
        tasks.spawn(async move {
            for i in 0..10 {
                recorder
                    .publish(&occurrence(&format!("wf-{t}-{i}"), "Succeeded", "done"))
                    .await
                    .expect("publish");
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("task");
    }
    let list = events.list(&ListParams::default()).await.expect("list");
    assert_eq!(list.items.len(), 502);
    assert!(
        list.items
            .iter()
            .all(|e| e.series.is_none() || e.note.as_deref() == Some("the agent is busy"))
    );

    // A note longer than the API server's 1 kB limit is cut, not refused.
    recorder
        .publish(&occurrence("wf2", "ActionFailed", &"x".repeat(5000)))
        .await
        .expect("a long note is cut");
    kube.shutdown().await;
}

/// A repeat of an Event someone deleted in the meantime (or whose create never landed) is
/// created anew, not lost, and later repeats count in the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeat_of_a_deleted_event_creates_it_again() {
    let kube = kube_lite::Server::start(kube_lite::Config::default())
        .await
        .expect("kube-lite starts");
    let client = kube.client().expect("client");
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "rec"}})).expect("ns");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    let recorder = Recorder::new(client.clone(), "tinkerbell.org/workflow-controller", "c0");
    let events: Api<Event> = Api::namespaced(client.clone(), "rec");
    let o = occurrence("wf1", "Rejected", "the agent is busy");
    recorder.publish(&o).await.expect("publish");
    let first = events
        .list(&ListParams::default())
        .await
        .expect("list")
        .items;
    assert_eq!(first.len(), 1);
    events
        .delete(
            &first[0].metadata.name.clone().expect("name"),
            &Default::default(),
        )
        .await
        .expect("delete");
    recorder.publish(&o).await.expect("a repeat after a delete");
    recorder.publish(&o).await.expect("and another");
    let now = events
        .list(&ListParams::default())
        .await
        .expect("list")
        .items;
    assert_eq!(now.len(), 1, "{now:#?}");
    assert_ne!(now[0].metadata.name, first[0].metadata.name);
    assert_eq!(now[0].series.as_ref().map(|s| s.count), Some(2));
    kube.shutdown().await;
}
