//! The shapes of a schedule end to end: an `@every 1s` task, a `schedule` list of an interval
//! and a cron expression that share instants, and tasks whose active window has ended or not
//! begun, run by the real binary on the embedded backend and by two nodes on a real ZooKeeper
//! (`tests/common`). Observed through the jobs' own output, the logs, `status` and `next`.

mod common;

use std::collections::BTreeSet;
use std::process::Output;
use std::time::Duration;

use common::cluster::Cluster;
use common::fires::Fires;
use common::{Scratch, wait_for};
use nix::sys::signal::Signal;
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(30);

/// The list schedule both tests run: every even second, and every third one by interval; the
/// seconds divisible by 6 are in both.
const LIST: &str = "[\"*/2 * * * * *\", \"@every 3s\"]";

/// `schedule` (TOML, quoted or a list) with `extra` lines; the job appends
/// `<fire id> <$ZKCRON_NODE or the scheduled instant>` to `out`.
fn task(schedule: &str, out: &std::path::Path, word: &str, extra: &str) -> String {
    format!(
        "schedule = {schedule}\n\
         command = ['/bin/sh', '-c', 'echo \"$ZKCRON_FIRE_ID ${word}\" >> {out}']\n\
         overlap = \"allow\"\n\
         {extra}\n",
        out = out.display()
    )
}

const ENDED: &str = "active_until = \"2020-01-01T00:00:00Z\"";
const LATER: &str = "active_from = \"2099-01-01T00:00:00Z\"";

/// The unix seconds of `lines`' fire ids (`<task>@<second> ...`).
fn seconds(lines: &[String]) -> Vec<i64> {
    lines
        .iter()
        .map(|line| {
            let id = line.split_whitespace().next().unwrap();
            id.rsplit('@').next().unwrap().parse().unwrap()
        })
        .collect()
}

/// Checks the list task's fires: each second once, each a tick of one of the expressions, and
/// none missing between the first and the last.
#[track_caller]
fn assert_list_fired_its_union_once_each(fired: &[i64]) {
    let distinct: BTreeSet<i64> = fired.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        fired.len(),
        "a shared instant ran twice: {fired:?}"
    );
    let (first, last) = (*distinct.first().unwrap(), *distinct.last().unwrap());
    let expected: BTreeSet<i64> = (first..=last)
        .filter(|s| s % 2 == 0 || s % 3 == 0)
        .collect();
    assert_eq!(distinct, expected, "the union's ticks, each once");
    assert!(
        distinct.iter().any(|s| s % 6 == 0),
        "a shared instant came: {fired:?}"
    );
}

fn task_status<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no task {name} in {status}"))
}

/// `status`'s words on the tasks outside their window: a start and an end, not problems.
#[track_caller]
fn assert_window_reported(status: &Value) {
    let ended = task_status(status, "ended");
    assert_eq!(ended["ended_at"], "2020-01-01T00:00:00Z", "{ended}");
    assert_eq!(ended["next"], Value::Null);
    assert_eq!(ended["problem"], Value::Null);
    let later = task_status(status, "later");
    assert_eq!(later["starts_at"], "2099-01-01T00:00:00Z", "{later}");
    assert_eq!(later["next"], "2099-01-01T00:00:00Z");
    assert_eq!(later["problem"], Value::Null);
}

#[test]
fn given_an_interval_a_list_and_windows_when_the_embedded_backend_runs_them_then_each_tick_fires_once()
 {
    let scratch = Scratch::new();
    let out = |name: &str| scratch.out(name);
    scratch.write_task(
        "interval",
        &task("\"@every 1s\"", &out("interval"), "ZKCRON_SCHEDULED_AT", ""),
    );
    scratch.write_task(
        "listed",
        &task(LIST, &out("listed"), "ZKCRON_SCHEDULED_AT", ""),
    );
    scratch.write_task(
        "ended",
        &task("\"@every 1s\"", &out("ended"), "ZKCRON_NODE", ENDED),
    );
    scratch.write_task(
        "later",
        &task("\"@every 1s\"", &out("later"), "ZKCRON_NODE", LATER),
    );

    // `next` says where each window stands, without a daemon.
    let next = common::run_zkcron(&["next", "--jobs-dir", scratch.jobs().to_str().unwrap()]);
    let said = String::from_utf8_lossy(&next.stdout).into_owned();
    assert_eq!(next.status.code(), Some(0), "{said}");
    assert!(
        said.contains("ended at 2020-01-01T00:00:00Z (active_until): it fires no more"),
        "{said}"
    );
    assert!(
        said.contains("starts at 2099-01-01T00:00:00Z (active_from): no tick before"),
        "{said}"
    );
    assert!(
        said.contains("[\"*/2 * * * * *\", \"@every 3s\"] (UTC)"),
        "{said}"
    );

    let mut daemon = scratch.start_daemon(&[]);
    wait_for("6 interval ticks and 4 list ticks", LIMIT, || {
        scratch.lines("interval").len() >= 6 && scratch.lines("listed").len() >= 4
    });
    let status: Output = scratch.cli(&["status", "--json"]);
    assert!(status.status.success(), "{status:?}");
    assert_window_reported(&serde_json::from_slice(&status.stdout).unwrap());
    daemon.signal(Signal::SIGTERM);
    assert_eq!(daemon.wait_exit(LIMIT), Some(0));

    // Every second once, and the environment names the tick.
    let lines = scratch.lines("interval");
    let fired = seconds(&lines);
    assert!(fired.windows(2).all(|w| w[1] == w[0] + 1), "{lines:#?}");
    for line in &lines {
        let at = line.split_whitespace().nth(1).unwrap();
        let at = chrono::DateTime::parse_from_rfc3339(at).unwrap();
        assert_eq!(
            at.timestamp(),
            seconds(std::slice::from_ref(line))[0],
            "{line}"
        );
    }
    assert_list_fired_its_union_once_each(&seconds(&scratch.lines("listed")));
    assert!(scratch.lines("ended").is_empty() && scratch.lines("later").is_empty());
    // The ended task is said once, as information.
    let log = daemon.log();
    assert_eq!(
        log.matches("the task's active window has no tick left")
            .count(),
        1,
        "{log}"
    );
}

#[test]
fn given_two_nodes_on_zookeeper_when_an_interval_and_a_list_fire_then_each_tick_runs_once_in_the_cluster()
 {
    let mut cluster = Cluster::new();
    let fires = cluster.fires_path();
    cluster.write_task(
        "interval",
        &task("\"@every 1s\"", &fires, "ZKCRON_NODE", ""),
    );
    cluster.write_task("listed", &task(LIST, &fires, "ZKCRON_NODE", ""));
    cluster.write_task(
        "ended",
        &task("\"@every 1s\"", &fires, "ZKCRON_NODE", ENDED),
    );
    cluster.write_task(
        "later",
        &task("\"@every 1s\"", &fires, "ZKCRON_NODE", LATER),
    );
    for id in ["node-a", "node-b"] {
        let node = cluster.new_node(id);
        cluster.start(node);
    }
    let count = |fires: &Fires, task: &str| fires.0.iter().filter(|f| f.task == task).count();
    cluster.wait("6 interval ticks and 4 list ticks", LIMIT, |c| {
        let fires = c.fires();
        count(&fires, "interval") >= 6 && count(&fires, "listed") >= 4
    });
    let status = cluster.zkcron_ok(&["status", "--json"]);
    assert_window_reported(&serde_json::from_str(&status).unwrap());
    cluster.stop("node-a");
    cluster.stop("node-b");

    let fires = cluster.fires();
    assert!(fires.duplicates().is_empty(), "{:?}", fires.duplicates());
    let of = |task: &str| -> Vec<i64> {
        fires
            .0
            .iter()
            .filter(|f| f.task == task)
            .map(|f| f.second)
            .collect()
    };
    let interval = of("interval");
    let (first, last) = (interval[0], *interval.last().unwrap());
    assert!(
        fires
            .gaps(&["interval".to_string()], first, last)
            .is_empty(),
        "{}",
        cluster.diagnostics()
    );
    assert_list_fired_its_union_once_each(&of("listed"));
    assert!(of("ended").is_empty() && of("later").is_empty());
}
