//! `zkcron explain TASK`: who may lead a task, in the order the nodes rank them, who holds its
//! lease, and why it is not firing; a pure function of a [`Snapshot`] and `now`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::model::{self, Eligibility, Snapshot, Status, TaskStatus};
use crate::coord::rank::{self, Candidate};
use crate::coord::zk::wire::MarkRecord;

/// `zkcron explain TASK --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explain {
    pub task: String,
    /// Every live member that defines the task: the eligible ones in rank order (the first is
    /// the designated leader), then the others.
    pub candidates: Vec<CandidateView>,
    pub lease: Option<LeaseView>,
    pub paused: Option<MarkRecord>,
    /// The task's line of `status` (next, last, drift, problem).
    pub status: TaskStatus,
    /// Live members that do not define the task.
    pub not_defining: Vec<String>,
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
    let status: Status = model::status(snapshot, now);
    let status = status.tasks.into_iter().find(|t| t.name == task)?;
    let seeds: Vec<(u64, semver::Version)> = snapshot
        .members
        .iter()
        .map(|m| {
            (
                u64::from_str_radix(&m.record.seed, 16).unwrap_or(0),
                semver::Version::parse(&m.record.release)
                    .unwrap_or_else(|_| semver::Version::new(0, 0, 0)),
            )
        })
        .collect();
    let mut eligible = Vec::new();
    let mut ineligible = Vec::new();
    let mut not_defining = Vec::new();
    for (member, (seed, release)) in snapshot.members.iter().zip(&seeds) {
        let m = &member.record;
        let candidate = Candidate {
            id: &m.id,
            release,
            seed: *seed,
        };
        match model::eligibility(snapshot, m, task) {
            Eligibility::Undefined => not_defining.push(m.id.clone()),
            Eligibility::Eligible => eligible.push(candidate),
            other => ineligible.push((candidate, other)),
        }
    }
    let digest = |id: &str| {
        snapshot
            .members
            .iter()
            .find(|m| m.record.id == id)
            .and_then(|m| snapshot.entry(&m.record, task))
            .map(|e| e.digest.clone())
            .unwrap_or_default()
    };
    let view = |c: &Candidate<'_>, rank: Option<usize>, reason: String| CandidateView {
        rank,
        node: c.id.to_string(),
        release: c.release.to_string(),
        score: format!("{:016x}", rank::score(c.seed, task)),
        eligible: rank.is_some(),
        reason,
        digest: digest(c.id),
    };
    let ranked = rank::rank(task, eligible);
    let designated = ranked.first().map(|c| c.id.to_string());
    let mut candidates: Vec<CandidateView> = ranked
        .iter()
        .enumerate()
        .map(|(i, c)| view(c, Some(i + 1), Eligibility::Eligible.to_string()))
        .collect();
    ineligible.sort_by(|(a, _), (b, _)| rank::compare(task, a, b));
    candidates.extend(
        ineligible
            .iter()
            .map(|(c, why)| view(c, None, why.to_string())),
    );
    not_defining.sort();
    let lease = snapshot.leases.get(task).map(|l| LeaseView {
        node: l.node.clone(),
        since: l.since,
        held_s: (now - l.since).num_seconds().max(0) as u64,
        designated: designated.as_deref() == Some(l.node.as_str()),
    });
    Some(Explain {
        task: task.to_string(),
        candidates,
        lease,
        paused: snapshot.paused.get(task).cloned(),
        status,
        not_defining,
    })
}
