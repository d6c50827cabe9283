//! Calendars: named sets of local days and periods when a task must not run (`calendars.d/`,
//! a task's `exclude`). A [`Calendar`] is read in its own zone; [`Calendar::excluded_at`] turns
//! the day or period an instant falls in into a stretch of UTC, so that a schedule skips a
//! whole excluded stretch in one step rather than tick by tick.

use std::sync::Arc;

use chrono::{
    DateTime, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, TimeDelta, TimeZone, Utc,
};
use chrono_tz::Tz;

/// A calendar: its name (the file's stem), zone, excluded whole days and half-open periods, as
/// the file gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calendar {
    pub name: Arc<str>,
    pub timezone: Tz,
    /// Whole local days, sorted, without repeats.
    pub dates: Vec<NaiveDate>,
    /// Local `[from, until)` stretches, sorted by `from`.
    pub periods: Vec<(NaiveDateTime, NaiveDateTime)>,
}

/// The calendars a node has loaded, by name.
pub type Calendars = std::collections::BTreeMap<Arc<str>, Arc<Calendar>>;

impl Calendar {
    /// The stretch of UTC `[from, until)` this calendar excludes around `at`, if it excludes
    /// `at`: the whole local day, or the period (merged with the day or period it runs into).
    pub fn excluded_at(&self, at: DateTime<Utc>) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let local = at.with_timezone(&self.timezone).naive_local();
        let mut found: Option<(NaiveDateTime, NaiveDateTime)> = None;
        // Days and periods may touch or overlap: widen the stretch until nothing extends it.
        let mut probe = local;
        loop {
            let day = self
                .dates
                .binary_search(&probe.date())
                .ok()
                .map(|i| day_stretch(self.dates[i]));
            let period = self
                .periods
                .iter()
                .filter(|(from, until)| *from <= probe && probe < *until)
                .max_by_key(|(_, until)| *until)
                .copied();
            let Some((from, until)) = [day, period].into_iter().flatten().max_by_key(|s| s.1)
            else {
                break;
            };
            let (start, end) = match found {
                Some((start, end)) => (start.min(from), end.max(until)),
                None => (from, until),
            };
            if found.is_some_and(|(_, old_end)| old_end >= end) {
                break;
            }
            found = Some((start, end));
            probe = end;
        }
        let (from, until) = found?;
        Some((self.instant(from), self.instant(until)))
    }

    /// 16 hex digits of the xxh3-64 of the calendar's content (zone, days, periods; not its
    /// name nor its `description`): part of the definition of each task that excludes it, so
    /// that nodes whose calendars differ show as drift.
    pub fn digest(&self) -> String {
        let mut text = String::from(self.timezone.name());
        for day in &self.dates {
            text.push_str(&format!(" {day}"));
        }
        text.push(';');
        for (from, until) in &self.periods {
            text.push_str(&format!(" {from}/{until}"));
        }
        format!("{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
    }

    /// Whether `at` falls in an excluded day or period.
    pub fn excludes(&self, at: DateTime<Utc>) -> bool {
        self.excluded_at(at).is_some()
    }

    /// The instant of local time `local` in this calendar's zone: the earlier of a repeated
    /// time, the end of the gap for a skipped one.
    fn instant(&self, local: NaiveDateTime) -> DateTime<Utc> {
        match self.timezone.from_local_datetime(&local) {
            LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => t.with_timezone(&Utc),
            // Spring-forward skipped it: the first instant whose local time is at or past it.
            LocalResult::None => {
                let around = local.and_utc();
                super::cron::first_instant(
                    around - TimeDelta::days(1),
                    around + TimeDelta::days(1),
                    |t| t.with_timezone(&self.timezone).naive_local() >= local,
                )
            }
        }
    }
}

/// A whole local day as a stretch `[00:00, next 00:00)`.
fn day_stretch(day: NaiveDate) -> (NaiveDateTime, NaiveDateTime) {
    let start = day.and_time(NaiveTime::MIN);
    let end = day
        .succ_opt()
        .map_or(NaiveDateTime::MAX, |next| next.and_time(NaiveTime::MIN));
    (start, end)
}

/// The calendar among `calendars` that excludes `at`, if any (the first in their order).
pub fn excluding(calendars: &[Arc<Calendar>], at: DateTime<Utc>) -> Option<&Arc<Calendar>> {
    calendars.iter().find(|c| c.excludes(at))
}

#[cfg(test)]
mod tests;
