//! What the node heals after a fault met midway: a take whose tree recreation failed, a clock
//! probe lost with the connection, a requested run's claim answered with an error. Fed by the in-memory ZooKeeper of `test_fixtures`.

use std::time::Duration;

use super::super::Node;
use super::super::io::{Answered, Input, Now, Output, Request, WatchKind, ZkFail, ZkOp};
use super::super::test_fixtures::{
    Answering, BASE, Store, Timers, ask_at, at, leases, pending_trigger, pump,
    request as request_input, serve_with, spec, started, tick,
};
use crate::coord::backfill::{self, BackfillRecord};
use crate::coord::records::{TriggerRecord, TriggerState};
use crate::coord::{ClaimOutcome, CoordError, Trigger};

/// Seed 11576 of the long simulation: `leases/` was deleted, the node's take found it gone
/// (NoNode) and recreated the tree, and that recreation failed (the connection was lost). The
/// take that waited for the tree was dropped with it, leaving the task "taking" for ever: no
/// decision took it again, and another node held it as cover until the end. Now the take fails
/// as any failed take does, and the next decision takes the lease.
#[test]
fn a_take_whose_tree_recreation_failed_is_taken_again() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "")]);
    assert_eq!(leases(&store), ["t"]);
    let lease = format!("{BASE}/leases/t");
    store.remove(&lease);
    // The take finds `leases/` gone (the answer says so),
    // then the last create of the tree's recreation loses its connection.
    let (mut took, mut recreated) = (false, false);
    let tasksets = format!("{BASE}/tasksets");
    let taken = lease.clone();
    let answer: Answering = Box::new(move |zk, _| match zk {
        ZkOp::Multi(ops) if matches!(&ops[0], ZkOp::Create { path, .. } if *path == taken) => {
            (!std::mem::replace(&mut took, true)).then(|| {
                Err(ZkFail::Multi {
                    index: 0,
                    error: Box::new(ZkFail::NoNode),
                })
            })
        }
        ZkOp::Create { path, .. } if *path == tasksets => {
            (!std::mem::replace(&mut recreated, true)).then_some(Err(ZkFail::ConnectionLoss))
        }
        _ => None,
    });
    let gone = Input::Watch {
        path: lease,
        kind: WatchKind::Deleted,
    };
    let served = serve_with(
        &mut node,
        &mut store,
        at(1_000),
        [gone],
        Timers::Fire,
        answer,
    );
    assert!(
        served
            .said
            .iter()
            .any(|s| s.contains("recreating the cluster's tree failed")),
        "{:?}",
        served.said
    );
    let said = pump(&mut node, &mut store, at(3_000));
    let said_later = pump(&mut node, &mut store, at(6_000));
    assert_eq!(leases(&store), ["t"], "{said:?} {said_later:?}");
    assert!(node.leadership().may_fire("t"));
}

/// Seed 77306 of the long simulation: the only node that may run a task was refused leadership
/// for its clock; its clock came right, and the probe that would have said so lost its answer
/// with the connection. The node waited for the next probe, 30 s later, and the task's ticks
/// of that time were never run. A reconnect now probes again when the last probe failed.
#[test]
fn a_clock_probe_lost_with_the_connection_is_sent_again_on_reconnecting() {
    let mut store = Store::default();
    let (mut node, _) = started(&mut store, vec![spec("t", "")]);
    let clock = format!("{BASE}/clock");
    let is_probe = |zk: &ZkOp| matches!(zk, ZkOp::SetData { path, .. } if *path == clock);
    let probe_at = at(31_000);
    node.handle_timeout(probe_at);
    let outputs: Vec<_> = std::iter::from_fn(|| node.poll()).collect();
    let probe = outputs.iter().find_map(|o| match o {
        Output::Call { op, zk } if is_probe(zk) => Some(*op),
        _ => None,
    });
    let probe = probe.expect("the periodic probe");
    node.handle(
        Input::Reply {
            op: probe,
            result: Err(ZkFail::ConnectionLoss),
        },
        probe_at,
    );
    node.handle(Input::Disconnected, probe_at);
    let back = at(31_500);
    node.handle(
        Input::Connected {
            session_id: 1,
            negotiated_timeout: Duration::from_secs(10),
        },
        back,
    );
    let outputs: Vec<_> = std::iter::from_fn(|| node.poll()).collect();
    let probed = outputs
        .iter()
        .any(|o| matches!(o, Output::Call { zk, .. } if is_probe(zk)));
    assert!(probed, "{outputs:?}");
}

/// Asks node `node` to claim `fire_id` of task t (request 901) with every answer to the claim
/// lost after the store applied it, and every re-read that would resolve it failing: the
/// outcome is unknown, and the node answers an error, as the daemon then retries.
fn claim_with_its_outcome_unknown(node: &mut Node, store: &mut Store, fire_id: &str, path: &str) {
    let request = path.to_string();
    let answer: Answering = Box::new(move |zk, store| match zk {
        ZkOp::Multi(_) => {
            let applied = store.apply(zk, at(100));
            assert!(applied.is_ok(), "{applied:?}");
            Some(Err(ZkFail::ConnectionLoss))
        }
        ZkOp::GetData { path } if *path == request => Some(Err(ZkFail::Other("refused".into()))),
        _ => None,
    });
    let mut served = serve_with(
        node,
        store,
        at(100),
        [request_input(901, claim(fire_id))],
        Timers::Leave,
        answer,
    );
    let answered = served.answers.remove(&901).expect("answered");
    assert!(
        matches!(answered, Err(CoordError::Unknown { .. })),
        "{answered:?} {:?}",
        served.said
    );
}

/// Claims `fire_id` of task t again, as the daemon retries after an error, the store answering.
fn claim_again(node: &mut Node, store: &mut Store, fire_id: &str, now: Now) -> Answered {
    ask_at(node, store, now, claim(fire_id))
}

/// The daemon's request to claim the requested run `fire_id` of task t.
fn claim(fire_id: &str) -> Request {
    let trigger = Trigger {
        fire_id: fire_id.into(),
        requested_at: tick(),
    };
    Request::ClaimManual {
        task: "t".into(),
        trigger,
    }
}

/// A manual run whose claim was applied but answered with an error (its answer lost, the
/// re-reads failing) was asked again by the daemon; the node had forgotten the `claimed_at` it
/// sent (and, its view stale, wrote a claim with a new one, which conflicted), so it refused
/// its own claim as another's: the trigger stayed running on this node and never ran.
#[test]
fn a_manual_run_asked_again_after_its_claim_ended_in_an_error_finds_its_own_claim() {
    let mut store = Store::default();
    let name = "t@manual-0000000001";
    let path = format!("{BASE}/control/triggers/{name}");
    store.put(
        &path,
        serde_json::to_vec(&pending_trigger("t", tick())).unwrap(),
    );
    let (mut node, _) = started(&mut store, vec![spec("t", "")]);
    claim_with_its_outcome_unknown(&mut node, &mut store, name, &path);
    let running: TriggerRecord = serde_json::from_slice(store.data(&path)).unwrap();
    assert_eq!(running.state, TriggerState::Running);
    // The watch's event of the claim is not delivered yet: the node's view is stale.
    let answer = claim_again(&mut node, &mut store, name, at(5_000));
    assert_eq!(answer, Answered::Claim(ClaimOutcome::Claimed));
    let still: TriggerRecord = serde_json::from_slice(store.data(&path)).unwrap();
    assert_eq!(still.claimed_at, running.claimed_at, "claimed once");
}

/// The same for a backfill tick: a tick claimed in this session whose answer was an error is
/// this node's when the daemon asks again; asked in a later session, it is not (the lease
/// holder ends a tick whose claimer's session is gone as lost), and the run does not start.
#[test]
fn a_backfill_tick_asked_again_after_its_claim_ended_in_an_error_is_claimed_only_in_its_session() {
    let name = "t@backfill-0000000004";
    let path = format!("{BASE}/control/backfills/{name}");
    let record = BackfillRecord::new("t", tick(), at(600_000).wall, 10, "op@h", tick());
    let fire_id = backfill::fire_id(name, at(60_000).wall);
    let claimed = || {
        let mut store = Store::default();
        store.put(&path, serde_json::to_vec(&record).unwrap());
        let (mut node, _) = started(&mut store, vec![spec("t", "")]);
        claim_with_its_outcome_unknown(&mut node, &mut store, &fire_id, &path);
        (node, store)
    };
    let (mut node, mut store) = claimed();
    let answer = claim_again(&mut node, &mut store, &fire_id, at(5_000));
    assert_eq!(answer, Answered::Claim(ClaimOutcome::Claimed));

    let (mut node, mut store) = claimed();
    let new_session = Input::Connected {
        session_id: 2,
        negotiated_timeout: Duration::from_secs(10),
    };
    node.handle(Input::Expired, at(1_000));
    store.zk.end_session(1, &mut Vec::new());
    store.session = Some(2);
    node.handle(new_session, at(1_000));
    pump(&mut node, &mut store, at(1_000));
    assert!(node.leadership().may_fire("t"), "leads again");
    let answer = claim_again(&mut node, &mut store, &fire_id, at(5_000));
    assert!(
        matches!(answer, Answered::Claim(ClaimOutcome::AlreadyClaimed { .. })),
        "{answer:?}"
    );
}
