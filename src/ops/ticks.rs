//! `zkcron history TASK --ticks`: a task's tick ledger (`plan::ledger`), every tick of its
//! schedule within the history's reach: the runs (from the history) and the ticks not run
//! (from its fire record, or its units' records joined), with the ticks nobody has accounted
//! for yet when the task is paused or no node leads it. The same lines answer
//! `GET /api/tasks/TASK/ticks` and draw the task page's strip.

use chrono::{DateTime, Utc};

use super::model::{self, Snapshot};
use super::render;
use crate::coord::record;
use crate::coord::records::{FireRecord, HistoryEntry, RunTrigger};
use crate::plan::ledger::{self, Line, Open, Reason, TickEntry};
use crate::schedule::Schedule;

/// The scheduled runs of `runs` as the ledger's ran ticks: tick and fire id.
pub fn ran(runs: &[HistoryEntry]) -> Vec<(DateTime<Utc>, String)> {
    runs.iter()
        .filter(|r| r.trigger == RunTrigger::Schedule && !r.backfill && r.after.is_none())
        .map(|r| (r.tick, r.fire_id.clone()))
        .collect()
}

/// The ledger of `task` in a cluster: its records' entries, its history's scheduled `runs`,
/// and the open ticks when it is paused or nobody may or does lead it.
pub fn of_cluster(
    snapshot: &Snapshot,
    task: &str,
    runs: &[HistoryEntry],
    now: DateTime<Utc>,
) -> Vec<Line> {
    let unit = format!("{task}@");
    let records: Vec<&FireRecord> = snapshot
        .fire_records
        .iter()
        .filter(|(name, _)| *name == task || name.starts_with(&unit))
        .map(|(_, record)| record)
        .collect();
    let open = records
        .iter()
        .filter_map(|r| record::accounted(r))
        .max()
        .and_then(|after| {
            let reason = if snapshot.paused.contains_key(task) {
                Reason::Paused
            } else if model::no_one_may_run(snapshot, task).is_some() {
                Reason::NoEligibleNode
            } else if records.len() == 1 && !snapshot.leases.contains_key(task) {
                Reason::NoNode
            } else {
                return None;
            };
            Some(Open { after, now, reason })
        });
    let mut stored = joined(records.iter().map(|r| r.ticks.as_slice()));
    let ran = ran(runs);
    let result = snapshot.results.get(task).map(|r| r.tick);
    for record in &records {
        let live = snapshot.members.iter().any(|m| m.record.id == record.node);
        stored.extend(lost(record, &ran, result, live));
    }
    let schedule = model::task_schedule(snapshot, task);
    // Since the first live node that defines it started: the ticks its window leaves out.
    let since = snapshot
        .members
        .iter()
        .filter(|m| snapshot.entry(&m.record, task).is_some())
        .map(|m| m.record.started_at)
        .min();
    if let (Some(schedule), Some(since)) = (&schedule, since) {
        stored.extend(ledger::window_entries(schedule, since, now));
        stored.extend(ledger::excluded_entries(schedule, since, now));
    }
    named(
        ledger::lines(&stored, &ran, schedule.as_ref(), open),
        schedule.as_ref(),
    )
}

/// The newest tick of `record` as lost with its node: claimed to run by a node that is no
/// longer `live`, with no run of it in the history and no result of it or a later tick.
/// (`on_node_loss = "rerun"` runs it again: then its rerun is in the history.) Only the record's
/// own tick can be told: older claims are overwritten.
fn lost(
    record: &FireRecord,
    ran: &[(DateTime<Utc>, String)],
    result: Option<DateTime<Utc>>,
    live: bool,
) -> Option<TickEntry> {
    let tick = record
        .tick
        .filter(|_| record.run && !live && !record.node.is_empty())?;
    let recorded = ran.iter().any(|(t, _)| *t == tick) || result.is_some_and(|r| r >= tick);
    (!recorded).then(|| TickEntry::one(tick, Reason::NodeLost))
}

/// The ledger of a task of the embedded backend: its record's `entries` and its accounted
/// tick (`last`), its history's `runs`, its `schedule`, whether it is `paused`, and when the
/// daemon started (`since`: the ticks its window left out since).
pub fn of_local(
    entries: &[TickEntry],
    last: Option<DateTime<Utc>>,
    runs: &[HistoryEntry],
    schedule: &Schedule,
    (paused, since): (bool, DateTime<Utc>),
    now: DateTime<Utc>,
) -> Vec<Line> {
    let open = last.filter(|_| paused).map(|after| Open {
        after,
        now,
        reason: Reason::Paused,
    });
    let mut entries = entries.to_vec();
    entries.extend(ledger::window_entries(schedule, since, now));
    entries.extend(ledger::excluded_entries(schedule, since, now));
    named(
        ledger::lines(&entries, &ran(runs), Some(schedule), open),
        Some(schedule),
    )
}

/// `lines` with each `excluded` line's message naming its calendar.
fn named(mut lines: Vec<Line>, schedule: Option<&Schedule>) -> Vec<Line> {
    let Some(schedule) = schedule else {
        return lines;
    };
    for line in lines
        .iter_mut()
        .filter(|l| l.reason == Some(Reason::Excluded))
    {
        if let Some(message) = ledger::excluded_message(schedule, line.from) {
            line.message = Some(message);
        }
    }
    lines
}

/// The entries of several records (a task's units) in one list, each once.
fn joined<'a>(records: impl Iterator<Item = &'a [TickEntry]>) -> Vec<TickEntry> {
    let mut all: Vec<TickEntry> = Vec::new();
    for entries in records {
        for entry in entries {
            if !all.contains(entry) {
                all.push(*entry);
            }
        }
    }
    all
}

/// The lines from `since` on (those that end at or after it).
pub fn since(mut lines: Vec<Line>, since: Option<DateTime<Utc>>) -> Vec<Line> {
    if let Some(since) = since {
        lines.retain(|line| line.to >= since);
    }
    lines
}

/// `zkcron history TASK --ticks`: one line per entry, oldest first.
pub fn render(lines: &[Line]) -> String {
    let mut rows = vec![vec![
        "FROM".to_string(),
        "TO".into(),
        "TICKS".into(),
        "OUTCOME".into(),
        "WHY OR FIRE ID".into(),
    ]];
    for line in lines {
        let why = match (&line.fire_id, line.reason) {
            (Some(fire_id), _) => fire_id.clone(),
            (None, Some(reason)) => format!("{}: {}", reason.code(), reason.message()),
            (None, None) => "-".into(),
        };
        rows.push(vec![
            render::instant(line.from),
            if line.to == line.from {
                "-".into()
            } else {
                render::instant(line.to)
            },
            if line.count == 0 {
                "?".into()
            } else {
                line.count.to_string()
            },
            line.outcome.code().into(),
            why,
        ]);
    }
    render::table(&rows)
}
