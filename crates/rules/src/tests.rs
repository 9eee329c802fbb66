use proptest::prelude::*;
use serde_json::{Value, json};
use tink_api::v1alpha2::WorkflowRuleSetSpec;

use super::*;

fn spec(rules: Value) -> WorkflowRuleSetSpec {
    tink_api::from_value(json!({
        "rules": rules,
        "workflow": {"templateRef": {"name": "t"}},
    }))
    .expect("a spec")
}

fn compiled(rules: Value) -> RuleSet {
    compile(&spec(rules)).expect("compiles")
}

fn errors(rules: Value) -> Vec<PatternError> {
    compile(&spec(rules)).expect_err("refused")
}

/// A Dell with two NVMe disks and a QEMU-like one with one disk.
fn dell() -> Value {
    json!({
        "collectionMethod": "agent",
        "chassis": {"vendor": "Dell Inc.", "serialNumber": "ABC123"},
        "cpu": {"totalCores": 32, "totalThreads": 64},
        "memory": {"totalBytes": 274877906944u64},
        "blockDevices": [
            {"name": "nvme0n1", "driveType": "SSD", "sizeBytes": 960197124096u64},
            {"name": "nvme1n1", "driveType": "SSD", "sizeBytes": 960197124096u64},
            {"name": "sda", "driveType": "HDD", "sizeBytes": 4000787030016u64},
        ],
        "networkInterfaces": [
            {"name": "eno1", "ports": [{"mac": "aa:bb:cc:00:00:01", "speedMbps": 25000}]},
            {"name": "eno2", "ports": [{"mac": "aa:bb:cc:00:00:02", "speedMbps": 1000}]},
        ],
    })
}

fn qemu() -> Value {
    json!({
        "collectionMethod": "agent",
        "chassis": {"vendor": "QEMU"},
        "cpu": {"totalCores": 2, "totalThreads": 2},
        "blockDevices": [{"name": "vda", "driveType": "HDD", "sizeBytes": 10737418240u64}],
    })
}

#[test]
fn at_least_two_disks_and_vendor_dell() {
    let rules = compiled(json!([{
        "name": "dell-2-disks",
        "match": {
            "chassis.vendor": {"prefix": "Dell"},
            "blockDevices": {"count": {"min": 2}},
        },
    }]));
    assert_eq!(rules.first_match(&dell()), Some(0));
    assert_eq!(
        rules.evaluate(&dell()),
        Evaluation::Matched {
            rule: "dell-2-disks".into()
        }
    );
    assert_eq!(rules.first_match(&qemu()), None);
    let Evaluation::NoMatch { reasons } = rules.evaluate(&qemu()) else {
        panic!("qemu matched")
    };
    assert_eq!(reasons.len(), 1);
    // The first failing condition in key order: blockDevices before chassis.vendor.
    assert_eq!(
        reasons[0],
        "dell-2-disks: blockDevices: 1 counted, wanted at least 2"
    );
}

#[test]
fn value_conditions() {
    let d = dell();
    let cases: &[(Value, bool)] = &[
        (json!({"chassis.vendor": {"equals": "Dell Inc."}}), true),
        (json!({"chassis.vendor": {"equals": "Dell"}}), false),
        (
            json!({"chassis.vendor": {"oneOf": ["HPE", "Dell Inc."]}}),
            true,
        ),
        (
            json!({"chassis.vendor": {"oneOf": ["HPE", "Lenovo"]}}),
            false,
        ),
        (json!({"chassis.vendor": {"prefix": "Dell"}}), true),
        (json!({"chassis.vendor": {"prefix": "dell"}}), false),
        (json!({"cpu.totalThreads": {"min": 64}}), true),
        (json!({"cpu.totalThreads": {"min": 65}}), false),
        (json!({"cpu.totalThreads": {"min": 8, "max": 64}}), true),
        (json!({"cpu.totalThreads": {"max": 63}}), false),
        (json!({"cpu.totalThreads": {"equals": "64"}}), true),
        // min on a string is never satisfied
        (json!({"chassis.vendor": {"min": 0}}), false),
        // prefix on a number is never satisfied
        (json!({"cpu.totalThreads": {"prefix": "6"}}), false),
        (json!({"memory.totalBytes": {"min": 137438953472u64}}), true),
        (json!({"chassis.serialNumber": {"exists": true}}), true),
        (json!({"bios.vendor": {"exists": true}}), false),
        (json!({"bios.vendor": {"exists": false}}), true),
        (json!({"pciDevices": {"exists": false}}), true),
        // lists: any element
        (json!({"blockDevices.driveType": {"equals": "HDD"}}), true),
        (json!({"blockDevices.driveType": {"equals": "NVMe"}}), false),
        (
            json!({"networkInterfaces.ports.speedMbps": {"min": 25000}}),
            true,
        ),
        (
            json!({"networkInterfaces.ports.speedMbps": {"min": 40000}}),
            false,
        ),
        // all conditions on the same value: sda starts with "sd" and is in the list; no disk size lies in 1..2 TB
        (
            json!({"blockDevices.name": {"prefix": "sd", "oneOf": ["nvme0n1", "sda"]}}),
            true,
        ),
        (
            json!({"blockDevices.sizeBytes": {"min": 1000000000000u64, "max": 2000000000000u64}}),
            false,
        ),
        // counts
        (
            json!({"blockDevices": {"count": {"min": 3, "max": 3}}}),
            true,
        ),
        (json!({"blockDevices": {"count": {"max": 2}}}), false),
        (
            json!({"blockDevices": {"count": {"min": 2}, "where": {"driveType": {"equals": "SSD"}}}}),
            true,
        ),
        (
            json!({"blockDevices": {"count": {"min": 3}, "where": {"driveType": {"equals": "SSD"}}}}),
            false,
        ),
        (
            json!({"blockDevices": {"where": {"sizeBytes": {"min": 4000000000000u64}}}}),
            true,
        ),
        (
            json!({"blockDevices": {"where": {"sizeBytes": {"min": 5000000000000u64}}}}),
            false,
        ),
        (json!({"pciDevices": {"count": {"max": 0}}}), true),
        (
            json!({"networkInterfaces.ports": {"count": {"min": 2}, "where": {"speedMbps": {"min": 1000}}}}),
            true,
        ),
    ];
    for (pattern, want) in cases {
        let rules = compiled(json!([{"match": pattern}]));
        assert_eq!(
            rules.first_match(&d).is_some(),
            *want,
            "{pattern} on the Dell"
        );
    }
}

#[test]
fn rules_are_alternatives_and_the_first_match_is_named() {
    let rules = compiled(json!([
        {"name": "hpe", "match": {"chassis.vendor": {"prefix": "HPE"}}},
        {"match": {"cpu.totalThreads": {"min": 2}}},
        {"name": "dell", "match": {"chassis.vendor": {"prefix": "Dell"}}},
    ]));
    assert_eq!(rules.first_match(&dell()), Some(1));
    assert_eq!(rules.rule_name(1), Some("rules[1]"));
    assert_eq!(
        rules.evaluate(&qemu()),
        Evaluation::Matched {
            rule: "rules[1]".into()
        }
    );
    let none = compiled(json!([
        {"name": "hpe", "match": {"chassis.vendor": {"prefix": "HPE"}}},
        {"name": "big", "match": {"cpu.totalThreads": {"min": 128}}},
    ]));
    let Evaluation::NoMatch { reasons } = none.evaluate(&qemu()) else {
        panic!("matched")
    };
    assert_eq!(
        reasons,
        vec![
            "hpe: chassis.vendor: wanted a value starting with \"HPE\", found \"QEMU\"".to_string(),
            "big: cpu.totalThreads: wanted a value at least 128, found 2".to_string(),
        ]
    );
}

#[test]
fn an_inventory_of_an_unexpected_shape_matches_nothing() {
    let rules = compiled(json!([{"match": {"chassis.vendor": {"exists": true}}}]));
    for odd in [
        json!(null),
        json!("a string"),
        json!([1, 2]),
        json!({"chassis": "Dell"}),
        json!({"chassis": {"vendor": null}}),
        json!({"chassis": [{"vendor": null}]}),
    ] {
        assert_eq!(rules.first_match(&odd), None, "{odd}");
    }
}

#[test]
fn invalid_patterns_name_the_field_path() {
    let cases: &[(Value, &str, &str)] = &[
        (json!([]), "spec.rules", "at least one rule"),
        (
            json!([{"match": {}}]),
            "spec.rules[0].match",
            "at least one",
        ),
        (
            json!([{"match": {"chasis.vendor": {"prefix": "Dell"}}}]),
            "spec.rules[0].match.chasis.vendor",
            "unknown attribute path \"chasis.vendor\"",
        ),
        (
            json!([{"match": {"chassis..vendor": {"prefix": "Dell"}}}]),
            "spec.rules[0].match.chassis..vendor",
            "not an attribute path",
        ),
        (
            json!([{"match": {"chassis.vendor": {}}}]),
            "spec.rules[0].match.chassis.vendor",
            "no condition",
        ),
        (
            json!([{"match": {"chassis.vendor": {"prefix": ""}}}]),
            "spec.rules[0].match.chassis.vendor.prefix",
            "must not be empty",
        ),
        (
            json!([{"match": {"cpu.totalThreads": {"min": 9, "max": 8}}}]),
            "spec.rules[0].match.cpu.totalThreads.min",
            "above max",
        ),
        (
            json!([{"match": {"cpu.totalThreads": {"min": 1}}},
                   {"match": {"cpu.totalThreads": {"min": 1}}},
                   {"match": {"blockDevices": {"count": {"min": 3, "max": 2}}}}]),
            "spec.rules[2].match.blockDevices.count.min",
            "above max",
        ),
        (
            json!([{"match": {"blockDevices": {"count": {"min": 2}, "exists": true}}}]),
            "spec.rules[0].match.blockDevices.count",
            "cannot be combined",
        ),
        (
            json!([{"match": {"blockDevices": {"count": {}}}}]),
            "spec.rules[0].match.blockDevices.count",
            "give min, max or both",
        ),
        (
            json!([{"match": {"blockDevices": {"count": {"min": 1}, "where": {"drivetype": {"equals": "SSD"}}}}}]),
            "spec.rules[0].match.blockDevices.where.drivetype",
            "the elements of blockDevices have: name, controllerType, driveType",
        ),
        (
            json!([{"match": {"bios.vendor": {"exists": false, "equals": "x"}}}]),
            "spec.rules[0].match.bios.vendor.exists",
            "cannot be combined",
        ),
        (
            json!([{"match": {"bios.vendor": {"equals": "a", "oneOf": ["b"]}}}]),
            "spec.rules[0].match.bios.vendor.oneOf",
            "not among oneOf",
        ),
        (
            json!([{"name": "a", "match": {"bios.vendor": {"exists": true}}},
                   {"name": "a", "match": {"bios.vendor": {"exists": true}}}]),
            "spec.rules[1].name",
            "duplicate rule name",
        ),
    ];
    for (rules, path, message) in cases {
        let errs = errors(rules.clone());
        assert!(
            errs.iter()
                .any(|e| e.path == *path && e.message.contains(message)),
            "{rules}: wanted {path}: ...{message}..., got {errs:?}"
        );
    }
    // Every problem is reported, not only the first.
    let errs = errors(json!([
        {"match": {"chasis": {"exists": true}, "cpu.totalThreads": {"min": 2, "max": 1}}},
    ]));
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert_eq!(
        join_errors(&errs[..1]),
        format!("{}: {}", errs[0].path, errs[0].message)
    );
}

/// Every leaf and list path of a fully populated tink-inventory `Attributes` is a known path,
/// so a field added there is caught here.
#[test]
fn known_paths_cover_the_inventory_shape() {
    use tink_inventory::attributes::*;
    let s = || Some("x".to_string());
    let attrs = Attributes {
        last_updated: s(),
        collection_method: "agent".into(),
        cpu: Some(Cpu {
            total_cores: 1,
            total_threads: 1,
            sockets: vec![CpuSocket {
                slot: s(),
                vendor: s(),
                model: s(),
                cores: 1,
                threads: 1,
                clock_speed_mhz: 1,
                serial_number: s(),
                capabilities: vec!["sse".into()],
            }],
        }),
        memory: Some(Memory {
            total_bytes: 1,
            usable_bytes: 1,
            modules: vec![MemoryModule {
                slot: s(),
                vendor: s(),
                serial_number: s(),
                part_number: s(),
                size_bytes: 1,
                speed_mhz: 1,
                form_factor: s(),
            }],
        }),
        block_devices: vec![BlockDevice {
            name: s(),
            controller_type: s(),
            drive_type: s(),
            vendor: s(),
            model: s(),
            serial_number: s(),
            wwn: s(),
            size_bytes: 1,
            physical_block_size_bytes: 1,
        }],
        network_interfaces: vec![NetworkInterface {
            name: s(),
            vendor: s(),
            model: s(),
            ports: vec![NetworkPort {
                mac: s(),
                speed_mbps: 1,
                mtu: 1,
                link_status: s(),
            }],
        }],
        pci_devices: vec![PciDevice {
            vendor: s(),
            model: s(),
            class: s(),
            driver: s(),
        }],
        chassis: Some(Chassis {
            vendor: s(),
            model: s(),
            serial_number: s(),
        }),
        baseboard: Some(Baseboard {
            vendor: s(),
            model: s(),
            serial_number: s(),
            firmware_version: s(),
        }),
        bios: Some(Bios {
            vendor: s(),
            firmware_version: s(),
            release_date: s(),
        }),
        product: Some(Product {
            name: s(),
            vendor: s(),
            model: s(),
            serial_number: s(),
        }),
    };
    fn paths(v: &Value, prefix: &str, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, child) in m {
                    let p = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    out.push(p.clone());
                    paths(child, &p, out);
                }
            }
            Value::Array(items) => items.iter().for_each(|i| paths(i, prefix, out)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    paths(&serde_json::to_value(&attrs).expect("json"), "", &mut found);
    for p in &found {
        assert!(
            KNOWN_PATHS.contains(&p.as_str()),
            "{p} is not in KNOWN_PATHS"
        );
    }
    for p in KNOWN_PATHS {
        assert!(
            found.iter().any(|f| f == p),
            "{p} is not in the inventory shape"
        );
    }
}

fn leaf_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        "[A-Za-z0-9 .]{0,12}".prop_map(Value::from),
        (-1000i64..1000).prop_map(Value::from),
        any::<bool>().prop_map(Value::from),
        Just(Value::Null),
    ]
}

fn inventory() -> impl Strategy<Value = Value> {
    (
        leaf_value(),
        leaf_value(),
        proptest::collection::vec((leaf_value(), leaf_value()), 0..6),
    )
        .prop_map(|(vendor, threads, disks)| {
            json!({
                "chassis": {"vendor": vendor},
                "cpu": {"totalThreads": threads},
                "blockDevices": disks.into_iter().map(|(t, size)| json!({"driveType": t, "sizeBytes": size})).collect::<Vec<_>>(),
            })
        })
}

proptest! {
    /// A range holds exactly when some number leaf lies in it (checked against a direct
    /// computation over the generated leaves).
    #[test]
    fn numeric_ranges_agree_with_a_direct_check(inv in inventory(), lo in -1000i64..1000, span in 0i64..500) {
        let hi = lo + span;
        let rules = compiled(json!([{"match": {"blockDevices.sizeBytes": {"min": lo, "max": hi}}}]));
        let direct = inv["blockDevices"].as_array().into_iter().flatten().any(|d| {
            d["sizeBytes"].as_i64().is_some_and(|n| lo <= n && n <= hi)
        });
        prop_assert_eq!(rules.first_match(&inv).is_some(), direct);
    }

    /// count with where equals the number of elements satisfying where.
    #[test]
    fn counts_agree_with_a_direct_count(inv in inventory(), kind in "[A-Za-z]{1,3}", min in 0u32..6) {
        let rules = compiled(json!([{"match": {"blockDevices": {"count": {"min": min}, "where": {"driveType": {"equals": kind.clone()}}}}}]));
        let n = inv["blockDevices"].as_array().into_iter().flatten()
            .filter(|d| d["driveType"].as_str() == Some(kind.as_str()))
            .count() as u32;
        prop_assert_eq!(rules.first_match(&inv).is_some(), n >= min);
    }

    /// A prefix holds exactly when the string starts with it; exists and its negation are
    /// complements; a rule set's verdict is the OR of its rules' verdicts.
    #[test]
    fn prefix_exists_and_or(inv in inventory(), prefix in "[A-Za-z0-9]{1,3}") {
        let p = compiled(json!([{"match": {"chassis.vendor": {"prefix": prefix.clone()}}}]));
        let direct = inv["chassis"]["vendor"].as_str().is_some_and(|s| s.starts_with(prefix.as_str()));
        prop_assert_eq!(p.first_match(&inv).is_some(), direct);

        let yes = compiled(json!([{"match": {"cpu.totalThreads": {"exists": true}}}]));
        let no = compiled(json!([{"match": {"cpu.totalThreads": {"exists": false}}}]));
        prop_assert_ne!(yes.first_match(&inv).is_some(), no.first_match(&inv).is_some());

        let both = compiled(json!([
            {"match": {"chassis.vendor": {"prefix": prefix.clone()}}},
            {"match": {"cpu.totalThreads": {"exists": true}}},
        ]));
        prop_assert_eq!(
            both.first_match(&inv).is_some(),
            p.first_match(&inv).is_some() || yes.first_match(&inv).is_some()
        );
        // evaluate agrees with first_match and explains a miss once per rule.
        match both.evaluate(&inv) {
            Evaluation::Matched { .. } => prop_assert!(both.first_match(&inv).is_some()),
            Evaluation::NoMatch { reasons } => {
                prop_assert!(both.first_match(&inv).is_none());
                prop_assert_eq!(reasons.len(), 2);
            }
        }
    }

    /// Compilation never panics on arbitrary keys and values, and what it accepts uses only
    /// known paths.
    #[test]
    fn compile_is_total(key in "[a-zA-Z.]{0,24}", min in any::<Option<i64>>(), max in any::<Option<i64>>(), prefix in proptest::option::of("[a-z]{0,3}")) {
        let mut pattern = serde_json::Map::new();
        if let Some(m) = min { pattern.insert("min".into(), json!(m)); }
        if let Some(m) = max { pattern.insert("max".into(), json!(m)); }
        if let Some(p) = prefix { pattern.insert("prefix".into(), json!(p)); }
        let result = compile(&spec(json!([{"match": {key.clone(): Value::Object(pattern)}}])));
        match result {
            Ok(rules) => {
                prop_assert!(KNOWN_PATHS.contains(&key.as_str()));
                let _ = rules.evaluate(&json!({}));
            }
            Err(errs) => {
                prop_assert!(!errs.is_empty());
                prop_assert!(errs.iter().all(|e| e.path.starts_with("spec.rules")));
            }
        }
    }
}

/// The example in deploy/examples parses and compiles, and means what its comment says.
#[test]
fn the_deploy_example_compiles() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/examples/workflowruleset.yaml"
    );
    let text = std::fs::read_to_string(path).expect("the example");
    let rs: tink_api::v1alpha2::WorkflowRuleSet = tink_api::from_yaml(&text).expect("parses");
    let rules = compile(&rs.spec).expect("compiles");
    let mut machine = dell();
    machine["memory"]["totalBytes"] = json!(68719476736u64);
    assert_eq!(rules.first_match(&machine), Some(0));
    assert_eq!(rules.first_match(&qemu()), None);
}
