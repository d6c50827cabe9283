//! An operator's change to the scheduler (trigger, backfill, pause, resume, drain, undrain) as
//! both the
//! commands and the HTTP API (`crate::http::api`) make it: one code path per backend, which
//! answers what to tell the operator instead of printing it.

use anyhow::Context;
use chrono::{DateTime, Utc};

use super::backfill::{self, Requested};
use super::cluster::ClusterClient;
use super::local::{self, Request};
use super::model;
use super::{CLUSTER_ONLY, defined_in_cluster, render};
use crate::coord::operator;
use crate::coord::records::{FORMAT_VERSION, MarkRecord};

/// One change, on a task or a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Trigger {
        task: String,
    },
    /// `reason`: `zkcron pause --reason`, or the API's `{"reason": ...}`.
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
    /// `zkcron backfill TASK --from --to`: the ticks in `[from, to)`.
    Backfill {
        task: String,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    },
}

impl Change {
    /// The command's name: `trigger`, `pause`, ...
    pub fn name(&self) -> &'static str {
        match self {
            Change::Trigger { .. } => "trigger",
            Change::Pause { .. } => "pause",
            Change::Resume { .. } => "resume",
            Change::Drain { .. } => "drain",
            Change::Undrain { .. } => "undrain",
            Change::Backfill { .. } => "backfill",
        }
    }
}

/// What a change did, in the commands' words (without their `zkcron: ` prefix).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Done {
    /// The lines the command prints on standard output.
    pub said: Vec<String>,
    /// A note the command prints on standard error (`trigger` without `--wait`).
    pub note: Option<String>,
    /// The manual run's fire id, for `trigger`.
    pub fire_id: Option<String>,
    /// The request, for `backfill`.
    pub backfill: Option<BackfillRequested>,
}

/// A backfill request's id and the number of ticks it runs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BackfillRequested {
    pub id: String,
    pub ticks: u32,
}

impl From<Requested> for Done {
    fn from(requested: Requested) -> Done {
        Done {
            said: vec![requested.line()],
            note: requested.note,
            fire_id: None,
            backfill: Some(BackfillRequested {
                id: requested.name,
                ticks: requested.record.total,
            }),
        }
    }
}

impl Done {
    fn said(line: String) -> Done {
        Done {
            said: vec![line],
            ..Done::default()
        }
    }
}

fn mark(now: DateTime<Utc>, by: &str, reason: Option<String>) -> MarkRecord {
    MarkRecord {
        format: FORMAT_VERSION,
        at: now,
        by: by.to_string(),
        reason,
    }
}

fn since(mark: &MarkRecord, what: &str) -> String {
    let because = mark
        .reason
        .as_ref()
        .map(|reason| format!(": {reason}"))
        .unwrap_or_default();
    format!(
        "{what} since {} by {}{because}",
        render::instant(mark.at),
        mark.by
    )
}

/// Makes `change` in the cluster, in the name of `by` (`user@host`).
pub async fn in_cluster(client: &ClusterClient, change: &Change, by: &str) -> anyhow::Result<Done> {
    let now = client.clock.now();
    match change {
        Change::Trigger { task } => trigger_in_cluster(client, task, by).await,
        Change::Pause { task, reason } => {
            defined_in_cluster(client, task).await?;
            let mark = mark(now, by, reason.clone());
            let path = client.paths.paused(task);
            let marking =
                |read: Option<&MarkRecord>| operator::mark(&path, read, &mark, client.acl);
            let paused = client.mark(&path, marking).await?;
            Ok(Done::said(match paused {
                None => format!(
                    "task {task} paused: nothing fires until `zkcron resume {task}` (a `zkcron \
                     trigger` still runs it)"
                ),
                Some(old) => format!("task {task} is already {}", since(&old, "paused")),
            }))
        }
        Change::Resume { task } => Ok(Done::said(match client.resume(task, now).await? {
            Some(old) => format!(
                "task {task} resumed (it was {}); the ticks of the paused period are not caught up",
                since(&old, "paused")
            ),
            None => format!("task {task} is not paused"),
        })),
        Change::Drain { node } => drain_in_cluster(client, node, &mark(now, by, None)).await,
        Change::Backfill { task, from, to } => {
            backfill::request_in_cluster(client, task, *from, *to, by)
                .await
                .map(Done::from)
        }
        Change::Undrain { node } => Ok(Done::said(match client.undrain(node).await? {
            Some(old) => format!(
                "node {node} undrained (it was {}); it takes its share of the leases again",
                since(&old, "drained")
            ),
            None => format!("node {node} is not drained"),
        })),
    }
}

/// Requests a manual run of `task`; the note says why it may wait.
async fn trigger_in_cluster(client: &ClusterClient, task: &str, by: &str) -> anyhow::Result<Done> {
    let snapshot = defined_in_cluster(client, task).await?;
    let fire_id = client
        .request(&operator::trigger(task, by, client.clock.now()).into())
        .await?;
    Ok(Done {
        said: vec![format!(
            "task {task}: manual run requested, fire id {fire_id}"
        )],
        note: model::no_one_may_run(&snapshot, task).map(|why| {
            format!("{why}; the run waits until a node may run the task (`zkcron explain {task}`)")
        }),
        fire_id: Some(fire_id),
        backfill: None,
    })
}

/// Drains `node`; a node not registered yet is drained when it registers.
async fn drain_in_cluster(
    client: &ClusterClient,
    node: &str,
    mark: &MarkRecord,
) -> anyhow::Result<Done> {
    let paths = &client.paths;
    let registered = client.exists(&paths.member(node)).await?.is_some();
    let path = paths.drain(node);
    let marking = |read: Option<&MarkRecord>| operator::mark(&path, read, mark, client.acl);
    let mut said = vec![match client.mark(&path, marking).await? {
        None => format!(
            "node {node} drained: it gives up its leases and takes none until `zkcron undrain \
             {node}`; its running jobs finish"
        ),
        Some(old) => format!("node {node} is already {}", since(&old, "drained")),
    }];
    if !registered {
        said.push(format!(
            "note: node {node} is not registered in cluster {} now; the mark applies when it \
             registers",
            client.cluster
        ));
    }
    Ok(Done {
        said,
        ..Done::default()
    })
}

/// Asks the local backend's daemon using `state_dir` to make `change`, in the name of `by`.
/// Blocking: it talks over the daemon's control socket.
pub fn on_local(state_dir: &std::path::Path, change: &Change, by: &str) -> anyhow::Result<Done> {
    if let Change::Backfill { task, from, to } = change {
        return backfill::request_on_local(state_dir, task, *from, *to, by).map(Done::from);
    }
    let by = by.to_string();
    let request = match change {
        Change::Drain { .. } | Change::Undrain { .. } => {
            anyhow::bail!("`zkcron {}` {CLUSTER_ONLY}", change.name())
        }
        Change::Backfill { .. } => unreachable!("requested above"),
        Change::Trigger { task } => Request::Trigger {
            task: task.clone(),
            by,
        },
        Change::Pause { task, reason } => Request::Pause {
            task: task.clone(),
            by,
            reason: reason.clone(),
        },
        Change::Resume { task } => Request::Resume {
            task: task.clone(),
            by,
        },
    };
    let reply = local::ask(state_dir, &request)?;
    let changed = reply.changed == Some(true);
    Ok(match change {
        Change::Trigger { task } => {
            let fire_id = reply.fire_id.context("the daemon's reply has no fire id")?;
            Done {
                said: vec![format!(
                    "task {task}: manual run requested, fire id {fire_id}"
                )],
                note: None,
                fire_id: Some(fire_id),
                backfill: None,
            }
        }
        Change::Pause { task, .. } if changed => Done::said(format!(
            "task {task} paused: nothing fires until `zkcron resume {task}` (a `zkcron trigger` \
             still runs it)"
        )),
        Change::Pause { task, .. } => Done::said(format!("task {task} is already paused")),
        Change::Resume { task } if changed => Done::said(format!(
            "task {task} resumed; the ticks of the paused period are not caught up"
        )),
        Change::Resume { task } => Done::said(format!("task {task} is not paused")),
        Change::Drain { .. } | Change::Undrain { .. } | Change::Backfill { .. } => {
            unreachable!("refused or requested above")
        }
    })
}
