//! zkcron's schedules checked against an independent evaluator of cronie's semantics, written here
//! without croner: generated five- and six-field expressions in cronie's syntax, zones whose DST
//! shifts are 60 and 30 minutes, and start instants around their transitions.
//!
//! The reference reads each field into a set (lists, ranges, steps, names, 0 and 7 for Sunday),
//! applies cronie's day rule (a day field whose text starts with `*` or `?` is unrestricted, and
//! then the day fields combine with AND; otherwise with OR), walks the matching local times in
//! order, and turns each into instants with the DST rules cronie follows and docs/task-files.md,
//! "Time zones and DST", states:
//! - a *fixed-time* schedule (no second, minute or hour field starting with `*`): a local time
//!   skipped by spring-forward fires at the first valid instant after the gap; a local time that
//!   happens twice fires once, at its first occurrence;
//! - a *wildcard* schedule (one of those fields starts with `*`): a skipped local time does not
//!   fire; a repeated one fires at both instants, so it keeps its real-time rhythm.
//!
//! Local times are resolved from UTC offsets alone (`offset_from_utc_datetime`), not with
//! chrono's local-time lookup, so that the reference shares as little as possible with the code
//! under test.

use std::collections::BTreeSet;
use std::sync::{Mutex, OnceLock};

use chrono::{DateTime, Datelike, NaiveDate, Offset, TimeZone, Utc};
use chrono_tz::Tz;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::Config;
use zkcron::schedule::{Schedule, ScheduleError};

/// Zones with 60-minute (New York, Berlin, Chatham, Santiago) and 30-minute (Lord Howe) shifts;
/// Chatham changes at 02:45 local, Santiago at midnight.
const ZONES: [Tz; 5] = [
    chrono_tz::America::New_York,
    chrono_tz::Europe::Berlin,
    chrono_tz::Australia::Lord_Howe,
    chrono_tz::Pacific::Chatham,
    chrono_tz::America::Santiago,
];

/// How many fires are compared per case.
const FIRES: usize = 5;

/// Start instants are drawn from [2001, 2036): every zone above had the same two offsets then.
const FIRST_START: i64 = 978_307_200; // 2001-01-01T00:00:00Z
const LAST_START: i64 = 2_082_758_400; // 2036-01-01T00:00:00Z

const HOUR: i64 = 3600;
const DAY: i64 = 24 * HOUR;

// ---------------------------------------------------------------------------------------------
// The reference: cronie's fields, day rule and DST handling.

const MONTH_NAMES: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAY_NAMES: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// An expression as cronie reads it: one bit set per value each field allows.
#[derive(Debug)]
struct Cronie {
    seconds: u64,
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    /// Bits 0 (Sunday) to 6; a 7 in the text is folded into 0.
    weekdays: u64,
    /// cronie's DOM_STAR / DOW_STAR: either day field starts with `*`.
    days_and: bool,
    /// cronie's MIN_STAR / HR_STAR (and the seconds field, zkcron's extension).
    wildcard: bool,
}

impl Cronie {
    fn parse(expression: &str) -> Cronie {
        let fields: Vec<&str> = expression.split_whitespace().collect();
        let (seconds, rest) = match fields.len() {
            6 => (fields[0], &fields[1..]),
            5 => ("0", &fields[..]),
            n => panic!("{n} fields in {expression:?}"),
        };
        let [minute, hour, day, month, weekday] = rest else {
            unreachable!()
        };
        let star = |field: &str| field.starts_with('*') || field.starts_with('?');
        let mut weekdays = field_set(weekday, 0, 7, &WEEKDAY_NAMES, 0);
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays & !(1 << 7)) | 1;
        }
        Cronie {
            seconds: field_set(seconds, 0, 59, &[], 0),
            minutes: field_set(minute, 0, 59, &[], 0),
            hours: field_set(hour, 0, 23, &[], 0),
            days: field_set(day, 1, 31, &[], 0),
            months: field_set(month, 1, 12, &MONTH_NAMES, 1),
            weekdays,
            days_and: star(day) || star(weekday),
            wildcard: [seconds, minute, hour].iter().any(|f| f.starts_with('*')),
        }
    }

    fn day_matches(&self, date: NaiveDate) -> bool {
        if self.months & (1 << date.month()) == 0 {
            return false;
        }
        let day = self.days & (1 << date.day()) != 0;
        let weekday = self.weekdays & (1 << date.weekday().num_days_from_sunday()) != 0;
        if self.days_and {
            day && weekday
        } else {
            day || weekday
        }
    }

    /// The instants the local time `civil` (seconds since the epoch, read as if it were UTC)
    /// fires at in `zone`.
    fn fires_of(&self, zone: Tz, civil: i64) -> Vec<i64> {
        match resolve(zone, civil) {
            Local::Instants(instants) if self.wildcard => instants,
            Local::Instants(instants) => instants[..1].to_vec(),
            Local::Gap { transition } if !self.wildcard => vec![transition],
            Local::Gap { .. } => Vec::new(),
        }
    }

    /// The first `n` fires strictly after `start`, with at most a century of local days walked.
    fn next_fires(&self, zone: Tz, start: i64, n: usize) -> Vec<i64> {
        let (min_offset, max_offset) = zone_offsets(zone);
        // No local time earlier than this has an instant after `start` (any instant is its
        // local time minus an offset of at most `max_offset`; a gap's fire is later still).
        let lowest = start + min_offset;
        let mut fires = BTreeSet::new();
        let first_day = DateTime::from_timestamp(lowest, 0).unwrap().date_naive();
        for date in first_day.iter_days().take(36_600) {
            if !self.day_matches(date) {
                continue;
            }
            let midnight = date.and_hms_opt(0, 0, 0).unwrap().and_utc().timestamp();
            for hour in bits(self.hours) {
                let hour_start = midnight + hour * HOUR;
                if hour_start + HOUR <= lowest {
                    continue;
                }
                for minute in bits(self.minutes) {
                    let minute_start = hour_start + minute * 60;
                    if minute_start + 60 <= lowest {
                        continue;
                    }
                    for second in bits(self.seconds) {
                        let civil = minute_start + second;
                        if civil < lowest {
                            continue;
                        }
                        // Every later local time fires after `civil - max_offset`.
                        if fires.len() >= n
                            && civil - max_offset > *fires.iter().nth(n - 1).unwrap()
                        {
                            return fires.into_iter().take(n).collect();
                        }
                        fires.extend(
                            self.fires_of(zone, civil)
                                .into_iter()
                                .filter(|&t| t > start),
                        );
                    }
                }
            }
        }
        fires.into_iter().take(n).collect()
    }
}

/// The values a cronie field allows, as bits. `names` are the field's names, the first one
/// meaning `name_base`.
fn field_set(field: &str, low: i64, high: i64, names: &[&str], name_base: i64) -> u64 {
    let value = |text: &str| -> i64 {
        text.parse().unwrap_or_else(|_| {
            let index = names
                .iter()
                .position(|name| name.eq_ignore_ascii_case(text))
                .unwrap_or_else(|| panic!("{text:?} is not a value"));
            index as i64 + name_base
        })
    };
    let mut set = 0u64;
    for part in field.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => (range, step.parse::<usize>().unwrap()),
            None => (part, 1),
        };
        let (first, last) = if range == "*" || range == "?" {
            (low, high)
        } else if let Some((first, last)) = range.split_once('-') {
            (value(first), value(last))
        } else {
            (value(range), value(range))
        };
        assert!(low <= first && first <= last && last <= high, "{field:?}");
        for v in (first..=last).step_by(step) {
            set |= 1 << v;
        }
    }
    set
}

fn bits(set: u64) -> impl Iterator<Item = i64> {
    (0..64).filter(move |bit| set & (1 << bit) != 0)
}

/// What a local time is in a zone: one instant, two (the clock went back; earlier first), or none
/// (the clock jumped over it), with the instant the jump happened.
enum Local {
    Instants(Vec<i64>),
    Gap { transition: i64 },
}

fn offset_at(zone: Tz, instant: i64) -> i64 {
    let utc = DateTime::from_timestamp(instant, 0).unwrap().naive_utc();
    i64::from(zone.offset_from_utc_datetime(&utc).fix().local_minus_utc())
}

/// Resolves a local time by trying the offsets in force 15 hours either side of it (no zone here
/// changes twice within 30 hours, and no offset exceeds 14 hours).
fn resolve(zone: Tz, civil: i64) -> Local {
    let before = offset_at(zone, civil - 15 * HOUR);
    let after = offset_at(zone, civil + 15 * HOUR);
    let mut instants: Vec<i64> = [before, after]
        .into_iter()
        .map(|offset| civil - offset)
        .filter(|&instant| offset_at(zone, instant) == civil - instant)
        .collect();
    instants.sort_unstable();
    instants.dedup();
    if !instants.is_empty() {
        return Local::Instants(instants);
    }
    Local::Gap {
        transition: first_instant_with_offset(zone, civil - 15 * HOUR, civil + 15 * HOUR, after),
    }
}

/// The first instant in `(low, high]` from which `zone` has `offset`, given that it has it at
/// `high` and not at `low`, and changes once in between.
fn first_instant_with_offset(zone: Tz, mut low: i64, mut high: i64, offset: i64) -> i64 {
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        if offset_at(zone, middle) == offset {
            high = middle;
        } else {
            low = middle;
        }
    }
    high
}

/// The smallest and largest UTC offsets of `zone` around the years the starts are drawn from.
fn zone_offsets(zone: Tz) -> (i64, i64) {
    static OFFSETS: Mutex<Vec<(Tz, (i64, i64))>> = Mutex::new(Vec::new());
    let mut known = OFFSETS.lock().unwrap();
    if let Some((_, offsets)) = known.iter().find(|(z, _)| *z == zone) {
        return *offsets;
    }
    let offsets: Vec<i64> = (FIRST_START - 400 * DAY..LAST_START + 400 * DAY)
        .step_by(DAY as usize)
        .map(|instant| offset_at(zone, instant))
        .collect();
    let bounds = (
        *offsets.iter().min().unwrap(),
        *offsets.iter().max().unwrap(),
    );
    known.push((zone, bounds));
    bounds
}

/// The instants `zone` changes its offset at, in [2020, 2031).
fn transitions(zone: Tz) -> &'static [i64] {
    static TRANSITIONS: OnceLock<Vec<Vec<i64>>> = OnceLock::new();
    let all = TRANSITIONS.get_or_init(|| {
        let from = 1_577_836_800; // 2020-01-01T00:00:00Z
        let until = 1_924_992_000; // 2031-01-01T00:00:00Z
        ZONES
            .iter()
            .map(|&zone| {
                let mut found = Vec::new();
                let mut instant = from;
                while instant < until {
                    let next = instant + 6 * HOUR;
                    let offset = offset_at(zone, next);
                    if offset_at(zone, instant) != offset {
                        found.push(first_instant_with_offset(zone, instant, next, offset));
                    }
                    instant = next;
                }
                found
            })
            .collect()
    });
    &all[ZONES.iter().position(|&z| z == zone).unwrap()]
}

// ---------------------------------------------------------------------------------------------
// Generators: expressions in cronie's syntax (no L, W, # or ?-less extensions beyond `?`).

/// One list element of a field whose values are `low..=high`.
fn element(low: u32, high: u32) -> BoxedStrategy<String> {
    prop_oneof![
        4 => (low..=high).prop_map(|v| v.to_string()),
        2 => (low..=high, low..=high).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b))),
        1 => (low..=high, low..=high, 1..=high - low)
            .prop_map(|(a, b, step)| format!("{}-{}/{step}", a.min(b), a.max(b))),
        2 => (1..=high - low).prop_map(|step| format!("*/{step}")),
    ]
    .boxed()
}

/// A field: `*`, one element, or a list (which may contain `*`, as cronie allows).
fn field(low: u32, high: u32, star_weight: u32) -> BoxedStrategy<String> {
    prop_oneof![
        star_weight => Just("*".to_string()),
        6 => element(low, high),
        2 => prop::collection::vec(element(low, high), 2..=3).prop_map(|parts| parts.join(",")),
        1 => element(low, high).prop_map(|part| format!("*,{part}")),
    ]
    .boxed()
}

/// A name in a random case.
fn name(names: &'static [&'static str], index: usize) -> BoxedStrategy<String> {
    prop_oneof![
        Just(names[index].to_string()),
        Just(names[index].to_ascii_uppercase()),
        Just({
            let mut title = names[index].to_string();
            title[..1].make_ascii_uppercase();
            title
        }),
    ]
    .boxed()
}

fn month() -> BoxedStrategy<String> {
    prop_oneof![
        8 => field(1, 12, 8),
        1 => (0..12usize).prop_flat_map(|i| name(&MONTH_NAMES, i)),
        1 => (0..12usize, 0..12usize).prop_flat_map(|(a, b)| {
            (name(&MONTH_NAMES, a.min(b)), name(&MONTH_NAMES, a.max(b)))
                .prop_map(|(a, b)| format!("{a}-{b}"))
        }),
    ]
    .boxed()
}

fn day_of_month() -> BoxedStrategy<String> {
    prop_oneof![8 => field(1, 31, 5), 1 => Just("?".to_string())].boxed()
}

fn day_of_week() -> BoxedStrategy<String> {
    prop_oneof![
        8 => field(0, 7, 5),
        1 => Just("?".to_string()),
        2 => (0..7usize).prop_flat_map(|i| name(&WEEKDAY_NAMES, i)),
        // A range of names; Sunday only at its start (cronie reads a final `sun` as 0).
        1 => (0..7usize, 1..7usize).prop_flat_map(|(a, b)| {
            (name(&WEEKDAY_NAMES, a.min(b)), name(&WEEKDAY_NAMES, a.max(b).max(1)))
                .prop_map(|(a, b)| format!("{a}-{b}"))
        }),
    ]
    .boxed()
}

/// Seconds (six-field form only) lean to few values, so that a case stays cheap.
fn second() -> BoxedStrategy<String> {
    prop_oneof![
        4 => Just("0".to_string()),
        3 => element(0, 59),
        1 => Just("*".to_string()),
    ]
    .boxed()
}

/// Hours lean to those the zones change their clocks in (Santiago at midnight, the others
/// between 02:00 and 03:45), so that fixed-time jobs meet gaps and repeats often.
fn hour() -> BoxedStrategy<String> {
    let near_changes = prop::collection::vec(prop::sample::select(vec![0, 1, 2, 3, 23]), 1..=3)
        .prop_map(|hours| {
            let hours: Vec<String> = hours.iter().map(u32::to_string).collect();
            hours.join(",")
        });
    prop_oneof![3 => field(0, 23, 4), 2 => near_changes].boxed()
}

fn expression() -> impl Strategy<Value = String> {
    (
        prop::option::weighted(0.3, second()),
        field(0, 59, 3),
        hour(),
        day_of_month(),
        month(),
        day_of_week(),
    )
        .prop_map(|(second, minute, hour, day, month, weekday)| {
            let fields = format!("{minute} {hour} {day} {month} {weekday}");
            match second {
                Some(second) => format!("{second} {fields}"),
                None => fields,
            }
        })
}

/// A start instant: near one of the zone's transitions (mostly within hours of it, always within
/// two days), exactly on a minute or not, or anywhere in the years covered.
#[derive(Debug, Clone)]
enum Start {
    NearTransition { which: Index, seconds: i64 },
    Anywhere(i64),
}

fn start() -> impl Strategy<Value = Start> {
    prop_oneof![
        // On the change, a second either side, or a whole number of half hours away.
        1 => (any::<Index>(), -1i64..=1)
            .prop_map(|(which, seconds)| Start::NearTransition { which, seconds }),
        1 => (any::<Index>(), -6i64..=6)
            .prop_map(|(which, halves)| Start::NearTransition { which, seconds: halves * 1800 }),
        3 => (any::<Index>(), -3 * HOUR..3 * HOUR)
            .prop_map(|(which, seconds)| Start::NearTransition { which, seconds }),
        2 => (any::<Index>(), -2 * 24 * 60..2 * 24 * 60i64)
            .prop_map(|(which, minutes)| Start::NearTransition { which, seconds: minutes * 60 }),
        1 => (any::<Index>(), -2 * DAY..2 * DAY)
            .prop_map(|(which, seconds)| Start::NearTransition { which, seconds }),
        1 => (FIRST_START..LAST_START).prop_map(Start::Anywhere),
    ]
}

impl Start {
    fn instant(&self, zone: Tz) -> i64 {
        match self {
            Start::NearTransition { which, seconds } => {
                let transitions = transitions(zone);
                transitions[which.index(transitions.len())] + seconds
            }
            Start::Anywhere(instant) => *instant,
        }
    }
}

fn utc(instant: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(instant, 0).unwrap()
}

fn shown(zone: Tz, instants: &[i64]) -> Vec<String> {
    instants
        .iter()
        .map(|&t| utc(t).with_timezone(&zone).to_rfc3339())
        .collect()
}

/// zkcron's next fires after `start`, or why it refused the expression.
fn zkcron_fires(expression: &str, zone: Tz, start: i64) -> Result<Vec<i64>, ScheduleError> {
    let schedule = Schedule::parse(expression, zone)?;
    Ok(schedule
        .ticks_after(utc(start))
        .take(FIRES)
        .map(|t| t.timestamp())
        .collect())
}

/// Compares zkcron with the reference for one case; `Err` says how they differ.
fn compare(expression: &str, zone: Tz, start: i64) -> Result<(), String> {
    let reference = Cronie::parse(expression).next_fires(zone, start, FIRES);
    let context = format!(
        "{expression:?} in {zone} after {}",
        utc(start).with_timezone(&zone)
    );
    let ours = match zkcron_fires(expression, zone, start) {
        Ok(ours) => ours,
        Err(ScheduleError::NeverFires { .. }) if reference.is_empty() => return Ok(()),
        Err(error) => return Err(format!("{context}: zkcron refused it: {error}")),
    };
    if ours != reference {
        return Err(format!(
            "{context}:\n  zkcron:    {:?}\n  reference: {:?}",
            shown(zone, &ours),
            shown(zone, &reference)
        ));
    }
    // The way back agrees with the way forward: each fire is the latest at or before itself,
    // and the one before it is the latest a second earlier.
    let schedule = Schedule::parse(expression, zone).unwrap();
    for (k, &fire) in reference.iter().enumerate() {
        let at = schedule
            .latest_at_or_before(utc(fire))
            .map(|t| t.timestamp());
        if at != Some(fire) {
            return Err(format!(
                "{context}: latest_at_or_before({}) is {:?}",
                shown(zone, &[fire])[0],
                at.map(|t| shown(zone, &[t])[0].clone())
            ));
        }
        if k > 0 {
            let before = schedule
                .latest_at_or_before(utc(fire - 1))
                .map(|t| t.timestamp());
            if before != Some(reference[k - 1]) {
                return Err(format!(
                    "{context}: latest_at_or_before({} - 1s) is {:?}, not {}",
                    shown(zone, &[fire])[0],
                    before.map(|t| shown(zone, &[t])[0].clone()),
                    shown(zone, &[reference[k - 1]])[0]
                ));
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(Config {
        cases: 800,
        // Failures are turned into named tests in src/schedule.rs, not files left in the tree.
        failure_persistence: None,
        ..Config::default()
    })]

    #[test]
    fn next_fires_match_cronie_semantics_around_dst_transitions(
        expression in expression(),
        zone in prop::sample::select(&ZONES[..]),
        start in start(),
    ) {
        let start = start.instant(zone);
        if let Err(difference) = compare(&expression, zone, start) {
            prop_assert!(false, "{}", difference);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The reference itself, on cases worked out by hand, so that agreement means something.

fn reference(expression: &str, zone: Tz, after: &str, n: usize) -> Vec<String> {
    let start = DateTime::parse_from_rfc3339(after).unwrap().timestamp();
    shown(zone, &Cronie::parse(expression).next_fires(zone, start, n))
}

#[test]
fn reference_reads_the_day_fields_as_cronie() {
    assert_eq!(
        reference("0 0 */2 * MON", Tz::UTC, "2026-01-01T00:00:00Z", 3),
        [
            "2026-01-05T00:00:00+00:00",
            "2026-01-19T00:00:00+00:00",
            "2026-02-09T00:00:00+00:00"
        ]
    );
    assert_eq!(
        reference("0 0 13 * FRI", Tz::UTC, "2026-02-01T00:00:00Z", 3),
        [
            "2026-02-06T00:00:00+00:00",
            "2026-02-13T00:00:00+00:00",
            "2026-02-20T00:00:00+00:00"
        ]
    );
    // 7 is Sunday, and 5-7 is Friday to Sunday.
    assert_eq!(
        reference("0 12 * * 5-7", Tz::UTC, "2026-01-01T00:00:00Z", 3),
        [
            "2026-01-02T12:00:00+00:00",
            "2026-01-03T12:00:00+00:00",
            "2026-01-04T12:00:00+00:00"
        ]
    );
}

#[test]
fn reference_handles_gaps_and_repeats_per_kind_of_schedule() {
    let new_york = chrono_tz::America::New_York;
    // Fixed time in the 2026-03-08 gap: at the first valid instant after it.
    assert_eq!(
        reference("30 2 * * *", new_york, "2026-03-07T12:00:00Z", 2),
        ["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"]
    );
    // Fixed time (a list is still fixed for cronie) in the 2026-11-01 repeat: once.
    assert_eq!(
        reference("0,30 1 * * *", new_york, "2026-11-01T04:00:00Z", 3),
        [
            "2026-11-01T01:00:00-04:00",
            "2026-11-01T01:30:00-04:00",
            "2026-11-02T01:00:00-05:00"
        ]
    );
    // Wildcard: every half hour keeps its rhythm through the repeat.
    assert_eq!(
        reference("*/30 1 * * *", new_york, "2026-11-01T04:00:00Z", 5),
        [
            "2026-11-01T01:00:00-04:00",
            "2026-11-01T01:30:00-04:00",
            "2026-11-01T01:00:00-05:00",
            "2026-11-01T01:30:00-05:00",
            "2026-11-02T01:00:00-05:00"
        ]
    );
    // Wildcard in the gap: nothing until the clock is past it.
    assert_eq!(
        reference("*/30 2 * * *", new_york, "2026-03-08T06:00:00Z", 1),
        ["2026-03-09T02:00:00-04:00"]
    );
    // Lord Howe's half-hour gap (02:00 -> 02:30) and Chatham's hour at 02:45 -> 03:45.
    assert_eq!(
        reference(
            "15 2 * * *",
            chrono_tz::Australia::Lord_Howe,
            "2026-10-03T00:00:00Z",
            1
        ),
        ["2026-10-04T02:30:00+11:00"]
    );
    assert_eq!(
        reference(
            "0 3 * * *",
            chrono_tz::Pacific::Chatham,
            "2026-09-26T00:00:00Z",
            2
        ),
        ["2026-09-27T03:45:00+13:45", "2026-09-28T03:00:00+13:45"]
    );
}

#[test]
fn the_starts_cover_every_zone_s_transitions() {
    for zone in ZONES {
        let found = transitions(zone).len();
        assert!(
            (20..=23).contains(&found),
            "{zone}: {found} transitions in 2020-2030"
        );
    }
}
