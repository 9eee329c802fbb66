//! WorkflowSet admission through kube-lite over HTTPS, with kubectl and the kube client: a
//! bad selector, a concurrency below 1, a negative failure budget and a name too long to be a
//! label value are refused naming the field; a good set is stored, with a warning when its
//! Template does not exist.

mod common;

use common::Env;
use kube::api::PostParams;
use serde_json::{Value, json};

fn set(ns: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "WorkflowSet",
        "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

fn good() -> Value {
    json!({"hardwareSelector": {"matchLabels": {"rack": "r1"}},
        "templateRef": {"name": "install"}, "maxConcurrent": 5, "maxFailures": 2})
}

async fn refused(env: &Env, name: &str, spec: Value) -> String {
    let api = env.api("WorkflowSet", "v1alpha2");
    match api
        .create(
            &PostParams::default(),
            &serde_json::from_value(set(&env.ns, name, spec)).expect("object"),
        )
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422, "{s:?}");
            s.message
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_workflow_sets_are_refused_with_the_field_path() {
    let env = Env::new("rollout", true).await;

    let mut s = good();
    s["hardwareSelector"] = json!({});
    let m = refused(&env, "rack1", s).await;
    assert!(
        m.contains("admission webhook \"validate.tinkerbell.org\" denied the request"),
        "{m}"
    );
    assert!(
        m.contains("spec.hardwareSelector: an empty selector would select every Hardware"),
        "{m}"
    );

    let mut s = good();
    s["hardwareSelector"] =
        json!({"matchExpressions": [{"key": "rack", "operator": "Equals", "values": ["r1"]}]});
    let m = refused(&env, "rack1", s).await;
    assert!(
        m.contains(
            "spec.hardwareSelector.matchExpressions[0].operator: unknown operator \"Equals\""
        ),
        "{m}"
    );

    let mut s = good();
    s["hardwareSelector"] = json!({"matchLabels": {"rack": "r 1"}});
    let m = refused(&env, "rack1", s).await;
    assert!(
        m.contains("spec.hardwareSelector.matchLabels[rack]: \"r 1\" is not a label value"),
        "{m}"
    );

    // The bounds: the schema or the webhook refuses them, either way naming the field.
    let mut s = good();
    s["maxConcurrent"] = json!(0);
    let m = refused(&env, "rack1", s).await;
    assert!(m.contains("spec.maxConcurrent"), "{m}");
    let mut s = good();
    s["maxFailures"] = json!(-1);
    let m = refused(&env, "rack1", s).await;
    assert!(m.contains("spec.maxFailures"), "{m}");

    let m = refused(&env, &"r".repeat(64), good()).await;
    assert!(
        m.contains("metadata.name: a WorkflowSet name is at most 63 characters"),
        "{m}"
    );

    // A good one, with kubectl: stored, warned that its Template is missing.
    let file = env.write("set.json", &set(&env.ns, "rack1", good()));
    let (ok, out, err) = env.kubectl(&["create", "-f", &file]).await;
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("workflowset.tinkerbell.org/rack1 created"),
        "{out}"
    );
    assert!(
        err.contains("spec.templateRef: Template rollout/install does not exist (yet)"),
        "{err}"
    );

    // kubectl get shows the printer columns.
    let out = env
        .kubectl_ok(&["get", "workflowsets", "-n", &env.ns])
        .await;
    let header = out.lines().next().unwrap_or_default();
    for column in [
        "NAME",
        "STATE",
        "TOTAL",
        "PENDING",
        "RUNNING",
        "SUCCEEDED",
        "FAILED",
        "AGE",
    ] {
        assert!(header.contains(column), "{out}");
    }
    assert!(out.contains("rack1"), "{out}");

    // The example in deploy/examples is admitted as it is.
    let example = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/examples/rollout.yaml");
    let example = example.to_str().expect("utf-8 path");
    let (ok, out, err) = env.kubectl(&["create", "-n", &env.ns, "-f", example]).await;
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("workflowset.tinkerbell.org/rack-r12-debian created"),
        "{out}"
    );
    env.stop().await;
}
