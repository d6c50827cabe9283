//! Pauses with a reason, end to end: `pause_on_failure = true` pausing a task cluster-wide
//! after a failed run (real `zkcron run` nodes on a real ZooKeeper, and the local backend's
//! daemon), and `zkcron pause TASK --reason TEXT`; `status`, `explain` and `--json` show who,
//! when and why, and `resume` clears it.

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use crate::common::cluster::Cluster;
use crate::common::zk::{ClusterNode, TestServer};
use serde_json::Value;

const CLUSTER: &str = "test";

/// A generous deadline for things that take a moment (start-up, lease moves).
const LIMIT: Duration = Duration::from_secs(30);

/// A task firing every second that records its fire id and node, then exits `code`.
fn ticking(fires: &Path, code: u8, extra: &str) -> String {
    format!(
        "schedule = \"* * * * * *\"\n\
         command = [\"/bin/sh\", \"-c\", 'echo \"$ZKCRON_FIRE_ID $ZKCRON_NODE\" >> {fires}; exit {code}']\n\
         {extra}\n",
        fires = fires.display()
    )
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn task<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no task {name} in {status:#}"))
}

/// Task `name`'s `key` in `status`, `Null` while the status does not list the task (a daemon
/// just started answers before it has loaded its tasks): what a wait's condition reads.
fn field(status: &Value, name: &str, key: &str) -> Value {
    let tasks = status["tasks"].as_array().into_iter().flatten();
    let found = tasks.into_iter().find(|t| t["name"] == name);
    found.map_or(Value::Null, |t| t[key].clone())
}

/// Runs `cli` (a `zkcron` command line against the scheduler) until `status --json` satisfies
/// `condition`; panics after `LIMIT` with the last status.
#[allow(clippy::disallowed_methods)] // real processes, real deadline
fn wait_status(
    what: &str,
    cli: impl Fn(&[&str]) -> Output,
    mut condition: impl FnMut(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + LIMIT;
    loop {
        // A daemon just started may not serve its socket yet: asked again.
        let out = cli(&["status", "--json"]);
        let status: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if out.status.success() && condition(&status) {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for: {what}\nlast status: {status:#}\n{}",
            stderr(&out)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The fire id a `pause_on_failure` reason names: `pause_on_failure: run <id> failed (...)`.
fn failed_run(reason: &str) -> &str {
    reason
        .strip_prefix("pause_on_failure: run ")
        .and_then(|rest| rest.split_once(' '))
        .map(|(id, _)| id)
        .unwrap_or_else(|| panic!("not a pause_on_failure reason: {reason}"))
}

#[test]
fn pause_on_failure_pauses_the_task_cluster_wide_naming_the_run_and_status_shows_why() {
    // Given two nodes and a task that fails every time, with pause_on_failure.
    let mut cluster = Cluster::on(TestServer::shared(), CLUSTER);
    let fires = cluster.fires_path();
    cluster.write_task("flaky", &ticking(&fires, 3, "pause_on_failure = true"));
    cluster.write_task("steady", &ticking(&fires, 0, ""));
    for id in ["a", "b"] {
        let node = ClusterNode {
            release: Some("1.0.0".into()),
            ..cluster.new_node(id)
        };
        cluster.start(node);
    }
    let cli = |args: &[&str]| cluster.zkcron(args);

    // When its first run fails, then the task is paused, by the node that ran it, naming the
    // run and its exit code.
    let status = wait_status("flaky paused", cli, |s| field(s, "flaky", "paused") == true);
    let pause = &task(&status, "flaky")["pause"];
    let reason = pause["reason"].as_str().unwrap();
    assert!(reason.ends_with(" failed (exit code 3)"), "{reason}");
    let fire_id = failed_run(reason);
    let ran = cluster.fires();
    let run = ran
        .0
        .iter()
        .find(|fire| fire.id() == fire_id)
        .unwrap_or_else(|| panic!("{fire_id} is not among the runs: {:?}", ran.0));
    assert_eq!(pause["by"], format!("zkcron@{}", run.node));
    assert_eq!(
        task(&status, "flaky")["problem"],
        format!("paused: {reason}")
    );
    // It fires no more: at most a tick claimed before the pause was seen (200 ms ahead).
    let leader = &run.node;
    cluster.nodes[leader.as_str()].wait_for_log("task flaky is paused", LIMIT);
    let seen_at = zkcron::clock::Clock::system().now().timestamp();
    crate::common::wait_for("three quiet seconds", LIMIT, || {
        zkcron::clock::Clock::system().now().timestamp() >= seen_at + 4
    });
    let late: Vec<String> = cluster
        .fires()
        .0
        .iter()
        .filter(|fire| fire.task == "flaky" && fire.second > seen_at + 1)
        .map(|fire| fire.id())
        .collect();
    assert!(late.is_empty(), "a paused task fired: {late:?}");
    let explained = stdout(&cli(&["explain", "flaky"]));
    assert!(
        explained.contains(&format!("  reason:   {reason}\n")),
        "{explained}"
    );

    // An operator's pause with a reason shows it too, with who paused.
    let out = cli(&["pause", "steady", "--reason", "db migration until 10:00"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let status = wait_status("steady paused", cli, |s| {
        field(s, "steady", "paused") == true
    });
    let pause = &task(&status, "steady")["pause"];
    assert_eq!(pause["reason"], "db migration until 10:00");
    assert!(pause["by"].as_str().unwrap().contains('@'), "{pause}");
    assert!(pause["at"].is_string(), "{pause}");
    let human = stdout(&cli(&["status"]));
    assert!(
        human.contains("paused: db migration until 10:00"),
        "{human}"
    );
    let again = stdout(&cli(&["pause", "steady"]));
    assert!(
        again.starts_with("zkcron: task steady is already paused since ")
            && again.ends_with(": db migration until 10:00\n"),
        "{again}"
    );

    // Resume clears the mark and its reason.
    for name in ["flaky", "steady"] {
        let out = cli(&["resume", name]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let status = wait_status("both resumed", cli, |s| {
        field(s, "flaky", "paused") == false && field(s, "steady", "paused") == false
    });
    assert!(task(&status, "steady").get("pause").is_none(), "{status:#}");
    assert!(cluster.fires().duplicates().is_empty());
}

#[test]
fn a_pause_reason_that_is_empty_or_too_long_is_refused_saying_how_to_fix_it() {
    let empty = crate::common::run_zkcron(&["pause", "t", "--reason", "  "]);
    assert_eq!(empty.status.code(), Some(2));
    assert!(
        stderr(&empty)
            .contains("the reason is empty: say why the task is paused, or leave out the reason"),
        "{}",
        stderr(&empty)
    );
    let long = "x".repeat(501);
    let out = crate::common::run_zkcron(&["pause", "t", "--reason", &long]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("the reason is 501 bytes long; at most 500 are kept: shorten it"),
        "{}",
        stderr(&out)
    );
    let out = crate::common::run_zkcron(&["pause", "t", "--reason", "one\ntwo"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("the reason spans several lines: write it on one line"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_local_backend_pauses_on_failure_and_keeps_a_pause_reason_across_a_restart() {
    // Given the local backend's daemon and a task that fails, with pause_on_failure.
    let scratch = crate::common::Scratch::new();
    let fires = scratch.out("fires.log");
    scratch.write_task("flaky", &ticking(&fires, 5, "pause_on_failure = true"));
    scratch.write_task("steady", "schedule = \"0 0 1 1 *\"\ncommand = \"true\"\n");
    let mut daemon = scratch.start_daemon(&[]);
    let cli = |args: &[&str]| scratch.cli(args);

    // When it fails, then it is paused naming the run and its exit code.
    let status = wait_status("flaky paused", cli, |s| field(s, "flaky", "paused") == true);
    let pause = &task(&status, "flaky")["pause"];
    let reason = pause["reason"].as_str().unwrap();
    assert!(reason.ends_with(" failed (exit code 5)"), "{reason}");
    let fire_id = failed_run(reason).to_string();
    assert_eq!(pause["by"], "zkcron@test-node");
    daemon.wait_for_log("task paused: its run failed (pause_on_failure)", LIMIT);
    let ran = std::fs::read_to_string(&fires).unwrap();
    assert!(
        ran.lines()
            .any(|line| line.starts_with(&format!("{fire_id} "))),
        "{fire_id} not in {ran}"
    );

    // An operator's reason is kept, also across a restart of the daemon.
    let out = cli(&["pause", "steady", "--reason", "waiting for the vendor"]);
    assert!(out.status.success(), "{}", stderr(&out));
    daemon.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(daemon.wait_exit(LIMIT), Some(0), "{}", daemon.log());
    let count = std::fs::read_to_string(&fires).unwrap().lines().count();
    let restarted = scratch.start_daemon(&[]);
    let status = wait_status("the daemon back", cli, |s| {
        field(s, "steady", "paused") == true
    });
    assert_eq!(
        task(&status, "steady")["pause"]["reason"],
        "waiting for the vendor"
    );
    assert_eq!(task(&status, "flaky")["pause"]["reason"], reason);
    assert_eq!(
        task(&status, "steady")["problem"],
        "paused: waiting for the vendor"
    );
    // Still paused after the restart: the new daemon says so, and flaky does not run again
    // in the three seconds that follow.
    restarted.wait_for_log_count("task flaky is paused; nothing fires until", 2, LIMIT);
    let seen_at = zkcron::clock::Clock::system().now().timestamp();
    crate::common::wait_for("three seconds after the restart", LIMIT, || {
        zkcron::clock::Clock::system().now().timestamp() >= seen_at + 3
    });
    let after = std::fs::read_to_string(&fires).unwrap().lines().count();
    assert_eq!(after, count, "flaky ran while paused");

    let out = cli(&["resume", "steady"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let status = wait_status("steady resumed", cli, |s| {
        field(s, "steady", "paused") == false
    });
    assert!(task(&status, "steady").get("pause").is_none(), "{status:#}");
}

#[test]
fn a_failed_manual_run_of_a_task_already_paused_keeps_the_operators_pause_on_zookeeper() {
    // Given one node and a task with pause_on_failure that an operator paused with a reason
    // (its schedule never comes: only the manual run below runs).
    let mut cluster = Cluster::on(TestServer::shared(), CLUSTER);
    let fires = cluster.fires_path();
    let task_file = format!(
        "schedule = \"0 0 1 1 *\"\n\
         command = [\"/bin/sh\", \"-c\", 'echo \"$ZKCRON_FIRE_ID $ZKCRON_NODE\" >> {fires}; exit 3']\n\
         pause_on_failure = true\n",
        fires = fires.display()
    );
    cluster.write_task("flaky", &task_file);
    let node = ClusterNode {
        release: Some("1.0.0".into()),
        ..cluster.new_node("a")
    };
    cluster.start(node);
    let cli = |args: &[&str]| cluster.zkcron(args);
    wait_status("flaky led", cli, |s| {
        field(s, "flaky", "leader").is_string()
    });
    let out = cli(&["pause", "flaky", "--reason", "maintenance window"]);
    assert!(out.status.success(), "{}", stderr(&out));

    // When a manual run of it (which runs though the task is paused) fails: its end's write
    // finds the mark there and is sent again checking that the mark is still there, which
    // ZooKeeper's check at any version (-1) must accept.
    let out = cli(&["trigger", "flaky", "--wait"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("(exit code 3, 1 attempt(s))"),
        "{}",
        stdout(&out)
    );
    cluster.nodes["a"].wait_for_log("task already paused; its failed run changes nothing", LIMIT);

    // Then the run's end is stored and the operator's pause stays as it was.
    let history: Value =
        serde_json::from_slice(&cli(&["history", "flaky", "--json"]).stdout).expect("json");
    let runs = history.as_array().expect("an array of runs");
    assert!(
        runs.iter()
            .any(|run| run["exit_code"] == 3 && run["trigger"] == "manual"),
        "{history:#}"
    );
    let status = wait_status("flaky still paused", cli, |s| {
        field(s, "flaky", "paused") == true
    });
    assert_eq!(
        task(&status, "flaky")["pause"]["reason"],
        "maintenance window"
    );
}
