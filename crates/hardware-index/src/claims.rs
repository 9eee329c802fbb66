//! What one Hardware claims: the values the index keys it by.
//!
//! Every claim carries a *slot*, a position the caller chose (Hegel and netboot use the index of
//! the interface the value belongs to), which a lookup hands back so the caller can go straight
//! to the matching part of its entry.

use std::fmt;
use std::net::IpAddr;

use tink_api::AgentId;
use tink_api::v1alpha2::Hardware;

use crate::interface::Interface;

/// An IP as the index keys it: the address when the text parses as one, otherwise the trimmed
/// text itself. A written value the schema lets through but `std` does not parse (`10.0.0.01`)
/// still claims something, so two Hardware writing it are still seen to collide.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpKey {
    /// A parsed address (its canonical form).
    Addr(IpAddr),
    /// Text that is no address, trimmed.
    Unparsed(String),
}

impl IpKey {
    /// The key of `text`: parsed when it is an address (after trimming), else the trimmed text.
    pub fn parse(text: &str) -> Self {
        let t = text.trim();
        match t.parse::<IpAddr>() {
            Ok(a) => Self::Addr(a),
            Err(_) => Self::Unparsed(t.to_string()),
        }
    }
}

impl From<IpAddr> for IpKey {
    fn from(a: IpAddr) -> Self {
        Self::Addr(a)
    }
}

impl fmt::Display for IpKey {
    /// The canonical text of an address, or the unparsed text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Addr(a) => a.fmt(f),
            Self::Unparsed(s) => f.write_str(s),
        }
    }
}

/// The canonical spelling of a MAC ([`AgentId::normalize`]: lower case, colon-separated, any
/// usual spelling accepted); text that is no MAC is only trimmed and lower-cased. The keys of
/// a v1alpha2 `spec.networkInterfaces` are already canonical (the CRD's rule), so for them this
/// is the key itself.
pub fn canonical_mac(text: &str) -> String {
    match AgentId::normalize(text) {
        Ok(id) if id.is_mac() => id.into_string(),
        _ => text.trim().to_ascii_lowercase(),
    }
}

/// The values one Hardware claims, each with its slot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Claims {
    /// MACs (lookups compare them as given: write them canonical, see [`canonical_mac`]).
    pub macs: Vec<(String, usize)>,
    /// IPs.
    pub ips: Vec<(IpKey, usize)>,
    /// Agent ids (the ids the machine's agent may present).
    pub agent_ids: Vec<(AgentId, usize)>,
}

impl Claims {
    /// The claims of a typed Hardware, slot = position of the interface in
    /// `spec.networkInterfaces` (key order): each key as a MAC ([`canonical_mac`]) and, when
    /// it is an agent id in any spelling, as that agent id ([`AgentId::normalize`], the
    /// controller's `agent_ids`); each `dhcp.ip` that is set and not empty ([`IpKey::parse`]).
    pub fn of_hardware(hw: &Hardware) -> Self {
        let mut out = Self::default();
        for (n, (mac, iface)) in hw.spec.network_interfaces.iter().enumerate() {
            out.macs.push((canonical_mac(mac), n));
            if let Ok(id) = AgentId::normalize(mac) {
                out.agent_ids.push((id, n));
            }
            let ip = iface.dhcp.as_ref().and_then(|d| d.ip.as_deref());
            if let Some(ip) = ip.filter(|ip| !ip.trim().is_empty()) {
                out.ips.push((IpKey::parse(ip), n));
            }
        }
        out
    }

    /// The claims of parsed interfaces ([`Interface::all_of`]), slot = position in `interfaces`:
    /// each MAC as written there and each IPv4 `dhcp.ip` that parsed; no agent ids (the boot
    /// services look machines up by MAC and IP only).
    pub fn of_interfaces(interfaces: &[Interface]) -> Self {
        let mut out = Self::default();
        for (n, i) in interfaces.iter().enumerate() {
            out.macs.push((i.mac.clone(), n));
            if let Some(ip) = i.ip {
                out.ips.push((IpKey::Addr(IpAddr::V4(ip)), n));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ip_keys_are_canonical_addresses_or_trimmed_text() {
        assert_eq!(
            IpKey::parse(" 10.0.0.1 "),
            IpKey::Addr("10.0.0.1".parse().unwrap())
        );
        assert_eq!(IpKey::parse("::0:1"), IpKey::parse("::1"));
        assert_eq!(
            IpKey::parse(" 10.0.0.01"),
            IpKey::Unparsed("10.0.0.01".into())
        );
        assert_eq!(IpKey::parse("::0:1").to_string(), "::1");
        assert_eq!(IpKey::parse("x ").to_string(), "x");
    }

    #[test]
    fn macs_take_the_agent_id_spelling() {
        assert_eq!(canonical_mac("AA-BB-CC-00-00-07"), "aa:bb:cc:00:00:07");
        assert_eq!(canonical_mac("aabb.cc00.0007"), "aa:bb:cc:00:00:07");
        assert_eq!(canonical_mac(" Not-A-Mac "), "not-a-mac");
    }

    #[test]
    fn claims_of_a_hardware() {
        let hw: Hardware = serde_json::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": "m", "namespace": "ns"},
            "spec": {"networkInterfaces": {
                "aa:bb:cc:00:00:01": {"dhcp": {"ip": "10.0.0.1"}},
                "aa:bb:cc:00:00:02": {"dhcp": {"ip": ""}},
                "aa:bb:cc:00:00:03": {}
            }}
        }))
        .unwrap();
        let c = Claims::of_hardware(&hw);
        assert_eq!(
            c.macs,
            [
                ("aa:bb:cc:00:00:01".to_string(), 0),
                ("aa:bb:cc:00:00:02".to_string(), 1),
                ("aa:bb:cc:00:00:03".to_string(), 2)
            ]
        );
        assert_eq!(c.ips, [(IpKey::parse("10.0.0.1"), 0)]);
        assert_eq!(c.agent_ids.len(), 3);
        assert_eq!(c.agent_ids[2].0.as_str(), "aa:bb:cc:00:00:03");
    }
}
