//! oci2disk: a disk image stored in an OCI registry (an ORAS artifact: `oras push
//! registry/repo:tag ./disk.raw.gz`, or any image whose one layer is the disk image) onto a
//! disk.
//!
//! `IMG_URL` is an image reference, `host[:port]/repository:tag` or `...@sha256:<digest>`, as
//! the hub's action takes it. The action speaks the OCI distribution API itself: the manifest
//! (an index picks this machine's architecture), then the layer's blob, which goes through
//! image2disk's pipeline (format by magic bytes, `O_DIRECT` writes, size checks, retries with
//! resume, `BLKRRPART`) and is checked against the layer's digest before success.
//!
//! Registries: `https://` by default and `http://` when the server answers the TLS handshake
//! in plain HTTP (Debian's `docker-registry` on a provisioning network); an `http://` or
//! `https://` prefix on `IMG_URL` fixes the scheme. Authentication as the registry asks: a
//! bearer token from its realm (anonymous, or with `REGISTRY_USERNAME`/`REGISTRY_PASSWORD`),
//! or basic credentials.
//!
//! The layer: the one carrying an `org.opencontainers.image.title` annotation (the file name
//! ORAS records; the hub's action writes only such layers), else the only layer.

use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::common::{ActionError, Env, Log};
use crate::http::{self, HttpError};
use crate::image2disk::{self, Config};

/// Registry requests that send nothing for this long fail.
const STALL: Duration = Duration::from_secs(30);
/// The largest manifest read.
const MANIFEST_LIMIT: usize = 4 << 20;

const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
application/vnd.oci.image.manifest.v1+json, \
application/vnd.docker.distribution.manifest.list.v2+json, \
application/vnd.docker.distribution.manifest.v2+json";

/// A parsed `IMG_URL`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// `http` or `https` when `IMG_URL` said; else tried in that order.
    pub scheme: Option<&'static str>,
    /// `host[:port]`.
    pub registry: String,
    /// `repository/path`.
    pub repository: String,
    /// The tag or `sha256:<hex>` digest to fetch.
    pub reference: String,
    /// Whether `reference` is a digest (the manifest is then checked against it).
    pub by_digest: bool,
}

/// Parses an image reference the way docker does: the first component is the registry when
/// it has a `.` or `:` or is `localhost`, else the image is on Docker Hub.
pub fn parse_reference(raw: &str) -> Result<Reference, ActionError> {
    let bad = |why: &str| ActionError::invalid("IMG_URL", raw, why);
    let (scheme, rest) = if let Some(r) = raw.strip_prefix("http://") {
        (Some("http"), r)
    } else if let Some(r) = raw.strip_prefix("https://") {
        (Some("https"), r)
    } else if raw.contains("://") {
        return Err(bad(
            "expected host[:port]/repository:tag (or http:// or https:// before it)",
        ));
    } else {
        (None, raw)
    };
    let (name, digest) = match rest.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (rest, None),
    };
    let (name, tag) = match name.rsplit_once(':') {
        Some((n, t)) if !t.contains('/') => (n, Some(t)),
        _ => (name, None),
    };
    let (registry, repository) = match name.split_once('/') {
        Some((first, path))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (first.to_owned(), path.to_owned())
        }
        Some(_) => ("registry-1.docker.io".to_owned(), name.to_owned()),
        None => ("registry-1.docker.io".to_owned(), format!("library/{name}")),
    };
    if registry.is_empty() || repository.is_empty() {
        return Err(bad("expected host[:port]/repository:tag"));
    }
    let repo_ok = repository.split('/').all(|c| {
        !c.is_empty()
            && c.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
            })
    });
    if !repo_ok {
        return Err(bad(
            "the repository must be lower-case letters, digits, '.', '_', '-' and '/'",
        ));
    }
    let (reference, by_digest) = match (digest, tag) {
        (Some(d), _) => {
            let hex = d
                .strip_prefix("sha256:")
                .ok_or_else(|| bad("only sha256 digests are supported"))?;
            if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad("a sha256 digest has 64 hex digits"));
            }
            (d.to_owned(), true)
        }
        (None, Some(t)) => {
            if t.is_empty()
                || t.len() > 128
                || !t
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            {
                return Err(bad("the tag must be letters, digits, '.', '_' and '-'"));
            }
            (t.to_owned(), false)
        }
        (None, None) => ("latest".to_owned(), false),
    };
    Ok(Reference {
        scheme,
        registry,
        repository,
        reference,
        by_digest,
    })
}

/// A `WWW-Authenticate` challenge: the scheme (`bearer`, `basic`) and its parameters.
fn parse_challenge(header: &str) -> (String, Vec<(String, String)>) {
    let header = header.trim();
    let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
    let mut params = Vec::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            break;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.peek() {
                if *c == ',' {
                    break;
                }
                value.push(*c);
                chars.next();
            }
        }
        params.push((key.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    (scheme.to_ascii_lowercase(), params)
}

/// The registry session: base URL, the credentials and the authorization earned.
struct Registry {
    base: url::Url,
    tls: http::Tls,
    user: Option<(String, String)>,
    authorization: Option<String>,
    log: Log,
}

/// Failure reasons of registry calls.
fn unreachable(registry: &str, e: &HttpError) -> ActionError {
    ActionError::new("RegistryUnreachable", format!("registry {registry}: {e}"))
}

impl Registry {
    /// Finds the scheme: the one `IMG_URL` names, else https, falling back to http when the
    /// server answers TLS in plain HTTP.
    async fn connect(
        r: &Reference,
        tls: http::Tls,
        user: Option<(String, String)>,
        log: Log,
    ) -> Result<Self, ActionError> {
        let schemes: &[&str] = match r.scheme {
            Some(s) => &[if s == "http" { "http" } else { "https" }],
            None => &["https", "http"],
        };
        let mut last = None;
        for scheme in schemes {
            let base = url::Url::parse(&format!("{scheme}://{}/", r.registry))
                .map_err(|e| ActionError::invalid("IMG_URL", &r.registry, e))?;
            let ping = base
                .join("v2/")
                .map_err(|e| ActionError::invalid("IMG_URL", &r.registry, e))?;
            match http::get_small(&http::Get::new(ping, tls.clone()), STALL, 64 << 10).await {
                // 200, or 401 (a challenge answered later): a registry.
                Ok((200 | 401, _, _)) => {
                    return Ok(Self {
                        base,
                        tls,
                        user,
                        authorization: None,
                        log,
                    });
                }
                Ok((status, _, _)) => {
                    return Err(ActionError::new(
                        "RegistryUnreachable",
                        format!(
                            "{scheme}://{}/v2/ answered {status}: not an OCI distribution registry",
                            r.registry
                        ),
                    ));
                }
                Err(HttpError::Tls {
                    plain_http: true, ..
                }) if r.scheme.is_none() => {
                    log.info(
                        "the registry does not speak TLS: using plain http",
                        &[("registry", r.registry.clone().into())],
                    );
                    last = None;
                    continue;
                }
                Err(e @ HttpError::TlsConfig(_)) => {
                    return Err(ActionError::new("InvalidVariable", e.to_string()));
                }
                Err(e) => {
                    let mut err = unreachable(&r.registry, &e);
                    if matches!(
                        e,
                        HttpError::Tls {
                            plain_http: true,
                            ..
                        }
                    ) {
                        err.message.push_str(
                            " (the registry speaks plain HTTP: write IMG_URL without https://)",
                        );
                    }
                    last = Some(err);
                    break;
                }
            }
        }
        Err(last.unwrap_or_else(|| {
            ActionError::new(
                "RegistryUnreachable",
                format!("registry {}: no usable scheme", r.registry),
            )
        }))
    }

    fn request(&self, path: &str, accept: Option<&str>) -> Result<http::Get, ActionError> {
        let url = self
            .base
            .join(path)
            .map_err(|e| ActionError::new("InvalidVariable", format!("IMG_URL: {path}: {e}")))?;
        let mut headers = Vec::new();
        if let Some(a) = accept {
            headers.push(("Accept".to_owned(), a.to_owned()));
        }
        if let Some(a) = &self.authorization {
            headers.push(("Authorization".to_owned(), a.clone()));
        }
        Ok(http::Get {
            url,
            headers,
            tls: self.tls.clone(),
        })
    }

    /// Answers a 401's challenge: a bearer token from the realm, or basic credentials.
    async fn authorize(&mut self, challenge: &str, scope: &str) -> Result<(), ActionError> {
        let (scheme, params) = parse_challenge(challenge);
        let param = |k: &str| params.iter().find(|(p, _)| p == k).map(|(_, v)| v.clone());
        let basic = self.user.as_ref().map(|(u, p)| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
            )
        });
        match scheme.as_str() {
            "basic" => {
                let Some(b) = basic else {
                    return Err(ActionError::new(
                        "RegistryAuthFailed",
                        "the registry asks for credentials: set REGISTRY_USERNAME and REGISTRY_PASSWORD",
                    ));
                };
                self.authorization = Some(b);
                Ok(())
            }
            "bearer" => {
                let realm = param("realm").ok_or_else(|| {
                    ActionError::new(
                        "RegistryAuthFailed",
                        format!("a bearer challenge without a realm: {challenge}"),
                    )
                })?;
                let mut url = url::Url::parse(&realm).map_err(|e| {
                    ActionError::new(
                        "RegistryAuthFailed",
                        format!("the token realm {realm:?}: {e}"),
                    )
                })?;
                {
                    let mut q = url.query_pairs_mut();
                    if let Some(s) = param("service") {
                        q.append_pair("service", &s);
                    }
                    q.append_pair("scope", &param("scope").unwrap_or_else(|| scope.to_owned()));
                }
                let mut req = http::Get::new(url.clone(), self.tls.clone());
                if let Some(b) = basic {
                    req.headers.push(("Authorization".to_owned(), b));
                }
                self.log.info(
                    "asking for a registry token",
                    &[
                        ("realm", realm.clone().into()),
                        ("credentials", self.user.is_some().into()),
                    ],
                );
                let (status, _, body) = http::get_small(&req, STALL, 1 << 20)
                    .await
                    .map_err(|e| unreachable(&realm, &e))?;
                if status != 200 {
                    return Err(ActionError::new(
                        "RegistryAuthFailed",
                        format!(
                            "the token service {realm} answered {status}{}",
                            if self.user.is_none() {
                                " (no REGISTRY_USERNAME/REGISTRY_PASSWORD were given)"
                            } else {
                                ""
                            }
                        ),
                    ));
                }
                let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
                    ActionError::new(
                        "RegistryAuthFailed",
                        format!("the token service {realm}: not JSON: {e}"),
                    )
                })?;
                let token = v
                    .get("token")
                    .or_else(|| v.get("access_token"))
                    .and_then(|t| t.as_str())
                    .filter(|t| !t.is_empty())
                    .ok_or_else(|| {
                        ActionError::new(
                            "RegistryAuthFailed",
                            format!("the token service {realm} sent no token"),
                        )
                    })?;
                self.authorization = Some(format!("Bearer {token}"));
                Ok(())
            }
            other => Err(ActionError::new(
                "RegistryAuthFailed",
                format!("unsupported authentication scheme {other:?}: {challenge}"),
            )),
        }
    }

    /// GETs a manifest, answering one authentication challenge.
    async fn manifest(
        &mut self,
        r: &Reference,
        reference: &str,
    ) -> Result<(serde_json::Value, Bytes), ActionError> {
        let path = format!("v2/{}/manifests/{reference}", r.repository);
        let scope = format!("repository:{}:pull", r.repository);
        for round in 0..2 {
            let req = self.request(&path, Some(ACCEPT))?;
            let (status, headers, body) = http::get_small(&req, STALL, MANIFEST_LIMIT)
                .await
                .map_err(|e| unreachable(&r.registry, &e))?;
            match status {
                200 => {
                    let v = serde_json::from_slice(&body).map_err(|e| {
                        ActionError::new(
                            "InvalidImage",
                            format!("the manifest of {}: not JSON: {e}", r.repository),
                        )
                    })?;
                    return Ok((v, body));
                }
                401 if round == 0 => {
                    let challenge = headers
                        .get(hyper::header::WWW_AUTHENTICATE)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_owned();
                    if challenge.is_empty() {
                        return Err(ActionError::new(
                            "RegistryAuthFailed",
                            "401 without a WWW-Authenticate challenge",
                        ));
                    }
                    self.authorize(&challenge, &scope).await?;
                }
                401 | 403 => {
                    return Err(ActionError::new(
                        "RegistryAuthFailed",
                        format!(
                            "{}: {status} for {}:{reference} with the credentials given",
                            r.registry, r.repository
                        ),
                    ));
                }
                404 => {
                    return Err(ActionError::new(
                        "ImageNotFound",
                        format!(
                            "{}: no manifest {reference} in repository {} (404: {})",
                            r.registry,
                            r.repository,
                            String::from_utf8_lossy(&body[..body.len().min(300)]).trim()
                        ),
                    ));
                }
                s => {
                    return Err(ActionError::new(
                        "RegistryError",
                        format!(
                            "{}: the manifest {}:{reference} answered {s}: {}",
                            r.registry,
                            r.repository,
                            String::from_utf8_lossy(&body[..body.len().min(300)]).trim()
                        ),
                    ));
                }
            }
        }
        Err(ActionError::new(
            "RegistryAuthFailed",
            format!("{}: still 401 after authenticating", r.registry),
        ))
    }
}

/// The architecture name OCI uses for this machine.
fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        a => a,
    }
}

fn sha256_hex(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// The layer holding the disk image: (digest, size, title).
pub fn pick_layer(manifest: &serde_json::Value) -> Result<(String, u64, String), ActionError> {
    let layers = manifest
        .get("layers")
        .and_then(|l| l.as_array())
        .ok_or_else(|| ActionError::new("InvalidImage", "the manifest has no layers"))?;
    let title = |l: &serde_json::Value| {
        l.get("annotations")
            .and_then(|a| a.get("org.opencontainers.image.title"))
            .and_then(|t| t.as_str())
            .map(str::to_owned)
    };
    let titled: Vec<&serde_json::Value> = layers.iter().filter(|l| title(l).is_some()).collect();
    let candidates = if titled.is_empty() {
        layers.iter().collect()
    } else {
        titled
    };
    let layer = match candidates.as_slice() {
        [one] => *one,
        [] => {
            return Err(ActionError::new(
                "InvalidImage",
                "the manifest has no layers",
            ));
        }
        many => {
            let names: Vec<String> = many
                .iter()
                .map(|l| title(l).unwrap_or_else(|| "(untitled)".into()))
                .collect();
            return Err(ActionError::new(
                "InvalidImage",
                format!(
                    "the artifact has {} files ({}): oci2disk writes an artifact of one disk image",
                    many.len(),
                    names.join(", ")
                ),
            ));
        }
    };
    let digest = layer
        .get("digest")
        .and_then(|d| d.as_str())
        .ok_or_else(|| ActionError::new("InvalidImage", "a layer without a digest"))?
        .to_owned();
    let size = layer.get("size").and_then(|s| s.as_u64()).unwrap_or(0);
    Ok((digest, size, title(layer).unwrap_or_default()))
}

/// Runs the action.
pub fn run(env: &Env, log: &Log) -> Result<(), ActionError> {
    let raw = env.required("IMG_URL")?;
    let r = parse_reference(raw)?;
    let disk = env.required("DEST_DISK")?;
    crate::sys::check_device("DEST_DISK", disk)?;
    let user = match (env.get("REGISTRY_USERNAME"), env.get("REGISTRY_PASSWORD")) {
        (Some(u), Some(p)) => Some((u.to_owned(), p.to_owned())),
        (Some(_), None) => return Err(ActionError::missing("REGISTRY_PASSWORD")),
        (None, Some(_)) => return Err(ActionError::missing("REGISTRY_USERNAME")),
        (None, None) => None,
    };
    let mut tls = http::Tls::from_env(env);
    tls.skip_verify = env.bool("SKIP_VERIFY", false)?;
    log.info(
        "resolving",
        &[
            ("registry", r.registry.clone().into()),
            ("repository", r.repository.clone().into()),
            ("reference", r.reference.clone().into()),
        ],
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ActionError::new("RuntimeError", e.to_string()))?;
    let (blob, authorization, digest, size, title) = rt.block_on(async {
        let mut reg = Registry::connect(&r, tls.clone(), user, *log).await?;
        let (mut manifest, bytes) = reg.manifest(&r, &r.reference).await?;
        if r.by_digest {
            let got = format!("sha256:{}", sha256_hex(&bytes));
            if got != r.reference {
                return Err(ActionError::new(
                    "ChecksumMismatch",
                    format!(
                        "the manifest's digest is {got}, IMG_URL names {}",
                        r.reference
                    ),
                ));
            }
        }
        if let Some(entries) = manifest.get("manifests").and_then(|m| m.as_array()) {
            // An index: this machine's architecture, or the only entry.
            let arch = oci_arch();
            let platform = |e: &serde_json::Value, k: &str| {
                e.get("platform")
                    .and_then(|p| p.get(k))
                    .and_then(|v| v.as_str())
                    .map(str::to_owned)
            };
            let chosen = entries
                .iter()
                .find(|e| platform(e, "architecture").as_deref() == Some(arch))
                .or(if entries.len() == 1 {
                    entries.first()
                } else {
                    None
                })
                .ok_or_else(|| {
                    ActionError::new(
                        "ImageNotFound",
                        format!(
                            "the index of {}:{} has no entry for {arch}",
                            r.repository, r.reference
                        ),
                    )
                })?;
            let d = chosen
                .get("digest")
                .and_then(|d| d.as_str())
                .ok_or_else(|| ActionError::new("InvalidImage", "an index entry without digest"))?
                .to_owned();
            let (m, b) = reg.manifest(&r, &d).await?;
            let got = format!("sha256:{}", sha256_hex(&b));
            if d.starts_with("sha256:") && got != d {
                return Err(ActionError::new(
                    "ChecksumMismatch",
                    format!("the manifest's digest is {got}, the index names {d}"),
                ));
            }
            manifest = m;
        }
        let (digest, size, title) = pick_layer(&manifest)?;
        let blob = reg.request(&format!("v2/{}/blobs/{digest}", r.repository), None)?;
        Ok::<_, ActionError>((blob.url, reg.authorization.clone(), digest, size, title))
    })?;
    drop(rt);
    log.info(
        "layer",
        &[
            ("digest", digest.clone().into()),
            ("size", size.into()),
            ("title", title.into()),
        ],
    );
    let mut cfg = Config::with_url(env, blob)?;
    cfg.tls = tls;
    if let Some(a) = authorization {
        cfg.headers.push(("Authorization".to_owned(), a));
    }
    match digest.strip_prefix("sha256:") {
        Some(_) => {
            cfg.sha256 = Some(image2disk::parse_sha256_named("the layer digest", &digest)?);
            cfg.checksum_name = format!("the manifest's layer digest ({digest})");
        }
        None => log.info(
            "the layer's digest is not sha256: not checked",
            &[("digest", digest.clone().into())],
        ),
    }
    image2disk::write_image(&cfg, log)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references() {
        let r = parse_reference("192.168.0.173/test/debian:raw.gz").ok();
        assert_eq!(
            r,
            Some(Reference {
                scheme: None,
                registry: "192.168.0.173".into(),
                repository: "test/debian".into(),
                reference: "raw.gz".into(),
                by_digest: false,
            })
        );
        let r = parse_reference("http://127.0.0.1:5000/disks/debian").ok();
        assert_eq!(
            r.as_ref()
                .map(|r| (r.scheme, r.registry.as_str(), r.reference.as_str())),
            Some((Some("http"), "127.0.0.1:5000", "latest"))
        );
        let d = format!("sha256:{}", "a".repeat(64));
        let r = parse_reference(&format!("localhost/x/y:tag@{d}")).ok();
        assert_eq!(
            r.as_ref().map(|r| (r.reference.clone(), r.by_digest)),
            Some((d, true))
        );
        let r = parse_reference("ubuntu:24.04").ok();
        assert_eq!(
            r.map(|r| (r.registry, r.repository)),
            Some(("registry-1.docker.io".into(), "library/ubuntu".into()))
        );
        for bad in [
            "ftp://host/x:y",
            "host.example/UPPER:tag",
            "host.example/x@sha256:abc",
            "host.example/x:bad tag",
            "host.example/",
        ] {
            assert!(
                parse_reference(bad).is_err_and(|e| e.message.contains("IMG_URL")),
                "{bad}"
            );
        }
    }

    #[test]
    fn challenges() {
        let (s, p) = parse_challenge(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#,
        );
        assert_eq!(s, "bearer");
        assert_eq!(
            p,
            vec![
                ("realm".to_owned(), "https://auth.example/token".to_owned()),
                ("service".to_owned(), "registry.example".to_owned()),
                ("scope".to_owned(), "repository:a/b:pull,push".to_owned()),
            ]
        );
        let (s, p) = parse_challenge(r#"Basic realm="Registry Realm""#);
        assert_eq!(s, "basic");
        assert_eq!(p, vec![("realm".to_owned(), "Registry Realm".to_owned())]);
    }

    #[test]
    fn the_layer_with_a_title_is_the_disk() {
        let m = serde_json::json!({"layers": [
            {"digest": "sha256:aa", "size": 3, "mediaType": "x"},
            {"digest": "sha256:bb", "size": 5, "annotations": {"org.opencontainers.image.title": "disk.raw.gz"}}
        ]});
        assert_eq!(
            pick_layer(&m).ok(),
            Some(("sha256:bb".into(), 5, "disk.raw.gz".into()))
        );
        let one = serde_json::json!({"layers": [{"digest": "sha256:cc", "size": 1}]});
        assert_eq!(pick_layer(&one).ok().map(|l| l.0), Some("sha256:cc".into()));
        let two = serde_json::json!({"layers": [
            {"digest": "sha256:aa", "annotations": {"org.opencontainers.image.title": "a"}},
            {"digest": "sha256:bb", "annotations": {"org.opencontainers.image.title": "b"}}
        ]});
        assert!(
            pick_layer(&two)
                .is_err_and(|e| e.reason == "InvalidImage" && e.message.contains("a, b"))
        );
        assert!(pick_layer(&serde_json::json!({})).is_err());
    }
}
