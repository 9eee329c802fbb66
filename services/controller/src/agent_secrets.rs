//! Per-machine pre-shared secrets: `tinkerbell.org/agent-secret: <Secret name>` on a Hardware
//! names a Secret in its namespace whose `secret` key the machine's agent must present on every
//! call (Hegel puts it in the machine's boot parameters). The leader publishes the SHA-256 of
//! the value into the agent secrets bucket, one entry per agent id of the machine; the servers
//! mirror the bucket and refuse that agent's streams and events without it.
//!
//! - On every Hardware change the machine's entries are brought up to date (written only when
//!   they differ).
//! - Every `agent_secrets_sweep` (30 s by default) the whole bucket is reconciled with the Hardware cache: rotated
//!   Secrets are picked up and the entries of deleted or un-annotated Hardware removed.
//! - A Secret that is missing or unusable publishes [`tink_bus::AGENT_SECRET_MISSING`], which
//!   no secret matches: the machine is refused (fail closed) and a Warning Event on the
//!   Hardware says why.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv;
use futures::TryStreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::{Resource as _, ResourceExt as _};
use tink_api::v1alpha2::Hardware;
use tink_workflow::{EventReason, EventType, agent_ids};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::shared::{KubeEvent, Shared};

pub use tink_api::agent_secret::AGENT_SECRET_ANNOTATION;
use tink_api::agent_secret::agent_secret_value;

/// The hex SHA-256 of a secret, as the servers compare it.
pub fn secret_hash(secret: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// What the bucket should hold for one Hardware: agent token -> hash (empty map: no secret).
async fn desired(shared: &Shared, hw: &Hardware) -> HashMap<String, String> {
    let Some(name) = hw.annotations().get(AGENT_SECRET_ANNOTATION) else {
        return HashMap::new();
    };
    let ns = hw.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(shared.client.clone(), &ns);
    let value = match secrets.get_opt(name).await {
        Ok(Some(s)) => agent_secret_value(&s).map_err(|why| format!("Secret {ns}/{name} {why}")),
        Ok(None) => Err(format!("Secret {ns}/{name} does not exist")),
        Err(e) => Err(format!("Secret {ns}/{name} cannot be read: {e}")),
    };
    let hash = match value {
        Ok(v) => secret_hash(&v),
        Err(why) => {
            warn!(hardware = %format!("{ns}/{}", hw.name_any()), reason = %why, "the machine's agent secret is unusable; its agent is refused until it is fixed");
            shared.kube_event_raw(KubeEvent {
                regarding: hw.object_ref(&()),
                type_: EventType::Warning,
                reason: EventReason::AgentSecretUnusable,
                message: format!(
                    "{AGENT_SECRET_ANNOTATION}: {why}; the machine's agent is refused until it is fixed"
                ),
            });
            tink_bus::AGENT_SECRET_MISSING.to_string()
        }
    };
    agent_ids(&hw.spec)
        .iter()
        .filter_map(|id| tink_bus::agent_token(id).ok())
        .map(|t| (t, hash.clone()))
        .collect()
}

async fn current(bucket: &kv::Store, token: &str) -> Result<Option<String>, kv::EntryError> {
    Ok(bucket
        .get(token)
        .await?
        .map(|v| String::from_utf8_lossy(&v).to_string()))
}

/// Brings one Hardware's entries up to date (tokens of its agent ids only).
async fn sync_one(shared: &Shared, hw: &Hardware) -> anyhow::Result<()> {
    let want = desired(shared, hw).await;
    let bucket = &shared.bus.agent_secrets;
    for id in agent_ids(&hw.spec) {
        let Ok(token) = tink_bus::agent_token(&id) else {
            continue;
        };
        let have = current(bucket, &token).await?;
        match (want.get(&token), have) {
            (Some(w), Some(h)) if *w == h => {}
            (Some(w), _) => {
                bucket.put(&token, w.clone().into()).await?;
                info!(agent_id = %id, "agent secret published");
            }
            (None, Some(_)) => {
                bucket.delete(&token).await?;
                info!(agent_id = %id, "agent secret removed");
            }
            (None, None) => {}
        }
    }
    Ok(())
}

/// Called for every Hardware the watch applies: syncs it when it has the annotation (an
/// annotation removed is seen by the sweep, so a list of thousands of Hardware costs nothing).
pub(crate) fn observe(shared: &Arc<Shared>, hw: &Hardware) {
    if !hw.annotations().contains_key(AGENT_SECRET_ANNOTATION) {
        return;
    }
    let (shared, hw) = (shared.clone(), hw.clone());
    tokio::spawn(async move {
        if let Err(e) = sync_one(&shared, &hw).await {
            shared.metrics.error("agent_secret");
            warn!(hardware = %hw.name_any(), error = %e, "cannot update the machine's agent secret; the sweep retries");
        }
    });
}

/// Reconciles the whole bucket with the Hardware cache every `agent_secrets_sweep` until
/// `term`.
pub(crate) async fn sweep(shared: Arc<Shared>, term: CancellationToken) {
    let period = shared
        .config
        .agent_secrets_sweep
        .max(Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = term.cancelled() => return,
            _ = tokio::time::sleep(period) => {}
        }
        if let Err(e) = sweep_once(&shared).await {
            shared.metrics.error("agent_secret");
            warn!(error = %e, "agent secrets sweep failed");
        }
    }
}

async fn sweep_once(shared: &Shared) -> anyhow::Result<()> {
    let mut want: HashMap<String, String> = HashMap::new();
    for hw in shared.hardware.state() {
        if hw.annotations().contains_key(AGENT_SECRET_ANNOTATION) {
            want.extend(desired(shared, &hw).await);
        }
    }
    let bucket = &shared.bus.agent_secrets;
    let keys: HashSet<String> = bucket.keys().await?.try_collect().await?;
    for key in keys.iter().filter(|k| !want.contains_key(*k)) {
        bucket.delete(key).await?;
        debug!(key = %key, "stale agent secret removed");
    }
    for (token, hash) in want {
        if current(bucket, &token).await?.as_deref() != Some(hash.as_str()) {
            bucket.put(&token, hash.into()).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_hex_sha256() {
        assert_eq!(
            secret_hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
