//! `history/<task>.json`: each task's last runs, written behind the runs.
//!
//! The tails of recently appended histories stay in memory, so a run's end costs one entry's
//! serialization and no file access: the entry joins its task's tail, which is marked dirty,
//! and the `zkcron-history` thread writes the dirty tails' files [`FLUSH_AFTER`] after the
//! first of them became dirty (sooner once they hold [`FLUSH_BYTES`]), each through a temp
//! file and a rename, unsynced. An every-second task's file is so written once per
//! [`FLUSH_AFTER`] instead of once per run: the write and rename (a new inode, the old one's
//! blocks freed) was a third of the daemon's CPU per fire (docs/BENCHMARKS.md). Reads
//! (`zkcron history`) come from the tail when it is in memory, so they see a run as soon as
//! it ended. Dropping [`HistoryFiles`] (the daemon's exit) writes every dirty tail first; a
//! daemon killed with SIGKILL loses the entries of at most the last [`FLUSH_AFTER`] (the fire
//! records in the journal are not affected).
//!
//! The file is unchanged: the bytes written are exactly `serde_json::to_vec(&HistoryRecord)`
//! of the runs [`crate::coord::record::append_history`] would keep (same dedup by fire id, same bounds), and
//! a task not in memory is read from its file first, so a file written by an older release is
//! read as before and an older release reads what this one writes. Memory is bounded: at most
//! [`CACHE_BYTES`] of clean entries' JSON; the least recently appended clean tasks go first
//! (and are read from their files again when they next end a run). Dirty tails are never
//! dropped before their file is written.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::FORMAT_VERSION;
use crate::coord::record::{self, HISTORY_MAX_BYTES};
use crate::coord::records::{HistoryEntry, HistoryRecord};

pub(super) const HISTORY_DIR: &str = "history";

/// A dirty tail's file is written at most this long after the first unwritten run.
pub(super) const FLUSH_AFTER: Duration = Duration::from_secs(5);

/// Dirty tails are written at once when they hold this much JSON.
const FLUSH_BYTES: usize = CACHE_BYTES / 2;

/// The most JSON kept in memory, over all tasks (every-second tasks with a full history of
/// ~250-byte entries: ~40 of them).
pub(super) const CACHE_BYTES: usize = 1 << 20;

/// The envelope's allowance in [`crate::coord::record::append_history`]'s size bound.
const ENVELOPE: usize = 32;

/// One stored run: its fire id (for the dedup) and its JSON.
struct Run {
    fire_id: String,
    json: Box<[u8]>,
}

/// One task's runs, oldest first, as they are in its file.
struct Tail {
    runs: VecDeque<Run>,
    /// Σ (JSON length + 1) of `runs`, as [`crate::coord::record::append_history`] counts it.
    bytes: usize,
    /// When it was last appended to ([`Tails::clock`]), for the eviction.
    used: u64,
    /// Holds runs its file does not.
    dirty: bool,
}

impl Tail {
    fn from_entries(entries: Vec<HistoryEntry>) -> Tail {
        let mut tail = Tail {
            runs: VecDeque::with_capacity(entries.len() + 1),
            bytes: 0,
            used: 0,
            dirty: false,
        };
        for entry in entries {
            tail.push(entry);
        }
        tail
    }

    fn push(&mut self, entry: HistoryEntry) {
        let json = serde_json::to_vec(&entry)
            .expect("serializes")
            .into_boxed_slice();
        self.bytes += json.len() + 1;
        self.runs.push_back(Run {
            fire_id: entry.fire_id,
            json,
        });
    }

    fn pop_oldest(&mut self) {
        if let Some(run) = self.runs.pop_front() {
            self.bytes -= run.json.len() + 1;
        }
    }

    /// [`crate::coord::record::append_history`] on the tail; whether it changed.
    fn append(&mut self, entry: HistoryEntry, limit: usize) -> bool {
        if self.runs.iter().any(|run| run.fire_id == entry.fire_id) {
            return false;
        }
        self.push(entry);
        let limit = limit.max(1);
        while self.runs.len() > limit {
            self.pop_oldest();
        }
        while ENVELOPE + self.bytes > HISTORY_MAX_BYTES && self.runs.len() > 1 {
            self.pop_oldest();
        }
        true
    }

    /// The file's bytes: `serde_json::to_vec(&HistoryRecord { format, runs })`.
    fn render(&self, format: u32) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes + ENVELOPE);
        out.extend_from_slice(b"{\"format\":");
        out.extend_from_slice(format.to_string().as_bytes());
        out.extend_from_slice(b",\"runs\":[");
        for (i, run) in self.runs.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&run.json);
        }
        out.extend_from_slice(b"]}");
        out
    }
}

/// The tails of the tasks that ended runs lately.
#[derive(Default)]
pub(super) struct Tails {
    tasks: HashMap<String, Tail>,
    /// Σ `Tail::bytes`.
    bytes: usize,
    /// Σ `Tail::bytes` of the dirty tails.
    dirty_bytes: usize,
    /// Since when some tail is dirty (`None`: none is).
    dirty_since: Option<Instant>,
    clock: u64,
    /// The writer is asked to write what is dirty and stop.
    closing: bool,
}

impl Tails {
    /// Appends `entry` to `task`'s history, whose file holds `stored` (called only when the
    /// task is not in memory); whether the history changed (it did not if the run is there
    /// already). A change leaves the tail dirty (since `now`, if nothing was).
    pub(super) fn append(
        &mut self,
        task: &str,
        stored: impl FnOnce() -> Vec<HistoryEntry>,
        entry: HistoryEntry,
        limit: usize,
        now: Instant,
    ) -> bool {
        self.clock += 1;
        let clock = self.clock;
        let before = self.tasks.get(task).map_or(0, |tail| tail.bytes);
        let tail = self
            .tasks
            .entry(task.to_string())
            .or_insert_with(|| Tail::from_entries(stored()));
        let was_dirty = tail.dirty;
        let changed = tail.append(entry, limit);
        tail.used = clock;
        tail.dirty |= changed;
        let (after, dirty) = (tail.bytes, tail.dirty);
        self.bytes = self.bytes - before + after;
        if was_dirty {
            self.dirty_bytes = self.dirty_bytes - before + after;
        } else if dirty {
            self.dirty_bytes += after;
            self.dirty_since.get_or_insert(now);
        }
        self.evict(task);
        changed
    }

    /// `task`'s file as it should be now, if its tail is in memory.
    #[cfg(test)]
    pub(super) fn render(&self, task: &str) -> Option<Vec<u8>> {
        self.tasks.get(task).map(|tail| tail.render(FORMAT_VERSION))
    }

    /// `task`'s runs, oldest first, if its tail is in memory.
    fn runs(&self, task: &str) -> Option<Vec<HistoryEntry>> {
        self.tasks.get(task).map(|tail| {
            tail.runs
                .iter()
                .filter_map(|run| serde_json::from_slice(&run.json).ok())
                .collect()
        })
    }

    /// The files of the dirty tails, which are clean from now on (their files are written
    /// next); the clean tails over the bound are dropped.
    fn take_dirty(&mut self) -> Vec<(String, Vec<u8>)> {
        let files: Vec<_> = self
            .tasks
            .iter_mut()
            .filter(|(_, tail)| tail.dirty)
            .map(|(task, tail)| {
                tail.dirty = false;
                (task.clone(), tail.render(FORMAT_VERSION))
            })
            .collect();
        self.dirty_bytes = 0;
        self.dirty_since = None;
        self.evict("");
        files
    }

    /// Forgets the least recently used clean tails (never `keep`) while over [`CACHE_BYTES`].
    fn evict(&mut self, keep: &str) {
        while self.bytes > CACHE_BYTES {
            let Some(oldest) = self
                .tasks
                .iter()
                .filter(|(task, tail)| !tail.dirty && task.as_str() != keep)
                .min_by_key(|(_, tail)| tail.used)
                .map(|(task, _)| task.clone())
            else {
                return;
            };
            if let Some(tail) = self.tasks.remove(&oldest) {
                self.bytes -= tail.bytes;
            }
        }
    }

    /// Whether `task`'s tail is in memory.
    #[cfg(test)]
    pub(super) fn holds(&self, task: &str) -> bool {
        self.tasks.contains_key(task)
    }
}

/// The run histories of one state dir, and the thread that writes them.
pub(super) struct HistoryFiles {
    shared: Arc<Shared>,
    history_runs: usize,
    writer: Option<JoinHandle<()>>,
}

/// What the appenders and the writer thread share.
struct Shared {
    state_dir: PathBuf,
    tails: Mutex<Tails>,
    /// Signalled when the first tail becomes dirty, when the dirty tails pass
    /// [`FLUSH_BYTES`], and on close.
    wake: Condvar,
    /// Tasks whose last history write failed (logged once until one succeeds).
    failing: Mutex<BTreeSet<String>>,
}

impl HistoryFiles {
    /// The histories of `state_dir`, written [`FLUSH_AFTER`] behind the runs.
    pub(super) fn open(state_dir: &Path) -> io::Result<HistoryFiles> {
        HistoryFiles::with_flush_after(state_dir, FLUSH_AFTER)
    }

    /// [`HistoryFiles::open`] with another delay (tests).
    pub(super) fn with_flush_after(state_dir: &Path, after: Duration) -> io::Result<HistoryFiles> {
        let shared = Arc::new(Shared {
            state_dir: state_dir.to_path_buf(),
            tails: Mutex::default(),
            wake: Condvar::new(),
            failing: Mutex::default(),
        });
        let writer = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("zkcron-history".into())
                .spawn(move || shared.write_behind(after))?
        };
        Ok(HistoryFiles {
            shared,
            history_runs: record::DEFAULT_HISTORY_RUNS,
            writer: Some(writer),
        })
    }

    pub(super) fn set_history_runs(&mut self, runs: usize) {
        self.history_runs = runs.max(1);
    }

    /// The last `n` runs of `task`, newest first.
    pub(super) fn history(&self, task: &str, n: usize) -> Vec<HistoryEntry> {
        let held = self.shared.lock().runs(task);
        let mut runs = held.unwrap_or_else(|| read_history(&self.shared.path(task)));
        runs.reverse();
        runs.truncate(n);
        runs
    }

    /// The tasks that have a history: runs held here, or a file in the state dir. Asking only
    /// these spares a status of 100,000 tasks an attempt to open a file for each.
    pub(super) fn tasks_with_history(&self) -> HashSet<String> {
        // The held tails first: one written and dropped meanwhile has its file by the listing.
        let mut tasks: HashSet<String> = self.shared.lock().tasks.keys().cloned().collect();
        if let Ok(dir) = std::fs::read_dir(self.shared.state_dir.join(HISTORY_DIR)) {
            for entry in dir.flatten() {
                let file = entry.file_name();
                if let Some(task) = file.to_str().and_then(|f| f.strip_suffix(".json")) {
                    tasks.insert(task.to_string());
                }
            }
        }
        tasks
    }

    /// Appends a run to its task's history; its file is written within [`FLUSH_AFTER`].
    // The writer thread waits on the real monotonic clock, outside tokio.
    #[allow(clippy::disallowed_methods)]
    pub(super) fn append(&self, task: &str, entry: HistoryEntry) {
        let path = self.shared.path(task);
        let mut tails = self.shared.lock();
        let first = tails.dirty_since.is_none();
        let below = tails.dirty_bytes <= FLUSH_BYTES;
        let now = Instant::now();
        tails.append(task, || read_history(&path), entry, self.history_runs, now);
        if (first && tails.dirty_since.is_some()) || (below && tails.dirty_bytes > FLUSH_BYTES) {
            self.shared.wake.notify_one();
        }
    }

    /// Writes every dirty tail's file now (on this thread).
    pub(super) fn flush(&self) {
        let files = self.shared.lock().take_dirty();
        self.shared.write(files);
    }
}

impl Drop for HistoryFiles {
    /// Writes what is dirty: the daemon's exit loses no history.
    fn drop(&mut self) {
        self.shared.lock().closing = true;
        self.shared.wake.notify_one();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
        self.flush();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Tails> {
        self.tails.lock().expect("history lock poisoned")
    }

    fn path(&self, task: &str) -> PathBuf {
        self.state_dir
            .join(HISTORY_DIR)
            .join(format!("{task}.json"))
    }

    /// The writer thread: waits for a dirty tail, lets it gather runs for `after` (or until
    /// the dirty tails pass [`FLUSH_BYTES`]), writes the files, and again until closed.
    #[allow(clippy::disallowed_methods)]
    fn write_behind(&self, after: Duration) {
        let mut tails = self.lock();
        loop {
            let Some(since) = tails.dirty_since else {
                if tails.closing {
                    return;
                }
                tails = self.wake.wait(tails).expect("history lock poisoned");
                continue;
            };
            let due = since + after;
            let now = Instant::now();
            if now < due && !tails.closing && tails.dirty_bytes <= FLUSH_BYTES {
                tails = self
                    .wake
                    .wait_timeout(tails, due - now)
                    .expect("history lock poisoned")
                    .0;
                continue;
            }
            let files = tails.take_dirty();
            drop(tails);
            self.write(files);
            tails = self.lock();
        }
    }

    /// Writes `files`; a failure is logged once per task (its tail keeps the runs, and its
    /// next write holds them).
    fn write(&self, files: Vec<(String, Vec<u8>)>) {
        for (task, bytes) in files {
            let path = self.path(&task);
            let written = match replace(&path, &bytes) {
                // The history dir, not the state dir: one that was removed stays removed.
                Err(error) if error.kind() == io::ErrorKind::NotFound => {
                    std::fs::create_dir(path.parent().expect("in a directory"))
                        .and_then(|()| replace(&path, &bytes))
                }
                other => other,
            };
            let mut failing = self.failing.lock().expect("history lock poisoned");
            match written {
                Ok(()) => {
                    failing.remove(&task);
                }
                Err(error) => {
                    if failing.insert(task.clone()) {
                        tracing::warn!(
                            task,
                            path = %path.display(),
                            "cannot append to the run history ({}); runs go on, `zkcron history` misses them until a write succeeds",
                            super::errors::explain_io(&self.state_dir, &error)
                        );
                    }
                }
            }
        }
    }
}

/// Replaces `path` with `bytes` through a rename (readers see the old or the new content),
/// without syncing: the history is best-effort, and a sync per write would compete with the
/// journal's syncs, which claims wait for.
fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let dir = path.parent().expect("history files live in a directory");
    let mut temp = tempfile::NamedTempFile::new_in(dir)?;
    temp.write_all(bytes)?;
    temp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// A task's stored runs, oldest first (none if the file is missing or unreadable).
fn read_history(path: &Path) -> Vec<HistoryEntry> {
    std::fs::read(path)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<HistoryRecord>(&bytes).ok())
        .map(|record| record.runs)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
