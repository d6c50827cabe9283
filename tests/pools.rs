//! Tasks that run on every node (`run_on = "every_node"`) on a real ZooKeeper with real nodes:
//! each node holds its own unit of the task (`leases/<task>@<node-id>`), and its jobs' own
//! output (`fires.log`: `<fire id> <node id>` per run) shows each node running each tick once,
//! through a kill -9 and a restart of one of them.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::cluster::Cluster;
use common::fires::Fires;

/// A generous deadline for things that take a moment (start-up, convergence, an expiry).
const LIMIT: Duration = Duration::from_secs(30);

const NODES: [&str; 3] = ["n1", "n2", "n3"];

#[allow(clippy::disallowed_methods)] // real processes, real time
fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Waits for the middle of a second, far from the instants ticks are claimed and spawned at:
/// a node killed between its claim and its spawn loses that tick by design (at most once).
fn wait_mid_second() {
    common::wait_for("the middle of a second", Duration::from_secs(3), || {
        (0.35..0.65).contains(&now().fract())
    });
}

/// An every-second task `each` that runs on every node and catches its missed ticks up.
fn every_node_cluster() -> Cluster {
    let cluster = Cluster::new();
    let text = format!(
        "schedule = \"* * * * * *\"\n\
         command = [\"/bin/sh\", \"-c\", 'echo \"$ZKCRON_FIRE_ID $ZKCRON_NODE\" >> {fires}']\n\
         run_on = \"every_node\"\n\
         catch_up = \"all\"\n\
         starting_deadline = \"1m\"\n\
         overlap = \"allow\"\n",
        fires = cluster.fires_path().display()
    );
    cluster.write_task("each", &text);
    cluster
}

/// The seconds each node ran, each as often as it ran it.
fn seconds_by_node(fires: &Fires) -> BTreeMap<String, Vec<i64>> {
    let mut by_node: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for fire in &fires.0 {
        by_node
            .entry(fire.node.clone())
            .or_default()
            .push(fire.second);
    }
    by_node
}

/// The runs of a (tick, node) after its first: `<fire id> <node>` each.
fn run_twice(fires: &Fires) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    fires
        .0
        .iter()
        .map(|f| format!("{}@{} {}", f.task, f.second, f.node))
        .filter(|line| !seen.insert(line.clone()))
        .collect()
}

/// Whether `node` ran every second of `from..=to`.
fn ran_all(fires: &Fires, node: &str, from: i64, to: i64) -> bool {
    (from..=to).all(|second| fires.fired_by_at("each", node, second))
}

#[test]
fn given_an_every_node_task_then_each_node_runs_each_tick_once_and_a_killed_node_catches_its_own_up()
 {
    let mut cluster = every_node_cluster();
    for id in NODES {
        cluster.start(cluster.new_node(id));
    }
    // Each node holds its own unit, and the task itself has no lease.
    cluster.wait("a unit lease per node", LIMIT, |c| {
        let leases: Vec<String> = c.znode_owners("leases").into_keys().collect();
        leases == ["each@n1", "each@n2", "each@n3"]
    });
    cluster.wait("every node to run two ticks", LIMIT, |c| {
        let fires = c.fires();
        NODES
            .iter()
            .all(|n| fires.0.iter().filter(|f| f.node == *n).count() >= 2)
    });
    let from = now().floor() as i64 + 1;

    // kill -9 of n3 in the middle of a second; the others go on, and nobody runs its ticks.
    wait_mid_second();
    let killed_at = now().floor() as i64;
    drop(cluster.nodes.remove("n3"));
    cluster.wait("n1 and n2 to run 4 more ticks", LIMIT, |c| {
        let fires = c.fires();
        ["n1", "n2"]
            .iter()
            .all(|n| fires.fired_by_at("each", n, killed_at + 4))
    });
    assert!(
        !cluster.fires().fired_by_at("each", "n3", killed_at + 3),
        "n3 ran while killed:\n{}",
        cluster.diagnostics()
    );

    // Restarted, n3 takes its unit back once its old session expired, and catches up.
    wait_mid_second();
    cluster.start(cluster.new_node("n3"));
    let to = now().floor() as i64 + 2;
    cluster.wait(
        "every node to run every tick through the restart",
        LIMIT,
        |c| {
            let fires = c.fires();
            NODES.iter().all(|n| ran_all(&fires, n, from, to))
        },
    );
    let fires = cluster.fires();
    let twice = run_twice(&fires);
    assert!(
        twice.is_empty(),
        "ticks run twice on one node: {twice:?}\n{}",
        cluster.diagnostics()
    );
    let nodes: Vec<String> = seconds_by_node(&fires).into_keys().collect();
    assert_eq!(nodes, NODES, "{}", cluster.diagnostics());
}

#[test]
fn given_an_every_node_task_paused_then_resumed_then_no_node_catches_the_paused_period_up() {
    let mut cluster = every_node_cluster();
    for id in ["n1", "n2"] {
        cluster.start(cluster.new_node(id));
    }
    cluster.wait("both nodes to run a tick", LIMIT, |c| {
        let fires = c.fires();
        ["n1", "n2"].iter().all(|n| fires.fired_by("each", n))
    });
    let cli = |args: &[&str]| {
        let out = common::zkcron()
            .args(args)
            .args(["--zookeeper", &cluster.connect])
            .args(["--cluster", &cluster.name])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    wait_mid_second();
    let paused_at = now().floor() as i64;
    cli(&["pause", "each"]);
    common::wait_for("4 seconds of pause", LIMIT, || {
        now() > (paused_at + 4) as f64 + 0.5
    });
    let resumed_at = now().floor() as i64;
    cli(&["resume", "each"]);
    cluster.wait("both nodes to run after the resume", LIMIT, |c| {
        let fires = c.fires();
        ["n1", "n2"]
            .iter()
            .all(|n| fires.fired_by_at("each", n, resumed_at + 2))
    });
    let fires = cluster.fires();
    let during: Vec<String> = fires
        .0
        .iter()
        .filter(|f| (paused_at + 2..=resumed_at).contains(&f.second))
        .map(|f| format!("{}@{} {}", f.task, f.second, f.node))
        .collect();
    assert!(
        during.is_empty(),
        "ticks of the paused period ran: {during:?}\n{}",
        cluster.diagnostics()
    );

    // The history holds both nodes' runs under the task's fire ids; status names both nodes.
    let history: serde_json::Value =
        serde_json::from_str(&cli(&["history", "each", "-n", "200", "--json"])).unwrap();
    let runs = history.as_array().unwrap();
    for node in ["n1", "n2"] {
        let fire_id = format!("each@{}", resumed_at + 2);
        assert!(
            runs.iter()
                .any(|r| r["node"] == node && r["fire_id"] == fire_id.as_str()),
            "{node} {fire_id} in {history:#}"
        );
    }
    let status: serde_json::Value = serde_json::from_str(&cli(&["status", "--json"])).unwrap();
    assert_eq!(
        status["tasks"][0]["every_node"],
        serde_json::json!(["n1", "n2"])
    );
    assert_eq!(status["tasks"][0]["problem"], serde_json::Value::Null);
    // A manual run runs once, on one node (its job writes a line fires.log cannot parse, so
    // this comes last).
    cli(&["trigger", "each", "--wait"]);
    let history: serde_json::Value =
        serde_json::from_str(&cli(&["history", "each", "-n", "500", "--json"])).unwrap();
    let manual = history
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["trigger"] == "manual")
        .count();
    assert_eq!(manual, 1, "{history:#}");
}

#[test]
fn given_an_every_node_task_when_a_node_is_drained_then_it_runs_nothing_and_catches_up_once_undrained()
 {
    let mut cluster = every_node_cluster();
    for id in ["n1", "n2"] {
        cluster.start(cluster.new_node(id));
    }
    cluster.wait("both nodes to run a tick", LIMIT, |c| {
        let fires = c.fires();
        ["n1", "n2"].iter().all(|n| fires.fired_by("each", n))
    });
    let from = now().floor() as i64 + 1;
    let cli = |verb: &str| {
        let out = common::zkcron()
            .args([verb, "n2", "--zookeeper", &cluster.connect])
            .args(["--cluster", &cluster.name])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{verb}: {out:?}");
    };
    wait_mid_second();
    let drained_at = now().floor() as i64;
    cli("drain");
    cluster.wait("n2 to give its unit up", LIMIT, |c| {
        !c.znode_owners("leases").contains_key("each@n2")
    });
    common::wait_for("3 seconds drained", LIMIT, || {
        now() > (drained_at + 3) as f64 + 0.5
    });
    let fires = cluster.fires();
    assert!(
        !fires.fired_by_at("each", "n2", drained_at + 2),
        "n2 ran while drained:\n{}",
        cluster.diagnostics()
    );
    assert!(fires.fired_by_at("each", "n1", drained_at + 2));
    wait_mid_second();
    cli("undrain");
    let to = now().floor() as i64 + 2;
    cluster.wait("n2 to catch its drained ticks up", LIMIT, |c| {
        let fires = c.fires();
        ["n1", "n2"].iter().all(|n| ran_all(&fires, n, from, to))
    });
    let fires = cluster.fires();
    let twice = run_twice(&fires);
    assert!(
        twice.is_empty(),
        "run twice: {twice:?}\n{}",
        cluster.diagnostics()
    );
}

#[test]
fn given_an_every_node_task_when_a_node_joins_then_it_runs_from_its_join_on_and_the_others_go_on() {
    let mut cluster = every_node_cluster();
    for id in ["n1", "n2"] {
        cluster.start(cluster.new_node(id));
    }
    cluster.wait("both nodes to run a tick", LIMIT, |c| {
        let fires = c.fires();
        ["n1", "n2"].iter().all(|n| fires.fired_by("each", n))
    });
    let from = now().floor() as i64 + 1;
    wait_mid_second();
    let joined_at = now().floor() as i64;
    cluster.start(cluster.new_node("n3"));
    let to = now().floor() as i64 + 2;
    cluster.wait("every node to run through the join", LIMIT, |c| {
        let fires = c.fires();
        ran_all(&fires, "n1", from, to)
            && ran_all(&fires, "n2", from, to)
            && fires.fired_by_at("each", "n3", to)
    });
    let fires = cluster.fires();
    // A new node's unit has no fire record: nothing from before it joined is caught up.
    let early: Vec<i64> = fires
        .0
        .iter()
        .filter(|f| f.node == "n3" && f.second <= joined_at)
        .map(|f| f.second)
        .collect();
    assert!(early.is_empty(), "n3 ran ticks before it joined: {early:?}");
    let twice = run_twice(&fires);
    assert!(
        twice.is_empty(),
        "run twice: {twice:?}\n{}",
        cluster.diagnostics()
    );
}
