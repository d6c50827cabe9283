//! Takes, releases and registration, with the node fed by the shared small in-memory
//! ZooKeeper (`test_fixtures.rs`: `Store`, `pump`, `started`).

use std::time::Duration;

use chrono::DateTime;

use semver::Version;

use super::super::Node;
use super::super::io::{Input, Now, Request, Stat, WatchKind, ZkFail, ZkOk, ZkOp};
use super::super::test_fixtures::{
    BASE, Store, at, config, connected, leases, mark, pump, pump_delivering, pump_with, spec,
    started,
};
use super::control::{lease_owner, lease_record, started_with_lease_of_session_2};
use crate::coord::node::NodeConfig;
use crate::task::TaskSpec;

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
    assert!(
        node.leases.decisions <= 10,
        "{} decisions",
        node.leases.decisions
    );
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
    let epoch = store.znode(format!("{BASE}/tasks/t/epoch"));
    assert_eq!(epoch.1.version, 1);
    assert!(store.has(format!("{BASE}/tasks/t")));
    assert!(node.leadership().may_fire("t"));
}

#[test]
fn a_member_path_created_and_deleted_by_another_node_before_registering_is_not_reported() {
    // Regression: the seed-824 fix deletes a lease naming a node not yet seen only in one
    // multi that creates and deletes that node's member path; the node, still setting up,
    // logged "this node's member znode was deleted; registering again".
    let mut store = Store::default();
    let mut node = connected(vec![spec("t", "")]);
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
    store.remove(&path);
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
    store.stat_mut(&epoch).version += 1;
    let drain = format!("{BASE}/control/drained/n1");
    store.put(drain.clone(), mark());
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
    pump_with(&mut node, &mut store, at(100), |zk, store, _| {
        if !raced && matches!(zk, ZkOp::Exists { path } if *path == lease) {
            raced = true;
            let stat = Stat {
                ephemeral_owner: 2,
                ..Stat::default()
            };
            store.put_with(lease.clone(), Vec::new(), stat);
            store.stat_mut(&epoch).version += 1;
        }
    });
    assert!(raced, "the node never checked the lease");
    assert_eq!(
        lease_owner(&store),
        Some(2),
        "the other node's lease was deleted"
    );
}

// ---- leases deleted and taken by another node between a check and a delete ----

/// `members/n3`, of session 3: a live member that ranks nowhere (its data is no record), so
/// `n1` stays designated for `t`.
pub(super) fn member_of_session_3(store: &mut Store) {
    let stat = Stat {
        ephemeral_owner: 3,
        ..Stat::default()
    };
    let member = format!("{BASE}/members/n3");
    store.put_with(member, b"{}".to_vec(), stat);
}

/// `leases/t` held by n3, of session 3 (a new lease, at version 0).
fn n3_holds_the_lease(store: &mut Store) {
    let stat = Stat {
        ephemeral_owner: 3,
        ..Stat::default()
    };
    let lease = format!("{BASE}/leases/t");
    store.put_with(lease, lease_record("n3"), stat);
}

/// Counts the node's reads of `leases/t` while session `owner` holds it; at the `nth`, the
/// lease is deleted and n3 takes it: a new lease, at version 0 too, and the epoch bumped (or
/// created with the task's record, by a first take).
struct Race {
    owner: i64,
    nth: usize,
    reads: usize,
}

impl Race {
    fn after(&mut self, zk: &ZkOp, store: &mut Store) {
        let lease = format!("{BASE}/leases/t");
        let read = matches!(zk, ZkOp::GetData { path } | ZkOp::Exists { path } if *path == lease);
        if !read || lease_owner(store) != Some(self.owner) {
            return;
        }
        self.reads += 1;
        if self.reads != self.nth {
            return;
        }
        n3_holds_the_lease(store);
        store.stat_mut(&lease).czxid = 99;
        let record = format!("{BASE}/tasks/t");
        if !store.has(&record) {
            store.put(&record, Vec::new());
        }
        let epoch = format!("{BASE}/tasks/t/epoch");
        if !store.has(&epoch) {
            store.put(&epoch, Vec::new());
        }
        store.stat_mut(&epoch).version += 1;
    }

    fn raced(&self) -> bool {
        self.reads >= self.nth
    }
}

#[test]
fn a_lease_retaken_by_another_node_while_this_one_heals_its_lost_take_is_not_deleted() {
    // A take whose answer was lost leaves a lease of this session the node does not hold; it
    // found it its own and deleted it by its version (0) alone. Had the lease been deleted
    // (released, or by hand) and taken by another node in between, that node's lease, at
    // version 0 too, was deleted. The delete is now conditional on the epoch, read before the
    // lease is read again (every take bumps it); the race is tried at each read of the lease.
    let lease = format!("{BASE}/leases/t");
    for nth in 1..=2 {
        let mut store = Store::default();
        member_of_session_3(&mut store);
        let mut node = connected(vec![spec("t", "")]);
        let mut lost = false;
        let said = pump_with(&mut node, &mut store, at(0), |zk, _, result| {
            let take = matches!(zk, ZkOp::Multi(ops) if ops.iter().any(
                |op| matches!(op, ZkOp::Create { path, .. } if *path == lease)
            ));
            if take && result.is_ok() && !lost {
                // Applied, but its answer lost.
                lost = true;
                *result = Err(ZkFail::ConnectionLoss);
            }
        });
        assert!(lost, "the node never took the lease");
        assert_eq!(lease_owner(&store), Some(1), "{said:?}");
        race_at_read(&mut node, &mut store, at(1_000), 1, nth);
    }
}

/// Pumps `node` at `now` while session 3 deletes and retakes the lease of session `owner`
/// right after the node's `nth` read of it, and asserts that session 3's lease survived and
/// this node fires nothing.
fn race_at_read(node: &mut Node, store: &mut Store, now: Now, owner: i64, nth: usize) {
    let mut race = Race {
        owner,
        nth,
        reads: 0,
    };
    let said = pump_with(node, store, now, |zk, store, _| race.after(zk, store));
    assert!(
        race.raced(),
        "read {nth}: the lease was not read so often: {said:?}"
    );
    assert_eq!(
        lease_owner(store),
        Some(3),
        "read {nth}: session 3's lease was deleted: {said:?}"
    );
    assert!(!node.leadership().may_fire("t"));
}

#[test]
fn a_lease_taken_by_a_member_while_this_node_deletes_a_foreign_one_is_not_deleted() {
    // A lease no live member holds was deleted after its grace by its version (0) alone, read
    // when its owner was checked. Had it been deleted and taken by a member in between
    // (another node healing it too), that member's lease, at version 0 too, was deleted. The
    // delete is now conditional on the epoch, read (created, for a task never taken) before
    // the lease is read again; the race is tried at each read of the lease.
    for nth in 1..=2 {
        let mut store = Store::default();
        member_of_session_3(&mut store);
        let mut node = started_with_lease_of_session_2(&mut store, &lease_record("n2"));
        race_at_read(&mut node, &mut store, at(2_500), 2, nth);
    }
}

#[test]
fn a_member_znode_deleted_while_disconnected_is_registered_again_after_reconnecting() {
    // Simulation seed 2734 (and nine more with drains): a stranger deleted `members/` while
    // n1's connection kept dropping; the deletion of n1's member znode was never reported (a
    // persistent watch reports nothing of a disconnection), the re-listing after reconnecting
    // did not list n1, and n1, no member in its own view, released every lease and never
    // registered again: the tasks only it defines were never fired.
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "")]);
    assert!(node.leadership().may_fire("t"));
    node.handle(Input::Disconnected, at(100));
    let member = format!("{BASE}/members/n1");
    store.remove(&member);
    node.handle(
        Input::Connected {
            session_id: 1,
            negotiated_timeout: Duration::from_secs(10),
        },
        at(200),
    );
    let said = pump(&mut node, &mut store, at(200));
    assert!(store.has(&member), "{said:?}");
    assert!(store.member("n1").leads);
    assert!(
        said.iter()
            .any(|r| r.contains("this node's member znode was deleted; registering again")),
        "{said:?}"
    );
    let said = pump(&mut node, &mut store, at(1_000));
    assert_eq!(leases(&store), ["t"], "{said:?}");
    assert!(node.leadership().may_fire("t"), "{said:?}");
}

#[test]
fn a_lease_given_up_without_an_answer_is_deleted_by_a_node_no_longer_designated() {
    // Simulation seed 8661: a stranger changed n4's lease of t01; n4 gave it up, but the
    // answer to its check of the lease was lost with the connection. The lease was still n4's
    // session's, n4 no longer held it, and once n5 (ranked first) came up n4 never looked at
    // it again; n5 saw a live member's lease and waited for it to the end (NotConverged). A
    // give-up that fails or gets no answer now leaves the lease checked until known.
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "")]);
    let lease = format!("{BASE}/leases/t");
    assert_eq!(lease_owner(&store), Some(1));
    // n2, of a newer release (it ranks first), registers with session 2; n1 hears of it later.
    let mut n2 = Node::new(
        NodeConfig {
            release: Version::new(2, 0, 0),
            ..config("n2")
        },
        at(0),
    );
    n2.handle(
        Input::Request {
            req: 1,
            request: Request::Publish(vec![spec("t", "")]),
        },
        at(100),
    );
    n2.handle(
        Input::Connected {
            session_id: 2,
            negotiated_timeout: Duration::from_secs(10),
        },
        at(100),
    );
    store.session = Some(2);
    pump(&mut n2, &mut store, at(100));
    store.session = None;
    assert_eq!(lease_owner(&store), Some(1), "n2 took n1's lease");
    // A stranger changes the lease: n1 gives it up, and every answer about the lease is lost.
    store.stat_mut(&lease).version += 1;
    node.handle(
        Input::Watch {
            path: lease.clone(),
            kind: WatchKind::DataChanged,
        },
        at(200),
    );
    let said = pump_with(&mut node, &mut store, at(200), |zk, _, result| {
        if matches!(zk, ZkOp::Exists { path } | ZkOp::GetData { path } if *path == lease) {
            *result = Err(ZkFail::ConnectionLoss);
        }
    });
    assert!(!node.leadership().may_fire("t"), "{said:?}");
    // n1 hears of n2, which ranks first: n1 is no longer designated for t.
    node.handle(
        Input::Watch {
            path: format!("{BASE}/members/n2"),
            kind: WatchKind::Created,
        },
        at(300),
    );
    pump(&mut node, &mut store, at(300));
    assert!(node.view.members.contains_key("n2"), "n1 never read n2");
    let said = pump(&mut node, &mut store, at(2_000));
    assert_ne!(
        lease_owner(&store),
        Some(1),
        "the lease given up stayed this session's: {said:?}"
    );
}

#[test]
fn a_lease_created_while_the_listing_is_completed_is_not_taken_as_vacant() {
    // At rest, 20 nodes × 10,000 tasks made up to 1,000 writes a minute ZooKeeper logged as
    // failed multis: takes of leases that existed. A node listing members and leases while
    // others still took theirs applied the creations heard after the lease listing's answer,
    // then, once its member reads completed the listing, replaced them with that older
    // listing: the leases looked vacant, and it covered them one by one (the k-th ranked
    // after k × 3 s), each take failing on the existing lease. The listing now keeps what
    // the node heard since.
    let mut store = Store::default();
    member_of_session_3(&mut store);
    let lease = format!("{BASE}/leases/t");
    let leases_dir = format!("{BASE}/leases");
    let mut node = connected(vec![spec("t", "")]);
    let created = std::cell::Cell::new(false);
    let takes = std::cell::Cell::new(0);
    let mut after = |zk: &ZkOp, store: &mut Store, _: &mut Result<ZkOk, ZkFail>| {
        if matches!(zk, ZkOp::Multi(ops) if ops.iter().any(
            |op| matches!(op, ZkOp::Create { path, .. } if *path == lease)
        )) {
            takes.set(takes.get() + 1);
        }
        if !created.get() && matches!(zk, ZkOp::GetChildren { path } if *path == leases_dir) {
            // Listed without it; n3 (session 3, a live member) takes it before the node has
            // read the members.
            created.set(true);
            n3_holds_the_lease(store);
            store.events.push((lease.clone(), WatchKind::Created));
        }
    };
    let said = pump_with(&mut node, &mut store, at(0), &mut after);
    assert!(created.get(), "the node never listed the leases: {said:?}");
    assert!(node.view.present.contains("t"), "{said:?}");
    let said = pump_with(&mut node, &mut store, at(10_000), &mut after);
    assert_eq!(
        takes.get(),
        0,
        "took a lease it had heard created: {said:?}"
    );
    assert_eq!(lease_owner(&store), Some(3));
    assert!(!node.leadership().may_fire("t"));
}

// ---- a take answered after the node began stopping ----

/// [`pump`], except that the first answer `hold` picks is kept from the node: it is returned
/// (with the operation's id) for the test to deliver later. Every operation sent is logged.
fn pump_holding(
    node: &mut Node,
    store: &mut Store,
    now: Now,
    sent: &mut Vec<ZkOp>,
    mut hold: impl FnMut(&ZkOp, &Result<ZkOk, ZkFail>) -> bool,
) -> Option<(u64, Result<ZkOk, ZkFail>)> {
    let mut held = None;
    pump_delivering(node, store, now, |op, zk, _, result| {
        sent.push(zk.clone());
        if held.is_none() && hold(zk, result) {
            held = Some((op, result.clone()));
            return false;
        }
        true
    });
    held
}

#[test]
fn a_lease_taken_after_stopping_began_is_given_back_only_at_the_epoch_its_take_set() {
    // Regression for ff287c4: a take answered while release_all ran deleted the lease with
    // no condition at all; had it been deleted and taken by another node between the take's
    // answer and this delete, that node's lease went. The lease is now given back only while
    // the epoch is the one its take set (and the lease is at version 0, as created).
    let lease = format!("{BASE}/leases/t");
    let epoch = format!("{BASE}/tasks/t/epoch");
    for other_took_it in [true, false] {
        let mut store = Store::default();
        let mut node = connected(vec![spec("t", "")]);
        let mut sent = Vec::new();
        let take = pump_holding(&mut node, &mut store, at(0), &mut sent, |zk, result| {
            result.is_ok()
                && matches!(zk, ZkOp::Multi(ops) if ops.iter().any(
                    |op| matches!(op, ZkOp::Create { path, .. } if *path == lease)
                ))
        });
        let (op, result) = take.expect("the node never took the lease");
        let taken_at = store.stat(&epoch).version;
        assert_eq!(lease_owner(&store), Some(1));
        // The node begins stopping with the take's answer still on its way.
        node.handle(
            Input::Request {
                req: 2,
                request: Request::ReleaseAll,
            },
            at(1),
        );
        pump(&mut node, &mut store, at(1));
        if other_took_it {
            // The lease goes (deleted by hand, say) and n3 takes it: a new lease at version
            // 0, the epoch bumped by its take.
            n3_holds_the_lease(&mut store);
            store.stat_mut(&epoch).version += 1;
        }
        node.handle(Input::Reply { op, result }, at(1));
        sent.clear();
        let none = pump_holding(&mut node, &mut store, at(1), &mut sent, |_, _| false);
        assert!(none.is_none());
        let gives_back = sent.iter().any(|zk| {
            matches!(zk, ZkOp::Multi(ops) if matches!(ops.as_slice(), [
                ZkOp::Check { path: e, version },
                ZkOp::Delete { path: l, version: Some(0) },
            ] if *e == epoch && *version == taken_at && *l == lease))
        });
        if other_took_it {
            assert_eq!(
                lease_owner(&store),
                Some(3),
                "n3's lease was deleted: {sent:?}"
            );
        } else {
            assert_eq!(
                lease_owner(&store),
                None,
                "the lease taken was not given back"
            );
        }
        assert!(
            gives_back,
            "not given back at the epoch its take set: {sent:?}"
        );
        assert!(!node.leadership().may_fire("t"));
    }
}

// ---- what a node missed while its connection dropped replies ----

#[test]
fn a_lease_replaced_by_a_strangers_while_disconnected_is_not_claimed_on_after_reconnecting() {
    // Simulation seed 22328: while n0's connection dropped replies, a stranger deleted
    // `leases/` and created a persistent `leases/t13`. n0 heard neither event; its re-listing
    // compared names only, so it still held t13, and its claims passed (the stranger's lease
    // is at version 0 too, and the epoch was untouched): it claimed without a lease to the
    // end. The re-listing now checks that every lease the node holds is this session's.
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "")]);
    let lease = format!("{BASE}/leases/t");
    assert_eq!(lease_owner(&store), Some(1));
    assert!(node.leadership().may_fire("t"));
    node.handle(Input::Disconnected, at(100));
    // Unheard: the stranger's lease replaces the node's (version 0, as a new lease).
    store.remove(&lease);
    store.put(lease.clone(), lease_record("ghost"));
    node.handle(
        Input::Connected {
            session_id: 1,
            negotiated_timeout: Duration::from_secs(10),
        },
        at(200),
    );
    let said = pump(&mut node, &mut store, at(200));
    // What the node fires on is its own lease: the stranger's was deleted (a persistent lease
    // is no live node's) and the task taken again.
    assert!(
        !node.leadership().may_fire("t") || lease_owner(&store) == Some(1),
        "fires on a lease of session {:?}: {said:?}",
        lease_owner(&store)
    );
    assert!(
        said.iter()
            .any(|r| r.contains("lease found not this session's after reconnecting")),
        "{said:?}"
    );
    assert_eq!(lease_owner(&store), Some(1), "{said:?}");
    assert!(node.leadership().may_fire("t"), "{said:?}");
}

#[test]
fn a_lease_whose_check_after_a_fenced_claim_was_lost_is_deleted_by_the_node_once_drained() {
    // Simulation seed 23229: a stranger changed the epoch of t01 under n1's lease; n1's claim
    // failed on the epoch, and the answer to its check of the lease was lost with the
    // connection. n1 counted the lease as lost without checking it again (it was still its
    // session's), then was drained: a node that may not lead checked no lease, so the lease
    // stayed with n1's session to the end and the node ranked first waited for it
    // (NotConverged). A lease whose owner is unknown is now checked until known, also by a
    // node that may not lead, and deleted if it is this session's.
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "")]);
    let lease = format!("{BASE}/leases/t");
    let epoch = format!("{BASE}/tasks/t/epoch");
    assert_eq!(lease_owner(&store), Some(1));
    assert!(node.leadership().may_fire("t"));
    // A stranger bumps the epoch; the node claims a tick, and every answer about the lease is
    // lost (its check after the claim, and its check as the designated node).
    store.stat_mut(&epoch).version += 1;
    let tick = DateTime::from_timestamp(1_800_000_060, 0).unwrap();
    let request = Request::Claim {
        task: "t".into(),
        tick,
        intent: crate::coord::ClaimIntent::Run,
        ticks: Vec::new(),
    };
    node.handle(Input::Request { req: 7, request }, at(100));
    let mut lost = false;
    let said = pump_with(&mut node, &mut store, at(100), |zk, _, result| {
        if matches!(zk, ZkOp::Exists { path } | ZkOp::GetData { path } if *path == lease) {
            lost = true;
            *result = Err(ZkFail::ConnectionLoss);
        }
    });
    assert!(lost, "the node never checked its lease: {said:?}");
    assert!(!node.leadership().may_fire("t"));
    // Drained: it may lead nothing, and nobody else deletes a live session's lease.
    let drain = format!("{BASE}/control/drained/n1");
    store.put(drain.clone(), mark());
    node.handle(
        Input::Watch {
            path: drain,
            kind: WatchKind::Created,
        },
        at(200),
    );
    let mut said = pump(&mut node, &mut store, at(200));
    said.extend(pump(&mut node, &mut store, at(2_000)));
    assert_eq!(
        lease_owner(&store),
        None,
        "the drained node left its session's lease: {said:?}"
    );
    assert!(!node.leadership().may_fire("t"));
}

#[test]
fn a_lease_released_without_an_answer_is_deleted_by_a_node_that_may_not_lead() {
    // Simulation seed 47 (with drains): n1's clock was stepped 33 s off ZooKeeper's, so it
    // released its lease of t03; the release was lost with the connection. The lease stayed
    // n1's session's, and n1 looked at such a lease only when deciding as a node that may
    // lead, which it no longer was: node-0, ranked first, saw a live member's lease and waited
    // for it to the end (NotConverged). A node that may not lead (its clock off, or drained,
    // as here) now checks the leases its session may still own as well.
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "")]);
    let lease = format!("{BASE}/leases/t");
    assert_eq!(lease_owner(&store), Some(1));
    let drain = format!("{BASE}/control/drained/n1");
    store.put(drain.clone(), mark());
    node.handle(
        Input::Watch {
            path: drain,
            kind: WatchKind::Created,
        },
        at(100),
    );
    // The release never reaches the server: the connection drops with it in flight.
    let (data, stat) = store.znode(&lease);
    let held = (data.to_vec(), stat);
    let mut lost = false;
    let said = pump_with(&mut node, &mut store, at(100), |zk, store, result| {
        let deletes_lease = matches!(zk, ZkOp::Multi(ops) if ops.iter().any(
            |op| matches!(op, ZkOp::Delete { path, .. } if *path == lease)
        ));
        if !lost && deletes_lease {
            lost = true;
            store.put_with(&lease, held.0.clone(), held.1);
            store.events.retain(|(path, _)| *path != lease);
            *result = Err(ZkFail::ConnectionLoss);
        }
    });
    assert!(lost, "the node never released the lease: {said:?}");
    assert!(!node.leadership().may_fire("t"), "{said:?}");
    let said = pump(&mut node, &mut store, at(2_000));
    assert_eq!(
        lease_owner(&store),
        None,
        "the lease released without an answer stayed this session's: {said:?}"
    );
    assert!(!node.leadership().may_fire("t"), "{said:?}");
}

// ---- first takes: the record created in the take's multi only where none was listed ----

/// The take multis `node` sends while pumped on `store` (each: whether it creates a fire
/// record, and whether it failed).
fn take_multis(node: &mut Node, store: &mut Store, now: Now) -> Vec<(bool, bool)> {
    let records = format!("{BASE}/tasks/");
    let mut multis = Vec::new();
    pump_with(node, store, now, |zk, _, result| {
        if let ZkOp::Multi(ops) = zk {
            let creates_record = ops.iter().any(|op| {
                matches!(op, ZkOp::Create { path, .. }
                    if path.strip_prefix(&records).is_some_and(|rest| !rest.contains('/')))
            });
            multis.push((creates_record, result.is_err()));
        }
    });
    multis
}

#[test]
fn the_takes_of_a_new_cluster_create_each_record_in_one_multi_and_none_fails() {
    // A 20-node cold start of 10,000 new tasks took each lease with two multis: a take of the
    // existing record, which failed on the missing epoch (a failed multi is a write that
    // ZooKeeper logs), then the take that creates record, epoch and lease. The session's
    // listing of `tasks/` now says which records are missing.
    let mut store = Store::default();
    let tasks: Vec<TaskSpec> = (0..100).map(|i| spec(&format!("t{i:03}"), "")).collect();
    let mut node = connected(tasks);
    let multis = take_multis(&mut node, &mut store, at(0));
    assert_eq!(leases(&store).len(), 100);
    assert_eq!(multis.len(), 100, "{multis:?}");
    assert!(multis.iter().all(|&m| m == (true, false)), "{multis:?}");
    assert!(node.view.unrecorded.is_empty());
}

#[test]
fn the_takes_of_existing_records_do_not_try_to_create_them() {
    // Given the records of an earlier session (its member and leases gone with it), each
    // take is the plain take: one multi that checks the epoch, none failing.
    let mut store = Store::default();
    let tasks: Vec<TaskSpec> = (0..10).map(|i| spec(&format!("t{i}"), "")).collect();
    started(&mut store, tasks.clone());
    let gone = [format!("{BASE}/leases/"), format!("{BASE}/members/")];
    for dir in gone {
        let below: Vec<String> = store
            .paths()
            .filter(|p| p.starts_with(&dir))
            .cloned()
            .collect();
        for path in below {
            store.remove(path);
        }
    }
    let mut node = connected(tasks);
    let multis = take_multis(&mut node, &mut store, at(0));
    assert_eq!(leases(&store).len(), 10);
    assert_eq!(multis.len(), 10, "{multis:?}");
    assert!(multis.iter().all(|&m| m == (false, false)), "{multis:?}");
}

#[test]
fn a_node_with_many_tasks_coalesces_lease_events_over_a_longer_interval() {
    // Each decision walks every task the node defines: with 10,000 tasks, lease events make it
    // decide at most every 50 ms, not every 10 ms, and a burst within that makes one decision.
    // (Tasks no node may run: the node decides about each and takes none.)
    assert_eq!(
        crate::coord::node::acting::decide_every(100),
        crate::coord::node::acting::DECIDE_EVERY
    );
    assert_eq!(
        crate::coord::node::acting::decide_every(10_000),
        Duration::from_millis(50)
    );
    let mut store = Store::default();
    let nowhere = "require_labels = { zone = \"nowhere\" }";
    let tasks: Vec<TaskSpec> = (0..10_000)
        .map(|i| spec(&format!("t{i:05}"), nowhere))
        .collect();
    let (mut node, _) = started(&mut store, tasks);
    let before = node.leases.decisions;
    let path = format!("{BASE}/leases/elsewhere");
    for ms in [1, 20, 40, 49] {
        let kind = WatchKind::DataChanged;
        let path = path.clone();
        node.handle(Input::Watch { path, kind }, at(ms));
        node.handle_timeout(at(ms));
    }
    assert_eq!(
        node.leases.decisions, before,
        "no decision within 50 ms of the last"
    );
    assert_eq!(node.poll_timeout(), Some(Duration::from_millis(50)));
    node.handle_timeout(at(50));
    assert_eq!(
        node.leases.decisions,
        before + 1,
        "one decision for the burst"
    );
}
