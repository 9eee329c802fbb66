//! The RPC provider: bmclib's webhook format, so consumers written for Rufio work unchanged.
//!
//! Each operation is one request (POST, `application/json` unless the Machine says otherwise)
//! to `consumerURL` with `{"id", "host", "method", "params"}`; methods `getPowerState`,
//! `setPowerState` (`{"state": "on"}`), `setBootDevice` (`{"device", "persistent", "efiBoot"}`),
//! `setVirtualMedia` (`{"mediaUrl", "kind"}`). The answer is `{"id", "host", "result",
//! "error": {"code", "message"}}` with status 200; a non-zero error code is a failure.
//!
//! Signing (HMAC, <https://webhooks.fyi/security/hmac>): the body followed by the values of
//! the included headers (by default the timestamp header, `X-Rufio-Timestamp`) is signed
//! with every secret of each algorithm; the signatures go comma-separated in
//! `X-Rufio-Signature-256` / `-512`, each prefixed `sha256=` / `sha512=`, so a consumer can
//! rotate keys.
//!
//! # The timestamp header
//!
//! The time of each request, in UTC, formatted with the Machine's
//! `providerOptions.rpc.request.timestampFormat`: a Go time layout, as bmclib passes it to
//! Go's `time.Format`. Without one it is RFC 3339 (`2006-01-02T15:04:05Z07:00`, bmclib's
//! default), e.g. `2024-03-05T07:08:09Z`. Any Go layout is read as Go reads it (`2006` year,
//! `01`/`1`/`Jan`/`January` month, `02`/`2`/`_2` day, `002` day of the year, `Mon`/`Monday`,
//! `15`/`03`/`3` hour, `04`/`4` minute, `05`/`5` second, `PM`/`pm`, `.000`/`.999` fractions,
//! `MST` as `UTC`, `-07:00`/`-0700`/`-07` as `+00:00`/`+0000`/`+00`, `Z07:00` and friends as
//! `Z`; everything else literal), so these layouts of Go's `time` package all work:
//!
//! | Go constant | layout | example |
//! |---|---|---|
//! | `RFC3339` (default) | `2006-01-02T15:04:05Z07:00` | `2024-03-05T07:08:09Z` |
//! | `RFC3339Nano` | `2006-01-02T15:04:05.999999999Z07:00` | `2024-03-05T07:08:09.12Z` |
//! | `RFC1123` | `Mon, 02 Jan 2006 15:04:05 MST` | `Tue, 05 Mar 2024 07:08:09 UTC` |
//! | `RFC1123Z` | `Mon, 02 Jan 2006 15:04:05 -0700` | `Tue, 05 Mar 2024 07:08:09 +0000` |
//! | `RFC822`, `RFC822Z`, `RFC850` | `02 Jan 06 15:04 MST`, ... | `05 Mar 24 07:08 UTC` |
//! | `ANSIC`, `UnixDate`, `RubyDate` | `Mon Jan _2 15:04:05 2006`, ... | `Tue Mar  5 07:08:09 2024` |
//! | `DateTime`, `DateOnly`, `TimeOnly` | `2006-01-02 15:04:05`, ... | `2024-03-05 07:08:09` |
//! | `Kitchen`, `Stamp`, `StampMilli`, ... | `3:04PM`, `Jan _2 15:04:05.000`, ... | `7:08AM` |
//!
//! Refused when the Machine is read (a clear configuration error, nothing sent): a constant's
//! name instead of its layout (`RFC3339`; Go would print it as digits), a layout with no time
//! element (the header would never change), and one whose output is not a valid header value.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};

use http::Method;
use ring::hmac;
use serde_json::{Value, json};
use tink_api::bmc::{BootDevice, PowerState, RpcOptions};

use crate::error::{Error, ErrorKind, shorten};
use crate::golayout::{GoLayout, RFC3339};
use crate::http::Endpoint;
use crate::limit::{Limits, Policy, err};
use crate::target::{RedfishHost, TlsConfig};
use crate::{Bmc, PowerChange, Secret};

const NAME: &str = "rpc";

/// Rufio's default timestamp header.
pub const TIMESTAMP_HEADER: &str = "X-Rufio-Timestamp";
/// Rufio's default signature header (the algorithm is appended: `-256`, `-512`).
pub const SIGNATURE_HEADER: &str = "X-Rufio-Signature";

/// How to reach one RPC consumer.
#[derive(Clone, Debug)]
pub struct RpcConfig {
    /// `spec.connection.host`: sent in every payload as `host`.
    pub host: String,
    /// The Machine's RPC options (`consumerURL`, headers, signature format).
    pub options: RpcOptions,
    /// The HMAC secrets by algorithm (`sha256`, `sha512`), read from the Secrets the options
    /// name.
    pub secrets: BTreeMap<String, Vec<Secret>>,
    /// Certificate checking for an https consumer.
    pub tls: TlsConfig,
}

/// A machine controlled through an RPC consumer.
pub struct Rpc {
    endpoint: Endpoint,
    path: String,
    url: String,
    host: String,
    method: Method,
    content_type: String,
    static_headers: Vec<(String, String)>,
    timestamp_header: String,
    timestamp_format: GoLayout,
    signature_header: String,
    append_algo: bool,
    prefix_sig: bool,
    included: Vec<String>,
    keys: Vec<(&'static str, Vec<hmac::Key>)>,
    next_id: AtomicI64,
    policy: Policy,
    limits: Limits,
}

impl std::fmt::Debug for Rpc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rpc")
            .field("consumer", &self.url)
            .field("host", &self.host)
            .field("keys", &"***")
            .finish_non_exhaustive()
    }
}

fn lower_or(s: &str, default: &str) -> String {
    if s.is_empty() {
        default.into()
    } else {
        s.into()
    }
}

impl Rpc {
    /// A client for `config`.
    pub fn new(config: RpcConfig, policy: Policy, limits: Limits) -> Result<Self, Error> {
        let o = &config.options;
        let url = o.consumer_url.trim().to_string();
        let cfg = |k: ErrorKind| err(NAME, &url, "configure", k);
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(cfg(ErrorKind::Config(
                "consumerURL must start with http:// or https://".into(),
            )));
        }
        let target = RedfishHost::parse(&url, None).map_err(cfg)?;
        let after_scheme = url.split_once("://").map_or("", |(_, r)| r);
        let path = match after_scheme.find('/') {
            Some(i) => after_scheme[i..].to_string(),
            None => "/".to_string(),
        };
        let tls = if target.tls {
            Some(
                limits
                    .known
                    .tls(config.tls.insecure, config.tls.ca_pem.as_deref())
                    .map_err(cfg)?,
            )
        } else {
            None
        };
        let req = o.request.clone().unwrap_or_default();
        let timestamp_format = GoLayout::parse(&lower_or(req.timestamp_format.trim(), RFC3339))
            .map_err(|e| cfg(ErrorKind::Config(format!("request.timestampFormat: {e}"))))?;
        let sample = timestamp_format.format(jiff::Timestamp::now());
        if http::HeaderValue::from_str(&sample).is_err() {
            return Err(cfg(ErrorKind::Config(format!(
                "request.timestampFormat {:?} gives {sample:?}, not a valid HTTP header value",
                req.timestamp_format
            ))));
        }
        if o.experimental
            .as_ref()
            .is_some_and(|e| !e.custom_request_payload.is_empty() || !e.dot_path.is_empty())
        {
            return Err(cfg(ErrorKind::Config(
                "experimental customRequestPayload/dotPath are not supported".into(),
            )));
        }
        let method = Method::from_bytes(
            lower_or(&req.http_method, "POST")
                .to_ascii_uppercase()
                .as_bytes(),
        )
        .map_err(|e| cfg(ErrorKind::Config(format!("httpMethod: {e}"))))?;
        let sig = o.signature.clone().unwrap_or_default();
        let timestamp_header = lower_or(&req.timestamp_header, TIMESTAMP_HEADER);
        let included = if sig.included_payload_headers.is_empty() {
            vec![timestamp_header.clone()]
        } else {
            let mut v: Vec<String> = Vec::new();
            for h in &sig.included_payload_headers {
                if !v.iter().any(|x| x.eq_ignore_ascii_case(h)) {
                    v.push(h.clone());
                }
            }
            v
        };
        let mut keys: Vec<(&'static str, Vec<hmac::Key>)> = Vec::new();
        for (algo, secrets) in &config.secrets {
            let (name, alg) = match algo.to_ascii_lowercase().as_str() {
                "sha256" | "256" => ("sha256", hmac::HMAC_SHA256),
                "sha512" | "512" => ("sha512", hmac::HMAC_SHA512),
                other => {
                    return Err(cfg(ErrorKind::Config(format!(
                        "HMAC algorithm {other:?}: sha256 or sha512"
                    ))));
                }
            };
            let ks = secrets
                .iter()
                .map(|s| hmac::Key::new(alg, s.expose().as_bytes()));
            match keys.iter_mut().find(|(n, _)| *n == name) {
                Some((_, v)) => v.extend(ks),
                None => keys.push((name, ks.collect())),
            }
        }
        Ok(Self {
            endpoint: Endpoint {
                authority: target.authority(),
                host: target.host,
                port: target.port,
                tls,
                allowed: policy.allowed_networks.clone().into(),
            },
            path,
            url,
            host: config.host,
            method,
            content_type: lower_or(&req.http_content_type, "application/json"),
            static_headers: req
                .static_headers
                .iter()
                .map(|(k, v)| (k.clone(), v.join(",")))
                .collect(),
            timestamp_header,
            timestamp_format,
            signature_header: lower_or(&sig.header_name, SIGNATURE_HEADER),
            append_algo: !sig.append_algo_to_header_disabled,
            prefix_sig: !o.hmac.as_ref().is_some_and(|h| h.prefix_sig_disabled),
            included,
            keys,
            next_id: AtomicI64::new(jiff::Timestamp::now().as_nanosecond() as i64),
            policy,
            limits,
        })
    }

    fn fail(&self, op: &str, kind: ErrorKind) -> Error {
        err(NAME, &self.url, op, kind)
    }

    /// The signature headers of `body` sent with `headers`: `(name, comma-joined values)`.
    pub fn sign(&self, body: &[u8], headers: &[(String, String)]) -> Vec<(String, String)> {
        let mut payload = body.to_vec();
        for h in &self.included {
            if let Some((_, v)) = headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(h)) {
                payload.extend_from_slice(v.as_bytes());
            }
        }
        self.keys
            .iter()
            .map(|(algo, keys)| {
                let sigs: Vec<String> = keys
                    .iter()
                    .map(|k| {
                        let hex = hex(hmac::sign(k, &payload).as_ref());
                        if self.prefix_sig {
                            format!("{algo}={hex}")
                        } else {
                            hex
                        }
                    })
                    .collect();
                let name = if self.append_algo {
                    format!("{}-{}", self.signature_header, &algo[3..])
                } else {
                    self.signature_header.clone()
                };
                (name, sigs.join(","))
            })
            .collect()
    }

    async fn attempt(
        &self,
        op: &str,
        method: &str,
        params: Option<&Value>,
    ) -> Result<Value, ErrorKind> {
        let _permit = self.limits.acquire(&self.url).await;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut payload = json!({"id": id, "host": self.host, "method": method});
        if let Some(p) = params {
            payload["params"] = p.clone();
        }
        let body = payload.to_string().into_bytes();
        let mut headers: Vec<(String, String)> = self.static_headers.clone();
        headers.push(("content-type".into(), self.content_type.clone()));
        headers.push((
            self.timestamp_header.clone(),
            self.timestamp_format.format(jiff::Timestamp::now()),
        ));
        let sigs = self.sign(&body, &headers);
        headers.extend(sigs);
        let refs: Vec<(&str, String)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        let r = self
            .endpoint
            .send(
                self.method.clone(),
                &self.path,
                &refs,
                Some(body),
                self.policy.timeout,
            )
            .await?;
        let parsed: Result<Value, _> = serde_json::from_slice(&r.body);
        let error_of = |v: &Value| -> Option<String> {
            let e = &v["error"];
            let code = e["code"].as_i64().unwrap_or(0);
            (code != 0).then(|| format!("code {code}: {}", e["message"].as_str().unwrap_or("")))
        };
        if r.status != http::StatusCode::OK {
            return Err(match r.status.as_u16() {
                401 | 403 => ErrorKind::Unauthorized(format!("HTTP {}", r.status.as_u16())),
                s => ErrorKind::Status {
                    status: s,
                    message: parsed
                        .ok()
                        .as_ref()
                        .and_then(error_of)
                        .unwrap_or_else(|| r.message()),
                },
            });
        }
        let v = parsed.map_err(|e| ErrorKind::Protocol(format!("{op}: response: {e}")))?;
        if let Some(e) = error_of(&v) {
            return Err(ErrorKind::Protocol(format!(
                "the consumer refused: {}",
                shorten(&e, 300)
            )));
        }
        Ok(v)
    }

    async fn call(
        &self,
        op: &str,
        method: &str,
        params: Option<Value>,
        idempotent: bool,
    ) -> Result<Value, Error> {
        self.policy
            .run(idempotent, || async {
                self.attempt(op, method, params.as_ref())
                    .await
                    .map_err(|k| self.fail(op, k))
            })
            .await
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[async_trait::async_trait]
impl Bmc for Rpc {
    fn provider(&self) -> &'static str {
        NAME
    }

    async fn power_state(&self) -> Result<PowerState, Error> {
        let op = "power state";
        let v = self.call(op, "getPowerState", None, true).await?;
        match v["result"].as_str().map(str::to_ascii_lowercase).as_deref() {
            Some("on") => Ok(PowerState::On),
            Some("off") => Ok(PowerState::Off),
            _ => Err(self.fail(
                op,
                ErrorKind::Protocol(format!("result {} is not \"on\" or \"off\"", v["result"])),
            )),
        }
    }

    async fn set_power(&self, change: PowerChange) -> Result<(), Error> {
        let op = format!("power {}", change.as_str());
        self.call(
            &op,
            "setPowerState",
            Some(json!({"state": change.as_str()})),
            change.is_idempotent(),
        )
        .await
        .map(drop)
    }

    async fn set_boot_once(&self, device: BootDevice, efi_boot: bool) -> Result<(), Error> {
        let op = format!("boot once {device}");
        self.call(
            &op,
            "setBootDevice",
            Some(json!({"device": device.as_str(), "persistent": false, "efiBoot": efi_boot})),
            true,
        )
        .await
        .map(drop)
    }

    async fn insert_media(&self, url: &str) -> Result<(), Error> {
        self.call(
            "insert media",
            "setVirtualMedia",
            Some(json!({"mediaUrl": url, "kind": "CD"})),
            true,
        )
        .await
        .map(drop)
    }

    async fn eject_media(&self) -> Result<(), Error> {
        self.call(
            "eject media",
            "setVirtualMedia",
            Some(json!({"mediaUrl": "", "kind": "CD"})),
            true,
        )
        .await
        .map(drop)
    }
}
