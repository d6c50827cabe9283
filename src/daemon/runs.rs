//! The runs on this node: starting a claimed run at its instant ([`start_run`]), recording how
//! it ended, and the handles that stop it ([`RunHandles`]). Which runs start and when they are
//! stopped is decided by the firing rules ([`crate::firing`]); this is only their hands.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use tokio::sync::watch;

use super::Shared;
use crate::coord::records::{FORMAT_VERSION, MarkRecord};
use crate::coord::{Coordinator, RunResult};
use crate::executor::{self, RunOutcome, RunRequest, StopHandle};
use crate::firing::{Retries, RunId, RunKind, Spawn, StopHow};
use crate::metrics::FireOutcome;
use crate::plan::Tick;
use crate::task::TaskSpec;

/// Where a run's end goes: the firing rules, as [`crate::firing::Input::RunEnded`]. A callback
/// rather than the engine itself, so that this module, the runs' hands, does not import the
/// engine that calls it.
pub(super) type RunEndedTo = Arc<dyn Fn(RunId) + Send + Sync>;

/// The handles of the live runs on this node, by run. A run is live from its claim until the
/// main process of its last attempt has exited (background processes it leaves behind are not
/// tracked, as in cron), not until its result is recorded.
#[derive(Default)]
pub(super) struct RunHandles(Mutex<HashMap<RunId, RunEntry>>);

struct RunEntry {
    fire_id: String,
    stop: StopHandle,
    /// Turns true when the run has ended: the main process of its last attempt exited (or a stop
    /// cut its retries short). Its result may still be being recorded.
    done: watch::Receiver<bool>,
    /// Set by a stop of the run (not by `cancel_retries`): a tick claimed ahead whose due time
    /// has not come is then not spawned.
    cancel_spawn: watch::Sender<bool>,
}

impl RunHandles {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, RunEntry>> {
        self.0.lock().expect("runs lock poisoned")
    }

    /// How many runs are live.
    pub(super) fn count(&self) -> usize {
        self.lock().len()
    }

    /// Lets the running attempts of `runs` finish but starts none of their retries.
    pub(super) fn cancel_retries(&self, runs: &[RunId]) {
        let running = self.lock();
        for run in runs {
            if let Some(entry) = running.get(run) {
                entry.stop.cancel_retries();
            }
        }
    }

    /// Stops `runs`; the receivers turn true when each has ended.
    pub(super) fn stop(&self, runs: &[RunId], how: StopHow) -> Vec<watch::Receiver<bool>> {
        let running = self.lock();
        runs.iter()
            .filter_map(|run| running.get(run))
            .map(|entry| stop_entry(entry, how))
            .collect()
    }

    /// Stops every run.
    pub(super) fn stop_all(&self, how: StopHow) -> Vec<watch::Receiver<bool>> {
        self.lock()
            .values()
            .map(|entry| stop_entry(entry, how))
            .collect()
    }

    fn remove(&self, run: RunId) {
        self.lock().remove(&run);
    }
}

fn stop_entry(entry: &RunEntry, how: StopHow) -> watch::Receiver<bool> {
    if how == StopHow::Unspawned {
        // Withdrawn if its spawn still waits (`spawned_unless_stopped` says so); else it goes on.
        entry.cancel_spawn.send_replace(true);
        return entry.done.clone();
    }
    let kill_now = how == StopHow::KillNow;
    tracing::info!(fire_id = %entry.fire_id, kill_now, "stopping run");
    if kill_now {
        entry.stop.kill_now();
    } else {
        entry.stop.terminate();
    }
    entry.cancel_spawn.send_replace(true);
    entry.done.clone()
}

/// What the executor needs to run `tick` of `spec` on this node. A pooled task's run is
/// prepared with every item (`ZKCRON_WORK_ITEMS`), as the local backend's one host runs them
/// all; in a cluster, [`start_run`] gives it the items its claim won. A run chained after an
/// item of a pooled parent's run gets that item as `ZKCRON_AFTER_ITEM`.
pub(super) fn run_request<C: Coordinator>(
    spec: &TaskSpec,
    shared: &Shared<C>,
    tick: Tick,
    fire_id: &str,
) -> RunRequest {
    let run_on = &spec.extras.run_on;
    let mut env = spec.extras.env.clone();
    env.extend(run_on.work_env(run_on.items().unwrap_or_default()));
    if let Some(item) = crate::coord::record::chain_item(fire_id) {
        env.insert("ZKCRON_AFTER_ITEM".into(), item.into());
    }
    RunRequest {
        task: spec.name.to_string(),
        fire_id: fire_id.to_string(),
        scheduled_at: tick.instant,
        due_at: tick.due_at,
        node_id: shared.node_id.clone(),
        command: spec.command.clone(),
        user: spec.user.clone(),
        group: spec.extras.group.clone(),
        working_dir: spec.extras.working_dir.clone(),
        env,
        timeout: spec.extras.timeout,
        kill_grace: spec.extras.kill_grace,
        retries: spec.extras.retries,
        output_lines: shared.job_output_lines,
        output: shared.output.clone(),
        on_failure: spec.extras.on_failure.clone(),
        pause_on_failure: spec.extras.pause_on_failure,
        clock: shared.clock,
    }
}

/// Spawns the claimed tick's process at its due time (at once for a tick due already), then
/// tracks the run: it is live from the claim until the main process of its last attempt exits
/// (background processes it leaves behind are not tracked), and its result is recorded right
/// after that (while its output may still be draining); its end goes to the firing rules as
/// [`crate::firing::Input::RunEnded`]. A preparation that failed is recorded as a failed
/// attempt without a spawn. With [`Retries::Cancelled`] (the claim was already on its way when the task was
/// stopped) the run gets no retries.
///
/// A tick claimed ahead is a run whose spawn waits for the instant: whatever happens to a run
/// happens to it. It is spawned at its instant though the node lost the lease meanwhile
/// (handoff, reload, graceful stop, a disconnect): the tick is this node's. A stop of the run
/// before the instant (`overlap = "replace"`, `kill_on_session_loss` after a session loss,
/// shutdown past `shutdown_grace`) means it is never spawned: if the session is the one that
/// claimed it, its result says so (and removes its live-run record); if the session was lost,
/// its records went with it, and the tick is one claimed by a node that died before its run
/// (`on_node_loss` decides).
pub(super) fn start_run<C: Coordinator>(
    shared: &Arc<Shared<C>>,
    spawn: Spawn<executor::PreparedRun>,
    ended: RunEndedTo,
) {
    let Spawn {
        run: id,
        task,
        tick,
        fire_id,
        prepared,
        kind,
        retries,
        chained,
        work_items,
    } = spawn;
    let mut prepared = prepared;
    if let Some(items) = work_items {
        // The claim won these items of the pool (prepared with every item): the run gets them.
        prepared.set_env("ZKCRON_WORK_ITEMS", &items.join(","));
    }
    // `ZKCRON_` names are reserved: the variable is set only for a pooled task's run.
    let items = match prepared.request().env.get("ZKCRON_WORK_ITEMS") {
        Some(items) => items.split(',').map(str::to_string).collect(),
        None => Vec::new(),
    };
    let claimed_at = tokio::time::Instant::now();
    let shared = shared.clone();
    let session = shared.leadership.borrow().session_losses;
    let (stop_signal, done, spawn_cancelled) = register_run(&shared, id, &fire_id, retries);
    let run = LiveRun {
        id,
        name: task.to_string(),
        fire_id,
        tick,
        kind,
        chained,
        items,
        done,
        ended,
    };
    // Handed to the spawner here, not in the task below: a tick due already (a queued one)
    // reaches a spawner thread without waiting for a tokio worker to start that task.
    let scheduled = shared
        .spawner
        .spawn_at(tick.due_at, prepared, Some(claimed_at));
    // The spawned run holds `shared`, and with it a `runs_alive` sender, until its result is
    // recorded.
    tokio::spawn(async move {
        match spawned_unless_stopped(scheduled, spawn_cancelled).await {
            Some(spawned) => follow_run(shared, run, spawned, stop_signal).await,
            None => {
                run.over(&shared);
                shared.metrics.fired(&run.name, FireOutcome::NotStarted);
                not_started(&shared, &run.name, &run.fire_id, tick, session, kind).await;
            }
        }
    });
}

/// A claimed run on its way: what its end needs.
struct LiveRun {
    id: RunId,
    name: String,
    fire_id: String,
    tick: Tick,
    kind: RunKind,
    /// The tasks that run after this one (`after`).
    chained: Arc<[Arc<str>]>,
    /// A pooled task's run: the items it runs (a success requests its chained runs per item).
    items: Vec<String>,
    /// Turned true when the run has ended.
    done: watch::Sender<bool>,
    ended: RunEndedTo,
}

impl LiveRun {
    /// The run is over on this node (not once its result is written): its handles go, and
    /// the firing rules hear of it.
    fn over<C: Coordinator>(&self, shared: &Shared<C>) {
        shared.runs.remove(self.id);
        let _ = self.done.send(true);
        (self.ended)(self.id);
        shared.metrics.set_running_jobs(shared.runs.count());
    }
}

/// Enters the run among the live runs, with the handles that stop it; returns the run's side
/// of them: its stop signal, its end, and the cancellation of its spawn.
fn register_run<C: Coordinator>(
    shared: &Shared<C>,
    id: RunId,
    fire_id: &str,
    retries: Retries,
) -> (
    executor::StopSignal,
    watch::Sender<bool>,
    watch::Receiver<bool>,
) {
    let (stop_handle, stop_signal) = StopHandle::new();
    let (done_tx, done_rx) = watch::channel(false);
    let (cancel_spawn, spawn_cancelled) = watch::channel(false);
    if retries == Retries::Cancelled {
        stop_handle.cancel_retries();
    }
    shared.runs.lock().insert(
        id,
        RunEntry {
            fire_id: fire_id.to_string(),
            stop: stop_handle,
            done: done_rx,
            cancel_spawn,
        },
    );
    shared.metrics.set_running_jobs(shared.runs.count());
    (stop_signal, done_tx, spawn_cancelled)
}

/// Waits for the spawn at the run's instant; `None` if the run was stopped before it.
async fn spawned_unless_stopped(
    mut scheduled: executor::Scheduled,
    mut spawn_cancelled: watch::Receiver<bool>,
) -> Option<executor::Spawned> {
    let spawned = tokio::select! {
        spawned = scheduled.spawned() => Some(spawned),
        _ = spawn_cancelled.wait_for(|cancelled| *cancelled) => None,
    };
    match spawned {
        Some(spawned) => spawned,
        None if scheduled.withdraw() => None,
        // A spawner thread took it just before: it is spawned, as if the cancellation had come
        // just after.
        None => scheduled.spawned().await,
    }
}

/// Follows a spawned run to the exit of its last attempt, then records its result.
async fn follow_run<C: Coordinator>(
    shared: Arc<Shared<C>>,
    run: LiveRun,
    spawned: executor::Spawned,
    stop_signal: executor::StopSignal,
) {
    let executor::Spawned {
        started,
        at: started_at,
    } = spawned;
    let tick = run.tick;
    let metrics = shared.metrics.clone();
    metrics.lateness((started_at - tick.due_at).as_seconds_f64());
    if tick.catch_up {
        metrics.catch_up_run(&run.name);
    }
    let (name, fire_id) = (run.name.clone(), run.fire_id.clone());
    let ended_shared = shared.clone();
    let spawned = tokio::time::Instant::now();
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel::<RunResult>();
    let node = shared.node_id.clone();
    let pause_on_failure = started.request().pause_on_failure;
    let on_end = move |outcome: &RunOutcome| {
        run.over(&ended_shared);
        if run.kind == RunKind::Backfill {
            metrics.backfill_run(outcome.succeeded());
        }
        if crate::coord::record::chain_of(&run.fire_id).is_some() {
            metrics.chained_run(outcome.succeeded());
        }
        let ended_at = ended_shared.clock.now();
        let mut result = run_result(tick, node, outcome, spawned.elapsed(), ended_at);
        let at = ended_at.timestamp_millis() as f64 / 1000.0;
        if outcome.succeeded() {
            metrics.fired(&run.name, FireOutcome::Success);
            metrics.succeeded(&run.name, at);
        } else {
            metrics.fired(&run.name, FireOutcome::Failure);
        }
        if outcome.succeeded() || outcome.failed() {
            metrics.task_run_ended(&run.name, outcome.succeeded(), at);
        }
        result.started_at = outcome
            .attempts
            .iter()
            .any(|a| a.pid.is_some())
            .then_some(started_at);
        result.manual = run.kind != RunKind::Scheduled;
        if outcome.succeeded() {
            result.chained = run.chained.to_vec();
            result.items = run.items;
        }
        if pause_on_failure && outcome.failed() {
            // Stored with the end, in one write: no stored failure without its pause.
            result.pause = Some(Box::new(failure_pause(&result.node, &run.fire_id, &result)));
        }
        result.fire_id = Some(run.fire_id);
        let _ = ended_tx.send(result);
    };
    let record = async {
        // The first thing after the end: with ZooKeeper this one multi-op deletes the live-run
        // record, so other nodes see the run end as soon as possible.
        let Ok(result) = ended_rx.await else {
            return;
        };
        match shared.coordinator.run_ended(&name, &result).await {
            // One request per chained task, and for a pooled run per item of each.
            Ok(()) => shared
                .metrics
                .chain_requests(result.chained.len() * result.items.len().max(1)),
            Err(error) if result.pause.is_some() => {
                tracing::error!(task = %name, %fire_id, "cannot record the run result ({error}), nor with it the pause its failure asks for (pause_on_failure): the task goes on firing; pause it with `zkcron pause {name}`")
            }
            Err(error) => {
                tracing::warn!(task = %name, %fire_id, "cannot record the run result ({error})")
            }
        }
    };
    tokio::join!(started.finish(stop_signal, on_end), record);
}

/// The pause of `task` (`pause_on_failure`) that its failed run `fire_id` stores with its end:
/// the run and how it ended as the reason, this node as who, at its end, as `zkcron pause
/// --reason` would.
fn failure_pause(node: &str, fire_id: &str, result: &RunResult) -> MarkRecord {
    MarkRecord {
        format: FORMAT_VERSION,
        at: result.finished_at.trunc_subsecs(0),
        by: format!("zkcron@{node}"),
        reason: Some(format!(
            "pause_on_failure: run {fire_id} failed ({})",
            result.exit
        )),
    }
}

/// A chained run of a paused task, claimed and skipped: its end is recorded as skipped (its
/// trigger ends), and counted.
pub(super) async fn record_skipped<C: Coordinator>(
    shared: &Shared<C>,
    name: &str,
    fire_id: &str,
    tick: Tick,
) {
    shared.metrics.chained_run_skipped();
    let result = RunResult {
        tick: tick.instant,
        node: shared.node_id.clone(),
        exit: "skipped: the task is paused".to_string(),
        success: false,
        attempts: 0,
        duration_ms: 0,
        finished_at: shared.clock.now(),
        fire_id: Some(fire_id.to_string()),
        manual: true,
        ..RunResult::default()
    };
    if let Err(error) = shared.coordinator.run_ended(name, &result).await {
        tracing::warn!(task = %name, %fire_id, "cannot record the skipped chained run ({error})");
    }
}

/// A tick claimed ahead whose run was stopped before its instant: never spawned.
async fn not_started<C: Coordinator>(
    shared: &Shared<C>,
    name: &str,
    fire_id: &str,
    tick: Tick,
    session: u64,
    kind: RunKind,
) {
    if shared.leadership.borrow().session_losses != session {
        tracing::warn!(
            task = %name,
            %fire_id,
            "claimed tick not started: the ZooKeeper session was lost before its instant; it counts as claimed by a node that died before its run (on_node_loss decides)"
        );
        return;
    }
    tracing::warn!(task = %name, %fire_id, "claimed tick not started: its run was stopped before its instant");
    let result = RunResult {
        tick: tick.instant,
        node: shared.node_id.clone(),
        exit: "not started: stopped before its instant".to_string(),
        success: false,
        attempts: 0,
        duration_ms: 0,
        finished_at: shared.clock.now(),
        fire_id: Some(fire_id.to_string()),
        manual: kind != RunKind::Scheduled,
        ..RunResult::default()
    };
    if let Err(error) = shared.coordinator.run_ended(name, &result).await {
        tracing::warn!(task = %name, %fire_id, "cannot record the run result ({error})");
    }
}

/// The stored result of a run of `tick` that took `duration` from its spawn and ended at
/// `finished_at`.
fn run_result(
    tick: Tick,
    node: String,
    outcome: &RunOutcome,
    duration: Duration,
    finished_at: DateTime<Utc>,
) -> RunResult {
    RunResult {
        tick: tick.instant,
        node,
        exit: outcome
            .last()
            .map(|a| a.exit.to_string())
            .unwrap_or_default(),
        success: outcome.succeeded(),
        exit_code: match outcome.last().map(|a| &a.exit) {
            Some(executor::Exit::Code(code)) => Some(*code),
            _ => None,
        },
        signal: match outcome.last().map(|a| &a.exit) {
            Some(executor::Exit::Signal(signal)) => Some(*signal),
            _ => None,
        },
        attempts: outcome.attempts.len() as u32,
        duration_ms: duration.as_millis() as u64,
        finished_at,
        // Only a failure's: it says why, and a success's would weigh on every history write.
        output_tail: (outcome.failed() && !outcome.output_tail.is_empty())
            .then(|| executor::printable_tail(&outcome.output_tail).into()),
        ..RunResult::default()
    }
}
