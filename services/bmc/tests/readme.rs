//! The README's Machine and Job (the "Power and boot through the BMC" section) are what an
//! operator pastes: they must be accepted by the CRDs as written, and the Job must name the
//! Machine it sits beside. The section's Workflow with bootOptions must be a valid one.

mod common;

use common::Stack;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Api;
use kube::api::PostParams;
use serde::Deserialize as _;
use tink_api::bmc::{Job, Machine, PowerAction};

fn readme_documents() -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let section = text
        .split("## Power and boot through the BMC")
        .nth(1)
        .expect("the BMC section")
        .split("\n## ")
        .next()
        .expect("section text");
    let mut docs = Vec::new();
    for block in section.split("<<'EOF'\n").skip(1) {
        let yaml = block.split("\nEOF").next().expect("heredoc end");
        for d in serde_yaml::Deserializer::from_str(yaml) {
            docs.push(serde_json::Value::deserialize(d).expect("YAML"));
        }
    }
    docs
}

#[tokio::test]
async fn the_readme_machine_and_job_apply_as_written() {
    let docs = readme_documents();
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(kinds, ["Secret", "Machine", "Job", "Workflow"]);
    let wf: tink_api::v1alpha2::Workflow =
        tink_api::from_value(docs[3].clone()).expect("the README's Workflow");
    let boot = wf.spec.boot_options.clone().expect("bootOptions");
    assert!(boot.problems().is_empty(), "{:?}", boot.problems());
    assert_eq!(boot.boot_mode, Some(tink_api::v1alpha2::BootMode::Netboot));
    assert!(boot.toggle_allow_netboot);
    assert_eq!(
        wf.metadata.namespace,
        docs[1]["metadata"]["namespace"]
            .as_str()
            .map(str::to_string)
    );
    let stack = Stack::start().await;
    let ns = docs[1]["metadata"]["namespace"]
        .as_str()
        .expect("namespace");
    let mut n = Namespace::default();
    n.metadata.name = Some(ns.into());
    Api::<Namespace>::all(stack.client.clone())
        .create(&PostParams::default(), &n)
        .await
        .expect("namespace");
    let pp = PostParams::default();
    let secret: Secret = serde_json::from_value(docs[0].clone()).expect("Secret");
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/basic-auth"));
    Api::<Secret>::namespaced(stack.client.clone(), ns)
        .create(&pp, &secret)
        .await
        .expect("Secret accepted");
    let machine: Machine = serde_json::from_value(docs[1].clone()).expect("Machine");
    Api::<Machine>::namespaced(stack.client.clone(), ns)
        .create(&pp, &machine)
        .await
        .expect("Machine accepted by the CRD");
    let job: Job = serde_json::from_value(docs[2].clone()).expect("Job");
    assert_eq!(
        job.spec.machine_ref.name,
        machine.metadata.name.clone().expect("name")
    );
    assert_eq!(
        job.spec.tasks.last().and_then(|t| t.power_action),
        Some(PowerAction::Cycle)
    );
    Api::<Job>::namespaced(stack.client.clone(), ns)
        .create(&pp, &job)
        .await
        .expect("Job accepted by the CRD");
}
