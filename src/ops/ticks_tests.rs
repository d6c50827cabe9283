//! The tick ledger as `history --ticks` reads it from a cluster's records.

use super::fixtures::{at, cluster};
use super::ticks::of_cluster;
use crate::coord::records::FireRecord;
use crate::plan::ledger::{Outcome, Reason, TickEntry};

fn record(tick: chrono::DateTime<chrono::Utc>, node: &str, run: bool) -> FireRecord {
    FireRecord {
        tick: Some(tick),
        node: node.into(),
        session: "5".into(),
        run,
        ..FireRecord::empty()
    }
}

#[test]
fn a_tick_claimed_to_run_by_a_node_that_is_gone_without_a_result_is_missed_node_lost() {
    let mut snapshot = cluster();
    let mut lost = record(at(10, 0, 0), "gone", true);
    lost.ticks = vec![TickEntry::one(at(9, 50, 0), Reason::Overlap)];
    snapshot.fire_records.insert("backup".into(), lost);
    let lines = of_cluster(&snapshot, "backup", &[], at(10, 0, 30));
    let seen: Vec<_> = lines
        .iter()
        .map(|l| (l.from, l.outcome, l.reason))
        .collect();
    assert_eq!(
        seen,
        [
            (at(9, 50, 0), Outcome::Skipped, Some(Reason::Overlap)),
            (at(10, 0, 0), Outcome::Missed, Some(Reason::NodeLost)),
        ]
    );
    // Its claimer alive (it may still run it), or a skip, is not lost.
    snapshot
        .fire_records
        .insert("backup".into(), record(at(10, 0, 0), "c", true));
    assert!(of_cluster(&snapshot, "backup", &[], at(10, 0, 30)).is_empty());
    snapshot
        .fire_records
        .insert("backup".into(), record(at(10, 0, 0), "gone", false));
    assert!(of_cluster(&snapshot, "backup", &[], at(10, 0, 30)).is_empty());
}

#[test]
fn ticks_after_the_record_of_a_task_nobody_leads_are_missed_no_node_until_now() {
    let mut snapshot = cluster();
    // Nobody holds `report`'s lease, though every node may run it.
    snapshot.leases.remove("report");
    snapshot
        .fire_records
        .insert("report".into(), record(at(9, 40, 0), "c", false));
    let lines = of_cluster(&snapshot, "report", &[], at(10, 0, 30));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(
        (lines[0].from, lines[0].to, lines[0].count, lines[0].reason),
        (at(9, 45, 0), at(10, 0, 0), 4, Some(Reason::NoNode))
    );
    assert_eq!(lines[0].outcome, Outcome::Missed);
}
