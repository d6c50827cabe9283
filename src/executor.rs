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
//!
//! Files: `process` (one attempt's process: user, environment, `argv[0]`, the group's guard),
//! `spawner` (the threads that spawn claimed runs at their instants), `output` (an attempt's
//! output, line by line, within its budget), `kept` (a run's output kept on disk for `zkcron
//! logs`), `report` (the log lines of an attempt's start and end), `stop` (stop requests), `hook`
//! (`on_failure`).

use std::collections::BTreeMap;
use std::fmt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::task::{CommandLine, RetryPolicy};

/// The `PATH` a child starts with, as cron gives it.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Longer output lines are cut to this many bytes so that a child cannot make us buffer without
/// bound.
pub const MAX_LINE_BYTES: usize = 4096;

/// At most this much of the end of a failed run's output is given to its `on_failure` hook as
/// `ZKCRON_OUTPUT_TAIL`.
pub const OUTPUT_TAIL_BYTES: usize = 4096;

/// How long an `on_failure` hook may run when its task has no `timeout`.
pub const HOOK_TIMEOUT: Duration = Duration::from_secs(600);

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
    /// The task's `on_failure` hook, run once after the run's last attempt failed (see
    /// `hook`); `None` for none.
    pub on_failure: Option<Vec<String>>,
    /// Where the run's output is kept on disk ([`kept`]); `None`: only logged.
    pub output: Option<OutputStore>,
    /// The task's `pause_on_failure`: not the executor's business, but carried with the run so
    /// that the daemon, which records the run's end, pauses the task when its last attempt
    /// failed.
    pub pause_on_failure: bool,
    /// The shell's clock: a first attempt's lateness is measured on it.
    pub clock: crate::clock::Clock,
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
    /// The last attempt's last lines of output, at most [`OUTPUT_TAIL_BYTES`]: stored with the
    /// run's result, so that its end says why it failed when its node is gone.
    pub output_tail: String,
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

    /// Whether the run failed: its last attempt did not exit with code 0 and was not stopped
    /// by zkcron (`overlap = "replace"`, shutdown, a removed task). What `on_failure` and
    /// `pause_on_failure` act on.
    pub fn failed(&self) -> bool {
        self.last()
            .is_some_and(|a| !matches!(a.exit, Exit::Code(0) | Exit::Stopped))
    }
}

mod hook;
pub mod kept;
mod output;
mod process;
mod report;
mod spawner;
mod stop;
#[cfg(test)]
mod tests;

use kept::KeptOutput;
pub use kept::OutputStore;
pub use output::printable_tail;
use output::{OutputBudget, drain_output, output_tail, spawn_output_reader};
use process::{GroupGuard, build_command, program_and_args, resolve_process, terminate_group};
pub use process::{UserAction, decide_user};
use report::{log_finished, log_started};
pub use spawner::{Scheduled, Spawned, Spawner};
use stop::StopKind;
pub use stop::{StopHandle, StopSignal};

/// The delay before retry `retry` (1-based): `backoff * 2^(retry-1)`, at most `max_backoff`.
pub fn retry_delay(policy: &RetryPolicy, retry: u32) -> Duration {
    let factor = 2u32.saturating_pow(retry.saturating_sub(1));
    policy
        .backoff
        .saturating_mul(factor)
        .min(policy.max_backoff)
}

/// Everything the first attempt's spawn needs, resolved by [`prepare`] before the tick is
/// claimed, so that after a won claim [`start`] only spawns.
#[derive(Debug)]
pub struct PreparedRun {
    /// Shared with the blocking threads that prepare attempts, so no attempt copies it.
    request: Arc<RunRequest>,
    /// The first attempt's process, ready to spawn, or why it cannot be started.
    first: Result<AttemptCommand, String>,
}

impl PreparedRun {
    /// Why the first attempt cannot be started (an unknown user, a missing program or working
    /// directory, ...), if so. [`start`] then records the attempt as failed without spawning.
    pub fn error(&self) -> Option<&str> {
        self.first.as_ref().err().map(String::as_str)
    }

    /// The run's request, with what [`PreparedRun::set_env`] set since it was prepared.
    pub fn request(&self) -> &RunRequest {
        &self.request
    }

    /// Sets the variable `name` to `value` in the environment of every attempt: what a claim
    /// decided after the preparation (a pooled task's items).
    pub fn set_env(&mut self, name: &str, value: &str) {
        Arc::make_mut(&mut self.request)
            .env
            .insert(name.to_string(), value.to_string());
        if let Ok(first) = &mut self.first {
            first.command.env(name, value);
        }
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
/// It reads the user and group databases on a blocking thread. A run that needs no lookup (it
/// runs as the daemon's own user and group, which are looked up once) is prepared in place:
/// what is left are a few `stat`s of the paths the spawn walks anyway and the environment, and
/// the hop to a blocking thread and back cost more than that on every fire.
pub async fn prepare(request: RunRequest) -> PreparedRun {
    let request = Arc::new(request);
    if !process::reads_account_databases(&request) {
        let first = prepare_attempt(&request, 1);
        return PreparedRun { request, first };
    }
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
    request: Arc<RunRequest>,
    first: Attempt,
    /// The run's output file, when it is kept.
    kept: Option<Arc<KeptOutput>>,
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
    /// Reads and logs both output pipes until their end.
    output: JoinHandle<()>,
    /// What the reader counts and keeps, shared with it: the hook's output tail comes from it.
    budget: Arc<OutputBudget>,
}

/// Spawns the first attempt of a prepared run at once. In the daemon this is the only step
/// between a won claim and the process; `claimed_at`, when the claim was won, is logged with
/// the spawn as `claim_to_spawn_us`. Must be called within the tokio runtime.
pub fn start(prepared: PreparedRun, claimed_at: Option<Instant>) -> StartedRun {
    let request = &prepared.request;
    let kept = request.output.as_ref().map(|store| {
        let kept = KeptOutput::new(store, &request.fire_id, &request.node_id, request.clock);
        Arc::new(kept)
    });
    let first = spawn_attempt(request, 1, prepared.first, claimed_at, kept.as_ref());
    StartedRun {
        request: prepared.request,
        first,
        kept,
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
            output_tail: String::new(),
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
        let StartedRun {
            request,
            first,
            kept,
        } = self;
        let task = request.task.as_str();
        let fire_id = request.fire_id.as_str();
        let total = request.retries.attempts.saturating_add(1);
        let mut ended = Some(ended);
        let mut end = |attempts: &[AttemptOutcome], output_tail: String| {
            if let Some(ended) = ended.take() {
                ended(&RunOutcome {
                    attempts: attempts.to_vec(),
                    output_tail,
                });
            }
        };
        let mut attempts: Vec<AttemptOutcome> = Vec::new();
        let mut next = first;
        // The last attempt's output, for the hook.
        let mut budget: Option<Arc<OutputBudget>>;
        loop {
            let output = match next {
                Attempt::Failed(outcome) => {
                    attempts.push(outcome);
                    budget = None;
                    None
                }
                Attempt::Running(running) => {
                    let (outcome, output, attempt_budget) = running.wait(&request, &mut stop).await;
                    attempts.push(outcome);
                    budget = Some(attempt_budget);
                    Some(output)
                }
            };
            let last = attempts.last().expect("pushed above");
            let attempt = last.attempt;
            let failed = !matches!(last.exit, Exit::Code(0) | Exit::Stopped);
            let retry = failed && attempt < total && stop.current() == StopKind::Running;
            if !retry {
                end(&attempts, output_tail(budget.as_deref(), failed).await);
            }
            if let Some(output) = output {
                drain_output(output, task, fire_id).await;
                log_finished(&request, attempts.last().expect("pushed above"));
            }
            if !retry {
                if failed && attempt < total {
                    retry_not_started(&request, attempt + 1, stop.current());
                }
                break;
            }
            match start_retry(&request, attempt + 1, &mut stop, kept.as_ref()).await {
                Some(attempt) => next = attempt,
                None => {
                    end(&attempts, output_tail(budget.as_deref(), true).await);
                    break;
                }
            }
        }
        if let (Some(kept), Some(last)) = (&kept, attempts.last()) {
            kept.finish(
                &last.exit.to_string(),
                request.output.as_ref().map_or(1, |o| o.keep),
            );
        }
        if let (Some(argv), Some(last)) = (&request.on_failure, attempts.last())
            && !matches!(last.exit, Exit::Code(0) | Exit::Stopped)
        {
            let tail = budget.as_ref().map(|b| b.output_tail()).unwrap_or_default();
            hook::run_on_failure(&request, argv, &last.exit, &tail, &mut stop).await;
        }
        let output_tail = budget.map(|b| b.output_tail()).unwrap_or_default();
        RunOutcome {
            attempts,
            output_tail,
        }
    }
}

/// Waits out the backoff before retry `attempt`, prepares it afresh (the user or the program
/// may have appeared since) and spawns it; `None` when a stop request comes first.
async fn start_retry(
    request: &RunRequest,
    attempt: u32,
    stop: &mut StopSignal,
    kept: Option<&Arc<KeptOutput>>,
) -> Option<Attempt> {
    let delay = retry_delay(&request.retries, attempt - 1);
    tracing::info!(
        task = %request.task,
        fire_id = %request.fire_id,
        attempt,
        delay_ms = delay.as_millis() as u64,
        "retrying after a failed attempt"
    );
    let command = tokio::select! {
        // A stop that came while the retry was being prepared wins: select! otherwise picks at
        // random among ready branches, and the attempt would start after it.
        biased;
        kind = stop.stronger_than(StopKind::Running) => {
            retry_not_started(request, attempt, kind);
            return None;
        }
        command = async {
            tokio::time::sleep(delay).await;
            let request = request.clone();
            tokio::task::spawn_blocking(move || prepare_attempt(&request, attempt)).await
        } => command,
    };
    let command = command.unwrap_or_else(|e| Err(format!("preparing the process failed: {e}")));
    Some(spawn_attempt(request, attempt, command, None, kept))
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

/// Spawns attempt `attempt` from its prepared command (or records why there is none), logs
/// "started" and starts logging its output.
fn spawn_attempt(
    request: &RunRequest,
    attempt: u32,
    command: Result<AttemptCommand, String>,
    claimed_at: Option<Instant>,
    kept: Option<&Arc<KeptOutput>>,
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
    let lateness = (attempt == 1).then(|| request.clock.now() - request.due_at);
    let pid = child.id();
    let guard = GroupGuard {
        pgid: pid.and_then(|p| i32::try_from(p).ok()).map(Pid::from_raw),
    };
    let claim_to_spawn_us =
        claimed_at.map(|claimed| started.saturating_duration_since(claimed).as_micros() as u64);
    log_started(request, attempt, pid, lateness, claim_to_spawn_us);

    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let budget = Arc::new(OutputBudget::new(
        request,
        attempt,
        [stdout.is_some(), stderr.is_some()],
        kept.cloned(),
    ));
    let output = spawn_output_reader(stdout, stderr, request, budget.clone());
    Attempt::Running(RunningAttempt {
        attempt,
        child,
        pid,
        guard,
        started,
        lateness,
        output,
        budget,
    })
}

impl RunningAttempt {
    /// Waits for the main process to exit, enforcing the timeout and stop requests; returns how
    /// it ended, its output reader, which may still be draining, and what the reader keeps.
    async fn wait(
        self,
        request: &RunRequest,
        stop: &mut StopSignal,
    ) -> (AttemptOutcome, JoinHandle<()>, Arc<OutputBudget>) {
        let RunningAttempt {
            attempt,
            mut child,
            pid,
            mut guard,
            started,
            lateness,
            output,
            budget,
        } = self;
        let (status, cut) = wait_enforcing(&mut child, &guard, request, stop, started).await;
        let duration = started.elapsed();
        if cut.is_some() {
            // The main process is gone; make sure nothing it started survives it. The group id
            // cannot have been reused: the kernel does not hand out a pid while a process group
            // with that id still has members, and without members this signal reaches nobody
            // (barring a new group created with the recycled id within microseconds).
            guard.signal(Signal::SIGKILL);
        }
        guard.pgid = None;

        let exit = match cut {
            Some(Cut::Stopped) => Exit::Stopped,
            Some(Cut::TimedOut) => Exit::TimedOut,
            None => exit_of(status, request, attempt, pid),
        };
        let outcome = AttemptOutcome {
            attempt,
            exit,
            duration,
            pid,
            lateness,
        };
        (outcome, output, budget)
    }
}

/// Why zkcron ended an attempt before its main process exited by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cut {
    /// A stop request terminated or killed it.
    Stopped,
    /// It ran past the task's `timeout`.
    TimedOut,
}

/// Waits for `child` to exit while signalling its process group (`guard`) on the task's timeout
/// (counted from `started`) and on stop requests: SIGTERM, then SIGKILL after `kill_grace`, or
/// SIGKILL at once. Returns its wait status and whether zkcron cut it short (a stop wins over
/// the timeout).
async fn wait_enforcing(
    child: &mut tokio::process::Child,
    guard: &GroupGuard,
    request: &RunRequest,
    stop: &mut StopSignal,
    started: Instant,
) -> (std::io::Result<std::process::ExitStatus>, Option<Cut>) {
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
                terminate_group(guard, request.kill_grace, &mut kill_at);
            }
            kind = stop.stronger_than(stop_seen), if stop_seen != StopKind::KillNow => {
                stop_seen = kind;
                match kind {
                    StopKind::KillNow => guard.signal(Signal::SIGKILL),
                    StopKind::Terminate => {
                        terminate_group(guard, request.kill_grace, &mut kill_at)
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
    let cut = if stop_seen >= StopKind::Terminate {
        Some(Cut::Stopped)
    } else if timed_out {
        Some(Cut::TimedOut)
    } else {
        None
    };
    (status, cut)
}

/// How an attempt that zkcron did not cut short ended, from its wait `status`.
fn exit_of(
    status: std::io::Result<std::process::ExitStatus>,
    request: &RunRequest,
    attempt: u32,
    pid: Option<u32>,
) -> Exit {
    match status {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => Exit::Code(code),
            (None, Some(signal)) => Exit::Signal(signal),
            (None, None) => Exit::SpawnFailed(format!("unexpected wait status {status}")),
        },
        Err(e) => {
            tracing::error!(
                task = %request.task,
                fire_id = %request.fire_id,
                attempt,
                pid,
                "cannot wait for the process: {e}"
            );
            Exit::SpawnFailed(format!("cannot wait for the process: {e}"))
        }
    }
}

/// Sleeps until `deadline`, or for ever without one.
async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
