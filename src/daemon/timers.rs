//! One timer for all the tasks this node fires.
//!
//! Every led task has an entry in one table; an idle task's [`TickPlanner`] waits in it, keyed
//! in one binary heap by the wall-clock instant at which it must be asked again. One loop
//! ([`timer_loop`]) sleeps until the earliest of them, a change of the table, or a jump of the
//! wall clock. A task gets a tokio task of its own (an *activation*) only while it has
//! something to do: reading its fire record when the node starts firing it (at most
//! [`STARTS_IN_FLIGHT`] at once), and from [`PREPARE_AHEAD`] before a tick is due until the tick
//! is claimed ([`plan::CLAIM_AHEAD`] before it is due) and handed to its run, which spawns it at
//! its due time (or skipped). Then the activation hands the planner back to the
//! table. So 10,000 idle tasks cost 10,000 table entries and one sleeping loop, not 10,000
//! sleeping tasks.
//!
//! An entry is identified by its slot and a generation that is never reused: a stopped task's
//! heap entries, start and activation are stale and ignored when they come back, so stopping a
//! task (removal, change, leadership lost, shutdown) is one synchronous table update.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::runs::{fire, rerun_orphan, run_request};
use super::{Shared, wall_clock};
use crate::coord::Coordinator;
use crate::executor::{self, PreparedRun};
use crate::plan::{self, PlanRules, PlannerState, Step, Tick, TickPlanner};
use crate::task::{NodeLossPolicy, OverlapPolicy, TaskSpec};

/// How long before a tick is due its process is prepared (user and group lookups, environment,
/// `argv[0]`, working dir): early enough that the preparation is done when the tick comes due,
/// late enough that what it resolved is current (a user or program added a second before the
/// tick is still seen). Ticks caught up, and ticks armed less than this before they are due
/// after a wake-up, are prepared when they fire.
pub(super) const PREPARE_AHEAD: Duration = Duration::from_secs(1);

/// A task whose tick is due within `PREPARE_AHEAD` plus this is activated: a timer that woke a
/// little early by the wall clock does not go back to sleep for a few milliseconds.
const SLACK: Duration = Duration::from_millis(50);

/// A task held by a fire record ahead of the clock is reported when this node starts firing
/// it, then at most this often.
const HELD_REPORT_INTERVAL: Duration = Duration::from_secs(3600);

/// At most this many tasks read their fire record at once when this node starts firing them
/// (at start-up, all of them): one round trip each with ZooKeeper, and a bounded number of
/// start-up tasks alive at any time.
pub(super) const STARTS_IN_FLIGHT: usize = 64;

/// The timers of the tasks this node fires. Dropping it stops the loop (not the runs).
pub(super) struct Timers {
    table: Handle,
    timer_loop: JoinHandle<()>,
}

impl Timers {
    /// Starts the loop.
    pub(super) fn new<C: Coordinator>(shared: Arc<Shared<C>>) -> Timers {
        let table = Handle {
            table: Arc::new(Mutex::new(Table::default())),
            wake: Arc::new(Notify::new()),
        };
        let timer_loop = tokio::spawn(timer_loop(table.clone(), shared));
        Timers { table, timer_loop }
    }

    /// Makes room for `tasks` timers in all, so that loading 10,000 tasks does not grow the
    /// table by doubling (and leave the smaller copies behind as holes in the heap).
    pub(super) fn reserve(&self, tasks: usize) {
        let mut table = self.table.lock();
        let (slots, free) = (table.slots.len(), table.free.len());
        let more = tasks.saturating_sub(slots - free);
        table.slots.reserve(more.saturating_sub(free));
        let idle = table.heap.len();
        table.heap.reserve(tasks.saturating_sub(idle));
    }

    /// Starts firing `spec`: its fire record is read, then its ticks are timed.
    pub(super) fn fire(&self, spec: Arc<TaskSpec>) -> TimerId {
        let key = self.table.lock().insert(spec);
        self.table.wake.notify_one();
        TimerId(key)
    }

    /// Stops firing a task: no claim is sent for it from now on (a claim already on its way is
    /// honoured); its runs go on.
    pub(super) fn stop(&self, timer: TimerId) {
        self.table.lock().remove(timer.0);
    }

    /// Stops firing every task (shutdown).
    pub(super) fn stop_all(&self) {
        let mut table = self.table.lock();
        let keys: Vec<Key> = table
            .slots
            .iter()
            .enumerate()
            .filter_map(|(slot, entry)| {
                entry.as_ref().map(|entry| Key {
                    slot,
                    generation: entry.generation,
                })
            })
            .collect();
        for key in keys {
            table.remove(key);
        }
    }
}

impl Drop for Timers {
    fn drop(&mut self) {
        self.timer_loop.abort();
    }
}

/// A task's timer, from [`Timers::fire`] until [`Timers::stop`].
#[derive(Debug)]
pub(super) struct TimerId(Key);

/// The table and the loop's wake-up, shared by the loop, the activations and [`Timers`].
#[derive(Clone)]
struct Handle {
    table: Arc<Mutex<Table>>,
    /// Wakes the loop: an entry to start, or an earlier wake-up than the one it sleeps for.
    wake: Arc<Notify>,
}

impl Handle {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().expect("timer table poisoned")
    }

    /// An activation is done: the planner waits in the table until `wake`, unless the task was
    /// stopped meanwhile.
    fn hand_back(&self, key: Key, planner: TickPlanner, wake: DateTime<Utc>) {
        let mut table = self.lock();
        let Some(entry) = table.entry_mut(key) else {
            return;
        };
        entry.state = State::Idle {
            planner: planner.into_state(),
            wake,
        };
        table.heap.push(Reverse((wake, key)));
        drop(table);
        self.wake.notify_one();
    }
}

/// An entry's slot and generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    slot: usize,
    generation: u64,
}

#[derive(Default)]
struct Table {
    slots: Vec<Option<Entry>>,
    free: Vec<usize>,
    next_generation: u64,
    /// Idle entries by the instant to ask their planner again; stale keys are skipped.
    heap: BinaryHeap<Reverse<(DateTime<Utc>, Key)>>,
    /// Entries waiting to read their fire record.
    pending: VecDeque<Key>,
    /// Activations reading a fire record.
    starting: usize,
    /// Activations started since the last burst of starts ended.
    started_in_burst: usize,
}

struct Entry {
    generation: u64,
    spec: Arc<TaskSpec>,
    state: State,
    /// When the task was last reported held by a fire record ahead of the clock.
    held_reported: Option<tokio::time::Instant>,
}

enum State {
    /// Waiting for its turn to read the fire record.
    Pending,
    /// An activation holds the planner (or is making it).
    Active { stop: watch::Sender<bool> },
    /// Sleeping until `wake` (an entry of the heap). The planner's rules are made again from
    /// the task when it wakes.
    Idle {
        planner: PlannerState,
        wake: DateTime<Utc>,
    },
    /// The schedule has no further tick.
    Finished,
}

impl Table {
    fn insert(&mut self, spec: Arc<TaskSpec>) -> Key {
        self.next_generation += 1;
        let generation = self.next_generation;
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        self.slots[slot] = Some(Entry {
            generation,
            spec,
            state: State::Pending,
            held_reported: None,
        });
        let key = Key { slot, generation };
        self.pending.push_back(key);
        key
    }

    fn remove(&mut self, key: Key) {
        if self.entry_mut(key).is_none() {
            return;
        }
        if let Some(Entry {
            state: State::Active { stop },
            ..
        }) = self.slots[key.slot].take()
        {
            // The activation only sleeps, prepares or claims; it never owns a process.
            let _ = stop.send(true);
        }
        self.free.push(key.slot);
        // A removed task's heap entry stays until its instant (a year for a yearly task);
        // tasks stopped and fired again many times (reloads, leadership changes) must not pile
        // them up.
        let live = self.slots.len() - self.free.len();
        if self.heap.len() > 2 * live + 1024 {
            self.rebuild_heap();
        }
    }

    /// The heap again from the idle entries, without stale keys.
    fn rebuild_heap(&mut self) {
        let idle = self.slots.iter().enumerate().filter_map(|(slot, entry)| {
            let entry = entry.as_ref()?;
            let State::Idle { wake, .. } = entry.state else {
                return None;
            };
            let key = Key {
                slot,
                generation: entry.generation,
            };
            Some(Reverse((wake, key)))
        });
        self.heap = idle.collect();
    }

    fn entry_mut(&mut self, key: Key) -> Option<&mut Entry> {
        self.slots
            .get_mut(key.slot)?
            .as_mut()
            .filter(|entry| entry.generation == key.generation)
    }

    /// Asks every idle planner again now: the wall clock jumped.
    fn replan_all(&mut self, now: DateTime<Utc>) {
        for entry in self.slots.iter_mut().flatten() {
            if let State::Idle { wake, .. } = &mut entry.state {
                *wake = now;
            }
        }
        self.rebuild_heap();
    }
}

/// The one loop: starts pending entries, asks the planners that are due, and sleeps until the
/// next is due, the table changes or the wall clock jumps.
async fn timer_loop<C: Coordinator>(table: Handle, shared: Arc<Shared<C>>) {
    let mut clock_jumps = shared.clock_jumps.clone();
    clock_jumps.borrow_and_update();
    loop {
        let mut burst_ended = false;
        let next = {
            let mut locked = table.lock();
            start_pending(&mut locked, &table, &shared);
            if locked.starting == 0 && locked.started_in_burst > 0 {
                burst_ended = locked.started_in_burst >= STARTS_IN_FLIGHT;
                locked.started_in_burst = 0;
                if burst_ended && locked.pending.is_empty() {
                    // The queue grew to hold the whole burst (16 bytes a task); an idle node
                    // keeps no room for the next one.
                    locked.pending.shrink_to_fit();
                }
            }
            let now = wall_clock();
            while let Some(Reverse((wake, key))) = locked.heap.peek().copied() {
                if wake > now {
                    break;
                }
                locked.heap.pop();
                ask(&mut locked, &table, &shared, key, wake, now);
            }
            locked.heap.peek().map(|Reverse((wake, _))| *wake)
        };
        if burst_ended {
            // Many tasks just started (start-up, a leadership change): their start-up futures
            // and the fire records' reads are freed.
            super::memory::release_free_memory();
        }
        let sleep = async {
            match next {
                Some(wake) => {
                    tokio::time::sleep((wake - wall_clock()).to_std().unwrap_or_default()).await
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sleep => {}
            _ = table.wake.notified() => {}
            Ok(()) = clock_jumps.changed() => table.lock().replan_all(wall_clock()),
        }
    }
}

/// Starts activations that read the fire record, up to [`STARTS_IN_FLIGHT`] at once.
fn start_pending<C: Coordinator>(locked: &mut Table, table: &Handle, shared: &Arc<Shared<C>>) {
    while locked.starting < STARTS_IN_FLIGHT {
        let Some(key) = locked.pending.pop_front() else {
            return;
        };
        let Some(entry) = locked.entry_mut(key) else {
            continue;
        };
        let (stop, stop_rx) = watch::channel(false);
        entry.state = State::Active { stop };
        let spec = entry.spec.clone();
        locked.starting += 1;
        locked.started_in_burst += 1;
        let begin = Begin::Start(StartSlot(table.clone()));
        tokio::spawn(activation(
            table.clone(),
            key,
            spec,
            shared.clone(),
            stop_rx,
            begin,
        ));
    }
}

/// Asks the planner of the idle entry `key` (due at `wake`) what to do at `now`.
fn ask<C: Coordinator>(
    locked: &mut Table,
    table: &Handle,
    shared: &Arc<Shared<C>>,
    key: Key,
    wake: DateTime<Utc>,
    now: DateTime<Utc>,
) {
    let Some(entry) = locked.entry_mut(key) else {
        return;
    };
    let State::Idle {
        wake: entry_wake, ..
    } = &entry.state
    else {
        return;
    };
    if *entry_wake != wake {
        // Rescheduled since (a clock jump); its current heap entry is elsewhere.
        return;
    }
    let State::Idle { planner, .. } = std::mem::replace(&mut entry.state, State::Finished) else {
        unreachable!("matched Idle above");
    };
    let mut planner = TickPlanner::resume(PlanRules::from_spec(&entry.spec), planner);
    let name = &*entry.spec.name;
    let step = planner.poll(now);
    let next_wake = match &step {
        Step::SleepUntil(due) if *due - now > ahead_with_slack() => Some(*due - prepare_ahead()),
        Step::SleepUntil(_) | Step::Fire { .. } => None,
        Step::Held { record, until } => {
            // Never rewound here: ticks up to the record may have run. Say it loudly, then
            // sleep (waking hourly to say it again) until the record's next tick.
            if entry
                .held_reported
                .is_none_or(|at| at.elapsed() >= HELD_REPORT_INTERVAL)
            {
                let fix = plan::held_fix(name, shared.reset_flags.as_deref());
                tracing::error!(
                    task = %name,
                    %record,
                    "{}",
                    plan::held_report(name, *record, *until, now, &fix)
                );
                entry.held_reported = Some(tokio::time::Instant::now());
            }
            let hourly = now + TimeDelta::from_std(HELD_REPORT_INTERVAL).expect("an hour");
            Some((*until).min(hourly).max(now))
        }
        Step::Finished => {
            tracing::info!(task = %name, "the schedule has no further tick");
            return;
        }
    };
    match next_wake {
        Some(wake) => {
            entry.state = State::Idle {
                planner: planner.into_state(),
                wake,
            };
            locked.heap.push(Reverse((wake, key)));
        }
        None => {
            let (stop, stop_rx) = watch::channel(false);
            entry.state = State::Active { stop };
            let spec = entry.spec.clone();
            tokio::spawn(activation(
                table.clone(),
                key,
                spec,
                shared.clone(),
                stop_rx,
                Begin::Step(planner, step),
            ));
        }
    }
}

fn prepare_ahead() -> TimeDelta {
    TimeDelta::from_std(PREPARE_AHEAD).expect("a second")
}

fn ahead_with_slack() -> TimeDelta {
    TimeDelta::from_std(PREPARE_AHEAD + SLACK).expect("about a second")
}

/// Counts an activation reading a fire record; when dropped, lets the next one start.
struct StartSlot(Handle);

impl Drop for StartSlot {
    fn drop(&mut self) {
        if let Ok(mut table) = self.0.table.lock() {
            table.starting -= 1;
        }
        self.0.wake.notify_one();
    }
}

/// Where an activation begins.
enum Begin {
    /// The node starts firing the task: read the fire record (and, with `on_node_loss =
    /// "rerun"`, rerun a run lost with its node), then plan.
    Start(StartSlot),
    /// The planner said what to do.
    Step(TickPlanner, Step),
}

/// One task's activity: (start,) prepare the armed tick's process, sleep until
/// [`plan::CLAIM_AHEAD`] before it is due, claim it, spawn it at its due time; then hand the planner back to the table. Ends at once when told to stop.
async fn activation<C: Coordinator>(
    table: Handle,
    key: Key,
    spec: Arc<TaskSpec>,
    shared: Arc<Shared<C>>,
    mut stop: watch::Receiver<bool>,
    begin: Begin,
) {
    let name = &*spec.name;
    let (mut planner, mut step) = match begin {
        Begin::Start(slot) => {
            let Some(last_claimed) = read_fire_record(name, &shared, &mut stop).await else {
                return;
            };
            if spec.on_node_loss == NodeLossPolicy::Rerun {
                rerun_orphan(&spec, &shared, &shared.runs.of(name), &stop).await;
            }
            drop(slot);
            let mut planner =
                TickPlanner::start(PlanRules::from_spec(&spec), last_claimed, wall_clock());
            tracing::debug!(task = %name, next = ?planner.armed().map(|t| t.due_at), "firing this task");
            let step = planner.poll(wall_clock());
            (planner, step)
        }
        Begin::Step(planner, step) => (planner, step),
    };
    let mut clock_jumps = shared.clock_jumps.clone();
    clock_jumps.borrow_and_update();
    // The armed tick's process, prepared up to PREPARE_AHEAD before it is due, so that neither
    // the preparation nor the claim waits on the other at the tick's instant.
    let mut ahead: Option<(Tick, PreparedRun)> = None;
    let mut runs = None;
    loop {
        if *stop.borrow() {
            return;
        }
        match step {
            Step::Fire { ticks, skipped } => {
                // Made at the task's first tick: an idle task keeps no runs.
                let runs = runs.get_or_insert_with(|| shared.runs.of(name));
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
                    fire(&spec, &shared, runs, tick, prepared, &stop).await;
                }
            }
            Step::SleepUntil(due) => {
                let now = wall_clock();
                if due - now > ahead_with_slack() {
                    // Nothing to do for a while: the table times it.
                    table.hand_back(key, planner, due - prepare_ahead());
                    return;
                }
                if let Some(tick) = planner.armed()
                    && ahead.as_ref().is_none_or(|(armed, _)| *armed != tick)
                {
                    let fire_id = plan::fire_id(name, tick.instant);
                    let request = run_request(&spec, &shared, tick, &fire_id);
                    ahead = Some((tick, executor::prepare(request).await));
                } else if due - now > plan::CLAIM_AHEAD {
                    let wait = (due - plan::CLAIM_AHEAD - now).to_std().unwrap_or_default();
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = clock_jumps.changed() => {}
                        _ = stop.changed() => return,
                    }
                } else {
                    // Within the claim lead: the planner is asked as of the tick's due time,
                    // so it hands the armed tick out now; `fire` claims it now and spawns it
                    // at `due`, so that only the spawn is left for the instant.
                    step = planner.poll(due);
                    continue;
                }
            }
            Step::Held { .. } | Step::Finished => {
                // The table reports and times these.
                table.hand_back(key, planner, wall_clock());
                return;
            }
        }
        step = planner.poll(wall_clock());
    }
}

/// The task's fire record, which decides what was missed; without it we cannot tell, so it is
/// read again until it can be. `None` when told to stop meanwhile.
async fn read_fire_record<C: Coordinator>(
    name: &str,
    shared: &Shared<C>,
    stop: &mut watch::Receiver<bool>,
) -> Option<Option<DateTime<Utc>>> {
    let mut delay = Duration::from_millis(100);
    loop {
        match shared.coordinator.last_claimed(name).await {
            Ok(last) => return Some(last),
            Err(error) => {
                tracing::error!(
                    task = %name,
                    "cannot read the fire record ({error}); retrying"
                );
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = stop.changed() => return None,
                }
                delay = (delay * 2).min(Duration::from_secs(10));
            }
        }
    }
}
