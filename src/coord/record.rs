//! The fire-record rules, once for every backend: admit a claim, admit a rerun, detect an
//! orphan, decide which result supersedes, and which tasks a node may lead.
//!
//! Pure functions over [`FireView`], a backend-neutral view of one task's fire record and what
//! the backend knows around it. No I/O, no clock: the backend reads its records (a ZooKeeper
//! read, the local journal's mirror), fills in a view, asks, and then performs the write its own
//! way (a fenced multi-op, a durable journal line). The answer is the same on every backend.
//!
//! # Filling in a view
//! | field | ZooKeeper backend | local backend |
//! |---|---|---|
//! | `record` | `tasks/<task>`'s `tick` | `TaskRecord::last_claimed` |
//! | `claimed_to_run` | `tasks/<task>`'s `run` | `TaskRecord::claimed_to_run` |
//! | `result` | `tasks/<task>/result`'s `tick` | `TaskRecord::last_result`'s tick |
//! | `leads` | the lease is held in the current session and the node is not paused | the task is published (and [`eligible`]) and not released |
//! | `run_live` | `tasks/<task>/run-<unix>` of the record's tick exists (owned by a live session), or is this node's own | this process runs that tick |
//! | `claimer_alive` | the record's `session` is a live session | this process made the claim |
//!
//! A backend may learn part of a view only inside its atomic write: the ZooKeeper claim checks
//! the lease (by version) and creates the run znode in the same multi-op, so the driver fills
//! in what it last saw and lets a failed check of the multi-op stand for the refusal the rules
//! would give ([`ClaimOutcome::NotLeader`] for the lease, [`ClaimOutcome::AlreadyClaimed`] for
//! the record or an existing run znode). The rules never admit what the write would refuse.
//!
//! # The rules
//! - **Claim**: only while the node leads the task ([`ClaimOutcome::NotLeader`] otherwise, first),
//!   and only for a tick newer than the record ([`ClaimOutcome::AlreadyClaimed`] with the record).
//! - **Orphan**: the record's tick was claimed to run, no result of that tick or a later one is
//!   stored, no run of it is live and the node that claimed it is gone: that node died mid-run.
//! - **Rerun** (`on_node_loss = "rerun"`): admitted exactly when the node leads the task and the
//!   tick is the orphan. Anything else is refused with [`ClaimOutcome::AlreadyClaimed`]: the
//!   record's tick (or, with no record at all, the requested tick — nothing names it, and a tick
//!   nobody claimed is caught up by the planner, never rerun). Leading is the only reason for
//!   [`ClaimOutcome::NotLeader`]. (Before, the local backend answered `NotLeader` for a missing
//!   record, and the ZooKeeper backend admitted a rerun of a tick that had ended or was claimed
//!   to skip if asked.)
//! - **Result**: a result supersedes the stored one unless the stored one is of a newer tick; of
//!   two results of one tick the later written wins (the rerun's end after the lost run's, or a
//!   retried write). (Before, the local backend overwrote a newer result with an older one: with
//!   `overlap = "allow"` a long run of an early tick ending last hid the later tick's result.)
//! - **Eligible**: a disabled task is neither published nor led, on any backend: a node must
//!   not hold a lease for a task it will not fire, and "leading N of M tasks" counts what fires.
//!   (Before, the local backend counted disabled tasks as led.)
//! - **Manual run** (`zkcron trigger`): claimed only while the node leads the task
//!   ([`ClaimOutcome::NotLeader`] first) and only while the trigger is pending
//!   ([`ClaimOutcome::AlreadyClaimed`] with its request time otherwise): at most once, like a
//!   tick. It moves no fire record and is never caught up or rerun.
//! - **History**: a run is appended once (by fire id), the oldest dropped beyond the limit
//!   (`[scheduler] history_runs`) or beyond [`HISTORY_MAX_BYTES`] of JSON.
//! - **Ended triggers** are deleted [`TRIGGER_KEEP_ENDED`] after they ended.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::records::{FireRecord, HistoryEntry, TriggerRecord, TriggerState};
use super::{ClaimIntent, ClaimOutcome, RunResult};
use crate::plan::ledger::{self, TickEntry};
use crate::task::TaskSpec;

/// A task's stored history never exceeds this many bytes of JSON (the oldest runs go first).
pub const HISTORY_MAX_BYTES: usize = 256 * 1024;

/// `[scheduler] history_runs` when not set.
pub const DEFAULT_HISTORY_RUNS: usize = 100;

/// How long an ended trigger stays for `zkcron trigger --wait` and `status` to read.
pub const TRIGGER_KEEP_ENDED: Duration = Duration::from_secs(600);

/// What a backend knows about one task's fire record when it decides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FireView {
    /// The newest claimed tick (the fire record), if any.
    pub record: Option<DateTime<Utc>>,
    /// The claim of `record` was made to run the tick (not to skip it for overlap).
    pub claimed_to_run: bool,
    /// The tick of the stored result, if any.
    pub result: Option<DateTime<Utc>>,
    /// This node may fire the task now (holds its lease, not paused).
    pub leads: bool,
    /// A run of `record`'s tick is live, on any node the backend can see.
    pub run_live: bool,
    /// The node (session, process) that claimed `record`'s tick is still alive.
    pub claimer_alive: bool,
    /// The tick queued behind a live run (`overlap = "queue"`), if any.
    pub queued: Option<DateTime<Utc>>,
    /// The scheduled ticks claimed to run (or queued to) so far (`FireRecord::runs`).
    pub runs: u64,
    /// The task's `max_runs`, as the claiming node defines it.
    pub max_runs: Option<u32>,
}

/// A fire record's fields a won claim writes: the newest claimed tick, whether that claim was
/// made to run it, and the queued tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claimed {
    pub record: DateTime<Utc>,
    pub run: bool,
    pub queued: Option<DateTime<Utc>>,
    /// The count of scheduled ticks claimed to run, this one included.
    pub runs: u64,
}

/// The answer to a claim or a rerun before the backend writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Write the claim; the tick is this node's once the write succeeds.
    Admit,
    /// Do not write: this is the answer.
    Refuse(ClaimOutcome),
}

/// Whether `tick` may be claimed with `intent`: [`admit_queued`] to start the queued tick,
/// [`admit_claim`] for every other claim.
pub fn admit(view: &FireView, tick: DateTime<Utc>, intent: ClaimIntent) -> Verdict {
    match intent {
        ClaimIntent::RunQueued => admit_queued(view, tick),
        ClaimIntent::Note if view.leads => Verdict::Admit,
        ClaimIntent::Note => Verdict::Refuse(ClaimOutcome::NotLeader),
        _ => match admit_claim(view, tick) {
            Verdict::Admit if counts_a_run(intent) && is_done(view) => {
                Verdict::Refuse(ClaimOutcome::Done { runs: view.runs })
            }
            verdict => verdict,
        },
    }
}

/// The ledger entries (`plan::ledger`) of `old` after a won claim that carries `ticks`.
pub fn ledger_after(old: &FireRecord, ticks: &[TickEntry]) -> Vec<TickEntry> {
    if ticks.is_empty() {
        return old.ticks.clone();
    }
    ledger::merged(&old.ticks, &ledger::after(ticks, old.tick), old.tick)
}

/// The newest tick `record` accounts for: claimed, or not run and recorded in its ledger. A
/// planner starts after it.
pub fn accounted(record: &FireRecord) -> Option<DateTime<Utc>> {
    record.tick.max(ledger::accounted_through(&record.ticks))
}

/// Whether the queued `tick` may be started: the node leads the task and the record names
/// `tick` as queued. Otherwise it ran already (or a reset cleared it): refused as claimed.
pub fn admit_queued(view: &FireView, tick: DateTime<Utc>) -> Verdict {
    if !view.leads {
        return Verdict::Refuse(ClaimOutcome::NotLeader);
    }
    if view.queued == Some(tick) {
        Verdict::Admit
    } else {
        Verdict::Refuse(ClaimOutcome::AlreadyClaimed {
            record: view.record.unwrap_or(tick),
        })
    }
}

/// What an admitted claim of `tick` with `intent` writes over `view`'s record. A queued tick
/// survives every later claim (a dropped tick, or a tick run once no run was live) until it is
/// started; starting it keeps the record's tick and marks it claimed to run when it is the
/// record's own, so that `on_node_loss = "rerun"` sees it as any run.
pub fn claimed(view: &FireView, tick: DateTime<Utc>, intent: ClaimIntent) -> Claimed {
    let runs = view.runs + u64::from(view.max_runs.is_some() && counts_a_run(intent));
    match intent {
        ClaimIntent::RunQueued => Claimed {
            record: view.record.unwrap_or(tick),
            run: view.record == Some(tick) || view.claimed_to_run,
            queued: None,
            runs,
        },
        ClaimIntent::Queue => Claimed {
            record: tick,
            run: false,
            queued: Some(tick),
            runs,
        },
        // Only the ledger is written: the backends keep the record as it is.
        ClaimIntent::Note => Claimed {
            record: view.record.unwrap_or(tick),
            run: view.claimed_to_run,
            queued: view.queued,
            runs,
        },
        ClaimIntent::Run | ClaimIntent::Skip | ClaimIntent::Drop => Claimed {
            record: tick,
            run: intent == ClaimIntent::Run,
            queued: view.queued,
            runs,
        },
    }
}

/// Whether a won claim with `intent` counts against `max_runs` (of a task that has one: the
/// count starts when the task first has it): a tick claimed to run, or queued to run when the
/// live run ends (its start, `RunQueued`, was counted then). A rerun of a lost run is the same
/// tick: not counted again.
pub fn counts_a_run(intent: ClaimIntent) -> bool {
    matches!(intent, ClaimIntent::Run | ClaimIntent::Queue)
}

/// Whether the task has run its `max_runs` scheduled ticks: no claim to run another is
/// admitted (`ClaimOutcome::Done`).
pub fn is_done(view: &FireView) -> bool {
    view.max_runs.is_some_and(|max| view.runs >= u64::from(max))
}

/// Whether `tick` may be claimed.
pub fn admit_claim(view: &FireView, tick: DateTime<Utc>) -> Verdict {
    if !view.leads {
        return Verdict::Refuse(ClaimOutcome::NotLeader);
    }
    match view.record {
        Some(record) if record >= tick => Verdict::Refuse(ClaimOutcome::AlreadyClaimed { record }),
        _ => Verdict::Admit,
    }
}

/// The tick whose run was lost with its node (`on_node_loss = "rerun"` runs it again), if any.
pub fn orphan(view: &FireView) -> Option<DateTime<Utc>> {
    let tick = view.record.filter(|_| view.claimed_to_run)?;
    let ended = view.result.is_some_and(|result| result >= tick);
    (!ended && !view.run_live && !view.claimer_alive).then_some(tick)
}

/// The record's tick, when a claim of `tick` with `intent` moves past it while it was claimed
/// to run by a node that is gone with no result stored: lost with that node (the ledger's
/// `node_lost`, which the claim records). `view.result` must be read for it.
pub fn lost_with_its_node(
    view: &FireView,
    tick: DateTime<Utc>,
    intent: ClaimIntent,
) -> Option<DateTime<Utc>> {
    let moves = !matches!(intent, ClaimIntent::Note | ClaimIntent::RunQueued);
    let claimed = view.record.filter(|claimed| *claimed < tick && moves)?;
    let ended = view.result.is_some_and(|result| result >= claimed);
    (view.claimed_to_run && !view.claimer_alive && !view.run_live && !ended).then_some(claimed)
}

/// Whether `tick` may be claimed again to rerun it: the node leads and `tick` is the orphan.
pub fn admit_rerun(view: &FireView, tick: DateTime<Utc>) -> Verdict {
    if !view.leads {
        return Verdict::Refuse(ClaimOutcome::NotLeader);
    }
    if orphan(view) == Some(tick) {
        Verdict::Admit
    } else {
        Verdict::Refuse(ClaimOutcome::AlreadyClaimed {
            record: view.record.unwrap_or(tick),
        })
    }
}

/// Whether a result of `incoming` replaces the stored result of `stored` (`None`: none stored).
pub fn supersedes(stored: Option<DateTime<Utc>>, incoming: DateTime<Utc>) -> bool {
    stored.is_none_or(|stored| stored <= incoming)
}

/// Whether the manual run requested at `requested_at` may be claimed: the node leads the task
/// and the trigger is still `pending`.
pub fn admit_manual(leads: bool, pending: bool, requested_at: DateTime<Utc>) -> Verdict {
    if !leads {
        return Verdict::Refuse(ClaimOutcome::NotLeader);
    }
    if !pending {
        return Verdict::Refuse(ClaimOutcome::AlreadyClaimed {
            record: requested_at,
        });
    }
    Verdict::Admit
}

/// Trigger `record` once its run ended with `entry` (`reason`: why, when it did not end by
/// exiting); `None` when it has ended already (a retried end that had been applied, or a run
/// ended as lost).
pub fn trigger_ended(
    record: &TriggerRecord,
    entry: &HistoryEntry,
    reason: Option<&str>,
) -> Option<TriggerRecord> {
    (record.state != TriggerState::Ended).then(|| TriggerRecord {
        state: TriggerState::Ended,
        result: Some(entry.clone()),
        reason: reason.map(str::to_string),
        ..record.clone()
    })
}

/// The fire id of the `n`-th manual run of `task`: `<task>@manual-<10 digits>` (a scheduled
/// tick's is `<task>@<digits>`, so the two never collide).
pub fn manual_fire_id(task: &str, n: u64) -> String {
    format!("{task}@manual-{n:010}")
}

/// The task a manual fire id (a trigger znode's name) belongs to, if it has that form.
pub fn manual_task(fire_id: &str) -> Option<&str> {
    let (task, number) = fire_id.rsplit_once("@manual-")?;
    (number.len() == 10
        && number.bytes().all(|b| b.is_ascii_digit())
        && crate::task::is_valid_task_name(task))
    .then_some(task)
}

/// The fire id of the run of `child` that the run `parent_fire_id` of one of the tasks in its
/// `after` causes: `<child>@after-<parent's fire id>` (`load@after-extract@1767225600`). A
/// parent's fire id is unique per run (`<task>@<unix>`, `<task>@manual-<10 digits>`,
/// `<task>@backfill-<10 digits>-<unix>`, or one of the chained forms), so no two parent runs
/// map to one child run, and a task name has no `@`, so no other fire id has this form.
pub fn chain_fire_id(child: &str, parent_fire_id: &str) -> String {
    format!("{child}@after-{parent_fire_id}")
}

/// The fire id of the run of `child` that the item `item` of a pooled parent's run
/// `parent_fire_id` causes: `<child>@item-<item>@after-<parent's fire id>`
/// (`load@item-eu-west@after-extract@1767225600`). The nodes of a pooled tick share its fire
/// id but never an item, so each (parent run, item) has its own; the item comes first (an
/// item has no `@`), so no parent's fire id, chained or not, makes one of another form. It is
/// a valid znode name (task names and items match `[a-z0-9][a-z0-9._-]{0,99}`): at most 213
/// bytes besides the parent's fire id, and ZooKeeper bounds a name only by its request's size
/// (`jute.maxbuffer`, 1 MB).
pub fn chain_item_fire_id(child: &str, item: &str, parent_fire_id: &str) -> String {
    format!("{child}@item-{item}@after-{parent_fire_id}")
}

/// The child task and the parent's fire id of a fire id of [`chain_fire_id`]'s or
/// [`chain_item_fire_id`]'s form.
pub fn chain_of(fire_id: &str) -> Option<(&str, &str)> {
    let (child, rest) = fire_id.split_once('@')?;
    let parent = match rest.strip_prefix("item-") {
        Some(rest) => {
            let (item, parent) = rest.split_once("@after-")?;
            crate::task::is_valid_task_name(item).then_some(parent)?
        }
        None => rest.strip_prefix("after-")?,
    };
    (crate::task::is_valid_task_name(child) && parent.contains('@')).then_some((child, parent))
}

/// The parent's work item of a fire id of [`chain_item_fire_id`]'s form (the run's
/// `ZKCRON_AFTER_ITEM`).
pub fn chain_item(fire_id: &str) -> Option<&str> {
    chain_of(fire_id)?;
    let (_, rest) = fire_id.split_once('@')?;
    Some(rest.strip_prefix("item-")?.split_once('@')?.0)
}

/// The requests of the runs that `task`'s run that ended with `result` causes (`after`): for a
/// success, each chained task's trigger, pending, asked `by`, named by [`chain_fire_id`], or
/// for a pooled run by [`chain_item_fire_id`], one per item of `result.items`.
pub fn chained_requests(task: &str, result: &RunResult, by: &str) -> Vec<(String, TriggerRecord)> {
    if !result.success {
        return Vec::new();
    }
    let parent = result.fire_id_of(task);
    let record = |child: &str| TriggerRecord {
        after: Some(parent.clone()),
        ..TriggerRecord::pending(child, by, result.tick)
    };
    let mut requests = Vec::new();
    for child in &result.chained {
        if result.items.is_empty() {
            requests.push((chain_fire_id(child, &parent), record(child)));
        }
        for item in &result.items {
            let name = chain_item_fire_id(child, item, &parent);
            requests.push((name, record(child)));
        }
    }
    requests
}

/// The task of a trigger's name: a manual run's or a chained run's.
pub fn trigger_task(name: &str) -> Option<&str> {
    match chain_of(name) {
        Some((child, _)) => Some(child),
        None => manual_task(name),
    }
}

/// Appends `entry` to `runs` (oldest first) unless its fire id is there already; then drops
/// the oldest beyond `limit` runs and beyond [`HISTORY_MAX_BYTES`] of JSON. Returns whether
/// `runs` changed.
pub fn append_history(runs: &mut Vec<HistoryEntry>, entry: HistoryEntry, limit: usize) -> bool {
    if runs.iter().any(|run| run.fire_id == entry.fire_id) {
        return false;
    }
    runs.push(entry);
    let limit = limit.max(1);
    if runs.len() > limit {
        runs.drain(..runs.len() - limit);
    }
    // The record's JSON is its runs' plus a small envelope (`{"format":1,"runs":[...]}`).
    let size = |run: &HistoryEntry| serde_json::to_vec(run).map_or(0, |b| b.len() + 1);
    let mut total: usize = 32 + runs.iter().map(size).sum::<usize>();
    while total > HISTORY_MAX_BYTES && runs.len() > 1 {
        total -= size(&runs.remove(0));
    }
    true
}

/// Whether a trigger that ended at `ended_at` is to be deleted at `now`.
pub fn trigger_expired(ended_at: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    (now - ended_at)
        .to_std()
        .is_ok_and(|age| age >= TRIGGER_KEEP_ENDED)
}

/// Whether a node that defines `task` may lead it (publishes it as one it can run).
pub fn eligible(task: &TaskSpec) -> bool {
    task.enabled
}

#[cfg(test)]
mod tests;
