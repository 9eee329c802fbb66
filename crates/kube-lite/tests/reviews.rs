//! TokenReview and SubjectAccessReview over HTTP with the real `kube` client: RBAC kinds are
//! discoverable and stored, tokens come from the `--token-file`, and access reviews read the
//! stored Roles and bindings.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use kube::Api;
use kube::api::PostParams;
use kube::core::GroupVersionKind;

async fn server(dir: &tempfile::TempDir) -> kube_lite::RunningServer {
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "t-alice,alice,u1,\"ops,dev\"\nt-bob,bob,u2\n").expect("write");
    kube_lite::Server::start(kube_lite::Config {
        token_file: Some(tokens),
        ..Default::default()
    })
    .await
    .expect("kube-lite")
}

async fn review_token(client: &kube::Client, token: &str) -> TokenReview {
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.into()),
            audiences: None,
        },
        ..Default::default()
    };
    Api::<TokenReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("TokenReview answered")
}

async fn may_read_log(client: &kube::Client, user: &str, groups: &[&str], ns: &str) -> bool {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.into()),
            groups: Some(groups.iter().map(|g| g.to_string()).collect()),
            resource_attributes: Some(ResourceAttributes {
                group: Some("tinkerbell.org".into()),
                resource: Some("workflows".into()),
                subresource: Some("log".into()),
                verb: Some("get".into()),
                namespace: Some(ns.into()),
                name: Some("wf".into()),
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
async fn reviews_answer_from_the_token_file_and_stored_rbac() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = server(&dir).await;
    let client = server.client().expect("client");

    for (group, kind) in [
        ("rbac.authorization.k8s.io", "ClusterRole"),
        ("rbac.authorization.k8s.io", "RoleBinding"),
        ("authentication.k8s.io", "TokenReview"),
        ("authorization.k8s.io", "SubjectAccessReview"),
    ] {
        let gvk = GroupVersionKind::gvk(group, "v1", kind);
        kube::discovery::pinned_kind(&client, &gvk)
            .await
            .unwrap_or_else(|e| panic!("{group} {kind} is not discoverable: {e}"));
    }

    let alice = review_token(&client, "t-alice")
        .await
        .status
        .expect("status");
    assert_eq!(alice.authenticated, Some(true));
    let user = alice.user.expect("user");
    assert_eq!(user.username.as_deref(), Some("alice"));
    assert_eq!(
        user.groups,
        Some(vec![
            "ops".to_string(),
            "dev".to_string(),
            "system:authenticated".to_string()
        ])
    );
    let nobody = review_token(&client, "t-nobody")
        .await
        .status
        .expect("status");
    assert_eq!(nobody.authenticated, Some(false));
    // The written kubeconfig's token is the admin, allowed everything.
    let admin = review_token(&client, "kube-lite")
        .await
        .status
        .expect("status");
    let admin = admin.user.expect("user");
    assert_eq!(admin.username.as_deref(), Some("kube-lite-admin"));
    let groups: Vec<&str> = admin.groups.iter().flatten().map(String::as_str).collect();
    assert!(may_read_log(&client, "kube-lite-admin", &groups, "default").await);

    let role: ClusterRole = serde_yaml::from_str(
        "metadata: {name: log-reader}\nrules:\n- apiGroups: [tinkerbell.org]\n  resources: [workflows/log]\n  verbs: [get]\n",
    )
    .expect("role");
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await
        .expect("ClusterRole stored");
    let binding: RoleBinding = serde_yaml::from_str(
        "metadata: {name: ops-logs, namespace: default}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: log-reader}\nsubjects:\n- {kind: Group, name: ops, apiGroup: rbac.authorization.k8s.io}\n",
    )
    .expect("binding");
    assert!(!may_read_log(&client, "alice", &["ops"], "default").await);
    Api::<RoleBinding>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &binding)
        .await
        .expect("RoleBinding stored");
    assert!(may_read_log(&client, "alice", &["ops"], "default").await);
    assert!(!may_read_log(&client, "alice", &["ops"], "kube-system").await);
    assert!(!may_read_log(&client, "bob", &["system:authenticated"], "default").await);

    // Create-only: a list is refused.
    let listed = Api::<SubjectAccessReview>::all(client.clone())
        .list(&Default::default())
        .await;
    assert!(listed.is_err(), "{listed:?}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_malformed_token_file_stops_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "t-alice,alice\n").expect("write");
    let started = kube_lite::Server::start(kube_lite::Config {
        token_file: Some(tokens),
        ..Default::default()
    })
    .await;
    let Err(err) = started else {
        panic!("a malformed token file was accepted");
    };
    assert!(err.to_string().contains("line 1"), "{err}");
}
