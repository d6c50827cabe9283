//! Leases of pooled tasks: each item's unit is designated for its owner under the pool's
//! assignment, covered by the next ranked when vacant, and moved only as the assignment moves.

use super::*;
use crate::coord::pool;

/// A task set with `plain` (a leader's task) and `pool`, twelve items "0" to "11".
fn set() -> Arc<TaskSet> {
    let entry = |holders| TaskEntry {
        max_runs: None,
        digest: "d".into(),
        version_req: None,
        require_labels: BTreeMap::new(),
        holders,
    };
    let items: Arc<[String]> = (0..12).map(|i| i.to_string()).collect();
    Arc::new(BTreeMap::from([
        ("plain".to_string(), entry(Holders::Leader)),
        ("pool".to_string(), entry(Holders::Items(items))),
    ]))
}

fn member(id: &str, tasks: &Arc<TaskSet>) -> Member {
    Member {
        id: id.into(),
        release: Version::parse("1.0.0").unwrap(),
        seed: 0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(id.len() as u64 + id.as_bytes()[0] as u64),
        tasks: tasks.clone(),
        may_lead: true,
        labels: Labels::default(),
        drained: false,
    }
}

fn members(ids: &[&str]) -> Vec<Member> {
    let tasks = set();
    ids.iter().map(|id| member(id, &tasks)).collect()
}

/// The decision of `me` at `now`, holding `held` (no other lease exists; every other lease of
/// `pool` vacant since the start).
fn decide_at(me: &str, members: &[Member], held: &BTreeSet<String>, now: Duration) -> Decision {
    let vacant: BTreeMap<String, Duration> = lease_names("pool", &members[0].tasks["pool"], me)
        .into_iter()
        .filter(|unit| !held.contains(unit))
        .map(|unit| (unit, Duration::ZERO))
        .collect();
    decide(&LeaseView {
        me,
        members,
        present: held,
        held,
        covering: &BTreeMap::new(),
        vacant_since: &vacant,
        members_changed: Duration::ZERO,
        now,
        may_lead: true,
    })
}

/// The units of `pool` that `me` takes (not covers) at once with nothing held anywhere.
fn takes(me: &str, members: &[Member]) -> BTreeSet<String> {
    decide_at(me, members, &BTreeSet::new(), Duration::ZERO)
        .actions
        .into_iter()
        .filter_map(|action| match action {
            LeaseAction::Take(unit) if unit.starts_with("pool@") => Some(unit),
            _ => None,
        })
        .collect()
}

/// The owner of each unit of `pool` by `coord::pool::assign`.
fn owners(members: &[Member]) -> BTreeMap<String, String> {
    let Holders::Items(items) = &members[0].tasks["pool"].holders else {
        unreachable!()
    };
    let candidates: Vec<Candidate<'_>> = members.iter().map(Member::candidate).collect();
    let assignment = pool::assign("pool", items, &candidates).unwrap();
    items
        .iter()
        .zip(assignment.owners)
        .map(|(item, owner)| (unit_name("pool", item), members[owner].id.clone()))
        .collect()
}

#[test]
fn an_items_unit_is_eligible_for_members_whose_pool_lists_it_and_the_task_has_no_lease() {
    let all = members(&["a"]);
    let a = &all[0];
    assert!(a.eligible("pool@0"));
    assert!(a.eligible("pool@11"));
    assert!(!a.eligible("pool@12"), "not an item of the pool");
    assert!(!a.eligible("pool"), "the task itself has no lease");
    assert!(!a.eligible("pool@a"), "not a node's unit either");
    let drained = Member {
        may_lead: false,
        ..a.clone()
    };
    assert!(!drained.eligible("pool@0"));
    assert_eq!(lease_names("pool", &a.tasks["pool"], "a").len(), 12);
}

#[test]
fn each_item_is_taken_by_its_owner_under_the_assignment_and_by_nobody_else() {
    let all = members(&["a", "b", "c"]);
    let owners = owners(&all);
    let mut taken = BTreeMap::new();
    for me in ["a", "b", "c"] {
        let mine = takes(me, &all);
        assert_eq!(mine.len(), 4, "{me}: an even share of twelve over three");
        for unit in mine {
            assert!(
                taken.insert(unit, me.to_string()).is_none(),
                "{me}: taken twice"
            );
        }
    }
    assert_eq!(taken, owners);
}

#[test]
fn a_vacant_item_is_covered_by_the_next_ranked_for_task_slash_item_after_its_share_of_the_bound() {
    let all = members(&["a", "b", "c"]);
    let owners = owners(&all);
    let (unit, owner) = owners.iter().next().unwrap();
    let key = pool::unit_key("pool", unit.split_once('@').unwrap().1);
    let backups: Vec<String> = rank::rank(&key, all.iter().map(Member::candidate))
        .into_iter()
        .map(|c| c.id.to_string())
        .filter(|id| id != owner)
        .collect();
    for (k, backup) in backups.iter().enumerate() {
        let pos = position(unit, backup, &all).unwrap();
        assert_eq!(
            pos,
            k + 1,
            "{backup}: after the owner, in the order for {key}"
        );
        let before = decide_at(
            backup,
            &all,
            &BTreeSet::new(),
            VACANT_BOUND * pos as u32 / 2,
        );
        assert!(!before.actions.contains(&LeaseAction::Cover(unit.clone())));
        let due = decide_at(backup, &all, &BTreeSet::new(), VACANT_BOUND * pos as u32);
        assert!(
            due.actions.contains(&LeaseAction::Cover(unit.clone())),
            "{backup}: {due:?}"
        );
    }
    assert_eq!(position(unit, owner, &all), Some(0));
}

#[test]
fn a_joining_node_takes_only_what_the_assignment_moves_and_the_old_owners_release_it() {
    let before = members(&["a", "b", "c"]);
    let after = members(&["a", "b", "c", "d"]);
    let (old, new) = (owners(&before), owners(&after));
    let moved: BTreeSet<String> = new
        .iter()
        .filter(|(unit, owner)| old[*unit] != **owner)
        .map(|(unit, _)| unit.clone())
        .collect();
    assert!(!moved.is_empty());
    assert!(moved.len() < 12, "not everything moves");
    for me in ["a", "b", "c"] {
        let held: BTreeSet<String> = old
            .iter()
            .filter(|(_, owner)| owner.as_str() == me)
            .map(|(unit, _)| unit.clone())
            .collect();
        let decision = decide_at(me, &after, &held, Duration::ZERO);
        let released: BTreeSet<String> = decision
            .actions
            .iter()
            .filter_map(|action| match action {
                LeaseAction::Release(unit) => Some(unit.clone()),
                _ => None,
            })
            .collect();
        let lost: BTreeSet<String> = held.intersection(&moved).cloned().collect();
        assert_eq!(released, lost, "{me}");
    }
    let joined = takes("d", &after);
    assert!(joined.is_subset(&moved), "{joined:?} against {moved:?}");
    assert_eq!(
        joined,
        new.iter()
            .filter(|(_, owner)| owner.as_str() == "d")
            .map(|(unit, _)| unit.clone())
            .collect()
    );
}

#[test]
fn the_rank_cache_gives_the_same_decisions_for_pooled_units() {
    let all = members(&["a", "b", "c"]);
    let held: BTreeSet<String> = ["pool@0".to_string(), "pool@5".to_string()].into();
    let mut cache = RankCache::default();
    for now in [Duration::ZERO, VACANT_BOUND, VACANT_BOUND * 3] {
        for me in ["a", "b", "c"] {
            let view = LeaseView {
                me,
                members: &all,
                present: &held,
                held: &held,
                covering: &BTreeMap::new(),
                vacant_since: &BTreeMap::new(),
                members_changed: Duration::ZERO,
                now,
                may_lead: true,
            };
            let mut mine = RankCache::default();
            let fresh = decide(&view);
            assert_eq!(decide_cached(&view, &Acting::new(), &mut mine), fresh);
            assert_eq!(decide_cached(&view, &Acting::new(), &mut mine), fresh);
            assert_eq!(decide_cached(&view, &Acting::new(), &mut cache), fresh);
        }
    }
}

#[test]
fn a_drained_members_items_are_owned_by_the_others_at_once_not_covered() {
    let mut all = members(&["a", "b", "c"]);
    all[2].may_lead = false;
    all[2].drained = true;
    let mut taken = BTreeSet::new();
    for me in ["a", "b"] {
        let mine = takes(me, &all);
        assert_eq!(
            mine.len(),
            6,
            "{me}: an even share of twelve over the two left"
        );
        taken.extend(mine);
    }
    assert_eq!(
        taken.len(),
        12,
        "every item has an owner that takes it at once"
    );
    assert!(takes("c", &all).is_empty());
}

#[test]
fn a_decision_walks_the_units_in_name_order_and_finds_each_ones_state() {
    // Items "0" to "11" sort as "0", "1", "10", "11", "2", ...: not the task file's order. A
    // decision walks them by name alongside the sorted sets of leases (looking each unit up
    // by a built name was most of a node's CPU); every unit must still get its own state.
    let all = members(&["a", "b", "c"]);
    let owners = owners(&all);
    let mine: Vec<&String> = owners
        .iter()
        .filter(|(_, o)| *o == "a")
        .map(|(u, _)| u)
        .collect();
    let theirs: Vec<&String> = owners
        .iter()
        .filter(|(_, o)| *o != "a")
        .map(|(u, _)| u)
        .collect();
    // `a` holds one of its units and one of another's (not as cover); another node holds one
    // of `a`'s units and one of its own; the rest are vacant.
    let held = BTreeSet::from([mine[0].clone(), theirs[0].clone(), "plain".to_string()]);
    let mut present = held.clone();
    present.extend([mine[1].clone(), theirs[1].clone()]);
    let vacant: BTreeMap<String, Duration> = owners
        .keys()
        .filter(|unit| !present.contains(*unit))
        .map(|unit| (unit.clone(), Duration::ZERO))
        .collect();
    let decision = decide(&LeaseView {
        me: "a",
        members: &all,
        present: &present,
        held: &held,
        covering: &BTreeMap::new(),
        vacant_since: &vacant,
        members_changed: Duration::ZERO,
        now: Duration::from_secs(60),
        may_lead: true,
    });
    let mut expected: Vec<LeaseAction> = vec![LeaseAction::Release(theirs[0].clone())];
    for unit in vacant.keys() {
        expected.push(if owners[unit] == "a" {
            LeaseAction::Take(unit.clone())
        } else {
            LeaseAction::Cover(unit.clone())
        });
    }
    expected.sort();
    assert_eq!(decision.actions, expected);
    assert_eq!(decision.held_elsewhere, [mine[1].clone()]);
}
