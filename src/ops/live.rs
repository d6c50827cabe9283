//! A [`Snapshot`] of the cluster kept current by the znodes that changed, and `status` worked
//! out again only for the tasks they touch: what the dashboard serves from
//! (`http::cache::live` reads the changed znodes a ZooKeeper watch names and applies them here).
//!
//! This is the one place `status` is worked out: a batch read (`zkcron status`, `/status`, the
//! local backend's pages) is a [`Live`] made from one full read ([`status`]), and `explain`'s
//! line of one task ([`task_status`]) is the line [`Live`] works out again for a changed task.
//!
//! Pure: the records come in as bytes, `now` as an argument. Applying changes gives the status
//! of a full read of the same records at the same instant (`tests` checks it): each task's
//! line is kept with the instant until which it holds ([`holds_until`]: its next tick, a
//! window's edge), so a line is worked out again when its records change or that instant
//! passes, never for every task on every request. A change of a member, a task set or a drain
//! mark touches every task's ranking: every line is worked out again, and a member or a task
//! set asks for a full read ([`Applied::ReadAll`]), since it decides which tasks there are.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;

use super::model::{self, Members, Snapshot, Status, TaskParts, TaskStatus};
use crate::coord::backfill::{BackfillRecord, BackfillState};
use crate::coord::lease::{TaskSet, split_unit};
use crate::coord::records::{
    FireRecord, HistoryEntry, LeaseRecord, MarkRecord, Paths, ResultRecord, TaskSetEntry,
    TriggerRecord, TriggerState,
};

/// Each task's schedule as written and its zone, by task.
pub type Schedules = BTreeMap<String, ShownSchedule>;

/// What the pages show of a task's schedule: every expression it fires on (one, or a list's,
/// as written), their zone, and the tasks whose successes run it (`after`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShownSchedule {
    pub expressions: Vec<String>,
    pub zone: String,
    pub after: Vec<String>,
}

/// An ended manual run a trigger record holds, by the trigger's znode name: the newest per
/// task is its `recent_runs` entry.
pub type TriggerRuns = BTreeMap<String, (String, HistoryEntry)>;

/// What a changed znode asks of the reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Applied (or not read by `status`: ignored).
    Done,
    /// A member or a task set changed: which tasks exist and who may run them; read the
    /// whole cluster again.
    ReadAll,
}

/// Which record a path holds, as `status` reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Znode<'a> {
    Member,
    TaskSet,
    Lease(&'a str),
    FireRecord(&'a str),
    Result(&'a str),
    Paused(&'a str),
    Drained,
    Trigger(&'a str),
    Backfill(&'a str),
    /// Something `status` does not read (histories, epochs, runs, the clock).
    Other,
}

fn classify<'a>(paths: &Paths, path: &'a str) -> Znode<'a> {
    let Some(rest) = path
        .strip_prefix(paths.base.as_str())
        .and_then(|rest| rest.strip_prefix('/'))
    else {
        return Znode::Other;
    };
    let parts: Vec<&str> = rest.split('/').collect();
    match parts[..] {
        ["members", _] => Znode::Member,
        ["tasksets", _] => Znode::TaskSet,
        ["leases", name] => Znode::Lease(name),
        ["tasks", name] => Znode::FireRecord(name),
        ["tasks", name, "result"] => Znode::Result(name),
        ["control", "paused", task] => Znode::Paused(task),
        ["control", "drained", _] => Znode::Drained,
        ["control", "triggers", name] => Znode::Trigger(name),
        ["control", "backfills", name] => Znode::Backfill(name),
        _ => Znode::Other,
    }
}

/// The directories whose changes [`Live`] applies: what a reader watches (recursively).
pub fn watched_dirs(paths: &Paths) -> [String; 5] {
    [
        paths.members(),
        paths.tasksets(),
        paths.leases(),
        paths.tasks(),
        paths.control(),
    ]
}

/// One task's line of `status`, the schedule the pages show, and until when the line holds.
struct Line {
    status: TaskStatus,
    schedule: Option<ShownSchedule>,
    holds_until: Option<DateTime<Utc>>,
}

/// A snapshot kept current, with each task's line of `status`.
pub struct Live {
    snapshot: Arc<Snapshot>,
    /// The tasks the snapshot holds records of (what a live member defines).
    names: BTreeSet<String>,
    triggers: TriggerRuns,
    /// Task sets decoded for ranking, by digest (a digest's content never changes).
    decoded: HashMap<String, Arc<TaskSet>>,
    lines: BTreeMap<String, Line>,
    /// The tasks whose records changed since their line was worked out.
    dirty: BTreeSet<String>,
    /// Every line must be worked out again (the ranking changed).
    all_dirty: bool,
    /// Counts the changes applied: a view made at one count is current until the next.
    changes: u64,
}

/// Until when `line`, worked out at `now` from `entry`, stays what [`status`] says at a
/// later instant with the same records: its next tick, a window's edge, or `now` while the fire
/// record is ahead of it (the line then says how far ahead). `None`: for ever.
pub fn holds_until(
    snapshot: &Snapshot,
    line: &TaskStatus,
    entry: Option<&TaskSetEntry>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let record = snapshot.fire_records.get(&line.name).and_then(|r| r.tick);
    if record.is_some_and(|record| record > now) {
        return Some(now);
    }
    let until = entry
        .and_then(|e| e.active_until)
        .filter(|_| line.ended_at.is_none());
    [line.next, line.starts_at, until]
        .into_iter()
        .flatten()
        .min()
}

/// Whether `path` (under `paths`) holds a record `status` reads: the reader reads only those
/// again.
pub fn reads(paths: &Paths, path: &str) -> bool {
    classify(paths, path) != Znode::Other
}

/// `task`'s line at `now`, worked out alone: what [`Live`] does for a task whose records
/// changed.
fn line_of(snapshot: &Snapshot, members: &Members<'_>, task: &str, now: DateTime<Utc>) -> Line {
    let parts = TaskParts::new(snapshot, members, task);
    let entry = parts.entry;
    let next = parts
        .schedule(snapshot, task)
        .and_then(|schedule| model::next_after_record(snapshot, task, &schedule, now));
    let status = parts.line(snapshot, task.to_string(), next, now);
    Line {
        holds_until: holds_until(snapshot, &status, entry, now),
        schedule: shown_schedule(entry),
        status,
    }
}

/// `zkcron status`: the nodes and tasks of one full read, `snapshot`, at `now`.
pub fn status(snapshot: Snapshot, now: DateTime<Utc>) -> Status {
    Live::new(snapshot, TriggerRuns::new(), now).status(now).0
}

/// `task`'s line of [`status`] at `now`, worked out alone (no other task's), with its
/// children; `None` when no live member defines it.
pub fn task_status(snapshot: &Snapshot, task: &str, now: DateTime<Utc>) -> Option<TaskStatus> {
    let defined = snapshot.members.iter().any(|m| {
        snapshot
            .tasksets
            .get(&m.record.taskset.digest)
            .is_some_and(|set| set.tasks.contains_key(task))
    });
    if !defined {
        return None;
    }
    let members = Members::new(snapshot);
    let mut line = line_of(snapshot, &members, task, now).status;
    line.children = model::children_of(snapshot, task);
    Some(line)
}

/// The schedule `entry` shows: `None` for a task that fires on nothing (no definition).
pub fn shown_schedule(entry: Option<&TaskSetEntry>) -> Option<ShownSchedule> {
    let entry = entry?;
    let expressions: Vec<String> = entry
        .schedule
        .iter()
        .chain(entry.schedules.iter().flatten())
        .cloned()
        .collect();
    if expressions.is_empty() && entry.after.is_empty() {
        return None;
    }
    Some(ShownSchedule {
        expressions,
        zone: entry.timezone.clone().unwrap_or_else(|| "UTC".into()),
        after: entry.after.clone(),
    })
}

fn parse<T: DeserializeOwned>(data: Option<&[u8]>) -> Option<T> {
    serde_json::from_slice(data?).ok()
}

impl Live {
    /// The state of a full read: `snapshot` (`ClusterClient::snapshot`) and the ended runs of
    /// its trigger records, every line worked out at `now`.
    pub fn new(snapshot: Snapshot, triggers: TriggerRuns, now: DateTime<Utc>) -> Live {
        let names = snapshot.task_names().into_iter().collect();
        let mut live = Live {
            snapshot: Arc::new(snapshot),
            names,
            triggers,
            decoded: HashMap::new(),
            lines: BTreeMap::new(),
            dirty: BTreeSet::new(),
            all_dirty: true,
            changes: 0,
        };
        live.refresh(now);
        live
    }

    /// The snapshot as it stands (shared: a change after this copies it first).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.clone()
    }

    /// How many changes were applied: a view made at one count is current until the next.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Whether `name` (a task, or a unit `<task>@<node>`) is a task the snapshot holds.
    fn known(&self, name: &str) -> Option<String> {
        let task = split_unit(name).map_or(name, |(task, _)| task);
        self.names.contains(task).then(|| task.to_string())
    }

    /// Applies the znode at `path` (under `paths`) as read after it changed: `data`, or `None`
    /// when it is gone (or unreadable: a full read leaves such a record out too).
    pub fn apply(&mut self, paths: &Paths, path: &str, data: Option<&[u8]>) -> Applied {
        let touched = match classify(paths, path) {
            Znode::Member | Znode::TaskSet => return Applied::ReadAll,
            Znode::Other => return Applied::Done,
            Znode::Lease(name) => self.known(name).inspect(|_| {
                let snapshot = Arc::make_mut(&mut self.snapshot);
                match parse::<LeaseRecord>(data) {
                    Some(lease) => snapshot.leases.insert(name.to_string(), lease),
                    None => snapshot.leases.remove(name),
                };
            }),
            Znode::FireRecord(task) => self.names.contains(task).then(|| {
                let snapshot = Arc::make_mut(&mut self.snapshot);
                match parse::<FireRecord>(data) {
                    Some(record) => snapshot.fire_records.insert(task.to_string(), record),
                    None => snapshot.fire_records.remove(task),
                };
                task.to_string()
            }),
            Znode::Result(name) => self.known(name).inspect(|_| {
                let snapshot = Arc::make_mut(&mut self.snapshot);
                match parse::<ResultRecord>(data) {
                    Some(result) => snapshot.results.insert(name.to_string(), result.result),
                    None => snapshot.results.remove(name),
                };
            }),
            Znode::Paused(task) => self.names.contains(task).then(|| {
                let snapshot = Arc::make_mut(&mut self.snapshot);
                match parse::<MarkRecord>(data) {
                    Some(mark) => snapshot.paused.insert(task.to_string(), mark),
                    None => snapshot.paused.remove(task),
                };
                task.to_string()
            }),
            Znode::Drained => {
                self.apply_drain(path, data);
                None
            }
            Znode::Trigger(name) => self.apply_trigger(name, data),
            Znode::Backfill(name) => {
                self.apply_backfill(name, data);
                None
            }
        };
        if let Some(task) = touched {
            self.dirty.insert(task);
        }
        self.changes += 1;
        Applied::Done
    }

    /// A drain mark: every task's ranking may change.
    fn apply_drain(&mut self, path: &str, data: Option<&[u8]>) {
        let node = path.rsplit('/').next().unwrap_or_default().to_string();
        let snapshot = Arc::make_mut(&mut self.snapshot);
        match parse::<MarkRecord>(data) {
            Some(mark) => snapshot.drained.insert(node, mark),
            None => snapshot.drained.remove(&node),
        };
        self.all_dirty = true;
    }

    /// A trigger record: its ended run, if it has one, and the newest of its task's (the first
    /// by name among equals, as a full read keeps it).
    fn apply_trigger(&mut self, name: &str, data: Option<&[u8]>) -> Option<String> {
        let old = self.triggers.remove(name).map(|(task, _)| task);
        let new = parse::<TriggerRecord>(data)
            .filter(|t| t.state == TriggerState::Ended && self.names.contains(&t.task))
            .and_then(|t| Some((t.task, t.result?)));
        let task = new.as_ref().map(|(task, _)| task.clone());
        if let Some(new) = new {
            self.triggers.insert(name.to_string(), new);
        }
        for task in old.iter().chain(&task) {
            let mut newest: Option<&HistoryEntry> = None;
            for (of, run) in self.triggers.values() {
                if of == task && newest.is_none_or(|n| n.started_at < run.started_at) {
                    newest = Some(run);
                }
            }
            let newest = newest.cloned();
            let snapshot = Arc::make_mut(&mut self.snapshot);
            match newest {
                Some(run) => snapshot.recent_runs.insert(task.clone(), run),
                None => snapshot.recent_runs.remove(task),
            };
            self.dirty.insert(task.clone());
        }
        None
    }

    /// A backfill request: kept while active, for a task the snapshot holds.
    fn apply_backfill(&mut self, name: &str, data: Option<&[u8]>) {
        let snapshot = Arc::make_mut(&mut self.snapshot);
        if let Some(old) = snapshot.backfills.remove(name) {
            self.dirty.insert(old.task);
        }
        let new = parse::<BackfillRecord>(data)
            .filter(|b| b.state == BackfillState::Active && self.names.contains(&b.task));
        if let Some(new) = new {
            self.dirty.insert(new.task.clone());
            snapshot.backfills.insert(name.to_string(), new);
        }
    }

    /// Works out again the lines whose records changed and those that no longer hold at `now`.
    pub fn refresh(&mut self, now: DateTime<Utc>) {
        let Live {
            snapshot,
            decoded,
            lines,
            dirty,
            all_dirty,
            ..
        } = self;
        let members = Members::with_decoded(snapshot, decoded);
        if std::mem::take(all_dirty) {
            dirty.clear();
            *lines = model::task_lines(snapshot, &members, now)
                .into_iter()
                .map(|(status, entry)| {
                    let line = Line {
                        holds_until: holds_until(snapshot, &status, entry, now),
                        schedule: shown_schedule(entry),
                        status,
                    };
                    (line.status.name.clone(), line)
                })
                .collect();
            return;
        }
        let expired = lines
            .iter()
            .filter(|(_, line)| line.holds_until.is_some_and(|until| until <= now))
            .map(|(name, _)| name.clone());
        let due: BTreeSet<String> = expired.chain(std::mem::take(dirty)).collect();
        for name in due {
            let line = line_of(snapshot, &members, &name, now);
            lines.insert(name, line);
        }
    }

    /// `zkcron status` at `now` (each line worked out again only if it changed or expired),
    /// and each task's schedule as the pages show it.
    pub fn status(&mut self, now: DateTime<Utc>) -> (Status, Schedules) {
        self.refresh(now);
        let mut status = Status {
            backend: self.snapshot.backend.clone(),
            cluster: self.snapshot.cluster.clone(),
            nodes: model::node_statuses(&self.snapshot, now),
            tasks: self.lines.values().map(|l| l.status.clone()).collect(),
        };
        model::link_children(&mut status.tasks);
        let schedules = self
            .lines
            .iter()
            .filter_map(|(name, line)| Some((name.clone(), line.schedule.clone()?)))
            .collect();
        (status, schedules)
    }
}

#[cfg(test)]
mod tests;
