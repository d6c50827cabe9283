//! Task files in `jobs.d/`: what a task is, and loading it from disk with errors users can act on.
//!
//! This module owns the task-file format (docs/task-files.md): one task per `<name>.toml`, the name being
//! the file stem. It turns files into validated [`TaskSpec`]s or [`TaskFileError`]s that point at
//! file, line and column. It does not run anything and keeps no state between loads: the daemon
//! decides what to do with a file that became invalid (it keeps the last good version).
//!
//! Layout: [`load`] reads the files (trust, size, encoding) and turns them into specs or
//! errors; `check` validates a task file's keys into a [`TaskSpec`] (`when`: a schedule list,
//! the active window); `checker` holds the checks of single TOML values that `config` shares;
//! `run_on` says where a task's ticks run (leader, every node, work items); `calendar` reads
//! `calendars.d/` (the days and periods a task's `exclude` names); `chain` checks
//! `after` across files (missing parents, cycles); `digest` is the canonical digest of a
//! definition; `cache` reloads only the files that changed. Who loads (the [`Identity`]) and the
//! account lookups are in [`crate::accounts`]; where a problem is and how it is rendered, in
//! `crate::diag`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono_tz::Tz;

use crate::diag::{Problem, Report};
use crate::schedule::{Calendars, Schedule};

mod cache;
mod calendar;
mod chain;
mod check;
mod checker;
mod digest;
pub mod load;
mod run_on;
mod when;

pub use crate::accounts::Identity;
pub(crate) use crate::accounts::{missing_account, user_exists};
pub(crate) use crate::diag::{decode_utf8, shell_quote};
pub use cache::{LoadCache, RACY_WINDOW, Scan, Scanned, reload_jobs_dir};
pub use calendar::{CALENDAR_KEYS, LoadedCalendars, load_calendars_dir, parse_calendar};
pub use chain::Parent;
pub use check::{MAX_ARG_BYTES, MAX_EXEC_BYTES};
pub(crate) use checker::{Checker, closest};
pub use digest::KeptDigest;
pub use load::{load_jobs_dir, load_task_file, parse_task};
pub use run_on::{MAX_WORK_ITEMS, RunOn, WORK_ITEM_PATTERN};

/// One task, validated: every field has its final value, defaults applied.
///
/// The settings most tasks leave at their defaults are in [`TaskExtras`], boxed only when a
/// task sets one of them (`spec.extras.env` reads through it): a daemon holds every task it
/// loaded, and a plain task is then about 200 bytes instead of 430.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    /// The file stem; unique in a jobs dir, part of ZooKeeper paths and fire ids. Shared with
    /// the maps that hold a task's name per loaded task (leadership, metrics).
    pub name: Arc<str>,
    /// The file the task came from, for messages.
    pub path: PathBuf,
    pub schedule: Schedule,
    pub command: CommandLine,
    /// The user to run as; `None` runs as the daemon's own user.
    pub user: Option<String>,
    pub overlap: OverlapPolicy,
    pub catch_up: CatchUpPolicy,
    /// Upper bound (exclusive) of the deterministic per-tick delay; zero turns jitter off.
    pub jitter: Duration,
    /// Stop this task's running jobs when the node loses its ZooKeeper session (expired, or
    /// disconnected for longer than the session timeout), since another node may then run
    /// the task. Off by default: a disconnect alone never kills a job.
    pub kill_on_session_loss: bool,
    /// What a new leader does with a claimed tick whose node died mid-run.
    pub on_node_loss: NodeLossPolicy,
    /// A disabled task is loaded and validated but never fires.
    pub enabled: bool,
    /// The rarely set settings (description, group, working dir, env, timeout, kill grace,
    /// starting deadline, retries, `version_req`, `require_labels`, `on_failure`, `run_on`,
    /// `pause_on_failure`, `after`).
    pub extras: Extras,
    /// The canonical digest of the fields above, worked out once ([`TaskSpec::digest`]).
    pub digest: KeptDigest,
}

/// The settings of a task that most tasks leave at their defaults (see [`TaskSpec`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskExtras {
    pub description: Option<String>,
    /// The group to run as; `None` uses the user's primary group.
    pub group: Option<String>,
    pub working_dir: Option<PathBuf>,
    pub env: BTreeMap<String, String>,
    /// After this long the process group gets SIGTERM; `None` lets it run for ever.
    pub timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when a run is stopped.
    pub kill_grace: Duration,
    /// A tick older than this is never run; `None` means no limit.
    pub starting_deadline: Option<Duration>,
    pub retries: RetryPolicy,
    /// Only nodes whose release matches may own the task (used by the cluster backend).
    pub version_req: Option<semver::VersionReq>,
    /// Only nodes whose `[node] labels` contain every one of these pairs may own the task (used
    /// by the cluster backend).
    pub require_labels: BTreeMap<String, String>,
    /// Run (argv form) by the node that ran a job when its last attempt failed: a non-zero
    /// exit, a signal, a timeout, or a process that could not start. Never retried.
    pub on_failure: Option<Vec<String>>,
    /// Where each tick runs: on the leader (the default), on every node, or split into work
    /// items (`run_on`, `work_items`).
    pub run_on: RunOn,
    /// When a run's last attempt fails, the task is paused cluster-wide (as by `zkcron pause`),
    /// with the failed run as the reason.
    pub pause_on_failure: bool,
    /// The tasks each of whose successful runs causes one run of this task (`after`).
    pub after: Vec<Parent>,
    /// `max_runs`: at most this many scheduled ticks run, counted in the fire record by the
    /// claims themselves (for every-node and pooled tasks, per unit); then the task is done.
    pub max_runs: Option<u32>,
}

/// Every extra setting at its default, for tasks that set none.
static NO_EXTRAS: TaskExtras = TaskExtras {
    description: None,
    group: None,
    working_dir: None,
    env: BTreeMap::new(),
    timeout: None,
    kill_grace: DEFAULT_KILL_GRACE,
    starting_deadline: None,
    retries: RetryPolicy::DEFAULT,
    version_req: None,
    require_labels: BTreeMap::new(),
    on_failure: None,
    run_on: RunOn::Leader,
    pause_on_failure: false,
    after: Vec::new(),
    max_runs: None,
};

impl Default for TaskExtras {
    /// Every one at the default a task file gets when it does not set it.
    fn default() -> TaskExtras {
        NO_EXTRAS.clone()
    }
}

/// A task's [`TaskExtras`]: nothing allocated while every one is at its default. Reads go
/// through `Deref` (`spec.extras.timeout`); a write (`DerefMut`) allocates them.
#[derive(Clone, Default)]
pub struct Extras(Option<Box<TaskExtras>>);

impl From<TaskExtras> for Extras {
    /// Boxed only when one of them is not the default.
    fn from(extras: TaskExtras) -> Extras {
        Extras((extras != NO_EXTRAS).then(|| Box::new(extras)))
    }
}

impl std::ops::Deref for Extras {
    type Target = TaskExtras;

    fn deref(&self) -> &TaskExtras {
        self.0.as_deref().unwrap_or(&NO_EXTRAS)
    }
}

impl std::ops::DerefMut for Extras {
    fn deref_mut(&mut self) -> &mut TaskExtras {
        self.0.get_or_insert_with(Box::default)
    }
}

impl PartialEq for Extras {
    fn eq(&self, other: &Extras) -> bool {
        **self == **other
    }
}

impl fmt::Debug for Extras {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

impl TaskSpec {
    /// Why a node of `release` with `labels` may not own this task (its `version_req` or
    /// `require_labels`), or `None` when it may. Drains and leadership are the cluster's
    /// business, not the task's.
    pub fn ineligibility(
        &self,
        release: &semver::Version,
        labels: &BTreeMap<String, String>,
    ) -> Option<String> {
        let mut why = Vec::new();
        if let Some(req) = self
            .extras
            .version_req
            .as_ref()
            .filter(|r| !r.matches(release))
        {
            why.push(format!(
                "version_req {req} does not match this node's release {release}"
            ));
        }
        let missing: Vec<String> = self
            .extras
            .require_labels
            .iter()
            .filter(|(name, value)| labels.get(*name) != Some(*value))
            .map(|(name, value)| match labels.get(name) {
                Some(has) => format!("{name}={value} (this node has {name}={has})"),
                None => format!("{name}={value} (this node has no {name})"),
            })
            .collect();
        if !missing.is_empty() {
            why.push(format!("require_labels needs {}", missing.join(", ")));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }
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
    /// Wait for the running one to end, then start (at most one tick waits; later ones are
    /// dropped).
    Queue,
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

impl RetryPolicy {
    /// No retries; the backoff a `retries` table starts from.
    pub const DEFAULT: RetryPolicy = RetryPolicy {
        attempts: 0,
        backoff: Duration::from_secs(10),
        max_backoff: Duration::from_secs(600),
    };
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy::DEFAULT
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
    /// The backend that will fire the tasks: a key it cannot honour is an error.
    pub backend: TaskBackend,
    /// The calendars a task's `exclude` may name (`calendars.d/`).
    pub calendars: Arc<Calendars>,
}

/// The tests' defaults, the one way the unit and the integration tests write them: UTC, no
/// default user, the test process's identity, the embedded backend (`tests/common`'s
/// `task_defaults` sets a load's identity and backend on them). Test code only (the
/// `testkit` feature).
#[cfg(any(test, feature = "testkit"))]
impl TaskDefaults {
    pub fn for_tests() -> TaskDefaults {
        TaskDefaults {
            timezone: Tz::UTC,
            user: None,
            identity: Identity::current(),
            backend: TaskBackend::Local,
            calendars: Arc::default(),
        }
    }
}

/// Which backend fires the tasks being loaded (`[coordination].backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskBackend {
    /// The embedded backend: one host runs every task.
    Local,
    /// The ZooKeeper backend: a cluster of nodes shares the tasks.
    Zookeeper,
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

/// The result of scanning a jobs directory: its tasks as `T`, a [`TaskSpec`] or (through a
/// [`LoadCache`]) an `Arc` of one.
#[derive(Debug)]
pub struct LoadedDir<T = TaskSpec> {
    /// Valid tasks, sorted by name.
    pub tasks: Vec<T>,
    /// Files that are task files but invalid, sorted by path.
    pub errors: Vec<TaskFileError>,
    /// Files skipped on purpose (hidden, backups, not `.toml`), with the reason, for debug logs.
    pub ignored: Vec<(PathBuf, &'static str)>,
}

impl<T> Default for LoadedDir<T> {
    fn default() -> LoadedDir<T> {
        LoadedDir {
            tasks: Vec::new(),
            errors: Vec::new(),
            ignored: Vec::new(),
        }
    }
}

/// The pattern a task name must match, as shown to users.
pub const TASK_NAME_PATTERN: &str = "[a-z0-9][a-z0-9._-]{0,99}";

/// Task files larger than this are refused unread: no task needs more, and a runaway generator
/// must not make the daemon allocate without bound.
pub const MAX_TASK_FILE_BYTES: u64 = 1024 * 1024;

/// The keys a task file may set, in the order the brief documents them. `zkcron-task(5)`
/// (`manual::TASK_PAGE_KEYS`) must document each.
pub const TASK_KEYS: &[&str] = &[
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
    "require_labels",
    "on_failure",
    "pause_on_failure",
    "active_from",
    "active_until",
    "dst_gap",
    "dst_repeat",
    "max_runs",
    "exclude",
    "work_items",
    "run_on",
    "after",
];

/// The keys of the `retries` table.
pub const RETRY_KEYS: &[&str] = &["attempts", "backoff", "max_backoff"];

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

impl Problem {
    pub(crate) fn into_task_error(self, path: &Path, task: &Option<String>) -> TaskFileError {
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

#[cfg(test)]
mod tests {
    use super::*;

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
