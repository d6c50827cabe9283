//! The executor against real processes: environment, users, exit reporting, process-group
//! killing, stop requests, retries and output logging. These tests run as root on CI. Elsewhere
//! the ones that only need a task to name another user re-run themselves as root of a user
//! namespace, and the ones that switch to another user fail, saying how to run them.
// These tests drive real processes against the real clock, which the core may not read.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::time::Instant;
use tracing::field::{Field, Visit};
use tracing::instrument::WithSubscriber;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

use zkcron::clock::Clock;
use zkcron::executor::{
    DEFAULT_PATH, Exit, MAX_LINE_BYTES, RunOutcome, RunRequest, Scheduled, Spawner, StopHandle,
    prepare, run,
};
use zkcron::task::{CommandLine, RetryPolicy};

/// The message of the line that says how much of an attempt's output was not logged.
const LEFT_OUT: &str =
    "output not logged past [log] job_output_lines; the last tail_lines lines follow";

/// Long enough for anything a test waits for; reached only when something is broken.
const DEADLINE: Duration = Duration::from_secs(10);

fn scheduled_at() -> DateTime<Utc> {
    "2026-01-01T02:30:00Z".parse().unwrap()
}

fn shell(script: &str) -> CommandLine {
    CommandLine::Shell(script.to_owned())
}

fn argv(args: &[&str]) -> CommandLine {
    CommandLine::Argv(args.iter().map(|a| (*a).to_owned()).collect())
}

/// A request as the daemon would make it for task `report`, with a generous safety timeout.
fn request(command: CommandLine) -> RunRequest {
    let scheduled_at = scheduled_at();
    RunRequest {
        task: "report".into(),
        fire_id: format!("report@{}", scheduled_at.timestamp()),
        scheduled_at,
        due_at: Utc::now(),
        node_id: "node-a".into(),
        command,
        user: None,
        group: None,
        working_dir: None,
        env: BTreeMap::new(),
        timeout: Some(Duration::from_secs(60)),
        kill_grace: Duration::from_secs(5),
        retries: RetryPolicy {
            attempts: 0,
            backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(10),
        },
        output_lines: 1000,
        output: None,
        on_failure: None,
        pause_on_failure: false,
        clock: Clock::system(),
    }
}

/// Runs `request` to its end with nobody able to stop it.
///
/// Every run in these tests logs into a [`Captured`] subscriber, even when nothing looks at it:
/// tracing caches "nobody listens" for a call site first reached on a thread without a
/// subscriber, which would hide that call site's events from tests running in parallel.
async fn run_alone(request: RunRequest) -> RunOutcome {
    let _guard = Captured::default().install();
    run_unstoppable(request).await
}

async fn run_unstoppable(request: RunRequest) -> RunOutcome {
    let (_handle, signal) = StopHandle::new();
    run(request, signal).await
}

/// A run on its own task, so that the test can stop it; logging as in [`run_alone`].
struct Started {
    handle: StopHandle,
    running: tokio::task::JoinHandle<RunOutcome>,
    captured: Captured,
    _guard: tracing::subscriber::DefaultGuard,
}

fn start(request: RunRequest) -> Started {
    let captured = Captured::default();
    let guard = captured.install();
    let (handle, signal) = StopHandle::new();
    let running = tokio::spawn(run(request, signal).with_current_subscriber());
    Started {
        handle,
        running,
        captured,
        _guard: guard,
    }
}

/// Starts `request`, which must fail, with five retries after `backoff`, and returns once its
/// first attempt finished: the run is then in its first backoff.
async fn start_in_backoff(mut request: RunRequest, backoff: Duration) -> Started {
    request.retries = RetryPolicy {
        attempts: 5,
        backoff,
        max_backoff: Duration::from_secs(60),
    };
    let started = start(request);
    let captured = started.captured.clone();
    wait_until("the first attempt finished", || {
        !captured.events("finished").is_empty()
    })
    .await;
    started
}

impl Started {
    /// The outcome, which must come within the test deadline.
    async fn outcome(self, why: &str) -> RunOutcome {
        tokio::time::timeout(DEADLINE, self.running)
            .await
            .unwrap_or_else(|_| panic!("the run did not end: {why}"))
            .unwrap()
    }
}

fn last_exit(outcome: &RunOutcome) -> Exit {
    outcome.last().expect("a run has attempts").exit.clone()
}

fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

/// Makes the calling test run as root: a task may name another user (or group) only when
/// zkcron runs as root, so only then does the executor look the name up. As root (CI) it
/// returns false and the test goes on. Otherwise it re-runs `test` of this test binary as root
/// of a user namespace (`unshare --user --map-root-user`) and returns true once that run
/// passed: the caller returns, the re-run did the work. It panics, saying why, when that is
/// impossible or the re-run failed.
async fn rerun_as_namespace_root(test: &str) -> bool {
    if is_root() {
        return false;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = tokio::process::Command::new("unshare")
        .args(["--user", "--map-root-user", "--"])
        .arg(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .output()
        .await
        .unwrap_or_else(|error| {
            panic!(
                "{test} needs root: run the tests as root, or install util-linux's `unshare` to \
                 run it as root of a user namespace ({error})"
            )
        });
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{test} under `unshare --user --map-root-user` failed ({}); it needs root, or \
         unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1):\n{stdout}\n\
         {stderr}",
        output.status
    );
    print!("{stdout}");
    eprint!("{stderr}");
    true
}

/// Fails, saying how to run it, unless the calling test runs as root. It switches to the user
/// nobody, which needs root; a user namespace an ordinary user creates maps that user's uid
/// alone, so nobody's uid does not exist there and `unshare` cannot stand in.
fn require_root(test: &str) {
    assert!(
        is_root(),
        "{test} switches to the user nobody, which needs root (CI runs the suite as root), and \
         a user namespace cannot stand in (it maps only its creator's uid): run it with \
         `sudo -E cargo test --test executor`"
    );
}

/// Whether `pid` no longer runs: gone, or a zombie nobody reaped (PID 1 in a container may not).
fn is_dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => {
            // The state follows the command name, which is in parentheses.
            let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
            state == Some(Some('Z'))
        }
    }
}

async fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until the child wrote a complete line to `path` and returns the file's content.
async fn read_when_written(path: &Path) -> String {
    wait_until(&format!("{} is written", path.display()), || {
        std::fs::read_to_string(path).is_ok_and(|s| s.ends_with('\n'))
    })
    .await;
    std::fs::read_to_string(path).unwrap()
}

fn read_pid(path: &Path) -> i32 {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{} was not written: {e}", path.display()))
        .trim()
        .parse()
        .unwrap()
}

/// One captured tracing event.
#[derive(Debug, Clone)]
struct Record {
    target: String,
    level: Level,
    fields: BTreeMap<String, String>,
}

impl Record {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

/// A tracing layer that keeps every event, for assertions on what was logged.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<Record>>>);

impl Captured {
    /// Captures events on this thread (and on tasks the executor spawns) until the guard drops.
    fn install(&self) -> tracing::subscriber::DefaultGuard {
        tracing::subscriber::set_default(tracing_subscriber::registry().with(self.clone()))
    }

    fn records(&self) -> Vec<Record> {
        self.0.lock().unwrap().clone()
    }

    /// The job output lines of `stream`, in order.
    fn lines(&self, stream: &str) -> Vec<String> {
        self.records()
            .into_iter()
            .filter(|r| r.target == "zkcron::job" && r.field("stream") == Some(stream))
            .map(|r| r.fields["message"].clone())
            .collect()
    }

    /// The lines saying how much output was left out.
    fn left_out(&self) -> Vec<Record> {
        self.records()
            .into_iter()
            .filter(|r| r.field("message") == Some(LEFT_OUT))
            .collect()
    }

    /// The executor's own events with this message.
    fn events(&self, message: &str) -> Vec<Record> {
        self.records()
            .into_iter()
            .filter(|r| r.target == "zkcron::executor" && r.field("message") == Some(message))
            .collect()
    }
}

struct FieldMap<'a>(&'a mut BTreeMap<String, String>);

impl Visit for FieldMap<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: Subscriber> Layer<S> for Captured {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut FieldMap(&mut fields));
        self.0.lock().unwrap().push(Record {
            target: event.metadata().target().to_owned(),
            level: *event.metadata().level(),
            fields,
        });
    }
}

/// Runs `request` with output captured and returns the outcome and the stdout lines.
async fn run_capturing(request: RunRequest) -> (RunOutcome, Vec<String>, Captured) {
    let captured = Captured::default();
    let _guard = captured.install();
    let outcome = run_unstoppable(request).await;
    let stdout = captured.lines("stdout");
    (outcome, stdout, captured)
}

/// `NAME=value` lines as a map.
fn parse_env(lines: &[String]) -> BTreeMap<String, String> {
    lines
        .iter()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

// Environment.

#[tokio::test(flavor = "multi_thread")]
async fn given_a_task_when_it_runs_then_the_child_gets_the_zkcron_variables_and_cron_defaults() {
    let (outcome, stdout, _) = run_capturing(request(argv(&["env"]))).await;

    assert_eq!(last_exit(&outcome), Exit::Code(0));
    let env = parse_env(&stdout);
    assert_eq!(env["ZKCRON_TASK"], "report");
    assert_eq!(env["ZKCRON_SCHEDULED_AT"], "2026-01-01T02:30:00Z");
    assert_eq!(env["ZKCRON_FIRE_ID"], "report@1767234600");
    assert_eq!(env["ZKCRON_NODE"], "node-a");
    assert_eq!(env["ZKCRON_ATTEMPT"], "1");
    assert_eq!(env["PATH"], DEFAULT_PATH);
    assert_eq!(env["SHELL"], "/bin/sh");
    let me = nix::unistd::User::from_uid(nix::unistd::Uid::current())
        .unwrap()
        .expect("the test user has a passwd entry");
    assert_eq!(env["HOME"], me.dir.to_str().unwrap());
    assert_eq!(env["USER"], me.name);
    assert_eq!(env["LOGNAME"], me.name);
}

#[tokio::test(flavor = "multi_thread")]
async fn given_variables_in_the_daemons_environment_when_a_task_runs_then_only_lang_passes_through()
{
    // Cargo sets CARGO_* variables for test binaries, so the test process has some to leak.
    let leakable: Vec<String> = std::env::vars()
        .map(|(k, _)| k)
        .filter(|k| {
            !matches!(
                k.as_str(),
                "PATH" | "HOME" | "USER" | "LOGNAME" | "SHELL" | "LANG"
            )
        })
        .collect();
    assert!(
        !leakable.is_empty(),
        "the test process has no variable that could leak"
    );

    let (outcome, stdout, _) = run_capturing(request(argv(&["env"]))).await;

    assert_eq!(last_exit(&outcome), Exit::Code(0));
    let names: Vec<String> = parse_env(&stdout).into_keys().collect();
    let allowed = [
        "HOME",
        "LANG",
        "LOGNAME",
        "PATH",
        "SHELL",
        "USER",
        "ZKCRON_ATTEMPT",
        "ZKCRON_FIRE_ID",
        "ZKCRON_NODE",
        "ZKCRON_SCHEDULED_AT",
        "ZKCRON_TASK",
    ];
    for name in &names {
        assert!(
            allowed.contains(&name.as_str()),
            "{name} leaked into the child"
        );
    }
    assert_eq!(
        names.iter().any(|n| n == "LANG"),
        std::env::var_os("LANG").is_some(),
        "LANG is passed through exactly when the daemon has it"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn given_task_env_when_it_runs_then_it_overrides_defaults_including_path() {
    let mut request = request(shell("echo \"$PATH|$GREETING|$ZKCRON_NODE\""));
    request.env = BTreeMap::from([
        ("PATH".to_owned(), "/usr/bin:/bin:/opt/tools/bin".to_owned()),
        ("GREETING".to_owned(), "hello world".to_owned()),
        ("ZKCRON_NODE".to_owned(), "overridden".to_owned()),
    ]);

    let (outcome, stdout, _) = run_capturing(request).await;

    assert_eq!(last_exit(&outcome), Exit::Code(0));
    assert_eq!(
        stdout,
        ["/usr/bin:/bin:/opt/tools/bin|hello world|overridden"]
    );
}

// Command forms.

#[tokio::test(flavor = "multi_thread")]
async fn given_an_argv_command_when_it_runs_then_arguments_reach_the_program_verbatim() {
    let (outcome, stdout, _) =
        run_capturing(request(argv(&["printf", "%s\\n", "a  b", "$HOME", "*"]))).await;

    assert_eq!(last_exit(&outcome), Exit::Code(0));
    assert_eq!(stdout, ["a  b", "$HOME", "*"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn given_a_shell_command_when_it_runs_then_sh_interprets_it() {
    let (outcome, stdout, _) =
        run_capturing(request(shell("x=$((1 + 2)); echo \"$x\" | sed s/3/three/"))).await;

    assert_eq!(last_exit(&outcome), Exit::Code(0));
    assert_eq!(stdout, ["three"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn given_a_working_dir_when_it_runs_then_the_child_starts_there() {
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().canonicalize().unwrap();
    let mut request = request(argv(&["pwd", "-P"]));
    request.working_dir = Some(dir_path.clone());

    let (outcome, stdout, _) = run_capturing(request).await;

    assert_eq!(last_exit(&outcome), Exit::Code(0));
    assert_eq!(stdout, [dir_path.to_str().unwrap()]);
}

#[tokio::test(flavor = "multi_thread")]
async fn given_no_working_dir_when_it_runs_then_the_child_starts_in_the_users_home() {
    let home = nix::unistd::User::from_uid(nix::unistd::Uid::current())
        .unwrap()
        .unwrap()
        .dir;
    let expected = if home.is_dir() {
        home.canonicalize().unwrap()
    } else {
        PathBuf::from("/")
    };

    let (outcome, stdout, _) = run_capturing(request(argv(&["pwd", "-P"]))).await;

    assert_eq!(last_exit(&outcome), Exit::Code(0));
    assert_eq!(stdout, [expected.to_str().unwrap()]);
}

#[tokio::test(flavor = "multi_thread")]
async fn given_a_missing_working_dir_when_it_runs_then_it_fails_to_start_and_names_the_dir() {
    let mut request = request(argv(&["true"]));
    request.working_dir = Some(PathBuf::from("/nonexistent/zkcron-test-dir"));

    let outcome = run_alone(request).await;

    match last_exit(&outcome) {
        Exit::SpawnFailed(reason) => {
            assert!(reason.contains("/nonexistent/zkcron-test-dir"), "{reason}");
            assert!(reason.contains("change `working_dir`"), "{reason}");
        }
        other => panic!("expected a spawn failure, got {other:?}"),
    }
}

// Exit reporting.

#[tokio::test(flavor = "multi_thread")]
async fn given_a_command_that_exits_non_zero_when_it_runs_then_the_code_is_reported() {
    let outcome = run_alone(request(shell("exit 3"))).await;

    assert_eq!(last_exit(&outcome), Exit::Code(3));
    assert!(!outcome.succeeded());
    assert_eq!(last_exit(&outcome).to_string(), "exit code 3");
}

#[tokio::test(flavor = "multi_thread")]
async fn given_a_command_that_exits_zero_when_it_runs_then_the_run_succeeded_once() {
    let outcome = run_alone(request(argv(&["true"]))).await;

    assert!(outcome.succeeded());
    assert_eq!(outcome.attempts.len(), 1);
    let attempt = outcome.last().unwrap();
    assert_eq!(attempt.attempt, 1);
    assert!(attempt.pid.is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn given_a_command_killed_by_a_signal_when_it_runs_then_the_signal_is_reported() {
    let outcome = run_alone(request(shell("kill -9 $$"))).await;

    assert_eq!(last_exit(&outcome), Exit::Signal(9));
    assert_eq!(
        last_exit(&outcome).to_string(),
        "killed by signal 9 (SIGKILL)"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn given_a_missing_binary_when_it_runs_then_it_fails_to_start_and_names_the_binary() {
    for missing in [
        "/nonexistent/zkcron-no-such-binary",
        "zkcron-no-such-binary",
    ] {
        let outcome = run_alone(request(argv(&[missing]))).await;

        let attempt = outcome.last().unwrap();
        assert_eq!(attempt.pid, None);
        match &attempt.exit {
            Exit::SpawnFailed(reason) => {
                assert!(reason.contains(missing), "{reason}");
                assert!(reason.contains("`command`"), "says what to fix: {reason}");
            }
            other => panic!("expected a spawn failure for {missing}, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn given_an_empty_argv_when_it_runs_then_it_fails_to_start() {
    let outcome = run_alone(request(CommandLine::Argv(Vec::new()))).await;

    assert!(matches!(last_exit(&outcome), Exit::SpawnFailed(_)));
}

#[tokio::test(flavor = "multi_thread")]
async fn given_a_late_tick_when_it_runs_then_the_first_attempt_reports_its_lateness() {
    let mut request = request(shell("exit 1"));
    request.due_at = Utc::now() - TimeDelta::seconds(2);
    request.retries.attempts = 1;

    let outcome = run_alone(request).await;

    let first = outcome.attempts[0]
        .lateness
        .expect("first attempt has lateness");
    assert!(first >= TimeDelta::seconds(2), "lateness {first}");
    assert!(first < TimeDelta::seconds(60), "lateness {first}");
    assert_eq!(
        outcome.attempts[1].lateness, None,
        "only the first spawn is late"
    );
}

// Timeouts and stops.

#[tokio::test(flavor = "multi_thread")]
async fn given_a_timeout_when_it_elapses_then_the_whole_group_dies_including_grandchildren() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("grandchild.pid");
    let mut request = request(shell(&format!(
        "sleep 1000 & echo $! > {}; sleep 1000",
        pid_file.display()
    )));
    request.timeout = Some(Duration::from_secs(1));
    request.retries.attempts = 0;

    let outcome = run_alone(request).await;

    assert_eq!(last_exit(&outcome), Exit::TimedOut);
    let grandchild = read_pid(&pid_file);
    wait_until(&format!("grandchild {grandchild} is dead"), || {
        is_dead(grandchild)
    })
    .await;
    let main = outcome.last().unwrap().pid.unwrap() as i32;
    assert!(is_dead(main));
}

#[tokio::test(flavor = "multi_thread")]
async fn given_a_child_ignoring_sigterm_when_it_times_out_then_sigkill_follows_after_kill_grace() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("child.pid");
    let mut request = request(shell(&format!(
        "trap '' TERM; echo $$ > {}; while :; do sleep 0.05; done",
        pid_file.display()
    )));
    request.timeout = Some(Duration::from_secs(1));
    request.kill_grace = Duration::from_millis(700);

    let outcome = run_alone(request).await;

    let attempt = outcome.last().unwrap();
    assert_eq!(attempt.exit, Exit::TimedOut);
    // Dying at the SIGTERM would end the attempt at 1 s; it lived on until the SIGKILL.
    assert!(
        attempt.duration >= Duration::from_millis(1700),
        "ended after {:?}",
        attempt.duration
    );
    assert!(is_dead(read_pid(&pid_file)));
}

#[tokio::test(flavor = "multi_thread")]
async fn given_a_running_job_when_terminate_is_asked_then_the_group_gets_sigterm_and_no_retry() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("grandchild.pid");
    let mut request = request(shell(&format!(
        "sleep 1000 & echo $! > {}; wait",
        pid_file.display()
    )));
    request.kill_grace = Duration::from_secs(30);
    request.retries.attempts = 3;
    let started = start(request);
    let grandchild: i32 = read_when_written(&pid_file).await.trim().parse().unwrap();

    let asked = Instant::now();
    started.handle.terminate();
    let outcome = started.outcome("it should end soon after terminate").await;

    assert_eq!(outcome.attempts.len(), 1, "a stopped run is not retried");
    assert_eq!(last_exit(&outcome), Exit::Stopped);
    // SIGTERM alone ended it: the 30 s kill grace did not run out.
    assert!(asked.elapsed() < Duration::from_secs(10));
    wait_until("the grandchild is dead", || is_dead(grandchild)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn given_a_child_ignoring_sigterm_when_terminate_is_asked_then_sigkill_comes_after_kill_grace()
 {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("child.pid");
    let mut request = request(shell(&format!(
        "trap '' TERM; echo $$ > {}; while :; do sleep 0.05; done",
        pid_file.display()
    )));
    request.kill_grace = Duration::from_millis(500);
    let started = start(request);
    let child: i32 = read_when_written(&pid_file).await.trim().parse().unwrap();

    let asked = Instant::now();
    started.handle.terminate();
    let outcome = started.outcome("it should end after the kill grace").await;

    assert_eq!(last_exit(&outcome), Exit::Stopped);
    assert!(
        asked.elapsed() >= Duration::from_millis(500),
        "ended {:?} after terminate, before the kill grace",
        asked.elapsed()
    );
    assert!(is_dead(child));
}

#[tokio::test(flavor = "multi_thread")]
async fn given_a_child_ignoring_sigterm_when_kill_now_is_asked_then_it_dies_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("child.pid");
    let mut request = request(shell(&format!(
        "trap '' TERM; echo $$ > {}; while :; do sleep 0.05; done",
        pid_file.display()
    )));
    request.kill_grace = Duration::from_secs(60);
    let started = start(request);
    let child: i32 = read_when_written(&pid_file).await.trim().parse().unwrap();

    started.handle.terminate();
    started.handle.kill_now();
    let outcome = started
        .outcome("it should end long before the 60 s kill grace")
        .await;

    assert_eq!(last_exit(&outcome), Exit::Stopped);
    assert!(is_dead(child));
}

#[tokio::test(flavor = "multi_thread")]
async fn given_a_retry_backoff_when_terminate_is_asked_then_the_run_returns_without_retrying() {
    let started = start_in_backoff(request(shell("exit 1")), Duration::from_secs(60)).await;

    started.handle.terminate();
    let outcome = started
        .outcome("it should return at once instead of waiting out the 60 s backoff")
        .await;

    assert_eq!(outcome.attempts.len(), 1);
    assert_eq!(last_exit(&outcome), Exit::Code(1));
}

#[tokio::test(flavor = "multi_thread")]
async fn given_a_stop_before_the_run_when_it_runs_then_nothing_is_started() {
    let _guard = Captured::default().install();
    let (handle, signal) = StopHandle::new();
    handle.terminate();

    let outcome = run(request(argv(&["true"])), signal).await;

    assert_eq!(outcome.attempts.len(), 1);
    let attempt = outcome.last().unwrap();
    assert_eq!(attempt.exit, Exit::Stopped);
    assert_eq!(attempt.pid, None);
}

// Retries.

#[tokio::test(flavor = "multi_thread")]
async fn given_a_failing_command_with_two_retries_when_it_runs_then_it_is_tried_three_times() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("attempts");
    let mut request = request(shell(&format!(
        "echo $ZKCRON_ATTEMPT >> {}; exit 1",
        log.display()
    )));
    request.retries.attempts = 2;

    let outcome = run_alone(request).await;

    assert_eq!(std::fs::read_to_string(&log).unwrap(), "1\n2\n3\n");
    let numbers: Vec<u32> = outcome.attempts.iter().map(|a| a.attempt).collect();
    assert_eq!(numbers, [1, 2, 3]);
    assert!(outcome.attempts.iter().all(|a| a.exit == Exit::Code(1)));
    assert!(!outcome.succeeded());
}

#[tokio::test(flavor = "multi_thread")]
async fn given_a_command_that_succeeds_on_its_second_try_when_it_runs_then_it_is_not_retried_again()
{
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("attempts");
    let mut request = request(shell(&format!(
        "echo $ZKCRON_ATTEMPT >> {}; [ $ZKCRON_ATTEMPT -ge 2 ]",
        log.display()
    )));
    request.retries.attempts = 5;

    let outcome = run_alone(request).await;

    assert_eq!(std::fs::read_to_string(&log).unwrap(), "1\n2\n");
    assert_eq!(outcome.attempts.len(), 2);
    assert!(outcome.succeeded());
}

#[tokio::test(flavor = "multi_thread")]
async fn given_a_spawn_failure_with_retries_when_it_runs_then_it_is_retried() {
    let mut request = request(argv(&["/nonexistent/zkcron-no-such-binary"]));
    request.retries.attempts = 1;

    let outcome = run_alone(request).await;

    assert_eq!(outcome.attempts.len(), 2);
    assert!(
        outcome
            .attempts
            .iter()
            .all(|a| matches!(a.exit, Exit::SpawnFailed(_)))
    );
}

// Users.

#[tokio::test(flavor = "multi_thread")]
async fn given_root_when_a_task_runs_as_nobody_then_the_child_has_nobodys_identity() {
    require_root("given_root_when_a_task_runs_as_nobody_then_the_child_has_nobodys_identity");
    let nobody = nix::unistd::User::from_name("nobody")
        .unwrap()
        .expect("user nobody exists");
    let expected_groups = nix::unistd::getgrouplist(c"nobody", nobody.gid).unwrap();
    let mut request = request(shell(
        "id -u; id -g; id -G; echo \"$HOME\"; echo \"$USER\"; echo \"$LOGNAME\"",
    ));
    request.user = Some("nobody".into());

    let (outcome, stdout, _) = run_capturing(request).await;

    assert_eq!(last_exit(&outcome), Exit::Code(0));
    let mut groups: Vec<String> = expected_groups.iter().map(|g| g.to_string()).collect();
    groups.sort();
    let mut seen_groups: Vec<String> = stdout[2].split(' ').map(str::to_owned).collect();
    seen_groups.sort();
    assert_eq!(stdout[0], nobody.uid.to_string());
    assert_eq!(stdout[1], nobody.gid.to_string());
    assert_eq!(
        seen_groups, groups,
        "root's supplementary groups were dropped"
    );
    assert_eq!(stdout[3], nobody.dir.to_str().unwrap());
    assert_eq!(stdout[4], "nobody");
    assert_eq!(stdout[5], "nobody");
}

#[tokio::test(flavor = "multi_thread")]
async fn given_root_when_a_task_names_a_group_then_the_child_runs_with_that_group() {
    require_root("given_root_when_a_task_names_a_group_then_the_child_runs_with_that_group");
    let group = nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(0))
        .unwrap()
        .expect("gid 0 has a group");
    let mut request = request(shell("id -u; id -g"));
    request.user = Some("nobody".into());
    request.group = Some(group.name.clone());

    let (outcome, stdout, _) = run_capturing(request).await;

    assert_eq!(last_exit(&outcome), Exit::Code(0));
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    assert_eq!(stdout, [nobody.uid.to_string(), "0".to_owned()]);
}

#[tokio::test(flavor = "multi_thread")]
async fn given_an_unknown_user_when_a_task_runs_then_it_fails_to_start_and_names_the_user() {
    // As non-root any other user is refused before the lookup this test is about.
    if rerun_as_namespace_root(
        "given_an_unknown_user_when_a_task_runs_then_it_fails_to_start_and_names_the_user",
    )
    .await
    {
        return;
    }
    let mut request = request(argv(&["true"]));
    request.user = Some("zkcron-no-such-user".into());

    let outcome = run_alone(request).await;

    assert_eq!(
        last_exit(&outcome),
        Exit::SpawnFailed(
            "unknown user \"zkcron-no-such-user\"; create it, or change `user` in the task file \
             (or [scheduler] default_user)"
                .into()
        )
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn given_an_unknown_group_when_a_task_runs_then_it_fails_to_start_and_names_the_group() {
    // As non-root any other group is refused before the lookup this test is about.
    if rerun_as_namespace_root(
        "given_an_unknown_group_when_a_task_runs_then_it_fails_to_start_and_names_the_group",
    )
    .await
    {
        return;
    }
    let mut request = request(argv(&["true"]));
    request.user = Some("nobody".into());
    request.group = Some("zkcron-no-such-group".into());

    let outcome = run_alone(request).await;

    assert_eq!(
        last_exit(&outcome),
        Exit::SpawnFailed(
            "unknown group \"zkcron-no-such-group\"; create it, or change `group` in the task file"
                .into()
        )
    );
}

// Output.

#[tokio::test(flavor = "multi_thread")]
async fn given_output_on_both_streams_when_it_runs_then_each_line_is_logged_with_the_fire_id() {
    let (outcome, stdout, captured) = run_capturing(request(shell(
        "echo out one; echo err one >&2; echo out two",
    )))
    .await;

    assert_eq!(last_exit(&outcome), Exit::Code(0));
    assert_eq!(stdout, ["out one", "out two"]);
    assert_eq!(captured.lines("stderr"), ["err one"]);
    let job_records: Vec<Record> = captured
        .records()
        .into_iter()
        .filter(|r| r.target == "zkcron::job")
        .collect();
    assert_eq!(job_records.len(), 3);
    for record in job_records {
        assert_eq!(record.level, Level::INFO);
        assert_eq!(record.field("task"), Some("report"));
        assert_eq!(record.field("fire_id"), Some("report@1767234600"));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn given_a_100_kb_line_when_it_is_logged_then_it_is_cut_to_4096_bytes_with_a_marker() {
    let (outcome, stdout, _) = run_capturing(request(shell(
        "head -c 102400 /dev/zero | tr '\\0' x; echo; echo after",
    )))
    .await;

    assert_eq!(last_exit(&outcome), Exit::Code(0));
    assert_eq!(stdout.len(), 2);
    let expected = format!(
        "{} …[cut {} bytes]",
        "x".repeat(MAX_LINE_BYTES),
        102400 - MAX_LINE_BYTES
    );
    assert_eq!(stdout[0], expected);
    assert_eq!(stdout[1], "after");
}

#[tokio::test(flavor = "multi_thread")]
async fn given_a_run_when_it_ends_then_started_and_finished_are_logged_with_their_fields() {
    let mut request = request(shell("exit 2"));
    request.retries.attempts = 1;

    let (_, _, captured) = run_capturing(request).await;

    let started = captured.events("started");
    assert_eq!(started.len(), 2);
    let lateness_us = started[0].field("lateness_us").expect("lateness_us");
    assert!(lateness_us.parse::<i64>().is_ok(), "{lateness_us}");
    assert!(started[0].field("pid").is_some());
    assert_eq!(started[1].field("attempt"), Some("2"));
    assert_eq!(
        started[1].field("lateness_us"),
        None,
        "only the first attempt is late"
    );
    let finished = captured.events("finished");
    assert_eq!(finished.len(), 2);
    assert_eq!(finished[1].level, Level::WARN);
    assert_eq!(finished[1].field("status"), Some("exited"));
    assert_eq!(finished[1].field("exit_code"), Some("2"));
    assert_eq!(finished[1].field("signal"), None);
    assert_eq!(finished[1].field("fire_id"), Some("report@1767234600"));
}

/// Logs said `exit="exit code 0"` (a sentence in a field, in JSON too) and
/// `duration_ms=1.7092539999999998`; a machine reads `status`, `exit_code` or `signal`, and a
/// whole `duration_ms`.
#[tokio::test(flavor = "multi_thread")]
async fn finished_says_status_exit_code_or_signal_and_a_whole_duration_ms_not_an_exit_sentence() {
    let (_, _, captured) = run_capturing(request(shell("sleep 0.01; exit 0"))).await;
    let finished = captured.events("finished");
    assert_eq!(finished[0].field("status"), Some("exited"));
    assert_eq!(finished[0].field("exit_code"), Some("0"));
    assert_eq!(finished[0].field("exit"), None);
    let duration_ms = finished[0].field("duration_ms").expect("duration_ms");
    assert!(duration_ms.parse::<u64>().is_ok(), "{duration_ms}");

    let (_, _, captured) = run_capturing(request(shell("kill -9 $$"))).await;
    let finished = captured.events("finished");
    assert_eq!(finished[0].field("status"), Some("killed"));
    assert_eq!(finished[0].field("signal"), Some("SIGKILL"));
    assert_eq!(finished[0].field("exit_code"), None);

    let (_, _, captured) = run_capturing(request(argv(&["/nonexistent/program"]))).await;
    let finished = captured.events("finished");
    assert_eq!(finished[0].field("status"), Some("not_started"));
    assert!(
        finished[0]
            .field("reason")
            .is_some_and(|r| r.contains("/nonexistent/program"))
    );
}

// Robustness.

#[tokio::test(flavor = "multi_thread")]
async fn given_a_timeout_with_retries_when_every_attempt_times_out_then_each_is_retried() {
    let mut request = request(argv(&["sleep", "30"]));
    request.timeout = Some(Duration::from_millis(200));
    request.retries.attempts = 1;

    let outcome = run_alone(request).await;

    let exits: Vec<Exit> = outcome.attempts.iter().map(|a| a.exit.clone()).collect();
    assert_eq!(exits, [Exit::TimedOut, Exit::TimedOut]);
}

#[tokio::test(flavor = "multi_thread")]
async fn given_every_stop_handle_dropped_when_the_job_runs_then_it_runs_to_its_end() {
    let _guard = Captured::default().install();
    let (handle, signal) = StopHandle::new();
    drop(handle);

    let outcome = run(request(shell("sleep 0.2; exit 4")), signal).await;

    assert_eq!(last_exit(&outcome), Exit::Code(4));
}

#[tokio::test(flavor = "multi_thread")]
async fn given_a_running_job_when_its_run_future_is_dropped_then_the_whole_group_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("grandchild.pid");
    let started = start(request(shell(&format!(
        "sleep 1000 & echo $! > {}; wait",
        pid_file.display()
    ))));
    let grandchild: i32 = read_when_written(&pid_file).await.trim().parse().unwrap();

    started.running.abort();

    wait_until("the grandchild is dead", || is_dead(grandchild)).await;
}

// Preparing before the claim (issue 9, item 5): every lookup a spawn needs happens in `prepare`,
// so that after a won claim `start` only spawns.

#[tokio::test(flavor = "multi_thread")]
async fn given_a_missing_program_user_or_working_dir_when_prepared_then_the_error_is_known_before_any_spawn()
 {
    // As non-root the unknown user would be refused before it is looked up.
    if rerun_as_namespace_root(
        "given_a_missing_program_user_or_working_dir_when_prepared_then_the_error_is_known_before_any_spawn",
    )
    .await
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let not_executable = dir.path().join("data.txt");
    std::fs::write(&not_executable, "not a program").unwrap();
    let mut cases = vec![
        (
            request(argv(&["zkcron-no-such-binary"])),
            "cannot execute \"zkcron-no-such-binary\": not found in PATH",
        ),
        (
            request(argv(&["/nonexistent/zkcron-no-such-binary"])),
            "cannot execute \"/nonexistent/zkcron-no-such-binary\": no such file",
        ),
        (
            request(argv(&[not_executable.to_str().unwrap()])),
            "not an executable file; install it, or fix the path in `command`",
        ),
        (
            request(CommandLine::Argv(Vec::new())),
            "the command is empty",
        ),
    ];
    let mut missing_dir = request(argv(&["true"]));
    missing_dir.working_dir = Some(PathBuf::from("/nonexistent/zkcron-test-dir"));
    cases.push((
        missing_dir,
        "working directory /nonexistent/zkcron-test-dir does not exist",
    ));
    let mut unknown_user = request(argv(&["true"]));
    unknown_user.user = Some("zkcron-no-such-user".into());
    cases.push((
        unknown_user,
        "unknown user \"zkcron-no-such-user\"; create it",
    ));
    let _guard = Captured::default().install();
    for (request, expected) in cases {
        let prepared = prepare(request).await;
        let error = prepared.error().expect("the preparation fails").to_owned();
        assert!(error.contains(expected), "{error:?} lacks {expected:?}");
        // Started anyway (the daemon records the tick as a failed run), nothing is spawned.
        let outcome = zkcron::executor::start(prepared, Some(Instant::now()))
            .finish(StopHandle::new().1, |_| {})
            .await;
        assert_eq!(outcome.attempts.len(), 1);
        assert_eq!(outcome.attempts[0].pid, None);
        assert!(matches!(&outcome.attempts[0].exit, Exit::SpawnFailed(r) if *r == error));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn given_a_relative_program_path_when_prepared_then_it_is_found_in_the_working_dir() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("hello.sh");
    std::fs::write(&script, "#!/bin/sh\necho hello from $0\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut request = request(argv(&["./hello.sh"]));
    request.working_dir = Some(dir.path().to_path_buf());

    let (outcome, stdout, _) = run_capturing(request).await;

    assert_eq!(last_exit(&outcome), Exit::Code(0));
    assert_eq!(
        stdout,
        ["hello from ./hello.sh"],
        "argv[0] stays as written"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn given_a_prepared_run_when_started_after_a_claim_then_started_logs_claim_to_spawn_us() {
    let captured = Captured::default();
    let _guard = captured.install();
    let prepared = prepare(request(argv(&["true"]))).await;
    assert_eq!(prepared.error(), None);

    let claimed_at = Instant::now();
    let started = zkcron::executor::start(prepared, Some(claimed_at));
    // `start` spawned synchronously: the "started" event is already there.
    let events = captured.events("started");
    assert_eq!(events.len(), 1, "spawned by start itself");
    let outcome = started.finish(StopHandle::new().1, |_| {}).await;

    assert_eq!(last_exit(&outcome), Exit::Code(0));
    let micros: u64 = events[0]
        .field("claim_to_spawn_us")
        .expect("claim_to_spawn_us is logged")
        .parse()
        .expect("an integer number of microseconds");
    assert!(micros < DEADLINE.as_micros() as u64, "{micros}");
}

/// Runs `request` through `prepare`, `start` and `finish` with its log captured; returns the
/// outcome and what `at_end` saw when the executor reported the run's end.
async fn run_reporting_end<T>(
    request: RunRequest,
    at_end: impl FnOnce(&RunOutcome, &Captured) -> T,
) -> (RunOutcome, T) {
    let captured = Captured::default();
    let _guard = captured.install();
    let mut seen = None;
    let prepared = prepare(request).await;
    let outcome = zkcron::executor::start(prepared, None)
        .finish(StopHandle::new().1, |outcome| {
            seen = Some(at_end(outcome, &captured))
        })
        .await;
    (outcome, seen.expect("the end was reported"))
}

// A finished run is finished (issue 9, item 3): the run's end is reported at its last
// process's exit, not after its output drained or its result was written.

#[tokio::test(flavor = "multi_thread")]
async fn given_a_background_process_holding_stdout_when_the_main_process_exits_then_the_run_ends_at_that_exit()
 {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("background.pid");
    let request = request(shell(&format!(
        "sleep 1000 & echo $! > {}; echo done",
        pid_file.display()
    )));

    let started = Instant::now();
    let (outcome, at_end) = run_reporting_end(request, |outcome, captured| {
        (
            outcome.attempts.len(),
            Instant::now(),
            captured.events("finished").len(),
        )
    })
    .await;
    let returned = Instant::now();

    let background = read_pid(&pid_file);
    // A run that ended on its own leaves its background processes alone, as cron does.
    let still_running = !is_dead(background);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(background),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert_eq!(last_exit(&outcome), Exit::Code(0));
    assert!(still_running);
    // The run returns although its output stays open...
    assert!(
        returned - started < Duration::from_secs(5),
        "run took {:?}",
        returned - started
    );
    // ...and its end was reported at the exit, a second before the output is given up on.
    let (attempts, ended, finished_logged) = at_end;
    assert_eq!(attempts, 1);
    assert_eq!(finished_logged, 0, "reported before the output drained");
    assert!(
        returned - ended >= Duration::from_millis(500),
        "ended {:?} after the start, returned {:?} after it",
        ended - started,
        returned - started
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn given_retries_when_attempts_fail_then_the_run_is_reported_ended_once_after_the_last_attempt()
 {
    let mut request = request(shell("exit 3"));
    request.retries.attempts = 2;

    let (outcome, at_end) = run_reporting_end(request, |outcome, captured| {
        (outcome.attempts.len(), captured.events("started").len())
    })
    .await;

    assert_eq!(outcome.attempts.len(), 3);
    // The backoffs between attempts keep the run live: its end comes after the third process.
    assert_eq!(at_end, (3, 3));
}

// Nothing starts after shutdown begins (issue 9, item 4).

#[tokio::test(flavor = "multi_thread")]
async fn given_a_retry_backoff_when_retries_are_cancelled_then_the_attempt_never_starts_and_the_log_says_so()
 {
    let dir = tempfile::tempdir().unwrap();
    let attempts_file = dir.path().join("attempts");
    let request = request(shell(&format!(
        "echo $ZKCRON_ATTEMPT >> {}; exit 1",
        attempts_file.display()
    )));
    let started = start_in_backoff(request, Duration::from_millis(800)).await;
    let captured = started.captured.clone();

    started.handle.cancel_retries();
    let outcome = started
        .outcome("it should return at once instead of waiting out the backoff")
        .await;

    assert_eq!(outcome.attempts.len(), 1);
    assert_eq!(last_exit(&outcome), Exit::Code(1));
    let not_started = captured
        .records()
        .into_iter()
        .filter(|r| {
            r.field("message")
                .is_some_and(|m| m.starts_with("retry not started"))
        })
        .collect::<Vec<_>>();
    assert_eq!(not_started.len(), 1, "{not_started:?}");
    assert_eq!(not_started[0].field("attempt"), Some("2"));
    assert!(
        not_started[0]
            .field("message")
            .unwrap()
            .contains("stopping"),
        "{not_started:?}"
    );
    // Longer than the backoff: no attempt started late either.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(std::fs::read_to_string(&attempts_file).unwrap(), "1\n");
    assert_eq!(captured.events("started").len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn given_a_running_attempt_when_retries_are_cancelled_then_it_runs_to_its_end_and_is_not_retried()
 {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let mut request = request(shell(&format!(
        "while [ ! -e {} ]; do sleep 0.01; done; exit 1",
        go.display()
    )));
    request.retries.attempts = 3;
    let started = start(request);
    let captured = started.captured.clone();
    wait_until("the attempt started", || {
        !captured.events("started").is_empty()
    })
    .await;

    started.handle.cancel_retries();
    std::fs::write(&go, "").unwrap();
    let outcome = started.outcome("the attempt ends by itself").await;

    assert_eq!(outcome.attempts.len(), 1);
    assert_eq!(last_exit(&outcome), Exit::Code(1), "not killed");
}

// A chatty job cannot flood the log (issue 9, item 15).

/// Checks what `seq 1 count` logged under a cap of 100 lines: the first 50 lines, the line
/// about the left-out middle right after them, then the last 50. Returns every message logged.
fn assert_head_and_tail_of_seq(count: u32, stdout: &[String], captured: &Captured) -> Vec<String> {
    let expected: Vec<String> = (1..=50)
        .chain(count - 49..=count)
        .map(|n| n.to_string())
        .collect();
    assert_eq!(stdout, expected);
    let summary = captured.left_out();
    assert_eq!(summary.len(), 1, "one line says what was left out");
    let left_out_bytes: usize = (51..=count - 50).map(|n| n.to_string().len() + 1).sum();
    let left_out_lines = (count - 100).to_string();
    assert_eq!(
        summary[0].field("lines_left_out"),
        Some(left_out_lines.as_str())
    );
    assert_eq!(
        summary[0].field("bytes_left_out"),
        Some(left_out_bytes.to_string().as_str())
    );
    assert_eq!(summary[0].field("job_output_lines"), Some("100"));
    assert_eq!(summary[0].field("tail_lines"), Some("50"));
    let messages: Vec<String> = captured
        .records()
        .into_iter()
        .filter_map(|r| r.field("message").map(str::to_owned))
        .collect();
    let at = |m: &str| messages.iter().position(|x| x == m).unwrap();
    assert_eq!(at(LEFT_OUT), at("50") + 1, "{messages:#?}");
    assert_eq!(
        at(&(count - 49).to_string()),
        at(LEFT_OUT) + 1,
        "{messages:#?}"
    );
    messages
}

#[tokio::test(flavor = "multi_thread")]
async fn given_a_job_printing_200000_lines_when_it_runs_then_only_output_lines_are_logged_and_the_rest_is_counted()
 {
    let mut request = request(argv(&["seq", "1", "200000"]));
    request.output_lines = 100;

    let (outcome, stdout, captured) = run_capturing(request).await;

    // 1.2 MB through a 64 KiB pipe: the job ran to its end, so the pipe kept being drained.
    assert_eq!(last_exit(&outcome), Exit::Code(0));
    let messages = assert_head_and_tail_of_seq(200_000, &stdout, &captured);
    assert_eq!(
        captured.left_out()[0].field("fire_id"),
        Some("report@1767234600")
    );
    // The output, the summary included, comes before the attempt's "finished".
    let at = |m: &str| messages.iter().position(|x| x == m).unwrap();
    assert!(at("200000") < at("finished"));
}

/// Issue 9, item 15, review: the cap kept only the head of the output, so the end of a chatty
/// job's output, where it says how it ended, was what got dropped.
#[tokio::test(flavor = "multi_thread")]
async fn given_a_job_printing_2000_numbered_lines_when_the_cap_is_100_then_the_first_50_and_the_last_50_are_logged_with_the_left_out_count_between()
 {
    let mut request = request(argv(&["seq", "1", "2000"]));
    request.output_lines = 100;

    let (outcome, stdout, captured) = run_capturing(request).await;

    assert_eq!(last_exit(&outcome), Exit::Code(0));
    assert_head_and_tail_of_seq(2000, &stdout, &captured);
}

/// Issue 9, item 15, review: a failing job's last line (its error, on stderr after a flood of
/// stdout) was never logged once the cap was reached.
#[tokio::test(flavor = "multi_thread")]
async fn given_a_failing_job_whose_last_line_is_an_error_when_its_output_passes_the_cap_then_the_error_is_logged()
 {
    let mut request = request(shell(
        "seq 1 20000; echo 'error: cannot reach db.example.org:5432' >&2; exit 3",
    ));
    request.output_lines = 10;

    let (outcome, stdout, captured) = run_capturing(request).await;

    assert_eq!(last_exit(&outcome), Exit::Code(3));
    assert_eq!(
        captured.lines("stderr"),
        ["error: cannot reach db.example.org:5432"]
    );
    // The head, then the last of stdout: 5 + 4 lines, and the error.
    assert_eq!(stdout[..5], ["1", "2", "3", "4", "5"]);
    assert_eq!(stdout[5..], ["19997", "19998", "19999", "20000"]);
    let summary = captured.left_out();
    assert_eq!(summary.len(), 1, "{summary:?}");
    assert_eq!(summary[0].field("lines_left_out"), Some("19991"));
}

#[tokio::test(flavor = "multi_thread")]
async fn given_output_on_both_streams_when_it_passes_the_cap_then_both_streams_share_it() {
    let mut request = request(shell("seq 1 30; seq 1 30 >&2"));
    request.output_lines = 40;

    let (outcome, stdout, captured) = run_capturing(request).await;

    assert_eq!(last_exit(&outcome), Exit::Code(0));
    assert_eq!(stdout.len() + captured.lines("stderr").len(), 40);
    let summary = captured.left_out();
    assert_eq!(summary.len(), 1, "{summary:?}");
    assert_eq!(summary[0].field("lines_left_out"), Some("20"));
}

#[tokio::test(flavor = "multi_thread")]
async fn given_output_within_the_cap_when_it_runs_then_nothing_is_said_about_left_out_output() {
    let mut request = request(shell("seq 1 5"));
    request.output_lines = 5;

    let (_, stdout, captured) = run_capturing(request).await;

    // Every line, in order: the tail part is logged when the output ends.
    assert_eq!(stdout, ["1", "2", "3", "4", "5"]);
    assert!(captured.left_out().is_empty());
}

// The on_failure hook.

/// A hook that writes what it was given, one `NAME=value` line each (the output tail with its
/// newlines as `|`), to `dir/hook`, and appends a line to `dir/count` per run.
fn recording_hook(dir: &Path) -> Vec<String> {
    let script = format!(
        "{{ for v in ZKCRON_TASK ZKCRON_FIRE_ID ZKCRON_SCHEDULED_AT ZKCRON_NODE ZKCRON_EXIT_CODE \
         ZKCRON_SIGNAL ZKCRON_FAILURE; do eval \"printf '%s=%s\\n' $v \\\"\\${{$v-unset}}\\\"\"; done; \
         printf 'TAIL=%s\\n' \"$(printf '%s' \"$ZKCRON_OUTPUT_TAIL\" | tr '\\n' '|')\"; \
         printf 'TAIL_BYTES=%s\\n' \"$(printf '%s' \"$ZKCRON_OUTPUT_TAIL\" | wc -c)\"; \
         printf 'PWD=%s\\n' \"$PWD\"; }} > {dir}/hook.tmp && mv {dir}/hook.tmp {dir}/hook; \
         echo run >> {dir}/count",
        dir = dir.display()
    );
    vec!["/bin/sh".into(), "-c".into(), script]
}

fn hook_env(dir: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(dir.join("hook")).expect("the hook ran");
    parse_env(&text.lines().map(str::to_owned).collect::<Vec<_>>())
}

/// The hook's events (logged by `zkcron::executor::hook`) with this message.
fn hook_events(captured: &Captured, message: &str) -> Vec<Record> {
    captured
        .records()
        .into_iter()
        .filter(|r| r.target == "zkcron::executor::hook" && r.field("message") == Some(message))
        .collect()
}

fn hook_runs(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("count"))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

#[tokio::test]
async fn on_failure_hook_gets_the_failed_runs_task_fire_exit_code_and_output_tail() {
    let dir = tempfile::tempdir().unwrap();
    let mut request = request(shell("echo first; echo last words; exit 3"));
    request.on_failure = Some(recording_hook(dir.path()));
    request.working_dir = Some(dir.path().to_path_buf());
    let (outcome, _, captured) = run_capturing(request).await;
    assert_eq!(last_exit(&outcome), Exit::Code(3));
    let env = hook_env(dir.path());
    assert_eq!(env["ZKCRON_TASK"], "report");
    assert_eq!(
        env["ZKCRON_FIRE_ID"],
        format!("report@{}", scheduled_at().timestamp())
    );
    assert_eq!(env["ZKCRON_SCHEDULED_AT"], "2026-01-01T02:30:00Z");
    assert_eq!(env["ZKCRON_NODE"], "node-a");
    assert_eq!(env["ZKCRON_EXIT_CODE"], "3");
    assert_eq!(env["ZKCRON_SIGNAL"], "unset");
    assert_eq!(env["ZKCRON_FAILURE"], "exit code 3");
    assert_eq!(env["TAIL"], "first|last words");
    assert_eq!(env["PWD"], dir.path().display().to_string());
    assert_eq!(hook_runs(dir.path()), 1);
    assert_eq!(hook_events(&captured, "on_failure hook finished").len(), 1);
}

#[tokio::test]
async fn on_failure_hook_gets_the_signal_that_killed_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let mut request = request(shell("kill -KILL $$"));
    request.on_failure = Some(recording_hook(dir.path()));
    run_alone(request).await;
    let env = hook_env(dir.path());
    assert_eq!(env["ZKCRON_SIGNAL"], "SIGKILL");
    assert_eq!(env["ZKCRON_EXIT_CODE"], "unset");
    assert_eq!(env["ZKCRON_FAILURE"], "killed by signal 9 (SIGKILL)");
}

#[tokio::test]
async fn on_failure_hook_runs_after_a_timeout_and_after_a_failed_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut timed_out = request(shell("sleep 30"));
    timed_out.timeout = Some(Duration::from_millis(200));
    timed_out.kill_grace = Duration::from_millis(100);
    timed_out.on_failure = Some(recording_hook(dir.path()));
    run_alone(timed_out).await;
    assert_eq!(hook_env(dir.path())["ZKCRON_FAILURE"], "timed out");

    let mut not_started = request(argv(&["/nonexistent/zkcron-test-program"]));
    not_started.on_failure = Some(recording_hook(dir.path()));
    run_alone(not_started).await;
    let env = hook_env(dir.path());
    assert!(
        env["ZKCRON_FAILURE"].starts_with("failed to start: "),
        "{env:?}"
    );
    assert_eq!(env["TAIL"], "");
    assert_eq!(hook_runs(dir.path()), 2);
}

#[tokio::test]
async fn on_failure_hook_does_not_run_after_a_success() {
    let dir = tempfile::tempdir().unwrap();
    let mut request = request(shell("echo fine"));
    request.on_failure = Some(recording_hook(dir.path()));
    let (outcome, _, captured) = run_capturing(request).await;
    assert!(outcome.succeeded());
    assert_eq!(hook_runs(dir.path()), 0);
    assert!(hook_events(&captured, "on_failure hook started").is_empty());
}

#[tokio::test]
async fn on_failure_hook_runs_once_after_the_last_retry_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut request = request(shell("exit 1"));
    request.retries.attempts = 2;
    request.on_failure = Some(recording_hook(dir.path()));
    let outcome = run_alone(request).await;
    assert_eq!(outcome.attempts.len(), 3);
    assert_eq!(hook_runs(dir.path()), 1);
}

#[tokio::test]
async fn failing_on_failure_hook_is_logged_once_at_warn_and_not_retried() {
    let dir = tempfile::tempdir().unwrap();
    let mut request = request(shell("exit 1"));
    request.retries.attempts = 1;
    let count = dir.path().join("count");
    request.on_failure = Some(vec![
        "/bin/sh".into(),
        "-c".into(),
        format!("echo run >> {}; exit 7", count.display()),
    ]);
    let (_, _, captured) = run_capturing(request).await;
    assert_eq!(hook_runs(dir.path()), 1);
    let failed = hook_events(
        &captured,
        "on_failure hook failed (exit code 7); it is not retried",
    );
    assert_eq!(failed.len(), 1, "{:#?}", captured.records());
    assert_eq!(failed[0].level, Level::WARN);
    assert_eq!(failed[0].field("exit_code"), Some("7"));
    assert_eq!(failed[0].field("task"), Some("report"));
}

#[tokio::test]
async fn on_failure_hook_that_cannot_start_is_logged_once_at_warn() {
    let mut request = request(shell("exit 1"));
    request.on_failure = Some(vec!["/nonexistent/zkcron-hook".into()]);
    let (_, _, captured) = run_capturing(request).await;
    let failed: Vec<Record> = captured
        .records()
        .into_iter()
        .filter(|r| {
            r.field("message")
                .is_some_and(|m| m.starts_with("on_failure hook failed (failed to start: "))
        })
        .collect();
    assert_eq!(failed.len(), 1, "{:#?}", captured.records());
    assert_eq!(failed[0].level, Level::WARN);
    assert_eq!(failed[0].field("status"), Some("not_started"));
}

#[tokio::test]
async fn on_failure_output_tail_is_bounded_to_its_last_4_kib() {
    let dir = tempfile::tempdir().unwrap();
    // 2,000 lines of 100 bytes; the last one is recognisable.
    let mut request = request(shell(
        "i=0; while [ $i -lt 2000 ]; do printf '%099d\\n' $i; i=$((i+1)); done; echo the end; exit 2",
    ));
    request.on_failure = Some(recording_hook(dir.path()));
    run_alone(request).await;
    let env = hook_env(dir.path());
    let bytes: usize = env["TAIL_BYTES"].trim().parse().unwrap();
    assert!(bytes <= 4096 && bytes > 3900, "{bytes}");
    assert!(env["TAIL"].ends_with("|the end"), "{}", env["TAIL"]);
}

/// Waits for `run` to be spawned, checks it was not before `due`, and runs it to a success.
async fn spawned_at_its_instant_and_succeeds(run: &mut Scheduled, due: DateTime<Utc>, what: &str) {
    let spawned = tokio::time::timeout(DEADLINE, run.spawned())
        .await
        .unwrap_or_else(|_| panic!("{what} was never spawned"))
        .unwrap_or_else(|| panic!("{what}: the spawner stopped first"));
    assert!(
        spawned.at >= due,
        "{what} spawned {} before its instant",
        due - spawned.at
    );
    let (_handle, signal) = StopHandle::new();
    let outcome = spawned.started.finish(signal, |_| {}).await;
    assert!(outcome.succeeded(), "{what}: {outcome:?}");
}

/// The spawner threads start a run at its instant and never before, start and hand back every
/// run of one instant (more than a thread holds before it hands them back), never start a
/// withdrawn run, and start nothing once dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spawner_starts_runs_at_their_instant_and_never_a_withdrawn_one() {
    let _guard = Captured::default().install();
    let dir = tempfile::tempdir().unwrap();
    let spawner = Spawner::start(Clock::system());
    let touch = |name: &str| request(shell(&format!("touch {}", dir.path().join(name).display())));
    // Everything is prepared before the instant is chosen: from the instant on, the spawner
    // threads may take the runs, and the withdrawal below must come first. Handing a run over
    // and taking it back only take a lock, far quicker than `ahead`.
    let mut prepared = Vec::new();
    for i in 0..40 {
        prepared.push(prepare(touch(&format!("r{i}"))).await);
    }
    let to_withdraw = prepare(touch("withdrawn")).await;
    let to_spawn_later = prepare(touch("later")).await;
    let ahead = Duration::from_millis(300);
    let due = Utc::now() + ahead;
    let mut withdrawn = spawner.spawn_at(due, to_withdraw, None);
    assert!(
        withdrawn.withdraw(),
        "not yet taken: it can be taken back (its instant is {} away)",
        due - Utc::now()
    );
    assert!(!withdrawn.withdraw(), "only once");
    let mut runs: Vec<Scheduled> = prepared
        .into_iter()
        .map(|run| spawner.spawn_at(due, run, None))
        .collect();
    let mut later = spawner.spawn_at(due + ahead, to_spawn_later, None);
    for (i, run) in runs.iter_mut().enumerate() {
        spawned_at_its_instant_and_succeeds(run, due, &format!("run {i}")).await;
        assert!(dir.path().join(format!("r{i}")).exists());
    }
    let spawned = later.spawned().await.expect("spawned");
    let (_handle, signal) = StopHandle::new();
    spawned.started.finish(signal, |_| {}).await;
    // The spawner takes runs in the order of their instants: the withdrawn one's came and went.
    assert!(withdrawn.spawned().await.is_none());
    assert!(
        !dir.path().join("withdrawn").exists(),
        "a withdrawn run was spawned"
    );

    let mut pending = spawner.spawn_at(
        Utc::now() + Duration::from_secs(3600),
        prepare(touch("never")).await,
        None,
    );
    drop(spawner);
    assert!(
        pending.spawned().await.is_none(),
        "a stopped spawner starts nothing"
    );
    assert!(!dir.path().join("never").exists());
}

/// A spawner whose threads could not start (here: none asked for) spawns each run from the task
/// that awaits it, on a tokio timer: at its instant and never before, and never a withdrawn one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawner_without_threads_spawns_runs_at_their_instant_from_the_awaiting_task() {
    let _guard = Captured::default().install();
    let dir = tempfile::tempdir().unwrap();
    let spawner = Spawner::with_threads(0, Clock::system());
    let touch = |name: &str| request(shell(&format!("touch {}", dir.path().join(name).display())));
    let due = Utc::now() + Duration::from_millis(300);
    let mut run = spawner.spawn_at(due, prepare(touch("run")).await, None);
    let mut withdrawn = spawner.spawn_at(due, prepare(touch("withdrawn")).await, None);
    assert!(
        withdrawn.withdraw(),
        "not yet spawned: it can be taken back"
    );
    assert!(
        withdrawn.spawned().await.is_none(),
        "a withdrawn run is not spawned"
    );
    spawned_at_its_instant_and_succeeds(&mut run, due, "the run").await;
    assert!(dir.path().join("run").exists());
    assert!(
        !dir.path().join("withdrawn").exists(),
        "a withdrawn run was spawned"
    );
}
