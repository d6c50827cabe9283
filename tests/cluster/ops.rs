//! The operator commands end to end: real `zkcron run` nodes on a real ZooKeeper (see
//! `tests/common/zk.rs`), and the `zkcron` CLI reading and marking the cluster the way an
//! operator would: `status` and `explain` (human and JSON, field by field), `history`,
//! `trigger --wait`, `pause`/`resume`, `drain`/`undrain`; the local backend's commands through
//! the daemon's socket; and what the commands say when they cannot reach anything.
//!
//! Every task fires every second and appends `<fire id> <node id>` to `fires.log`, so the tests
//! see what ran where.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::cluster::Cluster;
use crate::common::zk::{self, ClusterNode, TestServer};
use serde_json::Value;

const CLUSTER: &str = "test";

/// A generous deadline for things that take a moment (start-up, lease moves).
const LIMIT: Duration = Duration::from_secs(30);

/// Cluster `test` on a chroot of the binary's shared ZooKeeper.
fn new_cluster() -> Cluster {
    Cluster::on(TestServer::shared(), CLUSTER)
}

/// What the operator does to a [`Cluster`] here: start nodes, run the cluster commands on it
/// and read `status --json`.
trait Ops {
    fn write_ticking_task(&self, name: &str, extra: &str);
    fn start_node(&mut self, id: &str, release: &str, config: &str);
    fn ok(&self, args: &[&str]) -> String;
    fn status(&self) -> Value;
    fn wait_status(&self, what: &str, condition: impl FnMut(&Value) -> bool) -> Value;
}

impl Ops for Cluster {
    /// A task firing every second that records its fire id, with `extra` TOML lines.
    fn write_ticking_task(&self, name: &str, extra: &str) {
        let text = format!(
            "schedule = \"* * * * * *\"\n\
             command = [\"/bin/sh\", \"-c\", 'echo \"$ZKCRON_FIRE_ID $ZKCRON_NODE\" >> {fires}']\n\
             {extra}\n",
            fires = self.fires_path().display()
        );
        self.write_task(name, &text);
    }

    /// Starts node `id` of `release` with `config` (TOML) and waits until it registered.
    fn start_node(&mut self, id: &str, release: &str, config: &str) {
        self.start(ClusterNode {
            release: Some(release.into()),
            config: config.into(),
            ..self.new_node(id)
        });
    }

    /// `cli(args)`, which must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.zkcron(args);
        assert!(
            out.status.success(),
            "zkcron {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn status(&self) -> Value {
        serde_json::from_str(&self.ok(&["status", "--json"])).unwrap()
    }

    /// Polls `status --json` until `condition` holds; panics after `LIMIT` with the last one.
    #[allow(clippy::disallowed_methods)] // real processes, real deadline
    fn wait_status(&self, what: &str, mut condition: impl FnMut(&Value) -> bool) -> Value {
        let deadline = Instant::now() + LIMIT;
        loop {
            let status = self.status();
            if condition(&status) {
                return status;
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out waiting for: {what}\nlast status: {status:#}\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn task<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no task {name} in {status:#}"))
}

fn node<'a>(status: &'a Value, id: &str) -> &'a Value {
    status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == id)
        .unwrap_or_else(|| panic!("no node {id} in {status:#}"))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn unix_now() -> i64 {
    zkcron::clock::Clock::system().now().timestamp()
}

// ---------------------------------------------------------------------------------------------
// Status and explain

#[test]
fn status_and_explain_describe_nodes_and_tasks_field_by_field() {
    let mut cluster = new_cluster();
    cluster.write_ticking_task("tick", "");
    cluster.write_ticking_task("future", "version_req = \">=2.0\"");
    cluster.start_node("a", "1.0.0", "[node]\nlabels = { zone = \"east\" }");
    cluster.start_node("b", "1.1.0", "");
    // b is the newer release: it leads tick once both have settled, and tick has run there.
    let status = cluster.wait_status("b to lead tick and tick to have run on b", |s| {
        let t = task(s, "tick");
        t["leader"] == "b" && t["last"]["node"] == "b"
    });

    assert_eq!(status["backend"], "zookeeper");
    assert_eq!(status["cluster"], CLUSTER);
    let a = node(&status, "a");
    assert_eq!(a["release"], "1.0.0");
    assert_eq!(a["labels"], serde_json::json!({"zone": "east"}));
    assert_eq!(a["drained"], false);
    assert_eq!(a["tasks_led"], 0);
    assert!(a["session_age_s"].as_u64().unwrap() < 120);
    let b = node(&status, "b");
    assert_eq!(b["release"], "1.1.0");
    assert_eq!(b["labels"], serde_json::json!({}));
    assert_eq!(b["tasks_led"], 1);

    let tick = task(&status, "tick");
    assert_eq!(tick["paused"], false);
    assert_eq!(tick["problem"], Value::Null);
    assert_eq!(tick["drift"], serde_json::json!([]));
    let next = chrono::DateTime::parse_from_rfc3339(tick["next"].as_str().unwrap()).unwrap();
    let ahead = next.timestamp() - unix_now();
    assert!(
        (0..=2).contains(&ahead),
        "next is the coming second: {next}"
    );
    let last = &tick["last"];
    assert!(last["fire_id"].as_str().unwrap().starts_with("tick@"));
    assert_eq!(last["success"], true);
    assert_eq!(last["exit_code"], 0);
    assert_eq!(last["signal"], Value::Null);
    assert!(last["duration_ms"].as_u64().is_some());
    assert!(last["finished_at"].as_str().unwrap().ends_with('Z'));

    let future = task(&status, "future");
    assert_eq!(future["leader"], Value::Null);
    assert_eq!(future["next"], Value::Null);
    assert_eq!(future["last"], Value::Null);
    assert_eq!(
        future["problem"],
        "no live node may run it: version_req >=2.0 matches none of a (1.0.0), b (1.1.0)"
    );

    // The same in the human table: one row per node and per task, aligned.
    let human = cluster.ok(&["status"]);
    let lines: Vec<&str> = human.lines().collect();
    assert!(lines[0].starts_with(&format!("cluster {CLUSTER} (zookeeper), at ")));
    let header = lines
        .iter()
        .position(|l| l.starts_with("NODE "))
        .expect("a node table");
    let cells = |line: &str| {
        line.split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        cells(lines[header]),
        ["NODE", "RELEASE", "DRAINED", "LEADS", "SESSION", "LABELS"]
    );
    let row_a = cells(lines[header + 1]);
    assert_eq!(&row_a[..4], ["a", "1.0.0", "no", "0"]);
    assert_eq!(row_a.last().unwrap(), "zone=east");
    assert_eq!(&cells(lines[header + 2])[..4], ["b", "1.1.0", "no", "1"]);
    let tasks = lines
        .iter()
        .position(|l| l.starts_with("TASK "))
        .expect("a task table");
    assert!(lines[tasks].contains("LEADER"), "{human}");
    // Columns line up: every row's LEADER starts where the header's does.
    let column = lines[tasks].find("LEADER").unwrap();
    let future_row = lines[tasks + 1];
    assert!(future_row.starts_with("future "), "{human}");
    assert_eq!(&future_row[column..column + 2], "- ");
    assert!(future_row.ends_with(
        "no live node may run it: version_req >=2.0 matches none of a (1.0.0), b (1.1.0)"
    ));
    let tick_row = lines[tasks + 2];
    assert!(tick_row.starts_with("tick "), "{human}");
    assert_eq!(&tick_row[column..column + 2], "b ");
    assert!(tick_row.contains(" ok "), "{human}");
    assert!(
        human.ends_with("2 node(s), 2 task(s), 1 with a problem.\n"),
        "{human}"
    );

    // explain: b first (newer release), a second; the lease and its holder.
    let explained: Value =
        serde_json::from_str(&cluster.ok(&["explain", "tick", "--json"])).unwrap();
    let candidates = explained["candidates"].as_array().unwrap();
    assert_eq!(candidates.len(), 2);
    assert_eq!(candidates[0]["node"], "b");
    assert_eq!(candidates[0]["rank"], 1);
    assert_eq!(candidates[0]["release"], "1.1.0");
    assert_eq!(candidates[0]["eligible"], true);
    assert_eq!(candidates[0]["score"].as_str().unwrap().len(), 16);
    assert_eq!(candidates[1]["node"], "a");
    assert_eq!(candidates[1]["rank"], 2);
    assert_eq!(explained["lease"]["node"], "b");
    assert_eq!(explained["lease"]["designated"], true);
    let human = cluster.ok(&["explain", "tick"]);
    assert!(
        human.starts_with("task tick\n  lease:    held by b since "),
        "{human}"
    );
    assert!(human.contains("the designated leader"), "{human}");
    assert!(
        human.contains("  state:    firing on schedule\n"),
        "{human}"
    );
    let rows: Vec<Vec<&str>> = human
        .lines()
        .skip_while(|l| !l.starts_with("RANK"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        ["RANK", "NODE", "RELEASE", "SCORE", "DEFINITION", "ELIGIBLE"]
    );
    assert_eq!(&rows[1][..3], ["1", "b", "1.1.0"]);
    assert_eq!(&rows[1][5..], ["yes", "(holds", "the", "lease)"]);
    assert_eq!(&rows[2][..3], ["2", "a", "1.0.0"]);

    let human = cluster.ok(&["explain", "future"]);
    assert!(human.contains("  lease:    vacant\n"), "{human}");
    assert!(
        human.contains(
            "  state:    not firing: no live node may run it: version_req >=2.0 matches none of \
             a (1.0.0), b (1.1.0)"
        ),
        "{human}"
    );
    assert!(
        human.contains("no: release 1.1.0 does not match version_req >=2.0"),
        "{human}"
    );

    // A reader that goes away (`zkcron status | head`) ends the command quietly: no panic on
    // the broken pipe.
    let mut command = crate::common::zkcron();
    command
        .args([
            "status",
            "--zookeeper",
            &cluster.connect,
            "--cluster",
            CLUSTER,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = zk::spawn_tied_to_process(command).unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");

    // A znode nobody can read is named and left out; the rest is shown.
    let junk = format!(
        "{}/zkcron/{CLUSTER}/control/triggers/junk",
        chroot(&cluster.connect)
    );
    cluster.zk.with_client(async |client| {
        let options = zookeeper_client::CreateMode::Persistent
            .with_acls(zookeeper_client::Acls::anyone_all());
        client.create(&junk, b"not json", &options).await.unwrap();
    });
    let out = cluster.zkcron(&["status", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with(&format!("zkcron: warning: cannot read the record {junk}: ")),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).ends_with("; left out\n"), "{}", stderr(&out));
    cluster
        .zk
        .with_client(async |client| client.delete(&junk, None).await.unwrap());

    // An unknown task: exit 1, with the closest name.
    let out = cluster.zkcron(&["explain", "tik"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!(
            "zkcron: error: unknown task tik: no live node of cluster {CLUSTER} defines it; did \
             you mean tick?\n"
        )
    );
}

// ---------------------------------------------------------------------------------------------
// Drain, pause

#[test]
fn drain_moves_every_lease_off_a_node_and_undrain_brings_them_back() {
    let mut cluster = new_cluster();
    cluster.write_ticking_task("tick", "");
    cluster.start_node("a", "1.0.0", "");
    cluster.start_node("b", "1.1.0", "");
    cluster.wait_status("b to lead tick", |s| task(s, "tick")["leader"] == "b");

    let said = cluster.ok(&["drain", "b"]);
    assert!(
        said.starts_with("zkcron: node b drained: it gives up its leases"),
        "{said}"
    );
    let status = cluster.wait_status("a to lead tick", |s| task(s, "tick")["leader"] == "a");
    assert_eq!(node(&status, "b")["drained"], true);
    assert_eq!(node(&status, "b")["tasks_led"], 0);
    // Draining again says so.
    assert!(
        cluster
            .ok(&["drain", "b"])
            .starts_with("zkcron: node b is already drained since ")
    );

    // The default node is this host's: --node-id.
    let said = cluster.ok(&["undrain", "--node-id", "b"]);
    assert!(
        said.starts_with("zkcron: node b undrained (it was drained since "),
        "{said}"
    );
    let status = cluster.wait_status("b to lead tick again", |s| task(s, "tick")["leader"] == "b");
    assert_eq!(node(&status, "b")["drained"], false);
    assert_eq!(
        cluster.ok(&["undrain", "b"]),
        "zkcron: node b is not drained\n"
    );
}

#[test]
fn a_paused_task_fires_nothing_and_its_paused_period_is_not_caught_up() {
    let mut cluster = new_cluster();
    cluster.write_ticking_task("tick", "catch_up = \"all\"\nstarting_deadline = \"1h\"");
    cluster.start_node("a", "1.0.0", "");
    cluster.wait_status("tick to run", |s| !task(s, "tick")["last"].is_null());

    let said = cluster.ok(&["pause", "tick"]);
    assert!(said.starts_with("zkcron: task tick paused"), "{said}");
    let status = cluster.wait_status("tick paused", |s| task(s, "tick")["paused"] == true);
    assert_eq!(task(&status, "tick")["problem"], "paused");
    assert_eq!(task(&status, "tick")["next"], Value::Null);
    // The node has seen the pause once it says so. A run it claimed before (up to 200 ms
    // ahead of its tick) may still land, for a tick up to the next second; no later tick may.
    cluster.nodes["a"].wait_for_log("task tick is paused", LIMIT);
    let paused_at = unix_now();
    // The first tick that may not fire.
    let quiet_from = paused_at + 2;
    crate::common::wait_for("three seconds of the pause to pass", LIMIT, || {
        unix_now() >= quiet_from + 3
    });
    let fires = cluster.fires();
    let while_paused: Vec<String> = fires
        .0
        .iter()
        .filter(|fire| fire.second >= quiet_from)
        .map(|fire| fire.id())
        .collect();
    assert!(
        while_paused.is_empty(),
        "nothing fires while paused: {while_paused:?}"
    );
    let before = fires.0.len();

    let said = cluster.ok(&["resume", "tick"]);
    assert!(
        said.starts_with("zkcron: task tick resumed (it was paused since "),
        "{said}"
    );
    let resumed_at = unix_now();
    crate::common::wait_for("tick to fire again", LIMIT, || {
        cluster.fires().0.len() > before + 1
    });
    // catch_up = "all" would run every second of the pause; resume moved the record past it.
    let caught_up: Vec<String> = cluster
        .fires()
        .0
        .into_iter()
        .map(|fire| fire.id())
        .filter(|id| {
            let second: i64 = id.trim_start_matches("tick@").parse().unwrap_or(0);
            // The record moves to the resume's second: allow for the CLI's own exit.
            second >= quiet_from && second + 1 < resumed_at
        })
        .collect();
    assert!(
        caught_up.is_empty(),
        "ticks of the paused period ran: {caught_up:?}"
    );
    assert_eq!(
        cluster.ok(&["resume", "tick"]),
        "zkcron: task tick is not paused\n"
    );

    // Pausing a task no node defines is refused.
    let out = cluster.zkcron(&["pause", "tock"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!(
            "zkcron: error: unknown task tock: no live node of cluster {CLUSTER} defines it; did \
             you mean tick?\n"
        )
    );
}

// ---------------------------------------------------------------------------------------------
// Trigger, history

/// A task that never fires by schedule (once a year) and exits `code` when run.
fn yearly(code: u8) -> String {
    format!(
        "schedule = \"0 0 1 1 *\"\ncommand = [\"/bin/sh\", \"-c\", \"echo said {code} >&2; exit {code}\"]\n"
    )
}

#[test]
fn trigger_wait_runs_the_task_on_its_leader_and_exits_with_its_success_and_history_shows_it() {
    let mut cluster = new_cluster();
    cluster.write_task("good", &yearly(0));
    cluster.write_task("bad", &yearly(3));
    cluster.start_node("a", "1.0.0", "");
    cluster.wait_status("a to lead both", |s| {
        task(s, "good")["leader"] == "a" && task(s, "bad")["leader"] == "a"
    });

    let out = cluster.zkcron(&["trigger", "good", "--wait"]);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{said}{}", stderr(&out));
    let lines: Vec<&str> = said.lines().collect();
    assert!(
        lines[0].starts_with("zkcron: task good: manual run requested, fire id good@manual-"),
        "{said}"
    );
    let fire_id = lines[0].rsplit(' ').next().unwrap();
    assert_eq!(
        fire_id.len(),
        "good@manual-".len() + 10,
        "10 digits: {fire_id}"
    );
    assert!(
        lines[1].starts_with(&format!("{fire_id}: succeeded on a after ")),
        "{said}"
    );
    assert!(lines[1].ends_with("(exit code 0, 1 attempt(s))"), "{said}");

    let out = cluster.zkcron(&["trigger", "bad", "--wait"]);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{said}{}", stderr(&out));
    assert!(
        said.lines()
            .nth(1)
            .unwrap()
            .contains(": failed on a after "),
        "{said}"
    );
    assert!(said.contains("(exit code 3, 1 attempt(s))"), "{said}");

    // The ended triggers stay for the nodes' clean-up (ten minutes), so status shows them.
    let mut left = cluster.zk.children(&format!(
        "{}/zkcron/{CLUSTER}/control/triggers",
        chroot(&cluster.connect)
    ));
    left.sort();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left[1].starts_with("good@manual-"), "{left:?}");

    // History: newest first, in JSON exactly the documented keys.
    let history: Value = serde_json::from_str(&cluster.ok(&["history", "good", "--json"])).unwrap();
    let runs = history.as_array().unwrap();
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    let mut keys: Vec<&str> = run
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "attempts",
            "duration_ms",
            "exit_code",
            "fire_id",
            "node",
            "release",
            "signal",
            "started_at",
            "success",
            "tick",
            "trigger"
        ]
    );
    assert_eq!(run["fire_id"], fire_id);
    assert_eq!(run["node"], "a");
    assert_eq!(run["release"], "1.0.0");
    assert_eq!(run["exit_code"], 0);
    assert_eq!(run["signal"], Value::Null);
    assert_eq!(run["success"], true);
    assert_eq!(run["attempts"], 1);
    assert_eq!(run["trigger"], "manual");
    let human = cluster.ok(&["history", "bad"]);
    let rows: Vec<Vec<&str>> = human
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        [
            "FIRE", "ID", "TICK", "NODE", "RELEASE", "STARTED", "DURATION", "RESULT", "ATTEMPTS",
            "TRIGGER", "LAST", "LINE"
        ]
    );
    assert_eq!(rows.len(), 2, "{human}");
    assert!(rows[1][0].starts_with("bad@manual-"));
    assert_eq!(&rows[1][2..4], ["a", "1.0.0"]);
    // A failure's last line of output, stored with its end.
    assert_eq!(&rows[1][6..], ["exit", "3", "1", "manual", "said", "3"]);
    let bad: Value = serde_json::from_str(&cluster.ok(&["history", "bad", "--json"])).unwrap();
    assert_eq!(bad[0]["output_tail"], "said 3");
    assert_eq!(run.get("output_tail"), None, "a success stores no tail");

    // status shows the manual run as the last one.
    let status = cluster.status();
    assert_eq!(task(&status, "bad")["last"]["exit_code"], 3);
    assert_eq!(task(&status, "bad")["last"]["success"], false);

    // A task no live node defines is refused before anything is written.
    let out = cluster.zkcron(&["trigger", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).starts_with("zkcron: error: unknown task nope: no live node"));
    let out = cluster.zkcron(&["history", "nope"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn trigger_wait_gives_up_after_30_s_when_no_node_may_run_the_task_and_withdraws_it() {
    let mut cluster = new_cluster();
    cluster.write_task("future", &format!("{}version_req = \">=2.0\"\n", yearly(0)));
    cluster.start_node("a", "1.0.0", "");
    // Without --wait the request stays for a node that may run it, and the CLI says why.
    let out = cluster.zkcron(&["trigger", "future"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "zkcron: note: no live node may run it: version_req >=2.0 matches none of a (1.0.0); the \
         run waits until a node may run the task (`zkcron explain future`)\n"
    );
    let pending = format!(
        "{}/zkcron/{CLUSTER}/control/triggers/future@manual-0000000000",
        chroot(&cluster.connect)
    );
    cluster
        .zk
        .with_client(async |client| client.delete(&pending, None).await.unwrap());
    // The test measures the CLI's real wait.
    #[allow(clippy::disallowed_methods)]
    let asked = Instant::now();
    let out = cluster.zkcron(&["trigger", "future", "--wait"]);
    let waited = asked.elapsed();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        (Duration::from_secs(30)..Duration::from_secs(45)).contains(&waited),
        "gave up after {waited:?}, not 30 s"
    );
    assert_eq!(
        stderr(&out),
        "zkcron: error: future@manual-0000000001 did not start within 30s: not eligible: no live \
         node may run it: version_req >=2.0 matches none of a (1.0.0); the request is withdrawn\n"
    );
    let left = cluster.zk.children(&format!(
        "{}/zkcron/{CLUSTER}/control/triggers",
        chroot(&cluster.connect)
    ));
    assert!(left.is_empty(), "withdrawn: {left:?}");
}

#[test]
fn trigger_wait_says_when_the_node_running_the_task_is_lost() {
    let mut cluster = new_cluster();
    let started = cluster.path().join("started");
    cluster.write_task(
        "slow",
        &format!(
            "schedule = \"0 0 1 1 *\"\ncommand = [\"/bin/sh\", \"-c\", 'echo x > {}; sleep 60']\n",
            started.display()
        ),
    );
    cluster.start_node("a", "1.0.0", "");
    cluster.wait_status("a to lead slow", |s| task(s, "slow")["leader"] == "a");
    let mut command = crate::common::zkcron();
    command
        .args(["trigger", "slow", "--wait"])
        .args(["--zookeeper", &cluster.connect, "--cluster", CLUSTER])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Tied to this process: a failing test leaves no CLI waiting behind.
    let mut waiting = zk::spawn_tied_to_process(command).unwrap();
    crate::common::wait_for("the manual run to start", LIMIT, || started.exists());
    // kill -9 of the node (and its job): its session ends after the 3 s timeout.
    cluster.nodes.remove("a");
    let mut status = None;
    crate::common::wait_for("trigger --wait to exit", LIMIT, || {
        status = waiting.try_wait().unwrap();
        status.is_some()
    });
    let out = waiting.wait_with_output().unwrap();
    assert_eq!(status.unwrap().code(), Some(1));
    assert_eq!(
        stderr(&out),
        "zkcron: error: node a was lost while running it (slow@manual-0000000000)\n"
    );
}

/// The chroot of a connect string (`host:port/chroot`).
fn chroot(connect: &str) -> &str {
    &connect[connect.find('/').unwrap()..]
}

// ---------------------------------------------------------------------------------------------
// Reaching the cluster

#[test]
#[allow(clippy::disallowed_methods)] // measures a real deadline
fn a_cluster_command_that_cannot_reach_zookeeper_says_so_and_exits_1() {
    let port = zk::free_port();
    let connect = format!("127.0.0.1:{port}");
    let started = Instant::now();
    let out = crate::common::run_zkcron(&["status", "--zookeeper", &connect]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with(&format!(
            "zkcron: error: cannot reach ZooKeeper at {connect}"
        )),
        "{}",
        stderr(&out)
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "a bounded wait"
    );
}

#[test]
fn a_cluster_no_node_ever_joined_is_named() {
    let connect = zk::shared().chroot_connect();
    let out = crate::common::run_zkcron(&["status", "--zookeeper", &connect, "--cluster", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("zkcron: error: there is no cluster \"nope\" at 127.0.0.1:"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("check --cluster or [coordination.zookeeper] cluster"));
}

#[test]
fn usage_errors_exit_2() {
    let out = crate::common::run_zkcron(&["history"]);
    assert_eq!(out.status.code(), Some(2));
    let out = crate::common::run_zkcron(&["history", "t", "-n", "0"]);
    assert_eq!(out.status.code(), Some(2));
}

// ---------------------------------------------------------------------------------------------
// The local backend

fn local_config(dir: &Path) -> PathBuf {
    let path = dir.join("zkcron.toml");
    fs::write(&path, "").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    path
}

#[test]
fn explain_and_drain_are_cluster_commands() {
    let dir = crate::common::tempdir();
    let config = local_config(dir.path());
    for (command, args) in [
        ("explain", vec!["explain", "t"]),
        ("drain", vec!["drain"]),
        ("undrain", vec!["undrain", "n"]),
    ] {
        let mut all: Vec<&str> = args.clone();
        all.extend(["--config", config.to_str().unwrap()]);
        let out = crate::common::run_zkcron(&all);
        assert_eq!(out.status.code(), Some(1), "{command}");
        assert_eq!(
            stderr(&out),
            format!(
                "zkcron: error: `zkcron {command}` is a cluster command: this host uses the local \
                 backend (set --zookeeper or [coordination] backend)\n"
            )
        );
    }
}

#[test]
fn local_commands_without_a_daemon_name_the_state_dir_and_how_to_start_it() {
    let dir = crate::common::tempdir();
    let config = local_config(dir.path());
    let state = dir.path().join("state");
    fs::create_dir(&state).unwrap();
    let out = crate::common::run_zkcron(&[
        "status",
        "--config",
        config.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!(
            "zkcron: error: cannot reach the zkcron daemon at {sock}: no zkcron daemon is running \
             with this state dir; this host uses the local backend, whose daemon answers this \
             command: start it (`systemctl start zkcron`, or `zkcron run --state-dir {state}`), \
             or point --state-dir or [scheduler] state_dir at its state dir\n",
            sock = state.join("zkcron.sock").display(),
            state = state.display()
        )
    );
}

#[test]
fn the_local_backend_answers_status_trigger_history_pause_and_resume_through_its_socket() {
    let scratch = crate::common::Scratch::new();
    scratch.write_task("good", &yearly(0));
    scratch.write_task("bad", &yearly(4));
    let mut daemon = scratch.start_daemon(&[]);
    let state = scratch.path().join("state");
    let socket = state.join("zkcron.sock");
    let mode = fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "only the daemon's user may use the socket");
    let run = |args: &[&str]| scratch.cli(args);

    let out = run(&["status", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["backend"], "local");
    assert_eq!(status["cluster"], Value::Null);
    let me = node(&status, "test-node");
    assert_eq!(me["drained"], false);
    assert_eq!(me["tasks_led"], 2);
    let good = task(&status, "good");
    assert_eq!(good["leader"], "test-node");
    assert_eq!(good["paused"], false);
    assert_eq!(good["last"], Value::Null);
    assert_eq!(good["problem"], Value::Null);
    let next = good["next"].as_str().unwrap();
    assert!(next.ends_with("-01-01T00:00:00Z"), "{next}");
    let human = String::from_utf8(run(&["status"]).stdout).unwrap();
    assert!(human.starts_with("local backend, at "), "{human}");

    let out = run(&["trigger", "good", "--wait"]);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{said}{}", stderr(&out));
    assert!(said.contains(": succeeded on test-node after "), "{said}");
    let out = run(&["trigger", "bad", "--wait"]);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{said}{}", stderr(&out));
    assert!(said.contains("(exit code 4, 1 attempt(s))"), "{said}");

    let history: Value =
        serde_json::from_slice(&run(&["history", "bad", "--json"]).stdout).unwrap();
    assert_eq!(history.as_array().unwrap().len(), 1);
    assert_eq!(history[0]["exit_code"], 4);
    assert_eq!(history[0]["trigger"], "manual");
    let status: Value = serde_json::from_slice(&run(&["status", "--json"]).stdout).unwrap();
    assert_eq!(task(&status, "bad")["last"]["exit_code"], 4);

    let out = run(&["pause", "good"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("zkcron: task good paused"));
    let status: Value = serde_json::from_slice(&run(&["status", "--json"]).stdout).unwrap();
    assert_eq!(task(&status, "good")["paused"], true);
    assert_eq!(task(&status, "good")["problem"], "paused");
    assert_eq!(
        String::from_utf8(run(&["pause", "good"]).stdout).unwrap(),
        "zkcron: task good is already paused\n"
    );
    let out = run(&["resume", "good"]);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("zkcron: task good resumed"));
    let status: Value = serde_json::from_slice(&run(&["status", "--json"]).stdout).unwrap();
    assert_eq!(task(&status, "good")["paused"], false);

    let out = run(&["pause", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("zkcron: error: unknown task nope: the daemon runs no task nope"),
        "{}",
        stderr(&out)
    );
    let out = run(&["explain", "good"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("`zkcron explain` is a cluster command"));

    // Something that is not a request gets an error reply, not a hang.
    {
        use std::io::{BufRead, Write};
        let mut stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
        stream.write_all(b"hello\n").unwrap();
        let mut reply = String::new();
        std::io::BufReader::new(&stream)
            .read_line(&mut reply)
            .unwrap();
        let reply: Value = serde_json::from_str(&reply).unwrap();
        assert_eq!(reply["ok"], false);
        assert!(
            reply["error"]
                .as_str()
                .unwrap()
                .starts_with("not a zkcron request: "),
            "{reply}"
        );
    }

    // A stopped daemon takes its socket with it.
    daemon.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(daemon.wait_exit(LIMIT), Some(0), "{}", daemon.log());
    assert!(!socket.exists(), "the socket outlived the daemon");
    // The history is written behind the runs, and all of it by the daemon's exit.
    let stored: Value =
        serde_json::from_slice(&fs::read(state.join("history").join("bad.json")).unwrap()).unwrap();
    assert_eq!(stored["runs"].as_array().unwrap().len(), 1, "{stored}");
    assert_eq!(stored["runs"][0]["fire_id"], history[0]["fire_id"]);
}

#[test]
fn a_daemon_that_cannot_serve_its_socket_says_so_and_runs_on() {
    let scratch = crate::common::Scratch::new();
    scratch.write_task("good", &yearly(0));
    scratch.write_task(
        "tick",
        &format!(
            "schedule = \"* * * * * *\"\ncommand = [\"/bin/sh\", \"-c\", 'echo \"$ZKCRON_FIRE_ID\" >> {}']\n",
            scratch.out("tick").display()
        ),
    );
    // A Unix socket's path is limited to 107 bytes: this state dir's socket is longer.
    let state = scratch.path().join("s".repeat(120));
    let mut command = scratch.daemon_command();
    command
        .arg("--state-dir")
        .arg(&state)
        .args(["--node-id", "test-node"]);
    let daemon = scratch.spawn_daemon(command);
    daemon.wait_for_log("zkcron started", LIMIT);
    let log = daemon.log();
    assert!(
        log.contains(
            "cannot serve the control socket: zkcron status, history, trigger, pause and resume \
             cannot reach this daemon"
        ),
        "{log}"
    );
    assert!(
        log.contains(&format!("{}", state.join("zkcron.sock").display())),
        "{log}"
    );
    // And runs on: its every-second task fires twice more after it said so.
    let fired = scratch.lines("tick").len();
    crate::common::wait_for("the daemon to fire on", LIMIT, || {
        scratch.lines("tick").len() >= fired + 2
    });
    assert!(
        crate::common::process_alive(daemon.child.id() as i32),
        "{}",
        daemon.log()
    );
}
