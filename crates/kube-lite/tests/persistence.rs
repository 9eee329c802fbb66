//! `--data-dir`: objects, CRDs and the resourceVersion counter survive a restart.

mod common;

use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::json;

#[tokio::test]
async fn objects_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tmp");
    let config = || kube_lite::Config::default().with_data_dir(dir.path().join("data"));
    let server = kube_lite::Server::start(config()).await.expect("start");
    let client = server.client().expect("client");
    ensure_widget_crd(&client).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "kept"}, "data": {"a": "1"}}))
            .expect("cm");
    let kept = cms
        .create(&PostParams::default(), &cm)
        .await
        .expect("create");
    let gone: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "gone"}})).expect("cm");
    cms.create(&PostParams::default(), &gone)
        .await
        .expect("create");
    cms.delete("gone", &DeleteParams::default())
        .await
        .expect("delete");
    widgets(&client, "default", "v1")
        .create(&PostParams::default(), &widget("w", json!({"size": 3})))
        .await
        .expect("widget");
    let rv_before: u64 = cms
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv")
        .parse()
        .expect("rv number");
    server.shutdown().await;

    let server = kube_lite::Server::start(config()).await.expect("restart");
    let client = server.client().expect("client");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let again = cms.get("kept").await.expect("kept survives");
    assert_eq!(again.metadata.uid, kept.metadata.uid);
    assert_eq!(
        again.metadata.resource_version,
        kept.metadata.resource_version
    );
    assert_eq!(code(cms.get("gone").await.unwrap_err()), 404);
    let w = widgets(&client, "default", "v1")
        .get("w")
        .await
        .expect("the CRD and its object survive");
    assert_eq!(w.data["spec"]["size"], json!(3));
    let rv_after: u64 = cms
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv")
        .parse()
        .expect("rv number");
    assert!(
        rv_after >= rv_before,
        "resourceVersion went back from {rv_before} to {rv_after}"
    );
    let next = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "next"}})).expect("cm"),
        )
        .await
        .expect("create");
    let next_rv: u64 = next
        .metadata
        .resource_version
        .expect("rv")
        .parse()
        .expect("rv");
    assert!(next_rv > rv_before);
    server.shutdown().await;
}
