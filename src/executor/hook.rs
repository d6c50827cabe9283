//! A task's `on_failure` hook: run once, by the node that ran the job, after the run's last
//! attempt failed (a non-zero exit, a signal, a timeout, or a process that could not start).
//!
//! The hook runs as the job would (same user, group, working directory and `env`, its own
//! process group), with what the failed run was in its environment. It is bounded by the task's
//! `timeout` (or [`HOOK_TIMEOUT`]), stopped like the job by a stop request, never retried, and
//! never runs a hook itself: its own failure is logged once, at warn, and that is all.

use std::sync::Arc;

use nix::unistd::Pid;
use tokio::time::Instant;

use super::output::{OutputBudget, drain_output, spawn_output_reader};
use super::process::GroupGuard;
use super::{
    Exit, HOOK_TIMEOUT, RetryPolicy, RunRequest, RunningAttempt, StopSignal, prepare_attempt,
};
use crate::task::CommandLine;

/// Runs `argv`, the `on_failure` hook of `request`, whose run ended with `exit` and whose last
/// attempt printed `tail` last. Returns when the hook's process has exited (its output drained
/// as a job's is); logs how it went.
pub(super) async fn run_on_failure(
    request: &RunRequest,
    argv: &[String],
    exit: &Exit,
    tail: &str,
    stop: &mut StopSignal,
) {
    let task = request.task.as_str();
    let fire_id = request.fire_id.as_str();
    let hook = Arc::new(hook_request(request, argv, exit, tail));
    let prepared = {
        let hook = hook.clone();
        tokio::task::spawn_blocking(move || prepare_attempt(&hook, 1)).await
    };
    let command = match prepared {
        Ok(Ok(command)) => command,
        Ok(Err(reason)) => return hook_failed(request, &Exit::SpawnFailed(reason)),
        Err(e) => {
            let reason = format!("preparing the process failed: {e}");
            return hook_failed(request, &Exit::SpawnFailed(reason));
        }
    };
    let program = command.program;
    let mut command = command.command;
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let reason = format!("cannot execute \"{program}\": {e}");
            return hook_failed(request, &Exit::SpawnFailed(reason));
        }
    };
    let started = Instant::now();
    let pid = child.id();
    tracing::info!(task = %task, fire_id = %fire_id, pid, failure = %exit, "on_failure hook started");
    let guard = GroupGuard {
        pgid: pid.and_then(|p| i32::try_from(p).ok()).map(Pid::from_raw),
    };
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let budget = Arc::new(OutputBudget::new(
        &hook,
        1,
        [stdout.is_some(), stderr.is_some()],
        None,
    ));
    let output = spawn_output_reader(stdout, stderr, &hook, budget.clone());
    let running = RunningAttempt {
        attempt: 1,
        child,
        pid,
        guard,
        started,
        lateness: None,
        output,
        budget,
    };
    let (outcome, output, _) = running.wait(&hook, stop).await;
    drain_output(output, task, fire_id).await;
    let duration_ms = outcome.duration.as_millis() as u64;
    if outcome.exit.is_success() {
        tracing::info!(task = %task, fire_id = %fire_id, duration_ms, "on_failure hook finished");
    } else {
        hook_failed(request, &outcome.exit);
    }
}

/// Logs, once and at warn, that the hook of `request` failed; it is not retried.
fn hook_failed(request: &RunRequest, exit: &Exit) {
    tracing::warn!(
        task = %request.task,
        fire_id = %request.fire_id,
        status = %exit.status(),
        exit_code = exit.code(),
        signal = exit.signal_name().map(tracing::field::display),
        reason = exit.reason(),
        "on_failure hook failed ({exit}); it is not retried"
    );
}

/// The hook's own run: the job's identity and place, `argv`, no retries, no hook, bounded in
/// time, with the failed run described in its environment.
fn hook_request(request: &RunRequest, argv: &[String], exit: &Exit, tail: &str) -> RunRequest {
    let mut env = request.env.clone();
    match exit {
        Exit::Code(code) => {
            env.insert("ZKCRON_EXIT_CODE".into(), code.to_string());
        }
        Exit::Signal(_) => {
            let name = exit.signal_name().unwrap_or_default();
            env.insert("ZKCRON_SIGNAL".into(), name);
        }
        Exit::TimedOut | Exit::SpawnFailed(_) | Exit::Stopped => {}
    }
    env.insert("ZKCRON_FAILURE".into(), exit.to_string().replace('\0', ""));
    // A NUL cannot be passed in the environment; the job may have printed one.
    env.insert("ZKCRON_OUTPUT_TAIL".into(), tail.replace('\0', ""));
    RunRequest {
        command: CommandLine::Argv(argv.to_vec()),
        env,
        timeout: Some(request.timeout.unwrap_or(HOOK_TIMEOUT)),
        retries: RetryPolicy {
            attempts: 0,
            ..request.retries
        },
        on_failure: None,
        pause_on_failure: false,
        output: None,
        ..request.clone()
    }
}
