//! Resource bounds: a job printing 1 GB of output does not grow the daemon. The real
//! daemon runs a job that writes 1 GiB (half as one endless line, half as 1 KiB lines) and
//! then fails (once: later ticks find it done); the daemon's RSS is sampled throughout, the
//! `on_failure` hook the daemon runs afterwards gets a bounded output tail, and the output kept
//! on disk for `zkcron logs` stays within `[log] output_limit`.
// A real daemon against the real clock, which the core may not read.
#![allow(clippy::disallowed_methods)]

mod common;

use std::time::{Duration, Instant};

use common::{Scratch, wait_for};

/// The daemon's resident set, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the daemon runs");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

#[test]
fn given_a_job_printing_1_gib_when_the_daemon_runs_it_then_its_rss_stays_flat() {
    let scratch = Scratch::new();
    let daemon = scratch.start_daemon(&[]);
    let pid = daemon.child.id();
    // Let start-up allocations settle before the baseline.
    std::thread::sleep(Duration::from_millis(500));
    let base = rss_kib(pid);

    let done = scratch.out("done");
    let hook = scratch.out("hook");
    scratch.write_task(
        "flood",
        &format!(
            "schedule = \"* * * * * *\"\n\
             command = \"[ -e {done} ] && exit 0; head -c 512M /dev/zero | tr '\\\\0' x; \
             yes $(printf %01023d 0) | head -c 512M; echo last line; echo ran >> {done}; exit 1\"\n\
             on_failure = [\"/bin/sh\", \"-c\", 'printf \"%s %s\\n\" \"$ZKCRON_EXIT_CODE\" \"$(printf %s \"$ZKCRON_OUTPUT_TAIL\" | wc -c)\" >> {hook}']\n",
            done = done.display(),
            hook = hook.display()
        ),
    );

    let started = Instant::now();
    let mut peak = base;
    wait_for(
        "the flood job and its hook to end",
        Duration::from_secs(600),
        || {
            peak = peak.max(rss_kib(pid));
            std::thread::sleep(Duration::from_millis(50));
            !scratch.lines("hook").is_empty()
        },
    );
    let took = started.elapsed();
    // Stop further fires before asserting, so a failed assertion leaves nothing running long.
    scratch.remove_task("flood");
    let growth_mib = (peak.saturating_sub(base)) as f64 / 1024.0;
    eprintln!(
        "1 GiB of job output: daemon RSS {:.1} MiB at start, peak {:.1} MiB (+{growth_mib:.1} MiB), {:.1} s",
        base as f64 / 1024.0,
        peak as f64 / 1024.0,
        took.as_secs_f64()
    );
    assert_eq!(
        scratch.lines("done").len(),
        1,
        "the job ran to its end once"
    );
    assert!(
        growth_mib < 20.0,
        "the daemon grew by {growth_mib:.1} MiB while a job printed 1 GiB"
    );
    // The run's output kept for `zkcron logs` held its bound too: [log] output_limit (1 MiB by
    // default) of records, plus the header, the cut marker and the end.
    let kept = scratch.path().join("state/output/flood");
    for entry in std::fs::read_dir(&kept).expect("the flood's output is kept") {
        let entry = entry.unwrap();
        let size = entry.metadata().unwrap().len();
        assert!(
            size <= (1 << 20) + 512,
            "{} holds {size} bytes of kept output",
            entry.path().display()
        );
    }
    let hook_line = scratch.lines("hook").remove(0);
    let (code, tail_bytes) = hook_line.split_once(' ').expect("two fields");
    assert_eq!(code, "1");
    let tail_bytes: usize = tail_bytes.trim().parse().unwrap();
    assert!(tail_bytes <= 4096, "output tail of {tail_bytes} bytes");
    assert!(
        daemon
            .log()
            .contains("output not logged past [log] job_output_lines"),
        "{}",
        daemon.log()
    );
}
