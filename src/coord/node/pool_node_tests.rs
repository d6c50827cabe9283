//! A pooled task's units: the node takes the units of the items it owns under the pool's
//! assignment, releases those a joining member comes to own (and all of them when drained),
//! and fires nothing of the task (no claim is served on the units yet).

use super::*;
use crate::coord::lease;

/// The units of `p` among the leases in `store`.
fn pool_leases(store: &Store) -> Vec<String> {
    leases(store)
        .into_iter()
        .filter(|l| l.starts_with("p@"))
        .collect()
}

#[test]
fn a_lone_node_takes_every_items_unit_and_publishes_no_pooled_task() {
    let mut store = Store::default();
    let tasks = vec![spec("p", "work_items = 4"), spec("t", "")];
    let (node, _) = started(&mut store, tasks);
    assert_eq!(leases(&store), ["p@0", "p@1", "p@2", "p@3", "t"]);
    for item in 0..4 {
        let epoch = format!("{BASE}/tasks/p@{item}/epoch");
        assert!(store.znodes.contains_key(&epoch), "{epoch}");
    }
    assert!(!store.znodes.contains_key(&format!("{BASE}/leases/p")));
    let published: Vec<&str> = node.leadership().tasks.iter().map(|t| &**t).collect();
    assert_eq!(published, ["t"]);
    assert!(!node.leadership().may_fire("p"));
}

#[test]
fn a_joining_member_gets_the_units_it_owns_and_the_node_keeps_the_rest() {
    let mut store = Store::default();
    let tasks = vec![spec("p", "work_items = 12")];
    let n2 = member("n2", "1.0.0", &tasks, &[]);
    let (mut node, _) = started(&mut store, tasks);
    assert_eq!(pool_leases(&store).len(), 12);
    node.members.insert("n2".into(), n2);
    node.decide();
    pump(&mut node, &mut store, at(1_000));
    let members: Vec<lease::Member> = node.members.values().map(|m| m.member.clone()).collect();
    let owned: Vec<String> = (0..12)
        .map(|item| format!("p@{item}"))
        .filter(|unit| lease::position(unit, "n1", &members) == Some(0))
        .collect();
    assert!(!owned.is_empty() && owned.len() < 12, "{owned:?}");
    let mut kept = pool_leases(&store);
    kept.sort();
    let mut owned_sorted = owned.clone();
    owned_sorted.sort();
    assert_eq!(kept, owned_sorted);
    // The released units stay vacant for n2, whose they are: n1 does not cover them at once.
    pump(&mut node, &mut store, at(1_500));
    assert_eq!(pool_leases(&store).len(), owned.len());
}

#[test]
fn a_drained_node_releases_every_unit_of_its_pool() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("p", "work_items = 3")]);
    assert_eq!(pool_leases(&store), ["p@0", "p@1", "p@2"]);
    let drain = format!("{BASE}/control/drained/n1");
    store
        .znodes
        .insert(drain.clone(), (mark(), Stat::default()));
    node.handle(
        Input::Watch {
            path: drain,
            kind: WatchKind::Created,
        },
        at(200),
    );
    pump(&mut node, &mut store, at(200));
    assert!(store.member("n1").drained);
    assert!(pool_leases(&store).is_empty(), "{:?}", leases(&store));
}
