//! The daemon's requests: each [`Request`] is answered by exactly one [`Output::Answer`]
//! (also when the session ends under it). Work on one task (a claim, releasing its lease) runs
//! one at a time, in order.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use super::claim::{self, AfterRead, ClaimJob};
use super::io::{Answered, ReqId, Request};
use super::{AfterEnsure, AfterRecreate, Node, Output, Pending, TaskJob, Then, Timer};
use super::{MemberStep, PoolStep, RequestStep, TaskStep, request_claim, request_end};
use crate::coord::{ClaimIntent, ClaimOutcome, CoordError};

/// Operator requests: every trigger and backfill request as last read, the manual claims on
/// their way, the backfills being swept, and how many runs a history keeps.
#[derive(Debug)]
pub(super) struct Requests {
    /// Every trigger under `control/triggers` as last read, by name (= fire id).
    pub(super) triggers: BTreeMap<String, super::trigger::Known>,
    /// Claims sent and not answered yet (or answered with an error), by fire id: their
    /// `claimed_at`, by which a run asked again finds its own claim. Kept until a decided
    /// answer, or until the request is gone.
    pub(super) claims_sent: BTreeMap<String, DateTime<Utc>>,
    /// Every backfill request under `control/backfills` as last read, by name.
    pub(super) backfills: BTreeMap<String, super::backfill::Known>,
    /// The requests with a lost tick's end or a deletion on its way.
    pub(super) backfill_sweeping: BTreeSet<String>,
    /// `[scheduler] history_runs`: how many runs a task's history keeps.
    pub(super) history_runs: usize,
}

impl Requests {
    /// None read yet; a history keeps `history_runs` runs.
    pub(super) fn new(history_runs: usize) -> Requests {
        Requests {
            triggers: BTreeMap::new(),
            claims_sent: BTreeMap::new(),
            backfills: BTreeMap::new(),
            backfill_sweeping: BTreeSet::new(),
            history_runs,
        }
    }
}

impl Node {
    // ---- requests ----

    pub(super) fn on_request(&mut self, req: ReqId, request: Request) {
        let Some(request) = self.on_pool_request(req, request) else {
            return;
        };
        match request {
            Request::Publish(tasks) => {
                self.publish_tasks(&tasks);
                self.answer(req, Ok(Answered::Done));
            }
            Request::LastClaimed { task } => {
                if self.life.session.is_none() {
                    return self.answer(
                        req,
                        Err(CoordError::NotConnected {
                            context: "reading the fire record",
                        }),
                    );
                }
                self.read_record(task, AfterRead::LastClaimed(req));
            }
            Request::Claim {
                task,
                tick,
                intent,
                ticks,
            } => self.queue_task_job(
                task.clone(),
                TaskJob::Claim(
                    ClaimJob::new(req, task, tick, intent, claim::ClaimKind::Fresh).carrying(ticks),
                ),
            ),
            Request::Reclaim { task, tick } => {
                self.forget_record(&task);
                self.queue_task_job(
                    task.clone(),
                    TaskJob::Claim(ClaimJob::new(
                        req,
                        task,
                        tick,
                        ClaimIntent::Run,
                        claim::ClaimKind::Rerun,
                    )),
                );
            }
            Request::OrphanedTick { task } => self.orphaned_tick(req, task),
            Request::RunsElsewhere { task } => self.runs_elsewhere(req, task),
            Request::RunsEndedElsewhere { task } => self.wait_runs_elsewhere(req, task),
            Request::QueuedTick { task } => {
                if self.life.session.is_none() {
                    return self.answer(
                        req,
                        Err(CoordError::NotConnected {
                            context: "reading the queued tick",
                        }),
                    );
                }
                self.read_record(task, AfterRead::Queued(req));
            }
            Request::RunEnded { task, result } => self.run_ended(req, task, result),
            Request::LastResult { task } => self.last_result(req, task),
            Request::ClaimManual { task, trigger } => self.claim_request(req, task, trigger),
            Request::ReleaseAll => self.start_release_all(req),
            Request::Close => self.close_after_history(req),
        }
    }

    /// Closes the session once the history appends in flight are over: the last runs' ends
    /// (a daemon stops after its runs' results) are appended, not cut off by the close. It
    /// waits at most [`super::CLOSE_WAITS_FOR_HISTORY`] (an append retries for longer when
    /// ZooKeeper does not answer); a session lost meanwhile ends the appends at once.
    pub(super) fn close_after_history(&mut self, req: ReqId) {
        if self.life.session.is_some() && self.history_in_flight() {
            if self.life.close_waiting.replace(req).is_none() {
                self.at(
                    self.io.now.mono + super::CLOSE_WAITS_FOR_HISTORY,
                    super::Timer::CloseAnyway,
                );
            }
            return;
        }
        self.close_now(req);
    }

    /// Closes the session now: what is in flight is aborted.
    pub(super) fn close_now(&mut self, req: ReqId) {
        self.life.closed = true;
        if self.life.session.take().is_some() {
            self.io.generation += 1;
            self.abort_pending();
            self.io.out.push_back(Output::CloseSession);
        }
        self.answer(req, Ok(Answered::Done));
    }

    /// Runs `job` now, or after the job on the same task in flight.
    pub(super) fn queue_task_job(&mut self, task: String, job: TaskJob) {
        let queue = &mut self.tasks.state_mut(&task).jobs;
        queue.push_back(job);
        if queue.len() == 1 {
            self.start_task_job(task);
        }
    }

    pub(super) fn start_task_job(&mut self, task: String) {
        let Some(job) = self.tasks.get_mut(&task).and_then(|s| s.jobs.front_mut()) else {
            return;
        };
        match job {
            TaskJob::Claim(claim) => {
                let claim = claim.clone();
                self.start_claim(claim);
            }
            TaskJob::Release { epoch } => {
                let epoch = *epoch;
                self.release_lease(task, epoch)
            }
            TaskJob::Pool(req) => {
                let req = *req;
                self.start_pool(req)
            }
        }
    }

    /// The job in flight on `task` is done: start the next.
    pub(super) fn finish_task_job(&mut self, task: &str) {
        let Some(queue) = self.tasks.get_mut(task).map(|s| &mut s.jobs) else {
            return;
        };
        if queue.pop_front().is_none() {
            return;
        }
        if queue.is_empty() {
            self.maybe_release_all();
        } else {
            self.start_task_job(task.to_string());
        }
    }

    /// A session ended: every call in flight is answered (requests) or dropped.
    pub(super) fn abort_pending(&mut self) {
        let pending: Vec<Pending> = std::mem::take(&mut self.io.pending).into_values().collect();
        for p in pending {
            self.abort_call(p.then);
        }
        self.runs.runs_counts.clear();
        self.abort_queued();
    }

    /// Answers (or drops) what a call in flight continued with, its session gone.
    fn abort_call(&mut self, then: Then) {
        match then {
            Then::Task(step) => self.abort_task_step(step),
            Then::Member(
                MemberStep::Ensured {
                    after: AfterEnsure::Read(after),
                    ..
                }
                | MemberStep::Recreated {
                    after:
                        AfterRecreate::Ensure {
                            after: AfterEnsure::Read(after),
                            ..
                        },
                },
            ) => self.abort_read(*after),
            Then::Request(RequestStep::Trigger(step)) => self.abort_trigger(step),
            Then::Request(RequestStep::Backfill(step)) => self.abort_backfill(step),
            Then::Request(RequestStep::End(step)) => match *step {
                request_end::Step::Read { end } | request_end::Step::Write { end } => {
                    end.abort(self)
                }
            },
            Then::Request(RequestStep::Claim(
                request_claim::Step::Claim { job, .. } | request_claim::Step::Read(job),
            )) => job.abort(self),
            Then::History(step) => self.abort_history(step),
            Then::Pool(PoolStep::PoolRecord { req, .. }) => self.abort_pool(req),
            Then::Pool(PoolStep::PoolMulti { job, .. }) => self.abort_pool_multi(*job),
            Then::Pool(PoolStep::PoolResultRead { req, .. }) => self.abort_pool_end(req),
            Then::Pool(PoolStep::PoolResultWrite { end, .. }) => self.abort_pool_write(*end),
            _ => {}
        }
    }

    /// [`Node::abort_call`] of a claim's, a run's or a result's call.
    fn abort_task_step(&mut self, step: TaskStep) {
        match step {
            TaskStep::ReadRecord { after, .. } => self.abort_read(after),
            TaskStep::ClaimMulti { job, .. }
            | TaskStep::ClaimLeaseCheck { job }
            | TaskStep::RunBlocks { job }
            | TaskStep::RerunResult { job, .. } => {
                self.finish_claim(
                    job,
                    Err(CoordError::SessionEnded {
                        context: "claiming",
                    }),
                );
            }
            TaskStep::OrphanResult { req, .. } | TaskStep::OrphanRun { req, .. } => self.answer(
                req,
                Err(CoordError::SessionEnded {
                    context: "checking for a lost run",
                }),
            ),
            TaskStep::RunOwner { req, .. } | TaskStep::RunClaimer { req, .. }
                if self.runs.runs_counts.remove(&req).is_none() => {}
            TaskStep::RunsList { req, .. }
            | TaskStep::RunOwner { req, .. }
            | TaskStep::RunClaimer { req, .. } => self.answer(
                req,
                Err(CoordError::SessionEnded {
                    context: "listing live runs",
                }),
            ),
            TaskStep::LastResult { req } => self.answer(
                req,
                Err(CoordError::SessionEnded {
                    context: "reading the last result",
                }),
            ),
            TaskStep::ResultRead { job } | TaskStep::ResultWrite { job, .. } => self
                .run_ended_failed(
                    *job,
                    CoordError::SessionEnded {
                        context: "recording the run result",
                    },
                ),
            TaskStep::ResultAndClaim(write) => self.abort_result_and_claim(*write),
            TaskStep::ReleaseBatch { .. } | TaskStep::ReleaseOne => self.release_call_done(),
            _ => {}
        }
    }

    /// Answers the queued task jobs (behind a claim in flight) and the timers carrying requests.
    fn abort_queued(&mut self) {
        let jobs: Vec<TaskJob> = self.tasks.take_jobs();
        for job in jobs {
            match job {
                TaskJob::Claim(job) => {
                    let req = job.req;
                    self.answer(req, Ok(Answered::Claim(ClaimOutcome::NotLeader)));
                }
                TaskJob::Pool(req) => {
                    if self.pool.jobs.remove(&req).is_some() {
                        self.answer(req, Ok(Answered::Claim(ClaimOutcome::NotLeader)));
                    }
                }
                TaskJob::Release { .. } => {}
            }
        }
        let timers = std::mem::take(&mut self.io.timers);
        for (key, timer) in timers {
            match timer {
                Timer::Resolve(job) => {
                    let req = job.claim.req;
                    self.answer(req, Err(super::claim::resolve_ended()));
                }
                other => {
                    self.io.timers.insert(key, other);
                }
            }
        }
    }
}
