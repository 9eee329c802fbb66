//! The pure dispatch choice: which Pending Workflow goes to which connected, idle agent.

use std::collections::BTreeSet;

use jiff::Timestamp;
use tink_api::v1alpha2::{HardwareSpec, Workflow, WorkflowState};

use crate::id::WorkflowKey;

/// The canonical form of an agent id ([`tink_api::AgentId::normalize`]): agent ids are the MACs
/// of the machine (`aa:bb:cc:dd:ee:ff`), the keys of Hardware `spec.networkInterfaces`. A string
/// that is no agent id in any spelling is only trimmed and lower-cased (it then matches no
/// agent: the servers never admit it).
pub fn normalize_agent_id(id: &str) -> String {
    tink_api::AgentId::normalize(id)
        .map(tink_api::AgentId::into_string)
        .unwrap_or_else(|_| id.trim().to_ascii_lowercase())
}

/// The agent ids a machine's agent may present: the keys of its Hardware's
/// `spec.networkInterfaces`, normalised, sorted, without duplicates or empty keys.
pub fn agent_ids(hardware: &HardwareSpec) -> Vec<String> {
    let ids: BTreeSet<String> = hardware
        .network_interfaces
        .keys()
        .map(|k| normalize_agent_id(k))
        .filter(|k| !k.is_empty())
        .collect();
    ids.into_iter().collect()
}

/// What the dispatcher needs to know about one Workflow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Namespace and name.
    pub key: WorkflowKey,
    /// `metadata.creationTimestamp`: older Workflows go first.
    pub created: Timestamp,
    /// `status.state`.
    pub state: WorkflowState,
    /// Whether `status.actions` is set (the Template rendered).
    pub prepared: bool,
    /// Whether `metadata.deletionTimestamp` is set (it is being canceled, never dispatched).
    pub deleting: bool,
    /// `status.nextAttemptAt`: not dispatched before this time.
    pub next_attempt_at: Option<Timestamp>,
    /// `status.agentId`, normalised: the agent a Scheduled, Running or Cancelling Workflow
    /// occupies.
    pub agent_id: Option<String>,
    /// The agent ids of its Hardware ([`agent_ids`]); empty when the Hardware is unknown.
    pub machine: Vec<String>,
}

impl Candidate {
    /// The candidate for a Workflow and its Hardware (`None` when the Hardware is missing).
    /// A Workflow without a creation timestamp sorts last; one without namespace or name
    /// (never the case for objects read from the API server) gets empty ones.
    pub fn from_workflow(workflow: &Workflow, hardware: Option<&HardwareSpec>) -> Self {
        let meta = &workflow.metadata;
        let status = workflow.status.clone().unwrap_or_default();
        Self {
            key: WorkflowKey::new(
                meta.namespace.clone().unwrap_or_default(),
                meta.name.clone().unwrap_or_default(),
            ),
            created: meta
                .creation_timestamp
                .as_ref()
                .map_or(Timestamp::MAX, |t| t.0),
            state: status.state,
            prepared: !status.actions.is_empty(),
            deleting: meta.deletion_timestamp.is_some(),
            next_attempt_at: status.next_attempt_at.map(|t| t.0),
            agent_id: status
                .agent_id
                .as_deref()
                .map(normalize_agent_id)
                .filter(|a| !a.is_empty()),
            machine: hardware.map(agent_ids).unwrap_or_default(),
        }
    }

    /// Whether the Workflow occupies its agent (and machine).
    pub fn is_active(&self) -> bool {
        matches!(
            self.state,
            WorkflowState::Scheduled | WorkflowState::Running | WorkflowState::Cancelling
        )
    }

    /// Whether the Workflow may be dispatched at `now` (ignoring agent availability).
    pub fn is_runnable(&self, now: Timestamp) -> bool {
        self.state == WorkflowState::Pending
            && self.prepared
            && !self.deleting
            && !self.machine.is_empty()
            && self.next_attempt_at.is_none_or(|t| t <= now)
    }
}

/// Chooses dispatches: each connected, idle agent receives its oldest runnable Pending
/// Workflow, one Workflow per agent.
///
/// - An agent is idle when no Workflow is `Scheduled`, `Running` or `Cancelling` on it, nor
///   on any other agent id of the same machine (a machine runs one Workflow at a time,
///   whichever of its interfaces its agent presents).
/// - Candidates go oldest first (creation time, then namespace, then name); a Workflow
///   waiting out a rejection back-off (`next_attempt_at` after `now`) is skipped, and a newer
///   one for the same machine may go instead.
/// - A Workflow goes to the first (lowest) of its machine's agent ids that is connected.
///
/// `connected` holds the agent ids present on the bus (any case). Returns (Workflow, agent
/// id) pairs in the order chosen; step each with [`crate::Input::Dispatch`].
pub fn pick_dispatches<S: AsRef<str>>(
    candidates: &[Candidate],
    connected: impl IntoIterator<Item = S>,
    now: Timestamp,
) -> Vec<(WorkflowKey, String)> {
    let connected: BTreeSet<String> = connected
        .into_iter()
        .map(|a| normalize_agent_id(a.as_ref()))
        .collect();
    let mut busy: BTreeSet<&str> = BTreeSet::new();
    for c in candidates.iter().filter(|c| c.is_active()) {
        if let Some(agent) = c.agent_id.as_deref() {
            busy.insert(agent);
        }
        busy.extend(c.machine.iter().map(String::as_str));
    }
    let mut runnable: Vec<&Candidate> = candidates.iter().filter(|c| c.is_runnable(now)).collect();
    runnable.sort_by(|a, b| (a.created, &a.key).cmp(&(b.created, &b.key)));

    let mut chosen = Vec::new();
    for c in runnable {
        if c.machine.iter().any(|id| busy.contains(id.as_str())) {
            continue;
        }
        let Some(agent) = c.machine.iter().find(|id| connected.contains(id.as_str())) else {
            continue;
        };
        chosen.push((c.key.clone(), agent.clone()));
        busy.extend(c.machine.iter().map(String::as_str));
    }
    chosen
}
