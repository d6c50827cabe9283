//! Where the dashboard and the API read the scheduler and make changes: the cluster in
//! ZooKeeper (a short session of their own per read, as `zkcron status`), or the local
//! backend's daemon this endpoint belongs to.
//!
//! Reads are cached ([`Cache`]): one snapshot per node, refreshed at most every
//! [`REFRESH_AFTER`] and only when someone asks; viewers asking during a refresh wait for it and
//! share it, so a dashboard left open costs one read per [`REFRESH_AFTER`] however many tabs
//! show it, and an idle node with no viewer reads nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::coord::local::LocalCoordinator;
use crate::coord::records::HistoryEntry;
use crate::coord::zk::settings::ZkSettings;
use crate::daemon::LoadedTasks;
use crate::daemon::control::ControlConfig;
use crate::ops::change::{self, Change, Done};
use crate::ops::cluster::{CONNECT_DEADLINE, ClusterClient};
use crate::ops::model::Snapshot;
use crate::task::TaskSpec;

/// How old a cached read may be before the next request refreshes it.
pub const REFRESH_AFTER: Duration = Duration::from_secs(2);

/// The most task histories kept in the cache (each a task page's read).
const HISTORIES_KEPT: usize = 64;

/// The scheduler this endpoint shows.
pub enum Source {
    /// A ZooKeeper cluster, read and changed through sessions of the endpoint's own.
    Cluster {
        settings: ZkSettings,
        loaded: LoadedTasks,
    },
    /// The local backend's daemon that serves this endpoint.
    Local {
        config: ControlConfig,
        coordinator: Arc<LocalCoordinator>,
    },
}

impl Source {
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

    /// Runs `work` in a ZooKeeper session of its own, on a blocking thread: the client's
    /// futures are not `Send` (see `ops::cluster::status_source`).
    async fn in_session<T, F>(settings: &ZkSettings, work: F) -> Result<T, String>
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

    /// A fresh snapshot of every task's records.
    async fn read_snapshot(&self) -> Result<Snapshot, String> {
        match self {
            Source::Cluster { settings, .. } => {
                Source::in_session(settings, |client| Box::pin(client.snapshot(None))).await
            }
            Source::Local {
                config,
                coordinator,
            } => Ok(crate::daemon::control::snapshot_now(config, coordinator).await),
        }
    }

    /// A fresh read of `task`'s history, oldest first.
    async fn read_history(&self, task: &str) -> Result<Vec<HistoryEntry>, String> {
        match self {
            Source::Cluster { settings, .. } => {
                let task = task.to_string();
                Source::in_session(settings, move |client| {
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
            Source::Cluster { settings, .. } => {
                Source::in_session(settings, move |client| {
                    Box::pin(async move { change::in_cluster(client, &change, &by).await })
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

/// A read and when it was made.
struct Fresh<T> {
    at: Instant,
    value: Arc<T>,
}

impl<T> Fresh<T> {
    fn current(&self) -> bool {
        self.at.elapsed() < REFRESH_AFTER
    }
}

/// The source behind a cache of its reads.
pub struct Cache {
    pub source: Source,
    snapshot: tokio::sync::Mutex<Option<Fresh<Snapshot>>>,
    histories: tokio::sync::Mutex<HashMap<String, Fresh<Vec<HistoryEntry>>>>,
}

impl Cache {
    pub fn new(source: Source) -> Cache {
        Cache {
            source,
            snapshot: tokio::sync::Mutex::new(None),
            histories: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The snapshot, read again when the cached one is older than [`REFRESH_AFTER`]. The lock
    /// is held across the read: whoever asks meanwhile waits for it and shares it.
    pub async fn snapshot(&self) -> Result<Arc<Snapshot>, String> {
        let mut cached = self.snapshot.lock().await;
        if let Some(fresh) = cached.as_ref().filter(|f| f.current()) {
            return Ok(fresh.value.clone());
        }
        let value = Arc::new(self.source.read_snapshot().await?);
        *cached = Some(Fresh {
            at: Instant::now(),
            value: value.clone(),
        });
        Ok(value)
    }

    /// `task`'s history, oldest first, cached like the snapshot.
    pub async fn history(&self, task: &str) -> Result<Arc<Vec<HistoryEntry>>, String> {
        let mut cached = self.histories.lock().await;
        if let Some(fresh) = cached.get(task).filter(|f| f.current()) {
            return Ok(fresh.value.clone());
        }
        let value = Arc::new(self.source.read_history(task).await?);
        cached.retain(|_, fresh| fresh.current());
        if cached.len() >= HISTORIES_KEPT {
            cached.clear();
        }
        cached.insert(
            task.to_string(),
            Fresh {
                at: Instant::now(),
                value: value.clone(),
            },
        );
        Ok(value)
    }

    /// Forgets what was read, so the next request shows a change just made.
    pub async fn forget(&self) {
        *self.snapshot.lock().await = None;
        self.histories.lock().await.clear();
    }
}
