//! Cron expressions and time zones: parsing, and the instants a schedule fires at.
//!
//! This module owns the meaning of a `schedule = "..."` line. It wraps croner 4 and adds what
//! croner leaves to its callers: the cronie aliases (`@midnight`, the rejection of `@reboot`),
//! error messages that name the wrong field and what it allows, and IANA time-zone lookup with a
//! did-you-mean. It reads no clock: every function takes the instant to count from.
//!
//! croner decides which local times an expression matches; it is asked in local time with no
//! zone (a `NaiveDateTime`), and this module turns those local times into instants. DST follows
//! cronie, which sorts jobs by the text of their time fields ([`DstRule`]): a fixed-time job
//! (`30 2 * * *`, `0,30 1-3 * * *`) whose local time is skipped by a spring-forward change fires
//! at the first valid instant after the gap, and a local time that happens twice fires once, at
//! its first occurrence; a wildcard job (`*/5 * * * *`, `0 * * * *`) keeps its real-time rhythm:
//! skipped local times do not fire and repeated ones fire twice. (croner's own DST rules call
//! only single-valued times fixed, so `0,30 2 * * *` would lose its 02:30 in a gap.)

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex, Weak};

use chrono::{DateTime, LocalResult, NaiveDateTime, Offset, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};

/// A parsed schedule: an expression and the time zone its fields are read in.
#[derive(Clone)]
pub struct Schedule {
    /// The expression as the user wrote it, for messages and `zkcron next`.
    expression: String,
    /// The expression after alias expansion, as croner parsed it. Shared: croner keeps a
    /// 5,001-byte year bitmap in every parsed expression, and a fleet's task files repeat the
    /// same few expressions, so identical expressions are parsed once ([`intern`]).
    cron: Arc<Cron>,
    /// How the schedule meets a DST change.
    dst: DstRule,
    /// The zone the expression's fields are read in.
    timezone: Tz,
}

/// How a schedule meets a DST change. cronie decides it from the text of the time fields: a job
/// whose minute or hour field starts with `*` is a wildcard job (`MIN_STAR | HR_STAR`), any
/// other is a fixed-time job. zkcron's optional seconds field counts like the other two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DstRule {
    /// A local time skipped by spring-forward fires at the first valid instant after the gap; a
    /// repeated local time fires once, at its first occurrence.
    FixedTime,
    /// Real-time rhythm: a skipped local time does not fire; a repeated one fires at both of its
    /// instants.
    Wildcard,
}

impl DstRule {
    fn of(fields: &[&str]) -> DstRule {
        let time_fields = &fields[..fields.len() - 3];
        if time_fields.iter().any(|field| field.starts_with('*')) {
            DstRule::Wildcard
        } else {
            DstRule::FixedTime
        }
    }
}

/// A stretch of local time that a fall-back change repeats, seen from one instant in it.
struct Repeat {
    /// The first repeated local time (the wall clock just after the change).
    start: NaiveDateTime,
    /// The first local time after the repeat (the wall clock just before the change).
    end: NaiveDateTime,
    /// UTC offsets before and after the change, in seconds.
    earlier_offset: i64,
    later_offset: i64,
    /// Whether the instant is on the first pass through the repeated stretch.
    first_pass: bool,
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.expression == other.expression && self.timezone == other.timezone
    }
}

impl Eq for Schedule {}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schedule")
            .field("expression", &self.expression)
            .field("timezone", &self.timezone.name())
            .finish()
    }
}

/// Why an expression or a time zone was refused. The `Display` text is meant for the user: it
/// says what is wrong and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error(
        "the schedule is empty; write five fields like \"30 2 * * *\" or an alias like \"@daily\""
    )]
    Empty,
    #[error(
        "@reboot is not supported: zkcron runs each tick once in the whole cluster, and a cluster \
         has no single boot; use a systemd unit with WantedBy=multi-user.target for start-up work"
    )]
    Reboot,
    #[error(
        "unknown alias {alias:?}; allowed: @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly"
    )]
    UnknownAlias { alias: String },
    #[error(
        "expected 5 fields (minute hour day-of-month month day-of-week) or 6 (with seconds first), \
         found {found} in {expression:?}"
    )]
    FieldCount { expression: String, found: usize },
    #[error("{field} field {value:?} is invalid; {allowed}")]
    Field {
        field: &'static str,
        value: String,
        allowed: &'static str,
    },
    #[error("invalid schedule {expression:?}: {detail}")]
    Other { expression: String, detail: String },
    #[error("the schedule {expression:?} never fires")]
    NeverFires { expression: String },
    #[error("unknown time zone {name:?}{}; use an IANA name like \"Europe/Berlin\" or \"UTC\"", did_you_mean(.suggestion))]
    UnknownTimezone {
        name: String,
        suggestion: Option<String>,
    },
}

fn did_you_mean(suggestion: &Option<String>) -> String {
    match suggestion {
        Some(s) => format!(" (did you mean {s:?}?)"),
        None => String::new(),
    }
}

/// The fields of a six-field expression, in order, with what each one allows.
const FIELDS: [(&str, &str); 6] = [
    (
        "second",
        "allowed: 0-59, *, lists a,b, ranges a-b and steps */n or a-b/n",
    ),
    (
        "minute",
        "allowed: 0-59, *, lists a,b, ranges a-b and steps */n or a-b/n",
    ),
    (
        "hour",
        "allowed: 0-23, *, lists a,b, ranges a-b and steps */n or a-b/n",
    ),
    (
        "day-of-month",
        "allowed: 1-31, *, ?, L (last day), nW (nearest weekday), lists, ranges and steps",
    ),
    (
        "month",
        "allowed: 1-12 or JAN-DEC, *, lists, ranges and steps",
    ),
    (
        "day-of-week",
        "allowed: 0-7 (0 and 7 are Sunday) or SUN-SAT, *, ?, n#k (k-th weekday), nL (last weekday), lists, ranges and steps",
    ),
];

impl Schedule {
    /// Parses `expression` to be read in `timezone`.
    pub fn parse(expression: &str, timezone: Tz) -> Result<Schedule, ScheduleError> {
        let trimmed = expression.trim();
        if trimmed.is_empty() {
            return Err(ScheduleError::Empty);
        }
        let expanded = expand_alias(trimmed)?;
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if !(5..=6).contains(&fields.len()) {
            return Err(ScheduleError::FieldCount {
                expression: trimmed.to_string(),
                found: fields.len(),
            });
        }
        let fields = cronie_fields(&fields)?;
        let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
        let cron = intern(&fields).map_err(|error| {
            blame_field(&fields).unwrap_or_else(|| ScheduleError::Other {
                expression: trimmed.to_string(),
                detail: error.to_string(),
            })
        })?;
        let schedule = Schedule {
            expression: trimmed.to_string(),
            cron,
            dst: DstRule::of(&fields),
            timezone,
        };
        // An expression like "0 0 31 2 *" parses but never matches; say so now rather than
        // leaving a task that silently never runs.
        if schedule
            .next_after(Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).unwrap())
            .is_none()
        {
            return Err(ScheduleError::NeverFires {
                expression: trimmed.to_string(),
            });
        }
        Ok(schedule)
    }

    /// The expression as written.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The zone the expression is read in.
    pub fn timezone(&self) -> Tz {
        self.timezone
    }

    /// The first tick strictly after `after`, or `None` when there is none within croner's
    /// search horizon.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = after.with_timezone(&self.timezone).naive_local();
        // Local times after `after`'s own, in order: the first with an instant after `after` has
        // the earliest one (a fixed-time job's second pass through a repeat has none).
        let mut cursor = local;
        let mut next = None;
        while let Ok(matched) = self.cron.find_next_occurrence(&cursor, false) {
            cursor = matched;
            if let Some(instant) = self.instants_of(matched).filter(|t| *t > after).min() {
                next = Some(instant);
                break;
            }
        }
        // On the first pass through a repeated stretch the second pass is still ahead, and a
        // wildcard job fires there at the local times up to `after`'s own as well.
        if self.dst == DstRule::Wildcard
            && let Some(repeat) = self.repeat_at(after).filter(|r| r.first_pass)
            && let Ok(matched) = self.cron.find_next_occurrence(&repeat.start, true)
            && matched <= local
        {
            let second_pass = instant_at(matched, repeat.later_offset);
            next = Some(next.map_or(second_pass, |n| n.min(second_pass)));
        }
        next
    }

    /// The last tick at or before `at`, or `None` when there is none.
    pub fn latest_at_or_before(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = at.with_timezone(&self.timezone).naive_local();
        // Local times up to `at`'s own, newest first: the first with an instant at or before
        // `at` has the latest one.
        let mut cursor = local;
        let mut inclusive = true;
        let mut latest = None;
        while let Ok(matched) = self.cron.find_previous_occurrence(&cursor, inclusive) {
            (cursor, inclusive) = (matched, false);
            if let Some(instant) = self.instants_of(matched).filter(|t| *t <= at).max() {
                latest = Some(instant);
                break;
            }
        }
        // On the second pass through a repeated stretch the whole first pass is behind, local
        // times after `at`'s own included; every job fired there.
        if let Some(repeat) = self.repeat_at(at).filter(|r| !r.first_pass)
            && let Ok(matched) = self.cron.find_previous_occurrence(&repeat.end, false)
            && matched > local
        {
            let first_pass = instant_at(matched, repeat.earlier_offset);
            latest = Some(latest.map_or(first_pass, |l| l.max(first_pass)));
        }
        latest
    }

    /// The instants a matching local time fires at: one, both of a repeated time's for a
    /// wildcard job, or, for a time skipped by spring-forward, the end of the gap (fixed-time)
    /// or none (wildcard).
    fn instants_of(&self, local: NaiveDateTime) -> impl Iterator<Item = DateTime<Utc>> {
        let utc = |t: DateTime<Tz>| t.with_timezone(&Utc);
        let instants = match (self.timezone.from_local_datetime(&local), self.dst) {
            (LocalResult::Single(t), _) => [Some(utc(t)), None],
            (LocalResult::Ambiguous(earlier, _), DstRule::FixedTime) => [Some(utc(earlier)), None],
            (LocalResult::Ambiguous(earlier, later), DstRule::Wildcard) => {
                [Some(utc(earlier)), Some(utc(later))]
            }
            (LocalResult::None, DstRule::FixedTime) => [Some(self.end_of_gap(local)), None],
            (LocalResult::None, DstRule::Wildcard) => [None, None],
        };
        instants.into_iter().flatten()
    }

    /// The first instant whose local time is after `local`, a time that spring-forward skips:
    /// the instant the clock jumped.
    fn end_of_gap(&self, local: NaiveDateTime) -> DateTime<Utc> {
        // Offsets are within a day of UTC, so the jump lies within a day of `local` read as UTC.
        let around = local.and_utc();
        first_instant(
            around - TimeDelta::days(1),
            around + TimeDelta::days(1),
            |t| t.with_timezone(&self.timezone).naive_local() > local,
        )
    }

    /// The repeated stretch `at` lies in, if its local time happens twice.
    fn repeat_at(&self, at: DateTime<Utc>) -> Option<Repeat> {
        let local = at.with_timezone(&self.timezone).naive_local();
        let LocalResult::Ambiguous(earlier, later) = self.timezone.from_local_datetime(&local)
        else {
            return None;
        };
        let earlier_offset = offset_seconds(earlier);
        let later_offset = offset_seconds(later);
        let (earlier, later) = (earlier.with_timezone(&Utc), later.with_timezone(&Utc));
        let change = first_instant(earlier, later, |t| {
            offset_seconds(t.with_timezone(&self.timezone)) == later_offset
        });
        Some(Repeat {
            start: change.naive_utc() + TimeDelta::seconds(later_offset),
            end: change.naive_utc() + TimeDelta::seconds(earlier_offset),
            earlier_offset,
            later_offset,
            first_pass: at < change,
        })
    }

    /// Ticks strictly after `after`, in increasing order, without end.
    pub fn ticks_after(&self, after: DateTime<Utc>) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        let mut cursor = after;
        std::iter::from_fn(move || {
            let next = self.next_after(cursor)?;
            cursor = next;
            Some(next)
        })
    }
}

fn offset_seconds(t: DateTime<Tz>) -> i64 {
    i64::from(t.offset().fix().local_minus_utc())
}

/// The instant of `local` at a UTC offset of `offset` seconds.
fn instant_at(local: NaiveDateTime, offset: i64) -> DateTime<Utc> {
    (local - TimeDelta::seconds(offset)).and_utc()
}

/// The first whole second after `low` and at or before `high` where `reached` holds, given
/// that it does not hold at `low` and holds from that second on up to `high`. (Clocks change at
/// whole seconds.)
fn first_instant(
    low: DateTime<Utc>,
    high: DateTime<Utc>,
    reached: impl Fn(DateTime<Utc>) -> bool,
) -> DateTime<Utc> {
    let at = |second: i64| DateTime::from_timestamp(second, 0).unwrap_or(high);
    let (mut low, mut high) = (low.timestamp(), high.timestamp());
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        if reached(at(middle)) {
            high = middle;
        } else {
            low = middle;
        }
    }
    at(high)
}

/// Parses an expression's five or six fields, or returns the parse of an identical expression
/// that is still in use.
fn intern(fields: &[&str]) -> Result<Arc<Cron>, croner::errors::CronError> {
    static PARSED: LazyLock<Mutex<HashMap<String, Weak<Cron>>>> = LazyLock::new(Default::default);
    let expanded = fields.join(" ");
    let mut parsed = PARSED.lock().expect("schedule cache poisoned");
    if let Some(cron) = parsed.get(&expanded).and_then(Weak::upgrade) {
        return Ok(cron);
    }
    let parser = CronParser::builder()
        .seconds(Seconds::Optional)
        .dom_and_dow(days_combine_with_and(fields))
        .build();
    let cron = Arc::new(parser.parse(&expanded)?);
    // Drop entries whose schedules are gone, so the cache never outgrows the live set twice over.
    if parsed.len() >= 64 && parsed.len().is_power_of_two() {
        parsed.retain(|_, weak| weak.strong_count() > 0);
    }
    parsed.insert(expanded, Arc::downgrade(&cron));
    Ok(cron)
}

/// The parser that checks single fields ([`blame_field`]); how the day fields combine does not
/// matter there.
fn parser() -> CronParser {
    CronParser::builder().seconds(Seconds::Optional).build()
}

/// Whether the day-of-month and day-of-week fields of a five- or six-field expression combine with
/// AND. cronie's rule: a day field whose text starts with `*` (`*`, `*/2`, `*,3`) is unrestricted,
/// and then a day must match both fields; only when neither starts with `*` does a day match when
/// either field matches. `?` means `*`. croner alone ORs whenever neither field is exactly `*`.
fn days_combine_with_and(fields: &[&str]) -> bool {
    let offset = fields.len().saturating_sub(5);
    let unrestricted = |index: usize| {
        fields
            .get(offset + index)
            .is_some_and(|field| field.starts_with(['*', '?']))
    };
    unrestricted(2) || unrestricted(4)
}

/// Expands the cronie aliases croner does not know and refuses `@reboot`.
fn expand_alias(expression: &str) -> Result<String, ScheduleError> {
    if !expression.starts_with('@') {
        return Ok(expression.to_string());
    }
    let alias = expression.to_ascii_lowercase();
    let fields = match alias.as_str() {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        "@reboot" => return Err(ScheduleError::Reboot),
        _ => {
            return Err(ScheduleError::UnknownAlias {
                alias: expression.to_string(),
            });
        }
    };
    Ok(fields.to_string())
}

/// The fields as croner should read them to mean what cronie means: a `*` inside a list
/// (`*,3`), which cronie accepts and croner does not, is written `*/1` (the same values, and the
/// text still starts with `*` where cronie's rules look at that). The
/// `+` prefix croner takes in day-of-week (forcing AND) is refused: how the day fields combine is
/// decided by cronie's rule alone ([`days_combine_with_and`]).
fn cronie_fields(fields: &[&str]) -> Result<Vec<String>, ScheduleError> {
    let offset = 6 - fields.len();
    fields
        .iter()
        .enumerate()
        .map(|(index, field)| {
            if (index + offset == 5 && field.starts_with('+'))
                || has_name_of_another_field(index + offset, field)
            {
                let (name, allowed) = FIELDS[index + offset];
                return Err(ScheduleError::Field {
                    field: name,
                    value: field.to_string(),
                    allowed,
                });
            }
            if !field.contains(',') {
                return Ok(field.to_string());
            }
            let parts: Vec<&str> = field
                .split(',')
                .map(|part| if part == "*" { "*/1" } else { part })
                .collect();
            Ok(parts.join(","))
        })
        .collect()
}

const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// Whether `field` (at `index` of the six fields) holds a month name outside the month field or
/// a day name outside the day-of-week field. croner replaces names wherever they stand, so it
/// would read `0 0 * SAT *` as June; cronie refuses it, and so does zkcron.
fn has_name_of_another_field(index: usize, field: &str) -> bool {
    field
        .split(|c: char| !c.is_ascii_alphabetic())
        .filter(|word| word.len() == 3)
        .map(str::to_ascii_uppercase)
        .any(|word| {
            (index != 4 && MONTH_NAMES.contains(&word.as_str()))
                || (index != 5 && DAY_NAMES.contains(&word.as_str()))
        })
}

/// Finds the first field that croner refuses on its own, by parsing it with every other field
/// set to `*`.
fn blame_field(fields: &[&str]) -> Option<ScheduleError> {
    let offset = 6 - fields.len();
    for (index, value) in fields.iter().enumerate() {
        let mut probe = ["*"; 6];
        probe[index + offset] = value;
        if parser().parse(&probe.join(" ")).is_err() {
            let (field, allowed) = FIELDS[index + offset];
            return Some(ScheduleError::Field {
                field,
                value: value.to_string(),
                allowed,
            });
        }
    }
    None
}

/// Looks up an IANA time-zone name, suggesting the closest known name when it is not one.
pub fn parse_timezone(name: &str) -> Result<Tz, ScheduleError> {
    if let Ok(tz) = name.parse::<Tz>() {
        return Ok(tz);
    }
    // Case-insensitive match first: "europe/berlin" is clearly meant as "Europe/Berlin".
    let lower = name.to_ascii_lowercase();
    let mut best: Option<(f64, &str)> = None;
    for candidate in chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name()) {
        if candidate.to_ascii_lowercase() == lower {
            best = Some((2.0, candidate));
            break;
        }
        let score = strsim::jaro_winkler(&lower, &candidate.to_ascii_lowercase());
        if score > 0.85 && best.is_none_or(|(b, _)| score > b) {
            best = Some((score, candidate));
        }
    }
    Err(ScheduleError::UnknownTimezone {
        name: name.to_string(),
        suggestion: best.map(|(_, s)| s.to_string()),
    })
}

#[cfg(test)]
mod tests {
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
        assert!(Arc::ptr_eq(&a.cron, &b.cron));
        assert_ne!(a, b, "the zone still tells them apart");
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
}
