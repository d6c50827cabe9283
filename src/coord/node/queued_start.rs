//! The start of a queued tick in the multi-op that records the end of the run before it.
//!
//! With `overlap = "queue"` the end of a run is followed at once by the claim of the tick
//! queued behind it ([`ClaimIntent::RunQueued`]). Sent one after the other, the two writes
//! cost two commits in ZooKeeper before the queued tick spawns. So when a run's end comes
//! while the fire record names a queued tick this node may start (it holds the lease, the
//! task is not paused, no other run of it is live here or, as last counted, elsewhere, and
//! nothing else is in flight on it), its result is held for at most [`QUEUED_CLAIM_WAIT`]:
//! the queued tick's claim, which the firing rules send within that time, goes in the same
//! multi-op as the result, the result's ops first, then the claim's, each in its protocol
//! order. Without a claim by then, the result is written alone.
//!
//! A failure of the combined multi-op is handled as each write alone would be: the part that
//! failed by its own handler (the failing op's index shifted to the part), and the other part,
//! not applied either (a multi-op is atomic), sent again alone. An unknown outcome or a lost
//! session goes to both handlers: the result is retried, the claim resolved by re-reading the
//! record, as alone.
//!
//! [`ClaimIntent::RunQueued`]: crate::coord::ClaimIntent::RunQueued

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::TaskStep;
use super::claim::ClaimJob;
use super::io::{ZkFail, ZkOk, ZkOp};
use super::runs::RunEndedJob;
use super::{Node, Timer};
use crate::coord::records::FireRecord;
use crate::coord::{ClaimIntent, CoordError};

/// How long a run's result is held for the claim of the tick queued behind the run.
pub(super) const QUEUED_CLAIM_WAIT: Duration = Duration::from_millis(50);

/// A run's result and the claim of the tick queued behind it, in one multi-op.
#[derive(Debug)]
pub(crate) struct ResultAndClaim {
    result: RunEndedJob,
    /// The result's part deletes the run znode first.
    run_live: bool,
    /// The result's part writes the result.
    newer: bool,
    /// How many ops the result's part has: the claim's follow.
    result_ops: usize,
    claim: ClaimJob,
    /// The record the claim writes.
    new: FireRecord,
    run_path: String,
    /// When it was sent, by the local clock.
    sent: DateTime<Utc>,
}

impl Node {
    /// Whether the result of `job` waits for the claim of the tick queued behind its run.
    pub(super) fn holds_for_queued_claim(&self, job: &RunEndedJob) -> bool {
        let task = job.task.as_str();
        let Some(state) = self.tasks.get(task) else {
            return false;
        };
        let queued = state
            .record
            .as_ref()
            .is_some_and(|(record, _)| record.queued.is_some());
        let epoch = self.held_version(task);
        let runs_prefix = format!("{}/run-", self.paths.record(task));
        let other_runs_here = self
            .runs
            .own_runs
            .range(runs_prefix.clone()..)
            .take_while(|path| path.starts_with(&runs_prefix))
            .any(|path| *path != job.run_path);
        queued
            && epoch.is_some()
            && state.no_foreign_runs == epoch
            && state.result.is_some()
            && state.held_result.is_none()
            && state.jobs.is_empty()
            && !other_runs_here
            && !self.is_paused(self.task_of(task))
            // A failed run that pauses its task: the queued tick waits for the resume.
            && job.result.pause.is_none()
    }

    /// Holds the result of `job` until the queued tick's claim comes, or
    /// [`QUEUED_CLAIM_WAIT`] has passed.
    pub(super) fn hold_result(&mut self, job: RunEndedJob) {
        let task = job.task.clone();
        self.tasks.state_mut(&task).held_result = Some(job);
        self.at(
            self.io.now.mono + QUEUED_CLAIM_WAIT,
            Timer::HeldResult { task },
        );
    }

    /// No queued claim came in time (or it went without the result): the result goes alone.
    pub(super) fn on_held_result_due(&mut self, task: &str) {
        if let Some(job) = self.tasks.get_mut(task).and_then(|s| s.held_result.take()) {
            self.run_ended_attempt(job);
        }
    }

    /// Sends the claim of a queued tick `claim` (its ops `claim_ops`) in one multi-op with the
    /// held result of its task, if one is held; returns the claim's parts back otherwise.
    pub(super) fn send_with_held_result(
        &mut self,
        claim: ClaimJob,
        new: FireRecord,
        run_path: String,
        claim_ops: Vec<ZkOp>,
    ) -> Option<(ClaimJob, FireRecord, String, Vec<ZkOp>)> {
        let held = (claim.intent() == ClaimIntent::RunQueued)
            .then(|| self.tasks.get_mut(claim.task())?.held_result.take())
            .flatten();
        let Some(mut result) = held else {
            return Some((claim, new, run_path, claim_ops));
        };
        if !self.knows_stored_result(&mut result) {
            // The stored result must be read first: each goes alone.
            self.run_ended_attempt(result);
            return Some((claim, new, run_path, claim_ops));
        }
        let Some((mut ops, run_live, newer)) = self.result_ops(&result) else {
            // Nothing left to write for the run: its end is recorded, the claim goes alone.
            self.run_ended_done(result);
            return Some((claim, new, run_path, claim_ops));
        };
        let result_ops = ops.len();
        ops.extend(claim_ops);
        let write = ResultAndClaim {
            result,
            run_live,
            newer,
            result_ops,
            claim,
            new,
            run_path,
            sent: self.io.now.wall,
        };
        self.call(ZkOp::Multi(ops), TaskStep::ResultAndClaim(Box::new(write)));
        None
    }

    /// The reply to a result and claim: each part to its handler.
    pub(super) fn on_result_and_claim(
        &mut self,
        write: ResultAndClaim,
        reply: Result<ZkOk, ZkFail>,
    ) {
        let ResultAndClaim {
            result,
            run_live,
            newer,
            result_ops,
            claim,
            new,
            run_path,
            sent,
        } = write;
        match reply {
            Ok(ZkOk::Multi(mut results)) => {
                let claimed = results.split_off(result_ops.min(results.len()));
                // The claim first: its answer starts the spawn.
                self.on_claim_multi(claim, new, run_path, sent, Ok(ZkOk::Multi(claimed)));
                self.on_result_write(result, run_live, newer, Ok(ZkOk::Multi(results)));
            }
            Err(ZkFail::Multi { index, error }) if index < result_ops => {
                let failed = Err(ZkFail::Multi { index, error });
                self.on_result_write(result, run_live, newer, failed);
                self.start_claim(claim);
            }
            Err(ZkFail::Multi { index, error }) => {
                let index = index - result_ops;
                let failed = Err(ZkFail::Multi { index, error });
                self.on_claim_multi(claim, new, run_path, sent, failed);
                self.run_ended_attempt(result);
            }
            other => {
                self.on_claim_multi(claim, new, run_path, sent, other.clone());
                self.on_result_write(result, run_live, newer, other);
            }
        }
    }

    /// The session ended under a result and claim: each part as alone.
    pub(super) fn abort_result_and_claim(&mut self, write: ResultAndClaim) {
        self.run_ended_failed(
            write.result,
            CoordError::SessionEnded {
                context: "recording the run result",
            },
        );
        self.finish_claim(
            write.claim,
            Err(CoordError::SessionEnded {
                context: "claiming",
            }),
        );
    }
}
