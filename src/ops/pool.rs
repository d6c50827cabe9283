//! A pooled task's items as `explain` and `status` show them: who owns each item under the
//! assignment every node computes (`coord::pool::assign` over the live members that may hold
//! the pool's units, [`Member::in_pool`]), why (the owner's rank for `<task>/<item>`: the nodes
//! ranked above it had their share already), and who holds each item's unit in ZooKeeper now
//! (it differs from the owner while an item moves). A pure function of a [`Snapshot`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::model::{Definer, Snapshot, is_pooled};
use crate::coord::lease::{self, Member};
use crate::coord::pool;
use crate::coord::rank::{self, Candidate};
use crate::coord::records::TaskSetEntry;

/// A pooled task's items in `zkcron explain`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolView {
    /// The number of items (`ZKCRON_WORK_TOTAL`).
    pub total: usize,
    /// Each node that owns or holds items: the pool's members (by id), then any other
    /// holder (a node handing its items over).
    pub shares: Vec<ShareView>,
    /// Every item, in the task file's order.
    pub items: Vec<ItemView>,
}

/// One node's share of a pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShareView {
    pub node: String,
    /// The items the assignment gives it.
    pub owns: usize,
    /// The items whose unit it holds now (it runs those).
    pub holds: usize,
}

/// One item of a pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemView {
    pub item: String,
    /// The node the assignment gives it; `None` when no live node may hold the pool's units.
    pub owner: Option<String>,
    /// The owner's rank among the pool's members for `<task>/<item>` (1: it ranks first;
    /// above 1: the nodes ranked above it had their share already).
    pub rank: Option<usize>,
    /// The node holding the item's unit `<task>@<item>` now, if any.
    pub holder: Option<String>,
}

/// The pool of `task`, whose definition (the one `status` reads) is `entry`, among
/// `definers`; `None` for a task that is not pooled.
pub fn pool_view(
    snapshot: &Snapshot,
    task: &str,
    entry: &TaskSetEntry,
    definers: &[Definer<'_>],
) -> Option<PoolView> {
    if !is_pooled(entry) {
        return None;
    }
    let items = entry.work_items.as_deref().unwrap_or_default();
    let members: Vec<&Member> = definers
        .iter()
        .map(|d| d.member)
        .filter(|m| m.in_pool(task))
        .collect();
    let candidates: Vec<Candidate<'_>> = members
        .iter()
        .map(|m| Candidate {
            id: &m.id,
            release: &m.release,
            seed: m.seed,
        })
        .collect();
    let assignment = pool::assign(task, items, &candidates);
    let items: Vec<ItemView> = items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let owner = assignment.as_ref().map(|a| &candidates[a.owners[i]]);
            let key = pool::unit_key(task, item);
            let rank = owner.map(|owner| {
                1 + candidates
                    .iter()
                    .filter(|c| rank::compare(&key, c, owner).is_lt())
                    .count()
            });
            ItemView {
                item: item.clone(),
                owner: owner.map(|o| o.id.to_string()),
                rank,
                holder: snapshot
                    .leases
                    .get(&lease::unit_name(task, item))
                    .map(|l| l.node.clone()),
            }
        })
        .collect();
    let mut shares: BTreeMap<&str, ShareView> = members
        .iter()
        .map(|m| (m.id.as_str(), share(&m.id)))
        .collect();
    for item in &items {
        if let Some(owner) = &item.owner {
            shares.entry(owner).or_insert_with(|| share(owner)).owns += 1;
        }
        if let Some(holder) = &item.holder {
            shares.entry(holder).or_insert_with(|| share(holder)).holds += 1;
        }
    }
    let (mut shares, others): (Vec<ShareView>, Vec<ShareView>) = shares
        .into_values()
        .partition(|s| members.iter().any(|m| m.id == s.node));
    shares.extend(others);
    Some(PoolView {
        total: items.len(),
        shares,
        items,
    })
}

fn share(node: &str) -> ShareView {
    ShareView {
        node: node.to_string(),
        owns: 0,
        holds: 0,
    }
}
