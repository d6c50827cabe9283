//! A fire record ahead of the clock, and clocks that jump: nothing handled fires again.

use super::*;

#[test]
fn a_fire_record_ahead_of_the_clock_is_never_repeated() {
    // The record says 00:30 was claimed, our clock says 00:15 (it went back, or skew).
    let mut planner = started(
        rules("*/10 * * * *", CatchUpPolicy::All, None),
        Some("2026-01-01T00:30:00Z"),
        "2026-01-01T00:15:00Z",
    );
    assert_eq!(
        planner.poll(utc("2026-01-01T00:15:00Z")),
        Step::Held {
            record: utc("2026-01-01T00:30:00Z"),
            until: utc("2026-01-01T00:40:00Z")
        }
    );
    assert_eq!(
        planner.poll(utc("2026-01-01T00:31:00Z")),
        Step::SleepUntil(utc("2026-01-01T00:40:00Z"))
    );
}

#[test]
fn a_fire_record_a_year_ahead_holds_the_task_visibly_until_the_clock_passes_it() {
    // Regression: after the clock ran a year ahead for two seconds, the task slept until the
    // record's next tick, a year away, and nothing said so.
    let record = utc("2027-01-01T00:00:10Z");
    let now = utc("2026-01-01T00:00:03Z");
    let mut planner = TickPlanner::start(
        rules("*/10 * * * * *", CatchUpPolicy::Once, None),
        Some(record),
        now,
    );
    let held = Step::Held {
        record,
        until: utc("2027-01-01T00:00:20Z"),
    };
    assert_eq!(planner.poll(now), held);
    assert_eq!(holding_record(Some(record), now), Some(record));
    // Nothing up to the record ever fires again on the planner's own: the ticks in between
    // may have run (the clock was a year ahead when they were claimed).
    assert_eq!(planner.poll(utc("2026-06-01T00:00:00Z")), held);
    assert_eq!(
        planner.poll(record + TimeDelta::seconds(5)),
        Step::SleepUntil(utc("2027-01-01T00:00:20Z"))
    );
    assert_eq!(
        fired(planner.poll(utc("2027-01-01T00:00:20Z"))),
        ["2027-01-01T00:00:20+00:00"]
    );
}

#[test]
fn a_clock_that_ran_ahead_and_came_back_holds_the_running_loop_visibly() {
    // The loop fires while the clock is a year ahead, then the clock is corrected.
    let mut planner = started(
        rules("*/10 * * * * *", CatchUpPolicy::Once, None),
        None,
        "2026-01-01T00:00:03Z",
    );
    let ran_ahead = fired(planner.poll(utc("2027-01-01T00:00:01Z")));
    assert_eq!(ran_ahead.last().unwrap(), "2027-01-01T00:00:00+00:00");
    assert_eq!(
        planner.poll(utc("2026-01-01T00:00:05Z")),
        Step::Held {
            record: utc("2027-01-01T00:00:00Z"),
            until: utc("2027-01-01T00:00:10Z")
        }
    );
}

#[test]
fn a_held_task_is_reported_with_its_record_how_far_ahead_and_the_fix() {
    let report = |fix: &str| {
        held_report(
            "backup",
            utc("2026-03-02T10:00:00Z"),
            utc("2026-03-03T02:30:00Z"),
            utc("2026-03-01T08:30:00Z"),
            fix,
        )
    };
    assert_eq!(
        report(&held_fix("backup", Some(" --state-dir /srv/zkcron"))),
        "task backup is held by its fire record 2026-03-02T10:00:00Z, 1day 1h 30m ahead of the \
         clock: every tick up to it counts as done (it was claimed while the clock was ahead, \
         or the clock was set back since), so the task fires next at 2026-03-03T02:30:00Z. To \
         fire it from now on: stop zkcron, run `zkcron reset backup --state-dir /srv/zkcron` \
         (moves the record back to now; no past tick runs again), start zkcron."
    );
    assert!(
        report(&held_fix("backup", None))
            .ends_with("in a ZooKeeper cluster is not supported yet; the task fires again when the clock passes the record.")
    );
}

#[test]
fn a_fire_record_slightly_ahead_is_waited_out_quietly() {
    // A small step back (NTP): within the tolerance the task just sleeps.
    let now = utc("2026-01-01T00:00:03Z");
    let record = now + FUTURE_RECORD_TOLERANCE;
    let mut planner = TickPlanner::start(
        rules("*/10 * * * * *", CatchUpPolicy::Once, None),
        Some(record),
        now,
    );
    assert_eq!(
        planner.poll(now),
        Step::SleepUntil(utc("2026-01-01T00:01:10Z"))
    );
    assert_eq!(holding_record(Some(record), now), None);
    assert_eq!(holding_record(None, now), None);
}

#[test]
fn a_clock_jumping_back_does_not_refire_handled_ticks() {
    let mut planner = started(
        rules("*/10 * * * *", CatchUpPolicy::All, None),
        None,
        "2026-01-01T00:05:00Z",
    );
    assert_eq!(
        fired(planner.poll(utc("2026-01-01T00:10:00Z"))),
        ["2026-01-01T00:10:00+00:00"]
    );
    // The wall clock jumps back an hour: nothing fires until 00:20 comes again, and the
    // task says it is held by the tick it fired.
    assert_eq!(
        planner.poll(utc("2025-12-31T23:10:00Z")),
        Step::Held {
            record: utc("2026-01-01T00:10:00Z"),
            until: utc("2026-01-01T00:20:00Z")
        }
    );
}
