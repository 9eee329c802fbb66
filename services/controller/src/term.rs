//! One leadership term's context: the components the reconciler and the events consumer share,
//! each owning its state, wired together here; and the one read-step-apply loop both run
//! ([`Term::step_and_apply`]).
//!
//! - [`Ledger`]: the freshest view of each Workflow (what this term wrote, over the cache);
//! - [`Wake`]: which Workflows a change concerns, and the reconciler's trigger queue;
//! - [`Presence`]: which agents are connected;
//! - [`Dispatch`]: which Pending Workflow goes to a machine, and the machines' claims;
//! - [`Writes`]: status and finalizer writes;
//! - [`Effects`]: commands and verdicts published on the bus;
//! - [`KubeEvents`]: the queue of Kubernetes Events.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use jiff::Timestamp;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt as _};
use tink_api::v1alpha2::{Hardware, Template, Workflow, WorkflowStatus};
use tink_hardware_index::Index;
use tink_workflow::{Effect, StepContext, Transition, WorkflowKey};
use tokio::sync::mpsc;

use crate::boot::Boot;
use crate::config::ControllerConfig;
use crate::dispatch::{BootTurn, Choice, Dispatch};
use crate::effects::Effects;
use crate::error::StepError;
use crate::keys::{has_finalizer, is_active, ref_of};
use crate::ledger::Ledger;
use crate::metrics::Metrics;
use crate::presence::Presence;
use crate::recorder::KubeEvents;
use crate::wake::Wake;
use crate::writes::Writes;

/// What the caller of [`Term::step_and_apply`] decided for the Workflow it was given.
// Returned once per attempt and matched at once, never stored: boxing the transition would buy
// nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Plan<A, D> {
    /// Write this transition, then hand `A` back with the Workflow as written.
    Apply(Transition, A),
    /// Nothing to write: done, with `D`.
    Done(D),
    /// Read the Workflow from the API server and decide again (a retry).
    Reread,
}

/// How [`Term::step_and_apply`] ended.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Stepped<A, D> {
    /// The transition is applied.
    Applied {
        /// The transition, and the Workflow as written.
        transition: Transition,
        written: Arc<Workflow>,
        value: A,
    },
    /// The caller decided there was nothing to write.
    Done(D),
    /// The Workflow no longer exists.
    Gone,
    /// Every attempt ran into a conflict (or asked for a re-read).
    Exhausted,
}

/// A failed [`Term::step_and_apply`]: the error, and the Workflow it was about when it had been
/// read (a failed read has none).
pub(crate) struct Failed {
    pub error: StepError,
    pub workflow: Option<Arc<Workflow>>,
}

/// The state one leadership term shares between the reconciler, the events consumer and the
/// presence watcher.
pub(crate) struct Term {
    pub config: ControllerConfig,
    pub metrics: Metrics,
    pub templates: Store<Template>,
    pub hardware: Store<Hardware>,
    pub ledger: Arc<Ledger>,
    pub wake: Wake,
    pub presence: Presence,
    pub dispatch: Dispatch,
    pub writes: Writes,
    pub effects: Effects,
    pub kube_events: KubeEvents,
    /// The boot steps of `spec.bootOptions` (BMC Jobs, the Hardware's netboot toggle).
    pub boot: Boot,
    /// Whether the events that were stored when this term bound its consumer are all applied.
    /// Until then no Resume, timeout or verdict acts on an active Workflow: an outage's
    /// backlog may hold its end.
    backlog_applied: AtomicBool,
}

impl Term {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Client,
        config: ControllerConfig,
        metrics: Metrics,
        workflows: Store<Workflow>,
        templates: Store<Template>,
        hardware: Store<Hardware>,
        hardware_index: Arc<Index<Hardware>>,
        bus: tink_bus::Bus,
        triggers: mpsc::Sender<ObjectRef<Workflow>>,
        kube_events: KubeEvents,
        jobs: Option<Store<tink_api::bmc::Job>>,
    ) -> Self {
        let ledger = Arc::new(Ledger::new(client.clone(), workflows));
        Self {
            boot: Boot::new(client.clone(), jobs, config.boot_job_timeout),
            wake: Wake::new(metrics.clone(), ledger.clone(), hardware_index, triggers),
            presence: Presence::new(config.bus.presence_ttl, config.forget_after),
            dispatch: Dispatch::new(hardware.clone()),
            writes: Writes::new(client, metrics.clone(), ledger.clone()),
            effects: Effects::new(metrics.clone(), bus),
            ledger,
            kube_events,
            config,
            metrics,
            templates,
            hardware,
            backlog_applied: AtomicBool::new(false),
        }
    }

    /// What the state machine needs to know besides the status.
    pub fn step_context(&self, w: &Workflow, now: Timestamp) -> StepContext {
        let agent = w
            .status
            .as_ref()
            .and_then(|s| s.agent_id.as_deref())
            .map(|agent| self.presence.agent_seen(agent));
        StepContext {
            now,
            workflow: ref_of(w),
            timeout: w.spec.timeout_limit(),
            config: self.config.workflow.clone(),
            agent,
        }
    }

    /// Whether the events stored when this term began are applied (see `backlog_applied`).
    pub fn backlog_applied(&self) -> bool {
        self.backlog_applied.load(Ordering::Acquire)
    }

    /// Marks the events stored when this term began as applied.
    pub fn set_backlog_applied(&self) {
        self.backlog_applied.store(true, Ordering::Release);
    }

    /// See [`Dispatch::boot_turn`].
    pub fn boot_turn(&self, w: &Workflow, status: &WorkflowStatus, now: Timestamp) -> BootTurn {
        self.dispatch
            .boot_turn(w, status, now, &self.ledger, &self.wake)
    }

    /// See [`Dispatch::choose_agent`].
    pub fn choose_agent(
        &self,
        w: &Workflow,
        status: &WorkflowStatus,
        now: Timestamp,
    ) -> Choice<'_> {
        self.dispatch
            .choose_agent(w, status, now, &self.ledger, &self.wake, &self.presence)
    }

    /// Forgets per-object and per-agent memories that can no longer matter: resume marks of
    /// Workflows no longer cached, and presence of agents not seen for `forget_after`.
    pub fn prune(&self) {
        self.ledger.prune();
        self.presence.prune();
    }

    /// Reads, steps and applies one Workflow, again after each write conflict.
    ///
    /// The first attempt decides on `first` (the caller's freshest view) or, without one, on
    /// the Workflow read from the API server; every further attempt reads it from the API
    /// server (and remembers it in the ledger). `decide` gets the Workflow and the attempt's
    /// number and says what to write; a conflict it returns is retried like one of the write.
    /// At most `attempts` attempts: the reconciler and the events consumer each pass their
    /// own.
    pub async fn step_and_apply<A, D, F, Fut>(
        &self,
        key: &WorkflowKey,
        mut first: Option<Arc<Workflow>>,
        attempts: usize,
        mut decide: F,
    ) -> Result<Stepped<A, D>, Failed>
    where
        F: FnMut(Arc<Workflow>, usize) -> Fut,
        Fut: Future<Output = Result<Plan<A, D>, StepError>>,
    {
        for attempt in 0..attempts {
            let w = match first.take() {
                Some(w) => w,
                None => match self.ledger.read(key).await {
                    Ok(Some(w)) => w,
                    Ok(None) => return Ok(Stepped::Gone),
                    Err(error) => {
                        return Err(Failed {
                            error,
                            workflow: None,
                        });
                    }
                },
            };
            let (transition, value) = match decide(w.clone(), attempt).await {
                Ok(Plan::Apply(t, value)) => (t, value),
                Ok(Plan::Done(value)) => return Ok(Stepped::Done(value)),
                Ok(Plan::Reread) | Err(StepError::Conflict(_)) => continue,
                Err(error) => {
                    return Err(Failed {
                        error,
                        workflow: Some(w),
                    });
                }
            };
            match self.apply(&w, &transition).await {
                Ok(written) => {
                    return Ok(Stepped::Applied {
                        transition,
                        written,
                        value,
                    });
                }
                Err(StepError::Conflict(_)) => continue,
                Err(error) => {
                    return Err(Failed {
                        error,
                        workflow: Some(w),
                    });
                }
            }
        }
        Ok(Stepped::Exhausted)
    }

    /// Carries out a transition on `w`: the finalizer first when the Workflow needs it (so
    /// nothing is dispatched before the finalizer protects it), the status write when it
    /// changed, then the effects in order. Returns the Workflow as written.
    pub async fn apply(
        &self,
        w: &Arc<Workflow>,
        t: &Transition,
    ) -> Result<Arc<Workflow>, StepError> {
        let mut current = w.clone();
        let old_state = w.status.as_ref().map(|s| s.state).unwrap_or_default();
        if t.effects.contains(&Effect::AddFinalizer)
            && !has_finalizer(&current)
            && current.metadata.deletion_timestamp.is_none()
        {
            current = self.writes.add_finalizer(&current).await?;
        }
        if t.status_changed() {
            current = self.writes.write_status(&current, t.status.clone()).await?;
            if is_active(old_state) && !is_active(t.status.state) {
                // The machine is free the moment the status says so: wake its next Workflow
                // now, not after the effects (an effect that fails, such as a finalizer removal
                // racing the reconciler's, must not lose this wake-up).
                let ns = current.namespace().unwrap_or_default();
                self.wake
                    .trigger_pending_of(&ns, &current.spec.hardware_ref.name);
            }
        }
        for effect in &t.effects {
            match effect {
                Effect::AddFinalizer => {}
                Effect::PublishStart {
                    agent_id,
                    dispatch_id,
                } => {
                    self.effects
                        .publish_start(&current, &t.status, agent_id, dispatch_id)
                        .await?
                }
                Effect::RepublishStart {
                    agent_id,
                    dispatch_id,
                } => {
                    self.effects
                        .republish_start(&current, &t.status, agent_id, dispatch_id)
                        .await?
                }
                Effect::PublishStop {
                    agent_id,
                    dispatch_id,
                    reason,
                    message,
                } => {
                    self.effects
                        .publish_stop(
                            &current,
                            w.status.as_ref(),
                            agent_id,
                            dispatch_id,
                            *reason,
                            message,
                        )
                        .await?
                }
                Effect::KubeEvent {
                    type_,
                    reason,
                    message,
                } => self.kube_events.about(&*current, *type_, *reason, message),
                Effect::RemoveFinalizer => self.writes.remove_finalizer(&current).await?,
            }
        }
        Ok(current)
    }
}
