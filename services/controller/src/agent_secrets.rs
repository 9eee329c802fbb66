//! Per-machine boot secrets: `tinkerbell.org/agent-secret: <Secret name>` on a Hardware names a
//! Secret of type `tinkerbell.org/agent-secret` in its namespace. From its `secret` key the
//! leader derives the value the machine boots with, one per generation
//! ([`tink_api::agent_secret::derive_value`]), and writes it into a Secret of the same type in
//! the system namespace (`--system-namespace`), named after the Hardware ([`copy_name`]), with
//! the generation in an annotation: Hegel reads only those copies (so it needs no access to
//! Secrets in the Hardware's namespace, and a Hardware editor cannot send an ordinary Secret
//! into a boot script) and puts the value in the machine's boot parameters. The leader publishes
//! its SHA-256 into the agent secrets bucket, one entry per agent id of the machine; the servers
//! mirror the bucket and create a session for that agent only with the value, once.
//!
//! **Rotation per boot.** A server records each exchange of a value for a session in the
//! exchanged secrets bucket ([`tink_bus::AGENT_SECRETS_USED_BUCKET`]). When that bucket holds
//! the current generation's hash for one of the machine's agents, the leader moves the machine
//! to the next generation (new copy value, new hash): the value on the kernel command line,
//! which every action can read, works once, and the next boot's iPXE script carries the next
//! value. The exchanged entry is left in place (it goes on refusing the consumed value, also on
//! a replica whose mirror of the secrets bucket is a moment behind). The agent that exchanged
//! the previous generation keeps its hash listed after the current one (the servers accept it
//! only once an operator reset that agent: an agent restarted in the same boot after its
//! session ended holds that value). The generation lives in the copy, so a restarted leader
//! continues it; a copy that is gone (a Secret that was missing, a first copy) starts at a
//! random generation, so no value of an earlier generation comes back. A rotated operator Secret
//! changes the derivation key and keeps the generation.
//!
//! - On every Hardware change and every exchange the machine's copy and then its entries are
//!   brought up to date (written only when they differ; the copy first, since it holds the
//!   generation); a deleted Hardware's copy is deleted at once.
//! - Every `agent_secrets_sweep` (30 s by default) the whole bucket and every copy are
//!   reconciled with the Hardware cache: rotated Secrets and missed exchanges are picked up, and
//!   the entries, exchanged entries and copies of deleted or un-annotated Hardware removed.
//! - A Secret that is missing, of another type or unusable publishes
//!   [`tink_bus::AGENT_SECRET_MISSING`], which no secret matches (the machine is refused: fail
//!   closed), deletes the copy (Hegel then serves the machine no script), and a Warning Event on
//!   the Hardware says why.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::kv;
use futures::TryStreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::reflector::Store;
use kube::{Client, Resource as _, ResourceExt as _};
use tink_api::v1alpha2::Hardware;
use tink_workflow::{EventReason, EventType, agent_ids};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::config::{CONTROLLER_NAME, ControllerConfig};
use crate::error::UpkeepError;
use crate::locks::lock;
use crate::metrics::Metrics;
use crate::recorder::{KubeEvent, KubeEvents};
use crate::tasks::Spawner;

pub use tink_api::agent_secret::{AGENT_SECRET_ANNOTATION, AGENT_SECRET_TYPE, copy_name};
use tink_api::agent_secret::{
    COPY_LABEL, HARDWARE_NAMESPACE_LABEL, copy_exchanged_by, copy_for, copy_generation,
    copy_is_current, derive_value, typed_agent_secret_value, with_generation,
};

/// The hex SHA-256 of a secret, as the servers compare it.
pub fn secret_hash(secret: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Per-Hardware locks: one sync of a machine's secret at a time (by copy name).
#[derive(Default)]
struct SyncLocks(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

impl SyncLocks {
    fn of(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = lock(&self.0);
        locks.entry(name.to_string()).or_default().clone()
    }

    fn forget(&self, name: &str) {
        let mut locks = lock(&self.0);
        locks.remove(name);
    }
}

/// The machines' boot secrets, kept by the leader.
pub(crate) struct AgentSecrets {
    client: Client,
    config: ControllerConfig,
    metrics: Metrics,
    bus: tink_bus::Bus,
    hardware: Store<Hardware>,
    kube_events: KubeEvents,
    spawner: Spawner,
    /// One sync of a machine's secret at a time (a rotation reads the copy's generation and
    /// writes the next one).
    syncs: SyncLocks,
}

/// What one Hardware should have.
struct Wanted {
    /// Agent token -> value in the bucket: the current hash, then, for the agent that exchanged
    /// the previous generation, that one's (empty map: no secret).
    tokens: HashMap<String, String>,
    /// The copy for Hegel (None: no copy).
    copy: Option<Secret>,
}

/// A generation to start at when a machine has none: random (48 bits), so a machine whose copy
/// was deleted never gets an earlier generation's value again.
fn first_generation() -> u64 {
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 8];
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        // No randomness: the time is as good a start as any.
        return jiff::Timestamp::now().as_microsecond().unsigned_abs();
    }
    u64::from_be_bytes(bytes) >> 16
}

/// The generation the machine should boot with, and the agent token that exchanged the
/// previous one: the copy's, or the next one when an agent of the machine exchanged the copy's
/// value (the exchanged bucket holds its hash).
async fn generation(
    secrets: &AgentSecrets,
    hardware: &str,
    source: &str,
    have: Option<&Secret>,
    tokens: &[String],
) -> (u64, Option<String>) {
    let Some(generation) = have.and_then(copy_generation) else {
        return (first_generation(), None);
    };
    let exchanged_by = have.and_then(copy_exchanged_by).map(str::to_string);
    let current = secret_hash(&derive_value(source, generation));
    for token in tokens {
        match current_value(&secrets.bus.agent_secrets_used, token).await {
            Ok(Some(used)) if used.trim() == current => {
                info!(hardware = %hardware, generation = generation + 1, "boot secret exchanged; the machine's next boot gets the next one");
                return (generation.saturating_add(1), Some(token.clone()));
            }
            Ok(_) => {}
            // Not rotated now (the exchanged entry goes on refusing the value); the sweep
            // retries.
            Err(e) => {
                secrets.metrics.error("agent_secret");
                warn!(hardware = %hardware, error = %e, "cannot read the exchanged agent secrets");
            }
        }
    }
    (generation, exchanged_by)
}

/// What the bucket and the system namespace should hold for one Hardware whose copy is `have`.
async fn desired(this: &AgentSecrets, hw: &Hardware, have: Option<&Secret>) -> Wanted {
    let Some(name) = hw.annotations().get(AGENT_SECRET_ANNOTATION) else {
        return Wanted {
            tokens: HashMap::new(),
            copy: None,
        };
    };
    let ns = hw.namespace().unwrap_or_default();
    let tokens: Vec<String> = agent_ids(&hw.spec)
        .iter()
        .filter_map(|id| tink_bus::agent_token(id).ok())
        .collect();
    let secrets: Api<Secret> = Api::namespaced(this.client.clone(), &ns);
    let value = match secrets.get_opt(name).await {
        Ok(Some(s)) => {
            typed_agent_secret_value(&s).map_err(|why| format!("Secret {ns}/{name} {why}"))
        }
        Ok(None) => Err(format!("Secret {ns}/{name} does not exist")),
        Err(e) => Err(format!("Secret {ns}/{name} cannot be read: {e}")),
    };
    match value {
        Ok(source) => {
            let hardware = format!("{ns}/{}", hw.name_any());
            let (generation, exchanged_by) =
                generation(this, &hardware, &source, have, &tokens).await;
            let value = derive_value(&source, generation);
            let current = secret_hash(&value);
            let previous = generation
                .checked_sub(1)
                .map(|g| secret_hash(&derive_value(&source, g)));
            let tokens = tokens
                .into_iter()
                .map(|t| {
                    let hashes = match &previous {
                        Some(p) if exchanged_by.as_deref() == Some(t.as_str()) => {
                            format!("{current} {p}")
                        }
                        _ => current.clone(),
                    };
                    (t, hashes)
                })
                .collect();
            let copy = copy_for(
                &this.config.system_namespace,
                &ns,
                &hw.name_any(),
                name,
                &value,
            );
            Wanted {
                tokens,
                copy: Some(with_generation(copy, generation, exchanged_by.as_deref())),
            }
        }
        Err(why) => {
            warn!(hardware = %format!("{ns}/{}", hw.name_any()), reason = %why, "the machine's agent secret is unusable; its agent is refused until it is fixed");
            this.kube_events.record(KubeEvent {
                regarding: hw.object_ref(&()),
                type_: EventType::Warning,
                reason: EventReason::AgentSecretUnusable,
                message: format!(
                    "{AGENT_SECRET_ANNOTATION}: {why}; the machine's agent is refused until it is fixed"
                ),
            });
            Wanted {
                tokens: tokens
                    .into_iter()
                    .map(|t| (t, tink_bus::AGENT_SECRET_MISSING.to_string()))
                    .collect(),
                copy: None,
            }
        }
    }
}

async fn current_value(bucket: &kv::Store, token: &str) -> Result<Option<String>, kv::EntryError> {
    Ok(bucket
        .get(token)
        .await?
        .map(|v| String::from_utf8_lossy(&v).to_string()))
}

fn copies(secrets: &AgentSecrets) -> Api<Secret> {
    Api::namespaced(secrets.client.clone(), &secrets.config.system_namespace)
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

/// Brings one Hardware's copy and then its entries (tokens of its agent ids only) up to date.
async fn sync_one(secrets: &AgentSecrets, hw: &Hardware) -> Result<(), UpkeepError> {
    let api = copies(secrets);
    let name = copy_name(&hw.namespace().unwrap_or_default(), &hw.name_any());
    let lock = secrets.syncs.of(&name);
    let _one_at_a_time = lock.lock().await;
    let have = api.get_opt(&name).await?;
    let want = desired(secrets, hw, have.as_ref()).await;
    // The copy first: it holds the generation the entries are derived from (a leader that dies
    // between the two writes derives the same entries from it).
    write_copy(&api, &name, have, want.copy).await?;
    let bucket = &secrets.bus.agent_secrets;
    for id in agent_ids(&hw.spec) {
        let Ok(token) = tink_bus::agent_token(&id) else {
            continue;
        };
        let have = current_value(bucket, &token).await?;
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
    Ok(())
}

impl AgentSecrets {
    pub fn new(
        client: Client,
        config: ControllerConfig,
        metrics: Metrics,
        bus: tink_bus::Bus,
        hardware: Store<Hardware>,
        kube_events: KubeEvents,
        spawner: Spawner,
    ) -> Self {
        Self {
            client,
            config,
            metrics,
            bus,
            hardware,
            kube_events,
            spawner,
            syncs: SyncLocks::default(),
        }
    }

    /// Called for every Hardware the watch applies: syncs it when it has the annotation (an
    /// annotation removed is seen by the sweep, so a list of thousands of Hardware costs
    /// nothing; Hegel stops serving the secret of a Hardware without the annotation at once).
    pub fn observe(self: &Arc<Self>, hw: &Hardware) {
        if !hw.annotations().contains_key(AGENT_SECRET_ANNOTATION) {
            return;
        }
        let (this, hw) = (self.clone(), hw.clone());
        let task = format!(
            "agent secret sync of {}/{}",
            hw.namespace().unwrap_or_default(),
            hw.name_any()
        );
        self.spawner.spawn(task, async move {
            if let Err(e) = sync_one(&this, &hw).await {
                this.metrics.error("agent_secret");
                warn!(hardware = %hw.name_any(), error = %e, "cannot update the machine's agent secret; the sweep retries");
            }
        });
    }

    /// Called for every Hardware the watch sees deleted: deletes its copy (the sweep would,
    /// later).
    pub fn forget(self: &Arc<Self>, hw: &Hardware) {
        if !hw.annotations().contains_key(AGENT_SECRET_ANNOTATION) {
            return;
        }
        let this = self.clone();
        let name = copy_name(&hw.namespace().unwrap_or_default(), &hw.name_any());
        let task = format!("agent secret copy removal of {name}");
        self.spawner.spawn(task, async move {
            this.syncs.forget(&name);
            if let Err(e) = delete_copy(&copies(&this), &name).await {
                this.metrics.error("agent_secret");
                warn!(copy = %name, error = %e, "cannot delete a deleted Hardware's agent secret copy; the sweep retries");
            }
        });
    }

    /// Reconciles the whole bucket and every copy with the Hardware cache once (the term runs
    /// it every `agent_secrets_sweep`); a failure is counted.
    pub async fn sweep(&self) -> Result<(), UpkeepError> {
        sweep_once(self)
            .await
            .inspect_err(|_| self.metrics.error("agent_secret"))
    }

    /// Follows the exchanged agent secrets bucket until `term`: an agent that exchanged its
    /// machine's boot secret moves that machine to the next generation at once (the sweep would,
    /// later).
    pub async fn follow_exchanges(self: Arc<Self>, term: CancellationToken) {
        use futures::StreamExt as _;
        while !term.is_cancelled() {
            let mut watch = match self.bus.agent_secrets_used.watch(">").await {
                Ok(w) => w,
                Err(e) => {
                    self.metrics.error("agent_secret");
                    warn!(error = %e, "cannot watch the exchanged agent secrets; retrying");
                    tokio::select! {
                        _ = term.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
            };
            loop {
                let entry = tokio::select! {
                    _ = term.cancelled() => return,
                    e = watch.next() => e,
                };
                match entry {
                    Some(Ok(entry)) if entry.operation == kv::Operation::Put => {
                        let owner = self.hardware.state().into_iter().find(|hw| {
                            agent_ids(&hw.spec).iter().any(|id| {
                                tink_bus::agent_token(id).ok().as_deref() == Some(&entry.key)
                            })
                        });
                        if let Some(hw) = owner {
                            self.observe(&hw);
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        warn!(error = %e, "exchanged agent secrets watch failed; watching again");
                        break;
                    }
                    None => break,
                }
            }
        }
    }
}

async fn sweep_once(secrets: &AgentSecrets) -> Result<(), UpkeepError> {
    // Every annotated Hardware's copy and entries, each as `sync_one` does (under its lock, from
    // its current copy).
    let mut wanted_tokens: HashSet<String> = HashSet::new();
    let mut wanted_copies: HashSet<String> = HashSet::new();
    let mut failed = 0usize;
    for hw in secrets.hardware.state() {
        if !hw.annotations().contains_key(AGENT_SECRET_ANNOTATION) {
            continue;
        }
        wanted_tokens.extend(
            agent_ids(&hw.spec)
                .iter()
                .filter_map(|id| tink_bus::agent_token(id).ok()),
        );
        wanted_copies.insert(copy_name(
            &hw.namespace().unwrap_or_default(),
            &hw.name_any(),
        ));
        if let Err(e) = sync_one(secrets, &hw).await {
            failed += 1;
            warn!(hardware = %hw.name_any(), error = %e, "cannot update the machine's agent secret");
        }
    }
    // Entries and exchanged entries of agents no annotated Hardware names.
    for bucket in [&secrets.bus.agent_secrets, &secrets.bus.agent_secrets_used] {
        let keys: HashSet<String> = bucket.keys().await?.try_collect().await?;
        for key in keys.iter().filter(|k| !wanted_tokens.contains(*k)) {
            bucket.delete(key).await?;
            debug!(key = %key, "stale agent secret entry removed");
        }
    }

    // Copies of Hardware this controller watches (all, or its namespace's) that no annotated
    // Hardware has.
    let api = copies(secrets);
    let stale: Vec<String> = api
        .list(&ListParams::default().labels(&format!("{COPY_LABEL}=true")))
        .await?
        .items
        .into_iter()
        .filter(|s| {
            secrets.config.namespace.as_deref().is_none_or(|ns| {
                s.labels().get(HARDWARE_NAMESPACE_LABEL).map(String::as_str) == Some(ns)
            })
        })
        .map(|s| s.name_any())
        .filter(|name| !wanted_copies.contains(name))
        .collect();
    for name in stale {
        if let Err(e) = delete_copy(&api, &name).await {
            failed += 1;
            warn!(copy = %name, error = %e, "cannot remove an agent secret copy");
        } else {
            info!(copy = %name, "agent secret copy removed");
        }
    }
    if failed > 0 {
        return Err(UpkeepError::Failed(failed));
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
