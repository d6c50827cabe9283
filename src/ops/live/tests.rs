//! Applying changed znodes to a [`Live`] snapshot: created, changed and deleted records of
//! every kind `status` reads, each giving the status a full read of the same records gives.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::*;
use crate::coord::RunResult;
use crate::coord::records::{RunTrigger, TaskSetRecord};
use crate::ops::fixtures::{at, live_member, taskset};
use crate::ops::model::LiveMember;

fn paths() -> Paths {
    Paths {
        base: "/zkcron/prod".into(),
    }
}

fn member(id: &str, seed: u64) -> LiveMember {
    live_member(id, "1.0.0", seed, taskset("set", 3), BTreeMap::new())
}

fn entry(schedule: &str) -> TaskSetEntry {
    TaskSetEntry {
        digest: format!("{:016x}", schedule.len()),
        schedule: Some(schedule.into()),
        timezone: Some("UTC".into()),
        ..TaskSetEntry::default()
    }
}

/// Nodes a and b; tasks `backup` (every 5 minutes), `report` (hourly) and `sync` (every
/// minute), each leased by a.
fn cluster() -> Snapshot {
    let set = TaskSetRecord {
        format: 1,
        calendars: Default::default(),
        tasks: BTreeMap::from([
            ("backup".to_string(), entry("*/5 * * * *")),
            ("report".to_string(), entry("0 * * * *")),
            ("sync".to_string(), entry("* * * * *")),
        ]),
    };
    let lease = LeaseRecord {
        format: 1,
        node: "a".into(),
        session: "s".into(),
        since: at(9, 1, 0),
    };
    Snapshot {
        backend: "zookeeper".into(),
        cluster: Some("prod".into()),
        members: vec![member("a", 1), member("b", 2)],
        tasksets: BTreeMap::from([("set".to_string(), set)]),
        leases: ["backup", "report", "sync"]
            .into_iter()
            .map(|t| (t.to_string(), lease.clone()))
            .collect(),
        ..Snapshot::default()
    }
}

fn result(tick: DateTime<Utc>, success: bool) -> ResultRecord {
    ResultRecord {
        format: 1,
        result: RunResult {
            tick,
            node: "a".into(),
            exit: if success {
                "exit code 0"
            } else {
                "exit code 1"
            }
            .into(),
            success,
            attempts: 1,
            duration_ms: 1500,
            finished_at: tick + chrono::TimeDelta::milliseconds(1500),
            ..RunResult::default()
        },
    }
}

fn json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap()
}

/// What a full read of `snapshot` says at `now`, with each task's schedule as shown.
fn full_read(snapshot: &Snapshot, now: DateTime<Utc>) -> (Status, Schedules) {
    let schedules = model::task_entries(snapshot)
        .into_iter()
        .filter_map(|(name, e)| Some((name, super::shown_schedule(Some(&e))?)))
        .collect();
    (status(snapshot.clone(), now), schedules)
}

fn new_live(snapshot: Snapshot, now: DateTime<Utc>) -> Live {
    Live::new(snapshot, TriggerRuns::new(), now)
}

#[test]
fn a_fresh_live_snapshot_says_what_a_full_read_says() {
    let now = at(10, 0, 1);
    let mut live = new_live(cluster(), now);
    assert_eq!(live.status(now), full_read(&cluster(), now));
}

/// Created, changed and deleted records of each kind: the status is a full read's of the same
/// records, and the count of changes moves (a view made before is no longer current).
#[test]
fn created_changed_and_deleted_records_give_the_status_of_a_full_read() {
    let now = at(10, 0, 1);
    let mut expected = cluster();
    let mut live = new_live(cluster(), now);
    let base = "/zkcron/prod";
    let before = live.changes();

    // A result created, then changed (a failure after it).
    let ok = result(at(9, 55, 0), true);
    assert_eq!(
        live.apply(
            &paths(),
            &format!("{base}/tasks/backup/result"),
            Some(&json(&ok))
        ),
        Applied::Done
    );
    let failed = result(at(10, 0, 0), false);
    live.apply(
        &paths(),
        &format!("{base}/tasks/backup/result"),
        Some(&json(&failed)),
    );
    expected
        .results
        .insert("backup".into(), failed.result.clone());
    // A fire record ahead of the clock, and a pause with a reason.
    let record = FireRecord {
        tick: Some(at(11, 0, 0)),
        ..FireRecord::empty()
    };
    live.apply(
        &paths(),
        &format!("{base}/tasks/report"),
        Some(&json(&record)),
    );
    expected.fire_records.insert("report".into(), record);
    let pause = MarkRecord {
        format: 1,
        at: at(9, 59, 0),
        by: "ops@host".into(),
        reason: Some("maintenance".into()),
    };
    live.apply(
        &paths(),
        &format!("{base}/control/paused/sync"),
        Some(&json(&pause)),
    );
    expected.paused.insert("sync".into(), pause);
    // A lease deleted (the lease is vacant), a drain mark created (every ranking moves).
    live.apply(&paths(), &format!("{base}/leases/backup"), None);
    expected.leases.remove("backup");
    let drain = MarkRecord {
        format: 1,
        at: at(9, 58, 0),
        by: "ops@host".into(),
        reason: None,
    };
    live.apply(
        &paths(),
        &format!("{base}/control/drained/b"),
        Some(&json(&drain)),
    );
    expected.drained.insert("b".into(), drain);
    assert!(live.changes() > before);
    assert_eq!(live.status(now), full_read(&expected, now));

    // Deleted again: the pause, the result.
    live.apply(&paths(), &format!("{base}/control/paused/sync"), None);
    expected.paused.remove("sync");
    live.apply(&paths(), &format!("{base}/tasks/backup/result"), None);
    expected.results.remove("backup");
    assert_eq!(live.status(now), full_read(&expected, now));
}

/// A manual run's ended trigger is the task's newest run; a newer one replaces it, and once
/// both triggers are gone the task has none, as a full read says.
#[test]
fn ended_triggers_give_the_newest_manual_run_and_go_with_their_records() {
    let now = at(10, 0, 1);
    let mut expected = cluster();
    let mut live = new_live(cluster(), now);
    let run = |started: DateTime<Utc>| HistoryEntry {
        fire_id: format!("sync@manual-{}", started.timestamp()),
        tick: started,
        node: "b".into(),
        release: "1.0.0".into(),
        started_at: started,
        duration_ms: 10,
        exit_code: Some(0),
        signal: None,
        success: true,
        attempts: 1,
        trigger: RunTrigger::Manual,
        backfill: false,
        after: None,
        items: None,
        output_tail: None,
    };
    let trigger = |started: DateTime<Utc>, state: TriggerState| TriggerRecord {
        format: 1,
        task: "sync".into(),
        requested_at: started,
        by: "ops@host".into(),
        state,
        node: Some("b".into()),
        claimed_at: Some(started),
        result: Some(run(started)),
        reason: None,
        after: None,
    };
    let first = "/zkcron/prod/control/triggers/sync@manual-0000000001";
    let second = "/zkcron/prod/control/triggers/sync@manual-0000000002";
    live.apply(
        &paths(),
        second,
        Some(&json(&trigger(at(9, 59, 0), TriggerState::Running))),
    );
    assert_eq!(
        live.status(now),
        full_read(&expected, now),
        "a running trigger has no result yet"
    );
    live.apply(
        &paths(),
        first,
        Some(&json(&trigger(at(9, 50, 0), TriggerState::Ended))),
    );
    live.apply(
        &paths(),
        second,
        Some(&json(&trigger(at(9, 59, 0), TriggerState::Ended))),
    );
    expected
        .recent_runs
        .insert("sync".into(), run(at(9, 59, 0)));
    assert_eq!(live.status(now), full_read(&expected, now));
    live.apply(&paths(), second, None);
    expected
        .recent_runs
        .insert("sync".into(), run(at(9, 50, 0)));
    assert_eq!(live.status(now), full_read(&expected, now));
    live.apply(&paths(), first, None);
    expected.recent_runs.clear();
    assert_eq!(live.status(now), full_read(&expected, now));
}

/// Time alone moves next ticks: a line whose next tick has passed is worked out again, with no
/// change applied.
#[test]
fn a_line_whose_next_tick_passed_is_worked_out_again() {
    let mut live = new_live(cluster(), at(10, 0, 1));
    let changes = live.changes();
    for now in [
        at(10, 0, 59),
        at(10, 1, 0),
        at(10, 4, 30),
        at(10, 5, 1),
        at(11, 0, 0),
    ] {
        assert_eq!(live.status(now), full_read(&cluster(), now), "at {now}");
    }
    assert_eq!(live.changes(), changes, "time is no change of the records");
}

/// A member or a task set decides which tasks there are: it asks for a full read. What
/// `status` does not read (histories, epochs, runs, the clock, other clusters) is ignored.
#[test]
fn members_and_task_sets_ask_for_a_full_read_and_the_rest_is_ignored() {
    let now = at(10, 0, 1);
    let mut live = new_live(cluster(), now);
    assert_eq!(
        live.apply(&paths(), "/zkcron/prod/members/c", Some(b"{}")),
        Applied::ReadAll
    );
    assert_eq!(
        live.apply(&paths(), "/zkcron/prod/tasksets/abc-0", None),
        Applied::ReadAll
    );
    let changes = live.changes();
    for ignored in [
        "/zkcron/prod/tasks/sync/history",
        "/zkcron/prod/tasks/sync/epoch",
        "/zkcron/prod/tasks/sync/run-1773000000",
        "/zkcron/prod/clock",
        "/zkcron/other/tasks/sync",
    ] {
        assert!(!reads(&paths(), ignored), "{ignored}");
        assert_eq!(live.apply(&paths(), ignored, None), Applied::Done);
    }
    assert_eq!(live.changes(), changes);
    // A record of a task no live member defines is left out, as a full read leaves it out.
    live.apply(
        &paths(),
        "/zkcron/prod/tasks/gone",
        Some(&json(&FireRecord::empty())),
    );
    assert_eq!(live.status(now), full_read(&cluster(), now));
}

/// An unreadable record (a stranger's, a newer release's broken one) is left out, as a full
/// read leaves it out, and the rest stays.
#[test]
fn an_unreadable_record_is_left_out() {
    let now = at(10, 0, 1);
    let mut expected = cluster();
    let mut live = new_live(cluster(), now);
    live.apply(&paths(), "/zkcron/prod/leases/sync", Some(b"not json"));
    expected.leases.remove("sync");
    assert_eq!(live.status(now), full_read(&expected, now));
}
