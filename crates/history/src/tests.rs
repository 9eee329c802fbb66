use super::*;

fn status(t: f64, w: &str, state: &str, reason: Option<&str>, actions: &[(&str, &str)]) -> Record {
    Record::Status {
        t,
        workflow: w.into(),
        resource_version: format!("{}", (t * 10.0) as u64),
        state: state.into(),
        reason: reason.map(Into::into),
        message: reason.map(|r| format!("because {r}")),
        dispatch: Some(format!("{w}/d1")),
        actions: actions
            .iter()
            .map(|(a, s)| (a.to_string(), s.to_string()))
            .collect(),
    }
}

fn executed(w: &str, dispatch: &str, instance: &str) -> Record {
    Record::Executed {
        t: 1.0,
        agent: "aa:bb".into(),
        instance: instance.into(),
        workflow: w.into(),
        dispatch: dispatch.into(),
    }
}

fn acked(w: &str, event: EventKind, action: &str) -> Record {
    Record::EventAcked {
        t: 1.0,
        agent: "aa:bb".into(),
        workflow: w.into(),
        dispatch: format!("{w}/d1"),
        event_id: format!("{w}-{action}-{event:?}"),
        event,
        action: Some(action.into()),
    }
}

/// A clean run: one Workflow through Running to Succeeded, its events reflected.
fn term(t: f64, holder: &str, acquired: f64) -> Record {
    Record::Term {
        t,
        holder: holder.into(),
        acquired,
        last_renew: acquired + t,
    }
}

fn clean() -> Vec<Record> {
    vec![
        Record::Run {
            seed: 7,
            description: String::new(),
        },
        status(
            0.1,
            "wf1",
            "Pending",
            None,
            &[("a", "Pending"), ("b", "Pending")],
        ),
        executed("wf1", "wf1/d1", "i1"),
        acked("wf1", EventKind::ActionStarted, "a"),
        status(
            0.2,
            "wf1",
            "Running",
            None,
            &[("a", "Running"), ("b", "Pending")],
        ),
        acked("wf1", EventKind::ActionSucceeded, "a"),
        acked("wf1", EventKind::ActionStarted, "b"),
        acked("wf1", EventKind::ActionSucceeded, "b"),
        status(
            0.4,
            "wf1",
            "Succeeded",
            Some("Succeeded"),
            &[("a", "Succeeded"), ("b", "Succeeded")],
        ),
        Record::Expect {
            workflow: "wf1".into(),
            state: "Succeeded".into(),
            reason: None,
        },
        term(100.0, "c1", 1100.0),
        term(110.0, "c1", 1100.0),
        term(113.0, "c2", 1113.0),
        term(120.0, "c2", 1113.0),
    ]
}

#[test]
fn a_clean_run_is_clean() {
    let report = check(&clean());
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.seed, Some(7));
    assert_eq!(report.workflows, 1);
    assert_eq!(report.dispatches_executed, 1);
    let text = report.to_string();
    for line in [
        "seed: 7",
        "executions twice: 0",
        "wrong end states: 0",
        "acknowledged events lost: 0",
    ] {
        assert!(text.contains(line), "{text}");
    }
}

#[test]
fn a_dispatch_executed_by_two_processes_is_counted() {
    let mut h = clean();
    h.push(executed("wf1", "wf1/d1", "i2"));
    let report = check(&h);
    assert_eq!(report.executed_twice, vec![("wf1/d1".to_string(), 2)]);
    assert!(report.to_string().contains("executions twice: 1"));
    // A second dispatch of the same Workflow (after a rejection) is not a second execution.
    let mut h = clean();
    h.push(executed("wf1", "wf1/d2", "i1"));
    assert!(check(&h).is_clean());
}

#[test]
fn a_workflow_left_running_or_ending_wrong_is_counted() {
    let mut h = clean();
    h.push(status(0.5, "wf2", "Running", None, &[("a", "Running")]));
    let report = check(&h);
    assert_eq!(
        report.wrong_end_states,
        vec!["wf2: stuck in Running".to_string()]
    );

    // A cut agent must end AgentLost: a silent success is wrong.
    let mut h = clean();
    h.push(Record::Expect {
        workflow: "wf1".into(),
        state: "Failed".into(),
        reason: Some("AgentLost".into()),
    });
    let report = check(&h);
    assert_eq!(report.wrong_end_states.len(), 1, "{report}");
    assert!(report.wrong_end_states[0].contains("must end Failed/AgentLost"));

    // The right state with another reason is wrong too; a missing Workflow is named.
    let mut h = clean();
    h.push(status(0.6, "wf3", "Failed", Some("AgentRestarted"), &[]));
    h.push(Record::Expect {
        workflow: "wf3".into(),
        state: "Failed".into(),
        reason: Some("AgentLost".into()),
    });
    h.push(Record::Expect {
        workflow: "wf4".into(),
        state: "Succeeded".into(),
        reason: None,
    });
    let report = check(&h);
    assert_eq!(report.wrong_end_states.len(), 2, "{report}");
    // The verdict's message is quoted: what the controller saw.
    assert!(
        report.wrong_end_states[0].ends_with("(\"because AgentRestarted\")"),
        "{report}"
    );
    assert!(report.wrong_end_states[1].starts_with("wf4: no status recorded"));
}

#[test]
fn an_acknowledged_event_no_status_showed_is_lost() {
    let mut h = clean();
    // The last write lost b's success: the Workflow ended with b still Running.
    h.retain(|r| !matches!(r, Record::Status { state, .. } if state == "Succeeded"));
    // (Written after the acknowledgements at 1.0: an event acknowledged after the end is not
    // lost, see below.)
    h.push(status(
        1.4,
        "wf1",
        "Failed",
        Some("AgentLost"),
        &[("a", "Succeeded"), ("b", "Running")],
    ));
    h.retain(|r| !matches!(r, Record::Expect { .. }));
    let report = check(&h);
    assert_eq!(report.acked_events_lost.len(), 1, "{report}");
    assert!(report.acked_events_lost[0].starts_with("wf1 ActionSucceeded b"));

    // The same event acknowledged only after the Workflow ended (a cut agent reporting in
    // late): not lost, counted apart. Acknowledged before the end, it is lost.
    let late = |t_ack: f64| {
        vec![
            Record::Run {
                seed: 1,
                description: String::new(),
            },
            status(0.2, "wf1", "Running", None, &[("a", "Running")]),
            status(0.4, "wf1", "Failed", Some("AgentLost"), &[("a", "Running")]),
            Record::EventAcked {
                t: t_ack,
                agent: "aa:bb".into(),
                workflow: "wf1".into(),
                dispatch: "wf1/d1".into(),
                event_id: "e1".into(),
                event: EventKind::ActionSucceeded,
                action: Some("a".into()),
            },
        ]
    };
    let report = check(&late(0.9));
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.events_after_end, 1);
    assert!(
        report
            .to_string()
            .contains("events after the end (not lost): 1")
    );
    let report = check(&late(0.3));
    assert_eq!(report.acked_events_lost.len(), 1, "{report}");
    assert_eq!(report.events_after_end, 0);

    // A start seen only as its end (a watch that re-listed) is reflected.
    let h = vec![
        acked("wf1", EventKind::ActionStarted, "a"),
        status(0.4, "wf1", "Succeeded", None, &[("a", "Succeeded")]),
    ];
    assert!(check(&h).is_clean());
}

#[test]
fn a_leader_renewing_after_the_next_acquired_overlaps() {
    // The watch saw c1 renew (t=5) after it saw c2 holding the Lease (t=4).
    let h = vec![
        term(1.0, "c1", 1000.0),
        term(2.0, "c1", 1000.0),
        term(4.0, "c2", 1003.0),
        term(5.0, "c1", 1000.0),
    ];
    let report = check(&h);
    assert_eq!(report.overlapping_terms.len(), 1, "{report}");
    assert!(
        report.overlapping_terms[0].starts_with("c1"),
        "{}",
        report.overlapping_terms[0]
    );
    // One more term after the clean run's two: c2 renewing after c3 was seen.
    let mut h = clean();
    h.push(term(118.0, "c3", 1118.0));
    h.push(term(119.0, "c2", 1113.0));
    let report = check(&h);
    assert_eq!(report.overlapping_terms.len(), 1, "{report}");
    assert!(report.overlapping_terms[0].starts_with("c2"));
}

#[test]
fn terms_are_ordered_by_what_the_watch_saw_not_by_the_holders_clocks() {
    // c1's clock ran 90 s ahead while it renewed (the clock-jump fault): its renewTime is
    // later than c2's acquireTime, yet the watch saw every c1 write before c2's first.
    let h = vec![
        Record::Term {
            t: 1.0,
            holder: "c1".into(),
            acquired: 1000.0,
            last_renew: 1000.0,
        },
        Record::Term {
            t: 2.0,
            holder: "c1".into(),
            acquired: 1000.0,
            last_renew: 1092.0,
        },
        Record::Term {
            t: 8.0,
            holder: "c2".into(),
            acquired: 1008.0,
            last_renew: 1008.0,
        },
    ];
    assert!(check(&h).is_clean(), "{}", check(&h));
    // The same holder acquiring again is not an overlap, however its clock reads.
    let h = vec![
        term(1.0, "c1", 1000.0),
        term(5.0, "c1", 1000.0),
        term(6.0, "c1", 990.0),
    ];
    assert!(check(&h).is_clean());
}

#[test]
fn histories_round_trip_and_bad_lines_are_named() {
    let mut buf = Vec::new();
    for r in clean() {
        serde_json::to_writer(&mut buf, &r).expect("serialise");
        buf.push(b'\n');
    }
    buf.extend_from_slice(b"\n");
    let back = read(buf.as_slice()).expect("read");
    assert_eq!(back, clean());

    let bad = b"{\"kind\":\"run\",\"seed\":1}\n{\"kind\":\"executed\",\"t\":1}\n";
    let err = read(bad.as_slice()).expect_err("a record missing fields");
    assert!(err.to_string().starts_with("line 2:"), "{err}");
    let unknown = b"{\"kind\":\"teleported\",\"t\":1}\n";
    let err = read(unknown.as_slice()).expect_err("an unknown kind");
    assert!(err.to_string().contains("teleported"), "{err}");
}

#[test]
fn the_recorder_writes_one_line_a_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("history.jsonl");
    let recorder = Recorder::create(&path, 42, "unit").expect("create");
    std::thread::scope(|s| {
        for i in 0..4 {
            let recorder = &recorder;
            s.spawn(move || {
                for j in 0..100 {
                    recorder
                        .record(&executed(&format!("wf{i}"), &format!("wf{i}/d{j}"), "i"))
                        .expect("record");
                }
            });
        }
    });
    recorder.flush().expect("flush");
    let file = std::fs::File::open(&path).expect("open");
    let records = read(std::io::BufReader::new(file)).expect("read");
    assert_eq!(records.len(), 401);
    let report = check(&records);
    assert_eq!(report.seed, Some(42));
    assert_eq!(report.dispatches_executed, 400);
    assert!(report.is_clean());
}

#[test]
fn the_fault_table_counts_the_workflows_in_flight_during_each_kind() {
    let fault = |t: f64, kind: &str| Record::Fault {
        t,
        fault: kind.into(),
        target: "x".into(),
    };
    let h = vec![
        Record::Run {
            seed: 3,
            description: String::new(),
        },
        status(0.5, "wf1", "Running", None, &[("a", "Running")]),
        fault(1.0, "latency"),
        status(1.5, "wf1", "Running", None, &[("a", "Running")]),
        fault(2.0, "heal"),
        status(2.5, "wf1", "Succeeded", None, &[("a", "Succeeded")]),
        fault(3.0, "agent-cut-long"),
        status(3.5, "wf2", "Running", None, &[("a", "Running")]),
        fault(4.0, "heal"),
        status(4.5, "wf2", "Succeeded", None, &[("a", "Succeeded")]),
        Record::Expect {
            workflow: "wf2".into(),
            state: "Failed".into(),
            reason: Some("AgentLost".into()),
        },
        fault(5.0, "latency"),
        fault(6.0, "heal"),
    ];
    let rows = fault_table(&h);
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (
            rows[0].kind.as_str(),
            rows[0].injected,
            rows[0].workflows,
            rows[0].right_end_states
        ),
        ("latency", 2, 1, 1)
    );
    assert_eq!(
        (
            rows[1].kind.as_str(),
            rows[1].injected,
            rows[1].workflows,
            rows[1].right_end_states
        ),
        ("agent-cut-long", 1, 1, 0),
        "wf2 must end Failed/AgentLost"
    );
    let md = fault_table_markdown(&rows);
    assert!(md.contains("| `latency` | 2 | 1 | 1 | 0 | 0 |"), "{md}");
}
