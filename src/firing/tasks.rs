//! Which tasks are fired: reloads, leadership (leases, the node's pause, the operator's pause
//! of a task, session losses) and manual runs.
//!
//! Manual runs (`zkcron trigger`): each pending trigger listed in [`Leadership::triggers`] of a
//! loaded, enabled task this node leads is prepared, claimed with
//! [`Action::ClaimManual`] (retried while the node leads the task) and, only when `Claimed`,
//! run once: fire id = the trigger's name, its tick = when it was requested. A manual run
//! ignores `overlap` (it is kept apart, under `<task>@manual`, so a scheduled tick does not
//! count it) and `jitter`, moves no fire record, and is never caught up or rerun. A paused
//! task's trigger runs: the operator asked for it. A chained run (`after`) of a paused task
//! does not: it is claimed as any manual run, then skipped ([`Action::SkipChained`]), as a
//! paused task's ticks are.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};

use super::*;
use crate::coord::record;

/// The manual runs being claimed, and those claimed (until the leadership no longer lists
/// them).
pub(super) struct Manual<P> {
    claiming: BTreeMap<String, ManualRun<P>>,
    claimed: BTreeSet<String>,
    /// The backfill tick in flight (claiming or running) per task: its fire id.
    pub(super) backfilling: BTreeMap<String, String>,
    /// Backfill fire ids the backend refused since the leadership last changed.
    pub(super) refused: BTreeSet<String>,
    /// The newest tick this node claimed of each backfill request (a listing may not show it
    /// yet).
    pub(super) backfill_claimed: BTreeMap<String, DateTime<Utc>>,
}

/// What a manual run's won claim starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ManualStart {
    /// The run.
    Run,
    /// Nothing: a chained run of a paused task, skipped (its end recorded as such).
    SkipPaused,
}

impl<P> Default for Manual<P> {
    fn default() -> Self {
        Manual {
            claiming: BTreeMap::new(),
            claimed: BTreeSet::new(),
            backfilling: BTreeMap::new(),
            refused: BTreeSet::new(),
            backfill_claimed: BTreeMap::new(),
        }
    }
}

struct ManualRun<P> {
    task: Arc<str>,
    trigger: Trigger,
    /// [`RunKind::Manual`] or [`RunKind::Backfill`].
    kind: RunKind,
    /// What its won claim starts.
    start: ManualStart,
    tick: Tick,
    /// Set once prepared.
    prepared: Option<P>,
    /// The wait before the next claim if this one fails.
    delay: TimeDelta,
    /// Set while waiting to claim again.
    wake: Option<DateTime<Utc>>,
}

impl<P> Manual<P> {
    /// The pending retries (to rebuild the heap).
    pub(super) fn wakes(&self) -> impl Iterator<Item = (DateTime<Utc>, String)> + '_ {
        self.claiming
            .iter()
            .filter_map(|(id, run)| Some((run.wake?, id.clone())))
    }

    /// Gives up the claims waiting to be retried (shutdown).
    pub(super) fn drop_waiting(&mut self) {
        self.claiming.retain(|_, run| run.wake.is_none());
    }
}

impl<P> Firing<P> {
    // ---- reloads ----

    /// Stops firing each of `tasks` before a reload publishes the new tasks; those removed
    /// leave the loaded tasks in one pass.
    pub(super) fn unload_all(&mut self, tasks: Vec<(String, Unload)>) {
        let mut removed = BTreeSet::new();
        for (task, why) in tasks {
            // A task named twice: removed already.
            if self.loaded_index(&task).is_ok_and(|i| removed.contains(&i)) {
                continue;
            }
            removed.extend(self.unload(&task, why));
        }
        if removed.is_empty() {
            return;
        }
        let mut i = 0;
        self.loaded.retain(|_| {
            let keep = !removed.contains(&i);
            i += 1;
            keep
        });
    }

    /// Stops firing `task`; when it is [`Unload::Removed`], its index in the loaded tasks,
    /// for the caller to remove it.
    fn unload(&mut self, task: &str, why: Unload) -> Option<usize> {
        let Ok(i) = self.loaded_index(task) else {
            return None;
        };
        if let Some(key) = self.loaded[i].key.take() {
            self.remove(key);
        }
        // The next load applies the leadership to it again, whatever spec it brings.
        self.unloaded.insert(self.loaded[i].spec.name.clone());
        match why {
            Unload::Removed => {
                if self
                    .applied
                    .as_ref()
                    .is_some_and(|a| a.tasks.contains(task))
                {
                    self.leading = self.leading.saturating_sub(1);
                }
                self.paused_logged.remove(task);
                let runs = self.runs.of(task);
                let running = runs.len();
                if running > 0 {
                    self.out.push_back(Action::CancelRetries { runs });
                }
                tracing::info!(target: log::DAEMON,
                    task = %task,
                    running,
                    "task removed; a run in progress finishes, without further retries"
                );
                Some(i)
            }
            Unload::Changed => {
                tracing::info!(target: log::DAEMON, task = %task, "task changed; a run in progress finishes");
                None
            }
        }
    }

    /// The loaded tasks after a reload. The leadership applied last is applied to the tasks
    /// that are new to this load (added, changed, or unloaded since the last): the others keep
    /// what it made of them, so a reload after one change costs one task, not one per task.
    pub(super) fn load(&mut self, specs: Vec<Arc<TaskSpec>>) {
        if self.shut_down {
            return;
        }
        let old = std::mem::take(&mut self.loaded);
        let unloaded = std::mem::take(&mut self.unloaded);
        let mut loaded = Vec::with_capacity(specs.len());
        // Both in name order: walked side by side. Tasks gone without an unload, and changed
        // ones still fired, are stopped.
        let mut stopped = Vec::new();
        let mut change = LoadChange::default();
        let mut old = old.into_iter().peekable();
        for spec in specs {
            // An unchanged task is the same `Arc` as before: compared as a pointer, not by
            // name (a reload of one changed file walks 100,000 of them).
            let same = match old.next_if(|t| Arc::ptr_eq(&t.spec, &spec)) {
                Some(same) => Some(same),
                None => {
                    while let Some(gone) = old.next_if(|t| t.spec.name < spec.name) {
                        stopped.extend(gone.key);
                        change.gone.push(gone.spec.name.clone());
                    }
                    old.next_if(|t| t.spec.name == spec.name)
                }
            };
            let key = match same {
                Some(same) if Arc::ptr_eq(&same.spec, &spec) => {
                    if same.key.is_none() && unloaded.contains(&spec.name) {
                        change.fresh.push(loaded.len());
                    }
                    same.key
                }
                Some(other) => {
                    stopped.extend(other.key);
                    change.fresh.push(loaded.len());
                    None
                }
                None => {
                    change.added.push(spec.name.clone());
                    change.fresh.push(loaded.len());
                    None
                }
            };
            loaded.push(Loaded { spec, key });
        }
        for gone in old {
            stopped.extend(gone.key);
            change.gone.push(gone.spec.name.clone());
        }
        for key in stopped {
            self.remove(key);
        }
        self.chained = chained_of(&loaded);
        self.loaded = loaded;
        if let Some(applied) = self.applied.clone() {
            self.apply_to_fresh(&applied, change);
        }
        let leadership = self.leadership.clone();
        self.apply_leadership(leadership);
    }

    /// Applies `applied`, the leadership applied last, to the tasks `change` says are new to
    /// the load, and keeps the count of tasks led and the pause log as a full application
    /// would leave them.
    fn apply_to_fresh(&mut self, applied: &Leadership, change: LoadChange) {
        for i in change.fresh {
            self.apply_to_task(i, applied);
        }
        let led = |name: &Arc<str>| applied.tasks.contains(name);
        self.leading += change.added.iter().filter(|name| led(name)).count();
        let gone_led = change.gone.iter().filter(|name| led(name)).count();
        self.leading = self.leading.saturating_sub(gone_led);
        for name in &change.gone {
            self.paused_logged.remove(&**name);
        }
    }

    // ---- leadership ----

    /// Starts firing the tasks this node should fire and stops the others; after a session
    /// loss, stops the runs of tasks with `kill_on_session_loss`; starts manual runs.
    pub(super) fn apply_leadership(&mut self, leadership: Leadership) {
        if self.shut_down {
            return;
        }
        self.leadership = leadership.clone();
        if leadership.session_losses > self.session_losses {
            self.session_losses = leadership.session_losses;
            self.withdraw_unspawned_runs();
            self.kill_on_session_loss();
        }
        let generation = self.next_generation;
        match self.applied.take() {
            Some(applied) if applied.paused == leadership.paused => {
                self.apply_changes(&applied, &leadership)
            }
            _ => self.apply_to_all(&leadership),
        }
        if self.next_generation > generation + 1 {
            // Several tasks start: in the order of their schedules.
            self.order_pending_by_schedule();
        }
        self.start_pending();
        self.start_manual_runs(&leadership);
        self.applied = Some(leadership);
        self.manual.refused.clear();
        self.start_backfills();
    }

    /// After a session loss, withdraws every run whose spawn still waits for its instant. Its
    /// claim was won, but its run record went with the session: another node may already run
    /// the task (a clock stepped back, a spawn held up), and for `overlap` a run must be live
    /// in ZooKeeper from its claim to its exit. The tick counts as claimed by a node that was
    /// lost (`on_node_loss`).
    fn withdraw_unspawned_runs(&mut self) {
        let mut runs: Vec<RunId> = self.runs.task_of.keys().copied().collect();
        runs.sort_unstable();
        if runs.is_empty() {
            return;
        }
        self.out.push_back(Action::StopRuns {
            runs,
            how: StopHow::Unspawned,
        });
    }

    fn kill_on_session_loss(&mut self) {
        let mut stop = Vec::new();
        for task in &self.loaded {
            let name = &task.spec.name;
            if !task.spec.kill_on_session_loss || self.runs.count(name) == 0 {
                continue;
            }
            tracing::warn!(target: log::DAEMON,
                task = %name,
                "ZooKeeper session lost: stopping this task's runs (kill_on_session_loss = true)"
            );
            stop.push(self.runs.of(name));
        }
        for runs in stop {
            self.out.push_back(Action::StopRuns {
                runs,
                how: StopHow::Terminate,
            });
        }
    }

    /// Applies `leadership` only to the tasks whose lease or pause mark changed since
    /// `applied` (a node taking its share of 10,000 leases publishes hundreds of changes).
    fn apply_changes(&mut self, applied: &Leadership, leadership: &Leadership) {
        // The same sets (a load applies the leadership applied last): nothing to compare, so a
        // reload after one change does not walk 100,000 names.
        let same_tasks = Arc::ptr_eq(&applied.tasks, &leadership.tasks);
        let same_paused = Arc::ptr_eq(&applied.paused_tasks, &leadership.paused_tasks);
        let tasks_changed = (!same_tasks)
            .then(|| applied.tasks.symmetric_difference(&leadership.tasks))
            .into_iter()
            .flatten();
        let paused_changed = (!same_paused)
            .then(|| {
                applied
                    .paused_tasks
                    .symmetric_difference(&leadership.paused_tasks)
            })
            .into_iter()
            .flatten();
        let changed: BTreeSet<String> = tasks_changed
            .clone()
            .map(|name| name.to_string())
            .chain(paused_changed.cloned())
            .collect();
        // The count of loaded tasks led, kept up to date from the same difference.
        for name in tasks_changed {
            if self.loaded_index(name).is_ok() {
                if leadership.tasks.contains(name) {
                    self.leading += 1;
                } else {
                    self.leading = self.leading.saturating_sub(1);
                }
            }
        }
        for name in changed {
            if let Ok(i) = self.loaded_index(&name) {
                self.apply_to_task(i, leadership);
            }
        }
        self.restart_gained(applied, leadership);
    }

    /// Fires afresh, from its fire record, each pooled task led before and now whose count of
    /// units gained changed ([`Leadership::gained`]): a gained item's missed ticks are caught
    /// up and its lost run checked. A claim on its way is honoured (without retries).
    fn restart_gained(&mut self, applied: &Leadership, leadership: &Leadership) {
        for (name, gained) in leadership.gained.iter() {
            if applied.gained.get(name) == Some(gained) || !applied.tasks.contains(name.as_str()) {
                continue;
            }
            let Ok(i) = self.loaded_index(name) else {
                continue;
            };
            if let Some(key) = self.loaded[i].key.take() {
                tracing::info!(target: log::TIMERS, task = %name, "items moved to this node: firing the task afresh from its fire record");
                self.remove(key);
                self.apply_to_task(i, leadership);
            }
        }
    }

    fn apply_to_all(&mut self, leadership: &Leadership) {
        self.slots
            .reserve(self.loaded.len().saturating_sub(self.slots.len()));
        for i in 0..self.loaded.len() {
            self.apply_to_task(i, leadership);
        }
        let loaded = &self.loaded;
        self.paused_logged.retain(|name| {
            loaded
                .binary_search_by(|t| (*t.spec.name).cmp(name.as_str()))
                .is_ok()
        });
        self.leading = self
            .loaded
            .iter()
            .filter(|t| leadership.tasks.contains(&*t.spec.name))
            .count();
    }

    /// Starts or stops firing the loaded task `i` for `leadership`, and logs a pause or resume
    /// by the operator once.
    fn apply_to_task(&mut self, i: usize, leadership: &Leadership) {
        let spec = self.loaded[i].spec.clone();
        let name: &str = &spec.name;
        let should_fire = spec.enabled && self.may_fire(leadership, name);
        // Led, but paused by the operator: the lease stays, nothing fires.
        let paused = spec.enabled
            && leadership.tasks.contains(name)
            && leadership.paused_tasks.contains(name);
        if paused && self.paused_logged.insert(name.to_string()) {
            tracing::warn!(target: log::DAEMON,
                task = %name,
                "task {name} is paused; nothing fires until `zkcron resume {name}`"
            );
        } else if !paused && self.paused_logged.remove(name) && should_fire {
            tracing::info!(target: log::DAEMON,
                task = %name,
                "task {name} is no longer paused; firing it again from its fire record"
            );
        }
        match (self.loaded[i].key, should_fire) {
            (None, true) => {
                // A newly led or resumed task: its planner starts from the fire record
                // (`last_claimed`), which `zkcron resume` moved past the paused period.
                let key = self.insert(spec.clone());
                self.loaded[i].key = Some(key);
            }
            (Some(key), false) => {
                self.loaded[i].key = None;
                self.remove(key);
                tracing::info!(target: log::TIMERS, task = %name, "no longer firing this task");
            }
            _ => {}
        }
    }

    // ---- manual runs ----

    /// Prepares a claim for every listed trigger of a task this node leads that it is not
    /// claiming and has not claimed yet.
    fn start_manual_runs(&mut self, leadership: &Leadership) {
        let listed: BTreeSet<&str> = leadership
            .triggers
            .values()
            .flatten()
            .map(|t| t.fire_id.as_str())
            .collect();
        self.manual
            .claimed
            .retain(|id| listed.contains(id.as_str()));
        if leadership.paused {
            return;
        }
        for (task, triggers) in leadership.triggers.iter() {
            let Ok(i) = self.loaded_index(task) else {
                continue;
            };
            let spec = self.loaded[i].spec.clone();
            if !spec.enabled || !leadership.tasks.contains(task.as_str()) {
                continue;
            }
            for trigger in triggers {
                let id = &trigger.fire_id;
                if self.manual.claimed.contains(id) || self.manual.claiming.contains_key(id) {
                    continue;
                }
                if record::chain_of(id).is_some() && leadership.paused_tasks.contains(&**task) {
                    self.skip_chained_run(&spec, trigger);
                    continue;
                }
                self.start_manual_run(&spec, trigger, RunKind::Manual);
            }
        }
    }

    pub(super) fn start_manual_run(
        &mut self,
        spec: &Arc<TaskSpec>,
        trigger: &Trigger,
        kind: RunKind,
    ) {
        let tick = Tick {
            instant: trigger.requested_at,
            due_at: self.now,
            catch_up: false,
        };
        let fire_id = trigger.fire_id.clone();
        self.manual.claiming.insert(
            fire_id.clone(),
            ManualRun {
                task: spec.name.clone(),
                trigger: trigger.clone(),
                kind,
                start: ManualStart::Run,
                tick,
                prepared: None,
                delay: FIRST_RETRY,
                wake: None,
            },
        );
        // Everything the spawn needs first, as for a tick: after the claim only the spawn is
        // left.
        self.prepare(
            Call::ManualPrepared(fire_id.clone()),
            spec.clone(),
            tick,
            fire_id,
        );
    }

    /// Claims the chained run `trigger` of the paused task `spec` to skip it: nothing to
    /// prepare, its claim makes one node record it as skipped.
    fn skip_chained_run(&mut self, spec: &Arc<TaskSpec>, trigger: &Trigger) {
        let fire_id = trigger.fire_id.clone();
        let run = ManualRun {
            task: spec.name.clone(),
            trigger: trigger.clone(),
            kind: RunKind::Manual,
            start: ManualStart::SkipPaused,
            tick: Tick {
                instant: trigger.requested_at,
                due_at: self.now,
                catch_up: false,
            },
            prepared: None,
            delay: FIRST_RETRY,
            wake: None,
        };
        self.manual.claiming.insert(fire_id.clone(), run);
        self.claim_manual(&fire_id);
    }

    pub(super) fn manual_prepared(&mut self, fire_id: &str, prepared: P) {
        if let Some(run) = self.manual.claiming.get_mut(fire_id) {
            run.prepared = Some(prepared);
            self.claim_manual(fire_id);
        }
    }

    fn claim_manual(&mut self, fire_id: &str) {
        let Some(run) = self.manual.claiming.get(fire_id) else {
            return;
        };
        let (task, trigger) = (run.task.clone(), run.trigger.clone());
        let call = self.call(Call::ManualClaim(fire_id.to_string()));
        self.out.push_back(Action::ClaimManual {
            call,
            task,
            trigger,
        });
    }

    pub(super) fn manual_woke(&mut self, fire_id: &str, at: DateTime<Utc>) {
        let Some(run) = self.manual.claiming.get_mut(fire_id) else {
            return;
        };
        if run.wake != Some(at) {
            return;
        }
        run.wake = None;
        self.claim_manual(fire_id);
    }

    pub(super) fn manual_claimed(
        &mut self,
        fire_id: &str,
        result: Result<ClaimOutcome, CoordError>,
    ) {
        let Some(run) = self.manual.claiming.get_mut(fire_id) else {
            return;
        };
        let task = run.task.clone();
        let what = match run.kind {
            RunKind::Backfill => "backfill tick",
            _ => "manual run",
        };
        let leads = !self.leadership.paused && self.leadership.tasks.contains(&*task);
        let outcome = match result {
            Ok(outcome) => outcome,
            Err(error) if leads && !self.shut_down => {
                tracing::warn!(target: log::MANUAL, task = %task, %fire_id, "claiming the {what} failed ({error}); retrying");
                let at = self.now + run.delay;
                run.delay = (run.delay * 2).min(CLAIM_RETRY_MAX);
                run.wake = Some(at);
                self.heap
                    .push(Reverse((at, Wake::Manual(fire_id.to_string()))));
                return;
            }
            Err(error) => {
                tracing::warn!(target: log::MANUAL, task = %task, %fire_id, "claiming the {what} failed ({error}) and this node no longer leads the task; the next leader runs it");
                ClaimOutcome::NotLeader
            }
        };
        let run = self.manual.claiming.remove(fire_id).expect("claiming");
        if run.kind == RunKind::Backfill && outcome != ClaimOutcome::Claimed {
            let refused = matches!(outcome, ClaimOutcome::AlreadyClaimed { .. });
            self.backfill_not_claimed(&task, fire_id, refused);
        }
        match outcome {
            ClaimOutcome::Claimed if run.start == ManualStart::SkipPaused => {
                self.manual.claimed.insert(fire_id.to_string());
                let parent = record::chain_of(fire_id).map_or("", |(_, parent)| parent);
                tracing::info!(target: log::MANUAL, task = %task, %fire_id, parent, "chained run skipped: {task} is paused (it would have run after {parent}); `zkcron resume {task}` lets the next ones run");
                self.out.push_back(Action::SkipChained {
                    task,
                    fire_id: fire_id.to_string(),
                    tick: run.tick,
                });
            }
            ClaimOutcome::Claimed => {
                self.manual.claimed.insert(fire_id.to_string());
                if run.kind == RunKind::Backfill {
                    self.backfill_claimed(fire_id);
                }
                let requested_at = run.trigger.requested_at;
                tracing::info!(target: log::MANUAL, task = %task, %fire_id, %requested_at, "{what} claimed; starting it");
                // Nothing stops a manual run's claim: it has no loop of its own (shutdown
                // reaches its run).
                self.spawn(SpawnOf {
                    task,
                    tick: run.tick,
                    fire_id: fire_id.to_string(),
                    prepared: run.prepared.expect("prepared before the claim"),
                    kind: run.kind,
                    retries: Retries::Allowed,
                });
            }
            ClaimOutcome::AlreadyClaimed { .. } => {
                tracing::info!(target: log::MANUAL, task = %task, %fire_id, "{what} already claimed (or gone); not running it");
            }
            ClaimOutcome::NotLeader => {
                tracing::info!(target: log::MANUAL, task = %task, %fire_id, "{what} not claimed: not the leader");
            }
            // A manual run does not count against `max_runs`: its claim is never refused so.
            ClaimOutcome::Done { .. } => {
                tracing::info!(target: log::MANUAL, task = %task, %fire_id, "{what} not claimed: the task is done");
            }
        }
    }
}

/// What a load changed in the loaded tasks.
#[derive(Default)]
struct LoadChange {
    /// The tasks to apply the leadership to, by index in the new loaded tasks.
    fresh: Vec<usize>,
    /// The names loaded now and not before.
    added: Vec<Arc<str>>,
    /// The names loaded before and not now.
    gone: Vec<Arc<str>>,
}

/// The enabled tasks that run after each task (`after`), by parent, in name order.
fn chained_of(loaded: &[Loaded]) -> HashMap<Arc<str>, Arc<[Arc<str>]>> {
    let mut chained: HashMap<Arc<str>, Vec<Arc<str>>> = HashMap::new();
    for spec in loaded.iter().map(|t| &t.spec).filter(|s| s.enabled) {
        for parent in &spec.extras.after {
            chained
                .entry(parent.name.clone())
                .or_default()
                .push(spec.name.clone());
        }
    }
    chained
        .into_iter()
        .map(|(parent, children)| (parent, children.into()))
        .collect()
}
