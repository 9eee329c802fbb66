//! Workflows from inventory matches: the leader evaluates every `WorkflowRuleSet` against the
//! Hardware of its namespace and creates, for a machine that matches, the Workflow the rule set
//! describes, at most once per machine per generation of the rule set.
//!
//! # Who fires
//!
//! Only a Hardware that is approved (`spec.approved()`) and whose `status` holds an inventory
//! reported by its own authenticated agent (`authenticated_inventory()`: `inventorySource:
//! Agent`). An unapproved machine, or one whose only inventory is the enrollment's (taken
//! without credentials, so anyone on the network could have written it), is skipped with an
//! Event saying so, and fires as soon as it is approved and its agent has reported.
//!
//! # Once per machine per generation: the record on the Hardware
//!
//! After the Workflow is created, the Hardware gets the annotation
//! `workflowruleset.tinkerbell.org/<rule set>` = `<rule set uid>/<generation>` ([`record_key`];
//! a name longer than an annotation name allows is shortened with a hash). A machine carrying
//! the current uid and generation is never fired for again, so:
//! - the operator deleting the created Workflow does not bring it back (the record stays);
//! - the watch delivering a Hardware twice, or a resync, finds the record;
//! - a new generation of the rule set (its spec edited) has a new record value: matching
//!   machines get one new Workflow each; a deleted and re-created rule set of the same name has
//!   a new uid, so it fires again too;
//! - removing the annotation (`kubectl annotate hw M workflowruleset.tinkerbell.org/R-`) is how
//!   an operator asks for the same generation again.
//!
//! The Workflow's name is deterministic ([`workflow_name`]: rule set, Hardware, generation),
//! and it carries the labels [`RULE_LABEL`], [`RULE_GENERATION_LABEL`] and [`RULE_UID_LABEL`].
//! A leader that dies between creating the Workflow and writing the record finds, on the next
//! pass, the create answered `AlreadyExists` by its own Workflow (the labels say so) and only
//! writes the record: no second Workflow. (If the operator deleted that Workflow in exactly that
//! window, it is created once more: the record is the only memory, and it was not written yet.)
//! A Workflow of that name that is not this rule set's (labels differ) is never touched: the
//! machine is skipped with a Warning Event.
//!
//! Created Workflows have no owner reference: deleting a rule set must not cancel the
//! provisioning runs it started. Records of a deleted rule set stay on the Hardware (a few
//! bytes; a re-created rule set has another uid).
//!
//! # When it runs
//!
//! A change of a Hardware evaluates that machine against every rule set of its namespace at
//! once; a change of a rule set (and every [`PASS_PERIOD`] for rule sets whose namespace had a
//! Hardware change, plus every [`RESYNC`] for all) runs a full pass over the namespace's
//! Hardware, which also writes the rule set's status (counts by outcome, `Valid` and `Ready`
//! conditions). Work goes through a bounded queue; when it is full, the change is not lost: a
//! full pass of every rule set is scheduled instead. Evaluation is in memory (the term's
//! Hardware cache); only a create, a record and a status write reach the API server, and a
//! status is written only when it changed.
//!
//! Without the WorkflowRuleSet CRD installed (an older deploy/), the rule sets' watch retries
//! with back-off and logs each failure; nothing else of the controller waits for it.
//!
//! # Events
//!
//! Every match and every skip is explained on the Hardware (the match also on the rule set):
//! `RuleMatched` (which rule, which Workflow), `RuleSkipped` (not approved; no authenticated
//! inventory; no rule matched, with each rule's first failing condition and the values found;
//! already created for this generation), `RuleInvalid` on a rule set whose patterns do not
//! compile (stored past the webhook). An explanation is published when it changes for a (rule
//! set generation, Hardware) pair, not on every pass; a new leader explains each pair once
//! more. Events go through the term's bounded Event queue, which drops (and counts) beyond its
//! capacity rather than slowing the controller: with many machines and rule sets, the rule
//! set's status counts are the summary to read.

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt as _};
use serde_json::json;
use tink_api::v1alpha2::{
    Hardware, LocalObjectReference, Workflow, WorkflowRuleSet, WorkflowRuleSetStatus, WorkflowSpec,
    rule_set_conditions,
};
use tink_rules::{Evaluation, RuleSet};
use tink_workflow::{EventReason, EventType};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::error::Error;
use crate::locks::lock;
use crate::metrics::Metrics;
use crate::recorder::KubeEvents;
use crate::tasks::Tasks;

/// The label naming the rule set that created a Workflow (shortened like [`record_key`] when
/// the name is longer than a label value allows).
pub const RULE_LABEL: &str = "tinkerbell.org/rule";
/// The label holding the rule set generation a Workflow was created for.
pub const RULE_GENERATION_LABEL: &str = "tinkerbell.org/rule-generation";
/// The label holding the uid of the rule set that created a Workflow.
pub const RULE_UID_LABEL: &str = "tinkerbell.org/rule-uid";
/// The annotation on a created Workflow naming the rule that matched.
pub const MATCHED_RULE_ANNOTATION: &str = "tinkerbell.org/matched-rule";
/// The prefix of the record annotations on Hardware.
pub const RECORD_PREFIX: &str = "workflowruleset.tinkerbell.org/";

/// How often rule sets whose namespace saw Hardware changes get a full pass (status counts).
pub const PASS_PERIOD: Duration = Duration::from_secs(2);
/// How often every rule set gets a full pass anyway (the safety net for a lost wake-up).
pub const RESYNC: Duration = Duration::from_secs(300);
/// The work queue's bound.
const QUEUE: usize = 1024;
/// The explanations remembered (one per rule set and Hardware pair); beyond it the memory is
/// cleared and each pair is explained once more.
const MAX_EXPLAINED: usize = 1_000_000;

/// `name` if it fits in `max` characters, else its first characters, `-` and 10 hex digits of a
/// hash of the whole (deterministic across processes: FNV-1a).
fn shortened(name: &str, max: usize) -> String {
    if name.len() <= max {
        return name.to_string();
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let keep = max - 11;
    let head = name[..keep].trim_end_matches(['-', '.']);
    format!("{head}-{:010x}", h & 0xff_ffff_ffff)
}

/// The Hardware annotation that records what the rule set `name` created.
pub fn record_key(rule_set: &str) -> String {
    format!("{RECORD_PREFIX}{}", shortened(rule_set, 63))
}

/// The record's value: the rule set's uid and generation.
pub fn record_value(uid: &str, generation: i64) -> String {
    format!("{uid}/{generation}")
}

/// The name of the Workflow rule set `rule_set` creates for Hardware `hardware` in
/// `generation`: `<rule set>-<hardware>-g<generation>`, shortened with a hash beyond 253
/// characters. Both names are DNS subdomains, so the result is one.
pub fn workflow_name(rule_set: &str, hardware: &str, generation: i64) -> String {
    shortened(&format!("{rule_set}-{hardware}-g{generation}"), 253)
}

/// What a rule set does with one Hardware.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    /// Created (or to create) for this generation: the rule that matched.
    Matched(String),
    /// The record says the Workflow was created for this generation.
    AlreadyCreated,
    /// `spec.discovery.approved` is false.
    NotApproved,
    /// No inventory from the machine's authenticated agent (the detail says which case).
    NoAuthenticatedInventory(&'static str),
    /// No rule matched: the explanation.
    NoMatch(String),
    /// A rule matched but the Workflow or the record could not be written (retried on the next
    /// pass; not counted as created).
    NotYetCreated,
}

/// Evaluates one rule set (current uid and generation) against one Hardware: pure.
fn verdict(rules: &RuleSet, record: &str, value: &str, hw: &Hardware) -> Verdict {
    if hw.annotations().get(record).map(String::as_str) == Some(value) {
        return Verdict::AlreadyCreated;
    }
    if !hw.spec.approved() {
        return Verdict::NotApproved;
    }
    let Some(status) = hw.status.as_ref() else {
        return Verdict::NoAuthenticatedInventory("its agent has not reported an inventory yet");
    };
    let Some(inventory) = status.authenticated_inventory() else {
        return Verdict::NoAuthenticatedInventory(
            if status
                .attributes
                .as_ref()
                .is_some_and(|a| a.in_band.is_some())
            {
                "its inventory was taken at enrollment, without credentials (inventorySource is not Agent); it fires once the machine's authenticated agent reports"
            } else {
                "its agent has not reported an inventory yet"
            },
        );
    };
    match rules.evaluate(inventory) {
        Evaluation::Matched { rule } => Verdict::Matched(rule),
        Evaluation::NoMatch { reasons } => Verdict::NoMatch(reasons.join("; ")),
    }
}

/// A rule set's compiled rules, or why they do not compile.
type Compiled = Result<Arc<RuleSet>, String>;

enum Work {
    Hardware(ObjectRef<Hardware>),
    RuleSet(ObjectRef<WorkflowRuleSet>),
}

/// The rule sets of the leader's term.
pub(crate) struct Rules {
    client: Client,
    metrics: Metrics,
    kube_events: KubeEvents,
    hardware: Store<Hardware>,
    rule_sets: Store<WorkflowRuleSet>,
    queue: mpsc::Sender<Work>,
    /// A change could not be queued: run a full pass of every rule set.
    overflowed: AtomicBool,
    /// Namespaces with Hardware changes since their rule sets' last full pass.
    dirty: Mutex<HashSet<String>>,
    /// Compiled rules by rule set uid: the generation and the result.
    compiled: Mutex<HashMap<String, (i64, Compiled)>>,
    /// The last explanation published per (rule set uid, Hardware uid): a hash of the verdict
    /// and generation.
    explained: Mutex<HashMap<(String, String), u64>>,
}

/// Starts the rule sets' watch and worker in the term's `group`; `hardware` is the term's
/// Hardware cache, which must call [`Rules::observe`] for every Hardware change.
pub(crate) fn start(
    client: Client,
    namespace: Option<&str>,
    metrics: Metrics,
    kube_events: KubeEvents,
    hardware: Store<Hardware>,
    group: &Tasks,
    term: CancellationToken,
) -> Arc<Rules> {
    let (rule_sets, writer) = reflector::store::<WorkflowRuleSet>();
    let (tx, rx) = mpsc::channel(QUEUE);
    let rules = Arc::new(Rules {
        client: client.clone(),
        metrics,
        kube_events,
        hardware,
        rule_sets,
        queue: tx,
        overflowed: AtomicBool::new(false),
        dirty: Mutex::new(HashSet::new()),
        compiled: Mutex::new(HashMap::new()),
        explained: Mutex::new(HashMap::new()),
    });
    let api: Api<WorkflowRuleSet> = match namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    {
        let (rules, term) = (rules.clone(), term.clone());
        group.spawn_critical("workflow rule sets watch", async move {
            use futures::StreamExt as _;
            let stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .reflect(writer)
                .applied_objects();
            let mut stream = std::pin::pin!(stream);
            loop {
                tokio::select! {
                    () = term.cancelled() => return Ok::<(), Error>(()),
                    next = stream.next() => match next {
                        Some(Ok(rs)) => {
                            let at = ObjectRef::from_obj(&rs);
                            rules.enqueue(Work::RuleSet(at));
                        }
                        Some(Err(e)) => {
                            rules.metrics.error("workflow_rules");
                            warn!(error = %e, "WorkflowRuleSet watch error; retrying");
                        }
                        None => return Ok(()),
                    },
                }
            }
        });
    }
    {
        let rules = rules.clone();
        group.spawn_critical("workflow rules", async move {
            rules.run(rx, term).await;
            Ok(())
        });
    }
    rules
}

impl Rules {
    /// A Hardware changed: evaluate it against its namespace's rule sets.
    pub fn observe(&self, hw: &Hardware) {
        self.enqueue(Work::Hardware(ObjectRef::from_obj(hw)));
    }

    fn enqueue(&self, work: Work) {
        if self.queue.try_send(work).is_err() {
            self.metrics.error("workflow_rules_queue_full");
            self.overflowed.store(true, Ordering::Relaxed);
        }
    }

    async fn run(&self, mut rx: mpsc::Receiver<Work>, term: CancellationToken) {
        // Nothing is decided before both caches are complete (a machine missing from a partial
        // cache would be counted wrong, never fired twice: the record guards that).
        tokio::select! {
            () = term.cancelled() => return,
            _ = async {
                until_ready(&self.hardware).await;
                until_ready(&self.rule_sets).await;
            } => {}
        }
        debug!("rule sets and Hardware caches ready: first full pass");
        self.full_pass_all().await;
        let mut passes = tokio::time::interval(PASS_PERIOD);
        let mut resync = tokio::time::interval(RESYNC);
        resync.reset();
        loop {
            tokio::select! {
                () = term.cancelled() => return,
                work = rx.recv() => match work {
                    Some(Work::Hardware(at)) => self.hardware_changed(&at).await,
                    Some(Work::RuleSet(at)) => {
                        if let Some(rs) = self.rule_sets.get(&at) {
                            self.full_pass(&rs).await;
                        }
                    }
                    None => return,
                },
                _ = passes.tick() => {
                    if self.overflowed.swap(false, Ordering::Relaxed) {
                        self.full_pass_all().await;
                        continue;
                    }
                    let dirty: Vec<String> = lock(&self.dirty).drain().collect();
                    for ns in dirty {
                        for rs in self.rule_sets.state() {
                            if rs.namespace().as_deref() == Some(ns.as_str()) {
                                self.full_pass(&rs).await;
                            }
                        }
                    }
                }
                _ = resync.tick() => self.full_pass_all().await,
            }
        }
    }

    async fn full_pass_all(&self) {
        lock(&self.dirty).clear();
        for rs in self.rule_sets.state() {
            self.full_pass(&rs).await;
        }
    }

    async fn hardware_changed(&self, at: &ObjectRef<Hardware>) {
        let Some(hw) = self.hardware.get(at) else {
            return;
        };
        let ns = hw.namespace().unwrap_or_default();
        lock(&self.dirty).insert(ns.clone());
        for rs in self.rule_sets.state() {
            if rs.namespace().as_deref() != Some(ns.as_str()) {
                continue;
            }
            if let Some(rules) = self.compiled_rules(&rs) {
                self.apply(&rs, &rules, &hw).await;
            }
        }
    }

    /// The rule set's compiled rules for its current generation; `None` (with a `RuleInvalid`
    /// Event and a `Valid: False` status) when they do not compile, or it is being deleted.
    fn compiled_rules(&self, rs: &WorkflowRuleSet) -> Option<Arc<RuleSet>> {
        if rs.metadata.deletion_timestamp.is_some() {
            return None;
        }
        let uid = rs.uid().unwrap_or_default();
        let generation = rs.metadata.generation.unwrap_or_default();
        let mut cache = lock(&self.compiled);
        if let Some((g, c)) = cache.get(&uid)
            && *g == generation
        {
            return c.as_ref().ok().cloned();
        }
        let c = tink_rules::compile(&rs.spec)
            .map(Arc::new)
            .map_err(|e| tink_rules::join_errors(&e));
        if let Err(message) = &c {
            self.kube_events.about(
                rs,
                EventType::Warning,
                EventReason::RuleInvalid,
                &format!("generation {generation} is not evaluated: {message}"),
            );
        }
        cache.insert(uid, (generation, c.clone()));
        c.ok()
    }

    /// Evaluates and acts on one pair; returns the verdict (`Matched` once the Workflow and its
    /// record are written, `NotYetCreated` when either failed).
    async fn apply(&self, rs: &WorkflowRuleSet, rules: &RuleSet, hw: &Hardware) -> Verdict {
        let uid = rs.uid().unwrap_or_default();
        let generation = rs.metadata.generation.unwrap_or_default();
        let record = record_key(&rs.name_any());
        let value = record_value(&uid, generation);
        let v = verdict(rules, &record, &value, hw);
        if hw.metadata.deletion_timestamp.is_some() {
            return v;
        }
        if let Verdict::Matched(rule) = &v {
            match self.create(rs, hw, rule, &record, &value).await {
                Ok(()) => {}
                Err(message) => {
                    // Not explained as a skip: retried on the next pass.
                    debug!(hardware = %hw.name_any(), %message, "rule set create not done");
                    return Verdict::NotYetCreated;
                }
            }
        }
        let explanation = match &v {
            Verdict::Matched(_) | Verdict::NotYetCreated => None, // the create explained it
            Verdict::AlreadyCreated => Some(format!(
                "WorkflowRuleSet {} generation {generation}: skipped, its Workflow was already created for this generation (annotation {record}; remove it to run again)",
                rs.name_any()
            )),
            Verdict::NotApproved => Some(format!(
                "WorkflowRuleSet {} generation {generation}: skipped, the machine is not approved (spec.discovery.approved)",
                rs.name_any()
            )),
            Verdict::NoAuthenticatedInventory(why) => Some(format!(
                "WorkflowRuleSet {} generation {generation}: skipped, no inventory from the machine's authenticated agent: {why}",
                rs.name_any()
            )),
            Verdict::NoMatch(why) => Some(format!(
                "WorkflowRuleSet {} generation {generation}: skipped, no rule matched: {why}",
                rs.name_any()
            )),
        };
        if let Some(message) = explanation {
            self.explain(rs, hw, generation, &message);
        }
        v
    }

    /// Publishes a `RuleSkipped` Event on the Hardware unless the same was published last.
    fn explain(&self, rs: &WorkflowRuleSet, hw: &Hardware, generation: i64, message: &str) {
        let mut h = DefaultHasher::new();
        (generation, message).hash(&mut h);
        let digest = h.finish();
        let key = (rs.uid().unwrap_or_default(), hw.uid().unwrap_or_default());
        {
            let mut explained = lock(&self.explained);
            if explained.get(&key) == Some(&digest) {
                return;
            }
            if explained.len() >= MAX_EXPLAINED {
                explained.clear();
            }
            explained.insert(key, digest);
        }
        self.kube_events
            .about(hw, EventType::Normal, EventReason::RuleSkipped, message);
    }

    /// Creates the Workflow (or finds it created by an earlier attempt) and writes the record.
    async fn create(
        &self,
        rs: &WorkflowRuleSet,
        hw: &Hardware,
        rule: &str,
        record: &str,
        value: &str,
    ) -> Result<(), String> {
        let ns = hw.namespace().unwrap_or_default();
        let uid = rs.uid().unwrap_or_default();
        let generation = rs.metadata.generation.unwrap_or_default();
        let name = workflow_name(&rs.name_any(), &hw.name_any(), generation);
        let rule_label = shortened(&rs.name_any(), 63);
        let mut wf = Workflow::new(
            &name,
            WorkflowSpec {
                hardware_ref: LocalObjectReference::new(hw.name_any()),
                template_ref: rs.spec.workflow.template_ref.clone(),
                template_data: rs.spec.workflow.template_data.clone(),
                timeout: rs.spec.workflow.timeout.clone(),
                boot_options: None,
            },
        );
        wf.metadata.namespace = Some(ns.clone());
        wf.metadata.labels = Some(
            [
                (RULE_LABEL.to_string(), rule_label.clone()),
                (RULE_GENERATION_LABEL.to_string(), generation.to_string()),
                (RULE_UID_LABEL.to_string(), uid.clone()),
            ]
            .into(),
        );
        wf.metadata.annotations =
            Some([(MATCHED_RULE_ANNOTATION.to_string(), rule.to_string())].into());
        let workflows: Api<Workflow> = Api::namespaced(self.client.clone(), &ns);
        self.metrics.write("workflow_rules");
        let created = match workflows.create(&PostParams::default(), &wf).await {
            Ok(_) => true,
            Err(kube::Error::Api(e)) if e.code == 409 => {
                // An earlier attempt (a leader that died before the record), or someone else's.
                let existing = workflows.get_opt(&name).await.map_err(|e| e.to_string())?;
                let ours = existing.as_ref().is_some_and(|w| {
                    w.labels().get(RULE_UID_LABEL) == Some(&uid)
                        && w.labels().get(RULE_GENERATION_LABEL) == Some(&generation.to_string())
                });
                if !ours {
                    self.metrics.error("workflow_rules");
                    self.explain(
                        rs,
                        hw,
                        generation,
                        &format!(
                            "WorkflowRuleSet {} generation {generation}: rule {rule} matched but a Workflow {name} that this rule set did not create exists; nothing created",
                            rs.name_any()
                        ),
                    );
                    return Err(format!("Workflow {name} exists and is not ours"));
                }
                false
            }
            Err(e) => {
                self.metrics.error("workflow_rules");
                warn!(workflow = %format!("{ns}/{name}"), error = %e, "cannot create the rule set's Workflow; retried on the next pass");
                return Err(e.to_string());
            }
        };
        // The record: a merge patch of one annotation (nothing else of the Hardware changes).
        let hardware: Api<Hardware> = Api::namespaced(self.client.clone(), &ns);
        let patch = json!({"metadata": {"annotations": {record: value}}});
        self.metrics.write("workflow_rules");
        if let Err(e) = hardware
            .patch(
                &hw.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            self.metrics.error("workflow_rules");
            warn!(hardware = %format!("{ns}/{}", hw.name_any()), error = %e, "cannot record the created Workflow on the Hardware; recorded on the next pass");
            return Err(e.to_string());
        }
        let verb = if created {
            "created"
        } else {
            "found (created earlier)"
        };
        let message = format!(
            "WorkflowRuleSet {} generation {generation}: rule {rule} matched; Workflow {name} {verb} from Template {}",
            rs.name_any(),
            rs.spec.workflow.template_ref.name
        );
        info!(hardware = %format!("{ns}/{}", hw.name_any()), workflow = %name, rule, "rule set matched");
        self.kube_events
            .about(hw, EventType::Normal, EventReason::RuleMatched, &message);
        self.kube_events.about(
            rs,
            EventType::Normal,
            EventReason::RuleMatched,
            &format!("Hardware {}: {message}", hw.name_any()),
        );
        Ok(())
    }

    /// Evaluates the rule set against every Hardware of its namespace, acts, and writes its
    /// status when it changed.
    async fn full_pass(&self, rs: &WorkflowRuleSet) {
        if rs.metadata.deletion_timestamp.is_some() {
            return;
        }
        let ns = rs.namespace().unwrap_or_default();
        let generation = rs.metadata.generation.unwrap_or_default();
        debug!(rule_set = %format!("{ns}/{}", rs.name_any()), generation, "full pass");
        let mut status = WorkflowRuleSetStatus {
            observed_generation: Some(generation),
            ..Default::default()
        };
        let valid = match self.compiled_rules(rs) {
            Some(rules) => {
                for hw in self.hardware.state() {
                    if hw.namespace().as_deref() != Some(ns.as_str()) {
                        continue;
                    }
                    status.evaluated += 1;
                    match self.apply(rs, &rules, &hw).await {
                        Verdict::Matched(_) => status.created += 1,
                        Verdict::AlreadyCreated => status.created += 1,
                        Verdict::NotApproved => status.not_approved += 1,
                        Verdict::NoAuthenticatedInventory(_) => {
                            status.no_authenticated_inventory += 1
                        }
                        Verdict::NoMatch(_) | Verdict::NotYetCreated => {}
                    }
                }
                Ok(())
            }
            None => {
                let message = lock(&self.compiled)
                    .get(&rs.uid().unwrap_or_default())
                    .and_then(|(_, c)| c.as_ref().err().cloned())
                    .unwrap_or_default();
                Err(message)
            }
        };
        // `matched` counts machines matching now: those already created that still match are
        // counted by a second look (cheap: in memory).
        if let (Ok(()), Some(rules)) = (&valid, self.compiled_rules(rs)) {
            status.matched = self
                .hardware
                .state()
                .iter()
                .filter(|hw| hw.namespace().as_deref() == Some(ns.as_str()))
                .filter(|hw| hw.spec.approved())
                .filter(|hw| {
                    hw.status
                        .as_ref()
                        .and_then(|s| s.authenticated_inventory())
                        .is_some_and(|inv| rules.first_match(inv).is_some())
                })
                .count() as u32;
        }
        let previous = rs.status.clone().unwrap_or_default();
        status.conditions = vec![
            condition(
                &previous,
                rule_set_conditions::VALID,
                valid.is_ok(),
                if valid.is_ok() {
                    "Compiled"
                } else {
                    "InvalidPattern"
                },
                valid
                    .as_ref()
                    .err()
                    .cloned()
                    .unwrap_or_else(|| "the rules compile".into()),
                generation,
            ),
            condition(
                &previous,
                rule_set_conditions::READY,
                valid.is_ok(),
                if valid.is_ok() {
                    "Evaluated"
                } else {
                    "InvalidPattern"
                },
                if valid.is_ok() {
                    format!("{} machines evaluated", status.evaluated)
                } else {
                    "not evaluated: the rules do not compile".into()
                },
                generation,
            ),
        ];
        if previous == status {
            return;
        }
        let api: Api<WorkflowRuleSet> = Api::namespaced(self.client.clone(), &ns);
        let patch = json!({"status": status});
        self.metrics.write("workflow_rules_status");
        if let Err(e) = api
            .patch_status(
                &rs.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            self.metrics.error("workflow_rules");
            warn!(rule_set = %format!("{ns}/{}", rs.name_any()), error = %e, "cannot write the rule set's status; written on the next pass");
        }
    }
}

/// Waits until `store` is filled. kube-runtime's `wait_until_ready` keeps one waker (a oneshot
/// receiver shared by every clone of the store): when the engine's readiness check also waits
/// on the Hardware cache, only one of the two waiters is woken. So the wait is polled again
/// every 200 ms, each poll registering this task's waker afresh.
async fn until_ready<K>(store: &Store<K>)
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    // `Err` inside: the writer is gone (the term is ending); the caller's select stops it.
    while tokio::time::timeout(Duration::from_millis(200), store.wait_until_ready())
        .await
        .is_err()
    {}
}

/// A condition, keeping the previous transition time when its status did not change.
fn condition(
    previous: &WorkflowRuleSetStatus,
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    generation: i64,
) -> Condition {
    let status = if ok { "True" } else { "False" };
    let last = previous
        .conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| Time(jiff::Timestamp::now()));
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation: Some(generation),
        last_transition_time: last,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_deterministic_and_bounded() {
        assert_eq!(workflow_name("dell", "m-1", 3), "dell-m-1-g3");
        let long = "r".repeat(200);
        let a = workflow_name(&long, &"h".repeat(200), 1);
        assert_eq!(a.len(), 253);
        assert_eq!(a, workflow_name(&long, &"h".repeat(200), 1));
        assert_ne!(a, workflow_name(&long, &"h".repeat(200), 2));
        assert_eq!(record_key("dell"), "workflowruleset.tinkerbell.org/dell");
        let k = record_key(&"x".repeat(100));
        assert_eq!(k.len(), RECORD_PREFIX.len() + 63);
        assert_ne!(record_key(&"x".repeat(100)), record_key(&"x".repeat(101)));
    }

    fn hw(approved: bool, source: Option<&str>, annotations: &[(&str, &str)]) -> Hardware {
        let mut h: Hardware = tink_api::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": "m", "namespace": "ns",
                "annotations": annotations.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>()},
            "spec": {"discovery": {"approved": approved}},
        }))
        .expect("hardware");
        if let Some(source) = source {
            h.status = Some(
                tink_api::from_value(json!({
                    "attributes": {"inBand": {"chassis": {"vendor": "Dell Inc."}}},
                    "inventorySource": source,
                }))
                .expect("status"),
            );
        }
        h
    }

    #[test]
    fn verdicts() {
        let spec = tink_api::from_value(json!({
            "rules": [{"match": {"chassis.vendor": {"prefix": "Dell"}}}],
            "workflow": {"templateRef": {"name": "t"}},
        }))
        .expect("spec");
        let rules = tink_rules::compile(&spec).expect("compiles");
        let key = record_key("r");
        let v = |h: &Hardware| verdict(&rules, &key, "uid/2", h);
        assert_eq!(
            v(&hw(true, Some("Agent"), &[])),
            Verdict::Matched("rules[0]".into())
        );
        assert_eq!(v(&hw(false, Some("Agent"), &[])), Verdict::NotApproved);
        assert!(
            matches!(v(&hw(true, Some("Enrollment"), &[])), Verdict::NoAuthenticatedInventory(m) if m.contains("enrollment"))
        );
        assert!(matches!(
            v(&hw(true, None, &[])),
            Verdict::NoAuthenticatedInventory(_)
        ));
        assert_eq!(
            v(&hw(true, Some("Agent"), &[(&key, "uid/2")])),
            Verdict::AlreadyCreated
        );
        // Another generation, or another rule set of the same name: fires again.
        assert!(matches!(
            v(&hw(true, Some("Agent"), &[(&key, "uid/1")])),
            Verdict::Matched(_)
        ));
        assert!(matches!(
            v(&hw(true, Some("Agent"), &[(&key, "other/2")])),
            Verdict::Matched(_)
        ));
    }
}
