use super::*;
use chrono_tz::Tz;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn entry(from: &str, to: &str, count: u64, reason: Reason) -> TickEntry {
    TickEntry {
        from: utc(from),
        to: utc(to),
        count,
        reason,
    }
}

fn every_minute() -> Schedule {
    Schedule::parse("* * * * *", Tz::UTC).unwrap()
}

#[test]
fn consecutive_ticks_with_one_reason_are_one_entry() {
    let mut entries = Vec::new();
    for minute in 0..3 {
        let tick = utc("2026-01-01T00:00:00Z") + TimeDelta::minutes(minute);
        push(&mut entries, TickEntry::one(tick, Reason::Overlap));
    }
    push(
        &mut entries,
        TickEntry::one(utc("2026-01-01T00:03:00Z"), Reason::QueueFull),
    );
    assert_eq!(
        entries,
        [
            entry(
                "2026-01-01T00:00:00Z",
                "2026-01-01T00:02:00Z",
                3,
                Reason::Overlap
            ),
            entry(
                "2026-01-01T00:03:00Z",
                "2026-01-01T00:03:00Z",
                1,
                Reason::QueueFull
            ),
        ]
    );
}

#[test]
fn a_record_joins_skips_only_when_nothing_ran_between_them() {
    let stored = [TickEntry::one(utc("2026-01-01T00:01:00Z"), Reason::Overlap)];
    let next = [TickEntry::one(utc("2026-01-01T00:02:00Z"), Reason::Overlap)];
    // The record still names the skipped tick: the skips are consecutive.
    let joined = merged(&stored, &next, Some(utc("2026-01-01T00:01:00Z")));
    assert_eq!(joined.len(), 1);
    assert_eq!(joined[0].count, 2);
    // A run of 00:01:30 came between them: two entries.
    let apart = merged(&stored, &next, Some(utc("2026-01-01T00:01:30Z")));
    assert_eq!(apart.len(), 2);
    // A write carrying an entry the record has already is not counted twice.
    assert_eq!(merged(&joined, &next, None), joined);
}

#[test]
fn a_record_keeps_the_newest_entries() {
    let mut stored = Vec::new();
    for i in 0..(STORED_ENTRIES as i64 + 10) {
        let tick = utc("2026-01-01T00:00:00Z") + TimeDelta::minutes(i);
        let reason = if i % 2 == 0 {
            Reason::Overlap
        } else {
            Reason::Deadline
        };
        stored = merged(&stored, &[TickEntry::one(tick, reason)], None);
    }
    assert_eq!(stored.len(), STORED_ENTRIES);
    assert_eq!(
        stored.last().unwrap().from,
        utc("2026-01-01T00:00:00Z") + TimeDelta::minutes(STORED_ENTRIES as i64 + 9)
    );
}

#[test]
fn an_uncounted_entry_is_counted_with_the_schedule_and_runs_sit_between_entries() {
    // `zkcron resume` at 00:10:30 after a record of 00:05: ticks 00:06 to 00:10 were paused.
    let paused = TickEntry {
        from: utc("2026-01-01T00:05:01Z"),
        to: utc("2026-01-01T00:10:30Z"),
        count: 0,
        reason: Reason::Paused,
    };
    let ran = [(utc("2026-01-01T00:05:00Z"), "t@1767225900".to_string())];
    let lines = lines(&[paused], &ran, Some(&every_minute()), None);
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0].outcome, Outcome::Ran);
    assert_eq!(lines[0].fire_id.as_deref(), Some("t@1767225900"));
    assert_eq!(
        (lines[1].from, lines[1].to, lines[1].count),
        (utc("2026-01-01T00:06:00Z"), utc("2026-01-01T00:10:00Z"), 5)
    );
    assert_eq!(lines[1].outcome, Outcome::Skipped);
    // Without the schedule the range is shown as written.
    let unscheduled = super::lines(&[paused], &[], None, None);
    assert_eq!(unscheduled[0].count, 0);
}

#[test]
fn overlapping_entries_start_after_the_earlier_one_and_open_ticks_are_counted() {
    let first = entry(
        "2026-01-01T00:01:00Z",
        "2026-01-01T00:03:00Z",
        3,
        Reason::Deadline,
    );
    let again = entry(
        "2026-01-01T00:02:00Z",
        "2026-01-01T00:05:00Z",
        4,
        Reason::NoNode,
    );
    let open = Open {
        after: utc("2026-01-01T00:05:00Z"),
        now: utc("2026-01-01T00:07:10Z"),
        reason: Reason::NoEligibleNode,
    };
    let lines = lines(&[first, again], &[], Some(&every_minute()), Some(open));
    let seen: Vec<_> = lines
        .iter()
        .map(|l| (l.from, l.count, l.reason.unwrap()))
        .collect();
    assert_eq!(
        seen,
        [
            (utc("2026-01-01T00:01:00Z"), 3, Reason::Deadline),
            (utc("2026-01-01T00:04:00Z"), 2, Reason::NoNode),
            (utc("2026-01-01T00:06:00Z"), 2, Reason::NoEligibleNode),
        ]
    );
    assert_eq!(lines[2].outcome, Outcome::Missed);
}

#[test]
fn every_reason_has_its_code_and_a_sentence() {
    for reason in REASONS {
        let json = serde_json::to_string(&reason).unwrap();
        assert_eq!(json, format!("\"{}\"", reason.code()));
        assert!(reason.message().len() > 20, "{reason:?}");
    }
}

/// Simulation seed 86: entries given back by a failed claim reached the record after newer
/// ones, and the record dropped them as written already: their ticks were accounted nowhere.
#[test]
fn an_entry_older_than_the_stored_ones_is_kept_in_order() {
    let newer = [TickEntry::one(
        utc("2026-01-01T00:05:00Z"),
        Reason::Deadline,
    )];
    let older = [entry(
        "2026-01-01T00:01:00Z",
        "2026-01-01T00:03:00Z",
        3,
        Reason::NoNode,
    )];
    let stored = merged(&newer, &older, None);
    assert_eq!(stored, [older[0], newer[0]]);
    // Carried once more (its answer lost): still once.
    assert_eq!(merged(&stored, &older, None), stored);
}

#[test]
fn the_ticks_an_active_window_leaves_out_are_one_entry_before_it_and_one_after() {
    let window = Window {
        from: Some(utc("2026-01-01T00:05:00Z")),
        until: Some(utc("2026-01-01T00:10:00Z")),
    };
    let schedule = every_minute().within(window);
    let entries = window_entries(
        &schedule,
        utc("2026-01-01T00:01:30Z"),
        utc("2026-01-01T00:12:30Z"),
    );
    assert_eq!(
        entries,
        [
            entry(
                "2026-01-01T00:02:00Z",
                "2026-01-01T00:04:00Z",
                3,
                Reason::Window
            ),
            entry(
                "2026-01-01T00:11:00Z",
                "2026-01-01T00:12:00Z",
                2,
                Reason::Window
            ),
        ]
    );
    // Inside the window since the start: nothing.
    assert!(
        window_entries(
            &schedule,
            utc("2026-01-01T00:06:00Z"),
            utc("2026-01-01T00:09:00Z")
        )
        .is_empty()
    );
}

/// Simulation (the reason check): a pooled task's claim wrote the no_node entry its planner
/// found from the oldest unit onto every unit, among them units that had claimed those ticks.
/// A record keeps only the ticks after its own tick.
#[test]
fn entries_at_or_before_a_records_tick_are_left_out_and_one_across_it_starts_after_it() {
    let record = Some(utc("2026-01-01T00:02:00Z"));
    let before = entry(
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:02:00Z",
        3,
        Reason::NoNode,
    );
    let across = entry(
        "2026-01-01T00:01:00Z",
        "2026-01-01T00:04:00Z",
        4,
        Reason::NoNode,
    );
    let lost = TickEntry::one(utc("2026-01-01T00:02:00Z"), Reason::NodeLost);
    assert_eq!(
        after(&[before, across, lost], record),
        [
            TickEntry {
                from: utc("2026-01-01T00:02:01Z"),
                to: utc("2026-01-01T00:04:00Z"),
                count: 0,
                reason: Reason::NoNode,
            },
            lost,
        ]
    );
    let lines = lines(&after(&[across], record), &[], Some(&every_minute()), None);
    assert_eq!(
        (lines[0].from, lines[0].count),
        (utc("2026-01-01T00:03:00Z"), 2)
    );
}
