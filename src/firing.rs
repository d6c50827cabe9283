//! The daemon's firing rules as a deterministic state machine: per task, when to read its fire
//! record, arm and prepare a tick, check `overlap`, claim, retry a failed claim, rerun a run
//! lost with its node, run a manual trigger, and when to stop (lease lost, pause, reload,
//! shutdown).
//!
//! [`Firing`] is sans-IO in the style of [`coord::node::Node`](crate::coord::node::Node): the
//! shell feeds it [`Input`]s with the current wall-clock instant (`handle(input, now)`), calls
//! [`Firing::handle_timeout`] at [`Firing::poll_timeout`], and performs every [`Action`] that
//! [`Firing::poll`] hands out (a coordinator call, preparing or spawning a process, stopping
//! runs), feeding each answer back as [`Input::Answer`] with the action's [`CallId`] and each
//! run's end as [`Input::RunEnded`]. It does no I/O, reads no clock, holds no timers and spawns
//! nothing; like quinn-proto it logs what it decides through `tracing`. It is generic over the
//! prepared process `P`, which it only carries from [`Answer::Prepared`] to [`Spawn`]. The
//! daemon (`daemon::firing`) is its shell; the unit tests drive it on injected time.
//!
//! It owns all per-task firing state:
//! - the loaded tasks and, for those this node fires, an entry (slot and never-reused
//!   generation, so a stopped task's late answers and wake-ups are recognised and ignored);
//! - one binary heap of wake-ups (idle planners, claim leads, backoffs), so
//!   [`Firing::poll_timeout`] is a peek: 10,000 idle tasks cost 10,000 entries and one timer of
//!   the shell, not 10,000 sleeping tasks;
//! - the live runs of every task, by name (a changed task still sees its earlier runs for
//!   `overlap`), and the manual runs being claimed.
//!
//! A task's life here: when it may fire ([`Leadership::may_fire`], enabled) it waits for one of
//! [`STARTS_IN_FLIGHT`] start slots, reads its fire record (retried with backoff), with
//! `on_node_loss = "rerun"` reruns an orphaned tick (at its instant, never before), then asks
//! its [`TickPlanner`]. An idle planner sleeps in the heap until [`PREPARE_AHEAD`] before its
//! tick; then the tick's process is prepared, the claim is sent [`plan::CLAIM_AHEAD`] before the
//! instant, and the run is spawned at the instant by the shell. See `fire.rs` for the rules of
//! one tick, `tasks.rs` for leadership, reloads and manual runs, and `backfill.rs` for
//! backfills; `start.rs` for a task's start (fire record, orphan rerun, planner), `queue.rs` for
//! `overlap = "queue"`, `ledger.rs` for the ticks not run on their way to the fire record, and
//! `io.rs` for what goes in and out (inputs, answers, actions).

mod backfill;
mod fire;
mod io;
mod ledger;
mod queue;
mod start;
mod tasks;
#[cfg(test)]
mod tests;

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};

use crate::coord::{ClaimIntent, ClaimOutcome, CoordError, Leadership, Trigger};
use crate::plan::{self, PlannerState, Tick, TickPlanner};
use crate::task::TaskSpec;

pub use self::io::{
    Action, Answer, CallId, FiringBugs, FiringConfig, Input, Retries, RunId, RunKind, Spawn,
    StopHow, Unload,
};

/// How long before a tick is due its process is prepared (user and group lookups, environment,
/// `argv[0]`, working dir): early enough that the preparation is done when the tick comes due,
/// late enough that what it resolved is current (a user or program added a second before the
/// tick is still seen). Ticks caught up, and ticks armed less than this before they are due
/// after a wake-up, are prepared when they fire.
pub const PREPARE_AHEAD: TimeDelta = TimeDelta::seconds(1);

/// A task whose tick is due within `PREPARE_AHEAD` plus this is activated: a timer that woke a
/// little early by the wall clock does not go back to sleep for a few milliseconds.
const SLACK: TimeDelta = TimeDelta::milliseconds(50);

/// A task held by a fire record ahead of the clock is reported when this node starts firing
/// it, then at most this often.
const HELD_REPORT_INTERVAL: TimeDelta = TimeDelta::hours(1);

/// At most this many tasks read their fire record at once when this node starts firing them
/// (at start-up, all of them): one round trip each with ZooKeeper.
pub const STARTS_IN_FLIGHT: usize = 64;

/// The first wait after a failed call; it doubles up to the call's maximum.
const FIRST_RETRY: TimeDelta = TimeDelta::milliseconds(100);
/// The longest wait between two claims of one tick (or one manual run) that failed.
const CLAIM_RETRY_MAX: TimeDelta = TimeDelta::seconds(1);
/// The longest wait between two reads of a fire record that failed.
const READ_RETRY_MAX: TimeDelta = TimeDelta::seconds(10);

/// An entry's slot and generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    slot: usize,
    generation: u64,
}

/// What a wake-up of the heap is for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Wake {
    Task(Key),
    /// A manual run's claim retry, by its fire id.
    Manual(String),
    /// The ticks not run of an entry, written alone when no claim carried them (`ledger.rs`).
    Ledger(Key),
}

/// A loaded task and, while this node fires it, its entry.
struct Loaded {
    spec: Arc<TaskSpec>,
    key: Option<Key>,
}

/// A task this node fires.
struct Entry<P> {
    generation: u64,
    spec: Arc<TaskSpec>,
    state: State<P>,
    /// The entry's one pending wake-up (its heap entry is stale unless it equals this).
    wake: Option<DateTime<Utc>>,
    /// When the task was last reported held by a fire record ahead of the clock.
    held_reported: Option<DateTime<Utc>>,
    /// The tick queued behind a live run (`overlap = "queue"`), see `queue.rs`.
    queued: Option<queue::Queued>,
    /// The ticks not run and not written yet (`ledger.rs`).
    noted: Option<Box<ledger::Noted>>,
}

enum State<P> {
    /// Waiting for a start slot.
    Pending,
    /// Holding a start slot: reading the fire record, then with `on_node_loss = "rerun"`
    /// rerunning an orphan.
    Starting(Start),
    /// The planner sleeps until the entry's wake-up.
    Idle(PlannerState),
    /// Something to do before the tick is claimed.
    Active(Box<Activation<P>>),
    /// The schedule has no further tick.
    Finished,
}

/// A start's progress.
enum Start {
    /// The fire record is being read (or, with a wake-up, read again after `delay`).
    Reading { delay: TimeDelta },
    /// The fire record was read; the queued tick is being read (`overlap = "queue"`).
    ReadingQueued,
    /// The fire record said `last`; the orphan check is in progress (with `waiting`, the
    /// orphaned tick is in the future: it is rerun at its instant, the entry's wake-up).
    Orphan {
        last: Option<DateTime<Utc>>,
        waiting: Option<DateTime<Utc>>,
    },
}

/// A task with something to do: its planner, the ticks of the current step not fired yet, the
/// armed tick's process prepared ahead, and what it is doing.
struct Activation<P> {
    planner: TickPlanner,
    queue: VecDeque<Tick>,
    ahead: Option<(Tick, P)>,
    doing: Doing<P>,
}

enum Doing<P> {
    /// Take the next queued tick or ask the planner.
    Ready,
    /// Preparing the armed tick's process ahead of its instant.
    PreparingAhead,
    /// Sleeping until `CLAIM_AHEAD` before the armed tick (the entry's wake-up).
    WaitClaimAhead,
    /// A caught-up tick waits for the task's runs to end (`overlap` other than `allow`).
    WaitIdle(Tick),
    /// Firing a tick (see `fire.rs`).
    Fire(Box<fire::Fire<P>>),
    /// The tick's claim is on its way; its state travels with the call.
    Claiming,
}

/// What a call in flight is for.
enum Call<P> {
    FireRecord(Key),
    Orphan(Key),
    OrphanPrepared(Key, Tick),
    Reclaim {
        key: Key,
        task: Arc<str>,
        tick: Tick,
        prepared: P,
    },
    RunsElsewhere(Key),
    /// The queued tick's read at the start (with the fire record read before it), the count
    /// and the wait of runs on other nodes before its start, its preparation and its claim.
    Queued(Key, Option<DateTime<Utc>>),
    QueuedElsewhere(Key),
    QueuedWait(Key),
    QueuedPrepared(Key),
    QueuedClaim {
        key: Key,
        task: Arc<str>,
        tick: Tick,
        prepared: P,
    },
    /// The armed tick's preparation ahead, or a fired tick's.
    Prepared(Key),
    Claim(Box<fire::Claiming<P>>),
    /// The ticks not run of an entry, written alone.
    Note(Key, Vec<crate::plan::ledger::TickEntry>),
    ManualPrepared(String),
    ManualClaim(String),
}

/// The live runs of every task that has fired here, by task name (a manual run under
/// `<task>@manual`, so that `overlap` does not count it).
#[derive(Default)]
struct Runs {
    by_task: HashMap<String, Vec<RunId>>,
    task_of: HashMap<RunId, String>,
    next: RunId,
}

impl Runs {
    fn start(&mut self, task: String) -> RunId {
        let run = self.next;
        self.next += 1;
        self.by_task.entry(task.clone()).or_default().push(run);
        self.task_of.insert(run, task);
        run
    }

    /// Forgets `run`; returns its task's key.
    fn end(&mut self, run: RunId) -> Option<String> {
        let task = self.task_of.remove(&run)?;
        if let Some(runs) = self.by_task.get_mut(&task) {
            runs.retain(|r| *r != run);
            if runs.is_empty() {
                self.by_task.remove(&task);
            }
        }
        Some(task)
    }

    fn of(&self, task: &str) -> Vec<RunId> {
        self.by_task.get(task).cloned().unwrap_or_default()
    }

    fn count(&self, task: &str) -> usize {
        self.by_task.get(task).map_or(0, Vec::len)
    }
}

/// The key of a task's manual runs in [`Runs`] (`@` is never part of a task name).
fn manual_key(task: &str) -> String {
    format!("{task}@manual")
}

/// The firing rules of one node. See the module doc.
pub struct Firing<P> {
    config: FiringConfig,
    now: DateTime<Utc>,
    /// The loaded tasks, in name order.
    loaded: Vec<Loaded>,
    slots: Vec<Option<Entry<P>>>,
    free: Vec<usize>,
    next_generation: u64,
    heap: BinaryHeap<Reverse<(DateTime<Utc>, Wake)>>,
    /// Entries waiting for a start slot.
    pending: VecDeque<Key>,
    /// Start slots in use.
    starting: usize,
    /// Starts since the last burst of starts ended.
    started_in_burst: usize,
    calls: HashMap<CallId, Call<P>>,
    next_call: CallId,
    runs: Runs,
    manual: tasks::Manual<P>,
    /// The loaded, enabled tasks that run after each task (`after`), by parent.
    chained: HashMap<Arc<str>, Arc<[Arc<str>]>>,
    /// The leadership as last told.
    leadership: Leadership,
    /// The leadership applied last to the tasks (`None`: apply to every task).
    applied: Option<Leadership>,
    /// The tasks unloaded since the last load: it applies the leadership to them again.
    unloaded: BTreeSet<Arc<str>>,
    /// The session losses already acted on.
    session_losses: u64,
    /// The led tasks logged as paused by the operator.
    paused_logged: BTreeSet<String>,
    /// How many loaded tasks the applied leadership leads.
    leading: usize,
    shut_down: bool,
    out: VecDeque<Action<P>>,
    /// The work items of the claim being answered ([`Answer::ClaimedItems`]), for its spawn
    /// or its skip's log line; cleared once the answer is handled.
    claimed_items: Option<Arc<[String]>>,
}

impl<P> Firing<P> {
    pub fn new(config: FiringConfig, now: DateTime<Utc>) -> Firing<P> {
        Firing {
            config,
            now,
            loaded: Vec::new(),
            slots: Vec::new(),
            free: Vec::new(),
            next_generation: 0,
            heap: BinaryHeap::new(),
            pending: VecDeque::new(),
            starting: 0,
            started_in_burst: 0,
            calls: HashMap::new(),
            next_call: 0,
            runs: Runs::default(),
            manual: tasks::Manual::default(),
            chained: HashMap::new(),
            leadership: Leadership::default(),
            applied: None,
            unloaded: BTreeSet::new(),
            session_losses: 0,
            paused_logged: BTreeSet::new(),
            leading: 0,
            shut_down: false,
            out: VecDeque::new(),
            claimed_items: None,
        }
    }

    /// Takes an input at `now`.
    pub fn handle(&mut self, input: Input<P>, now: DateTime<Utc>) {
        self.now = now;
        match input {
            Input::Unload(tasks) => self.unload_all(tasks),
            Input::Load(specs) => self.load(specs),
            Input::Leadership(leadership) => self.apply_leadership(leadership),
            Input::ClockJumped => self.replan_all(),
            Input::Shutdown => self.shutdown(),
            Input::Answer { call, answer } => self.answered(call, answer),
            Input::RunEnded { run } => self.run_ended(run),
        }
    }

    /// Handles every wake-up due at `now`.
    pub fn handle_timeout(&mut self, now: DateTime<Utc>) {
        self.now = now;
        while let Some(Reverse((at, _))) = self.heap.peek() {
            if *at > now {
                break;
            }
            let Reverse((at, wake)) = self.heap.pop().expect("peeked");
            match wake {
                Wake::Task(key) => self.task_woke(key, at),
                Wake::Manual(fire_id) => self.manual_woke(&fire_id, at),
                Wake::Ledger(key) => self.ledger_woke(key, at),
            }
        }
    }

    /// The earliest wake-up (maybe one since cancelled: waking for it does no harm).
    pub fn poll_timeout(&self) -> Option<DateTime<Utc>> {
        self.heap.peek().map(|Reverse((at, _))| *at)
    }

    /// The next action to perform.
    pub fn poll(&mut self) -> Option<Action<P>> {
        self.out.pop_front()
    }

    /// Whether `leadership` lets this node fire `task` ([`Leadership::may_fire`], unless a
    /// deliberate bug ignores the operator's pause).
    fn may_fire(&self, leadership: &Leadership, task: &str) -> bool {
        if self.config.bugs.ignore_pause {
            !leadership.paused && leadership.tasks.contains(task)
        } else {
            leadership.may_fire(task)
        }
    }

    /// How many loaded tasks the leadership applied last leads (the status line).
    pub fn leading(&self) -> usize {
        self.leading
    }

    /// How many runs are live.
    pub fn running(&self) -> usize {
        self.runs.task_of.len()
    }

    /// The live runs of `task` (its scheduled ones).
    pub fn running_of(&self, task: &str) -> usize {
        self.runs.count(task)
    }

    /// The names of the tasks this node fires now, in name order.
    pub fn firing(&self) -> Vec<&str> {
        self.loaded
            .iter()
            .filter(|t| t.key.is_some())
            .map(|t| &*t.spec.name)
            .collect()
    }

    /// The entry of `task` while this node fires it (a new one each time it starts again).
    pub fn entry_of(&self, task: &str) -> Option<Key> {
        self.loaded_index(task)
            .ok()
            .and_then(|i| self.loaded[i].key)
    }

    // ---- the table ----

    fn loaded_index(&self, name: &str) -> Result<usize, usize> {
        self.loaded.binary_search_by(|t| (*t.spec.name).cmp(name))
    }

    /// Asks the shell to prepare `tick`'s process; the answer continues as `call`.
    fn prepare(&mut self, call: Call<P>, spec: Arc<TaskSpec>, tick: Tick, fire_id: String) {
        let call = self.call(call);
        self.out.push_back(Action::Prepare {
            call,
            spec,
            tick,
            fire_id,
        });
    }

    fn call(&mut self, call: Call<P>) -> CallId {
        self.next_call += 1;
        self.calls.insert(self.next_call, call);
        self.next_call
    }

    fn entry(&self, key: Key) -> Option<&Entry<P>> {
        self.slots
            .get(key.slot)?
            .as_ref()
            .filter(|e| e.generation == key.generation)
    }

    fn entry_mut(&mut self, key: Key) -> Option<&mut Entry<P>> {
        self.slots
            .get_mut(key.slot)?
            .as_mut()
            .filter(|e| e.generation == key.generation)
    }

    /// Sets the entry's one wake-up.
    fn wake_at(&mut self, key: Key, at: DateTime<Utc>) {
        if let Some(entry) = self.entry_mut(key) {
            entry.wake = Some(at);
            self.heap.push(Reverse((at, Wake::Task(key))));
        }
    }

    /// Starts firing `spec`: it waits for a start slot (the caller calls [`Self::start_pending`]
    /// once it inserted every task it starts).
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
            wake: None,
            held_reported: None,
            queued: None,
            noted: None,
        });
        let key = Key { slot, generation };
        self.pending.push_back(key);
        key
    }

    /// Stops firing the task of `key`: no claim is sent for it from now on (a claim already on
    /// its way is honoured); its runs go on.
    fn remove(&mut self, key: Key) {
        if self.entry(key).is_none() {
            return;
        }
        let entry = self.slots[key.slot].take().expect("checked");
        self.free.push(key.slot);
        match entry.state {
            State::Starting(_) => self.end_start(),
            State::Active(activation) => {
                if let Doing::Fire(fire) = activation.doing {
                    let fire_id = &fire.fire_id;
                    tracing::info!(target: log::RUNS, task = %entry.spec.name, %fire_id, "tick not claimed: this task's loop is stopping");
                }
            }
            _ => {}
        }
        // A removed task's heap entry stays until its instant; tasks stopped and fired again
        // many times must not pile them up.
        let live = self.slots.len() - self.free.len();
        if self.heap.len() > 2 * live + 1024 {
            self.rebuild_heap();
        }
    }

    /// The heap again from the live wake-ups, without stale ones.
    fn rebuild_heap(&mut self) {
        let tasks = self.slots.iter().enumerate().filter_map(|(slot, entry)| {
            let entry = entry.as_ref()?;
            let key = Key {
                slot,
                generation: entry.generation,
            };
            Some(Reverse((entry.wake?, Wake::Task(key))))
        });
        let manual = self
            .manual
            .wakes()
            .map(|(at, id)| Reverse((at, Wake::Manual(id))));
        self.heap = tasks.chain(manual).collect();
    }

    /// Asks every sleeping planner again now: the wall clock jumped.
    fn replan_all(&mut self) {
        let now = self.now;
        for entry in self.slots.iter_mut().flatten() {
            let sleeping = match &entry.state {
                State::Idle(_) => true,
                State::Active(activation) => matches!(activation.doing, Doing::WaitClaimAhead),
                _ => false,
            };
            if sleeping {
                entry.wake = Some(now);
            }
        }
        self.rebuild_heap();
    }

    /// Puts the tasks waiting for a start slot in the order of their schedules, so that tasks
    /// sharing an expression start one after another: each start computes the task's next
    /// tick from croner's parse of its expression, kept in a small cache, and in name order
    /// 100,000 tasks over a few thousand expressions made a parse for nearly every start.
    fn order_pending_by_schedule(&mut self) {
        let slots = &self.slots;
        self.pending.make_contiguous().sort_by_cached_key(|key| {
            slots[key.slot].as_ref().map(|entry| {
                let schedule = &entry.spec.schedule;
                (schedule.expression(), schedule.timezone().name())
            })
        });
    }

    /// Starts fire-record reads up to [`STARTS_IN_FLIGHT`] at once.
    fn start_pending(&mut self) {
        while self.starting < STARTS_IN_FLIGHT {
            let Some(key) = self.pending.pop_front() else {
                break;
            };
            let Some(entry) = self.entry_mut(key) else {
                continue;
            };
            entry.state = State::Starting(Start::Reading { delay: FIRST_RETRY });
            let task = entry.spec.name.clone();
            self.starting += 1;
            self.started_in_burst += 1;
            let call = self.call(Call::FireRecord(key));
            self.out.push_back(Action::ReadFireRecord { call, task });
        }
        if self.starting == 0 && self.started_in_burst > 0 {
            let burst_ended = self.started_in_burst >= STARTS_IN_FLIGHT;
            self.started_in_burst = 0;
            if burst_ended {
                if self.pending.is_empty() {
                    // The queue grew to hold the whole burst; an idle node keeps no room.
                    self.pending.shrink_to_fit();
                }
                self.out.push_back(Action::ReleaseMemory);
            }
        }
    }

    /// A start slot is free again.
    fn end_start(&mut self) {
        self.starting -= 1;
        self.start_pending();
    }

    /// A wake-up of the entry `key` set for `at` came.
    fn task_woke(&mut self, key: Key, at: DateTime<Utc>) {
        let Some(entry) = self.entry_mut(key) else {
            return;
        };
        if entry.wake != Some(at) {
            // Rescheduled since; its current heap entry is elsewhere.
            return;
        }
        entry.wake = None;
        match &mut entry.state {
            State::Starting(Start::Reading { .. }) => {
                let task = entry.spec.name.clone();
                let call = self.call(Call::FireRecord(key));
                self.out.push_back(Action::ReadFireRecord { call, task });
            }
            State::Starting(Start::Orphan {
                waiting: Some(orphan),
                ..
            }) => {
                let orphan = *orphan;
                self.prepare_orphan(key, orphan);
            }
            State::Starting(Start::Orphan { .. } | Start::ReadingQueued) => {}
            State::Idle(planner) => {
                let planner =
                    TickPlanner::resume(plan::PlanRules::from_spec(&entry.spec), *planner);
                entry.state = State::Active(Box::new(Activation {
                    planner,
                    queue: VecDeque::new(),
                    ahead: None,
                    doing: Doing::Ready,
                }));
                self.advance(key);
            }
            State::Active(activation) => match &mut activation.doing {
                Doing::WaitClaimAhead => {
                    activation.doing = Doing::Ready;
                    self.advance(key);
                }
                Doing::Fire(_) => self.fire_woke(key),
                _ => {}
            },
            State::Pending | State::Finished => {}
        }
    }

    fn answered(&mut self, call: CallId, answer: Answer<P>) {
        let Some(call) = self.calls.remove(&call) else {
            return;
        };
        let answer = match answer {
            Answer::ClaimedItems(items) => {
                self.claimed_items = Some(items);
                Answer::Claim(Ok(ClaimOutcome::Claimed))
            }
            other => other,
        };
        self.answer_call(call, answer);
        self.claimed_items = None;
    }

    fn answer_call(&mut self, call: Call<P>, answer: Answer<P>) {
        match (call, answer) {
            (Call::FireRecord(key), Answer::FireRecord(result)) => self.fire_record(key, result),
            (Call::Orphan(key), Answer::Orphan(result)) => self.orphan(key, result),
            (Call::OrphanPrepared(key, tick), Answer::Prepared(prepared)) => {
                self.orphan_prepared(key, tick, prepared)
            }
            (
                Call::Reclaim {
                    key,
                    task,
                    tick,
                    prepared,
                },
                Answer::Claim(result),
            ) => self.reclaimed(key, task, tick, prepared, result),
            (Call::RunsElsewhere(key), Answer::RunsElsewhere(result)) => {
                self.counted_elsewhere(key, result)
            }
            (Call::Prepared(key), Answer::Prepared(prepared)) => self.prepared(key, prepared),
            (Call::Note(key, carried), Answer::Claim(result)) => {
                self.note_written(key, carried, result)
            }
            (Call::Queued(key, last), Answer::Queued(result)) => {
                self.queued_read(key, last, result)
            }
            (Call::QueuedElsewhere(key), Answer::RunsElsewhere(result)) => {
                self.queued_counted(key, result)
            }
            (Call::QueuedWait(key), Answer::RunsEnded(result)) => {
                self.queued_runs_ended(key, result)
            }
            (Call::QueuedPrepared(key), Answer::Prepared(prepared)) => {
                self.queued_prepared(key, prepared)
            }
            (
                Call::QueuedClaim {
                    key,
                    task,
                    tick,
                    prepared,
                },
                Answer::Claim(result),
            ) => self.queued_claimed(key, task, tick, prepared, result),
            (Call::Claim(claiming), Answer::Claim(result)) => self.claimed(*claiming, result),
            (Call::ManualPrepared(fire_id), Answer::Prepared(prepared)) => {
                self.manual_prepared(&fire_id, prepared)
            }
            (Call::ManualClaim(fire_id), Answer::Claim(result)) => {
                self.manual_claimed(&fire_id, result)
            }
            _ => tracing::error!("an answer that does not fit its call; ignored"),
        }
    }

    /// Starts a claimed run.
    fn spawn(&mut self, spawn: SpawnOf<P>) {
        let runs_key = match spawn.kind {
            RunKind::Scheduled => spawn.task.to_string(),
            RunKind::Manual => manual_key(&spawn.task),
            RunKind::Backfill => backfill::backfill_key(&spawn.task),
        };
        let run = self.runs.start(runs_key);
        let chained = self.chained.get(&spawn.task).cloned().unwrap_or_default();
        self.out.push_back(Action::Spawn(Spawn {
            run,
            task: spawn.task,
            tick: spawn.tick,
            fire_id: spawn.fire_id,
            prepared: spawn.prepared,
            kind: spawn.kind,
            retries: spawn.retries,
            chained,
            work_items: self.claimed_items.take(),
        }));
    }

    fn run_ended(&mut self, run: RunId) {
        let Some(task) = self.runs.end(run) else {
            return;
        };
        self.backfill_runs_changed(&task);
        let Some(key) = self.entry_of(&task) else {
            return;
        };
        self.runs_changed(key, run);
    }

    fn shutdown(&mut self) {
        self.shut_down = true;
        let keys: Vec<Key> = self
            .loaded
            .iter_mut()
            .filter_map(|t| t.key.take())
            .collect();
        for key in keys {
            self.remove(key);
        }
        self.manual.drop_waiting();
        let runs: Vec<RunId> = self.runs.task_of.keys().copied().collect();
        if !runs.is_empty() {
            self.out.push_back(Action::CancelRetries { runs });
        }
    }
}

/// What [`Firing::spawn`] needs (a [`Spawn`] without its run id).
struct SpawnOf<P> {
    task: Arc<str>,
    tick: Tick,
    fire_id: String,
    prepared: P,
    kind: RunKind,
    retries: Retries,
}

/// The log targets of the daemon modules these rules were written in first: the lines keep
/// their prefix, and operators' filters (`ZKCRON_LOG=info,zkcron::daemon=debug`) still match.
mod log {
    pub(super) const RUNS: &str = "zkcron::daemon::runs";
    pub(super) const TIMERS: &str = "zkcron::daemon::timers";
    pub(super) const MANUAL: &str = "zkcron::daemon::manual";
    pub(super) const DAEMON: &str = "zkcron::daemon";
}
