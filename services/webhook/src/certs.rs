//! The development stack's certificates, made by the `tink-dev-certs` crate (re-exported here,
//! where they used to be made, for the webhook's tests and benchmark and for callers of
//! `tink_webhook::dev_certificates`).

pub use tink_dev_certs::{CertError, DevCertificates, dev_certificates};

#[cfg(test)]
mod tests {
    use super::*;

    // What the certificates are and which names are refused is `tink-dev-certs`'s test; that
    // the pair loads as a rustls serving key is the webhook's.
    #[test]
    fn dev_certificates_load_as_a_serving_key() {
        let certs = dev_certificates(
            &["tink-webhook.tink-system.svc".to_string()],
            &["127.0.0.1".parse().unwrap()],
        )
        .unwrap();
        crate::tls::certified_key(certs.cert_pem.as_bytes(), certs.key_pem.as_bytes()).unwrap();
    }
}
