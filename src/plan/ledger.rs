//! The tick ledger: what became of every tick of a task's schedule that did not run, and why.
//!
//! A tick that runs is in the task's history (its fire id). Every other tick is a [`TickEntry`]:
//! a range of consecutive ticks with one [`Reason`] (an every-second task paused for a day is one
//! entry). The leader decides them (the planner's missed and late ticks, `overlap`, a full
//! queue); they travel to the fire record with the next write the leader makes of it anyway (a
//! claim), or with a write of their own at most once a minute per task ([`NOTE_AFTER`]). `zkcron
//! resume` adds the paused period in the write that moves the record. The record keeps the newest
//! [`STORED_ENTRIES`]; [`lines`] joins them with the history's runs for `history --ticks`, the API
//! and the task page.

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use crate::schedule::{Schedule, Window};

/// A fire record keeps this many entries, the newest.
pub const STORED_ENTRIES: usize = 64;

/// Entries not carried by a claim within this long are written on their own.
pub const NOTE_AFTER: TimeDelta = TimeDelta::seconds(60);

/// Counting the ticks of a range stops here (an every-second task down for a month): the
/// count says "at least".
pub const COUNT_LIMIT: u64 = 1_000_000;

/// What became of a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// It ran: its fire id names the run.
    Ran,
    /// zkcron decided not to run it (a rule of the task, or the operator).
    Skipped,
    /// Nobody ran it: no node fired it, or the node that claimed it was lost.
    Missed,
}

impl Outcome {
    pub fn code(self) -> &'static str {
        match self {
            Outcome::Ran => "ran",
            Outcome::Skipped => "skipped",
            Outcome::Missed => "missed",
        }
    }
}

/// Why a tick did not run: a fixed code and a sentence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// `overlap = "skip"`: the previous run was still going.
    Overlap,
    /// The operator paused the task (`zkcron pause`).
    Paused,
    /// The tick lies outside the task's active window.
    Window,
    /// Missed while the node fell behind (suspended, stopped, its clock jumped); `catch_up`
    /// does not run it late.
    CatchUp,
    /// Older than `starting_deadline` when it could start.
    Deadline,
    /// Claimed to run by a node that was lost before its run was recorded.
    NodeLost,
    /// `overlap = "queue"`: a tick was queued already.
    QueueFull,
    /// No live node may run the task (`version_req`, `require_labels`, drained).
    NoEligibleNode,
    /// No node fired it on time (none led the task); found by the next leader.
    NoNode,
    /// The tick lies in a day or period of a calendar the task excludes (`exclude`).
    Excluded,
}

/// Every reason, in code order (the metric starts their series).
pub const REASONS: [Reason; 10] = [
    Reason::Overlap,
    Reason::Paused,
    Reason::Window,
    Reason::CatchUp,
    Reason::Deadline,
    Reason::NodeLost,
    Reason::QueueFull,
    Reason::NoEligibleNode,
    Reason::NoNode,
    Reason::Excluded,
];

impl Reason {
    pub fn outcome(self) -> Outcome {
        match self {
            Reason::NodeLost | Reason::NoEligibleNode | Reason::NoNode => Outcome::Missed,
            _ => Outcome::Skipped,
        }
    }

    pub fn code(self) -> &'static str {
        match self {
            Reason::Overlap => "overlap",
            Reason::Paused => "paused",
            Reason::Window => "window",
            Reason::CatchUp => "catch_up",
            Reason::Deadline => "deadline",
            Reason::NodeLost => "node_lost",
            Reason::QueueFull => "queue_full",
            Reason::NoEligibleNode => "no_eligible_node",
            Reason::NoNode => "no_node",
            Reason::Excluded => "excluded",
        }
    }

    /// The sentence `history --ticks` prints.
    pub fn message(self) -> &'static str {
        match self {
            Reason::Overlap => "the previous run was still going (overlap = \"skip\")",
            Reason::Paused => "the task was paused (zkcron pause)",
            Reason::Window => "outside the task's active window (active_from, active_until)",
            Reason::CatchUp => {
                "missed while the node fell behind (stopped, suspended, clock jump); catch_up did not run it late"
            }
            Reason::Deadline => "older than starting_deadline when it could start",
            Reason::NodeLost => "its node was lost before the run's end was recorded",
            Reason::QueueFull => "a tick was queued already (overlap = \"queue\")",
            Reason::NoEligibleNode => {
                "no live node may run the task (version_req, require_labels, drained nodes)"
            }
            Reason::NoNode => {
                "no node fired it on time (none was leading the task); catch_up did not run it late"
            }
            Reason::Excluded => "in a day or period of a calendar the task excludes (exclude)",
        }
    }
}

/// Consecutive ticks with one reason: `from` and `to` are the first and the last (whole
/// seconds), `count` how many. An entry whose ticks were not counted by its writer (`zkcron
/// resume` knows no schedule) has `count` 0, and `from`, `to` bound the range; readers with the
/// schedule count it ([`lines`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TickEntry {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub count: u64,
    pub reason: Reason,
}

impl TickEntry {
    /// One tick.
    pub fn one(tick: DateTime<Utc>, reason: Reason) -> TickEntry {
        TickEntry {
            from: tick,
            to: tick,
            count: 1,
            reason,
        }
    }
}

/// Appends `entry` to the entries of one leader's stretch, oldest first: one entry with the
/// last when it has the same reason and follows it (nothing ran in between: the caller starts
/// a new stretch with every tick that runs).
pub fn push(entries: &mut Vec<TickEntry>, entry: TickEntry) {
    if let Some(last) = entries.last_mut()
        && last.reason == entry.reason
        && last.count > 0
        && entry.count > 0
        && last.to < entry.from
    {
        last.to = entry.to;
        last.count = last.count.saturating_add(entry.count);
        return;
    }
    entries.push(entry);
}

/// A fire record's entries after a write that carries `new`: `stored` with `new` added (one it
/// holds already left out), the first new one joined to the last stored one when it continues
/// it (same reason, and no claim to run since: `record`, the record's tick before the write, is
/// not after the stored one's end), oldest first, and the newest [`STORED_ENTRIES`] kept.
pub fn merged(
    stored: &[TickEntry],
    new: &[TickEntry],
    record: Option<DateTime<Utc>>,
) -> Vec<TickEntry> {
    let mut entries = stored.to_vec();
    let mut joinable = stored
        .last()
        .is_some_and(|last| record.is_none_or(|record| record <= last.to));
    for entry in new {
        // Written already (a claim whose answer was lost carries its entries again).
        let covered = entries
            .iter()
            .any(|e| e.from <= entry.from && entry.to <= e.to && e.reason == entry.reason);
        if covered {
            continue;
        }
        let follows = entries.last().is_none_or(|last| last.to < entry.from);
        if joinable && follows {
            push(&mut entries, *entry);
        } else {
            entries.push(*entry);
        }
        joinable = follows;
    }
    // An entry given back by a failed claim can arrive after newer ones: oldest first.
    entries.sort_by_key(|e| e.from);
    if entries.len() > STORED_ENTRIES {
        entries.drain(..entries.len() - STORED_ENTRIES);
    }
    entries
}

/// `entries` without the ticks at or before `record` (a record's tick, which its claim accounts
/// for): an entry wholly before it goes, one across it starts after it, uncounted (readers count
/// it). A `node_lost` entry is of the claimed tick itself, and stays.
pub fn after(entries: &[TickEntry], record: Option<DateTime<Utc>>) -> Vec<TickEntry> {
    let Some(record) = record else {
        return entries.to_vec();
    };
    entries
        .iter()
        .filter(|e| e.reason == Reason::NodeLost || e.to > record)
        .map(|e| match e.reason {
            Reason::NodeLost => *e,
            _ if e.from > record => *e,
            _ => TickEntry {
                from: record + TimeDelta::seconds(1),
                count: 0,
                ..*e
            },
        })
        .collect()
}

/// The newest tick `entries` account for.
pub fn accounted_through(entries: &[TickEntry]) -> Option<DateTime<Utc>> {
    entries.iter().map(|e| e.to).max()
}

/// One line of the ledger as shown: `{"from", "to", "count", "outcome", "reason", "message",
/// "fire_id"}` (`reason`, `message` absent for a run; `fire_id` only for a run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub count: u64,
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fire_id: Option<String>,
}

impl Line {
    fn of(entry: &TickEntry) -> Line {
        Line {
            from: entry.from,
            to: entry.to,
            count: entry.count,
            outcome: entry.reason.outcome(),
            reason: Some(entry.reason),
            message: Some(entry.reason.message().to_string()),
            fire_id: None,
        }
    }
}

/// Ticks after the newest accounted one that nobody has accounted for yet, as a reader sees
/// them now: the task is paused, or no node leads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Open {
    pub after: DateTime<Utc>,
    pub now: DateTime<Utc>,
    pub reason: Reason,
}

/// The ledger of one task, oldest first: `stored` (a fire record's, or several units' joined),
/// the scheduled runs `ran` (tick and fire id), and the `open` ticks. With the task's
/// `schedule`, uncounted entries are counted (and dropped when they hold no tick) and entries
/// overlapping an earlier one start after it.
pub fn lines(
    stored: &[TickEntry],
    ran: &[(DateTime<Utc>, String)],
    schedule: Option<&Schedule>,
    open: Option<Open>,
) -> Vec<Line> {
    let mut entries: Vec<TickEntry> = stored.to_vec();
    if let (Some(open), Some(schedule)) = (open, schedule)
        && let Some(from) = schedule.next_after(open.after)
        && from <= open.now
    {
        entries.push(TickEntry {
            from,
            to: open.now,
            count: 0,
            reason: open.reason,
        });
    }
    entries.sort_by_key(|e| e.from);
    let mut out: Vec<Line> = Vec::new();
    let mut through: Option<DateTime<Utc>> = None;
    for mut entry in entries {
        if let Some(schedule) = schedule {
            let start = match through {
                Some(through) if entry.from <= through => through,
                _ => entry.from - TimeDelta::seconds(1),
            };
            if entry.count == 0 || start >= entry.from {
                match count(schedule, start, entry.to) {
                    Some((first, last, n)) => {
                        entry.from = first;
                        entry.to = last;
                        entry.count = n;
                    }
                    None => continue,
                }
            }
        }
        through = Some(through.map_or(entry.to, |t| t.max(entry.to)));
        out.push(Line::of(&entry));
    }
    out.extend(ran.iter().map(|(tick, fire_id)| Line {
        from: *tick,
        to: *tick,
        count: 1,
        outcome: Outcome::Ran,
        reason: None,
        message: None,
        fire_id: Some(fire_id.clone()),
    }));
    out.sort_by_key(|line| (line.from, line.outcome));
    out
}

/// The ticks of `schedule`'s expressions that its window (`active_from`, `active_until`) leaves
/// out between `since` and `now`: before the window and after it, an entry each (`window`).
/// Readers add them: no leader sees these ticks, which are not ticks of the windowed schedule.
pub fn window_entries(
    schedule: &Schedule,
    since: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Vec<TickEntry> {
    let window = schedule.window();
    let raw = schedule.clone().within(Window::default());
    let mut ranges = Vec::new();
    if let Some(from) = window.from
        && from > since
    {
        ranges.push((since, (from - TimeDelta::seconds(1)).min(now)));
    }
    if let Some(until) = window.until
        && until < now
    {
        ranges.push((until.max(since), now));
    }
    ranges
        .into_iter()
        .filter_map(|(after, until)| count(&raw, after, until))
        .map(|(from, to, count)| TickEntry {
            from,
            to,
            count,
            reason: Reason::Window,
        })
        .collect()
}

/// How many ticks [`excluded_entries`] looks at.
const EXCLUDED_LIMIT: usize = 100_000;

/// The ticks of `schedule`'s expressions that its calendars (`exclude`) remove between `since`
/// and `now`, an entry per run of them (`excluded`; [`excluded_message`] names the calendar).
/// Readers add them, as [`window_entries`].
pub fn excluded_entries(
    schedule: &Schedule,
    since: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Vec<TickEntry> {
    if schedule.exclusions().is_empty() {
        return Vec::new();
    }
    schedule
        .excluded_between(since, now + TimeDelta::nanoseconds(1), EXCLUDED_LIMIT)
        .into_iter()
        .map(|run| TickEntry {
            from: run.first,
            to: run.last,
            count: run.count,
            reason: Reason::Excluded,
        })
        .collect()
}

/// What `history --ticks` says of ticks `schedule`'s calendars removed from `from` on: the
/// reason's sentence with the calendar's name.
pub fn excluded_message(schedule: &Schedule, from: DateTime<Utc>) -> Option<String> {
    let calendar = crate::schedule::excluding(schedule.exclusions(), from)?;
    Some(format!(
        "in a day or period of calendar {} (exclude)",
        calendar.name
    ))
}

/// The first and last tick of `schedule` in `(after, until]` and how many there are (at most
/// [`COUNT_LIMIT`]); `None` without one.
pub fn count(
    schedule: &Schedule,
    after: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Option<(DateTime<Utc>, DateTime<Utc>, u64)> {
    let first = schedule.next_after(after).filter(|t| *t <= until)?;
    let last = schedule.latest_at_or_before(until).unwrap_or(first);
    let mut n = 0u64;
    for tick in schedule.ticks_after(after) {
        if tick > until || n == COUNT_LIMIT {
            break;
        }
        n += 1;
    }
    Some((first, last.max(first), n))
}

#[cfg(test)]
mod tests;
