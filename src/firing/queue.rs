//! `overlap = "queue"`: the one tick of a task that waits behind its live run.
//!
//! A tick due while a run of the task is live anywhere is claimed as queued
//! ([`ClaimIntent::Queue`]): the claim consumes it cluster-wide and records it in the fire
//! record, so it survives a leader change, a handoff and a restart. A later tick due while one
//! waits is claimed as dropped ([`ClaimIntent::Drop`]). The waiting tick starts as soon as no
//! run of the task is live: at the end of a run here ([`Firing::runs_changed`]), or, for a run
//! on another node, when the coordinator says its live-run record is gone
//! ([`Action::WaitRunsElsewhere`]). Its start is a claim of its own
//! ([`ClaimIntent::RunQueued`], admitted only while the record names it), then the spawn, at
//! once. A node that starts firing the task reads the queued tick with the fire record
//! ([`Action::ReadQueued`]).
//!
//! The start is not retried on its own: a failed step leaves the tick waiting, and the next
//! end of a run or the next tick's overlap check tries again.

use chrono::{DateTime, Utc};

use super::*;

/// The task's queued tick, as this node knows it, and how far its start is.
pub(super) struct Queued {
    pub(super) tick: DateTime<Utc>,
    stage: Stage,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Behind a live run (or a start that failed).
    Waiting,
    /// Counting the runs on other nodes.
    Counting,
    /// Waiting for the runs on other nodes to end.
    WaitingElsewhere,
    /// Preparing its process.
    Preparing,
    /// Its claim is on its way.
    Claiming,
}

impl Queued {
    pub(super) fn new(tick: DateTime<Utc>) -> Queued {
        Queued {
            tick,
            stage: Stage::Waiting,
        }
    }
}

/// The tick of a queued `instant`: run at once, its fire id and `ZKCRON_SCHEDULED_AT` its own.
fn queued_tick(instant: DateTime<Utc>) -> Tick {
    Tick {
        instant,
        due_at: instant,
        catch_up: false,
    }
}

impl<P> Firing<P> {
    /// The queued tick of `key` read when this node starts firing it; the start goes on with
    /// the fire record `last`.
    pub(super) fn queued_read(
        &mut self,
        key: Key,
        last: Option<DateTime<Utc>>,
        result: Result<Option<DateTime<Utc>>, CoordError>,
    ) {
        let Some(entry) = self.entry_mut(key) else {
            return;
        };
        match result {
            Ok(queued) => entry.queued = queued.map(Queued::new),
            Err(error) => {
                // Read again by the next node to fire the task, or by this one after a restart;
                // meanwhile it does not run here.
                tracing::warn!(target: log::RUNS, task = %entry.spec.name, "cannot read the queued tick ({error}); it waits for the next start");
            }
        }
        self.record_read(key, last);
    }

    /// `key` if it still fires, else the key of the task `name`'s current firing, if any.
    fn current_key(&self, key: Key, name: &str) -> Option<Key> {
        if self.entry(key).is_some() {
            return Some(key);
        }
        self.slots.iter().enumerate().find_map(|(slot, entry)| {
            let entry = entry.as_ref()?;
            (*entry.spec.name == *name).then_some(Key {
                slot,
                generation: entry.generation,
            })
        })
    }

    /// Whether the task of `key` has a queued tick (waiting or starting).
    pub(super) fn has_queued(&self, key: Key) -> bool {
        self.entry(key).is_some_and(|e| e.queued.is_some())
    }

    /// A claim of `tick` as queued was won: it waits for the live run's end (which may have
    /// come while the claim was on its way). A claim of an earlier firing of the task (stopped
    /// since) hands its tick to the task's current firing, which would not know of it else.
    pub(super) fn queued_won(&mut self, key: Key, name: &str, tick: DateTime<Utc>) {
        let Some(key) = self.current_key(key, name) else {
            return;
        };
        let Some(entry) = self.entry_mut(key) else {
            return;
        };
        let fire_id = plan::fire_id(&entry.spec.name, tick);
        tracing::info!(target: log::RUNS, task = %entry.spec.name, %fire_id, "queued: the previous run is still going; it starts when that run ends (overlap = \"queue\")");
        entry.queued = Some(Queued::new(tick));
        self.try_start_queued(key);
    }

    /// Starts the queued tick of `key` if it waits and no run of the task is live here; the
    /// runs on other nodes are counted (and waited for) next.
    pub(super) fn try_start_queued(&mut self, key: Key) {
        let Some(entry) = self.entry(key) else {
            return;
        };
        if !entry
            .queued
            .as_ref()
            .is_some_and(|q| q.stage == Stage::Waiting)
            || !self.may_fire(&self.leadership, &entry.spec.name)
        {
            return;
        }
        let spec = entry.spec.clone();
        if self.runs.count(&spec.name) + self.run_claims_on_their_way(key, &spec) > 0 {
            return;
        }
        self.set_stage(key, Stage::Counting);
        let call = self.call(Call::QueuedElsewhere(key));
        self.out.push_back(Action::CountRunsElsewhere {
            call,
            task: spec.name.clone(),
        });
    }

    fn set_stage(&mut self, key: Key, stage: Stage) {
        if let Some(queued) = self.entry_mut(key).and_then(|e| e.queued.as_mut()) {
            queued.stage = stage;
        }
    }

    fn in_stage(&self, key: Key, stage: Stage) -> Option<DateTime<Utc>> {
        let queued = self.entry(key)?.queued.as_ref()?;
        (queued.stage == stage).then_some(queued.tick)
    }

    /// The runs on other nodes were counted: none, or wait for their end.
    pub(super) fn queued_counted(&mut self, key: Key, result: Result<usize, CoordError>) {
        if self.in_stage(key, Stage::Counting).is_none() {
            return;
        }
        let task = self.entry(key).expect("staged").spec.name.clone();
        match result {
            Ok(0) => self.prepare_queued(key),
            Ok(runs) => {
                tracing::info!(target: log::RUNS, task = %task, runs, "the queued tick waits for the runs on other nodes to end");
                self.set_stage(key, Stage::WaitingElsewhere);
                let call = self.call(Call::QueuedWait(key));
                self.out.push_back(Action::WaitRunsElsewhere { call, task });
            }
            Err(error) => {
                tracing::warn!(target: log::RUNS, task = %task, "cannot read runs on other nodes ({error}); the queued tick waits");
                self.set_stage(key, Stage::Waiting);
            }
        }
    }

    /// The runs on other nodes ended (or the wait failed).
    pub(super) fn queued_runs_ended(&mut self, key: Key, result: Result<(), CoordError>) {
        if self.in_stage(key, Stage::WaitingElsewhere).is_none() {
            return;
        }
        match result {
            Ok(()) => {
                // A run may have started here meanwhile (it cannot: the task's ticks are
                // dropped while one waits), so the count here is asked again.
                self.set_stage(key, Stage::Waiting);
                self.try_start_queued(key);
            }
            Err(error) => {
                let task = &self.entry(key).expect("staged").spec.name;
                tracing::warn!(target: log::RUNS, task = %task, "cannot wait for the runs on other nodes ({error}); the queued tick waits");
                self.set_stage(key, Stage::Waiting);
            }
        }
    }

    fn prepare_queued(&mut self, key: Key) {
        let Some(tick) = self.in_stage(key, Stage::Counting) else {
            return;
        };
        self.set_stage(key, Stage::Preparing);
        let spec = self.entry(key).expect("staged").spec.clone();
        let fire_id = plan::fire_id(&spec.name, tick);
        self.prepare(Call::QueuedPrepared(key), spec, queued_tick(tick), fire_id);
    }

    /// The queued tick's process is prepared: its claim.
    pub(super) fn queued_prepared(&mut self, key: Key, prepared: P) {
        let Some(tick) = self.in_stage(key, Stage::Preparing) else {
            // Stopped meanwhile: not claimed; the next node to fire the task starts it.
            return;
        };
        self.set_stage(key, Stage::Claiming);
        let task = self.entry(key).expect("staged").spec.name.clone();
        let call = self.call(Call::QueuedClaim {
            key,
            task: task.clone(),
            tick: queued_tick(tick),
            prepared,
        });
        self.out.push_back(Action::Claim {
            call,
            task,
            tick,
            intent: ClaimIntent::RunQueued,
            ticks: Vec::new(),
        });
    }

    /// The queued tick's claim was answered: run it (also when the task was stopped since: a
    /// won claim is honoured), or forget it.
    pub(super) fn queued_claimed(
        &mut self,
        key: Key,
        task: Arc<str>,
        tick: Tick,
        prepared: P,
        result: Result<ClaimOutcome, CoordError>,
    ) {
        let fire_id = plan::fire_id(&task, tick.instant);
        match result {
            Ok(ClaimOutcome::Claimed) => {
                if let Some(entry) = self.entry_mut(key) {
                    entry.queued = None;
                }
                tracing::info!(target: log::RUNS, task = %task, %fire_id, "starting the queued tick: the run before it ended (overlap = \"queue\")");
                let retries = self.retries_of(key);
                self.spawn(SpawnOf {
                    task,
                    tick,
                    fire_id,
                    prepared,
                    kind: RunKind::Scheduled,
                    retries,
                });
            }
            Ok(outcome) => {
                if let Some(entry) = self.entry_mut(key) {
                    entry.queued = None;
                }
                tracing::info!(target: log::RUNS, task = %task, %fire_id, ?outcome, "queued tick not run here: its claim was refused");
            }
            Err(error) => {
                self.set_stage(key, Stage::Waiting);
                tracing::warn!(target: log::RUNS, task = %task, %fire_id, "queued tick not started: its claim failed ({error}); it waits");
            }
        }
    }
}
