//! Limited runs (`max_runs`) and one-shots (`@at`) from the outside, on the embedded backend
//! and on two nodes of a real ZooKeeper: the jobs' own output counts the runs, across a
//! restart of the daemon and the loss of the leader; `status` says the task is done, and why;
//! a one-shot whose instant passed before any node loaded it follows `catch_up`.
// Real daemons and processes against the real clock.
#![allow(clippy::disallowed_methods)]

mod common;

use std::time::Duration;

use chrono::{SubsecRound, TimeDelta, Utc};
use common::cluster::Cluster;
use common::{Scratch, wait_for};
use nix::sys::signal::Signal;
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(30);

/// A task file: `schedule` (as TOML), then `extra` keys, appending its fire id (and node) to
/// `out`.
fn task(schedule: &str, out: &std::path::Path, extra: &str) -> String {
    format!(
        "schedule = \"{schedule}\"\n{extra}command = [\"sh\", \"-c\", \"echo $ZKCRON_FIRE_ID $ZKCRON_NODE >> {}\"]\n",
        out.display()
    )
}

/// `@at` the instant `seconds` from now (whole seconds).
fn at_in(seconds: i64) -> String {
    let instant = Utc::now().trunc_subsecs(0) + TimeDelta::seconds(seconds);
    format!("@at {}", instant.to_rfc3339())
}

/// The status line of `task` in `status --json`.
fn status_of(status: &Value, task: &str) -> Value {
    status["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == task)
        .unwrap_or_else(|| panic!("no {task} in {status}"))
        .clone()
}

#[test]
fn the_embedded_backend_runs_max_runs_ticks_and_a_one_shot_once_across_a_restart() {
    let scratch = Scratch::new();
    scratch.write_task(
        "limited",
        &task("* * * * * *", &scratch.out("limited"), "max_runs = 3\n"),
    );
    scratch.write_task("once", &task(&at_in(3), &scratch.out("once"), ""));
    // Passed before any node loaded it: "once" runs it late, "skip" leaves it.
    scratch.write_task(
        "missed-run",
        &task(&at_in(-30), &scratch.out("missed-run"), ""),
    );
    scratch.write_task(
        "missed-skip",
        &task(
            &at_in(-30),
            &scratch.out("missed-skip"),
            "catch_up = \"skip\"\n",
        ),
    );
    scratch.write_task("marker", &task("* * * * * *", &scratch.out("marker"), ""));
    let mut daemon = scratch.start_daemon(&[]);
    wait_for(
        "3 limited runs, the one-shot and the late one",
        LIMIT,
        || {
            scratch.lines("limited").len() >= 3
                && scratch.lines("once").len() == 1
                && scratch.lines("missed-run").len() == 1
        },
    );
    // Three more seconds of the marker: every tick before was fired by then.
    let seen = scratch.lines("marker").len();
    wait_for("3 more marker ticks", LIMIT, || {
        scratch.lines("marker").len() >= seen + 3
    });
    assert_eq!(scratch.lines("limited").len(), 3);
    assert_eq!(scratch.lines("missed-skip").len(), 0);
    let status: Value = serde_json::from_slice(&scratch.cli(&["status", "--json"]).stdout).unwrap();
    assert_eq!(
        status_of(&status, "limited")["done"],
        "done after 3 runs (max_runs)"
    );
    let once = status_of(&status, "once");
    assert!(
        once["done"].as_str().unwrap().ends_with("ran (@at)"),
        "{once}"
    );
    assert!(once["next"].is_null(), "{once}");
    let skipped = status_of(&status, "missed-skip");
    assert!(
        skipped["done"]
            .as_str()
            .unwrap()
            .ends_with("was not run (@at; `history --ticks` says why)"),
        "{skipped}"
    );
    let text = String::from_utf8_lossy(&scratch.cli(&["status"]).stdout).into_owned();
    assert!(text.contains("done after 3 runs (max_runs)"), "{text}");
    assert!(
        daemon
            .log()
            .contains("the task ran its max_runs scheduled ticks: it is done and fires no more"),
        "{}",
        daemon.log()
    );

    // A restart reads the counts from the journal: nothing runs again.
    daemon.signal(Signal::SIGTERM);
    assert_eq!(daemon.wait_exit(LIMIT), Some(0));
    let _daemon = scratch.start_daemon(&[]);
    let seen = scratch.lines("marker").len();
    wait_for("3 marker ticks after the restart", LIMIT, || {
        scratch.lines("marker").len() >= seen + 3
    });
    assert_eq!(scratch.lines("limited").len(), 3);
    assert_eq!(scratch.lines("once").len(), 1);
    assert_eq!(scratch.lines("missed-run").len(), 1);
    assert_eq!(scratch.lines("missed-skip").len(), 0);
}

#[test]
fn a_cluster_runs_max_runs_ticks_and_a_one_shot_once_though_the_leader_is_lost() {
    let mut cluster = Cluster::new();
    let fires = cluster.fires_path();
    cluster.write_task("limited", &task("* * * * * *", &fires, "max_runs = 4\n"));
    cluster.write_task("once", &task(&at_in(6), &fires, ""));
    cluster.write_task("marker", &task("* * * * * *", &fires, ""));
    for id in ["node-a", "node-b"] {
        let node = cluster.new_node(id);
        cluster.start(node);
    }
    let count = |c: &Cluster, task: &str| c.fires().0.iter().filter(|f| f.task == task).count();
    cluster.wait("4 limited runs and the one-shot", LIMIT, |c| {
        count(c, "limited") >= 4 && count(c, "once") >= 1
    });
    // The leader of the limited task goes: the other node leads it, and runs nothing more.
    let status: Value = serde_json::from_str(&cluster.zkcron_ok(&["status", "--json"])).unwrap();
    let limited = status_of(&status, "limited");
    assert_eq!(limited["done"], "done after 4 runs (max_runs)", "{limited}");
    let leader = limited["leader"].as_str().unwrap().to_string();
    cluster.stop(&leader);
    let other = if leader == "node-a" {
        "node-b"
    } else {
        "node-a"
    };
    cluster.wait_log(other, "it is done and fires no more", 1);
    let seen = count(&cluster, "marker");
    cluster.wait("3 more marker ticks", LIMIT, |c| {
        count(c, "marker") >= seen + 3
    });
    assert_eq!(count(&cluster, "limited"), 4, "{}", cluster.diagnostics());
    assert_eq!(count(&cluster, "once"), 1, "{}", cluster.diagnostics());
    cluster.assert_no_duplicates();
}
