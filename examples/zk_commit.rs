//! The floor under a queued start on the ZooKeeper backend: how long one commit of the
//! multi-op that records a run's end and claims the tick queued behind it takes, alone
//! (benches/queue.py `--phase floor`; docs/BENCHMARKS.md).
//!
//! `cargo run --release --example zk_commit -- HOST:PORT[/chroot] COMMITS [GAP_MS]`
//!
//! Sends COMMITS multi-ops one after the other, GAP_MS apart (default 0), each shaped as that
//! one is: delete of the previous run znode and the result written (the run's end), then a
//! check of the lease, a check of the epoch, the fire record written and the next run znode
//! created, ephemeral (the claim); about 1 KiB in all. Each is timed from the call to its
//! reply, which waits for the server's transaction log (`fsync`), and prints one JSON object:
//! the commits' p50, p99 and max in milliseconds. It writes under `/zk-commit-floor`, which
//! it deletes at the end.

use std::time::{Duration, Instant};

use zookeeper_client::{Acls, Client, CreateMode, CreateOptions, MultiWriter};

const ROOT: &str = "/zk-commit-floor";

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (connect, commits, gap) = match &args[..] {
        [_, connect, commits] => (connect, commits, "0"),
        [_, connect, commits, gap] => (connect, commits, gap.as_str()),
        _ => usage(),
    };
    let (Ok(commits @ 1..), Ok(gap)) = (commits.parse::<usize>(), gap.parse::<u64>()) else {
        usage()
    };
    let gap = Duration::from_millis(gap);
    let client = match Client::connect(connect).await {
        Ok(client) => client,
        Err(error) => {
            eprintln!("zk_commit: cannot connect to {connect}: {error}");
            std::process::exit(1);
        }
    };
    let times = match commit_loop(&client, commits, gap).await {
        Ok(times) => times,
        Err(error) => {
            eprintln!("zk_commit: {error}");
            std::process::exit(1);
        }
    };
    let mut ms: Vec<f64> = times.iter().map(|t| t.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let at = |p: f64| ms[((p / 100.0) * (ms.len() - 1) as f64).round() as usize];
    println!(
        "{{\"commits\": {}, \"p50_ms\": {:.2}, \"p99_ms\": {:.2}, \"max_ms\": {:.2}}}",
        ms.len(),
        at(50.0),
        at(99.0),
        ms[ms.len() - 1]
    );
}

fn usage() -> ! {
    eprintln!("usage: zk_commit HOST:PORT[/chroot] COMMITS [GAP_MS]");
    std::process::exit(2);
}

/// Creates the tree, times `commits` multi-ops `gap` apart, deletes the tree.
// A benchmark's shell, not zkcron's core: it reads the clock on purpose.
#[allow(clippy::disallowed_methods)]
async fn commit_loop(
    client: &Client,
    commits: usize,
    gap: Duration,
) -> Result<Vec<Duration>, String> {
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    let record = vec![b'r'; 300];
    let result = vec![b'x'; 400];
    for node in ["", "/lease", "/record", "/record/epoch", "/record/result"] {
        let path = format!("{ROOT}{node}");
        client
            .create(&path, b"", &persistent)
            .await
            .map_err(|e| format!("creating {path}: {e}"))?;
    }
    let run = |i: usize| format!("{ROOT}/record/run-{i}");
    client
        .create(&run(0), b"{}", &ephemeral)
        .await
        .map_err(|e| format!("creating the first run znode: {e}"))?;
    let mut times = Vec::with_capacity(commits);
    for i in 0..commits {
        tokio::time::sleep(gap).await;
        let mut writer = client.new_multi_writer();
        end_and_claim(
            &mut writer,
            &run(i),
            &run(i + 1),
            &result,
            &record,
            &ephemeral,
        )
        .map_err(|e| format!("building multi-op {i}: {e}"))?;
        let sent = Instant::now();
        writer
            .commit()
            .await
            .map_err(|e| format!("multi-op {i} failed: {e}"))?;
        times.push(sent.elapsed());
    }
    let paths = [
        run(commits),
        format!("{ROOT}/record/result"),
        format!("{ROOT}/record/epoch"),
        format!("{ROOT}/record"),
        format!("{ROOT}/lease"),
        ROOT.to_string(),
    ];
    for path in paths {
        client
            .delete(&path, None)
            .await
            .map_err(|e| format!("deleting {path}: {e}"))?;
    }
    Ok(times)
}

/// Adds the ops of one run's end (`ended` deleted, the result written) and of the next
/// tick's claim (lease and epoch checked, the record written, `next` created) to `writer`.
fn end_and_claim(
    writer: &mut MultiWriter<'_>,
    ended: &str,
    next: &str,
    result: &[u8],
    record: &[u8],
    ephemeral: &CreateOptions<'_>,
) -> Result<(), zookeeper_client::Error> {
    writer.add_delete(ended, None)?;
    writer.add_set_data(&format!("{ROOT}/record/result"), result, None)?;
    writer.add_check_version(&format!("{ROOT}/lease"), 0)?;
    writer.add_check_version(&format!("{ROOT}/record/epoch"), 0)?;
    writer.add_set_data(&format!("{ROOT}/record"), record, None)?;
    writer.add_create(next, b"{}", ephemeral)
}
