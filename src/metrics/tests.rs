use super::*;

#[test]
fn every_documented_name_is_encoded_in_base_units() {
    let metrics = Metrics::new();
    metrics.task_loaded(&"backup".into());
    metrics.task_loaded(&"idle".into());
    metrics.fired("backup", FireOutcome::Success);
    metrics.succeeded("backup", 1_700_000_000.0);
    metrics.catch_up_run("backup");
    metrics.claim(true);
    metrics.claim(false);
    let text = metrics.encode();
    for name in [
        "zkcron_fires_total{task=\"backup\",outcome=\"success\"} 1",
        "zkcron_fire_lateness_seconds_bucket",
        "zkcron_claims_total{result=\"won\"} 1",
        "zkcron_claims_total{result=\"lost\"} 1",
        "zkcron_fires_total{task=\"idle\",outcome=\"failure\"} 0",
        "zkcron_catch_up_runs_total{task=\"idle\"} 0",
        "zkcron_leases_held 0",
        "zkcron_running_jobs 0",
        "zkcron_last_success_timestamp_seconds{task=\"backup\"} 1700000000",
        "zkcron_catch_up_runs_total{task=\"backup\"} 1",
        "zkcron_zookeeper_connected 0",
        "zkcron_zookeeper_reconnects_total 0",
        "zkcron_zookeeper_session_losses_total 0",
        "zkcron_zookeeper_operation_duration_seconds_bucket",
        "zkcron_clock_skew_seconds 0",
        "zkcron_clock_skew_measured 0",
    ] {
        assert!(text.contains(name), "{name} missing from:\n{text}");
    }
}

/// A pooled task's series says how many of its items this node runs, and goes with the
/// task (removed, or no longer pooled).
#[test]
fn work_items_has_a_series_per_pooled_task_loaded_and_only_those() {
    let metrics = Metrics::new();
    let pools = |pairs: &[(&str, usize)]| {
        pairs
            .iter()
            .map(|(task, n)| (task.to_string(), *n))
            .collect::<BTreeMap<_, _>>()
    };
    metrics.set_work_items(pools(&[("shards", 16), ("regions", 0)]));
    let text = metrics.encode();
    assert!(text.contains("# TYPE zkcron_work_items gauge"), "{text}");
    assert!(
        text.contains("zkcron_work_items{task=\"shards\"} 16"),
        "{text}"
    );
    assert!(
        text.contains("zkcron_work_items{task=\"regions\"} 0"),
        "{text}"
    );
    metrics.set_work_items(pools(&[("regions", 2)]));
    let text = metrics.encode();
    assert!(!text.contains("task=\"shards\""), "{text}");
    assert!(
        text.contains("zkcron_work_items{task=\"regions\"} 2"),
        "{text}"
    );
}

/// The per-task series are kept compactly, not in prometheus-client `Family`s: their text
/// must be what the `Family`s of the same events encoded (same lines, same descriptors).
#[test]
fn per_task_series_encode_as_prometheus_client_families_did() {
    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct FireLabels {
        task: String,
        outcome: &'static str,
    }
    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct TaskLabel {
        task: String,
    }
    let fires = Family::<FireLabels, Counter>::default();
    let last_success = Family::<TaskLabel, Gauge<f64, AtomicU64>>::default();
    let catch_up = Family::<TaskLabel, Counter>::default();
    let mut reference = Registry::with_prefix("zkcron");
    reference.register("fires", "f", fires.clone());
    reference.register_with_unit(
        "last_success_timestamp",
        "l",
        prometheus_client::registry::Unit::Seconds,
        last_success.clone(),
    );
    reference.register("catch_up_runs", "c", catch_up.clone());

    let series = Arc::new(TaskSeries::default());
    let family = |kind| TaskFamily {
        series: series.clone(),
        kind,
    };
    let mut compact = Registry::with_prefix("zkcron");
    compact.register("fires", "f", family(TaskFamilyKind::Fires));
    compact.register_with_unit(
        "last_success_timestamp",
        "l",
        prometheus_client::registry::Unit::Seconds,
        family(TaskFamilyKind::LastSuccess),
    );
    compact.register("catch_up_runs", "c", family(TaskFamilyKind::CatchUp));

    let lines = |registry: &Registry| {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        lines.sort();
        lines
    };
    // Nothing loaded: no series and no descriptor in either.
    assert_eq!(lines(&compact), lines(&reference));

    let label = |task: &str| TaskLabel { task: task.into() };
    let fire = |task: &str, outcome: FireOutcome| FireLabels {
        task: task.into(),
        outcome: outcome.label(),
    };
    for task in ["a", "b\"q\"", "c"] {
        series.update(task, |c| {
            c.present |=
                outcome_bit(FireOutcome::Success) | outcome_bit(FireOutcome::Failure) | CATCH_UP
        });
        let _ = fires.get_or_create(&fire(task, FireOutcome::Success));
        let _ = fires.get_or_create(&fire(task, FireOutcome::Failure));
        let _ = catch_up.get_or_create(&label(task));
    }
    // Loaded, never fired: the zero series only.
    assert_eq!(lines(&compact), lines(&reference));
    for (task, outcome) in [
        ("a", FireOutcome::Success),
        ("a", FireOutcome::Success),
        ("b\"q\"", FireOutcome::Skipped),
        ("never-loaded", FireOutcome::NotStarted),
    ] {
        series.update(task, |c| {
            c.present |= outcome_bit(outcome);
            c.fires[outcome as usize] += 1;
        });
        fires.get_or_create(&fire(task, outcome)).inc();
    }
    series.update("a", |c| {
        c.present |= LAST_SUCCESS;
        c.last_success = 1_700_000_000.5;
    });
    last_success.get_or_create(&label("a")).set(1_700_000_000.5);
    series.update("c", |c| {
        c.present |= CATCH_UP;
        c.catch_up += 1;
    });
    catch_up.get_or_create(&label("c")).inc();
    assert_eq!(lines(&compact), lines(&reference));
}
