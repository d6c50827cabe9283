//! The operator's writes (`pause`, `resume`, `drain`, `undrain`, the requests of `trigger` and
//! `backfill`, `backfill --cancel`) against ZooKeeper: read the records, ask the pure rule in [`crate::coord::operator`] for the operations, perform them
//! with the node's driver's executor ([`crate::coord::zk::call::perform`]), and read again
//! when a version moved in between. The rules live there; this is only their I/O.

use anyhow::bail;
use chrono::{DateTime, Utc};

use super::{ClusterClient, Read};
use crate::coord::backfill::BackfillRecord;
use crate::coord::node::io::{ZkFail, ZkOk};
use crate::coord::operator::{
    self, Cancelling, Marking, RequestRecord, Requesting, ResumeRead, Versioned,
};
use crate::coord::records::{FireRecord, MarkRecord};
use crate::coord::zk::call;
use crate::coord::zkop::ZkOp;

/// How often a write is tried again when a record moved between its read and its write.
const ATTEMPTS: usize = 5;

fn versioned<T>(read: Read<T>) -> Versioned<T> {
    Versioned {
        value: read.value,
        version: read.stat.version,
    }
}

/// Whether ZooKeeper refused `fail` for the state it found (a znode missing or there, a
/// version moved), which the caller answers by reading again, rather than failed.
fn refused(fail: &ZkFail) -> bool {
    match fail {
        ZkFail::NoNode | ZkFail::NodeExists | ZkFail::BadVersion => true,
        ZkFail::Multi { error, .. } => refused(error),
        _ => false,
    }
}

impl ClusterClient {
    /// Performs `op` (`what` names it in errors); a refusal is the caller's answer, anything
    /// else an error. A call without an answer may have been applied: the error says so.
    async fn perform(&self, what: &str, op: ZkOp) -> anyhow::Result<Result<ZkOk, ZkFail>> {
        match call::perform(self.client.clone(), op).await {
            Ok((ok, _)) => Ok(Ok(ok)),
            Err(fail) if refused(&fail) => Ok(Err(fail)),
            Err(fail) if fail.outcome_unknown() => bail!(
                "ZooKeeper at {}: {what}: {fail}, so whether it was done is unknown; run `zkcron \
                 status` to see",
                self.connect
            ),
            Err(fail) => bail!("ZooKeeper at {}: {what}: {fail}", self.connect),
        }
    }

    /// Creates each of `parents` of `path` (one that exists is fine).
    async fn create_parents(&self, path: &str, parents: Vec<ZkOp>) -> anyhow::Result<()> {
        for parent in parents {
            match self
                .perform(&format!("creating {path}'s parents"), parent)
                .await?
            {
                Ok(_) | Err(ZkFail::NodeExists) => {}
                Err(fail) => bail!("ZooKeeper at {}: creating {path}: {fail}", self.connect),
            }
        }
        Ok(())
    }

    /// `zkcron trigger` and `zkcron backfill`: creates the znode of `request`
    /// ([`operator::request`]); its name, numbered by ZooKeeper (a manual run's fire id, a
    /// backfill's id). Not tried again: a create whose answer was lost may have been made.
    pub async fn request(&self, request: &RequestRecord) -> anyhow::Result<String> {
        let Requesting { parents, create } = operator::request(&self.paths, request, self.acl);
        let what = format!("creating a request of task {}", request.task());
        self.create_parents(&what, parents).await?;
        match call::create_sequential(self.client.clone(), create).await {
            Ok(name) => Ok(name),
            Err(fail) if fail.outcome_unknown() => bail!(
                "ZooKeeper at {}: {what}: {fail}, so whether it was made is unknown; run `zkcron \
                 status` to see",
                self.connect
            ),
            Err(fail) => bail!("ZooKeeper at {}: {what}: {fail}", self.connect),
        }
    }

    /// `zkcron backfill --cancel`: cancels the request `name` at the version read
    /// ([`operator::cancel`]; read again when it moved); the record as it was, `None` when
    /// there is none.
    pub async fn cancel_backfill(
        &self,
        name: &str,
        by: &str,
        now: DateTime<Utc>,
    ) -> anyhow::Result<Option<BackfillRecord>> {
        let path = self.paths.backfill(name);
        for _ in 0..ATTEMPTS {
            let read = self.get::<BackfillRecord>(&path).await?.map(versioned);
            let (was, op) = match operator::cancel(&self.paths, name, read.as_ref(), by, now) {
                Cancelling::Missing => return Ok(None),
                Cancelling::Over(was) => return Ok(Some(was)),
                Cancelling::Set { was, op } => (was, op),
            };
            match self.perform(&format!("writing {path}"), op).await? {
                Ok(_) => return Ok(Some(was)),
                Err(ZkFail::NoNode) => return Ok(None),
                // Written meanwhile (a tick claimed): read it again.
                Err(_) => continue,
            }
        }
        bail!("backfill {name}: its record kept changing while it was being cancelled; try again")
    }

    /// Sets the mark at `path` as `marking` decides from the mark read there
    /// ([`operator::mark`]); `Some(existing)` when there is one already.
    pub async fn mark(
        &self,
        path: &str,
        marking: impl Fn(Option<&MarkRecord>) -> Marking,
    ) -> anyhow::Result<Option<MarkRecord>> {
        for _ in 0..ATTEMPTS {
            let read = self.get::<MarkRecord>(path).await?;
            let (parents, create) = match marking(read.as_ref().map(|read| &read.value)) {
                Marking::Already(mark) => return Ok(Some(mark)),
                Marking::Create { parents, create } => (parents, create),
            };
            self.create_parents(path, parents).await?;
            match self.perform(&format!("creating {path}"), create).await? {
                Ok(_) => return Ok(None),
                // Marked meanwhile: read the mark that won.
                Err(ZkFail::NodeExists) => continue,
                Err(fail) => bail!("ZooKeeper at {}: creating {path}: {fail}", self.connect),
            }
        }
        bail!("{path} kept changing while it was being written; try again")
    }

    /// `zkcron undrain`: deletes `node`'s drain mark ([`operator::undrain`]); the mark it
    /// deleted, `None` when there was none.
    pub async fn undrain(&self, node: &str) -> anyhow::Result<Option<MarkRecord>> {
        let path = self.paths.drain(node);
        for _ in 0..ATTEMPTS {
            let read = self.get::<MarkRecord>(&path).await?.map(versioned);
            let Some(op) = operator::undrain(&self.paths, node, read.as_ref()) else {
                return Ok(None);
            };
            match self.perform(&format!("deleting {path}"), op).await? {
                Ok(_) | Err(ZkFail::NoNode) => return Ok(read.map(|read| read.value)),
                // Marked again since it was read: read it again.
                Err(_) => continue,
            }
        }
        bail!("node {node}: its drain mark kept changing while it was being deleted; try again")
    }

    /// `zkcron resume`: reads the pause mark and the records [`operator::resume_reads`] names,
    /// then performs [`operator::resume`]'s multi-op (read again when something moved). The
    /// mark it deleted, `None` when the task was not paused.
    pub async fn resume(
        &self,
        task: &str,
        now: DateTime<Utc>,
    ) -> anyhow::Result<Option<MarkRecord>> {
        let children = self.children(&self.paths.tasks()).await?;
        let names = operator::resume_reads(task, children.iter().map(String::as_str));
        for _ in 0..ATTEMPTS {
            let mark_path = self.paths.paused(task);
            let Some(mark) = self.get::<MarkRecord>(&mark_path).await?.map(versioned) else {
                return Ok(None);
            };
            let mut read = ResumeRead {
                mark: Some(mark),
                records: Vec::new(),
            };
            for name in &names {
                if let Some(record) = self.get::<FireRecord>(&self.paths.record(name)).await? {
                    read.records.push((name.clone(), versioned(record)));
                }
            }
            let op = operator::resume(&self.paths, task, &read, now)
                .expect("a paused task's resume writes");
            match self.perform(&format!("resuming task {task}"), op).await? {
                Ok(_) => return Ok(read.mark.map(|mark| mark.value)),
                Err(_) => continue,
            }
        }
        bail!("task {task}: its records kept changing while it was being resumed; try again")
    }
}
