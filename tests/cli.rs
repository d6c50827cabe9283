//! End-to-end tests of the read-only subcommands: `validate`, `schedule`, `next`, `man`,
//! `completions`, and usage errors. Each runs the real binary on files the test writes into a
//! temp dir.

mod common;

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use common::{Scratch, run_zkcron};

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn schedule_prints_instants_with_the_zone_offset_across_a_dst_gap() {
    let output = run_zkcron(&[
        "schedule",
        "30 2 * * *",
        "--tz",
        "America/New_York",
        "--after",
        "2026-03-07T12:00:00Z",
        "-n",
        "2",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(
        lines[0].starts_with("2026-03-08T03:00:00-04:00"),
        "{lines:?}"
    );
    assert!(lines[0].ends_with("2026-03-08T07:00:00Z"), "{lines:?}");
    assert!(
        lines[1].starts_with("2026-03-09T02:30:00-04:00"),
        "{lines:?}"
    );
}

#[test]
fn schedule_of_star_slash_two_day_of_month_with_monday_lists_mondays_on_odd_days_as_cronie() {
    let output = run_zkcron(&[
        "schedule",
        "0 0 */2 * MON",
        "--after",
        "2026-01-01T00:00:00Z",
        "-n",
        "3",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    let days: Vec<&str> = text.lines().map(|line| &line[..10]).collect();
    assert_eq!(days, ["2026-01-05", "2026-01-19", "2026-02-09"], "{text}");
}

#[test]
fn schedule_defaults_to_utc_and_five_instants() {
    let output = run_zkcron(&["schedule", "@hourly", "--after", "2026-01-01T00:30:00Z"]);
    assert_eq!(output.status.code(), Some(0));
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5);
    assert!(lines[0].starts_with("2026-01-01T01:00:00+00:00"), "{text}");
    assert!(lines[4].starts_with("2026-01-01T05:00:00+00:00"), "{text}");
}

#[test]
fn schedule_of_an_interval_prints_multiples_of_it_since_the_epoch_and_an_offset_shifts_them() {
    let ticks = |expression: &str, zone: &str| {
        let output = run_zkcron(&[
            "schedule",
            expression,
            "--tz",
            zone,
            "--after",
            "2026-01-01T00:07:30Z",
            "-n",
            "3",
        ]);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        stdout(&output)
            .lines()
            .map(|line| line.rsplit(' ').next().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ticks("@every 15m", "UTC"),
        [
            "2026-01-01T00:15:00Z",
            "2026-01-01T00:30:00Z",
            "2026-01-01T00:45:00Z"
        ]
    );
    // A zone only changes how the same instants are shown.
    assert_eq!(
        ticks("@every 15m", "Asia/Kolkata"),
        ticks("@every 15m", "UTC")
    );
    assert_eq!(
        ticks("@every 1h/10m", "UTC"),
        [
            "2026-01-01T00:10:00Z",
            "2026-01-01T01:10:00Z",
            "2026-01-01T02:10:00Z"
        ]
    );
    let output = run_zkcron(&["schedule", "@every 1h/1h"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output)
            .contains("the offset \"1h\" of \"@every 1h/1h\" is not smaller than the interval"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn schedule_with_a_bad_expression_exits_1_naming_the_field() {
    let output = run_zkcron(&["schedule", "0 0 * 13 *"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("month field \"13\" is invalid; allowed: 1-12"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn schedule_with_a_bad_time_zone_exits_1_with_a_suggestion() {
    let output = run_zkcron(&["schedule", "@daily", "--tz", "America/New_Yrok"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("did you mean \"America/New_York\""),
        "{}",
        stderr(&output)
    );
}

#[test]
fn schedule_rejects_reboot_with_a_reason() {
    let output = run_zkcron(&["schedule", "@reboot"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("@reboot is not supported"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn usage_errors_exit_2() {
    let output = run_zkcron(&["schedule", "@daily", "--after", "yesterday"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("RFC 3339"), "{}", stderr(&output));
    assert_eq!(run_zkcron(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(run_zkcron(&[]).status.code(), Some(2));
}

#[test]
fn version_prints_the_crate_version() {
    let output = run_zkcron(&["--version"]);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        stdout(&output).trim(),
        format!("zkcron {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn next_lists_each_task_with_its_next_fire_in_its_zone() {
    let scratch = Scratch::new();
    scratch.write_task(
        "berlin",
        "schedule = \"30 2 * * *\"\ntimezone = \"Europe/Berlin\"\ncommand = \"true\"\n",
    );
    scratch.write_task(
        "off",
        "schedule = \"@daily\"\ncommand = \"true\"\nenabled = false\n",
    );
    let output = run_zkcron(&["next", "--jobs-dir", scratch.jobs().to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    let berlin = text.lines().find(|l| l.starts_with("berlin")).expect(&text);
    assert!(
        berlin.contains("T02:30:00+0") || berlin.contains("T03:00:00+02:00"),
        "{berlin}"
    );
    assert!(berlin.contains("30 2 * * * (Europe/Berlin)"), "{berlin}");
    let off = text.lines().find(|l| l.starts_with("off")).expect(&text);
    assert!(off.contains("disabled"), "{off}");
}

#[test]
fn next_reports_invalid_files_and_exits_1() {
    let scratch = Scratch::new();
    scratch.write_task("good", "schedule = \"@daily\"\ncommand = \"true\"\n");
    scratch.write_task("bad", "schedule = \"@daily\"\n");
    let output = run_zkcron(&["next", "--jobs-dir", scratch.jobs().to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stdout(&output).lines().any(|l| l.starts_with("good")));
    assert!(stderr(&output).contains("bad.toml"), "{}", stderr(&output));
}

#[test]
fn validate_accepts_a_clean_jobs_dir() {
    let scratch = Scratch::new();
    scratch.write_task("a", "schedule = \"*/5 * * * *\"\ncommand = [\"true\"]\n");
    scratch.write_task("b", "schedule = \"@weekly\"\ncommand = \"echo hi\"\n");
    std::fs::write(scratch.jobs().join("README"), "not a task").unwrap();
    std::fs::write(scratch.jobs().join("c.toml.dpkg-old"), "garbage").unwrap();
    let output = run_zkcron(&["validate", scratch.jobs().to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("2 valid task(s)"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn validate_lists_every_error_across_files_and_exits_1() {
    let scratch = Scratch::new();
    scratch.write_task("good", "schedule = \"@daily\"\ncommand = \"true\"\n");
    scratch.write_task(
        "typo",
        "schedule = \"@daily\"\ncommand = \"true\"\ntimezon = \"UTC\"\n",
    );
    scratch.write_task("hour", "schedule = \"0 25 * * *\"\ncommand = \"true\"\n");
    scratch.write_task(
        "zone",
        "schedule = \"@daily\"\ncommand = \"true\"\ntimezone = \"Europe/Berln\"\n",
    );
    scratch.write_task("reboot", "schedule = \"@reboot\"\ncommand = \"true\"\n");
    scratch.write_task(
        "duration",
        "schedule = \"@daily\"\ncommand = \"true\"\ntimeout = \"forever\"\n",
    );
    scratch.write_task(
        "policy",
        "schedule = \"@daily\"\ncommand = \"true\"\noverlap = \"sometimes\"\n",
    );
    scratch.write_task("syntax", "schedule = \"@daily\ncommand = \"true\"\n");
    scratch.write_task("Bad_Name", "schedule = \"@daily\"\ncommand = \"true\"\n");
    let output = run_zkcron(&["validate", scratch.jobs().to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    let jobs = scratch.jobs();
    let at =
        |file: &str, line: usize, col: usize| format!("{}:{line}:{col}", jobs.join(file).display());
    for expected in [
        at("typo.toml", 3, 1),
        "unknown key `timezon`".to_string(),
        "did you mean `timezone`?".to_string(),
        jobs.join("hour.toml").display().to_string() + ":1:",
        "hour field \"25\" is invalid; allowed: 0-23".to_string(),
        "did you mean \"Europe/Berlin\"".to_string(),
        "@reboot is not supported".to_string(),
        "forever".to_string(),
        "\"sometimes\"".to_string(),
        jobs.join("syntax.toml").display().to_string() + ":",
        "Bad_Name".to_string(),
    ] {
        assert!(err.contains(&expected), "missing {expected:?} in:\n{err}");
    }
    assert!(
        stdout(&output).contains("1 valid task(s)"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn validate_reports_a_broken_config_file() {
    let scratch = Scratch::new();
    let config =
        scratch.write_config("[scheduler]\nshutdown_grace = \"30s\"\ndefault_timezon = \"UTC\"\n");
    let output = run_zkcron(&[
        "validate",
        "--config",
        config.to_str().unwrap(),
        scratch.jobs().to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(err.contains("zkcron.toml:3:1"), "{err}");
    assert!(err.contains("did you mean `default_timezone`?"), "{err}");
}

#[test]
fn validate_of_a_missing_path_exits_1_naming_it() {
    let output = run_zkcron(&["validate", "/nonexistent/jobs.d"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("/nonexistent/jobs.d"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn run_with_the_zookeeper_backend_but_no_connect_string_says_how_to_give_one() {
    let scratch = Scratch::new();
    let config = scratch.write_config("[coordination]\nbackend = \"zookeeper\"\n");
    let jobs = scratch.jobs();
    let output = run_zkcron(&[
        "run",
        "--config",
        config.to_str().unwrap(),
        "--jobs-dir",
        jobs.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains(&format!(
            "error: the zookeeper backend needs to know where ZooKeeper is\n--> {}\n = help: \
             set [coordination.zookeeper] connect = \"HOST:PORT\" or pass --zookeeper HOST:PORT",
            config.display()
        )),
        "{err}"
    );
}

#[test]
fn run_with_a_node_id_or_cluster_that_cannot_be_a_zookeeper_path_names_the_rule() {
    let scratch = Scratch::new();
    let jobs = scratch.jobs();
    for (flag, value, what) in [
        ("--node-id", "a/b", "node id"),
        ("--cluster", "..", "cluster"),
    ] {
        let output = run_zkcron(&[
            "run",
            "--jobs-dir",
            jobs.to_str().unwrap(),
            "--zookeeper",
            "127.0.0.1:2181",
            flag,
            value,
        ]);
        assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
        assert!(
            stderr(&output).contains(&format!(
                "{what} `{value}` cannot be part of a ZooKeeper path; it must match \
                 [A-Za-z0-9][A-Za-z0-9._-]{{0,99}}"
            )),
            "{}",
            stderr(&output)
        );
    }
}

#[test]
fn man_prints_a_roff_page_that_names_every_public_subcommand() {
    let output = run_zkcron(&["man"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let page = stdout(&output);
    assert!(page.contains(".TH zkcron 1"), "{page}");
    for section in [
        ".SH NAME",
        ".SH SYNOPSIS",
        ".SH COMMANDS",
        ".SH GUARANTEES",
        ".SH FILES",
        ".SH \"EXIT STATUS\"",
    ] {
        assert!(page.contains(section), "missing {section}: {page}");
    }
    for sub in [
        "run",
        "validate",
        "schedule",
        "next",
        "completions",
        "status",
        "explain",
        "history",
        "trigger",
        "pause",
        "resume",
        "drain",
        "undrain",
    ] {
        assert!(
            page.contains(&format!(".SS \"zkcron {sub}\"")),
            "missing {sub}: {page}"
        );
    }
    // Options come with their value names and defaults, hyphens escaped for roff.
    assert!(page.contains("\\fB\\-\\-config\\fR \\fIFILE\\fR"), "{page}");
    assert!(page.contains("[default: UTC]"), "{page}");
    // The hidden `man` subcommand itself is not advertised.
    assert!(!page.contains("zkcron man\""), "{page}");
}

/// zkcron-task(5), the task-file format, documents every key the task parser accepts (and the
/// keys of `retries`): adding a key without documenting it fails here.
#[test]
fn man_zkcron_task_documents_every_task_key() {
    let output = run_zkcron(&["man", "zkcron-task"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let page = stdout(&output);
    assert!(page.starts_with(".TH ZKCRON\\-TASK 5 "), "{page}");
    for section in [".SH NAME", ".SH KEYS", ".SH ENVIRONMENT", ".SH EXAMPLE"] {
        assert!(page.contains(section), "missing {section}: {page}");
    }
    for key in zkcron::task::TASK_KEYS {
        assert!(
            page.contains(&format!(".TP\n\\fB{key}\\fR\n")),
            "zkcron-task(5) does not document the task key `{key}`"
        );
    }
    for key in zkcron::task::RETRY_KEYS {
        assert!(
            page.contains(&format!("\\fB{key}\\fR")),
            "zkcron-task(5) does not document retries.{key}"
        );
    }
    // zkcron(1) points at it.
    let main_page = stdout(&run_zkcron(&["man"]));
    assert!(
        main_page.contains("\\fBzkcron\\-task\\fR(5)"),
        "{main_page}"
    );
}

#[test]
fn completions_for_each_packaged_shell_complete_the_subcommands() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef zkcron"),
        ("fish", "complete -c zkcron"),
    ] {
        let output = run_zkcron(&["completions", shell]);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{shell}: {}",
            stderr(&output)
        );
        let script = stdout(&output);
        assert!(script.contains(marker), "{shell}: {script}");
        assert!(script.contains("validate"), "{shell}: {script}");
        assert!(script.contains("undrain"), "{shell}: {script}");
        assert!(script.contains("jobs-dir"), "{shell}: {script}");
    }
}

#[test]
fn completions_for_an_unknown_shell_is_a_usage_error_listing_the_shells() {
    let output = run_zkcron(&["completions", "tcsh"]);
    assert_eq!(output.status.code(), Some(2));
    let text = stderr(&output);
    assert!(text.contains("invalid value 'tcsh'"), "{text}");
    assert!(
        text.contains("bash") && text.contains("fish") && text.contains("zsh"),
        "{text}"
    );
}

/// Writes to /dev/full fail with ENOSPC: a full or broken stdout is reported, not a panic.
#[test]
fn man_and_completions_report_an_unwritable_stdout() {
    for (args, what) in [
        (
            &["man"][..],
            "cannot write the manual page to standard output",
        ),
        (
            &["completions", "bash"][..],
            "cannot write the bash completion script to standard output",
        ),
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full exists on Linux");
        let output = common::zkcron()
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(full)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        let text = stderr(&output);
        assert!(text.contains(what), "{args:?}: {text}");
        assert!(text.contains("No space left on device"), "{args:?}: {text}");
        assert!(!text.contains("panicked"), "{args:?}: {text}");
    }
}

/// Regression: an OS error was printed twice ("File exists (os error 17): File exists (os error
/// 17)"), once in the error's message and once more as its source.
#[test]
fn run_prints_an_os_error_once() {
    let scratch = Scratch::new();
    let state = scratch.path().join("state");
    std::fs::create_dir(state.join("zkcron.lock")).unwrap();
    let output = run_zkcron(&[
        "run",
        "--jobs-dir",
        scratch.jobs().to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains(&format!(
            "cannot open lock file {}: Is a directory (os error 21)\n",
            state.join("zkcron.lock").display()
        )),
        "{err}"
    );
    assert_eq!(err.matches("os error").count(), 1, "{err}");
}

/// Runs `zkcron args...` to completion, killing it and failing if it takes longer than `limit`
/// (a `run` that should have refused to start, or a read that blocks).
fn run_within(args: &[&OsStr], limit: Duration) -> Output {
    run_within_as(None, args, limit)
}

/// Like [`run_within`], as user `uid` (with its group of the same number) when given.
#[allow(clippy::disallowed_methods)]
fn run_within_as(uid: Option<u32>, args: &[&OsStr], limit: Duration) -> Output {
    let mut command = common::zkcron();
    if let Some(uid) = uid {
        command.uid(uid).gid(uid);
    }
    let mut child = command
        .args(args)
        .env("XDG_STATE_HOME", std::env::temp_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("zkcron runs");
    let deadline = std::time::Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            panic!(
                "zkcron {args:?} still ran after {limit:?}; stderr:\n{}",
                stderr(&output)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// `validate --config CONFIG` and `run --config CONFIG` both exit 1, each printing every
/// `expected` text: one validation for both.
#[track_caller]
fn assert_validate_and_run_refuse(config: &Path, expected: &[&str]) {
    assert_validate_and_run_refuse_as(None, config, expected);
}

/// Like [`assert_validate_and_run_refuse`], as user `uid` when given.
#[track_caller]
fn assert_validate_and_run_refuse_as(uid: Option<u32>, config: &Path, expected: &[&str]) {
    let config = config.as_os_str();
    for args in [
        &[OsStr::new("validate"), OsStr::new("--config"), config][..],
        &[OsStr::new("run"), OsStr::new("--config"), config][..],
    ] {
        let output = run_within_as(uid, args, Duration::from_secs(20));
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {err}");
        for text in expected {
            assert!(err.contains(text), "{args:?}: missing {text:?} in:\n{err}");
        }
    }
}

/// Regression: `--config /dev/zero` grew the process to 4 GiB, and a FIFO made it hang.
#[test]
fn validate_and_run_refuse_a_config_that_is_a_device_or_a_fifo_without_reading_it() {
    let scratch = Scratch::new();
    let fifo = scratch.path().join("fifo.toml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    assert_validate_and_run_refuse(
        Path::new("/dev/zero"),
        &[
            "error: a character device, not a config file\n--> /dev/zero",
            "= help: point --config at a regular file",
        ],
    );
    assert_validate_and_run_refuse(&fifo, &["error: a named pipe (FIFO), not a config file"]);
}

#[test]
fn validate_and_run_refuse_a_config_file_others_can_write() {
    let scratch = Scratch::new();
    let config = scratch.write_config("[scheduler]\nstate_dir = \"state\"\n");
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o646)).unwrap();
    assert_validate_and_run_refuse(
        &config,
        &[
            &format!(
                "error: the file is world-writable (mode 0646), so other users could change \
                 zkcron's configuration (and so the user tasks run as); zkcron refuses it, as \
                 cron does\n--> {}",
                config.display()
            ),
            &format!("= help: run `chmod go-w {}`", config.display()),
        ],
    );
}

/// Regression: a world-writable jobs dir was accepted.
#[test]
fn validate_and_run_refuse_a_jobs_dir_others_can_write() {
    let scratch = Scratch::new();
    let config = scratch.write_config("[scheduler]\nstate_dir = \"state\"\n");
    std::fs::set_permissions(scratch.jobs(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let jobs = scratch.jobs().display().to_string();
    assert_validate_and_run_refuse(
        &config,
        &[
            &format!(
                "error: the jobs dir is group- and world-writable (mode 0777), so other users \
                 could add tasks that zkcron runs; zkcron refuses it, as cron refuses such a \
                 directory\n--> {jobs}"
            ),
            &format!("= help: run `chmod go-w {jobs}`"),
        ],
    );
}

#[test]
fn validate_names_every_odd_file_in_the_jobs_dir() {
    let scratch = Scratch::new();
    let jobs = scratch.jobs();
    scratch.write_task("good", "schedule = \"@daily\"\ncommand = \"true\"\n");
    let _socket = common::make_odd_entries(&jobs);
    let output = run_within(
        &[
            OsStr::new("validate"),
            jobs.as_os_str(),
            OsStr::new("/dev/null"),
        ],
        Duration::from_secs(20),
    );
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    let odd = common::ODD_ENTRIES
        .iter()
        .map(|(name, message)| (jobs.join(format!("{name}.toml")), *message));
    let device = (
        PathBuf::from("/dev/null"),
        "a character device, not a task file",
    );
    for (path, message) in odd.chain([device]) {
        let expected = format!("error: {message}\n--> {}\n", path.display());
        assert!(err.contains(&expected), "missing {expected:?} in:\n{err}");
    }
    assert!(
        stdout(&output).contains("6 error(s); 1 valid task(s)"),
        "{}",
        stdout(&output)
    );
}

/// Who a test runs zkcron as so that permissions apply: nobody (uid 65534) when the test runs
/// as root, whom they do not bind, else the test's own user; the uid to switch to, and the name.
fn unprivileged() -> (Option<u32>, String) {
    if nix::unistd::geteuid().is_root() {
        (Some(65534), "nobody".to_string())
    } else {
        let me = nix::unistd::User::from_uid(nix::unistd::geteuid());
        (None, me.unwrap().unwrap().name)
    }
}

#[test]
fn validate_names_a_task_file_it_cannot_read_and_who_could_not() {
    let scratch = Scratch::new();
    let as_root = nix::unistd::geteuid().is_root();
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    scratch.write_task("secret", "schedule = \"@daily\"\ncommand = \"true\"\n");
    let secret = scratch.jobs().join("secret.toml");
    // Root reads anything: as root, validate runs as nobody and the file is root's alone.
    std::fs::set_permissions(
        &secret,
        std::fs::Permissions::from_mode(if as_root { 0o600 } else { 0o000 }),
    )
    .unwrap();
    let mut command = common::zkcron();
    command
        .args(["validate", secret.to_str().unwrap()])
        .env("XDG_STATE_HOME", scratch.path())
        .env("HOME", scratch.path());
    let (uid, who) = unprivileged();
    if let Some(uid) = uid {
        command.uid(uid).gid(uid);
    }
    let output = command.stdin(Stdio::null()).output().unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains(&format!(
            "error: cannot read the task file: Permission denied (os error 13)\n--> {}\n = \
             help: zkcron runs as {who:?}: make the file and its directories readable by that user",
            secret.display()
        )),
        "{err}"
    );
}

// What `run` needs, checked by `validate` too (one validation for both), with the allowed range.

/// Regression: each of these was "configuration OK" for `validate`.
#[test]
fn validate_and_run_refuse_zookeeper_settings_zookeeper_would_refuse_or_clamp() {
    let scratch = Scratch::new();
    for (zookeeper, expected) in [
        (
            "connect = \"zk1:0\"",
            "`zk1:0` in `zk1:0` is not HOST:PORT with a port from 1 to 65535",
        ),
        (
            "connect = \"zk1:2181/apps/../cron\"",
            "the chroot `/apps/../cron` in `zk1:2181/apps/../cron` has a `..` element; ZooKeeper \
             paths are absolute, without `.` or `..`",
        ),
        (
            "connect = \"zk1:2181/zookeeper/cron\"",
            "the chroot `/zookeeper/cron` in `zk1:2181/zookeeper/cron` is under /zookeeper, which \
             ZooKeeper reserves for itself",
        ),
        (
            "connect = \"zk1:2181\"\nsession_timeout = \"100y\"",
            "the session timeout 100years is out of range: it must be from 1s to 24days 20h 31m \
             23s 647ms (ZooKeeper sends it as a 32-bit count of milliseconds)",
        ),
        (
            "connect = \"zk1:2181\"\nsession_timeout = \"25days\"",
            "it must be from 1s to 24days 20h 31m 23s 647ms",
        ),
    ] {
        let config = scratch.write_config(&format!(
            "[coordination]\nbackend = \"zookeeper\"\n[coordination.zookeeper]\n{zookeeper}\n"
        ));
        assert_validate_and_run_refuse(&config, &[expected]);
    }
    // The flag is checked by the same rule (a usage error there).
    let output = run_zkcron(&["run", "--zookeeper", "zk1:0"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("is not HOST:PORT with a port from 1 to 65535"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn validate_and_run_refuse_the_zookeeper_backend_without_connect() {
    let scratch = Scratch::new();
    let config = scratch.write_config("[coordination]\nbackend = \"zookeeper\"\n");
    assert_validate_and_run_refuse(
        &config,
        &["error: the zookeeper backend needs to know where ZooKeeper is"],
    );
}

#[test]
fn validate_notes_a_pool_or_every_node_task_whose_requirements_this_node_misses_without_failing() {
    // Given a cluster config with labels zone=west, an every-node task for zone=east and a pool
    // for releases >=9.
    let scratch = Scratch::new();
    let daily = "schedule = \"0 3 * * *\"\ncommand = [\"true\"]\n";
    scratch.write_task(
        "clean",
        &format!("{daily}run_on = \"every_node\"\nrequire_labels = {{ zone = \"east\" }}\n"),
    );
    scratch.write_task(
        "plain",
        &format!("{daily}require_labels = {{ zone = \"east\" }}\n"),
    );
    scratch.write_task(
        "shards",
        &format!("{daily}work_items = 16\nversion_req = \">=9\"\n"),
    );
    let config = scratch.write_config(
        "[node]\nid = \"web-1\"\nlabels = { zone = \"west\" }\n[coordination]\nbackend = \
         \"zookeeper\"\n[coordination.zookeeper]\nconnect = \"127.0.0.1:2181\"\n",
    );
    let args = ["validate", "--config", config.to_str().unwrap()];
    let mut args: Vec<&str> = args.to_vec();
    let jobs = scratch.jobs();
    args.push(jobs.to_str().unwrap());
    // When it is validated, then it is valid, with notes saying this node takes no share.
    let output = run_zkcron(&args);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}{}", stderr(&output));
    let note = format!(
        "note: {}: task clean: this node (web-1) does not run it on its own: require_labels \
         needs zone=east (this node has zone=west); it runs on the nodes that meet it, and \
         `zkcron status` says `no live node may run it` while none does",
        jobs.join("clean.toml").display()
    );
    assert!(stdout.contains(&note), "{stdout}");
    // A pool whose version_req this node's release does not match: it takes none of its items.
    let note = format!(
        "note: {}: task shards: this node (web-1) takes none of its 16 work items: version_req \
         >=9 does not match this node's release {}",
        jobs.join("shards.toml").display(),
        env!("CARGO_PKG_VERSION")
    );
    assert!(stdout.contains(&note), "{stdout}");
    assert!(
        stdout.contains("configuration OK; 3 valid task(s)"),
        "{stdout}"
    );
    // A task its leader runs is no such share: no note for it.
    assert!(!stdout.contains("task plain"), "{stdout}");
}

#[test]
fn validate_and_run_refuse_a_state_dir_that_is_a_file() {
    let scratch = Scratch::new();
    let file = scratch.path().join("state-file");
    std::fs::write(&file, "").unwrap();
    let config = scratch.write_config("[scheduler]\nstate_dir = \"state-file\"\n");
    assert_validate_and_run_refuse(
        &config,
        &[&format!(
            "error: the state dir is a regular file, not a directory\n--> {}\n = help: point \
             --state-dir or [scheduler].state_dir at a directory (zkcron creates it if it is \
             missing)",
            file.display()
        )],
    );
    let config = scratch.write_config("[scheduler]\nstate_dir = \"state-file/sub\"\n");
    assert_validate_and_run_refuse(
        &config,
        &[&format!(
            "error: the state dir {} cannot be created: {} is a regular file, not a directory",
            file.join("sub").display(),
            file.display()
        )],
    );
}

/// Regression: "the config file does not exist" said nothing of the fix.
#[test]
fn validate_and_run_of_a_missing_config_file_say_how_to_give_one() {
    let scratch = Scratch::new();
    let missing = scratch.path().join("missing.toml");
    assert_validate_and_run_refuse(
        &missing,
        &[&format!(
            "error: the config file does not exist\n--> {}\n = help: create it, or pass --config \
             with the right path; without --config zkcron reads /etc/zkcron/zkcron.toml only if \
             it exists",
            missing.display()
        )],
    );
}

/// Regression: `validate /etc/passwd/x` said "cannot read it: Not a directory (os error 20)",
/// naming neither the part of the path at fault nor the fix; so did `--config` there.
#[test]
fn validate_of_a_path_through_a_file_names_that_file_and_the_fix() {
    let scratch = Scratch::new();
    let file = scratch.path().join("file");
    std::fs::write(&file, "").unwrap();
    let through = file.join("x.toml");
    let output = run_zkcron(&["validate", through.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let expected = format!(
        "error: cannot read it: the path goes through {}, which is a regular file, not a \
         directory\n--> {}\n = help: check the path: validate takes task files and directories \
         of them",
        file.display(),
        through.display()
    );
    assert!(stderr(&output).contains(&expected), "{}", stderr(&output));

    assert_validate_and_run_refuse(
        &through,
        &[&format!(
            "error: cannot read the config file: the path goes through {}, which is a regular \
             file, not a directory\n--> {}\n = help: create it, or pass --config with the right \
             path",
            file.display(),
            through.display()
        )],
    );
    let config =
        scratch.write_config("[scheduler]\nstate_dir = \"state\"\njobs_dir = \"file/jobs\"\n");
    assert_validate_and_run_refuse(
        &config,
        &[&format!(
            "error: cannot read the jobs dir: the path goes through {}, which is a regular file, \
             not a directory\n--> {}\n = help: point --jobs-dir or [scheduler].jobs_dir at your \
             task files",
            file.display(),
            file.join("jobs").display()
        )],
    );
}

/// Regression: `validate` said "configuration OK" for a state dir zkcron's user cannot write,
/// and `run` then failed with "cannot create state dir …: Permission denied" (or, for an
/// existing one, "cannot open lock file …").
#[test]
fn validate_and_run_refuse_a_state_dir_zkcrons_user_cannot_write() {
    let scratch = Scratch::new();
    let (uid, who) = unprivileged();
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let locked = scratch.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
    let owner = if uid.is_some() {
        "uid 0 (root)".to_string()
    } else {
        format!("uid {} ({who})", nix::unistd::geteuid())
    };
    let not_writable = format!(
        "is not writable by {who:?}, who zkcron runs as (mode 0555, owned by {owner}): \
         Permission denied (os error 13)"
    );
    let elsewhere = "or point --state-dir or [scheduler].state_dir elsewhere";

    // An existing state dir.
    let config = scratch.write_config("[scheduler]\nstate_dir = \"locked\"\n");
    assert_validate_and_run_refuse_as(
        uid,
        &config,
        &[&format!(
            "error: the state dir {not_writable}\n--> {dir}\n = help: run `chown {who} {dir}`, \
             {elsewhere}",
            dir = locked.display()
        )],
    );

    // One to be created under a parent the user cannot write.
    let config = scratch.write_config("[scheduler]\nstate_dir = \"locked/state\"\n");
    let dir = locked.join("state");
    assert_validate_and_run_refuse_as(
        uid,
        &config,
        &[&format!(
            "error: the state dir {} cannot be created: {} {not_writable}\n--> {}\n = help: run \
             `mkdir -p {dir} && chown {who} {dir}`, {elsewhere}",
            dir.display(),
            locked.display(),
            locked.display(),
            dir = dir.display()
        )],
    );
}

#[test]
fn validate_and_run_refuse_a_missing_jobs_dir() {
    let scratch = Scratch::new();
    let config =
        scratch.write_config("[scheduler]\nstate_dir = \"state\"\njobs_dir = \"nowhere\"\n");
    assert_validate_and_run_refuse(
        &config,
        &[&format!(
            "error: the jobs dir does not exist\n--> {}\n = help: create it, or point \
             --jobs-dir or [scheduler].jobs_dir at your task files",
            scratch.path().join("nowhere").display()
        )],
    );
}

#[test]
fn validate_and_run_refuse_an_unknown_default_user_when_root() {
    if common::rerun_as_namespace_root(
        "validate_and_run_refuse_an_unknown_default_user_when_root",
        "checks what zkcron does as root",
    ) {
        return;
    }
    let scratch = Scratch::new();
    let config = scratch.write_config(
        "[scheduler]\nstate_dir = \"state\"\ndefault_user = \"no-such-user-zkcron\"\n",
    );
    assert_validate_and_run_refuse(
        &config,
        &[
            "error: user \"no-such-user-zkcron\" does not exist on this host ([scheduler].default_user)",
            "= help: create the user, or fix the name",
        ],
    );
}

/// Only root switches users: for another user, default_user means nothing (run as nobody when
/// the tests run as root).
#[test]
fn validate_accepts_an_unknown_default_user_when_not_root() {
    let scratch = Scratch::new();
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = scratch.write_config(
        "[scheduler]\nstate_dir = \"state\"\ndefault_user = \"no-such-user-zkcron\"\n",
    );
    let (uid, _) = unprivileged();
    // The state dir is that user's.
    let state = scratch.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    nix::unistd::chown(&state, uid.map(nix::unistd::Uid::from_raw), None).unwrap();
    let args = [
        OsStr::new("validate"),
        OsStr::new("--config"),
        config.as_os_str(),
    ];
    let output = run_within_as(uid, &args, Duration::from_secs(20));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

#[test]
fn validate_refuses_a_shell_command_linux_would_not_start() {
    let scratch = Scratch::new();
    scratch.write_task(
        "huge",
        &format!(
            "schedule = \"@daily\"\ncommand = \"{}\"\n",
            "x".repeat(1_000_000)
        ),
    );
    let output = run_zkcron(&["validate", scratch.jobs().to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(
        err.contains(
            "error: `command` is 1000000 bytes; Linux refuses to start a program with any single \
             argument or environment string over 128 KiB (131071 bytes and its NUL), so every \
             run would fail"
        ),
        "{}",
        &err[..err.len().min(2000)]
    );
}

/// Regression: `run` printed a broken config as "zkcron: error: error: ...", and `validate`
/// counted a config with two problems as one error.
#[test]
fn run_and_validate_print_and_count_each_config_problem_once() {
    let scratch = Scratch::new();
    let config = scratch.write_config(
        "[scheduler]\nshutdown_grace = 5\nstate_dir = \"state\"\n[log]\nformat = \"xml\"\n",
    );
    let output = run_within(
        &[
            OsStr::new("run"),
            OsStr::new("--config"),
            config.as_os_str(),
        ],
        Duration::from_secs(20),
    );
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(!err.contains("error: error"), "{err}");
    assert_eq!(err.matches("error: `").count(), 2, "{err}");
    assert!(err.ends_with("zkcron: not starting: 2 error(s)\n"), "{err}");

    let output = run_zkcron(&["validate", "--config", config.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stdout(&output).contains("zkcron: 2 error(s); 0 valid task(s)"),
        "{}",
        stdout(&output)
    );
}
