//! Where each dispatch went: the dispatch targets bucket ([`tink_bus::DISPATCH_TARGETS_BUCKET`]).
//!
//! The replica that forwards a StartWorkflow records, before forwarding it, the agent whose
//! stream it goes to and whether that stream presented credentials. Events and log batches name
//! their dispatch; [`crate::auth`] checks them against this record on whichever replica they
//! arrive. The first record of a dispatch is a create-if-absent write, so of two replicas that
//! race to forward it, one wins. A dispatch id names one attempt of one Workflow and goes to one
//! agent, so a record never changes agent and is cached for good (bounded); only "went to a
//! stream without credentials" can be added later, by a redelivery to such a stream, and is then
//! written again.
//! That a dispatch has no record yet is remembered for [`MISSING_TTL`] only (an event about a
//! dispatch nobody forwarded, e.g. from a benchmark, costs one read per second, not one each),
//! except by the forwarding replica, which records it at once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_nats::jetstream::kv;
use tink_bus::DispatchTarget;
use tonic::Status;
use tracing::warn;

/// The most records cached per replica.
const CACHE_MAX: usize = 65_536;
/// How long "no record" is remembered.
const MISSING_TTL: Duration = Duration::from_secs(1);
/// A record not found is read once more after this pause before an event without credentials
/// is refused (a replicated bucket's direct get may be answered by a follower a moment behind).
const MISSING_REREAD: Duration = Duration::from_millis(100);

/// The dispatch targets of one replica: the bucket and a bounded cache of it.
#[derive(Debug)]
pub(crate) struct DispatchTargets {
    store: kv::Store,
    /// Dispatch id -> its record, or `None` with when it was found missing.
    cache: Mutex<HashMap<String, Cached>>,
}

#[derive(Debug, Clone)]
enum Cached {
    Found(DispatchTarget),
    Missing(tokio::time::Instant),
}

impl DispatchTargets {
    pub(crate) fn new(store: kv::Store) -> Self {
        DispatchTargets {
            store,
            cache: Mutex::default(),
        }
    }

    /// `Some(Some(t))`: recorded; `Some(None)`: found missing less than [`MISSING_TTL`] ago;
    /// `None`: not known here.
    fn cached(&self, dispatch_id: &str) -> Option<Option<DispatchTarget>> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        match cache.get(dispatch_id)? {
            Cached::Found(t) => Some(Some(t.clone())),
            Cached::Missing(at) if at.elapsed() < MISSING_TTL => Some(None),
            Cached::Missing(_) => None,
        }
    }

    fn remember(&self, dispatch_id: &str, target: Option<DispatchTarget>) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHE_MAX {
            cache.clear();
        }
        let entry = match target {
            Some(t) => Cached::Found(t),
            None => Cached::Missing(tokio::time::Instant::now()),
        };
        cache.insert(dispatch_id.to_string(), entry);
    }

    /// Claims `dispatch_id` for `target` when no record exists yet: one conditional write
    /// (create only if absent), so two replicas racing to forward one dispatch cannot both win.
    /// Never changes a record that exists: that one is returned for [`Self::settle`].
    pub(crate) async fn claim(
        &self,
        dispatch_id: &str,
        target: &DispatchTarget,
    ) -> Result<Claim, RecordError> {
        if let Some(Some(known)) = self.cached(dispatch_id) {
            return Ok(Claim::Exists(known));
        }
        let store_error = |e: &dyn std::fmt::Display| RecordError::Store(e.to_string());
        let key = tink_bus::workflow_token(dispatch_id).map_err(|e| store_error(&e))?;
        match self.store.create(&key, target.to_bytes().into()).await {
            Ok(_) => {}
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
                let entry = self.store.entry(&key).await.map_err(|e| store_error(&e))?;
                let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) else {
                    // A follower answered the read before it stored the record.
                    return Err(RecordError::Store(format!(
                        "the record of {dispatch_id} exists but could not be read yet"
                    )));
                };
                match DispatchTarget::from_bytes(&entry.value) {
                    Ok(known) => return Ok(Claim::Exists(known)),
                    Err(e) => {
                        // Unreadable, so it names nobody: replaced as if absent, unless it
                        // changed since it was read.
                        warn!(dispatch = %dispatch_id, error = %e, "replacing a malformed dispatch target record");
                        self.store
                            .update(&key, target.to_bytes().into(), entry.revision)
                            .await
                            .map_err(|e| store_error(&e))?;
                    }
                }
            }
            Err(e) => return Err(store_error(&e)),
        }
        self.remember(dispatch_id, Some(target.clone()));
        Ok(Claim::Created)
    }

    /// Completes a claim that found `known` recorded: refused when it names another agent
    /// (a dispatch has one target); written again only to add that the dispatch went to a
    /// stream without credentials (once so, it stays so).
    pub(crate) async fn settle(
        &self,
        dispatch_id: &str,
        known: DispatchTarget,
        target: DispatchTarget,
    ) -> Result<(), RecordError> {
        if known.agent_id != target.agent_id {
            return Err(RecordError::OtherAgent(known.agent_id));
        }
        if known.authenticated == target.authenticated || !known.authenticated {
            self.remember(dispatch_id, Some(known));
            return Ok(());
        }
        let key =
            tink_bus::workflow_token(dispatch_id).map_err(|e| RecordError::Store(e.to_string()))?;
        self.store
            .put(key, target.to_bytes().into())
            .await
            .map_err(|e| RecordError::Store(e.to_string()))?;
        self.remember(dispatch_id, Some(target));
        Ok(())
    }

    /// The target of `dispatch_id`, if one was recorded. `reread_missing`: a record not found
    /// is looked up once more after a short pause.
    pub(crate) async fn lookup(
        &self,
        dispatch_id: &str,
        reread_missing: bool,
    ) -> Result<Option<DispatchTarget>, Status> {
        let cached = self.cached(dispatch_id);
        if let Some(Some(target)) = cached {
            return Ok(Some(target));
        }
        let unavailable =
            |e: RecordError| Status::unavailable(format!("{e}; retry with the same event_id"));
        let mut found = match cached {
            Some(None) if !reread_missing => return Ok(None),
            Some(None) => None,
            _ => self.read(dispatch_id).await.map_err(unavailable)?,
        };
        if found.is_none() && reread_missing {
            tokio::time::sleep(MISSING_REREAD).await;
            found = self.read(dispatch_id).await.map_err(unavailable)?;
        }
        self.remember(dispatch_id, found.clone());
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

/// What [`DispatchTargets::claim`] found.
#[derive(Debug)]
pub(crate) enum Claim {
    /// No record existed; the target given is now recorded.
    Created,
    /// A record exists (it may name another agent).
    Exists(DispatchTarget),
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
