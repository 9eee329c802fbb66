//! Who is asking: the TCP peer's address, or, when the peer is a trusted proxy, the address it
//! names in `X-Forwarded-For`.
//!
//! `X-Forwarded-For` is read right to left (each proxy appends the address it received the
//! request from), skipping addresses that are themselves trusted proxies; the first untrusted
//! address is the client. A header from an untrusted peer is ignored entirely: anyone can write
//! one, and believing it would hand a machine's data to whoever names its IP.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use http::HeaderMap;

/// An IPv4 or IPv6 network, `10.0.0.0/8` or a single address (`10.0.0.1`, a /32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

/// Why a CIDR was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "trusted proxy {value:?}: {reason} (expected an address or address/prefix, e.g. 10.0.0.0/8)"
)]
pub struct CidrError {
    value: String,
    reason: &'static str,
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| CidrError {
            value: s.to_owned(),
            reason,
        };
        let s = s.trim();
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| err("not an IP address"))?;
        let addr = addr.to_canonical();
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p.parse::<u8>().map_err(|_| err("bad prefix length"))?,
            None => max,
        };
        if prefix > max {
            return Err(err("prefix length too long for the address family"));
        }
        Ok(Self { addr, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl Cidr {
    /// Whether `ip` is inside this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// The configured trusted proxies.
#[derive(Clone, Debug, Default)]
pub struct TrustedProxies(Vec<Cidr>);

impl TrustedProxies {
    /// Trust these networks.
    pub fn new(cidrs: Vec<Cidr>) -> Self {
        Self(cidrs)
    }

    /// Whether `ip` is a trusted proxy.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|c| c.contains(ip))
    }

    /// The client's address for a request from `peer` with `headers`.
    pub fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> Result<IpAddr, ForwardedError> {
        let peer = peer.to_canonical();
        if !self.trusts(peer) {
            return Ok(peer);
        }
        let mut hops: Vec<IpAddr> = Vec::new();
        for value in headers.get_all("x-forwarded-for") {
            let text = value.to_str().map_err(|_| ForwardedError::NotText)?;
            for part in text.split(',') {
                let part = part.trim();
                if part.is_empty() {
                    continue;
                }
                let ip: IpAddr = parse_hop(part)
                    .ok_or_else(|| ForwardedError::BadAddress(part.chars().take(64).collect()))?;
                hops.push(ip.to_canonical());
            }
        }
        // Right to left: the last hop not itself a trusted proxy is the client; when every hop
        // is a proxy, the leftmost is the best we know.
        Ok(hops
            .iter()
            .rev()
            .find(|ip| !self.trusts(**ip))
            .or_else(|| hops.first())
            .copied()
            .unwrap_or(peer))
    }
}

/// An address in `X-Forwarded-For`: `1.2.3.4`, `::1`, `1.2.3.4:5678` or `[::1]:5678`.
fn parse_hop(s: &str) -> Option<IpAddr> {
    if let Ok(ip) = s.parse() {
        return Some(ip);
    }
    if let Ok(sa) = s.parse::<std::net::SocketAddr>() {
        return Some(sa.ip());
    }
    s.strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .and_then(|r| r.parse().ok())
}

/// A trusted proxy sent an `X-Forwarded-For` Hegel cannot read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ForwardedError {
    /// Not ASCII text.
    #[error("X-Forwarded-For is not ASCII text")]
    NotText,
    /// An element is not an IP address.
    #[error("X-Forwarded-For element {0:?} is not an IP address")]
    BadAddress(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("x-forwarded-for", v.parse().unwrap());
        }
        h
    }

    #[test]
    fn cidrs_parse_and_match() {
        let c: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(c.contains("10.255.0.1".parse().unwrap()));
        assert!(!c.contains("11.0.0.1".parse().unwrap()));
        assert!(c.contains("::ffff:10.1.1.1".parse().unwrap()));
        let one: Cidr = "127.0.0.9".parse().unwrap();
        assert_eq!(one.to_string(), "127.0.0.9/32");
        assert!(!one.contains("127.0.0.8".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("1.2.3.4".parse().unwrap()));
        let v6: Cidr = "fd00::/8".parse().unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        assert!(!v6.contains("10.0.0.1".parse().unwrap()));
        for bad in ["", "10.0.0.0/33", "x/8", "10.0.0.0/", "::/129"] {
            let e = bad.parse::<Cidr>().unwrap_err();
            assert!(e.to_string().contains("trusted proxy"), "{e}");
        }
    }

    #[test]
    fn forwarded_for_only_from_trusted_peers() {
        let t = TrustedProxies::new(vec!["10.0.0.0/24".parse().unwrap()]);
        let proxy: IpAddr = "10.0.0.5".parse().unwrap();
        let stranger: IpAddr = "192.168.1.9".parse().unwrap();
        let h = headers(&["192.168.1.20"]);
        assert_eq!(t.client_ip(stranger, &h).unwrap(), stranger);
        assert_eq!(
            t.client_ip(proxy, &h).unwrap(),
            "192.168.1.20".parse::<IpAddr>().unwrap()
        );
        // A client-written element left of the real one is not believed.
        let h = headers(&["1.1.1.1, 192.168.1.20", "10.0.0.7"]);
        assert_eq!(
            t.client_ip(proxy, &h).unwrap(),
            "192.168.1.20".parse::<IpAddr>().unwrap()
        );
        // No header: the proxy itself.
        assert_eq!(t.client_ip(proxy, &HeaderMap::new()).unwrap(), proxy);
        let h = headers(&["[::1]:80, 192.168.1.20:1234"]);
        assert_eq!(
            t.client_ip(proxy, &h).unwrap(),
            "192.168.1.20".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            t.client_ip(proxy, &headers(&["nope"])).unwrap_err(),
            ForwardedError::BadAddress("nope".into())
        );
    }
}
