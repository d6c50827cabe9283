//! A cluster that heals from stale, foreign and skewed state, against a real ZooKeeper (see
//! `tests/common/zk.rs`): each test writes, changes or deletes znodes the way a stranger (a
//! script with zkCli.sh, a node of another release, a skewed clock) would, and checks that the
//! task keeps firing and that the node's log names the znode and the fix.
//!
//! Every test runs one task, `tick`, every second; its job appends `<fire id> <node>` to
//! `fires.log`. `catch_up = "skip"`, so a tick that did not fire leaves a gap.
//!
//! `ZKCRON_TEST_BIN=/path/to/zkcron cargo test --test cluster hostile` runs the nodes from another build
//! (e.g. a release before these fixes, to see the tests fail).

use std::fs;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::cluster::Cluster;
use crate::common::zk::{self, ClusterNode};
use crate::common::{DaemonProcess, wait_for};

const LIMIT: Duration = Duration::from_secs(30);

/// The cluster's root inside the test's chroot.
const BASE: &str = "/zkcron/default";

/// A test's cluster: the task `tick` in the shared jobs dir, firing every second with `overlap`.
fn world(overlap: &str) -> Cluster {
    let cluster = Cluster::new();
    cluster.write_task(
        "tick",
        &format!(
            "schedule = \"* * * * * *\"\ncommand = ['/bin/sh', '-c', 'echo \"$ZKCRON_FIRE_ID $ZKCRON_NODE\" >> {}']\ncatch_up = \"skip\"\noverlap = \"{overlap}\"\n",
            cluster.fires_path().display()
        ),
    );
    cluster
}

/// The seconds of the ticks that fired.
fn fired(world: &Cluster) -> Vec<i64> {
    world
        .fires()
        .0
        .iter()
        .filter(|fire| fire.task == "tick")
        .map(|fire| fire.second)
        .collect()
}

/// Waits until every second of `from..from + count` fired (the task fires every second
/// again), failing with the node's log.
fn wait_firing_from(world: &Cluster, from: i64, count: i64, node: &DaemonProcess) {
    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for(
            &format!("{count} consecutive ticks from {from}"),
            LIMIT,
            || {
                let fired = fired(world);
                let mut start = from;
                // The first run of `count` consecutive seconds at or after `from`.
                for second in from..now() {
                    if !fired.contains(&second) {
                        start = second + 1;
                    } else if second - start + 1 >= count {
                        return true;
                    }
                }
                false
            },
        )
    }));
    assert!(
        ok.is_ok(),
        "fired: {:?}\nthe log:\n{}",
        fired(world),
        node.log()
    );
}

/// Waits for the first fire, then returns the second after it.
fn wait_first_fire(world: &Cluster, node: &DaemonProcess) -> i64 {
    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for("the first fire", LIMIT, || !fired(world).is_empty())
    }));
    assert!(ok.is_ok(), "the log:\n{}", node.log());
    now()
}

/// Runs `work` with a client of the test's chroot.
fn with_client<T>(world: &Cluster, work: impl AsyncFnOnce(&zookeeper_client::Client) -> T) -> T {
    zk::with_client_at(&world.connect, work)
}

/// The wall clock in Unix seconds.
#[allow(clippy::disallowed_methods)] // the tests observe real processes on the real clock
fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn persistent() -> zookeeper_client::CreateOptions<'static> {
    zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all())
}

/// Creates `path` (and its parents) as persistent znodes, the last with `data`.
async fn create_all(client: &zookeeper_client::Client, path: &str, data: &[u8]) {
    let mut at = 0;
    while let Some(next) = path[at + 1..].find('/') {
        at += next + 1;
        let _ = client.create(&path[..at], b"", &persistent()).await;
    }
    client
        .create(path, data, &persistent())
        .await
        .unwrap_or_else(|e| panic!("creating {path}: {e}"));
}

/// Deletes `path` and everything under it (retrying: a node may create children meanwhile).
async fn delete_all(client: &zookeeper_client::Client, path: &str) {
    for _ in 0..20 {
        let Ok(children) = client.list_children(path).await else {
            return;
        };
        for child in children {
            Box::pin(delete_all(client, &format!("{path}/{child}"))).await;
        }
        match client.delete(path, None).await {
            Ok(()) | Err(zookeeper_client::Error::NoNode) => return,
            Err(_) => continue,
        }
    }
    panic!("could not delete {path}");
}

#[test]
fn given_a_strangers_persistent_member_of_a_newer_release_then_it_is_ignored_named_and_the_task_keeps_firing()
 {
    let world = world("allow");
    let node = world.new_node("node-a").spawn();
    wait_first_fire(&world, &node);
    // A ghost: a persistent member znode that defines the task, of a release above every
    // node's. Ranked, it would be designated and never take the lease.
    let ghost = format!("{BASE}/members/ghost");
    with_client(&world, async |client| {
        let (mine, _) = client
            .get_data(&format!("{BASE}/members/node-a"))
            .await
            .unwrap();
        let mut record: serde_json::Value = serde_json::from_slice(&mine).unwrap();
        record["id"] = "ghost".into();
        record["release"] = "99.0.0".into();
        client
            .create(&ghost, &serde_json::to_vec(&record).unwrap(), &persistent())
            .await
            .unwrap();
    });
    let from = now() + 1;
    node.wait_for_log_line(
        "the node to name the ghost and the fix",
        &[
            "ignoring the member znode",
            "/members/ghost",
            "persistent",
            "zkCli.sh -server 127.0.0.1:",
        ],
        LIMIT,
    );
    // Before: the lease went vacant for 3 s of every 13.
    wait_firing_from(&world, from, 15, &node);
}

#[test]
fn given_a_lease_whose_data_was_changed_under_its_holder_then_it_takes_the_lease_again_and_the_task_keeps_firing()
 {
    let world = world("allow");
    let node = world.new_node("node-a").spawn();
    wait_first_fire(&world, &node);
    with_client(&world, async |client| {
        client
            .set_data(&format!("{BASE}/leases/tick"), b"tampered", None)
            .await
            .unwrap();
    });
    let from = now() + 1;
    node.wait_for_log_line(
        "the node to give the changed lease up",
        &["is not the one it took", "leases/tick", "taking it again"],
        LIMIT,
    );
    // Before: claims failed on the lease's version for ever, and the node kept its lease.
    wait_firing_from(&world, from, 5, &node);
}

#[test]
fn given_an_epoch_changed_under_the_lease_holder_then_it_takes_the_lease_again_and_the_task_keeps_firing()
 {
    let world = world("allow");
    let node = world.new_node("node-a").spawn();
    wait_first_fire(&world, &node);
    with_client(&world, async |client| {
        client
            .set_data(&format!("{BASE}/tasks/tick/epoch"), b"", None)
            .await
            .unwrap();
    });
    let from = now() + 1;
    node.wait_for_log_line(
        "the node to give its lease up",
        &["the task's epoch was changed", "taking it again"],
        LIMIT,
    );
    // Before: "claim refused: this node's lease is gone", and nobody could take the lease.
    wait_firing_from(&world, from, 5, &node);
}

#[test]
fn given_a_persistent_lease_of_no_live_member_then_it_is_deleted_named_and_the_task_fires() {
    let world = world("allow");
    let lease = format!("{BASE}/leases/tick");
    with_client(&world, async |client| {
        create_all(
            client,
            &lease,
            br#"{"format":1,"node":"gone","session":"0","since":"2026-01-01T00:00:00Z"}"#,
        )
        .await;
    });
    let node = world.new_node("node-a").spawn();
    node.wait_for_log_line(
        "the node to delete the foreign lease, naming it",
        &[
            "deleting the lease",
            "leases/tick",
            "it is persistent",
            "zkCli.sh -server 127.0.0.1:",
        ],
        LIMIT,
    );
    // Before: the task never fired.
    wait_firing_from(&world, now(), 5, &node);
}

#[test]
fn given_a_persistent_run_record_with_overlap_skip_then_it_is_ignored_named_and_the_task_fires() {
    let world = world("skip");
    let run = format!("{BASE}/tasks/tick/run-1");
    with_client(&world, async |client| {
        create_all(client, &run, br#"{"format":1,"node":"gone","session":"0","tick":"2026-01-01T00:00:00Z","started_at":"2026-01-01T00:00:00Z"}"#).await;
    });
    let node = world.new_node("node-a").spawn();
    node.wait_for_log_line(
        "the node to name the foreign run record",
        &[
            "ignoring the run record",
            "run-1",
            "zkCli.sh -server 127.0.0.1:",
        ],
        LIMIT,
    );
    // Before: every tick was skipped for the "run elsewhere".
    wait_firing_from(&world, now(), 5, &node);
}

#[test]
fn given_the_tasks_subtree_deleted_then_it_is_recreated_and_the_task_keeps_firing() {
    let world = world("allow");
    let node = world.new_node("node-a").spawn();
    wait_first_fire(&world, &node);
    with_client(&world, async |client| {
        delete_all(client, &format!("{BASE}/tasks")).await
    });
    let from = now() + 1;
    node.wait_for_log_line(
        "the node to recreate the tree",
        &["recreated", "/tasks", "had been deleted"],
        LIMIT,
    );
    // Before: every task stopped until the nodes restarted.
    wait_firing_from(&world, from, 5, &node);
}

#[test]
fn given_the_members_subtree_deleted_then_the_node_registers_again_and_the_task_keeps_firing() {
    let world = world("allow");
    let node = world.new_node("node-a").spawn();
    wait_first_fire(&world, &node);
    with_client(&world, async |client| {
        delete_all(client, &format!("{BASE}/leases")).await;
        delete_all(client, &format!("{BASE}/members")).await;
    });
    let from = now() + 1;
    node.wait_for_log_line(
        "the node to register again",
        &["recreated", "/members"],
        LIMIT,
    );
    wait_firing_from(&world, from, 5, &node);
    let registered = with_client(&world, async |client| {
        client
            .check_stat(&format!("{BASE}/members/node-a"))
            .await
            .unwrap()
    });
    assert!(registered.is_some(), "{}", node.log());
}

#[test]
fn given_a_fire_record_a_day_ahead_of_the_cluster_clock_then_the_node_names_it_and_how_to_clear_it()
{
    let world = world("allow");
    let node = world.new_node("node-a").spawn();
    wait_first_fire(&world, &node);
    // A node whose clock ran a day ahead claimed a tick of tomorrow.
    let tomorrow = chrono::DateTime::from_timestamp(now() + 86_400, 0).unwrap();
    let record = serde_json::json!({
        "format": 1,
        "tick": tomorrow.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "node": "node-skewed",
        "session": "1",
        "run": true,
        "claimed_at": tomorrow.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    });
    with_client(&world, async |client| {
        client
            .set_data(
                &format!("{BASE}/tasks/tick"),
                &serde_json::to_vec(&record).unwrap(),
                None,
            )
            .await
            .unwrap();
    });
    // The cached record is stale: the next claim conflicts, re-reads it and says why the task
    // is silent, naming the node and the command that clears the record.
    node.wait_for_log_line(
        "the node to report the record ahead of the clock",
        &[
            "ahead of ZooKeeper's clock",
            "by node node-skewed",
            "zkCli.sh -server 127.0.0.1:",
            "/tasks/tick",
        ],
        LIMIT,
    );
    // Cleared and restarted as the message says, the task fires again.
    with_client(&world, async |client| {
        client
            .set_data(&format!("{BASE}/tasks/tick"), br#"{"format":1}"#, None)
            .await
            .unwrap();
    });
    drop(node);
    let node = world.new_node("node-b").spawn();
    wait_firing_from(&world, now() + 1, 3, &node);
}

#[test]
fn given_no_max_clock_skew_set_when_a_nodes_clock_is_30s_ahead_then_it_refuses_leadership_by_default()
 {
    let world = world("allow");
    let skewed = world
        .new_node("node-skewed")
        .spawn_with(ClusterNode::binary_with_clock_ahead(30));
    skewed.wait_for_log_line("the skewed node to refuse leadership with the default bound",
        &[
            "refusing leadership: this node's clock is further from ZooKeeper's than max_clock_skew",
            "max_clock_skew=2s",
        ], LIMIT);
    let good = world.new_node("node-good").spawn();
    wait_firing_from(&world, now(), 3, &good);
    let skewed_fires = fs::read_to_string(world.fires_path())
        .unwrap_or_default()
        .lines()
        .filter(|l| l.ends_with(" node-skewed"))
        .count();
    assert_eq!(skewed_fires, 0, "{}", skewed.log());
}

#[test]
fn given_persistent_run_records_named_like_coming_ticks_then_those_ticks_still_fire() {
    let world = world("allow");
    let node = world.new_node("node-a").spawn();
    wait_first_fire(&world, &node);
    // A stranger creates the run znodes of the next ticks: each claim's create of its run
    // znode fails on them.
    let from = now() + 2;
    with_client(&world, async |client| {
        for second in from..from + 3 {
            client
                .create(
                    &format!("{BASE}/tasks/tick/run-{second}"),
                    b"{}",
                    &persistent(),
                )
                .await
                .unwrap();
        }
    });
    node.wait_for_log_line(
        "the node to delete a foreign run record, naming it",
        &[
            "deleting the run record",
            "/tasks/tick/run-",
            "zkCli.sh -server 127.0.0.1:",
        ],
        LIMIT,
    );
    // Before: each of those ticks was lost.
    wait_firing_from(&world, from, 5, &node);
}
