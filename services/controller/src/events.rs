//! The events consumer: a durable JetStream pull consumer on the events stream.
//!
//! Events are held per Workflow and applied with one `step_all` and at most one status write
//! per group. A group is written at once when the events end something (the Workflow reaches
//! an end state, goes back to `Pending`, or the events change nothing); progress inside a run
//! (`Scheduled`/`Running`) is held while more events of the same Workflow keep arriving, at
//! most `events_window` after the last one and `events_max_hold` after the first, so an
//! agent's burst of events costs one write while an end state is never delayed. A Workflow
//! has at most one group in flight; events arriving meanwhile wait for it (no conflicts
//! between our own writes).
//!
//! Messages are acknowledged only after the write succeeded (or when the event is invalid,
//! stale or about a Workflow that is gone, with a log line); on a conflict the Workflow is
//! re-read and the group applied again; on any other failure the messages are handed back
//! (NAK with a delay) and JetStream delivers them again.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
use async_nats::jetstream::{self, AckKind};
use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use jiff::Timestamp;
use kube::ResourceExt as _;
use tink_api::v1alpha2::WorkflowState;
use tink_bus::proto::event;
use tink_workflow::{
    AgentEvent, DispatchId, EventKind, Ignored, Input, Outcome, WorkflowKey, step_all,
};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, debug, info, warn};

use crate::error::{StepError, report};
use crate::tasks::Spawner;
use crate::term::{Failed, Plan, Stepped, Term};

/// How often a group is re-read and applied again after write conflicts.
const CONFLICT_RETRIES: usize = 8;
/// Groups applied at once.
const GROUP_CONCURRENCY: usize = 64;
/// How long a message handed back waits before JetStream delivers it again.
const NAK_DELAY: Duration = Duration::from_secs(1);
/// Pause before binding the consumer again after a failure.
const REBIND_DELAY: Duration = Duration::from_secs(1);

/// The consumer's configuration: every event subject, explicit acks, unlimited redeliveries.
pub fn consumer_config(name: &str, ack_wait: Duration, batch: usize) -> pull::Config {
    pull::Config {
        durable_name: Some(name.to_string()),
        name: Some(name.to_string()),
        description: Some("tink-controller: agent events to Workflow status".into()),
        filter_subject: tink_bus::EVENTS_ALL.to_string(),
        deliver_policy: DeliverPolicy::All,
        ack_policy: AckPolicy::Explicit,
        ack_wait,
        max_deliver: -1,
        max_ack_pending: i64::try_from(batch.saturating_mul(8)).unwrap_or(i64::MAX),
        ..Default::default()
    }
}

/// Runs the consumer until `cancel` is cancelled; `bound` fires once the consumer exists.
pub(crate) async fn run(
    term: Arc<Term>,
    stream: jetstream::stream::Stream,
    bound: oneshot::Sender<()>,
    spawner: Spawner,
    cancel: CancellationToken,
) {
    let config = &term.config;
    let name = config.events_consumer.clone();
    let consumer_config = consumer_config(&name, config.events_ack_wait, config.events_batch);
    let mut bound = Some(bound);
    while !cancel.is_cancelled() {
        let consumer: jetstream::consumer::Consumer<pull::Config> = match stream
            .get_or_create_consumer(&name, consumer_config.clone())
            .await
        {
            Ok(c) => c,
            Err(e) => {
                term.metrics.error("consumer");
                warn!(error = %e, "cannot bind the events consumer; retrying");
                pause(&cancel, REBIND_DELAY).await;
                continue;
            }
        };
        let messages = consumer
            .stream()
            .max_messages_per_batch(config.events_batch)
            .heartbeat(Duration::from_secs(5))
            .expires(Duration::from_secs(30))
            .messages()
            .await;
        let mut messages = match messages {
            Ok(m) => m,
            Err(e) => {
                term.metrics.error("consumer");
                warn!(error = %e, "cannot read the events consumer; retrying");
                pause(&cancel, REBIND_DELAY).await;
                continue;
            }
        };
        if let Some(tx) = bound.take() {
            let _ = tx.send(());
            let (term, stream, name, cancel) =
                (term.clone(), stream.clone(), name.clone(), cancel.clone());
            spawner.spawn(
                "events backlog watch",
                watch_backlog(term, stream, name, cancel),
            );
        }
        info!(consumer = %name, "events consumer bound");
        let mut held = Held::default();
        let ended = loop {
            let next_due = held.next_due(&term);
            let can_flush = held.flushing.len() < GROUP_CONCURRENCY;
            tokio::select! {
                _ = cancel.cancelled() => break false,
                m = messages.next() => match m {
                    Some(Ok(m)) => held.add(&term, m).await,
                    Some(Err(e)) => {
                        term.metrics.error("consumer");
                        warn!(error = %e, "events consumer error");
                    }
                    None => break true,
                },
                Some(key) = held.flushing.next(), if !held.flushing.is_empty() => {
                    held.in_flight.remove(&key);
                }
                _ = sleep_until(next_due), if can_flush && next_due.is_some() => {}
            }
            held.flush_due(&term, Instant::now());
        };
        // Let the writes in flight finish (their acks follow them) and hand the held events
        // back, so the next leader (or binding) gets them at once.
        while held.flushing.next().await.is_some() {}
        for (_, group) in held.groups.drain() {
            nak_all(&term, &group.items, None).await;
        }
        if !ended {
            return;
        }
        warn!("the events consumer stream ended; binding again");
    }
}

/// How often the consumer's progress is read while the term's backlog is applied.
const BACKLOG_POLL: Duration = Duration::from_millis(250);

/// Marks the term's backlog applied once every event stored when the consumer was bound is
/// acknowledged (the consumer's ack floor reached the stream's last sequence at that time),
/// then wakes the active Workflows the reconciler held back.
async fn watch_backlog(
    term: Arc<Term>,
    stream: jetstream::stream::Stream,
    name: String,
    cancel: CancellationToken,
) {
    let last = loop {
        match stream.get_info().await {
            Ok(info) => break info.state.last_sequence,
            Err(e) => {
                term.metrics.error("consumer");
                warn!(error = %e, "cannot read the events stream's state; retrying");
                pause(&cancel, REBIND_DELAY).await;
                if cancel.is_cancelled() {
                    return;
                }
            }
        }
    };
    loop {
        match stream.consumer_info(&name).await {
            Ok(info)
                if info.ack_floor.stream_sequence >= last
                    || info.num_pending == 0 && info.num_ack_pending == 0 =>
            {
                break;
            }
            Ok(info) => debug!(
                ack_floor = info.ack_floor.stream_sequence,
                backlog_end = last,
                "applying the events backlog"
            ),
            Err(e) => {
                term.metrics.error("consumer");
                debug!(error = %e, "cannot read the events consumer's progress");
            }
        }
        pause(&cancel, BACKLOG_POLL).await;
        if cancel.is_cancelled() {
            return;
        }
    }
    term.set_backlog_applied();
    info!(
        backlog_end = last,
        "the events stored before this term are applied"
    );
    term.wake.trigger_unfinished();
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The events of one Workflow waiting to be applied.
struct Group {
    items: Vec<Item>,
    first: Instant,
    last: Instant,
    /// Write without waiting for more (the events end something or change nothing).
    urgent: bool,
}

type Flush = futures::future::BoxFuture<'static, WorkflowKey>;

/// The groups held and the ones being written.
#[derive(Default)]
struct Held {
    groups: HashMap<WorkflowKey, Group>,
    in_flight: HashSet<WorkflowKey>,
    flushing: FuturesUnordered<Flush>,
    /// Messages the consumer still had for us after the last one read: while it is behind,
    /// more events of a held Workflow are likely in that backlog, so the quiet window does
    /// not end a hold (the maximum still does).
    backlog: u64,
}

impl Held {
    /// Decodes a message and adds it to its Workflow's group (invalid ones are dropped).
    async fn add(&mut self, term: &Arc<Term>, m: jetstream::Message) {
        let (key, uid, input) = match decode(&m) {
            Ok(d) => d,
            Err(why) => {
                term.metrics.event("invalid");
                warn!(subject = %m.subject, error = %why, "dropping an invalid event");
                ack(term, &m).await;
                return;
            }
        };
        let info = m.info().ok();
        self.backlog = info.as_ref().map_or(0, |i| i.pending);
        let stored = info
            .and_then(|i| Timestamp::from_nanosecond(i.published.unix_timestamp_nanos()).ok())
            .unwrap_or_else(Timestamp::now);
        let now = Instant::now();
        let group = self.groups.entry(key.clone()).or_insert_with(|| Group {
            items: Vec::new(),
            first: now,
            last: now,
            urgent: false,
        });
        group.items.push(Item {
            message: m,
            input,
            stored,
            uid,
        });
        group.last = now;
        group.urgent = group.urgent || ends_something(term, &key, &group.items);
    }

    fn due_at(&self, term: &Term, g: &Group) -> Instant {
        let held_max = g.first + term.config.events_max_hold;
        if g.urgent || g.items.len() >= term.config.events_batch {
            g.last
        } else if self.backlog > 0 {
            held_max
        } else {
            (g.last + term.config.events_window).min(held_max)
        }
    }

    /// When the next group not in flight is due.
    fn next_due(&self, term: &Term) -> Option<Instant> {
        // Only a few Workflows have events held at once (the hold is milliseconds).
        self.groups
            .iter()
            .filter(|(k, _)| !self.in_flight.contains(*k))
            .map(|(_, g)| self.due_at(term, g))
            .min()
    }

    /// Starts writing every due group whose Workflow has nothing in flight.
    fn flush_due(&mut self, term: &Arc<Term>, now: Instant) {
        let due: Vec<WorkflowKey> = self
            .groups
            .iter()
            .filter(|(k, g)| !self.in_flight.contains(*k) && self.due_at(term, g) <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            if self.flushing.len() >= GROUP_CONCURRENCY {
                break;
            }
            let Some(group) = self.groups.remove(&key) else {
                continue;
            };
            self.in_flight.insert(key.clone());
            let term = term.clone();
            self.flushing.push(Box::pin(async move {
                let uid = group.items.first().map(|i| i.uid.clone()).unwrap_or_default();
                let span =
                    tracing::info_span!("apply_events", workflow = %key, events = group.items.len());
                tink_telemetry::propagation::set_parent(&span, crate::trace::workflow_context(&uid));
                apply_group(&term, key.clone(), group.items).instrument(span).await;
                key
            }));
        }
    }
}

/// Whether the held events, applied to the freshest known status, end something that must be
/// written at once: an end state, a rejection back to `Pending`, a cancellation, or nothing to
/// write at all (duplicates, late or stale events are acknowledged without waiting).
fn ends_something(term: &Term, key: &WorkflowKey, items: &[Item]) -> bool {
    let Some(w) = term.ledger.cached(key) else {
        return true;
    };
    let status = w.status.clone().unwrap_or_default();
    let ctx = term.step_context(&w, Timestamp::now());
    let t = step_all(&status, items.iter().map(|i| i.input.clone()), &ctx);
    !t.status_changed()
        || !matches!(
            t.status.state,
            WorkflowState::Scheduled | WorkflowState::Running
        )
}

async fn nak_all(term: &Term, items: &[Item], delay: Option<Duration>) {
    for i in items {
        if let Err(e) = i.message.ack_with(AckKind::Nak(delay)).await {
            term.metrics.error("ack");
            warn!(error = %e, "cannot hand an event back; it is delivered again after the ack wait");
        }
    }
}

async fn pause(cancel: &CancellationToken, d: Duration) {
    tokio::select! {
        _ = cancel.cancelled() => {}
        _ = tokio::time::sleep(d) => {}
    }
}

/// One decoded event and its message.
struct Item {
    message: jetstream::Message,
    input: Input,
    stored: Timestamp,
    uid: String,
}

fn stored_at(m: &jetstream::Message) -> Option<Timestamp> {
    let info = m.info().ok()?;
    Timestamp::from_nanosecond(info.published.unix_timestamp_nanos()).ok()
}

async fn ack(term: &Term, m: &jetstream::Message) {
    if let Err(e) = m.ack().await {
        term.metrics.error("ack");
        warn!(error = %e, "cannot acknowledge an event; it will be delivered again");
    }
}

/// Decodes a message into the state machine's input, or says why it is dropped.
fn decode(m: &jetstream::Message) -> Result<(WorkflowKey, String, Input), String> {
    let e = tink_bus::decode_event(&m.payload).map_err(|e| e.to_string())?;
    let id = DispatchId::parse(&e.workflow_id).map_err(|e| e.to_string())?;
    let stored = stored_at(m).unwrap_or_else(Timestamp::now);
    let at = e
        .occurred_at
        .as_ref()
        .and_then(|t| Timestamp::new(t.seconds, t.nanos).ok())
        .unwrap_or(stored);
    let kind = match e.event {
        Some(event::Event::ActionStarted(a)) => EventKind::ActionStarted {
            action_id: a.action_id,
        },
        Some(event::Event::ActionSucceeded(a)) => EventKind::ActionSucceeded {
            action_id: a.action_id,
        },
        Some(event::Event::ActionFailed(a)) => EventKind::ActionFailed {
            action_id: a.action_id,
            reason: a.failure_reason,
            message: a.failure_message,
        },
        Some(event::Event::WorkflowRejected(r)) => EventKind::WorkflowRejected {
            reason: r.failure_reason,
            message: Some(r.failure_message).filter(|m| !m.is_empty()),
        },
        Some(event::Event::WorkflowCanceled(c)) => EventKind::WorkflowCanceled {
            action_id: c.action_id,
            reason: c.reason,
            message: c.message,
        },
        Some(event::Event::WorkflowReceived(r)) => EventKind::WorkflowReceived {
            stop: r.command() == event::workflow_received::Command::Stop,
        },
        None => return Err("no event kind is set".into()),
    };
    let input = Input::Agent(AgentEvent {
        dispatch_id: e.workflow_id,
        agent_id: Some(e.agent_id).filter(|a| !a.is_empty()),
        instance: Some(e.agent_instance).filter(|i| !i.is_empty()),
        at,
        kind,
    });
    Ok((id.key(), id.workflow().uid.clone(), input))
}

async fn apply_group(term: &Arc<Term>, key: WorkflowKey, items: Vec<Item>) {
    let inputs: Vec<Input> = items.iter().map(|i| i.input.clone()).collect();
    let (inputs, items_ref) = (&inputs, &items);
    let stepped = term
        .step_and_apply(
            &key,
            term.ledger.cached(&key),
            CONFLICT_RETRIES,
            |w, attempt| decide(term, &key, inputs, items_ref, w, attempt),
        )
        .await;
    match stepped {
        Ok(Stepped::Applied { .. }) => {
            let now = Timestamp::now();
            for i in &items {
                let waited = now.duration_since(i.stored).as_secs_f64().max(0.0);
                term.metrics.event_to_status_seconds.observe(waited);
                term.metrics.event("applied");
                ack(term, &i.message).await;
            }
            return;
        }
        // The events are acknowledged (dropped).
        Ok(Stepped::Done(())) => return,
        Ok(Stepped::Gone) => {
            term.metrics.event("gone");
            info!(workflow = %key, events = items.len(), "dropping events of a Workflow that no longer exists");
            for i in &items {
                ack(term, &i.message).await;
            }
            return;
        }
        Ok(Stepped::Exhausted) => {}
        Err(Failed {
            error: e,
            workflow: None,
        }) => report(&term.metrics, "cannot read a Workflow for its events", &e),
        Err(Failed {
            error: e,
            workflow: Some(w),
        }) => {
            report(&term.metrics, "cannot apply events", &e);
            // The status may be written while an effect was not carried out: let the
            // reconciler resume the Workflow.
            term.ledger.forget(&w.uid().unwrap_or_default());
            term.wake.trigger(&key);
            if refused_for_good(&e) && poisoned(&items) {
                term.metrics.event("poisoned");
                let message = format!(
                    "{} agent events could not be applied after {POISON_AFTER} deliveries and are dropped: {e}",
                    items.len()
                );
                tracing::error!(workflow = %key, %message);
                term.kube_events.about(
                    &*w,
                    tink_workflow::EventType::Warning,
                    tink_workflow::EventReason::EventsDropped,
                    &message,
                );
                for i in &items {
                    if let Err(e) = i.message.ack_with(AckKind::Term).await {
                        warn!(error = %e, "cannot terminate a poisoned event");
                    }
                }
                return;
            }
        }
    }
    let delay = nak_delay(&items);
    nak_all(term, &items, Some(delay)).await;
}

/// The transition of a group's events on `w`: nothing to write when the events change
/// nothing (they are acknowledged here), a re-read when the cache may lag.
async fn decide(
    term: &Term,
    key: &WorkflowKey,
    inputs: &[Input],
    items: &[Item],
    w: Arc<tink_api::v1alpha2::Workflow>,
    attempt: usize,
) -> Result<Plan<(), ()>, StepError> {
    let status = w.status.clone().unwrap_or_default();
    let ctx = term.step_context(&w, Timestamp::now());
    let t = step_all(&status, inputs.iter().cloned(), &ctx);
    let Outcome::Ignored(why) = t.outcome else {
        return Ok(Plan::Apply(t, ()));
    };
    if attempt == 0
        && matches!(
            why,
            Ignored::StaleDispatch
                | Ignored::WrongState
                | Ignored::OtherAgent
                | Ignored::UnknownAction
        )
    {
        // Judged on the cached object, which may lag (a dispatch written by another
        // leader moments ago): read it from the API once before dropping the events.
        term.metrics.event("reread");
        return Ok(Plan::Reread);
    }
    term.metrics.event("ignored");
    if why == Ignored::OtherAgent {
        term.metrics.event("refused_agent");
        let from: Vec<String> = items
            .iter()
            .filter_map(|i| match &i.input {
                Input::Agent(e) => Some(e.agent_id.clone().unwrap_or_else(|| "<none>".into())),
                _ => None,
            })
            .collect();
        let message = format!(
            "refused {} event(s) from agent(s) {} for a workflow dispatched to {}",
            items.len(),
            from.join(", "),
            status.agent_id.as_deref().unwrap_or("<none>")
        );
        warn!(workflow = %key, %message);
        term.kube_events.about(
            &*w,
            tink_workflow::EventType::Warning,
            tink_workflow::EventReason::ForeignEvent,
            &message,
        );
    }
    match why {
        Ignored::Outdated | Ignored::Terminal => {
            debug!(workflow = %key, reason = ?why, "events change nothing (duplicates or late)")
        }
        _ => {
            info!(workflow = %key, reason = ?why, uid = %w.uid().unwrap_or_default(), "dropping stale events")
        }
    }
    for i in items {
        ack(term, &i.message).await;
    }
    Ok(Plan::Done(()))
}

/// Deliveries after which events the API server refuses for good are dropped (terminated).
const POISON_AFTER: i64 = 5;
/// The longest wait before a handed-back event is delivered again.
const MAX_NAK_DELAY: Duration = Duration::from_secs(60);

/// Whether the API server refused the write in a way a retry cannot change (a 4xx other than
/// a conflict or throttling: the object is invalid or too large). Connection failures and 5xx
/// are retried for as long as they last.
fn refused_for_good(e: &StepError) -> bool {
    matches!(e, StepError::Kube(kube::Error::Api(s)) if (400..500).contains(&s.code) && s.code != 409 && s.code != 429)
}

/// Whether the group has been delivered [`POISON_AFTER`] times already.
fn poisoned(items: &[Item]) -> bool {
    items.iter().any(|i| {
        i.message
            .info()
            .is_ok_and(|info| info.delivered >= POISON_AFTER)
    })
}

/// The wait before the group is delivered again: doubling with each delivery, at most a minute,
/// so an API server outage is ridden out without hammering it.
fn nak_delay(items: &[Item]) -> Duration {
    let delivered = items
        .iter()
        .filter_map(|i| i.message.info().ok().map(|info| info.delivered))
        .max()
        .unwrap_or(1)
        .clamp(1, 16);
    let factor = 1u32 << (delivered - 1).min(6);
    (NAK_DELAY * factor).min(MAX_NAK_DELAY)
}
