//! Who owns which item of a work pool: a bounded-load rendezvous assignment, a pure function
//! of the task, its items and the eligible nodes (no clock, no I/O).
//!
//! # The rule
//! With `n` items over `k` eligible nodes, `q = n / k` and `r = n % k`. Every (item, node) pair
//! is ranked as a lease is ranked for the unit `"<task>/<item>"` ([`rank::compare`]: the
//! node's release, highest first; then the rendezvous score of the node's seed over
//! `"<task>/<item>"`, highest first; then node id), all pairs of all items in one order. Walking
//! that order, an item goes to the pair's node when the item is still unassigned and the node
//! holds fewer than `q` items, or exactly `q` while fewer than `r` nodes hold `q + 1`. So every
//! node ends with `q` or `q + 1` items (the walk can always place an item: the bounds add up to
//! `n`), each item goes to the best-ranked node that still has room, and the newest release's
//! nodes fill first during a rolling upgrade.
//!
//! Every node computes the same assignment from what the members publish: the score has a fixed
//! specification ([`rank::score`]) and the order is total, so neither the order the nodes are
//! given in nor the platform changes it (the tests check both).
//!
//! # Movement
//! A node joining takes the items where it ranks first while it has room; a leaving node's items
//! go to the next best node with room. Because the bounds change with `k`, a few more items than
//! the minimum move (the tests and docs/BENCHMARKS.md measure it: at 1,000 items over 20 nodes,
//! 1.4 times the minimum for a join and 1.5 for a leave, medians; at most 1.6). Walking the
//! items one by one instead (each to its best node with room) moved slightly more.
//!
//! `coord::lease` designates each item's unit `<task>@<item>` for its owner by this rule, and a
//! node claims each tick over the units it holds (`coord::node`'s `pool`).

use std::cmp::Ordering;

use super::rank::{self, Candidate};

/// Which node owns each item: `owners[i]` is the index (in the candidates given to [`assign`])
/// of the owner of item `i`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub owners: Vec<usize>,
}

impl Assignment {
    /// How many items each candidate owns, by its index.
    pub fn shares(&self, candidates: usize) -> Vec<usize> {
        let mut shares = vec![0; candidates];
        for &owner in &self.owners {
            shares[owner] += 1;
        }
        shares
    }

    /// The indexes of the items candidate `node` owns, in the items' order.
    pub fn items_of(&self, node: usize) -> impl Iterator<Item = usize> + '_ {
        self.owners
            .iter()
            .enumerate()
            .filter(move |(_, owner)| **owner == node)
            .map(|(item, _)| item)
    }
}

/// The name an item is ranked under: `<task>/<item>` (neither contains a `/`).
pub fn unit_key(task: &str, item: &str) -> String {
    format!("{task}/{item}")
}

/// The owners of `items` of `task` among `candidates` (the eligible nodes); `None` when there
/// are none. See the module docs for the rule.
pub fn assign(task: &str, items: &[String], candidates: &[Candidate<'_>]) -> Option<Assignment> {
    let k = candidates.len();
    if k == 0 {
        return None;
    }
    let (q, r) = (items.len() / k, items.len() % k);
    let releases = release_ranks(candidates);
    let mut pairs: Vec<Pair> = Vec::with_capacity(items.len() * k);
    for (item, name) in items.iter().enumerate() {
        let key = unit_key(task, name);
        for (node, candidate) in candidates.iter().enumerate() {
            pairs.push(Pair {
                item,
                node,
                release: releases[node],
                score: rank::score(candidate.seed, &key),
            });
        }
    }
    pairs.sort_unstable_by(|a, b| a.order(b, candidates));
    let mut owners: Vec<Option<usize>> = vec![None; items.len()];
    let mut loads = vec![0usize; k];
    let mut above_q = 0;
    let mut left = items.len();
    for pair in pairs {
        if left == 0 {
            break;
        }
        if owners[pair.item].is_some() {
            continue;
        }
        let load = loads[pair.node];
        let room = load < q || (load == q && above_q < r);
        if !room {
            continue;
        }
        if load == q {
            above_q += 1;
        }
        loads[pair.node] += 1;
        owners[pair.item] = Some(pair.node);
        left -= 1;
    }
    Some(Assignment {
        owners: owners
            .into_iter()
            .map(|owner| owner.expect("the bounds add up to the number of items"))
            .collect(),
    })
}

/// Each candidate's release as a rank (0: the highest release's precedence; equal
/// precedences, equal ranks), so that sorting the pairs compares numbers: comparing the
/// releases themselves at each comparison was a tenth of a node's CPU while members joined.
fn release_ranks(candidates: &[Candidate<'_>]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by(|&a, &b| candidates[b].release.cmp_precedence(candidates[a].release));
    let mut ranks = vec![0; candidates.len()];
    let mut rank = 0;
    for (at, &i) in order.iter().enumerate() {
        if at > 0 {
            let before = candidates[order[at - 1]].release;
            if before.cmp_precedence(candidates[i].release) != Ordering::Equal {
                rank += 1;
            }
        }
        ranks[i] = rank;
    }
    ranks
}

/// One (item, node) pair with the node's release rank ([`release_ranks`]) and score for the
/// item.
struct Pair {
    item: usize,
    node: usize,
    release: usize,
    score: u64,
}

impl Pair {
    /// The ranking of [`rank::compare`] for pairs of any items: release (highest first), score
    /// (highest first), node id, then the item's position so that the order is total.
    fn order(&self, other: &Pair, candidates: &[Candidate<'_>]) -> Ordering {
        self.release
            .cmp(&other.release)
            .then_with(|| other.score.cmp(&self.score))
            .then_with(|| candidates[self.node].id.cmp(candidates[other.node].id))
            .then_with(|| self.item.cmp(&other.item))
    }
}

#[cfg(test)]
mod tests;
