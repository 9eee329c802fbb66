//! Hardware: every MAC unique across all Hardware in all namespaces (DHCP is cluster-wide and
//! the agent is found by MAC), every DHCP IP unique (Hegel finds a machine by its IP). On
//! update only the MACs and IPs the update adds are checked, so a duplicate stored before the
//! webhook existed does not block unrelated edits.

use std::collections::HashMap;
use std::sync::LazyLock;

use regex::Regex;

use super::{Operation, Reason, Request, Verdict, is_v1alpha1};
pub use crate::identities::{Ident, Identities, identities};
use crate::index::Index;

static MAC: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$").unwrap_or_else(|e| panic!("MAC: {e}"))
});

/// The index is not usable yet.
#[derive(Debug, thiserror::Error)]
#[error(
    "the webhook's Hardware index has not synced with the API server yet, so MAC and IP uniqueness cannot be checked; retry in a few seconds"
)]
pub struct NotSynced;

/// What an allowed request claims anew (reserved in the index after the answer).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewClaims {
    /// MACs.
    pub macs: Vec<String>,
    /// IPs.
    pub ips: Vec<String>,
}

/// Checks a Hardware create or update.
pub fn validate(req: &Request<'_>, index: &Index, v: &mut Verdict) -> Result<NewClaims, NotSynced> {
    if req.operation == Operation::Other {
        return Ok(NewClaims::default());
    }
    let ids = identities(req.object);
    let old = req.old.map(identities).unwrap_or_default();

    // Formats the v1alpha2 schema checks but v1alpha1's does not.
    if is_v1alpha1(req.object) {
        for m in &ids.macs {
            if !MAC.is_match(&m.raw) {
                v.deny(
                    &m.field,
                    Reason::Invalid,
                    format!(
                        "{:?} is not a MAC address: expected six hex pairs separated by ':', such as 00:00:5e:00:53:01",
                        m.raw
                    ),
                );
            }
        }
        for ip in &ids.ips {
            if ip.raw.parse::<std::net::Ipv4Addr>().is_err() {
                v.deny(
                    &ip.field,
                    Reason::Invalid,
                    format!(
                        "{:?} is not an IPv4 address: expected a dotted quad such as 192.0.2.10",
                        ip.raw
                    ),
                );
            }
        }
    }

    // Within the object.
    for (list, what) in [(&ids.macs, "MAC"), (&ids.ips, "IP")] {
        let mut first: HashMap<&str, &str> = HashMap::new();
        for id in list {
            if let Some(prev) = first.get(id.value.as_str()) {
                v.deny(
                    &id.field,
                    Reason::Duplicate,
                    format!(
                        "{what} {} is also used by {prev} of this Hardware; each interface needs its own {what}",
                        id.raw
                    ),
                );
            } else {
                first.insert(&id.value, &id.field);
            }
        }
    }

    // Across all Hardware: only what this request adds.
    let added = |new: &[Ident], old: &[Ident]| -> Vec<Ident> {
        let mut seen = std::collections::HashSet::new();
        new.iter()
            .filter(|n| !old.iter().any(|o| o.value == n.value))
            .filter(|n| seen.insert(n.value.clone()))
            .cloned()
            .collect()
    };
    let new_macs = added(&ids.macs, &old.macs);
    let new_ips = added(&ids.ips, &old.ips);
    if (!new_macs.is_empty() || !new_ips.is_empty()) && !index.hardware_synced() {
        return Err(NotSynced);
    }
    let key = req.key();
    for m in &new_macs {
        let owners = index.mac_owners(&m.value, &key);
        if !owners.is_empty() {
            v.deny(
                &m.field,
                Reason::Duplicate,
                format!(
                    "MAC {} is already used by Hardware {}: a MAC must be unique across all Hardware in all namespaces (DHCP and the agent identify a machine by it); use this machine's own MAC, or remove it from {} first",
                    m.raw,
                    owners.join(", "),
                    owners.join(", ")
                ),
            );
        }
    }
    for ip in &new_ips {
        let owners = index.ip_owners(&ip.value, &key);
        if !owners.is_empty() {
            v.deny(
                &ip.field,
                Reason::Duplicate,
                format!(
                    "IP {} is already assigned to Hardware {}: a DHCP IP must be unique across all Hardware in all namespaces; choose a free address, or remove it from {} first",
                    ip.raw,
                    owners.join(", "),
                    owners.join(", ")
                ),
            );
        }
    }
    Ok(NewClaims {
        macs: new_macs.into_iter().map(|i| i.value).collect(),
        ips: new_ips.into_iter().map(|i| i.value).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn v2(ifaces: Value) -> Value {
        json!({"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": "n", "namespace": "ns"}, "spec": {"networkInterfaces": ifaces}})
    }

    fn v1(ifaces: Value) -> Value {
        json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Hardware",
            "metadata": {"name": "n", "namespace": "ns"}, "spec": {"interfaces": ifaces}})
    }

    fn check(index: &Index, op: Operation, obj: &Value, old: Option<&Value>) -> Verdict {
        let mut v = Verdict::default();
        let req = Request {
            operation: op,
            namespace: "ns",
            name: "n",
            object: obj,
            old,
        };
        validate(&req, index, &mut v).unwrap();
        v
    }

    fn synced() -> Index {
        let index = Index::default();
        index.mark_synced();
        index
    }

    #[test]
    fn reads_both_versions() {
        let ids = identities(&v2(
            json!({"aa:bb:cc:dd:ee:01": {"dhcp": {"ip": "10.0.0.1"}}, "aa:bb:cc:dd:ee:02": {}}),
        ));
        assert_eq!(
            ids.macs
                .iter()
                .map(|i| i.field.as_str())
                .collect::<Vec<_>>(),
            [
                "spec.networkInterfaces[aa:bb:cc:dd:ee:01]",
                "spec.networkInterfaces[aa:bb:cc:dd:ee:02]"
            ]
        );
        assert_eq!(
            ids.ips[0].field,
            "spec.networkInterfaces[aa:bb:cc:dd:ee:01].dhcp.ip"
        );
        let ids = identities(&v1(json!([
            {"dhcp": {"mac": "AA:BB:CC:DD:EE:01", "ip": {"address": "10.0.0.1"}}},
            {"dhcp": {"mac": ""}},
            {"netboot": {}},
        ])));
        assert_eq!(ids.macs.len(), 1);
        assert_eq!(ids.macs[0].value, "aa:bb:cc:dd:ee:01");
        assert_eq!(ids.macs[0].field, "spec.interfaces[0].dhcp.mac");
        assert_eq!(ids.ips[0].field, "spec.interfaces[0].dhcp.ip.address");
        // Garbage is no identity, not a panic.
        assert_eq!(identities(&json!({"spec": 3})), Identities::default());
        assert_eq!(identities(&json!(null)), Identities::default());
    }

    #[test]
    fn duplicate_mac_and_ip_across_namespaces() {
        let index = synced();
        index.upsert_hardware(
            "other/taken",
            &v2(json!({"aa:bb:cc:dd:ee:01": {"dhcp": {"ip": "10.0.0.1"}}})),
        );
        let v = check(
            &index,
            Operation::Create,
            &v2(json!({"aa:bb:cc:dd:ee:01": {"dhcp": {"ip": "10.0.0.1"}}})),
            None,
        );
        assert_eq!(v.violations.len(), 2, "{v:?}");
        assert_eq!(
            v.violations[0].field,
            "spec.networkInterfaces[aa:bb:cc:dd:ee:01]"
        );
        assert_eq!(v.violations[0].reason, Reason::Duplicate);
        assert!(
            v.violations[0]
                .message
                .contains("MAC aa:bb:cc:dd:ee:01 is already used by Hardware other/taken")
        );
        assert!(
            v.violations[0]
                .message
                .contains("unique across all Hardware in all namespaces")
        );
        assert_eq!(
            v.violations[1].field,
            "spec.networkInterfaces[aa:bb:cc:dd:ee:01].dhcp.ip"
        );
        assert!(
            v.violations[1]
                .message
                .contains("IP 10.0.0.1 is already assigned to Hardware other/taken")
        );
        // v1alpha1, upper-case MAC, same conflict, v1alpha1 field paths.
        let v = check(
            &index,
            Operation::Create,
            &v1(json!([{"dhcp": {"mac": "AA:BB:CC:DD:EE:01", "ip": {"address": "10.0.0.1"}}}])),
            None,
        );
        let fields: Vec<_> = v.violations.iter().map(|x| x.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.interfaces[0].dhcp.mac",
                "spec.interfaces[0].dhcp.ip.address"
            ]
        );
        // The object's own entry is no conflict (an update of itself).
        index.upsert_hardware("ns/n", &v2(json!({"aa:bb:cc:dd:ee:07": {}})));
        let v = check(
            &index,
            Operation::Create,
            &v2(json!({"aa:bb:cc:dd:ee:07": {}})),
            None,
        );
        assert!(v.allowed(), "{v:?}");
    }

    #[test]
    fn updates_check_only_what_they_add() {
        let index = synced();
        // A duplicate stored before the webhook existed.
        let shared = v2(json!({"aa:bb:cc:dd:ee:01": {"dhcp": {"ip": "10.0.0.1"}}}));
        index.upsert_hardware("other/old", &shared);
        index.upsert_hardware("ns/n", &shared);
        let mut new = shared.clone();
        new["metadata"]["labels"] = json!({"rack": "7"});
        new["spec"]["networkInterfaces"]["aa:bb:cc:dd:ee:02"] = json!({"dhcp": {"ip": "10.0.0.2"}});
        let v = check(&index, Operation::Update, &new, Some(&shared));
        assert!(v.allowed(), "{v:?}");
        // Adding a taken MAC is refused, and only that one is reported.
        index.upsert_hardware("other/x", &v2(json!({"aa:bb:cc:dd:ee:03": {}})));
        new["spec"]["networkInterfaces"]["aa:bb:cc:dd:ee:03"] = json!({});
        let v = check(&index, Operation::Update, &new, Some(&shared));
        assert_eq!(v.violations.len(), 1, "{v:?}");
        assert_eq!(
            v.violations[0].field,
            "spec.networkInterfaces[aa:bb:cc:dd:ee:03]"
        );
    }

    #[test]
    fn duplicates_within_one_object_and_bad_v1alpha1_formats() {
        let index = synced();
        let v = check(
            &index,
            Operation::Create,
            &v1(json!([
                {"dhcp": {"mac": "aa:bb:cc:dd:ee:01", "ip": {"address": "10.0.0.1"}}},
                {"dhcp": {"mac": "AA:BB:CC:DD:EE:01", "ip": {"address": "10.0.0.1"}}},
                {"dhcp": {"mac": "not-a-mac", "ip": {"address": "10.0.0.300"}}},
            ])),
            None,
        );
        let got: Vec<_> = v
            .violations
            .iter()
            .map(|x| (x.field.as_str(), x.reason))
            .collect();
        assert_eq!(
            got,
            [
                ("spec.interfaces[2].dhcp.mac", Reason::Invalid),
                ("spec.interfaces[2].dhcp.ip.address", Reason::Invalid),
                ("spec.interfaces[1].dhcp.mac", Reason::Duplicate),
                ("spec.interfaces[1].dhcp.ip.address", Reason::Duplicate),
            ]
        );
        assert!(
            v.violations[0]
                .message
                .contains("such as 00:00:5e:00:53:01")
        );
        assert!(
            v.violations[2]
                .message
                .contains("also used by spec.interfaces[0].dhcp.mac")
        );
    }

    #[test]
    fn refuses_to_guess_before_the_index_synced() {
        let index = Index::default();
        let mut v = Verdict::default();
        let obj = v2(json!({"aa:bb:cc:dd:ee:01": {}}));
        let req = Request {
            operation: Operation::Create,
            namespace: "ns",
            name: "n",
            object: &obj,
            old: None,
        };
        assert!(validate(&req, &index, &mut v).is_err());
        // An update that adds nothing needs no index.
        let req = Request {
            operation: Operation::Update,
            old: Some(&obj),
            ..req
        };
        assert!(validate(&req, &index, &mut v).is_ok());
    }
}
