//! A run's end and the requests of the runs it causes (`after`): made in the multi-op that
//! stores the end, once, and only for a success.

use super::*;
use crate::coord::RunResult;
use crate::coord::node::io::Answered;
use crate::coord::records::TriggerRecord;

const TICK: i64 = 1_800_000_000;

fn ended(success: bool) -> RunResult {
    let tick = DateTime::from_timestamp(TICK, 0).unwrap();
    RunResult {
        tick,
        node: "n1".into(),
        exit: if success {
            "exit code 0"
        } else {
            "exit code 1"
        }
        .into(),
        success,
        attempts: 1,
        finished_at: tick,
        chained: vec![Arc::from("load")],
        ..RunResult::default()
    }
}

/// The triggers in `store`, by name.
fn triggers(store: &Store) -> BTreeMap<String, TriggerRecord> {
    let prefix = format!("{BASE}/control/triggers/");
    store
        .znodes
        .iter()
        .filter_map(|(path, (data, _))| {
            let name = path.strip_prefix(&prefix)?;
            Some((name.to_string(), serde_json::from_slice(data).ok()?))
        })
        .collect()
}

/// Asks the node to record `result` as `t`'s run's end, answering its calls from `store`;
/// the calls it made.
fn end(node: &mut Node, store: &mut Store, ms: u64, result: RunResult) -> Vec<ZkOp> {
    let request = Request::RunEnded {
        task: "t".into(),
        result,
    };
    node.handle(Input::Request { req: 900, request }, at(ms));
    let (mut calls, mut answer) = (Vec::new(), None);
    for _ in 0..20 {
        let outputs: Vec<Output> = std::iter::from_fn(|| node.poll()).collect();
        for output in outputs {
            match output {
                Output::Call { op, zk } => {
                    let result = store.apply(&zk, at(ms));
                    calls.push(zk);
                    node.handle(Input::Reply { op, result }, at(ms));
                }
                Output::Answer {
                    req: 900,
                    answer: a,
                } => answer = Some(a),
                _ => {}
            }
        }
    }
    assert!(matches!(answer, Some(Ok(Answered::Done))), "{answer:?}");
    calls
}

/// The paths each op of a multi-op writes.
fn paths(ops: &[ZkOp]) -> Vec<String> {
    ops.iter()
        .filter_map(|op| match op {
            ZkOp::Create { path, .. } | ZkOp::SetData { path, .. } => Some(path.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_success_requests_each_chained_run_in_the_multi_that_stores_its_result_once() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "")]);
    let calls = end(&mut node, &mut store, 100, ended(true));
    let name = format!("load@after-t@{TICK}");
    let multis: Vec<&Vec<ZkOp>> = calls
        .iter()
        .filter_map(|zk| match zk {
            ZkOp::Multi(ops) => Some(ops),
            _ => None,
        })
        .collect();
    let [ops] = multis.as_slice() else {
        panic!("one multi-op: {calls:?}");
    };
    assert_eq!(
        paths(ops),
        [
            format!("{BASE}/tasks/t/result"),
            format!("{BASE}/control/triggers/{name}")
        ]
    );
    let record = &triggers(&store)[&name];
    assert_eq!(record.task, "load");
    assert_eq!(record.after.as_deref(), Some(&*format!("t@{TICK}")));
    assert_eq!(record.requested_at.timestamp(), TICK);

    // The same end written again (its answer lost): the request exists, nothing is added.
    end(&mut node, &mut store, 200, ended(true));
    assert_eq!(triggers(&store).len(), 1);
}

#[test]
fn a_failed_run_requests_no_chained_run() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "")]);
    end(&mut node, &mut store, 100, ended(false));
    assert!(triggers(&store).is_empty());
}

// The other write a run's end may carry: a failed run's pause.
#[path = "pause_tests.rs"]
mod pause_tests;
