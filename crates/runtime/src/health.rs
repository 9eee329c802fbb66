use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Liveness and readiness of a service.
///
/// Liveness is implied: while the admin endpoint answers, the process is alive. Readiness starts
/// false and is turned on by the service once its dependencies are usable (caches synced, NATS
/// connected, consumers bound), and off again while they are not.
#[derive(Clone, Debug, Default)]
pub struct Health {
    ready: Arc<AtomicBool>,
    /// Lines `/readyz` adds after its verdict: settings an operator must know about (e.g. a
    /// weakened security mode).
    notes: Arc<Mutex<Vec<String>>>,
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

    /// Adds a line that `/readyz` shows after its verdict, ready or not.
    pub fn add_note(&self, note: impl Into<String>) {
        let mut notes = self.notes.lock().unwrap_or_else(|e| e.into_inner());
        notes.push(note.into());
    }

    /// The lines added with [`Health::add_note`].
    pub fn notes(&self) -> Vec<String> {
        self.notes.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether the service is ready to take work.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}
