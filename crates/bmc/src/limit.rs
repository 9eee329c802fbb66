//! Timeouts, retries with back-off, and bounded concurrency per BMC and overall.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ipnet::IpNet;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{Error, ErrorKind};

/// How each call is timed and retried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// The limit of one attempt, connection and TLS included.
    pub timeout: Duration,
    /// Attempts in all (1 = no retry).
    pub attempts: u32,
    /// The wait after the first failed attempt; doubled after each further one.
    pub backoff: Duration,
    /// The longest wait between attempts.
    pub max_backoff: Duration,
    /// The networks a provider may connect to (BMCs, RPC consumers); any when empty. A host
    /// is resolved when a connection is made and only its addresses inside these networks are
    /// used: a host with none is refused with [`ErrorKind::NotAllowed`].
    pub allowed_networks: Vec<IpNet>,
}

impl Default for Policy {
    /// 10 s per attempt, 3 attempts, 500 ms back-off doubling to at most 5 s; any network.
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            attempts: 3,
            backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(5),
            allowed_networks: Vec::new(),
        }
    }
}

impl Policy {
    /// The wait before attempt `n` (0-based; attempt 0 has none).
    pub fn delay(&self, n: u32) -> Duration {
        if n == 0 {
            return Duration::ZERO;
        }
        let factor = 1u32.checked_shl(n - 1).unwrap_or(u32::MAX);
        self.backoff.saturating_mul(factor).min(self.max_backoff)
    }

    /// Runs `attempt` until it succeeds, fails for good, or the attempts are used up. A
    /// failure is retried when it is transient and, for a non-`idempotent` call, only when
    /// the request never left ([`ErrorKind::never_sent`]).
    pub async fn run<T, F, Fut>(&self, idempotent: bool, mut attempt: F) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let mut n = 0;
        loop {
            tokio::time::sleep(self.delay(n)).await;
            match attempt().await {
                Ok(v) => return Ok(v),
                Err(e) => {
                    n += 1;
                    let retry = e.kind.is_transient() && (idempotent || e.kind.never_sent());
                    if !retry || n >= self.attempts.max(1) {
                        return Err(e);
                    }
                    tracing::debug!(error = %e, attempt = n, "BMC call failed; retrying");
                }
            }
        }
    }
}

/// Concurrency bounds shared by every provider: at most `per_host` calls at once to one BMC
/// and `overall` in all. Cheap to clone.
///
/// Also what providers learned about each BMC and may reuse across calls (see [`Known`]): a
/// provider lives for one reconcile, a BMC for much longer, and each avoidable request to a
/// BMC costs its whole round trip (a slow peer's, often).
#[derive(Clone, Debug)]
pub struct Limits {
    pub(crate) known: Arc<Known>,
    overall: Arc<Semaphore>,
    overall_max: usize,
    per_host: usize,
    hosts: Arc<Mutex<HashMap<String, Arc<Semaphore>>>>,
}

impl Default for Limits {
    /// 2 calls per BMC (BMCs are small computers; many refuse more sessions), 256 overall.
    fn default() -> Self {
        Self::new(2, 256)
    }
}

/// The permits one call holds; released on drop.
#[derive(Debug)]
pub struct Permit {
    _host: OwnedSemaphorePermit,
    _overall: OwnedSemaphorePermit,
}

impl Limits {
    /// `per_host` calls to one BMC, `overall` in all (each at least 1).
    pub fn new(per_host: usize, overall: usize) -> Self {
        Self {
            overall: Arc::new(Semaphore::new(overall.max(1))),
            overall_max: overall.max(1),
            per_host: per_host.max(1),
            hosts: Arc::default(),
            known: Arc::default(),
        }
    }

    /// Waits for a slot for `host` (the per-host one first, so one slow BMC cannot take every
    /// overall slot), then an overall one.
    pub async fn acquire(&self, host: &str) -> Permit {
        let host_sem = {
            let mut hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
            // forget hosts nobody is calling, so the map stays as big as the calls in flight
            if hosts.len() > 1024 {
                hosts.retain(|_, s| Arc::strong_count(s) > 1);
            }
            hosts
                .entry(host.to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_host)))
                .clone()
        };
        // The semaphores are never closed, so acquiring cannot fail.
        let host = match host_sem.acquire_owned().await {
            Ok(p) => p,
            Err(_) => unreachable!("BMC semaphores are never closed"),
        };
        let overall = match self.overall.clone().acquire_owned().await {
            Ok(p) => p,
            Err(_) => unreachable!("BMC semaphores are never closed"),
        };
        Permit {
            _host: host,
            _overall: overall,
        }
    }

    /// Calls in flight overall.
    pub fn in_flight(&self) -> usize {
        self.overall_max
            .saturating_sub(self.overall.available_permits())
    }
}

/// An error of `op` against `host` by `provider`.
/// Entries kept per map of [`Known`] before it is emptied (a bound, not a working size: one
/// entry per BMC of a large site).
const KNOWN_MAX: usize = 65_536;

/// What was learned about BMCs, by base URL: facts of the BMC itself (never of one Machine's
/// credentials), each checked again when the BMC contradicts it.
#[derive(Debug, Default)]
pub(crate) struct Known {
    /// The path of a Redfish system, by (base URL, `systemName`): forgotten when the BMC
    /// answers 404 to it.
    systems: Mutex<HashMap<(String, String), String>>,
    /// Redfish BMCs whose service root names no session service: forgotten when the BMC
    /// refuses basic auth.
    no_sessions: Mutex<HashMap<String, ()>>,
    /// TLS client configurations by (`insecure`, CA bundle): shared so TLS sessions are
    /// resumed across providers (a resumed handshake skips the BMC's signature and key
    /// exchange).
    tls: Mutex<HashMap<TlsKey, Arc<tokio_rustls::rustls::ClientConfig>>>,
}

/// `insecure` and the CA bundle.
type TlsKey = (bool, Option<Vec<u8>>);

fn bounded_insert<K: std::hash::Hash + Eq, V>(map: &Mutex<HashMap<K, V>>, k: K, v: V) {
    let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
    if map.len() >= KNOWN_MAX {
        map.clear();
    }
    map.insert(k, v);
}

impl Known {
    pub fn system(&self, base: &str, name: &str) -> Option<String> {
        let map = self.systems.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&(base.to_string(), name.to_string())).cloned()
    }

    pub fn set_system(&self, base: &str, name: &str, path: &str) {
        bounded_insert(
            &self.systems,
            (base.to_string(), name.to_string()),
            path.to_string(),
        );
    }

    /// Forgets every system path of `base` equal to `path` (a 404 to it).
    pub fn forget_system(&self, base: &str, path: &str) {
        let mut map = self.systems.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|(b, _), p| !(b == base && p == path));
    }

    pub fn no_sessions(&self, base: &str) -> bool {
        let map = self.no_sessions.lock().unwrap_or_else(|p| p.into_inner());
        map.contains_key(base)
    }

    pub fn set_no_sessions(&self, base: &str, none: bool) {
        if none {
            bounded_insert(&self.no_sessions, base.to_string(), ());
        } else {
            let mut map = self.no_sessions.lock().unwrap_or_else(|p| p.into_inner());
            map.remove(base);
        }
    }

    /// The shared TLS configuration for `insecure` and `ca`, made on first use.
    pub fn tls(
        &self,
        insecure: bool,
        ca: Option<&[u8]>,
    ) -> Result<Arc<tokio_rustls::rustls::ClientConfig>, ErrorKind> {
        let key = (insecure, ca.map(<[u8]>::to_vec));
        let mut map = self.tls.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = map.get(&key) {
            return Ok(c.clone());
        }
        let config = Arc::new(crate::http::tls_config(insecure, ca)?);
        if map.len() >= 64 {
            map.clear();
        }
        map.insert(key, config.clone());
        Ok(config)
    }
}

pub(crate) fn err(
    provider: &'static str,
    host: &str,
    op: impl Into<String>,
    kind: ErrorKind,
) -> Error {
    Error {
        provider,
        host: host.to_string(),
        op: op.into(),
        kind,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn fail(kind: ErrorKind) -> Error {
        err("test", "h", "op", kind)
    }

    #[test]
    fn back_off_doubles_up_to_the_cap() {
        let p = Policy::default();
        let d: Vec<_> = (0..6).map(|n| p.delay(n).as_millis()).collect();
        assert_eq!(d, [0, 500, 1000, 2000, 4000, 5000]);
        assert_eq!(p.delay(40), p.max_backoff);
    }

    #[tokio::test]
    async fn only_safe_failures_are_retried() {
        let p = Policy {
            backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(2),
            ..Policy::default()
        };
        for (idempotent, kind, calls) in [
            (true, ErrorKind::Timeout(Duration::from_secs(1)), 3),
            (false, ErrorKind::Timeout(Duration::from_secs(1)), 1),
            (false, ErrorKind::Connect("refused".into()), 3),
            (true, ErrorKind::Unauthorized("401".into()), 1),
            (
                true,
                ErrorKind::Status {
                    status: 503,
                    message: String::new(),
                },
                3,
            ),
            (
                true,
                ErrorKind::Status {
                    status: 400,
                    message: String::new(),
                },
                1,
            ),
        ] {
            let n = AtomicU32::new(0);
            let what = format!("{kind:?}");
            let r: Result<(), Error> = p
                .run(idempotent, || {
                    n.fetch_add(1, Ordering::SeqCst);
                    let kind = match &kind {
                        ErrorKind::Timeout(d) => ErrorKind::Timeout(*d),
                        ErrorKind::Connect(s) => ErrorKind::Connect(s.clone()),
                        ErrorKind::Unauthorized(s) => ErrorKind::Unauthorized(s.clone()),
                        ErrorKind::Status { status, .. } => ErrorKind::Status {
                            status: *status,
                            message: String::new(),
                        },
                        _ => unreachable!(),
                    };
                    async move { Err(fail(kind)) }
                })
                .await;
            assert!(r.is_err());
            assert_eq!(n.load(Ordering::SeqCst), calls, "{idempotent} {what}");
        }
        let n = AtomicU32::new(0);
        let r = p
            .run(true, || {
                let k = n.fetch_add(1, Ordering::SeqCst);
                async move {
                    if k == 0 {
                        Err(fail(ErrorKind::Connect("refused".into())))
                    } else {
                        Ok(k)
                    }
                }
            })
            .await;
        assert_eq!(r.ok(), Some(1));
    }

    #[tokio::test]
    async fn per_host_and_overall_bounds_hold() {
        let limits = Limits::new(1, 2);
        let a = limits.acquire("a").await;
        // a second call to the same host waits
        let second_a = tokio::time::timeout(Duration::from_millis(50), limits.acquire("a")).await;
        assert!(second_a.is_err(), "per-host bound");
        let b = limits.acquire("b").await;
        assert_eq!(limits.in_flight(), 2);
        // the overall bound: a third host waits too
        let c = tokio::time::timeout(Duration::from_millis(50), limits.acquire("c")).await;
        assert!(c.is_err(), "overall bound");
        drop(a);
        let again = tokio::time::timeout(Duration::from_millis(50), limits.acquire("a")).await;
        assert!(again.is_ok());
        drop(b);
    }
}
