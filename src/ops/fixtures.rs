//! The records the tests of `ops` read: instants, members, task sets, marks, and a small
//! cluster ([`cluster`]) that the status, explain and link tests share.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeZone, Utc};

use super::model::{LiveMember, Snapshot};
use crate::coord::RunResult;
use crate::coord::records::{
    LeaseRecord, MarkRecord, MemberRecord, TaskSetEntry, TaskSetRecord, TaskSetRef,
};

pub(super) fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 8, h, m, s).unwrap()
}

pub(super) fn entry(digest: &str, version_req: Option<&str>) -> TaskSetEntry {
    TaskSetEntry {
        digest: digest.into(),
        version_req: version_req.map(str::to_string),
        require_labels: BTreeMap::new(),
        schedule: Some("*/5 * * * *".into()),
        timezone: Some("UTC".into()),
        ..Default::default()
    }
}

/// Member `id` of `release` with `seed`, defining `taskset`, with `labels`, registered at 9:00.
pub(super) fn live_member(
    id: &str,
    release: &str,
    seed: u64,
    taskset: TaskSetRef,
    labels: BTreeMap<String, String>,
) -> LiveMember {
    LiveMember {
        record: MemberRecord {
            format: 1,
            id: id.into(),
            release: release.into(),
            seed: format!("{seed:016x}"),
            host: "h".into(),
            pid: 1,
            http: None,
            started_at: at(9, 0, 0),
            labels,
            taskset,
            leads: true,
            drained: false,
        },
        registered_at: at(9, 0, 0),
    }
}

/// The task set `digest`, one chunk of `count` tasks.
pub(super) fn taskset(digest: &str, count: usize) -> TaskSetRef {
    TaskSetRef {
        digest: digest.into(),
        chunks: 1,
        count,
    }
}

fn member(id: &str, release: &str, set: &str, seed: u64) -> LiveMember {
    let labels = BTreeMap::from([("zone".to_string(), id.to_string())]);
    live_member(id, release, seed, taskset(set, 2), labels)
}

pub(super) fn mark(at: DateTime<Utc>) -> MarkRecord {
    MarkRecord {
        format: 1,
        at,
        by: "ops@host".into(),
        reason: None,
    }
}

pub(super) fn lease(node: &str, since: DateTime<Utc>) -> LeaseRecord {
    LeaseRecord {
        format: 1,
        node: node.into(),
        session: "s".into(),
        since,
    }
}

/// Nodes a, b (1.0.0, set "one") and c (1.1.0, set "two"); tasks `backup` (defined alike),
/// `report` (c defines it differently) and `new` (only 1.1 may run it, c is drained).
pub(super) fn cluster() -> Snapshot {
    let one = TaskSetRecord {
        format: 1,
        calendars: Default::default(),
        tasks: BTreeMap::from([
            ("backup".to_string(), entry("aaaaaaaaaaaaaaaa", None)),
            ("report".to_string(), entry("bbbbbbbbbbbbbbbb", None)),
            ("new".to_string(), entry("cccccccccccccccc", Some(">=1.1"))),
        ]),
    };
    let mut two = one.clone();
    two.tasks
        .insert("report".into(), entry("dddddddddddddddd", None));
    Snapshot {
        backend: "zookeeper".into(),
        cluster: Some("prod".into()),
        members: vec![
            member("b", "1.0.0", "one", 2),
            member("a", "1.0.0", "one", 1),
            member("c", "1.1.0", "two", 3),
        ],
        tasksets: BTreeMap::from([("one".to_string(), one), ("two".to_string(), two)]),
        leases: BTreeMap::from([
            ("backup".to_string(), lease("c", at(9, 1, 0))),
            ("report".to_string(), lease("c", at(9, 2, 0))),
        ]),
        fire_records: BTreeMap::new(),
        backfills: BTreeMap::new(),
        results: BTreeMap::from([(
            "backup".to_string(),
            RunResult {
                tick: at(9, 55, 0),
                node: "c".into(),
                exit: "exit code 3".into(),
                success: false,
                attempts: 1,
                duration_ms: 1500,
                finished_at: at(9, 55, 2),
                ..RunResult::default()
            },
        )]),
        recent_runs: BTreeMap::new(),
        paused: BTreeMap::new(),
        drained: BTreeMap::from([("c".to_string(), mark(at(9, 30, 0)))]),
    }
}
