//! `zkcron backfill`: request a backfill of a task's ticks in a range, list the requests
//! (`--status`), cancel one (`--cancel ID`), and with `--wait` follow one to its end.
//!
//! The range is counted here against the task's schedule (a cluster's: as its leader
//! published it; the local backend's: the daemon's loaded task), and refused over
//! [`backfill::MAX_TICKS`] ticks with the count. The request is a persistent record the task's
//! leader works through (`coord::backfill`). `--wait` prints the progress (done of total, the
//! tick running now, failures) on one line rewritten in place on a terminal, a line per change
//! otherwise, and exits 0 only if every tick's run succeeded. The request itself
//! ([`request_in_cluster`], [`request_on_local`]) is also what the HTTP API's backfill makes.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};

use super::cluster::ClusterClient;
use super::local::{self, Request};
use super::{defined_in_cluster, emit, model, operator, render};
use crate::coord::backfill::{BackfillRecord, BackfillState};
use crate::coord::operator::{self as rules, RequestRecord};
use crate::schedule::Schedule;

/// How often `--wait` looks at the request.
const POLL: Duration = Duration::from_millis(200);

/// What `zkcron backfill` was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackfillCommand {
    Request {
        task: String,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        wait: bool,
    },
    /// `--status [TASK]`.
    Status { task: Option<String> },
    /// `--cancel ID`.
    Cancel { name: String },
}

/// The record of a new request of `task`'s ticks of `schedule` in `[from, to)`, made `now`,
/// or why not.
pub fn new_request(
    task: &str,
    schedule: &Schedule,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    by: &str,
    now: DateTime<Utc>,
) -> anyhow::Result<BackfillRecord> {
    rules::backfill(task, schedule, (from, to), by, now)
        .with_context(|| format!("cannot backfill task {task}"))
}

/// `zkcron backfill ...` against the cluster.
pub async fn cluster(client: &ClusterClient, command: BackfillCommand) -> anyhow::Result<ExitCode> {
    match command {
        BackfillCommand::Request {
            task,
            from,
            to,
            wait,
        } => {
            let requested = request_in_cluster(client, &task, from, to, &operator()).await?;
            println!("zkcron: {}", requested.line());
            if let Some(note) = &requested.note {
                eprintln!("zkcron: note: {note}");
            }
            let name = requested.name;
            if !wait {
                return Ok(ExitCode::SUCCESS);
            }
            let mut progress = Progress::new();
            loop {
                let path = client.paths.backfill(&name);
                let Some(read) = client.get::<BackfillRecord>(&path).await? else {
                    bail!("the backfill {name} was deleted before it ended");
                };
                if let Some(code) = progress.show(&name, &read.value)? {
                    return Ok(code);
                }
                tokio::time::sleep(POLL).await;
            }
        }
        BackfillCommand::Status { task } => {
            let listed = client.backfills().await?;
            let records = listed.into_iter().map(|(n, r)| (n, r.value)).collect();
            print_list(&records, task.as_deref())?;
            Ok(ExitCode::SUCCESS)
        }
        BackfillCommand::Cancel { name } => {
            let old = client
                .cancel_backfill(&name, &operator(), client.clock.now())
                .await?;
            cancelled(&name, old)
        }
    }
}

/// `zkcron backfill ...` asked of the local daemon.
pub fn local(state_dir: &std::path::Path, command: BackfillCommand) -> anyhow::Result<ExitCode> {
    match command {
        BackfillCommand::Request {
            task,
            from,
            to,
            wait,
        } => {
            let requested = request_on_local(state_dir, &task, from, to, &operator())?;
            println!("zkcron: {}", requested.line());
            let name = requested.name;
            if !wait {
                return Ok(ExitCode::SUCCESS);
            }
            let mut progress = Progress::new();
            loop {
                let reply = local::ask(state_dir, &Request::Backfills)?;
                let Some(record) = reply.backfills.and_then(|mut b| b.remove(&name)) else {
                    bail!("the daemon does not know the backfill {name} any more");
                };
                if let Some(code) = progress.show(&name, &record)? {
                    return Ok(code);
                }
                #[allow(clippy::disallowed_methods)] // polling a real daemon
                std::thread::sleep(POLL);
            }
        }
        BackfillCommand::Status { task } => {
            let reply = local::ask(state_dir, &Request::Backfills)?;
            print_list(&reply.backfills.unwrap_or_default(), task.as_deref())?;
            Ok(ExitCode::SUCCESS)
        }
        BackfillCommand::Cancel { name } => {
            let request = Request::CancelBackfill {
                name: name.clone(),
                by: operator(),
            };
            let reply = local::ask(state_dir, &request)?;
            cancelled(&name, reply.backfills.and_then(|mut b| b.remove(&name)))
        }
    }
}

/// A backfill just requested, as both `zkcron backfill` and the HTTP API (through
/// `ops::change`) request it.
#[derive(Debug, Clone)]
pub struct Requested {
    /// The request's id (`zkcron backfill --status` lists it).
    pub name: String,
    pub record: BackfillRecord,
    /// Why the backfill may wait (no node may run the task now), if it may.
    pub note: Option<String>,
}

impl Requested {
    /// What the command prints of it (without `zkcron: `).
    pub fn line(&self) -> String {
        let record = &self.record;
        format!(
            "task {}: backfill of {} tick(s) in [{}, {}) requested, id {}",
            record.task,
            record.total,
            render::instant(record.from),
            render::instant(record.to),
            self.name
        )
    }
}

/// Requests a backfill of `task`'s ticks in `[from, to)` in the cluster, in the name of `by`.
pub async fn request_in_cluster(
    client: &ClusterClient,
    task: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    by: &str,
) -> anyhow::Result<Requested> {
    let snapshot = defined_in_cluster(client, task).await?;
    let Some(schedule) = model::schedule_of(&snapshot, task) else {
        bail!(
            "cannot backfill task {task}: no live node publishes a schedule of it this release \
             reads (a node of an older release?)"
        );
    };
    let record = new_request(task, &schedule, from, to, by, client.clock.now())?;
    let name = client.request(&RequestRecord::from(record.clone())).await?;
    let note = model::no_one_may_run(&snapshot, task).map(|why| {
        format!("{why}; the backfill waits until a node may run the task (`zkcron explain {task}`)")
    });
    Ok(Requested { name, record, note })
}

/// Asks the local daemon using `state_dir` for a backfill of `task`'s ticks in `[from, to)`,
/// in the name of `by`. Blocking: it talks over the daemon's control socket.
pub fn request_on_local(
    state_dir: &std::path::Path,
    task: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    by: &str,
) -> anyhow::Result<Requested> {
    let request = Request::Backfill {
        task: task.to_string(),
        from,
        to,
        by: by.to_string(),
    };
    let reply = local::ask(state_dir, &request)?;
    let name = reply
        .fire_id
        .context("the daemon's reply has no backfill id")?;
    let record = reply
        .backfills
        .and_then(|mut b| b.remove(&name))
        .context("the daemon's reply has no backfill record")?;
    Ok(Requested {
        name,
        record,
        note: None,
    })
}

/// What `--cancel` prints of the request as it was before the cancel.
fn cancelled(name: &str, old: Option<BackfillRecord>) -> anyhow::Result<ExitCode> {
    let Some(old) = old else {
        bail!("there is no backfill {name} (`zkcron backfill --status` lists them)");
    };
    if old.state != BackfillState::Active {
        println!("zkcron: backfill {name} is already {}", state_word(&old));
        return Ok(ExitCode::SUCCESS);
    }
    let running = old
        .running
        .as_ref()
        .map(|r| {
            format!(
                "; the run of {} on {} finishes",
                render::instant(r.tick),
                r.node
            )
        })
        .unwrap_or_default();
    println!(
        "zkcron: backfill {name} cancelled after {} of {} tick(s){running}",
        old.finished(),
        old.total
    );
    Ok(ExitCode::SUCCESS)
}

fn state_word(record: &BackfillRecord) -> String {
    match record.state {
        BackfillState::Active => "active".into(),
        BackfillState::Done => "done".into(),
        BackfillState::Cancelled => match &record.cancelled_by {
            Some(by) => format!("cancelled by {by}"),
            None => "cancelled".into(),
        },
    }
}

/// One line of a request's progress.
pub fn progress_line(name: &str, record: &BackfillRecord) -> String {
    let running = record
        .running
        .as_ref()
        .map(|r| format!(", running {} on {}", render::instant(r.tick), r.node))
        .unwrap_or_default();
    format!(
        "backfill {name}: {} of {} done, {} failed{running} ({})",
        record.finished(),
        record.total,
        record.failed,
        state_word(record)
    )
}

/// `--wait`'s output: the line shown last.
struct Progress {
    terminal: bool,
    shown: Option<String>,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            terminal: std::io::stdout().is_terminal(),
            shown: None,
        }
    }

    /// Shows `record`'s progress if it changed; the exit code once it ended.
    fn show(&mut self, name: &str, record: &BackfillRecord) -> anyhow::Result<Option<ExitCode>> {
        let line = progress_line(name, record);
        if self.shown.as_ref() != Some(&line) {
            if self.terminal {
                emit(&format!("\r{line}\x1b[K"))?;
            } else {
                emit(&format!("{line}\n"))?;
            }
            self.shown = Some(line);
        }
        let over = record.state != BackfillState::Active && record.running.is_none();
        if !over {
            return Ok(None);
        }
        if self.terminal {
            emit("\n")?;
        }
        for failure in &record.failures {
            println!("zkcron: failed: {failure}");
        }
        let all_ran = record.state == BackfillState::Done;
        Ok(Some(if all_ran && record.failed == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        }))
    }
}

/// `--status`: the requests (of `task`, if given), a line each, oldest first.
fn print_list(
    records: &BTreeMap<String, BackfillRecord>,
    task: Option<&str>,
) -> anyhow::Result<()> {
    let mut rows = vec![vec![
        "ID".to_string(),
        "STATE".into(),
        "DONE".into(),
        "FAILED".into(),
        "RUNNING".into(),
        "RANGE".into(),
        "BY".into(),
    ]];
    for (name, record) in records {
        if task.is_some_and(|t| t != record.task) {
            continue;
        }
        rows.push(vec![
            name.clone(),
            state_word(record),
            format!("{}/{}", record.finished(), record.total),
            record.failed.to_string(),
            record
                .running
                .as_ref()
                .map_or("-".into(), |r| render::instant(r.tick)),
            format!(
                "[{}, {})",
                render::instant(record.from),
                render::instant(record.to)
            ),
            record.by.clone(),
        ]);
    }
    if rows.len() == 1 {
        return emit("zkcron: no backfill requests\n");
    }
    emit(&render::table(&rows))
}
