//! What `zkcron status` is made of, as pure functions of a [`Snapshot`] of the cluster's records
//! and `now`: the JSON interface of docs/commands.md, "JSON interfaces" ([`Status`]), a task's
//! line ([`TaskParts`]), and who may lead a task and why not ([`eligibility`]), which `explain`
//! shares: that is `members`, who may lead a task from the live members' records; `done`, whether
//! a task ran its `max_runs` or its one-shot tick. The status itself is worked out in one
//! place, [`crate::ops::live`].

use crate::coord::backfill::BackfillRecord;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::ops::Bound;
use std::pin::Pin;
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use crate::coord::RunResult;
use crate::coord::lease::split_unit;
use crate::coord::records::{
    FireRecord, HistoryEntry, LeaseRecord, MarkRecord, MemberRecord, RUN_ON_WORK_ITEMS,
    TaskSetEntry, TaskSetRecord,
};
use crate::plan;
use crate::schedule::{self, DstChoice, Schedule, Window, WindowState};

mod done;
mod members;

pub use done::done_note;
pub use members::{Definer, Members, UnrankedDefiner, drift, eligibility, no_one_may_run};
use members::{drift_among, why_none};

/// A live member: its record and when its znode was created (its session's age).
#[derive(Debug, Clone, PartialEq)]
pub struct LiveMember {
    pub record: MemberRecord,
    pub registered_at: DateTime<Utc>,
}

/// Everything `status` and `explain` read, as read.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// "zookeeper" or "local".
    pub backend: String,
    /// The cluster's name; `None` for the local backend.
    pub cluster: Option<String>,
    pub members: Vec<LiveMember>,
    /// Task sets by digest (every live member's).
    pub tasksets: BTreeMap<String, TaskSetRecord>,
    pub leases: BTreeMap<String, LeaseRecord>,
    pub fire_records: BTreeMap<String, FireRecord>,
    /// `tasks/<task>/result`: the last scheduled run's result.
    pub results: BTreeMap<String, RunResult>,
    /// Runs newer than the result record may know (manual runs of ended triggers, or the local
    /// backend's history), newest per task.
    pub recent_runs: BTreeMap<String, HistoryEntry>,
    pub paused: BTreeMap<String, MarkRecord>,
    pub drained: BTreeMap<String, MarkRecord>,
    /// The active backfill requests, by name.
    pub backfills: BTreeMap<String, BackfillRecord>,
}

/// `zkcron status --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub backend: String,
    pub cluster: Option<String>,
    pub nodes: Vec<NodeStatus>,
    pub tasks: Vec<TaskStatus>,
}

/// The status as `zkcron status --json` gives it, or why it cannot be read now.
pub type StatusFuture = Pin<Box<dyn Future<Output = Result<Status, String>> + Send>>;

/// Reads a node's status when asked: what its HTTP endpoint serves at `/status`
/// ([`crate::ops::cluster::status_source`] for a cluster, the control socket's answer for the
/// local backend).
pub type StatusSource = Arc<dyn Fn() -> StatusFuture + Send + Sync>;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeStatus {
    pub id: String,
    pub release: String,
    pub labels: BTreeMap<String, String>,
    pub drained: bool,
    pub tasks_led: usize,
    pub session_age_s: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskStatus {
    pub name: String,
    pub leader: Option<String>,
    pub paused: bool,
    /// Who paused the task, when and why; absent while it is not paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<PauseStatus>,
    pub next: Option<DateTime<Utc>>,
    /// The tick queued behind a live run (`overlap = "queue"`); absent when none waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<DateTime<Utc>>,
    pub last: Option<LastRun>,
    pub drift: Vec<Drift>,
    pub problem: Option<String>,
    /// The task's `active_from` while it is ahead: nothing fires before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts_at: Option<DateTime<Utc>>,
    /// The task's `active_until` once it has passed: the task fires no more (not a problem).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<DateTime<Utc>>,
    /// Why the task fires no more, once it ran its `max_runs` or its one-shot tick ("done
    /// after 3 runs (max_runs)"); not a problem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done: Option<String>,
    /// The calendars whose days and periods the task does not run in (`exclude`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// The scheduled ticks claimed to run so far, for a task with `max_runs`, and the limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<(u64, u32)>,
    /// The nodes that hold their unit of a task that runs on every node (`run_on =
    /// "every_node"`), each running every tick; absent for other tasks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub every_node: Vec<String>,
    /// A pooled task's items per node that runs them (node id, count): in a cluster the
    /// nodes holding the items' units, on the embedded backend its one node with every item;
    /// empty for other tasks.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub work_items: BTreeMap<String, usize>,
    /// The task's active backfills (`zkcron backfill`), oldest first; absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backfills: Vec<BackfillProgress>,
    /// The tasks whose successful runs run this one (its `after`); absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// The tasks that run after this one succeeds (their `after` names it), by name; absent
    /// when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<String>,
}

/// A paused task's mark, as `status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PauseStatus {
    pub at: DateTime<Utc>,
    /// `user@host` of `zkcron pause`, or `zkcron@<node>` for `pause_on_failure`.
    pub by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// An active backfill of a task, as `status` and `explain` show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackfillProgress {
    pub id: String,
    /// Ticks whose run ended (or was lost).
    pub done: u32,
    pub total: u32,
    pub failed: u32,
    /// The tick running now.
    pub running: Option<DateTime<Utc>>,
}

/// The active backfills of `task` in `snapshot`.
fn backfills_of(snapshot: &Snapshot, task: &str) -> Vec<BackfillProgress> {
    snapshot
        .backfills
        .iter()
        .filter(|(_, b)| b.task == task)
        .map(|(id, b)| BackfillProgress {
            id: id.clone(),
            done: b.finished(),
            total: b.total,
            failed: b.failed,
            running: b.running.as_ref().map(|r| r.tick),
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastRun {
    pub fire_id: String,
    pub node: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub success: bool,
    pub duration_ms: u64,
    pub finished_at: DateTime<Utc>,
}

/// Nodes that hold one definition (digest) of a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Drift {
    pub digest: String,
    pub nodes: Vec<String>,
}

impl Snapshot {
    /// The task set entry of `task` in `member`'s task set, if it defines it.
    pub fn entry(&self, member: &MemberRecord, task: &str) -> Option<&TaskSetEntry> {
        self.tasksets.get(&member.taskset.digest)?.tasks.get(task)
    }

    /// Whether the member is drained: its own record says so, or the operator's marker does
    /// (the node may not have acted on it yet).
    pub fn is_drained(&self, member: &MemberRecord) -> bool {
        member.drained || self.drained.contains_key(&member.id)
    }

    /// Every task a live member defines, by name.
    pub fn task_names(&self) -> Vec<String> {
        // Members with the same jobs dir share a task set: each set is read once.
        let digests: std::collections::BTreeSet<&str> = self
            .members
            .iter()
            .map(|m| m.record.taskset.digest.as_str())
            .collect();
        let mut names: Vec<&String> = digests
            .into_iter()
            .filter_map(|digest| self.tasksets.get(digest))
            .flat_map(|set| set.tasks.keys())
            .collect();
        names.sort();
        names.dedup();
        names.into_iter().cloned().collect()
    }
}

/// What a task set entry's schedule is made of: its expression or list, zone and window.
type ScheduleKey<'a> = (
    Option<&'a str>,
    Option<&'a [String]>,
    &'a str,
    Option<DateTime<Utc>>,
    Option<DateTime<Utc>>,
    (Option<&'a str>, Option<&'a str>),
    &'a [String],
);

/// The schedule `entry` describes; `None` without one (an older release wrote it) or when this
/// release cannot read it.
pub fn entry_schedule(entry: &TaskSetEntry) -> Option<Schedule> {
    let timezone = schedule::parse_timezone(entry.timezone.as_deref().unwrap_or("UTC")).ok()?;
    let schedule = match (&entry.schedule, &entry.schedules) {
        (Some(expression), _) => Schedule::parse(expression, timezone).ok()?,
        (None, Some(list)) => Schedule::union(
            list.iter()
                .map(|expression| Schedule::parse(expression, timezone))
                .collect::<Result<_, _>>()
                .ok()?,
        )
        .ok()?,
        (None, None) => return None,
    };
    let choice = DstChoice::from_names(entry.dst_gap.as_deref(), entry.dst_repeat.as_deref());
    Some(
        schedule
            .within(Window {
                from: entry.active_from,
                until: entry.active_until,
            })
            .with_dst(choice),
    )
}

/// Where `now` stands against the window of the task set entry `status` reads the task from:
/// (`starts_at`, `ended_at`).
fn window_notes(
    entry: Option<&TaskSetEntry>,
    now: DateTime<Utc>,
) -> (Option<DateTime<Utc>>, Option<DateTime<Utc>>) {
    let Some(entry) = entry else {
        return (None, None);
    };
    let window = Window {
        from: entry.active_from,
        until: entry.active_until,
    };
    match window.state(now) {
        WindowState::Before(from) => (Some(from), None),
        WindowState::Ended(until) => (None, Some(until)),
        WindowState::Within => (None, None),
    }
}

/// The schedule of `task` as its leader (else any eligible member, else any definer)
/// published it; `None` when no live member publishes one this release reads.
pub fn schedule_of(snapshot: &Snapshot, task: &str) -> Option<Schedule> {
    let members = Members::new(snapshot);
    let entry = definition(snapshot, task, &members.definers(task))?;
    let zone = entry.timezone.as_deref().unwrap_or("UTC");
    Schedule::parse(
        entry.schedule.as_deref()?,
        schedule::parse_timezone(zone).ok()?,
    )
    .ok()
}

/// The definition of `task` that `status` reads its schedule from (see `definition`).
pub fn task_entry(snapshot: &Snapshot, task: &str) -> Option<TaskSetEntry> {
    let members = Members::new(snapshot);
    let definers = members.definers(task);
    definition(snapshot, task, &definers).cloned()
}

/// [`task_entry`] of every task, by name, ranking the members once (per task it would rank
/// them again for each: quadratic on 10,000 tasks).
pub fn task_entries(snapshot: &Snapshot) -> BTreeMap<String, TaskSetEntry> {
    let members = Members::new(snapshot);
    snapshot
        .task_names()
        .into_iter()
        .filter_map(|name| {
            let definers = members.definers(&name);
            let entry = definition(snapshot, &name, &definers).cloned()?;
            Some((name, entry))
        })
        .collect()
}

/// The definition `status` reads a task's schedule from: its leader's, else any eligible
/// member's, else any definer's.
pub(super) fn definition<'a>(
    snapshot: &Snapshot,
    task: &str,
    definers: &[Definer<'a>],
) -> Option<&'a TaskSetEntry> {
    definition_in(snapshot, task, definers).map(|(_, entry)| entry)
}

/// [`definition`] with the task set it is in (which holds the calendars it excludes).
fn definition_in<'a>(
    snapshot: &Snapshot,
    task: &str,
    definers: &[Definer<'a>],
) -> Option<(&'a TaskSetRecord, &'a TaskSetEntry)> {
    let leader = snapshot.leases.get(task).map(|l| l.node.as_str());
    let chosen = definers
        .iter()
        .find(|d| Some(d.record.id.as_str()) == leader)
        .or_else(|| definers.iter().find(|d| d.why_not.is_none()))
        .or(definers.first())?;
    let set = chosen.written?;
    Some((set, set.tasks.get(task)?))
}

/// The schedule of `task` as `status` reads it (see [`definition`]), with the calendars it
/// excludes from the same task set.
pub fn task_schedule(snapshot: &Snapshot, task: &str) -> Option<Schedule> {
    let members = Members::new(snapshot);
    let definers = members.definers(task);
    let (set, entry) = definition_in(snapshot, task, &definers)?;
    entry_schedule_in(set, entry)
}

/// [`entry_schedule`] with the calendars `entry` excludes, as `set` carries them (a calendar
/// missing there, or in a zone unknown here, is left out).
pub fn entry_schedule_in(set: &TaskSetRecord, entry: &TaskSetEntry) -> Option<Schedule> {
    let schedule = entry_schedule(entry)?;
    let calendars = entry
        .exclude
        .iter()
        .filter_map(|name| Some(Arc::new(set.calendars.get(name)?.calendar(name)?)))
        .collect();
    Some(schedule.excluding(calendars))
}

/// The last run as `status` shows it: the newer of the result record and the recent runs.
/// The nodes holding a unit of `task` (`<task>@<node-id>`: it runs on every node), by id.
pub fn unit_holders(snapshot: &Snapshot, task: &str) -> Vec<String> {
    units(&snapshot.leases, task)
        .map(|lease| lease.node.clone())
        .collect()
}

/// The values of `map` under `<task>@<...>` (the units of `task`), in name order, found without
/// building the prefix: the names that begin with `task` follow it in one run.
fn units<'a, V>(map: &'a BTreeMap<String, V>, task: &'a str) -> impl Iterator<Item = &'a V> {
    map.range::<str, _>((Bound::Excluded(task), Bound::Unbounded))
        .take_while(move |(name, _)| name.starts_with(task))
        .filter(move |(name, _)| name.as_bytes().get(task.len()) == Some(&b'@'))
        .map(|(_, value)| value)
}

/// Whether `entry` is the definition of a pooled task (`work_items`).
pub fn is_pooled(entry: &TaskSetEntry) -> bool {
    entry.run_on.as_deref() == Some(RUN_ON_WORK_ITEMS)
}

/// The nodes holding units of the pooled `task` in `snapshot`, with how many each holds:
/// what `status` shows as a pooled task's items per node.
pub fn held_items(snapshot: &Snapshot, task: &str) -> BTreeMap<String, usize> {
    let mut held = BTreeMap::new();
    for lease in units(&snapshot.leases, task) {
        *held.entry(lease.node.clone()).or_default() += 1;
    }
    held
}

/// The newest stored result of `task`, or of its units when it runs on every node.
fn newest_result<'a>(snapshot: &'a Snapshot, task: &'a str) -> Option<&'a RunResult> {
    snapshot
        .results
        .get(task)
        .into_iter()
        .chain(units(&snapshot.results, task))
        .max_by_key(|r| r.finished_at)
}

fn last_run(snapshot: &Snapshot, task: &str) -> Option<LastRun> {
    let from_result = newest_result(snapshot, task).map(|r| {
        let (exit_code, signal) = exit_parts(&r.exit);
        LastRun {
            fire_id: plan::fire_id(task, r.tick),
            node: r.node.clone(),
            exit_code,
            signal,
            success: r.success,
            duration_ms: r.duration_ms,
            finished_at: r.finished_at,
        }
    });
    let from_runs = snapshot.recent_runs.get(task).map(|h| LastRun {
        fire_id: h.fire_id.clone(),
        node: h.node.clone(),
        exit_code: h.exit_code,
        signal: h.signal,
        success: h.success,
        duration_ms: h.duration_ms,
        finished_at: h.started_at + TimeDelta::milliseconds(h.duration_ms as i64),
    });
    match (from_result, from_runs) {
        (Some(a), Some(b)) => Some(if b.finished_at > a.finished_at { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// The exit code and signal in a result's words ("exit code 3", "killed by signal 9 (SIGKILL)",
/// "timed out": neither).
pub fn exit_parts(exit: &str) -> (Option<i32>, Option<i32>) {
    let number = |rest: &str| {
        rest.split_whitespace()
            .next()
            .and_then(|n| n.parse::<i32>().ok())
    };
    if let Some(rest) = exit.strip_prefix("exit code ") {
        (number(rest), None)
    } else if let Some(rest) = exit.strip_prefix("killed by signal ") {
        (None, number(rest))
    } else {
        (None, None)
    }
}

/// Why `task` is not firing, if it is not: paused, no member may run it (`why_none`), the
/// lease is vacant, or the fire record is ahead of the clock.
fn problem(
    snapshot: &Snapshot,
    task: &str,
    why_none: Option<String>,
    now: DateTime<Utc>,
) -> Option<String> {
    if let Some(mark) = snapshot.paused.get(task) {
        return Some(match &mark.reason {
            Some(reason) => format!("paused: {reason}"),
            None => "paused".to_string(),
        });
    }
    if why_none.is_some() {
        return why_none;
    }
    if !snapshot.leases.contains_key(task) && unit_holders(snapshot, task).is_empty() {
        return Some("no leader: lease vacant".to_string());
    }
    let record = snapshot.fire_records.get(task).and_then(|r| r.tick);
    if let Some(record) = plan::holding_record(record, now) {
        return Some(format!(
            "fire record ahead of the cluster clock: {} is {} ahead, so no tick up to it fires; \
             zkcron reset {task} moves it back",
            record.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            humantime::format_duration(std::time::Duration::from_secs(
                (record - now).num_seconds().max(0) as u64
            ))
        ));
    }
    None
}

/// The members of `snapshot` with the tasks each leads, in id order.
pub fn node_statuses(snapshot: &Snapshot, now: DateTime<Utc>) -> Vec<NodeStatus> {
    // A pooled task counts once for each node holding units of it, however many items; a
    // task's own lease once for its holder (unless it also holds a unit of it, counted then).
    let mut led: BTreeMap<&str, usize> = BTreeMap::new();
    let mut counted: BTreeSet<(&str, &str)> = BTreeSet::new();
    for (name, lease) in &snapshot.leases {
        let node = lease.node.as_str();
        let first = match split_unit(name) {
            None => true,
            Some((task, _)) => {
                snapshot.leases.get(task).map(|own| own.node.as_str()) != Some(node)
                    && counted.insert((node, task))
            }
        };
        if first {
            *led.entry(node).or_default() += 1;
        }
    }
    let mut nodes: Vec<NodeStatus> = snapshot
        .members
        .iter()
        .map(|m| NodeStatus {
            id: m.record.id.clone(),
            release: m.record.release.clone(),
            labels: m.record.labels.clone(),
            drained: snapshot.is_drained(&m.record),
            tasks_led: led.get(m.record.id.as_str()).copied().unwrap_or(0),
            session_age_s: (now - m.registered_at).num_seconds().max(0) as u64,
        })
        .collect();
    nodes.sort_by(|a, b| a.id.cmp(&b.id));
    nodes
}

/// What one task's line of `status` is worked out from: its definers (ranked and not), why no
/// member may run it, and the definition its schedule comes from.
pub struct TaskParts<'m> {
    definers: Vec<Definer<'m>>,
    unranked: Vec<UnrankedDefiner<'m>>,
    why_none: Option<String>,
    /// The definition `status` reads the schedule from (`definition`).
    pub entry: Option<&'m TaskSetEntry>,
    /// The task set it is in: the calendars the task excludes.
    set: Option<&'m TaskSetRecord>,
}

impl<'m> TaskParts<'m> {
    pub fn new(snapshot: &Snapshot, members: &'m Members<'_>, task: &str) -> TaskParts<'m> {
        let definers = members.definers(task);
        let unranked = members.unranked_definers(task);
        let why_none = why_none(&definers, &unranked);
        let (set, entry) = definition_in(snapshot, task, &definers).unzip();
        TaskParts {
            definers,
            unranked,
            why_none,
            entry,
            set,
        }
    }

    /// The task's schedule, with its calendars, if a member may fire it now.
    pub fn schedule(&self, snapshot: &Snapshot, task: &str) -> Option<Schedule> {
        let (set, entry) = (self.set?, self.entry?);
        self.fires(snapshot, task)
            .then(|| entry_schedule_in(set, entry))
            .flatten()
    }

    /// Whether the task has a next tick to work out: it is not paused and a member may run it.
    pub fn fires(&self, snapshot: &Snapshot, task: &str) -> bool {
        self.why_none.is_none() && !snapshot.paused.contains_key(task)
    }

    /// The task's line of `status` at `now`, its next tick worked out (`None` unless it
    /// [`fires`](TaskParts::fires)).
    pub fn line(
        self,
        snapshot: &Snapshot,
        name: String,
        next: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> TaskStatus {
        let pause = snapshot.paused.get(&name).map(|mark| PauseStatus {
            at: mark.at,
            by: mark.by.clone(),
            reason: mark.reason.clone(),
        });
        let (starts_at, ended_at) = window_notes(self.entry, now);
        let record = snapshot.fire_records.get(&name);
        let done = done_note(self.entry, record);
        let runs = self
            .entry
            .and_then(|e| e.max_runs)
            .map(|max| (record.map_or(0, |r| r.runs), max));
        TaskStatus {
            starts_at,
            ended_at,
            next: next.filter(|_| done.is_none()),
            done,
            runs,
            exclude: self.entry.map(|e| e.exclude.clone()).unwrap_or_default(),
            leader: snapshot.leases.get(&name).map(|l| l.node.clone()),
            paused: pause.is_some(),
            pause,
            queued: snapshot.fire_records.get(&name).and_then(|r| r.queued),
            last: last_run(snapshot, &name),
            drift: drift_among(&self.definers, &self.unranked),
            problem: problem(snapshot, &name, self.why_none, now),
            every_node: match self.entry {
                Some(entry) if is_pooled(entry) => Vec::new(),
                _ => unit_holders(snapshot, &name),
            },
            work_items: match self.entry {
                Some(entry) if is_pooled(entry) => held_items(snapshot, &name),
                _ => BTreeMap::new(),
            },
            backfills: backfills_of(snapshot, &name),
            after: self.entry.map(|e| e.after.clone()).unwrap_or_default(),
            children: Vec::new(),
            name,
        }
    }
}

/// The first tick of `schedule` after `now`, or after `task`'s fire record when that is ahead
/// of `now` (ticks up to it count as done).
pub fn next_after_record(
    snapshot: &Snapshot,
    task: &str,
    schedule: &Schedule,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let record = snapshot.fire_records.get(task).and_then(|r| r.tick);
    schedule.next_after(record.map_or(now, |r| r.max(now)))
}

/// Every task's line of `status` at `now`, with the definition its schedule comes from.
pub fn task_lines<'m>(
    snapshot: &Snapshot,
    members: &'m Members<'_>,
    now: DateTime<Utc>,
) -> Vec<(TaskStatus, Option<&'m TaskSetEntry>)> {
    let names = snapshot.task_names();
    let parts: Vec<TaskParts<'_>> = names
        .iter()
        .map(|name| TaskParts::new(snapshot, members, name))
        .collect();
    let fires: Vec<Option<&TaskSetEntry>> = names
        .iter()
        .zip(&parts)
        .map(|(name, parts)| parts.entry.filter(|_| parts.fires(snapshot, name)))
        .collect();
    let nexts = next_ticks(snapshot, &names, &fires, &parts, now);
    names
        .into_iter()
        .zip(parts)
        .zip(nexts)
        .map(|((name, parts), next)| {
            let entry = parts.entry;
            (parts.line(snapshot, name, next, now), entry)
        })
        .collect()
}

/// The next tick at `now` of each task in `names` that fires, from the definition `fires`
/// holds for it (`None`: the task does not fire). Tasks are taken by schedule (expression or
/// list, zone, window): each distinct one is parsed once, and its first tick after `now` is
/// worked out once for all of its tasks whose fire record is not ahead of `now` (the first
/// after the record for the others). Sorting 100,000 tasks by expression instead cost more
/// than the parses.
fn next_ticks(
    snapshot: &Snapshot,
    names: &[String],
    fires: &[Option<&TaskSetEntry>],
    parts: &[TaskParts<'_>],
    now: DateTime<Utc>,
) -> Vec<Option<DateTime<Utc>>> {
    let mut by_schedule: HashMap<ScheduleKey<'_>, Vec<usize>> = HashMap::new();
    for (i, entry) in fires.iter().enumerate() {
        if let Some(entry) = entry {
            by_schedule.entry(schedule_key(entry)).or_default().push(i);
        }
    }
    let mut nexts = vec![None; names.len()];
    for tasks in by_schedule.into_values() {
        // Calendars live in the task sets: a task that excludes some is worked out alone.
        if fires[tasks[0]].is_some_and(|e| !e.exclude.is_empty()) {
            for i in tasks {
                let schedule = parts[i].schedule(snapshot, &names[i]);
                let record = snapshot.fire_records.get(&names[i]).and_then(|r| r.tick);
                nexts[i] = schedule.and_then(|s| s.next_after(record.map_or(now, |r| r.max(now))));
            }
            continue;
        }
        let Some(schedule) = fires[tasks[0]].and_then(entry_schedule) else {
            continue;
        };
        let mut after_now = None;
        for i in tasks {
            let record = snapshot.fire_records.get(&names[i]).and_then(|r| r.tick);
            nexts[i] = match record {
                Some(record) if record > now => schedule.next_after(record),
                _ => *after_now.get_or_insert_with(|| schedule.next_after(now)),
            };
        }
    }
    nexts
}

/// What `entry`'s schedule is made of: entries with equal keys have equal schedules.
fn schedule_key(entry: &TaskSetEntry) -> ScheduleKey<'_> {
    (
        entry.schedule.as_deref(),
        entry.schedules.as_deref(),
        entry.timezone.as_deref().unwrap_or("UTC"),
        entry.active_from,
        entry.active_until,
        (entry.dst_gap.as_deref(), entry.dst_repeat.as_deref()),
        &entry.exclude,
    )
}

/// Sets each task's children from the parents (`after`) of `tasks`: the tasks whose
/// definitions name it, by name.
pub fn link_children(tasks: &mut [TaskStatus]) {
    let mut children: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for task in tasks.iter() {
        for parent in &task.after {
            children
                .entry(parent.clone())
                .or_default()
                .push(task.name.clone());
        }
    }
    for task in tasks.iter_mut() {
        task.children = children.remove(&task.name).unwrap_or_default();
        task.children.sort();
    }
}

/// The tasks whose definition (by any live member) names `task` in its `after`, by name.
pub(super) fn children_of(snapshot: &Snapshot, task: &str) -> Vec<String> {
    let mut children: BTreeSet<&str> = BTreeSet::new();
    for set in snapshot.tasksets.values() {
        for (name, entry) in &set.tasks {
            if entry.after.iter().any(|parent| parent == task) {
                children.insert(name);
            }
        }
    }
    children.into_iter().map(str::to_string).collect()
}
