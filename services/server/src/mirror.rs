//! An in-memory mirror of a NATS KV bucket the controller writes and the servers read (the agent
//! secrets, the admitted agents): one watch per replica, no NATS request per call.
//!
//! The replica turns ready only once every mirror has loaded its bucket, and checks made before
//! that answer UNAVAILABLE (the agent retries): a replica never decides about an agent on a
//! bucket it has not read yet.

use std::collections::HashMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::jetstream::kv;
use futures::StreamExt as _;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// Pause before watching the bucket again after a failure.
const REWATCH_DELAY: Duration = Duration::from_secs(1);

/// A bucket's entries: key -> value (UTF-8, trimmed).
#[derive(Debug)]
pub struct KvMirror {
    /// The bucket's name, for logs.
    bucket: &'static str,
    entries: RwLock<HashMap<String, String>>,
    loaded: AtomicBool,
    loaded_notify: tokio::sync::Notify,
}

impl KvMirror {
    /// An empty, not yet loaded mirror of `bucket`.
    pub fn new(bucket: &'static str) -> Self {
        KvMirror {
            bucket,
            entries: RwLock::default(),
            loaded: AtomicBool::new(false),
            loaded_notify: tokio::sync::Notify::new(),
        }
    }

    /// Whether the bucket has been read once.
    pub fn is_loaded(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }

    /// Waits until the bucket has been read once.
    pub async fn wait_loaded(&self) {
        loop {
            let notified = self.loaded_notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_loaded() {
                return;
            }
            notified.await;
        }
    }

    fn set_loaded(&self) {
        self.loaded.store(true, Ordering::Release);
        self.loaded_notify.notify_waiters();
    }

    /// The value of `key`, if the bucket holds it.
    pub fn get(&self, key: &str) -> Option<String> {
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        entries.get(key).cloned()
    }

    /// Whether the bucket holds `key`.
    pub fn contains(&self, key: &str) -> bool {
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        entries.contains_key(key)
    }

    fn apply(&self, entry: kv::Entry) {
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        match entry.operation {
            kv::Operation::Put => {
                let value = String::from_utf8_lossy(&entry.value).trim().to_string();
                entries.insert(entry.key, value);
            }
            kv::Operation::Delete | kv::Operation::Purge => {
                entries.remove(&entry.key);
            }
        }
    }

    /// Mirrors `bucket` until `shutdown`; marks the mirror loaded once the watch delivered every
    /// stored entry.
    pub async fn watch(&self, bucket: kv::Store, shutdown: CancellationToken) {
        while !shutdown.is_cancelled() {
            let mut watch = match bucket.watch_with_history(">").await {
                Ok(w) => w,
                Err(e) => {
                    warn!(bucket = self.bucket, error = %e, "cannot watch the bucket; retrying");
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(REWATCH_DELAY) => continue,
                    }
                }
            };
            // An empty bucket delivers nothing: loaded once the stream says nothing is pending.
            let pending = match bucket.status().await {
                Ok(s) => s.values(),
                Err(_) => 1,
            };
            if pending == 0 {
                self.set_loaded();
            }
            loop {
                let entry = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    e = watch.next() => e,
                };
                match entry {
                    Some(Ok(entry)) => {
                        let caught_up = entry.delta == 0;
                        self.apply(entry);
                        if caught_up {
                            self.set_loaded();
                        }
                    }
                    Some(Err(e)) => {
                        warn!(bucket = self.bucket, error = %e, "bucket watch failed; watching again");
                        break;
                    }
                    None => break,
                }
            }
            debug!(bucket = self.bucket, "bucket watch ended; watching again");
        }
    }
}
