//! `work_items` and `run_on` in task files: what they are read as, the message (with line,
//! column and fix) of each mistake, the ZooKeeper backend taking both, and a pooled task and an
//! every-node task run by the embedded backend (the real binary). Each test is given / when /
//! then.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{Scratch, run_zkcron, wait_for};
use nix::sys::signal::Signal;
use zkcron::task::{
    Identity, RunOn, TaskBackend, TaskDefaults, TaskFileError, TaskSpec, parse_task,
};

const MINIMAL: &str = "schedule = \"*/5 * * * *\"\ncommand = \"true\"\n";

fn defaults(backend: TaskBackend) -> TaskDefaults {
    common::task_defaults(Identity::current(), backend)
}

fn parse(more: &str) -> Result<TaskSpec, Vec<TaskFileError>> {
    let text = format!("{MINIMAL}{more}");
    parse_task(
        "t",
        Path::new("/jobs/t.toml"),
        &text,
        &defaults(TaskBackend::Local),
    )
}

/// The only error of `more` after the minimal task (lines 1 and 2), checked for its position,
/// message and help.
#[track_caller]
fn assert_refused(more: &str, line: usize, column: usize, message: &str, help: &str) {
    let errors = parse(more).expect_err("the task should be refused");
    assert_eq!(errors.len(), 1, "expected one error, got: {errors:#?}");
    let error = &errors[0];
    assert!(
        error.message.contains(message),
        "message {:?} lacks {message:?}",
        error.message
    );
    assert_eq!((error.line, error.column), (line, column), "{error:#?}");
    let got = error.help.as_deref().unwrap_or_default();
    assert!(got.contains(help), "help {got:?} lacks {help:?}");
}

fn items(spec: &TaskSpec) -> Vec<&str> {
    spec.extras
        .run_on
        .items()
        .expect("a pooled task")
        .iter()
        .map(String::as_str)
        .collect()
}

#[test]
fn given_no_key_then_each_tick_runs_on_the_leader() {
    assert_eq!(parse("").unwrap().extras.run_on, RunOn::Leader);
    assert_eq!(
        parse("run_on = \"leader\"\n").unwrap().extras.run_on,
        RunOn::Leader
    );
    assert_eq!(
        parse("run_on = \"every_node\"\n").unwrap().extras.run_on,
        RunOn::EveryNode
    );
}

#[test]
fn given_a_count_then_the_items_are_its_numbers_and_given_names_they_keep_the_file_order() {
    let spec = parse("work_items = 16\n").unwrap();
    let expected: Vec<String> = (0..16).map(|i| i.to_string()).collect();
    assert_eq!(items(&spec), expected);
    let spec = parse("work_items = [\"us-east\", \"eu-west\", \"ap.south_1\"]\n").unwrap();
    assert_eq!(items(&spec), ["us-east", "eu-west", "ap.south_1"]);
    let most: Vec<String> = (0..1024).map(|i| format!("\"s{i}\"")).collect();
    let spec = parse(&format!("work_items = [{}]\n", most.join(", "))).unwrap();
    assert_eq!(items(&spec).len(), 1024);
    assert_eq!(items(&parse("work_items = 1024\n").unwrap()).len(), 1024);
}

#[test]
fn given_a_count_out_of_range_or_of_another_kind_then_it_is_refused_with_the_forms() {
    let forms = "write `work_items = 16` for the items \"0\" to \"15\"";
    let range = "`work_items` must be between 1 and 1024, found";
    assert_refused("work_items = 0\n", 3, 14, &format!("{range} 0"), forms);
    assert_refused(
        "work_items = 1025\n",
        3,
        14,
        &format!("{range} 1025"),
        forms,
    );
    assert_refused(
        "work_items = \"16\"\n",
        3,
        14,
        "`work_items` must be a number of items or an array of item names, found string \"16\"",
        forms,
    );
}

#[test]
fn given_a_bad_list_then_each_mistake_is_refused_where_it_is() {
    assert_refused(
        "work_items = []\n",
        3,
        14,
        "`work_items` is an empty array",
        "list at least one item, or remove `work_items`",
    );
    let too_many: Vec<String> = (0..1025).map(|i| format!("\"s{i}\"")).collect();
    assert_refused(
        &format!("work_items = [{}]\n", too_many.join(",")),
        3,
        14,
        "`work_items` lists 1025 items; a pool holds at most 1024",
        "split the task into several task files",
    );
    assert_refused(
        "work_items = [\"eu\", \"EU-West\"]\n",
        3,
        21,
        "work item \"EU-West\" is not a valid item name: names must match [a-z0-9][a-z0-9._-]{0,99}",
        "did you mean \"eu-west\"?",
    );
    assert_refused(
        "work_items = [\"-eu\"]\n",
        3,
        15,
        "work item \"-eu\" is not a valid item name",
        "starting with a letter or digit",
    );
    assert_refused(
        "work_items = [\"eu\", 7]\n",
        3,
        21,
        "every element of `work_items` must be a string, found integer 7",
        "quote it: \"7\"",
    );
    assert_refused(
        "work_items = [\"eu\", \"us\", \"eu\"]\n",
        3,
        27,
        "work item \"eu\" is listed twice (it is also element 1 of `work_items`)",
        "remove one of them",
    );
}

#[test]
fn given_run_on_with_work_items_or_a_typo_then_it_is_refused() {
    assert_refused(
        "work_items = 4\nrun_on = \"every_node\"\n",
        4,
        1,
        "`run_on` and `work_items` cannot be used together",
        "remove `run_on`, or remove `work_items`",
    );
    assert_refused(
        "run_on = \"every-node\"\n",
        3,
        10,
        "`run_on` must be one of \"leader\", \"every_node\", found \"every-node\"",
        "did you mean \"every_node\"?",
    );
}

#[test]
fn given_the_zookeeper_backend_then_pools_and_every_node_are_accepted() {
    let defaults = defaults(TaskBackend::Zookeeper);
    let text = format!("{MINIMAL}work_items = 4\n");
    let spec = parse_task("t", Path::new("/jobs/t.toml"), &text, &defaults).unwrap();
    assert_eq!(items(&spec), ["0", "1", "2", "3"]);
    // The leader is what the backend does anyway; every node, each node's unit of the task.
    for run_on in ["leader", "every_node"] {
        let text = format!("{MINIMAL}run_on = \"{run_on}\"\n");
        let spec = parse_task("t", Path::new("/jobs/t.toml"), &text, &defaults).unwrap();
        assert_eq!(
            spec.extras.run_on == RunOn::EveryNode,
            run_on == "every_node"
        );
    }
}

#[test]
fn given_a_zookeeper_config_when_validate_runs_then_a_pooled_file_is_valid() {
    let scratch = Scratch::new();
    scratch.write_task("plain", MINIMAL);
    scratch.write_task("pool", &format!("{MINIMAL}work_items = 8\n"));
    let config = scratch.write_config(
        "[coordination]\nbackend = \"zookeeper\"\n[coordination.zookeeper]\nconnect = \"127.0.0.1:2181\"\n",
    );
    let output = run_zkcron(&[
        "validate",
        "--config",
        config.to_str().unwrap(),
        scratch.jobs().to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("2 valid task(s)"), "{stdout}");
}

/// A task that appends "<fire id> <items> <total>" to `out/<file>` each second.
fn recording_task(scratch: &Scratch, file: &str, extra: &str) -> String {
    format!(
        "schedule = \"* * * * * *\"\ncommand = 'echo \"$ZKCRON_FIRE_ID ${{ZKCRON_WORK_ITEMS-none}} ${{ZKCRON_WORK_TOTAL-none}}\" >> {out}'\n{extra}\n",
        out = scratch.out(file).display()
    )
}

/// The fire ids of `lines`, checked to be distinct (no tick ran twice).
#[track_caller]
fn distinct_fire_ids(lines: &[String]) {
    let ids: std::collections::BTreeSet<&str> = lines
        .iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(ids.len(), lines.len(), "a tick ran twice: {lines:#?}");
}

#[test]
fn given_the_embedded_backend_then_a_pool_runs_once_per_tick_with_every_item_and_every_node_is_a_plain_task()
 {
    let scratch = Scratch::new();
    scratch.write_task(
        "regions",
        &recording_task(
            &scratch,
            "regions",
            "work_items = [\"us-east\", \"eu-west\", \"ap-south\"]",
        ),
    );
    scratch.write_task(
        "shards",
        &recording_task(&scratch, "shards", "work_items = 4"),
    );
    scratch.write_task(
        "cleanup",
        &recording_task(&scratch, "cleanup", "run_on = \"every_node\""),
    );
    let mut daemon = scratch.start_daemon(&[]);
    let limit = Duration::from_secs(30);
    wait_for("3 ticks of each task", limit, || {
        ["regions", "shards", "cleanup"]
            .iter()
            .all(|file| scratch.lines(file).len() >= 3)
    });
    // `zkcron status` says how many items this host runs per pool.
    let state = scratch.path().join("state");
    let status = run_zkcron(&["status", "--state-dir", state.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert_eq!(status.status.code(), Some(0), "{text}");
    let row = |task: &str| {
        text.lines()
            .find(|l| l.starts_with(task))
            .unwrap_or_else(|| panic!("no row for {task}: {text}"))
            .to_string()
    };
    assert!(row("regions").contains("items: test-node 3"), "{text}");
    assert!(row("shards").contains("items: test-node 4"), "{text}");
    assert!(!row("cleanup").contains("items:"), "{text}");
    daemon.signal(Signal::SIGTERM);
    assert_eq!(daemon.wait_exit(limit), Some(0));

    for (file, items, total) in [
        ("regions", "us-east,eu-west,ap-south", "3"),
        ("shards", "0,1,2,3", "4"),
        ("cleanup", "none", "none"),
    ] {
        let lines = scratch.lines(file);
        distinct_fire_ids(&lines);
        for line in &lines {
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert!(fields[0].starts_with(&format!("{file}@")), "{line}");
            assert_eq!(fields[1..], [items, total], "{line}");
        }
    }
}

#[test]
fn given_a_pool_then_skips_name_its_items_the_hook_gets_them_and_a_reload_changes_them() {
    let scratch = Scratch::new();
    let runs = scratch.out("runs");
    let hooks = scratch.out("hooks");
    // Each run records its items, outlasts the next tick (skipped) and fails (the hook runs).
    let task = |items: &str| {
        format!(
            "schedule = \"* * * * * *\"\n\
             command = 'echo \"$ZKCRON_FIRE_ID $ZKCRON_WORK_ITEMS\" >> {runs}; sleep 1.5; exit 3'\n\
             overlap = \"skip\"\n\
             on_failure = [\"/bin/sh\", \"-c\", 'echo \"$ZKCRON_FIRE_ID $ZKCRON_WORK_ITEMS $ZKCRON_WORK_TOTAL\" >> {hooks}']\n\
             work_items = {items}\n",
            runs = runs.display(),
            hooks = hooks.display()
        )
    };
    scratch.write_task("pool", &task("2"));
    let daemon = scratch.start_daemon(&[]);
    let limit = Duration::from_secs(30);
    daemon.wait_for_log_line(
        "a skip naming the pool's items",
        &["skipped: the previous run is still going", "0,1"],
        limit,
    );
    wait_for("a hook", limit, || !scratch.lines("hooks").is_empty());
    assert!(
        scratch.lines("hooks").iter().all(|l| l.ends_with(" 0,1 2")),
        "{:#?}",
        scratch.lines("hooks")
    );

    // The pool changes with the file.
    scratch.write_task("pool", &task("[\"eu\", \"us\", \"ap\"]"));
    wait_for("a run of the new pool", limit, || {
        scratch
            .lines("runs")
            .iter()
            .any(|l| l.ends_with(" eu,us,ap"))
    });
    let lines = scratch.lines("runs");
    distinct_fire_ids(&lines);
    assert!(
        lines
            .iter()
            .all(|l| l.ends_with(" 0,1") || l.ends_with(" eu,us,ap")),
        "{lines:#?}"
    );
}
