//! A tick's claim and its run: the overlap check, the claim, the spawn, and the live runs of
//! each task ([`TaskRuns`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::{Shared, wall_clock};
use crate::coord::{ClaimIntent, ClaimOutcome, Coordinator, RunResult};
use crate::executor::{self, PreparedRun, RunOutcome, RunRequest, StopHandle};
use crate::metrics::FireOutcome;
use crate::plan::{self, OverlapAction, Tick};
use crate::task::{OverlapPolicy, TaskSpec};

/// The live runs of one task. Kept by name, so they outlive a change of the task's file: a
/// modified task still sees its earlier run for `overlap`.
///
/// A run is live from its spawn until the main process of its last attempt has exited
/// (background processes it leaves behind are not tracked, as in cron), not until its result is
/// recorded: a tick that comes due while the result is being written is not skipped for
/// `overlap`.
/// The live runs of every task that has fired on this node, by name. A task's entry is made
/// at its first tick (an idle task has none) and kept, so that runs outlive a change of the
/// task's file or its removal: a modified task still sees its earlier run for `overlap`, and
/// shutdown sees every run.
#[derive(Default)]
pub(super) struct RunsByTask(Mutex<HashMap<String, Arc<TaskRuns>>>);

impl RunsByTask {
    /// The runs of `task`, made now if it never fired.
    pub(super) fn of(&self, task: &str) -> Arc<TaskRuns> {
        let mut map = self.0.lock().expect("runs map poisoned");
        if let Some(runs) = map.get(task) {
            return runs.clone();
        }
        let runs = Arc::<TaskRuns>::default();
        map.insert(task.to_string(), runs.clone());
        runs
    }

    /// The runs of `task`, if it ever fired.
    pub(super) fn get(&self, task: &str) -> Option<Arc<TaskRuns>> {
        self.0.lock().expect("runs map poisoned").get(task).cloned()
    }

    /// The runs of every task that ever fired.
    pub(super) fn all(&self) -> Vec<Arc<TaskRuns>> {
        self.0
            .lock()
            .expect("runs map poisoned")
            .values()
            .cloned()
            .collect()
    }

    /// How many runs are live.
    pub(super) fn count(&self) -> usize {
        self.all().iter().map(|runs| runs.count()).sum()
    }

    /// Uses `runs` as the runs of `task` (tests that watch a task's runs).
    #[cfg(test)]
    pub(super) fn adopt(&self, task: &str, runs: Arc<TaskRuns>) {
        self.0
            .lock()
            .expect("runs map poisoned")
            .insert(task.to_string(), runs);
    }
}

#[derive(Default)]
pub(super) struct TaskRuns {
    running: Mutex<Vec<RunEntry>>,
}

struct RunEntry {
    id: u64,
    fire_id: String,
    stop: StopHandle,
    /// Turns true when the run has ended: the main process of its last attempt exited (or a stop
    /// cut its retries short). Its result may still be being recorded.
    done: watch::Receiver<bool>,
    /// Set by a stop of the run (not by `cancel_retries`): a tick claimed ahead whose due time
    /// has not come is then not spawned.
    cancel_spawn: watch::Sender<bool>,
}

impl TaskRuns {
    pub(super) fn count(&self) -> usize {
        self.running.lock().expect("runs lock poisoned").len()
    }

    /// Returns once no run of the task is live.
    pub(super) async fn wait_idle(&self) {
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
    pub(super) fn cancel_retries(&self) -> usize {
        let running = self.running.lock().expect("runs lock poisoned");
        for entry in running.iter() {
            entry.stop.cancel_retries();
        }
        running.len()
    }

    pub(super) fn stop_all(&self, kill_now: bool) -> Vec<watch::Receiver<bool>> {
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
                entry.cancel_spawn.send_replace(true);
                entry.done.clone()
            })
            .collect()
    }
}

/// Decides the tick's overlap action, prepares its process, stops the run it replaces (with
/// `overlap = "replace"`), claims the tick (as skipped or to run) and, if won, spawns the
/// process at the tick's due time: at once for a tick due already, at its instant for a tick
/// claimed ahead ([`plan::CLAIM_AHEAD`]).
///
/// A tick claimed ahead is decided at the claim, as every tick is: the overlap check comes
/// first. It is made ahead only when the answer cannot change by the instant: with `overlap =
/// "allow"`, or when no run of the task is live anywhere (only the leader starts runs of a task,
/// and this activation starts them one after another). When a run is live and the policy is
/// `skip` or `replace`, whether it still is at the instant decides, so the check and the claim
/// wait for the instant, as without the lead. The claim comes after the overlap check so that a tick skipped for overlap
/// is still consumed cluster-wide: no later leader catches it up. It comes after everything the
/// spawn needs is resolved (user, group, environment, program, working dir) and after the
/// replaced run has ended, so that a node that dies after a won claim has at most the spawn
/// left undone. No claim is sent once the task is told to stop (shutdown, reload, leadership
/// lost).
pub(super) async fn fire<C: Coordinator>(
    spec: &Arc<TaskSpec>,
    shared: &Arc<Shared<C>>,
    runs: &Arc<TaskRuns>,
    tick: Tick,
    prepared_ahead: Option<PreparedRun>,
    stop: &watch::Receiver<bool>,
) {
    let name = &*spec.name;
    let fire_id = plan::fire_id(name, tick.instant);
    let mut stop = stop.clone();
    if !shared.leadership.borrow().may_fire(name) {
        tracing::info!(task = %name, %fire_id, "not leading this task any more; tick left to the leader");
        return;
    }
    let (mut local, mut elsewhere) = live_runs(spec, shared, runs, &fire_id).await;
    if spec.overlap != OverlapPolicy::Allow
        && local + elsewhere > 0
        && let Ok(wait) = (tick.due_at - wall_clock()).to_std()
    {
        // A run is live and the tick is not due yet: decide at the instant.
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.wait_for(|stopping| *stopping) => {
                tracing::info!(task = %name, %fire_id, "tick not claimed: this task's loop is stopping");
                return;
            }
        }
        (local, elsewhere) = live_runs(spec, shared, runs, &fire_id).await;
    }
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
    // node pauses or loses the task, its timer is stopped and whoever leads next catches the
    // tick up from the fire record.
    let mut delay = Duration::from_millis(100);
    loop {
        if *stop.borrow_and_update() {
            tracing::info!(task = %name, %fire_id, "tick not claimed: this task's loop is stopping");
            return;
        }
        match shared.coordinator.claim(name, tick.instant, intent).await {
            Ok(ClaimOutcome::Claimed) => {
                shared.metrics.claim(true);
                break;
            }
            Ok(ClaimOutcome::AlreadyClaimed { record }) => {
                shared.metrics.claim(false);
                tracing::info!(task = %name, %fire_id, %record, "tick already claimed; not running it");
                return;
            }
            Ok(ClaimOutcome::NotLeader) => {
                shared.metrics.claim(false);
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
    if tick.due_at > wall_clock() {
        tracing::debug!(task = %name, %fire_id, due_at = %tick.due_at, "claimed ahead of its instant");
    }
    let Some(prepared) = prepared else {
        // Claimed as skipped: no later leader catches the tick up.
        shared.metrics.fired(name, FireOutcome::Skipped);
        tracing::warn!(
            task = %name,
            %fire_id,
            running_here = local,
            running_elsewhere = elsewhere,
            "skipped: the previous run is still going (overlap = \"skip\")"
        );
        return;
    };
    start_run(
        shared,
        runs,
        name,
        tick,
        prepared,
        claimed_at,
        &stop,
        RunKind::Scheduled,
    );
}

/// The live runs of the task on this node and (for `overlap`) on the others.
async fn live_runs<C: Coordinator>(
    spec: &TaskSpec,
    shared: &Shared<C>,
    runs: &TaskRuns,
    fire_id: &str,
) -> (usize, usize) {
    let local = runs.count();
    if spec.overlap == OverlapPolicy::Allow || local > 0 {
        return (local, 0);
    }
    match shared.coordinator.runs_elsewhere(&spec.name).await {
        Ok(n) => (local, n),
        Err(error) => {
            tracing::warn!(task = %spec.name, %fire_id, "cannot read runs on other nodes ({error}); assuming none");
            (local, 0)
        }
    }
}

/// With `on_node_loss = "rerun"`: runs again the tick whose node died mid-run, if there is one.
pub(super) async fn rerun_orphan<C: Coordinator>(
    spec: &Arc<TaskSpec>,
    shared: &Arc<Shared<C>>,
    runs: &Arc<TaskRuns>,
    stop: &watch::Receiver<bool>,
) {
    let name = &*spec.name;
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
    // A tick claimed ahead by a node that died before its instant is rerun at its instant,
    // never before.
    if let Ok(wait) = (orphan - wall_clock()).to_std() {
        let mut stop = stop.clone();
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.wait_for(|stopping| *stopping) => return,
        }
    }
    let prepared = executor::prepare(run_request(spec, shared, tick, &fire_id)).await;
    if *stop.borrow() {
        return;
    }
    match shared.coordinator.reclaim(name, orphan).await {
        Ok(ClaimOutcome::Claimed) => {
            shared.metrics.claim(true);
            let claimed_at = tokio::time::Instant::now();
            tracing::warn!(
                task = %name,
                %fire_id,
                "rerunning a tick whose node was lost mid-run (on_node_loss = \"rerun\")"
            );
            start_run(
                shared,
                runs,
                name,
                tick,
                prepared,
                claimed_at,
                stop,
                RunKind::Scheduled,
            );
        }
        Ok(outcome) => {
            shared.metrics.claim(false);
            tracing::info!(task = %name, %fire_id, ?outcome, "lost run not rerun: the reclaim was refused")
        }
        Err(error) => {
            tracing::warn!(task = %name, %fire_id, "lost run not rerun: reclaim failed ({error})")
        }
    }
}

/// What the executor needs to run `tick` of `spec` on this node.
pub(super) fn run_request<C: Coordinator>(
    spec: &TaskSpec,
    shared: &Shared<C>,
    tick: Tick,
    fire_id: &str,
) -> RunRequest {
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
        env: spec.extras.env.clone(),
        timeout: spec.extras.timeout,
        kill_grace: spec.extras.kill_grace,
        retries: spec.extras.retries,
        output_lines: shared.job_output_lines,
        on_failure: spec.extras.on_failure.clone(),
    }
}

/// Which run [`start_run`] starts.
#[derive(Debug, Clone)]
pub(super) enum RunKind {
    /// A tick of the schedule: its fire id is `<task>@<unix>` of the tick.
    Scheduled,
    /// A manual run (`zkcron trigger`): its fire id is the trigger's name, its tick the time it
    /// was requested.
    Manual { fire_id: String },
}

impl RunKind {
    fn fire_id(&self, task: &str, tick: Tick) -> String {
        match self {
            RunKind::Scheduled => plan::fire_id(task, tick.instant),
            RunKind::Manual { fire_id } => fire_id.clone(),
        }
    }
}

/// Spawns the claimed tick's process at its due time (at once for a tick due already), then
/// tracks the run: it is live in `runs` from the claim until the main process of its last
/// attempt exits (background processes it leaves behind are not tracked), and its result is
/// recorded right after that (while its output may still be draining). A preparation that failed
/// is recorded as a failed attempt without a spawn. If `stop` is set when the run registers (the
/// claim was already on its way when the task was stopped), the run gets no retries.
///
/// A tick claimed ahead is a run whose spawn waits for the instant: whatever happens to a run
/// happens to it. It is spawned at its instant though the node lost the lease meanwhile
/// (handoff, reload, graceful stop, a disconnect): the tick is this node's. A stop of the run
/// before the instant (`overlap = "replace"`, `kill_on_session_loss` after a session loss,
/// shutdown past `shutdown_grace`) means it is never spawned: if the session is the one that
/// claimed it, its result says so (and removes its live-run record); if the session was lost,
/// its records went with it, and the tick is one claimed by a node that died before its run
/// (`on_node_loss` decides).
#[allow(clippy::too_many_arguments)]
pub(super) fn start_run<C: Coordinator>(
    shared: &Arc<Shared<C>>,
    runs: &Arc<TaskRuns>,
    task: &str,
    tick: Tick,
    prepared: PreparedRun,
    claimed_at: tokio::time::Instant,
    stop: &watch::Receiver<bool>,
    kind: RunKind,
) {
    static NEXT_RUN_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let name = task.to_string();
    let fire_id = kind.fire_id(&name, tick);
    let session = shared.leadership.borrow().session_losses;
    let (stop_handle, stop_signal) = StopHandle::new();
    let (done_tx, done_rx) = watch::channel(false);
    let (cancel_spawn, mut spawn_cancelled) = watch::channel(false);
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
            cancel_spawn,
        });
    }
    shared.metrics.set_running_jobs(shared.runs.count());
    // The spawned run holds `shared`, and with it a `runs_alive` sender, until its result is
    // recorded.
    let shared = shared.clone();
    let runs = runs.clone();
    tokio::spawn(async move {
        let mut scheduled = shared
            .spawner
            .spawn_at(tick.due_at, prepared, Some(claimed_at));
        let spawned = tokio::select! {
            spawned = scheduled.spawned() => Some(spawned),
            _ = spawn_cancelled.wait_for(|cancelled| *cancelled) => None,
        };
        let spawned = match spawned {
            Some(spawned) => spawned,
            None if scheduled.withdraw() => None,
            // A spawner thread took it just before: it is spawned, as if the cancellation had
            // come just after.
            None => scheduled.spawned().await,
        };
        let Some(executor::Spawned {
            started,
            at: started_at,
        }) = spawned
        else {
            runs.running
                .lock()
                .expect("runs lock poisoned")
                .retain(|e| e.id != id);
            let _ = done_tx.send(true);
            shared.metrics.set_running_jobs(shared.runs.count());
            shared.metrics.fired(&name, FireOutcome::NotStarted);
            not_started(&shared, &name, &fire_id, tick, session, &kind).await;
            return;
        };
        let metrics = shared.metrics.clone();
        metrics.lateness((started_at - tick.due_at).as_seconds_f64());
        if tick.catch_up {
            metrics.catch_up_run(&name);
        }
        let all_runs = shared.runs.clone();
        let metric_task = name.clone();
        let spawned = tokio::time::Instant::now();
        let (ended_tx, ended_rx) = tokio::sync::oneshot::channel::<RunResult>();
        let node = shared.node_id.clone();
        let manual = matches!(kind, RunKind::Manual { .. });
        let run_fire_id = fire_id.clone();
        let ended = move |outcome: &RunOutcome| {
            // The run is over on this node now, not once its result is written.
            runs.running
                .lock()
                .expect("runs lock poisoned")
                .retain(|e| e.id != id);
            let _ = done_tx.send(true);
            metrics.set_running_jobs(all_runs.count());
            if outcome.succeeded() {
                metrics.fired(&metric_task, FireOutcome::Success);
                metrics.succeeded(
                    &metric_task,
                    wall_clock().timestamp_millis() as f64 / 1000.0,
                );
            } else {
                metrics.fired(&metric_task, FireOutcome::Failure);
            }
            let mut result = run_result(tick, node, outcome, spawned.elapsed());
            result.started_at = outcome
                .attempts
                .iter()
                .any(|a| a.pid.is_some())
                .then_some(started_at);
            result.fire_id = Some(run_fire_id);
            result.manual = manual;
            let _ = ended_tx.send(result);
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

/// A tick claimed ahead whose run was stopped before its instant: never spawned.
async fn not_started<C: Coordinator>(
    shared: &Shared<C>,
    name: &str,
    fire_id: &str,
    tick: Tick,
    session: u64,
    kind: &RunKind,
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
        finished_at: wall_clock(),
        fire_id: Some(fire_id.to_string()),
        manual: matches!(kind, RunKind::Manual { .. }),
        ..RunResult::default()
    };
    if let Err(error) = shared.coordinator.run_ended(name, &result).await {
        tracing::warn!(task = %name, %fire_id, "cannot record the run result ({error})");
    }
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
        finished_at: wall_clock(),
        ..RunResult::default()
    }
}
