//! The async shell: timers, signals, file watching and processes around the pure cores.
//!
//! The per-task firing rules (arm a tick, prepare it, the overlap check, the claim and its
//! retries, orphan reruns, manual runs, pause, stop, reload) are the sans-IO
//! [`crate::firing::Firing`]; `firing` is its shell: it performs the core's actions
//! (coordinator calls, preparations, spawns through `runs`) and times its wake-ups with one
//! loop, so 10,000 idle tasks cost no tokio task. One shared `watching::watch_wall_clock`
//! task re-checks the clock every [`CLOCK_CHECK`] and the core re-plans every task when the wall
//! clock jumps or the machine was suspended. The main loop waits on one closed set of
//! `Event`s: reload (SIGHUP or a change in `jobs_dir`), leadership change, shutdown, and
//! tells the core.
//!
//! It keeps the service manager informed through [`crate::service`]: ready once the tasks are
//! loaded, a status line on every leadership change, stopping when SIGTERM arrives.
//!
//! Calendar time comes from the [`Clock`] in [`DaemonConfig`], never read anywhere else: the
//! system clock in a real daemon, tokio's paused clock in a test (`tests.rs`), where the firing
//! loop then fires on virtual time.
//!
//! Files: `firing` (the core's shell), `runs` (`start_run`, the hands of the runs), `watching`
//! (the jobs dir's events, debounce; clock jumps), `control` (the local backend's control
//! socket), `memory` (memory freed after a burst given back to the system), `leading` (what
//! the leader's metrics say of the tasks this node leads).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::clock::Clock;
use crate::coord::{Coordinator, Leadership};
use crate::firing::{FiringConfig, Input, StopHow, Unload};
use crate::service;
use crate::task::{self, TaskDefaults, TaskSpec};

pub mod control;
mod firing;
mod leading;
mod memory;
pub(crate) use memory::use_one_heap;
#[cfg(test)]
mod paused_tests;
mod runs;
#[cfg(test)]
mod tests;
mod watching;

use firing::FiringShell;
use runs::RunHandles;
use watching::{
    Debounce, DirChange, Pending, watch_calendars_dir, watch_jobs_dir, watch_wall_clock,
};

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

/// What the daemon needs to know, already resolved from config and flags.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    pub jobs_dir: PathBuf,
    /// The calendars a task's `exclude` names (`calendars.d`), read again with every full
    /// reload; their last good versions are in `task_defaults.calendars`.
    pub calendars_dir: PathBuf,
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
    /// Where the runs' output is kept (`[log] output_limit`); `None`: nowhere.
    pub output: Option<crate::executor::OutputStore>,
    /// Where fires, claims, leases and runs are counted (`/metrics`).
    pub metrics: crate::metrics::Metrics,
    /// The tasks as of the last reload, for `zkcron status` and `/status` on this host.
    pub loaded: LoadedTasks,
    /// Where the daemon reads calendar time (`now` for the firing rules, results' times).
    pub clock: Clock,
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
    /// Something changed in `jobs_dir`: the reload is scheduled by [`Debounce`], which collects
    /// what changed.
    JobsDirChanged(Vec<DirChange>),
    /// The set of tasks this node leads changed.
    LeadershipChanged,
    /// Stop: SIGTERM or SIGINT.
    Shutdown(&'static str),
}

/// State shared by the firing shell, the calls it makes and the runs of one daemon.
struct Shared<C> {
    coordinator: Arc<C>,
    node_id: String,
    job_output_lines: usize,
    output: Option<crate::executor::OutputStore>,
    leadership: watch::Receiver<Leadership>,
    /// Counts wall-clock jumps; the firing rules re-plan when it changes.
    clock_jumps: watch::Receiver<u64>,
    /// Never sent on: the firing shell, every call it makes and every run holds this struct,
    /// so when the receiver sees `None` all of them have ended.
    #[allow(dead_code)]
    runs_alive: mpsc::Sender<()>,
    /// The handles of the live runs.
    runs: Arc<RunHandles>,
    metrics: crate::metrics::Metrics,
    /// Spawns the runs at their instants.
    spawner: crate::executor::Spawner,
    /// The daemon's clock ([`DaemonConfig::clock`]).
    clock: Clock,
}

impl<C: Coordinator> Shared<C> {
    /// The shared state, and the receiver that sees `None` once the firing shell, every call it
    /// made and every run have ended.
    /// Starts the wall-clock watch.
    fn new(coordinator: Arc<C>, config: &DaemonConfig) -> (Arc<Shared<C>>, mpsc::Receiver<()>) {
        let (runs_alive, runs_alive_rx) = mpsc::channel(1);
        let leadership = coordinator.leadership();
        let (clock_jumps_tx, clock_jumps) = watch::channel(0);
        tokio::spawn(watch_wall_clock(clock_jumps_tx, config.clock));
        let shared = Shared {
            coordinator,
            node_id: config.node_id.clone(),
            job_output_lines: config.job_output_lines,
            output: config.output.clone(),
            leadership,
            clock_jumps,
            runs_alive,
            runs: Arc::default(),
            metrics: config.metrics.clone(),
            spawner: crate::executor::Spawner::start(config.clock),
            clock: config.clock,
        };
        (Arc::new(shared), runs_alive_rx)
    }
}

/// The firing core's configuration the daemon runs with: no deliberate bug is on.
fn firing_config(config: &DaemonConfig) -> FiringConfig {
    FiringConfig {
        reset_flags: config.reset_flags.clone(),
        ..FiringConfig::default()
    }
}

/// The running daemon.
pub struct Daemon<C: Coordinator> {
    config: DaemonConfig,
    shared: Arc<Shared<C>>,
    firing: FiringShell<C>,
    runs_alive_rx: mpsc::Receiver<()>,
    /// The last status line sent to the service manager, so that unchanged ones are not resent.
    status: String,
    /// The task files as last read, so that a reload reads only the changed ones.
    cache: task::LoadCache,
    /// The calendar files' errors the last reload logged: said again only when they change.
    calendar_errors: Vec<String>,
    /// The tasks whose stored result was read for the leader's metrics.
    seeded: std::collections::BTreeSet<Arc<str>>,
}

impl<C: Coordinator> Daemon<C> {
    pub fn new(config: DaemonConfig, coordinator: Arc<C>) -> Daemon<C> {
        let (shared, runs_alive_rx) = Shared::new(coordinator, &config);
        let source = leading::source(
            shared.leadership.clone(),
            config.loaded.clone(),
            config.clock,
        );
        shared.metrics.set_leader_source(source);
        Daemon {
            firing: FiringShell::start(shared.clone(), firing_config(&config)),
            shared,
            config,
            runs_alive_rx,
            status: String::new(),
            cache: task::LoadCache::default(),
            calendar_errors: Vec::new(),
            seeded: Default::default(),
        }
    }

    /// Runs until SIGTERM or SIGINT, then stops gracefully.
    pub async fn run(mut self) -> anyhow::Result<()> {
        let mut sighup = signal(SignalKind::hangup())?;
        let mut sigterm = signal(SignalKind::terminate())?;
        let mut sigint = signal(SignalKind::interrupt())?;
        // One message per burst of events, received as soon as the loop is idle.
        let (watch_tx, mut watch_rx) = mpsc::unbounded_channel::<Vec<DirChange>>();
        let _calendars_watcher = watch_calendars_dir(&self.config.calendars_dir, watch_tx.clone());
        let _watcher = watch_jobs_dir(&self.config.jobs_dir, watch_tx);
        let mut debounce = Debounce::new(WATCH_QUIET, WATCH_MAX_DELAY);
        let mut leadership = self.shared.coordinator.leadership();

        self.reload("start", Pending::everything("start-up")).await;
        tracing::info!(
            node = %self.config.node_id,
            jobs_dir = %self.config.jobs_dir.display(),
            tasks = self.config.loaded.get().len(),
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
                Some(changes) = watch_rx.recv() => Event::JobsDirChanged(changes),
                _ = tokio::time::sleep_until(reload_due.unwrap_or_else(tokio::time::Instant::now)),
                    if reload_due.is_some() => Event::Reload("change in jobs_dir"),
                Ok(()) = leadership.changed() => Event::LeadershipChanged,
                _ = sigterm.recv() => Event::Shutdown("SIGTERM"),
                _ = sigint.recv() => Event::Shutdown("SIGINT"),
            };
            match event {
                Event::JobsDirChanged(changes) => {
                    debounce.change(tokio::time::Instant::now(), changes)
                }
                Event::Reload("SIGHUP") => {
                    // It looks at every file: the changes seen so far are handled by it.
                    debounce.take();
                    service::reloading();
                    self.reload("SIGHUP", Pending::everything("SIGHUP")).await;
                    service::ready(&self.status);
                }
                Event::Reload(reason) => {
                    let changes = debounce.take();
                    self.reload(reason, changes).await
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

    /// Re-reads `jobs_dir` (what `changes` says changed, or every file) and applies the
    /// difference: added tasks start, removed ones stop, changed ones restart, and a file that
    /// became invalid keeps its last good version.
    async fn reload(&mut self, reason: &str, changes: Pending) {
        let current = self.config.loaded.get();
        let Some((mut tasks, errors)) = self.read_jobs_dir(&current, changes).await else {
            return;
        };
        let diff = self.unload_differences(&current, &mut tasks);
        drop(current);
        self.shared.metrics.tasks_loaded(diff.loaded_names);
        tracing::info!(
            reason,
            added = diff.added,
            changed = diff.changed,
            removed = diff.removed,
            invalid_files = errors
                .iter()
                .map(|e| &e.path)
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            errors = errors.len(),
            "tasks reloaded"
        );

        if let Err(error) = self.shared.coordinator.publish(&tasks).await {
            tracing::error!("cannot publish this node's tasks: {error}");
        }
        self.config.loaded.set(tasks.clone());
        self.firing.engine().handle(Input::Load(tasks));
        self.apply_leadership();
        memory::release_free_memory();
    }

    /// Reads the calendars dir again (a few small files, at every reload): a broken file keeps
    /// its last good version (logged with its file, line and column). Whether a calendar
    /// changed: then the cache of unchanged task files is dropped, and every one is checked
    /// again (the tasks that exclude it change with it).
    fn reload_calendars(&mut self) -> bool {
        let defaults = &mut self.config.task_defaults;
        let loaded = task::load_calendars_dir(
            &self.config.calendars_dir,
            &defaults.identity,
            &defaults.calendars,
        );
        let errors: Vec<String> = loaded.errors.iter().map(|e| e.one_line()).collect();
        if errors != self.calendar_errors {
            for error in &errors {
                tracing::error!(
                    "invalid calendar file, keeping its last good version if it had one: {error}"
                );
            }
            self.calendar_errors = errors;
        }
        if loaded.calendars != *defaults.calendars {
            tracing::info!(
                calendars = loaded.calendars.len(),
                "calendars changed: every task file is checked again"
            );
            defaults.calendars = Arc::new(loaded.calendars);
            self.cache = Default::default();
            return true;
        }
        false
    }

    /// The tasks of `jobs_dir` in name order, with the last good version (in `current`) of a
    /// task whose file became invalid, and the files' errors; `None` when the dir is refused.
    /// Only the files changed since the last reload are read ([`task::LoadCache`]), and only
    /// those `changes` names when it names them.
    async fn read_jobs_dir(
        &mut self,
        current: &[Arc<TaskSpec>],
        changes: Pending,
    ) -> Option<(Vec<Arc<TaskSpec>>, Vec<task::TaskFileError>)> {
        // A calendar that changed changes the tasks that exclude it: every file is read again.
        let calendars_changed = self.reload_calendars();
        let dir = self.config.jobs_dir.clone();
        let defaults = self.config.task_defaults.clone();
        let mut cache = std::mem::take(&mut self.cache);
        let now = std::time::SystemTime::from(self.shared.clock.now());
        let rescan = changes
            .rescan
            .or(calendars_changed.then_some("a calendar changed"));
        let read = tokio::task::spawn_blocking(move || {
            let scan = match rescan {
                Some(_) => task::Scan::Full,
                None => task::Scan::Named(&changes.names),
            };
            let loaded = task::reload_jobs_dir(&dir, &defaults, &mut cache, now, scan);
            (loaded, cache)
        })
        .await;
        let loaded = match read {
            Ok((Ok(loaded), cache)) => {
                self.cache = cache;
                loaded
            }
            Ok((Err(problems), cache)) => {
                self.cache = cache;
                // As for a broken file: the last good tasks keep running.
                for problem in problems {
                    tracing::error!(
                        jobs_dir = %self.config.jobs_dir.display(),
                        "jobs dir refused, keeping the {} loaded tasks: {}",
                        current.len(),
                        problem.one_line()
                    );
                }
                return None;
            }
            Err(join_error) => {
                tracing::error!("loading the jobs dir panicked: {join_error}");
                return None;
            }
        };
        tracing::debug!(
            read = self.cache.last_reads(),
            tasks = loaded.tasks.len(),
            scan = %scanned(self.cache.last_scan(), rescan),
            "jobs dir read: only new and changed files were opened"
        );
        let mut tasks = loaded.tasks;
        for error in &loaded.errors {
            let kept = error
                .task
                .as_ref()
                .and_then(|name| find(current, name).map(|spec| (name, spec.clone())));
            match kept {
                Some((name, spec)) => {
                    tracing::error!(
                        task = %name,
                        "invalid task file, keeping its last good version running: {}",
                        error.one_line()
                    );
                    // In its place in name order (the tasks are published so).
                    match tasks.binary_search_by(|task| task.name.cmp(&spec.name)) {
                        Ok(i) => tasks[i] = spec,
                        Err(i) => tasks.insert(i, spec),
                    }
                }
                None => tracing::error!("invalid task file, not loaded: {}", error.one_line()),
            }
        }
        Some((tasks, loaded.errors))
    }

    /// Stops firing the tasks removed or changed since `current` (before the new tasks are
    /// published) and logs each new one ([`diff`]).
    fn unload_differences(&self, current: &[Arc<TaskSpec>], tasks: &mut [Arc<TaskSpec>]) -> Diff {
        let mut diff = diff(current, tasks);
        let unload = std::mem::take(&mut diff.unload);
        if !unload.is_empty() {
            self.firing.engine().handle(Input::Unload(unload));
        }
        diff
    }

    /// Tells the firing rules the current leadership (they start and stop firing tasks, and
    /// after a session loss stop the runs of tasks with `kill_on_session_loss`), and the
    /// service manager the status line.
    fn apply_leadership(&mut self) {
        let leadership = self.shared.leadership.borrow().clone();
        self.shared.metrics.set_leases_held(leadership.tasks.len());
        self.shared.metrics.set_no_eligible(&leadership.no_eligible);
        let items = work_items_run(&self.config.loaded.get(), &leadership);
        self.shared.metrics.set_work_items(items);
        let waiting = leadership.backfills.values().map(Vec::len).sum();
        self.shared.metrics.set_backfills_waiting(waiting);
        leading::seed_gained(&self.shared, &leadership, &mut self.seeded);
        let engine = self.firing.engine();
        engine.handle(Input::Leadership(leadership.clone()));
        let leading = engine.with(|core| core.leading());
        let loaded = self.config.loaded.get().len();
        let status = service::status_line(&leadership, leading, loaded);
        if status != self.status {
            service::status(&status);
            self.status = status;
        }
    }

    /// Graceful stop: no new ticks, leadership released at once, running jobs get
    /// `shutdown_grace` to finish, then their process groups are killed.
    async fn shutdown(self) {
        // A run whose claim was already on its way is started without retries when its claim
        // is answered: its task is stopped.
        self.firing.engine().handle(Input::Shutdown);
        self.shared.coordinator.release_all().await;
        let running = self.shared.runs.count();
        // Our own sender must go, or the channel never reports the last run's end.
        let Daemon {
            shared,
            firing,
            mut runs_alive_rx,
            config,
            ..
        } = self;
        let coordinator = shared.coordinator.clone();
        // The timer loop holds `shared` too.
        drop(firing);
        let runs = shared.runs.clone();
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
            runs.stop_all(StopHow::KillNow);
            // SIGKILL cannot be ignored; the runs end as soon as the kernel reaps them.
            let _ = tokio::time::timeout(Duration::from_secs(10), runs_alive_rx.recv()).await;
        }
        coordinator.close().await;
        tracing::info!("zkcron stopped");
    }
}

/// What a reload changed.
#[derive(Debug, Default, PartialEq)]
struct Diff {
    added: usize,
    changed: usize,
    removed: usize,
    /// The names of the added tasks (for the metrics).
    loaded_names: Vec<Arc<str>>,
    /// The removed and changed tasks, for the firing rules to stop.
    unload: Vec<(String, Unload)>,
}

/// What changed from `current` to `tasks` (both in name order), logging each new task. An
/// unchanged task in `tasks` becomes the `Arc` in `current`, so the coordinator's leadership
/// set shares each name with the daemon's spec, and the next reload compares it as a pointer.
fn diff(current: &[Arc<TaskSpec>], tasks: &mut [Arc<TaskSpec>]) -> Diff {
    let mut diff = Diff::default();
    // Both in name order: walked side by side.
    let mut old = current.iter().peekable();
    for spec in tasks.iter_mut() {
        // An unchanged task is the daemon's own `Arc` (the load cache keeps it): compared as a
        // pointer, not by name (a reload of one changed file walks 100,000 of them).
        if old.next_if(|old| Arc::ptr_eq(old, spec)).is_some() {
            continue;
        }
        while let Some(gone) = old.next_if(|old| old.name < spec.name) {
            diff.unload.push((gone.name.to_string(), Unload::Removed));
            diff.removed += 1;
        }
        let name = spec.name.clone();
        match old.next_if(|old| old.name == name) {
            Some(old) if **old == **spec => *spec = old.clone(),
            Some(_) => {
                diff.unload.push((name.to_string(), Unload::Changed));
                diff.changed += 1;
            }
            None => {
                tracing::info!(
                    task = %name,
                    schedule = %spec.schedule.expression(),
                    timezone = spec.schedule.timezone().name(),
                    enabled = spec.enabled,
                    "task loaded"
                );
                diff.loaded_names.push(name);
                diff.added += 1;
            }
        }
    }
    for gone in old {
        diff.unload.push((gone.name.to_string(), Unload::Removed));
        diff.removed += 1;
    }
    diff
}

/// How a reload looked at the jobs dir, for the debug log: `rescan` is why every file was
/// looked at, when the reload asked for that.
fn scanned(scanned: &task::Scanned, rescan: Option<&'static str>) -> String {
    match scanned {
        task::Scanned::Full => format!("full ({})", rescan.unwrap_or("asked for")),
        task::Scanned::FullInstead(why) => format!("full instead of named ({why})"),
        task::Scanned::Named { names } => format!("named ({names} entries changed)"),
        task::Scanned::Nothing => "none".to_string(),
    }
}

/// The task `name` of `tasks` (in name order).
fn find<'a>(tasks: &'a [Arc<TaskSpec>], name: &str) -> Option<&'a Arc<TaskSpec>> {
    tasks
        .binary_search_by(|task| (*task.name).cmp(name))
        .ok()
        .map(|i| &tasks[i])
}

/// Aborts a background task when dropped (the watchdog pinger ends with the main loop).
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The items of each pooled task in `loaded` this node runs each tick under `leadership`
/// (`zkcron_work_items`): in a cluster those whose units it holds, on the embedded backend
/// every item of a pooled task it leads; none of the others.
fn work_items_run(
    loaded: &[Arc<TaskSpec>],
    leadership: &crate::coord::Leadership,
) -> std::collections::BTreeMap<String, usize> {
    loaded
        .iter()
        .filter_map(|spec| {
            let items = spec.extras.run_on.items()?;
            let runs = match leadership.items_held.get(&*spec.name) {
                Some(&held) => held,
                None if leadership.tasks.contains(&*spec.name) => items.len(),
                None => 0,
            };
            Some((spec.name.to_string(), runs))
        })
        .collect()
}
