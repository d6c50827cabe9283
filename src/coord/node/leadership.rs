//! What the node tells the daemon it may fire: the held leases as [`Leadership`], paused
//! unless connected and listed, with the pending manual runs and backfills of the led tasks,
//! why it is paused and how often the session was lost.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use super::Leadership;
use super::acting::{not_before, sooner};
use super::{Level, Node, Output};
use crate::coord::lease;

/// Deciding about leases and publishing the leadership: when to decide, the ranks, the takes
/// waiting, the members seen acting, and the leadership as last published.
#[derive(Debug)]
pub(super) struct Leases {
    /// When to decide about leases again (a vacancy timer).
    pub(super) recheck_at: Option<Duration>,
    /// A decision was asked for: made at the next [`Node::handle_timeout`], which
    /// [`Node::poll_timeout`] asks for at once.
    pub(super) decide_due: bool,
    /// This node's rank for every task it defines, kept while the members stay the same.
    pub(super) rank_cache: super::lease::RankCache,
    /// Decisions made, for the tests that bound them.
    #[cfg(test)]
    pub(super) decisions: usize,
    /// Members seen acting: their session, and when (see `acting`).
    pub(super) acting: BTreeMap<String, (i64, Duration)>,
    /// Probes in flight, by member, with when sent (a reply of an ended session never comes).
    pub(super) probing: BTreeMap<String, Duration>,
    /// When the last decision was made: lease events decide at most every `DECIDE_EVERY`.
    pub(super) last_decided: Option<Duration>,
    /// Takes the last decision asked for beyond [`TAKES_IN_FLIGHT`], sent as takes in flight
    /// finish (so a node's share of a cold start is taken at the server's pace, not one batch
    /// per decision); cleared by every decision, which lists them again.
    pub(super) take_backlog: VecDeque<super::leases::TakeJob>,
    /// When the leadership was last published (a publication at most every `DECIDE_EVERY`
    /// while many takes are answered).
    pub(super) last_published: Option<Duration>,
    /// When to publish the leases taken since the last publication.
    pub(super) publish_at: Option<Duration>,
    /// The leadership as last published to the daemon.
    pub(super) leadership: Leadership,
}

impl Leases {
    /// Nothing decided yet; `leadership` is what the daemon was first told.
    pub(super) fn new(leadership: Leadership) -> Leases {
        Leases {
            recheck_at: None,
            decide_due: false,
            rank_cache: lease::RankCache::default(),
            #[cfg(test)]
            decisions: 0,
            acting: BTreeMap::new(),
            probing: BTreeMap::new(),
            last_decided: None,
            take_backlog: VecDeque::new(),
            last_published: None,
            publish_at: None,
            leadership,
        }
    }
}

impl Node {
    /// Publishes the held leases as leadership (paused unless connected and listed).
    pub(super) fn publish(&mut self) {
        self.leases.publish_at = None;
        self.leases.last_published = Some(self.io.now.mono);
        let tasks: BTreeSet<Arc<str>> = if self.life.stopping {
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
        let l = &self.leases.leadership;
        let same = l.paused == paused
            && *l.tasks == tasks
            && *l.gained == gained
            && *l.items_held == items_held
            && (paused || l.why_paused.is_none());
        if same && *l.triggers == triggers && *l.backfills == backfills {
            return;
        }
        self.leases.leadership.triggers = Arc::new(triggers);
        self.leases.leadership.backfills = Arc::new(backfills);
        if same {
            // Only the pending manual runs or backfills changed.
            self.io
                .out
                .push_back(Output::Leadership(self.leases.leadership.clone()));
            return;
        }
        let leading = tasks.len();
        self.leases.leadership.gained = Arc::new(gained);
        self.leases.leadership.items_held = Arc::new(items_held);
        self.leases.leadership.paused = paused;
        self.leases.leadership.tasks = Arc::new(tasks);
        if !paused {
            self.leases.leadership.why_paused = None;
        }
        self.io
            .out
            .push_back(Output::Leadership(self.leases.leadership.clone()));
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
        let mut gained = (*self.leases.leadership.gained).clone();
        // A unit taken again since (a new incarnation) counts as gained too.
        let grown: BTreeSet<&str> = held
            .difference(&self.pool.published)
            .map(|(unit, _)| self.task_of(unit))
            .filter(|task| self.leases.leadership.tasks.contains(*task) && tasks.contains(*task))
            .collect();
        for task in grown {
            *gained.entry(task.to_string()).or_default() += 1;
        }
        gained.retain(|task, _| tasks.contains(task.as_str()));
        self.pool.published = held;
        gained
    }

    /// How many units of each pooled task in `tasks` this node holds (of those
    /// [`Node::count_gains`] just noted as published).
    fn items_held(&self, tasks: &BTreeSet<Arc<str>>) -> BTreeMap<String, usize> {
        let mut held = BTreeMap::new();
        for (unit, _) in &self.pool.published {
            let task = self.task_of(unit);
            if tasks.contains(task) {
                *held.entry(task.to_string()).or_default() += 1;
            }
        }
        held
    }

    /// Publishes now, or at most [`super::acting::DECIDE_EVERY`] after the last publication.
    pub(super) fn publish_soon(&mut self) {
        match not_before(self.leases.last_published, self.io.now.mono) {
            Some(due) => sooner(&mut self.leases.publish_at, due),
            None => self.publish(),
        }
    }

    pub(super) fn set_why_paused(&mut self, why: String) {
        if self.leases.leadership.why_paused.as_ref() == Some(&why) {
            return;
        }
        self.leases.leadership.why_paused = Some(why);
        self.io
            .out
            .push_back(Output::Leadership(self.leases.leadership.clone()));
    }

    pub(super) fn count_session_loss(&mut self) {
        self.leases.leadership.session_losses += 1;
        self.io
            .out
            .push_back(Output::Leadership(self.leases.leadership.clone()));
    }
}
