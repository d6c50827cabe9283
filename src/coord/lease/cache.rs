//! This node's rank for every lease it may hold, kept across decisions ([`RankCache`]).
//!
//! A node decides up to a hundred times a second while leases are created (a cold start
//! creates thousands), and ranking 10,000 tasks against 20 members at each decision was most
//! of a node's CPU: the ranks are kept while the members stay the same. When members join,
//! leave or change (a cold start registers them one by one), a task's rank changes only where
//! such a member ranks above this node, so the cache is brought up to date from the change
//! alone: per task and changed member one comparison with this node (and with the designated
//! member when it ranks above this one), not a ranking of every member. Only the tasks whose
//! designated member left are ranked again. The outcome is exactly that of ranking afresh
//! with [`Peers`] (a test compares the two over random changes of random member sets).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::rank::{self, Candidate};
use super::{Holders, Member, Peers, lease_name, unit_name};

/// This node's rank for one task, packed: its position (`u16::MAX`: not eligible) and the
/// index of the designated member in the members the cache was built from (`u16::MAX`: this
/// node itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachedRank {
    pos: u16,
    top: u16,
}

impl CachedRank {
    const NONE: u16 = u16::MAX;

    fn pack(rank: Option<(usize, Option<usize>)>) -> CachedRank {
        match rank {
            None => CachedRank {
                pos: Self::NONE,
                top: Self::NONE,
            },
            Some((pos, top)) => CachedRank {
                // More than 65,534 members above this node: it never leads the task anyway.
                pos: u16::try_from(pos).unwrap_or(Self::NONE - 1),
                top: top.map_or(Self::NONE, |i| u16::try_from(i).unwrap_or(Self::NONE)),
            },
        }
    }

    pub(super) fn get<'a>(&self, members: &'a [Member]) -> Option<(usize, Option<&'a Member>)> {
        if self.pos == Self::NONE {
            return None;
        }
        let top = (self.top != Self::NONE).then(|| &members[usize::from(self.top)]);
        Some((usize::from(self.pos), top))
    }

    /// The index of the designated member, when it is another than this node.
    fn top(&self) -> Option<usize> {
        (self.top != Self::NONE).then_some(usize::from(self.top))
    }
}

/// This node's rank for every task it defines (by name, in the order of its task set), and for
/// every item of each pooled task, kept while everything ranking depends on stays the same:
/// each member's id, release, seed, task set, labels and whether it may lead, in the same
/// order; brought up to date from the change when only a few members joined, left or changed.
#[derive(Debug, Default)]
pub struct RankCache {
    me: String,
    /// The members the ranks were computed against, in the order given.
    members: Vec<Member>,
    /// By task, the same names as this node's task set (a pooled task's is no rank: see
    /// `pools`).
    pub(super) ranks: BTreeMap<String, CachedRank>,
    /// By pooled task, this node's rank for the unit of each item, in the items' order: one
    /// assignment per pooled task while the members stay the same.
    pub(super) pools: BTreeMap<String, Vec<CachedRank>>,
    /// By pooled task, the indexes of its items in the order of their names: a decision walks
    /// the units this way, alongside the sorted sets of leases.
    pub(super) by_name: BTreeMap<String, Vec<usize>>,
    /// The same ranks by unit name: a held unit is looked up, not searched for among items.
    units: BTreeMap<String, CachedRank>,
}

/// Whether `a` and `b` are the same as far as ranking goes.
fn same_member(a: &Member, b: &Member) -> bool {
    a.id == b.id
        && a.release == b.release
        && a.seed == b.seed
        && Arc::ptr_eq(&a.tasks, &b.tasks)
        && (Arc::ptr_eq(&a.labels, &b.labels) || a.labels == b.labels)
        && a.may_lead == b.may_lead
}

/// Whether no two of `members` share an id (members are told apart by id across changes).
fn unique(members: &[Member]) -> bool {
    (0..members.len()).all(|i| members[..i].iter().all(|o| o.id != members[i].id))
}

fn candidate(member: &Member) -> Candidate<'_> {
    Candidate {
        id: &member.id,
        release: &member.release,
        seed: member.seed,
    }
}

/// How many members may join, leave or change at once for the cache to follow the change; more
/// at once (a listing after a reconnect) are ranked afresh.
const MAX_CHANGED: usize = 4;

impl RankCache {
    /// Ranks this node again unless the members are the same as at the last call; from the
    /// change alone when few members changed.
    pub(super) fn refresh(&mut self, peers: &Peers<'_>, members: &[Member]) {
        if self.fresh(members.iter()) && self.me == peers.mine.id {
            return;
        }
        if !self.update(peers, members) {
            self.rebuild(peers, members);
        }
        self.me = peers.mine.id.clone();
        self.members = members.to_vec();
    }

    /// Whether the ranks were computed against exactly `members`, in this order.
    fn fresh<'m>(&self, members: impl ExactSizeIterator<Item = &'m Member>) -> bool {
        self.members.len() == members.len()
            && self
                .members
                .iter()
                .zip(members)
                .all(|(a, b)| same_member(a, b))
    }

    /// Ranks this node for every lease it defines against `members`.
    fn rebuild(&mut self, peers: &Peers<'_>, members: &[Member]) {
        self.ranks.clear();
        for (task, entry) in peers.mine.tasks.iter() {
            let rank = match &entry.holders {
                Holders::Items(_) => CachedRank::pack(None),
                _ => pack(
                    members,
                    peers.rank(&lease_name(task, entry, &peers.mine.id)),
                ),
            };
            self.ranks.insert(task.clone(), rank);
        }
        self.rank_pools(peers, members);
    }

    /// Ranks the items of every pooled task again (an assignment moves items between any
    /// members when one changes).
    fn rank_pools(&mut self, peers: &Peers<'_>, members: &[Member]) {
        self.pools.clear();
        self.units.clear();
        self.by_name.clear();
        for (task, entry) in peers.mine.tasks.iter() {
            if let Holders::Items(items) = &entry.holders {
                let mut by_name: Vec<usize> = (0..items.len()).collect();
                by_name.sort_unstable_by(|&a, &b| items[a].cmp(&items[b]));
                self.by_name.insert(task.clone(), by_name);
                let ranks: Vec<CachedRank> = peers
                    .pool_ranks(task)
                    .into_iter()
                    .map(|rank| pack(members, rank))
                    .collect();
                for (item, rank) in items.iter().zip(&ranks) {
                    self.units.insert(unit_name(task, item), *rank);
                }
                self.pools.insert(task.clone(), ranks);
            }
        }
    }

    /// Brings the ranks from the members they were computed against to `members`, when this
    /// node is the same and at most [`MAX_CHANGED`] others joined, left or changed (a changed
    /// member leaves as it was and joins as it is). False when it must be built again.
    fn update(&mut self, peers: &Peers<'_>, members: &[Member]) -> bool {
        let mine = peers.mine;
        let me_same = self.me == mine.id
            && self.ranks.len() == mine.tasks.len()
            && self.members.iter().any(|m| same_member(m, mine));
        if !me_same || !unique(members) || !unique(&self.members) {
            return false;
        }
        let kept = |m: &Member, set: &[Member]| set.iter().any(|o| same_member(o, m));
        let gone: Vec<usize> = (0..self.members.len())
            .filter(|&i| !kept(&self.members[i], members))
            .collect();
        let came: Vec<&Member> = members.iter().filter(|m| !kept(m, &self.members)).collect();
        if gone.len() + came.len() > MAX_CHANGED {
            return false;
        }
        // Where each member the ranks were computed against is now (a member that stayed is
        // the same, so the first with its id).
        let moved: Vec<Option<usize>> = self
            .members
            .iter()
            .map(|old| members.iter().position(|m| same_member(m, old)))
            .collect();
        let old = std::mem::take(&mut self.members);
        for ((task, entry), rank) in mine.tasks.iter().zip(self.ranks.values_mut()) {
            if entry.holders != Holders::Leader || rank.pos == CachedRank::NONE {
                // A unit is its node's alone and this node's eligibility is its own: neither
                // depends on the others. Pooled tasks are ranked again below.
                continue;
            }
            let change = Change {
                task,
                mine,
                old: &old,
                gone: &gone,
                came: &came,
                members,
            };
            *rank = match change.apply(*rank, &moved) {
                Some(rank) => rank,
                None => pack(members, peers.rank(task)),
            };
        }
        self.members = old;
        self.rank_pools(peers, members);
        true
    }

    /// This node's cached rank for `lease`: a task it defines (its own lease) or the unit of
    /// an item of a pooled task it defines (`Some(None)`: not eligible); `None` for any other
    /// lease, which the caller ranks itself.
    pub(super) fn rank_of<'a>(
        &self,
        lease: &str,
        members: &'a [Member],
    ) -> Option<Option<(usize, Option<&'a Member>)>> {
        let rank = match self.units.get(lease) {
            Some(rank) => rank,
            None => self.leader_rank(lease)?,
        };
        Some(rank.get(members))
    }

    /// The cached rank of `task` when it is a task with one lease that this node defines.
    fn leader_rank(&self, task: &str) -> Option<&CachedRank> {
        let mine = self.members.iter().find(|m| m.id == self.me)?;
        let leader = mine.tasks.get(task)?.holders == Holders::Leader;
        leader.then(|| self.ranks.get(task)).flatten()
    }

    /// The designated member of `task`, a task with one lease that this node defines and may
    /// hold, when the ranks were computed against exactly `members` (in this order); `None`
    /// when the cache cannot tell (the caller ranks the task itself).
    pub fn designated<'m>(
        &'m self,
        task: &str,
        members: impl ExactSizeIterator<Item = &'m Member>,
    ) -> Option<&'m str> {
        let rank = self.leader_rank(task)?;
        if rank.pos == CachedRank::NONE || !self.fresh(members) {
            return None;
        }
        Some(match rank.top() {
            Some(top) => &self.members[top].id,
            None => &self.me,
        })
    }
}

/// The members that left or changed (`gone`, indices into `old`) and joined or changed
/// (`came`), applied to this node's rank for one task.
struct Change<'c> {
    task: &'c str,
    mine: &'c Member,
    old: &'c [Member],
    gone: &'c [usize],
    came: &'c [&'c Member],
    members: &'c [Member],
}

impl Change<'_> {
    /// This node's rank after the change, from `rank` before it (`moved`: where each old
    /// member is now); `None` when the designated member left or changed (rank afresh).
    fn apply(&self, rank: CachedRank, moved: &[Option<usize>]) -> Option<CachedRank> {
        let (mut pos, _) = rank.get(self.old)?;
        let mut top = rank.top();
        for &i in self.gone {
            if self.above(&self.old[i]) {
                if top == Some(i) {
                    return None;
                }
                pos -= 1;
            }
        }
        let mut top = match top.take() {
            Some(i) => Some(&self.members[moved[i]?]),
            None => None,
        };
        for &member in self.came {
            if self.above(member) {
                pos += 1;
                let better = top.is_none_or(|best| {
                    rank::compare(self.task, &candidate(member), &candidate(best)).is_lt()
                });
                if better {
                    top = Some(member);
                }
            }
        }
        let index = top.map(|t| {
            self.members
                .iter()
                .position(|m| std::ptr::eq(m, t))
                .expect("one of the members")
        });
        Some(CachedRank::pack(Some((pos, index))))
    }

    /// Whether `other` is eligible for the task and ranks above this node, as [`Peers`]
    /// counts it.
    fn above(&self, other: &Member) -> bool {
        if other.id == self.mine.id || !other.may_lead {
            return false;
        }
        let eligible = if Arc::ptr_eq(&other.tasks, &self.mine.tasks) {
            self.mine.tasks[self.task].admits(&other.release, &other.labels)
        } else {
            other.eligible(self.task)
        };
        eligible && rank::compare(self.task, &candidate(other), &candidate(self.mine)).is_lt()
    }
}

/// A rank against `members` packed, its designated member as an index into them.
fn pack(members: &[Member], rank: Option<(usize, Option<&Member>)>) -> CachedRank {
    let index =
        |top: Option<&Member>| top.and_then(|t| members.iter().position(|m| std::ptr::eq(m, t)));
    CachedRank::pack(rank.map(|(pos, top)| (pos, index(top))))
}
