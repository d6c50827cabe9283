//! The node's backfill claims, fed by hand (the harness of the manual runs' tests).

use super::super::Node;
use super::super::io::{Answered, Input, Output, Request, Stat, WatchKind, ZkFail, ZkOk, ZkOp};
use super::super::test_fixtures::{BASE, at_secs as at, drain};
use super::trigger::{answer, calls, leading, reply};
use crate::coord::backfill::{self, BackfillRecord, BackfillState};
use crate::coord::{ClaimOutcome, Trigger};

const REQUEST: &str = "t@backfill-0000000004";

fn request() -> BackfillRecord {
    BackfillRecord::new("t", at(0).wall, at(600).wall, 10, "op@host", at(1).wall)
}

/// Tells the node that request `REQUEST` is `record` at `version` (a watch event and the read).
fn learn_backfill(node: &mut Node, record: &BackfillRecord, version: i32) {
    let path = format!("{BASE}/control/backfills/{REQUEST}");
    node.handle(
        Input::Watch {
            path: path.clone(),
            kind: WatchKind::Created,
        },
        at(2),
    );
    let (op, zk) = calls(&drain(node)).pop().expect("a read");
    assert_eq!(zk, ZkOp::GetData { path });
    let stat = Stat {
        version,
        ..Stat::default()
    };
    let data = serde_json::to_vec(record).unwrap();
    reply(node, op, Ok(ZkOk::Data(data, stat)), at(2));
}

fn claim_tick(node: &mut Node, req: u64, tick: u64) -> Vec<Output> {
    node.handle(
        Input::Request {
            req,
            request: Request::ClaimManual {
                task: "t".into(),
                trigger: Trigger {
                    fire_id: backfill::fire_id(REQUEST, at(tick).wall),
                    requested_at: at(tick).wall,
                },
            },
        },
        at(3),
    );
    drain(node)
}

#[test]
fn a_backfill_tick_is_claimed_in_one_multi_fenced_on_the_lease_that_moves_the_request() {
    let mut node = leading();
    learn_backfill(&mut node, &request(), 7);
    assert_eq!(node.leases.leadership.backfills["t"][0].name, REQUEST);
    let out = claim_tick(&mut node, 1, 60);
    let (op, zk) = calls(&out).pop().expect("the claim");
    let ZkOp::Multi(ops) = zk else {
        panic!("not a multi: {zk:?}")
    };
    assert_eq!(
        ops[..2],
        [
            ZkOp::Check {
                path: format!("{BASE}/leases/t"),
                version: 0
            },
            ZkOp::Check {
                path: format!("{BASE}/tasks/t/epoch"),
                version: 5
            },
        ]
    );
    let ZkOp::SetData {
        path,
        data,
        version,
    } = &ops[2]
    else {
        panic!("{ops:?}")
    };
    assert_eq!(
        (path.as_str(), *version),
        (
            format!("{BASE}/control/backfills/{REQUEST}").as_str(),
            Some(7)
        )
    );
    let written: BackfillRecord = serde_json::from_slice(data).unwrap();
    assert_eq!((written.done, written.claimed), (Some(at(60).wall), 1));
    let running = written.running.unwrap();
    assert_eq!((running.tick, running.node.as_str()), (at(60).wall, "n1"));
    assert_eq!(running.session.as_deref(), Some("10"));

    let out = reply(&mut node, op, Ok(ZkOk::Multi(vec![])), at(3));
    assert_eq!(
        answer(&out, 1),
        Some(Ok(Answered::Claim(ClaimOutcome::Claimed)))
    );
    // Running: no longer offered to the daemon.
    assert!(node.leases.leadership.backfills.is_empty());
}

#[test]
fn a_backfill_claim_whose_answer_was_lost_is_resolved_by_reading_the_request() {
    let mut node = leading();
    learn_backfill(&mut node, &request(), 7);
    let out = claim_tick(&mut node, 1, 60);
    let (op, zk) = calls(&out).pop().unwrap();
    let ZkOp::Multi(ops) = zk else { panic!() };
    let ZkOp::SetData { data, .. } = &ops[2] else {
        panic!()
    };
    let applied = data.clone();
    let out = reply(&mut node, op, Err(ZkFail::ConnectionLoss), at(3));
    let (read, zk) = calls(&out).pop().unwrap();
    assert_eq!(
        zk,
        ZkOp::GetData {
            path: format!("{BASE}/control/backfills/{REQUEST}")
        }
    );
    let stat = Stat {
        version: 8,
        ..Stat::default()
    };
    let out = reply(&mut node, read, Ok(ZkOk::Data(applied, stat)), at(4));
    assert_eq!(
        answer(&out, 1),
        Some(Ok(Answered::Claim(ClaimOutcome::Claimed)))
    );
}

#[test]
fn a_backfill_tick_claimed_already_or_of_a_task_not_led_is_refused_without_a_write() {
    let mut node = leading();
    let mut done = request();
    done.done = Some(at(60).wall);
    done.claimed = 1;
    done.succeeded = 1;
    learn_backfill(&mut node, &done, 9);
    let out = claim_tick(&mut node, 1, 60);
    assert!(calls(&out).is_empty(), "{out:?}");
    assert!(matches!(
        answer(&out, 1),
        Some(Ok(Answered::Claim(ClaimOutcome::AlreadyClaimed { .. })))
    ));
    node.handle(
        Input::Request {
            req: 2,
            request: Request::ClaimManual {
                task: "u".into(),
                trigger: Trigger {
                    fire_id: backfill::fire_id("u@backfill-0000000001", at(60).wall),
                    requested_at: at(60).wall,
                },
            },
        },
        at(3),
    );
    let out = drain(&mut node);
    assert_eq!(
        answer(&out, 2),
        Some(Ok(Answered::Claim(ClaimOutcome::NotLeader)))
    );
    let mut cancelled = done.clone();
    cancelled.state = BackfillState::Cancelled;
    learn_backfill(&mut node, &cancelled, 10);
    assert!(node.leases.leadership.backfills.is_empty());
}
