use super::*;
use crate::schedule::Schedule;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn local(s: &str) -> NaiveDateTime {
    NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M").unwrap()
}

fn holidays() -> Arc<Calendar> {
    Arc::new(Calendar {
        name: "holidays".into(),
        timezone: Tz::Europe__Berlin,
        dates: vec![
            NaiveDate::from_ymd_opt(2026, 12, 25).unwrap(),
            NaiveDate::from_ymd_opt(2026, 12, 26).unwrap(),
        ],
        periods: vec![(local("2026-12-31T18:00"), local("2027-01-02T00:00"))],
    })
}

#[test]
fn a_day_is_excluded_whole_in_the_calendar_s_zone_and_touching_days_are_one_stretch() {
    let calendar = holidays();
    // 2026-12-25 00:00 in Berlin is 2026-12-24T23:00Z; the 25th and 26th touch.
    assert_eq!(
        calendar.excluded_at(utc("2026-12-25T12:00:00Z")),
        Some((utc("2026-12-24T23:00:00Z"), utc("2026-12-26T23:00:00Z")))
    );
    assert!(!calendar.excludes(utc("2026-12-24T22:59:59Z")));
    assert!(calendar.excludes(utc("2026-12-24T23:00:00Z")));
    assert!(!calendar.excludes(utc("2026-12-26T23:00:00Z")));
}

#[test]
fn a_period_is_half_open() {
    let calendar = holidays();
    assert!(!calendar.excludes(utc("2026-12-31T16:59:59Z")));
    assert!(calendar.excludes(utc("2026-12-31T17:00:00Z")));
    assert!(calendar.excludes(utc("2027-01-01T22:59:59Z")));
    assert!(!calendar.excludes(utc("2027-01-01T23:00:00Z")));
}

#[test]
fn a_schedule_passes_over_the_excluded_days_and_periods() {
    let daily = Schedule::parse("0 9 * * *", Tz::Europe__Berlin)
        .unwrap()
        .excluding(vec![holidays()]);
    let ticks: Vec<DateTime<Utc>> = daily
        .ticks_after(utc("2026-12-23T00:00:00Z"))
        .take(4)
        .collect();
    assert_eq!(
        ticks,
        [
            utc("2026-12-23T08:00:00Z"),
            utc("2026-12-24T08:00:00Z"),
            utc("2026-12-27T08:00:00Z"),
            utc("2026-12-28T08:00:00Z"),
        ]
    );
    assert_eq!(
        daily.latest_at_or_before(utc("2026-12-26T12:00:00Z")),
        Some(utc("2026-12-24T08:00:00Z"))
    );
    // Every minute: the first tick after the New Year period is at its end.
    let minutely = Schedule::parse("* * * * *", Tz::UTC)
        .unwrap()
        .excluding(vec![holidays()]);
    assert_eq!(
        minutely.next_after(utc("2026-12-31T17:00:00Z")),
        Some(utc("2027-01-01T23:00:00Z"))
    );
    // The schedule without its calendars has them all.
    assert_eq!(
        minutely
            .without_exclusions()
            .next_after(utc("2026-12-31T17:00:00Z")),
        Some(utc("2026-12-31T17:01:00Z"))
    );
}

#[test]
fn a_period_that_starts_in_a_spring_forward_gap_starts_at_the_gap_s_end() {
    let calendar = Calendar {
        name: "freeze".into(),
        timezone: Tz::Europe__Berlin,
        dates: vec![],
        periods: vec![(local("2026-03-29T02:30"), local("2026-03-29T04:00"))],
    };
    assert_eq!(
        calendar.excluded_at(utc("2026-03-29T01:30:00Z")),
        Some((utc("2026-03-29T01:00:00Z"), utc("2026-03-29T02:00:00Z")))
    );
}

/// A review found a period ending inside a fall-back hour sending the walk backwards: the
/// stretch of a tick on the second pass was the first pass's, which did not hold it.
#[test]
fn a_period_in_a_repeated_hour_excludes_both_passes_and_the_walk_moves_forward() {
    let calendar = Arc::new(Calendar {
        name: "night".into(),
        timezone: Tz::America__New_York,
        dates: vec![],
        periods: vec![(local("2026-11-01T01:00"), local("2026-11-01T01:30"))],
    });
    // 01:00 EDT is 05:00Z, 01:00 EST 06:00Z: both passes are excluded; the second pass's
    // stretch starts at the change.
    assert_eq!(
        calendar.excluded_at(utc("2026-11-01T06:10:00Z")),
        Some((utc("2026-11-01T06:00:00Z"), utc("2026-11-01T06:30:00Z")))
    );
    assert!(calendar.excludes(utc("2026-11-01T05:10:00Z")));
    let quarterly = Schedule::parse("*/15 * * * *", Tz::America__New_York)
        .unwrap()
        .excluding(vec![calendar]);
    let ticks: Vec<DateTime<Utc>> = quarterly
        .ticks_after(utc("2026-11-01T04:50:00Z"))
        .take_while(|t| *t < utc("2026-11-01T07:00:00Z"))
        .collect();
    assert_eq!(
        ticks,
        [
            utc("2026-11-01T05:30:00Z"),
            utc("2026-11-01T05:45:00Z"),
            utc("2026-11-01T06:30:00Z"),
            utc("2026-11-01T06:45:00Z"),
        ]
    );
    assert!(ticks.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(
        quarterly.latest_at_or_before(utc("2026-11-01T06:20:00Z")),
        Some(utc("2026-11-01T05:45:00Z"))
    );
}
