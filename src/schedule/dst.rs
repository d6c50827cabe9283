//! The ticks a clock change touches: [`Schedule::dst_changes`] lists, for a stretch of time,
//! each local time of the schedule that a change skips (spring-forward) or repeats (fall-back),
//! and what the schedule's DST rule makes of it. The instants come from the rule the schedule
//! fires by (`CronExpr::instants_of`), so the listing says what the daemon does.

use chrono::{DateTime, NaiveDateTime, Offset, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;

use super::cron::{CronExpr, first_instant};
use super::{Part, Schedule};

/// A local time of a schedule that a clock change touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DstChange {
    /// The local time the expression names.
    pub local: NaiveDateTime,
    /// The expression that names it.
    pub expression: String,
    pub effect: DstEffect,
}

/// What a clock change makes of a local time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DstEffect {
    /// Spring-forward skips it; it runs at the first instant after the gap (`dst_gap =
    /// "run_after"`).
    Moved { at: DateTime<Utc> },
    /// Spring-forward skips it and it does not run (`dst_gap = "skip"`).
    Skipped,
    /// Fall-back repeats it and it runs at both instants (`dst_repeat = "both"`).
    Doubled {
        first: DateTime<Utc>,
        second: DateTime<Utc>,
    },
    /// Fall-back repeats it and it runs once, at the first (`dst_repeat = "first"`), not at
    /// `not`.
    Once {
        at: DateTime<Utc>,
        not: DateTime<Utc>,
    },
}

/// A change of a zone's UTC offset: at `at`, from `before` to `after` seconds east of UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Transition {
    pub(super) at: DateTime<Utc>,
    pub(super) before: i64,
    pub(super) after: i64,
}

/// The step the search for changes takes: zones change their offset at most once in it.
const STEP: TimeDelta = TimeDelta::hours(6);

/// The changes of `zone`'s UTC offset after `from` and at or before `until`.
pub(super) fn transitions(zone: Tz, from: DateTime<Utc>, until: DateTime<Utc>) -> Vec<Transition> {
    let offset = |t: DateTime<Utc>| {
        i64::from(
            zone.offset_from_utc_datetime(&t.naive_utc())
                .fix()
                .local_minus_utc(),
        )
    };
    let mut found = Vec::new();
    let mut low = from;
    while low < until {
        let high = (low + STEP).min(until);
        let (before, after) = (offset(low), offset(high));
        if before != after {
            let at = first_instant(low, high, |t| offset(t) == after);
            found.push(Transition { at, before, after });
        }
        low = high;
    }
    found
}

impl Schedule {
    /// The local times of the schedule that a clock change after `from` and at or before
    /// `until` skips or repeats, in order, with what the schedule does with each. Intervals
    /// and instants (`@every`, `@at`) have none; a change outside the window is left out.
    pub fn dst_changes(&self, from: DateTime<Utc>, until: DateTime<Utc>) -> Vec<DstChange> {
        let window = self.window();
        let (from, until) = (
            window.from.map_or(from, |start| from.max(start)),
            window.until.map_or(until, |end| until.min(end)),
        );
        let crons: Vec<&CronExpr> = self
            .parts()
            .iter()
            .filter_map(|part| match part {
                Part::Cron(cron) => Some(cron),
                _ => None,
            })
            .collect();
        if crons.is_empty() || from >= until {
            return Vec::new();
        }
        let mut changes = Vec::new();
        for transition in transitions(self.timezone, from, until) {
            for cron in &crons {
                changes.extend(cron.changes_at(transition));
            }
        }
        changes.sort_by(|a, b| (a.local, &a.expression).cmp(&(b.local, &b.expression)));
        changes.dedup();
        changes
    }
}

impl CronExpr {
    /// The local times of this expression that `transition` skips or repeats, and their fate.
    fn changes_at(&self, transition: Transition) -> Vec<DstChange> {
        let Transition { at, before, after } = transition;
        let wall = at.naive_utc();
        // Spring-forward skips the local times from the old wall clock to the new; fall-back
        // repeats those from the new to the old.
        let (start, end) = if after > before {
            (
                wall + TimeDelta::seconds(before),
                wall + TimeDelta::seconds(after),
            )
        } else {
            (
                wall + TimeDelta::seconds(after),
                wall + TimeDelta::seconds(before),
            )
        };
        let cron = self.cron();
        let mut changes = Vec::new();
        let mut found = cron.find_next_occurrence(&start, true);
        while let Ok(local) = found {
            if local >= end {
                break;
            }
            let instants: Vec<DateTime<Utc>> = self.instants_of(local).collect();
            let effect = if after > before {
                match instants.first() {
                    Some(&at) => DstEffect::Moved { at },
                    None => DstEffect::Skipped,
                }
            } else {
                let first = (local - TimeDelta::seconds(before)).and_utc();
                let second = (local - TimeDelta::seconds(after)).and_utc();
                if instants.len() == 2 {
                    DstEffect::Doubled { first, second }
                } else {
                    DstEffect::Once {
                        at: first,
                        not: second,
                    }
                }
            };
            changes.push(DstChange {
                local,
                expression: self.expression().to_string(),
                effect,
            });
            found = cron.find_next_occurrence(&local, false);
        }
        changes
    }
}

#[cfg(test)]
mod tests;
