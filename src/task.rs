//! Task files in `jobs.d/`: what a task is, and loading it from disk with errors users can act on.
//!
//! This module owns the task-file format (BRIEF §2): one task per `<name>.toml`, the name being
//! the file stem. It turns files into validated [`TaskSpec`]s or [`TaskFileError`]s that point at
//! file, line and column. It does not run anything and keeps no state between loads: the daemon
//! decides what to do with a file that became invalid (it keeps the last good version).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono_tz::Tz;

use crate::schedule::Schedule;

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
