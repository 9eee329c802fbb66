//! WorkflowRuleSets end to end against the real parts (kube-lite with the generated CRDs,
//! nats-server with deploy's users, tink-server and the controller in process). Machines'
//! inventories are written to their Hardware status as the inventory consumer writes them
//! (tink-inventory's attributes of the fixture machine, `inventorySource`):
//!
//! - a rule ("vendor Dell and at least 2 disks") matches the approved machine whose inventory
//!   came from its authenticated agent: its Workflow is created once, with the rule's labels;
//!   an unapproved machine, an enrollment-only one and one with a single disk are not matched,
//!   and Events on each Hardware say why; the rule set's status counts them;
//! - the operator deletes the created Workflow: it is not created again for that generation,
//!   even when the machine changes; approving the unapproved machine fires for it;
//! - a second generation (the spec edited) creates again for every matching machine;
//! - a Workflow left by a leader that died before writing its record is adopted, not doubled.

mod common;

use std::time::Duration;

use common::{NS, Stack, within};
use k8s_openapi::api::events::v1::Event as KubeEvent;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt as _};
use serde_json::{Value, json};
use tink_api::v1alpha2::{Hardware, Workflow, WorkflowRuleSet};
use tink_controller::rules::{
    RULE_GENERATION_LABEL, RULE_LABEL, RULE_UID_LABEL, record_key, workflow_name,
};

/// The fixture machine's in-band attributes, made a Dell with `disks` disks.
fn attributes(disks: usize) -> Value {
    let fixture = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../crates/inventory/tests/fixtures/machine-a");
    let inventory = tink_inventory::collect(&fixture);
    let mut attrs = serde_json::to_value(inventory.to_attributes()).expect("attributes");
    attrs["chassis"] = json!({"vendor": "Dell Inc.", "serialNumber": "SN1"});
    attrs["blockDevices"] = (0..disks)
        .map(|i| json!({"name": format!("nvme{i}n1"), "driveType": "SSD", "sizeBytes": 960197124096u64}))
        .collect();
    attrs
}

fn hardware(stack: &Stack) -> Api<Hardware> {
    Api::namespaced(stack.client.clone(), NS)
}

fn rule_sets(stack: &Stack) -> Api<WorkflowRuleSet> {
    Api::namespaced(stack.client.clone(), NS)
}

/// A Hardware, approved or not, with an inventory from `source` (`Agent`, `Enrollment`).
async fn machine(stack: &Stack, name: &str, mac: &str, approved: bool, source: &str, disks: usize) {
    let hw: Hardware = tink_api::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "networkInterfaces": {mac: {"dhcp": {"ip": "10.0.0.2", "netmask": "255.255.255.0"}}},
            "discovery": {"approved": approved},
        },
    }))
    .expect("hardware");
    hardware(stack)
        .create(&PostParams::default(), &hw)
        .await
        .expect("create hardware");
    set_inventory(stack, name, source, disks).await;
}

/// Writes the status as the inventory consumer does.
async fn set_inventory(stack: &Stack, name: &str, source: &str, disks: usize) {
    let patch = json!({"status": {
        "attributes": {"inBand": attributes(disks)},
        "inventorySource": source,
        "inventoryReportedAt": "2026-11-27T21:00:00Z",
    }});
    hardware(stack)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("status");
}

async fn wait_workflow(stack: &Stack, name: &str) -> Workflow {
    stack
        .wait_for(name, "created by the rule set", |_| true)
        .await
}

/// The Events about `object` with `reason`.
async fn events(stack: &Stack, object: &str, reason: &str) -> Vec<KubeEvent> {
    let api: Api<KubeEvent> = Api::namespaced(stack.client.clone(), NS);
    api.list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(object)
        })
        .collect()
}

/// Waits for an Event about `object` with `reason` whose note contains `text`.
async fn wait_note(stack: &Stack, object: &str, reason: &str, text: &str) -> String {
    within(
        &format!("a {reason} Event on {object} saying {text:?}"),
        async {
            loop {
                if let Some(note) = events(stack, object, reason)
                    .await
                    .into_iter()
                    .filter_map(|e| e.note)
                    .find(|n| n.contains(text))
                {
                    return note;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        },
    )
    .await
}

async fn wait_status(stack: &Stack, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    within(&format!("rule set status: {what}"), async {
        loop {
            let rs = rule_sets(stack).get("dell").await.expect("rule set");
            let status = serde_json::to_value(&rs.status).expect("json");
            if done(&status) {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

async fn ours(stack: &Stack) -> Vec<String> {
    let mut names: Vec<String> = stack
        .workflows()
        .list(&ListParams::default().labels(&format!("{RULE_LABEL}=dell")))
        .await
        .expect("list")
        .items
        .iter()
        .map(|w| w.name_any())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_fire_once_per_machine_per_generation_on_authenticated_inventory() {
    let stack = Stack::start().await;
    let controller = stack.leader("c-0").await;
    stack
        .create_template(
            "install",
            json!([{"name": "disk", "image": "img", "env": {"DISK": "{{ .device }}"}}]),
        )
        .await;
    machine(&stack, "m-dell", "aa:bb:cc:00:31:01", true, "Agent", 2).await;
    machine(
        &stack,
        "m-unapproved",
        "aa:bb:cc:00:31:02",
        false,
        "Agent",
        2,
    )
    .await;
    machine(
        &stack,
        "m-enrolled",
        "aa:bb:cc:00:31:03",
        true,
        "Enrollment",
        2,
    )
    .await;
    machine(&stack, "m-small", "aa:bb:cc:00:31:04", true, "Agent", 1).await;

    let rs: WorkflowRuleSet = tink_api::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "WorkflowRuleSet",
        "metadata": {"name": "dell", "namespace": NS},
        "spec": {
            "rules": [{"name": "dell-2-disks", "match": {
                "chassis.vendor": {"prefix": "Dell"},
                "blockDevices": {"count": {"min": 2}, "where": {"driveType": {"equals": "SSD"}}},
            }}],
            "workflow": {"templateRef": {"name": "install"}, "templateData": {"device": "/dev/nvme0n1"}},
        },
    }))
    .expect("rule set");
    let rs = rule_sets(&stack)
        .create(&PostParams::default(), &rs)
        .await
        .expect("create rule set");
    let uid = rs.uid().expect("uid");

    // 1. The approved Dell with its agent's inventory gets its Workflow, labelled.
    let name = workflow_name("dell", "m-dell", 1);
    let wf = wait_workflow(&stack, &name).await;
    assert_eq!(wf.spec.hardware_ref.name, "m-dell");
    assert_eq!(wf.spec.template_ref.name, "install");
    assert_eq!(wf.spec.template_data["device"], "/dev/nvme0n1");
    assert_eq!(wf.labels()[RULE_LABEL], "dell");
    assert_eq!(wf.labels()[RULE_GENERATION_LABEL], "1");
    assert_eq!(wf.labels()[RULE_UID_LABEL], uid);
    let note = wait_note(&stack, "m-dell", "RuleMatched", &name).await;
    assert!(note.contains("rule dell-2-disks matched"), "{note}");
    wait_note(&stack, "dell", "RuleMatched", "Hardware m-dell").await;
    let hw = hardware(&stack).get("m-dell").await.expect("m-dell");
    assert_eq!(
        hw.annotations().get(&record_key("dell")),
        Some(&format!("{uid}/1"))
    );

    // 2. The others are skipped, each with its reason.
    wait_note(&stack, "m-unapproved", "RuleSkipped", "not approved").await;
    wait_note(&stack, "m-enrolled", "RuleSkipped", "taken at enrollment").await;
    let note = wait_note(&stack, "m-small", "RuleSkipped", "no rule matched").await;
    assert!(
        note.contains("blockDevices: 1 matching where counted, wanted at least 2"),
        "{note}"
    );
    let status = wait_status(&stack, "generation 1 counted", |s| {
        s["observedGeneration"] == 1 && s["evaluated"] == 4 && s["created"] == 1
    })
    .await;
    assert_eq!(status["matched"], 1, "{status}");
    assert_eq!(status["notApproved"], 1, "{status}");
    assert_eq!(status["noAuthenticatedInventory"], 1, "{status}");
    assert_eq!(ours(&stack).await, vec![name.clone()]);

    // 3. The operator deletes the Workflow; the machine changes (a new inventory). Then the
    // unapproved machine is approved: once its Workflow exists, the Dell's change was handled
    // before it (one ordered queue), and the deleted Workflow was not created again.
    stack.delete_workflow(&name).await;
    stack.wait_gone(&name).await;
    set_inventory(&stack, "m-dell", "Agent", 3).await;
    let patch = json!({"spec": {"discovery": {"approved": true}}});
    hardware(&stack)
        .patch(
            "m-unapproved",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .expect("approve");
    let approved = workflow_name("dell", "m-unapproved", 1);
    wait_workflow(&stack, &approved).await;
    wait_note(
        &stack,
        "m-dell",
        "RuleSkipped",
        "already created for this generation",
    )
    .await;
    assert_eq!(ours(&stack).await, vec![approved.clone()]);

    // 4. A dead leader's Workflow (created, no record yet) is adopted, not doubled: m-small's
    // Workflow exists with the rule set's labels before m-small matches.
    let adopted = workflow_name("dell", "m-small", 1);
    let mut left: Workflow = tink_api::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
        "metadata": {"name": adopted, "namespace": NS, "labels": {
            RULE_LABEL: "dell", RULE_GENERATION_LABEL: "1", RULE_UID_LABEL: uid,
        }},
        "spec": {"hardwareRef": {"name": "m-small"}, "templateRef": {"name": "install"}},
    }))
    .expect("workflow");
    left = stack
        .workflows()
        .create(&PostParams::default(), &left)
        .await
        .expect("create");
    set_inventory(&stack, "m-small", "Agent", 2).await;
    wait_note(&stack, "m-small", "RuleMatched", "found (created earlier)").await;
    let after = stack.workflows().get(&adopted).await.expect("still there");
    assert_eq!(after.uid(), left.uid(), "the same Workflow, not a new one");

    // 5. A second generation fires again for every machine that matches (the enrollment-only
    // machine still not).
    let patch = json!({"spec": {"workflow": {"templateData": {"device": "/dev/nvme1n1"}}}});
    rule_sets(&stack)
        .patch("dell", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("edit");
    for hw in ["m-dell", "m-unapproved", "m-small"] {
        let wf = wait_workflow(&stack, &workflow_name("dell", hw, 2)).await;
        assert_eq!(wf.spec.template_data["device"], "/dev/nvme1n1");
        assert_eq!(wf.labels()[RULE_GENERATION_LABEL], "2");
    }
    let status = wait_status(&stack, "generation 2 counted", |s| {
        s["observedGeneration"] == 2 && s["created"] == 3
    })
    .await;
    assert_eq!(status["matched"], 3, "{status}");
    assert_eq!(status["noAuthenticatedInventory"], 1, "{status}");
    wait_note(&stack, "m-enrolled", "RuleSkipped", "generation 2").await;
    assert!(
        stack
            .workflows()
            .get_opt(&workflow_name("dell", "m-enrolled", 2))
            .await
            .expect("get")
            .is_none()
    );
    assert_eq!(ours(&stack).await.len(), 5, "{:?}", ours(&stack).await);

    controller.stop().await;
    stack.stop().await;
}
