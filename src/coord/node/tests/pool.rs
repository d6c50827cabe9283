//! A pooled task's units: the node takes the units of the items it owns under the pool's
//! assignment, releases those a joining member comes to own (and all of them when drained),
//! publishes the task while it holds one, and claims and ends a tick over the units it holds.

use std::collections::BTreeMap;

use super::super::Node;
use super::super::io::{Answered, Input, Request, Stat, WatchKind};
use super::super::test_fixtures::{
    BASE, Store, TICK, ask_at, at, history_fire_ids, leases, manual_run_claimed_and_ended, mark,
    member, pump, spec, started, tick,
};
use crate::coord::lease;
use crate::coord::records::ResultRecord;
use crate::coord::records::{FireRecord, HistoryRecord};
use crate::coord::{ClaimIntent, ClaimOutcome, RunResult};

/// The units of `p` among the leases in `store`.
fn pool_leases(store: &Store) -> Vec<String> {
    leases(store)
        .into_iter()
        .filter(|l| l.starts_with("p@"))
        .collect()
}

#[test]
fn a_lone_node_takes_every_items_unit_and_publishes_the_pooled_task() {
    let mut store = Store::default();
    let tasks = vec![spec("p", "work_items = 4"), spec("t", "")];
    let (node, _) = started(&mut store, tasks);
    assert_eq!(leases(&store), ["p@0", "p@1", "p@2", "p@3", "t"]);
    for item in 0..4 {
        let epoch = format!("{BASE}/tasks/p@{item}/epoch");
        assert!(store.has(&epoch), "{epoch}");
    }
    assert!(!store.has(format!("{BASE}/leases/p")));
    let published: Vec<&str> = node.leadership().tasks.iter().map(|t| &**t).collect();
    assert_eq!(published, ["p", "t"]);
    assert!(node.leadership().may_fire("p"));
}

#[test]
fn a_joining_member_gets_the_units_it_owns_and_the_node_keeps_the_rest() {
    let mut store = Store::default();
    let tasks = vec![spec("p", "work_items = 12")];
    let n2 = member("n2", "1.0.0", &tasks, &[]);
    let (mut node, _) = started(&mut store, tasks);
    assert_eq!(pool_leases(&store).len(), 12);
    node.view.members.insert("n2".into(), n2);
    node.decide();
    pump(&mut node, &mut store, at(1_000));
    let members: Vec<lease::Member> = node
        .view
        .members
        .values()
        .map(|m| m.member.clone())
        .collect();
    let owned: Vec<String> = (0..12)
        .map(|item| format!("p@{item}"))
        .filter(|unit| lease::position(unit, "n1", &members) == Some(0))
        .collect();
    assert!(!owned.is_empty() && owned.len() < 12, "{owned:?}");
    let mut kept = pool_leases(&store);
    kept.sort();
    let mut owned_sorted = owned.clone();
    owned_sorted.sort();
    assert_eq!(kept, owned_sorted);
    // The released units stay vacant for n2, whose they are: n1 does not cover them at once.
    pump(&mut node, &mut store, at(1_500));
    assert_eq!(pool_leases(&store).len(), owned.len());
}

#[test]
fn the_node_publishes_how_many_units_of_each_pooled_task_it_holds() {
    let mut store = Store::default();
    let tasks = vec![spec("p", "work_items = 12"), spec("t", "")];
    let n2 = member("n2", "1.0.0", &tasks, &[]);
    let (mut node, _) = started(&mut store, tasks);
    let held = |node: &Node| (*node.leadership().items_held).clone();
    assert_eq!(held(&node), BTreeMap::from([("p".to_string(), 12)]));
    // A joining member takes its items: the count follows the units kept.
    node.view.members.insert("n2".into(), n2);
    node.decide();
    pump(&mut node, &mut store, at(1_000));
    pump(&mut node, &mut store, at(1_500));
    let kept = pool_leases(&store).len();
    assert!(kept < 12, "{kept}");
    assert_eq!(held(&node), BTreeMap::from([("p".to_string(), kept)]));
}

#[test]
fn a_drained_node_releases_every_unit_of_its_pool() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("p", "work_items = 3")]);
    assert_eq!(pool_leases(&store), ["p@0", "p@1", "p@2"]);
    let drain = format!("{BASE}/control/drained/n1");
    store.put(drain.clone(), mark());
    node.handle(
        Input::Watch {
            path: drain,
            kind: WatchKind::Created,
        },
        at(200),
    );
    pump(&mut node, &mut store, at(200));
    assert!(store.member("n1").drained);
    assert!(pool_leases(&store).is_empty(), "{:?}", leases(&store));
}

fn claim(intent: ClaimIntent) -> Request {
    Request::Claim {
        task: "p".into(),
        tick: tick(),
        intent,
        ticks: Vec::new(),
    }
}

fn record_of(store: &Store, unit: &str) -> FireRecord {
    serde_json::from_slice(store.data(format!("{BASE}/tasks/{unit}"))).unwrap()
}

/// Another client moved `unit`'s fire record to `tick` (a resume, another owner's claim):
/// its version is one more than the node last saw.
fn record_moved(store: &mut Store, unit: &str, tick: chrono::DateTime<chrono::Utc>, node: &str) {
    let path = format!("{BASE}/tasks/{unit}");
    let mut moved = FireRecord::empty();
    moved.tick = Some(tick);
    moved.node = node.into();
    let version = store.stat(&path).version;
    let stat = Stat {
        version: version + 1,
        ..Stat::default()
    };
    store.put_with(path, serde_json::to_vec(&moved).unwrap(), stat);
}

#[test]
fn a_pooled_tick_is_claimed_over_the_held_units_in_one_multi_and_ended_per_unit() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("p", "work_items = 3")]);
    let answer = ask_at(&mut node, &mut store, at(100), claim(ClaimIntent::Run));
    assert_eq!(
        answer,
        Answered::ClaimedItems(vec!["0".into(), "1".into(), "2".into()])
    );
    for item in 0..3 {
        let unit = format!("p@{item}");
        assert_eq!(record_of(&store, &unit).tick, Some(tick()));
        let run = format!("{BASE}/tasks/{unit}/run-{TICK}");
        assert_eq!(store.stat(&run).ephemeral_owner, 1, "{run}");
    }
    // The same tick again: every unit covers it.
    let again = ask_at(&mut node, &mut store, at(200), claim(ClaimIntent::Run));
    assert_eq!(
        again,
        Answered::Claim(ClaimOutcome::AlreadyClaimed { record: tick() })
    );
    let last = ask_at(
        &mut node,
        &mut store,
        at(250),
        Request::LastClaimed { task: "p".into() },
    );
    assert_eq!(last, Answered::Tick(Some(tick())));
    let result = RunResult {
        tick: tick(),
        node: "n1".into(),
        exit: "exit code 0".into(),
        success: true,
        ..RunResult::default()
    };
    let ended = Request::RunEnded {
        task: "p".into(),
        result,
    };
    assert_eq!(
        ask_at(&mut node, &mut store, at(300), ended),
        Answered::Done
    );
    for item in 0..3 {
        let unit = format!("{BASE}/tasks/p@{item}");
        assert!(!store.has(format!("{unit}/run-{TICK}")));
        assert!(store.has(format!("{unit}/result")), "{unit}");
    }
    // One history entry for the node's run, naming its items, in its first item's unit.
    let (data, _) = store.znode(format!("{BASE}/tasks/p@0/history"));
    let history: HistoryRecord = serde_json::from_slice(data).unwrap();
    assert_eq!(history.runs.len(), 1);
    assert_eq!(history.runs[0].fire_id, format!("p@{TICK}"));
    assert_eq!(
        history.runs[0].items.as_deref(),
        Some(&["0".to_string(), "1".into(), "2".into()][..])
    );
    assert!(!store.has(format!("{BASE}/tasks/p@1/history")));
}

#[test]
fn a_unit_whose_record_covers_the_tick_is_left_out_of_the_claim() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("p", "work_items = 3")]);
    // Another node claimed item 1's tick before the item moved here.
    let path = format!("{BASE}/tasks/p@1");
    record_moved(&mut store, "p@1", tick(), "n2");
    node.forget_record("p@1");
    let answer = ask_at(&mut node, &mut store, at(100), claim(ClaimIntent::Run));
    assert_eq!(answer, Answered::ClaimedItems(vec!["0".into(), "2".into()]));
    assert_eq!(record_of(&store, "p@1").node, "n2");
    assert!(!store.has(format!("{path}/run-{TICK}")));
}

/// Seed 439 of the pooled simulation: a resume moved every unit's record (four items, more
/// than a claim's conflicts allowed in all), so the claim conflicted once on each unit in
/// turn; the fourth unit was left out and its tick never claimed. Conflicts count per unit:
/// each unit is read again and claimed.
#[test]
fn a_pooled_claim_after_a_resume_moved_every_units_record_claims_every_unit() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("p", "work_items = 4")]);
    for item in 0..4 {
        let resumed = tick() - chrono::TimeDelta::seconds(10);
        record_moved(&mut store, &format!("p@{item}"), resumed, "");
    }
    let answer = ask_at(&mut node, &mut store, at(100), claim(ClaimIntent::Run));
    let every: Vec<String> = (0..4).map(|item| item.to_string()).collect();
    assert_eq!(answer, Answered::ClaimedItems(every));
    for item in 0..4 {
        assert_eq!(record_of(&store, &format!("p@{item}")).tick, Some(tick()));
    }
}

/// Seed 505 of the pooled simulation: the daemon asked for tick 15 from a fire record read
/// over unit 0 (record 10); unit 1, gained meanwhile with record 5, was claimed at 15 with
/// the rest, and its tick 10 was never claimed. A unit gained since the daemon last read the
/// record is left out of the daemon's claims until it reads the record again (its gain makes
/// it do so); then the oldest record plans the unit's missed tick first.
#[test]
fn a_unit_gained_after_the_daemon_read_the_record_is_claimed_from_its_own_record() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("p", "work_items = 3")]);
    let earlier = tick() - chrono::TimeDelta::seconds(60);
    let behind = earlier - chrono::TimeDelta::seconds(60);
    record_moved(&mut store, "p@1", behind, "");
    node.forget_record("p@1");
    // Unit 1 is new to the daemon's plan: taken since its last read.
    node.tasks.state_mut("p@1").planned = None;

    let answer = ask_at(&mut node, &mut store, at(100), claim(ClaimIntent::Run));
    assert_eq!(answer, Answered::ClaimedItems(vec!["0".into(), "2".into()]));
    assert_eq!(record_of(&store, "p@1").tick, Some(behind));

    // The daemon reads the record again: the oldest, unit 1's, plans its missed tick.
    let read = Request::LastClaimed { task: "p".into() };
    let last = ask_at(&mut node, &mut store, at(200), read);
    assert_eq!(last, Answered::Tick(Some(behind)));
    let missed = Request::Claim {
        task: "p".into(),
        tick: earlier,
        intent: ClaimIntent::Run,
        ticks: Vec::new(),
    };
    let answer = ask_at(&mut node, &mut store, at(300), missed);
    assert_eq!(answer, Answered::ClaimedItems(vec!["1".into()]));
    let again = ask_at(&mut node, &mut store, at(400), claim(ClaimIntent::Run));
    assert_eq!(again, Answered::ClaimedItems(vec!["1".into()]));
}

#[test]
fn a_unit_whose_lease_another_session_holds_is_fenced_out_of_the_claim() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("p", "work_items = 2")]);
    // Item 0's lease is now another session's (the node has not seen it go).
    let lease = format!("{BASE}/leases/p@0");
    store.remove(&lease);
    store.session = Some(2);
    store.put_with(
        lease,
        b"{}".to_vec(),
        Stat {
            ephemeral_owner: 2,
            ..Stat::default()
        },
    );
    store.session = None;
    // Its take bumped the epoch.
    let epoch = format!("{BASE}/tasks/p@0/epoch");
    store.stat_mut(&epoch).version += 1;
    let answer = ask_at(&mut node, &mut store, at(100), claim(ClaimIntent::Run));
    assert_eq!(answer, Answered::ClaimedItems(vec!["1".into()]));
    assert!(node.tasks.held("p@0").is_none());
    assert_eq!(record_of(&store, "p@0").tick, None);
    assert!(!store.has(format!("{BASE}/tasks/p@0/run-{TICK}")));
}

#[test]
fn the_fire_record_of_a_pooled_task_is_the_oldest_of_its_held_units() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("p", "work_items = 3")]);
    let answer = ask_at(&mut node, &mut store, at(100), claim(ClaimIntent::Run));
    assert!(matches!(answer, Answered::ClaimedItems(_)), "{answer:?}");
    // Item 1's record is behind (its unit came from a node that stopped claiming).
    let path = format!("{BASE}/tasks/p@1");
    let mut behind = FireRecord::empty();
    behind.tick = Some(tick() - chrono::TimeDelta::seconds(3));
    let version = store.stat(&path).version;
    store.put_with(
        path,
        serde_json::to_vec(&behind).unwrap(),
        Stat {
            version: version + 1,
            ..Stat::default()
        },
    );
    node.forget_record("p@1");
    let last = ask_at(
        &mut node,
        &mut store,
        at(200),
        Request::LastClaimed { task: "p".into() },
    );
    assert_eq!(last, Answered::Tick(behind.tick));
}

/// Writes over `p@1`'s record a tick claimed to run by session 9, gone with no result and no
/// run znode, with `runs` counted.
fn lose_item_1(store: &mut Store, runs: u64) {
    let path = format!("{BASE}/tasks/p@1");
    let mut lost = FireRecord::empty();
    lost.tick = Some(tick());
    lost.node = "n9".into();
    lost.session = "9".into();
    lost.run = true;
    lost.runs = runs;
    let version = store.stat(&path).version;
    store.put_with(
        path,
        serde_json::to_vec(&lost).unwrap(),
        Stat {
            version: version + 1,
            ..Stat::default()
        },
    );
}

/// A review found a rerun (`on_node_loss = "rerun"`) counted against `max_runs` on ZooKeeper,
/// not on the embedded backend: it is the same tick, counted when it was first claimed.
#[test]
fn a_rerun_of_a_run_lost_with_its_node_is_not_counted_against_max_runs() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("p", "work_items = 2\nmax_runs = 3")]);
    lose_item_1(&mut store, 1);
    node.forget_record("p@1");
    let orphan = Request::OrphanedTick { task: "p".into() };
    let answer = ask_at(&mut node, &mut store, at(100), orphan);
    assert_eq!(answer, Answered::Tick(Some(tick())));
    let reclaim = Request::Reclaim {
        task: "p".into(),
        tick: tick(),
    };
    let answer = ask_at(&mut node, &mut store, at(200), reclaim);
    assert_eq!(answer, Answered::ClaimedItems(vec!["1".into()]));
    let record = record_of(&store, "p@1");
    assert_eq!((record.reruns, record.runs), (1, 1));
}

#[test]
fn a_units_run_lost_with_its_node_is_found_and_rerun_once_over_that_unit() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("p", "work_items = 2")]);
    // Item 1's tick was claimed to run by session 9, gone with no result and no run znode.
    lose_item_1(&mut store, 0);
    node.forget_record("p@1");
    let orphan = Request::OrphanedTick { task: "p".into() };
    let answer = ask_at(&mut node, &mut store, at(100), orphan);
    assert_eq!(answer, Answered::Tick(Some(tick())));
    let reclaim = || Request::Reclaim {
        task: "p".into(),
        tick: tick(),
    };
    let answer = ask_at(&mut node, &mut store, at(200), reclaim());
    assert_eq!(answer, Answered::ClaimedItems(vec!["1".into()]));
    let record = record_of(&store, "p@1");
    assert_eq!((record.node.as_str(), record.reruns), ("n1", 1));
    assert!(store.has(format!("{BASE}/tasks/p@1/run-{TICK}")));
    // Item 0 ran nothing of that tick; and the rerun is not done twice.
    assert!(!store.has(format!("{BASE}/tasks/p@0/run-{TICK}")));
    let again = ask_at(&mut node, &mut store, at(300), reclaim());
    assert!(
        matches!(again, Answered::Claim(ClaimOutcome::AlreadyClaimed { .. })),
        "{again:?}"
    );
}

/// Regression: a unit taken again kept the record cached while this node held it before, so
/// the task's fire record (the oldest of the held units') looked newer than it was and the
/// ticks another owner missed were not caught up.
#[test]
fn a_unit_taken_again_forgets_the_record_it_cached_when_it_held_it_before() {
    let mut store = Store::default();
    let tasks = vec![spec("p", "work_items = 12")];
    let n2 = member("n2", "1.0.0", &tasks, &[]);
    let (mut node, _) = started(&mut store, tasks);
    let answer = ask_at(&mut node, &mut store, at(100), claim(ClaimIntent::Run));
    assert!(matches!(answer, Answered::ClaimedItems(_)), "{answer:?}");
    // n2 joins and gets its units; it claims one tick behind this node's on one of them.
    node.view.members.insert("n2".into(), n2);
    node.decide();
    pump(&mut node, &mut store, at(1_000));
    let kept = pool_leases(&store);
    let moved = (0..12)
        .map(|item| format!("p@{item}"))
        .find(|unit| !kept.contains(unit))
        .expect("a unit moved to n2");
    let path = format!("{BASE}/tasks/{moved}");
    let mut behind = FireRecord::empty();
    behind.tick = Some(tick() - chrono::TimeDelta::seconds(5));
    behind.node = "n2".into();
    let version = store.stat(&path).version;
    let stat = Stat {
        version: version + 1,
        ..Stat::default()
    };
    store.put_with(path, serde_json::to_vec(&behind).unwrap(), stat);
    // n2 leaves: its units come back here.
    node.view.members.remove("n2");
    node.decide();
    pump(&mut node, &mut store, at(2_000));
    assert_eq!(pool_leases(&store).len(), 12);
    let last = ask_at(
        &mut node,
        &mut store,
        at(2_100),
        Request::LastClaimed { task: "p".into() },
    );
    assert_eq!(last, Answered::Tick(behind.tick));
}

#[test]
fn a_manual_run_of_a_pooled_task_is_claimed_fenced_on_a_held_unit_and_kept_in_its_history() {
    let (store, name) = manual_run_claimed_and_ended("p", "work_items = 2");
    assert_eq!(history_fire_ids(&store, "p@0"), [name]);
}

#[test]
fn a_pooled_runs_end_leaves_a_newer_result_of_another_owner_in_place() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("p", "work_items = 2")]);
    let answer = ask_at(&mut node, &mut store, at(100), claim(ClaimIntent::Run));
    assert_eq!(answer, Answered::ClaimedItems(vec!["0".into(), "1".into()]));
    // Item 1 moved meanwhile and its new owner stored a later tick's result.
    let later = RunResult {
        tick: tick() + chrono::TimeDelta::seconds(1),
        node: "n2".into(),
        exit: "exit code 0".into(),
        success: true,
        ..RunResult::default()
    };
    let stored = ResultRecord {
        format: 1,
        result: later.clone(),
    };
    store.put(
        format!("{BASE}/tasks/p@1/result"),
        serde_json::to_vec(&stored).unwrap(),
    );
    let result = RunResult {
        tick: tick(),
        node: "n1".into(),
        exit: "exit code 1".into(),
        ..RunResult::default()
    };
    let ended = Request::RunEnded {
        task: "p".into(),
        result,
    };
    assert_eq!(
        ask_at(&mut node, &mut store, at(200), ended),
        Answered::Done
    );
    let read = |unit: &str| -> RunResult {
        let (data, _) = store.znode(format!("{BASE}/tasks/{unit}/result"));
        serde_json::from_slice::<ResultRecord>(data).unwrap().result
    };
    assert_eq!(
        (read("p@0").tick, read("p@0").node.as_str()),
        (tick(), "n1")
    );
    assert_eq!(
        (read("p@1").tick, read("p@1").node.as_str()),
        (later.tick, "n2")
    );
    for item in 0..2 {
        let run = format!("{BASE}/tasks/p@{item}/run-{TICK}");
        assert!(!store.has(&run), "{run}");
    }
}

#[test]
fn a_backfill_tick_of_a_pooled_task_is_claimed_fenced_on_a_held_unit() {
    use crate::coord::backfill::{self, BackfillRecord};
    let mut store = Store::default();
    let name = "p@backfill-0000000001";
    let from = tick() - chrono::TimeDelta::seconds(600);
    let request = BackfillRecord::new("p", from, tick(), 10, "op@host", from);
    let path = format!("{BASE}/control/backfills/{name}");
    store.put(path.clone(), serde_json::to_vec(&request).unwrap());
    let (mut node, _) = started(&mut store, vec![spec("p", "work_items = 2")]);
    assert_eq!(node.leadership().backfills["p"][0].name, name);
    let historic = from + chrono::TimeDelta::seconds(60);
    let claim = Request::ClaimManual {
        task: "p".into(),
        trigger: crate::coord::Trigger {
            fire_id: backfill::fire_id(name, historic),
            requested_at: historic,
        },
    };
    let answer = ask_at(&mut node, &mut store, at(100), claim);
    assert_eq!(answer, Answered::Claim(ClaimOutcome::Claimed));
    let moved: BackfillRecord = serde_json::from_slice(store.data(&path)).unwrap();
    assert_eq!(moved.claimed, 1);
    assert!(moved.running.is_some(), "{moved:?}");
}

#[test]
fn a_pooled_runs_failure_pauses_its_task_with_the_units_results_and_keeps_a_mark_already_there() {
    use crate::coord::records::MarkRecord;
    let paused = format!("{BASE}/control/paused/p");
    let mark = |by: &str| MarkRecord {
        format: 1,
        at: tick(),
        by: by.into(),
        reason: Some(format!("{by}'s reason")),
    };
    for already in [false, true] {
        let mut store = Store::default();
        let (mut node, _) = started(&mut store, vec![spec("p", "work_items = 2")]);
        let answer = ask_at(&mut node, &mut store, at(100), claim(ClaimIntent::Run));
        assert_eq!(answer, Answered::ClaimedItems(vec!["0".into(), "1".into()]));
        if already {
            let data = serde_json::to_vec(&mark("ops@host")).unwrap();
            store.put(paused.clone(), data);
        }
        let result = RunResult {
            tick: tick(),
            node: "n1".into(),
            exit: "exit code 2".into(),
            pause: Some(Box::new(mark("zkcron@n1"))),
            ..RunResult::default()
        };
        let ended = Request::RunEnded {
            task: "p".into(),
            result,
        };
        let answer = ask_at(&mut node, &mut store, at(300), ended);
        assert_eq!(answer, Answered::Done, "already paused: {already}");
        for item in 0..2 {
            let result = format!("{BASE}/tasks/p@{item}/result");
            assert!(store.has(&result), "{result}");
        }
        let (data, _) = store.znode(&paused);
        let stored: MarkRecord = serde_json::from_slice(data).unwrap();
        let by = if already { "ops@host" } else { "zkcron@n1" };
        assert_eq!(stored, mark(by));
    }
}
