//! The rules of one task's ticks once started (`start.rs`): the planner's steps, and one tick's
//! fire: the overlap check, the preparation, the replace (or the queue, `queue.rs`), the claim
//! and its retries.
//!
//! A tick claimed ahead is decided at the claim, as every tick is: the overlap check comes
//! first. It is made ahead only when the answer cannot change by the instant: with `overlap =
//! "allow"`, or when no run of the task is live anywhere (only the leader starts runs of a
//! task, and one task's ticks fire one after another). When a run is live and the policy is
//! `skip`, `replace` or `queue`, whether it still is at the instant decides, so the check and the claim
//! wait for the instant. The claim comes after the overlap check so that a tick skipped for
//! overlap is still consumed cluster-wide (no later leader catches it up), and after everything
//! the spawn needs is resolved and the replaced run has ended, so that a node that dies after a
//! won claim has at most the spawn left undone. No claim is sent once the task is stopped.

use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};

use super::*;
use crate::plan::ledger::{self, Reason, TickEntry};
use crate::plan::{OverlapAction, Step};
use crate::task::OverlapPolicy;

/// A tick being fired.
pub(super) struct Fire<P> {
    tick: Tick,
    pub(super) fire_id: String,
    /// Live runs of the task here and on other nodes, as last counted.
    local: usize,
    elsewhere: usize,
    /// The overlap check was deferred to the tick's instant once already.
    waited: bool,
    action: OverlapAction,
    /// The process prepared ahead of the instant, then the one to spawn.
    prepared: Option<P>,
    stage: Stage,
    /// The wait before the next claim if this one fails.
    delay: TimeDelta,
}

enum Stage {
    /// Counting the runs elsewhere.
    Counting,
    /// A run is live and the tick is not due: the check is made again at the instant.
    WaitInstant,
    /// Preparing the process.
    Preparing,
    /// Waiting for the replaced runs to end.
    Replacing(Vec<RunId>),
    /// Waiting to claim again after a failed claim.
    Backoff,
    /// Waiting to count the runs elsewhere again after a failed count.
    Recount,
}

/// A claim on its way, with all it needs when answered (even after the task was stopped).
pub(super) struct Claiming<P> {
    key: Key,
    spec: Arc<TaskSpec>,
    fire: Fire<P>,
    /// The ticks not run that the claim carries (given back if it fails).
    carried: Vec<TickEntry>,
}

impl<P> Firing<P> {
    // ---- the planner's steps ----

    /// Moves the activation of `key` on while it is ready: the next queued tick, or the
    /// planner's next step.
    pub(super) fn advance(&mut self, key: Key) {
        loop {
            let now = self.now;
            let Some(entry) = self.entry_mut(key) else {
                return;
            };
            let State::Active(activation) = &mut entry.state else {
                return;
            };
            if !matches!(activation.doing, Doing::Ready) {
                return;
            }
            if let Some(tick) = activation.queue.pop_front() {
                self.begin_tick(key, tick);
                continue;
            }
            let step = activation.planner.poll(now);
            self.step(key, step);
        }
    }

    /// Acts on the planner's `step`.
    fn step(&mut self, key: Key, step: Step) {
        let now = self.now;
        let entry = self.entry_mut(key).expect("advanced");
        let State::Active(activation) = &mut entry.state else {
            unreachable!("advanced")
        };
        match step {
            Step::Fire { ticks, skipped } => {
                if !skipped.is_empty() {
                    let count: u64 = skipped.iter().map(|e| e.count).sum();
                    tracing::warn!(target: log::TIMERS,
                        task = %entry.spec.name,
                        skipped = count,
                        reason = skipped[0].reason.code(),
                        catch_up = ?entry.spec.catch_up,
                        "missed ticks not run (catch_up / starting_deadline); `zkcron history --ticks` lists them"
                    );
                }
                activation.queue.extend(ticks);
                self.note(key, skipped);
            }
            Step::SleepUntil(due) if due - now > PREPARE_AHEAD + SLACK => {
                // Nothing to do for a while: the heap times it.
                self.sleep(key, due - PREPARE_AHEAD);
            }
            Step::SleepUntil(due) => {
                let armed = activation.planner.armed();
                if let Some(tick) = armed
                    && activation.ahead.as_ref().is_none_or(|(t, _)| *t != tick)
                {
                    activation.doing = Doing::PreparingAhead;
                    let spec = entry.spec.clone();
                    let fire_id = plan::fire_id(&spec.name, tick.instant);
                    self.prepare(Call::Prepared(key), spec, tick, fire_id);
                } else if due - now > plan::CLAIM_AHEAD {
                    activation.doing = Doing::WaitClaimAhead;
                    self.wake_at(key, due - plan::CLAIM_AHEAD);
                } else {
                    // Within the claim lead: the planner is asked as of the tick's due time,
                    // so it hands the armed tick out now; it is claimed now and spawned at
                    // `due`, so that only the spawn is left for the instant.
                    let step = activation.planner.poll(due);
                    self.step(key, step);
                }
            }
            Step::Held { record, until } => self.held(key, record, until),
            Step::Finished => {
                match entry.spec.schedule.window().until {
                    Some(until) => tracing::info!(target: log::TIMERS,
                        task = %entry.spec.name,
                        active_until = %until.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
                        "the task's active window has no tick left (active_until): it fires no more"
                    ),
                    None => {
                        tracing::info!(target: log::TIMERS, task = %entry.spec.name, "the schedule has no further tick")
                    }
                }
                entry.state = State::Finished;
                // No claim is left to carry the ticks not run (a one-shot missed and not
                // caught up): they go now.
                self.write_noted(key);
            }
        }
    }

    /// The task is held by a fire record ahead of the clock. It is never rewound here: ticks up
    /// to the record may have run. Says so loudly, then sleeps (waking hourly to say it again)
    /// until the record's next tick.
    fn held(&mut self, key: Key, record: DateTime<Utc>, until: DateTime<Utc>) {
        let now = self.now;
        let reset_flags = self.config.reset_flags.clone();
        let entry = self.entry_mut(key).expect("advanced");
        if entry
            .held_reported
            .is_none_or(|at| now - at >= HELD_REPORT_INTERVAL)
        {
            let name = &entry.spec.name;
            let fix = plan::held_fix(name, reset_flags.as_deref());
            tracing::error!(target: log::TIMERS,
                task = %name,
                %record,
                "{}",
                plan::held_report(name, record, until, now, &fix)
            );
            entry.held_reported = Some(now);
        }
        self.sleep(key, until.min(now + HELD_REPORT_INTERVAL).max(now));
    }

    /// The planner of `key` sleeps in the heap until `wake`.
    fn sleep(&mut self, key: Key, wake: DateTime<Utc>) {
        let entry = self.entry_mut(key).expect("advanced");
        let State::Active(activation) = std::mem::replace(&mut entry.state, State::Finished) else {
            unreachable!("advanced")
        };
        entry.state = State::Idle(activation.planner.into_state());
        self.wake_at(key, wake);
    }

    /// The armed tick's process (or a fired tick's) is prepared.
    pub(super) fn prepared(&mut self, key: Key, prepared: P) {
        let Some(Entry {
            state: State::Active(activation),
            ..
        }) = self.entry_mut(key)
        else {
            return;
        };
        match &mut activation.doing {
            Doing::PreparingAhead => {
                let tick = activation.planner.armed().expect("armed when prepared");
                activation.ahead = Some((tick, prepared));
                activation.doing = Doing::Ready;
                self.advance(key);
            }
            Doing::Fire(fire) if matches!(fire.stage, Stage::Preparing) => {
                fire.prepared = Some(prepared);
                self.replace(key);
            }
            _ => {}
        }
    }

    /// Fires `tick` unless it is caught up and must wait for the task's runs to end.
    fn begin_tick(&mut self, key: Key, tick: Tick) {
        let entry = self.entry(key).expect("advanced");
        // Caught-up ticks run one after another unless runs may overlap: with `skip` they
        // would skip each other, with `replace` kill each other.
        if tick.catch_up
            && self.config.bugs.overlap(&entry.spec) != OverlapPolicy::Allow
            && self.runs.count(&entry.spec.name) > 0
        {
            self.doing(key, Doing::WaitIdle(tick));
            return;
        }
        self.fire(key, tick);
    }

    fn doing(&mut self, key: Key, doing: Doing<P>) {
        if let Some(Entry {
            state: State::Active(activation),
            ..
        }) = self.entry_mut(key)
        {
            activation.doing = doing;
        }
    }

    /// A run of the task of `key` ended (`run`).
    pub(super) fn runs_changed(&mut self, key: Key, run: RunId) {
        self.try_start_queued(key);
        let Some(entry) = self.entry(key) else {
            return;
        };
        let idle = self.runs.count(&entry.spec.name) == 0;
        let entry = self.entry_mut(key).expect("checked");
        let State::Active(activation) = &mut entry.state else {
            return;
        };
        match &mut activation.doing {
            Doing::WaitIdle(tick) if idle => {
                let tick = *tick;
                self.fire(key, tick);
                self.advance(key);
            }
            Doing::Fire(fire) => {
                if let Stage::Replacing(waiting) = &mut fire.stage {
                    waiting.retain(|r| *r != run);
                    if waiting.is_empty() {
                        self.claim(key);
                    }
                }
            }
            _ => {}
        }
    }

    // ---- one tick ----

    /// Starts firing `tick`: the overlap check first. A caught-up tick that waited (behind
    /// the task's runs, or the ticks caught up before it) until it is older than the task's
    /// `starting_deadline` is dropped, as the planner drops such a tick.
    fn fire(&mut self, key: Key, tick: Tick) {
        if tick.catch_up && self.past_starting_deadline(key, tick) {
            let entry = self.entry_mut(key).expect("advanced");
            let fire_id = plan::fire_id(&entry.spec.name, tick.instant);
            tracing::warn!(target: log::RUNS, task = %entry.spec.name, %fire_id, "missed tick not run: it waited past its starting_deadline");
            if let State::Active(activation) = &mut entry.state {
                activation.doing = Doing::Ready;
            }
            self.note(key, [TickEntry::one(tick.instant, Reason::Deadline)]);
            return;
        }
        let may_fire = {
            let entry = self.entry(key).expect("advanced");
            self.may_fire(&self.leadership, &entry.spec.name)
        };
        let entry = self.entry_mut(key).expect("advanced");
        let fire_id = plan::fire_id(&entry.spec.name, tick.instant);
        let State::Active(activation) = &mut entry.state else {
            unreachable!("advanced")
        };
        let prepared = activation
            .ahead
            .take()
            .filter(|(armed, _)| *armed == tick)
            .map(|(_, prepared)| prepared);
        if !may_fire {
            tracing::info!(target: log::RUNS, task = %entry.spec.name, %fire_id, "not leading this task any more; tick left to the leader");
            activation.doing = Doing::Ready;
            return;
        }
        activation.doing = Doing::Fire(Box::new(Fire {
            tick,
            fire_id,
            local: 0,
            elsewhere: 0,
            waited: false,
            action: OverlapAction::Start,
            prepared,
            stage: Stage::Counting,
            delay: FIRST_RETRY,
        }));
        self.count_runs(key);
    }

    /// Whether `tick` of the task of `key` is older than its `starting_deadline` now.
    fn past_starting_deadline(&self, key: Key, tick: Tick) -> bool {
        let Some(entry) = self.entry(key) else {
            return false;
        };
        match entry.spec.extras.starting_deadline {
            Some(deadline) if !self.config.bugs.ignore_starting_deadline => {
                TimeDelta::from_std(deadline)
                    .is_ok_and(|deadline| self.now - tick.instant > deadline)
            }
            _ => false,
        }
    }

    /// Counts the task's live runs here and (for `overlap`, when none is here) elsewhere.
    fn count_runs(&mut self, key: Key) {
        let local = match self.entry(key) {
            Some(entry) => {
                self.runs.count(&entry.spec.name) + self.run_claims_on_their_way(key, &entry.spec)
            }
            None => return,
        };
        let bugs = self.config.bugs;
        // A queued tick counts as a live run: a tick due meanwhile is dropped. So does a claim
        // to queue one still on its way from an earlier firing of the task.
        let queued = self.has_queued(key) || self.queue_claims_on_their_way(key);
        let local = local + usize::from(queued);
        let (spec, fire) = self.firing_mut(key);
        fire.local = local;
        fire.elsewhere = 0;
        fire.stage = Stage::Counting;
        if bugs.overlap(&spec) == OverlapPolicy::Allow || local > 0 {
            self.overlap_check(key);
            return;
        }
        let call = self.call(Call::RunsElsewhere(key));
        self.out.push_back(Action::CountRunsElsewhere {
            call,
            task: spec.name.clone(),
        });
    }

    /// With `overlap` other than `allow`: the claims to run a tick of the task still on their
    /// way from an earlier firing of it (stopped since, as when the lease went and came back).
    /// Each starts a run when won, so it counts as a live run here.
    pub(super) fn run_claims_on_their_way(&self, key: Key, spec: &TaskSpec) -> usize {
        if self.config.bugs.overlap(spec) == OverlapPolicy::Allow {
            return 0;
        }
        self.calls
            .values()
            .filter(|call| match call {
                Call::Claim(claiming) => {
                    claiming.key != key
                        && claiming.spec.name == spec.name
                        && claiming.fire.prepared.is_some()
                }
                // A queued tick's start from before the task was stopped: honoured if won.
                Call::QueuedClaim { key: k, task, .. } => *k != key && **task == *spec.name,
                _ => false,
            })
            .count()
    }

    /// Whether a claim to queue a tick of the task of `key` is still on its way from an earlier
    /// firing of it (stopped since, as when its leadership was published again): when won, its
    /// tick waits (it reaches this firing, [`Firing::queued_won`]), so at most one may wait and
    /// a tick due meanwhile is dropped (simulation seeds 29183, 62413, 67271).
    pub(super) fn queue_claims_on_their_way(&self, key: Key) -> bool {
        let Some(name) = self.entry(key).map(|e| e.spec.name.clone()) else {
            return false;
        };
        self.calls.values().any(|call| match call {
            Call::Claim(claiming) => {
                claiming.key != key
                    && claiming.spec.name == name
                    && claiming.fire.prepared.is_none()
                    && claiming.fire.action == OverlapAction::Queue
            }
            _ => false,
        })
    }

    /// The spec and the fire of the firing task `key`.
    fn firing_mut(&mut self, key: Key) -> (Arc<TaskSpec>, &mut Fire<P>) {
        let entry = self.entry_mut(key).expect("firing");
        let spec = entry.spec.clone();
        let State::Active(activation) = &mut entry.state else {
            unreachable!("firing")
        };
        let Doing::Fire(fire) = &mut activation.doing else {
            unreachable!("firing")
        };
        (spec, fire)
    }

    /// Whether `key` is firing a tick in `stage`.
    fn is_firing(&self, key: Key, stage: impl Fn(&Stage) -> bool) -> bool {
        matches!(
            self.entry(key).map(|e| &e.state),
            Some(State::Active(activation))
                if matches!(&activation.doing, Doing::Fire(fire) if stage(&fire.stage))
        )
    }

    pub(super) fn counted_elsewhere(&mut self, key: Key, result: Result<usize, CoordError>) {
        if !self.is_firing(key, |s| matches!(s, Stage::Counting)) {
            return;
        }
        let (spec, fire) = self.firing_mut(key);
        match result {
            Ok(n) => fire.elsewhere = n,
            Err(error) => {
                // Taken as none, a run live elsewhere would get a second one beside it: count
                // again after a growing delay (the claim checks the starting deadline).
                let fire_id = &fire.fire_id;
                tracing::warn!(target: log::RUNS, task = %spec.name, %fire_id, "cannot read runs on other nodes ({error}); counting again");
                let wait = fire.delay;
                fire.delay = (fire.delay * 2).min(CLAIM_RETRY_MAX);
                fire.stage = Stage::Recount;
                let at = self.now + wait;
                self.wake_at(key, at);
                return;
            }
        }
        self.overlap_check(key);
    }

    /// Decides the tick's overlap action from the counts, or defers it to the instant.
    fn overlap_check(&mut self, key: Key) {
        let now = self.now;
        let overlap = self
            .config
            .bugs
            .overlap(&self.entry(key).expect("firing").spec);
        let (spec, fire) = self.firing_mut(key);
        let running = fire.local + fire.elsewhere;
        if overlap != OverlapPolicy::Allow && running > 0 && !fire.waited && fire.tick.due_at > now
        {
            // A run is live and the tick is not due yet: decide at the instant.
            fire.waited = true;
            fire.stage = Stage::WaitInstant;
            let due = fire.tick.due_at;
            self.wake_at(key, due);
            return;
        }
        fire.action = plan::overlap_action(overlap, running);
        match fire.action {
            OverlapAction::Skip => {
                fire.prepared = None;
                self.claim(key);
            }
            OverlapAction::Queue | OverlapAction::Drop => {
                fire.prepared = None;
                let queued = self.has_queued(key) || self.queue_claims_on_their_way(key);
                if queued && !self.config.bugs.queue_every_tick {
                    let (_, fire) = self.firing_mut(key);
                    fire.action = OverlapAction::Drop;
                    // Still waiting with no run left here (a start that failed): again now.
                    self.try_start_queued(key);
                }
                self.claim(key);
            }
            OverlapAction::Start | OverlapAction::ReplaceThenStart if fire.prepared.is_some() => {
                self.replace(key)
            }
            OverlapAction::Start | OverlapAction::ReplaceThenStart => {
                fire.stage = Stage::Preparing;
                let (tick, fire_id) = (fire.tick, fire.fire_id.clone());
                self.prepare(Call::Prepared(key), spec, tick, fire_id);
            }
        }
    }

    /// With `overlap = "replace"`, stops the live runs and waits for their end; then claims.
    ///
    /// Stopped before the claim, not after it: waiting for the old run (up to its
    /// `kill_grace`) between a won claim and the spawn would leave the tick claimed but not
    /// started for that long, and lost if the node died meanwhile. If the claim then fails,
    /// the old run was stopped all the same; whoever leads the task next catches the tick up.
    fn replace(&mut self, key: Key) {
        let (spec, fire) = self.firing_mut(key);
        if fire.action != OverlapAction::ReplaceThenStart {
            self.claim(key);
            return;
        }
        let fire_id = &fire.fire_id;
        tracing::info!(target: log::RUNS, task = %spec.name, %fire_id, "replacing the running run (overlap = \"replace\")");
        let runs = self.runs.of(&spec.name);
        if runs.is_empty() {
            self.claim(key);
            return;
        }
        let (_, fire) = self.firing_mut(key);
        fire.stage = Stage::Replacing(runs.clone());
        self.out.push_back(Action::StopRuns {
            runs,
            how: StopHow::Terminate,
        });
    }

    /// A wake-up of a firing task: the instant came, or a count's or a claim's backoff is over.
    pub(super) fn fire_woke(&mut self, key: Key) {
        if self.is_firing(key, |s| matches!(s, Stage::WaitInstant | Stage::Recount)) {
            self.count_runs(key);
        } else if self.is_firing(key, |s| matches!(s, Stage::Backoff)) {
            self.claim(key);
        }
    }

    /// Sends the tick's claim (as skipped, or to run).
    fn claim(&mut self, key: Key) {
        let tick = match self.entry(key).map(|e| &e.state) {
            Some(State::Active(activation)) => match &activation.doing {
                Doing::Fire(fire) => fire.tick,
                _ => unreachable!("firing"),
            },
            _ => unreachable!("firing"),
        };
        // The tick may have grown older than its deadline since it was fired: behind a count
        // of runs elsewhere or a claim's backoff, or in a process stopped meanwhile.
        let late = self.past_starting_deadline(key, tick);
        let entry = self.entry_mut(key).expect("firing");
        let spec = entry.spec.clone();
        let State::Active(activation) = &mut entry.state else {
            unreachable!("firing")
        };
        if late {
            let fire_id = plan::fire_id(&spec.name, tick.instant);
            tracing::warn!(target: log::RUNS, task = %spec.name, %fire_id, "tick not run: it grew older than its starting_deadline before its claim");
            activation.doing = Doing::Ready;
            self.note(key, [TickEntry::one(tick.instant, Reason::Deadline)]);
            self.advance(key);
            return;
        }
        let Doing::Fire(fire) = std::mem::replace(&mut activation.doing, Doing::Claiming) else {
            unreachable!("firing")
        };
        let intent = match (&fire.prepared, fire.action) {
            (Some(_), _) => ClaimIntent::Run,
            (None, OverlapAction::Queue) => ClaimIntent::Queue,
            (None, OverlapAction::Drop) => ClaimIntent::Drop,
            (None, _) => ClaimIntent::Skip,
        };
        let (task, tick) = (spec.name.clone(), fire.tick.instant);
        let carried = self.take_noted(key);
        let mut ticks = carried.clone();
        match intent {
            _ if self.config.bugs.forget_ledger => {}
            ClaimIntent::Skip => ledger::push(&mut ticks, TickEntry::one(tick, Reason::Overlap)),
            ClaimIntent::Drop => ledger::push(&mut ticks, TickEntry::one(tick, Reason::QueueFull)),
            _ => {}
        }
        let call = self.call(Call::Claim(Box::new(Claiming {
            key,
            spec,
            fire: *fire,
            carried,
        })));
        self.out.push_back(Action::Claim {
            call,
            task,
            tick,
            intent,
            ticks,
        });
    }

    /// The claim's answer: spawn, skip, give up, or retry while the task may still be fired.
    pub(super) fn claimed(
        &mut self,
        claiming: Claiming<P>,
        result: Result<ClaimOutcome, CoordError>,
    ) {
        let Claiming {
            key,
            spec,
            mut fire,
            carried,
        } = claiming;
        let name = &spec.name;
        let fire_id = fire.fire_id.clone();
        let current = self.entry(key).is_some();
        match result {
            Ok(ClaimOutcome::Claimed) => self.won(key, name, fire),
            Ok(ClaimOutcome::AlreadyClaimed { record }) => {
                tracing::info!(target: log::RUNS, task = %name, %fire_id, %record, "tick already claimed; not running it");
            }
            Ok(ClaimOutcome::NotLeader) => {
                tracing::info!(target: log::RUNS, task = %name, %fire_id, "claim refused: not the leader; not running it");
            }
            Ok(ClaimOutcome::Done { runs }) => {
                tracing::info!(target: log::RUNS, task = %name, %fire_id, runs, "the task ran its max_runs scheduled ticks: it is done and fires no more");
                if current {
                    // No claim is left to carry the ticks not run it carried: they go now.
                    self.renote(key, carried);
                    self.write_noted(key);
                    if let Some(entry) = self.entry_mut(key) {
                        entry.state = State::Finished;
                    }
                }
                return;
            }
            Err(error) if !self.may_fire(&self.leadership, name) => {
                tracing::warn!(target: log::RUNS, task = %name, %fire_id, "claim failed ({error}) and this node no longer fires the task; the next leader catches the tick up");
            }
            Err(error) => {
                // Dropping the tick would lose it: the planner has moved past it. When the node
                // pauses or loses the task, the task is stopped and whoever leads next catches
                // the tick up from the fire record.
                tracing::warn!(target: log::RUNS, task = %name, %fire_id, "claim failed ({error}); retrying");
                if !current {
                    tracing::info!(target: log::RUNS, task = %name, %fire_id, "tick not claimed: this task's loop is stopping");
                    return;
                }
                self.renote(key, carried);
                let wait = fire.delay;
                fire.delay = (fire.delay * 2).min(CLAIM_RETRY_MAX);
                fire.stage = Stage::Backoff;
                self.doing(key, Doing::Fire(Box::new(fire)));
                let at = self.now + wait;
                self.wake_at(key, at);
                return;
            }
        }
        if current {
            self.doing(key, Doing::Ready);
            self.advance(key);
        }
    }

    /// The tick's claim was won: its run starts (at its due time), or it is skipped.
    fn won(&mut self, key: Key, name: &Arc<str>, mut fire: Fire<P>) {
        let fire_id = fire.fire_id.clone();
        if fire.tick.due_at > self.now {
            tracing::debug!(target: log::RUNS, task = %name, %fire_id, due_at = %fire.tick.due_at, "claimed ahead of its instant");
        }
        match fire.prepared.take() {
            None if fire.action == OverlapAction::Queue => {
                self.queued_won(key, name, fire.tick.instant)
            }
            None if fire.action == OverlapAction::Drop => tracing::warn!(target: log::RUNS,
                task = %name,
                %fire_id,
                "dropped: a tick is queued already behind the running run (overlap = \"queue\")"
            ),
            // Claimed as skipped: no later leader catches the tick up. A pool's items are
            // named: each of them is skipped for the tick.
            None => tracing::warn!(target: log::RUNS,
                task = %name,
                %fire_id,
                running_here = fire.local,
                running_elsewhere = fire.elsewhere,
                work_items = self.skipped_items(key),
                "skipped: the previous run is still going (overlap = \"skip\")"
            ),
            Some(prepared) => {
                let retries = self.retries_of(key);
                self.spawn(SpawnOf {
                    task: name.clone(),
                    tick: fire.tick,
                    fire_id,
                    prepared,
                    kind: RunKind::Scheduled,
                    retries,
                });
            }
        }
    }

    /// The work items a skipped tick of the task of `key` named: those its claim won, or
    /// every item of the pool; `None` for a task without work items.
    fn skipped_items(&self, key: Key) -> Option<String> {
        if let Some(items) = &self.claimed_items {
            return Some(items.join(","));
        }
        let items = self.entry(key)?.spec.extras.run_on.items()?;
        Some(items.join(","))
    }
}
