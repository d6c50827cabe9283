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
//! others are switches of the real core, node and operator's rules.
//!
//! This file holds the world's state ([`Sim`]), its events and the loop that dispatches them;
//! `network.rs` the links and the server, `observe.rs` what the checker sees of the server's
//! writes, `process.rs` a node's process (boot, client, driver), `daemon.rs` the firing core's
//! shell and its runs, `faults.rs` the faults and the operator's actions.

use std::cmp::Reverse;

use zkcron::coord::node::io::{
    Answered, CreateMode, Input, Now, OpId, Output, ReqId, Request, WatchKind, ZkFail, ZkOk, ZkOp,
};
use zkcron::coord::operator::{self, RequestRecord, Requesting};
use zkcron::coord::records::MarkRecord;
use zkcron::coord::records::{
    FireRecord as WireRecord, LeaseRecord, MemberRecord, RunRecord, TaskSetEntry, TaskSetRecord,
    TaskSetRef,
};
use zkcron::coord::{ClaimIntent, ClaimOutcome, Leadership, RunResult};
use zkcron::firing::{
    self, Action as FireAction, Answer as FireAnswer, CallId, Firing, FiringConfig,
    Input as FireInput, RunId, RunKind, StopHow, Unload,
};
use zkcron::task::{CommandLine, OverlapPolicy, Parent, TaskExtras, TaskSpec};

use self::faults::sim_paths;
use super::requested::Requested;
use super::*;
use zkcron::coord::node::model_zk::{self, ModelZk, Write};

/// Adds a line to the trace, formatting it only while tracing.
macro_rules! note {
    ($sim:expr, $node:expr, $task:expr, $what:expr $(,)?) => {
        if $sim.tracing {
            let what: String = $what;
            $sim.note_now($node, $task, what);
        }
    };
}

// After the macro: they use it.
mod daemon;
mod faults;
mod network;
mod observe;
mod process;

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
            max_runs: def.max_runs,
            ..Default::default()
        }
        .into(),
        digest: Default::default(),
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
    /// The operator's backfill requests: task, record (the `k`-th is numbered `k`).
    pub(crate) backfills: Vec<(TaskIx, zkcron::coord::backfill::BackfillRecord)>,
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
            let mut record = WireRecord::empty();
            record.tick = Some(epoch());
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
        let record = operator::trigger(&self.sc.tasks[task].name, "operator@sim", requested_at);
        let name = self.create_request(Some(task), &record.into(), k as u64);
        assert_eq!(name, fire_id, "the trigger's fire id");
    }

    /// The operator creates the znode of `request` as `zkcron trigger` and `zkcron backfill`
    /// do, with the writes of the shipped rule ([`operator::request`]): its parents (one that
    /// exists is refused, which is fine), then its sequential create. The model has no
    /// sequential znodes: the simulation numbers the request `n` itself, as ZooKeeper would
    /// (10 digits, distinct per task and kind). The request's name.
    pub(crate) fn create_request(
        &mut self,
        task: Option<TaskIx>,
        request: &RequestRecord,
        n: u64,
    ) -> String {
        let Requesting { parents, create } =
            operator::request(&sim_paths(), request, Default::default());
        let ZkOp::Create {
            path,
            data,
            mode: CreateMode::PersistentSequential,
            acl,
        } = create
        else {
            panic!("a request's create is sequential: {create:?}");
        };
        let numbered = ZkOp::Create {
            path: format!("{path}{n:010}"),
            data,
            mode: CreateMode::Persistent,
            acl,
        };
        for op in parents.into_iter().chain([numbered]) {
            let mut writes = Vec::new();
            let (result, events) = self.zk.apply(self.stranger, &op, self.now, &mut writes);
            note!(self, None, task, format!("operator {op:?}: {result:?}"));
            self.broadcast(events);
        }
        request.name(n)
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
        self.check_ledger();
        self.check_limits();
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
}
