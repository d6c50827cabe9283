//! Lease decisions and what applies them: takes (with the epoch bump), releases, lease events,
//! and giving up a lease of this node whose data or epoch changed under it (it is taken
//! again). Which foreign leases the node trusts is `foreign.rs`.

use std::collections::BTreeSet;

use crate::coord::ClaimOutcome;
use std::time::Duration;

use super::io::{CreateMode, Level, WatchKind, ZkFail, ZkOk, ZkOp};
use super::tasks::{Lease, Regain};
use super::{AfterEnsure, AfterRecreate, Node, TAKES_IN_FLIGHT, TaskJob, Then};
use super::{LeaseStep, MemberStep};
use crate::coord::lease::{self, LeaseAction, LeaseView, Member};
use crate::coord::records::{FORMAT_VERSION, FireRecord, LeaseRecord};

/// Why this node takes a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TakeKind {
    /// As the node designated to lead the task ([`LeaseAction::Take`]).
    Designated,
    /// As a backup, because the designated node left the lease vacant too long
    /// ([`LeaseAction::Cover`]): the cover is handed back once that node acts.
    Cover,
}

/// One take of a lease: the task, and why it is taken.
#[derive(Debug, Clone)]
pub(crate) struct TakeJob {
    pub(super) task: String,
    pub(super) kind: TakeKind,
}

/// How soon at most a decision's own timer (a vacancy or a cover's hold) makes the next one:
/// a lease waits [`lease::VACANT_BOUND`] (seconds) before a backup covers it, so a tenth of a
/// second later changes nothing.
const RECHECK_EVERY: Duration = Duration::from_millis(100);

impl Node {
    /// Asks for a decision: made once, after every input ready now was handled (a burst of
    /// watch events or replies costs one decision, not one each).
    pub(super) fn decide(&mut self) {
        self.leases.decide_due = true;
    }

    /// Decides with the current view, applies the actions, publishes leadership.
    pub(super) fn decide_now(&mut self) {
        #[cfg(test)]
        {
            self.leases.decisions += 1;
        }
        self.leases.take_backlog.clear();
        if !self.ready() || self.life.relist.is_some() {
            self.publish();
            return;
        }
        self.check_tasks();
        let may_lead = self.may_lead();
        let members: Vec<Member> = self
            .view
            .members
            .values()
            .map(|m| m.member.clone())
            .collect();
        let held: BTreeSet<String> = self.tasks.held_leases().map(|(t, _)| t.clone()).collect();
        let covering = self.tasks.covering();
        self.tasks.forget_given_up_covers();
        let acting = self.acting();
        self.leases.last_decided = Some(self.io.now.mono);
        let decision = lease::decide_cached(
            &LeaseView {
                me: &self.cfg.id,
                members: &members,
                present: &self.view.present,
                held: &held,
                covering: &covering,
                vacant_since: &self.view.vacant_since,
                members_changed: self.view.members_changed,
                now: self.io.now.mono,
                may_lead,
            },
            &acting,
            &mut self.leases.rank_cache,
        );
        // Vacancy and cover timers at most every RECHECK_EVERY: their due times are spread
        // over every member's last sign of acting, and a decision per millisecond of them
        // kept every node busy during a cold start.
        self.leases.recheck_at = decision
            .recheck_at
            .map(|at| at.max(self.io.now.mono + RECHECK_EVERY));
        self.apply_lease_actions(decision.actions);
        // Foreign leases matter only to a node that may take them; a lease this session may
        // still own (a release or take without an answer) is checked whatever this node may
        // do, or it stays for as long as the session lives (simulation seed 47: a node whose
        // clock was off released a lease, the release was lost, and the lease kept the node
        // ranked first from the task to the end).
        let held_elsewhere = if may_lead {
            decision.held_elsewhere
        } else {
            Vec::new()
        };
        if may_lead || !self.cfg.bugs.stray_leases_checked_only_when_leading {
            self.verify_foreign_leases(held_elsewhere);
        }
        self.settle_regaining();
    }

    /// Sends the takes a decision asks for and stops firing the tasks it releases first, then
    /// (after their claims in flight) deletes their leases; publishes in between.
    fn apply_lease_actions(&mut self, actions: Vec<LeaseAction>) {
        let mut releases = Vec::new();
        for action in actions {
            match action {
                LeaseAction::Release(task) => releases.push(task),
                LeaseAction::Take(task) => self.take(TakeJob {
                    task,
                    kind: TakeKind::Designated,
                }),
                LeaseAction::Cover(task) => self.take(TakeJob {
                    task,
                    kind: TakeKind::Cover,
                }),
            }
        }
        let releases: Vec<(String, i32)> = releases
            .into_iter()
            .filter_map(|task| self.tasks.unhold(&task).map(|epoch| (task, epoch)))
            .collect();
        self.publish();
        for (task, epoch) in releases {
            self.queue_task_job(task, TaskJob::Release { epoch });
        }
    }

    /// Decides again in `delay` at the latest.
    pub(super) fn recheck_in(&mut self, delay: Duration) {
        let at = self.io.now.mono + delay;
        super::acting::sooner(&mut self.leases.recheck_at, at);
    }

    fn take(&mut self, job: TakeJob) {
        if self.tasks.is_taking(&job.task) {
            return;
        }
        if self.tasks.taking() >= TAKES_IN_FLIGHT {
            // A bounded number in flight: the rest as those finish.
            self.leases.take_backlog.push_back(job);
            return;
        }
        self.tasks.start_take(&job.task, self.io.now.mono);
        self.send_first_take(job);
    }

    /// A take decided on: one multi that also creates the fire record when the session's
    /// listing found none, else the take of an existing record.
    fn send_first_take(&mut self, job: TakeJob) {
        if self.view.unrecorded.remove(&job.task) {
            self.send_fresh_take(job);
        } else {
            self.send_take(job);
        }
    }

    /// A take is no longer in flight: forgets it and sends the next of the backlog, unless a
    /// decision is due (it lists the backlog again). When it was sent, if it was in flight.
    fn take_finished(&mut self, task: &str) -> Option<Duration> {
        let sent = self.tasks.take_finished(task);
        while self.tasks.taking() < TAKES_IN_FLIGHT && !self.leases.decide_due && self.ready() {
            let Some(next) = self.leases.take_backlog.pop_front() else {
                break;
            };
            let gone = self.view.present.contains(&next.task)
                || !matches!(self.tasks.lease(&next.task), Lease::Free { .. });
            if !gone {
                self.tasks.start_take(&next.task, self.io.now.mono);
                self.send_first_take(next);
            }
        }
        sent
    }

    /// Takes the lease of `task`: creates the ephemeral lease and bumps the task's epoch in one
    /// multi-op, so every lease incarnation owns a distinct epoch version.
    pub(super) fn send_take(&mut self, job: TakeJob) {
        let data = serde_json::to_vec(&LeaseRecord {
            format: FORMAT_VERSION,
            node: self.cfg.id.clone(),
            session: self.session_hex(),
            since: self.io.now.wall,
        })
        .expect("serializes");
        let ops = vec![
            ZkOp::Create {
                path: self.paths.lease(&job.task),
                data,
                mode: CreateMode::Ephemeral,
                acl: self.cfg.acl,
            },
            ZkOp::SetData {
                path: self.paths.epoch(&job.task),
                data: Vec::new(),
                version: None,
            },
        ];
        self.call(ZkOp::Multi(ops), LeaseStep::Take(job));
    }

    pub(super) fn on_take(&mut self, job: TakeJob, result: Result<ZkOk, ZkFail>) {
        match result {
            Ok(ZkOk::Multi(results)) => match results.get(1) {
                Some(ZkOk::Stat(stat)) => self.took(job, stat.version),
                _ => self.take_failed(job.task, "unexpected multi answer".into()),
            },
            Err(ZkFail::Multi { index: 1, error }) if *error == ZkFail::NoNode => {
                // First lease of this task in the cluster: create its record and epoch and
                // take the lease in one multi.
                self.send_fresh_take(job);
            }
            Err(ZkFail::Multi { index: 0, error }) if *error == ZkFail::NodeExists => {
                // Held by someone, perhaps by this very session (a take whose answer was
                // lost): ask the server whose it is.
                let path = self.paths.lease(&job.task);
                self.call(ZkOp::Exists { path }, LeaseStep::TakeOwner(job));
            }
            Err(ZkFail::Multi { index: 0, error }) if *error == ZkFail::NoNode => {
                // leases/ was deleted.
                self.recreate_tree(AfterRecreate::Take(job));
            }
            Ok(_) => self.take_failed(job.task, "unexpected answer".into()),
            Err(error) => {
                if error.outcome_unknown() {
                    // The lease may be this session's now: its owner is checked (below).
                    self.tasks.state_mut(&job.task).unsure = true;
                }
                self.take_failed(job.task, error.to_string())
            }
        }
    }

    /// The first take of a task: creates its fire record and epoch, bumps the epoch (so the
    /// first incarnation owns version 1, as a take of an existing epoch would) and creates the
    /// lease, in one multi: one write where creating the znodes and taking again cost three
    /// (a 20-node cold start of 10,000 new tasks is bound by the server's writes).
    fn send_fresh_take(&mut self, job: TakeJob) {
        let task = &job.task;
        let lease = serde_json::to_vec(&LeaseRecord {
            format: FORMAT_VERSION,
            node: self.cfg.id.clone(),
            session: self.session_hex(),
            since: self.io.now.wall,
        })
        .expect("serializes");
        let empty = serde_json::to_vec(&FireRecord::empty()).expect("serializes");
        let epoch = self.paths.epoch(task);
        let ops = vec![
            ZkOp::Create {
                path: self.paths.record(task),
                data: empty,
                mode: CreateMode::Persistent,
                acl: self.cfg.acl,
            },
            self.create_dir(epoch.clone()),
            ZkOp::SetData {
                path: epoch,
                data: Vec::new(),
                version: None,
            },
            ZkOp::Create {
                path: self.paths.lease(task),
                data: lease,
                mode: CreateMode::Ephemeral,
                acl: self.cfg.acl,
            },
        ];
        self.call(ZkOp::Multi(ops), LeaseStep::TakeFresh(job));
    }

    pub(super) fn on_take_fresh(&mut self, job: TakeJob, result: Result<ZkOk, ZkFail>) {
        match result {
            Ok(ZkOk::Multi(results)) => match results.get(2) {
                Some(ZkOk::Stat(stat)) => self.took(job, stat.version),
                _ => self.take_failed(job.task, "unexpected multi answer".into()),
            },
            Err(error) if error.outcome_unknown() => {
                // The lease may be this session's now: its owner is checked.
                self.tasks.state_mut(&job.task).unsure = true;
                self.take_failed(job.task, error.to_string())
            }
            // Some of the task's znodes exist (another node created them meanwhile, or a
            // record without an epoch), or the tree is gone: the step-by-step path copes.
            Err(_) | Ok(_) => {
                let TakeJob { task, kind } = job;
                self.ensure_task_nodes(task, AfterEnsure::Take(kind))
            }
        }
    }

    pub(super) fn on_take_owner(&mut self, job: TakeJob, result: Result<ZkOk, ZkFail>) {
        let task = job.task.clone();
        match result {
            Ok(ZkOk::Exists(Some(stat))) if Some(stat.ephemeral_owner) == self.my_session() => {
                // Ours: nobody could have bumped the epoch since.
                let path = self.paths.epoch(&task);
                self.call(ZkOp::Exists { path }, LeaseStep::TakeEpoch(job));
            }
            Ok(ZkOk::Exists(Some(_))) => {
                self.lease_seen(&task, true);
                self.view.vacant_since.remove(&task);
                self.take_finished(&task);
                self.decide();
            }
            Ok(_) => {
                // Gone again meanwhile: decide again.
                self.take_finished(&task);
                self.decide();
            }
            Err(error) => self.take_failed(task, error.to_string()),
        }
    }

    pub(super) fn on_take_epoch(&mut self, job: TakeJob, result: Result<ZkOk, ZkFail>) {
        match result {
            Ok(ZkOk::Exists(Some(stat))) => self.took(job, stat.version),
            Ok(_) => self.take_failed(job.task, "the task's epoch is gone".into()),
            Err(error) => self.take_failed(job.task, error.to_string()),
        }
    }

    fn took(&mut self, job: TakeJob, epoch: i32) {
        let TakeJob { task, kind } = job;
        let regained = self.tasks.regain(&task).is_some();
        self.tasks.set_regain(&task, None);
        self.tasks.state_mut(&task).unsure = false;
        self.lease_seen(&task, true);
        self.view.vacant_since.remove(&task);
        let sent = self.take_finished(&task);
        if self.life.stopping {
            // Taken while release_all ran: give it straight back (while it is still the
            // incarnation just taken: version 0, at the epoch this take set).
            let op = self.delete_lease_as_read(&task, 0, Some(epoch));
            self.call(op, Then::Ignore);
            if regained {
                self.finish_waiting_claim(&task);
            }
            return;
        }
        let cover = match kind {
            TakeKind::Cover => {
                self.report(
                    Level::Info,
                    "took the lease as cover: its designated node left it vacant",
                )
                .field("task", &task);
                Some(self.io.now.mono)
            }
            TakeKind::Designated => None,
        };
        self.tasks.hold(&task, epoch, cover);
        if lease::split_unit(&task).is_some_and(|(pooled, _)| self.pooled(pooled)) {
            // An item's unit that comes back to this node was claimed by others meanwhile:
            // what this node last saw of its record and result is stale.
            self.forget_record(&task);
            if let Some(state) = self.tasks.get_mut(&task) {
                state.result = None;
            }
        }
        // Decisions skip a task being taken: if the member view changed while this take was
        // in flight (a member that ranks higher joined), or this node may no longer lead,
        // decide again, which also publishes; a cover too (its hold needs a timer). Otherwise
        // only the new lease is published. While other takes are in flight both wait for
        // their next slot (at most every DECIDE_EVERY), so that takes answered one after
        // another share one (a decision or a publication per take costs O(tasks), and a cold
        // start answers thousands of takes).
        let decide = kind == TakeKind::Cover
            || !self.may_lead()
            || sent.is_none_or(|sent| self.view.view_changed >= sent);
        let last = self.tasks.taking() == 0 && self.leases.take_backlog.is_empty();
        match (decide, last) {
            (true, true) => self.decide(),
            (true, false) => self.decide_soon(),
            (false, true) => self.publish(),
            (false, false) => self.publish_soon(),
        }
        if regained {
            // The claim that waited runs again, fenced by the new epoch.
            self.start_task_job(task);
        }
    }

    /// Answers `NotLeader` to the claim that waited for `task`'s lease to be taken again.
    fn finish_waiting_claim(&mut self, task: &str) {
        if let Some(TaskJob::Claim(job)) = self.tasks.get(task).and_then(|s| s.jobs.front()) {
            let job = job.clone();
            self.finish_claim(job, Ok(ClaimOutcome::NotLeader));
        }
    }

    /// Claims waiting for a lease that this node gave up and is not taking again: answered.
    fn settle_regaining(&mut self) {
        let lost: Vec<String> = self
            .tasks
            .iter()
            .filter(|(_, s)| {
                s.lease()
                    == Lease::Free {
                        regain: Some(Regain::GivenUp),
                    }
            })
            .map(|(t, _)| t.clone())
            .collect();
        for task in lost {
            self.tasks.set_regain(&task, None);
            self.finish_waiting_claim(&task);
        }
    }

    pub(super) fn take_failed(&mut self, task: String, error: String) {
        self.take_finished(&task);
        self.report(Level::Warn, format!("taking the lease failed ({error})"))
            .field("task", &task);
        // Retried at the next decision.
        self.recheck_in(Duration::from_millis(500));
    }

    /// Deletes a lease this node gave up (a task job: after the claim in flight), only if it
    /// is still the incarnation this node took: the epoch's version says so (every take bumps
    /// it), where the lease's own version cannot (every new lease has version 0).
    pub(super) fn release_lease(&mut self, task: String, epoch: i32) {
        if self.tasks.held(&task).is_some() || self.life.session.is_none() {
            // Taken again meanwhile, or nothing to release with.
            return self.finish_task_job(&task);
        }
        let ops = vec![
            ZkOp::Check {
                path: self.paths.epoch(&task),
                version: epoch,
            },
            ZkOp::Delete {
                path: self.paths.lease(&task),
                version: None,
            },
        ];
        self.call(ZkOp::Multi(ops), LeaseStep::Released { task });
    }

    pub(super) fn on_released(&mut self, task: String, result: Result<ZkOk, ZkFail>) {
        match result {
            Ok(_) | Err(ZkFail::NoNode) => {
                self.report(Level::Debug, "lease released")
                    .field("task", &task);
            }
            Err(ZkFail::Multi { index: 1, error }) if *error == ZkFail::NoNode => {
                self.report(Level::Debug, "lease released")
                    .field("task", &task);
            }
            Err(ZkFail::Multi { index: 0, .. }) => {
                // The epoch moved: another take (the lease changed hands: not ours to delete)
                // or a stranger's write. Delete it only if it is still this session's
                // incarnation: the epoch read first, then the lease checked, then deleted if
                // the epoch is still as read (see `give_up_read_epoch`).
                let path = self.paths.epoch(&task);
                self.call(ZkOp::Exists { path }, LeaseStep::ReleaseEpoch { task });
                return;
            }
            Err(error) => {
                self.report(Level::Warn, format!("releasing the lease failed ({error})"))
                    .field("task", &task);
                self.stray_lease(&task);
            }
        }
        self.finish_task_job(&task);
    }

    /// A lease this session may still own without holding it (a release or take whose outcome
    /// is unknown): its owner is checked, whatever this node's rank and even while it may not
    /// lead, until it is known, and it is deleted if it is this session's.
    pub(super) fn stray_lease(&mut self, task: &str) {
        self.tasks.state_mut(task).unsure = true;
        self.view.trust.unverify(task);
        self.recheck_in(Duration::from_millis(500));
    }

    pub(super) fn on_release_epoch(&mut self, task: String, result: Result<ZkOk, ZkFail>) {
        let epoch = match result {
            Ok(ZkOk::Exists(Some(stat))) => Some(stat.version),
            Ok(_) => None,
            Err(_) => {
                self.stray_lease(&task);
                return self.finish_task_job(&task);
            }
        };
        let path = self.paths.lease(&task);
        self.call(
            ZkOp::Exists { path },
            LeaseStep::ReleaseCheck { task, epoch },
        );
    }

    pub(super) fn on_release_check(
        &mut self,
        task: String,
        epoch: Option<i32>,
        result: Result<ZkOk, ZkFail>,
    ) {
        if let Ok(ZkOk::Exists(Some(stat))) = result
            && Some(stat.ephemeral_owner) == self.my_session()
            && self.tasks.held(&task).is_none()
        {
            let op = self.delete_lease_as_read(&task, stat.version, epoch);
            self.call(op, LeaseStep::Released { task });
            return;
        }
        if result.is_err() {
            self.stray_lease(&task);
        }
        self.finish_task_job(&task);
    }

    /// Applies a lease event. Events are hints: a deletion of a lease this node holds is
    /// checked against the server (it may be the echo of an earlier release of a lease since
    /// taken again) before the lease counts as lost.
    pub(super) fn on_lease_event(&mut self, task: String, kind: WatchKind) {
        self.view.trust.unverify(&task);
        match kind {
            WatchKind::Created => {
                self.lease_seen(&task, true);
                self.view.vacant_since.remove(&task);
                let designated_here = self.probe_acting(&task);
                if !designated_here || !matches!(self.tasks.lease(&task), Lease::Free { .. }) {
                    // Another member's lease (or a cover's), or this node's own take: it
                    // changes none of this node's actions (a vacancy it waited on is over;
                    // the next decision sees that). A cold start creates every lease: a
                    // decision for each was most of the cluster's CPU.
                    return;
                }
            }
            WatchKind::Deleted => {
                self.lease_seen(&task, false);
                self.view
                    .vacant_since
                    .insert(task.clone(), self.io.now.mono);
                if self.tasks.held(&task).is_some() {
                    let path = self.paths.lease(&task);
                    self.call(ZkOp::Exists { path }, LeaseStep::LeaseCheck { task });
                    return;
                }
            }
            WatchKind::DataChanged => {
                if self.tasks.held(&task).is_some() {
                    // A lease is never modified (claims check version 0): someone wrote it.
                    self.give_up(
                        task,
                        "its data was changed by someone else (claims require the version this node created)",
                    );
                    return;
                }
            }
        }
        self.decide_soon();
    }

    pub(super) fn on_lease_check(&mut self, task: String, result: Result<ZkOk, ZkFail>) {
        match result {
            Ok(ZkOk::Exists(Some(stat))) if Some(stat.ephemeral_owner) == self.my_session() => {
                // Still ours: the event was the echo of an earlier release.
                self.lease_seen(&task, true);
                self.view.vacant_since.remove(&task);
            }
            Ok(_) => {
                self.report(
                    Level::Warn,
                    "this node's lease is gone (session expired, or deleted by hand)",
                )
                .field("task", &task);
                self.lease_lost(&task);
            }
            Err(error) => {
                self.report(
                    Level::Warn,
                    format!("cannot check the lease ({error}); treating it as lost"),
                )
                .field("task", &task);
                self.lease_lost(&task);
                // It may still be this session's: checked again until known.
                self.stray_lease(&task);
            }
        }
        self.decide();
    }

    /// The lease turned out to be gone: forget it and decide again.
    pub(super) fn lease_lost(&mut self, task: &str) {
        if self.tasks.unhold(task).is_some() {
            self.publish();
            self.decide();
        }
    }

    /// This node's lease (or the task's epoch) changed under it: stop firing the task, delete
    /// the lease if it is still this session's, and let the next decision take it again.
    pub(super) fn give_up(&mut self, task: String, why: &str) {
        let path = self.paths.lease(&task);
        self.report_once(
            format!("give up {task} {why}"),
            Level::Warn,
            format!(
                "this node's lease {path} is not the one it took: {why}; giving it up and taking it again"
            ),
        )
        .field("task", &task);
        self.tasks.unhold(&task);
        self.publish();
        self.give_up_read_epoch(task);
    }

    /// Giving a lease up deletes it only while it is still this node's incarnation. Its
    /// version cannot tell (every new lease has version 0), and the epoch this node took with
    /// was changed (why it gives up). So the epoch is read first, then the lease checked to be
    /// this session's, then deleted on the condition that the epoch is still as read: any take
    /// in between bumps it. (Deleting by the lease's version alone deleted the lease another
    /// node took after a stranger deleted this one: simulation seed 3437 with drains.)
    fn give_up_read_epoch(&mut self, task: String) {
        let path = self.paths.epoch(&task);
        self.call(ZkOp::Exists { path }, LeaseStep::GiveUpEpoch { task });
    }

    pub(super) fn on_give_up_epoch(&mut self, task: String, result: Result<ZkOk, ZkFail>) {
        let epoch = match result {
            Ok(ZkOk::Exists(Some(stat))) => Some(stat.version),
            // No epoch (the tree was deleted): a take recreates it first. With nothing to
            // condition on, the lease is checked and deleted by its version alone.
            Ok(_) => None,
            Err(error) => {
                self.report(
                    Level::Warn,
                    format!("giving up the changed lease failed ({error})"),
                )
                .field("task", &task);
                // The lease may still be this session's: checked until known.
                self.stray_lease(&task);
                self.tasks.given_up(&task);
                self.decide();
                return;
            }
        };
        let path = self.paths.lease(&task);
        self.call(
            ZkOp::Exists { path },
            LeaseStep::GiveUpCheck { task, epoch },
        );
    }

    pub(super) fn on_give_up_check(
        &mut self,
        task: String,
        epoch: Option<i32>,
        result: Result<ZkOk, ZkFail>,
    ) {
        match result {
            Ok(ZkOk::Exists(Some(stat))) if Some(stat.ephemeral_owner) == self.my_session() => {
                let op = self.delete_lease_as_read(&task, stat.version, epoch);
                self.call(op, LeaseStep::GiveUp { task });
            }
            _ => {
                if result.is_err() {
                    // Unknown whose the lease is: it may still be this session's, which no
                    // other node deletes (its session lives) and this one, no longer
                    // designated, would not check again (simulation seed 8661: the lease
                    // stayed with the node after the answer was lost, and the node ranked
                    // first waited for it to the end).
                    self.stray_lease(&task);
                }
                self.tasks.given_up(&task);
                self.decide()
            }
        }
    }

    /// Deletes the lease of `task` (seen at `version`) only while the epoch is still at
    /// `epoch`, read before the lease was seen: a take by anyone in between bumps it (both
    /// takes, `send_take` and `send_fresh_take`, bump it in the multi that creates the lease),
    /// and a new lease has version 0 like the old one. Without an epoch (the tree was
    /// deleted), by the lease's version alone. Used for this session's leases (release, give
    /// up, a take whose answer was lost) and for foreign ones (`foreign.rs`).
    pub(super) fn delete_lease_as_read(
        &self,
        task: &str,
        version: i32,
        epoch: Option<i32>,
    ) -> ZkOp {
        let delete = ZkOp::Delete {
            path: self.paths.lease(task),
            version: Some(version),
        };
        match epoch {
            Some(epoch) => ZkOp::Multi(vec![
                ZkOp::Check {
                    path: self.paths.epoch(task),
                    version: epoch,
                },
                delete,
            ]),
            None => delete,
        }
    }

    pub(super) fn on_give_up(&mut self, task: String, result: Result<ZkOk, ZkFail>) {
        if let Err(ZkFail::Multi { index: 0, error }) = &result
            && **error == ZkFail::BadVersion
        {
            // The epoch moved since it was read: whoever moved it may hold the lease now, or
            // this node's lease is still there: read and check again.
            self.give_up_read_epoch(task);
            return;
        }
        let result = match result {
            Err(ZkFail::Multi { error, .. }) => Err(*error),
            other => other,
        };
        if let Err(error) = result
            && error != ZkFail::NoNode
        {
            self.report(
                Level::Warn,
                format!("giving up the changed lease failed ({error})"),
            )
            .field("task", &task);
            // Not deleted, or not known to be: it may still be this session's.
            self.stray_lease(&task);
        }
        self.tasks.given_up(&task);
        self.decide();
    }

    // ---- the task's persistent znodes ----

    /// Creates the task's persistent znodes (fire record, epoch) if absent, then `after`.
    pub(super) fn ensure_task_nodes(&mut self, task: String, after: AfterEnsure) {
        let empty = serde_json::to_vec(&FireRecord::empty()).expect("serializes");
        let record = self.paths.record(&task);
        let epoch = self.paths.epoch(&task);
        self.call(
            ZkOp::Create {
                path: record,
                data: empty,
                mode: CreateMode::Persistent,
                acl: self.cfg.acl,
            },
            MemberStep::EnsureRecord { task: task.clone() },
        );
        self.call(self.create_dir(epoch), MemberStep::Ensured { task, after });
    }

    pub(super) fn on_ensure_record(&mut self, task: String, result: Result<ZkOk, ZkFail>) {
        if let Err(error) = result
            && error != ZkFail::NodeExists
        {
            self.report(
                Level::Debug,
                format!("creating the task's fire record failed ({error})"),
            )
            .field("task", &task);
        }
    }

    pub(super) fn on_ensured(
        &mut self,
        task: String,
        after: AfterEnsure,
        result: Result<ZkOk, ZkFail>,
    ) {
        match result {
            Ok(_) | Err(ZkFail::NodeExists) => match after {
                AfterEnsure::Read(after) => self.read_record_ensured(task, *after),
                AfterEnsure::Take(kind) => self.send_take(TakeJob { task, kind }),
                AfterEnsure::Heal => self.heal_read_epoch(task),
            },
            Err(ZkFail::NoNode) if !self.tasks.get(&task).is_some_and(|s| s.recreated) => {
                // tasks/ was deleted: recreate the tree, then try once more.
                self.tasks.state_mut(&task).recreated = true;
                self.recreate_tree(AfterRecreate::Ensure { task, after });
            }
            Err(error) => {
                if let Some(state) = self.tasks.get_mut(&task) {
                    state.recreated = false;
                }
                let error = crate::coord::CoordError::ZooKeeper {
                    context: "creating the task's znodes".into(),
                    message: error.to_string(),
                };
                match after {
                    AfterEnsure::Read(after) => self.after_read(task, *after, Err(error)),
                    AfterEnsure::Take(_) => self.take_failed(task, error.to_string()),
                    AfterEnsure::Heal => self.heal_failed(task),
                }
            }
        }
    }
}
