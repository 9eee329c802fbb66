//! The development stack's certificates: a CA and the webhook's serving certificate, made by
//! `tink_dev_certs::dev_certificates` (rcgen), the code the webhook's own tests use.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// The files written by [`write`].
#[derive(Debug, Clone)]
pub struct Pki {
    /// The CA certificate (PEM): the caBundle of the webhook configurations.
    pub ca_cert: PathBuf,
    /// The webhook's serving certificate (PEM).
    pub webhook_cert: PathBuf,
    /// The webhook's key (PEM).
    pub webhook_key: PathBuf,
}

/// The names the webhook certificate is valid for: loopback (the dev stack) and the in-cluster
/// Service names.
pub const WEBHOOK_NAMES: [&str; 5] = [
    "localhost",
    "127.0.0.1",
    "tink-webhook",
    "tink-webhook.tink-system.svc",
    "tink-webhook.tink-system.svc.cluster.local",
];

/// Makes a CA and a serving certificate (the webhook's, which the servers use too) under `dir`;
/// `machine_ip`, the address machines dial the servers at, is named too. Reuses them when
/// present, so a restarted stack keeps the caBundle its stored CRDs carry; present ones made
/// for another machine address are an error (the CA would change under the stored CRDs).
pub fn write(dir: &Path, machine_ip: Option<std::net::Ipv4Addr>) -> anyhow::Result<Pki> {
    let pki = Pki {
        ca_cert: dir.join("ca.crt"),
        webhook_cert: dir.join("webhook.crt"),
        webhook_key: dir.join("webhook.key"),
    };
    let names_file = dir.join("machine-ip");
    let wanted = machine_ip.map(|ip| ip.to_string()).unwrap_or_default();
    if pki.ca_cert.exists() && pki.webhook_cert.exists() && pki.webhook_key.exists() {
        let had = std::fs::read_to_string(&names_file).unwrap_or_default();
        if had.trim() != wanted {
            anyhow::bail!(
                "the certificates in {} were made for machine address {:?}, not {:?}: use another --data-dir",
                dir.display(),
                had.trim(),
                wanted
            );
        }
        return Ok(pki);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let (dns, ips): (Vec<&str>, Vec<&str>) = WEBHOOK_NAMES
        .iter()
        .partition(|n| n.parse::<std::net::IpAddr>().is_err());
    let dns: Vec<String> = dns.into_iter().map(str::to_string).collect();
    let mut ips: Vec<std::net::IpAddr> = ips.into_iter().filter_map(|n| n.parse().ok()).collect();
    ips.extend(machine_ip.map(std::net::IpAddr::V4));
    let certs = tink_dev_certs::dev_certificates(&dns, &ips)
        .context("generating the development certificates")?;
    write_file(&pki.ca_cert, certs.ca_pem.as_bytes(), 0o644)?;
    write_file(&pki.webhook_cert, certs.cert_pem.as_bytes(), 0o644)?;
    write_file(&pki.webhook_key, certs.key_pem.as_bytes(), 0o600)?;
    write_file(&names_file, wanted.as_bytes(), 0o644)?;
    Ok(pki)
}

fn write_file(path: &Path, data: &[u8], mode: u32) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(data)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_ca_and_a_serving_certificate_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = write(dir.path(), None).expect("pki");
        let ca = std::fs::read_to_string(&pki.ca_cert).expect("ca");
        assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
        let key = std::fs::read_to_string(&pki.webhook_key).expect("key");
        assert!(key.contains("PRIVATE KEY"));
        // A second run keeps the same CA (stored CRDs carry it as their caBundle).
        let again = write(dir.path(), None).expect("pki");
        assert_eq!(std::fs::read_to_string(&again.ca_cert).expect("ca"), ca);
        // Certificates made without a machine address do not serve one.
        let err = write(dir.path(), Some("10.99.0.1".parse().expect("ip"))).expect_err("mismatch");
        assert!(err.to_string().contains("another --data-dir"), "{err}");
    }
}
