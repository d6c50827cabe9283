//! The log: JSON and text formats, one spelling per field, the filter, start-up warnings.

use crate::LIMIT;
use crate::common::Scratch;
use nix::sys::signal::Signal;

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
