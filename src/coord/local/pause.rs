//! Paused tasks on a single host: `<state_dir>/paused.json`, a file of its own so
//! that a previous release, which does not know it, still reads the state dir (it then fires
//! the paused tasks: pausing needs this release).
//!
//! Written whole (temp file, fsync, rename, directory fsync) on every change, while the daemon
//! holds the state dir's lock. Resuming first moves the task's fire record to now through the
//! journal (durable before anything else changes), then forgets the pause: the paused period
//! is never caught up, and a crash between the two leaves the task paused with its record
//! moved, which the next resume moves again.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, SubsecRound, Utc};
use serde::{Deserialize, Serialize};

use super::journal::write_atomically;
use super::queue::Durability;
use super::state::{check_format, state_io};
use super::{Change, FORMAT_VERSION, LocalCoordinator};
use crate::coord::CoordError;

/// The file's name in the state dir.
pub(super) const PAUSED: &str = "paused.json";

/// `paused.json`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct PausedFile {
    format: u32,
    #[serde(default)]
    tasks: BTreeMap<String, PauseMark>,
}

/// Who paused a task, and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PauseMark {
    pub at: DateTime<Utc>,
    /// `user@host`, or whatever the caller names.
    pub by: String,
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

    /// Pauses (`paused`) or resumes `task`; `by` is who asks (`user@host`). Returns whether
    /// anything changed. Resuming moves the task's fire record to now (whole seconds, only if
    /// older), durably, before the pause is forgotten: the paused period is not caught up.
    pub async fn set_paused(&self, task: &str, paused: bool, by: &str) -> Result<bool, CoordError> {
        // One change at a time: the file is written whole.
        let _writing = self.pausing.lock().await;
        let mut marks = self.paused_marks();
        if paused == marks.contains_key(task) {
            return Ok(false);
        }
        let now = crate::clock::wall_clock().trunc_subsecs(0);
        if paused {
            marks.insert(
                task.to_string(),
                PauseMark {
                    at: now,
                    by: by.to_string(),
                },
            );
        } else {
            let slot = self.slot(task);
            let mut record = slot.lock().await;
            if record.last_claimed.is_none_or(|tick| tick < now) {
                let change = Change {
                    format: FORMAT_VERSION,
                    task: task.to_string(),
                    claimed: Some(now),
                    result: None,
                    run: false,
                };
                self.commit(change, Durability::Synced, &mut record).await?;
            }
            marks.remove(task);
        }
        let file = PausedFile {
            format: FORMAT_VERSION,
            tasks: marks.clone(),
        };
        let bytes = serde_json::to_vec_pretty(&file).expect("serializes");
        let path = self.state_dir.join(PAUSED);
        write_atomically(&path, &bytes).map_err(|error| {
            state_io(
                &self.state_dir,
                format!("cannot write {}", path.display()),
                error,
            )
        })?;
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
    use crate::clock::wall_clock;
    use crate::coord::{ClaimIntent, ClaimOutcome, Coordinator};
    use crate::task::{Identity, TaskDefaults, TaskSpec, parse_task};

    fn spec(name: &str) -> TaskSpec {
        let defaults = TaskDefaults {
            timezone: chrono_tz::Tz::UTC,
            user: None,
            identity: Identity::current(),
            backend: crate::task::TaskBackend::Local,
        };
        let text = "schedule = \"* * * * * *\"\ncommand = \"true\"\n";
        parse_task(name, Path::new("t.toml"), text, &defaults).unwrap()
    }

    #[tokio::test]
    async fn a_pause_survives_a_restart_and_a_paused_task_may_not_fire_or_claim() {
        let dir = tempfile::tempdir().unwrap();
        let local = LocalCoordinator::open(dir.path()).unwrap();
        local.publish(&[spec("a"), spec("b")]).await.unwrap();
        assert!(local.set_paused("a", true, "ops@h").await.unwrap());
        assert!(
            !local.set_paused("a", true, "ops@h").await.unwrap(),
            "no change"
        );
        assert_eq!(local.paused(), BTreeSet::from(["a".to_string()]));
        let leadership = local.leadership().borrow().clone();
        assert!(!leadership.may_fire("a") && leadership.may_fire("b"));
        let tick = wall_clock().trunc_subsecs(0) + TimeDelta::seconds(5);
        assert_eq!(
            local.claim("a", tick, ClaimIntent::Run).await.unwrap(),
            ClaimOutcome::NotLeader
        );
        drop(local);
        let local = LocalCoordinator::open(dir.path()).unwrap();
        local.publish(&[spec("a"), spec("b")]).await.unwrap();
        assert_eq!(local.paused(), BTreeSet::from(["a".to_string()]));
        assert_eq!(local.paused_marks()["a"].by, "ops@h");
        assert!(!local.leadership().borrow().may_fire("a"));
    }

    #[tokio::test]
    async fn resuming_moves_an_older_fire_record_to_now_durably_and_a_newer_one_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let local = LocalCoordinator::open(dir.path()).unwrap();
        local.publish(&[spec("old"), spec("new")]).await.unwrap();
        let long_ago = wall_clock().trunc_subsecs(0) - TimeDelta::hours(1);
        let ahead = wall_clock().trunc_subsecs(0) + TimeDelta::hours(1);
        for (task, tick) in [("old", long_ago), ("new", ahead)] {
            let claimed = local.claim(task, tick, ClaimIntent::Skip).await.unwrap();
            assert_eq!(claimed, ClaimOutcome::Claimed);
            local.set_paused(task, true, "ops@h").await.unwrap();
        }
        let before = wall_clock().trunc_subsecs(0);
        for task in ["old", "new"] {
            assert!(local.set_paused(task, false, "ops@h").await.unwrap());
        }
        let after = wall_clock();
        assert!(local.paused().is_empty());
        let moved = local.last_claimed("old").await.unwrap().unwrap();
        assert!(before <= moved && moved <= after, "{moved}");
        assert_eq!(local.last_claimed("new").await.unwrap(), Some(ahead));
        // Durable: a restart reads the moved record and no pause.
        drop(local);
        let local = LocalCoordinator::open(dir.path()).unwrap();
        assert_eq!(local.last_claimed("old").await.unwrap(), Some(moved));
        assert!(local.paused().is_empty());
    }

    #[test]
    fn an_unreadable_paused_file_is_refused_naming_the_file_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(PAUSED);
        std::fs::write(&path, "{not json").unwrap();
        let error = LocalCoordinator::open(dir.path()).err().expect("refused");
        assert!(matches!(error, CoordError::UnreadableState(_)), "{error:?}");
        assert!(
            error.to_string().contains(&format!(
                "{} is not a valid list of paused tasks",
                path.display()
            )) && error.to_string().contains("removing it resumes every task"),
            "{error}"
        );
        std::fs::write(&path, r#"{"format":99,"tasks":{}}"#).unwrap();
        let error = LocalCoordinator::open(dir.path()).err().expect("refused");
        assert!(error.to_string().contains("state format 99"), "{error}");
    }
}
