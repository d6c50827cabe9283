//! A pooled task in `explain` and `status`: the owners are the ones the nodes' lease rule
//! designates, moving and vacant units are told apart, and the shares are counted.

use std::collections::BTreeMap;

use crate::coord::lease::{self, Member};
use crate::coord::rank::{self, Candidate};
use crate::coord::records::{
    LeaseRecord, MarkRecord, RUN_ON_WORK_ITEMS, TaskSetEntry, TaskSetRecord,
};
use crate::ops::explain::explain;
use crate::ops::fixtures::{at, live_member, taskset};
use crate::ops::model::{LiveMember, Members, Snapshot};
use crate::ops::render;

fn entry(digest: &str, items: Option<usize>) -> TaskSetEntry {
    TaskSetEntry {
        digest: digest.into(),
        schedule: Some("*/5 * * * *".into()),
        timezone: Some("UTC".into()),
        run_on: items.map(|_| RUN_ON_WORK_ITEMS.to_string()),
        work_items: items.map(|n| (0..n).map(|i| i.to_string()).collect()),
        ..Default::default()
    }
}

fn member(id: &str, seed: u64, zone: &str) -> LiveMember {
    let labels = BTreeMap::from([("zone".to_string(), zone.to_string())]);
    live_member(id, "1.0.0", seed, taskset("set", 2), labels)
}

fn lease(node: &str) -> LeaseRecord {
    LeaseRecord {
        format: 1,
        node: node.into(),
        session: "s".into(),
        since: at(9, 1, 0),
    }
}

/// Nodes a, b and c (all eligible; d requires nothing but is drained) defining `shards`, a
/// pool of 12 items, and `plain`, an ordinary task that c leads.
fn pooled_cluster() -> Snapshot {
    let set = TaskSetRecord {
        calendars: Default::default(),
        format: 1,
        tasks: BTreeMap::from([
            ("shards".to_string(), entry("aaaaaaaaaaaaaaaa", Some(12))),
            ("plain".to_string(), entry("bbbbbbbbbbbbbbbb", None)),
        ]),
    };
    Snapshot {
        backend: "zookeeper".into(),
        cluster: Some("prod".into()),
        members: vec![
            member("a", 1, "east"),
            member("b", 2, "east"),
            member("c", 3, "west"),
            member("d", 4, "west"),
        ],
        tasksets: BTreeMap::from([("set".to_string(), set)]),
        leases: BTreeMap::from([("plain".to_string(), lease("c"))]),
        drained: BTreeMap::from([(
            "d".to_string(),
            MarkRecord {
                format: 1,
                at: at(9, 30, 0),
                by: "ops@host".into(),
                reason: None,
            },
        )]),
        ..Snapshot::default()
    }
}

/// The lease rule's members of `snapshot`, as the nodes rank them.
fn lease_members(snapshot: &Snapshot) -> Vec<Member> {
    Members::new(snapshot)
        .members
        .into_iter()
        .map(|(_, member, _)| member)
        .collect()
}

/// Gives every item's unit to its owner, as the nodes do once settled.
fn settled(mut snapshot: Snapshot) -> Snapshot {
    let pool = explain(&snapshot, "shards", at(10, 0, 0))
        .unwrap()
        .pool
        .unwrap();
    for item in pool.items {
        let unit = lease::unit_name("shards", &item.item);
        snapshot
            .leases
            .insert(unit, lease(item.owner.as_deref().unwrap()));
    }
    snapshot
}

#[test]
fn explain_gives_each_item_to_the_node_the_lease_rule_designates_for_its_unit() {
    let snapshot = pooled_cluster();
    let pool = explain(&snapshot, "shards", at(10, 0, 0))
        .unwrap()
        .pool
        .expect("a pooled task has a pool");
    assert_eq!(pool.total, 12);
    let members = lease_members(&snapshot);
    for item in &pool.items {
        let owner = item.owner.as_deref().expect("an eligible node owns it");
        let unit = lease::unit_name("shards", &item.item);
        assert_eq!(
            lease::position(&unit, owner, &members),
            Some(0),
            "{owner} is designated for {unit}"
        );
        assert!(item.rank.is_some_and(|r| (1..=3).contains(&r)), "{item:?}");
        assert_eq!(item.holder, None, "no unit is held yet");
    }
    // The drained d owns nothing; the shares are even.
    let owns: Vec<(&str, usize)> = pool
        .shares
        .iter()
        .map(|s| (s.node.as_str(), s.owns))
        .collect();
    assert_eq!(owns, [("a", 4), ("b", 4), ("c", 4)]);
    // An item owned by a node that does not rank first for it says where it ranks: the
    // nodes above it own their full share (4 of 12 over 3) elsewhere.
    let pooled: Vec<&Member> = members.iter().filter(|m| m.in_pool("shards")).collect();
    let mut below_first = 0;
    for item in pool.items.iter().filter(|i| i.rank != Some(1)) {
        below_first += 1;
        let key = crate::coord::pool::unit_key("shards", &item.item);
        let ranked = rank::rank(&key, pooled.iter().map(|m| candidate(m)));
        let rank = item.rank.unwrap();
        assert_eq!(ranked[rank - 1].id, item.owner.as_deref().unwrap());
        for above in &ranked[..rank - 1] {
            let share = pool.shares.iter().find(|s| s.node == above.id).unwrap();
            assert_eq!(share.owns, 4, "{above:?} above {item:?}");
        }
    }
    assert!(
        below_first > 0,
        "the seeds give some item to a node ranked below first"
    );
}

fn candidate(m: &Member) -> Candidate<'_> {
    Candidate {
        id: &m.id,
        release: &m.release,
        seed: m.seed,
    }
}

#[test]
fn status_counts_a_pools_items_per_node_holding_their_units_and_a_pool_as_one_task_led() {
    let mut snapshot = settled(pooled_cluster());
    let status = crate::ops::live::status(snapshot.clone(), at(10, 0, 0));
    let shards = status.tasks.iter().find(|t| t.name == "shards").unwrap();
    assert_eq!(
        shards.work_items,
        BTreeMap::from([("a".into(), 4), ("b".into(), 4), ("c".into(), 4)])
    );
    assert!(shards.every_node.is_empty(), "{shards:?}");
    assert_eq!(shards.leader, None);
    assert_eq!(shards.problem, None);
    let led: Vec<(&str, usize)> = status
        .nodes
        .iter()
        .map(|n| (n.id.as_str(), n.tasks_led))
        .collect();
    assert_eq!(led, [("a", 1), ("b", 1), ("c", 2), ("d", 0)]);
    // A unit held by another node than its owner counts for its holder.
    let moved = lease::unit_name("shards", "0");
    let owner = snapshot.leases[&moved].node.clone();
    let other = if owner == "a" { "b" } else { "a" };
    snapshot.leases.insert(moved, lease(other));
    let status = crate::ops::live::status(snapshot.clone(), at(10, 0, 0));
    let shards = status.tasks.iter().find(|t| t.name == "shards").unwrap();
    assert_eq!(shards.work_items[other], 5);
    assert_eq!(shards.work_items[&owner], 3);
    let text = render::status(&status, at(10, 0, 0));
    assert!(text.contains("(work items)"), "{text}");
    assert!(text.contains("items: a "), "{text}");
}

#[test]
fn explain_shows_an_item_moving_and_one_vacant_beside_their_owners() {
    let mut snapshot = settled(pooled_cluster());
    let pool = explain(&snapshot, "shards", at(10, 0, 0))
        .unwrap()
        .pool
        .unwrap();
    let moving = &pool.items[0];
    let mover = if moving.owner.as_deref() == Some("a") {
        "b"
    } else {
        "a"
    };
    snapshot
        .leases
        .insert(lease::unit_name("shards", "0"), lease(mover));
    snapshot.leases.remove(&lease::unit_name("shards", "1"));
    let explained = explain(&snapshot, "shards", at(10, 0, 0)).unwrap();
    let pool = explained.pool.as_ref().unwrap();
    assert_eq!(pool.items[0].holder.as_deref(), Some(mover));
    assert_eq!(pool.items[1].holder, None);
    let text = render::explain(&explained, at(10, 0, 0));
    assert!(
        text.contains("4 (holds 3)") || text.contains("4 (holds 5)"),
        "{text}"
    );
    assert!(text.contains("NODE  RELEASE  ITEMS"), "{text}");
    let owner = moving.owner.as_deref().unwrap();
    assert!(
        text.contains(&format!("{mover} (moving to {owner})")),
        "{text}"
    );
    assert!(text.contains("- (vacant)"), "{text}");
    assert!(text.contains("  items:    12 over 3 node(s): "), "{text}");
    assert!(text.contains("1 vacant"), "{text}");
    assert!(text.contains("still has room"), "{text}");
    assert!(!text.contains("lease:    vacant"), "{text}");
    // The JSON carries the pool; a task without one has no `pool` key.
    let json = serde_json::to_value(&explained).unwrap();
    assert_eq!(json["pool"]["total"], 12);
    assert_eq!(json["pool"]["items"][0]["holder"], mover);
    let plain = serde_json::to_value(explain(&snapshot, "plain", at(10, 0, 0)).unwrap()).unwrap();
    assert!(plain.get("pool").is_none(), "{plain}");
}

#[test]
fn a_pool_no_eligible_node_may_take_has_items_without_owners_and_says_why() {
    let mut snapshot = pooled_cluster();
    let set = snapshot.tasksets.get_mut("set").unwrap();
    let shards = set.tasks.get_mut("shards").unwrap();
    shards.require_labels = BTreeMap::from([("zone".to_string(), "north".to_string())]);
    let explained = explain(&snapshot, "shards", at(10, 0, 0)).unwrap();
    let pool = explained.pool.as_ref().unwrap();
    assert!(
        pool.items
            .iter()
            .all(|i| i.owner.is_none() && i.rank.is_none())
    );
    assert!(pool.shares.is_empty(), "{pool:?}");
    let problem = explained.status.problem.as_deref().unwrap();
    assert!(
        problem.starts_with("no live node may run it: require_labels zone=north matches none"),
        "{problem}"
    );
    let text = render::explain(&explained, at(10, 0, 0));
    assert!(
        text.contains("  items:    12 over 0 node(s): 12 vacant"),
        "{text}"
    );
}
