//! End-to-end tests of the read-only subcommands: `validate`, `schedule`, `next`, `man`,
//! `completions`, and usage errors. Each runs the real binary on files the test writes into a
//! temp dir.

mod common;

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
    assert!(
        stderr(&output).contains(
            "the zookeeper backend needs to know where ZooKeeper is: set [coordination.zookeeper] \
             connect = \"HOST:PORT\" or pass --zookeeper HOST:PORT"
        ),
        "{}",
        stderr(&output)
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
    for sub in ["run", "validate", "schedule", "next", "completions"] {
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
