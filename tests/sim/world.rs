//! The world: the event loop, the server's handling of requests, the node state machine and
//! the faults.

use super::*;

// ------------------------------------------------------------------------------------------------
// The node
// ------------------------------------------------------------------------------------------------

/// A task this node fires: its planner and its claims.
#[derive(Debug)]
pub(crate) struct Firing {
    pub(crate) generation: u64,
    pub(crate) lease_version: i32,
    /// `None` while the fire record is being read.
    pub(crate) planner: Option<TickPlanner>,
    /// The fire record as last read or written by this node, with its znode version.
    pub(crate) cache: Option<(FireRecord, i32)>,
    pub(crate) queue: VecDeque<DateTime<Utc>>,
    pub(crate) in_flight: bool,
    pub(crate) wake_seq: u64,
}

#[derive(Debug, Clone)]
pub(crate) enum Pending {
    Register,
    /// A member update after the node's clock crossed `max_clock_skew` (reply ignored; the
    /// node's own view is updated when the change is seen).
    Republish,
    List,
    /// A lease take; `true` when taken as cover for a designated node that did not act.
    Take(TaskIx, bool),
    Release(TaskIx),
    Load {
        task: TaskIx,
        generation: u64,
    },
    Claim {
        task: TaskIx,
        generation: u64,
        tick: DateTime<Utc>,
        attempt: u8,
        session: SessionId,
    },
    Reload {
        task: TaskIx,
        generation: u64,
        tick: DateTime<Utc>,
    },
    Resolve {
        task: TaskIx,
        tick: DateTime<Utc>,
        session: SessionId,
    },
    Stop,
}

#[derive(Debug, Default)]
pub(crate) struct Node {
    pub(crate) id: String,
    pub(crate) release: Option<Version>,
    pub(crate) seed: u64,
    pub(crate) tasks: Arc<TaskSet>,
    pub(crate) defines: Vec<TaskIx>,
    pub(crate) skew_ms: i64,

    pub(crate) up: bool,
    pub(crate) frozen: bool,
    /// Incarnation: bumped when the process dies, so its timers die with it.
    pub(crate) inc: u64,
    pub(crate) deferred: Vec<Ev>,
    pub(crate) loss_pct: u32,

    pub(crate) session: Option<SessionId>,
    pub(crate) conn: Option<ConnId>,
    pub(crate) connected: bool,
    pub(crate) connect_seq: u64,
    pub(crate) ping_generation: u64,
    pub(crate) last_recv: Ms,
    pub(crate) next_req: u64,
    pub(crate) pending: BTreeMap<u64, Pending>,

    pub(crate) registered: bool,
    pub(crate) members: BTreeMap<NodeIx, (Member, SessionId)>,
    pub(crate) leases: BTreeMap<TaskIx, (SessionId, i32)>,
    pub(crate) vacant_since: BTreeMap<TaskIx, Ms>,
    /// When another member last joined or changed.
    pub(crate) members_changed: Ms,
    /// Leases this node believes it holds, with the version it got them at.
    pub(crate) held: BTreeMap<TaskIx, i32>,
    /// Held leases taken as cover (`LeaseAction::Cover`), with when.
    pub(crate) covering: BTreeMap<TaskIx, Ms>,
    pub(crate) taking: BTreeSet<TaskIx>,
    pub(crate) releasing: BTreeSet<TaskIx>,
    pub(crate) recheck: Option<Ms>,

    pub(crate) firing: BTreeMap<TaskIx, Firing>,
    pub(crate) next_generation: u64,
    /// Claims whose outcome is unknown (reply lost), with the session they were sent in.
    pub(crate) unresolved: Vec<(TaskIx, DateTime<Utc>, SessionId)>,
}

impl Node {
    /// The member record this node publishes; `may_lead` is false while its clock is too far
    /// off, as the real node announces.
    pub(crate) fn member(&self, may_lead: bool) -> Member {
        Member {
            id: self.id.clone(),
            release: self.release.clone().expect("set at start"),
            seed: self.seed,
            tasks: self.tasks.clone(),
            may_lead,
        }
    }

    /// Forgets everything a process keeps in memory about the cluster.
    pub(crate) fn forget_cluster(&mut self) {
        self.registered = false;
        self.members.clear();
        self.leases.clear();
        self.vacant_since.clear();
        self.held.clear();
        self.covering.clear();
        self.taking.clear();
        self.releasing.clear();
        self.recheck = None;
        self.firing.clear();
    }
}

// ------------------------------------------------------------------------------------------------
// The world: event loop, network, server handling, node state machine, faults
// ------------------------------------------------------------------------------------------------

/// A registered member: its node, the session owning its znode, its data.
pub(crate) type Registered = (NodeIx, SessionId, Member);

/// A running node's release and clock offset.
pub(crate) type NodeState = (Version, i64);

pub(crate) struct World<'s> {
    pub(crate) sc: &'s Scenario,
    pub(crate) now: Ms,
    pub(crate) queue: BinaryHeap<Queued>,
    pub(crate) seq: u64,
    pub(crate) rng: StdRng,
    pub(crate) zk: ModelZk,
    pub(crate) conns: BTreeMap<ConnId, Conn>,
    pub(crate) next_conn: u64,
    pub(crate) link_up: Vec<bool>,
    pub(crate) nodes: Vec<Node>,
    pub(crate) check: Checker,
    pub(crate) trace: Vec<Trace>,
    pub(crate) stats: Stats,
    /// Faults by node (`None`: every node), as intervals (an instant one has start = end).
    pub(crate) disturbed: Vec<(Option<NodeIx>, Ms, Ms)>,
    pub(crate) open_disturbance: BTreeMap<(NodeIx, u8), Ms>,
    /// (time, node, Some((release, skew)) when up / None when down), for eligibility over time.
    pub(crate) node_log: Vec<(Ms, NodeIx, Option<NodeState>)>,
    /// The registered members after each change, as the server has them.
    pub(crate) member_log: Vec<(Ms, Vec<Registered>)>,
}

impl<'s> World<'s> {
    pub(crate) fn new(sc: &'s Scenario) -> World<'s> {
        let mut world = World {
            sc,
            now: 0,
            queue: BinaryHeap::new(),
            seq: 0,
            rng: StdRng::seed_from_u64(sc.seed ^ 0x005e_ed0f_5111),
            zk: ModelZk::default(),
            conns: BTreeMap::new(),
            next_conn: 0,
            link_up: vec![true; sc.nodes.len()],
            nodes: sc
                .nodes
                .iter()
                .map(|def| Node {
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
                    ..Node::default()
                })
                .collect(),
            check: Checker::default(),
            trace: Vec::new(),
            stats: Stats::default(),
            disturbed: Vec::new(),
            open_disturbance: BTreeMap::new(),
            node_log: Vec::new(),
            member_log: vec![(0, Vec::new())],
        };
        for (t, task) in sc.tasks.iter().enumerate() {
            if task.initial_record {
                world.zk.znodes.insert(
                    Path::Record(t),
                    Znode {
                        data: Data::Record(FireRecord {
                            tick: epoch(),
                            node: NO_NODE,
                            session: SessionId(0),
                        }),
                        version: 0,
                        owner: None,
                    },
                );
            }
        }
        for (at, fault) in &sc.faults {
            world.push(*at, Ev::Fault(fault.clone()));
        }
        world
    }

    pub(crate) fn push(&mut self, at: Ms, ev: Ev) {
        self.seq += 1;
        self.queue.push(Queued {
            at,
            seq: self.seq,
            ev,
        });
    }

    pub(crate) fn timer(&mut self, n: NodeIx, delay: Ms, timer: Timer) {
        let inc = self.nodes[n].inc;
        self.push(
            self.now + delay,
            Ev::Timer {
                node: n,
                inc,
                timer,
            },
        );
    }

    pub(crate) fn note(&mut self, node: Option<NodeIx>, task: Option<TaskIx>, what: What) {
        self.trace.push(Trace {
            at: self.now,
            node,
            task,
            what,
        });
    }

    pub(crate) fn latency(&mut self) -> Ms {
        if self.rng.random_bool(0.05) {
            self.rng.random_range(20..=300)
        } else {
            self.rng.random_range(1..=15)
        }
    }

    /// The node's wall clock: true time plus its skew.
    pub(crate) fn wall(&self, n: NodeIx) -> DateTime<Utc> {
        epoch() + TimeDelta::milliseconds(self.now as i64 + self.nodes[n].skew_ms)
    }

    pub(crate) fn run(&mut self) {
        while let Some(Queued { at, ev, .. }) = self.queue.pop() {
            if at > self.sc.end {
                break;
            }
            self.now = at;
            self.stats.events += 1;
            self.dispatch(ev);
            // Stop at a broken promise so that the trace ends there.
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
    }

    pub(crate) fn dispatch(&mut self, ev: Ev) {
        match ev {
            Ev::Fault(fault) => self.fault(fault),
            Ev::ToServer { conn, msg } => {
                let c = self.conns.get_mut(&conn).expect("known conn");
                if !c.alive {
                    return;
                }
                if !self.link_up[c.node] {
                    c.alive = false;
                    return;
                }
                self.server(conn, msg);
            }
            Ev::ToNode {
                node,
                conn,
                msg,
                buffered,
            } => {
                if !buffered {
                    let c = self.conns.get_mut(&conn).expect("known conn");
                    if !c.alive {
                        return;
                    }
                    if !self.link_up[node] {
                        c.alive = false;
                        return;
                    }
                }
                if !self.nodes[node].up {
                    return;
                }
                if self.nodes[node].frozen {
                    self.nodes[node].deferred.push(Ev::ToNode {
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
                let state = &mut self.nodes[node];
                if !state.up || state.inc != inc {
                    return;
                }
                if state.frozen {
                    state.deferred.push(Ev::Timer { node, inc, timer });
                    return;
                }
                self.on_timer(node, timer);
            }
            Ev::SessionCheck(id) => self.session_check(id),
        }
    }

    // --------------------------------------------------------------------------------------------
    // Network
    // --------------------------------------------------------------------------------------------

    pub(crate) fn open_conn(&mut self, node: NodeIx) -> ConnId {
        self.next_conn += 1;
        let id = ConnId(self.next_conn);
        self.conns.insert(
            id,
            Conn {
                node,
                alive: true,
                session: None,
                to_server_at: 0,
                to_node_at: 0,
            },
        );
        id
    }

    pub(crate) fn kill_conn(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.alive = false;
        }
    }

    pub(crate) fn send_to_server(&mut self, conn: ConnId, msg: ToServer) {
        let latency = self.latency();
        let now = self.now;
        let c = self.conns.get_mut(&conn).expect("known conn");
        if !c.alive {
            return;
        }
        if !self.link_up[c.node] {
            c.alive = false;
            return;
        }
        let at = (now + latency).max(c.to_server_at);
        c.to_server_at = at;
        self.push(at, Ev::ToServer { conn, msg });
    }

    pub(crate) fn send_to_node(&mut self, conn: ConnId, msg: ToNode) {
        let latency = self.latency();
        let now = self.now;
        let c = self.conns.get(&conn).expect("known conn");
        let node = c.node;
        if !c.alive {
            return;
        }
        if !self.link_up[node] {
            self.kill_conn(conn);
            return;
        }
        let loss = self.nodes[node].loss_pct;
        if loss > 0 && matches!(msg, ToNode::Reply { .. }) && self.rng.random_range(0..100) < loss {
            // Applied, but the reply is lost with the connection; the node sees a reset.
            self.kill_conn(conn);
            self.stats.replies_lost += 1;
            self.note(Some(node), None, What::ReplyLost);
            let delay = self.rng.random_range(5..=200);
            self.timer(node, delay, Timer::Reset(conn));
            return;
        }
        let c = self.conns.get_mut(&conn).expect("known conn");
        let at = (now + latency).max(c.to_node_at);
        c.to_node_at = at;
        self.push(
            at,
            Ev::ToNode {
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

    pub(crate) fn server(&mut self, conn: ConnId, msg: ToServer) {
        let session = self.conns[&conn].session;
        match msg {
            ToServer::Connect { session: None } => {
                let id = self
                    .zk
                    .open_session(self.sc.session_timeout, self.now, conn);
                self.conns.get_mut(&conn).unwrap().session = Some(id);
                let node = self.conns[&conn].node;
                self.note(Some(node), None, What::SessionOpened(id));
                self.push(self.now + self.sc.session_timeout, Ev::SessionCheck(id));
                self.send_to_node(conn, ToNode::Connected(id));
            }
            ToServer::Connect { session: Some(id) } => {
                let now = self.now;
                match self.zk.sessions.get_mut(&id) {
                    Some(s) if s.alive => {
                        s.last_heard = now;
                        s.conn = Some(conn);
                        self.conns.get_mut(&conn).unwrap().session = Some(id);
                        self.send_to_node(conn, ToNode::Connected(id));
                    }
                    _ => self.send_to_node(conn, ToNode::Expired),
                }
            }
            ToServer::Close => self.kill_conn(conn),
            ToServer::Ping => {
                let Some(id) = session else { return };
                let now = self.now;
                let s = self.zk.sessions.get_mut(&id).expect("known session");
                if !s.alive {
                    self.send_to_node(conn, ToNode::Closed);
                } else if s.conn == Some(conn) {
                    s.last_heard = now;
                    self.send_to_node(conn, ToNode::Pong);
                }
            }
            ToServer::CloseSession => {
                let Some(id) = session else { return };
                if self.zk.sessions[&id].alive && self.zk.sessions[&id].conn == Some(conn) {
                    let mut changes = Vec::new();
                    self.zk.end_session(id, &mut changes);
                    let node = self.conns[&conn].node;
                    self.note(Some(node), None, What::SessionExpired(id));
                    self.broadcast(changes);
                }
                self.kill_conn(conn);
            }
            ToServer::Req { id: req, op } => {
                let Some(id) = session else { return };
                let now = self.now;
                let s = self.zk.sessions.get_mut(&id).expect("known session");
                if !s.alive {
                    // ZooKeeper rejects every operation of an expired session.
                    if let Op::Multi(ops) = &op
                        && ops.iter().any(writes_record)
                    {
                        self.stats.fenced_expired += 1;
                    }
                    self.send_to_node(
                        conn,
                        ToNode::Reply {
                            id: req,
                            result: Err(OpErr::SessionExpired),
                        },
                    );
                    return;
                }
                if s.conn != Some(conn) {
                    return;
                }
                s.last_heard = now;
                let mut changes = Vec::new();
                let mut writes = Vec::new();
                let holders: Vec<Option<SessionId>> = match &op {
                    Op::Multi(_) | Op::Set { .. } | Op::Create { .. } => (0..self.sc.tasks.len())
                        .map(|t| self.zk.lease_owner(t))
                        .collect(),
                    _ => Vec::new(),
                };
                let result = self.zk.apply(id, &op, &mut changes, &mut writes);
                if let (Op::Multi(ops), Err(OpErr::Multi { index, .. })) = (&op, &result) {
                    match &ops[*index] {
                        Op::Check { .. } => self.stats.fenced_lease += 1,
                        op if writes_record(op) => self.stats.fenced_version += 1,
                        _ => {}
                    }
                }
                let node = self.conns[&conn].node;
                for write in writes {
                    self.stats.claims += 1;
                    let holder = holders[write.task];
                    self.note(
                        Some(node),
                        Some(write.task),
                        What::ClaimApplied(write.record.tick, id, holder),
                    );
                    let latest = epoch()
                        + TimeDelta::milliseconds(self.now as i64 + self.sc.max_abs_skew_ms);
                    self.check.on_claim(self.now, &write, holder, latest);
                }
                for (t, owner, deleter) in std::mem::take(&mut self.zk.foreign_lease_deletes) {
                    self.check.violations.push(Violation {
                        kind: Kind::ForeignLeaseDelete,
                        at: self.now,
                        task: Some(t),
                        tick: None,
                        detail: format!(
                            "n{node} (session {}) deleted the lease of session {:?}",
                            deleter.0,
                            owner.map(|s| s.0)
                        ),
                    });
                }
                self.broadcast(changes);
                self.send_to_node(conn, ToNode::Reply { id: req, result });
            }
        }
    }

    /// Sends each change to every live session's connection, in order.
    pub(crate) fn broadcast(&mut self, changes: Vec<Change>) {
        if changes.is_empty() {
            return;
        }
        if changes
            .iter()
            .any(|c| matches!(c, Change::MemberUp(..) | Change::MemberDown(_)))
        {
            let members = self
                .zk
                .znodes
                .iter()
                .filter_map(|(path, z)| match (path, &z.data) {
                    (Path::Member(n), Data::Member(m)) => {
                        Some((*n, z.owner.expect("ephemeral"), m.clone()))
                    }
                    _ => None,
                })
                .collect();
            self.member_log.push((self.now, members));
        }
        let targets: Vec<ConnId> = self
            .zk
            .sessions
            .values()
            .filter(|s| s.alive)
            .filter_map(|s| s.conn)
            .filter(|c| self.conns[c].alive)
            .collect();
        for change in changes {
            for &conn in &targets {
                self.send_to_node(conn, ToNode::Watch(change.clone()));
            }
        }
    }

    pub(crate) fn session_check(&mut self, id: SessionId) {
        let s = &self.zk.sessions[&id];
        if !s.alive {
            return;
        }
        let due = s.last_heard + s.timeout;
        if self.now < due {
            self.push(due, Ev::SessionCheck(id));
            return;
        }
        let conn = s.conn;
        let mut changes = Vec::new();
        self.zk.end_session(id, &mut changes);
        self.stats.expiries += 1;
        let node = conn.map(|c| self.conns[&c].node);
        self.note(node, None, What::SessionExpired(id));
        self.broadcast(changes);
        if let Some(conn) = conn
            && self.conns[&conn].alive
        {
            self.send_to_node(conn, ToNode::Closed);
        }
    }

    // --------------------------------------------------------------------------------------------
    // Node: process and connection
    // --------------------------------------------------------------------------------------------

    pub(crate) fn boot(&mut self, n: NodeIx) {
        let node = &mut self.nodes[n];
        node.inc += 1;
        node.up = true;
        node.frozen = false;
        node.deferred.clear();
        node.session = None;
        node.conn = None;
        node.connected = false;
        node.pending.clear();
        node.unresolved.clear();
        node.forget_cluster();
        self.log_node(n);
        self.connect(n);
    }

    pub(crate) fn log_node(&mut self, n: NodeIx) {
        let node = &self.nodes[n];
        let state = node
            .up
            .then(|| (node.release.clone().unwrap(), node.skew_ms));
        self.node_log.push((self.now, n, state));
    }

    pub(crate) fn connect(&mut self, n: NodeIx) {
        let conn = self.open_conn(n);
        let node = &mut self.nodes[n];
        node.conn = Some(conn);
        node.connected = false;
        node.connect_seq += 1;
        let session = node.session;
        self.send_to_server(conn, ToServer::Connect { session });
        let delay = 1_000 + self.rng.random_range(0..=500);
        self.timer(n, delay, Timer::ConnectTimeout(conn));
    }

    pub(crate) fn schedule_reconnect(&mut self, n: NodeIx) {
        let node = &mut self.nodes[n];
        node.conn = None;
        node.connected = false;
        node.connect_seq += 1;
        let seq = node.connect_seq;
        let delay = self.rng.random_range(100..=600);
        self.timer(n, delay, Timer::Reconnect(seq));
    }

    /// The connection is gone: the node is paused until it reconnects.
    pub(crate) fn disconnect(&mut self, n: NodeIx, why: &'static str) {
        if let Some(conn) = self.nodes[n].conn {
            // Requests already sent still reach the server; the close follows them.
            self.send_to_server(conn, ToServer::Close);
        }
        self.note(Some(n), None, What::Disconnected(why));
        self.fail_pending(n);
        let node = &mut self.nodes[n];
        node.ping_generation += 1;
        node.taking.clear();
        node.releasing.clear();
        node.recheck = None;
        self.pause_firing(n);
        self.schedule_reconnect(n);
    }

    /// Every request in flight fails with ConnectionLoss; claims among them become unknown.
    pub(crate) fn fail_pending(&mut self, n: NodeIx) {
        let pending = std::mem::take(&mut self.nodes[n].pending);
        for p in pending.into_values() {
            if let Pending::Claim {
                task,
                tick,
                session,
                ..
            } = p
            {
                if self.sc.knobs.bug == NodeBug::AssumeClaimedOnLoss {
                    self.ran(n, task, tick, session);
                } else {
                    self.note(Some(n), Some(task), What::Unresolved(tick));
                    self.nodes[n].unresolved.push((task, tick, session));
                }
            }
        }
    }

    /// Disconnected: the node drops its planners (a zombie keeps them, just not claiming).
    pub(crate) fn pause_firing(&mut self, n: NodeIx) {
        if self.sc.knobs.bug == NodeBug::Zombie {
            for f in self.nodes[n].firing.values_mut() {
                f.in_flight = false;
                f.queue.clear();
            }
        } else {
            self.stop_all_firing(n);
        }
    }

    pub(crate) fn stop_all_firing(&mut self, n: NodeIx) {
        let tasks: Vec<TaskIx> = self.nodes[n].firing.keys().copied().collect();
        for t in tasks {
            self.nodes[n].firing.remove(&t);
            self.note(Some(n), Some(t), What::FiringStopped);
        }
    }

    /// The session is gone: drop what it owned and rejoin with a new one.
    pub(crate) fn on_expired(&mut self, n: NodeIx) {
        self.note(Some(n), None, What::LearnedExpiry);
        if let Some(conn) = self.nodes[n].conn {
            self.kill_conn(conn);
        }
        self.fail_pending(n);
        self.pause_firing(n);
        let node = &mut self.nodes[n];
        node.session = None;
        node.ping_generation += 1;
        if self.sc.knobs.bug == NodeBug::Zombie {
            let held = std::mem::take(&mut node.held);
            let firing = std::mem::take(&mut node.firing);
            node.forget_cluster();
            node.held = held;
            node.firing = firing;
        } else {
            node.forget_cluster();
        }
        self.connect(n);
    }

    pub(crate) fn request(&mut self, n: NodeIx, op: Op, pending: Pending) -> bool {
        let node = &mut self.nodes[n];
        let (Some(conn), true) = (node.conn, node.connected) else {
            return false;
        };
        node.next_req += 1;
        let id = node.next_req;
        node.pending.insert(id, pending);
        self.send_to_server(conn, ToServer::Req { id, op });
        true
    }

    pub(crate) fn on_timer(&mut self, n: NodeIx, timer: Timer) {
        match timer {
            Timer::Ping(generation) => {
                let node = &self.nodes[n];
                if generation != node.ping_generation || !node.connected {
                    return;
                }
                let read_timeout = self.sc.session_timeout * 2 / 3;
                if self.now >= node.last_recv + read_timeout {
                    self.disconnect(n, "read timeout");
                    return;
                }
                let conn = node.conn.expect("connected");
                self.send_to_server(conn, ToServer::Ping);
                self.timer(n, self.sc.session_timeout / 3, Timer::Ping(generation));
            }
            Timer::Reconnect(seq) => {
                let node = &self.nodes[n];
                if seq == node.connect_seq && node.conn.is_none() {
                    self.connect(n);
                }
            }
            Timer::ConnectTimeout(conn) => {
                if self.nodes[n].conn == Some(conn) && !self.nodes[n].connected {
                    self.kill_conn(conn);
                    self.schedule_reconnect(n);
                }
            }
            Timer::Reset(conn) => {
                if self.nodes[n].conn == Some(conn) {
                    if self.nodes[n].connected {
                        self.disconnect(n, "connection reset");
                    } else {
                        self.schedule_reconnect(n);
                    }
                }
            }
            Timer::Recheck(at) => {
                if self.nodes[n].recheck == Some(at) {
                    self.nodes[n].recheck = None;
                    self.act(n);
                }
            }
            Timer::Wake {
                task,
                generation,
                seq,
            } => {
                let due = self.nodes[n]
                    .firing
                    .get(&task)
                    .is_some_and(|f| f.generation == generation && f.wake_seq == seq);
                if due {
                    self.pump(n, task);
                }
            }
            Timer::RegisterRetry => {
                let node = &self.nodes[n];
                let registering = node
                    .pending
                    .values()
                    .any(|p| matches!(p, Pending::Register));
                if node.connected && !node.registered && !registering {
                    self.register(n);
                }
            }
            Timer::Poke => {
                let tasks: Vec<TaskIx> = self.nodes[n].firing.keys().copied().collect();
                for t in tasks {
                    self.pump(n, t);
                }
                self.act(n);
            }
        }
    }

    pub(crate) fn receive(&mut self, n: NodeIx, conn: ConnId, msg: ToNode) {
        if self.nodes[n].conn != Some(conn) {
            return;
        }
        self.nodes[n].last_recv = self.now;
        match msg {
            ToNode::Connected(session) => {
                if self.nodes[n].connected {
                    return;
                }
                let node = &mut self.nodes[n];
                node.connected = true;
                let new = node.session != Some(session);
                node.session = Some(session);
                node.ping_generation += 1;
                let generation = node.ping_generation;
                self.note(Some(n), None, What::Connected(session));
                self.timer(n, self.sc.session_timeout / 3, Timer::Ping(generation));
                if !self.nodes[n].firing.is_empty() {
                    // Only a zombie still has planners here; they resume where they were.
                    self.timer(n, 0, Timer::Poke);
                }
                if new {
                    self.nodes[n].registered = false;
                    self.register(n);
                }
                self.request(n, Op::List, Pending::List);
                let unresolved = std::mem::take(&mut self.nodes[n].unresolved);
                for (task, tick, session) in unresolved {
                    self.request(
                        n,
                        Op::Get {
                            path: Path::Record(task),
                        },
                        Pending::Resolve {
                            task,
                            tick,
                            session,
                        },
                    );
                }
            }
            ToNode::Expired => self.on_expired(n),
            ToNode::Closed => self.disconnect(n, "closed by the server"),
            ToNode::Pong => {}
            ToNode::Watch(change) => self.on_change(n, change),
            ToNode::Reply { id, result } => {
                let Some(pending) = self.nodes[n].pending.remove(&id) else {
                    return;
                };
                if matches!(result, Err(OpErr::SessionExpired)) {
                    if let Pending::Claim { task, tick, .. } = pending {
                        self.note(Some(n), Some(task), What::ClaimRejected(tick));
                    }
                    self.on_expired(n);
                    return;
                }
                self.on_reply(n, pending, result);
            }
        }
    }

    pub(crate) fn register(&mut self, n: NodeIx) {
        let may_lead = self.nodes[n].skew_ms.abs() <= self.sc.max_clock_skew_ms;
        let member = self.nodes[n].member(may_lead);
        self.request(
            n,
            Op::Create {
                path: Path::Member(n),
                data: Data::Member(member),
                ephemeral: true,
            },
            Pending::Register,
        );
    }

    // --------------------------------------------------------------------------------------------
    // Node: view and lease decisions
    // --------------------------------------------------------------------------------------------

    pub(crate) fn on_change(&mut self, n: NodeIx, change: Change) {
        let node = &mut self.nodes[n];
        let me = node.session;
        match change {
            Change::MemberUp(i, member, session) => {
                if i == n && Some(session) == me {
                    node.registered = true;
                }
                node.members.insert(i, (member, session));
                if i != n {
                    node.members_changed = self.now;
                }
            }
            Change::MemberDown(i) => {
                node.members.remove(&i);
                if i == n {
                    node.registered = false;
                }
            }
            Change::LeaseUp(t, session, version) => {
                node.leases.insert(t, (session, version));
                if Some(session) == me {
                    if !node.releasing.contains(&t) {
                        node.held.insert(t, version);
                    }
                } else if self.sc.knobs.bug != NodeBug::Zombie {
                    node.held.remove(&t);
                }
            }
            Change::LeaseDown(t) => {
                node.leases.remove(&t);
                if self.sc.knobs.bug != NodeBug::Zombie {
                    node.held.remove(&t);
                }
                node.releasing.remove(&t);
            }
        }
        self.view_changed(n);
    }

    pub(crate) fn view_changed(&mut self, n: NodeIx) {
        let now = self.now;
        let node = &mut self.nodes[n];
        for &t in &node.defines {
            if node.leases.contains_key(&t) {
                node.vacant_since.remove(&t);
            } else {
                node.vacant_since.entry(t).or_insert(now);
            }
        }
        self.sync_firing(n);
        self.act(n);
    }

    /// Fires exactly the held leases, and only while connected.
    pub(crate) fn sync_firing(&mut self, n: NodeIx) {
        if !self.nodes[n].connected {
            self.pause_firing(n);
            return;
        }
        let node = &self.nodes[n];
        let stop: Vec<TaskIx> = node
            .firing
            .keys()
            .filter(|t| !node.held.contains_key(t))
            .copied()
            .collect();
        let start: Vec<(TaskIx, i32)> = node
            .held
            .iter()
            .filter(|(t, _)| !node.firing.contains_key(t))
            .map(|(t, v)| (*t, *v))
            .collect();
        for t in stop {
            self.nodes[n].firing.remove(&t);
            self.note(Some(n), Some(t), What::FiringStopped);
        }
        for (t, version) in start {
            let node = &mut self.nodes[n];
            node.next_generation += 1;
            let generation = node.next_generation;
            node.firing.insert(
                t,
                Firing {
                    generation,
                    lease_version: version,
                    planner: None,
                    cache: None,
                    queue: VecDeque::new(),
                    in_flight: false,
                    wake_seq: 0,
                },
            );
            self.note(Some(n), Some(t), What::FiringStarted(version));
            self.request(
                n,
                Op::Get {
                    path: Path::Record(t),
                },
                Pending::Load {
                    task: t,
                    generation,
                },
            );
        }
    }

    /// Runs `lease::decide` on the node's current view and applies its actions.
    pub(crate) fn act(&mut self, n: NodeIx) {
        let node = &self.nodes[n];
        if !node.up || !node.connected {
            return;
        }
        let names = &self.sc.tasks;
        let node = &mut self.nodes[n];
        node.covering.retain(|t, _| node.held.contains_key(t));
        let node = &self.nodes[n];
        let members: Vec<Member> = node.members.values().map(|(m, _)| m.clone()).collect();
        let present: HashSet<String> = node.leases.keys().map(|&t| names[t].name.clone()).collect();
        let held: HashSet<String> = node.held.keys().map(|&t| names[t].name.clone()).collect();
        let vacant_since: HashMap<String, Duration> = node
            .vacant_since
            .iter()
            .map(|(&t, &ms)| (names[t].name.clone(), Duration::from_millis(ms)))
            .collect();
        let covering: HashMap<String, Duration> = node
            .covering
            .iter()
            .map(|(&t, &ms)| (names[t].name.clone(), Duration::from_millis(ms)))
            .collect();
        let decision = lease::decide(&LeaseView {
            me: &node.id,
            members: &members,
            present: &present,
            held: &held,
            covering: &covering,
            vacant_since: &vacant_since,
            members_changed: Duration::from_millis(node.members_changed),
            now: Duration::from_millis(self.now),
            may_lead: node.skew_ms.abs() <= self.sc.max_clock_skew_ms,
        });
        for action in decision.actions {
            let cover = matches!(action, LeaseAction::Cover(_));
            match action {
                LeaseAction::Take(name) | LeaseAction::Cover(name) => {
                    let t = task_ix(&name);
                    let node = &mut self.nodes[n];
                    if node.taking.contains(&t) || node.held.contains_key(&t) {
                        continue;
                    }
                    node.taking.insert(t);
                    self.stats.takes += 1;
                    self.note(Some(n), Some(t), What::TakeSent);
                    self.request(
                        n,
                        Op::Create {
                            path: Path::Lease(t),
                            data: Data::Lease,
                            ephemeral: true,
                        },
                        Pending::Take(t, cover),
                    );
                }
                LeaseAction::Release(name) => {
                    let t = task_ix(&name);
                    let node = &mut self.nodes[n];
                    let Some(version) = node.held.remove(&t) else {
                        continue;
                    };
                    // Stop claiming first; the delete goes after any claim already sent (FIFO).
                    if node.firing.remove(&t).is_some() {
                        self.note(Some(n), Some(t), What::FiringStopped);
                    }
                    self.nodes[n].releasing.insert(t);
                    self.stats.releases += 1;
                    self.note(Some(n), Some(t), What::ReleaseSent);
                    self.request(
                        n,
                        Op::Delete {
                            path: Path::Lease(t),
                            version: Some(version),
                        },
                        Pending::Release(t),
                    );
                }
            }
        }
        if let Some(at) = decision.recheck_at {
            let at = at.as_millis() as Ms;
            let node = &mut self.nodes[n];
            if node.recheck.is_none_or(|r| at < r) {
                node.recheck = Some(at);
                self.timer(n, at.saturating_sub(self.now), Timer::Recheck(at));
            }
        }
    }

    // --------------------------------------------------------------------------------------------
    // Node: replies
    // --------------------------------------------------------------------------------------------

    pub(crate) fn on_reply(&mut self, n: NodeIx, pending: Pending, result: Result<OpOk, OpErr>) {
        let me = self.nodes[n].session.expect("connected");
        match pending {
            Pending::Stop | Pending::Republish => {}
            Pending::Register => match result {
                Ok(_) => {
                    let may_lead = self.nodes[n].skew_ms.abs() <= self.sc.max_clock_skew_ms;
                    let member = self.nodes[n].member(may_lead);
                    let node = &mut self.nodes[n];
                    node.registered = true;
                    node.members.insert(n, (member, me));
                    self.note(Some(n), None, What::Registered);
                    self.view_changed(n);
                }
                Err(OpErr::NodeExists { owner }) if owner == Some(me) => {
                    self.nodes[n].registered = true;
                }
                Err(OpErr::NodeExists { owner }) => {
                    // The member of an earlier session of ours has not expired yet.
                    self.note(Some(n), None, What::RegisterRefused(owner));
                    self.timer(n, 1_000, Timer::RegisterRetry);
                }
                Err(_) => self.timer(n, 1_000, Timer::RegisterRetry),
            },
            Pending::List => {
                let Ok(OpOk::List { members, leases }) = result else {
                    return;
                };
                let zombie = self.sc.knobs.bug == NodeBug::Zombie;
                let node = &mut self.nodes[n];
                node.members = members.into_iter().map(|(i, m, s)| (i, (m, s))).collect();
                node.leases = leases.iter().map(|&(t, s, v)| (t, (s, v))).collect();
                if !zombie {
                    node.held.clear();
                }
                for &(t, s, v) in &leases {
                    // A lease this node is releasing may still be listed: the delete is on its
                    // way. Taking it back would delete it twice, maybe a successor's.
                    if s == me && !node.releasing.contains(&t) {
                        node.held.insert(t, v);
                    }
                }
                node.registered = node.members.get(&n).is_some_and(|(_, s)| *s == me);
                let registering = node
                    .pending
                    .values()
                    .any(|p| matches!(p, Pending::Register));
                if !node.registered && !registering {
                    self.register(n);
                }
                self.view_changed(n);
            }
            Pending::Take(t, cover) => {
                self.nodes[n].taking.remove(&t);
                match result {
                    Ok(OpOk::Version(version)) => {
                        let now = self.now;
                        let node = &mut self.nodes[n];
                        node.leases.insert(t, (me, version));
                        // The change may have come first and the node already let go of it.
                        if !node.releasing.contains(&t) {
                            node.held.insert(t, version);
                            if cover {
                                node.covering.insert(t, now);
                            } else {
                                node.covering.remove(&t);
                            }
                        }
                        self.note(Some(n), Some(t), What::LeaseCreated(me));
                    }
                    Err(OpErr::NodeExists { owner }) => {
                        self.note(Some(n), Some(t), What::TakeRefused(owner));
                        if let Some(owner) = owner {
                            let node = &mut self.nodes[n];
                            node.leases.entry(t).or_insert((owner, 0));
                            if owner == me && !node.releasing.contains(&t) {
                                node.held.insert(t, 0);
                            }
                        }
                    }
                    _ => {}
                }
                self.view_changed(n);
            }
            Pending::Release(t) => {
                let node = &mut self.nodes[n];
                node.releasing.remove(&t);
                if node.leases.get(&t).is_some_and(|(s, _)| *s == me) {
                    node.leases.remove(&t);
                }
                self.note(Some(n), Some(t), What::LeaseDeleted);
                self.view_changed(n);
            }
            Pending::Load { task, generation } => {
                let record = record_of(&result);
                let bug = self.sc.knobs.bug;
                let wall = self.wall(n);
                let rules = self.sc.tasks[task].rules.clone();
                let Some(f) = self.nodes[n].firing.get_mut(&task) else {
                    return;
                };
                if f.generation != generation {
                    return;
                }
                let last = record.as_ref().map(|(r, _)| r.tick);
                f.cache = record;
                let start_from = if bug == NodeBug::NoCatchUp {
                    None
                } else {
                    last
                };
                f.planner = Some(TickPlanner::start(rules, start_from, wall));
                self.note(Some(n), Some(task), What::RecordLoaded(last));
                self.pump(n, task);
            }
            Pending::Claim {
                task,
                generation,
                tick,
                attempt,
                session,
            } => {
                let record_op = match self.sc.knobs.claim_mode {
                    ClaimMode::Fenced => 1,
                    ClaimMode::Unfenced => 0,
                };
                let current = self.nodes[n]
                    .firing
                    .get(&task)
                    .is_some_and(|f| f.generation == generation);
                match result {
                    Ok(OpOk::Multi(versions)) => {
                        self.note(Some(n), Some(task), What::Claimed(tick));
                        self.ran(n, task, tick, session);
                        if current {
                            let f = self.nodes[n].firing.get_mut(&task).unwrap();
                            f.cache = Some((
                                FireRecord {
                                    tick,
                                    node: n,
                                    session,
                                },
                                versions[record_op],
                            ));
                            f.in_flight = false;
                            self.pump(n, task);
                        }
                    }
                    Err(OpErr::Multi { index, .. }) if index < record_op => {
                        self.stats.not_leader += 1;
                        self.note(Some(n), Some(task), What::NotLeader(tick));
                        if current {
                            self.nodes[n].firing.get_mut(&task).unwrap().in_flight = false;
                            self.pump(n, task);
                        }
                    }
                    Err(_) => {
                        self.stats.conflicts += 1;
                        self.note(Some(n), Some(task), What::ClaimConflict(tick));
                        if current && attempt == 0 {
                            self.request(
                                n,
                                Op::Get {
                                    path: Path::Record(task),
                                },
                                Pending::Reload {
                                    task,
                                    generation,
                                    tick,
                                },
                            );
                        } else if current {
                            self.nodes[n].firing.get_mut(&task).unwrap().in_flight = false;
                            self.pump(n, task);
                        }
                    }
                    Ok(_) => unreachable!("a claim is a multi"),
                }
            }
            Pending::Reload {
                task,
                generation,
                tick,
            } => {
                let record = record_of(&result);
                let Some(f) = self.nodes[n].firing.get_mut(&task) else {
                    return;
                };
                if f.generation != generation {
                    return;
                }
                f.cache = record;
                let newer = f.cache.as_ref().is_none_or(|(r, _)| r.tick < tick);
                if newer {
                    self.send_claim(n, task, tick, 1);
                } else {
                    f.in_flight = false;
                    let seen = f.cache.as_ref().map(|(r, _)| r.tick);
                    self.stats.already_claimed += 1;
                    self.note(Some(n), Some(task), What::AlreadyClaimed(tick, seen));
                    self.pump(n, task);
                }
            }
            Pending::Resolve {
                task,
                tick,
                session,
            } => {
                let won = record_of(&result).is_some_and(|(r, _)| {
                    r == FireRecord {
                        tick,
                        node: n,
                        session,
                    }
                });
                self.note(Some(n), Some(task), What::Resolved(tick, won));
                if won {
                    self.stats.resolved_won += 1;
                    self.ran(n, task, tick, session);
                } else {
                    self.stats.resolved_lost += 1;
                }
            }
        }
    }

    pub(crate) fn ran(&mut self, n: NodeIx, task: TaskIx, tick: DateTime<Utc>, session: SessionId) {
        self.stats.runs += 1;
        self.note(Some(n), Some(task), What::Ran(tick));
        self.check.on_run(self.now, task, tick, n, session);
    }

    // --------------------------------------------------------------------------------------------
    // Node: planning and claiming
    // --------------------------------------------------------------------------------------------

    /// Drives one task's planner: claims queued ticks one at a time, polls for more, sleeps.
    pub(crate) fn pump(&mut self, n: NodeIx, task: TaskIx) {
        if !self.nodes[n].connected {
            return;
        }
        loop {
            let wall = self.wall(n);
            let skew = self.nodes[n].skew_ms;
            let Some(f) = self.nodes[n].firing.get_mut(&task) else {
                return;
            };
            if f.in_flight {
                return;
            }
            let Some(planner) = f.planner.as_mut() else {
                return;
            };
            if let Some(tick) = f.queue.pop_front() {
                let seen = f.cache.as_ref().map(|(r, _)| r.tick);
                if seen.is_some_and(|r| r >= tick) {
                    self.stats.already_claimed += 1;
                    self.note(Some(n), Some(task), What::AlreadyClaimed(tick, seen));
                    continue;
                }
                self.send_claim(n, task, tick, 0);
                return;
            }
            match planner.poll(wall) {
                Step::Fire { ticks, .. } => f.queue.extend(ticks.iter().map(|t| t.instant)),
                Step::SleepUntil(due) | Step::Held { until: due, .. } => {
                    f.wake_seq += 1;
                    let (generation, seq) = (f.generation, f.wake_seq);
                    let true_ms = (due - epoch()).num_milliseconds() - skew;
                    let mut delay = (true_ms - self.now as i64).max(0) as Ms;
                    if self.sc.knobs.bug == NodeBug::SlowTimer {
                        delay += 3_000;
                    }
                    self.timer(
                        n,
                        delay,
                        Timer::Wake {
                            task,
                            generation,
                            seq,
                        },
                    );
                    return;
                }
                Step::Finished => return,
            }
        }
    }

    pub(crate) fn send_claim(&mut self, n: NodeIx, task: TaskIx, tick: DateTime<Utc>, attempt: u8) {
        let node = &mut self.nodes[n];
        let session = node.session.expect("connected");
        let f = node.firing.get_mut(&task).expect("firing");
        f.in_flight = true;
        let generation = f.generation;
        let record = Data::Record(FireRecord {
            tick,
            node: n,
            session,
        });
        let path = Path::Record(task);
        let write = match (&f.cache, self.sc.knobs.claim_mode) {
            (None, _) => Op::Create {
                path,
                data: record,
                ephemeral: false,
            },
            (Some((_, version)), ClaimMode::Fenced) => Op::Set {
                path,
                data: record,
                version: Some(*version),
            },
            (Some(_), ClaimMode::Unfenced) => Op::Set {
                path,
                data: record,
                version: None,
            },
        };
        let ops = match self.sc.knobs.claim_mode {
            ClaimMode::Fenced => vec![
                Op::Check {
                    path: Path::Lease(task),
                    version: f.lease_version,
                },
                write,
            ],
            ClaimMode::Unfenced => vec![write],
        };
        self.note(Some(n), Some(task), What::ClaimSent(tick, attempt));
        self.request(
            n,
            Op::Multi(ops),
            Pending::Claim {
                task,
                generation,
                tick,
                attempt,
                session,
            },
        );
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
        self.note(fault.node(), None, What::Fault(fault.clone()));
        if !matches!(fault, Fault::LinkUp(_) | Fault::Thaw(_) | Fault::LossOff(_)) {
            self.disturbed.push((fault.node(), self.now, self.now));
        }
        match fault {
            Fault::Start(n) => self.boot(n),
            Fault::Crash(n) => {
                if !self.nodes[n].up {
                    return;
                }
                if let Some(conn) = self.nodes[n].conn {
                    self.kill_conn(conn);
                }
                self.kill(n);
            }
            Fault::Stop(n) => {
                if !self.nodes[n].up {
                    return;
                }
                if self.nodes[n].frozen {
                    // A stopped process cannot handle SIGTERM; it dies when killed.
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
                if self.nodes[n].up {
                    return;
                }
                if let Some(seed) = seed {
                    self.nodes[n].seed = seed;
                }
                if let Some(release) = release {
                    self.nodes[n].release = Some(release);
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
                if self.nodes[n].up {
                    self.nodes[n].frozen = true;
                    self.disturb(n, 1, true);
                }
            }
            Fault::Thaw(n) => self.thaw(n),
            Fault::LossOn(n, pct) => {
                self.nodes[n].loss_pct = pct;
                self.disturb(n, 2, true);
            }
            Fault::LossOff(n) => {
                self.nodes[n].loss_pct = 0;
                self.disturb(n, 2, false);
            }
            Fault::Skew(n, skew) => {
                let limit = self.sc.max_clock_skew_ms;
                let could = self.nodes[n].skew_ms.abs() <= limit;
                self.nodes[n].skew_ms = skew;
                let can = skew.abs() <= limit;
                if could != can && self.nodes[n].up && self.nodes[n].registered {
                    // The real node re-registers when whether it may lead changes.
                    let member = self.nodes[n].member(can);
                    self.request(
                        n,
                        Op::Set {
                            path: Path::Member(n),
                            data: Data::Member(member),
                            version: None,
                        },
                        Pending::Republish,
                    );
                }
                if self.nodes[n].up {
                    self.log_node(n);
                    // The daemon notices a clock step and re-plans every task.
                    self.timer(n, 0, Timer::Poke);
                }
            }
            Fault::Stranger(_) => unreachable!("the hand-written node is never run with strangers"),
            Fault::HealAll => {
                for n in 0..self.nodes.len() {
                    self.link_up[n] = true;
                    self.nodes[n].loss_pct = 0;
                    self.thaw(n);
                    for kind in 0..3 {
                        self.disturb(n, kind, false);
                    }
                    if !self.nodes[n].up {
                        self.boot(n);
                    }
                }
            }
        }
    }

    pub(crate) fn kill(&mut self, n: NodeIx) {
        let node = &mut self.nodes[n];
        node.up = false;
        node.frozen = false;
        node.deferred.clear();
        node.inc += 1;
        node.firing.clear();
        self.log_node(n);
    }

    pub(crate) fn graceful_stop(&mut self, n: NodeIx) {
        let node = &self.nodes[n];
        if node.connected {
            // Member and held leases in one multi (a lease being released is already going,
            // and deleting it again could delete a successor's); closing the session deletes
            // whatever this misses.
            let mut ops = vec![Op::Delete {
                path: Path::Member(n),
                version: None,
            }];
            ops.extend(node.held.iter().map(|(&t, &version)| Op::Delete {
                path: Path::Lease(t),
                version: Some(version),
            }));
            self.stop_all_firing(n);
            self.request(n, Op::Multi(ops), Pending::Stop);
            let conn = self.nodes[n].conn.expect("connected");
            self.send_to_server(conn, ToServer::CloseSession);
        } else if let Some(conn) = node.conn {
            self.kill_conn(conn);
        }
        self.kill(n);
    }

    pub(crate) fn thaw(&mut self, n: NodeIx) {
        if !self.nodes[n].frozen {
            return;
        }
        self.nodes[n].frozen = false;
        self.disturb(n, 1, false);
        // Resumed: timers that came due and buffered messages run now, in their order; then the
        // daemon's clock check re-plans (a stopped process may also have missed a clock step).
        // Which runs first after SIGCONT is up to the scheduler: half the time the task loops'
        // timers run before anything else, so the node acts on its stale view at once.
        let deferred = std::mem::take(&mut self.nodes[n].deferred);
        let (wakes, rest): (Vec<Ev>, Vec<Ev>) = if self.rng.random_bool(0.5) {
            deferred.into_iter().partition(|ev| {
                matches!(
                    ev,
                    Ev::Timer {
                        timer: Timer::Wake { .. },
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
        self.timer(n, 0, Timer::Poke);
    }

    // --------------------------------------------------------------------------------------------
    // Liveness
    // --------------------------------------------------------------------------------------------

    /// The state (release, skew) of node `n` at `at`, `None` if it was down.
    pub(crate) fn node_state_at(&self, n: NodeIx, at: Ms) -> Option<NodeState> {
        self.node_log
            .iter()
            .rfind(|(t, node, _)| *node == n && *t <= at)
            .and_then(|(_, _, s)| s.clone())
    }

    pub(crate) fn can_lead(&self, n: NodeIx, task: TaskIx, state: &NodeState) -> bool {
        let def = &self.sc.tasks[task];
        self.nodes[n].defines.contains(&task)
            && def.version_req.as_ref().is_none_or(|r| r.matches(&state.0))
            && state.1.abs() <= self.sc.max_clock_skew_ms
    }

    pub(crate) fn check_liveness(&mut self) {
        let sc = self.sc;
        for ((n, _), start) in std::mem::take(&mut self.open_disturbance) {
            self.disturbed.push((Some(n), start, sc.end));
        }
        let horizon = epoch() + TimeDelta::milliseconds((sc.end - sc.settle) as i64);
        let healed = epoch() + TimeDelta::milliseconds((sc.fault_end + sc.settle) as i64);
        for (t, task) in sc.tasks.iter().enumerate() {
            if task.rules.catch_up != CatchUpPolicy::All {
                continue;
            }
            let leaders_at_end = (0..self.nodes.len())
                .filter(|&n| {
                    self.node_state_at(n, sc.end)
                        .is_some_and(|s| self.can_lead(n, t, &s))
                })
                .count();
            if leaders_at_end == 0 {
                continue;
            }
            let designated = self.designated_at_end(t);
            let first_claim = self
                .check
                .claims
                .range((t, DateTime::<Utc>::MIN_UTC)..=(t, DateTime::<Utc>::MAX_UTC))
                .next()
                .map(|((_, tick), _)| *tick);
            let from = if task.initial_record {
                epoch()
            } else {
                // Without a record nothing before the first claim is missed; but once the
                // cluster has settled, the first tick must be claimed.
                let settled = healed - TimeDelta::seconds(1);
                first_claim.map_or(settled, |c| (c - TimeDelta::milliseconds(1)).min(settled))
            };
            let last = epoch() + TimeDelta::milliseconds(sc.end as i64);
            for tick in task.rules.schedule.ticks_after(from) {
                if tick > last {
                    break;
                }
                let claims = self
                    .check
                    .claims
                    .get(&(t, tick))
                    .cloned()
                    .unwrap_or_default();
                let tick_ms = (tick - epoch()).num_milliseconds();
                if tick > horizon {
                    // Too late to require, but still expected on time in a quiet stretch.
                    if tick_ms >= 0 {
                        self.check_on_time(t, tick, tick_ms as Ms, claims.first().map(|c| c.at));
                    }
                    continue;
                }
                self.stats.live_ticks += 1;
                match claims.len() {
                    0 => {
                        self.check.violation(
                            Kind::TickLost,
                            sc.end,
                            t,
                            tick,
                            format!(
                                "tick {:.3}s never claimed ({} node(s) could lead the task at the end; {designated})",
                                secs(tick),
                                leaders_at_end
                            ),
                        );
                        continue;
                    }
                    1 => {}
                    _ => continue, // reported as a double claim
                }
                if tick_ms >= 0 {
                    self.check_on_time(t, tick, tick_ms as Ms, Some(claims[0].at));
                }
            }
        }
    }

    /// The node the registered members rank first for `task` now, with its session.
    pub(crate) fn designated_now(&self, task: TaskIx) -> Option<(NodeIx, SessionId)> {
        let mut members = Vec::new();
        let mut sessions = BTreeMap::new();
        for (path, z) in &self.zk.znodes {
            if let (Path::Member(n), Data::Member(m)) = (path, &z.data) {
                members.push(m.clone());
                sessions.insert(m.id.clone(), (*n, z.owner.expect("ephemeral")));
            }
        }
        let ranked = lease::ranking(&self.sc.tasks[task].name, &members);
        ranked.first().map(|top| sessions[top.id])
    }

    /// After settling, every lease is with the node ranked first for its task (a newer
    /// release joining took its tasks over, a holder that was no longer first let go).
    pub(crate) fn check_converged(&mut self) {
        for t in 0..self.sc.tasks.len() {
            let Some((n, session)) = self.designated_now(t) else {
                continue;
            };
            if self.nodes[n].skew_ms.abs() > self.sc.max_clock_skew_ms {
                continue; // It may not lead: see the liveness check and the known bug.
            }
            let holder = self.zk.lease_owner(t);
            if holder != Some(session) {
                self.check.violations.push(Violation {
                    kind: Kind::NotConverged,
                    at: self.now,
                    task: Some(t),
                    tick: None,
                    detail: format!(
                        "lease held by session {:?}, but n{n} (session {}) ranks first",
                        holder.map(|s| s.0),
                        session.0
                    ),
                });
            }
        }
    }

    /// Who the registered members rank first for `task` at the end, and whether it may lead.
    pub(crate) fn designated_at_end(&self, task: TaskIx) -> String {
        match self.designated_now(task) {
            None => "no registered member is eligible".to_string(),
            Some((n, _)) => {
                let skew = self.nodes[n].skew_ms;
                if skew.abs() > self.sc.max_clock_skew_ms {
                    format!(
                        "designated n{n} may not lead: its clock is off by {skew} ms, so the backups take the lease and release it at once"
                    )
                } else {
                    format!("designated n{n} may lead")
                }
            }
        }
    }

    /// A tick fires about on time when one node was ranked first for the task, healthy and
    /// able to lead, from `settle` before the tick until `grace` after it, whatever happened to
    /// the other nodes. `grace` is how far that node's clock is behind, plus 2 s.
    pub(crate) fn check_on_time(
        &mut self,
        t: TaskIx,
        tick: DateTime<Utc>,
        tick_ms: Ms,
        claimed_at: Option<Ms>,
    ) {
        let sc = self.sc;
        if tick_ms < sc.settle {
            return;
        }
        let from = tick_ms - sc.settle;
        let name = &sc.tasks[t].name;
        let designated = |members: &[Registered]| {
            let list: Vec<Member> = members.iter().map(|(_, _, m)| m.clone()).collect();
            let top = lease::ranking(name, &list)
                .first()
                .map(|c| c.id.to_string())?;
            members
                .iter()
                .find(|(_, _, m)| m.id == top)
                .map(|(n, s, _)| (*n, *s))
        };
        let first = self.member_log.partition_point(|(at, _)| *at <= from) - 1;
        let Some((leader, session)) = designated(&self.member_log[first].1) else {
            return;
        };
        let Some(state) = self.node_state_at(leader, from) else {
            return;
        };
        if !self.can_lead(leader, t, &state) {
            return;
        }
        let grace = (-state.1).max(0) as Ms + 2_000;
        let to = tick_ms + grace;
        if to > sc.end {
            return;
        }
        let stable = self.member_log[first + 1..]
            .iter()
            .take_while(|(at, _)| *at <= to)
            .all(|(_, members)| designated(members) == Some((leader, session)));
        let healthy = !self
            .disturbed
            .iter()
            .any(|&(n, s, e)| n.is_none_or(|n| n == leader) && s <= to && e >= from);
        if !stable || !healthy {
            return;
        }
        self.stats.on_time_checked += 1;
        match claimed_at {
            Some(at) if at <= to => {}
            Some(at) => self.check.violation(
                Kind::TickLate,
                at,
                t,
                tick,
                format!(
                    "tick {:.3}s claimed at {:.3}s, {} ms late, though n{leader} was ranked first and healthy throughout (grace {grace} ms)",
                    secs(tick),
                    at as f64 / 1000.0,
                    at - tick_ms
                ),
            ),
            None => self.check.violation(
                Kind::TickLate,
                to,
                t,
                tick,
                format!(
                    "tick {:.3}s not claimed within {grace} ms, though n{leader} was ranked first and healthy throughout",
                    secs(tick)
                ),
            ),
        }
    }
}

pub(crate) fn writes_record(op: &Op) -> bool {
    matches!(
        op,
        Op::Set {
            path: Path::Record(_),
            ..
        } | Op::Create {
            path: Path::Record(_),
            ..
        }
    )
}

pub(crate) fn task_ix(name: &str) -> TaskIx {
    name[1..].parse().expect("sim task names are tNN")
}

pub(crate) fn record_of(result: &Result<OpOk, OpErr>) -> Option<(FireRecord, i32)> {
    match result {
        Ok(OpOk::Data {
            data: Data::Record(r),
            version,
        }) => Some((r.clone(), *version)),
        _ => None,
    }
}
