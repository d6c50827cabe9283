use chrono_tz::Tz;

use super::*;
use crate::coord::records::RunTrigger;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn hourly() -> Schedule {
    Schedule::parse("0 * * * *", Tz::UTC).unwrap()
}

fn by(node: &str) -> Claimer<'_> {
    Claimer {
        node,
        session: None,
    }
}

fn request(total: u32) -> BackfillRecord {
    BackfillRecord::new(
        "report",
        utc("2026-01-01T00:00:00Z"),
        utc("2026-01-01T03:00:00Z"),
        total,
        "ops@host",
        utc("2026-02-01T00:00:00Z"),
    )
}

fn entry(fire_id: &str, tick: DateTime<Utc>, exit_code: i32) -> HistoryEntry {
    HistoryEntry {
        fire_id: fire_id.into(),
        tick,
        node: "a".into(),
        release: "1.0.0".into(),
        started_at: tick,
        duration_ms: 5,
        exit_code: Some(exit_code),
        signal: None,
        success: exit_code == 0,
        attempts: 1,
        trigger: RunTrigger::Manual,
        backfill: true,
        after: None,
        items: None,
        output_tail: None,
    }
}

#[test]
fn fire_ids_name_the_request_and_the_tick_and_look_like_no_other_run() {
    let name = request_name("report", 7);
    assert_eq!(name, "report@backfill-0000000007");
    assert_eq!(request_task(&name), Some("report"));
    let tick = utc("2026-01-01T01:00:00Z");
    let id = fire_id(&name, tick);
    assert_eq!(id, "report@backfill-0000000007-1767229200");
    assert_eq!(of_fire_id(&id), Some((name.as_str(), tick)));
    assert_eq!(of_fire_id("report@1767229200"), None);
    assert_eq!(of_fire_id("report@manual-0000000007"), None);
    let after_item =
        crate::coord::record::chain_item_fire_id("load", "eu-west", "report@1767229200");
    assert_eq!(of_fire_id(&after_item), None);
    assert_eq!(crate::coord::record::manual_task(&id), None);
}

#[test]
fn a_range_counts_its_ticks_from_inclusive_to_exclusive() {
    let schedule = hourly();
    let from = utc("2026-01-01T00:00:00Z");
    assert_eq!(
        count_ticks(&schedule, from, utc("2026-01-01T03:00:00Z")),
        Ok(3)
    );
    assert!(matches!(
        count_ticks(&schedule, from, from),
        Err(RangeError::Empty { .. })
    ));
    assert!(matches!(
        count_ticks(&schedule, from, utc("2026-01-01T00:30:00Z")),
        Ok(1)
    ));
    assert!(matches!(
        count_ticks(
            &schedule,
            utc("2026-01-01T00:10:00Z"),
            utc("2026-01-01T00:50:00Z")
        ),
        Err(RangeError::NoTicks { .. })
    ));
}

#[test]
fn a_range_over_ten_thousand_ticks_is_refused_with_its_count() {
    let schedule = hourly();
    let from = utc("2026-01-01T00:00:00Z");
    let error = count_ticks(&schedule, from, from + TimeDelta::hours(10_001)).unwrap_err();
    assert_eq!(
        error,
        RangeError::TooMany {
            count: 10_001,
            max: 10_000
        }
    );
    assert!(error.to_string().contains("holds 10001 ticks"), "{error}");
    assert_eq!(
        count_ticks(&schedule, from, from + TimeDelta::hours(10_000)),
        Ok(10_000)
    );
}

#[test]
fn the_next_tick_follows_the_newest_claimed_one_inside_the_range() {
    let schedule = hourly();
    let mut listed = Backfill::of("report@backfill-0000000000", &request(3));
    assert_eq!(
        listed.next_tick(&schedule),
        Some(utc("2026-01-01T00:00:00Z"))
    );
    listed.done = Some(utc("2026-01-01T01:00:00Z"));
    assert_eq!(
        listed.next_tick(&schedule),
        Some(utc("2026-01-01T02:00:00Z"))
    );
    listed.done = Some(utc("2026-01-01T02:00:00Z"));
    assert_eq!(listed.next_tick(&schedule), None);
}

#[test]
fn a_tick_is_claimed_once_one_at_a_time_and_only_by_the_leader() {
    let name = "report@backfill-0000000000";
    let first = utc("2026-01-01T00:00:00Z");
    let second = utc("2026-01-01T01:00:00Z");
    let now = utc("2026-02-01T00:00:00Z");
    let record = request(3);
    assert_eq!(
        admit(false, Some(&record), first, false),
        Verdict::Refuse(ClaimOutcome::NotLeader)
    );
    assert_eq!(admit(true, Some(&record), first, false), Verdict::Admit);
    let running = claimed(&record, name, first, by("a"), now);
    assert_eq!(running.done, Some(first));
    assert_eq!(running.claimed, 1);
    // The same tick again, or the next one while the first runs: refused.
    assert!(matches!(
        admit(true, Some(&running), first, false),
        Verdict::Refuse(ClaimOutcome::AlreadyClaimed { .. })
    ));
    assert!(matches!(
        admit(true, Some(&running), second, false),
        Verdict::Refuse(ClaimOutcome::AlreadyClaimed { .. })
    ));
    let ended_ok = ended(&running, &entry(&fire_id(name, first), first, 0), None, now);
    assert_eq!((ended_ok.succeeded, ended_ok.running.clone()), (1, None));
    assert!(matches!(
        admit(true, Some(&ended_ok), first, false),
        Verdict::Refuse(ClaimOutcome::AlreadyClaimed { .. })
    ));
    assert_eq!(admit(true, Some(&ended_ok), second, false), Verdict::Admit);
    // Outside the range, or gone: refused.
    assert!(matches!(
        admit(true, Some(&ended_ok), utc("2026-01-01T03:00:00Z"), false),
        Verdict::Refuse(_)
    ));
    assert!(matches!(
        admit(true, None, second, false),
        Verdict::Refuse(_)
    ));
}

#[test]
fn a_tick_of_a_lost_node_counts_as_failed_and_the_next_one_goes_on() {
    let name = "report@backfill-0000000000";
    let first = utc("2026-01-01T00:00:00Z");
    let second = utc("2026-01-01T01:00:00Z");
    let now = utc("2026-02-01T00:00:00Z");
    let running = claimed(&request(3), name, first, by("a"), now);
    assert_eq!(admit(true, Some(&running), second, true), Verdict::Admit);
    let next = claimed(&running, name, second, by("b"), now);
    assert_eq!(next.failed, 1);
    assert_eq!(next.claimed, 2);
    assert!(
        next.failures[0].contains("node a was lost"),
        "{:?}",
        next.failures
    );
    assert_eq!(next.running.as_ref().map(|r| r.node.as_str()), Some("b"));
}

#[test]
fn the_last_end_makes_the_request_done_and_cancel_stops_the_claims() {
    let name = "report@backfill-0000000000";
    let first = utc("2026-01-01T00:00:00Z");
    let now = utc("2026-02-01T00:00:00Z");
    let running = claimed(&request(1), name, first, by("a"), now);
    let done = ended(&running, &entry(&fire_id(name, first), first, 3), None, now);
    assert_eq!(done.state, BackfillState::Done);
    assert_eq!(done.failed, 1);
    assert!(
        done.failures[0].ends_with(": exit code 3"),
        "{:?}",
        done.failures
    );
    // A repeated end changes nothing.
    assert_eq!(
        ended(&done, &entry(&fire_id(name, first), first, 3), None, now),
        done
    );
    // Cancelled (`operator::cancelled` tests how): nothing more is admitted.
    let cancelled = BackfillRecord {
        state: BackfillState::Cancelled,
        ended_at: Some(now),
        ..request(3)
    };
    assert!(matches!(
        admit(true, Some(&cancelled), first, false),
        Verdict::Refuse(_)
    ));
    assert!(!expired(&cancelled, now));
    assert!(expired(&cancelled, now + TimeDelta::days(8)));
}

#[test]
fn a_chained_run_s_fire_id_is_no_backfill_tick_s_though_its_parent_was_one() {
    let parent = fire_id(
        &request_name("extract", 3),
        DateTime::from_timestamp(1_767_225_600, 0).unwrap(),
    );
    let child = crate::coord::record::chain_fire_id("load", &parent);
    assert!(of_fire_id(&parent).is_some());
    assert_eq!(of_fire_id(&child), None, "{child}");
}
