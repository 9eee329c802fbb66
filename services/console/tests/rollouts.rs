//! The rollouts pages against kube-lite: a WorkflowSet with its status and Workflows, alice
//! allowed to read WorkflowSets and Workflows in namespace `a` by Roles, bob allowed nothing.
//! WorkflowSets are read with the user's token; the set's Workflows from the console's cache.

mod common;

use common::*;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use tink_api::v1alpha2::{Workflow, WorkflowSet};

async fn install(admin: &kube::Client) -> String {
    let text = std::fs::read_to_string(repo().join("deploy/crds/workflowsets.tinkerbell.org.yaml"))
        .expect("CRD file");
    let crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("CRD YAML");
    Api::<CustomResourceDefinition>::all(admin.clone())
        .create(&PostParams::default(), &crd)
        .await
        .expect("CRD");
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "rollouts", "namespace": "a"},
        "rules": [{"apiGroups": ["tinkerbell.org"], "resources": ["workflowsets"],
            "verbs": ["get", "list", "watch"]}],
    }))
    .expect("role");
    Api::<Role>::namespaced(admin.clone(), "a")
        .create(&PostParams::default(), &role)
        .await
        .expect("Role");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "alice-rollouts", "namespace": "a"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "rollouts"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}],
    }))
    .expect("binding");
    Api::<RoleBinding>::namespaced(admin.clone(), "a")
        .create(&PostParams::default(), &binding)
        .await
        .expect("RoleBinding");

    let sets: Api<WorkflowSet> = Api::namespaced(admin.clone(), "a");
    let set: WorkflowSet = tink_api::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "WorkflowSet",
        "metadata": {"name": "rack1", "namespace": "a"},
        "spec": {"hardwareSelector": {"matchLabels": {"rack": "r1"}},
            "templateRef": {"name": "install"}, "maxConcurrent": 2, "maxFailures": 1},
    }))
    .expect("set");
    let created = sets
        .create(&PostParams::default(), &set)
        .await
        .expect("create set");
    let uid = created.metadata.uid.clone().expect("uid");
    sets.patch_status(
        "rack1",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"state": "Halted", "total": 4, "pending": 1,
            "running": 1, "succeeded": 1, "failed": 1, "observedGeneration": 1,
            "conditions": [{"type": "Halted", "status": "True", "reason": "FailureBudgetSpent",
                "message": "1 of the set's Workflows failed; the rollout halts at 1 (spec.maxFailures)"}]}})),
    )
    .await
    .expect("status");
    let workflows: Api<Workflow> = Api::namespaced(admin.clone(), "a");
    for (name, state) in [("m1", "Succeeded"), ("m2", "Failed"), ("m3", "Running")] {
        let wf: Workflow = tink_api::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
            "metadata": {"name": format!("rack1-{name}"), "namespace": "a",
                "labels": {"tinkerbell.org/workflow-set": "rack1"},
                "ownerReferences": [{"apiVersion": "tinkerbell.org/v1alpha2", "kind": "WorkflowSet",
                    "name": "rack1", "uid": uid, "controller": true}]},
            "spec": {"hardwareRef": {"name": name}, "templateRef": {"name": "install"}},
        }))
        .expect("workflow");
        workflows
            .create(&PostParams::default(), &wf)
            .await
            .expect("workflow");
        workflows
            .patch_status(
                &format!("rack1-{name}"),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"state": state}})),
            )
            .await
            .expect("workflow status");
    }
    uid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_list_and_progress_follow_rbac() {
    let stack = stack().await;
    install(&stack.admin).await;

    // The list of namespace a: the set with its state and counts.
    let a = get(stack.console, "/rollouts?ns=a", "alice-token").await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.body.contains("href=\"/rollouts/a/rack1\""), "{}", a.body);
    assert!(
        a.body
            .contains("<span class=\"badge halted\">Halted</span>"),
        "{}",
        a.body
    );
    assert!(a.body.contains("50%"), "{}", a.body);
    // Everywhere: only the namespaces alice may list them in (a).
    let all = get(stack.console, "/rollouts", "alice-token").await;
    assert_eq!(all.status, 200, "{}", all.body);
    assert!(
        all.body.contains("href=\"/rollouts/a/rack1\""),
        "{}",
        all.body
    );
    // Namespace b: refused.
    let b = get(stack.console, "/rollouts?ns=b", "alice-token").await;
    assert_eq!(b.status, 403, "{}", b.body);
    let bob = get(stack.console, "/rollouts", "bob-token").await;
    assert_eq!(bob.status, 403, "{}", bob.body);

    // The detail: counts, the Halted condition, the set's Workflows unfinished first (they
    // reach the console's cache through its watch).
    let page = within("the set's Workflows on its page", async {
        loop {
            let p = get(stack.console, "/rollouts/a/rack1", "alice-token").await;
            if p.status == 200 && p.body.contains("rack1-m3") && p.body.contains("rack1-m1") {
                return p;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(
        page.body.contains(
            "<tr id=\"counts\"><td>4</td><td>1</td><td>1</td><td>1</td><td>1</td><td>0</td></tr>"
        ),
        "{}",
        page.body
    );
    assert!(page.body.contains("FailureBudgetSpent"), "{}", page.body);
    assert!(
        page.body
            .contains("the rollout halts at 1 (spec.maxFailures)"),
        "{}",
        page.body
    );
    let (m3, m2, m1) = (
        page.body.find("rack1-m3").expect("m3"),
        page.body.find("rack1-m2").expect("m2"),
        page.body.find("rack1-m1").expect("m1"),
    );
    assert!(m3 < m2 && m2 < m1, "running, failed, succeeded");

    // bob may read nothing; a malformed path is refused.
    let bob = get(stack.console, "/rollouts/a/rack1", "bob-token").await;
    assert_eq!(bob.status, 403, "{}", bob.body);
    let bad = get(stack.console, "/rollouts/a/Not_A_Name", "alice-token").await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    let missing = get(stack.console, "/rollouts/a/nope", "alice-token").await;
    assert_eq!(missing.status, 404, "{}", missing.body);
    stack.stop().await.expect("console stops cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_crd_the_page_says_so() {
    let stack = stack().await;
    let p = get(stack.console, "/rollouts", "kube-lite").await;
    assert_eq!(p.status, 404, "{}", p.body);
    assert!(
        p.body.contains("the WorkflowSet API is not installed"),
        "{}",
        p.body
    );
    stack.stop().await.expect("console stops cleanly");
}
