//! Which foreign leases the node trusts.
//!
//! A lease counts only while it is ephemeral and owned by a live member's session. A foreign
//! lease on a task this node is designated for is checked once per incarnation; one that is
//! persistent, or owned by a session that is no member, is reported and deleted (safe: claims
//! are fenced on the lease incarnation, so a deleted lease can only make a claim fail). A lease
//! of this session found after a take whose answer was lost is deleted and taken properly.
//!
//! Either delete is conditional on the task's epoch, read before the lease that is deleted (as
//! `delete_lease_as_read` in `leases.rs`): a lease deleted and taken again in between has version
//! 0 like the one read, but its take bumped the epoch.

use std::collections::BTreeMap;
use std::time::Duration;

use super::LeaseStep;
use super::Node;
use super::io::{CreateMode, Level, Stat, ZkFail, ZkOk, ZkOp};
use super::report::foreign_owner;
use super::tasks::Lease;
use crate::coord::records::{LeaseRecord, is_path_name};

/// How long an ephemeral lease of a session that is no member's is left alone before it is
/// deleted (a member read may be in flight; a persistent lease is deleted at once).
const FOREIGN_GRACE: Duration = Duration::from_secs(2);

/// A lease no live member holds, being deleted: reported once deleted.
#[derive(Debug)]
pub(crate) struct ForeignLease {
    stat: Stat,
    /// The node its data names, whose member znode the delete proved absent.
    node: Option<String>,
}

/// What a lease's owner is checked with: the task's epoch, once a lease is to be deleted.
#[derive(Debug, Clone, Copy)]
pub(crate) enum EpochRead {
    /// Not read: the lease was read to see whose it is.
    Unread,
    /// Its version, read before the lease was read again.
    Before(i32),
}

/// What the node knows of the owner of one foreign lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trust {
    /// Not checked since the last lease event or member change.
    Unchecked { suspect: Option<Suspect> },
    /// A check of its owner is in flight (one at a time per lease).
    Checking { suspect: Option<Suspect> },
    /// Checked to belong to a live member, until a lease event or a member change.
    Verified,
}

/// An ephemeral lease of a session that is no member's, left alone for [`FOREIGN_GRACE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Suspect {
    /// The lease znode's czxid: a lease created again is another suspect.
    czxid: i64,
    /// When it was first seen.
    since: Duration,
}

/// The node's trust in the foreign leases it checked, by task (a task absent is unchecked,
/// with no suspect).
#[derive(Debug, Default)]
pub(crate) struct ForeignTrust {
    by_task: BTreeMap<String, Trust>,
}

impl ForeignTrust {
    fn get(&self, task: &str) -> Trust {
        self.by_task
            .get(task)
            .copied()
            .unwrap_or(Trust::Unchecked { suspect: None })
    }

    fn set(&mut self, task: &str, trust: Trust) {
        if trust == (Trust::Unchecked { suspect: None }) {
            self.by_task.remove(task);
        } else {
            self.by_task.insert(task.to_string(), trust);
        }
    }

    fn suspect(&self, task: &str) -> Option<Suspect> {
        match self.get(task) {
            Trust::Unchecked { suspect } | Trust::Checking { suspect } => suspect,
            Trust::Verified => None,
        }
    }

    /// Neither verified nor being checked: a check may start.
    fn unchecked(&self, task: &str) -> bool {
        matches!(self.get(task), Trust::Unchecked { .. })
    }

    /// A check of the owner of `task`'s lease is in flight.
    fn checking(&mut self, task: &str) {
        let suspect = self.suspect(task);
        self.set(task, Trust::Checking { suspect });
    }

    /// The check in flight on `task` ended.
    fn check_done(&mut self, task: &str) {
        if let Trust::Checking { suspect } = self.get(task) {
            self.set(task, Trust::Unchecked { suspect });
        }
    }

    /// The lease of `task` belongs to a live member.
    fn verified(&mut self, task: &str) {
        self.set(task, Trust::Verified);
    }

    /// The lease of `task` is no suspect (any more).
    fn clear_suspect(&mut self, task: &str) {
        match self.get(task) {
            Trust::Unchecked { .. } => self.set(task, Trust::Unchecked { suspect: None }),
            Trust::Checking { .. } => self.set(task, Trust::Checking { suspect: None }),
            Trust::Verified => {}
        }
    }

    fn set_suspect(&mut self, task: &str, suspect: Suspect) {
        match self.get(task) {
            Trust::Unchecked { .. } | Trust::Verified => {
                self.set(
                    task,
                    Trust::Unchecked {
                        suspect: Some(suspect),
                    },
                );
            }
            Trust::Checking { .. } => self.set(
                task,
                Trust::Checking {
                    suspect: Some(suspect),
                },
            ),
        }
    }

    /// The lease of `task` changed (or may be this session's): it is checked again.
    pub(super) fn unverify(&mut self, task: &str) {
        if self.get(task) == Trust::Verified {
            self.set(task, Trust::Unchecked { suspect: None });
        }
    }

    /// Who is designated, or who is a member, may have changed: every lease is checked again.
    pub(super) fn unverify_all(&mut self) {
        self.by_task.retain(|_, trust| *trust != Trust::Verified);
    }

    /// The session ended: nothing is known of any lease.
    pub(super) fn clear(&mut self) {
        self.by_task.clear();
    }
}

impl Node {
    /// Checks, once per lease incarnation, the owner of foreign leases on tasks this node is
    /// designated for: only a live member's ephemeral lease keeps it from taking them.
    pub(super) fn verify_foreign_leases(&mut self, held_elsewhere: Vec<String>) {
        // Also a lease whose take had no answer, designated or not: it may be this session's.
        let unsure: Vec<String> = self
            .tasks
            .iter()
            .filter(|(_, s)| s.unsure)
            .map(|(t, _)| t)
            .filter(|t| self.view.present.contains(*t) && held_elsewhere.binary_search(t).is_err())
            .cloned()
            .collect();
        let candidates: Vec<String> = held_elsewhere
            .into_iter()
            .chain(unsure)
            .filter(|t| matches!(self.tasks.lease(t), Lease::Free { .. }))
            .filter(|t| self.view.trust.unchecked(t))
            .collect();
        for task in candidates {
            self.view.trust.checking(&task);
            // Its data too: a zkcron lease names its node, whose absence its deletion proves.
            let path = self.paths.lease(&task);
            let epoch = EpochRead::Unread;
            self.call(
                ZkOp::GetData { path },
                LeaseStep::LeaseOwner { task, epoch },
            );
        }
    }

    pub(super) fn on_lease_owner(
        &mut self,
        task: String,
        epoch: EpochRead,
        result: Result<ZkOk, ZkFail>,
    ) {
        self.view.trust.check_done(&task);
        let path = self.paths.lease(&task);
        let (data, stat) = match result {
            Ok(ZkOk::Data(data, stat)) => (data, stat),
            // Read without its data: no name to prove absent.
            Ok(ZkOk::Exists(Some(stat))) => (Vec::new(), stat),
            Err(ZkFail::NoAuth) => {
                // Unreadable to this node (a stranger's ACL): its owner is what is checked.
                self.view.trust.checking(&task);
                self.call(ZkOp::Exists { path }, LeaseStep::LeaseOwner { task, epoch });
                return;
            }
            Ok(ZkOk::Exists(None)) | Err(ZkFail::NoNode) => {
                if self.lease_seen(&task, false) {
                    self.view.vacant_since.insert(task, self.io.now.mono);
                }
                self.decide();
                return;
            }
            Ok(_) => return,
            Err(error) => {
                self.report(
                    Level::Debug,
                    format!("cannot check a lease's owner ({error}); checking again"),
                )
                .field("task", &task);
                self.recheck_in(Duration::from_millis(500));
                return;
            }
        };
        // An ephemeral lease exists only while its session lives: a session once seen as a
        // member is a live zkcron node whose member znode is gone for now (deleted by hand,
        // being re-created); it is never foreign.
        let foreign = stat.ephemeral_owner != 0 && !self.lease_owner_alive(stat.ephemeral_owner);
        if foreign && !self.foreign_long_enough(&task, stat.czxid) {
            return;
        }
        let ours = Some(stat.ephemeral_owner) == self.my_session();
        if !ours && self.lease_owner_alive(stat.ephemeral_owner) {
            self.view.trust.clear_suspect(&task);
            self.forget_unsure(&task);
            self.view.trust.verified(&task);
            return;
        }
        if ours && !matches!(self.tasks.lease(&task), Lease::Free { .. }) {
            // Taken meanwhile (a take that found the lease this session's): not deleted.
            self.view.trust.clear_suspect(&task);
            return;
        }
        // To be deleted: only while the epoch is as read before this lease was. The lease
        // read first may have been deleted and taken by another node since (its version is 0
        // again), so it is read again after the epoch.
        let EpochRead::Before(epoch) = epoch else {
            self.view.trust.checking(&task);
            return self.heal_read_epoch(task);
        };
        self.view.trust.clear_suspect(&task);
        if ours {
            // Ours, from a take whose answer was lost: delete and take it properly.
            self.forget_unsure(&task);
            let op = self.delete_lease_as_read(&task, stat.version, Some(epoch));
            self.heal_lease(task, op, None);
        } else {
            self.delete_foreign_lease(task, &data, stat, epoch);
        }
    }

    /// The owner of the lease of `task` is known: no take or release of it is unsure.
    fn forget_unsure(&mut self, task: &str) {
        if let Some(state) = self.tasks.get_mut(task) {
            state.unsure = false;
        }
    }

    /// Reads the epoch of `task` before reading again its lease, which is to be deleted.
    pub(super) fn heal_read_epoch(&mut self, task: String) {
        let path = self.paths.epoch(&task);
        self.call(ZkOp::Exists { path }, LeaseStep::LeaseOwnerEpoch { task });
    }

    /// The epoch read before a lease to be deleted: the lease is read again (with its data:
    /// the node it names is proved absent by the delete). A task without an epoch (a
    /// stranger's lease on a task never taken, or a tree deleted by hand) gets its znodes
    /// first, as a take would create them: with no epoch the delete could only be by the
    /// lease's version, which a lease deleted and taken meanwhile (a first take creates the
    /// epoch) has too.
    pub(super) fn on_lease_owner_epoch(&mut self, task: String, result: Result<ZkOk, ZkFail>) {
        let epoch = match result {
            Ok(ZkOk::Exists(Some(stat))) => EpochRead::Before(stat.version),
            Ok(ZkOk::Exists(None)) => {
                return self.ensure_task_nodes(task, super::AfterEnsure::Heal);
            }
            Ok(_) | Err(_) => return self.heal_failed(task),
        };
        let path = self.paths.lease(&task);
        self.call(
            ZkOp::GetData { path },
            LeaseStep::LeaseOwner { task, epoch },
        );
    }

    /// Checking a lease to be deleted failed: checked again soon.
    pub(super) fn heal_failed(&mut self, task: String) {
        self.view.trust.check_done(&task);
        self.recheck_in(Duration::from_millis(500));
    }

    /// Deletes a lease no live member holds. This node's member view may lag behind the
    /// server's (a node that just registered, its member znode not read yet), so the lease of
    /// an ephemeral owner that names its node is deleted only in one multi that proves that
    /// node has no member znode at that instant: creating `members/<node>` fails if it exists
    /// (and with it the whole multi), and the transient znode is deleted again at once (other
    /// nodes see it created and gone: a member they read as absent). A persistent lease, one
    /// whose data names no node, or one of an earlier session of a node registered with
    /// another session (it took its leases after registering: this node saw that), is deleted
    /// at its version. Either only while the epoch is still at `epoch` (read before `stat`).
    fn delete_foreign_lease(&mut self, task: String, data: &[u8], stat: Stat, epoch: i32) {
        let node = serde_json::from_slice::<LeaseRecord>(data)
            .ok()
            .map(|record| record.node)
            .filter(|node| stat.ephemeral_owner != 0 && is_path_name(node))
            .filter(|node| !self.view.member_sessions.contains_key(node));
        let delete = self.delete_lease_as_read(&task, stat.version, Some(epoch));
        let op = match &node {
            Some(node) => {
                let member = self.paths.member(node);
                let mut ops = vec![
                    ZkOp::Create {
                        path: member.clone(),
                        data: Vec::new(),
                        mode: CreateMode::Persistent,
                        acl: self.cfg.acl,
                    },
                    ZkOp::Delete {
                        path: member,
                        version: None,
                    },
                ];
                match delete {
                    ZkOp::Multi(delete) => ops.extend(delete),
                    delete => ops.push(delete),
                }
                ZkOp::Multi(ops)
            }
            None => delete,
        };
        self.heal_lease(task, op, Some(ForeignLease { stat, node }));
    }

    /// Sends `op`, which deletes the lease of `task` (its last operation, if a multi).
    fn heal_lease(&mut self, task: String, op: ZkOp, foreign: Option<ForeignLease>) {
        let lease_at = match &op {
            ZkOp::Multi(ops) => ops.len() - 1,
            _ => 0,
        };
        let then = LeaseStep::HealLease {
            task,
            foreign,
            lease_at,
        };
        self.call(op, then);
    }

    /// Whether the session `owner` of an existing ephemeral lease is a zkcron node's: a live
    /// member's, or one that was seen as a member (its lease proves the session still lives).
    fn lease_owner_alive(&self, owner: i64) -> bool {
        self.live_owner(owner) || self.view.seen_sessions.contains(&owner)
    }

    /// Whether the ephemeral lease `czxid` of a session that is no member's has been seen so
    /// for [`FOREIGN_GRACE`]: the member znode of a node that just (re)started may still be
    /// on its way to this node. Until then the lease is checked again.
    fn foreign_long_enough(&mut self, task: &str, czxid: i64) -> bool {
        let now = self.io.now.mono;
        let first = match self.view.trust.suspect(task) {
            Some(suspect) if suspect.czxid == czxid => suspect.since,
            _ => {
                let since = now;
                self.view.trust.set_suspect(task, Suspect { czxid, since });
                now
            }
        };
        if now >= first + FOREIGN_GRACE {
            return true;
        }
        self.recheck_in(first + FOREIGN_GRACE - now);
        false
    }

    pub(super) fn on_heal_lease(
        &mut self,
        task: String,
        foreign: Option<ForeignLease>,
        lease_at: usize,
        result: Result<ZkOk, ZkFail>,
    ) {
        match result {
            Ok(_) | Err(ZkFail::NoNode) => {
                if let (Ok(_), Some(ForeignLease { stat, .. })) = (&result, &foreign) {
                    let path = self.paths.lease(&task);
                    let owner = foreign_owner(stat.ephemeral_owner);
                    self.report_once(
                        format!("foreign lease {path} {}", stat.czxid),
                        Level::Error,
                        format!(
                            "deleting the lease {path}: no live zkcron node holds it ({owner}), and it kept the task from being led. If it comes back, find what writes it; to remove it by hand: {cli} delete {path}", cli = self.zk_cli()
                        ),
                    )
                    .field("task", &task);
                }
                if self.lease_seen(&task, false) {
                    self.view.vacant_since.insert(task, self.io.now.mono);
                }
            }
            Err(ZkFail::Multi { index, error })
                if index == lease_at && *error == ZkFail::NoNode =>
            {
                if self.lease_seen(&task, false) {
                    self.view.vacant_since.insert(task, self.io.now.mono);
                }
            }
            Err(ZkFail::Multi { index: 0, error }) if *error == ZkFail::NodeExists => {
                // The node the lease names is registered: this node's view lagged. The lease is
                // kept, the member read, and the lease checked again (with a fresh grace).
                if let Some(node) = foreign.and_then(|f| f.node) {
                    self.report(
                        Level::Debug,
                        "kept a lease of no known member: the node it names is registered",
                    )
                    .field("task", &task)
                    .field("member", &node);
                    self.read_member(node, super::members::MemberRead::Change);
                }
            }
            Err(ZkFail::Multi { error, .. }) if !error.outcome_unknown() => {
                // `members/` is gone (recreated on its event), or the epoch moved (the lease
                // may be another incarnation now): checked again; this session's lease (it
                // may still be) whatever this node's rank.
                if foreign.is_none() {
                    self.stray_lease(&task);
                } else {
                    self.recheck_in(Duration::from_millis(500));
                }
            }
            Err(error) => {
                self.report(
                    Level::Warn,
                    format!("deleting a lease no live node holds failed ({error})"),
                )
                .field("task", &task);
                self.stray_lease(&task);
            }
        }
        self.decide();
    }
}
