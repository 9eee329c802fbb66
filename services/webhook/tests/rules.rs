//! WorkflowRuleSet admission through kube-lite over HTTPS (the ValidatingWebhookConfiguration
//! of deploy/webhook): a rule set whose patterns do not compile is refused with the field path
//! of each problem, by kubectl and by the kube client; a valid one is stored.

mod common;

use common::Env;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::{Api, Error};
use serde_json::{Value, json};

fn rule_set(ns: &str, name: &str, rules: Value) -> Value {
    json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "WorkflowRuleSet",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"rules": rules, "workflow": {"templateRef": {"name": "install"}}}})
}

/// The generated CRD (the shared test setup installs the kinds it knows).
async fn install_crd(env: &Env) {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/crds/workflowrulesets.tinkerbell.org.yaml");
    let text = std::fs::read_to_string(path).expect("the generated CRD");
    let crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("CRD YAML");
    let api: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    match api.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("cannot create the CRD: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_patterns_are_refused_with_the_field_path() {
    let env = Env::new("rules", true).await;
    install_crd(&env).await;

    // kubectl: the third rule's count range is empty; the first rule's path is misspelt.
    let bad = env.write(
        "bad.json",
        &rule_set(
            &env.ns,
            "bad",
            json!([
                {"match": {"chasis.vendor": {"prefix": "Dell"}}},
                {"match": {"cpu.totalThreads": {"min": 4}}},
                {"match": {"blockDevices": {"count": {"min": 3, "max": 2}}}},
            ]),
        ),
    );
    let (ok, _, err) = env.kubectl(&["apply", "-f", &bad]).await;
    assert!(!ok, "an invalid rule set was stored");
    assert!(
        err.contains("admission webhook \"validate.tinkerbell.org\" denied the request"),
        "{err}"
    );
    assert!(
        err.contains("spec.rules[2].match.blockDevices.count.min: min 3 is above max 2"),
        "{err}"
    );
    assert!(
        err.contains("spec.rules[0].match.chasis.vendor: unknown attribute path \"chasis.vendor\""),
        "{err}"
    );

    // The kube client gets the same causes.
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("tinkerbell.org", "v1alpha2", "WorkflowRuleSet"),
        "workflowrulesets",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), &env.ns, &ar);
    let obj: DynamicObject = serde_json::from_value(rule_set(
        &env.ns,
        "bad2",
        json!([{"match": {"chassis.vendor": {"prefix": ""}}}]),
    ))
    .expect("object");
    match api.create(&PostParams::default(), &obj).await {
        Err(Error::Api(s)) => assert!(
            s.message
                .contains("spec.rules[0].match.chassis.vendor.prefix: must not be empty"),
            "{}",
            s.message
        ),
        other => panic!("expected a denial, got {other:?}"),
    }

    // A valid rule set is stored.
    let good = env.write(
        "good.json",
        &rule_set(
            &env.ns,
            "dell",
            json!([{"name": "dell-2-disks", "match": {
                "chassis.vendor": {"prefix": "Dell"},
                "blockDevices": {"count": {"min": 2}, "where": {"driveType": {"equals": "SSD"}}},
            }}]),
        ),
    );
    let out = env.kubectl_ok(&["apply", "-f", &good]).await;
    assert!(
        out.contains("workflowruleset.tinkerbell.org/dell created"),
        "{out}"
    );
    env.stop().await;
}
