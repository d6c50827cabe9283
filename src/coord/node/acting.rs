//! Which members act, and how often the node decides about leases.
//!
//! A backup that covers a lease for its designated node hands it back as soon as that node is
//! seen acting, and does not cover while it is working through its leases
//! ([`crate::coord::lease::decide_with`]). The evidence: a lease that was just created is held
//! by the member designated for it. On a lease creation the node asks the server who holds the
//! lease, at most once per [`PROBE_EVERY`] per member and one question at a time, so a cold
//! start that creates every lease costs a few reads per member, not one per lease.
//!
//! Lease events come in bursts (a cold start creates thousands of leases at once, a departing
//! node frees hundreds), and each decision walks every task this node defines: the node
//! decides at most once per [`decide_every`] on those events (longer with more tasks), and
//! not at all on the creation of a lease it is not designated for or took itself (nothing it
//! would do changes). Seeing a
//! member act makes it decide only while it covers for someone.

use std::time::Duration;

use super::LeaseStep;
use super::Node;
use super::io::{ZkFail, ZkOk, ZkOp};
use crate::coord::lease::Acting;
use crate::coord::rank::{self, Candidate};

/// How often at most the node asks who holds a new lease, per designated member.
pub(super) const PROBE_EVERY: Duration = Duration::from_millis(500);

/// A probe not answered by then is forgotten (its session ended: its reply never comes).
const PROBE_GIVE_UP: Duration = Duration::from_secs(10);

/// How often at most lease events and answered takes make the node decide (with few tasks:
/// see [`decide_every`]) or publish its leadership. (Takes beyond those in flight are sent as
/// others finish, not at decisions, so this does not bound a migration's pace.)
pub(super) const DECIDE_EVERY: Duration = Duration::from_millis(10);

/// How long at least lease events and answered takes leave between two decisions per task
/// this node defines: a decision walks every one of them, so a node with many tasks coalesces
/// longer bursts (5 µs a task: 50 ms at 10,000 tasks, where deciding every [`DECIDE_EVERY`]
/// was about half of the nodes' CPU in a 20-node cold start).
const DECIDE_EVERY_PER_TASK: Duration = Duration::from_micros(5);

/// How often at most lease events make a node that defines `tasks` tasks decide.
pub(super) fn decide_every(tasks: usize) -> Duration {
    let per_task = DECIDE_EVERY_PER_TASK.saturating_mul(u32::try_from(tasks).unwrap_or(u32::MAX));
    DECIDE_EVERY.max(per_task)
}

/// When something done at most once per [`DECIDE_EVERY`], last at `last`, may be done again:
/// `None` when it may be done `now`.
pub(super) fn not_before(last: Option<Duration>, now: Duration) -> Option<Duration> {
    not_within(DECIDE_EVERY, last, now)
}

/// When something done at most once per `every`, last at `last`, may be done again: `None`
/// when it may be done `now`.
fn not_within(every: Duration, last: Option<Duration>, now: Duration) -> Option<Duration> {
    last.map(|at| at + every).filter(|due| now < *due)
}

/// Moves the timer `slot` to `at` if that is sooner (or it is unset).
pub(super) fn sooner(slot: &mut Option<Duration>, at: Duration) {
    *slot = Some(slot.map_or(at, |s| s.min(at)));
}

impl Node {
    /// Decides now, or at most [`decide_every`] after the last decision.
    pub(super) fn decide_soon(&mut self) {
        let tasks = self.view.my_set.as_ref().map_or(0, |(_, _, set)| set.len());
        match not_within(
            decide_every(tasks),
            self.leases.last_decided,
            self.io.now.mono,
        ) {
            Some(due) => sooner(&mut self.leases.recheck_at, due),
            None => self.decide(),
        }
    }

    /// When each member was last seen acting, in its current session.
    pub(super) fn acting(&self) -> Acting {
        self.leases
            .acting
            .iter()
            .filter(|(id, (session, _))| self.view.member_sessions.get(*id) == Some(session))
            .map(|(id, &(_, seen))| (id.clone(), seen))
            .collect()
    }

    /// A lease of `task` was created: if it is another member's to hold and that member was
    /// not seen acting lately, ask who holds it. True when this node is the one designated for
    /// `task` (another holds its lease: the caller decides).
    pub(super) fn probe_acting(&mut self, task: &str) -> bool {
        let Some(member) = self.designated(task) else {
            return false;
        };
        if member == self.cfg.id {
            return true;
        }
        let Some(&session) = self.view.member_sessions.get(&member) else {
            return false;
        };
        let recent = self
            .leases
            .acting
            .get(&member)
            .is_some_and(|&(s, seen)| s == session && self.io.now.mono < seen + PROBE_EVERY);
        let asking = self
            .leases
            .probing
            .get(&member)
            .is_some_and(|&sent| self.io.now.mono < sent + PROBE_GIVE_UP);
        if recent || asking {
            return false;
        }
        self.leases.probing.insert(member.clone(), self.io.now.mono);
        let path = self.paths.lease(task);
        let seen = self.io.now.mono;
        self.call(ZkOp::Exists { path }, LeaseStep::Acting { member, seen });
        false
    }

    /// The designated member of `task`: from the last decision's ranks while the members are
    /// the same (a cold start creates every lease, and ranking each anew was a fifth of a
    /// node's CPU), else ranked here.
    fn designated(&self, task: &str) -> Option<String> {
        let members = self.view.members.values().map(|m| &m.member);
        if let Some(id) = self.leases.rank_cache.designated(task, members) {
            return Some(id.to_string());
        }
        let candidates = self
            .view
            .members
            .values()
            .filter(|m| m.member.eligible(task))
            .map(|m| Candidate {
                id: &m.member.id,
                release: &m.member.release,
                seed: m.member.seed,
            });
        rank::designated(task, candidates).map(|d| d.id.to_string())
    }

    pub(super) fn on_acting(
        &mut self,
        member: String,
        seen: Duration,
        result: Result<ZkOk, ZkFail>,
    ) {
        self.leases.probing.remove(&member);
        let Ok(ZkOk::Exists(Some(stat))) = result else {
            return;
        };
        if self.view.member_sessions.get(&member) != Some(&stat.ephemeral_owner) {
            return;
        }
        let newer = self
            .leases
            .acting
            .get(&member)
            .is_none_or(|&(s, at)| s != stat.ephemeral_owner || at < seen);
        if newer {
            self.leases
                .acting
                .insert(member, (stat.ephemeral_owner, seen));
            // Acting only postpones covers (the vacancy timer's decision reads it then) and
            // ends them early: decide now only if this node covers for someone.
            if self.tasks.covers() {
                self.decide_soon();
            }
        }
    }
}
