//! End to end through `tinkctl dev up`: every service its own process (kube-lite, nats-server,
//! two controllers, two servers, the agent on the machine's Docker engine; the webhook and Hegel
//! when this build has them), driven with tinkctl and kubectl as a user would:
//! - `kubectl explain workflow.spec` answers from kube-lite's OpenAPI;
//! - `tinkctl demo` runs the sample workflow to Succeeded, and the web console shows it to the
//!   kubeconfig's user (and refuses a request without a token);
//! - a failing action fails the workflow with its reason (and `tinkctl workflow watch` says so);
//! - a workflow deleted while running is canceled and its container stopped;
//! - a server replica killed mid-workflow changes nothing visible (the agent moves to the other);
//! - `tinkctl dev status` notices the dead replica, `tinkctl dev down` stops everything;
//! - machines' syslog: RFC 3164 and 5424 datagrams sent from a Hardware's address to the
//!   receiver `dev up` runs (`TINK_SYSLOG_ADDR`) are printed by `tinkctl hardware logs` and
//!   shown on the console's machine page; an unknown address's are counted and dropped;
//!   Hegel's scripts name the receiver (`syslog_host=`);
//! - every Kubernetes API call each service made (recorded by an auditing proxy the services
//!   reach kube-lite through, each with its own token) is allowed by its RBAC in deploy/.
//!
//! The binaries come from the same target directory as tinkctl (`cargo test --workspace` builds
//! them all; with `-p tinkctl` alone, build them first: see scripts/demo.sh).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::ListContainersOptionsBuilder;
use kube::api::{Api, DeleteParams};
use tink_api::v1alpha2::{ActionState, Workflow, WorkflowState};

const NS: &str = "tink-demo";
const BINARIES: [&str; 9] = [
    "kube-lite",
    "tink-netboot",
    "tink-webhook",
    "tink-controller",
    "tink-bmc-controller",
    "tink-server",
    "hegel",
    "tink-console",
    "tink-agent",
];

fn tinkctl() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tinkctl"))
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("command runs");
    eprintln!(
        "$ {cmd:?}\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

struct Stack {
    dir: tempfile::TempDir,
}

impl Stack {
    fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        let _ = run(Command::new(tinkctl())
            .args(["dev", "down", "--data-dir"])
            .arg(self.dir.path()));
        if std::thread::panicking() {
            for entry in std::fs::read_dir(self.dir.path().join("logs"))
                .into_iter()
                .flatten()
                .flatten()
            {
                let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                eprintln!(
                    "--- {}\n{}",
                    entry.path().display(),
                    lines[lines.len().saturating_sub(25)..].join("\n")
                );
            }
        }
    }
}

fn template(name: &str, script: &str) -> String {
    format!(
        r#"apiVersion: tinkerbell.org/v1alpha2
kind: Template
metadata: {{name: {name}, namespace: {NS}}}
spec:
  actions:
    - name: first
      image: tink-demo/actions:latest
      cmd: /bin/sh
      args: ["-c", "echo first"]
    - name: second
      image: tink-demo/actions:latest
      cmd: /bin/sh
      args: ["-c", {script:?}]
    - name: third
      image: tink-demo/actions:latest
      cmd: /bin/sh
      args: ["-c", "echo third"]
---
apiVersion: tinkerbell.org/v1alpha2
kind: Workflow
metadata: {{name: {name}, namespace: {NS}}}
spec:
  hardwareRef: {{name: machine-1}}
  templateRef: {{name: {name}}}
"#
    )
}

/// A Template and Workflow as Tinkerbell users write them (v1alpha1: the template text in
/// `spec.data`, the worker from the Workflow's `hardwareMap`).
const V1ALPHA1_WORKFLOW: &str = r#"apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata: {name: v1-hello, namespace: tink-demo}
spec:
  data: |
    version: "0.1"
    name: v1-hello
    global_timeout: 600
    tasks:
      - name: "os-installation"
        worker: "{{.device_1}}"
        actions:
          - name: "say-hello"
            image: tink-demo/actions:latest
            timeout: 60
            command: ["/bin/sh", "-c", "echo hello from {{.device_1}}"]
          - name: "say-bye"
            image: tink-demo/actions:latest
            timeout: 60
            command: ["/bin/sh", "-c", "echo bye"]
---
apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata: {name: v1-hello, namespace: tink-demo}
spec:
  templateRef: v1-hello
  hardwareRef: machine-1
  hardwareMap:
    device_1: "02:00:00:00:00:01"
"#;

fn kubectl_apply(stack: &Stack, yaml: &str) {
    let file = stack.dir.path().join("apply.yaml");
    std::fs::write(&file, yaml).expect("write");
    let out = run(Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(stack.kubeconfig())
        .args(["apply", "-f"])
        .arg(&file));
    assert!(out.status.success(), "kubectl apply failed");
}

async fn wait_for(
    api: &Api<Workflow>,
    name: &str,
    what: &str,
    done: impl Fn(&Workflow) -> bool,
) -> Workflow {
    for _ in 0..600 {
        if let Some(w) = api.get_opt(name).await.expect("get workflow")
            && done(&w)
        {
            return w;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let w = api.get_opt(name).await.expect("get workflow");
    panic!(
        "workflow {name}: {what} did not happen within 60s; last: {:?}",
        w.and_then(|w| w.status)
    );
}

fn state(w: &Workflow) -> WorkflowState {
    w.status.as_ref().map(|s| s.state).unwrap_or_default()
}

fn action_state(w: &Workflow, i: usize) -> Option<ActionState> {
    w.status
        .as_ref()
        .and_then(|s| s.actions.get(i))
        .map(|a| a.state)
}

/// Running containers of workflows in the test namespace.
async fn running_containers(docker: &Docker, workflow: &str) -> Vec<String> {
    let options = ListContainersOptionsBuilder::default()
        .filters(&std::collections::HashMap::from([(
            "label",
            vec!["org.tinkerbell.workflow"],
        )]))
        .build();
    docker
        .list_containers(Some(options))
        .await
        .expect("docker ps")
        .into_iter()
        .filter(|c| {
            c.labels
                .as_ref()
                .and_then(|l| l.get("org.tinkerbell.workflow"))
                .is_some_and(|w| w.starts_with(&format!("{NS}/{workflow}/")))
        })
        .filter_map(|c| c.id)
        .collect()
}

/// A machine's syslog through the dev stack's receiver: datagrams from the address its Hardware
/// owns come back from `tinkctl hardware logs` (3164 and 5424) and on its console page; a
/// stranger's are counted (`netboot_syslog_datagrams_total{result="unknown_source"}`) and
/// stored nowhere.
async fn syslog_lines_reach_tinkctl_and_the_console(
    stack: &Stack,
    syslog_addr: &str,
    console_url: &str,
    value: &dyn Fn(&str) -> String,
) {
    kubectl_apply(
        stack,
        &format!(
            r#"apiVersion: tinkerbell.org/v1alpha2
kind: Hardware
metadata: {{name: syslog-machine, namespace: {NS}}}
spec:
  networkInterfaces:
    "02:00:00:00:0a:31": {{dhcp: {{ip: 127.0.0.31, netmask: 255.0.0.0}}}}
"#
        ),
    );
    let machine = std::net::UdpSocket::bind("127.0.0.31:0").expect("bind 127.0.0.31");
    let stranger = std::net::UdpSocket::bind("127.0.0.32:0").expect("bind 127.0.0.32");
    let hardware_logs = |extra: &[&str]| {
        run(Command::new(tinkctl())
            .args([
                "hardware",
                "logs",
                "syslog-machine",
                "-n",
                NS,
                "--kubeconfig",
            ])
            .arg(stack.kubeconfig())
            .args(extra)
            .env("NATS_URL", value("NATS_URL="))
            .env("NATS_USER", value("NATS_USER="))
            .env("NATS_PASSWORD", value("NATS_PASSWORD=")))
    };
    // The Hardware reaches netboot's index through its watch: send until a line comes back.
    let mut text = String::new();
    for _ in 0..100 {
        machine
            .send_to(
                b"<6>Nov 27 13:00:00 kernel: [    1.234567] e1000 0000:00:03.0 eth0: link up\n",
                syslog_addr,
            )
            .expect("send 3164");
        machine
            .send_to(
                b"<11>1 2026-11-27T13:00:01Z osie tink-osie 7 - [x@1 a=\"b\"] no DHCP lease on eth0",
                syslog_addr,
            )
            .expect("send 5424");
        stranger
            .send_to(b"<13>Nov 27 13:00:00 intruder: not mine", syslog_addr)
            .expect("send");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let out = hardware_logs(&[]);
        assert!(out.status.success(), "tinkctl hardware logs");
        text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains("no DHCP lease") {
            break;
        }
    }
    let first = text.lines().next().unwrap_or_default().to_string();
    assert!(
        first.ends_with(" info    kernel: [    1.234567] e1000 0000:00:03.0 eth0: link up"),
        "a 3164 line: time, severity, program, message:\n{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.ends_with(" err     tink-osie: no DHCP lease on eth0")),
        "a 5424 line:\n{text}"
    );
    assert!(!text.contains("not mine"), "{text}");
    let json = hardware_logs(&["--json", "--tail", "1"]);
    let last: serde_json::Value =
        serde_json::from_slice(&json.stdout).expect("one JSON line with --tail 1");
    assert_eq!(last["source"], "127.0.0.31");
    // A misspelt name is an error, not an empty log.
    let typo = run(Command::new(tinkctl())
        .args([
            "hardware",
            "logs",
            "no-such-machine",
            "-n",
            NS,
            "--kubeconfig",
        ])
        .arg(stack.kubeconfig())
        .env("NATS_URL", value("NATS_URL="))
        .env("NATS_USER", value("NATS_USER="))
        .env("NATS_PASSWORD", value("NATS_PASSWORD=")));
    assert!(!typo.status.success());
    assert!(String::from_utf8_lossy(&typo.stderr).contains("no Hardware \"no-such-machine\""));

    // The stranger's datagrams: counted and dropped.
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(stack.dir.path().join("state.json")).expect("state"))
            .expect("json");
    let ready = state["components"]
        .as_array()
        .expect("components")
        .iter()
        .find(|c| c["name"] == "netboot-syslog")
        .and_then(|c| c["ready_url"].as_str())
        .expect("the syslog receiver is a component");
    let metrics = run(Command::new("curl").args(["-sSf", &ready.replace("/readyz", "/metrics")]));
    let metrics = String::from_utf8_lossy(&metrics.stdout);
    let counted = metrics
        .lines()
        .find(|l| l.starts_with("netboot_syslog_datagrams_total{result=\"unknown_source\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<f64>().ok())
        .unwrap_or_default();
    assert!(counted >= 1.0, "unknown sources counted:\n{metrics}");

    // The console's machine page shows the last lines.
    let page = run(Command::new("curl").args([
        "-sSf",
        "-H",
        "Authorization: Bearer kube-lite",
        &format!("{console_url}/machines/{NS}/syslog-machine"),
    ]));
    assert!(page.status.success(), "the console serves the machine page");
    let page = String::from_utf8_lossy(&page.stdout);
    assert!(
        page.contains("id=\"boot-log\"")
            && page.contains("<code>no DHCP lease on eth0</code>")
            && !page.contains("not mine"),
        "the machine page shows its boot log:\n{page}"
    );
}

fn component_pid(dir: &Path, name: &str) -> i32 {
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("state.json")).expect("state.json"))
            .expect("json");
    state["components"]
        .as_array()
        .expect("components")
        .iter()
        .find(|c| c["name"] == name)
        .and_then(|c| c["pid"].as_i64())
        .expect("component recorded") as i32
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dev_stack_runs_workflows_end_to_end() {
    let bin_dir = tinkctl().parent().expect("bin dir").to_path_buf();
    for b in BINARIES {
        assert!(
            bin_dir.join(b).exists(),
            "{} missing: build the stack (cargo build -p kube-lite -p tink-webhook -p tink-controller -p tink-server -p hegel -p tink-console -p tink-agent)",
            bin_dir.join(b).display()
        );
    }
    let docker = Docker::connect_with_local_defaults().expect("docker client");
    docker.ping().await.expect("the Docker engine answers");

    let stack = Stack {
        dir: tempfile::tempdir().expect("tempdir"),
    };
    let audit = common::Audit::default();
    let proxy = common::start_proxy(stack.kubeconfig(), audit.clone()).await;
    // Every service exports its spans here (the standard OTEL_* variable, inherited).
    let otlp = tink_testkit::otlp::OtlpReceiver::start()
        .await
        .expect("OTLP receiver");
    // Debug logs of our services: the secrets check below reads them.
    let up = run(Command::new(tinkctl())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint())
        .env(
            "RUST_LOG",
            "info,tink_agent=debug,tink_server=debug,tink_controller=debug,tink_webhook=debug",
        )
        .args(["dev", "up", "--data-dir"])
        .arg(stack.dir.path())
        .arg("--bin-dir")
        .arg(&bin_dir)
        .args(["--services-api-server", &proxy]));
    assert!(up.status.success(), "dev up failed");
    let up_text = String::from_utf8_lossy(&up.stdout);
    assert!(
        !up_text.contains("Not part of this build"),
        "every component runs, Hegel included:\n{up_text}"
    );
    let env = std::fs::read_to_string(stack.dir.path().join("env")).expect("env file");
    for key in [
        "KUBECONFIG=",
        "NATS_URL=",
        "TINK_SERVER=",
        "HEGEL_URL=",
        "TINK_CONSOLE_URL=",
        "TINK_DEV_AGENT_ID='02:00:00:00:00:01'",
        "NATS_USER=tink-admin",
        "NATS_PASSWORD=",
        "TINK_SYSLOG_ADDR='127.0.0.1:",
    ] {
        assert!(env.contains(key), "{key} missing from the env file:\n{env}");
    }
    let status = run(Command::new(tinkctl())
        .args(["dev", "status", "--data-dir"])
        .arg(stack.dir.path()));
    assert!(status.status.success(), "every started component is ready");

    // kubectl explain works as on a real cluster.
    let explain = run(Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(stack.kubeconfig())
        .args(["explain", "workflow.spec"]));
    assert!(explain.status.success());
    assert!(String::from_utf8_lossy(&explain.stdout).contains("hardwareRef"));

    // The demo.
    let demo = run(Command::new(tinkctl())
        .arg("demo")
        .arg("--kubeconfig")
        .arg(stack.kubeconfig()));
    assert!(demo.status.success(), "tinkctl demo failed");
    let text = String::from_utf8_lossy(&demo.stdout);
    assert!(
        text.contains("workflow provision-machine-1 Succeeded"),
        "{text}"
    );
    for action in ["stream-image", "write-disk", "verify", "configure"] {
        assert!(text.contains(action), "{action} not shown");
    }

    let client = tinkctl_client(&stack.kubeconfig()).await;
    let api: Api<Workflow> = Api::namespaced(client, NS);

    // Hegel serves the demo machine's iPXE script: the OSIE with the parameters the agent
    // reads, pointing at this stack's servers.
    let value = |key: &str| {
        env.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.trim_matches('\'').to_string())
            .unwrap_or_else(|| panic!("{key} in the env file"))
    };
    let hegel_url = value("HEGEL_URL=");
    let first_server = value("TINK_SERVER=")
        .split(',')
        .next()
        .expect("a server")
        .to_string();
    // The web console shows the demo's workflow to the kubeconfig's user (the dev stack's
    // admin token), and sends a request without a token to its login page.
    let console_url = value("TINK_CONSOLE_URL=");
    assert!(
        up_text.contains(&format!("Console: {console_url}")),
        "dev up prints the console's URL:\n{up_text}"
    );
    let page = run(Command::new("curl").args([
        "-sSf",
        "-H",
        "Authorization: Bearer kube-lite",
        &format!("{console_url}/workflows/{NS}/provision-machine-1"),
    ]));
    assert!(
        page.status.success(),
        "the console serves the workflow page"
    );
    let page = String::from_utf8_lossy(&page.stdout);
    assert!(
        page.contains("id=\"wf-state\">Succeeded<")
            && page.matches("<g class=\"bar succeeded\"").count() == 4,
        "the demo workflow with one timeline bar per action:\n{page}"
    );
    // The demo's action output, read by the console from the servers (TLS, the dev CA) with
    // the user's token.
    // (Lines travel apart from the events: they may land just after Succeeded.)
    let mut output = String::new();
    for _ in 0..50 {
        let out = run(Command::new("curl").args([
            "-sSf",
            "-H",
            "Authorization: Bearer kube-lite",
            &format!("{console_url}/workflows/{NS}/provision-machine-1/logs"),
        ]));
        assert!(out.status.success(), "the console serves the action output");
        output = String::from_utf8_lossy(&out.stdout).into_owned();
        if output.contains("<td>stream-image</td>") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        output.contains("id=\"logs\"") && output.contains("<td>stream-image</td>"),
        "the demo's output lines:\n{output}"
    );
    let login = run(Command::new("curl").args([
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code} %{redirect_url}",
        &format!("{console_url}/workflows"),
    ]));
    assert_eq!(
        String::from_utf8_lossy(&login.stdout),
        format!("303 {console_url}/login?next=%2Fworkflows")
    );

    let script = run(Command::new("curl").args([
        "-sSf",
        &format!("{hegel_url}/ipxe/script/02:00:00:00:00:01/auto.ipxe"),
    ]));
    assert!(
        script.status.success(),
        "Hegel serves the dev machine's script"
    );
    let script = String::from_utf8_lossy(&script.stdout);
    assert!(
        script.contains("worker_id=02:00:00:00:00:01")
            && script.contains(&format!("grpc_authority={first_server}")),
        "{script}"
    );
    let syslog_addr = value("TINK_SYSLOG_ADDR=");
    assert!(
        script.contains(&format!("syslog_host={syslog_addr} ")),
        "the script names the syslog receiver {syslog_addr}:\n{script}"
    );
    syslog_lines_reach_tinkctl_and_the_console(&stack, &syslog_addr, &console_url, &value).await;

    // The actions' output, through the servers and NATS, with `tinkctl workflow logs`.
    // (Lines travel apart from the events: the last ones may land just after Succeeded.)
    let mut logs = String::new();
    for _ in 0..50 {
        let out = run(Command::new(tinkctl())
            .args([
                "workflow",
                "logs",
                "provision-machine-1",
                "-n",
                NS,
                "--kubeconfig",
            ])
            .arg(stack.kubeconfig())
            .args(["--nats-url", &value("NATS_URL=")])
            // The env file's NATS user: deploy/'s tink-admin (NATS refuses anonymous clients).
            .env("NATS_USER", value("NATS_USER="))
            .env("NATS_PASSWORD", value("NATS_PASSWORD=")));
        assert!(out.status.success(), "tinkctl workflow logs");
        logs = String::from_utf8_lossy(&out.stdout).to_string();
        if logs.contains("[configure] configured machine-1") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        logs.contains("[configure] configured machine-1"),
        "the configure action's output: {logs}"
    );
    // The same lines through a server, as a user with the env file sourced reads them: the
    // server checks the kubeconfig's token and RBAC with kube-lite (its calls are audited below).
    let through_server = run(Command::new(tinkctl())
        .args([
            "workflow",
            "logs",
            "provision-machine-1",
            "-n",
            NS,
            "--kubeconfig",
        ])
        .arg(stack.kubeconfig())
        .env("TINK_SERVER", value("TINK_SERVER="))
        .env("TINK_AGENT_TLS_CA", value("TINK_AGENT_TLS_CA="))
        .env_remove("TINK_TLS_CA")
        .env_remove("TINK_TOKEN"));
    assert!(
        through_server.status.success(),
        "tinkctl workflow logs through the server"
    );
    let served = String::from_utf8_lossy(&through_server.stdout);
    assert!(
        served.starts_with(logs.as_str()) && served.contains("[configure] configured machine-1"),
        "the server's lines are NATS's: {served}"
    );

    // One trace for the workflow: its id is on the Workflow, the demo prints it, and the
    // controller's, the server's and the agent's spans all arrive under it.
    let demo_wf = api.get("provision-machine-1").await.expect("demo workflow");
    let trace = demo_wf
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(tink_api::TRACE_ID_ANNOTATION))
        .cloned()
        .expect("the controller records the trace id on the Workflow");
    assert_eq!(trace.len(), 32, "{trace}");
    assert!(text.contains(&format!("trace id {trace}")), "{text}");
    let services = ["tink-controller", "tink-server", "tink-agent"];
    // The agent exports its spans in batches: wait for all four action spans, not the first.
    let spans = otlp
        .wait_for(|spans| {
            services.iter().all(|svc| {
                spans
                    .iter()
                    .any(|s| s.trace_id == trace && s.service_name.as_deref() == Some(svc))
            }) && spans
                .iter()
                .filter(|s| {
                    s.trace_id == trace
                        && s.service_name.as_deref() == Some("tink-agent")
                        && s.name == "action"
                })
                .count()
                >= 4
        })
        .await
        .unwrap_or_else(|e| {
            panic!("spans of controller, server and agent in trace {trace}: {e:?}")
        });
    let in_trace: Vec<_> = spans.iter().filter(|s| s.trace_id == trace).collect();
    // Each action on the agent is a span of that trace.
    let agent_spans: Vec<&str> = in_trace
        .iter()
        .filter(|s| s.service_name.as_deref() == Some("tink-agent"))
        .map(|s| s.name.as_str())
        .collect();
    assert!(
        agent_spans.iter().filter(|n| **n == "action").count() >= 4,
        "one action span per demo action; agent spans: {agent_spans:?}"
    );

    // A Tinkerbell v1alpha1 Template and Workflow, applied unchanged with kubectl (the webhook
    // converts them), run to Succeeded, and read back in v1alpha1 show Tinkerbell's state.
    kubectl_apply(&stack, V1ALPHA1_WORKFLOW);
    let v1 = wait_for(&api, "v1-hello", "Succeeded", |w| {
        state(w) == WorkflowState::Succeeded
    })
    .await;
    assert_eq!(
        v1.status.as_ref().map(|s| s.actions.len()),
        Some(2),
        "both v1alpha1 actions ran"
    );
    let back = run(Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(stack.kubeconfig())
        .args([
            "get",
            "workflows.v1alpha1.tinkerbell.org",
            "v1-hello",
            "-n",
            NS,
            "-o",
            "jsonpath={.status.state}",
        ]));
    assert!(back.status.success());
    assert_eq!(String::from_utf8_lossy(&back.stdout), "STATE_SUCCESS");

    // A failing action fails the workflow with its reason; the third action never runs.
    kubectl_apply(&stack, &template("fails", "echo broken >&2; exit 3"));
    let w = wait_for(&api, "fails", "Failed", |w| {
        state(w) == WorkflowState::Failed
    })
    .await;
    let failed = &w.status.as_ref().expect("status").actions[1];
    assert_eq!(failed.state, ActionState::Failed);
    assert!(failed.failure_reason.is_some(), "a reason: {failed:?}");
    assert_eq!(action_state(&w, 0), Some(ActionState::Succeeded));
    assert_ne!(action_state(&w, 2), Some(ActionState::Succeeded));
    let watch = run(Command::new(tinkctl())
        .args(["workflow", "watch", "fails", "-n", NS, "--kubeconfig"])
        .arg(stack.kubeconfig()));
    assert!(
        !watch.status.success(),
        "watch of a failed workflow exits non-zero"
    );
    let err = String::from_utf8_lossy(&watch.stderr);
    assert!(err.contains("ended Failed: action second failed"), "{err}");

    // A workflow deleted while its action runs is canceled and the container stopped.
    kubectl_apply(&stack, &template("deleted", "sleep 300"));
    wait_for(&api, "deleted", "second action Running", |w| {
        action_state(w, 1) == Some(ActionState::Running)
    })
    .await;
    let mut seen = Vec::new();
    for _ in 0..50 {
        seen = running_containers(&docker, "deleted").await;
        if !seen.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(seen.len(), 1, "one running container for the second action");
    api.delete("deleted", &DeleteParams::default())
        .await
        .expect("delete");
    let mut gone = false;
    for _ in 0..600 {
        if api.get_opt("deleted").await.expect("get").is_none() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        gone,
        "the finalizer is removed once the workflow is Canceled"
    );
    assert!(
        running_containers(&docker, "deleted").await.is_empty(),
        "the action's container was stopped"
    );

    // A server replica killed mid-workflow: the agent moves to the other one, nothing shows.
    let before = status_of(&stack);
    assert!(before.contains("server-0") && before.contains("ready"));
    kubectl_apply(&stack, &template("survives", "sleep 4; echo second"));
    wait_for(&api, "survives", "second action Running", |w| {
        action_state(w, 1) == Some(ActionState::Running)
    })
    .await;
    let server0 = component_pid(stack.dir.path(), "server-0");
    let killed = Command::new("kill")
        .args(["-KILL", &server0.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let w = wait_for(&api, "survives", "an end state", |w| state(w).is_terminal()).await;
    assert_eq!(state(&w), WorkflowState::Succeeded, "{:?}", w.status);
    let actions = &w.status.as_ref().expect("status").actions;
    assert!(
        actions
            .iter()
            .all(|a| a.state == ActionState::Succeeded && a.failure_reason.is_none())
    );
    let after = status_of(&stack);
    assert!(
        after
            .lines()
            .any(|l| l.starts_with("server-0") && l.contains("exited")),
        "{after}"
    );

    // Secrets: an action's env value reaches the machine and no log of any component.
    let secret = format!(
        "s3cr3t-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    );
    kubectl_apply(
        &stack,
        &format!(
            r#"apiVersion: tinkerbell.org/v1alpha2
kind: Template
metadata: {{name: secretive, namespace: {NS}}}
spec:
  env: {{REGISTRY_TOKEN: "{secret}"}}
  actions:
    - name: uses-the-token
      image: tink-demo/actions:latest
      cmd: /bin/sh
      args: ["-c", "test -n \"$REGISTRY_TOKEN\" && echo token present"]
---
apiVersion: tinkerbell.org/v1alpha2
kind: Workflow
metadata: {{name: secretive, namespace: {NS}}}
spec:
  hardwareRef: {{name: machine-1}}
  templateRef: {{name: secretive}}
"#
        ),
    );
    let w = wait_for(&api, "secretive", "an end state", |w| {
        state(w).is_terminal()
    })
    .await;
    assert_eq!(state(&w), WorkflowState::Succeeded, "{:?}", w.status);
    let mut read = 0;
    for entry in std::fs::read_dir(stack.dir.path().join("logs"))
        .expect("logs")
        .flatten()
    {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        read += text.len();
        assert!(
            !text.contains(&secret),
            "{} holds the action's secret env value",
            entry.path().display()
        );
    }
    assert!(read > 0, "no logs were read");

    // The BMC controller: a Machine on sushy-tools' Redfish emulator (the dev controller has no
    // CA for it: insecureTLS), a Job powering it on; and the webhook refusing a Machine that
    // names another namespace's Secret. Its API calls are audited below with the others'.
    let sushy = tink_testkit::bmc::Sushy::start()
        .await
        .expect("sushy-emulator");
    kubectl_apply(
        &stack,
        &format!(
            r#"apiVersion: v1
kind: Secret
metadata: {{name: bmc-1-auth, namespace: {NS}}}
type: kubernetes.io/basic-auth
stringData: {{username: {user}, password: {password}}}
---
apiVersion: bmc.tinkerbell.org/v1alpha1
kind: Machine
metadata: {{name: bmc-1, namespace: {NS}}}
spec:
  connection:
    host: {host}
    authSecretRef: {{name: bmc-1-auth, namespace: {NS}}}
    insecureTLS: true
    providerOptions: {{preferredOrder: [gofish]}}
"#,
            user = tink_testkit::bmc::BMC_USER,
            password = tink_testkit::bmc::BMC_PASSWORD,
            host = sushy.host(),
        ),
    );
    let power_on = run(Command::new(tinkctl())
        .args([
            "bmc",
            "power",
            "on",
            "bmc-1",
            "-n",
            NS,
            "--timeout",
            "90s",
            "--kubeconfig",
        ])
        .arg(stack.kubeconfig()));
    assert!(
        power_on.status.success(),
        "tinkctl bmc power on through the dev stack"
    );
    let refused_file = stack.dir.path().join("refused.yaml");
    std::fs::write(
        &refused_file,
        format!(
            "apiVersion: bmc.tinkerbell.org/v1alpha1\nkind: Machine\nmetadata: {{name: bmc-2, namespace: {NS}}}\nspec:\n  connection:\n    host: 10.0.0.9\n    authSecretRef: {{name: someone-elses, namespace: kube-system}}\n"
        ),
    )
    .expect("write");
    let refused = run(Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(stack.kubeconfig())
        .args(["apply", "-f"])
        .arg(&refused_file));
    assert!(
        !refused.status.success(),
        "the webhook refuses another namespace's Secret"
    );
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("authSecretRef"),
        "the refusal names the field"
    );

    // RBAC: every call each service made is allowed by its Role in deploy/.
    let calls = audit.calls();
    assert!(
        calls
            .iter()
            .any(|c| c.user == "tink-bmc-controller" && c.resource == "tasks" && c.verb == "patch"),
        "the BMC controller's calls were audited"
    );
    let controller: Vec<_> = calls
        .iter()
        .filter(|c| c.user == "tink-controller")
        .collect();
    for (verb, resource, sub) in [
        ("watch", "workflows", ""),
        ("update", "workflows", "status"),
        ("patch", "workflows", ""),
        ("get", "leases", ""),
        ("create", "events", ""),
    ] {
        assert!(
            controller
                .iter()
                .any(|c| c.verb == verb && c.resource == resource && c.subresource == sub),
            "the controller was expected to {verb} {resource}/{sub}; recorded: {controller:#?}"
        );
    }
    let docs = deploy_docs();
    let denied: Vec<_> = calls
        .iter()
        .filter(|c| !common::allowed(&docs, &c.user, "tink-system", c))
        .collect();
    assert!(
        denied.is_empty(),
        "calls deploy/'s RBAC does not allow: {denied:#?}"
    );
}

fn deploy_docs() -> Vec<serde_json::Value> {
    use serde::Deserialize;
    let out = Command::new("kubectl")
        .args(["kustomize", "deploy/"])
        .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .expect("kubectl kustomize");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).expect("utf8");
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde_json::Value::deserialize(d).expect("yaml"))
        .collect()
}

#[test]
fn the_rbac_check_fails_when_a_role_lacks_a_verb() {
    let docs = deploy_docs();
    let status = common::classify(
        "tink-controller",
        "PUT",
        "/apis/tinkerbell.org/v1alpha2/namespaces/a/workflows/w/status",
    )
    .expect("resource request");
    assert_eq!(
        (status.verb.as_str(), status.subresource.as_str()),
        ("update", "status")
    );
    assert!(common::allowed(
        &docs,
        "tink-controller",
        "tink-system",
        &status
    ));
    // The same call from a service whose Role does not grant it.
    assert!(!common::allowed(&docs, "hegel", "tink-system", &status));
    // Without the verb in the controller's ClusterRole, the call is denied.
    let mut stripped = docs.clone();
    for d in &mut stripped {
        if d["kind"] == "ClusterRole" && d["metadata"]["name"] == "tink-controller" {
            for rule in d["rules"].as_array_mut().expect("rules") {
                if let Some(verbs) = rule["verbs"].as_array_mut() {
                    verbs.retain(|v| v != "update");
                }
            }
        }
    }
    assert!(!common::allowed(
        &stripped,
        "tink-controller",
        "tink-system",
        &status
    ));
    // The Lease Role is namespaced and limited to its name.
    let lease = common::classify(
        "tink-controller",
        "PUT",
        "/apis/coordination.k8s.io/v1/namespaces/tink-system/leases/tink-controller",
    )
    .expect("lease");
    assert!(common::allowed(
        &docs,
        "tink-controller",
        "tink-system",
        &lease
    ));
    let other = common::classify(
        "tink-controller",
        "PUT",
        "/apis/coordination.k8s.io/v1/namespaces/tink-system/leases/other",
    )
    .expect("lease");
    assert!(!common::allowed(
        &docs,
        "tink-controller",
        "tink-system",
        &other
    ));
    let elsewhere = common::classify(
        "tink-controller",
        "PUT",
        "/apis/coordination.k8s.io/v1/namespaces/default/leases/tink-controller",
    )
    .expect("lease");
    assert!(!common::allowed(
        &docs,
        "tink-controller",
        "tink-system",
        &elsewhere
    ));
    // Discovery is not a resource request.
    assert!(common::classify("x", "GET", "/apis/tinkerbell.org/v1alpha2").is_none());
    let watch = common::classify(
        "x",
        "GET",
        "/apis/tinkerbell.org/v1alpha2/workflows?watch=true&resourceVersion=1",
    )
    .expect("watch");
    assert_eq!(watch.verb, "watch");
}

fn status_of(stack: &Stack) -> String {
    let out = run(Command::new(tinkctl())
        .args(["dev", "status", "--data-dir"])
        .arg(stack.dir.path()));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn tinkctl_client(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}
