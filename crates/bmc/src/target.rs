//! What a Machine's connection means: the Redfish endpoint of a host, TLS settings, and the
//! order providers are tried in.

use tink_api::bmc::ProviderOptions;

use crate::error::ErrorKind;

/// A Redfish endpoint read from `spec.connection.host` the way bmclib reads it: a host
/// without a scheme means `https://`; a port in the host wins over `providerOptions.redfish.port`,
/// which wins over the scheme's default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedfishHost {
    /// `true` for https.
    pub tls: bool,
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl RedfishHost {
    /// Parses `host` (`10.0.0.5`, `bmc.example:8443`, `http://10.0.0.5`, `https://[fd00::5]:443`).
    pub fn parse(host: &str, port: Option<i32>) -> Result<Self, ErrorKind> {
        let bad = |why: &str| ErrorKind::Config(format!("host {host:?}: {why}"));
        let trimmed = host.trim();
        let (tls, rest) = if let Some(r) = trimmed.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = trimmed.strip_prefix("http://") {
            (false, r)
        } else if trimmed.contains("://") {
            return Err(bad("only http:// and https:// are allowed"));
        } else {
            (true, trimmed)
        };
        // A path after the authority is ignored (Redfish lives at /redfish/v1).
        let authority = rest.split('/').next().unwrap_or_default();
        if authority.contains('@') {
            return Err(bad("credentials belong in the auth Secret, not the host"));
        }
        let (name, explicit_port) = if let Some(v6) = authority.strip_prefix('[') {
            let (addr, after) = v6.split_once(']').ok_or_else(|| bad("unclosed ["))?;
            let port = match after.strip_prefix(':') {
                Some(p) => Some(p),
                None if after.is_empty() => None,
                None => return Err(bad("junk after ]")),
            };
            (addr.to_string(), port)
        } else if authority.matches(':').count() > 1 {
            // a bare IPv6 address
            (authority.to_string(), None)
        } else {
            match authority.split_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (authority.to_string(), None),
            }
        };
        if name.is_empty() {
            return Err(bad("no host name"));
        }
        let port = match explicit_port {
            Some(p) => p.parse::<u16>().map_err(|_| bad("bad port"))?,
            None => match port {
                Some(p) if p > 0 => u16::try_from(p).map_err(|_| bad("bad port"))?,
                _ if tls => 443,
                _ => 80,
            },
        };
        Ok(Self {
            tls,
            host: name,
            port,
        })
    }

    /// `https://host:port` (brackets around IPv6).
    pub fn base_url(&self) -> String {
        format!(
            "{}://{}",
            if self.tls { "https" } else { "http" },
            self.authority()
        )
    }

    /// `host:port` as a `Host` header.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// How TLS certificates of a BMC are checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// Accept any certificate (`insecureTLS`).
    pub insecure: bool,
    /// PEM CA certificates to trust instead of the system's roots.
    pub ca_pem: Option<Vec<u8>>,
}

/// The providers this crate implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProviderKind {
    /// `ipmitool` over IPMI lanplus.
    Ipmitool,
    /// Redfish (bmclib's `gofish`, and its vendor flavours).
    Redfish,
    /// The RPC webhook.
    Rpc,
}

impl ProviderKind {
    /// The provider a bmclib name stands for; `None` for ones with no provider here
    /// (`asrockrack`, `IntelAMT`, unknown names).
    pub fn from_bmclib_name(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "ipmitool" => Some(Self::Ipmitool),
            "gofish" | "redfish" | "dell" | "supermicro" | "openbmc" => Some(Self::Redfish),
            "rpc" => Some(Self::Rpc),
            _ => None,
        }
    }
}

/// The order providers are tried in, as Rufio does it: with RPC options, the RPC provider
/// alone (a Machine with a webhook has no BMC of its own to fall back to); else
/// `preferredOrder` first, then the default order (ipmitool, then Redfish), each once.
pub fn provider_order(options: Option<&ProviderOptions>) -> Vec<ProviderKind> {
    if options.is_some_and(|o| o.rpc.is_some()) {
        return vec![ProviderKind::Rpc];
    }
    let mut order = Vec::new();
    let preferred = options.map(|o| o.preferred_order.as_slice()).unwrap_or(&[]);
    for kind in preferred
        .iter()
        .filter_map(|n| ProviderKind::from_bmclib_name(n))
        .chain([ProviderKind::Ipmitool, ProviderKind::Redfish])
    {
        if kind != ProviderKind::Rpc && !order.contains(&kind) {
            order.push(kind);
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_read_as_bmclib_reads_them() {
        let ok = |h: &str, p: Option<i32>| RedfishHost::parse(h, p).expect(h).base_url();
        assert_eq!(ok("10.0.0.5", None), "https://10.0.0.5:443");
        assert_eq!(ok("10.0.0.5", Some(8443)), "https://10.0.0.5:8443");
        assert_eq!(ok("10.0.0.5:9443", Some(8443)), "https://10.0.0.5:9443");
        assert_eq!(ok("http://bmc.example", None), "http://bmc.example:80");
        assert_eq!(
            ok("https://bmc.example/redfish/v1", None),
            "https://bmc.example:443"
        );
        assert_eq!(ok("[fd00::5]:8443", None), "https://[fd00::5]:8443");
        assert_eq!(ok("fd00::5", None), "https://[fd00::5]:443");
        for bad in [
            "",
            "ftp://x",
            "https://user:pw@x",
            "x:notaport",
            "x:70000",
            "[fd00::5",
        ] {
            assert!(RedfishHost::parse(bad, None).is_err(), "{bad}");
        }
    }

    #[test]
    fn provider_order_follows_rufio() {
        use ProviderKind::*;
        assert_eq!(provider_order(None), [Ipmitool, Redfish]);
        let o = ProviderOptions {
            preferred_order: vec!["Gofish".into(), "IntelAMT".into(), "ipmitool".into()],
            ..ProviderOptions::default()
        };
        assert_eq!(provider_order(Some(&o)), [Redfish, Ipmitool]);
        let o = ProviderOptions {
            rpc: Some(tink_api::bmc::RpcOptions {
                consumer_url: "http://x".into(),
                ..Default::default()
            }),
            ..ProviderOptions::default()
        };
        assert_eq!(provider_order(Some(&o)), [Rpc]);
    }
}
