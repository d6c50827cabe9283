use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::json;

use super::explain::explain;
use super::live::status;
use super::model::{self, exit_parts};
use super::render;
use crate::coord::RunResult;
use crate::coord::records::{FireRecord, HistoryEntry, MarkRecord, RunTrigger, TaskSetEntry};

use super::fixtures::{at, cluster, entry, lease, mark};

/// The dashboard's overview asked `task_entry` per task, which ranks every member again: on
/// 10,000 tasks it took longer than 30 s. `task_entries` ranks them once and says the same.
#[test]
fn the_overview_reads_every_tasks_definition_in_one_pass() {
    let snapshot = cluster();
    let all = model::task_entries(&snapshot);
    let names: Vec<&str> = all.keys().map(String::as_str).collect();
    assert_eq!(names, ["backup", "new", "report"]);
    for (name, entry) in &all {
        assert_eq!(
            model::task_entry(&snapshot, name).as_ref(),
            Some(entry),
            "{name}"
        );
    }
    // The leader c's definition of report, not a's or b's.
    assert_eq!(all["report"].digest, "dddddddddddddddd");
}

#[test]
fn status_lists_nodes_by_id_with_release_labels_drain_leases_and_session_age() {
    let status = crate::ops::live::status(cluster(), at(10, 0, 0));
    let ids: Vec<&str> = status.nodes.iter().map(|n| n.id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
    let c = &status.nodes[2];
    assert_eq!(c.release, "1.1.0");
    assert_eq!(c.labels, BTreeMap::from([("zone".into(), "c".into())]));
    assert!(c.drained, "the marker counts before the node re-registers");
    assert_eq!(c.tasks_led, 2);
    assert_eq!(c.session_age_s, 3600);
    assert!(!status.nodes[0].drained);
    assert_eq!(status.nodes[0].tasks_led, 0);
    assert_eq!(status.backend, "zookeeper");
    assert_eq!(status.cluster.as_deref(), Some("prod"));
}

#[test]
fn status_gives_each_task_its_leader_next_tick_last_run_drift_and_problem() {
    let status = crate::ops::live::status(cluster(), at(10, 0, 1));
    let names: Vec<&str> = status.tasks.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["backup", "new", "report"]);

    let backup = &status.tasks[0];
    assert_eq!(backup.leader.as_deref(), Some("c"));
    assert!(!backup.paused);
    assert_eq!(backup.next, Some(at(10, 5, 0)));
    let last = backup.last.as_ref().unwrap();
    assert_eq!(last.fire_id, format!("backup@{}", at(9, 55, 0).timestamp()));
    assert_eq!(last.node, "c");
    assert_eq!((last.exit_code, last.signal), (Some(3), None));
    assert!(!last.success);
    assert_eq!(last.duration_ms, 1500);
    assert_eq!(last.finished_at, at(9, 55, 2));
    assert!(backup.drift.is_empty());
    assert_eq!(backup.problem, None);

    let new = &status.tasks[1];
    assert_eq!(new.leader, None);
    assert_eq!(new.next, None, "a task no node may run has no next tick");
    assert_eq!(new.last, None);
    assert_eq!(
        new.problem.as_deref(),
        Some(
            "no live node may run it: version_req >=1.1 matches none of a (1.0.0), b (1.0.0); c is drained"
        )
    );

    let report = &status.tasks[2];
    assert_eq!(report.drift.len(), 2);
    assert_eq!(report.drift[0].digest, "bbbbbbbbbbbbbbbb");
    assert_eq!(report.drift[0].nodes, ["a", "b"]);
    assert_eq!(report.drift[1].digest, "dddddddddddddddd");
    assert_eq!(report.drift[1].nodes, ["c"]);
}

/// `status` works out a schedule's next tick once for every task that shares it: a task whose
/// fire record is ahead of the clock still gets the first tick after its own record, and every
/// line says what the task alone says.
#[test]
fn tasks_sharing_a_schedule_each_get_the_next_tick_after_their_own_fire_record() {
    let mut snapshot = cluster();
    let mut ahead = FireRecord::empty();
    ahead.tick = Some(at(10, 12, 0));
    snapshot.fire_records.insert("backup".into(), ahead);
    let mut behind = FireRecord::empty();
    behind.tick = Some(at(9, 50, 0));
    snapshot.fire_records.insert("report".into(), behind);
    let now = at(10, 0, 1);
    let status = crate::ops::live::status(snapshot.clone(), now);
    let next: Vec<Option<DateTime<Utc>>> = status.tasks.iter().map(|t| t.next).collect();
    assert_eq!(next, [Some(at(10, 15, 0)), None, Some(at(10, 5, 0))]);
    for line in &status.tasks {
        let alone = crate::ops::live::task_status(&snapshot, &line.name, now).unwrap();
        assert_eq!(&alone, line, "{}", line.name);
    }
}

/// A task counts once for the node that holds its own lease and a unit of it (a definition that
/// changed to `run_on = "every_node"` while its old lease is still held), once for each other
/// node holding a unit.
#[test]
fn a_task_counts_once_per_node_leading_it_whether_by_its_lease_or_a_unit() {
    let mut snapshot = cluster();
    snapshot
        .leases
        .insert("backup@c".into(), lease("c", at(9, 1, 0)));
    snapshot
        .leases
        .insert("backup@a".into(), lease("a", at(9, 1, 0)));
    snapshot
        .leases
        .insert("report@a".into(), lease("a", at(9, 1, 0)));
    let status = crate::ops::live::status(snapshot.clone(), at(10, 0, 0));
    let led: Vec<usize> = status.nodes.iter().map(|n| n.tasks_led).collect();
    assert_eq!(led, [2, 0, 2]);
}

/// A task's units are the names `<task>@...`, not those of tasks whose names begin with its own.
#[test]
fn the_units_of_a_task_are_its_own_not_those_of_tasks_named_like_it() {
    let mut snapshot = cluster();
    for (name, node) in [("backup-2@a", "a"), ("backup@b", "b"), ("backupx@a", "a")] {
        snapshot
            .leases
            .insert(name.into(), lease(node, at(9, 1, 0)));
    }
    assert_eq!(model::unit_holders(&snapshot, "backup"), ["b"]);
    assert_eq!(
        model::held_items(&snapshot, "backup"),
        BTreeMap::from([("b".to_string(), 1)])
    );
    assert!(model::unit_holders(&snapshot, "back").is_empty());
}

#[test]
fn a_paused_task_has_no_next_tick_and_says_paused() {
    let mut snapshot = cluster();
    snapshot.paused.insert("backup".into(), mark(at(9, 59, 0)));
    let status = crate::ops::live::status(snapshot.clone(), at(10, 0, 1));
    let backup = &status.tasks[0];
    assert!(backup.paused);
    assert_eq!(backup.next, None);
    assert_eq!(backup.problem.as_deref(), Some("paused"));
}

#[test]
fn a_pause_with_a_reason_shows_who_when_and_why_in_status_explain_and_json() {
    let mut snapshot = cluster();
    let mark = MarkRecord {
        reason: Some("disk full on db1".into()),
        ..mark(at(9, 59, 0))
    };
    snapshot.paused.insert("backup".into(), mark);
    let status = crate::ops::live::status(snapshot.clone(), at(10, 0, 1));
    let backup = &status.tasks[0];
    assert_eq!(backup.problem.as_deref(), Some("paused: disk full on db1"));
    let json = serde_json::to_value(backup).unwrap();
    assert_eq!(
        json["pause"],
        json!({"at": "2026-03-08T09:59:00Z", "by": "ops@host", "reason": "disk full on db1"})
    );
    assert!(
        render::status(&status, at(10, 0, 1)).contains("paused: disk full on db1"),
        "the status table's notes name the reason"
    );
    let explained = explain(&snapshot, "backup", at(10, 0, 1)).unwrap();
    let text = render::explain(&explained, at(10, 0, 1));
    assert!(
        text.contains("paused:   since 2026-03-08T09:59:00Z by ops@host")
            && text.contains("  reason:   disk full on db1\n"),
        "{text}"
    );
    let json = serde_json::to_value(&explained).unwrap();
    assert_eq!(json["paused"]["reason"], json!("disk full on db1"));
    // Not paused: no `pause` key at all.
    let status = crate::ops::live::status(cluster(), at(10, 0, 1));
    let json = serde_json::to_value(&status.tasks[0]).unwrap();
    assert!(json.get("pause").is_none(), "{json}");
}

#[test]
fn a_queued_tick_shows_in_status_and_its_json_and_is_no_problem() {
    let mut snapshot = cluster();
    let mut record = FireRecord::empty();
    record.tick = Some(at(10, 0, 0));
    record.queued = Some(at(10, 0, 0));
    snapshot.fire_records.insert("backup".into(), record);
    let result = snapshot.results.get_mut("backup").unwrap();
    (result.exit, result.success) = ("exit code 0".into(), true);
    let status = crate::ops::live::status(snapshot.clone(), at(10, 0, 1));
    let backup = &status.tasks[0];
    assert_eq!(backup.queued, Some(at(10, 0, 0)));
    assert_eq!(backup.problem, None);
    let json = serde_json::to_value(backup).unwrap();
    assert_eq!(json["queued"], json!("2026-03-08T10:00:00Z"));
    let text = render::status(&status, at(10, 0, 1));
    assert!(
        text.contains("queued: 2026-03-08T10:00:00Z waits for the live run"),
        "{text}"
    );
    assert!(
        text.contains("3 task(s), 1 with a problem"),
        "only the other task's problem counts: {text}"
    );
}

/// Regression: `status` said "0 with a problem" beside a task whose every run failed; its
/// problems were only what keeps a task from firing.
#[test]
fn a_task_whose_last_run_failed_counts_as_a_problem_though_it_fires() {
    let mut snapshot = cluster();
    snapshot.drained.clear();
    let report = snapshot.results["backup"].clone();
    snapshot.results.insert("report".into(), report);
    let ok = snapshot.results.get_mut("report").unwrap();
    (ok.exit, ok.success) = ("exit code 0".into(), true);
    let status = crate::ops::live::status(snapshot.clone(), at(10, 0, 1));
    let backup = status.tasks.iter().find(|t| t.name == "backup").unwrap();
    assert_eq!(backup.problem, None, "it fires: no reason it does not");
    let text = render::status(&status, at(10, 0, 1));
    let row = text.lines().find(|l| l.starts_with("backup")).unwrap();
    assert!(
        row.contains("exit 3") && row.ends_with("last run failed"),
        "{text}"
    );
    let report = text.lines().find(|l| l.starts_with("report")).unwrap();
    assert!(!report.contains("failed"), "{text}");
    assert!(text.contains("3 task(s), 2 with a problem"), "{text}");
}

#[test]
fn a_vacant_lease_and_a_fire_record_ahead_are_problems() {
    let mut snapshot = cluster();
    snapshot.drained.clear();
    snapshot.leases.remove("backup");
    let mut record = FireRecord::empty();
    record.tick = Some(at(12, 0, 0));
    snapshot.fire_records.insert("report".into(), record);
    let status = crate::ops::live::status(snapshot.clone(), at(10, 0, 1));
    assert_eq!(
        status.tasks[0].problem.as_deref(),
        Some("no leader: lease vacant")
    );
    let report = &status.tasks[2];
    assert_eq!(
        report.problem.as_deref(),
        Some(
            "fire record ahead of the cluster clock: 2026-03-08T12:00:00Z is 1h 59m 59s ahead, \
             so no tick up to it fires; zkcron reset report moves it back"
        )
    );
    assert_eq!(
        report.next,
        Some(at(12, 5, 0)),
        "the ticks up to the record count as done"
    );
}

#[test]
fn a_task_before_or_after_its_window_says_starts_at_or_ended_at_and_is_no_problem() {
    // Given `backup` whose window ended at 09:00 and `report` whose window opens at 11:00,
    let mut snapshot = cluster();
    snapshot.drained.clear();
    for set in snapshot.tasksets.values_mut() {
        set.tasks.get_mut("backup").unwrap().active_until = Some(at(9, 0, 0));
        set.tasks.get_mut("report").unwrap().active_from = Some(at(11, 0, 0));
    }
    let result = snapshot.results.get_mut("backup").unwrap();
    (result.exit, result.success) = ("exit code 0".into(), true);
    let now = at(10, 0, 1);
    // when status is read at 10:00,
    let status = crate::ops::live::status(snapshot.clone(), now);
    // then the ended one has no next tick and says when it ended, the other waits for its start,
    let backup = &status.tasks[0];
    assert_eq!(
        (backup.ended_at, backup.next, backup.problem.as_deref()),
        (Some(at(9, 0, 0)), None, None)
    );
    let report = &status.tasks[2];
    assert_eq!(
        (report.starts_at, report.next, report.problem.as_deref()),
        (Some(at(11, 0, 0)), Some(at(11, 0, 0)), None)
    );
    // and the table and explain say so in words.
    let human = render::status(&status, now);
    // Only `new` (no leader) has a problem.
    assert!(human.contains(", 1 with a problem."), "{human}");
    assert!(human.contains("ended at 2026-03-08T09:00:00Z"), "{human}");
    assert!(human.contains("starts at 2026-03-08T11:00:00Z"), "{human}");
    let explained = render::explain(&explain(&snapshot, "backup", now).unwrap(), now);
    assert!(
        explained.contains("  window:   ended at 2026-03-08T09:00:00Z\n"),
        "{explained}"
    );
}

#[test]
fn a_list_or_an_interval_in_the_task_set_gives_the_next_tick() {
    let mut snapshot = cluster();
    for set in snapshot.tasksets.values_mut() {
        let backup = set.tasks.get_mut("backup").unwrap();
        backup.schedule = None;
        backup.schedules = Some(vec!["@every 7m".into(), "0 10 * * *".into()]);
        set.tasks.get_mut("report").unwrap().schedule = Some("@every 1h/20m".into());
    }
    let status = crate::ops::live::status(snapshot.clone(), at(10, 0, 1));
    // 10:00 is past; the next multiple of 7 minutes since the epoch is 10:01 (1772964060).
    assert_eq!(status.tasks[0].next, Some(at(10, 1, 0)));
    assert_eq!(status.tasks[2].next, Some(at(10, 20, 0)));
}

#[test]
fn the_last_run_is_the_newer_of_the_result_and_a_manual_run() {
    let mut snapshot = cluster();
    let manual = HistoryEntry {
        fire_id: "backup@manual-0000000007".into(),
        tick: at(9, 57, 0),
        node: "a".into(),
        release: "1.0.0".into(),
        started_at: at(9, 57, 0),
        duration_ms: 250,
        exit_code: None,
        signal: Some(9),
        success: false,
        attempts: 1,
        trigger: RunTrigger::Manual,
        backfill: false,
        after: None,
        items: None,
        output_tail: None,
    };
    snapshot.recent_runs.insert("backup".into(), manual);
    let last = status(snapshot.clone(), at(10, 0, 0)).tasks[0]
        .last
        .clone()
        .unwrap();
    assert_eq!(last.fire_id, "backup@manual-0000000007");
    assert_eq!((last.exit_code, last.signal), (None, Some(9)));
    assert_eq!(
        last.finished_at,
        at(9, 57, 0) + chrono::TimeDelta::milliseconds(250)
    );
}

#[test]
fn exit_words_give_the_code_or_the_signal() {
    assert_eq!(exit_parts("exit code 0"), (Some(0), None));
    assert_eq!(exit_parts("killed by signal 9 (SIGKILL)"), (None, Some(9)));
    assert_eq!(exit_parts("timed out"), (None, None));
}

#[test]
fn status_json_has_exactly_the_documented_keys() {
    let value = serde_json::to_value(status(cluster(), at(10, 0, 1))).unwrap();
    let keys = |v: &serde_json::Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&value), ["backend", "cluster", "nodes", "tasks"]);
    assert_eq!(
        keys(&value["nodes"][0]),
        [
            "drained",
            "id",
            "labels",
            "release",
            "session_age_s",
            "tasks_led"
        ]
    );
    assert_eq!(
        keys(&value["tasks"][0]),
        [
            "drift", "last", "leader", "name", "next", "paused", "problem"
        ]
    );
    assert_eq!(
        keys(&value["tasks"][0]["last"]),
        [
            "duration_ms",
            "exit_code",
            "finished_at",
            "fire_id",
            "node",
            "signal",
            "success"
        ]
    );
    assert_eq!(value["tasks"][0]["next"], json!("2026-03-08T10:05:00Z"));
    assert_eq!(value["tasks"][1]["last"], json!(null));
    assert_eq!(
        value["tasks"][2]["drift"][1],
        json!({"digest": "dddddddddddddddd", "nodes": ["c"]})
    );
}

#[test]
fn explain_ranks_eligible_nodes_as_the_nodes_do_and_says_why_others_are_not() {
    let mut snapshot = cluster();
    snapshot.drained.clear();
    let explained = explain(&snapshot, "backup", at(10, 0, 0)).unwrap();
    let ranked: Vec<(Option<usize>, &str)> = explained
        .candidates
        .iter()
        .map(|c| (c.rank, c.node.as_str()))
        .collect();
    // The newest release first, then a and b by score.
    let (first, second) =
        if crate::coord::rank::score(1, "backup") > crate::coord::rank::score(2, "backup") {
            ("a", "b")
        } else {
            ("b", "a")
        };
    assert_eq!(
        ranked,
        [(Some(1), "c"), (Some(2), first), (Some(3), second)]
    );
    assert_eq!(
        explained.candidates[0].score,
        format!("{:016x}", crate::coord::rank::score(3, "backup"))
    );
    let lease = explained.lease.as_ref().unwrap();
    assert_eq!((lease.node.as_str(), lease.held_s), ("c", 59 * 60));
    assert!(lease.designated);

    let new = explain(&cluster(), "new", at(10, 0, 0)).unwrap();
    let reasons: Vec<(&str, &str)> = new
        .candidates
        .iter()
        .map(|c| (c.node.as_str(), c.reason.as_str()))
        .collect();
    assert!(
        new.candidates
            .iter()
            .all(|c| !c.eligible && c.rank.is_none())
    );
    assert!(reasons.contains(&("c", "drained")));
    assert!(reasons.contains(&("a", "release 1.0.0 does not match version_req >=1.1")));
    assert!(explain(&cluster(), "nope", at(10, 0, 0)).is_none());
}

#[test]
fn labels_a_task_requires_make_the_other_nodes_ineligible() {
    let mut snapshot = cluster();
    for set in snapshot.tasksets.values_mut() {
        set.tasks.get_mut("backup").unwrap().require_labels =
            BTreeMap::from([("zone".to_string(), "a".to_string())]);
    }
    let b = snapshot.members[0].record.clone();
    assert_eq!(
        model::eligibility(&snapshot, &b, "backup"),
        Err("labels (zone=b) lack require_labels zone=a".to_string())
    );
    snapshot.members.retain(|m| m.record.id == "b");
    assert_eq!(
        model::no_one_may_run(&snapshot, "backup").as_deref(),
        Some("no live node may run it: require_labels zone=a matches none of b (zone=b)")
    );
}

#[test]
fn a_member_whose_release_is_no_version_is_ranked_for_nothing_as_on_the_nodes() {
    // Regression: status ranked such a member as release 0.0.0, so a task only it defines
    // looked runnable, while every node ignores the member and nobody runs the task.
    let mut snapshot = cluster();
    snapshot.drained.clear();
    snapshot.members[2].record.release = "1.1".into();
    let two = snapshot.tasksets.get_mut("two").unwrap();
    two.tasks
        .insert("solo".into(), entry("eeeeeeeeeeeeeeee", None));
    let why = "release \"1.1\" is not a semantic version: ranked for nothing";

    let c = snapshot.members[2].record.clone();
    assert_eq!(model::eligibility(&snapshot, &c, "backup"), Err(why.into()));
    let solo = format!("no live node may run it: c's {why}");
    assert_eq!(model::no_one_may_run(&snapshot, "solo"), Some(solo.clone()));
    let status = crate::ops::live::status(snapshot.clone(), at(10, 0, 0));
    let node = status.nodes.iter().find(|n| n.id == "c").unwrap();
    assert_eq!(node.release, "1.1", "listed as written");
    let task = status.tasks.iter().find(|t| t.name == "solo").unwrap();
    assert!(task.problem.as_deref().unwrap().contains(&solo), "{task:?}");
    assert!(task.next.is_none());
    let report = status.tasks.iter().find(|t| t.name == "report").unwrap();
    assert_eq!(report.drift.len(), 2, "c still holds its own definition");

    let explained = explain(&snapshot, "backup", at(10, 0, 0)).unwrap();
    let ranked: Vec<(Option<usize>, &str, &str)> = explained
        .candidates
        .iter()
        .map(|c| (c.rank, c.node.as_str(), c.reason.as_str()))
        .collect();
    let (first, second) =
        if crate::coord::rank::score(1, "backup") > crate::coord::rank::score(2, "backup") {
            ("a", "b")
        } else {
            ("b", "a")
        };
    assert_eq!(
        ranked,
        [
            (Some(1), first, "eligible"),
            (Some(2), second, "eligible"),
            (None, "c", why)
        ]
    );
    assert_eq!(explained.candidates[2].release, "1.1");
    assert!(explained.not_defining.is_empty());
}

#[test]
fn tables_align_their_columns() {
    let text = render::table(&[
        vec!["A".into(), "BB".into(), "C".into()],
        vec!["long".into(), "x".into(), "last column".into()],
    ]);
    assert_eq!(text, "A     BB  C\nlong  x   last column\n");
    let human = render::status(&status(cluster(), at(10, 0, 1)), at(10, 0, 1));
    assert!(human.starts_with("cluster prod (zookeeper), at 2026-03-08T10:00:01Z\n"));
    assert!(
        human.contains("3 node(s), 3 task(s), 2 with a problem."),
        "{human}"
    );
}

#[test]
fn the_socket_protocol_is_one_json_object_per_line_tagged_by_op() {
    use super::local::{Reply, Request};
    let cases = [
        (Request::Status, r#"{"op":"status"}"#),
        (
            Request::History {
                task: "t".into(),
                n: 5,
            },
            r#"{"op":"history","task":"t","n":5}"#,
        ),
        (
            Request::Trigger {
                task: "t".into(),
                by: "u@h".into(),
            },
            r#"{"op":"trigger","task":"t","by":"u@h"}"#,
        ),
        (
            Request::TriggerState {
                fire_id: "t@manual-0000000001".into(),
            },
            r#"{"op":"trigger_state","fire_id":"t@manual-0000000001"}"#,
        ),
        (
            Request::Pause {
                task: "t".into(),
                by: "u@h".into(),
                reason: None,
            },
            r#"{"op":"pause","task":"t","by":"u@h"}"#,
        ),
        (
            Request::Pause {
                task: "t".into(),
                by: "u@h".into(),
                reason: Some("disk full".into()),
            },
            r#"{"op":"pause","task":"t","by":"u@h","reason":"disk full"}"#,
        ),
        (
            Request::Resume {
                task: "t".into(),
                by: "u@h".into(),
            },
            r#"{"op":"resume","task":"t","by":"u@h"}"#,
        ),
    ];
    for (request, json) in cases {
        assert_eq!(serde_json::to_string(&request).unwrap(), json);
        assert_eq!(serde_json::from_str::<Request>(json).unwrap(), request);
    }
    assert_eq!(
        serde_json::to_string(&Reply::error("no")).unwrap(),
        r#"{"ok":false,"error":"no"}"#
    );
}

/// `zkcron status` against 100,000 tasks failed with "Resource temporarily unavailable (os error
/// 11)" (the read timeout's EAGAIN): a daemon that does not answer in time is named as such.
#[test]
fn a_daemon_that_does_not_answer_in_time_is_reported_as_a_timeout_not_eagain() {
    use super::local::{Request, ask_within, socket_path};
    let dir = tempfile::tempdir().unwrap();
    // A socket that accepts and never answers, as a daemon busy with a long request.
    let listener = std::os::unix::net::UnixListener::bind(socket_path(dir.path())).unwrap();
    let holder = std::thread::spawn(move || listener.accept().map(|(stream, _)| stream));
    let error = ask_within(
        dir.path(),
        &Request::Status,
        std::time::Duration::from_millis(200),
    )
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("did not answer within 0.2s"),
        "unexpected message: {error}"
    );
    assert!(!error.contains("temporarily unavailable"), "{error}");
    drop(holder.join().unwrap());
}

#[test]
fn an_every_node_task_shows_the_nodes_holding_its_units_and_the_newest_units_run() {
    let mut snapshot = cluster();
    for set in snapshot.tasksets.values_mut() {
        let each = TaskSetEntry {
            run_on: Some("every_node".into()),
            ..entry("eeeeeeeeeeeeeeee", None)
        };
        set.tasks.insert("each".into(), each);
    }
    snapshot
        .leases
        .insert("each@a".into(), lease("a", at(9, 1, 0)));
    snapshot
        .leases
        .insert("each@c".into(), lease("c", at(9, 1, 0)));
    for (unit, node, second) in [("each@a", "a", 1), ("each@c", "c", 3)] {
        let result = RunResult {
            tick: at(9, 59, 0),
            node: node.into(),
            exit: "exit code 0".into(),
            success: true,
            attempts: 1,
            duration_ms: 10,
            finished_at: at(9, 59, second),
            ..RunResult::default()
        };
        snapshot.results.insert(unit.into(), result);
    }
    let status = crate::ops::live::status(snapshot.clone(), at(10, 0, 1));
    let each = status.tasks.iter().find(|t| t.name == "each").unwrap();
    assert_eq!(each.every_node, ["a", "c"]);
    assert_eq!(each.leader, None);
    assert_eq!(each.problem, None, "its units are held: no vacant lease");
    let last = each.last.as_ref().unwrap();
    assert_eq!(last.fire_id, format!("each@{}", at(9, 59, 0).timestamp()));
    assert_eq!(last.node, "c");
    let nodes: Vec<(&str, usize)> = status
        .nodes
        .iter()
        .map(|n| (n.id.as_str(), n.tasks_led))
        .collect();
    assert_eq!(
        nodes,
        [("a", 1), ("b", 0), ("c", 3)],
        "a unit counts as led"
    );
    let table = render::status(&status, at(10, 0, 1));
    let line = table.lines().find(|l| l.starts_with("each")).unwrap();
    assert!(line.contains("(every node)"), "{line}");
    assert!(line.contains("runs on a, c"), "{line}");
    let json = serde_json::to_value(each).unwrap();
    assert_eq!(json["every_node"], json!(["a", "c"]));
    let explained = explain(&snapshot, "each", at(10, 0, 1)).unwrap();
    let text = render::explain(&explained, at(10, 0, 1));
    assert!(
        text.contains("units:    held by a, c: the task runs on every node, each node every tick"),
        "{text}"
    );
    // Without units held, the task is vacant like a task's lease.
    snapshot.leases.retain(|name, _| !name.starts_with("each@"));
    let status = crate::ops::live::status(snapshot.clone(), at(10, 0, 1));
    let each = status.tasks.iter().find(|t| t.name == "each").unwrap();
    assert!(each.every_node.is_empty());
    assert_eq!(each.problem.as_deref(), Some("no leader: lease vacant"));
}
