//! Conformance: the semantics our services rely on, through the real `kube` client. Runs against
//! an in-process kube-lite, or against the cluster of `TINK_CONFORMANCE_KUBECONFIG`.

mod common;

use std::collections::BTreeMap;

use common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Namespace, Secret};
use k8s_openapi::api::events::v1::Event as NewEvent;
use kube::Api;
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::{Value, json};

fn cm(name: &str, labels: &[(&str, &str)], data: &[(&str, &str)]) -> ConfigMap {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let data: BTreeMap<String, String> = data
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "data": data}))
        .expect("configmap")
}

#[tokio::test]
async fn discovery_lists_builtins_and_crd_versions() {
    let env = Env::new("disc").await;
    ensure_widget_crd(&env.client).await;
    let discovery = kube::Discovery::new(env.client.clone())
        .run()
        .await
        .expect("discovery");
    let mut kinds = Vec::new();
    for group in discovery.groups() {
        for (ar, _) in group.recommended_resources() {
            kinds.push(format!("{}/{}", ar.api_version, ar.kind));
        }
    }
    for want in [
        "v1/ConfigMap",
        "v1/Secret",
        "v1/Namespace",
        "v1/Event",
        "events.k8s.io/v1/Event",
        "coordination.k8s.io/v1/Lease",
        "apps/v1/Deployment",
        "apiextensions.k8s.io/v1/CustomResourceDefinition",
        "admissionregistration.k8s.io/v1/ValidatingWebhookConfiguration",
        "lite.example.com/v1/Widget",
    ] {
        assert!(
            kinds.iter().any(|k| k == want),
            "{want} missing from {kinds:?}"
        );
    }
    let group = discovery.get("lite.example.com").expect("widget group");
    let versions: Vec<&str> = group.versions().collect();
    assert!(
        versions.contains(&"v1") && versions.contains(&"v1beta1"),
        "{versions:?}"
    );
    assert_eq!(group.preferred_version(), Some("v1"));
    let (_, caps) = kube::discovery::pinned_kind(
        &env.client,
        &kube::api::GroupVersionKind::gvk("lite.example.com", "v1beta1", "Widget"),
    )
    .await
    .expect("v1beta1 served");
    assert!(
        caps.subresources
            .iter()
            .any(|(s, _)| s.plural == "widgets/status" || s.plural == "status"),
        "{:?}",
        caps.subresources
    );
    let v = env.client.apiserver_version().await.expect("/version");
    assert_eq!(v.major, "1");
    env.cleanup().await;
}

#[tokio::test]
async fn configmap_crud_sets_server_fields() {
    let env = Env::new("crud").await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
    let created = api
        .create(&PostParams::default(), &cm("one", &[], &[("a", "1")]))
        .await
        .expect("create");
    let meta = &created.metadata;
    assert!(meta.uid.as_deref().is_some_and(|u| !u.is_empty()));
    assert!(meta.creation_timestamp.is_some());
    let rv1 = meta.resource_version.clone().expect("resourceVersion");
    assert_eq!(
        code(
            api.create(&PostParams::default(), &cm("one", &[], &[]))
                .await
                .unwrap_err()
        ),
        409
    );

    let mut got = api.get("one").await.expect("get");
    assert_eq!(
        got.data
            .as_ref()
            .and_then(|d| d.get("a"))
            .map(String::as_str),
        Some("1")
    );
    got.data = Some([("a".to_string(), "2".to_string())].into());
    let replaced = api
        .replace("one", &PostParams::default(), &got)
        .await
        .expect("replace");
    let rv2 = replaced.metadata.resource_version.clone().expect("rv");
    assert_ne!(rv1, rv2);
    assert_eq!(replaced.metadata.uid, created.metadata.uid);

    let list = api.list(&ListParams::default()).await.expect("list");
    assert_eq!(list.items.len(), 1);
    assert!(list.metadata.resource_version.is_some());

    api.delete("one", &DeleteParams::default())
        .await
        .expect("delete");
    assert_eq!(code(api.get("one").await.unwrap_err()), 404);
    assert_eq!(
        code(
            api.delete("one", &DeleteParams::default())
                .await
                .unwrap_err()
        ),
        404
    );

    // generateName
    let gen_cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"generateName": "gen-"}})).expect("cm");
    let g = api
        .create(&PostParams::default(), &gen_cm)
        .await
        .expect("generateName");
    assert!(
        g.metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("gen-") && n.len() > 4)
    );
    env.cleanup().await;
}

#[tokio::test]
async fn stale_writes_conflict() {
    let env = Env::new("conflict").await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
    let first = api
        .create(&PostParams::default(), &cm("c", &[], &[("k", "v")]))
        .await
        .expect("create");
    let mut second = first.clone();
    second.data = Some([("k".to_string(), "w".to_string())].into());
    api.replace("c", &PostParams::default(), &second)
        .await
        .expect("first update");
    // `first` still carries the old resourceVersion.
    let e = status(
        api.replace("c", &PostParams::default(), &first)
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    let stale_rv = first.metadata.resource_version.clone().expect("rv");
    let p = json!({"metadata": {"resourceVersion": stale_rv}, "data": {"k": "x"}});
    assert_eq!(
        code(
            api.patch("c", &PatchParams::default(), &Patch::Merge(&p))
                .await
                .unwrap_err()
        ),
        409
    );
    // A patch without a resourceVersion applies to the latest.
    let ok = api
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(&json!({"data": {"k": "y"}})),
        )
        .await
        .expect("patch");
    assert_eq!(
        ok.data.and_then(|d| d.get("k").cloned()).as_deref(),
        Some("y")
    );
    env.cleanup().await;
}

#[tokio::test]
async fn merge_json_and_apply_patches() {
    let env = Env::new("patch").await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
    api.create(
        &PostParams::default(),
        &cm("p", &[("app", "a")], &[("x", "1"), ("y", "2")]),
    )
    .await
    .expect("create");
    let merged = api
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"data": {"x": null, "z": "3"}, "metadata": {"labels": {"tier": "t"}}}),
            ),
        )
        .await
        .expect("merge patch");
    let data = merged.data.clone().unwrap_or_default();
    assert_eq!(data.keys().collect::<Vec<_>>(), vec!["y", "z"]);
    assert_eq!(merged.metadata.labels.as_ref().map(|l| l.len()), Some(2));

    let jp: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/y", "value": "2"},
        {"op": "replace", "path": "/data/y", "value": "22"},
        {"op": "add", "path": "/data/w", "value": "4"}
    ]))
    .expect("json patch");
    let patched = api
        .patch("p", &PatchParams::default(), &Patch::<()>::Json(jp))
        .await
        .expect("json patch");
    assert_eq!(
        patched
            .data
            .as_ref()
            .and_then(|d| d.get("y"))
            .map(String::as_str),
        Some("22")
    );
    let failing: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/data/y", "value": "nope"}]))
            .expect("patch");
    assert_eq!(
        code(
            api.patch("p", &PatchParams::default(), &Patch::<()>::Json(failing))
                .await
                .unwrap_err()
        ),
        422
    );

    // Server-side apply creates, then updates the fields it names.
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"a": "1"}});
    let ssa = api
        .patch(
            "ssa",
            &PatchParams::apply("conformance"),
            &Patch::Apply(&applied),
        )
        .await
        .expect("apply create");
    assert_eq!(
        ssa.data
            .as_ref()
            .and_then(|d| d.get("a"))
            .map(String::as_str),
        Some("1")
    );
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"a": "2"}});
    let ssa = api
        .patch(
            "ssa",
            &PatchParams::apply("conformance"),
            &Patch::Apply(&applied),
        )
        .await
        .expect("apply update");
    assert_eq!(
        ssa.data
            .as_ref()
            .and_then(|d| d.get("a"))
            .map(String::as_str),
        Some("2")
    );
    assert!(ssa.metadata.managed_fields.as_ref().is_some_and(|m| {
        m.iter()
            .any(|f| f.manager.as_deref() == Some("conformance"))
    }));
    // A field the manager stops applying is removed; fields of another applier stay.
    let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"o": "x"}});
    api.patch("ssa", &PatchParams::apply("other"), &Patch::Apply(&other))
        .await
        .expect("second manager");
    let two = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"a": "2", "b": "1"}});
    api.patch(
        "ssa",
        &PatchParams::apply("conformance"),
        &Patch::Apply(&two),
    )
    .await
    .expect("apply a and b");
    let one = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"a": "3"}});
    let ssa = api
        .patch(
            "ssa",
            &PatchParams::apply("conformance"),
            &Patch::Apply(&one),
        )
        .await
        .expect("apply a only");
    let keys: Vec<String> = ssa.data.unwrap_or_default().into_keys().collect();
    assert_eq!(keys, vec!["a", "o"]);
    env.cleanup().await;
}

#[tokio::test]
async fn generation_follows_spec_and_status_is_a_subresource() {
    let env = Env::new("gen").await;
    ensure_widget_crd(&env.client).await;
    let api = widgets(&env.client, &env.ns, "v1");
    let mut w = widget("g", json!({"size": 1}));
    w.data["status"] = json!({"phase": "Sneaky"});
    let created = api
        .create(&PostParams::default(), &w)
        .await
        .expect("create");
    assert_eq!(created.metadata.generation, Some(1));
    assert!(
        created.data.get("status").is_none(),
        "status is ignored on create: {:?}",
        created.data
    );
    assert_eq!(
        created.data["spec"]["mode"],
        json!("auto"),
        "schema default applied"
    );

    let labelled = api
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .expect("label");
    assert_eq!(
        labelled.metadata.generation,
        Some(1),
        "metadata changes keep the generation"
    );

    let st = api
        .patch_status(
            "g",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"phase": "Ready"}, "spec": {"size": 50}})),
        )
        .await
        .expect("status patch");
    assert_eq!(st.data["status"]["phase"], json!("Ready"));
    assert_eq!(
        st.data["spec"]["size"],
        json!(1),
        "status writes ignore spec"
    );
    assert_eq!(
        st.metadata.generation,
        Some(1),
        "status changes keep the generation"
    );

    let spec = api
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"size": 2}, "status": {"phase": "Hacked"}})),
        )
        .await
        .expect("spec patch");
    assert_eq!(spec.metadata.generation, Some(2));
    assert_eq!(
        spec.data["status"]["phase"],
        json!("Ready"),
        "main resource writes ignore status"
    );

    // A PUT that changes nothing keeps the resourceVersion.
    let again = api
        .replace("g", &PostParams::default(), &spec)
        .await
        .expect("no-op replace");
    assert_eq!(
        again.metadata.resource_version,
        spec.metadata.resource_version
    );
    env.cleanup().await;
}

#[tokio::test]
async fn finalizers_hold_deletion() {
    let env = Env::new("fin").await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
    let mut c = cm("f", &[], &[]);
    c.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&PostParams::default(), &c)
        .await
        .expect("create");
    let res = api
        .delete("f", &DeleteParams::default())
        .await
        .expect("delete");
    let held = res
        .left()
        .expect("object still present while finalizers remain");
    assert!(held.metadata.deletion_timestamp.is_some());
    let still = api.get("f").await.expect("still there");
    assert!(still.metadata.deletion_timestamp.is_some());

    let add = json!({"metadata": {"finalizers": ["example.com/hold", "example.com/another"]}});
    let e = status(
        api.patch("f", &PatchParams::default(), &Patch::Merge(&add))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422, "{e:?}");
    assert!(e.message.contains("no new finalizers"), "{}", e.message);

    api.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("remove finalizer");
    eventually("the object to go", || {
        let api = api.clone();
        async move {
            matches!(api.get("f").await, Err(kube::Error::Api(s)) if s.code == 404).then_some(())
        }
    })
    .await;
    env.cleanup().await;
}

#[tokio::test]
async fn owner_references_are_garbage_collected() {
    let env = Env::new("gc").await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
    let owner = api
        .create(&PostParams::default(), &cm("owner", &[], &[]))
        .await
        .expect("owner");
    let owner_ref = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}]);
    for name in ["dep1", "dep2"] {
        let d: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": name, "ownerReferences": owner_ref}}),
        )
        .expect("dep");
        api.create(&PostParams::default(), &d)
            .await
            .expect("dependent");
    }
    let orphan_owner = api
        .create(&PostParams::default(), &cm("owner2", &[], &[]))
        .await
        .expect("owner2");
    let d: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "orphan", "ownerReferences": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner2", "uid": orphan_owner.metadata.uid}]}}))
    .expect("dep");
    api.create(&PostParams::default(), &d)
        .await
        .expect("orphan dependent");

    api.delete("owner", &DeleteParams::background())
        .await
        .expect("delete owner");
    for name in ["dep1", "dep2"] {
        eventually("dependents to be collected", || {
            let api = api.clone();
            async move {
                matches!(api.get(name).await, Err(kube::Error::Api(s)) if s.code == 404)
                    .then_some(())
            }
        })
        .await;
    }
    api.delete("owner2", &DeleteParams::orphan())
        .await
        .expect("delete owner2 orphaning");
    let orphan = eventually("the orphan to lose its owner reference", || {
        let api = api.clone();
        async move {
            let o = api.get("orphan").await.ok()?;
            o.metadata
                .owner_references
                .as_ref()
                .is_none_or(|r| r.is_empty())
                .then_some(o)
        }
    })
    .await;
    assert!(orphan.metadata.deletion_timestamp.is_none());
    env.cleanup().await;
}

#[tokio::test]
async fn label_and_field_selectors() {
    let env = Env::new("sel").await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
    for (name, labels) in [
        ("a", vec![("app", "web"), ("tier", "front")]),
        ("b", vec![("app", "web"), ("tier", "back")]),
        ("c", vec![("app", "db")]),
        ("d", vec![]),
    ] {
        api.create(&PostParams::default(), &cm(name, &labels, &[]))
            .await
            .expect("create");
    }
    let names = |lp: ListParams| {
        let api = api.clone();
        async move {
            let mut n: Vec<String> = api
                .list(&lp)
                .await
                .expect("list")
                .items
                .into_iter()
                .filter_map(|c| c.metadata.name)
                .collect();
            n.sort();
            n.join(",")
        }
    };
    let cases = [
        ("app=web", "a,b"),
        ("app==web", "a,b"),
        ("app!=web", "c,d"),
        ("tier in (front,back)", "a,b"),
        ("tier notin (front)", "b,c,d"),
        ("tier", "a,b"),
        ("!tier", "c,d"),
        ("app=web,tier=back", "b"),
    ];
    for (sel, want) in cases {
        assert_eq!(
            names(ListParams::default().labels(sel)).await,
            want,
            "{sel}"
        );
    }
    assert_eq!(
        names(ListParams::default().fields("metadata.name=c")).await,
        "c"
    );
    assert_eq!(
        names(
            ListParams::default()
                .fields("metadata.name!=c")
                .labels("app")
        )
        .await,
        "a,b"
    );
    assert_eq!(
        names(
            ListParams::default()
                .fields(&format!("metadata.namespace={}", env.ns))
                .labels("app=db")
        )
        .await,
        "c"
    );
    let all: Api<ConfigMap> = Api::all(env.client.clone());
    let across = all
        .list(&ListParams::default().fields(&format!("metadata.namespace={}", env.ns)))
        .await
        .expect("all namespaces");
    assert_eq!(across.items.len(), 4);
    assert_eq!(
        code(
            api.list(&ListParams::default().labels("app in web"))
                .await
                .unwrap_err()
        ),
        400
    );
    env.cleanup().await;
}

#[tokio::test]
async fn pagination_with_limit_and_continue() {
    let env = Env::new("page").await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
    for i in 0..7 {
        api.create(
            &PostParams::default(),
            &cm(&format!("p{i}"), &[("page", "yes")], &[]),
        )
        .await
        .expect("create");
    }
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut lp = ListParams::default().labels("page=yes").limit(3);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = api.list(&lp).await.expect("page");
        pages += 1;
        assert!(page.items.len() <= 3);
        seen.extend(page.items.into_iter().filter_map(|c| c.metadata.name));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    seen.sort();
    assert_eq!(seen, (0..7).map(|i| format!("p{i}")).collect::<Vec<_>>());
    env.cleanup().await;
}

#[tokio::test]
async fn watch_from_resource_version_sees_every_change() {
    let env = Env::new("watch").await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
    let list = api.list(&ListParams::default()).await.expect("list");
    let rv = list.metadata.resource_version.expect("list rv");
    api.create(&PostParams::default(), &cm("w", &[("watch", "me")], &[]))
        .await
        .expect("create");
    api.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(&json!({"data": {"a": "b"}})),
    )
    .await
    .expect("patch");
    api.create(&PostParams::default(), &cm("other", &[], &[]))
        .await
        .expect("unselected create");
    api.delete("w", &DeleteParams::default())
        .await
        .expect("delete");
    let stream = api
        .watch(&WatchParams::default().labels("watch=me"), &rv)
        .await
        .expect("watch");
    let mut stream = Box::pin(stream);
    let mut got = Vec::new();
    while got.len() < 3 {
        match stream
            .try_next()
            .await
            .expect("watch stream")
            .expect("event")
        {
            WatchEvent::Added(c) => {
                got.push(format!("ADDED {}", c.metadata.name.unwrap_or_default()))
            }
            WatchEvent::Modified(c) => {
                got.push(format!("MODIFIED {}", c.metadata.name.unwrap_or_default()))
            }
            WatchEvent::Deleted(c) => {
                got.push(format!("DELETED {}", c.metadata.name.unwrap_or_default()))
            }
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("watch error {e:?}"),
        }
    }
    assert_eq!(got, vec!["ADDED w", "MODIFIED w", "DELETED w"]);
    // The per-object watch path.
    let path = format!(
        "/api/v1/namespaces/{}/configmaps/other?watch=true&resourceVersion={rv}",
        env.ns
    );
    let req = http::Request::get(path).body(vec![]).expect("request");
    let mut events = Box::pin(
        env.client
            .request_events::<ConfigMap>(req)
            .await
            .expect("watch one object"),
    );
    match events.try_next().await.expect("stream").expect("event") {
        WatchEvent::Added(c) => assert_eq!(c.metadata.name.as_deref(), Some("other")),
        other => panic!("unexpected {other:?}"),
    }
    env.cleanup().await;
}

#[tokio::test]
async fn watch_sends_bookmarks() {
    let env = Env::new("bookmark").await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
    let rv = api
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    let stream = api
        .watch(&WatchParams::default().timeout(290), &rv)
        .await
        .expect("watch");
    let mut stream = Box::pin(stream);
    // A real API server sends a bookmark about once a minute; kube-lite is configured faster.
    let bookmark = tokio::time::timeout(std::time::Duration::from_secs(120), async {
        loop {
            if let WatchEvent::Bookmark(b) =
                stream.try_next().await.expect("stream").expect("event")
            {
                return b;
            }
        }
    })
    .await
    .expect("a bookmark");
    assert!(!bookmark.metadata.resource_version.is_empty());
    env.cleanup().await;
}

#[tokio::test]
async fn watch_from_a_too_old_resource_version_is_gone() {
    let env = Env::new("gone").await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
    api.create(&PostParams::default(), &cm("churn", &[], &[]))
        .await
        .expect("create");
    // Push the first resourceVersions out of kube-lite's history (200 events in this suite); a
    // real cluster has long compacted resourceVersion 1.
    for i in 0..210 {
        api.patch(
            "churn",
            &PatchParams::default(),
            &Patch::Merge(&json!({"data": {"i": i.to_string()}})),
        )
        .await
        .expect("patch");
    }
    let stream = api.watch(&WatchParams::default(), "1").await;
    let code = match stream {
        Err(e) => code(e),
        Ok(s) => {
            let mut s = Box::pin(s);
            match s.try_next().await {
                Ok(Some(WatchEvent::Error(e))) => e.code,
                Err(kube::Error::Api(s)) => s.code,
                other => panic!("expected a 410 error event, got {other:?}"),
            }
        }
    };
    assert_eq!(code, 410);
    env.cleanup().await;
}

#[tokio::test]
async fn dry_run_persists_nothing() {
    let env = Env::new("dry").await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let out = api
        .create(&dry, &cm("dry", &[], &[("a", "1")]))
        .await
        .expect("dry-run create");
    assert_eq!(out.metadata.name.as_deref(), Some("dry"));
    assert_eq!(code(api.get("dry").await.unwrap_err()), 404);
    api.create(&PostParams::default(), &cm("real", &[], &[("a", "1")]))
        .await
        .expect("create");
    let pp = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let patched = api
        .patch("real", &pp, &Patch::Merge(&json!({"data": {"a": "2"}})))
        .await
        .expect("dry-run patch");
    assert_eq!(
        patched.data.and_then(|d| d.get("a").cloned()).as_deref(),
        Some("2")
    );
    assert_eq!(
        api.get("real")
            .await
            .expect("get")
            .data
            .and_then(|d| d.get("a").cloned())
            .as_deref(),
        Some("1")
    );
    let dp = DeleteParams {
        dry_run: true,
        ..Default::default()
    };
    api.delete("real", &dp).await.expect("dry-run delete");
    api.get("real").await.expect("still there");
    env.cleanup().await;
}

#[tokio::test]
async fn crd_schema_and_cel_validation() {
    let env = Env::new("valid").await;
    ensure_widget_crd(&env.client).await;
    let api = widgets(&env.client, &env.ns, "v1");
    let cases = [
        (json!({}), "spec.size", "Required value"),
        (
            json!({"size": 0}),
            "spec.size",
            "should be greater than or equal to 1",
        ),
        (
            json!({"size": 5000}),
            "spec.size",
            "should be less than or equal to 1000",
        ),
        (
            json!({"size": "big"}),
            "spec.size",
            "must be of type integer",
        ),
        (
            json!({"size": 1, "color": "pink"}),
            "spec.color",
            "Unsupported value: \"pink\"",
        ),
        (
            json!({"size": 1, "owner": "Bob"}),
            "spec.owner",
            "should match '^[a-z]+$'",
        ),
        (
            json!({"size": 1, "tags": ["a", "b", "c", "d"]}),
            "spec.tags",
            "must have at most 3 items",
        ),
        (
            json!({"size": 500, "color": "blue"}),
            "spec",
            "only red widgets may be larger than 100",
        ),
    ];
    for (i, (spec, field, msg)) in cases.into_iter().enumerate() {
        let e = status(
            api.create(
                &PostParams::default(),
                &widget(&format!("bad{i}"), spec.clone()),
            )
            .await
            .unwrap_err(),
        );
        assert_eq!(
            (e.code, e.reason.as_str()),
            (422, "Invalid"),
            "{spec}: {e:?}"
        );
        assert!(e.message.contains(msg), "{spec}: {}", e.message);
        let causes = e
            .details
            .as_ref()
            .map(|d| d.causes.clone())
            .unwrap_or_default();
        assert!(
            causes.iter().any(|c| c.field == field),
            "{spec}: causes {causes:?}"
        );
    }
    // Transition rule (oldSelf).
    api.create(
        &PostParams::default(),
        &widget(
            "t",
            json!({"size": 500, "color": "red", "immutableId": "x"}),
        ),
    )
    .await
    .expect("valid");
    let e = status(
        api.patch(
            "t",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"immutableId": "y"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert!(
        e.message.contains("immutableId is immutable"),
        "{}",
        e.message
    );
    api.patch(
        "t",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"size": 7}})),
    )
    .await
    .expect("other fields change");
    // Unknown fields are pruned (or refused with fieldValidation=Strict).
    let w = api
        .create(
            &PostParams::default(),
            &widget(
                "prune",
                json!({"size": 1, "unknown": true, "extra": {"kept": 1}}),
            ),
        )
        .await
        .expect("prune");
    assert!(w.data["spec"].get("unknown").is_none());
    assert_eq!(w.data["spec"]["extra"]["kept"], json!(1));
    env.cleanup().await;
}

#[tokio::test]
async fn crd_versions_convert_without_webhook() {
    let env = Env::new("vers").await;
    ensure_widget_crd(&env.client).await;
    let v1beta1 = widgets(&env.client, &env.ns, "v1beta1");
    let mut w = widget("vv", json!({"size": 3}));
    w.types = Some(kube::api::TypeMeta {
        api_version: "lite.example.com/v1beta1".into(),
        kind: "Widget".into(),
    });
    let created = v1beta1
        .create(&PostParams::default(), &w)
        .await
        .expect("create as v1beta1");
    assert_eq!(
        created.types.as_ref().map(|t| t.api_version.as_str()),
        Some("lite.example.com/v1beta1")
    );
    let v1 = widgets(&env.client, &env.ns, "v1");
    let got = v1.get("vv").await.expect("get as v1");
    assert_eq!(
        got.types.as_ref().map(|t| t.api_version.as_str()),
        Some("lite.example.com/v1")
    );
    assert_eq!(got.data["spec"]["size"], json!(3));
    env.cleanup().await;
}

#[tokio::test]
async fn core_types_the_project_uses() {
    let env = Env::new("types").await;
    let c = env.client.clone();
    let secrets: Api<Secret> = Api::namespaced(c.clone(), &env.ns);
    let s: Secret = serde_json::from_value(
        json!({"metadata": {"name": "s"}, "stringData": {"value": "hello"}}),
    )
    .expect("secret");
    let s = secrets
        .create(&PostParams::default(), &s)
        .await
        .expect("secret");
    assert_eq!(
        s.data.and_then(|d| d.get("value").map(|b| b.0.clone())),
        Some(b"hello".to_vec())
    );

    let leases: Api<Lease> = Api::namespaced(c.clone(), &env.ns);
    let l: Lease = serde_json::from_value(json!({"metadata": {"name": "leader"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}})).expect("lease");
    let l = leases
        .create(&PostParams::default(), &l)
        .await
        .expect("lease");
    let mut l2 = l.clone();
    l2.spec.as_mut().expect("spec").holder_identity = Some("b".into());
    leases
        .replace("leader", &PostParams::default(), &l2)
        .await
        .expect("take over");
    assert_eq!(
        code(
            leases
                .replace("leader", &PostParams::default(), &l)
                .await
                .unwrap_err()
        ),
        409
    );

    let deployments: Api<Deployment> = Api::namespaced(c.clone(), &env.ns);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
    }))
    .expect("deployment");
    let d = deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("deployment");
    assert_eq!(d.metadata.generation, Some(1));
    let d = deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 3}})),
        )
        .await
        .expect("scale");
    assert_eq!(d.metadata.generation, Some(2));

    let events: Api<CoreEvent> = Api::namespaced(c.clone(), &env.ns);
    let e: CoreEvent = serde_json::from_value(
        json!({"metadata": {"name": "e1"}, "involvedObject": {"kind": "ConfigMap", "name": "x"},
        "reason": "Test", "message": "hello", "type": "Normal"}),
    )
    .expect("event");
    events
        .create(&PostParams::default(), &e)
        .await
        .expect("core event");
    let new_events: Api<NewEvent> = Api::namespaced(c.clone(), &env.ns);
    let e: NewEvent = serde_json::from_value(json!({"metadata": {"name": "e2"}, "eventTime": "2024-01-01T00:00:00.000000Z",
        "reportingController": "tink.example/test", "reportingInstance": "i", "action": "Test", "reason": "Test", "type": "Normal",
        "regarding": {"kind": "ConfigMap", "name": "x"}})).expect("event");
    new_events
        .create(&PostParams::default(), &e)
        .await
        .expect("events.k8s.io event");

    let nss: Api<Namespace> = Api::all(c.clone());
    let ns = nss.get(&env.ns).await.expect("namespace");
    assert_eq!(ns.status.and_then(|s| s.phase).as_deref(), Some("Active"));
    let missing: Api<ConfigMap> = Api::namespaced(c.clone(), "does-not-exist-anywhere");
    assert_eq!(
        code(
            missing
                .create(&PostParams::default(), &cm("x", &[], &[]))
                .await
                .unwrap_err()
        ),
        404
    );
    env.cleanup().await;
}

#[tokio::test]
async fn namespace_deletion_removes_its_objects() {
    let env = Env::new("nsdel").await;
    let nss: Api<Namespace> = Api::all(env.client.clone());
    let ns = unique("doomed");
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns"),
    )
    .await
    .expect("ns");
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &ns);
    api.create(&PostParams::default(), &cm("inside", &[], &[]))
        .await
        .expect("create");
    nss.delete(&ns, &DeleteParams::default())
        .await
        .expect("delete namespace");
    eventually("the namespace to go", || {
        let nss = nss.clone();
        let ns = ns.clone();
        async move {
            matches!(nss.get(&ns).await, Err(kube::Error::Api(s)) if s.code == 404).then_some(())
        }
    })
    .await;
    assert_eq!(code(api.get("inside").await.unwrap_err()), 404);
    env.cleanup().await;
}

#[tokio::test]
async fn raw_bad_requests_get_status_errors() {
    let env = Env::new("bad").await;
    let base = format!("/api/v1/namespaces/{}/configmaps", env.ns);
    let send = |method: &str, path: &str, ct: Option<&str>, body: &[u8]| {
        let mut b = http::Request::builder().method(method).uri(path);
        if let Some(ct) = ct {
            b = b.header("content-type", ct);
        }
        let req = b.body(body.to_vec()).expect("request");
        let client = env.client.clone();
        async move {
            match client.request_text(req).await {
                Ok(t) => panic!("expected an error, got {t}"),
                Err(kube::Error::Api(s)) => s.code,
                Err(other) => panic!("expected a Status, got {other:?}"),
            }
        }
    };
    assert_eq!(
        send("POST", &base, Some("application/json"), b"{not json").await,
        400
    );
    assert_eq!(
        send("POST", &base, Some("application/json"), b"[1,2]").await,
        400
    );
    assert_eq!(send("POST", &base, Some("text/plain"), b"hello").await, 415);
    assert_eq!(send("GET", "/api/v1/nonsense", None, b"").await, 404);
    assert_eq!(
        send(
            "GET",
            &format!("{base}?labelSelector=a%20in%20b"),
            None,
            b""
        )
        .await,
        400
    );
    let kind_mismatch =
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}).to_string();
    assert_eq!(
        send(
            "POST",
            &base,
            Some("application/json"),
            kind_mismatch.as_bytes()
        )
        .await,
        400
    );
    let bad_name =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name"}})
            .to_string();
    assert_eq!(
        send("POST", &base, Some("application/json"), bad_name.as_bytes()).await,
        422
    );
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
    api.create(&PostParams::default(), &cm("target", &[], &[]))
        .await
        .expect("create");
    assert_eq!(
        send(
            "PATCH",
            &format!("{base}/target"),
            Some("application/merge-patch+json"),
            b"{oops"
        )
        .await,
        400
    );
    assert_eq!(
        send(
            "PATCH",
            &format!("{base}/target"),
            Some("application/xml"),
            b"<a/>"
        )
        .await,
        415
    );
    assert_eq!(
        send(
            "PATCH",
            &format!("{base}/target"),
            Some("application/json-patch+json"),
            b"{\"op\":1}"
        )
        .await,
        400
    );
    let value: Value = serde_json::from_str(
        &env.client
            .request_text(
                http::Request::get(format!("{base}/target"))
                    .body(vec![])
                    .expect("req"),
            )
            .await
            .expect("get"),
    )
    .expect("json");
    assert_eq!(value["metadata"]["name"], json!("target"));
    env.cleanup().await;
}

#[tokio::test]
async fn kube_runtime_watcher_and_reflector() {
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    let env = Env::new("rt").await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
    api.create(&PostParams::default(), &cm("pre", &[("rt", "x")], &[]))
        .await
        .expect("create");
    let (reader, writer) = reflector::store::<ConfigMap>();
    let stream = reflector::reflector(
        writer,
        watcher(api.clone(), watcher::Config::default().labels("rt=x")),
    )
    .applied_objects()
    .boxed();
    let mut stream = stream;
    let first = stream.try_next().await.expect("stream").expect("event");
    assert_eq!(first.metadata.name.as_deref(), Some("pre"));
    api.create(&PostParams::default(), &cm("post", &[("rt", "x")], &[]))
        .await
        .expect("create");
    let second = stream.try_next().await.expect("stream").expect("event");
    assert_eq!(second.metadata.name.as_deref(), Some("post"));
    // The reflector's store follows as long as the stream is polled.
    let drive = tokio::spawn(stream.for_each(|_| async {}));
    api.delete("pre", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("the reflector to drop the deleted object", || {
        let reader = reader.clone();
        async move { (reader.state().len() == 1).then_some(()) }
    })
    .await;
    drive.abort();
    // Streaming list (sendInitialEvents) as newer kube-runtime can use.
    let streaming = watcher::Config::default().labels("rt=x").streaming_lists();
    let mut s = watcher(api.clone(), streaming).boxed();
    let mut saw_init_done = false;
    let mut initial = Vec::new();
    while !saw_init_done {
        match s.try_next().await.expect("stream").expect("event") {
            watcher::Event::InitApply(o) => initial.push(o.metadata.name.unwrap_or_default()),
            watcher::Event::InitDone => saw_init_done = true,
            _ => {}
        }
    }
    assert_eq!(initial, vec!["post".to_string()]);
    env.cleanup().await;
}

#[tokio::test]
async fn kube_runtime_controller_reconciles_status() {
    use kube::runtime::controller::{Action, Controller};
    use std::sync::Arc;
    let env = Env::new("ctrl").await;
    ensure_widget_crd(&env.client).await;
    let api = widgets(&env.client, &env.ns, "v1");
    let gvk = kube::api::GroupVersionKind::gvk("lite.example.com", "v1", "Widget");
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, "widgets");
    api.create(&PostParams::default(), &widget("c1", json!({"size": 4})))
        .await
        .expect("create");

    #[derive(Debug, thiserror::Error)]
    #[error(transparent)]
    struct E(#[from] kube::Error);
    let ctx = Arc::new(api.clone());
    let controller = Controller::new_with(
        api.clone(),
        kube::runtime::watcher::Config::default(),
        ar,
    )
    .run(
        |w: Arc<kube::api::DynamicObject>, api: Arc<Api<kube::api::DynamicObject>>| async move {
            let name = w.metadata.name.clone().unwrap_or_default();
            let gen_ = w.metadata.generation.unwrap_or(0);
            let patch = json!({"status": {"phase": "Reconciled", "observedGeneration": gen_}});
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            Ok::<_, E>(Action::await_change())
        },
        |_, _, _| Action::requeue(std::time::Duration::from_secs(1)),
        ctx,
    )
    .for_each(|_| async {});
    let handle = tokio::spawn(controller);
    eventually("the controller to write status", || {
        let api = api.clone();
        async move {
            let w = api.get("c1").await.ok()?;
            (w.data["status"]["observedGeneration"] == json!(1)).then_some(())
        }
    })
    .await;
    api.patch(
        "c1",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"size": 9}})),
    )
    .await
    .expect("spec change");
    eventually("the controller to see generation 2", || {
        let api = api.clone();
        async move {
            let w = api.get("c1").await.ok()?;
            (w.data["status"]["observedGeneration"] == json!(2)).then_some(())
        }
    })
    .await;
    handle.abort();
    env.cleanup().await;
}

#[tokio::test]
async fn kube_runtime_finalizer_helper_adds_and_removes_its_finalizer() {
    use kube::runtime::controller::{Action, Controller};
    use kube::runtime::finalizer::{Event as Finalizer, finalizer};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let env = Env::new("finrt").await;
    ensure_widget_crd(&env.client).await;
    let api = widgets(&env.client, &env.ns, "v1");
    let gvk = kube::api::GroupVersionKind::gvk("lite.example.com", "v1", "Widget");
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, "widgets");
    api.create(&PostParams::default(), &widget("f1", json!({"size": 2})))
        .await
        .expect("create");
    let cleanups = Arc::new(AtomicUsize::new(0));

    #[derive(Debug, thiserror::Error)]
    #[error(transparent)]
    struct E(#[from] Box<kube::runtime::finalizer::Error<kube::Error>>);
    let ctx = Arc::new((api.clone(), cleanups.clone()));
    let controller =
        Controller::new_with(api.clone(), kube::runtime::watcher::Config::default(), ar)
            .run(
                |w: Arc<kube::api::DynamicObject>,
                 ctx: Arc<(Api<kube::api::DynamicObject>, Arc<AtomicUsize>)>| async move {
                    let (api, cleanups) = (&ctx.0, ctx.1.clone());
                    finalizer(api, "lite.example.com/cleanup", w, |event| async move {
                        match event {
                            Finalizer::Apply(_) => Ok::<_, kube::Error>(Action::await_change()),
                            Finalizer::Cleanup(_) => {
                                cleanups.fetch_add(1, Ordering::SeqCst);
                                Ok(Action::await_change())
                            }
                        }
                    })
                    .await
                    .map_err(|e| E(Box::new(e)))
                },
                |_, _, _| Action::requeue(std::time::Duration::from_millis(200)),
                ctx,
            )
            .for_each(|_| async {});
    let handle = tokio::spawn(controller);
    eventually("the finalizer to be added", || {
        let api = api.clone();
        async move {
            let w = api.get("f1").await.ok()?;
            w.metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| f.iter().any(|x| x == "lite.example.com/cleanup"))
                .then_some(())
        }
    })
    .await;
    api.delete("f1", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("cleanup to run and the object to go", || {
        let api = api.clone();
        async move {
            matches!(api.get("f1").await, Err(kube::Error::Api(s)) if s.code == 404).then_some(())
        }
    })
    .await;
    assert_eq!(cleanups.load(Ordering::SeqCst), 1);
    handle.abort();
    env.cleanup().await;
}

#[tokio::test]
async fn kube_runtime_event_recorder_publishes_series() {
    use kube::Resource;
    use kube::runtime::events::{Event as RtEvent, EventType, Recorder, Reporter};
    let env = Env::new("events").await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
    let obj = api
        .create(&PostParams::default(), &cm("subject", &[], &[]))
        .await
        .expect("create");
    let recorder = Recorder::new(
        env.client.clone(),
        Reporter {
            controller: "tink-conformance".into(),
            instance: Some("one".into()),
        },
    );
    let ev = RtEvent {
        type_: EventType::Normal,
        reason: "Tested".into(),
        note: Some("hello".into()),
        action: "Test".into(),
        secondary: None,
    };
    let reference = obj.object_ref(&());
    recorder
        .publish(&ev, &reference)
        .await
        .expect("first publish");
    recorder
        .publish(&ev, &reference)
        .await
        .expect("second publish (series)");
    let events: Api<NewEvent> = Api::namespaced(env.client.clone(), &env.ns);
    let list = events
        .list(&ListParams::default())
        .await
        .expect("list events");
    assert_eq!(list.items.len(), 1, "{:?}", list.items);
    let e = &list.items[0];
    assert_eq!(e.reason.as_deref(), Some("Tested"));
    assert_eq!(e.series.as_ref().map(|s| s.count), Some(2));
    assert_eq!(
        e.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("subject")
    );
    env.cleanup().await;
}
