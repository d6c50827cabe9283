//! What the node tells the daemon it may fire: the held leases as [`Leadership`], paused
//! unless connected and listed, with the pending manual runs and backfills of the led tasks,
//! why it is paused and how often the session was lost.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::acting::{not_before, sooner};
use super::{Level, Node, Output};
use crate::coord::lease;

impl Node {
    /// Publishes the held leases as leadership (paused unless connected and listed).
    pub(super) fn publish(&mut self) {
        self.publish_at = None;
        self.last_published = Some(self.now.mono);
        let tasks: BTreeSet<Arc<str>> = if self.stopping {
            BTreeSet::new()
        } else {
            self.tasks
                .held_leases()
                .map(|(lease, _)| Arc::from(self.task_of(lease)))
                .collect()
        };
        let paused = !self.firing();
        let gained = self.count_gains(&tasks);
        let items_held = self.items_held(&tasks);
        let triggers = self.led_triggers(&tasks);
        let backfills = self.led_backfills(&tasks);
        // A new leader ends the ticks its tasks' backfills lost with their node.
        self.sweep_backfills(false);
        let l = &self.leadership;
        let same = l.paused == paused
            && *l.tasks == tasks
            && *l.gained == gained
            && *l.items_held == items_held
            && (paused || l.why_paused.is_none());
        if same && *l.triggers == triggers && *l.backfills == backfills {
            return;
        }
        self.leadership.triggers = Arc::new(triggers);
        self.leadership.backfills = Arc::new(backfills);
        if same {
            // Only the pending manual runs or backfills changed.
            self.out
                .push_back(Output::Leadership(self.leadership.clone()));
            return;
        }
        let leading = tasks.len();
        self.leadership.gained = Arc::new(gained);
        self.leadership.items_held = Arc::new(items_held);
        self.leadership.paused = paused;
        self.leadership.tasks = Arc::new(tasks);
        if !paused {
            self.leadership.why_paused = None;
        }
        self.out
            .push_back(Output::Leadership(self.leadership.clone()));
        self.report(Level::Info, "leases changed")
            .field("leading", leading)
            .field("paused", paused);
    }

    /// The pooled tasks' counts of units gained (see [`crate::coord::Leadership::gained`]):
    /// one more for each task published before and again in `tasks` whose held units grew.
    fn count_gains(&mut self, tasks: &BTreeSet<Arc<str>>) -> BTreeMap<String, u64> {
        let held: BTreeSet<(String, i32)> = self
            .tasks
            .held_leases()
            .filter(|(lease, _)| {
                lease::split_unit(lease).is_some_and(|(task, _)| self.pooled(task))
            })
            .map(|(lease, epoch)| (lease.clone(), epoch))
            .collect();
        let mut gained = (*self.leadership.gained).clone();
        // A unit taken again since (a new incarnation) counts as gained too.
        let grown: BTreeSet<&str> = held
            .difference(&self.published_units)
            .map(|(unit, _)| self.task_of(unit))
            .filter(|task| self.leadership.tasks.contains(*task) && tasks.contains(*task))
            .collect();
        for task in grown {
            *gained.entry(task.to_string()).or_default() += 1;
        }
        gained.retain(|task, _| tasks.contains(task.as_str()));
        self.published_units = held;
        gained
    }

    /// How many units of each pooled task in `tasks` this node holds (of those
    /// [`Node::count_gains`] just noted as published).
    fn items_held(&self, tasks: &BTreeSet<Arc<str>>) -> BTreeMap<String, usize> {
        let mut held = BTreeMap::new();
        for (unit, _) in &self.published_units {
            let task = self.task_of(unit);
            if tasks.contains(task) {
                *held.entry(task.to_string()).or_default() += 1;
            }
        }
        held
    }

    /// Publishes now, or at most [`super::acting::DECIDE_EVERY`] after the last publication.
    pub(super) fn publish_soon(&mut self) {
        match not_before(self.last_published, self.now.mono) {
            Some(due) => sooner(&mut self.publish_at, due),
            None => self.publish(),
        }
    }

    pub(super) fn set_why_paused(&mut self, why: String) {
        if self.leadership.why_paused.as_ref() == Some(&why) {
            return;
        }
        self.leadership.why_paused = Some(why);
        self.out
            .push_back(Output::Leadership(self.leadership.clone()));
    }

    pub(super) fn count_session_loss(&mut self) {
        self.leadership.session_losses += 1;
        self.out
            .push_back(Output::Leadership(self.leadership.clone()));
    }
}
