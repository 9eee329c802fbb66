//! IMDSv2 session tokens, for the EC2 clients that use them (cloud-init's Ec2 data source on a
//! platform it takes for AWS, `ec2-metadata`, the AWS SDKs): `PUT /latest/api/token` with
//! `X-aws-ec2-metadata-token-ttl-seconds: 1..=21600` answers a token, which the client then
//! sends in `X-aws-ec2-metadata-token` on every read.
//!
//! Hegel identifies a machine by its source address, with or without a token (IMDSv1 clients,
//! which is what cloud-init is on every other platform, send none). A token therefore grants
//! nothing an address does not already grant; it is bound to the address it was issued to and
//! to its expiry, so a token presented from another address or after its time is refused (401,
//! as IMDS does, and the client asks for a new one). Tokens carry no secret and are checked
//! without state: every Hegel replica and a restarted one accept them alike.

use std::net::IpAddr;

/// The request header of the token's lifetime.
pub const TTL_HEADER: &str = "x-aws-ec2-metadata-token-ttl-seconds";
/// The request header carrying a token.
pub const TOKEN_HEADER: &str = "x-aws-ec2-metadata-token";
/// The longest lifetime IMDS grants (6 hours).
pub const MAX_TTL_SECONDS: u64 = 21_600;

const PREFIX: &str = "hegel1";

/// Why a token request or a token was refused (the response body says it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The TTL header is missing.
    #[error(
        "PUT /latest/api/token needs the header X-aws-ec2-metadata-token-ttl-seconds (1 to 21600)"
    )]
    MissingTtl,
    /// The TTL header is not a number of seconds in 1..=21600.
    #[error(
        "X-aws-ec2-metadata-token-ttl-seconds must be a whole number of seconds from 1 to 21600, not {0:?}"
    )]
    BadTtl(String),
    /// The token is not one this server issues.
    #[error(
        "the X-aws-ec2-metadata-token is not a token this server issued; PUT /latest/api/token for one"
    )]
    Malformed,
    /// The token was issued to another address.
    #[error(
        "the X-aws-ec2-metadata-token was issued to another address; PUT /latest/api/token for one"
    )]
    OtherAddress,
    /// The token's time is over.
    #[error("the X-aws-ec2-metadata-token expired; PUT /latest/api/token for a new one")]
    Expired,
}

/// Parses the TTL header's value.
pub fn ttl(value: Option<&[u8]>) -> Result<u64, TokenError> {
    let raw = value.ok_or(TokenError::MissingTtl)?;
    let text = std::str::from_utf8(raw).map_err(|_| TokenError::BadTtl("(not UTF-8)".into()))?;
    let cut: String = text.chars().take(32).collect();
    match text.trim().parse::<u64>() {
        Ok(n) if (1..=MAX_TTL_SECONDS).contains(&n) => Ok(n),
        _ => Err(TokenError::BadTtl(cut)),
    }
}

/// A token for `ip`, valid until `now + ttl` (Unix seconds).
pub fn issue(ip: IpAddr, now: u64, ttl: u64) -> String {
    format!("{PREFIX}.{}.{}", now.saturating_add(ttl), encode(ip))
}

/// Checks a presented token for a request from `ip` at `now`.
pub fn check(token: &[u8], ip: IpAddr, now: u64) -> Result<(), TokenError> {
    let text = std::str::from_utf8(token).map_err(|_| TokenError::Malformed)?;
    let mut parts = text.trim().splitn(3, '.');
    let (Some(PREFIX), Some(expiry), Some(addr)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed);
    };
    let expiry: u64 = expiry.parse().map_err(|_| TokenError::Malformed)?;
    if addr != encode(ip) {
        return Err(TokenError::OtherAddress);
    }
    if expiry <= now {
        return Err(TokenError::Expired);
    }
    Ok(())
}

/// The address in a form with no `.` (the field separator): IPv4 dotted with `-`, IPv6 with
/// `_` for `:`; canonical (an IPv4-mapped IPv6 address is its IPv4 address).
fn encode(ip: IpAddr) -> String {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.to_string().replace('.', "-"),
        IpAddr::V6(v6) => v6.to_string().replace(':', "_"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn a_token_is_good_for_its_address_until_it_expires() {
        let t = issue(ip("10.0.0.2"), 1000, 60);
        assert_eq!(check(t.as_bytes(), ip("10.0.0.2"), 1000), Ok(()));
        assert_eq!(check(t.as_bytes(), ip("10.0.0.2"), 1059), Ok(()));
        assert_eq!(
            check(t.as_bytes(), ip("10.0.0.2"), 1060),
            Err(TokenError::Expired)
        );
        assert_eq!(
            check(t.as_bytes(), ip("10.0.0.3"), 1000),
            Err(TokenError::OtherAddress)
        );
        // The same address spelled as IPv4-mapped IPv6 is the same caller.
        assert_eq!(check(t.as_bytes(), ip("::ffff:10.0.0.2"), 1000), Ok(()));
        let v6 = issue(ip("fd00::2"), 1000, 60);
        assert_eq!(check(v6.as_bytes(), ip("fd00::2"), 1000), Ok(()));
        for bad in [
            "",
            "x",
            "hegel1",
            "hegel1.abc.10-0-0-2",
            "other.2000.10-0-0-2",
        ] {
            assert_eq!(
                check(bad.as_bytes(), ip("10.0.0.2"), 1000),
                Err(TokenError::Malformed),
                "{bad:?}"
            );
        }
        assert_eq!(
            check(&[0xff, 0xfe], ip("10.0.0.2"), 1000),
            Err(TokenError::Malformed)
        );
    }

    #[test]
    fn the_ttl_is_one_second_to_six_hours() {
        assert_eq!(ttl(Some(b"21600")), Ok(21_600));
        assert_eq!(ttl(Some(b" 1 ")), Ok(1));
        assert_eq!(ttl(None), Err(TokenError::MissingTtl));
        for bad in [&b"0"[..], b"21601", b"-1", b"1.5", b"", b"abc"] {
            assert!(
                matches!(ttl(Some(bad)), Err(TokenError::BadTtl(_))),
                "{bad:?}"
            );
        }
    }
}
