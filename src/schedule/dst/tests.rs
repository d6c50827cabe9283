use std::collections::BTreeSet;

use chrono::{LocalResult, NaiveDateTime, TimeDelta, TimeZone};

use super::*;
use crate::schedule::{DstChoice, DstGap, DstRepeat, parsed};

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn local(s: &str) -> NaiveDateTime {
    NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M").unwrap()
}

fn schedule(
    expression: &str,
    zone: Tz,
    gap: Option<DstGap>,
    repeat: Option<DstRepeat>,
) -> Schedule {
    Schedule::parse(expression, zone)
        .unwrap()
        .with_dst(DstChoice { gap, repeat })
}

const YEAR_2026: (&str, &str) = ("2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z");

fn changes_in_2026(schedule: &Schedule) -> Vec<DstChange> {
    schedule.dst_changes(utc(YEAR_2026.0), utc(YEAR_2026.1))
}

#[test]
fn a_fixed_time_job_in_berlin_runs_after_the_gap_and_once_in_the_repeat_as_cronie() {
    let berlin = schedule("30 2 * * *", Tz::Europe__Berlin, None, None);
    let expression = "30 2 * * *".to_string();
    assert_eq!(
        changes_in_2026(&berlin),
        vec![
            DstChange {
                local: local("2026-03-29T02:30"),
                expression: expression.clone(),
                effect: DstEffect::Moved {
                    at: utc("2026-03-29T01:00:00Z")
                },
            },
            DstChange {
                local: local("2026-10-25T02:30"),
                expression,
                effect: DstEffect::Once {
                    at: utc("2026-10-25T00:30:00Z"),
                    not: utc("2026-10-25T01:30:00Z"),
                },
            },
        ]
    );
}

#[test]
fn the_task_s_choice_skips_the_gap_and_runs_both_passes_of_the_repeat() {
    let berlin = schedule(
        "30 2 * * *",
        Tz::Europe__Berlin,
        Some(DstGap::Skip),
        Some(DstRepeat::Both),
    );
    let effects: Vec<DstEffect> = changes_in_2026(&berlin).iter().map(|c| c.effect).collect();
    assert_eq!(
        effects,
        vec![
            DstEffect::Skipped,
            DstEffect::Doubled {
                first: utc("2026-10-25T00:30:00Z"),
                second: utc("2026-10-25T01:30:00Z"),
            },
        ]
    );
    // And the ticks agree: none on the day of the gap, two on the day of the repeat.
    let ticks = |from: &str, to: &str| -> Vec<DateTime<Utc>> {
        berlin
            .ticks_after(utc(from))
            .take_while(|t| *t < utc(to))
            .collect()
    };
    assert_eq!(
        ticks("2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"),
        Vec::<DateTime<Utc>>::new()
    );
    assert_eq!(
        ticks("2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z"),
        vec![utc("2026-10-25T00:30:00Z"), utc("2026-10-25T01:30:00Z")]
    );
}

#[test]
fn a_wildcard_job_keeps_cronie_s_rhythm_unless_the_task_chooses() {
    let every_quarter = schedule("*/15 * * * *", Tz::Europe__Berlin, None, None);
    let changes = changes_in_2026(&every_quarter);
    // Four quarters of 02:xx are skipped in March and repeated in October.
    assert_eq!(changes.len(), 8);
    assert!(changes[..4].iter().all(|c| c.effect == DstEffect::Skipped));
    assert!(
        changes[4..]
            .iter()
            .all(|c| matches!(c.effect, DstEffect::Doubled { .. }))
    );
    let run_after = schedule(
        "*/15 * * * *",
        Tz::Europe__Berlin,
        Some(DstGap::RunAfter),
        None,
    );
    let moved = changes_in_2026(&run_after);
    assert!(moved[..4].iter().all(|c| c.effect
        == DstEffect::Moved {
            at: utc("2026-03-29T01:00:00Z")
        }));
}

#[test]
fn zones_without_changes_intervals_and_windows_list_nothing() {
    let tokyo = schedule("30 2 * * *", Tz::Asia__Tokyo, None, None);
    assert_eq!(changes_in_2026(&tokyo), vec![]);
    let interval = Schedule::parse("@every 15m", Tz::Europe__Berlin).unwrap();
    assert_eq!(changes_in_2026(&interval), vec![]);
    let summer_only =
        schedule("30 2 * * *", Tz::Europe__Berlin, None, None).within(crate::schedule::Window {
            from: Some(utc("2026-04-01T00:00:00Z")),
            until: Some(utc("2026-09-30T00:00:00Z")),
        });
    assert_eq!(changes_in_2026(&summer_only), vec![]);
}

/// The ticks around `transition` that `rule` fires, worked out minute by minute from the
/// local times croner matches and what chrono says of each: an oracle of its own, not the
/// schedule's search.
fn oracle(
    expression: &str,
    zone: Tz,
    transition: Transition,
    gap: DstGap,
    repeat: DstRepeat,
) -> (BTreeSet<DateTime<Utc>>, BTreeSet<NaiveDateTime>) {
    let cron = parsed::parsed(expression).unwrap();
    let wall = transition.at.naive_utc() + TimeDelta::seconds(transition.before);
    let mut ticks = BTreeSet::new();
    let mut touched = BTreeSet::new();
    let mut minute = wall - TimeDelta::hours(6);
    while minute < wall + TimeDelta::hours(6) {
        if cron.is_time_matching(&minute).unwrap() {
            match zone.from_local_datetime(&minute) {
                LocalResult::Single(t) => {
                    ticks.insert(t.with_timezone(&Utc));
                }
                LocalResult::Ambiguous(first, second) => {
                    touched.insert(minute);
                    ticks.insert(first.with_timezone(&Utc));
                    if repeat == DstRepeat::Both {
                        ticks.insert(second.with_timezone(&Utc));
                    }
                }
                LocalResult::None => {
                    touched.insert(minute);
                    if gap == DstGap::RunAfter {
                        ticks.insert(transition.at);
                    }
                }
            }
        }
        minute += TimeDelta::minutes(1);
    }
    (ticks, touched)
}

/// For every zone of the tz database and each rule, the listing of 2026's changes and the ticks
/// the schedule fires around each agree with the oracle: the listing names every local time a
/// change touches and says what the daemon does with it.
#[test]
fn the_dst_listing_agrees_with_the_ticks_fired_in_every_zone() {
    let expressions = ["30 2 * * *", "*/15 * * * *", "0,30 0-4 * * *"];
    let rules = [
        (DstGap::RunAfter, DstRepeat::First),
        (DstGap::RunAfter, DstRepeat::Both),
        (DstGap::Skip, DstRepeat::First),
        (DstGap::Skip, DstRepeat::Both),
    ];
    let mut changes_seen = 0;
    for &zone in chrono_tz::TZ_VARIANTS.iter() {
        for transition in transitions(zone, utc(YEAR_2026.0), utc(YEAR_2026.1)) {
            for expression in expressions {
                for (gap, repeat) in rules {
                    let schedule = schedule(expression, zone, Some(gap), Some(repeat));
                    let (expected, touched) = oracle(expression, zone, transition, gap, repeat);
                    let (low, high) = (
                        transition.at - TimeDelta::hours(3),
                        transition.at + TimeDelta::hours(3),
                    );
                    let fired: BTreeSet<DateTime<Utc>> = schedule
                        .ticks_after(low)
                        .take_while(|t| *t <= high)
                        .collect();
                    let expected: BTreeSet<DateTime<Utc>> = expected
                        .into_iter()
                        .filter(|t| *t > low && *t <= high)
                        .collect();
                    let what = format!(
                        "{} {expression:?} {gap:?} {repeat:?} at {}",
                        zone.name(),
                        transition.at
                    );
                    assert_eq!(fired, expected, "ticks of {what}");
                    let listed = schedule.dst_changes(
                        transition.at - TimeDelta::hours(1),
                        transition.at + TimeDelta::hours(1),
                    );
                    let locals: BTreeSet<NaiveDateTime> = listed.iter().map(|c| c.local).collect();
                    assert_eq!(locals, touched, "local times listed for {what}");
                    for change in &listed {
                        let agrees = match change.effect {
                            DstEffect::Moved { at } => fired.contains(&at),
                            DstEffect::Skipped => gap == DstGap::Skip,
                            DstEffect::Doubled { first, second } => {
                                fired.contains(&first) && fired.contains(&second)
                            }
                            DstEffect::Once { at, not } => {
                                fired.contains(&at) && !fired.contains(&not)
                            }
                        };
                        assert!(agrees, "{change:?} of {what} against the ticks {fired:?}");
                        changes_seen += 1;
                    }
                }
            }
        }
    }
    // Most of the world's clock changes touch some of these expressions.
    assert!(changes_seen > 1_000, "only {changes_seen} listed changes");
}
