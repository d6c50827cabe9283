//! A failed run's pause (`pause_on_failure`): created in the multi-op that stores the run's
//! end, and a mark that is there already kept as it is, the end stored all the same.

use super::*;
use crate::coord::RunResult;
use crate::coord::node::io::Answered;
use crate::coord::records::{FORMAT_VERSION, MarkRecord};

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
    let (data, _) = store.znodes.get(&format!("{BASE}/control/paused/t"))?;
    Some(serde_json::from_slice(data).unwrap())
}

fn stored_result_tick(store: &Store) -> Option<i64> {
    let (data, _) = store.znodes.get(&format!("{BASE}/tasks/t/result"))?;
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
    store.znodes.insert(path, (data, Stat::default()));

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
        store
            .znodes
            .insert(trigger.clone(), (data, Stat::default()));
        let operator = mark("ops@host", "maintenance window");
        if already {
            let data = serde_json::to_vec(&operator).unwrap();
            store.znodes.insert(paused.clone(), (data, Stat::default()));
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
        let (data, _) = &store.znodes[&trigger];
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
