//! `zkcron explain TASK`: who may lead a task, in the order the nodes rank them, who holds its
//! lease, and why it is not firing (for a pooled task, who owns which items and why:
//! [`pool`]); a pure function of a [`Snapshot`] and `now`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::links::{self, ParentLink};
use super::live;
use super::model::{self, Definer, Members, Snapshot, TaskStatus};
use super::pool::{self, PoolView};
use crate::coord::rank::{self, Candidate};
use crate::coord::records::MarkRecord;

/// `zkcron explain TASK --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explain {
    pub task: String,
    /// Every live member that defines the task: the eligible ones in rank order (the first is
    /// the designated leader), then the others, then those ranked for nothing (a release that
    /// is no semantic version).
    pub candidates: Vec<CandidateView>,
    pub lease: Option<LeaseView>,
    pub paused: Option<MarkRecord>,
    /// The task's line of `status` (next, last, drift, problem).
    pub status: TaskStatus,
    /// Live members that do not define the task.
    pub not_defining: Vec<String>,
    /// A pooled task's items: who owns each and why, and who holds its unit; absent for
    /// other tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolView>,
    /// The task's parents (`after`, in its definition's order) and why each is not firing:
    /// the task's chained runs wait on them. Absent when it has none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<ParentLink>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateView {
    /// 1 for the designated leader; `None` for an ineligible member.
    pub rank: Option<usize>,
    pub node: String,
    pub release: String,
    /// The rendezvous score of the node's seed for the task (`coord::rank::score`), in hex.
    pub score: String,
    pub eligible: bool,
    /// "eligible", or why not.
    pub reason: String,
    /// The digest of the node's definition of the task.
    pub digest: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseView {
    pub node: String,
    pub since: DateTime<Utc>,
    pub held_s: u64,
    /// Whether the holder is the designated leader (else it covers for it, or the ranking
    /// changed a moment ago and the holder is handing over).
    pub designated: bool,
}

/// The explanation of `task`; `None` when no live member defines it.
pub fn explain(snapshot: &Snapshot, task: &str, now: DateTime<Utc>) -> Option<Explain> {
    let status = live::task_status(snapshot, task, now)?;
    // Only the parents' lines, not every task's: a parent's state is its status problem.
    let parent_lines: Vec<TaskStatus> = status
        .after
        .iter()
        .filter_map(|parent| live::task_status(snapshot, parent, now))
        .collect();
    let parents = links::parents(&status, &parent_lines);
    let members = Members::new(snapshot);
    let definers = members.definers(task);
    fn candidate<'a>(d: &Definer<'a>) -> Candidate<'a> {
        Candidate {
            id: &d.member.id,
            release: &d.member.release,
            seed: d.member.seed,
        }
    }
    let view = |d: &Definer<'_>, rank: Option<usize>| CandidateView {
        rank,
        node: d.record.id.clone(),
        release: d.record.release.clone(),
        score: format!("{:016x}", rank::score(d.member.seed, task)),
        eligible: rank.is_some(),
        reason: d.why_not.clone().unwrap_or_else(|| "eligible".into()),
        digest: d.task_entry.digest.clone(),
    };
    let by_id = |id: &str| definers.iter().find(|d| d.member.id == id);
    let ranked = rank::rank(
        task,
        definers
            .iter()
            .filter(|d| d.why_not.is_none())
            .map(candidate),
    );
    let designated = ranked.first().map(|c| c.id.to_string());
    let mut candidates: Vec<CandidateView> = ranked
        .iter()
        .enumerate()
        .filter_map(|(i, c)| Some(view(by_id(c.id)?, Some(i + 1))))
        .collect();
    let mut ineligible: Vec<&Definer<'_>> =
        definers.iter().filter(|d| d.why_not.is_some()).collect();
    ineligible.sort_by(|a, b| rank::compare(task, &candidate(a), &candidate(b)));
    candidates.extend(ineligible.into_iter().map(|d| view(d, None)));
    // Members the nodes ignore are listed last, with why; their seed may not even be a number.
    let unranked = members.unranked_definers(task);
    candidates.extend(unranked.iter().map(|u| CandidateView {
        rank: None,
        node: u.record.id.clone(),
        release: u.record.release.clone(),
        score: u64::from_str_radix(&u.record.seed, 16).map_or_else(
            |_| "-".into(),
            |seed| format!("{:016x}", rank::score(seed, task)),
        ),
        eligible: false,
        reason: u.why.to_string(),
        digest: u.entry.digest.clone(),
    }));
    let defines = |id: &str| by_id(id).is_some() || unranked.iter().any(|u| u.record.id == id);
    let not_defining = not_defining(&members, defines);
    let lease = snapshot.leases.get(task).map(|l| LeaseView {
        node: l.node.clone(),
        since: l.since,
        held_s: (now - l.since).num_seconds().max(0) as u64,
        designated: designated.as_deref() == Some(l.node.as_str()),
    });
    let pool = model::definition(snapshot, task, &definers)
        .and_then(|entry| pool::pool_view(snapshot, task, entry, &definers));
    Some(Explain {
        pool,
        task: task.to_string(),
        candidates,
        lease,
        paused: snapshot.paused.get(task).cloned(),
        status,
        not_defining,
        parents,
    })
}

/// The live members, ranked or not, for which `defines` is false, by id.
fn not_defining(members: &Members<'_>, defines: impl Fn(&str) -> bool) -> Vec<String> {
    let mut ids: Vec<String> = members
        .members
        .iter()
        .map(|(record, _, _)| record)
        .chain(members.unranked.iter().map(|(record, _, _)| record))
        .map(|record| record.id.clone())
        .filter(|id| !defines(id))
        .collect();
    ids.sort();
    ids
}
