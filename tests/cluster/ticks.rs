//! The tick ledger in a cluster: the ticks the leader skips for `overlap` (and a full queue) are
//! in the fire record, read by `zkcron history --ticks` on any host and by every node's API, and
//! counted in the leader's `/metrics`; the ticks after an active window are skipped for
//! `window`; a paused period is one entry; when the only node a task's
//! labels allow leaves, the ticks that pass are missed for `no_eligible_node` (and
//! `zkcron_task_no_eligible_node` says so); when every node is down, for `no_node`.

use std::time::Duration;

use serde_json::Value;

use crate::common::cluster::Cluster;
use crate::common::fires::words;
use crate::common::{http_get, wait_for};

const LIMIT: Duration = Duration::from_secs(30);

fn ledger(cluster: &Cluster, task: &str) -> Vec<Value> {
    let out = cluster.zkcron_ok(&["history", task, "--ticks", "--json"]);
    serde_json::from_str(&out).unwrap()
}

fn has(entries: &[Value], outcome: &str, reason: Option<&str>, at_least: u64) -> bool {
    entries.iter().any(|e| {
        e["outcome"] == outcome
            && reason.is_none_or(|r| e["reason"] == r)
            && e["count"].as_u64().unwrap_or(0) >= at_least
    })
}

#[test]
#[allow(clippy::disallowed_methods)] // real processes: real ticks pass while every node is down
fn the_cluster_s_ledger_gives_each_tick_not_run_its_reason() {
    let mut cluster = Cluster::new();
    cluster.write_task(
        "slow",
        "schedule = \"* * * * * *\"\ncommand = \"sleep 2.5\"\noverlap = \"skip\"\n",
    );
    cluster.write_task(
        "queued",
        "schedule = \"* * * * * *\"\ncommand = \"sleep 2.5\"\noverlap = \"queue\"\n",
    );
    cluster.write_task(
        "beat",
        "schedule = \"* * * * * *\"\ncommand = \"true\"\ncatch_up = \"skip\"\n",
    );
    #[allow(clippy::disallowed_methods)] // the window ends on the real clock
    let until = (chrono::Utc::now() + chrono::TimeDelta::seconds(3))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    cluster.write_task(
        "window",
        &format!("schedule = \"* * * * * *\"\ncommand = \"true\"\nactive_until = \"{until}\"\n"),
    );
    cluster.write_task(
        "gpu",
        "schedule = \"* * * * * *\"\ncommand = \"true\"\nrequire_labels = { gpu = \"yes\" }\n",
    );
    let mut addresses = Vec::new();
    let node = |cluster: &Cluster, id: &str, labels: &str| {
        let mut node = cluster.new_node(id);
        node.config = format!("[node]\nlabels = {labels}\n[http]\nlisten = \"127.0.0.1:0\"\n");
        node
    };
    for (id, labels) in [("ticks-a", "{ gpu = \"yes\" }"), ("ticks-b", "{}")] {
        let node = node(&cluster, id, labels);
        addresses.push(cluster.start(node).served_address());
    }

    // Skips for overlap, from any host; the API of each node says the same.
    cluster.wait("an overlap skip in slow's ledger", LIMIT, |c| {
        let entries = ledger(c, "slow");
        has(&entries, "ran", None, 1) && has(&entries, "skipped", Some("overlap"), 1)
    });
    for address in &addresses {
        let (status, body) = http_get(address, "/api/tasks/slow/ticks");
        assert_eq!(status, 200, "{body}");
        let api: Vec<Value> = serde_json::from_str(&body).unwrap();
        assert!(has(&api, "skipped", Some("overlap"), 1), "{body}");
    }
    let counted = addresses.iter().any(|address| {
        let (_, metrics) = http_get(address, "/metrics");
        metrics.contains("zkcron_ticks_total{task=\"slow\",outcome=\"skipped\",reason=\"overlap\"}")
    });
    assert!(
        counted,
        "no node counts slow's skips\n{}",
        cluster.diagnostics()
    );
    cluster.wait("a tick dropped from queued's full queue", LIMIT, |c| {
        has(&ledger(c, "queued"), "skipped", Some("queue_full"), 1)
    });
    // Ticks after the active window, which no leader sees, worked out by the reader.
    cluster.wait("ticks after window's active window", LIMIT, |c| {
        let entries = ledger(c, "window");
        has(&entries, "ran", None, 1) && has(&entries, "skipped", Some("window"), 2)
    });

    // A paused period: open while paused, then one entry, and runs after it.
    cluster.wait("a run of beat", LIMIT, |c| {
        has(&ledger(c, "beat"), "ran", None, 1)
    });
    cluster.zkcron_ok(&["pause", "beat"]);
    cluster.wait("paused ticks", LIMIT, |c| {
        has(&ledger(c, "beat"), "skipped", Some("paused"), 2)
    });
    cluster.zkcron_ok(&["resume", "beat"]);
    cluster.wait("a run after the paused period", LIMIT, |c| {
        let entries = ledger(c, "beat");
        let paused = entries.iter().position(|e| e["reason"] == "paused");
        paused.is_some_and(|p| entries[p + 1..].iter().any(|e| e["outcome"] == "ran"))
    });

    // gpu runs on ticks-a alone; once it leaves, nobody may run it.
    cluster.wait("a run of gpu", LIMIT, |c| {
        has(&ledger(c, "gpu"), "ran", None, 1)
    });
    cluster.stop("ticks-a");
    cluster.wait("ticks no eligible node could run", LIMIT, |c| {
        has(&ledger(c, "gpu"), "missed", Some("no_eligible_node"), 2)
    });
    let table = cluster.zkcron_ok(&["history", "gpu", "--ticks"]);
    assert!(
        table.contains("missed")
            && table.contains("no_eligible_node: no live node may run the task"),
        "{table}"
    );
    let (_, metrics) = http_get(&addresses[1], "/metrics");
    assert!(
        metrics.contains("zkcron_task_no_eligible_node{task=\"gpu\"} 1"),
        "{metrics}"
    );

    // Every node down for 3 s: the node that comes back finds beat's ticks nobody fired.
    cluster.stop("ticks-b");
    let back = chrono::Utc::now() + chrono::TimeDelta::seconds(3);
    cluster.wait("three ticks with no node", LIMIT, |_| {
        chrono::Utc::now() > back
    });
    let node = node(&cluster, "ticks-b", "{}");
    cluster.start(node);
    // (Until the node registers again no live node defines beat, and history says so.)
    cluster.wait("ticks missed with no node", LIMIT, |c| {
        let out = c.zkcron(&["history", "beat", "--ticks", "--json"]);
        let entries: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
        has(&entries, "missed", Some("no_node"), 2)
    });
}

/// A node killed mid-run: its tick has no result, and the claim that moves past it records it
/// as missed `node_lost`, which stays in the ledger after later runs.
#[test]
fn a_run_lost_with_its_node_stays_in_the_ledger_as_node_lost() {
    let cluster = Cluster::new();
    let starts = cluster.path().join("starts.log");
    cluster.write_task(
        "long",
        &format!(
            "schedule = \"* * * * * *\"\ncommand = ['/bin/sh', '-c', 'echo \"$ZKCRON_FIRE_ID $ZKCRON_NODE $$\" >> {}; exec sleep 3']\ncatch_up = \"skip\"\n",
            starts.display()
        ),
    );
    let a = cluster.new_node("lost-a").spawn();
    let b = cluster.new_node("lost-b").spawn();
    wait_for("a run of long", LIMIT, || {
        words(&starts).first().is_some_and(|l| l.len() == 3)
    });
    let first = words(&starts)[0].clone();
    let (victim, survivor) = if first[1] == "lost-a" { (a, b) } else { (b, a) };
    victim.signal(nix::sys::signal::Signal::SIGKILL);
    let tick = first[0].rsplit('@').next().unwrap().parse::<i64>().unwrap();
    let lost_at = chrono::DateTime::from_timestamp(tick, 0)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    cluster.wait(
        "the lost run in the ledger, and two runs after it",
        LIMIT,
        |c| {
            let entries = ledger(c, "long");
            let lost = entries
                .iter()
                .position(|e| e["reason"] == "node_lost" && e["from"] == lost_at.as_str());
            lost.is_some_and(|p| {
                entries[p + 1..]
                    .iter()
                    .filter(|e| e["outcome"] == "ran")
                    .count()
                    >= 2
            })
        },
    );
    drop(survivor);
    drop(victim);
    for line in words(&starts) {
        if let Some(pid) = line.get(2).and_then(|p| p.parse::<i32>().ok()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(-pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}
