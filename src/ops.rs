//! The operator's commands: `status`, `explain`, `history`, `logs`, `trigger`, `backfill`,
//! `pause`, `resume`, `drain`, `undrain`.
//!
//! On a cluster they are computed by the CLI itself from ZooKeeper ([`cluster`]: a short
//! session of its own, so no daemon is needed on the host); with the local backend they ask the
//! daemon through its control socket ([`local`]; served by `daemon::control`). What `status`
//! and `explain` say is a pure function of the records read and `now` ([`model`] and [`live`],
//! where the status of one read and the dashboard's kept-current one are worked out alike;
//! [`explain`]); [`render`] prints it for people, serde for scripts (docs/commands.md,
//! "JSON interfaces", documents both JSON forms). `now` is read on the [`Clock`] [`run`] is
//! handed (the CLI's; a [`cluster::ClusterClient`] carries it for the HTTP API too).
//!
//! Beside them: [`args`] (the commands' arguments and how they find the scheduler), [`change`]
//! (an operator's change, as both the commands and the HTTP API make it), [`links`] (the `after`
//! links `explain` shows), [`pool`] (a pooled task's items), [`live`] (the status, of one read or
//! of a snapshot kept current by the changed znodes, for the dashboard), [`backfill`] and
//! [`logs`] (a run's output, from this host's state dir or the node that ran it), [`ticks`]
//! (`history --ticks`: the tick ledger).
//!
//! Exit codes: 0 done, 1 failed (ZooKeeper or the daemon unreachable, an unknown task, a
//! triggered run that failed or could not run), 2 usage (clap).

pub mod args;
pub mod backfill;
pub mod change;
pub mod cluster;
pub mod explain;
#[cfg(test)]
mod fixtures;
pub mod links;
#[cfg(test)]
mod links_tests;
pub mod live;
pub mod local;
pub mod logs;
pub mod model;
pub mod pool;
#[cfg(test)]
mod pool_tests;
pub mod render;
#[cfg(test)]
mod tests;
pub mod ticks;
#[cfg(test)]
mod ticks_tests;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};

use crate::clock::Clock;
use crate::coord::records::{HistoryEntry, TriggerRecord, TriggerState};
use change::{Change, Done};
use cluster::{CONNECT_DEADLINE, ClusterClient};
use local::{Reply, Request};
use model::Snapshot;

/// How long `trigger --wait` waits for the leader to start a pending run.
pub const TRIGGER_START_DEADLINE: Duration = Duration::from_secs(30);

/// How often `trigger --wait` looks at the run.
const TRIGGER_POLL: Duration = Duration::from_millis(200);

/// Where the commands find the scheduler.
#[derive(Debug, Clone)]
pub enum Target {
    /// A ZooKeeper cluster: `hosts[/chroot]` and the cluster's name.
    Cluster {
        connect: String,
        cluster: String,
        auth: crate::coord::zk::AuthSource,
        /// `tls = true` and its files.
        tls: Option<crate::coord::zk::TlsSource>,
    },
    /// The local backend's daemon on this host, by its state dir.
    Local { state_dir: PathBuf },
}

/// One operator command, parsed.
#[derive(Debug, Clone)]
pub enum OpsCommand {
    Status {
        json: bool,
    },
    Explain {
        task: String,
        json: bool,
    },
    History {
        task: String,
        n: usize,
        json: bool,
        /// `--ticks [--since T]`: the tick ledger instead of the runs.
        ticks: Option<Option<DateTime<Utc>>>,
    },
    Trigger {
        task: String,
        wait: bool,
    },
    Backfill(backfill::BackfillCommand),
    Pause {
        task: String,
        reason: Option<String>,
    },
    Resume {
        task: String,
    },
    Drain {
        node: String,
    },
    Undrain {
        node: String,
    },
    Logs(logs::LogsCommand),
}

impl OpsCommand {
    fn name(&self) -> &'static str {
        match self {
            OpsCommand::Status { .. } => "status",
            OpsCommand::Explain { .. } => "explain",
            OpsCommand::History { .. } => "history",
            OpsCommand::Trigger { .. } => "trigger",
            OpsCommand::Backfill(_) => "backfill",
            OpsCommand::Pause { .. } => "pause",
            OpsCommand::Resume { .. } => "resume",
            OpsCommand::Drain { .. } => "drain",
            OpsCommand::Undrain { .. } => "undrain",
            OpsCommand::Logs(_) => "logs",
        }
    }
}

/// Who asks: `user@host`, written into marks and triggers.
pub fn operator() -> String {
    let user = crate::accounts::Identity::current().user_name;
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "localhost".into());
    format!("{user}@{host}")
}

/// Runs `command` against `target`, reading calendar time on `clock`.
pub fn run(command: OpsCommand, target: Target, clock: Clock) -> anyhow::Result<ExitCode> {
    match target {
        Target::Local { state_dir } => run_local(command, &state_dir, clock),
        Target::Cluster {
            connect,
            cluster,
            auth,
            tls,
        } => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start the async runtime")?;
            runtime.block_on(async {
                let client = ClusterClient::connect(
                    &connect,
                    &cluster,
                    &auth,
                    tls.as_ref(),
                    CONNECT_DEADLINE,
                    clock,
                )
                .await?;
                let result = run_cluster(command, &client).await;
                client.close().await;
                result
            })
        }
    }
}

/// Writes a report to stdout. A reader that went away (`zkcron status | head`) ends the
/// command quietly; other write errors are errors.
fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write to standard output"),
    }
}

fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(value).expect("reports serialize");
    text.push('\n');
    emit(&text)
}

/// "unknown task X: no live node of cluster C defines it; did you mean Y?"
pub(crate) fn unknown_task(snapshot: &Snapshot, task: &str) -> anyhow::Error {
    let names = snapshot.task_names();
    let hint = crate::task::closest(task, names.iter().map(String::as_str))
        .map(|name| format!("; did you mean {name}?"))
        .unwrap_or_default();
    let cluster = snapshot
        .cluster
        .as_deref()
        .map(|c| format!(" of cluster {c}"))
        .unwrap_or_default();
    anyhow::anyhow!("unknown task {task}: no live node{cluster} defines it{hint}")
}

pub(crate) fn defined(snapshot: &Snapshot, task: &str) -> bool {
    snapshot.task_names().iter().any(|t| t == task)
}

async fn run_cluster(command: OpsCommand, client: &ClusterClient) -> anyhow::Result<ExitCode> {
    let change = match command {
        OpsCommand::Status { json } => {
            cluster_status(client, json).await?;
            return Ok(ExitCode::SUCCESS);
        }
        OpsCommand::Explain { task, json } => {
            cluster_explain(client, &task, json).await?;
            return Ok(ExitCode::SUCCESS);
        }
        OpsCommand::History {
            task,
            json,
            ticks: Some(since),
            ..
        } => {
            let runs = client.history(&task).await?;
            let snapshot = client.snapshot(Some(std::slice::from_ref(&task))).await?;
            if !defined(&snapshot, &task) {
                return Err(unknown_task(&snapshot, &task));
            }
            let lines = ticks::of_cluster(&snapshot, &task, &runs, client.clock.now());
            print_ticks(&task, lines, since, json)?;
            return Ok(ExitCode::SUCCESS);
        }
        OpsCommand::History { task, n, json, .. } => {
            let mut runs = client.history(&task).await?;
            if runs.is_empty() {
                defined_in_cluster(client, &task).await?;
            }
            print_history(&task, &mut runs, n, json)?;
            return Ok(ExitCode::SUCCESS);
        }
        OpsCommand::Trigger { task, wait } => {
            let trigger = Change::Trigger { task: task.clone() };
            let done = change::in_cluster(client, &trigger, &operator()).await?;
            print_done(&done, !wait);
            return match (wait, done.fire_id) {
                (true, Some(fire_id)) => wait_cluster(client, &task, &fire_id).await,
                _ => Ok(ExitCode::SUCCESS),
            };
        }
        OpsCommand::Backfill(command) => return backfill::cluster(client, command).await,
        OpsCommand::Logs(command) => return logs::cluster(client, &command).await,
        OpsCommand::Pause { task, reason } => Change::Pause { task, reason },
        OpsCommand::Resume { task } => Change::Resume { task },
        OpsCommand::Drain { node } => Change::Drain { node },
        OpsCommand::Undrain { node } => Change::Undrain { node },
    };
    let done = change::in_cluster(client, &change, &operator()).await?;
    print_done(&done, true);
    Ok(ExitCode::SUCCESS)
}

/// Prints what a change did as the commands always have: its lines on standard output and,
/// with `note`, its note on standard error.
fn print_done(done: &Done, note: bool) {
    for line in &done.said {
        println!("zkcron: {line}");
    }
    if note && let Some(why) = &done.note {
        eprintln!("zkcron: note: {why}");
    }
}

/// `zkcron status` against the cluster.
async fn cluster_status(client: &ClusterClient, json: bool) -> anyhow::Result<()> {
    let snapshot = client.snapshot(None).await?;
    let now = client.clock.now();
    let status = live::status(snapshot, now);
    if json {
        print_json(&status)
    } else {
        emit(&render::status(&status, now))
    }
}

/// `zkcron explain TASK` against the cluster.
async fn cluster_explain(client: &ClusterClient, task: &str, json: bool) -> anyhow::Result<()> {
    let task = task.to_string();
    let snapshot = client.snapshot(Some(std::slice::from_ref(&task))).await?;
    let now = client.clock.now();
    let Some(explained) = explain::explain(&snapshot, &task, now) else {
        return Err(unknown_task(&snapshot, &task));
    };
    if json {
        print_json(&explained)
    } else {
        emit(&render::explain(&explained, now))
    }
}

/// `history --ticks`: the ledger's `lines` from `since`.
fn print_ticks(
    task: &str,
    lines: Vec<crate::plan::ledger::Line>,
    since: Option<DateTime<Utc>>,
    json: bool,
) -> anyhow::Result<()> {
    let any = !lines.is_empty();
    let lines = ticks::since(lines, since);
    if json {
        print_json(&lines)
    } else if let (true, Some(since)) = (any && lines.is_empty(), since) {
        emit(&format!(
            "zkcron: no tick of {task} recorded since {}\n",
            render::instant(since)
        ))
    } else if lines.is_empty() {
        emit(&format!(
            "zkcron: task {task} has no recorded ticks yet (its ledger starts with its first claim)\n"
        ))
    } else {
        emit(&ticks::render(&lines))
    }
}

/// Prints the newest `n` of `runs` (oldest first as stored) newest first.
fn print_history(
    task: &str,
    runs: &mut Vec<HistoryEntry>,
    n: usize,
    json: bool,
) -> anyhow::Result<()> {
    runs.reverse();
    runs.truncate(n);
    if json {
        print_json(runs)
    } else if runs.is_empty() {
        emit(&format!("zkcron: task {task} has no recorded runs yet\n"))
    } else {
        emit(&render::history(runs))
    }
}

/// Why a trigger of `task` is still pending, from a fresh snapshot.
fn why_pending(snapshot: &Snapshot, task: &str) -> String {
    if let Some(why) = model::no_one_may_run(snapshot, task) {
        return format!("not eligible: {why}");
    }
    match snapshot.leases.get(task) {
        None => "no leader: lease vacant".into(),
        Some(lease) => format!(
            "its leader {} has not started it (a node of a release without manual runs, or \
             too busy to claim it)",
            lease.node
        ),
    }
}

/// The end of a manual run: prints its result, exit 0 iff it succeeded.
fn ended(record: &TriggerRecord, fire_id: &str) -> anyhow::Result<ExitCode> {
    match &record.result {
        Some(result) => {
            println!("{}", render::result_line(result));
            if let Some(reason) = &record.reason {
                println!("zkcron: {reason}");
            }
            Ok(if result.success {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        None => bail!(
            "{fire_id} could not run: {}",
            record
                .reason
                .as_deref()
                .unwrap_or("the node gave no reason")
        ),
    }
}

async fn wait_cluster(
    client: &ClusterClient,
    task: &str,
    fire_id: &str,
) -> anyhow::Result<ExitCode> {
    let path = client.paths.trigger(fire_id);
    let started = tokio::time::Instant::now();
    loop {
        let Some(read) = client.get::<TriggerRecord>(&path).await? else {
            bail!(
                "the trigger {fire_id} was deleted before its run ended (by an operator, or \
                 another `zkcron trigger --wait`)"
            );
        };
        let record = read.value;
        match record.state {
            TriggerState::Pending if started.elapsed() > TRIGGER_START_DEADLINE => {
                let snapshot = client.snapshot(Some(&[task.to_string()])).await?;
                let why = why_pending(&snapshot, task);
                // Withdrawn at the version read: a claim made meanwhile wins, and is waited for.
                if client
                    .delete_trigger(fire_id, Some(read.stat.version))
                    .await?
                {
                    bail!(
                        "{fire_id} did not start within {}: {why}; the request is withdrawn",
                        humantime::format_duration(TRIGGER_START_DEADLINE)
                    );
                }
                continue;
            }
            TriggerState::Pending => {}
            TriggerState::Running => {
                let node = record.node.clone().unwrap_or_default();
                if client.exists(&client.paths.member(&node)).await?.is_none() {
                    client.delete_trigger(fire_id, None).await?;
                    bail!("node {node} was lost while running it ({fire_id})");
                }
            }
            // Left for the nodes to delete ten minutes after its end (`TRIGGER_KEEP_ENDED`):
            // until then `status` shows it as the task's last run (reading every task's
            // history instead would make `status` read megabytes on a large cluster).
            TriggerState::Ended => return ended(&record, fire_id),
        }
        tokio::time::sleep(TRIGGER_POLL).await;
    }
}

pub(crate) const CLUSTER_ONLY: &str = "is a cluster command: this host uses the local backend (set --zookeeper or [coordination] \
     backend)";

fn run_local(
    command: OpsCommand,
    state_dir: &std::path::Path,
    clock: Clock,
) -> anyhow::Result<ExitCode> {
    let by = operator();
    match command {
        OpsCommand::Explain { .. } | OpsCommand::Drain { .. } | OpsCommand::Undrain { .. } => {
            bail!("`zkcron {}` {CLUSTER_ONLY}", command.name())
        }
        OpsCommand::Status { json } => {
            let reply = local::ask(state_dir, &Request::Status)?;
            let status = reply.status.context("the daemon's reply has no status")?;
            if json {
                print_json(&status)?;
            } else {
                emit(&render::status(&status, clock.now()))?;
            }
        }
        OpsCommand::History {
            task,
            json,
            ticks: Some(since),
            ..
        } => {
            let reply = local::ask(state_dir, &Request::Ticks { task: task.clone() })?;
            let lines = reply.ticks.unwrap_or_default();
            print_ticks(&task, lines, since, json)?;
        }
        OpsCommand::History { task, n, json, .. } => {
            let reply = local::ask(
                state_dir,
                &Request::History {
                    task: task.clone(),
                    n,
                },
            )?;
            let mut runs = reply.history.unwrap_or_default();
            // The daemon answers newest first; print_history takes them oldest first.
            runs.reverse();
            print_history(&task, &mut runs, n, json)?;
        }
        OpsCommand::Trigger { task, wait } => {
            let done = change::on_local(state_dir, &Change::Trigger { task }, &by)?;
            print_done(&done, !wait);
            if let (true, Some(fire_id)) = (wait, done.fire_id) {
                return wait_local(state_dir, &fire_id);
            }
        }
        OpsCommand::Backfill(command) => return backfill::local(state_dir, command),
        OpsCommand::Logs(command) => return logs::local(&command),
        OpsCommand::Pause { task, reason } => print_done(
            &change::on_local(state_dir, &Change::Pause { task, reason }, &by)?,
            true,
        ),
        OpsCommand::Resume { task } => print_done(
            &change::on_local(state_dir, &Change::Resume { task }, &by)?,
            true,
        ),
    }
    Ok(ExitCode::SUCCESS)
}

#[allow(clippy::disallowed_methods)] // a real deadline for a real daemon
fn wait_local(state_dir: &std::path::Path, fire_id: &str) -> anyhow::Result<ExitCode> {
    let started = std::time::Instant::now();
    loop {
        let reply: Reply = local::ask(
            state_dir,
            &Request::TriggerState {
                fire_id: fire_id.to_string(),
            },
        )?;
        let Some(record) = reply.trigger else {
            bail!("the daemon does not know the manual run {fire_id} (was it restarted?)");
        };
        match record.state {
            TriggerState::Ended => return ended(&record, fire_id),
            TriggerState::Pending if started.elapsed() > TRIGGER_START_DEADLINE => bail!(
                "{fire_id} did not start within {}: the daemon has not run it",
                humantime::format_duration(TRIGGER_START_DEADLINE)
            ),
            _ => std::thread::sleep(TRIGGER_POLL),
        }
    }
}

/// The cluster's snapshot without tasks' details, once `task` is known to be defined by a live
/// node (else the error says so).
pub(crate) async fn defined_in_cluster(
    client: &ClusterClient,
    task: &str,
) -> anyhow::Result<Snapshot> {
    let snapshot = client.snapshot(Some(&[])).await?;
    if !defined(&snapshot, task) {
        return Err(unknown_task(&snapshot, task));
    }
    Ok(snapshot)
}
