//! Supervision and back-off settings, and the context of one step.

use std::time::Duration;

use jiff::Timestamp;

use crate::id::WorkflowRef;

/// Supervision timeouts and the rejection back-off. Injected by the controller (its flags);
/// [`Config::default`] holds the documented defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// How long a Workflow may stay `Scheduled` (dispatched, no action started yet) before it
    /// is `Failed` with reason `ScheduledTimeout`. Default 5 minutes.
    pub scheduled_timeout: Duration,
    /// How long a Workflow may stay `Cancelling` (stop sent, not confirmed) before it is forced
    /// to `Canceled` with reason `CancelTimeout`. Default 2 minutes.
    pub cancelling_timeout: Duration,
    /// The wait before the first re-dispatch after a rejection. Default 5 seconds.
    pub backoff_base: Duration,
    /// The longest wait between re-dispatches; the back-off doubles up to it. Default 5 minutes.
    pub backoff_max: Duration,
    /// Added to an action's own `timeout` before the controller fails the Workflow with
    /// `ActionTimeout`: the agent enforces the action timeout itself and reports
    /// `ActionFailed`/`Timeout`; the controller only steps in when that report does not come.
    /// Default 30 seconds.
    pub action_timeout_grace: Duration,
    /// How long the agent of a Workflow it confirmed may be disconnected before the Workflow
    /// fails with reason `AgentLost`. Default 15 minutes.
    pub agent_lost_after: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            scheduled_timeout: Duration::from_secs(5 * 60),
            cancelling_timeout: Duration::from_secs(2 * 60),
            backoff_base: Duration::from_secs(5),
            backoff_max: Duration::from_secs(5 * 60),
            action_timeout_grace: Duration::from_secs(30),
            agent_lost_after: Duration::from_secs(15 * 60),
        }
    }
}

impl Config {
    /// The wait before dispatching again after the rejection of dispatch `attempt` (1 for the
    /// first dispatch): `backoff_base * 2^(attempt - 1)`, at most `backoff_max`.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1);
        let factor = 1u32.checked_shl(doublings).unwrap_or(u32::MAX);
        self.backoff_base
            .checked_mul(factor)
            .unwrap_or(Duration::MAX)
            .min(self.backoff_max)
    }
}

/// Everything a step needs besides the status and the input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepContext {
    /// The current time (the controller's clock).
    pub now: Timestamp,
    /// The Workflow object: dispatch ids are built from it.
    pub workflow: WorkflowRef,
    /// The Workflow's `spec.timeout` (`WorkflowSpec::timeout_limit`); `None`: no limit.
    pub timeout: Option<Duration>,
    /// Supervision and back-off settings.
    pub config: Config,
    /// What the controller knows of the agent the Workflow is dispatched to (presence);
    /// `None`: nothing (no agent-loss verdict is drawn).
    pub agent: Option<AgentSeen>,
}

/// The agent of a Workflow as the controller last saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentSeen {
    /// The instance id of the agent process holding its stream now, if it sends one.
    pub instance: Option<String>,
    /// Its last sign of life (heartbeat), or when the controller began watching if it has not
    /// been seen since.
    pub last_seen: Timestamp,
}

impl StepContext {
    /// A context with the default [`Config`].
    pub fn new(now: Timestamp, workflow: WorkflowRef, timeout: Option<Duration>) -> Self {
        Self {
            now,
            workflow,
            timeout,
            config: Config::default(),
            agent: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_base_up_to_the_cap() {
        let c = Config::default();
        let secs: Vec<u64> = (1..=10).map(|a| c.backoff(a).as_secs()).collect();
        assert_eq!(secs, vec![5, 10, 20, 40, 80, 160, 300, 300, 300, 300]);
        // Attempt 0 (never dispatched) behaves like the first.
        assert_eq!(c.backoff(0), Duration::from_secs(5));
        // No overflow at the extremes.
        assert_eq!(c.backoff(33), Duration::from_secs(300));
        assert_eq!(c.backoff(u32::MAX), Duration::from_secs(300));
    }

    #[test]
    fn backoff_follows_the_configuration() {
        let c = Config {
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_secs(1),
            ..Config::default()
        };
        let ms: Vec<u128> = (1..=6).map(|a| c.backoff(a).as_millis()).collect();
        assert_eq!(ms, vec![100, 200, 400, 800, 1000, 1000]);
    }
}
