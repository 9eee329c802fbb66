//! Where a provider may connect: a BMC's host is resolved here, once per connection, and only
//! the addresses inside [`Policy::allowed_networks`](crate::Policy::allowed_networks) are
//! kept. The caller connects to one of exactly those addresses, so the address checked is
//! the address used: a name whose DNS answer changes between a check and the connection
//! cannot lead anywhere else.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

use crate::error::ErrorKind;

/// Whether `ip` is inside one of `allowed` (any address when `allowed` is empty). An
/// IPv4-mapped IPv6 address (`::ffff:10.0.0.5`) is checked as the IPv4 address it reaches.
pub fn is_allowed(ip: IpAddr, allowed: &[IpNet]) -> bool {
    let ip = ip.to_canonical();
    allowed.is_empty() || allowed.iter().any(|n| n.contains(&ip))
}

/// Parses a comma-separated list of networks (`10.0.0.0/8, fd00::/8`); a bare address is a
/// network of that one address. Empty input is the empty list (any address).
pub fn parse_networks(list: &str) -> Result<Vec<IpNet>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<IpNet>()
                .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| format!("{s:?} is not a network (CIDR like 10.0.0.0/8) or an address"))
        })
        .collect()
}

/// The addresses of `host` (a name or an IP literal, IPv6 without brackets) inside `allowed`,
/// in the resolver's order. A name that does not resolve is [`ErrorKind::Connect`] (the
/// request never left); addresses none of which is allowed are [`ErrorKind::NotAllowed`],
/// naming the host, its addresses and the allowed networks.
pub(crate) async fn resolve_allowed(
    host: &str,
    port: u16,
    allowed: &[IpNet],
) -> Result<Vec<SocketAddr>, ErrorKind> {
    let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| ErrorKind::Connect(format!("cannot resolve {host}: {e}")))?
        .collect();
    if resolved.is_empty() {
        return Err(ErrorKind::Connect(format!("{host} has no address")));
    }
    let (ok, refused): (Vec<SocketAddr>, Vec<SocketAddr>) = resolved
        .into_iter()
        .partition(|a| is_allowed(a.ip(), allowed));
    if ok.is_empty() {
        let addrs: Vec<String> = refused.iter().map(|a| a.ip().to_string()).collect();
        let nets: Vec<String> = allowed.iter().map(ToString::to_string).collect();
        return Err(ErrorKind::NotAllowed(format!(
            "{host} resolves to {}, none inside the allowed networks {}",
            addrs.join(", "),
            nets.join(", ")
        )));
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_parse_and_contain() {
        let nets = parse_networks(" 10.0.0.0/8, fd00::/8 ,192.168.1.7,").expect("parse");
        assert_eq!(nets.len(), 3);
        assert_eq!(nets[2].to_string(), "192.168.1.7/32");
        for (ip, want) in [
            ("10.1.2.3", true),
            ("11.0.0.1", false),
            ("fd00::5", true),
            ("fe80::1", false),
            ("192.168.1.7", true),
            ("192.168.1.8", false),
            // IPv4-mapped IPv6 is the IPv4 address it reaches
            ("::ffff:10.0.0.5", true),
            ("::ffff:127.0.0.1", false),
        ] {
            let ip: IpAddr = ip.parse().expect("ip");
            assert_eq!(is_allowed(ip, &nets), want, "{ip}");
        }
        assert!(is_allowed("127.0.0.1".parse().expect("ip"), &[]));
        assert_eq!(parse_networks("").expect("empty"), Vec::<IpNet>::new());
        let e = parse_networks("10.0.0.0/8,10.0.0.0/33").expect_err("bad prefix");
        assert!(e.contains("10.0.0.0/33"), "{e}");
    }

    #[tokio::test]
    async fn names_are_checked_by_their_addresses() {
        let loopback = parse_networks("127.0.0.0/8").expect("parse");
        let ten = parse_networks("10.0.0.0/8").expect("parse");
        let ok = resolve_allowed("localhost", 80, &loopback)
            .await
            .expect("localhost is loopback");
        assert!(ok.iter().all(|a| a.ip().is_loopback() && a.ip().is_ipv4()));
        let e = resolve_allowed("localhost", 80, &ten)
            .await
            .expect_err("not in 10/8");
        let ErrorKind::NotAllowed(m) = &e else {
            panic!("{e:?}")
        };
        assert!(
            m.contains("localhost") && m.contains("127.0.0.1") && m.contains("10.0.0.0/8"),
            "{m}"
        );
        assert!(!e.is_transient());
        let e = resolve_allowed("no-such-host.invalid", 80, &[])
            .await
            .expect_err("no such name");
        assert!(matches!(e, ErrorKind::Connect(_)), "{e:?}");
    }
}
