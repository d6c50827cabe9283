//! A failed run's pause (`pause_on_failure`): created in the multi-op that stores the run's
//! end, and a mark that is there already kept as it is, the end stored all the same; a claim
//! answered after the pause's creation event does not run.

use std::time::Duration;

use chrono::DateTime;

use super::super::Node;
use super::super::io::{Input, Output, Request, WatchKind, ZkFail, ZkOp};
use super::super::test_fixtures::{
    Answering, BASE, Store, TICK, Timers, ask_at, at, pump, request, serve_request, serve_with,
    spec, started, tick,
};
use crate::coord::node::io::Answer;
use crate::coord::node::io::Answered;
use crate::coord::records::{FORMAT_VERSION, MarkRecord};
use crate::coord::{ClaimIntent, ClaimOutcome, RunResult};

fn mark(by: &str, reason: &str) -> MarkRecord {
    MarkRecord {
        format: FORMAT_VERSION,
        at: DateTime::from_timestamp(TICK, 0).unwrap(),
        by: by.into(),
        reason: Some(reason.into()),
    }
}

/// `t`'s run of `TICK`, failed with exit code 3, carrying its pause.
fn failed() -> RunResult {
    let tick = DateTime::from_timestamp(TICK, 0).unwrap();
    RunResult {
        tick,
        node: "n1".into(),
        exit: "exit code 3".into(),
        exit_code: Some(3),
        success: false,
        attempts: 1,
        finished_at: tick,
        pause: Some(Box::new(mark(
            "zkcron@n1",
            &format!("pause_on_failure: run t@{TICK} failed (exit code 3)"),
        ))),
        ..RunResult::default()
    }
}

/// The calls and reports of the node asked to record `result` as `t`'s run's end, its calls
/// answered from `store`.
fn end(node: &mut Node, store: &mut Store, result: RunResult) -> (Vec<ZkOp>, Vec<String>) {
    let request = Request::RunEnded {
        task: "t".into(),
        result,
    };
    let mut served = serve_request(node, store, at(100), request);
    let answer = served.answers.remove(&900);
    assert!(matches!(answer, Some(Ok(Answered::Done))), "{answer:?}");
    (served.calls, served.said)
}

/// The paths each op of `call` (a multi-op) creates or sets.
fn multi_paths(call: &ZkOp) -> Option<Vec<String>> {
    let ZkOp::Multi(ops) = call else { return None };
    Some(
        ops.iter()
            .filter_map(|op| match op {
                ZkOp::Create { path, .. } | ZkOp::SetData { path, .. } => Some(path.clone()),
                _ => None,
            })
            .collect(),
    )
}

fn stored_mark(store: &Store) -> Option<MarkRecord> {
    let (data, _) = store.get(format!("{BASE}/control/paused/t"))?;
    Some(serde_json::from_slice(data).unwrap())
}

fn stored_result_tick(store: &Store) -> Option<i64> {
    let (data, _) = store.get(format!("{BASE}/tasks/t/result"))?;
    let record: crate::coord::records::ResultRecord = serde_json::from_slice(data).unwrap();
    Some(record.result.tick.timestamp())
}

#[test]
fn a_failed_runs_pause_is_created_in_the_multi_that_stores_its_result() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "pause_on_failure = true")]);
    let (calls, said) = end(&mut node, &mut store, failed());
    let multis: Vec<Vec<String>> = calls.iter().filter_map(multi_paths).collect();
    assert_eq!(
        multis,
        [vec![
            format!("{BASE}/tasks/t/result"),
            format!("{BASE}/control/paused/t")
        ]],
        "{calls:?}"
    );
    // No write of the mark apart from the result's.
    let creates = calls
        .iter()
        .filter(|zk| matches!(zk, ZkOp::Create { path, .. } if path.contains("/control/paused/")));
    assert_eq!(creates.count(), 0);
    let stored = stored_mark(&store).expect("the task is paused");
    assert_eq!(stored.by, "zkcron@n1");
    assert_eq!(
        stored.reason.as_deref(),
        Some(&*format!(
            "pause_on_failure: run t@{TICK} failed (exit code 3)"
        ))
    );
    assert_eq!(stored_result_tick(&store), Some(TICK));
    let line = said
        .iter()
        .find(|s| s.contains("task paused"))
        .expect("reported");
    assert!(line.contains(&format!("fire_id=t@{TICK}")), "{line}");
    assert!(line.contains("failure=exit code 3"), "{line}");
}

#[test]
fn a_pause_mark_already_there_keeps_its_reason_and_the_failed_result_is_stored_all_the_same() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "pause_on_failure = true")]);
    let operator = mark("ops@host", "maintenance window");
    let path = format!("{BASE}/control/paused/t");
    let data = serde_json::to_vec(&operator).unwrap();
    store.put(path, data);

    let (calls, said) = end(&mut node, &mut store, failed());
    // The first multi-op held the pause and failed on it (NodeExists); the second did not.
    let multis: Vec<Vec<String>> = calls.iter().filter_map(multi_paths).collect();
    assert_eq!(multis.len(), 2, "{calls:?}");
    assert!(multis[0].contains(&format!("{BASE}/control/paused/t")));
    assert!(!multis[1].iter().any(|p| p.contains("/control/paused/")));
    assert_eq!(stored_mark(&store), Some(operator));
    assert_eq!(stored_result_tick(&store), Some(TICK));
    assert!(
        said.iter().any(|s| s.contains("task already paused")),
        "{said:?}"
    );
    assert!(!said.iter().any(|s| s.contains("task paused:")), "{said:?}");
}

/// Plants the operator's pause mark of `t` in `store`, and answers the end's first write
/// that would create the mark as the store does (it fails on the mark) and then deletes the
/// mark, as a resume landing before the node hears the answer: the mark's path and the answers.
fn resumed_after_the_first_write(store: &mut Store) -> (String, Answering<'static>) {
    let paused = format!("{BASE}/control/paused/t");
    let data = serde_json::to_vec(&mark("ops@host", "maintenance window")).unwrap();
    store.put(paused.clone(), data);
    let resumed = paused.clone();
    let answer: Answering = Box::new(move |zk, store| {
        let ZkOp::Multi(ops) = zk else { return None };
        let creates_mark = |op: &ZkOp| matches!(op, ZkOp::Create { path, .. } if *path == resumed);
        if !ops.iter().any(creates_mark) || !store.has(&resumed) {
            return None;
        }
        let result = store.apply(zk, at(100));
        store.remove(&resumed);
        Some(result)
    });
    (paused, answer)
}

/// Seed 126 of the pooled simulation (for a task's run likewise): an end's write found the
/// mark there (NodeExists), and an operator's resume landed before the write was sent again.
/// The failure is stored with a mark all the same: the second write checks the mark, finds it
/// gone, and the third creates it again with the result.
#[test]
fn a_failed_runs_end_written_again_after_a_resume_pauses_the_task_again() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "pause_on_failure = true")]);
    let (paused, answer) = resumed_after_the_first_write(&mut store);
    let request = Request::RunEnded {
        task: "t".into(),
        result: failed(),
    };
    let first = serve_with(
        &mut node,
        &mut store,
        at(100),
        [self::request(900, request)],
        Timers::Leave,
        answer,
    );
    let later = serve_with(
        &mut node,
        &mut store,
        at(1_000),
        [],
        Timers::Fire,
        Box::new(|_, _| None),
    );
    assert!(
        matches!(later.answers.get(&900), Some(Ok(Answered::Done))),
        "{:?} {:?}",
        first.said,
        later.said
    );
    let checks = first.calls.iter().filter(|zk| {
        matches!(zk, ZkOp::Multi(ops) if ops.iter().any(|op| matches!(op, ZkOp::Check { path, version: -1 } if *path == paused)))
    });
    assert_eq!(checks.count(), 1, "{:?}", first.calls);
    assert_eq!(stored_result_tick(&store), Some(TICK));
    let stored = stored_mark(&store).expect("the failure is stored with its pause");
    assert_eq!(stored.by, "zkcron@n1");
    assert!(
        later.said.iter().any(|s| s.contains("task paused:")),
        "{:?}",
        later.said
    );
}

/// A backfill tick's end went its own way and lacked the retry above: when its write found
/// the operator's mark there (NodeExists) it dropped the pause from the write, so a resume
/// landed meanwhile left the task running after the failure. The end of every request kind
/// is now one flow (`request_end`): the mark is checked, found gone, and created again.
#[test]
fn a_failed_backfill_ticks_end_written_again_after_a_resume_pauses_the_task_again() {
    use crate::coord::backfill::{self, BackfillRecord, Claimer};
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "pause_on_failure = true")]);
    let name = "t@backfill-0000000001";
    let request = format!("{BASE}/control/backfills/{name}");
    let from = DateTime::from_timestamp(TICK - 600, 0).unwrap();
    let range = BackfillRecord::new("t", from, tick(), 10, "ops@host", from);
    let by = Claimer {
        node: "n1",
        session: None,
    };
    let running = backfill::claimed(&range, name, tick(), by, tick());
    let data = serde_json::to_vec(&running).unwrap();
    store.put(request.clone(), data);
    let (_, answer) = resumed_after_the_first_write(&mut store);
    let result = RunResult {
        fire_id: Some(backfill::fire_id(name, tick())),
        manual: true,
        ..failed()
    };
    let request_end = Request::RunEnded {
        task: "t".into(),
        result,
    };
    let served = serve_with(
        &mut node,
        &mut store,
        at(100),
        [self::request(900, request_end)],
        Timers::Leave,
        answer,
    );
    assert!(
        matches!(served.answers.get(&900), Some(Ok(Answered::Done))),
        "{:?}",
        served.said
    );
    let (data, _) = store.znode(&request);
    let ended: BackfillRecord = serde_json::from_slice(data).unwrap();
    assert_eq!((ended.running, ended.failed), (None, 1));
    let stored = stored_mark(&store).expect("the failure is stored with its pause");
    assert_eq!(stored.by, "zkcron@n1");
    assert!(
        served.said.iter().any(|s| s.contains("task paused:")),
        "{:?}",
        served.said
    );
}

#[test]
fn a_run_without_a_pause_writes_no_mark() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "")]);
    let result = RunResult {
        pause: None,
        ..failed()
    };
    let (_, said) = end(&mut node, &mut store, result);
    assert_eq!(stored_mark(&store), None);
    assert!(!said.iter().any(|s| s.contains("paused")), "{said:?}");
}

#[test]
fn a_failed_manual_runs_pause_goes_with_its_triggers_end_and_an_existing_mark_is_kept() {
    use crate::coord::records::{TriggerRecord, TriggerState};
    let name = "t@manual-0000000001";
    let trigger = format!("{BASE}/control/triggers/{name}");
    let paused = format!("{BASE}/control/paused/t");
    for already in [false, true] {
        let mut store = Store::default();
        let (mut node, _) = started(&mut store, vec![spec("t", "pause_on_failure = true")]);
        let running = TriggerRecord {
            format: FORMAT_VERSION,
            task: "t".into(),
            requested_at: DateTime::from_timestamp(TICK, 0).unwrap(),
            by: "ops@host".into(),
            state: TriggerState::Running,
            node: Some("n1".into()),
            claimed_at: DateTime::from_timestamp(TICK, 0),
            result: None,
            reason: None,
            after: None,
        };
        let data = serde_json::to_vec(&running).unwrap();
        store.put(trigger.clone(), data);
        let operator = mark("ops@host", "maintenance window");
        if already {
            let data = serde_json::to_vec(&operator).unwrap();
            store.put(paused.clone(), data);
        }
        let result = RunResult {
            fire_id: Some(name.into()),
            manual: true,
            ..failed()
        };
        let (calls, said) = end(&mut node, &mut store, result);
        let first = calls.iter().filter_map(multi_paths).next();
        assert_eq!(
            first,
            Some(vec![trigger.clone(), paused.clone()]),
            "{calls:?}"
        );
        let (data, _) = store.znode(&trigger);
        let ended: TriggerRecord = serde_json::from_slice(data).unwrap();
        assert_eq!(
            ended.state,
            TriggerState::Ended,
            "already paused: {already}"
        );
        let stored = stored_mark(&store).expect("paused");
        let expected = if already {
            "task already paused"
        } else {
            "task paused:"
        };
        assert!(said.iter().any(|s| s.contains(expected)), "{said:?}");
        if already {
            assert_eq!(stored, operator);
        } else {
            assert_eq!(stored.by, "zkcron@n1");
        }
    }
}

/// What a claim served by [`claim_as_the_pause_arrives`] did.
struct PausedClaim {
    answer: Option<Answer>,
    said: Vec<String>,
}

/// Asks the node to claim `task`'s tick `TICK` to run it; as its claim multi-op is applied,
/// a failed run elsewhere pauses the task just before it: the node gets the creation event of
/// the pause mark before the claim's reply, in the order ZooKeeper delivers them.
fn claim_as_the_pause_arrives(node: &mut Node, store: &mut Store, task: &str) -> PausedClaim {
    claim_as_the_pause_arrives_with(node, store, task, Deletes::Applied)
}

/// What becomes of the deletes of withheld run znodes in [`claim_as_the_pause_arrives_with`].
#[derive(Clone, Copy, PartialEq)]
enum Deletes {
    Applied,
    /// Not applied, and their answer lost with the connection.
    Lost,
}

fn claim_as_the_pause_arrives_with(
    node: &mut Node,
    store: &mut Store,
    task: &str,
    deletes: Deletes,
) -> PausedClaim {
    let paused = format!("{BASE}/control/paused/{task}");
    let claim = Request::Claim {
        task: task.into(),
        tick: tick(),
        intent: ClaimIntent::Run,
        ticks: Vec::new(),
    };
    node.handle(request(900, claim), at(100));
    let mut served = PausedClaim {
        answer: None,
        said: Vec::new(),
    };
    for _ in 0..50 {
        let outputs: Vec<Output> = std::iter::from_fn(|| node.poll()).collect();
        if outputs.is_empty() {
            break;
        }
        for output in outputs {
            match output {
                Output::Call { op, zk } => {
                    let claims = matches!(&zk, ZkOp::Multi(ops) if ops.iter().any(
                        |op| matches!(op, ZkOp::Create { path, .. } if path.contains("/run-"))
                    ));
                    if claims && !store.has(&paused) {
                        let data = serde_json::to_vec(&mark("zkcron@n2", "pause_on_failure"));
                        store.put(paused.clone(), data.unwrap());
                        let event = Input::Watch {
                            path: paused.clone(),
                            kind: WatchKind::Created,
                        };
                        node.handle(event, at(100));
                    }
                    let lost = deletes == Deletes::Lost
                        && matches!(&zk, ZkOp::Delete { path, .. } if path.contains("/run-"));
                    let result = if lost {
                        Err(ZkFail::ConnectionLoss)
                    } else {
                        store.apply(&zk, at(100))
                    };
                    node.handle(Input::Reply { op, result }, at(100));
                }
                Output::Answer { req: 900, answer } => served.answer = Some(answer),
                Output::Report(report) => served.said.push(report.to_string()),
                _ => {}
            }
        }
    }
    served
}

fn withheld(said: &[String]) -> bool {
    said.iter()
        .any(|s| s.contains("claimed while the task's pause was arriving; it is not run"))
}

#[test]
fn a_claim_answered_after_the_failure_pause_arrived_does_not_run() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "pause_on_failure = true")]);
    let served = claim_as_the_pause_arrives(&mut node, &mut store, "t");
    let answer = served.answer.expect("answered").expect("no error");
    assert_eq!(
        answer,
        Answered::Claim(ClaimOutcome::AlreadyClaimed { record: tick() })
    );
    // The tick is claimed (consumed, never caught up), and its run record is gone.
    let record: crate::coord::records::FireRecord =
        serde_json::from_slice(store.data(format!("{BASE}/tasks/t"))).unwrap();
    assert_eq!(record.tick, Some(tick()));
    assert!(!store.has(format!("{BASE}/tasks/t/run-{TICK}")));
    assert!(withheld(&served.said), "{:?}", served.said);
    // The pause is the node's at once, and reported once, with its mark, when read.
    assert!(node.leadership().paused_tasks.contains("t"));
    let reports: Vec<&String> = served
        .said
        .iter()
        .filter(|s| s.contains("task t is paused"))
        .collect();
    assert_eq!(reports.len(), 1, "{:?}", served.said);
    assert!(reports[0].contains("by zkcron@n2"), "{}", reports[0]);
}

#[test]
fn a_pooled_claim_answered_after_the_failure_pause_arrived_runs_no_item() {
    let mut store = Store::default();
    let tasks = vec![spec("p", "work_items = 3\npause_on_failure = true")];
    let (mut node, _) = started(&mut store, tasks);
    let served = claim_as_the_pause_arrives(&mut node, &mut store, "p");
    let answer = served.answer.expect("answered").expect("no error");
    assert_eq!(
        answer,
        Answered::Claim(ClaimOutcome::AlreadyClaimed { record: tick() })
    );
    for item in 0..3 {
        let run = format!("{BASE}/tasks/p@{item}/run-{TICK}");
        assert!(!store.has(&run), "{run}");
    }
    assert!(withheld(&served.said), "{:?}", served.said);
}

#[test]
fn a_claim_of_a_task_not_paused_runs() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "pause_on_failure = true")]);
    let claim = Request::Claim {
        task: "t".into(),
        tick: tick(),
        intent: ClaimIntent::Run,
        ticks: Vec::new(),
    };
    let answer = ask_at(&mut node, &mut store, at(100), claim);
    assert_eq!(answer, Answered::Claim(ClaimOutcome::Claimed));
    assert!(store.has(format!("{BASE}/tasks/t/run-{TICK}")));
}

#[test]
fn a_withheld_runs_delete_lost_with_the_connection_is_sent_again_on_reconnecting() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "pause_on_failure = true")]);
    let run = format!("{BASE}/tasks/t/run-{TICK}");
    let served = claim_as_the_pause_arrives_with(&mut node, &mut store, "t", Deletes::Lost);
    assert!(withheld(&served.said), "{:?}", served.said);
    assert!(store.has(&run), "the lost delete left it");
    assert!(
        served
            .said
            .iter()
            .any(|s| s.contains("deleting it again on reconnecting")),
        "{:?}",
        served.said
    );
    node.handle(Input::Disconnected, at(200));
    node.handle(
        Input::Connected {
            session_id: 1,
            negotiated_timeout: Duration::from_secs(10),
        },
        at(300),
    );
    pump(&mut node, &mut store, at(300));
    assert!(
        !store.has(&run),
        "a run znode of this live session would count as a live run"
    );
}
