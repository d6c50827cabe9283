//! The embedded backend's backfill requests.

use chrono::{DateTime, Utc};

use crate::coord::backfill::{self, BackfillRecord, BackfillState};
use crate::coord::local::LocalCoordinator;
use crate::coord::local::tests::{exited, spec};
use crate::coord::records::RunTrigger;
use crate::coord::{ClaimOutcome, Coordinator, RunResult, Trigger};

fn at(minutes: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_767_225_600 + minutes * 60, 0).unwrap()
}

fn tick_of(name: &str, minute: i64) -> Trigger {
    Trigger {
        fire_id: backfill::fire_id(name, at(minute)),
        requested_at: at(minute),
    }
}

fn ended(trigger: &Trigger, code: i32) -> RunResult {
    RunResult {
        finished_at: trigger.requested_at,
        fire_id: Some(trigger.fire_id.clone()),
        manual: true,
        ..exited(trigger.requested_at, code)
    }
}

fn request(task: &str, total: u32) -> BackfillRecord {
    BackfillRecord::new(
        task,
        at(0),
        at(i64::from(total)),
        total,
        "ops@host",
        at(100),
    )
}

#[tokio::test]
async fn each_tick_is_claimed_once_in_turn_and_the_last_end_makes_it_done() {
    let dir = tempfile::tempdir().unwrap();
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    local.publish(&[spec("a")]).await.unwrap();
    let name = local.request_backfill(request("a", 2)).unwrap();
    assert_eq!(name, "a@backfill-0000000000");
    let listed = local.leadership().borrow().backfills.clone();
    assert_eq!(listed["a"].len(), 1);
    let first = tick_of(&name, 0);
    assert_eq!(
        local.claim_manual("a", &first).await.unwrap(),
        ClaimOutcome::Claimed
    );
    // Running: not listed, and neither it nor the next tick is claimed again.
    assert!(local.leadership().borrow().backfills.is_empty());
    assert!(matches!(
        local.claim_manual("a", &first).await.unwrap(),
        ClaimOutcome::AlreadyClaimed { .. }
    ));
    assert!(matches!(
        local.claim_manual("a", &tick_of(&name, 1)).await.unwrap(),
        ClaimOutcome::AlreadyClaimed { .. }
    ));
    local.run_ended("a", &ended(&first, 0)).await.unwrap();
    let second = tick_of(&name, 1);
    assert_eq!(
        local.claim_manual("a", &second).await.unwrap(),
        ClaimOutcome::Claimed
    );
    local.run_ended("a", &ended(&second, 4)).await.unwrap();
    let record = local.backfills()[&name].clone();
    assert_eq!(record.state, BackfillState::Done);
    assert_eq!((record.succeeded, record.failed), (1, 1));
    let history = local.history("a", 10);
    assert_eq!(history.len(), 2);
    assert!(
        history
            .iter()
            .all(|h| h.backfill && h.trigger == RunTrigger::Manual)
    );
}

#[tokio::test]
async fn a_restart_neither_reruns_the_running_tick_nor_loses_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let name = {
        let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
        local.publish(&[spec("a")]).await.unwrap();
        let name = local.request_backfill(request("a", 3)).unwrap();
        let first = tick_of(&name, 0);
        assert_eq!(
            local.claim_manual("a", &first).await.unwrap(),
            ClaimOutcome::Claimed
        );
        name
    };
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    local.publish(&[spec("a")]).await.unwrap();
    let record = local.backfills()[&name].clone();
    assert_eq!((record.claimed, record.failed), (1, 1));
    assert!(record.failures[0].contains("zkcron stopped while it ran"));
    assert!(matches!(
        local.claim_manual("a", &tick_of(&name, 0)).await.unwrap(),
        ClaimOutcome::AlreadyClaimed { .. }
    ));
    assert_eq!(
        local.claim_manual("a", &tick_of(&name, 1)).await.unwrap(),
        ClaimOutcome::Claimed
    );
}

#[tokio::test]
async fn a_cancelled_request_claims_nothing_more_and_an_unknown_task_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    local.publish(&[spec("a")]).await.unwrap();
    let error = local.request_backfill(request("b", 2)).unwrap_err();
    assert!(
        error.to_string().contains("task b is not defined"),
        "{error}"
    );
    let name = local.request_backfill(request("a", 2)).unwrap();
    let before = local.cancel_backfill(&name, "ops@host").unwrap().unwrap();
    assert_eq!(before.state, BackfillState::Active);
    assert_eq!(local.backfills()[&name].state, BackfillState::Cancelled);
    assert!(local.leadership().borrow().backfills.is_empty());
    assert!(matches!(
        local.claim_manual("a", &tick_of(&name, 0)).await.unwrap(),
        ClaimOutcome::AlreadyClaimed { .. }
    ));
    assert!(
        local
            .cancel_backfill("a@backfill-0000000009", "x")
            .unwrap()
            .is_none()
    );
}
