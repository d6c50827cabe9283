//! Chained tasks (`after = ["extract"]`) from the outside: real ZooKeeper, real `zkcron run`
//! nodes, the jobs' own lines. Every successful run of the parent causes exactly one run of the
//! child, with the parent's `ZKCRON_SCHEDULED_AT` and the fire id `load@after-<parent's>`,
//! also when the parent's node is killed (kill -9) right after the parent's result is stored;
//! a failing parent runs no child; the local backend does the same through a restart; a
//! pooled parent's run causes one child run per item it ran (`load@item-<item>@after-<parent's>`,
//! the item in `ZKCRON_AFTER_ITEM`), on both backends; a chained run of a paused child is
//! skipped (logged with its parent, counted) on both backends; a parent no live node may run is
//! reported as any ineligible task; `status`, `explain` and the HTTP API show the links and a
//! parent's state; and `validate` names a missing parent and a cycle with file, line and column.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::common::cluster::Cluster;
use crate::common::{Scratch, run_zkcron};
use nix::sys::signal::Signal;

const LIMIT: Duration = Duration::from_secs(60);

/// The parent's schedule in most tests: every second.
const EVERY_SECOND: &str = "schedule = \"* * * * * *\"";

/// The child's `when`: it runs after `extract` only.
const AFTER_EXTRACT: &str = "after = [\"extract\"]";

/// A task file whose job appends "<fire id> <scheduled at> <node>" to `out` and exits `exit`.
fn recording(out: &Path, when: &str, exit: u8, more: &str) -> String {
    format!(
        "{when}\ncommand = ['/bin/sh', '-c', 'echo \"$ZKCRON_FIRE_ID $ZKCRON_SCHEDULED_AT $ZKCRON_NODE\" >> {}; exit {exit}']\n{more}\n",
        out.display()
    )
}

/// The lines a recording job wrote: fire id → (scheduled at, node), and how many there were.
fn runs(out: &Path) -> (BTreeMap<String, (String, String)>, usize) {
    let text = std::fs::read_to_string(out).unwrap_or_default();
    let mut runs = BTreeMap::new();
    let mut lines = 0;
    for line in text.lines() {
        let mut words = line.split(' ').map(str::to_string);
        let (id, at, node) = (words.next(), words.next(), words.next());
        runs.insert(
            id.unwrap(),
            (at.unwrap_or_default(), node.unwrap_or_default()),
        );
        lines += 1;
    }
    (runs, lines)
}

/// Checks that every child run is of a parent run (same scheduled instant) and ran once;
/// returns the parents' fire ids the children ran after.
#[track_caller]
fn children_of_parents(parents: &Path, children: &Path) -> Vec<String> {
    let (parent_runs, _) = runs(parents);
    let (child_runs, child_lines) = runs(children);
    assert_eq!(
        child_runs.len(),
        child_lines,
        "a child ran twice: {child_runs:?}"
    );
    let mut after = Vec::new();
    for (id, (at, _)) in &child_runs {
        let parent = id
            .strip_prefix("load@after-")
            .unwrap_or_else(|| panic!("fire id {id}"));
        let (parent_at, _) = parent_runs
            .get(parent)
            .unwrap_or_else(|| panic!("{id} ran after no parent run: {parent_runs:?}"));
        assert_eq!(at, parent_at, "{id}: ZKCRON_SCHEDULED_AT is the parent's");
        after.push(parent.to_string());
    }
    after
}

#[test]
fn each_parent_success_runs_the_child_once_also_when_the_parent_s_node_is_killed_after_its_result()
{
    let mut cluster = Cluster::new();
    let (extract, load) = (cluster.path().join("extract"), cluster.path().join("load"));
    // The parent runs only on node-a, the child only on node-b: the kill takes the parent's
    // node, never the child's claimer.
    let on = |role: &str| format!("require_labels = {{ role = \"{role}\" }}");
    cluster.write_task("extract", &recording(&extract, EVERY_SECOND, 0, &on("a")));
    cluster.write_task("load", &recording(&load, AFTER_EXTRACT, 0, &on("b")));
    for (id, role) in [("node-a", "a"), ("node-b", "b")] {
        let mut node = cluster.new_node(id);
        node.config = format!("[node]\nlabels = {{ role = \"{role}\" }}\n");
        cluster.start(node);
    }
    let triggers = format!("{}/control/triggers", cluster.base());
    let requested = |c: &Cluster| {
        c.zk.children(&triggers)
            .into_iter()
            .filter(|name| name.starts_with("load@after-extract@"))
            .count()
    };
    cluster.wait("three chained runs to be requested", LIMIT, |c| {
        requested(c) >= 3
    });
    // Kill node-a the moment the next request appears: right after the result that made it.
    let before = requested(&cluster);
    cluster.wait("one more chained run to be requested", LIMIT, |c| {
        requested(c) > before
    });
    let mut victim = cluster.nodes.remove("node-a").unwrap();
    victim.signal(Signal::SIGKILL);
    victim.wait_exit(LIMIT);
    let made = requested(&cluster);
    cluster.wait("node-b to run every requested child", LIMIT, |_| {
        runs(&load).1 >= made
    });

    let after = children_of_parents(&extract, &load);
    let names = cluster.zk.children(&triggers);
    let mut expected: Vec<String> = names
        .iter()
        .filter_map(|name| name.strip_prefix("load@after-"))
        .map(str::to_string)
        .collect();
    expected.sort();
    assert_eq!(after, expected, "one child run per stored parent success");
    // Only the run the kill cut short (its result never stored) has no child: the parent runs
    // for milliseconds once a second, one at a time, so that is at most one run, its last.
    let (parents, _) = runs(&extract);
    let childless: Vec<&String> = parents.keys().filter(|p| !after.contains(p)).collect();
    let last = parents.keys().next_back();
    assert!(
        childless.is_empty() || childless == [last.unwrap()],
        "parent runs without a child: {childless:?}; only the last, {last:?}, may lack one \
         ({} parent runs, {} children)",
        parents.len(),
        after.len()
    );
    assert!(runs(&load).0.values().all(|(_, node)| node == "node-b"));
    // `history` marks them as chained runs, after their parent.
    let out = cluster.zkcron(&["history", "load", "--json"]);
    let history: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let first = &history.as_array().unwrap()[0];
    assert_eq!(first["trigger"], "manual", "{history:#}");
    assert!(
        first["after"]
            .as_str()
            .is_some_and(|p| p.starts_with("extract@")),
        "{history:#}"
    );
}

#[test]
fn a_failing_parent_runs_no_child() {
    let mut cluster = Cluster::new();
    let (extract, load) = (cluster.path().join("extract"), cluster.path().join("load"));
    cluster.write_task("extract", &recording(&extract, EVERY_SECOND, 3, ""));
    cluster.write_task("load", &recording(&load, AFTER_EXTRACT, 0, ""));
    cluster.start(cluster.new_node("node-a"));
    cluster.wait("three parent runs", LIMIT, |_| runs(&extract).1 >= 3);
    // The third run's end is stored by the time a fourth starts.
    cluster.wait("a fourth parent run", LIMIT, |_| runs(&extract).1 >= 4);
    assert_eq!(runs(&load).1, 0);
    let triggers = format!("{}/control/triggers", cluster.base());
    assert!(cluster.zk.children(&triggers).is_empty());
}

#[test]
fn on_the_local_backend_each_parent_success_runs_the_child_once_through_a_restart() {
    let scratch = Scratch::new();
    let (extract, load) = (scratch.out("extract"), scratch.out("load"));
    scratch.write_task("extract", &recording(&extract, EVERY_SECOND, 0, ""));
    scratch.write_task("load", &recording(&load, AFTER_EXTRACT, 0, ""));
    // A task after a task that does not exist is refused alone.
    scratch.write_task("orphan", &recording(&load, "after = [\"nothing\"]", 0, ""));
    let mut daemon = scratch.start_daemon(&[]);
    crate::common::wait_for("three children", LIMIT, || runs(&load).1 >= 3);
    assert!(
        daemon
            .log()
            .contains("`after` names \\\"nothing\\\", which is no task in this jobs dir")
            || daemon
                .log()
                .contains("`after` names \"nothing\", which is no task in this jobs dir"),
        "{}",
        daemon.log()
    );
    daemon.signal(Signal::SIGKILL);
    daemon.wait_exit(LIMIT);
    let (children_before, _) = runs(&load);
    scratch.write_config("[http]\nlisten = \"127.0.0.1:0\"\n");
    let mut daemon = scratch.start_daemon(&[]);
    crate::common::wait_for("three more children", LIMIT, || {
        runs(&load).1 >= children_before.len() + 3
    });
    // `/metrics` counts the chained runs and the requests of this run of the daemon. The three
    // children waited for may include requests written before the kill, and a run is counted
    // after its output, so the counts are waited for too.
    let address = daemon.served_address();
    let count = |name: &str| -> u64 {
        let (_, metrics) = crate::common::http_get(&address, "/metrics");
        let line = metrics.lines().find(|l| l.starts_with(name));
        line.and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing:\n{metrics}"))
    };
    crate::common::wait_for(
        "three requests and three chained runs of this run counted",
        LIMIT,
        || {
            count("zkcron_chain_requests_total") >= 3
                && count("zkcron_chained_runs_total{outcome=\"success\"}") >= 3
        },
    );
    assert!(count("zkcron_chained_runs_total{outcome=\"success\"}") >= 3);
    assert_eq!(count("zkcron_chained_runs_total{outcome=\"failure\"}"), 0);
    assert!(count("zkcron_chain_requests_total") >= 3);
    daemon.signal(Signal::SIGTERM);
    daemon.wait_exit(LIMIT);

    let after = children_of_parents(&extract, &load);
    let (parents, _) = runs(&extract);
    let missing: Vec<&String> = parents.keys().filter(|p| !after.contains(p)).collect();
    // A parent run cut short by the kill (or the stop) stored no success: at most those.
    assert!(missing.len() <= 2, "parents without a child: {missing:?}");
}

/// A pooled parent `extract` of `items` items every second whose job appends "<fire id>
/// <scheduled at> <node> <items>" to `out`, and its child `load`, whose job appends "<fire id>
/// <scheduled at> <node> <ZKCRON_AFTER_ITEM>" to `child_out`.
fn pooled_chain(out: &Path, child_out: &Path, items: usize) -> (String, String) {
    let job = |out: &Path, last: &str| {
        format!(
            "command = ['/bin/sh', '-c', 'echo \"$ZKCRON_FIRE_ID $ZKCRON_SCHEDULED_AT $ZKCRON_NODE ${last}\" >> {}']\n",
            out.display()
        )
    };
    let parent = format!(
        "schedule = \"* * * * * *\"\nwork_items = {items}\n{}",
        job(out, "ZKCRON_WORK_ITEMS")
    );
    let child = format!(
        "after = [\"extract\"]\n{}",
        job(child_out, "ZKCRON_AFTER_ITEM")
    );
    (parent, child)
}

/// The complete lines a job of [`pooled_chain`] wrote, split into their four words.
fn lines_of(out: &Path) -> Vec<[String; 4]> {
    let text = std::fs::read_to_string(out).unwrap_or_default();
    let complete = &text[..text.rfind('\n').map_or(0, |end| end + 1)];
    complete
        .lines()
        .map(|line| {
            let words: Vec<String> = line.split(' ').map(str::to_string).collect();
            words
                .try_into()
                .unwrap_or_else(|w| panic!("malformed line {w:?}"))
        })
        .collect()
}

/// The parent's (fire id, item) pairs that ran, each with its scheduled instant; checks that
/// none ran twice.
#[track_caller]
fn parent_items(out: &Path) -> BTreeMap<(String, String), String> {
    let mut pairs = BTreeMap::new();
    for [id, at, node, items] in lines_of(out) {
        for item in items.split(',') {
            let earlier = pairs.insert((id.clone(), item.to_string()), at.clone());
            assert!(earlier.is_none(), "{id} item {item} ran twice (on {node})");
        }
    }
    pairs
}

/// Checks that every child run is of a parent's (fire id, item) that ran, with that item in
/// `ZKCRON_AFTER_ITEM` and the parent's scheduled instant, and that none ran twice; returns
/// the parents' (fire id, item) pairs the children ran after.
#[track_caller]
fn children_of_items(
    parents: &BTreeMap<(String, String), String>,
    children: &Path,
) -> Vec<(String, String)> {
    let mut after = Vec::new();
    for [id, at, _, item] in lines_of(children) {
        let (named, parent) = id
            .strip_prefix("load@item-")
            .and_then(|rest| rest.split_once("@after-"))
            .unwrap_or_else(|| panic!("fire id {id}"));
        assert_eq!(named, item, "{id}: ZKCRON_AFTER_ITEM is the item");
        let pair = (parent.to_string(), item.clone());
        let parent_at = parents
            .get(&pair)
            .unwrap_or_else(|| panic!("{id} ran after no parent run of its item"));
        assert_eq!(&at, parent_at, "{id}: ZKCRON_SCHEDULED_AT is the parent's");
        assert!(!after.contains(&pair), "{id} ran twice");
        after.push(pair);
    }
    after
}

/// Whether each of `pairs` has had its child run.
fn all_children_ran(pairs: &[(String, String)], children: &Path) -> bool {
    let ran: Vec<String> = lines_of(children).into_iter().map(|[id, ..]| id).collect();
    pairs.iter().all(|(parent, item)| {
        let id = format!("load@item-{item}@after-{parent}");
        ran.contains(&id)
    })
}

#[test]
fn each_item_of_a_pooled_parent_s_success_runs_the_child_once_with_its_item_in_a_cluster() {
    let mut cluster = Cluster::new();
    let (extract, load) = (cluster.path().join("extract"), cluster.path().join("load"));
    let (parent, child) = pooled_chain(&extract, &load, 6);
    cluster.write_task("extract", &parent);
    cluster.write_task("load", &child);
    for id in ["node-a", "node-b", "node-c"] {
        let node = cluster.new_node(id);
        cluster.start(node);
    }
    // Three ticks whose six items all ran (on the nodes that owned them then).
    let full_ticks = |pairs: &BTreeMap<(String, String), String>| {
        let mut items: BTreeMap<&str, usize> = BTreeMap::new();
        for (id, _) in pairs.keys() {
            *items.entry(id).or_default() += 1;
        }
        items.values().filter(|n| **n == 6).count()
    };
    cluster.wait("three ticks of all six items", LIMIT, |_| {
        full_ticks(&parent_items(&extract)) >= 3
    });
    let ran: Vec<(String, String)> = parent_items(&extract).into_keys().collect();
    cluster.wait("a child run for each item that ran", LIMIT, |_| {
        all_children_ran(&ran, &load)
    });
    let parents = parent_items(&extract);
    let after = children_of_items(&parents, &load);
    assert!(after.len() >= ran.len(), "{after:?}");
    let nodes: std::collections::BTreeSet<String> = lines_of(&extract)
        .into_iter()
        .map(|[_, _, node, _]| node)
        .collect();
    assert!(nodes.len() > 1, "the pool ran on {nodes:?} only");
}

#[test]
fn on_the_local_backend_a_pooled_parent_s_tick_runs_the_child_once_per_item() {
    let scratch = Scratch::new();
    let (extract, load) = (scratch.out("extract"), scratch.out("load"));
    let (parent, child) = pooled_chain(&extract, &load, 3);
    scratch.write_task("extract", &parent);
    scratch.write_task("load", &child);
    scratch.write_config("[http]\nlisten = \"127.0.0.1:0\"\n");
    let mut daemon = scratch.start_daemon(&[]);
    crate::common::wait_for("two parent ticks", LIMIT, || lines_of(&extract).len() >= 2);
    let ran: Vec<(String, String)> = parent_items(&extract).into_keys().collect();
    // One run per tick with every item.
    assert!(
        lines_of(&extract)
            .iter()
            .all(|[.., items]| items == "0,1,2"),
        "{:?}",
        lines_of(&extract)
    );
    crate::common::wait_for("three children per parent tick", LIMIT, || {
        all_children_ran(&ran, &load)
    });
    // `/metrics` counts a request per item: three per parent tick.
    let address = daemon.served_address();
    let requests = || -> u64 {
        let (_, metrics) = crate::common::http_get(&address, "/metrics");
        let line = metrics
            .lines()
            .find(|l| l.starts_with("zkcron_chain_requests_total"));
        line.and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("zkcron_chain_requests_total missing:\n{metrics}"))
    };
    crate::common::wait_for("three requests counted per parent tick", LIMIT, || {
        let ticks = lines_of(&extract).len() as u64;
        requests() >= 3 * ticks
    });
    assert_eq!(requests() % 3, 0);
    daemon.signal(Signal::SIGTERM);
    daemon.wait_exit(LIMIT);
    let after = children_of_items(&parent_items(&extract), &load);
    let mut per_tick: BTreeMap<&str, usize> = BTreeMap::new();
    for (parent, _) in &after {
        *per_tick.entry(parent).or_default() += 1;
    }
    assert!(per_tick.values().all(|n| *n <= 3), "{per_tick:?}");
    assert!(
        per_tick.values().filter(|n| **n == 3).count() >= 2,
        "{per_tick:?}"
    );
}

#[test]
fn validate_names_a_missing_parent_and_a_cycle_with_file_line_and_column() {
    let scratch = Scratch::new();
    let job = "command = [\"true\"]\n";
    scratch.write_task("extract", &format!("schedule = \"@daily\"\n{job}"));
    scratch.write_task("load", &format!("{job}after = [\"extract\", \"extrct\"]\n"));
    scratch.write_task("a", &format!("{job}after = [\"b\"]\n"));
    scratch.write_task("b", &format!("{job}after = [\"a\"]\n"));
    let output = run_zkcron(&["validate", scratch.jobs().to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let err = String::from_utf8_lossy(&output.stderr);
    let at = |file: &str, line: usize, col: usize| {
        format!("{}:{line}:{col}", scratch.jobs().join(file).display())
    };
    for expected in [
        at("load.toml", 2, 21),
        "`after` names \"extrct\", which is no task in this jobs dir".to_string(),
        "did you mean \"extract\"?".to_string(),
        at("a.toml", 2, 10),
        "`after` makes a cycle: a → b → a".to_string(),
        at("b.toml", 2, 10),
        "`after` makes a cycle: b → a → b".to_string(),
    ] {
        assert!(err.contains(&expected), "missing {expected:?} in:\n{err}");
    }
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(out.contains("1 valid task(s)"), "{out}");
}

/// The count of `name` (a whole sample name, labels included) in `/metrics` at `address`.
fn metric(address: &str, name: &str) -> u64 {
    let (_, metrics) = crate::common::http_get(address, "/metrics");
    let line = metrics.lines().find(|l| l.starts_with(name));
    line.and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{name} missing:\n{metrics}"))
}

/// What a daemon logs for each chained run it skips.
const SKIPPED: &str = "chained run skipped: load is paused (it would have run after extract@";

#[test]
fn a_chained_run_of_a_paused_child_is_skipped_logged_with_its_parent_and_counted() {
    // Given extract every second and load after it, on one node serving /metrics.
    let mut cluster = Cluster::new();
    let (extract, load) = (cluster.path().join("extract"), cluster.path().join("load"));
    cluster.write_task("extract", &recording(&extract, EVERY_SECOND, 0, ""));
    cluster.write_task("load", &recording(&load, AFTER_EXTRACT, 0, ""));
    let mut node = cluster.new_node("node-a");
    node.config = "[http]\nlisten = \"127.0.0.1:0\"\n".to_string();
    let address = cluster.start(node).served_address();
    cluster.wait("a child run", LIMIT, |_| runs(&load).1 >= 1);
    let cli = |args: &[&str]| {
        cluster.zkcron_ok(args);
    };

    // When load is paused, then each success of extract causes no run of load: the chained
    // run is skipped, logged naming its parent, and counted.
    cli(&["pause", "load"]);
    cluster.wait_log("node-a", SKIPPED, 2);
    let children = runs(&load).1;
    cluster.wait_log("node-a", SKIPPED, 4);
    assert_eq!(runs(&load).1, children, "load ran while paused");
    cluster.wait("four skipped runs counted", LIMIT, |_| {
        metric(&address, "zkcron_chained_runs_total{outcome=\"skipped\"}") >= 4
    });
    let triggers = format!("{}/control/triggers", cluster.base());
    assert!(
        cluster
            .zk
            .children(&triggers)
            .iter()
            .filter(|name| name.starts_with("load@after-"))
            .count()
            >= children + 4,
        "the skipped runs' requests are there, ended"
    );

    // When load is resumed, then the next successes of extract run it again.
    cli(&["resume", "load"]);
    cluster.wait("load to run again", LIMIT, |_| {
        runs(&load).1 >= children + 2
    });
    children_of_parents(&extract, &load);
}

#[test]
fn on_the_local_backend_a_chained_run_of_a_paused_child_is_skipped() {
    let scratch = Scratch::new();
    let (extract, load) = (scratch.out("extract"), scratch.out("load"));
    scratch.write_task("extract", &recording(&extract, EVERY_SECOND, 0, ""));
    scratch.write_task("load", &recording(&load, AFTER_EXTRACT, 0, ""));
    scratch.write_config("[http]\nlisten = \"127.0.0.1:0\"\n");
    let mut daemon = scratch.start_daemon(&[]);
    let address = daemon.served_address();
    crate::common::wait_for("a child run", LIMIT, || runs(&load).1 >= 1);
    let cli = |args: &[&str]| {
        let out = scratch.cli(args);
        assert!(out.status.success(), "{args:?}: {out:?}");
    };

    cli(&["pause", "load"]);
    daemon.wait_for_log_count(SKIPPED, 2, LIMIT);
    let children = runs(&load).1;
    daemon.wait_for_log_count(SKIPPED, 4, LIMIT);
    assert_eq!(runs(&load).1, children, "load ran while paused");
    crate::common::wait_for("four skipped runs counted", LIMIT, || {
        metric(&address, "zkcron_chained_runs_total{outcome=\"skipped\"}") >= 4
    });

    cli(&["resume", "load"]);
    crate::common::wait_for("load to run again", LIMIT, || runs(&load).1 >= children + 2);
    daemon.signal(Signal::SIGTERM);
    daemon.wait_exit(LIMIT);
    children_of_parents(&extract, &load);
}

#[test]
fn a_parent_no_live_node_may_run_is_reported_like_any_ineligible_task() {
    // Given a parent that requires a label no live node has, and its child on the only node.
    let mut cluster = Cluster::new();
    let (extract, load) = (cluster.path().join("extract"), cluster.path().join("load"));
    let eu = "require_labels = { zone = \"eu\" }";
    cluster.write_task("extract", &recording(&extract, EVERY_SECOND, 0, eu));
    cluster.write_task("load", &recording(&load, AFTER_EXTRACT, 0, ""));
    cluster.write_task("anywhere", &recording(&load, EVERY_SECOND, 0, ""));
    let mut node = cluster.new_node("node-a");
    node.config = "[node]\nlabels = { zone = \"us\" }\n".to_string();
    cluster.start(node);

    // Then the parent is reported as any task no live node may run, in the log and in
    // `status`, and neither it nor its child runs.
    let problem =
        "no live node may run it: require_labels zone=eu matches none of node-a (zone=us)";
    cluster.wait_log("node-a", &format!("task extract: {problem}"), 1);
    cluster.wait("a run of another task", LIMIT, |_| {
        runs(&load).0.keys().any(|id| id.starts_with("anywhere@"))
    });
    let out = cluster.zkcron(&["status", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let extract_status = status["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "extract")
        .unwrap_or_else(|| panic!("{status:#}"));
    assert_eq!(extract_status["problem"], problem, "{status:#}");
    assert_eq!(runs(&extract).1, 0);
    assert!(runs(&load).0.keys().all(|id| id.starts_with("anywhere@")));

    // And the links show: `status` names the child's parent and the parent's child, and
    // `explain load` says why its chained runs wait (the parent's state).
    assert_eq!(extract_status["children"], serde_json::json!(["load"]));
    let load_status = status["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "load");
    assert_eq!(
        load_status.unwrap()["after"],
        serde_json::json!(["extract"])
    );
    let explain = |task: &str| cluster.zkcron_ok(&["explain", task]);
    let text = explain("load");
    assert!(
        text.contains(&format!(
            "  after:    extract: not firing: {problem}; the runs of load after it wait on it\n"
        )),
        "{text}"
    );
    let text = explain("extract");
    assert!(text.contains("  then:     load: "), "{text}");
}

#[test]
fn on_the_local_backend_status_and_the_api_show_the_after_links_and_a_paused_parent() {
    let scratch = Scratch::new();
    let (extract, load) = (scratch.out("extract"), scratch.out("load"));
    let yearly = "schedule = \"0 0 1 1 *\"";
    scratch.write_task("extract", &recording(&extract, yearly, 0, ""));
    scratch.write_task("load", &recording(&load, AFTER_EXTRACT, 0, ""));
    scratch.write_config("[http]\nlisten = \"127.0.0.1:0\"\n");
    let mut daemon = scratch.start_daemon(&[]);
    let address = daemon.served_address();
    let cli = |args: &[&str]| scratch.cli(args);
    let mut status = serde_json::Value::Null;
    crate::common::wait_for("status to list both tasks", LIMIT, || {
        let out = cli(&["status", "--json"]);
        status = serde_json::from_slice(&out.stdout).unwrap_or_default();
        status["tasks"].as_array().is_some_and(|t| t.len() == 2)
    });
    let cli = |args: &[&str]| {
        let out = cli(args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let task = |name: &str| {
        let tasks = status["tasks"].as_array().unwrap();
        tasks.iter().find(|t| t["name"] == name).unwrap().clone()
    };
    assert_eq!(task("load")["after"], serde_json::json!(["extract"]));
    assert_eq!(task("extract")["children"], serde_json::json!(["load"]));
    let text = cli(&["status"]);
    assert!(
        text.contains("after extract") && text.contains("then load"),
        "{text}"
    );

    // A paused parent: the child's page and its API say so, and link to the parent.
    cli(&["pause", "extract"]);
    crate::common::wait_for("the API to give the paused parent's state", LIMIT, || {
        let (_, body) = crate::common::http_get(&address, "/api/tasks/load");
        let detail: serde_json::Value = serde_json::from_str(&body).unwrap();
        detail["explain"]["parents"]
            == serde_json::json!([{"task": "extract", "problem": "paused"}])
    });
    let (_, page) = crate::common::http_get(&address, "/tasks/load");
    assert!(
        page.contains("<a href=\"/tasks/extract\">extract</a>"),
        "{page}"
    );
    let (_, body) = crate::common::http_get(&address, "/api/status");
    assert!(body.contains("\"children\":[\"load\"]"), "{body}");
    daemon.signal(Signal::SIGTERM);
    daemon.wait_exit(LIMIT);
}
