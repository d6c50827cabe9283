//! Backfills in the simulation: the operator's requests, at fixed points of every scenario (no
//! draw from the seed's generator, so the scenarios stay what they were), the runs of their
//! ticks through the real core and node, and the check that no backfill fire id runs twice.
//!
//! Each request covers the 8 ticks of a task's schedule before the scenario's epoch; each run
//! takes 2 s, so a request spans the faults around it.

use chrono::{DateTime, TimeDelta, Utc};
use zkcron::coord::operator;
use zkcron::firing::{self, RunId};

use super::drive::{Ev, Sim, T};
use super::requested::Requested;
use super::{Ms, NodeIx, Scenario, TaskIx, epoch};

/// How long each backfill run takes.
const RUN_MS: Ms = 2_000;

/// The ticks each request covers.
const TICKS: usize = 8;

impl Sim<'_> {
    /// Plans the operator's backfill requests of `sc`: during the faults and after them.
    pub(crate) fn plan_backfills(&mut self, sc: &Scenario) {
        if sc.tasks.is_empty() {
            return;
        }
        for (k, at) in [sc.fault_end / 4, sc.fault_end + sc.settle / 4]
            .into_iter()
            .enumerate()
        {
            let task = (sc.seed as usize + k + 1) % sc.task_count();
            let schedule = &sc.tasks[task].rules.schedule;
            let Some(from) = schedule
                .ticks_after(epoch() - TimeDelta::days(1))
                .take_while(|t| *t < epoch())
                .collect::<Vec<_>>()
                .iter()
                .rev()
                .nth(TICKS - 1)
                .copied()
            else {
                continue;
            };
            let name = &sc.tasks[task].name;
            let range = (from, epoch());
            let Ok(record) = operator::backfill(name, schedule, range, "operator@sim", epoch())
            else {
                continue;
            };
            self.backfills.push((task, record));
            self.push(at, Ev::Backfill(self.backfills.len() - 1));
        }
    }

    /// The operator creates the request znode, as `zkcron backfill` does.
    pub(crate) fn create_backfill(&mut self, k: usize) {
        let (task, record) = self.backfills[k].clone();
        self.create_request(Some(task), &record.into(), k as u64);
    }

    /// A backfill tick was claimed on node `n`: it runs for [`RUN_MS`].
    pub(crate) fn backfill_spawned(&mut self, n: NodeIx, spawn: firing::Spawn<()>) {
        let task = super::drive::task_ix(&spawn.task);
        self.stats.backfill_runs += 1;
        self.check
            .on_requested_run(Requested::Backfill, self.now, &spawn.fire_id, task, n);
        self.timer(
            n,
            RUN_MS,
            T::BackfillEnd {
                task,
                fire_id: spawn.fire_id,
                tick: spawn.tick.instant,
                run: spawn.run,
            },
        );
    }

    /// The run of a backfill tick ended on node `n`.
    pub(crate) fn backfill_ended(
        &mut self,
        n: NodeIx,
        task: TaskIx,
        fire_id: String,
        tick: DateTime<Utc>,
        run: RunId,
    ) {
        let result = self.manual_success(n, fire_id, tick, RUN_MS);
        self.manual_run_ended(n, task, result, run);
    }
}
