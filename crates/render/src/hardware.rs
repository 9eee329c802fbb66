//! `.Hardware`: the Hardware as Tinkerbell templates read it (see docs/templates.md).
//!
//! Tinkerbell renders templates with Go structs (`templateHardwareData`: `Disks`, `Interfaces`,
//! `UserData`, `Metadata`, `VendorData`), so every field of those structs exists, zero-valued
//! when unset, and a template may read `.Hardware.Interfaces[0].DHCP.Arch` or
//! `.Hardware.Metadata.Instance.OperatingSystem.Distro` under `missingkey=error`. The values
//! come from the v1alpha2 Hardware and, for the fields v1alpha2 has no home for (`arch`, `uefi`,
//! `iface_name`, `metadata`, ...), from its conversion annotation: the object is converted to
//! v1alpha1 and read from there. Each Go field name has its v1alpha1 JSON name (`DHCP`/`dhcp`,
//! `LeaseTime`/`lease_time`, `FacilityCode`/`facility_code`) as an alias.

use serde_json::{Map, Value, json};
use tink_api::v1alpha1 as a1;
use tink_api::v1alpha2::Hardware;

/// An object with each field under its Go name and, when different, its JSON name.
fn obj(fields: Vec<(&str, &str, Value)>) -> Value {
    let mut m = Map::new();
    for (go, js, v) in fields {
        if go != js {
            m.insert(js.to_string(), v.clone());
        }
        m.insert(go.to_string(), v);
    }
    Value::Object(m)
}

fn s(v: &str) -> Value {
    Value::String(v.to_string())
}

fn strings(v: &[String]) -> Value {
    json!(v)
}

/// A free-form JSON value kept as is (Go `interface{}`/raw fields), `null` when absent.
fn raw(v: Option<&Value>) -> Value {
    v.cloned().unwrap_or(Value::Null)
}

/// Reads a key of a free-form object, `""` when absent.
fn str_of(v: Option<&Value>, key: &str) -> Value {
    v.and_then(|v| v.get(key)).cloned().unwrap_or_else(|| s(""))
}

fn interface(i: &a1::Interface, v2: &Hardware) -> Value {
    let d = i.dhcp.clone().unwrap_or_default();
    let ip = d.ip.clone().unwrap_or_default();
    let mac = d.mac.to_ascii_lowercase();
    let nic = v2.spec.interface(&mac);
    let n = i.netboot.clone().unwrap_or_default();
    let ipxe = n.ipxe.as_ref().map_or(Value::Null, |x| {
        obj(vec![
            ("URL", "url", s(&x.url)),
            ("Contents", "contents", s(&x.contents)),
        ])
    });
    let osie = n.osie.as_ref().map_or(Value::Null, |o| {
        obj(vec![
            ("BaseURL", "baseURL", s(&o.base_url)),
            ("Kernel", "kernel", s(&o.kernel)),
            ("Initrd", "initrd", s(&o.initrd)),
            ("KernelParams", "kernelParams", strings(&o.kernel_params)),
        ])
    });
    let allow_pxe = nic.map_or(n.allow_pxe.unwrap_or(false), |n| n.netboot_allowed());
    obj(vec![
        (
            "DHCP",
            "dhcp",
            obj(vec![
                ("MAC", "mac", s(&d.mac)),
                ("Hostname", "hostname", s(&d.hostname)),
                ("LeaseTime", "lease_time", json!(d.lease_time)),
                ("NameServers", "name_servers", strings(&d.name_servers)),
                ("TimeServers", "time_servers", strings(&d.time_servers)),
                ("Arch", "arch", s(&d.arch)),
                ("UEFI", "uefi", json!(d.uefi)),
                ("IfaceName", "iface_name", s(&d.iface_name)),
                (
                    "IP",
                    "ip",
                    obj(vec![
                        ("Address", "address", s(&ip.address)),
                        ("Netmask", "netmask", s(&ip.netmask)),
                        ("Gateway", "gateway", s(&ip.gateway)),
                        ("Family", "family", json!(ip.family)),
                    ]),
                ),
                ("VLANID", "vlan_id", s(&d.vlan_id)),
            ]),
        ),
        (
            "Netboot",
            "netboot",
            obj(vec![
                ("AllowPXE", "allowPXE", json!(allow_pxe)),
                (
                    "AllowWorkflow",
                    "allowWorkflow",
                    json!(n.allow_workflow.unwrap_or(true)),
                ),
                ("IPXE", "ipxe", ipxe),
                ("OSIE", "osie", osie),
            ]),
        ),
        (
            "DisableDHCP",
            "disableDhcp",
            json!(nic.is_some_and(|n| n.disable_dhcp)),
        ),
    ])
}

fn operating_system(v: Option<&Value>) -> Value {
    match v {
        None | Some(Value::Null) => Value::Null,
        Some(os) => obj(vec![
            ("Slug", "slug", str_of(Some(os), "slug")),
            ("Distro", "distro", str_of(Some(os), "distro")),
            ("Version", "version", str_of(Some(os), "version")),
            ("ImageTag", "image_tag", str_of(Some(os), "image_tag")),
            ("OsSlug", "os_slug", str_of(Some(os), "os_slug")),
        ]),
    }
}

fn metadata(m: Option<&a1::HardwareMetadata>) -> Value {
    let m = m.cloned().unwrap_or_default();
    let facility = m.facility.as_ref().map_or(Value::Null, |f| {
        obj(vec![
            ("PlanSlug", "plan_slug", s(&f.plan_slug)),
            (
                "PlanVersionSlug",
                "plan_version_slug",
                s(&f.plan_version_slug),
            ),
            ("FacilityCode", "facility_code", s(&f.facility_code)),
        ])
    });
    let manufacturer = m.manufacturer.as_ref().map_or(Value::Null, |f| {
        obj(vec![("ID", "id", s(&f.id)), ("Slug", "slug", s(&f.slug))])
    });
    let instance = m.instance.as_ref().map_or(Value::Null, |i| {
        obj(vec![
            ("ID", "id", s(&i.id)),
            ("State", "state", s(&i.state)),
            ("Hostname", "hostname", s(&i.hostname)),
            ("AllowPXE", "allow_pxe", json!(i.allow_pxe)),
            ("Rescue", "rescue", json!(i.rescue)),
            (
                "OperatingSystem",
                "operating_system",
                operating_system(i.operating_system.as_ref()),
            ),
            ("AlwaysPXE", "always_pxe", json!(i.always_pxe)),
            ("IPXEScriptURL", "ipxe_script_url", s(&i.ipxe_script_url)),
            ("Ips", "ips", json!(i.ips)),
            ("Userdata", "userdata", s(&i.userdata)),
            (
                "CryptedRootPassword",
                "crypted_root_password",
                s(&i.crypted_root_password),
            ),
            ("Tags", "tags", strings(&i.tags)),
            ("Storage", "storage", raw(i.storage.as_ref())),
            ("SSHKeys", "ssh_keys", strings(&i.ssh_keys)),
            ("NetworkReady", "network_ready", json!(i.network_ready)),
        ])
    });
    obj(vec![
        ("State", "state", s(&m.state)),
        ("BondingMode", "bonding_mode", json!(m.bonding_mode)),
        ("Manufacturer", "manufacturer", manufacturer),
        ("Instance", "instance", instance),
        ("Custom", "custom", raw(m.custom.as_ref())),
        ("Facility", "facility", facility),
    ])
}

/// `.Hardware` (see the module documentation and docs/templates.md).
pub fn hardware_data(hardware: &Hardware) -> Value {
    let v1 = tink_api::conversion::hardware_to_v1alpha1(hardware);
    let spec = &hardware.spec;
    let interfaces: Vec<Value> = v1
        .spec
        .interfaces
        .iter()
        .map(|i| interface(i, hardware))
        .collect();
    let instance = spec.instance.clone().unwrap_or_default();
    let meta = &hardware.metadata;
    let mut annotations = meta.annotations.clone().unwrap_or_default();
    annotations.remove(tink_api::CONVERSION_DATA_ANNOTATION);
    let mut data = obj(vec![
        ("Disks", "disks", json!(spec.storage_devices)),
        ("Interfaces", "interfaces", Value::Array(interfaces)),
        (
            "UserData",
            "userData",
            s(instance.userdata.as_deref().unwrap_or_default()),
        ),
        (
            "VendorData",
            "vendorData",
            s(instance.vendordata.as_deref().unwrap_or_default()),
        ),
        ("Metadata", "metadata", metadata(v1.spec.metadata.as_ref())),
    ]);
    if let Value::Object(m) = &mut data {
        m.insert("StorageDevices".into(), json!(spec.storage_devices));
        m.insert("Name".into(), s(meta.name.as_deref().unwrap_or_default()));
        m.insert(
            "Namespace".into(),
            s(meta.namespace.as_deref().unwrap_or_default()),
        );
        m.insert(
            "Labels".into(),
            json!(meta.labels.clone().unwrap_or_default()),
        );
        m.insert("Annotations".into(), json!(annotations));
        m.insert(
            "Spec".into(),
            serde_json::to_value(spec).unwrap_or(Value::Null),
        );
    }
    data
}
