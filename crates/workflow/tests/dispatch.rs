//! The dispatch choice and the Hardware -> agent id mapping.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use pretty_assertions::assert_eq;
use tink_api::v1alpha2::{
    ActionStatus, HardwareSpec, LocalObjectReference, NetworkInterface, Workflow, WorkflowSpec,
    WorkflowState, WorkflowStatus,
};
use tink_workflow::{Candidate, WorkflowKey, agent_ids, normalize_agent_id, pick_dispatches};

use WorkflowState::*;

const M1: &str = "aa:bb:cc:00:00:01";
const M1B: &str = "aa:bb:cc:00:00:11"; // a second NIC of machine 1
const M2: &str = "aa:bb:cc:00:00:02";
const M3: &str = "aa:bb:cc:00:00:03";

fn ts(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

fn key(name: &str) -> WorkflowKey {
    WorkflowKey::new("default", name)
}

/// A candidate on `machine`, created at `created`.
fn c(name: &str, created: i64, state: WorkflowState, machine: &[&str]) -> Candidate {
    Candidate {
        key: key(name),
        created: ts(created),
        state,
        prepared: true,
        deleting: false,
        next_attempt_at: None,
        agent_id: match state {
            Scheduled | Running | Cancelling => Some(machine[0].to_string()),
            _ => None,
        },
        machine: machine.iter().map(|s| s.to_string()).collect(),
    }
}

fn pick(cands: &[Candidate], connected: &[&str], now: i64) -> Vec<(String, String)> {
    pick_dispatches(cands, connected.iter().copied(), ts(now))
        .into_iter()
        .map(|(k, a)| (k.name, a))
        .collect()
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn dispatch_choice_table() {
    struct Row {
        name: &'static str,
        cands: Vec<Candidate>,
        connected: Vec<&'static str>,
        want: Vec<(&'static str, &'static str)>,
    }
    let backoff = |mut x: Candidate, until: i64| {
        x.next_attempt_at = Some(ts(until));
        x
    };
    let unprepared = |mut x: Candidate| {
        x.prepared = false;
        x
    };
    let deleting = |mut x: Candidate| {
        x.deleting = true;
        x
    };
    let rows = vec![
        Row {
            name: "oldest first, one per agent",
            cands: vec![c("new", 20, Pending, &[M1]), c("old", 10, Pending, &[M1])],
            connected: vec![M1],
            want: vec![("old", M1)],
        },
        Row {
            name: "same creation time: namespace/name order",
            cands: vec![c("b", 10, Pending, &[M1]), c("a", 10, Pending, &[M1])],
            connected: vec![M1],
            want: vec![("a", M1)],
        },
        Row {
            name: "each idle connected agent gets its own oldest",
            cands: vec![
                c("m2-b", 30, Pending, &[M2]),
                c("m1-a", 20, Pending, &[M1]),
                c("m2-a", 5, Pending, &[M2]),
                c("m3-a", 1, Pending, &[M3]),
            ],
            connected: vec![M1, M2, M3],
            want: vec![("m3-a", M3), ("m2-a", M2), ("m1-a", M1)],
        },
        Row {
            name: "disconnected agent gets nothing",
            cands: vec![c("a", 1, Pending, &[M1]), c("b", 2, Pending, &[M2])],
            connected: vec![M2],
            want: vec![("b", M2)],
        },
        Row {
            name: "no agent connected",
            cands: vec![c("a", 1, Pending, &[M1])],
            connected: vec![],
            want: vec![],
        },
        Row {
            name: "busy agents: Scheduled, Running, Cancelling",
            cands: vec![
                c("s", 0, Scheduled, &[M1]),
                c("r", 0, Running, &[M2]),
                c("x", 0, Cancelling, &[M3]),
                c("p1", 1, Pending, &[M1]),
                c("p2", 1, Pending, &[M2]),
                c("p3", 1, Pending, &[M3]),
            ],
            connected: vec![M1, M2, M3],
            want: vec![],
        },
        Row {
            name: "ended workflows do not occupy the agent",
            cands: vec![
                c("done", 0, Succeeded, &[M1]),
                c("failed", 0, Failed, &[M1]),
                c("canceled", 0, Canceled, &[M1]),
                c("next", 5, Pending, &[M1]),
            ],
            connected: vec![M1],
            want: vec![("next", M1)],
        },
        Row {
            name: "back-off in the future is skipped, a newer one goes",
            cands: vec![
                backoff(c("old", 1, Pending, &[M1]), 101),
                c("new", 2, Pending, &[M1]),
            ],
            connected: vec![M1],
            want: vec![("new", M1)],
        },
        Row {
            name: "back-off over is runnable again, and first",
            cands: vec![
                backoff(c("old", 1, Pending, &[M1]), 100),
                c("new", 2, Pending, &[M1]),
            ],
            connected: vec![M1],
            want: vec![("old", M1)],
        },
        Row {
            name: "unprepared and deleting workflows are not dispatched",
            cands: vec![
                unprepared(c("u", 1, Pending, &[M1])),
                deleting(c("d", 2, Pending, &[M1])),
                c("ok", 3, Pending, &[M1]),
            ],
            connected: vec![M1],
            want: vec![("ok", M1)],
        },
        Row {
            name: "unknown hardware (no agent ids) is not dispatched",
            cands: vec![c("nohw", 1, Pending, &[]), c("ok", 2, Pending, &[M2])],
            connected: vec![M1, M2],
            want: vec![("ok", M2)],
        },
        Row {
            name: "a machine with two NICs: whichever id the agent presents",
            cands: vec![c("a", 1, Pending, &[M1, M1B])],
            connected: vec![M1B],
            want: vec![("a", M1B)],
        },
        Row {
            name: "a machine busy on one NIC is busy on the other",
            cands: vec![
                c("r", 0, Running, &[M1, M1B]),
                c("a", 1, Pending, &[M1, M1B]),
            ],
            connected: vec![M1, M1B],
            want: vec![],
        },
        Row {
            name: "two connected NICs of one machine: one workflow, lowest id",
            cands: vec![
                c("a", 1, Pending, &[M1, M1B]),
                c("b", 2, Pending, &[M1, M1B]),
            ],
            connected: vec![M1B, M1],
            want: vec![("a", M1)],
        },
        Row {
            name: "connected ids in another case still match",
            cands: vec![c("a", 1, Pending, &[M1])],
            connected: vec!["AA:BB:CC:00:00:01"],
            want: vec![("a", M1)],
        },
    ];
    for r in rows {
        assert_eq!(
            pick(&r.cands, &r.connected, 100),
            pairs(&r.want),
            "{}",
            r.name
        );
    }
}

#[test]
fn busy_agent_known_only_from_the_status_blocks_it() {
    // A Running workflow whose Hardware is gone still occupies the agent it ran on.
    let mut r = c("r", 0, Running, &[M1]);
    r.machine.clear();
    let cands = vec![r, c("p", 1, Pending, &[M1])];
    assert_eq!(pick(&cands, &[M1], 100), vec![]);
}

#[test]
fn agent_ids_are_the_normalised_hardware_macs() {
    let mut nics = BTreeMap::new();
    for mac in [
        "AA:BB:CC:00:00:11",
        "aa:bb:cc:00:00:01",
        " aa:bb:cc:00:00:01 ",
        "",
    ] {
        nics.insert(mac.to_string(), NetworkInterface::default());
    }
    let hw = HardwareSpec {
        network_interfaces: nics,
        ..HardwareSpec::default()
    };
    assert_eq!(agent_ids(&hw), vec![M1.to_string(), M1B.to_string()]);
    assert_eq!(normalize_agent_id(" AA:bb:CC:00:00:01\n"), M1);
    assert!(agent_ids(&HardwareSpec::default()).is_empty());
}

#[test]
fn candidate_from_workflow_and_hardware() {
    let mut nics = BTreeMap::new();
    nics.insert(M2.to_uppercase(), NetworkInterface::default());
    let hw = HardwareSpec {
        network_interfaces: nics,
        ..HardwareSpec::default()
    };
    let mut wf = Workflow::new(
        "wf-9",
        WorkflowSpec {
            hardware_ref: LocalObjectReference::new("m2"),
            template_ref: LocalObjectReference::new("t"),
            ..WorkflowSpec::default()
        },
    );
    wf.metadata.namespace = Some("ns1".into());
    wf.metadata.creation_timestamp = Some(Time(ts(7)));
    wf.status = Some(WorkflowStatus {
        state: Running,
        actions: vec![ActionStatus::default()],
        agent_id: Some(M2.to_uppercase()),
        next_attempt_at: Some(Time(ts(9))),
        ..WorkflowStatus::default()
    });
    let got = Candidate::from_workflow(&wf, Some(&hw));
    assert_eq!(
        got,
        Candidate {
            key: WorkflowKey::new("ns1", "wf-9"),
            created: ts(7),
            state: Running,
            prepared: true,
            deleting: false,
            next_attempt_at: Some(ts(9)),
            agent_id: Some(M2.into()),
            machine: vec![M2.into()],
        }
    );
    // A fresh Workflow: Pending, unprepared, not runnable; no Hardware: no agent ids.
    let mut fresh = Workflow::new("wf-10", WorkflowSpec::default());
    fresh.metadata.namespace = Some("ns1".into());
    let got = Candidate::from_workflow(&fresh, None);
    assert_eq!(got.state, Pending);
    assert!(!got.prepared);
    assert!(got.machine.is_empty());
    assert_eq!(got.created, Timestamp::MAX);
    assert!(!got.is_runnable(ts(0)));
    // Deleting.
    fresh.metadata.deletion_timestamp = Some(Time(ts(1)));
    assert!(Candidate::from_workflow(&fresh, None).deleting);
}

mod props {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    const MACS: [&str; 5] = [M1, M1B, M2, M3, "aa:bb:cc:00:00:04"];
    /// Machines: {M1, M1B}, {M2}, {M3}, {04}.
    fn machine(i: usize) -> Vec<&'static str> {
        match i % 4 {
            0 => vec![M1, M1B],
            1 => vec![M2],
            2 => vec![M3],
            _ => vec![MACS[4]],
        }
    }
    const STATES: [WorkflowState; 7] = WorkflowState::ALL;

    fn cand() -> impl Strategy<Value = Candidate> {
        (
            0usize..4,
            0usize..7,
            0i64..50,
            any::<bool>(),
            prop::option::of(90i64..110),
            0u8..10,
        )
            .prop_map(|(m, st, created, prepared, next, flags)| {
                let mut x = c("w", created, STATES[st], &machine(m));
                x.prepared = prepared || flags > 2;
                x.deleting = flags == 0;
                x.next_attempt_at = next.map(ts);
                x
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

        #[test]
        fn choices_respect_the_rules(
            mut cands in prop::collection::vec(cand(), 0..12),
            connected in prop::collection::btree_set(0usize..5, 0..5),
        ) {
            for (i, x) in cands.iter_mut().enumerate() {
                x.key = key(&format!("w{i:02}"));
            }
            let connected: Vec<&str> = connected.iter().map(|i| MACS[*i]).collect();
            let now = ts(100);
            let chosen = pick_dispatches(&cands, connected.iter().copied(), now);
            let by_key = |k: &WorkflowKey| cands.iter().find(|x| &x.key == k).unwrap();
            let busy: BTreeSet<&str> = cands
                .iter()
                .filter(|x| x.is_active())
                .flat_map(|x| x.machine.iter().map(String::as_str))
                .collect();
            let mut used_machines = BTreeSet::new();
            for (k, agent) in &chosen {
                let x = by_key(k);
                // Runnable, to a connected agent of its own machine that was idle.
                prop_assert!(x.is_runnable(now));
                prop_assert!(connected.contains(&agent.as_str()));
                prop_assert!(x.machine.contains(agent));
                prop_assert!(x.machine.iter().all(|m| !busy.contains(m.as_str())));
                // One workflow per machine (and so per agent).
                prop_assert!(used_machines.insert(x.machine.clone()));
                // No older runnable workflow of the same machine was passed over.
                for y in &cands {
                    if y.machine == x.machine && y.is_runnable(now) {
                        prop_assert!((y.created, &y.key) >= (x.created, &x.key));
                    }
                }
            }
            // Maximal: every idle machine with a connected agent and a runnable workflow got one.
            for y in cands.iter().filter(|y| y.is_runnable(now)) {
                let idle = y.machine.iter().all(|m| !busy.contains(m.as_str()));
                let reachable = y.machine.iter().any(|m| connected.contains(&m.as_str()));
                if idle && reachable {
                    prop_assert!(used_machines.contains(&y.machine), "{:?} left idle", y.machine);
                }
            }
        }
    }
}
