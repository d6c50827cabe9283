//! The local backend's queued tick (`overlap = "queue"`): kept in the journal and the
//! snapshot across restarts, started once, and never queued again by a replay.

use std::collections::HashMap;

use super::tests::{at, spec};
use super::*;

#[tokio::test]
async fn a_queued_tick_survives_a_restart_and_is_started_once() {
    let dir = tempfile::tempdir().unwrap();
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    local.publish(&[spec("a")]).await.unwrap();
    let claim = |tick, intent| local.claim("a", tick, intent);
    assert_eq!(
        claim(at(60), ClaimIntent::Run).await.unwrap(),
        ClaimOutcome::Claimed
    );
    assert_eq!(
        claim(at(120), ClaimIntent::Queue).await.unwrap(),
        ClaimOutcome::Claimed
    );
    assert_eq!(
        claim(at(180), ClaimIntent::Drop).await.unwrap(),
        ClaimOutcome::Claimed
    );
    assert_eq!(local.queued_tick("a").await.unwrap(), Some(at(120)));
    assert_eq!(local.last_claimed("a").await.unwrap(), Some(at(180)));
    drop(local);

    // Given a restart, the queued tick is still there and starts once.
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    local.publish(&[spec("a")]).await.unwrap();
    assert_eq!(local.queued_tick("a").await.unwrap(), Some(at(120)));
    let start = || local.claim("a", at(120), ClaimIntent::RunQueued);
    assert_eq!(start().await.unwrap(), ClaimOutcome::Claimed);
    assert_eq!(
        start().await.unwrap(),
        ClaimOutcome::AlreadyClaimed { record: at(180) }
    );
    assert_eq!(local.queued_tick("a").await.unwrap(), None);
    assert_eq!(local.last_claimed("a").await.unwrap(), Some(at(180)));
    drop(local);
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    assert_eq!(
        local.queued_tick("a").await.unwrap(),
        None,
        "started for good"
    );
}

#[test]
fn a_journal_replayed_over_a_snapshot_does_not_queue_a_started_tick_again() {
    let change = |claimed, run, queue, unqueue| Change {
        format: FORMAT_VERSION,
        task: "a".into(),
        claimed,
        result: None,
        ticks: Vec::new(),
        run,
        queue,
        unqueue,
        counted: false,
    };
    let journal = [
        change(Some(at(120)), false, Some(at(120)), None),
        change(None, true, None, Some(at(120))),
    ];
    let mut records = HashMap::new();
    for line in &journal {
        line.apply(&mut records);
    }
    let once = records["a"].clone();
    assert_eq!(once.queued, None);
    assert!(
        once.claimed_to_run,
        "the started tick is the record's: claimed to run"
    );
    // A crash after the snapshot and before the journal was emptied replays it again.
    for line in &journal {
        line.apply(&mut records);
    }
    assert_eq!(records["a"], once);
}
