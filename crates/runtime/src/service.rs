//! The frame of a service binary's `main`: the shutdown token, the health state and the metrics
//! registry it creates first, and the tail every `main` ended with (start the admin endpoint,
//! run the service, cancel the token, wait for the admin endpoint, return the service's
//! result). Each service and the agent wrote those eight lines out; [`Service`] is them once.

use std::future::Future;

use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::{AdminArgs, AdminServer, Health, shutdown_token, shutdown_token_with_grace};

/// Why a service binary stops with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The admin endpoint could not be bound, or its task failed.
    #[error(transparent)]
    Admin(std::io::Error),
    /// The service's run function returned an error (a dead critical task among them).
    #[error(transparent)]
    Stopped(Box<dyn std::error::Error + Send + Sync>),
}

/// What a service binary sets up before it runs: see the [module documentation](self).
///
/// ```no_run
/// # async fn example(admin: tink_runtime::AdminArgs) -> Result<(), tink_runtime::ServiceError> {
/// let mut service = tink_runtime::Service::new(&admin);
/// let requests = prometheus_client::metrics::counter::Counter::<u64>::default();
/// service.registry().register("requests", "Requests served", requests.clone());
/// service
///     .run(|health, shutdown| async move {
///         health.set_ready(true);
///         shutdown.cancelled().await;
///         Ok::<(), std::io::Error>(())
///     })
///     .await
/// # }
/// ```
#[derive(Debug)]
pub struct Service {
    admin: AdminArgs,
    shutdown: CancellationToken,
    health: Health,
    registry: Registry,
}

impl Service {
    /// A service whose token is cancelled by SIGTERM or SIGINT, with the forced exit
    /// `admin.shutdown_grace()` after the signal ([`shutdown_token_with_grace`]). Must be
    /// called inside a Tokio runtime.
    pub fn new(admin: &AdminArgs) -> Self {
        Self::with_token(admin, shutdown_token_with_grace(admin.shutdown_grace()))
    }

    /// A service whose token is cancelled by SIGTERM or SIGINT with no forced exit, for a
    /// process that bounds its own shutdown (the agent, with its flush timeout).
    pub fn without_forced_exit(admin: &AdminArgs) -> Self {
        Self::with_token(admin, shutdown_token())
    }

    fn with_token(admin: &AdminArgs, shutdown: CancellationToken) -> Self {
        Self {
            admin: admin.clone(),
            shutdown,
            health: Health::new(),
            registry: Registry::default(),
        }
    }

    /// The registry `/metrics` serves; register the service's metrics here before
    /// [`Service::run`].
    pub fn registry(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// The process's shutdown token (for work before [`Service::run`], like waiting for a
    /// dependency).
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// Starts the admin endpoint, runs `run` with the health state and the shutdown token until
    /// it returns, cancels the token (so everything else stops too), waits for the admin
    /// endpoint to stop and returns `run`'s result.
    pub async fn run<F, Fut, E>(self, run: F) -> Result<(), ServiceError>
    where
        F: FnOnce(Health, CancellationToken) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let admin = AdminServer::start(&self.admin, &self.health, self.registry, &self.shutdown)
            .await
            .map_err(ServiceError::Admin)?;
        let result = run(self.health, self.shutdown.clone()).await;
        self.shutdown.cancel();
        admin.stopped().await.map_err(ServiceError::Admin)?;
        result.map_err(|e| ServiceError::Stopped(e.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admin() -> AdminArgs {
        AdminArgs {
            admin_addr: "127.0.0.1:0".parse().expect("an address"),
            shutdown_grace_seconds: 10,
        }
    }

    #[tokio::test]
    async fn the_run_result_is_returned_after_the_admin_endpoint_stopped() {
        let service = Service::new(&admin());
        let token = service.shutdown().clone();
        let result = service
            .run(|health, _shutdown| async move {
                health.set_ready(true);
                Err(std::io::Error::other("a critical task failed"))
            })
            .await;
        assert!(token.is_cancelled(), "the tail cancels the token");
        let error = result.expect_err("the run's error");
        assert!(matches!(error, ServiceError::Stopped(_)));
        assert_eq!(error.to_string(), "a critical task failed");
    }

    #[tokio::test]
    async fn a_clean_run_is_ok() {
        let mut service = Service::without_forced_exit(&admin());
        service.registry();
        service
            .run(|_health, _shutdown| async { Ok::<(), std::io::Error>(()) })
            .await
            .expect("ok");
    }
}
