//! The rank cache brought up to date from a change of members ranks exactly as the ranking
//! afresh (`ranking`, the specification `explain` and the benchmark's checker use).

use super::*;
use proptest::prelude::*;

const RELEASES: [&str; 3] = ["1.0.0", "1.1.0", "1.2.0-rc.1"];

/// 40 tasks: some limited to a release or a label, some on every node, one pooled.
fn shared_set() -> Arc<TaskSet> {
    let items: Arc<[String]> = (0..6).map(|i| format!("i{i}")).collect();
    let tasks = (0..40).map(|i| {
        let mut require_labels = BTreeMap::new();
        if i % 7 == 0 {
            require_labels.insert("zone".to_string(), "eu".to_string());
        }
        let holders = match i {
            5 | 17 => Holders::EveryNode,
            23 => Holders::Items(items.clone()),
            _ => Holders::Leader,
        };
        let entry = TaskEntry {
            max_runs: None,
            digest: "d".into(),
            version_req: (i % 5 == 0).then(|| VersionReq::parse(">=1.1").unwrap()),
            require_labels,
            holders,
        };
        (format!("task-{i:02}"), entry)
    });
    Arc::new(tasks.collect())
}

/// One change of the members.
#[derive(Debug, Clone)]
enum Step {
    /// Member `n<id>` (re-)joins with this seed, release, labels and task set: the shared
    /// one, a copy of it, or one without the even tasks.
    Join {
        id: u8,
        seed: u64,
        release: usize,
        labelled: bool,
        set: u8,
    },
    Leave(u8),
    /// The member stops (or starts again) being allowed to lead.
    Toggle(u8),
    Reseed(u8, u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0u8..10, any::<u64>(), 0usize..3, any::<bool>(), 0u8..3).prop_map(
            |(id, seed, release, labelled, set)| Step::Join {
                id,
                seed,
                release,
                labelled,
                set
            }
        ),
        (0u8..10).prop_map(Step::Leave),
        (0u8..10).prop_map(Step::Toggle),
        (0u8..10, any::<u64>()).prop_map(|(id, seed)| Step::Reseed(id, seed)),
    ]
}

/// Applies `step` to `members` (kept sorted by id, as a node lists them); `n01` is this node.
fn apply(step: &Step, members: &mut Vec<Member>, shared: &Arc<TaskSet>) {
    let id = |i: &u8| format!("n{i:02}");
    match step {
        Step::Join {
            id: i,
            seed,
            release,
            labelled,
            set,
        } => {
            let tasks = match set {
                0 => shared.clone(),
                1 => Arc::new((**shared).clone()),
                _ => Arc::new(
                    shared
                        .iter()
                        .filter(|(name, _)| !name.ends_with(['0', '2', '4', '6', '8']))
                        .map(|(name, entry)| (name.clone(), entry.clone()))
                        .collect(),
                ),
            };
            members.retain(|m| m.id != id(i));
            members.push(Member {
                id: id(i),
                release: Version::parse(RELEASES[*release]).unwrap(),
                seed: *seed,
                tasks,
                may_lead: true,
                labels: if *labelled {
                    Arc::new([("zone".to_string(), "eu".to_string())].into())
                } else {
                    Labels::default()
                },
                drained: false,
            });
            members.sort_by(|a, b| a.id.cmp(&b.id));
        }
        Step::Leave(i) if id(i) != "n01" => members.retain(|m| m.id != id(i)),
        Step::Leave(_) => {}
        Step::Toggle(i) => {
            if let Some(m) = members.iter_mut().find(|m| m.id == id(i)) {
                m.may_lead = !m.may_lead;
            }
        }
        Step::Reseed(i, seed) => {
            if let Some(m) = members.iter_mut().find(|m| m.id == id(i)) {
                m.seed = *seed;
            }
        }
    }
}

/// This node's position and the designated member's id (when another), by `rank`.
type Seen = Option<(usize, Option<String>)>;

fn seen(rank: Option<(usize, Option<&Member>)>) -> Seen {
    rank.map(|(pos, top)| (pos, top.map(|t| t.id.clone())))
}

/// The same by the specification: the full ranking of every eligible member.
fn by_ranking(lease: &str, me: &str, members: &[Member]) -> Seen {
    let ranked = ranking(lease, members);
    let pos = ranked.iter().position(|c| c.id == me)?;
    Some((pos, (pos > 0).then(|| ranked[0].id.to_string())))
}

/// Checks every cached rank of `me` against the full ranking and a cache built afresh.
fn check(cache: &RankCache, me: &Member, members: &[Member]) -> Result<(), TestCaseError> {
    let mut fresh = RankCache::default();
    fresh.refresh(&Peers::new(me, members), members);
    prop_assert_eq!(&cache.pools, &fresh.pools);
    for ((task, entry), rank) in me.tasks.iter().zip(cache.ranks.values()) {
        let lease = lease_name(task, entry, &me.id);
        let expected = match entry.holders {
            Holders::Items(_) => None,
            _ => by_ranking(&lease, &me.id, members),
        };
        prop_assert_eq!(seen(rank.get(members)), expected.clone(), "{}", task);
        if entry.holders == Holders::Leader {
            let designated = ranking(task, members).first().map(|c| c.id.to_string());
            let cached = cache.designated(task, members.iter());
            if let Some(cached) = cached {
                prop_assert_eq!(Some(cached.to_string()), designated, "{}", task);
            }
            prop_assert_eq!(cached.is_some(), expected.is_some(), "{}", task);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_cache_brought_up_to_date_ranks_as_the_full_ranking(
        start in prop::collection::vec(step(), 0..12),
        changes in prop::collection::vec(prop::collection::vec(step(), 1..7), 1..12),
    ) {
        let shared = shared_set();
        let me_joins = Step::Join { id: 1, seed: 7, release: 1, labelled: true, set: 0 };
        let mut members = Vec::new();
        apply(&me_joins, &mut members, &shared);
        for step in &start {
            apply(step, &mut members, &shared);
        }
        let mut cache = RankCache::default();
        for burst in &changes {
            for step in burst {
                apply(step, &mut members, &shared);
            }
            let me = members.iter().find(|m| m.id == "n01").expect("never leaves");
            cache.refresh(&Peers::new(me, &members), &members);
            check(&cache, me, &members)?;
        }
    }
}

#[test]
fn a_join_and_a_leave_move_exactly_the_tasks_the_full_ranking_moves() {
    let shared = shared_set();
    let mut members = Vec::new();
    for (id, seed) in [(1u8, 7u64), (2, 11), (3, 13), (4, 17)] {
        let join = Step::Join {
            id,
            seed,
            release: 1,
            labelled: true,
            set: 0,
        };
        apply(&join, &mut members, &shared);
    }
    let mut cache = RankCache::default();
    let designated = |cache: &mut RankCache, members: &[Member]| -> Vec<Option<String>> {
        let me = &members[0];
        cache.refresh(&Peers::new(me, members), members);
        let names = me
            .tasks
            .iter()
            .filter(|(_, e)| e.holders == Holders::Leader);
        names
            .map(|(t, _)| cache.designated(t, members.iter()).map(str::to_string))
            .collect()
    };
    let spec = |members: &[Member]| -> Vec<Option<String>> {
        let names = members[0].tasks.iter();
        names
            .filter(|(_, e)| e.holders == Holders::Leader)
            .map(|(t, _)| ranking(t, members).first().map(|c| c.id.to_string()))
            .collect()
    };
    let before = designated(&mut cache, &members);
    assert_eq!(before, spec(&members));
    let join = Step::Join {
        id: 9,
        seed: 0xdead_beef,
        release: 1,
        labelled: true,
        set: 0,
    };
    apply(&join, &mut members, &shared);
    let joined = designated(&mut cache, &members);
    assert_eq!(joined, spec(&members));
    for (b, a) in before.iter().zip(&joined) {
        if b != a {
            assert_eq!(
                a.as_deref(),
                Some("n09"),
                "a task moved between staying members"
            );
        }
    }
    assert!(joined.iter().any(|d| d.as_deref() == Some("n09")));
    apply(&Step::Leave(9), &mut members, &shared);
    assert_eq!(
        designated(&mut cache, &members),
        before,
        "the leave undoes the join"
    );
}
