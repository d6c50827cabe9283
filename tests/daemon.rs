//! End-to-end tests of `zkcron run` with the embedded backend: the real binary on task files
//! written into a temp dir, observed through the files its jobs write and its log.

mod common;

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::time::Duration;

use common::{Scratch, process_alive, wait_for};
use nix::sys::signal::Signal;

const LIMIT: Duration = Duration::from_secs(30);

/// A task that appends "<fire id> <scheduled at> <attempt> <marker>" to `out/<file>`.
fn recording_task(
    scratch: &Scratch,
    schedule: &str,
    file: &str,
    marker: &str,
    extra: &str,
) -> String {
    format!(
        "schedule = \"{schedule}\"\ncommand = 'echo \"$ZKCRON_FIRE_ID $ZKCRON_SCHEDULED_AT $ZKCRON_ATTEMPT {marker}\" >> {out}'\n{extra}\n",
        out = scratch.out(file).display()
    )
}

/// Unix seconds of each line's fire id.
fn fired_seconds(lines: &[String]) -> Vec<i64> {
    lines
        .iter()
        .map(|l| {
            l.split_whitespace()
                .next()
                .unwrap()
                .rsplit('@')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect()
}

#[test]
fn given_a_one_second_task_when_the_daemon_runs_then_every_tick_fires_exactly_once() {
    let scratch = Scratch::new();
    scratch.write_task(
        "every-second",
        &recording_task(&scratch, "* * * * * *", "ticks", "v1", ""),
    );
    let mut daemon = scratch.start_daemon(&[]);

    wait_for("5 ticks", LIMIT, || scratch.lines("ticks").len() >= 5);
    daemon.signal(Signal::SIGTERM);
    assert_eq!(daemon.wait_exit(LIMIT), Some(0));

    let lines = scratch.lines("ticks");
    let seconds = fired_seconds(&lines);
    let distinct: BTreeSet<i64> = seconds.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        seconds.len(),
        "a tick ran twice: {lines:#?}"
    );
    assert!(
        seconds.windows(2).all(|w| w[1] == w[0] + 1),
        "a tick was lost: {lines:#?}"
    );
    // The environment names the tick: fire id and scheduled instant agree; first attempt.
    for line in &lines {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let second: i64 = fields[0].rsplit('@').next().unwrap().parse().unwrap();
        let at = chrono::DateTime::parse_from_rfc3339(fields[1]).unwrap();
        assert_eq!(at.timestamp(), second, "{line}");
        assert!(fields[1].ends_with('Z'), "{line}");
        assert_eq!(fields[2], "1", "{line}");
        assert!(fields[0].starts_with("every-second@"), "{line}");
    }
}

/// Among a few hundred files, each change the watch names is applied by reading only what it
/// names (a named reload, logged at debug), and the others are kept: a full reload at the end
/// finds nothing else to change.
#[test]
fn given_a_running_daemon_when_task_files_are_added_changed_broken_renamed_and_removed_then_it_follows()
 {
    let scratch = Scratch::new();
    // A control task keeps ticking so the test can tell time passed without sleeping.
    scratch.write_task(
        "control",
        &recording_task(&scratch, "* * * * * *", "control", "c", ""),
    );
    for i in 0..300 {
        scratch.write_task(&format!("idle-{i:03}"), IDLE_TASK);
    }
    let mut command = scratch.daemon_command();
    command
        .env("ZKCRON_LOG", "info,zkcron::daemon=debug")
        .arg("--state-dir")
        .arg(scratch.path().join("state"))
        .args(["--node-id", "test-node"]);
    let daemon = scratch.spawn_daemon(command);
    daemon.wait_for_log("zkcron started", LIMIT);
    wait_for("control ticks", LIMIT, || {
        !scratch.lines("control").is_empty()
    });
    // Each change below is one reload that reads the file it names (and changes that task).
    let reloaded = |what: &str, count: usize, needles: &[&str]| {
        daemon.wait_for_log_count("tasks reloaded", count, LIMIT);
        let log = daemon.log();
        let line = log.lines().rfind(|l| l.contains("tasks reloaded")).unwrap();
        for needle in needles {
            assert!(line.contains(needle), "{what}: {needle} in {line}");
        }
        let read = log.lines().rfind(|l| l.contains("jobs dir read")).unwrap();
        assert!(read.contains("scan=named"), "{what}: {read}");
    };

    // Added: picked up by the directory watch, without a signal.
    scratch.write_task(
        "added",
        &recording_task(&scratch, "* * * * * *", "added", "v1", ""),
    );
    wait_for("the added task to fire", LIMIT, || {
        !scratch.lines("added").is_empty()
    });
    reloaded("added", 2, &["added=1 changed=0 removed=0"]);

    // Modified: the new version runs.
    scratch.write_task(
        "added",
        &recording_task(&scratch, "* * * * * *", "added", "v2", ""),
    );
    wait_for("the modified task to fire", LIMIT, || {
        scratch.lines("added").iter().any(|l| l.ends_with("v2"))
    });
    reloaded("modified", 3, &["added=0 changed=1 removed=0"]);

    // Renamed within the dir: the task of the old name goes, the new one comes.
    let jobs = scratch.jobs();
    std::fs::rename(jobs.join("added.toml"), jobs.join("renamed.toml")).unwrap();
    daemon.wait_for_log_line("the renamed task", &["task loaded", "renamed"], LIMIT);
    reloaded("renamed", 4, &["added=1 changed=0 removed=1"]);

    // Broken: the error is logged and the last good version keeps running.
    scratch.write_task(
        "renamed",
        "schedule = \"* * * * * *\"\ncommand = ['true']\ntimezon = \"UTC\"\n",
    );
    daemon.wait_for_log("keeping its last good version running", LIMIT);
    assert!(
        daemon.log().contains("unknown key `timezon`"),
        "{}",
        daemon.log()
    );
    reloaded(
        "broken",
        5,
        &["added=0 changed=0 removed=0", "invalid_files=1"],
    );
    let before = scratch.lines("added").len();
    wait_for("the last good version to keep firing", LIMIT, || {
        scratch.lines("added").len() >= before + 2
    });
    assert!(scratch.lines("added").last().unwrap().ends_with("v2"));

    // Removed: it stops firing while the control task goes on.
    scratch.remove_task("renamed");
    daemon.wait_for_log("task removed", LIMIT);
    reloaded("removed", 6, &["removed=1", "invalid_files=0"]);
    let after_removal = scratch.lines("added").len();
    let control = scratch.lines("control").len();
    wait_for("three more control ticks", LIMIT, || {
        scratch.lines("control").len() >= control + 3
    });
    // A tick that was already being spawned when the file went may still land; no more after it.
    assert!(
        scratch.lines("added").len() <= after_removal + 1,
        "removed task kept firing"
    );

    // SIGHUP reloads too, looking at every file: it finds only the file added before it, so
    // the named reloads left the other 301 tasks as they are.
    scratch.write_task(
        "by-signal",
        &recording_task(&scratch, "* * * * * *", "by-signal", "s", ""),
    );
    daemon.signal(Signal::SIGHUP);
    wait_for("the task added before SIGHUP to fire", LIMIT, || {
        !scratch.lines("by-signal").is_empty()
    });
    daemon.wait_for_log_line(
        "the full reload",
        &["tasks reloaded", "SIGHUP", "added=1 changed=0 removed=0"],
        LIMIT,
    );
    daemon.wait_for_log_line("its scan", &["jobs dir read", "scan=full (SIGHUP)"], LIMIT);
}

/// A task that never fires during a test.
const IDLE_TASK: &str = "schedule = \"0 0 1 1 *\"\ncommand = ['true']\n";

/// Rewrites `jobs.d/<name>.toml` every 100 ms from a thread (atomically, as config management
/// does) for at most a minute, so that the daemon's jobs dir never goes quiet. Stops and joins
/// the thread on drop, so a failing test leaves no writer behind.
struct BusyWriter {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BusyWriter {
    fn start(scratch: &Scratch, name: &str) -> BusyWriter {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let jobs = scratch.jobs();
        let name = name.to_string();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            for i in 0..600 {
                if flag.load(Ordering::Relaxed) {
                    return;
                }
                let temp = jobs.join(format!(".{name}.tmp"));
                let text = format!(
                    "description = \"rewrite {i}\"\nschedule = \"@yearly\"\ncommand = \"true\"\n"
                );
                std::fs::write(&temp, text).unwrap();
                std::fs::rename(&temp, jobs.join(format!("{name}.toml"))).unwrap();
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        BusyWriter {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for BusyWriter {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Regression: a file rewritten every 100 ms kept the main loop in its debounce loop, so a new
/// task was never loaded.
#[test]
fn given_a_file_rewritten_every_100ms_when_a_task_is_added_then_it_is_loaded_anyway() {
    let scratch = Scratch::new();
    let _daemon = scratch.start_daemon(&[]);
    let _busy = BusyWriter::start(&scratch, "busy");
    wait_for("the busy file to exist", LIMIT, || {
        scratch.jobs().join("busy.toml").exists()
    });
    scratch.write_task(
        "fresh",
        &recording_task(&scratch, "* * * * * *", "fresh", "f", ""),
    );
    wait_for(
        "the task added while another file is rewritten every 100 ms to fire",
        Duration::from_secs(10),
        || !scratch.lines("fresh").is_empty(),
    );
}

/// Regression: a file rewritten every 100 ms kept the main loop in its debounce loop, so
/// SIGTERM was never handled and the daemon had to be killed.
#[test]
fn given_a_file_rewritten_every_100ms_when_sigterm_arrives_then_the_daemon_exits_zero() {
    let scratch = Scratch::new();
    let mut daemon = scratch.start_daemon(&[]);
    let _busy = BusyWriter::start(&scratch, "busy");
    wait_for("the busy file to exist", LIMIT, || {
        scratch.jobs().join("busy.toml").exists()
    });
    daemon.signal(Signal::SIGTERM);
    assert_eq!(daemon.wait_exit(Duration::from_secs(10)), Some(0));
}

/// `run` says of each entry named like a task file that it cannot load what it is, as
/// `validate` does, and loads the rest.
#[test]
fn given_odd_entries_named_like_task_files_when_the_daemon_loads_them_then_each_is_named() {
    let scratch = Scratch::new();
    let jobs = scratch.jobs();
    scratch.write_task(
        "good",
        &recording_task(&scratch, "* * * * * *", "good", "g", ""),
    );
    let _socket = common::make_odd_entries(&jobs);
    scratch.write_task(
        "huge",
        &format!(
            "schedule = \"@daily\"\ncommand = \"{}\"\n",
            "x".repeat(200_000)
        ),
    );
    let daemon = scratch.start_daemon(&[]);
    wait_for("the good task to fire", LIMIT, || {
        !scratch.lines("good").is_empty()
    });
    let log = daemon.log();
    let huge = (
        "huge",
        "`command` is 200000 bytes; Linux refuses to start a program",
    );
    for (name, message) in common::ODD_ENTRIES.into_iter().chain([huge]) {
        let path = jobs.join(format!("{name}.toml"));
        assert!(
            log.lines()
                .any(|l| l.contains("invalid task file, not loaded")
                    && l.contains(&format!("{}", path.display()))
                    && l.contains(message)),
            "no line for {name} ({message:?}) in:\n{log}"
        );
    }
}

/// The two odd kinds that need root to set up: a device node named like a task file (only
/// root may create one), and a task file the daemon cannot read (root reads everything, so the
/// daemon runs as nobody here).
#[test]
fn given_a_device_and_an_unreadable_file_named_like_tasks_when_the_daemon_loads_them_then_each_is_named()
 {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test creates a device node and runs the daemon as nobody, which needs root (CI \
         runs the suite as root): run it with `sudo -E cargo test --test daemon`"
    );
    let scratch = Scratch::new();
    let jobs = scratch.jobs();
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let state = scratch.path().join("state");
    std::os::unix::fs::chown(&state, Some(65534), Some(65534)).unwrap();
    nix::sys::stat::mknod(
        &jobs.join("device.toml"),
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o644),
        nix::sys::stat::makedev(1, 3),
    )
    .unwrap();
    scratch.write_task("secret", "schedule = \"@daily\"\ncommand = \"true\"\n");
    std::fs::set_permissions(
        jobs.join("secret.toml"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let mut command = scratch.daemon_command();
    command
        .arg("--state-dir")
        .arg(&state)
        .args(["--node-id", "test-node"])
        .uid(65534)
        .gid(65534);
    let daemon = scratch.spawn_daemon(command);
    daemon.wait_for_log("zkcron started", LIMIT);
    let log = daemon.log();
    for (name, message) in [
        ("device", "a character device, not a task file"),
        (
            "secret",
            "cannot read the task file: Permission denied (os error 13) (zkcron runs as \
             \"nobody\": make the file and its directories readable by that user)",
        ),
    ] {
        let path = jobs.join(format!("{name}.toml"));
        assert!(
            log.lines()
                .any(|l| l.contains("invalid task file, not loaded")
                    && l.contains(&format!("{}: {message}", path.display()))),
            "no line for {name} ({message:?}) in:\n{log}"
        );
    }
}

/// A jobs dir that turns unsafe is treated like a broken file: the last good tasks keep
/// running, the refusal is logged with its fix, and nothing new is loaded until it is fixed.
#[test]
fn given_a_jobs_dir_made_world_writable_when_reloading_then_the_last_good_tasks_keep_running() {
    let scratch = Scratch::new();
    scratch.write_task(
        "steady",
        &recording_task(&scratch, "* * * * * *", "steady", "s", ""),
    );
    let daemon = scratch.start_daemon(&[]);
    wait_for("the task to fire", LIMIT, || {
        !scratch.lines("steady").is_empty()
    });
    std::fs::set_permissions(scratch.jobs(), std::fs::Permissions::from_mode(0o777)).unwrap();
    scratch.write_task(
        "planted",
        &recording_task(&scratch, "* * * * * *", "planted", "p", ""),
    );
    daemon.wait_for_log("jobs dir refused, keeping the 1 loaded tasks", LIMIT);
    assert!(
        daemon.log().contains(&format!(
            "the jobs dir is group- and world-writable (mode 0777), so other users could add \
             tasks that zkcron runs; zkcron refuses it, as cron refuses such a directory (run \
             `chmod go-w {}`)",
            scratch.jobs().display()
        )),
        "{}",
        daemon.log()
    );
    let before = scratch.lines("steady").len();
    wait_for("the loaded task to keep firing", LIMIT, || {
        scratch.lines("steady").len() >= before + 2
    });
    assert!(
        scratch.lines("planted").is_empty(),
        "loaded from an unsafe dir"
    );

    // Fixed: the next reload loads what is there.
    std::fs::set_permissions(scratch.jobs(), std::fs::Permissions::from_mode(0o755)).unwrap();
    wait_for("the task added meanwhile to fire", LIMIT, || {
        !scratch.lines("planted").is_empty()
    });
}

/// A symlinked task file may point only into its own directory, so that the directory watch
/// sees its target change; editing the target reloads the task.
#[test]
fn given_a_task_file_symlinked_to_a_file_in_jobs_d_when_the_target_is_edited_then_it_reloads() {
    let scratch = Scratch::new();
    let target = scratch.jobs().join(".linked-v");
    let write_target = |marker: &str| {
        let temp = scratch.jobs().join(".linked-v.tmp");
        std::fs::write(
            &temp,
            recording_task(&scratch, "* * * * * *", "linked", marker, ""),
        )
        .unwrap();
        std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::rename(&temp, &target).unwrap();
    };
    write_target("v1");
    std::os::unix::fs::symlink(".linked-v", scratch.jobs().join("linked.toml")).unwrap();
    let _daemon = scratch.start_daemon(&[]);
    wait_for("v1 to fire", LIMIT, || {
        scratch.lines("linked").iter().any(|l| l.ends_with("v1"))
    });
    write_target("v2");
    wait_for("v2 to fire", LIMIT, || {
        scratch.lines("linked").iter().any(|l| l.ends_with("v2"))
    });
}

#[test]
fn given_one_bad_file_at_start_when_the_daemon_runs_then_the_valid_tasks_run_and_the_error_is_logged()
 {
    let scratch = Scratch::new();
    scratch.write_task(
        "good",
        &recording_task(&scratch, "* * * * * *", "good", "g", ""),
    );
    scratch.write_task("bad", "schedule = \"0 25 * * *\"\ncommand = \"true\"\n");
    let _daemon = {
        let daemon = scratch.start_daemon(&[]);
        wait_for("the good task to fire", LIMIT, || {
            !scratch.lines("good").is_empty()
        });
        daemon
    };
    let log = _daemon.log();
    assert!(log.contains("invalid task file, not loaded"), "{log}");
    assert!(log.contains("bad.toml:1:15"), "{log}"); // points at `25` inside the string
    assert!(log.contains("hour field \"25\" is invalid"), "{log}");
}

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

/// The current Unix second, read the way the tests' observers see time.
#[allow(clippy::disallowed_methods)]
fn zkcron_now() -> i64 {
    chrono::Utc::now().timestamp()
}

#[test]
fn given_overlap_skip_when_a_run_outlasts_the_period_then_the_next_tick_is_skipped() {
    let scratch = Scratch::new();
    let runs = scratch.out("runs");
    scratch.write_task(
        "long",
        &format!(
            "schedule = \"* * * * * *\"\ncommand = 'echo $ZKCRON_FIRE_ID >> {runs}; sleep 2.5'\noverlap = \"skip\"\n",
            runs = runs.display()
        ),
    );
    let daemon = scratch.start_daemon(&[]);
    daemon.wait_for_log_count("skipped: the previous run is still going", 2, LIMIT);
    wait_for("a second run", LIMIT, || scratch.lines("runs").len() >= 2);
    // Runs never overlap: consecutive runs start at least 3 ticks apart (2.5 s run, 1 s ticks).
    let seconds = fired_seconds(&scratch.lines("runs"));
    assert!(seconds.windows(2).all(|w| w[1] - w[0] >= 3), "{seconds:?}");
}

#[test]
fn given_overlap_replace_when_a_run_outlasts_the_period_then_it_is_stopped_for_the_next() {
    let scratch = Scratch::new();
    let runs = scratch.out("runs");
    let overlaps = scratch.out("overlaps");
    // Each run first notes every earlier run whose process is still alive, then records its
    // fire id and pid, and becomes `sleep 30` under that pid.
    let script = format!(
        "for pid in $(cut -d' ' -f2 {runs} 2>/dev/null); do \
         kill -0 $pid 2>/dev/null && echo \"$ZKCRON_FIRE_ID started while $pid ran\" >> {overlaps}; \
         done; echo \"$ZKCRON_FIRE_ID $$\" >> {runs}; exec sleep 30",
        runs = runs.display(),
        overlaps = overlaps.display()
    );
    scratch.write_task(
        "replaced",
        &format!(
            "schedule = \"* * * * * *\"\ncommand = '''{script}'''\noverlap = \"replace\"\n\
             kill_grace = \"1s\"\n"
        ),
    );
    let daemon = scratch.start_daemon(&[]);
    daemon.wait_for_log("replacing the running run", LIMIT);
    daemon.wait_for_log("status=stopped", LIMIT);
    wait_for("the run after the replaced one to start", LIMIT, || {
        scratch.lines("runs").len() >= 2
    });

    let started = scratch.lines("runs");
    let seconds = fired_seconds(&started);
    assert!(seconds[0] < seconds[1], "{started:?}");
    // The first run was stopped (it would have slept 30 s), and the stopped run was it.
    let (first, first_pid) = started[0].split_once(' ').expect("fire id and pid");
    assert!(!process_alive(first_pid.parse().unwrap()), "{started:?}");
    let log = daemon.log();
    assert!(
        log.lines()
            .any(|l| l.contains(&format!("fire_id={first}")) && l.contains("status=stopped")),
        "{log}"
    );
    // Each run started only once the run it replaced was gone.
    assert_eq!(scratch.lines("overlaps"), Vec::<String>::new(), "{log}");
}

#[test]
fn given_a_change_while_a_run_is_going_when_reloaded_then_the_run_finishes() {
    let scratch = Scratch::new();
    let started = scratch.out("started");
    let finished = scratch.out("finished");
    let task = |marker: &str| {
        format!(
            "schedule = \"* * * * * *\"\ncommand = 'echo {marker} >> {started}; sleep 2; echo {marker} >> {finished}'\n",
            started = started.display(),
            finished = finished.display()
        )
    };
    scratch.write_task("changing", &task("v1"));
    let daemon = scratch.start_daemon(&[]);
    wait_for("the v1 run to start", LIMIT, || {
        !scratch.lines("started").is_empty()
    });
    scratch.write_task("changing", &task("v2"));
    daemon.wait_for_log("task changed; a run in progress finishes", LIMIT);
    wait_for("the v1 run to finish", LIMIT, || {
        scratch.lines("finished").contains(&"v1".to_string())
    });
    scratch.remove_task("changing");
    daemon.wait_for_log("task removed", LIMIT);
    let started_count = scratch.lines("started").len();
    wait_for("every started run to finish after removal", LIMIT, || {
        scratch.lines("finished").len() >= started_count
    });
}

#[test]
fn given_log_format_json_when_the_daemon_runs_then_every_log_line_is_a_json_object() {
    let scratch = Scratch::new();
    scratch.write_config("[log]\nformat = \"json\"\n");
    scratch.write_task(
        "hello",
        "schedule = \"* * * * * *\"\ncommand = ['echo', 'hello json']\n",
    );
    let daemon = scratch.start_daemon(&[]);
    daemon.wait_for_log("hello json", LIMIT);
    let log = daemon.log();
    for line in log.lines() {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(value.get("message").is_some(), "{line}");
    }
    let output: serde_json::Value = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["message"] == "hello json")
        .unwrap();
    assert_eq!(output["task"], "hello");
    assert_eq!(output["stream"], "stdout");
    assert!(output["fire_id"].as_str().unwrap().starts_with("hello@"));
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

/// Issue 9, item 4: a retry attempt started 0.8 s after SIGINT.
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

/// Issue 9, item 4: removing a task on reload cancels its pending retries.
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

/// Issue 9, item 5: a tick whose process cannot be prepared is claimed and recorded as a failed
/// run with the reason and its fix, once, and nothing is spawned.
#[test]
fn given_a_missing_program_when_its_ticks_come_then_each_fails_once_with_the_fix_in_the_log() {
    let scratch = Scratch::new();
    scratch.write_task(
        "missing",
        "schedule = \"* * * * * *\"\ncommand = ['zkcron-no-such-program', '--flag']\n",
    );
    let daemon = scratch.start_daemon(&[]);
    daemon.wait_for_log_count("not found in PATH", 2, LIMIT);

    let log = daemon.log();
    let failures: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("not found in PATH"))
        .collect();
    for line in &failures {
        assert!(line.contains("finished"), "{line}");
        assert!(
            line.contains("install it, or give its full path in `command`"),
            "{line}"
        );
    }
    let fire_ids: Vec<&str> = failures
        .iter()
        .map(|l| {
            let at = l.find("missing@").expect("names the fire id");
            l[at..].split([' ', '"']).next().unwrap()
        })
        .collect();
    let distinct: BTreeSet<&&str> = fire_ids.iter().collect();
    assert_eq!(
        distinct.len(),
        fire_ids.len(),
        "logged twice: {failures:#?}"
    );
    assert!(
        !log.contains("zkcron::executor: started"),
        "nothing was spawned: {log}"
    );
}

/// Issue 9, item 15: a job printing 2,000 lines per run flooded the log; then (review) the cap
/// kept only the head, and the job's last line was never logged.
#[test]
fn given_job_output_lines_when_a_job_prints_more_then_the_rest_is_counted_in_one_line() {
    let scratch = Scratch::new();
    scratch.write_config("[log]\njob_output_lines = 3\n");
    scratch.write_task(
        "chatty",
        "schedule = \"* * * * * *\"\ncommand = 'seq 1 2000; echo done >&2'\n",
    );
    let daemon = scratch.start_daemon(&[]);
    daemon.wait_for_log("output not logged past [log] job_output_lines", LIMIT);
    let summary = daemon
        .log()
        .lines()
        .find(|l| l.contains("output not logged past"))
        .unwrap()
        .to_owned();
    let fire_id = summary
        .split_whitespace()
        .find_map(|f| f.strip_prefix("fire_id="))
        .unwrap()
        .to_owned();
    // The tail follows the summary; "finished" follows the tail.
    wait_for("the attempt to finish", LIMIT, || {
        daemon
            .log()
            .lines()
            .any(|l| l.contains(&fire_id) && l.contains("finished"))
    });
    drop(daemon);

    let log = std::fs::read_to_string(scratch.path().join("log.txt")).unwrap();
    assert!(summary.contains("lines_left_out=1998"), "{summary}");
    assert!(summary.contains("tail_lines=2"), "{summary}");
    let output: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(&fire_id) && l.contains("stream="))
        .collect();
    assert_eq!(output.len(), 3, "{output:#?}");
    // The first line read, then the last lines, the last of each stream among them. Which pipe
    // is read first is up to the reader when the job has already written both (a fast job
    // spawned before its reader is first polled): stdout's `1`, or stderr's `done`, whose
    // stream then has nothing left for the tail.
    let has = |line: &str, text: &str| line.contains(&format!("zkcron::job: {text} "));
    if has(output[0], "done") {
        assert!(
            has(output[1], "1999") && has(output[2], "2000"),
            "{output:#?}"
        );
    } else {
        assert!(has(output[0], "1"), "{output:#?}");
        assert!(output[1..].iter().any(|l| has(l, "2000")), "{output:#?}");
        assert!(output[1..].iter().any(|l| has(l, "done")), "{output:#?}");
    }
}

/// The text log quoted `task` in some lines (`task="a"`) and not in others (`task=a`), spelled
/// the result as a sentence (`exit=exit code 0`), durations as noisy floats, and counted
/// errors as `invalid` files.
#[test]
fn text_log_spells_each_field_one_way() {
    let scratch = Scratch::new();
    scratch.write_task("ok", "schedule = \"* * * * * *\"\ncommand = [\"true\"]\n");
    scratch.write_task(
        "bad",
        "schedule = \"* * *\"\ncommand = [\"true\"]\ncomand = 1\n",
    );
    let daemon = scratch.start_daemon(&[]);
    daemon.wait_for_log("finished", LIMIT);
    let log = daemon.log();
    assert!(!log.contains("task=\""), "a quoted task field:\n{log}");
    assert!(
        !log.contains("fire_id=\""),
        "a quoted fire_id field:\n{log}"
    );
    assert!(log.contains("invalid_files=1 errors=2"), "{log}");
    let finished = log.lines().find(|l| l.contains(" finished ")).unwrap();
    assert!(finished.contains("task=ok"), "{finished}");
    assert!(finished.contains("status=exited exit_code=0"), "{finished}");
    let duration = finished
        .split_whitespace()
        .find_map(|w| w.strip_prefix("duration_ms="))
        .expect("duration_ms");
    assert!(duration.parse::<u64>().is_ok(), "{finished}");
}

#[test]
fn json_log_has_integer_exit_code_duration_and_lateness() {
    let scratch = Scratch::new();
    scratch.write_config("[log]\nformat = \"json\"\n");
    scratch.write_task("ok", "schedule = \"* * * * * *\"\ncommand = [\"true\"]\n");
    let daemon = scratch.start_daemon(&[]);
    daemon.wait_for_log("\"finished\"", LIMIT);
    let events: Vec<serde_json::Value> = daemon
        .log()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let started = events.iter().find(|e| e["message"] == "started").unwrap();
    assert!(started["lateness_us"].is_i64(), "{started}");
    assert!(started["claim_to_spawn_us"].is_u64(), "{started}");
    assert_eq!(started["task"], "ok");
    let finished = events.iter().find(|e| e["message"] == "finished").unwrap();
    assert_eq!(finished["exit_code"], 0, "{finished}");
    assert_eq!(finished["status"], "exited", "{finished}");
    assert!(finished["duration_ms"].is_u64(), "{finished}");
    assert!(finished.get("exit").is_none(), "{finished}");
}

/// A `ZKCRON_LOG` that does not parse used to fall back to `info` without a word.
#[test]
fn an_invalid_zkcron_log_filter_is_reported_not_ignored() {
    let scratch = Scratch::new();
    let mut command = scratch.daemon_command();
    command
        .arg("--state-dir")
        .arg(scratch.path().join("state"))
        .env("ZKCRON_LOG", "zkcron=loud");
    let daemon = scratch.spawn_daemon(command);
    daemon.wait_for_log("zkcron started", LIMIT);
    assert!(
        daemon
            .log()
            .contains("ZKCRON_LOG=\"zkcron=loud\" is not a log filter"),
        "{}",
        daemon.log()
    );
}

/// A forgotten `--zookeeper` made two nodes run the same tick: a local node whose config names
/// no ZooKeeper says at start-up, at warn, that it fires every task on its own and how to join
/// a cluster.
#[test]
fn a_local_node_whose_config_names_no_zookeeper_warns_that_it_fires_every_task_alone() {
    let scratch = Scratch::new();
    let config = scratch.write_config("");
    let mut daemon = scratch.start_daemon(&[]);
    let log = daemon.log();
    let line = log
        .lines()
        .find(|l| l.contains("fires every task on its own"))
        .unwrap_or_else(|| panic!("no warning in: {log}"));
    assert!(line.contains("WARN"), "{line}");
    for needle in [
        "this node fires every task on its own: the local backend coordinates with no other node",
        &format!("the config {} names no ZooKeeper", config.display()),
        "a second node started like this runs the same ticks again",
        "To join a cluster, pass --zookeeper HOST:PORT[,HOST:PORT...] or set [coordination] \
         backend = \"zookeeper\" and [coordination.zookeeper] connect = \"HOST:PORT\"",
    ] {
        assert!(line.contains(needle), "{needle:?} not in {line}");
    }
    daemon.signal(Signal::SIGTERM);
    assert_eq!(daemon.wait_exit(LIMIT), Some(0));
}

/// `backend = "local"` in a config that also names a ZooKeeper is a choice, not an accident:
/// no warning.
#[test]
fn a_local_node_whose_config_names_a_zookeeper_does_not_warn() {
    let scratch = Scratch::new();
    scratch.write_config(
        "[coordination]\nbackend = \"local\"\n[coordination.zookeeper]\nconnect = \"127.0.0.1:2181\"\n",
    );
    let mut daemon = scratch.start_daemon(&[]);
    assert!(
        !daemon.log().contains("fires every task on its own"),
        "{}",
        daemon.log()
    );
    daemon.signal(Signal::SIGTERM);
    assert_eq!(daemon.wait_exit(LIMIT), Some(0));
}
