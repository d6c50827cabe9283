//! The tick ledger accounts for every tick (`plan::ledger`): at the end of a run, each tick of
//! each task (or unit) up to the newest one its fire record accounts for was claimed (to run,
//! or as skipped with its entry) or lies in an entry of the record's ledger; and each entry's
//! reason holds for its task and ticks (`overlap` only with `overlap = "skip"`, `paused` only
//! in a paused period, `no_node` only for ticks nobody claimed, ...). A deliberate bug
//! (`FiringBugs::forget_ledger`) shows the check can fail.

use zkcron::coord::record;
use zkcron::coord::records::FireRecord;
use zkcron::plan::ledger::{Reason, STORED_ENTRIES, TickEntry};
use zkcron::task::OverlapPolicy;

use super::*;

impl Sim<'_> {
    pub(crate) fn check_ledger(&mut self) {
        let sc = self.sc;
        for (t, task) in sc.tasks.iter().enumerate() {
            let path = format!("{BASE}/tasks/{}", task.name);
            let Some(record) = self
                .zk
                .nodes
                .get(&path)
                .and_then(|z| serde_json::from_slice::<FireRecord>(&z.data).ok())
            else {
                continue;
            };
            let Some(accounted) = record::accounted(&record) else {
                continue;
            };
            let first_claim = self.check.first_claim(t);
            let mut from = if task.initial_record {
                Some(epoch())
            } else {
                first_claim.map(|c| c - TimeDelta::milliseconds(1))
            };
            // A record keeps the newest entries: older ticks are no longer accounted there.
            if record.ticks.len() >= STORED_ENTRIES {
                from = from.max(Some(record.ticks[0].from - TimeDelta::milliseconds(1)));
            }
            for entry in &record.ticks {
                if let Some(why) = self.reason_fails(t, entry) {
                    self.check.violation(
                        Kind::ReasonWrong,
                        sc.end,
                        t,
                        entry.from,
                        format!(
                            "{} entry {:.3}s–{:.3}s of {}: {why}",
                            entry.reason.code(),
                            secs(entry.from),
                            secs(entry.to),
                            task.name
                        ),
                    );
                }
            }
            let Some(from) = from else { continue };
            for tick in task.rules.schedule.ticks_after(from) {
                if tick > accounted {
                    break;
                }
                self.stats.ledger_ticks += 1;
                let claimed = self.check.claims.contains_key(&(t, tick));
                let entry = record.ticks.iter().find(|e| e.from <= tick && tick <= e.to);
                if claimed || entry.is_some() {
                    continue;
                }
                let entries: Vec<String> = record
                    .ticks
                    .iter()
                    .map(|e| {
                        format!(
                            "{:.3}s–{:.3}s {}",
                            secs(e.from),
                            secs(e.to),
                            e.reason.code()
                        )
                    })
                    .collect();
                self.check.violation(
                    Kind::TickUnaccounted,
                    sc.end,
                    t,
                    tick,
                    format!(
                        "tick {:.3}s of {} was neither claimed nor in its ledger (accounted to {:.3}s; entries: {entries:?})",
                        secs(tick),
                        task.name,
                        secs(accounted)
                    ),
                );
            }
        }
    }

    /// Why `entry` of task (or unit) `t`'s ledger cannot be true, if it cannot.
    fn reason_fails(&self, t: TaskIx, entry: &TickEntry) -> Option<String> {
        let task = &self.sc.tasks[self.sc.tasks[t].task_of(t)];
        let claimed = |tick| self.check.claims.contains_key(&(t, tick));
        match entry.reason {
            Reason::Overlap if task.overlap != OverlapPolicy::Skip => {
                Some(format!("the task's overlap is {:?}", task.overlap))
            }
            Reason::QueueFull if task.overlap != OverlapPolicy::Queue => {
                Some(format!("the task's overlap is {:?}", task.overlap))
            }
            Reason::Deadline if task.rules.starting_deadline.is_none() => {
                Some("the task has no starting_deadline".into())
            }
            Reason::Paused
                if !self.paused_over(t, entry.from) || !self.paused_over(t, entry.to) =>
            {
                Some("not in a paused period".into())
            }
            // (A deadline skip can follow a claim whose answer was lost: not checked here.)
            Reason::NoNode | Reason::CatchUp => {
                let run = self.sc.tasks[t]
                    .rules
                    .schedule
                    .ticks_after(entry.from - TimeDelta::milliseconds(1))
                    .take_while(|tick| *tick <= entry.to)
                    .take(10_000)
                    .find(|tick| claimed(*tick));
                run.map(|tick| format!("tick {:.3}s of it was claimed", secs(tick)))
            }
            Reason::NodeLost if !claimed(entry.from) => Some("its tick was never claimed".into()),
            Reason::Window | Reason::NoEligibleNode => {
                Some("a reason only readers work out, stored in a record".into())
            }
            _ => None,
        }
    }
}
