//! Where each dispatch went: the dispatch targets bucket ([`tink_bus::DISPATCH_TARGETS_BUCKET`]).
//!
//! The replica that forwards a StartWorkflow records, before forwarding it, the agent whose
//! stream it goes to and whether that stream presented credentials. Events and log batches name
//! their dispatch; [`crate::auth`] checks them against this record on whichever replica they
//! arrive. A dispatch id names one attempt of one Workflow and goes to one agent, so a record
//! never changes agent and is cached for good (bounded); only "went to a stream without
//! credentials" can be added later, by a redelivery to such a stream, and is then written again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_nats::jetstream::kv;
use tink_bus::DispatchTarget;
use tonic::Status;
use tracing::warn;

/// The most records cached per replica.
const CACHE_MAX: usize = 65_536;
/// A record not found is read once more after this pause before an event without credentials
/// is refused (a replicated bucket's direct get may be answered by a follower a moment behind).
const MISSING_REREAD: Duration = Duration::from_millis(100);

/// The dispatch targets of one replica: the bucket and a bounded cache of it.
#[derive(Debug)]
pub(crate) struct DispatchTargets {
    store: kv::Store,
    cache: Mutex<HashMap<String, DispatchTarget>>,
}

impl DispatchTargets {
    pub(crate) fn new(store: kv::Store) -> Self {
        DispatchTargets {
            store,
            cache: Mutex::default(),
        }
    }

    fn cached(&self, dispatch_id: &str) -> Option<DispatchTarget> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.get(dispatch_id).cloned()
    }

    fn remember(&self, dispatch_id: &str, target: DispatchTarget) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHE_MAX {
            cache.clear();
        }
        cache.insert(dispatch_id.to_string(), target);
    }

    /// Records that `dispatch_id` is forwarded to `target`, before it is. A record already
    /// naming another agent is kept (and the forward refused): a dispatch has one target.
    pub(crate) async fn record(
        &self,
        dispatch_id: &str,
        target: DispatchTarget,
    ) -> Result<(), RecordError> {
        let known = match self.cached(dispatch_id) {
            Some(t) => Some(t),
            None => self.read(dispatch_id).await?,
        };
        let merged = match known {
            Some(known) if known.agent_id != target.agent_id => {
                return Err(RecordError::OtherAgent(known.agent_id));
            }
            Some(known) if known.authenticated == target.authenticated || !known.authenticated => {
                // Nothing new: once it went to a stream without credentials it stays so.
                self.remember(dispatch_id, known);
                return Ok(());
            }
            _ => target,
        };
        let key =
            tink_bus::workflow_token(dispatch_id).map_err(|e| RecordError::Store(e.to_string()))?;
        self.store
            .put(key, merged.to_bytes().into())
            .await
            .map_err(|e| RecordError::Store(e.to_string()))?;
        self.remember(dispatch_id, merged);
        Ok(())
    }

    /// The target of `dispatch_id`, if one was recorded. `reread_missing`: a record not found
    /// is looked up once more after a short pause.
    pub(crate) async fn lookup(
        &self,
        dispatch_id: &str,
        reread_missing: bool,
    ) -> Result<Option<DispatchTarget>, Status> {
        if let Some(target) = self.cached(dispatch_id) {
            return Ok(Some(target));
        }
        let unavailable =
            |e: RecordError| Status::unavailable(format!("{e}; retry with the same event_id"));
        let mut found = self.read(dispatch_id).await.map_err(unavailable)?;
        if found.is_none() && reread_missing {
            tokio::time::sleep(MISSING_REREAD).await;
            found = self.read(dispatch_id).await.map_err(unavailable)?;
        }
        if let Some(target) = &found {
            self.remember(dispatch_id, target.clone());
        }
        Ok(found)
    }

    async fn read(&self, dispatch_id: &str) -> Result<Option<DispatchTarget>, RecordError> {
        let Ok(key) = tink_bus::workflow_token(dispatch_id) else {
            return Ok(None);
        };
        let entry = self
            .store
            .entry(key)
            .await
            .map_err(|e| RecordError::Store(e.to_string()))?;
        let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) else {
            return Ok(None);
        };
        match DispatchTarget::from_bytes(&entry.value) {
            Ok(target) => Ok(Some(target)),
            Err(e) => {
                warn!(dispatch = %dispatch_id, error = %e, "ignoring a malformed dispatch target record");
                Ok(None)
            }
        }
    }
}

/// Why a dispatch target was not recorded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RecordError {
    /// The bucket could not be read or written.
    #[error("cannot read or write the dispatch target: {0}")]
    Store(String),
    /// The dispatch was already forwarded to another agent.
    #[error("the dispatch was already forwarded to agent {0}")]
    OtherAgent(String),
}
