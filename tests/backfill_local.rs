//! `zkcron backfill` on the local backend, against a real `zkcron run`: each tick of the range
//! runs once, oldest first, with the historic tick as `ZKCRON_SCHEDULED_AT` and a backfill fire
//! id, shown as `backfill` in the history; `--wait` follows it and exits with its success;
//! `--status` lists it; `--cancel` stops it; a kill -9 of the daemon mid-way runs no tick twice
//! and the restarted daemon finishes the rest; and every mistake is refused with its reason.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use common::wall::now;
use common::{DaemonProcess, Scratch};
use nix::sys::signal::Signal;

const LIMIT: Duration = Duration::from_secs(60);

/// 2026-01-01T00:00:00Z: a minute's start long past.
const FROM: &str = "2026-01-01T00:00:00Z";

fn at_minute(minute: i64) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(FROM)
        .unwrap()
        .with_timezone(&Utc)
        + TimeDelta::minutes(minute)
}

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A task every minute (a yearly one would hold too few ticks) whose job, for a backfill
/// tick, appends "<fire id> <scheduled at> <start>" to `out` (`<start>`: when it started, Unix
/// seconds with nanoseconds), sleeps `sleep` and exits 3 at minute `fail_at`. A scheduled tick
/// (a test that runs across a minute boundary meets one) exits at once, unrecorded.
fn recording(out: &Path, sleep: &str, fail_at: &str) -> String {
    format!(
        "schedule = \"* * * * *\"\ncommand = ['/bin/sh', '-c', 'case \"$ZKCRON_FIRE_ID\" in *@backfill-*) ;; *) exit 0;; esac; echo \"$ZKCRON_FIRE_ID $ZKCRON_SCHEDULED_AT $(date +%s.%N)\" >> {}; sleep {sleep}; case \"$ZKCRON_SCHEDULED_AT\" in *T00:{fail_at}:00*) exit 3;; esac']\n",
        out.display()
    )
}

struct Local {
    scratch: Scratch,
    config: PathBuf,
    state: PathBuf,
}

impl Local {
    fn new() -> Local {
        let scratch = Scratch::new();
        let config = scratch.path().join("zkcron.toml");
        let state = scratch.path().join("state");
        Local {
            scratch,
            config,
            state,
        }
    }

    fn cli(&self, args: &[&str]) -> Output {
        common::zkcron()
            .args(args)
            .args(["--config", self.config.to_str().unwrap()])
            .args(["--state-dir", self.state.to_str().unwrap()])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn backfill(
        &self,
        task: &str,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        more: &[&str],
    ) -> Output {
        let (from, to) = (rfc(from), rfc(to));
        let mut args = vec!["backfill", task, "--from", &from, "--to", &to];
        args.extend(more);
        self.cli(&args)
    }

    /// The lines the jobs wrote: (fire id, scheduled at).
    fn runs(&self) -> Vec<(String, String)> {
        self.scratch
            .lines("runs")
            .iter()
            .map(|line| {
                let words: Vec<&str> = line.split(' ').collect();
                (words[0].to_string(), words[1].to_string())
            })
            .collect()
    }

    /// When each job started (wall clock, Unix seconds), in the order they wrote.
    fn starts(&self) -> Vec<f64> {
        let lines = self.scratch.lines("runs");
        let start = |line: &String| line.split(' ').nth(2)?.parse().ok();
        lines
            .iter()
            .map(|line| start(line).unwrap_or_else(|| panic!("no start in {line:?}")))
            .collect()
    }

    fn status(&self) -> String {
        let out = self.cli(&["backfill", "--status"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn request_id(out: &Output) -> String {
    let said = text(&out.stdout);
    said.lines()
        .next()
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or_else(|| panic!("no id in {said:?}"))
        .to_string()
}

#[test]
fn a_backfill_runs_each_tick_once_oldest_first_and_wait_exits_with_its_success() {
    let local = Local::new();
    let out_file = local.scratch.out("runs");
    local
        .scratch
        .write_task("rep", &recording(&out_file, "0", "99"));
    let _daemon = local.scratch.start_daemon(&[]);

    let out = local.backfill("rep", at_minute(0), at_minute(5), &["--wait"]);
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}{}", text(&out.stderr));
    let id = request_id(&out);
    assert_eq!(id, "rep@backfill-0000000000");
    assert!(
        said.starts_with(&format!(
            "zkcron: task rep: backfill of 5 tick(s) in [{FROM}, 2026-01-01T00:05:00Z) requested, id {id}\n"
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!("backfill {id}: 5 of 5 done, 0 failed (done)")),
        "{said}"
    );

    let runs = local.runs();
    let expected: Vec<(String, String)> = (0..5)
        .map(|m| {
            let tick = at_minute(m);
            (format!("{id}-{}", tick.timestamp()), rfc(tick))
        })
        .collect();
    assert_eq!(runs, expected, "each tick once, oldest first");

    let out = local.cli(&["history", "rep", "--json"]);
    let history: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let history = history.as_array().unwrap();
    assert_eq!(history.len(), 5);
    assert!(
        history
            .iter()
            .all(|run| run["trigger"] == "manual" && run["backfill"] == true),
        "{history:?}"
    );
    let table = text(&local.cli(&["history", "rep"]).stdout);
    assert!(table.contains("backfill"), "{table}");

    let listed = local.status();
    assert!(
        listed.contains(&id) && listed.contains("done") && listed.contains("5/5"),
        "{listed}"
    );
}

#[test]
fn a_failed_tick_makes_wait_exit_1_naming_it_and_the_rest_still_run_and_metrics_count_them() {
    let local = Local::new();
    let out_file = local.scratch.out("runs");
    local
        .scratch
        .write_config("[http]\nlisten = \"127.0.0.1:0\"\n");
    local
        .scratch
        .write_task("rep", &recording(&out_file, "0", "01"));
    let daemon = local.scratch.start_daemon(&[]);
    let out = local.backfill("rep", at_minute(0), at_minute(3), &["--wait"]);
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{said}{}", text(&out.stderr));
    let id = request_id(&out);
    assert!(said.contains("3 of 3 done, 1 failed"), "{said}");
    let failed = format!("{id}-{}", at_minute(1).timestamp());
    assert!(
        said.contains(&format!("zkcron: failed: {failed}: exit code 3")),
        "{said}"
    );
    assert_eq!(local.runs().len(), 3);
    let (_, metrics) = common::http_get(&daemon.served_address(), "/metrics");
    for line in [
        "zkcron_backfill_runs_total{outcome=\"success\"} 2",
        "zkcron_backfill_runs_total{outcome=\"failure\"} 1",
        "zkcron_backfills_waiting 0",
    ] {
        assert!(metrics.contains(line), "{line} missing:\n{metrics}");
    }
}

#[test]
fn a_kill_9_of_the_daemon_mid_way_runs_no_tick_twice_and_the_restart_finishes_the_rest() {
    let local = Local::new();
    let out_file = local.scratch.out("runs");
    local
        .scratch
        .write_task("rep", &recording(&out_file, "0.2", "99"));
    let mut daemon: DaemonProcess = local.scratch.start_daemon(&[]);
    let out = local.backfill("rep", at_minute(0), at_minute(12), &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id = request_id(&out);
    common::wait_for("four ticks to run", LIMIT, || local.runs().len() >= 4);
    daemon.signal(Signal::SIGKILL);
    daemon.wait_exit(LIMIT);
    let mut command = local.scratch.daemon_command();
    command
        .arg("--state-dir")
        .arg(&local.state)
        .args(["--node-id", "test-node"]);
    let restarted = local.scratch.spawn_daemon(command);
    // The log is appended to: the second start.
    restarted.wait_for_log_count("zkcron started", 2, LIMIT);
    common::wait_for("the backfill to end", LIMIT, || {
        local.status().contains("12/12")
    });
    let runs = local.runs();
    let mut ids: Vec<&String> = runs.iter().map(|(id, _)| id).collect();
    let before = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), before, "a tick ran twice: {runs:?}");
    // The tick cut short by the kill (if it had started) counts as failed; no other is lost.
    assert!(runs.len() >= 11, "{runs:?}");
    let listed = local.status();
    assert!(listed.contains(&id), "{listed}");
    let json = std::fs::read_to_string(local.state.join("backfills.json")).unwrap();
    assert!(
        json.contains("zkcron stopped while it ran") || runs.len() == 12,
        "{json}"
    );
}

#[test]
fn a_cancelled_backfill_starts_no_further_tick() {
    let local = Local::new();
    let out_file = local.scratch.out("runs");
    local
        .scratch
        .write_task("rep", &recording(&out_file, "0.3", "99"));
    let _daemon = local.scratch.start_daemon(&[]);
    let out = local.backfill("rep", at_minute(0), at_minute(50), &[]);
    let id = request_id(&out);
    common::wait_for("two ticks to run", LIMIT, || local.runs().len() >= 2);
    let status = text(&local.cli(&["status"]).stdout);
    assert!(
        status.contains(&format!("backfill {id}: ")) && status.contains(" of 50 done"),
        "{status}"
    );
    let out = local.cli(&["backfill", "--cancel", &id]);
    let cancelled = now();
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    assert!(
        said.starts_with(&format!("zkcron: backfill {id} cancelled after ")),
        "{said}"
    );
    let (finished, running) = common::cancel::cancelled_after(&said);
    common::wait_for("the cancel to show", LIMIT, || {
        local.status().contains("cancelled by")
    });
    // The tick running at the cancel finishes; none starts after it. Watch three more ticks'
    // length (each sleeps 0.3 s) after that tick ended, long enough for one to start.
    common::wait_for("the running tick to end", LIMIT, || {
        local
            .status()
            .lines()
            .any(|l| l.contains(&id) && l.contains(" - "))
    });
    let ended = now();
    common::wait_for("a second after the running tick ended", LIMIT, || {
        now() > ended + 1.0
    });
    common::cancel::assert_no_start_after(&local.starts(), cancelled, finished, running);
    let out = local.cli(&["backfill", "--cancel", &id]);
    assert!(
        text(&out.stdout).contains("is already cancelled by"),
        "{}",
        text(&out.stdout)
    );
    let out = local.cli(&["backfill", "--cancel", "rep@backfill-0000000099"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "zkcron: error: there is no backfill rep@backfill-0000000099 (`zkcron backfill --status` lists them)\n"
    );
}

#[test]
fn a_range_over_ten_thousand_ticks_an_empty_one_and_an_unknown_task_are_refused() {
    let local = Local::new();
    local.scratch.write_task(
        "secs",
        "schedule = \"* * * * * *\"\ncommand = [\"true\"]\nenabled = true\n",
    );
    let _daemon = local.scratch.start_daemon(&[]);
    let from = at_minute(0);
    let out = local.backfill("secs", from, from + TimeDelta::hours(3), &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "zkcron: error: cannot backfill task secs: the range holds 10800 ticks of the schedule, \
         more than 10000 (at most 10000 ticks per request): split it into several requests\n"
    );
    let out = local.backfill("secs", from, from, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("is not before --to"),
        "{}",
        text(&out.stderr)
    );
    let out = local.backfill("sec", from, from + TimeDelta::minutes(1), &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("unknown task sec: the daemon runs no task sec from")
            && text(&out.stderr).contains("did you mean secs?"),
        "{}",
        text(&out.stderr)
    );
    let out = local.cli(&["backfill", "secs", "--from", "yesterday", "--to", FROM]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("write an RFC 3339 instant like 2026-03-08T00:00:00Z"),
        "{}",
        text(&out.stderr)
    );
    assert!(local.status().contains("no backfill requests"));
}
