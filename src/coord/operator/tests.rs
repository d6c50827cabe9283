use super::*;
use crate::coord::records::FORMAT_VERSION;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn paths() -> Paths {
    Paths {
        base: "/zkcron/c".into(),
    }
}

fn mark(by: &str) -> MarkRecord {
    MarkRecord {
        format: FORMAT_VERSION,
        at: utc("2026-03-01T10:00:00Z"),
        by: by.into(),
        reason: None,
    }
}

/// A record claimed by node n1 at `tick`, with `queued` waiting behind its run.
fn record(tick: &str, queued: Option<&str>) -> FireRecord {
    FireRecord {
        tick: Some(utc(tick)),
        node: "n1".into(),
        session: "5".into(),
        run: true,
        reruns: 1,
        claimed_at: Some(utc(tick)),
        queued: queued.map(utc),
        ..FireRecord::empty()
    }
}

fn read<T>(value: T, version: i32) -> Versioned<T> {
    Versioned { value, version }
}

/// The record of `name` at `tick` without a queued tick, read at `version`.
fn record_named(name: &str, tick: &str, version: i32) -> (String, Versioned<FireRecord>) {
    (name.to_string(), read(record(tick, None), version))
}

#[test]
fn a_reason_on_one_line_is_kept_trimmed() {
    assert_eq!(check_reason("  disk full \n"), Ok("disk full".to_string()));
}

#[test]
fn a_reason_on_two_lines_an_empty_one_and_a_long_one_are_refused_saying_what_to_change() {
    let two_lines = check_reason("x\ny").unwrap_err();
    assert!(two_lines.contains("write it on one line"), "{two_lines}");
    assert!(check_reason("a\rb").is_err());
    assert!(check_reason("  ").unwrap_err().contains("empty"));
    let long = "x".repeat(MAX_REASON_BYTES + 1);
    let error = check_reason(&long).unwrap_err();
    assert!(
        error.contains("501 bytes") && error.contains("shorten"),
        "{error}"
    );
    assert!(check_reason(&"x".repeat(MAX_REASON_BYTES)).is_ok());
}

#[test]
fn pausing_an_unpaused_task_creates_its_parents_then_the_mark() {
    // Given no mark; when the task is paused; then the dirs come first, each on its own.
    let path = paths().paused("t");
    let Marking::Create { parents, create } =
        super::mark(&path, None, &mark("ops@h"), NodeAcl::CreatorAll)
    else {
        panic!("a mark to create");
    };
    let dirs: Vec<&str> = parents
        .iter()
        .map(|op| match op {
            ZkOp::Create { path, data, .. } if data.is_empty() => path.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        dirs,
        [
            "/zkcron",
            "/zkcron/c",
            "/zkcron/c/control",
            "/zkcron/c/control/paused"
        ]
    );
    let ZkOp::Create {
        path,
        data,
        mode,
        acl,
    } = create
    else {
        panic!("a create");
    };
    assert_eq!(path, "/zkcron/c/control/paused/t");
    assert_eq!((mode, acl), (CreateMode::Persistent, NodeAcl::CreatorAll));
    let written: MarkRecord = serde_json::from_slice(&data).unwrap();
    assert_eq!(written, mark("ops@h"));
}

#[test]
fn pausing_or_draining_again_keeps_the_first_mark_and_writes_nothing() {
    let first = mark("first@h");
    for path in [paths().paused("t"), paths().drain("n1")] {
        let again = super::mark(&path, Some(&first), &mark("b@h"), NodeAcl::Open);
        assert_eq!(again, Marking::Already(first.clone()));
    }
}

#[test]
fn undraining_deletes_the_mark_at_the_version_read_and_nothing_without_one() {
    let op = undrain(&paths(), "n1", Some(&read(mark("ops@h"), 3)));
    assert_eq!(
        op,
        Some(ZkOp::Delete {
            path: "/zkcron/c/control/drained/n1".into(),
            version: Some(3),
        })
    );
    assert_eq!(undrain(&paths(), "n1", None), None);
}

#[test]
fn a_resume_reads_the_tasks_record_and_its_units_not_another_tasks() {
    let children = ["t", "t@n1", "t@n2", "tt", "tt@n1", "u"];
    assert_eq!(resume_reads("t", children), ["t", "t@n1", "t@n2"]);
}

#[test]
fn resuming_an_unpaused_task_writes_nothing() {
    let unpaused = ResumeRead {
        mark: None,
        records: vec![record_named("t", "2026-03-01T09:00:00Z", 1)],
    };
    let now = utc("2026-03-01T10:00:00Z");
    assert_eq!(resume(&paths(), "t", &unpaused, now), None);
}

#[test]
fn resuming_deletes_the_mark_and_moves_older_records_to_now_in_one_multi_at_the_versions_read() {
    // Given a paused task whose record is behind, and a unit whose record is ahead of now.
    let now = utc("2026-03-01T10:00:00.750Z");
    let paused = ResumeRead {
        mark: Some(read(mark("ops@h"), 4)),
        records: vec![
            record_named("t", "2026-03-01T09:00:00Z", 7),
            record_named("t@n1", "2026-03-01T11:00:00Z", 2),
        ],
    };
    // When it is resumed.
    let op = resume(&paths(), "t", &paused, now);
    // Then the mark goes and only the older record moves, to now in whole seconds.
    let Some(ZkOp::Multi(ops)) = op else {
        panic!("{op:?}");
    };
    assert_eq!(ops.len(), 2, "{ops:?}");
    assert_eq!(
        ops[0],
        ZkOp::Delete {
            path: "/zkcron/c/control/paused/t".into(),
            version: Some(4),
        }
    );
    let ZkOp::SetData {
        path,
        data,
        version,
    } = &ops[1]
    else {
        panic!("{:?}", ops[1]);
    };
    assert_eq!((path.as_str(), *version), ("/zkcron/c/tasks/t", Some(7)));
    let moved: FireRecord = serde_json::from_slice(data).unwrap();
    assert_eq!(moved.tick, Some(utc("2026-03-01T10:00:00Z")));
}

#[test]
fn the_resume_rule_moves_an_older_record_to_now_claimed_by_nobody_and_keeps_its_queued_tick() {
    let now = utc("2026-03-01T10:00:00.500Z");
    let queued = "2026-03-01T09:00:05Z";
    let moved = resumed(&record("2026-03-01T09:00:05Z", Some(queued)), now).expect("moved");
    let second = utc("2026-03-01T10:00:00Z");
    // The paused period goes into the ledger, for a reader with the schedule to count.
    let paused = crate::plan::ledger::TickEntry {
        from: utc("2026-03-01T09:00:06Z"),
        to: second,
        count: 0,
        reason: crate::plan::ledger::Reason::Paused,
    };
    assert_eq!(
        moved,
        FireRecord {
            tick: Some(second),
            claimed_at: Some(second),
            queued: Some(utc(queued)),
            ticks: vec![paused],
            ..FireRecord::empty()
        }
    );
    assert_eq!(moved.format, FORMAT_VERSION);
}

/// The simulation's limited scenarios (seed 8 of them) found a resume that wrote the record
/// without its count of runs, so a task with `max_runs` ran that many again.
#[test]
fn a_resume_keeps_the_count_of_runs_that_max_runs_limits() {
    let counted = FireRecord {
        runs: 3,
        ..record("2026-03-01T09:00:05Z", None)
    };
    let moved = resumed(&counted, utc("2026-03-01T10:00:00Z")).expect("moved");
    assert_eq!(moved.runs, 3);
}

#[test]
fn the_resume_rule_moves_a_record_without_a_tick_and_leaves_one_at_or_after_now() {
    let now = utc("2026-03-01T10:00:00Z");
    assert_eq!(
        resumed(&FireRecord::empty(), now).and_then(|r| r.tick),
        Some(now)
    );
    assert_eq!(resumed(&record("2026-03-01T10:00:00Z", None), now), None);
    assert_eq!(resumed(&record("2026-03-01T10:00:01Z", None), now), None);
}

#[test]
fn the_operator_bugs_are_off_by_default_and_the_drop_queued_bug_drops_only_the_queued_tick() {
    assert_eq!(
        OperatorBugs::default(),
        OperatorBugs {
            resume_drops_queued: false
        }
    );
    let now = utc("2026-03-01T10:00:00Z");
    let paused = record("2026-03-01T09:00:00Z", Some("2026-03-01T09:00:00Z"));
    let bug = OperatorBugs {
        resume_drops_queued: true,
    };
    let kept = resumed(&paused, now).unwrap();
    let dropped = resumed_with(bug, &paused, now).unwrap();
    assert!(kept.queued.is_some());
    assert_eq!(
        dropped,
        FireRecord {
            queued: None,
            ..kept
        }
    );
}

fn hourly() -> Schedule {
    Schedule::parse("0 * * * *", chrono_tz::Tz::UTC).unwrap()
}

/// The create a request's writes end with: path, data, mode and acl.
fn created(requesting: &Requesting) -> (&str, &[u8], CreateMode, NodeAcl) {
    match &requesting.create {
        ZkOp::Create {
            path,
            data,
            mode,
            acl,
        } => (path, data, *mode, *acl),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_trigger_creates_the_triggers_dirs_then_a_pending_record_numbered_by_zookeeper() {
    // Given a task; when an operator triggers it; then a pending record from `by` at `now`
    // goes into a sequential znode under control/triggers, after its dirs.
    let now = utc("2026-03-01T10:00:00Z");
    let asked = RequestRecord::from(trigger("t", "ops@h", now));
    let writes = request(&paths(), &asked, NodeAcl::CreatorAll);
    let (path, data, mode, acl) = created(&writes);
    assert_eq!(path, "/zkcron/c/control/triggers/t@manual-");
    assert_eq!(
        (mode, acl),
        (CreateMode::PersistentSequential, NodeAcl::CreatorAll)
    );
    let written: TriggerRecord = serde_json::from_slice(data).unwrap();
    assert_eq!(written, TriggerRecord::pending("t", "ops@h", now));
    assert_eq!(asked, RequestRecord::Manual(written));
    assert_eq!(writes.parents.len(), 4, "{:?}", writes.parents);
    assert!(matches!(
        writes.parents.last(),
        Some(ZkOp::Create { path, data, mode: CreateMode::Persistent, .. })
            if path == "/zkcron/c/control/triggers" && data.is_empty()
    ));
    assert_eq!(asked.task(), "t");
    assert_eq!(asked.name(7), "t@manual-0000000007");
}

#[test]
fn a_backfill_counts_its_ticks_and_creates_an_active_request_under_control_backfills() {
    // Given an hourly task; when three hours are backfilled; then an active request of three
    // ticks goes into a sequential znode under control/backfills.
    let now = utc("2026-03-01T10:00:00Z");
    let range = (utc("2026-02-01T00:00:00Z"), utc("2026-02-01T03:00:00Z"));
    let record = backfill("t", &hourly(), range, "ops@h", now).unwrap();
    assert_eq!(
        record,
        BackfillRecord::new("t", range.0, range.1, 3, "ops@h", now)
    );
    let asked = RequestRecord::from(record.clone());
    let writes = request(&paths(), &asked, NodeAcl::Open);
    let (path, data, mode, _) = created(&writes);
    assert_eq!(path, "/zkcron/c/control/backfills/t@backfill-");
    assert_eq!(mode, CreateMode::PersistentSequential);
    assert_eq!(
        serde_json::from_slice::<BackfillRecord>(data).unwrap(),
        record
    );
    assert_eq!(asked.name(12), "t@backfill-0000000012");
}

#[test]
fn a_backfill_of_an_empty_or_tickless_range_is_refused_with_why() {
    let now = utc("2026-03-01T10:00:00Z");
    let from = utc("2026-02-01T00:00:00Z");
    let empty = backfill("t", &hourly(), (from, from), "ops@h", now);
    assert!(matches!(empty, Err(RangeError::Empty { .. })), "{empty:?}");
    let minutes = (
        from + chrono::TimeDelta::minutes(1),
        from + chrono::TimeDelta::minutes(59),
    );
    let none = backfill("t", &hourly(), minutes, "ops@h", now);
    assert!(matches!(none, Err(RangeError::NoTicks { .. })), "{none:?}");
}

fn active_backfill() -> BackfillRecord {
    BackfillRecord::new(
        "t",
        utc("2026-02-01T00:00:00Z"),
        utc("2026-02-01T03:00:00Z"),
        3,
        "ops@h",
        utc("2026-03-01T09:00:00Z"),
    )
}

#[test]
fn cancelling_an_active_backfill_sets_it_cancelled_at_the_version_read() {
    // Given an active request read at version 4; when it is cancelled; then its record,
    // cancelled by `by` at `now`, is set at version 4, and the answer keeps the old one.
    let now = utc("2026-03-01T10:00:00Z");
    let name = "t@backfill-0000000001";
    let was = active_backfill();
    let cancelling = cancel(&paths(), name, Some(&read(was.clone(), 4)), "ops@h", now);
    let Cancelling::Set { was: old, op } = cancelling else {
        panic!("{cancelling:?}");
    };
    assert_eq!(old, was);
    let ZkOp::SetData {
        path,
        data,
        version,
    } = op
    else {
        panic!("{op:?}");
    };
    assert_eq!(path, "/zkcron/c/control/backfills/t@backfill-0000000001");
    assert_eq!(version, Some(4));
    let new: BackfillRecord = serde_json::from_slice(&data).unwrap();
    assert_eq!(new.state, BackfillState::Cancelled);
    assert_eq!(
        (new.ended_at, new.cancelled_by.as_deref()),
        (Some(now), Some("ops@h"))
    );
    assert_eq!(Some(new), cancelled(&was, "ops@h", now));
}

#[test]
fn cancelling_an_ended_or_missing_backfill_writes_nothing() {
    let now = utc("2026-03-01T10:00:00Z");
    let name = "t@backfill-0000000001";
    for state in [BackfillState::Done, BackfillState::Cancelled] {
        let over = BackfillRecord {
            state,
            ..active_backfill()
        };
        assert_eq!(cancelled(&over, "ops@h", now), None);
        assert_eq!(
            cancel(&paths(), name, Some(&read(over.clone(), 2)), "ops@h", now),
            Cancelling::Over(over)
        );
    }
    assert_eq!(
        cancel(&paths(), name, None, "ops@h", now),
        Cancelling::Missing
    );
}
