//! The BMC controller's benchmark (issue 26): how long until every one of N Machines has a
//! power state, with how many BMC calls at once; and what a Job adds over the emulator's own
//! response time.
//!
//! `cargo bench -p tink-bmc-controller --bench bmc-bench -- --machines 1000`
//!
//! The peers are real: kube-lite as the API server, sushy-tools' Redfish emulator (fake driver,
//! TLS, basic auth checked with bcrypt as configured in the emulator) in several processes. Each
//! Machine is its own BMC address (`127.0.X.Y`, the emulators listen on every address of this
//! machine for the run, with credentials required), so the controller's per-BMC bound (2) and
//! overall bound (256) are what limit it, as on a rack, not one shared host.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use clap::Parser;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret, SecretReference};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use tink_api::bmc::{
    Action, ConditionStatus, Connection, Job, JobConditionType, JobSpec, Machine, MachineRef,
    MachineSpec, PowerAction, PowerState, ProviderOptions, RedfishOptions,
};
use tink_bmc::redfish::{Redfish, RedfishConfig};
use tink_bmc::{Bmc, Credentials, Limits, Policy, TlsConfig};
use tink_bmc_controller::{BmcConfig, Metrics};
use tink_testkit::bmc::{BMC_PASSWORD, BMC_USER, Sushy};
use tokio_util::sync::CancellationToken;

const NS: &str = "rack";

#[derive(Parser, Debug)]
struct Args {
    /// Machines (each its own BMC address).
    #[arg(long, default_value_t = 1000)]
    machines: usize,
    /// sushy-emulator processes serving them.
    #[arg(long, default_value_t = 4)]
    emulators: usize,
    /// Jobs timed one after the other (each one `power status` task).
    #[arg(long, default_value_t = 30)]
    jobs: usize,
    /// Overall bound on BMC calls at once.
    #[arg(long, default_value_t = 256)]
    max_calls: usize,
    /// cargo bench passes --bench.
    #[arg(long, hide = true)]
    bench: bool,
}

/// An emulator serving `systems`, on every address of this machine, its state (the fake
/// driver's SQLite) on tmpfs.
async fn start_emulator(systems: &[String]) -> Sushy {
    Sushy::builder()
        .systems(systems)
        .listen("0.0.0.0")
        .state_in("/dev/shm")
        .start()
        .await
        .expect("sushy-emulator installed (scripts/install-deps.sh)")
}

/// HTTP requests the emulators answered so far (werkzeug logs one line per request).
fn requests_served(emulators: &[Sushy]) -> usize {
    emulators
        .iter()
        .map(|e| e.log().lines().filter(|l| l.contains(" HTTP/1.")).count())
        .sum()
}

/// The i-th BMC address: 127.0.X.Y (Y in 1..=250).
fn address(i: usize) -> String {
    format!("127.0.{}.{}", 1 + i / 250, 1 + i % 250)
}

fn connection(host: String, system: &str) -> Connection {
    Connection {
        host,
        auth_secret_ref: SecretReference {
            name: Some("bmc".into()),
            namespace: Some(NS.into()),
        },
        insecure_tls: true,
        provider_options: Some(ProviderOptions {
            preferred_order: vec!["gofish".into()],
            redfish: Some(RedfishOptions {
                system_name: system.into(),
                ..RedfishOptions::default()
            }),
            ..ProviderOptions::default()
        }),
        ..Connection::default()
    }
}

async fn setup(client: &Client) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for kind in ["machines", "jobs", "tasks"] {
        let text = std::fs::read_to_string(dir.join(format!("{kind}.bmc.tinkerbell.org.yaml")))
            .expect("CRD");
        let crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("CRD YAML");
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("CRD");
    }
    let mut n = Namespace::default();
    n.metadata.name = Some(NS.into());
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &n)
        .await
        .expect("namespace");
    let mut s = Secret::default();
    s.metadata.name = Some("bmc".into());
    s.type_ = Some("kubernetes.io/basic-auth".into());
    s.data = Some(BTreeMap::from([
        ("username".to_string(), ByteString(BMC_USER.into())),
        ("password".to_string(), ByteString(BMC_PASSWORD.into())),
    ]));
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &s)
        .await
        .expect("secret");
}

/// CPU seconds (user + system) this process used so far: the controller, kube-lite and the
/// benchmark's own client, not the emulators.
fn process_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit(')').next().unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of stat: indexes 11 and 12 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let n = args.machines.max(1);
    let e = args.emulators.clamp(1, n);
    let server = kube_lite::Server::start(kube_lite::Config::default())
        .await
        .expect("kube-lite");
    let client = server.client().expect("client");
    setup(&client).await;

    // Machine i is system `sys-i` of emulator i % e, reached at its own address.
    let mut systems: Vec<Vec<String>> = vec![Vec::new(); e];
    for i in 0..n {
        systems[i % e].push(format!("sys-{i}"));
    }
    let mut emulators = Vec::new();
    for s in &systems {
        emulators.push(start_emulator(s).await);
    }
    let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
    let created = Instant::now();
    for i in 0..n {
        let host = format!("{}:{}", address(i), emulators[i % e].port());
        let mut m = Machine::new(
            &format!("m{i}"),
            MachineSpec {
                connection: connection(host, &format!("sys-{i}")),
            },
        );
        m.metadata.namespace = Some(NS.into());
        machines
            .create(&PostParams::default(), &m)
            .await
            .expect("machine");
    }
    eprintln!("created {n} Machines in {:?}", created.elapsed());

    let mut config = BmcConfig {
        replica_id: "bench".into(),
        // Polls do not disturb the Job timings below: the first look at each Machine is what
        // is measured.
        power_poll: Duration::from_secs(3600),
        power_recheck: Duration::from_millis(200),
        max_calls: args.max_calls,
        ..BmcConfig::default()
    };
    config.lease.namespace = NS.into();
    let metrics = Metrics::default();
    let health = tink_runtime::Health::new();
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let controller = tokio::spawn(tink_bmc_controller::run(
        config,
        client.clone(),
        health.clone(),
        metrics.clone(),
        shutdown.clone(),
    ));
    // Sample the calls in flight while the first looks run.
    let peak = {
        let metrics = metrics.clone();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let mut peak = 0;
            while !stop.is_cancelled() {
                peak = peak.max(metrics.calls_in_flight.get());
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            peak
        })
    };
    let mut last_report = Instant::now();
    let all_known = loop {
        let list = machines.list(&ListParams::default()).await.expect("list");
        let known = list
            .items
            .iter()
            .filter(|m| {
                m.status.as_ref().is_some_and(|s| {
                    s.power == Some(PowerState::Off)
                        && s.conditions
                            .iter()
                            .any(|c| c.status == ConditionStatus::True)
                })
            })
            .count();
        if known == n {
            break started.elapsed();
        }
        if started.elapsed() > Duration::from_secs(300) {
            panic!(
                "only {known} of {n} Machines have a power state after 5 minutes; machine reconciles ok/error {}/{}, power reads ok/error {}/{}; the first: {:?}",
                metrics.reconciles_of("machine", "ok"),
                metrics.reconciles_of("machine", "error"),
                metrics.ops_of("power_state", "", "ok"),
                metrics.ops_of("power_state", "", "error"),
                list.items.first().and_then(|m| m.status.clone())
            );
        }
        if last_report.elapsed() >= Duration::from_secs(10) {
            last_report = Instant::now();
            eprintln!(
                "{:?}: {known} known; machine reconciles ok/error {}/{}, power reads ok/error {}/{}",
                started.elapsed(),
                metrics.reconciles_of("machine", "ok"),
                metrics.reconciles_of("machine", "error"),
                metrics.ops_of("power_state", "", "ok"),
                metrics.ops_of("power_state", "", "error"),
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let cpu_first_pass = process_cpu_seconds();
    let requests_first_pass = requests_served(&emulators);
    let calls =
        metrics.ops_of("power_state", "", "ok") + metrics.ops_of("power_state", "", "error");
    let errors = metrics.ops_of("power_state", "", "error");

    // The emulator's own response time: the same call without the controller (a new
    // connection, TLS and auth each time, as the controller makes them).
    let direct = Redfish::new(
        RedfishConfig {
            host: format!("{}:{}", address(0), emulators[0].port()),
            port: None,
            credentials: Credentials::new(BMC_USER, BMC_PASSWORD),
            tls: TlsConfig {
                insecure: true,
                ca_pem: None,
            },
            use_basic_auth: false,
            system_name: "sys-0".into(),
        },
        Policy::default(),
        Limits::default(),
    )
    .expect("client");
    let requests_before_own = requests_served(&emulators);
    let mut own = Vec::new();
    for _ in 0..args.jobs {
        let t = Instant::now();
        direct.power_state().await.expect("direct call");
        own.push(t.elapsed());
    }
    own.sort();
    let requests_own = requests_served(&emulators) - requests_before_own;

    // Jobs, one after the other, each one `power status` task of another Machine.
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let mut job_times = Vec::new();
    for j in 0..args.jobs {
        let name = format!("status-{j}");
        let mut job = Job::new(
            &name,
            JobSpec {
                machine_ref: MachineRef {
                    name: format!("m{}", j % n),
                    namespace: NS.into(),
                },
                tasks: vec![Action::power(PowerAction::Status)],
            },
        );
        job.metadata.namespace = Some(NS.into());
        let t = Instant::now();
        jobs.create(&PostParams::default(), &job)
            .await
            .expect("job");
        loop {
            let got = jobs.get(&name).await.expect("get job");
            if got.status.as_ref().is_some_and(|s| {
                s.has_condition(JobConditionType::Completed, ConditionStatus::True)
            }) {
                break;
            }
            assert!(
                !got.status.as_ref().is_some_and(|s| s.is_finished()),
                "job {name} failed: {:?}",
                got.status
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        job_times.push(t.elapsed());
    }
    job_times.sort();
    let requests_jobs = requests_served(&emulators) - requests_before_own - requests_own;
    shutdown.cancel();
    let _ = controller.await;
    let peak = peak.await.unwrap_or(0);

    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "## BMC controller: {n} Machines, {e} sushy-emulator processes (fake driver, TLS, basic auth)"
    );
    println!();
    println!("| figure | value |");
    println!("|---|---|");
    println!(
        "| every Machine's power state known after | {:.2} s |",
        all_known.as_secs_f64()
    );
    println!("| power state reads (errors) | {calls} ({errors}) |");
    println!(
        "| HTTP requests the emulators answered in the first pass (per read) | {requests_first_pass} ({:.2}) |",
        requests_first_pass as f64 / calls.max(1) as f64
    );
    println!(
        "| HTTP requests per own answer / per Job | {:.2} / {:.2} |",
        requests_own as f64 / own.len().max(1) as f64,
        requests_jobs as f64 / job_times.len().max(1) as f64
    );
    println!(
        "| peak BMC calls in flight (bound: {} overall, 2 per BMC) | {peak} |",
        args.max_calls
    );
    println!(
        "| emulator's own answer, median / p90 ({} calls) | {} / {} |",
        own.len(),
        ms(percentile(&own, 0.5)),
        ms(percentile(&own, 0.9))
    );
    println!(
        "| Job create -> Completed, median / p90 ({} Jobs) | {} / {} |",
        job_times.len(),
        ms(percentile(&job_times, 0.5)),
        ms(percentile(&job_times, 0.9))
    );
    println!(
        "| CPU of the controller, kube-lite and the client until every power state was known | {:.2} s ({:.1} ms per Machine) |",
        cpu_first_pass,
        cpu_first_pass * 1000.0 / n as f64
    );
    println!(
        "| added by the controller (median Job - median own answer) | {} |",
        ms(percentile(&job_times, 0.5).saturating_sub(percentile(&own, 0.5)))
    );
    println!();
    println!("load average at the end: {}", load.trim());
    drop(emulators);
    server.shutdown().await;
}
