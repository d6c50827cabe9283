//! The embedded single-node backend: this node leads every task it defines, and fire records
//! live in `state_dir`.
//!
//! Records are kept in memory and made durable in an append-only journal,
//! `<state_dir>/journal.jsonl`, one JSON line per change (a claim or a result). A claim returns only
//! after its line is on disk (`fdatasync`). One writer thread does all writes and commits every
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
//! journal. Replaying a journal over a snapshot is idempotent (claims only move forward, results
//! are applied in order), so a crash at any point leaves a readable state. Replay counts a line
//! only with its newline: an unfinished last line (a crash mid-write) was never acknowledged and
//! is dropped. A line that begins with the torn rest of a failed write and ends in a good record
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

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::{self, File};
use std::io::{self, BufRead, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, watch};

use super::{ClaimIntent, ClaimOutcome, CoordError, Coordinator, Leadership, RunResult};
use crate::task::TaskSpec;

/// The state format this release writes; readers ignore fields they do not know.
const FORMAT_VERSION: u32 = 1;

/// The state formats this release reads. A file in any other is refused, never guessed at.
const READABLE_FORMATS: [u32; 1] = [1];

/// The journal is folded into the snapshot after this many lines.
pub const COMPACT_AFTER: usize = 100_000;

const JOURNAL: &str = "journal.jsonl";
const SNAPSHOT: &str = "snapshot.json";

/// How every record starts: a JSON object whose first field is `format` (serde writes fields in
/// declaration order). Replay resynchronises on it after the torn rest of a failed write.
const RECORD_START: &[u8] = b"{\"format\":";

/// The record of one task.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct TaskRecord {
    /// The newest claimed tick.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_claimed: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_result: Option<RunResult>,
    /// The newest claim was made to run (not to skip).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    claimed_to_run: bool,
}

/// The snapshot file: every task's record.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Snapshot {
    format: u32,
    #[serde(default)]
    tasks: HashMap<String, TaskRecord>,
}

/// One journal line.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Change {
    format: u32,
    task: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    claimed: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result: Option<RunResult>,
    /// The claim was made to run the tick.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    run: bool,
}

/// Only the `format` of a record, to tell a record in an unknown format from a damaged one.
#[derive(Deserialize)]
struct FormatOnly {
    format: u32,
}

impl Change {
    /// Applies the change; applying a journal twice gives the same state as once.
    fn apply(&self, records: &mut HashMap<String, TaskRecord>) {
        self.apply_to(records.entry(self.task.clone()).or_default());
    }

    fn apply_to(&self, record: &mut TaskRecord) {
        if let Some(tick) = self.claimed
            && record.last_claimed.is_none_or(|previous| previous <= tick)
        {
            record.last_claimed = Some(tick);
            record.claimed_to_run = self.run;
        }
        if let Some(result) = &self.result {
            record.last_result = Some(result.clone());
        }
    }
}

/// A change on its way to the disk, and who to tell when it is there.
struct PendingWrite {
    change: Change,
    durable: oneshot::Sender<Result<(), String>>,
}

/// The embedded backend.
pub struct LocalCoordinator {
    /// The current records, each behind its own lock: a claim holds its task's lock from the
    /// check until its change is durable, so two claims of one tick cannot both win, while
    /// claims of different tasks wait for the disk together (and share one sync).
    records: Mutex<HashMap<String, Arc<tokio::sync::Mutex<TaskRecord>>>>,
    writer: mpsc::UnboundedSender<PendingWrite>,
    leadership: watch::Sender<Leadership>,
    /// Ticks claimed to run by this process whose end is not recorded yet.
    live_runs: Mutex<HashSet<(String, DateTime<Utc>)>>,
    /// Held for the life of the backend; dropping it releases the state dir.
    _lock: Flock<File>,
}

impl LocalCoordinator {
    /// Opens (creating if needed) the state dir, takes its lock and reads the records.
    pub fn open(state_dir: &Path) -> Result<LocalCoordinator, CoordError> {
        let (lock, journal_writer) = open_state(
            state_dir,
            "two daemons on one state dir would both fire every tick: stop the other one or give \
             this one its own --state-dir",
        )?;
        let records = journal_writer.mirror.clone();
        let (writer, pending) = mpsc::unbounded_channel();
        std::thread::Builder::new()
            .name("zkcron-journal".into())
            .spawn(move || journal_writer.run(pending))
            .map_err(|source| CoordError::Io {
                context: "cannot start the journal writer".into(),
                error: source,
            })?;

        let (leadership, _) = watch::channel(Leadership::default());
        let records = records
            .into_iter()
            .map(|(task, record)| (task, Arc::new(tokio::sync::Mutex::new(record))))
            .collect();
        Ok(LocalCoordinator {
            records: Mutex::new(records),
            writer,
            leadership,
            live_runs: Mutex::new(HashSet::new()),
            _lock: lock,
        })
    }

    fn live_runs_mut(&self) -> std::sync::MutexGuard<'_, HashSet<(String, DateTime<Utc>)>> {
        self.live_runs.lock().expect("live runs lock poisoned")
    }

    fn slot(&self, task: &str) -> Arc<tokio::sync::Mutex<TaskRecord>> {
        self.records
            .lock()
            .expect("records lock poisoned")
            .entry(task.to_string())
            .or_default()
            .clone()
    }

    /// Writes `change` durably, then applies it to `record`.
    async fn commit(&self, change: Change, record: &mut TaskRecord) -> Result<(), CoordError> {
        let (durable, done) = oneshot::channel();
        let failed = |detail: String| CoordError::Io {
            context: format!(
                "cannot record the change of task {} in the journal",
                change.task
            ),
            error: io::Error::other(detail),
        };
        self.writer
            .send(PendingWrite {
                change: change.clone(),
                durable,
            })
            .map_err(|_| failed("the journal writer has stopped".into()))?;
        // Only a durable record counts: if the write failed we do not know whether it reached the
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
    pub fn open(state_dir: &Path) -> Result<StateDirEditor, CoordError> {
        let (lock, writer) = open_state(
            state_dir,
            "a running daemon keeps its fire records in memory and would not see the change: stop \
             it first (e.g. systemctl stop zkcron), run this again, then start it",
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

/// Takes the state dir's lock (creating the dir if needed) and records our pid in it for the
/// operator; if another process holds it, says who and what to do (`busy_fix`).
fn lock_state_dir(state_dir: &Path, busy_fix: &str) -> Result<Flock<File>, CoordError> {
    let io = |context: String| move |error| state_io(state_dir, context, error);
    fs::create_dir_all(state_dir).map_err(io(format!(
        "cannot create state dir {}",
        state_dir.display()
    )))?;
    let lock_path = state_dir.join("zkcron.lock");
    let lock_file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&lock_path)
        .map_err(io(format!("cannot open lock file {}", lock_path.display())))?;
    let mut lock =
        Flock::lock(lock_file, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| {
            let holder = fs::read_to_string(&lock_path)
                .ok()
                .and_then(|text| text.trim().parse::<u32>().ok())
                .map(|pid| format!(" (pid {pid})"))
                .unwrap_or_default();
            CoordError::Busy(format!(
                "state dir {} is in use by another zkcron{holder} ({errno}); {busy_fix}",
                state_dir.display()
            ))
        })?;
    // Record our pid for the operator; failure to do so is harmless.
    let _ = lock.set_len(0);
    let _ = writeln!(&mut *lock, "{}", std::process::id());
    Ok(lock)
}

/// Locks the state dir, reads the records (reporting damaged files and moving them aside) and
/// returns a writer over them whose journal is clean: a torn or damaged journal is folded into
/// the snapshot before anything is appended to it.
fn open_state(
    state_dir: &Path,
    busy_fix: &str,
) -> Result<(Flock<File>, JournalWriter), CoordError> {
    let lock = lock_state_dir(state_dir, busy_fix)?;
    let state = read_state(state_dir)?;
    report_damage(state_dir, &state);
    let journal_path = state_dir.join(JOURNAL);
    let cannot_open = |source| CoordError::Io {
        context: format!("cannot open journal {}", journal_path.display()),
        error: source,
    };
    let journal = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&journal_path)
        .map_err(cannot_open)?;
    let good_len = journal.metadata().map_err(cannot_open)?.len();
    let mut writer = JournalWriter {
        state_dir: state_dir.to_path_buf(),
        journal,
        good_len,
        torn: false,
        lines: state.journal_lines,
        mirror: state.records,
    };
    if state.journal_lines > 0 || state.torn_tail > 0 {
        writer.compact().map_err(|error| {
            state_io(
                state_dir,
                format!("cannot compact the journal in {}", state_dir.display()),
                error,
            )
        })?;
    }
    Ok((lock, writer))
}

/// What the state files say, read without changing them.
#[derive(Debug, Default)]
struct StateRead {
    records: HashMap<String, TaskRecord>,
    /// Complete journal lines read (0 and no torn tail: the journal need not be compacted).
    journal_lines: usize,
    /// Why the snapshot could not be read, if it could not.
    corrupt_snapshot: Option<String>,
    /// Complete journal lines that held no readable record.
    unreadable_lines: usize,
    /// Journal lines that began with the torn rest of a failed write and ended in a good record.
    recovered_lines: usize,
    /// Bytes after the last complete line: a write that never finished, never acknowledged.
    torn_tail: usize,
}

/// Reads the snapshot and replays the journal over it. An unknown format is an error; damage is
/// described in the result for the caller to report.
fn read_state(state_dir: &Path) -> Result<StateRead, CoordError> {
    let mut state = StateRead::default();
    let cannot_read = |path: &Path| {
        let context = format!("cannot read {}", path.display());
        move |source| CoordError::Io {
            context,
            error: source,
        }
    };
    let snapshot_path = state_dir.join(SNAPSHOT);
    match fs::read(&snapshot_path) {
        Ok(bytes) => match parse_record(&snapshot_path, &bytes, |s: &Snapshot| s.format)? {
            Ok(snapshot) => state.records = snapshot.tasks,
            Err(error) => state.corrupt_snapshot = Some(error.to_string()),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => return Err(cannot_read(&snapshot_path)(source)),
    }
    let journal_path = state_dir.join(JOURNAL);
    let journal = match File::open(&journal_path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(state),
        Err(source) => return Err(cannot_read(&journal_path)(source)),
    };
    let mut reader = io::BufReader::new(journal);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .map_err(cannot_read(&journal_path))?;
        if read == 0 {
            break;
        }
        if line.pop_if(|byte| *byte == b'\n').is_none() {
            // The write of this line never finished, so it was never acknowledged.
            state.torn_tail = read;
            break;
        }
        state.journal_lines += 1;
        match parse_journal_line(&journal_path, &line)? {
            Some((change, recovered)) => {
                state.recovered_lines += usize::from(recovered);
                change.apply(&mut state.records);
            }
            None => state.unreadable_lines += 1,
        }
    }
    Ok(state)
}

/// One complete journal line's record, and whether it had to be found after the torn rest of a
/// failed write (which releases before the cut-back rule appended to). `None`: no record.
fn parse_journal_line(path: &Path, line: &[u8]) -> Result<Option<(Change, bool)>, CoordError> {
    if let Ok(change) = parse_record(path, line, |c: &Change| c.format)? {
        return Ok(Some((change, false)));
    }
    for start in (1..line.len()).filter(|&i| line[i..].starts_with(RECORD_START)) {
        if let Ok(change) = parse_record(path, &line[start..], |c: &Change| c.format)? {
            return Ok(Some((change, true)));
        }
    }
    Ok(None)
}

/// Parses one state record: `Ok(Err(_))` when the bytes are not a readable record (damaged or
/// torn), an error when they are a record in a format this release does not read.
fn parse_record<T: DeserializeOwned>(
    path: &Path,
    bytes: &[u8],
    format: impl Fn(&T) -> u32,
) -> Result<Result<T, serde_json::Error>, CoordError> {
    let error = match serde_json::from_slice::<T>(bytes) {
        Ok(record) => {
            check_format(path, format(&record))?;
            return Ok(Ok(record));
        }
        Err(error) => error,
    };
    // A newer format may have a shape this release does not know: that is not damage.
    if let Ok(FormatOnly { format }) = serde_json::from_slice(bytes) {
        check_format(path, format)?;
    }
    Ok(Err(error))
}

fn check_format(path: &Path, format: u32) -> Result<(), CoordError> {
    if READABLE_FORMATS.contains(&format) {
        return Ok(());
    }
    let readable: Vec<String> = READABLE_FORMATS.iter().map(u32::to_string).collect();
    Err(CoordError::UnreadableState(format!(
        "{path} is in state format {format}, but this release of zkcron ({version}) reads only \
         format {readable}: it was written by a newer zkcron. Upgrade zkcron to the release that \
         wrote it, or move {path} aside to start without its fire records (ticks missed while \
         zkcron was down are then not caught up)",
        path = path.display(),
        version = env!("CARGO_PKG_VERSION"),
        readable = readable.join(", "),
    )))
}

/// Says what the read found wrong, and keeps damaged files for the operator.
fn report_damage(state_dir: &Path, state: &StateRead) {
    if let Some(error) = &state.corrupt_snapshot {
        move_aside(&state_dir.join(SNAPSHOT), error);
    }
    let journal_path = state_dir.join(JOURNAL);
    if state.unreadable_lines > 0 {
        // The unreadable lines are lost; keep a copy for the operator.
        let aside = aside_path(&journal_path);
        let copied = fs::copy(&journal_path, &aside);
        tracing::error!(
            path = %journal_path.display(),
            copy = %aside.display(),
            copy_error = copied.err().map(|e| e.to_string()),
            "{} unreadable journal line(s) skipped: the journal is damaged; the affected tasks \
             may catch up a tick they already ran",
            state.unreadable_lines
        );
    }
    if state.recovered_lines > 0 {
        tracing::warn!(
            path = %journal_path.display(),
            "{} journal line(s) began with the torn rest of a write that failed (a full disk, \
             under an earlier release); the complete record after it was read",
            state.recovered_lines
        );
    }
    if state.torn_tail > 0 {
        tracing::warn!(
            path = %journal_path.display(),
            bytes = state.torn_tail,
            "the journal ended in a write that never finished (a crash mid-write); it was never \
             acknowledged, so no tick ran for it, and it is dropped"
        );
    }
}

fn aside_path(path: &Path) -> PathBuf {
    let stamp = crate::clock::wall_clock().format("%Y%m%dT%H%M%SZ");
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!("{name}.corrupt-{stamp}"))
}

/// Moves a corrupt state file aside and says so; the node continues without its records.
fn move_aside(path: &Path, error: &str) {
    let aside = aside_path(path);
    let moved = fs::rename(path, &aside);
    tracing::error!(
        path = %path.display(),
        moved_to = %aside.display(),
        move_error = moved.err().map(|e| e.to_string()),
        "state file is corrupt ({error}); moved it aside and continuing without its fire records \
         (missed ticks before now are not caught up)"
    );
}

/// An I/O error in the state dir as a [`CoordError`], in the operator's words.
fn state_io(state_dir: &Path, context: String, error: io::Error) -> CoordError {
    CoordError::Io {
        context,
        error: io::Error::new(error.kind(), explain_io(state_dir, &error)),
    }
}

/// An I/O error in the state dir in the operator's words: a full disk or quota names the fix.
fn explain_io(state_dir: &Path, error: &io::Error) -> String {
    let full = |what: &str| {
        format!(
            "state_dir {} is {what}: free space on {} ({error}); until then no tick can be \
             claimed, so none runs",
            state_dir.display(),
            filesystem_of(state_dir).display()
        )
    };
    match error.raw_os_error().map(Errno::from_raw) {
        Some(Errno::ENOSPC) => full("full"),
        Some(Errno::EDQUOT) => full("over its disk quota"),
        Some(errno @ (Errno::EACCES | Errno::EPERM | Errno::EROFS)) => {
            let user = crate::task::Identity::current().user_name;
            format!(
                "{error}; zkcron runs as {user:?}: {}",
                not_writable_fix(state_dir, &user, errno)
            )
        }
        _ => error.to_string(),
    }
}

/// The fix for a state dir that zkcron's user (`user`) cannot write or create (`errno` says
/// why): give the user the directory, or choose another.
pub(crate) fn not_writable_fix(state_dir: &Path, user: &str, errno: Errno) -> String {
    let elsewhere = "point --state-dir or [scheduler].state_dir elsewhere";
    if errno == Errno::EROFS {
        return format!("the filesystem is read-only: {elsewhere}");
    }
    let dir = crate::task::shell_quote(state_dir);
    if state_dir.is_dir() {
        format!("run `chown {user} {dir}`, or {elsewhere}")
    } else {
        format!("run `mkdir -p {dir} && chown {user} {dir}`, or {elsewhere}")
    }
}

/// The mount point of the filesystem that holds `path` (where the operator frees space), or
/// `path` itself when that cannot be told.
fn filesystem_of(path: &Path) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let device = |path: &Path| fs::metadata(path).map(|m| m.dev()).ok();
    let Ok(mut mount) = fs::canonicalize(path) else {
        return path.to_path_buf();
    };
    let Some(dev) = device(&mount) else {
        return mount;
    };
    while let Some(parent) = mount.parent() {
        if device(parent) != Some(dev) {
            break;
        }
        mount = parent.to_path_buf();
    }
    mount
}

/// The journal file as the writer uses it; a trait so that tests can make each step fail.
trait JournalFile: Send + 'static {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()>;
    fn sync(&mut self) -> io::Result<()>;
    fn truncate(&mut self, len: u64) -> io::Result<()>;
}

impl JournalFile for File {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write_all(bytes)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.sync_data()
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.set_len(len)
    }
}

/// The thread that owns the journal file.
struct JournalWriter<F: JournalFile = File> {
    state_dir: PathBuf,
    journal: F,
    /// The journal's length up to the end of its last durable record.
    good_len: u64,
    /// A failed append may have left part of its batch after `good_len`, and cutting it off
    /// failed too: nothing is appended until it is cut off.
    torn: bool,
    /// Lines in the journal since the last compaction.
    lines: usize,
    /// The state the journal and snapshot describe, for compaction.
    mirror: HashMap<String, TaskRecord>,
}

impl<F: JournalFile> JournalWriter<F> {
    /// Commits batches until the backend is dropped.
    fn run(mut self, mut pending: mpsc::UnboundedReceiver<PendingWrite>) {
        while let Some(first) = pending.blocking_recv() {
            let mut batch = vec![first];
            while let Ok(more) = pending.try_recv() {
                batch.push(more);
            }
            // One batch, one outcome: every change in a failed batch fails.
            let result = self.append(&batch);
            for write in batch {
                let _ = write.durable.send(result.clone());
            }
            if result.is_ok()
                && self.lines >= COMPACT_AFTER
                && let Err(error) = self.compact()
            {
                tracing::error!(
                    "cannot compact the journal ({}); it keeps growing",
                    explain_io(&self.state_dir, &error)
                );
            }
        }
    }

    /// Appends the batch and syncs it; on failure the journal is left as it was before.
    fn append(&mut self, batch: &[PendingWrite]) -> Result<(), String> {
        if self.torn {
            self.cut_back().map_err(|error| {
                format!(
                    "the journal {} ends in the torn rest of a write that failed, and it cannot be \
                     cut off ({}); no change is recorded until it can be",
                    self.state_dir.join(JOURNAL).display(),
                    explain_io(&self.state_dir, &error)
                )
            })?;
        }
        let mut bytes = Vec::with_capacity(batch.len() * 128);
        for write in batch {
            serde_json::to_writer(&mut bytes, &write.change).expect("changes always serialize");
            bytes.push(b'\n');
        }
        if let Err(error) = self
            .journal
            .append(&bytes)
            .and_then(|()| self.journal.sync())
        {
            // Part of the batch may be in the file: cut it off, so that the journal is as it was
            // and the next record cannot be glued onto a torn one.
            self.torn = true;
            let mut message = explain_io(&self.state_dir, &error);
            if let Err(cut) = self.cut_back() {
                message.push_str(&format!(
                    "; the torn write cannot be cut off the journal either ({cut}), so no change \
                     is recorded until it can be"
                ));
            }
            return Err(message);
        }
        self.good_len += bytes.len() as u64;
        for write in batch {
            write.change.apply(&mut self.mirror);
        }
        self.lines += batch.len();
        Ok(())
    }

    /// Truncates the journal back to its last durable record.
    fn cut_back(&mut self) -> io::Result<()> {
        self.journal.truncate(self.good_len)?;
        self.journal.sync()?;
        self.torn = false;
        Ok(())
    }

    /// Writes the whole state as the snapshot, then empties the journal.
    fn compact(&mut self) -> io::Result<()> {
        let snapshot = Snapshot {
            format: FORMAT_VERSION,
            tasks: self.mirror.clone(),
        };
        let bytes = serde_json::to_vec(&snapshot).expect("snapshots always serialize");
        write_atomically(&self.state_dir.join(SNAPSHOT), &bytes)?;
        self.journal.truncate(0)?;
        self.good_len = 0;
        self.lines = 0;
        self.journal.sync()
    }
}

/// Writes `bytes` to `path` so that a crash leaves either the old or the new content.
fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().expect("state files live in a directory");
    let mut temp = tempfile::NamedTempFile::new_in(dir)?;
    temp.write_all(bytes)?;
    temp.as_file().sync_all()?;
    temp.persist(path).map_err(|e| e.error)?;
    nix::unistd::fsync(File::open(dir)?.as_fd()).map_err(io::Error::from)
}

impl Coordinator for LocalCoordinator {
    async fn publish(&self, tasks: &[TaskSpec]) -> Result<(), CoordError> {
        let names: BTreeSet<String> = tasks.iter().map(|t| t.name.clone()).collect();
        self.leadership.send_modify(|l| l.tasks = Arc::new(names));
        Ok(())
    }

    fn leadership(&self) -> watch::Receiver<Leadership> {
        self.leadership.subscribe()
    }

    async fn last_claimed(&self, task: &str) -> Result<Option<DateTime<Utc>>, CoordError> {
        Ok(self.slot(task).lock().await.last_claimed)
    }

    async fn claim(
        &self,
        task: &str,
        tick: DateTime<Utc>,
        intent: ClaimIntent,
    ) -> Result<ClaimOutcome, CoordError> {
        if !self.leadership.borrow().may_fire(task) {
            return Ok(ClaimOutcome::NotLeader);
        }
        let slot = self.slot(task);
        let mut record = slot.lock().await;
        if let Some(previous) = record.last_claimed
            && previous >= tick
        {
            return Ok(ClaimOutcome::AlreadyClaimed { record: previous });
        }
        let run = intent == ClaimIntent::Run;
        let change = Change {
            format: FORMAT_VERSION,
            task: task.to_string(),
            claimed: Some(tick),
            result: None,
            run,
        };
        self.commit(change, &mut record).await?;
        if run {
            self.live_runs_mut().insert((task.to_string(), tick));
        }
        Ok(ClaimOutcome::Claimed)
    }

    async fn orphaned_tick(&self, task: &str) -> Result<Option<DateTime<Utc>>, CoordError> {
        let slot = self.slot(task);
        let record = slot.lock().await;
        let Some(tick) = record.last_claimed.filter(|_| record.claimed_to_run) else {
            return Ok(None);
        };
        let ended = record.last_result.as_ref().is_some_and(|r| r.tick >= tick);
        let live = self.live_runs_mut().contains(&(task.to_string(), tick));
        // Claimed to run by an earlier life of this daemon, which never recorded its end.
        Ok((!ended && !live).then_some(tick))
    }

    async fn reclaim(&self, task: &str, tick: DateTime<Utc>) -> Result<ClaimOutcome, CoordError> {
        if !self.leadership.borrow().may_fire(task) {
            return Ok(ClaimOutcome::NotLeader);
        }
        let slot = self.slot(task);
        let mut record = slot.lock().await;
        match record.last_claimed {
            Some(current) if current == tick => {}
            Some(current) => return Ok(ClaimOutcome::AlreadyClaimed { record: current }),
            None => return Ok(ClaimOutcome::NotLeader),
        }
        if !self.live_runs_mut().insert((task.to_string(), tick)) {
            return Ok(ClaimOutcome::AlreadyClaimed { record: tick });
        }
        let change = Change {
            format: FORMAT_VERSION,
            task: task.to_string(),
            claimed: Some(tick),
            result: None,
            run: true,
        };
        if let Err(error) = self.commit(change, &mut record).await {
            self.live_runs_mut().remove(&(task.to_string(), tick));
            return Err(error);
        }
        Ok(ClaimOutcome::Claimed)
    }

    async fn runs_elsewhere(&self, _task: &str) -> Result<usize, CoordError> {
        Ok(0)
    }

    async fn run_ended(&self, task: &str, result: &RunResult) -> Result<(), CoordError> {
        let slot = self.slot(task);
        let mut record = slot.lock().await;
        let change = Change {
            format: FORMAT_VERSION,
            task: task.to_string(),
            claimed: None,
            result: Some(result.clone()),
            run: false,
        };
        self.commit(change, &mut record).await?;
        self.live_runs_mut()
            .remove(&(task.to_string(), result.tick));
        Ok(())
    }

    async fn last_result(&self, task: &str) -> Result<Option<RunResult>, CoordError> {
        Ok(self.slot(task).lock().await.last_result.clone())
    }

    async fn release_all(&self) {
        self.leadership
            .send_modify(|l| l.tasks = Arc::new(BTreeSet::new()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state dir that cannot be created said only "cannot create state dir …: Permission
    /// denied (os error 13)"; it names who zkcron runs as and the fix.
    #[test]
    fn a_state_dir_that_cannot_be_created_names_the_user_and_the_fix() {
        let dir = Path::new("/nonexistent-zkcron/state");
        let error = state_io(
            dir,
            format!("cannot create state dir {}", dir.display()),
            io::Error::from_raw_os_error(nix::libc::EACCES),
        );
        let user = crate::task::Identity::current().user_name;
        assert_eq!(
            error.to_string(),
            format!(
                "cannot create state dir {dir}: Permission denied (os error 13); zkcron runs as \
                 {user:?}: run `mkdir -p {dir} && chown {user} {dir}`, or point --state-dir or \
                 [scheduler].state_dir elsewhere",
                dir = dir.display()
            )
        );
    }
    use crate::schedule::Schedule;
    use crate::task::{CatchUpPolicy, CommandLine, OverlapPolicy, RetryPolicy};

    fn spec(name: &str) -> TaskSpec {
        TaskSpec {
            name: name.into(),
            path: PathBuf::from(format!("{name}.toml")),
            description: None,
            schedule: Schedule::parse("* * * * *", chrono_tz::Tz::UTC).unwrap(),
            command: CommandLine::Argv(vec!["true".into()]),
            user: None,
            group: None,
            working_dir: None,
            env: Default::default(),
            timeout: None,
            kill_grace: std::time::Duration::from_secs(1),
            overlap: OverlapPolicy::Skip,
            catch_up: CatchUpPolicy::Once,
            starting_deadline: None,
            jitter: std::time::Duration::ZERO,
            retries: RetryPolicy::default(),
            version_req: None,
            kill_on_session_loss: false,
            on_node_loss: Default::default(),
            enabled: true,
        }
    }

    /// A successful run of `tick` that took 5 ms.
    fn ok_result(tick: DateTime<Utc>) -> RunResult {
        RunResult {
            tick,
            node: "n1".into(),
            exit: "exit code 0".into(),
            success: true,
            attempts: 1,
            duration_ms: 5,
            finished_at: tick + chrono::TimeDelta::seconds(1),
        }
    }

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_767_225_600 + s, 0).unwrap()
    }

    #[tokio::test]
    async fn given_a_published_task_when_ticks_are_claimed_then_only_newer_ticks_win() {
        let dir = tempfile::tempdir().unwrap();
        let local = LocalCoordinator::open(dir.path()).unwrap();
        local.publish(&[spec("a")]).await.unwrap();
        assert!(local.leadership().borrow().may_fire("a"));
        assert_eq!(
            local.claim("a", at(60), ClaimIntent::Run).await.unwrap(),
            ClaimOutcome::Claimed
        );
        assert_eq!(
            local.claim("a", at(60), ClaimIntent::Run).await.unwrap(),
            ClaimOutcome::AlreadyClaimed { record: at(60) }
        );
        assert_eq!(
            local.claim("a", at(0), ClaimIntent::Run).await.unwrap(),
            ClaimOutcome::AlreadyClaimed { record: at(60) }
        );
        assert_eq!(
            local.claim("a", at(120), ClaimIntent::Run).await.unwrap(),
            ClaimOutcome::Claimed
        );
        assert_eq!(
            local.claim("b", at(120), ClaimIntent::Run).await.unwrap(),
            ClaimOutcome::NotLeader
        );
    }

    #[tokio::test]
    async fn given_a_run_cut_short_by_a_crash_when_reopened_then_its_tick_is_orphaned_once() {
        let dir = tempfile::tempdir().unwrap();
        {
            let local = LocalCoordinator::open(dir.path()).unwrap();
            local.publish(&[spec("a"), spec("s")]).await.unwrap();
            local.claim("a", at(60), ClaimIntent::Run).await.unwrap();
            local.claim("s", at(60), ClaimIntent::Skip).await.unwrap();
            // Running in this process: not orphaned.
            assert_eq!(local.orphaned_tick("a").await.unwrap(), None);
        }
        let local = LocalCoordinator::open(dir.path()).unwrap();
        local.publish(&[spec("a"), spec("s")]).await.unwrap();
        assert_eq!(local.orphaned_tick("a").await.unwrap(), Some(at(60)));
        // A tick consumed without running has nothing to rerun.
        assert_eq!(local.orphaned_tick("s").await.unwrap(), None);
        assert_eq!(
            local.reclaim("a", at(60)).await.unwrap(),
            ClaimOutcome::Claimed
        );
        assert_eq!(
            local.reclaim("a", at(60)).await.unwrap(),
            ClaimOutcome::AlreadyClaimed { record: at(60) },
            "a tick is reclaimed once"
        );
        assert_eq!(local.orphaned_tick("a").await.unwrap(), None);
        local.run_ended("a", &ok_result(at(60))).await.unwrap();
        drop(local);
        let local = LocalCoordinator::open(dir.path()).unwrap();
        local.publish(&[spec("a")]).await.unwrap();
        assert_eq!(local.orphaned_tick("a").await.unwrap(), None, "it ended");
    }

    /// Regression: after `zkcron reset` moved a record back from the future, the result of the
    /// future tick stayed and made a later run cut short by a crash look ended, so
    /// `on_node_loss = "rerun"` did not run it again.
    #[tokio::test]
    async fn given_a_reset_record_when_a_later_run_is_cut_short_then_a_result_from_the_future_does_not_hide_it()
     {
        let dir = tempfile::tempdir().unwrap();
        let future = at(366 * 86_400);
        {
            let local = LocalCoordinator::open(dir.path()).unwrap();
            local.publish(&[spec("a")]).await.unwrap();
            local.claim("a", future, ClaimIntent::Run).await.unwrap();
            local.run_ended("a", &ok_result(future)).await.unwrap();
        }
        StateDirEditor::open(dir.path())
            .unwrap()
            .set_fire_record("a", at(0))
            .unwrap();
        {
            let local = LocalCoordinator::open(dir.path()).unwrap();
            local.publish(&[spec("a")]).await.unwrap();
            assert_eq!(local.last_result("a").await.unwrap(), None);
            local.claim("a", at(60), ClaimIntent::Run).await.unwrap();
        }
        let local = LocalCoordinator::open(dir.path()).unwrap();
        local.publish(&[spec("a")]).await.unwrap();
        assert_eq!(local.orphaned_tick("a").await.unwrap(), Some(at(60)));
    }

    #[tokio::test]
    async fn given_claims_when_the_backend_reopens_then_the_fire_record_survives() {
        let dir = tempfile::tempdir().unwrap();
        {
            let local = LocalCoordinator::open(dir.path()).unwrap();
            local.publish(&[spec("a")]).await.unwrap();
            local.claim("a", at(60), ClaimIntent::Run).await.unwrap();
            local.run_ended("a", &ok_result(at(60))).await.unwrap();
        }
        let local = LocalCoordinator::open(dir.path()).unwrap();
        local.publish(&[spec("a")]).await.unwrap();
        assert_eq!(local.last_claimed("a").await.unwrap(), Some(at(60)));
        assert_eq!(
            local.last_result("a").await.unwrap().unwrap().exit,
            "exit code 0"
        );
        assert_eq!(
            local.claim("a", at(60), ClaimIntent::Run).await.unwrap(),
            ClaimOutcome::AlreadyClaimed { record: at(60) }
        );
    }

    #[tokio::test]
    async fn given_a_corrupt_snapshot_when_opened_then_it_is_moved_aside_and_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(SNAPSHOT), b"{not json").unwrap();
        let local = LocalCoordinator::open(dir.path()).unwrap();
        local.publish(&[spec("a")]).await.unwrap();
        assert_eq!(local.last_claimed("a").await.unwrap(), None);
        let names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names
                .iter()
                .any(|n| n.starts_with("snapshot.json.corrupt-")),
            "{names:?}"
        );
        assert_eq!(
            local.claim("a", at(60), ClaimIntent::Run).await.unwrap(),
            ClaimOutcome::Claimed
        );
    }

    #[tokio::test]
    async fn given_a_journal_torn_by_a_crash_when_opened_then_the_complete_lines_count() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join(JOURNAL),
            concat!(
                r#"{"format":1,"task":"a","claimed":"2026-01-01T00:01:00Z"}"#,
                "\n",
                r#"{"format":1,"task":"a","claimed":"2026-01-01T00:02:00Z"}"#,
                "\n",
                r#"{"format":1,"task":"a","clai"#
            ),
        )
        .unwrap();
        let local = LocalCoordinator::open(dir.path()).unwrap();
        assert_eq!(local.last_claimed("a").await.unwrap(), Some(at(120)));
        // An unfinished last line was never acknowledged: it is dropped, not kept as damage, and
        // the journal was rewritten clean before anything is appended to it.
        assert_eq!(state_files(dir.path()), [JOURNAL, SNAPSHOT, "zkcron.lock"]);
        assert_eq!(fs::read(dir.path().join(JOURNAL)).unwrap(), b"");
    }

    /// The names in a state dir, sorted.
    fn state_files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[tokio::test]
    async fn given_a_claim_glued_onto_a_torn_record_by_an_earlier_release_when_replayed_then_it_counts()
     {
        // Regression: with the disk full an append failed half-way, the next durable claim was
        // appended onto the torn rest, and replay dropped the whole line: the tick ran twice.
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join(JOURNAL),
            concat!(
                r#"{"format":1,"task":"a","claimed":"2026-01-01T00:01:00Z","run":true}"#,
                "\n",
                r#"{"format":1,"task":"a","claimed":"2026-01-01T00:02"#,
                r#"{"format":1,"task":"a","claimed":"2026-01-01T00:02:00Z","run":true}"#,
                "\n",
                r#"{"format":1,"task":"b","claimed":"2026-01-01T00:03:00Z","run":true}"#,
                "\n",
            ),
        )
        .unwrap();
        let local = LocalCoordinator::open(dir.path()).unwrap();
        assert_eq!(local.last_claimed("a").await.unwrap(), Some(at(120)));
        assert_eq!(local.last_claimed("b").await.unwrap(), Some(at(180)));
        // Nothing was lost, so nothing is kept aside as damage.
        assert_eq!(state_files(dir.path()), [JOURNAL, SNAPSHOT, "zkcron.lock"]);
    }

    #[tokio::test]
    async fn given_a_journal_when_reopened_then_it_is_folded_into_the_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        {
            let local = LocalCoordinator::open(dir.path()).unwrap();
            local.publish(&[spec("a"), spec("b")]).await.unwrap();
            local.claim("a", at(60), ClaimIntent::Run).await.unwrap();
            local.claim("b", at(120), ClaimIntent::Run).await.unwrap();
            assert!(!fs::read(dir.path().join(JOURNAL)).unwrap().is_empty());
        }
        let local = LocalCoordinator::open(dir.path()).unwrap();
        assert_eq!(fs::read(dir.path().join(JOURNAL)).unwrap(), b"");
        let snapshot: Snapshot =
            serde_json::from_slice(&fs::read(dir.path().join(SNAPSHOT)).unwrap()).unwrap();
        assert_eq!(snapshot.tasks["a"].last_claimed, Some(at(60)));
        assert_eq!(snapshot.tasks["b"].last_claimed, Some(at(120)));
        assert_eq!(local.last_claimed("b").await.unwrap(), Some(at(120)));
    }

    #[tokio::test]
    async fn given_many_concurrent_claims_then_each_wins_once() {
        let dir = tempfile::tempdir().unwrap();
        let local = Arc::new(LocalCoordinator::open(dir.path()).unwrap());
        let specs: Vec<TaskSpec> = (0..50).map(|i| spec(&format!("t{i}"))).collect();
        local.publish(&specs).await.unwrap();
        let mut claims = tokio::task::JoinSet::new();
        for i in 0..50 {
            for _ in 0..2 {
                let local = local.clone();
                claims.spawn(async move {
                    local
                        .claim(&format!("t{i}"), at(60), ClaimIntent::Run)
                        .await
                        .unwrap()
                });
            }
        }
        let outcomes = claims.join_all().await;
        assert_eq!(
            outcomes
                .iter()
                .filter(|o| **o == ClaimOutcome::Claimed)
                .count(),
            50
        );
    }

    #[tokio::test]
    async fn given_state_with_fields_this_release_does_not_know_when_read_then_they_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join(SNAPSHOT),
            br#"{"format": 1, "tasks": {"a": {"last_claimed": "2026-01-01T00:01:00Z", "new": 1}}, "more": []}"#,
        )
        .unwrap();
        fs::write(
            dir.path().join(JOURNAL),
            concat!(
                r#"{"format":1,"task":"b","claimed":"2026-01-01T00:02:00Z","shiny":true}"#,
                "\n"
            ),
        )
        .unwrap();
        let local = LocalCoordinator::open(dir.path()).unwrap();
        assert_eq!(local.last_claimed("a").await.unwrap(), Some(at(60)));
        assert_eq!(local.last_claimed("b").await.unwrap(), Some(at(120)));
    }

    /// Opens `dir`, which must fail, and returns the message.
    fn refusal(dir: &Path) -> String {
        match LocalCoordinator::open(dir) {
            Ok(_) => panic!("a state dir in an unknown format was opened"),
            Err(error @ CoordError::UnreadableState(_)) => error.to_string(),
            Err(other) => panic!("wrong error: {other}"),
        }
    }

    #[test]
    fn given_a_snapshot_in_a_newer_format_when_opened_then_it_is_refused_naming_file_and_format() {
        // Regression: a snapshot of a future format was read as format 1 without a word.
        let dir = tempfile::tempdir().unwrap();
        let snapshot =
            br#"{"format": 2, "tasks": {"a": {"last_claimed": "2026-01-01T00:01:00Z"}}}"#;
        fs::write(dir.path().join(SNAPSHOT), snapshot).unwrap();
        let message = refusal(dir.path());
        let path = dir.path().join(SNAPSHOT);
        assert!(
            message.contains(&format!("{} is in state format 2", path.display())),
            "{message}"
        );
        assert!(message.contains("reads only format 1"), "{message}");
        assert!(message.contains("written by a newer zkcron"), "{message}");
        assert!(message.contains("Upgrade zkcron"), "{message}");
        assert!(message.contains("move"), "{message}");
        // Refused, not repaired: the file is untouched and nothing was written beside it.
        assert_eq!(fs::read(&path).unwrap(), snapshot);
        assert_eq!(state_files(dir.path()), [SNAPSHOT, "zkcron.lock"]);
        // A shape this release does not know is refused by its format, not called damage.
        fs::write(&path, br#"{"format": 3, "tasks": ["a new shape"]}"#).unwrap();
        assert!(refusal(dir.path()).contains("is in state format 3"));
    }

    #[test]
    fn given_a_journal_line_in_a_newer_format_when_opened_then_it_is_refused_naming_file_and_format()
     {
        let dir = tempfile::tempdir().unwrap();
        let journal = concat!(
            r#"{"format":1,"task":"a","claimed":"2026-01-01T00:01:00Z"}"#,
            "\n",
            r#"{"format":2,"task":"a","claimed":"2026-01-01T00:02:00Z"}"#,
            "\n",
        );
        fs::write(dir.path().join(JOURNAL), journal).unwrap();
        let message = refusal(dir.path());
        assert!(
            message.contains(&format!(
                "{} is in state format 2",
                dir.path().join(JOURNAL).display()
            )),
            "{message}"
        );
        assert!(message.contains("reads only format 1"), "{message}");
        assert_eq!(
            fs::read(dir.path().join(JOURNAL)).unwrap(),
            journal.as_bytes()
        );
        assert_eq!(state_files(dir.path()), [JOURNAL, "zkcron.lock"]);
        // The read-only reader of `zkcron next` refuses it too.
        let error = read_fire_records(dir.path()).expect_err("refused");
        assert!(
            error.to_string().contains("is in state format 2"),
            "{error}"
        );
    }

    #[test]
    fn given_a_running_daemon_when_a_second_opens_the_same_state_dir_then_it_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _first = LocalCoordinator::open(dir.path()).unwrap();
        let error = LocalCoordinator::open(dir.path())
            .err()
            .expect("second open must fail");
        assert!(
            error.to_string().contains("is in use by another zkcron"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn given_release_all_then_nothing_may_fire() {
        let dir = tempfile::tempdir().unwrap();
        let local = LocalCoordinator::open(dir.path()).unwrap();
        local.publish(&[spec("a")]).await.unwrap();
        local.release_all().await;
        assert!(!local.leadership().borrow().may_fire("a"));
        assert_eq!(
            local.claim("a", at(60), ClaimIntent::Run).await.unwrap(),
            ClaimOutcome::NotLeader
        );
    }

    /// A journal file in memory whose steps fail on demand.
    #[derive(Default)]
    struct FlakyJournal {
        bytes: Arc<Mutex<Vec<u8>>>,
        /// The next append writes this many bytes, then fails with ENOSPC.
        short_write: Option<usize>,
        /// The next this-many truncations fail with EIO.
        failing_truncates: usize,
    }

    impl JournalFile for FlakyJournal {
        fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
            let mut file = self.bytes.lock().unwrap();
            match self.short_write.take() {
                Some(written) => {
                    file.extend_from_slice(&bytes[..written]);
                    Err(io::Error::from_raw_os_error(Errno::ENOSPC as i32))
                }
                None => {
                    file.extend_from_slice(bytes);
                    Ok(())
                }
            }
        }

        fn sync(&mut self) -> io::Result<()> {
            Ok(())
        }

        fn truncate(&mut self, len: u64) -> io::Result<()> {
            if self.failing_truncates > 0 {
                self.failing_truncates -= 1;
                return Err(io::Error::from_raw_os_error(Errno::EIO as i32));
            }
            self.bytes.lock().unwrap().truncate(len as usize);
            Ok(())
        }
    }

    fn flaky_writer(dir: &Path) -> (JournalWriter<FlakyJournal>, Arc<Mutex<Vec<u8>>>) {
        let journal = FlakyJournal::default();
        let bytes = journal.bytes.clone();
        let writer = JournalWriter {
            state_dir: dir.to_path_buf(),
            journal,
            good_len: 0,
            torn: false,
            lines: 0,
            mirror: HashMap::new(),
        };
        (writer, bytes)
    }

    /// A batch of claims of `tasks` at `tick`.
    fn batch(tasks: &[&str], tick: DateTime<Utc>) -> Vec<PendingWrite> {
        tasks
            .iter()
            .map(|task| PendingWrite {
                change: Change {
                    format: FORMAT_VERSION,
                    task: task.to_string(),
                    claimed: Some(tick),
                    result: None,
                    run: true,
                },
                durable: oneshot::channel().0,
            })
            .collect()
    }

    #[test]
    fn given_a_write_cut_short_by_a_full_disk_then_the_batch_fails_and_the_journal_is_as_before() {
        let dir = tempfile::tempdir().unwrap();
        let (mut writer, bytes) = flaky_writer(dir.path());
        writer.append(&batch(&["a"], at(60))).unwrap();
        let before = bytes.lock().unwrap().clone();

        writer.journal.short_write = Some(30);
        let error = writer.append(&batch(&["a", "b"], at(120))).unwrap_err();
        assert!(
            error.contains(&format!(
                "state_dir {} is full: free space on ",
                dir.path().display()
            )),
            "{error}"
        );
        assert_eq!(*bytes.lock().unwrap(), before, "the torn write was cut off");
        // The failed batch changed nothing: neither task's claim counts.
        assert_eq!(writer.mirror["a"].last_claimed, Some(at(60)));
        assert!(!writer.mirror.contains_key("b"));

        // The next record starts on a line of its own.
        writer.append(&batch(&["b"], at(120))).unwrap();
        let text = String::from_utf8(bytes.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        for line in lines {
            serde_json::from_str::<Change>(line).unwrap();
        }
    }

    #[test]
    fn given_a_torn_write_that_cannot_be_cut_off_then_nothing_is_appended_until_it_can() {
        let dir = tempfile::tempdir().unwrap();
        let (mut writer, bytes) = flaky_writer(dir.path());
        writer.append(&batch(&["a"], at(60))).unwrap();
        let before = bytes.lock().unwrap().clone();

        writer.journal.short_write = Some(30);
        writer.journal.failing_truncates = 2;
        let error = writer.append(&batch(&["a"], at(120))).unwrap_err();
        assert!(error.contains("cannot be cut off"), "{error}");
        let torn = bytes.lock().unwrap().clone();
        assert_eq!(torn.len(), before.len() + 30);

        // Still torn: the claim fails and nothing is glued onto the torn rest.
        let error = writer.append(&batch(&["a"], at(180))).unwrap_err();
        assert!(
            error.contains("ends in the torn rest of a write that failed"),
            "{error}"
        );
        assert!(
            error.contains("no change is recorded until it can be"),
            "{error}"
        );
        assert_eq!(*bytes.lock().unwrap(), torn);
        assert_eq!(writer.mirror["a"].last_claimed, Some(at(60)));

        // Once the truncation works, the torn rest goes first and claims succeed again.
        writer.append(&batch(&["a"], at(180))).unwrap();
        let text = String::from_utf8(bytes.lock().unwrap().clone()).unwrap();
        assert!(text.starts_with(std::str::from_utf8(&before).unwrap()));
        assert_eq!(text.lines().count(), 2, "{text}");
        assert_eq!(writer.mirror["a"].last_claimed, Some(at(180)));
    }

    #[test]
    fn atomic_write_replaces_content_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.json");
        write_atomically(&path, b"one").unwrap();
        write_atomically(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
