//! Loading and reloading the jobs dir: edits, odd entries, trust, links, a bad file.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::time::Duration;

use crate::common::{self, Scratch, wait_for};
use crate::{LIMIT, recording_task};
use nix::sys::signal::Signal;

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
