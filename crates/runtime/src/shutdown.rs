use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Waits until the process receives SIGTERM or SIGINT (Ctrl-C).
///
/// If a signal handler cannot be installed (which only happens when the runtime has no signal
/// driver) the error is logged and that signal is simply not waited for.
pub async fn wait_for_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("received SIGINT, shutting down"),
        () = term => tracing::info!("received SIGTERM, shutting down"),
    }
}

/// The default time from the signal to a forced exit (see [`shutdown_token_with_grace`]).
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A token that is cancelled when the process receives SIGTERM or SIGINT, with no forced exit
/// (for a process that bounds its own shutdown, like the agent with its flush timeout).
/// Services use [`shutdown_token_with_grace`].
pub fn shutdown_token() -> CancellationToken {
    let token = CancellationToken::new();
    let trigger = token.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        trigger.cancel();
    });
    token
}

/// A token that is cancelled when the process receives SIGTERM or SIGINT; if the process is
/// still running `grace` after the signal (a dependency that hangs: NATS or the API server
/// gone while a node drains), it exits with status 1 and an error line. Nothing is half-written
/// by that: Kubernetes writes are atomic, and JetStream messages not acknowledged are delivered
/// again.
///
/// Every task group of a service takes a child of this token (`token.child_token()`) so that
/// shutdown reaches all of them; the service then drains its groups in order and flushes
/// telemetry last. Must be called inside a Tokio runtime.
pub fn shutdown_token_with_grace(grace: Duration) -> CancellationToken {
    let token = CancellationToken::new();
    let trigger = token.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        trigger.cancel();
        // The services' hangs are awaits on a dead peer, never blocked workers, so a timer task
        // of the same runtime fires; it is dropped with the runtime when shutdown finishes.
        tokio::time::sleep(grace).await;
        tracing::error!(
            grace_seconds = grace.as_secs_f64(),
            "shutdown did not finish within its grace period; exiting"
        );
        std::process::exit(1);
    });
    token
}
