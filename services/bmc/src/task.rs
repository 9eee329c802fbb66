//! Where a power task stands, from what is stored: a pure function, so a controller restarted
//! at any point judges a Task the same way.
//!
//! A power change is sent in three writes: `status.startTime` is set *before* the action is
//! sent (the Task may have been sent from then on), the action is sent, then the annotation
//! [`SENT_ANNOTATION`] records that the BMC accepted it. So:
//! - no `startTime`: nothing was sent ([`PowerPhase::Fresh`]);
//! - the annotation, or this process remembers sending it: the BMC accepted it; only the target
//!   state is awaited, the action is never sent again ([`PowerPhase::Sent`]);
//! - `startTime` without either: a controller stopped between the two writes; whether the BMC
//!   received the action is unknown ([`PowerPhase::Interrupted`]). An idempotent action (on,
//!   off, soft) is then decided by reading the state again; a cycle or reset is not repeated.

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt as _;
use tink_api::bmc::{ConditionStatus, Task, TaskConditionType};

/// Set on a Task once the BMC accepted its power action (RFC 3339 time).
pub const SENT_ANNOTATION: &str = "bmc.tinkerbell.org/power-action-sent";

/// Where a power task stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowerPhase {
    /// Completed or failed: nothing to do.
    Finished,
    /// Nothing was sent yet.
    Fresh,
    /// The BMC accepted the action at `at`: wait for the target state.
    Sent {
        /// When it was accepted (or, when only this process knows, when the Task started).
        at: Timestamp,
    },
    /// Sending began at `at` but no one knows whether it reached the BMC.
    Interrupted {
        /// The Task's `startTime`.
        at: Timestamp,
    },
}

/// Whether Task `task` has finished.
pub fn finished(task: &Task) -> bool {
    task.status.as_ref().is_some_and(|s| {
        s.has_condition(TaskConditionType::Completed, ConditionStatus::True)
            || s.has_condition(TaskConditionType::Failed, ConditionStatus::True)
    })
}

/// The phase of power task `task`; `sent_here`: this process sent its action.
pub fn power_phase(task: &Task, sent_here: bool) -> PowerPhase {
    if finished(task) {
        return PowerPhase::Finished;
    }
    let started = task
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| t.0);
    let Some(started) = started else {
        return PowerPhase::Fresh;
    };
    let marked = task
        .annotations()
        .get(SENT_ANNOTATION)
        .and_then(|v| v.parse::<Timestamp>().ok());
    match (marked, sent_here) {
        (Some(at), _) => PowerPhase::Sent { at },
        (None, true) => PowerPhase::Sent { at: started },
        (None, false) => PowerPhase::Interrupted { at: started },
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use tink_api::bmc::{Action, PowerAction, TaskSpec, TaskStatus};

    use super::*;

    fn task(started: Option<i64>, marked: Option<&str>, status: Option<TaskConditionType>) -> Task {
        let mut t = Task::new(
            "j-task-0",
            TaskSpec {
                task: Action::power(PowerAction::Cycle),
                connection: None,
            },
        );
        let mut s = TaskStatus {
            start_time: started.map(|s| Time(Timestamp::from_second(s).expect("time"))),
            ..TaskStatus::default()
        };
        if let Some(c) = status {
            s.set_condition(c, ConditionStatus::True, "");
        }
        t.status = Some(s);
        if let Some(m) = marked {
            t.annotations_mut().insert(SENT_ANNOTATION.into(), m.into());
        }
        t
    }

    #[test]
    fn a_power_task_is_judged_by_what_is_stored() {
        assert_eq!(
            power_phase(&task(None, None, None), false),
            PowerPhase::Fresh
        );
        let at = Timestamp::from_second(100).expect("time");
        assert_eq!(
            power_phase(&task(Some(100), None, None), true),
            PowerPhase::Sent { at }
        );
        assert_eq!(
            power_phase(&task(Some(100), None, None), false),
            PowerPhase::Interrupted { at },
            "started by another process, never marked: unknown"
        );
        assert_eq!(
            power_phase(&task(Some(100), Some("1970-01-01T00:02:00Z"), None), false),
            PowerPhase::Sent {
                at: Timestamp::from_second(120).expect("time")
            }
        );
        assert_eq!(
            power_phase(&task(Some(100), Some("garbage"), None), false),
            PowerPhase::Interrupted { at },
            "an unreadable mark proves nothing"
        );
        for c in [TaskConditionType::Completed, TaskConditionType::Failed] {
            assert_eq!(
                power_phase(&task(Some(1), None, Some(c)), false),
                PowerPhase::Finished
            );
        }
    }
}
