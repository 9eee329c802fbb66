//! What Hegel knows about one machine, computed once per Hardware change (never per request):
//! its interfaces, instance data, boot settings and, for each interface with an IP, the whole
//! EC2 meta-data tree as ready-made response bodies.
//!
//! Where each value comes from (see also services/hegel/README.md):
//!
//! | meta-data | source |
//! |---|---|
//! | `instance-id` | the v1alpha1 `spec.metadata.instance.id` of a migrated Hardware (kept in the `tinkerbell.org/conversion-data` annotation), else the Hardware's `metadata.uid` |
//! | `hostname`, `local-hostname` | `dhcp.hostname` of the interface whose `dhcp.ip` the caller has, else of the first interface that has one, else the migrated `metadata.instance.hostname`, else the Hardware's name |
//! | `local-ipv4` | that interface's `dhcp.ip` |
//! | `mac` | that interface's MAC (the `networkInterfaces` key, lower case) |
//! | `public-keys/` | the migrated `metadata.instance.ssh_keys` (v1alpha2 has no field for keys); absent when there are none |
//! | `facility`, `plan` | the migrated `metadata.facility.{facility_code,plan_slug}`, when set |
//! | `tags` | the migrated `metadata.instance.tags`, when any |
//! | `user-data` | `spec.instance.userdata`, byte for byte; 404 when unset |
//! | `vendor-data` | `spec.instance.vendordata`, byte for byte; 404 when unset |

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use bytes::Bytes;
use tink_api::v1alpha2::{Hardware, Ipxe};
use tink_hardware_index::{InterfaceEntry, non_empty};

/// One network interface of a machine (the shared index's view of it).
pub use tink_hardware_index::Interface;

/// How a machine netboots, from `spec.ipxe` and `spec.osie`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Boot {
    /// `spec.ipxe.inline`: served as is.
    Inline(String),
    /// `spec.ipxe.url`: chained.
    Chain(String),
    /// `spec.osie.osieRef`: the OSIE object (same namespace) and `spec.osie.kernelParams`.
    Osie {
        /// The OSIE's name.
        name: String,
        /// The machine's own kernel parameters, appended last.
        kernel_params: Vec<String>,
    },
    /// Neither `spec.ipxe` nor `spec.osie.osieRef`.
    Nothing,
}

/// Everything Hegel serves about one Hardware.
#[derive(Debug)]
pub struct Machine {
    /// `namespace/name` of the Hardware.
    pub key: String,
    /// The Hardware's namespace (OSIE references are resolved in it).
    pub namespace: String,
    /// The Hardware's name.
    pub name: String,
    /// The interfaces, in MAC order.
    pub interfaces: Vec<Interface>,
    /// `spec.instance.userdata`.
    pub user_data: Option<Bytes>,
    /// `spec.instance.vendordata`.
    pub vendor_data: Option<Bytes>,
    /// How it netboots.
    pub boot: Boot,
    /// The migrated v1alpha1 `metadata.facility.facility_code` (the iPXE `facility=`).
    pub facility: Option<String>,
    /// The Secret (in the Hardware's namespace) named by its `tinkerbell.org/agent-secret`
    /// annotation: the `secret` value of the controller's copy of it goes in the boot script as
    /// `tink_agent_secret=` ([`crate::secrets`]).
    pub agent_secret: Option<String>,
    /// Per interface index with an IP: the meta-data tree seen from that interface.
    trees: Vec<Option<Arc<MetaTree>>>,
}

/// The meta-data tree as seen from one interface: path (no leading or trailing `/`; `""` is
/// the root listing) to response body. Directory listings are entries too.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct MetaTree {
    entries: HashMap<String, Bytes>,
}

impl MetaTree {
    /// The body at `path` (`public-keys`, `public-keys/`, `public-keys/0/openssh-key`, ...).
    pub fn get(&self, path: &str) -> Option<&Bytes> {
        self.entries.get(path.trim_matches('/'))
    }

    /// The names served, for tests.
    pub fn paths(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.entries.keys().map(String::as_str).collect();
        v.sort_unstable();
        v
    }
}

/// Values a migrated (v1alpha1) Hardware kept in its conversion annotation.
#[derive(Debug, Default)]
struct Legacy {
    instance_id: Option<String>,
    hostname: Option<String>,
    ssh_keys: Vec<String>,
    tags: Vec<String>,
    facility: Option<String>,
    plan: Option<String>,
}

impl Legacy {
    fn of(hw: &Hardware) -> Self {
        let annotated = hw
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(tink_api::CONVERSION_DATA_ANNOTATION));
        if !annotated {
            return Self::default();
        }
        let old = tink_api::conversion::hardware_to_v1alpha1(hw);
        let Some(meta) = old.spec.metadata else {
            return Self::default();
        };
        let mut out = Self::default();
        if let Some(i) = &meta.instance {
            out.instance_id = non_empty(&i.id);
            out.hostname = non_empty(&i.hostname);
            out.ssh_keys = i.ssh_keys.iter().filter_map(|k| non_empty(k)).collect();
            out.tags = i.tags.iter().filter_map(|t| non_empty(t)).collect();
        }
        if let Some(f) = &meta.facility {
            out.facility = non_empty(&f.facility_code);
            out.plan = non_empty(&f.plan_slug);
        }
        out
    }
}

/// The `namespace/name` key of a Hardware.
pub fn key_of(hw: &Hardware) -> String {
    format!(
        "{}/{}",
        hw.metadata.namespace.as_deref().unwrap_or_default(),
        hw.metadata.name.as_deref().unwrap_or_default()
    )
}

use tink_api::agent_secret::AGENT_SECRET_ANNOTATION;

impl Machine {
    /// An unknown machine (no Hardware names `mac`) booting the discovery OSIE `osie` of
    /// `namespace` to enroll: one interface, no address, no user data, no agent secret.
    pub fn discovered(namespace: &str, mac: &str, osie: &str) -> Self {
        Self {
            key: format!("{namespace}/(discovery {mac})"),
            namespace: namespace.to_string(),
            name: String::new(),
            interfaces: vec![Interface {
                mac: mac.to_string(),
                ip: None,
                hostname: None,
                vlan_id: None,
                netmask: None,
                gateway: None,
                nameservers: Vec::new(),
                timeservers: Vec::new(),
                lease_time: None,
                disable_dhcp: false,
                disable_netboot: false,
            }],
            user_data: None,
            vendor_data: None,
            boot: Boot::Osie {
                name: osie.to_string(),
                kernel_params: Vec::new(),
            },
            facility: None,
            agent_secret: None,
            trees: vec![None],
        }
    }

    /// Everything served about `hw`, computed now.
    pub fn from_hardware(hw: &Hardware) -> Self {
        let legacy = Legacy::of(hw);
        let spec = &hw.spec;
        let interfaces = Interface::all_of(hw);
        let instance = spec.instance.as_ref();
        let boot = match (&spec.ipxe, &spec.osie) {
            (
                Some(Ipxe {
                    content: Some(script),
                    ..
                }),
                _,
            ) => Boot::Inline(script.clone()),
            (Some(Ipxe { url: Some(url), .. }), _) => Boot::Chain(url.clone()),
            (_, Some(osie)) => match &osie.osie_ref {
                Some(r) => Boot::Osie {
                    name: r.name.clone(),
                    kernel_params: osie.kernel_params.clone(),
                },
                None => Boot::Nothing,
            },
            _ => Boot::Nothing,
        };
        let name = hw.metadata.name.clone().unwrap_or_default();
        let instance_id = legacy
            .instance_id
            .clone()
            .or_else(|| hw.metadata.uid.clone())
            .unwrap_or_else(|| key_of(hw));
        let fallback_hostname = interfaces
            .iter()
            .find_map(|i| i.hostname.clone())
            .or_else(|| legacy.hostname.clone())
            .unwrap_or_else(|| name.clone());
        let trees = interfaces
            .iter()
            .map(|i| {
                let ip = i.ip?;
                let hostname = i.hostname.as_deref().unwrap_or(&fallback_hostname);
                Some(Arc::new(meta_tree(
                    &instance_id,
                    hostname,
                    ip,
                    &i.mac,
                    &legacy,
                )))
            })
            .collect();
        Self {
            key: key_of(hw),
            namespace: hw.metadata.namespace.clone().unwrap_or_default(),
            name,
            interfaces,
            user_data: instance
                .and_then(|i| i.userdata.as_ref())
                .map(|s| Bytes::copy_from_slice(s.as_bytes())),
            vendor_data: instance
                .and_then(|i| i.vendordata.as_ref())
                .map(|s| Bytes::copy_from_slice(s.as_bytes())),
            boot,
            facility: legacy.facility,
            agent_secret: hw
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(AGENT_SECRET_ANNOTATION))
                .filter(|n| !n.is_empty())
                .cloned(),
            trees,
        }
    }

    /// The interface with this IP.
    pub fn interface_by_ip(&self, ip: IpAddr) -> Option<usize> {
        let IpAddr::V4(v4) = ip else { return None };
        self.interfaces.iter().position(|i| i.ip == Some(v4))
    }

    /// The interface with this MAC (lower case).
    pub fn interface_by_mac(&self, mac: &str) -> Option<usize> {
        self.interfaces.iter().position(|i| i.mac == mac)
    }

    /// Interface `index` (as returned by a lookup).
    pub fn interface(&self, index: usize) -> Option<&Interface> {
        self.interfaces.get(index)
    }

    /// The meta-data tree seen from interface `index` (one with an IP).
    pub fn tree(&self, index: usize) -> Option<&Arc<MetaTree>> {
        self.trees.get(index)?.as_ref()
    }

    /// Every IP this machine's interfaces have.
    pub fn ips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.interfaces.iter().filter_map(|i| i.ip.map(IpAddr::V4))
    }
}

/// Hegel's entry in the shared Hardware index: found by the MACs and IPv4 `dhcp.ip`s of its
/// interfaces, the slot being the interface.
impl InterfaceEntry for Machine {
    fn of_hardware(hw: &Hardware) -> Self {
        Machine::from_hardware(hw)
    }

    fn parts(&self) -> (&str, &[Interface]) {
        (&self.key, &self.interfaces)
    }
}

fn meta_tree(
    instance_id: &str,
    hostname: &str,
    ip: Ipv4Addr,
    mac: &str,
    legacy: &Legacy,
) -> MetaTree {
    let mut leaves: BTreeMap<String, String> = BTreeMap::new();
    leaves.insert("instance-id".into(), instance_id.into());
    leaves.insert("hostname".into(), hostname.into());
    leaves.insert("local-hostname".into(), hostname.into());
    leaves.insert("local-ipv4".into(), ip.to_string());
    leaves.insert("mac".into(), mac.into());
    if let Some(f) = &legacy.facility {
        leaves.insert("facility".into(), f.clone());
    }
    if let Some(p) = &legacy.plan {
        leaves.insert("plan".into(), p.clone());
    }
    if !legacy.tags.is_empty() {
        leaves.insert("tags".into(), legacy.tags.join("\n"));
    }
    let mut root: Vec<String> = leaves.keys().cloned().collect();
    let mut entries: HashMap<String, Bytes> = leaves
        .into_iter()
        .map(|(k, v)| (k, Bytes::from(v)))
        .collect();
    if !legacy.ssh_keys.is_empty() {
        // EC2's shape: `public-keys/` lists `<index>=<name>`, `public-keys/<index>/` lists the
        // formats, `public-keys/<index>/openssh-key` is the key (cloud-init's crawler follows it).
        root.push("public-keys/".into());
        let listing: Vec<String> = (0..legacy.ssh_keys.len())
            .map(|i| format!("{i}=key-{i}"))
            .collect();
        entries.insert("public-keys".into(), Bytes::from(listing.join("\n")));
        for (i, key) in legacy.ssh_keys.iter().enumerate() {
            entries.insert(
                format!("public-keys/{i}"),
                Bytes::from_static(b"openssh-key"),
            );
            entries.insert(
                format!("public-keys/{i}/openssh-key"),
                Bytes::from(key.clone()),
            );
        }
    }
    root.sort();
    entries.insert(String::new(), Bytes::from(root.join("\n")));
    MetaTree { entries }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hw(spec: serde_json::Value) -> Hardware {
        serde_json::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": "m1", "namespace": "ns", "uid": "u-1"},
            "spec": spec,
        }))
        .expect("hardware")
    }

    #[test]
    fn tree_per_interface() {
        let m = Machine::from_hardware(&hw(json!({"networkInterfaces": {
            "AA:BB:CC:00:00:01": {"dhcp": {"ip": "10.0.0.1", "hostname": "one"}},
            "aa:bb:cc:00:00:02": {"dhcp": {"ip": "10.0.0.2"}},
            "aa:bb:cc:00:00:03": {}
        }})));
        let first = m.interface_by_ip("10.0.0.1".parse().unwrap()).unwrap();
        let t = m.tree(first).unwrap();
        assert_eq!(
            t.get("").unwrap(),
            "hostname\ninstance-id\nlocal-hostname\nlocal-ipv4\nmac"
        );
        assert_eq!(t.get("mac").unwrap(), "aa:bb:cc:00:00:01");
        assert_eq!(t.get("instance-id").unwrap(), "u-1");
        assert_eq!(t.get("/hostname/").unwrap(), "one");
        assert!(t.get("public-keys").is_none());
        let second = m.interface_by_ip("10.0.0.2".parse().unwrap()).unwrap();
        let t = m.tree(second).unwrap();
        // No hostname of its own: the first interface's.
        assert_eq!(t.get("local-hostname").unwrap(), "one");
        assert_eq!(t.get("local-ipv4").unwrap(), "10.0.0.2");
        assert!(m.tree(2).is_none());
        assert_eq!(m.boot, Boot::Nothing);
        assert!(m.user_data.is_none());
    }

    #[test]
    fn dhcp_values_of_an_interface() {
        let m = Machine::from_hardware(&hw(json!({"networkInterfaces": {
            "aa:bb:cc:00:00:01": {"dhcp": {"ip": "10.0.0.5", "netmask": "255.255.255.0",
                "gateway": "10.0.0.1", "hostname": "h1", "nameservers": ["1.1.1.1", "dns.example"],
                "timeservers": ["10.0.0.2"], "leaseTime": 600, "vlanId": "12"}},
            "aa:bb:cc:00:00:02": {"disableNetboot": true}
        }})));
        let i = m
            .interface(m.interface_by_mac("aa:bb:cc:00:00:01").unwrap())
            .unwrap();
        assert_eq!(i.netmask, Some(Ipv4Addr::new(255, 255, 255, 0)));
        assert_eq!(i.gateway, Some(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(i.nameservers, [Ipv4Addr::new(1, 1, 1, 1)]);
        assert_eq!(i.timeservers, [Ipv4Addr::new(10, 0, 0, 2)]);
        assert_eq!(i.lease_time, Some(600));
        assert_eq!(i.vlan_id.as_deref(), Some("12"));
        let j = m.interface(1).unwrap();
        assert_eq!((j.ip, j.lease_time, j.disable_netboot), (None, None, true));
        assert!(m.interface(2).is_none());
    }

    #[test]
    fn boot_prefers_the_override() {
        let m = Machine::from_hardware(&hw(json!({
            "ipxe": {"url": "http://x/y.ipxe"},
            "osie": {"osieRef": {"name": "hook"}}
        })));
        assert_eq!(m.boot, Boot::Chain("http://x/y.ipxe".into()));
        let m = Machine::from_hardware(&hw(json!({
            "osie": {"osieRef": {"name": "hook"}, "kernelParams": ["a=b"]},
            "instance": {"userdata": "#cloud-config\n", "vendordata": "v"}
        })));
        assert_eq!(
            m.boot,
            Boot::Osie {
                name: "hook".into(),
                kernel_params: vec!["a=b".into()]
            }
        );
        assert_eq!(m.user_data.as_deref(), Some(&b"#cloud-config\n"[..]));
        assert_eq!(m.vendor_data.as_deref(), Some(&b"v"[..]));
    }

    #[test]
    fn migrated_metadata_fills_instance_id_and_keys() {
        let old: tink_api::v1alpha1::Hardware = serde_json::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha1", "kind": "Hardware",
            "metadata": {"name": "m1", "namespace": "ns", "uid": "u-1"},
            "spec": {
                "interfaces": [{"dhcp": {"mac": "aa:bb:cc:00:00:01", "ip": {"address": "10.0.0.1"}}}],
                "metadata": {
                    "facility": {"facility_code": "onprem", "plan_slug": "c3"},
                    "instance": {"id": "i-123", "ssh_keys": ["ssh-ed25519 AAAA a@b", "ssh-rsa BBBB c@d"],
                                 "tags": ["t1"]}
                }
            }
        }))
        .expect("v1alpha1");
        let new = tink_api::conversion::hardware_to_v1alpha2(&old);
        let m = Machine::from_hardware(&new);
        let t = m.tree(0).unwrap();
        assert_eq!(t.get("instance-id").unwrap(), "i-123");
        assert_eq!(t.get("public-keys/").unwrap(), "0=key-0\n1=key-1");
        assert_eq!(t.get("public-keys/1/").unwrap(), "openssh-key");
        assert_eq!(
            t.get("public-keys/1/openssh-key").unwrap(),
            "ssh-rsa BBBB c@d"
        );
        assert_eq!(t.get("facility").unwrap(), "onprem");
        assert_eq!(t.get("plan").unwrap(), "c3");
        assert_eq!(t.get("tags").unwrap(), "t1");
        assert_eq!(
            t.get("").unwrap(),
            "facility\nhostname\ninstance-id\nlocal-hostname\nlocal-ipv4\nmac\nplan\npublic-keys/\ntags"
        );
        assert_eq!(m.facility.as_deref(), Some("onprem"));
    }
}
