//! The node's tests. Here the node alone, fed by hand: no ZooKeeper, no clock. In `tests/`,
//! one file a subject, each importing what it uses (the shared fixtures from
//! `super::test_fixtures`):
//! - fed by hand: `trigger` (manual runs and history), `backfill` (backfill claims, on
//!   `trigger`'s harness);
//! - fed by the in-memory ZooKeeper of `test_fixtures` (`Store`: `model_zk`, which the
//!   simulation runs on too; `pump`, `started`):
//!   `control` (drain, pause, eligibility and drift reports, foreign leases), `lease` (takes,
//!   releases, registration), `run` (others' live runs, orphaned ticks), `queued_start` (a run's
//!   end and the tick queued behind it), `chain` (the requests of chained runs), `pause` (a
//!   failed run's pause), `every_node` (every-node units), `pool` (a pooled task's units),
//!   `healing` (a take whose tree recreation failed, a clock probe lost with the connection).

use std::time::Duration;

use chrono::DateTime;

use super::io::{Answered, Input, Output, Request};
use super::test_fixtures::{at_secs as at, drain};
use super::{Node, NodeConfig};
use crate::coord::{ClaimIntent, ClaimOutcome};

fn config(session_timeout: Duration) -> NodeConfig {
    NodeConfig {
        session_timeout,
        max_clock_skew: Some(Duration::from_secs(2)),
        history_runs: 3,
        ..super::test_fixtures::config("n1")
    }
}

fn reports(outputs: &[Output]) -> Vec<String> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Report(report) => Some(report.to_string()),
            _ => None,
        })
        .collect()
}

#[test]
fn session_deadlines_use_the_timeout_zookeeper_negotiated_not_the_configured_one() {
    // Regression: a session_timeout the server clamped (to its min/max) kept zkcron's own
    // deadlines on the configured value.
    let mut node = Node::new(config(Duration::from_secs(60)), at(0));
    node.handle(
        Input::Connected {
            session_id: 0x1234,
            negotiated_timeout: Duration::from_secs(4),
        },
        at(0),
    );
    let said = reports(&drain(&mut node));
    assert!(
        said.iter().any(|r| r
            .contains("ZooKeeper negotiated a session timeout of 4s instead of the configured 1m")
            && r.contains("deadlines use 4s")),
        "{said:?}"
    );
    node.handle(Input::Disconnected, at(10));
    drain(&mut node);
    assert_eq!(node.poll_timeout(), Some(Duration::from_secs(14)));
    node.handle_timeout(at(14));
    let said = reports(&drain(&mut node));
    assert!(
        said.iter()
            .any(|r| r.contains("the session is presumed lost") && r.contains("timeout=4s")),
        "{said:?}"
    );
    assert_eq!(node.leadership().session_losses, 1);
}

#[test]
fn a_claim_without_the_lease_is_not_leader_and_sends_nothing_to_zookeeper() {
    let mut node = Node::new(config(Duration::from_secs(10)), at(0));
    drain(&mut node);
    let tick = DateTime::from_timestamp(1_800_000_060, 0).unwrap();
    let request = Request::Claim {
        task: "t".into(),
        tick,
        intent: ClaimIntent::Run,
        ticks: Vec::new(),
    };
    node.handle(Input::Request { req: 7, request }, at(1));
    let outputs = drain(&mut node);
    assert!(
        !outputs.iter().any(|o| matches!(o, Output::Call { .. })),
        "{outputs:?}"
    );
    assert!(
        outputs.iter().any(|o| matches!(
            o,
            Output::Answer {
                req: 7,
                answer: Ok(Answered::Claim(ClaimOutcome::NotLeader))
            }
        )),
        "{outputs:?}"
    );
}

/// A node with no deliberate bug on, as [`config`] builds it and as the driver runs it
/// (`coord::zk`'s `the_driver_s_node_has_no_deliberate_bug_on`): a claim is the fenced
/// multi-op, checking the lease, the epoch this node's take set and the fire record's version,
/// not the deliberately unfenced one the simulation proves its checker on.
#[test]
fn with_no_deliberate_bug_on_a_claim_is_fenced() {
    use super::io::{Stat, ZkOk, ZkOp};
    assert!(!config(Duration::from_secs(10)).bugs.unfenced_claim);
    let mut node = Node::new(config(Duration::from_secs(10)), at(0));
    node.handle(
        Input::Connected {
            session_id: 0x10,
            negotiated_timeout: Duration::from_secs(10),
        },
        at(0),
    );
    drain(&mut node);
    // Set up and listed, holding the lease of `t` (its take set the epoch to version 5).
    let session = node.life.session.as_mut().unwrap();
    session.listed = true;
    session.setup_outstanding = None;
    session.set_up = true;
    node.tasks.hold("t", 5, None);
    node.publish();
    drain(&mut node);

    let tick = DateTime::from_timestamp(1_800_000_060, 0).unwrap();
    let request = Request::Claim {
        task: "t".into(),
        tick,
        intent: ClaimIntent::Run,
        ticks: Vec::new(),
    };
    node.handle(Input::Request { req: 7, request }, at(1));
    let calls = |outputs: Vec<Output>| -> Vec<(u64, ZkOp)> {
        outputs
            .into_iter()
            .filter_map(|o| match o {
                Output::Call { op, zk } => Some((op, zk)),
                _ => None,
            })
            .collect()
    };
    let mut sent = calls(drain(&mut node));
    let (op, read) = sent.pop().expect("the fire record is read first");
    assert_eq!(
        read,
        ZkOp::GetData {
            path: "/zkcron/test/tasks/t".into()
        }
    );
    let stat = Stat {
        version: 3,
        ..Stat::default()
    };
    node.handle(
        Input::Reply {
            op,
            result: Ok(ZkOk::Data(Vec::new(), stat)),
        },
        at(1),
    );
    let mut sent = calls(drain(&mut node));
    let (_, claim) = sent.pop().expect("the claim");
    let ZkOp::Multi(ops) = claim else {
        panic!("a claim is one multi-op: {claim:?}")
    };
    assert_eq!(
        ops[..2],
        [
            ZkOp::Check {
                path: "/zkcron/test/leases/t".into(),
                version: 0
            },
            ZkOp::Check {
                path: "/zkcron/test/tasks/t/epoch".into(),
                version: 5
            },
        ],
        "{ops:?}"
    );
    assert!(
        matches!(&ops[2], ZkOp::SetData { path, version: Some(3), .. } if path == "/zkcron/test/tasks/t"),
        "{ops:?}"
    );
}

#[test]
fn a_clock_znode_created_by_another_node_meanwhile_is_written_and_the_skew_measured() {
    // Regression: three nodes starting at once raced to create `clock`; the losers measured
    // nothing, registered with leads = false and led nothing until the next probe.
    use super::io::{Stat, ZkFail, ZkOk, ZkOp};
    let mut node = Node::new(config(Duration::from_secs(10)), at(0));
    node.handle(
        Input::Connected {
            session_id: 1,
            negotiated_timeout: Duration::from_secs(10),
        },
        at(0),
    );
    let clock = "/zkcron/test/clock";
    let mut wrote_again = false;
    for _ in 0..4 {
        let calls: Vec<(u64, ZkOp)> = drain(&mut node)
            .into_iter()
            .filter_map(|o| match o {
                Output::Call { op, zk } => Some((op, zk)),
                _ => None,
            })
            .collect();
        for (op, zk) in calls {
            let stat = Stat {
                mtime_ms: 1_800_000_000_000,
                ..Stat::default()
            };
            let result = match &zk {
                ZkOp::SetData { path, .. } if path == clock && !wrote_again => {
                    wrote_again = true;
                    Err(ZkFail::NoNode)
                }
                ZkOp::SetData { path, .. } if path == clock => Ok(ZkOk::Stat(stat)),
                ZkOp::Create { path, .. } if path == clock => Err(ZkFail::NodeExists),
                ZkOp::Create { .. } => Ok(ZkOk::Created(stat)),
                _ => Ok(ZkOk::Done),
            };
            node.handle(Input::Reply { op, result }, at(0));
        }
    }
    assert!(node.may_lead(), "the skew was never measured");
}

#[test]
fn a_fire_record_claimed_ahead_by_the_claim_lead_is_not_reported_but_one_further_ahead_is() {
    use super::clock::ahead_tolerance;
    use crate::coord::records::FireRecord;
    let mut node = Node::new(config(Duration::from_secs(10)), at(0));
    drain(&mut node);
    let record = |tick| FireRecord {
        tick: Some(tick),
        node: "n2".into(),
        ..FireRecord::empty()
    };
    // No offset measured: the cluster's clock is this node's.
    let now = at(0).wall;
    assert_eq!(
        ahead_tolerance(),
        crate::plan::CLAIM_AHEAD + chrono::Duration::seconds(5)
    );
    node.check_record_clock("t", &record(now + crate::plan::CLAIM_AHEAD));
    node.check_record_clock("t", &record(now + ahead_tolerance()));
    assert_eq!(reports(&drain(&mut node)), Vec::<String>::new());
    let further = now + ahead_tolerance() + chrono::Duration::milliseconds(1);
    node.check_record_clock("t", &record(further));
    let said = reports(&drain(&mut node));
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("ahead of ZooKeeper's clock"), "{said:?}");
}

mod backfill;
mod chain;
mod control;
mod every_node;
mod healing;
mod lease;
mod ledger;
mod pause;
mod pool;
mod queued_start;
mod run;
mod trigger;
