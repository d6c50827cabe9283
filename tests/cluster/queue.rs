//! `overlap = "queue"` end to end: real `zkcron run` nodes on a real ZooKeeper (a long run, the
//! tick due during it started right after it, on the same node and after the leader was
//! killed while the tick waited), and the local backend's daemon (a queued tick survives a
//! restart). Every job logs its start and end with the wall clock, so the tests see what ran,
//! where, and that no two runs overlapped.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use crate::common::cluster::Cluster;
use crate::common::zk::TestServer;

/// A generous deadline for things that take a moment (start-up, lease moves, a few runs).
const LIMIT: Duration = Duration::from_secs(40);

/// A task ticking every second whose runs take `secs` seconds, queued behind each other;
/// each run logs `start <fire id> <node> <ns>` and `end <fire id> <node> <ns>`.
fn slow_queued_task(log: &Path, secs: &str) -> String {
    format!(
        "schedule = \"* * * * * *\"\n\
         overlap = \"queue\"\n\
         command = [\"/bin/sh\", \"-c\", 'echo \"start $ZKCRON_FIRE_ID $ZKCRON_NODE $(date +%s%N)\" >> {log}; sleep {secs}; echo \"end $ZKCRON_FIRE_ID $ZKCRON_NODE $(date +%s%N)\" >> {log}']\n",
        log = log.display()
    )
}

/// One line of a job's log.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Event {
    start: bool,
    fire_id: String,
    node: String,
    ns: i64,
}

fn events(log: &Path) -> Vec<Event> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let [what, fire_id, node, ns] = words[..] else {
                return None;
            };
            Some(Event {
                start: what == "start",
                fire_id: fire_id.to_string(),
                node: node.to_string(),
                ns: ns.parse().ok()?,
            })
        })
        .collect()
}

/// The runs that ended, as (fire id, node, start ns, end ns), by start.
fn runs(log: &Path) -> Vec<(String, String, i64, i64)> {
    let events = events(log);
    let mut runs: Vec<_> = events
        .iter()
        .filter(|e| e.start)
        .filter_map(|start| {
            let end = events
                .iter()
                .find(|e| !e.start && e.fire_id == start.fire_id)?;
            Some((start.fire_id.clone(), start.node.clone(), start.ns, end.ns))
        })
        .collect();
    runs.sort_by_key(|r| r.2);
    runs
}

/// Checks that no fire id ran twice and no run started before the one before it ended.
fn assert_one_at_a_time(log: &Path) {
    let events = events(log);
    let mut started = BTreeSet::new();
    for event in events.iter().filter(|e| e.start) {
        assert!(
            started.insert(&event.fire_id),
            "{} ran twice: {events:#?}",
            event.fire_id
        );
    }
    let runs = runs(log);
    for pair in runs.windows(2) {
        assert!(
            pair[1].2 >= pair[0].3,
            "{} started before {} ended: {runs:#?}",
            pair[1].0,
            pair[0].0
        );
    }
}

/// The start of the run after each run that ended, in ms after that end.
fn delays_ms(log: &Path) -> Vec<f64> {
    runs(log)
        .windows(2)
        .map(|pair| (pair[1].2 - pair[0].3) as f64 / 1e6)
        .collect()
}

#[test]
fn a_tick_due_during_a_run_starts_when_the_run_ends_and_later_ones_are_dropped() {
    // Given two nodes and a task whose runs take 2.5 s, ticking every second.
    let mut cluster = Cluster::on(TestServer::shared(), "queue");
    let log = cluster.path().join("jobs.log");
    cluster.write_task("slow", &slow_queued_task(&log, "2.5"));
    cluster.start_each_at(&["a", "b"], "1.0.0");
    // When three runs have ended...
    cluster.wait("three runs to end", LIMIT, |_| runs(&log).len() >= 3);
    // ...then each started as soon as the one before ended (the tick queued behind it), one
    // at a time, each fire id once.
    assert_one_at_a_time(&log);
    let delays = delays_ms(&log);
    assert!(
        delays.iter().all(|&ms| ms < 1000.0),
        "a queued tick waited for its own second instead of the end of the run: {delays:?} ms"
    );
    // Both nodes' logs: the first run may be one the node that starts first claimed before the
    // lease moved to its rightful leader, which then queues the ticks.
    let said = ["a", "b"].map(|n| cluster.nodes[n].log()).join("\n");
    assert!(
        said.contains("queued: the previous run is still going"),
        "{said}"
    );
    assert!(said.contains("starting the queued tick"), "{said}");
    assert!(
        said.contains("dropped: a tick is queued already"),
        "a tick due while one waits is dropped and said so: {said}"
    );
}

#[test]
fn a_queued_tick_survives_the_leader_killed_while_it_waits() {
    let mut cluster = Cluster::on(TestServer::shared(), "queue-kill");
    let log = cluster.path().join("jobs.log");
    cluster.write_task("slow", &slow_queued_task(&log, "3"));
    cluster.start_each_at(&["a", "b"], "1.0.0");
    // Given a run live on the leader and a tick queued behind it.
    cluster.wait("a tick queued", LIMIT, |c| {
        c.nodes
            .values()
            .any(|n| n.log().contains("queued: the previous run is still going"))
    });
    let (leader, queued) = cluster
        .nodes
        .iter()
        .find_map(|(id, node)| {
            let log = node.log();
            let line = log
                .lines()
                .find(|l| l.contains("queued: the previous run is still going"))?;
            let fire_id = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("fire_id="))?
                .trim_matches('"')
                .to_string();
            Some((id.clone(), fire_id))
        })
        .unwrap();
    // When the leader is killed (SIGKILL, with its job) while the tick waits...
    drop(cluster.nodes.remove(&leader));
    let survivor = if leader == "a" { "b" } else { "a" };
    // ...then the survivor runs the queued tick once the dead leader's run record is gone.
    cluster.wait(
        &format!("{survivor} to run the queued tick {queued}"),
        LIMIT,
        |_| {
            events(&log)
                .iter()
                .any(|e| e.start && e.fire_id == queued && e.node == survivor)
        },
    );
    let started = events(&log)
        .iter()
        .filter(|e| e.start && e.fire_id == queued)
        .count();
    assert_eq!(started, 1, "{queued} ran once: {:#?}", events(&log));
    assert!(
        cluster.nodes[survivor]
            .log()
            .contains("starting the queued tick"),
        "{}",
        cluster.logs()
    );
}

#[test]
fn the_local_backend_keeps_a_queued_tick_across_a_restart() {
    // Given the local daemon, a run of 2 s and the tick due during it queued.
    let scratch = crate::common::Scratch::new();
    let log = scratch.out("jobs.log");
    scratch.write_task("slow", &slow_queued_task(&log, "2"));
    let mut daemon = scratch.start_daemon(&[]);
    daemon.wait_for_log("queued: the previous run is still going", LIMIT);
    let line = daemon
        .log()
        .lines()
        .find(|l| l.contains("queued: the previous run is still going"))
        .unwrap()
        .to_string();
    let queued = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("fire_id="))
        .unwrap()
        .trim_matches('"')
        .to_string();
    // When the daemon stops (its run finishes, the queued tick does not start) and starts
    // again...
    daemon.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(daemon.wait_exit(LIMIT), Some(0), "{}", daemon.log());
    let before = events(&log);
    assert!(
        !before.iter().any(|e| e.fire_id == queued),
        "{queued} started before the restart: {before:#?}"
    );
    let daemon = scratch.start_daemon(&[]);
    // ...then the queued tick runs, once, first.
    crate::common::wait_for(&format!("{queued} to run after the restart"), LIMIT, || {
        events(&log).iter().any(|e| e.start && e.fire_id == queued)
    });
    daemon.wait_for_log("starting the queued tick", LIMIT);
    assert_one_at_a_time(&log);
}

#[test]
fn after_a_handoff_the_new_leader_starts_the_queued_tick_when_the_old_leaders_run_ends() {
    let mut cluster = Cluster::on(TestServer::shared(), "queue-handoff");
    let log = cluster.path().join("jobs.log");
    cluster.write_task("slow", &slow_queued_task(&log, "4"));
    cluster.start_each_at(&["a", "b"], "1.0.0");
    // Given a run live on the leader and a tick queued behind it.
    cluster.wait("a tick queued", LIMIT, |c| {
        c.nodes
            .values()
            .any(|n| n.log().contains("queued: the previous run is still going"))
    });
    let leader = cluster
        .nodes
        .iter()
        .find(|(_, n)| n.log().contains("queued: the previous run is still going"))
        .map(|(id, _)| id.clone())
        .unwrap();
    let other = if leader == "a" { "b" } else { "a" };
    // When the operator drains the leader: it hands the lease over and its run goes on.
    cluster.zkcron_ok(&["drain", &leader]);
    // Then the new leader waits for that run's end (told by ZooKeeper, not by polling) and
    // starts the queued tick right after it.
    cluster.wait_log(
        other,
        "the queued tick waits for the runs on other nodes to end",
        1,
    );
    cluster.wait(&format!("{other} to start the queued tick"), LIMIT, |c| {
        c.nodes[other].log().contains("starting the queued tick")
    });
    cluster.wait("that run to end", LIMIT, |_| {
        runs(&log).iter().any(|r| r.1 == other)
    });
    assert_one_at_a_time(&log);
    let runs = runs(&log);
    let handed = runs
        .windows(2)
        .find(|pair| pair[0].1 == leader && pair[1].1 == other)
        .unwrap_or_else(|| panic!("no run of {other} right after one of {leader}: {runs:#?}"));
    let delay_ms = (handed[1].2 - handed[0].3) as f64 / 1e6;
    assert!(
        delay_ms < 500.0,
        "the queued tick started {delay_ms} ms after the run ended on the old leader"
    );
}

#[test]
fn metrics_count_the_queued_and_the_dropped_ticks() {
    // The jobs' log outlives the daemon (dropped after it).
    let out = crate::common::tempdir();
    let log = out.path().join("jobs.log");
    let served = crate::common::Served::start(None, &[("slow", &slow_queued_task(&log, "2.5"))]);
    let (daemon, address) = (&served.daemon, &served.address);
    daemon.wait_for_log("dropped: a tick is queued already", LIMIT);
    let count = |outcome: &str| {
        let (_, metrics) = crate::common::http_get(address, "/metrics");
        let series = format!("zkcron_fires_total{{task=\"slow\",outcome=\"{outcome}\"}} ");
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(&series)?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    crate::common::wait_for("a queued and a dropped tick counted", LIMIT, || {
        count("queued") >= 1 && count("dropped") >= 1
    });
}
