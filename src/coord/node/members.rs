//! The member view: listing members and leases after (re)connecting (and checking that each
//! lease the node holds is still its session's), reading member znodes and their task sets.
//! Only ephemeral member znodes count: a persistent one was written by no live node, so it is
//! reported with its fix and never ranked.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::MemberStep;
use super::io::{Level, ZkFail, ZkOk, ZkOp};
use super::{AfterRecreate, MemberInfo, Node};
use crate::coord::records::{MemberRecord, TaskSetRecord, Unranked, decode_taskset};

/// A listing of members and leases in flight.
#[derive(Debug, Default)]
pub(crate) struct Relist {
    outstanding: usize,
    pub(super) members: BTreeMap<String, MemberInfo>,
    pub(super) ids: BTreeSet<String>,
    leases: Option<BTreeSet<String>>,
    /// The fire records listed (`tasks/`): which of this node's leases have none yet.
    records: Option<BTreeSet<String>>,
    /// Leases this node holds that were listed but found not this session's (a stranger's
    /// created in their place while the node heard nothing), with the epoch each was held at.
    not_ours: BTreeMap<String, i32>,
}

/// Why a member znode is read, which says where its record goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemberRead {
    /// One of the reads of the listing in flight: its record goes into the listing (and counts
    /// as one of its outstanding calls), which replaces the view once complete.
    Listing,
    /// A watch event, a registration that vanished or a lease that names the member: its record
    /// changes the view at once (and the listing in flight, so completing it does not undo it).
    Change,
}

/// A task set being read, and the members waiting for it.
#[derive(Debug, Default)]
pub(crate) struct Fetch {
    chunks: Vec<Option<Vec<u8>>>,
    missing: bool,
    replies: usize,
    waiters: Vec<(String, MemberRecord, MemberRead)>,
}

impl Node {
    // ---- listing ----

    pub(super) fn start_relist(&mut self) {
        if self.life.relist.is_some() {
            return;
        }
        self.life.relist = Some(Relist {
            outstanding: 3,
            ..Relist::default()
        });
        let members = self.paths.members();
        self.call(ZkOp::GetChildren { path: members }, MemberStep::ListMembers);
        let leases = self.paths.leases();
        self.call(ZkOp::GetChildren { path: leases }, MemberStep::ListLeases);
        let records = self.paths.tasks();
        self.call(ZkOp::GetChildren { path: records }, MemberStep::ListRecords);
        // The operator's marks too: a persistent watch reports nothing of a disconnection.
        let reads = self.read_control(super::control::Phase::Relist);
        self.relist_more(reads);
    }

    /// More calls belong to the listing in flight.
    pub(super) fn relist_more(&mut self, count: usize) {
        if let Some(relist) = self.life.relist.as_mut() {
            relist.outstanding += count;
        }
    }

    pub(super) fn relist_failed(&mut self, what: &str, error: ZkFail) {
        if self.life.relist.is_none() {
            // Another call of the same listing failed first and acted.
            return;
        }
        self.report(
            Level::Warn,
            format!("re-listing members and leases failed ({what}: {error})"),
        );
        self.life.relist = None;
        // The view is not current: fire nothing on it until a listing succeeds (the retry
        // lists again while `listed` is false).
        if let Some(session) = self.life.session.as_mut() {
            session.listed = false;
        }
        self.publish();
        if error == ZkFail::NoNode {
            // members/ or leases/ was deleted: create the tree again, register, then list.
            self.recreate_tree(AfterRecreate::Register);
            return;
        }
        self.retry_later();
    }

    pub(super) fn on_list_members(&mut self, result: Result<ZkOk, ZkFail>) {
        match result {
            Ok(ZkOk::Children(ids)) => {
                if let Some(relist) = self.life.relist.as_mut() {
                    relist.outstanding += ids.len();
                    relist.ids.extend(ids.iter().cloned());
                }
                for id in ids {
                    self.read_member(id, MemberRead::Listing);
                }
                self.relist_step();
            }
            Ok(_) => self.relist_step(),
            Err(error) => self.relist_failed("listing members", error),
        }
    }

    pub(super) fn on_list_leases(&mut self, result: Result<ZkOk, ZkFail>) {
        match result {
            Ok(ZkOk::Children(names)) => {
                let names: BTreeSet<String> = names.into_iter().collect();
                // A name proves nothing of the owner: a lease deleted and created by someone
                // else while this node heard no events is listed too. Whose each lease this
                // node holds is checked before the listing completes.
                let held: Vec<(String, i32)> = self
                    .tasks
                    .held_leases()
                    .filter(|(task, _)| names.contains(*task))
                    .map(|(task, epoch)| (task.clone(), epoch))
                    .collect();
                if let Some(relist) = self.life.relist.as_mut() {
                    relist.leases = Some(names);
                    relist.outstanding += held.len();
                }
                for (task, epoch) in held {
                    let path = self.paths.lease(&task);
                    self.call(
                        ZkOp::Exists { path },
                        MemberStep::RelistLeaseOwner { task, epoch },
                    );
                }
                self.relist_step();
            }
            Ok(_) => self.relist_step(),
            Err(error) => self.relist_failed("listing leases", error),
        }
    }

    pub(super) fn on_list_records(&mut self, result: Result<ZkOk, ZkFail>) {
        match result {
            Ok(ZkOk::Children(names)) => {
                if let Some(relist) = self.life.relist.as_mut() {
                    relist.records = Some(names.into_iter().collect());
                }
                self.relist_step();
            }
            Ok(_) => self.relist_step(),
            Err(error) => self.relist_failed("listing fire records", error),
        }
    }

    /// The owner of a lease this node holds, read by the listing in flight.
    pub(super) fn on_relist_lease_owner(
        &mut self,
        task: String,
        epoch: i32,
        result: Result<ZkOk, ZkFail>,
    ) {
        match result {
            Ok(ZkOk::Exists(Some(stat))) if Some(stat.ephemeral_owner) == self.my_session() => {}
            // Gone since it was listed.
            Ok(ZkOk::Exists(None)) => {
                self.lease_seen(&task, false);
            }
            // Another session's, or persistent: not the lease this node took.
            Ok(_) => {
                if let Some(relist) = self.life.relist.as_mut() {
                    relist.not_ours.insert(task, epoch);
                }
            }
            Err(error) => return self.relist_failed("checking a lease's owner", error),
        }
        self.relist_step();
    }

    /// A lease seen present or gone (a watch event, a take's answer, a read) by this node. A
    /// listing in flight whose leases were already listed is older than what was seen: it is
    /// corrected, so that completing it does not undo what was seen since. (It did: a node
    /// listing while others still took their leases, its member and task-set reads still
    /// outstanding, applied their creations and then replaced them with the older listing;
    /// it then counted those leases as vacant and covered them one by one, each a failed
    /// take multi that ZooKeeper logs as a write: up to 1,000 a minute at rest with 20 nodes.)
    /// Whether `present` changed.
    pub(super) fn lease_seen(&mut self, task: &str, present: bool) -> bool {
        let changed = if present {
            // A lease is created only beside its task's epoch, so the record exists.
            self.view.unrecorded.remove(task);
            self.view.present.insert(task.to_string())
        } else {
            self.view.present.remove(task)
        };
        if let Some(listed) = self.life.relist.as_mut().and_then(|r| r.leases.as_mut()) {
            if present {
                listed.insert(task.to_string());
            } else {
                listed.remove(task);
            }
        }
        changed
    }

    pub(super) fn relist_step(&mut self) {
        let Some(relist) = self.life.relist.as_mut() else {
            return;
        };
        relist.outstanding -= 1;
        if relist.outstanding > 0 {
            return;
        }
        let relist = self.life.relist.take().expect("present");
        let now = self.io.now.mono;
        self.view.members = relist.members;
        self.view.view_changed = now;
        // Every member znode read in the listing counts for trust, also one whose record or
        // task set this node cannot use (it still owns its leases and runs).
        let listed = relist.ids;
        self.view
            .member_sessions
            .retain(|id, _| listed.contains(id));
        if !listed.contains(&self.cfg.id)
            && self.life.registered_as.is_some()
            && !self.life.stopping
        {
            // Registered, yet not listed: this node's member znode was deleted while it was
            // disconnected, and a persistent watch reports nothing of that time (simulation
            // seed 2734: a stranger deleted `members/` while the node's connection kept
            // dropping; it re-listed, found itself no member, released every lease and never
            // registered again, so the tasks only it defines were never fired).
            self.register_again();
        }
        let leases = relist.leases.unwrap_or_default();
        // A lease this node believes it holds but that is gone, or not this session's (still
        // held at the epoch it was checked at), was lost.
        let lost: Vec<(String, &str)> = self
            .tasks
            .held_leases()
            .filter_map(|(task, epoch)| {
                if !leases.contains(task) {
                    Some((task.clone(), "lease found gone after reconnecting"))
                } else if relist.not_ours.get(task) == Some(&epoch) {
                    Some((
                        task.clone(),
                        "lease found not this session's after reconnecting (deleted and created by someone else meanwhile)",
                    ))
                } else {
                    None
                }
            })
            .collect();
        for (task, why) in lost {
            self.report(Level::Warn, why).field("task", &task);
            self.tasks.unhold(&task);
        }
        self.view.vacant_since.retain(|t, _| !leases.contains(t));
        let mut vacant = self.my_leases();
        vacant.retain(|t| !leases.contains(t));
        for task in vacant {
            self.view.vacant_since.entry(task).or_insert(now);
        }
        // A record is created with the task's first lease: a listed lease has one too.
        let records = relist.records.unwrap_or_default();
        self.view.unrecorded = self
            .my_leases()
            .into_iter()
            .filter(|t| !records.contains(t) && !leases.contains(t))
            .collect();
        self.view.present = leases;
        self.view.trust.unverify_all();
        self.control.check_due = true;
        if let Some(session) = self.life.session.as_mut() {
            session.listed = true;
        }
        self.decide();
    }

    // ---- members ----

    /// A member's znode was deleted: forget it, also in a listing in flight.
    pub(super) fn forget_member(&mut self, id: &str) {
        if let Some(relist) = self.life.relist.as_mut() {
            relist.members.remove(id);
        }
        self.view.members.remove(id);
        self.view.view_changed = self.io.now.mono;
        self.control.check_due = true;
    }

    pub(super) fn read_member(&mut self, id: String, read: MemberRead) {
        let path = self.paths.member(&id);
        self.call(ZkOp::GetData { path }, MemberStep::ReadMember { id, read });
    }

    pub(super) fn on_read_member(
        &mut self,
        id: String,
        read: MemberRead,
        result: Result<ZkOk, ZkFail>,
    ) {
        let path = self.paths.member(&id);
        let (data, stat) = match result {
            Ok(ZkOk::Data(data, stat)) => (data, stat),
            Ok(_) | Err(ZkFail::NoNode) => return self.member_resolved(id, None, read),
            Err(error) => {
                self.report(Level::Warn, format!("cannot read member ({error})"))
                    .field("member", &id);
                if read == MemberRead::Listing {
                    self.relist_failed("reading a member", error);
                }
                return;
            }
        };
        if stat.ephemeral_owner == 0 {
            self.view.member_sessions.remove(&id);
            self.report_once(
                format!("persistent member {path} {}", stat.czxid),
                Level::Error,
                format!(
                    "ignoring the member znode {path}: it is persistent, so no live zkcron node wrote it (a node's member znode is ephemeral); it would rank as a node that never takes its leases. Remove it: {cli} delete {path}", cli = self.zk_cli()
                ),
            );
            return self.member_resolved(id, None, read);
        }
        self.view
            .member_sessions
            .insert(id.clone(), stat.ephemeral_owner);
        self.view.seen_sessions.insert(stat.ephemeral_owner);
        let record: MemberRecord = match serde_json::from_slice(&data) {
            Ok(record) => record,
            Err(error) => {
                self.report(
                    Level::Warn,
                    format!("ignoring an unreadable member znode ({error})"),
                )
                .field("member", &id);
                return self.member_resolved(id, None, read);
            }
        };
        if let Some(set) = self.view.tasksets.get(&record.taskset.digest).cloned() {
            let info = self.member_info(&id, &record, set);
            return self.member_resolved(id, info, read);
        }
        let digest = record.taskset.digest.clone();
        let chunks = record.taskset.chunks;
        let fetch = self.view.fetches.entry(digest.clone()).or_default();
        fetch.waiters.push((id, record, read));
        if fetch.waiters.len() == 1 {
            fetch.chunks = vec![None; chunks.max(1)];
            fetch.missing = false;
            fetch.replies = 0;
            for index in 0..chunks.max(1) {
                let path = self.paths.chunk(&digest, index);
                self.call(
                    ZkOp::GetData { path },
                    MemberStep::ReadChunk {
                        digest: digest.clone(),
                        index,
                    },
                );
            }
        }
    }

    pub(super) fn on_read_chunk(
        &mut self,
        digest: String,
        index: usize,
        result: Result<ZkOk, ZkFail>,
    ) {
        let Some(fetch) = self.view.fetches.get_mut(&digest) else {
            return;
        };
        match result {
            Ok(ZkOk::Data(data, _)) => {
                if let Some(slot) = fetch.chunks.get_mut(index) {
                    *slot = Some(data);
                }
            }
            _ => fetch.missing = true,
        }
        fetch.replies += 1;
        if fetch.replies < fetch.chunks.len() {
            return;
        }
        let fetch = self.view.fetches.remove(&digest).expect("present");
        let set = if fetch.missing {
            None
        } else {
            let bytes: Vec<u8> = fetch.chunks.into_iter().flatten().flatten().collect();
            match serde_json::from_slice::<TaskSetRecord>(&bytes) {
                Ok(record) => Some(decode_taskset(&record)),
                Err(error) => {
                    self.report(
                        Level::Warn,
                        format!("ignoring a member whose task set is unreadable ({error})"),
                    );
                    None
                }
            }
        };
        if let Some(set) = &set {
            self.view.tasksets.insert(digest.clone(), set.clone());
        }
        for (id, record, read) in fetch.waiters {
            let info = match &set {
                Some(set) => self.member_info(&id, &record, set.clone()),
                None => {
                    self.report(
                        Level::Warn,
                        "the member's task set is missing; treating it as defining no tasks",
                    )
                    .field("member", &id);
                    None
                }
            };
            if id == self.cfg.id && info.is_none() {
                // Our own task set is gone (tasksets/ deleted): publish it again.
                self.life.registered_as = None;
                self.maybe_register();
            }
            self.member_resolved(id, info, read);
        }
    }

    fn member_info(
        &mut self,
        id: &str,
        record: &MemberRecord,
        tasks: Arc<crate::coord::lease::TaskSet>,
    ) -> Option<MemberInfo> {
        match record.to_member(tasks) {
            Ok(member) => Some(MemberInfo { member }),
            Err(Unranked::InvalidRelease(release)) => {
                self.report(Level::Warn, "ignoring a member with an invalid release")
                    .field("member", id)
                    .field("release", &release);
                None
            }
            Err(Unranked::InvalidSeed(_)) => {
                self.report(Level::Warn, "ignoring a member with an invalid seed")
                    .field("member", id);
                None
            }
        }
    }

    fn member_resolved(&mut self, id: String, info: Option<MemberInfo>, read: MemberRead) {
        if read == MemberRead::Listing {
            if let Some(relist) = self.life.relist.as_mut() {
                if let Some(info) = info {
                    relist.members.insert(id, info);
                }
                self.relist_step();
            }
            return;
        }
        if let Some(relist) = self.life.relist.as_mut() {
            // A listing in flight would replace the view with what it read before this change:
            // a member that joined meanwhile would be missing (its leases deleted as no
            // member's, its tasks kept from it), one that left would stay.
            match &info {
                Some(info) => {
                    relist.ids.insert(id.clone());
                    relist.members.insert(id.clone(), info.clone());
                }
                None => {
                    relist.members.remove(&id);
                }
            }
        }
        self.view.view_changed = self.io.now.mono;
        match info {
            Some(info) => {
                if id != self.cfg.id {
                    self.view.members_changed = self.io.now.mono;
                }
                // Who is designated may have changed: foreign leases are checked again.
                self.view.trust.unverify_all();
                self.control.check_due = true;
                self.view.members.insert(id, info);
            }
            None => {
                self.view.members.remove(&id);
                self.control.check_due = true;
            }
        }
        self.decide();
    }
}

#[cfg(test)]
mod tests {
    use semver::Version;

    use super::*;
    use crate::coord::lease::Member;
    use crate::coord::node::{NodeConfig, test_fixtures};

    fn node() -> Node {
        let cfg = NodeConfig {
            seed: 1,
            ..test_fixtures::config("n1")
        };
        Node::new(cfg, test_fixtures::at(0))
    }

    fn info(id: &str, seed: u64) -> MemberInfo {
        MemberInfo {
            member: Member {
                id: id.into(),
                release: Version::new(1, 0, 0),
                seed,
                tasks: Arc::default(),
                may_lead: true,
                labels: Arc::default(),
                drained: false,
            },
        }
    }

    #[test]
    fn a_member_that_joins_or_leaves_while_a_listing_is_in_flight_is_not_undone_by_it() {
        // Regression: a 20-node cold start. A node re-listing members read a newcomer (its
        // watch event) before the listing ended; the listing then replaced the view with what
        // it had listed before, so the newcomer was no member: its leases were deleted as "no
        // live zkcron node holds it" and its tasks kept from it.
        let mut node = node();
        let mut relist = Relist {
            outstanding: 1,
            ..Relist::default()
        };
        relist.members.insert("gone".into(), info("gone", 3));
        node.life.relist = Some(relist);
        node.view.member_sessions.insert("gone".into(), 3);
        // The member's read records its session (as `on_read_member` does), then resolves it.
        node.view.member_sessions.insert("new".into(), 2);
        node.member_resolved("new".into(), Some(info("new", 2)), MemberRead::Change);
        node.forget_member("gone");
        node.relist_step();
        assert!(node.life.relist.is_none());
        assert!(
            node.view.members.contains_key("new"),
            "{:?}",
            node.view.members
        );
        assert_eq!(node.view.member_sessions.get("new"), Some(&2));
        assert!(
            !node.view.members.contains_key("gone"),
            "{:?}",
            node.view.members
        );
        assert!(!node.view.member_sessions.contains_key("gone"));
    }

    #[test]
    fn the_node_ignores_a_member_whose_release_or_seed_it_cannot_read() {
        let mut node = node();
        let record = |release: &str, seed: &str| MemberRecord {
            format: 1,
            id: "n2".into(),
            release: release.into(),
            seed: seed.into(),
            host: "h".into(),
            pid: 2,
            http: None,
            started_at: chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
            labels: Default::default(),
            taskset: crate::coord::records::TaskSetRef {
                digest: "d".into(),
                chunks: 1,
                count: 0,
            },
            leads: true,
            drained: false,
        };
        let read = |node: &mut Node, release, seed| {
            node.member_info("n2", &record(release, seed), Arc::default())
                .map(|info| info.member.release)
        };
        assert_eq!(
            read(&mut node, "2.2.0-rc.1", "ff"),
            Some(Version::parse("2.2.0-rc.1").unwrap())
        );
        assert_eq!(read(&mut node, "2.2", "ff"), None);
        assert_eq!(read(&mut node, "2.2.0", "not hex"), None);
    }
}
