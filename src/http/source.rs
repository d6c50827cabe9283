//! Where the dashboard and the API read the scheduler and make changes: the cluster in
//! ZooKeeper (a short session of their own per read, as `zkcron status`), or the local
//! backend's daemon this endpoint belongs to.
//!
//! Reads are cached ([`Cache`]): one snapshot per node, refreshed at most every
//! [`REFRESH_AFTER`] and only when someone asks, so a dashboard left open costs one read per
//! [`REFRESH_AFTER`] however many tabs show it, and a node with no viewer reads nothing. A
//! request that finds the snapshot older than that is answered from it at once while one
//! refresh runs behind it (a read of 10,000 tasks takes longer than a page may); only a
//! snapshot older than [`SERVE_STALE_FOR`] (or none) is waited for, by every viewer at once.

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

/// How old a snapshot may be and still be served while a newer one is read.
pub const SERVE_STALE_FOR: Duration = Duration::from_secs(30);

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

    /// A pooled task's items per node that runs them, as `zkcron status` shows them: on the
    /// embedded backend its one node runs every item; the cluster backend does not split pools
    /// over its nodes yet, so it shows none.
    pub fn work_items(&self, task: &str) -> std::collections::BTreeMap<String, usize> {
        let mut shares = std::collections::BTreeMap::new();
        if let Source::Local { config, .. } = self
            && let Some(items) = self
                .loaded(task)
                .and_then(|spec| spec.extras.run_on.items().map(|items| items.len()))
        {
            shares.insert(config.node_id.clone(), items);
        }
        shares
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
    fn current(&self, refresh_after: Duration) -> bool {
        self.at.elapsed() < refresh_after
    }
}

/// The source behind a cache of its reads.
pub struct Cache {
    pub source: Source,
    /// [`REFRESH_AFTER`] and [`SERVE_STALE_FOR`] (shorter in tests).
    refresh_after: Duration,
    serve_stale_for: Duration,
    snapshot: std::sync::Mutex<Option<Fresh<Snapshot>>>,
    /// Held while the snapshot is read: one read at a time, shared by whoever waits for it.
    reading: Arc<tokio::sync::Mutex<()>>,
    /// Counts [`Cache::forget`]s: a read begun before one is not cached.
    generation: std::sync::atomic::AtomicU64,
    histories: tokio::sync::Mutex<HashMap<String, Fresh<Vec<HistoryEntry>>>>,
    /// The schedules of the snapshot last asked for ([`Cache::schedules`]).
    schedules: std::sync::Mutex<Option<(Arc<Snapshot>, Arc<Schedules>)>>,
}

/// Each task's schedule as written and its zone, by task.
pub type Schedules = std::collections::BTreeMap<String, (String, String)>;

impl Cache {
    pub fn new(source: Source) -> Cache {
        Cache::with_ages(source, REFRESH_AFTER, SERVE_STALE_FOR)
    }

    fn with_ages(source: Source, refresh_after: Duration, serve_stale_for: Duration) -> Cache {
        Cache {
            source,
            refresh_after,
            serve_stale_for,
            snapshot: std::sync::Mutex::new(None),
            reading: Arc::new(tokio::sync::Mutex::new(())),
            generation: std::sync::atomic::AtomicU64::new(0),
            histories: tokio::sync::Mutex::new(HashMap::new()),
            schedules: std::sync::Mutex::new(None),
        }
    }

    /// Each task's schedule in `snapshot`, from the definition `status` reads: worked out once
    /// per snapshot (it decodes every task set), shared by every view of it.
    pub fn schedules(&self, snapshot: &Arc<Snapshot>) -> Arc<Schedules> {
        let mut cached = self.schedules.lock().expect("the schedules cache");
        if let Some((of, schedules)) = cached.as_ref()
            && Arc::ptr_eq(of, snapshot)
        {
            return schedules.clone();
        }
        let schedules: Arc<Schedules> = Arc::new(
            crate::ops::model::task_entries(snapshot)
                .into_iter()
                .filter_map(|(name, entry)| {
                    let zone = entry.timezone.unwrap_or_else(|| "UTC".into());
                    Some((name, (entry.schedule?, zone)))
                })
                .collect(),
        );
        *cached = Some((snapshot.clone(), schedules.clone()));
        schedules
    }

    fn cached(&self) -> Option<(Duration, Arc<Snapshot>)> {
        let cached = self.snapshot.lock().expect("the snapshot cache");
        cached.as_ref().map(|f| (f.at.elapsed(), f.value.clone()))
    }

    /// The snapshot: the cached one while younger than [`REFRESH_AFTER`]; until
    /// [`SERVE_STALE_FOR`], the cached one with a refresh started behind it; else a fresh read.
    pub async fn snapshot(self: &Arc<Self>) -> Result<Arc<Snapshot>, String> {
        match self.cached() {
            Some((age, value)) if age < self.refresh_after => Ok(value),
            Some((age, value)) if age < self.serve_stale_for => {
                // One refresh at a time: a request finding one running does not start another.
                if let Ok(reading) = self.reading.clone().try_lock_owned() {
                    let cache = self.clone();
                    tokio::spawn(async move {
                        let _reading = reading;
                        if let Err(error) = cache.read().await {
                            tracing::debug!(%error, "the dashboard's snapshot was not refreshed");
                        }
                    });
                }
                Ok(value)
            }
            _ => {
                let _reading = self.reading.lock().await;
                match self.cached() {
                    // Read by the request this one waited for.
                    Some((age, value)) if age < self.refresh_after => Ok(value),
                    _ => self.read().await,
                }
            }
        }
    }

    /// Reads the snapshot and caches it (the caller holds `reading`).
    async fn read(&self) -> Result<Arc<Snapshot>, String> {
        let generation = self.generation.load(std::sync::atomic::Ordering::SeqCst);
        let value = Arc::new(self.source.read_snapshot().await?);
        self.keep(generation, &value);
        Ok(value)
    }

    /// Caches `value`, read from `generation`, unless a change was made since.
    fn keep(&self, generation: u64, value: &Arc<Snapshot>) {
        let mut cached = self.snapshot.lock().expect("the snapshot cache");
        if self.generation.load(std::sync::atomic::Ordering::SeqCst) == generation {
            *cached = Some(Fresh {
                at: Instant::now(),
                value: value.clone(),
            });
        }
    }

    /// `task`'s history, oldest first, cached like the snapshot.
    pub async fn history(&self, task: &str) -> Result<Arc<Vec<HistoryEntry>>, String> {
        let mut cached = self.histories.lock().await;
        if let Some(fresh) = cached.get(task).filter(|f| f.current(self.refresh_after)) {
            return Ok(fresh.value.clone());
        }
        let value = Arc::new(self.source.read_history(task).await?);
        cached.retain(|_, fresh| fresh.current(self.refresh_after));
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
        self.forget_snapshot();
        self.histories.lock().await.clear();
    }

    fn forget_snapshot(&self) {
        let mut cached = self.snapshot.lock().expect("the snapshot cache");
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        *cached = None;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::accounts::Identity;
    use crate::task::TaskDefaults;

    fn local_cache(state: &std::path::Path) -> Arc<Cache> {
        let coordinator = Arc::new(LocalCoordinator::open(state).unwrap());
        let config = ControlConfig {
            state_dir: state.to_path_buf(),
            node_id: "node-a".into(),
            release: "1.0.0".into(),
            labels: BTreeMap::new(),
            jobs_dir: state.join("jobs.d"),
            task_defaults: TaskDefaults {
                timezone: chrono_tz::UTC,
                user: None,
                identity: Identity::current(),
                backend: crate::task::TaskBackend::Local,
            },
            started_at: crate::clock::wall_clock(),
            loaded: LoadedTasks::default(),
        };
        let source = Source::Local {
            config,
            coordinator,
        };
        Arc::new(Cache::with_ages(source, REFRESH, STALE))
    }

    const REFRESH: Duration = Duration::from_millis(100);
    const STALE: Duration = Duration::from_millis(600);

    /// Waits out `age` of the cached snapshot (time passing is what is tested).
    async fn let_age(age: Duration) {
        tokio::time::sleep(age + Duration::from_millis(1)).await;
    }

    /// Every viewer within the refresh interval gets the one snapshot read; an older one is
    /// served while one refresh runs behind it; a change is shown at once.
    #[tokio::test]
    async fn viewers_share_one_read_and_a_stale_snapshot_is_refreshed_behind_them() {
        let state = tempfile::tempdir().unwrap();
        let cache = local_cache(state.path());
        let first = cache.snapshot().await.unwrap();
        let again = cache.snapshot().await.unwrap();
        assert!(Arc::ptr_eq(&first, &again), "one read within {REFRESH:?}");

        let_age(REFRESH).await;
        let stale = cache.snapshot().await.unwrap();
        assert!(Arc::ptr_eq(&first, &stale), "the stale one, at once");
        let deadline = Instant::now() + Duration::from_secs(10);
        let fresh = loop {
            let cached = cache.cached().map(|(_, value)| value).unwrap();
            if !Arc::ptr_eq(&first, &cached) {
                break cached;
            }
            assert!(Instant::now() < deadline, "no refresh behind the viewer");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };

        cache.forget().await;
        let after_change = cache.snapshot().await.unwrap();
        assert!(
            !Arc::ptr_eq(&fresh, &after_change),
            "read again after a change"
        );

        let_age(STALE).await;
        let too_old = cache.snapshot().await.unwrap();
        assert!(
            !Arc::ptr_eq(&after_change, &too_old),
            "too old to serve: read now"
        );
    }
}
