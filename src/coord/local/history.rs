//! The tails of `history/<task>.json` kept in memory, so that a run's end costs one entry's
//! serialization and one file write instead of reading, parsing and re-serializing the whole
//! file (up to [`crate::coord::record::DEFAULT_HISTORY_RUNS`] entries) on every fire.
//!
//! The file is unchanged: the bytes written are exactly `serde_json::to_vec(&HistoryRecord)`
//! of the runs [`crate::coord::record::append_history`] would keep (same dedup by fire id, same bounds), and
//! a task not in memory is read from its file first, so a file written by an older release is
//! read as before and an older release reads what this one writes. The file is still the
//! record: [`Manual::history`](super::manual::Manual) reads it. Memory is bounded: at most
//! [`CACHE_BYTES`] of entries' JSON; the least recently appended tasks go first (and are read
//! from their files again when they next end a run).

use std::collections::{HashMap, VecDeque};

use crate::coord::record::HISTORY_MAX_BYTES;
use crate::coord::zk::wire::HistoryEntry;

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
}

impl Tail {
    fn from_entries(entries: Vec<HistoryEntry>) -> Tail {
        let mut tail = Tail {
            runs: VecDeque::with_capacity(entries.len() + 1),
            bytes: 0,
            used: 0,
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
    clock: u64,
}

impl Tails {
    /// Appends `entry` to `task`'s history, whose file holds `stored` (called only when the
    /// task is not in memory); the file's new bytes, or `None` if the run is there already.
    pub(super) fn append(
        &mut self,
        task: &str,
        stored: impl FnOnce() -> Vec<HistoryEntry>,
        entry: HistoryEntry,
        limit: usize,
        format: u32,
    ) -> Option<Vec<u8>> {
        self.clock += 1;
        let clock = self.clock;
        let counted = self.tasks.get(task).map_or(0, |tail| tail.bytes);
        let tail = self
            .tasks
            .entry(task.to_string())
            .or_insert_with(|| Tail::from_entries(stored()));
        let changed = tail.append(entry, limit);
        tail.used = clock;
        let bytes = changed.then(|| tail.render(format));
        self.bytes = self.bytes - counted + tail.bytes;
        self.evict(task);
        bytes
    }

    /// Forgets the least recently used tails (never `keep`) while over [`CACHE_BYTES`].
    fn evict(&mut self, keep: &str) {
        while self.bytes > CACHE_BYTES {
            let Some(oldest) = self
                .tasks
                .iter()
                .filter(|(task, _)| task.as_str() != keep)
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

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
