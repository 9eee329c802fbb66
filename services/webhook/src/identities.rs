//! What a Hardware claims, read from its JSON in either version: its MACs and DHCP IPs, each
//! with the field it came from. Both the index (what stored Hardware claim) and the Hardware
//! checks (what a request adds) read them here, so neither imports the other.

use serde_json::Value;

/// Whether `obj` is a v1alpha1 object (else it is treated as v1alpha2).
pub fn is_v1alpha1(obj: &Value) -> bool {
    obj.get("apiVersion").and_then(Value::as_str) == Some(tink_api::v1alpha1::API_VERSION)
}

/// A MAC or IP and the field it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ident {
    /// Lower-case MAC, or the IP in canonical form when it parses.
    pub value: String,
    /// The value as written.
    pub raw: String,
    /// Its field path.
    pub field: String,
}

/// The MACs and DHCP IPs of a Hardware, in field order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identities {
    /// MACs.
    pub macs: Vec<Ident>,
    /// DHCP IPs.
    pub ips: Vec<Ident>,
}

/// The IP in the index's canonical form ([`tink_hardware_index::IpKey`]): the address when it
/// parses, else the trimmed text.
fn ip_key(ip: &str) -> String {
    tink_hardware_index::IpKey::parse(ip).to_string()
}

/// Reads the MACs and IPs of a Hardware of either version from its JSON:
/// v1alpha2 `spec.networkInterfaces[MAC].dhcp.ip`, v1alpha1 `spec.interfaces[i].dhcp.mac` and
/// `spec.interfaces[i].dhcp.ip.address`.
pub fn identities(obj: &Value) -> Identities {
    let mut out = Identities::default();
    let spec = obj.get("spec");
    if is_v1alpha1(obj) {
        let ifaces = spec
            .and_then(|s| s.get("interfaces"))
            .and_then(Value::as_array);
        for (i, iface) in ifaces.into_iter().flatten().enumerate() {
            let dhcp = iface.get("dhcp");
            if let Some(mac) = dhcp.and_then(|d| d.get("mac")).and_then(Value::as_str)
                && !mac.is_empty()
            {
                out.macs.push(Ident {
                    value: mac.to_ascii_lowercase(),
                    raw: mac.to_string(),
                    field: format!("spec.interfaces[{i}].dhcp.mac"),
                });
            }
            if let Some(ip) = dhcp
                .and_then(|d| d.pointer("/ip/address"))
                .and_then(Value::as_str)
                && !ip.is_empty()
            {
                out.ips.push(Ident {
                    value: ip_key(ip),
                    raw: ip.to_string(),
                    field: format!("spec.interfaces[{i}].dhcp.ip.address"),
                });
            }
        }
    } else {
        let ifaces = spec
            .and_then(|s| s.get("networkInterfaces"))
            .and_then(Value::as_object);
        for (mac, iface) in ifaces.into_iter().flatten() {
            out.macs.push(Ident {
                value: mac.to_ascii_lowercase(),
                raw: mac.clone(),
                field: format!("spec.networkInterfaces[{mac}]"),
            });
            if let Some(ip) = iface.pointer("/dhcp/ip").and_then(Value::as_str)
                && !ip.is_empty()
            {
                out.ips.push(Ident {
                    value: ip_key(ip),
                    raw: ip.to_string(),
                    field: format!("spec.networkInterfaces[{mac}].dhcp.ip"),
                });
            }
        }
    }
    out
}
