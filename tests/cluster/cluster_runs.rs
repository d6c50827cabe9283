//! What happens to running jobs when a node is lost, against a real ZooKeeper: `on_node_loss`
//! (rerun a tick whose node died mid-run, or not) and `kill_on_session_loss`.

use std::fs;
use std::path::Path;
use std::time::Duration;

use crate::common::cluster::Cluster;
use crate::common::fires::words;
use crate::common::zk::{ClusterNode, ZkServer};
use crate::common::{DaemonProcess, process_alive, wait_for};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const LIMIT: Duration = Duration::from_secs(30);

/// Starts node `id` of `cluster` with a shutdown grace of 1 s.
fn start(cluster: &Cluster, id: &str) -> DaemonProcess {
    start_with_grace(cluster, id, "1s")
}

fn start_with_grace(cluster: &Cluster, id: &str, shutdown_grace: &str) -> DaemonProcess {
    ClusterNode {
        config: format!("[scheduler]\nshutdown_grace = \"{shutdown_grace}\"\n"),
        ..cluster.new_node(id)
    }
    .spawn()
}

/// With the daemon's debug lines ("claimed ahead of its instant").
fn start_debug(cluster: &Cluster, id: &str) -> DaemonProcess {
    ClusterNode {
        log_filter: "info,zkcron::daemon=debug".into(),
        ..cluster.new_node(id)
    }
    .spawn()
}

/// Kills the process groups of the jobs that recorded their pid in `file` (they outlive a
/// daemon killed with SIGKILL).
fn kill_jobs(file: &Path) {
    for line in words(file) {
        if let Some(pid) = line.get(2).and_then(|p| p.parse::<i32>().ok()) {
            let _ = kill(Pid::from_raw(-pid), Signal::SIGKILL);
        }
    }
}

#[test]
fn given_a_node_killed_mid_run_then_only_the_task_with_on_node_loss_rerun_runs_that_tick_again() {
    let cluster = Cluster::new();
    let starts = cluster.path().join("starts.log");
    // Each run records "<fire id> <node> <pid>" and then takes long: it is mid-run when its
    // node dies. catch_up = "skip": only the orphaned tick can run again.
    let command = format!(
        "command = ['/bin/sh', '-c', 'echo \"$ZKCRON_FIRE_ID $ZKCRON_NODE $$\" >> {}; exec sleep 20']\n",
        starts.display()
    );
    for (name, policy) in [("rerun", "rerun"), ("once", "skip")] {
        cluster.write_task(name,
            &format!(
                "schedule = \"0 0 0 1 1 *\"\n{command}catch_up = \"skip\"\non_node_loss = \"{policy}\"\n"
            ),
        );
    }
    // A yearly schedule never fires by itself during the test; the first run is started by
    // pointing the schedule at the next full second once both nodes lead.
    let a = start(&cluster, "node-a");
    let b = start(&cluster, "node-b");
    wait_for("both nodes to register", LIMIT, || {
        a.log().contains("registered in ZooKeeper") && b.log().contains("registered in ZooKeeper")
    });
    for (name, policy) in [("rerun", "rerun"), ("once", "skip")] {
        cluster.write_task(name,
            &format!(
                "schedule = \"* * * * * *\"\n{command}catch_up = \"skip\"\non_node_loss = \"{policy}\"\n"
            ),
        );
    }
    wait_for("both tasks to start a run", LIMIT, || {
        let tasks: Vec<String> = words(&starts).iter().map(|l| l[0].clone()).collect();
        tasks.iter().any(|t| t.starts_with("rerun@"))
            && tasks.iter().any(|t| t.starts_with("once@"))
    });
    // Kill the node running the rerun task's job; its job keeps running as an orphan.
    let first = words(&starts);
    let rerun_line = first
        .iter()
        .find(|l| l[0].starts_with("rerun@"))
        .unwrap()
        .clone();
    let (victim, survivor) = if rerun_line[1] == "node-a" {
        (a, b)
    } else {
        (b, a)
    };
    victim.signal(Signal::SIGKILL);
    let victim_id = rerun_line[1].clone();
    let once_line = first
        .iter()
        .find(|l| l[0].starts_with("once@"))
        .unwrap()
        .clone();

    wait_for("the survivor to rerun the orphaned tick", LIMIT, || {
        words(&starts)
            .iter()
            .any(|l| l[0] == rerun_line[0] && l[1] != victim_id)
    });
    assert!(
        survivor
            .log()
            .contains("rerunning a tick whose node was lost mid-run"),
        "{}",
        survivor.log()
    );
    // The task with the default on_node_loss = "skip" never runs a tick twice, wherever its run
    // was (on the victim, its tick was orphaned; on the survivor, it is still running).
    wait_for("the survivor to lead both tasks", LIMIT, || {
        survivor.log().contains("leading=2")
    });
    let runs_of_once_tick = words(&starts)
        .iter()
        .filter(|l| l[0] == once_line[0])
        .count();
    assert_eq!(runs_of_once_tick, 1, "{:?}", words(&starts));
    let runs_of_rerun_tick = words(&starts)
        .iter()
        .filter(|l| l[0] == rerun_line[0])
        .count();
    assert_eq!(
        runs_of_rerun_tick,
        2,
        "run once, rerun once: {:?}",
        words(&starts)
    );
    drop(survivor);
    drop(victim);
    kill_jobs(&starts);
}

#[test]
fn given_kill_on_session_loss_when_the_session_expires_then_only_that_tasks_job_is_stopped() {
    let cluster = Cluster::new();
    let starts = cluster.path().join("starts.log");
    let command = format!(
        "command = ['/bin/sh', '-c', 'echo \"$ZKCRON_FIRE_ID $ZKCRON_NODE $$\" >> {}; exec sleep 60']\n",
        starts.display()
    );
    cluster.write_task("fragile",
        &format!(
            "schedule = \"* * * * * *\"\n{command}kill_on_session_loss = true\nkill_grace = \"1s\"\n"
        ),
    );
    cluster.write_task("sturdy", &format!("schedule = \"* * * * * *\"\n{command}"));
    let node = start(&cluster, "node-a");
    wait_for("both jobs to run", LIMIT, || words(&starts).len() >= 2);
    let pid_of = |task: &str| -> i32 {
        words(&starts)
            .iter()
            .find(|l| l[0].starts_with(&format!("{task}@")))
            .unwrap()[2]
            .parse()
            .unwrap()
    };
    let (fragile, sturdy) = (pid_of("fragile"), pid_of("sturdy"));

    // Freeze the daemon (not its jobs) past the 3 s session timeout: ZooKeeper expires it.
    node.signal(Signal::SIGSTOP);
    // The test measures real time: the server expires the session by its own clock.
    #[allow(clippy::disallowed_methods)]
    let frozen = std::time::Instant::now();
    wait_for("the session timeout to pass", LIMIT, || {
        frozen.elapsed() > Duration::from_secs(6)
    });
    assert!(process_alive(fragile), "a frozen daemon stops nothing");
    node.signal(Signal::SIGCONT);

    wait_for("the fragile job to be stopped", LIMIT, || {
        !process_alive(fragile)
    });
    assert!(
        node.log().contains(
            "ZooKeeper session lost: stopping this task's runs (kill_on_session_loss = true)"
        ),
        "{}",
        node.log()
    );
    wait_for("the node to rejoin", LIMIT, || {
        node.log().matches("registered in ZooKeeper").count() >= 2
    });
    assert!(
        process_alive(sturdy),
        "a disconnect alone never kills a job"
    );
    drop(node);
    kill_jobs(&starts);
}

/// Node `node-a` of `cluster` firing task `quick` (`true`, every second); returns the node and
/// the task's znode path.
fn quick_task_on_one_node(cluster: &Cluster) -> (DaemonProcess, String) {
    cluster.write_task(
        "quick",
        "schedule = \"* * * * * *\"\ncommand = [\"true\"]\n",
    );
    let task = format!("{}/tasks/quick", cluster.base());
    (start(cluster, "node-a"), task)
}

/// The JSON in znode `path`, if it exists and parses.
fn read_json(zk: &ZkServer, path: &str) -> Option<serde_json::Value> {
    zk.with_client(async |client| client.get_data(path).await.ok())
        .and_then(|(data, _)| serde_json::from_slice(&data).ok())
}

#[test]
fn given_runs_that_end_then_the_last_result_is_in_zookeeper_and_no_run_record_is_left() {
    let cluster = Cluster::new();
    let zk = &*cluster.zk;
    let (node, task) = quick_task_on_one_node(&cluster);
    let read_result = || read_json(zk, &format!("{task}/result"));
    wait_for("a result in ZooKeeper", LIMIT, || read_result().is_some());
    let result = read_result().unwrap();
    assert_eq!(result["format"], 1, "{result}");
    assert_eq!(result["node"], "node-a", "{result}");
    assert_eq!(result["exit"], "exit code 0", "{result}");
    assert_eq!(result["success"], true, "{result}");
    assert!(
        result["tick"].is_string() && result["duration_ms"].is_u64(),
        "{result}"
    );
    // Each live-run record goes in the same multi-op as its result: between ticks none is
    // left (a leak would leave one more per tick, and this would never hold).
    wait_for("a moment with no live-run record", LIMIT, || {
        zk.children(&task).iter().all(|c| !c.starts_with("run-"))
    });
    assert!(node.log().contains("registered in ZooKeeper"));
}

/// A node remembers the version of the result it last wrote, so that recording the next one is
/// one multi-op (the live-run record goes with it, and other nodes see the run end sooner). A
/// result written by someone else since must neither be overwritten by an older one nor keep the
/// run record alive.
#[test]
fn given_a_newer_result_written_elsewhere_then_the_node_keeps_it_and_still_removes_its_run_records()
{
    let cluster = Cluster::new();
    let zk = &*cluster.zk;
    let (node, task) = quick_task_on_one_node(&cluster);
    let result_path = format!("{task}/result");
    let read_result = || read_json(zk, &result_path);
    wait_for("a result in ZooKeeper", LIMIT, || read_result().is_some());

    let future = r#"{"format":1,"tick":"2100-01-01T00:00:00Z","node":"elsewhere","exit":"exit code 0","success":true,"attempts":1,"duration_ms":1,"finished_at":"2100-01-01T00:00:01Z"}"#;
    zk.with_client(async |client| {
        client
            .set_data(&result_path, future.as_bytes(), None)
            .await
            .unwrap()
    });
    let finished = node.log().matches("finished").count();
    wait_for("two more runs", LIMIT, || {
        node.log().matches("finished").count() >= finished + 2
    });
    wait_for("a moment with no live-run record", LIMIT, || {
        zk.children(&task).iter().all(|c| !c.starts_with("run-"))
    });

    assert_eq!(read_result().unwrap()["node"], "elsewhere");
    assert!(
        !node.log().contains("cannot record the run result"),
        "{}",
        node.log()
    );
}

#[test]
fn given_overlap_skip_when_the_leader_stops_mid_run_then_the_next_leader_starts_only_after_that_run_ends()
 {
    let cluster = Cluster::new();
    let runs = cluster.path().join("runs.log");
    // Every second, a run of 3 s: "start <fire id> <node>", then "end <fire id> <node>".
    cluster.write_task("long",
        &format!(
            "schedule = \"* * * * * *\"\ncommand = ['/bin/sh', '-c', 'echo \"start $ZKCRON_FIRE_ID $ZKCRON_NODE\" >> {0}; sleep 3; echo \"end $ZKCRON_FIRE_ID $ZKCRON_NODE\" >> {0}']\ncatch_up = \"skip\"\n",
            runs.display()
        ),
    );
    let a = start_with_grace(&cluster, "node-a", "20s");
    let b = start_with_grace(&cluster, "node-b", "20s");
    wait_for("a first run to start", LIMIT, || !words(&runs).is_empty());
    let first = words(&runs)[0].clone();
    let (leader, other) = if first[2] == "node-a" { (a, b) } else { (b, a) };
    // Stop the leader mid-run: it hands the lease over at once and waits for its job.
    leader.signal(Signal::SIGTERM);
    wait_for(
        "the other node to skip a tick for the run elsewhere",
        LIMIT,
        || other.log().contains("running_elsewhere=1"),
    );
    wait_for("the other node to start a run", LIMIT, || {
        words(&runs)
            .iter()
            .any(|l| l[0] == "start" && l[2] != first[2])
    });
    let all = words(&runs);
    let ended = all
        .iter()
        .position(|l| l[0] == "end" && l[1] == first[1])
        .expect("the stopped leader's run ended");
    let started = all
        .iter()
        .position(|l| l[0] == "start" && l[2] != first[2])
        .unwrap();
    assert!(
        ended < started,
        "the next leader started while the run elsewhere was going: {all:?}"
    );
    // Never two runs at once, on either node: each start follows the previous run's end.
    let mut open = 0;
    for line in &all {
        open += if line[0] == "start" { 1 } else { -1 };
        assert!((0..=1).contains(&open), "overlapping runs: {all:?}");
    }
    drop(leader);
    drop(other);
}

#[test]
fn given_max_clock_skew_when_a_nodes_clock_is_30s_ahead_then_it_refuses_leadership_and_the_other_node_fires_everything()
 {
    let cluster = Cluster::new();
    let fires = cluster.path().join("fires.log");
    for name in ["t1", "t2", "t3", "t4"] {
        cluster.write_task(name,
            &format!(
                "schedule = \"* * * * * *\"\ncommand = ['/bin/sh', '-c', 'echo \"$ZKCRON_FIRE_ID $ZKCRON_NODE\" >> {}']\n",
                fires.display()
            ),
        );
    }
    let config = "[coordination.zookeeper]\nmax_clock_skew = \"2s\"\n";
    let skewed = ClusterNode {
        config: config.into(),
        ..cluster.new_node("node-skewed")
    }
    .spawn_with(ClusterNode::binary_with_clock_ahead(30));
    wait_for("the skewed node to refuse leadership", LIMIT, || {
        skewed.log().contains("refusing leadership: this node's clock is further from ZooKeeper's than max_clock_skew; fix NTP")
    });
    let good = ClusterNode {
        config: config.into(),
        ..cluster.new_node("node-good")
    }
    .spawn();
    let led_all = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for("the good node to lead all four tasks", LIMIT, || {
            good.log().contains("leading=4")
        })
    }));
    assert!(
        led_all.is_ok(),
        "good:\n{}\nskewed:\n{}",
        good.log(),
        skewed.log()
    );
    // Three more ticks of every task, all fired by the good node.
    let from_good = |task: &str| {
        words(&fires)
            .iter()
            .filter(|l| l[0].starts_with(&format!("{task}@")) && l[1] == "node-good")
            .count()
    };
    wait_for("three fires of each task", LIMIT, || {
        ["t1", "t2", "t3", "t4"].iter().all(|t| from_good(t) >= 3)
    });
    let all = words(&fires);
    assert!(
        all.iter().all(|l| l[1] == "node-good"),
        "the skewed node fired: {all:?}"
    );
    assert!(
        skewed.log().contains("max_clock_skew=2s"),
        "{}",
        skewed.log()
    );
}

/// The clock-skew test above used to leave its zkcron running for 20+ minutes: dropping the node
/// killed the `faketime` wrapper, not the daemon it had started.
#[test]
fn dropping_a_node_run_through_faketime_kills_its_zkcron_child_too() {
    let cluster = Cluster::new();
    cluster.write_task("t1", "schedule = \"@hourly\"\ncommand = [\"true\"]\n");
    // Nothing listens on port 1: the node runs, paused, which is all this test needs.
    let node = ClusterNode {
        connect: "127.0.0.1:1".into(),
        ..cluster.new_node("node-skewed")
    }
    .spawn_with(ClusterNode::binary_with_clock_ahead(30));
    let mut daemon = None;
    wait_for("faketime to start zkcron", LIMIT, || {
        daemon = crate::common::descendants(node.child.id() as i32)
            .into_iter()
            .find(|pid| {
                fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "zkcron")
            });
        daemon.is_some()
    });
    let daemon = daemon.unwrap();
    drop(node);
    wait_for("the daemon under faketime to be gone", LIMIT, || {
        !process_alive(daemon)
    });
}

/// A node killed between its claim ahead and the tick's instant, the survivor, and what they
/// ran on. Fields drop in order: the survivor stops before its directory goes.
struct KilledBeforeTheInstant {
    survivor: DaemonProcess,
    fire_id: String,
    victim_id: String,
    cluster: Cluster,
}

/// Attempts at landing the kill inside the 200 ms claim lead before giving up.
const KILL_ATTEMPTS: usize = 5;

/// Two nodes fire task `t` (every 2 s, `on_node_loss = policy`); the node that claims a tick
/// ahead of its instant is killed (SIGKILL) before that instant. The kill follows the claim's
/// log line within the 20 ms the poll takes, but a loaded machine can delay the test past the
/// 200 ms lead: the attempt counts only if the kill returned more than 20 ms before the
/// tick's instant (the victim's own clock is this machine's), and otherwise starts over on a
/// fresh cluster, at most [`KILL_ATTEMPTS`] times. The runs write "<fire id> <node> <unix
/// time of the start>" lines to `starts.log` in the cluster's dir.
fn kill_a_node_between_the_claim_and_the_instant(policy: &str) -> KilledBeforeTheInstant {
    let mut late = Vec::new();
    for _ in 0..KILL_ATTEMPTS {
        let cluster = Cluster::new();
        match kill_once(&cluster, policy) {
            Ok((fire_id, victim_id, survivor)) => {
                return KilledBeforeTheInstant {
                    survivor,
                    fire_id,
                    victim_id,
                    cluster,
                };
            }
            Err(missed) => late.push(missed),
        }
    }
    panic!(
        "in {KILL_ATTEMPTS} attempts the kill never landed before the claimed tick's instant (is the machine overloaded?): {late:?}"
    );
}

#[allow(clippy::disallowed_methods)] // the test compares the kill with the tick's real instant
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// One attempt of [`kill_a_node_between_the_claim_and_the_instant`]: `Err` says how late the
/// kill was.
fn kill_once(cluster: &Cluster, policy: &str) -> Result<(String, String, DaemonProcess), String> {
    let starts = cluster.path().join("starts.log");
    let task = |schedule: &str| {
        format!(
            "schedule = \"{schedule}\"\ncommand = ['/bin/sh', '-c', 'echo \"$ZKCRON_FIRE_ID $ZKCRON_NODE $(date +%s.%N)\" >> {}']\ncatch_up = \"skip\"\non_node_loss = \"{policy}\"\n",
            starts.display()
        )
    };
    cluster.write_task("t", &task("0 0 0 1 1 *"));
    let a = start_debug(cluster, "node-a");
    let b = start_debug(cluster, "node-b");
    wait_for("both nodes to register", LIMIT, || {
        a.log().contains("registered in ZooKeeper") && b.log().contains("registered in ZooKeeper")
    });
    cluster.write_task("t", &task("*/2 * * * * *"));
    let claimed = |node: &DaemonProcess| {
        node.log()
            .lines()
            .find(|l| l.contains("claimed ahead of its instant"))
            .map(String::from)
    };
    let mut found = None;
    let mut killed_at = 0.0;
    wait_for("a node to claim a tick ahead of its instant", LIMIT, || {
        found = [&a, &b]
            .into_iter()
            .enumerate()
            .find_map(|(i, node)| claimed(node).map(|line| (i, line)));
        if let Some((i, _)) = &found {
            [&a, &b][*i].signal(Signal::SIGKILL);
            killed_at = unix_now();
        }
        found.is_some()
    });
    let (victim_index, line) = found.expect("found above");
    let fire_id = line
        .split_whitespace()
        .find_map(|word| word.strip_prefix("fire_id="))
        .expect("the line names the fire id")
        .to_string();
    let (victim, survivor) = if victim_index == 0 { (a, b) } else { (b, a) };
    let victim_id = if victim_index == 0 {
        "node-a"
    } else {
        "node-b"
    };
    drop(victim);
    let margin = fire_second(&fire_id) - killed_at;
    if margin < 0.020 {
        return Err(format!(
            "{fire_id}: killed {:.0} ms after its instant",
            -margin * 1000.0
        ));
    }
    assert!(
        !words(&starts)
            .iter()
            .any(|l| l[0] == fire_id && l[1] == victim_id),
        "the victim ran the tick it was killed {:.0} ms before: {:?}",
        margin * 1000.0,
        words(&starts)
    );
    Ok((fire_id, victim_id.to_string(), survivor))
}

/// The unix seconds of a fire id `<task>@<unix seconds>`.
fn fire_second(fire_id: &str) -> f64 {
    fire_id.rsplit('@').next().unwrap().parse().unwrap()
}

#[test]
fn given_a_node_killed_between_its_claim_ahead_and_the_instant_with_on_node_loss_skip_then_nobody_runs_that_tick()
 {
    let killed = kill_a_node_between_the_claim_and_the_instant("skip");
    let (fire_id, victim_id, survivor) = (
        killed.fire_id.as_str(),
        killed.victim_id.as_str(),
        &killed.survivor,
    );
    let starts = killed.cluster.path().join("starts.log");
    let survivor_id = if victim_id == "node-a" {
        "node-b"
    } else {
        "node-a"
    };
    wait_for("the survivor to run a later tick", LIMIT, || {
        words(&starts)
            .iter()
            .any(|l| l[1] == survivor_id && fire_second(&l[0]) > fire_second(fire_id))
    });
    assert!(
        !words(&starts).iter().any(|l| l[0] == fire_id),
        "the claimed tick {fire_id} ran: {:?}",
        words(&starts)
    );
    let log = survivor.log();
    assert!(!log.contains("rerunning a tick"), "{log}");
    // The lateness fields are still logged with each start.
    let started = log
        .lines()
        .find(|l| l.contains(" started") && l.contains("fire_id="))
        .expect(&log);
    assert!(
        started.contains("lateness_us=") && started.contains("claim_to_spawn_us="),
        "{started}"
    );
}

#[test]
fn given_a_node_killed_between_its_claim_ahead_and_the_instant_with_on_node_loss_rerun_then_the_new_leader_runs_it_once_not_before_its_instant()
 {
    let killed = kill_a_node_between_the_claim_and_the_instant("rerun");
    let (fire_id, victim_id, survivor) = (
        killed.fire_id.as_str(),
        killed.victim_id.as_str(),
        &killed.survivor,
    );
    let starts = killed.cluster.path().join("starts.log");
    wait_for("the new leader to rerun the claimed tick", LIMIT, || {
        words(&starts).iter().any(|l| l[0] == fire_id)
    });
    let log = survivor.log();
    assert!(
        log.contains("rerunning a tick whose node was lost"),
        "{log}"
    );
    // And a later tick too, so that a second run of the claimed tick had time to show.
    wait_for("the new leader to run a later tick", LIMIT, || {
        words(&starts)
            .iter()
            .any(|l| fire_second(&l[0]) > fire_second(fire_id))
    });
    let runs: Vec<Vec<String>> = words(&starts)
        .into_iter()
        .filter(|l| l[0] == fire_id)
        .collect();
    assert_eq!(runs.len(), 1, "run once: {:?}", words(&starts));
    assert_ne!(runs[0][1], victim_id);
    let started_at: f64 = runs[0][2].parse().unwrap();
    assert!(
        started_at >= fire_second(fire_id),
        "rerun at {started_at}, before its instant {fire_id}"
    );
}
