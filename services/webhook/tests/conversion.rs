//! Conversion through kube-lite: objects created with kubectl in one version and read back in
//! the other, field for field as crates/api's conversion gives them, and unchanged in their own.

mod common;

use common::{Env, v1alpha1_objects, v1alpha2_objects};
use serde_json::{Value, json};

const ANNOTATION: &str = "tinkerbell.org/conversion-data";

fn resource(kind: &str, version: &str) -> String {
    let plural = match kind {
        "Hardware" => "hardware",
        "Template" => "templates",
        _ => "workflows",
    };
    format!("{plural}.{version}.tinkerbell.org")
}

async fn get(env: &Env, kind: &str, version: &str, name: &str) -> Value {
    let out = env
        .kubectl_ok(&["get", &resource(kind, version), name, "-o", "json"])
        .await;
    serde_json::from_str(&out).expect("kubectl JSON")
}

fn annotation(obj: &Value) -> Option<Value> {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(ANNOTATION))
        .and_then(Value::as_str)
        .map(|s| serde_json::from_str(s).expect("annotation JSON"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_read_back_in_the_other_version_field_for_field() {
    let env = Env::new("conv", true).await;
    for (objects, from, to) in [
        (v1alpha1_objects(&env.ns), "v1alpha1", "v1alpha2"),
        (v1alpha2_objects(&env.ns), "v1alpha2", "v1alpha1"),
    ] {
        for obj in objects {
            let kind = obj["kind"].as_str().unwrap().to_string();
            let name = obj["metadata"]["name"].as_str().unwrap().to_string();
            let file = env.write(&format!("{name}.json"), &obj);
            let out = env.kubectl_ok(&["create", "-f", &file]).await;
            assert!(out.contains("created"), "{out}");

            let expected =
                tink_api::conversion::convert(obj.clone(), &format!("tinkerbell.org/{to}"))
                    .expect("crates/api converts the object");
            let other = get(&env, &kind, to, &name).await;
            assert_eq!(other["apiVersion"], format!("tinkerbell.org/{to}"));
            assert_eq!(
                other["spec"], expected["spec"],
                "{kind} {name} read as {to}"
            );
            assert_eq!(
                annotation(&other),
                annotation(&expected),
                "{kind} {name}: the conversion annotation read as {to}"
            );
            assert_eq!(
                other["metadata"]["labels"], obj["metadata"]["labels"],
                "{kind} {name}"
            );

            let same = get(&env, &kind, from, &name).await;
            assert_eq!(
                same["spec"], obj["spec"],
                "{kind} {name} read back as {from}"
            );
            assert_eq!(
                annotation(&same),
                None,
                "{kind} {name}: no annotation in its own version"
            );
        }
    }

    // A list in the other version: every object converted, in order.
    let out = env
        .kubectl_ok(&["get", &resource("Hardware", "v1alpha1"), "-o", "json"])
        .await;
    let list: Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["sm01", "sm02"]);
    assert!(
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["apiVersion"] == "tinkerbell.org/v1alpha1")
    );
    assert!(
        env.webhook
            .metrics
            .conversions
            .get_or_create(&tink_webhook::Label {
                value: "success".into()
            })
            .get()
            >= 6
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_with_a_bad_object_fails_with_a_message_and_keeps_the_uid() {
    let env = Env::new("convbad", false).await;
    let good = v1alpha1_objects(&env.ns).remove(0);
    let mut bad = good.clone();
    bad["spec"]["interfaces"] = json!("not a list");
    let review = |objects: Vec<Value>, to: &str| {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "c-uid", "desiredAPIVersion": to, "objects": objects}})
    };
    let (status, out) = env
        .post(
            "/convert",
            review(vec![good.clone(), good.clone()], "tinkerbell.org/v1alpha2")
                .to_string()
                .into_bytes(),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(out["response"]["uid"], "c-uid");
    assert_eq!(out["response"]["result"]["status"], "Success");
    assert_eq!(
        out["response"]["convertedObjects"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    let (status, out) = env
        .post(
            "/convert",
            review(vec![good.clone(), bad], "tinkerbell.org/v1alpha2")
                .to_string()
                .into_bytes(),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(out["response"]["uid"], "c-uid");
    assert_eq!(out["response"]["result"]["status"], "Failure");
    let message = out["response"]["result"]["message"].as_str().unwrap();
    assert!(
        message.contains("objects[1]") && message.contains("spec.interfaces"),
        "{message}"
    );

    let (_, out) = env
        .post(
            "/convert",
            review(vec![good], "tinkerbell.org/v9")
                .to_string()
                .into_bytes(),
        )
        .await;
    assert_eq!(out["response"]["result"]["status"], "Failure");
    assert!(
        out["response"]["result"]["message"]
            .as_str()
            .unwrap()
            .contains("v9")
    );
    env.stop().await;
}
