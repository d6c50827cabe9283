//! End-to-end tests of `zkcron run` with the embedded backend: the real binary on task files
//! written into a temp dir, observed through the files its jobs write and its log.
//!
//! One test binary, a module per concern: `jobs_dir` (loading and reloading task files),
//! `lifecycle` (start, stop, restart, retries cut short), `runs` (overlap, failures to start,
//! job output), `logging` (the log's formats and start-up warnings).

#[path = "../common/mod.rs"]
mod common;
mod jobs_dir;
mod lifecycle;
mod logging;
mod runs;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{Scratch, wait_for};
use nix::sys::signal::Signal;

const LIMIT: Duration = Duration::from_secs(30);

/// A task that appends "<fire id> <scheduled at> <attempt> <marker>" to `out/<file>`.
fn recording_task(
    scratch: &Scratch,
    schedule: &str,
    file: &str,
    marker: &str,
    extra: &str,
) -> String {
    format!(
        "schedule = \"{schedule}\"\ncommand = 'echo \"$ZKCRON_FIRE_ID $ZKCRON_SCHEDULED_AT $ZKCRON_ATTEMPT {marker}\" >> {out}'\n{extra}\n",
        out = scratch.out(file).display()
    )
}

/// Unix seconds of each line's fire id.
fn fired_seconds(lines: &[String]) -> Vec<i64> {
    lines
        .iter()
        .map(|l| {
            l.split_whitespace()
                .next()
                .unwrap()
                .rsplit('@')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect()
}

/// The current Unix second, read the way the tests' observers see time.
#[allow(clippy::disallowed_methods)]
fn zkcron_now() -> i64 {
    chrono::Utc::now().timestamp()
}

#[test]
fn given_a_one_second_task_when_the_daemon_runs_then_every_tick_fires_exactly_once() {
    let scratch = Scratch::new();
    scratch.write_task(
        "every-second",
        &recording_task(&scratch, "* * * * * *", "ticks", "v1", ""),
    );
    let mut daemon = scratch.start_daemon(&[]);

    wait_for("5 ticks", LIMIT, || scratch.lines("ticks").len() >= 5);
    daemon.signal(Signal::SIGTERM);
    assert_eq!(daemon.wait_exit(LIMIT), Some(0));

    let lines = scratch.lines("ticks");
    let seconds = fired_seconds(&lines);
    let distinct: BTreeSet<i64> = seconds.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        seconds.len(),
        "a tick ran twice: {lines:#?}"
    );
    assert!(
        seconds.windows(2).all(|w| w[1] == w[0] + 1),
        "a tick was lost: {lines:#?}"
    );
    // The environment names the tick: fire id and scheduled instant agree; first attempt.
    for line in &lines {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let second: i64 = fields[0].rsplit('@').next().unwrap().parse().unwrap();
        let at = chrono::DateTime::parse_from_rfc3339(fields[1]).unwrap();
        assert_eq!(at.timestamp(), second, "{line}");
        assert!(fields[1].ends_with('Z'), "{line}");
        assert_eq!(fields[2], "1", "{line}");
        assert!(fields[0].starts_with("every-second@"), "{line}");
    }
}
