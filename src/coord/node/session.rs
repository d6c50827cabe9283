//! Session states, the tree, registration and the member view.
//!
//! A new session creates the tree (idempotent), adds the two persistent recursive watches and
//! probes the clock; then the node registers (task-set chunks + its ephemeral member znode) and
//! lists members and leases. Disconnected: paused. Reconnected within the session: listed
//! again. Expired (or disconnected past the negotiated timeout): a session loss.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::MemberStep;
use super::io::{CreateMode, Level, WatchKind, ZkFail, ZkOk, ZkOp};
use super::members::MemberRead;
use super::{AfterRecreate, Node, ReleaseAllJob, Relist, ReqId, Session, SkewVerdict, Then, Timer};
use crate::coord::record;
use crate::coord::records::{FORMAT_VERSION, MemberRecord, encode_taskset};
use crate::task::TaskSpec;

/// The session's life: the session itself, registering as a member, the re-listing after
/// (re)connecting, the clock's skew from ZooKeeper's, and leaving (`ReleaseAll`, `Close`).
#[derive(Debug, Default)]
pub(super) struct Life {
    /// The current session, from its first connection to its end.
    pub(super) session: Option<Session>,
    /// The registration in flight.
    pub(super) registering: Option<RegisterJob>,
    /// What the member record says as last written: registering again when it changes.
    pub(super) registered_as: Option<Registration>,
    /// "Another session is registered as this node" was said: not said again until this node
    /// registers.
    pub(super) register_waited: bool,
    /// The listing of members and leases in flight (after connecting or reconnecting): the
    /// view is not current, so nothing is decided or fired until it completes.
    pub(super) relist: Option<Relist>,
    /// Whether this node's clock is close enough to ZooKeeper's to lead, as last measured.
    pub(super) skew: Option<SkewVerdict>,
    /// This node's clock offset from ZooKeeper's, as last measured (ms, positive = ahead).
    pub(super) offset_ms: Option<i64>,
    /// The last clock probe failed (its answer lost with the connection, say): a reconnect
    /// probes again rather than waiting for the next `CLOCK_PROBE`.
    pub(super) probe_failed: bool,
    /// `ReleaseAll` was asked for: the node leads nothing from here on and never registers
    /// again.
    pub(super) stopping: bool,
    /// `Close` was done: the session is closed and no new one is taken up.
    pub(super) closed: bool,
    /// A close asked for while history appends were in flight ([`Node::close_after_history`]).
    pub(super) close_waiting: Option<ReqId>,
    /// Leaving the cluster (`ReleaseAll`) in flight.
    pub(super) release_all: Option<ReleaseAllJob>,
}

/// What this node's member record says about it, as last written: registering again is
/// needed when any of it changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Registration {
    /// The digest of the task set the record names.
    digest: String,
    /// The record's `leads`: whether this node may lead.
    leads: bool,
    /// The record's `drained`: whether the operator drained this node.
    drained: bool,
}

/// A registration in flight.
#[derive(Debug)]
pub(crate) struct RegisterJob {
    /// The member record being written.
    data: Vec<u8>,
    /// What the record says, kept as `registered_as` once written.
    registration: Registration,
    /// How many tasks the task set holds (for the log).
    count: usize,
    /// Publishing a chunk of the task set failed: the registration is tried again.
    failed: bool,
}

impl Node {
    pub(super) fn on_connected(&mut self, session_id: i64, timeout: Duration) {
        if self.life.closed {
            return;
        }
        if let Some(session) = self.life.session.as_mut().filter(|s| s.id == session_id) {
            if !session.connected {
                session.connected = true;
                session.disconnected_at = None;
                session.loss_counted = false;
                let listed = session.listed;
                self.report(
                    Level::Info,
                    "reconnected to ZooKeeper within the session; re-listing members and leases",
                );
                if listed {
                    self.start_relist();
                    // A registration that failed while disconnected had its retry dropped
                    // (retries wait for a connection): register now.
                    self.maybe_register();
                } else {
                    self.retry();
                }
                // A clock probe lost with the connection is sent again now: a node that may
                // not lead for its clock would otherwise wait up to `CLOCK_PROBE` to learn
                // that its clock is fine again.
                if std::mem::take(&mut self.life.probe_failed) {
                    self.probe(false);
                }
                // Trigger and backfill events missed while disconnected, and runs that ended
                // meanwhile.
                self.list_triggers();
                self.list_backfills();
                self.recount_waits(|_| true);
                self.delete_withheld_runs();
                self.publish();
            }
            return;
        }
        if self.life.session.is_some() {
            self.end_session();
        }
        if timeout != self.cfg.session_timeout {
            self.report_once(
                format!("negotiated {timeout:?}"),
                Level::Warn,
                format!(
                    "ZooKeeper negotiated a session timeout of {} instead of the configured {} (the server keeps it within its minSessionTimeout..maxSessionTimeout); this node's deadlines use {}",
                    humantime::format_duration(timeout),
                    humantime::format_duration(self.cfg.session_timeout),
                    humantime::format_duration(timeout),
                ),
            );
        }
        self.life.session = Some(Session {
            id: session_id,
            hex: format!("{session_id:x}"),
            connected: true,
            timeout,
            disconnected_at: None,
            loss_counted: false,
            setup_outstanding: Some(0),
            set_up: false,
            setup_failed: false,
            listed: false,
        });
        self.life.registered_as = None;
        self.io.retry_delay = Duration::from_millis(200);
        self.setup();
    }

    pub(super) fn on_connect_failed(&mut self, error: String) {
        let connect = self.cfg.connect.clone();
        self.report(
            Level::Error,
            format!(
                "paused: cannot connect to ZooKeeper ({error}); firing nothing until connected"
            ),
        )
        .field("zookeeper", connect);
        let why = format!("cannot reach ZooKeeper at {} ({error})", self.cfg.connect);
        self.set_why_paused(why);
    }

    pub(super) fn on_disconnected(&mut self) {
        let now = self.io.now.mono;
        let generation = self.io.generation;
        let Some(session) = self.life.session.as_mut() else {
            return;
        };
        if !session.connected {
            return;
        }
        session.connected = false;
        session.disconnected_at = Some(now);
        let deadline = now + session.timeout;
        self.report(
            Level::Warn,
            "paused: disconnected from ZooKeeper; firing nothing until reconnected",
        );
        let why = format!(
            "disconnected from ZooKeeper at {}; waiting to reconnect",
            self.cfg.connect
        );
        self.set_why_paused(why);
        self.publish();
        self.at(deadline, Timer::LossDeadline { generation });
    }

    pub(super) fn on_loss_deadline(&mut self, generation: u64) {
        if generation != self.io.generation {
            return;
        }
        let Some(session) = self.life.session.as_mut() else {
            return;
        };
        if session.connected || session.loss_counted {
            return;
        }
        session.loss_counted = true;
        let timeout = session.timeout;
        self.report(
            Level::Warn,
            "disconnected for longer than the session timeout: the session is presumed lost",
        )
        .field("timeout", humantime::format_duration(timeout));
        self.count_session_loss();
    }

    pub(super) fn on_expired(&mut self) {
        let Some(session) = &self.life.session else {
            return;
        };
        let counted = session.loss_counted;
        let hex = session.hex.clone();
        if !counted {
            self.count_session_loss();
        }
        self.report(
            Level::Warn,
            "session expired: leases and run records are gone; rejoining with a new session",
        )
        .field("session", hex);
        self.set_why_paused("the ZooKeeper session expired; rejoining".into());
        self.end_session();
        if !self.life.stopping && !self.life.closed {
            self.io.out.push_back(super::Output::NewSession);
        }
    }

    /// Forgets everything tied to the session that ended.
    pub(super) fn end_session(&mut self) {
        self.io.generation += 1;
        self.abort_pending();
        self.end_waits();
        self.life.session = None;
        self.view.present.clear();
        self.view.members.clear();
        self.view.member_sessions.clear();
        self.view.seen_sessions.clear();
        self.view.claimer_sessions.clear();
        self.view.unknown_runs.clear();
        self.view.fetches.clear();
        self.runs.own_runs.clear();
        self.runs.withheld_runs.clear();
        self.leases.take_backlog.clear();
        self.view.trust.clear();
        self.tasks.end_session();
        self.life.registering = None;
        self.life.registered_as = None;
        self.life.relist = None;
        self.view.gc = None;
        self.leases.recheck_at = None;
        self.io.retry_at = None;
        self.publish();
    }

    /// The cluster's persistent directories, the chroot's ancestors first.
    fn tree(&self) -> Vec<String> {
        let mut paths = Vec::new();
        let mut at = 0;
        while let Some(next) = self.paths.base[at + 1..].find('/') {
            at += next + 1;
            paths.push(self.paths.base[..at].to_string());
        }
        paths.push(self.paths.base.clone());
        paths.extend([
            self.paths.members(),
            self.paths.leases(),
            self.paths.tasks(),
            self.paths.tasksets(),
        ]);
        paths
    }

    pub(super) fn setup(&mut self) {
        let mut steps = Vec::new();
        for path in self.tree() {
            steps.push(self.create_dir(path));
        }
        for path in [self.paths.members(), self.paths.leases()] {
            steps.push(ZkOp::AddPersistentRecursiveWatch { path });
        }
        steps.extend(self.control_setup_ops());
        let mut triggers = self.trigger_setup_steps();
        triggers.extend(self.backfill_setup_steps());
        if let Some(session) = self.life.session.as_mut() {
            session.setup_outstanding = Some(steps.len() + 1);
        }
        for op in steps {
            self.call(op, MemberStep::SetupStep);
        }
        // The operator's marks, before registering: a drained node never leads in between.
        let reads = self.read_control(super::control::Phase::Setup);
        if let Some(outstanding) = self
            .life
            .session
            .as_mut()
            .and_then(|s| s.setup_outstanding.as_mut())
        {
            *outstanding += reads;
        }
        // Not setup steps: a failure here must not keep the node from leading.
        for op in triggers {
            self.call(op, Then::Ignore);
        }
        self.list_triggers();
        self.list_backfills();
        // Measured before registering, so that the member record says whether it may lead.
        self.probe(true);
    }

    pub(super) fn on_setup_step(&mut self, result: Result<ZkOk, ZkFail>) {
        let failed = match result {
            Ok(_) | Err(ZkFail::NodeExists) => None,
            Err(error) => Some(error),
        };
        if let Some(error) = failed {
            if let Some(session) = self.life.session.as_mut() {
                session.setup_failed = true;
            }
            let hex = self.session_hex();
            self.report(
                Level::Error,
                format!("ZooKeeper session setup failed ({error}); starting over"),
            )
            .field("session", hex);
            self.set_why_paused(format!(
                "ZooKeeper session setup failed ({error}); retrying"
            ));
        }
        self.setup_step_done();
    }

    pub(super) fn setup_step_done(&mut self) {
        let Some(session) = self.life.session.as_mut() else {
            return;
        };
        let Some(outstanding) = session.setup_outstanding.as_mut() else {
            return;
        };
        *outstanding -= 1;
        if *outstanding == 0 {
            session.setup_outstanding = None;
            session.set_up = !std::mem::take(&mut session.setup_failed);
            if session.set_up {
                self.maybe_register();
            } else {
                self.retry_later();
            }
        }
    }

    pub(super) fn publish_tasks(&mut self, tasks: &[TaskSpec]) {
        // A node where a task is disabled is not eligible to lead it.
        let mut enabled: Vec<TaskSpec> = tasks
            .iter()
            .filter(|t| record::eligible(t))
            .cloned()
            .collect();
        if self.cfg.bugs.every_node_as_leader {
            for task in &mut enabled {
                task.extras.run_on = crate::task::RunOn::Leader;
                task.digest = Default::default();
            }
        }
        let encoded = encode_taskset(&enabled);
        let unchanged = self
            .view
            .my_set
            .as_ref()
            .is_some_and(|(reference, _, _)| reference.digest == encoded.0.digest);
        if unchanged {
            return;
        }
        self.view.my_set = Some(encoded);
        self.control.check_due = true;
        self.maybe_register();
    }

    /// Whether this node may lead now (clock skew, stopping, drained).
    pub(super) fn may_lead(&self) -> bool {
        if self.life.stopping || self.drained() {
            return false;
        }
        match (self.cfg.max_clock_skew, self.life.skew) {
            (None, _) => true,
            // Not measured yet: setup measures it before registering.
            (Some(_), None) => false,
            (Some(_), Some(verdict)) => verdict != super::SkewVerdict::Refuse,
        }
    }

    /// Registers (again) when the task set or the `leads` flag differs from what was written.
    pub(super) fn maybe_register(&mut self) {
        let Some(session) = &self.life.session else {
            return;
        };
        if !session.connected
            || session.setup_outstanding.is_some()
            || self.life.registering.is_some()
        {
            return;
        }
        if self.life.stopping {
            return;
        }
        let Some((reference, chunks, set)) = self.view.my_set.clone() else {
            return;
        };
        let leads = self.may_lead();
        let drained = self.drained();
        let registration = Registration {
            digest: reference.digest.clone(),
            leads,
            drained,
        };
        if self.life.registered_as.as_ref() == Some(&registration) {
            return;
        }
        for (index, chunk) in chunks.into_iter().enumerate() {
            // Content-addressed: a set another node already wrote is the same bytes.
            let path = self.paths.chunk(&reference.digest, index);
            self.call(
                ZkOp::Create {
                    path,
                    data: chunk,
                    mode: CreateMode::Persistent,
                    acl: self.cfg.acl,
                },
                MemberStep::Chunk,
            );
        }
        self.view.tasksets.insert(reference.digest.clone(), set);
        let record = MemberRecord {
            format: FORMAT_VERSION,
            id: self.cfg.id.clone(),
            release: self.cfg.release.to_string(),
            seed: format!("{:016x}", self.cfg.seed),
            host: self.cfg.host.clone(),
            pid: self.cfg.pid,
            http: self.cfg.http.clone(),
            started_at: self.cfg.started_at,
            labels: self.cfg.labels.clone(),
            taskset: reference.clone(),
            leads,
            drained,
        };
        let data = serde_json::to_vec(&record).expect("serializes");
        self.life.registering = Some(RegisterJob {
            data: data.clone(),
            registration,
            count: reference.count,
            failed: false,
        });
        self.create_member(data);
    }

    fn create_member(&mut self, data: Vec<u8>) {
        let sent = self.io.now.wall;
        let path = self.paths.member(&self.cfg.id);
        self.call(
            ZkOp::Create {
                path,
                data,
                mode: CreateMode::Ephemeral,
                acl: self.cfg.acl,
            },
            MemberStep::MemberCreate { sent },
        );
    }

    pub(super) fn on_chunk(&mut self, result: Result<ZkOk, ZkFail>) {
        match result {
            Ok(_) | Err(ZkFail::NodeExists) => {}
            Err(error) => {
                self.report(
                    Level::Warn,
                    format!("publishing the task set failed ({error}); retrying"),
                );
                if let Some(job) = self.life.registering.as_mut() {
                    job.failed = true;
                }
            }
        }
    }

    pub(super) fn on_member_create(&mut self, result: Result<ZkOk, ZkFail>, sent: DateTime<Utc>) {
        match result {
            Ok(ZkOk::Created(stat)) => {
                self.measure_skew(sent, &stat);
                self.registered();
            }
            Ok(_) => self.registered(),
            Err(ZkFail::NodeExists) => {
                let path = self.paths.member(&self.cfg.id);
                self.call(ZkOp::GetData { path }, MemberStep::MemberCheck);
            }
            Err(ZkFail::NoNode) => {
                // members/ was deleted: recreate the tree, then register.
                self.life.registering = None;
                self.recreate_tree(AfterRecreate::Register);
            }
            Err(error) => self.register_failed(error.to_string()),
        }
    }

    pub(super) fn on_member_check(&mut self, result: Result<ZkOk, ZkFail>) {
        match result {
            Ok(ZkOk::Data(_, stat)) if Some(stat.ephemeral_owner) == self.my_session() => {
                // Ours (a re-registration after a publish): update it.
                let Some(data) = self.life.registering.as_ref().map(|j| j.data.clone()) else {
                    return;
                };
                let sent = self.io.now.wall;
                let path = self.paths.member(&self.cfg.id);
                self.call(
                    ZkOp::SetData {
                        path,
                        data,
                        version: None,
                    },
                    MemberStep::MemberSet { sent },
                );
            }
            Ok(_) => {
                if !self.life.register_waited {
                    self.life.register_waited = true;
                    let id = self.cfg.id.clone();
                    self.report(
                        Level::Warn,
                        "another session is registered as this node (an earlier run that has not expired yet, or another host with the same node id); waiting for it to go",
                    )
                    .field("node", id);
                }
                self.life.registering = None;
                let at = self.io.now.mono + Duration::from_millis(500);
                super::acting::sooner(&mut self.io.retry_at, at);
            }
            Err(ZkFail::NoNode) => {
                let data = self.life.registering.as_ref().map(|j| j.data.clone());
                if let Some(data) = data {
                    self.create_member(data);
                }
            }
            Err(error) => self.register_failed(error.to_string()),
        }
    }

    pub(super) fn on_member_set(&mut self, result: Result<ZkOk, ZkFail>, sent: DateTime<Utc>) {
        match result {
            Ok(ZkOk::Stat(stat)) => {
                self.measure_skew(sent, &stat);
                self.registered();
            }
            Ok(_) => self.registered(),
            Err(error) => self.register_failed(error.to_string()),
        }
    }

    fn register_failed(&mut self, error: String) {
        self.report(
            Level::Warn,
            format!("publishing the task set failed (registering: {error}); retrying"),
        );
        self.life.registering = None;
        self.retry_later();
    }

    fn registered(&mut self) {
        let Some(job) = self.life.registering.take() else {
            return;
        };
        if job.failed {
            self.retry_later();
            return;
        }
        self.life.register_waited = false;
        self.io.retry_delay = Duration::from_millis(200);
        self.life.registered_as = Some(job.registration);
        let hex = self.session_hex();
        let (id, release) = (self.cfg.id.clone(), self.cfg.release.clone());
        self.report(Level::Info, "registered in ZooKeeper")
            .field("node", id)
            .field("release", release)
            .field("session", hex)
            .field("tasks", job.count);
        let listed = self.life.session.as_ref().is_some_and(|s| s.listed);
        if !listed {
            self.start_relist();
            // The leads flag may have changed while registering (the skew measured by this
            // very write).
            self.maybe_register();
            return;
        }
        // Vacancy clocks for newly defined tasks start now.
        let now = self.io.now.mono;
        let mut vacant = self.my_leases();
        vacant.retain(|t| !self.view.present.contains(t));
        for task in vacant {
            self.view.vacant_since.entry(task).or_insert(now);
        }
        // The leads flag or the set may have changed again meanwhile.
        self.maybe_register();
        self.decide();
    }

    // ---- watches ----

    pub(super) fn on_watch(&mut self, path: &str, kind: WatchKind) {
        if self.life.session.is_none()
            || self.on_trigger_watch(path, kind)
            || self.on_backfill_watch(path, kind)
        {
            return;
        }
        let members = format!("{}/", self.paths.members());
        let leases = format!("{}/", self.paths.leases());
        if let Some(id) = path.strip_prefix(&members) {
            let id = id.to_string();
            match kind {
                WatchKind::Deleted => {
                    self.view.member_sessions.remove(&id);
                    if let Some(relist) = self.life.relist.as_mut() {
                        relist.ids.remove(&id);
                        relist.members.remove(&id);
                    }
                    if id == self.cfg.id && self.life.stopping {
                        // Our own leave (`start_release_all` deletes the member znode): a
                        // stopping node never registers again, and says nothing.
                    } else if id == self.cfg.id && self.life.registered_as.is_none() {
                        // Not registered yet: not our registration. Another node checking a
                        // lease that names this node creates and deletes its member path in
                        // one multi (proving it absent) before this node registers; saying
                        // "deleted; registering again" for it misled. Registering goes on.
                    } else if id == self.cfg.id {
                        self.register_again();
                        self.read_member(id, MemberRead::Change);
                    } else {
                        self.forget_member(&id);
                        self.decide();
                    }
                }
                WatchKind::Created | WatchKind::DataChanged => {
                    self.read_member(id, MemberRead::Change)
                }
            }
        } else if let Some(task) = path.strip_prefix(&leases) {
            self.on_lease_event(task.to_string(), kind);
        } else if self.on_task_event(path, kind) {
            // A task's subtree, watched while a queued tick waits for a run elsewhere.
        } else if self.on_control_event(path, kind) {
            // A drain or pause mark, or their directories: handled there.
        } else if kind == WatchKind::Deleted
            && (path == self.paths.members() || path == self.paths.leases())
        {
            self.report(
                Level::Warn,
                format!("{path} was deleted; recreating it and registering again"),
            );
            self.life.registered_as = None;
            self.life.registering = None;
            self.recreate_tree(AfterRecreate::Register);
        }
    }

    /// This node's registration vanished (deleted by hand, or with `members/`): register
    /// again. The news may be stale; registering keeps a znode that is still ours.
    pub(super) fn register_again(&mut self) {
        self.report_once(
            format!("member deleted {}", self.session_hex()),
            Level::Warn,
            "this node's member znode was deleted; registering again".into(),
        );
        self.life.registered_as = None;
        self.maybe_register();
    }

    // ---- the tree ----

    /// Creates the tree again (parts were deleted), then continues with `after`.
    pub(super) fn recreate_tree(&mut self, after: AfterRecreate) {
        let tree = self.tree();
        let last = tree.len() - 1;
        for (index, path) in tree.into_iter().enumerate() {
            let op = self.create_dir(path.clone());
            if index == last {
                self.call(op, MemberStep::Recreated { after });
                return;
            }
            self.call(op, MemberStep::RecreateDir { path });
        }
    }

    pub(super) fn on_recreate_dir(&mut self, path: String, result: Result<ZkOk, ZkFail>) {
        if let Ok(ZkOk::Created(_)) = result {
            self.report(
                Level::Warn,
                format!(
                    "recreated {path}: it had been deleted (by hand?); re-registering and re-publishing what lived under it"
                ),
            );
        }
    }

    pub(super) fn on_recreated(&mut self, after: AfterRecreate, result: Result<ZkOk, ZkFail>) {
        let path = self.paths.tasksets();
        match result {
            Ok(ZkOk::Created(_)) => self.on_recreate_dir(path, result),
            Ok(_) | Err(ZkFail::NodeExists) => {}
            Err(error) => {
                self.report(
                    Level::Warn,
                    format!("recreating the cluster's tree failed ({error}); retrying"),
                );
                self.retry_later();
                // What waited for the tree fails as it would have without it: a take left
                // waiting here would keep the task "taking" for ever, and no decision would
                // take it again.
                return match after {
                    AfterRecreate::Register => {}
                    AfterRecreate::Ensure { task, after } => {
                        self.on_ensured(task, after, Err(error))
                    }
                    AfterRecreate::Take(job) => self.take_failed(job.task, error.to_string()),
                };
            }
        }
        match after {
            AfterRecreate::Register => {
                self.life.registered_as = None;
                self.maybe_register();
            }
            AfterRecreate::Ensure { task, after } => self.ensure_task_nodes(task, after),
            AfterRecreate::Take(job) => self.send_take(job),
        }
    }
}
