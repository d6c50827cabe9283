use super::*;

fn at(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_767_225_600 + s, 0).unwrap()
}

/// Claimed `at(60)` to run, by a node that is gone, no result: the orphan.
fn lost() -> FireView {
    FireView {
        record: Some(at(60)),
        claimed_to_run: true,
        result: Some(at(0)),
        leads: true,
        run_live: false,
        claimer_alive: false,
        queued: None,
        ..FireView::default()
    }
}

#[test]
fn a_claim_needs_the_lease_first_and_then_a_tick_newer_than_the_record() {
    let refused = |record| Verdict::Refuse(ClaimOutcome::AlreadyClaimed { record });
    let view = lost();
    assert_eq!(admit_claim(&view, at(120)), Verdict::Admit);
    assert_eq!(admit_claim(&view, at(60)), refused(at(60)));
    assert_eq!(admit_claim(&view, at(0)), refused(at(60)));
    let none = FireView {
        leads: true,
        ..FireView::default()
    };
    assert_eq!(admit_claim(&none, at(0)), Verdict::Admit);
    let follower = FireView {
        leads: false,
        ..view
    };
    assert_eq!(
        admit_claim(&follower, at(120)),
        Verdict::Refuse(ClaimOutcome::NotLeader)
    );
}

#[test]
fn an_orphan_is_claimed_to_run_without_result_live_run_or_living_claimer() {
    assert_eq!(orphan(&lost()), Some(at(60)));
    // Leading does not matter for the question, only for the rerun.
    assert_eq!(
        orphan(&FireView {
            leads: false,
            ..lost()
        }),
        Some(at(60))
    );
    for (what, view) in [
        (
            "no record",
            FireView {
                record: None,
                ..lost()
            },
        ),
        (
            "claimed to skip",
            FireView {
                claimed_to_run: false,
                ..lost()
            },
        ),
        (
            "ended",
            FireView {
                result: Some(at(60)),
                ..lost()
            },
        ),
        (
            "a later result",
            FireView {
                result: Some(at(120)),
                ..lost()
            },
        ),
        (
            "running",
            FireView {
                run_live: true,
                ..lost()
            },
        ),
        (
            "claimer alive",
            FireView {
                claimer_alive: true,
                ..lost()
            },
        ),
    ] {
        assert_eq!(orphan(&view), None, "{what}");
    }
    assert_eq!(
        orphan(&FireView {
            result: None,
            ..lost()
        }),
        Some(at(60))
    );
}

#[test]
fn a_rerun_is_admitted_exactly_for_the_orphan_of_a_led_task() {
    assert_eq!(admit_rerun(&lost(), at(60)), Verdict::Admit);
    let already = |record| Verdict::Refuse(ClaimOutcome::AlreadyClaimed { record });
    assert_eq!(admit_rerun(&lost(), at(0)), already(at(60)));
    assert_eq!(admit_rerun(&lost(), at(120)), already(at(60)));
    let ended = FireView {
        result: Some(at(60)),
        ..lost()
    };
    assert_eq!(admit_rerun(&ended, at(60)), already(at(60)));
    let skipped = FireView {
        claimed_to_run: false,
        ..lost()
    };
    assert_eq!(admit_rerun(&skipped, at(60)), already(at(60)));
    let rerun = FireView {
        run_live: true,
        ..lost()
    };
    assert_eq!(admit_rerun(&rerun, at(60)), already(at(60)));
    // No record: nothing names the tick; refused as claimed, never as "not leader".
    let none = FireView {
        leads: true,
        ..FireView::default()
    };
    assert_eq!(admit_rerun(&none, at(60)), already(at(60)));
    let follower = FireView {
        leads: false,
        ..lost()
    };
    assert_eq!(
        admit_rerun(&follower, at(60)),
        Verdict::Refuse(ClaimOutcome::NotLeader)
    );
}

fn entry(fire_id: &str) -> HistoryEntry {
    HistoryEntry {
        fire_id: fire_id.into(),
        tick: at(0),
        node: "n1".into(),
        release: "1.0.0".into(),
        started_at: at(0),
        duration_ms: 5,
        exit_code: Some(0),
        signal: None,
        success: true,
        attempts: 1,
        trigger: crate::coord::records::RunTrigger::Schedule,
        backfill: false,
        after: None,
        items: None,
        output_tail: None,
    }
}

#[test]
fn a_manual_run_needs_the_lease_and_a_pending_trigger() {
    assert_eq!(admit_manual(true, true, at(0)), Verdict::Admit);
    assert_eq!(
        admit_manual(false, true, at(0)),
        Verdict::Refuse(ClaimOutcome::NotLeader)
    );
    assert_eq!(
        admit_manual(true, false, at(0)),
        Verdict::Refuse(ClaimOutcome::AlreadyClaimed { record: at(0) })
    );
}

#[test]
fn manual_fire_ids_never_look_like_a_tick_and_name_their_task() {
    let id = manual_fire_id("backup", 42);
    assert_eq!(id, "backup@manual-0000000042");
    assert_eq!(manual_task(&id), Some("backup"));
    assert_eq!(manual_task("backup@1767225600"), None);
    assert_eq!(manual_task("backup@manual-42"), None);
    assert_eq!(manual_task("@manual-0000000042"), None);
    assert_eq!(manual_task("load@after-backup@manual-0000000042"), None);
}

#[test]
fn a_chained_run_s_fire_id_names_its_task_and_its_parent_s_run() {
    for parent in [
        "extract@1767225600",
        "extract@manual-0000000042",
        "extract@backfill-0000000003-1767225600",
        "extract@after-raw@1767225600",
    ] {
        let id = chain_fire_id("load", parent);
        assert_eq!(chain_of(&id), Some(("load", parent)));
        assert_eq!(trigger_task(&id), Some("load"));
    }
    assert_eq!(trigger_task("load@manual-0000000001"), Some("load"));
    assert_eq!(chain_of("load@manual-0000000001"), None);
    assert_eq!(chain_of("Load@after-extract@1"), None);
    assert_eq!(chain_of("load@after-extract"), None);
}

#[test]
fn a_pooled_parent_s_chained_run_names_its_item_in_a_form_of_its_own() {
    for parent in [
        "extract@1767225600",
        "extract@manual-0000000042",
        "extract@item-eu-west@after-raw@1767225600",
    ] {
        let id = chain_item_fire_id("load", "eu-west", parent);
        assert_eq!(chain_of(&id), Some(("load", parent)));
        assert_eq!(chain_item(&id), Some("eu-west"));
        assert_eq!(trigger_task(&id), Some("load"));
        assert_eq!(manual_task(&id), None);
    }
    // The plain form, with a parent whose own fire id names an item, has no item.
    let id = chain_fire_id("load", "extract@item-eu-west@after-raw@1767225600");
    assert_eq!(chain_item(&id), None);
    assert_ne!(
        id,
        chain_item_fire_id("load", "eu-west", "extract@after-raw@1767225600")
    );
    assert_eq!(chain_of("load@item-@after-extract@1"), None);
    assert_eq!(chain_of("load@item-Eu@after-extract@1"), None);
    assert_eq!(chain_item("load@after-extract@1"), None);
}

#[test]
fn the_history_of_a_run_chained_after_an_item_names_its_parent_and_no_backfill() {
    let parent = "extract@backfill-0000000003-1767225600";
    let result = RunResult {
        tick: DateTime::from_timestamp(1_767_225_600, 0).unwrap(),
        fire_id: Some(chain_item_fire_id("load", "eu-west", parent)),
        manual: true,
        ..RunResult::default()
    };
    let entry = HistoryEntry::of_run("load", &result, "1.0.0");
    assert_eq!(entry.after.as_deref(), Some(parent));
    assert!(!entry.backfill);
}

#[test]
fn history_keeps_each_run_once_and_the_newest_within_both_bounds() {
    let mut runs = Vec::new();
    for i in 0..5 {
        assert!(append_history(&mut runs, entry(&format!("t@{i}")), 3));
    }
    let ids: Vec<&str> = runs.iter().map(|r| r.fire_id.as_str()).collect();
    assert_eq!(ids, ["t@2", "t@3", "t@4"]);
    assert!(!append_history(&mut runs, entry("t@4"), 3));
    assert_eq!(runs.len(), 3);
    // Bytes: long fire ids fill 256 KiB long before 1,000 runs.
    let mut runs = Vec::new();
    let long = "x".repeat(2000);
    for i in 0..1000 {
        append_history(&mut runs, entry(&format!("{long}@{i}")), 1000);
    }
    let bytes = serde_json::to_vec(&crate::coord::records::HistoryRecord {
        format: 1,
        runs: runs.clone(),
    })
    .unwrap()
    .len();
    assert!(bytes <= HISTORY_MAX_BYTES, "{bytes} bytes");
    assert!(runs.len() > 100, "{} runs kept", runs.len());
    assert_eq!(runs.last().unwrap().fire_id, format!("{long}@999"));
}

#[test]
fn ended_triggers_go_ten_minutes_after_their_end() {
    assert!(!trigger_expired(at(0), at(599)));
    assert!(trigger_expired(at(0), at(600)));
    assert!(!trigger_expired(at(600), at(0)));
}

#[test]
fn a_queued_tick_is_started_once_and_only_while_the_record_names_it() {
    let view = FireView {
        record: Some(at(60)),
        leads: true,
        queued: Some(at(60)),
        ..FireView::default()
    };
    assert_eq!(admit(&view, at(60), ClaimIntent::RunQueued), Verdict::Admit);
    let already = Verdict::Refuse(ClaimOutcome::AlreadyClaimed { record: at(60) });
    assert_eq!(admit(&view, at(0), ClaimIntent::RunQueued), already);
    let started = FireView {
        queued: None,
        ..view
    };
    assert_eq!(admit(&started, at(60), ClaimIntent::RunQueued), already);
    let follower = FireView {
        leads: false,
        ..view
    };
    assert_eq!(
        admit(&follower, at(60), ClaimIntent::RunQueued),
        Verdict::Refuse(ClaimOutcome::NotLeader)
    );
    // Any other intent is a claim of a newer tick, queued or not.
    assert_eq!(admit(&view, at(60), ClaimIntent::Queue), already);
    assert_eq!(admit(&view, at(120), ClaimIntent::Drop), Verdict::Admit);
}

#[test]
fn a_queued_tick_survives_later_claims_until_it_is_started() {
    let idle = FireView {
        record: Some(at(0)),
        leads: true,
        ..FireView::default()
    };
    let queued = claimed(&idle, at(60), ClaimIntent::Queue);
    assert_eq!(
        queued,
        Claimed {
            record: at(60),
            run: false,
            queued: Some(at(60)),
            runs: 0
        }
    );
    let view = FireView {
        record: Some(queued.record),
        claimed_to_run: queued.run,
        queued: queued.queued,
        ..idle
    };
    let dropped = claimed(&view, at(120), ClaimIntent::Drop);
    assert_eq!(
        dropped,
        Claimed {
            record: at(120),
            run: false,
            queued: Some(at(60)),
            runs: 0
        }
    );
    // Started while it is the record's tick: claimed to run, so a lost run is an orphan.
    let started = claimed(&view, at(60), ClaimIntent::RunQueued);
    assert_eq!(
        started,
        Claimed {
            record: at(60),
            run: true,
            queued: None,
            runs: 0
        }
    );
    // Started behind a dropped tick: the record stays at the dropped tick.
    let behind = FireView {
        record: Some(at(120)),
        ..view
    };
    assert_eq!(
        claimed(&behind, at(60), ClaimIntent::RunQueued),
        Claimed {
            record: at(120),
            run: false,
            queued: None,
            runs: 0
        }
    );
}

#[test]
fn a_claim_to_run_past_max_runs_is_refused_as_done_and_others_are_not() {
    let at_limit = FireView {
        record: Some(at(60)),
        leads: true,
        runs: 2,
        max_runs: Some(2),
        ..FireView::default()
    };
    for intent in [ClaimIntent::Run, ClaimIntent::Queue] {
        assert_eq!(
            admit(&at_limit, at(120), intent),
            Verdict::Refuse(ClaimOutcome::Done { runs: 2 })
        );
    }
    // A tick not run, a note, or a claim of a tick already claimed: as without a limit.
    assert_eq!(admit(&at_limit, at(120), ClaimIntent::Skip), Verdict::Admit);
    assert_eq!(admit(&at_limit, at(120), ClaimIntent::Note), Verdict::Admit);
    assert_eq!(
        admit(&at_limit, at(60), ClaimIntent::Run),
        Verdict::Refuse(ClaimOutcome::AlreadyClaimed { record: at(60) })
    );
    // Below the limit a run is admitted and counted; a skip is not counted.
    let below = FireView {
        runs: 1,
        ..at_limit
    };
    assert_eq!(admit(&below, at(120), ClaimIntent::Run), Verdict::Admit);
    assert_eq!(claimed(&below, at(120), ClaimIntent::Run).runs, 2);
    assert_eq!(claimed(&below, at(120), ClaimIntent::Skip).runs, 1);
    // Without `max_runs` nothing is counted: the record of such a task has no count.
    assert_eq!(
        claimed(&FireView::default(), at(120), ClaimIntent::Run).runs,
        0
    );
}

#[test]
fn the_newer_result_is_kept_and_of_one_tick_the_later_written() {
    assert!(supersedes(None, at(0)));
    assert!(supersedes(Some(at(0)), at(60)));
    assert!(supersedes(Some(at(60)), at(60)));
    assert!(!supersedes(Some(at(120)), at(60)));
}

#[test]
fn a_tick_claimed_to_run_by_a_gone_node_without_a_result_is_lost_when_a_claim_moves_past_it() {
    let lost = FireView {
        record: Some(at(60)),
        claimed_to_run: true,
        result: Some(at(0)),
        ..FireView::default()
    };
    assert_eq!(
        lost_with_its_node(&lost, at(120), ClaimIntent::Run),
        Some(at(60))
    );
    assert_eq!(lost_with_its_node(&lost, at(120), ClaimIntent::Note), None);
    let ended = FireView {
        result: Some(at(60)),
        ..lost
    };
    let alive = FireView {
        claimer_alive: true,
        ..lost
    };
    let skipped = FireView {
        claimed_to_run: false,
        ..lost
    };
    for view in [ended, alive, skipped] {
        assert_eq!(lost_with_its_node(&view, at(120), ClaimIntent::Run), None);
    }
}
