//! A task that runs on every node: the node takes its own unit of it, serves the daemon's
//! requests for the task on that unit, and publishes the task as one it may fire.

use super::super::io::Request;
use super::super::test_fixtures::{
    BASE, Store, TICK, ask_at, at, history_fire_ids, leases, manual_run_claimed_and_ended, member,
    pump, spec, started, tick,
};
use crate::coord::node::io::Answered;
use crate::coord::records::{FireRecord, HistoryRecord, RunRecord, TriggerRecord, TriggerState};
use crate::coord::{ClaimIntent, ClaimOutcome, RunResult};

#[test]
fn an_every_node_task_is_claimed_run_and_ended_on_this_nodes_unit() {
    let mut store = Store::default();
    let tasks = vec![spec("e", "run_on = \"every_node\""), spec("t", "")];
    let (mut node, _) = started(&mut store, tasks);
    assert_eq!(leases(&store), ["e@n1", "t"]);
    let leadership = node.leadership().clone();
    assert_eq!(
        leadership.tasks.iter().map(|t| &**t).collect::<Vec<_>>(),
        ["e", "t"]
    );
    assert!(leadership.may_fire("e"));
    let claim = Request::Claim {
        task: "e".into(),
        tick: tick(),
        intent: ClaimIntent::Run,
        ticks: Vec::new(),
    };
    let answer = ask_at(&mut node, &mut store, at(100), claim);
    assert_eq!(answer, Answered::Claim(ClaimOutcome::Claimed));
    let (data, _) = store.znode(format!("{BASE}/tasks/e@n1"));
    let record: FireRecord = serde_json::from_slice(data).unwrap();
    assert_eq!((record.tick, record.node.as_str()), (Some(tick()), "n1"));
    let run = format!("{BASE}/tasks/e@n1/run-{TICK}");
    let (data, stat) = store.znode(&run);
    serde_json::from_slice::<RunRecord>(data).unwrap();
    assert_eq!(stat.ephemeral_owner, 1);
    assert!(!store.has(format!("{BASE}/tasks/e")));
    // The same tick again is this node's unit's, already claimed.
    let again = Request::Claim {
        task: "e".into(),
        tick: tick(),
        intent: ClaimIntent::Run,
        ticks: Vec::new(),
    };
    let answer = ask_at(&mut node, &mut store, at(200), again);
    assert!(
        matches!(answer, Answered::Claim(ClaimOutcome::AlreadyClaimed { .. })),
        "{answer:?}"
    );
    let last = Request::LastClaimed { task: "e".into() };
    let answer = ask_at(&mut node, &mut store, at(300), last);
    assert_eq!(answer, Answered::Tick(Some(tick())));
    let result = RunResult {
        tick: tick(),
        node: "n1".into(),
        exit: "exit code 0".into(),
        success: true,
        ..RunResult::default()
    };
    let ended = Request::RunEnded {
        task: "e".into(),
        result,
    };
    let answer = ask_at(&mut node, &mut store, at(400), ended);
    assert_eq!(answer, Answered::Done);
    assert!(!store.has(&run));
    assert!(store.has(format!("{BASE}/tasks/e@n1/result")));
    // The unit's history holds the run under the task's fire id.
    let (data, _) = store.znode(format!("{BASE}/tasks/e@n1/history"));
    let history: HistoryRecord = serde_json::from_slice(data).unwrap();
    let ids: Vec<&str> = history.runs.iter().map(|r| r.fire_id.as_str()).collect();
    assert_eq!(ids, [format!("e@{TICK}")]);
}

#[test]
fn another_nodes_unit_is_never_taken_and_a_vacant_one_never_covered() {
    let mut store = Store::default();
    // n2 defines the same task: its unit is vacant, and stays n2's to take.
    let tasks = vec![spec("e", "run_on = \"every_node\"")];
    let n2 = member("n2", "1.0.0", &tasks, &[]);
    assert!(n2.member.eligible("e@n2") && !n2.member.eligible("e@n1"));
    let (mut node, _) = started(&mut store, tasks);
    node.view.members.insert("n2".into(), n2);
    node.decide();
    for ms in [1_000, 60_000, 600_000] {
        pump(&mut node, &mut store, at(ms));
        assert_eq!(leases(&store), ["e@n1"], "at {ms} ms");
    }
    // A claim of the task is this node's unit's, whatever n2 does.
    store.session = Some(2);
    store.put(format!("{BASE}/leases/e@n2"), b"{}".to_vec());
    store.session = None;
    let claim = Request::Claim {
        task: "e".into(),
        tick: tick(),
        intent: ClaimIntent::Run,
        ticks: Vec::new(),
    };
    let answer = ask_at(&mut node, &mut store, at(600_100), claim);
    assert_eq!(answer, Answered::Claim(ClaimOutcome::Claimed));
    assert!(store.has(format!("{BASE}/tasks/e@n1/run-{TICK}")));
    assert!(!store.has(format!("{BASE}/tasks/e@n2")));
}

#[test]
fn a_manual_run_of_an_every_node_task_is_claimed_on_the_unit_and_kept_in_its_history() {
    let (store, name) = manual_run_claimed_and_ended("e", "run_on = \"every_node\"");
    assert_eq!(
        history_fire_ids(&store, "e@n1"),
        std::slice::from_ref(&name)
    );
    let path = format!("{BASE}/control/triggers/{name}");
    let ended: TriggerRecord = serde_json::from_slice(store.data(&path)).unwrap();
    assert_eq!(ended.state, TriggerState::Ended);
}
