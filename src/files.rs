//! The files and directories zkcron trusts, and how it reads them.
//!
//! zkcron runs the commands its task files name, often as root, so it refuses what others could
//! have written, as cron refuses such crontabs and sshd (`StrictModes`) such key files:
//!
//! - **Files** (task files, the config file): not group- or world-writable; owned by root, or,
//!   when zkcron does not run as root, by root or zkcron's own user.
//! - **The jobs dir**: a directory, not group- or world-writable (not even with the sticky bit:
//!   anyone could add tasks), with the same owners as files.
//! - **Their parent directories**, up to `/`, both along the path as given and along the path
//!   with every symlink resolved: the same owners, and not group- or world-writable unless the
//!   sticky bit is set (like `/tmp`: others may add entries there but not rename or remove
//!   ours, so the path cannot be swapped).
//! - **Symbolic links in the jobs dir**: owned like files, and resolving to a regular file in the
//!   same directory. A link elsewhere is refused, because the directory watch would not see its
//!   target change (a loaded task would silently differ from its file).
//!
//! Every file is read by `read_regular`: it looks at what the path is before opening it (so a
//! FIFO, socket or device is named, never opened; for a file found by listing its directory,
//! the listing's entry type is that look), opens with `O_NONBLOCK`, checks the opened
//! file again with `fstat` (no race with a rename), and reads at most a limit plus one byte.
//!
//! Every refusal names the path, what is wrong, and the command that fixes it. The rules take the
//! loading [`Identity`], so they are tested for root and for other users alike.

use std::ffi::OsStr;
use std::fmt;
use std::fs::{FileType, Metadata};
use std::io::Read;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::accounts::Identity;
use crate::diag::shell_quote;
use crate::diag::{Problem, Report};

/// Something zkcron refuses about a path (the jobs dir, one of its parents, the config file),
/// with the fix. `Display` renders it like a whole-file error of a task file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathProblem {
    pub path: PathBuf,
    pub message: String,
    pub help: Option<String>,
}

impl PathProblem {
    fn new(path: &Path, message: String, help: Option<String>) -> PathProblem {
        PathProblem {
            path: path.to_path_buf(),
            message,
            help,
        }
    }

    /// `path: message (help)` on one line, for logs.
    pub fn one_line(&self) -> String {
        self.report().one_line()
    }

    fn report(&self) -> Report<'_> {
        path_report(&self.path, &self.message, self.help.as_deref())
    }
}

/// A problem about `path` as a whole, ready to print.
pub(crate) fn path_report<'a>(
    path: &'a Path,
    message: &'a str,
    help: Option<&'a str>,
) -> Report<'a> {
    Report {
        path,
        line: 0,
        column: 0,
        width: 0,
        snippet: "",
        message,
        help,
    }
}

impl fmt::Display for PathProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.report().render(f)
    }
}

impl std::error::Error for PathProblem {}

/// What a path is, in words, for files that are not what zkcron expected.
pub(crate) fn kind_of(file_type: FileType) -> &'static str {
    if file_type.is_file() {
        "a regular file"
    } else if file_type.is_dir() {
        "a directory"
    } else if file_type.is_symlink() {
        "a symbolic link"
    } else if file_type.is_fifo() {
        "a named pipe (FIFO)"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
}

/// How one kind of file is read and named in messages.
pub(crate) struct FileRules {
    /// "task file", "config file".
    pub noun: &'static str,
    /// Larger files are refused unread.
    pub limit: u64,
    /// Whether a symlink at the path is followed (otherwise the open refuses it).
    pub follow_symlinks: bool,
    /// The help for a path that is not a regular file.
    pub not_regular_help: &'static str,
    /// The help for a file over the limit.
    pub too_large_help: &'static str,
    /// The help for a path where no file is (or that goes through a file as if a directory).
    pub missing_help: Option<&'static str>,
}

/// Reads the regular file at `path`, whatever is there, without blocking and without reading
/// more than `rules.limit + 1` bytes; returns its bytes and the metadata of the opened file.
pub(crate) fn read_regular(
    path: &Path,
    rules: &FileRules,
    identity: &Identity,
) -> Result<(Vec<u8>, Metadata), Problem> {
    // Look first: a FIFO, socket or device is named, never opened (opening a tape device
    // rewinds it, a FIFO blocks, a socket fails with "No such device or address").
    let seen = if rules.follow_symlinks {
        std::fs::metadata(path)
    } else {
        std::fs::symlink_metadata(path)
    };
    let seen = seen.map_err(|error| open_problem(path, rules, &error, identity))?;
    read_regular_seen(path, &seen, rules, identity)
}

/// [`read_regular`] for a caller that has just looked at `path` itself (`seen`: what
/// `symlink_metadata`, or `metadata` when `rules.follow_symlinks`, said of it).
pub(crate) fn read_regular_seen(
    path: &Path,
    seen: &Metadata,
    rules: &FileRules,
    identity: &Identity,
) -> Result<(Vec<u8>, Metadata), Problem> {
    check_regular(seen, rules)?;

    let file = open_to_read(path, rules.follow_symlinks)
        .map_err(|error| open_problem(path, rules, &error, identity))?;
    read_opened(file, rules)
}

/// Opens `path`, already seen to be a regular file, for reading as zkcron reads what it does
/// not trust: without blocking (a FIFO swapped in since the look), never as a controlling
/// terminal, and without following a symbolic link unless `follow_symlinks`.
pub(crate) fn open_to_read(path: &Path, follow_symlinks: bool) -> std::io::Result<std::fs::File> {
    let mut flags = nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY;
    if !follow_symlinks {
        flags |= nix::libc::O_NOFOLLOW;
    }
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
}

/// [`read_regular_seen`] for a file that a listing of its directory `dir` (open) says is a
/// regular file (the entry's `d_type`): opened by `name` relative to `dir` at once, the
/// listing standing for the look before the open (one path walk and one `stat` less per
/// file, a fifth of loading 100,000 task files). `Ok(None)` when `name` is a symbolic link
/// by now (the open does not follow it): the caller looks at it as one. For rules that do not
/// follow symbolic links; `path` (`dir` joined with `name`) is only used in messages.
pub(crate) fn read_listed_regular(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    path: &Path,
    rules: &FileRules,
    identity: &Identity,
) -> Result<Option<(Vec<u8>, Metadata)>, Problem> {
    use nix::fcntl::OFlag;
    debug_assert!(!rules.follow_symlinks, "opened with O_NOFOLLOW");
    let flags = OFlag::O_RDONLY
        | OFlag::O_NONBLOCK
        | OFlag::O_NOCTTY
        | OFlag::O_NOFOLLOW
        | OFlag::O_CLOEXEC;
    match nix::fcntl::openat(dir, name, flags, nix::sys::stat::Mode::empty()) {
        Ok(fd) => read_opened(std::fs::File::from(fd), rules).map(Some),
        Err(nix::errno::Errno::ELOOP) => Ok(None),
        Err(errno) => {
            let error = std::io::Error::from_raw_os_error(errno as i32);
            Err(open_problem(path, rules, &error, identity))
        }
    }
}

/// Checks the opened `file` again (what was opened may differ from what was looked at: a
/// rename in between) and reads it, at most `rules.limit + 1` bytes.
fn read_opened(file: std::fs::File, rules: &FileRules) -> Result<(Vec<u8>, Metadata), Problem> {
    let noun = rules.noun;
    let meta = file.metadata().map_err(|error| {
        Problem::whole_file(format!("cannot inspect the {noun}: {error}"), None)
    })?;
    check_regular(&meta, rules)?;

    // Room for what `fstat` said and one byte more: one read for the text and one that finds
    // its end (an empty buffer would start with a 32-byte probe, a third read).
    let room = usize::try_from(meta.len().min(rules.limit)).unwrap_or(0) + 1;
    let mut bytes = Vec::with_capacity(room.max(64));
    if let Err(error) = file.take(rules.limit + 1).read_to_end(&mut bytes) {
        return Err(Problem::whole_file(
            format!("cannot read the {noun}: {error}"),
            None,
        ));
    }
    if bytes.len() as u64 > rules.limit {
        // It grew after the size check.
        return Err(too_large(bytes.len() as u64, rules));
    }
    Ok((bytes, meta))
}

fn check_regular(meta: &Metadata, rules: &FileRules) -> Result<(), Problem> {
    if !meta.is_file() {
        return Err(Problem::whole_file(
            format!("{}, not a {}", kind_of(meta.file_type()), rules.noun),
            Some(rules.not_regular_help.to_string()),
        ));
    }
    if meta.len() > rules.limit {
        return Err(too_large(meta.len(), rules));
    }
    Ok(())
}

fn too_large(size: u64, rules: &FileRules) -> Problem {
    Problem::whole_file(
        format!(
            "the file is {size} bytes; {}s are limited to {} MiB ({} bytes)",
            rules.noun,
            rules.limit >> 20,
            rules.limit
        ),
        Some(rules.too_large_help.to_string()),
    )
}

/// Why `path` could not be looked at or opened, in words.
fn open_problem(
    path: &Path,
    rules: &FileRules,
    error: &std::io::Error,
    identity: &Identity,
) -> Problem {
    let noun = rules.noun;
    let missing_help = rules.missing_help.map(str::to_string);
    match error.kind() {
        std::io::ErrorKind::NotFound => match std::fs::read_link(path) {
            Ok(target) => dangling(&target),
            Err(_) => Problem::whole_file(format!("the {noun} does not exist"), missing_help),
        },
        std::io::ErrorKind::NotADirectory => Problem::whole_file(
            format!("cannot read the {noun}: {}", not_a_directory(path, error)),
            missing_help,
        ),
        std::io::ErrorKind::PermissionDenied => Problem::whole_file(
            format!("cannot read the {noun}: {error}"),
            Some(format!(
                "zkcron runs as {:?}: make the file and its directories readable by that user",
                identity.user_name
            )),
        ),
        _ if error.raw_os_error() == Some(nix::libc::ELOOP) => symlink_loop(path),
        _ => Problem::whole_file(format!("cannot read the {noun}: {error}"), None),
    }
}

/// Why `path` failed with "Not a directory" (`error`), in words: which component of it is not
/// a directory.
pub(crate) fn not_a_directory(path: &Path, error: &std::io::Error) -> String {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    // Below the file the path goes through, every lookup fails; the first that works is it.
    let found = absolute
        .ancestors()
        .skip(1)
        .find_map(|component| Some((component, std::fs::metadata(component).ok()?)))
        .filter(|(_, meta)| !meta.is_dir());
    match found {
        Some((component, meta)) => format!(
            "the path goes through {}, which is {}, not a directory",
            component.display(),
            kind_of(meta.file_type())
        ),
        None => error.to_string(),
    }
}

fn dangling(target: &Path) -> Problem {
    Problem::whole_file(
        format!(
            "a symbolic link to {}, which does not exist",
            target.display()
        ),
        Some("remove the link, or create the file it points to".into()),
    )
}

fn symlink_loop(path: &Path) -> Problem {
    let target = std::fs::read_link(path)
        .map(|t| format!(" (it points to {})", t.display()))
        .unwrap_or_default();
    Problem::whole_file(
        format!("a symbolic link that loops: resolving it never reaches a file{target}"),
        Some("remove the link, or point it at a file".into()),
    )
}

/// A task file at `path` that is a symbolic link: checks the link (its owner, and that it
/// resolves to a file in its own directory) and returns the resolved path to read, with the
/// problems that do not stop reading it. `Err` when it cannot or must not be followed.
pub(crate) fn resolve_task_link(
    path: &Path,
    link: &Metadata,
    identity: &Identity,
) -> Result<(PathBuf, Vec<Problem>), Problem> {
    let mut problems = Vec::new();
    if let Some((whose, help)) = owner_problem(link.uid(), identity, path, "-h ") {
        problems.push(Problem::whole_file(
            format!("the symbolic link is owned by {whose}, so that user chose what zkcron loads"),
            Some(help),
        ));
    }
    let target = match std::fs::canonicalize(path) {
        Ok(target) => target,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let target = std::fs::read_link(path).unwrap_or_default();
            return Err(dangling(&target));
        }
        Err(error) if error.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Err(symlink_loop(path));
        }
        Err(error) => {
            return Err(Problem::whole_file(
                format!("cannot resolve the symbolic link: {error}"),
                None,
            ));
        }
    };
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    let dir = std::fs::canonicalize(dir.unwrap_or(Path::new("."))).map_err(|error| {
        Problem::whole_file(
            format!("cannot resolve the directory of the link: {error}"),
            None,
        )
    })?;
    if target.parent() != Some(dir.as_path()) {
        return Err(Problem::whole_file(
            format!(
                "a symbolic link to {}, outside {}: zkcron follows links only to files in the \
                 same directory, whose changes it notices",
                target.display(),
                dir.display()
            ),
            Some(format!(
                "replace the link with a copy of the file: `cp --remove-destination {} {}`",
                shell_quote(&target),
                shell_quote(path)
            )),
        ));
    }
    Ok((target, problems))
}

/// Who may own what zkcron trusts: root, and when zkcron is not root, also its own user.
/// `Some((whose, help))` when `owner` is not one of them; `chown_flags` go into the fix
/// (`"-h "` for a symlink itself).
fn owner_problem(
    owner: u32,
    identity: &Identity,
    path: &Path,
    chown_flags: &str,
) -> Option<(String, String)> {
    if owner == 0 || (!identity.is_root() && owner == identity.uid) {
        return None;
    }
    if identity.is_root() {
        Some((
            format!("{}, not root", describe_uid(owner)),
            format!("run `chown {chown_flags}root {}`", shell_quote(path)),
        ))
    } else {
        Some((
            format!(
                "{}, neither by {:?} (who runs zkcron) nor by root",
                describe_uid(owner),
                identity.user_name
            ),
            format!(
                "run `chown {chown_flags}{} {}` as root",
                identity.user_name,
                shell_quote(path)
            ),
        ))
    }
}

/// "group-writable" and the like, when others than the owner may write.
fn writable_by(mode: u32) -> Option<&'static str> {
    match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (true, true) => Some("group- and world-writable"),
        (true, false) => Some("group-writable"),
        (false, true) => Some("world-writable"),
        (false, false) => None,
    }
}

/// What cron refuses in a file: others may write it, or it is not owned by root (or, when
/// zkcron is not root, by zkcron's own user). `stakes` says what others could change.
pub(crate) fn file_permission_problems(
    path: &Path,
    meta: &Metadata,
    identity: &Identity,
    stakes: &str,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mode = meta.mode() & 0o7777;
    if let Some(writable) = writable_by(mode) {
        problems.push(Problem::whole_file(
            format!(
                "the file is {writable} (mode {mode:04o}), so other users could change {stakes}; \
                 zkcron refuses it, as cron does"
            ),
            Some(format!("run `chmod go-w {}`", shell_quote(path))),
        ));
    }
    let owner = meta.uid();
    if let Some((whose, help)) = owner_problem(owner, identity, path, "") {
        let help = if identity.is_root() {
            format!("run `chown root:root {}`", shell_quote(path))
        } else {
            help
        };
        problems.push(Problem::whole_file(
            format!("the file is owned by {whose}, so that user could change {stakes}"),
            Some(help),
        ));
    }
    problems
}

/// The jobs dir's problems: it must exist, be a directory, and be writable only by its owner,
/// root (or zkcron's own user when zkcron is not root); so must its parents (see the module
/// documentation). Empty when zkcron may load tasks from it.
pub fn check_jobs_dir(dir: &Path, identity: &Identity) -> Vec<PathProblem> {
    let meta = match std::fs::metadata(dir) {
        Ok(meta) => meta,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return vec![PathProblem::new(
                dir,
                "the jobs dir does not exist".into(),
                Some(
                    "create it, or point --jobs-dir or [scheduler].jobs_dir at your task files"
                        .into(),
                ),
            )];
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotADirectory => {
            return vec![PathProblem::new(
                dir,
                format!("cannot read the jobs dir: {}", not_a_directory(dir, &error)),
                Some("point --jobs-dir or [scheduler].jobs_dir at your task files".into()),
            )];
        }
        Err(error) => {
            return vec![PathProblem::new(
                dir,
                format!("cannot read the jobs dir: {error}"),
                None,
            )];
        }
    };
    if !meta.is_dir() {
        return vec![PathProblem::new(
            dir,
            format!(
                "the jobs dir is {}, not a directory",
                kind_of(meta.file_type())
            ),
            Some(
                "point --jobs-dir or [scheduler].jobs_dir at the directory of your task files"
                    .into(),
            ),
        )];
    }
    let mut problems = Vec::new();
    let mode = meta.mode() & 0o7777;
    if let Some(writable) = writable_by(mode) {
        problems.push(PathProblem::new(
            dir,
            format!(
                "the jobs dir is {writable} (mode {mode:04o}), so other users could add tasks \
                 that zkcron runs; zkcron refuses it, as cron refuses such a directory"
            ),
            Some(format!("run `chmod go-w {}`", shell_quote(dir))),
        ));
    }
    if let Some((whose, help)) = owner_problem(meta.uid(), identity, dir, "") {
        problems.push(PathProblem::new(
            dir,
            format!(
                "the jobs dir is owned by {whose}, so that user could change the tasks zkcron runs"
            ),
            Some(help),
        ));
    }
    problems.extend(parent_problems(dir, "the jobs dir", identity));
    problems
}

/// The config file's problems: the rules of files, for the file and its parents. (That it is a
/// regular file is checked when it is read.)
pub fn check_config_file(path: &Path, identity: &Identity) -> Vec<PathProblem> {
    let Ok(meta) = std::fs::metadata(path) else {
        // Reading it reports why.
        return Vec::new();
    };
    let mut problems: Vec<PathProblem> = file_permission_problems(
        path,
        &meta,
        identity,
        "zkcron's configuration (and so the user tasks run as)",
    )
    .into_iter()
    .map(|p| PathProblem::new(path, p.message, p.help))
    .collect();
    problems.extend(parent_problems(path, "the config file", identity));
    problems
}

/// The problems of the directories above `path`: along the path as given (made absolute) and
/// along the path with every symlink resolved, each directory once.
fn parent_problems(path: &Path, what: &str, identity: &Identity) -> Vec<PathProblem> {
    let mut chains = Vec::new();
    if let Ok(absolute) = std::path::absolute(path) {
        chains.push(absolute);
    }
    if let Ok(resolved) = std::fs::canonicalize(path) {
        chains.push(resolved);
    }
    let mut seen = std::collections::HashSet::new();
    let mut problems = Vec::new();
    for chain in &chains {
        for parent in chain.ancestors().skip(1) {
            let Ok(meta) = std::fs::metadata(parent) else {
                continue;
            };
            if !seen.insert((meta.dev(), meta.ino())) {
                continue;
            }
            problems.extend(parent_problem(parent, &meta, path, what, identity));
        }
    }
    problems
}

fn parent_problem(
    parent: &Path,
    meta: &Metadata,
    of: &Path,
    what: &str,
    identity: &Identity,
) -> Vec<PathProblem> {
    let mut problems = Vec::new();
    let mode = meta.mode() & 0o7777;
    let sticky = mode & 0o1000 != 0;
    if let Some(writable) = writable_by(mode).filter(|_| !sticky) {
        problems.push(PathProblem::new(
            parent,
            format!(
                "a parent directory of {what} {} is {writable} (mode {mode:04o}) without the \
                 sticky bit, so other users could replace what is in it",
                of.display()
            ),
            Some(format!("run `chmod go-w {}`", shell_quote(parent))),
        ));
    }
    if let Some((whose, help)) = owner_problem(meta.uid(), identity, parent, "") {
        problems.push(PathProblem::new(
            parent,
            format!(
                "a parent directory of {what} {} is owned by {whose}, so that user could replace \
                 what is in it",
                of.display()
            ),
            Some(help),
        ));
    }
    problems
}

/// "uid 65534 (nobody)", or "uid 4242" when the uid has no name here.
pub(crate) fn describe_uid(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(user)) => format!("uid {uid} ({})", user.name),
        _ => format!("uid {uid}"),
    }
}
