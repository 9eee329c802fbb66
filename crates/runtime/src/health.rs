use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Liveness and readiness of a service.
///
/// Liveness is implied: while the admin endpoint answers, the process is alive. Readiness starts
/// false and is turned on by the service once its dependencies are usable (caches synced, NATS
/// connected, consumers bound), and off again while they are not.
#[derive(Clone, Debug, Default)]
pub struct Health {
    ready: Arc<AtomicBool>,
}

impl Health {
    /// A new health state, not ready.
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks the service ready or not ready.
    pub fn set_ready(&self, ready: bool) {
        let was = self.ready.swap(ready, Ordering::SeqCst);
        if was != ready {
            tracing::info!(ready, "readiness changed");
        }
    }

    /// Whether the service is ready to take work.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}
