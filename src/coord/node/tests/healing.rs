//! What the node heals after a fault met midway: a take whose tree recreation failed, a clock
//! probe lost with the connection. Fed by the in-memory ZooKeeper of `test_fixtures`.

use std::time::Duration;

use super::super::io::{Input, Output, WatchKind, ZkFail, ZkOp};
use super::super::test_fixtures::{
    Answering, BASE, Store, Timers, at, leases, pump, serve_with, spec, started,
};

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
    // The take finds `leases/` gone (this store keeps no directories: the answer says so),
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
