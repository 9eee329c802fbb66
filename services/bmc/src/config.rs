//! Configuration of one BMC controller replica (the binary maps flags and environment variables
//! onto it; the library reads no environment).

use std::time::Duration;

use tink_bmc::Policy;
use tink_lease::LeaseConfig;

/// The name of the controller in Kubernetes Events (`reportingController`) and its Lease.
pub const CONTROLLER_NAME: &str = "tink-bmc-controller";

/// Everything one replica needs besides its Kubernetes client.
#[derive(Clone, Debug)]
pub struct BmcConfig {
    /// Serve only this namespace's Machines, Jobs and Tasks (all namespaces when `None`).
    pub namespace: Option<String>,
    /// This replica's identity in the Lease and in Events.
    pub replica_id: String,
    /// Leader election: one replica acts at a time.
    pub lease: LeaseConfig,
    /// How often each Machine's power state is read (each period varies by ±20%, so a
    /// thousand Machines created at once do not stay in step).
    pub power_poll: Duration,
    /// How long a power task waits for the BMC to report the target state after the action
    /// was accepted.
    pub power_wait: Duration,
    /// How often a power task that waits for its target state reads it again.
    pub power_recheck: Duration,
    /// Timeouts and retries of each BMC call.
    pub policy: Policy,
    /// Calls at once to one BMC.
    pub max_calls_per_bmc: usize,
    /// Calls at once in all.
    pub max_calls: usize,
    /// PEM CA certificates trusted for BMC certificates (besides the system roots).
    pub ca_pem: Option<Vec<u8>>,
}

impl Default for BmcConfig {
    fn default() -> Self {
        Self {
            namespace: None,
            replica_id: CONTROLLER_NAME.into(),
            lease: LeaseConfig {
                name: CONTROLLER_NAME.into(),
                ..LeaseConfig::default()
            },
            power_poll: Duration::from_secs(60),
            power_wait: Duration::from_secs(120),
            power_recheck: Duration::from_secs(1),
            policy: Policy::default(),
            max_calls_per_bmc: 2,
            max_calls: 256,
            ca_pem: None,
        }
    }
}
