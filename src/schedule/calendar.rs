//! Calendars: named sets of local days and periods when a task must not run (`calendars.d/`,
//! a task's `exclude`). A [`Calendar`] is read in its own zone; [`Calendar::excluded_at`] turns
//! the day or period an instant falls in into a stretch of UTC, so that a schedule skips a
//! whole excluded stretch in one step rather than tick by tick.

use std::sync::Arc;

use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, Offset, TimeDelta, TimeZone, Utc};
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
    /// It always holds `at` (`from <= at < until`), also on the second pass of a repeated hour.
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
        // Within the stretch of constant UTC offset around `at`, local time runs with UTC: the
        // excluded stretch is exact there. A clock change ends it (on either side of a
        // repeated hour the same local times are other instants); the walk goes on from there.
        let offset = TimeDelta::seconds(i64::from(
            self.timezone
                .offset_from_utc_datetime(&at.naive_utc())
                .fix()
                .local_minus_utc(),
        ));
        let changes = super::dst::transitions(
            self.timezone,
            at - TimeDelta::days(1),
            at + TimeDelta::days(1),
        );
        let segment_start = changes.iter().map(|c| c.at).rfind(|t| *t <= at);
        let segment_end = changes.iter().map(|c| c.at).find(|t| *t > at);
        let utc = |local: NaiveDateTime| local.checked_sub_signed(offset).map(|t| t.and_utc());
        let start = [utc(from), segment_start].into_iter().flatten().max()?;
        let end = [utc(until), segment_end].into_iter().flatten().min()?;
        (start <= at && at < end).then_some((start, end))
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
