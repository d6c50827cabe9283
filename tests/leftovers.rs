//! The end-to-end tests leave nothing behind: a daemon a test started dies with it, and so do
//! the jobs it started, though each job runs in a process group of its own.

mod common;

use std::time::Duration;

use common::{Scratch, process_alive, wait_for};

const LIMIT: Duration = Duration::from_secs(20);

#[test]
fn dropping_a_daemon_kills_the_jobs_it_started() {
    let scratch = Scratch::new();
    let pids = scratch.out("pids");
    scratch.write_task(
        "sleeper",
        &format!(
            "schedule = \"* * * * * *\"\ncommand = \"echo $$ >> {}; exec sleep 300\"\noverlap = \"allow\"\n",
            pids.display()
        )
    );
    let daemon = scratch.start_daemon(&[]);
    wait_for("a job to start", LIMIT, || {
        !scratch.lines("pids").is_empty()
    });
    let job: i32 = scratch.lines("pids")[0].trim().parse().unwrap();
    assert!(process_alive(job));
    drop(daemon);
    wait_for("the job to be gone with its daemon", LIMIT, || {
        !process_alive(job)
    });
}
