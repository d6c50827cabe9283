//! Task files that say when a task runs beyond one cron expression: `@every` intervals, a
//! `schedule` list, `active_from` / `active_until`, and `timezone` next to them. What zkcron
//! makes of each form, and every mistake's message with its line, column and fix, through the
//! public API. Each test is given / when / then.
//!
//! A node of the previous release refuses these files rather than misreading them: it knew
//! neither window key (unknown keys are errors), took `schedule` only as a string ("`schedule`
//! must be a string"), and read every string with the cron parser, which refuses `@every` as
//! an unknown alias (`schedule::cron`, tested by
//! `the_previous_releases_cron_parser_refuses_an_interval_as_an_unknown_alias`).

mod common;

use std::path::Path;

use chrono::{DateTime, Utc};
use zkcron::schedule::{DstChoice, DstGap, DstRepeat, Window};
use zkcron::task::{TaskBackend, TaskDefaults, TaskFileError, TaskSpec, parse_task};

fn defaults() -> TaskDefaults {
    common::task_defaults(common::root_identity(), TaskBackend::Local)
}

fn parse(text: &str) -> Result<TaskSpec, Vec<TaskFileError>> {
    parse_task("t", Path::new("/jobs/t.toml"), text, &defaults())
}

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

#[track_caller]
fn only_error(text: &str) -> TaskFileError {
    let errors = parse(text).expect_err("the task should be refused");
    assert_eq!(errors.len(), 1, "expected one error, got: {errors:#?}");
    errors.into_iter().next().unwrap()
}

/// The error's position, message (a part of it) and help (a part of it).
#[track_caller]
fn assert_error(error: &TaskFileError, at: (usize, usize), message: &str, help: &str) {
    assert!(
        error.message.contains(message),
        "message {:?} lacks {message:?}",
        error.message
    );
    assert_eq!(
        (error.line, error.column),
        at,
        "position of {:?}",
        error.message
    );
    let shown = error.help.as_deref().unwrap_or_default();
    assert!(shown.contains(help), "help {shown:?} lacks {help:?}");
}

// ---------------------------------------------------------------------------------------------
// What is accepted

#[test]
fn an_interval_a_list_and_a_window_are_read_into_the_spec() {
    // Given a task with an interval in a list next to cron expressions, and a window,
    let spec = parse(
        "schedule = [\"0 9 * * MON-FRI\", \"@every 6h/30m\", \"0 12 * * SAT\"]\n\
         command = \"true\"\n\
         timezone = \"Europe/Berlin\"\n\
         active_from = \"2026-12-01T00:00:00+01:00\"\n\
         active_until = 2027-01-01T00:00:00Z\n",
    )
    .unwrap();
    // then each expression is kept, the zone applies to the cron ones, and the window is UTC.
    assert_eq!(
        spec.schedule.expressions(),
        ["0 9 * * MON-FRI", "@every 6h/30m", "0 12 * * SAT"]
    );
    assert_eq!(spec.schedule.timezone(), chrono_tz::Europe::Berlin);
    assert_eq!(
        spec.schedule.window(),
        Window {
            from: Some(utc("2026-11-30T23:00:00Z")),
            until: Some(utc("2027-01-01T00:00:00Z")),
        }
    );
    // The first tick is the interval's first from active_from (23:00 UTC): 00:30 UTC, before
    // 09:00 in Berlin on Tuesday 2026-12-01 (08:00 UTC).
    assert_eq!(
        spec.schedule.next_after(utc("2026-01-01T00:00:00Z")),
        Some(utc("2026-12-01T00:30:00Z"))
    );
    assert_eq!(
        spec.schedule.next_after(utc("2026-12-01T06:30:00Z")),
        Some(utc("2026-12-01T08:00:00Z"))
    );
}

#[test]
fn an_interval_alone_takes_the_default_zone_without_complaint() {
    let spec = parse("schedule = \"@every 15m\"\ncommand = \"true\"\n").unwrap();
    assert_eq!(spec.schedule.expression(), "@every 15m");
    assert!(!spec.schedule.is_list());
    assert_eq!(spec.schedule.window(), Window::default());
}

// ---------------------------------------------------------------------------------------------
// Mistakes in `schedule`

#[test]
fn a_malformed_interval_points_at_the_expression_and_says_what_to_write() {
    let cases = [
        ("@every 15x", "invalid interval \"15x\"", "1h30m"),
        ("@every", "\"@every\" needs an interval", "@every 1h/10m"),
        ("@every 500ms", "is not a whole number of seconds", "\"1s\""),
        (
            "@every 0s",
            "the interval of \"@every 0s\" is zero",
            "@every 1s",
        ),
        (
            "@every 1h/1h",
            "the offset \"1h\" of \"@every 1h/1h\" is not smaller",
            "1h/10m",
        ),
    ];
    for (expression, message, fix) in cases {
        let error = only_error(&format!(
            "schedule = \"{expression}\"\ncommand = \"true\"\n"
        ));
        // The fix is part of the message: a schedule error has no separate help line.
        assert_error(&error, (1, 12), message, "");
        assert!(
            error.message.contains(fix),
            "{:?} lacks {fix:?}",
            error.message
        );
    }
}

#[test]
fn a_bad_entry_of_a_list_points_at_that_entry_and_its_field() {
    // Given a list on several lines whose second entry has an hour of 25,
    let error = only_error(
        "schedule = [\n  \"0 9 * * MON-FRI\",\n  \"0 25 * * SAT\",\n]\ncommand = \"true\"\n",
    );
    // then the caret is on that field, in that entry's line.
    assert_error(&error, (3, 6), "hour field \"25\" is invalid", "");
    assert_eq!(error.snippet, "  \"0 25 * * SAT\",");
}

#[test]
fn each_bad_entry_of_a_list_is_reported_where_it_is() {
    let errors = parse(
        "schedule = [\n  \"@every 1h/2h\",\n  \"0 9 * * MON-FRI\",\n  \"@reboot\",\n]\ncommand = \"true\"\n",
    )
    .unwrap_err();
    let positions: Vec<_> = errors.iter().map(|e| (e.line, e.column)).collect();
    assert_eq!(positions, [(2, 3), (4, 3)], "{errors:#?}");
    assert!(errors[1].message.contains("@reboot is not supported"));
}

#[test]
fn an_entry_that_is_not_a_string_is_refused_with_a_quote_it_fix() {
    let error = only_error("schedule = [\"@daily\", 5]\ncommand = \"true\"\n");
    assert_error(
        &error,
        (1, 23),
        "every element of `schedule` must be a string, found integer 5",
        "quote it: \"5\"",
    );
}

#[test]
fn an_empty_list_is_refused() {
    let error = only_error("schedule = []\ncommand = \"true\"\n");
    assert_error(&error, (1, 12), "the schedule list is empty", "");
    assert!(error.message.contains("[\"0 9 * * MON-FRI\"]"));
}

#[test]
fn a_schedule_of_another_type_names_both_forms() {
    let error = only_error("schedule = 5\ncommand = \"true\"\n");
    assert_error(
        &error,
        (1, 12),
        "`schedule` must be a string or an array of strings, found integer 5",
        "schedule = [\"0 9 * * MON-FRI\", \"0 12 * * SAT\"]",
    );
}

#[test]
fn a_timezone_next_to_intervals_only_is_refused_and_next_to_a_cron_expression_is_not() {
    // Given a zone set next to an interval alone, it is an error at the zone:
    let error =
        only_error("schedule = \"@every 1d\"\ncommand = \"true\"\ntimezone = \"Europe/Berlin\"\n");
    assert_error(
        &error,
        (3, 12),
        "`timezone` has no effect on `@every` intervals",
        "\"@every 1d/7h\"",
    );
    // next to a list holding a cron expression it reads that expression.
    parse(
        "schedule = [\"@every 1d\", \"0 9 * * *\"]\ncommand = \"true\"\ntimezone = \"Europe/Berlin\"\n",
    )
    .unwrap();
}

// ---------------------------------------------------------------------------------------------
// Mistakes in the window

#[test]
fn an_instant_that_is_not_rfc_3339_points_at_the_value_with_an_example() {
    let error = only_error(
        "schedule = \"@daily\"\ncommand = \"true\"\nactive_from = \"2026-13-01T00:00:00Z\"\n",
    );
    assert_error(
        &error,
        (3, 15),
        "`active_from` = \"2026-13-01T00:00:00Z\" is not an RFC 3339 instant",
        "like \"2026-12-01T00:00:00Z\"",
    );
    let error = only_error("schedule = \"@daily\"\ncommand = \"true\"\nactive_until = 20261201\n");
    assert_error(
        &error,
        (3, 16),
        "`active_until` must be an RFC 3339 instant, found integer 20261201",
        "2026-12-01T00:00:00Z",
    );
}

#[test]
fn a_toml_date_time_without_an_offset_is_refused_as_ambiguous() {
    let error = only_error(
        "schedule = \"@daily\"\ncommand = \"true\"\nactive_from = 2026-12-01T00:00:00\n",
    );
    assert_error(
        &error,
        (3, 15),
        "has no UTC offset",
        "active_from = 2026-12-01T00:00:00Z",
    );
}

#[test]
fn a_window_that_ends_before_it_starts_is_refused_at_active_until() {
    let error = only_error(
        "schedule = \"@daily\"\ncommand = \"true\"\nactive_from = \"2026-12-01T00:00:00Z\"\n\
         active_until = \"2026-12-01T00:00:00Z\"\n",
    );
    assert_error(
        &error,
        (4, 16),
        "`active_until` (2026-12-01T00:00:00Z) is not after `active_from` (2026-12-01T00:00:00Z)",
        "make `active_until` later than `active_from`",
    );
}

#[test]
fn a_misspelt_window_key_suggests_the_right_one() {
    let error = only_error(
        "schedule = \"@daily\"\ncommand = \"true\"\nactive_form = \"2026-12-01T00:00:00Z\"\n",
    );
    assert_error(
        &error,
        (3, 1),
        "unknown key `active_form`",
        "did you mean `active_from`?",
    );
}

// ---------------------------------------------------------------------------------------------
// The DST rule a task chooses

#[test]
fn dst_keys_choose_the_rule_and_change_the_definition() {
    // Given cronie's rule by default, a task that sets both keys reads them,
    let cronie =
        parse("schedule = \"30 2 * * *\"\ncommand = \"true\"\ntimezone = \"Europe/Berlin\"\n")
            .unwrap();
    let chosen = parse(
        "schedule = \"30 2 * * *\"\ncommand = \"true\"\ntimezone = \"Europe/Berlin\"\n\
         dst_gap = \"skip\"\ndst_repeat = \"both\"\n",
    )
    .unwrap();
    assert_eq!(
        chosen.schedule.dst(),
        DstChoice {
            gap: Some(DstGap::Skip),
            repeat: Some(DstRepeat::Both)
        }
    );
    // fires by them (no tick on the day of the gap, two on the day of the repeat),
    let ticks = |spec: &TaskSpec, from: &str, to: &str| -> usize {
        spec.schedule
            .ticks_after(utc(from))
            .take_while(|t| *t < utc(to))
            .count()
    };
    assert_eq!(
        ticks(&cronie, "2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"),
        1
    );
    assert_eq!(
        ticks(&chosen, "2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"),
        0
    );
    assert_eq!(
        ticks(&cronie, "2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z"),
        1
    );
    assert_eq!(
        ticks(&chosen, "2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z"),
        2
    );
    // and is another definition: nodes that disagree show as drift.
    assert_ne!(cronie.digest(), chosen.digest());
}

#[test]
fn a_dst_rule_that_is_not_one_of_its_values_names_them_and_the_closest() {
    let error =
        only_error("schedule = \"30 2 * * *\"\ncommand = \"true\"\ndst_gap = \"run-after\"\n");
    assert_error(
        &error,
        (3, 11),
        "`dst_gap` must be one of \"run_after\", \"skip\", found \"run-after\"",
        "did you mean \"run_after\"?",
    );
    let error =
        only_error("schedule = \"30 2 * * *\"\ncommand = \"true\"\ndst_repeat = \"twice\"\n");
    assert_error(
        &error,
        (3, 14),
        "`dst_repeat` must be one of \"first\", \"both\", found \"twice\"",
        "",
    );
}

#[test]
fn a_dst_rule_next_to_a_schedule_without_a_cron_expression_is_refused() {
    let error =
        only_error("schedule = \"@every 15m\"\ncommand = \"true\"\ndst_repeat = \"both\"\n");
    assert_error(
        &error,
        (3, 14),
        "`dst_repeat` has no effect on this schedule: it has no cron expression",
        "remove `dst_repeat`",
    );
}

// ---------------------------------------------------------------------------------------------
// Limited runs: `max_runs`

#[test]
fn max_runs_is_read_and_is_part_of_the_definition() {
    let limited = parse("schedule = \"@hourly\"\ncommand = \"true\"\nmax_runs = 3\n").unwrap();
    assert_eq!(limited.extras.max_runs, Some(3));
    let unlimited = parse("schedule = \"@hourly\"\ncommand = \"true\"\n").unwrap();
    assert_eq!(unlimited.extras.max_runs, None);
    assert_ne!(limited.digest(), unlimited.digest());
}

#[test]
fn a_max_runs_that_is_not_a_positive_integer_is_refused_where_it_stands() {
    let error = only_error("schedule = \"@hourly\"\ncommand = \"true\"\nmax_runs = 0\n");
    assert_error(
        &error,
        (3, 12),
        "`max_runs` must be between 1 and 4294967295, found 0",
        "",
    );
    let error = only_error("schedule = \"@hourly\"\ncommand = \"true\"\nmax_runs = \"3\"\n");
    assert_error(
        &error,
        (3, 12),
        "`max_runs` must be an integer, found string \"3\"",
        "remove the quotes",
    );
}

// ---------------------------------------------------------------------------------------------
// One-shot tasks: `@at`

#[test]
fn an_at_schedule_has_one_tick_at_its_instant() {
    let spec = parse("schedule = \"@at 2026-12-31T23:00:00+01:00\"\ncommand = \"true\"\n").unwrap();
    assert_eq!(spec.schedule.one_shot(), Some(utc("2026-12-31T22:00:00Z")));
    let ticks: Vec<_> = spec
        .schedule
        .ticks_after(utc("2026-01-01T00:00:00Z"))
        .collect();
    assert_eq!(ticks, [utc("2026-12-31T22:00:00Z")]);
    assert_eq!(spec.schedule.next_after(utc("2026-12-31T22:00:00Z")), None);
    // A cron schedule is no one-shot.
    let cron = parse("schedule = \"@daily\"\ncommand = \"true\"\n").unwrap();
    assert_eq!(cron.schedule.one_shot(), None);
}

#[test]
fn a_malformed_at_points_at_the_expression_and_says_what_to_write() {
    let error = only_error("schedule = \"@at\"\ncommand = \"true\"\n");
    assert_error(
        &error,
        (1, 12),
        "\"@at\" needs an RFC 3339 instant with its offset",
        "",
    );
    let error = only_error("schedule = \"@at 2026-12-31T23:00:00\"\ncommand = \"true\"\n");
    assert_error(
        &error,
        (1, 12),
        "\"2026-12-31T23:00:00\" in \"@at 2026-12-31T23:00:00\" is not an RFC 3339 instant",
        "",
    );
    assert!(
        error
            .message
            .contains("like \"@at 2026-12-31T23:00:00+01:00\""),
        "{}",
        error.message
    );
    let error = only_error("schedule = \"@at 2026-12-31T23:00:00.5Z\"\ncommand = \"true\"\n");
    assert_error(&error, (1, 12), "has a fraction of a second", "");
    let error = only_error(
        "schedule = \"@at 2026-12-31T22:00:00Z\"\ncommand = \"true\"\ntimezone = \"Europe/Berlin\"\n",
    );
    assert_error(
        &error,
        (3, 12),
        "`timezone` has no effect on `@at` instants",
        "\"@at 2026-12-31T23:00:00+01:00\"",
    );
}

// ---------------------------------------------------------------------------------------------
// Calendars: `exclude`

#[test]
fn the_calendars_a_task_excludes_are_part_of_its_definition() {
    let with = |text: &str| {
        let calendar =
            zkcron::task::parse_calendar("holidays", Path::new("/calendars.d/holidays.toml"), text)
                .unwrap();
        let mut defaults = defaults();
        defaults.calendars =
            std::sync::Arc::new([(calendar.name.clone(), std::sync::Arc::new(calendar))].into());
        parse_task(
            "t",
            Path::new("/jobs/t.toml"),
            "schedule = \"@daily\"\ncommand = \"true\"\nexclude = [\"holidays\"]\n",
            &defaults,
        )
        .unwrap()
    };
    let christmas = with("dates = [\"2026-12-25\"]\n");
    let boxing_day = with("dates = [\"2026-12-26\"]\n");
    assert_eq!(christmas.schedule.exclusions().len(), 1);
    // Another calendar's content is another definition: nodes that disagree show as drift.
    assert_ne!(christmas.digest(), boxing_day.digest());
    assert_eq!(
        christmas.digest(),
        with("dates = [\"2026-12-25\"]\n").digest()
    );
    let plain = parse("schedule = \"@daily\"\ncommand = \"true\"\n").unwrap();
    assert_ne!(christmas.digest(), plain.digest());
}

#[test]
fn exclude_must_name_known_calendars() {
    let error = only_error("schedule = \"@daily\"\ncommand = \"true\"\nexclude = [\"holidays\"]\n");
    assert_error(
        &error,
        (3, 12),
        "unknown calendar \"holidays\": the calendars dir has none",
        "add calendars.d/holidays.toml",
    );
    let error = only_error("schedule = \"@daily\"\ncommand = \"true\"\nexclude = \"holidays\"\n");
    assert_error(
        &error,
        (3, 11),
        "`exclude` must be an array of calendar names, found string",
        "exclude = [\"holidays\"]",
    );
}
