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

/// A token that is cancelled when the process receives SIGTERM or SIGINT.
///
/// Every task group of a service takes a child of this token (`token.child_token()`) so that
/// shutdown reaches all of them; the service then drains its groups in order and flushes
/// telemetry last. Must be called inside a Tokio runtime.
pub fn shutdown_token() -> CancellationToken {
    let token = CancellationToken::new();
    let trigger = token.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        trigger.cancel();
    });
    token
}
