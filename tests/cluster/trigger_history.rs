//! Manual runs and run history against a real ZooKeeper with real zkcron processes: a trigger
//! znode created as `zkcron trigger` creates it is run once by the task's leader, with the
//! trigger's name as its fire id, and ended with the result; a trigger of a task nobody leads
//! stays pending; the history keeps `history_runs` runs with every field filled in, including
//! the run that ends while its node stops.

use std::path::Path;
use std::time::Duration;

use crate::common::cluster::Cluster;
use crate::common::fires::words;
use crate::common::zk::{ClusterNode, ZkServer};
use crate::common::{DaemonProcess, wait_for};
use chrono::{DateTime, SecondsFormat, Utc};
use zkcron::coord::records::{HistoryRecord, RunTrigger, TriggerRecord, TriggerState};

const LIMIT: Duration = Duration::from_secs(30);

/// Starts node `id` of `cluster`, keeping `history_runs` runs in each task's history.
fn start(cluster: &Cluster, id: &str, history_runs: usize) -> DaemonProcess {
    ClusterNode {
        config: format!("[scheduler]\nshutdown_grace = \"1s\"\nhistory_runs = {history_runs}\n"),
        ..cluster.new_node(id)
    }
    .spawn()
}

/// A job that records "<fire id> <scheduled at> <node>" and exits with `code`.
fn recording_task(starts: &Path, code: i32) -> String {
    // A yearly schedule: nothing but the trigger runs it during the test.
    format!(
        "schedule = \"0 0 0 1 1 *\"\ncommand = ['/bin/sh', '-c', 'echo \"$ZKCRON_FIRE_ID $ZKCRON_SCHEDULED_AT $ZKCRON_NODE\" >> {}; exit {code}']\n",
        starts.display()
    )
}

/// The data of `path` (from the root), if it exists.
fn read(zk: &ZkServer, path: &str) -> Option<Vec<u8>> {
    let path = path.to_string();
    zk.with_client(async move |client| match client.get_data(&path).await {
        Ok((data, _)) => Some(data),
        Err(zookeeper_client::Error::NoNode) => None,
        Err(e) => panic!("reading {path}: {e}"),
    })
}

fn trigger_state(zk: &ZkServer, path: &str) -> Option<TriggerRecord> {
    read(zk, path).map(|data| serde_json::from_slice(&data).expect("a trigger record"))
}

/// Creates a pending trigger of `task` as `zkcron trigger` does (a sequential znode named
/// `<task>@manual-`); returns its path and the record.
#[allow(clippy::disallowed_methods)] // the request time, as `zkcron trigger` reads it
fn create_trigger(zk: &ZkServer, base: &str, task: &str) -> (String, TriggerRecord) {
    // Whole seconds: ZKCRON_SCHEDULED_AT is given in them.
    let requested_at = DateTime::from_timestamp(Utc::now().timestamp(), 0).unwrap();
    let record = TriggerRecord::pending(task, "tester@test", requested_at);
    let data = serde_json::to_vec(&record).unwrap();
    let prefix = format!("{base}/control/triggers/{task}@manual-");
    let path = zk.with_client(async move |client| {
        let options = zookeeper_client::CreateMode::PersistentSequential
            .with_acls(zookeeper_client::Acls::anyone_all());
        let (_, sequence) = client
            .create(&prefix, &data, &options)
            .await
            .unwrap_or_else(|e| panic!("creating the trigger {prefix}: {e}"));
        format!("{prefix}{sequence}")
    });
    (path, record)
}

#[test]
fn given_trigger_znodes_the_leader_runs_each_once_and_ends_it_with_the_result() {
    let cluster = Cluster::new();
    let zk = &*cluster.zk;
    let starts = cluster.path().join("starts.log");
    cluster.write_task("good", &recording_task(&starts, 0));
    cluster.write_task("bad", &recording_task(&starts, 3));
    let base = cluster.base();
    let a = start(&cluster, "node-a", 100);
    let b = start(&cluster, "node-b", 100);
    wait_for("both tasks to be led", LIMIT, || {
        zk.children(&format!("{base}/leases")).len() == 2
            && a.log().contains("registered in ZooKeeper")
            && b.log().contains("registered in ZooKeeper")
    });

    // A trigger of a task no node defines: nobody leads it, it stays pending.
    let (ghost, _) = create_trigger(zk, &base, "ghost");
    let (good, good_request) = create_trigger(zk, &base, "good");
    let (bad, _) = create_trigger(zk, &base, "bad");
    let name = |path: &str| path.rsplit('/').next().unwrap().to_string();
    assert!(
        name(&good).starts_with("good@manual-") && name(&good).len() == "good@manual-".len() + 10
    );

    let ended =
        |path: &str| trigger_state(zk, path).is_some_and(|t| t.state == TriggerState::Ended);
    wait_for("both triggers to end", LIMIT, || {
        ended(&good) && ended(&bad)
    });

    let good_end = trigger_state(zk, &good).unwrap();
    let node = good_end.node.clone().expect("the claiming node");
    assert!(
        ["node-a", "node-b"].contains(&node.as_str()),
        "{good_end:?}"
    );
    assert!(good_end.claimed_at.is_some(), "{good_end:?}");
    assert_eq!(good_end.by, "tester@test");
    assert_eq!(good_end.reason, None);
    let result = good_end.result.clone().expect("the result");
    assert_eq!(result.fire_id, name(&good));
    assert_eq!(result.tick, good_request.requested_at);
    assert_eq!(result.node, node);
    assert_eq!(result.release, env!("CARGO_PKG_VERSION"));
    assert_eq!(
        (
            result.exit_code,
            result.signal,
            result.success,
            result.attempts
        ),
        (Some(0), None, true, 1)
    );
    assert_eq!(result.trigger, RunTrigger::Manual);
    assert!(result.started_at >= good_request.requested_at, "{result:?}");

    let bad_result = trigger_state(zk, &bad).unwrap().result.unwrap();
    assert_eq!(bad_result.fire_id, name(&bad));
    assert_eq!((bad_result.exit_code, bad_result.success), (Some(3), false));

    // Each ran exactly once, with the trigger's name as its fire id and the request time as
    // its scheduled time, on the node the trigger names.
    let history_has = |task: &str, fire_id: &str| {
        read(zk, &format!("{base}/tasks/{task}/history")).is_some_and(|data| {
            let history: HistoryRecord = serde_json::from_slice(&data).unwrap();
            history.runs.iter().any(|r| r.fire_id == fire_id)
        })
    };
    wait_for("the history to have both runs", LIMIT, || {
        history_has("good", &name(&good)) && history_has("bad", &name(&bad))
    });
    let good_history: HistoryRecord =
        serde_json::from_slice(&read(zk, &format!("{base}/tasks/good/history")).unwrap()).unwrap();
    assert_eq!(good_history.runs, vec![result]);
    let runs = words(&starts);
    let of = |fire_id: &str| {
        runs.iter()
            .filter(|l| l[0] == fire_id)
            .cloned()
            .collect::<Vec<_>>()
    };
    let good_runs = of(&name(&good));
    assert_eq!(good_runs.len(), 1, "{runs:?}");
    assert_eq!(
        good_runs[0][1],
        good_request
            .requested_at
            .to_rfc3339_opts(SecondsFormat::Secs, true)
    );
    assert_eq!(good_runs[0][2], node);
    assert_eq!(of(&name(&bad)).len(), 1, "{runs:?}");
    assert_eq!(runs.len(), 2, "only the triggers ran: {runs:?}");
    // A manual run moves no fire record: the tasks never ticked.
    for task in ["good", "bad"] {
        let record = read(zk, &format!("{base}/tasks/{task}")).unwrap_or_default();
        let record = String::from_utf8_lossy(&record);
        assert!(!record.contains("\"tick\""), "{task}: {record}");
    }

    let ghost_state = trigger_state(zk, &ghost).unwrap();
    assert_eq!(ghost_state.state, TriggerState::Pending, "{ghost_state:?}");
    assert_eq!(ghost_state.node, None);
}

#[test]
fn the_history_keeps_the_last_history_runs_runs_with_every_field() {
    let cluster = Cluster::new();
    let zk = &*cluster.zk;
    let starts = cluster.path().join("starts.log");
    cluster.write_task("tick",
        &format!(
            "schedule = \"* * * * * *\"\ncommand = ['/bin/sh', '-c', 'echo \"$ZKCRON_FIRE_ID\" >> {}']\n",
            starts.display()
        ),
    );
    let base = cluster.base();
    let a = start(&cluster, "node-a", 3);
    let path = format!("{base}/tasks/tick/history");
    let history = || -> Vec<zkcron::coord::records::HistoryEntry> {
        read(zk, &path)
            .map(|data| serde_json::from_slice::<HistoryRecord>(&data).unwrap().runs)
            .unwrap_or_default()
    };
    wait_for("five runs, the last of them in the history", LIMIT, || {
        let runs = words(&starts);
        runs.len() >= 5
            && history()
                .last()
                .is_some_and(|last| runs.iter().any(|l| l[0] == last.fire_id))
            && history().len() == 3
    });
    let runs = history();
    assert_eq!(runs.len(), 3, "{runs:?}");
    let started: Vec<String> = words(&starts).into_iter().map(|l| l[0].clone()).collect();
    for (i, run) in runs.iter().enumerate() {
        assert_eq!(run.fire_id, format!("tick@{}", run.tick.timestamp()));
        assert!(started.contains(&run.fire_id), "{run:?} not in {started:?}");
        assert_eq!(run.node, "node-a");
        assert_eq!(run.release, env!("CARGO_PKG_VERSION"));
        assert!(run.started_at >= run.tick, "{run:?}");
        assert!(run.duration_ms < 10_000, "{run:?}");
        assert_eq!(
            (run.exit_code, run.signal, run.success, run.attempts),
            (Some(0), None, true, 1)
        );
        assert_eq!(run.trigger, RunTrigger::Schedule);
        if i > 0 {
            assert!(runs[i - 1].tick < run.tick, "oldest first: {runs:?}");
        }
    }
    // The newest runs are kept: none older than the third newest start.
    let newest: Vec<&String> = started.iter().rev().take(4).collect();
    assert!(
        newest.contains(&&runs[0].fire_id),
        "{runs:?} vs {started:?}"
    );
    // `tasks/tick/history` sits beside the run znodes: the live-run listing (overlap = "skip"
    // here) does not take it for a run, not even a foreign one.
    assert!(!a.log().contains("ignoring the run record"), "{}", a.log());
    let json = String::from_utf8(read(zk, &path).unwrap()).unwrap();
    assert!(
        json.contains("\"exit_code\":0,\"signal\":null"),
        "exit code and signal are always present: {json}"
    );
}

/// A node stopped with SIGTERM while a run goes writes that run's history before it closes its
/// session. It used to close first, right after the run's result: "cannot append to the run
/// history ... (the ZooKeeper session ended)", and the entry was lost.
#[test]
fn a_node_stopped_while_a_run_goes_writes_that_runs_history_before_it_leaves() {
    let cluster = Cluster::new();
    let zk = &*cluster.zk;
    let starts = cluster.path().join("starts.log");
    cluster.write_task("slow",
        &format!(
            "schedule = \"* * * * * *\"\ncommand = ['/bin/sh', '-c', 'echo \"$ZKCRON_FIRE_ID\" >> {}; sleep 0.3']\n",
            starts.display()
        ),
    );
    let base = cluster.base();
    let mut a = start(&cluster, "node-a", 100);
    wait_for("a first run", LIMIT, || !words(&starts).is_empty());
    let seen = words(&starts).len();
    // Stopped just after a run started: it ends (within shutdown_grace) after the stop began.
    wait_for("the next run", LIMIT, || words(&starts).len() > seen);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(a.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    wait_for("node-a to exit", LIMIT, || {
        a.child.try_wait().unwrap().is_some()
    });
    let path = format!("{base}/tasks/slow/history");
    let recorded: Vec<String> = read(zk, &path)
        .map(|data| serde_json::from_slice::<HistoryRecord>(&data).unwrap().runs)
        .unwrap_or_default()
        .into_iter()
        .map(|run| run.fire_id)
        .collect();
    for started in words(&starts) {
        assert!(
            recorded.contains(&started[0]),
            "{} started but is not in the history {recorded:?}\n{}",
            started[0],
            a.log()
        );
    }
    assert!(
        !a.log().contains("cannot append to the run history"),
        "{}",
        a.log()
    );
}
