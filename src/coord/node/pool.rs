//! Pooled tasks (`work_items`): the daemon fires the task once per tick, and the node serves
//! its requests over the units `<task>@<item>` of the items it holds.
//!
//! A claim of tick T is one multi-op over every held unit whose fire record is before T, per
//! unit the ops of a task's claim in the same order (`check(leases/<unit>, 0)`,
//! `check(tasks/<unit>/epoch, the version this node's take set)`, `set_data(tasks/<unit>, T,
//! the version read)`, `create(tasks/<unit>/run-<unix>)` when it runs): it is fenced per item
//! as a task's claim is, and its answer names the items claimed, in the task file's order.
//! Units whose record covers T already (claimed by another node before the item moved) are
//! left out; a unit that fails its lease or epoch check is dropped and the rest sent again; a
//! lost answer is resolved by re-reading every unit's record. The fire record the daemon reads
//! is the oldest of the held units' (so each item's missed ticks are caught up per
//! `catch_up`), runs elsewhere never hold a node's run back (`overlap` applies per node run).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use super::claim::ClaimKind;
use super::io::{Answered, CreateMode, Level, ReqId, ZkFail, ZkOk, ZkOp};
use super::{Node, TaskJob};
use super::{PoolStep, TaskStep};
use crate::coord::record::{self, FireView, Verdict};
use crate::coord::records::{FORMAT_VERSION, FireRecord, RunRecord};
use crate::coord::{ClaimIntent, ClaimOutcome, CoordError, lease};
use crate::plan::ledger::TickEntry;

/// Pooled tasks: the requests reading their units' records, the units each claimed run was
/// claimed on, the ends being recorded, the units last published, the orphan checks.
#[derive(Debug, Default)]
pub(super) struct Pools {
    /// The requests on pooled tasks reading their units' records, by request.
    pub(super) jobs: BTreeMap<ReqId, PoolJob>,
    /// The units each pooled run this node claimed was claimed on, by task and tick, until
    /// the run's end is recorded.
    pub(super) runs: BTreeMap<(String, DateTime<Utc>), Vec<String>>,
    /// The ends of pooled runs reading their units' results, by request.
    pub(super) ends: BTreeMap<ReqId, super::pool_end::PoolEnd>,
    /// The units of pooled tasks held at the last publication, with their lease incarnations
    /// (a unit gained or taken again since counts in [`Leadership::gained`]).
    pub(super) published: BTreeSet<(String, i32)>,
    /// The pooled tasks' orphan checks in flight, and the lost runs they found.
    pub(super) orphans: super::pool_orphan::OrphanChecks,
}

/// A unit whose record keeps changing under a claim is left out after this many conflicts
/// of its own (counted per unit: a resume moves every unit's record at once, and each unit is
/// read again and claimed).
const POOL_CONFLICTS: u8 = 3;

/// What a request on a pooled task asks once the held units' records are read.
#[derive(Debug, Clone)]
pub(crate) enum PoolAsk {
    /// Claim `tick` over the units whose record is before it (or, a rerun, over the units
    /// whose run of `tick` was lost with their node).
    Claim {
        tick: DateTime<Utc>,
        intent: ClaimIntent,
        /// The ticks not run the claim writes into each unit's record (`plan::ledger`).
        ticks: Vec<TickEntry>,
        kind: ClaimKind,
        /// The conflicts so far, per unit.
        conflicts: BTreeMap<String, u8>,
        /// Of a claim the daemon asked from its plan: the units, with their lease
        /// incarnations, that its last read of the fire record covered when it asked (see
        /// [`super::tasks::TaskState::planned`]); only those are claimed. `None`: a rerun's.
        plan: Option<BTreeSet<(String, i32)>>,
    },
    /// The oldest fire record of the held units.
    LastClaimed,
    /// The oldest queued tick of the held units.
    Queued,
    /// A claim's answer was lost: each of `parts` is this node's if its record is what the
    /// claim wrote.
    Resolve {
        tick: DateTime<Utc>,
        parts: Vec<PoolPart>,
        why: String,
    },
}

/// A request on a pooled task in flight: the held units it is served on, and the record
/// reads it waits for.
#[derive(Debug)]
pub(crate) struct PoolJob {
    req: ReqId,
    task: String,
    ask: PoolAsk,
    /// The units it is served on, in the items' order.
    units: Vec<String>,
    outstanding: usize,
}

/// One unit's part of a pool claim's multi-op.
#[derive(Debug, Clone)]
pub(crate) struct PoolPart {
    unit: String,
    pub(super) new: FireRecord,
    run_path: String,
    /// How many ops of the multi are this unit's.
    ops: usize,
}

impl Node {
    /// Whether `task` is a pooled task this node defines (its leases are its items' units).
    pub(super) fn pooled(&self, task: &str) -> bool {
        self.view
            .my_set
            .as_ref()
            .and_then(|(_, _, set)| set.get(task))
            .is_some_and(|entry| matches!(entry.holders, lease::Holders::Items(_)))
    }

    /// The units of the pooled `task` this node holds, in the items' order.
    pub(super) fn held_units(&self, task: &str) -> Vec<String> {
        let Some(entry) = self
            .view
            .my_set
            .as_ref()
            .and_then(|(_, _, set)| set.get(task))
        else {
            return Vec::new();
        };
        lease::lease_names(task, entry, &self.cfg.id)
            .into_iter()
            .filter(|unit| self.tasks.held(unit).is_some())
            .collect()
    }

    /// Serves `ask` on the pooled `task`: a claim waits behind the task's other claims.
    pub(super) fn pool_request(&mut self, req: ReqId, task: String, ask: PoolAsk) {
        let claim = matches!(ask, PoolAsk::Claim { .. });
        let job = PoolJob {
            req,
            task: task.clone(),
            ask,
            units: Vec::new(),
            outstanding: 0,
        };
        self.pool.jobs.insert(req, job);
        if claim {
            self.queue_task_job(task, TaskJob::Pool(req));
        } else {
            self.start_pool(req);
        }
    }

    /// Starts the request `req`: reads the held units' records this node has not cached.
    pub(super) fn start_pool(&mut self, req: ReqId) {
        let Some(job) = self.pool.jobs.get(&req) else {
            return;
        };
        let claim = matches!(job.ask, PoolAsk::Claim { .. });
        let planning = matches!(job.ask, PoolAsk::LastClaimed);
        let units = self.held_units(&job.task);
        if planning {
            self.plan_units(&units);
        }
        if claim && (!self.firing() || self.life.stopping || units.is_empty()) {
            return self.pool_answer(req, Ok(Answered::Claim(ClaimOutcome::NotLeader)));
        }
        if self.life.session.is_none() {
            let error = CoordError::NotConnected {
                context: "reading the fire record",
            };
            return self.pool_answer(req, Err(error));
        }
        self.read_pool_records(req, units);
    }

    /// Reads the records of `units` not cached, then goes on with the request `req`.
    fn read_pool_records(&mut self, req: ReqId, units: Vec<String>) {
        let missing: Vec<String> = units
            .iter()
            .filter(|unit| self.tasks.get(unit).is_none_or(|s| s.record.is_none()))
            .cloned()
            .collect();
        let Some(job) = self.pool.jobs.get_mut(&req) else {
            return;
        };
        job.units = units;
        job.outstanding = missing.len();
        for unit in missing {
            let path = self.paths.record(&unit);
            self.call(ZkOp::GetData { path }, PoolStep::PoolRecord { req, unit });
        }
        self.pool_read_done(req);
    }

    pub(super) fn on_pool_record(
        &mut self,
        req: ReqId,
        unit: String,
        result: Result<ZkOk, ZkFail>,
    ) {
        let read = match result {
            Ok(ZkOk::Data(data, stat)) if data.is_empty() => Some((FireRecord::empty(), stat)),
            Ok(ZkOk::Data(data, stat)) => serde_json::from_slice::<FireRecord>(&data)
                .ok()
                .map(|record| (record, stat)),
            _ => None,
        };
        if let Some((record, stat)) = read {
            self.check_record_clock(&unit, &record);
            self.tasks.state_mut(&unit).record = Some((record, stat.version));
        } else if let Some(job) = self.pool.jobs.get_mut(&req) {
            // Not readable now: the unit is left out of this request.
            job.units.retain(|u| *u != unit);
        }
        if let Some(job) = self.pool.jobs.get_mut(&req) {
            job.outstanding = job.outstanding.saturating_sub(1);
        }
        self.pool_read_done(req);
    }

    /// Goes on with the request once every record it needs is read.
    fn pool_read_done(&mut self, req: ReqId) {
        if self
            .pool
            .jobs
            .get(&req)
            .is_none_or(|job| job.outstanding > 0)
        {
            return;
        }
        let job = self.pool.jobs.remove(&req).expect("present");
        let records: Vec<FireRecord> = job
            .units
            .iter()
            .filter_map(|unit| self.tasks.get(unit)?.record.as_ref())
            .map(|(record, _)| record.clone())
            .collect();
        match job.ask.clone() {
            PoolAsk::LastClaimed => {
                let oldest = records.iter().filter_map(record::accounted).min();
                self.answer(req, Ok(Answered::Tick(oldest)));
            }
            PoolAsk::Queued => {
                let oldest = records.iter().filter_map(|r| r.queued).min();
                self.answer(req, Ok(Answered::Tick(oldest)));
            }
            PoolAsk::Claim { .. } => self.send_pool_claim(job),
            PoolAsk::Resolve { tick, parts, why } => self.pool_resolved(job, tick, parts, why),
        }
    }

    /// Answers the request `req` (dropping it), and starts the next claim on its task.
    fn pool_answer(&mut self, req: ReqId, answer: Result<Answered, CoordError>) {
        let job = self.pool.jobs.remove(&req);
        self.answer(req, answer);
        if let Some(job) = job.filter(|job| matches!(job.ask, PoolAsk::Claim { .. })) {
            self.finish_task_job(&job.task);
        }
    }

    /// Answers the claim `job` (its task's job in flight) and starts the next.
    fn pool_claim_answer(&mut self, job: PoolJob, answer: Result<Answered, CoordError>) {
        self.answer(job.req, answer);
        self.finish_task_job(&job.task);
    }

    /// The claim's multi-op over the held units whose record is before `tick` (a rerun's:
    /// whose run of `tick` was lost).
    fn send_pool_claim(&mut self, job: PoolJob) {
        let PoolAsk::Claim {
            tick,
            intent,
            kind,
            ref plan,
            ref ticks,
            ..
        } = job.ask
        else {
            unreachable!("a claim's multi-op");
        };
        let mut parts = Vec::new();
        let mut ops = Vec::new();
        let mut newest: Option<DateTime<Utc>> = None;
        let mut done: Option<u64> = None;
        for unit in &job.units {
            let (Some(epoch), false) =
                (self.tasks.held(unit), self.life.stopping || !self.firing())
            else {
                continue;
            };
            if plan
                .as_ref()
                .is_some_and(|plan| !plan.contains(&(unit.clone(), epoch)))
            {
                // Taken since the daemon read the record: its missed ticks are planned first.
                continue;
            }
            let Some((record, version)) = self.tasks.get(unit).and_then(|s| s.record.clone())
            else {
                continue;
            };
            let view = FireView {
                record: record.tick,
                claimed_to_run: record.run,
                leads: true,
                queued: record.queued,
                runs: record.runs,
                max_runs: self.max_runs_of(unit),
                ..FireView::default()
            };
            let verdict = match kind {
                ClaimKind::Fresh => record::admit(&view, tick, intent),
                ClaimKind::Rerun => self.admit_pool_rerun(&job.task, unit, &record, tick),
            };
            if let Verdict::Refuse(outcome) = verdict {
                match outcome {
                    ClaimOutcome::AlreadyClaimed { record } => newest = newest.max(Some(record)),
                    ClaimOutcome::Done { runs } => done = done.max(Some(runs)),
                    _ => {}
                }
                continue;
            }
            let mut part = self.pool_part(unit, &record, tick, intent, ticks);
            if kind == ClaimKind::Rerun {
                part.new.reruns = record.reruns + 1;
                part.new.runs = record.runs;
            }
            ops.extend(self.pool_part_ops(&part, epoch, version, tick, intent));
            parts.push(part);
        }
        if parts.is_empty() {
            let outcome = nothing_claimed(newest, done);
            return self.pool_claim_answer(job, Ok(Answered::Claim(outcome)));
        }
        let sent = self.io.now.wall;
        self.call(
            ZkOp::Multi(ops),
            PoolStep::PoolMulti {
                job: Box::new(job),
                parts,
                sent,
            },
        );
    }

    /// The daemon reads a pooled task's fire record over `units`: its plan covers them in
    /// their lease incarnations of now.
    fn plan_units(&mut self, units: &[String]) {
        for unit in units {
            if let Some(epoch) = self.tasks.held(unit) {
                self.tasks.state_mut(unit).planned = Some(epoch);
            }
        }
    }

    /// The held units of `task` that the daemon's last read of its fire record covered, in
    /// the incarnations it covered (see [`super::tasks::TaskState::planned`]).
    pub(super) fn planned_units(&self, task: &str) -> BTreeSet<(String, i32)> {
        self.held_units(task)
            .into_iter()
            .filter_map(|unit| {
                let epoch = self.tasks.held(&unit)?;
                let planned = self.tasks.get(&unit)?.planned;
                (planned == Some(epoch)).then_some((unit, epoch))
            })
            .collect()
    }

    /// The record `unit`'s part of a claim of `tick` writes over `view`.
    pub(super) fn pool_part(
        &self,
        unit: &str,
        old: &FireRecord,
        tick: DateTime<Utc>,
        intent: ClaimIntent,
        ticks: &[TickEntry],
    ) -> PoolPart {
        let new = self.claimed_record(unit, old, tick, intent, ticks);
        PoolPart {
            unit: unit.to_string(),
            new,
            run_path: self.paths.run(unit, tick),
            ops: if intent.runs() { 4 } else { 3 },
        }
    }

    /// One unit's ops of the claim, as a task's claim has them (ARCHITECTURE.md, "The claim").
    fn pool_part_ops(
        &self,
        part: &PoolPart,
        epoch: i32,
        version: i32,
        tick: DateTime<Utc>,
        intent: ClaimIntent,
    ) -> Vec<ZkOp> {
        let unit = &part.unit;
        let mut ops = vec![
            ZkOp::Check {
                path: self.paths.lease(unit),
                version: 0,
            },
            ZkOp::Check {
                path: self.paths.epoch(unit),
                version: epoch,
            },
            ZkOp::SetData {
                path: self.paths.record(unit),
                data: serde_json::to_vec(&part.new).expect("serializes"),
                version: Some(version),
            },
        ];
        if intent.runs() {
            let run = RunRecord {
                format: FORMAT_VERSION,
                node: self.cfg.id.clone(),
                session: part.new.session.clone(),
                tick,
                started_at: part.new.claimed_at.unwrap_or(self.io.now.wall),
            };
            ops.push(ZkOp::Create {
                path: part.run_path.clone(),
                data: serde_json::to_vec(&run).expect("serializes"),
                mode: CreateMode::Ephemeral,
                acl: self.cfg.acl,
            });
        }
        ops
    }

    pub(super) fn on_pool_multi(
        &mut self,
        job: PoolJob,
        parts: Vec<PoolPart>,
        sent: DateTime<Utc>,
        result: Result<ZkOk, ZkFail>,
    ) {
        match result {
            Ok(ZkOk::Multi(results)) => self.pool_claimed(job, parts, sent, &results),
            Err(ZkFail::Multi { index, error }) => self.pool_conflict(job, parts, index, &error),
            Err(ZkFail::SessionExpired) => {
                let error = CoordError::SessionExpired {
                    context: "claiming",
                };
                self.pool_claim_answer(job, Err(error));
            }
            other => {
                let why = match other {
                    Err(error) => error.to_string(),
                    Ok(_) => "unexpected answer".into(),
                };
                self.start_pool_resolve(job, parts, why);
            }
        }
    }

    /// The multi-op was applied: every part is claimed.
    fn pool_claimed(
        &mut self,
        job: PoolJob,
        parts: Vec<PoolPart>,
        sent: DateTime<Utc>,
        results: &[ZkOk],
    ) {
        let PoolAsk::Claim { tick, intent, .. } = job.ask else {
            unreachable!("a claim's multi-op");
        };
        let mut at = 0;
        for part in &parts {
            if let Some(ZkOk::Stat(stat)) = results.get(at + 2) {
                if at == 0 {
                    self.measure_skew(sent, stat);
                }
                self.tasks.state_mut(&part.unit).record = Some((part.new.clone(), stat.version));
            }
            at += part.ops;
        }
        self.pool_won(job.req, &job.task, tick, intent, &parts);
        self.finish_task_job(&job.task);
    }

    /// Answers a won claim with its items, and remembers its run znodes and units for the
    /// run's end (or withholds its run when the task's pause arrived first).
    fn pool_won(
        &mut self,
        req: ReqId,
        task: &str,
        tick: DateTime<Utc>,
        intent: ClaimIntent,
        parts: &[PoolPart],
    ) {
        if intent.runs() {
            let run_paths: Vec<String> = parts.iter().map(|p| p.run_path.clone()).collect();
            if self.withhold_paused_run(task, tick, intent, &run_paths) {
                let outcome = ClaimOutcome::AlreadyClaimed { record: tick };
                return self.answer(req, Ok(Answered::Claim(outcome)));
            }
            self.runs.own_runs.extend(run_paths);
            let units = parts.iter().map(|p| p.unit.clone()).collect();
            self.pool.runs.insert((task.to_string(), tick), units);
        }
        let mut items: Vec<String> = parts
            .iter()
            .filter_map(|p| Some(lease::split_unit(&p.unit)?.1.to_string()))
            .collect();
        if self.cfg.bugs.pool_runs_every_item {
            items = self.pool_items(task);
        }
        self.answer(req, Ok(Answered::ClaimedItems(items)));
    }

    /// Every item of the pooled `task` as this node defines it (for a deliberate bug of the
    /// simulation's: [`super::NodeBugs::pool_runs_every_item`]).
    fn pool_items(&self, task: &str) -> Vec<String> {
        match self
            .view
            .my_set
            .as_ref()
            .and_then(|(_, _, set)| set.get(task))
        {
            Some(entry) => match &entry.holders {
                lease::Holders::Items(items) => items.to_vec(),
                _ => Vec::new(),
            },
            None => Vec::new(),
        }
    }

    /// Op `index` of the multi-op failed: its unit is left out (its lease or epoch is not this
    /// node's, or a run of the tick exists) or its record read again, and the rest sent again.
    fn pool_conflict(
        &mut self,
        mut job: PoolJob,
        parts: Vec<PoolPart>,
        index: usize,
        error: &ZkFail,
    ) {
        let mut start = 0;
        let Some(part) = parts.iter().find(|part| {
            start += part.ops;
            index < start
        }) else {
            return self.start_pool_resolve(job, parts, error.to_string());
        };
        let at = index - (start - part.ops);
        let unit = part.unit.clone();
        self.report(Level::Debug, "a pooled claim conflicted on one item")
            .field("task", &unit)
            .field("index", at)
            .field("source", error);
        let PoolAsk::Claim { conflicts, .. } = &mut job.ask else {
            unreachable!("a claim's multi-op");
        };
        let count = conflicts.entry(unit.clone()).or_default();
        *count += 1;
        let conflicts = *count;
        if at < 2 {
            self.check_refused_lease(unit.clone());
        }
        self.forget_record(&unit);
        if at != 2 || conflicts > POOL_CONFLICTS {
            job.units.retain(|u| *u != unit);
        }
        let req = job.req;
        let units = std::mem::take(&mut job.units);
        self.pool.jobs.insert(req, job);
        self.read_pool_records(req, units);
    }

    // ---- unknown outcomes ----

    /// The claim's answer was lost: sync, then re-read every unit's record.
    fn start_pool_resolve(&mut self, job: PoolJob, parts: Vec<PoolPart>, why: String) {
        let PoolAsk::Claim { tick, .. } = job.ask else {
            unreachable!("a claim's multi-op");
        };
        self.report(
            Level::Warn,
            "pooled claim outcome unknown; re-reading the fire records",
        )
        .field("task", &job.task)
        .field("tick", tick)
        .field("why", &why);
        for part in &parts {
            self.forget_record(&part.unit);
        }
        if self.life.session.is_none() {
            let error = CoordError::SessionEnded {
                context: "claiming",
            };
            return self.pool_claim_answer(job, Err(error));
        }
        let units: Vec<String> = parts.iter().map(|p| p.unit.clone()).collect();
        let path = self.paths.record(&units[0]);
        self.call(ZkOp::Sync { path }, TaskStep::ResolveSync);
        let req = job.req;
        let ask = PoolAsk::Resolve { tick, parts, why };
        self.pool.jobs.insert(req, PoolJob { ask, ..job });
        self.read_pool_records(req, units);
    }

    /// The records re-read after a lost answer: the parts whose record is what the claim
    /// wrote are claimed; if none is, the claim is not.
    fn pool_resolved(
        &mut self,
        job: PoolJob,
        tick: DateTime<Utc>,
        parts: Vec<PoolPart>,
        why: String,
    ) {
        let ours: Vec<PoolPart> = parts
            .into_iter()
            .filter(|part| {
                self.tasks
                    .get(&part.unit)
                    .and_then(|s| s.record.as_ref())
                    .is_some_and(|(record, _)| *record == part.new)
            })
            .collect();
        if ours.is_empty() {
            let error = CoordError::Unknown {
                context: format!("claiming {} at {tick}", job.task),
                why,
            };
            return self.pool_claim_answer(job, Err(error));
        }
        self.report(Level::Info, "the pooled claim had been applied")
            .field("task", &job.task)
            .field("tick", tick)
            .field("items", ours.len());
        let intent = if ours[0].ops == 4 {
            ClaimIntent::Run
        } else {
            ClaimIntent::Skip
        };
        self.pool_won(job.req, &job.task, tick, intent, &ours);
        self.finish_task_job(&job.task);
    }

    /// A session ended with the request `req` in flight.
    pub(super) fn abort_pool(&mut self, req: ReqId) {
        if self.pool.jobs.contains_key(&req) {
            let error = CoordError::SessionEnded {
                context: "claiming",
            };
            self.pool_answer(req, Err(error));
        }
    }

    /// A session ended with the claim `job`'s multi-op in flight: what it wrote went with the
    /// session's run znodes, or was never applied.
    pub(super) fn abort_pool_multi(&mut self, job: PoolJob) {
        let error = CoordError::SessionEnded {
            context: "claiming",
        };
        self.pool_claim_answer(job, Err(error));
    }
}

/// What a pooled claim that claimed no unit answers: claimed already (`newest`, the newest
/// record among its units), done (every held item ran its `max_runs`), or not the leader.
fn nothing_claimed(newest: Option<DateTime<Utc>>, done: Option<u64>) -> ClaimOutcome {
    match (newest, done) {
        (Some(record), _) => ClaimOutcome::AlreadyClaimed { record },
        (None, Some(runs)) => ClaimOutcome::Done { runs },
        (None, None) => ClaimOutcome::NotLeader,
    }
}
