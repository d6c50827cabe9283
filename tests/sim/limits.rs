//! Limited runs and one-shots in the simulation (`Knobs::limits`): from a stream of their own,
//! a quarter of the tasks get `max_runs` (1–3) and a tenth become one-shots (`@at`, an instant
//! 5–60 s into the scenario); a unit's slot (an every-node task's node, a pooled task's item)
//! has its task's. The real node counts the runs in the fire record with each claim and refuses
//! a claim to run past `max_runs` (`coord::record::admit`). The checks: no slot runs more
//! distinct ticks than its `max_runs`, across every fault (a one-shot's tick runs at most once
//! by the checks every tick has); and the ticks after a slot's record says it is done are not
//! held to be claimed. A deliberate bug (`NodeBugs::runs_unlimited`: the node does not apply
//! `max_runs`, so nothing is counted or refused) shows the check can fail.

use chrono::{DateTime, TimeDelta, Utc};
use rand::{Rng, SeedableRng, rngs::StdRng};
use zkcron::coord::records::FireRecord;
use zkcron::schedule::Schedule;

use super::checker::Kind;
use super::drive::{BASE, Sim};
use super::scenario::{Knobs, TaskDef};
use super::{TaskIx, epoch};

/// With `Knobs::limits`, gives some tasks `max_runs` and makes some one-shots; units follow
/// their task.
pub(crate) fn draw(seed: u64, knobs: Knobs, tasks: &mut [TaskDef]) {
    if !knobs.limits {
        return;
    }
    let mut ops = StdRng::seed_from_u64(seed ^ 0x0011_3175);
    for task in tasks.iter_mut().filter(|t| !t.is_unit()) {
        if ops.random_bool(0.1) {
            let at = epoch() + TimeDelta::seconds(ops.random_range(5..=60));
            let expression = format!("@at {}", at.to_rfc3339());
            task.rules.schedule =
                Schedule::parse(&expression, task.rules.schedule.timezone()).expect("an instant");
        } else if ops.random_bool(0.28) {
            task.max_runs = Some(ops.random_range(1..=3));
        }
    }
    for slot in 0..tasks.len() {
        if let Some(t) = tasks[slot].unit_task() {
            tasks[slot].max_runs = tasks[t].max_runs;
            tasks[slot].rules.schedule = tasks[t].rules.schedule.clone();
        }
    }
}

impl Sim<'_> {
    /// The fire record of slot `t` at the end, as the model holds it.
    fn record_at_end(&self, t: TaskIx) -> Option<FireRecord> {
        let path = format!("{BASE}/tasks/{}", self.sc.tasks[t].name);
        let node = self.zk.nodes.get(&path)?;
        serde_json::from_slice(&node.data).ok()
    }

    /// The tick after which slot `t` is done (its record counts `max_runs` runs): its later
    /// ticks are not held to be claimed.
    pub(crate) fn done_after(&self, t: TaskIx) -> Option<DateTime<Utc>> {
        let max = self.sc.tasks[t].max_runs?;
        let record = self.record_at_end(t)?;
        (record.runs >= u64::from(max)).then_some(record.tick?)
    }

    /// No slot ran more distinct scheduled ticks than its `max_runs`.
    pub(crate) fn check_limits(&mut self) {
        for (t, task) in self.sc.tasks.iter().enumerate() {
            let Some(max) = task.max_runs else { continue };
            let ran: Vec<DateTime<Utc>> = self
                .check
                .runs
                .range((t, DateTime::<Utc>::MIN_UTC)..=(t, DateTime::<Utc>::MAX_UTC))
                .map(|((_, tick), _)| *tick)
                .collect();
            self.stats.limited_slots += 1;
            if ran.len() > max as usize {
                let ticks: Vec<String> = ran
                    .iter()
                    .map(|t| format!("{:.3}s", super::secs(*t)))
                    .collect();
                self.check.violation(
                    Kind::RunsPastMax,
                    self.sc.end,
                    t,
                    ran[max as usize],
                    format!(
                        "{} ran {} ticks with max_runs = {max}: {}",
                        task.name,
                        ran.len(),
                        ticks.join(", ")
                    ),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::bugs::seed_showing_the_bug;
    use super::super::checker::Kind;
    use super::super::run_unit_scenarios;
    use super::super::scenario::{Knobs, NodeBug, Scenario};

    /// The limited kind's scenarios (every fault of the default ones, pooled tasks among
    /// them): no task or item runs more ticks than its `max_runs`, and a one-shot's tick runs
    /// once. `ZKCRON_SIM_SEED` replays one.
    #[test]
    fn limited_runs_and_one_shots_hold_through_the_default_faults() {
        let knobs = Knobs {
            limits: true,
            pools: true,
            ..Knobs::DEFAULT
        };
        let stats = run_unit_scenarios(knobs, 60, "limited tasks", |t| t.max_runs.is_some());
        if std::env::var_os("ZKCRON_SIM_SEED").is_none() {
            assert!(stats.limited_slots > 60, "few limited slots: {stats:?}");
        }
    }

    /// With the real node's `bugs.runs_unlimited` (claims neither count nor refuse) the checker
    /// reports a slot that ran past its `max_runs`, and the same scenario keeps the limit with
    /// the node as it ships.
    #[test]
    fn the_checker_reports_runs_past_max_runs_when_claims_do_not_refuse_them() {
        let knobs = Knobs {
            limits: true,
            bug: NodeBug::RunsUnlimited,
            ..Knobs::CONTRACT
        };
        let seed = seed_showing_the_bug(Kind::RunsPastMax, knobs, 0..200);
        // The scenario has a limited task: the bug, not the draw, made the difference.
        assert!(
            Scenario::generate(seed, knobs)
                .tasks
                .iter()
                .any(|t| t.max_runs.is_some())
        );
    }
}
