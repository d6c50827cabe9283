//! What `zkcron status` says, as a pure function of a [`Snapshot`] of the cluster's records and
//! `now`: the JSON interface of docs/commands.md, "JSON interfaces" ([`Status`]), and who may lead a
//! task and why not ([`eligibility`]), which `explain` shares.

use crate::coord::backfill::BackfillRecord;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use crate::coord::RunResult;
use crate::coord::lease::{Member, TaskEntry, TaskSet, why_ineligible, why_none_eligible};
use crate::coord::records::{
    self, FireRecord, HistoryEntry, LeaseRecord, MarkRecord, MemberRecord, TaskSetEntry,
    TaskSetRecord, Unranked,
};
use crate::plan;
use crate::schedule::{self, Schedule, Window, WindowState};

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
    /// The nodes that hold their unit of a task that runs on every node (`run_on =
    /// "every_node"`), each running every tick; absent for other tasks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub every_node: Vec<String>,
    /// A pooled task's items per node that runs them (node id, count); empty for other tasks.
    /// On the embedded backend its one node runs every item.
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

/// Whether `member` may lead `task`, as the lease decision sees it (`coord::lease`): `Ok` when
/// it may, else why not in the nodes' own words (`lease::why_ineligible`: drained, may not lead,
/// does not define the task, `version_req`, `require_labels`).
pub fn eligibility(snapshot: &Snapshot, member: &MemberRecord, task: &str) -> Result<(), String> {
    let members = Members::new(snapshot);
    if let Some((_, why, _)) = members.unranked.iter().find(|(r, _, _)| r.id == member.id) {
        return Err(why.to_string());
    }
    let (_, lease_member, _) = members
        .members
        .iter()
        .find(|(record, _, _)| record.id == member.id)
        .ok_or_else(|| format!("{} is not a live member", member.id))?;
    match why_ineligible(lease_member, lease_member.tasks.get(task)) {
        None => Ok(()),
        Some(why) => Err(why),
    }
}

/// A live member that defines a task: its record, the lease rule's view of it, its definition
/// as written and as ranked, and why it may not lead the task (`None`: it may).
pub struct Definer<'a> {
    pub record: &'a MemberRecord,
    pub member: &'a Member,
    /// The member's task set as written (for the schedule), looked up only when needed.
    pub written: Option<&'a TaskSetRecord>,
    pub task_entry: &'a TaskEntry,
    pub why_not: Option<String>,
}

/// The live members as the lease rule sees them (`coord::lease::Member`, task sets decoded
/// once per digest), sorted by id, with their task sets as written.
pub struct Members<'a> {
    pub members: Vec<(&'a MemberRecord, Member, Option<&'a TaskSetRecord>)>,
    /// The live members whose record the nodes cannot rank ([`MemberRecord::to_member`]): they
    /// lead nothing, as on the nodes, which ignore them. Sorted by id.
    pub unranked: Vec<(&'a MemberRecord, Unranked, Option<&'a TaskSetRecord>)>,
}

/// A live member that defines a task but is ranked for nothing, and why.
pub struct UnrankedDefiner<'a> {
    pub record: &'a MemberRecord,
    pub why: &'a Unranked,
    pub entry: &'a TaskSetEntry,
}

impl<'a> Members<'a> {
    pub fn new(snapshot: &'a Snapshot) -> Members<'a> {
        let mut decoded: HashMap<&str, Arc<TaskSet>> = HashMap::new();
        let mut members = Vec::new();
        let mut unranked = Vec::new();
        for m in &snapshot.members {
            let record = &m.record;
            let written = snapshot.tasksets.get(&record.taskset.digest);
            let tasks = decoded
                .entry(&record.taskset.digest)
                .or_insert_with(|| written.map(records::decode_taskset).unwrap_or_default())
                .clone();
            // Ranked as the record will say once its node sees the operator's drain mark.
            let as_ranked = MemberRecord {
                drained: snapshot.is_drained(record),
                ..record.clone()
            };
            match as_ranked.to_member(tasks) {
                Ok(member) => members.push((record, member, written)),
                Err(why) => unranked.push((record, why, written)),
            }
        }
        members.sort_by(|a, b| a.0.id.cmp(&b.0.id));
        unranked.sort_by(|a, b| a.0.id.cmp(&b.0.id));
        Members { members, unranked }
    }

    /// The members ranked for nothing that define `task` (as written), by id.
    pub fn unranked_definers(&self, task: &str) -> Vec<UnrankedDefiner<'_>> {
        self.unranked
            .iter()
            .filter_map(|(record, why, written)| {
                Some(UnrankedDefiner {
                    record,
                    why,
                    entry: written.as_ref()?.tasks.get(task)?,
                })
            })
            .collect()
    }

    /// The members that define `task`, by id.
    pub fn definers(&self, task: &str) -> Vec<Definer<'_>> {
        self.members
            .iter()
            .filter_map(|(record, member, written)| {
                let task_entry = member.tasks.get(task)?;
                Some(Definer {
                    record,
                    member,
                    written: *written,
                    task_entry,
                    why_not: why_ineligible(member, Some(task_entry)),
                })
            })
            .collect()
    }
}

/// Why no live member may run `task` (every definer is ineligible), in the words of the
/// nodes' warning (`lease::why_none_eligible`): "no live node may run it: version_req >=2.0
/// matches none of a (1.0.0)". `None` when one may.
pub fn no_one_may_run(snapshot: &Snapshot, task: &str) -> Option<String> {
    let members = Members::new(snapshot);
    why_none(&members.definers(task), &members.unranked_definers(task))
}

fn why_none(definers: &[Definer<'_>], unranked: &[UnrankedDefiner<'_>]) -> Option<String> {
    if definers.is_empty() && unranked.is_empty() {
        return Some("no live node defines it".to_string());
    }
    if definers.iter().any(|d| d.why_not.is_none()) {
        return None;
    }
    let mut reasons = Vec::new();
    if !definers.is_empty() {
        let defining: Vec<(&Member, &TaskEntry)> =
            definers.iter().map(|d| (d.member, d.task_entry)).collect();
        reasons.push(why_none_eligible(&defining));
    }
    reasons.extend(
        unranked
            .iter()
            .map(|u| format!("{}'s {}", u.record.id, u.why)),
    );
    Some(format!("no live node may run it: {}", reasons.join("; ")))
}

/// The definitions of `task` the live members hold, when they differ; empty when all agree.
pub fn drift(snapshot: &Snapshot, task: &str) -> Vec<Drift> {
    let members = Members::new(snapshot);
    drift_among(&members.definers(task), &members.unranked_definers(task))
}

/// The definitions every definer holds, ranked or not (a member ranked for nothing still
/// holds one).
fn drift_among(definers: &[Definer<'_>], unranked: &[UnrankedDefiner<'_>]) -> Vec<Drift> {
    let mut held: Vec<(&str, &str)> = definers
        .iter()
        .map(|d| (d.record.id.as_str(), d.task_entry.digest.as_str()))
        .chain(
            unranked
                .iter()
                .map(|u| (u.record.id.as_str(), u.entry.digest.as_str())),
        )
        .collect();
    held.sort();
    let first = held.first().map(|(_, digest)| *digest);
    if held.iter().all(|(_, digest)| Some(*digest) == first) {
        return Vec::new();
    }
    let mut by_digest: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (id, digest) in held {
        by_digest.entry(digest).or_default().push(id.to_string());
    }
    by_digest
        .into_iter()
        .map(|(digest, nodes)| Drift {
            digest: digest.to_string(),
            nodes,
        })
        .collect()
}

/// What a task set entry's schedule is made of: its expression or list, zone and window.
type ScheduleKey<'a> = (
    Option<&'a str>,
    Option<&'a [String]>,
    &'a str,
    Option<DateTime<Utc>>,
    Option<DateTime<Utc>>,
);

/// Schedules parsed once per expression (or list), zone and window.
type Schedules<'a> = HashMap<ScheduleKey<'a>, Option<Schedule>>;

/// The schedule `entry` describes; `None` without one (an older release wrote it) or when this
/// release cannot read it.
fn entry_schedule(entry: &TaskSetEntry) -> Option<Schedule> {
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
    Some(schedule.within(Window {
        from: entry.active_from,
        until: entry.active_until,
    }))
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

/// The next tick of `task` at `now` from the definition its leader (else any eligible member,
/// else any definer) holds: the first after `now`, or after the fire record when that is ahead
/// of `now` (ticks up to it count as done). `None` without a schedule in the task set (an older
/// release wrote it) or when the schedule has no further tick.
fn next_tick<'a>(
    snapshot: &Snapshot,
    task: &str,
    entry: Option<&'a TaskSetEntry>,
    schedules: &mut Schedules<'a>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let entry = entry?;
    let key = (
        entry.schedule.as_deref(),
        entry.schedules.as_deref(),
        entry.timezone.as_deref().unwrap_or("UTC"),
        entry.active_from,
        entry.active_until,
    );
    let schedule = schedules
        .entry(key)
        .or_insert_with(|| entry_schedule(entry))
        .as_ref()?;
    let record = snapshot.fire_records.get(task).and_then(|r| r.tick);
    let after = record.map_or(now, |r| r.max(now));
    schedule.next_after(after)
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

/// The definition of `task` that `status` reads its schedule from (see [`definition`]).
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
fn definition<'a>(
    snapshot: &Snapshot,
    task: &str,
    definers: &[Definer<'a>],
) -> Option<&'a TaskSetEntry> {
    let leader = snapshot.leases.get(task).map(|l| l.node.as_str());
    let chosen = definers
        .iter()
        .find(|d| Some(d.record.id.as_str()) == leader)
        .or_else(|| definers.iter().find(|d| d.why_not.is_none()))
        .or(definers.first())?;
    chosen.written?.tasks.get(task)
}

/// The last run as `status` shows it: the newer of the result record and the recent runs.
/// The nodes holding a unit of `task` (`<task>@<node-id>`: it runs on every node), by id.
pub fn unit_holders(snapshot: &Snapshot, task: &str) -> Vec<String> {
    let prefix = format!("{task}@");
    snapshot
        .leases
        .range(prefix.clone()..)
        .take_while(|(name, _)| name.starts_with(&prefix))
        .map(|(_, lease)| lease.node.clone())
        .collect()
}

/// The newest stored result of `task`, or of its units when it runs on every node.
fn newest_result<'a>(snapshot: &'a Snapshot, task: &str) -> Option<&'a RunResult> {
    let prefix = format!("{task}@");
    let units = snapshot
        .results
        .range(prefix.clone()..)
        .take_while(|(name, _)| name.starts_with(&prefix))
        .map(|(_, result)| result);
    snapshot
        .results
        .get(task)
        .into_iter()
        .chain(units)
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
fn node_statuses(snapshot: &Snapshot, now: DateTime<Utc>) -> Vec<NodeStatus> {
    let mut led: BTreeMap<&str, usize> = BTreeMap::new();
    for lease in snapshot.leases.values() {
        *led.entry(lease.node.as_str()).or_default() += 1;
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

/// `zkcron status`: the nodes and tasks of `snapshot` at `now`.
pub fn status(snapshot: &Snapshot, now: DateTime<Utc>) -> Status {
    let nodes = node_statuses(snapshot, now);
    let members = Members::new(snapshot);
    let names = snapshot.task_names();
    let definers: Vec<Vec<Definer<'_>>> = names.iter().map(|n| members.definers(n)).collect();
    let unranked: Vec<Vec<UnrankedDefiner<'_>>> =
        names.iter().map(|n| members.unranked_definers(n)).collect();
    let why_nones: Vec<Option<String>> = definers
        .iter()
        .zip(&unranked)
        .map(|(d, u)| why_none(d, u))
        .collect();
    // The next ticks first, in the order of their expressions, so that each distinct
    // expression's parse is made once and then found in the bounded parse cache; in name order,
    // thousands of distinct expressions were parsed again for nearly every task.
    // Each task's definition is looked up once (two map lookups by name); 100,000 tasks
    // looked each up three times.
    let entries: Vec<Option<&TaskSetEntry>> = names
        .iter()
        .zip(&definers)
        .map(|(name, definers)| definition(snapshot, name, definers))
        .collect();
    let mut order: Vec<usize> = (0..names.len())
        .filter(|&i| why_nones[i].is_none() && !snapshot.paused.contains_key(&names[i]))
        .collect();
    order.sort_by_key(|&i| {
        entries[i].map(|entry| (entry.schedule.as_deref(), entry.timezone.as_deref()))
    });
    let mut schedules = Schedules::new();
    let mut nexts: Vec<Option<DateTime<Utc>>> = vec![None; names.len()];
    for i in order {
        nexts[i] = next_tick(snapshot, &names[i], entries[i], &mut schedules, now);
    }
    drop(schedules);
    let mut tasks: Vec<TaskStatus> = names
        .into_iter()
        .zip(definers.iter().zip(&unranked))
        .zip(why_nones)
        .zip(nexts.into_iter().zip(entries.iter().copied()))
        .map(
            |(((name, (definers, unranked)), why_none), (next, entry))| {
                let pause = snapshot.paused.get(&name).map(|mark| PauseStatus {
                    at: mark.at,
                    by: mark.by.clone(),
                    reason: mark.reason.clone(),
                });
                let (starts_at, ended_at) = window_notes(entry, now);
                TaskStatus {
                    starts_at,
                    ended_at,
                    leader: snapshot.leases.get(&name).map(|l| l.node.clone()),
                    paused: pause.is_some(),
                    pause,
                    next,
                    queued: snapshot.fire_records.get(&name).and_then(|r| r.queued),
                    last: last_run(snapshot, &name),
                    drift: drift_among(definers, unranked),
                    problem: problem(snapshot, &name, why_none, now),
                    every_node: unit_holders(snapshot, &name),
                    work_items: BTreeMap::new(),
                    backfills: backfills_of(snapshot, &name),
                    name,
                    ..TaskStatus::default()
                }
            },
        )
        .collect();
    link_after(&mut tasks, &entries);
    Status {
        backend: snapshot.backend.clone(),
        cluster: snapshot.cluster.clone(),
        nodes,
        tasks,
    }
}

/// Sets each task's parents (`after`) from its definition (`entries`, one per task, in the same
/// order) and its children: the tasks whose definitions name it, by name.
fn link_after(tasks: &mut [TaskStatus], entries: &[Option<&TaskSetEntry>]) {
    let mut children: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (task, entry) in tasks.iter().zip(entries) {
        for parent in entry.map_or(&[][..], |e| e.after.as_slice()) {
            children
                .entry(parent.as_str())
                .or_default()
                .push(task.name.clone());
        }
    }
    for (task, entry) in tasks.iter_mut().zip(entries) {
        task.after = entry.map(|e| e.after.clone()).unwrap_or_default();
        task.children = children.remove(task.name.as_str()).unwrap_or_default();
        task.children.sort();
    }
}
