//! Runs one tick's command as a process group, with timeout, stop requests, retries and output
//! streaming.
//!
//! This module owns everything between "this tick may run now" and "this is how it ended": building
//! the child's clean environment, switching user and group, spawning the command in its own process
//! group, logging its output line by line (at most `output_lines` per attempt, head and tail), killing the whole
//! group on timeout or stop, and retrying failed attempts with exponential backoff.
//!
//! A run goes in three steps, so that the daemon can put its claim between resolving and
//! spawning: [`prepare`] does every lookup the spawn needs (user, group, environment, `argv[0]`
//! in `PATH`, working directory), [`start`] only spawns the first attempt, and
//! [`StartedRun::finish`] waits, retries and reports the run's end when the main process of its
//! last attempt exits (background processes it leaves behind are not tracked).
//! [`run`] does all three.
//!
//! It must not decide *whether* a tick runs (claims, overlap and deadlines belong to the planner
//! and the daemon), read task files, or talk to the coordination backend. It never panics on OS
//! errors: they end an attempt as [`Exit::SpawnFailed`] or are logged.
//!
//! **Invariant:** a run that timed out or was stopped leaves no process of its group behind; the
//! group gets SIGKILL after its main process exits. A run that ended on its own may leave
//! background processes behind, as cron does.

use std::collections::BTreeMap;
use std::ffi::{CString, OsString};
use std::fmt;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::{Gid, Group, Pid, Uid, User};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, BufReader};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::instrument::WithSubscriber;

use crate::accounts::Identity;
use crate::task::{CommandLine, RetryPolicy};

/// The `PATH` a child starts with, as cron gives it.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Longer output lines are cut to this many bytes so that a child cannot make us buffer without
/// bound.
pub const MAX_LINE_BYTES: usize = 4096;

/// How long a finished run waits for its output pipes to reach end of file. A background
/// grandchild may hold them open for ever; after this the readers are detached.
const OUTPUT_DRAIN_LIMIT: Duration = Duration::from_secs(1);

/// Everything needed to run one tick's command. The caller has already resolved defaults.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// The task's name, given to the child as `ZKCRON_TASK` and put on every log line.
    pub task: String,
    /// `<task>@<unix-seconds>`, the same on every node; given to the child and put on every log
    /// line.
    pub fire_id: String,
    /// The tick instant, given to the child as `ZKCRON_SCHEDULED_AT`.
    pub scheduled_at: DateTime<Utc>,
    /// The tick plus jitter: when the spawn was meant to happen; lateness is measured from it.
    pub due_at: DateTime<Utc>,
    /// This node's id, given to the child as `ZKCRON_NODE`.
    pub node_id: String,
    /// What to execute: argv directly, or a script through `/bin/sh -c`.
    pub command: CommandLine,
    /// The user to run as, already resolved by the caller (task user or default user); `None` runs
    /// as the daemon's own user.
    pub user: Option<String>,
    /// The group to run as; `None` uses the user's primary group.
    pub group: Option<String>,
    /// Where the child starts; `None` uses the user's home if it exists, else `/`.
    pub working_dir: Option<PathBuf>,
    /// Set last, so it may override anything, including `PATH`.
    pub env: BTreeMap<String, String>,
    /// After this long the process group gets SIGTERM; `None` lets it run for ever.
    pub timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL on timeout or stop.
    pub kill_grace: Duration,
    /// How many more times a failed attempt is tried, and how long to wait in between.
    pub retries: RetryPolicy,
    /// At most this many lines of an attempt's output (stdout and stderr together) are logged:
    /// the first half (rounded down) as they come, the last lines when the output ends (see
    /// `OutputBudget`); what lies between is read, counted and reported in one line between the
    /// two.
    pub output_lines: usize,
}

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// The main process exited with this code.
    Code(i32),
    /// The main process was killed by this signal, not by us.
    Signal(i32),
    /// The attempt ran longer than its timeout and was killed.
    TimedOut,
    /// No process was started; the reason.
    SpawnFailed(String),
    /// The caller asked the run to stop (replace or shutdown) and it was killed.
    Stopped,
}

impl Exit {
    /// Whether the attempt counts as a success: exit code 0.
    pub fn is_success(&self) -> bool {
        matches!(self, Exit::Code(0))
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Code(code) => write!(f, "exit code {code}"),
            Exit::Signal(signal) => match Signal::try_from(*signal) {
                Ok(name) => write!(f, "killed by signal {signal} ({})", name.as_str()),
                Err(_) => write!(f, "killed by signal {signal}"),
            },
            Exit::TimedOut => f.write_str("timed out"),
            Exit::SpawnFailed(reason) => write!(f, "failed to start: {reason}"),
            Exit::Stopped => f.write_str("stopped"),
        }
    }
}

/// What happened in one attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptOutcome {
    /// 1 for the first try, as `ZKCRON_ATTEMPT`.
    pub attempt: u32,
    /// How it ended; decides whether the run retries.
    pub exit: Exit,
    /// From spawn to the main process's exit; zero when nothing was spawned.
    pub duration: Duration,
    /// The main process, which is also the process group id; `None` when nothing was spawned.
    pub pid: Option<u32>,
    /// Spawn instant minus `due_at`, for the first attempt's spawn only; negative when early.
    pub lateness: Option<TimeDelta>,
}

/// What happened in a run: its attempts in order, never empty when returned by [`run`].
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// Oldest first; the last one decides the run's result.
    pub attempts: Vec<AttemptOutcome>,
}

impl RunOutcome {
    /// The attempt that decided the run's result.
    pub fn last(&self) -> Option<&AttemptOutcome> {
        self.attempts.last()
    }

    /// Whether the last attempt exited with code 0.
    pub fn succeeded(&self) -> bool {
        self.last().is_some_and(|a| a.exit.is_success())
    }
}

/// How hard a run has been asked to stop. Requests only ever escalate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum StopKind {
    Running,
    /// Start no further attempt; a running one goes on (shutdown, or the task was removed).
    NoMoreAttempts,
    /// SIGTERM, then SIGKILL after `kill_grace`.
    Terminate,
    /// SIGKILL at once.
    KillNow,
}

/// Tells a run to stop: SIGTERM to its process group, SIGKILL after `kill_grace` (or at once
/// with [`StopHandle::kill_now`]), or only to start no further attempt
/// ([`StopHandle::cancel_retries`]). No further retries after any request. Dropping every handle
/// never stops a run.
#[derive(Debug, Clone)]
pub struct StopHandle {
    /// Holds the strongest request so far; the run watches it.
    sender: watch::Sender<StopKind>,
}

/// The receiving side of a [`StopHandle`], passed into [`run`].
#[derive(Debug)]
pub struct StopSignal {
    /// Sees the strongest request so far; a closed channel means no request will ever come.
    receiver: watch::Receiver<StopKind>,
}

impl StopHandle {
    /// A handle and the signal it controls.
    pub fn new() -> (StopHandle, StopSignal) {
        let (sender, receiver) = watch::channel(StopKind::Running);
        (StopHandle { sender }, StopSignal { receiver })
    }

    /// Lets a running attempt finish but starts no retry: a pending backoff ends the run at once.
    pub fn cancel_retries(&self) {
        self.escalate(StopKind::NoMoreAttempts);
    }

    /// Stops the run gracefully: SIGTERM now, SIGKILL after `kill_grace`.
    pub fn terminate(&self) {
        self.escalate(StopKind::Terminate);
    }

    /// Stops the run with SIGKILL at once, even if `terminate` was called before.
    pub fn kill_now(&self) {
        self.escalate(StopKind::KillNow);
    }

    fn escalate(&self, kind: StopKind) {
        self.sender.send_if_modified(|current| {
            if *current < kind {
                *current = kind;
                true
            } else {
                false
            }
        });
    }
}

impl StopSignal {
    /// The strongest request so far.
    fn current(&self) -> StopKind {
        *self.receiver.borrow()
    }

    /// Waits until a request stronger than `seen` arrives; waits for ever when every handle is
    /// gone.
    async fn stronger_than(&mut self, seen: StopKind) -> StopKind {
        // The borrowed value is copied out at once: holding it across an await would make the
        // run future `!Send`.
        let kind = self
            .receiver
            .wait_for(|kind| *kind > seen)
            .await
            .map(|k| *k);
        match kind {
            Ok(kind) => kind,
            Err(_) => std::future::pending().await,
        }
    }
}

/// The delay before retry `retry` (1-based): `backoff * 2^(retry-1)`, at most `max_backoff`.
pub fn retry_delay(policy: &RetryPolicy, retry: u32) -> Duration {
    let factor = 2u32.saturating_pow(retry.saturating_sub(1));
    policy
        .backoff
        .saturating_mul(factor)
        .min(policy.max_backoff)
}

/// Which identity a run gets, decided from who we are and what was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserAction {
    /// Run with the daemon's own credentials.
    RunAsSelf,
    /// Switch credentials in the child before exec (only when we are root).
    Switch {
        user: String,
        /// `None` uses the user's primary group.
        group: Option<String>,
    },
    /// Do not start; the reason for the user.
    Refuse(String),
}

/// Decides how to honour `user` and `group`, given our identity `me` and our primary group's name
/// `my_group`. Root may switch to anyone; anyone else may only name themselves.
pub fn decide_user(
    me: &Identity,
    my_group: &str,
    user: Option<&str>,
    group: Option<&str>,
) -> UserAction {
    if me.is_root() {
        return match (user, group) {
            (None, None) => UserAction::RunAsSelf,
            (user, group) => UserAction::Switch {
                user: user.unwrap_or(&me.user_name).to_owned(),
                group: group.map(str::to_owned),
            },
        };
    }
    if let Some(user) = user.filter(|u| *u != me.user_name) {
        return UserAction::Refuse(format!(
            "cannot run as user \"{user}\": zkcron is not running as root"
        ));
    }
    if let Some(group) = group.filter(|g| *g != my_group) {
        return UserAction::Refuse(format!(
            "cannot run as group \"{group}\": zkcron is not running as root"
        ));
    }
    UserAction::RunAsSelf
}

/// Credentials the child switches to before exec, resolved in the parent so that the child only
/// makes async-signal-safe system calls.
#[derive(Debug)]
struct Credentials {
    uid: Uid,
    gid: Gid,
    /// Supplementary groups, as `initgroups` would set them.
    groups: Vec<Gid>,
}

/// One attempt's process setup, resolved before spawning.
#[derive(Debug)]
struct ProcessSetup {
    /// The child's whole environment, in the order later entries override earlier ones.
    env: Vec<(String, OsString)>,
    /// Checked to exist, so a bad directory is reported as such rather than as a missing binary.
    working_dir: PathBuf,
    /// `None` keeps the daemon's own credentials.
    credentials: Option<Credentials>,
    /// The program with a `/` in it: resolved against the child's `PATH` here, as `execvp`
    /// would, so that std can spawn with `posix_spawn` (vfork) instead of `fork`. A fork of a
    /// daemon holding thousands of tasks copies its page tables, which costs milliseconds.
    program: PathBuf,
}

/// The daemon's own user, group and passwd entry. They do not change while it runs, so they are
/// looked up once instead of reading the user and group databases on every spawn.
struct Myself {
    identity: Identity,
    group: String,
    account: Option<User>,
}

fn myself() -> &'static Myself {
    static MYSELF: std::sync::OnceLock<Myself> = std::sync::OnceLock::new();
    MYSELF.get_or_init(|| {
        let gid = Gid::current();
        Myself {
            identity: Identity::current(),
            group: Group::from_gid(gid)
                .ok()
                .flatten()
                .map(|g| g.name)
                .unwrap_or_else(|| gid.to_string()),
            account: User::from_uid(Uid::current()).ok().flatten(),
        }
    })
}

/// Resolves user, group, environment and working directory. Blocking: it reads the user and
/// group databases and the file system.
fn resolve_process(
    request: &RunRequest,
    attempt: u32,
    program: &str,
) -> Result<ProcessSetup, String> {
    let Myself {
        identity: me,
        group: my_group,
        account: my_account,
    } = myself();
    let action = decide_user(
        me,
        my_group,
        request.user.as_deref(),
        request.group.as_deref(),
    );

    let (account, credentials) = match action {
        UserAction::Refuse(reason) => return Err(reason),
        UserAction::RunAsSelf => (my_account.clone(), None),
        UserAction::Switch { user, group } => {
            let account = match User::from_name(&user) {
                Ok(Some(account)) => account,
                Ok(None) => {
                    return Err(format!(
                        "unknown user \"{user}\"; create it, or change `user` in the task file \
                         (or [scheduler] default_user)"
                    ));
                }
                Err(e) => return Err(format!("cannot look up user \"{user}\": {e}")),
            };
            let gid = match group {
                None => account.gid,
                Some(group) => match Group::from_name(&group) {
                    Ok(Some(found)) => found.gid,
                    Ok(None) => {
                        return Err(format!(
                            "unknown group \"{group}\"; create it, or change `group` in the task file"
                        ));
                    }
                    Err(e) => return Err(format!("cannot look up group \"{group}\": {e}")),
                },
            };
            let name = CString::new(account.name.as_bytes())
                .map_err(|_| format!("invalid user name \"{user}\""))?;
            let groups = nix::unistd::getgrouplist(&name, gid).map_err(|e| {
                format!("cannot list the supplementary groups of user \"{user}\": {e}")
            })?;
            let credentials = Credentials {
                uid: account.uid,
                gid,
                groups,
            };
            (Some(account), Some(credentials))
        }
    };

    let (home, user_name) = match &account {
        Some(account) => (account.dir.clone(), account.name.clone()),
        // Without a passwd entry we still give the child something sensible.
        None => (
            std::env::var_os("HOME").map_or_else(|| PathBuf::from("/"), PathBuf::from),
            me.user_name.clone(),
        ),
    };

    let mut env: Vec<(String, OsString)> = vec![
        ("PATH".into(), DEFAULT_PATH.into()),
        ("HOME".into(), home.clone().into_os_string()),
        ("USER".into(), user_name.clone().into()),
        ("LOGNAME".into(), user_name.into()),
        ("SHELL".into(), "/bin/sh".into()),
    ];
    if let Some(lang) = std::env::var_os("LANG") {
        env.push(("LANG".into(), lang));
    }
    let scheduled_at = request
        .scheduled_at
        .to_rfc3339_opts(SecondsFormat::Secs, true);
    env.extend([
        ("ZKCRON_TASK".into(), request.task.clone().into()),
        ("ZKCRON_SCHEDULED_AT".into(), scheduled_at.into()),
        ("ZKCRON_FIRE_ID".into(), request.fire_id.clone().into()),
        ("ZKCRON_NODE".into(), request.node_id.clone().into()),
        ("ZKCRON_ATTEMPT".into(), attempt.to_string().into()),
    ]);
    env.extend(
        request
            .env
            .iter()
            .map(|(k, v)| (k.clone(), OsString::from(v))),
    );

    let working_dir = match &request.working_dir {
        Some(dir) if dir.is_dir() => dir.clone(),
        Some(dir) => {
            return Err(format!(
                "working directory {} does not exist or is not a directory; create it, or \
                 change `working_dir` in the task file",
                dir.display()
            ));
        }
        None if home.is_dir() => home,
        None => PathBuf::from("/"),
    };

    let path = env
        .iter()
        .rev()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.clone())
        .unwrap_or_default();
    let program = resolve_program(program, &path, &working_dir)?;

    Ok(ProcessSetup {
        env,
        working_dir,
        credentials,
        program,
    })
}

/// Finds `program` in `path` as `execvp` does, and checks that it is an executable file, so that
/// a missing program is found before the tick is claimed. A name with a `/` is used as it is,
/// relative to `working_dir` when it is relative (where the child starts).
fn resolve_program(
    program: &str,
    path: &std::ffi::OsStr,
    working_dir: &std::path::Path,
) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |candidate: &std::path::Path| {
        candidate
            .metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let candidate = working_dir.join(program);
        if executable(&candidate) {
            // As written: the child resolves a relative path after changing to `working_dir`.
            return Ok(PathBuf::from(program));
        }
        let what = if candidate.exists() {
            "not an executable file"
        } else {
            "no such file"
        };
        return Err(format!(
            "cannot execute \"{program}\": {what}; install it, or fix the path in `command`"
        ));
    }
    std::env::split_paths(path)
        .map(|dir| dir.join(program))
        .find(|candidate| executable(candidate))
        .ok_or_else(|| {
            format!(
                "cannot execute \"{program}\": not found in PATH ({}); install it, or give its \
                 full path in `command`",
                path.to_string_lossy()
            )
        })
}

/// The program and arguments of a command line.
fn program_and_args(command: &CommandLine) -> Result<(&str, Vec<&str>), String> {
    match command {
        CommandLine::Argv(argv) => match argv.split_first() {
            Some((program, args)) => Ok((program, args.iter().map(String::as_str).collect())),
            None => Err("the command is empty".to_owned()),
        },
        CommandLine::Shell(script) => Ok(("/bin/sh", vec!["-c", script])),
    }
}

/// Builds the command: own process group, clean environment, stdin from `/dev/null`, output
/// piped, credentials switched in the child.
fn build_command(program: &str, args: &[&str], prepared: ProcessSetup) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(&prepared.program);
    command
        // argv[0] stays as written, as `execvp` leaves it.
        .arg0(program)
        .args(args)
        .env_clear()
        .envs(prepared.env)
        .current_dir(&prepared.working_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        // If the run is dropped mid-way the group guard kills the group; this reaps the child.
        .kill_on_drop(true);
    if let Some(credentials) = prepared.credentials {
        // SAFETY: the closure runs in the forked child before exec. It only makes the
        // async-signal-safe system calls setgroups, setgid and setuid on data allocated in the
        // parent, and builds an `io::Error` from an errno, which does not allocate.
        unsafe {
            command.pre_exec(move || {
                nix::unistd::setgroups(&credentials.groups)?;
                nix::unistd::setgid(credentials.gid)?;
                nix::unistd::setuid(credentials.uid)?;
                Ok(())
            });
        }
    }
    command
}

/// Kills the process group of a spawned child if the run future is dropped before the child was
/// reaped, so that cancelling a run never leaks processes.
#[derive(Debug)]
struct GroupGuard {
    /// The group id, the main child's pid; `None` once the child was reaped.
    pgid: Option<Pid>,
}

impl GroupGuard {
    fn signal(&self, signal: Signal) {
        if let Some(pgid) = self.pgid {
            signal_group(pgid, signal);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.signal(Signal::SIGKILL);
    }
}

/// Sends SIGTERM to the group and schedules its SIGKILL `grace` from now, unless one is due
/// earlier.
fn terminate_group(guard: &GroupGuard, grace: Duration, kill_at: &mut Option<Instant>) {
    guard.signal(Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    *kill_at = Some(kill_at.map_or(deadline, |earlier| earlier.min(deadline)));
}

/// Sends `signal` to a process group; a group that is already gone is not an error.
fn signal_group(pgid: Pid, signal: Signal) {
    match killpg(pgid, signal) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
        Err(e) => tracing::warn!(pgid = pgid.as_raw(), %signal, "cannot signal process group: {e}"),
    }
}

/// Everything the first attempt's spawn needs, resolved by [`prepare`] before the tick is
/// claimed, so that after a won claim [`start`] only spawns.
#[derive(Debug)]
pub struct PreparedRun {
    request: RunRequest,
    /// The first attempt's process, ready to spawn, or why it cannot be started.
    first: Result<AttemptCommand, String>,
}

impl PreparedRun {
    /// Why the first attempt cannot be started (an unknown user, a missing program or working
    /// directory, ...), if so. [`start`] then records the attempt as failed without spawning.
    pub fn error(&self) -> Option<&str> {
        self.first.as_ref().err().map(String::as_str)
    }
}

/// One attempt's process, built and ready to spawn.
#[derive(Debug)]
struct AttemptCommand {
    command: tokio::process::Command,
    /// `argv[0]` as written, for messages.
    program: String,
}

/// Resolves what the first attempt of `request` needs: `argv[0]` in the child's `PATH`, the
/// environment, the user's and group's ids and supplementary groups, the working directory.
/// It reads the user and group databases and the file system on a blocking thread.
pub async fn prepare(request: RunRequest) -> PreparedRun {
    let task = request.clone();
    match tokio::task::spawn_blocking(move || prepare_attempt(&task, 1)).await {
        Ok(first) => PreparedRun { request, first },
        Err(e) => PreparedRun {
            request,
            first: Err(format!("preparing the process failed: {e}")),
        },
    }
}

/// Resolves and builds attempt `attempt` of `request`. Blocking.
fn prepare_attempt(request: &RunRequest, attempt: u32) -> Result<AttemptCommand, String> {
    let (program, args) = program_and_args(&request.command)?;
    let process = resolve_process(request, attempt, program)?;
    Ok(AttemptCommand {
        command: build_command(program, &args, process),
        program: program.to_owned(),
    })
}

/// A run whose first attempt [`start`] has spawned (or recorded as failed to start).
#[derive(Debug)]
pub struct StartedRun {
    request: RunRequest,
    first: Attempt,
}

/// An attempt just after its spawn.
#[derive(Debug)]
enum Attempt {
    Running(RunningAttempt),
    /// Nothing was started; the outcome is logged already.
    Failed(AttemptOutcome),
}

/// A spawned attempt's process and what watches it.
#[derive(Debug)]
struct RunningAttempt {
    attempt: u32,
    child: tokio::process::Child,
    pid: Option<u32>,
    guard: GroupGuard,
    started: Instant,
    lateness: Option<TimeDelta>,
    readers: [Option<JoinHandle<()>>; 2],
}

/// Spawns the first attempt of a prepared run at once. In the daemon this is the only step
/// between a won claim and the process; `claimed_at`, when the claim was won, is logged with
/// the spawn as `claim_to_spawn_us`. Must be called within the tokio runtime.
pub fn start(prepared: PreparedRun, claimed_at: Option<Instant>) -> StartedRun {
    let first = spawn_attempt(&prepared.request, 1, prepared.first, claimed_at);
    StartedRun {
        request: prepared.request,
        first,
    }
}

/// Runs `request`: prepares it, starts the first attempt at once, retries after failures, until
/// success, the retry budget is spent or `stop` asks to stop.
pub async fn run(request: RunRequest, stop: StopSignal) -> RunOutcome {
    if stop.current() >= StopKind::Terminate {
        return RunOutcome {
            attempts: vec![AttemptOutcome {
                attempt: 1,
                exit: Exit::Stopped,
                duration: Duration::ZERO,
                pid: None,
                lateness: None,
            }],
        };
    }
    let prepared = prepare(request).await;
    start(prepared, None).finish(stop, |_| {}).await
}

impl StartedRun {
    /// What is being run.
    pub fn request(&self) -> &RunRequest {
        &self.request
    }

    /// Waits for the run's attempts and retries them after failures until success, the retry
    /// budget is spent or `stop` asks to stop (a retry is never started once `stop` has asked for
    /// anything). `ended` is called once, as soon as the run is over: when the process of an
    /// attempt that will not be retried has exited, or when a stop cuts a backoff short; its
    /// output may still be draining, and "finished" is logged after it. Returns the same outcome.
    pub async fn finish(self, mut stop: StopSignal, ended: impl FnOnce(&RunOutcome)) -> RunOutcome {
        let StartedRun { request, first } = self;
        let task = request.task.as_str();
        let fire_id = request.fire_id.as_str();
        let total = request.retries.attempts.saturating_add(1);
        let mut ended = Some(ended);
        let mut end = |attempts: &[AttemptOutcome]| {
            if let Some(ended) = ended.take() {
                ended(&RunOutcome {
                    attempts: attempts.to_vec(),
                });
            }
        };
        let mut attempts: Vec<AttemptOutcome> = Vec::new();
        let mut next = first;
        loop {
            let readers = match next {
                Attempt::Failed(outcome) => {
                    attempts.push(outcome);
                    None
                }
                Attempt::Running(running) => {
                    let (outcome, readers) = running.wait(&request, &mut stop).await;
                    attempts.push(outcome);
                    Some(readers)
                }
            };
            let last = attempts.last().expect("pushed above");
            let attempt = last.attempt;
            let failed = !matches!(last.exit, Exit::Code(0) | Exit::Stopped);
            let retry = failed && attempt < total && stop.current() == StopKind::Running;
            if !retry {
                end(&attempts);
            }
            if let Some(readers) = readers {
                drain_output(readers, task, fire_id).await;
                log_finished(&request, attempts.last().expect("pushed above"));
            }
            if !retry {
                if failed && attempt < total {
                    retry_not_started(&request, attempt + 1, stop.current());
                }
                break;
            }
            let attempt = attempt + 1;
            let delay = retry_delay(&request.retries, attempt - 1);
            tracing::info!(
                task = %task,
                fire_id = %fire_id,
                attempt,
                delay_ms = delay.as_millis() as u64,
                "retrying after a failed attempt"
            );
            let command = tokio::select! {
                // A stop that came while the retry was being prepared wins: select! otherwise
                // picks at random among ready branches, and the attempt would start after it.
                biased;
                kind = stop.stronger_than(StopKind::Running) => {
                    retry_not_started(&request, attempt, kind);
                    end(&attempts);
                    break;
                }
                // A retry is prepared afresh: the user or the program may have appeared since.
                command = async {
                    tokio::time::sleep(delay).await;
                    let request = request.clone();
                    tokio::task::spawn_blocking(move || prepare_attempt(&request, attempt)).await
                } => command,
            };
            let command =
                command.unwrap_or_else(|e| Err(format!("preparing the process failed: {e}")));
            next = spawn_attempt(&request, attempt, command, None);
        }
        RunOutcome { attempts }
    }
}

/// Says that retry `attempt` is not started because of the stop request `kind`.
fn retry_not_started(request: &RunRequest, attempt: u32, kind: StopKind) {
    let why = match kind {
        StopKind::Running => return,
        StopKind::NoMoreAttempts => {
            "retry not started: no new attempt starts once zkcron is stopping or the task was removed"
        }
        StopKind::Terminate | StopKind::KillNow => "retry not started: the run was stopped",
    };
    tracing::info!(task = %request.task, fire_id = %request.fire_id, attempt, "{why}");
}

/// Logs that attempt `attempt` could not be started and returns its outcome.
fn spawn_failed(request: &RunRequest, attempt: u32, reason: String) -> AttemptOutcome {
    let outcome = AttemptOutcome {
        attempt,
        exit: Exit::SpawnFailed(reason),
        duration: Duration::ZERO,
        pid: None,
        lateness: None,
    };
    log_finished(request, &outcome);
    outcome
}

impl Exit {
    /// How the attempt ended, as one word for logs: `exited`, `killed` (by a signal not ours),
    /// `timed_out`, `not_started` or `stopped`.
    pub fn status(&self) -> &'static str {
        match self {
            Exit::Code(_) => "exited",
            Exit::Signal(_) => "killed",
            Exit::TimedOut => "timed_out",
            Exit::SpawnFailed(_) => "not_started",
            Exit::Stopped => "stopped",
        }
    }

    /// The exit code, when the main process exited by itself.
    pub fn code(&self) -> Option<i32> {
        match self {
            Exit::Code(code) => Some(*code),
            _ => None,
        }
    }

    /// The name of the signal that killed the main process (`SIGSEGV`), or its number when it
    /// has no name here.
    pub fn signal_name(&self) -> Option<String> {
        match self {
            Exit::Signal(signal) => Some(match Signal::try_from(*signal) {
                Ok(name) => name.as_str().to_string(),
                Err(_) => signal.to_string(),
            }),
            _ => None,
        }
    }

    /// Why no process was started.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Exit::SpawnFailed(reason) => Some(reason),
            _ => None,
        }
    }
}

/// Logs how an attempt ended, at info when it succeeded, else at warn, with structured fields:
/// `status` (see [`Exit::status`]), `exit_code` or `signal` where they apply, `reason` when it
/// did not start, and `duration_ms` as a whole number.
fn log_finished(request: &RunRequest, outcome: &AttemptOutcome) {
    let task = request.task.as_str();
    let fire_id = request.fire_id.as_str();
    let attempt = outcome.attempt;
    let exit = &outcome.exit;
    // Words from a fixed set, unquoted in the text log like `task`; `reason` is free text.
    let status = tracing::field::display(exit.status());
    let exit_code = exit.code();
    let signal = exit.signal_name().map(tracing::field::display);
    let reason = exit.reason();
    let duration_ms = outcome.duration.as_millis() as u64;
    if exit.is_success() {
        tracing::info!(task = %task, fire_id = %fire_id, attempt, status, exit_code, duration_ms, "finished");
    } else {
        tracing::warn!(
            task = %task,
            fire_id = %fire_id,
            attempt,
            status,
            exit_code,
            signal,
            reason,
            duration_ms,
            "finished"
        );
    }
}

/// Spawns attempt `attempt` from its prepared command (or records why there is none), logs
/// "started" and starts logging its output.
fn spawn_attempt(
    request: &RunRequest,
    attempt: u32,
    command: Result<AttemptCommand, String>,
    claimed_at: Option<Instant>,
) -> Attempt {
    let AttemptCommand {
        mut command,
        program,
    } = match command {
        Ok(command) => command,
        Err(reason) => return Attempt::Failed(spawn_failed(request, attempt, reason)),
    };
    let spawned = command.spawn();
    let started = Instant::now();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let reason = format!("cannot execute \"{program}\": {e}");
            return Attempt::Failed(spawn_failed(request, attempt, reason));
        }
    };
    let task = request.task.as_str();
    let fire_id = request.fire_id.as_str();
    let lateness = (attempt == 1).then(|| crate::clock::wall_clock() - request.due_at);
    let pid = child.id();
    let guard = GroupGuard {
        pgid: pid.and_then(|p| i32::try_from(p).ok()).map(Pid::from_raw),
    };
    let claim_to_spawn_us =
        claimed_at.map(|claimed| started.saturating_duration_since(claimed).as_micros() as u64);
    match (lateness, claim_to_spawn_us) {
        (Some(lateness), Some(claim_to_spawn_us)) => tracing::info!(
            task = %task,
            fire_id = %fire_id,
            attempt,
            pid,
            lateness_us = lateness.num_microseconds().unwrap_or(i64::MAX),
            claim_to_spawn_us,
            "started"
        ),
        (Some(lateness), None) => tracing::info!(
            task = %task,
            fire_id = %fire_id,
            attempt,
            pid,
            lateness_us = lateness.num_microseconds().unwrap_or(i64::MAX),
            "started"
        ),
        (None, _) => tracing::info!(task = %task, fire_id = %fire_id, attempt, pid, "started"),
    }

    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let budget = OutputBudget::new(request, attempt, [stdout.is_some(), stderr.is_some()]);
    let readers = [
        stdout.map(|out| spawn_reader(BufReader::new(out), request, "stdout", budget.clone())),
        stderr.map(|err| spawn_reader(BufReader::new(err), request, "stderr", budget.clone())),
    ];
    Attempt::Running(RunningAttempt {
        attempt,
        child,
        pid,
        guard,
        started,
        lateness,
        readers,
    })
}

impl RunningAttempt {
    /// Waits for the main process to exit, enforcing the timeout and stop requests; returns how
    /// it ended and its output readers, which may still be draining.
    async fn wait(
        self,
        request: &RunRequest,
        stop: &mut StopSignal,
    ) -> (AttemptOutcome, [Option<JoinHandle<()>>; 2]) {
        let RunningAttempt {
            attempt,
            mut child,
            pid,
            mut guard,
            started,
            lateness,
            readers,
        } = self;
        let task = request.task.as_str();
        let fire_id = request.fire_id.as_str();
        let timeout = request.timeout.map(|t| started + t);
        let mut timed_out = false;
        let mut stop_seen = StopKind::Running;
        // When the group gets SIGKILL if its main process still runs; set by SIGTERM.
        let mut kill_at: Option<Instant> = None;
        let status = loop {
            tokio::select! {
                status = child.wait() => break status,
                _ = sleep_until_opt(timeout), if !timed_out => {
                    timed_out = true;
                    terminate_group(&guard, request.kill_grace, &mut kill_at);
                }
                kind = stop.stronger_than(stop_seen), if stop_seen != StopKind::KillNow => {
                    stop_seen = kind;
                    match kind {
                        StopKind::KillNow => guard.signal(Signal::SIGKILL),
                        StopKind::Terminate => {
                            terminate_group(&guard, request.kill_grace, &mut kill_at)
                        }
                        // The attempt runs on; only retries are off.
                        StopKind::NoMoreAttempts | StopKind::Running => {}
                    }
                }
                _ = sleep_until_opt(kill_at) => {
                    guard.signal(Signal::SIGKILL);
                    kill_at = None;
                }
            }
        };
        let duration = started.elapsed();
        let stopped = stop_seen >= StopKind::Terminate;
        if stopped || timed_out {
            // The main process is gone; make sure nothing it started survives it. The group id
            // cannot have been reused: the kernel does not hand out a pid while a process group
            // with that id still has members, and without members this signal reaches nobody
            // (barring a new group created with the recycled id within microseconds).
            guard.signal(Signal::SIGKILL);
        }
        guard.pgid = None;

        let exit = match status {
            _ if stopped => Exit::Stopped,
            _ if timed_out => Exit::TimedOut,
            Ok(status) => match (status.code(), status.signal()) {
                (Some(code), _) => Exit::Code(code),
                (None, Some(signal)) => Exit::Signal(signal),
                (None, None) => Exit::SpawnFailed(format!("unexpected wait status {status}")),
            },
            Err(e) => {
                tracing::error!(
                    task = %task,
                    fire_id = %fire_id,
                    attempt,
                    pid,
                    "cannot wait for the process: {e}"
                );
                Exit::SpawnFailed(format!("cannot wait for the process: {e}"))
            }
        };
        let outcome = AttemptOutcome {
            attempt,
            exit,
            duration,
            pid,
            lateness,
        };
        (outcome, readers)
    }
}

/// Sleeps until `deadline`, or for ever without one.
async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Waits up to [`OUTPUT_DRAIN_LIMIT`] for the readers to reach end of file, then leaves them
/// running on their own.
async fn drain_output(readers: [Option<JoinHandle<()>>; 2], task: &str, fire_id: &str) {
    let all = async {
        for reader in readers.into_iter().flatten() {
            if let Err(e) = reader.await {
                tracing::warn!(task = %task, fire_id = %fire_id, "an output reader failed: {e}");
            }
        }
    };
    if tokio::time::timeout(OUTPUT_DRAIN_LIMIT, all).await.is_err() {
        tracing::debug!(
            task = %task,
            fire_id = %fire_id,
            "output still open after the process exited (a background process holds it); \
             it keeps being logged until it closes"
        );
    }
}

/// How many lines of one attempt's output are logged: stdout and stderr draw from one budget of
/// [`RunRequest::output_lines`]. The first half of it (rounded down) is logged as the lines
/// arrive; of the lines after those, the latest are kept, so that when the output ends the last
/// of them (where a failing job says why) are logged too, in the order they were read. What is
/// not kept is counted, and the reader that closes last says how much, between the head and the
/// tail. The pipes are read to their end whatever the budget, so the child never blocks on a
/// full pipe.
///
/// The tail is kept per stream and shared out when the output ends: each stream gets up to half
/// of it, and what one leaves unused goes to the other. The order between two pipes is only the
/// order in which their readers got to the lines, and a reader still working through a flood of
/// stdout would otherwise push out the stderr line that was written after it. Each stream holds
/// at most the tail's size in lines of at most [`MAX_LINE_BYTES`].
#[derive(Debug)]
struct OutputBudget {
    task: String,
    fire_id: String,
    attempt: u32,
    limit: usize,
    /// Lines logged as they arrive.
    head: usize,
    /// Lines logged when the output ends.
    tail: usize,
    state: std::sync::Mutex<BudgetState>,
}

#[derive(Debug)]
struct BudgetState {
    logged: usize,
    /// Lines read so far, past the head: the order of the tail.
    read: u64,
    /// The latest lines of stdout and of stderr past the head, each at most `tail` long.
    tails: [std::collections::VecDeque<TailLine>; 2],
    left_out_lines: u64,
    left_out_bytes: u64,
    /// Streams not yet at end of file.
    open: usize,
}

/// A line past the head of the output, kept until the output ends.
#[derive(Debug)]
struct TailLine {
    /// Its place in the order of reading.
    read: u64,
    stream: &'static str,
    text: String,
    /// What the line took in the stream, line ending included.
    bytes: usize,
}

impl OutputBudget {
    /// A budget for attempt `attempt` of `request`, whose streams are open as `open` says.
    fn new(request: &RunRequest, attempt: u32, open: [bool; 2]) -> std::sync::Arc<OutputBudget> {
        let limit = request.output_lines;
        let head = limit / 2;
        std::sync::Arc::new(OutputBudget {
            task: request.task.clone(),
            fire_id: request.fire_id.clone(),
            attempt,
            limit,
            head,
            tail: limit - head,
            state: std::sync::Mutex::new(BudgetState {
                logged: 0,
                read: 0,
                tails: Default::default(),
                left_out_lines: 0,
                left_out_bytes: 0,
                open: open.iter().filter(|o| **o).count(),
            }),
        })
    }

    /// Takes a line of `stream` that took `bytes` of it: logs it if the head has room, else
    /// keeps it for the tail, counting the line of that stream it pushes out (if any) as left
    /// out.
    fn line(&self, stream: &'static str, text: &str, bytes: usize) {
        {
            let mut state = self.state.lock().expect("output budget poisoned");
            if state.logged >= self.head {
                let read = state.read;
                state.read += 1;
                let tail = &mut state.tails[usize::from(stream == "stderr")];
                tail.push_back(TailLine {
                    read,
                    stream,
                    text: text.to_owned(),
                    bytes,
                });
                let out = (tail.len() > self.tail).then(|| tail.pop_front()).flatten();
                if let Some(out) = out {
                    state.left_out_lines += 1;
                    state.left_out_bytes += out.bytes as u64;
                }
                return;
            }
            state.logged += 1;
        }
        self.log(stream, text);
    }

    /// Logs one line of the job's output.
    fn log(&self, stream: &'static str, text: &str) {
        tracing::info!(target: "zkcron::job", task = %self.task, fire_id = %self.fire_id, stream, "{text}");
    }

    /// One stream reached its end (or failed); after the last, says what was left out and logs
    /// the tail.
    fn close(&self) {
        let (tails, mut lines, mut bytes) = {
            let mut state = self.state.lock().expect("output budget poisoned");
            state.open = state.open.saturating_sub(1);
            if state.open > 0 {
                return;
            }
            (
                std::mem::take(&mut state.tails),
                state.left_out_lines,
                state.left_out_bytes,
            )
        };
        let [stdout, stderr] = tails;
        // Each stream gets up to half the tail (stderr the larger half), and the rest if the
        // other needs less.
        let keep_stdout = stdout
            .len()
            .min((self.tail / 2).max(self.tail.saturating_sub(stderr.len())));
        let keep_stderr = stderr.len().min(self.tail - keep_stdout);
        let mut tail = Vec::with_capacity(keep_stdout + keep_stderr);
        for (lines_of_stream, keep) in [(stdout, keep_stdout), (stderr, keep_stderr)] {
            let skip = lines_of_stream.len() - keep;
            for (i, line) in lines_of_stream.into_iter().enumerate() {
                if i < skip {
                    lines += 1;
                    bytes += line.bytes as u64;
                } else {
                    tail.push(line);
                }
            }
        }
        tail.sort_unstable_by_key(|line| line.read);
        if lines > 0 {
            tracing::info!(
                task = %self.task,
                fire_id = %self.fire_id,
                attempt = self.attempt,
                job_output_lines = self.limit,
                lines_left_out = lines,
                bytes_left_out = bytes,
                tail_lines = tail.len(),
                "output not logged past [log] job_output_lines; the last tail_lines lines follow"
            );
        }
        for line in tail {
            self.log(line.stream, &line.text);
        }
    }
}

/// Logs one output stream line by line, within `budget`, on its own task, which carries the
/// caller's tracing subscriber.
fn spawn_reader<R>(
    reader: R,
    request: &RunRequest,
    stream: &'static str,
    budget: std::sync::Arc<OutputBudget>,
) -> JoinHandle<()>
where
    R: AsyncBufRead + Unpin + Send + 'static,
{
    let task = request.task.clone();
    let fire_id = request.fire_id.clone();
    tokio::spawn(
        async move {
            let log = |line: &str, bytes: usize| budget.line(stream, line, bytes);
            if let Err(e) = for_each_line(reader, MAX_LINE_BYTES, log).await {
                tracing::warn!(task = %task, fire_id = %fire_id, stream, "cannot read output: {e}");
            }
            budget.close();
        }
        .with_current_subscriber(),
    )
}

/// Calls `emit` with every line of `reader`, without its line ending, and the number of bytes
/// the line took in the stream (line ending included). A line longer than `max_bytes` is cut to
/// that many bytes (less when the cut would split a UTF-8 character) and gets a " …[cut N
/// bytes]" marker; at most `max_bytes` of a line are ever held. Invalid UTF-8 is replaced.
async fn for_each_line<R, F>(mut reader: R, max_bytes: usize, mut emit: F) -> io::Result<()>
where
    R: AsyncBufRead + Unpin,
    F: FnMut(&str, usize),
{
    let mut line: Vec<u8> = Vec::with_capacity(max_bytes.min(1024));
    let mut cut: usize = 0;
    let mut raw: usize = 0;
    let mut pending = false;
    loop {
        let buffer = reader.fill_buf().await?;
        if buffer.is_empty() {
            if pending {
                emit_line(&mut line, &mut cut, &mut raw, &mut emit);
            }
            return Ok(());
        }
        let (chunk, consumed, complete) = match buffer.iter().position(|b| *b == b'\n') {
            Some(end) => (&buffer[..end], end + 1, true),
            None => (buffer, buffer.len(), false),
        };
        let room = max_bytes.saturating_sub(line.len());
        let kept = chunk.len().min(room);
        line.extend_from_slice(&chunk[..kept]);
        cut += chunk.len() - kept;
        raw += consumed;
        reader.consume(consumed);
        pending = true;
        if complete {
            emit_line(&mut line, &mut cut, &mut raw, &mut emit);
            pending = false;
        }
    }
}

fn emit_line(
    line: &mut Vec<u8>,
    cut: &mut usize,
    raw: &mut usize,
    emit: &mut impl FnMut(&str, usize),
) {
    if *cut == 0 {
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        emit(&String::from_utf8_lossy(line), *raw);
    } else {
        // Do not show half a character at the cut.
        if let Err(e) = std::str::from_utf8(line)
            && e.error_len().is_none()
        {
            *cut += line.len() - e.valid_up_to();
            line.truncate(e.valid_up_to());
        }
        emit(
            &format!("{} …[cut {cut} bytes]", String::from_utf8_lossy(line)),
            *raw,
        );
    }
    line.clear();
    *cut = 0;
    *raw = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(uid: u32, name: &str) -> Identity {
        Identity {
            uid,
            user_name: name.to_owned(),
        }
    }

    #[test]
    fn given_root_when_no_user_is_asked_then_it_runs_as_itself() {
        let root = identity(0, "root");
        assert_eq!(
            decide_user(&root, "root", None, None),
            UserAction::RunAsSelf
        );
    }

    #[test]
    fn given_root_when_a_user_is_asked_then_it_switches_to_that_user() {
        let root = identity(0, "root");
        assert_eq!(
            decide_user(&root, "root", Some("backup"), None),
            UserAction::Switch {
                user: "backup".into(),
                group: None
            }
        );
        assert_eq!(
            decide_user(&root, "root", Some("backup"), Some("disk")),
            UserAction::Switch {
                user: "backup".into(),
                group: Some("disk".into())
            }
        );
    }

    #[test]
    fn given_root_when_only_a_group_is_asked_then_it_keeps_its_user_and_switches_group() {
        let root = identity(0, "root");
        assert_eq!(
            decide_user(&root, "root", None, Some("adm")),
            UserAction::Switch {
                user: "root".into(),
                group: Some("adm".into())
            }
        );
    }

    #[test]
    fn given_non_root_when_it_names_itself_then_it_runs_as_itself() {
        let alice = identity(1000, "alice");
        assert_eq!(
            decide_user(&alice, "alice", Some("alice"), None),
            UserAction::RunAsSelf
        );
        assert_eq!(
            decide_user(&alice, "alice", Some("alice"), Some("alice")),
            UserAction::RunAsSelf
        );
        assert_eq!(
            decide_user(&alice, "alice", None, None),
            UserAction::RunAsSelf
        );
    }

    #[test]
    fn given_non_root_when_another_user_is_asked_then_it_refuses_and_says_why() {
        let alice = identity(1000, "alice");
        assert_eq!(
            decide_user(&alice, "alice", Some("bob"), None),
            UserAction::Refuse("cannot run as user \"bob\": zkcron is not running as root".into())
        );
    }

    #[test]
    fn given_non_root_when_another_group_is_asked_then_it_refuses_and_says_why() {
        let alice = identity(1000, "alice");
        assert_eq!(
            decide_user(&alice, "alice", None, Some("wheel")),
            UserAction::Refuse(
                "cannot run as group \"wheel\": zkcron is not running as root".into()
            )
        );
    }

    #[test]
    fn retry_delay_doubles_from_backoff_and_stops_at_max_backoff() {
        let policy = RetryPolicy {
            attempts: 100,
            backoff: Duration::from_secs(10),
            max_backoff: Duration::from_secs(60),
        };
        let delays: Vec<u64> = (1..=5).map(|k| retry_delay(&policy, k).as_secs()).collect();
        assert_eq!(delays, [10, 20, 40, 60, 60]);
        assert_eq!(retry_delay(&policy, 100), Duration::from_secs(60));
    }

    #[test]
    fn exit_display_says_what_happened() {
        assert_eq!(Exit::Code(3).to_string(), "exit code 3");
        assert_eq!(Exit::Signal(9).to_string(), "killed by signal 9 (SIGKILL)");
        assert_eq!(Exit::Signal(200).to_string(), "killed by signal 200");
        assert_eq!(Exit::TimedOut.to_string(), "timed out");
        assert_eq!(
            Exit::SpawnFailed("no such file".into()).to_string(),
            "failed to start: no such file"
        );
        assert_eq!(Exit::Stopped.to_string(), "stopped");
    }

    async fn lines_of(input: &[u8], max: usize) -> Vec<String> {
        let mut lines = Vec::new();
        // A tiny buffer makes lines span many reads.
        let reader = BufReader::with_capacity(3, input);
        for_each_line(reader, max, |l, _| lines.push(l.to_owned()))
            .await
            .unwrap();
        lines
    }

    #[tokio::test]
    async fn lines_split_on_newline_and_keep_a_last_line_without_newline() {
        assert_eq!(
            lines_of(b"one\r\ntwo\n\nthree", 100).await,
            ["one", "two", "", "three"]
        );
        assert!(lines_of(b"", 100).await.is_empty());
    }

    #[tokio::test]
    async fn long_lines_are_cut_with_a_marker_counting_the_dropped_bytes() {
        assert_eq!(
            lines_of(b"abcdefgh\nxy\n", 4).await,
            ["abcd …[cut 4 bytes]", "xy"]
        );
    }

    #[tokio::test]
    async fn each_line_reports_the_bytes_it_took_in_the_stream_line_ending_included() {
        let mut sizes = Vec::new();
        let reader = BufReader::with_capacity(3, &b"one\r\nabcdefgh\n\nlast"[..]);
        for_each_line(reader, 4, |_, bytes| sizes.push(bytes))
            .await
            .unwrap();
        assert_eq!(sizes, [5, 9, 1, 4]);
    }

    #[tokio::test]
    async fn a_cut_never_splits_a_utf8_character_and_invalid_bytes_are_replaced() {
        // "é" is two bytes; a cut after 3 bytes would split the second "é".
        assert_eq!(lines_of("aéé\n".as_bytes(), 3).await, ["aé …[cut 2 bytes]"]);
        assert_eq!(lines_of(b"a\xffb\n", 10).await, ["a\u{fffd}b"]);
    }
}
