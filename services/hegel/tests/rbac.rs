//! deploy/rbac loaded into kube-lite and asked with SubjectAccessReviews (kube-lite evaluates
//! RBAC as kube-apiserver does): Secrets are readable only where they are meant. Hegel may read
//! Secrets in tink-system (the controller's copies of agent secrets) and nowhere else; the
//! controller may read a Hardware's Secret in any namespace (it checks its type) but write
//! Secrets only in tink-system.

use std::path::PathBuf;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::Api;
use kube::api::PostParams;
use serde::Deserialize as _;
use serde_json::{Value, json};

fn deploy_rbac() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/rbac")
}

/// Every document of the files deploy/rbac/kustomization.yaml lists.
fn documents() -> Vec<Value> {
    let dir = deploy_rbac();
    let kustomization: Value = serde_yaml::from_str(
        &std::fs::read_to_string(dir.join("kustomization.yaml")).expect("kustomization"),
    )
    .expect("kustomization YAML");
    let mut docs = Vec::new();
    for file in kustomization["resources"].as_array().expect("resources") {
        let text = std::fs::read_to_string(dir.join(file.as_str().expect("file name")))
            .expect("deploy/rbac file");
        for d in serde_yaml::Deserializer::from_str(&text) {
            let v = Value::deserialize(d).expect("YAML document");
            if !v.is_null() {
                docs.push(v);
            }
        }
    }
    docs
}

async fn load(client: &kube::Client) {
    let pp = PostParams::default();
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "tink-system"}})).expect("namespace");
    Api::<Namespace>::all(client.clone())
        .create(&pp, &ns)
        .await
        .expect("namespace");
    let mut kinds = Vec::new();
    for d in documents() {
        let kind = d["kind"].as_str().unwrap_or_default().to_string();
        let ns = d["metadata"]["namespace"].as_str().unwrap_or("tink-system");
        let r = match kind.as_str() {
            "ServiceAccount" => Api::<ServiceAccount>::namespaced(client.clone(), ns)
                .create(&pp, &serde_json::from_value(d).expect("ServiceAccount"))
                .await
                .map(drop),
            "Role" => Api::<Role>::namespaced(client.clone(), ns)
                .create(&pp, &serde_json::from_value(d).expect("Role"))
                .await
                .map(drop),
            "RoleBinding" => Api::<RoleBinding>::namespaced(client.clone(), ns)
                .create(&pp, &serde_json::from_value(d).expect("RoleBinding"))
                .await
                .map(drop),
            "ClusterRole" => Api::<ClusterRole>::all(client.clone())
                .create(&pp, &serde_json::from_value(d).expect("ClusterRole"))
                .await
                .map(drop),
            "ClusterRoleBinding" => Api::<ClusterRoleBinding>::all(client.clone())
                .create(&pp, &serde_json::from_value(d).expect("ClusterRoleBinding"))
                .await
                .map(drop),
            other => panic!("unexpected kind {other} in deploy/rbac"),
        };
        r.unwrap_or_else(|e| panic!("{kind} refused by kube-lite: {e}"));
        kinds.push(kind);
    }
    assert!(kinds.iter().any(|k| k == "RoleBinding"), "{kinds:?}");
}

/// Whether ServiceAccount tink-system/`sa` may `verb` `resource` (group `group`) in `namespace`
/// (all namespaces when empty).
async fn may(
    client: &kube::Client,
    sa: &str,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: &str,
) -> bool {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!("system:serviceaccount:tink-system:{sa}")),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                "system:serviceaccounts:tink-system".into(),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                group: Some(group.into()),
                resource: Some(resource.into()),
                verb: Some(verb.into()),
                namespace: (!namespace.is_empty()).then(|| namespace.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("SubjectAccessReview answered")
        .status
        .expect("status")
        .allowed
}

#[tokio::test]
async fn secrets_are_readable_only_where_they_are_meant() {
    let server = kube_lite::Server::start(kube_lite::Config::default())
        .await
        .expect("kube-lite");
    let client = server.client().expect("client");
    load(&client).await;
    let c = &client;

    // Hegel: the copies in tink-system, watched; no Secret anywhere else.
    for verb in ["get", "list", "watch"] {
        assert!(
            may(c, "hegel", verb, "", "secrets", "tink-system").await,
            "hegel may {verb} secrets in tink-system"
        );
    }
    for ns in ["default", "machines", "kube-system"] {
        for verb in ["get", "list", "watch"] {
            assert!(
                !may(c, "hegel", verb, "", "secrets", ns).await,
                "hegel must not {verb} secrets in {ns}"
            );
        }
    }
    assert!(
        !may(c, "hegel", "get", "", "secrets", "").await,
        "no cluster-wide Secret grant for hegel"
    );
    for verb in ["create", "update", "patch", "delete"] {
        assert!(!may(c, "hegel", verb, "", "secrets", "tink-system").await);
    }
    // Not vacuous: Hegel still reads Hardware everywhere.
    assert!(may(c, "hegel", "list", "tinkerbell.org", "hardware", "machines").await);

    // The controller: reads the Secret a Hardware names wherever the Hardware is, writes only
    // its copies in tink-system.
    assert!(may(c, "tink-controller", "get", "", "secrets", "default").await);
    for verb in ["get", "list", "create", "update", "delete"] {
        assert!(
            may(c, "tink-controller", verb, "", "secrets", "tink-system").await,
            "the controller may {verb} secrets in tink-system"
        );
    }
    for ns in ["default", "machines"] {
        for verb in ["create", "update", "patch", "delete", "list", "watch"] {
            assert!(
                !may(c, "tink-controller", verb, "", "secrets", ns).await,
                "the controller must not {verb} secrets in {ns}"
            );
        }
    }
    assert!(!may(c, "tink-controller", "create", "", "secrets", "").await);

    // Netboot and the servers read no Secrets at all.
    for sa in ["tink-netboot", "tink-server"] {
        assert!(
            !may(c, sa, "get", "", "secrets", "tink-system").await,
            "{sa}"
        );
        assert!(!may(c, sa, "get", "", "secrets", "default").await, "{sa}");
    }
    server.shutdown().await;
}
