use std::fs;
use std::path::PathBuf;

use super::state::*;
use super::*;

/// A state dir that cannot be created said only "cannot create state dir …: Permission
/// denied (os error 13)"; it names who zkcron runs as and the fix.
#[test]
fn a_state_dir_that_cannot_be_created_names_the_user_and_the_fix() {
    let dir = Path::new("/nonexistent-zkcron/state");
    let error = state_io(
        dir,
        format!("cannot create state dir {}", dir.display()),
        io::Error::from_raw_os_error(nix::libc::EACCES),
    );
    let user = crate::task::Identity::current().user_name;
    assert_eq!(
        error.to_string(),
        format!(
            "cannot create state dir {dir}: Permission denied (os error 13); zkcron runs as \
             {user:?}: run `mkdir -p {dir} && chown {user} {dir}`, or point --state-dir or \
             [scheduler].state_dir elsewhere",
            dir = dir.display()
        )
    );
}

use crate::schedule::Schedule;
use crate::task::{CatchUpPolicy, CommandLine, OverlapPolicy, TaskExtras};

/// An enabled every-minute task `name` running `true`.
pub(super) fn spec(name: &str) -> TaskSpec {
    TaskSpec {
        name: name.into(),
        path: PathBuf::from(format!("{name}.toml")),
        schedule: Schedule::parse("* * * * *", chrono_tz::Tz::UTC).unwrap(),
        command: CommandLine::Argv(vec!["true".into()]),
        user: None,
        overlap: OverlapPolicy::Skip,
        catch_up: CatchUpPolicy::Once,
        jitter: std::time::Duration::ZERO,
        kill_on_session_loss: false,
        on_node_loss: Default::default(),
        enabled: true,
        extras: TaskExtras {
            kill_grace: std::time::Duration::from_secs(1),
            ..Default::default()
        }
        .into(),
        digest: Default::default(),
    }
}

/// A successful run of `tick` that took 5 ms.
fn ok_result(tick: DateTime<Utc>) -> RunResult {
    RunResult {
        tick,
        node: "n1".into(),
        exit: "exit code 0".into(),
        success: true,
        attempts: 1,
        duration_ms: 5,
        finished_at: tick + chrono::TimeDelta::seconds(1),
        ..RunResult::default()
    }
}

/// A run of `tick` whose process exited with `code` after 5 ms, on node `here`.
pub(super) fn exited(tick: DateTime<Utc>, code: i32) -> RunResult {
    RunResult {
        tick,
        node: "here".into(),
        exit: format!("exit code {code}"),
        success: code == 0,
        attempts: 1,
        duration_ms: 5,
        finished_at: tick + chrono::TimeDelta::seconds(1),
        exit_code: Some(code),
        started_at: Some(tick),
        ..RunResult::default()
    }
}

pub(super) fn at(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_767_225_600 + s, 0).unwrap()
}

#[tokio::test]
async fn given_a_published_task_when_ticks_are_claimed_then_only_newer_ticks_win() {
    let dir = tempfile::tempdir().unwrap();
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    local.publish(&[spec("a")]).await.unwrap();
    assert!(local.leadership().borrow().may_fire("a"));
    assert_eq!(
        local.claim("a", at(60), ClaimIntent::Run).await.unwrap(),
        ClaimOutcome::Claimed
    );
    assert_eq!(
        local.claim("a", at(60), ClaimIntent::Run).await.unwrap(),
        ClaimOutcome::AlreadyClaimed { record: at(60) }
    );
    assert_eq!(
        local.claim("a", at(0), ClaimIntent::Run).await.unwrap(),
        ClaimOutcome::AlreadyClaimed { record: at(60) }
    );
    assert_eq!(
        local.claim("a", at(120), ClaimIntent::Run).await.unwrap(),
        ClaimOutcome::Claimed
    );
    assert_eq!(
        local.claim("b", at(120), ClaimIntent::Run).await.unwrap(),
        ClaimOutcome::NotLeader
    );
}

/// A reload that changed a task but added or removed none published the same 100,000 names as
/// a new set, which every reader of the leadership then compared with the old one.
#[tokio::test]
async fn publishing_the_same_names_again_keeps_the_set_and_tells_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    let mut disabled = spec("c");
    disabled.enabled = false;
    local
        .publish(&[spec("a"), spec("b"), disabled.clone()])
        .await
        .unwrap();
    let mut leadership = local.leadership();
    let first = leadership.borrow_and_update().tasks.clone();
    assert_eq!(first.len(), 2, "a disabled task is not led");
    // New specs (a changed task brings a new name), the same names.
    let mut changed = spec("b");
    changed.jitter = std::time::Duration::from_secs(1);
    local
        .publish(&[spec("a"), changed, disabled])
        .await
        .unwrap();
    assert!(!leadership.has_changed().unwrap(), "nothing to tell");
    assert!(Arc::ptr_eq(&first, &local.leadership().borrow().tasks));
    // One fewer, one more: told, with the new names.
    for names in [&["a"][..], &["a", "d"][..]] {
        let specs: Vec<TaskSpec> = names.iter().map(|n| spec(n)).collect();
        local.publish(&specs).await.unwrap();
        assert!(leadership.has_changed().unwrap(), "{names:?}");
        let led: Vec<String> = leadership
            .borrow_and_update()
            .tasks
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(led, names);
    }
}

#[tokio::test]
async fn given_a_run_cut_short_by_a_crash_when_reopened_then_its_tick_is_orphaned_once() {
    let dir = tempfile::tempdir().unwrap();
    {
        let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
        local.publish(&[spec("a"), spec("s")]).await.unwrap();
        local.claim("a", at(60), ClaimIntent::Run).await.unwrap();
        local.claim("s", at(60), ClaimIntent::Skip).await.unwrap();
        // Running in this process: not orphaned.
        assert_eq!(local.orphaned_tick("a").await.unwrap(), None);
    }
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    local.publish(&[spec("a"), spec("s")]).await.unwrap();
    assert_eq!(local.orphaned_tick("a").await.unwrap(), Some(at(60)));
    // A tick consumed without running has nothing to rerun.
    assert_eq!(local.orphaned_tick("s").await.unwrap(), None);
    assert_eq!(
        local.reclaim("a", at(60)).await.unwrap(),
        ClaimOutcome::Claimed
    );
    assert_eq!(
        local.reclaim("a", at(60)).await.unwrap(),
        ClaimOutcome::AlreadyClaimed { record: at(60) },
        "a tick is reclaimed once"
    );
    assert_eq!(local.orphaned_tick("a").await.unwrap(), None);
    local.run_ended("a", &ok_result(at(60))).await.unwrap();
    drop(local);
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    local.publish(&[spec("a")]).await.unwrap();
    assert_eq!(local.orphaned_tick("a").await.unwrap(), None, "it ended");
}

/// Regression: after `zkcron reset` moved a record back from the future, the result of the
/// future tick stayed and made a later run cut short by a crash look ended, so
/// `on_node_loss = "rerun"` did not run it again.
#[tokio::test]
async fn given_a_reset_record_when_a_later_run_is_cut_short_then_a_result_from_the_future_does_not_hide_it()
 {
    let dir = tempfile::tempdir().unwrap();
    let future = at(366 * 86_400);
    {
        let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
        local.publish(&[spec("a")]).await.unwrap();
        local.claim("a", future, ClaimIntent::Run).await.unwrap();
        local.run_ended("a", &ok_result(future)).await.unwrap();
    }
    StateDirEditor::open(dir.path(), crate::clock::Clock::system().now())
        .unwrap()
        .set_fire_record("a", at(0))
        .unwrap();
    {
        let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
        local.publish(&[spec("a")]).await.unwrap();
        assert_eq!(local.last_result("a").await.unwrap(), None);
        local.claim("a", at(60), ClaimIntent::Run).await.unwrap();
    }
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    local.publish(&[spec("a")]).await.unwrap();
    assert_eq!(local.orphaned_tick("a").await.unwrap(), Some(at(60)));
}

#[tokio::test]
async fn given_claims_when_the_backend_reopens_then_the_fire_record_survives() {
    let dir = tempfile::tempdir().unwrap();
    {
        let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
        local.publish(&[spec("a")]).await.unwrap();
        local.claim("a", at(60), ClaimIntent::Run).await.unwrap();
        local.run_ended("a", &ok_result(at(60))).await.unwrap();
    }
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    local.publish(&[spec("a")]).await.unwrap();
    assert_eq!(local.last_claimed("a").await.unwrap(), Some(at(60)));
    assert_eq!(
        local.last_result("a").await.unwrap().unwrap().exit,
        "exit code 0"
    );
    assert_eq!(
        local.claim("a", at(60), ClaimIntent::Run).await.unwrap(),
        ClaimOutcome::AlreadyClaimed { record: at(60) }
    );
}

#[tokio::test]
async fn given_a_corrupt_snapshot_when_opened_then_it_is_moved_aside_and_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join(SNAPSHOT), b"{not json").unwrap();
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    local.publish(&[spec("a")]).await.unwrap();
    assert_eq!(local.last_claimed("a").await.unwrap(), None);
    let names: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("snapshot.json.corrupt-")),
        "{names:?}"
    );
    assert_eq!(
        local.claim("a", at(60), ClaimIntent::Run).await.unwrap(),
        ClaimOutcome::Claimed
    );
}

#[tokio::test]
async fn given_a_journal_torn_by_a_crash_when_opened_then_the_complete_lines_count() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join(JOURNAL),
        concat!(
            r#"{"format":1,"task":"a","claimed":"2026-01-01T00:01:00Z"}"#,
            "\n",
            r#"{"format":1,"task":"a","claimed":"2026-01-01T00:02:00Z"}"#,
            "\n",
            r#"{"format":1,"task":"a","clai"#
        ),
    )
    .unwrap();
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    assert_eq!(local.last_claimed("a").await.unwrap(), Some(at(120)));
    // An unfinished last line was never acknowledged: it is dropped, not kept as damage, and
    // the journal was rewritten clean before anything is appended to it.
    assert_eq!(state_files(dir.path()), [JOURNAL, SNAPSHOT, "zkcron.lock"]);
    assert_eq!(fs::read(dir.path().join(JOURNAL)).unwrap(), b"");
}

#[tokio::test]
async fn given_a_journal_torn_by_a_crash_when_opened_then_one_warning_says_what_was_dropped() {
    let torn = r#"{"format":1,"task":"a","claimed":"2026-01-01T00:03"#;
    let open_torn = || {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join(JOURNAL),
            format!(
                "{}\n{torn}",
                r#"{"format":1,"task":"a","claimed":"2026-01-01T00:02:00Z"}"#
            ),
        )
        .unwrap();
        let (local, log) =
            logged(|| LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap());
        (dir, local, log)
    };
    // tracing caches for the whole process whether a callsite is wanted. Another test's thread
    // that logs this warning for the first time while `logged` installs its subscriber can
    // leave it cached as unwanted (a fresh-clone CI run missed it twice). Once the callsite is
    // registered, `logged`'s rebuild under its subscriber enables it, so a second torn journal,
    // and only when the first logged nothing at all, shows the warning.
    let (dir, local, log) = match open_torn() {
        (_, _, log) if log.is_empty() => open_torn(),
        opened => opened,
    };

    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 1, "one warning and nothing else: {log}");
    let warning = lines[0];
    for expected in [
        " WARN ",
        &format!("path={}", dir.path().join(JOURNAL).display()),
        &format!("bytes={}", torn.len()),
        &format!("dropped={torn}"),
        "the journal's last record was cut short: zkcron or the host stopped during its write",
        "never acknowledged, so no tick ran for it",
        &format!(
            "its {} byte(s) are dropped and nothing needs doing",
            torn.len()
        ),
    ] {
        assert!(warning.contains(expected), "{expected:?} not in {warning}");
    }
    assert_eq!(local.last_claimed("a").await.unwrap(), Some(at(120)));

    // The journal was rewritten clean: the next start has nothing to say.
    drop(local);
    let (_local, log) =
        logged(|| LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap());
    assert_eq!(log, "", "a clean journal is opened without a word");
}

#[test]
fn a_torn_record_in_the_log_is_cut_at_a_bound_that_says_how_much_is_left_out() {
    let tail = vec![b'x'; TORN_TAIL_SHOWN + 10];
    let text = torn_tail_text(&tail);
    assert!(text.starts_with(&"x".repeat(TORN_TAIL_SHOWN)), "{text}");
    assert!(text.ends_with("x... (10 more bytes)"), "{text}");
    assert_eq!(torn_tail_text(b"{\"format\":1"), "{\"format\":1");
}

/// What `open` logs on this thread, as the daemon's text log shows it (without colours).
fn logged<T>(open: impl FnOnce() -> T) -> (T, String) {
    let log = LogBuffer::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    // Interest in a callsite is cached for every thread: another test's thread can cache it
    // as "never" while this scoped subscriber is being set (the warning was missed once in a
    // CI run), so the cache is worked out again under it before the code runs.
    let opened = tracing::subscriber::with_default(subscriber, || {
        tracing::callsite::rebuild_interest_cache();
        open()
    });
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    (opened, text)
}

/// Log output kept in memory.
#[derive(Clone, Default)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The names in a state dir, sorted.
fn state_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn given_a_claim_glued_onto_a_torn_record_by_an_earlier_release_when_replayed_then_it_counts()
{
    // Regression: with the disk full an append failed half-way, the next durable claim was
    // appended onto the torn rest, and replay dropped the whole line: the tick ran twice.
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join(JOURNAL),
        concat!(
            r#"{"format":1,"task":"a","claimed":"2026-01-01T00:01:00Z","run":true}"#,
            "\n",
            r#"{"format":1,"task":"a","claimed":"2026-01-01T00:02"#,
            r#"{"format":1,"task":"a","claimed":"2026-01-01T00:02:00Z","run":true}"#,
            "\n",
            r#"{"format":1,"task":"b","claimed":"2026-01-01T00:03:00Z","run":true}"#,
            "\n",
        ),
    )
    .unwrap();
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    assert_eq!(local.last_claimed("a").await.unwrap(), Some(at(120)));
    assert_eq!(local.last_claimed("b").await.unwrap(), Some(at(180)));
    // Nothing was lost, so nothing is kept aside as damage.
    assert_eq!(state_files(dir.path()), [JOURNAL, SNAPSHOT, "zkcron.lock"]);
}

#[tokio::test]
async fn given_a_journal_when_reopened_then_it_is_folded_into_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    {
        let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
        local.publish(&[spec("a"), spec("b")]).await.unwrap();
        local.claim("a", at(60), ClaimIntent::Run).await.unwrap();
        local.claim("b", at(120), ClaimIntent::Run).await.unwrap();
        assert!(!fs::read(dir.path().join(JOURNAL)).unwrap().is_empty());
    }
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    assert_eq!(fs::read(dir.path().join(JOURNAL)).unwrap(), b"");
    let snapshot: Snapshot =
        serde_json::from_slice(&fs::read(dir.path().join(SNAPSHOT)).unwrap()).unwrap();
    assert_eq!(snapshot.tasks["a"].last_claimed, Some(at(60)));
    assert_eq!(snapshot.tasks["b"].last_claimed, Some(at(120)));
    assert_eq!(local.last_claimed("b").await.unwrap(), Some(at(120)));
}

#[tokio::test]
async fn given_many_concurrent_claims_then_each_wins_once() {
    let dir = tempfile::tempdir().unwrap();
    let local =
        Arc::new(LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap());
    let specs: Vec<TaskSpec> = (0..50).map(|i| spec(&format!("t{i}"))).collect();
    local.publish(&specs).await.unwrap();
    let mut claims = tokio::task::JoinSet::new();
    for i in 0..50 {
        for _ in 0..2 {
            let local = local.clone();
            claims.spawn(async move {
                local
                    .claim(&format!("t{i}"), at(60), ClaimIntent::Run)
                    .await
                    .unwrap()
            });
        }
    }
    let outcomes = claims.join_all().await;
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| **o == ClaimOutcome::Claimed)
            .count(),
        50
    );
}

#[tokio::test]
async fn given_state_with_fields_this_release_does_not_know_when_read_then_they_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join(SNAPSHOT),
        br#"{"format": 1, "tasks": {"a": {"last_claimed": "2026-01-01T00:01:00Z", "new": 1}}, "more": []}"#,
    )
    .unwrap();
    fs::write(
        dir.path().join(JOURNAL),
        concat!(
            r#"{"format":1,"task":"b","claimed":"2026-01-01T00:02:00Z","shiny":true}"#,
            "\n"
        ),
    )
    .unwrap();
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    assert_eq!(local.last_claimed("a").await.unwrap(), Some(at(60)));
    assert_eq!(local.last_claimed("b").await.unwrap(), Some(at(120)));
}

/// Opens `dir`, which must fail, and returns the message.
fn refusal(dir: &Path) -> String {
    match LocalCoordinator::open(dir, crate::clock::Clock::system()) {
        Ok(_) => panic!("a state dir in an unknown format was opened"),
        Err(error @ CoordError::UnreadableState(_)) => error.to_string(),
        Err(other) => panic!("wrong error: {other}"),
    }
}

#[test]
fn given_a_snapshot_in_a_newer_format_when_opened_then_it_is_refused_naming_file_and_format() {
    // Regression: a snapshot of a future format was read as format 1 without a word.
    let dir = tempfile::tempdir().unwrap();
    let snapshot = br#"{"format": 2, "tasks": {"a": {"last_claimed": "2026-01-01T00:01:00Z"}}}"#;
    fs::write(dir.path().join(SNAPSHOT), snapshot).unwrap();
    let message = refusal(dir.path());
    let path = dir.path().join(SNAPSHOT);
    assert!(
        message.contains(&format!("{} is in state format 2", path.display())),
        "{message}"
    );
    assert!(message.contains("reads only format 1"), "{message}");
    assert!(message.contains("written by a newer zkcron"), "{message}");
    assert!(message.contains("Upgrade zkcron"), "{message}");
    assert!(message.contains("move"), "{message}");
    // Refused, not repaired: the file is untouched and nothing was written beside it.
    assert_eq!(fs::read(&path).unwrap(), snapshot);
    assert_eq!(state_files(dir.path()), [SNAPSHOT, "zkcron.lock"]);
    // A shape this release does not know is refused by its format, not called damage.
    fs::write(&path, br#"{"format": 3, "tasks": ["a new shape"]}"#).unwrap();
    assert!(refusal(dir.path()).contains("is in state format 3"));
}

#[test]
fn given_a_journal_line_in_a_newer_format_when_opened_then_it_is_refused_naming_file_and_format() {
    let dir = tempfile::tempdir().unwrap();
    let journal = concat!(
        r#"{"format":1,"task":"a","claimed":"2026-01-01T00:01:00Z"}"#,
        "\n",
        r#"{"format":2,"task":"a","claimed":"2026-01-01T00:02:00Z"}"#,
        "\n",
    );
    fs::write(dir.path().join(JOURNAL), journal).unwrap();
    let message = refusal(dir.path());
    assert!(
        message.contains(&format!(
            "{} is in state format 2",
            dir.path().join(JOURNAL).display()
        )),
        "{message}"
    );
    assert!(message.contains("reads only format 1"), "{message}");
    assert_eq!(
        fs::read(dir.path().join(JOURNAL)).unwrap(),
        journal.as_bytes()
    );
    assert_eq!(state_files(dir.path()), [JOURNAL, "zkcron.lock"]);
    // The read-only reader of `zkcron next` refuses it too.
    let error = read_fire_records(dir.path()).expect_err("refused");
    assert!(
        error.to_string().contains("is in state format 2"),
        "{error}"
    );
}

#[test]
fn given_a_running_daemon_when_a_second_opens_the_same_state_dir_then_it_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _first = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    let error = LocalCoordinator::open(dir.path(), crate::clock::Clock::system())
        .err()
        .expect("second open must fail");
    assert!(
        error.to_string().contains("is in use by another zkcron"),
        "{error}"
    );
}

#[tokio::test]
async fn given_release_all_then_nothing_may_fire() {
    let dir = tempfile::tempdir().unwrap();
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    local.publish(&[spec("a")]).await.unwrap();
    local.release_all().await;
    assert!(!local.leadership().borrow().may_fire("a"));
    assert_eq!(
        local.claim("a", at(60), ClaimIntent::Run).await.unwrap(),
        ClaimOutcome::NotLeader
    );
}

/// Regression: with `overlap = "allow"`, a long run of an earlier tick that ended after a run of
/// a later tick replaced the later tick's result (the ZooKeeper backend kept the newer one).
/// Replaying a journal written that way keeps the newer one too.
#[tokio::test]
async fn given_an_earlier_run_that_ends_last_then_the_later_ticks_result_stays() {
    let dir = tempfile::tempdir().unwrap();
    {
        let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
        local.publish(&[spec("a")]).await.unwrap();
        local.claim("a", at(60), ClaimIntent::Run).await.unwrap();
        local.claim("a", at(120), ClaimIntent::Run).await.unwrap();
        local.run_ended("a", &ok_result(at(120))).await.unwrap();
        local.run_ended("a", &ok_result(at(60))).await.unwrap();
        assert_eq!(local.last_result("a").await.unwrap().unwrap().tick, at(120));
    }
    // Lines of the release before, which stored every result in the order they ended.
    let mut journal = fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join(JOURNAL))
        .unwrap();
    std::io::Write::write_all(
        &mut journal,
        concat!(
            r#"{"format":1,"task":"b","result":{"tick":"2026-01-01T00:02:00Z","node":"n1","exit":"exit code 0","success":true,"attempts":1,"duration_ms":5,"finished_at":"2026-01-01T00:02:01Z"}}"#,
            "\n",
            r#"{"format":1,"task":"b","result":{"tick":"2026-01-01T00:01:00Z","node":"n1","exit":"exit code 0","success":true,"attempts":1,"duration_ms":5,"finished_at":"2026-01-01T00:01:01Z"}}"#,
            "\n",
        )
        .as_bytes(),
    )
    .unwrap();
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    assert_eq!(local.last_result("a").await.unwrap().unwrap().tick, at(120));
    assert_eq!(local.last_result("b").await.unwrap().unwrap().tick, at(120));
}

/// Regression: the local backend led disabled tasks, so `systemctl status` said "leading 2 of
/// 2 tasks" with one of them disabled, where a ZooKeeper node said "leading 1 of 2".
#[tokio::test]
async fn given_a_disabled_task_then_it_is_not_led() {
    let dir = tempfile::tempdir().unwrap();
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    let off = TaskSpec {
        enabled: false,
        extras: Default::default(),
        ..spec("off")
    };
    local.publish(&[spec("on"), off]).await.unwrap();
    assert!(local.leadership().borrow().may_fire("on"));
    assert!(!local.leadership().borrow().may_fire("off"));
    assert_eq!(
        local.claim("off", at(60), ClaimIntent::Run).await.unwrap(),
        ClaimOutcome::NotLeader
    );
}

/// Regression: a rerun of a task with no fire record was refused as "not leader" (the
/// ZooKeeper backend said "already claimed"), and a tick that had ended, or had been claimed to
/// skip, was rerun when asked.
#[tokio::test]
async fn given_no_orphan_then_a_rerun_is_refused_as_claimed() {
    let dir = tempfile::tempdir().unwrap();
    {
        let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
        local
            .publish(&[spec("ended"), spec("skipped")])
            .await
            .unwrap();
        local
            .claim("ended", at(60), ClaimIntent::Run)
            .await
            .unwrap();
        local.run_ended("ended", &ok_result(at(60))).await.unwrap();
        local
            .claim("skipped", at(60), ClaimIntent::Skip)
            .await
            .unwrap();
    }
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    local
        .publish(&[spec("ended"), spec("skipped"), spec("new")])
        .await
        .unwrap();
    for task in ["new", "ended", "skipped"] {
        assert_eq!(
            local.reclaim(task, at(60)).await.unwrap(),
            ClaimOutcome::AlreadyClaimed { record: at(60) },
            "{task}"
        );
    }
}

/// Every start-up asks about each task's fire record; asking about a task that never fired
/// made it an empty record, a lock and a copy of its name, 2 MB for 10,000 tasks. Reads leave
/// no record behind; a claim still makes one.
#[tokio::test]
async fn reading_a_task_that_never_fired_adds_no_record() {
    let dir = tempfile::tempdir().unwrap();
    let local = LocalCoordinator::open(dir.path(), crate::clock::Clock::system()).unwrap();
    local.publish(&[spec("a")]).await.unwrap();
    assert_eq!(local.last_claimed("a").await.unwrap(), None);
    assert_eq!(local.orphaned_tick("a").await.unwrap(), None);
    assert_eq!(local.last_result("a").await.unwrap(), None);
    assert!(local.records.lock().unwrap().is_empty());

    local.claim("a", at(60), ClaimIntent::Run).await.unwrap();
    assert_eq!(local.last_claimed("a").await.unwrap(), Some(at(60)));
    assert_eq!(local.records.lock().unwrap().len(), 1);
}
