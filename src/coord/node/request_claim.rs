//! Claiming a request's run: the one fenced step a manual run, a chained run (`after`) and a
//! backfill tick share. The request's znode (a trigger, a backfill request) is set to its
//! claimed state in one multi-op with `check(leases/<task>, 0)` and `check(tasks/<task>/epoch,
//! the version this node's take set)` (of the node's own unit for a task that runs on every
//! node), at the version read. One flow serves every kind ([`ClaimJob`]); only the rule that
//! admits the claim and the record it writes differ (`trigger.rs`:
//! [`crate::coord::record::admit_manual`]; `backfill.rs`: [`crate::coord::backfill::admit`],
//! [`crate::coord::backfill::claimed`]).
//!
//! A reply whose outcome is unknown, or a request changed meanwhile, is resolved by `sync` and
//! a re-read: this node's own claim applied (the request running here with the `claimed_at`
//! this node sent), a claim again at the version read, or a refusal. A run asked again after
//! an error finds its own claim by the `claimed_at` kept in
//! [`Requests::claims_sent`](super::requests::Requests::claims_sent) (a backfill tick only
//! in the session that claimed it: the tick of a session that ended is lost).

use chrono::{DateTime, Utc};

use super::io::{Answered, Level, ReqId, Stat, ZkFail, ZkOk, ZkOp};
use super::trigger::describe;
use super::{Node, RequestStep, Then, backfill, trigger};
use super::{PoolStep, TaskStep};
use crate::coord::backfill::{self as rules, BackfillRecord, Claimer};
use crate::coord::record::{self, Verdict};
use crate::coord::records::{TriggerRecord, TriggerState};
use crate::coord::{ClaimOutcome, CoordError, Trigger};

/// How often a read that resolves a claim is tried before giving up.
const RESOLVE_READS: u8 = 10;

/// How often a claim is sent again on a request that changed before it gives up.
const CONFLICTS: u8 = 3;

/// Which request a claim is of.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    /// A manual or chained run: its trigger, named by the fire id.
    Manual,
    /// A backfill tick: its request's name and the tick.
    Backfill { name: String, tick: DateTime<Utc> },
}

/// A claim of a request's run on its way.
#[derive(Debug)]
pub(crate) struct ClaimJob {
    pub(super) req: ReqId,
    pub(super) task: String,
    /// The run's fire id: the trigger's name, or the backfill tick's.
    pub(super) fire_id: String,
    pub(super) kind: Kind,
    pub(super) requested_at: DateTime<Utc>,
    /// The instant this claim writes as its own.
    pub(super) claimed_at: DateTime<Utc>,
    conflicts: u8,
    reads: u8,
}

/// Where a claim is.
#[derive(Debug)]
pub(crate) enum Step {
    /// The fenced write, with the record it writes.
    Claim { job: ClaimJob, data: Vec<u8> },
    /// Resolving a claim whose answer was lost (or a conflict): re-reading the request.
    Read(ClaimJob),
}

/// A request as this node read it.
#[derive(Debug, Clone)]
pub(super) enum Known {
    Manual(trigger::Known),
    Backfill(backfill::Known),
}

/// What a claim does with the request as read: refuse, or write the claimed record at the
/// version read.
pub(super) enum Decision {
    Refuse(ClaimOutcome),
    Write { data: Vec<u8>, version: i32 },
}

impl Kind {
    /// The kind of request the run `fire_id` comes from, by the fire id's form.
    pub(super) fn of(fire_id: &str) -> Kind {
        match rules::of_fire_id(fire_id) {
            Some((name, tick)) => Kind::Backfill {
                name: name.to_string(),
                tick,
            },
            None => Kind::Manual,
        }
    }
}

impl ClaimJob {
    fn what(&self) -> &'static str {
        match self.kind {
            Kind::Manual => "manual run",
            Kind::Backfill { .. } => "backfill tick",
        }
    }

    fn context(&self) -> &'static str {
        match self.kind {
            Kind::Manual => "claiming a manual run",
            Kind::Backfill { .. } => "claiming a backfill tick",
        }
    }

    /// The session ended with the claim in flight: the daemon hears so.
    pub(super) fn abort(self, node: &mut Node) {
        let context = self.context();
        node.answer(self.req, Err(CoordError::SessionEnded { context }));
    }
}

/// What the reply to a request's claim says.
#[derive(Debug)]
pub(super) enum ClaimReply {
    /// Applied: the request's new stat, when the reply had it.
    Applied(Option<Stat>),
    /// The lease or its incarnation is not this node's: not claimed.
    NotLeader,
    /// The session expired: not claimed.
    SessionExpired,
    /// The request changed or went, or the outcome is unknown: read it again.
    Reread,
}

impl ClaimReply {
    pub(super) fn of(result: Result<ZkOk, ZkFail>) -> ClaimReply {
        match result {
            Ok(ZkOk::Multi(results)) => ClaimReply::Applied(match results.get(2) {
                Some(ZkOk::Stat(stat)) => Some(*stat),
                _ => None,
            }),
            Err(ZkFail::Multi { index, .. }) if index < 2 => ClaimReply::NotLeader,
            Err(ZkFail::SessionExpired) => ClaimReply::SessionExpired,
            _ => ClaimReply::Reread,
        }
    }
}

impl Node {
    /// Claims the run `trigger` of `task` asks for: a manual or chained run's trigger, or a
    /// backfill tick (by its fire id's form).
    pub(super) fn claim_request(&mut self, req: ReqId, task: String, trigger: Trigger) {
        let kind = Kind::of(&trigger.fire_id);
        // Asked again after an error: the same claim, which may have been applied.
        let sent = self.requests.claims_sent.get(&trigger.fire_id).copied();
        let job = ClaimJob {
            req,
            task,
            fire_id: trigger.fire_id,
            kind,
            requested_at: trigger.requested_at,
            claimed_at: sent.unwrap_or(self.io.now.wall),
            conflicts: 0,
            reads: 0,
        };
        let known = self.known_claimed(&job);
        // Asked again after an error: the request already runs here by this node's claim.
        let leads = self.held_version(&job.task).is_some();
        if leads
            && known
                .as_ref()
                .is_some_and(|k| self.is_own_request_claim(&job, k))
        {
            return self.finish_request_claim(job, Ok(ClaimOutcome::Claimed));
        }
        self.decide_request_claim(job, known);
    }

    fn claim_path(&self, job: &ClaimJob) -> String {
        self.request_path(&job.kind, &job.fire_id)
    }

    /// The znode of the request of `kind` that the run `fire_id` comes from.
    pub(super) fn request_path(&self, kind: &Kind, fire_id: &str) -> String {
        match kind {
            Kind::Manual => self.paths.trigger(fire_id),
            Kind::Backfill { name, .. } => self.paths.backfill(name),
        }
    }

    /// The request of `job` as this node knows it (of `job`'s task).
    fn known_claimed(&self, job: &ClaimJob) -> Option<Known> {
        match &job.kind {
            Kind::Manual => self
                .requests
                .triggers
                .get(&job.fire_id)
                .filter(|k| k.record.task == job.task)
                .cloned()
                .map(Known::Manual),
            Kind::Backfill { name, .. } => self
                .requests
                .backfills
                .get(name)
                .filter(|k| k.record.task == job.task)
                .cloned()
                .map(Known::Backfill),
        }
    }

    /// Whether `known` runs `job`'s run by this node's claim (its answer may have been lost,
    /// or been an error), sent with the `claimed_at` kept in `claims_sent`.
    fn is_own_request_claim(&self, job: &ClaimJob, known: &Known) -> bool {
        let sent = self.requests.claims_sent.get(&job.fire_id);
        match (&job.kind, known) {
            (Kind::Manual, Known::Manual(known)) => self.is_own_manual_claim(&known.record, sent),
            (Kind::Backfill { tick, .. }, Known::Backfill(known)) => {
                sent.is_some_and(|&at| self.is_own_backfill_claim(&known.record, *tick, at))
            }
            _ => false,
        }
    }

    /// What `job` does with its request as read (`None`: gone or unreadable).
    fn request_claim_decision(&self, job: &ClaimJob, known: Option<&Known>) -> Decision {
        let leads = self.held_version(&job.task).is_some();
        match (&job.kind, known) {
            (Kind::Manual, Some(Known::Manual(known))) => {
                self.manual_claim(job, leads, Some(known))
            }
            (Kind::Backfill { name, tick }, Some(Known::Backfill(known))) => {
                self.backfill_claim(job, name, *tick, leads, Some(known))
            }
            (Kind::Manual, _) => self.manual_claim(job, leads, None),
            (Kind::Backfill { name, tick }, _) => {
                self.backfill_claim(job, name, *tick, leads, None)
            }
        }
    }

    fn decide_request_claim(&mut self, job: ClaimJob, known: Option<Known>) {
        match self.request_claim_decision(&job, known.as_ref()) {
            Decision::Refuse(outcome) => self.finish_request_claim(job, Ok(outcome)),
            Decision::Write { data, version } => self.send_request_claim_of(job, data, version),
        }
    }

    fn send_request_claim_of(&mut self, job: ClaimJob, data: Vec<u8>, version: i32) {
        let path = self.claim_path(&job);
        let (req, task, fire_id, claimed_at) = (
            job.req,
            job.task.clone(),
            job.fire_id.clone(),
            job.claimed_at,
        );
        let then = Then::Request(RequestStep::Claim(Step::Claim {
            job,
            data: data.clone(),
        }));
        if !self.send_request_claim(&task, path, data, version, then) {
            self.requests.claims_sent.remove(&fire_id);
            return self.answer(req, Ok(Answered::Claim(ClaimOutcome::NotLeader)));
        }
        self.requests.claims_sent.insert(fire_id, claimed_at);
    }

    /// Answers `job`'s request with `outcome`. A decided claim is over; after an error its
    /// outcome is open (it may have been applied), and the daemon asks again: the
    /// `claimed_at` sent stays in [`Requests::claims_sent`](super::requests::Requests), by
    /// which that ask finds the claim its own.
    fn finish_request_claim(&mut self, job: ClaimJob, outcome: Result<ClaimOutcome, CoordError>) {
        if outcome.is_ok() {
            self.requests.claims_sent.remove(&job.fire_id);
        }
        self.answer(job.req, outcome.map(Answered::Claim));
    }

    /// Forgets the claims sent for requests no longer known: the daemon asks no more.
    pub(super) fn forget_claims_of_gone_requests(&mut self) {
        let requests = &mut self.requests;
        let (triggers, backfills) = (&requests.triggers, &requests.backfills);
        requests
            .claims_sent
            .retain(|fire_id, _| match Kind::of(fire_id) {
                Kind::Manual => triggers.contains_key(fire_id),
                Kind::Backfill { name, .. } => backfills.contains_key(&name),
            });
    }

    pub(super) fn on_claim_step(&mut self, step: Step, result: Result<ZkOk, ZkFail>) {
        match step {
            Step::Claim { job, data } => self.on_request_claim(job, data, result),
            Step::Read(job) => self.on_request_claim_read(job, result),
        }
    }

    fn on_request_claim(&mut self, mut job: ClaimJob, data: Vec<u8>, result: Result<ZkOk, ZkFail>) {
        match ClaimReply::of(result) {
            ClaimReply::Applied(stat) => {
                // Until the watch brings the new record, the listing must not offer the
                // request again: the record written is kept now.
                self.keep_claimed(&job, &data, stat);
                self.publish();
                self.finish_request_claim(job, Ok(ClaimOutcome::Claimed));
            }
            ClaimReply::NotLeader => {
                let unit = self.unit_of(&job.task).into_owned();
                self.check_refused_lease(unit);
                self.finish_request_claim(job, Ok(ClaimOutcome::NotLeader));
            }
            ClaimReply::SessionExpired => {
                let context = job.context();
                self.finish_request_claim(job, Err(CoordError::SessionExpired { context }));
            }
            ClaimReply::Reread => {
                job.conflicts += 1;
                job.reads = 0;
                self.resolve_request_claim(job)
            }
        }
    }

    /// Keeps the record `data` the claim of `job` wrote, at the version `stat` gives; without
    /// it, as of the read known (its version and mtime): the watch's event of the write
    /// brings the new ones.
    fn keep_claimed(&mut self, job: &ClaimJob, data: &[u8], stat: Option<Stat>) {
        let as_known = || match self.known_claimed(job)? {
            Known::Manual(k) => Some(Stat {
                version: k.version,
                mtime_ms: k.mtime_ms,
                ..Stat::default()
            }),
            Known::Backfill(k) => Some(Stat {
                version: k.version,
                ..Stat::default()
            }),
        };
        let Some(stat) = stat.or_else(as_known) else {
            return;
        };
        if let Some(read) = self.parse_claimed(job, data, stat) {
            self.keep_read(job, Some(read));
        }
    }

    fn resolve_request_claim(&mut self, mut job: ClaimJob) {
        job.reads += 1;
        let path = self.claim_path(&job);
        let (req, context) = (job.req, job.context());
        if !self.reread_request(path, Then::Request(RequestStep::Claim(Step::Read(job)))) {
            self.answer(req, Err(CoordError::SessionEnded { context }));
        }
    }

    /// The request read as `data` at `stat`, if it is a record of `job`'s kind and task.
    fn parse_claimed(&self, job: &ClaimJob, data: &[u8], stat: Stat) -> Option<Known> {
        match &job.kind {
            Kind::Manual => trigger::Known::read(data, stat)
                .filter(|k| k.record.task == job.task)
                .map(Known::Manual),
            Kind::Backfill { .. } => backfill::Known::read(data, stat)
                .filter(|k| k.record.task == job.task)
                .map(Known::Backfill),
        }
    }

    /// Keeps `read` as the request of `job` (`None`: it is gone).
    fn keep_read(&mut self, job: &ClaimJob, read: Option<Known>) {
        match (&job.kind, read) {
            (Kind::Manual, Some(Known::Manual(known))) => {
                self.requests.triggers.insert(job.fire_id.clone(), known);
            }
            (Kind::Backfill { name, .. }, Some(Known::Backfill(known))) => {
                self.requests.backfills.insert(name.clone(), known);
            }
            (Kind::Manual, _) => {
                self.requests.triggers.remove(&job.fire_id);
            }
            (Kind::Backfill { name, .. }, _) => {
                self.requests.backfills.remove(name);
            }
        }
    }

    fn on_request_claim_read(&mut self, job: ClaimJob, result: Result<ZkOk, ZkFail>) {
        let known = match result {
            Ok(ZkOk::Data(data, stat)) => self.parse_claimed(&job, &data, stat),
            // Deleted (`--wait` gave up, cancelled, or by hand): nothing to run.
            Err(ZkFail::NoNode) => None,
            other if job.reads < RESOLVE_READS => {
                self.report(
                    Level::Debug,
                    format!(
                        "re-reading a {} failed ({}); retrying",
                        job.what(),
                        describe(&other)
                    ),
                )
                .field("fire_id", &job.fire_id);
                return self.resolve_request_claim(job);
            }
            other => {
                let context = format!("claiming the {} {}", job.what(), job.fire_id);
                let why = describe(&other);
                return self.finish_request_claim(job, Err(CoordError::Unknown { context, why }));
            }
        };
        self.keep_read(&job, known.clone());
        self.publish();
        if known
            .as_ref()
            .is_some_and(|k| self.is_own_request_claim(&job, k))
        {
            self.report(
                Level::Info,
                format!("the {}'s claim had been applied", job.what()),
            )
            .field("fire_id", &job.fire_id);
            return self.finish_request_claim(job, Ok(ClaimOutcome::Claimed));
        }
        match self.request_claim_decision(&job, known.as_ref()) {
            Decision::Refuse(outcome) => self.finish_request_claim(job, Ok(outcome)),
            Decision::Write { .. } if job.conflicts > CONFLICTS => {
                let context = format!("claiming the {} {}", job.what(), job.fire_id);
                let why = "the request kept changing".to_string();
                self.finish_request_claim(job, Err(CoordError::Unknown { context, why }))
            }
            Decision::Write { data, version } => self.send_request_claim_of(job, data, version),
        }
    }

    /// Sends the fenced claim of a request of `task`: `path` set to `data` at `version`, if
    /// this node holds the task's lease; `false` (nothing sent) if it does not.
    pub(super) fn send_request_claim(
        &mut self,
        task: &str,
        path: String,
        data: Vec<u8>,
        version: i32,
        then: Then,
    ) -> bool {
        let Some(epoch) = self.held_version(task) else {
            return false;
        };
        let ops = vec![
            ZkOp::Check {
                path: self.paths.lease(&self.unit_of(task)),
                version: 0,
            },
            ZkOp::Check {
                path: self.paths.epoch(&self.unit_of(task)),
                version: epoch,
            },
            ZkOp::SetData {
                path,
                data,
                version: Some(version),
            },
        ];
        self.call(ZkOp::Multi(ops), then);
        true
    }

    /// A claim of `task` (a request's, or a pooled claim's on one unit) failed on its lease or
    /// epoch: whose the lease is decides, as for a scheduled claim, whether this node gives it
    /// up and takes it again (only the epoch changed: a stranger's write, or `tasks/` deleted
    /// and recreated) or counts it lost. Without it, a task whose epoch changed and that no
    /// scheduled claim comes to (a chained child without a schedule) is refused for ever.
    pub(super) fn check_refused_lease(&mut self, unit: String) {
        let path = self.paths.lease(&unit);
        self.call(ZkOp::Exists { path }, PoolStep::RefusedLeaseCheck { unit });
    }

    pub(super) fn on_refused_lease_check(&mut self, unit: String, result: Result<ZkOk, ZkFail>) {
        self.claim_found_lease(&unit, result);
    }

    /// Reads the request at `path` again after a `sync`, so the read sees the claim if it was
    /// applied; `false` (nothing sent) without a session.
    pub(super) fn reread_request(&mut self, path: String, then: Then) -> bool {
        if self.life.session.is_none() {
            return false;
        }
        self.call(ZkOp::Sync { path: path.clone() }, TaskStep::ResolveSync);
        self.call(ZkOp::GetData { path }, then);
        true
    }
}

/// The rules of each kind: what a claim writes, and how a node knows its own claim.
impl Node {
    /// The claim of manual run `job` as its trigger `known` stands (`None`: gone), by a node
    /// that `leads` the task or not.
    pub(super) fn manual_claim(
        &self,
        job: &ClaimJob,
        leads: bool,
        known: Option<&trigger::Known>,
    ) -> Decision {
        let pending = known.is_some_and(|k| k.record.state == TriggerState::Pending);
        if let Verdict::Refuse(outcome) = record::admit_manual(leads, pending, job.requested_at) {
            return Decision::Refuse(outcome);
        }
        let known = known.expect("pending");
        let new = TriggerRecord {
            state: TriggerState::Running,
            node: Some(self.cfg.id.clone()),
            claimed_at: Some(job.claimed_at),
            ..known.record.clone()
        };
        Decision::Write {
            data: serde_json::to_vec(&new).expect("serializes"),
            version: known.version,
        }
    }

    /// Whether `record` is this node's claim, sent with `sent` as its `claimed_at` (this node
    /// may not have had the answer).
    pub(super) fn is_own_manual_claim(
        &self,
        record: &TriggerRecord,
        sent: Option<&DateTime<Utc>>,
    ) -> bool {
        record.state == TriggerState::Running
            && record.node.as_deref() == Some(self.cfg.id.as_str())
            && record.claimed_at.is_some()
            && sent == record.claimed_at.as_ref()
    }

    /// The claim of `job`, backfill request `name`'s `tick`, as the request `known` stands
    /// (`None`: gone), by a node that `leads` the task or not.
    pub(super) fn backfill_claim(
        &self,
        job: &ClaimJob,
        name: &str,
        tick: DateTime<Utc>,
        leads: bool,
        known: Option<&backfill::Known>,
    ) -> Decision {
        let record = known.map(|k| &k.record);
        if let Verdict::Refuse(outcome) = rules::admit(leads, record, tick, false) {
            return Decision::Refuse(outcome);
        }
        let known = known.expect("admitted");
        let session = self.session_hex();
        let by = Claimer {
            node: &self.cfg.id,
            session: Some(&session),
        };
        let mut new = rules::claimed(&known.record, name, tick, by, job.claimed_at);
        if self.cfg.bugs.backfill_claim_keeps_progress {
            (new.done, new.claimed) = (known.record.done, known.record.claimed);
        }
        Decision::Write {
            data: serde_json::to_vec(&new).expect("serializes"),
            version: known.version,
        }
    }

    /// Whether `record` runs `tick` by this node's claim made at `claimed_at` in this session
    /// (its answer may have been lost). A claim of a session that ended is not: the lease
    /// holder ends that tick as lost ([`rules::lost`]), so it must not start.
    pub(super) fn is_own_backfill_claim(
        &self,
        record: &BackfillRecord,
        tick: DateTime<Utc>,
        claimed_at: DateTime<Utc>,
    ) -> bool {
        let session = self.session_hex();
        record.running.as_ref().is_some_and(|run| {
            run.tick == tick
                && run.node == self.cfg.id
                && run.claimed_at == claimed_at
                && run.session.as_deref() == Some(session.as_str())
        })
    }
}
