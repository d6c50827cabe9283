//! The start of a task's firing: its fire record (with `overlap = "queue"`, its queued tick
//! next), with `on_node_loss = "rerun"` the rerun of a tick whose node died mid-run (at its
//! instant, never before), then the planner.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::*;
use crate::task::{CatchUpPolicy, NodeLossPolicy, OverlapPolicy};

impl<P> Firing<P> {
    pub(super) fn fire_record(
        &mut self,
        key: Key,
        result: Result<Option<DateTime<Utc>>, CoordError>,
    ) {
        let now = self.now;
        let bugs = self.config.bugs;
        let Some(entry) = self.entry_mut(key) else {
            return;
        };
        let State::Starting(Start::Reading { delay }) = &mut entry.state else {
            return;
        };
        match result {
            Ok(last) if bugs.overlap(&entry.spec) == OverlapPolicy::Queue => {
                entry.state = State::Starting(Start::ReadingQueued);
                let task = entry.spec.name.clone();
                let call = self.call(Call::Queued(key, last));
                self.out.push_back(Action::ReadQueued { call, task });
            }
            Ok(last) => self.record_read(key, last),
            Err(error) => {
                tracing::error!(target: log::TIMERS, task = %entry.spec.name, "cannot read the fire record ({error}); retrying");
                let wait = *delay;
                *delay = (*delay * 2).min(READ_RETRY_MAX);
                self.wake_at(key, now + wait);
            }
        }
    }

    /// The fire record (and a queued tick) read: with `on_node_loss = "rerun"` the orphan check,
    /// then the planner.
    pub(super) fn record_read(&mut self, key: Key, last: Option<DateTime<Utc>>) {
        let Some(entry) = self.entry_mut(key) else {
            return;
        };
        match last {
            last if entry.spec.on_node_loss == NodeLossPolicy::Rerun => {
                entry.state = State::Starting(Start::Orphan {
                    last,
                    waiting: None,
                });
                let task = entry.spec.name.clone();
                let call = self.call(Call::Orphan(key));
                self.out.push_back(Action::ReadOrphan { call, task });
            }
            last => self.begin_planning(key, last),
        }
    }

    pub(super) fn orphan(&mut self, key: Key, result: Result<Option<DateTime<Utc>>, CoordError>) {
        let now = self.now;
        let Some(entry) = self.entry_mut(key) else {
            return;
        };
        let State::Starting(Start::Orphan { last, waiting }) = &mut entry.state else {
            return;
        };
        let last = *last;
        match result {
            Ok(Some(orphan)) => {
                // A tick claimed ahead by a node that died before its instant is rerun at its
                // instant, never before.
                if orphan > now {
                    *waiting = Some(orphan);
                    self.wake_at(key, orphan);
                } else {
                    self.prepare_orphan(key, orphan);
                }
            }
            Ok(None) => self.begin_planning(key, last),
            Err(error) => {
                tracing::warn!(target: log::RUNS, task = %entry.spec.name, "cannot check for a run lost with its node ({error})");
                self.begin_planning(key, last);
            }
        }
    }

    pub(super) fn prepare_orphan(&mut self, key: Key, orphan: DateTime<Utc>) {
        let Some(entry) = self.entry(key) else {
            return;
        };
        let spec = entry.spec.clone();
        let tick = Tick {
            instant: orphan,
            due_at: orphan,
            catch_up: true,
        };
        let fire_id = plan::fire_id(&spec.name, orphan);
        self.prepare(Call::OrphanPrepared(key, tick), spec, tick, fire_id);
    }

    pub(super) fn orphan_prepared(&mut self, key: Key, tick: Tick, prepared: P) {
        let Some(entry) = self.entry(key) else {
            // Stopped meanwhile: not reclaimed.
            return;
        };
        let task = entry.spec.name.clone();
        let call = self.call(Call::Reclaim {
            key,
            task: task.clone(),
            tick,
            prepared,
        });
        self.out.push_back(Action::Reclaim {
            call,
            task,
            tick: tick.instant,
        });
    }

    pub(super) fn reclaimed(
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
                tracing::warn!(target: log::RUNS,
                    task = %task,
                    %fire_id,
                    "rerunning a tick whose node was lost mid-run (on_node_loss = \"rerun\")"
                );
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
                tracing::info!(target: log::RUNS, task = %task, %fire_id, ?outcome, "lost run not rerun: the reclaim was refused")
            }
            Err(error) => {
                tracing::warn!(target: log::RUNS, task = %task, %fire_id, "lost run not rerun: reclaim failed ({error})")
            }
        }
        if let Some(Entry {
            state: State::Starting(Start::Orphan { last, .. }),
            ..
        }) = self.entry(key)
        {
            let last = *last;
            self.begin_planning(key, last);
        }
    }

    /// A run claimed while the task of `key` was stopped gets no retries.
    pub(super) fn retries_of(&self, key: Key) -> Retries {
        match self.entry(key) {
            Some(_) => Retries::Allowed,
            None => Retries::Cancelled,
        }
    }

    /// The start is done: the planner starts from the fire record `last`.
    fn begin_planning(&mut self, key: Key, last: Option<DateTime<Utc>>) {
        let now = self.now;
        let bugs = self.config.bugs;
        let Some(entry) = self.entry_mut(key) else {
            return;
        };
        let mut rules = plan::PlanRules::from_spec(&entry.spec);
        if bugs.ignore_starting_deadline {
            rules.starting_deadline = None;
        }
        if bugs.catch_up_skip_tasks && rules.catch_up == CatchUpPolicy::Skip {
            rules.catch_up = CatchUpPolicy::All;
        }
        let last = if bugs.ignore_fire_record { None } else { last };
        let planner = TickPlanner::start(rules, last, now);
        tracing::debug!(target: log::TIMERS, task = %entry.spec.name, next = ?planner.armed().map(|t| t.due_at), "firing this task");
        entry.state = State::Active(Box::new(Activation {
            planner,
            queue: VecDeque::new(),
            ahead: None,
            doing: Doing::Ready,
        }));
        self.end_start();
        self.try_start_queued(key);
        self.advance(key);
    }
}
