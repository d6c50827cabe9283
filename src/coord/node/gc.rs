//! Task-set collection: chunks no registered member references, once they are old enough.
//! Each `jobs.d` change publishes a new set; without this they would pile up. Members are read
//! afresh; if one cannot be read, nothing is deleted.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::io::{Level, ZkFail, ZkOk, ZkOp};
use super::{Node, Then};
use crate::coord::records::MemberRecord;

/// Task sets that no member references are deleted once this old (a node publishes its set
/// just before it registers; an hour leaves room for any registration in flight).
pub(super) const TASKSET_GC_AGE: Duration = Duration::from_secs(3600);

/// How often each node looks for task sets to delete (first at a random point of the period).
pub(super) const TASKSET_GC_EVERY: Duration = Duration::from_secs(3600);

/// Where a collection is.
#[derive(Debug)]
pub(crate) enum GcStep {
    Members,
    Member,
    Sets,
    Set { name: String },
    Delete,
}

#[derive(Debug, Default)]
pub(crate) struct Gc {
    outstanding: usize,
    referenced: BTreeSet<String>,
    chunks: Vec<(String, i64)>,
    deleted: usize,
    failed: Option<String>,
}

/// Of the task-set chunks `(name, ctime ms)`, named `<digest>-<index>`, those whose digest is
/// not in `referenced` and that are at least `min_age` old at `now_ms`.
pub fn unreferenced_chunks(
    chunks: &[(String, i64)],
    referenced: &BTreeSet<String>,
    now_ms: i64,
    min_age: Duration,
) -> Vec<String> {
    chunks
        .iter()
        .filter(|(name, ctime)| {
            let digest = name.rsplit_once('-').map_or(name.as_str(), |(d, _)| d);
            !referenced.contains(digest) && now_ms - ctime >= min_age.as_millis() as i64
        })
        .map(|(name, _)| name.clone())
        .collect()
}

impl Node {
    pub(super) fn start_gc(&mut self) {
        if !self.ready() || self.view.gc.is_some() {
            return;
        }
        let mut gc = Gc {
            outstanding: 1,
            ..Gc::default()
        };
        if let Some((reference, _, _)) = &self.view.my_set {
            gc.referenced.insert(reference.digest.clone());
        }
        self.view.gc = Some(gc);
        let path = self.paths.members();
        self.call(ZkOp::GetChildren { path }, Then::Gc(GcStep::Members));
    }

    pub(super) fn on_gc(
        &mut self,
        step: GcStep,
        result: Result<ZkOk, ZkFail>,
        sent: DateTime<Utc>,
    ) {
        let Some(calls) = self.gc_reply(step, result) else {
            return;
        };
        let gc = self.view.gc.as_mut().expect("present");
        gc.outstanding += calls.len();
        for (op, step) in calls {
            self.call(op, Then::Gc(step));
        }
        let gc = self.view.gc.as_mut().expect("present");
        if gc.outstanding == 0 {
            let gc = self.view.gc.take().expect("present");
            self.gc_read(gc, sent);
        }
    }

    /// Takes one reply of the collection in; returns the calls it leads to (`None`: no
    /// collection is going on).
    fn gc_reply(
        &mut self,
        step: GcStep,
        result: Result<ZkOk, ZkFail>,
    ) -> Option<Vec<(ZkOp, GcStep)>> {
        let gc = self.view.gc.as_mut()?;
        gc.outstanding -= 1;
        let mut calls = Vec::new();
        match (step, result) {
            (GcStep::Members, Ok(ZkOk::Children(ids))) => {
                for id in ids {
                    calls.push((
                        ZkOp::GetData {
                            path: self.paths.member(&id),
                        },
                        GcStep::Member,
                    ));
                }
                calls.push((
                    ZkOp::GetChildren {
                        path: self.paths.tasksets(),
                    },
                    GcStep::Sets,
                ));
            }
            (GcStep::Member, Ok(ZkOk::Data(data, _))) => {
                match serde_json::from_slice::<MemberRecord>(&data) {
                    Ok(record) => {
                        gc.referenced.insert(record.taskset.digest);
                    }
                    Err(_) => gc.failed = Some("a member is unreadable".into()),
                }
            }
            (GcStep::Member, Err(ZkFail::NoNode)) => {}
            (GcStep::Sets, Ok(ZkOk::Children(names))) => {
                for name in names {
                    let path = format!("{}/{name}", self.paths.tasksets());
                    calls.push((ZkOp::Exists { path }, GcStep::Set { name }));
                }
            }
            (GcStep::Set { name }, Ok(ZkOk::Exists(Some(stat)))) => {
                gc.chunks.push((name, stat.ctime_ms));
            }
            (GcStep::Set { .. }, Ok(_)) => {}
            (GcStep::Delete, Ok(_)) => gc.deleted += 1,
            (GcStep::Delete, Err(ZkFail::NoNode)) => {}
            (_, Err(error)) => gc.failed = Some(error.to_string()),
            (_, Ok(_)) => gc.failed = Some("unexpected answer".into()),
        }
        Some(calls)
    }

    /// Every read (or delete) of the collection is answered: deletes the chunks no member
    /// references that are old enough, or reports how it went.
    fn gc_read(&mut self, mut gc: Gc, sent: DateTime<Utc>) {
        if gc.failed.is_none() && !gc.chunks.is_empty() {
            // ZooKeeper's ctime against this node's wall clock at the listing: the age only
            // needs to be right within the hour.
            let doomed = unreferenced_chunks(
                &gc.chunks,
                &gc.referenced,
                sent.timestamp_millis(),
                TASKSET_GC_AGE,
            );
            gc.chunks.clear();
            if !doomed.is_empty() {
                gc.outstanding = doomed.len();
                for name in doomed {
                    let path = format!("{}/{name}", self.paths.tasksets());
                    self.call(
                        ZkOp::Delete {
                            path,
                            version: None,
                        },
                        Then::Gc(GcStep::Delete),
                    );
                }
                self.view.gc = Some(gc);
                return;
            }
        }
        match (gc.failed, gc.deleted) {
            (Some(error), _) => {
                self.report(
                    Level::Warn,
                    format!("cleaning up task sets failed ({error})"),
                );
            }
            (None, 0) => {}
            (None, deleted) => {
                self.report(Level::Info, "deleted task sets no member uses")
                    .field("chunks", deleted);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_old_task_sets_that_no_member_references_are_collected() {
        let hour = 3_600_000;
        let now = 10 * hour;
        let chunks: Vec<(String, i64)> = [
            ("inuse-0", 0),
            ("inuse-1", 0),
            ("old-0", now - 2 * hour),
            ("old-1", now - hour),
            ("fresh-0", now - hour + 1),
        ]
        .iter()
        .map(|(n, c)| (n.to_string(), *c))
        .collect();
        let referenced: BTreeSet<String> = ["inuse".to_string()].into();
        assert_eq!(
            unreferenced_chunks(&chunks, &referenced, now, Duration::from_secs(3600)),
            vec!["old-0".to_string(), "old-1".to_string()]
        );
    }
}
