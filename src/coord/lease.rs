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
//! A task that runs on every node ([`Holders::EveryNode`]) has no lease of its own: each
//! eligible member holds its *unit* of it ([`unit_name`]), designated for it alone, so a unit is
//! taken at once and never covered. A pooled task ([`Holders::Items`]) has one unit per work
//! item, designated for the item's owner under `coord::pool`'s assignment and covered like a
//! task's lease (`pool_units`).
//!
//! The cluster node (`coord::node`, which the ZooKeeper driver and the simulation both run)
//! calls this, so the simulation checks the same decisions the daemon makes. [`decide`] runs
//! for every task at every decision, so ranking is cheap (see `Peers`).
//!
//! Files: `cache` (this node's rank for every lease it may hold, [`RankCache`]), `pool_units`
//! (a pooled task's units), `why` (why a member may not own a task, in one wording).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use semver::{Version, VersionReq};

use super::rank::{self, Candidate};

mod cache;
mod pool_units;
mod why;
pub use cache::RankCache;
pub use why::{label_pairs, why_ineligible, why_none_eligible};

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
    /// Label pairs a member's `[node] labels` must all contain (empty: any member).
    pub require_labels: BTreeMap<String, String>,
    /// Who holds the task's leases.
    pub holders: Holders,
    /// `max_runs`: the claims of this node's definition refuse a run past it.
    pub max_runs: Option<u32>,
}

/// Who holds the leases of a task.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Holders {
    /// One lease, `<task>`, held by the best ranked eligible member (the leader).
    #[default]
    Leader,
    /// One lease per eligible member, the *unit* `<task>@<node-id>` ([`unit_name`]), held by
    /// that member alone: nobody covers for it, and the task itself has no lease.
    EveryNode,
    /// One lease per work item (these, in the task file's order), the unit `<task>@<item>`,
    /// held by the item's owner under `coord::pool`'s assignment over the members that may
    /// hold the task, and covered when vacant by the next ranked for `<task>/<item>`
    /// (`pool_units`); the task itself has no lease.
    Items(Arc<[String]>),
}

/// The unit `<task>@<which>` of `task`: `which` is the node that holds it when the task runs on
/// every node, the work item when the task is pooled (`@` is in no task name, node id or item
/// name, so a unit's name is no task's).
pub fn unit_name(task: &str, which: &str) -> String {
    format!("{task}@{which}")
}

/// The task and node (or item) of a unit's name ([`unit_name`]); `None` for a task's own name.
pub fn split_unit(name: &str) -> Option<(&str, &str)> {
    name.split_once('@')
}

/// The lease of `task` (defined as `entry`) that member `me` may hold: the task's own, or
/// its unit for a task that runs on every node. A pooled task's leases are its items' units
/// ([`lease_names`]); its own name, returned here, is a lease no member may hold.
pub fn lease_name<'a>(task: &'a str, entry: &TaskEntry, me: &str) -> std::borrow::Cow<'a, str> {
    match entry.holders {
        Holders::Leader | Holders::Items(_) => std::borrow::Cow::Borrowed(task),
        Holders::EveryNode => std::borrow::Cow::Owned(unit_name(task, me)),
    }
}

/// Every lease of `task` (defined as `entry`) that member `me` may come to hold: the task's
/// own, its unit of a task that runs on every node, or the unit of each item of a pooled task.
pub fn lease_names(task: &str, entry: &TaskEntry, me: &str) -> Vec<String> {
    match &entry.holders {
        Holders::Items(items) => items.iter().map(|item| unit_name(task, item)).collect(),
        Holders::Leader | Holders::EveryNode => vec![lease_name(task, entry, me).into_owned()],
    }
}

impl TaskEntry {
    /// Whether a member of `release` with `labels` satisfies this definition's requirements.
    pub fn admits(&self, release: &Version, labels: &BTreeMap<String, String>) -> bool {
        self.version_req
            .as_ref()
            .is_none_or(|req| req.matches(release))
            && self.labels_match(labels)
    }

    /// Whether `labels` contain every required pair.
    pub fn labels_match(&self, labels: &BTreeMap<String, String>) -> bool {
        self.require_labels
            .iter()
            .all(|(name, value)| labels.get(name) == Some(value))
    }
}

/// A member's `[node] labels`, shared (members are cloned at every decision).
pub type Labels = Arc<BTreeMap<String, String>>;

/// The tasks a member defines, by name. Shared: members with the same `jobs.d` share one set.
pub type TaskSet = BTreeMap<String, TaskEntry>;

/// A registered node, as far as ranking goes.
#[derive(Debug, Clone)]
pub struct Member {
    pub id: String,
    pub release: Version,
    pub seed: u64,
    pub tasks: Arc<TaskSet>,
    /// False when the member announced it may not lead (its clock is too far off, or it is
    /// drained): it is then eligible for nothing, so the others do not wait for it, and a
    /// backup that took one of its leases is the designated leader and keeps it.
    pub may_lead: bool,
    /// The member's `[node] labels`, matched against a task's `require_labels`.
    pub labels: Labels,
    /// The operator drained the member (`control/drained/<id>`): it leads nothing (`may_lead`
    /// is false too); kept apart only to say why in reports.
    pub drained: bool,
}

impl Member {
    /// Whether this member may hold the lease `task`: it may lead at all, defines the task,
    /// its release matches the definition's `version_req`, and its labels contain the
    /// definition's `require_labels`. The lease of a task that runs on every node is a unit
    /// ([`unit_name`]), which only its own node may hold; a pooled task's are its items'
    /// units, which any member whose definition lists the item may hold.
    pub fn eligible(&self, task: &str) -> bool {
        if !self.may_lead {
            return false;
        }
        let (name, unit) = match split_unit(task) {
            Some((name, unit)) => (name, Some(unit)),
            None => (task, None),
        };
        let Some(entry) = self.tasks.get(name) else {
            return false;
        };
        let named = match (&entry.holders, unit) {
            (Holders::Leader, None) => true,
            (Holders::EveryNode, Some(node)) => node == self.id,
            (Holders::Items(items), Some(item)) => items.iter().any(|i| i == item),
            _ => false,
        };
        named && entry.admits(&self.release, &self.labels)
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
        let entry = match split_unit(task) {
            Some((name, item)) => {
                return match mine.tasks.get(name).map(|e| &e.holders) {
                    Some(Holders::Items(items)) => {
                        let i = items.iter().position(|i| i == item)?;
                        self.pool_ranks(name).swap_remove(i)
                    }
                    // A unit is its own node's alone: designated when eligible, nobody above.
                    _ => mine.eligible(task).then_some((0, None)),
                };
            }
            None => mine.tasks.get(task)?,
        };
        if entry.holders != Holders::Leader {
            return None;
        }
        // A member sharing this node's task set shares its definition of the task, so only
        // its release and labels are checked, against the entry looked up once.
        let matches = |member: &Member| entry.admits(&member.release, &member.labels);
        if !matches(mine) {
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
                matches(other)
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
    decide_cached(view, acting, &mut RankCache::default())
}

/// [`decide_with`], reusing this node's rank for every lease it defines (held ones too) from
/// `cache`, which a change of a few members brings up to date (see [`RankCache`]). A node decides up to a hundred times a second
/// while leases are created (a cold start creates thousands); ranking 10,000 tasks against 20
/// members at each of those decisions was most of a node's CPU and held a 20-node cold start to
/// ~260 takes a second. Same result as [`decide_with`] (a test checks it).
pub fn decide_cached(view: &LeaseView<'_>, acting: &Acting, cache: &mut RankCache) -> Decision {
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
    cache.refresh(&peers, view.members);
    release_held(view, &peers, acting, cache, &mut decision);
    if view.may_lead {
        take_vacant(view, me, acting, cache, &mut decision);
    }
    decision.actions.sort();
    decision.held_elsewhere.sort();
    decision
}

/// When the designated node `top` was last seen acting, if it was.
fn acted(acting: &Acting, top: Option<&Member>) -> Option<Duration> {
    top.and_then(|d| acting.get(&d.id)).copied()
}

/// Which of the leases this node holds it gives up: those it may not lead, and covers whose
/// hold is over (or, once the designated node acts, their short hold).
fn release_held(
    view: &LeaseView<'_>,
    peers: &Peers<'_>,
    acting: &Acting,
    cache: &RankCache,
    decision: &mut Decision,
) {
    for task in view.held {
        let rank = match cache.rank_of(task, view.members) {
            Some(rank) => rank,
            None => peers.rank(task),
        };
        let Some((pos, top)) = rank.filter(|_| view.may_lead) else {
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
        let until = match acted(acting, top) {
            Some(at) if at > taken => taken + COVER_MIN_HOLD,
            _ => taken + COVER_HOLD,
        };
        if view.now < until {
            decision.recheck(until);
        } else {
            decision.actions.push(LeaseAction::Release(task.clone()));
        }
    }
}

/// Which vacant leases of the tasks this node (`me`) defines it takes (as the designated node)
/// or covers (as a later one), each once it has been vacant for its rank's share of
/// [`VACANT_BOUND`]; and which of its tasks another node holds while this one is designated.
fn take_vacant(
    view: &LeaseView<'_>,
    me: &Member,
    acting: &Acting,
    cache: &RankCache,
    decision: &mut Decision,
) {
    // The task names and every set below are sorted the same way: one walk over each.
    let mut held = Walk::new(view.held.iter().map(|t| (t.as_str(), ())));
    let mut present = Walk::new(view.present.iter().map(|t| (t.as_str(), ())));
    let mut vacant_since = Walk::new(view.vacant_since.iter().map(|(t, at)| (t.as_str(), at)));
    for ((name, entry), rank) in me.tasks.iter().zip(cache.ranks.values()) {
        match &entry.holders {
            Holders::Leader => {
                let state = LeaseState {
                    held: held.find(name).is_some(),
                    present: present.find(name).is_some(),
                    vacant_since: vacant_since.find(name).copied(),
                };
                let lease = LeaseName::Task(name);
                consider(view, acting, decision, lease, state, rank.get(view.members));
            }
            // A unit's name sorts elsewhere than its task's: looked up, not walked to.
            Holders::EveryNode => {
                let unit = unit_name(name, &me.id);
                let state = LeaseState::of(view, &unit);
                let lease = LeaseName::Task(&unit);
                consider(view, acting, decision, lease, state, rank.get(view.members));
            }
            Holders::Items(items) => take_vacant_items(view, acting, cache, decision, name, items),
        }
    }
}

/// [`take_vacant`] for the units of the pooled `task`: its items in the order of their names,
/// walked alongside the part of each set of leases that holds its units (`<task>@...`, sorted
/// the same way), so a unit costs a comparison per set and its name is built only when an
/// action names it. Looking every unit up by a name built for it (three searches and an
/// allocation per unit and decision) was most of a node's CPU in a 20-node cold start of ten
/// pools of 1,000 items: the nodes, short of CPU, answered their takes too late, and the
/// backups covered.
fn take_vacant_items(
    view: &LeaseView<'_>,
    acting: &Acting,
    cache: &RankCache,
    decision: &mut Decision,
    task: &str,
    items: &[String],
) {
    let ranks = cache.pools.get(task).map_or(&[][..], Vec::as_slice);
    let by_name = cache.by_name.get(task).map_or(&[][..], Vec::as_slice);
    let prefix = unit_name(task, "");
    let mut held = Walk::new(units_of(&prefix, view.held).map(|i| (i, ())));
    let mut present = Walk::new(units_of(&prefix, view.present).map(|i| (i, ())));
    let vacant = view
        .vacant_since
        .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded));
    let mut vacant_since = Walk::new(
        vacant
            .map_while(|(unit, at)| Some((unit.strip_prefix(prefix.as_str())?, at)))
            .filter(|(item, _)| !item.is_empty()),
    );
    for &i in by_name {
        let (Some(item), Some(rank)) = (items.get(i), ranks.get(i)) else {
            continue;
        };
        let state = LeaseState {
            held: held.find(item).is_some(),
            present: present.find(item).is_some(),
            vacant_since: vacant_since.find(item).copied(),
        };
        let lease = LeaseName::Unit(task, item);
        consider(view, acting, decision, lease, state, rank.get(view.members));
    }
}

/// The items of the units in `set` whose names start with `prefix` (`<task>@`), in order.
fn units_of<'a>(prefix: &'a str, set: &'a BTreeSet<String>) -> impl Iterator<Item = &'a str> {
    set.range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
        .map_while(move |name| name.strip_prefix(prefix))
        .filter(|item| !item.is_empty())
}

/// The name of a lease [`consider`] looks at, built only when an action names it.
#[derive(Clone, Copy)]
enum LeaseName<'a> {
    /// A task's own lease, or a unit whose name is at hand.
    Task(&'a str),
    /// The unit of this item of this pooled task.
    Unit(&'a str, &'a str),
}

impl LeaseName<'_> {
    fn owned(self) -> String {
        match self {
            LeaseName::Task(name) => name.to_string(),
            LeaseName::Unit(task, item) => unit_name(task, item),
        }
    }
}

/// What a node knows of one lease of a task it defines.
struct LeaseState {
    held: bool,
    present: bool,
    vacant_since: Option<Duration>,
}

impl LeaseState {
    /// The state of `lease`, looked up in `view`.
    fn of(view: &LeaseView<'_>, lease: &str) -> LeaseState {
        LeaseState {
            held: view.held.contains(lease),
            present: view.present.contains(lease),
            vacant_since: view.vacant_since.get(lease).copied(),
        }
    }
}

/// Whether this node, ranked `rank` for `lease` (in `state`), takes or covers it now, later
/// (a recheck), or notes that another holds it while this node is designated.
fn consider(
    view: &LeaseView<'_>,
    acting: &Acting,
    decision: &mut Decision,
    lease: LeaseName<'_>,
    state: LeaseState,
    rank: Option<(usize, Option<&Member>)>,
) {
    if state.held {
        return;
    }
    let Some((pos, top)) = rank else {
        return;
    };
    if state.present {
        if pos == 0 {
            decision.held_elsewhere.push(lease.owned());
        }
        return;
    }
    let mut since = state
        .vacant_since
        .unwrap_or(view.now)
        .max(view.members_changed);
    if let Some(at) = acted(acting, top) {
        // The designated node is working through its leases: wait for it.
        since = since.max(at);
    }
    let due = since + VACANT_BOUND * pos as u32;
    if due > view.now {
        decision.recheck(due);
    } else if pos == 0 {
        decision.actions.push(LeaseAction::Take(lease.owned()));
    } else {
        decision.actions.push(LeaseAction::Cover(lease.owned()));
    }
}

/// A cursor over a sorted sequence of `(name, value)`, asked for names in ascending order.
struct Walk<'a, T, I: Iterator<Item = (&'a str, T)>> {
    items: std::iter::Peekable<I>,
}

impl<'a, T, I: Iterator<Item = (&'a str, T)>> Walk<'a, T, I> {
    fn new(items: I) -> Self {
        Walk {
            items: items.peekable(),
        }
    }

    /// The value of `name`, skipping the names before it (never asked for again).
    fn find(&mut self, name: &str) -> Option<T> {
        // One comparison per name passed (a decision walks every task this node defines).
        while let Some((next, _)) = self.items.peek() {
            match (*next).cmp(name) {
                std::cmp::Ordering::Less => self.items.next(),
                std::cmp::Ordering::Equal => return self.items.next().map(|(_, value)| value),
                std::cmp::Ordering::Greater => return None,
            };
        }
        None
    }
}

#[cfg(test)]
mod cache_tests;
#[cfg(test)]
mod pool_unit_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod unit_tests;
