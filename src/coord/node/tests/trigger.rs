//! The node's manual runs and history, fed by hand: no ZooKeeper, no clock.

use std::time::Duration;

use super::super::io::{
    Answered, Input, Now, Output, Request, Stat, WatchKind, ZkFail, ZkOk, ZkOp,
};
use super::super::test_fixtures::{BASE, at_secs as at, drain, pending_trigger};
use super::super::{Node, NodeConfig};
use crate::coord::records::{HistoryEntry, HistoryRecord, RunTrigger, TriggerRecord, TriggerState};
use crate::coord::{ClaimOutcome, RunResult, Trigger};

const NAME: &str = "t@manual-0000000001";

fn config() -> NodeConfig {
    NodeConfig {
        release: semver::Version::new(1, 2, 3),
        history_runs: 3,
        ..super::super::test_fixtures::config("n1")
    }
}

pub(super) fn calls(outputs: &[Output]) -> Vec<(u64, ZkOp)> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Call { op, zk } => Some((*op, zk.clone())),
            _ => None,
        })
        .collect()
}

/// Delivers `result` as the answer to `op` and drains what the node does next.
pub(super) fn reply(
    node: &mut Node,
    op: u64,
    result: Result<ZkOk, ZkFail>,
    now: Now,
) -> Vec<Output> {
    node.handle(Input::Reply { op, result }, now);
    drain(node)
}

/// The answer to `req`, its error as text.
pub(super) fn answer(outputs: &[Output], req: u64) -> Option<Result<Answered, String>> {
    outputs.iter().find_map(|o| match o {
        Output::Answer { req: r, answer } if *r == req => Some(match answer {
            Ok(answered) => Ok(answered.clone()),
            Err(error) => Err(error.to_string()),
        }),
        _ => None,
    })
}

/// A node connected, listed, and holding the lease of `t` (its take set the epoch to 5).
pub(super) fn leading() -> Node {
    let mut node = Node::new(config(), at(0));
    node.handle(
        Input::Connected {
            session_id: 0x10,
            negotiated_timeout: Duration::from_secs(10),
        },
        at(0),
    );
    let setup = drain(&mut node);
    // Setup creates control/ and control/triggers, watches it and lists it.
    let triggers = format!("{BASE}/control/triggers");
    let ops: Vec<ZkOp> = calls(&setup).into_iter().map(|(_, zk)| zk).collect();
    assert!(ops.contains(&ZkOp::AddPersistentRecursiveWatch {
        path: triggers.clone()
    }));
    assert!(ops.contains(&ZkOp::GetChildren { path: triggers }));
    let session = node.life.session.as_mut().unwrap();
    session.listed = true;
    session.setup_outstanding = None;
    session.set_up = true;
    node.tasks.hold("t", 5, None);
    node.publish();
    drain(&mut node);
    node
}

fn pending(task: &str) -> TriggerRecord {
    pending_trigger(task, at(1).wall)
}

/// Tells the node that trigger `name` was created with `record` (a watch event and the read).
fn learn(node: &mut Node, name: &str, record: &TriggerRecord, version: i32, now: Now) {
    let path = format!("{BASE}/control/triggers/{name}");
    node.handle(
        Input::Watch {
            path: path.clone(),
            kind: WatchKind::Created,
        },
        now,
    );
    let out = drain(node);
    let (op, zk) = calls(&out).pop().expect("a read");
    assert_eq!(zk, ZkOp::GetData { path });
    let stat = Stat {
        version,
        mtime_ms: now.wall.timestamp_millis(),
        ..Stat::default()
    };
    let data = serde_json::to_vec(record).unwrap();
    node.handle(
        Input::Reply {
            op,
            result: Ok(ZkOk::Data(data, stat)),
        },
        now,
    );
}

fn trigger(name: &str) -> Trigger {
    Trigger {
        fire_id: name.into(),
        requested_at: at(1).wall,
    }
}

fn claim(node: &mut Node, req: u64, name: &str, now: Now) -> Vec<Output> {
    node.handle(
        Input::Request {
            req,
            request: Request::ClaimManual {
                task: "t".into(),
                trigger: trigger(name),
            },
        },
        now,
    );
    drain(node)
}

#[test]
fn pending_triggers_of_led_tasks_are_listed_and_others_are_not() {
    let mut node = leading();
    learn(&mut node, NAME, &pending("t"), 0, at(1));
    learn(&mut node, "u@manual-0000000002", &pending("u"), 0, at(1));
    // A znode whose record names another task than its name is no trigger of it.
    learn(&mut node, "t@manual-0000000003", &pending("u"), 0, at(1));
    let said: Vec<String> = drain(&mut node)
        .iter()
        .filter_map(|o| match o {
            Output::Report(r) => Some(r.to_string()),
            _ => None,
        })
        .collect();
    let triggers = node.leadership().triggers.clone();
    assert_eq!(triggers.keys().collect::<Vec<_>>(), ["t"]);
    assert_eq!(triggers["t"], vec![trigger(NAME)]);
    assert!(
        said.iter()
            .any(|r| r.contains("ignoring /zkcron/test/control/triggers/t@manual-0000000003")),
        "{said:?}"
    );
    // Gone: no longer listed.
    node.handle(
        Input::Watch {
            path: format!("{BASE}/control/triggers/{NAME}"),
            kind: WatchKind::Deleted,
        },
        at(2),
    );
    assert!(node.leadership().triggers.is_empty());
}

#[test]
fn a_manual_claim_is_one_multi_fenced_on_the_lease_incarnation_and_the_trigger_version() {
    let mut node = leading();
    learn(&mut node, NAME, &pending("t"), 4, at(1));
    let out = claim(&mut node, 7, NAME, at(2));
    let (op, zk) = calls(&out).pop().expect("the claim");
    let ZkOp::Multi(ops) = zk else {
        panic!("not a multi: {zk:?}")
    };
    assert_eq!(
        ops[0],
        ZkOp::Check {
            path: format!("{BASE}/leases/t"),
            version: 0
        }
    );
    assert_eq!(
        ops[1],
        ZkOp::Check {
            path: format!("{BASE}/tasks/t/epoch"),
            version: 5
        }
    );
    let ZkOp::SetData {
        path,
        data,
        version,
    } = &ops[2]
    else {
        panic!("{ops:?}")
    };
    assert_eq!(path, &format!("{BASE}/control/triggers/{NAME}"));
    assert_eq!(*version, Some(4));
    let running: TriggerRecord = serde_json::from_slice(data).unwrap();
    assert_eq!(running.state, TriggerState::Running);
    assert_eq!(running.node.as_deref(), Some("n1"));
    assert_eq!(running.claimed_at, Some(at(2).wall));
    let stat = Stat {
        version: 5,
        ..Stat::default()
    };
    let out = reply(
        &mut node,
        op,
        Ok(ZkOk::Multi(vec![ZkOk::Done, ZkOk::Done, ZkOk::Stat(stat)])),
        at(2),
    );
    assert_eq!(
        answer(&out, 7),
        Some(Ok(Answered::Claim(ClaimOutcome::Claimed)))
    );
    // No longer pending: not listed, and a second claim is refused without a call.
    assert!(node.leadership().triggers.is_empty());
    let out = claim(&mut node, 8, NAME, at(3));
    assert!(calls(&out).is_empty(), "{out:?}");
    assert_eq!(
        answer(&out, 8),
        Some(Ok(Answered::Claim(ClaimOutcome::AlreadyClaimed {
            record: at(1).wall
        })))
    );
}

#[test]
fn a_manual_claim_without_the_lease_is_not_leader_and_sends_nothing() {
    let mut node = leading();
    learn(&mut node, NAME, &pending("t"), 0, at(1));
    node.tasks.unhold_all();
    let out = claim(&mut node, 7, NAME, at(2));
    assert!(calls(&out).is_empty(), "{out:?}");
    assert_eq!(
        answer(&out, 7),
        Some(Ok(Answered::Claim(ClaimOutcome::NotLeader)))
    );
}

#[test]
fn a_lost_manual_claim_is_resolved_by_reading_the_trigger_again() {
    for (stored_by, expected) in [
        ("n1", ClaimOutcome::Claimed),
        ("n2", ClaimOutcome::AlreadyClaimed { record: at(1).wall }),
    ] {
        let mut node = leading();
        learn(&mut node, NAME, &pending("t"), 0, at(1));
        let out = claim(&mut node, 7, NAME, at(2));
        let (op, _) = calls(&out).pop().unwrap();
        let out = reply(&mut node, op, Err(ZkFail::ConnectionLoss), at(3));
        let ops = calls(&out);
        let path = format!("{BASE}/control/triggers/{NAME}");
        assert!(
            matches!(&ops[0].1, ZkOp::Sync { path: p } if *p == path),
            "{ops:?}"
        );
        assert_eq!(ops[1].1, ZkOp::GetData { path });
        let stored = TriggerRecord {
            state: TriggerState::Running,
            node: Some(stored_by.into()),
            claimed_at: Some(at(2).wall),
            ..pending("t")
        };
        let out = reply(
            &mut node,
            ops[1].0,
            Ok(ZkOk::Data(
                serde_json::to_vec(&stored).unwrap(),
                Stat {
                    version: 1,
                    ..Stat::default()
                },
            )),
            at(3),
        );
        assert_eq!(
            answer(&out, 7),
            Some(Ok(Answered::Claim(expected))),
            "stored by {stored_by}"
        );
    }
}

fn entry(i: u32) -> HistoryEntry {
    HistoryEntry {
        fire_id: format!("t@{i}"),
        tick: at(0).wall,
        node: "n2".into(),
        release: "1.0.0".into(),
        started_at: at(0).wall,
        duration_ms: 1,
        exit_code: Some(0),
        signal: None,
        success: true,
        attempts: 1,
        trigger: RunTrigger::Schedule,
        backfill: false,
        after: None,
        items: None,
        output_tail: None,
    }
}

#[test]
fn a_manual_runs_end_appends_the_bounded_history_then_ends_its_trigger_with_the_result() {
    let mut node = leading();
    let running = TriggerRecord {
        state: TriggerState::Running,
        node: Some("n1".into()),
        claimed_at: Some(at(2).wall),
        ..pending("t")
    };
    learn(&mut node, NAME, &running, 1, at(2));
    drain(&mut node);
    let result = RunResult {
        tick: at(1).wall,
        node: "n1".into(),
        exit: "killed by signal 9 (SIGKILL)".into(),
        success: false,
        attempts: 1,
        duration_ms: 1500,
        finished_at: at(4).wall,
        fire_id: Some(NAME.into()),
        manual: true,
        exit_code: None,
        signal: Some(9),
        started_at: Some(at(2).wall),
        release: None,
        chained: Vec::new(),
        items: Vec::new(),
        pause: None,
        output_tail: None,
    };
    node.handle(
        Input::Request {
            req: 9,
            request: Request::RunEnded {
                task: "t".into(),
                result,
            },
        },
        at(4),
    );
    let out = drain(&mut node);
    let history = format!("{BASE}/tasks/t/history");
    let (op, zk) = calls(&out).pop().unwrap();
    assert_eq!(
        zk,
        ZkOp::GetData {
            path: history.clone()
        }
    );
    // Three runs stored already (history_runs = 3): the oldest goes.
    let stored = HistoryRecord {
        format: 1,
        runs: vec![entry(1), entry(2), entry(3)],
    };
    let out = reply(
        &mut node,
        op,
        Ok(ZkOk::Data(
            serde_json::to_vec(&stored).unwrap(),
            Stat {
                version: 7,
                ..Stat::default()
            },
        )),
        at(4),
    );
    let (op, zk) = calls(&out).pop().unwrap();
    let ZkOp::SetData {
        path,
        data,
        version,
    } = zk
    else {
        panic!("{zk:?}")
    };
    assert_eq!((path, version), (history, Some(7)));
    let written: HistoryRecord = serde_json::from_slice(&data).unwrap();
    let ids: Vec<&str> = written.runs.iter().map(|r| r.fire_id.as_str()).collect();
    assert_eq!(ids, ["t@2", "t@3", NAME]);
    let expected = HistoryEntry {
        fire_id: NAME.into(),
        tick: at(1).wall,
        node: "n1".into(),
        release: "1.2.3".into(),
        started_at: at(2).wall,
        duration_ms: 1500,
        exit_code: None,
        signal: Some(9),
        success: false,
        attempts: 1,
        trigger: RunTrigger::Manual,
        backfill: false,
        after: None,
        items: None,
        output_tail: None,
    };
    assert_eq!(written.runs[2], expected);
    assert!(
        answer(&out, 9).is_none(),
        "answered before the trigger ended"
    );
    let out = reply(&mut node, op, Ok(ZkOk::Stat(Stat::default())), at(4));
    let (op, zk) = calls(&out).pop().unwrap();
    let ZkOp::SetData { data, version, .. } = zk else {
        panic!("{zk:?}")
    };
    assert_eq!(version, Some(1));
    let ended: TriggerRecord = serde_json::from_slice(&data).unwrap();
    assert_eq!(ended.state, TriggerState::Ended);
    assert_eq!(ended.result, Some(expected));
    assert_eq!(ended.reason, None, "a signal says why");
    let out = reply(&mut node, op, Ok(ZkOk::Stat(Stat::default())), at(4));
    assert_eq!(answer(&out, 9), Some(Ok(Answered::Done)));
}

#[test]
fn ended_triggers_are_deleted_ten_minutes_after_they_ended() {
    let mut node = leading();
    let ended = TriggerRecord {
        state: TriggerState::Ended,
        ..pending("t")
    };
    learn(&mut node, NAME, &ended, 2, at(10));
    drain(&mut node);
    // Collections run every minute; the trigger ended at 10 s.
    node.handle_timeout(at(600));
    assert!(
        !calls(&drain(&mut node))
            .iter()
            .any(|(_, zk)| matches!(zk, ZkOp::Delete { .. })),
        "deleted too early"
    );
    node.handle_timeout(at(660));
    let deletes: Vec<ZkOp> = calls(&drain(&mut node))
        .into_iter()
        .map(|(_, zk)| zk)
        .filter(|zk| matches!(zk, ZkOp::Delete { .. }))
        .collect();
    assert_eq!(
        deletes,
        vec![ZkOp::Delete {
            path: format!("{BASE}/control/triggers/{NAME}"),
            version: Some(2)
        }]
    );
}

#[test]
fn a_trigger_left_running_by_a_node_that_is_gone_is_ended_by_the_lease_holder_not_rerun() {
    let mut node = leading();
    let running = |by: &str| TriggerRecord {
        state: TriggerState::Running,
        node: Some(by.into()),
        claimed_at: Some(at(2).wall),
        ..pending("t")
    };
    learn(&mut node, NAME, &running("n9"), 1, at(2));
    // Running on a live member: left alone however long it runs.
    learn(&mut node, "t@manual-0000000002", &running("n2"), 1, at(2));
    node.view.member_sessions.insert("n2".into(), 0x22);
    drain(&mut node);
    let trigger_writes = |out: &[Output]| -> Vec<ZkOp> {
        calls(out)
            .into_iter()
            .map(|(_, zk)| zk)
            .filter(|zk| matches!(zk, ZkOp::SetData { path, .. } if path.contains("/control/triggers/")))
            .collect()
    };
    node.handle_timeout(at(540));
    assert!(
        trigger_writes(&drain(&mut node)).is_empty(),
        "ended too early"
    );
    node.handle_timeout(at(660));
    let writes = trigger_writes(&drain(&mut node));
    assert_eq!(writes.len(), 1, "{writes:?}");
    let ZkOp::SetData {
        path,
        data,
        version,
    } = &writes[0]
    else {
        panic!("{writes:?}")
    };
    assert_eq!(
        (path.as_str(), *version),
        (format!("{BASE}/control/triggers/{NAME}").as_str(), Some(1))
    );
    let ended: TriggerRecord = serde_json::from_slice(data).unwrap();
    assert_eq!(ended.state, TriggerState::Ended);
    assert_eq!(
        ended.reason.as_deref(),
        Some("node n9 was lost while running it")
    );
    assert!(
        node.leadership().triggers.is_empty(),
        "never listed to run again"
    );
}

/// A leading node whose scheduled run of `t` ended and was recorded, and whose history append
/// is in flight: its read's op.
fn history_append_in_flight(node: &mut Node) -> u64 {
    let result = RunResult {
        tick: at(1).wall,
        node: "n1".into(),
        exit: "exited with 0".into(),
        success: true,
        attempts: 1,
        duration_ms: 10,
        finished_at: at(2).wall,
        fire_id: Some("t@1800000001".into()),
        exit_code: Some(0),
        started_at: Some(at(1).wall),
        ..RunResult::default()
    };
    node.handle(
        Input::Request {
            req: 9,
            request: Request::RunEnded {
                task: "t".into(),
                result,
            },
        },
        at(2),
    );
    // The stored result is read, then the result written; its answer comes before the history.
    let (op, _) = calls(&drain(node)).pop().unwrap();
    let (op, zk) = calls(&reply(node, op, Err(ZkFail::NoNode), at(2)))
        .pop()
        .unwrap();
    assert!(matches!(zk, ZkOp::Multi(_)), "{zk:?}");
    let out = reply(
        node,
        op,
        Ok(ZkOk::Multi(vec![ZkOk::Created(Stat::default())])),
        at(2),
    );
    assert_eq!(answer(&out, 9), Some(Ok(Answered::Done)));
    let (op, zk) = calls(&out).pop().unwrap();
    let history = format!("{BASE}/tasks/t/history");
    assert_eq!(zk, ZkOp::GetData { path: history });
    op
}

fn close(node: &mut Node, now: Now) -> Vec<Output> {
    node.handle(
        Input::Request {
            req: 10,
            request: Request::Close,
        },
        now,
    );
    drain(node)
}

/// A daemon closes its session right after its last runs' results; the history append that
/// follows a scheduled run's result was cut off by the close ("cannot append to the run
/// history ... (the ZooKeeper session ended)" at every graceful stop with a run ending).
#[test]
fn a_close_waits_for_the_last_runs_history_append_instead_of_cutting_it_off() {
    let mut node = leading();
    let op = history_append_in_flight(&mut node);
    let out = close(&mut node, at(2));
    assert!(
        answer(&out, 10).is_none(),
        "closed before the history append: {out:?}"
    );
    assert!(!out.iter().any(|o| matches!(o, Output::CloseSession)));
    let out = reply(&mut node, op, Err(ZkFail::NoNode), at(2));
    let (op, zk) = calls(&out).pop().unwrap();
    assert!(matches!(zk, ZkOp::Create { .. }), "{zk:?}");
    assert!(!out.iter().any(|o| matches!(o, Output::CloseSession)));
    let out = reply(&mut node, op, Ok(ZkOk::Created(Stat::default())), at(2));
    assert!(
        out.iter().any(|o| matches!(o, Output::CloseSession)),
        "{out:?}"
    );
    assert_eq!(answer(&out, 10), Some(Ok(Answered::Done)));
}

#[test]
fn a_close_waits_for_a_history_append_at_most_two_seconds() {
    let mut node = leading();
    let _unanswered = history_append_in_flight(&mut node);
    let out = close(&mut node, at(2));
    assert!(answer(&out, 10).is_none());
    let waited = at(2).mono + super::super::CLOSE_WAITS_FOR_HISTORY;
    assert_eq!(node.poll_timeout(), Some(waited));
    node.handle_timeout(Now {
        mono: waited,
        wall: at(4).wall,
    });
    let out = drain(&mut node);
    assert!(
        out.iter().any(|o| matches!(o, Output::CloseSession)),
        "{out:?}"
    );
    assert_eq!(answer(&out, 10), Some(Ok(Answered::Done)));
}

/// A znode under a request directory that is not a request of its own name (not JSON, or a
/// record of another task) is ignored, and reported once with the command that removes it.
#[test]
fn a_foreign_znode_among_the_requests_is_reported_with_how_to_remove_it_and_ignored() {
    let cases = [
        (
            "triggers",
            NAME,
            "a manual run",
            "`zkcron trigger TASK` creates them",
        ),
        (
            "backfills",
            "t@backfill-0000000001",
            "a backfill",
            "`zkcron backfill` creates them",
        ),
    ];
    for (dir, name, noun, made_by) in cases {
        let mut node = leading();
        let path = format!("{BASE}/control/{dir}/{name}");
        let mut outputs = Vec::new();
        for _ in 0..2 {
            node.handle(
                Input::Watch {
                    path: path.clone(),
                    kind: WatchKind::Created,
                },
                at(2),
            );
            let (op, zk) = calls(&drain(&mut node)).pop().expect("a read");
            assert_eq!(zk, ZkOp::GetData { path: path.clone() });
            let data = b"not a request".to_vec();
            let result = Ok(ZkOk::Data(data, Stat::default()));
            outputs.extend(reply(&mut node, op, result, at(2)));
        }
        let said: Vec<String> = outputs
            .into_iter()
            .filter_map(|o| match o {
                Output::Report(report) => Some(report.to_string()),
                _ => None,
            })
            .filter(|said| said.contains("ignoring"))
            .collect();
        let expected =
            format!("ignoring {path}: not {noun} zkcron can read ({made_by}); remove it: ");
        assert_eq!(said.len(), 1, "reported once: {said:?}");
        assert!(said[0].contains(&expected), "{said:?}");
        assert!(said[0].contains(&format!(" delete {path}")), "{said:?}");
        assert!(node.leases.leadership.triggers.is_empty());
        assert!(node.leases.leadership.backfills.is_empty());
    }
}
