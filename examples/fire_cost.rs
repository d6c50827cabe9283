//! The executor's own cost per fire, without the daemon, the claim or the journal: bursts of
//! `BURST` runs of `/bin/true` prepared together, started one after another (as the daemon
//! starts the claimed ticks of one instant) and finished together, `BURSTS` times, with the
//! log formatted as a node formats it (text, info) into a sink.
//!
//! Prints the process's CPU time (utime + stime of every thread, from `/proc/self/stat`; the
//! children's is not included) per run, and how long the `BURST` starts of a burst took
//! (p50/p99): spawning from the executor, back to back.
//!
//! Build and run: `cargo run --release --example fire_cost [BURSTS] [BURST]`.

use std::time::Duration;

use chrono::{TimeZone, Utc};
use zkcron::executor::{self, RunRequest, StopHandle};
use zkcron::task::{CommandLine, RetryPolicy};

fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .expect("stat")
        .1
        .split_whitespace()
        .collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn request(i: usize) -> RunRequest {
    let at = Utc.timestamp_opt(1_800_000_000, 0).unwrap();
    RunRequest {
        task: format!("task-{i:03}"),
        fire_id: format!("task-{i:03}@1800000000"),
        scheduled_at: at,
        due_at: at,
        node_id: "bench".into(),
        command: CommandLine::Argv(vec!["/bin/true".into()]),
        user: None,
        group: None,
        working_dir: None,
        env: Default::default(),
        timeout: None,
        kill_grace: Duration::from_secs(10),
        retries: RetryPolicy::default(),
        output_lines: 100,
        output: None,
        on_failure: None,
        pause_on_failure: false,
        clock: zkcron::clock::Clock::system(),
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((p / 100.0) * (sorted.len() - 1) as f64).round() as usize]
}

// A benchmark's shell: it reads the clock on purpose.
#[allow(clippy::disallowed_methods)]
fn main() {
    let mut args = std::env::args().skip(1);
    let bursts: usize = args.next().map_or(300, |a| a.parse().expect("BURSTS"));
    let burst: usize = args.next().map_or(10, |a| a.parse().expect("BURST"));
    tracing_subscriber::fmt()
        .with_writer(std::io::sink)
        .with_max_level(tracing::Level::INFO)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let clk_tck = 100.0; // USER_HZ on Linux
    let (starts, ticks) = runtime.block_on(async {
        let mut starts = Vec::with_capacity(bursts);
        let before = cpu_ticks();
        for _ in 0..bursts {
            let mut prepared = Vec::with_capacity(burst);
            for i in 0..burst {
                prepared.push(executor::prepare(request(i)).await);
            }
            let t0 = std::time::Instant::now();
            let started: Vec<_> = prepared
                .into_iter()
                .map(|p| executor::start(p, Some(tokio::time::Instant::now())))
                .collect();
            starts.push(t0.elapsed().as_secs_f64() * 1e3);
            let runs = started
                .into_iter()
                .map(|s| tokio::spawn(s.finish(StopHandle::new().1, |_| {})));
            for run in runs.collect::<Vec<_>>() {
                let outcome = run.await.expect("run");
                assert!(outcome.succeeded(), "{outcome:?}");
            }
        }
        (starts, cpu_ticks() - before)
    });
    let mut sorted = starts;
    sorted.sort_by(f64::total_cmp);
    let runs = (bursts * burst) as f64;
    println!(
        "{{\"runs\": {runs}, \"cpu_us_per_run\": {:.1}, \"burst\": {burst}, \
         \"starts_of_a_burst_ms\": {{\"p50\": {:.2}, \"p99\": {:.2}}}}}",
        ticks as f64 / clk_tck * 1e6 / runs,
        percentile(&sorted, 50.0),
        percentile(&sorted, 99.0),
    );
}
