//! The generated CRDs: up to date in deploy/crds, the expected shape, and every validation rule
//! checked against objects that break it (patterns with the `regex` crate, CEL rules with
//! kube-cel, the evaluator the test API server uses too).

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;

use common::fixture;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};
use tink_api::v1alpha2::{patterns, rules};
use tink_api::{ConversionWebhook, REGENERATE_COMMAND, v1alpha1, v1alpha2};

fn deploy_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds")
}

#[test]
fn deploy_crds_are_up_to_date() {
    let files = tink_api::render_crds(&ConversionWebhook::default()).expect("render");
    let mut stale = Vec::new();
    for (name, yaml) in &files {
        match std::fs::read_to_string(deploy_dir().join(name)) {
            Ok(on_disk) if &on_disk == yaml => {}
            Ok(_) => stale.push(format!("{name} differs")),
            Err(e) => stale.push(format!("{name}: {e}")),
        }
    }
    let expected: BTreeSet<_> = files.iter().map(|(n, _)| n.clone()).collect();
    if let Ok(entries) = std::fs::read_dir(deploy_dir()) {
        for e in entries.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.ends_with(".yaml") && !expected.contains(&n) {
                stale.push(format!("{n} is not generated any more"));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "deploy/crds is stale ({}); regenerate with `{REGENERATE_COMMAND}`",
        stale.join(", ")
    );
}

fn crd(name: &str) -> CustomResourceDefinition {
    tink_api::crds(&ConversionWebhook::default())
        .expect("crds")
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no CRD {name}"))
}

fn schema(name: &str, version: &str) -> Value {
    let c = crd(name);
    let v = c
        .spec
        .versions
        .iter()
        .find(|v| v.name == version)
        .expect("version");
    let s = v
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("schema");
    serde_json::to_value(s).expect("json")
}

#[test]
fn cluster_api_crds_carry_the_contract_labels_and_a_status_subresource() {
    for (name, kind, short, status) in [
        (
            "tinkerbellclusters.infrastructure.cluster.x-k8s.io",
            "TinkerbellCluster",
            "tc",
            true,
        ),
        (
            "tinkerbellmachines.infrastructure.cluster.x-k8s.io",
            "TinkerbellMachine",
            "tm",
            true,
        ),
        (
            "tinkerbellmachinetemplates.infrastructure.cluster.x-k8s.io",
            "TinkerbellMachineTemplate",
            "tmt",
            false,
        ),
    ] {
        let c = crd(name);
        assert_eq!(c.spec.group, tink_api::capi::GROUP);
        assert_eq!(c.spec.names.kind, kind);
        assert_eq!(
            c.spec.names.short_names.as_deref(),
            Some(&[short.to_string()][..])
        );
        assert_eq!(
            c.spec.names.categories.as_deref(),
            Some(&["cluster-api".to_string()][..])
        );
        let labels = c.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get("cluster.x-k8s.io/v1beta2").map(String::as_str),
            Some("v1beta1"),
            "{name}"
        );
        assert_eq!(
            labels.get("cluster.x-k8s.io/v1beta1").map(String::as_str),
            Some("v1beta1"),
            "{name}"
        );
        let versions: Vec<_> = c
            .spec
            .versions
            .iter()
            .map(|v| (v.name.as_str(), v.served, v.storage))
            .collect();
        assert_eq!(versions, [("v1beta1", true, true)], "{name}");
        assert!(
            c.spec.conversion.is_none(),
            "{name}: one version, no conversion"
        );
        let has_status = c.spec.versions[0]
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some();
        assert_eq!(has_status, status, "{name}");
    }
    let tm = schema(
        "tinkerbellmachines.infrastructure.cluster.x-k8s.io",
        "v1beta1",
    );
    let status = &tm["properties"]["status"]["properties"];
    for field in ["initialization", "ready", "addresses", "conditions"] {
        assert!(
            status[field].is_object(),
            "TinkerbellMachine status.{field}"
        );
    }
    let tc = schema(
        "tinkerbellclusters.infrastructure.cluster.x-k8s.io",
        "v1beta1",
    );
    let port =
        &tc["properties"]["spec"]["properties"]["controlPlaneEndpoint"]["properties"]["port"];
    assert_eq!(port["default"], 6443);
    let tmt = schema(
        "tinkerbellmachinetemplates.infrastructure.cluster.x-k8s.io",
        "v1beta1",
    );
    assert!(tmt["properties"]["spec"]["properties"]["template"]["properties"]["spec"]["properties"]["hardwareAffinity"].is_object());
}

#[test]
fn crd_shape() {
    let cases = [
        ("hardware.tinkerbell.org", "Hardware", "hw", true),
        ("osies.tinkerbell.org", "OSIE", "osie", false),
        ("templates.tinkerbell.org", "Template", "tpl", true),
        ("workflows.tinkerbell.org", "Workflow", "wf", true),
    ];
    for (name, kind, short, converts) in cases {
        let c = crd(name);
        assert_eq!(c.spec.group, "tinkerbell.org");
        assert_eq!(c.spec.names.kind, kind);
        assert_eq!(
            c.spec.names.short_names.as_deref(),
            Some(&[short.to_string()][..]),
            "{name}"
        );
        assert_eq!(
            c.spec.names.categories.as_deref(),
            Some(&["tinkerbell".to_string()][..]),
            "{name}"
        );
        assert_eq!(c.spec.scope, "Namespaced");
        let versions: Vec<_> = c
            .spec
            .versions
            .iter()
            .map(|v| (v.name.as_str(), v.served, v.storage))
            .collect();
        if converts {
            assert_eq!(
                versions,
                [("v1alpha2", true, true), ("v1alpha1", true, false)],
                "{name}"
            );
            let conv = c.spec.conversion.as_ref().expect("conversion");
            assert_eq!(conv.strategy, "Webhook");
            let svc = conv
                .webhook
                .as_ref()
                .and_then(|w| w.client_config.as_ref())
                .and_then(|c| c.service.as_ref())
                .expect("service reference");
            assert_eq!(
                (svc.namespace.as_str(), svc.name.as_str()),
                ("tink-system", "tink-webhook")
            );
            assert_eq!(svc.path.as_deref(), Some("/convert"));
            assert_eq!(svc.port, Some(443));
        } else {
            assert_eq!(versions, [("v1alpha2", true, true)], "{name}");
            assert!(c.spec.conversion.is_none());
        }
    }
    let wf = crd("workflows.tinkerbell.org");
    for v in &wf.spec.versions {
        assert!(
            v.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "status subresource on {}",
            v.name
        );
    }
    let cols: Vec<_> = wf.spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| (c.name.as_str(), c.json_path.as_str()))
        .collect();
    for want in [
        ("State", ".status.state"),
        ("Hardware", ".spec.hardwareRef.name"),
        ("Template", ".spec.templateRef.name"),
        ("Age", ".metadata.creationTimestamp"),
    ] {
        assert!(cols.contains(&want), "Workflow column {want:?} in {cols:?}");
    }
    let hw = crd("hardware.tinkerbell.org");
    let cols: Vec<_> = hw.spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert!(
        cols.contains(&"IP") && cols.contains(&"Hostname"),
        "{cols:?}"
    );
}

/// One violation of a structural rule: where, and which rule.
#[derive(Debug, Clone, PartialEq)]
struct Violation {
    path: String,
    rule: String,
}

/// A small validator for the OpenAPI subset our schemas use (types, properties, items,
/// additionalProperties, required, pattern, min/max length/items/properties, minimum).
fn structural(schema: &Value, value: &Value, path: &str, out: &mut Vec<Violation>) {
    let mut v = |rule: String| {
        out.push(Violation {
            path: path.to_string(),
            rule,
        })
    };
    if value.is_null() {
        if schema.get("nullable") != Some(&json!(true))
            && schema.get("x-kubernetes-preserve-unknown-fields").is_none()
        {
            v("nullable".into());
        }
        return;
    }
    let ty = schema.get("type").and_then(Value::as_str);
    let type_ok = match ty {
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        _ => true,
    };
    if !type_ok {
        v(format!("type {}", ty.unwrap_or("?")));
        return;
    }
    if let (Some(p), Some(s)) = (
        schema.get("pattern").and_then(Value::as_str),
        value.as_str(),
    ) {
        let re =
            regex::Regex::new(p).unwrap_or_else(|e| panic!("pattern {p} does not compile: {e}"));
        if !re.is_match(s) {
            v(format!("pattern {p}"));
        }
    }
    if let (Some(m), Some(s)) = (
        schema.get("minLength").and_then(Value::as_u64),
        value.as_str(),
    ) && (s.chars().count() as u64) < m
    {
        v(format!("minLength {m}"));
    }
    if let (Some(m), Some(n)) = (
        schema.get("minimum").and_then(Value::as_f64),
        value.as_f64(),
    ) && n < m
    {
        v(format!("minimum {m}"));
    }
    if let Some(items) = value.as_array() {
        if let Some(m) = schema.get("minItems").and_then(Value::as_u64)
            && (items.len() as u64) < m
        {
            v(format!("minItems {m}"));
        }
        if let Some(m) = schema.get("maxItems").and_then(Value::as_u64)
            && (items.len() as u64) > m
        {
            v(format!("maxItems {m}"));
        }
        if let Some(item_schema) = schema.get("items") {
            for (i, item) in items.iter().enumerate() {
                structural(item_schema, item, &format!("{path}[{i}]"), out);
            }
        }
    }
    if let Some(obj) = value.as_object() {
        if let Some(m) = schema.get("minProperties").and_then(Value::as_u64)
            && (obj.len() as u64) < m
        {
            out.push(Violation {
                path: path.into(),
                rule: format!("minProperties {m}"),
            });
        }
        for req in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(r) = req.as_str()
                && !obj.contains_key(r)
            {
                out.push(Violation {
                    path: path.into(),
                    rule: format!("required {r}"),
                });
            }
        }
        let props = schema.get("properties").and_then(Value::as_object);
        for (k, child) in obj {
            let child_path = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            if let Some(s) = props.and_then(|p| p.get(k)) {
                structural(s, child, &child_path, out);
            } else if let Some(s) = schema.get("additionalProperties").filter(|s| s.is_object()) {
                structural(s, child, &child_path, out);
            } else if path.is_empty() && ["apiVersion", "kind", "metadata"].contains(&k.as_str()) {
                // implicit in every CRD schema
            } else if props.is_some()
                && schema.get("x-kubernetes-preserve-unknown-fields").is_none()
            {
                out.push(Violation {
                    path: child_path,
                    rule: "unknown field (pruned)".into(),
                });
            }
        }
    }
}

fn violations(schema: &Value, obj: &Value, old: Option<&Value>) -> Vec<Violation> {
    let mut out = Vec::new();
    structural(schema, obj, "", &mut out);
    if let Err(errors) = kube_cel::Validator::new().validate(schema, obj, old) {
        for e in errors.iter() {
            out.push(Violation {
                path: e.field_path.clone(),
                rule: format!("cel {}", e.message),
            });
        }
    }
    out
}

fn json_fixture<T: serde::de::DeserializeOwned + serde::Serialize>(rel: &str) -> Value {
    serde_json::to_value(fixture::<T>(rel)).expect("json")
}

#[test]
fn valid_fixtures_satisfy_every_rule() {
    let cases: Vec<(&str, &str, Value)> = vec![
        (
            "hardware.tinkerbell.org",
            "v1alpha2",
            json_fixture::<v1alpha2::Hardware>("v1alpha2/hardware.yaml"),
        ),
        (
            "osies.tinkerbell.org",
            "v1alpha2",
            json_fixture::<v1alpha2::Osie>("v1alpha2/osie.yaml"),
        ),
        (
            "templates.tinkerbell.org",
            "v1alpha2",
            json_fixture::<v1alpha2::Template>("v1alpha2/template.yaml"),
        ),
        (
            "workflows.tinkerbell.org",
            "v1alpha2",
            json_fixture::<v1alpha2::Workflow>("v1alpha2/workflow.yaml"),
        ),
        (
            "hardware.tinkerbell.org",
            "v1alpha1",
            json_fixture::<v1alpha1::Hardware>("v1alpha1/hardware.yaml"),
        ),
        (
            "templates.tinkerbell.org",
            "v1alpha1",
            json_fixture::<v1alpha1::Template>("v1alpha1/template-ubuntu.yaml"),
        ),
        (
            "workflows.tinkerbell.org",
            "v1alpha1",
            json_fixture::<v1alpha1::Workflow>("v1alpha1/workflow.yaml"),
        ),
        // conversion output is valid v1alpha2 too
        (
            "hardware.tinkerbell.org",
            "v1alpha2",
            serde_json::to_value(tink_api::conversion::hardware_to_v1alpha2(&fixture(
                "v1alpha1/hardware.yaml",
            )))
            .expect("json"),
        ),
        (
            "templates.tinkerbell.org",
            "v1alpha2",
            serde_json::to_value(tink_api::conversion::template_to_v1alpha2(&fixture(
                "v1alpha1/template-ubuntu.yaml",
            )))
            .expect("json"),
        ),
        (
            "workflows.tinkerbell.org",
            "v1alpha2",
            serde_json::to_value(tink_api::conversion::workflow_to_v1alpha2(&fixture(
                "v1alpha1/workflow.yaml",
            )))
            .expect("json"),
        ),
    ];
    for (name, version, obj) in cases {
        let s = schema(name, version);
        let v = violations(&s, &obj, Some(&obj));
        assert!(v.is_empty(), "{name} {version}: {v:?}");
    }
}

#[derive(Debug)]
enum Rule {
    /// A schema `pattern`, given as the constant it must be generated from.
    Pattern(&'static str),
    /// Any other structural keyword, e.g. "minItems 1".
    Keyword(&'static str),
    /// A CEL rule (with its message).
    Cel(&'static str, &'static str),
}

struct Case {
    what: &'static str,
    crd: &'static str,
    base: Value,
    /// (JSON pointer, new value; Null removes)
    edit: Vec<(&'static str, Value)>,
    /// The old object for transition rules: the base.
    update: bool,
    breaks: Rule,
    at: &'static str,
}

fn edited(base: &Value, edits: &[(&str, Value)]) -> Value {
    let mut v = base.clone();
    for (ptr, new) in edits {
        let (parent, key) = ptr.rsplit_once('/').expect("pointer");
        let key = key.replace("~1", "/").replace("~0", "~");
        let p = v
            .pointer_mut(parent)
            .unwrap_or_else(|| panic!("no {parent}"));
        match p {
            Value::Object(m) if new.is_null() => {
                m.remove(&key);
            }
            Value::Object(m) => {
                m.insert(key, new.clone());
            }
            Value::Array(a) => {
                let i: usize = key.parse().expect("index");
                a[i] = new.clone();
            }
            other => panic!("cannot edit {other}"),
        }
    }
    v
}

#[test]
fn objects_breaking_each_rule_are_rejected_by_that_rule() {
    let hw = json_fixture::<v1alpha2::Hardware>("v1alpha2/hardware.yaml");
    let tpl = json_fixture::<v1alpha2::Template>("v1alpha2/template.yaml");
    let wf = json_fixture::<v1alpha2::Workflow>("v1alpha2/workflow.yaml");
    let hwc = "hardware.tinkerbell.org";
    let tplc = "templates.tinkerbell.org";
    let wfc = "workflows.tinkerbell.org";
    let nic = "/spec/networkInterfaces/3c:ec:ef:4c:4f:56/dhcp";
    let h = |what, edit, breaks, at| Case {
        what,
        crd: hwc,
        base: hw.clone(),
        edit,
        update: false,
        breaks,
        at,
    };
    let t = |what, edit, breaks, at| Case {
        what,
        crd: tplc,
        base: tpl.clone(),
        edit,
        update: false,
        breaks,
        at,
    };
    let w = |what, edit, update, breaks, at| Case {
        what,
        crd: wfc,
        base: wf.clone(),
        edit,
        update,
        breaks,
        at,
    };
    let nic_at = "spec.networkInterfaces.3c:ec:ef:4c:4f:56.dhcp";
    let cases = vec![
        h(
            "IP out of range",
            vec![(leak(format!("{nic}/ip")), json!("300.1.1.1"))],
            Rule::Pattern(patterns::IPV4),
            leak(format!("{nic_at}.ip")),
        ),
        h(
            "IP with a suffix",
            vec![(leak(format!("{nic}/ip")), json!("10.0.0.1/24"))],
            Rule::Pattern(patterns::IPV4),
            leak(format!("{nic_at}.ip")),
        ),
        h(
            "gateway with three octets",
            vec![(leak(format!("{nic}/gateway")), json!("10.0.0"))],
            Rule::Pattern(patterns::IPV4),
            leak(format!("{nic_at}.gateway")),
        ),
        h(
            "netmask with a hole",
            vec![(leak(format!("{nic}/netmask")), json!("255.0.255.1"))],
            Rule::Pattern(patterns::NETMASK),
            leak(format!("{nic_at}.netmask")),
        ),
        h(
            "hostname starting with a dash",
            vec![(leak(format!("{nic}/hostname")), json!("-sm02.example"))],
            Rule::Pattern(patterns::HOSTNAME),
            leak(format!("{nic_at}.hostname")),
        ),
        h(
            "VLAN above 4096",
            vec![(leak(format!("{nic}/vlanId")), json!("4097"))],
            Rule::Pattern(patterns::VLAN_ID),
            leak(format!("{nic_at}.vlanId")),
        ),
        h(
            "VLAN with five digits",
            vec![(leak(format!("{nic}/vlanId")), json!("12345"))],
            Rule::Pattern(patterns::VLAN_ID),
            leak(format!("{nic_at}.vlanId")),
        ),
        h(
            "nameserver with a space",
            vec![(leak(format!("{nic}/nameservers")), json!(["dns example"]))],
            Rule::Pattern(patterns::HOST_OR_IPV4),
            leak(format!("{nic_at}.nameservers[0]")),
        ),
        h(
            "timeserver with an underscore",
            vec![(leak(format!("{nic}/timeservers")), json!(["ntp_1"]))],
            Rule::Pattern(patterns::HOST_OR_IPV4),
            leak(format!("{nic_at}.timeservers[0]")),
        ),
        h(
            "negative lease time",
            vec![(leak(format!("{nic}/leaseTime")), json!(-1))],
            Rule::Keyword("minimum 0"),
            leak(format!("{nic_at}.leaseTime")),
        ),
        h(
            "relative storage device",
            vec![("/spec/storageDevices", json!(["dev/sda"]))],
            Rule::Pattern(patterns::STORAGE_DEVICE),
            "spec.storageDevices[0]",
        ),
        h(
            "storage device with a space",
            vec![("/spec/storageDevices", json!(["/dev/sd a"]))],
            Rule::Pattern(patterns::STORAGE_DEVICE),
            "spec.storageDevices[0]",
        ),
        h(
            "no network interface",
            vec![("/spec/networkInterfaces", json!({}))],
            Rule::Keyword("minProperties 1"),
            "spec.networkInterfaces",
        ),
        h(
            "network interfaces given but empty",
            vec![("/spec/networkInterfaces", json!({}))],
            Rule::Keyword("minProperties 1"),
            "spec.networkInterfaces",
        ),
        h(
            "upper-case MAC key",
            vec![("/spec/networkInterfaces", json!({"3C:EC:EF:4C:4F:56": {}}))],
            Rule::Cel(rules::MAC_KEYS, rules::MAC_KEYS_MSG),
            "spec.networkInterfaces",
        ),
        h(
            "MAC key with dashes",
            vec![("/spec/networkInterfaces", json!({"3c-ec-ef-4c-4f-56": {}}))],
            Rule::Cel(rules::MAC_KEYS, rules::MAC_KEYS_MSG),
            "spec.networkInterfaces",
        ),
        h(
            "ipxe inline and url",
            vec![(
                "/spec/ipxe",
                json!({"inline": "#!ipxe\nboot", "url": "http://x/a.ipxe"}),
            )],
            Rule::Cel(rules::IPXE_ONE_OF, rules::IPXE_ONE_OF_MSG),
            "spec.ipxe",
        ),
        h(
            "ipxe with neither",
            vec![("/spec/ipxe", json!({}))],
            Rule::Keyword("minProperties 1"),
            "spec.ipxe",
        ),
        t(
            "no action",
            vec![("/spec/actions", json!([]))],
            Rule::Keyword("minItems 1"),
            "spec.actions",
        ),
        t(
            "actions given but empty",
            vec![("/spec/actions", json!([]))],
            Rule::Keyword("minItems 1"),
            "spec.actions",
        ),
        t(
            "actions and a converted v1alpha1 document",
            vec![("/spec/v1alpha1Data", json!("version: '0.1'\ntasks: []\n"))],
            Rule::Cel(rules::ACTIONS_OR_DATA, rules::ACTIONS_OR_DATA_MSG),
            "spec",
        ),
        t(
            "duplicate action names",
            vec![("/spec/actions/1/name", json!("stream-image"))],
            Rule::Cel(rules::UNIQUE_ACTION_NAMES, rules::UNIQUE_ACTION_NAMES_MSG),
            "spec.actions",
        ),
        t(
            "timeout in words",
            vec![("/spec/actions/0/timeout", json!("10 minutes"))],
            Rule::Pattern(patterns::TIMEOUT),
            "spec.actions[0].timeout",
        ),
        t(
            "timeout without unit",
            vec![("/spec/actions/0/timeout", json!("600"))],
            Rule::Pattern(patterns::TIMEOUT),
            "spec.actions[0].timeout",
        ),
        t(
            "empty action name",
            vec![("/spec/actions/0/name", json!(""))],
            Rule::Keyword("minLength 1"),
            "spec.actions[0].name",
        ),
        t(
            "action without image",
            vec![("/spec/actions/0/image", Value::Null)],
            Rule::Keyword("required image"),
            "spec.actions[0]",
        ),
        w(
            "isoboot without isoURL",
            vec![("/spec/bootOptions", json!({"bootMode": "isoboot"}))],
            false,
            Rule::Cel(rules::ISO_URL_REQUIRED, rules::ISO_URL_REQUIRED_MSG),
            "spec.bootOptions",
        ),
        w(
            "isoURL with netboot",
            vec![(
                "/spec/bootOptions",
                json!({"bootMode": "netboot", "isoURL": "http://10.0.0.1/hook.iso"}),
            )],
            false,
            Rule::Cel(rules::ISO_URL_ONLY_ISOBOOT, rules::ISO_URL_ONLY_ISOBOOT_MSG),
            "spec.bootOptions",
        ),
        w(
            "isoURL that is not http",
            vec![(
                "/spec/bootOptions",
                json!({"bootMode": "isoboot", "isoURL": "nfs://10.0.0.1/hook.iso"}),
            )],
            false,
            Rule::Pattern(v1alpha2::ISO_URL_PATTERN),
            "spec.bootOptions.isoURL",
        ),
        w(
            "customboot without config",
            vec![("/spec/bootOptions", json!({"bootMode": "customboot"}))],
            false,
            Rule::Cel(
                rules::CUSTOMBOOT_CONFIG_REQUIRED,
                rules::CUSTOMBOOT_CONFIG_REQUIRED_MSG,
            ),
            "spec.bootOptions",
        ),
        w(
            "customboot config without customboot",
            vec![(
                "/spec/bootOptions",
                json!({"custombootConfig": {"preparingActions": [{"powerAction": "on"}]}}),
            )],
            false,
            Rule::Cel(
                rules::CUSTOMBOOT_CONFIG_ONLY_CUSTOMBOOT,
                rules::CUSTOMBOOT_CONFIG_ONLY_CUSTOMBOOT_MSG,
            ),
            "spec.bootOptions",
        ),
        w(
            "customboot action with two operations",
            vec![(
                "/spec/bootOptions",
                json!({"bootMode": "customboot", "custombootConfig": {"preparingActions": [
                    {"powerAction": "on", "oneTimeBootDeviceAction": {"device": ["pxe"]}}]}}),
            )],
            false,
            Rule::Cel(
                tink_api::bmc::rules::ONE_ACTION,
                tink_api::bmc::rules::ONE_ACTION_MSG,
            ),
            "spec.bootOptions.custombootConfig.preparingActions[0]",
        ),
        w(
            "negative timeout",
            vec![("/spec/timeout", json!("-5m"))],
            false,
            Rule::Pattern(patterns::TIMEOUT),
            "spec.timeout",
        ),
        w(
            "empty hardware name",
            vec![("/spec/hardwareRef/name", json!(""))],
            false,
            Rule::Keyword("minLength 1"),
            "spec.hardwareRef.name",
        ),
        w(
            "template reference removed",
            vec![("/spec/templateRef", Value::Null)],
            true,
            Rule::Cel(
                rules::TEMPLATE_REF_PRESENCE,
                rules::TEMPLATE_REF_PRESENCE_MSG,
            ),
            "spec",
        ),
        w(
            "hardware reference removed",
            vec![("/spec/hardwareRef", Value::Null)],
            true,
            Rule::Cel(
                rules::HARDWARE_REF_PRESENCE,
                rules::HARDWARE_REF_PRESENCE_MSG,
            ),
            "spec",
        ),
        w(
            "hardwareRef changed",
            vec![("/spec/hardwareRef/name", json!("sm03"))],
            true,
            Rule::Cel(rules::IMMUTABLE, rules::HARDWARE_REF_IMMUTABLE_MSG),
            "spec.hardwareRef",
        ),
        w(
            "templateRef changed",
            vec![("/spec/templateRef/name", json!("other"))],
            true,
            Rule::Cel(rules::IMMUTABLE, rules::TEMPLATE_REF_IMMUTABLE_MSG),
            "spec.templateRef",
        ),
        w(
            "templateData changed",
            vec![("/spec/templateData/img_url", json!("http://elsewhere"))],
            true,
            Rule::Cel(rules::IMMUTABLE, rules::TEMPLATE_DATA_IMMUTABLE_MSG),
            "spec.templateData",
        ),
        w(
            "templateData removed",
            vec![("/spec/templateData", Value::Null)],
            true,
            Rule::Cel(
                rules::TEMPLATE_DATA_PRESENCE,
                rules::TEMPLATE_DATA_PRESENCE_MSG,
            ),
            "spec",
        ),
    ];
    let mut failures = Vec::new();
    for c in cases {
        let s = schema(c.crd, "v1alpha2");
        let bad = edited(&c.base, &c.edit);
        let old = c.update.then_some(&c.base);
        let found = violations(&s, &bad, old);
        let (expected_rule, in_schema) = match &c.breaks {
            Rule::Pattern(p) => (
                format!("pattern {p}"),
                schema_contains(&s, "pattern", &json!(p)),
            ),
            Rule::Keyword(k) => (k.to_string(), true),
            Rule::Cel(rule, msg) => (
                format!("cel {msg}"),
                schema_contains(&s, "rule", &json!(rule)),
            ),
        };
        if !in_schema {
            failures.push(format!(
                "{}: the generated schema does not hold {:?}",
                c.what, c.breaks
            ));
        }
        let hit = found.iter().any(|v| {
            v.rule == expected_rule
                && (v.path == c.at
                    || (!v.path.is_empty() && (v.path.ends_with(c.at) || c.at.ends_with(&v.path))))
        });
        if !hit {
            failures.push(format!(
                "{}: expected `{expected_rule}` at {}, got {found:?}",
                c.what, c.at
            ));
        }
        // and the untouched base object passes the same checks
        let base_violations = violations(&s, &c.base, old);
        if !base_violations.is_empty() {
            failures.push(format!(
                "{}: base object invalid: {base_violations:?}",
                c.what
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

fn schema_contains(schema: &Value, key: &str, wanted: &Value) -> bool {
    match schema {
        Value::Object(m) => {
            m.get(key) == Some(wanted) || m.values().any(|v| schema_contains(v, key, wanted))
        }
        Value::Array(a) => a.iter().any(|v| schema_contains(v, key, wanted)),
        _ => false,
    }
}

#[test]
fn patterns_accept_good_and_refuse_bad_values() {
    let table: &[(&str, &[&str], &[&str])] = &[
        (
            patterns::IPV4,
            &["192.168.2.148", "10.0.0.1", "255.255.255.255", "0.0.0.0"],
            &["256.1.1.1", "1.2.3", "1.2.3.4.5", "a.b.c.d", "1.2.3.4 "],
        ),
        (
            patterns::NETMASK,
            &["255.255.255.0", "255.255.0.0", "255.255.255.252"],
            &["255.255.255.1", "254.0.0.0", "255.255.255"],
        ),
        (
            patterns::HOSTNAME,
            &["sm01", "sm01.example.com", "a-b.c"],
            &["-a", "a-", "a..b", "a_b", ""],
        ),
        (
            patterns::VLAN_ID,
            &["0", "10", "4096", "10,20,4000"],
            &["4097", "12345", "-1", "10,", "a"],
        ),
        (
            patterns::HOST_OR_IPV4,
            &["1.1.1.1", "dns.example.com", "ntp"],
            &["1.1.1.1.1.1 x", "dns example", "a_b"],
        ),
        (
            patterns::MAC,
            &["3c:ec:ef:4c:4f:54", "00:00:5e:00:53:01"],
            &["3C:EC:EF:4C:4F:54", "3c-ec-ef-4c-4f-54", "3c:ec:ef:4c:4f"],
        ),
        (
            patterns::STORAGE_DEVICE,
            &["/dev/sda", "/dev/nvme0n1", "/dev/disk/by-id/x/"],
            &["dev/sda", "\\dev\\sda", "/dev/sd a"],
        ),
        (
            v1alpha2::ISO_URL_PATTERN,
            &[
                "http://10.0.0.1/hook.iso",
                "https://boot.example.com:8443/iso/hook.iso?arch=x86_64",
                "http://10.0.0.1:7171",
            ],
            &[
                "ftp://a/b.iso",
                "/srv/hook.iso",
                "http://",
                "http:///x.iso",
                "http://a b/c.iso",
            ],
        ),
        (
            patterns::TIMEOUT,
            &["0", "90m", "1h30m", "45s", "1.5h", "500ms", "2us", "3µs"],
            &["", "10", "-5m", "5 m", "1d", "h"],
        ),
    ];
    for (p, good, bad) in table {
        let re = regex::Regex::new(p).expect("compiles");
        for g in *good {
            assert!(re.is_match(g), "{p} should accept {g:?}");
        }
        for b in *bad {
            assert!(!re.is_match(b), "{p} should refuse {b:?}");
        }
    }
    // Every Timeout the pattern accepts parses, and vice versa.
    let re = regex::Regex::new(patterns::TIMEOUT).expect("compiles");
    for s in ["0", "90m", "1h30m", "1.5h", "500ms", "10", "-5m", "1d"] {
        assert_eq!(re.is_match(s), tink_api::Timeout::parse(s).is_ok(), "{s}");
    }
}

fn rule_nodes<'a>(schema: &'a Value, path: String, out: &mut Vec<(String, &'a Value)>) {
    if let Value::Object(m) = schema {
        if m.contains_key("x-kubernetes-validations") {
            out.push((path.clone(), schema));
        }
        for (k, v) in m {
            rule_nodes(v, format!("{path}/{k}"), out);
        }
    }
}

/// The API server refuses CRDs whose CEL rules may cost more than its budget or reference
/// variables outside the CRD scope; kube-cel's static analysis mirrors those checks.
#[test]
fn cel_rules_compile_and_stay_within_the_cost_budget() {
    let comprehension =
        regex::Regex::new(r"\b(?:all|exists|exists_one|map|filter)\((\w+),").expect("regex");
    let mut checked = 0;
    for c in tink_api::crds(&ConversionWebhook::default()).expect("crds") {
        for v in &c.spec.versions {
            let s = serde_json::to_value(
                v.schema
                    .as_ref()
                    .and_then(|s| s.open_api_v3_schema.as_ref()),
            )
            .expect("json");
            let mut nodes = Vec::new();
            rule_nodes(&s, String::new(), &mut nodes);
            for (path, node) in nodes {
                let compiled = kube_cel::compile_schema(node);
                assert!(
                    !compiled.has_errors(),
                    "{} {path}: {:?}",
                    v.name,
                    compiled.compilation_errors()
                );
                for r in node["x-kubernetes-validations"].as_array().expect("rules") {
                    let rule = r["rule"].as_str().expect("rule");
                    // Comprehension variables (`self.all(mac, ...)`) are bound by the macro;
                    // kube-cel's scope check reports them as unknown, so they are excused here.
                    let bound: Vec<String> = comprehension
                        .captures_iter(rule)
                        .map(|c| c[1].to_string())
                        .collect();
                    let warnings: Vec<_> = kube_cel::analyze_rule(
                        rule,
                        &compiled,
                        kube_cel::ScopeContext::CrdValidation,
                    )
                    .into_iter()
                    .filter(|w| {
                        !(w.kind == kube_cel::WarningKind::WrongScope
                            && bound.iter().any(|b| w.message.contains(&format!("'{b}'"))))
                    })
                    .collect();
                    assert!(
                        warnings.is_empty(),
                        "{} {path} `{rule}`: {warnings:?}",
                        v.name
                    );
                    checked += 1;
                }
            }
        }
    }
    // 10 in the tinkerbell.org kinds; 20 in the Cluster API kinds (each template override
    // embeds a TemplateSpec's two rules plus its own; providerID's two on the machine and
    // again inside the machine template; the machine template's immutability); 2 in the BMC
    // kinds (one action per task, in Job and in Task); 6 for Workflow boot options (four on
    // bootOptions, one action per entry in preparingActions and postActions).
    assert_eq!(checked, 38, "every CEL rule was analysed");
}

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

/// Every object of every file of tests/corpus (real Tinkerbell v1alpha1 manifests, each
/// naming its source), as JSON.
fn corpus() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(corpus_dir())
        .expect("corpus dir")
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(
            text.starts_with("# Source: tinkerbell/"),
            "{} names its source",
            path.display()
        );
        for (i, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
            let v: Value = serde::Deserialize::deserialize(doc).expect("yaml");
            out.push((format!("{}#{i}", path.display()), v));
        }
    }
    out
}

fn crd_name(kind: &str) -> &'static str {
    match kind {
        "Hardware" => "hardware.tinkerbell.org",
        "Template" => "templates.tinkerbell.org",
        _ => "workflows.tinkerbell.org",
    }
}

/// Asserts the v1alpha2 form of `v1` passes the v1alpha2 schema and CEL rules and converts
/// back to exactly `v1`; returns the v1alpha2 form.
fn check_fidelity(what: &str, v1: &Value) -> Value {
    use tink_api::conversion::convert;
    let kind = v1["kind"].as_str().expect("kind");
    let v2 = convert(v1.clone(), v1alpha2::API_VERSION)
        .unwrap_or_else(|e| panic!("{what}: conversion failed: {e}"));
    let found = violations(&schema(crd_name(kind), "v1alpha2"), &v2, None);
    assert!(
        found.is_empty(),
        "{what}: the v1alpha2 form breaks the schema: {found:?}\n{v2:#}"
    );
    let back = convert(v2.clone(), v1alpha1::API_VERSION).expect("down");
    assert_eq!(&back, v1, "{what}: round trip");
    let found = violations(&schema(crd_name(kind), "v1alpha1"), &back, None);
    assert!(found.is_empty(), "{what}: v1alpha1 schema: {found:?}");
    v2
}

#[test]
fn real_tinkerbell_manifests_round_trip_and_fit_the_v1alpha2_schema() {
    let corpus = corpus();
    assert!(corpus.len() >= 7, "corpus has {} objects", corpus.len());
    for (what, v1) in &corpus {
        let v2 = check_fidelity(what, v1);
        if v1["kind"] == "Template" {
            // Real templates parse before rendering: typed actions, `pid: host` carried.
            let actions = v2["spec"]["actions"].as_array().expect("actions");
            assert!(!actions.is_empty(), "{what}");
            if v1["spec"]["data"]
                .as_str()
                .is_some_and(|d| d.contains("pid: host"))
            {
                assert!(
                    actions.iter().any(|a| a["pidNamespace"] == "host"),
                    "{what}: pid: host has its v1alpha2 field"
                );
            }
        }
    }
}

#[test]
fn awkward_real_shaped_objects_convert_to_valid_v1alpha2() {
    let hw = |spec: Value| json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Hardware", "metadata": {"name": "h", "namespace": "default"}, "spec": spec});
    // A Hardware without spec.
    let no_spec = json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Hardware", "metadata": {"name": "bare"}});
    check_fidelity("hardware without spec", &no_spec);
    // No interfaces (a machine known only by its BMC).
    check_fidelity(
        "hardware without interfaces",
        &hw(json!({"bmcRef": {"apiGroup": "bmc.tinkerbell.org", "kind": "Machine", "name": "b"}})),
    );
    // Explicit false and "" values survive.
    let explicit = hw(json!({
        "userData": "",
        "interfaces": [{"dhcp": {"mac": "00:00:5e:00:53:01", "uefi": false, "hostname": "", "lease_time": 4294967296u64},
                        "netboot": {"allowPXE": false, "allowWorkflow": false,
                                    "osie": {"kernelParams": ["console=ttyS0"]}}}]
    }));
    let v2 = check_fidelity("explicit false and empty values", &explicit);
    assert_eq!(v2["spec"]["osie"]["kernelParams"], json!(["console=ttyS0"]));
    let nic = &v2["spec"]["networkInterfaces"]["00:00:5e:00:53:01"];
    assert_eq!(nic["dhcp"]["leaseTime"], json!(i32::MAX), "clamped");
    let warned = tink_api::conversion::convert_with_warnings(explicit, v1alpha2::API_VERSION)
        .expect("convert");
    assert!(
        warned
            .warnings
            .iter()
            .any(|w| w.contains("lease_time") && w.contains("clamped")),
        "{:?}",
        warned.warnings
    );

    let tpl = |data: &str| json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Template", "metadata": {"name": "t"}, "spec": {"data": data}});
    // Actions under `{{- if }}` blocks: the document is kept whole, rendered per Workflow.
    let conditional = "version: \"0.1\"\nname: t\nglobal_timeout: 1800\ntasks:\n  - name: os\n    worker: \"{{.device_1}}\"\n    actions:\n{{- if eq .Hardware.Metadata.Instance.OperatingSystem.Distro \"ubuntu\" }}\n      - name: stream\n        image: image2disk:v1.0.0\n{{- else }}\n      - name: stream-other\n        image: oci2disk:v1.0.0\n{{- end }}\n      - name: kexec\n        image: kexec:v1.0.0\n        pid: host\n";
    let v2 = check_fidelity("actions under if blocks", &tpl(conditional));
    assert_eq!(v2["spec"]["v1alpha1Data"], json!(conditional));
    // Names repeated across tasks cannot be v1alpha2 actions either.
    let repeated = "version: \"0.1\"\ntasks:\n  - name: a\n    worker: \"{{.device_1}}\"\n    actions:\n      - {name: x, image: i}\n  - name: b\n    worker: \"{{.device_2}}\"\n    actions:\n      - {name: x, image: i}\n";
    let v2 = check_fidelity("repeated names across tasks", &tpl(repeated));
    assert!(v2["spec"]["v1alpha1Data"].is_string());
    check_fidelity(
        "template without data",
        &json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Template", "metadata": {"name": "e"}, "spec": {}}),
    );

    let wf = |spec: Value, status: Value| json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Workflow", "metadata": {"name": "w"}, "spec": spec, "status": status});
    // Older tink: hardwareMap only; and no templateRef at all.
    check_fidelity(
        "workflow with only hardwareMap",
        &wf(
            json!({"templateRef": "t", "hardwareMap": {"device_1": "00:00:5e:00:53:01"}}),
            json!({}),
        ),
    );
    check_fidelity(
        "workflow without templateRef",
        &wf(
            json!({"hardwareRef": "h"}),
            json!({"state": "STATE_PENDING"}),
        ),
    );
    // Current Tinkerbell status keys and bootOptions.
    let current = wf(
        json!({"templateRef": "t", "hardwareRef": "h", "bootOptions": {"toggleAllowNetboot": true, "bootMode": "netboot"}}),
        json!({"state": "STATE_RUNNING", "globalTimeout": 1800, "agentID": "00:00:5e:00:53:01",
               "conditions": [{"type": "NetbootJobComplete", "status": "True", "time": "2024-05-01T10:00:00Z"}],
               "tasks": [{"name": "os", "worker": "00:00:5e:00:53:01", "agentID": "00:00:5e:00:53:01",
                          "actions": [{"name": "stream", "image": "i", "state": "STATE_SUCCESS", "executionStart": "2024-05-01T10:00:01Z", "pid": "host"}]}]}),
    );
    let v2 = check_fidelity("current status keys", &current);
    assert_eq!(v2["spec"]["timeout"], json!("1800s"));
    assert_eq!(v2["status"]["agentId"], json!("00:00:5e:00:53:01"));
    assert_eq!(v2["status"]["actions"][0]["state"], json!("Succeeded"));
    assert_eq!(
        v2["status"]["actions"][0]["startedAt"],
        json!("2024-05-01T10:00:01Z")
    );
    assert_eq!(
        v2["status"]["actions"][0]["rendered"]["pidNamespace"],
        json!("host")
    );
    let typed: v1alpha1::Workflow = tink_api::from_value(current).expect("typed");
    assert!(
        typed
            .spec
            .boot_options
            .is_some_and(|b| b.toggle_allow_netboot)
    );
    assert!(typed.status.is_some_and(|s| s.conditions[0].time.is_some()));
}

#[test]
fn a_200_kb_template_fits_in_its_annotation() {
    use tink_api::conversion::convert;
    let mut data = String::from(
        "version: \"0.1\"\nname: big\nglobal_timeout: 1800\ntasks:\n  - name: os\n    worker: \"{{.device_1}}\"\n    actions:\n",
    );
    let mut i = 0;
    while data.len() < 200 * 1024 {
        data.push_str(&format!(
            "      - name: \"step-{i}\"\n        image: quay.io/tinkerbell-actions/cexec:v1.0.0\n        timeout: 90\n        environment:\n          BLOCK_DEVICE: {{{{ index .Hardware.Disks 0 }}}}1\n          FS_TYPE: ext4\n          CHROOT: y\n          CMD_LINE: \"echo step {i} of a long template; systemctl enable unit-{i}.service\"\n"
        ));
        i += 1;
    }
    // v1alpha2 allows 128 actions: a longer document is kept whole in v1alpha1Data.
    let v1 = json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Template", "metadata": {"name": "big"}, "spec": {"data": data}});
    let v2 = check_fidelity("200 KB template", &v1);
    let annotations = v2["metadata"]["annotations"].as_object().map(|a| {
        a.values()
            .map(|v| v.as_str().map_or(0, str::len))
            .sum::<usize>()
    });
    assert!(
        annotations.unwrap_or(0) < 64 * 1024,
        "annotation is {annotations:?} bytes"
    );
    // Just under the limit: typed actions, the text restored from a compressed annotation
    // holding it once.
    let mut small = String::from(
        "version: \"0.1\"\nname: big\ntasks:\n  - name: os\n    worker: \"{{.device_1}}\"\n    actions:\n",
    );
    for i in 0..120 {
        small.push_str(&format!(
            "      - name: \"step-{i}\" # comment {i}\n        image: quay.io/tinkerbell-actions/cexec:v1.0.0\n        timeout: 90\n        environment:\n          CMD_LINE: \"{}\"\n",
            "x".repeat(1500)
        ));
    }
    assert!(small.len() > 180 * 1024);
    let v1 = json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Template", "metadata": {"name": "big"}, "spec": {"data": small}});
    let v2 = check_fidelity("180 KB template with comments", &v1);
    let ann = v2["metadata"]["annotations"][tink_api::CONVERSION_DATA_ANNOTATION]
        .as_str()
        .expect("annotation");
    assert!(
        ann.starts_with(tink_api::conversion::COMPRESSED_PREFIX),
        "compressed"
    );
    assert!(ann.len() < 64 * 1024, "annotation is {} bytes", ann.len());
    let _ = convert(v2, v1alpha1::API_VERSION).expect("down");
}

#[test]
fn cluster_api_rules_refuse_what_they_should() {
    let s = schema(
        "tinkerbellmachines.infrastructure.cluster.x-k8s.io",
        "v1beta1",
    );
    let tm = |spec: Value| {
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TinkerbellMachine",
            "metadata": {"name": "m", "namespace": "n"}, "spec": spec})
    };
    let messages = |obj: &Value, old: Option<&Value>| -> Vec<String> {
        violations(&s, obj, old)
            .into_iter()
            .map(|v| v.rule)
            .collect()
    };
    let with_id = tm(json!({"providerID": "tinkerbell://n/a", "imageURL": "http://x/img"}));
    let valid = [
        tm(json!({})),
        with_id.clone(),
        tm(json!({"templateOverride": {"templateRef": {"name": "t"}}})),
        tm(
            json!({"templateOverride": {"inline": {"actions": [{"name": "a", "image": "busybox"}]}}}),
        ),
        tm(json!({"hardwareAffinity": {
            "required": [{"labelSelector": {"matchLabels": {"role": "cp"}}}],
            "preferred": [{"weight": 100, "hardwareAffinityTerm": {"labelSelector": {}}}],
        }})),
    ];
    for obj in &valid {
        assert!(
            messages(obj, Some(obj)).is_empty(),
            "{obj}: {:?}",
            messages(obj, Some(obj))
        );
    }
    // providerID: set once, then neither changed nor removed.
    assert!(
        messages(&with_id, Some(&tm(json!({})))).is_empty(),
        "setting it is fine"
    );
    let changed = tm(json!({"providerID": "tinkerbell://n/b", "imageURL": "http://x/img"}));
    assert!(
        messages(&changed, Some(&with_id))
            .iter()
            .any(|m| m.contains("providerID is immutable")),
        "{:?}",
        messages(&changed, Some(&with_id))
    );
    let removed = tm(json!({"imageURL": "http://x/img"}));
    assert!(
        messages(&removed, Some(&with_id))
            .iter()
            .any(|m| m.contains("providerID cannot be removed")),
        "{:?}",
        messages(&removed, Some(&with_id))
    );
    // A TinkerbellMachineTemplate's template is immutable; its metadata is not.
    let ts = schema(
        "tinkerbellmachinetemplates.infrastructure.cluster.x-k8s.io",
        "v1beta1",
    );
    let tmt = |image: &str, label: &str| {
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TinkerbellMachineTemplate",
            "metadata": {"name": "t", "namespace": "n", "labels": {"l": label}},
            "spec": {"template": {"spec": {"imageURL": image}}}})
    };
    let template_messages = |obj: &Value, old: &Value| -> Vec<String> {
        violations(&ts, obj, Some(old))
            .into_iter()
            .map(|v| v.rule)
            .collect()
    };
    let old = tmt("http://x/a.img", "1");
    assert!(template_messages(&tmt("http://x/a.img", "2"), &old).is_empty());
    let edited = template_messages(&tmt("http://x/b.img", "1"), &old);
    assert!(
        edited
            .iter()
            .any(|m| m.contains("spec.template is immutable")),
        "{edited:?}"
    );
    // A template override is inline or a reference, exactly one.
    for bad in [
        json!({"templateOverride": {}}),
        json!({"templateOverride": {"templateRef": {"name": "t"}, "inline": {"actions": [{"name": "a", "image": "b"}]}}}),
        json!({"deprovisionTemplate": {}}),
    ] {
        let obj = tm(bad);
        assert!(
            messages(&obj, None)
                .iter()
                .any(|m| m.contains("exactly one of inline and templateRef")),
            "{obj}: {:?}",
            messages(&obj, None)
        );
    }
}

/// Every description that reads as wrapped prose (a line break between two words of one
/// sentence), the way `kubectl explain` would print it broken mid-line.
fn wrapped_descriptions(value: &Value, path: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                if key == "description"
                    && let Value::String(text) = v
                    && text.split('\n').collect::<Vec<_>>().windows(2).any(|w| {
                        let next = w[1];
                        !w[0].is_empty() && next.starts_with(|c: char| c.is_ascii_lowercase())
                    })
                {
                    out.push(format!("{path}: {text:?}"));
                }
                wrapped_descriptions(v, &format!("{path}.{key}"), out);
            }
        }
        Value::Array(items) => items
            .iter()
            .for_each(|v| wrapped_descriptions(v, path, out)),
        _ => {}
    }
}

#[test]
fn descriptions_are_joined_paragraphs_not_wrapped_source_lines() {
    let mut wrapped = Vec::new();
    for c in tink_api::crds(&ConversionWebhook::default()).expect("crds") {
        for v in &c.spec.versions {
            let schema = v
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .expect("schema");
            let name = c.metadata.name.clone().unwrap_or_default();
            wrapped_descriptions(
                &serde_json::to_value(schema).expect("json"),
                &format!("{name}/{}", v.name),
                &mut wrapped,
            );
        }
    }
    assert!(wrapped.is_empty(), "wrapped descriptions: {wrapped:#?}");
}

#[test]
fn bmc_crds_have_rufios_names_columns_and_a_status_subresource() {
    for (name, kind, short, columns) in [
        (
            "machines.bmc.tinkerbell.org",
            "Machine",
            None,
            &["Host", "Power", "Contactable", "Age"][..],
        ),
        (
            "jobs.bmc.tinkerbell.org",
            "Job",
            Some("j"),
            &["Machine", "Running", "Completed", "Failed", "Age"][..],
        ),
        (
            "tasks.bmc.tinkerbell.org",
            "Task",
            Some("t"),
            &["Power", "Completed", "Failed", "Age"][..],
        ),
    ] {
        let c = crd(name);
        assert_eq!(c.spec.group, tink_api::bmc::GROUP);
        assert_eq!(c.spec.names.kind, kind);
        assert_eq!(
            c.spec.names.short_names,
            short.map(|s| vec![s.to_string()]),
            "{name}"
        );
        assert_eq!(
            c.spec.names.categories.as_deref(),
            Some(&["tinkerbell".to_string()][..]),
            "{name}"
        );
        assert_eq!(c.spec.scope, "Namespaced");
        assert!(c.spec.conversion.is_none(), "{name}: one version");
        let versions: Vec<_> = c
            .spec
            .versions
            .iter()
            .map(|v| (v.name.as_str(), v.served, v.storage))
            .collect();
        assert_eq!(versions, [("v1alpha1", true, true)], "{name}");
        let v = &c.spec.versions[0];
        assert!(
            v.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "{name}: status subresource"
        );
        let cols: Vec<_> = v
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(cols, columns, "{name}");
    }
    // Rufio's Machines move with `clusterctl move`.
    let labels = crd("machines.bmc.tinkerbell.org")
        .metadata
        .labels
        .unwrap_or_default();
    for k in [
        "clusterctl.cluster.x-k8s.io",
        "clusterctl.cluster.x-k8s.io/move",
    ] {
        assert_eq!(labels.get(k).map(String::as_str), Some(""), "{k}");
    }
    let machine = schema("machines.bmc.tinkerbell.org", "v1alpha1");
    let conn = &machine["properties"]["spec"]["properties"]["connection"];
    assert_eq!(conn["properties"]["port"]["default"], json!(623));
    assert_eq!(conn["required"], json!(["host"]));
    assert_eq!(
        machine["properties"]["status"]["properties"]["powerState"]["enum"],
        json!(["on", "off", "unknown"])
    );
}

fn bmc_schema(kind: &str) -> Value {
    schema(&format!("{kind}.bmc.tinkerbell.org"), "v1alpha1")
}

/// Rufio's example manifests, as Rufio ships them: they parse into our types and satisfy our
/// CRDs unchanged, and our typed form of them does too.
#[test]
fn rufio_example_manifests_apply_unchanged() {
    use tink_api::bmc::{
        ActionKind, BootDevice, Job, Machine, PowerAction, Task, VirtualMediaKind,
    };
    let dir = common::fixture_path("rufio");
    let mut seen = 0;
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .expect("fixtures/rufio")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    entries.sort();
    for path in entries {
        let text = std::fs::read_to_string(&path).expect("read");
        let raw: Value = serde_yaml::from_str(&text).expect("yaml");
        let kind = raw["kind"].as_str().expect("kind").to_string();
        let (schema, typed) = match kind.as_str() {
            "Machine" => (
                bmc_schema("machines"),
                serde_json::to_value(tink_api::from_yaml::<Machine>(&text).expect("Machine"))
                    .expect("json"),
            ),
            "Job" => (
                bmc_schema("jobs"),
                serde_json::to_value(tink_api::from_yaml::<Job>(&text).expect("Job"))
                    .expect("json"),
            ),
            "Task" => (
                bmc_schema("tasks"),
                serde_json::to_value(tink_api::from_yaml::<Task>(&text).expect("Task"))
                    .expect("json"),
            ),
            other => panic!("{}: unexpected kind {other}", path.display()),
        };
        assert_eq!(raw["apiVersion"], tink_api::bmc::API_VERSION);
        assert_eq!(
            violations(&schema, &raw, None),
            vec![],
            "{} as Rufio ships it",
            path.display()
        );
        assert_eq!(
            violations(&schema, &typed, None),
            vec![],
            "{} parsed and written back: {typed}",
            path.display()
        );
        // Nothing the manifest says is lost: every field of the original is in the typed
        // form with the same value (the typed form may add defaults, e.g. `port: 623`).
        fn contained(orig: &Value, typed: &Value, path: &str) {
            match (orig, typed) {
                (Value::Object(o), Value::Object(t)) => {
                    for (k, v) in o {
                        contained(v, t.get(k).unwrap_or(&Value::Null), &format!("{path}.{k}"));
                    }
                }
                (Value::Array(o), Value::Array(t)) => {
                    assert_eq!(o.len(), t.len(), "{path}");
                    for (i, (a, b)) in o.iter().zip(t).enumerate() {
                        contained(a, b, &format!("{path}[{i}]"));
                    }
                }
                // Rufio writes `efiBoot: false`; false is the default we leave out.
                (Value::Bool(false), Value::Null) => {}
                _ => assert_eq!(orig, typed, "{path}"),
            }
        }
        contained(&raw, &typed, &path.display().to_string());
        seen += 1;
    }
    assert_eq!(seen, 4, "the four samples of rufio's config/samples");

    let job: Job = common::fixture("rufio/job_v1alpha1.yaml");
    let kinds: Vec<_> = job.spec.tasks.iter().map(|t| t.kind()).collect();
    assert_eq!(kinds.len(), 3);
    assert_eq!(kinds[0], Some(ActionKind::Power(PowerAction::Off)));
    match kinds[1] {
        Some(ActionKind::OneTimeBootDevice(b)) => {
            assert_eq!(
                (b.devices.as_slice(), b.efi_boot),
                (&[BootDevice::Pxe][..], false)
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(kinds[2], Some(ActionKind::Power(PowerAction::On)));
    assert_eq!(
        (
            job.spec.machine_ref.name.as_str(),
            job.spec.machine_ref.namespace.as_str()
        ),
        ("machine-sample", "rufio-system")
    );
    let m: Machine = common::fixture("rufio/machine_with_opts_v1alpha1.yaml");
    let rpc = m
        .spec
        .connection
        .provider_options
        .as_ref()
        .and_then(|o| o.rpc.as_ref())
        .expect("rpc options");
    assert_eq!(rpc.consumer_url, "https://example.com/rpc");
    let secrets = &rpc.hmac.as_ref().expect("hmac").secrets;
    assert_eq!(
        secrets.keys().map(String::as_str).collect::<Vec<_>>(),
        ["sha256", "sha512"]
    );
    assert_eq!(secrets["sha512"].len(), 2);
    let m: Machine = common::fixture("rufio/machine_v1alpha1.yaml");
    assert_eq!(
        (
            m.spec.connection.host.as_str(),
            m.spec.connection.port,
            m.spec.connection.insecure_tls
        ),
        ("127.0.0.1", 623, true)
    );
    let _ = VirtualMediaKind::Cd;
}

#[test]
fn bmc_rules_refuse_bad_input() {
    let job = |tasks: Value| {
        json!({"apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "n"},
            "spec": {"machineRef": {"name": "m", "namespace": "n"}, "tasks": tasks}})
    };
    let machine = |connection: Value| {
        json!({"apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Machine",
            "metadata": {"name": "m", "namespace": "n"},
            "spec": {"connection": connection}})
    };
    let rules_of = |schema: &Value, obj: &Value| -> Vec<String> {
        violations(schema, obj, None)
            .into_iter()
            .map(|v| format!("{}: {}", v.path, v.rule))
            .collect()
    };
    let jobs = bmc_schema("jobs");
    let good = job(json!([
        {"powerAction": "off"},
        {"oneTimeBootDeviceAction": {"device": ["pxe"], "efiBoot": true}},
        {"virtualMediaAction": {"mediaURL": "http://10.0.0.1/boot.iso", "kind": "CD"}},
        {"virtualMediaAction": {"kind": "CD"}},
        {"powerAction": "cycle"}
    ]));
    assert_eq!(rules_of(&jobs, &good), Vec::<String>::new());
    for (tasks, wanted) in [
        (json!([]), "minItems 1"),
        (json!([{}]), "exactly one of powerAction"),
        (
            json!([{"powerAction": "on", "oneTimeBootDeviceAction": {"device": ["pxe"]}}]),
            "exactly one of powerAction",
        ),
        (
            json!([{"oneTimeBootDeviceAction": {"device": []}}]),
            "minItems 1",
        ),
        (
            json!([{"virtualMediaAction": {"mediaURL": "http://x/a.iso"}}]),
            "required kind",
        ),
    ] {
        let obj = job(tasks.clone());
        let got = rules_of(&jobs, &obj);
        assert!(
            got.iter().any(|m| m.contains(wanted)),
            "{tasks}: wanted {wanted:?} in {got:?}"
        );
    }
    // Values outside an enum: the CRD lists the allowed ones, and the typed parse refuses others.
    let task_items = &jobs["properties"]["spec"]["properties"]["tasks"]["items"]["properties"];
    for (tasks, enum_node, bad) in [
        (
            json!([{"powerAction": "ON"}]),
            &task_items["powerAction"],
            "ON",
        ),
        (
            json!([{"oneTimeBootDeviceAction": {"device": ["usb"]}}]),
            &task_items["oneTimeBootDeviceAction"]["properties"]["device"]["items"],
            "usb",
        ),
    ] {
        let allowed = enum_node["enum"].as_array().expect("an enum");
        assert!(!allowed.contains(&json!(bad)), "{bad} in {allowed:?}");
        let err = tink_api::from_value::<tink_api::bmc::Job>(job(tasks)).expect_err(bad);
        assert!(err.path.starts_with("spec.tasks[0]"), "{err}");
    }
    let machines = bmc_schema("machines");
    assert_eq!(
        rules_of(
            &machines,
            &machine(json!({"host": "10.0.0.1", "insecureTLS": false,
                "providerOptions": {"preferredOrder": ["Gofish", "IPMITOOL", "rpc"],
                    "redfish": {"port": 8443, "useBasicAuth": true}}}))
        ),
        Vec::<String>::new()
    );
    for (connection, wanted) in [
        (json!({"host": ""}), "minLength 1"),
        (json!({}), "required host"),
        (
            json!({"host": "h", "providerOptions": {"preferredOrder": ["telnet"]}}),
            "pattern",
        ),
        (
            json!({"host": "h", "providerOptions": {"rpc": {}}}),
            "required consumerURL",
        ),
    ] {
        let obj = machine(connection.clone());
        let got = rules_of(&machines, &obj);
        assert!(
            got.iter().any(|m| m.contains(wanted)),
            "{connection}: wanted {wanted:?} in {got:?}"
        );
    }
    let tasks = bmc_schema("tasks");
    let task = |t: Value| {
        json!({"apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Task",
            "metadata": {"name": "t", "namespace": "n"},
            "spec": {"task": t, "connection": {"host": "h", "insecureTLS": true}}})
    };
    assert_eq!(
        rules_of(&tasks, &task(json!({"powerAction": "status"}))),
        Vec::<String>::new()
    );
    let got = rules_of(&tasks, &task(json!({})));
    assert!(
        got.iter().any(|m| m.contains("exactly one of powerAction")),
        "{got:?}"
    );
}
