//! A node's process: its boot, its ZooKeeper client (connect, heartbeats, reconnects,
//! expiry) and its driver (feeding the node inputs, performing its outputs, its timers).

use super::*;

impl Sim<'_> {
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
                let result = self.manual_success(n, fire_id, requested_at, 500);
                self.manual_run_ended(n, task, result, run);
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

    /// The success of a manual run (a trigger's, a backfill tick's, a chained run's) of
    /// `fire_id` for `tick` on node `n`, `duration_ms` long, ending now.
    pub(crate) fn manual_success(
        &self,
        n: NodeIx,
        fire_id: String,
        tick: DateTime<Utc>,
        duration_ms: Ms,
    ) -> RunResult {
        RunResult {
            tick,
            node: self.procs[n].id.clone(),
            exit: "exit code 0".into(),
            success: true,
            attempts: 1,
            duration_ms,
            finished_at: self.wall(n),
            fire_id: Some(fire_id),
            manual: true,
            exit_code: Some(0),
            ..RunResult::default()
        }
    }

    /// Node `n`'s manual run `run` of `task` ended with `result`: its coordinator stores the
    /// end, then its core hears of it.
    pub(crate) fn manual_run_ended(
        &mut self,
        n: NodeIx,
        task: TaskIx,
        result: RunResult,
        run: RunId,
    ) {
        let name = self.sc.tasks[task].name.clone();
        self.ask(n, Request::RunEnded { task: name, result }, Asked::RunEnded);
        self.core_input(n, FireInput::RunEnded { run });
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
            ..
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
}
