//! Reading task files from disk: the jobs directory, one file, and the rules a task file is read
//! by (owner, mode, size, symlinks, UTF-8), before its keys are checked.

use std::fs::{File, Metadata};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::check::check_task;
use super::*;
use crate::diag::Problem;
use crate::files::{self, PathProblem};

/// Loads every task file in `dir` (not recursive). Fails only when `dir` itself cannot be read
/// or cannot be trusted ([`files::check_jobs_dir`]); a bad file lands in `errors` and does not
/// stop the others. Whatever has a task file's name but is no regular file (a directory, a FIFO,
/// a dangling symlink, ...) is an error too: it is named like a task, so silence would hide a
/// task that does not run.
pub fn load_jobs_dir(dir: &Path, defaults: &TaskDefaults) -> Result<LoadedDir, Vec<PathProblem>> {
    let listing = list_jobs_dir(dir, defaults)?;
    let mut loaded = LoadedDir {
        ignored: listing.ignored,
        ..LoadedDir::default()
    };
    for (tasks, errors) in load_files(&listing.dir, &listing.files, defaults) {
        loaded.tasks.extend(tasks.into_iter().map(|(task, _)| task));
        loaded.errors.extend(errors);
    }
    loaded.tasks.sort_by(|a, b| a.name.cmp(&b.name));
    // Stable, so each file's errors keep their order (whole-file first, then by position).
    loaded.errors.sort_by(|a, b| a.path.cmp(&b.path));
    super::chain::check_chains(&mut loaded.tasks, &mut loaded.errors);
    Ok(loaded)
}

/// A file named like a task file, as a listing of the jobs dir found it.
#[derive(Debug, Clone)]
pub(super) struct Listed {
    pub(super) path: PathBuf,
    /// Whether the listing says it is a regular file (the entry's `d_type`): then it is opened
    /// at once; anything else (a link, a FIFO, a type the file system does not tell) is looked
    /// at first.
    pub(super) regular: bool,
}

/// What [`list_jobs_dir`] found.
pub(super) struct Listing {
    /// The jobs dir, open: its regular files are opened relative to it.
    pub(super) dir: File,
    /// The task files, in no particular order.
    pub(super) files: Vec<Listed>,
    /// The files ignored on purpose, with the reason, sorted.
    pub(super) ignored: Vec<(PathBuf, &'static str)>,
}

/// The task files of `dir` and the files ignored on purpose, once `dir` itself may be trusted
/// ([`files::check_jobs_dir`]).
pub(super) fn list_jobs_dir(
    dir: &Path,
    defaults: &TaskDefaults,
) -> Result<Listing, Vec<PathProblem>> {
    let opened = open_jobs_dir(dir, defaults)?;
    let cannot_read = |error: std::io::Error| vec![cannot_read_dir(dir, error)];
    let mut ignored = Vec::new();
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(cannot_read)? {
        let entry = entry.map_err(cannot_read)?;
        let path = entry.path();
        match ignore_reason(&path) {
            Some(reason) => ignored.push((path, reason)),
            None => {
                // `d_type`, or an `lstat` where the file system does not tell it.
                let regular = entry.file_type().is_ok_and(|kind| kind.is_file());
                files.push(Listed { path, regular });
            }
        }
    }
    ignored.sort();
    Ok(Listing {
        dir: opened,
        files,
        ignored,
    })
}

/// The jobs dir `dir`, open, once it may be trusted ([`files::check_jobs_dir`]).
pub(super) fn open_jobs_dir(dir: &Path, defaults: &TaskDefaults) -> Result<File, Vec<PathProblem>> {
    let problems = files::check_jobs_dir(dir, &defaults.identity);
    if !problems.is_empty() {
        return Err(problems);
    }
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_DIRECTORY)
        .open(dir)
        .map_err(|error| vec![cannot_read_dir(dir, error)])
}

fn cannot_read_dir(dir: &Path, error: std::io::Error) -> PathProblem {
    PathProblem {
        path: dir.to_path_buf(),
        message: format!("cannot read the jobs dir: {error}"),
        help: None,
    }
}

/// What one loading thread of [`load_files`] returns: its tasks, each with the metadata of the
/// file read ([`load_listed`]), and its files' errors.
pub(super) type LoadedPart = (Vec<(TaskSpec, Option<Metadata>)>, Vec<TaskFileError>);

/// How many items one thread of [`in_parallel`] takes at least: below this, threads cost more
/// than they save.
const ITEMS_PER_THREAD: usize = 256;

/// `work` on each part of `items`, split over up to `available_parallelism` threads (one part
/// when there are few items), the results in the order of the parts, so they do not depend on
/// the split. Loading 10,000 task files takes about twice as long on one core.
pub(super) fn in_parallel<T: Sync, R: Send>(
    items: &[T],
    work: impl Fn(&[T]) -> R + Sync,
) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(items.len() / ITEMS_PER_THREAD)
        .max(1);
    if threads == 1 {
        return vec![work(items)];
    }
    let part = items.len().div_ceil(threads);
    let work = &work;
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(part)
            .map(|chunk| scope.spawn(move || work(chunk)))
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}

/// Loads `files` of the open jobs dir `dir` in parallel ([`in_parallel`]: reading, TOML and
/// cron parsing are independent per file), each part returning its tasks and errors; the
/// caller sorts. Each task comes with what [`load_listed`] says of its file.
pub(super) fn load_files(dir: &File, files: &[Listed], defaults: &TaskDefaults) -> Vec<LoadedPart> {
    in_parallel(files, |part| {
        let mut tasks = Vec::new();
        let mut errors = Vec::new();
        for file in part {
            match load_listed(dir, file, defaults) {
                (Ok(task), read) => tasks.push((task, read)),
                (Err(more), _) => errors.extend(more),
            }
        }
        (tasks, errors)
    })
}

/// Loads one task file: checks its name, size, encoding, permissions and ownership, then its
/// contents. Every problem found is reported, not just the first.
pub fn load_task_file(
    path: &Path,
    defaults: &TaskDefaults,
) -> Result<TaskSpec, Vec<TaskFileError>> {
    load_task_file_read(path, Reach::Path, defaults).0
}

/// [`load_task_file`] of a file a listing of the open jobs dir `dir` found.
pub(super) fn load_listed(
    dir: &File,
    file: &Listed,
    defaults: &TaskDefaults,
) -> (Result<TaskSpec, Vec<TaskFileError>>, Option<Metadata>) {
    let reach = match file.regular {
        true => Reach::Listed(dir.as_fd()),
        false => Reach::Path,
    };
    load_task_file_read(&file.path, reach, defaults)
}

/// How a task file is opened.
#[derive(Clone, Copy)]
enum Reach<'a> {
    /// By its path, looked at (`lstat`) first.
    Path,
    /// By its name in the open jobs dir, whose listing said it is a regular file.
    Listed(BorrowedFd<'a>),
}

/// [`load_task_file`], and the metadata of the file read when `path` is a regular file (not a
/// link): taken when it was opened, before it was read, so a later change shows in it
/// ([`super::LoadCache`] keeps it, and a first load need not `stat` each file once more).
fn load_task_file_read(
    path: &Path,
    reach: Reach<'_>,
    defaults: &TaskDefaults,
) -> (Result<TaskSpec, Vec<TaskFileError>>, Option<Metadata>) {
    let name = task_name_of(path);
    let task = is_valid_task_name(&name).then(|| name.clone());
    let (text, file_problems, read) = read_task_file(path, reach, &defaults.identity);
    let mut errors: Vec<TaskFileError> = file_problems
        .into_iter()
        .map(|p| p.into_task_error(path, &task))
        .collect();
    let parsed = match text {
        Some(text) => parse_task(&name, path, &text, defaults),
        None => Err(name_problem(&name)
            .map(|p| p.into_task_error(path, &task))
            .into_iter()
            .collect()),
    };
    let loaded = match parsed {
        Ok(spec) if errors.is_empty() => Ok(spec),
        Ok(_) => Err(errors),
        Err(more) => {
            errors.extend(more);
            errors.sort_by_key(|e| (e.line, e.column));
            Err(errors)
        }
    };
    (loaded, read)
}

/// Parses and validates the text of a task file named `name` (the file stem). `path` is only used
/// in messages. Every problem found is reported, sorted by position, whole-file ones first.
pub fn parse_task(
    name: &str,
    path: &Path,
    text: &str,
    defaults: &TaskDefaults,
) -> Result<TaskSpec, Vec<TaskFileError>> {
    let task = is_valid_task_name(name).then(|| name.to_string());
    let mut checker = Checker::new(text);
    if let Some(problem) = name_problem(name) {
        checker.problems.push(problem);
    }
    let spec = check_task(&mut checker, name, path, defaults);
    let problems = checker.finish();
    match spec {
        Some(spec) if problems.is_empty() => Ok(spec),
        _ => Err(problems
            .into_iter()
            .map(|p| p.into_task_error(path, &task))
            .collect()),
    }
}

/// The rules task files are read by.
const TASK_FILE: files::FileRules = files::FileRules {
    noun: "task file",
    limit: MAX_TASK_FILE_BYTES,
    // A link is checked by `files::resolve_task_link`, and its target opened instead.
    follow_symlinks: false,
    not_regular_help: "zkcron loads regular files named NAME.toml (and symbolic links to them in \
                       the same directory) and does not look into subdirectories: remove it, or \
                       rename it so that its name does not end in .toml",
    too_large_help: "a task file holds one task; move large scripts into their own files and run \
                     them from `command`",
    // Found in a listing of the jobs dir: gone since, it is simply not loaded.
    missing_help: None,
};

/// Opens and reads a task file, checking what cron checks (see [`crate::files`]). Returns the
/// text when it could be read and decoded (even if a permission check failed, so content errors
/// are reported too), the problems found, and the opened file's metadata unless `path` is a
/// link.
fn read_task_file(
    path: &Path,
    reach: Reach<'_>,
    identity: &Identity,
) -> (Option<String>, Vec<Problem>, Option<Metadata>) {
    if let Reach::Listed(dir) = reach {
        let name = path.file_name().unwrap_or_default();
        match files::read_listed_regular(dir, name, path, &TASK_FILE, identity) {
            Ok(Some((bytes, meta))) => {
                let (text, problems) = checked_text(path, bytes, &meta, Vec::new(), identity);
                return (text, problems, Some(meta));
            }
            // A link by now: looked at below.
            Ok(None) => {}
            Err(problem) => return (None, vec![problem], None),
        }
    }
    let mut problems = Vec::new();
    let mut read_from = path.to_path_buf();
    let mut through_link = false;
    let mut seen = None;
    match std::fs::symlink_metadata(path) {
        Ok(link) if link.file_type().is_symlink() => {
            through_link = true;
            match files::resolve_task_link(path, &link, identity) {
                Ok((target, link_problems)) => {
                    problems.extend(link_problems);
                    read_from = target;
                }
                Err(problem) => return (None, vec![problem], None),
            }
        }
        // What the reader would look at again (the path itself: links are not followed).
        Ok(meta) => seen = Some(meta),
        // An error is for the reader to describe.
        Err(_) => {}
    }
    let read = match &seen {
        Some(seen) => files::read_regular_seen(&read_from, seen, &TASK_FILE, identity),
        None => files::read_regular(&read_from, &TASK_FILE, identity),
    };
    match read {
        Ok((bytes, meta)) => {
            let (text, problems) = checked_text(path, bytes, &meta, problems, identity);
            (text, problems, (!through_link).then_some(meta))
        }
        Err(problem) => {
            problems.push(problem);
            (None, problems, None)
        }
    }
}

/// The text of a task file read (`bytes`; `meta`, the opened file's), once decoded, and
/// `problems` with those of its permissions and encoding.
fn checked_text(
    path: &Path,
    bytes: Vec<u8>,
    meta: &Metadata,
    mut problems: Vec<Problem>,
    identity: &Identity,
) -> (Option<String>, Vec<Problem>) {
    problems.extend(files::file_permission_problems(
        path,
        meta,
        identity,
        "the command it runs",
    ));
    match decode_utf8(bytes) {
        Ok(text) => (Some(text), problems),
        Err(problem) => {
            problems.push(problem);
            (None, problems)
        }
    }
}
