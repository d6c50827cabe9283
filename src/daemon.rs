//! The async shell: timers, signals, file watching and processes around the pure core.
//!
//! The daemon owns one small tokio loop per task it fires. Each loop asks its
//! [`TickPlanner`](crate::plan::TickPlanner) what to do, sleeps until the instant it names
//! (one shared [`watch_wall_clock`] task re-checks the clock every [`CLOCK_CHECK`] and wakes every
//! loop when the wall clock jumps or the machine was suspended), and for each tick claims
//! it through the [`Coordinator`] before spawning the process. The main loop waits on one closed
//! set of [`Event`]s: reload (SIGHUP or a change in `jobs_dir`), leadership change, shutdown.
//!
//! It keeps the service manager informed through [`crate::service`]: ready once the tasks are
//! loaded, a status line on every leadership change, stopping when SIGTERM arrives.
//!
//! This is the only module that reads the wall clock for scheduling ([`wall_clock`]).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::coord::{ClaimIntent, ClaimOutcome, Coordinator, Leadership, RunResult};
use crate::executor::{self, PreparedRun, RunOutcome, RunRequest, StopHandle};
use crate::plan::{self, OverlapAction, PlanRules, Step, Tick, TickPlanner};
use crate::service;
use crate::task::{self, NodeLossPolicy, OverlapPolicy, TaskDefaults, TaskSpec};

/// How often the wall clock is compared with the monotonic clock to notice jumps (an NTP step,
/// an operator setting the date, a resume from suspend). One check serves every task, so 10,000
/// idle tasks cost one wake-up per interval, not 10,000.
pub const CLOCK_CHECK: Duration = Duration::from_secs(1);

/// A difference between wall and monotonic time above this counts as a jump.
const CLOCK_JUMP: chrono::TimeDelta = chrono::TimeDelta::milliseconds(500);

/// A task held by a fire record ahead of the clock is reported when its loop starts, then at
/// most this often.
const HELD_REPORT_INTERVAL: Duration = Duration::from_secs(3600);

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

/// State shared by the task loops and runs of one daemon.
struct Shared<C> {
    coordinator: Arc<C>,
    node_id: String,
    job_output_lines: usize,
    leadership: watch::Receiver<Leadership>,
    /// Counts wall-clock jumps; task loops re-plan when it changes.
    clock_jumps: watch::Receiver<u64>,
    /// See [`DaemonConfig::reset_flags`].
    reset_flags: Option<String>,
    /// Never sent on: every task loop and run holds this struct, so when the receiver sees
    /// `None` all of them have ended.
    #[allow(dead_code)]
    runs_alive: mpsc::Sender<()>,
}

impl<C: Coordinator> Shared<C> {
    /// The shared state, and the receiver that sees `None` once every loop and run has ended.
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
        };
        (Arc::new(shared), runs_alive_rx)
    }
}

/// The live runs of one task. Kept by name, so they outlive a change of the task's file: a
/// modified task still sees its earlier run for `overlap`.
///
/// A run is live from its spawn until the main process of its last attempt has exited
/// (background processes it leaves behind are not tracked, as in cron), not until its result is
/// recorded: a tick that comes due while the result is being written is not skipped for
/// `overlap`.
#[derive(Default)]
struct TaskRuns {
    running: Mutex<Vec<RunEntry>>,
}

struct RunEntry {
    id: u64,
    fire_id: String,
    stop: StopHandle,
    /// Turns true when the run has ended: the main process of its last attempt exited (or a stop
    /// cut its retries short). Its result may still be being recorded.
    done: watch::Receiver<bool>,
}

impl TaskRuns {
    fn count(&self) -> usize {
        self.running.lock().expect("runs lock poisoned").len()
    }

    /// Returns once no run of the task is live.
    async fn wait_idle(&self) {
        loop {
            let running: Vec<watch::Receiver<bool>> = {
                let running = self.running.lock().expect("runs lock poisoned");
                running.iter().map(|entry| entry.done.clone()).collect()
            };
            if running.is_empty() {
                return;
            }
            for mut done in running {
                let _ = done.wait_for(|ended| *ended).await;
            }
        }
    }

    /// Lets the running attempts finish but starts none of their retries; returns how many runs
    /// were told.
    fn cancel_retries(&self) -> usize {
        let running = self.running.lock().expect("runs lock poisoned");
        for entry in running.iter() {
            entry.stop.cancel_retries();
        }
        running.len()
    }

    fn stop_all(&self, kill_now: bool) -> Vec<watch::Receiver<bool>> {
        let running = self.running.lock().expect("runs lock poisoned");
        running
            .iter()
            .map(|entry| {
                tracing::info!(fire_id = %entry.fire_id, kill_now, "stopping run");
                if kill_now {
                    entry.stop.kill_now();
                } else {
                    entry.stop.terminate();
                }
                entry.done.clone()
            })
            .collect()
    }
}

/// A task the daemon has loaded, and its loop when this node fires it.
struct LoadedTask {
    spec: Arc<TaskSpec>,
    task_loop: Option<TaskLoop>,
}

struct TaskLoop {
    stop: watch::Sender<bool>,
    handle: JoinHandle<()>,
}

impl TaskLoop {
    fn stop(self) {
        // The loop only sleeps or claims; it never owns a process, so ending it is safe.
        let _ = self.stop.send(true);
        drop(self.handle);
    }
}

/// The running daemon.
pub struct Daemon<C: Coordinator> {
    config: DaemonConfig,
    shared: Arc<Shared<C>>,
    tasks: BTreeMap<String, LoadedTask>,
    runs: HashMap<String, Arc<TaskRuns>>,
    runs_alive_rx: mpsc::Receiver<()>,
    /// The session losses already acted on.
    session_losses: u64,
    /// The last status line sent to the service manager, so that unchanged ones are not resent.
    status: String,
}

impl<C: Coordinator> Daemon<C> {
    pub fn new(config: DaemonConfig, coordinator: Arc<C>) -> Daemon<C> {
        let (shared, runs_alive_rx) = Shared::new(coordinator, &config);
        Daemon {
            shared,
            config,
            tasks: BTreeMap::new(),
            runs: HashMap::new(),
            runs_alive_rx,
            session_losses: 0,
            status: String::new(),
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
                    let running: usize = self.runs.values().map(|r| r.count()).sum();
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

        let mut wanted: BTreeMap<String, Arc<TaskSpec>> = BTreeMap::new();
        for spec in loaded.tasks {
            wanted.insert(spec.name.clone(), Arc::new(spec));
        }
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
                    wanted.insert(name.clone(), spec);
                }
                None => tracing::error!("invalid task file, not loaded: {}", error.one_line()),
            }
        }

        let mut added = 0;
        let mut changed = 0;
        let mut removed = 0;
        let names: Vec<String> = self.tasks.keys().cloned().collect();
        for name in names {
            if !wanted.contains_key(&name) {
                let task = self.tasks.remove(&name).expect("listed above");
                if let Some(task_loop) = task.task_loop {
                    task_loop.stop();
                }
                let running = self.runs.get(&name).map_or(0, |runs| runs.cancel_retries());
                tracing::info!(
                    task = %name,
                    running,
                    "task removed; a run in progress finishes, without further retries"
                );
                removed += 1;
            }
        }
        for (name, spec) in wanted {
            match self.tasks.get_mut(&name) {
                Some(task) if task.spec == spec => {}
                Some(task) => {
                    if let Some(task_loop) = task.task_loop.take() {
                        task_loop.stop();
                    }
                    task.spec = spec;
                    tracing::info!(task = %name, "task changed; a run in progress finishes");
                    changed += 1;
                }
                None => {
                    tracing::info!(
                        task = %name,
                        schedule = spec.schedule.expression(),
                        timezone = spec.schedule.timezone().name(),
                        enabled = spec.enabled,
                        "task loaded"
                    );
                    self.tasks.insert(
                        name,
                        LoadedTask {
                            spec,
                            task_loop: None,
                        },
                    );
                    added += 1;
                }
            }
        }
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

        let specs: Vec<TaskSpec> = self.tasks.values().map(|t| (*t.spec).clone()).collect();
        if let Err(error) = self.shared.coordinator.publish(&specs).await {
            tracing::error!("cannot publish this node's tasks: {error}");
        }
        self.apply_leadership();
    }

    /// Starts the loops of tasks this node should fire and stops the others; after a session
    /// loss, stops the runs of tasks with `kill_on_session_loss`.
    fn apply_leadership(&mut self) {
        let leadership = self.shared.leadership.borrow().clone();
        if leadership.session_losses > self.session_losses {
            self.session_losses = leadership.session_losses;
            for (name, task) in &self.tasks {
                if !task.spec.kill_on_session_loss {
                    continue;
                }
                if let Some(runs) = self.runs.get(name)
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
        for (name, task) in &mut self.tasks {
            let should_fire = task.spec.enabled && leadership.may_fire(name);
            match (&task.task_loop, should_fire) {
                (None, true) => {
                    let runs = self.runs.entry(name.clone()).or_default().clone();
                    task.task_loop = Some(spawn_task_loop(
                        task.spec.clone(),
                        self.shared.clone(),
                        runs,
                    ));
                }
                (Some(_), false) => {
                    task.task_loop.take().expect("matched Some").stop();
                    tracing::info!(task = %name, "no longer firing this task");
                }
                _ => {}
            }
        }
        let loaded: Vec<&str> = self.tasks.keys().map(String::as_str).collect();
        let status = service::status_line(&leadership, &loaded);
        if status != self.status {
            service::status(&status);
            self.status = status;
        }
    }

    /// Graceful stop: no new ticks, leadership released at once, running jobs get
    /// `shutdown_grace` to finish, then their process groups are killed.
    async fn shutdown(mut self) {
        for task in self.tasks.values_mut() {
            if let Some(task_loop) = task.task_loop.take() {
                task_loop.stop();
            }
        }
        // After the loops' stop: a run whose claim was already on its way when the loops were
        // told sees the stop itself when it registers (see `start_run`).
        for task_runs in self.runs.values() {
            task_runs.cancel_retries();
        }
        self.shared.coordinator.release_all().await;
        let running: usize = self.runs.values().map(|r| r.count()).sum();
        // Our own sender must go, or the channel never reports the last run's end.
        let Daemon {
            shared,
            runs,
            mut runs_alive_rx,
            config,
            ..
        } = self;
        let coordinator = shared.coordinator.clone();
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
            let still: usize = runs.values().map(|r| r.count()).sum();
            tracing::warn!(
                running = still,
                "shutdown_grace is over; killing the remaining jobs' process groups"
            );
            for task_runs in runs.values() {
                task_runs.stop_all(true);
            }
            // SIGKILL cannot be ignored; the runs end as soon as the kernel reaps them.
            let _ = tokio::time::timeout(Duration::from_secs(10), runs_alive_rx.recv()).await;
        }
        coordinator.close().await;
        tracing::info!("zkcron stopped");
    }
}

/// When to reload after changes in `jobs_dir`: once no change came for `quiet`, but never later
/// than `max_delay` after the first change of a burst, so that a directory that never goes quiet
/// still gets reloaded. Pure: the caller passes the time of each change.
#[derive(Debug)]
struct Debounce {
    quiet: Duration,
    max_delay: Duration,
    /// The first and the latest change not yet handled by a reload.
    burst: Option<(tokio::time::Instant, tokio::time::Instant)>,
}

impl Debounce {
    fn new(quiet: Duration, max_delay: Duration) -> Debounce {
        Debounce {
            quiet,
            max_delay,
            burst: None,
        }
    }

    /// A change was seen at `now`.
    fn change(&mut self, now: tokio::time::Instant) {
        let first = self.burst.map_or(now, |(first, _)| first);
        self.burst = Some((first, now));
    }

    /// When the reload is due; `None` when nothing changed since the last one.
    fn due(&self) -> Option<tokio::time::Instant> {
        self.burst
            .map(|(first, last)| (last + self.quiet).min(first + self.max_delay))
    }

    /// A reload is starting: it reads every file, so the changes seen so far are handled.
    fn clear(&mut self) {
        self.burst = None;
    }
}

/// Aborts a background task when dropped (the watchdog pinger ends with the main loop).
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Compares the wall clock with the monotonic clock every [`CLOCK_CHECK`] and counts a jump on
/// `jumps` when they disagree, so that sleeping task loops re-plan against the new time.
async fn watch_wall_clock(jumps: watch::Sender<u64>) {
    let mut interval = tokio::time::interval(CLOCK_CHECK);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = (tokio::time::Instant::now(), wall_clock());
    loop {
        interval.tick().await;
        let now = (tokio::time::Instant::now(), wall_clock());
        if let Some(jump) = clock_jump(now.0 - last.0, now.1 - last.1) {
            tracing::warn!(
                jump_ms = jump.num_milliseconds(),
                "the wall clock jumped (clock set, or resumed from suspend); re-planning every task"
            );
            jumps.send_modify(|count| *count += 1);
        }
        last = now;
        if jumps.is_closed() {
            return;
        }
    }
}

/// The wall clock's jump over an interval in which the monotonic clock advanced by `monotonic`
/// and the wall clock by `wall`, if it is large enough to re-plan for. A suspend shows as a
/// forward jump: the monotonic clock stops while the machine sleeps.
fn clock_jump(monotonic: Duration, wall: chrono::TimeDelta) -> Option<chrono::TimeDelta> {
    let drift = wall - chrono::TimeDelta::from_std(monotonic).unwrap_or(chrono::TimeDelta::MAX);
    (drift.abs() > CLOCK_JUMP).then_some(drift)
}

fn spawn_task_loop<C: Coordinator>(
    spec: Arc<TaskSpec>,
    shared: Arc<Shared<C>>,
    runs: Arc<TaskRuns>,
) -> TaskLoop {
    let (stop, stop_rx) = watch::channel(false);
    let handle = tokio::spawn(task_loop(spec, shared, runs, stop_rx));
    TaskLoop { stop, handle }
}

/// How long before a tick is due its process is prepared (user and group lookups, environment,
/// `argv[0]`, working dir): early enough that the preparation is done when the tick comes due,
/// late enough that what it resolved is current (a user or program added a second before the
/// tick is still seen). Ticks caught up, and ticks armed less than this before they are due
/// after a wake-up, are prepared when they fire.
const PREPARE_AHEAD: Duration = Duration::from_secs(1);

/// One task's loop: plan, (prepare the next tick's process,) sleep, claim, spawn. Ends when
/// told to stop.
async fn task_loop<C: Coordinator>(
    spec: Arc<TaskSpec>,
    shared: Arc<Shared<C>>,
    runs: Arc<TaskRuns>,
    mut stop: watch::Receiver<bool>,
) {
    let name = spec.name.as_str();
    // The fire record decides what was missed; without it we cannot tell, so retry.
    let mut delay = Duration::from_millis(100);
    let last_claimed = loop {
        match shared.coordinator.last_claimed(name).await {
            Ok(last) => break last,
            Err(error) => {
                tracing::error!(
                    task = %name,
                    "cannot read the fire record ({error}); retrying"
                );
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = stop.changed() => return,
                }
                delay = (delay * 2).min(Duration::from_secs(10));
            }
        }
    };
    if spec.on_node_loss == NodeLossPolicy::Rerun {
        rerun_orphan(&spec, &shared, &runs, &stop).await;
    }
    let mut clock_jumps = shared.clock_jumps.clone();
    let mut planner = TickPlanner::start(PlanRules::from_spec(&spec), last_claimed, wall_clock());
    tracing::debug!(task = %name, next = ?planner.armed().map(|t| t.due_at), "firing this task");
    let mut held_reported: Option<tokio::time::Instant> = None;
    // The armed tick's process, prepared up to PREPARE_AHEAD before it is due, so that neither
    // the preparation nor the claim waits on the other at the tick's instant.
    let mut ahead: Option<(Tick, PreparedRun)> = None;
    loop {
        if *stop.borrow() {
            return;
        }
        match planner.poll(wall_clock()) {
            Step::Fire { ticks, skipped } => {
                if skipped > 0 {
                    tracing::warn!(
                        task = %name,
                        skipped,
                        catch_up = ?spec.catch_up,
                        "missed ticks not run (catch_up / starting_deadline)"
                    );
                }
                for tick in ticks {
                    if *stop.borrow() {
                        return;
                    }
                    // Caught-up ticks run one after another unless runs may overlap: with
                    // `skip` they would skip each other, with `replace` kill each other.
                    if tick.catch_up && spec.overlap != OverlapPolicy::Allow {
                        tokio::select! {
                            _ = runs.wait_idle() => {}
                            _ = stop.changed() => return,
                        }
                    }
                    let prepared = ahead
                        .take()
                        .filter(|(armed, _)| *armed == tick)
                        .map(|(_, prepared)| prepared);
                    fire(&spec, &shared, &runs, tick, prepared, &stop).await;
                }
            }
            Step::SleepUntil(due) => {
                let wait = (due - wall_clock()).to_std().unwrap_or_default();
                if let Some(tick) = planner.armed()
                    && ahead.as_ref().is_none_or(|(armed, _)| *armed != tick)
                {
                    if wait <= PREPARE_AHEAD {
                        let fire_id = plan::fire_id(name, tick.instant);
                        let request = run_request(&spec, &shared, tick, &fire_id);
                        ahead = Some((tick, executor::prepare(request).await));
                        continue;
                    }
                    // Wake in time to prepare it.
                    tokio::select! {
                        _ = tokio::time::sleep(wait - PREPARE_AHEAD) => {}
                        _ = clock_jumps.changed() => {}
                        _ = stop.changed() => return,
                    }
                    continue;
                }
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = clock_jumps.changed() => {}
                    _ = stop.changed() => return,
                }
            }
            Step::Held { record, until } => {
                // Never rewound here: ticks up to the record may have run. Say it loudly, then
                // sleep (waking hourly to say it again) until the record's next tick.
                let now = wall_clock();
                if held_reported.is_none_or(|at| at.elapsed() >= HELD_REPORT_INTERVAL) {
                    let fix = plan::held_fix(name, shared.reset_flags.as_deref());
                    tracing::error!(
                        task = %name,
                        %record,
                        "{}",
                        plan::held_report(name, record, until, now, &fix)
                    );
                    held_reported = Some(tokio::time::Instant::now());
                }
                let wait = (until - now).to_std().unwrap_or_default();
                tokio::select! {
                    _ = tokio::time::sleep(wait.min(HELD_REPORT_INTERVAL)) => {}
                    _ = clock_jumps.changed() => {}
                    _ = stop.changed() => return,
                }
            }
            Step::Finished => {
                tracing::info!(task = %name, "the schedule has no further tick");
                let _ = stop.changed().await;
                return;
            }
        }
    }
}

/// Decides the tick's overlap action, prepares its process, stops the run it replaces (with
/// `overlap = "replace"`), claims the tick (as skipped or to run) and, if won, spawns the
/// process at once. The claim comes after the overlap check so that a tick skipped for overlap
/// is still consumed cluster-wide: no later leader catches it up. It comes after everything the
/// spawn needs is resolved (user, group, environment, program, working dir) and after the
/// replaced run has ended, so that a node that dies after a won claim has at most the spawn
/// left undone. No claim is sent once the loop is told to stop (shutdown, reload, leadership
/// lost).
async fn fire<C: Coordinator>(
    spec: &Arc<TaskSpec>,
    shared: &Arc<Shared<C>>,
    runs: &Arc<TaskRuns>,
    tick: Tick,
    prepared_ahead: Option<PreparedRun>,
    stop: &watch::Receiver<bool>,
) {
    let name = spec.name.as_str();
    let fire_id = plan::fire_id(name, tick.instant);
    if !shared.leadership.borrow().may_fire(name) {
        tracing::info!(task = %name, %fire_id, "not leading this task any more; tick left to the leader");
        return;
    }
    let local = runs.count();
    let elsewhere = if spec.overlap == OverlapPolicy::Allow || local > 0 {
        0
    } else {
        match shared.coordinator.runs_elsewhere(name).await {
            Ok(n) => n,
            Err(error) => {
                tracing::warn!(task = %name, %fire_id, "cannot read runs on other nodes ({error}); assuming none");
                0
            }
        }
    };
    let action = plan::overlap_action(spec.overlap, local + elsewhere);
    let (intent, prepared) = match action {
        OverlapAction::Skip => (ClaimIntent::Skip, None),
        OverlapAction::Start | OverlapAction::ReplaceThenStart => {
            let prepared = match prepared_ahead {
                Some(prepared) => prepared,
                None => executor::prepare(run_request(spec, shared, tick, &fire_id)).await,
            };
            (ClaimIntent::Run, Some(prepared))
        }
    };
    let mut stop = stop.clone();
    if action == OverlapAction::ReplaceThenStart {
        // Stopped before the claim, not after it: waiting for the old run (up to its
        // `kill_grace`) between a won claim and the spawn would leave the tick claimed but not
        // started for that long, and lost if the node died meanwhile. If the claim then fails
        // (this node no longer leads the task, or the tick was claimed already), the old run
        // was stopped all the same; that is acceptable, because whoever leads the task next
        // catches this tick up from the fire record and starts it there.
        tracing::info!(task = %name, %fire_id, "replacing the running run (overlap = \"replace\")");
        let replaced_ended = async {
            for mut done in runs.stop_all(false) {
                let _ = done.wait_for(|ended| *ended).await;
            }
        };
        tokio::select! {
            _ = replaced_ended => {}
            // The claim loop below then sends no claim.
            _ = stop.wait_for(|stopping| *stopping) => {}
        }
    }
    // A failed claim (the backend could not tell) is retried while this node still leads the
    // task: dropping the tick would lose it, because the planner has moved past it. When the
    // node pauses or loses the task, the loop stops and whoever leads next catches the tick
    // up from the fire record.
    let mut delay = Duration::from_millis(100);
    loop {
        if *stop.borrow_and_update() {
            tracing::info!(task = %name, %fire_id, "tick not claimed: this task's loop is stopping");
            return;
        }
        match shared.coordinator.claim(name, tick.instant, intent).await {
            Ok(ClaimOutcome::Claimed) => break,
            Ok(ClaimOutcome::AlreadyClaimed { record }) => {
                tracing::info!(task = %name, %fire_id, %record, "tick already claimed; not running it");
                return;
            }
            Ok(ClaimOutcome::NotLeader) => {
                tracing::info!(task = %name, %fire_id, "claim refused: not the leader; not running it");
                return;
            }
            Err(error) => {
                if !shared.leadership.borrow().may_fire(name) {
                    tracing::warn!(task = %name, %fire_id, "claim failed ({error}) and this node no longer fires the task; the next leader catches the tick up");
                    return;
                }
                tracing::warn!(task = %name, %fire_id, "claim failed ({error}); retrying");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = stop.changed() => {}
                }
                delay = (delay * 2).min(Duration::from_secs(1));
            }
        }
    }
    let claimed_at = tokio::time::Instant::now();
    let Some(prepared) = prepared else {
        // Claimed as skipped: no later leader catches the tick up.
        tracing::warn!(
            task = %name,
            %fire_id,
            running_here = local,
            running_elsewhere = elsewhere,
            "skipped: the previous run is still going (overlap = \"skip\")"
        );
        return;
    };
    start_run(shared, runs, tick, prepared, claimed_at, &stop);
}

/// With `on_node_loss = "rerun"`: runs again the tick whose node died mid-run, if there is one.
async fn rerun_orphan<C: Coordinator>(
    spec: &Arc<TaskSpec>,
    shared: &Arc<Shared<C>>,
    runs: &Arc<TaskRuns>,
    stop: &watch::Receiver<bool>,
) {
    let name = spec.name.as_str();
    let orphan = match shared.coordinator.orphaned_tick(name).await {
        Ok(Some(tick)) => tick,
        Ok(None) => return,
        Err(error) => {
            tracing::warn!(
                task = %name,
                "cannot check for a run lost with its node ({error})"
            );
            return;
        }
    };
    let fire_id = plan::fire_id(name, orphan);
    let tick = Tick {
        instant: orphan,
        due_at: orphan,
        catch_up: true,
    };
    let prepared = executor::prepare(run_request(spec, shared, tick, &fire_id)).await;
    if *stop.borrow() {
        return;
    }
    match shared.coordinator.reclaim(name, orphan).await {
        Ok(ClaimOutcome::Claimed) => {
            let claimed_at = tokio::time::Instant::now();
            tracing::warn!(
                task = %name,
                %fire_id,
                "rerunning a tick whose node was lost mid-run (on_node_loss = \"rerun\")"
            );
            start_run(shared, runs, tick, prepared, claimed_at, stop);
        }
        Ok(outcome) => {
            tracing::info!(task = %name, %fire_id, ?outcome, "lost run not rerun: the reclaim was refused")
        }
        Err(error) => {
            tracing::warn!(task = %name, %fire_id, "lost run not rerun: reclaim failed ({error})")
        }
    }
}

/// What the executor needs to run `tick` of `spec` on this node.
fn run_request<C: Coordinator>(
    spec: &TaskSpec,
    shared: &Shared<C>,
    tick: Tick,
    fire_id: &str,
) -> RunRequest {
    RunRequest {
        task: spec.name.clone(),
        fire_id: fire_id.to_string(),
        scheduled_at: tick.instant,
        due_at: tick.due_at,
        node_id: shared.node_id.clone(),
        command: spec.command.clone(),
        user: spec.user.clone(),
        group: spec.group.clone(),
        working_dir: spec.working_dir.clone(),
        env: spec.env.clone(),
        timeout: spec.timeout,
        kill_grace: spec.kill_grace,
        retries: spec.retries,
        output_lines: shared.job_output_lines,
    }
}

/// Spawns the claimed tick's process at once, then tracks the run: it is live in `runs` until
/// the main process of its last attempt exits (background processes it leaves behind are not
/// tracked), and its result is recorded right after that (while its output may still be
/// draining). A preparation that failed is recorded as a failed attempt without a spawn. If `stop` is set when the run registers (the claim was already on its way when the
/// loop was told to stop), the run gets no retries.
fn start_run<C: Coordinator>(
    shared: &Arc<Shared<C>>,
    runs: &Arc<TaskRuns>,
    tick: Tick,
    prepared: PreparedRun,
    claimed_at: tokio::time::Instant,
    stop: &watch::Receiver<bool>,
) {
    static NEXT_RUN_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let started = executor::start(prepared, Some(claimed_at));
    let spawned = tokio::time::Instant::now();
    let name = started.request().task.clone();
    let fire_id = started.request().fire_id.clone();
    let (stop_handle, stop_signal) = StopHandle::new();
    let (done_tx, done_rx) = watch::channel(false);
    let id = NEXT_RUN_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    {
        let mut running = runs.running.lock().expect("runs lock poisoned");
        // Read under the lock that shutdown and removal take after setting it: either they see
        // this entry, or this sees their stop.
        if *stop.borrow() {
            stop_handle.cancel_retries();
        }
        running.push(RunEntry {
            id,
            fire_id: fire_id.clone(),
            stop: stop_handle,
            done: done_rx,
        });
    }
    // The spawned run holds `shared`, and with it a `runs_alive` sender, until its result is
    // recorded.
    let shared = shared.clone();
    let runs = runs.clone();
    tokio::spawn(async move {
        let (ended_tx, ended_rx) = tokio::sync::oneshot::channel::<RunResult>();
        let node = shared.node_id.clone();
        let ended = move |outcome: &RunOutcome| {
            // The run is over on this node now, not once its result is written.
            runs.running
                .lock()
                .expect("runs lock poisoned")
                .retain(|e| e.id != id);
            let _ = done_tx.send(true);
            let _ = ended_tx.send(run_result(tick, node, outcome, spawned.elapsed()));
        };
        let record = async {
            // The first thing after the end: with ZooKeeper this one multi-op deletes the
            // live-run record, so other nodes see the run end as soon as possible.
            if let Ok(result) = ended_rx.await
                && let Err(error) = shared.coordinator.run_ended(&name, &result).await
            {
                tracing::warn!(task = %name, %fire_id, "cannot record the run result ({error})");
            }
        };
        tokio::join!(started.finish(stop_signal, ended), record);
    });
}

/// The stored result of a run of `tick` that took `duration` from its spawn.
fn run_result(tick: Tick, node: String, outcome: &RunOutcome, duration: Duration) -> RunResult {
    RunResult {
        tick: tick.instant,
        node,
        exit: outcome
            .last()
            .map(|a| a.exit.to_string())
            .unwrap_or_default(),
        success: outcome.succeeded(),
        attempts: outcome.attempts.len() as u32,
        duration_ms: duration.as_millis() as u64,
        finished_at: wall_clock(),
    }
}

/// Watches `dir` and sends a message for each change of its entries. Access events are ignored:
/// reading the files on reload must not cause another reload. Returns the watcher, which must be
/// kept alive; `None` (logged) if the dir cannot be watched, in which case SIGHUP still works.
fn watch_jobs_dir(
    dir: &std::path::Path,
    tx: mpsc::Sender<()>,
) -> Option<notify::RecommendedWatcher> {
    use notify::{EventKind, Watcher};
    let handler = move |result: notify::Result<notify::Event>| {
        if let Ok(event) = result
            && !matches!(event.kind, EventKind::Access(_))
        {
            // Full means a message is already pending, which says the same.
            let _ = tx.try_send(());
        }
    };
    let mut watcher = match notify::recommended_watcher(handler) {
        Ok(watcher) => watcher,
        Err(error) => {
            tracing::warn!("cannot watch the jobs dir ({error}); reload with SIGHUP");
            return None;
        }
    };
    if let Err(error) = watcher.watch(dir, notify::RecursiveMode::NonRecursive) {
        tracing::warn!(dir = %dir.display(), "cannot watch the jobs dir ({error}); reload with SIGHUP");
        return None;
    }
    Some(watcher)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coord::CoordError;
    use crate::task::Identity;
    use chrono::{DateTime, TimeDelta, Utc};
    use std::collections::BTreeSet;

    /// A coordinator that leads every task, remembers every claim, and takes `result_write` to
    /// record a result: a ZooKeeper round trip on a busy cluster, or a journal fsync on a busy
    /// disk.
    struct SlowResults {
        leadership: watch::Sender<Leadership>,
        record: Mutex<Option<DateTime<Utc>>>,
        claims: Mutex<Vec<(DateTime<Utc>, ClaimIntent)>>,
        /// When each of `claims` was made (wall clock).
        claimed_at: Mutex<Vec<DateTime<Utc>>>,
        result_write: Duration,
    }

    impl SlowResults {
        fn new(task: &str, record: Option<DateTime<Utc>>, result_write: Duration) -> Arc<Self> {
            let leadership = Leadership {
                tasks: Arc::new(BTreeSet::from([task.to_string()])),
                ..Leadership::default()
            };
            Arc::new(SlowResults {
                leadership: watch::Sender::new(leadership),
                record: Mutex::new(record),
                claims: Mutex::default(),
                claimed_at: Mutex::default(),
                result_write,
            })
        }

        fn claims(&self) -> Vec<(DateTime<Utc>, ClaimIntent)> {
            self.claims.lock().unwrap().clone()
        }
    }

    impl Coordinator for SlowResults {
        async fn publish(&self, _: &[TaskSpec]) -> Result<(), CoordError> {
            Ok(())
        }

        fn leadership(&self) -> watch::Receiver<Leadership> {
            self.leadership.subscribe()
        }

        async fn last_claimed(&self, _: &str) -> Result<Option<DateTime<Utc>>, CoordError> {
            Ok(*self.record.lock().unwrap())
        }

        async fn claim(
            &self,
            _: &str,
            tick: DateTime<Utc>,
            intent: ClaimIntent,
        ) -> Result<ClaimOutcome, CoordError> {
            let mut record = self.record.lock().unwrap();
            if let Some(previous) = *record
                && previous >= tick
            {
                return Ok(ClaimOutcome::AlreadyClaimed { record: previous });
            }
            *record = Some(tick);
            self.claims.lock().unwrap().push((tick, intent));
            self.claimed_at.lock().unwrap().push(wall_clock());
            Ok(ClaimOutcome::Claimed)
        }

        async fn orphaned_tick(&self, _: &str) -> Result<Option<DateTime<Utc>>, CoordError> {
            Ok(None)
        }

        async fn reclaim(&self, _: &str, _: DateTime<Utc>) -> Result<ClaimOutcome, CoordError> {
            Ok(ClaimOutcome::NotLeader)
        }

        async fn runs_elsewhere(&self, _: &str) -> Result<usize, CoordError> {
            Ok(0)
        }

        async fn run_ended(&self, _: &str, _: &RunResult) -> Result<(), CoordError> {
            tokio::time::sleep(self.result_write).await;
            Ok(())
        }

        async fn last_result(&self, _: &str) -> Result<Option<RunResult>, CoordError> {
            Ok(None)
        }

        async fn release_all(&self) {}
    }

    fn task(text: &str) -> Arc<TaskSpec> {
        let defaults = TaskDefaults {
            timezone: chrono_tz::UTC,
            user: None,
            identity: Identity::current(),
        };
        let spec = task::parse_task("t", std::path::Path::new("t.toml"), text, &defaults)
            .unwrap_or_else(|e| panic!("{e:?}"));
        Arc::new(spec)
    }

    /// Runs the loop of `spec` against `coordinator` until it has made `count` claims (within a
    /// deadline) and returns them. The loop's runs are kept in `runs`.
    async fn claims_of(
        spec: Arc<TaskSpec>,
        coordinator: &Arc<SlowResults>,
        runs: &Arc<TaskRuns>,
        count: usize,
    ) -> Vec<(DateTime<Utc>, ClaimIntent)> {
        let config = DaemonConfig {
            jobs_dir: PathBuf::new(),
            node_id: "node-a".into(),
            shutdown_grace: Duration::from_secs(1),
            task_defaults: TaskDefaults {
                timezone: chrono_tz::UTC,
                user: None,
                identity: Identity::current(),
            },
            job_output_lines: 10,
            reset_flags: None,
        };
        let (shared, _runs_alive) = Shared::new(coordinator.clone(), &config);
        let task_loop = spawn_task_loop(spec, shared, runs.clone());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while coordinator.claims().len() < count {
            assert!(
                tokio::time::Instant::now() < deadline,
                "only these claims in 20 s: {:?}",
                coordinator.claims()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        task_loop.stop();
        coordinator.claims()[..count].to_vec()
    }

    /// Issue 9, item 3: "skipped: the previous run is still going" was logged 10 ms after
    /// "finished", because a run stayed live until its result was written.
    #[tokio::test(flavor = "multi_thread")]
    async fn given_a_slow_result_write_when_a_run_ends_just_before_the_next_tick_then_that_tick_is_not_skipped()
     {
        // Each run ends within milliseconds; writing its result takes longer than a period.
        let coordinator = SlowResults::new("t", None, Duration::from_millis(1500));
        let spec = task("schedule = \"* * * * * *\"\ncommand = [\"true\"]\noverlap = \"skip\"\n");

        let claims = claims_of(spec, &coordinator, &Arc::default(), 3).await;

        let intents: Vec<ClaimIntent> = claims.iter().map(|(_, intent)| *intent).collect();
        assert_eq!(intents, [ClaimIntent::Run; 3], "{claims:?}");
        let seconds: Vec<i64> = claims.iter().map(|(t, _)| t.timestamp()).collect();
        assert!(seconds.windows(2).all(|w| w[1] == w[0] + 1), "{seconds:?}");
    }

    /// Issue 9, item 3: after a failover, a catch-up run ending a few ms before the next tick
    /// made that tick skip.
    #[tokio::test(flavor = "multi_thread")]
    async fn given_a_catch_up_run_that_ends_just_before_the_next_tick_then_that_tick_runs() {
        // Early in a second, so that the caught-up run (a few ms) ends well before the next tick.
        let into_second = Duration::from_nanos(u64::from(wall_clock().timestamp_subsec_nanos()));
        tokio::time::sleep(Duration::from_millis(1050).saturating_sub(into_second)).await;
        let missed = wall_clock() - TimeDelta::seconds(5);
        let record = missed - TimeDelta::seconds(5);
        let coordinator = SlowResults::new("t", Some(record), Duration::from_millis(1500));
        let spec = task(
            "schedule = \"* * * * * *\"\ncommand = [\"true\"]\noverlap = \"skip\"\ncatch_up = \"once\"\n",
        );
        let started = wall_clock();

        let claims = claims_of(spec, &coordinator, &Arc::default(), 2).await;

        // The latest missed tick, caught up at once, then the next on-time tick: both run.
        let (caught_up, on_time) = (claims[0], claims[1]);
        assert!(caught_up.0 <= started, "{claims:?}");
        assert!(on_time.0 > started, "{claims:?}");
        assert_eq!(caught_up.1, ClaimIntent::Run, "{claims:?}");
        assert_eq!(on_time.1, ClaimIntent::Run, "{claims:?}");
    }

    /// Issue 9, item 5: with `overlap = "replace"` the tick was claimed first and the old run
    /// stopped after, so the tick stayed claimed but not started for up to `kill_grace` (a
    /// kill -9 then lost it). The old run here ignores SIGTERM, so it cannot end before
    /// `kill_grace` after the tick; the claim must come after that, and the spawn right after
    /// the claim.
    #[tokio::test(flavor = "multi_thread")]
    async fn given_overlap_replace_when_the_old_run_ignores_sigterm_then_the_claim_waits_for_its_end_and_the_spawn_follows_the_claim()
     {
        let dir = tempfile::tempdir().unwrap();
        // The tick after the replacing one comes 2 s after it is spawned (ticks every 3 s, the
        // old run ends `kill_grace` = 1 s after its replacement's tick), so that tick's own
        // replace cannot kill it before it has written its start time.
        let kill_grace = Duration::from_secs(1);
        // Each run writes the wall-clock time of its start (bash's $EPOCHREALTIME, no fork),
        // then ignores SIGTERM; `exec` keeps the main process and the ignored signal.
        let script = format!(
            "echo \"$EPOCHREALTIME\" > {dir}/\"$ZKCRON_FIRE_ID\"; trap '' TERM; exec sleep 20",
            dir = dir.path().display()
        );
        let spec = task(&format!(
            "schedule = \"*/3 * * * * *\"\ncommand = [\"bash\", \"-c\", {script:?}]\n\
             overlap = \"replace\"\nkill_grace = \"1s\"\n"
        ));
        let coordinator = SlowResults::new("t", None, Duration::ZERO);
        let runs: Arc<TaskRuns> = Arc::default();

        let claims = claims_of(spec, &coordinator, &runs, 2).await;
        let claimed_at = coordinator.claimed_at.lock().unwrap()[1];
        // The replacing run started: wait for its start time, then stop every run.
        let started_file = dir.path().join(plan::fire_id("t", claims[1].0));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let started = loop {
            if let Ok(text) = std::fs::read_to_string(&started_file)
                && text.ends_with('\n')
            {
                break text;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the second run did not start"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        for mut done in runs.stop_all(true) {
            let _ = done.wait_for(|ended| *ended).await;
        }

        let (replacing, _) = claims[1];
        assert_eq!(claims[0].1, ClaimIntent::Run, "{claims:?}");
        assert_eq!(claims[1].1, ClaimIntent::Run, "{claims:?}");
        // The old run got SIGTERM at the tick at the earliest and SIGKILL `kill_grace` later.
        assert!(
            claimed_at >= replacing + TimeDelta::from_std(kill_grace).unwrap(),
            "tick {replacing} claimed at {claimed_at}, before the old run could have ended"
        );
        let started: f64 = started.trim().parse().unwrap();
        let spawned = DateTime::from_timestamp_micros((started * 1e6) as i64).unwrap();
        let claim_to_spawn = spawned - claimed_at;
        // bash's start-up included; far below the `kill_grace` the old order put in between.
        assert!(
            claim_to_spawn < TimeDelta::milliseconds(500),
            "claimed at {claimed_at}, started at {spawned}"
        );
    }

    #[test]
    fn debounce_reloads_once_the_dir_is_quiet() {
        let start = tokio::time::Instant::now();
        let ms = |n: u64| start + Duration::from_millis(n);
        let mut debounce = Debounce::new(WATCH_QUIET, WATCH_MAX_DELAY);
        assert_eq!(debounce.due(), None);
        debounce.change(ms(0));
        debounce.change(ms(50));
        assert_eq!(debounce.due(), Some(ms(350)));
        debounce.clear();
        assert_eq!(debounce.due(), None);
    }

    /// Regression: a file rewritten every 100 ms postponed the reload for ever.
    #[test]
    fn debounce_of_a_dir_that_never_goes_quiet_reloads_within_the_max_delay() {
        let start = tokio::time::Instant::now();
        let ms = |n: u64| start + Duration::from_millis(n);
        let mut debounce = Debounce::new(WATCH_QUIET, WATCH_MAX_DELAY);
        for t in (0..5_000).step_by(100) {
            debounce.change(ms(t));
            let due = debounce.due().expect("a change is pending");
            assert!(
                due <= ms(2_000),
                "due at {:?} after a change at {t} ms",
                due - start
            );
            if due <= ms(t + 100) {
                // The timer fires before the next change: the reload clears the burst.
                assert_eq!(due, ms(2_000));
                debounce.clear();
                break;
            }
        }
        assert_eq!(debounce.due(), None, "the reload came");
        // The next burst gets its own bound.
        debounce.change(ms(2_100));
        assert_eq!(debounce.due(), Some(ms(2_400)));
    }

    #[test]
    fn clock_jump_ignores_ordinary_drift_and_reports_steps_and_suspends() {
        let second = Duration::from_secs(1);
        // Timer slack and NTP slewing: no jump.
        assert_eq!(clock_jump(second, TimeDelta::milliseconds(1_020)), None);
        assert_eq!(clock_jump(second, TimeDelta::milliseconds(980)), None);
        // The clock set forward an hour, or a resume after an hour of suspend.
        assert_eq!(
            clock_jump(second, TimeDelta::seconds(3_601)),
            Some(TimeDelta::seconds(3_600))
        );
        // The clock set back two minutes.
        assert_eq!(
            clock_jump(second, TimeDelta::seconds(-119)),
            Some(TimeDelta::seconds(-120))
        );
    }
}
