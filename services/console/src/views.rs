//! View models: what a page shows, computed from the cached objects (pure; no IO). The askama
//! templates in services/console/templates/ turn them into HTML, escaping every value.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Event;
use tink_api::bmc::{
    ConditionStatus, Job as BmcJob, JobConditionType, Machine as BmcMachine, MachineConditionType,
};
use tink_api::v1alpha2::{ActionState, Hardware, Workflow, WorkflowState};

/// The colour class of a machine tile.
pub fn tile_class(state: Option<WorkflowState>) -> &'static str {
    match state {
        None => "idle",
        Some(WorkflowState::Pending | WorkflowState::Scheduled | WorkflowState::Running) => {
            "provisioning"
        }
        Some(WorkflowState::Cancelling) => "cancelling",
        Some(WorkflowState::Succeeded) => "succeeded",
        Some(WorkflowState::Failed) => "failed",
        Some(WorkflowState::Canceled) => "canceled",
    }
}

/// The state of a Workflow (Pending when it has no status yet).
pub fn state_of(w: &Workflow) -> WorkflowState {
    w.status.as_ref().map(|s| s.state).unwrap_or_default()
}

/// The DOM id of a machine's tile.
pub fn tile_id(namespace: &str, name: &str) -> String {
    format!("m/{namespace}/{name}")
}

/// The DOM id of a workflow's row.
pub fn row_id(namespace: &str, name: &str) -> String {
    format!("w/{namespace}/{name}")
}

/// One machine tile.
#[derive(Debug, Clone)]
pub struct Tile {
    /// DOM id.
    pub id: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// MACs (lower case).
    pub macs: Vec<String>,
    /// IPv4 addresses.
    pub ips: Vec<String>,
    /// `idle`, `provisioning`, `succeeded`, `failed`, `cancelling`, `canceled`.
    pub class: &'static str,
    /// The latest workflow's state, or `no workflow`.
    pub state: String,
    /// The latest workflow's name.
    pub workflow: Option<String>,
    /// `connected`, `offline` or `unknown` (no presence source configured).
    pub agent: &'static str,
    /// The BMC's power state in short (`power on`, `BMC missing`), or empty.
    pub power: String,
    /// Its class: `on`, `off`, `unknown`.
    pub power_class: &'static str,
}

impl Tile {
    /// The tile of `hw`, coloured by `latest`.
    pub fn new(hw: &Hardware, latest: Option<&Workflow>, agent: &'static str) -> Tile {
        let namespace = hw.metadata.namespace.clone().unwrap_or_default();
        let name = hw.metadata.name.clone().unwrap_or_default();
        let mut macs = Vec::new();
        let mut ips = Vec::new();
        for (mac, nic) in &hw.spec.network_interfaces {
            macs.push(mac.clone());
            if let Some(ip) = nic.dhcp.as_ref().and_then(|d| d.ip.clone()) {
                ips.push(ip);
            }
        }
        let state = latest.map(state_of);
        Tile {
            id: tile_id(&namespace, &name),
            namespace,
            name,
            macs,
            ips,
            class: tile_class(state),
            state: state.map_or("no workflow".to_string(), |s| s.to_string()),
            workflow: latest.and_then(|w| w.metadata.name.clone()),
            agent,
            power: String::new(),
            power_class: "",
        }
    }

    /// The tile showing `bmc` too (only what its power state says; the page has the rest).
    pub fn with_bmc(mut self, bmc: &Bmc) -> Tile {
        match bmc {
            Bmc::Known(b) => {
                self.power = if b.contactable == "no" {
                    format!("power {} · BMC unreachable", b.power)
                } else {
                    format!("power {}", b.power)
                };
                self.power_class = b.power;
            }
            Bmc::Missing(_) => {
                self.power = "BMC missing".into();
                self.power_class = "unknown";
            }
            Bmc::None | Bmc::Unavailable(_) => {}
        }
        self
    }
}

/// `3m20s ago`, or `in 5s` for a clock ahead of ours.
pub fn ago(t: Timestamp, now: Timestamp) -> String {
    let secs = now.duration_since(t).as_secs();
    if secs >= 0 {
        format!("{} ago", human_seconds(secs))
    } else {
        format!("in {}", human_seconds(-secs))
    }
}

/// `2026-01-01T00:00:00Z (3m20s ago)`.
fn when(t: Timestamp, now: Timestamp) -> String {
    format!("{t} ({})", ago(t, now))
}

/// What a machine shows of its BMC (`spec.bmcRef`, a `bmc.tinkerbell.org` Machine).
#[derive(Debug, Clone, PartialEq)]
pub enum Bmc {
    /// The Hardware has no `bmcRef`: nothing is shown.
    None,
    /// The BMC API cannot be read (not installed, or the console may not): why.
    Unavailable(String),
    /// The `bmcRef` names a Machine that does not exist: its name.
    Missing(String),
    /// The Machine, its power state and its last Job.
    Known(BmcView),
}

/// A BMC Machine as the machine page shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct BmcView {
    /// The Machine's name.
    pub machine: String,
    /// `on`, `off`, `unknown`.
    pub power: &'static str,
    /// `yes`, `no`, or `unknown` (no `Contactable` condition yet: never polled).
    pub contactable: &'static str,
    /// When `Contactable` last changed (the BMC controller writes the status only on a
    /// change), with how long ago; empty before the first poll.
    pub since: String,
    /// Why the BMC is not contactable (the provider's error), or empty.
    pub message: String,
    /// The Machine's last Job.
    pub job: Option<JobView>,
}

/// A BMC Job in short.
#[derive(Debug, Clone, PartialEq)]
pub struct JobView {
    /// Its name.
    pub name: String,
    /// Its tasks in short, in order (`boot pxe, power cycle`).
    pub tasks: String,
    /// `pending` (no controller started it yet), `running`, `completed`, `failed`.
    pub state: &'static str,
    /// When it was created, started or ended (the latest of these), with how long ago.
    pub when: String,
    /// The provider's error when it failed.
    pub error: String,
}

impl JobView {
    /// The view of `j` at `now`.
    pub fn new(j: &BmcJob, now: Timestamp) -> JobView {
        let status = j.status.clone().unwrap_or_default();
        let cond = |t: JobConditionType| {
            status
                .conditions
                .iter()
                .find(|c| c.type_ == t && c.status == ConditionStatus::True)
        };
        let (state, error) = if let Some(c) = cond(JobConditionType::Failed) {
            let m = if c.message.is_empty() {
                "(the BMC controller gave no message)".to_string()
            } else {
                c.message.clone()
            };
            ("failed", m)
        } else if cond(JobConditionType::Completed).is_some() {
            ("completed", String::new())
        } else if cond(JobConditionType::Running).is_some() {
            ("running", String::new())
        } else {
            ("pending", String::new())
        };
        let at = status
            .completion_time
            .as_ref()
            .or(status.start_time.as_ref())
            .or(j.metadata.creation_timestamp.as_ref())
            .map(|t| when(t.0, now))
            .unwrap_or_default();
        JobView {
            name: j.metadata.name.clone().unwrap_or_default(),
            tasks: j
                .spec
                .tasks
                .iter()
                .map(tink_api::bmc::plan::describe)
                .collect::<Vec<_>>()
                .join(", "),
            state,
            when: at,
            error,
        }
    }
}

impl BmcView {
    /// The view of `m` with its last Job `job`, at `now`.
    pub fn new(m: &BmcMachine, job: Option<&BmcJob>, now: Timestamp) -> BmcView {
        let status = m.status.clone().unwrap_or_default();
        let c = status.condition(MachineConditionType::Contactable);
        BmcView {
            machine: m.metadata.name.clone().unwrap_or_default(),
            power: status.power.unwrap_or_default().as_str(),
            contactable: match c.map(|c| c.status) {
                Some(ConditionStatus::True) => "yes",
                Some(ConditionStatus::False) => "no",
                None => "unknown",
            },
            since: c
                .and_then(|c| c.last_update_time.as_ref())
                .map(|t| when(t.0, now))
                .unwrap_or_default(),
            message: c
                .filter(|c| c.status == ConditionStatus::False)
                .map(|c| c.message.clone())
                .unwrap_or_default(),
            job: job.map(|j| JobView::new(j, now)),
        }
    }
}

impl Bmc {
    /// What `hw` shows: `api` is [`crate::cache::Cache::bmc_api`]'s answer, `machine` its
    /// `bmcRef`'s Machine if it exists, `job` that Machine's last Job.
    pub fn new(
        hw: &Hardware,
        api: &crate::cache::BmcApi,
        machine: Option<&BmcMachine>,
        job: Option<&BmcJob>,
        now: Timestamp,
    ) -> Bmc {
        let Some(name) = hw
            .spec
            .bmc_ref
            .as_ref()
            .map(|r| r.name.as_str())
            .filter(|n| !n.is_empty())
        else {
            return Bmc::None;
        };
        match (api, machine) {
            (crate::cache::BmcApi::Unavailable(why), _) => Bmc::Unavailable(why.clone()),
            (crate::cache::BmcApi::Loading, _) => {
                Bmc::Unavailable("the console is still loading the BMC Machines".into())
            }
            (crate::cache::BmcApi::Ready, None) => Bmc::Missing(name.to_string()),
            (crate::cache::BmcApi::Ready, Some(m)) => Bmc::Known(BmcView::new(m, job, now)),
        }
    }

    /// The Machine a power action would go to, when it exists.
    pub fn machine(&self) -> Option<&str> {
        match self {
            Bmc::Known(b) => Some(&b.machine),
            _ => None,
        }
    }
}

/// A workflow's duration so far (or in all), `started -> last transition or now`.
pub fn duration(w: &Workflow, now: Timestamp) -> Option<i64> {
    let status = w.status.as_ref()?;
    let start = status.started_at.as_ref()?.0;
    let end = if status.state.is_terminal() {
        status.last_transition.as_ref().map_or(now, |t| t.0)
    } else {
        now
    };
    Some(end.duration_since(start).as_secs().max(0))
}

/// `1h02m03s`, `4m05s`, `7s`.
pub fn human_seconds(secs: i64) -> String {
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    if h > 0 {
        format!("{h}h{m:02}m{s:02}s")
    } else if m > 0 {
        format!("{m}m{s:02}s")
    } else {
        format!("{s}s")
    }
}

/// Like [`human_seconds`], with tenths under ten seconds (`0.4s`, `3.2s`).
pub fn human_millis(ms: i64) -> String {
    if ms < 10_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        human_seconds(ms / 1000)
    }
}

/// One row of the workflows table.
#[derive(Debug, Clone)]
pub struct Row {
    /// DOM id.
    pub id: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The machine.
    pub hardware: String,
    /// The template.
    pub template: String,
    /// State.
    pub state: String,
    /// Lower-case state, the colour class.
    pub class: String,
    /// Seconds so far, for sorting.
    pub seconds: i64,
    /// Duration, human readable, or empty.
    pub duration: String,
    /// Creation time (RFC 3339), for sorting.
    pub created: String,
    /// `done/total` actions.
    pub progress: String,
}

impl Row {
    /// The row of `w` at `now`.
    pub fn new(w: &Workflow, now: Timestamp) -> Row {
        let namespace = w.metadata.namespace.clone().unwrap_or_default();
        let name = w.metadata.name.clone().unwrap_or_default();
        let state = state_of(w);
        let secs = duration(w, now);
        let actions = w
            .status
            .as_ref()
            .map(|s| s.actions.as_slice())
            .unwrap_or(&[]);
        let done = actions
            .iter()
            .filter(|a| a.state == ActionState::Succeeded)
            .count();
        Row {
            id: row_id(&namespace, &name),
            namespace,
            name,
            hardware: w.spec.hardware_ref.name.clone(),
            template: w.spec.template_ref.name.clone(),
            state: state.to_string(),
            class: state.as_str().to_ascii_lowercase(),
            seconds: secs.unwrap_or(-1),
            duration: secs.map(human_seconds).unwrap_or_default(),
            created: w
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default(),
            progress: format!("{done}/{}", actions.len()),
        }
    }
}

/// One bar of the timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    /// The action's name.
    pub name: String,
    /// The action's state.
    pub state: String,
    /// Lower-case state, the colour class.
    pub class: String,
    /// Top of the bar.
    pub y: u32,
    /// Baseline of the row's text.
    pub text_y: u32,
    /// Left edge.
    pub x: f64,
    /// Width (at least 2, so a Pending or instant action is visible).
    pub w: f64,
    /// Where the duration and reason text starts (after the bar).
    pub label_x: f64,
    /// Duration text, or empty.
    pub duration: String,
    /// The failure reason and message on a failed bar, else empty.
    pub reason: String,
    /// The text after the bar (state, duration, reason) in lines that fit the SVG: wrapped at
    /// spaces, at most [`LABEL_LINES`], the last cut with `…` when it does not fit.
    pub label: Vec<String>,
    /// The whole text, shown on hover.
    pub title: String,
}

/// The server-drawn SVG timeline of a workflow's actions.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    /// SVG width.
    pub width: u32,
    /// SVG height.
    pub height: u32,
    /// Where bars start (after the names).
    pub left: u32,
    /// Right end of the time axis.
    pub right: f64,
    /// One per action, in order.
    pub bars: Vec<Bar>,
    /// The span the axis covers, human readable.
    pub span: String,
    /// The height of one line of a label (the lines after the first are this far apart).
    pub line: u32,
}

const ROW: u32 = 28;
const LEFT: u32 = 180;
const AXIS: f64 = 560.0;
/// Room after the axis for the labels.
const LABELS: u32 = 260;
/// Height of one more line of a label.
const LINE: u32 = 14;
/// The widest a character of the labels' 12px font is taken to be, on average (an upper
/// estimate: a line counted with it fits).
const CHAR_W: f64 = 7.0;
/// The most lines of one bar's label.
pub const LABEL_LINES: usize = 3;

/// `text` in lines of at most `width` characters, broken after a space where there is one (a
/// longer word is cut), at most `max` lines; text left over ends the last line with `…`. The
/// lines joined give back `text` whenever it fits.
pub fn wrap(text: &str, width: usize, max: usize) -> Vec<String> {
    let (width, max) = (width.max(2), max.max(1));
    let chars: Vec<char> = text.chars().collect();
    let mut lines = Vec::new();
    let mut start = 0;
    while start < chars.len() {
        let rest = chars.len() - start;
        if lines.len() + 1 == max && rest > width {
            let mut line: String = chars[start..start + width - 1].iter().collect();
            line.truncate(line.trim_end().len());
            line.push('…');
            lines.push(line);
            return lines;
        }
        let end = start + width.min(rest);
        let cut = if end == chars.len() {
            end
        } else {
            // A space right after the width may end this line: it takes no room.
            match chars[start..=end].iter().rposition(|c| *c == ' ') {
                Some(i) if i > 0 => start + i + 1,
                _ => end,
            }
        };
        lines.push(chars[start..cut].iter().collect());
        start = cut;
    }
    if lines.is_empty() {
        lines.push(String::new());
    }
    lines
}

/// Draws `w`'s actions: one bar per action from its start to its end (now while running),
/// coloured by state; Pending actions as a thin bar after the last start.
pub fn timeline(w: &Workflow, now: Timestamp) -> Timeline {
    let actions = w
        .status
        .as_ref()
        .map(|s| s.actions.as_slice())
        .unwrap_or(&[]);
    let start_of = |a: &tink_api::v1alpha2::ActionStatus| a.started_at.as_ref().map(|t| t.0);
    let end_of = |a: &tink_api::v1alpha2::ActionStatus| {
        if a.state.is_terminal() {
            a.last_transition.as_ref().map(|t| t.0).or(start_of(a))
        } else if a.state == ActionState::Running {
            Some(now)
        } else {
            None
        }
    };
    let t0 = w
        .status
        .as_ref()
        .and_then(|s| s.started_at.as_ref().map(|t| t.0))
        .into_iter()
        .chain(actions.iter().filter_map(start_of))
        .min();
    let t1 = actions.iter().filter_map(end_of).chain(t0).max();
    let span_ms = match (t0, t1) {
        (Some(a), Some(b)) => b.duration_since(a).as_millis().max(1) as f64,
        _ => 1.0,
    };
    let scale = |t: Timestamp| -> f64 {
        match t0 {
            Some(t0) => (t.duration_since(t0).as_millis() as f64 / span_ms * AXIS).clamp(0.0, AXIS),
            None => 0.0,
        }
    };
    let width = LEFT + AXIS as u32 + LABELS;
    // The top of the next bar: a bar whose label takes more lines pushes the next ones down.
    let mut next_y = 8;
    let bars = actions
        .iter()
        .map(|a| {
            let y = next_y;
            let (x, w, duration) = match (start_of(a), end_of(a)) {
                (Some(s), Some(e)) => {
                    let x = scale(s);
                    let w = (scale(e) - x).max(2.0);
                    let ms = e.duration_since(s).as_millis().max(0) as i64;
                    (x, w, human_millis(ms))
                }
                (Some(s), None) => (scale(s), 2.0, String::new()),
                _ => (t1.map(scale).unwrap_or(0.0), 2.0, String::new()),
            };
            let reason = if a.state == ActionState::Failed {
                let r = a.failure_reason.clone().unwrap_or_default();
                match a.failure_message.as_deref().filter(|m| !m.is_empty()) {
                    Some(m) if !r.is_empty() => format!("{r}: {m}"),
                    Some(m) => m.to_string(),
                    None => r,
                }
            } else {
                String::new()
            };
            let (x, w) = ((LEFT as f64 + x).round(), w.round().max(2.0));
            let state = a.state.to_string();
            let title = if reason.is_empty() {
                format!("{state} {duration}")
            } else {
                format!("{state} {duration} · {reason}")
            };
            let label_x = x + w + 6.0;
            // What fits between the label's start and the SVG's right edge.
            let room = ((width as f64 - label_x - 4.0) / CHAR_W).floor().max(2.0) as usize;
            let label = wrap(&title, room, LABEL_LINES);
            next_y += ROW + (label.len() as u32 - 1) * LINE;
            Bar {
                name: a.rendered.name.clone(),
                state,
                class: a.state.as_str().to_ascii_lowercase(),
                y,
                text_y: y + 14,
                x,
                w,
                label_x,
                duration,
                reason,
                label,
                title,
            }
        })
        .collect::<Vec<_>>();
    Timeline {
        width,
        height: 8 + next_y.max(8 + ROW),
        left: LEFT,
        right: LEFT as f64 + AXIS,
        bars,
        span: human_millis(span_ms as i64),
        line: LINE,
    }
}

/// One condition of a workflow.
#[derive(Debug, Clone)]
pub struct ConditionRow {
    /// `Started` / `Succeeded`.
    pub type_: String,
    /// `True` / `False` / `Unknown`.
    pub status: String,
    /// Reason.
    pub reason: String,
    /// Message.
    pub message: String,
    /// Last transition.
    pub at: String,
}

/// The conditions of `w`.
pub fn conditions(w: &Workflow) -> Vec<ConditionRow> {
    w.status
        .as_ref()
        .map(|s| {
            s.conditions
                .iter()
                .map(|c| {
                    let json = serde_json::to_value(c).unwrap_or_default();
                    let text = |k: &str| {
                        json.get(k)
                            .and_then(|v| v.as_str())
                            .unwrap_or("")
                            .to_string()
                    };
                    ConditionRow {
                        type_: text("type"),
                        status: text("status"),
                        reason: c.reason.clone().unwrap_or_default(),
                        message: c.message.clone().unwrap_or_default(),
                        at: c
                            .last_transition
                            .as_ref()
                            .map(|t| t.0.to_string())
                            .unwrap_or_default(),
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

/// One action row under the timeline.
#[derive(Debug, Clone)]
pub struct ActionRow {
    /// Name.
    pub name: String,
    /// Image.
    pub image: String,
    /// State.
    pub state: String,
    /// Colour class.
    pub class: String,
    /// Started.
    pub started: String,
    /// Failure reason and message.
    pub failure: String,
}

/// The action rows of `w`.
pub fn action_rows(w: &Workflow) -> Vec<ActionRow> {
    w.status
        .as_ref()
        .map(|s| {
            s.actions
                .iter()
                .map(|a| ActionRow {
                    name: a.rendered.name.clone(),
                    image: a.rendered.image.clone(),
                    state: a.state.to_string(),
                    class: a.state.as_str().to_ascii_lowercase(),
                    started: a
                        .started_at
                        .as_ref()
                        .map(|t| t.0.to_string())
                        .unwrap_or_default(),
                    failure: [a.failure_reason.clone(), a.failure_message.clone()]
                        .into_iter()
                        .flatten()
                        .filter(|s| !s.is_empty())
                        .collect::<Vec<_>>()
                        .join(": "),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The live part of a workflow page (re-rendered and pushed on every change).
#[derive(Debug, Clone)]
pub struct Detail {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// State.
    pub state: String,
    /// Colour class.
    pub class: String,
    /// Whether the object is gone (the last state seen is shown).
    pub deleted: bool,
    /// Whether it is being deleted.
    pub deleting: bool,
    /// Whether cancelling means something (not ended, not already being deleted).
    pub cancellable: bool,
    /// Duration text.
    pub duration: String,
    /// The agent it runs on.
    pub agent: String,
    /// Timeline.
    pub timeline: Timeline,
    /// Action rows.
    pub actions: Vec<ActionRow>,
    /// Conditions.
    pub conditions: Vec<ConditionRow>,
}

impl Detail {
    /// The live part of `w`'s page.
    pub fn new(w: &Workflow, deleted: bool, now: Timestamp) -> Detail {
        let state = state_of(w);
        Detail {
            namespace: w.metadata.namespace.clone().unwrap_or_default(),
            name: w.metadata.name.clone().unwrap_or_default(),
            state: state.to_string(),
            class: state.as_str().to_ascii_lowercase(),
            deleted,
            deleting: w.metadata.deletion_timestamp.is_some(),
            cancellable: !deleted
                && w.metadata.deletion_timestamp.is_none()
                && !state.is_terminal(),
            duration: duration(w, now).map(human_seconds).unwrap_or_default(),
            agent: w
                .status
                .as_ref()
                .and_then(|s| s.agent_id.clone())
                .unwrap_or_default(),
            timeline: timeline(w, now),
            actions: action_rows(w),
            conditions: conditions(w),
        }
    }
}

/// When an Event last happened.
pub fn event_time(e: &Event) -> i64 {
    e.last_timestamp
        .as_ref()
        .map(|t| t.0.as_millisecond())
        .or_else(|| e.event_time.as_ref().map(|t| t.0.as_millisecond()))
        .or_else(|| e.first_timestamp.as_ref().map(|t| t.0.as_millisecond()))
        .or_else(|| {
            e.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_millisecond())
        })
        .unwrap_or(0)
}

/// One Kubernetes Event row.
#[derive(Debug, Clone)]
pub struct EventRow {
    /// DOM id.
    pub id: String,
    /// `Normal` / `Warning`.
    pub type_: String,
    /// Reason.
    pub reason: String,
    /// Message.
    pub message: String,
    /// Count.
    pub count: i32,
    /// Last seen.
    pub at: String,
}

impl EventRow {
    /// The row of `e`.
    pub fn new(e: &Event) -> EventRow {
        let at = event_time(e);
        EventRow {
            id: format!(
                "e/{}/{}",
                e.metadata.namespace.clone().unwrap_or_default(),
                e.metadata.name.clone().unwrap_or_default()
            ),
            type_: e.type_.clone().unwrap_or_default(),
            reason: e.reason.clone().unwrap_or_default(),
            message: e.message.clone().unwrap_or_default(),
            count: e.count.unwrap_or(1),
            at: Timestamp::from_millisecond(at)
                .map(|t| t.to_string())
                .unwrap_or_default(),
        }
    }
}

/// A label selector of the machines page: `key=value`, `key!=value`, `key` (exists), `!key`,
/// comma separated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector(Vec<(String, Op)>);

/// One requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `key=value`.
    Eq(String),
    /// `key!=value`.
    Ne(String),
    /// `key`.
    Exists,
    /// `!key`.
    Absent,
}

impl Selector {
    /// Parses `text`; a clear message when malformed.
    pub fn parse(text: &str) -> Result<Selector, String> {
        let mut out = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let valid = |k: &str| {
                !k.is_empty()
                    && k.len() <= 317
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
            };
            let (key, op) = if let Some((k, v)) = part.split_once("!=") {
                (k.trim(), Op::Ne(v.trim().to_string()))
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (k.trim(), Op::Eq(v.trim().to_string()))
            } else if let Some(k) = part.strip_prefix('!') {
                (k.trim(), Op::Absent)
            } else {
                (part, Op::Exists)
            };
            if !valid(key) {
                return Err(format!(
                    "label selector {text:?}: {key:?} is not a label key (letters, digits, `-_./`)"
                ));
            }
            out.push((key.to_string(), op));
        }
        Ok(Selector(out))
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|(k, op)| match op {
            Op::Eq(v) => labels.get(k) == Some(v),
            Op::Ne(v) => labels.get(k) != Some(v),
            Op::Exists => labels.contains_key(k),
            Op::Absent => !labels.contains_key(k),
        })
    }

    /// Whether it has no requirement.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_machine_shows_its_bmc_power_state_and_last_job() {
        use crate::cache::BmcApi;
        let hw = |bmc: Option<&str>| -> Hardware {
            let mut h: Hardware = tink_api::from_value(serde_json::json!({
                "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
                "metadata": {"name": "m1", "namespace": "a"},
                "spec": {"networkInterfaces": {"02:00:00:00:00:01": {}}},
            }))
            .unwrap();
            h.spec.bmc_ref = bmc.map(tink_api::v1alpha2::LocalObjectReference::new);
            h
        };
        let machine: BmcMachine = serde_json::from_value(serde_json::json!({
            "apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Machine",
            "metadata": {"name": "bmc-1", "namespace": "a"},
            "spec": {"connection": {"host": "10.0.0.5"}},
            "status": {"powerState": "off", "conditions": [{"type": "Contactable", "status": "False",
                "lastUpdateTime": "2026-01-01T00:00:00Z", "message": "dial tcp: connection refused"}]},
        }))
        .unwrap();
        let mut job = tink_api::bmc::plan::Plan::boot(tink_api::bmc::BootDevice::Pxe, false, true)
            .job("a", "bmc-1");
        job.metadata.name = Some("bmc-1-boot-pxe-cycle-x".into());
        job.status = serde_json::from_value(serde_json::json!({
            "startTime": "2026-01-01T00:00:30Z",
            "conditions": [{"type": "Failed", "status": "True", "message": "task 1 failed: timeout"}],
        }))
        .unwrap();
        let now: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let ready = BmcApi::Ready;
        assert_eq!(Bmc::new(&hw(None), &ready, None, None, now), Bmc::None);
        assert_eq!(
            Bmc::new(&hw(Some("ghost")), &ready, None, None, now),
            Bmc::Missing("ghost".into())
        );
        let absent = BmcApi::Unavailable("BMC API not installed".into());
        assert!(matches!(
            Bmc::new(&hw(Some("bmc-1")), &absent, Some(&machine), None, now),
            Bmc::Unavailable(m) if m.contains("not installed")
        ));
        let b = Bmc::new(&hw(Some("bmc-1")), &ready, Some(&machine), Some(&job), now);
        let Bmc::Known(v) = &b else { panic!("{b:?}") };
        assert_eq!((v.power, v.contactable), ("off", "no"));
        assert_eq!(v.since, "2026-01-01T00:00:00Z (1m00s ago)");
        assert_eq!(v.message, "dial tcp: connection refused");
        let j = v.job.as_ref().unwrap();
        assert_eq!(j.tasks, "boot pxe, power cycle");
        assert_eq!(
            (j.state, j.error.as_str()),
            ("failed", "task 1 failed: timeout")
        );
        assert_eq!(j.when, "2026-01-01T00:00:30Z (30s ago)");
        // The tile says it in short; nothing without a bmcRef or an API.
        let tile = |b: &Bmc| {
            Tile::new(&hw(Some("bmc-1")), None, "unknown")
                .with_bmc(b)
                .power
        };
        assert_eq!(tile(&b), "power off · BMC unreachable");
        assert_eq!(tile(&Bmc::Missing("ghost".into())), "BMC missing");
        assert_eq!(tile(&Bmc::None), "");
        assert_eq!(tile(&Bmc::Unavailable("x".into())), "");
    }

    use super::*;
    use serde_json::json;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn wf(status: serde_json::Value) -> Workflow {
        tink_api::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
            "metadata": {"name": "wf", "namespace": "a"},
            "spec": {"hardwareRef": {"name": "m1"}, "templateRef": {"name": "t"}},
            "status": status,
        }))
        .unwrap()
    }

    fn action(
        name: &str,
        state: &str,
        start: Option<&str>,
        end: Option<&str>,
    ) -> serde_json::Value {
        let mut a = json!({"rendered": {"name": name, "image": "img"}, "id": name, "state": state});
        if let Some(s) = start {
            a["startedAt"] = json!(s);
        }
        if let Some(e) = end {
            a["lastTransitioned"] = json!(e);
        }
        a
    }

    #[test]
    fn the_timeline_has_one_bar_per_action_scaled_to_its_time() {
        let w = wf(json!({
            "state": "Failed",
            "startedAt": "2026-01-01T00:00:00Z",
            "lastTransitioned": "2026-01-01T00:00:40Z",
            "actions": [
                action("wipe", "Succeeded", Some("2026-01-01T00:00:00Z"), Some("2026-01-01T00:00:10Z")),
                action("image", "Failed", Some("2026-01-01T00:00:10Z"), Some("2026-01-01T00:00:40Z")),
                action("reboot", "Pending", None, None),
            ],
        }));
        let mut w = w;
        if let Some(s) = w.status.as_mut() {
            s.actions[1].failure_reason = Some("DiskFull".into());
            s.actions[1].failure_message = Some("no space left".into());
        }
        let t = timeline(&w, ts("2026-01-01T01:00:00Z"));
        assert_eq!(t.bars.len(), 3);
        let (wipe, image, reboot) = (&t.bars[0], &t.bars[1], &t.bars[2]);
        assert_eq!(wipe.x, LEFT as f64);
        assert_eq!(wipe.w, (AXIS / 4.0).round());
        assert_eq!(image.x, (LEFT as f64 + AXIS / 4.0).round());
        assert_eq!(image.w, (AXIS * 3.0 / 4.0).round());
        assert_eq!(image.class, "failed");
        assert_eq!(image.reason, "DiskFull: no space left");
        assert_eq!(wipe.reason, "");
        assert_eq!(wipe.duration, "10s");
        assert_eq!(reboot.class, "pending");
        assert_eq!(reboot.w, 2.0);
        assert_eq!(t.span, "40s");
        assert_eq!(human_millis(400), "0.4s");
        assert!(reboot.y > image.y && image.y > wipe.y);
    }

    #[test]
    fn a_failure_text_wraps_within_the_timeline_and_shows_whole_on_hover() {
        // The last action fails at the right end of the axis, where its text used to run off
        // the SVG ("NonZeroExitCode: exit co").
        let message = "exit code 1: cannot write the image to /dev/sda";
        let mut w = wf(json!({
            "state": "Failed",
            "startedAt": "2026-01-01T00:00:00Z",
            "actions": [
                action("wipe", "Succeeded", Some("2026-01-01T00:00:00Z"), Some("2026-01-01T00:00:10Z")),
                action("image", "Failed", Some("2026-01-01T00:00:10Z"), Some("2026-01-01T00:00:40Z")),
                action("reboot", "Pending", None, None),
            ],
        }));
        if let Some(s) = w.status.as_mut() {
            s.actions[1].failure_reason = Some("NonZeroExitCode".into());
            s.actions[1].failure_message = Some(message.into());
        }
        let t = timeline(&w, ts("2026-01-01T01:00:00Z"));
        let (wipe, image, reboot) = (&t.bars[0], &t.bars[1], &t.bars[2]);
        let whole = format!("Failed 30s · NonZeroExitCode: {message}");
        assert_eq!(image.title, whole, "the whole text, on hover");
        assert_eq!(image.reason, format!("NonZeroExitCode: {message}"));
        assert!(
            image.label.len() > 1 && image.label.len() <= LABEL_LINES,
            "{:?}",
            image.label
        );
        assert_eq!(image.label.concat(), whole, "wrapped, nothing lost");
        for line in &image.label {
            let end = image.label_x + line.trim_end().chars().count() as f64 * CHAR_W;
            assert!(
                end <= t.width as f64,
                "{line:?} ends at {end} of {}",
                t.width
            );
        }
        // The extra lines push the next bar down, and the SVG grows with them.
        let extra = (image.label.len() as u32 - 1) * t.line;
        assert_eq!(image.y - wipe.y, ROW);
        assert_eq!(reboot.y - image.y, ROW + extra);
        assert_eq!(t.height, 16 + 3 * ROW + extra);
        assert_eq!(
            wipe.label,
            vec![wipe.title.clone()],
            "a short text is one line"
        );

        // A text too long for the lines is cut with `…`; the title still has all of it.
        let long = "x ".repeat(400);
        if let Some(s) = w.status.as_mut() {
            s.actions[1].failure_message = Some(long.clone());
        }
        let t = timeline(&w, ts("2026-01-01T01:00:00Z"));
        let image = &t.bars[1];
        assert_eq!(image.label.len(), LABEL_LINES);
        assert!(
            image.label[LABEL_LINES - 1].ends_with('…'),
            "{:?}",
            image.label
        );
        assert!(image.title.ends_with(long.trim_end()) || image.title.ends_with(&long));
    }

    #[test]
    fn wrap_breaks_at_spaces_cuts_long_words_and_marks_what_is_left_out() {
        assert_eq!(wrap("short", 10, 3), ["short"]);
        assert_eq!(wrap("", 10, 3), [""]);
        assert_eq!(wrap("aaa bbb ccc", 7, 3), ["aaa bbb ", "ccc"]);
        assert_eq!(wrap("aaaaaaaaaaaa", 5, 3), ["aaaaa", "aaaaa", "aa"]);
        assert_eq!(wrap("aaa bbb ccc ddd", 4, 2), ["aaa ", "bbb…"]);
        assert_eq!(
            wrap("éé éé éé", 3, 3),
            ["éé ", "éé ", "éé"],
            "characters, not bytes"
        );
        for (text, width) in [
            ("NonZeroExitCode: exit code 1 and more words here", 9),
            ("a b c d e f g h", 3),
        ] {
            let lines = wrap(text, width, 100);
            assert_eq!(lines.concat(), text);
            assert!(
                lines.iter().all(|l| l.trim_end().chars().count() <= width),
                "{lines:?}"
            );
        }
    }

    #[test]
    fn a_running_action_reaches_now() {
        let w = wf(json!({
            "state": "Running",
            "startedAt": "2026-01-01T00:00:00Z",
            "actions": [action("wipe", "Running", Some("2026-01-01T00:00:00Z"), None)],
        }));
        let t = timeline(&w, ts("2026-01-01T00:00:30Z"));
        assert_eq!(t.bars[0].w, AXIS);
        assert_eq!(t.bars[0].duration, "30s");
        let d = Detail::new(&w, false, ts("2026-01-01T00:00:30Z"));
        assert!(d.cancellable);
        assert!(!Detail::new(&w, true, ts("2026-01-01T00:00:30Z")).cancellable);
        assert_eq!(duration(&w, ts("2026-01-01T00:00:30Z")), Some(30));
        assert_eq!(timeline(&wf(json!({})), Timestamp::now()).bars.len(), 0);
    }

    #[test]
    fn tiles_are_coloured_by_the_latest_state() {
        assert_eq!(tile_class(None), "idle");
        assert_eq!(tile_class(Some(WorkflowState::Running)), "provisioning");
        assert_eq!(tile_class(Some(WorkflowState::Scheduled)), "provisioning");
        assert_eq!(tile_class(Some(WorkflowState::Succeeded)), "succeeded");
        assert_eq!(tile_class(Some(WorkflowState::Failed)), "failed");
        assert_eq!(tile_class(Some(WorkflowState::Canceled)), "canceled");
    }

    #[test]
    fn durations_read_like_go() {
        assert_eq!(human_seconds(7), "7s");
        assert_eq!(human_seconds(245), "4m05s");
        assert_eq!(human_seconds(3723), "1h02m03s");
    }

    #[test]
    fn label_selectors_parse_and_match() {
        let s = Selector::parse("rack=r1, !retired,zone, role!=spare").unwrap();
        let mut l = BTreeMap::new();
        l.insert("rack".to_string(), "r1".to_string());
        l.insert("zone".to_string(), "z".to_string());
        assert!(s.matches(&l));
        l.insert("role".to_string(), "spare".to_string());
        assert!(!s.matches(&l));
        l.remove("role");
        l.insert("retired".to_string(), "yes".to_string());
        assert!(!s.matches(&l));
        assert!(Selector::parse("").unwrap().is_empty());
        assert!(
            Selector::parse("a b=c")
                .unwrap_err()
                .contains("not a label key")
        );
        assert!(Selector::parse("<script>=1").is_err());
    }
}

/// What a machine's page shows of its inventory (`status.attributes.inBand`, as its agent
/// reported it) and of its discovery.
#[derive(Debug, Clone, Default)]
pub struct InventoryView {
    /// When the controller stored it (RFC 3339), or empty.
    pub reported_at: String,
    /// Who reported it, in words (the machine's authenticated agent, or an enrollment).
    pub reported_by: String,
    /// System vendor and product.
    pub product: String,
    /// System serial number.
    pub serial: String,
    /// CPU model, cores and threads.
    pub cpu: String,
    /// Total memory.
    pub memory: String,
    /// Disks: name, size, model and serial.
    pub disks: Vec<(String, String, String)>,
    /// NICs: MAC, and model, speed and link.
    pub nics: Vec<(String, String)>,
}

/// Bytes as GiB or MiB for people.
pub fn human_bytes(bytes: u64) -> String {
    const GIB: u64 = 1 << 30;
    if bytes >= GIB {
        format!("{:.1} GiB", bytes as f64 / GIB as f64)
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

impl InventoryView {
    /// The inventory of `hw`, `None` when its agent never reported one (or it is not in
    /// Tinkerbell's attributes shape).
    pub fn of(hw: &tink_api::v1alpha2::Hardware) -> Option<Self> {
        let status = hw.status.as_ref()?;
        let in_band = status.attributes.as_ref()?.in_band.as_ref()?;
        let a: tink_inventory::attributes::Attributes =
            serde_json::from_value(in_band.clone()).ok()?;
        let join = |parts: &[Option<&String>]| {
            parts
                .iter()
                .flatten()
                .map(|s| s.as_str())
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        };
        let product = a
            .product
            .as_ref()
            .map(|p| join(&[p.vendor.as_ref(), p.name.as_ref()]))
            .unwrap_or_default();
        let serial = a
            .product
            .as_ref()
            .and_then(|p| p.serial_number.clone())
            .unwrap_or_default();
        let cpu = a
            .cpu
            .as_ref()
            .map(|c| {
                let model = c
                    .sockets
                    .first()
                    .and_then(|s| s.model.clone())
                    .unwrap_or_default();
                format!(
                    "{}{} cores, {} threads",
                    if model.is_empty() {
                        String::new()
                    } else {
                        format!("{model}: ")
                    },
                    c.total_cores,
                    c.total_threads
                )
            })
            .unwrap_or_default();
        let memory = a
            .memory
            .as_ref()
            .map(|m| human_bytes(m.total_bytes))
            .unwrap_or_default();
        let disks = a
            .block_devices
            .iter()
            .map(|d| {
                (
                    d.name.clone().unwrap_or_default(),
                    human_bytes(d.size_bytes),
                    join(&[d.model.as_ref(), d.serial_number.as_ref()]),
                )
            })
            .collect();
        let nics = a
            .network_interfaces
            .iter()
            .flat_map(|n| {
                let model = join(&[n.vendor.as_ref(), n.model.as_ref()]);
                n.ports.iter().map(move |p| {
                    let speed = if p.speed_mbps > 0 {
                        format!(" {} Mb/s", p.speed_mbps)
                    } else {
                        String::new()
                    };
                    (
                        p.mac.clone().unwrap_or_default(),
                        format!(
                            "{model}{speed}{}",
                            p.link_status
                                .as_ref()
                                .map(|l| format!(" link {l}"))
                                .unwrap_or_default()
                        )
                        .trim()
                        .to_string(),
                    )
                })
            })
            .collect();
        Some(Self {
            reported_at: status.inventory_reported_at.clone().unwrap_or_default(),
            reported_by: match status.inventory_source.as_deref() {
                Some(tink_api::v1alpha2::INVENTORY_SOURCE_AGENT) => "its authenticated agent",
                Some(tink_api::v1alpha2::INVENTORY_SOURCE_ENROLLMENT) => {
                    "an enrollment, without credentials (not trusted by rules until its agent reports)"
                }
                _ => "-",
            }
            .to_string(),
            product,
            serial,
            cpu,
            memory,
            disks,
            nics,
        })
    }
}
