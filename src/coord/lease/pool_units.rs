//! Who holds the units of a pooled task ([`Holders::Items`]): the unit `<task>@<item>` is
//! designated for the item's owner under `coord::pool`'s assignment over the members that may
//! hold the task (so shares stay even and a join or a leave moves few items), and covered when
//! vacant by the others in the order leases are ranked for `<task>/<item>` (the item's owner
//! first), each after its rank's share of [`VACANT_BOUND`](super::VACANT_BOUND) as for a task.
//! The assignment is computed once per pooled task while the members stay the same
//! ([`RankCache`](super::RankCache)).

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::sync::Arc;

use super::{Holders, Member, Peers};
use crate::coord::pool;
use crate::coord::rank::{self, Candidate};

impl Member {
    /// Whether this member is one of the pooled `task`'s members, over which every node
    /// splits its items ([`pool::assign`]): it may lead, defines `task` as a pooled task, and
    /// meets that definition's requirements. `zkcron explain` splits a pool over the same
    /// members.
    pub fn in_pool(&self, task: &str) -> bool {
        self.may_lead
            && self.tasks.get(task).is_some_and(|entry| {
                matches!(entry.holders, Holders::Items(_))
                    && entry.admits(&self.release, &self.labels)
            })
    }
}

impl<'a> Peers<'a> {
    /// This node's rank for the unit of each item of the pooled `task` it defines, in the
    /// items' order: its position (0: it owns the item) and the item's owner when that is
    /// another member; `None` for an item whose unit it may not hold. Empty when `task` is not
    /// a pooled task of this node's.
    pub(super) fn pool_ranks(&self, task: &str) -> Vec<Option<(usize, Option<&'a Member>)>> {
        let mine = self.mine;
        let Some(entry) = mine.tasks.get(task) else {
            return Vec::new();
        };
        let Holders::Items(items) = &entry.holders else {
            return Vec::new();
        };
        if !mine.may_lead || !entry.admits(&mine.release, &mine.labels) {
            return vec![None; items.len()];
        }
        // The pool's members: this node and every other that may hold the task's units. A
        // member sharing this node's task set shares its definition (and its items).
        let pooled = |other: &Member| other.in_pool(task);
        let members: Vec<&'a Member> = std::iter::once(mine)
            .chain(
                self.others
                    .iter()
                    .filter(|(other, _, shared)| {
                        if *shared {
                            entry.admits(&other.release, &other.labels)
                        } else {
                            pooled(other)
                        }
                    })
                    .map(|(other, _, _)| *other),
            )
            .collect();
        let candidates: Vec<Candidate<'_>> = members.iter().map(|m| m.candidate()).collect();
        // The items each member's own definition lists (`None`: this node's, all of them),
        // looked up once per member rather than once per (item, member).
        let lists: Vec<Option<BTreeSet<&str>>> = members
            .iter()
            .map(|member| {
                if Arc::ptr_eq(&member.tasks, &mine.tasks) {
                    return None;
                }
                match member.tasks.get(task).map(|e| &e.holders) {
                    Some(Holders::Items(theirs)) => {
                        Some(theirs.iter().map(String::as_str).collect())
                    }
                    _ => Some(BTreeSet::new()),
                }
            })
            .collect();
        let assignment = pool::assign(task, items, &candidates).expect("this node is a candidate");
        items
            .iter()
            .zip(&assignment.owners)
            .map(|(item, &owner)| {
                if owner == 0 {
                    return Some((0, None));
                }
                // The owner first, then every other member that may hold this item's unit
                // and ranks above this node for `<task>/<item>`.
                let key = pool::unit_key(task, item);
                let above = lists
                    .iter()
                    .zip(&candidates)
                    .enumerate()
                    .filter(|&(i, (list, candidate))| {
                        i != 0
                            && i != owner
                            && list.as_ref().is_none_or(|l| l.contains(item.as_str()))
                            && rank::compare(&key, candidate, &candidates[0]) == Ordering::Less
                    })
                    .count();
                Some((1 + above, Some(members[owner])))
            })
            .collect()
    }
}
