//! The node's own state per task, in one map: its hold on the task's lease ([`Lease`]), the
//! fire record and result it last saw, and the work queued on the task.
//!
//! What the node sees of other nodes' leases (which leases exist, since when one is vacant,
//! which foreign leases it trusts) is not here: it covers every task of the cluster, and
//! lease decisions read it as sets (`present`, `vacant_since` in [`super::Node`]).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::TaskJob;
use crate::coord::records::FireRecord;

/// This node's hold on one task's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lease {
    /// Neither held nor being taken by this node, as far as it knows.
    Free {
        /// A claim waits for this lease to be taken again.
        regain: Option<Regain>,
    },
    /// A take is in flight (at most [`super::TAKES_IN_FLIGHT`] at once).
    Taking {
        /// When it was sent: a take answered after the member view changed needs a decision.
        sent: Duration,
        /// A claim waits for this take.
        regain: Option<Regain>,
    },
    /// Held: claims may be sent, fenced on `epoch`.
    Held {
        /// The version of the task's epoch znode that this node's take set: every take bumps
        /// it, so it names this lease incarnation.
        epoch: i32,
        /// When it was taken as cover for a designated node that left it vacant (the cover is
        /// handed back once that node acts); `None` when taken as the designated node.
        cover: Option<Duration>,
    },
}

/// Where a claim that found the task's epoch changed under this node's lease is: the lease is
/// given up and taken again, and the claim runs with the new epoch (or answers `NotLeader` if
/// it is not taken again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Regain {
    /// The lease is being given up (deleted if it is still this session's).
    GivingUp,
    /// Given up: the claim waits for the next take.
    GivenUp,
}

/// Everything the node keeps about one task.
#[derive(Debug, Default)]
pub(crate) struct TaskState {
    /// This node's hold on the lease; changed only through [`Tasks`], which counts the takes.
    lease: Lease,
    /// A take or release whose outcome is unknown: the lease may be this session's without
    /// the node knowing, so its owner is checked whatever this node's rank, drained or not.
    pub(super) unsure: bool,
    /// The fire record as last read or written, with its znode version (a claim sends it
    /// without reading it again; dropped when a claim conflicts and when the session ends).
    pub(super) record: Option<(FireRecord, i32)>,
    /// The stored result's tick and znode version, as last written or read (a run's end is
    /// recorded in one round trip).
    pub(super) result: Option<(DateTime<Utc>, i32)>,
    /// The lease incarnation (epoch version) during which no foreign live run was found: the
    /// runs are not listed again while it lasts (other nodes cannot start one without it).
    pub(super) no_foreign_runs: Option<i32>,
    /// Work on the task that must not overlap (claims, releasing the lease), in order; the
    /// head is in flight.
    pub(super) jobs: VecDeque<TaskJob>,
    /// The task's znodes were found missing and the tree recreated for it (once only).
    pub(super) recreated: bool,
    /// A run's result held for the claim of the tick queued behind it (`queued_start`).
    pub(super) held_result: Option<super::runs::RunEndedJob>,
    /// Of a pooled task's unit: the lease incarnation (epoch) it was held in when the daemon
    /// last read its task's fire record. The daemon's claims cover the unit only in that
    /// incarnation: a unit taken since may have missed ticks that the daemon's plan has not
    /// seen, and its gain makes the daemon read the record again first.
    pub(super) planned: Option<i32>,
}

impl Default for Lease {
    fn default() -> Lease {
        Lease::Free { regain: None }
    }
}

impl TaskState {
    /// This node's hold on the lease.
    pub(super) fn lease(&self) -> Lease {
        self.lease
    }

    /// Nothing worth keeping: the entry may go.
    fn is_empty(&self) -> bool {
        self.lease == Lease::default()
            && !self.unsure
            && self.record.is_none()
            && self.result.is_none()
            && self.no_foreign_runs.is_none()
            && self.jobs.is_empty()
            && !self.recreated
            && self.held_result.is_none()
    }
}

/// The per-task state of every task the node has something to keep about, by name.
#[derive(Debug, Default)]
pub(crate) struct Tasks {
    states: BTreeMap<String, TaskState>,
    /// How many leases are [`Lease::Taking`] (kept with every change of a lease, as takes in
    /// flight are counted at every answer).
    taking: usize,
    /// A cover was given up since the last decision: seeing a member act still makes the node
    /// decide, as while it covers (the decision forgets it).
    cover_given_up: bool,
}

impl Tasks {
    /// The state of `task`, if any is kept.
    pub(super) fn get(&self, task: &str) -> Option<&TaskState> {
        self.states.get(task)
    }

    /// The state of `task`, if any is kept, to change.
    pub(super) fn get_mut(&mut self, task: &str) -> Option<&mut TaskState> {
        self.states.get_mut(task)
    }

    /// The state of `task`, created empty if none is kept.
    pub(super) fn state_mut(&mut self, task: &str) -> &mut TaskState {
        if !self.states.contains_key(task) {
            self.states.insert(task.to_string(), TaskState::default());
        }
        self.states.get_mut(task).expect("present")
    }

    /// Every kept state, by task name.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&String, &TaskState)> {
        self.states.iter()
    }

    /// This node's hold on the lease of `task`.
    pub(super) fn lease(&self, task: &str) -> Lease {
        self.get(task).map(|s| s.lease).unwrap_or_default()
    }

    /// The epoch version of the lease of `task`, if this node holds it.
    pub(super) fn held(&self, task: &str) -> Option<i32> {
        match self.lease(task) {
            Lease::Held { epoch, .. } => Some(epoch),
            _ => None,
        }
    }

    /// Whether a take of `task` is in flight.
    pub(super) fn is_taking(&self, task: &str) -> bool {
        matches!(self.lease(task), Lease::Taking { .. })
    }

    /// The leases this node holds, with their epoch versions, by task name.
    pub(super) fn held_leases(&self) -> impl Iterator<Item = (&String, i32)> {
        self.states
            .iter()
            .filter_map(|(task, state)| match state.lease {
                Lease::Held { epoch, .. } => Some((task, epoch)),
                _ => None,
            })
    }

    /// The leases held as cover, with when each was taken.
    pub(super) fn covering(&self) -> BTreeMap<String, Duration> {
        self.states
            .iter()
            .filter_map(|(task, state)| match state.lease {
                Lease::Held {
                    cover: Some(since), ..
                } => Some((task.clone(), since)),
                _ => None,
            })
            .collect()
    }

    /// Whether this node covers a lease, or gave one up since the last decision.
    pub(super) fn covers(&self) -> bool {
        self.cover_given_up
            || self
                .states
                .values()
                .any(|state| matches!(state.lease, Lease::Held { cover: Some(_), .. }))
    }

    /// A decision saw the covers: those given up before it are forgotten.
    pub(super) fn forget_given_up_covers(&mut self) {
        self.cover_given_up = false;
    }

    /// How many takes are in flight.
    pub(super) fn taking(&self) -> usize {
        self.taking
    }

    fn set_lease(&mut self, task: &str, lease: Lease) {
        let state = self.state_mut(task);
        let was_taking = matches!(state.lease, Lease::Taking { .. });
        let was_cover = matches!(state.lease, Lease::Held { cover: Some(_), .. });
        state.lease = lease;
        let is_taking = matches!(lease, Lease::Taking { .. });
        let is_held = matches!(lease, Lease::Held { .. });
        match (was_taking, is_taking) {
            (false, true) => self.taking += 1,
            (true, false) => self.taking -= 1,
            _ => {}
        }
        if was_cover && !is_held {
            self.cover_given_up = true;
        }
    }

    /// A take of `task` was sent at `sent` (the lease is free: decisions take no held lease,
    /// and a take in flight is not sent again).
    pub(super) fn start_take(&mut self, task: &str, sent: Duration) {
        let regain = self.regain(task);
        debug_assert!(matches!(self.lease(task), Lease::Free { .. }), "{task}");
        self.set_lease(task, Lease::Taking { sent, regain });
    }

    /// The take of `task` is no longer in flight: when it was sent, if it was.
    pub(super) fn take_finished(&mut self, task: &str) -> Option<Duration> {
        let Lease::Taking { sent, regain } = self.lease(task) else {
            return None;
        };
        self.set_lease(task, Lease::Free { regain });
        Some(sent)
    }

    /// This node holds the lease of `task` now, at `epoch`, taken as cover since `cover`.
    pub(super) fn hold(&mut self, task: &str, epoch: i32, cover: Option<Duration>) {
        self.set_lease(task, Lease::Held { epoch, cover });
    }

    /// This node no longer holds the lease of `task`: its epoch version, if it did.
    pub(super) fn unhold(&mut self, task: &str) -> Option<i32> {
        let epoch = self.held(task)?;
        self.set_lease(task, Lease::default());
        Some(epoch)
    }

    /// This node holds no lease any more (it leaves the cluster).
    pub(super) fn unhold_all(&mut self) {
        let held: Vec<String> = self.held_leases().map(|(task, _)| task.clone()).collect();
        for task in held {
            self.unhold(&task);
        }
    }

    /// Where the claim waiting for the lease of `task` to be taken again is, if one waits.
    pub(super) fn regain(&self, task: &str) -> Option<Regain> {
        match self.lease(task) {
            Lease::Free { regain } | Lease::Taking { regain, .. } => regain,
            Lease::Held { .. } => None,
        }
    }

    /// Sets where the claim waiting for the lease of `task` is (`None`: no claim waits). A held
    /// lease has none: giving it up frees it first.
    pub(super) fn set_regain(&mut self, task: &str, to: Option<Regain>) {
        let lease = match self.lease(task) {
            Lease::Free { .. } => Lease::Free { regain: to },
            Lease::Taking { sent, .. } => Lease::Taking { sent, regain: to },
            Lease::Held { .. } => return,
        };
        self.set_lease(task, lease);
    }

    /// The lease of `task` was given up: a claim waiting for it now waits for the next take.
    pub(super) fn given_up(&mut self, task: &str) {
        if self.regain(task).is_some() {
            self.set_regain(task, Some(Regain::GivenUp));
        }
    }

    /// Every claim in queue, behind or in flight, taken out of the queues.
    pub(super) fn take_jobs(&mut self) -> Vec<TaskJob> {
        self.states
            .values_mut()
            .flat_map(|state| std::mem::take(&mut state.jobs))
            .collect()
    }

    /// The session ended: leases, takes, claims waiting for a lease, unknown takes and the fire
    /// records go with it (results and recreations are kept, as the jobs, answered apart).
    pub(super) fn end_session(&mut self) {
        let tasks: Vec<String> = self.states.keys().cloned().collect();
        for task in tasks {
            self.set_lease(&task, Lease::default());
            let state = self.state_mut(&task);
            state.unsure = false;
            state.record = None;
        }
        self.states.retain(|_, state| !state.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Lease, Regain, Tasks};

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn takes_in_flight_are_counted_through_every_change_of_a_lease() {
        let mut tasks = Tasks::default();
        tasks.start_take("a", ms(1));
        tasks.start_take("b", ms(2));
        assert_eq!(tasks.taking(), 2);
        assert!(tasks.is_taking("a"));
        assert_eq!(tasks.take_finished("a"), Some(ms(1)));
        assert_eq!(tasks.take_finished("a"), None);
        assert_eq!(tasks.taking(), 1);
        assert_eq!(tasks.take_finished("b"), Some(ms(2)));
        tasks.hold("b", 7, None);
        assert_eq!(tasks.taking(), 0);
        assert_eq!(tasks.held("b"), Some(7));
        assert_eq!(tasks.held("a"), None);
        tasks.start_take("c", ms(3));
        tasks.end_session();
        assert_eq!(tasks.taking(), 0);
        assert_eq!(tasks.held("b"), None);
        assert_eq!(tasks.lease("c"), Lease::Free { regain: None });
    }

    #[test]
    fn a_cover_given_up_still_counts_as_covering_until_a_decision_forgets_it() {
        let mut tasks = Tasks::default();
        assert!(!tasks.covers());
        tasks.hold("designated", 1, None);
        assert!(!tasks.covers());
        tasks.hold("covered", 2, Some(ms(5)));
        assert!(tasks.covers());
        assert_eq!(
            tasks.covering().into_iter().collect::<Vec<_>>(),
            [("covered".to_string(), ms(5))]
        );
        assert_eq!(tasks.unhold("covered"), Some(2));
        assert!(tasks.covering().is_empty());
        assert!(tasks.covers());
        tasks.forget_given_up_covers();
        assert!(!tasks.covers());
        // Giving up the designated lease is no cover given up.
        tasks.unhold("designated");
        assert!(!tasks.covers());
    }

    #[test]
    fn a_claim_waiting_for_its_lease_waits_through_a_take_and_ends_with_the_hold() {
        let mut tasks = Tasks::default();
        tasks.hold("t", 1, None);
        tasks.unhold("t");
        tasks.set_regain("t", Some(Regain::GivingUp));
        tasks.start_take("t", ms(1));
        tasks.given_up("t");
        assert_eq!(tasks.regain("t"), Some(Regain::GivenUp));
        tasks.take_finished("t");
        assert_eq!(
            tasks.lease("t"),
            Lease::Free {
                regain: Some(Regain::GivenUp)
            }
        );
        tasks.hold("t", 2, None);
        assert_eq!(tasks.regain("t"), None);
        // A held lease has no claim waiting for it.
        tasks.set_regain("t", Some(Regain::GivingUp));
        assert_eq!(tasks.regain("t"), None);
        tasks.given_up("u");
        assert_eq!(tasks.regain("u"), None);
    }
}
