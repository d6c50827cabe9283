//! Backfills (`zkcron backfill`): the next tick of each request listed in
//! [`Leadership::backfills`] of a loaded, enabled task this node may fire is run as a manual
//! run is (prepared, claimed with [`Action::ClaimManual`] under its backfill fire id, run once
//! only when `Claimed`), with the historic tick as its tick.
//!
//! One backfill tick of a task is in flight at a time (oldest request first), kept under
//! `<task>@backfill` in the live runs so that `overlap` of the scheduled ticks does not count
//! it. Unless the task's `overlap` is `allow`, a backfill tick waits while a scheduled run of
//! the task is live here, and starts when it ends. The backend's claim decides: a tick picked
//! from a listing that is out of date is refused, remembered, and not asked again until the
//! leadership changes; the newest tick this node claimed of each request is remembered too,
//! so it goes on after it though the listing has not caught up. A paused task's backfill waits for `zkcron resume`.

use super::*;
use crate::coord::backfill;
use crate::task::OverlapPolicy;

/// The key of a task's backfill runs in [`Runs`] (`@` is never part of a task name).
pub(super) fn backfill_key(task: &str) -> String {
    format!("{task}@backfill")
}

impl<P> Firing<P> {
    /// Starts the next tick of a listed backfill for each task with none in flight.
    pub(super) fn start_backfills(&mut self) {
        if self.leadership.paused || self.leadership.backfills.is_empty() || self.shut_down {
            return;
        }
        let listed = self.leadership.backfills.clone();
        for (task, backfills) in listed.iter() {
            if self.manual.backfilling.contains_key(task) {
                continue;
            }
            let Ok(i) = self.loaded_index(task) else {
                continue;
            };
            let spec = self.loaded[i].spec.clone();
            if !spec.enabled || !self.leadership.may_fire(task) {
                continue;
            }
            if spec.overlap != OverlapPolicy::Allow && self.runs.count(task) > 0 {
                tracing::debug!(target: log::MANUAL, task = %task, "backfill waits for the task's live run to end (overlap)");
                continue;
            }
            let next = backfills.iter().find_map(|b| {
                let mut b = b.clone();
                b.done = b
                    .done
                    .max(self.manual.backfill_claimed.get(&b.name).copied());
                let tick = b.next_tick(&spec.schedule)?;
                let fire_id = backfill::fire_id(&b.name, tick);
                (!self.manual.refused.contains(&fire_id)).then_some((fire_id, tick))
            });
            let Some((fire_id, tick)) = next else {
                continue;
            };
            self.manual
                .backfilling
                .insert(task.clone(), fire_id.clone());
            let trigger = Trigger {
                fire_id,
                requested_at: tick,
            };
            self.start_manual_run(&spec, &trigger, RunKind::Backfill);
        }
    }

    /// A backfill tick's claim was not won (`refused`: the backend refused it, rather than
    /// this node losing the task): the task may start another.
    pub(super) fn backfill_not_claimed(&mut self, task: &str, fire_id: &str, refused: bool) {
        self.manual.backfilling.remove(task);
        if refused {
            self.manual.refused.insert(fire_id.to_string());
        }
    }

    /// This node claimed the backfill tick `fire_id`: the request goes on after it, whatever
    /// a listing out of date says.
    pub(super) fn backfill_claimed(&mut self, fire_id: &str) {
        if let Some((name, tick)) = backfill::of_fire_id(fire_id) {
            let newest = self
                .manual
                .backfill_claimed
                .entry(name.to_string())
                .or_insert(tick);
            *newest = (*newest).max(tick);
        }
    }

    /// A run under `runs_key` ended: a backfill's lets its task start the next tick, and a
    /// scheduled one may let a waiting backfill start.
    pub(super) fn backfill_runs_changed(&mut self, runs_key: &str) {
        if let Some(task) = runs_key.strip_suffix("@backfill") {
            self.manual.backfilling.remove(task);
        }
        self.start_backfills();
    }
}
