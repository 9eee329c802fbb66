//! Approving a discovered Hardware needs the RBAC verb `approve`: kube-lite names the user of
//! each bearer token in its AdmissionReviews (a token file maps tokens to alice and bob), the
//! webhook asks kube-lite a SubjectAccessReview against the stored Roles and bindings (the
//! ClusterRole `tinkerbell-hardware-approver` from deploy/rbac), and Workflows for a discovered
//! Hardware wait for its approval.

mod common;

use std::time::Duration;

use common::{Env, within};
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const TOKENS: &str = "t-alice,alice,u-alice,\"operators\"\nt-bob,bob,u-bob\n";
const NAME: &str = "discovery-52-54-00-0b-5e-02";

fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other}"),
    }
}

/// alice and bob may edit Hardware in `ns`; only bob may approve (the shipped ClusterRole).
fn rbac(ns: &str) -> Vec<Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/rbac/hardware-approver.yaml");
    let text = std::fs::read_to_string(&path).expect("deploy/rbac/hardware-approver.yaml");
    let approver: Value = serde_yaml::from_str(&text).expect("ClusterRole YAML");
    assert_eq!(approver["metadata"]["name"], "tinkerbell-hardware-approver");
    let binding = |name: &str, role: &str, subject: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [subject]})
    };
    vec![
        approver,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "hardware-editor"},
            "rules": [{"apiGroups": ["tinkerbell.org"], "resources": ["hardware", "workflows"],
                "verbs": ["get", "list", "watch", "create", "update", "patch"]}]}),
        binding(
            "operators-edit",
            "hardware-editor",
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "operators"}),
        ),
        binding(
            "bob-edits",
            "hardware-editor",
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"}),
        ),
        binding(
            "bob-approves",
            "tinkerbell-hardware-approver",
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"}),
        ),
    ]
}

fn discovered(ns: &str) -> Value {
    json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
        "metadata": {"name": NAME, "namespace": ns, "labels": {"tinkerbell.org/discovered": "true"}},
        "spec": {"networkInterfaces": {"52:54:00:0b:5e:02": {}},
            "discovery": {"approved": false, "discoveredAt": "2026-11-27T17:00:00Z",
                "address": "10.0.2.15"}}})
}

fn workflow(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"hardwareRef": {"name": NAME}, "templateRef": {"name": "tpl"}}})
}

fn approve() -> Patch<Value> {
    Patch::Merge(json!({"spec": {"discovery": {"approved": true}}}))
}

/// The refusal alice gets, as the message ends up in the API error.
fn assert_alice_refused(e: kube::Error, ns: &str) {
    let s = api_error(e);
    assert_eq!(s.code, 403, "{s:?}");
    let want = format!(
        "spec.discovery.approved: user \"alice\" may not approve hardware \"{NAME}\" in namespace \"{ns}\": approving a discovered machine needs the verb approve on hardware.tinkerbell.org (RBAC), not only update"
    );
    assert!(s.message.contains(&want), "{}", s.message);
}

async fn approved(env: &Env) -> Option<bool> {
    let hw = env
        .api("Hardware", "v1alpha2")
        .get(NAME)
        .await
        .expect("get Hardware");
    hw.data
        .pointer("/spec/discovery")
        .map(|d| d["approved"].as_bool().unwrap_or(false))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approving_needs_the_approve_verb_and_workflows_wait_for_it() {
    let env = Env::with_tokens("tink", true, Some(TOKENS)).await;
    let ns = env.ns.clone();
    for (i, object) in rbac(&ns).iter().enumerate() {
        let file = env.write(&format!("rbac-{i}.json"), object);
        env.kubectl_ok(&["apply", "-f", &file]).await;
    }
    let hw_admin = env.api("Hardware", "v1alpha2");
    let obj = serde_json::from_value(discovered(&ns)).expect("Hardware");
    hw_admin
        .create(&PostParams::default(), &obj)
        .await
        .expect("the controller's create of a discovered Hardware");

    // A Workflow for it is refused while it waits (once the index saw it).
    let wf_admin = env.api("Workflow", "v1alpha2");
    let wf: kube::api::DynamicObject =
        serde_json::from_value(workflow(&ns, "early")).expect("Workflow");
    let refused = within("the index to see the discovered Hardware", async {
        loop {
            match wf_admin.create(&PostParams::default(), &wf).await {
                Err(e) => break api_error(e),
                Ok(_) => {
                    let _ = wf_admin.delete("early", &Default::default()).await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    })
    .await;
    assert_eq!(refused.code, 422, "{refused:?}");
    assert!(
        refused.message.contains(&format!("spec.hardwareRef: Hardware {ns}/{NAME} is a discovered machine waiting for approval: it gets no Workflow until someone allowed to approve it runs `tinkctl hardware approve {NAME} -n {ns}`")),
        "{}",
        refused.message
    );

    let alice = env.api_as("t-alice", "Hardware", "v1alpha2");
    let bob = env.api_as("t-bob", "Hardware", "v1alpha2");

    // alice may edit it (update is bound to her group) but not approve it.
    alice
        .patch(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"rack": "r7"}}})),
        )
        .await
        .expect("alice edits a label");
    let e = alice
        .patch(NAME, &PatchParams::default(), &approve())
        .await
        .expect_err("alice may not approve");
    assert_alice_refused(e, &ns);
    // Removing spec.discovery would approve it too: by a merge patch to null, or by a replace
    // without it. (kubectl cannot be alice here: client-go sends no bearer token over
    // kube-lite's plain HTTP.)
    let e = alice
        .patch(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"discovery": null}})),
        )
        .await
        .expect_err("alice may not remove spec.discovery");
    assert_alice_refused(e, &ns);
    let mut without = alice.get(NAME).await.expect("alice reads it");
    without.data["spec"]
        .as_object_mut()
        .map(|spec| spec.remove("discovery"))
        .expect("spec.discovery");
    let e = alice
        .replace(NAME, &PostParams::default(), &without)
        .await
        .expect_err("alice may not replace it without spec.discovery");
    assert_alice_refused(e, &ns);
    // Through v1alpha1, whose discovery lives in the conversion annotation: editing or
    // dropping the annotation approves, and is refused.
    let alice_v1 = env.api_as("t-alice", "Hardware", "v1alpha1");
    let v1 = alice_v1.get(NAME).await.expect("v1alpha1 read");
    let annotation = tink_api::CONVERSION_DATA_ANNOTATION;
    let raw = v1
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotation))
        .cloned()
        .expect("the conversion annotation keeps spec.discovery");
    assert!(raw.contains("\"approved\":false"), "{raw}");
    let mut edited = v1.clone();
    edited.metadata.annotations = Some(
        [(
            annotation.to_string(),
            raw.replace("\"approved\":false", "\"approved\":true"),
        )]
        .into(),
    );
    let e = alice_v1
        .replace(NAME, &PostParams::default(), &edited)
        .await
        .expect_err("alice may not approve through v1alpha1");
    assert_alice_refused(e, &ns);
    let mut dropped = v1.clone();
    dropped.metadata.annotations = None;
    let e = alice_v1
        .replace(NAME, &PostParams::default(), &dropped)
        .await
        .expect_err("alice may not drop the annotation");
    assert_alice_refused(e, &ns);
    assert_eq!(approved(&env).await, Some(false));

    // bob has `approve`.
    bob.patch(NAME, &PatchParams::default(), &approve())
        .await
        .expect("bob approves");
    assert_eq!(approved(&env).await, Some(true));

    // Now the Workflow is accepted (once the index saw the approval).
    let wf: kube::api::DynamicObject =
        serde_json::from_value(workflow(&ns, "after")).expect("Workflow");
    within("the index to see the approval", async {
        loop {
            match wf_admin.create(&PostParams::default(), &wf).await {
                Ok(_) => break,
                Err(e) => {
                    let s = api_error(e);
                    assert!(s.message.contains("waiting for approval"), "{s:?}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    })
    .await;

    // Un-approving needs no more than update.
    alice
        .patch(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"discovery": {"approved": false}}})),
        )
        .await
        .expect("alice un-approves");
    assert_eq!(approved(&env).await, Some(false));
    env.stop().await;
}
