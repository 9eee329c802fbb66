//! Core `v1` and `events.k8s.io/v1` Events are one store seen in two versions: what
//! kube-runtime's `Recorder` publishes is what `kubectl describe` lists.

mod common;

use std::time::Duration;

use common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, ObjectReference};
use k8s_openapi::api::events::v1::Event as NewEvent;
use kube::api::{ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

fn reporter() -> Reporter {
    Reporter {
        controller: "tink-controller".into(),
        instance: Some("tink-controller-0".into()),
    }
}

fn started(note: &str) -> Event {
    Event {
        type_: EventType::Normal,
        reason: "Started".into(),
        note: Some(note.into()),
        action: "Reconcile".into(),
        secondary: None,
    }
}

async fn configmap(env: &Env, name: &str) -> ConfigMap {
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": name}, "data": {"a": "b"}}))
            .expect("configmap");
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("create configmap")
}

fn involved(obj: &ObjectReference) -> String {
    format!(
        "involvedObject.name={},involvedObject.namespace={},involvedObject.kind={},involvedObject.uid={}",
        obj.name.as_deref().unwrap_or_default(),
        obj.namespace.as_deref().unwrap_or_default(),
        obj.kind.as_deref().unwrap_or_default(),
        obj.uid.as_deref().unwrap_or_default(),
    )
}

#[tokio::test]
async fn recorder_events_are_listed_as_core_events() {
    let env = Env::new("events-rec").await;
    let cm = configmap(&env, "target").await;
    let reference = cm.object_ref(&());
    let recorder = Recorder::new(env.client.clone(), reporter());
    recorder
        .publish(&started("first"), &reference)
        .await
        .expect("publish");

    let core: Api<CoreEvent> = Api::namespaced(env.client.clone(), &env.ns);
    let lp = ListParams::default().fields(&involved(&reference));
    let listed = core.list(&lp).await.expect("list core events");
    assert_eq!(listed.items.len(), 1, "{listed:?}");
    let e = &listed.items[0];
    assert_eq!(e.involved_object.name.as_deref(), Some("target"));
    assert_eq!(e.involved_object.uid, cm.metadata.uid);
    assert_eq!(e.involved_object.kind.as_deref(), Some("ConfigMap"));
    assert_eq!(e.message.as_deref(), Some("first"));
    assert_eq!(e.reason.as_deref(), Some("Started"));
    assert_eq!(e.type_.as_deref(), Some("Normal"));
    assert_eq!(e.action.as_deref(), Some("Reconcile"));
    assert_eq!(e.reporting_component.as_deref(), Some("tink-controller"));
    assert_eq!(e.reporting_instance.as_deref(), Some("tink-controller-0"));
    assert!(e.event_time.is_some());
    assert!(e.series.is_none());

    // The same object, same resourceVersion, through events.k8s.io.
    let new: Api<NewEvent> = Api::namespaced(env.client.clone(), &env.ns);
    let same = new
        .get(&e.name_any())
        .await
        .expect("get events.k8s.io event");
    assert_eq!(same.resource_version(), e.resource_version());
    assert_eq!(same.note.as_deref(), Some("first"));
    assert_eq!(same.regarding.and_then(|r| r.uid), cm.metadata.uid);

    // Publishing again merge-patches `series` through events.k8s.io; the core view shows it.
    recorder
        .publish(&started("first"), &reference)
        .await
        .expect("publish again");
    let listed = core.list(&lp).await.expect("list core events");
    assert_eq!(listed.items.len(), 1, "{listed:?}");
    let series = listed.items[0].series.clone().expect("series");
    assert_eq!(series.count, Some(2));
    assert_ne!(listed.items[0].resource_version(), e.resource_version());

    // Selectors on the other fields kube-apiserver supports.
    for (fields, want) in [
        ("reason=Started,type=Normal", 1),
        ("reportingComponent=tink-controller", 1),
        ("source=tink-controller", 1),
        ("involvedObject.apiVersion=v1,involvedObject.fieldPath=", 1),
        ("type=Warning", 0),
        ("involvedObject.name=other", 0),
    ] {
        let n = core
            .list(&ListParams::default().fields(fields))
            .await
            .expect("list")
            .items
            .len();
        assert_eq!(n, want, "{fields}");
    }
    for (fields, want) in [
        ("regarding.name=target,regarding.kind=ConfigMap", 1),
        ("reportingController=tink-controller,reason=Started", 1),
        ("regarding.name=other", 0),
    ] {
        let n = new
            .list(&ListParams::default().fields(fields))
            .await
            .expect("list")
            .items
            .len();
        assert_eq!(n, want, "{fields}");
    }
    // Unknown labels are refused, as kube-apiserver does.
    for fields in ["message=first", "regarding.name=target"] {
        let err = core
            .list(&ListParams::default().fields(fields))
            .await
            .expect_err(fields);
        assert_eq!(code(err), 400, "{fields}");
    }
    let err = new
        .list(&ListParams::default().fields("involvedObject.name=target"))
        .await
        .expect_err("core label on events.k8s.io");
    assert_eq!(code(err), 400);
    env.cleanup().await;
}

#[tokio::test]
async fn core_events_are_served_as_events_k8s_io_and_watched() {
    let env = Env::new("events-core").await;
    let new: Api<NewEvent> = Api::namespaced(env.client.clone(), &env.ns);
    let wp = WatchParams::default().fields("regarding.name=web");
    let mut stream = new.watch(&wp, "0").await.expect("watch").boxed();

    let core: Api<CoreEvent> = Api::namespaced(env.client.clone(), &env.ns);
    let e: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "web.1"},
        "involvedObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": "web", "namespace": env.ns},
        "reason": "Changed", "message": "data changed", "type": "Warning",
        "source": {"component": "legacy", "host": "node-1"},
        "count": 4, "firstTimestamp": "2024-01-01T00:00:00Z", "lastTimestamp": "2024-01-01T00:05:00Z",
    }))
    .expect("event");
    let created = core
        .create(&PostParams::default(), &e)
        .await
        .expect("create core event");
    core.create(
        &PostParams::default(),
        &serde_json::from_value::<CoreEvent>(json!({
            "metadata": {"name": "db.1"},
            "involvedObject": {"kind": "ConfigMap", "name": "db"},
            "reason": "Changed", "message": "not for web",
        }))
        .expect("event"),
    )
    .await
    .expect("create another core event");

    let got = new.get("web.1").await.expect("get as events.k8s.io");
    assert_eq!(
        got.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("web")
    );
    assert_eq!(got.note.as_deref(), Some("data changed"));
    assert_eq!(got.type_.as_deref(), Some("Warning"));
    assert_eq!(got.deprecated_count, Some(4));
    let src = got.deprecated_source.clone().expect("deprecatedSource");
    assert_eq!(src.component.as_deref(), Some("legacy"));
    assert_eq!(src.host.as_deref(), Some("node-1"));
    assert!(got.deprecated_first_timestamp.is_some() && got.deprecated_last_timestamp.is_some());
    assert_eq!(got.resource_version(), created.resource_version());

    // The watch on events.k8s.io saw the core Event, converted, and not the other one.
    let seen = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match stream.try_next().await.expect("watch stream") {
                Some(WatchEvent::Added(ev)) => return ev,
                Some(WatchEvent::Bookmark(_)) => {}
                other => panic!("unexpected watch event {other:?}"),
            }
        }
    })
    .await
    .expect("watch event in time");
    assert_eq!(seen.name_any(), "web.1");
    assert_eq!(seen.note.as_deref(), Some("data changed"));

    // A merge patch through events.k8s.io lands in the core view.
    let patched = new
        .patch(
            "web.1",
            &PatchParams::default(),
            &Patch::Merge(&json!({"note": "changed again", "deprecatedCount": 5})),
        )
        .await
        .expect("patch events.k8s.io");
    assert_eq!(patched.note.as_deref(), Some("changed again"));
    let back = core.get("web.1").await.expect("get core");
    assert_eq!(back.message.as_deref(), Some("changed again"));
    assert_eq!(back.count, Some(5));
    assert_eq!(back.resource_version(), patched.resource_version());
    match tokio::time::timeout(Duration::from_secs(30), stream.try_next())
        .await
        .expect("modified event in time")
        .expect("watch stream")
    {
        Some(WatchEvent::Modified(ev)) => assert_eq!(ev.note.as_deref(), Some("changed again")),
        other => panic!("expected MODIFIED, got {other:?}"),
    }

    // A name is taken in both versions.
    let dup: NewEvent = serde_json::from_value(json!({"metadata": {"name": "web.1"},
        "eventTime": "2024-01-01T00:00:00.000000Z", "reportingController": "x", "reportingInstance": "y",
        "action": "A", "reason": "B", "type": "Normal", "regarding": {"kind": "ConfigMap", "name": "web"}}))
    .expect("event");
    assert_eq!(
        code(new.create(&PostParams::default(), &dup).await.unwrap_err()),
        409
    );
    new.delete("web.1", &Default::default())
        .await
        .expect("delete through events.k8s.io");
    assert_eq!(code(core.get("web.1").await.unwrap_err()), 404);
    env.cleanup().await;
}

#[tokio::test]
async fn kubectl_describe_shows_recorder_events() {
    let env = Env::new("events-kubectl").await;
    ensure_widget_crd(&env.client).await;
    let api = widgets(&env.client, &env.ns, "v1");
    let w = api
        .create(
            &PostParams::default(),
            &widget("described", json!({"size": 2, "color": "green"})),
        )
        .await
        .expect("create widget");
    let reference = ObjectReference {
        api_version: Some("lite.example.com/v1".into()),
        kind: Some("Widget".into()),
        name: Some(w.name_any()),
        namespace: w.namespace(),
        uid: w.uid(),
        ..Default::default()
    };
    let recorder = Recorder::new(env.client.clone(), reporter());
    recorder
        .publish(&started("provisioning began"), &reference)
        .await
        .expect("publish");
    let warning = Event {
        type_: EventType::Warning,
        reason: "ActionFailed".into(),
        note: Some("action 2 exited with 1".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    recorder
        .publish(&warning, &reference)
        .await
        .expect("publish");
    recorder
        .publish(&warning, &reference)
        .await
        .expect("publish again");

    let (ok, out, err) = env
        .kubectl(&["describe", "widgets.lite.example.com", "described"])
        .await;
    assert!(ok, "kubectl describe failed: {err}{out}");
    let events = out
        .split("Events:")
        .nth(1)
        .unwrap_or_else(|| panic!("no Events section: {out}"));
    assert!(!events.contains("<none>"), "{out}");
    let started_line = events
        .lines()
        .find(|l| l.contains("Started"))
        .unwrap_or_else(|| panic!("no Started event: {out}"));
    assert!(started_line.contains("Normal"), "{started_line}");
    assert!(
        started_line.contains("provisioning began"),
        "{started_line}"
    );
    assert!(started_line.contains("tink-controller"), "{started_line}");
    let failed_line = events
        .lines()
        .find(|l| l.contains("ActionFailed"))
        .unwrap_or_else(|| panic!("no ActionFailed event: {out}"));
    assert!(failed_line.contains("Warning"), "{failed_line}");
    assert!(failed_line.contains("(x2 over"), "{failed_line}");

    // Another object's description does not show them.
    api.create(
        &PostParams::default(),
        &widget("quiet", json!({"size": 2, "color": "green"})),
    )
    .await
    .expect("create widget");
    let (ok, out, err) = env
        .kubectl(&["describe", "widgets.lite.example.com", "quiet"])
        .await;
    assert!(ok, "kubectl describe failed: {err}{out}");
    assert!(!out.contains("provisioning began"), "{out}");

    // `kubectl get events` lists them too, with the events.k8s.io and core field selectors.
    let (ok, out, err) = env
        .kubectl(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=described,reason=ActionFailed",
            "-o",
            "json",
        ])
        .await;
    assert!(ok, "kubectl get events failed: {err}{out}");
    let listed: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(1), "{out}");
    assert_eq!(listed["items"][0]["message"], "action 2 exited with 1");
    let (ok, out, err) = env
        .kubectl(&[
            "get",
            "events.v1.events.k8s.io",
            "--field-selector",
            "regarding.name=described",
            "-o",
            "json",
        ])
        .await;
    assert!(ok, "kubectl get events.k8s.io failed: {err}{out}");
    let listed: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(2), "{out}");
    let (ok, _, err) = env
        .kubectl(&["get", "events", "--field-selector", "spec.bogus=x"])
        .await;
    assert!(!ok, "an unknown field label must fail");
    assert!(err.contains("field label not supported"), "{err}");
    env.cleanup().await;
}

/// kube-apiserver deletes an Event `--event-ttl` after its last write (an hour by default);
/// kube-lite does the same (`Config::event_ttl`), with the DELETED watch event.
#[tokio::test]
async fn events_are_deleted_after_their_ttl() {
    if std::env::var(KUBECONFIG_ENV).is_ok_and(|v| !v.is_empty()) {
        // A real API server's TTL is its own (an hour): nothing to wait for here.
        return;
    }
    let env = Env::with_config(
        "event-ttl",
        kube_lite::Config {
            event_ttl: Some(Duration::from_secs(2)),
            ..Default::default()
        },
    )
    .await;
    let cm = configmap(&env, "ttl").await;
    let recorder = Recorder::new(env.client.clone(), reporter());
    recorder
        .publish(&started("short-lived"), &cm.object_ref(&()))
        .await
        .expect("publish");
    let events: Api<NewEvent> = Api::namespaced(env.client.clone(), &env.ns);
    let list = events.list(&ListParams::default()).await.expect("list");
    assert_eq!(list.items.len(), 1);
    let name = list.items[0].name_any();
    let rv = list.metadata.resource_version.clone().expect("list rv");
    let mut watch = events
        .watch(&WatchParams::default(), &rv)
        .await
        .expect("watch")
        .boxed();
    let deleted = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(e) = watch.try_next().await.expect("watch event") {
            if let WatchEvent::Deleted(ev) = e {
                return ev.name_any();
            }
        }
        panic!("the watch ended without a DELETED event");
    })
    .await
    .expect("the Event is deleted within its TTL and a sweep");
    assert_eq!(deleted, name);
    assert!(events.get_opt(&name).await.expect("get").is_none());
    // The ConfigMap it was about stays.
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
    assert!(cms.get_opt("ttl").await.expect("get").is_some());
}
