//! The journal writer: the one thread that appends changes to `<state_dir>/journal.jsonl`,
//! group-commits them (one `fdatasync` per batch), cuts a failed append back off, and folds the
//! journal into `snapshot.json` every [`COMPACT_AFTER`] lines.
//!
//! A batch is everything queued when the writer turns to it, plus what keeps arriving while it
//! gathers ([`Gather`]): the claims of one instant reach the writer one by one, a few hundred
//! microseconds apart, and an `fdatasync` costs milliseconds, so waiting a moment for the rest
//! of a burst commits it in one sync instead of one sync per early arrival. Those claims come
//! ahead of their instant; a change a process waits for ([`Batching::AtOnce`]) does not wait.
//!
//! Claims are answered only once synced ([`Durability::Synced`]): a claim lost with the host
//! could let a tick run twice. A run's result is answered once written
//! ([`Durability::Written`]): a crash of the daemon keeps it (it is in the file), a crash of the
//! host may lose it until the next sync, which comes with the next synced batch or
//! [`SYNC_WRITTEN_WITHIN`] after it, whichever is first. So an instant's results do not cost a
//! sync of their own: at ten fires a second that halves the syncs. A result lost with the host
//! leaves its tick claimed with no result, as if the host had died during the run (BRIEF:
//! `on_node_loss`).

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::errors::explain_io;
use super::queue::{Batching, Durability, Next, PendingWrite, Queue};
use super::{COMPACT_AFTER, FORMAT_VERSION, JOURNAL, SNAPSHOT, Snapshot, TaskRecord};

/// Changes answered as [`Durability::Written`] are synced at most this long after.
pub(super) const SYNC_WRITTEN_WITHIN: Duration = Duration::from_secs(1);

/// How long a batch keeps gathering after its first change before it is committed.
#[derive(Clone, Copy, Debug)]
pub(super) struct Gather {
    /// The batch is committed once this long passes with no new change...
    pub(super) quiet: Duration,
    /// ...or this long after its first change, whichever comes first.
    pub(super) at_most: Duration,
    /// A batch of results only (written, not synced) waits this long for more results, unless
    /// a claim comes: an instant's runs end within a few milliseconds of each other, and one
    /// write for them wakes the writer once instead of once per run.
    pub(super) results: Duration,
}

impl Gather {
    /// A lone change waits `quiet` (well under one `fdatasync`); a burst of claims whose
    /// arrivals are each within `quiet` of the one before is one batch, for up to `at_most`.
    pub(super) const DEFAULT: Gather = Gather {
        quiet: Duration::from_micros(1_000),
        at_most: Duration::from_micros(4_000),
        results: Duration::from_millis(5),
    };
}

/// The journal file as the writer uses it; a trait so that tests can make each step fail.
pub(super) trait JournalFile: Send + 'static {
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
pub(super) struct JournalWriter<F: JournalFile = File> {
    pub(super) state_dir: PathBuf,
    pub(super) journal: F,
    /// The journal's length up to the end of its last durable record.
    pub(super) good_len: u64,
    /// A failed append may have left part of its batch after `good_len`, and cutting it off
    /// failed too: nothing is appended until it is cut off.
    pub(super) torn: bool,
    /// Lines in the journal since the last compaction.
    pub(super) lines: usize,
    /// The state the journal and snapshot describe, for compaction.
    pub(super) mirror: HashMap<String, TaskRecord>,
    /// Since when written changes wait for a sync (`None`: everything written is synced).
    pub(super) unsynced_since: Option<Instant>,
    /// The last sync of written changes failed (logged once until one succeeds).
    pub(super) sync_failing: bool,
}

impl<F: JournalFile> JournalWriter<F> {
    /// Commits batches until the backend is dropped.
    // The writer is the shell's own blocking thread, outside tokio: its gathering waits are
    // real time (sleeps and the queue's timed waits), so it reads the real monotonic clock.
    #[allow(clippy::disallowed_methods)]
    pub(super) fn run(mut self, queue: &Queue, gather: Gather) {
        loop {
            let limit = self.unsynced_since.map(|since| {
                (since + SYNC_WRITTEN_WITHIN).saturating_duration_since(Instant::now())
            });
            let first = match queue.wait(limit) {
                Next::Changes(first) => first,
                Next::TimedOut => {
                    self.sync_written();
                    continue;
                }
                Next::Closed => {
                    self.sync_written();
                    return;
                }
            };
            let batch = gather_batch(first, queue, gather, Instant::now);
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

    /// Syncs the changes written since the last sync, if any; a failure is logged (once until
    /// a sync succeeds) and the sync is tried again [`SYNC_WRITTEN_WITHIN`] later.
    #[allow(clippy::disallowed_methods)]
    fn sync_written(&mut self) {
        if self.unsynced_since.is_none() {
            return;
        }
        match self.journal.sync() {
            Ok(()) => {
                self.unsynced_since = None;
                self.sync_failing = false;
            }
            Err(error) => {
                self.unsynced_since = Some(Instant::now());
                if !std::mem::replace(&mut self.sync_failing, true) {
                    tracing::error!(
                        "cannot sync the journal ({}); the last runs' results may be lost if the host goes down before a sync succeeds",
                        explain_io(&self.state_dir, &error)
                    );
                }
            }
        }
    }

    /// Appends the batch and syncs it unless every change in it is [`Durability::Written`];
    /// on failure the journal is left as it was before.
    // Written changes wait for their sync on the real monotonic clock, as the gathering does.
    #[allow(clippy::disallowed_methods)]
    pub(super) fn append(&mut self, batch: &[PendingWrite]) -> Result<(), String> {
        let durability = if batch.iter().any(|w| w.durability == Durability::Synced) {
            Durability::Synced
        } else {
            Durability::Written
        };
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
        if let Err(error) = self.journal.append(&bytes).and_then(|()| match durability {
            Durability::Synced => self.journal.sync(),
            Durability::Written => Ok(()),
        }) {
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
        match durability {
            Durability::Synced => {
                self.unsynced_since = None;
                self.sync_failing = false;
            }
            Durability::Written => {
                self.unsynced_since.get_or_insert_with(Instant::now);
            }
        }
        for write in batch {
            write.change.apply(&mut self.mirror);
        }
        self.lines += batch.len();
        Ok(())
    }

    /// Truncates the journal back to its last durable record.
    pub(super) fn cut_back(&mut self) -> io::Result<()> {
        self.journal.truncate(self.good_len)?;
        self.journal.sync()?;
        self.torn = false;
        Ok(())
    }

    /// Writes the whole state as the snapshot, then empties the journal.
    pub(super) fn compact(&mut self) -> io::Result<()> {
        let snapshot = Snapshot {
            format: FORMAT_VERSION,
            tasks: self.mirror.clone(),
        };
        let bytes = serde_json::to_vec(&snapshot).expect("snapshots always serialize");
        write_atomically(&self.state_dir.join(SNAPSHOT), &bytes)?;
        self.journal.truncate(0)?;
        self.good_len = 0;
        self.lines = 0;
        self.journal.sync()?;
        self.unsynced_since = None;
        Ok(())
    }
}

/// `first` and every change that arrives after it until `gather` says the batch is complete:
/// the writer sleeps `quiet` and takes what came, again until a sleep brings nothing or
/// `at_most` has passed. A `first` of results only gathers the results that come within
/// `gather.results` instead, unless a claim comes, which the batch then gathers with. A batch
/// that holds a change of [`Batching::AtOnce`] is complete as soon as it is taken. Each change
/// is answered only after the batch is written (and synced, for [`Durability::Synced`]), so
/// gathering delays answers but never answers one early.
fn gather_batch(
    first: Vec<PendingWrite>,
    queue: &Queue,
    gather: Gather,
    now: impl Fn() -> Instant,
) -> Vec<PendingWrite> {
    let at_once = |batch: &[PendingWrite]| batch.iter().any(|w| w.batching == Batching::AtOnce);
    let mut batch = first;
    if at_once(&batch) {
        batch.extend(queue.take());
        return batch;
    }
    if batch.iter().all(|w| w.durability == Durability::Written) {
        queue.linger(gather.results);
        batch.extend(queue.take());
        if at_once(&batch) || batch.iter().all(|w| w.durability == Durability::Written) {
            return batch;
        }
    }
    let deadline = now() + gather.at_most;
    loop {
        let left = deadline.saturating_duration_since(now());
        if left.is_zero() {
            batch.extend(queue.take());
            return batch;
        }
        std::thread::sleep(gather.quiet.min(left));
        let more = queue.take();
        if more.is_empty() {
            return batch;
        }
        batch.extend(more);
        if at_once(&batch) {
            return batch;
        }
    }
}

/// Writes `bytes` to `path` so that a crash leaves either the old or the new content.
pub(super) fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().expect("state files live in a directory");
    let mut temp = tempfile::NamedTempFile::new_in(dir)?;
    temp.write_all(bytes)?;
    temp.as_file().sync_all()?;
    temp.persist(path).map_err(|e| e.error)?;
    nix::unistd::fsync(File::open(dir)?.as_fd()).map_err(io::Error::from)
}

#[cfg(test)]
mod tests;
