use chrono::{DateTime, Utc};

use super::*;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn record(tick: &str, run: bool) -> FireRecord {
    FireRecord {
        tick: Some(utc(tick)),
        run,
        ..FireRecord::empty()
    }
}

/// A review found a list of `@at` instants called done after its first: it ran the later
/// ones while status hid them.
#[test]
fn a_list_of_one_shots_is_done_only_after_its_last_instant() {
    let entry = TaskSetEntry {
        schedules: Some(vec![
            "@at 2026-12-01T00:00:00Z".into(),
            "@at 2026-12-02T00:00:00Z".into(),
        ]),
        ..TaskSetEntry::default()
    };
    assert_eq!(
        done_note(Some(&entry), Some(&record("2026-12-01T00:00:00Z", true))),
        None
    );
    assert_eq!(
        done_note(Some(&entry), Some(&record("2026-12-02T00:00:00Z", true))).as_deref(),
        Some("done: its one tick, 2026-12-02T00:00:00Z, ran (@at)")
    );
}

#[test]
fn max_runs_is_done_at_its_count_and_not_before() {
    let entry = TaskSetEntry {
        schedule: Some("@hourly".into()),
        max_runs: Some(2),
        ..TaskSetEntry::default()
    };
    let mut counted = record("2026-12-01T00:00:00Z", true);
    counted.runs = 1;
    assert_eq!(done_note(Some(&entry), Some(&counted)), None);
    counted.runs = 2;
    assert_eq!(
        done_note(Some(&entry), Some(&counted)).as_deref(),
        Some("done after 2 runs (max_runs)")
    );
}
