//! The shapes of a schedule beyond one cron expression: `@every` intervals with their offsets,
//! lists (their union), and the active window, on injected instants.

use super::*;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn every(expression: &str) -> Schedule {
    Schedule::parse(expression, Tz::UTC).unwrap()
}

fn list(expressions: &[&str]) -> Schedule {
    let parts = expressions
        .iter()
        .map(|e| Schedule::parse(e, Tz::UTC).unwrap())
        .collect();
    Schedule::union(parts).unwrap()
}

fn ticks(schedule: &Schedule, after: &str, n: usize) -> Vec<DateTime<Utc>> {
    schedule.ticks_after(utc(after)).take(n).collect()
}

#[test]
fn an_interval_ticks_at_multiples_of_it_counted_from_the_unix_epoch() {
    assert_eq!(
        ticks(&every("@every 15m"), "2026-01-01T00:07:30Z", 3),
        [
            utc("2026-01-01T00:15:00Z"),
            utc("2026-01-01T00:30:00Z"),
            utc("2026-01-01T00:45:00Z")
        ]
    );
    // Not a divisor of an hour or a day: still multiples since 1970, whoever asks when.
    let seven = every("@every 7s");
    for after in ["2026-01-01T00:00:00Z", "2031-05-17T13:01:02.5Z"] {
        for tick in ticks(&seven, after, 5) {
            assert_eq!(tick.timestamp() % 7, 0, "{tick}");
        }
    }
    assert_eq!(
        ticks(&every("@every 1h30m"), "2026-01-01T00:00:00Z", 2),
        [utc("2026-01-01T01:30:00Z"), utc("2026-01-01T03:00:00Z")]
    );
}

#[test]
fn an_interval_offset_shifts_every_tick_and_must_be_smaller_than_the_interval() {
    assert_eq!(
        ticks(&every("@every 1h/10m"), "2026-01-01T00:10:00Z", 2),
        [utc("2026-01-01T01:10:00Z"), utc("2026-01-01T02:10:00Z")]
    );
    assert_eq!(
        every("@every 1d/7h").next_after(utc("2026-01-01T00:00:00Z")),
        Some(utc("2026-01-01T07:00:00Z"))
    );
    for expression in ["@every 1h/1h", "@every 1h/2h"] {
        assert!(
            matches!(
                Schedule::parse(expression, Tz::UTC),
                Err(ScheduleError::EveryOffset { .. })
            ),
            "{expression}"
        );
    }
}

#[test]
fn an_interval_counts_whole_seconds_next_exclusive_and_latest_inclusive() {
    let schedule = every("@every 15m");
    assert_eq!(
        schedule.next_after(utc("2026-01-01T00:14:59.5Z")),
        Some(utc("2026-01-01T00:15:00Z"))
    );
    assert_eq!(
        schedule.next_after(utc("2026-01-01T00:15:00Z")),
        Some(utc("2026-01-01T00:30:00Z"))
    );
    assert_eq!(
        schedule.latest_at_or_before(utc("2026-01-01T00:15:00Z")),
        Some(utc("2026-01-01T00:15:00Z"))
    );
    assert_eq!(
        schedule.latest_at_or_before(utc("2026-01-01T00:14:59.9Z")),
        Some(utc("2026-01-01T00:00:00Z"))
    );
    // Before the epoch too (a negative count of intervals).
    assert_eq!(
        every("@every 1h/10m").latest_at_or_before(utc("1969-12-31T23:05:00Z")),
        Some(utc("1969-12-31T22:10:00Z"))
    );
}

#[test]
fn malformed_intervals_are_refused_with_what_to_write() {
    let error = |expression: &str| Schedule::parse(expression, Tz::UTC).unwrap_err();
    assert_eq!(error("@every"), ScheduleError::EveryMissing);
    assert!(matches!(
        error("@every 0s"),
        ScheduleError::EveryTooShort { .. }
    ));
    assert!(matches!(
        error("@every 1500ms"),
        ScheduleError::EveryFraction { .. }
    ));
    let message = error("@every 15x").to_string();
    assert!(
        message.contains("invalid interval \"15x\" in \"@every 15x\"") && message.contains("1h30m"),
        "{message}"
    );
    assert!(matches!(
        error("@every 100000000000y"),
        ScheduleError::NeverFires { .. } | ScheduleError::EveryDuration { .. }
    ));
    // A word that only starts like the alias is another (unknown) alias.
    assert!(matches!(
        error("@everyday"),
        ScheduleError::UnknownAlias { .. }
    ));
    assert!(error("@fortnightly").to_string().contains("@every 15m"));
    // Case as in the other aliases.
    assert_eq!(every("@EVERY 5m").expression(), "@EVERY 5m");
}

#[test]
fn a_list_is_the_union_and_an_instant_two_entries_share_is_one_tick() {
    let schedule = list(&["0 12 * * *", "@every 6h"]);
    assert_eq!(
        ticks(&schedule, "2026-01-01T00:00:00Z", 4),
        [
            utc("2026-01-01T06:00:00Z"),
            utc("2026-01-01T12:00:00Z"),
            utc("2026-01-01T18:00:00Z"),
            utc("2026-01-02T00:00:00Z")
        ]
    );
    assert_eq!(
        schedule.latest_at_or_before(utc("2026-01-01T13:00:00Z")),
        Some(utc("2026-01-01T12:00:00Z"))
    );
    // 2026-01-02 is a Friday, 01-03 a Saturday, 01-05 a Monday.
    let weekdays = list(&["0 9 * * MON-FRI", "0 12 * * SAT"]);
    assert_eq!(
        ticks(&weekdays, "2026-01-02T00:00:00Z", 3),
        [
            utc("2026-01-02T09:00:00Z"),
            utc("2026-01-03T12:00:00Z"),
            utc("2026-01-05T09:00:00Z")
        ]
    );
    assert!(weekdays.is_list() && weekdays.uses_timezone());
    assert_eq!(
        weekdays.expression(),
        "[\"0 9 * * MON-FRI\", \"0 12 * * SAT\"]"
    );
    assert!(!every("@every 1m").uses_timezone());
    assert_eq!(Schedule::union(Vec::new()), Err(ScheduleError::EmptyList));
}

#[test]
fn a_list_of_one_expression_ticks_as_the_expression_but_is_not_equal_to_it() {
    let one = list(&["*/10 * * * *"]);
    let plain = every("*/10 * * * *");
    assert_eq!(
        ticks(&one, "2026-01-01T00:00:00Z", 3),
        ticks(&plain, "2026-01-01T00:00:00Z", 3)
    );
    assert_ne!(one, plain, "the file changed, so the definition did");
}

#[test]
fn the_window_keeps_ticks_from_active_from_to_active_until_both_inclusive() {
    let window = Window {
        from: Some(utc("2026-01-01T01:00:00Z")),
        until: Some(utc("2026-01-01T02:00:00Z")),
    };
    let schedule = every("@every 30m").within(window);
    assert_eq!(
        ticks(&schedule, "2025-12-01T00:00:00Z", 5),
        [
            utc("2026-01-01T01:00:00Z"),
            utc("2026-01-01T01:30:00Z"),
            utc("2026-01-01T02:00:00Z")
        ],
        "nothing before, nothing after, and the edges count"
    );
    assert_eq!(
        schedule.latest_at_or_before(utc("2026-06-01T00:00:00Z")),
        Some(utc("2026-01-01T02:00:00Z"))
    );
    assert_eq!(
        schedule.latest_at_or_before(utc("2026-01-01T00:59:59Z")),
        None
    );
    assert_eq!(schedule.next_after(utc("2026-01-01T02:00:00Z")), None);
    assert_eq!(schedule.window(), window);
    assert_ne!(schedule, every("@every 30m"));
    // A window with a fraction of a second: a tick must not be before it.
    let late = every("@every 1s").within(Window {
        from: Some(utc("2026-01-01T00:00:00.5Z")),
        until: None,
    });
    assert_eq!(
        late.next_after(utc("2025-01-01T00:00:00Z")),
        Some(utc("2026-01-01T00:00:01Z"))
    );
}

#[test]
fn the_window_state_says_before_within_and_ended() {
    let window = Window {
        from: Some(utc("2026-01-01T01:00:00Z")),
        until: Some(utc("2026-01-01T02:00:00Z")),
    };
    assert_eq!(
        window.state(utc("2026-01-01T00:00:00Z")),
        WindowState::Before(utc("2026-01-01T01:00:00Z"))
    );
    assert_eq!(
        window.state(utc("2026-01-01T02:00:00Z")),
        WindowState::Within
    );
    assert_eq!(
        window.state(utc("2026-01-01T02:00:01Z")),
        WindowState::Ended(utc("2026-01-01T02:00:00Z"))
    );
    assert_eq!(
        Window::default().state(utc("2026-01-01T00:00:00Z")),
        WindowState::Within
    );
}

/// The cron parser is the previous release's whole `schedule` parser: it refuses an interval
/// (as an unknown alias) rather than misreading it, so a node of that release refuses the file.
#[test]
fn the_previous_releases_cron_parser_refuses_an_interval_as_an_unknown_alias() {
    for expression in ["@every 15m", "@every 1h/10m"] {
        assert!(matches!(
            CronExpr::parse(expression, Tz::UTC),
            Err(ScheduleError::UnknownAlias { .. })
        ));
    }
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn parsing_any_interval_text_never_panics(text in "[0-9a-z /.]{0,24}") {
            if let Ok(schedule) = Schedule::parse(&format!("@every {text}"), Tz::UTC) {
                let at = utc("2026-01-01T00:00:00Z");
                let _ = schedule.next_after(at);
                let _ = schedule.latest_at_or_before(at);
            }
        }

        #[test]
        fn interval_ticks_are_one_period_apart_on_the_offset_and_next_and_latest_agree(
            period in 1i64..200_000,
            offset_share in 0.0f64..1.0,
            start in -1_000_000_000i64..4_000_000_000i64,
            nanos in 0u32..1_000_000_000,
        ) {
            let offset = ((period as f64) * offset_share) as i64 % period;
            let schedule = every(&format!("@every {period}s/{offset}s"));
            let start = DateTime::from_timestamp(start, nanos).unwrap();
            let ticks: Vec<DateTime<Utc>> = schedule.ticks_after(start).take(4).collect();
            prop_assert!(ticks[0] > start);
            prop_assert!(ticks[0] - start <= TimeDelta::seconds(period));
            for pair in ticks.windows(2) {
                prop_assert_eq!(pair[1] - pair[0], TimeDelta::seconds(period));
            }
            for tick in &ticks {
                prop_assert_eq!((tick.timestamp() - offset).rem_euclid(period), 0);
                prop_assert_eq!(schedule.latest_at_or_before(*tick), Some(*tick));
            }
            prop_assert_eq!(
                schedule.latest_at_or_before(ticks[1] - TimeDelta::nanoseconds(1)),
                Some(ticks[0])
            );
        }
    }
}
