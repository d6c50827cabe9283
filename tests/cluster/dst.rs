//! A task's DST rule in a cluster: two nodes whose wall clocks faketime sets just before
//! Berlin's fall-back change of 2026 (with a `max_clock_skew` that allows it) run a repeated
//! local time once or twice, as each task says, and no tick twice.

use std::time::Duration;

use crate::common::cluster::Cluster;
use crate::common::fires::words;
use crate::common::wait_for;
use crate::common::zk::ClusterNode;

const LIMIT: Duration = Duration::from_secs(40);

#[test]
fn a_cluster_runs_a_repeated_local_time_once_or_twice_as_the_task_says_and_no_tick_twice() {
    let cluster = Cluster::new();
    let fires = cluster.fires_path();
    let task = |schedule: &str, extra: &str| {
        format!(
            "schedule = \"{schedule}\"\ntimezone = \"Europe/Berlin\"\n{extra}\
             command = [\"sh\", \"-c\", \"echo $ZKCRON_FIRE_ID $ZKCRON_NODE >> {}\"]\n",
            fires.display()
        )
    };
    // 02:00:00 local happens twice on 2026-10-25: at 00:00:00Z (CEST) and 01:00:00Z (CET).
    cluster.write_task("first", &task("0 0 2 * * *", ""));
    cluster.write_task("both", &task("0 0 2 * * *", "dst_repeat = \"both\"\n"));
    cluster.write_task("marker", &task("*/2 * * * * *", ""));
    let config = "[coordination.zookeeper]\nmax_clock_skew = \"400d\"\n";
    let nodes: Vec<_> = ["node-a", "node-b"]
        .into_iter()
        .map(|id| {
            ClusterNode {
                config: config.into(),
                ..cluster.new_node(id)
            }
            .spawn_with(ClusterNode::binary_with_clock_at("2026-10-25 00:59:50"))
        })
        .collect();
    // The marker's ticks at and after 01:00:04Z (1792890004) mean every tick before was fired.
    let marker_done = || {
        words(&fires).iter().any(|l| {
            l[0].strip_prefix("marker@")
                .is_some_and(|t| t >= "1792890004")
        })
    };
    let waited =
        std::panic::catch_unwind(|| wait_for("the marker past 01:00:04Z", LIMIT, marker_done));
    let logs: Vec<String> = nodes.iter().map(|n| n.log()).collect();
    assert!(waited.is_ok(), "{}", logs.join("\n----\n"));
    let all = words(&fires);
    let of = |task: &str| -> Vec<String> {
        all.iter()
            .filter(|l| l[0].starts_with(&format!("{task}@")))
            .map(|l| l[0].clone())
            .collect()
    };
    assert_eq!(of("both"), ["both@1792890000"], "{all:?}");
    assert_eq!(of("first"), Vec::<String>::new(), "{all:?}");
    cluster.assert_no_duplicates();
}
