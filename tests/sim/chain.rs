//! Chained runs (`after`) in the simulation: the second task of a scenario also runs after the
//! first (`Knobs::chains`; fixed, not drawn, so the scenarios stay what they were), through the
//! real core and node, and the checks: no chained fire id runs twice, and each success of the
//! first whose end the node answered as stored causes a run of the second, unless the node
//! that claimed it died (its trigger then stays running, or ends as lost).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use zkcron::coord::RunResult;
use zkcron::coord::node::io::Request;
use zkcron::coord::record;
use zkcron::coord::records::{TriggerRecord, TriggerState};
use zkcron::firing::{self, RunId};

use super::checker::{Checker, Kind, Violation};
use super::drive::{Asked, BASE, Sim, T};
use super::requested::Requested;
use super::{Ms, NodeIx, TaskIx};

/// How long each chained run takes.
const RUN_MS: Ms = 700;

/// How long before the end a request must be made to be held to have run.
const SETTLE_MS: Ms = 15_000;

/// The fire ids of the chained runs a stored success of `task` ending with `result` requests.
pub(crate) fn requested(task: &str, result: &RunResult) -> Vec<String> {
    record::chained_requests(task, result, "sim")
        .into_iter()
        .map(|(fire_id, _)| fire_id)
        .collect()
}

impl Sim<'_> {
    /// A chained run was claimed on node `n`: it runs for [`RUN_MS`].
    pub(crate) fn chained_spawned(&mut self, n: NodeIx, spawn: firing::Spawn<()>) {
        let task = super::drive::task_ix(&spawn.task);
        self.stats.chained_runs += 1;
        self.check
            .on_requested_run(Requested::Chained, self.now, &spawn.fire_id, task, n);
        self.timer(
            n,
            RUN_MS,
            T::ChainEnd {
                task,
                fire_id: spawn.fire_id,
                tick: spawn.tick.instant,
                run: spawn.run,
                chained: spawn.chained,
            },
        );
    }

    /// A chained run ended on node `n`: its end goes to its trigger (a manual run's).
    pub(crate) fn chained_ended(
        &mut self,
        n: NodeIx,
        task: TaskIx,
        fire_id: String,
        tick: DateTime<Utc>,
        run: RunId,
        chained: &Arc<[Arc<str>]>,
    ) {
        let result = RunResult {
            chained: chained.to_vec(),
            ..self.manual_success(n, fire_id, tick, RUN_MS)
        };
        self.manual_run_ended(n, task, result, run);
    }

    /// A chained run of a paused task was claimed on node `n` and skipped: its end is recorded
    /// as the daemon records it (its trigger ends).
    pub(crate) fn chained_skipped(
        &mut self,
        n: NodeIx,
        task: &str,
        fire_id: String,
        tick: DateTime<Utc>,
    ) {
        self.stats.chained_skipped += 1;
        self.check.chained_skipped.insert(fire_id.clone());
        let result = RunResult {
            tick,
            node: self.procs[n].id.clone(),
            exit: "skipped: the task is paused".into(),
            finished_at: self.wall(n),
            fire_id: Some(fire_id),
            manual: true,
            ..RunResult::default()
        };
        let request = Request::RunEnded {
            task: task.to_string(),
            result,
        };
        self.ask(n, request, Asked::RunEnded);
    }

    /// At the end: every chained run a stored success requested ran, or was claimed and
    /// skipped because its task was paused (seed 17006: an operator's pause, which the check
    /// did not count), or its trigger shows that the node that claimed it died (still running,
    /// or ended as lost). A request made in
    /// the last [`SETTLE_MS`], or of a task no node leads at the end (none eligible: it waits,
    /// as documented), is not held to it.
    pub(crate) fn check_chains(&mut self) {
        let expected: Vec<(String, Ms)> = self
            .check
            .chained_expected
            .iter()
            .map(|(id, at)| (id.clone(), *at))
            .collect();
        for (fire_id, at) in expected {
            let child = record::chain_of(&fire_id).map(|(child, _)| child.to_string());
            let led = child
                .as_deref()
                .is_some_and(|c| self.may_lead_at_end(super::drive::task_ix(c)));
            // A chained run of a task a failure paused is claimed and skipped, as for an
            // operator's pause.
            let failure_paused = child
                .as_deref()
                .is_some_and(|c| self.check.failure_paused_at(super::drive::task_ix(c), at));
            if self.check.chained_runs.contains_key(&fire_id)
                || self.check.chained_skipped.contains(&fire_id)
                || !led
                || failure_paused
                || at + SETTLE_MS > self.sc.end
            {
                continue;
            }
            let path = format!("{BASE}/control/triggers/{fire_id}");
            let state = self
                .zk
                .nodes
                .get(&path)
                .and_then(|z| serde_json::from_slice::<TriggerRecord>(&z.data).ok())
                .map(|r| r.state);
            if matches!(state, Some(TriggerState::Running | TriggerState::Ended)) {
                continue;
            }
            let task = child.as_deref().map(super::drive::task_ix);
            let state = state
                .map(|s| format!("{s:?}"))
                .unwrap_or_else(|| "none".into());
            self.check.violations.push(Violation {
                kind: Kind::ChainedRunLost,
                at,
                task,
                tick: None,
                detail: format!(
                    "the chained run {fire_id}, requested with a stored success, never ran (its request: {state})"
                ),
            });
        }
    }
}

impl Sim<'_> {
    /// Whether a node up and undrained at the end may lead `task` (as the liveness check
    /// asks).
    fn may_lead_at_end(&self, task: TaskIx) -> bool {
        (0..self.procs.len())
            .filter(|&n| !self.sc.drained_at_end.contains(&n))
            .any(|n| {
                self.node_state_at(n, self.sc.end)
                    .is_some_and(|s| self.can_lead(n, task, &s))
            })
    }
}

impl Checker {
    /// A node answered that a success's end, which requests `fire_ids`, is stored.
    pub(crate) fn expect_chained(&mut self, fire_ids: Vec<String>, at: Ms) {
        for fire_id in fire_ids {
            self.chained_expected.entry(fire_id).or_insert(at);
        }
    }
}
