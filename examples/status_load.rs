//! Writes a large cluster's records straight into ZooKeeper, for timing `zkcron status` on it
//! (benches/status.py; docs/BENCHMARKS.md).
//!
//! `cargo run --release --example status_load -- HOST:PORT[/chroot] CLUSTER TASKS NODES
//! [WRITES_PER_MINUTE]`
//!
//! Writes, under `/zkcron/<CLUSTER>`: NODES member records (persistent here, so they outlive
//! this process; `status` reads them alike) sharing one task set of TASKS tasks (schedule, zone
//! and digest as a node writes them), a lease per task spread over the nodes, a fire record and
//! a result per task, one paused task and one drained node: what `status` reads on a live
//! cluster of that size. Histories are not written: `status` does not read them.
//!
//! With `STATUS_LOAD_HTTP=HOST:PORT` every member advertises that HTTP endpoint (`http`), for
//! timing `zkcron logs` against one server standing in for the nodes.
//!
//! With `STATUS_LOAD_LEDGER=1` the task of the middle of the set has a full tick ledger (the
//! `STORED_ENTRIES` a fire record keeps, none joinable) and a history of 100 runs, for timing
//! `zkcron history TASK --ticks`.
//!
//! With WRITES_PER_MINUTE, it then goes on as the cluster at rest does until it is killed:
//! runs of the tasks in turn, each a claim (its fire record moved) and a result, evenly
//! spaced; it prints `churning` once it starts.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use zkcron::coord::RunResult;
use zkcron::coord::records::{
    FORMAT_VERSION, FireRecord, HistoryEntry, HistoryRecord, LeaseRecord, MarkRecord, MemberRecord,
    Paths, ResultRecord, RunTrigger, TaskSetEntry, TaskSetRecord, TaskSetRef,
};
use zkcron::plan::ledger::{Reason, STORED_ENTRIES, TickEntry};
use zookeeper_client::{Acls, Client, CreateMode};

const CHUNK: usize = 512 * 1024;
const BATCH: usize = 1000;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (connect, cluster, tasks, nodes, churn) = match &args[..] {
        [_, connect, cluster, tasks, nodes] => (connect, cluster, tasks, nodes, None),
        [_, connect, cluster, tasks, nodes, churn] => (connect, cluster, tasks, nodes, Some(churn)),
        _ => {
            eprintln!(
                "usage: status_load HOST:PORT[/chroot] CLUSTER TASKS NODES [WRITES_PER_MINUTE]"
            );
            std::process::exit(2);
        }
    };
    let churn: Option<u32> = churn.map(|c| c.parse().expect("WRITES_PER_MINUTE is a number"));
    let tasks: usize = tasks.parse().expect("TASKS is a number");
    let nodes: usize = nodes.parse().expect("NODES is a number");
    let client = tokio::time::timeout(
        Duration::from_secs(10),
        Client::connector()
            .with_session_timeout(Duration::from_secs(30))
            .connect(connect),
    )
    .await
    .expect("ZooKeeper answers")
    .expect("connected");
    let paths = Paths {
        base: format!("/zkcron/{cluster}"),
    };
    let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
    for dir in [
        "/zkcron".to_string(),
        paths.base.clone(),
        paths.members(),
        paths.leases(),
        paths.tasks(),
        paths.tasksets(),
        paths.control(),
        paths.drained(),
        paths.paused_dir(),
        paths.triggers(),
    ] {
        match client.create(&dir, &[], &options).await {
            Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
            Err(error) => panic!("creating {dir}: {error}"),
        }
    }
    #[allow(clippy::disallowed_methods)] // a load generator, not the core
    let now = Utc::now();
    let names: Vec<String> = (0..tasks).map(|i| format!("task-{i:05}")).collect();
    let set = TaskSetRecord {
        calendars: Default::default(),
        format: FORMAT_VERSION,
        tasks: names
            .iter()
            .map(|name| {
                (
                    name.clone(),
                    TaskSetEntry {
                        digest: format!("{:032x}", xxhash_rust::xxh3::xxh3_128(name.as_bytes())),
                        version_req: None,
                        require_labels: BTreeMap::new(),
                        schedule: Some(format!("{} * * * *", name.len() % 60)),
                        timezone: Some("UTC".into()),
                        ..TaskSetEntry::default()
                    },
                )
            })
            .collect(),
    };
    let bytes = serde_json::to_vec(&set).unwrap();
    let digest = format!("{:032x}", xxhash_rust::xxh3::xxh3_128(&bytes));
    let chunks: Vec<&[u8]> = bytes.chunks(CHUNK).collect();
    // Chunks one per request: two of them pass ZooKeeper's 1 MiB request limit.
    for (i, chunk) in chunks.iter().enumerate() {
        let path = paths.chunk(&digest, i);
        client
            .create(&path, chunk, &options)
            .await
            .expect("chunk written");
    }
    let mut writes: Vec<(String, Vec<u8>)> = Vec::new();
    let ids: Vec<String> = (0..nodes).map(|i| format!("node-{i:02}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let member = MemberRecord {
            format: FORMAT_VERSION,
            id: id.clone(),
            release: "1.0.0".into(),
            seed: format!("{:016x}", xxhash_rust::xxh3::xxh3_64(id.as_bytes())),
            host: format!("host-{i}"),
            pid: 1000 + i as u32,
            http: std::env::var("STATUS_LOAD_HTTP").ok(),
            started_at: now,
            labels: BTreeMap::from([("zone".to_string(), format!("z{}", i % 3))]),
            taskset: TaskSetRef {
                digest: digest.clone(),
                chunks: chunks.len(),
                count: tasks,
            },
            leads: i != 0,
            drained: i == 0,
        };
        writes.push((paths.member(id), serde_json::to_vec(&member).unwrap()));
    }
    let mark = MarkRecord {
        format: FORMAT_VERSION,
        at: now,
        by: "bench@host".into(),
        reason: None,
    };
    writes.push((paths.drain(&ids[0]), serde_json::to_vec(&mark).unwrap()));
    writes.push((paths.paused(&names[0]), serde_json::to_vec(&mark).unwrap()));
    for (i, name) in names.iter().enumerate() {
        let node = &ids[1 + i % (nodes - 1).max(1)];
        let lease = LeaseRecord {
            format: FORMAT_VERSION,
            node: node.clone(),
            session: "0000000000000001".into(),
            since: now - TimeDelta::minutes(5),
        };
        let tick = now - TimeDelta::seconds((i % 3600) as i64);
        let tick = tick - TimeDelta::nanoseconds(tick.timestamp_subsec_nanos() as i64);
        let (mut fire, result) = run_of(node, tick, i32::from(i % 17 == 0), 1234);
        if i == tasks / 2 && std::env::var_os("STATUS_LOAD_LEDGER").is_some() {
            let history = full_ledger(&mut fire, node);
            writes.push((paths.history(name), serde_json::to_vec(&history).unwrap()));
        }
        writes.push((paths.lease(name), serde_json::to_vec(&lease).unwrap()));
        writes.push((paths.record(name), serde_json::to_vec(&fire).unwrap()));
        writes.push((paths.result(name), serde_json::to_vec(&result).unwrap()));
    }
    // Parents before children: the fire record before its result.
    writes.sort_by_key(|(path, _)| path.matches('/').count());
    let total = writes.len();
    for batch in writes.chunks(BATCH) {
        let mut writer = client.new_multi_writer();
        for (path, data) in batch {
            writer.add_create(path, data, &options).unwrap();
        }
        writer.commit().await.expect("records written");
    }
    println!(
        "wrote {total} znodes for {tasks} tasks and {nodes} nodes under {}",
        paths.base
    );
    if let Some(per_minute) = churn {
        churn_on(&client, &paths, &names, &ids, per_minute).await;
    }
}

/// Runs the tasks in turn, `per_minute` writes a minute (a claim, then its result), for ever.
async fn churn_on(
    client: &Client,
    paths: &Paths,
    names: &[String],
    ids: &[String],
    per_minute: u32,
) {
    use std::io::Write;
    println!("churning");
    std::io::stdout().flush().unwrap();
    let every = Duration::from_secs(60) / per_minute.max(1);
    let mut timer = tokio::time::interval(every);
    for (i, name) in names.iter().cycle().enumerate() {
        #[allow(clippy::disallowed_methods)] // a load generator, not the core
        let now = Utc::now();
        let tick = now - TimeDelta::nanoseconds(now.timestamp_subsec_nanos() as i64);
        let node = &ids[1 + i % (ids.len() - 1).max(1)];
        let (fire, result) = run_of(node, tick, 0, 12);
        timer.tick().await;
        let fire = serde_json::to_vec(&fire).unwrap();
        client
            .set_data(&paths.record(name), &fire, None)
            .await
            .expect("claim written");
        timer.tick().await;
        let result = serde_json::to_vec(&result).unwrap();
        client
            .set_data(&paths.result(name), &result, None)
            .await
            .expect("result written");
    }
}

/// Gives `fire` (hourly ticks at minute 10) a full ledger, skips and runs alternating over the
/// hours before its tick, and returns the history of those runs and 36 older ones.
fn full_ledger(fire: &mut FireRecord, node: &str) -> HistoryRecord {
    let last = fire.tick.expect("a claimed tick");
    let hour = |n: i64| {
        let t = last - TimeDelta::hours(n);
        t - TimeDelta::seconds(t.timestamp() % 3600) + TimeDelta::minutes(10)
    };
    let mut runs = Vec::new();
    for n in (1..=(2 * STORED_ENTRIES as i64 + 36)).rev() {
        if n % 2 == 0 && n <= 2 * STORED_ENTRIES as i64 {
            let reason = if n % 4 == 0 {
                Reason::Overlap
            } else {
                Reason::Deadline
            };
            fire.ticks.push(TickEntry::one(hour(n), reason));
        } else {
            runs.push(HistoryEntry {
                fire_id: zkcron::plan::fire_id("task", hour(n)),
                tick: hour(n),
                node: node.to_string(),
                release: "1.0.0".into(),
                started_at: hour(n),
                duration_ms: 1234,
                exit_code: Some(0),
                signal: None,
                success: true,
                attempts: 1,
                trigger: RunTrigger::Schedule,
                ..serde_json::from_value(serde_json::json!({
                    "fire_id": "", "tick": hour(n), "node": "", "release": "",
                    "started_at": hour(n), "duration_ms": 0, "exit_code": 0, "signal": null,
                    "success": true, "attempts": 1, "trigger": "schedule"
                }))
                .expect("a history entry")
            });
        }
    }
    HistoryRecord {
        format: FORMAT_VERSION,
        runs,
    }
}

/// The records of a run of `tick` on `node`: its claim (the fire record) and its result, which
/// exited with `exit_code` (0: a success) after `duration_ms`.
fn run_of(
    node: &str,
    tick: DateTime<Utc>,
    exit_code: i32,
    duration_ms: u64,
) -> (FireRecord, ResultRecord) {
    let fire = FireRecord {
        tick: Some(tick),
        node: node.to_string(),
        session: "0000000000000001".into(),
        run: true,
        claimed_at: Some(tick),
        ..FireRecord::empty()
    };
    let result = ResultRecord {
        format: FORMAT_VERSION,
        result: RunResult {
            tick,
            node: node.to_string(),
            exit: format!("exit code {exit_code}"),
            success: exit_code == 0,
            attempts: 1,
            duration_ms,
            finished_at: tick + TimeDelta::milliseconds(duration_ms as i64),
            ..RunResult::default()
        },
    };
    (fire, result)
}
