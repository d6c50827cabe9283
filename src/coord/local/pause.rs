//! Paused tasks on a single host: `<state_dir>/paused.json`, a file of its own so
//! that a previous release, which does not know it, still reads the state dir (it then fires
//! the paused tasks: pausing needs this release).
//!
//! Written whole (temp file, fsync, rename, directory fsync) on every change, while the daemon
//! holds the state dir's lock. Resuming first moves the task's fire record to now through the
//! journal (durable before anything else changes; the rule is [`operator::resumed`], the one
//! the cluster's `zkcron resume` and the simulation apply), then forgets the pause: the paused
//! period is never caught up, and a crash between the two leaves the task paused with its record
//! moved, which the next resume moves again.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, SubsecRound, Utc};
use serde::{Deserialize, Serialize};

use super::queue::{Batching, Durability};
use super::state::{check_format, state_io, write_state_file};
use super::{Change, FORMAT_VERSION, LocalCoordinator};
use crate::coord::operator;
use crate::coord::records::{FireRecord, MarkRecord};
use crate::coord::{CoordError, RunResult};

/// The file's name in the state dir.
pub(super) const PAUSED: &str = "paused.json";

/// `paused.json`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct PausedFile {
    format: u32,
    #[serde(default)]
    tasks: BTreeMap<String, PauseMark>,
}

/// Who paused a task, when, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PauseMark {
    pub at: DateTime<Utc>,
    /// `user@host`, or whatever the caller names.
    pub by: String,
    /// `zkcron pause --reason`, or the failed run that paused a task with `pause_on_failure`;
    /// absent when none was given (a release before this field reads the file all the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Reads `<state_dir>/paused.json` (none: nothing is paused). An unreadable file is refused,
/// not ignored: ignoring it would fire tasks the operator paused.
pub(super) fn read_paused(state_dir: &Path) -> Result<BTreeMap<String, PauseMark>, CoordError> {
    let path = state_dir.join(PAUSED);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(error) => {
            return Err(state_io(
                state_dir,
                format!("cannot read {}", path.display()),
                error,
            ));
        }
    };
    #[derive(Deserialize)]
    struct FormatOnly {
        format: u32,
    }
    if let Ok(FormatOnly { format }) = serde_json::from_slice(&bytes) {
        check_format(&path, format)?;
    }
    match serde_json::from_slice::<PausedFile>(&bytes) {
        Ok(file) => Ok(file.tasks),
        Err(error) => Err(CoordError::UnreadableState(format!(
            "{path} is not a valid list of paused tasks ({error}); firing would run tasks the \
             operator paused. Fix or remove {path} (removing it resumes every task)",
            path = path.display()
        ))),
    }
}

impl LocalCoordinator {
    /// The paused tasks.
    pub fn paused(&self) -> BTreeSet<String> {
        self.paused_marks().keys().cloned().collect()
    }

    /// The paused tasks with who paused them and when.
    pub fn paused_marks(&self) -> BTreeMap<String, PauseMark> {
        self.paused.lock().expect("paused lock poisoned").clone()
    }

    /// Pauses (`paused`, without a reason) or resumes `task`; `by` is who asks (`user@host`).
    /// Returns whether anything changed ([`LocalCoordinator::pause_with`],
    /// [`LocalCoordinator::resume`]).
    pub async fn set_paused(&self, task: &str, paused: bool, by: &str) -> Result<bool, CoordError> {
        if !paused {
            return self.resume(task).await;
        }
        let mark = PauseMark {
            at: self.clock.now().trunc_subsecs(0),
            by: by.to_string(),
            reason: None,
        };
        self.pause_with(task, mark).await
    }

    /// Pauses `task` with `mark` (who, when, why). Returns whether anything changed: a task
    /// paused already keeps its first mark.
    pub async fn pause_with(&self, task: &str, mark: PauseMark) -> Result<bool, CoordError> {
        // One change at a time: the file is written whole.
        let _writing = self.pausing.lock().await;
        let mut marks = self.paused_marks();
        if marks.contains_key(task) {
            return Ok(false);
        }
        marks.insert(task.to_string(), mark);
        self.write_paused(marks)
    }

    /// Pauses `task` for its failed run `result` (`pause_on_failure`), synced before the run's
    /// end is stored; a task paused already keeps its mark. Logs which it was.
    pub(super) async fn pause_for_failure(
        &self,
        task: &str,
        result: &RunResult,
        mark: MarkRecord,
    ) -> Result<(), CoordError> {
        let fire_id = result.fire_id_of(task);
        let mark = PauseMark {
            at: mark.at,
            by: mark.by,
            reason: mark.reason,
        };
        if self.pause_with(task, mark).await? {
            tracing::warn!(task, %fire_id, failure = %result.exit, "task paused: its run failed (pause_on_failure); `zkcron resume {task}` lets it fire again");
        } else {
            tracing::info!(
                task,
                %fire_id,
                "task already paused; its failed run changes nothing (pause_on_failure)"
            );
        }
        Ok(())
    }

    /// Resumes `task`; returns whether it was paused. Moves the task's fire record to now
    /// (whole seconds, only if older), durably, before the pause is forgotten: the paused
    /// period is not caught up.
    pub async fn resume(&self, task: &str) -> Result<bool, CoordError> {
        let _writing = self.pausing.lock().await;
        let mut marks = self.paused_marks();
        if !marks.contains_key(task) {
            return Ok(false);
        }
        let now = self.clock.now().trunc_subsecs(0);
        {
            let slot = self.slot(task);
            let mut record = slot.lock().await;
            // The resume rule every backend applies: a record older than now moves to now,
            // claimed by nobody; the queued tick stays (the journal change leaves it as is).
            let fire = FireRecord {
                tick: record.last_claimed,
                run: record.claimed_to_run,
                queued: record.queued,
                ..FireRecord::empty()
            };
            if let Some(moved) = operator::resumed(&fire, now) {
                let change = Change {
                    claimed: moved.tick,
                    run: moved.run,
                    ticks: moved.ticks,
                    ..Change::of(task)
                };
                self.commit(change, Durability::Synced, Batching::Gather, &mut record)
                    .await?;
            }
        }
        marks.remove(task);
        self.write_paused(marks)
    }

    /// Writes `marks` whole as `paused.json`, then publishes them.
    fn write_paused(&self, marks: BTreeMap<String, PauseMark>) -> Result<bool, CoordError> {
        let file = PausedFile {
            format: FORMAT_VERSION,
            tasks: marks.clone(),
        };
        let bytes = serde_json::to_vec_pretty(&file).expect("serializes");
        write_state_file(&self.state_dir, PAUSED, &bytes)?;
        let names: BTreeSet<String> = marks.keys().cloned().collect();
        *self.paused.lock().expect("paused lock poisoned") = marks;
        self.leadership
            .send_modify(|l| l.paused_tasks = Arc::new(names));
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use chrono::TimeDelta;

    use super::*;
    use crate::clock::Clock;
    use crate::coord::{ClaimIntent, ClaimOutcome, Coordinator};
    use crate::task::{TaskDefaults, TaskSpec, parse_task};

    fn spec(name: &str) -> TaskSpec {
        let defaults = TaskDefaults::for_tests();
        let text = "schedule = \"* * * * * *\"\ncommand = \"true\"\n";
        parse_task(name, Path::new("t.toml"), text, &defaults).unwrap()
    }

    #[tokio::test]
    async fn a_pause_survives_a_restart_and_a_paused_task_may_not_fire_or_claim() {
        let dir = tempfile::tempdir().unwrap();
        let local = LocalCoordinator::open(dir.path(), Clock::system()).unwrap();
        local.publish(&[spec("a"), spec("b")]).await.unwrap();
        assert!(local.set_paused("a", true, "ops@h").await.unwrap());
        assert!(
            !local.set_paused("a", true, "ops@h").await.unwrap(),
            "no change"
        );
        assert_eq!(local.paused(), BTreeSet::from(["a".to_string()]));
        let leadership = local.leadership().borrow().clone();
        assert!(!leadership.may_fire("a") && leadership.may_fire("b"));
        let tick = Clock::system().now().trunc_subsecs(0) + TimeDelta::seconds(5);
        assert_eq!(
            local.claim("a", tick, ClaimIntent::Run).await.unwrap(),
            ClaimOutcome::NotLeader
        );
        drop(local);
        let local = LocalCoordinator::open(dir.path(), Clock::system()).unwrap();
        local.publish(&[spec("a"), spec("b")]).await.unwrap();
        assert_eq!(local.paused(), BTreeSet::from(["a".to_string()]));
        assert_eq!(local.paused_marks()["a"].by, "ops@h");
        assert!(!local.leadership().borrow().may_fire("a"));
    }

    /// `task`'s claimed run of `tick`, failed with exit code 3, carrying its pause.
    fn failed_with_pause(tick: DateTime<Utc>) -> RunResult {
        RunResult {
            tick,
            node: "test-node".into(),
            exit: "exit code 3".into(),
            exit_code: Some(3),
            attempts: 1,
            finished_at: tick,
            pause: Some(Box::new(MarkRecord {
                format: 1,
                at: tick,
                by: "zkcron@test-node".into(),
                reason: Some("pause_on_failure: run a failed (exit code 3)".into()),
            })),
            ..RunResult::default()
        }
    }

    #[tokio::test]
    async fn a_failed_runs_end_stores_its_pause_durably_and_keeps_a_pause_already_there() {
        let dir = tempfile::tempdir().unwrap();
        let local = LocalCoordinator::open(dir.path(), Clock::system()).unwrap();
        local.publish(&[spec("a"), spec("b")]).await.unwrap();
        let operator = PauseMark {
            at: Clock::system().now().trunc_subsecs(0),
            by: "ops@h".into(),
            reason: Some("maintenance".into()),
        };
        let tick = Clock::system().now().trunc_subsecs(0) + TimeDelta::seconds(5);
        for task in ["a", "b"] {
            let claimed = local.claim(task, tick, ClaimIntent::Run).await.unwrap();
            assert_eq!(claimed, ClaimOutcome::Claimed, "{task}");
        }
        // The operator pauses `b` while its run is live.
        assert!(local.pause_with("b", operator.clone()).await.unwrap());
        for task in ["a", "b"] {
            local
                .run_ended(task, &failed_with_pause(tick))
                .await
                .unwrap();
            let stored = local.last_result(task).await.unwrap().expect("stored");
            assert_eq!(stored.tick, tick);
        }
        assert!(!local.leadership().borrow().may_fire("a"));
        drop(local);
        // On disk: `a` paused by its failed run, `b` still by the operator.
        let marks = read_paused(dir.path()).unwrap();
        assert_eq!(marks["a"].by, "zkcron@test-node");
        assert_eq!(
            marks["a"].reason.as_deref(),
            Some("pause_on_failure: run a failed (exit code 3)")
        );
        assert_eq!(marks["b"], operator);
    }

    #[tokio::test]
    async fn resuming_moves_an_older_fire_record_to_now_durably_and_a_newer_one_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let local = LocalCoordinator::open(dir.path(), Clock::system()).unwrap();
        local.publish(&[spec("old"), spec("new")]).await.unwrap();
        let long_ago = Clock::system().now().trunc_subsecs(0) - TimeDelta::hours(1);
        let ahead = Clock::system().now().trunc_subsecs(0) + TimeDelta::hours(1);
        for (task, tick) in [("old", long_ago), ("new", ahead)] {
            let claimed = local.claim(task, tick, ClaimIntent::Skip).await.unwrap();
            assert_eq!(claimed, ClaimOutcome::Claimed);
            local.set_paused(task, true, "ops@h").await.unwrap();
        }
        let before = Clock::system().now().trunc_subsecs(0);
        for task in ["old", "new"] {
            assert!(local.set_paused(task, false, "ops@h").await.unwrap());
        }
        let after = Clock::system().now();
        assert!(local.paused().is_empty());
        let moved = local.last_claimed("old").await.unwrap().unwrap();
        assert!(before <= moved && moved <= after, "{moved}");
        assert_eq!(local.last_claimed("new").await.unwrap(), Some(ahead));
        // Durable: a restart reads the moved record and no pause.
        drop(local);
        let local = LocalCoordinator::open(dir.path(), Clock::system()).unwrap();
        assert_eq!(local.last_claimed("old").await.unwrap(), Some(moved));
        assert!(local.paused().is_empty());
    }

    /// The local backend applied its own copy of the resume rule; it is the shared one now,
    /// which keeps a queued tick as `zkcron resume` on a cluster does.
    #[tokio::test]
    async fn a_local_resume_keeps_the_queued_tick_as_the_cluster_resume_does() {
        // Given a paused task whose run is live and a tick queued behind it.
        let dir = tempfile::tempdir().unwrap();
        let local = LocalCoordinator::open(dir.path(), Clock::system()).unwrap();
        local.publish(&[spec("q")]).await.unwrap();
        let long_ago = Clock::system().now().trunc_subsecs(0) - TimeDelta::hours(1);
        let queued = long_ago + TimeDelta::seconds(1);
        for (tick, intent) in [(long_ago, ClaimIntent::Run), (queued, ClaimIntent::Queue)] {
            let claimed = local.claim("q", tick, intent).await.unwrap();
            assert_eq!(claimed, ClaimOutcome::Claimed);
        }
        local.set_paused("q", true, "ops@h").await.unwrap();
        // When it is resumed.
        assert!(local.resume("q").await.unwrap());
        // Then the record moved past the paused period and the queued tick still waits.
        assert!(local.last_claimed("q").await.unwrap() > Some(queued));
        assert_eq!(local.queued_tick("q").await.unwrap(), Some(queued));
        drop(local);
        let local = LocalCoordinator::open(dir.path(), Clock::system()).unwrap();
        assert_eq!(local.queued_tick("q").await.unwrap(), Some(queued));
    }

    #[tokio::test]
    async fn a_pause_keeps_its_reason_across_a_restart_and_resume_clears_it() {
        let dir = tempfile::tempdir().unwrap();
        let local = LocalCoordinator::open(dir.path(), Clock::system()).unwrap();
        local.publish(&[spec("a")]).await.unwrap();
        let at = Clock::system().now().trunc_subsecs(0);
        let mark = PauseMark {
            at,
            by: "ops@h".into(),
            reason: Some("disk full".into()),
        };
        assert!(local.pause_with("a", mark.clone()).await.unwrap());
        let second = PauseMark {
            reason: Some("other".into()),
            ..mark.clone()
        };
        assert!(
            !local.pause_with("a", second).await.unwrap(),
            "a paused task keeps its first mark"
        );
        drop(local);
        let local = LocalCoordinator::open(dir.path(), Clock::system()).unwrap();
        assert_eq!(local.paused_marks()["a"], mark);
        assert!(local.resume("a").await.unwrap());
        assert!(!local.resume("a").await.unwrap(), "not paused any more");
        drop(local);
        let local = LocalCoordinator::open(dir.path(), Clock::system()).unwrap();
        assert!(local.paused_marks().is_empty());
    }

    #[test]
    fn a_paused_file_without_reasons_still_reads() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(PAUSED),
            r#"{"format":1,"tasks":{"a":{"at":"2026-01-01T00:00:00Z","by":"ops@h"}}}"#,
        )
        .unwrap();
        let local = LocalCoordinator::open(dir.path(), Clock::system()).unwrap();
        assert_eq!(local.paused_marks()["a"].reason, None);
    }

    #[test]
    fn an_unreadable_paused_file_is_refused_naming_the_file_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(PAUSED);
        std::fs::write(&path, "{not json").unwrap();
        let error = LocalCoordinator::open(dir.path(), Clock::system())
            .err()
            .expect("refused");
        assert!(matches!(error, CoordError::UnreadableState(_)), "{error:?}");
        assert!(
            error.to_string().contains(&format!(
                "{} is not a valid list of paused tasks",
                path.display()
            )) && error.to_string().contains("removing it resumes every task"),
            "{error}"
        );
        std::fs::write(&path, r#"{"format":99,"tasks":{}}"#).unwrap();
        let error = LocalCoordinator::open(dir.path(), Clock::system())
            .err()
            .expect("refused");
        assert!(error.to_string().contains("state format 99"), "{error}");
    }
}
