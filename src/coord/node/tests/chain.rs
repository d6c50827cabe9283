//! A run's end and the requests of the runs it causes (`after`): made in the multi-op that
//! stores the end, once, and only for a success; a pooled run's, one per item it ran.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::DateTime;

use super::super::Node;
use super::super::io::{Input, Output, Request, ZkOp};
use super::super::test_fixtures::{
    BASE, Store, TICK, ask_at, at, pending_trigger, pump, spec, started, tick,
};
use crate::coord::node::io::Answered;
use crate::coord::records::TriggerRecord;
use crate::coord::{ClaimIntent, ClaimOutcome, RunResult, Trigger};

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
        .paths()
        .filter_map(|path| {
            let name = path.strip_prefix(&prefix)?;
            Some((
                name.to_string(),
                serde_json::from_slice(store.data(path)).ok()?,
            ))
        })
        .collect()
}

/// Asks the node to record `result` as `task`'s run's end, answering its calls from `store`;
/// the calls it made.
fn end(node: &mut Node, store: &mut Store, ms: u64, task: &str, result: RunResult) -> Vec<ZkOp> {
    let request = Request::RunEnded {
        task: task.into(),
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
    let calls = end(&mut node, &mut store, 100, "t", ended(true));
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
    end(&mut node, &mut store, 200, "t", ended(true));
    assert_eq!(triggers(&store).len(), 1);
}

#[test]
fn a_failed_run_requests_no_chained_run() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "")]);
    end(&mut node, &mut store, 100, "t", ended(false));
    assert!(triggers(&store).is_empty());
}

/// A node holding every unit of the pooled `p` (items "0" to "2"), whose tick it has claimed.
fn pooled_claimed(store: &mut Store) -> Node {
    let (mut node, _) = started(store, vec![spec("p", "work_items = 3")]);
    let request = Request::Claim {
        task: "p".into(),
        tick: tick(),
        intent: ClaimIntent::Run,
        ticks: Vec::new(),
    };
    let answer = ask_at(&mut node, store, at(50), request);
    let items = vec!["0".to_string(), "1".into(), "2".into()];
    assert_eq!(answer, Answered::ClaimedItems(items));
    node
}

/// The names of the chained runs a success of `p@<TICK>` requests, one per item.
fn item_requests() -> Vec<String> {
    (0..3)
        .map(|item| format!("load@item-{item}@after-p@{TICK}"))
        .collect()
}

#[test]
fn a_pooled_success_requests_one_chained_run_per_item_in_the_multi_that_stores_its_results() {
    let mut store = Store::default();
    let mut node = pooled_claimed(&mut store);
    let calls = end(&mut node, &mut store, 100, "p", ended(true));
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
    let results = (0..3).map(|item| format!("{BASE}/tasks/p@{item}/result"));
    let requests = item_requests()
        .into_iter()
        .map(|name| format!("{BASE}/control/triggers/{name}"));
    assert_eq!(paths(ops), results.chain(requests).collect::<Vec<_>>());
    let triggers = triggers(&store);
    assert_eq!(
        triggers.keys().cloned().collect::<Vec<_>>(),
        item_requests()
    );
    for record in triggers.values() {
        assert_eq!(record.task, "load");
        assert_eq!(record.after.as_deref(), Some(&*format!("p@{TICK}")));
        assert_eq!(record.requested_at.timestamp(), TICK);
    }
}

#[test]
fn a_pooled_end_whose_requests_were_made_by_an_earlier_attempt_stores_its_results_alone() {
    let mut store = Store::default();
    let mut node = pooled_claimed(&mut store);
    // An earlier attempt of the write made the requests, and its answer was lost.
    let made = format!("{BASE}/control/triggers/{}", item_requests()[1]);
    store.put(made, b"{}".to_vec());
    end(&mut node, &mut store, 100, "p", ended(true));
    for item in 0..3 {
        let result = format!("{BASE}/tasks/p@{item}/result");
        assert!(store.has(&result), "{result}");
    }
    // The write without the requests: the existing one stays as it was, none is added.
    let names: Vec<String> = store
        .paths()
        .filter_map(|path| path.strip_prefix(&format!("{BASE}/control/triggers/")))
        .map(str::to_string)
        .collect();
    assert_eq!(names, [item_requests()[1].clone()]);
}

#[test]
fn a_failed_pooled_run_requests_no_chained_run() {
    let mut store = Store::default();
    let mut node = pooled_claimed(&mut store);
    end(&mut node, &mut store, 100, "p", ended(false));
    assert!(triggers(&store).is_empty());
}

/// Seed 4070 of the simulation: a stranger changed the epoch of `t01`, a chained child whose
/// schedule gave it no scheduled claim for a while. Its chained run's claim failed on the
/// epoch, was answered "not leader", and was sent again with the same epoch for ever, the
/// lease kept. A request's claim refused on the lease or epoch now asks whose the lease is,
/// as a scheduled claim does: the node gives it up, takes it again, and claims the request.
#[test]
fn a_requests_claim_refused_on_a_changed_epoch_takes_the_lease_again_and_claims() {
    let mut store = Store::default();
    let name = "t@after-p@1767225600";
    let path = format!("{BASE}/control/triggers/{name}");
    let pending = serde_json::to_vec(&pending_trigger("t", tick())).unwrap();
    store.put(path.clone(), pending);
    let (mut node, _) = started(&mut store, vec![spec("t", "")]);
    // A stranger's write to the epoch: the version this node's take set is gone.
    let epoch = format!("{BASE}/tasks/t/epoch");
    store.stat_mut(&epoch).version += 7;
    let trigger = Trigger {
        fire_id: name.into(),
        requested_at: tick(),
    };
    let claim = || Request::ClaimManual {
        task: "t".into(),
        trigger: trigger.clone(),
    };
    let refused = ask_at(&mut node, &mut store, at(100), claim());
    assert_eq!(refused, Answered::Claim(ClaimOutcome::NotLeader));
    // The node gives the lease up and takes it again (its timers run as the driver's do).
    for ms in (200..5_000).step_by(100) {
        pump(&mut node, &mut store, at(ms));
    }
    assert!(node.leadership().tasks.iter().any(|t| &**t == "t"));
    let claimed = ask_at(&mut node, &mut store, at(5_000), claim());
    assert_eq!(claimed, Answered::Claim(ClaimOutcome::Claimed));
    let running: TriggerRecord = serde_json::from_slice(store.data(&path)).unwrap();
    assert_eq!(running.state, crate::coord::records::TriggerState::Running);
}
