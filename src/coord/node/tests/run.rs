//! Counting the live runs of other nodes and finding orphaned ticks: which run znodes count,
//! with the node fed by the in-memory ZooKeeper of `test_fixtures.rs`.

use chrono::DateTime;

use super::super::Node;
use super::super::io::{Input, Now, Request, Stat, ZkFail, ZkOp};
use super::super::test_fixtures::{
    Answering, BASE, Store, TICK, Timers, at, request, serve_with, spec, started,
};
use super::control::lease_owner;
use super::lease::member_of_session_3;
use crate::coord::CoordError;
use crate::coord::node::io::Answered;
use crate::coord::records::FireRecord;

/// What the node did for one request.
struct Asked {
    answer: Option<Result<Answered, CoordError>>,
    /// It listed the task's children.
    listed: bool,
    said: Vec<String>,
}

/// Asks the node `request`, answering its calls from `store`; `fail_exists` fails each
/// `exists` with a lost connection.
fn ask(node: &mut Node, store: &mut Store, now: Now, request: Request, fail_exists: bool) -> Asked {
    let input = self::request(900, request);
    serve(node, store, now, input, fail_exists)
}

/// Feeds `input` to the node and answers its calls from `store`, as [`ask`] does; the answer
/// is request 900's, if it came.
fn serve(node: &mut Node, store: &mut Store, now: Now, input: Input, fail_exists: bool) -> Asked {
    let answering: Answering = Box::new(|zk, _| {
        (fail_exists && matches!(zk, ZkOp::Exists { .. })).then_some(Err(ZkFail::ConnectionLoss))
    });
    let mut served = serve_with(node, store, now, [input], Timers::Leave, answering);
    let listed = served
        .calls
        .iter()
        .any(|zk| matches!(zk, ZkOp::GetChildren { path } if path.ends_with("/tasks/t")));
    Asked {
        answer: served.answers.remove(&900),
        listed,
        said: served.said,
    }
}

/// Asks the node to count the live runs of `t` on other nodes.
fn count_runs_elsewhere(node: &mut Node, store: &mut Store, now: Now, fail_exists: bool) -> Asked {
    let request = Request::RunsElsewhere { task: "t".into() };
    ask(node, store, now, request, fail_exists)
}

/// `tasks/t/run-<TICK>`, ephemeral of session `owner`.
fn run_of_session(store: &mut Store, owner: i64) {
    let stat = Stat {
        ephemeral_owner: owner,
        czxid: 40 + owner,
        ..Stat::default()
    };
    let run = format!("{BASE}/tasks/t/run-{TICK}");
    store.put_with(run, b"{}".to_vec(), stat);
}

/// Sets `tasks/t` to name session `session` (in hex) as the claimer of `tick`, to run it or not.
fn record_names(store: &mut Store, tick: i64, session: &str, run: bool) {
    let record = FireRecord {
        tick: DateTime::from_timestamp(tick, 0),
        node: "n3".into(),
        session: session.into(),
        run,
        ..FireRecord::empty()
    };
    let path = format!("{BASE}/tasks/t");
    let mut stat = store.stat(&path);
    stat.version += 1;
    store.put_with(&path, serde_json::to_vec(&record).unwrap(), stat);
}

fn count_of(asked: &Asked) -> Option<usize> {
    match &asked.answer {
        Some(Ok(Answered::Count(n))) => Some(*n),
        _ => None,
    }
}

#[test]
fn a_run_owner_check_that_failed_does_not_make_later_counts_skip_the_listing() {
    // Simulation seed 1284: n1 listed t02's children and found n0's live run record, but the
    // check of its owner failed with the connection. The run was counted as not live, and
    // "no foreign runs" was remembered for n1's lease: every later count answered 0 without
    // listing, and n1 started a run of t02 (overlap = "skip") while n0's still went on. A
    // failed owner check now fails the count and remembers nothing.
    let mut store = Store::default();
    member_of_session_3(&mut store);
    let (mut node, _) = started(&mut store, vec![spec("t", "overlap = \"skip\"")]);
    assert_eq!(lease_owner(&store), Some(1));
    run_of_session(&mut store, 3);

    let asked = count_runs_elsewhere(&mut node, &mut store, at(100), true);
    assert!(asked.listed);
    assert!(matches!(asked.answer, Some(Err(_))), "{:?}", asked.answer);
    let asked = count_runs_elsewhere(&mut node, &mut store, at(200), false);
    assert!(
        asked.listed,
        "the count skipped the listing: {:?}",
        asked.answer
    );
    assert_eq!(count_of(&asked), Some(1), "{:?}", asked.answer);
}

#[test]
fn a_live_run_of_the_claimer_the_fire_record_names_counts_though_its_member_znode_is_gone() {
    // Simulation seeds 4201, 13165, 41113, 41156: a stranger deleted `members/` while n2 ran a
    // long run of an `overlap = "skip"` task (and skipped the ticks that came meanwhile); n5,
    // restarted since, never saw n2's session as a member, took n2's live run znode as no live
    // node's and started a second run. Only a fenced claim writes the fire record: the session
    // it names is a zkcron node's, and its ephemeral run znode shows it lives.
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "overlap = \"skip\"")]);
    assert_eq!(lease_owner(&store), Some(1));
    run_of_session(&mut store, 3);
    // Session 3 claimed the run's tick, and skipped the next one while the run went on.
    record_names(&mut store, TICK + 60, "3", false);

    let asked = count_runs_elsewhere(&mut node, &mut store, at(100), false);
    assert_eq!(
        count_of(&asked),
        Some(1),
        "{:?} {:?}",
        asked.answer,
        asked.said
    );
    assert!(asked.said.is_empty(), "{:?}", asked.said);
    // This node skips the next tick: the record names it now, and the run still counts.
    record_names(&mut store, TICK + 120, "1", false);
    let asked = count_runs_elsewhere(&mut node, &mut store, at(200), false);
    assert_eq!(
        count_of(&asked),
        Some(1),
        "{:?} {:?}",
        asked.answer,
        asked.said
    );
}

#[test]
fn a_run_of_a_session_neither_member_nor_claimer_counts_for_the_session_timeout_only() {
    // Simulation seed 41113: as above, but n4 itself had skipped ticks for n2's run and then
    // restarted, so the fire record named n4's earlier session, not n2's. An ephemeral of a
    // session neither seen as a member nor named by the record counts as live for the session
    // timeout and a margin (15 s here) from when it is first seen: a node whose member znode
    // was deleted registers again or loses its session (and the run znode) by then. After
    // that it is a stranger's: reported and ignored, so it cannot make the task skip every
    // tick.
    for session in ["3", ""] {
        let mut store = Store::default();
        let (mut node, _) = started(&mut store, vec![spec("t", "overlap = \"skip\"")]);
        record_names(&mut store, TICK, session, true);
        run_of_session(&mut store, 4);
        for now in [100, 15_000] {
            let asked = count_runs_elsewhere(&mut node, &mut store, at(now), false);
            assert_eq!(count_of(&asked), Some(1), "at {now}: {:?}", asked.answer);
            assert!(asked.said.is_empty(), "{:?}", asked.said);
        }
        let asked = count_runs_elsewhere(&mut node, &mut store, at(15_100), false);
        assert_eq!(count_of(&asked), Some(0), "{:?}", asked.answer);
        assert!(
            asked
                .said
                .iter()
                .any(|r| r.contains("ignoring the run record")
                    && r.contains(&format!("run-{TICK}"))
                    && r.contains("session 4 is no member's")),
            "{:?}",
            asked.said
        );
    }
}

#[test]
fn a_run_of_the_claimer_the_fire_record_names_is_no_orphan_though_its_member_znode_is_gone() {
    // As the count of runs elsewhere: `on_node_loss = "rerun"` would otherwise run again the
    // tick whose claimer still runs it, its member znode deleted by someone.
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "on_node_loss = \"rerun\"")]);
    record_names(&mut store, TICK, "3", true);
    let orphaned = |node: &mut Node, store: &mut Store| {
        let request = Request::OrphanedTick { task: "t".into() };
        ask(node, store, at(100), request, false).answer
    };
    let tick = DateTime::from_timestamp(TICK, 0);
    assert!(
        matches!(orphaned(&mut node, &mut store), Some(Ok(Answered::Tick(t))) if t == tick),
        "without a run znode the claimer's tick is an orphan"
    );
    run_of_session(&mut store, 3);
    let answer = orphaned(&mut node, &mut store);
    assert!(
        matches!(answer, Some(Ok(Answered::Tick(None)))),
        "{answer:?}"
    );
}

#[test]
fn a_wait_for_the_runs_elsewhere_is_answered_when_their_run_znode_is_deleted() {
    // Given n3's live run of t (a handoff: this node leads now, its queued tick waits).
    let mut store = Store::default();
    member_of_session_3(&mut store);
    let (mut node, _) = started(&mut store, vec![spec("t", "overlap = \"queue\"")]);
    run_of_session(&mut store, 3);
    let request = Request::RunsEndedElsewhere { task: "t".into() };
    let asked = ask(&mut node, &mut store, at(100), request, false);
    assert!(asked.listed);
    assert!(
        asked.answer.is_none(),
        "answered while n3's run is live: {:?}",
        asked.answer
    );
    // When the run ends (its znode deleted, which the task's watch reports)...
    let run = format!("{BASE}/tasks/t/run-{TICK}");
    store.remove(&run);
    let deleted = Input::Watch {
        path: run,
        kind: crate::coord::node::io::WatchKind::Deleted,
    };
    let asked = serve(&mut node, &mut store, at(110), deleted, false);
    // ...then the wait is answered, once the count finds no run left.
    assert!(asked.listed, "no count after the deletion");
    assert!(
        matches!(asked.answer, Some(Ok(Answered::Done))),
        "{:?}",
        asked.answer
    );
}
