//! One-shots (`@at`): a record or not, the instant is one tick, and nobody's record means it
//! was missed once it passed.

use super::*;

#[test]
fn a_one_shot_ahead_fires_once_at_its_instant_and_then_is_finished() {
    let mut planner = started(
        rules("@at 2026-01-01T00:10:00Z", CatchUpPolicy::Skip, None),
        None,
        "2026-01-01T00:03:00Z",
    );
    assert_eq!(
        planner.poll(utc("2026-01-01T00:03:00Z")),
        Step::SleepUntil(utc("2026-01-01T00:10:00Z"))
    );
    assert_eq!(
        fired(planner.poll(utc("2026-01-01T00:10:00.002Z"))),
        ["2026-01-01T00:10:00+00:00"]
    );
    assert_eq!(planner.poll(utc("2026-01-01T00:20:00Z")), Step::Finished);
    // Claimed before (its record is the instant): nothing more, ever.
    let mut after = started(
        rules("@at 2026-01-01T00:10:00Z", CatchUpPolicy::All, None),
        Some("2026-01-01T00:10:00Z"),
        "2026-01-01T00:30:00Z",
    );
    assert_eq!(after.poll(utc("2026-01-01T00:30:00Z")), Step::Finished);
}

#[test]
fn a_one_shot_that_passed_before_any_node_loaded_it_follows_catch_up_and_the_deadline() {
    // catch_up = "once" runs it late, marked as caught up;
    let mut once = started(
        rules("@at 2026-01-01T00:10:00Z", CatchUpPolicy::Once, None),
        None,
        "2026-01-01T01:00:00Z",
    );
    match once.poll(utc("2026-01-01T01:00:00Z")) {
        Step::Fire { ticks, skipped } => {
            assert_eq!(ticks.len(), 1);
            assert!(ticks[0].catch_up);
            assert_eq!(ticks[0].instant, utc("2026-01-01T00:10:00Z"));
            assert!(skipped.is_empty());
        }
        other => panic!("expected Fire, got {other:?}"),
    }
    assert_eq!(once.poll(utc("2026-01-01T02:00:00Z")), Step::Finished);
    // "skip" leaves it, for the ledger as missed with no node to run it;
    let mut skip = started(
        rules("@at 2026-01-01T00:10:00Z", CatchUpPolicy::Skip, None),
        None,
        "2026-01-01T01:00:00Z",
    );
    assert_eq!(
        skip.poll(utc("2026-01-01T01:00:00Z")),
        Step::Fire {
            ticks: vec![],
            skipped: skipped_list(&[(
                "2026-01-01T00:10:00Z",
                "2026-01-01T00:10:00Z",
                1,
                Reason::NoNode
            )]),
        }
    );
    // and past `starting_deadline` even "once" does not run it.
    let mut late = started(
        rules("@at 2026-01-01T00:10:00Z", CatchUpPolicy::Once, Some(600)),
        None,
        "2026-01-01T01:00:00Z",
    );
    match late.poll(utc("2026-01-01T01:00:00Z")) {
        Step::Fire { ticks, skipped } => {
            assert!(ticks.is_empty());
            assert_eq!(skipped.len(), 1);
        }
        other => panic!("expected Fire, got {other:?}"),
    }
}
