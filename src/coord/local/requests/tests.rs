//! The embedded backend's requests: manual and chained runs (with their history), backfills.

use chrono::{DateTime, Utc};

use crate::coord::backfill::{self, BackfillRecord, BackfillState};
use crate::coord::local::LocalCoordinator;
use crate::coord::local::tests::{exited, spec};
use crate::coord::records::{RunTrigger, TriggerState};
use crate::coord::{ClaimIntent, ClaimOutcome, Coordinator, RunResult, Trigger};

fn at(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_767_225_600 + s, 0).unwrap()
}

/// `minutes` after the instant [`at`] counts from.
fn minute(minutes: i64) -> DateTime<Utc> {
    at(minutes * 60)
}

fn ended(tick: DateTime<Utc>, fire_id: Option<&str>, code: i32) -> RunResult {
    RunResult {
        fire_id: fire_id.map(String::from),
        manual: fire_id.is_some(),
        ..exited(tick, code)
    }
}

#[tokio::test]
async fn a_trigger_is_pending_until_claimed_once_and_ends_with_its_result() {
    let dir = tempfile::tempdir().unwrap();
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    local.publish(&[spec("a")]).await.unwrap();
    let error = local.request_trigger("nope", "op@host").unwrap_err();
    assert_eq!(
        error.to_string(),
        "task nope is not defined on this host (or is disabled): nothing would run it; `zkcron next` lists the tasks"
    );
    let trigger = local.request_trigger("a", "op@host").unwrap();
    assert_eq!(trigger.fire_id, "a@manual-0000000000");
    assert_eq!(
        local.leadership().borrow().triggers["a"],
        vec![trigger.clone()]
    );
    let stored = local.trigger_state(&trigger.fire_id).unwrap();
    assert_eq!(
        (stored.state, stored.by.as_str()),
        (TriggerState::Pending, "op@host")
    );

    assert_eq!(
        local.claim_manual("a", &trigger).await.unwrap(),
        ClaimOutcome::Claimed
    );
    assert!(local.leadership().borrow().triggers.is_empty());
    assert_eq!(
        local.claim_manual("a", &trigger).await.unwrap(),
        ClaimOutcome::AlreadyClaimed {
            record: trigger.requested_at
        }
    );
    assert_eq!(
        local.trigger_state(&trigger.fire_id).unwrap().state,
        TriggerState::Running
    );

    let result = ended(trigger.requested_at, Some(&trigger.fire_id), 3);
    local.run_ended("a", &result).await.unwrap();
    let stored = local.trigger_state(&trigger.fire_id).unwrap();
    assert_eq!(stored.state, TriggerState::Ended);
    let entry = stored.result.unwrap();
    assert_eq!(
        (entry.exit_code, entry.success, entry.trigger),
        (Some(3), false, RunTrigger::Manual)
    );
    assert_eq!(stored.reason, None);
    // A manual run moves no fire record and leaves the scheduled result alone.
    assert_eq!(local.last_claimed("a").await.unwrap(), None);
    assert_eq!(local.last_result("a").await.unwrap(), None);
    assert_eq!(local.history("a", 20), vec![entry]);
}

#[tokio::test]
async fn a_trigger_of_a_task_this_node_does_not_lead_is_not_claimed() {
    let dir = tempfile::tempdir().unwrap();
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    local.publish(&[spec("a")]).await.unwrap();
    let trigger = local.request_trigger("a", "op@host").unwrap();
    local.release_all().await;
    assert_eq!(
        local.claim_manual("a", &trigger).await.unwrap(),
        ClaimOutcome::NotLeader
    );
    assert_eq!(
        local.trigger_state(&trigger.fire_id).unwrap().state,
        TriggerState::Pending
    );
}

#[tokio::test]
async fn manual_fire_ids_count_on_across_restarts_and_a_run_cut_short_is_ended_not_rerun() {
    let dir = tempfile::tempdir().unwrap();
    let first = {
        let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
        local.publish(&[spec("a")]).await.unwrap();
        let first = local.request_trigger("a", "op@host").unwrap();
        assert_eq!(
            local.claim_manual("a", &first).await.unwrap(),
            ClaimOutcome::Claimed
        );
        first
    };
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    local.publish(&[spec("a")]).await.unwrap();
    let stored = local.trigger_state(&first.fire_id).unwrap();
    assert_eq!(stored.state, TriggerState::Ended);
    assert_eq!(
        stored.reason.as_deref(),
        Some("zkcron stopped while it ran; its end was not recorded (not run again)")
    );
    assert!(local.leadership().borrow().triggers.is_empty());
    let second = local.request_trigger("a", "op@host").unwrap();
    assert_eq!(second.fire_id, "a@manual-0000000001");
}

#[tokio::test]
async fn history_keeps_scheduled_and_manual_runs_newest_first_within_history_runs() {
    let dir = tempfile::tempdir().unwrap();
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system())
        .unwrap()
        .with_history_runs(2);
    local.publish(&[spec("a")]).await.unwrap();
    for minute in 1..=3 {
        let tick = at(minute * 60);
        local.claim("a", tick, ClaimIntent::Run).await.unwrap();
        local.run_ended("a", &ended(tick, None, 0)).await.unwrap();
    }
    let history = local.history("a", 20);
    let ids: Vec<&str> = history.iter().map(|h| h.fire_id.as_str()).collect();
    assert_eq!(
        ids,
        [
            format!("a@{}", at(180).timestamp()),
            format!("a@{}", at(120).timestamp())
        ]
    );
    assert_eq!(history[0].trigger, RunTrigger::Schedule);
    assert_eq!(history[0].release, env!("CARGO_PKG_VERSION"));
    assert_eq!(local.history("a", 1).len(), 1);
    assert!(local.history("other", 20).is_empty());
}

#[tokio::test]
async fn the_files_the_previous_release_reads_keep_their_format() {
    // The previous release opens a state dir this one wrote: the journal and snapshot carry
    // no new keys (the new run details are never serialized there), and the new state lives
    // in new files only.
    let dir = tempfile::tempdir().unwrap();
    {
        let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
        local.publish(&[spec("a")]).await.unwrap();
        local.claim("a", at(60), ClaimIntent::Run).await.unwrap();
        local.run_ended("a", &ended(at(60), None, 0)).await.unwrap();
        let trigger = local.request_trigger("a", "op@host").unwrap();
        local.claim_manual("a", &trigger).await.unwrap();
    }
    let journal = std::fs::read_to_string(dir.path().join("journal.jsonl")).unwrap();
    for key in [
        "fire_id",
        "manual",
        "exit_code",
        "signal",
        "started_at",
        "release",
    ] {
        assert!(!journal.contains(key), "{key} in {journal}");
    }
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.contains(&"triggers.json".to_string()), "{names:?}");
    assert!(names.contains(&"history".to_string()), "{names:?}");
}

#[tokio::test]
async fn a_success_requests_its_chained_runs_once_and_a_manual_parent_s_in_its_end_s_write() {
    let dir = tempfile::tempdir().unwrap();
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    local.publish(&[spec("a"), spec("b")]).await.unwrap();
    // A scheduled parent: the request is made, once however often the end is written.
    let mut result = ended(at(60), None, 0);
    result.chained = vec!["b".into()];
    local.run_ended("a", &result).await.unwrap();
    local.run_ended("a", &result).await.unwrap();
    let child = format!("b@after-a@{}", at(60).timestamp());
    let triggers = local.leadership().borrow().triggers["b"].clone();
    assert_eq!(triggers.len(), 1);
    assert_eq!(
        (triggers[0].fire_id.as_str(), triggers[0].requested_at),
        (&*child, at(60))
    );
    assert_eq!(
        local.trigger_state(&child).unwrap().after.as_deref(),
        Some(&*format!("a@{}", at(60).timestamp()))
    );
    // A manual parent: its end and the request are one write of triggers.json, seen by the
    // next daemon.
    let trigger = local.request_trigger("a", "op@host").unwrap();
    local.claim_manual("a", &trigger).await.unwrap();
    let mut result = ended(trigger.requested_at, Some(&trigger.fire_id), 0);
    result.chained = vec!["b".into()];
    local.run_ended("a", &result).await.unwrap();
    drop(local);
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    let child = format!("b@after-{}", trigger.fire_id);
    assert_eq!(
        local.trigger_state(&child).unwrap().state,
        TriggerState::Pending
    );
    assert_eq!(
        local.trigger_state(&trigger.fire_id).unwrap().state,
        TriggerState::Ended
    );
    // A failure requests nothing.
    let mut failed = ended(at(120), None, 1);
    failed.chained = vec!["b".into()];
    local.run_ended("a", &failed).await.unwrap();
    let failed_child = format!("b@after-a@{}", at(120).timestamp());
    assert!(local.trigger_state(&failed_child).is_none());
}

fn tick_of(name: &str, m: i64) -> Trigger {
    Trigger {
        fire_id: backfill::fire_id(name, minute(m)),
        requested_at: minute(m),
    }
}

fn tick_ended(trigger: &Trigger, code: i32) -> RunResult {
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
        minute(0),
        minute(i64::from(total)),
        total,
        "ops@host",
        minute(100),
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
    local.run_ended("a", &tick_ended(&first, 0)).await.unwrap();
    let second = tick_of(&name, 1);
    assert_eq!(
        local.claim_manual("a", &second).await.unwrap(),
        ClaimOutcome::Claimed
    );
    local.run_ended("a", &tick_ended(&second, 4)).await.unwrap();
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

#[tokio::test]
async fn each_kind_keeps_its_file_in_the_format_it_had_and_reads_what_the_previous_release_wrote() {
    // Given a state dir whose triggers.json and backfills.json a previous release wrote.
    let dir = tempfile::tempdir().unwrap();
    let old_trigger = serde_json::json!({
        "format": 1, "next": 3,
        "triggers": {"a@manual-0000000002": {
            "format": 1, "task": "a", "requested_at": "2026-01-01T00:00:00Z",
            "by": "op@host", "state": "pending"}}
    });
    let old_backfill = serde_json::json!({
        "format": 1, "next": 5,
        "backfills": {"a@backfill-0000000004": serde_json::to_value(request("a", 2)).unwrap()}
    });
    std::fs::write(dir.path().join("triggers.json"), old_trigger.to_string()).unwrap();
    std::fs::write(dir.path().join("backfills.json"), old_backfill.to_string()).unwrap();
    // When this release opens it and adds a request of each kind.
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    local.publish(&[spec("a")]).await.unwrap();
    assert!(local.trigger_state("a@manual-0000000002").is_some());
    assert_eq!(local.backfills().len(), 1);
    let trigger = local.request_trigger("a", "op@host").unwrap();
    assert_eq!(trigger.fire_id, "a@manual-0000000003");
    let name = local.request_backfill(request("a", 2)).unwrap();
    assert_eq!(name, "a@backfill-0000000005");
    // Then each file has the keys it had, its kind's map only, with both requests.
    let read = |file: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.path().join(file)).unwrap()).unwrap()
    };
    let keys = |value: &serde_json::Value| -> Vec<String> {
        value.as_object().unwrap().keys().cloned().collect()
    };
    let triggers = read("triggers.json");
    assert_eq!(keys(&triggers), ["format", "next", "triggers"]);
    assert_eq!(
        (&triggers["format"], &triggers["next"]),
        (&1.into(), &4.into())
    );
    assert_eq!(keys(&triggers["triggers"]).len(), 2);
    let backfills = read("backfills.json");
    assert_eq!(keys(&backfills), ["backfills", "format", "next"]);
    assert_eq!(backfills["next"], 6);
    assert_eq!(
        keys(&backfills["backfills"]),
        ["a@backfill-0000000004", "a@backfill-0000000005"]
    );
}
