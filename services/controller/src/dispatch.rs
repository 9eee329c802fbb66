//! The dispatcher: which Pending Workflow goes to a machine now, and the claims that keep two
//! dispatches to one machine from being written at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use kube::ResourceExt as _;
use kube::runtime::reflector::{ObjectRef, Store};
use tink_api::v1alpha2::{Hardware, Workflow, WorkflowStatus};
use tink_workflow::{Candidate, WorkflowKey, agent_ids, pick_dispatches};

use crate::keys::key_of;
use crate::ledger::Ledger;
use crate::locks::lock;
use crate::presence::Presence;
use crate::wake::Wake;

/// The dispatcher's answer for one Workflow.
pub(crate) enum Choice<'a> {
    /// Dispatch to this agent (as it presented its id); hold the claim until the status is
    /// written.
    Go(String, Claim<'a>),
    /// Not now: the machine is busy, disconnected, or an older Workflow goes first (it was
    /// woken); something will wake this one.
    Wait,
    /// Another dispatch to the same machine is being written right now.
    Busy,
}

/// Releases the machine's claim when the dispatch is written (or failed).
pub(crate) struct Claim<'a> {
    dispatch: &'a Dispatch,
    ids: Vec<String>,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let mut claims = lock(&self.dispatch.claims);
        for id in &self.ids {
            claims.remove(id);
        }
    }
}

/// The machines' claims.
pub(crate) struct Dispatch {
    hardware: Store<Hardware>,
    /// Machine agent ids claimed by a dispatch whose status write is in flight.
    claims: Mutex<HashMap<String, WorkflowKey>>,
}

impl Dispatch {
    pub fn new(hardware: Store<Hardware>) -> Self {
        Self {
            hardware,
            claims: Mutex::new(HashMap::new()),
        }
    }

    /// Decides whether `w` (with the candidate `status`) is the Workflow to dispatch to its
    /// machine now: the machine is idle (nothing Scheduled, Running or Cancelling on it, no
    /// dispatch in flight), one of its agents is connected, and `w` is the oldest runnable
    /// Pending Workflow of that machine. Returns the agent id as the agent presented it, and a
    /// claim on the machine to hold until the status is written. When an older Workflow should
    /// go first, it is woken instead.
    pub fn choose_agent<'a>(
        &'a self,
        w: &Workflow,
        status: &WorkflowStatus,
        now: Timestamp,
        ledger: &Ledger,
        wake: &Wake,
        presence: &Presence,
    ) -> Choice<'a> {
        let Some(hw) = self.hardware_of(w) else {
            return Choice::Wait;
        };
        let machine = agent_ids(&hw.spec);
        let me = key_of(w);
        let mut claims = lock(&self.claims);
        if claimed_by_other(&claims, &machine, &me) {
            return Choice::Busy;
        }
        let candidates = candidates(w, status, &hw, ledger, wake);
        let connected: Vec<(String, String)> = machine
            .iter()
            .filter_map(|id| presence.connected(id).map(|p| (id.clone(), p)))
            .collect();
        let picks = pick_dispatches(&candidates, connected.iter().map(|(id, _)| id), now);
        let Some((key, agent)) = picks.into_iter().next() else {
            return Choice::Wait;
        };
        if key != me {
            drop(claims);
            wake.trigger(&key);
            return Choice::Wait;
        }
        let Some(presented) = connected
            .into_iter()
            .find(|(id, _)| *id == agent)
            .map(|(_, p)| p)
        else {
            return Choice::Wait;
        };
        for id in &machine {
            claims.insert(id.clone(), me.clone());
        }
        Choice::Go(
            presented,
            Claim {
                dispatch: self,
                ids: machine,
            },
        )
    }

    /// Whether `w` (with the candidate `status`) may take its boot steps before dispatch now
    /// (`spec.bootOptions`: they power-cycle the machine): the machine is idle (nothing
    /// Scheduled, Running or Cancelling on it, no dispatch in flight) and `w` is its oldest
    /// runnable Pending Workflow. No agent needs to be connected: the machine may be off, and
    /// the steps are what boots it. When an older Workflow should go first, it is woken.
    pub fn boot_turn(
        &self,
        w: &Workflow,
        status: &WorkflowStatus,
        now: Timestamp,
        ledger: &Ledger,
        wake: &Wake,
    ) -> BootTurn {
        let Some(hw) = self.hardware_of(w) else {
            return BootTurn::Wait;
        };
        let machine = agent_ids(&hw.spec);
        let me = key_of(w);
        if claimed_by_other(&lock(&self.claims), &machine, &me) {
            return BootTurn::Busy;
        }
        let candidates = candidates(w, status, &hw, ledger, wake);
        // Every agent id of the machine counted as connected: the pick is then the machine's
        // oldest runnable Workflow if the machine is idle, whatever is connected.
        let picks = pick_dispatches(&candidates, machine.iter(), now);
        match picks.into_iter().next() {
            Some((key, _)) if key == me => BootTurn::Mine(hw),
            Some((key, _)) => {
                wake.trigger(&key);
                BootTurn::Wait
            }
            None => BootTurn::Wait,
        }
    }
}

impl Dispatch {
    /// The cached Hardware `w` runs on, if it may get work: a discovered machine that is not
    /// approved never gets a dispatch (nor boot steps), whatever admitted the Workflow; its
    /// Workflows wait, and its approval (a Hardware change) wakes them.
    fn hardware_of(&self, w: &Workflow) -> Option<Arc<Hardware>> {
        let namespace = w.namespace().unwrap_or_default();
        self.hardware
            .get(&ObjectRef::new(&w.spec.hardware_ref.name).within(&namespace))
            .filter(|hw| hw.spec.approved())
    }
}

/// Whether a dispatch of another Workflow than `me` claims one of `machine`'s agent ids.
fn claimed_by_other(
    claims: &HashMap<String, WorkflowKey>,
    machine: &[String],
    me: &WorkflowKey,
) -> bool {
    machine
        .iter()
        .any(|id| claims.get(id).is_some_and(|k| k != me))
}

/// The dispatcher's answer for the boot steps of one Workflow.
pub(crate) enum BootTurn {
    /// Take them now; the Hardware as cached.
    Mine(Arc<Hardware>),
    /// Not now (the machine is busy, or another Workflow goes first); something wakes it.
    Wait,
    /// A dispatch to the same machine is being written right now.
    Busy,
}

/// The dispatch candidates of `w`'s machine: its sibling Workflows as this term last saw them,
/// and `w` itself with the candidate `status`.
fn candidates(
    w: &Workflow,
    status: &WorkflowStatus,
    hw: &Hardware,
    ledger: &Ledger,
    wake: &Wake,
) -> Vec<Candidate> {
    let namespace = w.namespace().unwrap_or_default();
    let me = key_of(w);
    let mut siblings = wake.workflows_of_hardware(&namespace, &w.spec.hardware_ref.name);
    siblings.retain(|s| key_of(s) != me);
    let mut candidates: Vec<Candidate> = ledger
        .fresh_all(&siblings)
        .iter()
        .map(|s| Candidate::from_workflow(s, Some(&hw.spec)))
        .collect();
    let mut mine = w.clone();
    mine.status = Some(status.clone());
    candidates.push(Candidate::from_workflow(&mine, Some(&hw.spec)));
    candidates
}
