//! Tasks that run on every node: the node holds one lease per such task, its *unit*
//! `<task>@<node-id>` ([`lease::unit_name`]), with the unit's own fire record, epoch and run
//! znodes, exactly as a task's. The daemon knows only the task: its requests name the task and
//! are served on the unit; the unit it holds is published as the task it may fire. A pooled
//! task's units (`<task>@<item>`) are taken and kept by their items' owners like any lease.

use std::borrow::Cow;

use super::Node;
use super::io::Request;
use crate::coord::lease;

impl Node {
    /// The lease (and record) name of the daemon's `task` on this node: its unit when the
    /// task runs on every node, else the task's own name.
    pub(super) fn unit_of<'a>(&self, task: &'a str) -> Cow<'a, str> {
        match self.my_set.as_ref().and_then(|(_, _, set)| set.get(task)) {
            Some(entry) => lease::lease_name(task, entry, &self.cfg.id),
            None => Cow::Borrowed(task),
        }
    }

    /// The task a lease this node holds belongs to: the task of one of its own units or of
    /// an item's unit of a pooled task, else the lease's name.
    pub(super) fn task_of<'a>(&self, lease: &'a str) -> &'a str {
        match lease::split_unit(lease) {
            Some((task, node)) if node == self.cfg.id => task,
            Some((task, _)) if self.pooled(task) => task,
            _ => lease,
        }
    }

    /// Whether `task` is a pooled task this node defines (its leases are its items' units).
    fn pooled(&self, task: &str) -> bool {
        self.my_set
            .as_ref()
            .and_then(|(_, _, set)| set.get(task))
            .is_some_and(|entry| matches!(entry.holders, lease::Holders::Items(_)))
    }

    /// Whether holding `lease` lets the daemon fire its task. An item's unit of a pooled task
    /// does not: its owner takes and keeps it, but the claim over a node's units is not
    /// served, so the task is fired by nobody (the ZooKeeper backend refuses `work_items`).
    pub(super) fn fires_through(&self, lease: &str) -> bool {
        !lease::split_unit(lease).is_some_and(|(task, _)| self.pooled(task))
    }

    /// The leases of the tasks this node defines, as its lease decisions name them.
    pub(super) fn my_leases(&self) -> Vec<String> {
        let Some((_, _, set)) = &self.my_set else {
            return Vec::new();
        };
        set.iter()
            .flat_map(|(task, entry)| lease::lease_names(task, entry, &self.cfg.id))
            .collect()
    }

    /// `request` with the task it names replaced by its unit here (see [`Node::unit_of`]);
    /// a manual run's end, a manual claim and a pause name the task itself (their znodes
    /// are the task's).
    pub(super) fn onto_units(&self, request: Request) -> Request {
        let unit = |task: String| match self.unit_of(&task) {
            Cow::Borrowed(_) => task,
            Cow::Owned(unit) => unit,
        };
        match request {
            Request::LastClaimed { task } => Request::LastClaimed { task: unit(task) },
            Request::Claim { task, tick, intent } => Request::Claim {
                task: unit(task),
                tick,
                intent,
            },
            Request::OrphanedTick { task } => Request::OrphanedTick { task: unit(task) },
            Request::Reclaim { task, tick } => Request::Reclaim {
                task: unit(task),
                tick,
            },
            Request::RunsElsewhere { task } => Request::RunsElsewhere { task: unit(task) },
            Request::QueuedTick { task } => Request::QueuedTick { task: unit(task) },
            Request::RunsEndedElsewhere { task } => {
                Request::RunsEndedElsewhere { task: unit(task) }
            }
            Request::RunEnded { task, result } if !result.manual => Request::RunEnded {
                task: unit(task),
                result,
            },
            Request::LastResult { task } => Request::LastResult { task: unit(task) },
            other @ (Request::Publish(_)
            | Request::RunEnded { .. }
            | Request::ClaimManual { .. }
            | Request::Pause { .. }
            | Request::ReleaseAll
            | Request::Close) => other,
        }
    }
}
