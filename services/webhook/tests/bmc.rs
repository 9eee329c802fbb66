//! Rufio's bmc.tinkerbell.org Machine, Job and Task through kube-lite and the webhook as
//! deploy/webhook registers it: Rufio's own samples are admitted unchanged, and a Machine or
//! Task naming another namespace's Secret, a host with credentials, or a Job for another
//! namespace's Machine are refused with the field named.

mod common;

use std::path::PathBuf;

use common::Env;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn rufio_sample(file: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../crates/api/tests/fixtures/rufio")
        .join(file)
        .to_string_lossy()
        .into_owned()
}

fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other}"),
    }
}

fn machine(ns: &str, name: &str, connection: Value) -> Value {
    json!({"apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Machine",
        "metadata": {"name": name, "namespace": ns}, "spec": {"connection": connection}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rufios_samples_are_admitted_unchanged() {
    // The samples name rufio-system (and, for the RPC one, default) as their Secrets' and
    // Machine's namespace: applied there, as Rufio's docs do, they are their own namespace.
    let env = Env::new("rufio-system", true).await;
    for file in [
        "machine_v1alpha1.yaml",
        "job_v1alpha1.yaml",
        "task_v1alpha1.yaml",
    ] {
        let out = env.kubectl_ok(&["apply", "-f", &rufio_sample(file)]).await;
        assert!(out.contains(" created"), "{file}: {out}");
    }
    let out = env
        .kubectl_ok(&[
            "apply",
            "-n",
            "default",
            "-f",
            &rufio_sample("machine_with_opts_v1alpha1.yaml"),
        ])
        .await;
    assert!(
        out.contains("machine.bmc.tinkerbell.org/machine-sample-with-opts created"),
        "{out}"
    );
    for kind in ["Machine", "Job", "Task"] {
        assert_eq!(
            env.webhook.metrics.admissions_of(kind, "allowed"),
            if kind == "Machine" { 2 } else { 1 },
            "{kind}: the webhook saw it"
        );
    }
    // The same sample in another namespace names a Secret that is not its own.
    let (ok, _, err) = env
        .kubectl(&[
            "apply",
            "-n",
            "default",
            "-f",
            &rufio_sample("machine_v1alpha1.yaml"),
        ])
        .await;
    assert!(!ok);
    assert!(
        err.contains("admission webhook \"validate.tinkerbell.org\" denied the request"),
        "{err}"
    );
    assert!(
        err.contains("spec.connection.authSecretRef.namespace: Secret rufio-system/sample-machine-auth is not in the Machine's namespace default"),
        "{err}"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_namespaces_secrets_and_machines_are_refused() {
    let env = Env::new("team-a", true).await;
    let ns = env.ns.clone();

    // With kubectl: every refused field in one answer.
    let bad = machine(
        &ns,
        "m1",
        json!({"host": "https://admin:hunter2@10.0.0.5",
            "authSecretRef": {"name": "bmc-auth", "namespace": "kube-system"},
            "providerOptions": {"rpc": {"consumerURL": "ftp://10.0.0.9/rpc",
                "hmac": {"secrets": {"sha256": [{"name": "k", "namespace": "team-b"}]}}}}}),
    );
    let file = env.write("m1.json", &bad);
    let (ok, _, err) = env.kubectl(&["apply", "-f", &file]).await;
    assert!(!ok);
    for expected in [
        "Machine.bmc.tinkerbell.org \"m1\" is invalid",
        "spec.connection.host: credentials belong in the auth Secret, not the host",
        "spec.connection.authSecretRef.namespace: Secret kube-system/bmc-auth is not in the Machine's namespace team-a",
        "spec.connection.providerOptions.rpc.consumerURL: only http:// and https:// are allowed",
        "spec.connection.providerOptions.rpc.hmac.secrets[sha256][0].namespace: Secret team-b/k is not in the Machine's namespace team-a",
    ] {
        assert!(err.contains(expected), "{expected}\n{err}");
    }
    assert!(!err.contains("hunter2"), "the password came back: {err}");

    // With the kube client: a Job for another namespace's Machine.
    let jobs = env.api("Job", "v1alpha1");
    let job = json!({"apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Job",
        "metadata": {"name": "j1", "namespace": ns},
        "spec": {"machineRef": {"name": "m", "namespace": "team-b"},
            "tasks": [{"powerAction": "on"}]}});
    let e = api_error(
        jobs.create(
            &PostParams::default(),
            &serde_json::from_value(job).unwrap(),
        )
        .await
        .expect_err("another namespace's Machine"),
    );
    assert_eq!(e.code, 422, "{e:?}");
    assert!(
        e.message.contains(
            "spec.machineRef.namespace: Machine team-b/m is not in the Job's namespace team-a"
        ),
        "{}",
        e.message
    );

    // A Task's connection is checked as a Machine's.
    let tasks = env.api("Task", "v1alpha1");
    let task = json!({"apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Task",
        "metadata": {"name": "t1", "namespace": ns},
        "spec": {"task": {"powerAction": "off"},
            "connection": {"host": "10.0.0.5", "authSecretRef": {"name": "a", "namespace": "kube-system"}}}});
    let e = api_error(
        tasks
            .create(
                &PostParams::default(),
                &serde_json::from_value(task).unwrap(),
            )
            .await
            .expect_err("another namespace's Secret"),
    );
    assert!(
        e.message.contains("Task.bmc.tinkerbell.org \"t1\" is invalid: spec.connection.authSecretRef.namespace: Secret kube-system/a is not in the Task's namespace team-a"),
        "{}",
        e.message
    );

    // Updates: moving the Secret elsewhere is refused; status and labels are not checked.
    let machines = env.api("Machine", "v1alpha1");
    let good = machine(
        &ns,
        "m2",
        json!({"host": "10.0.0.5", "authSecretRef": {"name": "bmc-auth"}}),
    );
    machines
        .create(
            &PostParams::default(),
            &serde_json::from_value(good).unwrap(),
        )
        .await
        .expect("a Machine with its own namespace's Secret");
    let pp = PatchParams::default();
    let e = api_error(
        machines
            .patch(
                "m2",
                &pp,
                &Patch::Merge(&json!({"spec": {"connection": {"authSecretRef": {"namespace": "kube-system"}}}})),
            )
            .await
            .expect_err("moved to another namespace's Secret"),
    );
    assert_eq!(e.code, 422, "{e:?}");
    assert!(
        e.message
            .contains("spec.connection.authSecretRef.namespace"),
        "{}",
        e.message
    );
    machines
        .patch(
            "m2",
            &pp,
            &Patch::Merge(&json!({"metadata": {"labels": {"rack": "r1"}}})),
        )
        .await
        .expect("a label");
    machines
        .patch_status(
            "m2",
            &pp,
            &Patch::Merge(&json!({"status": {"powerState": "on"}})),
        )
        .await
        .expect("the controller's status write");
    assert_eq!(env.webhook.metrics.admissions_of("Machine", "denied"), 2);
    assert_eq!(env.webhook.metrics.admissions_of("Job", "denied"), 1);
    assert_eq!(env.webhook.metrics.admissions_of("Task", "denied"), 1);
    env.stop().await;
}
