//! Backfills (`zkcron backfill TASK --from T1 --to T2`): the request record both backends keep,
//! the fire ids of its runs, and the rules of its claims and ends, once for every backend.
//!
//! A request names a task and a range; the ticks of the task's schedule in `[from, to)` run on
//! the task's leader once each, oldest first, one at a time. The record is persistent
//! (ZooKeeper: `control/backfills/<task>@backfill-<10 digits>`, sequential; the local backend:
//! `backfills.json`) and its progress moves in the write that claims each tick, fenced like a
//! manual run's claim (the lease and its incarnation are checked in the same multi-op):
//!
//! - **Claim** of `tick` ([`admit`]): only while the node leads the task
//!   ([`ClaimOutcome::NotLeader`] first), and only while the request is active, no tick of it
//!   runs on a live node, fewer than `total` ticks were claimed, and `tick` is newer than
//!   `done` (the newest tick claimed) and inside the range; anything else is
//!   [`ClaimOutcome::AlreadyClaimed`]. The claim ([`claimed`]) moves `done` to `tick` and sets
//!   `running`: a tick is claimed at most once, also across a leader change.
//! - **End** ([`ended`]): the run's end clears `running` and counts a success or a failure; the
//!   last tick's end makes the request `done`. A tick whose node was lost while it ran counts
//!   as failed and is not run again ([`lost`]).
//! - **Cancel** (`coord::operator::cancelled`, the operator's rule): no tick is claimed after
//!   it; a running one finishes.
//!
//! The fire id of a backfill run is `<task>@backfill-<10 digits>-<unix>` ([`fire_id`]): a
//! scheduled tick's is `<task>@<unix>` and a manual run's `<task>@manual-<10 digits>`, so no
//! other run can have it. Its `ZKCRON_SCHEDULED_AT` is the historic tick.

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use super::ClaimOutcome;
use super::record::Verdict;
use super::records::{HistoryEntry, Paths};
use crate::schedule::Schedule;

/// A request runs at most this many ticks; a longer range is refused with its count.
pub const MAX_TICKS: u32 = 10_000;

/// A request keeps the fire ids of at most this many failed runs (the newest).
const FAILURES_KEPT: usize = 10;

/// Ended requests are deleted this long after they ended.
pub const KEEP_ENDED: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// Where a backfill request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackfillState {
    /// Its ticks are being run (or wait for a leader).
    Active,
    /// Every tick ran (`failed` says how many failed).
    Done,
    /// `zkcron backfill --cancel`: no tick is claimed after it.
    Cancelled,
}

/// The tick of a request that runs now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackfillRun {
    pub tick: DateTime<Utc>,
    pub node: String,
    /// The claimer's ZooKeeper session, in hex (none on the local backend): while it lives
    /// the tick runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    pub claimed_at: DateTime<Utc>,
}

/// A backfill request: `control/backfills/<task>@backfill-<10 digits>` (persistent
/// sequential), or an entry of the local backend's `backfills.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackfillRecord {
    pub format: u32,
    pub task: String,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// The ticks of the range when it was requested.
    pub total: u32,
    pub requested_at: DateTime<Utc>,
    /// Who asked: `user@host`.
    pub by: String,
    pub state: BackfillState,
    /// The newest tick claimed; `None`: none yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done: Option<DateTime<Utc>>,
    /// How many ticks were claimed.
    #[serde(default)]
    pub claimed: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<BackfillRun>,
    #[serde(default)]
    pub succeeded: u32,
    #[serde(default)]
    pub failed: u32,
    /// The newest failures: `"<fire id>: <how it ended>"`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<String>,
    /// When it became done or cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<DateTime<Utc>>,
    /// Who cancelled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_by: Option<String>,
}

impl BackfillRecord {
    /// A new active request.
    pub fn new(
        task: &str,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        total: u32,
        by: &str,
        now: DateTime<Utc>,
    ) -> BackfillRecord {
        BackfillRecord {
            format: super::records::FORMAT_VERSION,
            task: task.to_string(),
            from,
            to,
            total,
            requested_at: now,
            by: by.to_string(),
            state: BackfillState::Active,
            done: None,
            claimed: 0,
            running: None,
            succeeded: 0,
            failed: 0,
            failures: Vec::new(),
            ended_at: None,
            cancelled_by: None,
        }
    }

    /// The runs that ended (or were lost).
    pub fn finished(&self) -> u32 {
        self.succeeded + self.failed
    }

    /// The request needs a tick claimed now: active, nothing running, ticks left.
    pub fn wants_tick(&self) -> bool {
        self.state == BackfillState::Active && self.running.is_none() && self.claimed < self.total
    }
}

/// A request as the task's leader needs it to pick its next tick
/// ([`Leadership::backfills`](super::Leadership::backfills)).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Backfill {
    /// `<task>@backfill-<10 digits>`.
    pub name: String,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// The newest tick claimed.
    pub done: Option<DateTime<Utc>>,
}

impl Backfill {
    /// The listing of `record` under `name`.
    pub fn of(name: &str, record: &BackfillRecord) -> Backfill {
        Backfill {
            name: name.to_string(),
            from: record.from,
            to: record.to,
            done: record.done,
        }
    }

    /// The next tick of `schedule` to run: the first after `done` (or at or after `from`)
    /// before `to`.
    pub fn next_tick(&self, schedule: &Schedule) -> Option<DateTime<Utc>> {
        let after = self
            .done
            .unwrap_or(self.from - TimeDelta::nanoseconds(1))
            .max(self.from - TimeDelta::nanoseconds(1));
        schedule.next_after(after).filter(|tick| *tick < self.to)
    }
}

/// The name of the `n`-th backfill request of `task`: `<task>@backfill-<10 digits>`.
pub fn request_name(task: &str, n: u64) -> String {
    format!("{task}@backfill-{n:010}")
}

/// The task of a request name, if it has that form.
pub fn request_task(name: &str) -> Option<&str> {
    let (task, number) = name.rsplit_once("@backfill-")?;
    (number.len() == 10
        && number.bytes().all(|b| b.is_ascii_digit())
        && crate::task::is_valid_task_name(task))
    .then_some(task)
}

/// The fire id of `tick` of the request `name`: `<task>@backfill-<10 digits>-<unix>`.
pub fn fire_id(name: &str, tick: DateTime<Utc>) -> String {
    format!("{name}-{}", tick.timestamp())
}

/// The request and the tick of a backfill fire id, if it has that form.
pub fn of_fire_id(fire_id: &str) -> Option<(&str, DateTime<Utc>)> {
    let (name, unix) = fire_id.rsplit_once('-')?;
    request_task(name)?;
    let tick = DateTime::from_timestamp(unix.parse().ok()?, 0)?;
    Some((name, tick))
}

/// Why a range cannot be backfilled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    #[error("--from {from} is not before --to {to}: the range [from, to) is empty")]
    Empty { from: String, to: String },
    #[error(
        "the range holds {count} ticks of the schedule, more than {max} (at most {max} ticks per \
         request): split it into several requests"
    )]
    TooMany { count: u64, max: u32 },
    #[error("the range holds no tick of the schedule {schedule}: nothing to run")]
    NoTicks { schedule: String },
}

/// The number of ticks of `schedule` in `[from, to)`, at most [`MAX_TICKS`] (else the count,
/// counted up to a million, in the error).
pub fn count_ticks(
    schedule: &Schedule,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<u32, RangeError> {
    if from >= to {
        return Err(RangeError::Empty {
            from: from.to_rfc3339(),
            to: to.to_rfc3339(),
        });
    }
    let count = schedule
        .ticks_after(from - TimeDelta::nanoseconds(1))
        .take_while(|tick| *tick < to)
        .take(1_000_000)
        .count() as u64;
    if count > u64::from(MAX_TICKS) {
        return Err(RangeError::TooMany {
            count,
            max: MAX_TICKS,
        });
    }
    if count == 0 {
        return Err(RangeError::NoTicks {
            schedule: schedule.expression().to_string(),
        });
    }
    Ok(count as u32)
}

/// Whether the leader may claim `tick` of the request `record` (`None`: gone). `running_lost`:
/// the node of its running tick is gone.
pub fn admit(
    leads: bool,
    record: Option<&BackfillRecord>,
    tick: DateTime<Utc>,
    running_lost: bool,
) -> Verdict {
    if !leads {
        return Verdict::Refuse(ClaimOutcome::NotLeader);
    }
    let refuse = Verdict::Refuse(ClaimOutcome::AlreadyClaimed {
        record: record.and_then(|r| r.done).unwrap_or(tick),
    });
    let Some(record) = record else {
        return refuse;
    };
    let busy = record.running.is_some() && !running_lost;
    if record.state != BackfillState::Active
        || busy
        || record.claimed >= record.total
        || record.done.is_some_and(|done| done >= tick)
        || tick < record.from
        || tick >= record.to
    {
        return refuse;
    }
    Verdict::Admit
}

/// Who claims a tick: the node and its ZooKeeper session (hex), if any.
#[derive(Debug, Clone, Copy)]
pub struct Claimer<'a> {
    pub node: &'a str,
    pub session: Option<&'a str>,
}

/// `record` once `by` claimed `tick` (admitted by [`admit`]) at `now`; a running tick of a
/// lost node counts as failed.
pub fn claimed(
    record: &BackfillRecord,
    name: &str,
    tick: DateTime<Utc>,
    by: Claimer<'_>,
    now: DateTime<Utc>,
) -> BackfillRecord {
    let mut new = record.clone();
    if new.running.is_some() {
        new = lost(&new, name, now);
    }
    new.done = Some(tick);
    new.claimed += 1;
    new.running = Some(BackfillRun {
        tick,
        node: by.node.to_string(),
        session: by.session.map(str::to_string),
        claimed_at: now,
    });
    new
}

/// `record` once its running tick ended as `entry` says (`reason`: why it failed without an
/// exit code or signal); unchanged if that tick is not the running one (ended already).
pub fn ended(
    record: &BackfillRecord,
    entry: &HistoryEntry,
    reason: Option<&str>,
    now: DateTime<Utc>,
) -> BackfillRecord {
    let mut new = record.clone();
    if new.running.as_ref().map(|r| r.tick) != Some(entry.tick) {
        return new;
    }
    new.running = None;
    if entry.success {
        new.succeeded += 1;
    } else {
        let how = match (entry.exit_code, entry.signal, reason) {
            (Some(code), _, _) => format!("exit code {code}"),
            (None, Some(signal), _) => format!("killed by signal {signal}"),
            (None, None, Some(reason)) => reason.to_string(),
            (None, None, None) => "failed".to_string(),
        };
        fail(&mut new, &entry.fire_id, &how);
    }
    finish_if_done(&mut new, now);
    new
}

/// `record` once the node of its running tick was found gone: that tick failed and is not
/// run again.
pub fn lost(record: &BackfillRecord, name: &str, now: DateTime<Utc>) -> BackfillRecord {
    let mut new = record.clone();
    if let Some(run) = new.running.take() {
        let how = format!(
            "node {} was lost while running it (not run again)",
            run.node
        );
        fail(&mut new, &fire_id(name, run.tick), &how);
    }
    finish_if_done(&mut new, now);
    new
}

/// Whether an ended request is to be deleted at `now`.
pub fn expired(record: &BackfillRecord, now: DateTime<Utc>) -> bool {
    record.state != BackfillState::Active
        && record.running.is_none()
        && record
            .ended_at
            .is_some_and(|ended| (now - ended).to_std().is_ok_and(|age| age >= KEEP_ENDED))
}

fn fail(record: &mut BackfillRecord, fire_id: &str, how: &str) {
    record.failed += 1;
    record.failures.push(format!("{fire_id}: {how}"));
    if record.failures.len() > FAILURES_KEPT {
        record.failures.remove(0);
    }
}

fn finish_if_done(record: &mut BackfillRecord, now: DateTime<Utc>) {
    if record.state == BackfillState::Active
        && record.running.is_none()
        && record.claimed >= record.total
    {
        record.state = BackfillState::Done;
        record.ended_at = Some(now);
    }
}

/// The paths of backfill requests.
impl Paths {
    pub fn backfills(&self) -> String {
        format!("{}/control/backfills", self.base)
    }
    pub fn backfill(&self, name: &str) -> String {
        format!("{}/control/backfills/{name}", self.base)
    }
    /// The prefix `zkcron backfill` creates a sequential request znode with.
    pub fn backfill_prefix(&self, task: &str) -> String {
        format!("{}/control/backfills/{task}@backfill-", self.base)
    }
}

#[cfg(test)]
mod tests;
