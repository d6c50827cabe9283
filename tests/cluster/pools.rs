//! Tasks that run on every node (`run_on = "every_node"`) and pooled tasks (`work_items`) on a
//! real ZooKeeper with real nodes. An every-node task: each node holds its own unit of the task
//! (`leases/<task>@<node-id>`), and its jobs' own output (`fires.log`: `<fire id> <node id>`
//! per run) shows each node running each tick once, through a kill -9 and a restart of one of
//! them. A pooled task: each node runs the items it owns (`items.log`: `<fire id> <item>
//! <node id>` per item run), each (tick, item) once, through joins, leaves, a kill -9, a
//! drain and a rolling upgrade (each item held as the ranking says, newer releases first);
//! `explain`, `status`, `/metrics` and the task page say which node runs which items.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::cluster::Cluster;
use crate::common::fires::Fires;
use crate::common::wall::{now, wait_mid_second};

/// A generous deadline for things that take a moment (start-up, convergence, an expiry).
const LIMIT: Duration = Duration::from_secs(30);

const NODES: [&str; 3] = ["n1", "n2", "n3"];

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

/// Starts a node of each of `ids` and waits for each to run a tick of `each`.
fn start_running(cluster: &mut Cluster, ids: &[&str]) {
    for id in ids {
        cluster.start(cluster.new_node(id));
    }
    cluster.wait("every node to run a tick", LIMIT, |c| {
        let fires = c.fires();
        ids.iter().all(|n| fires.fired_by("each", n))
    });
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
    start_running(&mut cluster, &["n1", "n2"]);
    let cli = |args: &[&str]| cluster.zkcron_ok(args);
    wait_mid_second();
    let paused_at = now().floor() as i64;
    cli(&["pause", "each"]);
    crate::common::wait_for("4 seconds of pause", LIMIT, || {
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
    start_running(&mut cluster, &["n1", "n2"]);
    let from = now().floor() as i64 + 1;
    let cli = |verb: &str| cluster.zkcron_ok(&[verb, "n2"]);
    wait_mid_second();
    let drained_at = now().floor() as i64;
    cli("drain");
    cluster.wait("n2 to give its unit up", LIMIT, |c| {
        !c.znode_owners("leases").contains_key("each@n2")
    });
    crate::common::wait_for("3 seconds drained", LIMIT, || {
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
    start_running(&mut cluster, &["n1", "n2"]);
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

// ---- pooled tasks ----

/// How many items the pooled tests' task `pool` has (but the rolling upgrade's).
const ITEMS: usize = 12;

/// One run of one item, from `items.log`.
#[derive(Debug, Clone, PartialEq)]
struct ItemRun {
    second: i64,
    item: String,
    node: String,
    /// `ZKCRON_WORK_TOTAL`, checked to be the pool's size.
    total: usize,
    /// When the job started, on the wall clock (`date +%s.%N`): the tick says which run it
    /// was, this says when it ran (a caught-up tick runs long after its second).
    started: f64,
}

/// [`pooled_cluster_of`] [`ITEMS`] items.
fn pooled_cluster() -> Cluster {
    pooled_cluster_of(ITEMS)
}

/// An every-second task `pool` of `items` items whose job appends `<fire id> <item> <node>
/// <total> <start>` to `items.log` per item it is given (`<start>`: when the job started, Unix
/// seconds with nanoseconds); every missed tick is caught up.
fn pooled_cluster_of(items: usize) -> Cluster {
    let cluster = Cluster::new();
    let text = format!(
        "schedule = \"* * * * * *\"\n\
         command = [\"/bin/sh\", \"-c\", 'start=$(date +%s.%N); for item in $(echo \"$ZKCRON_WORK_ITEMS\" | tr , \" \"); do echo \"$ZKCRON_FIRE_ID $item $ZKCRON_NODE $ZKCRON_WORK_TOTAL $start\" >> {log}; done']\n\
         work_items = {items}\n\
         catch_up = \"all\"\n\
         starting_deadline = \"1m\"\n\
         overlap = \"allow\"\n",
        log = items_log(&cluster).display()
    );
    cluster.write_task("pool", &text);
    cluster
}

fn items_log(cluster: &Cluster) -> std::path::PathBuf {
    cluster.path().join("items.log")
}

/// The number of items of the task `pool`, from its task file.
fn pool_size(cluster: &Cluster) -> usize {
    let text = std::fs::read_to_string(cluster.jobs().join("pool.toml")).unwrap();
    let line = text.lines().find_map(|l| l.strip_prefix("work_items = "));
    line.expect("a work_items line").parse().unwrap()
}

/// The item runs in `items.log` (complete lines), checked to say the pool's size.
fn item_runs(cluster: &Cluster) -> Vec<ItemRun> {
    let text = std::fs::read_to_string(items_log(cluster)).unwrap_or_default();
    let complete = &text[..text.rfind('\n').map_or(0, |end| end + 1)];
    let total = pool_size(cluster);
    complete
        .lines()
        .map(|line| {
            let words: Vec<&str> = line.split(' ').collect();
            assert_eq!(words.len(), 5, "malformed line {line:?}");
            assert_eq!(words[3], total.to_string(), "ZKCRON_WORK_TOTAL in {line:?}");
            let second = words[0].strip_prefix("pool@").expect("the fire id").parse();
            ItemRun {
                second: second.expect("a unix second"),
                item: words[1].to_string(),
                node: words[2].to_string(),
                total,
                started: words[4].parse().expect("the job's start time"),
            }
        })
        .collect()
}

/// The (tick, item) pairs run more than once, with the nodes that ran them.
fn items_twice(runs: &[ItemRun]) -> BTreeMap<(i64, String), Vec<String>> {
    let mut by_pair: BTreeMap<(i64, String), Vec<String>> = BTreeMap::new();
    for run in runs {
        by_pair
            .entry((run.second, run.item.clone()))
            .or_default()
            .push(run.node.clone());
    }
    by_pair.retain(|_, nodes| nodes.len() > 1);
    by_pair
}

/// The number of items each node ran at `second`.
fn shares_at(runs: &[ItemRun], second: i64) -> BTreeMap<String, usize> {
    let mut shares = BTreeMap::new();
    for run in runs.iter().filter(|r| r.second == second) {
        *shares.entry(run.node.clone()).or_default() += 1;
    }
    shares
}

/// Whether every item ran at every second of `from..=to`.
fn all_items_ran(runs: &[ItemRun], from: i64, to: i64) -> bool {
    (from..=to).all(|second| {
        let at: Vec<&ItemRun> = runs.iter().filter(|r| r.second == second).collect();
        let items: std::collections::BTreeSet<&str> = at.iter().map(|r| r.item.as_str()).collect();
        at.first().is_some_and(|run| items.len() == run.total)
    })
}

/// Starts a node of each of `ids` and waits until every item runs each tick.
fn start_pool(cluster: &mut Cluster, ids: &[&str]) -> i64 {
    for id in ids {
        cluster.start(cluster.new_node(id));
    }
    wait_all_items_from(
        cluster,
        "every item to run each tick",
        now().floor() as i64 + 1,
    )
}

/// Waits for a second from `from` on at which every item ran on the shares of the pool over
/// the nodes running now, and two more seconds of every item; the first of those seconds.
fn wait_all_items_from(cluster: &Cluster, what: &str, from: i64) -> i64 {
    let mut settled = None;
    cluster.wait(what, LIMIT, |c| {
        let runs = item_runs(c);
        let last = runs.iter().map(|r| r.second).max().unwrap_or(0);
        settled = (from..=last - 2).find(|&s| all_items_ran(&runs, s, s + 2));
        settled.is_some()
    });
    settled.expect("waited for")
}

/// Asserts that every item ran at every second of `from..=to`, naming the (tick, item) pairs
/// that did not.
#[track_caller]
fn assert_every_item_from(cluster: &Cluster, from: i64, to: i64) {
    let runs = item_runs(cluster);
    let total = pool_size(cluster);
    let missing: Vec<(i64, usize)> = (from..=to)
        .flat_map(|second| (0..total).map(move |item| (second, item)))
        .filter(|(second, item)| {
            !runs
                .iter()
                .any(|r| r.second == *second && r.item == item.to_string())
        })
        .collect();
    assert!(
        missing.is_empty(),
        "(tick, item) pairs never run: {missing:?}\n{}",
        cluster.logs()
    );
}

/// Asserts that no (tick, item) ran twice.
#[track_caller]
fn assert_none_twice(cluster: &Cluster) {
    let twice = items_twice(&item_runs(cluster));
    assert!(
        twice.is_empty(),
        "(tick, item) pairs run twice: {twice:?}\n{}",
        cluster.logs()
    );
}

#[test]
fn given_a_pooled_task_on_three_nodes_then_each_tick_runs_every_item_once_in_even_shares_and_a_trigger_all_on_one_node()
 {
    let mut cluster = pooled_cluster();
    let settled = start_pool(&mut cluster, &NODES);
    // Every item's unit is held, by one of the three; the task itself has no lease.
    let leases = cluster.znode_owners("leases");
    assert_eq!(leases.len(), ITEMS, "{leases:?}");
    assert!(leases.keys().all(|l| l.starts_with("pool@")), "{leases:?}");
    let later = settled + 2;
    cluster.wait("two more seconds of every item", LIMIT, |c| {
        all_items_ran(&item_runs(c), later, later + 1)
    });
    let runs = item_runs(&cluster);
    for second in later..=later + 1 {
        let shares = shares_at(&runs, second);
        let even: Vec<usize> = shares.values().copied().collect();
        assert_eq!(even, [4, 4, 4], "shares at {second}: {shares:?}");
    }
    assert_none_twice(&cluster);
    // The history records each node's run with its items.
    let history: serde_json::Value =
        serde_json::from_str(&cluster.zkcron_ok(&["history", "pool", "-n", "300", "--json"]))
            .unwrap();
    let fire_id = format!("pool@{later}");
    let runs: Vec<&serde_json::Value> = history
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["fire_id"] == fire_id.as_str())
        .collect();
    let mut items: Vec<&str> = runs
        .iter()
        .flat_map(|r| r["items"].as_array().unwrap())
        .map(|i| i.as_str().unwrap())
        .collect();
    items.sort_by_key(|i| i.parse::<usize>().unwrap());
    let all: Vec<String> = (0..ITEMS).map(|i| i.to_string()).collect();
    assert_eq!(runs.len(), 3, "{history:#}");
    assert_eq!(items, all, "{history:#}");
    // A manual run runs once, on one node, with every item (its fire id is no tick's, so
    // items.log is read as text from here on).
    cluster.zkcron_ok(&["trigger", "pool", "--wait"]);
    let log = std::fs::read_to_string(items_log(&cluster)).unwrap();
    let manual: Vec<Vec<&str>> = log
        .lines()
        .filter(|l| l.starts_with("pool@manual-"))
        .map(|l| l.split(' ').collect())
        .collect();
    let mut items: Vec<&str> = manual.iter().map(|words| words[1]).collect();
    items.sort_by_key(|i| i.parse::<usize>().unwrap());
    assert_eq!(items, all, "{log}");
    assert!(manual.iter().all(|w| w[2] == manual[0][2]), "{log}");
}

#[test]
fn given_a_pooled_task_when_a_node_joins_and_one_leaves_then_items_move_and_none_runs_twice() {
    let mut cluster = pooled_cluster();
    let first = start_pool(&mut cluster, &NODES);
    wait_mid_second();
    let joined_at = now().floor() as i64;
    cluster.start(cluster.new_node("n4"));
    let settled = wait_all_items_from(&cluster, "every item after the join", joined_at);
    cluster.wait("n4 to run its share", LIMIT, |c| {
        let runs = item_runs(c);
        let last = runs.iter().map(|r| r.second).max().unwrap_or(0);
        (settled..last).any(|s| shares_at(&runs, s).values().eq([3, 3, 3, 3].iter()))
    });
    wait_mid_second();
    let left_at = now().floor() as i64;
    cluster.stop("n2");
    let settled = wait_all_items_from(&cluster, "every item after n2 left", left_at + 1);
    let runs = item_runs(&cluster);
    assert!(
        !runs
            .iter()
            .any(|r| r.node == "n2" && r.second > left_at + 1),
        "n2 ran after it stopped"
    );
    let shares = shares_at(&runs, settled);
    assert_eq!(
        shares.values().copied().collect::<Vec<_>>(),
        [4, 4, 4],
        "{shares:?}"
    );
    // A moved item's missed ticks are caught up by its new owner: none is missing.
    assert_every_item_from(&cluster, first, settled + 2);
    assert_none_twice(&cluster);
}

/// The items `node` ran at `second`.
fn items_of(runs: &[ItemRun], node: &str, second: i64) -> Vec<String> {
    let mut items: Vec<String> = runs
        .iter()
        .filter(|r| r.node == node && r.second == second)
        .map(|r| r.item.clone())
        .collect();
    items.sort();
    items
}

/// For each of `items`, when its first run on a node other than `gone` that started after
/// `since` (wall clock) started, once each of them has one; `None` while one has not.
fn first_starts_elsewhere(
    runs: &[ItemRun],
    items: &[String],
    gone: &str,
    since: f64,
) -> Option<BTreeMap<String, f64>> {
    items
        .iter()
        .map(|item| {
            let first = runs
                .iter()
                .filter(|r| &r.item == item && r.node != gone && r.started > since)
                .map(|r| r.started)
                .min_by(f64::total_cmp)?;
            Some((item.clone(), first))
        })
        .collect()
}

/// Waits until each of `items` ran on a node other than `gone` in a run that started after
/// `since`, and asserts that each such first run started within `bound` of `since`.
#[track_caller]
fn assert_moved_within(
    cluster: &Cluster,
    items: &[String],
    gone: &str,
    since: f64,
    bound: Duration,
) {
    let mut starts = None;
    cluster.wait(
        &format!("each of {gone}'s items {items:?} to run on another node"),
        LIMIT,
        |c| {
            starts = first_starts_elsewhere(&item_runs(c), items, gone, since);
            starts.is_some()
        },
    );
    let late: Vec<(String, f64)> = starts
        .expect("waited for")
        .into_iter()
        .map(|(item, started)| (item, started - since))
        .filter(|(_, after)| *after > bound.as_secs_f64())
        .collect();
    assert!(
        late.is_empty(),
        "items of {gone} first ran elsewhere later than {bound:?} after it went (item, \
         seconds after): {late:?}\n{}",
        cluster.logs()
    );
}

#[test]
fn given_a_pooled_task_when_an_owner_is_killed_then_its_items_run_on_the_others_within_the_session_timeout_and_a_second()
 {
    let mut cluster = pooled_cluster();
    let first = start_pool(&mut cluster, &NODES);
    wait_mid_second();
    let killed = now();
    let killed_at = killed.floor() as i64;
    let owned = items_of(&item_runs(&cluster), "n3", killed_at);
    assert!(!owned.is_empty(), "n3 ran no item at {killed_at}");
    drop(cluster.nodes.remove("n3"));
    // Its session expires after the session timeout (3 s); within a second more the others
    // start its items (a caught-up tick is a run that starts then too).
    let bound = cluster.session_timeout + Duration::from_secs(1);
    assert_moved_within(&cluster, &owned, "n3", killed, bound);
    let settled = wait_all_items_from(&cluster, "every item after the kill", killed_at + 1);
    let runs = item_runs(&cluster);
    let after_kill: Vec<&ItemRun> = runs
        .iter()
        .filter(|r| r.node == "n3" && r.started > killed)
        .collect();
    assert!(after_kill.is_empty(), "n3 ran while killed: {after_kill:?}");
    // The new owners catch the killed node's missed ticks up (catch_up = "all").
    assert_every_item_from(&cluster, first, settled + 2);
    assert_none_twice(&cluster);
}

#[test]
fn given_a_pooled_task_when_a_node_is_drained_then_its_items_move_within_a_second() {
    let mut cluster = pooled_cluster();
    let first = start_pool(&mut cluster, &NODES);
    wait_mid_second();
    let drained_at = now().floor() as i64;
    let owned = items_of(&item_runs(&cluster), "n2", drained_at);
    assert!(!owned.is_empty(), "n2 ran no item at {drained_at}");
    cluster.zkcron_ok(&["drain", "n2"]);
    // From the moment `zkcron drain` returned: within a second, n2 starts no run and the
    // others have started each of its items.
    let drained = now();
    let bound = Duration::from_secs(1);
    assert_moved_within(&cluster, &owned, "n2", drained, bound);
    // The shares of a tick due once n2 stopped: n1 and n3 alone.
    let after = (drained + bound.as_secs_f64()).ceil() as i64;
    let settled = wait_all_items_from(&cluster, "every item after the drain", after);
    let runs = item_runs(&cluster);
    let late: Vec<&ItemRun> = runs
        .iter()
        .filter(|r| r.node == "n2" && r.started > drained + bound.as_secs_f64())
        .collect();
    assert!(late.is_empty(), "n2 ran while drained: {late:?}");
    assert_eq!(
        shares_at(&runs, settled)
            .values()
            .copied()
            .collect::<Vec<_>>(),
        [6, 6]
    );
    assert_every_item_from(&cluster, first, settled + 2);
    assert_none_twice(&cluster);
}

/// Whether every item of `pool`, per `zkcron explain pool --json`, is held by the owner the
/// assignment gives it, and ranked as releases rank: an item of one of the `newer` nodes is
/// owned at a rank within theirs (they rank before every older node), an older node's below.
fn held_as_ranked(cluster: &Cluster, newer: &[&str]) -> Result<(), String> {
    let explain = cluster.zkcron_ok(&["explain", "pool", "--json"]);
    let explain: serde_json::Value = serde_json::from_str(&explain).unwrap();
    let items = explain["pool"]["items"].as_array().unwrap();
    let ranked = |i: &serde_json::Value| {
        let rank = i["rank"].as_u64().unwrap_or(0) as usize;
        let newer_owns = newer.iter().any(|n| i["owner"] == *n);
        rank > 0 && (rank <= newer.len()) == newer_owns
    };
    let wrong: Vec<&serde_json::Value> = items
        .iter()
        .filter(|i| i["owner"].is_null() || i["owner"] != i["holder"] || !ranked(i))
        .collect();
    if wrong.is_empty() && items.len() == pool_size(cluster) {
        Ok(())
    } else {
        Err(format!(
            "items not held as ranked: {wrong:?} in {explain:#}"
        ))
    }
}

/// Waits until [`held_as_ranked`] holds, for [`LIMIT`]; fails with what it saw last.
#[allow(clippy::disallowed_methods)] // real processes, real deadline
fn wait_held_as_ranked(cluster: &Cluster, newer: &[&str], when: &str) {
    let deadline = std::time::Instant::now() + LIMIT;
    while let Err(wrong) = held_as_ranked(cluster, newer) {
        if std::time::Instant::now() > deadline {
            panic!("{when}: {wrong}\n{}", cluster.diagnostics());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn given_a_pool_on_three_1_0_nodes_when_each_restarts_at_1_1_in_turn_then_items_are_held_as_ranked_and_none_runs_twice_or_is_lost()
 {
    let mut cluster = pooled_cluster_of(6);
    cluster.start_each_at(&NODES, "1.0.0");
    let first = wait_all_items_from(&cluster, "every item on 1.0.0", now().floor() as i64 + 1);
    let mut newer = Vec::new();
    wait_held_as_ranked(&cluster, &newer, "on three 1.0.0 nodes");
    for id in NODES {
        // SIGTERM in the middle of a second, then the same node at the newer release.
        wait_mid_second();
        cluster.stop(id);
        wait_held_as_ranked(&cluster, &newer, &format!("once {id} stopped"));
        newer.push(id);
        let node = crate::common::zk::ClusterNode {
            release: Some("1.1.0".into()),
            ..cluster.new_node(id)
        };
        cluster.start(node);
        wait_held_as_ranked(&cluster, &newer, &format!("once {id} is back at 1.1.0"));
    }
    let to = now().floor() as i64 + 1;
    cluster.wait("every item to run a tick after the upgrade", LIMIT, |c| {
        all_items_ran(&item_runs(c), to, to)
    });
    assert_every_item_from(&cluster, first, to);
    assert_none_twice(&cluster);
}

#[test]
fn given_a_pooled_task_with_overlap_skip_then_a_node_skips_its_own_items_while_its_run_is_live() {
    let mut cluster = Cluster::new();
    let log = cluster.path().join("slow.log");
    let text = format!(
        "schedule = \"* * * * * *\"\n\
         command = [\"/bin/sh\", \"-c\", 'echo \"$ZKCRON_FIRE_ID $ZKCRON_WORK_ITEMS $ZKCRON_NODE\" >> {log}; sleep 1.5']\n\
         work_items = 4\n\
         overlap = \"skip\"\n",
        log = log.display()
    );
    cluster.write_task("slow", &text);
    for id in ["n1", "n2"] {
        cluster.start(cluster.new_node(id));
    }
    // Each node's items, from its last run, once the two runs' items are the pool's.
    let lines = || -> Vec<(i64, String, String)> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let words: Vec<&str> = l.split(' ').collect();
                let second = words.first()?.strip_prefix("slow@")?.parse().ok()?;
                Some((second, words.get(1)?.to_string(), words.get(2)?.to_string()))
            })
            .collect()
    };
    let mut shares: BTreeMap<String, String> = BTreeMap::new();
    cluster.wait("each node to run its share of the pool", LIMIT, |_| {
        shares = lines()
            .into_iter()
            .map(|(_, items, node)| (node, items))
            .collect();
        let mut all: Vec<&str> = shares.values().flat_map(|i| i.split(',')).collect();
        all.sort();
        shares.len() == 2 && all == ["0", "1", "2", "3"]
    });
    for (node, items) in &shares {
        let named = format!("work_items=\"{items}\"");
        cluster.wait(
            &format!("{node}'s skips to name its items {items}"),
            LIMIT,
            |c| {
                c.nodes[node.as_str()].log().lines().any(|l| {
                    l.contains("skipped: the previous run is still going") && l.contains(&named)
                })
            },
        );
    }
    // No node ran two seconds in a row once it ran its share: its run before was live.
    let lines = lines();
    for node in shares.keys() {
        let seconds: Vec<i64> = lines
            .iter()
            .filter(|(_, _, n)| n == node)
            .map(|(s, _, _)| *s)
            .collect();
        assert!(
            seconds.windows(2).all(|w| w[1] - w[0] >= 2),
            "{node} ran {seconds:?}"
        );
    }
    cluster.stop("n1");
    cluster.stop("n2");
}

/// The items per node of the cluster's one task, as `zkcron status --json` shows them.
fn status_shares(cluster: &Cluster) -> serde_json::Value {
    let status: serde_json::Value =
        serde_json::from_str(&cluster.zkcron_ok(&["status", "--json"])).unwrap();
    status["tasks"][0]["work_items"].clone()
}

#[test]
fn given_a_pool_then_explain_status_metrics_and_the_task_page_show_who_runs_which_items() {
    // Given 12 items over three nodes (n1 serves HTTP), a tick that is hours away.
    let mut cluster = Cluster::new();
    cluster.write_task(
        "shards",
        "schedule = \"0 3 * * *\"\ncommand = [\"true\"]\nwork_items = 12\n",
    );
    let n1 = crate::common::zk::ClusterNode {
        config: "[http]\nlisten = \"127.0.0.1:0\"\n".into(),
        ..cluster.new_node("n1")
    };
    let address = cluster.start(n1).served_address();
    for id in ["n2", "n3"] {
        cluster.start(cluster.new_node(id));
    }
    // Then status counts each node's items: four each, once their units are held.
    let even = serde_json::json!({"n1": 4, "n2": 4, "n3": 4});
    cluster.wait("four items' units on each node", LIMIT, |c| {
        status_shares(c) == even
    });
    // explain names each item's owner, the holder of its unit, and the shares.
    let explain: serde_json::Value =
        serde_json::from_str(&cluster.zkcron_ok(&["explain", "shards", "--json"])).unwrap();
    let items = explain["pool"]["items"].as_array().unwrap();
    assert_eq!(items.len(), 12, "{explain:#}");
    assert!(
        items
            .iter()
            .all(|i| i["owner"] == i["holder"] && i["rank"].is_u64()),
        "{explain:#}"
    );
    let text = cluster.zkcron_ok(&["explain", "shards"]);
    assert!(
        text.contains("  items:    12 over 3 node(s): n1 owns 4; n2 owns 4; n3 owns 4\n"),
        "{text}"
    );
    // /metrics gives the serving node's own items; the task page, every node's.
    let (_, metrics) = crate::common::http_get(&address, "/metrics");
    assert!(
        metrics.contains("zkcron_work_items{task=\"shards\"} 4"),
        "{metrics}"
    );
    let (code, page) = crate::common::http_get(&address, "/api/tasks/shards");
    assert_eq!(code, 200, "{page}");
    let page: serde_json::Value = serde_json::from_str(&page).unwrap();
    assert_eq!(page["explain"]["status"]["work_items"], even, "{page:#}");

    // When n3 is drained, its items move to the others: six each.
    cluster.zkcron_ok(&["drain", "n3"]);
    let moved = serde_json::json!({"n1": 6, "n2": 6});
    cluster.wait("n3's items on n1 and n2", LIMIT, |c| {
        status_shares(c) == moved
    });
    crate::common::wait_for("n1's metric to follow", LIMIT, || {
        crate::common::http_get(&address, "/metrics")
            .1
            .contains("zkcron_work_items{task=\"shards\"} 6")
    });
}
