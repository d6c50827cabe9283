//! Unit tests of the executor's pure parts and its line reader.

use super::output::for_each_line;
use super::*;
use crate::accounts::Identity;

fn identity(uid: u32, name: &str) -> Identity {
    Identity {
        uid,
        user_name: name.to_owned(),
    }
}

#[test]
fn given_root_when_no_user_is_asked_then_it_runs_as_itself() {
    let root = identity(0, "root");
    assert_eq!(
        decide_user(&root, "root", None, None),
        UserAction::RunAsSelf
    );
}

#[test]
fn given_root_when_a_user_is_asked_then_it_switches_to_that_user() {
    let root = identity(0, "root");
    assert_eq!(
        decide_user(&root, "root", Some("backup"), None),
        UserAction::Switch {
            user: "backup".into(),
            group: None
        }
    );
    assert_eq!(
        decide_user(&root, "root", Some("backup"), Some("disk")),
        UserAction::Switch {
            user: "backup".into(),
            group: Some("disk".into())
        }
    );
}

#[test]
fn given_root_when_only_a_group_is_asked_then_it_keeps_its_user_and_switches_group() {
    let root = identity(0, "root");
    assert_eq!(
        decide_user(&root, "root", None, Some("adm")),
        UserAction::Switch {
            user: "root".into(),
            group: Some("adm".into())
        }
    );
}

#[test]
fn given_non_root_when_it_names_itself_then_it_runs_as_itself() {
    let alice = identity(1000, "alice");
    assert_eq!(
        decide_user(&alice, "alice", Some("alice"), None),
        UserAction::RunAsSelf
    );
    assert_eq!(
        decide_user(&alice, "alice", Some("alice"), Some("alice")),
        UserAction::RunAsSelf
    );
    assert_eq!(
        decide_user(&alice, "alice", None, None),
        UserAction::RunAsSelf
    );
}

#[test]
fn given_non_root_when_another_user_is_asked_then_it_refuses_and_says_why() {
    let alice = identity(1000, "alice");
    assert_eq!(
        decide_user(&alice, "alice", Some("bob"), None),
        UserAction::Refuse("cannot run as user \"bob\": zkcron is not running as root".into())
    );
}

#[test]
fn given_non_root_when_another_group_is_asked_then_it_refuses_and_says_why() {
    let alice = identity(1000, "alice");
    assert_eq!(
        decide_user(&alice, "alice", None, Some("wheel")),
        UserAction::Refuse("cannot run as group \"wheel\": zkcron is not running as root".into())
    );
}

#[test]
fn retry_delay_doubles_from_backoff_and_stops_at_max_backoff() {
    let policy = RetryPolicy {
        attempts: 100,
        backoff: Duration::from_secs(10),
        max_backoff: Duration::from_secs(60),
    };
    let delays: Vec<u64> = (1..=5).map(|k| retry_delay(&policy, k).as_secs()).collect();
    assert_eq!(delays, [10, 20, 40, 60, 60]);
    assert_eq!(retry_delay(&policy, 100), Duration::from_secs(60));
}

#[test]
fn exit_display_says_what_happened() {
    assert_eq!(Exit::Code(3).to_string(), "exit code 3");
    assert_eq!(Exit::Signal(9).to_string(), "killed by signal 9 (SIGKILL)");
    assert_eq!(Exit::Signal(200).to_string(), "killed by signal 200");
    assert_eq!(Exit::TimedOut.to_string(), "timed out");
    assert_eq!(
        Exit::SpawnFailed("no such file".into()).to_string(),
        "failed to start: no such file"
    );
    assert_eq!(Exit::Stopped.to_string(), "stopped");
}

async fn lines_of(input: &[u8], max: usize) -> Vec<String> {
    let mut lines = Vec::new();
    // Tiny reads make lines span many of them.
    for_each_line(input, 3, max, |l, _| lines.push(l.to_owned()), || {})
        .await
        .unwrap();
    lines
}

#[tokio::test]
async fn lines_split_on_newline_and_keep_a_last_line_without_newline() {
    assert_eq!(
        lines_of(b"one\r\ntwo\n\nthree", 100).await,
        ["one", "two", "", "three"]
    );
    assert!(lines_of(b"", 100).await.is_empty());
}

#[tokio::test]
async fn long_lines_are_cut_with_a_marker_counting_the_dropped_bytes() {
    assert_eq!(
        lines_of(b"abcdefgh\nxy\n", 4).await,
        ["abcd …[cut 4 bytes]", "xy"]
    );
}

#[tokio::test]
async fn each_line_reports_the_bytes_it_took_in_the_stream_line_ending_included() {
    let mut sizes = Vec::new();
    let input = &b"one\r\nabcdefgh\n\nlast"[..];
    for_each_line(input, 3, 4, |_, bytes| sizes.push(bytes), || {})
        .await
        .unwrap();
    assert_eq!(sizes, [5, 9, 1, 4]);
}

#[tokio::test]
async fn a_cut_never_splits_a_utf8_character_and_invalid_bytes_are_replaced() {
    // "é" is two bytes; a cut after 3 bytes would split the second "é".
    assert_eq!(lines_of("aéé\n".as_bytes(), 3).await, ["aé …[cut 2 bytes]"]);
    assert_eq!(lines_of(b"a\xffb\n", 10).await, ["a\u{fffd}b"]);
}

/// The tail stored with a failure is text: colours and other escapes left out, lines kept.
#[test]
fn a_stored_tail_leaves_terminal_escapes_and_control_characters_out() {
    let raw = "\u{1b}[31merror:\u{1b}[0m disk full\r\n\tat step 3\u{7}\nlast";
    assert_eq!(
        super::printable_tail(raw),
        "error: disk full\n\tat step 3\nlast"
    );
}
