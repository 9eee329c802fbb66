//! The development stack's certificates, made by the `tink-dev-certs` crate (re-exported here,
//! where they used to be made, for the webhook's tests and benchmark and for callers of
//! `tink_webhook::dev_certificates`).

pub use tink_dev_certs::{CertError, DevCertificates, dev_certificates};

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
        // The pair loads as a rustls serving key.
        crate::tls::certified_key(certs.cert_pem.as_bytes(), certs.key_pem.as_bytes()).unwrap();
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
