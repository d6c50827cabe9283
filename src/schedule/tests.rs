use super::*;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn next_n(expr: &str, tz: &str, after: &str, n: usize) -> Vec<String> {
    let schedule = Schedule::parse(expr, parse_timezone(tz).unwrap()).unwrap();
    schedule
        .ticks_after(utc(after))
        .take(n)
        .map(|t| t.with_timezone(&schedule.timezone()).to_rfc3339())
        .collect()
}

#[test]
fn five_fields_fire_at_minute_granularity_in_utc() {
    assert_eq!(
        next_n("30 2 * * *", "UTC", "2026-01-01T00:00:00Z", 2),
        ["2026-01-01T02:30:00+00:00", "2026-01-02T02:30:00+00:00"]
    );
}

#[test]
fn six_fields_have_seconds_first() {
    assert_eq!(
        next_n("*/20 * * * * *", "UTC", "2026-01-01T00:00:00Z", 3),
        [
            "2026-01-01T00:00:20+00:00",
            "2026-01-01T00:00:40+00:00",
            "2026-01-01T00:01:00+00:00"
        ]
    );
}

#[test]
fn day_of_week_one_is_monday_and_seven_is_sunday() {
    // 2026-01-05 is a Monday.
    assert_eq!(
        next_n("0 9 * * 1", "UTC", "2026-01-01T00:00:00Z", 1),
        ["2026-01-05T09:00:00+00:00"]
    );
    assert_eq!(
        next_n("0 9 * * 7", "UTC", "2026-01-01T00:00:00Z", 1),
        ["2026-01-04T09:00:00+00:00"]
    );
}

#[test]
fn day_of_month_and_day_of_week_combine_with_or_like_cronie() {
    // The 13th, or any Friday: 2026-02-06 (Fri), 2026-02-13 (Fri and 13th), 2026-02-20 (Fri).
    assert_eq!(
        next_n("0 0 13 * FRI", "UTC", "2026-02-01T00:00:00Z", 4),
        [
            "2026-02-06T00:00:00+00:00",
            "2026-02-13T00:00:00+00:00",
            "2026-02-20T00:00:00+00:00",
            "2026-02-27T00:00:00+00:00"
        ]
    );
    // Mar 2026: Friday the 6th before the 13th (also a Friday).
    assert_eq!(
        next_n("0 0 1 * MON", "UTC", "2026-03-01T12:00:00Z", 3),
        [
            "2026-03-02T00:00:00+00:00",
            "2026-03-09T00:00:00+00:00",
            "2026-03-16T00:00:00+00:00"
        ]
    );
}

#[test]
fn star_slash_two_day_of_month_with_monday_fires_on_mondays_on_odd_days_as_cronie() {
    // `*/2` starts with `*`, so cronie reads the day fields with AND: Mondays that are odd
    // days of the month (2026-01-05, 01-19, 02-09), not every odd day and every Monday.
    assert_eq!(
        next_n("0 0 */2 * MON", "UTC", "2026-01-01T00:00:00Z", 4),
        [
            "2026-01-05T00:00:00+00:00",
            "2026-01-19T00:00:00+00:00",
            "2026-02-09T00:00:00+00:00",
            "2026-02-23T00:00:00+00:00"
        ]
    );
}

#[test]
fn first_of_month_with_star_slash_two_day_of_week_fires_on_firsts_that_are_even_weekdays_as_cronie()
{
    // `*/2` in day-of-week is Sunday, Tuesday, Thursday, Saturday; with AND only the 1sts
    // that fall on one of them: 2026-01-01 (Thu), 02-01 (Sun), 03-01 (Sun), 08-01 (Sat).
    assert_eq!(
        next_n("0 0 1 * */2", "UTC", "2025-12-31T12:00:00Z", 4),
        [
            "2026-01-01T00:00:00+00:00",
            "2026-02-01T00:00:00+00:00",
            "2026-03-01T00:00:00+00:00",
            "2026-08-01T00:00:00+00:00"
        ]
    );
}

#[test]
fn day_fields_combine_with_and_when_either_starts_with_a_star_or_question_mark() {
    // `?` counts as `*`: `*/2 ? ...` is the same AND as above, in the six-field form too.
    for expression in ["0 0 0 */2 * MON", "0 0 */2 * 1", "0 0 ?/2 * MON"] {
        assert_eq!(
            next_n(expression, "UTC", "2026-01-01T00:00:00Z", 2),
            ["2026-01-05T00:00:00+00:00", "2026-01-19T00:00:00+00:00"],
            "{expression}"
        );
    }
    // A list whose text starts with `*` is unrestricted as far as the rule goes (cronie
    // looks at the first character only), so `*,3` with Monday is Mondays.
    assert_eq!(
        next_n("0 0 *,3 * MON", "UTC", "2026-01-01T00:00:00Z", 2),
        ["2026-01-05T00:00:00+00:00", "2026-01-12T00:00:00+00:00"]
    );
    // Both fields starting with `*`: AND of both.
    assert_eq!(
        next_n("0 0 */10 * */3", "UTC", "2026-01-01T00:00:00Z", 3),
        [
            "2026-01-11T00:00:00+00:00",
            "2026-01-21T00:00:00+00:00",
            "2026-01-31T00:00:00+00:00"
        ]
    );
    // Neither starting with `*`: OR, also with a range in day-of-month.
    assert_eq!(
        next_n("0 0 1-2 * MON", "UTC", "2025-12-31T12:00:00Z", 3),
        [
            "2026-01-01T00:00:00+00:00",
            "2026-01-02T00:00:00+00:00",
            "2026-01-05T00:00:00+00:00"
        ]
    );
}

#[test]
fn last_day_nearest_weekday_and_nth_weekday() {
    assert_eq!(
        next_n("0 0 L * *", "UTC", "2026-02-01T00:00:00Z", 2),
        ["2026-02-28T00:00:00+00:00", "2026-03-31T00:00:00+00:00"]
    );
    // 2026-02-15 is a Sunday: 15W is Monday the 16th. 2026-03-15 is a Sunday too.
    assert_eq!(
        next_n("0 0 15W * *", "UTC", "2026-02-01T00:00:00Z", 2),
        ["2026-02-16T00:00:00+00:00", "2026-03-16T00:00:00+00:00"]
    );
    // Second Friday of the month.
    assert_eq!(
        next_n("0 0 * * 5#2", "UTC", "2026-02-01T00:00:00Z", 2),
        ["2026-02-13T00:00:00+00:00", "2026-03-13T00:00:00+00:00"]
    );
    // Last Friday of the month.
    assert_eq!(
        next_n("0 0 * * 5L", "UTC", "2026-02-01T00:00:00Z", 1),
        ["2026-02-27T00:00:00+00:00"]
    );
    // ? is * in the day fields.
    assert_eq!(
        next_n("0 0 ? * MON", "UTC", "2026-02-01T00:00:00Z", 1),
        ["2026-02-02T00:00:00+00:00"]
    );
}

#[test]
fn month_and_day_names_are_accepted() {
    assert_eq!(
        next_n("0 12 * jan-feb sat", "UTC", "2026-01-01T00:00:00Z", 1),
        ["2026-01-03T12:00:00+00:00"]
    );
}

#[test]
fn aliases_expand_like_cronie() {
    for (alias, expect) in [
        ("@yearly", "2027-01-01T00:00:00+00:00"),
        ("@annually", "2027-01-01T00:00:00+00:00"),
        ("@monthly", "2026-06-01T00:00:00+00:00"),
        ("@weekly", "2026-05-17T00:00:00+00:00"),
        ("@daily", "2026-05-16T00:00:00+00:00"),
        ("@midnight", "2026-05-16T00:00:00+00:00"),
        ("@hourly", "2026-05-15T11:00:00+00:00"),
    ] {
        assert_eq!(
            next_n(alias, "UTC", "2026-05-15T10:30:00Z", 1),
            [expect],
            "{alias}"
        );
    }
}

#[test]
fn reboot_is_refused_with_a_reason() {
    let error = Schedule::parse("@reboot", Tz::UTC).unwrap_err();
    assert!(
        error.to_string().contains("@reboot is not supported"),
        "{error}"
    );
    assert!(error.to_string().contains("systemd"), "{error}");
}

#[test]
fn a_wrong_field_is_named_with_what_it_allows() {
    let error = Schedule::parse("0 25 * * *", Tz::UTC).unwrap_err();
    assert_eq!(
        error,
        ScheduleError::Field {
            field: "hour",
            value: "25".into(),
            allowed: FIELDS[2].1
        }
    );
    assert!(
        error
            .to_string()
            .starts_with("hour field \"25\" is invalid; allowed: 0-23")
    );
    let error = Schedule::parse("0 0 * * MOO", Tz::UTC).unwrap_err();
    assert!(
        error.to_string().starts_with("day-of-week field \"MOO\""),
        "{error}"
    );
    let error = Schedule::parse("61 * * * * *", Tz::UTC).unwrap_err();
    assert!(
        error.to_string().starts_with("second field \"61\""),
        "{error}"
    );
    let error = Schedule::parse("0 0 32 * *", Tz::UTC).unwrap_err();
    assert!(
        error.to_string().starts_with("day-of-month field \"32\""),
        "{error}"
    );
    let error = Schedule::parse("0 0 1 13 *", Tz::UTC).unwrap_err();
    assert!(
        error.to_string().starts_with("month field \"13\""),
        "{error}"
    );
}

#[test]
fn plus_prefix_in_day_of_week_is_refused_since_cronie_has_no_such_syntax() {
    // croner reads `+MON` as "combine the day fields with AND"; zkcron decides that by
    // cronie's rule alone, so the prefix is an error rather than a second, hidden rule.
    let error = Schedule::parse("0 0 1 * +MON", Tz::UTC).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("day-of-week field \"+MON\" is invalid"),
        "{error}"
    );
}

#[test]
fn a_day_name_in_the_month_field_is_refused_not_read_as_june() {
    let error = Schedule::parse("0 0 * SAT *", Tz::UTC).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("month field \"SAT\" is invalid"),
        "{error}"
    );
    let error = Schedule::parse("0 0 * * JAN", Tz::UTC).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("day-of-week field \"JAN\" is invalid"),
        "{error}"
    );
    let error = Schedule::parse("0 mon * * *", Tz::UTC).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("hour field \"mon\" is invalid"),
        "{error}"
    );
    // Names in their own fields, in any case, still work.
    assert!(Schedule::parse("0 0 * jan-Mar sat,SUN", Tz::UTC).is_ok());
}

#[test]
fn field_count_and_unknown_aliases_are_explained() {
    let error = Schedule::parse("* * *", Tz::UTC).unwrap_err();
    assert!(error.to_string().contains("expected 5 fields"), "{error}");
    assert!(error.to_string().contains("found 3"), "{error}");
    let error = Schedule::parse("@fortnightly", Tz::UTC).unwrap_err();
    assert!(
        error.to_string().contains("unknown alias \"@fortnightly\""),
        "{error}"
    );
    let error = Schedule::parse("  ", Tz::UTC).unwrap_err();
    assert_eq!(error, ScheduleError::Empty);
}

#[test]
fn an_expression_that_never_fires_is_refused() {
    let error = Schedule::parse("0 0 31 2 *", Tz::UTC).unwrap_err();
    assert!(error.to_string().contains("never fires"), "{error}");
}

#[test]
fn unknown_time_zones_get_a_suggestion() {
    let error = parse_timezone("Europe/Berln").unwrap_err();
    assert!(
        error.to_string().contains("did you mean \"Europe/Berlin\""),
        "{error}"
    );
    let error = parse_timezone("europe/berlin").unwrap_err();
    assert!(
        error.to_string().contains("did you mean \"Europe/Berlin\""),
        "{error}"
    );
    let error = parse_timezone("Mars/Olympus").unwrap_err();
    assert!(error.to_string().contains("use an IANA name"), "{error}");
}

// DST: fixed-time jobs in a spring-forward gap fire at the first valid instant after it;
// a repeated local time fires once; interval jobs keep real-time spacing.

#[test]
fn new_york_spring_forward_gap_fires_at_first_valid_instant() {
    // 2026-03-08 02:00 EST -> 03:00 EDT. 02:30 does not exist.
    assert_eq!(
        next_n("30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z", 3),
        [
            "2026-03-08T03:00:00-04:00",
            "2026-03-09T02:30:00-04:00",
            "2026-03-10T02:30:00-04:00"
        ]
    );
}

#[test]
fn new_york_fall_back_repeated_time_fires_once() {
    // 2026-11-01 02:00 EDT -> 01:00 EST. 01:30 happens twice and fires at the first.
    assert_eq!(
        next_n("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", 3),
        [
            "2026-11-01T01:30:00-04:00",
            "2026-11-02T01:30:00-05:00",
            "2026-11-03T01:30:00-05:00"
        ]
    );
}

#[test]
fn berlin_interval_job_keeps_real_time_spacing_through_both_changes() {
    // 2026-03-29 02:00 CET -> 03:00 CEST: hourly ticks go 01:00+01, 03:00+02 (one real hour).
    assert_eq!(
        next_n("0 * * * *", "Europe/Berlin", "2026-03-28T23:30:00Z", 3),
        [
            "2026-03-29T01:00:00+01:00",
            "2026-03-29T03:00:00+02:00",
            "2026-03-29T04:00:00+02:00"
        ]
    );
    // 2026-10-25 03:00 CEST -> 02:00 CET: the 02:00 hour happens twice and an hourly job
    // fires in both (they are distinct real instants).
    assert_eq!(
        next_n("0 * * * *", "Europe/Berlin", "2026-10-24T23:30:00Z", 3),
        [
            "2026-10-25T02:00:00+02:00",
            "2026-10-25T02:00:00+01:00",
            "2026-10-25T03:00:00+01:00"
        ]
    );
}

#[test]
fn berlin_fixed_time_in_gap_and_overlap() {
    assert_eq!(
        next_n("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z", 2),
        ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]
    );
    assert_eq!(
        next_n("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", 2),
        ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]
    );
}

#[test]
fn lord_howe_half_hour_shift() {
    // Lord Howe moves 30 minutes: 2026-10-04 02:00 +10:30 -> 02:30 +11:00, so 02:15 is
    // skipped; 2026-04-05 02:00 +11:00 -> 01:30 +10:30, so 01:45 happens twice.
    assert_eq!(
        next_n(
            "15 2 * * *",
            "Australia/Lord_Howe",
            "2026-10-03T00:00:00Z",
            2
        ),
        ["2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"]
    );
    assert_eq!(
        next_n(
            "45 1 * * *",
            "Australia/Lord_Howe",
            "2026-04-04T00:00:00Z",
            2
        ),
        ["2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"]
    );
}

// cronie sorts jobs by text: a job with no second, minute or hour field starting with `*` is
// fixed-time even when a field lists several values. croner called only single values
// fixed, so these lost a tick in a gap and fired twice in a repeat.

#[test]
fn minute_list_without_star_in_a_spring_forward_gap_fires_after_the_gap_as_cronie() {
    // 02:00 and 02:30 do not exist on 2026-03-08 in New York; both fire, as one tick, at
    // 03:00 EDT.
    assert_eq!(
        next_n(
            "0,30 2 * * *",
            "America/New_York",
            "2026-03-07T12:00:00Z",
            3
        ),
        [
            "2026-03-08T03:00:00-04:00",
            "2026-03-09T02:00:00-04:00",
            "2026-03-09T02:30:00-04:00"
        ]
    );
    // A range of minutes in Chatham's gap (02:45 -> 03:45 on 2026-09-27).
    assert_eq!(
        next_n("0-1 3 * * *", "Pacific/Chatham", "2026-09-26T00:00:00Z", 2),
        ["2026-09-27T03:45:00+13:45", "2026-09-28T03:00:00+13:45"]
    );
}

#[test]
fn minute_list_without_star_fires_once_in_a_repeated_hour_as_cronie() {
    // 01:00-02:00 happens twice on 2026-11-01 in New York: the first pass only.
    assert_eq!(
        next_n(
            "0,30 1 * * *",
            "America/New_York",
            "2026-11-01T04:00:00Z",
            3
        ),
        [
            "2026-11-01T01:00:00-04:00",
            "2026-11-01T01:30:00-04:00",
            "2026-11-02T01:00:00-05:00"
        ]
    );
}

#[test]
fn hour_range_without_star_fires_once_in_a_repeated_hour_as_cronie() {
    // 02:00-03:00 happens twice on 2026-10-25 in Berlin.
    assert_eq!(
        next_n("0 1-3 * * *", "Europe/Berlin", "2026-10-24T22:00:00Z", 4),
        [
            "2026-10-25T01:00:00+02:00",
            "2026-10-25T02:00:00+02:00",
            "2026-10-25T03:00:00+01:00",
            "2026-10-26T01:00:00+01:00"
        ]
    );
}

#[test]
fn latest_at_or_before_on_the_second_pass_of_a_repeat_sees_the_whole_first_pass() {
    let new_york = parse_timezone("America/New_York").unwrap();
    // 01:10 EST, on the second pass: a fixed-time job's newest tick is 01:30 EDT, a local
    // time after 01:10 that already happened on the first pass.
    let fixed = Schedule::parse("0,30 1 * * *", new_york).unwrap();
    assert_eq!(
        fixed.latest_at_or_before(utc("2026-11-01T06:10:00Z")),
        Some(utc("2026-11-01T05:30:00Z"))
    );
    // A wildcard job fired again at 01:00 EST.
    let wildcard = Schedule::parse("*/30 1 * * *", new_york).unwrap();
    assert_eq!(
        wildcard.latest_at_or_before(utc("2026-11-01T06:10:00Z")),
        Some(utc("2026-11-01T06:00:00Z"))
    );
    // And on the first pass, at 01:45 EDT, the next tick is 01:00 EST, before 02:00 EST.
    assert_eq!(
        wildcard.next_after(utc("2026-11-01T05:45:00Z")),
        Some(utc("2026-11-01T06:00:00Z"))
    );
}

#[test]
fn zone_without_dst_is_a_fixed_offset() {
    assert_eq!(
        next_n("30 2 * * *", "Asia/Tokyo", "2026-03-07T00:00:00Z", 2),
        ["2026-03-08T02:30:00+09:00", "2026-03-09T02:30:00+09:00"]
    );
}

#[test]
fn identical_expressions_share_one_parse() {
    let a = Schedule::parse("17 3 * * *", Tz::UTC).unwrap();
    let b = Schedule::parse("17 3 * * *", "Europe/Berlin".parse().unwrap()).unwrap();
    // The cache is keyed by this text (see `parsed`'s own tests).
    assert_eq!(a.expanded(), b.expanded());
    assert_ne!(a, b, "the zone still tells them apart");
}

/// Issue [5] item 7: every schedule kept croner's parse (a 5,001-byte year bitmap), 50 MB for
/// 10,000 tasks with distinct expressions. A schedule keeps its text; the parses in use are
/// bounded, and a schedule whose parse was dropped still gives its ticks.
#[test]
fn schedules_keep_no_parse_and_one_whose_parse_was_dropped_still_ticks() {
    assert!(
        std::mem::size_of::<Schedule>() <= 64,
        "{} bytes",
        std::mem::size_of::<Schedule>()
    );
    let after = utc("2026-01-01T00:00:00Z");
    let schedules: Vec<Schedule> = (0..3 * parsed::CAPACITY)
        .map(|i| Schedule::parse(&format!("{} {} 4 * * *", i % 60, i / 60), Tz::UTC).unwrap())
        .collect();
    assert!(parsed::cached() <= parsed::CAPACITY);
    for (i, schedule) in schedules.iter().enumerate() {
        assert_eq!(
            schedule.next_after(after),
            Some(after + TimeDelta::seconds((4 * 3600 + (i / 60) * 60 + i % 60) as i64)),
            "{schedule:?}"
        );
    }
}

#[test]
fn latest_at_or_before_is_inclusive() {
    let schedule = Schedule::parse("*/10 * * * *", Tz::UTC).unwrap();
    assert_eq!(
        schedule.latest_at_or_before(utc("2026-01-01T00:20:00Z")),
        Some(utc("2026-01-01T00:20:00Z"))
    );
    assert_eq!(
        schedule.latest_at_or_before(utc("2026-01-01T00:29:59Z")),
        Some(utc("2026-01-01T00:20:00Z"))
    );
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn parsing_never_panics(expression in ".{0,64}") {
            let _ = Schedule::parse(&expression, Tz::UTC);
        }

        #[test]
        fn parsing_cron_like_strings_never_panics(
            fields in proptest::collection::vec("[0-9*/,LW#?A-Za-z-]{1,6}", 1..8)
        ) {
            let _ = Schedule::parse(&fields.join(" "), Tz::UTC);
        }

        #[test]
        fn successive_ticks_strictly_increase(
            minute in prop_oneof![Just("*".to_string()), (0u32..60).prop_map(|m| m.to_string()), (1u32..30).prop_map(|s| format!("*/{s}"))],
            hour in prop_oneof![Just("*".to_string()), (0u32..24).prop_map(|h| h.to_string())],
            dom in prop_oneof![Just("*".to_string()), (1u32..29).prop_map(|d| d.to_string()), Just("L".to_string())],
            dow in prop_oneof![Just("*".to_string()), (0u32..8).prop_map(|d| d.to_string())],
            zone in prop_oneof![Just("UTC"), Just("Europe/Berlin"), Just("America/New_York"), Just("Australia/Lord_Howe")],
            start in 1_700_000_000i64..1_900_000_000i64,
        ) {
            let expression = format!("{minute} {hour} {dom} * {dow}");
            let schedule = Schedule::parse(&expression, parse_timezone(zone).unwrap()).unwrap();
            let start = DateTime::from_timestamp(start, 0).unwrap();
            let mut previous = start;
            for tick in schedule.ticks_after(start).take(20) {
                prop_assert!(tick > previous, "{expression} in {zone}: {tick} after {previous}");
                previous = tick;
            }
        }
    }
}

/// 100,000 task files over 3,600 expressions made 100,000 croner parses at each load: an
/// expression found to parse and fire in a zone is not parsed again for the next task, which
/// gets the same schedule; one that never fires is refused every time, with its message.
#[test]
fn an_expression_checked_once_gives_the_same_schedule_and_a_bad_one_is_refused_each_time() {
    for _ in 0..2 {
        let error = Schedule::parse("0 0 31 2 *", Tz::UTC).unwrap_err();
        assert!(
            matches!(error, ScheduleError::NeverFires { .. }),
            "{error:?}"
        );
    }
    let after = utc("2026-01-01T00:00:00Z");
    let first = Schedule::parse("7 5 3 * * *", Tz::UTC).unwrap();
    let again = Schedule::parse("7 5 3 * * *", Tz::UTC).unwrap();
    let berlin = Schedule::parse("7 5 3 * * *", "Europe/Berlin".parse().unwrap()).unwrap();
    assert_eq!(first, again);
    assert_eq!(first.next_after(after), again.next_after(after));
    assert_eq!(again.next_after(after), Some(utc("2026-01-01T03:05:07Z")));
    assert_eq!(berlin.next_after(after), Some(utc("2026-01-01T02:05:07Z")));
}
