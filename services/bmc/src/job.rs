//! What a Job does next, from what exists: a pure function of the Job, its Machine and the
//! statuses of its Tasks.

use std::collections::BTreeMap;

use kube::ResourceExt;
use tink_api::bmc::{
    ConditionStatus, Job, JobConditionType, Machine, TaskConditionType, TaskSpec, TaskStatus,
    task_name,
};

/// The one step to take for a Job.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// The Job has finished: nothing to do.
    Done,
    /// Create the child Task `name` (the `index`th) with `spec`.
    CreateTask {
        /// Position in `spec.tasks`.
        index: usize,
        /// `<job>-task-<index>`.
        name: String,
        /// The action and the Machine's connection.
        spec: Box<TaskSpec>,
    },
    /// Task `name` runs: wait for it.
    Wait {
        /// Position in `spec.tasks`.
        index: usize,
        /// Its name.
        name: String,
    },
    /// Every task completed: set `Completed` and `completionTime`.
    Complete,
    /// Stop the Job: set `Failed` with `message`.
    Fail {
        /// Why (the failed task's message, or the missing Machine).
        message: String,
    },
}

/// Whether `job` is seen for the first time: `Running` and `startTime` are to be set before its
/// next step (in the same pass).
pub fn needs_start(job: &Job) -> bool {
    let status = job.status.clone().unwrap_or_default();
    !status.is_finished() && !status.has_condition(JobConditionType::Running, ConditionStatus::True)
}

/// The next step of `job`, given its Machine (`None`: not found) and the statuses of the
/// Tasks that exist, by name.
pub fn next_step(
    job: &Job,
    machine: Option<&Machine>,
    tasks: &BTreeMap<String, TaskStatus>,
) -> Step {
    let status = job.status.clone().unwrap_or_default();
    if status.is_finished() {
        return Step::Done;
    }
    let Some(machine) = machine else {
        let r = &job.spec.machine_ref;
        return Step::Fail {
            message: format!("Machine {}/{} not found", r.namespace, r.name),
        };
    };
    let job_name = job.name_any();
    for (index, action) in job.spec.tasks.iter().enumerate() {
        let name = task_name(&job_name, index);
        match tasks.get(&name) {
            None => {
                return Step::CreateTask {
                    index,
                    name,
                    spec: Box::new(TaskSpec {
                        task: action.clone(),
                        connection: Some(machine.spec.connection.clone()),
                    }),
                };
            }
            Some(t) if t.has_condition(TaskConditionType::Failed, ConditionStatus::True) => {
                let why = t
                    .conditions
                    .iter()
                    .find(|c| c.type_ == TaskConditionType::Failed)
                    .map(|c| c.message.as_str())
                    .unwrap_or_default();
                return Step::Fail {
                    message: format!("task {index} ({name}) failed: {why}"),
                };
            }
            Some(t) if t.has_condition(TaskConditionType::Completed, ConditionStatus::True) => {}
            Some(_) => return Step::Wait { index, name },
        }
    }
    Step::Complete
}

/// The Jobs that may run now: for each Machine, its oldest unfinished Job (creation time,
/// then name), so two Jobs never drive one BMC at once.
pub fn runnable(jobs: &[Job]) -> Vec<&Job> {
    let mut first: BTreeMap<(String, String), &Job> = BTreeMap::new();
    for j in jobs {
        if j.status.as_ref().is_some_and(|s| s.is_finished()) {
            continue;
        }
        let key = (
            j.spec.machine_ref.namespace.clone(),
            j.spec.machine_ref.name.clone(),
        );
        let order = |j: &Job| (j.metadata.creation_timestamp.clone(), j.name_any());
        match first.get(&key) {
            Some(cur) if order(cur) <= order(j) => {}
            _ => {
                first.insert(key, j);
            }
        }
    }
    first.into_values().collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use tink_api::bmc::{
        Action, Connection, JobSpec, JobStatus, MachineRef, MachineSpec, PowerAction, TaskCondition,
    };

    use super::*;

    fn job(name: &str, machine: &str, created: i64, status: JobStatus) -> Job {
        let mut j = Job::new(
            name,
            JobSpec {
                machine_ref: MachineRef {
                    name: machine.into(),
                    namespace: "ns".into(),
                },
                tasks: vec![
                    Action::power(PowerAction::Off),
                    Action::power(PowerAction::On),
                ],
            },
        );
        j.metadata.namespace = Some("ns".into());
        j.metadata.creation_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(created).expect("time"),
        ));
        j.status = Some(status);
        j
    }

    fn running() -> JobStatus {
        let mut s = JobStatus::default();
        s.set_condition(JobConditionType::Running, ConditionStatus::True, "");
        s
    }

    fn machine() -> Machine {
        Machine::new(
            "m",
            MachineSpec {
                connection: Connection {
                    host: "10.0.0.5".into(),
                    ..Connection::default()
                },
            },
        )
    }

    fn task(t: TaskConditionType, message: &str) -> TaskStatus {
        TaskStatus {
            conditions: vec![TaskCondition {
                type_: t,
                status: ConditionStatus::True,
                message: message.into(),
            }],
            ..TaskStatus::default()
        }
    }

    #[test]
    fn tasks_run_in_order_and_the_first_failure_stops_the_job() {
        let m = machine();
        let none = BTreeMap::new();
        let fresh = job("j", "m", 1, JobStatus::default());
        assert!(needs_start(&fresh));
        // its first task follows in the same pass
        assert!(matches!(
            next_step(&fresh, Some(&m), &none),
            Step::CreateTask { index: 0, .. }
        ));
        let j = job("j", "m", 1, running());
        assert!(!needs_start(&j));
        match next_step(&j, Some(&m), &none) {
            Step::CreateTask { index, name, spec } => {
                assert_eq!((index, name.as_str()), (0, "j-task-0"));
                assert_eq!(spec.task, Action::power(PowerAction::Off));
                assert_eq!(spec.connection.map(|c| c.host), Some("10.0.0.5".into()));
            }
            other => panic!("{other:?}"),
        }
        let mut tasks = BTreeMap::from([("j-task-0".to_string(), TaskStatus::default())]);
        assert_eq!(
            next_step(&j, Some(&m), &tasks),
            Step::Wait {
                index: 0,
                name: "j-task-0".into()
            }
        );
        tasks.insert("j-task-0".into(), task(TaskConditionType::Completed, ""));
        assert!(matches!(
            next_step(&j, Some(&m), &tasks),
            Step::CreateTask { index: 1, .. }
        ));
        tasks.insert(
            "j-task-1".into(),
            task(TaskConditionType::Failed, "redfish: credentials refused"),
        );
        assert_eq!(
            next_step(&j, Some(&m), &tasks),
            Step::Fail {
                message: "task 1 (j-task-1) failed: redfish: credentials refused".into()
            }
        );
        tasks.insert("j-task-1".into(), task(TaskConditionType::Completed, ""));
        assert_eq!(next_step(&j, Some(&m), &tasks), Step::Complete);
        let mut done = running();
        done.set_condition(JobConditionType::Completed, ConditionStatus::True, "");
        assert_eq!(
            next_step(&job("j", "m", 1, done), Some(&m), &tasks),
            Step::Done
        );
    }

    #[test]
    fn a_missing_machine_fails_the_job() {
        assert_eq!(
            next_step(&job("j", "gone", 1, running()), None, &BTreeMap::new()),
            Step::Fail {
                message: "Machine ns/gone not found".into()
            }
        );
    }

    #[test]
    fn one_job_at_a_time_per_machine() {
        let mut finished = running();
        finished.set_condition(JobConditionType::Failed, ConditionStatus::True, "x");
        let jobs = vec![
            job("old-done", "a", 1, finished),
            job("b-second", "a", 3, JobStatus::default()),
            job("a-first", "a", 2, running()),
            job("other", "b", 5, JobStatus::default()),
            job("tie-z", "c", 7, JobStatus::default()),
            job("tie-a", "c", 7, JobStatus::default()),
        ];
        let names: Vec<String> = runnable(&jobs).iter().map(|j| j.name_any()).collect();
        assert_eq!(names, ["a-first", "other", "tie-a"]);
    }
}
