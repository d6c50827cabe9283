//! Reading the state dir: its lock, the snapshot and the journal replayed over it, formats
//! this release does not read, damage moved aside, and I/O errors in the operator's words.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use nix::fcntl::{Flock, FlockArg};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::errors::explain_io;
use super::journal::{JournalWriter, write_atomically};
use super::{Change, JOURNAL, SNAPSHOT, Snapshot, TaskRecord};
use crate::coord::CoordError;

/// The state formats this release reads. A file in any other is refused, never guessed at.
pub(super) const READABLE_FORMATS: [u32; 1] = [1];

/// How every record starts: a JSON object whose first field is `format` (serde writes fields in
/// declaration order). Replay resynchronises on it after the torn rest of a failed write.
pub(super) const RECORD_START: &[u8] = b"{\"format\":";

/// Only the `format` of a record, to tell a record in an unknown format from a damaged one.
#[derive(Deserialize)]
pub(super) struct FormatOnly {
    pub(super) format: u32,
}

/// Takes the state dir's lock (creating the dir if needed) and records our pid in it for the
/// operator; if another process holds it, says who and what to do (`busy_fix`).
pub(super) fn lock_state_dir(state_dir: &Path, busy_fix: &str) -> Result<Flock<File>, CoordError> {
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
/// A damaged file's copy is named with `now`.
pub(super) fn open_state(
    state_dir: &Path,
    busy_fix: &str,
    now: DateTime<Utc>,
) -> Result<(Flock<File>, JournalWriter), CoordError> {
    let lock = lock_state_dir(state_dir, busy_fix)?;
    let state = read_state(state_dir)?;
    report_damage(state_dir, &state, now);
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
        unsynced_since: None,
        sync_failing: false,
    };
    if state.journal_lines > 0 || !state.torn_tail.is_empty() {
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
pub(super) struct StateRead {
    pub(super) records: HashMap<String, TaskRecord>,
    /// Complete journal lines read (0 and no torn tail: the journal need not be compacted).
    pub(super) journal_lines: usize,
    /// Why the snapshot could not be read, if it could not.
    pub(super) corrupt_snapshot: Option<String>,
    /// Complete journal lines that held no readable record.
    pub(super) unreadable_lines: usize,
    /// Journal lines that began with the torn rest of a failed write and ended in a good record.
    pub(super) recovered_lines: usize,
    /// The bytes after the last complete line: a write that never finished, never acknowledged.
    pub(super) torn_tail: Vec<u8>,
}

/// Reads the snapshot and replays the journal over it. An unknown format is an error; damage is
/// described in the result for the caller to report.
pub(super) fn read_state(state_dir: &Path) -> Result<StateRead, CoordError> {
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
            state.torn_tail = line;
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
pub(super) fn parse_journal_line(
    path: &Path,
    line: &[u8],
) -> Result<Option<(Change, bool)>, CoordError> {
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
pub(super) fn parse_record<T: DeserializeOwned>(
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

/// Reads the state file `name` of `state_dir`: the default when it is missing; moved aside (and
/// the default) when it is damaged; an error when it cannot be read or is in a format this
/// release does not read. A damaged file is moved aside under a name stamped with `now`.
pub(super) fn read_state_file<T: DeserializeOwned + Default>(
    state_dir: &Path,
    name: &str,
    format: impl Fn(&T) -> u32,
    now: DateTime<Utc>,
) -> Result<T, CoordError> {
    let path = state_dir.join(name);
    match fs::read(&path) {
        Ok(bytes) => match parse_record::<T>(&path, &bytes, format)? {
            Ok(file) => Ok(file),
            Err(error) => {
                move_aside(&path, &error.to_string(), now);
                Ok(T::default())
            }
        },
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(T::default()),
        Err(error) => Err(state_io(
            state_dir,
            format!("cannot read {}", path.display()),
            error,
        )),
    }
}

pub(super) fn check_format(path: &Path, format: u32) -> Result<(), CoordError> {
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
pub(super) fn report_damage(state_dir: &Path, state: &StateRead, now: DateTime<Utc>) {
    if let Some(error) = &state.corrupt_snapshot {
        move_aside(&state_dir.join(SNAPSHOT), error, now);
    }
    let journal_path = state_dir.join(JOURNAL);
    if state.unreadable_lines > 0 {
        // The unreadable lines are lost; keep a copy for the operator.
        let aside = aside_path(&journal_path, now);
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
    if !state.torn_tail.is_empty() {
        tracing::warn!(
            path = %journal_path.display(),
            bytes = state.torn_tail.len(),
            dropped = %torn_tail_text(&state.torn_tail),
            "the journal's last record was cut short: zkcron or the host stopped during its \
             write. That write was never acknowledged, so no tick ran for it; its {} byte(s) are \
             dropped and nothing needs doing",
            state.torn_tail.len()
        );
    }
}

/// The torn rest of a record as text for the log: lossy UTF-8, at most
/// [`TORN_TAIL_SHOWN`] bytes of it.
pub(super) fn torn_tail_text(tail: &[u8]) -> String {
    let shown = &tail[..tail.len().min(TORN_TAIL_SHOWN)];
    let mut text = String::from_utf8_lossy(shown).into_owned();
    if shown.len() < tail.len() {
        text.push_str(&format!("... ({} more bytes)", tail.len() - shown.len()));
    }
    text
}

/// How much of a torn record the log shows: enough for the fields a record starts with (its
/// task, then its claim or its result's tick) while a damaged journal cannot flood the log.
pub(super) const TORN_TAIL_SHOWN: usize = 256;

/// Where a damaged `path` is kept, named with `now`.
pub(super) fn aside_path(path: &Path, now: DateTime<Utc>) -> PathBuf {
    let stamp = now.format("%Y%m%dT%H%M%SZ");
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!("{name}.corrupt-{stamp}"))
}

/// Moves a corrupt state file aside and says so; the node continues without its records.
pub(super) fn move_aside(path: &Path, error: &str, now: DateTime<Utc>) {
    let aside = aside_path(path, now);
    let moved = fs::rename(path, &aside);
    tracing::error!(
        path = %path.display(),
        moved_to = %aside.display(),
        move_error = moved.err().map(|e| e.to_string()),
        "state file is corrupt ({error}); moved it aside and continuing without its fire records \
         (missed ticks before now are not caught up)"
    );
}

/// A JSON state file of its own (`triggers.json`, `backfills.json`), kept in memory and written
/// whole, synced, on each change.
pub(super) struct KeptFile<T> {
    state_dir: PathBuf,
    name: &'static str,
    file: Mutex<T>,
}

impl<T: Serialize> KeptFile<T> {
    /// Keeps `file`, read from `state_dir`'s `name`; writes it back at once if it `changed` as
    /// it was read.
    pub(super) fn new(
        state_dir: &Path,
        name: &'static str,
        file: T,
        changed: bool,
    ) -> Result<KeptFile<T>, CoordError> {
        let kept = KeptFile {
            state_dir: state_dir.to_path_buf(),
            name,
            file: Mutex::new(file),
        };
        if changed {
            kept.save(&kept.lock())?;
        }
        Ok(kept)
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, T> {
        self.file.lock().expect("state file lock poisoned")
    }

    /// Writes `file` (the content behind [`KeptFile::lock`]) whole.
    pub(super) fn save(&self, file: &T) -> Result<(), CoordError> {
        let bytes = serde_json::to_vec(file).expect("serializes");
        write_state_file(&self.state_dir, self.name, &bytes)
    }
}

/// Writes the state file `name` of `state_dir` whole (atomically, synced).
pub(super) fn write_state_file(
    state_dir: &Path,
    name: &str,
    bytes: &[u8],
) -> Result<(), CoordError> {
    let path = state_dir.join(name);
    write_atomically(&path, bytes)
        .map_err(|error| state_io(state_dir, format!("cannot write {}", path.display()), error))
}

/// An I/O error in the state dir as a [`CoordError`], in the operator's words.
pub(super) fn state_io(state_dir: &Path, context: String, error: io::Error) -> CoordError {
    CoordError::Io {
        context,
        error: io::Error::new(error.kind(), explain_io(state_dir, &error)),
    }
}
