//! The embedded backend's state on bad days, end to end: a full state dir (a real, small tmpfs),
//! a fire record ahead of the clock and `zkcron reset`, and state files in a format this release
//! does not read.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use common::tmpfs::{Tmpfs, rerun_as_root};
use common::{DaemonProcess, Scratch, run_zkcron, wait_for};
use nix::sys::signal::Signal;
use zkcron::coord::local::LocalCoordinator;
use zkcron::coord::{ClaimIntent, ClaimOutcome, Coordinator};
use zkcron::task::{Identity, TaskSpec, parse_task};

const LIMIT: Duration = Duration::from_secs(30);

/// The current time, read the way the tests' observers see it.
#[allow(clippy::disallowed_methods)]
fn now() -> DateTime<Utc> {
    Utc::now()
}

fn spec(name: &str) -> TaskSpec {
    let defaults = common::task_defaults(Identity::current(), zkcron::task::TaskBackend::Local);
    let path = PathBuf::from(format!("{name}.toml"));
    parse_task(
        name,
        &path,
        "schedule = \"* * * * * *\"\ncommand = \"true\"\n",
        &defaults,
    )
    .unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// An every-second task that appends its fire id to `out/<name>`.
fn recording_task(scratch: &Scratch, name: &str, extra: &str) {
    scratch.write_task(
        name,
        &format!(
            "schedule = \"* * * * * *\"\ncommand = 'echo $ZKCRON_FIRE_ID >> {out}'\n{extra}\n",
            out = scratch.out(name).display()
        ),
    );
}

/// The Unix seconds of the fire ids in `out/<name>`.
fn fired(scratch: &Scratch, name: &str) -> Vec<i64> {
    scratch
        .lines(name)
        .iter()
        .map(|line| line.rsplit('@').next().unwrap().parse().unwrap())
        .collect()
}

fn assert_no_tick_ran_twice(scratch: &Scratch, name: &str) {
    let seconds = fired(scratch, name);
    let distinct: BTreeSet<i64> = seconds.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        seconds.len(),
        "a tick of {name} ran twice: {seconds:?}"
    );
}

/// Starts `zkcron run` on the scratch dir with its fire records in `state`, and waits until it
/// is the `nth` daemon to have started with this log.
fn start_daemon(scratch: &Scratch, state: &Path, nth: usize) -> DaemonProcess {
    let mut command = scratch.daemon_command();
    command
        .arg("--state-dir")
        .arg(state)
        .args(["--node-id", "test-node"]);
    let daemon = scratch.spawn_daemon(command);
    daemon.wait_for_log_count("zkcron started", nth, LIMIT);
    daemon
}

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn given_a_full_state_dir_when_an_append_is_cut_short_then_the_claim_fails_and_the_next_claim_survives_a_restart()
 {
    // Regression: a journal append cut short by a full disk stayed in the file, the next durable
    // claim was appended onto it, and replay after a restart dropped that claim.
    if rerun_as_root(
        "given_a_full_state_dir_when_an_append_is_cut_short_then_the_claim_fails_and_the_next_claim_survives_a_restart",
    ) {
        return;
    }
    let disk = Tmpfs::mount("64k");
    let state = disk.path().join("state");
    let journal = state.join("journal.jsonl");
    let others: Vec<String> = (0..8)
        .map(|i| format!("a-task-with-a-longer-name-{i}"))
        .collect();
    let start = DateTime::from_timestamp(1_767_225_600, 0).unwrap();
    let second = TimeDelta::seconds(1);
    let failed_tick = runtime().block_on(async {
        let local = LocalCoordinator::open(&state, zkcron::clock::Clock::system()).unwrap();
        let mut specs = vec![spec("a")];
        specs.extend(others.iter().map(|name| spec(name)));
        local.publish(&specs).await.unwrap();
        let mut tick = start;
        for _ in 0..3 {
            tick += second;
            let outcome = local.claim("a", tick, ClaimIntent::Run).await.unwrap();
            assert_eq!(outcome, ClaimOutcome::Claimed);
        }

        // With the filesystem full, claims go on into the journal's last page until one does
        // not fit: that append is cut short at the page's end.
        disk.fill();
        let (before, error) = loop {
            assert!(tick < start + TimeDelta::seconds(200), "no claim failed");
            let before = fs::read(&journal).unwrap();
            tick += second;
            match local.claim("a", tick, ClaimIntent::Run).await {
                Ok(ClaimOutcome::Claimed) => {}
                Ok(other) => panic!("{other:?}"),
                Err(error) => break (before, error.to_string()),
            }
        };
        let fix = format!(
            "state_dir {} is full: free space on {}",
            state.display(),
            disk.path().display()
        );
        assert!(error.contains(&fix), "{error}");
        assert_eq!(
            fs::read(&journal).unwrap(),
            before,
            "the failed append was cut back"
        );
        assert_eq!(
            local.last_claimed("a").await.unwrap(),
            Some(tick - second),
            "a failed claim is no claim"
        );

        // Claims committed together fail together, and leave the journal as it was.
        let claims = others
            .iter()
            .map(|name| local.claim(name, tick, ClaimIntent::Run));
        for outcome in futures::future::join_all(claims).await {
            let error = outcome.expect_err("a claim succeeded on a full disk");
            assert!(error.to_string().contains(&fix), "{error}");
        }
        assert_eq!(fs::read(&journal).unwrap(), before);

        // Space freed: the failed tick's claim is retried and now counts.
        disk.free();
        let outcome = local.claim("a", tick, ClaimIntent::Run).await.unwrap();
        assert_eq!(outcome, ClaimOutcome::Claimed);
        tick
    });

    // A restart reads the claim made after the failure (it was not glued onto a torn line).
    runtime().block_on(async {
        let local = LocalCoordinator::open(&state, zkcron::clock::Clock::system()).unwrap();
        assert_eq!(local.last_claimed("a").await.unwrap(), Some(failed_tick));
        for name in &others {
            assert_eq!(local.last_claimed(name).await.unwrap(), None, "{name}");
        }
    });
}

#[test]
fn given_a_full_state_dir_when_the_daemon_claims_then_claims_fail_loudly_and_after_kill_9_and_a_restart_no_tick_ran_twice()
 {
    if rerun_as_root(
        "given_a_full_state_dir_when_the_daemon_claims_then_claims_fail_loudly_and_after_kill_9_and_a_restart_no_tick_ran_twice",
    ) {
        return;
    }
    let scratch = Scratch::new();
    let disk = Tmpfs::mount("64k");
    let state = disk.path().join("state");
    let tasks = ["t0", "t1", "t2", "t3"];
    for name in tasks {
        // `all` would run again every tick whose claim a restart lost. The working dir is `/`
        // because under `rerun_as_root`'s user namespace root's home cannot be entered.
        recording_task(&scratch, name, "catch_up = \"all\"\nworking_dir = \"/\"");
    }
    let total = || tasks.iter().map(|t| scratch.lines(t).len()).sum::<usize>();
    let mut daemon = start_daemon(&scratch, &state, 1);
    wait_for("every task to fire", LIMIT, || {
        tasks.iter().all(|t| !scratch.lines(t).is_empty())
    });

    disk.fill();
    let fix = format!(
        "state_dir {} is full: free space on {}",
        state.display(),
        disk.path().display()
    );
    daemon.wait_for_log_count(&fix, 5, LIMIT);
    // Results may be what fails first: a batch of a burst's results needs more room than its
    // claims do, and the claims may still fit in the journal's last page. Wait for a claim.
    wait_for("a claim to fail on the full disk", LIMIT, || {
        daemon
            .log()
            .lines()
            .any(|l| l.contains("claim failed") && l.contains(&fix))
    });
    let while_full = total();
    disk.free();
    wait_for("a run after space was freed", LIMIT, || {
        total() > while_full
    });
    daemon.signal(Signal::SIGKILL);
    daemon.wait_exit(LIMIT);
    let killed_at = now().timestamp();

    let mut daemon = start_daemon(&scratch, &state, 2);
    wait_for("every task to fire after the restart", LIMIT, || {
        tasks
            .iter()
            .all(|t| fired(&scratch, t).iter().any(|s| *s > killed_at))
    });
    daemon.signal(Signal::SIGTERM);
    assert_eq!(daemon.wait_exit(LIMIT), Some(0));
    for name in tasks {
        assert_no_tick_ran_twice(&scratch, name);
    }
    let log = daemon.log();
    assert!(
        log.lines()
            .any(|l| l.contains("claim failed") && l.contains(&fix)),
        "{log}"
    );
}

/// Writes a fire record of `task` at `tick` into `state` through the real backend.
fn write_fire_record(state: &Path, task: &str, tick: DateTime<Utc>) {
    runtime().block_on(async {
        let local = LocalCoordinator::open(state, zkcron::clock::Clock::system()).unwrap();
        local.publish(&[spec(task)]).await.unwrap();
        let outcome = local.claim(task, tick, ClaimIntent::Run).await.unwrap();
        assert_eq!(outcome, ClaimOutcome::Claimed);
    });
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

#[test]
fn given_a_fire_record_a_year_ahead_when_the_daemon_runs_then_it_says_so_and_reset_lets_the_task_fire_again()
 {
    // Regression: after the clock ran a year ahead for two seconds, the task never fired again
    // and nothing was logged.
    let scratch = Scratch::new();
    recording_task(&scratch, "held", "");
    recording_task(&scratch, "control", "");
    let state = scratch.path().join("state");
    let record = DateTime::from_timestamp(now().timestamp(), 0).unwrap() + TimeDelta::days(366);
    write_fire_record(&state, "held", record);

    let mut daemon = start_daemon(&scratch, &state, 1);
    let report = format!("task held is held by its fire record {}", rfc3339(record));
    daemon.wait_for_log(&report, LIMIT);
    let log = daemon.log();
    let line = log.lines().find(|l| l.contains(&report)).unwrap();
    assert!(line.contains("ERROR"), "{line}");
    assert!(line.contains("ahead of the clock"), "{line}");
    let flags = format!(
        "--jobs-dir {} --state-dir {}",
        scratch.jobs().display(),
        state.display()
    );
    assert!(
        line.contains(&format!(
            "stop zkcron, run `zkcron reset held --config {} {flags}`",
            scratch.path().join("zkcron.toml").display()
        )),
        "{line}"
    );
    // The other task fires; the held one does not, and is reported once.
    wait_for("control ticks", LIMIT, || {
        scratch.lines("control").len() >= 3
    });
    assert!(scratch.lines("held").is_empty());
    assert_eq!(daemon.log().matches(&report).count(), 1);

    // `zkcron next` shows why the task does not fire.
    let jobs = scratch.jobs();
    let next = run_zkcron(&[
        "next",
        "--jobs-dir",
        jobs.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    assert_eq!(next.status.code(), Some(0), "{}", stderr(&next));
    let text = stdout(&next);
    let row = text.lines().find(|l| l.starts_with("held ")).expect(&text);
    let next_tick = record + TimeDelta::seconds(1);
    assert!(row.contains(&next_tick.to_rfc3339()), "{text}");
    assert!(text.contains(&format!("held: {report}")), "{text}");
    assert!(
        text.contains(&format!("run `zkcron reset held {flags}`")),
        "{text}"
    );

    // The reset needs the daemon stopped.
    let reset = || {
        run_zkcron(&[
            "reset",
            "held",
            "--jobs-dir",
            jobs.to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
        ])
    };
    let refused = reset();
    assert_eq!(refused.status.code(), Some(1));
    let message = stderr(&refused);
    assert!(
        message.contains(&format!(
            "state dir {} is in use by another zkcron (pid {})",
            state.display(),
            daemon.child.id()
        )),
        "{message}"
    );
    assert!(message.contains("stop it first"), "{message}");
    daemon.signal(Signal::SIGTERM);
    assert_eq!(daemon.wait_exit(LIMIT), Some(0));

    let reset_at = now().timestamp();
    let done = reset();
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    assert!(
        stdout(&done).contains(&format!(
            "task held: fire record moved back from {} to ",
            rfc3339(record)
        )),
        "{}",
        stdout(&done)
    );

    // It fires again, from after the reset: no tick at or before it runs.
    let daemon = start_daemon(&scratch, &state, 2);
    wait_for("the reset task to fire", LIMIT, || {
        scratch.lines("held").len() >= 2
    });
    drop(daemon);
    let seconds = fired(&scratch, "held");
    assert!(seconds.iter().all(|s| *s > reset_at), "{seconds:?}");
    assert_no_tick_ran_twice(&scratch, "held");
    assert_eq!(
        fs::read_to_string(scratch.path().join("log.txt"))
            .unwrap()
            .matches(&report)
            .count(),
        1
    );
}

/// `zkcron reset ARGS... --jobs-dir <scratch> --state-dir <scratch>/state`.
fn reset_in(scratch: &Scratch, args: &[&str]) -> std::process::Output {
    let jobs = scratch.jobs();
    let state = scratch.path().join("state");
    let mut all = vec!["reset"];
    all.extend_from_slice(args);
    all.extend([
        "--jobs-dir",
        jobs.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    run_zkcron(&all)
}

fn assert_fails_with(output: &std::process::Output, needles: &[&str]) {
    assert_eq!(output.status.code(), Some(1), "{}", stdout(output));
    let message = stderr(output);
    for needle in needles {
        assert!(message.contains(needle), "{needle:?} not in: {message}");
    }
}

#[test]
fn reset_of_an_unknown_task_names_where_it_looked_and_suggests_a_name() {
    let scratch = Scratch::new();
    recording_task(&scratch, "nightly-backup", "");
    let output = reset_in(&scratch, &["nightly-bakup"]);
    assert_fails_with(
        &output,
        &[
            &format!(
                "unknown task nightly-bakup: no task file nightly-bakup.toml in {} and no fire \
                 record in {}",
                scratch.jobs().display(),
                scratch.path().join("state").display()
            ),
            "did you mean nightly-backup?",
        ],
    );
}

#[test]
fn reset_of_a_task_that_never_fired_says_nothing_holds_it() {
    let scratch = Scratch::new();
    recording_task(&scratch, "fresh", "");
    let output = reset_in(&scratch, &["fresh"]);
    assert_fails_with(
        &output,
        &["task fresh has no fire record in", "so nothing holds it"],
    );
}

#[test]
fn reset_of_a_record_that_is_not_ahead_refuses_to_move_it_back() {
    let scratch = Scratch::new();
    recording_task(&scratch, "past", "");
    let record = DateTime::from_timestamp(now().timestamp() - 60, 0).unwrap();
    write_fire_record(&scratch.path().join("state"), "past", record);
    let output = reset_in(&scratch, &["past"]);
    assert_fails_with(
        &output,
        &[
            &format!(
                "the fire record of task past ({}) is not ahead of the clock",
                rfc3339(record)
            ),
            "moving a past one back would run its ticks again",
        ],
    );
}

#[test]
fn reset_to_an_earlier_instant_moves_the_record_there_for_catch_up() {
    let scratch = Scratch::new();
    recording_task(&scratch, "ahead", "");
    let state = scratch.path().join("state");
    let record = DateTime::from_timestamp(now().timestamp(), 0).unwrap() + TimeDelta::days(30);
    write_fire_record(&state, "ahead", record);
    let to = DateTime::from_timestamp(now().timestamp() - 3600, 0).unwrap();
    let output = reset_in(&scratch, &["ahead", "--to", &rfc3339(to)]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        format!(
            "zkcron: task ahead: fire record moved back from {record} to {to}.\nStart zkcron to \
             fire it: ticks after {to} run when they come due (those already due per its \
             catch_up), those up to {record} included.\n",
            record = rfc3339(record),
            to = rfc3339(to)
        )
    );
    let records = zkcron::coord::local::read_fire_records(&state).unwrap();
    assert_eq!(records["ahead"], to);
}

/// Regression: `zkcron reset` wrote the clock's nanoseconds into the record
/// ("…16.067193154Z"); ticks, and so fire records, are whole seconds.
#[test]
fn reset_moves_the_record_to_a_whole_second() {
    let scratch = Scratch::new();
    recording_task(&scratch, "ahead", "");
    let state = scratch.path().join("state");
    let record = DateTime::from_timestamp(now().timestamp(), 0).unwrap() + TimeDelta::days(30);
    for to in [None, Some(now() - TimeDelta::seconds(90))] {
        write_fire_record(&state, "ahead", record);
        let before = now().timestamp();
        let mut args = vec!["ahead".to_string()];
        if let Some(to) = to {
            args.extend(["--to".into(), to.to_rfc3339()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = reset_in(&scratch, &args);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let stored = zkcron::coord::local::read_fire_records(&state).unwrap()["ahead"];
        assert_eq!(stored.timestamp_subsec_nanos(), 0, "{stored:?}");
        match to {
            Some(to) => assert_eq!(stored.timestamp(), to.timestamp()),
            None => assert!((before..=now().timestamp()).contains(&stored.timestamp())),
        }
        let text = stdout(&output);
        assert!(
            text.starts_with(&format!(
                "zkcron: task ahead: fire record moved back from {} to {}.\n",
                rfc3339(record),
                rfc3339(stored)
            )),
            "{text}"
        );
    }
}

#[test]
fn reset_to_an_instant_in_the_future_is_refused() {
    let scratch = Scratch::new();
    let output = reset_in(&scratch, &["x", "--to", "2999-01-01T00:00:00Z"]);
    assert_fails_with(
        &output,
        &["--to 2999-01-01T00:00:00Z is in the future: the record would hold the task again"],
    );
}

/// The state dir's run-time errors carry their fix: `zkcron reset` (which opens the state dir
/// as the daemon does) as a user who cannot write it said only "cannot open lock file …:
/// Permission denied (os error 13)".
#[test]
fn reset_of_a_state_dir_its_user_cannot_write_names_the_user_and_the_fix() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let scratch = Scratch::new();
    fs::set_permissions(scratch.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let state = scratch.path().join("state");
    fs::set_permissions(&state, fs::Permissions::from_mode(0o555)).unwrap();
    let mut command = common::zkcron();
    command.args(["reset", "x", "--state-dir", state.to_str().unwrap()]);
    let who = if nix::unistd::geteuid().is_root() {
        // Root writes anything: run as nobody.
        command.uid(65534).gid(65534);
        "nobody".to_string()
    } else {
        Identity::current().user_name
    };
    let output = command.stdin(std::process::Stdio::null()).output().unwrap();
    assert_fails_with(
        &output,
        &[&format!(
            "cannot open lock file {dir}/zkcron.lock: Permission denied (os error 13); zkcron runs \
             as {who:?}: run `chown {who} {dir}`, or point --state-dir or [scheduler].state_dir \
             elsewhere",
            dir = state.display()
        )],
    );
}

#[test]
fn reset_of_a_missing_state_dir_says_which() {
    let scratch = Scratch::new();
    let missing = scratch.path().join("nope");
    let output = run_zkcron(&["reset", "x", "--state-dir", missing.to_str().unwrap()]);
    assert_fails_with(
        &output,
        &[&format!(
            "the state dir {} does not exist, so it holds no fire records",
            missing.display()
        )],
    );
    assert!(!missing.exists(), "reset created the state dir");
}

#[test]
fn reset_with_the_zookeeper_backend_is_not_supported_yet() {
    let scratch = Scratch::new();
    let config = scratch.write_config(
        "[coordination]\nbackend = \"zookeeper\"\n[coordination.zookeeper]\nconnect = \"127.0.0.1:2181\"\n",
    );
    let output = run_zkcron(&["reset", "x", "--config", config.to_str().unwrap()]);
    assert_fails_with(
        &output,
        &[
            &format!("{} selects the zookeeper backend", config.display()),
            "moving a fire record back in a ZooKeeper cluster is not supported yet",
        ],
    );
}

#[test]
fn given_state_in_a_newer_format_when_the_daemon_starts_then_it_exits_1_naming_the_file_and_fires_nothing()
 {
    // Regression: a snapshot or journal of a future format was read as format 1 without a word.
    for (file, text) in [
        (
            "snapshot.json",
            r#"{"format":2,"tasks":{"t":{"last_claimed":"2026-01-01T00:00:00Z"}}}"#,
        ),
        (
            "journal.jsonl",
            "{\"format\":2,\"task\":\"t\",\"claimed\":\"2026-01-01T00:00:00Z\"}\n",
        ),
    ] {
        let scratch = Scratch::new();
        recording_task(&scratch, "t", "");
        let state = scratch.path().join("state");
        let path = state.join(file);
        fs::write(&path, text).unwrap();
        let expected = [
            format!("{} is in state format 2", path.display()),
            "reads only format 1: it was written by a newer zkcron".to_string(),
            "Upgrade zkcron to the release that wrote it, or move".to_string(),
        ];

        let mut daemon = scratch.spawn_daemon({
            let mut command = scratch.daemon_command();
            command.arg("--state-dir").arg(&state);
            command
        });
        assert_eq!(daemon.wait_exit(LIMIT), Some(1), "{file}");
        let log = daemon.log();
        for needle in &expected {
            assert!(
                log.contains(needle.as_str()),
                "{file}: {needle:?} not in {log}"
            );
        }
        assert!(!log.contains("zkcron started"), "{log}");
        assert!(scratch.lines("t").is_empty(), "{file}: a tick fired");
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            text,
            "{file} was changed"
        );

        // `zkcron next` says so too, and fails.
        let next = run_zkcron(&[
            "next",
            "--jobs-dir",
            scratch.jobs().to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
        ]);
        assert_eq!(next.status.code(), Some(1), "{file}");
        assert!(stderr(&next).contains(&expected[0]), "{}", stderr(&next));
    }
}
