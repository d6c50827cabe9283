//! The embedded single-node backend: this node leads every task it defines, and fire records
//! live in files under `state_dir`.
//!
//! One JSON file per task, `<state_dir>/tasks/<task>.json`, holds the last claimed tick and the
//! last result. Every write goes to a temporary file in the same directory, is fsynced, renamed
//! over the old file and the directory fsynced, so a crash leaves the old or the new record,
//! never a torn one. A file that cannot be parsed is reported, moved aside and treated as absent.
//! A lock file (`flock`) keeps two daemons off one state dir: they would both fire every tick.

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File};
use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::{ClaimOutcome, CoordError, Coordinator, Leadership, RunResult};
use crate::task::TaskSpec;

/// The version of the state file format; readers ignore fields they do not know.
const FORMAT_VERSION: u32 = 1;

/// The persisted record of one task.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct TaskRecord {
    format: u32,
    /// The newest claimed tick.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_claimed: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_result: Option<RunResult>,
}

/// The embedded backend.
pub struct LocalCoordinator {
    /// `<state_dir>/tasks`, where the records live.
    tasks_dir: PathBuf,
    /// Records read so far, each behind its own lock so writes of one task are serialized
    /// while different tasks write in parallel.
    records: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<TaskRecord>>>>>,
    leadership: watch::Sender<Leadership>,
    /// Held for the life of the backend; dropping it releases the state dir.
    _lock: Flock<File>,
}

impl LocalCoordinator {
    /// Opens (creating if needed) the state dir and takes its lock.
    pub fn open(state_dir: &Path) -> Result<LocalCoordinator, CoordError> {
        let tasks_dir = state_dir.join("tasks");
        fs::create_dir_all(&tasks_dir).map_err(|source| CoordError::Io {
            context: format!("cannot create state dir {}", tasks_dir.display()),
            source,
        })?;
        let lock_path = state_dir.join("zkcron.lock");
        let lock_file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&lock_path)
            .map_err(|source| CoordError::Io {
                context: format!("cannot open lock file {}", lock_path.display()),
                source,
            })?;
        let mut lock = Flock::lock(lock_file, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| {
            CoordError::Busy(format!(
                "state dir {} is in use by another zkcron ({errno}); two daemons on one state dir would \
                 both fire every tick: stop the other one or give this one its own --state-dir",
                state_dir.display()
            ))
        })?;
        // Record our pid for the operator; failure to do so is harmless.
        let _ = lock.set_len(0);
        let _ = writeln!(&mut *lock, "{}", std::process::id());
        let (leadership, _) = watch::channel(Leadership::default());
        Ok(LocalCoordinator {
            tasks_dir,
            records: Mutex::new(HashMap::new()),
            leadership,
            _lock: lock,
        })
    }

    fn slot(&self, task: &str) -> Arc<tokio::sync::Mutex<Option<TaskRecord>>> {
        self.records
            .lock()
            .expect("records lock poisoned")
            .entry(task.to_string())
            .or_default()
            .clone()
    }

    fn path_of(&self, task: &str) -> PathBuf {
        self.tasks_dir.join(format!("{task}.json"))
    }

    /// Returns the record of `task`, reading it from disk the first time.
    async fn load<'a>(
        &self,
        task: &str,
        slot: &'a mut Option<TaskRecord>,
    ) -> Result<&'a mut TaskRecord, CoordError> {
        if slot.is_none() {
            let path = self.path_of(task);
            let record = tokio::task::spawn_blocking(move || read_record(&path))
                .await
                .expect("state read task panicked")?;
            *slot = Some(record);
        }
        Ok(slot.as_mut().expect("just filled"))
    }

    async fn store(&self, task: &str, record: &TaskRecord) -> Result<(), CoordError> {
        let path = self.path_of(task);
        let bytes = serde_json::to_vec_pretty(record).expect("records always serialize");
        tokio::task::spawn_blocking(move || write_atomically(&path, &bytes))
            .await
            .expect("state write task panicked")
    }
}

/// Reads a record; a missing file is an empty record, a corrupt one is moved aside.
fn read_record(path: &Path) -> Result<TaskRecord, CoordError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(TaskRecord::default()),
        Err(source) => {
            return Err(CoordError::Io {
                context: format!("cannot read state file {}", path.display()),
                source,
            });
        }
    };
    match serde_json::from_slice::<TaskRecord>(&bytes) {
        Ok(record) => Ok(record),
        Err(error) => {
            let aside = path.with_extension(format!(
                "json.corrupt-{}",
                crate::daemon::wall_clock().format("%Y%m%dT%H%M%SZ")
            ));
            let moved = fs::rename(path, &aside);
            tracing::error!(
                path = %path.display(),
                moved_to = %aside.display(),
                move_error = moved.err().map(|e| e.to_string()),
                "state file is corrupt ({error}); moved it aside and continuing without a fire record \
                 for this task (missed ticks before now are not caught up)"
            );
            Ok(TaskRecord::default())
        }
    }
}

/// Writes `bytes` to `path` so that a crash leaves either the old or the new content.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), CoordError> {
    let dir = path.parent().expect("state files live in a directory");
    let io = |context: &str, source| CoordError::Io {
        context: format!("{context} {}", path.display()),
        source,
    };
    let mut temp =
        tempfile::NamedTempFile::new_in(dir).map_err(|e| io("cannot create temp file for", e))?;
    temp.write_all(bytes).map_err(|e| io("cannot write", e))?;
    temp.as_file()
        .sync_all()
        .map_err(|e| io("cannot fsync", e))?;
    temp.persist(path)
        .map_err(|e| io("cannot rename over", e.error))?;
    File::open(dir)
        .and_then(|d| nix::unistd::fsync(d.as_fd()).map_err(std::io::Error::from))
        .map_err(|e| io("cannot fsync the directory of", e))?;
    Ok(())
}

impl Coordinator for LocalCoordinator {
    async fn publish(&self, tasks: &[TaskSpec]) -> Result<(), CoordError> {
        let names: BTreeSet<String> = tasks.iter().map(|t| t.name.clone()).collect();
        self.leadership.send_modify(|l| l.tasks = Arc::new(names));
        Ok(())
    }

    fn leadership(&self) -> watch::Receiver<Leadership> {
        self.leadership.subscribe()
    }

    async fn last_claimed(&self, task: &str) -> Result<Option<DateTime<Utc>>, CoordError> {
        let slot = self.slot(task);
        let mut guard = slot.lock().await;
        Ok(self.load(task, &mut guard).await?.last_claimed)
    }

    async fn claim(&self, task: &str, tick: DateTime<Utc>) -> Result<ClaimOutcome, CoordError> {
        if !self.leadership.borrow().may_fire(task) {
            return Ok(ClaimOutcome::NotLeader);
        }
        let slot = self.slot(task);
        let mut guard = slot.lock().await;
        let record = self.load(task, &mut guard).await?;
        if let Some(previous) = record.last_claimed
            && previous >= tick
        {
            return Ok(ClaimOutcome::AlreadyClaimed { record: previous });
        }
        let mut updated = record.clone();
        updated.format = FORMAT_VERSION;
        updated.last_claimed = Some(tick);
        // Only a durable record counts as a claim: if the write fails we do not know whether it
        // reached the disk, and running would risk a second run after a restart.
        self.store(task, &updated).await?;
        *record = updated;
        Ok(ClaimOutcome::Claimed)
    }

    async fn runs_elsewhere(&self, _task: &str) -> Result<usize, CoordError> {
        Ok(0)
    }

    async fn run_started(&self, _task: &str, _tick: DateTime<Utc>) -> Result<(), CoordError> {
        // A single node's live runs are the daemon's own children; nothing to record.
        Ok(())
    }

    async fn run_ended(&self, task: &str, result: &RunResult) -> Result<(), CoordError> {
        let slot = self.slot(task);
        let mut guard = slot.lock().await;
        let record = self.load(task, &mut guard).await?;
        let mut updated = record.clone();
        updated.format = FORMAT_VERSION;
        updated.last_result = Some(result.clone());
        self.store(task, &updated).await?;
        *record = updated;
        Ok(())
    }

    async fn last_result(&self, task: &str) -> Result<Option<RunResult>, CoordError> {
        let slot = self.slot(task);
        let mut guard = slot.lock().await;
        Ok(self.load(task, &mut guard).await?.last_result.clone())
    }

    async fn release_all(&self) {
        self.leadership
            .send_modify(|l| l.tasks = Arc::new(BTreeSet::new()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Schedule;
    use crate::task::{CatchUpPolicy, CommandLine, OverlapPolicy, RetryPolicy};

    fn spec(name: &str) -> TaskSpec {
        TaskSpec {
            name: name.into(),
            path: PathBuf::from(format!("{name}.toml")),
            description: None,
            schedule: Schedule::parse("* * * * *", chrono_tz::Tz::UTC).unwrap(),
            command: CommandLine::Argv(vec!["true".into()]),
            user: None,
            group: None,
            working_dir: None,
            env: Default::default(),
            timeout: None,
            kill_grace: std::time::Duration::from_secs(1),
            overlap: OverlapPolicy::Skip,
            catch_up: CatchUpPolicy::Once,
            starting_deadline: None,
            jitter: std::time::Duration::ZERO,
            retries: RetryPolicy::default(),
            version_req: None,
            enabled: true,
        }
    }

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_767_225_600 + s, 0).unwrap()
    }

    #[tokio::test]
    async fn given_a_published_task_when_ticks_are_claimed_then_only_newer_ticks_win() {
        let dir = tempfile::tempdir().unwrap();
        let local = LocalCoordinator::open(dir.path()).unwrap();
        local.publish(&[spec("a")]).await.unwrap();
        assert!(local.leadership().borrow().may_fire("a"));
        assert_eq!(
            local.claim("a", at(60)).await.unwrap(),
            ClaimOutcome::Claimed
        );
        assert_eq!(
            local.claim("a", at(60)).await.unwrap(),
            ClaimOutcome::AlreadyClaimed { record: at(60) }
        );
        assert_eq!(
            local.claim("a", at(0)).await.unwrap(),
            ClaimOutcome::AlreadyClaimed { record: at(60) }
        );
        assert_eq!(
            local.claim("a", at(120)).await.unwrap(),
            ClaimOutcome::Claimed
        );
        assert_eq!(
            local.claim("b", at(120)).await.unwrap(),
            ClaimOutcome::NotLeader
        );
    }

    #[tokio::test]
    async fn given_claims_when_the_backend_reopens_then_the_fire_record_survives() {
        let dir = tempfile::tempdir().unwrap();
        {
            let local = LocalCoordinator::open(dir.path()).unwrap();
            local.publish(&[spec("a")]).await.unwrap();
            local.claim("a", at(60)).await.unwrap();
            let result = RunResult {
                tick: at(60),
                node: "n1".into(),
                exit: "exit code 0".into(),
                success: true,
                attempts: 1,
                duration_ms: 5,
                finished_at: at(61),
            };
            local.run_ended("a", &result).await.unwrap();
        }
        let local = LocalCoordinator::open(dir.path()).unwrap();
        local.publish(&[spec("a")]).await.unwrap();
        assert_eq!(local.last_claimed("a").await.unwrap(), Some(at(60)));
        assert_eq!(
            local.last_result("a").await.unwrap().unwrap().exit,
            "exit code 0"
        );
        assert_eq!(
            local.claim("a", at(60)).await.unwrap(),
            ClaimOutcome::AlreadyClaimed { record: at(60) }
        );
    }

    #[tokio::test]
    async fn given_a_corrupt_state_file_when_read_then_it_is_moved_aside_and_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("tasks")).unwrap();
        fs::write(dir.path().join("tasks/a.json"), b"{not json").unwrap();
        let local = LocalCoordinator::open(dir.path()).unwrap();
        local.publish(&[spec("a")]).await.unwrap();
        assert_eq!(local.last_claimed("a").await.unwrap(), None);
        let names: Vec<String> = fs::read_dir(dir.path().join("tasks"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.iter().any(|n| n.starts_with("a.json.corrupt-")),
            "{names:?}"
        );
        assert!(!names.contains(&"a.json".to_string()), "{names:?}");
        assert_eq!(
            local.claim("a", at(60)).await.unwrap(),
            ClaimOutcome::Claimed
        );
    }

    #[tokio::test]
    async fn given_a_state_file_from_a_newer_release_when_read_then_unknown_fields_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("tasks")).unwrap();
        fs::write(
            dir.path().join("tasks/a.json"),
            br#"{"format": 2, "last_claimed": "2026-01-01T00:01:00Z", "something_new": [1, 2]}"#,
        )
        .unwrap();
        let local = LocalCoordinator::open(dir.path()).unwrap();
        assert_eq!(local.last_claimed("a").await.unwrap(), Some(at(60)));
    }

    #[test]
    fn given_a_running_daemon_when_a_second_opens_the_same_state_dir_then_it_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _first = LocalCoordinator::open(dir.path()).unwrap();
        let error = LocalCoordinator::open(dir.path())
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
        let local = LocalCoordinator::open(dir.path()).unwrap();
        local.publish(&[spec("a")]).await.unwrap();
        local.release_all().await;
        assert!(!local.leadership().borrow().may_fire("a"));
        assert_eq!(
            local.claim("a", at(60)).await.unwrap(),
            ClaimOutcome::NotLeader
        );
    }

    #[test]
    fn atomic_write_replaces_content_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.json");
        write_atomically(&path, b"one").unwrap();
        write_atomically(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
