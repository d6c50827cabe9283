//! A run's end and the claim of the tick queued behind it (`overlap = "queue"`): one multi-op
//! when the claim comes within the wait, each alone otherwise, and a failure of the combined
//! one handled as each alone.

use chrono::DateTime;

use std::collections::BTreeMap;

use super::super::Node;
use super::super::io::{Request, ZkFail, ZkOp};
use super::super::test_fixtures::{
    BASE, Served, Store, TICK, Timers, at, request, serve_with, spec, started,
};
use crate::coord::node::io::Answered;
use crate::coord::node::queued_start::QUEUED_CLAIM_WAIT;
use crate::coord::records::{FireRecord, ResultRecord};
use crate::coord::{ClaimIntent, ClaimOutcome, RunResult};

fn tick(n: i64) -> DateTime<chrono::Utc> {
    DateTime::from_timestamp(TICK + n, 0).unwrap()
}

impl Served {
    /// The multi-ops among the calls.
    fn multis(&self) -> Vec<&Vec<ZkOp>> {
        self.calls
            .iter()
            .filter_map(|zk| match zk {
                ZkOp::Multi(ops) => Some(ops),
                _ => None,
            })
            .collect()
    }
}

fn claim(tick: DateTime<chrono::Utc>, intent: ClaimIntent) -> Request {
    Request::Claim {
        task: "t".into(),
        tick,
        intent,
        ticks: Vec::new(),
    }
}

fn ended(tick: DateTime<chrono::Utc>) -> Request {
    Request::RunEnded {
        task: "t".into(),
        result: RunResult {
            tick,
            node: "n1".into(),
            exit: "exit code 0".into(),
            success: true,
            attempts: 1,
            finished_at: tick,
            ..RunResult::default()
        },
    }
}

fn claimed(served: &Served, req: u64) -> bool {
    matches!(
        served.answers.get(&req),
        Some(Ok(Answered::Claim(ClaimOutcome::Claimed)))
    )
}

fn done(served: &Served, req: u64) -> bool {
    matches!(served.answers.get(&req), Some(Ok(Answered::Done)))
}

use super::super::test_fixtures::serve_requests as serve;

/// Whether `zk` is a result and claim in one multi-op (six ops).
fn combined(zk: &ZkOp) -> bool {
    matches!(zk, ZkOp::Multi(ops) if ops.len() == 6)
}

/// Node n1 leading an `overlap = "queue"` task `t` whose result it has written once (tick 0),
/// with tick 1 running and tick 2 queued behind it, and no run of `t` elsewhere (counted).
fn queued_behind_a_run(store: &mut Store) -> Node {
    let (mut node, _) = started(store, vec![spec("t", "overlap = \"queue\"")]);
    let served = serve(
        &mut node,
        store,
        100,
        vec![(1, claim(tick(0), ClaimIntent::Run))],
    );
    assert!(claimed(&served, 1), "{:?}", served.answers);
    let served = serve(&mut node, store, 110, vec![(2, ended(tick(0)))]);
    assert!(done(&served, 2), "{:?}", served.answers);
    let steps = [
        (3, claim(tick(1), ClaimIntent::Run)),
        (4, claim(tick(2), ClaimIntent::Queue)),
        (5, Request::RunsElsewhere { task: "t".into() }),
    ];
    for (req, request) in steps {
        let served = serve(&mut node, store, 120, vec![(req, request)]);
        assert!(
            served.answers.contains_key(&req),
            "{req}: {:?}",
            served.calls
        );
    }
    node
}

fn path(name: &str) -> String {
    format!("{BASE}/tasks/t{name}")
}

fn record(store: &Store) -> FireRecord {
    serde_json::from_slice(store.data(path(""))).unwrap()
}

fn stored_result(store: &Store) -> DateTime<chrono::Utc> {
    let data = &store.data(path("/result"));
    serde_json::from_slice::<ResultRecord>(data)
        .unwrap()
        .result
        .tick
}

#[test]
fn a_runs_end_and_the_claim_of_the_tick_queued_behind_it_are_one_multi() {
    let mut store = Store::default();
    let mut node = queued_behind_a_run(&mut store);
    assert_eq!(record(&store).queued, Some(tick(2)));

    // The run of tick 1 ends: its result is held for the queued claim.
    let served = serve(&mut node, &mut store, 200, vec![(6, ended(tick(1)))]);
    assert!(served.calls.is_empty(), "{:?}", served.calls);
    assert!(served.answers.is_empty(), "{:?}", served.answers);

    // The queued tick's claim comes: result and claim go in one multi-op, the result's ops
    // first, then the claim's fenced ops in their order.
    let queued = claim(tick(2), ClaimIntent::RunQueued);
    let served = serve(&mut node, &mut store, 210, vec![(7, queued)]);
    let [ops] = served.multis()[..] else {
        panic!("one multi-op: {:?}", served.calls);
    };
    let run_1 = path(&format!("/run-{}", TICK + 1));
    let run_2 = path(&format!("/run-{}", TICK + 2));
    let shape: Vec<(&str, &str)> = ops
        .iter()
        .map(|op| match op {
            ZkOp::Delete { path, .. } => ("delete", path.as_str()),
            ZkOp::SetData { path, .. } => ("set", path.as_str()),
            ZkOp::Check { path, .. } => ("check", path.as_str()),
            ZkOp::Create { path, .. } => ("create", path.as_str()),
            _ => ("other", ""),
        })
        .collect();
    let (lease, epoch) = (format!("{BASE}/leases/t"), path("/epoch"));
    let (result, fire) = (path("/result"), path(""));
    assert_eq!(
        shape,
        [
            ("delete", run_1.as_str()),
            ("set", result.as_str()),
            ("check", lease.as_str()),
            ("check", epoch.as_str()),
            ("set", fire.as_str()),
            ("create", run_2.as_str()),
        ]
    );
    assert!(claimed(&served, 7), "{:?}", served.answers);
    assert!(done(&served, 6), "{:?}", served.answers);
    assert_eq!(stored_result(&store), tick(1));
    assert_eq!(record(&store).queued, None);
    assert!(!store.has(&run_1));
    assert!(store.has(&run_2));
}

#[test]
fn a_result_held_for_a_queued_claim_that_does_not_come_is_written_alone_after_the_wait() {
    let mut store = Store::default();
    let mut node = queued_behind_a_run(&mut store);
    let served = serve(&mut node, &mut store, 200, vec![(6, ended(tick(1)))]);
    assert!(served.calls.is_empty(), "{:?}", served.calls);

    let wait = QUEUED_CLAIM_WAIT.as_millis() as u64;
    let served = serve(&mut node, &mut store, 200 + wait - 1, vec![]);
    assert!(
        served.calls.is_empty(),
        "written before the wait: {:?}",
        served.calls
    );
    let served = serve(&mut node, &mut store, 200 + wait, vec![]);
    assert_eq!(served.multis().len(), 1, "{:?}", served.calls);
    assert!(done(&served, 6), "{:?}", served.answers);
    assert_eq!(stored_result(&store), tick(1));
    // The queued tick still waits, claimed alone when its claim comes.
    assert_eq!(record(&store).queued, Some(tick(2)));
    let queued = claim(tick(2), ClaimIntent::RunQueued);
    let served = serve(&mut node, &mut store, 300, vec![(7, queued)]);
    assert!(claimed(&served, 7), "{:?}", served.answers);
}

#[test]
fn a_combined_write_refused_on_the_fire_record_writes_the_result_alone_and_claims_again() {
    // Someone rewrote the fire record since this node last read it (same content, new
    // version): the combined multi-op fails on the record's write. Nothing of it was applied:
    // the result is written alone, and the claim re-reads the record and is sent alone, as a
    // claim that conflicted is.
    let mut store = Store::default();
    let mut node = queued_behind_a_run(&mut store);
    serve(&mut node, &mut store, 200, vec![(6, ended(tick(1)))]);

    let refused = Box::new(|zk: &ZkOp, _: &mut Store| {
        combined(zk).then(|| {
            Err(ZkFail::Multi {
                index: 4,
                error: Box::new(ZkFail::BadVersion),
            })
        })
    });
    let queued = claim(tick(2), ClaimIntent::RunQueued);
    let served = serve_with(
        &mut node,
        &mut store,
        at(210),
        [request(7, queued)],
        Timers::Fire,
        refused,
    );
    let multis = served.multis();
    assert!(combined(&served.calls[0]), "{:?}", served.calls);
    assert_eq!(
        multis.len(),
        3,
        "combined, then each alone: {:?}",
        served.calls
    );
    assert!(
        served
            .calls
            .iter()
            .any(|zk| matches!(zk, ZkOp::GetData { path: p } if *p == path(""))),
        "the claim did not re-read the record: {:?}",
        served.calls
    );
    assert!(claimed(&served, 7), "{:?}", served.answers);
    assert!(done(&served, 6), "{:?}", served.answers);
    assert_eq!(stored_result(&store), tick(1));
    assert_eq!(record(&store).queued, None);
    assert!(store.has(path(&format!("/run-{}", TICK + 2))));
}

#[test]
fn a_combined_write_whose_answer_is_lost_resolves_the_claim_and_retries_the_result() {
    // The combined multi-op was applied but its answer lost: the claim is resolved by
    // re-reading the record (which it wrote: claimed), and the result's retry finds its run
    // znode gone and its result stored.
    let mut store = Store::default();
    let mut node = queued_behind_a_run(&mut store);
    serve(&mut node, &mut store, 200, vec![(6, ended(tick(1)))]);
    let lost = Box::new(|zk: &ZkOp, store: &mut Store| {
        combined(zk).then(|| {
            let _ = store.apply(zk, at(210));
            Err(ZkFail::ConnectionLoss)
        })
    });
    let queued = claim(tick(2), ClaimIntent::RunQueued);
    let served = serve_with(
        &mut node,
        &mut store,
        at(210),
        [request(7, queued)],
        Timers::Fire,
        lost,
    );
    assert!(claimed(&served, 7), "{:?}", served.answers);
    // The result's retries come after their delays.
    let mut answers = BTreeMap::new();
    for ms in [1_000, 5_000] {
        answers.extend(serve(&mut node, &mut store, ms, vec![]).answers);
    }
    assert!(
        matches!(answers.get(&6), Some(Ok(Answered::Done))),
        "{answers:?}"
    );
    assert_eq!(stored_result(&store), tick(1));
}

#[test]
fn a_failed_run_that_pauses_its_task_is_stored_at_once_and_the_queued_tick_waits() {
    let mut store = Store::default();
    let mut node = queued_behind_a_run(&mut store);
    let Request::RunEnded { task, mut result } = ended(tick(1)) else {
        unreachable!()
    };
    result.success = false;
    result.exit = "exit code 1".into();
    result.pause = Some(Box::new(crate::coord::records::MarkRecord {
        format: 1,
        at: tick(1),
        by: "zkcron@n1".into(),
        reason: Some("pause_on_failure: run t failed (exit code 1)".into()),
    }));
    let request = Request::RunEnded { task, result };
    // Not held for the queued claim: the result and the pause go at once, in one multi-op.
    let served = serve(&mut node, &mut store, 200, vec![(6, request)]);
    assert!(done(&served, 6), "{:?}", served.answers);
    let [ops] = served.multis()[..] else {
        panic!("one multi-op: {:?}", served.calls);
    };
    let paused = format!("{BASE}/control/paused/t");
    assert!(
        ops.iter()
            .any(|op| matches!(op, ZkOp::Create { path, .. } if *path == paused)),
        "{ops:?}"
    );
    assert!(store.has(&paused));
    assert_eq!(stored_result(&store), tick(1));
    // The queued tick still waits (for the resume).
    assert_eq!(record(&store).queued, Some(tick(2)));
}
