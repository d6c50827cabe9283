//! Task files and the node config, through the public API and the file system: what users
//! write, what zkcron makes of it, and the messages (with line and column) it shows when
//! something is wrong. Each test is given / when / then.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use zkcron::config::{Backend, Config, LogFormat, load_config, parse_config};
use zkcron::task::{
    CatchUpPolicy, CommandLine, Identity, OverlapPolicy, RetryPolicy, TaskDefaults, TaskFileError,
    TaskSpec, ignore_reason, is_valid_task_name, load_jobs_dir, load_task_file, parse_task,
};

fn root() -> Identity {
    Identity {
        uid: 0,
        user_name: "root".into(),
    }
}

fn defaults_for(identity: Identity) -> TaskDefaults {
    common::task_defaults(identity, zkcron::task::TaskBackend::Local)
}

fn defaults() -> TaskDefaults {
    defaults_for(root())
}

const MINIMAL: &str = "schedule = \"*/5 * * * *\"\ncommand = \"true\"\n";

fn parse(text: &str) -> Result<TaskSpec, Vec<TaskFileError>> {
    parse_task("t", Path::new("/jobs/t.toml"), text, &defaults())
}

fn errors_of(text: &str) -> Vec<TaskFileError> {
    parse(text).expect_err("the task should be refused")
}

/// The only error, checked for its message, position and help.
#[track_caller]
fn only_error(errors: &[TaskFileError]) -> &TaskFileError {
    assert_eq!(errors.len(), 1, "expected one error, got: {errors:#?}");
    &errors[0]
}

#[track_caller]
fn assert_error(error: &TaskFileError, line: usize, column: usize, message_part: &str) {
    assert!(
        error.message.contains(message_part),
        "message {:?} lacks {message_part:?}",
        error.message
    );
    assert_eq!(
        (error.line, error.column),
        (line, column),
        "position of {:?}",
        error.message
    );
}

#[track_caller]
fn help(error: &TaskFileError) -> &str {
    error.help.as_deref().expect("a help line")
}

/// Writes a task file owned by root with mode 0644, as an administrator would.
fn write_task(dir: &Path, file_name: &str, text: &[u8]) -> PathBuf {
    let path = dir.join(file_name);
    fs::write(&path, text).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    path
}

// ---------------------------------------------------------------------------------------------
// Valid files

#[test]
fn minimal_file_gets_every_default() {
    // given a file with only the two required keys
    // when it is parsed
    let spec = parse(MINIMAL).unwrap();
    // then every other field has its documented default
    assert_eq!(&*spec.name, "t");
    assert_eq!(spec.path, PathBuf::from("/jobs/t.toml"));
    assert_eq!(spec.extras.description, None);
    assert_eq!(spec.schedule.expression(), "*/5 * * * *");
    assert_eq!(spec.schedule.timezone(), chrono_tz::UTC);
    assert_eq!(spec.command, CommandLine::Shell("true".into()));
    assert_eq!(spec.user, None);
    assert_eq!(spec.extras.group, None);
    assert_eq!(spec.extras.working_dir, None);
    assert!(spec.extras.env.is_empty());
    assert_eq!(spec.extras.timeout, None);
    assert_eq!(spec.extras.kill_grace, Duration::from_secs(10));
    assert_eq!(spec.overlap, OverlapPolicy::Skip);
    assert_eq!(spec.catch_up, CatchUpPolicy::Once);
    assert_eq!(spec.extras.starting_deadline, None);
    assert_eq!(spec.jitter, Duration::ZERO);
    assert_eq!(
        spec.extras.retries,
        RetryPolicy {
            attempts: 0,
            backoff: Duration::from_secs(10),
            max_backoff: Duration::from_secs(600)
        }
    );
    assert_eq!(spec.extras.version_req, None);
    assert!(!spec.kill_on_session_loss);
    assert_eq!(spec.on_node_loss, zkcron::task::NodeLossPolicy::Skip);
    assert!(spec.enabled);
}

#[test]
fn cluster_keys_are_read_and_checked() {
    let spec = parse(&format!(
        "{MINIMAL}kill_on_session_loss = true\non_node_loss = \"rerun\"\n"
    ))
    .unwrap();
    assert!(spec.kill_on_session_loss);
    assert_eq!(spec.on_node_loss, zkcron::task::NodeLossPolicy::Rerun);
    let errors = errors_of(&format!(
        "{MINIMAL}kill_on_session_loss = \"yes\"\non_node_loss = \"retry\"\n"
    ));
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert_error(
        &errors[0],
        3,
        24,
        "`kill_on_session_loss` must be true or false, found string \"yes\"",
    );
    assert_error(
        &errors[1],
        4,
        16,
        "`on_node_loss` must be one of \"skip\", \"rerun\", found \"retry\"",
    );
}

#[test]
fn pause_on_failure_is_read_and_a_quoted_or_misspelt_value_is_refused_with_its_position() {
    assert!(!parse(MINIMAL).unwrap().extras.pause_on_failure);
    let spec = parse(&format!("{MINIMAL}pause_on_failure = true\n")).unwrap();
    assert!(spec.extras.pause_on_failure);
    let errors = errors_of(&format!("{MINIMAL}pause_on_failure = \"true\"\n"));
    let error = only_error(&errors);
    assert_error(
        error,
        3,
        20,
        "`pause_on_failure` must be true or false, found string \"true\"",
    );
    assert_eq!(help(error), "remove the quotes");
    let errors = errors_of(&format!("{MINIMAL}pause_on_failures = true\n"));
    let error = only_error(&errors);
    assert_error(error, 3, 1, "pause_on_failures");
    assert!(help(error).contains("pause_on_failure"), "{}", help(error));
}

#[test]
fn defaults_come_from_task_defaults() {
    // given defaults naming a zone and a user, loaded as root
    let defaults = TaskDefaults {
        timezone: chrono_tz::Europe::Berlin,
        user: Some("nobody".into()),
        ..defaults()
    };
    // when a task names neither
    let spec = parse_task("t", Path::new("t.toml"), MINIMAL, &defaults).unwrap();
    // then it takes both from the defaults
    assert_eq!(spec.schedule.timezone(), chrono_tz::Europe::Berlin);
    assert_eq!(spec.user.as_deref(), Some("nobody"));
}

#[test]
fn full_file_sets_every_key() {
    // given the brief's example plus the keys it leaves out
    let text = r#"
# jobs.d/nightly-backup.toml
description = "Full backup of the orders database"
schedule = "30 2 * * *"
timezone = "Europe/Berlin"
command = ["/usr/local/bin/backup", "--full"]
user = "nobody"
group = "root"
working_dir = "/var/backups"
env = { PGHOST = "db1", PGPORT = "5432" }
timeout = "2h"
kill_grace = "1m 30s"
overlap = "replace"
catch_up = "all"
starting_deadline = "15m"
jitter = "30s"
retries = { attempts = 2, backoff = "30s", max_backoff = "5m" }
version_req = ">=2.1"
enabled = false
"#;
    // when it is parsed
    let spec = parse_task(
        "nightly-backup",
        Path::new("nightly-backup.toml"),
        text,
        &defaults(),
    )
    .unwrap();
    // then every value is what the file says
    assert_eq!(&*spec.name, "nightly-backup");
    assert_eq!(
        spec.extras.description.as_deref(),
        Some("Full backup of the orders database")
    );
    assert_eq!(spec.schedule.expression(), "30 2 * * *");
    assert_eq!(spec.schedule.timezone(), chrono_tz::Europe::Berlin);
    assert_eq!(
        spec.command,
        CommandLine::Argv(vec!["/usr/local/bin/backup".into(), "--full".into()])
    );
    assert_eq!(spec.user.as_deref(), Some("nobody"));
    assert_eq!(spec.extras.group.as_deref(), Some("root"));
    assert_eq!(spec.extras.working_dir, Some(PathBuf::from("/var/backups")));
    let env: BTreeMap<String, String> = [("PGHOST", "db1"), ("PGPORT", "5432")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(spec.extras.env, env);
    assert_eq!(spec.extras.timeout, Some(Duration::from_secs(7200)));
    assert_eq!(spec.extras.kill_grace, Duration::from_secs(90));
    assert_eq!(spec.overlap, OverlapPolicy::Replace);
    assert_eq!(spec.catch_up, CatchUpPolicy::All);
    assert_eq!(
        spec.extras.starting_deadline,
        Some(Duration::from_secs(900))
    );
    assert_eq!(spec.jitter, Duration::from_secs(30));
    assert_eq!(
        spec.extras.retries,
        RetryPolicy {
            attempts: 2,
            backoff: Duration::from_secs(30),
            max_backoff: Duration::from_secs(300)
        }
    );
    assert_eq!(
        spec.extras.version_req,
        Some(semver::VersionReq::parse(">=2.1").unwrap())
    );
    assert!(!spec.enabled);
}

#[test]
fn retries_and_env_may_be_written_as_sections() {
    let text = format!("{MINIMAL}[env]\nA = \"1\"\n[retries]\nattempts = 3\n");
    let spec = parse(&text).unwrap();
    assert_eq!(spec.extras.env.get("A").map(String::as_str), Some("1"));
    assert_eq!(spec.extras.retries.attempts, 3);
}

#[test]
fn midnight_means_daily() {
    let spec = parse("schedule = \"@midnight\"\ncommand = \"true\"\n").unwrap();
    assert_eq!(spec.schedule.expression(), "@midnight");
}

#[test]
fn own_user_is_allowed_when_not_root() {
    // given zkcron running as an ordinary user
    let defaults = defaults_for(Identity {
        uid: 1000,
        user_name: "alice".into(),
    });
    // when a task names that same user
    let text = format!("{MINIMAL}user = \"alice\"\n");
    let spec = parse_task("t", Path::new("t.toml"), &text, &defaults).unwrap();
    // then it is accepted and needs no switch
    assert_eq!(spec.user, None);
}

// ---------------------------------------------------------------------------------------------
// Errors in the contents

#[test]
fn unknown_key_suggests_the_nearest() {
    let errors =
        errors_of("schedule = \"@daily\"\ncommand = \"true\"\ntimezon = \"Europe/Berlin\"\n");
    let error = only_error(&errors);
    assert_error(error, 3, 1, "unknown key `timezon`");
    assert_eq!(help(error), "did you mean `timezone`?");
    assert_eq!(error.width, 7);
    assert_eq!(error.snippet, "timezon = \"Europe/Berlin\"");
    assert_eq!(error.task.as_deref(), Some("t"));
}

#[test]
fn unknown_key_far_from_any_lists_the_known_keys() {
    let errors = errors_of(&format!("{MINIMAL}xyzzy = 1\n"));
    let error = only_error(&errors);
    assert_error(error, 3, 1, "unknown key `xyzzy`");
    assert!(
        help(error).starts_with("known keys: description, schedule"),
        "{error:?}"
    );
}

#[test]
fn display_renders_like_rustc() {
    let errors =
        errors_of("schedule = \"@daily\"\ncommand = \"true\"\ntimezon = \"Europe/Berlin\"\n");
    let expected = "\
error: unknown key `timezon`
 --> /jobs/t.toml:3:1
  |
3 | timezon = \"Europe/Berlin\"
  | ^^^^^^^
  |
  = help: did you mean `timezone`?";
    assert_eq!(errors[0].to_string(), expected);
    assert_eq!(
        errors[0].one_line(),
        "/jobs/t.toml:3:1: unknown key `timezon` (did you mean `timezone`?)"
    );
}

#[test]
fn display_of_whole_file_error_has_no_snippet() {
    let errors = parse_task("Bad", Path::new("/jobs/Bad.toml"), MINIMAL, &defaults()).unwrap_err();
    let rendered = errors[0].to_string();
    let lines: Vec<&str> = rendered.lines().collect();
    assert_eq!(lines.len(), 3, "{rendered}");
    assert!(lines[0].starts_with("error: invalid task name \"Bad\""));
    assert_eq!(lines[1], "--> /jobs/Bad.toml");
    assert_eq!(lines[2], " = help: rename the file to `bad.toml`");
    assert!(
        errors[0]
            .one_line()
            .starts_with("/jobs/Bad.toml: invalid task name")
    );
}

#[test]
fn wrong_type_for_a_duration() {
    let errors = errors_of(&format!("{MINIMAL}timeout = 5\n"));
    let error = only_error(&errors);
    assert_error(
        error,
        3,
        11,
        "`timeout` must be a duration string like \"90s\" or \"2h\", found integer 5",
    );
    assert!(help(error).contains("\"5s\""));
}

#[test]
fn wrong_type_for_a_string_and_a_bool() {
    let errors = errors_of(&format!("{MINIMAL}description = 3\nenabled = \"yes\"\n"));
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert_error(
        &errors[0],
        3,
        15,
        "`description` must be a string, found integer 3",
    );
    assert_error(
        &errors[1],
        4,
        11,
        "`enabled` must be true or false, found string \"yes\"",
    );
}

#[test]
fn bad_duration_shows_the_format() {
    let errors = errors_of(&format!("{MINIMAL}jitter = \"30 secondz\"\n"));
    let error = only_error(&errors);
    assert_error(
        error,
        3,
        10,
        "`jitter` = \"30 secondz\" is not a valid duration",
    );
    assert!(help(error).contains("\"1h 30m\""));
    assert_eq!(error.width, "\"30 secondz\"".len());
}

#[test]
fn zero_timeout_is_refused() {
    let errors = errors_of(&format!("{MINIMAL}timeout = \"0s\"\n"));
    assert_error(
        only_error(&errors),
        3,
        11,
        "`timeout` must be greater than zero",
    );
}

#[test]
fn overlap_queue_is_read_and_a_misspelt_one_is_refused_with_its_position_and_fix() {
    let spec = parse(&format!("{MINIMAL}overlap = \"queue\"\n")).unwrap();
    assert_eq!(spec.overlap, OverlapPolicy::Queue);
    let errors = errors_of(&format!("{MINIMAL}overlap = \"queu\"\n"));
    let error = only_error(&errors);
    assert_error(
        error,
        3,
        11,
        "`overlap` must be one of \"skip\", \"allow\", \"replace\", \"queue\", found \"queu\"",
    );
    assert_eq!(help(error), "did you mean \"queue\"?");
}

#[test]
fn bad_enum_lists_the_allowed_values() {
    let errors = errors_of(&format!(
        "{MINIMAL}overlap = \"skp\"\ncatch_up = \"everything\"\n"
    ));
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert_error(
        &errors[0],
        3,
        11,
        "`overlap` must be one of \"skip\", \"allow\", \"replace\", \"queue\", found \"skp\"",
    );
    assert_eq!(help(&errors[0]), "did you mean \"skip\"?");
    assert_error(
        &errors[1],
        4,
        12,
        "`catch_up` must be one of \"skip\", \"once\", \"all\", found \"everything\"",
    );
}

#[test]
fn bad_schedule_field_points_at_the_field() {
    let errors = errors_of("command = \"true\"\nschedule = \"0 25 * * *\"\n");
    let error = only_error(&errors);
    assert_error(error, 2, 15, "hour field \"25\" is invalid");
    assert!(error.message.contains("0-23"));
    assert_eq!(error.width, 2);
}

#[test]
fn caret_after_cjk_and_emoji_on_the_same_line_is_under_the_offending_character() {
    // The column counts characters, as rustc does; the caret lines up by display width: each of
    // 日, 本, 語 and 🎉 takes two columns on a terminal, so `;` (character 21) is under column 25.
    let errors = errors_of(&format!(
        "{MINIMAL}description = \"日本語🎉\"; timezon = \"UTC\"\n"
    ));
    let error = only_error(&errors);
    assert_error(error, 3, 21, "invalid TOML");
    let expected = r#"
 --> /jobs/t.toml:3:21
  |
3 | description = "日本語🎉"; timezon = "UTC"
  |                         ^"#;
    let rendered = error.to_string();
    assert!(rendered.ends_with(expected), "{rendered}");
}

#[test]
fn carets_under_and_after_wide_characters_in_a_value_follow_display_width() {
    let errors = errors_of(&format!(
        "{MINIMAL}retries = {{ attempts = \"日本🎉\", backoff = 5 }}\n"
    ));
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert_error(&errors[0], 3, 24, "`retries.attempts` must be an integer");
    assert_error(&errors[1], 3, 41, "`retries.backoff` must be a duration");
    // Five characters, eight columns: eight carets under the string.
    let expected = r#"
3 | retries = { attempts = "日本🎉", backoff = 5 }
  |                        ^^^^^^^^"#;
    let rendered = errors[0].to_string();
    assert!(rendered.ends_with(expected), "{rendered}");
    // Character 41, column 45.
    let expected = r#"
3 | retries = { attempts = "日本🎉", backoff = 5 }
  |                                            ^
"#;
    let rendered = errors[1].to_string();
    assert!(rendered.contains(expected), "{rendered}");
}

#[test]
fn caret_under_tab_indented_text_is_aligned() {
    let errors = errors_of(&format!("{MINIMAL}\ttimezon = \"UTC\"\n"));
    let error = only_error(&errors);
    assert_error(error, 3, 2, "unknown key `timezon`");
    // The tab is shown as four spaces, and the carets follow it.
    let expected = r#"
3 |     timezon = "UTC"
  |     ^^^^^^^"#;
    let rendered = error.to_string();
    assert!(rendered.contains(expected), "{rendered}");
}

#[test]
fn error_inside_a_multi_line_string_points_at_its_line_and_column() {
    let errors = errors_of("command = \"true\"\nschedule = \"\"\"\n0 25 * * *\"\"\"\n");
    let error = only_error(&errors);
    assert_error(error, 3, 3, "hour field \"25\" is invalid");
    assert_eq!(error.snippet, r#"0 25 * * *""""#);
    let expected = r#"
 --> /jobs/t.toml:3:3
  |
3 | 0 25 * * *"""
  |   ^^"#;
    let rendered = error.to_string();
    assert!(rendered.ends_with(expected), "{rendered}");
}

/// Regression: a bad duration in a multi-line string put the caret on the opening `"""` and
/// printed the value with its raw line breaks in the message.
#[test]
fn bad_duration_in_a_multi_line_string_points_at_the_value_and_shows_it_on_one_line() {
    let errors = errors_of(&format!("{MINIMAL}timeout = \"\"\"\n1h\n2x\"\"\"\n"));
    let error = only_error(&errors);
    assert_error(
        error,
        4,
        1,
        r#"`timeout` = "1h\n2x" is not a valid duration: "#,
    );
    assert!(!error.message.contains('\n'), "{:?}", error.message);
    let rendered = error.to_string();
    assert!(rendered.contains("\n4 | 1h\n  | ^^\n"), "{rendered}");

    // Other string values judged by their content point the same way.
    for (key, text) in [
        ("version_req", "version_req = '''\n  nope'''"),
        ("overlap", "overlap = \"\"\"\n  nope\"\"\""),
        ("timezone", "timezone = \"\"\"\n  Mars/Base\"\"\""),
    ] {
        let errors = errors_of(&format!("{MINIMAL}{text}\n"));
        let error = only_error(&errors);
        assert_eq!((error.line, error.column), (4, 3), "{key}: {error}");
        assert!(!error.message.contains('\n'), "{key}: {:?}", error.message);
    }
}

#[test]
fn error_inside_strings_with_line_continuations_or_escapes_points_at_the_field() {
    for (text, line, column) in [
        // A line-ending backslash drops the break and the indentation after it.
        (
            "command = \"true\"\nschedule = \"\"\"\\\n    0 \\\n  25 * * *\"\"\"\n",
            4,
            3,
        ),
        ("command = \"true\"\nschedule = '''\n0 25 * * *'''\n", 3, 3),
        // `\u0030` is the minute `0`: six characters in the file for one in the value.
        (
            "command = \"true\"\nschedule = \"\\u0030 25 * * *\"\n",
            2,
            20,
        ),
    ] {
        let errors = errors_of(text);
        let error = only_error(&errors);
        assert_error(error, line, column, "hour field \"25\" is invalid");
        assert_eq!(error.width, 2, "{text:?}");
    }
}

#[test]
fn wrong_field_count_points_at_the_value() {
    let errors = errors_of("command = \"true\"\nschedule = \"0 2 * *\"\n");
    assert_error(only_error(&errors), 2, 12, "expected 5 fields");
}

#[test]
fn bad_timezone_suggests_one() {
    let errors = errors_of(&format!("{MINIMAL}timezone = \"Europe/Berln\"\n"));
    let error = only_error(&errors);
    assert_error(error, 3, 12, "unknown time zone \"Europe/Berln\"");
    assert!(error.message.contains("Europe/Berlin"), "{error:?}");
}

#[test]
fn reboot_is_refused_with_an_explanation() {
    let errors = errors_of("schedule = \"@reboot\"\ncommand = \"true\"\n");
    let error = only_error(&errors);
    assert_error(error, 1, 12, "@reboot is not supported");
    assert!(error.message.contains("systemd"));
}

#[test]
fn empty_command_is_refused() {
    for (command, column, message) in [
        ("\"\"", 11, "`command` is empty"),
        ("\"   \"", 11, "`command` is empty"),
        ("[]", 11, "`command` is an empty array"),
        (
            "[\"\", \"x\"]",
            12,
            "the program (the first element of `command`) is empty",
        ),
    ] {
        let errors = errors_of(&format!("schedule = \"@daily\"\ncommand = {command}\n"));
        assert_error(only_error(&errors), 2, column, message);
    }
}

#[test]
fn command_elements_must_be_strings() {
    let errors = errors_of("schedule = \"@daily\"\ncommand = [\"/bin/sleep\", 5]\n");
    let error = only_error(&errors);
    assert_error(
        error,
        2,
        26,
        "every element of `command` must be a string, found integer 5",
    );
    assert_eq!(help(error), "quote it: \"5\"");
}

#[test]
fn missing_schedule_and_command_are_whole_file_errors() {
    let errors = errors_of("description = \"nothing\"\n");
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert_error(&errors[0], 0, 0, "missing `schedule`");
    assert!(help(&errors[0]).contains("schedule = \"30 2 * * *\""));
    assert_error(&errors[1], 0, 0, "missing `command`");
    assert_eq!(errors[1].snippet, "");
}

#[test]
fn invalid_task_name_says_the_pattern() {
    for name in ["Backup", "-x", "", "a b", &"a".repeat(101)] {
        let errors = parse_task(name, Path::new("x.toml"), MINIMAL, &defaults()).unwrap_err();
        let error = only_error(&errors);
        assert_error(error, 0, 0, "[a-z0-9][a-z0-9._-]{0,99}");
        assert_eq!(error.task, None);
    }
    assert!(is_valid_task_name("nightly-backup.v2_x"));
    assert!(is_valid_task_name(&"a".repeat(100)));
    assert!(!is_valid_task_name(&"a".repeat(101)));
    assert!(!is_valid_task_name(".x"));
    assert!(!is_valid_task_name("x/y"));
}

#[test]
fn user_switching_is_refused_when_not_root() {
    // given zkcron running as uid 1000
    let defaults = defaults_for(Identity {
        uid: 1000,
        user_name: "alice".into(),
    });
    // when a task names another user
    let text = format!("{MINIMAL}user = \"backup\"\n");
    let errors = parse_task("t", Path::new("t.toml"), &text, &defaults).unwrap_err();
    // then it is refused at the user value
    let error = only_error(&errors);
    assert_eq!(
        error.message,
        "task runs as user \"backup\" but zkcron runs as \"alice\" (not root) and cannot switch users"
    );
    assert_eq!((error.line, error.column), (3, 8));
    assert_eq!(help(error), "remove `user` or run zkcron as root");
}

#[test]
fn unknown_user_and_group_are_refused_when_root() {
    let text = format!("{MINIMAL}user = \"no-such-user-zk\"\ngroup = \"no-such-group-zk\"\n");
    let errors = errors_of(&text);
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert_error(
        &errors[0],
        3,
        8,
        "user \"no-such-user-zk\" does not exist on this host",
    );
    assert_error(
        &errors[1],
        4,
        9,
        "group \"no-such-group-zk\" does not exist on this host",
    );
}

#[test]
fn unknown_default_user_is_a_whole_file_error() {
    let defaults = TaskDefaults {
        user: Some("no-such-user-zk".into()),
        ..defaults()
    };
    let errors = parse_task("t", Path::new("t.toml"), MINIMAL, &defaults).unwrap_err();
    assert_error(only_error(&errors), 0, 0, "[scheduler].default_user");
}

#[test]
fn invalid_env_names_are_refused() {
    let text = format!("{MINIMAL}env = {{ \"1X\" = \"a\", ZKCRON_TASK = \"b\", GOOD = 5 }}\n");
    let errors = errors_of(&text);
    assert_eq!(errors.len(), 3, "{errors:#?}");
    assert_error(
        &errors[0],
        3,
        9,
        "`1X` is not a valid environment variable name",
    );
    assert_eq!(help(&errors[0]), "names must match [A-Za-z_][A-Za-z0-9_]*");
    assert_error(&errors[1], 3, 21, "`env` must not set `ZKCRON_TASK`");
    assert_error(
        &errors[2],
        3,
        47,
        "`env.GOOD` must be a string, found integer 5",
    );
}

#[test]
fn bad_version_req_is_refused() {
    let errors = errors_of(&format!("{MINIMAL}version_req = \">=2.x.y.z\"\n"));
    let error = only_error(&errors);
    assert_error(
        error,
        3,
        15,
        "`version_req` = \">=2.x.y.z\" is not a version requirement",
    );
    assert!(help(error).contains(">=2.1"));
}

#[test]
fn relative_working_dir_is_refused() {
    let errors = errors_of(&format!("{MINIMAL}working_dir = \"var/backups\"\n"));
    assert_error(
        only_error(&errors),
        3,
        15,
        "`working_dir` must be an absolute path",
    );
}

#[test]
fn unknown_key_inside_retries() {
    let errors = errors_of(&format!(
        "{MINIMAL}retries = {{ attempts = 2, backof = \"1s\" }}\n"
    ));
    let error = only_error(&errors);
    assert_error(error, 3, 27, "unknown key `backof` in `retries`");
    assert_eq!(help(error), "did you mean `backoff`?");
}

#[test]
fn retries_values_are_checked() {
    let text = format!("{MINIMAL}retries = {{ attempts = 101, backoff = 3 }}\n");
    let errors = errors_of(&text);
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert_error(
        &errors[0],
        3,
        24,
        "`retries.attempts` must be between 0 and 100, found 101",
    );
    assert_error(
        &errors[1],
        3,
        39,
        "`retries.backoff` must be a duration string",
    );
    let errors = errors_of(&format!("{MINIMAL}retries = \"3\"\n"));
    assert_error(only_error(&errors), 3, 11, "`retries` must be a table");
    let errors = errors_of(&format!("{MINIMAL}retries = {{ backoff = \"1h\" }}\n"));
    assert_error(
        only_error(&errors),
        3,
        11,
        "`retries.max_backoff` (10m) is shorter than `retries.backoff` (1h)",
    );
}

#[test]
fn every_problem_of_a_file_is_reported() {
    // given a file with four unrelated mistakes
    let text = "schedule = \"61 * * * *\"\ncommand = 5\ntimezon = \"UTC\"\ntimeout = \"soon\"\n";
    // when it is parsed
    let errors = errors_of(text);
    // then all four are reported, in file order
    let positions: Vec<(usize, usize)> = errors.iter().map(|e| (e.line, e.column)).collect();
    assert_eq!(
        positions,
        vec![(1, 13), (2, 11), (3, 1), (4, 11)],
        "{errors:#?}"
    );
    assert!(errors[0].message.contains("minute field \"61\""));
    assert!(errors[1].message.contains("`command` must be"));
    assert!(errors[2].message.contains("unknown key `timezon`"));
    assert!(errors[3].message.contains("not a valid duration"));
}

#[test]
fn toml_syntax_error_has_its_position() {
    let errors = errors_of("schedule = \"@daily\"\ncommand = \"true\"\nenabled = \n");
    let error = only_error(&errors);
    assert!(error.message.starts_with("invalid TOML: "), "{error:?}");
    assert_eq!((error.line, error.column), (3, 11));
    let errors = errors_of("schedule = \"@daily\"\nschedule = \"@hourly\"\ncommand = \"x\"\n");
    let error = only_error(&errors);
    assert_error(error, 2, 1, "duplicate key");
}

// ---------------------------------------------------------------------------------------------
// Errors about the file itself

#[test]
fn file_over_one_mebibyte_is_refused_unread() {
    let dir = common::tempdir();
    let mut text = MINIMAL.as_bytes().to_vec();
    text.resize(1024 * 1024 + 1, b'\n');
    let path = write_task(dir.path(), "big.toml", &text);
    let errors = load_task_file(&path, &defaults()).unwrap_err();
    let error = only_error(&errors);
    assert_error(
        error,
        0,
        0,
        "the file is 1048577 bytes; task files are limited to 1 MiB",
    );
    assert_eq!(error.task.as_deref(), Some("big"));
    // exactly 1 MiB is fine
    text.truncate(1024 * 1024);
    let path = write_task(dir.path(), "big.toml", &text);
    load_task_file(&path, &defaults()).unwrap();
}

#[test]
fn non_utf8_file_points_at_the_bad_byte() {
    let dir = common::tempdir();
    let path = write_task(
        dir.path(),
        "t.toml",
        b"schedule = \"@daily\"\ncommand = \"ab\xffc\"\n",
    );
    let errors = load_task_file(&path, &defaults()).unwrap_err();
    let error = only_error(&errors);
    assert_error(error, 2, 14, "not valid UTF-8: byte 0xff");
    assert_eq!(error.snippet, "command = \"ab\u{fffd}c\"");
}

#[test]
fn group_writable_file_is_refused() {
    let dir = common::tempdir();
    let path = write_task(dir.path(), "t.toml", MINIMAL.as_bytes());
    fs::set_permissions(&path, fs::Permissions::from_mode(0o664)).unwrap();
    let errors = load_task_file(&path, &defaults()).unwrap_err();
    let error = only_error(&errors);
    assert_error(error, 0, 0, "is group-writable (mode 0664)");
    assert_eq!(help(error), format!("run `chmod go-w {}`", path.display()));
}

#[test]
fn world_writable_file_is_refused() {
    let dir = common::tempdir();
    let path = write_task(dir.path(), "t.toml", MINIMAL.as_bytes());
    fs::set_permissions(&path, fs::Permissions::from_mode(0o646)).unwrap();
    let errors = load_task_file(&path, &defaults()).unwrap_err();
    assert_error(only_error(&errors), 0, 0, "is world-writable (mode 0646)");
}

#[test]
fn symlink_to_a_writable_target_is_refused() {
    let dir = common::tempdir();
    let target = write_task(dir.path(), "target.txt", MINIMAL.as_bytes());
    fs::set_permissions(&target, fs::Permissions::from_mode(0o666)).unwrap();
    let link = dir.path().join("t.toml");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let errors = load_task_file(&link, &defaults()).unwrap_err();
    assert_error(only_error(&errors), 0, 0, "group- and world-writable");
    // and a symlink to a safe target is followed, as cron follows it
    fs::set_permissions(&target, fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(&*load_task_file(&link, &defaults()).unwrap().name, "t");
}

#[test]
fn file_not_owned_by_root_is_refused_when_root() {
    let dir = common::tempdir();
    let path = write_task(dir.path(), "t.toml", MINIMAL.as_bytes());
    nix::unistd::chown(&path, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    let errors = load_task_file(&path, &defaults()).unwrap_err();
    let error = only_error(&errors);
    assert_error(error, 0, 0, "owned by uid 65534 (nobody), not root");
    assert_eq!(
        help(error),
        format!("run `chown root:root {}`", path.display())
    );
}

#[test]
fn file_owned_by_another_user_is_refused_when_not_root() {
    let dir = common::tempdir();
    let path = write_task(dir.path(), "t.toml", MINIMAL.as_bytes());
    nix::unistd::chown(&path, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    let alice = defaults_for(Identity {
        uid: 1000,
        user_name: "alice".into(),
    });
    let errors = load_task_file(&path, &alice).unwrap_err();
    assert_error(only_error(&errors), 0, 0, "neither by \"alice\"");
    // the daemon's own files are fine
    nix::unistd::chown(&path, Some(nix::unistd::Uid::from_raw(1000)), None).unwrap();
    load_task_file(&path, &alice).unwrap();
}

#[test]
fn file_problems_and_content_problems_are_reported_together() {
    let dir = common::tempdir();
    let path = write_task(
        dir.path(),
        "t.toml",
        format!("{MINIMAL}colour = 1\n").as_bytes(),
    );
    fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).unwrap();
    let errors = load_task_file(&path, &defaults()).unwrap_err();
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert_error(&errors[0], 0, 0, "writable");
    assert_error(&errors[1], 3, 1, "unknown key `colour`");
}

// ---------------------------------------------------------------------------------------------
// Directories

#[test]
fn ignored_files_are_ignored_with_their_reason() {
    let cases = [
        ("notes.txt", "not a .toml file"),
        ("x.toml.dpkg-old", "package-manager leftover (*.dpkg-old)"),
        ("x.toml.dpkg-new", "package-manager leftover (*.dpkg-new)"),
        ("x.toml.dpkg-dist", "package-manager leftover (*.dpkg-dist)"),
        ("x.toml.dpkg-tmp", "package-manager leftover (*.dpkg-tmp)"),
        ("x.toml.rpmnew", "package-manager leftover (*.rpmnew)"),
        ("x.toml.rpmsave", "package-manager leftover (*.rpmsave)"),
        ("x.toml.rpmorig", "package-manager leftover (*.rpmorig)"),
        ("x.toml~", "editor backup file (*~)"),
        ("#x.toml#", "editor auto-save file (#*#)"),
        (".x.toml.swp", "editor swap file (.*.swp)"),
        (".hidden.toml", "hidden file"),
    ];
    for (name, reason) in cases {
        assert_eq!(ignore_reason(Path::new(name)), Some(reason), "{name}");
    }
    assert_eq!(ignore_reason(Path::new("/etc/zkcron/jobs.d/ok.toml")), None);

    // and load_jobs_dir skips them
    let dir = common::tempdir();
    for (name, _) in cases {
        write_task(dir.path(), name, b"this is not toml = = =");
    }
    fs::create_dir(dir.path().join("sub")).unwrap();
    let loaded = load_jobs_dir(dir.path(), &defaults()).unwrap();
    assert!(loaded.tasks.is_empty());
    assert!(loaded.errors.is_empty(), "{:#?}", loaded.errors);
    assert_eq!(loaded.ignored.len(), cases.len() + 1);
    assert!(
        loaded
            .ignored
            .contains(&(dir.path().join("sub"), "not a .toml file"))
    );
}

#[test]
fn dir_with_one_bad_and_two_good_files() {
    // given two valid task files and one invalid one
    let dir = common::tempdir();
    write_task(dir.path(), "zeta.toml", MINIMAL.as_bytes());
    write_task(dir.path(), "alpha.toml", MINIMAL.as_bytes());
    write_task(dir.path(), "broken.toml", b"schedule = \"@daily\"\n");
    write_task(dir.path(), "README", b"docs");
    // when the directory is loaded
    let loaded = load_jobs_dir(dir.path(), &defaults()).unwrap();
    // then the good ones load, sorted, and the bad one is reported
    let names: Vec<&str> = loaded.tasks.iter().map(|t| &*t.name).collect();
    assert_eq!(names, ["alpha", "zeta"]);
    assert_eq!(loaded.errors.len(), 1, "{:#?}", loaded.errors);
    assert_eq!(loaded.errors[0].path, dir.path().join("broken.toml"));
    assert_eq!(loaded.errors[0].task.as_deref(), Some("broken"));
    assert!(loaded.errors[0].message.contains("missing `command`"));
    assert_eq!(
        loaded.ignored,
        vec![(dir.path().join("README"), "not a .toml file")]
    );
}

/// A big jobs dir is loaded on several threads: the result must not depend on how the files
/// were split among them (tasks sorted by name, each file's errors together and in order).
#[test]
fn a_dir_loaded_on_several_threads_gives_the_same_sorted_result() {
    let dir = common::tempdir();
    for i in 0..1_200 {
        write_task(dir.path(), &format!("task-{i:04}.toml"), MINIMAL.as_bytes());
    }
    // Two problems each in files spread over the dir (so over every thread's share).
    for i in [7, 601, 1_199] {
        write_task(
            dir.path(),
            &format!("task-{i:04}-bad.toml"),
            b"schedule = \"61 * * * *\"\nbogus = 1\n",
        );
    }
    let loaded = load_jobs_dir(dir.path(), &defaults()).unwrap();
    let names: Vec<String> = loaded.tasks.iter().map(|t| t.name.to_string()).collect();
    let expected: Vec<String> = (0..1_200).map(|i| format!("task-{i:04}")).collect();
    assert_eq!(names, expected);
    let errors: Vec<(String, usize)> = loaded
        .errors
        .iter()
        .map(|e| (e.task.clone().unwrap_or_default(), e.line))
        .collect();
    let mut sorted = errors.clone();
    sorted.sort();
    assert_eq!(errors, sorted, "{:#?}", loaded.errors);
    for i in [7, 601, 1_199] {
        let task = format!("task-{i:04}-bad");
        assert!(
            errors.iter().filter(|(t, _)| *t == task).count() >= 2,
            "{task}: {errors:?}"
        );
    }
}

#[test]
fn invalid_file_name_in_a_dir_is_an_error() {
    let dir = common::tempdir();
    write_task(dir.path(), "Nightly Backup.toml", MINIMAL.as_bytes());
    let loaded = load_jobs_dir(dir.path(), &defaults()).unwrap();
    let error = only_error(&loaded.errors);
    assert_eq!(error.task, None);
    assert_eq!(help(error), "rename the file to `nightly-backup.toml`");
}

#[test]
fn fix_commands_quote_paths_for_the_shell() {
    let dir = common::tempdir();
    let path = write_task(dir.path(), "it's.toml", MINIMAL.as_bytes());
    fs::set_permissions(&path, fs::Permissions::from_mode(0o664)).unwrap();
    let errors = load_task_file(&path, &defaults()).unwrap_err();
    let quoted = format!("'{}/it'\\''s.toml'", dir.path().display());
    assert!(
        errors
            .iter()
            .any(|e| e.help.as_deref() == Some(&format!("run `chmod go-w {quoted}`"))),
        "{errors:#?}"
    );
}

#[test]
fn missing_dir_is_refused_saying_how_to_fix_it() {
    let dir = common::tempdir();
    let missing = dir.path().join("nope");
    let problems = load_jobs_dir(&missing, &defaults()).unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0].path, missing);
    assert_eq!(problems[0].message, "the jobs dir does not exist");
    assert_eq!(
        problems[0].help.as_deref(),
        Some("create it, or point --jobs-dir or [scheduler].jobs_dir at your task files")
    );
}

// ---------------------------------------------------------------------------------------------
// The node config

#[test]
fn config_defaults() {
    let config = parse_config(Path::new("/etc/zkcron/zkcron.toml"), "").unwrap();
    assert_eq!(config, Config::default());
    assert_eq!(config.node.id, None);
    assert_eq!(config.node.version, None);
    assert!(config.node.labels.is_empty());
    assert_eq!(config.scheduler.jobs_dir, None);
    assert_eq!(config.scheduler.state_dir, None);
    assert_eq!(config.scheduler.default_timezone, chrono_tz::UTC);
    assert_eq!(config.scheduler.shutdown_grace, Duration::from_secs(30));
    assert_eq!(config.scheduler.default_user, None);
    assert_eq!(config.coordination.backend, Backend::Local);
    assert_eq!(config.log.format, LogFormat::Auto);
    assert_eq!(
        config.jobs_dir_or_default(Some(Path::new("/etc/zkcron/zkcron.toml"))),
        PathBuf::from("/etc/zkcron/jobs.d")
    );
    assert_eq!(config.jobs_dir_or_default(None), PathBuf::from("./jobs.d"));
}

#[test]
fn config_full_file() {
    let text = r#"
[node]
id = "node-1.eu"
version = "2.1.0"
labels = { rack = "r1" }

[scheduler]
jobs_dir = "/srv/jobs"
state_dir = "/var/lib/zkcron"
default_timezone = "Europe/Berlin"
shutdown_grace = "1m"
default_user = "nobody"

[coordination]
backend = "local"

[log]
format = "json"
"#;
    let config = parse_config(Path::new("/etc/zkcron/zkcron.toml"), text).unwrap();
    assert_eq!(config.node.id.as_deref(), Some("node-1.eu"));
    assert_eq!(config.node.version, Some(semver::Version::new(2, 1, 0)));
    assert_eq!(
        config.node.labels.get("rack").map(String::as_str),
        Some("r1")
    );
    assert_eq!(config.scheduler.jobs_dir, Some(PathBuf::from("/srv/jobs")));
    assert_eq!(
        config.scheduler.state_dir,
        Some(PathBuf::from("/var/lib/zkcron"))
    );
    assert_eq!(config.scheduler.default_timezone, chrono_tz::Europe::Berlin);
    assert_eq!(config.scheduler.shutdown_grace, Duration::from_secs(60));
    assert_eq!(config.scheduler.default_user.as_deref(), Some("nobody"));
    assert_eq!(config.log.format, LogFormat::Json);
    assert_eq!(config.jobs_dir_or_default(None), PathBuf::from("/srv/jobs"));
    assert_eq!(
        config.state_dir_or_default(),
        PathBuf::from("/var/lib/zkcron")
    );

    let identity = root();
    let defaults = config.task_defaults(identity.clone(), config.coordination.backend.for_tasks());
    assert_eq!(defaults.timezone, chrono_tz::Europe::Berlin);
    assert_eq!(defaults.user.as_deref(), Some("nobody"));
    assert_eq!(defaults.identity, identity);
}

#[test]
fn config_relative_dirs_resolve_against_the_config_dir() {
    let text = "[scheduler]\njobs_dir = \"jobs\"\nstate_dir = \"../state\"\n";
    let config = parse_config(Path::new("/etc/zkcron/zkcron.toml"), text).unwrap();
    assert_eq!(
        config.scheduler.jobs_dir,
        Some(PathBuf::from("/etc/zkcron/jobs"))
    );
    assert_eq!(
        config.scheduler.state_dir,
        Some(PathBuf::from("/etc/zkcron/../state"))
    );
}

#[test]
fn config_unknown_section_and_key_suggest_the_nearest() {
    let text = "[schedular]\njobs_dir = \"x\"\n\n[log]\nformt = \"json\"\n";
    let error = parse_config(Path::new("/etc/zkcron/zkcron.toml"), text).unwrap_err();
    assert_eq!(error.problems.len(), 2, "{error:#?}");
    let section = &error.problems[0];
    assert_eq!(section.message, "unknown section `[schedular]`");
    assert_eq!((section.line, section.column), (1, 2));
    assert_eq!(section.help.as_deref(), Some("did you mean `[scheduler]`?"));
    let key = &error.problems[1];
    assert_eq!(key.message, "unknown key `formt` in [log]");
    assert_eq!((key.line, key.column), (5, 1));
    assert_eq!(key.help.as_deref(), Some("did you mean `format`?"));
    let rendered = error.to_string();
    assert!(
        rendered.contains(" --> /etc/zkcron/zkcron.toml:5:1\n"),
        "{rendered}"
    );
    assert!(
        rendered.contains("5 | formt = \"json\"\n  | ^^^^^\n"),
        "{rendered}"
    );
    assert_eq!(
        error.one_line_each()[1],
        "/etc/zkcron/zkcron.toml:5:1: unknown key `formt` in [log] (did you mean `format`?)"
    );
}

#[test]
fn config_key_in_the_wrong_place_names_its_section() {
    let text = "jobs_dir = \"x\"\n[node]\ndefault_timezone = \"UTC\"\n";
    let error = parse_config(Path::new("zkcron.toml"), text).unwrap_err();
    assert_eq!(error.problems.len(), 2, "{error:#?}");
    assert_eq!(
        error.problems[0].message,
        "unknown top-level key `jobs_dir`"
    );
    assert_eq!(
        error.problems[0].help.as_deref(),
        Some("`jobs_dir` belongs in the [scheduler] section")
    );
    assert_eq!((error.problems[1].line, error.problems[1].column), (3, 1));
    assert_eq!(
        error.problems[1].help.as_deref(),
        Some("`default_timezone` belongs in the [scheduler] section")
    );
}

#[test]
fn config_bad_backend_lists_the_allowed_values() {
    let error = parse_config(
        Path::new("zkcron.toml"),
        "[coordination]\nbackend = \"etcd\"\n",
    )
    .unwrap_err();
    let problem = &error.problems[0];
    assert_eq!(
        problem.message,
        "`coordination.backend` must be one of \"local\", \"zookeeper\", found \"etcd\""
    );
    assert_eq!((problem.line, problem.column), (2, 11));
}

#[test]
fn config_job_output_lines_defaults_to_100_and_is_checked() {
    assert_eq!(Config::default().log.job_output_lines, 100);
    let config = parse_config(Path::new("zkcron.toml"), "[log]\njob_output_lines = 0\n").unwrap();
    assert_eq!(config.log.job_output_lines, 0);
    for (value, message) in [
        (
            "-1",
            "`log.job_output_lines` must be between 0 and 10000, found -1",
        ),
        (
            "\"100\"",
            "`log.job_output_lines` must be an integer, found string \"100\"",
        ),
    ] {
        let text = format!("[log]\njob_output_lines = {value}\n");
        let error = parse_config(Path::new("zkcron.toml"), &text).unwrap_err();
        assert_eq!(error.problems[0].message, message, "{value}");
        assert_eq!((error.problems[0].line, error.problems[0].column), (2, 20));
    }
}

#[test]
fn config_zookeeper_section_is_read_with_its_defaults() {
    let text = "[coordination]\nbackend = \"zookeeper\"\n[coordination.zookeeper]\nconnect = \"zk1:2181,zk2:2181/apps\"\nsession_timeout = \"4s\"\nmax_clock_skew = \"2s\"\n";
    let config = parse_config(Path::new("zkcron.toml"), text).unwrap();
    let zk = &config.coordination.zookeeper;
    assert_eq!(
        config.coordination.backend,
        zkcron::config::Backend::Zookeeper
    );
    assert_eq!(zk.connect.as_deref(), Some("zk1:2181,zk2:2181/apps"));
    assert_eq!(zk.cluster, "default");
    assert_eq!(zk.session_timeout, std::time::Duration::from_secs(4));
    assert_eq!(zk.max_clock_skew, Some(std::time::Duration::from_secs(2)));
    let defaults = parse_config(Path::new("zkcron.toml"), "").unwrap();
    assert_eq!(
        defaults.coordination.zookeeper.session_timeout,
        std::time::Duration::from_secs(10)
    );
    assert_eq!(
        defaults.coordination.backend,
        zkcron::config::Backend::Local
    );
}

#[test]
fn config_zookeeper_errors_name_the_key_and_the_fix() {
    let text = "[coordination.zookeeper]\nconnect = \"zk1\"\ncluster = \"a/b\"\nsession_timeout = \"200ms\"\nsesion_timeout = \"5s\"\nauth = \"u:p\"\nauth_file = \"/x\"\n";
    let error = parse_config(Path::new("zkcron.toml"), text).unwrap_err();
    let found: Vec<(usize, usize, &str, Option<&str>)> = error
        .problems
        .iter()
        .map(|p| (p.line, p.column, p.message.as_str(), p.help.as_deref()))
        .collect();
    assert_eq!(
        found,
        vec![
            (
                2,
                11,
                "`coordination.zookeeper.connect`: `zk1` in `zk1` has no port; expected HOST:PORT, e.g. `127.0.0.1:2181`",
                None
            ),
            (
                3,
                11,
                "`coordination.zookeeper.cluster` = \"a/b\" is not a valid cluster name: it must match [A-Za-z0-9][A-Za-z0-9._-]{0,99}, because it becomes part of ZooKeeper paths",
                None
            ),
            (
                4,
                19,
                "`coordination.zookeeper.session_timeout`: the session timeout 200ms is out of range: it must be from 1s to 24days 20h 31m 23s 647ms (ZooKeeper sends it as a 32-bit count of milliseconds)",
                Some(
                    "the server then keeps it within its own minSessionTimeout..maxSessionTimeout (by default 2 to 20 of its ticks: 4s to 40s); 10s is a good start"
                )
            ),
            (
                5,
                1,
                "unknown key `sesion_timeout` in [coordination.zookeeper]",
                Some("did you mean `session_timeout`?")
            ),
            (
                7,
                1,
                "`coordination.zookeeper.auth` and `auth_file` are both set; set one of them",
                Some("auth_file keeps the password out of a config file others may read")
            ),
        ]
    );
}

#[test]
fn config_bad_values_are_all_reported() {
    let text = "[node]\nid = \"bad id\"\nversion = \"2.1\"\n[scheduler]\ndefault_timezone = \"Mars/Olympus\"\nshutdown_grace = 30\n[log]\nformat = \"xml\"\n";
    let error = parse_config(Path::new("zkcron.toml"), text).unwrap_err();
    let positions: Vec<(usize, usize)> =
        error.problems.iter().map(|p| (p.line, p.column)).collect();
    assert_eq!(
        positions,
        vec![(2, 6), (3, 11), (5, 20), (6, 18), (8, 10)],
        "{error:#?}"
    );
    assert!(error.problems[0].message.contains("not a valid node id"));
    assert!(error.problems[1].message.contains("not a semantic version"));
    assert!(error.problems[2].message.contains("unknown time zone"));
    assert!(error.problems[3].message.contains("duration string"));
    assert!(
        error.problems[4]
            .message
            .contains("\"auto\", \"text\", \"json\", \"journald\"")
    );
}

#[test]
fn config_syntax_error_and_missing_file() {
    let error = parse_config(Path::new("zkcron.toml"), "[node\nid = 1\n").unwrap_err();
    assert!(
        error.problems[0].message.starts_with("invalid TOML"),
        "{error:#?}"
    );
    assert_eq!(error.problems[0].line, 1);

    let dir = common::tempdir();
    let error = load_config(&dir.path().join("missing.toml")).unwrap_err();
    assert_eq!(error.problems[0].line, 0);
    assert_eq!(error.problems[0].message, "the config file does not exist");
    assert_eq!(
        error.problems[0].help.as_deref(),
        Some(
            "create it, or pass --config with the right path; without --config zkcron reads \
             /etc/zkcron/zkcron.toml only if it exists"
        )
    );

    let path = dir.path().join("zkcron.toml");
    fs::write(&path, "[scheduler]\njobs_dir = \"jobs\"\n").unwrap();
    let config = load_config(&path).unwrap();
    assert_eq!(config.scheduler.jobs_dir, Some(dir.path().join("jobs")));
}

// ---------------------------------------------------------------------------------------------
// What zkcron trusts on disk (crate::files): odd files, symlinks, the jobs dir and its parents.
// The rules take the loading identity; these tests run both as root (CI) and as another user.

/// The identity of the test process.
fn me() -> Identity {
    Identity::current()
}

/// A non-root identity with this uid.
fn user(uid: u32) -> Identity {
    Identity {
        uid,
        user_name: format!("user{uid}"),
    }
}

/// Gives `path` (a symlink itself, not its target) to a user other than root and returns that
/// user's uid: nobody (65534) when the tests run as root, else the tests' own user.
fn give_to_a_non_root_user(path: &Path) -> u32 {
    if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::lchown(path, Some(65534), None).unwrap();
        65534
    } else {
        nix::unistd::geteuid().as_raw()
    }
}

/// `<temp>/jobs.d`, mode 0755, with the test process's ownership.
fn jobs_dir(temp: &tempfile::TempDir) -> PathBuf {
    let dir = temp.path().join("jobs.d");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

#[track_caller]
fn assert_refused(problems: &[zkcron::files::PathProblem], path: &Path, message: &str, help: &str) {
    assert!(
        problems.iter().any(|p| p.path == path
            && p.message.contains(message)
            && p.help.as_deref() == Some(help)),
        "no problem at {} with {message:?} and help {help:?} in {problems:#?}",
        path.display()
    );
}

/// Regression: a world-writable jobs dir was accepted, so anyone could add a task.
#[test]
fn jobs_dir_that_others_can_write_is_refused_with_the_fix() {
    let temp = common::tempdir();
    let dir = jobs_dir(&temp);
    write_task(&dir, "t.toml", MINIMAL.as_bytes());
    let defaults = defaults_for(me());
    for (mode, what) in [
        (0o775, "group-writable (mode 0775)"),
        (0o757, "world-writable (mode 0757)"),
        (0o777, "group- and world-writable (mode 0777)"),
        // The sticky bit does not help: others could still add tasks.
        (0o1777, "group- and world-writable (mode 1777)"),
    ] {
        fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).unwrap();
        let problems = load_jobs_dir(&dir, &defaults).unwrap_err();
        assert_refused(
            &problems,
            &dir,
            &format!("the jobs dir is {what}, so other users could add tasks that zkcron runs"),
            &format!("run `chmod go-w {}`", dir.display()),
        );
    }
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(load_jobs_dir(&dir, &defaults).unwrap().tasks.len(), 1);
}

#[test]
fn jobs_dir_owned_by_another_user_is_refused() {
    let temp = common::tempdir();
    let dir = jobs_dir(&temp);
    let owner = give_to_a_non_root_user(&dir);
    // A root daemon trusts only root's directories.
    let problems = load_jobs_dir(&dir, &defaults_for(root())).unwrap_err();
    assert_refused(
        &problems,
        &dir,
        &format!("the jobs dir is owned by uid {owner}"),
        &format!("run `chown root {}`", dir.display()),
    );
    assert!(
        problems.iter().any(|p| p.message.contains("not root")),
        "{problems:#?}"
    );
    // A daemon running as the owner trusts it (the temp dir above it is root's, or the
    // owner's when the tests do not run as root); a third user does not.
    load_jobs_dir(&dir, &defaults_for(user(owner))).unwrap();
    let third = user(owner + 1);
    let problems = load_jobs_dir(&dir, &defaults_for(third)).unwrap_err();
    assert_refused(
        &problems,
        &dir,
        &format!(
            "neither by \"user{}\" (who runs zkcron) nor by root",
            owner + 1
        ),
        &format!("run `chown user{} {}` as root", owner + 1, dir.display()),
    );
}

#[test]
fn parent_dir_that_others_can_write_is_refused_unless_sticky() {
    let temp = common::tempdir();
    let shared = temp.path().join("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o777)).unwrap();
    let dir = shared.join("jobs.d");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    let defaults = defaults_for(me());
    let problems = load_jobs_dir(&dir, &defaults).unwrap_err();
    assert_refused(
        &problems,
        &shared,
        &format!(
            "a parent directory of the jobs dir {} is group- and world-writable (mode 0777) \
             without the sticky bit, so other users could replace what is in it",
            dir.display()
        ),
        &format!("run `chmod go-w {}`", shared.display()),
    );
    // Like /tmp: with the sticky bit others cannot rename or remove what they do not own.
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
    load_jobs_dir(&dir, &defaults).unwrap();
}

#[test]
fn parents_along_a_symlinked_jobs_dir_path_are_checked_too() {
    let temp = common::tempdir();
    let real = jobs_dir(&temp);
    let open = temp.path().join("open");
    fs::create_dir(&open).unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
    // open/ is not on the resolved path, but whoever can write it can repoint the link.
    let link = open.join("jobs.d");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let problems = load_jobs_dir(&link, &defaults_for(me())).unwrap_err();
    assert_refused(
        &problems,
        &open,
        "without the sticky bit",
        &format!("run `chmod go-w {}`", open.display()),
    );
}

/// Regression: a root daemon loaded a symlink that an unprivileged user planted in jobs.d.
#[test]
fn symlink_owned_by_another_user_is_refused_when_root() {
    let temp = common::tempdir();
    let dir = jobs_dir(&temp);
    write_task(&dir, "real.conf", MINIMAL.as_bytes());
    let link = dir.join("t.toml");
    std::os::unix::fs::symlink("real.conf", &link).unwrap();
    let owner = give_to_a_non_root_user(&link);
    let errors = load_task_file(&link, &defaults_for(root())).unwrap_err();
    let error = errors
        .iter()
        .find(|e| e.message.contains("symbolic link"))
        .unwrap_or_else(|| panic!("{errors:#?}"));
    assert!(
        error
            .message
            .starts_with(&format!("the symbolic link is owned by uid {owner}"))
            && error
                .message
                .ends_with(", not root, so that user chose what zkcron loads"),
        "{}",
        error.message
    );
    assert_eq!(
        help(error),
        format!("run `chown -h root {}`", link.display())
    );
    // A daemon of another, non-root user refuses it too; the link's owner's own daemon loads it.
    let errors = load_task_file(&link, &defaults_for(user(owner + 1))).unwrap_err();
    assert!(
        errors.iter().any(|e| e.message.contains("neither by")),
        "{errors:#?}"
    );
    load_task_file(&link, &defaults_for(user(owner))).unwrap();
}

#[test]
fn symlink_to_a_file_outside_its_directory_is_refused() {
    let temp = common::tempdir();
    let dir = jobs_dir(&temp);
    let elsewhere = temp.path().join("elsewhere.toml");
    fs::write(&elsewhere, MINIMAL).unwrap();
    fs::set_permissions(&elsewhere, fs::Permissions::from_mode(0o644)).unwrap();
    let link = dir.join("t.toml");
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    let errors = load_task_file(&link, &defaults_for(me())).unwrap_err();
    let error = only_error(&errors);
    let target = fs::canonicalize(&elsewhere).unwrap();
    let resolved_dir = fs::canonicalize(&dir).unwrap();
    assert_error(
        error,
        0,
        0,
        &format!(
            "a symbolic link to {}, outside {}: zkcron follows links only to files in the same \
             directory, whose changes it notices",
            target.display(),
            resolved_dir.display()
        ),
    );
    assert_eq!(
        help(error),
        format!(
            "replace the link with a copy of the file: `cp --remove-destination {} {}`",
            target.display(),
            link.display()
        )
    );
    assert_eq!(error.task.as_deref(), Some("t"));
}

#[test]
fn symlink_to_a_file_in_its_directory_is_followed_and_named_after_the_link() {
    let temp = common::tempdir();
    let dir = jobs_dir(&temp);
    write_task(&dir, ".backup-v2", MINIMAL.as_bytes());
    std::os::unix::fs::symlink(".backup-v2", dir.join("backup.toml")).unwrap();
    let loaded = load_jobs_dir(&dir, &defaults_for(me())).unwrap();
    assert!(loaded.errors.is_empty(), "{:#?}", loaded.errors);
    let names: Vec<&str> = loaded.tasks.iter().map(|t| &*t.name).collect();
    assert_eq!(names, ["backup"]);
}

/// Regression: a directory named `x.toml` was ignored in silence, and a socket named `x.toml`
/// was reported as "No such device or address".
#[test]
fn entries_named_like_task_files_that_are_not_regular_files_are_errors_naming_what_they_are() {
    let temp = common::tempdir();
    let dir = jobs_dir(&temp);
    write_task(&dir, "good.toml", MINIMAL.as_bytes());
    let _socket = common::make_odd_entries(&dir);

    let loaded = load_jobs_dir(&dir, &defaults_for(me())).unwrap();
    let names: Vec<&str> = loaded.tasks.iter().map(|t| &*t.name).collect();
    assert_eq!(names, ["good"]);
    let not_a_task = "zkcron loads regular files named NAME.toml (and symbolic links to them in \
                      the same directory) and does not look into subdirectories: remove it, or \
                      rename it so that its name does not end in .toml";
    let link_help = |name: &str| match name {
        "dangling" => "remove the link, or create the file it points to",
        "loop" => "remove the link, or point it at a file",
        _ => not_a_task,
    };
    assert_eq!(
        loaded.errors.len(),
        common::ODD_ENTRIES.len(),
        "{:#?}",
        loaded.errors
    );
    for (error, (name, message)) in loaded.errors.iter().zip(common::ODD_ENTRIES) {
        let help_text = link_help(name);
        assert_eq!(error.path, dir.join(format!("{name}.toml")));
        assert_error(error, 0, 0, message);
        assert_eq!(error.message, message);
        assert_eq!(help(error), help_text);
        // So that the daemon keeps the last good version of a task whose file turned odd.
        assert_eq!(error.task.as_deref(), Some(name));
    }
}

#[test]
fn a_device_is_named_never_opened() {
    let errors = load_task_file(Path::new("/dev/zero"), &defaults()).unwrap_err();
    assert_error(
        only_error(&errors),
        0,
        0,
        "a character device, not a task file",
    );
}

/// Regression: `--config /dev/zero` grew the process to 4 GiB, and a FIFO hung it.
#[test]
fn config_that_is_not_a_regular_file_is_refused_unread() {
    let temp = common::tempdir();
    let fifo = temp.path().join("fifo.toml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let big = temp.path().join("big.toml");
    fs::write(&big, vec![b'\n'; 1024 * 1024 + 1]).unwrap();
    for (path, message) in [
        (
            Path::new("/dev/zero"),
            "a character device, not a config file",
        ),
        (fifo.as_path(), "a named pipe (FIFO), not a config file"),
        (temp.path(), "a directory, not a config file"),
        (
            big.as_path(),
            "the file is 1048577 bytes; config files are limited to 1 MiB (1048576 bytes)",
        ),
    ] {
        let error = load_config(path).unwrap_err();
        assert_eq!(error.problems.len(), 1, "{error:#?}");
        assert_eq!(error.problems[0].message, message);
        assert!(error.problems[0].help.is_some(), "{error:#?}");
    }
}

#[test]
fn config_file_that_others_can_write_is_refused_with_the_fix() {
    let temp = common::tempdir();
    let path = temp.path().join("zkcron.toml");
    fs::write(&path, "").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).unwrap();
    let problems = zkcron::files::check_config_file(&path, &me());
    assert_refused(
        &problems,
        &path,
        "the file is group- and world-writable (mode 0666), so other users could change \
         zkcron's configuration",
        &format!("run `chmod go-w {}`", path.display()),
    );
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(zkcron::files::check_config_file(&path, &me()), vec![]);
    let owner = give_to_a_non_root_user(&path);
    let problems = zkcron::files::check_config_file(&path, &root());
    assert_refused(
        &problems,
        &path,
        &format!("the file is owned by uid {owner}"),
        &format!("run `chown root:root {}`", path.display()),
    );
}

// ---------------------------------------------------------------------------------------------
// What Linux refuses to exec

/// Regression: a 1 MB shell command was accepted, and every tick then failed (E2BIG).
#[test]
fn a_command_longer_than_linux_allows_for_one_argument_is_refused() {
    let at_limit = "x".repeat(131_071);
    parse(&format!(
        "schedule = \"@daily\"\ncommand = \"{at_limit}\"\n"
    ))
    .unwrap();
    let errors = errors_of(&format!(
        "schedule = \"@daily\"\ncommand = \"{}\"\n",
        "x".repeat(1_000_000)
    ));
    let error = only_error(&errors);
    assert_error(
        error,
        2,
        11,
        "`command` is 1000000 bytes; Linux refuses to start a program with any single argument \
         or environment string over 128 KiB (131071 bytes and its NUL), so every run would fail",
    );
    assert_eq!(
        help(error),
        "put the script or data in a file, and run that file: command = [\"/usr/local/bin/job\"]"
    );
    let errors = errors_of(&format!(
        "schedule = \"@daily\"\ncommand = [\"echo\", \"{}\"]\n",
        "x".repeat(131_072)
    ));
    assert_error(
        only_error(&errors),
        2,
        20,
        "element 2 of `command` is 131072 bytes; Linux refuses",
    );
    let errors = errors_of(&format!(
        "schedule = \"@daily\"\ncommand = \"true\"\nenv = {{ BIG = \"{}\" }}\n",
        "x".repeat(131_068)
    ));
    assert_error(
        only_error(&errors),
        3,
        9,
        "`env.BIG` is 131072 bytes; Linux refuses",
    );
}

#[test]
fn a_command_whose_arguments_together_exceed_what_linux_allows_is_refused() {
    let argv = vec!["\"a\""; 250_000].join(",");
    let errors = errors_of(&format!("schedule = \"@daily\"\ncommand = [{argv}]\n"));
    let error = only_error(&errors);
    assert_error(
        error,
        2,
        11,
        "`command` and `env` take 2508192 bytes as the program's arguments and environment",
    );
    assert!(
        error
            .message
            .ends_with("Linux allows at most 2097152 bytes (2 MiB, a quarter of the usual 8 MiB stack limit), so every run would fail"),
        "{}",
        error.message
    );
}

#[test]
fn on_failure_is_read_as_argv() {
    let spec = parse(&format!(
        "{MINIMAL}on_failure = [\"/usr/local/bin/page\", \"--team\", \"db\"]\n"
    ))
    .unwrap();
    assert_eq!(
        spec.extras.on_failure,
        Some(vec![
            "/usr/local/bin/page".to_string(),
            "--team".to_string(),
            "db".to_string()
        ])
    );
    assert_eq!(parse(MINIMAL).unwrap().extras.on_failure, None);
}

#[test]
fn on_failure_as_a_string_is_refused_with_an_example() {
    let errors = errors_of(&format!("{MINIMAL}on_failure = \"page db\"\n"));
    let error = only_error(&errors);
    assert_error(
        error,
        3,
        14,
        "`on_failure` must be an array of strings, found string \"page db\"",
    );
    assert!(
        help(error).contains("[\"/usr/local/bin/page-oncall\""),
        "{error}"
    );
}

#[test]
fn on_failure_is_checked_like_command_and_named_in_the_message() {
    let empty = errors_of(&format!("{MINIMAL}on_failure = []\n"));
    assert_error(only_error(&empty), 3, 14, "`on_failure` is an empty array");
    let number = errors_of(&format!("{MINIMAL}on_failure = [\"/bin/page\", 5]\n"));
    assert_error(
        only_error(&number),
        3,
        28,
        "every element of `on_failure` must be a string, found integer 5",
    );
    let blank = errors_of(&format!("{MINIMAL}on_failure = [\" \"]\n"));
    assert_error(
        only_error(&blank),
        3,
        15,
        "the program (the first element of `on_failure`) is empty",
    );
}
