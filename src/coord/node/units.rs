//! Tasks that run on every node: the node holds one lease per such task, its *unit*
//! `<task>@<node-id>` ([`lease::unit_name`]), with the unit's own fire record, epoch and run
//! znodes, exactly as a task's. The daemon knows only the task: its requests name the task and
//! are served on the unit; the unit it holds is published as the task it may fire. A pooled
//! task's units (`<task>@<item>`) are taken and kept by their items' owners like any lease;
//! holding one publishes the task, whose requests are served over them (`pool`).

use std::borrow::Cow;

use super::Node;
use super::claim::ClaimKind;
use super::io::{Answered, ReqId, Request};
use super::pool::PoolAsk;
use crate::coord::{ClaimIntent, lease};

impl Node {
    /// The lease (and record) name of the daemon's `task` on this node: its unit when the
    /// task runs on every node, the first unit it holds of a pooled task (a manual run or a
    /// backfill tick is fenced on it, and kept in its history), else the task's own name.
    pub(super) fn unit_of<'a>(&self, task: &'a str) -> Cow<'a, str> {
        match self
            .view
            .my_set
            .as_ref()
            .and_then(|(_, _, set)| set.get(task))
        {
            Some(entry) if matches!(entry.holders, lease::Holders::Items(_)) => {
                match self.held_units(task).into_iter().next() {
                    Some(unit) => Cow::Owned(unit),
                    None => Cow::Borrowed(task),
                }
            }
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

    /// The leases of the tasks this node defines, as its lease decisions name them.
    pub(super) fn my_leases(&self) -> Vec<String> {
        let Some((_, _, set)) = &self.view.my_set else {
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
        if request_task(&request).is_some_and(|task| self.pooled(task)) {
            // Served over the units it holds (`on_pool_request`), or fenced on the first.
            return request;
        }
        let unit = |task: String| match self.unit_of(&task) {
            Cow::Borrowed(_) => task,
            Cow::Owned(unit) => unit,
        };
        match request {
            Request::LastClaimed { task } => Request::LastClaimed { task: unit(task) },
            Request::Claim {
                task,
                tick,
                intent,
                ticks,
            } => Request::Claim {
                task: unit(task),
                tick,
                intent,
                ticks,
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
            | Request::ReleaseAll
            | Request::Close) => other,
        }
    }

    /// Serves `request` if it names a pooled task (over the units this node holds, see
    /// `pool`, `pool_orphan`); else hands it back. Runs elsewhere never hold back a node's run
    /// of a pooled task: `overlap` applies per node run.
    pub(super) fn on_pool_request(&mut self, req: ReqId, request: Request) -> Option<Request> {
        let task = match &request {
            Request::LastClaimed { task }
            | Request::Claim { task, .. }
            | Request::QueuedTick { task }
            | Request::RunsElsewhere { task }
            | Request::RunsEndedElsewhere { task }
            | Request::OrphanedTick { task }
            | Request::Reclaim { task, .. }
            | Request::LastResult { task } => task,
            Request::RunEnded { task, result } if !result.manual => task,
            _ => return Some(request),
        };
        if !self.pooled(task) {
            return Some(request);
        }
        match request {
            Request::LastClaimed { task } => self.pool_request(req, task, PoolAsk::LastClaimed),
            Request::Claim {
                task,
                tick,
                intent,
                ticks,
            } => {
                let ask = PoolAsk::Claim {
                    tick,
                    intent,
                    ticks,
                    kind: ClaimKind::Fresh,
                    conflicts: Default::default(),
                    plan: Some(self.planned_units(&task)),
                };
                self.pool_request(req, task, ask)
            }
            Request::Reclaim { task, tick } => {
                let ask = PoolAsk::Claim {
                    tick,
                    intent: ClaimIntent::Run,
                    ticks: Vec::new(),
                    kind: ClaimKind::Rerun,
                    conflicts: Default::default(),
                    plan: None,
                };
                self.pool_request(req, task, ask)
            }
            Request::QueuedTick { task } => self.pool_request(req, task, PoolAsk::Queued),
            Request::RunsElsewhere { .. } => self.answer(req, Ok(Answered::Count(0))),
            Request::RunsEndedElsewhere { .. } => self.answer(req, Ok(Answered::Done)),
            Request::OrphanedTick { task } => self.pool_orphaned_tick(req, task),
            Request::LastResult { task } => {
                let unit = self.held_units(&task).into_iter().next();
                let unit = unit.unwrap_or_else(|| lease::unit_name(&task, ""));
                self.last_result(req, unit)
            }
            Request::RunEnded { task, result } => self.pool_run_ended(req, task, result),
            _ => unreachable!("matched above"),
        }
        None
    }
}

/// The task `request` names, if it names one.
fn request_task(request: &Request) -> Option<&str> {
    match request {
        Request::LastClaimed { task }
        | Request::Claim { task, .. }
        | Request::OrphanedTick { task }
        | Request::Reclaim { task, .. }
        | Request::RunsElsewhere { task }
        | Request::QueuedTick { task }
        | Request::RunsEndedElsewhere { task }
        | Request::RunEnded { task, .. }
        | Request::LastResult { task }
        | Request::ClaimManual { task, .. } => Some(task),
        Request::Publish(_) | Request::ReleaseAll | Request::Close => None,
    }
}
