//! The cluster node as a deterministic state machine, in the style of quinn-proto: no I/O, no
//! clock, no tokio.
//!
//! [`Node`] owns everything the cluster protocol decides: the member view and ranking, lease
//! decisions ([`super::lease::decide`]), claims with fencing and unknown-outcome resolution,
//! session states (connected / paused / expired), clock-skew verdicts, what it publishes, and
//! which znodes it trusts. Inputs go in with the time they arrive ([`Node::handle`],
//! [`Node::handle_timeout`]); [`Node::poll`] yields outputs: ZooKeeper operations to perform,
//! leadership changes, answers to the daemon's requests and reports for the operator.
//! [`Node::poll_timeout`] says when it next needs the time.
//!
//! Drivers: `coord::zk` (zookeeper-client, tokio) and the simulation (`tests/sim`, virtual time
//! over an in-memory ZooKeeper). See [`io`] for the seam.
//!
//! # Files
//! - `io`: the seam with the drivers: inputs, outputs, ZooKeeper operations, requests.
//! - `then`: what each call in flight continues with, and the dispatch of replies.
//! - `session`: session states, setup, registration, watches, recreating the tree.
//! - `members`: the member view: listing members and leases, member records, task sets.
//! - `leases`: lease decisions and what applies them: takes, releases, lease events, give-ups.
//! - `acting`: which members act, and how often lease events make the node decide.
//! - `foreign`: which foreign leases the node trusts; deleting those no live member holds.
//! - `tasks`: the node's own state per task: its hold on the lease, record, result, jobs.
//! - `leadership`: what the node tells the daemon it may fire.
//! - `requests`: the daemon's requests, and the queue of work on each task.
//! - `claim`: fire records, fenced claims, unknown outcomes, orphans.
//! - `runs`: live runs, results, and leaving the cluster.
//! - `queued_start`: a queued tick's claim in the multi-op of the result of the run before it.
//! - `history`: each task's run history.
//! - `trigger`: manual runs: trigger znodes, their claim and their end.
//! - `backfill`: backfill requests: their znodes, the claim of each tick and its end.
//! - `request_claim`: the one fenced claim a manual run, a chained run and a backfill tick share.
//! - `request_dir`: what the two request directories (`control/triggers`, `control/backfills`)
//!   share: setup, listing, watch events.
//! - `control`: the operator's drain and pause marks; tasks no live node may run, drift.
//! - `units`: tasks that run on every node: each node's unit of them, and the daemon's
//!   requests served on it.
//! - `pool`, `pool_end`, `pool_orphan`: pooled tasks: the claim over the held items' units,
//!   the run's end, the runs lost with their node.
//! - `mark`: the marks the node writes itself (the pause of a task whose run failed).
//! - `waits`: requests answered when something happens (the end of runs on other nodes).
//! - `clock`: skew verdicts and the cluster's clock.
//! - `gc`: collecting the task sets no member references.
//! - `report`: once-per-change reports for the operator, with their fixes.
//! - `tests` (`tests.rs` and `tests/`, one file a subject): the node fed by hand or by the
//!   small in-memory ZooKeeper of `test_fixtures`, which they import from explicitly.

mod acting;
mod backfill;
mod claim;
mod clock;
mod control;
mod foreign;
mod gc;
mod history;
pub mod io;
mod leadership;
mod leases;
mod mark;
mod members;
mod pool;
mod pool_end;
mod pool_orphan;
mod queued_start;
mod report;
mod request_claim;
mod request_dir;
mod requests;
mod runs;
mod session;
mod tasks;
#[cfg(test)]
mod test_fixtures;
#[cfg(test)]
mod tests;
mod then;
mod trigger;
mod units;
mod waits;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use semver::Version;

use self::claim::{ClaimJob, ResolveJob};
use self::clock::SkewVerdict;
use self::io::{Answer, CreateMode, Input, Level, Now, OpId, Output, ReqId, ZkOp};
use self::members::Relist;
use self::runs::{ReleaseAllJob, RunEndedJob};
use self::session::{RegisterJob, Registration};
use self::then::{AfterEnsure, AfterRecreate, Then};
use super::Leadership;
use super::lease::{self, Member, TaskSet};
use super::records::{Paths, TaskSetRef};

pub use self::clock::{SKEW_WARNING, clock_offset_ms};
pub use self::gc::unreferenced_chunks;

/// Who this node is and how it behaves.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub id: String,
    pub release: Version,
    /// The random 64-bit rendezvous seed (also spreads this node's periodic work).
    pub seed: u64,
    /// The cluster's root znode: `<chroot>/zkcron/<cluster>`.
    pub base: String,
    /// The connect string, for messages.
    pub connect: String,
    /// The session timeout asked for; ZooKeeper may negotiate another.
    pub session_timeout: Duration,
    /// A node whose clock is further off ZooKeeper's than this leads nothing.
    pub max_clock_skew: Option<Duration>,
    pub labels: BTreeMap<String, String>,
    pub host: String,
    pub pid: u32,
    pub started_at: DateTime<Utc>,
    /// `[scheduler] history_runs`: how many runs a task's history keeps.
    pub history_runs: usize,
    /// The ACL of every znode this node creates (the driver's choice: creator-all when the
    /// session authenticates, open otherwise).
    pub acl: io::NodeAcl,
    /// Deliberate protocol bugs, for proving that the simulation's checker catches them. Off
    /// by default; no configuration file reaches them.
    #[doc(hidden)]
    pub bugs: NodeBugs,
}

/// Test-only protocol bugs (see [`NodeConfig::bugs`]).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeBugs {
    /// Claims check neither the lease, nor the epoch, nor the record's version.
    pub unfenced_claim: bool,
    /// A node that may not lead (clock off, drained) does not check the leases its session may
    /// still own after a release or take without an answer (simulation seed 47).
    pub stray_leases_checked_only_when_leading: bool,
    /// A backfill tick's claim marks it running but does not move the request's progress.
    pub backfill_claim_keeps_progress: bool,
    /// A task that runs on every node is published, leased and claimed as a leader's task:
    /// one node runs each of its ticks instead of every node.
    pub every_node_as_leader: bool,
    /// The chained runs' requests (`after`) are created in a call of their own once the
    /// parent's result is stored, not in the multi-op that stores it.
    pub chain_request_apart: bool,
    /// A pooled task's won claim names every item of the task, not only the units its
    /// multi-op claimed: another node's items run here too (two owners for one item).
    pub pool_runs_every_item: bool,
    /// A failed run's pause (`pause_on_failure`) is created in a call of its own after the
    /// run's end is stored, not in the end's multi-op: a node lost between the two leaves the
    /// failure stored and the task firing.
    pub pause_apart: bool,
}

/// The longest any single ZooKeeper call may take before it counts as failed (the driver's
/// deadline; the node uses it to bound retries).
pub const CALL_DEADLINE: Duration = Duration::from_secs(5);

/// The longest a close waits for the history appends in flight (the last runs' ends) before
/// it closes the session all the same, cutting them off.
pub const CLOSE_WAITS_FOR_HISTORY: Duration = Duration::from_secs(2);

/// How many operations go into one multi when releasing everything.
const RELEASE_BATCH: usize = 500;

/// Lease takes one node keeps in flight at once; a decision's further takes wait in a backlog
/// and are sent as these finish.
const TAKES_IN_FLIGHT: usize = 64;

/// A member as the node knows it: the ranking input.
#[derive(Debug, Clone)]
pub(crate) struct MemberInfo {
    member: Member,
}

/// The current session.
#[derive(Debug)]
struct Session {
    /// The session id ZooKeeper gave: the owner of this node's ephemeral znodes.
    id: i64,
    /// The id in hex, as records and logs name it.
    hex: String,
    /// Connected now (else paused, waiting to reconnect within the session).
    connected: bool,
    /// The timeout ZooKeeper negotiated (deadlines use it, not the configured one).
    timeout: Duration,
    /// When the connection was lost, while it is.
    disconnected_at: Option<Duration>,
    /// This disconnection was already counted as a session loss (at its deadline).
    loss_counted: bool,
    /// Setup calls (tree, watches, first clock probe) not answered yet; `None` once done.
    setup_outstanding: Option<usize>,
    /// Setup completed without a failure (else it is retried).
    set_up: bool,
    /// A setup call failed: setup is retried once all are answered.
    setup_failed: bool,
    /// The first listing of members and leases completed.
    listed: bool,
}

/// A call in flight.
#[derive(Debug)]
struct Pending {
    /// The session generation it was sent in: a reply of an older one is dropped.
    generation: u64,
    /// When it was sent, by the local clock.
    sent: DateTime<Utc>,
    /// What its reply continues with.
    then: Then,
}

/// Work on one task that must not overlap another (a claim, releasing the lease).
#[derive(Debug)]
enum TaskJob {
    /// Claim a tick (or rerun an orphaned one).
    Claim(ClaimJob),
    /// Release the lease incarnation that set this epoch version.
    Release { epoch: i32 },
    /// Claim a tick of a pooled task over its held units (the request, in `Node::pools`).
    Pool(ReqId),
}

/// What a timer of the node does when due.
#[derive(Debug)]
enum Timer {
    /// Measure the clock skew again (every `CLOCK_PROBE`).
    Probe,
    /// Collect unreferenced task sets (every `TASKSET_GC_EVERY`).
    Gc,
    /// A disconnection lasted the negotiated timeout: the session counts as lost.
    LossDeadline { generation: u64 },
    /// Re-read the record of a claim whose outcome is unknown.
    Resolve(ResolveJob),
    /// Try again to record a run's end.
    RunEnded(RunEndedJob),
    /// A run's result held for the claim of the tick queued behind it is written alone.
    HeldResult { task: String },
    /// Delete the triggers that ended long enough ago (every `trigger::GC_EVERY`).
    Triggers,
    /// Read the operator's marks again (a read after a watch event failed).
    ControlRead { generation: u64 },
    /// A close that waited [`CLOSE_WAITS_FOR_HISTORY`] for history appends closes now.
    CloseAnyway,
    /// Try again to record a pooled run's end.
    PoolEnded(pool_end::PoolEnd),
}

/// The sans-IO cluster node. See the module docs.
pub struct Node {
    /// Who this node is and how it behaves.
    cfg: NodeConfig,
    /// The cluster's znode paths, under [`NodeConfig::base`].
    paths: Paths,
    /// The time of the input being handled (the node reads no clock).
    now: Now,
    /// Outputs not polled yet, in order.
    out: VecDeque<Output>,
    /// The id of the next call.
    next_op: OpId,
    /// The calls in flight, with what their replies continue with.
    pending: BTreeMap<OpId, Pending>,
    /// Bumped whenever a session ends: replies and timers of older generations are dropped.
    generation: u64,
    /// The current session, from its first connection to its end.
    session: Option<Session>,
    /// The node's timers, by due time (monotonic) and the order they were set.
    timers: BTreeMap<(Duration, u64), Timer>,
    /// The sequence number of the last timer set: timers due at once fire in order.
    timer_seq: u64,
    /// When to decide about leases again (a vacancy timer).
    recheck_at: Option<Duration>,
    /// A decision was asked for: made at the next [`Node::handle_timeout`], which
    /// [`Node::poll_timeout`] asks for at once.
    decide_due: bool,
    /// This node's rank for every task it defines, kept while the members stay the same.
    rank_cache: lease::RankCache,
    /// Decisions made, for the tests that bound them.
    #[cfg(test)]
    decisions: usize,
    /// Setup, registration or a take failed: try again at this time.
    retry_at: Option<Duration>,
    /// The delay before the next retry: doubled by each failure (up to 10 s), reset once
    /// registered.
    retry_delay: Duration,

    // The member and lease view.
    /// This node's task set as published: its reference, its chunks and the set.
    my_set: Option<(TaskSetRef, Vec<Vec<u8>>, Arc<TaskSet>)>,
    /// The members whose record and task set could be used: the ranking's input.
    members: BTreeMap<String, MemberInfo>,
    /// The session owning each ephemeral member znode as last read (whether or not its record
    /// could be used): the live sessions whose leases and runs count.
    member_sessions: BTreeMap<String, i64>,
    /// Every session seen owning a member znode in this node's session: a node that left the
    /// membership to stop keeps its session (and its live runs) until its jobs end.
    seen_sessions: BTreeSet<i64>,
    /// Every session seen owning a run znode of a task whose fire record named it as the
    /// claimer, in this node's session: a zkcron node's, whose runs count as members' do.
    claimer_sessions: BTreeSet<i64>,
    /// Run znodes of sessions neither seen as members nor named by a fire record, by path: the
    /// czxid and when this node first saw them (they count as live for a grace).
    unknown_runs: BTreeMap<String, (i64, Duration)>,
    /// The task sets read so far, by digest (members that define the same tasks share one).
    tasksets: BTreeMap<String, Arc<TaskSet>>,
    /// The task sets being read, by digest, with the members waiting for them.
    fetches: BTreeMap<String, members::Fetch>,
    /// The tasks whose lease exists, whoever holds it, as last seen (every task of the
    /// cluster, not only this node's: decisions read it as a set).
    present: BTreeSet<String>,
    /// This node's leases whose task had no fire record at the session's listing and whose
    /// lease it has not seen since: their first take creates the record in the same multi,
    /// instead of a take that fails on the missing epoch first (a failed multi is a write
    /// ZooKeeper logs: a cold start of a new cluster made one per task).
    unrecorded: BTreeSet<String>,
    /// When each absent lease was first seen vacant: a backup covers it only after a bound
    /// (decisions read it as a map).
    vacant_since: BTreeMap<String, Duration>,
    /// When another member last joined or changed: vacancy counts from then too.
    members_changed: Duration,
    /// When the member view (this node's own record included) last changed: a take answered
    /// after it needs a decision (the decisions in between skipped it).
    view_changed: Duration,
    /// Members seen acting: their session, and when (see `acting`).
    acting: BTreeMap<String, (i64, Duration)>,
    /// Probes in flight, by member, with when sent (a reply of an ended session never comes).
    probing: BTreeMap<String, Duration>,
    /// When the last decision was made: lease events decide at most every `DECIDE_EVERY`.
    last_decided: Option<Duration>,
    /// Takes the last decision asked for beyond [`TAKES_IN_FLIGHT`], sent as takes in flight
    /// finish (so a node's share of a cold start is taken at the server's pace, not one batch
    /// per decision); cleared by every decision, which lists them again.
    take_backlog: VecDeque<leases::TakeJob>,
    /// When the leadership was last published (a publication at most every `DECIDE_EVERY`
    /// while many takes are answered).
    last_published: Option<Duration>,
    /// When to publish the leases taken since the last publication.
    publish_at: Option<Duration>,
    /// What the node knows of the owners of foreign leases, by task: checked to be a live
    /// member's, being checked, or a suspect (a session that is no member's) left alone for a
    /// grace period.
    trust: foreign::ForeignTrust,
    /// The registration in flight.
    registering: Option<RegisterJob>,
    /// What the member record says as last written: registering again when it changes.
    registered_as: Option<Registration>,
    /// "Another session is registered as this node" was said: not said again until this node
    /// registers.
    register_waited: bool,
    /// The listing of members and leases in flight (after connecting or reconnecting): the
    /// view is not current, so nothing is decided or fired until it completes.
    relist: Option<Relist>,

    // Fire records, runs, results.
    /// The run znodes this session created and has not deleted (its live runs), by path.
    own_runs: BTreeSet<String>,
    /// The run znodes of claims withheld because the task's pause arrived, whose delete is not
    /// confirmed yet: sent again on reconnecting within the session, so that no run znode of
    /// this live session is left to count as a live run.
    withheld_runs: BTreeSet<String>,
    /// This node's own state per task: its hold on the lease, the fire record and result last
    /// seen, the work queued on the task.
    tasks: tasks::Tasks,
    /// The requests on pooled tasks reading their units' records, by request.
    pools: BTreeMap<ReqId, pool::PoolJob>,
    /// The units each pooled run this node claimed was claimed on, by task and tick, until
    /// the run's end is recorded.
    pool_runs: BTreeMap<(String, DateTime<Utc>), Vec<String>>,
    /// The ends of pooled runs reading their units' results, by request.
    pool_ends: BTreeMap<ReqId, pool_end::PoolEnd>,
    /// The units of pooled tasks held at the last publication, with their lease incarnations
    /// (a unit gained or taken again since counts in [`Leadership::gained`]).
    published_units: BTreeSet<(String, i32)>,
    /// The pooled tasks' orphan checks in flight, and the lost runs they found.
    orphan_checks: pool_orphan::OrphanChecks,
    /// Counts of other nodes' live runs in flight, by request.
    runs_counts: BTreeMap<ReqId, runs::RunsCount>,
    /// Requests waiting for the end of runs on other nodes.
    run_waits: waits::RunWaits,
    /// Leaving the cluster (`ReleaseAll`) in flight.
    release_all: Option<ReleaseAllJob>,

    // Clock.
    /// Whether this node's clock is close enough to ZooKeeper's to lead, as last measured.
    skew: Option<SkewVerdict>,
    /// This node's clock offset from ZooKeeper's, as last measured (ms, positive = ahead).
    offset_ms: Option<i64>,

    /// `ReleaseAll` was asked for: the node leads nothing from here on and never registers
    /// again.
    stopping: bool,
    /// `Close` was done: the session is closed and no new one is taken up.
    closed: bool,
    /// A close asked for while history appends were in flight ([`Node::close_after_history`]).
    close_waiting: Option<ReqId>,
    /// The leadership as last published to the daemon.
    leadership: Leadership,
    /// The task-set collection in flight.
    gc: Option<gc::Gc>,
    /// Problems already reported (by key), so each is logged once per change.
    reported: BTreeSet<String>,
    /// The operator's marks (drain, pause) and the eligibility and drift reports.
    control: control::Control,

    // Manual runs and history.
    /// Every trigger under `control/triggers` as last read, by name (= fire id).
    triggers: BTreeMap<String, trigger::Known>,
    /// Manual claims sent and not answered `Claimed` yet: their `claimed_at`.
    manual_sent: BTreeMap<String, DateTime<Utc>>,
    /// Every backfill request under `control/backfills` as last read, by name.
    backfills: BTreeMap<String, backfill::Known>,
    /// The requests with a lost tick's end or a deletion on its way.
    backfill_sweeping: BTreeSet<String>,
    /// `[scheduler] history_runs`: how many runs a task's history keeps.
    history_runs: usize,
}

impl Node {
    pub fn new(cfg: NodeConfig, now: Now) -> Node {
        let leadership = Leadership {
            paused: true,
            why_paused: Some(format!("connecting to ZooKeeper at {}", cfg.connect)),
            ..Leadership::default()
        };
        let mut node = Node {
            paths: Paths {
                base: cfg.base.clone(),
            },
            now,
            out: VecDeque::new(),
            next_op: 1,
            pending: BTreeMap::new(),
            generation: 0,
            session: None,
            timers: BTreeMap::new(),
            timer_seq: 0,
            recheck_at: None,
            decide_due: false,
            rank_cache: lease::RankCache::default(),
            #[cfg(test)]
            decisions: 0,
            retry_at: None,
            retry_delay: Duration::from_millis(200),
            my_set: None,
            members: BTreeMap::new(),
            member_sessions: BTreeMap::new(),
            seen_sessions: BTreeSet::new(),
            claimer_sessions: BTreeSet::new(),
            unknown_runs: BTreeMap::new(),
            tasksets: BTreeMap::new(),
            fetches: BTreeMap::new(),
            present: BTreeSet::new(),
            unrecorded: BTreeSet::new(),
            vacant_since: BTreeMap::new(),
            members_changed: Duration::ZERO,
            view_changed: Duration::ZERO,
            acting: BTreeMap::new(),
            probing: BTreeMap::new(),
            last_decided: None,
            take_backlog: VecDeque::new(),
            last_published: None,
            publish_at: None,
            trust: foreign::ForeignTrust::default(),
            registering: None,
            registered_as: None,
            register_waited: false,
            relist: None,
            own_runs: BTreeSet::new(),
            withheld_runs: BTreeSet::new(),
            tasks: tasks::Tasks::default(),
            pools: BTreeMap::new(),
            pool_runs: BTreeMap::new(),
            pool_ends: BTreeMap::new(),
            orphan_checks: pool_orphan::OrphanChecks::default(),
            published_units: BTreeSet::new(),
            runs_counts: BTreeMap::new(),
            run_waits: waits::RunWaits::default(),
            release_all: None,
            skew: None,
            offset_ms: None,
            stopping: false,
            closed: false,
            close_waiting: None,
            leadership: leadership.clone(),
            gc: None,
            reported: BTreeSet::new(),
            control: control::Control::default(),
            triggers: BTreeMap::new(),
            manual_sent: BTreeMap::new(),
            backfills: BTreeMap::new(),
            backfill_sweeping: BTreeSet::new(),
            history_runs: cfg.history_runs,
            cfg,
        };
        node.out.push_back(Output::Leadership(leadership));
        node.schedule_periodic();
        node
    }

    /// Feeds one input.
    pub fn handle(&mut self, input: Input, now: Now) {
        self.now = now;
        match input {
            Input::Connected {
                session_id,
                negotiated_timeout,
            } => self.on_connected(session_id, negotiated_timeout),
            Input::ConnectFailed { error } => self.on_connect_failed(error),
            Input::Disconnected => self.on_disconnected(),
            Input::Expired => self.on_expired(),
            Input::Watch { path, kind } => self.on_watch(&path, kind),
            Input::Reply { op, result } => self.on_reply(op, result),
            Input::Request { req, request } => {
                let request = self.onto_units(request);
                self.on_request(req, request)
            }
        }
    }

    /// Processes whatever is due at `now` (see [`Node::poll_timeout`]).
    pub fn handle_timeout(&mut self, now: Now) {
        self.now = now;
        while let Some((&(at, seq), _)) = self.timers.first_key_value() {
            if at > now.mono {
                break;
            }
            let timer = self.timers.remove(&(at, seq)).expect("present");
            self.on_timer(timer);
        }
        if self.retry_at.is_some_and(|at| at <= now.mono) {
            self.retry_at = None;
            self.retry();
        }
        if self.recheck_at.is_some_and(|at| at <= now.mono) {
            self.recheck_at = None;
            self.decide_due = true;
        }
        if self.publish_at.is_some_and(|at| at <= now.mono) && !self.decide_due {
            self.publish();
        }
        if std::mem::take(&mut self.decide_due) {
            self.decide_now();
        }
    }

    /// When the node next needs [`Node::handle_timeout`] (monotonic time).
    pub fn poll_timeout(&self) -> Option<Duration> {
        [
            self.timers.first_key_value().map(|(&(at, _), _)| at),
            self.recheck_at,
            self.retry_at,
            self.publish_at,
            self.decide_due.then_some(self.now.mono),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The next output, if any.
    pub fn poll(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// The leadership as last published.
    pub fn leadership(&self) -> &Leadership {
        &self.leadership
    }

    // ---- plumbing ----

    /// Creates the persistent, empty znode `path` (a directory of the tree), with this node's
    /// ACL.
    fn create_dir(&self, path: String) -> ZkOp {
        ZkOp::Create {
            path,
            data: Vec::new(),
            mode: CreateMode::Persistent,
            acl: self.cfg.acl,
        }
    }

    /// Writes the persistent record `path`: at the `version` read, or created when there was
    /// none (`None`), so a concurrent writer makes it fail rather than be overwritten.
    fn put_record(&self, path: String, data: Vec<u8>, version: Option<i32>) -> ZkOp {
        match version {
            Some(version) => ZkOp::SetData {
                path,
                data,
                version: Some(version),
            },
            None => ZkOp::Create {
                path,
                data,
                mode: CreateMode::Persistent,
                acl: self.cfg.acl,
            },
        }
    }

    fn call(&mut self, zk: ZkOp, then: Then) -> OpId {
        let op = self.next_op;
        self.next_op += 1;
        self.pending.insert(
            op,
            Pending {
                generation: self.generation,
                sent: self.now.wall,
                then,
            },
        );
        self.out.push_back(Output::Call { op, zk });
        op
    }

    fn answer(&mut self, req: ReqId, answer: Answer) {
        if self.pool_sub_answer(req, &answer) {
            return;
        }
        self.waited_answer(req, answer);
    }

    fn at(&mut self, at: Duration, timer: Timer) {
        self.timer_seq += 1;
        self.timers.insert((at, self.timer_seq), timer);
    }

    fn session_hex(&self) -> String {
        self.session
            .as_ref()
            .map(|s| s.hex.clone())
            .unwrap_or_default()
    }

    fn my_session(&self) -> Option<i64> {
        self.session.as_ref().map(|s| s.id)
    }

    /// Connected, set up, registered and listed: decisions may be made.
    fn ready(&self) -> bool {
        self.session
            .as_ref()
            .is_some_and(|s| s.connected && s.listed)
            && !self.closed
    }

    /// Ready, and not re-listing after a reconnect: what it holds may be fired.
    fn firing(&self) -> bool {
        self.ready() && self.relist.is_none()
    }

    /// Whether `owner` is the session of a live member (this node's included).
    fn live_owner(&self, owner: i64) -> bool {
        owner != 0
            && (Some(owner) == self.my_session()
                || self.member_sessions.values().any(|&s| s == owner))
    }

    /// Whether a run znode owned by `owner` is a live run: ephemeral, and of a session that
    /// was a member (stopping nodes leave the membership before their runs end) or was seen
    /// named as the claimer by a fire record.
    fn live_run_owner(&self, owner: i64) -> bool {
        owner != 0
            && (Some(owner) == self.my_session()
                || self.seen_sessions.contains(&owner)
                || self.claimer_sessions.contains(&owner))
    }

    fn on_timer(&mut self, timer: Timer) {
        match timer {
            Timer::Probe => {
                self.probe(false);
                self.at(self.now.mono + clock::CLOCK_PROBE, Timer::Probe);
            }
            Timer::Gc => {
                self.start_gc();
                self.at(self.now.mono + gc::TASKSET_GC_EVERY, Timer::Gc);
            }
            Timer::LossDeadline { generation } => self.on_loss_deadline(generation),
            Timer::Resolve(job) => self.resolve_read(job),
            Timer::RunEnded(job) => self.run_ended_attempt(job),
            Timer::HeldResult { task } => self.on_held_result_due(&task),
            Timer::Triggers => self.on_triggers_timer(),
            Timer::ControlRead { generation } => self.reread_control(generation),
            Timer::PoolEnded(end) => self.pool_end_attempt(end),
            Timer::CloseAnyway => {
                if let Some(req) = self.close_waiting.take() {
                    self.close_now(req);
                }
            }
        }
    }

    fn schedule_periodic(&mut self) {
        let first_probe = self.now.mono + clock::CLOCK_PROBE;
        self.at(first_probe, Timer::Probe);
        // The first collection at a point of the period that differs by node.
        let spread = (self.cfg.seed % 1_000_000) as f64 / 1_000_000.0;
        let first_gc = self.now.mono + gc::TASKSET_GC_EVERY.mul_f64(spread);
        self.at(first_gc, Timer::Gc);
        self.at(self.now.mono + trigger::GC_EVERY, Timer::Triggers);
    }

    /// Schedules [`Node::retry`] after a growing delay (setup, registration or takes failed).
    fn retry_later(&mut self) {
        let at = self.now.mono + self.retry_delay;
        acting::sooner(&mut self.retry_at, at);
        self.retry_delay = (self.retry_delay * 2).min(Duration::from_secs(10));
    }

    fn retry(&mut self) {
        let Some(session) = &self.session else {
            return;
        };
        if session.setup_outstanding.is_some() || !session.connected {
            return;
        }
        if !session.set_up {
            return self.setup();
        }
        let listed = session.listed;
        self.maybe_register();
        if self.registering.is_some() || self.relist.is_some() {
            return;
        }
        if !listed {
            if self.registered_as.is_some() {
                self.start_relist();
            }
            return;
        }
        self.decide();
    }
}
