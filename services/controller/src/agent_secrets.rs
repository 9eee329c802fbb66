//! Per-machine pre-shared secrets: `tinkerbell.org/agent-secret: <Secret name>` on a Hardware
//! names a Secret of type `tinkerbell.org/agent-secret` in its namespace whose `secret` key the
//! machine's agent must present on every call (Hegel puts it in the machine's boot parameters).
//! The leader publishes the SHA-256 of the value into the agent secrets bucket, one entry per
//! agent id of the machine; the servers mirror the bucket and refuse that agent's streams and
//! events without it. It also copies the value into a Secret of the same type in the system
//! namespace (`--system-namespace`), named after the Hardware ([`copy_name`]): Hegel reads only
//! those copies, so it needs no access to Secrets in the Hardware's namespace, and a Hardware
//! editor cannot send an ordinary Secret (one of any other type) into a boot script.
//!
//! - On every Hardware change the machine's entries and its copy are brought up to date
//!   (written only when they differ); a deleted Hardware's copy is deleted at once.
//! - Every `agent_secrets_sweep` (30 s by default) the whole bucket and every copy are
//!   reconciled with the Hardware cache: rotated Secrets are picked up and the entries and copies
//!   of deleted or un-annotated Hardware removed.
//! - A Secret that is missing, of another type or unusable publishes
//!   [`tink_bus::AGENT_SECRET_MISSING`], which no secret matches (the machine is refused: fail
//!   closed), deletes the copy (Hegel then serves the machine no script), and a Warning Event on
//!   the Hardware says why.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv;
use futures::TryStreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Resource as _, ResourceExt as _};
use tink_api::v1alpha2::Hardware;
use tink_workflow::{EventReason, EventType, agent_ids};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::config::CONTROLLER_NAME;
use crate::shared::{KubeEvent, Shared};

pub use tink_api::agent_secret::{AGENT_SECRET_ANNOTATION, AGENT_SECRET_TYPE, copy_name};
use tink_api::agent_secret::{
    COPY_LABEL, HARDWARE_NAMESPACE_LABEL, copy_for, copy_is_current, typed_agent_secret_value,
};

/// The hex SHA-256 of a secret, as the servers compare it.
pub fn secret_hash(secret: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// What one Hardware should have.
struct Wanted {
    /// Agent token -> hash in the bucket (empty: no secret).
    tokens: HashMap<String, String>,
    /// The copy for Hegel (None: no copy).
    copy: Option<Secret>,
}

/// What the bucket and the system namespace should hold for one Hardware.
async fn desired(shared: &Shared, hw: &Hardware) -> Wanted {
    let Some(name) = hw.annotations().get(AGENT_SECRET_ANNOTATION) else {
        return Wanted {
            tokens: HashMap::new(),
            copy: None,
        };
    };
    let ns = hw.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(shared.client.clone(), &ns);
    let value = match secrets.get_opt(name).await {
        Ok(Some(s)) => {
            typed_agent_secret_value(&s).map_err(|why| format!("Secret {ns}/{name} {why}"))
        }
        Ok(None) => Err(format!("Secret {ns}/{name} does not exist")),
        Err(e) => Err(format!("Secret {ns}/{name} cannot be read: {e}")),
    };
    let (hash, copy) = match value {
        Ok(v) => (
            secret_hash(&v),
            Some(copy_for(
                &shared.config.system_namespace,
                &ns,
                &hw.name_any(),
                name,
                &v,
            )),
        ),
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
            (tink_bus::AGENT_SECRET_MISSING.to_string(), None)
        }
    };
    Wanted {
        tokens: agent_ids(&hw.spec)
            .iter()
            .filter_map(|id| tink_bus::agent_token(id).ok())
            .map(|t| (t, hash.clone()))
            .collect(),
        copy,
    }
}

async fn current(bucket: &kv::Store, token: &str) -> Result<Option<String>, kv::EntryError> {
    Ok(bucket
        .get(token)
        .await?
        .map(|v| String::from_utf8_lossy(&v).to_string()))
}

fn copies(shared: &Shared) -> Api<Secret> {
    Api::namespaced(shared.client.clone(), &shared.config.system_namespace)
}

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(CONTROLLER_NAME.into()),
        ..Default::default()
    }
}

/// Makes the copy `want` (named `name`) what `have` is, writing only when they differ. A copy
/// of another type is deleted and created again (a Secret's type cannot change).
async fn write_copy(
    api: &Api<Secret>,
    name: &str,
    have: Option<Secret>,
    want: Option<Secret>,
) -> kube::Result<()> {
    match (have, want) {
        (None, None) => {}
        (Some(_), None) => {
            delete_copy(api, name).await?;
            info!(copy = %name, "agent secret copy removed");
        }
        (Some(h), Some(w)) if copy_is_current(&h, &w) => {}
        (Some(h), Some(mut w)) if h.type_ == w.type_ => {
            w.metadata.resource_version = h.metadata.resource_version;
            api.replace(name, &post_params(), &w).await?;
            info!(copy = %name, "agent secret copy updated");
        }
        (Some(_), Some(w)) => {
            delete_copy(api, name).await?;
            api.create(&post_params(), &w).await?;
            info!(copy = %name, "agent secret copy replaced");
        }
        (None, Some(w)) => {
            api.create(&post_params(), &w).await?;
            info!(copy = %name, "agent secret copy created");
        }
    }
    Ok(())
}

/// Deletes a copy; one already gone is fine.
async fn delete_copy(api: &Api<Secret>, name: &str) -> kube::Result<()> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Brings one Hardware's entries (tokens of its agent ids only) and its copy up to date.
async fn sync_one(shared: &Shared, hw: &Hardware) -> anyhow::Result<()> {
    let want = desired(shared, hw).await;
    let bucket = &shared.bus.agent_secrets;
    for id in agent_ids(&hw.spec) {
        let Ok(token) = tink_bus::agent_token(&id) else {
            continue;
        };
        let have = current(bucket, &token).await?;
        match (want.tokens.get(&token), have) {
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
    let api = copies(shared);
    let name = copy_name(&hw.namespace().unwrap_or_default(), &hw.name_any());
    let have = api.get_opt(&name).await?;
    write_copy(&api, &name, have, want.copy).await?;
    Ok(())
}

/// Called for every Hardware the watch applies: syncs it when it has the annotation (an
/// annotation removed is seen by the sweep, so a list of thousands of Hardware costs nothing;
/// Hegel stops serving the secret of a Hardware without the annotation at once).
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

/// Called for every Hardware the watch sees deleted: deletes its copy (the sweep would, later).
pub(crate) fn forget(shared: &Arc<Shared>, hw: &Hardware) {
    if !hw.annotations().contains_key(AGENT_SECRET_ANNOTATION) {
        return;
    }
    let shared = shared.clone();
    let name = copy_name(&hw.namespace().unwrap_or_default(), &hw.name_any());
    tokio::spawn(async move {
        if let Err(e) = delete_copy(&copies(&shared), &name).await {
            shared.metrics.error("agent_secret");
            warn!(copy = %name, error = %e, "cannot delete a deleted Hardware's agent secret copy; the sweep retries");
        }
    });
}

/// Reconciles the whole bucket and every copy with the Hardware cache every
/// `agent_secrets_sweep` until `term`.
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
    let mut want_copies: HashMap<String, Secret> = HashMap::new();
    for hw in shared.hardware.state() {
        if hw.annotations().contains_key(AGENT_SECRET_ANNOTATION) {
            let w = desired(shared, &hw).await;
            want.extend(w.tokens);
            if let Some(c) = w.copy {
                want_copies.insert(c.name_any(), c);
            }
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

    // The copies: those of Hardware this controller watches (all, or its namespace's).
    let api = copies(shared);
    let mut have: HashMap<String, Secret> = api
        .list(&ListParams::default().labels(&format!("{COPY_LABEL}=true")))
        .await?
        .items
        .into_iter()
        .filter(|s| {
            shared.config.namespace.as_deref().is_none_or(|ns| {
                s.labels().get(HARDWARE_NAMESPACE_LABEL).map(String::as_str) == Some(ns)
            })
        })
        .map(|s| (s.name_any(), s))
        .collect();
    let names: HashSet<String> = have.keys().chain(want_copies.keys()).cloned().collect();
    let mut failed = 0usize;
    for name in names {
        if let Err(e) = write_copy(&api, &name, have.remove(&name), want_copies.remove(&name)).await
        {
            failed += 1;
            warn!(copy = %name, error = %e, "cannot update an agent secret copy");
        }
    }
    if failed > 0 {
        anyhow::bail!("{failed} agent secret copies could not be updated");
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
