//! Configuration of one controller replica (injected: the binary maps flags and environment
//! variables onto it; the library reads no environment).

use std::time::Duration;

use tink_bus::BusConfig;
pub use tink_lease::LeaseConfig;

/// The finalizer the controller puts on every Workflow it prepares, so a deleted Workflow stays
/// until it reached an end state (seeds/004 "cancellation by deletion").
pub const FINALIZER: &str = "tinkerbell.org/workflow-controller";

/// The name of the controller in Kubernetes Events (`reportingController`) and the field
/// manager of its writes.
pub const CONTROLLER_NAME: &str = "tink-controller";

/// Everything one replica needs besides its Kubernetes client.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// NATS server URL(s), comma separated.
    pub nats_url: String,
    /// This replica's identity in the Lease and in Kubernetes Events (the pod name).
    pub replica_id: String,
    /// Stream, bucket and consumer settings (the same in every service).
    pub bus: BusConfig,
    /// NATS credentials and TLS.
    pub nats_auth: tink_bus::NatsAuth,
    /// Supervision timeouts and the rejection back-off.
    pub workflow: tink_workflow::Config,
    /// Leader election.
    pub lease: LeaseConfig,
    /// Only Workflows, Templates and Hardware of this namespace; `None`: all namespaces.
    pub namespace: Option<String>,
    /// The most reconciles running at once.
    pub concurrency: u16,
    /// The durable name of the events consumer.
    pub events_consumer: String,
    /// The most events read in one batch (grouped per Workflow into one status write each).
    pub events_batch: usize,
    /// How long a Workflow's progress events (inside `Scheduled`/`Running`) are held after
    /// the last one arrived, waiting for more to coalesce into the same status write. Events
    /// that end something are written at once. Default 50 ms: on a loaded host an agent's
    /// back-to-back events arrive up to a few tens of milliseconds apart.
    pub events_window: Duration,
    /// The longest a Workflow's progress events are held after the first one arrived.
    /// Default 200 ms (progress shows that much later at most; end states never wait).
    pub events_max_hold: Duration,
    /// How long an event read but not acknowledged (the controller died mid-write) waits before
    /// JetStream delivers it again.
    pub events_ack_wait: Duration,
    /// Publish Kubernetes Events for transitions.
    pub kube_events: bool,
    /// How often every unfinished Workflow is looked at again even when nothing woke it: the
    /// safety net that would catch a lost wake-up (each catch is counted in
    /// `tink_controller_resync_dispatches_total`). Default 60 s; zero turns it off.
    pub resync_period: Duration,
    /// The longest the trigger queue of the reconciler holds; a full queue drops the trigger
    /// (counted) and the resync catches the Workflow. Default 16384.
    pub trigger_queue: usize,
    /// Presence entries (and the other per-agent and per-Workflow memories) of agents not seen
    /// for this long are forgotten. Default 1 h.
    pub forget_after: Duration,
    /// How often the agent secrets bucket is reconciled with every Hardware (rotated Secrets,
    /// removed annotations, deleted Hardware). Default 30 s.
    pub agent_secrets_sweep: Duration,
    /// The controller's own namespace, where it keeps the copies of valid agent secrets that
    /// Hegel reads (Hegel may read Secrets only there). Default `tink-system`.
    pub system_namespace: String,
    /// The longest a BMC Job of `spec.bootOptions` may run before its Workflow fails with
    /// `BootJobTimeout` (before dispatch) or the after-success step is given up. Default 15 min
    /// (a Job's power operations each wait up to the BMC controller's power wait).
    pub boot_job_timeout: Duration,
    /// The Cluster API infrastructure provider (off by default here; the binary's `--capi`
    /// defaults to auto).
    pub capi: crate::capi::CapiConfig,
    /// Discovery of unknown machines (off by default).
    pub discovery: crate::inventory::DiscoveryConfig,
    /// How often an unanswered inventory request (`tinkerbell.org/inventory-request`) is sent
    /// to the machine's agent again. Default 30 s.
    pub inventory_request_resend: Duration,
}

impl ControllerConfig {
    /// A configuration with the defaults and the given NATS URL and replica id.
    pub fn new(nats_url: impl Into<String>, replica_id: impl Into<String>) -> Self {
        Self {
            nats_url: nats_url.into(),
            replica_id: replica_id.into(),
            bus: BusConfig::default(),
            nats_auth: tink_bus::NatsAuth::default(),
            workflow: tink_workflow::Config::default(),
            lease: LeaseConfig::default(),
            namespace: None,
            concurrency: 64,
            events_consumer: "tink-controller".into(),
            events_batch: 512,
            events_window: Duration::from_millis(50),
            events_max_hold: Duration::from_millis(200),
            events_ack_wait: Duration::from_secs(30),
            kube_events: true,
            resync_period: Duration::from_secs(60),
            trigger_queue: 16_384,
            forget_after: Duration::from_secs(3600),
            agent_secrets_sweep: Duration::from_secs(30),
            system_namespace: tink_api::agent_secret::DEFAULT_SYSTEM_NAMESPACE.into(),
            boot_job_timeout: Duration::from_secs(15 * 60),
            capi: crate::capi::CapiConfig::default(),
            discovery: crate::inventory::DiscoveryConfig::default(),
            inventory_request_resend: crate::inventory_request::RESEND,
        }
    }
}
