//! The tick ledger in the fire record (`plan::ledger`): a claim writes the ticks not run it
//! carries in its own multi-op; a `Note` writes them alone and keeps the record's claimer; the
//! daemon's planner starts after the newest tick the record accounts for.

use chrono::DateTime;

use super::super::io::{Answered, Request};
use super::super::test_fixtures::{BASE, Served, Store, TICK, spec, started};
use crate::coord::records::FireRecord;
use crate::coord::{ClaimIntent, ClaimOutcome};
use crate::plan::ledger::{Reason, TickEntry};

fn tick(n: i64) -> DateTime<chrono::Utc> {
    DateTime::from_timestamp(TICK + n, 0).unwrap()
}

fn claim(tick: DateTime<chrono::Utc>, intent: ClaimIntent, ticks: Vec<TickEntry>) -> Request {
    Request::Claim {
        task: "t".into(),
        tick,
        intent,
        ticks,
    }
}

use super::super::test_fixtures::serve_requests as serve;

fn record(store: &Store) -> FireRecord {
    serde_json::from_slice(store.data(format!("{BASE}/tasks/t"))).unwrap()
}

fn answered(served: &Served, req: u64) -> Option<&Answered> {
    served.answers.get(&req).and_then(|a| a.as_ref().ok())
}

#[test]
fn a_claim_writes_the_ticks_it_carries_and_a_note_keeps_the_claimer() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "")]);
    let missed = TickEntry {
        from: tick(-600),
        to: tick(-60),
        count: 10,
        reason: Reason::NoNode,
    };
    let served = serve(
        &mut node,
        &mut store,
        100,
        vec![(1, claim(tick(0), ClaimIntent::Run, vec![missed]))],
    );
    assert_eq!(
        answered(&served, 1),
        Some(&Answered::Claim(ClaimOutcome::Claimed))
    );
    let claimed = record(&store);
    assert_eq!((claimed.tick, claimed.run), (Some(tick(0)), true));
    assert_eq!(claimed.ticks, [missed]);

    // A deadline skip after it, written alone: the tick, claimer and run flag stay.
    let late = TickEntry::one(tick(60), Reason::Deadline);
    let served = serve(
        &mut node,
        &mut store,
        200,
        vec![(2, claim(tick(60), ClaimIntent::Note, vec![late]))],
    );
    assert_eq!(
        answered(&served, 2),
        Some(&Answered::Claim(ClaimOutcome::Claimed))
    );
    let noted = record(&store);
    assert_eq!(noted.ticks, [missed, late]);
    assert_eq!(
        (noted.tick, noted.run, &noted.node, &noted.session),
        (claimed.tick, true, &claimed.node, &claimed.session)
    );

    // The planner of whoever fires `t` next starts after the deadline skip.
    let served = serve(
        &mut node,
        &mut store,
        300,
        vec![(3, Request::LastClaimed { task: "t".into() })],
    );
    assert_eq!(answered(&served, 3), Some(&Answered::Tick(Some(tick(60)))));
}

#[test]
fn consecutive_overlap_skips_are_one_entry_in_the_record() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "")]);
    let served = serve(
        &mut node,
        &mut store,
        100,
        vec![(1, claim(tick(0), ClaimIntent::Run, vec![]))],
    );
    assert!(answered(&served, 1).is_some(), "{:?}", served.answers);
    for (req, n) in [(2, 60), (3, 120), (4, 180)] {
        let skip = vec![TickEntry::one(tick(n), Reason::Overlap)];
        let served = serve(
            &mut node,
            &mut store,
            100 + n as u64,
            vec![(req, claim(tick(n), ClaimIntent::Skip, skip))],
        );
        assert!(answered(&served, req).is_some(), "{:?}", served.answers);
    }
    assert_eq!(
        record(&store).ticks,
        [TickEntry {
            from: tick(60),
            to: tick(180),
            count: 3,
            reason: Reason::Overlap,
        }]
    );
}

/// Before the ledger, a tick claimed to run by a node that died before its result was stored
/// vanished once the next claim overwrote the record: it was neither ran nor in the ledger.
#[test]
fn a_claim_past_a_run_lost_with_its_node_records_it_as_node_lost() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "")]);
    // Claimed to run at tick 0 by a session that is gone, with no result.
    let lost = FireRecord {
        tick: Some(tick(0)),
        node: "gone".into(),
        session: "dead0001".into(),
        run: true,
        ..FireRecord::empty()
    };
    store.put(
        format!("{BASE}/tasks/t"),
        serde_json::to_vec(&lost).unwrap(),
    );
    let served = serve(
        &mut node,
        &mut store,
        100,
        vec![(1, claim(tick(60), ClaimIntent::Run, vec![]))],
    );
    assert_eq!(
        answered(&served, 1),
        Some(&Answered::Claim(ClaimOutcome::Claimed))
    );
    assert_eq!(
        record(&store).ticks,
        [TickEntry::one(tick(0), Reason::NodeLost)]
    );
    // The next claim, past this node's own run, reads nothing more and adds nothing.
    let served = serve(
        &mut node,
        &mut store,
        200,
        vec![(2, claim(tick(120), ClaimIntent::Run, vec![]))],
    );
    assert!(answered(&served, 2).is_some(), "{:?}", served.answers);
    assert_eq!(record(&store).ticks.len(), 1);
}
