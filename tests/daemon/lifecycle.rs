//! The daemon's life: SIGTERM with a job running, `shutdown_grace`, catch-up after a restart,
//! start-up refusals, and a retry cut short by a stop or a removal.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::{self, Scratch, process_alive, wait_for};
use crate::{LIMIT, fired_seconds, recording_task, zkcron_now};
use nix::sys::signal::Signal;

#[test]
fn given_a_running_job_when_sigterm_arrives_then_the_job_finishes_and_the_daemon_exits_zero() {
    let scratch = Scratch::new();
    let started = scratch.out("started");
    let finished = scratch.out("finished");
    scratch.write_task(
        "slow",
        &format!(
            "schedule = \"* * * * * *\"\ncommand = 'echo $$ >> {started}; sleep 2; echo done >> {finished}'\n",
            started = started.display(),
            finished = finished.display()
        ),
    );
    scratch.write_config("[scheduler]\nshutdown_grace = \"20s\"\n");
    let mut daemon = scratch.start_daemon(&[]);
    wait_for("the job to start", LIMIT, || {
        !scratch.lines("started").is_empty()
    });

    daemon.signal(Signal::SIGTERM);
    assert_eq!(daemon.wait_exit(LIMIT), Some(0));
    // Every job that started also finished: none was killed, no new one started after SIGTERM.
    assert_eq!(
        scratch.lines("finished").len(),
        scratch.lines("started").len()
    );
    assert!(
        daemon.log().contains("waiting for running jobs to finish"),
        "{}",
        daemon.log()
    );
}

#[test]
fn given_a_job_longer_than_shutdown_grace_when_sigterm_arrives_then_its_process_group_is_killed() {
    let scratch = Scratch::new();
    let pids = scratch.out("pids");
    scratch.write_task(
        "endless",
        &format!(
            "schedule = \"* * * * * *\"\ncommand = 'sleep 1000 & echo $! >> {pids}; echo $$ >> {pids}; wait'\n",
            pids = pids.display()
        ),
    );
    scratch.write_config("[scheduler]\nshutdown_grace = \"1s\"\n");
    let mut daemon = scratch.start_daemon(&[]);
    wait_for("the job to start", LIMIT, || {
        scratch.lines("pids").len() >= 2
    });

    daemon.signal(Signal::SIGTERM);
    assert_eq!(daemon.wait_exit(LIMIT), Some(0));
    assert!(
        daemon.log().contains("shutdown_grace is over"),
        "{}",
        daemon.log()
    );
    for pid in scratch.lines("pids") {
        let pid: i32 = pid.parse().unwrap();
        wait_for(&format!("job process {pid} to be gone"), LIMIT, || {
            !process_alive(pid)
        });
    }
}

#[test]
fn given_ticks_missed_while_stopped_when_the_daemon_restarts_then_catch_up_all_runs_them() {
    let scratch = Scratch::new();
    scratch.write_task(
        "catch-all",
        &recording_task(&scratch, "* * * * * *", "ticks", "x", "catch_up = \"all\""),
    );
    let mut daemon = scratch.start_daemon(&[]);
    wait_for("a first tick", LIMIT, || !scratch.lines("ticks").is_empty());
    daemon.signal(Signal::SIGTERM);
    assert_eq!(daemon.wait_exit(LIMIT), Some(0));
    let last_before = *fired_seconds(&scratch.lines("ticks")).last().unwrap();

    // Let at least three ticks pass with no daemon.
    wait_for("three ticks to pass", LIMIT, || {
        zkcron_now() >= last_before + 4
    });
    let daemon = scratch.start_daemon(&[]);
    let restarted_at = zkcron_now();
    wait_for("ticks after the restart", LIMIT, || {
        fired_seconds(&scratch.lines("ticks"))
            .last()
            .copied()
            .unwrap_or(0)
            > restarted_at
    });
    drop(daemon);

    let seconds = fired_seconds(&scratch.lines("ticks"));
    let distinct: BTreeSet<i64> = seconds.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        seconds.len(),
        "a tick ran twice: {seconds:?}"
    );
    let first = seconds[0];
    let last = *seconds.last().unwrap();
    assert_eq!(
        distinct,
        (first..=last).collect::<BTreeSet<i64>>(),
        "ticks missed while stopped were not all caught up"
    );
}

#[test]
fn given_ticks_missed_while_stopped_when_the_daemon_restarts_then_catch_up_once_runs_only_the_latest()
 {
    let scratch = Scratch::new();
    scratch.write_task(
        "catch-once",
        &recording_task(&scratch, "* * * * * *", "ticks", "x", "catch_up = \"once\""),
    );
    let mut daemon = scratch.start_daemon(&[]);
    wait_for("a first tick", LIMIT, || !scratch.lines("ticks").is_empty());
    daemon.signal(Signal::SIGTERM);
    assert_eq!(daemon.wait_exit(LIMIT), Some(0));
    let last_before = *fired_seconds(&scratch.lines("ticks")).last().unwrap();

    wait_for("four ticks to pass", LIMIT, || {
        zkcron_now() >= last_before + 5
    });
    let daemon = scratch.start_daemon(&[]);
    wait_for("the catch-up run", LIMIT, || {
        fired_seconds(&scratch.lines("ticks"))
            .last()
            .copied()
            .unwrap_or(0)
            > last_before
    });
    daemon.wait_for_log("missed ticks not run", LIMIT);
    drop(daemon);

    let seconds = fired_seconds(&scratch.lines("ticks"));
    let after: Vec<i64> = seconds
        .iter()
        .copied()
        .filter(|s| *s > last_before)
        .collect();
    // The first tick after the restart is the caught-up one; it skips at least three missed.
    assert!(
        after[0] >= last_before + 4,
        "caught up an old tick: {seconds:?}"
    );
    let distinct: BTreeSet<i64> = seconds.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        seconds.len(),
        "a tick ran twice: {seconds:?}"
    );
}

#[test]
fn given_a_missing_jobs_dir_when_run_starts_then_it_exits_1_saying_how_to_fix_it() {
    let scratch = Scratch::new();
    let output = common::run_zkcron(&[
        "run",
        "--jobs-dir",
        scratch.path().join("nope").to_str().unwrap(),
        "--state-dir",
        scratch.path().join("state").to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "error: the jobs dir does not exist\n--> {}\n = help: create it, or point \
             --jobs-dir or [scheduler].jobs_dir at your task files",
            scratch.path().join("nope").display()
        )),
        "{stderr}"
    );
}

#[test]
fn given_a_daemon_on_a_state_dir_when_a_second_starts_on_it_then_the_second_refuses() {
    let scratch = Scratch::new();
    let _first = scratch.start_daemon(&[]);
    let output = common::run_zkcron(&[
        "run",
        "--jobs-dir",
        scratch.jobs().to_str().unwrap(),
        "--state-dir",
        scratch.path().join("state").to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("is in use by another zkcron"), "{stderr}");
}

/// Task `failing`: every second, appends `$ZKCRON_ATTEMPT` to `out/attempts` and fails; three
/// retries after `backoff`.
fn write_failing_task(scratch: &Scratch, backoff: &str) {
    scratch.write_task(
        "failing",
        &format!(
            "schedule = \"* * * * * *\"\ncommand = 'echo $ZKCRON_ATTEMPT >> {}; exit 1'\nretries = {{ attempts = 3, backoff = \"{backoff}\" }}\n",
            scratch.out("attempts").display()
        ),
    );
}

/// Regression: a retry attempt started 0.8 s after SIGINT.
#[test]
fn given_a_retry_backoff_when_sigterm_arrives_then_the_retry_never_starts_and_the_daemon_exits_at_once()
 {
    let scratch = Scratch::new();
    write_failing_task(&scratch, "30s");
    scratch.write_config("[scheduler]\nshutdown_grace = \"60s\"\n");
    let mut daemon = scratch.start_daemon(&[]);
    daemon.wait_for_log("retrying after a failed attempt", LIMIT);

    daemon.signal(Signal::SIGTERM);
    // Well within the 30 s backoff and the 60 s grace: nothing was left to wait for.
    assert_eq!(daemon.wait_exit(Duration::from_secs(10)), Some(0));

    let log = daemon.log();
    assert!(log.contains("retry not started"), "{log}");
    assert_eq!(
        scratch.lines("attempts"),
        ["1"],
        "only the first attempt ran"
    );
}

/// Regression: removing a task on reload cancels its pending retries.
#[test]
fn given_a_retry_backoff_when_the_task_is_removed_then_its_retry_never_starts() {
    let scratch = Scratch::new();
    write_failing_task(&scratch, "2s");
    scratch.write_task(
        "control",
        &recording_task(&scratch, "* * * * * *", "control", "c", ""),
    );
    let daemon = scratch.start_daemon(&[]);
    daemon.wait_for_log("retrying after a failed attempt", LIMIT);

    scratch.remove_task("failing");
    daemon.wait_for_log("task removed", LIMIT);
    daemon.wait_for_log("retry not started", LIMIT);
    // Longer than the backoff: the control task ticks three more times.
    let control = scratch.lines("control").len();
    wait_for("three more control ticks", LIMIT, || {
        scratch.lines("control").len() >= control + 3
    });
    assert_eq!(scratch.lines("attempts"), ["1"]);
}
