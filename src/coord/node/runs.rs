//! Live runs, results, and leaving the cluster.
//!
//! A run is live while its ephemeral `run-<unix>` znode exists and is owned by a session seen
//! as a member, or by the session the task's fire record names as its claimer (only a fenced
//! claim writes the record; its member znode may be gone meanwhile). An ephemeral of another
//! session counts for the session timeout (and a margin) from when it is first seen: a node
//! whose member znode was deleted registers again or loses its session by then. After that, and
//! at once for a persistent one, it is ignored and reported, so that a stranger's run znode
//! cannot make `overlap = "skip"` skip every tick.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::TaskStep;
use super::io::{Answered, Level, ReqId, Stat, ZkFail, ZkOk, ZkOp};
use super::mark::{PauseNote, PauseStored};
use super::report::foreign_owner;
use super::{Node, RELEASE_BATCH, Then, Timer};
use crate::coord::records::{FORMAT_VERSION, FireRecord, HistoryEntry, ResultRecord};
use crate::coord::{CoordError, RunResult, record};

/// Runs: this session's live run znodes, the withheld ones, and the counts and waits on
/// other nodes' runs.
#[derive(Debug, Default)]
pub(super) struct Runs {
    /// The run znodes this session created and has not deleted (its live runs), by path.
    pub(super) own_runs: BTreeSet<String>,
    /// The run znodes of claims withheld because the task's pause arrived, whose delete is not
    /// confirmed yet: sent again on reconnecting within the session, so that no run znode of
    /// this live session is left to count as a live run.
    pub(super) withheld_runs: BTreeSet<String>,
    /// Counts of other nodes' live runs in flight, by request.
    pub(super) runs_counts: BTreeMap<ReqId, RunsCount>,
    /// Requests waiting for the end of runs on other nodes.
    pub(super) run_waits: super::waits::RunWaits,
}

/// Beyond the session timeout, how long a run znode of an unknown session counts as live: time
/// for a connected node whose member znode was deleted to register again.
const RUN_GRACE_MARGIN: Duration = Duration::from_secs(5);

/// A count of foreign live runs in flight.
#[derive(Debug)]
pub(crate) struct RunsCount {
    task: String,
    incarnation: Option<i32>,
    outstanding: usize,
    count: usize,
    /// The first owner check that failed (not `NoNode`): the count is then unknown.
    failed: Option<ZkFail>,
}

/// Recording a run's end, with its retries.
#[derive(Debug)]
pub(crate) struct RunEndedJob {
    req: ReqId,
    pub(super) task: String,
    pub(super) result: RunResult,
    pub(super) run_path: String,
    attempts: u32,
    delay: Duration,
    /// Writes that found the stored result changed, in this attempt.
    conflicts: u32,
    last_error: Option<CoordError>,
    existing: Option<(Option<DateTime<Utc>>, i32)>,
    /// The creates of the chained runs' requests (`after`), or of a failed run's pause
    /// (`pause_on_failure`), sent in the multi-op that stores the result; emptied once found
    /// made (by an earlier attempt, or a pause by anyone).
    chain: Vec<ZkOp>,
}

/// `release_all` in flight.
#[derive(Debug)]
pub(crate) struct ReleaseAllJob {
    req: ReqId,
    /// The held leases, once the claims in flight on them are done; `None` while waiting.
    started: bool,
    leases: Vec<(String, i32)>,
    outstanding: usize,
    since: Duration,
}

/// Whether `record` names the session `owner` as the claimer of its tick. Only a claim writes
/// the record, fenced by the task's lease, and it creates the tick's run znode in the same
/// multi-op: that session is a zkcron node's, so its ephemeral run znodes are its live runs,
/// whether or not its member znode is there. Someone else's ephemeral would have to write the
/// fire record too.
pub(super) fn names_claimer(record: &FireRecord, owner: i64) -> bool {
    owner != 0 && record.tick.is_some() && record.session == format!("{owner:x}")
}

/// The stored result in a reply to `GetData(result)`.
pub(super) fn decode_result(result: Result<ZkOk, ZkFail>) -> Result<Option<RunResult>, CoordError> {
    match result {
        Ok(ZkOk::Data(data, _)) => Ok(serde_json::from_slice::<ResultRecord>(&data)
            .ok()
            .map(|r| r.result)),
        Ok(_) | Err(ZkFail::NoNode) => Ok(None),
        Err(error) => Err(CoordError::ZooKeeper {
            context: "reading the last result".into(),
            message: error.to_string(),
        }),
    }
}

impl Node {
    pub(super) fn runs_elsewhere(&mut self, req: ReqId, task: String) {
        if self.life.session.is_none() {
            return self.answer(
                req,
                Err(CoordError::NotConnected {
                    context: "listing live runs",
                }),
            );
        }
        // Read before the listing: a run another node created before this take shows in it.
        let incarnation = self.tasks.held(&task);
        if incarnation.is_some()
            && incarnation == self.tasks.get(&task).and_then(|s| s.no_foreign_runs)
        {
            return self.answer(req, Ok(Answered::Count(0)));
        }
        let path = self.paths.record(&task);
        self.call(
            ZkOp::GetChildren { path },
            TaskStep::RunsList {
                req,
                task,
                incarnation,
            },
        );
    }

    pub(super) fn on_runs_list(
        &mut self,
        req: ReqId,
        task: String,
        incarnation: Option<i32>,
        result: Result<ZkOk, ZkFail>,
    ) {
        let children = match result {
            Ok(ZkOk::Children(children)) => children,
            Ok(_) | Err(ZkFail::NoNode) => Vec::new(),
            Err(error) => {
                return self.answer(
                    req,
                    Err(CoordError::ZooKeeper {
                        context: "listing live runs".into(),
                        message: error.to_string(),
                    }),
                );
            }
        };
        let prefix = format!("{}/", self.paths.record(&task));
        // Forget the runs of unknown sessions of this task that are gone.
        self.view.unknown_runs.retain(|path, _| {
            path.strip_prefix(&prefix)
                .is_none_or(|child| children.iter().any(|c| c == child))
        });
        let foreign: Vec<String> = children
            .iter()
            .filter(|c| c.starts_with("run-"))
            .map(|c| format!("{prefix}{c}"))
            .filter(|path| !self.runs.own_runs.contains(path))
            .collect();
        if foreign.is_empty() {
            if let Some(epoch) = incarnation {
                self.tasks.state_mut(&task).no_foreign_runs = Some(epoch);
            }
            return self.answer(req, Ok(Answered::Count(0)));
        }
        // Each must be a live member's ephemeral to count.
        self.runs.runs_counts.insert(
            req,
            RunsCount {
                task,
                incarnation,
                outstanding: foreign.len(),
                count: 0,
                failed: None,
            },
        );
        for path in foreign {
            self.call(
                ZkOp::Exists { path: path.clone() },
                TaskStep::RunOwner { req, path },
            );
        }
    }

    pub(super) fn on_run_owner(&mut self, req: ReqId, path: String, result: Result<ZkOk, ZkFail>) {
        let live = match &result {
            Ok(ZkOk::Exists(Some(stat))) if self.live_run_owner(stat.ephemeral_owner) => true,
            Ok(ZkOk::Exists(Some(stat))) if stat.ephemeral_owner != 0 => {
                // An ephemeral of a session this node never saw as a member: it may still be
                // the run of the claimer the fire record names (its member znode deleted by
                // someone, and not registered again yet).
                let Some(task) = self.runs.runs_counts.get(&req).map(|c| c.task.clone()) else {
                    return;
                };
                let path_read = self.paths.record(&task);
                let stat = *stat;
                self.call(
                    ZkOp::GetData { path: path_read },
                    TaskStep::RunClaimer { req, path, stat },
                );
                return;
            }
            Ok(ZkOk::Exists(Some(stat))) => {
                self.report_foreign_run(&path, stat);
                false
            }
            _ => false,
        };
        let failed = result.err().filter(|error| *error != ZkFail::NoNode);
        self.run_counted(req, live, failed);
    }

    /// The fire record read for a run znode of a session never seen as a member: the run is
    /// live if the record names that session as its claimer (of this tick, or of a later one
    /// it skipped while this run went on).
    pub(super) fn on_run_claimer(
        &mut self,
        req: ReqId,
        path: String,
        stat: Stat,
        result: Result<ZkOk, ZkFail>,
    ) {
        if !self.runs.runs_counts.contains_key(&req) {
            return;
        }
        let record = match result {
            Ok(ZkOk::Data(data, _)) => serde_json::from_slice::<FireRecord>(&data).ok(),
            Ok(_) | Err(ZkFail::NoNode) => None,
            Err(error) => return self.run_counted(req, false, Some(error)),
        };
        let owner = stat.ephemeral_owner;
        let live = if record.is_some_and(|record| names_claimer(&record, owner)) {
            self.view.claimer_sessions.insert(owner);
            true
        } else if self.unknown_run_in_grace(&path, stat.czxid) {
            true
        } else {
            self.report_foreign_run(&path, &stat);
            false
        };
        self.run_counted(req, live, None);
    }

    /// Whether the run znode `path` (created at `czxid`) of a session that is neither a
    /// member's nor named by the fire record was first seen less than [`Node::run_grace`] ago.
    fn unknown_run_in_grace(&mut self, path: &str, czxid: i64) -> bool {
        let now = self.io.now.mono;
        let first = match self.view.unknown_runs.get(path) {
            Some(&(seen, since)) if seen == czxid => since,
            _ => {
                self.view
                    .unknown_runs
                    .insert(path.to_string(), (czxid, now));
                now
            }
        };
        now < first + self.run_grace()
    }

    /// How long a run znode of a session never seen as a member nor named by the fire record
    /// counts as live: that of a zkcron node whose member znode someone deleted (and whose
    /// claim the record no longer names) goes with its session within the session timeout if
    /// the node is cut off, and is trusted once it registers again if it is not.
    fn run_grace(&self) -> Duration {
        let timeout = self
            .life
            .session
            .as_ref()
            .map_or(self.cfg.session_timeout, |s| s.timeout);
        timeout + RUN_GRACE_MARGIN
    }

    /// Reports, once, a run znode that no live zkcron node wrote.
    fn report_foreign_run(&mut self, path: &str, stat: &Stat) {
        let owner = foreign_owner(stat.ephemeral_owner);
        self.report_once(
            format!("foreign run {path} {}", stat.czxid),
            Level::Error,
            format!(
                "ignoring the run record {path}: no live zkcron node wrote it ({owner}); it does not count as a live run for overlap = \"skip\". Remove it: {cli} delete {path}", cli = self.zk_cli()
            ),
        );
    }

    /// One run znode of the count `req` judged (`failed`: its owner could not be checked);
    /// answers once all are.
    fn run_counted(&mut self, req: ReqId, live: bool, failed: Option<ZkFail>) {
        let Some(count) = self.runs.runs_counts.get_mut(&req) else {
            return;
        };
        count.outstanding -= 1;
        count.count += usize::from(live);
        if let Some(error) = failed {
            count.failed.get_or_insert(error);
        }
        if count.outstanding > 0 {
            return;
        }
        let count = self.runs.runs_counts.remove(&req).expect("present");
        // A run whose owner could not be checked may be live: the count fails (the firing
        // rules assume none, this time) and "no foreign runs" is not remembered, or every
        // later count would skip the listing while that run goes on.
        if let Some(error) = count.failed {
            return self.answer(
                req,
                Err(CoordError::ZooKeeper {
                    context: "checking a live run's owner".into(),
                    message: error.to_string(),
                }),
            );
        }
        if let (0, Some(epoch)) = (count.count, count.incarnation) {
            self.tasks.state_mut(&count.task).no_foreign_runs = Some(epoch);
        }
        self.answer(req, Ok(Answered::Count(count.count)));
    }

    pub(super) fn last_result(&mut self, req: ReqId, task: String) {
        if self.life.session.is_none() {
            return self.answer(
                req,
                Err(CoordError::NotConnected {
                    context: "reading the last result",
                }),
            );
        }
        let path = self.paths.result(&task);
        self.call(ZkOp::GetData { path }, TaskStep::LastResult { req });
    }

    pub(super) fn on_last_result(&mut self, req: ReqId, result: Result<ZkOk, ZkFail>) {
        let answer = decode_result(result).map(|r| Answered::Result(r.map(Box::new)));
        self.answer(req, answer);
    }

    // ---- results ----

    pub(super) fn run_ended(&mut self, req: ReqId, task: String, result: RunResult) {
        let release = self.cfg.release.to_string();
        let mut chain = self.chain_creates(&task, &result);
        if !self.cfg.bugs.pause_apart {
            // A failed run's pause goes with its end (a failed run requests no chained runs).
            chain.extend(self.pause_create(&task, &result));
        }
        if result.manual {
            // A manual run has no fire record, run znode or `result`: its end goes to its
            // trigger, after the history.
            let mut end = super::request_end::End::new(req, &task, &result, &release);
            end.chain = chain;
            end.pause = PauseNote::of(self.task_of(&task), &result);
            end.pause_create = self.pause_create(&task, &result);
            let entry = HistoryEntry::of_run(&task, &result, &release);
            // A task that runs on every node has no history of its own: its units have.
            let history = self.unit_of(&task).into_owned();
            return self.append_history(history, entry, Some(end));
        }
        let run_path = self.paths.run(&task, result.tick);
        let job = RunEndedJob {
            req,
            task,
            result,
            run_path,
            attempts: 0,
            delay: Duration::from_millis(100),
            conflicts: 0,
            last_error: None,
            existing: None,
            chain,
        };
        if self.holds_for_queued_claim(&job) {
            return self.hold_result(job);
        }
        self.run_ended_attempt(job);
    }

    /// One attempt: deletes the run znode and writes the result (only if it is not older than
    /// the stored one), in one multi-op. The stored result's tick and version come from the
    /// task's state when this node knows them, so that the run's end is visible to other nodes
    /// after one round trip.
    pub(super) fn run_ended_attempt(&mut self, mut job: RunEndedJob) {
        if self.life.session.is_none() {
            return self.run_ended_failed(
                job,
                CoordError::NotConnected {
                    context: "recording the run result",
                },
            );
        }
        job.conflicts = 0;
        self.write_result(job);
    }

    fn write_result(&mut self, mut job: RunEndedJob) {
        if self.knows_stored_result(&mut job) {
            return self.send_result(job);
        }
        let path = self.paths.result(&job.task);
        self.call(
            ZkOp::GetData { path },
            TaskStep::ResultRead { job: Box::new(job) },
        );
    }

    /// Sets the stored result `job` writes over from the task's state, if this node knows it.
    pub(super) fn knows_stored_result(&self, job: &mut RunEndedJob) -> bool {
        let Some((tick, version)) = self.tasks.get(&job.task).and_then(|s| s.result) else {
            return false;
        };
        job.existing = Some((Some(tick), version));
        true
    }

    pub(super) fn on_result_read(&mut self, mut job: RunEndedJob, result: Result<ZkOk, ZkFail>) {
        match result {
            Ok(ZkOk::Data(bytes, stat)) => {
                let tick = serde_json::from_slice::<ResultRecord>(&bytes)
                    .ok()
                    .map(|r| r.result.tick);
                job.existing = Some((tick, stat.version));
            }
            Ok(_) | Err(ZkFail::NoNode) => job.existing = None,
            Err(error) => {
                return self.run_ended_failed(
                    job,
                    CoordError::ZooKeeper {
                        context: "reading the last result".into(),
                        message: error.to_string(),
                    },
                );
            }
        }
        self.send_result(job);
    }

    fn send_result(&mut self, job: RunEndedJob) {
        let Some((ops, run_live, newer)) = self.result_ops(&job) else {
            return self.run_ended_done(job);
        };
        self.call(
            ZkOp::Multi(ops),
            TaskStep::ResultWrite {
                job: Box::new(job),
                run_live,
                newer,
            },
        );
    }

    /// The ops that record the end of `job`: the run znode's delete if it is live, the result
    /// if it is newer than the stored one, the chained runs' requests; with whether the first
    /// two are there. `None` if there is nothing to write.
    pub(super) fn result_ops(&self, job: &RunEndedJob) -> Option<(Vec<ZkOp>, bool, bool)> {
        let stored = job.existing.and_then(|(tick, _)| tick);
        let newer = record::supersedes(stored, job.result.tick);
        // Our run znode exists while its path is in `own_runs`: the set is emptied when the
        // session (and with it the ephemeral) goes. No read needed.
        let run_live = self.runs.own_runs.contains(&job.run_path);
        let apart = self.cfg.bugs.chain_request_apart;
        if !run_live && !newer && (job.chain.is_empty() || apart) {
            return None;
        }
        let mut ops = Vec::with_capacity(2 + job.chain.len());
        if run_live {
            ops.push(ZkOp::Delete {
                path: job.run_path.clone(),
                version: None,
            });
        }
        if newer {
            let data = serde_json::to_vec(&ResultRecord {
                format: FORMAT_VERSION,
                result: job.result.clone(),
            })
            .expect("serializes");
            let path = self.paths.result(&job.task);
            ops.push(self.put_record(path, data, job.existing.map(|(_, version)| version)));
        }
        if !apart {
            // The chained runs' requests go with the result: a stored success always has them.
            ops.extend(job.chain.iter().cloned());
        }
        Some((ops, run_live, newer))
    }

    pub(super) fn on_result_write(
        &mut self,
        job: RunEndedJob,
        run_live: bool,
        newer: bool,
        result: Result<ZkOk, ZkFail>,
    ) {
        let result_index = usize::from(run_live);
        let chain_index = result_index + usize::from(newer);
        match result {
            Ok(ZkOk::Multi(results)) => {
                let version = match results.get(result_index) {
                    Some(ZkOk::Stat(stat)) => Some(stat.version),
                    Some(ZkOk::Created(_)) => Some(0),
                    _ => None,
                };
                if let (Some(version), true) = (version, newer) {
                    self.tasks.state_mut(&job.task).result = Some((job.result.tick, version));
                }
                self.run_ended_done(job);
            }
            Err(ZkFail::Multi { index: 0, error }) if run_live && *error == ZkFail::NoNode => {
                // The session that owned the run znode ended before it was forgotten: retry
                // with the result alone.
                self.runs.own_runs.remove(&job.run_path);
                self.run_ended_failed(
                    job,
                    CoordError::ZooKeeper {
                        context: "recording the run result".into(),
                        message: "the run record was already gone".into(),
                    },
                );
            }
            Err(ZkFail::Multi { index, error })
                if let Some(stored) = index
                    .checked_sub(chain_index)
                    .and_then(|at| job.chain.get(at))
                    .and_then(|op| self.pause_retry(op, &error)) =>
            {
                self.write_pause_again(job, stored);
            }
            Err(ZkFail::Multi { index, error })
                if index >= chain_index && *error == ZkFail::NodeExists =>
            {
                self.write_without_chain(job);
            }
            Err(ZkFail::Multi { index, error }) if newer && index == result_index => {
                self.result_changed(job, &error);
            }
            other => {
                self.forget_result(&job.task);
                let message = match other {
                    Err(error) => error.to_string(),
                    Ok(_) => "unexpected answer".into(),
                };
                self.run_ended_failed(
                    job,
                    CoordError::ZooKeeper {
                        context: "recording the run result".into(),
                        message,
                    },
                );
            }
        }
    }

    /// Someone else wrote a result since this node last saw it: read it and decide again
    /// (twice at most).
    fn result_changed(&mut self, mut job: RunEndedJob, error: &ZkFail) {
        self.report(Level::Debug, "the stored result changed; re-reading it")
            .field("task", &job.task)
            .field("source", error);
        self.forget_result(&job.task);
        job.conflicts += 1;
        if job.conflicts >= 2 {
            return self.run_ended_failed(
                job,
                CoordError::ZooKeeper {
                    context: "recording the run result".into(),
                    message: "the stored result kept changing".into(),
                },
            );
        }
        self.write_result(job);
    }

    /// A create that goes with the result exists: a chained run's request, made with the
    /// others by an earlier attempt of this write whose answer was lost. Writes the rest
    /// without them.
    fn write_without_chain(&mut self, mut job: RunEndedJob) {
        self.report(Level::Debug, "the chained runs were requested already")
            .field("task", &job.task);
        job.chain.clear();
        self.write_result(job);
    }

    /// The pause op of `job`'s write failed (`stored` says how to send it again): a mark found
    /// there is checked to be there still with the result (at once); a mark gone since (a
    /// resume landed between two attempts) is created again with it, after a delay (the
    /// attempts are bounded).
    fn write_pause_again(&mut self, mut job: RunEndedJob, stored: PauseStored) {
        let create = self
            .pause_create(&job.task, &job.result)
            .expect("a failed run's");
        self.replace_pause_op(&mut job.chain, &create, stored);
        if stored == PauseStored::Found {
            return self.write_result(job);
        }
        let error = CoordError::ZooKeeper {
            context: "recording the run result".into(),
            message: "the task was resumed since its mark was found".into(),
        };
        self.run_ended_failed(job, error);
    }

    pub(super) fn run_ended_done(&mut self, job: RunEndedJob) {
        self.runs.own_runs.remove(&job.run_path);
        if self.cfg.bugs.chain_request_apart && !job.chain.is_empty() {
            self.call(ZkOp::Multi(job.chain.clone()), Then::Ignore);
        }
        let note = PauseNote::of(self.task_of(&job.task), &job.result);
        if let (Some(pause), true) = (
            self.pause_create(&job.task, &job.result),
            self.cfg.bugs.pause_apart,
        ) {
            // The bug the simulation shows: the pause in a call of its own, after the end.
            self.call(pause, Then::Ignore);
        } else {
            let stored = self.pause_stored_by(&job.chain);
            self.report_pause(note.as_ref(), stored);
        }
        self.answer(job.req, Ok(Answered::Done));
        // After the result, without holding up the answer (firing never waits for it).
        // A unit's run is its task's: the fire id names the task.
        let task = self.task_of(&job.task);
        let entry = HistoryEntry::of_run(task, &job.result, &self.cfg.release.to_string());
        self.append_history(job.task, entry, None);
    }

    /// An attempt failed: retry after a growing delay, five attempts in all.
    pub(super) fn run_ended_failed(&mut self, mut job: RunEndedJob, error: CoordError) {
        job.attempts += 1;
        job.last_error = Some(error);
        if job.attempts >= 5 {
            self.runs.own_runs.remove(&job.run_path);
            let error = job.last_error.take().unwrap_or(CoordError::NotConnected {
                context: "recording the run result",
            });
            return self.answer(job.req, Err(error));
        }
        let at = self.io.now.mono + job.delay;
        job.delay *= 2;
        self.at(at, Timer::RunEnded(job));
    }

    /// Forgets the stored result of `task` as last seen: the next run's end reads it again.
    fn forget_result(&mut self, task: &str) {
        if let Some(state) = self.tasks.get_mut(task) {
            state.result = None;
        }
    }

    // ---- leaving ----

    /// Gives up all leadership at once: nothing fires from here on; after the claims in
    /// flight, the member znode and every lease go in a few multi-ops.
    pub(super) fn start_release_all(&mut self, req: ReqId) {
        self.life.stopping = true;
        let leases: Vec<(String, i32)> = self
            .tasks
            .held_leases()
            .map(|(t, e)| (t.clone(), e))
            .collect();
        self.publish();
        self.life.release_all = Some(ReleaseAllJob {
            req,
            started: false,
            leases,
            outstanding: 0,
            since: self.io.now.mono,
        });
        self.maybe_release_all();
    }

    /// Starts the release once no claim is in flight on a held task.
    pub(super) fn maybe_release_all(&mut self) {
        let Some(job) = &self.life.release_all else {
            return;
        };
        if job.started
            || job
                .leases
                .iter()
                .any(|(t, _)| self.tasks.get(t).is_some_and(|s| !s.jobs.is_empty()))
        {
            return;
        }
        let mut job = self.life.release_all.take().expect("present");
        job.started = true;
        self.tasks.unhold_all();
        if self.life.session.is_none() {
            self.answer(job.req, Ok(Answered::Done));
            return;
        }
        // Leave the membership first, in the same multi as the first leases, so the
        // next-ranked nodes are designated the moment the leases go. Each lease goes only if
        // it is still this node's incarnation (its epoch version), as in a single release.
        let mut groups = vec![vec![ZkOp::Delete {
            path: self.paths.member(&self.cfg.id),
            version: None,
        }]];
        for (task, epoch) in &job.leases {
            groups.push(vec![
                ZkOp::Check {
                    path: self.paths.epoch(task),
                    version: *epoch,
                },
                ZkOp::Delete {
                    path: self.paths.lease(task),
                    version: None,
                },
            ]);
        }
        for batch in groups.chunks(RELEASE_BATCH / 2) {
            job.outstanding += 1;
            let ops = batch.iter().flatten().cloned().collect();
            self.call(
                ZkOp::Multi(ops),
                TaskStep::ReleaseBatch {
                    batch: batch.to_vec(),
                },
            );
        }
        self.life.release_all = Some(job);
    }

    pub(super) fn on_release_batch(&mut self, batch: Vec<Vec<ZkOp>>, result: Result<ZkOk, ZkFail>) {
        if let Err(error) = result {
            // A missing znode fails the whole batch: delete one by one instead.
            self.report(
                Level::Debug,
                format!("batch release failed ({error}); releasing one by one"),
            );
            if let Some(job) = self.life.release_all.as_mut() {
                job.outstanding += batch.len();
            }
            for group in batch {
                self.call(ZkOp::Multi(group), TaskStep::ReleaseOne);
            }
        }
        self.release_call_done();
    }

    pub(super) fn on_release_one(&mut self) {
        self.release_call_done();
    }

    pub(super) fn release_call_done(&mut self) {
        let Some(job) = self.life.release_all.as_mut() else {
            return;
        };
        job.outstanding = job.outstanding.saturating_sub(1);
        if job.outstanding > 0 {
            return;
        }
        let job = self.life.release_all.take().expect("present");
        let took = self.io.now.mono.saturating_sub(job.since);
        self.report(Level::Info, "left the cluster and released all leases")
            .field("released", job.leases.len())
            .field("took_ms", took.as_millis());
        self.answer(job.req, Ok(Answered::Done));
    }
}
