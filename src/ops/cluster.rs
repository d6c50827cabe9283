//! The operator's ZooKeeper session: a short-lived zookeeper-client session that reads the
//! cluster's records into a [`Snapshot`] and writes the operator's changes (drain, pause,
//! resume, the requests of trigger and backfill and a backfill's cancel in `writes.rs`, as
//! [`crate::coord::operator`] rules). No daemon is needed on the host. `watch.rs`: the watches and catch-up reads the dashboard's live reader
//! needs beyond a snapshot.
//!
//! Reads of many znodes go out as multi-reads of `BATCH` paths, `IN_FLIGHT` at once, so
//! `status` on 10,000 tasks is a few dozen round trips, not 30,000.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use chrono::{DateTime, Utc};
use futures::{StreamExt, stream};
use serde::de::DeserializeOwned;
use zookeeper_client::{Client, Error as ZkError, MultiReadResult, Stat};

use super::live::TriggerRuns;
use super::model::{LiveMember, Snapshot, StatusSource};
use crate::clock::Clock;
use crate::coord::RunResult;
use crate::coord::backfill::{self, BackfillRecord};
use crate::coord::records::{
    FireRecord, HistoryEntry, HistoryRecord, LeaseRecord, MarkRecord, MemberRecord, Paths,
    ResultRecord, TaskSetRecord, TriggerRecord, TriggerState,
};
use crate::coord::zk::settings::{AuthSource, TlsSource, connector, split_connect};
use crate::coord::zk::tls::TLS_FAILED;
use crate::coord::zkop::NodeAcl;

/// How long a command waits for a ZooKeeper session before it says it cannot reach it.
pub const CONNECT_DEADLINE: Duration = Duration::from_secs(5);

/// How long one request may take once connected.
pub(super) const CALL_DEADLINE: Duration = Duration::from_secs(10);

mod watch;
mod writes;

/// Paths per multi-read.
const BATCH: usize = 500;

/// Multi-reads in flight at once.
const IN_FLIGHT: usize = 8;

/// A session on one cluster.
pub struct ClusterClient {
    client: Client,
    /// The ACL of the znodes this command creates ([`crate::coord::operator`]'s operations):
    /// the daemon's (creator-all when authenticated, open otherwise).
    pub acl: NodeAcl,
    pub paths: Paths,
    pub cluster: String,
    pub connect: String,
    /// Where what this session writes is timed (marks, requests) and its reads judged.
    pub clock: Clock,
}

/// A znode's data, parsed, with its stat.
pub struct Read<T> {
    pub value: T,
    pub stat: Stat,
}

fn ms(stamp: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(stamp).unwrap_or_default()
}

fn parse<T: DeserializeOwned>(path: &str, data: &[u8]) -> anyhow::Result<T> {
    serde_json::from_slice(data).with_context(|| format!("cannot read the record {path}"))
}

impl ClusterClient {
    /// Opens a session on `connect` (`hosts[/chroot]`) for `cluster`, or says that ZooKeeper
    /// cannot be reached within `deadline`. What it writes is timed on `clock`.
    pub async fn connect(
        connect: &str,
        cluster: &str,
        auth: &AuthSource,
        tls: Option<&TlsSource>,
        deadline: Duration,
        clock: Clock,
    ) -> anyhow::Result<ClusterClient> {
        let (hosts, chroot) = split_connect(connect).map_err(|e| anyhow!(e))?;
        let auth = auth.resolve().map_err(|e| anyhow!(e))?;
        let tls = tls
            .map(TlsSource::resolve)
            .transpose()
            .map_err(|e| anyhow!(e))?;
        let connector = connector(Duration::from_secs(10), auth.as_ref(), tls.as_ref())
            .map_err(|e| anyhow!(e))?
            .with_connection_timeout(deadline);
        let client = match tokio::time::timeout(deadline, connector.connect(&hosts)).await {
            Ok(Ok(client)) => client,
            // A failed TLS handshake already says which setting to fix.
            Ok(Err(error)) if error.starts_with(TLS_FAILED) => {
                bail!("cannot reach ZooKeeper at {connect}: {error}")
            }
            Ok(Err(error)) => bail!(
                "cannot reach ZooKeeper at {connect}: {error}; check --zookeeper or \
                 [coordination.zookeeper] connect"
            ),
            Err(_) => bail!(
                "cannot reach ZooKeeper at {connect}: no session within {}; check --zookeeper or \
                 [coordination.zookeeper] connect, and that ZooKeeper runs",
                humantime::format_duration(deadline)
            ),
        };
        let cluster_client = ClusterClient {
            client,
            acl: match auth {
                Some(_) => NodeAcl::CreatorAll,
                None => NodeAcl::Open,
            },
            paths: Paths {
                base: format!("{chroot}/zkcron/{cluster}"),
            },
            cluster: cluster.to_string(),
            connect: connect.to_string(),
            clock,
        };
        cluster_client
            .check_cluster(auth.as_ref().map(|auth| auth.user.as_str()))
            .await?;
        Ok(cluster_client)
    }

    /// Says plainly when the cluster was never registered here, or is protected by credentials
    /// this command does not have (`user`: the user it authenticated as, if any).
    async fn check_cluster(&self, user: Option<&str>) -> anyhow::Result<()> {
        let (cluster, connect) = (&self.cluster, &self.connect);
        if self.exists(&self.paths.members()).await?.is_none() {
            bail!(
                "there is no cluster {cluster:?} at {connect} ({} does not exist): no node of it \
                 ever registered; check --cluster or [coordination.zookeeper] cluster",
                self.paths.base
            );
        }
        // `exists` needs no permission; listing does: say plainly when the cluster is
        // protected by credentials this command does not have.
        let members = self.paths.members();
        let listed = tokio::time::timeout(CALL_DEADLINE, self.client.list_children(&members)).await;
        if let Ok(Err(ZkError::NoAuth)) = listed {
            bail!(
                "ZooKeeper at {connect} refused to read {members}: authentication required, and {}; \
                 set [coordination.zookeeper] auth or auth_file (in --config) to the cluster's \
                 credentials",
                match user {
                    Some(user) => format!("the user {user:?} is not the one the cluster uses"),
                    None => "no credentials are configured".to_string(),
                }
            );
        }
        Ok(())
    }

    /// Ends the session now rather than when it times out on the server.
    pub async fn close(self) {
        let mut state = self.client.state_watcher();
        drop(self.client);
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            while !state.changed().await.is_terminated() {}
        })
        .await;
    }

    async fn call<T>(
        &self,
        what: &str,
        call: impl Future<Output = Result<T, ZkError>>,
    ) -> anyhow::Result<Result<T, ZkError>> {
        match tokio::time::timeout(CALL_DEADLINE, call).await {
            Ok(Ok(value)) => Ok(Ok(value)),
            // The caller decides: these are answers, not failures.
            Ok(Err(error @ (ZkError::NoNode | ZkError::NodeExists | ZkError::BadVersion))) => {
                Ok(Err(error))
            }
            Ok(Err(error)) => Err(anyhow!("ZooKeeper at {}: {what}: {error}", self.connect)),
            Err(_) => Err(anyhow!(
                "ZooKeeper at {}: {what}: no answer within {}",
                self.connect,
                humantime::format_duration(CALL_DEADLINE)
            )),
        }
    }

    pub async fn exists(&self, path: &str) -> anyhow::Result<Option<Stat>> {
        let what = format!("reading {path}");
        match tokio::time::timeout(CALL_DEADLINE, self.client.check_stat(path)).await {
            Ok(Ok(stat)) => Ok(stat),
            Ok(Err(error)) => Err(anyhow!("ZooKeeper at {}: {what}: {error}", self.connect)),
            Err(_) => Err(anyhow!("ZooKeeper at {}: {what}: no answer", self.connect)),
        }
    }

    /// The record at `path`, or `None` when there is none.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<Option<Read<T>>> {
        let what = format!("reading {path}");
        match tokio::time::timeout(CALL_DEADLINE, self.client.get_data(path)).await {
            Ok(Ok((data, stat))) => Ok(Some(Read {
                value: parse(path, &data)?,
                stat,
            })),
            Ok(Err(ZkError::NoNode)) => Ok(None),
            Ok(Err(error)) => Err(anyhow!("ZooKeeper at {}: {what}: {error}", self.connect)),
            Err(_) => Err(anyhow!("ZooKeeper at {}: {what}: no answer", self.connect)),
        }
    }

    /// The children of `path`, none when it does not exist.
    pub async fn children(&self, path: &str) -> anyhow::Result<Vec<String>> {
        let what = format!("listing {path}");
        match tokio::time::timeout(CALL_DEADLINE, self.client.list_children(path)).await {
            Ok(Ok(children)) => Ok(children),
            Ok(Err(ZkError::NoNode)) => Ok(Vec::new()),
            Ok(Err(error)) => Err(anyhow!("ZooKeeper at {}: {what}: {error}", self.connect)),
            Err(_) => Err(anyhow!("ZooKeeper at {}: {what}: no answer", self.connect)),
        }
    }

    /// Waits, up to `deadline`, until `node`'s member record satisfies `done` or is gone (told
    /// by a watch, not polled); `false` when the deadline came first.
    pub async fn wait_for_member(
        &self,
        node: &str,
        done: impl Fn(&MemberRecord) -> bool,
        deadline: Duration,
    ) -> anyhow::Result<bool> {
        let path = self.paths.member(node);
        let until = tokio::time::Instant::now() + deadline;
        loop {
            let read = tokio::time::timeout_at(until, self.client.get_and_watch_data(&path)).await;
            let (data, _, watcher) = match read {
                Err(_) => return Ok(false),
                Ok(Err(ZkError::NoNode)) => return Ok(true),
                Ok(Err(error)) => bail!("ZooKeeper at {}: reading {path}: {error}", self.connect),
                Ok(Ok(read)) => read,
            };
            if done(&parse::<MemberRecord>(&path, &data)?) {
                return Ok(true);
            }
            if tokio::time::timeout_at(until, watcher.changed())
                .await
                .is_err()
            {
                return Ok(false);
            }
        }
    }

    /// The data and stat of every path (`None` where there is no znode), in multi-reads.
    async fn get_many(&self, paths: &[String]) -> anyhow::Result<Vec<Option<(Vec<u8>, Stat)>>> {
        let batches = stream::iter(paths.chunks(BATCH).map(|batch| async move {
            let mut reader = self.client.new_multi_reader();
            for path in batch {
                reader
                    .add_get_data(path)
                    .map_err(|e| anyhow!("reading {path}: {e}"))?;
            }
            let results = match tokio::time::timeout(CALL_DEADLINE, reader.commit()).await {
                Ok(Ok(results)) => results,
                Ok(Err(error)) => bail!(
                    "ZooKeeper at {}: reading {} records: {error}",
                    self.connect,
                    batch.len()
                ),
                Err(_) => bail!("ZooKeeper at {}: reading records: no answer", self.connect),
            };
            results
                .into_iter()
                .zip(batch)
                .map(|(result, path)| match result {
                    MultiReadResult::Data { data, stat } => Ok(Some((data, stat))),
                    MultiReadResult::Error {
                        err: ZkError::NoNode,
                    } => Ok(None),
                    MultiReadResult::Error { err } => Err(anyhow!("reading {path}: {err}")),
                    other => Err(anyhow!("reading {path}: unexpected answer {other:?}")),
                })
                .collect::<anyhow::Result<Vec<_>>>()
        }))
        .buffered(IN_FLIGHT);
        let mut all = Vec::with_capacity(paths.len());
        let mut batches = std::pin::pin!(batches);
        while let Some(batch) = batches.next().await {
            all.extend(batch?);
        }
        Ok(all)
    }

    /// Reads the records of `names` under `path_of`, parsed, skipping absent ones.
    async fn records<T: DeserializeOwned>(
        &self,
        names: &[String],
        path_of: impl Fn(&str) -> String,
    ) -> anyhow::Result<BTreeMap<String, Read<T>>> {
        let paths: Vec<String> = names.iter().map(|n| path_of(n)).collect();
        let found = self.get_many(&paths).await?;
        let mut records = BTreeMap::new();
        for ((name, path), data) in names.iter().zip(&paths).zip(found) {
            let Some((data, stat)) = data else { continue };
            // One unreadable znode (a stranger's, a newer release's broken one) must not keep
            // the operator from seeing the rest: it is named and left out.
            match parse(path, &data) {
                Ok(value) => {
                    records.insert(name.clone(), Read { value, stat });
                }
                Err(error) => eprintln!("zkcron: warning: {error:#}; left out"),
            }
        }
        Ok(records)
    }

    /// The live members and their task sets.
    async fn members(&self, snapshot: &mut Snapshot) -> anyhow::Result<()> {
        let ids = self.children(&self.paths.members()).await?;
        let members = self
            .records::<MemberRecord>(&ids, |id| self.paths.member(id))
            .await?;
        snapshot.members = members
            .into_values()
            .map(|read| LiveMember {
                registered_at: ms(read.stat.ctime),
                record: read.value,
            })
            .collect();
        let mut digests: BTreeMap<String, usize> = BTreeMap::new();
        for member in &snapshot.members {
            digests.insert(
                member.record.taskset.digest.clone(),
                member.record.taskset.chunks,
            );
        }
        for (digest, chunks) in digests {
            let paths: Vec<String> = (0..chunks.max(1))
                .map(|i| self.paths.chunk(&digest, i))
                .collect();
            let mut bytes = Vec::new();
            let mut complete = true;
            for data in self.get_many(&paths).await? {
                match data {
                    Some((data, _)) => bytes.extend(data),
                    None => complete = false,
                }
            }
            // A member registers after writing its chunks; a missing one means it is being
            // replaced right now: that member then counts as defining nothing.
            if complete {
                match parse::<TaskSetRecord>(&self.paths.chunk(&digest, 0), &bytes) {
                    Ok(set) => {
                        snapshot.tasksets.insert(digest, set);
                    }
                    Err(error) => eprintln!(
                        "zkcron: warning: {error:#}; its members count as defining no task"
                    ),
                }
            }
        }
        Ok(())
    }

    /// The operator's marks under `dir`.
    async fn marks(&self, dir: &str) -> anyhow::Result<BTreeMap<String, MarkRecord>> {
        let names = self.children(dir).await?;
        let marks = self
            .records::<MarkRecord>(&names, |n| format!("{dir}/{n}"))
            .await?;
        Ok(marks.into_iter().map(|(k, r)| (k, r.value)).collect())
    }

    /// The cluster's records for `tasks` and their parents (every task a live member defines
    /// when `None`).
    pub async fn snapshot(&self, tasks: Option<&[String]>) -> anyhow::Result<Snapshot> {
        Ok(self.snapshot_and_triggers(tasks).await?.0)
    }

    /// [`ClusterClient::snapshot`], with the ended manual runs of the trigger records its
    /// `recent_runs` come from (what `ops::live` keeps them current with).
    pub async fn snapshot_and_triggers(
        &self,
        tasks: Option<&[String]>,
    ) -> anyhow::Result<(Snapshot, TriggerRuns)> {
        let mut snapshot = Snapshot {
            backend: "zookeeper".into(),
            cluster: Some(self.cluster.clone()),
            ..Snapshot::default()
        };
        self.members(&mut snapshot).await?;
        let names: Vec<String> = match tasks {
            // With their parents, whose states `explain` gives.
            Some(tasks) => super::links::with_parents(&snapshot, tasks),
            None => snapshot.task_names(),
        };
        let held: std::collections::BTreeSet<String> = self
            .children(&self.paths.leases())
            .await?
            .into_iter()
            .collect();
        // The units of the tasks that run on every node (`<task>@<node-id>`) are read with them.
        let wanted: std::collections::BTreeSet<&str> = names.iter().map(String::as_str).collect();
        let units: Vec<String> = held
            .iter()
            .filter(|lease| {
                crate::coord::lease::split_unit(lease)
                    .is_some_and(|(task, _)| wanted.contains(task))
            })
            .cloned()
            .collect();
        let mut leased: Vec<String> = names
            .iter()
            .filter(|n| held.contains(*n))
            .cloned()
            .collect();
        leased.extend(units.iter().cloned());
        let with_units: Vec<String> = names.iter().chain(&units).cloned().collect();
        let (leases, fire_records, results) = futures::try_join!(
            self.records::<LeaseRecord>(&leased, |t| self.paths.lease(t)),
            self.records::<FireRecord>(&names, |t| self.paths.record(t)),
            self.records::<ResultRecord>(&with_units, |t| self.paths.result(t)),
        )?;
        snapshot.leases = leases.into_iter().map(|(k, r)| (k, r.value)).collect();
        snapshot.fire_records = fire_records
            .into_iter()
            .map(|(k, r)| (k, r.value))
            .collect();
        snapshot.results = results
            .into_iter()
            .map(|(k, r)| (k, r.value.result))
            .collect::<BTreeMap<String, RunResult>>();
        snapshot.paused = self.marks(&self.paths.paused_dir()).await?;
        snapshot.drained = self.marks(&self.paths.drained()).await?;
        snapshot.backfills = self
            .backfills()
            .await?
            .into_iter()
            .filter(|(_, b)| {
                b.value.state == backfill::BackfillState::Active && names.contains(&b.value.task)
            })
            .map(|(name, b)| (name, b.value))
            .collect();
        let runs = ended_manual_runs(&mut snapshot, self.triggers().await?, &names);
        Ok((snapshot, runs))
    }

    /// Every trigger record, by znode name.
    pub async fn triggers(&self) -> anyhow::Result<BTreeMap<String, Read<TriggerRecord>>> {
        let names = self.children(&self.paths.triggers()).await?;
        self.records(&names, |n| self.paths.trigger(n)).await
    }

    /// The task's history, oldest first (none when it has none): for a task that runs on
    /// every node, each node's unit's history merged, by start.
    pub async fn history(&self, task: &str) -> anyhow::Result<Vec<HistoryEntry>> {
        let unit = format!("{task}@");
        let mut holders = vec![task.to_string()];
        holders.extend(
            self.children(&self.paths.tasks())
                .await?
                .into_iter()
                .filter(|child| child.starts_with(&unit)),
        );
        let mut runs = Vec::new();
        for holder in &holders {
            if let Some(record) = self
                .get::<HistoryRecord>(&self.paths.history(holder))
                .await?
            {
                runs.extend(record.value.runs);
            }
        }
        if holders.len() > 1 {
            runs.sort_by_key(|r| r.started_at);
        }
        Ok(runs)
    }

    /// Every backfill request, by name.
    pub async fn backfills(&self) -> anyhow::Result<BTreeMap<String, Read<BackfillRecord>>> {
        let names = self.children(&self.paths.backfills()).await?;
        self.records(&names, |n| self.paths.backfill(n)).await
    }

    /// Deletes the trigger `fire_id` at `version` (any version with `None`); false when it
    /// changed or went meanwhile.
    pub async fn delete_trigger(
        &self,
        fire_id: &str,
        version: Option<i32>,
    ) -> anyhow::Result<bool> {
        let path = self.paths.trigger(fire_id);
        match self
            .call(
                &format!("deleting {path}"),
                self.client.delete(&path, version),
            )
            .await?
        {
            Ok(()) => Ok(true),
            Err(ZkError::NoNode | ZkError::BadVersion) => Ok(false),
            Err(error) => bail!("ZooKeeper at {}: deleting {path}: {error}", self.connect),
        }
    }
}

/// `/status` of a node of `cluster` at `connect` ([`crate::http`]): the cluster's status as
/// `zkcron status --json` reads it, through a session of its own per request (the daemon's
/// session stays the daemon's), or why it cannot be read now.
pub fn status_source(
    connect: &str,
    cluster: &str,
    auth: &AuthSource,
    tls: Option<&TlsSource>,
    clock: Clock,
) -> StatusSource {
    let connect = connect.to_string();
    let cluster = cluster.to_string();
    let auth = auth.clone();
    let tls = tls.cloned();
    std::sync::Arc::new(move || {
        let connect = connect.clone();
        let cluster = cluster.clone();
        let auth = auth.clone();
        let tls = tls.clone();
        // The snapshot's future is not `Send` (its record streams borrow through closures the
        // compiler cannot prove `Send` for every lifetime): it runs on a blocking thread.
        let runtime = tokio::runtime::Handle::current();
        Box::pin(async move {
            let read = tokio::task::spawn_blocking(move || {
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
                    let snapshot = client.snapshot(None).await;
                    client.close().await;
                    anyhow::Ok(super::live::status(snapshot?, clock.now()))
                })
            });
            match read.await {
                Ok(status) => status.map_err(|error| format!("{error:#}")),
                Err(error) => Err(format!("reading the status failed: {error}")),
            }
        })
    })
}

/// The ended manual runs among `triggers` of the tasks in `names`, by trigger znode name; the
/// newest of each task goes into the snapshot's `recent_runs`.
fn ended_manual_runs(
    snapshot: &mut Snapshot,
    triggers: BTreeMap<String, Read<TriggerRecord>>,
    names: &[String],
) -> TriggerRuns {
    let mut runs = TriggerRuns::new();
    for (name, trigger) in triggers {
        if let (TriggerState::Ended, Some(result)) = (trigger.value.state, trigger.value.result)
            && names.contains(&trigger.value.task)
        {
            let newer = snapshot
                .recent_runs
                .get(&trigger.value.task)
                .is_none_or(|r| r.started_at < result.started_at);
            if newer {
                snapshot
                    .recent_runs
                    .insert(trigger.value.task.clone(), result.clone());
            }
            runs.insert(name, (trigger.value.task, result));
        }
    }
    runs
}
