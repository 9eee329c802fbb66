//! From a Machine's connection to its providers, in the order they are tried.

use std::collections::BTreeMap;

use tink_api::bmc::Connection;

use crate::error::{Error, ErrorKind};
use crate::ipmi::{IpmiConfig, Ipmitool};
use crate::limit::{Limits, Policy, err};
use crate::redfish::{Redfish, RedfishConfig};
use crate::rpc::{Rpc, RpcConfig};
use crate::target::{ProviderKind, RedfishHost, TlsConfig, provider_order};
use crate::{Bmc, Credentials, Secret};

/// What a Machine's connection names, read from its Secrets by the caller.
#[derive(Clone, Debug, Default)]
pub struct Resolved {
    /// From `authSecretRef` (see [`crate::credentials::basic_auth`]); `None` without one.
    pub credentials: Option<Credentials>,
    /// The RPC HMAC keys by algorithm (see [`crate::credentials::hmac_key`]).
    pub hmac: BTreeMap<String, Vec<Secret>>,
    /// A PEM CA to verify the BMC's certificate with (the system roots when `None`).
    pub ca_pem: Option<Vec<u8>>,
}

/// The host IPMI reaches for a connection's `host`: a host written for Redfish
/// (`https://10.0.0.5`, `https://[fd00::5]:8443/`) means its address; anything else as written.
fn ipmi_host(host: &str) -> String {
    if host.contains("://")
        && let Ok(h) = RedfishHost::parse(host, None)
    {
        return h.host;
    }
    host.to_string()
}

/// The providers for `connection`, in [`provider_order`]. Redfish and IPMI need credentials;
/// a connection without them and without RPC options is a configuration error.
pub fn providers(
    connection: &Connection,
    resolved: Resolved,
    policy: &Policy,
    limits: &Limits,
) -> Result<Vec<Box<dyn Bmc>>, Error> {
    let options = connection.provider_options.as_ref();
    let tls = TlsConfig {
        insecure: connection.insecure_tls,
        ca_pem: resolved.ca_pem.clone(),
    };
    let mut out: Vec<Box<dyn Bmc>> = Vec::new();
    for kind in provider_order(options) {
        let need_credentials = |provider: &'static str| {
            resolved.credentials.clone().ok_or_else(|| {
                err(
                    provider,
                    &connection.host,
                    "configure",
                    ErrorKind::Config("no authSecretRef: the provider needs credentials".into()),
                )
            })
        };
        match kind {
            ProviderKind::Redfish => {
                let o = options.and_then(|o| o.redfish.clone()).unwrap_or_default();
                out.push(Box::new(Redfish::new(
                    RedfishConfig {
                        host: connection.host.clone(),
                        port: o.port,
                        credentials: need_credentials("redfish")?,
                        tls: tls.clone(),
                        use_basic_auth: o.use_basic_auth,
                        system_name: o.system_name,
                    },
                    policy.clone(),
                    limits.clone(),
                )?));
            }
            ProviderKind::Ipmitool => {
                let o = options.and_then(|o| o.ipmitool.clone()).unwrap_or_default();
                out.push(Box::new(Ipmitool::new(
                    IpmiConfig {
                        host: ipmi_host(&connection.host),
                        port: o.port,
                        credentials: need_credentials("ipmitool")?,
                        cipher_suite: o.cipher_suite,
                        ipmitool: None,
                    },
                    policy.clone(),
                    limits.clone(),
                )?));
            }
            ProviderKind::Rpc => {
                let Some(rpc) = options.and_then(|o| o.rpc.clone()) else {
                    continue;
                };
                out.push(Box::new(Rpc::new(
                    RpcConfig {
                        host: connection.host.clone(),
                        options: rpc,
                        secrets: resolved.hmac.clone(),
                        tls: tls.clone(),
                    },
                    policy.clone(),
                    limits.clone(),
                )?));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use tink_api::bmc::{ProviderOptions, RpcOptions};

    use super::*;

    fn names(conn: &Connection, resolved: Resolved) -> Result<Vec<&'static str>, Error> {
        providers(conn, resolved, &Policy::default(), &Limits::default())
            .map(|v| v.iter().map(|p| p.provider()).collect())
    }

    #[test]
    fn a_connection_becomes_its_providers_in_order() {
        let creds = Resolved {
            credentials: Some(Credentials::new("admin", "pw")),
            ..Resolved::default()
        };
        let mut conn = Connection {
            host: "10.0.0.5".into(),
            insecure_tls: true,
            ..Connection::default()
        };
        assert_eq!(
            names(&conn, creds.clone()).expect("ok"),
            ["ipmitool", "redfish"]
        );
        conn.provider_options = Some(ProviderOptions {
            preferred_order: vec!["gofish".into()],
            ..ProviderOptions::default()
        });
        assert_eq!(
            names(&conn, creds.clone()).expect("ok"),
            ["redfish", "ipmitool"]
        );
        let e = names(&conn, Resolved::default()).expect_err("no credentials");
        assert!(matches!(e.kind, ErrorKind::Config(_)), "{e}");
        conn.provider_options = Some(ProviderOptions {
            rpc: Some(RpcOptions {
                consumer_url: "https://example.com/rpc".into(),
                ..RpcOptions::default()
            }),
            ..ProviderOptions::default()
        });
        assert_eq!(
            names(&conn, Resolved::default()).expect("rpc needs no credentials"),
            ["rpc"]
        );
        // A host written for Redfish (bmclib: a scheme means Redfish's URL) still leaves IPMI
        // its address, so the default order works for it.
        conn.host = "https://10.0.0.5".into();
        conn.provider_options = None;
        assert_eq!(
            names(&conn, creds.clone()).expect("a scheme is no error for ipmitool"),
            ["ipmitool", "redfish"]
        );
        assert_eq!(ipmi_host("https://[fd00::5]:8443/redfish"), "fd00::5");
        assert_eq!(ipmi_host("10.0.0.5"), "10.0.0.5");
        conn.host = "https://".into();
        conn.provider_options = None;
        assert!(names(&conn, creds).is_err(), "a host with no name");
    }
}
