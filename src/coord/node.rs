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
//! # The node's parts
//! [`Node`] holds its configuration and nine parts, each a struct in the module whose methods
//! change it (a reply reaches the part through its step of `then::Then`):
//! - `io` (`calls::Io`): calls in flight and what their replies continue with, timers,
//!   outputs not polled yet, the time of the input being handled.
//! - `life` (`session::Life`): the session, registering as a member, the re-listing after
//!   (re)connecting, the clock's skew, leaving (`ReleaseAll`, `Close`).
//! - `view` (`view::View`): members, their sessions and task sets, which leases exist and
//!   since when some are vacant, whom the node trusts.
//! - `leases` (`leadership::Leases`): when to decide about leases, the ranks, the takes
//!   waiting, the members seen acting, the leadership as last published.
//! - `tasks` (`tasks::Tasks`): this node's own state per task or unit. A lease's life:
//!   `Free` → a decision sends a take (`Taking`) → the take's multi-op creates the ephemeral
//!   lease and bumps the task's epoch (`Held { epoch }`: claims are fenced on that epoch) →
//!   released (no longer designated, drained, stopping) or lost (session ended, given up
//!   because a stranger changed it) → `Free`. Only `leases.rs` changes it, through `Tasks`.
//! - `runs` (`runs::Runs`): this session's live run znodes, the withheld ones, the counts
//!   and waits on other nodes' runs.
//! - `pool` (`pool::Pools`): pooled tasks' claims over their units, their ends, the orphan
//!   checks, the units last published.
//! - `requests` (`requests::Requests`): manual runs, chained runs and backfills as last read,
//!   the manual claims on their way.
//! - `control` (`control::Control`): the operator's drain and pause marks.
//!
//! # Files
//! - `io`: the seam with the drivers: inputs, outputs, ZooKeeper operations, requests.
//! - `calls`: the `io` part: calls in flight, timers, outputs.
//! - `then`: what each call in flight continues with, and the dispatch of replies.
//! - `session`: session states, setup, registration, watches, recreating the tree.
//! - `members`: the member view: listing members and leases, member records, task sets.
//! - `leases`: lease decisions and what applies them: takes, releases, lease events, give-ups.
//! - `acting`: which members act, and how often lease events make the node decide.
//! - `foreign`: which foreign leases the node trusts; deleting those no live member holds.
//! - `tasks`: the node's own state per task: its hold on the lease, record, result, jobs.
//! - `leadership`: what the node tells the daemon it may fire.
//! - `requests`: the daemon's requests, and the queue of work on each task.
//! - `claim`: fire records, fenced claims, unknown outcomes.
//! - `orphans`: runs lost with their node: the orphan check, the `node_lost` ledger entry.
//! - `runs`: live runs, results, and leaving the cluster.
//! - `queued_start`: a queued tick's claim in the multi-op of the result of the run before it.
//! - `history`: each task's run history.
//! - `trigger`: manual and chained runs: trigger znodes and the rule of their claim.
//! - `backfill`: backfill requests: their znodes, the rule of each tick's claim, lost ticks.
//! - `request_claim`: the one claim a manual run, a chained run and a backfill tick share: the
//!   fenced write, a lost answer resolved, a conflict claimed again.
//! - `request_end`: the one end they share: the request set to ended with the run's result,
//!   its chained runs and pause in the same write.
//! - `request_dir`: what the two request directories (`control/triggers`, `control/backfills`)
//!   share: setup, listing, watch events.
//! - `control`: the operator's drain and pause marks; tasks no live node may run, drift.
//! - `units`: tasks that run on every node: each node's unit of them, and the daemon's
//!   requests served on it.
//! - `pool`, `pool_end`, `pool_orphan`: pooled tasks: the claim over the held items' units,
//!   the run's end, the runs lost with their node.
//! - `mark`: the marks the node writes itself (the pause of a task whose run failed).
//! - `view`: the `view` part: members, sessions, task sets, the leases that exist.
//! - `waits`: requests answered when something happens (the end of runs on other nodes).
//! - `clock`: skew verdicts and the cluster's clock.
//! - `gc`: collecting the task sets no member references.
//! - `report`: once-per-change reports for the operator, with their fixes.
//! - `model_zk` (tests only): the in-memory ZooKeeper that the node's tests and the simulation
//!   share.
//! - `tests` (`tests.rs` and `tests/`, one file a subject): the node fed by hand or by
//!   `test_fixtures`' store (one session of `model_zk`), which they import from explicitly.

mod acting;
mod backfill;
mod calls;
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
#[cfg(any(test, feature = "testkit"))]
pub mod model_zk;
mod orphans;
mod pool;
mod pool_end;
mod pool_orphan;
mod queued_start;
mod report;
mod request_claim;
mod request_dir;
mod request_end;
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
mod view;
mod waits;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use semver::Version;

use self::claim::{ClaimJob, ResolveJob};
use self::clock::SkewVerdict;
use self::io::{Answer, CreateMode, Input, Level, Now, OpId, Output, ReqId, ZkOp};
use self::members::Relist;
use self::runs::{ReleaseAllJob, RunEndedJob};
use self::then::{
    AfterEnsure, AfterRecreate, LeaseStep, MemberStep, PoolStep, RequestStep, TaskStep, Then,
};
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
    /// This node's HTTP endpoint as others reach it (`MemberRecord::http`).
    pub http: Option<String>,
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
    /// Claims do not apply `max_runs`: nothing is counted, nothing refused past it.
    pub runs_unlimited: bool,
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

/// The sans-IO cluster node. See the module docs. It is made of parts, each with its own
/// state ("The node's parts" in the module docs); a part's fields are changed by the methods
/// of its own module.
pub struct Node {
    /// Who this node is and how it behaves.
    cfg: NodeConfig,
    /// The cluster's znode paths, under [`NodeConfig::base`].
    paths: Paths,
    /// Calls in flight, timers and outputs (`calls.rs`).
    io: calls::Io,
    /// The session, registration, re-listing, clock skew and leaving (`session.rs`).
    life: session::Life,
    /// Members, their sessions and task sets, the leases that exist (`members.rs`).
    view: view::View,
    /// Lease decisions and the leadership published (`leadership.rs`, `leases.rs`).
    leases: leadership::Leases,
    /// This node's own state per task: its hold on the lease, the fire record and result last
    /// seen, the work queued on the task (`tasks.rs`).
    tasks: tasks::Tasks,
    /// Live runs and the counts and waits on other nodes' runs (`runs.rs`, `waits.rs`).
    runs: runs::Runs,
    /// Pooled tasks' claims, ends and orphan checks (`pool.rs`, `pool_end.rs`, `pool_orphan.rs`).
    pool: pool::Pools,
    /// Manual runs, chained runs and backfills (`requests.rs`, `trigger.rs`, `backfill.rs`).
    requests: requests::Requests,
    /// The operator's marks (drain, pause) and the eligibility and drift reports.
    control: control::Control,
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
            io: calls::Io::new(now),
            life: session::Life::default(),
            view: view::View::default(),
            leases: leadership::Leases::new(leadership.clone()),
            tasks: tasks::Tasks::default(),
            runs: runs::Runs::default(),
            pool: pool::Pools::default(),
            requests: requests::Requests::new(cfg.history_runs),
            control: control::Control::default(),
            cfg,
        };
        node.io.out.push_back(Output::Leadership(leadership));
        node.schedule_periodic();
        node
    }

    /// Feeds one input.
    pub fn handle(&mut self, input: Input, now: Now) {
        self.io.now = now;
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
        self.io.now = now;
        while let Some((&(at, seq), _)) = self.io.timers.first_key_value() {
            if at > now.mono {
                break;
            }
            let timer = self.io.timers.remove(&(at, seq)).expect("present");
            self.on_timer(timer);
        }
        if self.io.retry_at.is_some_and(|at| at <= now.mono) {
            self.io.retry_at = None;
            self.retry();
        }
        if self.leases.recheck_at.is_some_and(|at| at <= now.mono) {
            self.leases.recheck_at = None;
            self.leases.decide_due = true;
        }
        if self.leases.publish_at.is_some_and(|at| at <= now.mono) && !self.leases.decide_due {
            self.publish();
        }
        if std::mem::take(&mut self.leases.decide_due) {
            self.decide_now();
        }
    }

    /// When the node next needs [`Node::handle_timeout`] (monotonic time).
    pub fn poll_timeout(&self) -> Option<Duration> {
        [
            self.io.timers.first_key_value().map(|(&(at, _), _)| at),
            self.leases.recheck_at,
            self.io.retry_at,
            self.leases.publish_at,
            self.leases.decide_due.then_some(self.io.now.mono),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The next output, if any.
    pub fn poll(&mut self) -> Option<Output> {
        self.io.out.pop_front()
    }

    /// The leadership as last published.
    pub fn leadership(&self) -> &Leadership {
        &self.leases.leadership
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

    fn call(&mut self, zk: ZkOp, then: impl Into<Then>) -> OpId {
        let then = then.into();
        let op = self.io.next_op;
        self.io.next_op += 1;
        self.io.pending.insert(
            op,
            Pending {
                generation: self.io.generation,
                sent: self.io.now.wall,
                then,
            },
        );
        self.io.out.push_back(Output::Call { op, zk });
        op
    }

    fn answer(&mut self, req: ReqId, answer: Answer) {
        if self.pool_sub_answer(req, &answer) {
            return;
        }
        self.waited_answer(req, answer);
    }

    fn at(&mut self, at: Duration, timer: Timer) {
        self.io.timer_seq += 1;
        self.io.timers.insert((at, self.io.timer_seq), timer);
    }

    fn session_hex(&self) -> String {
        self.life
            .session
            .as_ref()
            .map(|s| s.hex.clone())
            .unwrap_or_default()
    }

    fn my_session(&self) -> Option<i64> {
        self.life.session.as_ref().map(|s| s.id)
    }

    /// Connected, set up, registered and listed: decisions may be made.
    fn ready(&self) -> bool {
        self.life
            .session
            .as_ref()
            .is_some_and(|s| s.connected && s.listed)
            && !self.life.closed
    }

    /// Ready, and not re-listing after a reconnect: what it holds may be fired.
    fn firing(&self) -> bool {
        self.ready() && self.life.relist.is_none()
    }

    /// Whether `owner` is the session of a live member (this node's included).
    fn live_owner(&self, owner: i64) -> bool {
        owner != 0
            && (Some(owner) == self.my_session()
                || self.view.member_sessions.values().any(|&s| s == owner))
    }

    /// Whether a run znode owned by `owner` is a live run: ephemeral, and of a session that
    /// was a member (stopping nodes leave the membership before their runs end) or was seen
    /// named as the claimer by a fire record.
    fn live_run_owner(&self, owner: i64) -> bool {
        owner != 0
            && (Some(owner) == self.my_session()
                || self.view.seen_sessions.contains(&owner)
                || self.view.claimer_sessions.contains(&owner))
    }

    fn on_timer(&mut self, timer: Timer) {
        match timer {
            Timer::Probe => {
                self.probe(false);
                self.at(self.io.now.mono + clock::CLOCK_PROBE, Timer::Probe);
            }
            Timer::Gc => {
                self.start_gc();
                self.at(self.io.now.mono + gc::TASKSET_GC_EVERY, Timer::Gc);
            }
            Timer::LossDeadline { generation } => self.on_loss_deadline(generation),
            Timer::Resolve(job) => self.resolve_read(job),
            Timer::RunEnded(job) => self.run_ended_attempt(job),
            Timer::HeldResult { task } => self.on_held_result_due(&task),
            Timer::Triggers => self.on_triggers_timer(),
            Timer::ControlRead { generation } => self.reread_control(generation),
            Timer::PoolEnded(end) => self.pool_end_attempt(end),
            Timer::CloseAnyway => {
                if let Some(req) = self.life.close_waiting.take() {
                    self.close_now(req);
                }
            }
        }
    }

    fn schedule_periodic(&mut self) {
        let first_probe = self.io.now.mono + clock::CLOCK_PROBE;
        self.at(first_probe, Timer::Probe);
        // The first collection at a point of the period that differs by node.
        let spread = (self.cfg.seed % 1_000_000) as f64 / 1_000_000.0;
        let first_gc = self.io.now.mono + gc::TASKSET_GC_EVERY.mul_f64(spread);
        self.at(first_gc, Timer::Gc);
        self.at(self.io.now.mono + trigger::GC_EVERY, Timer::Triggers);
    }

    /// Schedules [`Node::retry`] after a growing delay (setup, registration or takes failed).
    fn retry_later(&mut self) {
        let at = self.io.now.mono + self.io.retry_delay;
        acting::sooner(&mut self.io.retry_at, at);
        self.io.retry_delay = (self.io.retry_delay * 2).min(Duration::from_secs(10));
    }

    fn retry(&mut self) {
        let Some(session) = &self.life.session else {
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
        if self.life.registering.is_some() || self.life.relist.is_some() {
            return;
        }
        if !listed {
            if self.life.registered_as.is_some() {
                self.start_relist();
            }
            return;
        }
        self.decide();
    }
}
