//! Takes, releases and registration, with the node fed by the control tests' small in-memory
//! ZooKeeper (`control_tests.rs`: `Store`, `pump`, `started`).

use super::*;

#[test]
fn a_node_takes_more_leases_than_it_has_in_flight_without_waiting_for_a_timer() {
    // A 20-node cold start of 10,000 tasks took 42-45 s: a node refilled its 64 takes in
    // flight only at a decision, and decided (ranking every task) once per answered take and
    // once per lease created anywhere. Now the takes beyond the 64 are sent as others finish,
    // in the same instant, and the node decides a handful of times.
    let mut store = Store::default();
    let tasks: Vec<TaskSpec> = (0..1000).map(|i| spec(&format!("t{i:04}"), "")).collect();
    let (node, _) = started(&mut store, tasks);
    assert_eq!(leases(&store).len(), 1000);
    assert_eq!(node.leadership().tasks.len(), 1000);
    assert!(node.leadership().may_fire("t0999"));
    assert!(node.decisions <= 10, "{} decisions", node.decisions);
}

#[test]
fn the_first_take_of_a_new_task_creates_its_znodes_and_owns_epoch_version_1() {
    // The first take of a task creates its fire record and epoch and the lease in one multi
    // (it used to take three writes); the first incarnation still owns epoch version 1, as a
    // take of an existing epoch would, so a tree deleted and recreated under the holder
    // (version 0 again) is still told apart by its claims.
    let mut store = Store::default();
    let (node, _) = started(&mut store, vec![spec("t", "")]);
    assert_eq!(leases(&store), ["t"]);
    let epoch = &store.znodes[&format!("{BASE}/tasks/t/epoch")];
    assert_eq!(epoch.1.version, 1);
    assert!(store.znodes.contains_key(&format!("{BASE}/tasks/t")));
    assert!(node.leadership().may_fire("t"));
}

#[test]
fn a_member_path_created_and_deleted_by_another_node_before_registering_is_not_reported() {
    // Regression: the seed-824 fix deletes a lease naming a node not yet seen only in one
    // multi that creates and deletes that node's member path; the node, still setting up,
    // logged "this node's member znode was deleted; registering again".
    let mut store = Store::default();
    let mut node = Node::new(config("n1"), at(0));
    node.handle(
        Input::Request {
            req: 1,
            request: Request::Publish(vec![spec("t", "")]),
        },
        at(0),
    );
    node.handle(
        Input::Connected {
            session_id: 1,
            negotiated_timeout: Duration::from_secs(10),
        },
        at(0),
    );
    let path = format!("{BASE}/members/n1");
    for kind in [WatchKind::Created, WatchKind::Deleted] {
        node.handle(
            Input::Watch {
                path: path.clone(),
                kind,
            },
            at(0),
        );
    }
    let said = pump(&mut node, &mut store, at(0));
    assert!(
        !said.iter().any(|r| r.contains("member znode was deleted")),
        "{said:?}"
    );
    let record = store.member("n1");
    assert!(record.leads, "{record:?}");
    assert_eq!(leases(&store), ["t"]);
    // Deleted by hand once registered: still reported, and registered again.
    store.znodes.remove(&path);
    node.handle(
        Input::Watch {
            path,
            kind: WatchKind::Deleted,
        },
        at(1),
    );
    let said = pump(&mut node, &mut store, at(1));
    assert!(
        said.iter()
            .any(|r| r.contains("this node's member znode was deleted; registering again")),
        "{said:?}"
    );
    assert!(store.member("n1").leads);
}

#[test]
fn a_lease_deleted_and_taken_by_another_node_while_this_one_checks_it_is_not_deleted() {
    // Simulation seed 3437 (with drains): a node releasing a lease whose epoch a stranger had
    // changed checked that the lease was its own, then deleted it by version; in between the
    // stranger deleted it and another node took it (a new lease has version 0 too), and the
    // node deleted that node's lease. The delete is now conditional on the epoch read before
    // the check: every take bumps it.
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "")]);
    let lease = format!("{BASE}/leases/t");
    let epoch = format!("{BASE}/tasks/t/epoch");
    assert_eq!(lease_owner(&store), Some(1));
    // A stranger bumps the epoch; then the node is drained: it releases the lease.
    store.znodes.get_mut(&epoch).unwrap().1.version += 1;
    let drain = format!("{BASE}/control/drained/n1");
    store
        .znodes
        .insert(drain.clone(), (mark(), Stat::default()));
    node.handle(
        Input::Watch {
            path: drain,
            kind: WatchKind::Created,
        },
        at(100),
    );
    // Once the node has looked at the lease and seen it its own, the stranger deletes it and
    // session 2 takes it (a new lease at version 0, the epoch bumped).
    let mut raced = false;
    pump_with(&mut node, &mut store, at(100), |zk, store| {
        if !raced && matches!(zk, ZkOp::Exists { path } if *path == lease) {
            raced = true;
            let stat = Stat {
                ephemeral_owner: 2,
                ..Stat::default()
            };
            store.znodes.insert(lease.clone(), (Vec::new(), stat));
            store.znodes.get_mut(&epoch).unwrap().1.version += 1;
        }
    });
    assert!(raced, "the node never checked the lease");
    assert_eq!(
        lease_owner(&store),
        Some(2),
        "the other node's lease was deleted"
    );
}
