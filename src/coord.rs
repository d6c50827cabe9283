//! The coordination seam: what the scheduler asks of the cluster.
//!
//! The daemon never decides on its own whether a tick may run. It asks a [`Coordinator`]: which
//! tasks this node leads right now, what the last claimed tick of a task is, and to claim a tick
//! before its process starts. A claim that is not won means the tick does not run. Run records
//! say which runs are live and how the last one ended.
//!
//! Backends: [`local::LocalCoordinator`] (one node owns every task, fire records in `state_dir`)
//! and [`zk::ZkCoordinator`] (a cluster; leases and fenced claims in ZooKeeper), a thin driver
//! of the sans-IO [`node::Node`], which owns the cluster protocol. [`rank`], [`lease`] and
//! [`record`] are the pure rules it applies; [`records`] are the records both backends and the
//! node read and write. [`pool`] says who owns which item of a work pool; [`backfill`] holds
//! backfill requests and the rules of their claims and ends, for both backends. [`operator`]
//! is the operator's writes (pause, resume, drain, undrain; the requests of trigger and
//! backfill, a backfill's cancel) as pure functions to [`zkop::ZkOp`]s, the operations the
//! node emits too.

pub mod backfill;
pub mod lease;
pub mod local;
pub mod node;
pub mod operator;
pub mod pool;
pub mod rank;
pub mod record;
pub mod records;
pub mod zk;
pub mod zkop;

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::plan::ledger::TickEntry;
use crate::task::TaskSpec;

/// The tasks this node may fire now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leadership {
    /// True while the node cannot be sure of its leases (e.g. disconnected): fire nothing.
    pub paused: bool,
    /// The tasks this node leads (names shared with the tasks' specs where the backend has
    /// them: one allocation per name, not one per map).
    pub tasks: Arc<BTreeSet<Arc<str>>>,
    /// Counts the times this node lost its session (expired, or disconnected for longer than
    /// the session timeout): from then on other nodes may run its tasks. Tasks with
    /// `kill_on_session_loss` stop their runs when it grows.
    pub session_losses: u64,
    /// Why `paused` is set, in words for the operator (`systemctl status`): e.g. "cannot reach
    /// ZooKeeper at 127.0.0.1:2181 (...)". `None` when the backend has nothing to add.
    pub why_paused: Option<String>,
    /// The tasks the operator paused (`zkcron pause`), cluster-wide: a leader keeps their
    /// leases and fires nothing of them.
    pub paused_tasks: Arc<BTreeSet<String>>,
    /// The tasks this node defines that no live node may run (`version_req`, `require_labels`,
    /// drains): their ticks pass unrun (`zkcron_task_no_eligible_node`).
    pub no_eligible: Arc<BTreeSet<String>>,
    /// Pending manual runs (`zkcron trigger`) of the tasks this node leads, by task, oldest
    /// first. The daemon runs each once, after [`Coordinator::claim_manual`] says `Claimed`.
    pub triggers: Arc<BTreeMap<String, Vec<Trigger>>>,
    /// Active backfills (`zkcron backfill`) of the tasks this node leads that want their next
    /// tick claimed (none of theirs runs), by task, oldest first. The daemon claims each tick
    /// with [`Coordinator::claim_manual`] under its backfill fire id.
    pub backfills: Arc<BTreeMap<String, Vec<backfill::Backfill>>>,
    /// For each pooled task this node fires, how often it came to hold another of its items'
    /// units while firing it: a change makes the daemon fire the task afresh from its fire
    /// record (the held units' oldest), so that a gained item's missed ticks are caught up
    /// (`catch_up`) and its run lost with its node is checked (`on_node_loss`).
    pub gained: Arc<BTreeMap<String, u64>>,
    /// For each pooled task this node fires, how many of its items' units it holds: it runs
    /// those items each tick (`zkcron_work_items`). Empty on the embedded backend, whose one
    /// host runs every item.
    pub items_held: Arc<BTreeMap<String, usize>>,
}

/// A manual run asked for by `zkcron trigger`: its fire id (`<task>@manual-<10 digits>`, which
/// no scheduled tick can have) and when it was asked for (its `ZKCRON_SCHEDULED_AT`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Trigger {
    pub fire_id: String,
    pub requested_at: DateTime<Utc>,
}

impl Leadership {
    /// Whether the node may fire `task` now: it leads it, is sure of it, and the task is not
    /// paused.
    pub fn may_fire(&self, task: &str) -> bool {
        !self.paused && self.tasks.contains(task) && !self.paused_tasks.contains(task)
    }
}

/// What the claimer will do with a tick it wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimIntent {
    /// Start a run: the backend records the run as live (atomically with the claim) until
    /// [`Coordinator::run_ended`].
    Run,
    /// Consume the tick without running it (`overlap = "skip"` while a run is live).
    Skip,
    /// Consume the tick and record it as the task's queued tick (`overlap = "queue"` while a
    /// run is live): it runs when that run ends, claimed then with [`ClaimIntent::RunQueued`].
    Queue,
    /// Consume the tick without running it because a tick is queued already (`overlap =
    /// "queue"`: at most one waits). The backend treats it as [`ClaimIntent::Skip`].
    Drop,
    /// Start the task's queued tick: admitted only while the fire record names it as queued;
    /// the record's tick stays, the queued tick is cleared and the run recorded as live, in one
    /// step.
    RunQueued,
    /// Claim no tick: only write the ticks not run that the claim carries into the fire record
    /// (`plan::ledger`), fenced as any claim; the record's tick, claimer and queued tick stay.
    Note,
}

impl ClaimIntent {
    /// Whether a won claim starts a run (recorded as live with the claim).
    pub fn runs(self) -> bool {
        matches!(self, ClaimIntent::Run | ClaimIntent::RunQueued)
    }
}

/// The answer to a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The fire record now names this tick: run it.
    Claimed,
    /// The fire record is already at or past this tick: someone ran or skipped it. Do not run.
    AlreadyClaimed { record: DateTime<Utc> },
    /// This node does not hold the task's lease. Do not run.
    NotLeader,
    /// The task ran its `max_runs` scheduled ticks (`runs` of them): it is done. Do not run,
    /// and claim no more.
    Done { runs: u64 },
}

/// A claim's outcome and, when the backend splits a pooled task's items over the nodes, the
/// items it won, in the task file's order (`None`: every item, or the task has none).
pub type ClaimedShare = (ClaimOutcome, Option<Arc<[String]>>);

/// How a run ended, as stored with the task.
///
/// The fields after `finished_at` are what the history and a trigger's end need; they are not
/// part of the stored `result` record (whose JSON nodes of earlier releases share), so they
/// are never serialized.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunResult {
    /// The tick the run was for.
    pub tick: DateTime<Utc>,
    pub node: String,
    /// "exit code 0", "killed by signal 9 (SIGKILL)", "timed out", ...
    pub exit: String,
    pub success: bool,
    pub attempts: u32,
    pub duration_ms: u64,
    pub finished_at: DateTime<Utc>,
    /// The run's fire id (`<task>@<unix>` or `<task>@manual-<10 digits>`); `None`: derived
    /// from `tick`.
    #[serde(skip)]
    pub fire_id: Option<String>,
    /// A manual run (`zkcron trigger`) or a backfill tick (told apart by the fire id): its end
    /// goes to the trigger or the backfill request, not to the fire record's `result`, and
    /// `tick` is when it was requested (a backfill's: the historic tick).
    #[serde(skip)]
    pub manual: bool,
    /// The last attempt's exit code, if its main process exited.
    #[serde(skip)]
    pub exit_code: Option<i32>,
    /// The signal that killed the last attempt's main process (not a stop by zkcron).
    #[serde(skip)]
    pub signal: Option<i32>,
    /// When the first attempt was spawned; `None`: nothing was spawned.
    #[serde(skip)]
    pub started_at: Option<DateTime<Utc>>,
    /// The release of the node that ran it; `None`: the backend fills in its own.
    #[serde(skip)]
    pub release: Option<String>,
    /// The tasks that run after this one (`after`), for a run that succeeded: the backend
    /// requests one run of each ([`record::chain_fire_id`]) in the same write that stores this
    /// run's end, so a stored success always comes with its chained requests.
    #[serde(skip)]
    pub chained: Vec<Arc<str>>,
    /// A pooled task's run: the work items it ran, in the task file's order (empty for any
    /// other task). A success requests one run of each chained task per item
    /// ([`record::chain_item_fire_id`]).
    #[serde(skip)]
    pub items: Vec<String>,
    /// The pause of the task (`pause_on_failure`) for a run whose last attempt failed: the
    /// backend stores it with this run's end (ZooKeeper: in the same multi-op; the local
    /// backend: synced before the end), so a stored failure always comes with its pause. A
    /// task paused already keeps its mark.
    #[serde(skip)]
    pub pause: Option<Box<records::MarkRecord>>,
    /// A failed run's last lines of output (at most 4 KiB), kept with its history entry.
    #[serde(skip)]
    pub output_tail: Option<Box<str>>,
}

impl RunResult {
    /// The run's fire id: its own, or a scheduled tick's `<task>@<unix>`.
    pub fn fire_id_of(&self, task: &str) -> String {
        self.fire_id
            .clone()
            .unwrap_or_else(|| format!("{task}@{}", self.tick.timestamp()))
    }

    /// What ended a failed run whose main process neither exited nor was killed by a signal
    /// (it was never spawned, or zkcron stopped it): its `exit`, the reason a manual run's or
    /// a backfill tick's request records; `None` for any other run.
    pub fn end_reason(&self) -> Option<&str> {
        (!self.success && self.exit_code.is_none() && self.signal.is_none())
            .then_some(self.exit.as_str())
    }
}

/// A coordination failure the caller must tell apart from a refused claim.
#[derive(Debug, thiserror::Error)]
pub enum CoordError {
    /// The backend could not read or write its records; the outcome of a write is unknown and
    /// must be treated as not claimed.
    ///
    /// The OS error is part of the message and deliberately not a `source()`: a chain printer
    /// (anyhow's `{:#}`) would print it twice ("File exists (os error 17): File exists (os
    /// error 17)"), and the log lines print the message alone.
    #[error("{context}: {error}")]
    Io {
        context: String,
        error: std::io::Error,
    },
    /// Another process already uses this backend's state (two daemons on one state dir).
    #[error("{0}")]
    Busy(String),
    /// The backend's stored state is in a format this release does not read (written by a newer
    /// release). Guessing would lose fire records and run ticks twice, so nothing may fire.
    #[error("{0}")]
    UnreadableState(String),
    /// A ZooKeeper call failed or ran past its deadline. For a write, the outcome was resolved
    /// by re-reading where possible; the caller treats it as not done.
    #[error("{context}: {message}")]
    ZooKeeper { context: String, message: String },
    /// No ZooKeeper session is established (connecting, or rejoining after an expiry).
    #[error("{context}: not connected")]
    NotConnected { context: &'static str },
    /// The ZooKeeper session expired or was replaced while the call was in flight; what it
    /// wrote went with the session's ephemerals.
    #[error("{context}: the session ended")]
    SessionEnded { context: &'static str },
    /// ZooKeeper refused a claim because the session had expired: nothing was claimed.
    #[error("{context}: session expired; not claimed")]
    SessionExpired { context: &'static str },
    /// A claim whose answer was lost, and the re-read record names neither this claim nor a
    /// later one: it counts as not claimed.
    #[error("{context}: {why}")]
    Unknown { context: String, why: String },
    /// An operator's request the backend refused (e.g. a trigger of a task it does not
    /// define); the message says why.
    #[error("{0}")]
    Refused(String),
}

/// What the scheduler asks of the cluster. Implementations are cheap to share (`Arc`).
pub trait Coordinator: Send + Sync + 'static {
    /// Tells the cluster which tasks this node defines; called at start and on every reload.
    fn publish<T: Borrow<TaskSpec> + Sync>(
        &self,
        tasks: &[T],
    ) -> impl Future<Output = Result<(), CoordError>> + Send;

    /// The tasks this node leads now; the receiver sees every change.
    fn leadership(&self) -> watch::Receiver<Leadership>;

    /// The newest tick of `task` that any node claimed, or that the fire record's ledger
    /// accounts for as not run (`record::accounted`), if any: a planner starts after it.
    fn last_claimed(
        &self,
        task: &str,
    ) -> impl Future<Output = Result<Option<DateTime<Utc>>, CoordError>> + Send;

    /// Claims `tick` of `task`: succeeds only while this node leads the task and the task's fire
    /// record is older than `tick`, and then moves the record to `tick`, atomically (with
    /// [`ClaimIntent::Run`], in the same step records the run as live).
    fn claim(
        &self,
        task: &str,
        tick: DateTime<Utc>,
        intent: ClaimIntent,
    ) -> impl Future<Output = Result<ClaimOutcome, CoordError>> + Send {
        async move { Ok(self.claim_noting(task, tick, intent, Vec::new()).await?.0) }
    }

    /// [`Coordinator::claim`], writing `ticks`, the ticks not run since the last claim
    /// (`plan::ledger`), into the fire record in the same step; and naming the work items the
    /// claim won when the backend splits a pooled task's items over the nodes (ZooKeeper):
    /// `Some(items)`, in the task file's order, with `Claimed`; the run gets exactly those.
    /// `None`: the run gets every item (the embedded backend runs a pool on its one host), or
    /// the task has no work items.
    fn claim_noting(
        &self,
        task: &str,
        tick: DateTime<Utc>,
        intent: ClaimIntent,
        ticks: Vec<TickEntry>,
    ) -> impl Future<Output = Result<ClaimedShare, CoordError>> + Send;

    /// The tick of `task` that was claimed to run by a node that is gone, with no result and no
    /// live run: the node died mid-run. `on_node_loss = "rerun"` runs it again.
    fn orphaned_tick(
        &self,
        task: &str,
    ) -> impl Future<Output = Result<Option<DateTime<Utc>>, CoordError>> + Send;

    /// Claims the orphaned `tick` again for this node (see [`Coordinator::orphaned_tick`]), with
    /// the same fencing as [`Coordinator::claim`]; the run is recorded as live.
    fn reclaim(
        &self,
        task: &str,
        tick: DateTime<Utc>,
    ) -> impl Future<Output = Result<ClaimOutcome, CoordError>> + Send;

    /// [`Coordinator::reclaim`], naming the work items reclaimed as
    /// [`Coordinator::claim_share`] names those claimed.
    fn reclaim_share(
        &self,
        task: &str,
        tick: DateTime<Utc>,
    ) -> impl Future<Output = Result<ClaimedShare, CoordError>> + Send {
        async move { Ok((self.reclaim(task, tick).await?, None)) }
    }

    /// Live runs of `task` on other nodes, for `overlap = "skip"` across the cluster.
    fn runs_elsewhere(&self, task: &str) -> impl Future<Output = Result<usize, CoordError>> + Send;

    /// The tick of `task` queued behind a live run (`overlap = "queue"`) and not started yet:
    /// it starts, with [`ClaimIntent::RunQueued`], once no run of the task is live.
    fn queued_tick(
        &self,
        task: &str,
    ) -> impl Future<Output = Result<Option<DateTime<Utc>>, CoordError>> + Send;

    /// Resolves once no run of `task` is live on another node (the deletion of its live-run
    /// record, watched: no polling), or fails (e.g. the session ended).
    fn runs_ended_elsewhere(
        &self,
        task: &str,
    ) -> impl Future<Output = Result<(), CoordError>> + Send;

    /// Records how a run ended; the run is no longer live.
    fn run_ended(
        &self,
        task: &str,
        result: &RunResult,
    ) -> impl Future<Output = Result<(), CoordError>> + Send;

    /// The last recorded result of `task`.
    fn last_result(
        &self,
        task: &str,
    ) -> impl Future<Output = Result<Option<RunResult>, CoordError>> + Send;

    /// Claims the manual run `trigger` of `task` (listed in [`Leadership::triggers`]): succeeds
    /// only while this node leads the task and the trigger is still pending, and then marks it
    /// running on this node, atomically (ZooKeeper: one multi-op checking the lease
    /// incarnation and setting the trigger znode at the version read). A manual run is claimed
    /// at most once; only `Claimed` may start it. Its end goes to [`Coordinator::run_ended`]
    /// with `RunResult::manual` set.
    ///
    /// A backfill tick comes here too, as a trigger with its backfill fire id
    /// ([`backfill::fire_id`]) and the historic tick as `requested_at`: the claim moves the
    /// request's progress by the rules of [`backfill::admit`], fenced the same way.
    fn claim_manual(
        &self,
        task: &str,
        trigger: &Trigger,
    ) -> impl Future<Output = Result<ClaimOutcome, CoordError>> + Send;

    /// Gives up all leadership at once (graceful stop): others may take over immediately.
    fn release_all(&self) -> impl Future<Output = ()> + Send;

    /// Ends the node's presence (after its runs ended): live-run records go at once instead of
    /// when the session times out.
    fn close(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}
