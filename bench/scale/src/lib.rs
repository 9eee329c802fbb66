//! Shared pieces of the at-scale benchmark (issue 14): the orchestrator `tink-scale` starts the
//! stack as separate processes and `tink-scale-agents` simulates the machines over gRPC.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use tink_proto::workflow::v2::{Event, event};

/// The namespace the benchmark's Hardware, Template and Workflows live in.
pub const NAMESPACE: &str = "bench";

/// The agent id (a MAC address) of simulated machine `i`, which its Hardware names.
pub fn mac(i: usize) -> String {
    let b = (i as u64).to_be_bytes();
    format!("02:00:{:02x}:{:02x}:{:02x}:{:02x}", b[4], b[5], b[6], b[7])
}

/// Wall-clock nanoseconds since the Unix epoch: both processes stamp with the same clock, so
/// a latency can start in one and end in the other.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Raises the soft open-files limit to the hard one (10,000 agents hold 10,000 connections).
pub fn raise_open_files() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.maximum.is_some() && limit.current != limit.maximum {
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// CPU time (user + system, all threads) a process used so far, in seconds.
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // After the command name in parentheses the fields start at the state (field 3); utime
    // and stime are fields 14 and 15, in USER_HZ (100 per second on Linux).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .context("malformed stat")?
        .1
        .split_whitespace()
        .collect();
    let ticks = |i: usize| -> anyhow::Result<f64> {
        fields
            .get(i)
            .context("short stat")?
            .parse::<f64>()
            .context("stat field")
    };
    Ok((ticks(11)? + ticks(12)?) / 100.0)
}

/// Resident memory of a process, KiB.
pub fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no VmRSS")
}

/// The 1-minute load average.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Quantile `q` (0..=1) of sorted samples (nearest rank).
pub fn quantile(sorted: &[Duration], q: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    Some(sorted[i])
}

/// Milliseconds of an optional duration, for tables and JSON.
pub fn ms(d: Option<Duration>) -> Option<f64> {
    d.map(|d| (d.as_secs_f64() * 1e4).round() / 10.0)
}

/// An event of `workflow_id` from `agent_id` with a fresh event id.
pub fn event(workflow_id: &str, agent_id: &str, kind: event::Event) -> Event {
    Event {
        workflow_id: workflow_id.to_string(),
        agent_id: agent_id.to_string(),
        event_id: uuid::Uuid::new_v4().to_string(),
        event: Some(kind),
        ..Default::default()
    }
}

/// The event both event load generators publish: an `ActionStarted` of a workflow that does
/// not exist (the controller reads and drops it, in both runs alike).
pub fn load_event(generator: usize) -> Event {
    event(
        &format!("{NAMESPACE}/events-{generator}"),
        &mac(generator),
        event::Event::ActionStarted(event::ActionStarted {
            action_id: "a".into(),
        }),
    )
}

/// What an event load generator prints as its last stdout line (JSON).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct LoadResult {
    /// Confirmed events.
    pub events: u64,
    /// Failed publishes.
    pub errors: u64,
    /// Seconds measured.
    pub seconds: f64,
    /// Confirmation latency p50, ms.
    pub p50_ms: Option<f64>,
    /// Confirmation latency p99, ms.
    pub p99_ms: Option<f64>,
}

/// One workflow as the agent simulator saw it; printed as a stdout line
/// `W <workflow id> <StartWorkflow received, ns> <last event confirmed, ns>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentRecord {
    /// `namespace/name`.
    pub workflow_id: String,
    /// When the StartWorkflow command arrived.
    pub dispatched_ns: u64,
    /// When the server confirmed the last event.
    pub last_event_ns: u64,
}

impl AgentRecord {
    /// The stdout line.
    pub fn line(&self) -> String {
        format!(
            "W {} {} {}\n",
            self.workflow_id, self.dispatched_ns, self.last_event_ns
        )
    }

    /// Parses [`AgentRecord::line`] (without the newline); `None` for other lines.
    pub fn parse(line: &str) -> Option<Self> {
        let mut it = line.split_whitespace();
        if it.next()? != "W" {
            return None;
        }
        let workflow_id = it.next()?.to_string();
        let dispatched_ns = it.next()?.parse().ok()?;
        let last_event_ns = it.next()?.parse().ok()?;
        Some(Self {
            workflow_id,
            dispatched_ns,
            last_event_ns,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_other_lines_are_not_records() {
        let r = AgentRecord {
            workflow_id: "bench/s0-1".into(),
            dispatched_ns: 5,
            last_event_ns: 7,
        };
        assert_eq!(AgentRecord::parse(r.line().trim_end()), Some(r));
        assert_eq!(AgentRecord::parse("ready 10"), None);
        assert_eq!(AgentRecord::parse("W a b c"), None);
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(quantile(&v, 0.5), Some(Duration::from_millis(50)));
        assert_eq!(quantile(&v, 0.99), Some(Duration::from_millis(99)));
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(mac(258), "02:00:00:00:01:02");
    }
}
