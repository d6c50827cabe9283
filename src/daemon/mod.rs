//! The async shell: timers, signals, file watching and processes around the pure core.
//!
//! The daemon keeps the next instant of every task it fires in one timer table
//! ([`timers`]): one loop asks each task's [`TickPlanner`](crate::plan::TickPlanner) what to do
//! when its instant comes (one shared [`watching::watch_wall_clock`] task re-checks the clock
//! every [`CLOCK_CHECK`] and re-plans every task when the wall clock jumps or the machine was
//! suspended); a task gets a tokio task of its own only from a second before its tick until the
//! tick is claimed through the [`Coordinator`] and its process spawned ([`runs`]). The main loop
//! waits on one closed set of [`Event`]s: reload (SIGHUP or a change in `jobs_dir`), leadership
//! change, shutdown.
//!
//! It keeps the service manager informed through [`crate::service`]: ready once the tasks are
//! loaded, a status line on every leadership change, stopping when SIGTERM arrives.
//!
//! This is the only module that reads the wall clock for scheduling ([`wall_clock`]).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::coord::{Coordinator, Leadership};
use crate::service;
use crate::task::{self, TaskDefaults, TaskSpec};

pub mod control;
mod manual;
mod memory;
pub(crate) use memory::use_one_heap;
mod runs;
#[cfg(test)]
mod tests;
mod timers;
mod watching;

use runs::RunsByTask;
use timers::{TimerId, Timers};
use watching::{Debounce, watch_jobs_dir, watch_wall_clock};

/// How often the wall clock is compared with the monotonic clock to notice jumps (an NTP step,
/// an operator setting the date, a resume from suspend). One check serves every task, so 10,000
/// idle tasks cost one wake-up per interval, not 10,000.
pub const CLOCK_CHECK: Duration = Duration::from_secs(1);

/// A difference between wall and monotonic time above this counts as a jump.
const CLOCK_JUMP: chrono::TimeDelta = chrono::TimeDelta::milliseconds(500);

/// Changes in `jobs_dir` closer together than this are handled as one reload.
const WATCH_QUIET: Duration = Duration::from_millis(300);

/// A burst of changes in `jobs_dir` that never goes quiet (a file rewritten every 100 ms) is
/// reloaded at most this long after its first change, and again as long as it lasts.
const WATCH_MAX_DELAY: Duration = Duration::from_secs(2);

pub use crate::clock::wall_clock;

/// What the daemon needs to know, already resolved from config and flags.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    pub jobs_dir: PathBuf,
    /// This node's id: `ZKCRON_NODE` and the `node` of run records.
    pub node_id: String,
    /// How long running jobs may finish after SIGTERM before their groups are killed.
    pub shutdown_grace: Duration,
    pub task_defaults: TaskDefaults,
    /// The flags with which `zkcron reset TASK` reaches this node's fire records (e.g.
    /// ` --state-dir /var/lib/zkcron`), for the log line about a task held by a fire record ahead
    /// of the clock; `None` where there is no reset yet (the ZooKeeper backend).
    pub reset_flags: Option<String>,
    /// `[log] job_output_lines`: how many lines of an attempt's output are logged.
    pub job_output_lines: usize,
    /// Where fires, claims, leases and runs are counted (`/metrics`).
    pub metrics: crate::metrics::Metrics,
    /// The tasks as of the last reload, for `zkcron status` and `/status` on this host.
    pub loaded: LoadedTasks,
}

/// The tasks the daemon loaded at its last reload, shared with what reports on this host (the
/// control socket, `/status`), so that a status request does not read and check the whole jobs
/// dir again: with 100,000 task files that took longer than the request's deadline. It holds
/// the daemon's own `Arc`s (a pointer per task).
#[derive(Clone, Default)]
pub struct LoadedTasks(Arc<std::sync::RwLock<Arc<Vec<Arc<TaskSpec>>>>>);

impl std::fmt::Debug for LoadedTasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LoadedTasks({} tasks)", self.get().len())
    }
}

impl LoadedTasks {
    /// The tasks as of the last reload (none before the first).
    pub fn get(&self) -> Arc<Vec<Arc<TaskSpec>>> {
        self.0.read().expect("loaded tasks poisoned").clone()
    }

    fn set(&self, tasks: Vec<Arc<TaskSpec>>) {
        *self.0.write().expect("loaded tasks poisoned") = Arc::new(tasks);
    }
}

/// Everything the main loop reacts to.
#[derive(Debug)]
enum Event {
    /// Re-read `jobs_dir`: SIGHUP, or the debounce timer after changes in it.
    Reload(&'static str),
    /// Something changed in `jobs_dir`: the reload is scheduled by [`Debounce`].
    JobsDirChanged,
    /// The set of tasks this node leads changed.
    LeadershipChanged,
    /// Stop: SIGTERM or SIGINT.
    Shutdown(&'static str),
}

/// State shared by the timer loop, the activations and the runs of one daemon.
struct Shared<C> {
    coordinator: Arc<C>,
    node_id: String,
    job_output_lines: usize,
    leadership: watch::Receiver<Leadership>,
    /// Counts wall-clock jumps; the timers re-plan when it changes.
    clock_jumps: watch::Receiver<u64>,
    /// See [`DaemonConfig::reset_flags`].
    reset_flags: Option<String>,
    /// Never sent on: the timer loop, every activation and every run holds this struct, so
    /// when the receiver sees `None` all of them have ended.
    #[allow(dead_code)]
    runs_alive: mpsc::Sender<()>,
    /// The live runs of every task that has fired here.
    runs: Arc<RunsByTask>,
    /// Manual runs being claimed or claimed.
    manual: manual::ManualRuns,
    metrics: crate::metrics::Metrics,
    /// Spawns the runs at their instants.
    spawner: crate::executor::Spawner,
}

impl<C: Coordinator> Shared<C> {
    /// The shared state, and the receiver that sees `None` once the timer loop, every
    /// activation and every run have ended.
    /// Starts the wall-clock watch.
    fn new(coordinator: Arc<C>, config: &DaemonConfig) -> (Arc<Shared<C>>, mpsc::Receiver<()>) {
        let (runs_alive, runs_alive_rx) = mpsc::channel(1);
        let leadership = coordinator.leadership();
        let (clock_jumps_tx, clock_jumps) = watch::channel(0);
        tokio::spawn(watch_wall_clock(clock_jumps_tx));
        let shared = Shared {
            coordinator,
            node_id: config.node_id.clone(),
            job_output_lines: config.job_output_lines,
            reset_flags: config.reset_flags.clone(),
            leadership,
            clock_jumps,
            runs_alive,
            runs: Arc::default(),
            manual: manual::ManualRuns::default(),
            metrics: config.metrics.clone(),
            spawner: crate::executor::Spawner::start(),
        };
        (Arc::new(shared), runs_alive_rx)
    }
}

/// A task the daemon has loaded, and its timer when this node fires it.
struct LoadedTask {
    spec: Arc<TaskSpec>,
    timer: Option<TimerId>,
}

/// The tasks the daemon has loaded, in name order, found by binary search on the spec's own
/// name. (A `BTreeMap` keyed by a copy of each name cost about 140 bytes a task, half-full
/// nodes included, against 32 here: 1 MB of a 10,000-task daemon.)
#[derive(Default)]
struct TaskTable(Vec<LoadedTask>);

impl TaskTable {
    fn position(&self, name: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|task| (*task.spec.name).cmp(name))
    }

    fn get(&self, name: &str) -> Option<&LoadedTask> {
        self.position(name).ok().map(|i| &self.0[i])
    }

    fn get_mut(&mut self, name: &str) -> Option<&mut LoadedTask> {
        self.position(name).ok().map(|i| &mut self.0[i])
    }

    fn contains(&self, name: &str) -> bool {
        self.position(name).is_ok()
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn iter(&self) -> std::slice::Iter<'_, LoadedTask> {
        self.0.iter()
    }

    fn iter_mut(&mut self) -> std::slice::IterMut<'_, LoadedTask> {
        self.0.iter_mut()
    }

    fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|task| &*task.spec.name)
    }

    /// Adds tasks whose names are not in the table yet.
    fn add(&mut self, mut added: Vec<LoadedTask>) {
        if added.is_empty() {
            return;
        }
        // Exactly the room needed: at start-up the table is made once, at its final size.
        self.0.reserve_exact(added.len());
        self.0.append(&mut added);
        // Two sorted runs when `added` is sorted: one merge.
        self.0.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
    }

    /// Keeps the tasks `keep` says yes to (it may take their timer first).
    fn retain(&mut self, keep: impl FnMut(&mut LoadedTask) -> bool) {
        let before = self.0.len();
        self.0.retain_mut(keep);
        if self.0.len() < before {
            self.0.shrink_to_fit();
        }
    }
}

impl FromIterator<(String, LoadedTask)> for TaskTable {
    /// For tests: the tasks, each under its spec's name.
    fn from_iter<I: IntoIterator<Item = (String, LoadedTask)>>(tasks: I) -> TaskTable {
        let mut table = TaskTable::default();
        table.add(tasks.into_iter().map(|(_, task)| task).collect());
        table
    }
}

/// The running daemon.
pub struct Daemon<C: Coordinator> {
    config: DaemonConfig,
    shared: Arc<Shared<C>>,
    timers: Timers,
    tasks: TaskTable,
    runs_alive_rx: mpsc::Receiver<()>,
    /// The session losses already acted on.
    session_losses: u64,
    /// The last status line sent to the service manager, so that unchanged ones are not resent.
    status: String,
    /// The tasks this node leads that it logged as paused (`zkcron pause`), so each pause and
    /// resume is logged once.
    paused_logged: BTreeSet<String>,
    /// The leadership applied last, so that a change is applied to the tasks it touches only
    /// (`None`: to every task, after a reload). A node taking its share of 10,000 leases
    /// publishes hundreds of changes, and going through every loaded task at each one was a
    /// quarter of its CPU during a cold start.
    applied: Option<Leadership>,
    /// How many loaded tasks `applied` leads (the status line's count).
    leading: usize,
}

impl<C: Coordinator> Daemon<C> {
    pub fn new(config: DaemonConfig, coordinator: Arc<C>) -> Daemon<C> {
        let (shared, runs_alive_rx) = Shared::new(coordinator, &config);
        Daemon {
            timers: Timers::new(shared.clone()),
            shared,
            config,
            tasks: TaskTable::default(),
            runs_alive_rx,
            session_losses: 0,
            status: String::new(),
            paused_logged: BTreeSet::new(),
            applied: None,
            leading: 0,
        }
    }

    /// Runs until SIGTERM or SIGINT, then stops gracefully.
    pub async fn run(mut self) -> anyhow::Result<()> {
        let mut sighup = signal(SignalKind::hangup())?;
        let mut sigterm = signal(SignalKind::terminate())?;
        let mut sigint = signal(SignalKind::interrupt())?;
        // Capacity 1: a pending message already says "something changed"; more add nothing.
        let (watch_tx, mut watch_rx) = mpsc::channel::<()>(1);
        let _watcher = watch_jobs_dir(&self.config.jobs_dir, watch_tx);
        let mut debounce = Debounce::new(WATCH_QUIET, WATCH_MAX_DELAY);
        let mut leadership = self.shared.coordinator.leadership();

        self.reload("start").await;
        tracing::info!(
            node = %self.config.node_id,
            jobs_dir = %self.config.jobs_dir.display(),
            tasks = self.tasks.len(),
            "zkcron started"
        );
        service::ready(&self.status);
        let _watchdog = service::spawn_watchdog().map(AbortOnDrop);

        loop {
            // A tool writing several files produces a burst of events; the reload waits for the
            // burst as a timer of this loop, so that signals are handled while it waits.
            let reload_due = debounce.due();
            let event = tokio::select! {
                _ = sighup.recv() => Event::Reload("SIGHUP"),
                Some(()) = watch_rx.recv() => Event::JobsDirChanged,
                _ = tokio::time::sleep_until(reload_due.unwrap_or_else(tokio::time::Instant::now)),
                    if reload_due.is_some() => Event::Reload("change in jobs_dir"),
                Ok(()) = leadership.changed() => Event::LeadershipChanged,
                _ = sigterm.recv() => Event::Shutdown("SIGTERM"),
                _ = sigint.recv() => Event::Shutdown("SIGINT"),
            };
            match event {
                Event::JobsDirChanged => debounce.change(tokio::time::Instant::now()),
                Event::Reload("SIGHUP") => {
                    // A reload reads every file: changes seen so far are handled by it.
                    debounce.clear();
                    service::reloading();
                    self.reload("SIGHUP").await;
                    service::ready(&self.status);
                }
                Event::Reload(reason) => {
                    debounce.clear();
                    self.reload(reason).await
                }
                Event::LeadershipChanged => self.apply_leadership(),
                Event::Shutdown(signal) => {
                    tracing::info!(signal, "shutting down: no new ticks will fire");
                    let running = self.shared.runs.count();
                    service::stopping(
                        &format!(
                            "stopping ({signal}): leases released, waiting for {running} running job(s), up to {}",
                            humantime::format_duration(self.config.shutdown_grace)
                        ),
                        self.config.shutdown_grace,
                    );
                    self.shutdown().await;
                    return Ok(());
                }
            }
        }
    }

    /// Re-reads `jobs_dir` and applies the difference: added tasks start, removed ones stop,
    /// changed ones restart, and a file that became invalid keeps its last good version.
    async fn reload(&mut self, reason: &str) {
        let dir = self.config.jobs_dir.clone();
        let defaults = self.config.task_defaults.clone();
        let loaded =
            match tokio::task::spawn_blocking(move || task::load_jobs_dir(&dir, &defaults)).await {
                Ok(Ok(loaded)) => loaded,
                Ok(Err(problems)) => {
                    // As for a broken file: the last good tasks keep running.
                    for problem in problems {
                        tracing::error!(
                            jobs_dir = %self.config.jobs_dir.display(),
                            "jobs dir refused, keeping the {} loaded tasks: {}",
                            self.tasks.len(),
                            problem.one_line()
                        );
                    }
                    return;
                }
                Err(join_error) => {
                    tracing::error!("loading the jobs dir panicked: {join_error}");
                    return;
                }
            };

        let mut tasks: Vec<TaskSpec> = loaded.tasks;
        for error in &loaded.errors {
            let kept = error
                .task
                .as_ref()
                .and_then(|name| self.tasks.get(name).map(|t| (name, t.spec.clone())));
            match kept {
                Some((name, spec)) => {
                    tracing::error!(
                        task = %name,
                        "invalid task file, keeping its last good version running: {}",
                        error.one_line()
                    );
                    tasks.retain(|task| *task.name != **name);
                    tasks.push((*spec).clone());
                }
                None => tracing::error!("invalid task file, not loaded: {}", error.one_line()),
            }
        }
        // Published in name order, as before.
        tasks.sort_by(|a, b| a.name.cmp(&b.name));
        let wanted: std::collections::BTreeSet<&str> =
            tasks.iter().map(|task| &*task.name).collect();

        let mut added = 0;
        let mut changed = 0;
        let mut removed = 0;
        let (timers, runs) = (&self.timers, &self.shared.runs);
        self.tasks.retain(|task| {
            let name = &*task.spec.name;
            if wanted.contains(name) {
                return true;
            }
            if let Some(timer) = task.timer.take() {
                timers.stop(timer);
            }
            let running = runs.get(name).map_or(0, |runs| runs.cancel_retries());
            tracing::info!(
                task = %name,
                running,
                "task removed; a run in progress finishes, without further retries"
            );
            removed += 1;
            false
        });
        drop(wanted);
        // The specs as loaded are published, then moved into the daemon's `Arc`s (new and
        // changed ones): no copy is made. An unchanged one is published with the daemon's own
        // name, so the coordinator's leadership set shares each name with the daemon's spec.
        let mut taken = Vec::with_capacity(tasks.len());
        let mut loaded_names = Vec::new();
        for spec in &mut tasks {
            let name = spec.name.clone();
            let take = match self.tasks.get_mut(&name) {
                Some(task) if *task.spec == *spec => {
                    spec.name = task.spec.name.clone();
                    false
                }
                Some(task) => {
                    if let Some(timer) = task.timer.take() {
                        self.timers.stop(timer);
                    }
                    tracing::info!(task = %name, "task changed; a run in progress finishes");
                    changed += 1;
                    true
                }
                None => {
                    loaded_names.push(name.clone());
                    tracing::info!(
                        task = %name,
                        schedule = spec.schedule.expression(),
                        timezone = spec.schedule.timezone().name(),
                        enabled = spec.enabled,
                        "task loaded"
                    );
                    added += 1;
                    true
                }
            };
            taken.push(take);
        }
        self.shared.metrics.tasks_loaded(loaded_names);
        tracing::info!(
            reason,
            added,
            changed,
            removed,
            invalid_files = loaded
                .errors
                .iter()
                .map(|e| &e.path)
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            errors = loaded.errors.len(),
            "tasks reloaded"
        );

        if let Err(error) = self.shared.coordinator.publish(&tasks).await {
            tracing::error!("cannot publish this node's tasks: {error}");
        }
        let mut new_tasks = Vec::new();
        for (spec, take) in tasks.into_iter().zip(taken) {
            if !take {
                continue;
            }
            let spec = Arc::new(spec);
            match self.tasks.get_mut(&spec.name) {
                Some(task) => task.spec = spec,
                None => new_tasks.push(LoadedTask { spec, timer: None }),
            }
        }
        self.tasks.add(new_tasks);
        self.config
            .loaded
            .set(self.tasks.iter().map(|t| t.spec.clone()).collect());
        self.applied = None;
        self.apply_leadership();
        memory::release_free_memory();
    }

    /// Starts timing the tasks this node should fire and stops the others; after a session
    /// loss, stops the runs of tasks with `kill_on_session_loss`.
    fn apply_leadership(&mut self) {
        let leadership = self.shared.leadership.borrow().clone();
        if leadership.session_losses > self.session_losses {
            self.session_losses = leadership.session_losses;
            for task in self.tasks.iter() {
                let name = &task.spec.name;
                if !task.spec.kill_on_session_loss {
                    continue;
                }
                if let Some(runs) = self.shared.runs.get(name)
                    && runs.count() > 0
                {
                    tracing::warn!(
                        task = %name,
                        "ZooKeeper session lost: stopping this task's runs (kill_on_session_loss = true)"
                    );
                    runs.stop_all(false);
                }
            }
        }
        self.shared.metrics.set_leases_held(leadership.tasks.len());
        // Only the tasks whose lease or pause mark changed, unless every task may have.
        let changed: Option<BTreeSet<String>> = match &self.applied {
            Some(applied) if applied.paused == leadership.paused => Some(
                applied
                    .tasks
                    .symmetric_difference(&leadership.tasks)
                    .map(|name| name.to_string())
                    .chain(
                        applied
                            .paused_tasks
                            .symmetric_difference(&leadership.paused_tasks)
                            .cloned(),
                    )
                    .collect(),
            ),
            _ => None,
        };
        match (&changed, &self.applied) {
            (Some(names), Some(applied)) => {
                // The count of loaded tasks led, kept up to date from the same difference
                // (counting it afresh was a binary search per led task at every change).
                for name in applied.tasks.symmetric_difference(&leadership.tasks) {
                    if self.tasks.contains(name) {
                        if leadership.tasks.contains(name) {
                            self.leading += 1;
                        } else {
                            self.leading = self.leading.saturating_sub(1);
                        }
                    }
                }
                for name in names {
                    if let Some(task) = self.tasks.get_mut(name) {
                        apply_to_task(&mut self.timers, &mut self.paused_logged, &leadership, task);
                    }
                }
            }
            _ => {
                self.timers.reserve(self.tasks.len());
                for task in self.tasks.iter_mut() {
                    apply_to_task(&mut self.timers, &mut self.paused_logged, &leadership, task);
                }
                self.paused_logged.retain(|name| self.tasks.contains(name));
                self.leading = self
                    .tasks
                    .names()
                    .filter(|name| leadership.tasks.contains(*name))
                    .count();
            }
        }
        manual::start_manual_runs(&self.shared, &self.tasks, &leadership);
        let status = service::status_line(&leadership, self.leading, self.tasks.len());
        if status != self.status {
            service::status(&status);
            self.status = status;
        }
        self.applied = Some(leadership);
    }

    /// Graceful stop: no new ticks, leadership released at once, running jobs get
    /// `shutdown_grace` to finish, then their process groups are killed.
    async fn shutdown(self) {
        self.timers.stop_all();
        // After the timers' stop: a run whose claim was already on its way when its task was
        // stopped sees the stop itself when it registers (see `start_run`).
        for task_runs in self.shared.runs.all() {
            task_runs.cancel_retries();
        }
        self.shared.coordinator.release_all().await;
        let running = self.shared.runs.count();
        // Our own sender must go, or the channel never reports the last run's end.
        let Daemon {
            shared,
            timers,
            mut runs_alive_rx,
            config,
            ..
        } = self;
        let coordinator = shared.coordinator.clone();
        let runs = shared.runs.clone();
        // The timer loop holds `shared` too.
        drop(timers);
        drop(shared);
        if running > 0 {
            tracing::info!(
                running,
                grace = %humantime::format_duration(config.shutdown_grace),
                "waiting for running jobs to finish"
            );
        }
        let all_ended = tokio::time::timeout(config.shutdown_grace, runs_alive_rx.recv())
            .await
            .is_ok();
        if !all_ended {
            let still = runs.count();
            tracing::warn!(
                running = still,
                "shutdown_grace is over; killing the remaining jobs' process groups"
            );
            for task_runs in runs.all() {
                task_runs.stop_all(true);
            }
            // SIGKILL cannot be ignored; the runs end as soon as the kernel reaps them.
            let _ = tokio::time::timeout(Duration::from_secs(10), runs_alive_rx.recv()).await;
        }
        coordinator.close().await;
        tracing::info!("zkcron stopped");
    }
}

/// Starts or stops the timer of one loaded task for `leadership`, and logs a pause or resume
/// by the operator once.
fn apply_to_task(
    timers: &mut Timers,
    paused_logged: &mut BTreeSet<String>,
    leadership: &Leadership,
    task: &mut LoadedTask,
) {
    let spec = task.spec.clone();
    let name: &str = &spec.name;
    let should_fire = task.spec.enabled && leadership.may_fire(name);
    // Led, but paused by the operator: the lease stays, nothing fires.
    let paused = task.spec.enabled
        && leadership.tasks.contains(name)
        && leadership.paused_tasks.contains(name);
    if paused && paused_logged.insert(name.to_string()) {
        tracing::warn!(
            task = %name,
            "task {name} is paused; nothing fires until `zkcron resume {name}`"
        );
    } else if !paused && paused_logged.remove(name) && should_fire {
        tracing::info!(
            task = %name,
            "task {name} is no longer paused; firing it again from its fire record"
        );
    }
    match (task.timer.is_some(), should_fire) {
        (false, true) => {
            // A newly led or resumed task: its planner starts from the fire record
            // (`last_claimed`), which `zkcron resume` moved past the paused period.
            task.timer = Some(timers.fire(task.spec.clone()));
        }
        (true, false) => {
            timers.stop(task.timer.take().expect("matched Some"));
            tracing::info!(task = %name, "no longer firing this task");
        }
        _ => {}
    }
}

/// Aborts a background task when dropped (the watchdog pinger ends with the main loop).
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
