//! Claiming a request's run: the one fenced step a manual run, a chained run (`after`) and a
//! backfill tick share. The request's znode (a trigger, a backfill request) is set to its
//! claimed state in one multi-op with `check(leases/<task>, 0)` and `check(tasks/<task>/epoch,
//! the version this node's take set)` (of the node's own unit for a task that runs on every node), at the version read; a reply whose outcome is unknown,
//! or a request changed meanwhile, is resolved by `sync` and a re-read, which the caller judges
//! (its own claim applied, claim again, or refused).

use super::io::{Stat, ZkFail, ZkOk, ZkOp};
use super::{Node, Then};
use super::{PoolStep, TaskStep};

/// What the reply to a request's claim says.
#[derive(Debug)]
pub(super) enum ClaimReply {
    /// Applied: the request's new stat, when the reply had it.
    Applied(Option<Stat>),
    /// The lease or its incarnation is not this node's: not claimed.
    NotLeader,
    /// The session expired: not claimed.
    SessionExpired,
    /// The request changed or went, or the outcome is unknown: read it again.
    Reread,
}

impl ClaimReply {
    pub(super) fn of(result: Result<ZkOk, ZkFail>) -> ClaimReply {
        match result {
            Ok(ZkOk::Multi(results)) => ClaimReply::Applied(match results.get(2) {
                Some(ZkOk::Stat(stat)) => Some(*stat),
                _ => None,
            }),
            Err(ZkFail::Multi { index, .. }) if index < 2 => ClaimReply::NotLeader,
            Err(ZkFail::SessionExpired) => ClaimReply::SessionExpired,
            _ => ClaimReply::Reread,
        }
    }
}

impl Node {
    /// Sends the fenced claim of a request of `task`: `path` set to `data` at `version`, if
    /// this node holds the task's lease; `false` (nothing sent) if it does not.
    pub(super) fn send_request_claim(
        &mut self,
        task: &str,
        path: String,
        data: Vec<u8>,
        version: i32,
        then: Then,
    ) -> bool {
        let Some(epoch) = self.held_version(task) else {
            return false;
        };
        let ops = vec![
            ZkOp::Check {
                path: self.paths.lease(&self.unit_of(task)),
                version: 0,
            },
            ZkOp::Check {
                path: self.paths.epoch(&self.unit_of(task)),
                version: epoch,
            },
            ZkOp::SetData {
                path,
                data,
                version: Some(version),
            },
        ];
        self.call(ZkOp::Multi(ops), then);
        true
    }

    /// A claim of `task` (a request's, or a pooled claim's on one unit) failed on its lease or
    /// epoch: whose the lease is decides, as for a scheduled claim, whether this node gives it
    /// up and takes it again (only the epoch changed: a stranger's write, or `tasks/` deleted
    /// and recreated) or counts it lost. Without it, a task whose epoch changed and that no
    /// scheduled claim comes to (a chained child without a schedule) is refused for ever.
    pub(super) fn check_refused_lease(&mut self, unit: String) {
        let path = self.paths.lease(&unit);
        self.call(ZkOp::Exists { path }, PoolStep::RefusedLeaseCheck { unit });
    }

    pub(super) fn on_refused_lease_check(&mut self, unit: String, result: Result<ZkOk, ZkFail>) {
        self.claim_found_lease(&unit, result);
    }

    /// Reads the request at `path` again after a `sync`, so the read sees the claim if it was
    /// applied; `false` (nothing sent) without a session.
    pub(super) fn reread_request(&mut self, path: String, then: Then) -> bool {
        if self.life.session.is_none() {
            return false;
        }
        self.call(ZkOp::Sync { path: path.clone() }, TaskStep::ResolveSync);
        self.call(ZkOp::GetData { path }, then);
        true
    }
}
