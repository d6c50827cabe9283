//! The end of a pooled task's run on this node: one multi-op deletes the run znode of every
//! unit the run's claim named and stores the run's result in each unit (where it is not older
//! than the stored one), retried as a task's result is, and for a success creates in the same
//! multi-op one chained run's request per item and task that runs after it (`after`); the
//! history gets one entry for the node's run, naming its items, in the history of its first
//! item's unit.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::PoolStep;
use super::io::{Answered, Level, ReqId, ZkFail, ZkOk, ZkOp};
use super::mark::{PauseNote, PauseStored};
use super::{Node, Then, Timer};
use crate::coord::records::{FORMAT_VERSION, HistoryEntry, ResultRecord};
use crate::coord::{CoordError, RunResult, lease, record};

/// Attempts at recording a pooled run's end before it is given up.
const POOL_END_ATTEMPTS: u32 = 5;

/// Recording the end of a pooled task's run: the units its claim named.
#[derive(Debug)]
pub(crate) struct PoolEnd {
    req: ReqId,
    task: String,
    result: RunResult,
    units: Vec<String>,
    /// The creates of the chained runs' requests (one per item and chained task), written
    /// with the results; emptied once an attempt finds them made.
    chain: Vec<ZkOp>,
    /// Each unit's stored result as read: its tick, and its znode version (`None`: absent).
    stored: BTreeMap<String, (Option<DateTime<Utc>>, Option<i32>)>,
    outstanding: usize,
    attempts: u32,
    delay: Duration,
    /// The failed run's pause was found stored (`pause_on_failure`): the writes check that it
    /// is still there instead of creating it.
    pause_found: bool,
}

impl PoolEnd {
    /// How the next write carries the failed run's pause.
    fn pause(&self) -> PauseStored {
        if self.pause_found {
            PauseStored::Found
        } else {
            PauseStored::Created
        }
    }
}

impl Node {
    /// Records the end of the pooled `task`'s run `result`, on the units its claim named.
    pub(super) fn pool_run_ended(&mut self, req: ReqId, task: String, mut result: RunResult) {
        let Some(units) = self.pool.runs.remove(&(task.clone(), result.tick)) else {
            // No claim of this node names the tick (its session went before the claim was
            // answered): nothing of it is stored.
            self.report(Level::Debug, "a pooled run ended that no claim here names")
                .field("task", &task)
                .field("tick", result.tick);
            return self.answer(req, Ok(Answered::Done));
        };
        // The items are the ones the claim named: the chained runs' requests are per item.
        result.items = units
            .iter()
            .filter_map(|unit| Some(lease::split_unit(unit)?.1.to_string()))
            .collect();
        let chain = self.chain_creates(&task, &result);
        let end = PoolEnd {
            req,
            task,
            result,
            units,
            chain,
            stored: BTreeMap::new(),
            outstanding: 0,
            attempts: 0,
            delay: Duration::from_millis(100),
            pause_found: false,
        };
        self.pool_end_attempt(end);
    }

    /// One attempt: reads the stored results this node does not know, then writes.
    pub(super) fn pool_end_attempt(&mut self, mut end: PoolEnd) {
        if self.life.session.is_none() {
            let error = CoordError::NotConnected {
                context: "recording the run result",
            };
            return self.pool_end_failed(end, error);
        }
        end.stored.clear();
        let mut missing = Vec::new();
        for unit in &end.units {
            match self.tasks.get(unit).and_then(|s| s.result) {
                Some((tick, version)) => {
                    end.stored.insert(unit.clone(), (Some(tick), Some(version)));
                }
                None => missing.push(unit.clone()),
            }
        }
        end.outstanding = missing.len();
        let req = end.req;
        self.pool.ends.insert(req, end);
        for unit in missing {
            let path = self.paths.result(&unit);
            self.call(
                ZkOp::GetData { path },
                PoolStep::PoolResultRead { req, unit },
            );
        }
        self.pool_end_read(req);
    }

    pub(super) fn on_pool_result_read(
        &mut self,
        req: ReqId,
        unit: String,
        result: Result<ZkOk, ZkFail>,
    ) {
        let Some(end) = self.pool.ends.get_mut(&req) else {
            return;
        };
        end.outstanding = end.outstanding.saturating_sub(1);
        match result {
            Ok(ZkOk::Data(bytes, stat)) => {
                let tick = serde_json::from_slice::<ResultRecord>(&bytes)
                    .ok()
                    .map(|r| r.result.tick);
                end.stored.insert(unit, (tick, Some(stat.version)));
            }
            Ok(_) | Err(ZkFail::NoNode) => {
                end.stored.insert(unit, (None, None));
            }
            // Left out of `stored`: the attempt fails once every read is answered.
            Err(_) => {}
        }
        self.pool_end_read(req);
    }

    /// Every read of the attempt `req` is answered: the write.
    fn pool_end_read(&mut self, req: ReqId) {
        if self
            .pool
            .ends
            .get(&req)
            .is_none_or(|end| end.outstanding > 0)
        {
            return;
        }
        let end = self.pool.ends.remove(&req).expect("present");
        if end.stored.len() < end.units.len() {
            let error = CoordError::ZooKeeper {
                context: "reading the last result".into(),
                message: "a unit's result could not be read".into(),
            };
            return self.pool_end_failed(end, error);
        }
        let data = serde_json::to_vec(&ResultRecord {
            format: FORMAT_VERSION,
            result: end.result.clone(),
        })
        .expect("serializes");
        let mut ops = Vec::new();
        for unit in &end.units {
            let run_path = self.paths.run(unit, end.result.tick);
            if self.runs.own_runs.contains(&run_path) {
                ops.push(ZkOp::Delete {
                    path: run_path,
                    version: None,
                });
            }
            let (tick, version) = end.stored[unit];
            if record::supersedes(tick, end.result.tick) {
                let path = self.paths.result(unit);
                ops.push(self.put_record(path, data.clone(), version));
            }
        }
        // The chained runs' requests go with the results: a stored success always has them.
        ops.extend(end.chain.iter().cloned());
        if !self.cfg.bugs.pause_apart {
            // A failed run's pause goes with its end: created, or checked to be there still.
            ops.extend(self.pause_op(&end.task, &end.result, end.pause()));
        }
        if ops.is_empty() {
            return self.pool_end_done(end);
        }
        self.call(
            ZkOp::Multi(ops.clone()),
            PoolStep::PoolResultWrite {
                end: Box::new(end),
                ops,
            },
        );
    }

    pub(super) fn on_pool_result_write(
        &mut self,
        mut end: PoolEnd,
        ops: Vec<ZkOp>,
        result: Result<ZkOk, ZkFail>,
    ) {
        match result {
            Ok(ZkOk::Multi(results)) => {
                for (op, result) in ops.iter().zip(&results) {
                    let version = match result {
                        ZkOk::Stat(stat) => stat.version,
                        ZkOk::Created(_) => 0,
                        _ => continue,
                    };
                    if let ZkOp::SetData { path, .. } | ZkOp::Create { path, .. } = op
                        && let Some(unit) = self.unit_of_result(&end, path)
                    {
                        self.tasks.state_mut(&unit).result = Some((end.result.tick, version));
                    }
                }
                self.pool_end_done(end);
            }
            Err(ZkFail::Multi { index, error })
                if *error == ZkFail::NodeExists && end.chain.contains(&ops[index]) =>
            {
                // A chained run's request exists: an earlier attempt of this write, whose
                // answer was lost, made them all. Write the rest without them.
                self.report(Level::Debug, "the chained runs were requested already")
                    .field("task", &end.task);
                end.chain.clear();
                self.pool_end_attempt(end);
            }
            Err(ZkFail::Multi { index, error })
                if let Some(stored) = self.pause_retry(&ops[index], &error) =>
            {
                self.pool_pause_again(end, stored);
            }
            Err(ZkFail::Multi { index, error }) => {
                match &ops[index] {
                    // The run znode went with an ended session: the rest without it.
                    ZkOp::Delete { path, .. } => {
                        self.runs.own_runs.remove(path);
                    }
                    ZkOp::SetData { path, .. } | ZkOp::Create { path, .. } => {
                        if let Some(unit) = self.unit_of_result(&end, path) {
                            self.forget_pool_result(&unit);
                        }
                    }
                    _ => {}
                }
                let error = CoordError::ZooKeeper {
                    context: "recording the run result".into(),
                    message: error.to_string(),
                };
                self.pool_end_failed(end, error);
            }
            other => {
                for unit in &end.units {
                    self.forget_pool_result(unit);
                }
                let message = match other {
                    Err(error) => error.to_string(),
                    Ok(_) => "unexpected answer".into(),
                };
                let error = CoordError::ZooKeeper {
                    context: "recording the run result".into(),
                    message,
                };
                self.pool_end_failed(end, error);
            }
        }
    }

    /// The pause op of `end`'s write failed: a mark found there (the task is paused already)
    /// stays and is checked to be there with the rest, at once; a check that found the mark
    /// gone (a resume landed since an attempt found it) creates it again with the failure,
    /// after a delay (the attempts are bounded).
    fn pool_pause_again(&mut self, mut end: PoolEnd, stored: PauseStored) {
        end.pause_found = stored == PauseStored::Found;
        if end.pause_found {
            return self.pool_end_attempt(end);
        }
        let error = CoordError::ZooKeeper {
            context: "recording the run result".into(),
            message: "the task was resumed since its mark was found".into(),
        };
        self.pool_end_failed(end, error);
    }

    /// The unit of `end` whose result znode is `path`.
    fn unit_of_result(&self, end: &PoolEnd, path: &str) -> Option<String> {
        end.units
            .iter()
            .find(|unit| self.paths.result(unit) == path)
            .cloned()
    }

    fn forget_pool_result(&mut self, unit: &str) {
        if let Some(state) = self.tasks.get_mut(unit) {
            state.result = None;
        }
    }

    /// An attempt failed: tried again after a growing delay, [`POOL_END_ATTEMPTS`] in all.
    fn pool_end_failed(&mut self, mut end: PoolEnd, error: CoordError) {
        end.attempts += 1;
        if end.attempts >= POOL_END_ATTEMPTS {
            for unit in &end.units {
                self.runs
                    .own_runs
                    .remove(&self.paths.run(unit, end.result.tick));
            }
            return self.answer(end.req, Err(error));
        }
        let at = self.io.now.mono + end.delay;
        end.delay *= 2;
        self.at(at, Timer::PoolEnded(end));
    }

    /// A session ended with the attempt of `req` reading.
    pub(super) fn abort_pool_end(&mut self, req: ReqId) {
        if let Some(end) = self.pool.ends.remove(&req) {
            let error = CoordError::SessionEnded {
                context: "recording the run result",
            };
            self.pool_end_failed(end, error);
        }
    }

    /// A session ended with the write of `end` in flight.
    pub(super) fn abort_pool_write(&mut self, end: PoolEnd) {
        let error = CoordError::SessionEnded {
            context: "recording the run result",
        };
        self.pool_end_failed(end, error);
    }

    /// The end is stored: answered, and the node's run appended to its first unit's history
    /// (after the answer: firing never waits for the history).
    fn pool_end_done(&mut self, end: PoolEnd) {
        for unit in &end.units {
            self.runs
                .own_runs
                .remove(&self.paths.run(unit, end.result.tick));
        }
        let stored = end.pause();
        match self.pause_create(&end.task, &end.result) {
            Some(pause) if self.cfg.bugs.pause_apart && !end.pause_found => {
                // The bug the simulation shows: the pause in a call of its own, after the end.
                self.call(pause, Then::Ignore);
            }
            _ => self.report_pause(PauseNote::of(&end.task, &end.result).as_ref(), stored),
        }
        self.answer(end.req, Ok(Answered::Done));
        let mut entry = HistoryEntry::of_run(&end.task, &end.result, &self.cfg.release.to_string());
        entry.items = Some(end.result.items.clone());
        let first = end.units[0].clone();
        self.append_history(first, entry, None);
    }
}
