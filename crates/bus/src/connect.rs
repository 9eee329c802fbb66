//! How a service connects to the bus, once: the connection options every service uses (its
//! name, reconnecting for ever, a callback for connection events, the credentials and TLS of
//! [`NatsAuth`]) in [`ServiceConnection`], and the loop that waits until the streams and
//! buckets are in place, [`wait_for_streams`] (the controller creates or updates them, every
//! other service only finds them). The server and the controller each wrote both out, the
//! loop once at start and again after every reconnection.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::{Client, ConnectOptions, Event, jetstream};

use crate::{Bus, BusConfig, BusError, NatsAuth, NatsConnectError};

/// How often a service pings its NATS server. A node cut off by the network neither answers
/// nor resets the connection; the client gives it up after two unanswered pings and reconnects
/// to another node, so this bounds how long a service stays on an isolated node (async-nats's
/// default of a minute kept it there two minutes: found on the 3-node cluster, issue 32).
pub const PING_INTERVAL: Duration = Duration::from_secs(5);

/// A service's NATS connection settings: see the [module documentation](self).
#[derive(Clone)]
pub struct ServiceConnection {
    url: String,
    auth: NatsAuth,
    name: String,
    on_event: Option<Arc<dyn Fn(Event) + Send + Sync>>,
}

impl std::fmt::Debug for ServiceConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceConnection")
            .field("url", &self.url)
            .field("name", &self.name)
            .field("on_event", &self.on_event.is_some())
            .finish_non_exhaustive()
    }
}

impl ServiceConnection {
    /// A connection to `url` (comma separated servers) as `auth`, named `name` in the NATS
    /// server's connection list.
    pub fn new(url: impl Into<String>, auth: &NatsAuth, name: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            auth: auth.clone(),
            name: name.into(),
            on_event: None,
        }
    }

    /// Calls `on_event` with every connection event (connected, disconnected, ...). It runs on
    /// the client's event path: it must not block (send to a bounded channel with `try_send`,
    /// bump a `watch`).
    pub fn on_event(mut self, on_event: impl Fn(Event) + Send + Sync + 'static) -> Self {
        self.on_event = Some(Arc::new(on_event));
        self
    }

    /// The options of this connection, without the credentials ([`NatsAuth::apply`] adds them).
    pub fn options(&self) -> ConnectOptions {
        let options = ConnectOptions::new()
            .name(self.name.clone())
            .ping_interval(PING_INTERVAL)
            .max_reconnects(None);
        match &self.on_event {
            Some(on_event) => {
                let on_event = on_event.clone();
                options.event_callback(move |event| {
                    on_event(event);
                    std::future::ready(())
                })
            }
            None => options,
        }
    }

    /// Connects ([`crate::connect`]: a refusal is an error at once, an unreachable server is
    /// waited for); the client then reconnects for as long as it takes.
    pub async fn connect(&self) -> Result<Client, NatsConnectError> {
        crate::connect(&self.url, &self.auth, || self.options()).await
    }

    /// Connects, then waits for the streams and buckets ([`wait_for_streams`]). `None` when
    /// `until` finished first.
    pub async fn connect_and_wait_for_streams<Fut>(
        &self,
        config: &BusConfig,
        setup: StreamSetup,
        retry: Duration,
        until: impl Future<Output = ()>,
        on_failure: impl FnMut(BusError, u32) -> Fut,
    ) -> Result<Option<(Client, Bus)>, NatsConnectError>
    where
        Fut: Future<Output = ()>,
    {
        let client = self.connect().await?;
        let jetstream = jetstream::new(client.clone());
        Ok(
            wait_for_streams(&jetstream, config, setup, retry, until, on_failure)
                .await
                .map(|bus| (client, bus)),
        )
    }
}

/// What a service does about the bus's streams and buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamSetup {
    /// Create or update them ([`crate::ensure_streams`]): the controller, whose NATS user may.
    Ensure,
    /// Only find and check them ([`crate::verify_streams`]): every other service.
    Verify,
}

/// Sets the streams and buckets up (`setup`), retrying every `retry` until it succeeds or
/// `until` finishes (then `None`). `on_failure` is called with each failed attempt's error and
/// its number (from 0), and the future it returns awaited before the pause: the caller's log
/// line, metric or readiness change.
pub async fn wait_for_streams<Fut>(
    jetstream: &jetstream::Context,
    config: &BusConfig,
    setup: StreamSetup,
    retry: Duration,
    until: impl Future<Output = ()>,
    mut on_failure: impl FnMut(BusError, u32) -> Fut,
) -> Option<Bus>
where
    Fut: Future<Output = ()>,
{
    let mut until = std::pin::pin!(until);
    let mut attempt = 0u32;
    loop {
        let result = match setup {
            StreamSetup::Ensure => crate::ensure_streams(jetstream, config).await,
            StreamSetup::Verify => crate::verify_streams(jetstream, config).await,
        };
        match result {
            Ok(bus) => return Some(bus),
            Err(error) => {
                on_failure(error, attempt).await;
                attempt = attempt.saturating_add(1);
                tokio::select! {
                    () = &mut until => return None,
                    () = tokio::time::sleep(retry) => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use tink_testkit::nats::NatsServer;

    use super::*;

    #[tokio::test]
    async fn a_comma_separated_list_names_several_servers() {
        let nats = NatsServer::start().await.expect("nats");
        // The first names nothing that listens; the list still connects, through the second.
        let list = format!("nats://127.0.0.1:1, {}", nats.url());
        let client = crate::connect(&list, &NatsAuth::default(), ConnectOptions::new)
            .await
            .expect("connects through the list");
        client.flush().await.expect("flushes");
        // An address that cannot be parsed is an error naming the list, not a panic.
        let err = crate::connect(
            "nats://127.0.0.1:1,::not a url::",
            &NatsAuth::default(),
            || ConnectOptions::new().max_reconnects(Some(1)),
        )
        .await;
        assert!(err.is_err());
        // No server at all is refused at once with the setting named.
        for empty in ["", " , ,"] {
            let err = crate::connect(empty, &NatsAuth::default(), ConnectOptions::new).await;
            assert!(
                matches!(err, Err(NatsConnectError::NoServer { .. })),
                "{empty:?}: {:?}",
                err.map(|_| ())
            );
        }
    }

    #[tokio::test]
    async fn connects_named_with_events_and_waits_for_the_streams() {
        let nats = NatsServer::start().await.expect("nats");
        let config = BusConfig::default();
        let connected = Arc::new(AtomicU32::new(0));
        let seen = connected.clone();
        let connection = ServiceConnection::new(nats.url(), &NatsAuth::default(), "tink-test")
            .on_event(move |event| {
                if matches!(event, Event::Connected) {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
            });

        // Nothing created yet: a verifying service waits, reporting each failed attempt,
        // until it is told to stop.
        let mut failures = Vec::new();
        let waited = connection
            .connect_and_wait_for_streams(
                &config,
                StreamSetup::Verify,
                Duration::from_millis(50),
                tokio::time::sleep(Duration::from_millis(300)),
                |error, attempt| {
                    failures.push((attempt, matches!(error, BusError::Missing { .. })));
                    std::future::ready(())
                },
            )
            .await
            .expect("connects");
        assert!(waited.is_none(), "stopped while waiting");
        assert!(failures.len() >= 2, "retried: {failures:?}");
        assert_eq!(failures[..2], [(0, true), (1, true)]);

        // The controller's way creates them; a verifying service then finds them at once.
        let (client, bus) = connection
            .connect_and_wait_for_streams(
                &config,
                StreamSetup::Ensure,
                Duration::from_millis(50),
                std::future::pending(),
                |error, _| -> std::future::Ready<()> { panic!("ensure failed: {error}") },
            )
            .await
            .expect("connects")
            .expect("set up");
        assert_eq!(bus.config, config);
        let found = wait_for_streams(
            &jetstream::new(client.clone()),
            &config,
            StreamSetup::Verify,
            Duration::from_millis(50),
            std::future::pending(),
            |error, _| -> std::future::Ready<()> { panic!("verify failed: {error}") },
        )
        .await;
        assert!(found.is_some());
        assert!(
            connected.load(Ordering::SeqCst) >= 1,
            "the event callback ran"
        );
    }
}
