//! A run's output kept on disk (`[log] output_limit`, docs/operating.md "A run's output"): the
//! node that runs a job writes its stdout and stderr, in the order read, each line with its
//! stream and time, to `<state_dir>/output/<task>/<fire id>`, and keeps a task's newest
//! `[scheduler] history_runs` files.
//!
//! One run's file is bounded by its limit: the first half of it is written as the lines come;
//! of the lines after that, the latest (up to the other half) are held and written when the
//! run ends, after a line that says how much was cut. From its first attempt's start until its
//! end record, its writer holds an exclusive `flock` on the file: a reader that can take a shared
//! lock and finds no end record (read again once it holds the lock) knows the run's node stopped
//! before it ended (incomplete).
//!
//! The file is text, one record per line, after a header ([`HEADER`]):
//!
//! ```text
//! zkcron-output 1 <fire id> <node>
//! <unix ms> a <attempt>          an attempt starts
//! <unix ms> o <text>             a line of stdout
//! <unix ms> e <text>             a line of stderr
//! <unix ms> c <lines> <bytes>    that much output was cut here (past the limit)
//! <unix ms> x <how it ended>     the run ended ("exit code 0", "timed out", ...)
//! <unix ms> i                    (only from a reader) the run's node stopped before its end
//! ```

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::clock::Clock;

/// The first word of a kept output file and its format's version.
pub const HEADER: &str = "zkcron-output 1";

/// The HTTP header that says how a served run stands ([`Standing::as_str`]).
pub const RUN_HEADER: &str = "x-zkcron-run";

/// The default of `[log] output_limit`: the bytes of one run's output kept on disk.
pub const DEFAULT_OUTPUT_LIMIT: u64 = 1 << 20;

/// Where the runs' output is kept, and how much of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputStore {
    /// `<state_dir>/output`: one directory per task below.
    pub dir: PathBuf,
    /// The bytes of one run's records kept at most (head and tail, a half each).
    pub limit: u64,
    /// How many runs of a task are kept (`[scheduler] history_runs`).
    pub keep: usize,
}

impl OutputStore {
    /// The directory of `task`'s runs.
    pub fn task_dir(&self, task: &str) -> PathBuf {
        self.dir.join(file_name(task))
    }

    /// The file of run `fire_id` (whose task is the part before its first `@`).
    pub fn path(&self, fire_id: &str) -> PathBuf {
        self.task_dir(task_of(fire_id)).join(file_name(fire_id))
    }
}

/// The task of a fire id: the part before its first `@` (a task name has none).
pub fn task_of(fire_id: &str) -> &str {
    fire_id.split('@').next().unwrap_or(fire_id)
}

/// `name` as one safe path element: bytes other than ASCII letters, digits, `.`, `_`, `-` and
/// `@` are written `%XX`, as is a leading `.` (no `.`, `..` or hidden file).
pub fn file_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for (i, b) in name.bytes().enumerate() {
        let plain =
            b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'@') || (b == b'.' && i > 0);
        if plain {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.is_empty() {
        out.push_str("%00");
    }
    out
}

/// The writer of one run's output file, shared by its attempts' output readers and the run.
#[derive(Debug)]
pub(super) struct KeptOutput {
    path: PathBuf,
    fire_id: String,
    node: String,
    limit: u64,
    clock: Clock,
    state: Mutex<Writer>,
}

#[derive(Debug, Default)]
struct Writer {
    /// `None` until the first record; then the open file, or `Err` after an error.
    file: Option<Result<File, ()>>,
    /// Records of the head not written yet: written in one `write` per read of the pipes
    /// ([`KeptOutput::flush`]).
    pending: String,
    /// Bytes written so far (the head).
    written: u64,
    /// Records held past the head, newest last, and their bytes.
    tail: VecDeque<String>,
    tail_bytes: u64,
    cut_lines: u64,
    cut_bytes: u64,
    /// The end is written: what a background process still prints is not held.
    finished: bool,
}

impl KeptOutput {
    pub(super) fn new(store: &OutputStore, fire_id: &str, node: &str, clock: Clock) -> KeptOutput {
        KeptOutput {
            path: store.path(fire_id),
            fire_id: fire_id.to_string(),
            node: node.to_string(),
            limit: store.limit,
            clock,
            state: Mutex::default(),
        }
    }

    /// Attempt `attempt` starts.
    pub(super) fn attempt(&self, attempt: u32) {
        self.record('a', &attempt.to_string());
    }

    /// A line of `stream` ("stdout" or "stderr").
    pub(super) fn line(&self, stream: &str, text: &str) {
        self.record(if stream == "stderr" { 'e' } else { 'o' }, text);
    }

    fn record(&self, kind: char, text: &str) {
        let record = format!("{} {kind} {text}\n", self.clock.now().timestamp_millis());
        let mut state = self.state.lock().expect("kept output poisoned");
        if state.finished {
            return;
        }
        let head = self.limit / 2;
        let len = record.len() as u64;
        if state.tail.is_empty() && state.written + len <= head {
            state.written += len;
            state.pending.push_str(&record);
            return;
        }
        state.tail_bytes += len;
        state.tail.push_back(record);
        while state.tail_bytes > self.limit - head && state.tail.len() > 1 {
            let out = state.tail.pop_front().expect("more than one");
            state.tail_bytes -= out.len() as u64;
            state.cut_lines += 1;
            state.cut_bytes += out.len() as u64;
        }
    }

    /// Writes the records held since the last call: after each read of the pipes, so that a
    /// reader following the run sees each line about when the job wrote it.
    pub(super) fn flush(&self) {
        let mut state = self.state.lock().expect("kept output poisoned");
        if !state.pending.is_empty() {
            let pending = std::mem::take(&mut state.pending);
            self.write(&mut state, &pending);
        }
    }

    /// Writes `text` to the file, opening it first; after an error, nothing more is written.
    fn write(&self, state: &mut Writer, text: &str) {
        let mut header = String::new();
        if state.file.is_none() {
            header = format!("{HEADER} {} {}\n", self.fire_id, file_name(&self.node));
            state.file = Some(self.open().map_err(|e| {
                tracing::warn!(
                    fire_id = %self.fire_id,
                    path = %self.path.display(),
                    "cannot keep this run's output ({e}): `zkcron logs` will not show it; check \
                     that the state dir is writable and has room"
                );
            }));
        }
        let Some(Ok(file)) = &mut state.file else {
            return;
        };
        // The header goes with the first records, in the same write.
        let written = if header.is_empty() {
            file.write_all(text.as_bytes())
        } else {
            header.push_str(text);
            file.write_all(header.as_bytes())
        };
        if let Err(e) = written {
            tracing::warn!(
                fire_id = %self.fire_id,
                path = %self.path.display(),
                "cannot keep the rest of this run's output ({e}): the file holds what came \
                 before; check that the state dir has room"
            );
            state.file = Some(Err(()));
        }
    }

    /// Creates the file (mode 0600, its directories 0700: output may hold secrets) and locks
    /// it; the header goes with the first write.
    fn open(&self) -> io::Result<File> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let create = || {
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(&self.path)
        };
        // The task's directory is there but for its first run: made only when missing.
        let file = match create() {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if let Some(dir) = self.path.parent() {
                    std::fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o700)
                        .create(dir)?;
                }
                create()?
            }
            opened => opened?,
        };
        // Locked before it is emptied: a reader never finds it empty and unlocked.
        file.try_lock().map_err(io::Error::other)?;
        file.set_len(0)?;
        Ok(file)
    }

    /// The run ended as `exit` says: writes what was cut and the tail, the end record, and
    /// closes the file (releasing its lock). `keep` runs of the task stay.
    pub(super) fn finish(&self, exit: &str, keep: usize) {
        let mut state = self.state.lock().expect("kept output poisoned");
        let mut rest = std::mem::take(&mut state.pending);
        if state.cut_lines > 0 {
            let now = self.clock.now().timestamp_millis();
            rest.push_str(&format!(
                "{now} c {} {}\n",
                state.cut_lines, state.cut_bytes
            ));
        }
        for record in std::mem::take(&mut state.tail) {
            rest.push_str(&record);
        }
        // One record: a reason with a line break in it stays on its line.
        let exit = exit.replace(['\n', '\r'], " ");
        rest.push_str(&format!(
            "{} x {exit}\n",
            self.clock.now().timestamp_millis()
        ));
        self.write(&mut state, &rest);
        let opened = matches!(state.file, Some(Ok(_)));
        state.file = Some(Err(()));
        state.finished = true;
        drop(state);
        if opened && let Some(dir) = self.path.parent() {
            prune(dir, keep);
        }
    }
}

/// Removes the oldest files of `dir` (by modification time) beyond the newest `keep`.
fn prune(dir: &Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    // One listing, counted; the entries' times only when there are too many.
    if entries.count() <= keep {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(std::time::SystemTime, PathBuf)> = entries
        .filter_map(|e| {
            let e = e.ok()?;
            Some((e.metadata().ok()?.modified().ok()?, e.path()))
        })
        .collect();
    files.sort();
    let old = files.len().saturating_sub(keep);
    for (_, path) in &files[..old] {
        // A live run's file (runs that overlap) stays: its writer holds it.
        let live = File::open(path).is_ok_and(|f| f.try_lock_shared().is_err());
        if live {
            continue;
        }
        if let Err(e) = std::fs::remove_file(path) {
            tracing::warn!(path = %path.display(), "cannot remove an old run's output ({e})");
        }
    }
}

/// How a kept run stands, as a reader finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Its writer holds the file: the run goes on.
    Live,
    /// It has its end record.
    Ended,
    /// No end record and no writer: its node stopped before the run ended.
    Incomplete,
}

impl Standing {
    pub fn as_str(self) -> &'static str {
        match self {
            Standing::Live => "live",
            Standing::Ended => "ended",
            Standing::Incomplete => "incomplete",
        }
    }
}

/// A kept output file opened for reading.
#[derive(Debug)]
pub struct OutputFile {
    file: File,
    partial: Vec<u8>,
    ended: bool,
}

/// At most this much of a kept output is read at once.
pub const READ_CHUNK: usize = 64 * 1024;

/// What one [`OutputFile::poll`] found.
#[derive(Debug)]
pub struct Polled {
    /// Whole lines, at most about [`READ_CHUNK`] bytes.
    pub bytes: Vec<u8>,
    /// How the run stands after them.
    pub standing: Standing,
    /// More is written already: poll again at once.
    pub more: bool,
}

impl OutputFile {
    /// Opens the kept output at `path`, checking its header; `Ok(None)` when there is none.
    pub fn open(path: &Path) -> Result<Option<OutputFile>, String> {
        let shown = path.display();
        let mut file = match open_regular(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                return Err(format!(
                    "cannot read {shown}: permission denied: a run's output is the daemon's own \
                     (mode 600); run this as root or as zkcron's user (`sudo -u zkcron zkcron \
                     logs ...`)"
                ));
            }
            Err(e) => return Err(format!("cannot read {shown}: {e}")),
        };
        // Only the first line: an empty file is a run whose first write has not come yet.
        let mut first = vec![0; HEADER.len()];
        let read =
            read_up_to(&mut file, &mut first).map_err(|e| format!("cannot read {shown}: {e}"))?;
        if !HEADER.as_bytes().starts_with(&first[..read]) {
            return Err(format!(
                "{shown} is not a kept output of this release (its first line is not \"{HEADER} \
                 ...\"); it was left as it is"
            ));
        }
        file.rewind()
            .map_err(|e| format!("cannot read {shown}: {e}"))?;
        Ok(Some(OutputFile {
            file,
            partial: Vec::new(),
            ended: false,
        }))
    }

    /// The whole lines written since the last call, at most about [`READ_CHUNK`] bytes, and
    /// whether more is there already.
    fn read_new(&mut self) -> io::Result<(Vec<u8>, bool)> {
        let mut bytes = std::mem::take(&mut self.partial);
        let got = (&self.file)
            .take(READ_CHUNK as u64)
            .read_to_end(&mut bytes)?;
        let more = got == READ_CHUNK;
        let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        self.partial = bytes.split_off(whole);
        if !self.ended {
            self.ended = bytes[..]
                .split(|b| *b == b'\n')
                .any(|line| record_kind(line) == Some(b'x'));
        }
        Ok((bytes, more))
    }

    /// Reads what was written since the last poll and says how the run stands after it. A
    /// run without its end record whose writer let go of the file is read once more (its end
    /// may have come just before), then is incomplete.
    pub fn poll(&mut self) -> io::Result<Polled> {
        let (mut bytes, more) = self.read_new()?;
        if self.ended || more {
            let standing = if self.ended {
                Standing::Ended
            } else {
                Standing::Live
            };
            return Ok(Polled {
                bytes,
                standing,
                more: more && !self.ended,
            });
        }
        if self.file.try_lock_shared().is_err() {
            return Ok(Polled {
                bytes,
                standing: Standing::Live,
                more: false,
            });
        }
        let _ = self.file.unlock();
        let (rest, more) = self.read_new()?;
        bytes.extend(rest);
        let standing = if self.ended {
            Standing::Ended
        } else if more {
            Standing::Live
        } else {
            Standing::Incomplete
        };
        Ok(Polled {
            bytes,
            standing,
            more,
        })
    }

    /// How the run stands now, without reading it through: live while its writer holds the
    /// file, else ended when its last record is the end.
    pub fn standing_now(&self) -> io::Result<Standing> {
        if self.file.try_lock_shared().is_err() {
            return Ok(Standing::Live);
        }
        let _ = self.file.unlock();
        let len = self.file.metadata()?.len();
        let mut last = vec![0; 4096.min(len as usize)];
        let mut file = &self.file;
        file.seek(io::SeekFrom::Start(len - last.len() as u64))?;
        let read = read_up_to(&mut file, &mut last)?;
        file.rewind()?;
        let ended = last[..read]
            .split(|b| *b == b'\n')
            .rfind(|line| !line.is_empty())
            .is_some_and(|line| record_kind(line) == Some(b'x'));
        Ok(if ended {
            Standing::Ended
        } else {
            Standing::Incomplete
        })
    }
}

/// Reads into `buffer` until it is full or the file ends; how much was read.
fn read_up_to(mut file: impl Read, buffer: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read(&mut buffer[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// Opens `path` for reading if it is a regular file, never following a link or opening a
/// FIFO or device.
fn open_regular(path: &Path) -> io::Result<File> {
    let seen = std::fs::symlink_metadata(path)?;
    if !seen.file_type().is_file() {
        return Err(io::Error::other(format!(
            "not a regular file ({}): zkcron writes only regular files there",
            crate::files::kind_of(seen.file_type())
        )));
    }
    crate::files::open_to_read(path, false)
}

/// The kind letter of a record line (`<ms> <kind> ...`).
fn record_kind(line: &[u8]) -> Option<u8> {
    let space = line.iter().position(|b| *b == b' ')?;
    line.get(space + 1).copied()
}

/// The record a reader adds after a run whose node stopped before its end.
pub fn incomplete_record(now_ms: i64) -> String {
    format!("{now_ms} i\n")
}

/// One record of a kept output, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record<'a> {
    Header {
        fire_id: &'a str,
        node: &'a str,
    },
    Attempt {
        at_ms: i64,
        attempt: &'a str,
    },
    Line {
        at_ms: i64,
        stderr: bool,
        text: &'a str,
    },
    Cut {
        at_ms: i64,
        lines: &'a str,
        bytes: &'a str,
    },
    End {
        at_ms: i64,
        exit: &'a str,
    },
    Incomplete {
        at_ms: i64,
    },
}

/// Parses one line of a kept output; `None` for a line of no known shape (never guessed).
pub fn parse_record(line: &str) -> Option<Record<'_>> {
    if let Some(rest) = line.strip_prefix(HEADER) {
        let mut words = rest.split_whitespace();
        return Some(Record::Header {
            fire_id: words.next()?,
            node: words.next().unwrap_or_default(),
        });
    }
    let (at, rest) = line.split_once(' ')?;
    let at_ms: i64 = at.parse().ok()?;
    let (kind, text) = rest.split_at_checked(1)?;
    let text = text.strip_prefix(' ').unwrap_or(text);
    Some(match kind {
        "a" => Record::Attempt {
            at_ms,
            attempt: text,
        },
        "o" => Record::Line {
            at_ms,
            stderr: false,
            text,
        },
        "e" => Record::Line {
            at_ms,
            stderr: true,
            text,
        },
        "c" => {
            let (lines, bytes) = text.split_once(' ')?;
            Record::Cut {
                at_ms,
                lines,
                bytes,
            }
        }
        "x" => Record::End { at_ms, exit: text },
        "i" => Record::Incomplete { at_ms },
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
