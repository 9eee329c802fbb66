//! The history of a fault run and its checker (issue 32).
//!
//! A run records, as JSON lines with the schema of [`Record`] (one object a line, tagged by
//! `kind`), what the parts saw: every StartWorkflow an agent received and every one it
//! executed, every event a server told an agent was stored, every Workflow status write the
//! API server made (from a watch), every leadership term seen on the Lease, every fault
//! injected, and what end each Workflow must reach. [`check`] reads such a history and counts
//! what must never happen:
//!
//! - **executions twice**: a dispatch whose actions an agent began more than once (over every
//!   process of every agent);
//! - **wrong end states**: a Workflow whose last recorded status is not terminal (stuck), or is
//!   not the end its `expect` record names (state and, when given, reason);
//! - **acknowledged events lost**: an action event the agent was told was stored that no status
//!   write of its Workflow ever reflected (an action started must be seen Running or later, one
//!   succeeded or failed must be seen so). An event whose acknowledgement came after a status
//!   showed its Workflow ended (an agent cut off for longer than the agent-lost limit reporting
//!   in at last) is counted apart, as **events after the end**: it is stored, and applying it
//!   would change an ended Workflow;
//! - **overlapping terms**: a leader renewing its Lease after the next leader acquired it.
//!
//! The schema is documented in RELIABILITY.md ("History format"); a record of an unknown kind
//! is an error naming its line, never skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// One line of a history. `t` is seconds since the run began (the recorder's clock).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Record {
    /// The run's parameters: written first.
    Run {
        seed: u64,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        description: String,
    },
    /// An agent process received a StartWorkflow.
    StartReceived {
        t: f64,
        agent: String,
        instance: String,
        workflow: String,
        dispatch: String,
    },
    /// An agent process began executing a dispatch's actions (after its receipt).
    Executed {
        t: f64,
        agent: String,
        instance: String,
        workflow: String,
        dispatch: String,
    },
    /// A server answered an agent's PublishEvent with success: the event is stored.
    EventAcked {
        t: f64,
        agent: String,
        workflow: String,
        dispatch: String,
        event_id: String,
        event: EventKind,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        action: Option<String>,
    },
    /// A status write of a Workflow, as a watch delivered it.
    Status {
        t: f64,
        workflow: String,
        resource_version: String,
        state: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// The Succeeded condition's message (for a verdict such as AgentLost: what the
        /// controller saw), quoted in a wrong end state.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dispatch: Option<String>,
        /// Each action's id and state (`Pending`, `Running`, `Succeeded`, `Failed`, `Canceled`).
        #[serde(default)]
        actions: Vec<(String, String)>,
    },
    /// A leadership term as the Lease showed it, written again at each renewal the watch
    /// delivers: `t` is when the watch delivered this version (the recorder's clock; a watch
    /// delivers the Lease's writes in the API server's order), `acquired` the holder's
    /// acquireTime and `last_renew` its renewTime, seconds since the Unix epoch in the
    /// *holder's* clock. The checker orders terms by `t` alone: a holder's clock may be wrong
    /// (the `clock-jump` fault makes it so), and the order the API server accepted the writes
    /// in is what says whether two terms overlapped.
    Term {
        t: f64,
        holder: String,
        acquired: f64,
        last_renew: f64,
    },
    /// A fault injected (the same line the run prints as `FAULT kind=.. target=.. at=..`).
    Fault {
        t: f64,
        fault: String,
        target: String,
    },
    /// The end a Workflow must reach; `reason` is checked when given.
    Expect {
        workflow: String,
        state: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

/// The agent events a history names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EventKind {
    WorkflowReceived,
    WorkflowRejected,
    WorkflowCanceled,
    ActionStarted,
    ActionSucceeded,
    ActionFailed,
}

/// Appends records to a file (or keeps them), from any thread; each line is written whole.
pub struct Recorder {
    out: Mutex<Box<dyn Write + Send>>,
    began: std::time::Instant,
}

impl Recorder {
    /// A recorder writing to `path` (created or truncated), starting with `run`.
    pub fn create(path: &Path, seed: u64, description: &str) -> std::io::Result<Recorder> {
        let file = std::fs::File::create(path)?;
        let recorder = Recorder::to_writer(Box::new(std::io::BufWriter::new(file)));
        recorder.record(&Record::Run {
            seed,
            description: description.to_string(),
        })?;
        Ok(recorder)
    }

    /// A recorder writing to `out`.
    pub fn to_writer(out: Box<dyn Write + Send>) -> Recorder {
        Recorder {
            out: Mutex::new(out),
            began: std::time::Instant::now(),
        }
    }

    /// Seconds since this recorder was made: the `t` of records.
    pub fn now(&self) -> f64 {
        self.began.elapsed().as_secs_f64()
    }

    /// Writes one record as one line.
    pub fn record(&self, record: &Record) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(record).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        out.write_all(&line)
    }

    /// Flushes what was written.
    pub fn flush(&self) -> std::io::Result<()> {
        self.out.lock().unwrap_or_else(|p| p.into_inner()).flush()
    }
}

/// A history that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("reading the history: {0}")]
    Io(#[from] std::io::Error),
    #[error("line {line}: {source}")]
    Line {
        line: usize,
        source: serde_json::Error,
    },
}

/// Reads a history: one [`Record`] a line; blank lines are allowed.
pub fn read(input: impl BufRead) -> Result<Vec<Record>, ReadError> {
    let mut records = Vec::new();
    for (i, line) in input.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let record = serde_json::from_str(&line).map_err(|source| ReadError::Line {
            line: i + 1,
            source,
        })?;
        records.push(record);
    }
    Ok(records)
}

/// What [`check`] found. Each list names the offenders; the counts are their lengths.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Report {
    pub seed: Option<u64>,
    pub workflows: usize,
    pub dispatches_executed: usize,
    pub faults: usize,
    /// Dispatches executed more than once, with how many times.
    pub executed_twice: Vec<(String, usize)>,
    /// Workflows with a wrong or missing end: `name: why`.
    pub wrong_end_states: Vec<String>,
    /// Acknowledged events no status write reflected: `workflow event action event_id`.
    pub acked_events_lost: Vec<String>,
    /// Acknowledged events not reflected because their Workflow had ended before the agent was
    /// told they were stored (not a loss; counted so a run shows them).
    pub events_after_end: usize,
    /// Terms that overlap: `holder renewed at t=.. after holder was seen holding the Lease at t=..`.
    pub overlapping_terms: Vec<String>,
    /// End states reached, `State/Reason` and how many.
    pub end_states: BTreeMap<String, usize>,
}

impl Report {
    /// Whether nothing that must never happen happened.
    pub fn is_clean(&self) -> bool {
        self.executed_twice.is_empty()
            && self.wrong_end_states.is_empty()
            && self.acked_events_lost.is_empty()
            && self.overlapping_terms.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.seed {
            Some(seed) => writeln!(f, "seed: {seed}")?,
            None => writeln!(f, "seed: (none recorded)")?,
        }
        writeln!(
            f,
            "workflows: {}, dispatches executed: {}, faults: {}",
            self.workflows, self.dispatches_executed, self.faults
        )?;
        let ends: Vec<String> = self
            .end_states
            .iter()
            .map(|(k, n)| format!("{k}={n}"))
            .collect();
        writeln!(f, "end states: {}", ends.join(" "))?;
        writeln!(f, "executions twice: {}", self.executed_twice.len())?;
        for (d, n) in &self.executed_twice {
            writeln!(f, "  {d} executed {n} times")?;
        }
        writeln!(f, "wrong end states: {}", self.wrong_end_states.len())?;
        for w in &self.wrong_end_states {
            writeln!(f, "  {w}")?;
        }
        writeln!(
            f,
            "acknowledged events lost: {}",
            self.acked_events_lost.len()
        )?;
        for e in &self.acked_events_lost {
            writeln!(f, "  {e}")?;
        }
        writeln!(
            f,
            "events after the end (not lost): {}",
            self.events_after_end
        )?;
        writeln!(f, "overlapping terms: {}", self.overlapping_terms.len())?;
        for t in &self.overlapping_terms {
            writeln!(f, "  {t}")?;
        }
        Ok(())
    }
}

const TERMINAL: [&str; 3] = ["Succeeded", "Failed", "Canceled"];

/// How far an action state is along: Pending 0, Running 1, an end 2.
fn action_rank(state: &str) -> u8 {
    match state {
        "Running" => 1,
        "Succeeded" | "Failed" | "Canceled" => 2,
        _ => 0,
    }
}

/// Checks a history (see the crate's documentation for what is counted).
pub fn check(records: &[Record]) -> Report {
    let mut report = Report::default();
    let mut executions: BTreeMap<&str, usize> = BTreeMap::new();
    // The last status of each Workflow, and each action state any status write showed.
    let mut last: BTreeMap<&str, (&str, Option<&str>, Option<&str>)> = BTreeMap::new();
    let mut seen: BTreeSet<(&str, &str, &str)> = BTreeSet::new();
    let mut seen_rank: BTreeMap<(&str, &str), u8> = BTreeMap::new();
    let mut expects: Vec<(&str, &str, Option<&str>)> = Vec::new();
    let mut acked: Vec<&Record> = Vec::new();
    let mut terms: Vec<(&str, f64, f64)> = Vec::new();
    // When each Workflow was first seen ended.
    let mut ended_at: BTreeMap<&str, f64> = BTreeMap::new();
    for r in records {
        match r {
            Record::Run { seed, .. } => report.seed = Some(*seed),
            Record::Executed { dispatch, .. } => *executions.entry(dispatch).or_default() += 1,
            Record::Status {
                t,
                workflow,
                state,
                reason,
                message,
                actions,
                ..
            } => {
                if TERMINAL.contains(&state.as_str()) {
                    ended_at.entry(workflow).or_insert(*t);
                }
                last.insert(workflow, (state, reason.as_deref(), message.as_deref()));
                for (id, s) in actions {
                    seen.insert((workflow, id, s));
                    let rank = seen_rank.entry((workflow, id)).or_default();
                    *rank = (*rank).max(action_rank(s));
                }
            }
            Record::EventAcked { .. } => acked.push(r),
            Record::Term {
                t,
                holder,
                acquired,
                ..
            } => terms.push((holder, *acquired, *t)),
            Record::Fault { .. } => report.faults += 1,
            Record::Expect {
                workflow,
                state,
                reason,
            } => expects.push((workflow, state, reason.as_deref())),
            Record::StartReceived { .. } => {}
        }
    }
    report.dispatches_executed = executions.len();
    report.executed_twice = executions
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(d, n)| (d.to_string(), n))
        .collect();

    report.workflows = last.len();
    for (w, (state, reason, _)) in &last {
        *report
            .end_states
            .entry(format!("{state}/{}", reason.unwrap_or("")))
            .or_default() += 1;
        if !TERMINAL.contains(state) {
            report
                .wrong_end_states
                .push(format!("{w}: stuck in {state}"));
        }
    }
    for (w, state, reason) in expects {
        match last.get(w) {
            None => report
                .wrong_end_states
                .push(format!("{w}: no status recorded (expected {state})")),
            Some((got, got_reason, got_message)) => {
                let reason_ok = reason.is_none() || reason == *got_reason;
                if TERMINAL.contains(got) && (*got != state || !reason_ok) {
                    let said = got_message.map(|m| format!(" ({m:?})")).unwrap_or_default();
                    report.wrong_end_states.push(format!(
                        "{w}: ended {got}/{} but must end {state}/{}{said}",
                        got_reason.unwrap_or(""),
                        reason.unwrap_or("(any reason)")
                    ));
                }
            }
        }
    }

    for r in acked {
        let Record::EventAcked {
            t,
            workflow,
            event,
            action: Some(action),
            event_id,
            ..
        } = r
        else {
            continue;
        };
        let reflected = match event {
            EventKind::ActionStarted => {
                seen_rank.get(&(workflow.as_str(), action.as_str())) >= Some(&1)
            }
            EventKind::ActionSucceeded => seen.contains(&(workflow, action, "Succeeded")),
            EventKind::ActionFailed => seen.contains(&(workflow, action, "Failed")),
            _ => true,
        };
        if !reflected && ended_at.get(workflow.as_str()).is_some_and(|end| end < t) {
            report.events_after_end += 1;
        } else if !reflected {
            report
                .acked_events_lost
                .push(format!("{workflow} {event:?} {action} (event {event_id})"));
        }
    }

    // A term is written again at each renewal: keep each (holder, acquired) once, with the
    // first and the last time the watch delivered it. Records come in the order the recorder
    // wrote them, which is the watch's order.
    let mut merged: Vec<(&str, f64, f64, f64)> = Vec::new();
    for (h, a, t) in terms {
        match merged.iter_mut().find(|(mh, ma, ..)| *mh == h && *ma == a) {
            Some((.., first, last)) => {
                *first = first.min(t);
                *last = last.max(t);
            }
            None => merged.push((h, a, t, t)),
        }
    }
    merged.sort_by(|x, y| x.2.total_cmp(&y.2));
    for pair in merged.windows(2) {
        let ((h1, a1, _, last1), (h2, a2, first2, _)) = (pair[0], pair[1]);
        // The same holder acquiring again (a new acquireTime) is a new term, not an overlap.
        if h1 != h2 && last1 > first2 {
            report.overlapping_terms.push(format!(
                "{h1} (acquired {a1:.3}) renewed at t={last1:.3}, after {h2} (acquired {a2:.3}) \
                 was seen holding the Lease at t={first2:.3}"
            ));
        }
    }
    report
}

/// What a run did to the Workflows in flight during each kind of fault: one row a kind.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultRow {
    /// The fault kind (`kill-nats-leader`, `latency`, ...).
    pub kind: String,
    /// How many times it was injected.
    pub injected: usize,
    /// Workflows in flight while it lasted (a non-terminal status, an event acknowledged or a
    /// start received between the fault and the next heal), counted once a kind.
    pub workflows: usize,
    /// Of those, how many ended right (no wrong end state).
    pub right_end_states: usize,
    /// Of those, dispatches executed more than once.
    pub executions_twice: usize,
    /// Of those, acknowledged events lost.
    pub acked_events_lost: usize,
}

/// The per-fault table of a run: for each fault kind, the Workflows in flight during its
/// injections and how they ended, by the rules of [`check`]. A fault lasts until the next
/// `heal` record (or the end of the run). Rows in the order the kinds first appear.
pub fn fault_table(records: &[Record]) -> Vec<FaultRow> {
    let report = check(records);
    let wrong: BTreeSet<&str> = report
        .wrong_end_states
        .iter()
        .filter_map(|w| w.split(':').next())
        .collect();
    let mut lost: BTreeMap<&str, usize> = BTreeMap::new();
    for e in &report.acked_events_lost {
        if let Some(w) = e.split(' ').next() {
            *lost.entry(w).or_default() += 1;
        }
    }
    let twice: BTreeSet<&str> = report
        .executed_twice
        .iter()
        .map(|(d, _)| d.as_str())
        .collect();
    let mut twice_by_workflow: BTreeMap<&str, usize> = BTreeMap::new();
    let mut counted: BTreeSet<&str> = BTreeSet::new();
    for r in records {
        if let Record::Executed {
            workflow, dispatch, ..
        } = r
            && twice.contains(dispatch.as_str())
            && counted.insert(dispatch)
        {
            *twice_by_workflow.entry(workflow).or_default() += 1;
        }
    }
    // Each fault's window.
    let faults: Vec<(&str, f64)> = records
        .iter()
        .filter_map(|r| match r {
            Record::Fault { t, fault, .. } => Some((fault.as_str(), *t)),
            _ => None,
        })
        .collect();
    let mut windows: Vec<(&str, f64, f64)> = Vec::new();
    for (i, (kind, t)) in faults.iter().enumerate() {
        if *kind == "heal" {
            continue;
        }
        let end = faults[i + 1..]
            .iter()
            .find(|(k, _)| *k == "heal")
            .map_or(f64::INFINITY, |(_, t)| *t);
        windows.push((kind, *t, end));
    }
    let in_window = |t: f64, from: f64, to: f64| t >= from && t <= to;
    let mut rows: Vec<FaultRow> = Vec::new();
    let mut hit: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (kind, from, to) in &windows {
        if !rows.iter().any(|r| r.kind == *kind) {
            rows.push(FaultRow {
                kind: kind.to_string(),
                ..Default::default()
            });
        }
        if let Some(row) = rows.iter_mut().find(|r| r.kind == *kind) {
            row.injected += 1;
        }
        let set = hit.entry(kind).or_default();
        for r in records {
            let w = match r {
                Record::Status {
                    t, workflow, state, ..
                } if in_window(*t, *from, *to) && !TERMINAL.contains(&state.as_str()) => workflow,
                Record::EventAcked { t, workflow, .. }
                | Record::StartReceived { t, workflow, .. }
                    if in_window(*t, *from, *to) =>
                {
                    workflow
                }
                _ => continue,
            };
            set.insert(w);
        }
    }
    for row in &mut rows {
        let set = hit.get(row.kind.as_str()).cloned().unwrap_or_default();
        row.workflows = set.len();
        row.right_end_states = set.iter().filter(|w| !wrong.contains(*w)).count();
        row.executions_twice = set.iter().filter_map(|w| twice_by_workflow.get(w)).sum();
        row.acked_events_lost = set.iter().filter_map(|w| lost.get(w)).sum();
    }
    rows
}

/// The table as Markdown (RELIABILITY.md's form).
pub fn fault_table_markdown(rows: &[FaultRow]) -> String {
    let mut out = String::from(
        "| fault | injected | workflows in flight | right end states | executions twice | acknowledged events lost |\n|---|---|---|---|---|---|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} |\n",
            r.kind,
            r.injected,
            r.workflows,
            r.right_end_states,
            r.executions_twice,
            r.acked_events_lost
        ));
    }
    out
}

#[cfg(test)]
mod tests;
