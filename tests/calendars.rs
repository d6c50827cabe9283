//! Calendars (`calendars.d/`, a task's `exclude`) from the outside: no tick in an excluded
//! period runs, on the embedded backend and on two nodes of a real ZooKeeper; `history
//! --ticks` says `excluded` and names the calendar; a changed calendar is reloaded, a broken one
//! keeps its last good version; `validate`, `schedule --exclude` and `next TASK` say what a
//! calendar removes, and every mistake with its file, line and column.
// Real daemons and processes against the real clock.
#![allow(clippy::disallowed_methods)]

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, SubsecRound, TimeDelta, Utc};
use common::cluster::Cluster;
use common::{Scratch, run_zkcron, wait_for};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(30);

/// Writes calendar `name` into `dir` (made if needed), mode 0644, atomically.
fn write_calendar(dir: &Path, name: &str, text: &str) {
    fs::create_dir_all(dir).unwrap();
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
    let temp = dir.join(format!(".{name}.tmp"));
    fs::write(&temp, text).unwrap();
    fs::set_permissions(&temp, fs::Permissions::from_mode(0o644)).unwrap();
    fs::rename(&temp, dir.join(format!("{name}.toml"))).unwrap();
}

/// A period of UTC local times from `from` to `until` seconds from now.
fn period(from: i64, until: i64) -> (DateTime<Utc>, DateTime<Utc>) {
    let now = Utc::now().trunc_subsecs(0);
    (
        now + TimeDelta::seconds(from),
        now + TimeDelta::seconds(until),
    )
}

fn freeze(period: (DateTime<Utc>, DateTime<Utc>)) -> String {
    let local = |t: DateTime<Utc>| t.format("%Y-%m-%dT%H:%M:%S").to_string();
    format!(
        "periods = [[\"{}\", \"{}\"]]\n",
        local(period.0),
        local(period.1)
    )
}

/// The seconds of the fires of `task` in `out` (lines `<task>@<second> ...`).
fn seconds(lines: &[String]) -> Vec<i64> {
    lines
        .iter()
        .filter_map(|l| l.split_whitespace().next()?.split('@').nth(1)?.parse().ok())
        .collect()
}

fn task(out: &Path, extra: &str) -> String {
    format!(
        "schedule = \"* * * * * *\"\n{extra}command = [\"sh\", \"-c\", \"echo $ZKCRON_FIRE_ID $ZKCRON_NODE >> {}\"]\n",
        out.display()
    )
}

fn calendars(scratch: &Scratch) -> PathBuf {
    scratch.path().join("calendars.d")
}

#[test]
fn the_embedded_daemon_runs_no_tick_in_an_excluded_period_and_says_why() {
    let scratch = Scratch::new();
    let frozen = period(3, 6);
    write_calendar(&calendars(&scratch), "freeze", &freeze(frozen));
    scratch.write_task("t", &task(&scratch.out("t"), "exclude = [\"freeze\"]\n"));
    let _daemon = scratch.start_daemon(&[]);
    let after = frozen.1.timestamp() + 2;
    wait_for("ticks after the frozen period", LIMIT, || {
        seconds(&scratch.lines("t")).iter().any(|s| *s >= after)
    });
    let fired = seconds(&scratch.lines("t"));
    let inside: Vec<&i64> = fired
        .iter()
        .filter(|s| **s >= frozen.0.timestamp() && **s < frozen.1.timestamp())
        .collect();
    assert!(
        inside.is_empty(),
        "fired in the frozen period: {inside:?} of {fired:?}"
    );
    let out = scratch.cli(&["history", "t", "--ticks", "--json"]);
    let entries: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let excluded = entries
        .iter()
        .find(|e| e["reason"] == "excluded")
        .unwrap_or_else(|| panic!("no excluded entry: {entries:#?}"));
    assert_eq!(excluded["count"], 3, "{excluded}");
    assert_eq!(
        excluded["message"],
        "in a day or period of calendar freeze (exclude)"
    );
    let status = String::from_utf8_lossy(&scratch.cli(&["status"]).stdout).into_owned();
    assert!(status.contains("excludes calendars freeze"), "{status}");
}

#[test]
fn a_changed_calendar_is_reloaded_and_a_broken_one_keeps_its_last_good_version() {
    let scratch = Scratch::new();
    // Excluded from now on, for a minute.
    write_calendar(&calendars(&scratch), "freeze", &freeze(period(-5, 60)));
    scratch.write_task("t", &task(&scratch.out("t"), "exclude = [\"freeze\"]\n"));
    scratch.write_task("marker", &task(&scratch.out("marker"), ""));
    let daemon = scratch.start_daemon(&[]);
    wait_for("3 marker ticks", LIMIT, || {
        scratch.lines("marker").len() >= 3
    });
    assert!(scratch.lines("t").is_empty());
    // A broken version is refused with its place; the last good one stays.
    write_calendar(
        &calendars(&scratch),
        "freeze",
        "periods = [[\"2026-13-01T00:00\", \"x\"]]\n",
    );
    daemon.wait_for_log(
        "invalid calendar file, keeping its last good version",
        LIMIT,
    );
    assert!(
        daemon.log().contains("freeze.toml:1:13"),
        "{}",
        daemon.log()
    );
    let seen = scratch.lines("marker").len();
    wait_for("3 more marker ticks", LIMIT, || {
        scratch.lines("marker").len() >= seen + 3
    });
    assert!(scratch.lines("t").is_empty());
    // Emptied: the task runs again.
    write_calendar(&calendars(&scratch), "freeze", "dates = []\n");
    wait_for("a tick of t", LIMIT, || !scratch.lines("t").is_empty());
    assert!(
        daemon
            .log()
            .contains("calendars changed: every task file is checked again")
    );
}

#[test]
fn validate_schedule_and_next_say_what_a_calendar_removes_and_where_a_mistake_is() {
    let scratch = Scratch::new();
    write_calendar(
        &calendars(&scratch),
        "holidays",
        "timezone = \"Europe/Berlin\"\ndates = [\"2026-12-25\", \"2026-12-26\"]\n",
    );
    write_calendar(&calendars(&scratch), "broken", "dates = [\"2026-02-30\"]\n");
    scratch.write_task(
        "typo",
        "schedule = \"@daily\"\ncommand = \"true\"\nexclude = [\"holiday\"]\n",
    );
    let output = run_zkcron(&["validate", scratch.jobs().to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let errors = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        errors.contains("unknown calendar \"holiday\"; the calendars dir has: holidays"),
        "{errors}"
    );
    assert!(errors.contains("did you mean \"holidays\"?"), "{errors}");
    assert!(errors.contains("typo.toml:3:12"), "{errors}");
    assert!(
        errors.contains("\"2026-02-30\" in `dates` is not a day"),
        "{errors}"
    );
    assert!(errors.contains("broken.toml:1:10"), "{errors}");

    let cal = calendars(&scratch);
    let output = run_zkcron(&[
        "schedule",
        "0 9 * * *",
        "--tz",
        "Europe/Berlin",
        "--after",
        "2026-12-23T12:00:00Z",
        "-n",
        "2",
        "--exclude",
        "holidays",
        "--calendars-dir",
        cal.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("2026-12-24T09:00:00+01:00"), "{text}");
    assert_eq!(
        lines[1],
        "2026-12-25T09:00:00+01:00 .. 2026-12-26T09:00:00+01:00  2 ticks excluded by calendar holidays"
    );
    assert!(lines[2].starts_with("2026-12-27T09:00:00+01:00"), "{text}");
    let output = run_zkcron(&[
        "schedule",
        "@daily",
        "--exclude",
        "nope",
        "--calendars-dir",
        cal.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no calendar \"nope\""));

    // `next TASK` names the ticks the calendar removes before the next one.
    scratch.remove_task("typo");
    let now = Utc::now().trunc_subsecs(0);
    let today = now.format("%Y-%m-%d").to_string();
    write_calendar(&cal, "today", &format!("dates = [\"{today}\"]\n"));
    scratch.write_task(
        "hourly",
        "schedule = \"0 * * * *\"\ncommand = \"true\"\nexclude = [\"today\"]\n",
    );
    let output = scratch.cli(&[
        "next",
        "hourly",
        "--jobs-dir",
        scratch.jobs().to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(text.contains("excluded by calendar today"), "{text}");
    assert!(!text.contains("typo"), "{text}");
}

#[test]
fn a_cluster_runs_no_tick_in_an_excluded_period_and_its_ledger_names_the_calendar() {
    let mut cluster = Cluster::new();
    let fires = cluster.fires_path();
    let frozen = period(8, 12);
    write_calendar(
        &cluster.path().join("calendars.d"),
        "freeze",
        &freeze(frozen),
    );
    cluster.write_task("t", &task(&fires, "exclude = [\"freeze\"]\n"));
    for id in ["node-a", "node-b"] {
        let node = cluster.new_node(id);
        cluster.start(node);
    }
    let after = frozen.1.timestamp() + 2;
    cluster.wait("ticks after the frozen period", LIMIT, |c| {
        c.fires()
            .0
            .iter()
            .any(|f| f.task == "t" && f.second >= after)
    });
    let inside: Vec<i64> = cluster
        .fires()
        .0
        .iter()
        .filter(|f| f.task == "t")
        .map(|f| f.second)
        .filter(|s| *s >= frozen.0.timestamp() && *s < frozen.1.timestamp())
        .collect();
    assert!(inside.is_empty(), "fired in the frozen period: {inside:?}");
    cluster.assert_no_duplicates();
    let entries: Vec<Value> =
        serde_json::from_str(&cluster.zkcron_ok(&["history", "t", "--ticks", "--json"])).unwrap();
    let excluded = entries
        .iter()
        .find(|e| e["reason"] == "excluded")
        .unwrap_or_else(|| panic!("no excluded entry: {entries:#?}"));
    assert_eq!(excluded["count"], 4, "{excluded}");
    assert_eq!(
        excluded["message"],
        "in a day or period of calendar freeze (exclude)"
    );
    let status: Value = serde_json::from_str(&cluster.zkcron_ok(&["status", "--json"])).unwrap();
    let t = status["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "t")
        .unwrap();
    assert_eq!(t["exclude"], serde_json::json!(["freeze"]), "{t}");
}
