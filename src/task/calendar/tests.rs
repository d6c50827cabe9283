use super::*;

fn parse(text: &str) -> Result<Calendar, Vec<TaskFileError>> {
    parse_calendar("holidays", Path::new("/cal/holidays.toml"), text)
}

#[test]
fn a_calendar_reads_its_zone_days_and_periods() {
    let calendar = parse(
        "timezone = \"Europe/Berlin\"\ndates = [\"2026-12-26\", 2026-12-25]\n\
         periods = [[\"2026-12-31T18:00\", 2027-01-02T00:00:00]]\n",
    )
    .unwrap();
    assert_eq!(calendar.timezone, chrono_tz::Tz::Europe__Berlin);
    assert_eq!(
        calendar.dates,
        [
            NaiveDate::from_ymd_opt(2026, 12, 25).unwrap(),
            NaiveDate::from_ymd_opt(2026, 12, 26).unwrap()
        ]
    );
    assert_eq!(calendar.periods.len(), 1);
    assert_eq!(&*calendar.name, "holidays");
}

#[track_caller]
fn one_error(text: &str) -> TaskFileError {
    let errors = parse(text).expect_err("refused");
    assert_eq!(errors.len(), 1, "{errors:#?}");
    errors.into_iter().next().unwrap()
}

#[test]
fn every_mistake_names_its_line_and_column_and_the_fix() {
    let error = one_error("dates = [\"2026-13-01\"]\n");
    assert_eq!((error.line, error.column), (1, 10));
    assert!(
        error
            .message
            .contains("\"2026-13-01\" in `dates` is not a day"),
        "{}",
        error.message
    );
    assert!(error.help.unwrap().contains("\"2026-12-25\""));

    let error = one_error("periods = [[\"2027-01-02T00:00\", \"2026-12-31T18:00\"]]\n");
    assert_eq!((error.line, error.column), (1, 12));
    assert!(
        error
            .message
            .contains("ends (2026-12-31 18:00:00) before it starts"),
        "{}",
        error.message
    );

    let error = one_error("periods = [[\"2026-12-31T18:00\"]]\n");
    assert!(
        error.message.contains("must be a pair [from, until]"),
        "{}",
        error.message
    );

    let error = one_error("periods = [[2026-12-31T18:00:00Z, \"2027-01-01T00:00\"]]\n");
    assert!(
        error.message.contains("has a UTC offset"),
        "{}",
        error.message
    );

    let error = one_error("timezone = \"Europe/Berln\"\n");
    assert_eq!((error.line, error.column), (1, 12));
    assert!(
        error.message.contains("did you mean \"Europe/Berlin\""),
        "{}",
        error.message
    );

    let error = one_error("date = [\"2026-12-25\"]\n");
    assert!(
        error.message.contains("unknown key `date`"),
        "{}",
        error.message
    );
    assert!(error.help.unwrap().contains("`dates`"));

    let error = one_error("dates = \"2026-12-25\"\n");
    assert!(
        error.message.contains("`dates` must be an array"),
        "{}",
        error.message
    );
}
