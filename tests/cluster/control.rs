//! The operator's controls on real `zkcron run` processes and a real ZooKeeper (see
//! `tests/common/zk.rs`): drain and undrain, pause and resume across a leader change, tasks no
//! live node may run, and drift.
//!
//! The marks are written the way `zkcron drain` / `pause` / `resume` write them (persistent
//! znodes with a `MarkRecord`; resume deletes the mark and moves the fire record in one multi),
//! by a ZooKeeper client in the test, so these tests check the nodes alone.
//!
//! Tasks fire every second and append `<fire id> <node>` to `fires.log`, with `catch_up =
//! "all"`: a tick of a paused period that a node caught up after the resume would show.
//!
//! `ZKCRON_TEST_BIN=/path/to/zkcron cargo test --test cluster control` runs the nodes from another build.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use std::time::{Duration, Instant};

use crate::common::cluster::Cluster;
use crate::common::wall::now;
use crate::common::zk::{self, ClusterNode, TestServer};

/// A generous deadline for start-up and convergence.
const LIMIT: Duration = Duration::from_secs(30);

/// Leases move off a drained node "within a second"; the test allows one more for
/// a loaded two-core machine running several JVMs and debug builds at once.
const DRAIN_MOVE: Duration = Duration::from_secs(2);

const CLUSTER: &str = "test";
const BASE: &str = "/zkcron/test";

/// Cluster `test` on a chroot of the binary's shared ZooKeeper; nodes may have a jobs dir each.
fn new_world() -> Cluster {
    Cluster::on(TestServer::shared(), CLUSTER)
}

/// The operator's controls as these tests apply them to a [`Cluster`], and what they read back.
trait Controls {
    fn write_ticking_task(&self, jobs: &str, name: &str, extra: &str);
    fn start_node(&mut self, id: &str, version: &str, jobs: &str, config: &str);
    fn log(&self, id: &str) -> String;
    fn fired(&self) -> Vec<(String, i64, String)>;
    fn with_client<T>(&self, work: impl AsyncFnOnce(&zookeeper_client::Client) -> T) -> T;
    fn mark(&self, kind: &str, name: &str);
    fn unmark(&self, kind: &str, name: &str);
    fn resume(&self, task: &str) -> i64;
    fn member(&self, id: &str) -> serde_json::Value;
}

impl Controls for Cluster {
    /// An every-second task in jobs dir `jobs` that logs its fire id and node; `extra` lines
    /// are appended.
    fn write_ticking_task(&self, jobs: &str, name: &str, extra: &str) {
        let text = format!(
            "schedule = \"* * * * * *\"\n\
             command = ['/bin/sh', '-c', 'echo \"$ZKCRON_FIRE_ID $ZKCRON_NODE\" >> {fires}']\n\
             catch_up = \"all\"\n\
             starting_deadline = \"5m\"\n\
             overlap = \"allow\"\n\
             {extra}\n",
            fires = self.fires_path().display()
        );
        self.write_task_in(jobs, name, &text);
    }

    /// Starts `zkcron run` as `id` of release `version` on jobs dir `jobs`, `config` added to
    /// its zkcron.toml; waits until it registered.
    fn start_node(&mut self, id: &str, version: &str, jobs: &str, config: &str) {
        self.start(ClusterNode {
            release: Some(version.into()),
            jobs: self.jobs_dir(jobs),
            config: config.into(),
            ..self.new_node(id)
        });
    }

    fn log(&self, id: &str) -> String {
        self.nodes[id].log()
    }

    /// `(task, second, node)` of every fire so far.
    fn fired(&self) -> Vec<(String, i64, String)> {
        self.fires()
            .0
            .into_iter()
            .map(|fire| (fire.task, fire.second, fire.node))
            .collect()
    }

    fn with_client<T>(&self, work: impl AsyncFnOnce(&zookeeper_client::Client) -> T) -> T {
        zk::with_client_at(&self.connect, work)
    }

    /// Creates the mark `control/<kind>/<name>` as `zkcron drain` / `pause` would.
    fn mark(&self, kind: &str, name: &str) {
        let path = format!("{BASE}/control/{kind}/{name}");
        let data = serde_json::json!({
            "format": 1, "at": rfc3339(now()), "by": "test@localhost"
        })
        .to_string();
        self.with_client(async |client| {
            let options = zookeeper_client::CreateMode::Persistent
                .with_acls(zookeeper_client::Acls::anyone_all());
            client
                .create(&path, data.as_bytes(), &options)
                .await
                .unwrap_or_else(|e| panic!("creating {path}: {e}"));
        });
    }

    /// Deletes the mark `control/<kind>/<name>` (as `zkcron undrain` would).
    fn unmark(&self, kind: &str, name: &str) {
        let path = format!("{BASE}/control/{kind}/{name}");
        self.with_client(async |client| {
            client
                .delete(&path, None)
                .await
                .unwrap_or_else(|e| panic!("deleting {path}: {e}"));
        });
    }

    /// What `zkcron resume TASK` does: one multi that deletes the pause mark and moves the
    /// task's fire record (only if older, at the version read) to now in whole seconds, as a
    /// tick nobody runs. Returns the second it moved the record to.
    fn resume(&self, task: &str) -> i64 {
        let mark = format!("{BASE}/control/paused/{task}");
        let record = format!("{BASE}/tasks/{task}");
        self.with_client(async |client| {
            let (data, stat) = client.get_data(&record).await.unwrap();
            let old: serde_json::Value = serde_json::from_slice(&data).unwrap();
            let now = now().floor() as i64;
            let older = old["tick"]
                .as_str()
                .is_none_or(|tick| tick < rfc3339(now as f64).as_str());
            let mut multi = client.new_multi_writer();
            multi.add_delete(&mark, None).unwrap();
            if older {
                let new = serde_json::json!({
                    "format": 1, "tick": rfc3339(now as f64), "node": "", "session": "",
                    "run": false, "reruns": 0, "claimed_at": rfc3339(now as f64)
                })
                .to_string();
                multi
                    .add_set_data(&record, new.as_bytes(), Some(stat.version))
                    .unwrap();
            }
            multi.commit().await.unwrap();
            now
        })
    }

    fn member(&self, id: &str) -> serde_json::Value {
        let path = format!("{BASE}/members/{id}");
        self.with_client(async |client| {
            let (data, _) = client.get_data(&path).await.unwrap();
            serde_json::from_slice(&data).unwrap()
        })
    }
}

fn rfc3339(unix: f64) -> String {
    chrono::DateTime::from_timestamp(unix.floor() as i64, 0)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

// ---------------------------------------------------------------------------------------------

#[test]
#[allow(clippy::disallowed_methods)] // real processes: the move is timed on the real clock
fn a_drained_node_hands_its_leases_over_within_a_second_finishes_its_job_and_stays_drained_across_a_restart()
 {
    let mut world = new_world();
    for i in 0..6 {
        world.write_ticking_task("jobs.d", &format!("t{i}"), "");
    }
    // A job that runs 3 s, so that the drain comes while it runs.
    let long_log = world.path().join("long.log");
    let long = format!(
        "schedule = \"* * * * * *\"\n\
         command = ['/bin/sh', '-c', 'echo \"$ZKCRON_FIRE_ID $ZKCRON_NODE start\" >> {log}; sleep 3; echo \"$ZKCRON_FIRE_ID $ZKCRON_NODE end\" >> {log}']\n\
         overlap = \"skip\"\ncatch_up = \"skip\"\n",
        log = long_log.display()
    );
    let path = world.jobs_dir("jobs.d").join("long.toml");
    fs::write(&path, long).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    world.start_node("node-a", "1.0.0", "jobs.d", "");
    world.start_node("node-b", "1.0.0", "jobs.d", "");
    // `long` runs somewhere: drain that node while its job runs.
    let read_long = || fs::read_to_string(&long_log).unwrap_or_default();
    world.wait("a run of `long` to start", LIMIT, |_| {
        read_long().lines().any(|l| l.ends_with(" start"))
    });
    let started = read_long()
        .lines()
        .rev()
        .find(|l| l.ends_with(" start"))
        .unwrap()
        .to_string();
    let mut words = started.split(' ');
    let (fire_id, victim) = (words.next().unwrap().to_string(), words.next().unwrap());
    let victim = victim.to_string();
    let other = if victim == "node-a" {
        "node-b"
    } else {
        "node-a"
    };
    world.wait("both nodes to lead", LIMIT, |w| {
        w.leading("node-a").is_some_and(|n| n > 0) && w.leading("node-b").is_some_and(|n| n > 0)
    });

    let drained_at = Instant::now();
    world.mark("drained", &victim);
    world.wait(
        &format!("{other} to lead all 7 tasks and {victim} none"),
        LIMIT,
        |w| w.leading(other) == Some(7) && w.leading(&victim) == Some(0),
    );
    let moved = drained_at.elapsed();
    eprintln!("leases moved off the drained node in {moved:?}");
    assert!(
        moved <= DRAIN_MOVE,
        "the leases took {moved:?} to move\n{}",
        world.diagnostics()
    );
    // Still registered, saying why it leads nothing.
    let record = world.member(&victim);
    assert_eq!(record["drained"], true, "{record}");
    assert_eq!(record["leads"], false, "{record}");
    assert!(
        world.log(&victim).contains(&format!(
            "this node leads no task until `zkcron undrain {victim}`"
        )),
        "{}",
        world.log(&victim)
    );
    // The job that ran when the drain came finished undisturbed.
    world.wait(&format!("{fire_id} to end"), LIMIT, |_| {
        read_long().contains(&format!("{fire_id} {victim} end"))
    });
    // Everything fires on the other node from the next second on.
    let from = now().floor() as i64 + 1;
    world.wait("three seconds of fires after the drain", LIMIT, |w| {
        w.fired().iter().any(|(_, s, _)| *s >= from + 3)
    });
    let strays: Vec<_> = world
        .fired()
        .into_iter()
        .filter(|(_, s, node)| *s >= from && *node == victim)
        .collect();
    assert!(strays.is_empty(), "{strays:?}\n{}", world.diagnostics());

    // A restart keeps the drain: the node reads its mark before registering.
    world.stop(&victim);
    world.start_node(&victim, "1.0.0", "jobs.d", "");
    let restarted = now().floor() as i64 + 1;
    world.wait(
        &format!("{victim} to say it is drained again"),
        LIMIT,
        |w| {
            w.log(&victim)
                .matches("this node leads no task until")
                .count()
                >= 2
        },
    );
    world.wait("three seconds of fires after the restart", LIMIT, |w| {
        w.fired().iter().any(|(_, s, _)| *s >= restarted + 3)
    });
    // From its start on, every `leases changed` line of the restarted node says leading=0.
    let restarted_log = world.log(&victim);
    let after_restart = restarted_log.rsplit("zkcron started").next().unwrap();
    let led: Vec<&str> = after_restart
        .lines()
        .filter(|l| l.contains("leases changed") && !l.contains("leading=0"))
        .collect();
    assert!(led.is_empty(), "{led:?}\n{restarted_log}");
    assert!(
        world
            .fired()
            .iter()
            .all(|(_, s, node)| *s < restarted || *node != victim),
        "{}",
        world.diagnostics()
    );

    // Undrained: it takes its share again.
    world.unmark("drained", &victim);
    world.wait(&format!("{victim} to lead again"), LIMIT, |w| {
        w.leading(&victim).is_some_and(|n| n > 0)
    });
    assert_eq!(world.member(&victim)["leads"], true);
    assert!(world.member(&victim).get("drained").is_none());
    world.assert_no_duplicates();
}

#[test]
fn a_paused_task_fires_nothing_across_a_leader_change_and_nothing_of_the_paused_period_after_resume()
 {
    let mut world = new_world();
    world.write_ticking_task("jobs.d", "p", "");
    world.write_ticking_task("jobs.d", "other", "");
    world.start_node("node-a", "1.0.0", "jobs.d", "");
    world.start_node("node-b", "1.0.0", "jobs.d", "");
    world.wait("p to fire", LIMIT, |w| {
        w.fired().iter().any(|(t, _, _)| t == "p")
    });
    world.mark("paused", "p");
    let paused_at = now();
    let said = "task p is paused; nothing fires until `zkcron resume p`";
    world.wait("p's leader to say it is paused", LIMIT, |w| {
        ["node-a", "node-b"].iter().any(|n| w.log(n).contains(said))
    });
    let leader = ["node-a", "node-b"]
        .into_iter()
        .find(|n| world.log(n).contains(said))
        .unwrap()
        .to_string();
    // The leader goes; the other node takes the lease and fires nothing of `p` either.
    world.stop(&leader);
    let survivor = if leader == "node-a" {
        "node-b"
    } else {
        "node-a"
    };
    world.wait_log(survivor, said, 1);
    world.wait("`other` to fire on the survivor for 3 s", LIMIT, |w| {
        w.fired()
            .iter()
            .any(|(t, s, n)| t == "other" && n == survivor && *s as f64 >= paused_at + 4.0)
    });
    let resumed = world.resume("p");
    world.wait_log(survivor, "task p is no longer paused", 1);
    world.wait("p to fire again after the resume", LIMIT, |w| {
        w.fired().iter().any(|(t, s, _)| t == "p" && *s > resumed)
    });
    // A tick due while the pause was being written may have been claimed already; every
    // later one up to the resume never ran, then or after.
    let during: Vec<i64> = world
        .fired()
        .into_iter()
        .filter(|(t, s, _)| t == "p" && *s as f64 > paused_at + 1.0 && *s <= resumed)
        .map(|(_, s, _)| s)
        .collect();
    assert!(
        during.is_empty(),
        "ticks of the paused period ran: {during:?}\n{}",
        world.diagnostics()
    );
    world.assert_no_duplicates();
}

#[test]
fn a_task_no_live_node_may_run_is_logged_naming_the_requirement_and_next_says_it_is_not_eligible() {
    let mut world = new_world();
    world.write_ticking_task("jobs.d", "needs-v2", "version_req = \">=2.0\"");
    world.write_ticking_task("jobs.d", "needs-eu", "require_labels = { zone = \"eu\" }");
    world.write_ticking_task("jobs.d", "anywhere", "");
    let labels = "[node]\nlabels = { zone = \"us\" }\n";
    world.start_node("node-a", "1.0.0", "jobs.d", labels);
    world.wait_log(
        "node-a",
        "task needs-v2: no live node may run it: version_req >=2.0 matches none of node-a (1.0.0)",
        1,
    );
    world.wait_log(
        "node-a",
        "task needs-eu: no live node may run it: require_labels zone=eu matches none of node-a (zone=us)",
        1,
    );
    world.wait("anywhere to fire", LIMIT, |w| {
        w.fired().iter().any(|(t, _, _)| t == "anywhere")
    });
    assert!(
        !world
            .fired()
            .iter()
            .any(|(t, _, _)| t == "needs-v2" || t == "needs-eu"),
        "{}",
        world.diagnostics()
    );
    // A second node that satisfies the labels: the problem is gone, said once.
    world.start_node(
        "node-b",
        "1.0.0",
        "jobs.d",
        "[node]\nlabels = { zone = \"eu\" }\n",
    );
    world.wait_log("node-a", "task needs-eu: a live node may run it again", 1);
    world.wait("needs-eu to fire on node-b", LIMIT, |w| {
        w.fired()
            .iter()
            .any(|(t, _, n)| t == "needs-eu" && n == "node-b")
    });
    assert_eq!(
        world
            .log("node-a")
            .matches("task needs-eu: no live node")
            .count(),
        1,
        "{}",
        world.log("node-a")
    );

    // `zkcron next` on a host configured like node-a says why it never fires them here.
    let config = world.path().join("next.toml");
    fs::write(
        &config,
        format!(
            "[node]\nversion = \"1.0.0\"\nlabels = {{ zone = \"us\" }}\n\
             [coordination]\nbackend = \"zookeeper\"\n\
             [coordination.zookeeper]\nconnect = \"{}\"\n",
            world.connect
        ),
    )
    .unwrap();
    fs::set_permissions(&config, fs::Permissions::from_mode(0o644)).unwrap();
    let jobs = world.jobs_dir("jobs.d");
    let output = crate::common::run_zkcron(&[
        "next",
        "--config",
        config.to_str().unwrap(),
        "--jobs-dir",
        jobs.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    let line = |task: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("{task} ")))
            .unwrap_or_else(|| panic!("{task} missing:\n{stdout}"))
            .to_string()
    };
    assert!(line("needs-v2").contains("not eligible here"), "{stdout}");
    assert!(line("needs-eu").contains("not eligible here"), "{stdout}");
    assert!(!line("anywhere").contains("not eligible"), "{stdout}");
    assert!(
        stdout.contains(
            "not eligible: this node never runs it: version_req >=2.0 does not match this node's release 1.0.0"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "not eligible: this node never runs it: require_labels needs zone=eu (this node has zone=us)"
        ),
        "{stdout}"
    );
}

#[test]
fn live_nodes_that_define_a_task_differently_both_log_the_drift_naming_digests_and_nodes() {
    let mut world = new_world();
    world.write_ticking_task("jobs-a", "d", "");
    world.write_ticking_task("jobs-b", "d", "jitter = \"0s\"\nkill_grace = \"5s\"");
    world.start_node("node-a", "1.0.0", "jobs-a", "");
    world.start_node("node-b", "1.0.0", "jobs-b", "");
    for node in ["node-a", "node-b"] {
        world.wait_log(node, "task d: live nodes define it differently: ", 1);
    }
    for node in ["node-a", "node-b"] {
        let log = world.log(node);
        let line = log
            .lines()
            .find(|l| l.contains("task d: live nodes define it differently"))
            .unwrap();
        assert!(
            line.contains(" on node-a; ") || line.contains(" on node-a;"),
            "{line}"
        );
        assert!(line.contains(" on node-b"), "{line}");
        assert!(
            line.contains("the leader runs its own definition; make the task files equal"),
            "{line}"
        );
        // Digest prefixes: 12 hex digits before each " on ".
        for part in line.split(" on ").take(2) {
            let digest: String = part.chars().rev().take(12).collect();
            assert!(digest.chars().all(|c| c.is_ascii_hexdigit()), "{line}");
        }
    }
    // The same files again: said once, and the end of it said once.
    world.write_ticking_task("jobs-b", "d", "");
    for node in ["node-a", "node-b"] {
        world.wait_log(node, "task d: live nodes define it alike again", 1);
        assert_eq!(
            world
                .log(node)
                .matches("task d: live nodes define it differently")
                .count(),
            1
        );
    }
}
