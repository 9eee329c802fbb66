//! Property tests: random objects survive v1alpha1 -> v1alpha2 -> v1alpha1 and
//! v1alpha2 -> v1alpha1 -> v1alpha2 unchanged (10,000 cases each way per kind), both through the
//! typed functions and through the raw-JSON `convert` the webhook uses.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use serde_json::{Value, json};
use tink_api::conversion;
use tink_api::{Timeout, bmc, v1alpha1 as a1, v1alpha2 as a2};

const CASES: u32 = 10_000;
/// The raw-JSON path adds (de)serialization around the same typed conversion.
const RAW_CASES: u32 = 1_000;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::with_cases(cases)
    }
}

// ---------- shared pieces ----------

/// Short strings, including YAML- and template-significant ones (a fixed pool: generating
/// from a regex costs more than the conversion under test).
const TEXTS: &[&str] = &[
    "",
    "a",
    "sm01",
    "/dev/sda",
    "10.0.0.1",
    "255.255.255.0",
    "x86_64",
    "http://192.168.2.111:8080/img.raw.gz",
    "{{ index .Hardware.Disks 0 }}",
    "{{ formatPartition ( index .Hardware.Disks 0 ) 1 }}",
    "{{.device_1}}",
    "true",
    "0600",
    "1.0",
    "null",
    "a: b",
    "# not a comment",
    "line1\nline2",
    "'quoted' \"twice\"",
    "- item",
    "ünïcödé",
];

fn text() -> impl Strategy<Value = String> {
    prop::sample::select(TEXTS).prop_map(str::to_string)
}

fn non_empty_text() -> impl Strategy<Value = String> {
    prop::sample::select(&TEXTS[1..]).prop_map(str::to_string)
}

fn key() -> impl Strategy<Value = String> {
    prop::sample::select(&["A", "DEST_DISK", "IMG_URL", "device_1", "img_url", "x"][..])
        .prop_map(str::to_string)
}

fn opt_text() -> impl Strategy<Value = Option<String>> {
    option::of(non_empty_text())
}

fn small_vec<T: Strategy>(s: T) -> impl Strategy<Value = Vec<T::Value>> {
    vec(s, 0..3)
}

fn small_map() -> impl Strategy<Value = BTreeMap<String, String>> {
    btree_map(key(), text(), 0..3)
}

fn json_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        text().prop_map(Value::String),
        any::<i32>().prop_map(|n| json!(n)),
        any::<bool>().prop_map(Value::Bool),
        Just(json!({"nested": [1, "two", {"three": null}]})),
        Just(json!([])),
    ]
}

fn extra() -> impl Strategy<Value = BTreeMap<String, Value>> {
    btree_map(
        prop::sample::select(&["futureField", "futureList"][..]).prop_map(str::to_string),
        json_value(),
        0..2,
    )
}

fn time() -> impl Strategy<Value = Time> {
    (1_500_000_000i64..1_900_000_000)
        .prop_map(|s| Time(Timestamp::from_second(s).unwrap_or(Timestamp::UNIX_EPOCH)))
}

fn metadata() -> impl Strategy<Value = ObjectMeta> {
    (
        prop::sample::select(&["sm01", "ubuntu", "wf-1"][..]).prop_map(str::to_string),
        option::of(Just("tink-system".to_string())),
        option::of(btree_map(key(), text(), 1..3)),
        option::of(btree_map(
            prop::sample::select(&["example.com/a", "example.com/b"][..]).prop_map(str::to_string),
            text(),
            1..3,
        )),
    )
        .prop_map(|(name, namespace, labels, annotations)| ObjectMeta {
            name: Some(name),
            namespace,
            labels,
            annotations,
            ..Default::default()
        })
}

fn timeout() -> impl Strategy<Value = Timeout> {
    prop_oneof![
        (1u64..100_000).prop_map(Timeout::from_secs),
        prop::sample::select(vec!["0", "10m", "1h30m", "1.5s", "90s", "500ms", "2h"])
            .prop_map(|s| Timeout::parse(s).unwrap_or_else(|_| Timeout::none())),
    ]
}

fn power() -> impl Strategy<Value = bmc::PowerAction> {
    prop::sample::select(vec![
        bmc::PowerAction::On,
        bmc::PowerAction::Off,
        bmc::PowerAction::Cycle,
        bmc::PowerAction::Reset,
    ])
}

/// A BMC action of any shape, including invalid ones (none or several operations): conversion
/// must carry what admission would refuse, too.
fn bmc_action() -> impl Strategy<Value = bmc::Action> {
    let one_time = (
        vec(
            prop::sample::select(vec![bmc::BootDevice::Pxe, bmc::BootDevice::Disk]),
            1..3,
        ),
        any::<bool>(),
    )
        .prop_map(|(devices, efi_boot)| bmc::OneTimeBootDeviceAction { devices, efi_boot });
    let media = prop::sample::select(vec!["", "http://10.0.0.1/hook.iso"]).prop_map(|u| {
        bmc::VirtualMediaAction {
            media_url: u.to_string(),
            kind: bmc::VirtualMediaKind::Cd,
        }
    });
    (option::of(power()), option::of(one_time), option::of(media)).prop_map(
        |(power_action, one_time_boot_device_action, virtual_media_action)| bmc::Action {
            power_action,
            one_time_boot_device_action,
            virtual_media_action,
        },
    )
}

// ---------- v1alpha1 ----------

fn mac() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u8..4).prop_map(|i| format!("3c:ec:ef:00:00:0{i}")),
        (0u8..4).prop_map(|i| format!("3C:EC:EF:00:00:0{i}")),
        Just(String::new()),
    ]
}

fn a1_ip() -> impl Strategy<Value = a1::Ip> {
    (
        text(),
        text(),
        text(),
        prop::sample::select(vec![0i64, 4, 6]),
        extra(),
    )
        .prop_map(|(address, netmask, gateway, family, extra)| a1::Ip {
            address,
            netmask,
            gateway,
            family,
            extra,
        })
}

fn a1_dhcp() -> impl Strategy<Value = a1::Dhcp> {
    (
        (
            mac(),
            text(),
            prop::sample::select(vec![0i64, 3600, 86400, -5, 1 << 40]),
        ),
        (
            small_vec(text()),
            small_vec(text()),
            text(),
            any::<bool>(),
            text(),
        ),
        (option::of(a1_ip()), text(), extra()),
    )
        .prop_map(
            |(
                (mac, hostname, lease_time),
                (name_servers, time_servers, arch, uefi, iface_name),
                (ip, vlan_id, extra),
            )| {
                a1::Dhcp {
                    mac,
                    hostname,
                    lease_time,
                    name_servers,
                    time_servers,
                    arch,
                    uefi,
                    iface_name,
                    ip,
                    vlan_id,
                    extra,
                }
            },
        )
}

fn a1_netboot() -> impl Strategy<Value = a1::Netboot> {
    (
        option::of(any::<bool>()),
        option::of(any::<bool>()),
        option::of(
            (text(), text(), extra()).prop_map(|(url, contents, extra)| a1::Ipxe {
                url,
                contents,
                extra,
            }),
        ),
        option::of((text(), text(), text(), extra()).prop_map(
            |(base_url, kernel, initrd, extra)| a1::Osie {
                kernel_params: if kernel.is_empty() {
                    Vec::new()
                } else {
                    vec![kernel.clone()]
                },
                base_url,
                kernel,
                initrd,
                extra,
            },
        )),
        extra(),
    )
        .prop_map(
            |(allow_pxe, allow_workflow, ipxe, osie, extra)| a1::Netboot {
                allow_pxe,
                allow_workflow,
                ipxe,
                osie,
                extra,
            },
        )
}

fn a1_hardware() -> impl Strategy<Value = a1::Hardware> {
    let iface = (option::of(a1_netboot()), option::of(a1_dhcp()), extra()).prop_map(
        |(netboot, dhcp, extra)| a1::Interface {
            netboot,
            dhcp,
            extra,
        },
    );
    let spec =
        (
            (
                option::of((option::of(text()), text(), text()).prop_map(
                    |(api_group, kind, name)| a1::TypedLocalObjectReference {
                        api_group,
                        kind,
                        name,
                    },
                )),
                vec(iface, 0..4),
                option::of(
                    (text(), any::<u8>()).prop_map(|(state, b)| a1::HardwareMetadata {
                        state,
                        bonding_mode: i64::from(b % 3),
                        custom: (b % 2 == 0).then(|| json!({"private_subnets": ["10.0.0.0/8"]})),
                        ..Default::default()
                    }),
                ),
                prop::sample::select(vec![0i64, 1]),
            ),
            (
                small_vec((text(), extra()).prop_map(|(device, extra)| a1::Disk { device, extra })),
                option::of(Just(BTreeMap::from([(
                    "cpu".to_string(),
                    Quantity("2".into()),
                )]))),
                option::of(text()),
                option::of(text()),
                extra(),
            ),
        )
            .prop_map(
                |(
                    (bmc_ref, interfaces, metadata, tink_version),
                    (disks, resources, user_data, vendor_data, extra),
                )| {
                    a1::HardwareSpec {
                        bmc_ref,
                        interfaces,
                        metadata,
                        tink_version,
                        disks,
                        resources: resources.unwrap_or_default(),
                        user_data,
                        vendor_data,
                        extra,
                    }
                },
            );
    let status = option::of(
        (text(), extra()).prop_map(|(state, extra)| a1::HardwareStatus { state, extra }),
    );
    (metadata(), spec, status).prop_map(|(metadata, spec, status)| a1::Hardware {
        metadata,
        spec,
        status,
    })
}

fn a1_doc() -> impl Strategy<Value = a1::TemplateDoc> {
    let action = (
        (
            prop::sample::select(vec!["stream", "grow", "kexec", ""]),
            text(),
            prop::sample::select(vec![0i64, 60, 600, -1]),
        ),
        (
            small_vec(text()),
            small_vec(text()),
            small_vec(text()),
            small_map(),
            text(),
            extra(),
        ),
    )
        .prop_map(
            |((name, image, timeout), (command, on_failure, volumes, environment, pid, extra))| {
                a1::TemplateAction {
                    name: name.to_string(),
                    image,
                    timeout,
                    command,
                    on_timeout: Vec::new(),
                    on_failure,
                    volumes,
                    environment,
                    pid,
                    extra,
                }
            },
        );
    let task = (
        prop::sample::select(vec!["os-installation", "second", ""]),
        text(),
        small_vec(
            prop::sample::select(vec!["/dev:/dev", "/x:/data", "/y:/data:ro"])
                .prop_map(str::to_string),
        ),
        small_map(),
        vec(action, 0..4),
        extra(),
    )
        .prop_map(
            |(name, worker, volumes, environment, actions, extra)| a1::TemplateTask {
                name: name.to_string(),
                worker,
                volumes,
                environment,
                actions,
                extra,
            },
        );
    (
        text(),
        text(),
        prop::sample::select(vec![0i64, 1800]),
        vec(task, 0..3),
        extra(),
    )
        .prop_map(
            |(version, name, global_timeout, tasks, extra)| a1::TemplateDoc {
                version,
                name,
                id: String::new(),
                global_timeout,
                tasks,
                extra,
            },
        )
}

/// Template data as written by hand (unquoted expressions, comments), generated from a doc, or
/// not parseable before rendering.
fn a1_data() -> impl Strategy<Value = Option<String>> {
    let hand = (text(), prop::sample::select(vec![60, 600]), any::<bool>()).prop_map(|(image, t, pid)| {
        format!(
            "version: \"0.1\"\nname: t # a comment\nglobal_timeout: 1800\ntasks:\n  - name: os\n    worker: \"{{{{.device_1}}}}\"\n    actions:\n      - name: stream\n        image: {image:?}\n        timeout: {t}\n{}        environment:\n          DEST_DISK: {{{{ index .Hardware.Disks 0 }}}}\n          COMPRESSED: true\n",
            if pid { "        pid: host\n" } else { "" }
        )
    });
    prop_oneof![
        Just(None),
        a1_doc().prop_map(|d| Some(d.to_yaml())),
        hand.prop_map(Some),
        Just(Some(
            "tasks:\n{{- range .tasks }}\n  - name: {{ .name }}\n{{- end }}\n".to_string()
        )),
        Just(Some(": : not yaml [".to_string())),
    ]
}

fn a1_template() -> impl Strategy<Value = a1::Template> {
    (
        metadata(),
        a1_data(),
        extra(),
        option::of(
            (text(), extra()).prop_map(|(state, extra)| a1::TemplateStatus { state, extra }),
        ),
    )
        .prop_map(|(metadata, data, extra, status)| a1::Template {
            metadata,
            spec: a1::TemplateSpec { data, extra },
            status,
        })
}

fn a1_state() -> impl Strategy<Value = a1::WorkflowState> {
    prop::sample::select(vec![
        "STATE_PENDING",
        "STATE_PREPARING",
        "STATE_RUNNING",
        "STATE_FAILED",
        "STATE_TIMEOUT",
        "STATE_SUCCESS",
        "STATE_SOMETHING_NEW",
    ])
    .prop_map(a1::WorkflowState::from_str_lossless)
}

/// BMC actions of a v1alpha1 customboot config, the ones with a v1alpha2 form and the ones
/// without (persistent `bootDevice`, newer actions, several operations at once).
fn a1_bmc_action() -> impl Strategy<Value = a1::BmcAction> {
    let boot_device = (
        option::of(prop::sample::select(vec![
            bmc::BootDevice::Pxe,
            bmc::BootDevice::Disk,
            bmc::BootDevice::Cdrom,
        ])),
        any::<bool>(),
        any::<bool>(),
        extra(),
    )
        .prop_map(
            |(device, persistent, efi_boot, extra)| a1::BootDeviceConfig {
                device,
                persistent,
                efi_boot,
                extra,
            },
        );
    prop_oneof![
        bmc_action().prop_map(|a| a1::BmcAction {
            power_action: a.power_action,
            one_time_boot_device_action: a.one_time_boot_device_action,
            virtual_media_action: a.virtual_media_action,
            ..Default::default()
        }),
        boot_device.prop_map(|d| a1::BmcAction {
            boot_device: Some(d),
            ..Default::default()
        }),
        (option::of(power()), extra()).prop_map(|(power_action, extra)| a1::BmcAction {
            power_action,
            extra,
            ..Default::default()
        }),
    ]
}

fn a1_boot_options() -> impl Strategy<Value = a1::BootOpts> {
    let customboot = (
        small_vec(a1_bmc_action()),
        small_vec(a1_bmc_action()),
        extra(),
    )
        .prop_map(
            |(preparing_actions, post_actions, extra)| a1::CustombootConfig {
                preparing_actions,
                post_actions,
                extra,
            },
        );
    (
        (any::<bool>(), any::<bool>()),
        prop::sample::select(vec!["", "netboot", "isoboot", "iso", "customboot", "pxe"]),
        prop::sample::select(vec!["", "http://10.0.0.1/hook.iso", "not a url"]),
        option::of(customboot),
        extra(),
    )
        .prop_map(
            |((toggle_allow_netboot, one_time_netboot), mode, iso, customboot_config, extra)| {
                a1::BootOpts {
                    toggle_allow_netboot,
                    one_time_netboot,
                    boot_mode: mode.to_string(),
                    iso_url: iso.to_string(),
                    customboot_config,
                    extra,
                }
            },
        )
}

fn a1_boot_status() -> impl Strategy<Value = a1::BootOptionsStatus> {
    let job = (
        prop::sample::select(vec!["", "0b6d5d1e-0000-4000-8000-000000000001"]),
        any::<bool>(),
        any::<bool>(),
        extra(),
    )
        .prop_map(
            |(uid, complete, existing_job_deleted, extra)| a1::JobStatus {
                uid: uid.to_string(),
                complete,
                existing_job_deleted,
                extra,
            },
        );
    let allow =
        (any::<bool>(), any::<bool>(), extra()).prop_map(|(toggled_true, toggled_false, extra)| {
            a1::AllowNetbootStatus {
                toggled_true,
                toggled_false,
                extra,
            }
        });
    (
        option::of(allow),
        btree_map(
            prop::sample::select(vec!["netboot-wf-1", "iso-mount-wf-1"]).prop_map(str::to_string),
            job,
            0..3,
        ),
        extra(),
    )
        .prop_map(|(allow_netboot, jobs, extra)| a1::BootOptionsStatus {
            allow_netboot,
            jobs,
            extra,
        })
}

fn a1_workflow() -> impl Strategy<Value = a1::Workflow> {
    let action = (
        (
            prop::sample::select(vec!["stream", "kexec", ""]),
            text(),
            prop::sample::select(vec![0i64, 90]),
        ),
        (
            small_vec(text()),
            small_map(),
            option::of(a1_state()),
            option::of(time()),
        ),
        (prop::sample::select(vec![0i64, 312]), text(), extra()),
    )
        .prop_map(
            |(
                (name, image, timeout),
                (command, environment, status, started_at),
                (seconds, message, extra),
            )| {
                a1::WorkflowAction {
                    name: name.to_string(),
                    image,
                    timeout,
                    command,
                    volumes: Vec::new(),
                    pid: String::new(),
                    environment,
                    state: status.clone().filter(|_| seconds % 2 == 1),
                    status,
                    execution_start: started_at.clone().filter(|_| seconds % 3 == 1),
                    started_at,
                    seconds,
                    message,
                    extra,
                }
            },
        );
    let task =
        (text(), text(), vec(action, 0..3), extra()).prop_map(|(name, worker, actions, extra)| {
            a1::WorkflowTask {
                name,
                agent_id: worker.clone(),
                worker,
                actions,
                volumes: Vec::new(),
                environment: BTreeMap::new(),
                extra,
            }
        });
    let cond = (
        text(),
        prop::sample::select(vec!["True", "False"]),
        text(),
        option::of(time()),
    )
        .prop_map(|(type_, status, reason, time)| a1::WorkflowCondition {
            type_,
            status: status.to_string(),
            reason,
            message: String::new(),
            time,
            extra: BTreeMap::new(),
        });
    let status = (
        (
            option::of(a1_state()),
            prop::sample::select(vec![0i64, 1800]),
            vec(task, 0..3),
        ),
        (
            small_vec(cond),
            option::of(time()),
            option::of(time()),
            extra(),
            option::of(a1_boot_status()),
        ),
    )
        .prop_map(
            |(
                (state, global_timeout, tasks),
                (conditions, time_started, time_completed, extra, boot_options),
            )| a1::WorkflowStatus {
                state,
                global_timeout,
                tasks,
                conditions,
                time_started,
                time_completed,
                agent_id: String::new(),
                boot_options,
                extra,
            },
        );
    let spec = (
        text(),
        text(),
        btree_map(key(), text(), 0..3),
        option::of(a1_boot_options()),
        extra(),
    )
        .prop_map(
            |(template_ref, hardware_ref, hardware_map, boot_options, extra)| a1::WorkflowSpec {
                template_ref,
                hardware_ref,
                hardware_map,
                boot_options,
                extra,
            },
        );
    (metadata(), spec, option::of(status)).prop_map(|(metadata, spec, status)| a1::Workflow {
        metadata,
        spec,
        status,
    })
}

// ---------- v1alpha2 ----------

fn a2_ref() -> impl Strategy<Value = a2::LocalObjectReference> {
    text().prop_map(a2::LocalObjectReference::new)
}

fn a2_hardware() -> impl Strategy<Value = a2::Hardware> {
    let dhcp = (
        (opt_text(), opt_text(), opt_text(), opt_text(), opt_text()),
        (
            small_vec(text()),
            small_vec(text()),
            prop::sample::select(vec![0i32, -1, 3600, 86400, i32::MAX]),
        ),
    )
        .prop_map(
            |(
                (ip, netmask, gateway, hostname, vlan_id),
                (nameservers, timeservers, lease_time),
            )| a2::Dhcp {
                ip,
                netmask,
                gateway,
                hostname,
                vlan_id,
                nameservers,
                timeservers,
                lease_time,
            },
        );
    let ni = (option::of(dhcp), any::<bool>(), any::<bool>()).prop_map(
        |(dhcp, disable_dhcp, disable_netboot)| a2::NetworkInterface {
            dhcp,
            disable_dhcp,
            disable_netboot,
        },
    );
    let spec = (
        btree_map(
            (0u8..5).prop_map(|i| format!("3c:ec:ef:00:00:0{i}")),
            ni,
            0..4,
        ),
        option::of(
            (option::of(text()), option::of(text()))
                .prop_map(|(content, url)| a2::Ipxe { content, url }),
        ),
        option::of((option::of(a2_ref()), small_vec(text())).prop_map(
            |(osie_ref, kernel_params)| a2::HardwareOsie {
                osie_ref,
                kernel_params,
            },
        )),
        option::of(
            (opt_text(), opt_text()).prop_map(|(userdata, vendordata)| a2::Instance {
                userdata,
                vendordata,
            }),
        ),
        small_vec(text()),
        option::of(a2_ref()),
        // A discovered machine's approval has no v1alpha1 home (the annotation keeps it).
        option::of((any::<bool>(), opt_text(), opt_text()).prop_map(
            |(approved, discovered_at, address)| a2::Discovery {
                approved,
                discovered_at,
                address,
            },
        )),
    )
        .prop_map(
            |(network_interfaces, ipxe, osie, instance, storage_devices, bmc_ref, discovery)| {
                a2::HardwareSpec {
                    network_interfaces,
                    ipxe,
                    osie,
                    instance,
                    storage_devices,
                    bmc_ref,
                    discovery,
                }
            },
        );
    // Observed attributes as the controller writes them (an inventory's `inBand`), and the
    // report time that v1alpha1 has no field for.
    let in_band = (1u32..256, opt_text()).prop_map(|(threads, serial)| {
        let mut v = serde_json::json!({
            "collectionMethod": "agent",
            "cpu": {"totalThreads": threads, "totalCores": threads.div_ceil(2)},
            "memory": {"totalBytes": u64::from(threads) << 30},
            "blockDevices": [{"name": "sda", "sizeBytes": 1u64 << 34}],
        });
        if let Some(serial) = serial {
            v["product"] = serde_json::json!({"serialNumber": serial});
        }
        v
    });
    let status = option::of(
        (
            option::of(
                option::of(in_band).prop_map(|in_band| a2::HardwareAttributes {
                    in_band,
                    out_of_band: None,
                }),
            ),
            opt_text(),
            option::of(prop_oneof![
                Just(a2::INVENTORY_SOURCE_AGENT.to_string()),
                Just(a2::INVENTORY_SOURCE_ENROLLMENT.to_string()),
            ]),
            opt_text(),
        )
            .prop_map(
                |(attributes, inventory_reported_at, inventory_source, inventory_request)| {
                    a2::HardwareStatus {
                        attributes,
                        inventory_reported_at,
                        inventory_source,
                        inventory_request,
                    }
                },
            ),
    );
    (metadata(), spec, status).prop_map(|(metadata, spec, status)| a2::Hardware {
        metadata,
        spec,
        status,
    })
}

fn a2_action() -> impl Strategy<Value = a2::Action> {
    (
        (
            prop::sample::select(vec!["stream", "grow", "kexec", ""]),
            text(),
            opt_text(),
        ),
        (
            small_vec(text()),
            small_map(),
            small_vec(text()),
            opt_text(),
            option::of(timeout()),
        ),
    )
        .prop_map(
            |((name, image, cmd), (args, env, volumes, network_namespace, timeout))| a2::Action {
                name: name.to_string(),
                image,
                cmd,
                args,
                env,
                volumes,
                pid_namespace: network_namespace.clone(),
                network_namespace,
                timeout,
            },
        )
}

fn a2_template() -> impl Strategy<Value = a2::Template> {
    let spec = (vec(a2_action(), 0..4), small_vec(text()), small_map()).prop_map(
        |(actions, volumes, env)| a2::TemplateSpec {
            actions,
            volumes,
            env,
            v1alpha1_data: None,
        },
    );
    (metadata(), spec).prop_map(|(metadata, spec)| a2::Template { metadata, spec })
}

/// v1alpha2 boot options, valid or not (an isoURL without isoboot, ...): conversion carries
/// both.
fn a2_boot_options() -> impl Strategy<Value = a2::BootOptions> {
    let customboot = (small_vec(bmc_action()), small_vec(bmc_action())).prop_map(
        |(preparing_actions, post_actions)| a2::CustombootConfig {
            preparing_actions,
            post_actions,
        },
    );
    (
        any::<bool>(),
        option::of(prop::sample::select(vec![
            "http://10.0.0.1/hook.iso",
            "https://boot.example.com/a.iso",
        ])),
        option::of(prop::sample::select(a2::BootMode::ALL.to_vec())),
        option::of(customboot),
    )
        .prop_map(
            |(toggle_allow_netboot, iso_url, boot_mode, customboot_config)| a2::BootOptions {
                toggle_allow_netboot,
                iso_url: iso_url.map(str::to_string),
                boot_mode,
                customboot_config,
            },
        )
}

fn a2_boot_status() -> impl Strategy<Value = a2::BootOptionsStatus> {
    let job = (
        option::of(Just("0b6d5d1e-0000-4000-8000-000000000001".to_string())),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(uid, complete, existing_job_deleted)| a2::BootJobStatus {
            uid,
            complete,
            existing_job_deleted,
        });
    (
        any::<bool>(),
        any::<bool>(),
        btree_map(
            prop::sample::select(vec!["netboot-wf-1", "iso-eject-wf-1"]).prop_map(str::to_string),
            job,
            0..3,
        ),
    )
        .prop_map(
            |(toggled_true, toggled_false, jobs)| a2::BootOptionsStatus {
                allow_netboot: a2::AllowNetbootStatus {
                    toggled_true,
                    toggled_false,
                },
                jobs,
            },
        )
}

fn a2_workflow() -> impl Strategy<Value = a2::Workflow> {
    let action_status = (
        (
            a2_action(),
            prop::sample::select(vec!["stream", "kexec", "a-1"]),
            option::of(time()),
            option::of(time()),
        ),
        (
            prop::sample::select(a2::ActionState::ALL.to_vec()),
            opt_text(),
            opt_text(),
        ),
    )
        .prop_map(
            |(
                (rendered, id, started_at, last_transition),
                (state, failure_reason, failure_message),
            )| a2::ActionStatus {
                rendered,
                id: id.to_string(),
                started_at,
                last_transition,
                state,
                failure_reason,
                failure_message,
            },
        );
    let condition = (
        prop::sample::select(vec![
            a2::ConditionType::Started,
            a2::ConditionType::Succeeded,
            a2::ConditionType::TemplateRendered,
        ]),
        prop::sample::select(vec![
            a2::ConditionStatus::True,
            a2::ConditionStatus::False,
            a2::ConditionStatus::Unknown,
        ]),
        prop::sample::select(vec![
            a2::ConditionSeverity::Error,
            a2::ConditionSeverity::Warning,
            a2::ConditionSeverity::Info,
            a2::ConditionSeverity::None,
        ]),
        option::of(time()),
        opt_text(),
        opt_text(),
    )
        .prop_map(
            |(type_, status, severity, last_transition, reason, message)| a2::Condition {
                type_,
                status,
                severity,
                last_transition,
                reason,
                message,
            },
        );
    let status = (
        (
            vec(action_status, 0..3),
            option::of(time()),
            option::of(time()),
        ),
        (
            prop::sample::select(a2::WorkflowState::ALL.to_vec()),
            vec(condition, 0..3),
            opt_text(),
            opt_text(),
        ),
        (0u32..5, option::of(time()), option::of(0i64..5)),
        (option::of(time()), opt_text(), a2_boot_status()),
    )
        .prop_map(
            |(
                (actions, started_at, last_transition),
                (state, conditions, agent_id, dispatch_id),
                (dispatch_attempts, next_attempt_at, observed_generation),
                (received_at, agent_instance, boot_options),
            )| a2::WorkflowStatus {
                boot_options,
                received_at,
                agent_instance,
                actions,
                started_at,
                last_transition,
                state,
                conditions,
                agent_id,
                dispatch_id,
                dispatch_attempts,
                next_attempt_at,
                observed_generation,
            },
        );
    let spec = (
        a2_ref(),
        a2_ref(),
        btree_map(key(), json_value(), 0..3),
        option::of(timeout()),
        option::of(a2_boot_options()),
    )
        .prop_map(
            |(hardware_ref, template_ref, template_data, timeout, boot_options)| a2::WorkflowSpec {
                hardware_ref,
                template_ref,
                template_data,
                timeout,
                boot_options,
            },
        );
    (metadata(), spec, option::of(status)).prop_map(|(metadata, spec, status)| a2::Workflow {
        metadata,
        spec,
        status,
    })
}

// ---------- properties ----------

fn json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("serialize")
}

fn raw_round_trip(v: Value, via: &str, back: &str) -> Value {
    let there = conversion::convert(v, via).expect("convert there");
    conversion::convert(there, back).expect("convert back")
}

proptest! {
    #![proptest_config(config(CASES))]

    #[test]
    fn hardware_v1alpha1_survives_round_trip(x in a1_hardware()) {
        let v2 = conversion::hardware_to_v1alpha2(&x);
        prop_assert_eq!(&conversion::hardware_to_v1alpha1(&v2), &x);
    }

    #[test]
    fn hardware_v1alpha2_survives_round_trip(x in a2_hardware()) {
        let v1 = conversion::hardware_to_v1alpha1(&x);
        prop_assert_eq!(&conversion::hardware_to_v1alpha2(&v1), &x);
    }

    #[test]
    fn template_v1alpha1_survives_round_trip(x in a1_template()) {
        let v2 = conversion::template_to_v1alpha2(&x);
        prop_assert_eq!(&conversion::template_to_v1alpha1(&v2), &x);
    }

    #[test]
    fn template_v1alpha2_survives_round_trip(x in a2_template()) {
        let v1 = conversion::template_to_v1alpha1(&x);
        prop_assert_eq!(&conversion::template_to_v1alpha2(&v1), &x);
    }

    #[test]
    fn workflow_v1alpha1_survives_round_trip(x in a1_workflow()) {
        let v2 = conversion::workflow_to_v1alpha2(&x);
        prop_assert_eq!(&conversion::workflow_to_v1alpha1(&v2), &x);
    }

    #[test]
    fn workflow_v1alpha2_survives_round_trip(x in a2_workflow()) {
        let v1 = conversion::workflow_to_v1alpha1(&x);
        prop_assert_eq!(&conversion::workflow_to_v1alpha2(&v1), &x);
    }
}

proptest! {
    #![proptest_config(config(RAW_CASES))]

    /// Boot options are carried by the mappings themselves, not only by the annotation: a
    /// v1alpha2 Workflow converted down needs no annotation for them, and converting the
    /// result up without any annotation gives them back.
    #[test]
    fn workflow_boot_options_have_a_home_in_both_versions(x in a2_workflow()) {
        let v1 = conversion::convert(json(&x), a1::API_VERSION).expect("down");
        let kept: Vec<String> = conversion::conversion_data_paths(&v1)
            .into_iter()
            .filter(|p| p.contains("bootOptions"))
            .collect();
        prop_assert!(kept.is_empty(), "annotation holds {:?}", kept);
        let mut bare = v1;
        if let Some(a) = bare.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) {
            a.remove(tink_api::CONVERSION_DATA_ANNOTATION);
        }
        let up: a2::Workflow =
            tink_api::from_value(conversion::convert(bare, a2::API_VERSION).expect("up"))
                .expect("typed");
        prop_assert_eq!(&up.spec.boot_options, &x.spec.boot_options);
        // (a status may appear: `spec.timeout` travels as `status.globalTimeout`)
        prop_assert_eq!(
            up.status.map(|s| s.boot_options).unwrap_or_default(),
            x.status.map(|s| s.boot_options).unwrap_or_default()
        );
    }

    #[test]
    fn raw_objects_survive_round_trips(
        h1 in a1_hardware(), h2 in a2_hardware(),
        t1 in a1_template(), t2 in a2_template(),
        w1 in a1_workflow(), w2 in a2_workflow(),
    ) {
        for j in [json(&h1), json(&t1), json(&w1)] {
            prop_assert_eq!(raw_round_trip(j.clone(), a2::API_VERSION, a1::API_VERSION), j);
        }
        for j in [json(&h2), json(&t2), json(&w2)] {
            prop_assert_eq!(raw_round_trip(j.clone(), a1::API_VERSION, a2::API_VERSION), j);
        }
    }
}

/// Tinkerbell's observed attributes live in `status.attributes` in both versions: the
/// agent's inventory (`inBand`) written on a v1alpha2 Hardware reads the same through v1alpha1,
/// and a v1alpha1 Hardware's attributes reach v1alpha2; both come back exactly.
#[test]
fn status_attributes_map_both_ways() {
    let in_band = json!({
        "collectionMethod": "agent",
        "lastUpdated": "2026-11-27T10:00:00Z",
        "cpu": {"totalCores": 4, "totalThreads": 8},
        "memory": {"totalBytes": 17179869184u64},
        "product": {"serialNumber": "QEMU-1"},
    });
    let v2: a2::Hardware = serde_json::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
        "metadata": {"name": "m1", "namespace": "a"},
        "spec": {"networkInterfaces": {"02:00:00:00:00:01": {}}},
        "status": {"attributes": {"inBand": in_band}, "inventoryReportedAt": "2026-11-27T10:00:01Z"},
    }))
    .unwrap();
    let v1 = conversion::hardware_to_v1alpha1(&v2);
    let v1_status = v1.status.clone().expect("v1alpha1 status");
    assert_eq!(v1_status.extra["attributes"]["inBand"], in_band);
    let back = conversion::hardware_to_v1alpha2(&v1);
    assert_eq!(back.status, v2.status);

    let v1: a1::Hardware = serde_json::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha1", "kind": "Hardware",
        "metadata": {"name": "m2", "namespace": "a"},
        "spec": {},
        "status": {"state": "Ready", "attributes": {"inBand": in_band}},
    }))
    .unwrap();
    let v2 = conversion::hardware_to_v1alpha2(&v1);
    let attributes = v2.status.as_ref().and_then(|s| s.attributes.as_ref());
    assert_eq!(attributes.and_then(|a| a.in_band.as_ref()), Some(&in_band));
    assert_eq!(conversion::hardware_to_v1alpha1(&v2), v1);
}
