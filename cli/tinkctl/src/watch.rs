//! `tinkctl workflow watch NAME`: a Workflow's progress, one line per action with its state and
//! duration, live (indicatif) on a terminal and as plain transition lines otherwise.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use futures::StreamExt;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use jiff::Timestamp;
use kube::api::Api;
use kube::runtime::watcher;
use tink_api::v1alpha2::{ActionState, Workflow, WorkflowState};

use crate::kubeconfig::KubeArgs;

/// The annotation in which the controller records the Workflow's trace id.
pub use tink_api::TRACE_ID_ANNOTATION;

/// `tinkctl workflow ...`.
#[derive(Subcommand, Debug)]
pub enum WorkflowCommand {
    /// Follow a Workflow until it ends (exit status 0 only when it Succeeded).
    Watch(Box<WatchArgs>),
    /// Print the output of a Workflow's actions (stored lines, then live ones with -f), each
    /// line prefixed by its action's name. Read through a server under Kubernetes RBAC
    /// (--server), or, for administrators, straight from NATS (--nats-url).
    Logs(Box<crate::logs::LogsArgs>),
}

/// Arguments of `tinkctl workflow watch`.
#[derive(Args, Debug, Clone)]
pub struct WatchArgs {
    /// The Workflow's name.
    pub name: String,
    /// The Workflow's namespace.
    #[arg(short, long, env = "TINK_NAMESPACE", default_value = "default")]
    pub namespace: String,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout_seconds: u64,
    /// Administrator mode: NATS server URL(s); when given without a server, a terminal shows
    /// the last output line of the running action read straight from the logs stream, which
    /// bypasses RBAC (see `tinkctl workflow logs`).
    #[arg(long, env = "NATS_URL")]
    pub nats_url: Option<String>,
    #[command(flatten)]
    pub nats: crate::logs::NatsLogin,
    /// With a server (`--server`/`TINK_SERVER`), a terminal shows the last output line of the
    /// running action read through it, under Kubernetes RBAC (`get` on `workflows/log`).
    #[command(flatten)]
    pub server: crate::logs::ServerArgs,
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// Runs a `workflow` subcommand.
pub fn run(cmd: WorkflowCommand) -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let args = match cmd {
        WorkflowCommand::Watch(args) => *args,
        WorkflowCommand::Logs(args) => return rt.block_on(crate::logs::run(*args)),
    };
    rt.block_on(async {
        let client = args.kube.client().await?;
        let api: Api<Workflow> = Api::namespaced(client, &args.namespace);
        let output = match (&args.server.server, &args.nats_url) {
            (Some(_), _) => match args.server.access(args.kube.kubeconfig.as_deref()) {
                Ok(access) => Some(crate::logs::last_lines_through(
                    access,
                    args.namespace.clone(),
                    args.name.clone(),
                )),
                Err(e) => {
                    eprintln!("not showing action output: {e:#}");
                    None
                }
            },
            (None, Some(url)) => {
                let auth = args.nats.auth();
                crate::logs::last_lines(url, &auth, api.clone(), args.name.clone()).await
            }
            (None, None) => None,
        };
        let wf = follow_with_output(
            &api,
            &args.name,
            Duration::from_secs(args.timeout_seconds),
            output,
        )
        .await?;
        finish(&wf)
    })
}

/// Prints the end of a followed Workflow and turns anything but `Succeeded` into an error.
pub fn finish(wf: &Workflow) -> anyhow::Result<()> {
    let name = wf.metadata.name.clone().unwrap_or_default();
    let state = wf.status.as_ref().map(|s| s.state).unwrap_or_default();
    if let Some(trace) = trace_id(wf) {
        println!("{}", trace_hint(trace, |k| std::env::var(k).ok()));
    }
    if state == WorkflowState::Succeeded {
        println!("workflow {name} Succeeded");
        Ok(())
    } else {
        anyhow::bail!("workflow {name} ended {}{}", state.as_str(), failure(wf))
    }
}

/// Where the trace went, from what this process can know: `TINK_TRACE_URL` (a link template with
/// `{trace}`, e.g. the compose stack's Jaeger `http://localhost:16686/trace/{trace}`), else the
/// OTLP endpoint of this environment (which `tinkctl dev up` passes on to the services it starts),
/// else that none is set, so the services exported the trace nowhere unless theirs was.
pub fn trace_hint(trace: &str, env: impl Fn(&str) -> Option<String>) -> String {
    let set = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    if let Some(url) = set("TINK_TRACE_URL") {
        return format!("trace id {trace}: {}", url.replace("{trace}", trace));
    }
    match set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| set("OTEL_EXPORTER_OTLP_ENDPOINT")) {
        Some(endpoint) => format!(
            "trace id {trace}: exported to the OTLP endpoint {endpoint}; open it in the tracing UI that reads from there (TINK_TRACE_URL=<url with {{trace}}> prints a link)"
        ),
        None => format!(
            "trace id {trace} (no OTLP endpoint is set here: the services export traces only when OTEL_EXPORTER_OTLP_ENDPOINT is set for them)"
        ),
    }
}

/// The Workflow's trace id, when the controller recorded one.
pub fn trace_id(wf: &Workflow) -> Option<&str> {
    wf.metadata
        .annotations
        .as_ref()?
        .get(TRACE_ID_ANNOTATION)
        .map(String::as_str)
        .filter(|s| !s.is_empty())
}

fn failure(wf: &Workflow) -> String {
    let Some(status) = &wf.status else {
        return String::new();
    };
    for a in &status.actions {
        if a.state == ActionState::Failed {
            return format!(
                ": action {} failed: {} {}",
                a.rendered.name,
                a.failure_reason.as_deref().unwrap_or("Unknown"),
                a.failure_message.as_deref().unwrap_or("")
            );
        }
    }
    status
        .conditions
        .iter()
        .find(|c| c.reason.is_some() && c.status == tink_api::v1alpha2::ConditionStatus::False)
        .map(|c| {
            format!(
                ": {} {}",
                c.reason.as_deref().unwrap_or_default(),
                c.message.as_deref().unwrap_or_default()
            )
        })
        .unwrap_or_default()
}

/// One displayed line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The action's name (the Workflow's own line has its name).
    pub name: String,
    /// The state as the API spells it.
    pub state: &'static str,
    /// Time spent so far (running) or in all (ended); `None` before it started.
    pub duration: Option<Duration>,
    /// Whether it ended.
    pub done: bool,
    /// Failure reason and message, when it failed.
    pub detail: Option<String>,
}

/// The lines for a Workflow at `now`: first the Workflow itself, then one per action.
pub fn lines(wf: &Workflow, now: Timestamp) -> Vec<Line> {
    let status = wf.status.clone().unwrap_or_default();
    let span = |start: Option<&Timestamp>, end: Option<&Timestamp>, done: bool| {
        let start = start?;
        let end = if done {
            end.copied().unwrap_or(now)
        } else {
            now
        };
        let d = end.duration_since(*start);
        Some(Duration::try_from(d).unwrap_or_default())
    };
    let wf_done = status.state.is_terminal();
    let mut out = vec![Line {
        name: wf.metadata.name.clone().unwrap_or_default(),
        state: status.state.as_str(),
        duration: span(
            status.started_at.as_ref().map(|t| &t.0),
            status.last_transition.as_ref().map(|t| &t.0),
            wf_done,
        ),
        done: wf_done,
        detail: None,
    }];
    for a in &status.actions {
        let done = a.state.is_terminal();
        out.push(Line {
            name: a.rendered.name.clone(),
            state: a.state.as_str(),
            duration: span(
                a.started_at.as_ref().map(|t| &t.0),
                a.last_transition.as_ref().map(|t| &t.0),
                done,
            ),
            done,
            detail: a
                .failure_reason
                .as_ref()
                .map(|r| format!("{r}: {}", a.failure_message.as_deref().unwrap_or_default())),
        });
    }
    out
}

/// Shows the last output line of each running action (by action id) as its detail.
pub fn with_last_output(
    shown: &mut [Line],
    wf: &Workflow,
    last: &std::collections::HashMap<String, String>,
) {
    let Some(status) = &wf.status else { return };
    for (line, action) in shown.iter_mut().skip(1).zip(&status.actions) {
        if !line.done
            && line.detail.is_none()
            && let Some(text) = last.get(&action.id)
        {
            let text: String = text.chars().take(120).collect();
            line.detail = Some(format!("> {text}"));
        }
    }
}

fn format_line(l: &Line, width: usize) -> String {
    let d = l
        .duration
        .map(|d| format!("{:.1}s", d.as_secs_f64()))
        .unwrap_or_default();
    let detail = l
        .detail
        .as_deref()
        .map(|d| format!("  {d}"))
        .unwrap_or_default();
    format!("{:<width$}  {:<10} {:>7}{detail}", l.name, l.state, d)
}

/// A display: live bars on a terminal, transition lines otherwise.
struct Display {
    live: Option<(MultiProgress, Vec<ProgressBar>)>,
    printed: BTreeMap<String, &'static str>,
}

impl Display {
    fn new() -> Self {
        let live = std::io::stderr().is_terminal().then(|| {
            (
                MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
                Vec::new(),
            )
        });
        Self {
            live,
            printed: BTreeMap::new(),
        }
    }

    fn show(&mut self, lines: &[Line]) {
        let width = lines.iter().map(|l| l.name.len()).max().unwrap_or(8).max(8);
        match &mut self.live {
            Some((multi, bars)) => {
                while bars.len() < lines.len() {
                    let bar = multi.add(ProgressBar::new_spinner());
                    bar.set_style(
                        ProgressStyle::with_template("{spinner:.cyan} {msg}")
                            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                    );
                    bar.enable_steady_tick(Duration::from_millis(120));
                    bars.push(bar);
                }
                for (i, (l, bar)) in lines.iter().zip(bars.iter()).enumerate() {
                    let indent = if i == 0 { "" } else { "  " };
                    let mark = match l.state {
                        "Succeeded" => "✔",
                        "Failed" | "Canceled" => "✘",
                        _ => "",
                    };
                    let text = format!("{indent}{}", format_line(l, width));
                    if l.done && !bar.is_finished() {
                        bar.finish_with_message(format!("{mark} {text}"));
                    } else if !l.done {
                        bar.set_message(text);
                    }
                }
            }
            None => {
                for (i, l) in lines.iter().enumerate() {
                    let key = if i == 0 {
                        String::new()
                    } else {
                        l.name.clone()
                    };
                    if self.printed.get(&key) != Some(&l.state) {
                        self.printed.insert(key, l.state);
                        let kind = if i == 0 { "workflow" } else { "  action" };
                        println!("{kind} {}", format_line(l, width));
                    }
                }
            }
        }
    }
}

/// Follows a Workflow until it ends or `timeout` passes, displaying it; returns its last state.
pub async fn follow(
    api: &Api<Workflow>,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<Workflow> {
    follow_with_output(api, name, timeout, None).await
}

/// Like [`follow`]; with `output` (the last output line of each action id), a running action
/// without a failure shows its last output line.
pub async fn follow_with_output(
    api: &Api<Workflow>,
    name: &str,
    timeout: Duration,
    output: Option<crate::logs::LastLines>,
) -> anyhow::Result<Workflow> {
    let lines = |wf: &Workflow, now: Timestamp| {
        let mut shown = lines(wf, now);
        if let Some(output) = &output {
            with_last_output(&mut shown, wf, &output.snapshot());
        }
        shown
    };
    let mut display = Display::new();
    let mut stream = watcher::watch_object(api.clone(), name).boxed();
    let mut last: Option<Workflow> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            ev = stream.next() => match ev {
                Some(Ok(Some(wf))) => {
                    display.show(&lines(&wf, Timestamp::now()));
                    let ended = wf.status.as_ref().is_some_and(|s| s.state.is_terminal());
                    last = Some(wf);
                    if ended {
                        break;
                    }
                }
                Some(Ok(None)) => {
                    if last.is_some() {
                        anyhow::bail!("workflow {name} was deleted");
                    }
                }
                Some(Err(e)) => tracing_free_warn(&format!("watch: {e} (retrying)")),
                None => anyhow::bail!("the watch of workflow {name} ended"),
            },
            _ = tick.tick() => {
                if let Some(wf) = &last {
                    display.show(&lines(wf, Timestamp::now()));
                }
            }
            _ = &mut deadline => anyhow::bail!("workflow {name} did not end within {}s", timeout.as_secs()),
        }
    }
    last.with_context(|| format!("workflow {name} not found"))
}

fn tracing_free_warn(msg: &str) {
    eprintln!("warning: {msg}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wf(yaml: &str) -> Workflow {
        serde_yaml::from_str(yaml).expect("workflow")
    }

    const RUNNING: &str = r#"
apiVersion: tinkerbell.org/v1alpha2
kind: Workflow
metadata: {name: w, namespace: n, annotations: {"tinkerbell.org/trace-id": "4bf92f3577b34da6a3ce929d0e0e4736"}}
spec: {hardwareRef: {name: h}, templateRef: {name: t}}
status:
  state: Running
  startedAt: "2025-01-01T00:00:00Z"
  actions:
    - id: a1
      rendered: {name: fetch, image: x}
      state: Succeeded
      startedAt: "2025-01-01T00:00:00Z"
      lastTransitioned: "2025-01-01T00:00:02Z"
    - id: a2
      rendered: {name: write, image: x}
      state: Running
      startedAt: "2025-01-01T00:00:02Z"
    - id: a3
      rendered: {name: verify, image: x}
      state: Pending
"#;

    #[test]
    fn one_line_per_action_with_state_and_duration() {
        let now: Timestamp = "2025-01-01T00:00:05Z".parse().expect("ts");
        let l = lines(&wf(RUNNING), now);
        assert_eq!(l.len(), 4);
        assert_eq!(
            (l[0].name.as_str(), l[0].state, l[0].duration),
            ("w", "Running", Some(Duration::from_secs(5)))
        );
        assert_eq!(
            (l[1].state, l[1].duration, l[1].done),
            ("Succeeded", Some(Duration::from_secs(2)), true)
        );
        assert_eq!(
            (l[2].state, l[2].duration, l[2].done),
            ("Running", Some(Duration::from_secs(3)), false)
        );
        assert_eq!((l[3].state, l[3].duration), ("Pending", None));
        assert_eq!(format_line(&l[1], 8), "fetch     Succeeded     2.0s");
    }

    #[test]
    fn the_running_action_shows_its_last_output_line() {
        let w = wf(RUNNING);
        let mut l = lines(&w, "2025-01-01T00:00:05Z".parse().expect("ts"));
        let last = std::collections::HashMap::from([
            ("a1".to_string(), "fetched".to_string()),
            ("a2".to_string(), "wrote 3 of 8 GiB".to_string()),
        ]);
        with_last_output(&mut l, &w, &last);
        assert_eq!(l[1].detail, None, "an ended action shows no output");
        assert_eq!(l[2].detail.as_deref(), Some("> wrote 3 of 8 GiB"));
        assert_eq!(l[3].detail, None);
    }

    #[test]
    fn a_failed_workflow_is_an_error_naming_the_action_and_reason() {
        let text = RUNNING
            .replace("state: Running\n  startedAt", "state: Failed\n  startedAt")
            .replace("      state: Running\n", "      state: Failed\n      failureReason: Exit1\n      failureMessage: exit status 1\n");
        let w = wf(&text);
        assert_eq!(trace_id(&w), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
        let err = finish(&w).expect_err("failed");
        assert_eq!(
            err.to_string(),
            "workflow w ended Failed: action write failed: Exit1 exit status 1"
        );
        let l = lines(&w, Timestamp::now());
        assert_eq!(l[2].detail.as_deref(), Some("Exit1: exit status 1"));
    }

    #[test]
    fn the_trace_hint_says_where_the_trace_went() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == k)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        assert_eq!(
            trace_hint(
                "abc",
                env(&[
                    ("TINK_TRACE_URL", "http://localhost:16686/trace/{trace}"),
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x:4317")
                ])
            ),
            "trace id abc: http://localhost:16686/trace/abc"
        );
        let otlp = trace_hint(
            "abc",
            env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x:4317")]),
        );
        assert!(
            otlp.contains("exported to the OTLP endpoint http://x:4317"),
            "{otlp}"
        );
        assert!(!otlp.contains("16686"), "{otlp}");
        let none = trace_hint("abc", env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]));
        assert!(none.contains("no OTLP endpoint is set"), "{none}");
        assert!(!none.contains("Jaeger"), "{none}");
    }
}
