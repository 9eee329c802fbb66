//! Hardware field mappings (see the module documentation of [`super`]).

use std::collections::BTreeMap;

use serde_json::Value;

use super::Mapping;
use super::patch::{keyify_at, unkeyify_at};
use crate::v1alpha1 as a1;
use crate::v1alpha2 as a2;

pub(super) struct HardwareMapping;

/// The Rufio Machine kind a v1alpha2 `bmcRef` points at.
const BMC_API_GROUP: &str = "bmc.tinkerbell.org";
const BMC_KIND: &str = "Machine";

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// v1alpha2's `leaseTime` is an int32 of seconds, at least 0. Zero (unset in Go) gets the
/// default; larger values are clamped and negative ones defaulted, each with a warning.
fn lease_time_up(seconds: i64, index: usize, warnings: &mut Vec<String>) -> i32 {
    let field = format!("spec.interfaces[{index}].dhcp.lease_time");
    match i32::try_from(seconds) {
        Ok(0) => a2::DEFAULT_LEASE_TIME,
        Ok(t) if t > 0 => t,
        Ok(_) => {
            warnings.push(format!(
                "{field}: {seconds} is negative; v1alpha2 serves the default {} seconds",
                a2::DEFAULT_LEASE_TIME
            ));
            a2::DEFAULT_LEASE_TIME
        }
        Err(_) if seconds > 0 => {
            warnings.push(format!(
                "{field}: {seconds} is above the v1alpha2 maximum {} (int32 seconds); clamped to it",
                i32::MAX
            ));
            i32::MAX
        }
        Err(_) => {
            warnings.push(format!(
                "{field}: {seconds} is negative; v1alpha2 serves the default {} seconds",
                a2::DEFAULT_LEASE_TIME
            ));
            a2::DEFAULT_LEASE_TIME
        }
    }
}

/// The key of Tinkerbell's observed attributes in both versions' `status`.
const ATTRIBUTES: &str = "attributes";

/// v1alpha1 `status.attributes` (kept among the status's unknown fields) -> v1alpha2
/// `status.attributes`. A value that is not an attributes object stays in the annotation.
fn status_up(v1: Option<&a1::HardwareStatus>) -> Option<a2::HardwareStatus> {
    let attributes = v1?.extra.get(ATTRIBUTES)?;
    let attributes: a2::HardwareAttributes = serde_json::from_value(attributes.clone()).ok()?;
    Some(a2::HardwareStatus {
        attributes: Some(attributes),
        ..a2::HardwareStatus::default()
    })
}

/// v1alpha2 `status.attributes` -> v1alpha1 `status.attributes`; `inventoryReportedAt`,
/// `inventorySource` and `inventoryRequest` have no v1alpha1 home (annotation).
fn status_down(v2: Option<&a2::HardwareStatus>) -> Option<a1::HardwareStatus> {
    let attributes = v2?.attributes.as_ref()?;
    let value = serde_json::to_value(attributes).ok()?;
    Some(a1::HardwareStatus {
        state: String::new(),
        extra: BTreeMap::from([(ATTRIBUTES.to_string(), value)]),
    })
}

fn interface_key(v: &Value) -> Option<String> {
    let mac = v.get("dhcp")?.get("mac")?.as_str()?;
    (!mac.is_empty()).then(|| mac.to_ascii_lowercase())
}

impl Mapping for HardwareMapping {
    type V1 = a1::Hardware;
    type V2 = a2::Hardware;

    fn up(v1: &a1::Hardware, warnings: &mut Vec<String>) -> a2::Hardware {
        let s = &v1.spec;
        let mut network_interfaces = BTreeMap::new();
        for (i, iface) in s.interfaces.iter().enumerate() {
            let Some(dhcp) = &iface.dhcp else { continue };
            if dhcp.mac.is_empty() {
                continue;
            }
            let mac = dhcp.mac.to_ascii_lowercase();
            if network_interfaces.contains_key(&mac) {
                continue;
            }
            let ip = dhcp.ip.as_ref();
            let lease_time = lease_time_up(dhcp.lease_time, i, warnings);
            let ni = a2::NetworkInterface {
                dhcp: Some(a2::Dhcp {
                    ip: ip.and_then(|i| non_empty(&i.address)),
                    netmask: ip.and_then(|i| non_empty(&i.netmask)),
                    gateway: ip.and_then(|i| non_empty(&i.gateway)),
                    hostname: non_empty(&dhcp.hostname),
                    vlan_id: non_empty(&dhcp.vlan_id),
                    nameservers: dhcp.name_servers.clone(),
                    timeservers: dhcp.time_servers.clone(),
                    lease_time,
                }),
                disable_dhcp: false,
                disable_netboot: iface.netboot.as_ref().and_then(|n| n.allow_pxe) == Some(false),
            };
            network_interfaces.insert(mac, ni);
        }
        let ipxe = s
            .interfaces
            .iter()
            .filter_map(|i| i.netboot.as_ref()?.ipxe.as_ref())
            .find(|x| !x.url.is_empty() || !x.contents.is_empty())
            .map(|x| a2::Ipxe {
                content: non_empty(&x.contents),
                url: non_empty(&x.url),
            });
        let kernel_params: Vec<String> = s
            .interfaces
            .iter()
            .filter_map(|i| i.netboot.as_ref()?.osie.as_ref())
            .map(|o| o.kernel_params.clone())
            .find(|p| !p.is_empty())
            .unwrap_or_default();
        let osie = (!kernel_params.is_empty()).then_some(a2::HardwareOsie {
            osie_ref: None,
            kernel_params,
        });
        let userdata = s.user_data.as_deref().and_then(non_empty);
        let vendordata = s.vendor_data.as_deref().and_then(non_empty);
        let instance = (userdata.is_some() || vendordata.is_some()).then_some(a2::Instance {
            userdata,
            vendordata,
        });
        a2::Hardware {
            metadata: v1.metadata.clone(),
            spec: a2::HardwareSpec {
                network_interfaces,
                ipxe,
                osie,
                instance,
                storage_devices: s
                    .disks
                    .iter()
                    .filter(|d| !d.device.is_empty())
                    .map(|d| d.device.clone())
                    .collect(),
                bmc_ref: s
                    .bmc_ref
                    .as_ref()
                    .map(|r| a2::LocalObjectReference::new(r.name.clone())),
                // v1alpha1 has no home for it: the round-trip annotation keeps it.
                discovery: None,
            },
            status: status_up(v1.status.as_ref()),
        }
    }

    fn down(v2: &a2::Hardware, _: &mut Vec<String>) -> a1::Hardware {
        let s = &v2.spec;
        let osie = s
            .osie
            .as_ref()
            .filter(|o| !o.kernel_params.is_empty())
            .map(|o| a1::Osie {
                kernel_params: o.kernel_params.clone(),
                ..Default::default()
            });
        let ipxe = s.ipxe.as_ref().map(|x| a1::Ipxe {
            url: x.url.clone().unwrap_or_default(),
            contents: x.content.clone().unwrap_or_default(),
            extra: Default::default(),
        });
        let interfaces = s
            .network_interfaces
            .iter()
            .map(|(mac, ni)| {
                let d = ni.dhcp.clone().unwrap_or_default();
                let has_ip = d.ip.is_some() || d.netmask.is_some() || d.gateway.is_some();
                let lease_time = if ni.dhcp.is_some() {
                    i64::from(d.lease_time)
                } else {
                    0
                };
                a1::Interface {
                    netboot: Some(a1::Netboot {
                        allow_pxe: Some(ni.netboot_allowed()),
                        allow_workflow: Some(ni.netboot_allowed()),
                        ipxe: ipxe.clone(),
                        osie: osie.clone(),
                        extra: Default::default(),
                    }),
                    dhcp: Some(a1::Dhcp {
                        mac: mac.clone(),
                        hostname: d.hostname.unwrap_or_default(),
                        lease_time,
                        name_servers: d.nameservers,
                        time_servers: d.timeservers,
                        vlan_id: d.vlan_id.unwrap_or_default(),
                        ip: has_ip.then(|| a1::Ip {
                            address: d.ip.unwrap_or_default(),
                            netmask: d.netmask.unwrap_or_default(),
                            gateway: d.gateway.unwrap_or_default(),
                            family: 4,
                            extra: Default::default(),
                        }),
                        ..Default::default()
                    }),
                    extra: Default::default(),
                }
            })
            .collect();
        let instance = s.instance.clone().unwrap_or_default();
        a1::Hardware {
            metadata: v2.metadata.clone(),
            spec: a1::HardwareSpec {
                bmc_ref: s.bmc_ref.as_ref().map(|r| a1::TypedLocalObjectReference {
                    api_group: Some(BMC_API_GROUP.to_string()),
                    kind: BMC_KIND.to_string(),
                    name: r.name.clone(),
                }),
                interfaces,
                disks: s
                    .storage_devices
                    .iter()
                    .map(|d| a1::Disk {
                        device: d.clone(),
                        extra: Default::default(),
                    })
                    .collect(),
                user_data: instance.userdata,
                vendor_data: instance.vendordata,
                ..Default::default()
            },
            status: status_down(v2.status.as_ref()),
        }
    }

    fn view_v1(v: &mut Value) {
        keyify_at(v, &["spec", "interfaces"], interface_key);
    }

    fn unview_v1(v: &mut Value) {
        unkeyify_at(v, &["spec", "interfaces"]);
    }
}
