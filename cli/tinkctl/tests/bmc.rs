//! `tinkctl bmc` against kube-lite with the bmc.tinkerbell.org CRDs: each command creates a Job
//! with exactly its tasks for the Machine in its own namespace; a missing Machine is refused
//! before anything is created; `--no-wait` prints the name and returns; a followed Job prints
//! each Task's state and ends 0 on Completed, non-zero with the message on Failed or timeout.
//!
//! No BMC controller runs here: where a Job is followed, the test itself writes the Job's and
//! the Tasks' status (and creates the Tasks, named and owned as tink-bmc-controller does),
//! standing in for the controller. An end-to-end test with the real controller is separate.
//! One run goes through an auditing proxy, so the RBAC verbs docs/bmc.md lists are checked.

// Only the auditing proxy of the shared test code is used here.
#[allow(dead_code)]
mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tink_api::bmc::{Job, Machine, Task, TaskSpec};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

struct Env {
    _dir: tempfile::TempDir,
    _server: kube_lite::RunningServer,
    client: kube::Client,
    kubeconfig: PathBuf,
}

/// kube-lite with the three bmc.tinkerbell.org CRDs, and a Machine `m1` in `default` and `lab`.
async fn env() -> Env {
    let dir = tempfile::tempdir().expect("tmp");
    let server = kube_lite::Server::start(kube_lite::Config::default())
        .await
        .expect("kube-lite");
    let client = server.client().expect("client");
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let crds = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for kind in ["machines", "jobs", "tasks"] {
        let path = crds.join(format!("{kind}.bmc.tinkerbell.org.yaml"));
        let text = std::fs::read_to_string(&path).expect("read CRD");
        let crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("CRD YAML");
        api.create(&PostParams::default(), &crd)
            .await
            .expect("create CRD");
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let lab: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "lab"}})).expect("namespace");
    namespaces
        .create(&PostParams::default(), &lab)
        .await
        .expect("create namespace lab");
    for ns in ["default", "lab"] {
        let machine: Machine = tink_api::from_value(json!({
            "apiVersion": "bmc.tinkerbell.org/v1alpha1", "kind": "Machine",
            "metadata": {"name": "m1", "namespace": ns},
            "spec": {"connection": {
                "host": "10.0.0.5",
                "authSecretRef": {"name": "m1-auth", "namespace": ns},
                "insecureTLS": true,
            }},
        }))
        .expect("machine");
        Api::<Machine>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &machine)
            .await
            .expect("create machine");
    }
    Env {
        _dir: dir,
        _server: server,
        client,
        kubeconfig,
    }
}

fn tinkctl(kubeconfig: &Path, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_tinkctl"));
    command
        .arg("bmc")
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env_remove("TINK_NAMESPACE")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

async fn run(command: &mut tokio::process::Command) -> std::process::Output {
    tokio::time::timeout(Duration::from_secs(30), command.output())
        .await
        .expect("tinkctl ends")
        .expect("tinkctl runs")
}

/// A followed run: its stdout read line by line while the test plays the controller.
struct Follow {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    seen: Vec<String>,
}

impl Follow {
    fn spawn(kubeconfig: &Path, args: &[&str]) -> Self {
        let mut child = tinkctl(kubeconfig, args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tinkctl runs");
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Self {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The next stdout line.
    async fn line(&mut self) -> String {
        let line = tokio::time::timeout(Duration::from_secs(20), self.lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("no line within 20s after {:?}", self.seen))
            .expect("read stdout")
            .unwrap_or_else(|| panic!("stdout ended after {:?}", self.seen));
        self.seen.push(line.clone());
        line
    }

    /// The exit status, the remaining stdout lines and stderr.
    async fn end(mut self) -> (std::process::ExitStatus, Vec<String>, String) {
        let mut rest = Vec::new();
        while let Some(line) = tokio::time::timeout(Duration::from_secs(20), self.lines.next_line())
            .await
            .expect("stdout ends")
            .expect("read stdout")
        {
            rest.push(line);
        }
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            e.read_to_string(&mut stderr).await.expect("stderr");
        }
        let status = tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .expect("tinkctl ends")
            .expect("wait");
        (status, rest, stderr)
    }
}

/// As the controller: the Job's conditions, `(type, status, message)`.
async fn job_status(jobs: &Api<Job>, name: &str, conditions: &[(&str, &str, &str)]) {
    let conditions: Vec<Value> = conditions
        .iter()
        .map(|(t, s, m)| json!({"type": t, "status": s, "message": m}))
        .collect();
    jobs.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"conditions": conditions}})),
    )
    .await
    .expect("job status");
}

/// As the controller: creates the Job's `index`th Task (`<job>-task-<index>`, owned by the Job)
/// with the Job's action.
async fn create_task(tasks: &Api<Task>, job: &Job, index: usize) -> String {
    let job_name = job.metadata.name.clone().expect("job name");
    let name = tink_api::bmc::task_name(&job_name, index);
    let mut task = Task::new(
        &name,
        TaskSpec {
            task: job.spec.tasks[index].clone(),
            connection: None,
        },
    );
    task.metadata.owner_references = Some(vec![OwnerReference {
        api_version: tink_api::bmc::API_VERSION.into(),
        kind: "Job".into(),
        name: job_name,
        uid: job.metadata.uid.clone().expect("job uid"),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    tasks
        .create(&PostParams::default(), &task)
        .await
        .expect("create task");
    name
}

/// As the controller: a Task's condition.
async fn task_status(tasks: &Api<Task>, name: &str, type_: &str, message: &str) {
    tasks
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [
                {"type": type_, "status": "True", "message": message}
            ]}})),
        )
        .await
        .expect("task status");
}

#[tokio::test]
async fn each_command_creates_a_job_with_exactly_its_tasks_and_no_wait_returns_at_once() {
    let env = env().await;
    let boot = |device: &str, efi: bool| {
        let mut action = json!({"device": [device]});
        if efi {
            action["efiBoot"] = json!(true);
        }
        json!({"oneTimeBootDeviceAction": action})
    };
    let cases: Vec<(Vec<&str>, &str, Value)> = vec![
        (
            vec!["power", "on"],
            "m1-power-on-",
            json!([{"powerAction": "on"}]),
        ),
        (
            vec!["power", "off"],
            "m1-power-off-",
            json!([{"powerAction": "off"}]),
        ),
        (
            vec!["power", "soft"],
            "m1-power-soft-",
            json!([{"powerAction": "soft"}]),
        ),
        (
            vec!["power", "cycle"],
            "m1-power-cycle-",
            json!([{"powerAction": "cycle"}]),
        ),
        (
            vec!["power", "reset"],
            "m1-power-reset-",
            json!([{"powerAction": "reset"}]),
        ),
        (
            vec!["power", "status"],
            "m1-power-status-",
            json!([{"powerAction": "status"}]),
        ),
        (
            vec!["boot", "pxe"],
            "m1-boot-pxe-",
            json!([boot("pxe", false)]),
        ),
        (
            vec!["boot", "disk", "--efi"],
            "m1-boot-disk-",
            json!([boot("disk", true)]),
        ),
        (
            vec!["boot", "cdrom"],
            "m1-boot-cdrom-",
            json!([boot("cdrom", false)]),
        ),
        (
            vec!["boot", "bios"],
            "m1-boot-bios-",
            json!([boot("bios", false)]),
        ),
        (
            vec!["boot", "safe"],
            "m1-boot-safe-",
            json!([boot("safe", false)]),
        ),
        (
            vec!["boot", "pxe", "--efi", "--and-cycle"],
            "m1-boot-pxe-cycle-",
            json!([boot("pxe", true), {"powerAction": "cycle"}]),
        ),
    ];
    let jobs: Api<Job> = Api::namespaced(env.client.clone(), "lab");
    for (args, prefix, tasks) in &cases {
        let mut args = args.clone();
        args.extend(["m1", "-n", "lab", "--no-wait"]);
        let out = run(&mut tinkctl(&env.kubeconfig, &args)).await;
        assert!(out.status.success(), "{args:?}: {out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "{args:?}: --no-wait prints the name only: {lines:?}"
        );
        let name = lines[0];
        assert!(
            name.starts_with(prefix) && name.len() > prefix.len(),
            "{args:?}: {name}"
        );
        let job = jobs.get(name).await.expect("the printed Job exists");
        assert_eq!(
            (
                job.spec.machine_ref.name.as_str(),
                job.spec.machine_ref.namespace.as_str()
            ),
            ("m1", "lab"),
            "{args:?}"
        );
        assert_eq!(
            &serde_json::to_value(&job.spec.tasks).expect("json"),
            tasks,
            "{args:?}"
        );
        assert_eq!(job.status, None, "{args:?}: nobody wrote a status");
    }
    let all = jobs.list(&ListParams::default()).await.expect("list");
    assert_eq!(all.items.len(), cases.len(), "one Job per command");
    let default: Api<Job> = Api::namespaced(env.client.clone(), "default");
    let none = default.list(&ListParams::default()).await.expect("list");
    assert!(none.items.is_empty(), "nothing outside -n lab");
}

#[tokio::test]
async fn a_missing_machine_is_refused_before_any_job_is_created() {
    let env = env().await;
    for args in [
        &["power", "cycle", "nope"][..],
        &["boot", "pxe", "nope", "--and-cycle"],
        &["power", "on", "m1", "-n", "elsewhere"],
    ] {
        let out = run(&mut tinkctl(&env.kubeconfig, args)).await;
        assert!(!out.status.success(), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("not found: no Job created")
                && (err.contains("Machine default/nope") || err.contains("Machine elsewhere/m1")),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
    }
    for ns in ["default", "lab", "elsewhere"] {
        let jobs: Api<Job> = Api::namespaced(env.client.clone(), ns);
        let list = jobs.list(&ListParams::default()).await.expect("list");
        assert!(list.items.is_empty(), "{ns}: {:?}", list.items);
    }
    // A device Rufio does not have is refused by the parser, which lists Rufio's.
    let out = run(&mut tinkctl(&env.kubeconfig, &["boot", "floppy", "m1"])).await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("[possible values: pxe, disk, cdrom, bios, safe]"),
        "{err}"
    );
}

#[tokio::test]
async fn a_completed_job_prints_each_task_as_it_changes_then_the_result() {
    let env = env().await;
    let jobs: Api<Job> = Api::namespaced(env.client.clone(), "default");
    let tasks: Api<Task> = Api::namespaced(env.client.clone(), "default");
    let mut f = Follow::spawn(
        &env.kubeconfig,
        &["boot", "pxe", "m1", "--efi", "--and-cycle"],
    );
    let name = f.line().await;
    let job = jobs.get(&name).await.expect("job");

    // Each step waits for its line, so every line comes from the live watches.
    job_status(&jobs, &name, &[("Running", "True", "")]).await;
    assert_eq!(f.line().await, format!("job {name} running"));
    let t0 = create_task(&tasks, &job, 0).await;
    assert_eq!(f.line().await, "task 0 boot pxe (efi): running");
    task_status(&tasks, &t0, "Completed", "").await;
    assert_eq!(f.line().await, "task 0 boot pxe (efi): completed");
    let t1 = create_task(&tasks, &job, 1).await;
    assert_eq!(f.line().await, "task 1 power cycle: running");
    task_status(&tasks, &t1, "Completed", "").await;
    assert_eq!(f.line().await, "task 1 power cycle: completed");
    job_status(
        &jobs,
        &name,
        &[("Running", "False", ""), ("Completed", "True", "")],
    )
    .await;
    let (status, rest, stderr) = f.end().await;
    assert!(status.success(), "{status:?}: {stderr}");
    assert_eq!(rest, [format!("job {name} completed")], "{stderr}");
}

#[tokio::test]
async fn power_status_prints_the_machines_power_state_once_its_job_completed() {
    let env = env().await;
    let jobs: Api<Job> = Api::namespaced(env.client.clone(), "lab");
    let tasks: Api<Task> = Api::namespaced(env.client.clone(), "lab");
    let machines: Api<Machine> = Api::namespaced(env.client.clone(), "lab");
    // tinkctl talks through the auditing proxy; the test's own calls go straight to kube-lite.
    let audit = common::Audit::default();
    let proxy = common::start_proxy(env.kubeconfig.clone(), audit.clone()).await;
    let proxied = env.kubeconfig.with_file_name("kubeconfig-proxied");
    std::fs::write(&proxied, kube_lite::kubeconfig_yaml(&proxy)).expect("kubeconfig");
    let mut f = Follow::spawn(&proxied, &["power", "status", "m1", "-n", "lab"]);
    let name = f.line().await;
    let job = jobs.get(&name).await.expect("job");
    // All at once, as a fast controller would: the follower may first see the Job Completed,
    // and still prints the Task's state before the result.
    job_status(&jobs, &name, &[("Running", "True", "")]).await;
    let t0 = create_task(&tasks, &job, 0).await;
    task_status(&tasks, &t0, "Completed", "").await;
    machines
        .patch_status(
            "m1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"powerState": "off"}})),
        )
        .await
        .expect("machine status");
    job_status(
        &jobs,
        &name,
        &[("Running", "False", ""), ("Completed", "True", "")],
    )
    .await;
    let (status, rest, stderr) = f.end().await;
    assert!(status.success(), "{status:?}: {stderr}");
    let task_line = rest
        .iter()
        .position(|l| l == "task 0 power status: completed")
        .unwrap_or_else(|| panic!("{rest:?}"));
    let n = rest.len();
    assert!(task_line < n - 2, "{rest:?}");
    assert_eq!(
        rest[n - 2..],
        [
            format!("job {name} completed"),
            "power state of m1: off".to_string()
        ],
        "{rest:?}"
    );
    // The verbs docs/bmc.md says a user of tinkctl bmc needs, and no others.
    let calls: std::collections::BTreeSet<(String, String, String, String)> = audit
        .calls()
        .into_iter()
        .map(|c| (c.group, c.resource, c.verb, c.namespace))
        .collect();
    let want: std::collections::BTreeSet<(String, String, String, String)> = [
        ("machines", "get"),
        ("jobs", "create"),
        ("jobs", "list"),
        ("jobs", "watch"),
        ("tasks", "get"),
        ("tasks", "list"),
        ("tasks", "watch"),
    ]
    .into_iter()
    .map(|(r, v)| {
        (
            "bmc.tinkerbell.org".into(),
            r.into(),
            v.into(),
            "lab".into(),
        )
    })
    .collect();
    assert_eq!(calls, want);
}

#[tokio::test]
async fn a_failed_job_exits_non_zero_with_its_message() {
    let env = env().await;
    let jobs: Api<Job> = Api::namespaced(env.client.clone(), "default");
    let tasks: Api<Task> = Api::namespaced(env.client.clone(), "default");
    let mut f = Follow::spawn(&env.kubeconfig, &["power", "on", "m1"]);
    let name = f.line().await;
    let job = jobs.get(&name).await.expect("job");
    job_status(&jobs, &name, &[("Running", "True", "")]).await;
    assert_eq!(f.line().await, format!("job {name} running"));
    let t0 = create_task(&tasks, &job, 0).await;
    assert_eq!(f.line().await, "task 0 power on: running");
    let why = "power on: redfish 10.0.0.5: connection refused";
    task_status(&tasks, &t0, "Failed", why).await;
    assert_eq!(f.line().await, format!("task 0 power on: failed: {why}"));
    let message = format!("task 0 ({t0}) failed: {why}");
    job_status(
        &jobs,
        &name,
        &[("Running", "False", ""), ("Failed", "True", &message)],
    )
    .await;
    let (status, rest, stderr) = f.end().await;
    assert!(!status.success(), "{status:?}");
    assert!(rest.is_empty(), "{rest:?}");
    assert!(
        stderr.contains(&format!("job {name} failed: {message}")),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_job_nobody_runs_times_out_non_zero_and_says_so() {
    let env = env().await;
    let started = std::time::Instant::now();
    let out = run(&mut tinkctl(
        &env.kubeconfig,
        &["power", "cycle", "m1", "--timeout", "2s"],
    ))
    .await;
    assert!(!out.status.success(), "{out:?}");
    assert!(started.elapsed() >= Duration::from_secs(2));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let name = stdout.lines().next().expect("the Job's name").to_string();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("job {name} did not finish within 2s"))
            && err.contains("no BMC controller started it"),
        "{err}"
    );
    // The Job stays: following gave up, the Job did not.
    let jobs: Api<Job> = Api::namespaced(env.client.clone(), "default");
    jobs.get(&name).await.expect("the Job is left in place");
}

#[tokio::test]
async fn a_job_deleted_while_followed_ends_non_zero() {
    let env = env().await;
    let jobs: Api<Job> = Api::namespaced(env.client.clone(), "default");
    let mut f = Follow::spawn(&env.kubeconfig, &["power", "off", "m1"]);
    let name = f.line().await;
    job_status(&jobs, &name, &[("Running", "True", "")]).await;
    assert_eq!(f.line().await, format!("job {name} running"));
    jobs.delete(&name, &Default::default())
        .await
        .expect("delete job");
    let (status, rest, stderr) = f.end().await;
    assert!(!status.success(), "{status:?}");
    assert!(rest.is_empty(), "{rest:?}");
    assert!(
        stderr.contains(&format!("job {name} was deleted before it finished")),
        "{stderr}"
    );
}
