//! The embedded single-node backend: this node leads every task it defines (that is enabled),
//! and fire records live in `state_dir`. Whether a claim, a rerun or a result is admitted, and
//! what counts as an orphan, is decided by [`super::record`], the rules both backends share.
//!
//! Files: `local.rs` the backend and the operator's [`StateDirEditor`]; `change.rs` a journal
//! line and how it applies; `state.rs` the lock, the
//! reading and replay of the state files, formats and damage; `journal.rs` the writer thread
//! and `queue.rs` the changes on their way to it; `errors.rs` I/O errors in the operator's words;
//! `pause.rs` the paused tasks (`paused.json`); `requests.rs` the operator's requests, every
//! kind in one store (manual and chained runs: `triggers.json`; backfills: `backfills.json`);
//! `history.rs` run history (`history/<task>.json`).
//! Requests, pauses, resumes and ends are timed on the [`Clock`] it is opened with (the
//! daemon's); the writer thread's own batching runs on the system's monotonic clock.
//!
//! Records are kept in memory and made durable in an append-only journal,
//! `<state_dir>/journal.jsonl`, one JSON line per change (a claim or a result). A claim returns only
//! after its line is on disk (`fdatasync`); a result once its line is written, and it is synced
//! with the next claim or within a second (`journal.rs`). One writer thread does all writes and commits every
//! change that arrives while the previous batch was being synced in one batch: a second's burst
//! of 200 claims costs one sync instead of 200 file-and-directory syncs (measured: 0.24 ms
//! against ~350 ms, see docs/BENCHMARKS.md).
//!
//! A failed append (a full disk, an I/O error) fails every change of its batch, and the journal is
//! cut back to the end of its last durable record before anything else is appended: a failed
//! claim leaves the journal exactly as it was, and a record never follows the torn rest of
//! another. If even cutting back fails, nothing is appended (every claim fails, so no tick runs)
//! until it succeeds. A full disk is reported with its fix ("state_dir ... is full: free space on
//! ...").
//!
//! When the journal grows past [`COMPACT_AFTER`] lines the writer writes the whole state to
//! `<state_dir>/snapshot.json` (temp file, fsync, rename, directory fsync) and empties the
//! journal. Replaying a journal over a snapshot is idempotent (claims and results only move
//! forward, by the rules of [`super::record`]), so a crash at any point leaves a readable state. Replay counts a line
//! only with its newline: an unfinished last line (a crash mid-write) was never acknowledged and
//! is dropped, with one warning that shows what was dropped. A line that begins with the torn rest of a failed write and ends in a good record
//! (what releases before the cut-back rule left after a full disk) yields that record. A corrupt
//! snapshot or journal line is reported, moved aside, and the node continues without those
//! records.
//!
//! Every state file names its `format`. A file in a format this release does not read (written by
//! a newer release) is refused with the file, the format and the fix, and the daemon does not
//! start: read as format 1 it could lose fire records, and a lost record runs ticks twice.
//!
//! A lock file (`flock`) keeps two daemons off one state dir: they would both fire every tick.
//! The operator command `zkcron reset` takes the same lock ([`StateDirEditor`]), so it only
//! runs while the daemon is stopped.

mod change;
mod errors;
mod history;
mod journal;
mod pause;
mod queue;
mod requests;
mod state;

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use nix::fcntl::Flock;
use serde::{Deserialize, Serialize};
use tokio::sync::{oneshot, watch};

use super::backfill::BackfillRecord;
use super::operator;
use super::record::{self, FireView, Verdict};
use super::records::{HistoryEntry, TriggerRecord};
use super::{ClaimIntent, ClaimOutcome, CoordError, Coordinator, Leadership, RunResult, Trigger};
use crate::clock::Clock;
use crate::plan::ledger::{self, TickEntry};
use crate::task::TaskSpec;
use change::Change;
pub(crate) use errors::not_writable_fix;
use journal::{Gather, JournalWriter};
pub use pause::PauseMark;
use queue::{Batching, Durability, PendingWrite};
use state::{open_state, read_state, state_io};

/// The state format this release writes; readers ignore fields they do not know.
const FORMAT_VERSION: u32 = 1;

/// The journal is folded into the snapshot after this many lines.
pub const COMPACT_AFTER: usize = 100_000;

const JOURNAL: &str = "journal.jsonl";
const SNAPSHOT: &str = "snapshot.json";
/// The record of one task.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct TaskRecord {
    /// The newest claimed tick.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_claimed: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_result: Option<Box<RunResult>>,
    /// The newest claim was made to run (not to skip).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    claimed_to_run: bool,
    /// The tick queued behind a live run (`overlap = "queue"`), until it is started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    queued: Option<DateTime<Utc>>,
    /// The newest queued tick started: a journal replayed over a snapshot that has it started
    /// does not queue it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    queue_started: Option<DateTime<Utc>>,
    /// The newest ticks not run, and why (`plan::ledger`), as a fire record keeps them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    ticks: Vec<TickEntry>,
    /// The scheduled ticks claimed to run (or queued to), as a fire record counts them.
    #[serde(default, skip_serializing_if = "is_zero")]
    runs: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The snapshot file: every task's record.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Snapshot {
    format: u32,
    #[serde(default)]
    tasks: HashMap<String, TaskRecord>,
}

/// The embedded backend.
pub struct LocalCoordinator {
    /// The current records, each behind its own lock: a claim holds its task's lock from the
    /// check until its change is durable, so two claims of one tick cannot both win, while
    /// claims of different tasks wait for the disk together (and share one sync).
    records: Mutex<HashMap<String, Arc<tokio::sync::Mutex<TaskRecord>>>>,
    writer: queue::Pusher,
    leadership: watch::Sender<Leadership>,
    /// Ticks claimed to run by this process whose end is not recorded yet.
    live_runs: Mutex<HashSet<(String, DateTime<Utc>)>>,
    /// The operator's requests: manual and chained runs, backfills.
    requests: requests::Requests,
    /// Run histories, written behind the runs.
    history: history::HistoryFiles,
    /// Held for the life of the backend; dropping it releases the state dir.
    _lock: Flock<File>,
    state_dir: std::path::PathBuf,
    /// The paused tasks (`paused.json`, see `pause.rs`), and the lock of their writer.
    paused: Mutex<std::collections::BTreeMap<String, PauseMark>>,
    pausing: tokio::sync::Mutex<()>,
    /// Where requests, pauses, resumes and ends are timed: the daemon's clock.
    clock: Clock,
    /// The `max_runs` of the tasks published that have one.
    max_runs: Mutex<HashMap<Arc<str>, u32>>,
}

impl LocalCoordinator {
    /// Opens (creating if needed) the state dir, takes its lock and reads the records; times
    /// what it stores on `clock`.
    pub fn open(state_dir: &Path, clock: Clock) -> Result<LocalCoordinator, CoordError> {
        let now = clock.now();
        let (lock, journal_writer) = open_state(
            state_dir,
            "two daemons on one state dir would both fire every tick: stop the other one or give \
             this one its own --state-dir",
            now,
        )?;
        let records = journal_writer.mirror.clone();
        let paused = pause::read_paused(state_dir)?;
        let requests = requests::Requests::open(state_dir, now)?;
        let history = history::HistoryFiles::open(state_dir).map_err(|source| CoordError::Io {
            context: "cannot start the history writer".into(),
            error: source,
        })?;
        let queue = Arc::new(queue::Queue::default());
        let writer = queue::Pusher(queue.clone());
        std::thread::Builder::new()
            .name("zkcron-journal".into())
            .spawn(move || journal_writer.run(&queue, Gather::DEFAULT))
            .map_err(|source| CoordError::Io {
                context: "cannot start the journal writer".into(),
                error: source,
            })?;

        let (leadership, _) = watch::channel(Leadership {
            paused_tasks: Arc::new(paused.keys().cloned().collect()),
            ..Leadership::default()
        });
        let records = records
            .into_iter()
            .map(|(task, record)| (task, Arc::new(tokio::sync::Mutex::new(record))))
            .collect();
        Ok(LocalCoordinator {
            records: Mutex::new(records),
            writer,
            leadership,
            live_runs: Mutex::new(HashSet::new()),
            max_runs: Mutex::new(HashMap::new()),
            requests,
            history,
            _lock: lock,
            state_dir: state_dir.to_path_buf(),
            paused: Mutex::new(paused),
            pausing: tokio::sync::Mutex::new(()),
            clock,
        })
    }

    /// The clock this backend times what it stores on (the daemon's).
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Keeps `runs` runs per task in the history (`[scheduler] history_runs`; default 100).
    pub fn with_history_runs(mut self, runs: usize) -> LocalCoordinator {
        self.history.set_history_runs(runs);
        self
    }

    /// Asks for a manual run of `task` now (`zkcron trigger`): a pending trigger, durable when
    /// this returns, that the daemon runs once ([`Leadership::triggers`]). Refused for a task
    /// this daemon does not fire (not defined, or disabled). A paused task's trigger runs.
    pub fn request_trigger(&self, task: &str, by: &str) -> Result<Trigger, CoordError> {
        if !self.leadership.borrow().tasks.contains(task) {
            return Err(CoordError::Refused(format!(
                "task {task} is not defined on this host (or is disabled): nothing would run it; `zkcron next` lists the tasks"
            )));
        }
        let now = self.clock.now();
        let fire_id = self
            .requests
            .request(operator::trigger(task, by, now).into(), now)?;
        self.refresh_triggers();
        Ok(Trigger {
            fire_id,
            requested_at: now,
        })
    }

    /// A manual run's trigger as stored (pending, running or ended with its result), while it
    /// is kept (ended ones for 10 minutes).
    pub fn trigger_state(&self, fire_id: &str) -> Option<TriggerRecord> {
        self.requests.trigger(fire_id)
    }

    /// Stores a new backfill request (`zkcron backfill`; its range checked and counted by the
    /// caller), durable when this returns; its name. Refused for a task this daemon does not
    /// fire.
    pub fn request_backfill(&self, record: BackfillRecord) -> Result<String, CoordError> {
        if !self
            .leadership
            .borrow()
            .tasks
            .contains(record.task.as_str())
        {
            return Err(CoordError::Refused(format!(
                "task {} is not defined on this host (or is disabled): nothing would run its backfill; `zkcron next` lists the tasks",
                record.task
            )));
        }
        let name = self.requests.request(record.into(), self.clock.now())?;
        self.refresh_triggers();
        Ok(name)
    }

    /// Every backfill request kept (ended ones for a week), by name.
    pub fn backfills(&self) -> BTreeMap<String, BackfillRecord> {
        self.requests.backfills()
    }

    /// Cancels the backfill `name` (its running tick finishes); the record as it was before,
    /// `None` if there is none.
    pub fn cancel_backfill(
        &self,
        name: &str,
        by: &str,
    ) -> Result<Option<BackfillRecord>, CoordError> {
        let record = self.requests.cancel(name, by, self.clock.now())?;
        self.refresh_triggers();
        Ok(record)
    }

    /// The last `n` runs of `task`, newest first.
    pub fn history(&self, task: &str, n: usize) -> Vec<HistoryEntry> {
        self.history.history(task, n)
    }

    /// The tasks that have a history (runs held in memory or a file), for `status`.
    pub fn tasks_with_history(&self) -> HashSet<String> {
        self.history.tasks_with_history()
    }

    /// Writes the histories of the runs that ended lately now, instead of within
    /// `history::FLUSH_AFTER` (the daemon's exit; dropping the backend does it too).
    pub fn flush_history(&self) {
        self.history.flush();
    }

    /// Publishes the pending triggers and backfills of the tasks this backend leads.
    /// The host's name, which names this node in trigger records.
    fn host(&self) -> String {
        nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "localhost".into())
    }

    fn refresh_triggers(&self) {
        let tasks = self.leadership.borrow().tasks.clone();
        let requests::Pending { runs, backfills } = self.requests.pending(&tasks);
        let (pending, backfills) = (Arc::new(runs), Arc::new(backfills));
        self.leadership.send_if_modified(|l| {
            if l.triggers == pending && l.backfills == backfills {
                return false;
            }
            l.triggers = pending;
            l.backfills = backfills;
            true
        });
    }

    fn live_runs_mut(&self) -> std::sync::MutexGuard<'_, HashSet<(String, DateTime<Utc>)>> {
        self.live_runs.lock().expect("live runs lock poisoned")
    }

    /// `record` as the shared rules see it ([`record`]'s table says how each backend fills it
    /// in). A run of the record's tick is live, and its claimer alive, exactly when this
    /// process claimed it and has not recorded its end: the only node is this one, and a claim
    /// by an earlier life of the daemon has no process left.
    fn view(&self, task: &str, record: &TaskRecord) -> FireView {
        let own = record
            .last_claimed
            .is_some_and(|tick| self.live_runs_mut().contains(&(task.to_string(), tick)));
        FireView {
            record: record.last_claimed,
            claimed_to_run: record.claimed_to_run,
            result: record.last_result.as_ref().map(|r| r.tick),
            leads: self.leadership.borrow().may_fire(task),
            run_live: own,
            claimer_alive: own,
            queued: record.queued,
            runs: record.runs,
            max_runs: self
                .max_runs
                .lock()
                .expect("max_runs lock poisoned")
                .get(task)
                .copied(),
        }
    }

    /// The task's record if it has one. Reads use this, so that asking about 10,000 tasks
    /// that never fired (every start-up does) adds no record, no lock and no key per task.
    fn existing(&self, task: &str) -> Option<Arc<tokio::sync::Mutex<TaskRecord>>> {
        self.records
            .lock()
            .expect("records lock poisoned")
            .get(task)
            .cloned()
    }

    /// The task's record, made empty if it has none; for writes.
    fn slot(&self, task: &str) -> Arc<tokio::sync::Mutex<TaskRecord>> {
        self.records
            .lock()
            .expect("records lock poisoned")
            .entry(task.to_string())
            .or_default()
            .clone()
    }

    /// Writes `change` (synced or only written, per `durability`; gathered with others or at
    /// once, per `batching`), then applies it to `record`.
    async fn commit(
        &self,
        change: Change,
        durability: Durability,
        batching: Batching,
        record: &mut TaskRecord,
    ) -> Result<(), CoordError> {
        let (durable, done) = oneshot::channel();
        let failed = |detail: String| CoordError::Io {
            context: format!(
                "cannot record the change of task {} in the journal",
                change.task
            ),
            error: io::Error::other(detail),
        };
        self.writer
            .0
            .push(PendingWrite {
                change: change.clone(),
                durability,
                batching,
                durable,
            })
            .map_err(|_| failed("the journal writer has stopped".into()))?;
        // Only a record on disk counts: if the write failed we do not know whether it reached the
        // disk, and running would risk a second run after a restart.
        done.await
            .map_err(|_| failed("the journal writer has stopped".into()))?
            .map_err(failed)?;
        change.apply_to(record);
        Ok(())
    }
}

/// The state dir held by an operator command while no daemon runs on it (`zkcron reset`): the
/// daemon's lock, and the records read as the daemon reads them.
pub struct StateDirEditor {
    writer: JournalWriter,
    _lock: Flock<File>,
}

impl StateDirEditor {
    /// Takes the state dir's lock, failing with [`CoordError::Busy`] while a daemon holds it (a
    /// running daemon keeps its records in memory and would overwrite the change), and reads
    /// the records.
    /// A damaged file found is kept under a name stamped with `now`.
    pub fn open(state_dir: &Path, now: DateTime<Utc>) -> Result<StateDirEditor, CoordError> {
        let (lock, writer) = open_state(
            state_dir,
            "a running daemon keeps its fire records in memory and would not see the change: stop \
             it first (e.g. systemctl stop zkcron), run this again, then start it",
            now,
        )?;
        Ok(StateDirEditor {
            writer,
            _lock: lock,
        })
    }

    /// The newest claimed tick of `task`, if any.
    pub fn last_claimed(&self, task: &str) -> Option<DateTime<Utc>> {
        self.writer.mirror.get(task).and_then(|r| r.last_claimed)
    }

    /// The tasks that have a fire record.
    pub fn tasks(&self) -> impl Iterator<Item = &str> {
        self.writer
            .mirror
            .iter()
            .filter(|(_, record)| record.last_claimed.is_some())
            .map(|(task, _)| task.as_str())
    }

    /// Sets `task`'s fire record to `tick` and writes it durably (a new snapshot). Unlike a claim
    /// this may move the record back: it is the operator's decision that ticks after `tick` have
    /// not run. `tick` counts as consumed, not as claimed to run, so `on_node_loss = "rerun"`
    /// does not run it. A stored result of a tick after `tick` goes too: it would make a run of
    /// a tick before it that a crash cuts short look ended, so `rerun` would not run it again.
    pub fn set_fire_record(&mut self, task: &str, tick: DateTime<Utc>) -> Result<(), CoordError> {
        let previous = self.writer.mirror.get(task).cloned();
        let record = self.writer.mirror.entry(task.to_string()).or_default();
        record.last_claimed = Some(tick);
        record.claimed_to_run = false;
        if record.last_result.as_ref().is_some_and(|r| r.tick > tick) {
            record.last_result = None;
        }
        self.writer.compact().map_err(|error| {
            match previous {
                Some(previous) => self.writer.mirror.insert(task.to_string(), previous),
                None => self.writer.mirror.remove(task),
            };
            state_io(
                &self.writer.state_dir,
                format!(
                    "cannot write the snapshot in {}",
                    self.writer.state_dir.display()
                ),
                error,
            )
        })
    }
}

impl LocalCoordinator {
    /// `task`'s record as a cluster's fire record says it: the newest claimed tick, the queued
    /// one and the ticks not run (`plan::ledger`); `None` before its first claim.
    pub async fn fire_record(&self, task: &str) -> Option<super::records::FireRecord> {
        let slot = self.existing(task)?;
        let record = slot.lock().await;
        let mut fire = super::records::FireRecord::empty();
        fire.tick = record.last_claimed;
        fire.run = record.claimed_to_run;
        fire.queued = record.queued;
        fire.ticks = record.ticks.clone();
        fire.runs = record.runs;
        (fire.tick.is_some() || !fire.ticks.is_empty()).then_some(fire)
    }

    /// The backend's clock's now.
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// A claim (see [`Coordinator::claim_noting`]): decided under the task's lock, answered once
    /// its journal line is synced.
    async fn claim_carrying(
        &self,
        task: &str,
        tick: DateTime<Utc>,
        intent: ClaimIntent,
        ticks: Vec<TickEntry>,
    ) -> Result<ClaimOutcome, CoordError> {
        let slot = self.slot(task);
        let mut record = slot.lock().await;
        let view = self.view(task, &record);
        if let Verdict::Refuse(outcome) = record::admit(&view, tick, intent) {
            return Ok(outcome);
        }
        let claimed = record::claimed(&view, tick, intent);
        let queued = intent == ClaimIntent::RunQueued;
        let noting = intent == ClaimIntent::Note;
        // Claimed to run by an earlier life of this daemon that never recorded its end.
        let mut ticks = ticks;
        if let Some(lost) = record::lost_with_its_node(&view, tick, intent) {
            ticks.insert(0, TickEntry::one(lost, ledger::Reason::NodeLost));
        }
        let change = Change {
            format: FORMAT_VERSION,
            task: task.to_string(),
            claimed: (!queued && !noting).then_some(claimed.record),
            result: None,
            run: claimed.run,
            queue: (intent == ClaimIntent::Queue).then_some(tick),
            unqueue: queued.then_some(tick),
            ticks,
            counted: claimed.runs > view.runs,
        };
        // The start of a queued tick is a claim its process waits for: committed at once.
        let batching = if queued {
            Batching::AtOnce
        } else {
            Batching::Gather
        };
        self.commit(change, Durability::Synced, batching, &mut record)
            .await?;
        if intent.runs() {
            self.live_runs_mut().insert((task.to_string(), tick));
        }
        Ok(ClaimOutcome::Claimed)
    }
}

/// Each task's fire record (its newest claimed tick) as `state_dir` says now, read without the
/// lock and changing nothing: for `zkcron next` beside a running daemon. A change being written
/// at this moment may be missed; a file in a format this release does not read is an error.
pub fn read_fire_records(state_dir: &Path) -> Result<HashMap<String, DateTime<Utc>>, CoordError> {
    Ok(read_state(state_dir)?
        .records
        .into_iter()
        .filter_map(|(task, record)| Some((task, record.last_claimed?)))
        .collect())
}

impl Coordinator for LocalCoordinator {
    async fn publish<T: Borrow<TaskSpec> + Sync>(&self, tasks: &[T]) -> Result<(), CoordError> {
        let names = || {
            tasks
                .iter()
                .map(Borrow::borrow)
                .filter(|t| record::eligible(t))
                .map(|t| &t.name)
        };
        // The same names (a reload that changed tasks but added or removed none): the same
        // set, and no change to tell, so that nobody compares 100,000 names again.
        let limited = tasks
            .iter()
            .map(Borrow::borrow)
            .filter_map(|t: &TaskSpec| Some((Arc::clone(&t.name), t.extras.max_runs?)))
            .collect();
        *self.max_runs.lock().expect("max_runs lock poisoned") = limited;
        self.leadership.send_if_modified(|l| {
            if same_names(&l.tasks, names()) {
                return false;
            }
            l.tasks = Arc::new(names().cloned().collect());
            true
        });
        self.refresh_triggers();
        Ok(())
    }

    fn leadership(&self) -> watch::Receiver<Leadership> {
        self.leadership.subscribe()
    }

    async fn last_claimed(&self, task: &str) -> Result<Option<DateTime<Utc>>, CoordError> {
        Ok(match self.existing(task) {
            Some(slot) => {
                let record = slot.lock().await;
                record
                    .last_claimed
                    .max(ledger::accounted_through(&record.ticks))
            }
            None => None,
        })
    }

    async fn claim_noting(
        &self,
        task: &str,
        tick: DateTime<Utc>,
        intent: ClaimIntent,
        ticks: Vec<TickEntry>,
    ) -> Result<super::ClaimedShare, CoordError> {
        Ok((self.claim_carrying(task, tick, intent, ticks).await?, None))
    }

    async fn orphaned_tick(&self, task: &str) -> Result<Option<DateTime<Utc>>, CoordError> {
        // Claimed to run by an earlier life of this daemon, which never recorded its end.
        Ok(match self.existing(task) {
            Some(slot) => record::orphan(&self.view(task, &*slot.lock().await)),
            None => record::orphan(&self.view(task, &TaskRecord::default())),
        })
    }

    async fn reclaim(&self, task: &str, tick: DateTime<Utc>) -> Result<ClaimOutcome, CoordError> {
        let slot = self.slot(task);
        let mut record = slot.lock().await;
        if let Verdict::Refuse(outcome) = record::admit_rerun(&self.view(task, &record), tick) {
            return Ok(outcome);
        }
        // Live from here (under the task's lock): a second rerun of the tick is refused.
        self.live_runs_mut().insert((task.to_string(), tick));
        let change = Change {
            claimed: Some(tick),
            run: true,
            ..Change::of(task)
        };
        if let Err(error) = self
            .commit(change, Durability::Synced, Batching::Gather, &mut record)
            .await
        {
            self.live_runs_mut().remove(&(task.to_string(), tick));
            return Err(error);
        }
        Ok(ClaimOutcome::Claimed)
    }

    async fn runs_elsewhere(&self, _task: &str) -> Result<usize, CoordError> {
        Ok(0)
    }

    async fn queued_tick(&self, task: &str) -> Result<Option<DateTime<Utc>>, CoordError> {
        Ok(match self.existing(task) {
            Some(slot) => slot.lock().await.queued,
            None => None,
        })
    }

    async fn runs_ended_elsewhere(&self, _task: &str) -> Result<(), CoordError> {
        // The only node is this one.
        Ok(())
    }

    async fn run_ended(&self, task: &str, result: &RunResult) -> Result<(), CoordError> {
        let entry = HistoryEntry::of_run(task, result, env!("CARGO_PKG_VERSION"));
        let chained = record::chained_requests(task, result, &format!("zkcron@{}", self.host()));
        // A failed run's pause is durable before its end is stored (paused.json is a file of its
        // own: no single write holds both): a crash between leaves the task paused with the
        // run's end unknown, never a stored failure with the task firing.
        if let Some(mark) = &result.pause {
            self.pause_for_failure(task, result, (**mark).clone())
                .await?;
        }
        if result.manual && !entry.backfill {
            // No fire record, no `result`: the trigger (and the chained runs' requests, in
            // the same write) and the history.
            self.history.append(task, entry.clone());
            let ended = self.requests.end(&entry, result, chained, self.clock.now());
            self.refresh_triggers();
            return ended;
        }
        // The chained runs' requests are durable before the end is stored: a crash between
        // leaves a run whose end is unknown (on_node_loss), and a rerun that succeeds finds
        // its requests made.
        if !chained.is_empty() {
            self.requests.request_chained(chained)?;
            self.refresh_triggers();
        }
        if entry.backfill {
            // No fire record, no `result`: the backfill request and the history.
            self.history.append(task, entry.clone());
            let ended = self
                .requests
                .end(&entry, result, Vec::new(), self.clock.now());
            self.refresh_triggers();
            return ended;
        }
        let outcome = self.record_result(task, result).await;
        self.history.append(task, entry);
        outcome
    }

    async fn claim_manual(
        &self,
        task: &str,
        trigger: &Trigger,
    ) -> Result<ClaimOutcome, CoordError> {
        let leads = {
            let l = self.leadership.borrow();
            !l.paused && l.tasks.contains(task)
        };
        let node = self.host();
        // A paused task's backfill waits; its manual runs run.
        let backfill = super::backfill::of_fire_id(&trigger.fire_id).is_some();
        let leads = leads && !(backfill && self.leadership.borrow().paused_tasks.contains(task));
        let outcome = self
            .requests
            .claim(task, trigger, leads, &node, self.clock.now())?;
        self.refresh_triggers();
        Ok(outcome)
    }

    async fn last_result(&self, task: &str) -> Result<Option<RunResult>, CoordError> {
        Ok(match self.existing(task) {
            Some(slot) => slot.lock().await.last_result.as_deref().cloned(),
            None => None,
        })
    }

    async fn release_all(&self) {
        self.leadership.send_modify(|l| {
            l.tasks = Arc::new(BTreeSet::new());
            l.triggers = Arc::default();
            l.backfills = Arc::default();
        });
    }
}

impl LocalCoordinator {
    /// Stores a scheduled run's result (the newer one wins) and ends its live run.
    async fn record_result(&self, task: &str, result: &RunResult) -> Result<(), CoordError> {
        let slot = self.slot(task);
        let mut record = slot.lock().await;
        let stored = record.last_result.as_ref().map(|r| r.tick);
        if record::supersedes(stored, result.tick) {
            let change = Change {
                result: Some(result.clone()),
                ..Change::of(task)
            };
            // A result lost with the host reads as a run its node did not finish; it needs no
            // sync of its own (journal.rs). A tick queued behind the run is claimed next, and
            // that claim waits for this record: the result does not wait for others.
            let batching = if record.queued.is_some() {
                Batching::AtOnce
            } else {
                Batching::Gather
            };
            self.commit(change, Durability::Written, batching, &mut record)
                .await?;
        }
        self.live_runs_mut()
            .remove(&(task.to_string(), result.tick));
        Ok(())
    }
}

/// Whether `names`, in order, are the names of `set` (an unchanged task brings the very same
/// name, so most compare as pointers).
fn same_names<'a>(set: &BTreeSet<Arc<str>>, names: impl Iterator<Item = &'a Arc<str>>) -> bool {
    let mut known = set.iter();
    for name in names {
        match known.next() {
            Some(same) if Arc::ptr_eq(same, name) || same == name => {}
            _ => return false,
        }
    }
    known.next().is_none()
}

/// The operator's requests (manual runs, backfills) grouped by task, each task's in the order
/// given.
fn by_task<T>(requests: impl Iterator<Item = (String, T)>) -> BTreeMap<String, Vec<T>> {
    let mut grouped: BTreeMap<String, Vec<T>> = BTreeMap::new();
    for (task, request) in requests {
        grouped.entry(task).or_default().push(request);
    }
    grouped
}

#[cfg(test)]
mod queue_tests;
#[cfg(test)]
mod tests;
