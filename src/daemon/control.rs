//! The local backend's control socket, `<state_dir>/zkcron.sock` (mode 0600 in the 0700 state
//! dir: only the daemon's user can use it), through which `zkcron status`, `history`,
//! `trigger`, `backfill`, `pause` and `resume` reach the daemon on a single host. One JSON request line and
//! one JSON reply line per connection ([`crate::ops::local`] has the protocol and the client).
//!
//! `status` is the cluster's status model ([`crate::ops::model`]) over this host alone: the
//! daemon is the only member and leads every task it loaded.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinHandle;

use crate::coord::local::{LocalCoordinator, PauseMark};
use crate::coord::records::{
    self, FORMAT_VERSION, LeaseRecord, MarkRecord, MemberRecord, TaskSetRecord, TaskSetRef,
};
use crate::coord::{CoordError, Coordinator};
use crate::ops::local::{Reply, Request, socket_path};
use crate::ops::model::{self, LiveMember, Snapshot};
use crate::task::{self, TaskDefaults, TaskSpec};

/// The longest request read (a request is a line of a few hundred bytes).
const MAX_REQUEST: u64 = 64 * 1024;

/// How long a client may take to send its request.
const REQUEST_DEADLINE: Duration = Duration::from_secs(5);

/// What the socket's `status` says of this host.
#[derive(Debug, Clone)]
pub struct ControlConfig {
    pub state_dir: PathBuf,
    pub node_id: String,
    pub release: String,
    pub labels: BTreeMap<String, String>,
    pub jobs_dir: PathBuf,
    pub task_defaults: TaskDefaults,
    pub started_at: DateTime<Utc>,
    /// The daemon's tasks as of its last reload.
    pub loaded: crate::daemon::LoadedTasks,
}

/// The served socket; dropping it stops serving and removes the socket file.
pub struct ControlSocket {
    path: PathBuf,
    task: JoinHandle<()>,
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Serves `<state_dir>/zkcron.sock` for `coordinator` (whose lock on the state dir makes a
/// socket file found there a leftover of a daemon that died, replaced here).
pub fn serve(
    config: ControlConfig,
    coordinator: Arc<LocalCoordinator>,
) -> std::io::Result<ControlSocket> {
    let path = socket_path(&config.state_dir);
    match std::fs::remove_file(&path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    let listener = UnixListener::bind(&path)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    let config = Arc::new(config);
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let config = config.clone();
            let coordinator = coordinator.clone();
            tokio::spawn(async move {
                if let Err(error) = answer(stream, &config, &coordinator).await {
                    tracing::debug!(%error, "control socket: a request went unanswered");
                }
            });
        }
    });
    Ok(ControlSocket { path, task })
}

/// Serves the local backend's control socket for `zkcron status` and the other operator
/// commands; the daemon runs without it (logged) when it cannot be served.
pub fn serve_logged(
    config: ControlConfig,
    coordinator: &Arc<LocalCoordinator>,
) -> Option<ControlSocket> {
    let state_dir = config.state_dir.clone();
    match serve(config, coordinator.clone()) {
        Ok(socket) => Some(socket),
        Err(error) => {
            tracing::error!(
                socket = %socket_path(&state_dir).display(),
                %error,
                "cannot serve the control socket: zkcron status, history, trigger, pause and \
                 resume cannot reach this daemon"
            );
            None
        }
    }
}

impl ControlConfig {
    /// What the socket (and `/status`) says of this host, started now.
    pub fn new(plan: &crate::preflight::Plan, daemon: &crate::daemon::DaemonConfig) -> Self {
        ControlConfig {
            state_dir: plan.state_dir.clone(),
            node_id: plan.node_id.clone(),
            release: plan.release.to_string(),
            labels: plan.config.node.labels.clone(),
            jobs_dir: daemon.jobs_dir.clone(),
            loaded: daemon.loaded.clone(),
            task_defaults: daemon.task_defaults.clone(),
            started_at: daemon.clock.now(),
        }
    }
}

/// `zkcron status` of this host: the socket's `status` reply, and `/status` ([`crate::http`]).
pub async fn status(config: &ControlConfig, coordinator: &LocalCoordinator) -> model::Status {
    let now = coordinator.clock().now();
    let specs = loaded_tasks(config, coordinator);
    let snapshot = snapshot(config, coordinator, &specs).await;
    let mut status = crate::ops::live::status(snapshot, now);
    // This host runs every item of each pool, one run per tick.
    let pools: BTreeMap<&str, usize> = specs
        .iter()
        .filter_map(|spec| Some((&*spec.name, spec.extras.run_on.items()?.len())))
        .collect();
    for task in &mut status.tasks {
        if let Some(&items) = pools.get(task.name.as_str()) {
            task.work_items.insert(config.node_id.clone(), items);
        }
    }
    status
}

/// This host as a one-member cluster now: what the dashboard reads ([`crate::http`]).
pub async fn snapshot_now(config: &ControlConfig, coordinator: &LocalCoordinator) -> Snapshot {
    snapshot(config, coordinator, &loaded_tasks(config, coordinator)).await
}

async fn answer(
    stream: UnixStream,
    config: &ControlConfig,
    coordinator: &LocalCoordinator,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    let mut reader = BufReader::new(read.take(MAX_REQUEST));
    tokio::time::timeout(REQUEST_DEADLINE, reader.read_line(&mut line))
        .await
        .map_err(|_| std::io::Error::other("no request in time"))??;
    let reply = match serde_json::from_str::<Request>(&line) {
        Ok(request) => handle(request, config, coordinator).await,
        Err(error) => Reply::error(format!("not a zkcron request: {error}")),
    };
    let mut text = serde_json::to_string(&reply).expect("replies serialize");
    drop(reply);
    text.push('\n');
    let written = async {
        write.write_all(text.as_bytes()).await?;
        write.shutdown().await
    }
    .await;
    // A status of 100,000 tasks builds ~100 MB of scratch (the snapshot, the model, an 18 MB
    // reply) that glibc would keep: give it back, as after a reload.
    drop(text);
    super::memory::release_free_memory();
    written
}

/// The tasks the daemon leads, as of its last reload.
fn loaded_tasks(config: &ControlConfig, coordinator: &LocalCoordinator) -> Vec<Arc<TaskSpec>> {
    let led = coordinator.leadership().borrow().tasks.clone();
    let loaded = config.loaded.get();
    // Both in name order: walked side by side, a comparison per task rather than a search.
    let mut led = led.iter().peekable();
    loaded
        .iter()
        .filter(|t| {
            while led.next_if(|name| ***name < *t.name).is_some() {}
            led.next_if(|name| ***name == *t.name).is_some()
        })
        .cloned()
        .collect()
}

fn unknown(task: &str, config: &ControlConfig, specs: &[Arc<TaskSpec>]) -> Reply {
    let hint = task::closest(task, specs.iter().map(|t| &*t.name))
        .map(|name| format!("; did you mean {name}?"))
        .unwrap_or_default();
    Reply::error(format!(
        "unknown task {task}: the daemon runs no task {task} from {}{hint}",
        config.jobs_dir.display()
    ))
}

/// `history --ticks`: the task's tick ledger.
async fn ticks(task: &str, config: &ControlConfig, coordinator: &LocalCoordinator) -> Reply {
    let specs = loaded_tasks(config, coordinator);
    let Some(spec) = specs.iter().find(|t| *t.name == *task) else {
        return unknown(task, config, &specs);
    };
    let record = coordinator.fire_record(task).await;
    let mut entries = record.as_ref().map(|r| r.ticks.clone()).unwrap_or_default();
    // Claimed to run by an earlier life of this daemon that never recorded its end.
    if let Ok(Some(lost)) = coordinator.orphaned_tick(task).await {
        entries.push(crate::plan::ledger::TickEntry::one(
            lost,
            crate::plan::ledger::Reason::NodeLost,
        ));
    }
    let last = record.as_ref().and_then(crate::coord::record::accounted);
    let runs = coordinator.history(task, usize::MAX);
    let paused = coordinator.paused().contains(task);
    let lines = crate::ops::ticks::of_local(
        &entries,
        last,
        &runs,
        &spec.schedule,
        (paused, config.started_at),
        coordinator.now(),
    );
    Reply {
        ok: true,
        ticks: Some(lines),
        ..Reply::default()
    }
}

async fn handle(request: Request, config: &ControlConfig, coordinator: &LocalCoordinator) -> Reply {
    let ok = Reply {
        ok: true,
        ..Reply::default()
    };
    match request {
        Request::Status => Reply {
            status: Some(status(config, coordinator).await),
            ..ok
        },
        Request::History { task, n } => {
            let history = coordinator.history(&task, n);
            if history.is_empty() {
                let specs = loaded_tasks(config, coordinator);
                if !specs.iter().any(|t| *t.name == *task) {
                    return unknown(&task, config, &specs);
                }
            }
            Reply {
                history: Some(history),
                ..ok
            }
        }
        Request::Ticks { task } => ticks(&task, config, coordinator).await,
        Request::Trigger { task, by } => match coordinator.request_trigger(&task, &by) {
            Ok(trigger) => Reply {
                fire_id: Some(trigger.fire_id),
                ..ok
            },
            Err(error) => Reply::error(error.to_string()),
        },
        Request::TriggerState { fire_id } => Reply {
            trigger: coordinator.trigger_state(&fire_id),
            ..ok
        },
        Request::Backfill { task, from, to, by } => {
            request_backfill(config, coordinator, &task, from, to, &by)
        }
        Request::Backfills => Reply {
            backfills: Some(coordinator.backfills()),
            ..ok
        },
        Request::CancelBackfill { name, by } => match coordinator.cancel_backfill(&name, &by) {
            Ok(old) => Reply {
                backfills: Some(old.map(|r| (name, r)).into_iter().collect()),
                ..ok
            },
            Err(error) => Reply::error(error.to_string()),
        },
        Request::Pause { task, by, reason } => {
            let specs = loaded_tasks(config, coordinator);
            if !specs.iter().any(|t| *t.name == *task) {
                return unknown(&task, config, &specs);
            }
            let mark = PauseMark {
                at: coordinator.clock().now().trunc_subsecs(0),
                by,
                reason,
            };
            changed(coordinator.pause_with(&task, mark).await)
        }
        Request::Resume { task, .. } => changed(coordinator.resume(&task).await),
    }
}

/// The reply to a pause or a resume.
/// Stores a backfill of `task`'s ticks in `[from, to)` asked by `by`, counted on its schedule
/// as loaded, and made at the time of the backend's clock.
fn request_backfill(
    config: &ControlConfig,
    coordinator: &LocalCoordinator,
    task: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    by: &str,
) -> Reply {
    let specs = loaded_tasks(config, coordinator);
    let Some(spec) = specs.iter().find(|t| *t.name == *task) else {
        return unknown(task, config, &specs);
    };
    let now = coordinator.clock().now();
    let record = match crate::ops::backfill::new_request(task, &spec.schedule, from, to, by, now) {
        Ok(record) => record,
        Err(error) => return Reply::error(format!("{error:#}")),
    };
    match coordinator.request_backfill(record.clone()) {
        Ok(name) => Reply {
            ok: true,
            fire_id: Some(name.clone()),
            backfills: Some([(name, record)].into()),
            ..Reply::default()
        },
        Err(error) => Reply::error(error.to_string()),
    }
}

fn changed(result: Result<bool, CoordError>) -> Reply {
    match result {
        Ok(changed) => Reply {
            ok: true,
            changed: Some(changed),
            ..Reply::default()
        },
        Err(error) => Reply::error(error.to_string()),
    }
}

/// This host as a one-member cluster: the daemon leads every task it loaded, since it started.
async fn snapshot(
    config: &ControlConfig,
    coordinator: &LocalCoordinator,
    specs: &[Arc<TaskSpec>],
) -> Snapshot {
    // The record as a node writes it, without its JSON (100,000 tasks: 18 MB, written only to
    // be hashed): nothing stores this one, so its key is the hash of its tasks' names and
    // digests, from which every entry follows.
    let set = records::taskset_record(specs);
    let taskset = TaskSetRef {
        digest: local_set_digest(&set),
        chunks: 1,
        count: set.tasks.len(),
    };
    let member = MemberRecord {
        format: FORMAT_VERSION,
        id: config.node_id.clone(),
        release: config.release.clone(),
        seed: "0".into(),
        host: String::new(),
        pid: std::process::id(),
        http: None,
        started_at: config.started_at,
        labels: config.labels.clone(),
        taskset: taskset.clone(),
        leads: true,
        drained: false,
    };
    let mut snapshot = Snapshot {
        backend: "local".into(),
        cluster: None,
        members: vec![LiveMember {
            record: member,
            registered_at: config.started_at,
        }],
        tasksets: BTreeMap::from([(taskset.digest, set)]),
        backfills: coordinator
            .backfills()
            .into_iter()
            .filter(|(_, b)| b.state == crate::coord::backfill::BackfillState::Active)
            .collect(),
        ..Snapshot::default()
    };
    // This host holds every lease it leads; in name order, the map is built without a search.
    snapshot.leases = specs
        .iter()
        .map(|spec| {
            let lease = LeaseRecord {
                format: FORMAT_VERSION,
                node: config.node_id.clone(),
                session: String::new(),
                since: config.started_at,
            };
            (spec.name.to_string(), lease)
        })
        .collect();
    // Only the tasks with a history are asked for their last run: 100,000 tasks tried to open
    // a history file each.
    let with_history = coordinator.tasks_with_history();
    for spec in specs {
        add_task(&mut snapshot, coordinator, &with_history, spec).await;
    }
    snapshot.paused = paused_marks(coordinator);
    snapshot
}

/// The key of the local member's task set: the xxh3-128 of each task's name and digest.
fn local_set_digest(set: &TaskSetRecord) -> String {
    let mut hash = xxhash_rust::xxh3::Xxh3::new();
    for (name, entry) in &set.tasks {
        hash.update(name.as_bytes());
        hash.update(b"\n");
        hash.update(entry.digest.as_bytes());
        hash.update(b"\n");
    }
    format!("{:032x}", hash.digest128())
}

/// One task's fire record, last result and last run in `snapshot`.
async fn add_task(
    snapshot: &mut Snapshot,
    coordinator: &LocalCoordinator,
    with_history: &std::collections::HashSet<String>,
    spec: &TaskSpec,
) {
    let name = spec.name.to_string();
    if let Some(record) = coordinator.fire_record(&name).await {
        snapshot.fire_records.insert(name.clone(), record);
    }
    if let Ok(Some(result)) = coordinator.last_result(&name).await {
        snapshot.results.insert(name.clone(), result);
    }
    if !with_history.contains(&name) {
        return;
    }
    if let Some(run) = coordinator.history(&name, 1).into_iter().next() {
        snapshot.recent_runs.insert(name, run);
    }
}

/// The pause marks as the cluster's records.
fn paused_marks(coordinator: &LocalCoordinator) -> BTreeMap<String, MarkRecord> {
    coordinator
        .paused_marks()
        .into_iter()
        .map(|(task, mark)| {
            (
                task,
                MarkRecord {
                    format: FORMAT_VERSION,
                    at: mark.at,
                    by: mark.by,
                    reason: mark.reason,
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coord::Coordinator;

    /// With 100,000 task files, each status request read and checked the whole jobs dir again
    /// and missed its deadline: status answers from the tasks the daemon loaded, so a jobs dir
    /// that is gone (or slow) changes nothing until the next reload.
    #[tokio::test]
    async fn status_answers_from_the_loaded_tasks_without_reading_the_jobs_dir() {
        let state = tempfile::tempdir().unwrap();
        let coordinator =
            LocalCoordinator::open(state.path(), crate::clock::Clock::system()).unwrap();
        let defaults = TaskDefaults::for_tests();
        let spec = task::parse_task(
            "backup",
            std::path::Path::new("backup.toml"),
            "schedule = \"0 3 * * *\"\ncommand = [\"true\"]\nwork_items = 16\n",
            &defaults,
        )
        .unwrap();
        coordinator
            .publish(std::slice::from_ref(&spec))
            .await
            .unwrap();
        let loaded = crate::daemon::LoadedTasks::default();
        loaded.set(vec![Arc::new(spec)]);
        let config = ControlConfig {
            state_dir: state.path().to_path_buf(),
            node_id: "node-a".into(),
            release: "1.0.0".into(),
            labels: BTreeMap::new(),
            jobs_dir: state.path().join("no-such-jobs.d"),
            task_defaults: defaults,
            started_at: coordinator.clock().now(),
            loaded,
        };
        let status = status(&config, &coordinator).await;
        let names: Vec<&str> = status.tasks.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["backup"]);
        assert!(status.tasks[0].next.is_some(), "{:?}", status.tasks[0]);
        // A pool's items are all this host's.
        assert_eq!(
            status.tasks[0].work_items,
            BTreeMap::from([("node-a".to_string(), 16)])
        );
    }
}
