//! The shell of the firing rules: drives the sans-IO [`Firing`] core with the wall clock,
//! performs its [`Action`]s and feeds their answers back.
//!
//! The core sits behind one mutex in an [`Engine`]. Whoever has something to tell it (the main
//! loop: reloads, leadership, shutdown; a finished coordinator call or preparation; a run that
//! ended) locks it, hands the input over with the daemon's clock's time as `now`, and performs
//! the actions
//! that come out before unlocking: performing is never more than spawning a tokio task for a
//! coordinator call or a preparation, registering or signalling a run's handles, so actions are
//! performed in the order the core emitted them. One loop ([`timer_loop`]) sleeps until the
//! core's [`Firing::poll_timeout`], a change of it, or a jump of the wall clock. Idle tasks
//! therefore cost no tokio task: one exists only while a call, a preparation or a run is under
//! way.

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::Shared;
use super::runs::{run_request, start_run};
use crate::coord::{ClaimIntent, ClaimOutcome, Coordinator};
use crate::executor::{self, PreparedRun};
use crate::firing::{Action, Answer, Firing, FiringConfig, Input};
use crate::metrics::FireOutcome;

/// The firing rules of this daemon and what performs their actions.
pub(super) struct Engine<C: Coordinator> {
    core: Mutex<Firing<PreparedRun>>,
    /// Wakes the timer loop: the earliest wake-up may have changed.
    wake: Notify,
    shared: Arc<Shared<C>>,
}

/// The engine and its timer loop; dropping it stops the loop (not the calls and runs under
/// way, which hold the engine until they end).
pub(super) struct FiringShell<C: Coordinator> {
    engine: Arc<Engine<C>>,
    timer_loop: JoinHandle<()>,
}

impl<C: Coordinator> FiringShell<C> {
    /// Starts the timer loop.
    pub(super) fn start(shared: Arc<Shared<C>>, config: FiringConfig) -> FiringShell<C> {
        let engine = Arc::new(Engine {
            core: Mutex::new(Firing::new(config, shared.clock.now())),
            wake: Notify::new(),
            shared,
        });
        let timer_loop = tokio::spawn(timer_loop(engine.clone()));
        FiringShell { engine, timer_loop }
    }

    pub(super) fn engine(&self) -> &Arc<Engine<C>> {
        &self.engine
    }
}

impl<C: Coordinator> Drop for FiringShell<C> {
    fn drop(&mut self) {
        self.timer_loop.abort();
    }
}

impl<C: Coordinator> Engine<C> {
    pub(super) fn shared(&self) -> &Arc<Shared<C>> {
        &self.shared
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Firing<PreparedRun>> {
        self.core.lock().expect("firing core poisoned")
    }

    /// Tells the core `input` now and performs what it asks.
    pub(super) fn handle(self: &Arc<Self>, input: Input<PreparedRun>) {
        let mut core = self.lock();
        core.handle(input, self.shared.clock.now());
        self.perform_all(&mut core);
        drop(core);
        self.wake.notify_one();
    }

    /// Reads the core.
    pub(super) fn with<R>(&self, read: impl FnOnce(&Firing<PreparedRun>) -> R) -> R {
        read(&self.lock())
    }

    fn perform_all(self: &Arc<Self>, core: &mut Firing<PreparedRun>) {
        while let Some(action) = core.poll() {
            self.perform(action);
        }
    }

    fn perform(self: &Arc<Self>, action: Action<PreparedRun>) {
        let shared = &self.shared;
        match action {
            Action::ReadFireRecord { call, task } => self.answer(call, move |s| async move {
                Answer::FireRecord(s.coordinator.last_claimed(&task).await)
            }),
            Action::ReadOrphan { call, task } => self.answer(call, move |s| async move {
                Answer::Orphan(s.coordinator.orphaned_tick(&task).await)
            }),
            Action::CountRunsElsewhere { call, task } => self.answer(call, move |s| async move {
                Answer::RunsElsewhere(s.coordinator.runs_elsewhere(&task).await)
            }),
            Action::ReadQueued { call, task } => self.answer(call, move |s| async move {
                Answer::Queued(s.coordinator.queued_tick(&task).await)
            }),
            Action::WaitRunsElsewhere { call, task } => self.answer(call, move |s| async move {
                Answer::RunsEnded(s.coordinator.runs_ended_elsewhere(&task).await)
            }),
            Action::Prepare {
                call,
                spec,
                tick,
                fire_id,
            } => {
                let request = run_request(&spec, shared, tick, &fire_id);
                self.answer(call, move |_| async move {
                    Answer::Prepared(executor::prepare(request).await)
                })
            }
            Action::Claim {
                call,
                task,
                tick,
                intent,
                ticks,
            } => self.claim(call, task, tick, intent, ticks),
            Action::Reclaim { call, task, tick } => self.reclaim(call, task, tick),
            Action::ClaimManual {
                call,
                task,
                trigger,
            } => self.answer(call, move |s| async move {
                Answer::Claim(s.coordinator.claim_manual(&task, &trigger).await)
            }),
            Action::Spawn(spawn) => {
                let engine = self.clone();
                let ended = Arc::new(move |run| engine.handle(Input::RunEnded { run }));
                start_run(self.shared(), spawn, ended)
            }
            Action::SkipChained {
                task,
                fire_id,
                tick,
            } => self.skip_chained(task, fire_id, tick),
            Action::StopRuns { runs, how } => {
                shared.runs.stop(&runs, how);
            }
            Action::CancelRetries { runs } => shared.runs.cancel_retries(&runs),
            Action::ReleaseMemory => super::memory::release_free_memory(),
        }
    }

    /// Claims `tick` of `task` (its held items' units when it is pooled), counting the outcome.
    fn claim(
        self: &Arc<Self>,
        call: crate::firing::CallId,
        task: Arc<str>,
        tick: chrono::DateTime<chrono::Utc>,
        intent: ClaimIntent,
        ticks: Vec<crate::plan::ledger::TickEntry>,
    ) {
        self.answer(call, move |s| async move {
            let counted = ticks.clone();
            let claim = s.coordinator.claim_noting(&task, tick, intent, ticks);
            let (outcome, items) = match claim.await {
                Ok((outcome, items)) => (Ok(outcome), items),
                Err(error) => (Err(error), None),
            };
            if let Ok(outcome) = &outcome {
                let won = *outcome == ClaimOutcome::Claimed;
                if won {
                    for entry in &counted {
                        let (outcome, reason) = (entry.reason.outcome(), entry.reason);
                        s.metrics
                            .ticks_not_run(&task, outcome.code(), reason.code(), entry.count);
                    }
                }
                if intent == ClaimIntent::Note {
                    return claim_answer(Ok(*outcome), items);
                }
                s.metrics.claim(won);
                match intent {
                    ClaimIntent::Skip if won => s.metrics.fired(&task, FireOutcome::Skipped),
                    ClaimIntent::Queue if won => s.metrics.fired(&task, FireOutcome::Queued),
                    ClaimIntent::Drop if won => s.metrics.fired(&task, FireOutcome::Dropped),
                    _ => {}
                }
            }
            claim_answer(outcome, items)
        });
    }

    /// Claims again a tick this node's run of `task` lost with its previous session.
    fn reclaim(
        self: &Arc<Self>,
        call: crate::firing::CallId,
        task: Arc<str>,
        tick: chrono::DateTime<chrono::Utc>,
    ) {
        self.answer(call, move |s| async move {
            let (outcome, items) = match s.coordinator.reclaim_share(&task, tick).await {
                Ok((outcome, items)) => (Ok(outcome), items),
                Err(error) => (Err(error), None),
            };
            if let Ok(outcome) = &outcome {
                s.metrics.claim(*outcome == ClaimOutcome::Claimed);
            }
            claim_answer(outcome, items)
        });
    }

    /// Records the end of a skipped chained run, in a task of its own.
    fn skip_chained(self: &Arc<Self>, task: Arc<str>, fire_id: String, tick: crate::plan::Tick) {
        let shared = self.shared().clone();
        tokio::spawn(async move {
            super::runs::record_skipped(&shared, &task, &fire_id, tick).await;
        });
    }

    /// Runs `ask` in a task of its own and hands its answer to the core as the answer to `call`.
    fn answer<F, Fut>(self: &Arc<Self>, call: crate::firing::CallId, ask: F)
    where
        F: FnOnce(Arc<Shared<C>>) -> Fut,
        Fut: std::future::Future<Output = Answer<PreparedRun>> + Send + 'static,
    {
        let engine = self.clone();
        let asked = ask(self.shared.clone());
        tokio::spawn(async move {
            let answer = asked.await;
            engine.handle(Input::Answer { call, answer });
        });
    }
}

/// The core's answer to a claim: a won claim that names its work items carries them.
fn claim_answer(
    outcome: Result<ClaimOutcome, crate::coord::CoordError>,
    items: Option<Arc<[String]>>,
) -> Answer<PreparedRun> {
    match (outcome, items) {
        (Ok(ClaimOutcome::Claimed), Some(items)) => Answer::ClaimedItems(items),
        (outcome, _) => Answer::Claim(outcome),
    }
}

/// The one loop: handles the core's wake-ups that are due and sleeps until the next, a change
/// of it, or a jump of the wall clock.
async fn timer_loop<C: Coordinator>(engine: Arc<Engine<C>>) {
    let clock = engine.shared.clock;
    let mut clock_jumps = engine.shared.clock_jumps.clone();
    clock_jumps.borrow_and_update();
    loop {
        let next = {
            let mut core = engine.lock();
            core.handle_timeout(clock.now());
            engine.perform_all(&mut core);
            core.poll_timeout()
        };
        let sleep = async {
            match next {
                Some(wake) => {
                    tokio::time::sleep((wake - clock.now()).to_std().unwrap_or_default()).await
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sleep => {}
            _ = engine.wake.notified() => {}
            Ok(()) = clock_jumps.changed() => engine.handle(Input::ClockJumped),
        }
    }
}
