//! The Redfish provider.
//!
//! Power: `ComputerSystem.Reset` (`On`, `ForceOff`, `GracefulShutdown`; cycle is `PowerCycle`
//! where the BMC lists it, else `ForceRestart`; an off machine asked to cycle or reset is
//! powered on). The state is read first, so on/off of a machine already there sends nothing.
//!
//! Boot: one PATCH of `Boot` (`BootSourceOverrideTarget`, `BootSourceOverrideEnabled: Once`,
//! `BootSourceOverrideMode`), then the system is read back: a BMC that answered 2xx but
//! reports another target (or legacy mode when UEFI was asked) is an
//! [`ErrorKind::BootOverrideDropped`]. `BootSourceOverrideEnabled` is not compared: many BMCs,
//! and sushy-tools, report `Continuous` whatever was asked; only `Disabled` counts as dropped.
//!
//! Authentication: basic on every call with `useBasicAuth`; else a session
//! (`POST` to the service root's `Links.Sessions`, then `X-Auth-Token`), opened on first use
//! and again once when the BMC answers 401 to an expired token. A BMC whose service root names
//! no session service (sushy-tools is one), or that answers 404/405/501 to the login, is
//! spoken to with basic auth.
//!
//! A session this provider opened is closed (`DELETE` of the session's `@odata.id`, or of the
//! login answer's `Location`) by [`Bmc::close`], or in the background when the value is
//! dropped inside a Tokio runtime: BMCs allow few sessions at once, and one left open holds a
//! slot until the BMC's own timeout (often 30 minutes). A session that expired and was renewed
//! is not deleted (the BMC already dropped it).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use base64::Engine;
use http::{Method, StatusCode};
use serde_json::{Value, json};
use tink_api::bmc::{BootDevice, PowerState};
use tokio::sync::Mutex;

use crate::error::{Error, ErrorKind};
use crate::http::{Endpoint, Response};
use crate::limit::{Limits, Policy, err};
use crate::target::{RedfishHost, TlsConfig};
use crate::{Bmc, Credentials, PowerChange};

const NAME: &str = "redfish";
const SESSIONS: &str = "/redfish/v1/SessionService/Sessions";

/// How to reach one Redfish BMC.
#[derive(Clone, Debug)]
pub struct RedfishConfig {
    /// `spec.connection.host`.
    pub host: String,
    /// `providerOptions.redfish.port`.
    pub port: Option<i32>,
    /// The BMC's credentials.
    pub credentials: Credentials,
    /// Certificate checking.
    pub tls: TlsConfig,
    /// Basic auth on every call instead of a session.
    pub use_basic_auth: bool,
    /// The system to manage (its `Id`, `Name` or the last segment of its path); the first
    /// system when empty.
    pub system_name: String,
}

/// A session the provider opened.
struct Session {
    /// `X-Auth-Token`.
    token: String,
    /// The session resource (a path on the BMC), when the BMC named it.
    path: Option<String>,
}

/// The session resource's path from the login answer: the body's `@odata.id`, else the
/// `Location` header (a path, or a URL whose path is taken: the DELETE goes to this BMC only).
fn session_path(body: &[u8], location: Option<&str>) -> Option<String> {
    let from_body = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["@odata.id"].as_str().map(str::to_string));
    let from_location = location.map(|l| match l.split_once("://") {
        Some((_, rest)) => rest
            .find('/')
            .map_or_else(String::new, |i| rest[i..].to_string()),
        None => l.to_string(),
    });
    from_body
        .or(from_location)
        .filter(|p| p.starts_with("/redfish/") && !p.contains(".."))
}

/// Deletes `session` (one attempt; failures are logged, the BMC expires it in the end).
async fn logout(
    endpoint: &Endpoint,
    limits: &Limits,
    label: &str,
    timeout: Duration,
    session: Session,
) {
    let Some(path) = session.path else {
        tracing::debug!(host = %label, "the BMC named no session resource; left to expire");
        return;
    };
    let _permit = limits.acquire(label).await;
    let headers = [("x-auth-token", session.token)];
    match endpoint
        .send(Method::DELETE, &path, &headers, None, timeout)
        .await
    {
        Ok(r) if r.status.is_success() || r.status == StatusCode::NOT_FOUND => {
            tracing::debug!(host = %label, "Redfish session closed");
        }
        Ok(r) => {
            tracing::debug!(host = %label, status = r.status.as_u16(), "closing the Redfish session failed");
        }
        Err(e) => tracing::debug!(host = %label, error = %e, "closing the Redfish session failed"),
    }
}

/// A Redfish BMC.
pub struct Redfish {
    endpoint: Endpoint,
    label: String,
    credentials: Credentials,
    use_basic_auth: bool,
    no_session_service: AtomicBool,
    session: Mutex<Option<Session>>,
    system_name: String,
    policy: Policy,
    limits: Limits,
}

impl std::fmt::Debug for Redfish {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redfish")
            .field("host", &self.label)
            .field("credentials", &self.credentials)
            .finish_non_exhaustive()
    }
}

fn device_target(d: BootDevice) -> Option<&'static str> {
    match d {
        BootDevice::Pxe => Some("Pxe"),
        BootDevice::Disk => Some("Hdd"),
        BootDevice::Bios => Some("BiosSetup"),
        BootDevice::Cdrom => Some("Cd"),
        BootDevice::Safe => None,
    }
}

impl Redfish {
    /// A client for `config`; nothing is sent until the first call.
    pub fn new(config: RedfishConfig, policy: Policy, limits: Limits) -> Result<Self, Error> {
        let host = RedfishHost::parse(&config.host, config.port)
            .map_err(|k| err(NAME, &config.host, "configure", k))?;
        let label = host.base_url();
        let tls = if host.tls {
            Some(
                limits
                    .known
                    .tls(config.tls.insecure, config.tls.ca_pem.as_deref())
                    .map_err(|k| err(NAME, &label, "configure", k))?,
            )
        } else {
            None
        };
        Ok(Self {
            endpoint: Endpoint {
                authority: host.authority(),
                host: host.host,
                port: host.port,
                tls,
                allowed: policy.allowed_networks.clone().into(),
            },
            label,
            credentials: config.credentials,
            use_basic_auth: config.use_basic_auth,
            no_session_service: AtomicBool::new(false),
            session: Mutex::new(None),
            system_name: config.system_name,
            policy,
            limits,
        })
    }

    fn fail(&self, op: &str, kind: ErrorKind) -> Error {
        err(NAME, &self.label, op, kind)
    }

    fn basic(&self) -> String {
        let raw = format!(
            "{}:{}",
            self.credentials.username,
            self.credentials.password.expose()
        );
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
    }

    fn uses_basic(&self) -> bool {
        self.use_basic_auth
            || self.no_session_service.load(Ordering::Relaxed)
            || self.limits.known.no_sessions(&self.label)
    }

    /// Where sessions are created: the service root's `Links.Sessions` (read without
    /// credentials, as Redfish allows); `None` when the root names none.
    async fn sessions_path(&self) -> Result<Option<String>, ErrorKind> {
        let r = self
            .endpoint
            .send(Method::GET, "/redfish/v1", &[], None, self.policy.timeout)
            .await?;
        if !r.status.is_success() {
            // a root behind authentication: try the standard path
            return Ok(Some(SESSIONS.to_string()));
        }
        let root: Value = serde_json::from_slice(&r.body)
            .map_err(|e| ErrorKind::Protocol(format!("service root: {e}")))?;
        Ok(root["Links"]["Sessions"]["@odata.id"]
            .as_str()
            .map(str::to_string))
    }

    /// Opens a session; `Ok(None)` when the BMC has no session service.
    async fn login(&self) -> Result<Option<Session>, ErrorKind> {
        let Some(sessions) = self.sessions_path().await? else {
            return Ok(None);
        };
        let body = json!({
            "UserName": self.credentials.username,
            "Password": self.credentials.password.expose(),
        });
        let r = self
            .endpoint
            .send(
                Method::POST,
                &sessions,
                &[("content-type", "application/json".into())],
                Some(body.to_string().into_bytes()),
                self.policy.timeout,
            )
            .await?;
        match r.status {
            s if s.is_success() => match r.headers.get("x-auth-token").map(|v| v.to_str()) {
                Some(Ok(t)) if !t.is_empty() => Ok(Some(Session {
                    token: t.to_string(),
                    path: session_path(
                        &r.body,
                        r.headers.get("location").and_then(|v| v.to_str().ok()),
                    ),
                })),
                _ => Err(ErrorKind::Protocol(
                    "session created without an X-Auth-Token header".into(),
                )),
            },
            StatusCode::NOT_FOUND
            | StatusCode::METHOD_NOT_ALLOWED
            | StatusCode::NOT_IMPLEMENTED => Ok(None),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Err(ErrorKind::Unauthorized(
                format!("HTTP {} opening a session", r.status.as_u16()),
            )),
            s => Err(ErrorKind::Status {
                status: s.as_u16(),
                message: r.message(),
            }),
        }
    }

    /// The `Authorization`/`X-Auth-Token` header, opening a session when needed.
    async fn auth_header(&self) -> Result<(&'static str, String), ErrorKind> {
        if self.uses_basic() {
            return Ok(("authorization", self.basic()));
        }
        let mut session = self.session.lock().await;
        if let Some(s) = session.as_ref() {
            return Ok(("x-auth-token", s.token.clone()));
        }
        match self.login().await? {
            Some(s) => {
                let token = s.token.clone();
                *session = Some(s);
                Ok(("x-auth-token", token))
            }
            None => {
                tracing::debug!(host = %self.label, "no Redfish session service; using basic auth");
                self.no_session_service.store(true, Ordering::Relaxed);
                self.limits.known.set_no_sessions(&self.label, true);
                Ok(("authorization", self.basic()))
            }
        }
    }

    async fn attempt(
        &self,
        method: &Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Response, ErrorKind> {
        let _permit = self.limits.acquire(&self.label).await;
        let mut renewed = false;
        loop {
            let auth = self.auth_header().await?;
            let mut headers = vec![(auth.0, auth.1)];
            if body.is_some() {
                headers.push(("content-type", "application/json".into()));
            }
            let r = self
                .endpoint
                .send(
                    method.clone(),
                    path,
                    &headers,
                    body.map(|b| b.to_string().into_bytes()),
                    self.policy.timeout,
                )
                .await?;
            if r.status == StatusCode::UNAUTHORIZED && !self.uses_basic() && !renewed {
                // an expired session: open a new one, once
                *self.session.lock().await = None;
                renewed = true;
                continue;
            }
            if r.status == StatusCode::UNAUTHORIZED
                && !self.use_basic_auth
                && !self.no_session_service.load(Ordering::Relaxed)
                && self.limits.known.no_sessions(&self.label)
            {
                // basic auth only because an earlier provider found no session service: the
                // BMC may have one now; the next provider looks again
                self.limits.known.set_no_sessions(&self.label, false);
            }
            if r.status == StatusCode::NOT_FOUND {
                // a system path learned earlier that the BMC no longer serves
                self.limits.known.forget_system(&self.label, path);
            }
            return match r.status {
                s if s.is_success() => Ok(r),
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Err(ErrorKind::Unauthorized(
                    format!("HTTP {}", r.status.as_u16()),
                )),
                s => Err(ErrorKind::Status {
                    status: s.as_u16(),
                    message: r.message(),
                }),
            };
        }
    }

    async fn call(
        &self,
        op: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
        idempotent: bool,
    ) -> Result<Response, Error> {
        self.policy
            .run(idempotent, || async {
                self.attempt(&method, path, body.as_ref())
                    .await
                    .map_err(|k| self.fail(op, k))
            })
            .await
    }

    async fn get(&self, op: &str, path: &str) -> Result<Value, Error> {
        let r = self.call(op, Method::GET, path, None, true).await?;
        serde_json::from_slice(&r.body)
            .map_err(|e| self.fail(op, ErrorKind::Protocol(format!("GET {path}: {e}"))))
    }

    /// The managed system's path: the one learned earlier for this BMC and `systemName`, else
    /// found (see [`Self::find_system`]).
    async fn system(&self) -> Result<String, Error> {
        if let Some(path) = self.limits.known.system(&self.label, &self.system_name) {
            return Ok(path);
        }
        Ok(self.find_system("find system").await?.0)
    }

    /// Finds the managed system: its path and, when it was read on the way, its document.
    ///
    /// A `systemName` that is a plain path segment is first tried as
    /// `/redfish/v1/Systems/<systemName>` (what the collection lists on every BMC whose
    /// system `Id` it is): one request, whose answer is also the system's state. Else, or on
    /// 404, the `Systems` collection is read and matched by path, `Id` or `Name`. The path
    /// found is remembered for this BMC (forgotten on a 404 to it).
    async fn find_system(&self, op: &str) -> Result<(String, Option<Value>), Error> {
        let name = self.system_name.as_str();
        let plain = !name.is_empty()
            && name != "."
            && name != ".."
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if plain {
            let path = format!("/redfish/v1/Systems/{name}");
            match self.get(op, &path).await {
                Ok(sys)
                    if sys["Id"] == name
                        || sys["@odata.id"].as_str().map(|p| p.trim_end_matches('/'))
                            == Some(path.as_str()) =>
                {
                    self.limits.known.set_system(&self.label, name, &path);
                    return Ok((path, Some(sys)));
                }
                Ok(_) => {}
                Err(e) if matches!(e.kind, ErrorKind::Status { status: 404, .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let systems = self.get(op, "/redfish/v1/Systems").await?;
        let members = links(&systems["Members"]);
        if members.is_empty() {
            return Err(self.fail(op, ErrorKind::Protocol("no systems".into())));
        }
        let mut found = None;
        if name.is_empty() {
            found = Some((members[0].clone(), None));
        } else {
            for m in &members {
                if m.rsplit('/').next() == Some(name) {
                    found = Some((m.clone(), None));
                    break;
                }
                let s = self.get(op, m).await?;
                if s["Name"] == name || s["Id"] == name {
                    found = Some((m.clone(), Some(s)));
                    break;
                }
            }
        }
        let Some((path, sys)) = found else {
            return Err(self.fail(op, ErrorKind::Config(format!("no system named {name:?}"))));
        };
        self.limits.known.set_system(&self.label, name, &path);
        Ok((path, sys))
    }

    /// The system's document: one GET of the path learned earlier; found again when the BMC
    /// answers 404 to it.
    async fn read_system(&self, op: &str) -> Result<(String, Value), Error> {
        if let Some(path) = self.limits.known.system(&self.label, &self.system_name) {
            match self.get(op, &path).await {
                Ok(sys) => return Ok((path, sys)),
                // forgotten by `attempt`; found again below
                Err(e) if matches!(e.kind, ErrorKind::Status { status: 404, .. }) => {}
                Err(e) => return Err(e),
            }
        }
        match self.find_system(op).await? {
            (path, Some(sys)) => Ok((path, sys)),
            (path, None) => {
                let sys = self.get(op, &path).await?;
                Ok((path, sys))
            }
        }
    }

    async fn read_power(&self, op: &str) -> Result<(PowerState, Value), Error> {
        let (_, sys) = self.read_system(op).await?;
        let state = match sys["PowerState"].as_str() {
            Some("On") => PowerState::On,
            Some("Off") => PowerState::Off,
            _ => PowerState::Unknown,
        };
        Ok((state, sys))
    }

    /// The CD-capable virtual media device's path: under the system, else its manager.
    async fn cd_device(&self, op: &str) -> Result<String, Error> {
        let (_, sys) = self.read_system(op).await?;
        let collection = match sys["VirtualMedia"]["@odata.id"].as_str() {
            Some(c) => c.to_string(),
            None => {
                let manager = links(&sys["Links"]["ManagedBy"]).into_iter().next();
                let Some(manager) = manager else {
                    return Err(self.fail(op, ErrorKind::Unsupported("no virtual media".into())));
                };
                let m = self.get(op, &manager).await?;
                m["VirtualMedia"]["@odata.id"]
                    .as_str()
                    .ok_or_else(|| {
                        self.fail(op, ErrorKind::Unsupported("no virtual media".into()))
                    })?
                    .to_string()
            }
        };
        let members = self.get(op, &collection).await?;
        for m in links(&members["Members"]) {
            let dev = self.get(op, &m).await?;
            let cd = dev["MediaTypes"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t == "CD" || t == "DVD"));
            if cd {
                return Ok(m);
            }
        }
        Err(self.fail(
            op,
            ErrorKind::Unsupported("no CD virtual media device".into()),
        ))
    }

    /// The boot override the BMC reports: `(BootSourceOverrideTarget, BootSourceOverrideMode)`.
    pub async fn boot_override(&self) -> Result<(String, Option<String>), Error> {
        let op = "read boot override";
        let (_, sys) = self.read_system(op).await?;
        let boot = &sys["Boot"];
        Ok((
            boot["BootSourceOverrideTarget"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            boot["BootSourceOverrideMode"].as_str().map(str::to_string),
        ))
    }

    /// The virtual CD's image and whether it is inserted.
    pub async fn media(&self) -> Result<(String, bool), Error> {
        let op = "read media";
        let dev = self.cd_device(op).await?;
        let d = self.get(op, &dev).await?;
        Ok((
            d["Image"].as_str().unwrap_or_default().to_string(),
            d["Inserted"] == true,
        ))
    }

    async fn media_action(
        &self,
        op: &str,
        dev: &str,
        action: &str,
        body: Value,
    ) -> Result<(), Error> {
        let d = self.get(op, dev).await?;
        let target = d["Actions"][format!("#VirtualMedia.{action}")]["target"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("{dev}/Actions/VirtualMedia.{action}"));
        self.call(op, Method::POST, &target, Some(body), true)
            .await?;
        Ok(())
    }
}

/// The `@odata.id`s of a list of links.
fn links(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["@odata.id"].as_str().map(str::to_string))
        .collect()
}

impl Drop for Redfish {
    /// Closes an open session in the background (see the module docs).
    fn drop(&mut self) {
        let Some(session) = self.session.get_mut().take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(host = %self.label, "dropped outside a runtime; the Redfish session is left to expire");
            return;
        };
        let endpoint = self.endpoint.clone();
        let limits = self.limits.clone();
        let label = self.label.clone();
        let timeout = self.policy.timeout;
        runtime.spawn(async move { logout(&endpoint, &limits, &label, timeout, session).await });
    }
}

#[async_trait::async_trait]
impl Bmc for Redfish {
    fn provider(&self) -> &'static str {
        NAME
    }

    async fn close(&self) {
        let session = self.session.lock().await.take();
        if let Some(session) = session {
            logout(
                &self.endpoint,
                &self.limits,
                &self.label,
                self.policy.timeout,
                session,
            )
            .await;
        }
    }

    async fn power_state(&self) -> Result<PowerState, Error> {
        Ok(self.read_power("power state").await?.0)
    }

    async fn set_power(&self, change: PowerChange) -> Result<(), Error> {
        let op = format!("power {}", change.as_str());
        let (state, sys) = self.read_power(&op).await?;
        let allowed = |t: &str| {
            sys["Actions"]["#ComputerSystem.Reset"]["ResetType@Redfish.AllowableValues"]
                .as_array()
                .is_some_and(|a| a.iter().any(|v| v == t))
        };
        let reset_type = match (change, state) {
            (PowerChange::On, PowerState::On)
            | (PowerChange::Off | PowerChange::Soft, PowerState::Off) => {
                return Ok(());
            }
            (PowerChange::On, _) => "On",
            (PowerChange::Off, _) => "ForceOff",
            (PowerChange::Soft, _) => "GracefulShutdown",
            (PowerChange::Cycle | PowerChange::Reset, PowerState::Off) => "On",
            (PowerChange::Cycle, _) if allowed("PowerCycle") => "PowerCycle",
            (PowerChange::Cycle | PowerChange::Reset, _) => "ForceRestart",
        };
        let system = self.system().await?;
        let target = sys["Actions"]["#ComputerSystem.Reset"]["target"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("{system}/Actions/ComputerSystem.Reset"));
        self.call(
            &op,
            Method::POST,
            &target,
            Some(json!({ "ResetType": reset_type })),
            change.is_idempotent(),
        )
        .await?;
        Ok(())
    }

    async fn set_boot_once(&self, device: BootDevice, efi_boot: bool) -> Result<(), Error> {
        let op = format!("boot once {device}");
        let target = device_target(device).ok_or_else(|| {
            self.fail(&op, ErrorKind::Unsupported(format!("boot device {device}")))
        })?;
        let mode = if efi_boot { "UEFI" } else { "Legacy" };
        let system = self.system().await?;
        let patch = json!({"Boot": {
            "BootSourceOverrideTarget": target,
            "BootSourceOverrideEnabled": "Once",
            "BootSourceOverrideMode": mode,
        }});
        self.call(&op, Method::PATCH, &system, Some(patch), true)
            .await?;
        let sys = self.get(&op, &system).await?;
        let boot = &sys["Boot"];
        let reported_target = boot["BootSourceOverrideTarget"].as_str().unwrap_or("none");
        let reported_mode = boot["BootSourceOverrideMode"].as_str();
        let enabled = boot["BootSourceOverrideEnabled"].as_str();
        let dropped = !reported_target.eq_ignore_ascii_case(target)
            || enabled == Some("Disabled")
            || (efi_boot && reported_mode.is_some_and(|m| m != "UEFI"));
        if dropped {
            return Err(self.fail(
                &op,
                ErrorKind::BootOverrideDropped {
                    wanted: format!("{target} ({mode}, Once)"),
                    reported: format!(
                        "{reported_target} ({}, {})",
                        reported_mode.unwrap_or("no mode"),
                        enabled.unwrap_or("no state")
                    ),
                },
            ));
        }
        Ok(())
    }

    async fn insert_media(&self, url: &str) -> Result<(), Error> {
        let op = "insert media";
        let dev = self.cd_device(op).await?;
        let d = self.get(op, &dev).await?;
        if d["Inserted"] == true || d["Image"].as_str().is_some_and(|i| !i.is_empty()) {
            self.media_action(op, &dev, "EjectMedia", json!({})).await?;
        }
        self.media_action(
            op,
            &dev,
            "InsertMedia",
            json!({"Image": url, "Inserted": true, "WriteProtected": true}),
        )
        .await?;
        let d = self.get(op, &dev).await?;
        if d["Image"] != url || d["Inserted"] == false {
            return Err(self.fail(
                op,
                ErrorKind::Protocol(format!(
                    "the BMC accepted the media but reports image {} inserted {}",
                    d["Image"], d["Inserted"]
                )),
            ));
        }
        Ok(())
    }

    async fn eject_media(&self) -> Result<(), Error> {
        let op = "eject media";
        let dev = self.cd_device(op).await?;
        let d = self.get(op, &dev).await?;
        if d["Inserted"] != true && d["Image"].as_str().is_none_or(str::is_empty) {
            return Ok(());
        }
        self.media_action(op, &dev, "EjectMedia", json!({})).await?;
        let d = self.get(op, &dev).await?;
        if d["Inserted"] == true {
            return Err(self.fail(
                op,
                ErrorKind::Protocol("the BMC accepted the eject but still reports media".into()),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a provider learned is reused by the next, and a system path the BMC answers 404
    /// to is found again (against sushy-tools, which names no session service).
    #[tokio::test]
    async fn learned_paths_are_reused_and_found_again_after_a_404() {
        use tink_testkit::bmc::{BMC_PASSWORD, BMC_USER, Sushy};
        let sushy = Sushy::builder()
            .systems(["node-1"])
            .start()
            .await
            .expect("sushy-emulator");
        let limits = Limits::default();
        let label = RedfishHost::parse(&sushy.host(), None)
            .expect("host")
            .base_url();
        let client = || {
            Redfish::new(
                RedfishConfig {
                    host: sushy.host(),
                    port: None,
                    credentials: Credentials::new(BMC_USER, BMC_PASSWORD),
                    tls: TlsConfig {
                        insecure: false,
                        ca_pem: Some(sushy.cert_pem().to_vec()),
                    },
                    use_basic_auth: false,
                    system_name: "node-1".into(),
                },
                Policy::default(),
                limits.clone(),
            )
            .expect("client")
        };
        limits
            .known
            .set_system(&label, "node-1", "/redfish/v1/Systems/gone");
        assert_eq!(
            client().power_state().await.expect("status"),
            PowerState::Off
        );
        assert_eq!(
            limits.known.system(&label, "node-1").as_deref(),
            Some("/redfish/v1/Systems/node-1")
        );
        assert!(limits.known.no_sessions(&label));
        // A wrong password is refused even with what was learned (basic auth is still sent).
        let mut bad = client();
        bad.credentials = Credentials::new(BMC_USER, "wrong");
        let e = bad.power_state().await.expect_err("refused");
        assert!(matches!(e.kind, ErrorKind::Unauthorized(_)), "{e}");
        assert_eq!(
            client().power_state().await.expect("status"),
            PowerState::Off
        );
    }

    #[test]
    fn the_session_resource_is_read_from_the_login_answer() {
        let s = "/redfish/v1/SessionService/Sessions/7";
        let body = format!(r#"{{"@odata.id": "{s}", "Id": "7"}}"#);
        assert_eq!(session_path(body.as_bytes(), None).as_deref(), Some(s));
        // the body wins over Location
        assert_eq!(
            session_path(
                body.as_bytes(),
                Some("/redfish/v1/SessionService/Sessions/8")
            )
            .as_deref(),
            Some(s)
        );
        assert_eq!(session_path(b"", Some(s)).as_deref(), Some(s));
        // an absolute Location: only its path, sent to this BMC
        assert_eq!(
            session_path(b"{}", Some(&format!("https://elsewhere.example:8443{s}"))).as_deref(),
            Some(s)
        );
        for bad in [
            "https://elsewhere.example",
            "/other/path",
            "/redfish/v1/../../etc",
            "",
        ] {
            assert_eq!(session_path(b"{}", Some(bad)), None, "{bad}");
        }
        assert_eq!(session_path(b"{}", None), None);
    }
}
