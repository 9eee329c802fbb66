//! Malformed objects never panic; errors name the field path.

mod common;

use common::fixture_text;
use proptest::prelude::*;
use serde_json::{Value, json};
use tink_api::conversion::{self, ConversionError};
use tink_api::{from_json, from_value, from_yaml, v1alpha1, v1alpha2};

#[test]
fn errors_name_the_field_path() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "v1alpha2 Workflow",
            "apiVersion: tinkerbell.org/v1alpha2\nkind: Workflow\nmetadata: {name: w}\nspec:\n  hardwareRef: {name: h}\n  templateRef: {name: t}\n  timeout: ninety minutes\n",
            "spec.timeout",
        ),
        (
            "v1alpha2 Template",
            "apiVersion: tinkerbell.org/v1alpha2\nkind: Template\nmetadata: {name: t}\nspec:\n  actions:\n    - name: a\n      image: i\n    - name: b\n      image: [not, a, string]\n",
            "spec.actions[1].image",
        ),
        (
            "v1alpha2 Hardware",
            "apiVersion: tinkerbell.org/v1alpha2\nkind: Hardware\nmetadata: {name: h}\nspec:\n  networkInterfaces:\n    \"00:00:5e:00:53:01\":\n      dhcp:\n        leaseTime: a day\n",
            "spec.networkInterfaces.00:00:5e:00:53:01.dhcp.leaseTime",
        ),
        (
            "v1alpha2 Workflow status",
            "apiVersion: tinkerbell.org/v1alpha2\nkind: Workflow\nmetadata: {name: w}\nspec:\n  hardwareRef: {name: h}\n  templateRef: {name: t}\nstatus:\n  state: Exploded\n",
            "status.state",
        ),
        (
            "v1alpha2 Workflow condition",
            "apiVersion: tinkerbell.org/v1alpha2\nkind: Workflow\nmetadata: {name: w}\nspec:\n  hardwareRef: {name: h}\n  templateRef: {name: t}\nstatus:\n  conditions:\n    - {type: Started, status: Maybe}\n",
            "status.conditions[0].status",
        ),
        (
            "v1alpha2 Workflow ref without a name",
            "apiVersion: tinkerbell.org/v1alpha2\nkind: Workflow\nmetadata: {name: w}\nspec:\n  hardwareRef: {}\n  templateRef: {name: t}\n",
            "spec.hardwareRef",
        ),
    ];
    for (what, yaml, path) in cases {
        let err = match *what {
            w if w.contains("Workflow") => from_yaml::<v1alpha2::Workflow>(yaml).map(|_| ()),
            w if w.contains("Template") => from_yaml::<v1alpha2::Template>(yaml).map(|_| ()),
            _ => from_yaml::<v1alpha2::Hardware>(yaml).map(|_| ()),
        }
        .expect_err(what);
        assert_eq!(err.path, *path, "{what}: {err}");
        assert!(
            err.to_string().starts_with(path),
            "{what}: message names the path: {err}"
        );
    }

    let v1 = "apiVersion: tinkerbell.org/v1alpha1\nkind: Hardware\nmetadata: {name: h}\nspec:\n  interfaces:\n    - dhcp:\n        mac: 00:00:5e:00:53:01\n        uefi: sometimes\n";
    let err = from_yaml::<v1alpha1::Hardware>(v1).expect_err("uefi");
    assert_eq!(err.path, "spec.interfaces[0].dhcp.uefi");

    let err = from_json::<v1alpha2::Osie>("{\"apiVersion\":\"tinkerbell.org/v1alpha2\",\"kind\":\"OSIE\",\"metadata\":{},\"spec\":{\"kernelUrl\":5}}")
        .expect_err("kernelUrl");
    assert_eq!(err.path, "spec.kernelUrl");

    let err = from_yaml::<v1alpha2::Hardware>("spec: [unclosed").expect_err("syntax");
    assert!(!err.message.is_empty());
}

#[test]
fn conversion_of_malformed_objects_names_the_path() {
    let mut wf: Value =
        serde_yaml::from_str(&fixture_text("v1alpha1/workflow.yaml")).expect("yaml");
    wf["status"]["tasks"][0]["actions"][1]["startedAt"] = json!("yesterday");
    match conversion::convert(wf, "tinkerbell.org/v1alpha2") {
        Err(ConversionError::Invalid { kind, source, .. }) => {
            assert_eq!(kind, "Workflow");
            assert_eq!(source.path, "status.tasks[0].actions[1].startedAt");
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
}

/// Every leaf path of a JSON value.
fn leaves(v: &Value, prefix: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => m.iter().for_each(|(k, c)| {
            leaves(
                c,
                format!("{prefix}/{}", k.replace('~', "~0").replace('/', "~1")),
                out,
            )
        }),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, c)| leaves(c, format!("{prefix}/{i}"), out)),
        _ => out.push(prefix),
    }
}

fn fixtures() -> Vec<Value> {
    [
        "v1alpha1/hardware.yaml",
        "v1alpha1/template-ubuntu.yaml",
        "v1alpha1/workflow.yaml",
        "v1alpha2/hardware.yaml",
        "v1alpha2/template.yaml",
        "v1alpha2/workflow.yaml",
        "v1alpha2/osie.yaml",
    ]
    .iter()
    .map(|f| serde_yaml::from_str(&fixture_text(f)).expect("yaml"))
    .collect()
}

fn junk() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        Just(json!(-1)),
        Just(json!(1e300)),
        Just(json!(u64::MAX)),
        Just(json!(true)),
        Just(json!("")),
        Just(json!("{{ if }}")),
        Just(json!("STATE_?")),
        Just(json!([])),
        Just(json!([null, {"a": 1}])),
        Just(json!({})),
        Just(json!({"k=x": 1, "#order": "x"})),
        Just(
            json!({"v1alpha1": [{"path": ["spec"], "value": 5}]})
                .to_string()
                .into()
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::with_cases(2_000) })]

    /// Replace one leaf (or one whole object) of a valid fixture with junk: converting it either
    /// works or fails with a path, and never panics.
    #[test]
    fn junk_anywhere_never_panics(which in 0usize..7, pick in any::<prop::sample::Index>(), value in junk(), whole in any::<bool>()) {
        let mut obj = fixtures().swap_remove(which);
        let mut paths = Vec::new();
        leaves(&obj, String::new(), &mut paths);
        let mut path = pick.get(&paths).clone();
        if whole
            && let Some((parent, _)) = path.rsplit_once('/')
                && !parent.is_empty() { path = parent.to_string(); }
        if let Some(slot) = obj.pointer_mut(&path) {
            *slot = value;
        }
        let api_version = obj["apiVersion"].as_str().unwrap_or_default().to_string();
        let desired = if api_version.ends_with("v1alpha1") { "tinkerbell.org/v1alpha2" } else { "tinkerbell.org/v1alpha1" };
        match conversion::convert(obj.clone(), desired) {
            Ok(out) => {
                // and the converted object converts back
                prop_assert!(conversion::convert(out, &api_version).is_ok());
            }
            Err(ConversionError::Invalid { source, .. }) => prop_assert!(!source.path.is_empty()),
            Err(_) => {}
        }
        let _ = from_value::<v1alpha2::Workflow>(obj.clone());
        let _ = from_value::<v1alpha1::Template>(obj);
    }
}
