//! Task files in `jobs.d/`: what a task is, and loading it from disk with errors users can act on.
//!
//! This module owns the task-file format (BRIEF §2): one task per `<name>.toml`, the name being
//! the file stem. It turns files into validated [`TaskSpec`]s or [`TaskFileError`]s that point at
//! file, line and column. It does not run anything and keeps no state between loads: the daemon
//! decides what to do with a file that became invalid (it keeps the last good version).

mod digest;

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono_tz::Tz;
use toml::Spanned;
use toml::de::{DeString, DeTable, DeValue};

use crate::diag::{Position, Problem, Report, string_value_span};
use crate::files::{self, PathProblem};
use crate::schedule::{Schedule, ScheduleError, parse_timezone};

/// One task, validated: every field has its final value, defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    /// The file stem; unique in a jobs dir, part of ZooKeeper paths and fire ids.
    pub name: String,
    /// The file the task came from, for messages.
    pub path: PathBuf,
    pub description: Option<String>,
    pub schedule: Schedule,
    pub command: CommandLine,
    /// The user to run as; `None` runs as the daemon's own user.
    pub user: Option<String>,
    /// The group to run as; `None` uses the user's primary group.
    pub group: Option<String>,
    pub working_dir: Option<PathBuf>,
    pub env: BTreeMap<String, String>,
    /// After this long the process group gets SIGTERM; `None` lets it run for ever.
    pub timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when a run is stopped.
    pub kill_grace: Duration,
    pub overlap: OverlapPolicy,
    pub catch_up: CatchUpPolicy,
    /// A tick older than this is never run; `None` means no limit.
    pub starting_deadline: Option<Duration>,
    /// Upper bound (exclusive) of the deterministic per-tick delay; zero turns jitter off.
    pub jitter: Duration,
    pub retries: RetryPolicy,
    /// Only nodes whose release matches may own the task (used by the cluster backend).
    pub version_req: Option<semver::VersionReq>,
    /// Stop this task's running jobs when the node loses its ZooKeeper session (expired, or
    /// disconnected for longer than the session timeout), since another node may then run
    /// the task. Off by default: a disconnect alone never kills a job.
    pub kill_on_session_loss: bool,
    /// What a new leader does with a claimed tick whose node died mid-run.
    pub on_node_loss: NodeLossPolicy,
    /// A disabled task is loaded and validated but never fires.
    pub enabled: bool,
}

/// What to execute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandLine {
    /// Executed directly: `argv[0]` is looked up in `PATH`.
    Argv(Vec<String>),
    /// Run by `/bin/sh -c`.
    Shell(String),
}

/// What a tick does while an earlier run of the same task is still going.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OverlapPolicy {
    /// Do not start; the tick is recorded as skipped.
    #[default]
    Skip,
    /// Start another run beside the running one.
    Allow,
    /// Stop the running one (SIGTERM, SIGKILL after `kill_grace`), then start.
    Replace,
}

/// What happens to ticks that were missed while no node fired the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CatchUpPolicy {
    /// Missed ticks are dropped.
    Skip,
    /// Only the latest missed tick runs.
    #[default]
    Once,
    /// Every missed tick runs, oldest first (at most [`crate::plan::MAX_CATCH_UP`]).
    All,
}

/// What a new leader does with a tick that was claimed and started on a node that died before
/// the run ended (no result, no live running record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NodeLossPolicy {
    /// Leave it: each tick runs at most once.
    #[default]
    Skip,
    /// Run it again on the new leader: at least once, possibly twice in part.
    Rerun,
}

/// How a failed run is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Extra attempts after the first; 0 disables retries.
    pub attempts: u32,
    /// Delay before the first retry; doubles each retry.
    pub backoff: Duration,
    /// The delay never grows beyond this.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 0,
            backoff: Duration::from_secs(10),
            max_backoff: Duration::from_secs(600),
        }
    }
}

/// Where a task file's values come from when the file does not set them, and who is loading it.
#[derive(Debug, Clone)]
pub struct TaskDefaults {
    /// `[scheduler].default_timezone`.
    pub timezone: Tz,
    /// `[scheduler].default_user`: the user root runs tasks as when they name none.
    pub user: Option<String>,
    /// The identity of the loading process, for ownership and user checks.
    pub identity: Identity,
}

/// The identity of the process that loads task files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    /// The user name of `uid`.
    pub user_name: String,
}

impl Identity {
    /// The identity of the running process.
    pub fn current() -> Identity {
        let uid = nix::unistd::Uid::current();
        let user_name = nix::unistd::User::from_uid(uid)
            .ok()
            .flatten()
            .map(|u| u.name)
            .unwrap_or_else(|| uid.to_string());
        Identity {
            uid: uid.as_raw(),
            user_name,
        }
    }

    pub fn is_root(&self) -> bool {
        self.uid == 0
    }
}

/// A task file that could not be loaded. `Display` renders `file:line:column: message`, the
/// offending line with a caret, and a help line when there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskFileError {
    pub path: PathBuf,
    /// The task this file would define (its valid stem), so the daemon can keep the last good
    /// version of it; `None` when the stem is not a valid task name.
    pub task: Option<String>,
    /// 1-based; 0 when the error is about the file as a whole.
    pub line: usize,
    /// 1-based; 0 when the error is about the file as a whole.
    pub column: usize,
    /// The offending source line, empty when the error is about the file as a whole.
    pub snippet: String,
    /// How many characters of `snippet` the caret line underlines, from `column`; 0 or 1 draws
    /// one caret.
    pub width: usize,
    pub message: String,
    /// How to fix it, e.g. "did you mean `timezone`?".
    pub help: Option<String>,
}

/// The result of scanning a jobs directory.
#[derive(Debug, Default)]
pub struct LoadedDir {
    /// Valid tasks, sorted by name.
    pub tasks: Vec<TaskSpec>,
    /// Files that are task files but invalid, sorted by path.
    pub errors: Vec<TaskFileError>,
    /// Files skipped on purpose (hidden, backups, not `.toml`), with the reason, for debug logs.
    pub ignored: Vec<(PathBuf, &'static str)>,
}

/// The pattern a task name must match, as shown to users.
pub const TASK_NAME_PATTERN: &str = "[a-z0-9][a-z0-9._-]{0,99}";

/// Task files larger than this are refused unread: no task needs more, and a runaway generator
/// must not make the daemon allocate without bound.
pub const MAX_TASK_FILE_BYTES: u64 = 1024 * 1024;

/// The keys a task file may set, in the order the brief documents them.
const TASK_KEYS: &[&str] = &[
    "description",
    "schedule",
    "timezone",
    "command",
    "user",
    "group",
    "working_dir",
    "env",
    "timeout",
    "kill_grace",
    "overlap",
    "catch_up",
    "starting_deadline",
    "jitter",
    "retries",
    "version_req",
    "kill_on_session_loss",
    "on_node_loss",
    "enabled",
];

/// The keys of the `retries` table.
const RETRY_KEYS: &[&str] = &["attempts", "backoff", "max_backoff"];

/// The default for `kill_grace`.
const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(10);

/// Package-manager leftovers, with the reason reported for each.
const PACKAGE_LEFTOVERS: &[(&str, &str)] = &[
    (".dpkg-old", "package-manager leftover (*.dpkg-old)"),
    (".dpkg-new", "package-manager leftover (*.dpkg-new)"),
    (".dpkg-dist", "package-manager leftover (*.dpkg-dist)"),
    (".dpkg-tmp", "package-manager leftover (*.dpkg-tmp)"),
    (".rpmnew", "package-manager leftover (*.rpmnew)"),
    (".rpmsave", "package-manager leftover (*.rpmsave)"),
    (".rpmorig", "package-manager leftover (*.rpmorig)"),
];

/// Whether `name` may name a task: `[a-z0-9][a-z0-9._-]{0,99}`. Names become part of ZooKeeper
/// paths and fire ids, so they are kept to characters that need no escaping anywhere.
pub fn is_valid_task_name(name: &str) -> bool {
    let Some((first, rest)) = name.as_bytes().split_first() else {
        return false;
    };
    rest.len() <= 99
        && (first.is_ascii_lowercase() || first.is_ascii_digit())
        && rest.iter().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        })
}

/// Why a directory entry is skipped on purpose, as cron skips it; `None` when it is a task-file
/// candidate. Looks at the name only: whatever has a task file's name is loaded or reported.
pub fn ignore_reason(path: &Path) -> Option<&'static str> {
    let Some(name) = path.file_name() else {
        return Some("not a file name");
    };
    let name = name.to_string_lossy();
    if name.starts_with('.') && [".swp", ".swo", ".swx"].iter().any(|s| name.ends_with(s)) {
        return Some("editor swap file (.*.swp)");
    }
    if name.ends_with('~') {
        return Some("editor backup file (*~)");
    }
    if name.len() >= 2 && name.starts_with('#') && name.ends_with('#') {
        return Some("editor auto-save file (#*#)");
    }
    if let Some((_, reason)) = PACKAGE_LEFTOVERS
        .iter()
        .find(|(suffix, _)| name.ends_with(suffix))
    {
        return Some(reason);
    }
    if name.starts_with('.') {
        return Some("hidden file");
    }
    if !name.ends_with(".toml") {
        return Some("not a .toml file");
    }
    None
}

/// Loads every task file in `dir` (not recursive). Fails only when `dir` itself cannot be read
/// or cannot be trusted ([`files::check_jobs_dir`]); a bad file lands in `errors` and does not
/// stop the others. Whatever has a task file's name but is no regular file (a directory, a FIFO,
/// a dangling symlink, ...) is an error too: it is named like a task, so silence would hide a
/// task that does not run.
pub fn load_jobs_dir(dir: &Path, defaults: &TaskDefaults) -> Result<LoadedDir, Vec<PathProblem>> {
    let problems = files::check_jobs_dir(dir, &defaults.identity);
    if !problems.is_empty() {
        return Err(problems);
    }
    let cannot_read = |error: std::io::Error| {
        vec![PathProblem {
            path: dir.to_path_buf(),
            message: format!("cannot read the jobs dir: {error}"),
            help: None,
        }]
    };
    let mut loaded = LoadedDir::default();
    for entry in std::fs::read_dir(dir).map_err(cannot_read)? {
        let path = entry.map_err(cannot_read)?.path();
        if let Some(reason) = ignore_reason(&path) {
            loaded.ignored.push((path, reason));
            continue;
        }
        match load_task_file(&path, defaults) {
            Ok(task) => loaded.tasks.push(task),
            Err(errors) => loaded.errors.extend(errors),
        }
    }
    loaded.tasks.sort_by(|a, b| a.name.cmp(&b.name));
    // Stable, so each file's errors keep their order (whole-file first, then by position).
    loaded.errors.sort_by(|a, b| a.path.cmp(&b.path));
    loaded.ignored.sort();
    Ok(loaded)
}

/// Loads one task file: checks its name, size, encoding, permissions and ownership, then its
/// contents. Every problem found is reported, not just the first.
pub fn load_task_file(
    path: &Path,
    defaults: &TaskDefaults,
) -> Result<TaskSpec, Vec<TaskFileError>> {
    let name = task_name_of(path);
    let task = is_valid_task_name(&name).then(|| name.clone());
    let (text, file_problems) = read_task_file(path, &defaults.identity);
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
    match parsed {
        Ok(spec) if errors.is_empty() => Ok(spec),
        Ok(_) => Err(errors),
        Err(more) => {
            errors.extend(more);
            errors.sort_by_key(|e| (e.line, e.column));
            Err(errors)
        }
    }
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

impl TaskFileError {
    /// `path:line:col: message (help)` on one line, for logs.
    pub fn one_line(&self) -> String {
        self.report().one_line()
    }

    fn report(&self) -> Report<'_> {
        Report {
            path: &self.path,
            line: self.line,
            column: self.column,
            width: self.width,
            snippet: &self.snippet,
            message: &self.message,
            help: self.help.as_deref(),
        }
    }
}

impl fmt::Display for TaskFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.report().render(f)
    }
}

impl std::error::Error for TaskFileError {}

/// The task name a file would define: its file name without `.toml`.
fn task_name_of(path: &Path) -> String {
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match file_name.strip_suffix(".toml") {
        Some(stem) => stem.to_string(),
        None => file_name,
    }
}

/// The problem with a task name, if any, with a suggested valid name when there is one.
fn name_problem(name: &str) -> Option<Problem> {
    if is_valid_task_name(name) {
        return None;
    }
    let suggestion: String = name
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect::<String>()
        .trim_start_matches(['.', '_', '-'])
        .chars()
        .take(100)
        .collect();
    let help = if is_valid_task_name(&suggestion) {
        format!("rename the file to `{suggestion}.toml`")
    } else {
        "rename the file to a valid name ending in .toml".to_string()
    };
    Some(Problem::whole_file(
        format!(
            "invalid task name {name:?}: a task name (the file name without .toml) must match \
             {TASK_NAME_PATTERN}, because it becomes part of ZooKeeper paths and fire ids"
        ),
        Some(help),
    ))
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
/// are reported too), and the problems found.
fn read_task_file(path: &Path, identity: &Identity) -> (Option<String>, Vec<Problem>) {
    let mut problems = Vec::new();
    let mut read_from = path.to_path_buf();
    match std::fs::symlink_metadata(path) {
        Ok(link) if link.file_type().is_symlink() => {
            match files::resolve_task_link(path, &link, identity) {
                Ok((target, link_problems)) => {
                    problems.extend(link_problems);
                    read_from = target;
                }
                Err(problem) => return (None, vec![problem]),
            }
        }
        // Anything else, and an error, is for the reader to describe.
        _ => {}
    }
    let (bytes, meta) = match files::read_regular(&read_from, &TASK_FILE, identity) {
        Ok(read) => read,
        Err(problem) => {
            problems.push(problem);
            return (None, problems);
        }
    };
    problems.extend(files::file_permission_problems(
        path,
        &meta,
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

/// `path` as a shell word, so the fix commands in help lines can be pasted as they are.
pub(crate) fn shell_quote(path: &Path) -> String {
    let text = path.display().to_string();
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:@%,=".contains(c));
    if plain {
        text
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// Decodes a file as UTF-8; the error points at the first bad byte.
pub(crate) fn decode_utf8(bytes: Vec<u8>) -> Result<String, Problem> {
    String::from_utf8(bytes).map_err(|error| {
        let bad_at = error.utf8_error().valid_up_to();
        let bytes = error.as_bytes();
        let bad_byte = bytes[bad_at];
        // Everything before `bad_at` is valid UTF-8.
        let before = std::str::from_utf8(&bytes[..bad_at]).unwrap_or_default();
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let line_end = bytes[bad_at..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |i| bad_at + i);
        let line = before.matches('\n').count() + 1;
        let column = before[line_start..].chars().count() + 1;
        Problem {
            position: Position {
                line,
                column,
                width: 1,
                snippet: String::from_utf8_lossy(&bytes[line_start..line_end])
                    .trim_end_matches('\r')
                    .to_string(),
            },
            message: format!(
                "the file is not valid UTF-8: byte 0x{bad_byte:02x} at line {line}, column {column}"
            ),
            help: Some("save the file as UTF-8".into()),
        }
    })
}

/// Checks every key of a task file; `None` when anything is wrong (the problems are in
/// `checker`).
fn check_task(
    checker: &mut Checker<'_>,
    name: &str,
    path: &Path,
    defaults: &TaskDefaults,
) -> Option<TaskSpec> {
    let text = checker.text;
    let root = match DeTable::parse(text) {
        Ok(root) => root,
        Err(error) => {
            checker.syntax_error(&error);
            return None;
        }
    };
    let c = checker;

    let mut description = None;
    let mut schedule_value = None;
    let mut timezone = defaults.timezone;
    let mut command_value = None;
    let mut user = None;
    let mut group = None;
    let mut working_dir = None;
    let mut env = BTreeMap::new();
    let mut timeout = None;
    let mut kill_grace = DEFAULT_KILL_GRACE;
    let mut overlap = OverlapPolicy::default();
    let mut catch_up = CatchUpPolicy::default();
    let mut starting_deadline = None;
    let mut jitter = Duration::ZERO;
    let mut retries = RetryPolicy::default();
    let mut version_req = None;
    let mut kill_on_session_loss = false;
    let mut on_node_loss = NodeLossPolicy::default();
    let mut enabled = true;

    for (key, value) in root.get_ref().iter() {
        let k: &str = key.get_ref();
        match k {
            "description" => description = c.string(k, value).map(str::to_string),
            "schedule" => schedule_value = Some(value),
            "timezone" => {
                if let Some(zone) = c.string(k, value) {
                    match parse_timezone(zone) {
                        Ok(tz) => timezone = tz,
                        Err(error) => c.report(c.content_span(value), error.to_string(), None),
                    }
                }
            }
            "command" => command_value = Some(value),
            "user" => user = c.non_empty_string(k, value).map(|s| (s, value.span())),
            "group" => group = c.non_empty_string(k, value).map(|s| (s, value.span())),
            "working_dir" => working_dir = c.absolute_path(k, value),
            "env" => env = c.env(value),
            "timeout" => {
                timeout = c.positive_duration(
                    k,
                    value,
                    "remove `timeout` to let runs take as long as they need",
                )
            }
            "kill_grace" => kill_grace = c.duration(k, value).unwrap_or(kill_grace),
            "overlap" => {
                let choices = [
                    ("skip", OverlapPolicy::Skip),
                    ("allow", OverlapPolicy::Allow),
                    ("replace", OverlapPolicy::Replace),
                ];
                overlap = c.choice(k, value, &choices).unwrap_or(overlap);
            }
            "catch_up" => {
                let choices = [
                    ("skip", CatchUpPolicy::Skip),
                    ("once", CatchUpPolicy::Once),
                    ("all", CatchUpPolicy::All),
                ];
                catch_up = c.choice(k, value, &choices).unwrap_or(catch_up);
            }
            "starting_deadline" => {
                starting_deadline = c.positive_duration(
                    k,
                    value,
                    "remove `starting_deadline` to run missed ticks however late they are",
                )
            }
            "jitter" => jitter = c.duration(k, value).unwrap_or(jitter),
            "retries" => retries = c.retries(value).unwrap_or(retries),
            "version_req" => version_req = c.version_req(value),
            "kill_on_session_loss" => {
                kill_on_session_loss = c.boolean(k, value).unwrap_or(kill_on_session_loss)
            }
            "on_node_loss" => {
                let choices = [
                    ("skip", NodeLossPolicy::Skip),
                    ("rerun", NodeLossPolicy::Rerun),
                ];
                on_node_loss = c.choice(k, value, &choices).unwrap_or(on_node_loss);
            }
            "enabled" => enabled = c.boolean(k, value).unwrap_or(enabled),
            _ => c.unknown_key(key, TASK_KEYS, None),
        }
    }

    // After the loop: the schedule is read in the task's zone, whichever key came first.
    let schedule = match schedule_value {
        None => {
            c.problems.push(Problem::whole_file(
                "missing `schedule`: every task needs one".into(),
                Some("add a line like `schedule = \"30 2 * * *\"`".into()),
            ));
            None
        }
        Some(value) => c.string("schedule", value).and_then(|expression| {
            Schedule::parse(expression, timezone)
                .map_err(|error| {
                    let span = schedule_error_span(text, value.span(), expression, &error);
                    c.report(span, error.to_string(), None);
                })
                .ok()
        }),
    };
    let command = match command_value {
        None => {
            c.problems.push(Problem::whole_file(
                "missing `command`: every task needs one".into(),
                Some("add a line like `command = [\"/usr/local/bin/backup\", \"--full\"]`".into()),
            ));
            None
        }
        Some(value) => c.command(value),
    };

    if let (Some(command), Some(value)) = (&command, command_value) {
        let size = exec_size(command, &env);
        if size > MAX_EXEC_BYTES {
            c.report(
                value.span(),
                format!(
                    "`command` and `env` take {size} bytes as the program's arguments and \
                     environment (each string with its NUL and an 8-byte pointer, plus {} bytes \
                     kept for the variables zkcron sets); Linux allows at most {} bytes ({} MiB, \
                     a quarter of the usual 8 MiB stack limit), so every run would fail",
                    ZKCRON_ENV_BYTES,
                    MAX_EXEC_BYTES,
                    MAX_EXEC_BYTES >> 20
                ),
                Some("pass large data in a file, and run a script that reads it".into()),
            );
        }
    }

    let user = c.effective_user(user, defaults);
    let group = c.group(group, &defaults.identity);

    if !c.problems.is_empty() {
        return None;
    }
    Some(TaskSpec {
        name: name.to_string(),
        path: path.to_path_buf(),
        description,
        schedule: schedule?,
        command: command?,
        user,
        group,
        working_dir,
        env,
        timeout,
        kill_grace,
        overlap,
        catch_up,
        starting_deadline,
        jitter,
        retries,
        version_req,
        kill_on_session_loss,
        on_node_loss,
        enabled,
    })
}

/// Narrows a schedule error to the field it blames, so the caret points at `61` rather than at
/// the whole expression, wherever the string puts it (escapes, multi-line strings).
fn schedule_error_span(
    text: &str,
    span: Range<usize>,
    expression: &str,
    error: &ScheduleError,
) -> Range<usize> {
    const NAMES: [&str; 6] = [
        "second",
        "minute",
        "hour",
        "day-of-month",
        "month",
        "day-of-week",
    ];
    let ScheduleError::Field { field, .. } = error else {
        return span;
    };
    let mut fields = Vec::new();
    let mut start = None;
    for (i, ch) in expression
        .char_indices()
        .chain(std::iter::once((expression.len(), ' ')))
    {
        match (ch.is_whitespace(), start) {
            (false, None) => start = Some(i),
            (true, Some(s)) => {
                fields.push(s..i);
                start = None;
            }
            _ => {}
        }
    }
    let Some(offset) = 6usize.checked_sub(fields.len()) else {
        return span;
    };
    NAMES
        .iter()
        .position(|name| name == field)
        .and_then(|index| index.checked_sub(offset))
        .and_then(|index| fields.get(index))
        .and_then(|field| string_value_span(text, span.clone(), expression, field.clone()))
        .unwrap_or(span)
}

impl Problem {
    fn into_task_error(self, path: &Path, task: &Option<String>) -> TaskFileError {
        TaskFileError {
            path: path.to_path_buf(),
            task: task.clone(),
            line: self.position.line,
            column: self.position.column,
            snippet: self.position.snippet,
            width: self.position.width,
            message: self.message,
            help: self.help,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Shared with `config`: the checks of single TOML values.

/// The closest of `candidates` to `word`, when one is close enough to be a likely typo.
pub(crate) fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let word = word.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|candidate| (strsim::jaro_winkler(&word, candidate), candidate))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| candidate)
}

const DURATION_HELP: &str =
    "write a number and a unit, like \"90s\", \"15m\", \"2h\" or \"1h 30m\"";

/// Collects the problems of one file while its values are checked one by one, so that a file's
/// problems are all reported together.
pub(crate) struct Checker<'a> {
    pub text: &'a str,
    pub problems: Vec<Problem>,
}

type Value<'i> = Spanned<DeValue<'i>>;

impl<'a> Checker<'a> {
    pub(crate) fn new(text: &'a str) -> Checker<'a> {
        Checker {
            text,
            problems: Vec::new(),
        }
    }

    /// The problems, whole-file ones first, then by position.
    pub(crate) fn finish(mut self) -> Vec<Problem> {
        self.problems
            .sort_by_key(|p| (p.position.line, p.position.column));
        self.problems
    }

    pub(crate) fn report(&mut self, span: Range<usize>, message: String, help: Option<String>) {
        self.problems.push(Problem {
            position: Position::of_span(self.text, span),
            message,
            help,
        });
    }

    pub(crate) fn syntax_error(&mut self, error: &toml::de::Error) {
        let message = format!("invalid TOML: {}", error.message().trim_end());
        match error.span() {
            Some(span) => self.report(span, message, None),
            None => self.problems.push(Problem::whole_file(message, None)),
        }
    }

    /// How a value is described in "found ..." messages: its type and, for scalars, its text.
    pub(crate) fn found(&self, value: &Value<'_>) -> String {
        let kind = value.get_ref().type_str();
        match value.get_ref() {
            DeValue::Table(_) | DeValue::Array(_) => kind.to_string(),
            _ => {
                let raw = self.text.get(value.span()).unwrap_or_default();
                let mut shown: String = raw.chars().take(40).collect();
                if shown.len() < raw.len() {
                    shown.push('…');
                }
                format!("{kind} {shown}")
            }
        }
    }

    fn raw(&self, value: &Value<'_>) -> &'a str {
        self.text.get(value.span()).unwrap_or_default()
    }

    /// Where an error about the content of a string value points: the whole value, quotes
    /// included, as for any value, when it is written on one line; else (a multi-line string,
    /// whose first line may hold only `"""`) its text without the blanks around it.
    pub(crate) fn content_span(&self, value: &Value<'_>) -> Range<usize> {
        let Some(s) = value.get_ref().as_str() else {
            return value.span();
        };
        if !self.raw(value).contains('\n') {
            return value.span();
        }
        let start = s.len() - s.trim_start().len();
        let end = s.trim_end().len().max(start);
        string_value_span(self.text, value.span(), s, start..end).unwrap_or(value.span())
    }

    pub(crate) fn unknown_key(
        &mut self,
        key: &Spanned<DeString<'_>>,
        known: &[&str],
        table: Option<&str>,
    ) {
        let name: &str = key.get_ref();
        let message = match table {
            Some(table) => format!("unknown key `{name}` in `{table}`"),
            None => format!("unknown key `{name}`"),
        };
        let help = match closest(name, known.iter().copied()) {
            Some(suggestion) => format!("did you mean `{suggestion}`?"),
            None => format!("known keys: {}", known.join(", ")),
        };
        self.report(key.span(), message, Some(help));
    }

    pub(crate) fn string<'v>(&mut self, key: &str, value: &'v Value<'_>) -> Option<&'v str> {
        match value.get_ref() {
            DeValue::String(s) => Some(s.as_ref()),
            _ => {
                let message = format!("`{key}` must be a string, found {}", self.found(value));
                self.report(value.span(), message, None);
                None
            }
        }
    }

    pub(crate) fn non_empty_string<'v>(
        &mut self,
        key: &str,
        value: &'v Value<'_>,
    ) -> Option<&'v str> {
        let s = self.string(key, value)?;
        if s.trim().is_empty() {
            self.report(
                value.span(),
                format!("`{key}` is empty"),
                Some(format!("remove `{key}` or give it a value")),
            );
            return None;
        }
        if s.contains('\0') {
            self.report(
                value.span(),
                format!("`{key}` contains a NUL character"),
                None,
            );
            return None;
        }
        Some(s)
    }

    pub(crate) fn boolean(&mut self, key: &str, value: &Value<'_>) -> Option<bool> {
        if let Some(b) = value.get_ref().as_bool() {
            return Some(b);
        }
        let message = format!("`{key}` must be true or false, found {}", self.found(value));
        let help = match value.get_ref().as_str() {
            Some("true" | "false") => Some("remove the quotes".to_string()),
            _ => None,
        };
        self.report(value.span(), message, help);
        None
    }

    pub(crate) fn integer(
        &mut self,
        key: &str,
        value: &Value<'_>,
        range: std::ops::RangeInclusive<i64>,
    ) -> Option<i64> {
        let DeValue::Integer(integer) = value.get_ref() else {
            let message = format!("`{key}` must be an integer, found {}", self.found(value));
            let help = value
                .get_ref()
                .as_str()
                .filter(|s| s.trim().parse::<i64>().is_ok())
                .map(|_| "remove the quotes".to_string());
            self.report(value.span(), message, help);
            return None;
        };
        match i64::from_str_radix(integer.as_str(), integer.radix()) {
            Ok(n) if range.contains(&n) => Some(n),
            _ => {
                let message = format!(
                    "`{key}` must be between {} and {}, found {}",
                    range.start(),
                    range.end(),
                    self.raw(value)
                );
                self.report(value.span(), message, None);
                None
            }
        }
    }

    pub(crate) fn duration(&mut self, key: &str, value: &Value<'_>) -> Option<Duration> {
        match value.get_ref() {
            DeValue::String(s) => match humantime::parse_duration(s.trim()) {
                Ok(duration) => Some(duration),
                Err(error) => {
                    // The value, on one line (`\n` for a line break), whatever quotes it had.
                    let message = format!("`{key}` = {s:?} is not a valid duration: {error}");
                    self.report(
                        self.content_span(value),
                        message,
                        Some(DURATION_HELP.into()),
                    );
                    None
                }
            },
            other => {
                let message = format!(
                    "`{key}` must be a duration string like \"90s\" or \"2h\", found {}",
                    self.found(value)
                );
                let help = match other {
                    DeValue::Integer(_) => format!(
                        "durations need a unit: write `{key} = \"{}s\"` for {} seconds",
                        self.raw(value),
                        self.raw(value)
                    ),
                    _ => DURATION_HELP.to_string(),
                };
                self.report(value.span(), message, Some(help));
                None
            }
        }
    }

    fn positive_duration(&mut self, key: &str, value: &Value<'_>, help: &str) -> Option<Duration> {
        let duration = self.duration(key, value)?;
        if duration.is_zero() {
            self.report(
                self.content_span(value),
                format!("`{key}` must be greater than zero"),
                Some(help.to_string()),
            );
            return None;
        }
        Some(duration)
    }

    pub(crate) fn choice<T: Copy>(
        &mut self,
        key: &str,
        value: &Value<'_>,
        choices: &[(&str, T)],
    ) -> Option<T> {
        let s = self.string(key, value)?;
        if let Some((_, choice)) = choices.iter().find(|(name, _)| *name == s) {
            return Some(*choice);
        }
        let names: Vec<String> = choices
            .iter()
            .map(|(name, _)| format!("{name:?}"))
            .collect();
        let message = format!("`{key}` must be one of {}, found {s:?}", names.join(", "));
        let help = closest(s, choices.iter().map(|(name, _)| *name))
            .map(|name| format!("did you mean {name:?}?"));
        self.report(self.content_span(value), message, help);
        None
    }

    pub(crate) fn table<'v, 'i>(
        &mut self,
        key: &str,
        value: &'v Value<'i>,
        example: &str,
    ) -> Option<&'v DeTable<'i>> {
        match value.get_ref() {
            DeValue::Table(table) => Some(table),
            _ => {
                let message = format!(
                    "`{key}` must be a table like {example}, found {}",
                    self.found(value)
                );
                self.report(value.span(), message, None);
                None
            }
        }
    }

    pub(crate) fn path(&mut self, key: &str, value: &Value<'_>) -> Option<PathBuf> {
        self.non_empty_string(key, value).map(PathBuf::from)
    }

    fn absolute_path(&mut self, key: &str, value: &Value<'_>) -> Option<PathBuf> {
        let path = self.path(key, value)?;
        if !path.is_absolute() {
            let message = format!("`{key}` must be an absolute path, found {path:?}");
            let help = "a relative path would depend on where zkcron was started".to_string();
            self.report(self.content_span(value), message, Some(help));
            return None;
        }
        Some(path)
    }

    /// A table of string values, like `env` or `[node].labels`.
    pub(crate) fn string_map(
        &mut self,
        key: &str,
        value: &Value<'_>,
        example: &str,
    ) -> Vec<(Spanned<String>, String)> {
        let Some(table) = self.table(key, value, example) else {
            return Vec::new();
        };
        let mut entries = Vec::new();
        for (name, item) in table.iter() {
            let name_text: &str = name.get_ref();
            match item.get_ref() {
                DeValue::String(s) if s.contains('\0') => {
                    self.report(
                        item.span(),
                        format!("`{key}.{name_text}` contains a NUL character"),
                        None,
                    );
                }
                DeValue::String(s) => {
                    entries.push((
                        Spanned::new(name.span(), name_text.to_string()),
                        s.to_string(),
                    ));
                }
                _ => {
                    let message = format!(
                        "`{key}.{name_text}` must be a string, found {}",
                        self.found(item)
                    );
                    let help = match item.get_ref() {
                        DeValue::Integer(_) | DeValue::Float(_) | DeValue::Boolean(_) => {
                            Some(format!("quote it: {name_text} = \"{}\"", self.raw(item)))
                        }
                        _ => None,
                    };
                    self.report(item.span(), message, help);
                }
            }
        }
        entries
    }

    fn env(&mut self, value: &Value<'_>) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        for (name, item) in self.string_map("env", value, "{ PGHOST = \"db1\" }") {
            let text = name.get_ref();
            // The child gets it as one `NAME=value` string.
            let entry_len = text.len() + 1 + item.len();
            if too_long_for_exec(entry_len) {
                let (message, help) = arg_too_long(&format!("`env.{text}`"), entry_len);
                self.report(name.span(), message, Some(help));
            } else if !is_valid_env_name(text) {
                self.report(
                    name.span(),
                    format!("`{text}` is not a valid environment variable name"),
                    Some("names must match [A-Za-z_][A-Za-z0-9_]*".into()),
                );
            } else if text.starts_with("ZKCRON_") {
                self.report(
                    name.span(),
                    format!("`env` must not set `{text}`: names starting with ZKCRON_ are reserved for the variables zkcron sets"),
                    Some("rename the variable".into()),
                );
            } else {
                env.insert(name.into_inner(), item);
            }
        }
        env
    }

    fn command(&mut self, value: &Value<'_>) -> Option<CommandLine> {
        const EXAMPLE: &str = "write an array like [\"/usr/local/bin/backup\", \"--full\"], or a string for /bin/sh -c";
        match value.get_ref() {
            DeValue::String(s) if s.trim().is_empty() => {
                self.report(
                    value.span(),
                    "`command` is empty".into(),
                    Some(EXAMPLE.into()),
                );
                None
            }
            DeValue::String(s) if s.contains('\0') => {
                self.report(
                    value.span(),
                    "`command` contains a NUL character".into(),
                    None,
                );
                None
            }
            DeValue::String(s) => {
                if too_long_for_exec(s.len()) {
                    let (message, help) = arg_too_long("`command`", s.len());
                    self.report(value.span(), message, Some(help));
                    return None;
                }
                Some(CommandLine::Shell(s.to_string()))
            }
            DeValue::Array(items) => {
                if items.is_empty() {
                    self.report(
                        value.span(),
                        "`command` is an empty array".into(),
                        Some(EXAMPLE.into()),
                    );
                    return None;
                }
                let mut argv = Vec::new();
                for (index, item) in items.iter().enumerate() {
                    match item.get_ref().as_str() {
                        Some(s) if s.contains('\0') => {
                            self.report(
                                item.span(),
                                "`command` contains a NUL character".into(),
                                None,
                            );
                        }
                        Some(s) if too_long_for_exec(s.len()) => {
                            let what = format!("element {} of `command`", index + 1);
                            let (message, help) = arg_too_long(&what, s.len());
                            self.report(item.span(), message, Some(help));
                        }
                        Some(s) => argv.push(s.to_string()),
                        None => {
                            let message = format!(
                                "every element of `command` must be a string, found {}",
                                self.found(item)
                            );
                            self.report(
                                item.span(),
                                message,
                                Some(format!("quote it: \"{}\"", self.raw(item))),
                            );
                        }
                    }
                }
                if items[0]
                    .get_ref()
                    .as_str()
                    .is_some_and(|s| s.trim().is_empty())
                {
                    self.report(
                        items[0].span(),
                        "the program (the first element of `command`) is empty".into(),
                        Some(EXAMPLE.into()),
                    );
                    return None;
                }
                (argv.len() == items.len()).then_some(CommandLine::Argv(argv))
            }
            _ => {
                let message = format!(
                    "`command` must be an array of strings or a string, found {}",
                    self.found(value)
                );
                self.report(value.span(), message, Some(EXAMPLE.into()));
                None
            }
        }
    }

    fn retries(&mut self, value: &Value<'_>) -> Option<RetryPolicy> {
        let table = self.table("retries", value, "{ attempts = 2, backoff = \"30s\" }")?;
        let mut retries = RetryPolicy::default();
        for (key, item) in table.iter() {
            match key.get_ref().as_ref() {
                "attempts" => {
                    if let Some(n) = self.integer("retries.attempts", item, 0..=100) {
                        retries.attempts = n as u32;
                    }
                }
                "backoff" => {
                    retries.backoff = self
                        .duration("retries.backoff", item)
                        .unwrap_or(retries.backoff)
                }
                "max_backoff" => {
                    retries.max_backoff = self
                        .duration("retries.max_backoff", item)
                        .unwrap_or(retries.max_backoff)
                }
                _ => self.unknown_key(key, RETRY_KEYS, Some("retries")),
            }
        }
        if retries.max_backoff < retries.backoff {
            let message = format!(
                "`retries.max_backoff` ({}) is shorter than `retries.backoff` ({})",
                humantime::format_duration(retries.max_backoff),
                humantime::format_duration(retries.backoff)
            );
            self.report(
                value.span(),
                message,
                Some("raise `max_backoff` or lower `backoff`".into()),
            );
            return None;
        }
        Some(retries)
    }

    fn version_req(&mut self, value: &Value<'_>) -> Option<semver::VersionReq> {
        let s = self.string("version_req", value)?;
        match semver::VersionReq::parse(s) {
            Ok(req) => Some(req),
            Err(error) => {
                let message =
                    format!("`version_req` = {s:?} is not a version requirement: {error}");
                let help = "write a semver requirement like \">=2.1\" or \">=2.1, <3\"".to_string();
                self.report(self.content_span(value), message, Some(help));
                None
            }
        }
    }

    /// The user a task runs as (see [`TaskSpec::user`]), checking what this host and this
    /// process allow.
    fn effective_user(
        &mut self,
        user: Option<(&str, Range<usize>)>,
        defaults: &TaskDefaults,
    ) -> Option<String> {
        let identity = &defaults.identity;
        if !identity.is_root() {
            if let Some((name, span)) = user
                && name != identity.user_name
            {
                let message = format!(
                    "task runs as user {name:?} but zkcron runs as {:?} (not root) and cannot switch users",
                    identity.user_name
                );
                self.report(
                    span,
                    message,
                    Some("remove `user` or run zkcron as root".into()),
                );
            }
            // Running as the daemon's own user needs no switch.
            return None;
        }
        match user {
            Some((name, span)) => {
                if let Some(problem) = missing_account("user", name, user_exists(name)) {
                    self.report(span, problem.0, Some(problem.1));
                }
                Some(name.to_string())
            }
            None => {
                let name = defaults.user.as_ref()?;
                if let Some((message, help)) = missing_account("user", name, user_exists(name)) {
                    self.problems.push(Problem::whole_file(
                        format!("{message} (it is [scheduler].default_user)"),
                        Some(help),
                    ));
                }
                Some(name.clone())
            }
        }
    }

    fn group(
        &mut self,
        group: Option<(&str, Range<usize>)>,
        identity: &Identity,
    ) -> Option<String> {
        let (name, span) = group?;
        if !identity.is_root() {
            let message = format!(
                "task runs as group {name:?} but zkcron runs as {:?} (not root) and cannot switch groups",
                identity.user_name
            );
            self.report(
                span,
                message,
                Some("remove `group` or run zkcron as root".into()),
            );
            return None;
        }
        let exists = nix::unistd::Group::from_name(name).map(|g| g.is_some());
        if let Some((message, help)) = missing_account("group", name, exists) {
            self.report(span, message, Some(help));
        }
        Some(name.to_string())
    }
}

pub(crate) fn user_exists(name: &str) -> nix::Result<bool> {
    nix::unistd::User::from_name(name).map(|u| u.is_some())
}

/// The message and help when a user or group cannot be found on this host.
pub(crate) fn missing_account(
    kind: &str,
    name: &str,
    exists: nix::Result<bool>,
) -> Option<(String, String)> {
    match exists {
        Ok(true) => None,
        Ok(false) => Some((
            format!("{kind} {name:?} does not exist on this host"),
            format!("create the {kind}, or fix the name"),
        )),
        Err(error) => Some((
            format!("cannot look up {kind} {name:?}: {error}"),
            "check the host's user database (NSS)".to_string(),
        )),
    }
}

/// Linux refuses to start a program (E2BIG) when one of its arguments or environment strings,
/// with its terminating NUL, is longer than this: `MAX_ARG_STRLEN`, 32 pages of 4 KiB.
pub const MAX_ARG_BYTES: usize = 128 * 1024;

/// Linux refuses to start a program when its arguments and environment (the strings with their
/// NULs, and a pointer to each) take more than this: a quarter of the stack limit, which is
/// usually 8 MiB.
pub const MAX_EXEC_BYTES: usize = 2 * 1024 * 1024;

/// What the variables zkcron sets itself may take of [`MAX_EXEC_BYTES`] (`PATH`, `HOME` up to
/// `PATH_MAX`, `ZKCRON_*`, ...).
const ZKCRON_ENV_BYTES: usize = 8 * 1024;

/// Whether Linux would refuse a string of `len` bytes as an argument or environment string.
fn too_long_for_exec(len: usize) -> bool {
    len + 1 > MAX_ARG_BYTES
}

/// The message and help for a string of `len` bytes that a run would pass to the program
/// (`what`) and that is over [`MAX_ARG_BYTES`].
fn arg_too_long(what: &str, len: usize) -> (String, String) {
    (
        format!(
            "{what} is {len} bytes; Linux refuses to start a program with any single argument or \
             environment string over 128 KiB ({} bytes and its NUL), so every run would fail",
            MAX_ARG_BYTES - 1
        ),
        "put the script or data in a file, and run that file: command = [\"/usr/local/bin/job\"]"
            .into(),
    )
}

/// The bytes a run of `command` with `env` takes as the program's arguments and environment,
/// counted as Linux counts them, with room for the variables zkcron sets.
fn exec_size(command: &CommandLine, env: &BTreeMap<String, String>) -> usize {
    const POINTER: usize = std::mem::size_of::<usize>();
    let string = |len: usize| len + 1 + POINTER;
    let argv: usize = match command {
        CommandLine::Shell(script) => string("/bin/sh".len()) + string(2) + string(script.len()),
        CommandLine::Argv(argv) => argv.iter().map(|arg| string(arg.len())).sum(),
    };
    let env: usize = env
        .iter()
        .map(|(name, value)| string(name.len() + 1 + value.len()))
        .sum();
    argv + env + ZKCRON_ENV_BYTES
}

/// `[A-Za-z_][A-Za-z0-9_]*`: what shells accept as a variable name.
fn is_valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quote_leaves_plain_paths_alone() {
        assert_eq!(
            shell_quote(Path::new("/etc/zkcron/jobs.d/a-b_c.toml")),
            "/etc/zkcron/jobs.d/a-b_c.toml"
        );
        assert_eq!(shell_quote(Path::new("/x/a b.toml")), "'/x/a b.toml'");
        assert_eq!(shell_quote(Path::new("/x/it's")), "'/x/it'\\''s'");
    }

    #[test]
    fn closest_finds_typos_only() {
        assert_eq!(
            closest("timezon", TASK_KEYS.iter().copied()),
            Some("timezone")
        );
        assert_eq!(
            closest("Schedule", TASK_KEYS.iter().copied()),
            Some("schedule")
        );
        assert_eq!(closest("xyzzy", TASK_KEYS.iter().copied()), None);
    }
}
