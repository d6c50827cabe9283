//! The reader of a cluster's dashboard: one ZooKeeper session that holds recursive watches
//! over what `status` reads (`ops::live::watched_dirs`), reads the whole cluster once, then
//! reads again only the znodes the watches name and applies them to an [`crate::ops::live::Live`]
//! that requests make their views from.
//!
//! It starts with the first request and stays on: a node nobody ever looked at reads nothing,
//! and a request after a quiet spell finds the snapshot current. Changes are read in batches,
//! [`READ_CHANGES_AFTER`] after the first of them, or at once when a change was made through
//! the API (the request that follows waits until this session has caught up with it). A lost
//! connection may have lost events: the view says it may be behind until the session is back,
//! its watches set again and the cluster read again in full; an expired session is replaced
//! by a new one.

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::{FutureExt, Stream, StreamExt};
use tokio::time::Instant;
use zookeeper_client::{EventType, SessionState, WatchedEvent};

use super::Cache;
use crate::coord::records::Paths;
use crate::coord::zk::settings::ZkSettings;
use crate::coord::zk::watch_stream;
use crate::ops::cluster::{CONNECT_DEADLINE, ClusterClient};
use crate::ops::live::{Applied, Live, reads, watched_dirs};

/// How long after a change its znode is read: the changes of that span are read together
/// (a cluster of 10,000 tasks at rest writes some 540 znodes a minute).
pub const READ_CHANGES_AFTER: Duration = Duration::from_millis(500);

/// The longest wait before a new session after a failed one.
const RETRY_AT_MOST: Duration = Duration::from_secs(30);

/// Whether the live snapshot shows every change ZooKeeper made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sync {
    /// Every change is applied (or will be within [`READ_CHANGES_AFTER`]).
    Current,
    /// Changes may be missing since `since`, for the reason said.
    Behind { since: DateTime<Utc>, why: String },
}

/// What the reader shares with requests.
pub struct Shared {
    /// The snapshot kept current; `None` before the first full read.
    pub live: Option<Live>,
    pub sync: Sync,
    /// The cache's generation this session has caught up with: every change made through the
    /// API before it is applied.
    pub caught_up: u64,
    /// Counts the full reads installed: with [`Live::changes`], what a view was made from.
    pub installs: u64,
}

impl Shared {
    /// Before the first full read, which starts `now`.
    pub fn starting(now: DateTime<Utc>) -> Shared {
        Shared {
            live: None,
            sync: Sync::Behind {
                since: now,
                why: "the dashboard's first read of ZooKeeper is under way".into(),
            },
            caught_up: 0,
            installs: 0,
        }
    }
}

/// What ends following the changes of a session.
enum Followed {
    /// Events may have been missed (the connection was lost), or a member or task set changed:
    /// read the whole cluster again.
    ReadAll,
}

type Events = futures::stream::SelectAll<Pin<Box<dyn Stream<Item = WatchedEvent> + Send>>>;

impl Cache {
    /// The reader's thread: sessions one after the other, for as long as the daemon runs.
    pub(super) fn live_reader(self: Arc<Self>, settings: ZkSettings) {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(error) => {
                tracing::error!(%error, "cannot start the dashboard's reader");
                return;
            }
        };
        runtime.block_on(async {
            let mut retry = Duration::from_secs(1);
            loop {
                let began = Instant::now();
                let error = self.live_session(&settings).await;
                tracing::debug!(%error, "the dashboard's ZooKeeper session ended");
                self.behind(&error);
                self.reads.send_modify(|(count, last)| {
                    *count += 1;
                    *last = Some(error);
                });
                // A session that lasted is retried at once; one that keeps failing less often.
                retry = if began.elapsed() > RETRY_AT_MOST {
                    Duration::from_secs(1)
                } else {
                    (retry * 2).min(RETRY_AT_MOST)
                };
                tokio::select! {
                    _ = tokio::time::sleep(retry) => {}
                    _ = self.wake.notified() => {}
                }
            }
        });
    }

    /// Marks the live snapshot as possibly behind, for `why`, unless it already is.
    fn behind(&self, why: &str) {
        let mut shared = self.live.lock().expect("the live snapshot");
        if shared.sync == Sync::Current {
            shared.sync = Sync::Behind {
                since: self.source.clock().now(),
                why: why.to_string(),
            };
        }
    }

    /// One session: watches, a full read, then its changes; why it ended.
    async fn live_session(&self, settings: &ZkSettings) -> String {
        let client = match ClusterClient::connect(
            &settings.connect,
            &settings.cluster,
            &settings.auth,
            settings.tls.as_ref(),
            CONNECT_DEADLINE,
            self.source.clock(),
        )
        .await
        {
            Ok(client) => client,
            Err(error) => return format!("{error:#}"),
        };
        let why = self.watch_and_follow(&client).await;
        client.close().await;
        why
    }

    async fn watch_and_follow(&self, client: &ClusterClient) -> String {
        let mut events = Events::new();
        // The watches first: a change during the full read is then read again after it.
        for dir in watched_dirs(&client.paths) {
            match client.watch_tree(&dir).await {
                Ok(watcher) => events.push(watch_stream(watcher)),
                Err(error) => return format!("{error:#}"),
            }
        }
        loop {
            let generation = self.generation();
            let started = Instant::now();
            let (snapshot, triggers) = match client.snapshot_and_triggers(None).await {
                Ok(read) => read,
                Err(error) => return format!("{error:#}"),
            };
            let read_ms = started.elapsed().as_millis() as u64;
            let live = Live::new(snapshot, triggers, client.clock.now());
            tracing::debug!(
                read_ms,
                status_ms = started.elapsed().as_millis() as u64 - read_ms,
                "the dashboard read the cluster in full"
            );
            {
                let mut shared = self.live.lock().expect("the live snapshot");
                shared.live = Some(live);
                shared.installs += 1;
                shared.sync = Sync::Current;
                shared.caught_up = shared.caught_up.max(generation.0);
            }
            self.reads.send_modify(|(count, last)| {
                *count += 1;
                *last = None;
            });
            match self.follow(client, &mut events).await {
                Ok(Followed::ReadAll) => continue,
                Err(why) => return why,
            }
        }
    }

    /// Applies the session's changes until it ends (`Err`: why) or a full read is needed.
    async fn follow(
        &self,
        client: &ClusterClient,
        events: &mut Events,
    ) -> Result<Followed, String> {
        let mut pending: BTreeSet<String> = BTreeSet::new();
        let mut read_at: Option<Instant> = None;
        let mut disconnected = false;
        loop {
            tokio::select! {
                event = events.next() => {
                    let Some(event) = event else {
                        return Err("the dashboard's ZooKeeper watches ended".into());
                    };
                    if event.event_type == EventType::Session {
                        match event.session_state {
                            SessionState::Disconnected => {
                                disconnected = true;
                                self.behind("the dashboard's ZooKeeper connection was lost; reconnecting");
                            }
                            state if state.is_terminated() => {
                                return Err(format!("the dashboard's ZooKeeper session ended ({state})"));
                            }
                            // Back: what happened meanwhile may not have been told, and
                            // the server dropped the watches with the connection.
                            _ if disconnected => {
                                rewatch(client).await?;
                                return Ok(Followed::ReadAll);
                            }
                            _ => {}
                        }
                    } else if self.reads_path(&client.paths, &event.path) {
                        pending.insert(event.path);
                        read_at.get_or_insert(Instant::now() + READ_CHANGES_AFTER);
                    }
                }
                _ = sleep_until(read_at) => {
                    read_at = None;
                    if self.read_changes(client, &mut pending).await? == Applied::ReadAll {
                        return Ok(Followed::ReadAll);
                    }
                }
                _ = self.wake.notified() => {
                    if self.catch_up(client, events, &mut pending).await? == Applied::ReadAll {
                        return Ok(Followed::ReadAll);
                    }
                    read_at = None;
                }
            }
        }
    }

    fn reads_path(&self, paths: &Paths, path: &str) -> bool {
        let shared = self.live.lock().expect("the live snapshot");
        shared.live.is_some() && reads(paths, path)
    }

    /// Catches up with the changes made before now (through the API, in other sessions):
    /// their events come before the answer to a read after a `sync`; then reads them.
    async fn catch_up(
        &self,
        client: &ClusterClient,
        events: &mut Events,
        pending: &mut BTreeSet<String>,
    ) -> Result<Applied, String> {
        let generation = self.generation();
        client
            .catch_up()
            .await
            .map_err(|error| format!("{error:#}"))?;
        while let Some(Some(event)) = events.next().now_or_never() {
            if event.event_type == EventType::Session {
                // A state change while catching up: the next full read settles it.
                return Ok(Applied::ReadAll);
            }
            if self.reads_path(&client.paths, &event.path) {
                pending.insert(event.path);
            }
        }
        let applied = self.read_changes(client, pending).await?;
        if applied == Applied::ReadAll {
            // The full read that follows catches up (it began after the change).
            return Ok(applied);
        }
        let mut shared = self.live.lock().expect("the live snapshot");
        shared.caught_up = shared.caught_up.max(generation.0);
        drop(shared);
        self.reads.send_modify(|(count, _)| *count += 1);
        Ok(applied)
    }

    /// Reads the znodes in `pending` again and applies them.
    async fn read_changes(
        &self,
        client: &ClusterClient,
        pending: &mut BTreeSet<String>,
    ) -> Result<Applied, String> {
        if pending.is_empty() {
            return Ok(Applied::Done);
        }
        let paths: Vec<String> = std::mem::take(pending).into_iter().collect();
        let data = client
            .read_many(&paths)
            .await
            .map_err(|error| format!("{error:#}"))?;
        self.drop_old_view();
        let mut shared = self.live.lock().expect("the live snapshot");
        let Some(live) = shared.live.as_mut() else {
            return Ok(Applied::ReadAll);
        };
        let mut applied = Applied::Done;
        for (path, data) in paths.iter().zip(&data) {
            if live.apply(&client.paths, path, data.as_deref()) == Applied::ReadAll {
                applied = Applied::ReadAll;
            }
        }
        // The lines touched are worked out here, off the requests' way.
        live.refresh(self.source.clock().now());
        Ok(applied)
    }

    /// Drops a cached view too old to be served again: the live snapshot it shares is then
    /// changed in place rather than copied (a request still answering from it keeps its own).
    fn drop_old_view(&self) {
        let mut cached = self.view.lock().expect("the view cache");
        if cached
            .as_ref()
            .is_some_and(|view| !view.current(self.ages.refresh_after))
        {
            *cached = None;
        }
    }
}

/// Sets the watches again after a reconnect within the session: ZooKeeper dropped them with the
/// connection, and zookeeper-client 0.11.2 leaves persistent watches out of the ones it sets
/// again (without this the view stayed as read after the reconnect, every later change
/// unseen). The watcher each call returns is dropped: the first of its path stays and gets
/// the events.
async fn rewatch(client: &ClusterClient) -> Result<(), String> {
    for dir in watched_dirs(&client.paths) {
        client
            .watch_tree(&dir)
            .await
            .map_err(|error| format!("{error:#}"))?;
    }
    Ok(())
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
