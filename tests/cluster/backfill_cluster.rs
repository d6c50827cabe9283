//! `zkcron backfill` against a real ZooKeeper with real `zkcron run` nodes: the task's leader
//! runs each tick of the range once, oldest first, under a backfill fire id with the historic
//! tick as `ZKCRON_SCHEDULED_AT`; a kill -9 of the leader mid-way runs no tick twice and the
//! next leader finishes the rest (the tick cut short counts as failed); `--wait`, `--status`,
//! `--cancel` and `history` show it.

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use crate::common::cluster::Cluster;
use crate::common::wall::now;
use chrono::{DateTime, TimeDelta, Utc};
use nix::sys::signal::Signal;

const LIMIT: Duration = Duration::from_secs(60);

const FROM: &str = "2026-01-01T00:00:00Z";

fn at_minute(minute: i64) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(FROM)
        .unwrap()
        .with_timezone(&Utc)
        + TimeDelta::minutes(minute)
}

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

trait Backfills {
    fn runs_path(&self) -> PathBuf;
    fn write_recording_task(&self, name: &str, sleep: &str);
    /// The jobs' lines: (fire id, scheduled at, node).
    fn runs(&self) -> Vec<(String, String, String)>;
    /// When each job started (wall clock, Unix seconds), in the order they wrote.
    fn starts(&self) -> Vec<f64>;
    fn listed(&self) -> String;
}

impl Backfills for Cluster {
    fn runs_path(&self) -> PathBuf {
        self.path().join("runs.log")
    }

    /// A task every minute whose job records its backfill runs, `<fire id> <scheduled at>
    /// <node> <start>` (`<start>`: when it started, Unix seconds with nanoseconds; a scheduled
    /// tick due during the test records nothing), and sleeps `sleep`.
    fn write_recording_task(&self, name: &str, sleep: &str) {
        let text = format!(
            "schedule = \"* * * * *\"\ncommand = ['/bin/sh', '-c', 'case \"$ZKCRON_FIRE_ID\" in *@backfill-*) echo \"$ZKCRON_FIRE_ID $ZKCRON_SCHEDULED_AT $ZKCRON_NODE $(date +%s.%N)\" >> {}; sleep {sleep};; esac']\n",
            self.runs_path().display()
        );
        self.write_task(name, &text);
    }

    fn runs(&self) -> Vec<(String, String, String)> {
        std::fs::read_to_string(self.runs_path())
            .unwrap_or_default()
            .lines()
            .map(|line| {
                let mut parts = line.split(' ');
                let mut next = || parts.next().unwrap_or_default().to_string();
                (next(), next(), next())
            })
            .collect()
    }

    fn starts(&self) -> Vec<f64> {
        let text = std::fs::read_to_string(self.runs_path()).unwrap_or_default();
        let start = |line: &str| line.split(' ').nth(3)?.parse().ok();
        text.lines()
            .map(|line| start(line).unwrap_or_else(|| panic!("no start in {line:?}")))
            .collect()
    }

    fn listed(&self) -> String {
        let out = self.zkcron(&["backfill", "--status"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    }
}

fn request_id(out: &Output) -> String {
    let said = text(&out.stdout);
    said.lines()
        .next()
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or_else(|| panic!("no id in {said:?}"))
        .to_string()
}

#[test]
fn a_backfill_runs_each_tick_once_on_the_leader_and_wait_follows_it_to_its_end() {
    let mut cluster = Cluster::new();
    cluster.write_recording_task("rep", "0");
    cluster.start(cluster.new_node("node-a"));
    cluster.start(cluster.new_node("node-b"));
    let leases = format!("{}/leases", cluster.base());
    cluster.wait("the task to be led", LIMIT, |c| {
        c.zk.children(&leases).len() == 1
    });

    let (from, to) = (rfc(at_minute(0)), rfc(at_minute(4)));
    let out = cluster.zkcron(&["backfill", "rep", "--from", &from, "--to", &to, "--wait"]);
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}{}", text(&out.stderr));
    let id = request_id(&out);
    assert!(id.starts_with("rep@backfill-") && id.len() == "rep@backfill-".len() + 10);
    assert!(
        said.contains(&format!("backfill {id}: 4 of 4 done, 0 failed (done)")),
        "{said}"
    );
    let runs = cluster.runs();
    let expected: Vec<(String, String)> = (0..4)
        .map(|m| {
            (
                format!("{id}-{}", at_minute(m).timestamp()),
                rfc(at_minute(m)),
            )
        })
        .collect();
    let got: Vec<(String, String)> = runs
        .iter()
        .map(|(i, s, _)| (i.clone(), s.clone()))
        .collect();
    assert_eq!(got, expected, "each tick once, oldest first");

    let out = cluster.zkcron(&["history", "rep", "--json"]);
    let history: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let backfilled = history
        .as_array()
        .unwrap()
        .iter()
        .filter(|run| run["backfill"] == true)
        .count();
    assert_eq!(backfilled, 4, "{history:#}");
    assert!(cluster.listed().contains("4/4"), "{}", cluster.listed());
}

#[test]
fn a_kill_9_of_the_leader_mid_backfill_runs_no_tick_twice_and_the_next_leader_finishes_it() {
    let mut cluster = Cluster::new();
    cluster.write_recording_task("rep", "0.3");
    cluster.start(cluster.new_node("node-a"));
    cluster.start(cluster.new_node("node-b"));
    let leases = format!("{}/leases", cluster.base());
    cluster.wait("the task to be led", LIMIT, |c| {
        c.zk.children(&leases).len() == 1
    });

    let (from, to) = (rfc(at_minute(0)), rfc(at_minute(16)));
    let out = cluster.zkcron(&["backfill", "rep", "--from", &from, "--to", &to]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id = request_id(&out);
    cluster.wait("four ticks to run", LIMIT, |c| c.runs().len() >= 4);
    let leader = cluster.runs().last().unwrap().2.clone();
    let mut victim = cluster.nodes.remove(&leader).unwrap();
    victim.signal(Signal::SIGKILL);
    victim.wait_exit(LIMIT);

    cluster.wait("the backfill to end on the other node", LIMIT, |c| {
        c.listed().contains("16/16")
    });
    let runs = cluster.runs();
    let mut ids: Vec<&String> = runs.iter().map(|(id, _, _)| id).collect();
    let all = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), all, "a tick ran twice: {runs:?}");
    assert!(
        runs.len() >= 15,
        "only the tick cut short may be missing: {runs:?}"
    );
    let survivor = if leader == "node-a" {
        "node-b"
    } else {
        "node-a"
    };
    assert_eq!(runs.last().unwrap().2, survivor, "{runs:?}");
    assert!(
        ids.iter().all(|i| i.starts_with(&format!("{id}-"))),
        "{runs:?}"
    );
    // A tick running at the kill (its job may have gone on without its node) counts as failed
    // and the survivor's log says why it was not run again.
    let listed = cluster.listed();
    let line: Vec<&str> = listed
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(line[1..3], ["done", "16/16"], "{listed}");
    if line[3] == "1" {
        let log = cluster.nodes[survivor].log();
        assert!(log.contains("was lost while running a tick"), "{log}");
    } else {
        assert_eq!(line[3], "0", "{listed}");
    }
}

#[test]
fn cancel_stops_a_cluster_backfill_and_an_unknown_task_is_refused() {
    let mut cluster = Cluster::new();
    cluster.write_recording_task("rep", "0.3");
    cluster.start(cluster.new_node("node-a"));
    let leases = format!("{}/leases", cluster.base());
    cluster.wait("the task to be led", LIMIT, |c| {
        c.zk.children(&leases).len() == 1
    });
    let (from, to) = (rfc(at_minute(0)), rfc(at_minute(60)));
    let out = cluster.zkcron(&["backfill", "rep", "--from", &from, "--to", &to]);
    let id = request_id(&out);
    cluster.wait("a tick to run", LIMIT, |c| !c.runs().is_empty());
    // `status` and `explain` show it while it is active.
    let out = cluster.zkcron(&["status", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let progress = &status["tasks"][0]["backfills"][0];
    assert_eq!(progress["id"], id.as_str(), "{status:#}");
    assert_eq!(progress["total"], 60, "{status:#}");
    let explained = text(&cluster.zkcron(&["explain", "rep"]).stdout);
    assert!(
        explained.contains(&format!("  backfill: backfill {id}: ")),
        "{explained}"
    );
    let out = cluster.zkcron(&["backfill", "--cancel", &id]);
    let cancelled = now();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.starts_with(&format!("zkcron: backfill {id} cancelled after ")));
    let (finished, running) = crate::common::cancel::cancelled_after(&said);
    cluster.wait("the running tick to end", LIMIT, |c| {
        c.listed()
            .lines()
            .any(|l| l.contains(&id) && l.contains(" - "))
    });
    // None starts after it: watch three more ticks' length (each sleeps 0.3 s) after the
    // running tick ended, long enough for one to start.
    let ended = now();
    crate::common::wait_for("a second after the running tick ended", LIMIT, || {
        now() > ended + 1.0
    });
    crate::common::cancel::assert_no_start_after(&cluster.starts(), cancelled, finished, running);
    assert!(
        cluster.listed().contains("cancelled by"),
        "{}",
        cluster.listed()
    );

    let out = cluster.zkcron(&["backfill", "nope", "--from", &from, "--to", &to]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with(
            "zkcron: error: unknown task nope: no live node of cluster default defines it"
        ),
        "{}",
        text(&out.stderr)
    );
}
