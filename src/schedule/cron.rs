//! One cron expression read in one time zone: [`CronExpr`], the part of a schedule that wraps
//! croner 4.
//!
//! It adds what croner leaves to its callers: the cronie aliases (`@midnight`, the rejection of
//! `@reboot`), error messages that name the wrong field and what it allows, and the DST rules.
//! croner decides which local times an expression matches; it is asked in local time with no
//! zone (a `NaiveDateTime`), and this module turns those local times into instants. DST follows
//! cronie, which sorts jobs by the text of their time fields ([`DstRule`]): a fixed-time job
//! (`30 2 * * *`, `0,30 1-3 * * *`) whose local time is skipped by a spring-forward change fires
//! at the first valid instant after the gap, and a local time that happens twice fires once, at
//! its first occurrence; a wildcard job (`*/5 * * * *`, `0 * * * *`) keeps its real-time rhythm:
//! skipped local times do not fire and repeated ones fire twice. (croner's own DST rules call
//! only single-valued times fixed, so `0,30 2 * * *` would lose its 02:30 in a gap.)

use std::sync::Arc;

use chrono::{DateTime, LocalResult, NaiveDateTime, Offset, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};

use super::{DstChoice, DstGap, DstRepeat, ScheduleError, parsed};

/// A parsed cron expression and the time zone its fields are read in.
#[derive(Clone)]
pub(super) struct CronExpr {
    /// The expression as the user wrote it, for messages and `zkcron next`.
    expression: Box<str>,
    /// The fields after alias expansion, as croner reads them. Only the text is kept: croner
    /// keeps a 5,001-byte year bitmap in every parse, so the parse is made when a tick is
    /// needed and kept in a small bounded cache shared by all schedules ([`parsed`]). Not
    /// shared between clones, so that a copy holds no memory of the thread that loaded it.
    /// `None` when it is the expression as written (most are: one allocation less a task).
    expanded: Option<Box<str>>,
    /// How the schedule meets a DST change.
    dst: DstRule,
    /// The zone the expression's fields are read in.
    timezone: Tz,
}

impl PartialEq for CronExpr {
    fn eq(&self, other: &Self) -> bool {
        self.expression == other.expression
            && self.timezone == other.timezone
            && self.dst == other.dst
    }
}

/// How a schedule meets a DST change: what a local time skipped by spring-forward does
/// (`gap`) and what a local time that happens twice does (`repeat`). cronie decides both from
/// the text of the time fields: a job whose minute or hour field starts with `*` is a wildcard
/// job (`MIN_STAR | HR_STAR`: skip, both), any other a fixed-time job (run after, first).
/// zkcron's optional seconds field counts like the other two. A task's `dst_gap` and
/// `dst_repeat` override either ([`DstChoice`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DstRule {
    gap: DstGap,
    repeat: DstRepeat,
}

impl DstRule {
    /// cronie's rule for an expression of these fields.
    fn of(fields: &[&str]) -> DstRule {
        let time_fields = &fields[..fields.len() - 3];
        if time_fields.iter().any(|field| field.starts_with('*')) {
            // Real-time rhythm: a skipped local time does not fire, a repeated one fires at both
            // of its instants.
            DstRule {
                gap: DstGap::Skip,
                repeat: DstRepeat::Both,
            }
        } else {
            // A skipped local time fires at the first valid instant after the gap, a repeated
            // one once, at its first occurrence.
            DstRule {
                gap: DstGap::RunAfter,
                repeat: DstRepeat::First,
            }
        }
    }

    /// This rule with what `choice` sets in place of its own.
    fn chosen(self, choice: DstChoice) -> DstRule {
        DstRule {
            gap: choice.gap.unwrap_or(self.gap),
            repeat: choice.repeat.unwrap_or(self.repeat),
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

/// The fields of a six-field expression, in order, with what each one allows.
pub(super) const FIELDS: [(&str, &str); 6] = [
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

impl CronExpr {
    /// Parses `expression` to be read in `timezone`.
    pub(super) fn parse(expression: &str, timezone: Tz) -> Result<CronExpr, ScheduleError> {
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
        let expanded: Box<str> = fields.join(" ").into();
        let dst = DstRule::of(&fields);
        if parsed::known_to_fire(&expanded, timezone) {
            // Checked below for an earlier task with the same expression and zone; croner's
            // parse (tens of microseconds) is not made again for each of thousands of tasks.
            return Ok(CronExpr {
                expanded: (*expanded != *trimmed).then_some(expanded),
                expression: trimmed.into(),
                dst,
                timezone,
            });
        }
        parsed::parsed(&expanded).map_err(|error| {
            blame_field(&fields).unwrap_or_else(|| ScheduleError::Other {
                expression: trimmed.to_string(),
                detail: error.to_string(),
            })
        })?;
        let schedule = CronExpr {
            expanded: (*expanded != *trimmed).then_some(expanded),
            expression: trimmed.into(),
            dst,
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
        parsed::remember_fires(schedule.expanded(), timezone);
        Ok(schedule)
    }

    /// The expression as written.
    pub(super) fn expression(&self) -> &str {
        &self.expression
    }

    /// The same expression meeting DST changes as `choice` says (cronie's rule where it says
    /// nothing).
    pub(super) fn with_dst(mut self, choice: DstChoice) -> CronExpr {
        let fields: Vec<&str> = self.expanded().split_whitespace().collect();
        self.dst = DstRule::of(&fields).chosen(choice);
        self
    }

    /// The fields as croner reads them.
    pub(super) fn expanded(&self) -> &str {
        self.expanded.as_deref().unwrap_or(&self.expression)
    }

    /// croner's parse of the expression, from the cache or made now.
    pub(super) fn cron(&self) -> Arc<Cron> {
        // The same text parsed when the schedule was made (croner's parse is a function of
        // the text), so it parses again.
        parsed::parsed(self.expanded())
            .expect("a schedule's expression was parsed when it was made")
    }

    /// The first tick strictly after `after`, or `None` when there is none within croner's
    /// search horizon.
    pub(super) fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // An instant at the end of chrono's range (a hostile record can hold one) has no local
        // time in every zone; no tick lies that far anyway.
        if after >= last_instant() {
            return None;
        }
        let after = after.max(first_instant_supported());
        let cron = self.cron();
        let local = after.with_timezone(&self.timezone).naive_local();
        // Local times after `after`'s own, in order: the first with an instant after `after` has
        // the earliest one (a fixed-time job's second pass through a repeat has none).
        let mut cursor = local;
        let mut next = None;
        while let Ok(matched) = cron.find_next_occurrence(&cursor, false) {
            cursor = matched;
            if let Some(instant) = self.instants_of(matched).filter(|t| *t > after).min() {
                next = Some(instant);
                break;
            }
        }
        // On the first pass through a repeated stretch the second pass is still ahead, and a
        // wildcard job fires there at the local times up to `after`'s own as well.
        if self.dst.repeat == DstRepeat::Both
            && let Some(repeat) = self.repeat_at(after).filter(|r| r.first_pass)
            && let Ok(matched) = cron.find_next_occurrence(&repeat.start, true)
            && matched <= local
        {
            let second_pass = instant_at(matched, repeat.later_offset);
            next = Some(next.map_or(second_pass, |n| n.min(second_pass)));
        }
        next
    }

    /// The last tick at or before `at`, or `None` when there is none.
    pub(super) fn latest_at_or_before(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // As in `next_after`: chrono's range ends are out of every zone's reach.
        if at <= first_instant_supported() {
            return None;
        }
        let at = at.min(last_instant());
        let cron = self.cron();
        let local = at.with_timezone(&self.timezone).naive_local();
        // Local times up to `at`'s own, newest first: the first with an instant at or before
        // `at` has the latest one.
        let mut cursor = local;
        let mut inclusive = true;
        let mut latest = None;
        while let Ok(matched) = cron.find_previous_occurrence(&cursor, inclusive) {
            (cursor, inclusive) = (matched, false);
            if let Some(instant) = self.instants_of(matched).filter(|t| *t <= at).max() {
                latest = Some(instant);
                break;
            }
        }
        // On the second pass through a repeated stretch the whole first pass is behind, local
        // times after `at`'s own included; every job fired there.
        if let Some(repeat) = self.repeat_at(at).filter(|r| !r.first_pass)
            && let Ok(matched) = cron.find_previous_occurrence(&repeat.end, false)
            && matched > local
        {
            let first_pass = instant_at(matched, repeat.earlier_offset);
            latest = Some(latest.map_or(first_pass, |l| l.max(first_pass)));
        }
        latest
    }

    /// The instants a matching local time fires at: one; of a repeated time's two, the first
    /// or both (`repeat`); of a time skipped by spring-forward, the end of the gap or none
    /// (`gap`).
    pub(super) fn instants_of(&self, local: NaiveDateTime) -> impl Iterator<Item = DateTime<Utc>> {
        let utc = |t: DateTime<Tz>| t.with_timezone(&Utc);
        let instants = match self.timezone.from_local_datetime(&local) {
            LocalResult::Single(t) => [Some(utc(t)), None],
            LocalResult::Ambiguous(earlier, later) => match self.dst.repeat {
                DstRepeat::First => [Some(utc(earlier)), None],
                DstRepeat::Both => [Some(utc(earlier)), Some(utc(later))],
            },
            LocalResult::None => match self.dst.gap {
                DstGap::RunAfter => [Some(self.end_of_gap(local)), None],
                DstGap::Skip => [None, None],
            },
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
}

/// Instants are evaluated only this far inside chrono's range: a local time is the instant
/// plus an offset of up to a day, and the evaluation looks a day around it, so nearer the ends
/// chrono cannot represent the local time and panics. No schedule fires there (the year
/// ±262,000), so an instant beyond is treated as the nearest one inside.
const RANGE_MARGIN: TimeDelta = TimeDelta::days(3);

/// The last instant a schedule is evaluated at (see [`RANGE_MARGIN`]).
fn last_instant() -> DateTime<Utc> {
    DateTime::<Utc>::MAX_UTC - RANGE_MARGIN
}

/// The first instant a schedule is evaluated at (see [`RANGE_MARGIN`]).
fn first_instant_supported() -> DateTime<Utc> {
    DateTime::<Utc>::MIN_UTC + RANGE_MARGIN
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
pub(super) fn first_instant(
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

/// The parser that checks single fields ([`blame_field`]); how the day fields combine does not
/// matter there.
fn parser() -> CronParser {
    CronParser::builder().seconds(Seconds::Optional).build()
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
/// decided by cronie's rule alone (`parsed::days_combine_with_and`).
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
