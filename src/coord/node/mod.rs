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
//! Files: `session` (session states, setup, registration, the member view), `leases` (lease
//! decisions, takes, releases, trust in foreign leases), `claim` (fire records, fenced claims,
//! unknown outcomes, orphans), `runs` (live runs and results, releasing everything), `clock`
//! (skew verdicts, the cluster clock), `gc` (task-set collection), `control` (the operator's
//! drain and pause marks; tasks no live node may run, drift).

mod acting;
mod claim;
mod clock;
mod control;
mod foreign;
mod gc;
mod history;
pub mod io;
mod leadership;
mod leases;
mod members;
mod report;
mod requests;
mod runs;
mod session;
#[cfg(test)]
mod tests;
mod then;
mod trigger;

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
use self::session::RegisterJob;
use self::then::{AfterEnsure, AfterRecreate, Then};
use super::Leadership;
use super::lease::{self, Member, TaskSet};
use super::zk::wire::{FireRecord, Paths, TaskSetRef};

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
    id: i64,
    hex: String,
    connected: bool,
    /// The timeout ZooKeeper negotiated (deadlines use it, not the configured one).
    timeout: Duration,
    disconnected_at: Option<Duration>,
    loss_counted: bool,
    /// Setup calls (tree, watches, first clock probe) not answered yet; `None` once done.
    setup_outstanding: Option<usize>,
    /// Setup completed without a failure (else it is retried).
    set_up: bool,
    setup_failed: bool,
    /// The first listing of members and leases completed.
    listed: bool,
}

#[derive(Debug)]
struct Pending {
    generation: u64,
    sent: DateTime<Utc>,
    then: Then,
}

/// Work on one task that must not overlap another (a claim, releasing the lease).
#[derive(Debug)]
enum TaskJob {
    Claim(ClaimJob),
    /// Release the lease incarnation that set this epoch version.
    Release {
        epoch: i32,
    },
}

#[derive(Debug)]
enum Timer {
    Probe,
    Gc,
    LossDeadline {
        generation: u64,
    },
    Resolve(ResolveJob),
    RunEnded(RunEndedJob),
    Triggers,
    /// Read the operator's marks again (a read after a watch event failed).
    ControlRead {
        generation: u64,
    },
    /// A close that waited [`CLOSE_WAITS_FOR_HISTORY`] for history appends closes now.
    CloseAnyway,
}

/// The sans-IO cluster node. See the module docs.
pub struct Node {
    cfg: NodeConfig,
    paths: Paths,
    now: Now,
    out: VecDeque<Output>,
    next_op: OpId,
    pending: BTreeMap<OpId, Pending>,
    /// Bumped whenever a session ends: replies and timers of older generations are dropped.
    generation: u64,
    session: Option<Session>,
    timers: BTreeMap<(Duration, u64), Timer>,
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
    retry_delay: Duration,

    // The member and lease view.
    my_set: Option<(TaskSetRef, Vec<Vec<u8>>, Arc<TaskSet>)>,
    members: BTreeMap<String, MemberInfo>,
    /// The session owning each ephemeral member znode as last read (whether or not its record
    /// could be used): the live sessions whose leases and runs count.
    member_sessions: BTreeMap<String, i64>,
    /// Every session seen owning a member znode in this node's session: a node that left the
    /// membership to stop keeps its session (and its live runs) until its jobs end.
    seen_sessions: BTreeSet<i64>,
    tasksets: BTreeMap<String, Arc<TaskSet>>,
    fetches: BTreeMap<String, members::Fetch>,
    present: BTreeSet<String>,
    /// Leases this node holds, with the epoch version its take set (claims check it).
    held: BTreeMap<String, i32>,
    vacant_since: BTreeMap<String, Duration>,
    covering: BTreeMap<String, Duration>,
    members_changed: Duration,
    /// When the member view (this node's own record included) last changed: a take answered
    /// after it needs a decision (the decisions in between skipped it).
    view_changed: Duration,
    /// Members seen acting: their session, and when (see `acting`).
    acting: BTreeMap<String, (i64, Duration)>,
    /// Probes in flight, by member, with when sent (a reply of an ended session never comes).
    probing: BTreeMap<String, Duration>,
    last_decided: Option<Duration>,
    /// Takes in flight, with when each was sent.
    takes: BTreeMap<String, Duration>,
    /// Takes the last decision asked for beyond [`TAKES_IN_FLIGHT`], sent as takes in flight
    /// finish (so a node's share of a cold start is taken at the server's pace, not one batch
    /// per decision); cleared by every decision, which lists them again.
    take_backlog: VecDeque<(String, bool)>,
    /// When the leadership was last published, and when to publish the leases taken since
    /// (a publication at most every `DECIDE_EVERY` while many takes are answered).
    last_published: Option<Duration>,
    publish_at: Option<Duration>,
    /// Tasks whose znodes were found missing and the tree recreated for (once).
    recreated_for: BTreeSet<String>,
    /// Foreign leases checked to belong to a live member, by task (cleared on lease events).
    verified: BTreeSet<String>,
    /// Takes whose outcome is unknown: the lease may be this session's without it knowing.
    unsure_takes: BTreeSet<String>,
    /// Tasks whose claim in flight found the task's epoch changed under this node's lease: the
    /// claim waits (head of its queue) for the lease to be given up and taken again (`true`
    /// once given up), then runs with the new epoch, or answers `NotLeader` if not retaken.
    regaining: BTreeMap<String, bool>,
    /// Ephemeral leases of a session that is no member's: the lease znode's czxid and when it
    /// was first seen. Deleted only after `FOREIGN_GRACE` (the member read may be in flight).
    suspects: BTreeMap<String, (i64, Duration)>,
    verifying: BTreeSet<String>,
    registering: Option<RegisterJob>,
    /// The task-set digest, `leads` and `drained` last written in the member record.
    registered_as: Option<(String, bool, bool)>,
    register_waited: bool,
    relist: Option<Relist>,

    // Fire records, runs, results.
    records: BTreeMap<String, (FireRecord, i32)>,
    own_runs: BTreeSet<String>,
    results: BTreeMap<String, (DateTime<Utc>, i32)>,
    no_foreign_runs: BTreeMap<String, i32>,
    task_jobs: BTreeMap<String, VecDeque<TaskJob>>,
    runs_counts: BTreeMap<ReqId, runs::RunsCount>,
    release_all: Option<ReleaseAllJob>,

    // Clock.
    skew: Option<SkewVerdict>,
    offset_ms: Option<i64>,

    stopping: bool,
    closed: bool,
    /// A close asked for while history appends were in flight ([`Node::close_after_history`]).
    close_waiting: Option<ReqId>,
    leadership: Leadership,
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
    history_runs: usize,
}

impl Node {
    pub fn new(cfg: NodeConfig, now: Now) -> Node {
        let paths = Paths {
            base: cfg.base.clone(),
        };
        let leadership = Leadership {
            paused: true,
            why_paused: Some(format!("connecting to ZooKeeper at {}", cfg.connect)),
            ..Leadership::default()
        };
        let mut node = Node {
            paths,
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
            tasksets: BTreeMap::new(),
            fetches: BTreeMap::new(),
            present: BTreeSet::new(),
            held: BTreeMap::new(),
            vacant_since: BTreeMap::new(),
            covering: BTreeMap::new(),
            members_changed: Duration::ZERO,
            view_changed: Duration::ZERO,
            acting: BTreeMap::new(),
            probing: BTreeMap::new(),
            last_decided: None,
            takes: BTreeMap::new(),
            take_backlog: VecDeque::new(),
            last_published: None,
            publish_at: None,
            recreated_for: BTreeSet::new(),
            verified: BTreeSet::new(),
            unsure_takes: BTreeSet::new(),
            regaining: BTreeMap::new(),
            suspects: BTreeMap::new(),
            verifying: BTreeSet::new(),
            registering: None,
            registered_as: None,
            register_waited: false,
            relist: None,
            records: BTreeMap::new(),
            own_runs: BTreeSet::new(),
            results: BTreeMap::new(),
            no_foreign_runs: BTreeMap::new(),
            task_jobs: BTreeMap::new(),
            runs_counts: BTreeMap::new(),
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
            Input::Request { req, request } => self.on_request(req, request),
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
        self.out.push_back(Output::Answer { req, answer });
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
    /// was a member (stopping nodes leave the membership before their runs end).
    fn live_run_owner(&self, owner: i64) -> bool {
        owner != 0 && (Some(owner) == self.my_session() || self.seen_sessions.contains(&owner))
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
            Timer::Triggers => self.on_triggers_timer(),
            Timer::ControlRead { generation } => self.reread_control(generation),
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
