//! Where the dashboard and the API read the scheduler and make changes: the cluster in
//! ZooKeeper (a short session of their own per read, as `zkcron status`), or the local
//! backend's daemon this endpoint belongs to.
//!
//! A cluster's snapshot is kept current by the cache's reader in a session of its own
//! ([`super::cache::live`]); histories and changes are read and made in short sessions here.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::clock::Clock;
use crate::coord::local::LocalCoordinator;
use crate::coord::records::HistoryEntry;
use crate::coord::zk::settings::ZkSettings;
use crate::daemon::LoadedTasks;
use crate::daemon::control::ControlConfig;
use crate::ops::change::{self, Change, Done};
use crate::ops::cluster::{CONNECT_DEADLINE, ClusterClient};
use crate::ops::model::Snapshot;
use crate::task::TaskSpec;

/// How long an undrain waits for the node to rewrite its member record (a node that does not,
/// being disconnected, is shown drained until it does).
const SHOWN_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// The scheduler this endpoint shows.
pub enum Source {
    /// A ZooKeeper cluster, read and changed through sessions of the endpoint's own.
    Cluster {
        settings: ZkSettings,
        loaded: LoadedTasks,
        /// The daemon's clock: what the sessions write is timed on it.
        clock: Clock,
    },
    /// The local backend's daemon that serves this endpoint.
    Local {
        config: ControlConfig,
        coordinator: Arc<LocalCoordinator>,
    },
}

impl Source {
    /// The daemon's clock, on which views are made and changes timed.
    pub fn clock(&self) -> Clock {
        match self {
            Source::Cluster { clock, .. } => *clock,
            Source::Local { coordinator, .. } => coordinator.clock(),
        }
    }

    /// This node's id.
    pub fn node_id(&self) -> &str {
        match self {
            Source::Cluster { settings, .. } => &settings.node_id,
            Source::Local { config, .. } => &config.node_id,
        }
    }

    /// The task as this node loaded it from its jobs dir, if it did.
    pub fn loaded(&self, task: &str) -> Option<Arc<TaskSpec>> {
        let loaded = match self {
            Source::Cluster { loaded, .. } => loaded,
            Source::Local { config, .. } => &config.loaded,
        };
        loaded.get().iter().find(|t| *t.name == *task).cloned()
    }

    /// A pooled task's items per node that runs them, as `zkcron status` shows them, on the
    /// embedded backend: its one node runs every item. `None` for a cluster, whose status
    /// counts the items' units each node holds.
    pub fn work_items(&self, task: &str) -> Option<BTreeMap<String, usize>> {
        let Source::Local { config, .. } = self else {
            return None;
        };
        let mut shares = BTreeMap::new();
        if let Some(items) = self
            .loaded(task)
            .and_then(|spec| spec.extras.run_on.items().map(|items| items.len()))
        {
            shares.insert(config.node_id.clone(), items);
        }
        Some(shares)
    }

    /// [`Source::work_items`] of every pooled task, by task, in one pass over the jobs dir
    /// (none for a cluster).
    pub fn all_work_items(&self) -> BTreeMap<String, BTreeMap<String, usize>> {
        let Source::Local { config, .. } = self else {
            return BTreeMap::new();
        };
        config
            .loaded
            .get()
            .iter()
            .filter_map(|spec| {
                let items = spec.extras.run_on.items()?.len();
                let shares = BTreeMap::from([(config.node_id.clone(), items)]);
                Some((spec.name.to_string(), shares))
            })
            .collect()
    }

    /// Runs `work` in a ZooKeeper session of its own, on a blocking thread: the client's
    /// futures are not `Send` (see `ops::cluster::status_source`).
    async fn in_session<T, F>(settings: &ZkSettings, clock: Clock, work: F) -> Result<T, String>
    where
        T: Send + 'static,
        F: for<'a> FnOnce(
                &'a ClusterClient,
            ) -> std::pin::Pin<
                Box<dyn std::future::Future<Output = anyhow::Result<T>> + 'a>,
            > + Send
            + 'static,
    {
        let settings = settings.clone();
        let runtime = tokio::runtime::Handle::current();
        let read = tokio::task::spawn_blocking(move || {
            runtime.block_on(async {
                let client = ClusterClient::connect(
                    &settings.connect,
                    &settings.cluster,
                    &settings.auth,
                    settings.tls.as_ref(),
                    CONNECT_DEADLINE,
                    clock,
                )
                .await?;
                let result = work(&client).await;
                client.close().await;
                result
            })
        });
        match read.await {
            Ok(result) => result.map_err(|error| format!("{error:#}")),
            Err(error) => Err(format!("reading ZooKeeper failed: {error}")),
        }
    }

    /// A fresh snapshot of every task's records (the cache's reader keeps a cluster's
    /// current instead: `cache::live`).
    pub async fn read_snapshot(&self) -> Result<Snapshot, String> {
        match self {
            Source::Cluster {
                settings, clock, ..
            } => {
                Source::in_session(settings, *clock, |client| {
                    Box::pin(async move { client.snapshot(None).await })
                })
                .await
            }
            Source::Local {
                config,
                coordinator,
            } => Ok(crate::daemon::control::snapshot_now(config, coordinator).await),
        }
    }

    /// A fresh read of `task`'s history, oldest first.
    pub async fn read_history(&self, task: &str) -> Result<Vec<HistoryEntry>, String> {
        match self {
            Source::Cluster {
                settings, clock, ..
            } => {
                let task = task.to_string();
                Source::in_session(settings, *clock, move |client| {
                    Box::pin(async move { client.history(&task).await })
                })
                .await
            }
            Source::Local { coordinator, .. } => {
                let mut runs = coordinator.history(task, usize::MAX);
                runs.reverse();
                Ok(runs)
            }
        }
    }

    /// Makes `change` as the operator commands do, in the name of `by`.
    pub async fn change(&self, change: Change, by: String) -> Result<Done, String> {
        match self {
            Source::Cluster {
                settings, clock, ..
            } => {
                Source::in_session(settings, *clock, move |client| {
                    Box::pin(async move {
                        let done = change::in_cluster(client, &change, &by).await?;
                        if let Change::Undrain { node } = &change {
                            // The node says it is drained in its member record until it sees
                            // the mark go: wait for that, so a read after this answer shows it.
                            client
                                .wait_for_member(node, |member| !member.drained, SHOWN_WITHIN)
                                .await?;
                        }
                        Ok(done)
                    })
                })
                .await
            }
            Source::Local { config, .. } => {
                let state_dir = config.state_dir.clone();
                tokio::task::spawn_blocking(move || change::on_local(&state_dir, &change, &by))
                    .await
                    .map_err(|error| format!("asking the daemon failed: {error}"))?
                    .map_err(|error| format!("{error:#}"))
            }
        }
    }
}
