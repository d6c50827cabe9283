//! What goes in and out of the firing core: its configuration, its [`Input`]s and the
//! [`Answer`]s to its calls, and the [`Action`]s the shell performs.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::coord::{ClaimIntent, ClaimOutcome, CoordError, Leadership, Trigger};
use crate::plan::Tick;
use crate::task::{OverlapPolicy, TaskSpec};

/// Numbers an action whose answer comes back as [`Input::Answer`].
pub type CallId = u64;
/// Numbers a run from its [`Spawn`] to its [`Input::RunEnded`].
pub type RunId = u64;

/// What the core needs to know from the node's configuration.
#[derive(Debug, Clone, Default)]
pub struct FiringConfig {
    /// The flags with which `zkcron reset TASK` reaches this node's fire records, for the log
    /// line about a task held by a fire record ahead of the clock (see `plan::held_fix`).
    pub reset_flags: Option<String>,
    /// Deliberate bugs for the simulation's checker to catch; all off in every daemon.
    #[doc(hidden)]
    pub bugs: FiringBugs,
}

/// Test-only firing bugs (see [`FiringConfig::bugs`]): each breaks one rule, so that the
/// simulation shows its checker catches what the broken rule causes.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FiringBugs {
    /// Planners start as if no fire record existed: missed ticks are never caught up.
    pub ignore_fire_record: bool,
    /// Planners catch up every missed tick of a task with `catch_up = "skip"`.
    pub catch_up_skip_tasks: bool,
    /// Planners run without the task's `starting_deadline`.
    pub ignore_starting_deadline: bool,
    /// A led task the operator paused fires all the same.
    pub ignore_pause: bool,
    /// Every task is fired as if its `overlap` were `allow`.
    pub ignore_overlap: bool,
    /// With `overlap = "queue"`, a tick due while one waits is queued too (instead of
    /// dropped): the record's queued tick is replaced, and the first one never runs.
    pub queue_every_tick: bool,
    /// The ticks not run are recorded nowhere (no tick ledger entry).
    pub forget_ledger: bool,
}

impl FiringBugs {
    /// The `overlap` policy this node applies to `spec` (`allow` under a deliberate bug).
    pub(super) fn overlap(self, spec: &TaskSpec) -> OverlapPolicy {
        if self.ignore_overlap {
            OverlapPolicy::Allow
        } else {
            spec.overlap
        }
    }
}

/// Everything the shell tells the core.
#[derive(Debug)]
pub enum Input<P> {
    /// A reload is under way: stop firing each of these tasks (before the new tasks are
    /// published), in one pass over the loaded tasks (a reload that removes most of 100,000
    /// tasks must not shift the rest once per task).
    Unload(Vec<(String, Unload)>),
    /// The loaded tasks after a reload, in name order; an unchanged task is the same `Arc` as
    /// before. Applies the current leadership to every task.
    Load(Vec<Arc<TaskSpec>>),
    /// The coordinator's leadership changed (or is told for the first time).
    Leadership(Leadership),
    /// The wall clock jumped: every sleeping planner is asked again now.
    ClockJumped,
    /// Graceful stop: no new claims; the retries of running runs are cancelled.
    Shutdown,
    /// The answer to the action numbered `call`.
    Answer { call: CallId, answer: Answer<P> },
    /// The run `run` is over on this node: the main process of its last attempt exited, or it
    /// was stopped before its spawn.
    RunEnded { run: RunId },
}

/// Why a task stops being fired at a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unload {
    /// Its file is gone: its runs finish without further retries.
    Removed,
    /// Its file changed: it is fired again from its fire record with the new definition.
    Changed,
}

/// The answer to an action.
#[derive(Debug)]
pub enum Answer<P> {
    /// To [`Action::ReadFireRecord`].
    FireRecord(Result<Option<DateTime<Utc>>, CoordError>),
    /// To [`Action::ReadOrphan`].
    Orphan(Result<Option<DateTime<Utc>>, CoordError>),
    /// To [`Action::CountRunsElsewhere`].
    RunsElsewhere(Result<usize, CoordError>),
    /// To [`Action::ReadQueued`].
    Queued(Result<Option<DateTime<Utc>>, CoordError>),
    /// To [`Action::WaitRunsElsewhere`]: no run of the task is live on another node now.
    RunsEnded(Result<(), CoordError>),
    /// To [`Action::Prepare`] (a failed preparation is a prepared run that records itself as
    /// failed).
    Prepared(P),
    /// To [`Action::Claim`], [`Action::Reclaim`] and [`Action::ClaimManual`].
    Claim(Result<ClaimOutcome, CoordError>),
    /// To [`Action::Claim`] of a pooled task whose items the backend splits over the nodes:
    /// claimed, for these items (in the task file's order); the run gets exactly those.
    ClaimedItems(Arc<[String]>),
}

/// What the core asks the shell to do. Each action with a `call` is answered once.
#[derive(Debug)]
pub enum Action<P> {
    /// `Coordinator::last_claimed`.
    ReadFireRecord { call: CallId, task: Arc<str> },
    /// `Coordinator::orphaned_tick`.
    ReadOrphan { call: CallId, task: Arc<str> },
    /// `Coordinator::runs_elsewhere`.
    CountRunsElsewhere { call: CallId, task: Arc<str> },
    /// `Coordinator::queued_tick` (a task with `overlap = "queue"`, when this node starts
    /// firing it).
    ReadQueued { call: CallId, task: Arc<str> },
    /// `Coordinator::runs_ended_elsewhere`: answered once no run of the task is live on
    /// another node (its queued tick waits for that).
    WaitRunsElsewhere { call: CallId, task: Arc<str> },
    /// Resolve everything the spawn of `tick` needs (`executor::prepare`).
    Prepare {
        call: CallId,
        spec: Arc<TaskSpec>,
        tick: Tick,
        fire_id: String,
    },
    /// `Coordinator::claim_noting`: the claim, carrying the ticks not run since the last one
    /// (`plan::ledger`) into the fire record.
    Claim {
        call: CallId,
        task: Arc<str>,
        tick: DateTime<Utc>,
        intent: ClaimIntent,
        ticks: Vec<crate::plan::ledger::TickEntry>,
    },
    /// `Coordinator::reclaim` of an orphaned tick.
    Reclaim {
        call: CallId,
        task: Arc<str>,
        tick: DateTime<Utc>,
    },
    /// `Coordinator::claim_manual`.
    ClaimManual {
        call: CallId,
        task: Arc<str>,
        trigger: Trigger,
    },
    /// Start a claimed run: spawn it at `tick.due_at` and report its end as
    /// [`Input::RunEnded`].
    Spawn(Spawn<P>),
    /// A chained run (`after`) of a paused task was claimed and is not run: record its end as
    /// skipped (its trigger ends; `zkcron_chained_runs_total{outcome="skipped"}`).
    SkipChained {
        task: Arc<str>,
        fire_id: String,
        tick: Tick,
    },
    /// Stop these runs (SIGTERM to their groups, or SIGKILL); a run not spawned yet is never
    /// spawned. Each still ends with [`Input::RunEnded`].
    StopRuns { runs: Vec<RunId>, how: StopHow },
    /// Let these runs' current attempts finish but start none of their retries.
    CancelRetries { runs: Vec<RunId> },
    /// Many tasks just started (start-up, a leadership change): memory may be given back.
    ReleaseMemory,
}

/// A claimed run to start.
#[derive(Debug)]
pub struct Spawn<P> {
    pub run: RunId,
    pub task: Arc<str>,
    pub tick: Tick,
    /// `<task>@<unix>` of the tick, or a manual run's trigger name.
    pub fire_id: String,
    pub prepared: P,
    pub kind: RunKind,
    pub retries: Retries,
    /// The tasks that run after this one (`after`): a success requests a run of each.
    pub chained: Arc<[Arc<str>]>,
    /// A pooled task's items this run is for (`ZKCRON_WORK_ITEMS`), when its claim named
    /// them; `None`: every item of the task's (or it has none).
    pub work_items: Option<Arc<[String]>>,
}

/// Which run a [`Spawn`] starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    /// A tick of the schedule (or an orphan rerun).
    Scheduled,
    /// A manual run (`zkcron trigger`): its tick is the time it was requested.
    Manual,
    /// A backfill's tick (`zkcron backfill`): a historic tick, under its backfill fire id.
    Backfill,
}

/// Whether a run may retry a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retries {
    Allowed,
    /// The task was stopped while the run's claim was on its way: the claim is honoured, but
    /// the run gets no retries.
    Cancelled,
}

/// How [`Action::StopRuns`] stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopHow {
    /// SIGTERM, then SIGKILL after the task's `kill_grace`.
    Terminate,
    /// SIGKILL now.
    KillNow,
    /// Only a run whose spawn still waits for its instant: it is withdrawn and never spawned
    /// (it ends with [`Input::RunEnded`] as stopped before its instant); a spawned run goes on.
    /// For runs whose ZooKeeper session ended before their spawn: their run records went with
    /// the session, so other nodes may start a run of the task meanwhile.
    Unspawned,
}
