//! The records zkcron stores in ZooKeeper (the local backend keeps its history in the same
//! JSON), their paths, the names allowed in a path and the task-set codec. The JSON of every
//! record is part of the cluster's protocol (nodes of different releases share a tree): fields
//! are only ever added, with defaults, and readers ignore unknown ones.
//!
//! The node, both backends and the operator's commands read and write these types; this module
//! depends on nothing above the lease rule, so none of them imports another for a record.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::coord::RunResult;
use crate::coord::lease::{Holders, Member, TaskEntry, TaskSet};
use crate::plan::ledger::TickEntry;
use crate::schedule::Calendar;
use crate::task::{RunOn, TaskSpec};

/// The version of every JSON record this backend writes; readers ignore unknown fields.
pub const FORMAT_VERSION: u32 = 1;

/// A task set is split into znodes of at most this many bytes (ZooKeeper's limit is 1 MiB).
const CHUNK_BYTES: usize = 512 * 1024;

/// `members/<node-id>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberRecord {
    pub format: u32,
    pub id: String,
    pub release: String,
    /// The random 64-bit rendezvous seed, in hex (JSON numbers lose precision past 2^53).
    pub seed: String,
    pub host: String,
    pub pid: u32,
    /// Where this node's HTTP endpoint answers (`host:port`), for `zkcron logs` to read a
    /// run's output from the node that ran it. Missing: it serves none (or an older release).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<String>,
    pub started_at: DateTime<Utc>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    pub taskset: TaskSetRef,
    /// False while the node refuses leadership (clock skew beyond `max_clock_skew`): others
    /// then rank without it. Missing (older writers) means true.
    #[serde(default = "yes")]
    pub leads: bool,
    /// The operator drained this node (`control/drained/<id>`): it also writes `leads: false`,
    /// so releases that do not know this field rank without it too. Missing means false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drained: bool,
}

fn yes() -> bool {
    true
}

impl MemberRecord {
    /// The member as the lease rule ranks it, defining `tasks`: the one conversion, which the
    /// node, `status`, `explain` and the simulation all use.
    ///
    /// `release` is read as a semantic version: a pre-release (`2.2.0-rc.1`) ranks below its
    /// release and above the one before, build metadata (`2.1.0+b5`) is kept but does not
    /// change the rank ([`crate::coord::rank`]). A record whose release is not a semantic
    /// version (`2.1`, `v2.1.0`) or whose seed is not hexadecimal 64-bit is ranked for nothing:
    /// guessing a release would let a node lead tasks its real release may not lead.
    pub fn to_member(&self, tasks: Arc<TaskSet>) -> Result<Member, Unranked> {
        let release = semver::Version::parse(&self.release)
            .map_err(|_| Unranked::InvalidRelease(self.release.clone()))?;
        let seed = u64::from_str_radix(&self.seed, 16)
            .map_err(|_| Unranked::InvalidSeed(self.seed.clone()))?;
        Ok(Member {
            id: self.id.clone(),
            release,
            seed,
            tasks,
            may_lead: self.leads && !self.drained,
            labels: Arc::new(self.labels.clone()),
            drained: self.drained,
        })
    }
}

/// Why a member record is ranked for nothing ([`MemberRecord::to_member`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unranked {
    /// The release as written, which is not a semantic version.
    InvalidRelease(String),
    /// The seed as written, which is not 64-bit hexadecimal.
    InvalidSeed(String),
}

impl std::fmt::Display for Unranked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unranked::InvalidRelease(release) => write!(
                f,
                "release {release:?} is not a semantic version: ranked for nothing"
            ),
            Unranked::InvalidSeed(seed) => {
                write!(f, "seed {seed:?} is not 64-bit hex: ranked for nothing")
            }
        }
    }
}

/// Where a member's task set is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSetRef {
    pub digest: String,
    pub chunks: usize,
    pub count: usize,
}

/// The tasks a node defines: the concatenated chunks `tasksets/<digest>-<i>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSetRecord {
    pub format: u32,
    pub tasks: BTreeMap<String, TaskSetEntry>,
    /// The calendars the tasks exclude (`exclude`), each once, so that `status` and the tick
    /// ledger work out their ticks on any host; absent when none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub calendars: BTreeMap<String, CalendarRecord>,
}

/// A calendar as a task set carries it (`schedule::Calendar` without its name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CalendarRecord {
    pub timezone: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dates: Vec<chrono::NaiveDate>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub periods: Vec<(chrono::NaiveDateTime, chrono::NaiveDateTime)>,
}

impl CalendarRecord {
    pub fn of(calendar: &Calendar) -> CalendarRecord {
        CalendarRecord {
            timezone: calendar.timezone.name().to_string(),
            dates: calendar.dates.clone(),
            periods: calendar.periods.clone(),
        }
    }

    /// The calendar `name` this record holds; `None` when its zone is unknown here.
    pub fn calendar(&self, name: &str) -> Option<Calendar> {
        Some(Calendar {
            name: name.into(),
            timezone: crate::schedule::parse_timezone(&self.timezone).ok()?,
            dates: self.dates.clone(),
            periods: self.periods.clone(),
        })
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskSetEntry {
    pub digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_req: Option<String>,
    /// The task's `require_labels`; absent when empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub require_labels: BTreeMap<String, String>,
    /// The schedule expression as written, so `zkcron status` can compute the next
    /// tick on any host; absent from older writers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// The schedule's IANA zone name; absent from older writers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// A schedule written as a list: its expressions (then `schedule` is absent, so that an
    /// older reader shows no next tick rather than the first expression's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedules: Option<Vec<String>>,
    /// The task's `active_from`, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_from: Option<DateTime<Utc>>,
    /// The task's `active_until`, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_until: Option<DateTime<Utc>>,
    /// `"every_node"` for a task that runs on every node (its leases are units,
    /// `<task>@<node-id>`); absent for a task its leader runs. A value this release does not
    /// know (from a newer one) makes the entry admit no member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_on: Option<String>,
    /// A pooled task's work items, in the task file's order (with `run_on = "work_items"`: a
    /// release that does not know pools lets no member hold such a task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_items: Option<Vec<String>>,
    /// The task's `after`: the tasks whose successes run it, as written; absent when none (and
    /// from older writers, read as no parents).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// The task's `max_runs`, when it has one: how many scheduled ticks may run in all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_runs: Option<u32>,
    /// The calendars the task excludes (`exclude`), by name: the task set's `calendars`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// The task's `dst_gap` and `dst_repeat`, when it sets them (`run_after`/`skip`,
    /// `first`/`both`), so that `status` works out its next tick as its nodes do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst_gap: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst_repeat: Option<String>,
}

/// [`TaskSetEntry::run_on`] of a task that runs on every node.
pub const RUN_ON_EVERY_NODE: &str = "every_node";

/// [`TaskSetEntry::run_on`] of a pooled task (its items in [`TaskSetEntry::work_items`]).
pub const RUN_ON_WORK_ITEMS: &str = "work_items";

/// `control/drained/<node-id>` and `control/paused/<task>`: an operator's mark.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkRecord {
    pub format: u32,
    pub at: DateTime<Utc>,
    /// Who set it: `user@host`.
    pub by: String,
    /// Why: `zkcron pause --reason`'s text, or the failed run that paused a task with
    /// `pause_on_failure`. Absent when none was given (and from older writers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `leases/<task>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseRecord {
    pub format: u32,
    pub node: String,
    pub session: String,
    pub since: DateTime<Utc>,
}

/// `tasks/<task>`: the newest claimed tick.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FireRecord {
    pub format: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tick: Option<DateTime<Utc>>,
    #[serde(default)]
    pub node: String,
    #[serde(default)]
    pub session: String,
    /// The claim was made to run the tick (not to skip it for overlap).
    #[serde(default)]
    pub run: bool,
    /// How often the tick was claimed again after its node was lost (`on_node_loss = "rerun"`).
    #[serde(default)]
    pub reruns: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_at: Option<DateTime<Utc>>,
    /// The tick queued behind a live run (`overlap = "queue"`), until a claim starts it.
    /// Written only by releases that know the policy, which are the only ones that lead such a
    /// task (older ones refuse its file); to an older reader the tick is claimed and not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<DateTime<Utc>>,
    /// The newest ticks not run, and why (`plan::ledger`: at most `STORED_ENTRIES`, oldest
    /// first); absent when none. An older release's write leaves them out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ticks: Vec<TickEntry>,
    /// How many scheduled ticks were claimed to run (or queued to) in all: the count
    /// `max_runs` limits, moved by the claims themselves. Absent while zero.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub runs: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl FireRecord {
    pub fn empty() -> FireRecord {
        FireRecord {
            format: FORMAT_VERSION,
            tick: None,
            node: String::new(),
            session: String::new(),
            run: false,
            reruns: 0,
            claimed_at: None,
            queued: None,
            ticks: Vec::new(),
            runs: 0,
        }
    }
}

/// `tasks/<task>/run-<unix>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub format: u32,
    pub node: String,
    pub session: String,
    pub tick: DateTime<Utc>,
    pub started_at: DateTime<Utc>,
}

/// `tasks/<task>/result`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultRecord {
    pub format: u32,
    #[serde(flatten)]
    pub result: RunResult,
}

/// Where a manual run (`control/triggers/<task>@manual-<10 digits>`) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TriggerState {
    /// Asked for; the task's leader has not claimed it yet.
    Pending,
    /// Claimed by `node`, which runs it now.
    Running,
    /// Over: `result` says how (and `reason` why, when it could not run).
    Ended,
}

/// `control/triggers/<task>@manual-<10 digits>` (persistent sequential): a manual run.
/// `zkcron trigger` creates it pending; the task's leader claims it (running) and ends it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerRecord {
    pub format: u32,
    pub task: String,
    pub requested_at: DateTime<Utc>,
    /// Who asked: `user@host`.
    pub by: String,
    pub state: TriggerState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<HistoryEntry>,
    /// Why the run failed without an exit code or signal ("not started: ...", "timed out").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A chained run's request: the fire id of the parent's run that caused it (`after`);
    /// `requested_at` is then the parent's tick. Written only then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

impl TriggerRecord {
    /// A pending request of a manual run of `task`, asked `by` at `requested_at`, as
    /// `zkcron trigger` writes it.
    pub fn pending(task: &str, by: &str, requested_at: DateTime<Utc>) -> TriggerRecord {
        TriggerRecord {
            format: FORMAT_VERSION,
            task: task.to_string(),
            requested_at,
            by: by.to_string(),
            state: TriggerState::Pending,
            node: None,
            claimed_at: None,
            result: None,
            reason: None,
            after: None,
        }
    }
}

/// What started a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunTrigger {
    /// A tick of the schedule (a catch-up or a rerun included).
    Schedule,
    /// `zkcron trigger`, or `zkcron backfill` (then the entry's `backfill` is true: releases
    /// that know only these two values read a backfill's entry as a manual run, not as a
    /// history they cannot read).
    Manual,
}

/// One run in a task's history: exactly an element of `zkcron history --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    pub fire_id: String,
    /// The tick; of a manual run, when it was requested.
    pub tick: DateTime<Utc>,
    pub node: String,
    pub release: String,
    pub started_at: DateTime<Utc>,
    pub duration_ms: u64,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub success: bool,
    pub attempts: u32,
    pub trigger: RunTrigger,
    /// A run of `zkcron backfill` (fire id `<task>@backfill-<10 digits>-<unix>`; `trigger` is
    /// `manual`). Written only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub backfill: bool,
    /// A chained run (`after`): the fire id of the parent's run that caused it (the fire id is
    /// `<task>@after-<that>`, or `<task>@item-<item>@after-<that>` after a pooled parent's
    /// item; `trigger` is `manual`). Written only then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// A pooled task's run on one node: its work items, in the task file's order. Written
    /// only then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<Vec<String>>,
    /// A failed run's last lines of output, at most 4 KiB (the whole output stays on the node
    /// that ran it: `zkcron logs`). Written only then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tail: Option<String>,
}

impl HistoryEntry {
    /// The entry of `task`'s run that ended with `result`, run by a node of `release` (unless
    /// the result names its own).
    pub fn of_run(task: &str, result: &RunResult, release: &str) -> HistoryEntry {
        let started_at = result.started_at.unwrap_or_else(|| {
            result.finished_at - chrono::TimeDelta::milliseconds(result.duration_ms as i64)
        });
        let after = result
            .fire_id
            .as_deref()
            .filter(|_| result.manual)
            .and_then(chained_parent)
            .map(str::to_string);
        HistoryEntry {
            fire_id: result
                .fire_id
                .clone()
                .unwrap_or_else(|| format!("{task}@{}", result.tick.timestamp())),
            tick: result.tick,
            node: result.node.clone(),
            release: result
                .release
                .clone()
                .unwrap_or_else(|| release.to_string()),
            started_at,
            duration_ms: result.duration_ms,
            exit_code: result.exit_code,
            signal: result.signal,
            success: result.success,
            attempts: result.attempts,
            trigger: if result.manual {
                RunTrigger::Manual
            } else {
                RunTrigger::Schedule
            },
            // A task name has no `@`: a chained run's fire id starts `<task>@after-`, and
            // only a backfill's holds `@backfill-` otherwise.
            backfill: result.manual
                && after.is_none()
                && result
                    .fire_id
                    .as_ref()
                    .is_some_and(|id| id.contains("@backfill-")),
            after,
            items: None,
            output_tail: result.output_tail.as_deref().map(str::to_string),
        }
    }
}

/// The parent's fire id of a chained run's fire id: `<task>@after-<parent>`, or
/// `<task>@item-<item>@after-<parent>` after an item of a pooled parent (a task name and an
/// item have no `@`).
fn chained_parent(fire_id: &str) -> Option<&str> {
    let (_, rest) = fire_id.split_once('@')?;
    let rest = match rest.strip_prefix("item-") {
        Some(rest) => rest.split_once('@')?.1,
        None => rest,
    };
    rest.strip_prefix("after-")
}

/// `tasks/<task>/history`: the task's last runs, oldest first, at most `[scheduler]
/// history_runs` of them and [`crate::coord::record::HISTORY_MAX_BYTES`] of JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryRecord {
    pub format: u32,
    #[serde(default)]
    pub runs: Vec<HistoryEntry>,
}

/// The paths of manual runs and histories.
impl Paths {
    pub fn triggers(&self) -> String {
        format!("{}/control/triggers", self.base)
    }
    pub fn trigger(&self, name: &str) -> String {
        format!("{}/control/triggers/{name}", self.base)
    }
    /// The prefix `zkcron trigger` creates a sequential trigger znode with.
    pub fn trigger_prefix(&self, task: &str) -> String {
        format!("{}/control/triggers/{task}@manual-", self.base)
    }
    pub fn history(&self, task: &str) -> String {
        format!("{}/tasks/{task}/history", self.base)
    }
}

/// The pattern a node id or cluster name must match, as shown to users.
pub const NODE_ID_PATTERN: &str = "[A-Za-z0-9][A-Za-z0-9._-]{0,99}";

/// Whether `name` matches [`NODE_ID_PATTERN`]: safe as one element of a ZooKeeper path.
pub fn is_path_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= 100
        && bytes.next().is_some_and(|b| b.is_ascii_alphanumeric())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The paths of one cluster.
#[derive(Debug, Clone)]
pub struct Paths {
    pub base: String,
}

impl Paths {
    pub fn members(&self) -> String {
        format!("{}/members", self.base)
    }
    pub fn member(&self, id: &str) -> String {
        format!("{}/members/{id}", self.base)
    }
    pub fn leases(&self) -> String {
        format!("{}/leases", self.base)
    }
    pub fn lease(&self, task: &str) -> String {
        format!("{}/leases/{task}", self.base)
    }
    pub fn tasks(&self) -> String {
        format!("{}/tasks", self.base)
    }
    pub fn record(&self, task: &str) -> String {
        format!("{}/tasks/{task}", self.base)
    }
    pub fn epoch(&self, task: &str) -> String {
        format!("{}/tasks/{task}/epoch", self.base)
    }
    pub fn result(&self, task: &str) -> String {
        format!("{}/tasks/{task}/result", self.base)
    }
    pub fn run(&self, task: &str, tick: DateTime<Utc>) -> String {
        format!("{}/tasks/{task}/run-{}", self.base, tick.timestamp())
    }
    pub fn tasksets(&self) -> String {
        format!("{}/tasksets", self.base)
    }
    pub fn chunk(&self, digest: &str, index: usize) -> String {
        format!("{}/tasksets/{digest}-{index}", self.base)
    }
    pub fn clock(&self) -> String {
        format!("{}/clock", self.base)
    }
    /// `control`: the operator's marks.
    pub fn control(&self) -> String {
        format!("{}/control", self.base)
    }
    pub fn drained(&self) -> String {
        format!("{}/control/drained", self.base)
    }
    pub fn drain(&self, node: &str) -> String {
        format!("{}/control/drained/{node}", self.base)
    }
    pub fn paused_dir(&self) -> String {
        format!("{}/control/paused", self.base)
    }
    pub fn paused(&self, task: &str) -> String {
        format!("{}/control/paused/{task}", self.base)
    }
}

/// Encodes this node's task set: its digest and chunks.
pub fn encode_taskset<T: std::borrow::Borrow<TaskSpec>>(
    tasks: &[T],
) -> (TaskSetRef, Vec<Vec<u8>>, Arc<TaskSet>) {
    let record = taskset_record(tasks);
    let (taskset, chunks) = taskset_chunks(&record);
    let set = decode_taskset(&record);
    (taskset, chunks, set)
}

/// The task-set record of `tasks`, as [`encode_taskset`] writes it.
pub fn taskset_record<T: std::borrow::Borrow<TaskSpec>>(tasks: &[T]) -> TaskSetRecord {
    // Each calendar once, however many tasks exclude it.
    let mut calendars = BTreeMap::new();
    for calendar in tasks.iter().flat_map(|t| t.borrow().schedule.exclusions()) {
        calendars
            .entry(calendar.name.to_string())
            .or_insert_with(|| CalendarRecord::of(calendar));
    }
    TaskSetRecord {
        format: FORMAT_VERSION,
        calendars,
        tasks: tasks
            .iter()
            .map(|t| {
                let t: &TaskSpec = t.borrow();
                (
                    t.name.to_string(),
                    TaskSetEntry {
                        digest: t.digest(),
                        version_req: t.extras.version_req.as_ref().map(|r| r.to_string()),
                        require_labels: t.extras.require_labels.clone(),
                        schedule: (!t.schedule.is_list())
                            .then(|| t.schedule.expression().into_owned()),
                        timezone: Some(t.schedule.timezone().name().to_string()),
                        schedules: t.schedule.is_list().then(|| {
                            t.schedule
                                .expressions()
                                .into_iter()
                                .map(str::to_string)
                                .collect()
                        }),
                        active_from: t.schedule.window().from,
                        active_until: t.schedule.window().until,
                        run_on: match &t.extras.run_on {
                            RunOn::Leader => None,
                            RunOn::EveryNode => Some(RUN_ON_EVERY_NODE.to_string()),
                            RunOn::Items(_) => Some(RUN_ON_WORK_ITEMS.to_string()),
                        },
                        work_items: t.extras.run_on.items().map(<[String]>::to_vec),
                        after: t.extras.after.iter().map(|p| p.name.to_string()).collect(),
                        max_runs: t.extras.max_runs,
                        exclude: t
                            .schedule
                            .exclusions()
                            .iter()
                            .map(|c| c.name.to_string())
                            .collect(),
                        dst_gap: t.schedule.dst().gap.map(|g| g.as_str().to_string()),
                        dst_repeat: t.schedule.dst().repeat.map(|r| r.as_str().to_string()),
                    },
                )
            })
            .collect(),
    }
}

/// The reference to `record` (its digest, chunk count and task count) and its chunks.
pub fn taskset_chunks(record: &TaskSetRecord) -> (TaskSetRef, Vec<Vec<u8>>) {
    let bytes = serde_json::to_vec(record).expect("task sets serialize");
    let digest = format!("{:032x}", xxhash_rust::xxh3::xxh3_128(&bytes));
    let chunks: Vec<Vec<u8>> = bytes.chunks(CHUNK_BYTES).map(<[u8]>::to_vec).collect();
    let taskset = TaskSetRef {
        digest,
        chunks: chunks.len().max(1),
        count: record.tasks.len(),
    };
    (taskset, chunks)
}

/// A `version_req` no release matches.
fn matches_nothing() -> semver::VersionReq {
    semver::VersionReq::parse("<0.0.0-0").expect("valid")
}

/// Who holds the leases of `entry`'s task; `None` for a `run_on` this release does not know,
/// or a pool without its items.
fn decode_holders(entry: &TaskSetEntry) -> Option<Holders> {
    match (entry.run_on.as_deref(), &entry.work_items) {
        (None, _) => Some(Holders::Leader),
        (Some(RUN_ON_EVERY_NODE), _) => Some(Holders::EveryNode),
        (Some(RUN_ON_WORK_ITEMS), Some(items)) if !items.is_empty() => {
            Some(Holders::Items(items.as_slice().into()))
        }
        (Some(_), _) => None,
    }
}

pub fn decode_taskset(record: &TaskSetRecord) -> Arc<TaskSet> {
    Arc::new(
        record
            .tasks
            .iter()
            .map(|(name, entry)| {
                let holders = decode_holders(entry);
                (
                    name.clone(),
                    TaskEntry {
                        digest: entry.digest.clone(),
                        // A requirement this release cannot parse matches nothing, so an old
                        // node never leads a task written for a newer one; nor one that runs
                        // where this release does not know.
                        version_req: match holders {
                            Some(_) => entry.version_req.as_ref().map(|r| {
                                semver::VersionReq::parse(r).unwrap_or_else(|_| matches_nothing())
                            }),
                            None => Some(matches_nothing()),
                        },
                        require_labels: entry.require_labels.clone(),
                        holders: holders.unwrap_or_default(),
                        max_runs: entry.max_runs,
                    },
                )
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests;
