//! Who may lead a task and why not, from the live members' records in a [`Snapshot`]: the
//! definers ranked as the nodes rank them, the ones a release cannot rank, the drift between
//! their definitions. `status` and `explain` share it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::{Drift, Snapshot};
use crate::coord::lease::{Member, TaskEntry, TaskSet, why_ineligible, why_none_eligible};
use crate::coord::records::{self, MemberRecord, TaskSetEntry, TaskSetRecord, Unranked};

/// Whether `member` may lead `task`, as the lease decision sees it (`coord::lease`): `Ok` when
/// it may, else why not in the nodes' own words (`lease::why_ineligible`: drained, may not lead,
/// does not define the task, `version_req`, `require_labels`).
pub fn eligibility(snapshot: &Snapshot, member: &MemberRecord, task: &str) -> Result<(), String> {
    let members = Members::new(snapshot);
    if let Some((_, why, _)) = members.unranked.iter().find(|(r, _, _)| r.id == member.id) {
        return Err(why.to_string());
    }
    let (_, lease_member, _) = members
        .members
        .iter()
        .find(|(record, _, _)| record.id == member.id)
        .ok_or_else(|| format!("{} is not a live member", member.id))?;
    match why_ineligible(lease_member, lease_member.tasks.get(task)) {
        None => Ok(()),
        Some(why) => Err(why),
    }
}

/// A live member that defines a task: its record, the lease rule's view of it, its definition
/// as written and as ranked, and why it may not lead the task (`None`: it may).
pub struct Definer<'a> {
    pub record: &'a MemberRecord,
    pub member: &'a Member,
    /// The member's task set as written (for the schedule), looked up only when needed.
    pub written: Option<&'a TaskSetRecord>,
    pub task_entry: &'a TaskEntry,
    pub why_not: Option<String>,
}

/// The live members as the lease rule sees them (`coord::lease::Member`, task sets decoded
/// once per digest), sorted by id, with their task sets as written.
pub struct Members<'a> {
    pub members: Vec<(&'a MemberRecord, Member, Option<&'a TaskSetRecord>)>,
    /// The live members whose record the nodes cannot rank ([`MemberRecord::to_member`]): they
    /// lead nothing, as on the nodes, which ignore them. Sorted by id.
    pub unranked: Vec<(&'a MemberRecord, Unranked, Option<&'a TaskSetRecord>)>,
}

/// A live member that defines a task but is ranked for nothing, and why.
pub struct UnrankedDefiner<'a> {
    pub record: &'a MemberRecord,
    pub why: &'a Unranked,
    pub entry: &'a TaskSetEntry,
}

impl<'a> Members<'a> {
    pub fn new(snapshot: &'a Snapshot) -> Members<'a> {
        Members::with_decoded(snapshot, &mut HashMap::new())
    }

    /// [`Members::new`], with the task sets decoded before (by digest: a digest's content never
    /// changes) taken from `decoded`, and those decoded now added to it.
    pub fn with_decoded(
        snapshot: &'a Snapshot,
        decoded: &mut HashMap<String, Arc<TaskSet>>,
    ) -> Members<'a> {
        let mut members = Vec::new();
        let mut unranked = Vec::new();
        for m in &snapshot.members {
            let record = &m.record;
            let written = snapshot.tasksets.get(&record.taskset.digest);
            let tasks = decoded
                .entry(record.taskset.digest.clone())
                .or_insert_with(|| written.map(records::decode_taskset).unwrap_or_default())
                .clone();
            // Ranked as the record will say once its node sees the operator's drain mark.
            let as_ranked = MemberRecord {
                drained: snapshot.is_drained(record),
                ..record.clone()
            };
            match as_ranked.to_member(tasks) {
                Ok(member) => members.push((record, member, written)),
                Err(why) => unranked.push((record, why, written)),
            }
        }
        members.sort_by(|a, b| a.0.id.cmp(&b.0.id));
        unranked.sort_by(|a, b| a.0.id.cmp(&b.0.id));
        Members { members, unranked }
    }

    /// The members ranked for nothing that define `task` (as written), by id.
    pub fn unranked_definers(&self, task: &str) -> Vec<UnrankedDefiner<'_>> {
        self.unranked
            .iter()
            .filter_map(|(record, why, written)| {
                Some(UnrankedDefiner {
                    record,
                    why,
                    entry: written.as_ref()?.tasks.get(task)?,
                })
            })
            .collect()
    }

    /// The members that define `task`, by id.
    pub fn definers(&self, task: &str) -> Vec<Definer<'_>> {
        self.members
            .iter()
            .filter_map(|(record, member, written)| {
                let task_entry = member.tasks.get(task)?;
                Some(Definer {
                    record,
                    member,
                    written: *written,
                    task_entry,
                    why_not: why_ineligible(member, Some(task_entry)),
                })
            })
            .collect()
    }
}

/// Why no live member may run `task` (every definer is ineligible), in the words of the
/// nodes' warning (`lease::why_none_eligible`): "no live node may run it: version_req >=2.0
/// matches none of a (1.0.0)". `None` when one may.
pub fn no_one_may_run(snapshot: &Snapshot, task: &str) -> Option<String> {
    let members = Members::new(snapshot);
    why_none(&members.definers(task), &members.unranked_definers(task))
}

pub(super) fn why_none(
    definers: &[Definer<'_>],
    unranked: &[UnrankedDefiner<'_>],
) -> Option<String> {
    if definers.is_empty() && unranked.is_empty() {
        return Some("no live node defines it".to_string());
    }
    if definers.iter().any(|d| d.why_not.is_none()) {
        return None;
    }
    let mut reasons = Vec::new();
    if !definers.is_empty() {
        let defining: Vec<(&Member, &TaskEntry)> =
            definers.iter().map(|d| (d.member, d.task_entry)).collect();
        reasons.push(why_none_eligible(&defining));
    }
    reasons.extend(
        unranked
            .iter()
            .map(|u| format!("{}'s {}", u.record.id, u.why)),
    );
    Some(format!("no live node may run it: {}", reasons.join("; ")))
}

/// The definitions of `task` the live members hold, when they differ; empty when all agree.
pub fn drift(snapshot: &Snapshot, task: &str) -> Vec<Drift> {
    let members = Members::new(snapshot);
    drift_among(&members.definers(task), &members.unranked_definers(task))
}

/// The definitions every definer holds, ranked or not (a member ranked for nothing still
/// holds one).
pub(super) fn drift_among(
    definers: &[Definer<'_>],
    unranked: &[UnrankedDefiner<'_>],
) -> Vec<Drift> {
    let mut held: Vec<(&str, &str)> = definers
        .iter()
        .map(|d| (d.record.id.as_str(), d.task_entry.digest.as_str()))
        .chain(
            unranked
                .iter()
                .map(|u| (u.record.id.as_str(), u.entry.digest.as_str())),
        )
        .collect();
    held.sort();
    let first = held.first().map(|(_, digest)| *digest);
    if held.iter().all(|(_, digest)| Some(*digest) == first) {
        return Vec::new();
    }
    let mut by_digest: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (id, digest) in held {
        by_digest.entry(digest).or_default().push(id.to_string());
    }
    by_digest
        .into_iter()
        .map(|(digest, nodes)| Drift {
            digest: digest.to_string(),
            nodes,
        })
        .collect()
}
