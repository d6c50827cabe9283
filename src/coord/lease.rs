//! Which leases a node should take or give up, a pure function of what it knows.
//!
//! A node knows the registered members (release, seed, the tasks each defines and their
//! `version_req`), which task leases exist, which of those it holds, and since when each vacant
//! lease has been vacant (by its own monotonic clock). From that, [`decide`] says what to do:
//!
//! - **Release** a held lease when this node is no longer the designated leader, or may not lead
//!   at all (its clock is too far off, it is stopping).
//! - **Take** a vacant lease when this node is the designated leader; or, for liveness, when it
//!   ranks `k`-th (0-based) and the lease has been vacant for `k ×` [`VACANT_BOUND`]: a designated
//!   node that is registered but does not act (stuck, paused) does not stop the task for long,
//!   and the backups do not all rush in at once. Such a take is a [`LeaseAction::Cover`].
//! - **Keep** a lease taken as cover for [`COVER_HOLD`] even though this node is not designated:
//!   the designated node did not act, and handing the lease straight back would leave the task
//!   vacant again for another bound (an overloaded start-up once made backups take and hand back
//!   hundreds of leases within 50 ms of each other). After the hold it goes back to the
//!   designated node, which takes it at once if it now acts.
//! - Otherwise wait. A lease held by another node is never touched: its holder releases it.
//!
//! The cluster node (`coord::node`, which the ZooKeeper driver and the simulation both run)
//! calls this, so the simulation checks the same decisions the daemon makes.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use semver::{Version, VersionReq};

use super::rank::{self, Candidate};

/// How long a vacant lease waits for the node ranked above before the next one takes it.
pub const VACANT_BOUND: Duration = Duration::from_secs(3);

/// How long a node keeps a lease it took as cover for a designated node that did not act.
pub const COVER_HOLD: Duration = Duration::from_secs(10);

/// What a node says of one task it defines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskEntry {
    /// A digest of the task's definition, so operators can see nodes that disagree.
    pub digest: String,
    pub version_req: Option<VersionReq>,
}

/// The tasks a member defines, by name. Shared: members with the same `jobs.d` share one set.
pub type TaskSet = HashMap<String, TaskEntry>;

/// A registered node, as far as ranking goes.
#[derive(Debug, Clone)]
pub struct Member {
    pub id: String,
    pub release: Version,
    pub seed: u64,
    pub tasks: Arc<TaskSet>,
    /// False when the member announced it may not lead (its clock is too far off): it is then
    /// eligible for nothing, so the others do not wait for it, and a backup that took one of
    /// its leases is the designated leader and keeps it.
    pub may_lead: bool,
}

impl Member {
    /// Whether this member may lead `task`: it may lead at all, defines the task, and its
    /// release matches the definition's `version_req`.
    pub fn eligible(&self, task: &str) -> bool {
        if !self.may_lead {
            return false;
        }
        match self.tasks.get(task) {
            Some(entry) => entry
                .version_req
                .as_ref()
                .is_none_or(|req| req.matches(&self.release)),
            None => false,
        }
    }

    fn candidate(&self) -> Candidate<'_> {
        Candidate {
            id: &self.id,
            release: &self.release,
            seed: self.seed,
        }
    }
}

/// The eligible members for `task`, best first.
pub fn ranking<'a>(task: &str, members: &'a [Member]) -> Vec<Candidate<'a>> {
    rank::rank(
        task,
        members
            .iter()
            .filter(|m| m.eligible(task))
            .map(Member::candidate),
    )
}

/// This node's position (0 = designated) among the eligible members for `task`.
pub fn position(task: &str, me: &str, members: &[Member]) -> Option<usize> {
    let mine = members.iter().find(|m| m.id == me)?;
    if !mine.eligible(task) {
        return None;
    }
    let me = mine.candidate();
    Some(
        members
            .iter()
            .filter(|m| m.id != me.id && m.eligible(task))
            .filter(|m| rank::compare(task, &m.candidate(), &me) == std::cmp::Ordering::Less)
            .count(),
    )
}

/// One thing to do about a lease.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum LeaseAction {
    /// Take the lease as the designated leader.
    Take(String),
    /// Take the lease as a backup, because the designated node left it vacant too long. The
    /// caller records when it got it in [`LeaseView::covering`].
    Cover(String),
    Release(String),
}

/// What [`decide`] needs. Times are offsets on the node's own monotonic clock.
#[derive(Debug)]
pub struct LeaseView<'a> {
    pub me: &'a str,
    /// Every registered member, this node included (a node that is not registered leads nothing).
    pub members: &'a [Member],
    /// The tasks whose lease exists, held by anyone.
    pub present: &'a HashSet<String>,
    /// The leases this node holds.
    pub held: &'a HashSet<String>,
    /// Of those, the ones taken as cover ([`LeaseAction::Cover`]), with when they were taken.
    pub covering: &'a HashMap<String, Duration>,
    /// When each vacant lease (of a task this node defines) was first seen vacant.
    pub vacant_since: &'a HashMap<String, Duration>,
    /// When another member last joined or changed. Vacancy counts from the later of the two: a
    /// node that just joined and is now designated gets the whole bound to act before the
    /// backups cover for it.
    pub members_changed: Duration,
    pub now: Duration,
    /// False when the node must lead nothing (clock skew beyond `max_clock_skew`, stopping).
    pub may_lead: bool,
}

/// The decision: actions, and when to decide again if nothing else changes (a vacancy timer).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Decision {
    pub actions: Vec<LeaseAction>,
    pub recheck_at: Option<Duration>,
}

impl Decision {
    fn recheck(&mut self, at: Duration) {
        self.recheck_at = Some(self.recheck_at.map_or(at, |r| r.min(at)));
    }
}

/// Decides which leases to take and release; see the module docs for the rules.
pub fn decide(view: &LeaseView<'_>) -> Decision {
    let mut decision = Decision::default();
    let Some(me) = view.members.iter().find(|m| m.id == view.me) else {
        // Not registered: nothing may be held.
        decision.actions = view
            .held
            .iter()
            .map(|t| LeaseAction::Release(t.clone()))
            .collect();
        decision.actions.sort();
        return decision;
    };
    for task in view.held {
        let Some(pos) = position(task, view.me, view.members).filter(|_| view.may_lead) else {
            decision.actions.push(LeaseAction::Release(task.clone()));
            continue;
        };
        if pos == 0 {
            continue;
        }
        match view.covering.get(task).map(|&since| since + COVER_HOLD) {
            Some(until) if view.now < until => decision.recheck(until),
            _ => decision.actions.push(LeaseAction::Release(task.clone())),
        }
    }
    if view.may_lead {
        for task in me.tasks.keys() {
            if view.present.contains(task) || view.held.contains(task) {
                continue;
            }
            let Some(pos) = position(task, view.me, view.members) else {
                continue;
            };
            let since = view
                .vacant_since
                .get(task)
                .copied()
                .unwrap_or(view.now)
                .max(view.members_changed);
            let due = since + VACANT_BOUND * pos as u32;
            if due > view.now {
                decision.recheck(due);
            } else if pos == 0 {
                decision.actions.push(LeaseAction::Take(task.clone()));
            } else {
                decision.actions.push(LeaseAction::Cover(task.clone()));
            }
        }
    }
    decision.actions.sort();
    decision
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(tasks: &[&str]) -> Arc<TaskSet> {
        Arc::new(
            tasks
                .iter()
                .map(|t| {
                    (
                        t.to_string(),
                        TaskEntry {
                            digest: "d".into(),
                            version_req: None,
                        },
                    )
                })
                .collect(),
        )
    }

    fn member(id: &str, release: &str, seed: u64, tasks: &Arc<TaskSet>) -> Member {
        Member {
            id: id.into(),
            release: Version::parse(release).unwrap(),
            seed,
            tasks: tasks.clone(),
            may_lead: true,
        }
    }

    /// The ids of the eligible members for `task`, best first.
    fn ranked_ids(task: &str, members: &[Member]) -> Vec<String> {
        ranking(task, members)
            .iter()
            .map(|c| c.id.to_string())
            .collect()
    }

    fn names(items: &[&str]) -> HashSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[derive(Default)]
    struct Fixture {
        members: Vec<Member>,
        present: HashSet<String>,
        held: HashSet<String>,
        vacant_since: HashMap<String, Duration>,
        covering: HashMap<String, Duration>,
        members_changed: Duration,
    }

    impl Fixture {
        fn decide(&self, me: &str, now: Duration, may_lead: bool) -> Decision {
            decide(&LeaseView {
                me,
                members: &self.members,
                present: &self.present,
                held: &self.held,
                covering: &self.covering,
                vacant_since: &self.vacant_since,
                members_changed: self.members_changed,
                now,
                may_lead,
            })
        }
    }

    #[test]
    fn the_designated_node_takes_a_vacant_lease_and_the_others_wait_their_turn() {
        let tasks = set(&["t"]);
        let members = vec![
            member("a", "1.0.0", 1, &tasks),
            member("b", "1.0.0", 2, &tasks),
            member("c", "1.0.0", 3, &tasks),
        ];
        let ranked = ranked_ids("t", &members);
        let fx = Fixture {
            members,
            present: HashSet::new(),
            held: HashSet::new(),
            vacant_since: [("t".to_string(), Duration::ZERO)].into(),
            ..Fixture::default()
        };
        let first = fx.decide(&ranked[0], Duration::ZERO, true);
        assert_eq!(first.actions, vec![LeaseAction::Take("t".into())]);
        let second = fx.decide(&ranked[1], Duration::ZERO, true);
        assert!(second.actions.is_empty());
        assert_eq!(second.recheck_at, Some(VACANT_BOUND));
        // After one bound the second-ranked takes it; the third waits for two.
        let later = fx.decide(&ranked[1], VACANT_BOUND, true);
        assert_eq!(later.actions, vec![LeaseAction::Cover("t".into())]);
        assert!(fx.decide(&ranked[2], VACANT_BOUND, true).actions.is_empty());
        assert_eq!(
            fx.decide(&ranked[2], VACANT_BOUND * 2, true).actions,
            vec![LeaseAction::Cover("t".into())]
        );
    }

    #[test]
    fn a_holder_that_is_no_longer_designated_releases_and_a_held_lease_is_left_alone() {
        let tasks = set(&["t"]);
        let mut members = vec![member("old", "1.0.0", 1, &tasks)];
        let fx = Fixture {
            members: members.clone(),
            present: names(&["t"]),
            held: names(&["t"]),
            ..Fixture::default()
        };
        assert!(fx.decide("old", Duration::ZERO, true).actions.is_empty());
        members.push(member("new", "1.1.0", 2, &tasks));
        let fx = Fixture { members, ..fx };
        assert_eq!(
            fx.decide("old", Duration::ZERO, true).actions,
            vec![LeaseAction::Release("t".into())]
        );
        // The newcomer sees the lease held and waits for the release.
        let newcomer = Fixture {
            held: HashSet::new(),
            ..fx
        };
        assert!(
            newcomer
                .decide("new", Duration::from_secs(60), true)
                .actions
                .is_empty()
        );
    }

    #[test]
    fn a_node_that_may_not_lead_releases_everything_and_takes_nothing() {
        let tasks = set(&["a", "b"]);
        let fx = Fixture {
            members: vec![member("n", "1.0.0", 1, &tasks)],
            present: names(&["a"]),
            held: names(&["a"]),
            ..Fixture::default()
        };
        let decision = fx.decide("n", Duration::ZERO, false);
        assert_eq!(decision.actions, vec![LeaseAction::Release("a".into())]);
        assert_eq!(decision.recheck_at, None);
    }

    #[test]
    fn an_unregistered_node_releases_what_it_holds() {
        let tasks = set(&["a"]);
        let fx = Fixture {
            members: vec![member("other", "1.0.0", 1, &tasks)],
            present: names(&["a"]),
            held: names(&["a"]),
            ..Fixture::default()
        };
        assert_eq!(
            fx.decide("me", Duration::ZERO, true).actions,
            vec![LeaseAction::Release("a".into())]
        );
    }

    #[test]
    fn a_member_that_announced_it_may_not_lead_is_passed_over_and_its_backup_keeps_the_lease() {
        let tasks = set(&["t"]);
        let mut members = vec![
            member("a", "1.0.0", 1, &tasks),
            member("b", "1.0.0", 2, &tasks),
        ];
        let ranked = ranked_ids("t", &members);
        let (top, backup) = (ranked[0].clone(), ranked[1].clone());
        members.iter_mut().find(|m| m.id == top).unwrap().may_lead = false;
        let fx = Fixture {
            members,
            present: names(&["t"]),
            held: names(&["t"]),
            ..Fixture::default()
        };
        // The backup holds the lease and is now the designated leader: it keeps it.
        assert!(fx.decide(&backup, Duration::ZERO, true).actions.is_empty());
        assert_eq!(position("t", &top, &fx.members), None);
        assert_eq!(position("t", &backup, &fx.members), Some(0));
    }

    #[test]
    fn version_req_limits_eligibility_to_matching_releases() {
        let mut entries = TaskSet::new();
        entries.insert(
            "t".into(),
            TaskEntry {
                digest: "d".into(),
                version_req: Some(VersionReq::parse(">=2.1").unwrap()),
            },
        );
        let tasks = Arc::new(entries);
        let members = vec![
            member("old", "2.0.5", 1, &tasks),
            member("new", "2.1.0", 2, &tasks),
        ];
        assert_eq!(position("t", "old", &members), None);
        assert_eq!(position("t", "new", &members), Some(0));
        let ranked = ranking("t", &members);
        assert_eq!(ranked.len(), 1);
        // A node that does not define a task is never eligible for it.
        assert_eq!(position("other-task", "new", &members), None);
    }

    #[test]
    fn a_backup_keeps_a_lease_it_covers_for_the_hold_then_hands_it_back() {
        let tasks = set(&["t"]);
        let members = vec![
            member("a", "1.0.0", 1, &tasks),
            member("b", "1.0.0", 2, &tasks),
        ];
        let ranked = ranked_ids("t", &members);
        let backup = ranked[1].clone();
        let taken = VACANT_BOUND;
        let fx = Fixture {
            members,
            present: names(&["t"]),
            held: names(&["t"]),
            vacant_since: HashMap::new(),
            covering: [("t".to_string(), taken)].into(),
            ..Fixture::default()
        };
        // The designated node is registered but did not act: the backup keeps the lease and
        // looks again when the hold ends.
        let during = fx.decide(&backup, taken + Duration::from_millis(50), true);
        assert!(during.actions.is_empty(), "{during:?}");
        assert_eq!(during.recheck_at, Some(taken + COVER_HOLD));
        assert_eq!(
            fx.decide(&backup, taken + COVER_HOLD, true).actions,
            vec![LeaseAction::Release("t".into())]
        );
        // A lease the backup did not take as cover (it was designated when it took it) goes
        // back at once, as when a newer release joins.
        let designated_then = Fixture {
            covering: HashMap::new(),
            ..fx
        };
        assert_eq!(
            designated_then.decide(&backup, taken, true).actions,
            vec![LeaseAction::Release("t".into())]
        );
        // Cover or not, a node that may not lead lets go at once.
        let fx = Fixture {
            covering: [("t".to_string(), taken)].into(),
            ..designated_then
        };
        assert_eq!(
            fx.decide(&backup, taken, false).actions,
            vec![LeaseAction::Release("t".into())]
        );
    }

    #[test]
    fn a_member_joining_restarts_the_vacancy_clock_of_the_backups() {
        let tasks = set(&["t"]);
        let members = vec![
            member("a", "1.0.0", 1, &tasks),
            member("b", "1.0.0", 2, &tasks),
        ];
        let backup = ranked_ids("t", &members)[1].clone();
        let joined = Duration::from_secs(60);
        let fx = Fixture {
            members,
            present: HashSet::new(),
            held: HashSet::new(),
            vacant_since: [("t".to_string(), Duration::ZERO)].into(),
            covering: HashMap::new(),
            members_changed: joined,
        };
        // Vacant for a minute, but the designated node joined just now: it gets its bound.
        let decision = fx.decide(&backup, joined, true);
        assert!(decision.actions.is_empty(), "{decision:?}");
        assert_eq!(decision.recheck_at, Some(joined + VACANT_BOUND));
        assert_eq!(
            fx.decide(&backup, joined + VACANT_BOUND, true).actions,
            vec![LeaseAction::Cover("t".into())]
        );
    }
}
