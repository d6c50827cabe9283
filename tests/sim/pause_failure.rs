//! Pause on failure in the simulation: a quarter of the tasks have `pause_on_failure`
//! (`Knobs::pause_on_failure`) and a quarter of their runs fail (`scenario::fails`); the
//! simulated daemon hands the pause to the real node with the failed run's end, as the daemon
//! does. The checks: once a failed run's result is stored (the model sees the write of
//! `tasks/<task>/result`, or a node's creation of the pause mark), no tick of the task claimed
//! later runs until an operator's resume; and the ticks the pause keeps from firing are not
//! held to be claimed.
//!
//! A pause is the task's, not a slot's: a pooled task's failed run (its result stored in the
//! units of the items that node ran) pauses every item cluster-wide, so from then on no item's
//! tick claimed later runs on any node; runs already claimed may still start and end.

use chrono::{DateTime, TimeDelta, Utc};
use rand::{Rng, SeedableRng, rngs::StdRng};
use zkcron::coord::records::ResultRecord;

use super::checker::{Checker, Kind};
use super::drive::Sim;
use super::scenario::{Knobs, TaskDef};
use super::{Ms, NodeIx, TaskIx, epoch, secs};
use zkcron::coord::node::model_zk::Write;

/// How long after a failure's result is stored a claim may still be on its way: sent by a
/// node that had not heard of the pause yet (the watch and the claim cross on the network).
const PAUSE_SLACK_MS: Ms = 2_000;

/// How long before a failure is stored a tick may have been due and left unclaimed: the
/// pause keeps a claim that was waiting from being made.
const PAUSED_BEFORE_MS: i64 = 10_000;

/// With `Knobs::pause_on_failure`, gives a quarter of the tasks (not on every node)
/// `pause_on_failure`, from a stream of its own (the draws of the other features stay as they
/// were); an item's slot has its pooled task's.
pub(crate) fn draw(seed: u64, knobs: Knobs, tasks: &mut [TaskDef]) {
    if !knobs.pause_on_failure {
        return;
    }
    let mut ops = StdRng::seed_from_u64(seed ^ 0x0fa1_1ed0);
    // A pause of an every-node task's failed run pauses all its units: not drawn.
    for task in tasks.iter_mut().filter(|t| !t.every_node && !t.is_unit()) {
        task.pause_on_failure = ops.random_bool(0.25);
    }
    for slot in 0..tasks.len() {
        if let Some((t, _)) = tasks[slot].item_of {
            tasks[slot].pause_on_failure = tasks[t].pause_on_failure;
        }
    }
}

/// Whether the run of `tick` of task `t` fails (exit code 1), for a task with
/// `pause_on_failure`: a quarter of them, the same on every node and in every replay.
pub(crate) fn fails(seed: u64, t: TaskIx, tick: DateTime<Utc>) -> bool {
    let mixed =
        (tick.timestamp() as u64 ^ seed ^ ((t as u64) << 40)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (mixed >> 60).is_multiple_of(4)
}

impl Sim<'_> {
    /// A write of `tasks/<slot>/result`: a failed run's end of a task with `pause_on_failure`
    /// pauses it from now on (for an item's unit, the whole pooled task).
    pub(crate) fn on_result_write(&mut self, slot: TaskIx, write: &Write) {
        let t = self.sc.tasks[slot].task_of(slot);
        if !self.sc.tasks[t].pause_on_failure {
            return;
        }
        let Some((data, _)) = &write.after else {
            return;
        };
        let Ok(record) = serde_json::from_slice::<ResultRecord>(data) else {
            return;
        };
        if !record.result.success {
            self.failure_paused(t);
        }
    }

    /// Task `t` is paused by a failed run from now on (if it is not already).
    pub(crate) fn failure_paused(&mut self, t: TaskIx) {
        debug_assert!(
            !self.sc.tasks[t].is_unit(),
            "a pause is a task's, not a unit's"
        );
        let now = self.now;
        if self.check.failure_pause_open(t).is_none() {
            if self.tracing {
                self.note_now(None, Some(t), "PAUSED BY A FAILURE".to_string());
            }
            self.check.failure_pauses.push((t, now, None));
            if self.sc.tasks[t].items.is_some() {
                self.stats.pooled_failure_pauses += 1;
            }
        }
    }
}

impl Checker {
    /// When the open failure pause of task `t` began, if it is paused by a failure now.
    pub(crate) fn failure_pause_open(&self, t: TaskIx) -> Option<Ms> {
        self.failure_pauses
            .iter()
            .find(|&&(p, _, resumed)| p == t && resumed.is_none())
            .map(|&(_, since, _)| since)
    }

    /// The operator resumed task `t`: its failure pause (if any) ends.
    pub(crate) fn failure_resumed(&mut self, t: TaskIx, at: Ms) {
        for pause in &mut self.failure_pauses {
            if pause.0 == t && pause.2.is_none() {
                pause.2 = Some(at);
            }
        }
    }

    /// Whether tick `tick` of slot `slot` (task `t`, or a unit of it) lies in a failure pause
    /// of `t` (from shortly before the failure was stored to the resume), so that it may go
    /// unclaimed.
    pub(crate) fn failure_paused_over(&self, slot: TaskIx, t: TaskIx, tick: DateTime<Utc>) -> bool {
        let at = |ms: Ms| epoch() + TimeDelta::milliseconds(ms as i64);
        self.failure_pauses.iter().any(|&(p, since, resumed)| {
            p == t
                && (tick >= at(since) - TimeDelta::milliseconds(PAUSED_BEFORE_MS)
                    || self.in_backlog_at(slot, tick, since))
                && resumed.is_none_or(|r| tick <= at(r))
        })
    }

    /// Whether `tick` of slot `slot` was still to be caught up at `since`: after every tick of
    /// the slot claimed by then. A pause holds such a backlog back as it holds later ticks
    /// (seed 373: a caught-up run failed, and the ticks behind it waited for a resume).
    fn in_backlog_at(&self, slot: TaskIx, tick: DateTime<Utc>, since: Ms) -> bool {
        let newest_claimed = self
            .claims
            .iter()
            .filter(|((p, _), claims)| *p == slot && claims.iter().any(|c| c.at <= since))
            .map(|((_, claimed), _)| *claimed)
            .max();
        newest_claimed.is_none_or(|newest| tick > newest)
    }

    /// Whether task `t` was paused by a failure at `at`, or came to be within the next
    /// seconds (a request made then is claimed while it is paused).
    pub(crate) fn failure_paused_at(&self, t: TaskIx, at: Ms) -> bool {
        self.failure_pauses.iter().any(|&(p, since, resumed)| {
            p == t && since <= at + PAUSED_BEFORE_MS as Ms && resumed.is_none_or(|r| at < r)
        })
    }

    /// A run of `tick` of slot `slot` (task `task`, or a unit of it) starts on `node` at `at`:
    /// a violation if the slot's tick was claimed after a failure of the task was stored (and
    /// the slack) while no resume came between.
    pub(crate) fn check_failure_pause(
        &mut self,
        at: Ms,
        (slot, task): (TaskIx, TaskIx),
        tick: DateTime<Utc>,
        node: NodeIx,
    ) {
        let Some(claimed) = self
            .claims
            .get(&(slot, tick))
            .and_then(|c| c.iter().find(|c| c.node == node))
            .map(|c| c.at)
        else {
            return;
        };
        let paused = self.failure_pauses.iter().find(|&&(p, since, resumed)| {
            p == task && claimed > since + PAUSE_SLACK_MS && resumed.is_none_or(|r| claimed < r)
        });
        if let Some(&(_, since, _)) = paused {
            self.violation(
                Kind::RanAfterFailurePause,
                at,
                slot,
                tick,
                format!(
                    "n{node} ran tick {:.3}s, claimed at {claimed} ms, though a failed run's result was stored at {since} ms and the task was not resumed",
                    secs(tick)
                ),
            );
        }
    }
}
