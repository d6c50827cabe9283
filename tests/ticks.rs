//! The tick ledger on the embedded backend, from the outside: `zkcron history TASK --ticks`
//! lists the runs with their fire ids and every tick not run with its reason (`overlap`,
//! `queue_full`, `window`, `paused` as one counted entry, `deadline` and `catch_up` after a
//! stopped process, `no_node` after a stopped daemon, `node_lost` after a killed one; and
//! `--json`, `--since`); the API and `/metrics` say the same. (In a cluster:
//! `tests/cluster/ticks.rs`.)
// Real daemons and processes against the real clock.
#![allow(clippy::disallowed_methods)]

mod common;

use std::time::Duration;

use common::{Scratch, Served, http_get, wait_for};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(30);

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `history TASK --ticks --json` (and its other `args`): the entries.
fn ticks(scratch: &Scratch, task: &str, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["history", task, "--ticks", "--json"];
    all.extend_from_slice(args);
    let out = scratch.cli(&all);
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
}

fn has(entries: &[Value], outcome: &str, reason: Option<&str>) -> bool {
    entries.iter().any(|e| {
        e["outcome"] == outcome
            && reason.is_none_or(|r| e["reason"] == r)
            && e["count"].as_u64().unwrap_or(0) >= 1
    })
}

#[test]
fn history_ticks_lists_the_runs_and_the_ticks_skipped_for_overlap_with_their_reason() {
    let served = Served::start(
        None,
        &[(
            "slow",
            "schedule = \"* * * * * *\"\ncommand = \"sleep 2.5\"\noverlap = \"skip\"\n",
        )],
    );
    let scratch = &served.scratch;
    let mut entries = Vec::new();
    wait_for("a run and an overlap skip in the ledger", LIMIT, || {
        entries = ticks(scratch, "slow", &[]);
        has(&entries, "ran", None) && has(&entries, "skipped", Some("overlap"))
    });
    let ran = entries.iter().find(|e| e["outcome"] == "ran").unwrap();
    assert!(
        ran["fire_id"].as_str().unwrap().starts_with("slow@") && ran["reason"].is_null(),
        "{ran}"
    );
    let skipped = entries.iter().find(|e| e["reason"] == "overlap").unwrap();
    assert_eq!(skipped["outcome"], "skipped");
    assert!(
        skipped["message"]
            .as_str()
            .unwrap()
            .contains("the previous run was still going"),
        "{skipped}"
    );
    // Entries are oldest first.
    let froms: Vec<&str> = entries
        .iter()
        .map(|e| e["from"].as_str().unwrap())
        .collect();
    assert!(froms.windows(2).all(|w| w[0] <= w[1]), "{froms:?}");

    // For people: a table with the reason's code and sentence.
    let out = scratch.cli(&["history", "slow", "--ticks"]);
    let table = text(&out.stdout);
    assert!(
        table.starts_with("FROM") && table.contains("skipped") && table.contains("overlap: "),
        "{table}"
    );
    // --since after every entry: nothing, said so.
    let out = scratch.cli(&[
        "history",
        "slow",
        "--ticks",
        "--since",
        "2999-01-01T00:00:00Z",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        "zkcron: no tick of slow recorded since 2999-01-01T00:00:00Z\n"
    );

    // The API serves the same lines, and /metrics counts the skips.
    let (status, body) = http_get(&served.address, "/api/tasks/slow/ticks");
    assert_eq!(status, 200, "{body}");
    let api: Vec<Value> = serde_json::from_str(&body).unwrap();
    assert!(has(&api, "skipped", Some("overlap")), "{body}");
    let (_, metrics) = http_get(&served.address, "/metrics");
    assert!(
        metrics
            .contains("zkcron_ticks_total{task=\"slow\",outcome=\"skipped\",reason=\"overlap\"}"),
        "{metrics}"
    );
}

#[test]
fn a_paused_period_is_one_entry_of_its_ticks_counted_from_the_schedule() {
    let scratch = Scratch::new();
    scratch.write_task("beat", "schedule = \"* * * * * *\"\ncommand = \"true\"\n");
    let _daemon = scratch.start_daemon(&[]);
    wait_for("a run of beat", LIMIT, || {
        has(&ticks(&scratch, "beat", &[]), "ran", None)
    });
    let out = scratch.cli(&["pause", "beat"]);
    assert!(out.status.success(), "{out:?}");
    // While paused, the ticks since the record are shown as paused, open.
    wait_for("three paused ticks", LIMIT, || {
        ticks(&scratch, "beat", &[])
            .iter()
            .any(|e| e["reason"] == "paused" && e["count"].as_u64() >= Some(3))
    });
    let out = scratch.cli(&["resume", "beat"]);
    assert!(out.status.success(), "{out:?}");
    let mut entries = Vec::new();
    wait_for("a run after the paused period", LIMIT, || {
        entries = ticks(&scratch, "beat", &[]);
        let paused = entries.iter().position(|e| e["reason"] == "paused");
        paused.is_some_and(|p| entries[p + 1..].iter().any(|e| e["outcome"] == "ran"))
    });
    let paused: Vec<&Value> = entries.iter().filter(|e| e["reason"] == "paused").collect();
    assert_eq!(paused.len(), 1, "{entries:?}");
    assert!(paused[0]["count"].as_u64().unwrap() >= 3, "{entries:?}");
}

#[test]
fn history_ticks_of_an_unknown_task_and_since_without_ticks_are_refused_with_the_fix() {
    let scratch = Scratch::new();
    scratch.write_task("beat", "schedule = \"0 0 * * *\"\ncommand = \"true\"\n");
    let _daemon = scratch.start_daemon(&[]);
    let out = scratch.cli(&["history", "beet", "--ticks"]);
    assert!(!out.status.success());
    let said = text(&out.stderr);
    assert!(
        said.contains("unknown task beet") && said.contains("did you mean beat?"),
        "{said}"
    );
    let out = scratch.cli(&["history", "beat", "--since", "2026-01-01T00:00:00Z"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--ticks"), "{out:?}");
    // A task that never fired has no ledger yet, and says so.
    let out = scratch.cli(&["history", "beat", "--ticks"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text(&out.stdout).contains("task beat has no recorded ticks yet"),
        "{out:?}"
    );
}

/// Until the wall clock has passed `instant` (real ticks must pass for a test of missed ones).
fn until(instant: chrono::DateTime<chrono::Utc>) {
    wait_for(&format!("the clock to pass {instant}"), LIMIT, || {
        chrono::Utc::now() > instant
    });
}

#[test]
fn a_full_queue_and_the_active_window_skip_ticks_each_with_its_reason() {
    let scratch = Scratch::new();
    scratch.write_task(
        "queued",
        "schedule = \"* * * * * *\"\ncommand = \"sleep 2.5\"\noverlap = \"queue\"\n",
    );
    let until = (chrono::Utc::now() + chrono::TimeDelta::seconds(3))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    scratch.write_task(
        "window",
        &format!("schedule = \"* * * * * *\"\ncommand = \"true\"\nactive_until = \"{until}\"\n"),
    );
    let _daemon = scratch.start_daemon(&[]);
    wait_for("a tick dropped from a full queue", LIMIT, || {
        has(
            &ticks(&scratch, "queued", &[]),
            "skipped",
            Some("queue_full"),
        )
    });
    let mut entries = Vec::new();
    wait_for("two ticks after the active window", LIMIT, || {
        entries = ticks(&scratch, "window", &[]);
        entries
            .iter()
            .any(|e| e["reason"] == "window" && e["count"].as_u64() >= Some(2))
    });
    assert!(has(&entries, "ran", None), "{entries:?}");
    let outside = entries.iter().find(|e| e["reason"] == "window").unwrap();
    assert!(
        outside["from"].as_str().unwrap() > until.as_str(),
        "{entries:?}"
    );
}

#[test]
fn ticks_of_a_stopped_daemon_are_missed_no_node_and_a_stopped_process_s_late_ones_deadline() {
    let scratch = Scratch::new();
    scratch.write_task(
        "beat",
        "schedule = \"* * * * * *\"\ncommand = \"true\"\ncatch_up = \"skip\"\n",
    );
    scratch.write_task(
        "prompt",
        "schedule = \"* * * * * *\"\ncommand = \"true\"\nstarting_deadline = \"1s\"\n",
    );
    let mut daemon = scratch.start_daemon(&[]);
    wait_for("a run of beat", LIMIT, || {
        has(&ticks(&scratch, "beat", &[]), "ran", None)
    });
    // A process stopped for 3 s wakes to ticks older than their 1 s deadline.
    daemon.signal(nix::sys::signal::Signal::SIGSTOP);
    until(chrono::Utc::now() + chrono::TimeDelta::seconds(3));
    daemon.signal(nix::sys::signal::Signal::SIGCONT);
    wait_for("ticks past their deadline", LIMIT, || {
        has(&ticks(&scratch, "prompt", &[]), "skipped", Some("deadline"))
    });
    // A daemon down for 3 s: its next life finds the ticks nobody fired.
    daemon.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(daemon.wait_exit(LIMIT), Some(0), "{}", daemon.log());
    until(chrono::Utc::now() + chrono::TimeDelta::seconds(3));
    let daemon = scratch.start_daemon(&[]);
    daemon.wait_for_log_count("zkcron started", 2, LIMIT);
    wait_for("missed ticks found at the start", LIMIT, || {
        ticks(&scratch, "beat", &[])
            .iter()
            .any(|e| e["reason"] == "no_node" && e["count"].as_u64() >= Some(2))
    });
    let entries = ticks(&scratch, "beat", &[]);
    let missed = entries.iter().find(|e| e["reason"] == "no_node").unwrap();
    assert_eq!(missed["outcome"], "missed");
}

#[test]
fn a_run_whose_daemon_was_killed_before_its_end_is_missed_node_lost() {
    let scratch = Scratch::new();
    let pid = scratch.out("pid");
    scratch.write_task(
        "long",
        &format!(
            "schedule = \"* * * * * *\"\ncommand = 'echo $$ > {pid}; exec sleep 2'\n",
            pid = pid.display()
        ),
    );
    let mut daemon = scratch.start_daemon(&[]);
    wait_for("the run to start", LIMIT, || {
        std::fs::read_to_string(&pid).is_ok_and(|p| p.ends_with('\n'))
    });
    daemon.signal(nix::sys::signal::Signal::SIGKILL);
    daemon.wait_exit(LIMIT);
    let job: i32 = std::fs::read_to_string(&pid)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Its job outlives it (its own process group) and ends by itself.
    wait_for("the orphaned job to end", LIMIT, || {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(job), None).is_err()
    });
    // On the daemon's next life, before it runs anything else: the lost run's tick.
    scratch.write_task("long", "schedule = \"0 0 1 1 *\"\ncommand = \"true\"\n");
    let daemon = scratch.start_daemon(&[]);
    daemon.wait_for_log_count("zkcron started", 2, LIMIT);
    let entries = ticks(&scratch, "long", &[]);
    assert!(has(&entries, "missed", Some("node_lost")), "{entries:?}");
}

/// A process stopped for longer than the planner's on-time tolerance (60 s) wakes to ticks it
/// missed: `catch_up = "skip"` runs none of them late, and says so.
#[test]
fn ticks_a_stopped_process_missed_past_the_on_time_tolerance_are_skipped_catch_up() {
    let scratch = Scratch::new();
    scratch.write_task(
        "beat",
        "schedule = \"* * * * * *\"\ncommand = \"true\"\ncatch_up = \"skip\"\n",
    );
    let daemon = scratch.start_daemon(&[]);
    wait_for("a run of beat", LIMIT, || {
        has(&ticks(&scratch, "beat", &[]), "ran", None)
    });
    daemon.signal(nix::sys::signal::Signal::SIGSTOP);
    let back = chrono::Utc::now() + chrono::TimeDelta::seconds(62);
    wait_for("62 s to pass", LIMIT * 3, || chrono::Utc::now() > back);
    daemon.signal(nix::sys::signal::Signal::SIGCONT);
    wait_for("ticks missed past the tolerance", LIMIT, || {
        has(&ticks(&scratch, "beat", &[]), "skipped", Some("catch_up"))
    });
}
