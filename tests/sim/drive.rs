//! The harness that drives the real node: a simulated ZooKeeper client and daemon around each
//! [`SimNode`], over the modelled network and the [`ModelZk`] server, in virtual time.
//!
//! Per process: the *client* part does what zookeeper-client does (connect, heartbeats, a read
//! timeout of 2/3 of the session timeout, reconnect with the same session, calls failing with
//! `ConnectionLoss` when the connection drops) and feeds the node `Input::Connected` /
//! `Disconnected` / `Expired` / `Watch` / `Reply`; the *driver* part calls `handle_timeout` at
//! `poll_timeout()` and drains `poll()`; the *daemon* part is the real firing core
//! ([`Firing`], the daemon's per-task rules) fed with the node's leadership and answers: its
//! calls go to the node as `Request`s, its preparations are done at once, its runs start at
//! their due time by the node's clock and end 10 ms–3 s later (some 5–40 s with
//! `Knobs::long_runs`; at once when stopped). A reload of changed task files unloads and loads
//! them in the core, as the daemon does, before the node publishes them. Two deliberate bugs
//! live here, in the shell ([`NodeBug::AssumeClaimedOnLoss`], [`NodeBug::SlowTimer`]); the
//! others are switches of the real core and node.

use std::cmp::Reverse;

use zkcron::coord::node::io::{
    Answered, CreateMode, Input, Now, OpId, Output, ReqId, Request, WatchKind, ZkFail, ZkOk, ZkOp,
};
use zkcron::coord::records::{
    FireRecord as WireRecord, LeaseRecord, MemberRecord, RunRecord, TaskSetEntry, TaskSetRecord,
    TaskSetRef,
};
use zkcron::coord::records::{MarkRecord, TriggerRecord, TriggerState};
use zkcron::coord::{ClaimIntent, ClaimOutcome, Leadership, RunResult};
use zkcron::firing::{
    self, Action as FireAction, Answer as FireAnswer, CallId, Firing, FiringConfig,
    Input as FireInput, RunId, RunKind, StopHow, Unload,
};
use zkcron::task::{CommandLine, OverlapPolicy, Parent, TaskExtras, TaskSpec};

use super::model_zk::{self, ModelZk, Write};
use super::requested::Requested;
use super::*;

/// Adds a line to the trace, formatting it only while tracing.
macro_rules! note {
    ($sim:expr, $node:expr, $task:expr, $what:expr $(,)?) => {
        if $sim.tracing {
            let what: String = $what;
            $sim.note_now($node, $task, what);
        }
    };
}

/// What the world needs of a node: the sans-IO seam (`coord::node::io`).
pub(crate) trait SimNode {
    fn handle(&mut self, input: Input, now: Now);
    fn handle_timeout(&mut self, now: Now);
    fn poll_timeout(&self) -> Option<Duration>;
    fn poll(&mut self) -> Option<Output>;
}

/// What a node is built from.
#[derive(Debug, Clone)]
pub(crate) struct NodeSpec {
    pub(crate) id: String,
    pub(crate) release: Version,
    pub(crate) seed: u64,
    /// The cluster's base znode, e.g. `/zkcron/sim`.
    pub(crate) base: String,
    pub(crate) max_clock_skew: Duration,
    pub(crate) session_timeout: Duration,
    pub(crate) claim_mode: ClaimMode,
    /// The scenario's deliberate bug (the node's own switches read it).
    pub(crate) bug: NodeBug,
}

/// Builds a node (the real one, in [`super::real`]).
pub(crate) type MakeNode = fn(&NodeSpec, Now) -> Box<dyn SimNode>;

pub(crate) const BASE: &str = "/zkcron/sim";

/// A registered member: its node, the session owning its znode, its data.
pub(crate) type Registered = (NodeIx, SessionId, Member);

/// A running node's release and clock offset.
pub(crate) type NodeState = (Version, i64);

/// The index of task `tNN`.
pub(crate) fn task_ix(name: &str) -> TaskIx {
    name[1..].parse().expect("task names are tNN")
}

/// The task as the daemon would load it: identical on every node that defines it, but for
/// the command's argument after `reloads` reloads of changed files on this node.
pub(crate) fn task_spec(def: &TaskDef, reloads: u32) -> TaskSpec {
    let mut argv = vec!["true".to_string()];
    if reloads > 0 {
        argv.push(format!("revision-{reloads}"));
    }
    TaskSpec {
        name: def.name.as_str().into(),
        path: format!("{}.toml", def.name).into(),
        schedule: def.rules.schedule.clone(),
        command: CommandLine::Argv(argv),
        user: None,
        overlap: def.overlap,
        catch_up: def.rules.catch_up,
        jitter: def.rules.jitter,
        kill_on_session_loss: false,
        on_node_loss: Default::default(),
        enabled: true,
        extras: TaskExtras {
            kill_grace: Duration::from_secs(1),
            starting_deadline: def.rules.starting_deadline,
            version_req: def.version_req.clone(),
            run_on: match &def.items {
                Some(items) => zkcron::task::RunOn::Items(items.clone()),
                None if def.every_node => zkcron::task::RunOn::EveryNode,
                None => zkcron::task::RunOn::Leader,
            },
            after: def.after.iter().map(|p| Parent::named(p)).collect(),
            ..Default::default()
        }
        .into(),
    }
}

// ------------------------------------------------------------------------------------------------
// Messages and events
// ------------------------------------------------------------------------------------------------

#[derive(Debug)]
pub(crate) enum Up {
    Connect {
        session: Option<i64>,
    },
    Call {
        op: OpId,
        zk: ZkOp,
    },
    Ping,
    /// The client drops this connection (its session lives on).
    Close,
    /// The client closes its session.
    CloseSession,
}

#[derive(Debug)]
pub(crate) enum Down {
    Connected {
        session: i64,
    },
    /// The session the client asked for has expired.
    Expired,
    Reply {
        op: OpId,
        result: Result<ZkOk, ZkFail>,
    },
    Watch {
        path: String,
        kind: WatchKind,
    },
    Pong,
    /// The server closed the connection: its session expired.
    Closed,
}

#[derive(Debug)]
pub(crate) enum T {
    Ping(u64),
    Reconnect(u64),
    ConnectTimeout(ConnId),
    /// A reply was lost with its connection: the client notices the reset.
    Reset(ConnId),
    /// The node's `poll_timeout()` came due.
    NodeTimeout(u64),
    /// A call made while disconnected fails.
    Fail(OpId),
    /// The firing core's `poll_timeout()` came due.
    CoreTimeout(u64),
    /// A claimed tick's due time came: its run starts.
    Spawn {
        task: TaskIx,
        tick: DateTime<Utc>,
        run: RunId,
    },
    RunEnd {
        task: TaskIx,
        tick: DateTime<Utc>,
        run: RunId,
    },
    /// Give up waiting for a graceful stop.
    StopDeadline,
    /// A manual run (index into `Sim::triggers`) ends.
    ManualEnd {
        k: usize,
        run: RunId,
    },
    /// A backfill tick's run ends.
    BackfillEnd {
        task: TaskIx,
        fire_id: String,
        tick: DateTime<Utc>,
        run: RunId,
    },
    /// The daemon reloads its changed task files.
    Reload,
    /// A chained run (`after`) ends.
    ChainEnd {
        task: TaskIx,
        fire_id: String,
        tick: DateTime<Utc>,
        run: RunId,
        chained: Arc<[Arc<str>]>,
    },
}

#[derive(Debug)]
pub(crate) enum Ev {
    Fault(Fault),
    Up {
        conn: ConnId,
        msg: Up,
    },
    Down {
        node: NodeIx,
        conn: ConnId,
        msg: Down,
        buffered: bool,
    },
    Timer {
        node: NodeIx,
        inc: u64,
        timer: T,
    },
    SessionCheck(i64),
    /// The operator asks for a manual run (index into `Sim::triggers`), as `zkcron trigger`.
    Trigger(usize),
    /// The operator asks for a backfill (index into `Sim::backfills`), as `zkcron backfill`.
    Backfill(usize),
}

#[derive(Debug)]
pub(crate) struct Link {
    pub(crate) node: NodeIx,
    pub(crate) alive: bool,
    pub(crate) session: Option<i64>,
    pub(crate) to_server_at: Ms,
    pub(crate) to_node_at: Ms,
}

// ------------------------------------------------------------------------------------------------
// One process: client, driver and daemon around the node
// ------------------------------------------------------------------------------------------------

/// A run of the firing core on this process.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Run {
    /// Claimed ahead of its due time.
    Waiting,
    /// Withdrawn before its due time because the session that claimed it ended: it never
    /// starts, and no result is stored (the daemon stores none either).
    Withdrawn,
    Running {
        task: TaskIx,
        tick: DateTime<Utc>,
    },
}

/// What a request of the firing core asked, for its answer.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CoreAsk {
    /// The fire record.
    Record,
    /// A claim or reclaim of a tick.
    Claim {
        task: TaskIx,
        tick: DateTime<Utc>,
    },
    Orphan,
    RunsElsewhere,
    Manual,
    /// The queued tick (`overlap = "queue"`).
    Queued,
    /// The wait for the runs on other nodes to end.
    RunsEnded,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Asked {
    Publish,
    /// For the firing core's call `call`.
    Core {
        call: CallId,
        what: CoreAsk,
    },
    RunEnded,
    /// A run's end that requests chained runs (`after`): those of `Sim::chain_requests[k]`.
    ChainParentEnded(usize),
    Release,
    Close,
}

#[derive(Default)]
pub(crate) struct Proc {
    pub(crate) id: String,
    pub(crate) release: Option<Version>,
    pub(crate) seed: u64,
    pub(crate) tasks: Arc<TaskSet>,
    pub(crate) defines: Vec<TaskIx>,
    pub(crate) skew_ms: i64,

    pub(crate) up: bool,
    pub(crate) frozen: bool,
    pub(crate) stopping: bool,
    /// Incarnation: bumped when the process dies, so its timers die with it.
    pub(crate) inc: u64,
    pub(crate) deferred: Vec<Ev>,
    pub(crate) loss_pct: u32,
    pub(crate) booted_at: Ms,
    pub(crate) node: Option<Box<dyn SimNode>>,

    // The ZooKeeper client.
    pub(crate) conn: Option<ConnId>,
    pub(crate) session: Option<i64>,
    pub(crate) connected: bool,
    /// The session expired: the client waits for the node's `NewSession`.
    pub(crate) expired: bool,
    pub(crate) connect_seq: u64,
    pub(crate) ping_generation: u64,
    pub(crate) last_recv: Ms,
    pub(crate) in_flight: BTreeSet<OpId>,
    pub(crate) timeout_generation: u64,
    pub(crate) timeout_at: Option<Ms>,

    // The daemon.
    pub(crate) leadership: Leadership,
    pub(crate) next_req: ReqId,
    pub(crate) asked: BTreeMap<ReqId, Asked>,
    /// The real firing rules of this process's daemon.
    pub(crate) firing: Option<Firing<()>>,
    pub(crate) core_timeout_generation: u64,
    pub(crate) core_timeout_at: Option<Ms>,
    /// The runs the core started, until they end.
    pub(crate) runs: BTreeMap<RunId, Run>,
    /// The tasks that run after each run's task (`after`), from its spawn.
    pub(crate) chained: BTreeMap<RunId, Arc<[Arc<str>]>>,
    /// The item slots each run of a pooled task runs, from its claim (its spawn's items).
    pub(crate) run_items: BTreeMap<RunId, Vec<TaskIx>>,
    /// Requests to hand the node once its outputs are drained.
    pub(crate) requests: VecDeque<(ReqId, Request)>,
    /// How often this node's task files changed (they stay changed across restarts).
    pub(crate) reloads: u32,
}

// ------------------------------------------------------------------------------------------------
// The world
// ------------------------------------------------------------------------------------------------

pub(crate) struct Sim<'s> {
    pub(crate) sc: &'s Scenario,
    pub(crate) make: MakeNode,
    pub(crate) now: Ms,
    pub(crate) queue: BinaryHeap<Reverse<(Ms, u64)>>,
    pub(crate) events: HashMap<u64, Ev>,
    pub(crate) seq: u64,
    pub(crate) rng: StdRng,
    pub(crate) zk: ModelZk,
    pub(crate) links: BTreeMap<ConnId, Link>,
    pub(crate) session_conn: BTreeMap<i64, ConnId>,
    pub(crate) next_conn: u64,
    pub(crate) link_up: Vec<bool>,
    pub(crate) procs: Vec<Proc>,
    pub(crate) by_name: HashMap<String, TaskIx>,
    pub(crate) check: Checker,
    pub(crate) trace: Vec<(Ms, Option<NodeIx>, Option<TaskIx>, String)>,
    pub(crate) stats: Stats,
    pub(crate) reports: u64,
    pub(crate) disturbed: Vec<(Option<NodeIx>, Ms, Ms)>,
    pub(crate) open_disturbance: BTreeMap<(NodeIx, u8), Ms>,
    pub(crate) node_log: Vec<(Ms, NodeIx, Option<NodeState>)>,
    pub(crate) member_log: Vec<(Ms, Vec<Registered>)>,
    /// The session of the stranger client (which also laid out the initial tree).
    pub(crate) stranger: i64,
    /// Trace every call and reply (`ZKCRON_SIM_TRACE`).
    pub(crate) trace_calls: bool,
    /// Keep a trace at all (for the report of a failing scenario).
    pub(crate) tracing: bool,
    /// The operator's manual run requests: task, fire id, request time.
    pub(crate) triggers: Vec<(TaskIx, String, DateTime<Utc>)>,
    /// The operator's backfill requests: task, name, record.
    pub(crate) backfills: Vec<(TaskIx, String, zkcron::coord::backfill::BackfillRecord)>,
    /// The chained runs each success's end requests (`Asked::ChainParentEnded`'s index).
    pub(crate) chain_requests: Vec<Vec<String>>,
    /// Draws for the runs that outlive their task's interval (`Knobs::long_runs`): a stream of
    /// its own, so that the scenarios without long runs stay what they were.
    pub(crate) runs_rng: StdRng,
}

impl<'s> Sim<'s> {
    pub(crate) fn new(sc: &'s Scenario, make: MakeNode) -> Sim<'s> {
        let mut sim = Sim {
            sc,
            make,
            now: 0,
            queue: BinaryHeap::new(),
            events: HashMap::new(),
            seq: 0,
            rng: StdRng::seed_from_u64(sc.seed ^ 0x005e_ed0f_5111),
            zk: ModelZk::new(epoch().timestamp_millis()),
            links: BTreeMap::new(),
            session_conn: BTreeMap::new(),
            next_conn: 0,
            link_up: vec![true; sc.nodes.len()],
            procs: sc
                .nodes
                .iter()
                .map(|def| Proc {
                    id: def.id.clone(),
                    release: Some(def.release.clone()),
                    seed: def.seed,
                    tasks: def.tasks.clone(),
                    defines: {
                        let mut d: Vec<TaskIx> = def.tasks.keys().map(|t| task_ix(t)).collect();
                        d.sort();
                        d
                    },
                    skew_ms: def.skew_ms,
                    ..Proc::default()
                })
                .collect(),
            by_name: sc
                .tasks
                .iter()
                .enumerate()
                .map(|(t, d)| (d.name.clone(), t))
                .collect(),
            check: Checker::default(),
            trace: Vec::new(),
            stats: Stats::default(),
            reports: 0,
            disturbed: Vec::new(),
            open_disturbance: BTreeMap::new(),
            node_log: Vec::new(),
            member_log: vec![(0, Vec::new())],
            stranger: 0,
            trace_calls: std::env::var_os("ZKCRON_SIM_TRACE").is_some(),
            tracing: true,
            triggers: Vec::new(),
            backfills: Vec::new(),
            chain_requests: Vec::new(),
            runs_rng: StdRng::seed_from_u64(sc.seed ^ 0x0010_9e75),
        };
        // The tree an earlier cluster left: the base and the fire records of tasks that fired.
        let admin = sim.zk.open_session(u64::MAX / 4, 0);
        let mut ops = vec!["/zkcron", BASE, &format!("{BASE}/tasks")]
            .into_iter()
            .map(|p| ZkOp::Create {
                path: p.to_string(),
                data: Vec::new(),
                mode: CreateMode::Persistent,
                acl: Default::default(),
            })
            .collect::<Vec<_>>();
        for task in sc.tasks.iter().filter(|t| t.initial_record) {
            let record = WireRecord {
                format: 1,
                tick: Some(epoch()),
                node: String::new(),
                session: String::new(),
                run: false,
                reruns: 0,
                claimed_at: None,
                queued: None,
            };
            ops.push(ZkOp::Create {
                path: format!("{BASE}/tasks/{}", task.name),
                data: serde_json::to_vec(&record).expect("encodes"),
                mode: CreateMode::Persistent,
                acl: Default::default(),
            });
        }
        let mut writes = Vec::new();
        sim.zk
            .apply(admin, &ZkOp::Multi(ops), 0, &mut writes)
            .0
            .expect("the initial tree");
        sim.stranger = admin;
        for (at, fault) in &sc.faults {
            sim.push(*at, Ev::Fault(fault.clone()));
        }
        // Manual runs, at fixed points of every scenario (no draw from the seed's generator,
        // so the scenarios stay what they were): during the faults and while settling.
        if !sc.tasks.is_empty() {
            let settled = sc.fault_end + sc.settle / 2;
            for (k, at) in [sc.fault_end / 3, sc.fault_end * 2 / 3, settled]
                .into_iter()
                .enumerate()
            {
                let task = (sc.seed as usize + k) % sc.task_count();
                let fire_id = format!("{}@manual-{k:010}", sc.tasks[task].name);
                let requested_at = epoch() + TimeDelta::milliseconds(at as i64);
                sim.triggers.push((task, fire_id, requested_at));
                sim.push(at, Ev::Trigger(k));
            }
        }
        sim.plan_backfills(sc);
        sim
    }

    /// The operator creates a pending trigger znode, as `zkcron trigger` does.
    fn create_trigger(&mut self, k: usize) {
        let (task, fire_id, requested_at) = self.triggers[k].clone();
        let record = TriggerRecord {
            format: 1,
            task: self.sc.tasks[task].name.clone(),
            requested_at,
            by: "operator@sim".into(),
            state: TriggerState::Pending,
            node: None,
            claimed_at: None,
            result: None,
            reason: None,
            after: None,
        };
        let dir = |p: &str| ZkOp::Create {
            path: format!("{BASE}/{p}"),
            data: Vec::new(),
            mode: CreateMode::Persistent,
            acl: Default::default(),
        };
        for op in [
            dir("control"),
            dir("control/triggers"),
            ZkOp::Create {
                path: format!("{BASE}/control/triggers/{fire_id}"),
                data: serde_json::to_vec(&record).expect("encodes"),
                mode: CreateMode::Persistent,
                acl: Default::default(),
            },
        ] {
            let mut writes = Vec::new();
            let (result, events) = self.zk.apply(self.stranger, &op, self.now, &mut writes);
            note!(
                self,
                None,
                Some(task),
                format!("operator {op:?}: {result:?}")
            );
            self.broadcast(events);
        }
    }

    pub(crate) fn push(&mut self, at: Ms, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq)));
        self.events.insert(self.seq, ev);
    }

    pub(crate) fn timer(&mut self, n: NodeIx, delay: Ms, timer: T) {
        let inc = self.procs[n].inc;
        self.push(
            self.now + delay,
            Ev::Timer {
                node: n,
                inc,
                timer,
            },
        );
    }

    pub(crate) fn note_now(&mut self, node: Option<NodeIx>, task: Option<TaskIx>, what: String) {
        self.trace.push((self.now, node, task, what));
    }

    pub(crate) fn latency(&mut self) -> Ms {
        if self.rng.random_bool(0.05) {
            self.rng.random_range(20..=300)
        } else {
            self.rng.random_range(1..=15)
        }
    }

    /// This process's clocks: monotonic since it started, wall = true time + its skew.
    pub(crate) fn clock(&self, n: NodeIx) -> Now {
        let p = &self.procs[n];
        Now {
            mono: Duration::from_millis(self.now - p.booted_at),
            wall: self.wall(n),
        }
    }

    pub(crate) fn wall(&self, n: NodeIx) -> DateTime<Utc> {
        epoch() + TimeDelta::milliseconds(self.now as i64 + self.procs[n].skew_ms)
    }

    pub(crate) fn run(&mut self) {
        let mut same_instant = 0u32;
        while let Some(Reverse((at, seq))) = self.queue.pop() {
            if at > self.sc.end {
                break;
            }
            let ev = self.events.remove(&seq).expect("queued");
            same_instant = if at == self.now { same_instant + 1 } else { 0 };
            if same_instant > 2_000 {
                self.check.violations.push(Violation {
                    kind: Kind::BusyLoop,
                    at,
                    task: None,
                    tick: None,
                    detail: format!("2,000 events at one instant; the last: {ev:?}"),
                });
                return;
            }
            self.now = at;
            self.stats.events += 1;
            self.dispatch(ev);
            if self.check.violations.iter().any(Violation::stops_run) {
                return;
            }
        }
        self.now = self.sc.end;
        self.stats.claimed_not_run = self
            .check
            .claims
            .keys()
            .filter(|k| !self.check.runs.contains_key(k))
            .count() as u64;
        self.check_converged();
        self.check_liveness();
        self.check_chains();
    }

    pub(crate) fn dispatch(&mut self, ev: Ev) {
        match ev {
            Ev::Fault(fault) => self.fault(fault),
            Ev::Trigger(k) => self.create_trigger(k),
            Ev::Backfill(k) => self.create_backfill(k),
            Ev::Up { conn, msg } => {
                let l = self.links.get_mut(&conn).expect("known link");
                if !l.alive {
                    return;
                }
                if !self.link_up[l.node] {
                    l.alive = false;
                    return;
                }
                self.server(conn, msg);
            }
            Ev::Down {
                node,
                conn,
                msg,
                buffered,
            } => {
                if !buffered {
                    let l = self.links.get_mut(&conn).expect("known link");
                    if !l.alive {
                        return;
                    }
                    if !self.link_up[node] {
                        l.alive = false;
                        return;
                    }
                }
                let p = &mut self.procs[node];
                if !p.up {
                    return;
                }
                if p.frozen {
                    p.deferred.push(Ev::Down {
                        node,
                        conn,
                        msg,
                        buffered: true,
                    });
                    return;
                }
                self.receive(node, conn, msg);
            }
            Ev::Timer { node, inc, timer } => {
                let p = &mut self.procs[node];
                if !p.up || p.inc != inc {
                    return;
                }
                if p.frozen {
                    p.deferred.push(Ev::Timer { node, inc, timer });
                    return;
                }
                self.on_timer(node, timer);
                // Hand the node what the daemon asked meanwhile.
                self.settle(node);
            }
            Ev::SessionCheck(id) => self.session_check(id),
        }
    }

    // --------------------------------------------------------------------------------------------
    // Network
    // --------------------------------------------------------------------------------------------

    pub(crate) fn open_link(&mut self, node: NodeIx) -> ConnId {
        self.next_conn += 1;
        let id = ConnId(self.next_conn);
        self.links.insert(
            id,
            Link {
                node,
                alive: true,
                session: None,
                to_server_at: 0,
                to_node_at: 0,
            },
        );
        id
    }

    pub(crate) fn kill_link(&mut self, conn: ConnId) {
        if let Some(l) = self.links.get_mut(&conn) {
            l.alive = false;
        }
    }

    pub(crate) fn send_up(&mut self, conn: ConnId, msg: Up) {
        let latency = self.latency();
        let now = self.now;
        let l = self.links.get_mut(&conn).expect("known link");
        if !l.alive {
            return;
        }
        if !self.link_up[l.node] {
            l.alive = false;
            return;
        }
        let at = (now + latency).max(l.to_server_at);
        l.to_server_at = at;
        self.push(at, Ev::Up { conn, msg });
    }

    pub(crate) fn send_down(&mut self, conn: ConnId, msg: Down) {
        let latency = self.latency();
        let now = self.now;
        let l = &self.links[&conn];
        let node = l.node;
        if !l.alive {
            return;
        }
        if !self.link_up[node] {
            self.kill_link(conn);
            return;
        }
        let loss = self.procs[node].loss_pct;
        if loss > 0 && matches!(msg, Down::Reply { .. }) && self.rng.random_range(0..100) < loss {
            // Applied, but the reply is lost with the connection; the client sees a reset.
            self.kill_link(conn);
            self.stats.replies_lost += 1;
            note!(
                self,
                Some(node),
                None,
                "reply lost: connection reset".into()
            );
            let delay = self.rng.random_range(5..=200);
            self.timer(node, delay, T::Reset(conn));
            return;
        }
        let l = self.links.get_mut(&conn).expect("known link");
        let at = (now + latency).max(l.to_node_at);
        l.to_node_at = at;
        self.push(
            at,
            Ev::Down {
                node,
                conn,
                msg,
                buffered: false,
            },
        );
    }

    // --------------------------------------------------------------------------------------------
    // Server
    // --------------------------------------------------------------------------------------------

    pub(crate) fn server(&mut self, conn: ConnId, msg: Up) {
        let session = self.links[&conn].session;
        let node = self.links[&conn].node;
        match msg {
            Up::Connect { session: None } => {
                let id = self.zk.open_session(self.sc.session_timeout, self.now);
                self.links.get_mut(&conn).expect("known").session = Some(id);
                self.session_conn.insert(id, conn);
                note!(self, Some(node), None, format!("session {id:x} opened"));
                self.push(self.now + self.sc.session_timeout, Ev::SessionCheck(id));
                self.send_down(conn, Down::Connected { session: id });
            }
            Up::Connect { session: Some(id) } => {
                if self.zk.alive(id) {
                    self.zk.touch(id, self.now);
                    self.session_conn.insert(id, conn);
                    self.links.get_mut(&conn).expect("known").session = Some(id);
                    self.send_down(conn, Down::Connected { session: id });
                } else {
                    self.send_down(conn, Down::Expired);
                }
            }
            Up::Close => self.kill_link(conn),
            Up::Ping => {
                let Some(id) = session else { return };
                if !self.zk.alive(id) {
                    self.send_down(conn, Down::Closed);
                } else if self.session_conn.get(&id) == Some(&conn) {
                    self.zk.touch(id, self.now);
                    self.send_down(conn, Down::Pong);
                }
            }
            Up::CloseSession => {
                let Some(id) = session else { return };
                if self.zk.alive(id) && self.session_conn.get(&id) == Some(&conn) {
                    note!(self, Some(node), None, format!("session {id:x} closed"));
                    self.end_session(id);
                }
                self.kill_link(conn);
            }
            Up::Call { op, zk } => {
                let Some(id) = session else { return };
                if self.zk.alive(id) && self.session_conn.get(&id) != Some(&conn) {
                    return; // An old connection of a live session: ZooKeeper closed it.
                }
                let mut writes = Vec::new();
                let (result, events) = self.zk.apply(id, &zk, self.now, &mut writes);
                self.count_fencing(&zk, &result);
                for write in writes {
                    self.on_write(Some(node), &write);
                }
                self.broadcast(events);
                self.send_down(conn, Down::Reply { op, result });
            }
        }
    }

    /// Claims the server refused, by why.
    pub(crate) fn count_fencing(&mut self, op: &ZkOp, result: &Result<ZkOk, ZkFail>) {
        let ZkOp::Multi(ops) = op else { return };
        if !ops.iter().any(|o| self.record_path(o).is_some()) {
            return;
        }
        match result {
            Err(ZkFail::SessionExpired) => self.stats.fenced_expired += 1,
            Err(ZkFail::Multi { index, .. }) => match &ops[*index] {
                ZkOp::Check { .. } => self.stats.fenced_lease += 1,
                o if self.record_path(o).is_some() => self.stats.fenced_version += 1,
                _ => {}
            },
            _ => {}
        }
    }

    /// The task whose fire record `op` writes.
    pub(crate) fn record_path(&self, op: &ZkOp) -> Option<TaskIx> {
        let path = match op {
            ZkOp::SetData { path, .. } | ZkOp::Create { path, .. } => path,
            _ => return None,
        };
        self.task_of(path, "tasks")
    }

    /// `BASE/<dir>/<task>` → the task.
    pub(crate) fn task_of(&self, path: &str, dir: &str) -> Option<TaskIx> {
        let name = path
            .strip_prefix(BASE)?
            .strip_prefix('/')?
            .strip_prefix(dir)?;
        self.by_name.get(name.strip_prefix('/')?).copied()
    }

    pub(crate) fn end_session(&mut self, id: i64) {
        let mut writes = Vec::new();
        let events = self.zk.end_session(id, &mut writes);
        for write in writes {
            self.on_write(None, &write);
        }
        self.broadcast(events);
    }

    /// Sends each event to the current connection of every session watching it, in order.
    pub(crate) fn broadcast(&mut self, events: Vec<model_zk::Event>) {
        for event in events {
            for session in self.zk.watchers(&event.path) {
                let Some(&conn) = self.session_conn.get(&session) else {
                    continue;
                };
                if self.links[&conn].alive {
                    self.send_down(
                        conn,
                        Down::Watch {
                            path: event.path.clone(),
                            kind: event.kind,
                        },
                    );
                }
            }
        }
    }

    pub(crate) fn session_check(&mut self, id: i64) {
        let Some(due) = self.zk.expires_at(id) else {
            return;
        };
        if self.now < due {
            self.push(due, Ev::SessionCheck(id));
            return;
        }
        self.stats.expiries += 1;
        let conn = self.session_conn.get(&id).copied();
        let node = conn.map(|c| self.links[&c].node);
        note!(self, node, None, format!("session {id:x} expired"));
        self.end_session(id);
        if let Some(conn) = conn
            && self.links[&conn].alive
        {
            self.send_down(conn, Down::Closed);
        }
    }

    // --------------------------------------------------------------------------------------------
    // What the checker sees of the server's writes
    // --------------------------------------------------------------------------------------------

    pub(crate) fn on_write(&mut self, node: Option<NodeIx>, write: &Write) {
        if let Some(path) = write.path.strip_suffix("/result")
            && let Some(t) = self.task_of(path, "tasks")
        {
            self.on_result_write(t, write);
        } else if let Some(t) = self.task_of(&write.path, "control/paused")
            && node.is_some()
            && write.before.is_none()
            && write.after.is_some()
        {
            // A node pauses a task only for a failed run (`pause_on_failure`); its result may
            // not be stored with it (a newer one was).
            self.failure_paused(t);
        } else if let Some(t) = self.task_of(&write.path, "tasks") {
            self.on_record_write(node, t, write);
        } else if let Some(t) = self.task_of(&write.path, "leases") {
            if write.after.is_none()
                && let Some((_, stat)) = &write.before
            {
                let owner = stat.ephemeral_owner;
                if node.is_some() && owner != 0 && owner != write.session && self.is_member(owner) {
                    self.check.violations.push(Violation {
                        kind: Kind::ForeignLeaseDelete,
                        at: self.now,
                        task: Some(t),
                        tick: None,
                        detail: format!(
                            "{} (session {:x}) deleted the lease of session {owner:x}, a live member",
                            node.map_or("a stranger".to_string(), |n| format!("n{n}")),
                            write.session
                        ),
                    });
                }
            }
        } else if write.path.starts_with(&format!("{BASE}/members/")) {
            self.log_members();
        }
    }

    pub(crate) fn on_record_write(&mut self, node: Option<NodeIx>, t: TaskIx, write: &Write) {
        let Some((data, _)) = &write.after else {
            return;
        };
        let decode = |data: &[u8]| serde_json::from_slice::<WireRecord>(data).ok();
        let Some(record) = decode(data) else {
            return; // A stranger's garbage; the node must cope, the checker has no claim.
        };
        let before = write.before.as_ref().and_then(|(d, _)| decode(d));
        if let Some(n) = node {
            let session = SessionId(write.session as u64);
            if self
                .check
                .on_queue_write(self.now, t, before.as_ref(), &record, n, session)
            {
                note!(self, node, Some(t), "QUEUED TICK STARTED".to_string());
                self.stats.queued_started += 1;
                return;
            }
        }
        let Some(tick) = record.tick else { return };
        let previous = before.as_ref().and_then(|b| b.tick);
        // A fresh claim by another session of the tick the record names already is a second
        // claim of it (a stale node claiming ahead after its successor claimed); any other write
        // of the same tick (a rerun, a field) is not a new claim.
        let second_claim = before.as_ref().is_some_and(|b| {
            !b.session.is_empty() && b.session != record.session && record.reruns == 0
        });
        if previous == Some(tick) && !second_claim {
            return;
        }
        if node.is_none() {
            // `zkcron resume` moved the record past the paused period: no claim, and the ticks
            // it passed over are not caught up.
            note!(
                self,
                None,
                Some(t),
                format!(
                    "RESUMED: record moved from {:?} to {:.3}s",
                    previous.map(secs),
                    secs(tick)
                )
            );
            self.check.resumed.push((t, previous, tick));
            return;
        }
        self.stats.claims += 1;
        let claimer = node.unwrap_or(NO_NODE);
        let lease = format!("{BASE}/leases/{}", self.sc.tasks[t].name);
        let holder = self
            .zk
            .nodes
            .get(&lease)
            .map(|z| SessionId(z.stat.ephemeral_owner as u64));
        let session = SessionId(write.session as u64);
        note!(
            self,
            node,
            Some(t),
            format!(
                "CLAIM {:.3}s applied for session {:x} (lease holder {:x?}), record was {:?}",
                secs(tick),
                write.session,
                holder.map(|h| h.0),
                previous.map(secs)
            ),
        );
        // A tick is claimed up to `CLAIM_AHEAD` before its instant (and spawned at it).
        let latest = epoch()
            + TimeDelta::milliseconds(self.now as i64 + self.sc.max_abs_skew_ms)
            + zkcron::plan::CLAIM_AHEAD;
        let write = RecordWrite {
            task: t,
            previous,
            tick,
            node: claimer,
            session,
        };
        self.check.on_claim(self.now, &write, holder, latest);
    }

    /// Whether `session` is alive and owns a member znode: a live member, whose leases count.
    pub(crate) fn is_member(&self, session: i64) -> bool {
        let prefix = format!("{BASE}/members/");
        self.zk.alive(session)
            && self
                .zk
                .nodes
                .range(prefix.clone()..)
                .take_while(|(path, _)| path.starts_with(&prefix))
                .any(|(_, z)| z.stat.ephemeral_owner == session)
    }

    /// The registered members (ephemeral member znodes of a live session of a real node).
    pub(crate) fn log_members(&mut self) {
        let mut members = Vec::new();
        let prefix = format!("{BASE}/members/");
        for (path, z) in self.zk.nodes.range(prefix.clone()..) {
            let Some(id) = path.strip_prefix(&prefix) else {
                break;
            };
            let owner = z.stat.ephemeral_owner;
            let Some(n) = self.procs.iter().position(|p| p.id == id) else {
                continue;
            };
            if owner == 0 || !self.zk.alive(owner) {
                continue;
            }
            let Ok(record) = serde_json::from_slice::<MemberRecord>(&z.data) else {
                continue;
            };
            // The nodes' own conversion: a record they cannot rank, they ignore.
            let Ok(member) = record.to_member(self.procs[n].tasks.clone()) else {
                continue;
            };
            members.push((n, SessionId(owner as u64), member));
        }
        if self.member_log.last().is_none_or(|(_, last)| {
            last.len() != members.len()
                || last
                    .iter()
                    .zip(&members)
                    .any(|(a, b)| a.0 != b.0 || a.1 != b.1 || a.2.may_lead != b.2.may_lead)
        }) {
            self.member_log.push((self.now, members));
        }
    }

    // --------------------------------------------------------------------------------------------
    // The process: boot, client, driver
    // --------------------------------------------------------------------------------------------

    pub(crate) fn boot(&mut self, n: NodeIx) {
        let spec = NodeSpec {
            id: self.procs[n].id.clone(),
            release: self.procs[n].release.clone().expect("set"),
            seed: self.procs[n].seed,
            base: BASE.to_string(),
            max_clock_skew: Duration::from_millis(self.sc.max_clock_skew_ms as u64),
            session_timeout: Duration::from_millis(self.sc.session_timeout),
            claim_mode: self.sc.knobs.claim_mode,
            bug: self.sc.knobs.bug,
        };
        let now = self.now;
        let p = &mut self.procs[n];
        p.booted_at = now;
        let clock = self.clock(n);
        let p = &mut self.procs[n];
        p.inc += 1;
        p.up = true;
        p.frozen = false;
        p.stopping = false;
        p.deferred.clear();
        p.node = Some((self.make)(&spec, clock));
        p.conn = None;
        p.session = None;
        p.connected = false;
        p.expired = false;
        p.in_flight.clear();
        p.timeout_at = None;
        p.leadership = Leadership::default();
        p.asked.clear();
        p.requests.clear();
        p.runs.clear();
        p.chained.clear();
        p.run_items.clear();
        p.core_timeout_at = None;
        let config = FiringConfig {
            bugs: self.sc.knobs.bug.firing_bugs(),
            ..FiringConfig::default()
        };
        p.firing = Some(Firing::new(config, clock.wall));
        self.log_node(n);
        let mut specs: Vec<TaskSpec> = self.procs[n]
            .defines
            .iter()
            .map(|&t| task_spec(&self.sc.tasks[t], self.procs[n].reloads))
            .collect();
        specs.sort_by(|a, b| a.name.cmp(&b.name));
        let loaded = specs.iter().cloned().map(Arc::new).collect();
        self.core_input(n, FireInput::Load(loaded));
        self.ask(n, Request::Publish(specs), Asked::Publish);
        self.connect(n);
        self.settle(n);
    }

    pub(crate) fn log_node(&mut self, n: NodeIx) {
        let p = &self.procs[n];
        let state = p.up.then(|| (p.release.clone().expect("set"), p.skew_ms));
        self.node_log.push((self.now, n, state));
    }

    pub(crate) fn connect(&mut self, n: NodeIx) {
        let conn = self.open_link(n);
        let p = &mut self.procs[n];
        p.conn = Some(conn);
        p.connected = false;
        p.connect_seq += 1;
        let session = p.session;
        self.send_up(conn, Up::Connect { session });
        let delay = 1_000 + self.rng.random_range(0..=500);
        self.timer(n, delay, T::ConnectTimeout(conn));
    }

    pub(crate) fn schedule_reconnect(&mut self, n: NodeIx) {
        let p = &mut self.procs[n];
        p.conn = None;
        p.connected = false;
        p.connect_seq += 1;
        let seq = p.connect_seq;
        let delay = self.rng.random_range(100..=600);
        self.timer(n, delay, T::Reconnect(seq));
    }

    /// The connection is gone: calls in flight fail (outcome unknown), then the client
    /// reconnects with the same session.
    pub(crate) fn disconnect(&mut self, n: NodeIx, why: &str) {
        if let Some(conn) = self.procs[n].conn {
            self.send_up(conn, Up::Close);
        }
        note!(self, Some(n), None, format!("disconnected ({why})"));
        // Not connected from here on: what the node calls now fails at once.
        self.schedule_reconnect(n);
        self.procs[n].ping_generation += 1;
        self.input(n, Input::Disconnected);
        self.fail_in_flight(n, ZkFail::ConnectionLoss);
    }

    pub(crate) fn fail_in_flight(&mut self, n: NodeIx, error: ZkFail) {
        for op in std::mem::take(&mut self.procs[n].in_flight) {
            self.input(
                n,
                Input::Reply {
                    op,
                    result: Err(error.clone()),
                },
            );
        }
    }

    /// The server says the session expired: the node is told, and builds a new one on
    /// `Output::NewSession`.
    pub(crate) fn expired(&mut self, n: NodeIx) {
        note!(self, Some(n), None, "learned its session expired".into());
        if let Some(conn) = self.procs[n].conn.take() {
            self.kill_link(conn);
        }
        let p = &mut self.procs[n];
        p.connected = false;
        p.expired = true;
        p.ping_generation += 1;
        p.connect_seq += 1;
        self.input(n, Input::Expired);
        self.fail_in_flight(n, ZkFail::SessionExpired);
    }

    pub(crate) fn receive(&mut self, n: NodeIx, conn: ConnId, msg: Down) {
        if self.procs[n].conn != Some(conn) {
            return;
        }
        self.procs[n].last_recv = self.now;
        match msg {
            Down::Connected { session } => {
                if self.procs[n].connected {
                    return;
                }
                let p = &mut self.procs[n];
                p.connected = true;
                p.session = Some(session);
                p.ping_generation += 1;
                let generation = p.ping_generation;
                note!(
                    self,
                    Some(n),
                    None,
                    format!("connected, session {session:x}")
                );
                self.timer(n, self.sc.session_timeout / 3, T::Ping(generation));
                self.input(
                    n,
                    Input::Connected {
                        session_id: session,
                        negotiated_timeout: Duration::from_millis(self.sc.session_timeout),
                    },
                );
            }
            Down::Expired | Down::Closed => self.expired(n),
            Down::Pong => {}
            Down::Watch { path, kind } => self.input(n, Input::Watch { path, kind }),
            Down::Reply { op, result } => {
                if self.procs[n].in_flight.remove(&op) {
                    self.input(n, Input::Reply { op, result });
                }
            }
        }
    }

    pub(crate) fn on_timer(&mut self, n: NodeIx, timer: T) {
        match timer {
            T::Ping(generation) => {
                let p = &self.procs[n];
                if generation != p.ping_generation || !p.connected {
                    return;
                }
                if self.now >= p.last_recv + self.sc.session_timeout * 2 / 3 {
                    self.disconnect(n, "read timeout");
                    return;
                }
                let conn = p.conn.expect("connected");
                self.send_up(conn, Up::Ping);
                self.timer(n, self.sc.session_timeout / 3, T::Ping(generation));
            }
            T::Reconnect(seq) => {
                let p = &self.procs[n];
                if seq == p.connect_seq && p.conn.is_none() && !p.expired {
                    self.connect(n);
                }
            }
            T::ConnectTimeout(conn) => {
                if self.procs[n].conn == Some(conn) && !self.procs[n].connected {
                    self.kill_link(conn);
                    self.schedule_reconnect(n);
                }
            }
            T::Reset(conn) => {
                if self.procs[n].conn == Some(conn) {
                    if self.procs[n].connected {
                        self.disconnect(n, "connection reset");
                    } else {
                        self.schedule_reconnect(n);
                    }
                }
            }
            T::NodeTimeout(generation) => {
                if self.procs[n].timeout_generation == generation {
                    if self.trace_calls {
                        note!(self, Some(n), None, "handle_timeout".into());
                    }
                    self.procs[n].timeout_at = None;
                    let now = self.clock(n);
                    self.procs[n].node.as_mut().expect("up").handle_timeout(now);
                    self.settle(n);
                }
            }
            T::Fail(op) => self.input(
                n,
                Input::Reply {
                    op,
                    result: Err(ZkFail::ConnectionLoss),
                },
            ),
            T::CoreTimeout(generation) => {
                if self.procs[n].core_timeout_generation == generation {
                    self.procs[n].core_timeout_at = None;
                    let wall = self.wall(n);
                    if let Some(core) = self.procs[n].firing.as_mut() {
                        core.handle_timeout(wall);
                    }
                    self.core_settle(n);
                }
            }
            T::Spawn { task, tick, run } => self.spawn_due(n, task, tick, run),
            T::ManualEnd { k, run } => {
                let (task, fire_id, requested_at) = self.triggers[k].clone();
                let result = RunResult {
                    tick: requested_at,
                    node: self.procs[n].id.clone(),
                    exit: "exit code 0".into(),
                    success: true,
                    attempts: 1,
                    duration_ms: 500,
                    finished_at: self.wall(n),
                    fire_id: Some(fire_id),
                    manual: true,
                    exit_code: Some(0),
                    ..RunResult::default()
                };
                let name = self.sc.tasks[task].name.clone();
                self.ask(n, Request::RunEnded { task: name, result }, Asked::RunEnded);
                self.core_input(n, FireInput::RunEnded { run });
            }
            T::BackfillEnd {
                task,
                fire_id,
                tick,
                run,
            } => self.backfill_ended(n, task, fire_id, tick, run),
            T::ChainEnd {
                task,
                fire_id,
                tick,
                run,
                chained,
            } => self.chained_ended(n, task, fire_id, tick, run, &chained),
            T::RunEnd { task, tick, run } => {
                if self.procs[n].runs.contains_key(&run) {
                    let fails = self.sc.tasks[task].pause_on_failure
                        && super::pause_failure::fails(self.sc.seed, task, tick);
                    let exit = if fails { "exit code 1" } else { "exit code 0" };
                    self.run_ended(n, task, tick, run, exit);
                }
            }
            T::StopDeadline => {
                if self.procs[n].stopping {
                    self.kill(n);
                }
            }
            T::Reload => {
                if !self.procs[n].stopping {
                    self.reload(n);
                }
            }
        }
    }

    /// Feeds the node one input, then lets it settle.
    pub(crate) fn input(&mut self, n: NodeIx, input: Input) {
        if self.trace_calls {
            note!(self, Some(n), None, format!("input {input:?}"));
        }
        let now = self.clock(n);
        let Some(node) = self.procs[n].node.as_mut() else {
            return;
        };
        node.handle(input, now);
        self.settle(n);
    }

    /// The daemon asks the node something (handed over when the node's outputs are drained).
    pub(crate) fn ask(&mut self, n: NodeIx, request: Request, asked: Asked) {
        if let Request::Claim {
            task,
            tick,
            intent: ClaimIntent::Run,
        } = &request
        {
            self.check_claim_request(n, task, *tick);
        }
        let p = &mut self.procs[n];
        p.next_req += 1;
        let req = p.next_req;
        p.asked.insert(req, asked);
        p.requests.push_back((req, request));
    }

    /// Drains the node's outputs and hands it the daemon's requests until both are quiet, then
    /// sets its timer.
    pub(crate) fn settle(&mut self, n: NodeIx) {
        loop {
            if !self.procs[n].up {
                return;
            }
            let output = self.procs[n].node.as_mut().and_then(|node| node.poll());
            if let Some(output) = output {
                self.output(n, output);
                continue;
            }
            let Some((req, request)) = self.procs[n].requests.pop_front() else {
                break;
            };
            if self.trace_calls {
                note!(self, Some(n), None, format!("request #{req}: {request:?}"));
            }
            let now = self.clock(n);
            self.procs[n]
                .node
                .as_mut()
                .expect("up")
                .handle(Input::Request { req, request }, now);
        }
        let p = &mut self.procs[n];
        let Some(deadline) = p.node.as_ref().and_then(|node| node.poll_timeout()) else {
            p.timeout_at = None;
            return;
        };
        let at = (p.booted_at + deadline.as_nanos().div_ceil(1_000_000) as Ms).max(self.now);
        if p.timeout_at == Some(at) {
            return;
        }
        p.timeout_at = Some(at);
        p.timeout_generation += 1;
        let generation = p.timeout_generation;
        let inc = p.inc;
        self.push(
            at,
            Ev::Timer {
                node: n,
                inc,
                timer: T::NodeTimeout(generation),
            },
        );
    }

    pub(crate) fn output(&mut self, n: NodeIx, output: Output) {
        match output {
            Output::Call { op, zk } => {
                if self.trace_calls {
                    let connected = self.procs[n].connected;
                    note!(
                        self,
                        Some(n),
                        None,
                        format!("call #{op} (connected {connected}): {zk:?}")
                    );
                }
                let p = &mut self.procs[n];
                match (p.conn, p.connected) {
                    (Some(conn), true) => {
                        p.in_flight.insert(op);
                        self.send_up(conn, Up::Call { op, zk });
                    }
                    _ => self.timer(n, 0, T::Fail(op)),
                }
            }
            Output::NewSession => {
                if let Some(conn) = self.procs[n].conn.take() {
                    self.kill_link(conn);
                }
                let p = &mut self.procs[n];
                p.session = None;
                p.expired = false;
                p.connected = false;
                self.connect(n);
            }
            Output::CloseSession => {
                if let (Some(conn), true) = (self.procs[n].conn, self.procs[n].connected) {
                    self.send_up(conn, Up::CloseSession);
                }
                if self.procs[n].stopping {
                    self.kill(n);
                }
            }
            Output::Leadership(leadership) => {
                note!(
                    self,
                    Some(n),
                    None,
                    format!(
                        "leadership: paused {} tasks {:?}",
                        leadership.paused, leadership.tasks
                    ),
                );
                self.procs[n].leadership = leadership.clone();
                self.core_input(n, FireInput::Leadership(leadership));
            }
            Output::Answer { req, answer } => {
                let Some(asked) = self.procs[n].asked.remove(&req) else {
                    return;
                };
                self.answered(n, asked, answer);
            }
            Output::Report(report) => {
                self.reports += 1;
                note!(self, Some(n), None, format!("REPORT {report}"));
            }
        }
    }

    // --------------------------------------------------------------------------------------------
    // The daemon: the real firing core, with the world's processes and answers around it
    // --------------------------------------------------------------------------------------------

    /// Hands the node's process's firing core `input` at its wall clock, then performs what it
    /// asks and sets its timer.
    pub(crate) fn core_input(&mut self, n: NodeIx, input: FireInput<()>) {
        let wall = self.wall(n);
        let Some(core) = self.procs[n].firing.as_mut() else {
            return;
        };
        core.handle(input, wall);
        self.core_settle(n);
    }

    /// Performs the core's actions until it has none, then sets its timer.
    pub(crate) fn core_settle(&mut self, n: NodeIx) {
        while let Some(action) = self.procs[n].firing.as_mut().and_then(|core| core.poll()) {
            self.perform(n, action);
        }
        let Some(due) = self.procs[n].firing.as_ref().and_then(|c| c.poll_timeout()) else {
            self.procs[n].core_timeout_at = None;
            return;
        };
        let true_ms = (due - epoch()).num_milliseconds() - self.procs[n].skew_ms;
        let mut at = (true_ms.max(0) as Ms).max(self.now);
        if self.sc.knobs.bug == NodeBug::SlowTimer {
            at += 3_000;
        }
        let p = &mut self.procs[n];
        if p.core_timeout_at == Some(at) {
            return;
        }
        p.core_timeout_at = Some(at);
        p.core_timeout_generation += 1;
        let generation = p.core_timeout_generation;
        self.timer(n, at - self.now, T::CoreTimeout(generation));
    }

    /// Performs one action of the firing core: calls go to the node as requests, preparations
    /// are done at once, runs start at their instant.
    fn perform(&mut self, n: NodeIx, action: FireAction<()>) {
        let ask = |what| move |call| Asked::Core { call, what };
        match action {
            FireAction::ReadFireRecord { call, task } => {
                note!(
                    self,
                    Some(n),
                    self.by_name.get(&*task).copied(),
                    "reading the record".into()
                );
                let task = task.to_string();
                self.ask(n, Request::LastClaimed { task }, ask(CoreAsk::Record)(call));
            }
            FireAction::ReadOrphan { call, task } => {
                let task = task.to_string();
                self.ask(
                    n,
                    Request::OrphanedTick { task },
                    ask(CoreAsk::Orphan)(call),
                );
            }
            FireAction::CountRunsElsewhere { call, task } => {
                let task = task.to_string();
                let asked = ask(CoreAsk::RunsElsewhere)(call);
                self.ask(n, Request::RunsElsewhere { task }, asked);
            }
            FireAction::ReadQueued { call, task } => {
                let task = task.to_string();
                self.ask(n, Request::QueuedTick { task }, ask(CoreAsk::Queued)(call));
            }
            FireAction::WaitRunsElsewhere { call, task } => {
                let task = task.to_string();
                let asked = ask(CoreAsk::RunsEnded)(call);
                self.ask(n, Request::RunsEndedElsewhere { task }, asked);
            }
            FireAction::Prepare { call, .. } => {
                let wall = self.wall(n);
                let answer = FireInput::Answer {
                    call,
                    answer: FireAnswer::Prepared(()),
                };
                if let Some(core) = self.procs[n].firing.as_mut() {
                    core.handle(answer, wall);
                }
            }
            FireAction::Claim {
                call,
                task,
                tick,
                intent,
            } => {
                let t = self.slot(n, &task);
                note!(
                    self,
                    Some(n),
                    Some(t),
                    format!("claim {:.3}s ({intent:?})", secs(tick))
                );
                let request = Request::Claim {
                    task: task.to_string(),
                    tick,
                    intent,
                };
                self.ask(n, request, ask(CoreAsk::Claim { task: t, tick })(call));
            }
            FireAction::Reclaim { call, task, tick } => {
                let t = self.slot(n, &task);
                let request = Request::Reclaim {
                    task: task.to_string(),
                    tick,
                };
                self.ask(n, request, ask(CoreAsk::Claim { task: t, tick })(call));
            }
            FireAction::ClaimManual {
                call,
                task,
                trigger,
            } => {
                let request = Request::ClaimManual {
                    task: task.to_string(),
                    trigger,
                };
                self.ask(n, request, ask(CoreAsk::Manual)(call));
            }
            FireAction::Spawn(spawn) => self.spawn(n, spawn),
            FireAction::SkipChained {
                task,
                fire_id,
                tick,
            } => self.chained_skipped(n, &task, fire_id, tick.instant),
            FireAction::StopRuns { runs, how } => {
                for run in runs {
                    self.stop_run(n, run, how);
                }
            }
            FireAction::CancelRetries { .. } | FireAction::ReleaseMemory => {}
        }
    }

    /// A claimed run: a manual one starts now, a tick's at its due time by the node's clock.
    fn spawn(&mut self, n: NodeIx, spawn: firing::Spawn<()>) {
        let task = task_ix(&spawn.task);
        if spawn.kind == RunKind::Backfill {
            return self.backfill_spawned(n, spawn);
        }
        if zkcron::coord::record::chain_of(&spawn.fire_id).is_some() {
            return self.chained_spawned(n, spawn);
        }
        if spawn.kind == RunKind::Manual {
            let fire_id = spawn.fire_id;
            let Some(k) = self.triggers.iter().position(|(_, id, _)| *id == fire_id) else {
                return;
            };
            note!(self, Some(n), Some(task), format!("MANUAL RUN {fire_id}"));
            self.check
                .on_requested_run(Requested::Manual, self.now, &fire_id, task, n);
            self.timer(n, 500, T::ManualEnd { k, run: spawn.run });
            return;
        }
        let task = self.slot(n, &spawn.task);
        let tick = spawn.tick.instant;
        let wait = (spawn.tick.due_at - self.wall(n)).num_milliseconds().max(0) as Ms;
        self.procs[n].runs.insert(spawn.run, Run::Waiting);
        if let Some(items) = &spawn.work_items {
            let slots = self.item_slots(task, items);
            self.procs[n].run_items.insert(spawn.run, slots);
        }
        if !spawn.chained.is_empty() {
            self.procs[n].chained.insert(spawn.run, spawn.chained);
        }
        self.timer(
            n,
            wait,
            T::Spawn {
                task,
                tick,
                run: spawn.run,
            },
        );
    }

    /// The run's instant came: it starts, unless it was stopped before.
    pub(crate) fn spawn_due(&mut self, n: NodeIx, task: TaskIx, tick: DateTime<Utc>, run: RunId) {
        match self.procs[n].runs.get(&run) {
            Some(Run::Waiting) => {
                self.procs[n].runs.insert(run, Run::Running { task, tick });
                for slot in self.run_slots(n, task, run) {
                    self.ran(n, slot, tick);
                }
                let mut took = self.rng.random_range(10..=3_000);
                if self.sc.knobs.long_runs && self.runs_rng.random_bool(0.15) {
                    // A process that outlives its task's next tick or several.
                    took = self.runs_rng.random_range(5_000..=40_000);
                    if self.sc.tasks[task].overlap != OverlapPolicy::Allow {
                        self.check.outlasted.insert(task);
                    }
                }
                self.timer(n, took, T::RunEnd { task, tick, run });
            }
            Some(Run::Running { .. }) => {}
            Some(Run::Withdrawn) => {
                note!(
                    self,
                    Some(n),
                    Some(task),
                    format!("withdrawn {:.3}s: its session ended", secs(tick))
                );
                self.procs[n].runs.remove(&run);
                for slot in self.run_slots(n, task, run) {
                    self.check.run_exited(slot, tick, n);
                }
                self.procs[n].run_items.remove(&run);
                self.core_input(n, FireInput::RunEnded { run });
            }
            None => {
                // Stopped before its instant: never started; its end is recorded.
                note!(
                    self,
                    Some(n),
                    Some(task),
                    format!("not started {:.3}s", secs(tick))
                );
                self.run_ended(
                    n,
                    task,
                    tick,
                    run,
                    "not started: stopped before its instant",
                );
            }
        }
    }

    /// SIGTERM to a run: it ends at once (a waiting one never starts). `Unspawned` only
    /// withdraws a waiting run.
    fn stop_run(&mut self, n: NodeIx, run: RunId, how: StopHow) {
        match self.procs[n].runs.get(&run) {
            Some(&Run::Running { task, tick }) if how != StopHow::Unspawned => {
                self.timer(n, 1, T::RunEnd { task, tick, run })
            }
            Some(Run::Waiting) if how == StopHow::Unspawned => {
                self.procs[n].runs.insert(run, Run::Withdrawn);
            }
            Some(Run::Waiting) => {
                self.procs[n].runs.remove(&run);
            }
            _ => {}
        }
    }

    /// A run ended: its result goes to the node, its end to the core.
    pub(crate) fn run_ended(
        &mut self,
        n: NodeIx,
        task: TaskIx,
        tick: DateTime<Utc>,
        run: RunId,
        exit: &str,
    ) {
        self.procs[n].runs.remove(&run);
        for slot in self.run_slots(n, task, run) {
            self.check.run_exited(slot, tick, n);
        }
        self.procs[n].run_items.remove(&run);
        let chained = self.procs[n].chained.remove(&run);
        let mut result = RunResult {
            tick,
            node: self.procs[n].id.clone(),
            exit: exit.into(),
            success: exit == "exit code 0",
            attempts: 1,
            duration_ms: 1,
            finished_at: self.wall(n),
            ..RunResult::default()
        };
        if !result.success && self.sc.tasks[task].pause_on_failure {
            // As the daemon does: the pause goes with the failed run's end.
            result.pause = Some(Box::new(MarkRecord {
                format: 1,
                at: self.wall(n),
                by: format!("zkcron@{}", result.node),
                reason: Some(format!("pause_on_failure: run failed ({exit})")),
            }));
        }
        let name = self.task_name(task);
        let asked = match chained {
            Some(chained) if result.success => {
                result.chained = chained.to_vec();
                let requested = super::chain::requested(&name, &result);
                self.chain_requests.push(requested);
                Asked::ChainParentEnded(self.chain_requests.len() - 1)
            }
            _ => Asked::RunEnded,
        };
        self.ask(n, Request::RunEnded { task: name, result }, asked);
        self.core_input(n, FireInput::RunEnded { run });
    }

    /// The slot that node `n`'s run or claim of task `name` counts in: the task's, or for a
    /// task that runs on every node, `n`'s unit's.
    pub(crate) fn slot(&self, n: NodeIx, name: &str) -> TaskIx {
        let t = task_ix(name);
        if !self.sc.tasks[t].every_node {
            return t;
        }
        self.sc
            .tasks
            .iter()
            .position(|u| u.unit_of == Some((t, n)))
            .expect("a node that runs a task defines it, so it has a unit of it")
    }

    /// The task the daemon names for a slot: the task of a unit.
    pub(crate) fn task_name(&self, t: TaskIx) -> String {
        let t = self.sc.tasks[t].task_of(t);
        self.sc.tasks[t].name.clone()
    }

    /// The slots of the items `items` of the pooled task `t`.
    fn item_slots(&self, t: TaskIx, items: &[String]) -> Vec<TaskIx> {
        let names = self.sc.tasks[t].items.as_deref().unwrap_or_default();
        items
            .iter()
            .filter_map(|item| {
                let i = names.iter().position(|name| name == item)?;
                self.sc.tasks.iter().position(|u| u.item_of == Some((t, i)))
            })
            .collect()
    }

    /// The slots node `n`'s run `run` of slot `task` counts in: each item slot its claim won
    /// for a pooled task's run, else `task`'s own.
    fn run_slots(&self, n: NodeIx, task: TaskIx, run: RunId) -> Vec<TaskIx> {
        match self.procs[n].run_items.get(&run) {
            Some(slots) => slots.clone(),
            None => vec![task],
        }
    }

    pub(crate) fn answered(
        &mut self,
        n: NodeIx,
        asked: Asked,
        answer: zkcron::coord::node::io::Answer,
    ) {
        match asked {
            Asked::Core { call, what } => {
                let answer = self.core_answer(n, what, answer);
                self.core_input(n, FireInput::Answer { call, answer });
            }
            Asked::Close => {
                if self.procs[n].stopping {
                    self.kill(n);
                }
            }
            Asked::ChainParentEnded(k) => {
                if answer.is_ok() {
                    let children = std::mem::take(&mut self.chain_requests[k]);
                    self.check.expect_chained(children, self.now);
                }
            }
            Asked::Publish | Asked::RunEnded | Asked::Release => {}
        }
    }

    /// The node's answer as the firing core takes it, counted, and bent by a deliberate bug.
    fn core_answer(
        &mut self,
        n: NodeIx,
        what: CoreAsk,
        answer: zkcron::coord::node::io::Answer,
    ) -> FireAnswer<()> {
        match (what, answer) {
            (CoreAsk::Record, Ok(Answered::Tick(last))) => FireAnswer::FireRecord(Ok(last)),
            (CoreAsk::Record, Err(error)) => FireAnswer::FireRecord(Err(error)),
            (CoreAsk::Claim { task, tick }, answer) => {
                let outcome = match answer {
                    Ok(Answered::Claim(outcome)) => Ok(outcome),
                    Ok(Answered::ClaimedItems(items)) => {
                        self.count_claim(n, task, tick, &Ok(ClaimOutcome::Claimed));
                        return FireAnswer::ClaimedItems(items.into());
                    }
                    Err(error) if self.sc.knobs.bug == NodeBug::AssumeClaimedOnLoss => {
                        note!(
                            self,
                            Some(n),
                            Some(task),
                            format!(
                                "claim {:.3}s: {error}, taken as won (deliberate bug)",
                                secs(tick)
                            )
                        );
                        Ok(ClaimOutcome::Claimed)
                    }
                    Err(error) => Err(error),
                    Ok(other) => panic!("the node answered {other:?} to {what:?}"),
                };
                self.count_claim(n, task, tick, &outcome);
                FireAnswer::Claim(outcome)
            }
            (CoreAsk::Orphan, answer) => FireAnswer::Orphan(answer.map(|a| match a {
                Answered::Tick(tick) => tick,
                other => panic!("the node answered {other:?} to {what:?}"),
            })),
            (CoreAsk::RunsElsewhere, answer) => {
                FireAnswer::RunsElsewhere(answer.map(|a| match a {
                    Answered::Count(count) => count,
                    other => panic!("the node answered {other:?} to {what:?}"),
                }))
            }
            (CoreAsk::Manual, answer) => FireAnswer::Claim(answer.map(|a| match a {
                Answered::Claim(outcome) => outcome,
                other => panic!("the node answered {other:?} to {what:?}"),
            })),
            (CoreAsk::Queued, answer) => FireAnswer::Queued(answer.map(|a| match a {
                Answered::Tick(tick) => tick,
                other => panic!("the node answered {other:?} to {what:?}"),
            })),
            (CoreAsk::RunsEnded, answer) => FireAnswer::RunsEnded(answer.map(|_| ())),
            (_, answer) => panic!("the node answered {answer:?} to {what:?}"),
        }
    }

    fn count_claim(
        &mut self,
        n: NodeIx,
        task: TaskIx,
        tick: DateTime<Utc>,
        outcome: &Result<ClaimOutcome, zkcron::coord::CoordError>,
    ) {
        let what = match outcome {
            Ok(ClaimOutcome::Claimed) => "claimed".to_string(),
            Ok(ClaimOutcome::AlreadyClaimed { record }) => {
                self.stats.already_claimed += 1;
                format!("already claimed (record {:.3}s)", secs(*record))
            }
            Ok(ClaimOutcome::NotLeader) => {
                self.stats.not_leader += 1;
                "not leader".to_string()
            }
            Err(error) => {
                self.stats.conflicts += 1;
                format!("{error}")
            }
        };
        note!(
            self,
            Some(n),
            Some(task),
            format!("claim {:.3}s: {what}", secs(tick))
        );
    }

    pub(crate) fn ran(&mut self, n: NodeIx, task: TaskIx, tick: DateTime<Utc>) {
        self.stats.runs += 1;
        note!(self, Some(n), Some(task), format!("RUN {:.3}s", secs(tick)));
        let session = self
            .check
            .claims
            .get(&(task, tick))
            .and_then(|c| c.iter().find(|c| c.node == n))
            .map_or(SessionId(0), |c| c.session);
        self.check_overlap(n, task, tick);
        self.check.on_run(self.now, task, tick, n, session);
        let slots = (task, self.sc.tasks[task].task_of(task));
        self.check.check_failure_pause(self.now, slots, tick, n);
    }

    // --------------------------------------------------------------------------------------------
    // Faults
    // --------------------------------------------------------------------------------------------

    pub(crate) fn disturb(&mut self, n: NodeIx, kind: u8, on: bool) {
        if on {
            self.open_disturbance.entry((n, kind)).or_insert(self.now);
        } else if let Some(start) = self.open_disturbance.remove(&(n, kind)) {
            self.disturbed.push((Some(n), start, self.now));
        }
    }

    pub(crate) fn fault(&mut self, fault: Fault) {
        note!(self, fault.node(), None, format!("FAULT {fault:?}"));
        if !matches!(fault, Fault::LinkUp(_) | Fault::Thaw(_) | Fault::LossOff(_)) {
            self.disturbed.push((fault.node(), self.now, self.now));
        }
        match fault {
            Fault::Start(n) => self.boot(n),
            Fault::Crash(n) => {
                if !self.procs[n].up {
                    return;
                }
                if let Some(conn) = self.procs[n].conn {
                    self.kill_link(conn);
                }
                self.kill(n);
            }
            Fault::Stop(n) => {
                if !self.procs[n].up {
                    return;
                }
                if self.procs[n].frozen {
                    self.kill(n);
                    return;
                }
                self.graceful_stop(n);
            }
            Fault::Restart {
                node: n,
                seed,
                release,
            } => {
                if self.procs[n].up {
                    return;
                }
                if let Some(seed) = seed {
                    self.procs[n].seed = seed;
                }
                if let Some(release) = release {
                    self.procs[n].release = Some(release);
                }
                self.boot(n);
            }
            Fault::LinkDown(n) => {
                self.link_up[n] = false;
                self.disturb(n, 0, true);
            }
            Fault::LinkUp(n) => {
                self.link_up[n] = true;
                self.disturb(n, 0, false);
            }
            Fault::Freeze(n) => {
                if self.procs[n].up {
                    self.procs[n].frozen = true;
                    self.disturb(n, 1, true);
                }
            }
            Fault::Thaw(n) => self.thaw(n),
            Fault::LossOn(n, pct) => {
                self.procs[n].loss_pct = pct;
                self.disturb(n, 2, true);
            }
            Fault::LossOff(n) => {
                self.procs[n].loss_pct = 0;
                self.disturb(n, 2, false);
            }
            Fault::Skew(n, skew) => {
                self.procs[n].skew_ms = skew;
                if self.procs[n].up {
                    self.log_node(n);
                    // The daemon notices a clock step and re-plans every task.
                    self.core_input(n, FireInput::ClockJumped);
                }
            }
            Fault::Stranger(meddle) => self.meddle(meddle),
            Fault::Reload(n) => {
                // The files change now; a node that is down loads them when it starts, a
                // stopped process when it resumes.
                self.procs[n].reloads += 1;
                if self.procs[n].up {
                    self.timer(n, 0, T::Reload);
                }
            }
            Fault::HealAll => {
                for n in 0..self.sc.nodes.len() {
                    // Every node is undrained (a no-op where no mark is), but those the operator
                    // leaves drained.
                    if !self.sc.drained_at_end.contains(&n) {
                        self.meddle(Meddle::Undrain(n));
                    }
                }
                for t in 0..self.sc.tasks.len() {
                    // Every task is resumed (no write where no mark is).
                    self.meddle(Meddle::Resume(t));
                }
                for n in 0..self.procs.len() {
                    self.link_up[n] = true;
                    self.procs[n].loss_pct = 0;
                    self.thaw(n);
                    for kind in 0..3 {
                        self.disturb(n, kind, false);
                    }
                    if !self.procs[n].up && !self.sc.nodes[n].visitor {
                        self.boot(n);
                    }
                }
            }
        }
    }

    /// A stranger client writes foreign or stale znodes; what ZooKeeper refuses (no parent, the
    /// znode exists) is simply not done.
    pub(crate) fn meddle(&mut self, meddle: Meddle) {
        if let Meddle::Resume(t) = meddle {
            self.check.failure_resumed(t, self.now);
        }
        let name = |t: TaskIx| self.sc.tasks[t].name.clone();
        let since = epoch() + TimeDelta::milliseconds(self.now as i64);
        let ops: Vec<ZkOp> = match &meddle {
            Meddle::GhostMember => {
                let tasks = self
                    .sc
                    .tasks
                    .iter()
                    .filter(|t| !t.is_unit())
                    .map(|t| {
                        (
                            t.name.clone(),
                            TaskSetEntry {
                                digest: format!("{:016x}", t.name.len()),
                                version_req: None,
                                require_labels: Default::default(),
                                schedule: None,
                                timezone: None,
                                ..Default::default()
                            },
                        )
                    })
                    .collect();
                let set = TaskSetRecord { format: 1, tasks };
                let member = MemberRecord {
                    format: 1,
                    id: "ghost".into(),
                    release: "99.0.0".into(),
                    seed: format!("{:016x}", u64::MAX),
                    host: "elsewhere".into(),
                    pid: 1,
                    started_at: since,
                    labels: Default::default(),
                    taskset: TaskSetRef {
                        digest: "ghost".into(),
                        chunks: 1,
                        count: self.sc.task_count(),
                    },
                    leads: true,
                    drained: false,
                };
                vec![
                    ZkOp::Create {
                        path: format!("{BASE}/tasksets/ghost-0"),
                        data: serde_json::to_vec(&set).expect("encodes"),
                        mode: CreateMode::Persistent,
                        acl: Default::default(),
                    },
                    ZkOp::Create {
                        path: format!("{BASE}/members/ghost"),
                        data: serde_json::to_vec(&member).expect("encodes"),
                        mode: CreateMode::Persistent,
                        acl: Default::default(),
                    },
                ]
            }
            Meddle::PersistentLease(t) => vec![ZkOp::Create {
                path: format!("{BASE}/leases/{}", name(*t)),
                data: serde_json::to_vec(&LeaseRecord {
                    format: 1,
                    node: "ghost".into(),
                    session: "1".into(),
                    since,
                })
                .expect("encodes"),
                mode: CreateMode::Persistent,
                acl: Default::default(),
            }],
            Meddle::TamperLease(t) => vec![ZkOp::SetData {
                path: format!("{BASE}/leases/{}", name(*t)),
                data: b"{\"tampered\": true}".to_vec(),
                version: None,
            }],
            Meddle::TamperEpoch(t) => vec![ZkOp::SetData {
                path: format!("{BASE}/tasks/{}/epoch", name(*t)),
                data: b"tampered".to_vec(),
                version: None,
            }],
            Meddle::PersistentRun(t) => vec![ZkOp::Create {
                path: format!("{BASE}/tasks/{}/run-{}", name(*t), since.timestamp()),
                data: serde_json::to_vec(&RunRecord {
                    format: 1,
                    node: "ghost".into(),
                    session: "1".into(),
                    tick: since,
                    started_at: since,
                })
                .expect("encodes"),
                mode: CreateMode::Persistent,
                acl: Default::default(),
            }],
            Meddle::Drain(n) => vec![ZkOp::Create {
                path: format!("{BASE}/control/drained/{}", self.sc.nodes[*n].id),
                data: serde_json::to_vec(
                    &serde_json::json!({"format": 1, "at": since, "by": "ops@sim"}),
                )
                .expect("encodes"),
                mode: CreateMode::Persistent,
                acl: Default::default(),
            }],
            Meddle::Undrain(n) => vec![ZkOp::Delete {
                path: format!("{BASE}/control/drained/{}", self.sc.nodes[*n].id),
                version: None,
            }],
            Meddle::Pause(t) => {
                let dir = |p: &str| ZkOp::Create {
                    path: format!("{BASE}/{p}"),
                    data: Vec::new(),
                    mode: CreateMode::Persistent,
                    acl: Default::default(),
                };
                vec![
                    dir("control"),
                    dir("control/paused"),
                    ZkOp::Create {
                        path: format!("{BASE}/control/paused/{}", name(*t)),
                        data: serde_json::to_vec(
                            &serde_json::json!({"format": 1, "at": since, "by": "ops@sim"}),
                        )
                        .expect("encodes"),
                        mode: CreateMode::Persistent,
                        acl: Default::default(),
                    },
                ]
            }
            Meddle::Resume(t) => self.resume_ops(*t, since).into_iter().collect(),
            Meddle::DeleteLeases | Meddle::DeleteMembers => {
                let dir = if meddle == Meddle::DeleteLeases {
                    "leases"
                } else {
                    "members"
                };
                let root = format!("{BASE}/{dir}");
                let mut paths: Vec<String> = self
                    .zk
                    .nodes
                    .keys()
                    .filter(|p| model_zk::covers(&root, p))
                    .cloned()
                    .collect();
                paths.sort_by_key(|p| std::cmp::Reverse(p.matches('/').count()));
                paths
                    .into_iter()
                    .map(|path| ZkOp::Delete {
                        path,
                        version: None,
                    })
                    .collect()
            }
        };
        for op in ops {
            let mut writes = Vec::new();
            let (result, events) = self.zk.apply(self.stranger, &op, self.now, &mut writes);
            note!(self, None, None, format!("stranger {op:?}: {result:?}"));
            for write in writes {
                self.on_write(None, &write);
            }
            self.broadcast(events);
        }
    }

    /// `zkcron resume`'s multi: the pause mark deleted and, when the fire record is older than
    /// `now` (whole seconds), the record moved to `now`, both at the versions read. `None` when
    /// the task is not paused.
    fn resume_ops(&self, t: TaskIx, now: DateTime<Utc>) -> Option<ZkOp> {
        let name = &self.sc.tasks[t].name;
        let mark = format!("{BASE}/control/paused/{name}");
        let version = self.zk.nodes.get(&mark)?.stat.version;
        let mut ops = vec![ZkOp::Delete {
            path: mark,
            version: Some(version),
        }];
        let now = DateTime::from_timestamp(now.timestamp(), 0).expect("in range");
        // The task's record and, as the CLI does, each of its units' records.
        let units = self.sc.tasks.iter().filter(|u| u.unit_task() == Some(t));
        for path in std::iter::once(name).chain(units.map(|u| &u.name)) {
            let path = format!("{BASE}/tasks/{path}");
            let Some(z) = self.zk.nodes.get(&path) else {
                continue;
            };
            let behind = serde_json::from_slice::<WireRecord>(&z.data)
                .is_ok_and(|r| r.tick.is_none_or(|tick| tick < now));
            if !behind {
                continue;
            }
            let moved = WireRecord {
                format: 1,
                tick: Some(now),
                node: String::new(),
                session: String::new(),
                run: false,
                reruns: 0,
                claimed_at: Some(now),
                queued: None,
            };
            ops.push(ZkOp::SetData {
                path,
                data: serde_json::to_vec(&moved).expect("encodes"),
                version: Some(z.stat.version),
            });
        }
        Some(ZkOp::Multi(ops))
    }

    /// The daemon reloads its changed task files, as `daemon::reload` does: the firing core
    /// stops firing every task (each changed), is handed the new definitions (it fires the
    /// tasks it leads again from their fire records), and the node publishes them.
    fn reload(&mut self, n: NodeIx) {
        let mut specs: Vec<TaskSpec> = self.procs[n]
            .defines
            .iter()
            .map(|&t| task_spec(&self.sc.tasks[t], self.procs[n].reloads))
            .collect();
        specs.sort_by(|a, b| a.name.cmp(&b.name));
        note!(self, Some(n), None, "reloading changed task files".into());
        for spec in &specs {
            let task = spec.name.to_string();
            let why = Unload::Changed;
            self.core_input(n, FireInput::Unload { task, why });
        }
        let loaded = specs.iter().cloned().map(Arc::new).collect();
        self.core_input(n, FireInput::Load(loaded));
        self.ask(n, Request::Publish(specs), Asked::Publish);
        self.settle(n);
    }

    pub(crate) fn kill(&mut self, n: NodeIx) {
        let p = &mut self.procs[n];
        p.up = false;
        p.frozen = false;
        p.stopping = false;
        p.deferred.clear();
        p.inc += 1;
        p.firing = None;
        p.runs.clear();
        p.chained.clear();
        p.run_items.clear();
        p.node = None;
        self.log_node(n);
        // Its processes end with it.
        self.check.live_runs.retain(|r| r.node != n);
    }

    /// SIGTERM: the daemon stops firing, releases everything and closes; the process exits when
    /// the node closed its session or after 2 s.
    pub(crate) fn graceful_stop(&mut self, n: NodeIx) {
        self.procs[n].stopping = true;
        self.core_input(n, FireInput::Shutdown);
        self.ask(n, Request::ReleaseAll, Asked::Release);
        self.ask(n, Request::Close, Asked::Close);
        self.timer(n, 2_000, T::StopDeadline);
        self.settle(n);
    }

    pub(crate) fn thaw(&mut self, n: NodeIx) {
        if !self.procs[n].frozen {
            return;
        }
        self.procs[n].frozen = false;
        self.disturb(n, 1, false);
        // Resumed: timers that came due and buffered messages run now, in their order; half the
        // time the firing core's timers first, so the node acts on its stale view at once.
        let deferred = std::mem::take(&mut self.procs[n].deferred);
        let (wakes, rest): (Vec<Ev>, Vec<Ev>) = if self.rng.random_bool(0.5) {
            deferred.into_iter().partition(|ev| {
                matches!(
                    ev,
                    Ev::Timer {
                        timer: T::CoreTimeout(_) | T::Spawn { .. },
                        ..
                    }
                )
            })
        } else {
            (Vec::new(), deferred)
        };
        for ev in wakes.into_iter().chain(rest) {
            self.push(self.now, ev);
        }
    }
}
