//! The side-by-side peer of `benches/probe.py --compare`: tokio-cron-scheduler running the
//! same jobs as zkcron's bench, so that both are measured in one invocation on the same load.
//!
//! `zkcron-peer TASKS PROBE OUT [IDLE MINUTE]` schedules TASKS jobs `* * * * * *` (every second,
//! UTC) and IDLE more jobs `0 MINUTE * * * *` (hourly, idle while measured), each running `PROBE OUT` with `ZKCRON_TASK=probe-NNN` and `ZKCRON_SCHEDULED_AT` = the tick's
//! instant, as zkcron passes it (RFC 3339, whole seconds, `Z`). tokio-cron-scheduler does not
//! hand the tick's instant to the job; it polls its jobs every 500 ms and starts a due job at
//! the first poll at or after its instant, so the instant is the wall second the job runs in
//! (the job never runs before its instant, and a poll is never a whole second late on an
//! unloaded machine). The job's output is captured (`Command::output`), as zkcron captures it.
//! Writes `started` to stderr once every job is added and the scheduler runs; runs until SIGTERM
//! or SIGINT.

use std::process::Stdio;

use chrono::{SubsecRound, Utc};
use tokio_cron_scheduler::{Job, JobScheduler};

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (tasks, probe, out, idle, minute) = match args.as_slice() {
        [_, tasks, probe, out] => (tasks, probe, out, "0", "0"),
        [_, tasks, probe, out, idle, minute] => (tasks, probe, out, idle.as_str(), minute.as_str()),
        _ => {
            eprintln!("usage: zkcron-peer TASKS PROBE OUT [IDLE MINUTE]");
            std::process::exit(2);
        }
    };
    let number = |what: &str, text: &str| -> usize {
        text.parse().unwrap_or_else(|_| {
            eprintln!("zkcron-peer: {what} must be a number, not {text:?}");
            std::process::exit(2);
        })
    };
    let (tasks, idle, minute) = (
        number("TASKS", tasks),
        number("IDLE", idle),
        number("MINUTE", minute),
    );
    let hourly = format!("0 {minute} * * * *");
    let scheduler = JobScheduler::new().await.expect("scheduler");
    for i in 0..tasks + idle {
        let task = format!("probe-{i:03}");
        let (probe, out) = (probe.clone(), out.clone());
        let schedule = if i < tasks {
            "* * * * * *"
        } else {
            hourly.as_str()
        };
        let job = Job::new_async(schedule, move |_, _| {
            let (task, probe, out) = (task.clone(), probe.clone(), out.clone());
            Box::pin(async move {
                let instant = Utc::now().trunc_subsecs(0);
                let scheduled_at = instant.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
                let result = tokio::process::Command::new(&probe)
                    .arg(&out)
                    .env("ZKCRON_TASK", &task)
                    .env("ZKCRON_SCHEDULED_AT", scheduled_at)
                    .stdin(Stdio::null())
                    .output()
                    .await;
                if let Err(e) = result {
                    eprintln!("zkcron-peer: {task}: cannot run {probe}: {e}");
                }
            })
        })
        .expect("job");
        scheduler.add(job).await.expect("add");
    }
    scheduler.start().await.expect("start");
    eprintln!("started");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
