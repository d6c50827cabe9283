//! Operator writes as data: pause and drain ([`mark`]), [`resume`] and [`undrain`], and the
//! requests, `trigger` ([`trigger`]), `backfill` ([`backfill`]) and `backfill --cancel`
//! ([`cancel`]), as pure functions from the records read (with their versions) and `now` to the
//! records they write and the ZooKeeper operations they make ([`ZkOp`]), so that each rule
//! exists once. A new request's znode is sequential ([`Requesting`]): ZooKeeper numbers it,
//! the local backend numbers its own ([`RequestRecord::name`]).
//!
//! Who calls them: `zkcron` and the HTTP API through `crate::ops::cluster`, which reads the
//! records, performs the returned operations with the node's driver's executor
//! (`coord::zk::call`) and reads again on a lost race; the local backend
//! (`coord::local::pause`), which writes the same [`resumed`] record to its journal, and keeps
//! the same request records ([`RequestRecord`], [`cancelled`]) in its state files; and the
//! simulation (`tests/sim`), which reads its model ZooKeeper and applies what these return.
//! [`check_reason`] is the one rule for a pause's reason, for the command line and the API.
//!
//! No clock, no I/O: `now` is an argument, the reads are the caller's.

use chrono::{DateTime, SubsecRound, Utc};

use super::backfill::{self, BackfillRecord, BackfillState, RangeError};
use super::record;
use super::records::{FireRecord, MarkRecord, Paths, TriggerRecord};
use super::zkop::{CreateMode, NodeAcl, ZkOp};
use crate::plan::ledger::{self, Reason, TickEntry};
use crate::schedule::Schedule;

/// The longest reason a pause mark keeps.
pub const MAX_REASON_BYTES: usize = 500;

/// A pause's reason (`zkcron pause --reason`, the API's `{"reason": ...}`): some text, on one
/// line, of at most [`MAX_REASON_BYTES`]; trimmed. The error says what to change.
pub fn check_reason(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err(
            "the reason is empty: say why the task is paused, or leave out the reason".into(),
        );
    }
    if text.contains(['\n', '\r']) {
        return Err("the reason spans several lines: write it on one line".into());
    }
    if text.len() > MAX_REASON_BYTES {
        return Err(format!(
            "the reason is {} bytes long; at most {MAX_REASON_BYTES} are kept: shorten it",
            text.len()
        ));
    }
    Ok(text.to_string())
}

/// A record as read, with the znode's version (the writes are conditional on it).
#[derive(Debug, Clone, PartialEq)]
pub struct Versioned<T> {
    pub value: T,
    pub version: i32,
}

/// Test-only bugs of the operator's rules, for proving that the simulation's checker catches
/// what they cause. Every caller in `src/` passes the default: all off.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OperatorBugs {
    /// A resume moves the fire record without its queued tick (`queued: None`, as the
    /// simulation's own copy of the rule once wrote): the queued tick never runs.
    pub resume_drops_queued: bool,
}

/// What setting a mark (a pause, a drain) asks of ZooKeeper.
#[derive(Debug, Clone, PartialEq)]
pub enum Marking {
    /// A mark is there already; it stays as it is (the first mark is kept).
    Already(MarkRecord),
    /// Create each of `parents` on its own (one that exists is fine), then `create`. A
    /// `create` that finds the mark there lost a race: read again and ask again.
    Create { parents: Vec<ZkOp>, create: ZkOp },
}

/// `zkcron pause` and `zkcron drain`: the mark `mark` at `path` (`Paths::paused(task)`,
/// `Paths::drain(node)`), unless `read` (the mark there) is one: the first mark is kept.
pub fn mark(path: &str, read: Option<&MarkRecord>, mark: &MarkRecord, acl: NodeAcl) -> Marking {
    if let Some(read) = read {
        return Marking::Already(read.clone());
    }
    let data = serde_json::to_vec(mark).expect("marks serialize");
    Marking::Create {
        parents: parents(path, acl),
        create: create(path, data, CreateMode::Persistent, acl),
    }
}

fn create(path: &str, data: Vec<u8>, mode: CreateMode, acl: NodeAcl) -> ZkOp {
    ZkOp::Create {
        path: path.to_string(),
        data,
        mode,
        acl,
    }
}

/// The creates of `path`'s ancestors, the root's child first (persistent, empty).
fn parents(path: &str, acl: NodeAcl) -> Vec<ZkOp> {
    path.match_indices('/')
        .map(|(at, _)| &path[..at])
        .filter(|parent| !parent.is_empty())
        .map(|parent| create(parent, Vec::new(), CreateMode::Persistent, acl))
        .collect()
}

/// `zkcron undrain`: `node`'s drain mark deleted at the version read; `None` when there is
/// none (nothing to do).
pub fn undrain(paths: &Paths, node: &str, read: Option<&Versioned<MarkRecord>>) -> Option<ZkOp> {
    read.map(|read| ZkOp::Delete {
        path: paths.drain(node),
        version: Some(read.version),
    })
}

/// The fire records a resume of `task` reads, by name under `tasks/`: the task's own and, for a
/// task that runs on every node, each node's unit's (`<task>@<node>`) among `children`.
pub fn resume_reads<'a>(task: &str, children: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let unit = format!("{task}@");
    std::iter::once(task.to_string())
        .chain(
            children
                .into_iter()
                .filter(|child| child.starts_with(&unit))
                .map(str::to_string),
        )
        .collect()
}

/// What a resume of a task reads: its pause mark and the fire records [`resume_reads`] names,
/// by name, each with its version.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResumeRead {
    pub mark: Option<Versioned<MarkRecord>>,
    pub records: Vec<(String, Versioned<FireRecord>)>,
}

/// `zkcron resume`: one multi-op that deletes the pause mark at the version read and, in the
/// same step, writes each record read that the [`resumed`] rule moves, at the version read.
/// `None` when the task is not paused (no mark).
pub fn resume(paths: &Paths, task: &str, read: &ResumeRead, now: DateTime<Utc>) -> Option<ZkOp> {
    resume_with(OperatorBugs::default(), paths, task, read, now)
}

/// [`resume`] with the test-only `bugs`.
#[doc(hidden)]
pub fn resume_with(
    bugs: OperatorBugs,
    paths: &Paths,
    task: &str,
    read: &ResumeRead,
    now: DateTime<Utc>,
) -> Option<ZkOp> {
    let mark = read.mark.as_ref()?;
    let mut ops = vec![ZkOp::Delete {
        path: paths.paused(task),
        version: Some(mark.version),
    }];
    for (name, record) in &read.records {
        if let Some(moved) = resumed_with(bugs, &record.value, now) {
            ops.push(ZkOp::SetData {
                path: paths.record(name),
                data: serde_json::to_vec(&moved).expect("fire records serialize"),
                version: Some(record.version),
            });
        }
    }
    Some(ZkOp::Multi(ops))
}

/// The resume rule, for one fire record, on every backend: a record older than `now` (whole
/// seconds) moves to `now`, so the ticks of the paused period are not caught up. Nobody
/// claimed `now` (no node, no session, not to run), but the queued tick stays: it was claimed
/// to run after the live run, and it still does. `None` when the record is at or after `now`:
/// it stays as it is.
pub fn resumed(record: &FireRecord, now: DateTime<Utc>) -> Option<FireRecord> {
    resumed_with(OperatorBugs::default(), record, now)
}

fn resumed_with(bugs: OperatorBugs, record: &FireRecord, now: DateTime<Utc>) -> Option<FireRecord> {
    let now = now.trunc_subsecs(0);
    if record.tick.is_some_and(|tick| tick >= now) {
        return None;
    }
    // The ticks of the paused period go into the ledger, uncounted (no schedule here): a
    // reader with the schedule counts them (`plan::ledger::lines`).
    let paused = record.tick.map(|tick| TickEntry {
        from: tick + chrono::TimeDelta::seconds(1),
        to: now,
        count: 0,
        reason: Reason::Paused,
    });
    Some(FireRecord {
        tick: Some(now),
        claimed_at: Some(now),
        queued: record.queued.filter(|_| !bugs.resume_drops_queued),
        ticks: ledger::merged(&record.ticks, paused.as_slice(), record.tick),
        // The count of runs `max_runs` limits stays: a resume runs nothing.
        runs: record.runs,
        ..FireRecord::empty()
    })
}

/// A request's record, its kind as data: a run asked for once (`Manual`: `zkcron trigger`, or a
/// chained run, `after` a parent's success, which the node requests in the write of its
/// parent's result: `record::chained_requests`) or a backfill of a range (`zkcron backfill`).
/// The rules here make the new ones; the local backend keeps every kind in one store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestRecord {
    Manual(TriggerRecord),
    Backfill(BackfillRecord),
}

impl RequestRecord {
    /// The task it runs.
    pub fn task(&self) -> &str {
        match self {
            RequestRecord::Manual(record) => &record.task,
            RequestRecord::Backfill(record) => &record.task,
        }
    }

    /// The name of the request numbered `n` (its znode's, its key in the local backend's
    /// file): `<task>@manual-<10 digits>` (a manual run's fire id) or
    /// `<task>@backfill-<10 digits>`.
    pub fn name(&self, n: u64) -> String {
        match self {
            RequestRecord::Manual(record) => record::manual_fire_id(&record.task, n),
            RequestRecord::Backfill(record) => backfill::request_name(&record.task, n),
        }
    }

    /// The prefix of its sequential znode (ZooKeeper appends the number).
    fn prefix(&self, paths: &Paths) -> String {
        match self {
            RequestRecord::Manual(record) => paths.trigger_prefix(&record.task),
            RequestRecord::Backfill(record) => paths.backfill_prefix(&record.task),
        }
    }

    fn data(&self) -> Vec<u8> {
        match self {
            RequestRecord::Manual(record) => serde_json::to_vec(record),
            RequestRecord::Backfill(record) => serde_json::to_vec(record),
        }
        .expect("request records serialize")
    }
}

impl From<TriggerRecord> for RequestRecord {
    fn from(record: TriggerRecord) -> RequestRecord {
        RequestRecord::Manual(record)
    }
}

impl From<BackfillRecord> for RequestRecord {
    fn from(record: BackfillRecord) -> RequestRecord {
        RequestRecord::Backfill(record)
    }
}

/// `zkcron trigger`: a manual run of `task`, asked by `by` (`user@host`) at `now`, pending
/// until the task's leader claims it.
pub fn trigger(task: &str, by: &str, now: DateTime<Utc>) -> TriggerRecord {
    TriggerRecord::pending(task, by, now)
}

/// `zkcron backfill`: a backfill of `task`'s ticks of `schedule` in `[from, to)`, asked by `by`
/// at `now`; refused for a range with no tick or more than [`backfill::MAX_TICKS`].
pub fn backfill(
    task: &str,
    schedule: &Schedule,
    (from, to): (DateTime<Utc>, DateTime<Utc>),
    by: &str,
    now: DateTime<Utc>,
) -> Result<BackfillRecord, RangeError> {
    let total = backfill::count_ticks(schedule, from, to)?;
    Ok(BackfillRecord::new(task, from, to, total, by, now))
}

/// What a new request asks of ZooKeeper: create each of `parents` on its own (one that
/// exists is fine), then `create`, a persistent sequential znode at the request's prefix
/// (`control/triggers/<task>@manual-`, `control/backfills/<task>@backfill-`) to which
/// ZooKeeper appends the number that makes the request's name.
#[derive(Debug, Clone, PartialEq)]
pub struct Requesting {
    pub parents: Vec<ZkOp>,
    pub create: ZkOp,
}

/// The writes of `request` in the cluster at `paths`.
pub fn request(paths: &Paths, request: &RequestRecord, acl: NodeAcl) -> Requesting {
    let prefix = request.prefix(paths);
    Requesting {
        parents: parents(&prefix, acl),
        create: create(
            &prefix,
            request.data(),
            CreateMode::PersistentSequential,
            acl,
        ),
    }
}

/// The cancel rule, on every backend: an active request becomes cancelled by `by` at `now`
/// (no tick is claimed after it; a running one finishes). `None` when it is over already (done
/// or cancelled): it stays as it is.
pub fn cancelled(record: &BackfillRecord, by: &str, now: DateTime<Utc>) -> Option<BackfillRecord> {
    (record.state == BackfillState::Active).then(|| BackfillRecord {
        state: BackfillState::Cancelled,
        ended_at: Some(now),
        cancelled_by: Some(by.to_string()),
        ..record.clone()
    })
}

/// What `zkcron backfill --cancel` asks of ZooKeeper.
#[derive(Debug, Clone, PartialEq)]
pub enum Cancelling {
    /// There is no such request.
    Missing,
    /// It is over already (the record as read): nothing to write.
    Over(BackfillRecord),
    /// Write `op` (the [`cancelled`] record at the version read); `was` is the record as read.
    /// A version moved meanwhile: read again and ask again.
    Set { was: BackfillRecord, op: ZkOp },
}

/// `zkcron backfill --cancel NAME`: the request `name` as `read` (with its version), cancelled
/// by `by` at `now`.
pub fn cancel(
    paths: &Paths,
    name: &str,
    read: Option<&Versioned<BackfillRecord>>,
    by: &str,
    now: DateTime<Utc>,
) -> Cancelling {
    let Some(read) = read else {
        return Cancelling::Missing;
    };
    match cancelled(&read.value, by, now) {
        None => Cancelling::Over(read.value.clone()),
        Some(new) => Cancelling::Set {
            was: read.value.clone(),
            op: ZkOp::SetData {
                path: paths.backfill(name),
                data: serde_json::to_vec(&new).expect("backfill records serialize"),
                version: Some(read.version),
            },
        },
    }
}

#[cfg(test)]
mod tests;
