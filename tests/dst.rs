//! The DST rule a task chooses (`dst_gap`, `dst_repeat`), from the outside: `zkcron schedule
//! --dst` lists what the clock changes of the next 12 months do to an expression's ticks,
//! `validate` notes each task that has such a tick, and the embedded daemon, its wall clock set
//! just before Berlin's changes of 2026 with faketime (Debian's package), fires by the rule:
//! the jobs' own output says which ticks ran.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Scratch, run_zkcron, wait_for};

const LIMIT: Duration = Duration::from_secs(40);

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn schedule_dst_lists_the_ticks_a_clock_change_moves_skips_or_doubles() {
    // cronie's rule for a fixed time: moved out of the gap, once in the repeat.
    let output = run_zkcron(&[
        "schedule",
        "30 2 * * *",
        "--tz",
        "Europe/Berlin",
        "--dst",
        "--after",
        "2026-01-01T00:00:00Z",
    ]);
    assert_eq!(output.status.code(), Some(0));
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].starts_with("2026-03-29 02:30:00 Sun  moved: the clock skips it; runs at 2026-03-29T03:00:00+02:00 (2026-03-29T01:00:00Z)"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("2026-10-25 02:30:00 Sun  once: the clock repeats it; runs at 2026-10-25T02:30:00+02:00 (2026-10-25T00:30:00Z), not at 2026-10-25T02:30:00+01:00"),
        "{text}"
    );
    // The task's choice, given as flags: skipped and doubled.
    let output = run_zkcron(&[
        "schedule",
        "30 2 * * *",
        "--tz",
        "Europe/Berlin",
        "--dst",
        "--dst-gap",
        "skip",
        "--dst-repeat",
        "both",
        "--after",
        "2026-01-01T00:00:00Z",
    ]);
    let text = stdout(&output);
    assert!(
        text.contains("02:30:00 Sun  skipped: the clock skips it; it does not run"),
        "{text}"
    );
    assert!(
        text.contains("doubled: the clock repeats it; runs at 2026-10-25T02:30:00+02:00 (2026-10-25T00:30:00Z) and at 2026-10-25T02:30:00+01:00 (2026-10-25T01:30:00Z)"),
        "{text}"
    );
    // A zone without changes says so.
    let output = run_zkcron(&["schedule", "30 2 * * *", "--tz", "Asia/Tokyo", "--dst"]);
    assert!(
        stdout(&output).contains("no tick of the next 12 months is moved, skipped or doubled by a clock change in Asia/Tokyo"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn validate_notes_a_task_whose_ticks_a_clock_change_touches() {
    let scratch = Scratch::new();
    scratch.write_task(
        "berlin",
        "schedule = \"30 2 * * *\"\ntimezone = \"Europe/Berlin\"\ncommand = \"true\"\ndst_gap = \"skip\"\n",
    );
    scratch.write_task("utc", "schedule = \"30 2 * * *\"\ncommand = \"true\"\n");
    let output = run_zkcron(&["validate", scratch.jobs().to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0));
    let text = stdout(&output);
    assert!(
        text.contains(
            "task berlin: a clock change in Europe/Berlin touches 2 tick(s) of the next 12 months"
        ),
        "{text}"
    );
    assert!(
        text.contains("`zkcron schedule '30 2 * * *' --tz Europe/Berlin --dst --dst-gap skip`"),
        "{text}"
    );
    assert!(!text.contains("task utc:"), "{text}");
    assert!(text.contains("2 valid task(s)"), "{text}");
}

/// `zkcron run` on `scratch` under faketime, its wall clock starting at `start` (UTC) and
/// running at the real pace; the monotonic clock is left alone so that timers work. Fails
/// saying how to install faketime when it is missing.
fn start_daemon_at(scratch: &Scratch, start: &str) -> common::DaemonProcess {
    let found = Command::new("faketime").arg("--help").output().is_ok();
    assert!(
        found,
        "this test needs faketime to set the daemon's clock: apt-get install faketime"
    );
    let mut command = Command::new("faketime");
    command
        .args(["-m", "--exclude-monotonic", "-f", &format!("@{start}")])
        .arg(common::zkcron().get_program())
        .arg("run")
        .arg("--config")
        .arg(scratch.write_config(""))
        .arg("--jobs-dir")
        .arg(scratch.jobs())
        .arg("--state-dir")
        .arg(scratch.path().join("state"))
        .args(["--node-id", "test-node"])
        .env("TZ", "UTC")
        .env("ZKCRON_LOG", "info")
        .env_remove("JOURNAL_STREAM")
        .env_remove("NOTIFY_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let daemon = scratch.spawn_daemon(command);
    daemon.wait_for_log("zkcron started", Duration::from_secs(20));
    daemon
}

/// A task in Berlin writing its tick to `out/<name>`.
fn berlin_task(scratch: &Scratch, name: &str, schedule: &str, extra: &str) {
    let out = scratch.out(name);
    scratch.write_task(
        name,
        &format!(
            "schedule = \"{schedule}\"\ntimezone = \"Europe/Berlin\"\n{extra}\
             command = [\"sh\", \"-c\", \"echo $ZKCRON_SCHEDULED_AT >> {}\"]\n",
            out.display()
        ),
    );
}

/// Waits until the marker (every 2 s) has run a tick at or after `instant`: the daemon fires
/// in order, so every tick before it was fired by then.
fn wait_for_marker(scratch: &Scratch, instant: &str) {
    wait_for(
        &format!("a marker tick at or after {instant}"),
        LIMIT,
        || {
            scratch
                .lines("marker")
                .iter()
                .any(|tick| tick.as_str() >= instant)
        },
    );
}

#[test]
fn the_embedded_daemon_runs_a_gap_s_tick_after_it_or_skips_it_as_the_task_says() {
    let scratch = Scratch::new();
    // 02:30:00 local is skipped on 2026-03-29: the clock goes from 02:00 CET to 03:00 CEST at
    // 01:00:00Z.
    berlin_task(&scratch, "run-after", "0 30 2 * * *", "");
    berlin_task(&scratch, "skip", "0 30 2 * * *", "dst_gap = \"skip\"\n");
    berlin_task(&scratch, "marker", "*/2 * * * * *", "");
    let _daemon = start_daemon_at(&scratch, "2026-03-29 00:59:55");
    wait_for_marker(&scratch, "2026-03-29T01:00:04Z");
    assert_eq!(scratch.lines("run-after"), ["2026-03-29T01:00:00Z"]);
    assert_eq!(scratch.lines("skip"), Vec::<String>::new());
}

#[test]
fn the_embedded_daemon_runs_a_repeated_tick_once_or_twice_as_the_task_says() {
    let scratch = Scratch::new();
    // 02:00:00 local happens twice on 2026-10-25: at 00:00:00Z (CEST) and 01:00:00Z (CET). The
    // daemon starts in the first pass, after its 02:00:00.
    berlin_task(&scratch, "first", "0 0 2 * * *", "");
    berlin_task(&scratch, "both", "0 0 2 * * *", "dst_repeat = \"both\"\n");
    berlin_task(&scratch, "marker", "*/2 * * * * *", "");
    let _daemon = start_daemon_at(&scratch, "2026-10-25 00:59:55");
    wait_for_marker(&scratch, "2026-10-25T01:00:04Z");
    assert_eq!(scratch.lines("both"), ["2026-10-25T01:00:00Z"]);
    assert_eq!(scratch.lines("first"), Vec::<String>::new());
}
