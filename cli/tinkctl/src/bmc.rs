//! `tinkctl bmc power|boot ACTION MACHINE`: creates a `bmc.tinkerbell.org/v1alpha1` Job for one
//! Machine (the BMC controller runs it), prints the Job's name and, unless `--no-wait`, follows
//! it: one line per change of each of its Tasks, then the Job's result. The exit status is 0
//! only when the Job Completed.

use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand, ValueEnum};
use futures::StreamExt;
use futures::stream::BoxStream;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use tink_api::bmc::{
    Action, BootDevice, ConditionStatus, Job, JobConditionType, Machine, PowerAction, Task,
    TaskConditionType, task_name,
};
// What a command asks for (the Job's tasks and name) and how a task is said in short: shared
// with the web console's power form.
pub use tink_api::bmc::plan::{Plan, describe};

use crate::kubeconfig::KubeArgs;

/// `tinkctl bmc ...`.
#[derive(Subcommand, Debug)]
pub enum BmcCommand {
    /// Power a Machine on, off (hard), soft (graceful ACPI off), cycle (off then on), reset
    /// (hard), or read its power state (status): a Job with that one power task.
    Power(PowerArgs),
    /// Set the device of the Machine's next boot (one time only: Rufio has no persistent boot
    /// device): a Job with a one-time boot device task, and with --and-cycle a power cycle after
    /// it (boot from that device now).
    Boot(BootArgs),
}

/// Arguments of `tinkctl bmc power`.
#[derive(Args, Debug)]
pub struct PowerArgs {
    /// The power action.
    #[arg(value_enum)]
    pub action: PowerArg,
    /// The Machine (bmc.tinkerbell.org) to act on.
    pub machine: String,
    #[command(flatten)]
    pub follow: FollowArgs,
}

/// Arguments of `tinkctl bmc boot`.
#[derive(Args, Debug)]
pub struct BootArgs {
    /// The boot device (Rufio's BootDevice values).
    #[arg(value_enum)]
    pub device: BootArg,
    /// The Machine (bmc.tinkerbell.org) to act on.
    pub machine: String,
    /// Boot the device in UEFI mode (legacy BIOS mode otherwise).
    #[arg(long)]
    pub efi: bool,
    /// Power cycle the Machine after setting the boot device, so it boots from it now.
    #[arg(long)]
    pub and_cycle: bool,
    #[command(flatten)]
    pub follow: FollowArgs,
}

/// Where the Job goes and how it is followed.
#[derive(Args, Debug, Clone)]
pub struct FollowArgs {
    /// The namespace of the Machine and of the Job.
    #[arg(short, long, env = "TINK_NAMESPACE", default_value = "default")]
    pub namespace: String,
    /// Print the Job's name and exit without following it.
    #[arg(long)]
    pub no_wait: bool,
    /// Give up following after this long (e.g. 90s, 5m, 1h30m; a bare number is seconds). The
    /// Job itself goes on.
    #[arg(long, default_value = "5m", value_parser = parse_timeout)]
    pub timeout: Duration,
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// A power action as typed (Rufio's PowerAction values).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowerArg {
    /// Power on.
    On,
    /// Hard power off.
    Off,
    /// Graceful (ACPI) power off.
    Soft,
    /// Power off, then on.
    Cycle,
    /// Hard reset.
    Reset,
    /// Read the power state; printed once the Job completed.
    Status,
}

impl PowerArg {
    fn action(self) -> PowerAction {
        match self {
            Self::On => PowerAction::On,
            Self::Off => PowerAction::Off,
            Self::Soft => PowerAction::Soft,
            Self::Cycle => PowerAction::Cycle,
            Self::Reset => PowerAction::Reset,
            Self::Status => PowerAction::Status,
        }
    }
}

/// A boot device as typed (Rufio's BootDevice values).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootArg {
    /// Network boot.
    Pxe,
    /// The local disk.
    Disk,
    /// A CD or DVD (virtual media included).
    Cdrom,
    /// The firmware setup.
    Bios,
    /// Safe mode.
    Safe,
}

impl BootArg {
    fn device(self) -> BootDevice {
        match self {
            Self::Pxe => BootDevice::Pxe,
            Self::Disk => BootDevice::Disk,
            Self::Cdrom => BootDevice::Cdrom,
            Self::Bios => BootDevice::Bios,
            Self::Safe => BootDevice::Safe,
        }
    }
}

/// `--timeout`: a friendly duration (`90s`, `5m`, `1h30m`) or a number of seconds; above zero.
fn parse_timeout(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let d = match s.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => {
            let d: jiff::SignedDuration = s
                .parse()
                .map_err(|e| format!("{s:?} is not a duration such as 90s, 5m or 1h30m: {e}"))?;
            Duration::try_from(d).map_err(|_| format!("{s:?} is negative"))?
        }
    };
    if d.is_zero() {
        return Err("the timeout must be above zero".into());
    }
    Ok(d)
}

/// `5m`, `1m 30s`: a duration as it was typed, roughly.
fn friendly(d: Duration) -> String {
    match jiff::SignedDuration::try_from(d) {
        Ok(d) => format!("{d:#}"),
        Err(_) => format!("{}s", d.as_secs()),
    }
}

/// A Task's state as shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskState {
    /// It exists and has not ended.
    Running,
    /// `Completed` is `True`.
    Completed,
    /// `Failed` is `True`, with the provider's error.
    Failed(String),
}

impl TaskState {
    /// The state of `task`.
    pub fn of(task: &Task) -> Self {
        let Some(status) = &task.status else {
            return Self::Running;
        };
        if let Some(c) = status
            .conditions
            .iter()
            .find(|c| c.type_ == TaskConditionType::Failed && c.status == ConditionStatus::True)
        {
            return Self::Failed(c.message.clone());
        }
        if status.has_condition(TaskConditionType::Completed, ConditionStatus::True) {
            return Self::Completed;
        }
        Self::Running
    }
}

/// How a Job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every task completed.
    Completed,
    /// A task failed, or the Job could not run: the `Failed` condition's message.
    Failed(String),
}

/// The lines a followed Job prints: each Task's state once per change, the Job's start, and
/// its end. Pure: fed with what the watches saw, in any order.
#[derive(Debug)]
pub struct Progress {
    namespace: String,
    job: String,
    uid: String,
    tasks: Vec<String>,
    shown: Vec<Option<TaskState>>,
    running: bool,
}

impl Progress {
    /// For the Job `job` in `namespace` (its uid as created) with `tasks`.
    pub fn new(namespace: &str, job: &str, uid: &str, tasks: &[Action]) -> Self {
        Self {
            namespace: namespace.to_string(),
            job: job.to_string(),
            uid: uid.to_string(),
            tasks: tasks.iter().map(describe).collect(),
            shown: vec![None; tasks.len()],
            running: false,
        }
    }

    /// Whether `task` is this Job's: named `<job>-task-<index>` with no owner Job of another uid
    /// (a Task left from an earlier Job of the same name belongs to that one).
    fn owns(&self, index: usize, task: &Task) -> bool {
        let named = task.metadata.name.as_deref() == Some(task_name(&self.job, index).as_str());
        let other_owner = task
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "Job" && o.uid != self.uid);
        named && !other_owner
    }

    /// The line for Task `index` when its state changed.
    pub fn task(&mut self, index: usize, task: &Task) -> Option<String> {
        if index >= self.tasks.len() || !self.owns(index, task) {
            return None;
        }
        let state = TaskState::of(task);
        if self.shown[index].as_ref() == Some(&state) {
            return None;
        }
        let what = &self.tasks[index];
        let line = match &state {
            TaskState::Running => format!("task {index} {what}: running"),
            TaskState::Completed => format!("task {index} {what}: completed"),
            TaskState::Failed(m) if m.is_empty() => format!("task {index} {what}: failed"),
            TaskState::Failed(m) => format!("task {index} {what}: failed: {m}"),
        };
        self.shown[index] = Some(state);
        Some(line)
    }

    /// The line for the Job when it started running, and its outcome once it ended.
    pub fn job(&mut self, job: &Job) -> (Option<String>, Option<Outcome>) {
        let status = job.status.clone().unwrap_or_default();
        let failed = status
            .conditions
            .iter()
            .find(|c| c.type_ == JobConditionType::Failed && c.status == ConditionStatus::True);
        if let Some(c) = failed {
            let message = if c.message.is_empty() {
                "(the controller gave no message)".to_string()
            } else {
                c.message.clone()
            };
            return (None, Some(Outcome::Failed(message)));
        }
        if status.has_condition(JobConditionType::Completed, ConditionStatus::True) {
            return (None, Some(Outcome::Completed));
        }
        if !self.running && status.has_condition(JobConditionType::Running, ConditionStatus::True) {
            self.running = true;
            return (Some(format!("job {} running", self.job)), None);
        }
        (None, None)
    }

    /// Whether the BMC controller was seen to start the Job.
    pub fn started(&self) -> bool {
        self.running || self.shown.iter().any(Option::is_some)
    }
}

/// Runs a `bmc` subcommand.
pub fn run(cmd: BmcCommand) -> anyhow::Result<()> {
    let (machine, plan, follow, print_power) = match cmd {
        BmcCommand::Power(a) => {
            let action = a.action.action();
            (
                a.machine,
                Plan::power(action),
                a.follow,
                action == PowerAction::Status,
            )
        }
        BmcCommand::Boot(a) => (
            a.machine,
            Plan::boot(a.device.device(), a.efi, a.and_cycle),
            a.follow,
            false,
        ),
    };
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    rt.block_on(run_plan(&machine, &plan, &follow, print_power))
}

async fn run_plan(
    machine: &str,
    plan: &Plan,
    args: &FollowArgs,
    print_power: bool,
) -> anyhow::Result<()> {
    let ns = &args.namespace;
    let client = args.kube.client().await?;
    let machines: Api<Machine> = Api::namespaced(client.clone(), ns);
    let found = machines
        .get_opt(machine)
        .await
        .with_context(|| format!("reading Machine {ns}/{machine}"))?;
    if found.is_none() {
        bail!(
            "Machine {ns}/{machine} not found: no Job created (kubectl get machines.bmc.tinkerbell.org -n {ns} lists the Machines)"
        );
    }
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let created = jobs
        .create(&PostParams::default(), &plan.job(ns, machine))
        .await
        .with_context(|| format!("creating a Job for Machine {ns}/{machine}"))?;
    let name = created
        .metadata
        .name
        .clone()
        .context("the API server returned the created Job without a name")?;
    let uid = created.metadata.uid.clone().unwrap_or_default();
    println!("{name}");
    if args.no_wait {
        return Ok(());
    }
    let tasks: Api<Task> = Api::namespaced(client, ns);
    let mut progress = Progress::new(ns, &name, &uid, &plan.tasks);
    match follow(&jobs, &tasks, &name, &mut progress, args.timeout).await? {
        Outcome::Completed => {
            println!("job {name} completed");
            if print_power {
                let m = machines
                    .get(machine)
                    .await
                    .with_context(|| format!("reading Machine {ns}/{machine}"))?;
                match m.status.and_then(|s| s.power) {
                    Some(p) => println!("power state of {machine}: {p}"),
                    None => bail!(
                        "Machine {ns}/{machine} has no status.powerState although its status Job completed"
                    ),
                }
            }
            Ok(())
        }
        Outcome::Failed(message) => bail!("job {name} failed: {message}"),
    }
}

/// What one of the watches saw.
enum Seen {
    Job(Option<Box<Job>>),
    Task(usize, Option<Box<Task>>),
}

/// Follows Job `name` and its Tasks, printing `progress`'s lines, until it ended or `timeout`.
async fn follow(
    jobs: &Api<Job>,
    tasks: &Api<Task>,
    name: &str,
    progress: &mut Progress,
    timeout: Duration,
) -> anyhow::Result<Outcome> {
    let count = progress.tasks.len();
    // One watch for the Job and one per Task name (`<job>-task-<n>`, as the controller names
    // them), each by field selector, so a busy namespace's other Tasks are never sent here.
    let mut streams: Vec<BoxStream<'static, Result<Seen, watcher::Error>>> = vec![
        watcher::watch_object(jobs.clone(), name)
            .default_backoff()
            .map(|e| e.map(|j| Seen::Job(j.map(Box::new))))
            .boxed(),
    ];
    for index in 0..count {
        streams.push(
            watcher::watch_object(tasks.clone(), &task_name(name, index))
                .default_backoff()
                .map(move |e| e.map(|t| Seen::Task(index, t.map(Box::new))))
                .boxed(),
        );
    }
    let mut all = futures::stream::select_all(streams);
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            seen = all.next() => match seen {
                Some(Ok(Seen::Job(Some(job)))) => {
                    let (line, outcome) = progress.job(&job);
                    if let Some(line) = line {
                        println!("{line}");
                    }
                    if let Some(outcome) = outcome {
                        // The Task watches may lag the Job's: show every Task's last state
                        // before the result.
                        for index in 0..count {
                            let task = tasks
                                .get_opt(&task_name(name, index))
                                .await
                                .with_context(|| format!("reading Task {}", task_name(name, index)))?;
                            if let Some(line) = task.and_then(|t| progress.task(index, &t)) {
                                println!("{line}");
                            }
                        }
                        return Ok(outcome);
                    }
                }
                Some(Ok(Seen::Job(None))) => bail!("job {name} was deleted before it finished"),
                Some(Ok(Seen::Task(index, Some(task)))) => {
                    if let Some(line) = progress.task(index, &task) {
                        println!("{line}");
                    }
                }
                Some(Ok(Seen::Task(_, None))) => {}
                Some(Err(e)) if refused(&e) => bail!(
                    "not allowed to follow job {name} (needs list and watch on jobs and tasks, get on tasks): {e}"
                ),
                Some(Err(e)) => eprintln!("warning: watching job {name}: {e} (retrying)"),
                None => bail!("the watches of job {name} ended"),
            },
            _ = &mut deadline => {
                let hint = if progress.started() {
                    "it goes on running"
                } else {
                    "no BMC controller started it: is tink-bmc-controller running and serving this namespace?"
                };
                bail!(
                    "job {name} did not finish within {}; {hint} (kubectl get jobs.bmc.tinkerbell.org -n {} {name})",
                    friendly(timeout),
                    progress.namespace,
                )
            }
        }
    }
}

/// Whether a watch failed on authentication or authorization: retrying would not help.
fn refused(e: &watcher::Error) -> bool {
    let status = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s,
        watcher::Error::WatchError(s) => s,
        _ => return false,
    };
    matches!(status.code, 401 | 403)
}

#[cfg(test)]
mod tests {
    use tink_api::bmc::{JobStatus, TaskSpec, TaskStatus};

    use super::*;

    /// Every BootDevice and PowerAction of the API can be typed, under its JSON spelling.
    #[test]
    fn every_rufio_value_is_offered_under_its_own_name() {
        fn boot_arg(d: BootDevice) -> BootArg {
            // No wildcard: a BootDevice added to the API fails to compile here.
            match d {
                BootDevice::Pxe => BootArg::Pxe,
                BootDevice::Disk => BootArg::Disk,
                BootDevice::Cdrom => BootArg::Cdrom,
                BootDevice::Bios => BootArg::Bios,
                BootDevice::Safe => BootArg::Safe,
            }
        }
        fn power_arg(p: PowerAction) -> PowerArg {
            match p {
                PowerAction::On => PowerArg::On,
                PowerAction::Off => PowerArg::Off,
                PowerAction::Soft => PowerArg::Soft,
                PowerAction::Cycle => PowerArg::Cycle,
                PowerAction::Reset => PowerArg::Reset,
                PowerAction::Status => PowerArg::Status,
            }
        }
        for b in BootArg::value_variants() {
            let name = b.to_possible_value().expect("shown");
            assert_eq!(name.get_name(), b.device().as_str());
            assert_eq!(boot_arg(b.device()), *b);
        }
        for p in PowerArg::value_variants() {
            let name = p.to_possible_value().expect("shown");
            assert_eq!(name.get_name(), p.action().as_str());
            assert_eq!(power_arg(p.action()), *p);
        }
    }

    #[test]
    fn timeouts_parse_friendly_or_in_seconds() {
        assert_eq!(parse_timeout("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_timeout("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_timeout("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_timeout("45"), Ok(Duration::from_secs(45)));
        assert!(parse_timeout("0s").is_err());
        assert!(parse_timeout("-5m").is_err());
        let e = parse_timeout("soon").expect_err("not a duration");
        assert!(e.contains("\"soon\""), "{e}");
        assert_eq!(friendly(Duration::from_secs(300)), "5m");
        assert_eq!(friendly(Duration::from_secs(90)), "1m 30s");
    }

    fn task(name: &str, owner_uid: Option<&str>, conditions: &[(TaskConditionType, &str)]) -> Task {
        let mut t = Task::new(
            name,
            TaskSpec {
                task: Action::power(PowerAction::Cycle),
                connection: None,
            },
        );
        if let Some(uid) = owner_uid {
            t.metadata.owner_references = Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    api_version: tink_api::bmc::API_VERSION.into(),
                    kind: "Job".into(),
                    name: "j".into(),
                    uid: uid.into(),
                    controller: Some(true),
                    ..Default::default()
                },
            ]);
        }
        let mut status = TaskStatus::default();
        for (c, m) in conditions {
            status.set_condition(*c, ConditionStatus::True, m);
        }
        t.status = Some(status);
        t
    }

    fn job_with(conditions: &[(JobConditionType, &str)]) -> Job {
        let mut j = Plan::power(PowerAction::Cycle).job("ns", "m");
        let mut status = JobStatus::default();
        for (c, m) in conditions {
            status.set_condition(*c, ConditionStatus::True, m);
        }
        j.status = Some(status);
        j
    }

    #[test]
    fn each_task_state_prints_once_and_the_job_ends_with_its_conditions() {
        let plan = Plan::boot(BootDevice::Pxe, true, true);
        let mut p = Progress::new("ns", "j", "u1", &plan.tasks);
        assert!(!p.started());
        assert_eq!(p.job(&job_with(&[])), (None, None));
        assert_eq!(
            p.job(&job_with(&[(JobConditionType::Running, "")])),
            (Some("job j running".into()), None)
        );
        assert_eq!(
            p.job(&job_with(&[(JobConditionType::Running, "")])),
            (None, None)
        );
        let t0 = task("j-task-0", Some("u1"), &[]);
        assert_eq!(
            p.task(0, &t0).as_deref(),
            Some("task 0 boot pxe (efi): running")
        );
        assert_eq!(p.task(0, &t0), None, "no change, no line");
        let done = task(
            "j-task-0",
            Some("u1"),
            &[(TaskConditionType::Completed, "")],
        );
        assert_eq!(
            p.task(0, &done).as_deref(),
            Some("task 0 boot pxe (efi): completed")
        );
        // Another Job's Task of the same name, or a Task under another name, is not shown.
        let stale = task("j-task-1", Some("u0"), &[(TaskConditionType::Failed, "x")]);
        assert_eq!(p.task(1, &stale), None);
        assert_eq!(p.task(1, &task("k-task-1", Some("u1"), &[])), None);
        assert_eq!(p.task(5, &task("j-task-5", Some("u1"), &[])), None);
        let failed = task(
            "j-task-1",
            Some("u1"),
            &[(TaskConditionType::Failed, "power cycle: connection refused")],
        );
        assert_eq!(
            p.task(1, &failed).as_deref(),
            Some("task 1 power cycle: failed: power cycle: connection refused")
        );
        assert_eq!(
            p.job(&job_with(&[
                (JobConditionType::Running, ""),
                (JobConditionType::Failed, "task 1 (j-task-1) failed: boom"),
            ])),
            (
                None,
                Some(Outcome::Failed("task 1 (j-task-1) failed: boom".into()))
            )
        );
        assert_eq!(
            p.job(&job_with(&[(JobConditionType::Completed, "")])),
            (None, Some(Outcome::Completed))
        );
        assert!(
            matches!(p.job(&job_with(&[(JobConditionType::Failed, "")])).1, Some(Outcome::Failed(m)) if m.contains("no message"))
        );
    }

    #[test]
    fn only_authn_and_authz_failures_stop_the_watch() {
        use kube::core::Status;
        let api =
            |code| kube::Error::Api(Status::failure("no", "Forbidden").with_code(code).boxed());
        assert!(refused(&watcher::Error::InitialListFailed(api(403))));
        assert!(refused(&watcher::Error::WatchStartFailed(api(401))));
        assert!(refused(&watcher::Error::WatchError(
            Status::failure("no", "Forbidden").with_code(403).boxed()
        )));
        assert!(!refused(&watcher::Error::InitialListFailed(api(500))));
        assert!(!refused(&watcher::Error::WatchError(
            Status::failure("gone", "Expired").with_code(410).boxed()
        )));
        assert!(!refused(&watcher::Error::NoResourceVersion));
    }

    #[test]
    fn a_task_seen_first_as_done_prints_once() {
        let mut p = Progress::new("ns", "j", "u1", &Plan::power(PowerAction::Off).tasks);
        let done = task("j-task-0", None, &[(TaskConditionType::Completed, "")]);
        assert_eq!(
            p.task(0, &done).as_deref(),
            Some("task 0 power off: completed")
        );
        assert!(p.started());
        assert_eq!(p.task(0, &done), None);
    }
}
