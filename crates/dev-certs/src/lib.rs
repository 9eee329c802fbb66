//! Certificates for the development stack: a throw-away CA and a serving certificate it signs,
//! generated with rcgen. Production deployments mount certificates issued by their own CA
//! (cert-manager, for example) and inject that CA into the webhook configuration and the CRDs.
//!
//! A crate of its own, below the services: `tinkctl dev up` makes the development stack's
//! certificates with it at run time (so it cannot live in the test kit, which no shipped binary
//! may depend on), and the webhook's and tinkctl's tests make theirs with it too
//! (the test kit re-exports it as `tink_testkit::certs`). It used to live in the webhook, which
//! made tinkctl depend on a service.
#![forbid(unsafe_code)]

use std::net::IpAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType, date_time_ymd,
};

/// PEM texts for the development stack.
#[derive(Clone, Debug)]
pub struct DevCertificates {
    /// The CA certificate: the `caBundle` (base64 of this text) of the webhook configuration
    /// and of the CRDs' conversion client config.
    pub ca_pem: String,
    /// The serving certificate (`--tls-cert`), signed by the CA.
    pub cert_pem: String,
    /// The serving certificate's private key (`--tls-key`, PKCS#8).
    pub key_pem: String,
}

/// A certificate could not be generated.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A DNS name is not usable in a certificate (for example, it is empty).
    #[error("invalid DNS name {name:?} for a certificate: {reason}")]
    Name {
        /// The name.
        name: String,
        /// Why.
        reason: String,
    },
    /// Neither DNS names nor IP addresses were given.
    #[error("a serving certificate needs at least one DNS name or IP address")]
    NoNames,
    /// Key generation or signing failed.
    #[error("generating the certificate: {0}")]
    Generate(#[from] rcgen::Error),
}

/// Generates a self-signed CA and a serving certificate for `dns_names` and `ip_addrs`
/// (ECDSA P-256, valid from the start of last year for ten years, `serverAuth`). The webhook
/// behind a Service `tink-webhook` in `tink-system` needs the DNS name
/// `tink-webhook.tink-system.svc`, which is the name an API server checks.
pub fn dev_certificates(
    dns_names: &[String],
    ip_addrs: &[IpAddr],
) -> Result<DevCertificates, CertError> {
    if dns_names.is_empty() && ip_addrs.is_empty() {
        return Err(CertError::NoNames);
    }
    let year = current_year();
    let (not_before, not_after) = (date_time_ymd(year - 1, 1, 1), date_time_ymd(year + 9, 1, 1));

    let mut ca_params = CertificateParams::default();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "tink-webhook development CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca_params.not_before = not_before;
    ca_params.not_after = not_after;
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca_params.self_signed(&ca_key)?;

    let mut params = CertificateParams::default();
    for name in dns_names {
        let bad = |reason: String| CertError::Name {
            name: name.clone(),
            reason,
        };
        if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("empty, or holds whitespace".into()));
        }
        let san = name
            .as_str()
            .try_into()
            .map_err(|e: rcgen::Error| bad(e.to_string()))?;
        params.subject_alt_names.push(SanType::DnsName(san));
    }
    for ip in ip_addrs {
        params.subject_alt_names.push(SanType::IpAddress(*ip));
    }
    let common_name = dns_names
        .first()
        .cloned()
        .or_else(|| ip_addrs.first().map(ToString::to_string))
        .unwrap_or_default();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = not_before;
    params.not_after = not_after;
    let key = KeyPair::generate()?;
    let issuer = Issuer::from_params(&ca_params, &ca_key);
    let cert = params.signed_by(&key, &issuer)?;

    Ok(DevCertificates {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// The current UTC year, close enough for certificate validity bounds.
fn current_year() -> i32 {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // 365.2425 days per year.
    1970 + i32::try_from(secs / 31_556_952).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_a_ca_and_a_serving_certificate() {
        let certs = dev_certificates(
            &["tink-webhook.tink-system.svc".to_string()],
            &["127.0.0.1".parse().unwrap()],
        )
        .unwrap();
        assert!(certs.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(certs.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(certs.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        assert_ne!(certs.ca_pem, certs.cert_pem);
        // That the pair loads as a rustls serving key is the webhook's test (its `tls` module).
    }

    #[test]
    fn refuses_no_names() {
        assert!(matches!(
            dev_certificates(&[], &[]),
            Err(CertError::NoNames)
        ));
        assert!(matches!(
            dev_certificates(&["".into()], &[]),
            Err(CertError::Name { .. })
        ));
    }
}
