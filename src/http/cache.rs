//! The dashboard's and the API's reads of the [`Source`], cached: one [`View`] (a snapshot and
//! what every page works out from it: the status, the schedules, the rendered bodies) shared
//! by every viewer. Views are made at the time of the source's clock ([`Source::clock`], the
//! daemon's).
//!
//! A cluster's snapshot is kept current by one reader ([`live`]) from the first request on:
//! ZooKeeper's watches name what changed, and only that is read again and worked out again. A
//! request is answered from the view made last, or, if something changed since (or it is
//! [`REFRESH_AFTER`] old: session ages move), from one made now from the live snapshot.
//!
//! With the local backend, one refresher reads the source while someone watches: from a
//! request until [`WATCHED_FOR`] after the last one, it reads again once the view is
//! [`REFRESH_AFTER`] old and was asked for since its read began (ahead of the next request),
//! and works the view out on its own thread, off the runtime that fires. A node with no viewer
//! reads nothing; only a request that finds no view younger than [`SERVE_STALE_FOR`] (the
//! first one after the dashboard was left alone) waits for a read, which every viewer shares.
//!
//! A change made through the API forgets the view ([`Cache::forget`]): a read begun before it
//! is not kept, so the next request waits for a read that shows the change (with a cluster:
//! until the reader has caught up with it).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::body::Bytes;
use chrono::{DateTime, Utc};
use tokio::time::Instant;

use super::source::Source;
use crate::coord::records::HistoryEntry;
use crate::ops::live::{Live, TriggerRuns};
use crate::ops::model::{Snapshot, Status};

/// How old a view may be before the refresher reads the source again.
pub const REFRESH_AFTER: Duration = Duration::from_secs(2);

/// How old a view may be and still be served (while the refresher reads a newer one).
pub const SERVE_STALE_FOR: Duration = Duration::from_secs(30);

/// How long after the last request the refresher goes on reading: six of the page's own
/// refreshes (every 5 s), so a tab left open keeps it going and a closed one stops it.
pub const WATCHED_FOR: Duration = Duration::from_secs(30);

/// How long a request waits for a read before it answers that it could not have one.
const READ_DEADLINE: Duration = Duration::from_secs(20);

/// The most task histories kept in the cache (each a task page's read).
const HISTORIES_KEPT: usize = 64;

pub use crate::ops::live::Schedules;

/// One read of the source and what every viewer is shown of it, worked out once.
pub struct View {
    pub snapshot: Arc<Snapshot>,
    /// When the snapshot was read: the status is the one `zkcron status` gave at that instant.
    pub read_at: DateTime<Utc>,
    /// `zkcron status --json` of the snapshot, with each pooled task's work items.
    pub status: Status,
    pub schedules: Schedules,
    /// Why the view may not show every change, and since when; `None` when it does.
    pub behind: Option<String>,
    /// Which full read of the live snapshot and how many changes after it the view was made
    /// from (`None` for a read of the local backend).
    made_from: Option<(u64, u64)>,
    /// `/api/status`'s body, serialized by the first request that asks for it.
    status_json: OnceLock<Bytes>,
    /// The overview page without a filter, rendered by the first request that asks for it.
    overview: OnceLock<Bytes>,
}

impl View {
    /// Works out what the pages show of `snapshot`, read at `read_at`: the status of a
    /// [`Live`] made from this one read, each pooled task's work items from the source.
    pub fn new(snapshot: Snapshot, source: &Source, read_at: DateTime<Utc>) -> View {
        let mut live = Live::new(snapshot, TriggerRuns::new(), read_at);
        let mut view = View::of(&mut live, read_at, None, None);
        let work_items = source.all_work_items();
        for task in &mut view.status.tasks {
            if let Some(shares) = work_items.get(&task.name) {
                task.work_items = shares.clone();
            }
        }
        view
    }

    /// The view of `shared`'s live snapshot at `now` (`None` before its first read).
    fn of_live(shared: &mut live::Shared, now: DateTime<Utc>) -> Option<View> {
        let installs = shared.installs;
        let behind = match &shared.sync {
            live::Sync::Current => None,
            live::Sync::Behind { since, why } => Some(format!(
                "this view may miss changes made since {}: {why}",
                since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            )),
        };
        let live = shared.live.as_mut()?;
        let made_from = Some((installs, live.changes()));
        Some(View::of(live, now, behind, made_from))
    }

    /// The view of `live` at `now`.
    fn of(
        live: &mut Live,
        now: DateTime<Utc>,
        behind: Option<String>,
        made_from: Option<(u64, u64)>,
    ) -> View {
        let (status, schedules) = live.status(now);
        View {
            snapshot: live.snapshot(),
            read_at: now,
            status,
            schedules,
            behind,
            made_from,
            status_json: OnceLock::new(),
            overview: OnceLock::new(),
        }
    }

    /// `/api/status`'s body.
    pub fn status_json(&self) -> Bytes {
        self.status_json
            .get_or_init(|| {
                serde_json::to_vec(&self.status)
                    .expect("a status serializes")
                    .into()
            })
            .clone()
    }

    /// The overview without a filter, rendered by `render` once per view.
    pub fn overview(&self, render: impl FnOnce() -> String) -> Bytes {
        self.overview.get_or_init(|| render().into()).clone()
    }
}

/// A value and when it was made.
struct Fresh<T> {
    at: Instant,
    value: Arc<T>,
}

impl<T> Fresh<T> {
    fn current(&self, refresh_after: Duration) -> bool {
        self.at.elapsed() < refresh_after
    }
}

/// How old views may be ([`REFRESH_AFTER`], [`SERVE_STALE_FOR`], [`WATCHED_FOR`]; shorter in
/// tests).
#[derive(Debug, Clone, Copy)]
pub struct Ages {
    pub refresh_after: Duration,
    pub serve_stale_for: Duration,
    pub watched_for: Duration,
}

impl Default for Ages {
    fn default() -> Ages {
        Ages {
            refresh_after: REFRESH_AFTER,
            serve_stale_for: SERVE_STALE_FOR,
            watched_for: WATCHED_FOR,
        }
    }
}

/// Which read a view came from, to tell whether a change was made since it began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generation(u64);

/// The source behind a cache of its reads.
pub struct Cache {
    pub source: Source,
    ages: Ages,
    view: Mutex<Option<Fresh<View>>>,
    /// Counts [`Cache::forget`]s: a read begun before one is not kept.
    generation: AtomicU64,
    /// When a request last asked for the view: the refresher runs until [`Ages::watched_for`]
    /// after it.
    asked_at: Mutex<Instant>,
    /// Whether the refresher runs (one at a time).
    refreshing: AtomicBool,
    /// Wakes the refresher for a read now (a request that cannot be served, a change).
    wake: tokio::sync::Notify,
    /// Counts the refresher's finished reads, with the last one's error if it failed: what a
    /// request waiting for a read waits on.
    reads: tokio::sync::watch::Sender<(u64, Option<String>)>,
    histories: tokio::sync::Mutex<HashMap<String, Fresh<Vec<HistoryEntry>>>>,
    /// A cluster's snapshot kept current by the reader ([`live`]).
    live: Mutex<live::Shared>,
}

impl Cache {
    pub fn new(source: Source) -> Cache {
        Cache::with_ages(source, Ages::default())
    }

    pub fn with_ages(source: Source, ages: Ages) -> Cache {
        let started = source.clock().now();
        Cache {
            source,
            ages,
            view: Mutex::new(None),
            generation: AtomicU64::new(0),
            asked_at: Mutex::new(Instant::now()),
            refreshing: AtomicBool::new(false),
            wake: tokio::sync::Notify::new(),
            reads: tokio::sync::watch::Sender::new((0, None)),
            histories: tokio::sync::Mutex::new(HashMap::new()),
            live: Mutex::new(live::Shared::starting(started)),
        }
    }

    /// The view: the cached one while younger than [`SERVE_STALE_FOR`] (the refresher keeps
    /// it younger than [`REFRESH_AFTER`] while it is asked for), else the next read's.
    pub async fn view(self: &Arc<Self>) -> Result<Arc<View>, String> {
        self.asked();
        if matches!(self.source, Source::Cluster { .. }) {
            return self.live_view().await;
        }
        let deadline = Instant::now() + READ_DEADLINE;
        loop {
            if let Some((age, view)) = self.cached()
                && age < self.ages.serve_stale_for
            {
                return Ok(view);
            }
            let mut reads = self.reads.subscribe();
            let seen = reads.borrow_and_update().0;
            self.wake.notify_one();
            let finished = tokio::time::timeout_at(deadline, reads.wait_for(|r| r.0 > seen)).await;
            match finished {
                Err(_) => return Err(self.no_read_within()),
                Ok(Err(_)) => return Err("the dashboard's reader stopped".into()),
                // That read failed: say why (a read begun before a change may be skipped).
                Ok(Ok(read)) if read.1.is_some() => return Err(read.1.clone().unwrap_or_default()),
                Ok(Ok(_)) => {}
            }
        }
    }

    /// The view of the live snapshot: the one made last while nothing changed since (and
    /// younger than [`Ages::refresh_after`]: session ages move), else one made now; after a
    /// change made through the API, once the reader has caught up with it. A snapshot behind
    /// for longer than [`Ages::serve_stale_for`] is not served: the request waits for the
    /// reader's next full read, and says why there is none.
    async fn live_view(self: &Arc<Self>) -> Result<Arc<View>, String> {
        let deadline = Instant::now() + READ_DEADLINE;
        loop {
            let mut reads = self.reads.subscribe();
            let seen = reads.borrow_and_update().0;
            let generation = self.generation();
            if let Some(ready) = self.live_ready(generation) {
                return Ok(ready);
            }
            let finished = tokio::time::timeout_at(deadline, reads.wait_for(|r| r.0 > seen)).await;
            match finished {
                Err(_) => return Err(self.no_read_within()),
                Ok(Err(_)) => return Err("the dashboard's reader stopped".into()),
                Ok(Ok(read)) if read.1.is_some() => return Err(read.1.clone().unwrap_or_default()),
                Ok(Ok(_)) => {}
            }
        }
    }

    /// The view to serve now from the live snapshot, if it may be served.
    fn live_ready(&self, generation: Generation) -> Option<Arc<View>> {
        let mut shared = self.live.lock().expect("the live snapshot");
        let live = shared.live.as_ref()?;
        if shared.caught_up < generation.0 {
            self.wake.notify_one();
            return None;
        }
        let now = self.source.clock().now();
        if let live::Sync::Behind { since, .. } = &shared.sync
            && (now - *since).to_std().unwrap_or_default() > self.ages.serve_stale_for
        {
            return None;
        }
        let made_from = Some((shared.installs, live.changes()));
        if let Some((age, view)) = self.cached()
            && view.made_from == made_from
            && view.behind.is_none() == (shared.sync == live::Sync::Current)
            && age < self.ages.refresh_after
        {
            return Some(view);
        }
        let view = Arc::new(View::of_live(&mut shared, now)?);
        drop(shared);
        self.keep(generation, view.clone());
        Some(view)
    }

    fn no_read_within(&self) -> String {
        format!(
            "no read of the scheduler within {}",
            humantime::format_duration(READ_DEADLINE)
        )
    }

    /// The snapshot of [`Cache::view`].
    pub async fn snapshot(self: &Arc<Self>) -> Result<Arc<Snapshot>, String> {
        Ok(self.view().await?.snapshot.clone())
    }

    fn cached(&self) -> Option<(Duration, Arc<View>)> {
        let cached = self.view.lock().expect("the view cache");
        cached.as_ref().map(|f| (f.at.elapsed(), f.value.clone()))
    }

    /// Notes a request, and starts the refresher unless it runs.
    fn asked(self: &Arc<Self>) {
        *self.asked_at.lock().expect("the last request") = Instant::now();
        if self
            .refreshing
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            let cache = self.clone();
            let started = std::thread::Builder::new()
                .name("zkcron-dashboard".into())
                .spawn(move || match &cache.source {
                    // It stays on: refreshing is never cleared.
                    Source::Cluster { settings, .. } => {
                        let settings = settings.clone();
                        cache.live_reader(settings)
                    }
                    Source::Local { .. } => cache.refresher(),
                });
            if let Err(error) = started {
                tracing::error!(%error, "cannot start the dashboard's reader thread");
                self.refreshing.store(false, Ordering::SeqCst);
            }
        }
    }

    /// Whether a request came within [`Ages::watched_for`].
    fn watched(&self) -> bool {
        self.asked_at.lock().expect("the last request").elapsed() < self.ages.watched_for
    }

    /// The refresher's thread: reads while watched, in one session, then ends it.
    fn refresher(self: Arc<Self>) {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(error) => {
                tracing::error!(%error, "cannot start the dashboard's reader");
                self.refreshing.store(false, Ordering::SeqCst);
                return;
            }
        };
        runtime.block_on(async {
            loop {
                let read_began = Instant::now();
                self.refresh().await;
                if !self.wait_for_next_read(read_began).await {
                    break;
                }
            }
        });
    }

    /// Waits until the view is due again (older than [`Ages::refresh_after`] and asked for
    /// since its read began: a viewer polling every 5 s costs one read per poll, made ahead of
    /// the next one) or a read is asked for now; `false` when nobody asked for
    /// [`Ages::watched_for`] (the refresher then ends, unless a request came meanwhile).
    async fn wait_for_next_read(&self, read_began: Instant) -> bool {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.ages.refresh_after) => {}
                _ = self.wake.notified() => return true,
            }
            if *self.asked_at.lock().expect("the last request") > read_began {
                return true;
            }
            if self.watched() {
                continue;
            }
            self.refreshing.store(false, Ordering::SeqCst);
            // A request between the check and the store found the refresher running: go on
            // for it.
            return self.watched()
                && self
                    .refreshing
                    .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok();
        }
    }

    /// One read of the source, kept unless a change was made since it began.
    async fn refresh(&self) {
        let generation = self.generation();
        let started = Instant::now();
        let read = self.source.read_snapshot().await;
        let read_ms = started.elapsed().as_millis() as u64;
        let error = match read {
            Ok(snapshot) => {
                let view = View::new(snapshot, &self.source, self.source.clock().now());
                tracing::debug!(
                    read_ms,
                    view_ms = started.elapsed().as_millis() as u64 - read_ms,
                    tasks = view.status.tasks.len(),
                    "the dashboard's view was read"
                );
                self.keep(generation, Arc::new(view));
                None
            }
            Err(error) => {
                tracing::debug!(%error, "the dashboard's view was not read");
                Some(error)
            }
        };
        self.reads.send_modify(|(count, last)| {
            *count += 1;
            *last = error;
        });
    }

    /// The generation a read beginning now belongs to.
    pub fn generation(&self) -> Generation {
        Generation(self.generation.load(Ordering::SeqCst))
    }

    /// Caches `view`, read from `generation`, unless a change was made since it began.
    pub fn keep(&self, generation: Generation, view: Arc<View>) {
        let mut cached = self.view.lock().expect("the view cache");
        if self.generation() == generation {
            *cached = Some(Fresh {
                at: Instant::now(),
                value: view,
            });
        }
    }

    /// `task`'s history, oldest first, cached for [`REFRESH_AFTER`].
    pub async fn history(&self, task: &str) -> Result<Arc<Vec<HistoryEntry>>, String> {
        let mut cached = self.histories.lock().await;
        if let Some(fresh) = cached
            .get(task)
            .filter(|f| f.current(self.ages.refresh_after))
        {
            return Ok(fresh.value.clone());
        }
        let value = Arc::new(self.source.read_history(task).await?);
        cached.retain(|_, fresh| fresh.current(self.ages.refresh_after));
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

    /// Forgets what was read, so the next request shows a change just made: it waits for a
    /// read begun after this call.
    pub async fn forget(&self) {
        {
            let mut cached = self.view.lock().expect("the view cache");
            self.generation.fetch_add(1, Ordering::SeqCst);
            *cached = None;
        }
        self.wake.notify_one();
        self.histories.lock().await.clear();
    }
}

pub mod live;
#[cfg(test)]
mod tests;
