//! Requests answered when something happens: the end of a task's live runs on other nodes,
//! which a task's queued tick waits for (`overlap = "queue"`).
//!
//! The wait counts the foreign runs as `runs_elsewhere` does (under the request's own id) and,
//! while some are live, keeps the request until a run znode of the task is deleted (a
//! persistent recursive watch on `tasks/<task>`, added once per session and task), then counts
//! again. A reconnect within the session counts every wait again (events are not delivered
//! while disconnected); the end of the session answers every wait with an error.

use std::collections::{BTreeMap, BTreeSet};

use super::io::{Answer, Answered, ReqId, WatchKind, ZkOp};
use super::{Node, Output, Then};
use crate::coord::CoordError;

/// The waits for the end of runs on other nodes.
#[derive(Debug, Default)]
pub(crate) struct RunWaits {
    /// The waiting requests and their task.
    waiting: BTreeMap<ReqId, String>,
    /// Those whose count is in flight.
    counting: BTreeSet<ReqId>,
    /// Those whose count in flight may have listed a run deleted since: counted again.
    again: BTreeSet<ReqId>,
    /// The tasks whose subtree this session watches.
    watched: BTreeSet<String>,
}

impl Node {
    /// Answers `req` once no run of `task` is live on another node.
    pub(super) fn wait_runs_elsewhere(&mut self, req: ReqId, task: String) {
        if self.life.session.is_none() {
            return self.answer(
                req,
                Err(CoordError::NotConnected {
                    context: "waiting for live runs to end",
                }),
            );
        }
        if self.runs.run_waits.watched.insert(task.clone()) {
            let path = self.paths.record(&task);
            self.call(ZkOp::AddPersistentRecursiveWatch { path }, Then::Ignore);
        }
        self.runs.run_waits.waiting.insert(req, task.clone());
        self.count_for_wait(req, task);
    }

    fn count_for_wait(&mut self, req: ReqId, task: String) {
        if self.runs.run_waits.counting.insert(req) {
            self.runs_elsewhere(req, task);
        } else {
            self.runs.run_waits.again.insert(req);
        }
    }

    /// An answer on its way out: a wait's count is kept back unless it says "none live" (or
    /// failed), which answers the wait.
    pub(super) fn waited_answer(&mut self, req: ReqId, answer: Answer) {
        if !self.runs.run_waits.counting.remove(&req) {
            self.io.out.push_back(Output::Answer { req, answer });
            return;
        }
        if matches!(answer, Ok(Answered::Count(0)) | Err(_)) {
            self.runs.run_waits.again.remove(&req);
        }
        match answer {
            Ok(Answered::Count(0)) => {
                self.runs.run_waits.waiting.remove(&req);
                self.io.out.push_back(Output::Answer {
                    req,
                    answer: Ok(Answered::Done),
                });
            }
            Ok(_) => {
                if self.runs.run_waits.again.remove(&req)
                    && let Some(task) = self.runs.run_waits.waiting.get(&req).cloned()
                {
                    self.count_for_wait(req, task);
                }
            }
            Err(error) => {
                self.runs.run_waits.waiting.remove(&req);
                self.io.out.push_back(Output::Answer {
                    req,
                    answer: Err(error),
                });
            }
        }
    }

    /// A watch event under `tasks/`: a deleted run znode counts the task's waits again.
    /// Returns whether the path was a task's.
    pub(super) fn on_task_event(&mut self, path: &str, kind: WatchKind) -> bool {
        let Some(rest) = path.strip_prefix(&format!("{}/", self.paths.tasks())) else {
            return false;
        };
        let Some((task, child)) = rest.split_once('/') else {
            return true;
        };
        if kind == WatchKind::Deleted && child.starts_with("run-") {
            self.recount_waits(|t| t == task);
        }
        true
    }

    /// Counts again every wait whose task `which` selects.
    pub(super) fn recount_waits(&mut self, which: impl Fn(&str) -> bool) {
        let waits: Vec<(ReqId, String)> = self
            .runs
            .run_waits
            .waiting
            .iter()
            .filter(|(_, task)| which(task))
            .map(|(req, task)| (*req, task.clone()))
            .collect();
        for (req, task) in waits {
            self.count_for_wait(req, task);
        }
    }

    /// The session ended: every wait is answered with an error, and no task is watched.
    pub(super) fn end_waits(&mut self) {
        let waits = std::mem::take(&mut self.runs.run_waits);
        for req in waits.waiting.into_keys() {
            self.io.out.push_back(Output::Answer {
                req,
                answer: Err(CoordError::SessionEnded {
                    context: "waiting for live runs to end",
                }),
            });
        }
    }
}
