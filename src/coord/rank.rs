//! Who leads a task: the ranking of eligible nodes, a pure function.
//!
//! For each task the eligible nodes are ordered by
//! 1. release, highest semver precedence first ([`semver::Version::cmp_precedence`], so build
//!    metadata does not matter: `2.0.0+a` and `2.0.0+b` are the same release);
//! 2. a rendezvous (highest-random-weight) score of the node's random seed and the task name,
//!    highest first;
//! 3. node id, ascending (only decides between equal seeds, which do not happen in practice).
//!
//! The first node is the task's designated leader.
//!
//! # The score's specification
//! `score(seed, task) = XXH3_64bits_withSeed(utf8(task), seed)`: XXH3, 64-bit variant, as
//! specified at <https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md>, over the task
//! name's UTF-8 bytes with the node's seed as the XXH3 seed. Every release, on every platform,
//! computes the same score, so nodes of different releases agree on the ranking. Never
//! `std`'s `DefaultHasher`, whose algorithm may change between Rust releases.
//!
//! Rendezvous hashing gives each node an equal share of the tasks of its release (every node's
//! score is an independent uniform draw per task) and moves few tasks on change: a joining node
//! takes only the tasks where it scores highest (about `1/(n+1)` of them), a leaving node gives
//! up only its own.

use std::cmp::Ordering;

use semver::Version;
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// What the ranking needs to know of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate<'a> {
    pub id: &'a str,
    pub release: &'a Version,
    pub seed: u64,
}

/// The rendezvous score of a node (by its seed) for a task; see the module docs for the spec.
pub fn score(seed: u64, task: &str) -> u64 {
    xxh3_64_with_seed(task.as_bytes(), seed)
}

/// Orders two nodes for `task`: `Less` means `a` ranks above `b`.
pub fn compare(task: &str, a: &Candidate<'_>, b: &Candidate<'_>) -> Ordering {
    b.release
        .cmp_precedence(a.release)
        .then_with(|| score(b.seed, task).cmp(&score(a.seed, task)))
        .then_with(|| a.id.cmp(b.id))
}

/// The eligible nodes for `task`, best first.
pub fn rank<'a>(
    task: &str,
    candidates: impl IntoIterator<Item = Candidate<'a>>,
) -> Vec<Candidate<'a>> {
    let mut ranked: Vec<Candidate<'a>> = candidates.into_iter().collect();
    ranked.sort_by(|a, b| compare(task, a, b));
    ranked
}

/// The designated leader of `task` among the eligible nodes; `None` if there are none.
pub fn designated<'a>(
    task: &str,
    candidates: impl IntoIterator<Item = Candidate<'a>>,
) -> Option<Candidate<'a>> {
    candidates.into_iter().min_by(|a, b| compare(task, a, b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    struct Node {
        id: String,
        release: Version,
        seed: u64,
    }

    impl Node {
        fn candidate(&self) -> Candidate<'_> {
            Candidate {
                id: &self.id,
                release: &self.release,
                seed: self.seed,
            }
        }
    }

    fn nodes(count: usize, release: &str, rng: &mut StdRng) -> Vec<Node> {
        (0..count)
            .map(|i| Node {
                id: format!("node-{i:02}"),
                release: Version::parse(release).unwrap(),
                seed: rng.random(),
            })
            .collect()
    }

    fn tasks(count: usize) -> Vec<String> {
        (0..count).map(|i| format!("task-{i:05}")).collect()
    }

    fn leaders<'a>(tasks: &[String], nodes: &'a [Node]) -> Vec<&'a str> {
        tasks
            .iter()
            .map(|t| designated(t, nodes.iter().map(Node::candidate)).unwrap().id)
            .collect()
    }

    /// `python3 -c "import xxhash; print(xxhash.xxh3_64_intdigest(b'nightly-report', seed=42))"`,
    /// an independent implementation of the same specification.
    const PINNED_NIGHTLY_REPORT: u64 = 7_067_923_655_005_833_206;

    #[test]
    fn the_score_has_a_fixed_specification() {
        // XXH3-64 with seed, from the reference implementation (xxhsum -H3 and XXH3_64bits_withSeed).
        assert_eq!(score(0, ""), 0x2d06800538d394c2);
        // Pinned values: if these change, nodes of different releases disagree on leaders.
        assert_eq!(score(42, "nightly-report"), PINNED_NIGHTLY_REPORT);
    }

    #[test]
    fn given_10000_tasks_over_10_equal_nodes_then_every_node_leads_within_10_percent_of_the_mean() {
        for trial in 0..5 {
            let mut rng = StdRng::seed_from_u64(trial);
            let nodes = nodes(10, "1.0.0", &mut rng);
            let tasks = tasks(10_000);
            let mut counts = std::collections::HashMap::new();
            for leader in leaders(&tasks, &nodes) {
                *counts.entry(leader).or_insert(0usize) += 1;
            }
            assert_eq!(counts.len(), 10, "every node leads some tasks");
            for (node, count) in counts {
                assert!(
                    (900..=1100).contains(&count),
                    "trial {trial}: {node} leads {count} of 10000 tasks; the mean is 1000"
                );
            }
        }
    }

    #[test]
    fn given_a_node_joining_then_it_takes_about_one_in_n_plus_1_tasks_and_nothing_else_moves() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut all = nodes(11, "1.0.0", &mut rng);
        let tasks = tasks(10_000);
        let newcomer = all.pop().unwrap();
        let before: Vec<String> = leaders(&tasks, &all)
            .into_iter()
            .map(String::from)
            .collect();
        all.push(newcomer);
        let after = leaders(&tasks, &all);
        let mut moved = 0;
        for (b, a) in before.iter().zip(&after) {
            if b != a {
                moved += 1;
                assert_eq!(*a, "node-10", "a task moved between two old nodes");
            }
        }
        // 1/(n+1) = 1/11 of 10,000 = 909; within ±10 %.
        assert!((818..=1000).contains(&moved), "{moved} tasks moved");
    }

    #[test]
    fn given_a_node_leaving_then_only_its_own_tasks_move() {
        let mut rng = StdRng::seed_from_u64(8);
        let mut all = nodes(10, "1.0.0", &mut rng);
        let tasks = tasks(10_000);
        let before: Vec<String> = leaders(&tasks, &all)
            .into_iter()
            .map(String::from)
            .collect();
        let gone = all.remove(3);
        let after = leaders(&tasks, &all);
        let mut moved = 0;
        for (b, a) in before.iter().zip(&after) {
            if b != a {
                moved += 1;
                assert_eq!(b, &gone.id, "a task of a node that stayed moved");
            }
        }
        assert_eq!(
            moved,
            before.iter().filter(|b| **b == gone.id).count(),
            "every task of the leaving node moved"
        );
    }

    #[test]
    fn newest_release_leads_every_task_whatever_the_scores() {
        let mut rng = StdRng::seed_from_u64(9);
        let mut all = nodes(5, "1.4.2", &mut rng);
        all.push(Node {
            id: "zz-canary".into(),
            release: Version::parse("1.5.0-rc.1").unwrap(),
            seed: rng.random(),
        });
        for task in tasks(1_000) {
            let ranked = rank(&task, all.iter().map(Node::candidate));
            assert_eq!(ranked[0].id, "zz-canary");
        }
    }

    #[test]
    fn build_metadata_does_not_change_the_rank_but_prereleases_do() {
        let a = Version::parse("2.0.0+build.1").unwrap();
        let b = Version::parse("2.0.0+build.2").unwrap();
        let pre = Version::parse("2.0.0-rc.1").unwrap();
        let x = Candidate {
            id: "x",
            release: &a,
            seed: 1,
        };
        let y = Candidate {
            id: "y",
            release: &b,
            seed: 1,
        };
        // Same seed, same precedence: decided by node id, not by the build metadata.
        assert_eq!(compare("t", &x, &y), Ordering::Less);
        assert_eq!(compare("t", &y, &x), Ordering::Greater);
        let z = Candidate {
            id: "a-pre",
            release: &pre,
            seed: 1,
        };
        assert_eq!(
            compare("t", &x, &z),
            Ordering::Less,
            "2.0.0 outranks 2.0.0-rc.1"
        );
    }

    #[test]
    fn the_ranking_is_a_total_order_that_does_not_depend_on_input_order() {
        let mut rng = StdRng::seed_from_u64(10);
        let all = nodes(7, "3.0.0", &mut rng);
        for task in tasks(200) {
            let forward = rank(&task, all.iter().map(Node::candidate));
            let backward = rank(&task, all.iter().rev().map(Node::candidate));
            assert_eq!(forward, backward);
            assert_eq!(
                designated(&task, all.iter().rev().map(Node::candidate)),
                Some(forward[0])
            );
        }
        assert_eq!(designated("t", std::iter::empty()), None);
    }
}
