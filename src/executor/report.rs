//! The log lines of an attempt's start and end, with structured fields, under the target
//! `zkcron::executor` (as when they were written there: log filters and readers name it).

use chrono::TimeDelta;

use super::{AttemptOutcome, RunRequest};

/// Logs that `attempt` started as `pid`: a first attempt with how late it is after its due time,
/// and, when it followed a claim, how long after the claim was won.
pub(super) fn log_started(
    request: &RunRequest,
    attempt: u32,
    pid: Option<u32>,
    lateness: Option<TimeDelta>,
    claim_to_spawn_us: Option<u64>,
) {
    let task = request.task.as_str();
    let fire_id = request.fire_id.as_str();
    match (lateness, claim_to_spawn_us) {
        (Some(lateness), Some(claim_to_spawn_us)) => tracing::info!(target: "zkcron::executor",
            task = %task,
            fire_id = %fire_id,
            attempt,
            pid,
            lateness_us = lateness.num_microseconds().unwrap_or(i64::MAX),
            claim_to_spawn_us,
            "started"
        ),
        (Some(lateness), None) => tracing::info!(target: "zkcron::executor",
            task = %task,
            fire_id = %fire_id,
            attempt,
            pid,
            lateness_us = lateness.num_microseconds().unwrap_or(i64::MAX),
            "started"
        ),
        (None, _) => {
            tracing::info!(target: "zkcron::executor", task = %task, fire_id = %fire_id, attempt, pid, "started")
        }
    }
}

/// Logs how an attempt ended, at info when it succeeded, else at warn, with structured fields:
/// `status` (see [`Exit::status`]), `exit_code` or `signal` where they apply, `reason` when it
/// did not start, and `duration_ms` as a whole number.
pub(super) fn log_finished(request: &RunRequest, outcome: &AttemptOutcome) {
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
        tracing::info!(target: "zkcron::executor", task = %task, fire_id = %fire_id, attempt, status, exit_code, duration_ms, "finished");
    } else {
        tracing::warn!(target: "zkcron::executor",
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
