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
//!   Vacancy counts from the latest of: the lease going vacant, a member joining or changing,
//!   and the designated node last being seen acting ([`Acting`]: it holds a lease it is
//!   designated for). So a designated node that is still working through its leases (a cold
//!   start creates thousands at once) is not covered for; one that stopped acting is.
//! - **Keep** a lease taken as cover until the designated node is seen acting after the cover
//!   was taken (then hand it back, after [`COVER_MIN_HOLD`]: it takes it at once), or for
//!   [`COVER_HOLD`] if it is not seen acting. Handing a cover straight back would leave the task
//!   vacant again for another bound (an overloaded start-up once made backups take and hand
//!   back hundreds of leases within 50 ms of each other); keeping it for the whole hold kept
//!   designated nodes that had started in the meantime waiting (a 20-node cold start took
//!   17-19 s). After the hold it goes back to the designated node, which takes it at once if it
//!   now acts.
//! - Otherwise wait. A lease held by another node is never touched: its holder releases it.
//!
//! The cluster node (`coord::node`, which the ZooKeeper driver and the simulation both run)
//! calls this, so the simulation checks the same decisions the daemon makes. [`decide`] runs
//! for every task at every decision, so ranking is cheap (see `Peers`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use semver::{Version, VersionReq};

use super::rank::{self, Candidate};

/// How long a vacant lease waits for the node ranked above before the next one takes it.
pub const VACANT_BOUND: Duration = Duration::from_secs(3);

/// How long a node keeps a lease it took as cover for a designated node that did not act, if
/// it does not see that node act meanwhile.
pub const COVER_HOLD: Duration = Duration::from_secs(10);

/// How long a node keeps a cover at least, even when the designated node acted since: a
/// burst of hand-backs a moment after the takes is churn, not help.
pub const COVER_MIN_HOLD: Duration = Duration::from_secs(1);

/// What a node says of one task it defines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskEntry {
    /// A digest of the task's definition, so operators can see nodes that disagree.
    pub digest: String,
    pub version_req: Option<VersionReq>,
}

/// The tasks a member defines, by name. Shared: members with the same `jobs.d` share one set.
pub type TaskSet = BTreeMap<String, TaskEntry>;

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
    Peers::new(members.iter().find(|m| m.id == me)?, members).position(task)
}

/// This node among the members, prepared to rank it for many tasks: what does not depend on
/// the task is worked out once. [`decide`] ranks this node for every task it defines at every
/// decision (hundreds of thousands of comparisons on a large cluster's cold start), so per task
/// it looks the task up once per distinct task set, not once per member (members with the same
/// `jobs.d` share one [`TaskSet`]), hashes the task name once per member of the same release,
/// and compares releases not at all. It counts exactly the members [`rank::compare`] puts above
/// this node (a test checks it against [`ranking`]).
struct Peers<'a> {
    mine: &'a Member,
    /// The other members that may lead: this node's release compared with theirs (`Greater`:
    /// theirs is lower, so it ranks below), and whether they share this node's task set.
    others: Vec<(&'a Member, std::cmp::Ordering, bool)>,
}

impl<'a> Peers<'a> {
    fn new(mine: &'a Member, members: &'a [Member]) -> Peers<'a> {
        let others = members
            .iter()
            .filter(|other| !std::ptr::eq(*other, mine) && other.may_lead)
            .map(|other| {
                (
                    other,
                    mine.release.cmp_precedence(&other.release),
                    Arc::ptr_eq(&other.tasks, &mine.tasks),
                )
            })
            .collect();
        Peers { mine, others }
    }

    /// This node's position (0 = designated) among the eligible members for `task`.
    fn position(&self, task: &str) -> Option<usize> {
        self.rank(task).map(|(position, _)| position)
    }

    /// This node's position among the eligible members for `task`, and the designated member
    /// when it is another.
    fn rank(&self, task: &str) -> Option<(usize, Option<&'a Member>)> {
        let mine = self.mine;
        if !mine.may_lead {
            return None;
        }
        let entry = mine.tasks.get(task)?;
        let matches = |release: &Version| {
            entry
                .version_req
                .as_ref()
                .is_none_or(|req| req.matches(release))
        };
        if !matches(&mine.release) {
            return None;
        }
        let mut my_score = None;
        let mut above = 0;
        let mut top: Option<(&'a Member, u64)> = None;
        for &(other, release_order, shared) in &self.others {
            if release_order == std::cmp::Ordering::Greater {
                continue; // a lower release ranks below, whatever it defines
            }
            let eligible = if shared {
                matches(&other.release)
            } else {
                other.eligible(task)
            };
            if !eligible {
                continue;
            }
            // `rank::compare(task, other, mine) == Less`, with each score computed once.
            let score = rank::score(other.seed, task);
            let order = release_order
                .then_with(|| {
                    let mine = *my_score.get_or_insert_with(|| rank::score(mine.seed, task));
                    mine.cmp(&score)
                })
                .then_with(|| other.id.as_str().cmp(mine.id.as_str()));
            if order != std::cmp::Ordering::Less {
                continue;
            }
            above += 1;
            let better = top.is_none_or(|(best, best_score)| {
                best.release
                    .cmp_precedence(&other.release)
                    .then_with(|| best_score.cmp(&score))
                    .then_with(|| other.id.cmp(&best.id))
                    == std::cmp::Ordering::Less
            });
            if better {
                top = Some((other, score));
            }
        }
        Some((above, top.map(|(member, _)| member)))
    }
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
    pub present: &'a BTreeSet<String>,
    /// The leases this node holds.
    pub held: &'a BTreeSet<String>,
    /// Of those, the ones taken as cover ([`LeaseAction::Cover`]), with when they were taken.
    pub covering: &'a BTreeMap<String, Duration>,
    /// When each vacant lease (of a task this node defines) was first seen vacant.
    pub vacant_since: &'a BTreeMap<String, Duration>,
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
    /// The tasks this node is designated for whose lease another holds (sorted): the caller
    /// checks that their holders are live members, without ranking every task again.
    pub held_elsewhere: Vec<String>,
}

impl Decision {
    fn recheck(&mut self, at: Duration) {
        self.recheck_at = Some(self.recheck_at.map_or(at, |r| r.min(at)));
    }
}

/// When this node last saw each other member act: hold a lease it is designated for (by its
/// own monotonic clock). See [`decide_with`].
pub type Acting = BTreeMap<String, Duration>;

/// Decides which leases to take and release, knowing nothing of when the others acted; see
/// the module docs for the rules.
pub fn decide(view: &LeaseView<'_>) -> Decision {
    decide_with(view, &Acting::new())
}

/// Decides which leases to take and release; see the module docs for the rules. `acting` says
/// when each designated node was last seen acting.
pub fn decide_with(view: &LeaseView<'_>, acting: &Acting) -> Decision {
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
    let peers = Peers::new(me, view.members);
    let acted = |top: Option<&Member>| top.and_then(|d| acting.get(&d.id)).copied();
    for task in view.held {
        let Some((pos, top)) = peers.rank(task).filter(|_| view.may_lead) else {
            decision.actions.push(LeaseAction::Release(task.clone()));
            continue;
        };
        if pos == 0 {
            continue;
        }
        let Some(&taken) = view.covering.get(task) else {
            decision.actions.push(LeaseAction::Release(task.clone()));
            continue;
        };
        // Back to the designated node once it acted after the cover was taken (it takes the
        // lease at once), else after the hold.
        let until = match acted(top) {
            Some(at) if at > taken => taken + COVER_MIN_HOLD,
            _ => taken + COVER_HOLD,
        };
        if view.now < until {
            decision.recheck(until);
        } else {
            decision.actions.push(LeaseAction::Release(task.clone()));
        }
    }
    if view.may_lead {
        for task in me.tasks.keys() {
            if view.held.contains(task) {
                continue;
            }
            let present = view.present.contains(task);
            let Some((pos, top)) = peers.rank(task) else {
                continue;
            };
            if present {
                if pos == 0 {
                    decision.held_elsewhere.push(task.clone());
                }
                continue;
            }
            let mut since = view
                .vacant_since
                .get(task)
                .copied()
                .unwrap_or(view.now)
                .max(view.members_changed);
            if let Some(at) = acted(top) {
                // The designated node is working through its leases: wait for it.
                since = since.max(at);
            }
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
    decision.held_elsewhere.sort();
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

    fn names(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[derive(Default)]
    struct Fixture {
        members: Vec<Member>,
        present: BTreeSet<String>,
        held: BTreeSet<String>,
        vacant_since: BTreeMap<String, Duration>,
        covering: BTreeMap<String, Duration>,
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
            present: BTreeSet::new(),
            held: BTreeSet::new(),
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
            held: BTreeSet::new(),
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
    fn position_agrees_with_the_ranking_when_members_share_task_sets_or_not() {
        use rand::{Rng, SeedableRng, rngs::StdRng};
        // The fast path (one lookup per shared task set, this node's score once) must count
        // exactly the members the ranking puts above: mixed releases, a version_req, members
        // that may not lead, and a member with its own (unshared) copy of the set.
        let mut rng = StdRng::seed_from_u64(7);
        let mut entries = TaskSet::new();
        for i in 0..200 {
            let version_req = (i % 5 == 0).then(|| VersionReq::parse(">=1.1").unwrap());
            entries.insert(
                format!("task-{i:05}"),
                TaskEntry {
                    digest: "d".into(),
                    version_req,
                },
            );
        }
        let shared = Arc::new(entries.clone());
        let mut partial = entries.clone();
        partial.retain(|name, _| name.ends_with('1') || name.ends_with('2'));
        let (own_copy, partial) = (Arc::new(entries), Arc::new(partial));
        let releases = ["1.0.0", "1.1.0", "1.1.0", "2.0.0-rc.1"];
        let members: Vec<Member> = (0..12)
            .map(|i| {
                let tasks = match i % 6 {
                    4 => &own_copy,
                    5 => &partial,
                    _ => &shared,
                };
                let mut m = member(&format!("n{i:02}"), releases[i % 4], rng.random(), tasks);
                m.may_lead = i != 3;
                m
            })
            .collect();
        for i in 0..200 {
            let task = format!("task-{i:05}");
            let ranked = ranked_ids(&task, &members);
            for m in &members {
                let expected = ranked.iter().position(|id| *id == m.id);
                assert_eq!(
                    position(&task, &m.id, &members),
                    expected,
                    "{task} {}",
                    m.id
                );
            }
        }
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
            vacant_since: BTreeMap::new(),
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
            covering: BTreeMap::new(),
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

    /// Two members; the backup covers the designated node's only task `t`.
    fn covered(taken: Duration) -> (Fixture, String, String) {
        let tasks = set(&["t"]);
        let members = vec![
            member("a", "1.0.0", 1, &tasks),
            member("b", "1.0.0", 2, &tasks),
        ];
        let ranked = ranked_ids("t", &members);
        let fx = Fixture {
            members,
            present: names(&["t"]),
            held: names(&["t"]),
            covering: [("t".to_string(), taken)].into(),
            ..Fixture::default()
        };
        (fx, ranked[0].clone(), ranked[1].clone())
    }

    #[test]
    fn a_cover_goes_back_once_the_designated_node_acts_not_after_the_whole_hold() {
        // The cold start of 20 nodes took 17-19 s: backups covered for nodes still starting,
        // then kept the leases for COVER_HOLD although those nodes were acting by then.
        let taken = Duration::from_secs(3);
        let (fx, designated, backup) = covered(taken);
        let acted = taken + Duration::from_millis(200);
        let acting: Acting = [(designated.clone(), acted)].into();
        let decide = |now| {
            decide_with(
                &LeaseView {
                    me: &backup,
                    members: &fx.members,
                    present: &fx.present,
                    held: &fx.held,
                    covering: &fx.covering,
                    vacant_since: &fx.vacant_since,
                    members_changed: fx.members_changed,
                    now,
                    may_lead: true,
                },
                &acting,
            )
        };
        // Not within the minimum hold (no burst of hand-backs right after the takes) ...
        let early = decide(acted);
        assert!(early.actions.is_empty(), "{early:?}");
        assert_eq!(early.recheck_at, Some(taken + COVER_MIN_HOLD));
        // ... then at once, long before the hold.
        assert_eq!(
            decide(taken + COVER_MIN_HOLD).actions,
            vec![LeaseAction::Release("t".into())]
        );
    }

    #[test]
    fn a_designated_node_seen_acting_only_before_the_cover_keeps_the_hold() {
        // A node that acted once and then stopped (stuck, paused) does not get its leases
        // handed back every second: the cover is kept for the whole hold.
        let taken = Duration::from_secs(10);
        let (fx, designated, backup) = covered(taken);
        let acting: Acting = [(designated, Duration::from_secs(2))].into();
        let view = LeaseView {
            me: &backup,
            members: &fx.members,
            present: &fx.present,
            held: &fx.held,
            covering: &fx.covering,
            vacant_since: &fx.vacant_since,
            members_changed: fx.members_changed,
            now: taken + COVER_MIN_HOLD,
            may_lead: true,
        };
        let decision = decide_with(&view, &acting);
        assert!(decision.actions.is_empty(), "{decision:?}");
        assert_eq!(decision.recheck_at, Some(taken + COVER_HOLD));
    }

    #[test]
    fn backups_wait_while_the_designated_node_is_working_through_its_leases() {
        // A designated node taking its leases one batch at a time is not stuck: the vacancy
        // of its remaining tasks counts from when it was last seen acting.
        let tasks = set(&["t"]);
        let members = vec![
            member("a", "1.0.0", 1, &tasks),
            member("b", "1.0.0", 2, &tasks),
        ];
        let ranked = ranked_ids("t", &members);
        let fx = Fixture {
            members,
            vacant_since: [("t".to_string(), Duration::ZERO)].into(),
            ..Fixture::default()
        };
        let acted = Duration::from_secs(2);
        let acting: Acting = [(ranked[0].clone(), acted)].into();
        let view = |now| LeaseView {
            me: &ranked[1],
            members: &fx.members,
            present: &fx.present,
            held: &fx.held,
            covering: &fx.covering,
            vacant_since: &fx.vacant_since,
            members_changed: fx.members_changed,
            now,
            may_lead: true,
        };
        let waiting = decide_with(&view(VACANT_BOUND), &acting);
        assert!(waiting.actions.is_empty(), "{waiting:?}");
        assert_eq!(waiting.recheck_at, Some(acted + VACANT_BOUND));
        // It stopped acting: the backup covers one bound after it was last seen acting.
        assert_eq!(
            decide_with(&view(acted + VACANT_BOUND), &acting).actions,
            vec![LeaseAction::Cover("t".into())]
        );
        // Without news of it, the bound counts from the vacancy, as before.
        assert_eq!(
            decide(&view(VACANT_BOUND)).actions,
            vec![LeaseAction::Cover("t".into())]
        );
    }

    #[test]
    fn the_decision_lists_the_designated_tasks_whose_lease_another_holds() {
        let tasks = set(&["t", "u", "v"]);
        let members = vec![
            member("a", "1.0.0", 1, &tasks),
            member("b", "1.0.0", 2, &tasks),
        ];
        let me = ranked_ids("t", &members)[0].clone();
        let mine: Vec<String> = ["t", "u", "v"]
            .iter()
            .filter(|t| position(t, &me, &members) == Some(0))
            .map(|t| t.to_string())
            .collect();
        let fx = Fixture {
            members,
            present: names(&["t", "u", "v"]),
            ..Fixture::default()
        };
        assert_eq!(fx.decide(&me, Duration::ZERO, true).held_elsewhere, mine);
        assert!(mine.contains(&"t".to_string()));
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
            present: BTreeSet::new(),
            held: BTreeSet::new(),
            vacant_since: [("t".to_string(), Duration::ZERO)].into(),
            covering: BTreeMap::new(),
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
