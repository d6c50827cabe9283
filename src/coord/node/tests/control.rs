//! Drain, pause and the eligibility and drift reports, with the node fed by a small in-memory
//! ZooKeeper (no watches: the tests deliver the events they mean).

use chrono::DateTime;

use super::super::Node;
use super::super::io::ZkOp;
use super::super::io::{Input, Output, Stat, WatchKind, ZkFail};
use super::super::test_fixtures::{
    BASE, Store, at, config, leases, mark, member, pump, spec, started,
};
use crate::task::TaskSpec;

#[test]
fn a_node_drained_before_it_starts_registers_drained_and_leads_nothing_until_undrained() {
    let mut store = Store::default();
    let drain = format!("{BASE}/control/drained/n1");
    store.put(drain.clone(), mark());
    let (mut node, said) = started(&mut store, vec![spec("t", "")]);
    // The control directories exist, and the mark was read before registering: the one
    // member record ever written says drained, leads false.
    for dir in ["control", "control/drained", "control/paused"] {
        assert!(store.has(format!("{BASE}/{dir}")), "{dir}");
    }
    let record = store.member("n1");
    assert!(record.drained && !record.leads, "{record:?}");
    assert_eq!(store.stat(format!("{BASE}/members/n1")).version, 0);
    assert!(leases(&store).is_empty());
    assert!(
        said.iter().any(|r| r.contains(
            "drained since 2027-01-15T07:43:20Z by ops@h: this node leads no task until `zkcron undrain n1`"
        )),
        "{said:?}"
    );
    assert!(
        said.iter()
            .any(|r| r.contains("task t: no live node may run it: n1 is drained")),
        "{said:?}"
    );
    // Undrained: the record says so, and the lease is taken at once.
    store.remove(&drain);
    node.handle(
        Input::Watch {
            path: drain.clone(),
            kind: WatchKind::Deleted,
        },
        at(100),
    );
    let said = pump(&mut node, &mut store, at(100));
    let record = store.member("n1");
    assert!(!record.drained && record.leads, "{record:?}");
    assert_eq!(leases(&store), ["t"]);
    assert!(node.leadership().may_fire("t"));
    assert!(said.iter().any(|r| r.contains("undrained")), "{said:?}");
    assert!(
        said.iter()
            .any(|r| r.contains("task t: a live node may run it again")),
        "{said:?}"
    );
    // Drained again: the lease is released, the node stays registered.
    store.put(drain.clone(), mark());
    node.handle(
        Input::Watch {
            path: drain,
            kind: WatchKind::Created,
        },
        at(200),
    );
    pump(&mut node, &mut store, at(200));
    let record = store.member("n1");
    assert!(record.drained && !record.leads, "{record:?}");
    assert!(leases(&store).is_empty(), "{:?}", leases(&store));
    assert!(!node.leadership().may_fire("t"));
}

#[test]
fn a_paused_task_keeps_its_lease_and_may_not_fire_until_resumed() {
    let mut store = Store::default();
    let pause = format!("{BASE}/control/paused/t");
    store.put(pause.clone(), mark());
    let (mut node, said) = started(&mut store, vec![spec("t", ""), spec("u", "")]);
    assert_eq!(leases(&store), ["t", "u"]);
    let leadership = node.leadership().clone();
    assert!(leadership.tasks.contains("t"));
    assert!(leadership.paused_tasks.contains("t"));
    assert!(!leadership.may_fire("t"));
    assert!(leadership.may_fire("u"));
    assert!(
        said.iter()
            .any(|r| r.contains("task t is paused since 2027-01-15T07:43:20Z by ops@h")),
        "{said:?}"
    );
    store.remove(&pause);
    node.handle(
        Input::Watch {
            path: pause,
            kind: WatchKind::Deleted,
        },
        at(100),
    );
    let said = pump(&mut node, &mut store, at(100));
    assert!(node.leadership().paused_tasks.is_empty());
    assert!(node.leadership().may_fire("t"));
    assert!(
        said.iter()
            .any(|r| r.contains("task t is no longer paused")),
        "{said:?}"
    );
}

#[test]
fn a_deleted_control_directory_is_created_again() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "")]);
    let dir = format!("{BASE}/control/paused");
    store.remove(&dir);
    node.handle(
        Input::Watch {
            path: dir.clone(),
            kind: WatchKind::Deleted,
        },
        at(100),
    );
    let said = pump(&mut node, &mut store, at(100));
    assert!(store.has(&dir));
    assert!(
        said.iter()
            .any(|r| r.contains(&format!("{dir} was deleted; recreating it"))),
        "{said:?}"
    );
}

fn check(node: &mut Node) -> Vec<String> {
    node.control.check_due = true;
    node.check_tasks();
    std::iter::from_fn(|| node.poll())
        .filter_map(|o| match o {
            Output::Report(report) => Some(report.to_string()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_task_no_live_node_may_run_is_reported_once_per_change_naming_requirement_and_nodes() {
    let mut node = Node::new(config("a"), at(0));
    let task = spec("t", "version_req = \">=2.0\"");
    node.publish_tasks(std::slice::from_ref(&task));
    std::iter::from_fn(|| node.poll()).for_each(drop);
    for id in ["a", "b"] {
        node.view.members.insert(
            id.into(),
            member(id, "1.0.0", std::slice::from_ref(&task), &[]),
        );
    }
    let said = check(&mut node);
    assert_eq!(
        said,
        [
            "task t: no live node may run it: version_req >=2.0 matches none of a (1.0.0), b (1.0.0) task=t"
        ]
    );
    // Nothing changed: nothing said.
    assert_eq!(check(&mut node), Vec::<String>::new());
    // A newer node joins: fixed, said once.
    node.view.members.insert(
        "c".into(),
        member("c", "2.0.0", std::slice::from_ref(&task), &[]),
    );
    assert_eq!(
        check(&mut node),
        ["task t: a live node may run it again task=t"]
    );

    // Labels, and a drained node.
    let mut node = Node::new(config("a"), at(0));
    let task = spec("t", "require_labels = { zone = \"eu\" }");
    node.publish_tasks(std::slice::from_ref(&task));
    std::iter::from_fn(|| node.poll()).for_each(drop);
    node.view.members.insert(
        "a".into(),
        member("a", "1.0.0", std::slice::from_ref(&task), &[("zone", "us")]),
    );
    node.view.members.insert(
        "b".into(),
        member("b", "1.0.0", std::slice::from_ref(&task), &[]),
    );
    let mut drained = member("c", "1.0.0", std::slice::from_ref(&task), &[("zone", "eu")]);
    drained.member.may_lead = false;
    drained.member.drained = true;
    node.view.members.insert("c".into(), drained);
    assert_eq!(
        check(&mut node),
        [
            "task t: no live node may run it: require_labels zone=eu matches none of a (zone=us), b (no labels); c is drained task=t"
        ]
    );
}

#[test]
fn live_nodes_that_define_a_task_differently_are_reported_once_per_change() {
    let mut node = Node::new(config("a"), at(0));
    let mine = spec("t", "");
    let theirs = spec("t", "jitter = \"1s\"");
    node.publish_tasks(std::slice::from_ref(&mine));
    std::iter::from_fn(|| node.poll()).for_each(drop);
    node.view.members.insert(
        "a".into(),
        member("a", "1.0.0", std::slice::from_ref(&mine), &[]),
    );
    node.view.members.insert(
        "b".into(),
        member("b", "1.0.0", std::slice::from_ref(&mine), &[]),
    );
    assert_eq!(check(&mut node), Vec::<String>::new());
    node.view.members.insert(
        "c".into(),
        member("c", "1.0.0", std::slice::from_ref(&theirs), &[]),
    );
    let (d1, d2) = (mine.canonical_digest(), theirs.canonical_digest());
    let mut groups = [
        format!("{} on a, b", &d1[..12]),
        format!("{} on c", &d2[..12]),
    ];
    groups.sort();
    assert_eq!(
        check(&mut node),
        [format!(
            "task t: live nodes define it differently: {}; the leader runs its own definition; make the task files equal task=t",
            groups.join("; ")
        )]
    );
    assert_eq!(check(&mut node), Vec::<String>::new());
    node.view.members.remove("c");
    assert_eq!(
        check(&mut node),
        ["task t: live nodes define it alike again task=t"]
    );
}

#[test]
fn a_failed_read_after_a_watch_event_is_retried_a_second_later_not_in_a_loop() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "")]);
    node.handle(
        Input::Watch {
            path: format!("{BASE}/control/paused/t"),
            kind: WatchKind::Created,
        },
        at(100),
    );
    let calls: Vec<u64> = std::iter::from_fn(|| node.poll())
        .filter_map(|o| match o {
            Output::Call { op, .. } => Some(op),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 1);
    node.handle(
        Input::Reply {
            op: calls[0],
            result: Err(ZkFail::NoAuth),
        },
        at(100),
    );
    let outputs: Vec<Output> = std::iter::from_fn(|| node.poll()).collect();
    assert!(
        !outputs.iter().any(|o| matches!(o, Output::Call { .. })),
        "{outputs:?}"
    );
    let said: Vec<String> = outputs
        .iter()
        .filter_map(|o| match o {
            Output::Report(r) => Some(r.to_string()),
            _ => None,
        })
        .collect();
    assert!(
        said.iter()
            .any(|r| r.contains("reading a pause mark failed (")
                && r.contains("reading the drain and pause marks again in 1s")),
        "{said:?}"
    );
    let control_reads = |node: &mut Node| -> Vec<ZkOp> {
        std::iter::from_fn(|| node.poll())
            .filter_map(|o| match o {
                Output::Call { zk, .. } => Some(zk),
                _ => None,
            })
            .filter(|zk| format!("{zk:?}").contains("/control/"))
            .collect()
    };
    node.handle_timeout(at(1000));
    assert_eq!(control_reads(&mut node), Vec::<ZkOp>::new());
    node.handle_timeout(at(1100));
    let reads = control_reads(&mut node);
    assert_eq!(
        reads,
        [
            ZkOp::GetData {
                path: format!("{BASE}/control/drained/n1")
            },
            ZkOp::GetChildren {
                path: format!("{BASE}/control/paused")
            },
        ]
    );
}

#[test]
fn many_tasks_no_live_node_may_run_are_reported_twenty_by_name_then_in_one_line() {
    let mut node = Node::new(config("a"), at(0));
    let tasks: Vec<TaskSpec> = (0..25)
        .map(|i| spec(&format!("t{i:02}"), "version_req = \">=2.0\""))
        .collect();
    node.publish_tasks(&tasks);
    std::iter::from_fn(|| node.poll()).for_each(drop);
    node.view
        .members
        .insert("a".into(), member("a", "1.0.0", &tasks, &[]));
    let said = check(&mut node);
    assert_eq!(said.len(), 21, "{said:?}");
    assert!(
        said[19].starts_with("task t19: no live node may run it"),
        "{said:?}"
    );
    assert_eq!(
        said[20],
        "and 5 more tasks likewise (from t20 on, by name); `zkcron status` lists them"
    );
    assert_eq!(check(&mut node), Vec::<String>::new());
}

// ---- healing leases of no member ----

/// `leases/t` of session 2, whose data is `data`, there before `n1` starts; `n1` defines `t`
/// and is the only member it knows of, so it checks the lease and suspects it.
pub(super) fn started_with_lease_of_session_2(store: &mut Store, data: &[u8]) -> Node {
    let stat = Stat {
        ephemeral_owner: 2,
        czxid: 7,
        ..Stat::default()
    };
    for dir in ["", "/leases"] {
        store.put(format!("{BASE}{dir}"), Vec::new());
    }
    store.put_with(format!("{BASE}/leases/t"), data.to_vec(), stat);
    let (node, _) = started(store, vec![spec("t", "")]);
    assert_eq!(lease_owner(store), Some(2), "the lease was deleted at once");
    node
}

pub(super) fn lease_record(node: &str) -> Vec<u8> {
    serde_json::to_vec(&crate::coord::records::LeaseRecord {
        format: 1,
        node: node.into(),
        session: "2".into(),
        since: DateTime::from_timestamp(1_799_999_000, 0).unwrap(),
    })
    .unwrap()
}

pub(super) fn lease_owner(store: &Store) -> Option<i64> {
    store
        .get(format!("{BASE}/leases/t"))
        .map(|(_, stat)| stat.ephemeral_owner)
}

#[test]
fn a_lease_of_a_member_not_yet_seen_is_not_deleted_after_the_grace() {
    // Regression (found by drain scenarios in the simulation, seed 824): the owner check (this
    // node's member view) and the delete were separate steps, so the lease of a member that
    // had just registered, whose member znode this node had not read yet, was deleted after
    // the grace, and its holder lost it for nothing.
    let mut store = Store::default();
    let mut node = started_with_lease_of_session_2(&mut store, &lease_record("n2"));
    // n2 registers; this node has not seen it (its event or read is still on the way).
    store.put_with(
        format!("{BASE}/members/n2"),
        b"{}".to_vec(),
        Stat {
            ephemeral_owner: 2,
            ..Stat::default()
        },
    );
    let said = pump(&mut node, &mut store, at(2_500));
    assert_eq!(lease_owner(&store), Some(2), "{said:?}");
    assert!(
        !said.iter().any(|r| r.contains("deleting the lease")),
        "{said:?}"
    );
    assert!(!node.leadership().may_fire("t"));
    // The member was read meanwhile: the lease is trusted from now on.
    let said = pump(&mut node, &mut store, at(10_000));
    assert_eq!(lease_owner(&store), Some(2), "{said:?}");
}

#[test]
fn a_lease_naming_a_node_that_is_no_member_is_deleted_after_the_grace_and_taken() {
    let mut store = Store::default();
    let mut node = started_with_lease_of_session_2(&mut store, &lease_record("n2"));
    let said = pump(&mut node, &mut store, at(1_900));
    assert_eq!(lease_owner(&store), Some(2), "{said:?}");
    let said = pump(&mut node, &mut store, at(2_500));
    assert!(
        said.iter().any(|r| r.contains("deleting the lease")
            && r.contains("leases/t")
            && r.contains("its session 2 is no member's")),
        "{said:?}"
    );
    // Proving n2 no member left nothing behind (its events, created then gone, were seen).
    assert!(!store.has(format!("{BASE}/members/n2")));
    assert!(!node.view.members.contains_key("n2"));
    assert_eq!(lease_owner(&store), Some(1), "{said:?}");
    assert!(node.leadership().may_fire("t"));
}

#[test]
fn a_strangers_lease_that_names_no_node_is_deleted_after_the_grace_and_taken() {
    let mut store = Store::default();
    let mut node = started_with_lease_of_session_2(&mut store, b"not a lease record");
    let said = pump(&mut node, &mut store, at(2_500));
    assert!(
        said.iter()
            .any(|r| r.contains("deleting the lease") && r.contains("leases/t")),
        "{said:?}"
    );
    assert_eq!(lease_owner(&store), Some(1), "{said:?}");
    assert!(node.leadership().may_fire("t"));
}

#[test]
fn a_strangers_lease_the_node_may_not_read_is_deleted_after_the_grace_and_taken() {
    let mut store = Store::default();
    store.unreadable.push(format!("{BASE}/leases/t"));
    let mut node = started_with_lease_of_session_2(&mut store, &lease_record("n2"));
    let said = pump(&mut node, &mut store, at(2_500));
    assert!(
        said.iter()
            .any(|r| r.contains("deleting the lease") && r.contains("leases/t")),
        "{said:?}"
    );
    assert_eq!(lease_owner(&store), Some(1), "{said:?}");
}

#[test]
fn a_lease_of_an_earlier_session_of_a_registered_node_is_deleted_after_the_grace() {
    // The lease of a node's earlier, still live session names that node, registered again
    // with its new session: proving it unregistered never succeeds, so (with the conditional
    // delete alone) the lease was kept for ever.
    let mut store = Store::default();
    let mut node = started_with_lease_of_session_2(&mut store, &lease_record("n2"));
    let n2 = format!("{BASE}/members/n2");
    let stat = Stat {
        ephemeral_owner: 3,
        ..Stat::default()
    };
    store.put_with(n2.clone(), b"{}".to_vec(), stat);
    node.handle(
        Input::Watch {
            path: n2,
            kind: WatchKind::Created,
        },
        at(1_000),
    );
    pump(&mut node, &mut store, at(1_000));
    let said = pump(&mut node, &mut store, at(2_500));
    assert!(
        said.iter()
            .any(|r| r.contains("deleting the lease") && r.contains("leases/t")),
        "{said:?}"
    );
    assert_ne!(lease_owner(&store), Some(2), "{said:?}");
}
