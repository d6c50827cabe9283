//! Run history: `tasks/<task>/history`, one persistent znode per task holding its last runs
//! ([`HistoryRecord`], oldest first), written by the node that ran the job after its result.
//!
//! A write reads the record with its version, appends by [`record::append_history`] (once per
//! fire id; bounded by `[scheduler] history_runs` and 256 KiB) and sets it at that version
//! (creates it if missing); a conflict re-reads, at most [`HISTORY_TRIES`] times. A failure is
//! reported once per task (until a write succeeds again) and never holds up firing: the
//! daemon's answer for a scheduled run does not wait for it.

use super::io::{Level, ZkFail, ZkOk, ZkOp};
use super::request_end::End;
use super::{Node, Then};
use crate::coord::record;
use crate::coord::records::{FORMAT_VERSION, HistoryEntry, HistoryRecord};

/// Reads and writes of one append before it is given up.
pub(super) const HISTORY_TRIES: u8 = 5;

/// One append in flight.
#[derive(Debug)]
pub(crate) struct HistoryJob {
    task: String,
    entry: HistoryEntry,
    tries: u8,
    /// A manual run's trigger, ended after the append (whatever its outcome).
    then: Option<End>,
}

/// Where an append is.
#[derive(Debug)]
pub(crate) enum Step {
    Read(Box<HistoryJob>),
    Write(Box<HistoryJob>),
}

impl Node {
    /// Appends `entry` to `task`'s history, then ends the trigger `then` if given.
    pub(super) fn append_history(&mut self, task: String, entry: HistoryEntry, then: Option<End>) {
        self.read_history(HistoryJob {
            task,
            entry,
            tries: 0,
            then,
        });
    }

    fn read_history(&mut self, mut job: HistoryJob) {
        if self.life.session.is_none() || job.tries >= HISTORY_TRIES {
            let why = if self.life.session.is_none() {
                "not connected to ZooKeeper".to_string()
            } else {
                "it kept changing".to_string()
            };
            return self.history_done(job, Some(why));
        }
        job.tries += 1;
        let path = self.paths.history(&job.task);
        self.call(
            ZkOp::GetData { path },
            Then::History(Step::Read(Box::new(job))),
        );
    }

    pub(super) fn on_history_step(&mut self, step: Step, result: Result<ZkOk, ZkFail>) {
        match step {
            Step::Read(job) => self.on_history_read(*job, result),
            Step::Write(job) => match result {
                Ok(_) => self.history_done(*job, None),
                Err(ZkFail::BadVersion | ZkFail::NodeExists) => self.read_history(*job),
                Err(error) if error.outcome_unknown() => self.read_history(*job),
                Err(error) => self.history_done(*job, Some(error.to_string())),
            },
        }
    }

    fn on_history_read(&mut self, job: HistoryJob, result: Result<ZkOk, ZkFail>) {
        let path = self.paths.history(&job.task);
        let (mut runs, version) = match result {
            Ok(ZkOk::Data(data, stat)) => match serde_json::from_slice::<HistoryRecord>(&data) {
                Ok(stored) => (stored.runs, Some(stat.version)),
                Err(error) => {
                    // Rewriting it is the only way the history works again; what it held is
                    // unreadable anyway.
                    self.report_once(
                        format!("history unreadable {path} {}", stat.mzxid),
                        Level::Warn,
                        format!(
                            "the run history {path} is not valid ({error}); starting it afresh"
                        ),
                    );
                    (Vec::new(), Some(stat.version))
                }
            },
            Err(ZkFail::NoNode) => (Vec::new(), None),
            Err(error) if error.outcome_unknown() => return self.read_history(job),
            Ok(_) => return self.history_done(job, Some("unexpected answer".into())),
            Err(error) => return self.history_done(job, Some(error.to_string())),
        };
        if !record::append_history(&mut runs, job.entry.clone(), self.requests.history_runs) {
            return self.history_done(job, None);
        }
        let data = serde_json::to_vec(&HistoryRecord {
            format: FORMAT_VERSION,
            runs,
        })
        .expect("serializes");
        let op = self.put_record(path, data, version);
        self.call(op, Then::History(Step::Write(Box::new(job))));
    }

    /// The append is over (`failure`: why it was not written).
    fn history_done(&mut self, job: HistoryJob, failure: Option<String>) {
        let key = format!("history failed {}", job.task);
        match failure {
            None => {
                self.io.reported.remove(&key);
            }
            Some(why) => {
                let path = self.paths.history(&job.task);
                self.report_once(
                    key,
                    Level::Warn,
                    format!("cannot append to the run history {path} ({why}); runs go on, `zkcron history` misses them until a write succeeds"),
                )
                .field("task", &job.task)
                .field("fire_id", &job.entry.fire_id);
            }
        }
        if let Some(end) = job.then {
            self.end_request(end);
        }
        if self.life.close_waiting.is_some() && !self.history_in_flight() {
            let req = self.life.close_waiting.take().expect("checked");
            self.close_now(req);
        }
    }

    /// Whether an append is in flight: each one always has its next call pending (a read or
    /// a write; no timer waits between them).
    pub(super) fn history_in_flight(&self) -> bool {
        self.io
            .pending
            .values()
            .any(|p| p.generation == self.io.generation && matches!(p.then, Then::History(_)))
    }

    /// A session ended with an append in flight.
    pub(super) fn abort_history(&mut self, step: Step) {
        let (Step::Read(mut job) | Step::Write(mut job)) = step;
        let end = job.then.take();
        self.history_done(*job, Some("the ZooKeeper session ended".into()));
        if let Some(end) = end {
            end.abort(self);
        }
    }
}
