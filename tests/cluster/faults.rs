//! What the cluster tests do to a [`Cluster`] and check on it: `tasks` every-second tasks in
//! the shared jobs dir, their fires in `fires.log`, nodes started, killed and waited for, and
//! how long a takeover took.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::cluster::Cluster;
use crate::common::wall::{now, now_second, second_of};
use crate::common::zk::{ClusterNode, TestServer};
use crate::common::{self, DaemonProcess};
use crate::failover::{CLUSTER, LIMIT};

/// How long after a fault the other nodes took over.
pub(crate) struct Takeover {
    /// Until their logs accounted for every task.
    pub(crate) leases: Duration,
    /// Until the last of the victim's tasks had fired on another node.
    pub(crate) fired: Duration,
}

impl std::fmt::Display for Takeover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the other nodes led all tasks after {:?} and had fired the victim's after {:?}",
            self.leases, self.fired
        )
    }
}

/// How many tasks each node leads.
pub(crate) fn shares(leaders: &BTreeMap<String, String>) -> BTreeMap<String, usize> {
    let mut shares = BTreeMap::new();
    for node in leaders.values() {
        *shares.entry(node.clone()).or_insert(0) += 1;
    }
    shares
}

/// The node that leads the most tasks, and those tasks.
pub(crate) fn busiest(leaders: &BTreeMap<String, String>) -> (String, Vec<String>) {
    let (node, _) = shares(leaders)
        .into_iter()
        .max_by_key(|(node, n)| (*n, std::cmp::Reverse(node.clone())))
        .expect("some node leads a task");
    let tasks = leaders
        .iter()
        .filter(|(_, n)| **n == node)
        .map(|(t, _)| t.clone())
        .collect();
    (node, tasks)
}

// ---------------------------------------------------------------------------------------------
// The cluster: `tasks` every-second tasks (`t00`, `t01`, ...) in the shared jobs dir, their
// fires in `fires.log`, and nodes

/// Cluster `test` on a chroot of `zk` with `tasks` every-second tasks; no node yet.
pub(crate) fn new_cluster(tasks: usize, zk: TestServer) -> Cluster {
    let cluster = Cluster::on(zk, CLUSTER);
    for i in 0..tasks {
        // Every tick must leave a line: `overlap = "allow"`, because right after a catch-up
        // the last caught-up run can still be going when the next tick is due, and the default
        // `skip` would then (rightly) skip it.
        let text = format!(
            "schedule = \"* * * * * *\"\n\
             command = [\"/bin/sh\", \"-c\", 'echo \"$ZKCRON_FIRE_ID $ZKCRON_NODE\" >> {fires}']\n\
             catch_up = \"all\"\n\
             starting_deadline = \"1m\"\n\
             overlap = \"allow\"\n",
            fires = cluster.fires_path().display()
        );
        cluster.write_task(&format!("t{i:02}"), &text);
    }
    cluster
}

/// What these tests do to a [`Cluster`] and check on it.
pub(crate) trait Faults {
    fn tasks(&self) -> Vec<String>;
    fn start_nodes(&mut self, nodes: &[(&str, &str)]);
    fn spawn_node(&mut self, id: &str, version: &str, connect: &str);
    fn node(&self, id: &str) -> &DaemonProcess;
    fn node_mut(&mut self, id: &str) -> &mut DaemonProcess;
    fn wait_exit(&mut self, node: &str, limit: Duration) -> Option<i32>;
    fn wait_stable(&self, nodes: &[&str]) -> BTreeMap<String, String>;
    fn wait_takeover(&self, victim: &str, tasks: &[String], since: f64) -> Takeover;
    fn settle(&self, through: i64);
    fn assert_no_gaps(&self, from: i64, to: i64);
    fn check_takeover(&self, victim: &str, kind: &str, takeover: &Takeover, bound: Duration);
}

impl Faults for Cluster {
    /// The tasks, sorted: the stems of the task files in the jobs dir.
    fn tasks(&self) -> Vec<String> {
        self.task_names()
    }

    /// Starts the nodes (id, release) on this cluster's chroot and waits until each has
    /// registered in ZooKeeper.
    fn start_nodes(&mut self, nodes: &[(&str, &str)]) {
        let connect = self.connect.clone();
        for (id, version) in nodes {
            self.spawn_node(id, version, &connect);
        }
        for (id, _) in nodes {
            self.wait_log(id, "registered in ZooKeeper", 1);
        }
    }

    /// Starts `zkcron run` as node `id` on `connect`, with a state dir, config and log of its
    /// own (`<dir>/<id>/`), and the shared jobs dir. Does not wait.
    fn spawn_node(&mut self, id: &str, version: &str, connect: &str) {
        let node = ClusterNode {
            connect: connect.into(),
            release: Some(version.into()),
            ..self.new_node(id)
        }
        .spawn();
        self.nodes.insert(id.to_string(), node);
    }

    fn node(&self, id: &str) -> &DaemonProcess {
        &self.nodes[id]
    }

    fn node_mut(&mut self, id: &str) -> &mut DaemonProcess {
        self.nodes.get_mut(id).unwrap()
    }

    /// Waits until `node`'s process exits; returns its exit code.
    fn wait_exit(&mut self, node: &str, limit: Duration) -> Option<i32> {
        // An exited child stays a zombie until waited for: not alive, and its status kept.
        self.wait(&format!("{node} to exit"), limit, |c| {
            !common::process_alive(c.node(node).child.id() as i32)
        });
        self.node_mut(node).child.wait().unwrap().code()
    }

    /// Waits until leadership is settled among `nodes`: in the last two complete seconds every
    /// task fired, by the same node both times; each node leads at least one task; and each
    /// node's last `leading=N` is the number of tasks it fired. Returns task → leader.
    fn wait_stable(&self, nodes: &[&str]) -> BTreeMap<String, String> {
        let mut leaders = BTreeMap::new();
        self.wait_fires(
            &format!("leadership among {nodes:?} to settle"),
            LIMIT,
            |fires, c| {
                let last = now_second() - 1;
                let now = fires.leaders_at(last);
                if now.len() != c.tasks().len() || now != fires.leaders_at(last - 1) {
                    return false;
                }
                let shares = shares(&now);
                let settled = shares.len() == nodes.len()
                    && nodes.iter().all(|n| {
                        let share = shares.get(*n).copied().unwrap_or(0);
                        share > 0 && c.leading(n) == Some(share)
                    });
                if settled {
                    leaders = now;
                }
                settled
            },
        );
        leaders
    }

    /// Waits until the nodes other than `victim` lead every task (their last `leading=N` add up
    /// to the number of tasks) and have fired each of `tasks` (the victim's) for a tick after
    /// `since` (Unix seconds); returns how long after `since` each was first seen.
    fn wait_takeover(&self, victim: &str, tasks: &[String], since: f64) -> Takeover {
        let mut leases_at = None;
        let mut seen: BTreeMap<String, f64> = BTreeMap::new();
        self.wait_fires(
            &format!("the other nodes to lead all tasks and fire those {victim} led: {tasks:?}"),
            LIMIT,
            |fires, c| {
                let others: usize = c
                    .nodes
                    .keys()
                    .filter(|id| *id != victim)
                    .map(|id| c.leading(id).unwrap_or(0))
                    .sum();
                if leases_at.is_none() && others == c.tasks().len() {
                    leases_at = Some(now());
                }
                for fire in &fires.0 {
                    if fire.node != victim
                        && fire.second > second_of(since)
                        && tasks.contains(&fire.task)
                    {
                        seen.entry(fire.task.clone()).or_insert_with(now);
                    }
                }
                leases_at.is_some() && seen.len() == tasks.len()
            },
        );
        let after = |t: f64| Duration::from_secs_f64((t - since).max(0.0));
        Takeover {
            leases: after(leases_at.unwrap()),
            fired: after(seen.into_values().fold(since, f64::max)),
        }
    }

    /// Waits until every task fired a tick at or after `through`, so every tick up to
    /// `through - 2` was claimed (fire records only move forward) and its job, started at least
    /// two seconds ago, has written its line.
    fn settle(&self, through: i64) {
        self.wait_fires(
            &format!("every task to fire the tick of {through}"),
            LIMIT,
            |fires, c| {
                c.tasks()
                    .iter()
                    .all(|t| fires.last_second(t).is_some_and(|s| s >= through))
            },
        );
    }

    fn assert_no_gaps(&self, from: i64, to: i64) {
        self.assert_no_gaps_in(&self.tasks(), from, to);
    }

    /// Prints how long the takeover after a fault of `kind` took, and fails beyond `bound`.
    fn check_takeover(&self, victim: &str, kind: &str, takeover: &Takeover, bound: Duration) {
        eprintln!("{victim} ({kind}): {takeover}");
        self.check(
            takeover.leases <= bound,
            &format!("{victim} ({kind}): {takeover}; more than {bound:?} to take its leases"),
        );
    }
}
