//! Fire records and fenced claims.
//!
//! A claim is one multi-op: `check(leases/<task>, 0)` + `check(tasks/<task>/epoch, the version
//! this node's take set)` + `set_data(tasks/<task>, tick, the record version read)` (+
//! `create(run-<unix>)` when the tick will run). The order is part of the protocol: replies are
//! matched on the failing op's index. A claim whose reply is lost is resolved by `sync` and
//! re-reading the record, never by assuming success.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::TaskStep;
use super::io::{Answered, CreateMode, Level, ReqId, ZkFail, ZkOk, ZkOp};
use super::tasks::Regain;
use super::{AfterEnsure, Node, Then, Timer};
use crate::coord::record::{self, FireView, Verdict};
use crate::coord::records::{FORMAT_VERSION, FireRecord, RunRecord};
use crate::coord::{ClaimIntent, ClaimOutcome, CoordError};
use crate::plan::ledger::TickEntry;

/// A fresh claim or the rerun of an orphaned tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClaimKind {
    /// Claims a tick newer than the record.
    Fresh,
    /// Claims again the tick the record names (its node was lost mid-run).
    Rerun,
}

/// One claim in flight.
#[derive(Debug, Clone)]
pub(crate) struct ClaimJob {
    pub(super) req: ReqId,
    pub(super) task: String,
    pub(super) tick: DateTime<Utc>,
    pub(super) intent: ClaimIntent,
    pub(super) kind: ClaimKind,
    /// Multi-ops that conflicted on the record so far.
    conflicts: u8,
    /// For a rerun: the tick of the stored result, once read.
    pub(super) result: Option<Option<DateTime<Utc>>>,
    /// The ticks not run the claim writes into the record (`plan::ledger`).
    pub(super) ticks: Vec<TickEntry>,
}

impl ClaimJob {
    pub(super) fn new(
        req: ReqId,
        task: String,
        tick: DateTime<Utc>,
        intent: ClaimIntent,
        kind: ClaimKind,
    ) -> ClaimJob {
        ClaimJob {
            req,
            task,
            tick,
            intent,
            kind,
            conflicts: 0,
            result: None,
            ticks: Vec::new(),
        }
    }

    /// The claim, carrying `ticks` into the record.
    pub(super) fn carrying(mut self, ticks: Vec<TickEntry>) -> ClaimJob {
        self.ticks = ticks;
        self
    }

    /// The task (or unit) claimed.
    pub(super) fn task(&self) -> &str {
        &self.task
    }

    /// What the claim is for.
    pub(super) fn intent(&self) -> ClaimIntent {
        self.intent
    }
}

/// What a claim that failed on the lease or the epoch found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseFound {
    /// The lease is lost (or given up for good): the claim is refused.
    Lost,
    /// Only the epoch changed under this node's lease: it is given up and taken again, and a
    /// task's claim waits for that.
    Regaining,
}

/// A claim whose outcome is being resolved.
#[derive(Debug)]
pub(crate) struct ResolveJob {
    pub(super) claim: ClaimJob,
    new: FireRecord,
    run_path: String,
    why: String,
    delay: Duration,
}

/// What a read of the fire record continues with.
#[derive(Debug)]
pub(crate) enum AfterRead {
    LastClaimed(ReqId),
    /// The queued tick (`overlap = "queue"`).
    Queued(ReqId),
    Claim(ClaimJob),
    Orphan(ReqId),
    Resolve(ResolveJob),
}

impl Node {
    /// Reads the fire record of `task` (creating the task's znodes on first use).
    pub(super) fn read_record(&mut self, task: String, after: AfterRead) {
        let path = self.paths.record(&task);
        self.call(
            ZkOp::GetData { path },
            TaskStep::ReadRecord {
                task,
                after,
                ensured: false,
            },
        );
    }

    pub(super) fn read_record_ensured(&mut self, task: String, after: AfterRead) {
        if let Some(state) = self.tasks.get_mut(&task) {
            state.recreated = false;
        }
        let path = self.paths.record(&task);
        self.call(
            ZkOp::GetData { path },
            TaskStep::ReadRecord {
                task,
                after,
                ensured: true,
            },
        );
    }

    pub(super) fn on_read_record(
        &mut self,
        task: String,
        after: AfterRead,
        ensured: bool,
        result: Result<ZkOk, ZkFail>,
    ) {
        let path = self.paths.record(&task);
        let read = match result {
            Ok(ZkOk::Data(data, stat)) => {
                if data.is_empty() {
                    Ok((FireRecord::empty(), stat.version))
                } else {
                    serde_json::from_slice::<FireRecord>(&data)
                        .map(|record| (record, stat.version))
                        .map_err(|e| CoordError::ZooKeeper {
                            context: format!("the fire record {path} is not valid"),
                            message: e.to_string(),
                        })
                }
            }
            Err(ZkFail::NoNode) if !ensured => {
                return self.ensure_task_nodes(task, AfterEnsure::Read(Box::new(after)));
            }
            Ok(_) => Err(CoordError::ZooKeeper {
                context: "reading the fire record".into(),
                message: "unexpected answer".into(),
            }),
            Err(error) => Err(CoordError::ZooKeeper {
                context: "reading the fire record".into(),
                message: error.to_string(),
            }),
        };
        if let Ok((record, version)) = &read {
            self.tasks.state_mut(&task).record = Some((record.clone(), *version));
            self.check_record_clock(&task, record);
        }
        self.after_read(task, after, read);
    }

    pub(super) fn after_read(
        &mut self,
        task: String,
        after: AfterRead,
        read: Result<(FireRecord, i32), CoordError>,
    ) {
        match after {
            AfterRead::LastClaimed(req) => {
                let accounted = read.map(|(record, _)| record::accounted(&record));
                self.answer(req, accounted.map(Answered::Tick));
            }
            AfterRead::Queued(req) => {
                self.answer(req, read.map(|(record, _)| Answered::Tick(record.queued)));
            }
            AfterRead::Claim(job) => match read {
                Ok((record, version)) if job.conflicts >= 2 => {
                    let _ = version;
                    let tick = job.tick;
                    self.finish_claim(
                        job,
                        Ok(ClaimOutcome::AlreadyClaimed {
                            record: record.tick.unwrap_or(tick),
                        }),
                    );
                }
                Ok((record, version)) => self.send_claim(job, record, version),
                Err(error) => self.finish_claim(job, Err(error)),
            },
            AfterRead::Orphan(req) => match read {
                Ok((record, _)) => self.orphan_after_record(req, task, record),
                Err(error) => self.answer(req, Err(error)),
            },
            AfterRead::Resolve(job) => self.resolve_after_read(job, read),
        }
    }

    /// A session ended while a read was in flight.
    pub(super) fn abort_read(&mut self, after: AfterRead) {
        let ended = |context| CoordError::SessionEnded { context };
        match after {
            AfterRead::LastClaimed(req) | AfterRead::Queued(req) => {
                self.answer(req, Err(ended("reading the fire record")))
            }
            AfterRead::Claim(job) => self.finish_claim(job, Err(ended("claiming"))),
            AfterRead::Orphan(req) => self.answer(req, Err(ended("checking for a lost run"))),
            AfterRead::Resolve(job) => {
                // If the claim was applied its run znode went with the session, and the tick
                // counts as claimed but not run (at most once).
                let req = job.claim.req;
                self.answer(req, Err(resolve_ended()));
            }
        }
    }

    /// Forgets the fire record of `task` as last seen: the next claim reads it again.
    pub(super) fn forget_record(&mut self, task: &str) {
        if let Some(state) = self.tasks.get_mut(task) {
            state.record = None;
        }
    }

    /// The epoch version to check, if this node holds the lease of `task` now.
    pub(super) fn held_version(&self, task: &str) -> Option<i32> {
        if !self.firing() || self.life.stopping {
            return None;
        }
        self.tasks.held(&self.unit_of(task))
    }

    /// Starts a claim (the head of its task's queue).
    pub(super) fn start_claim(&mut self, job: ClaimJob) {
        if self.held_version(&job.task).is_none() {
            return self.finish_claim(job, Ok(ClaimOutcome::NotLeader));
        }
        match self.tasks.get(&job.task).and_then(|s| s.record.clone()) {
            Some((record, version)) => self.send_claim(job, record, version),
            None => {
                let task = job.task.clone();
                self.read_record(task, AfterRead::Claim(job));
            }
        }
    }

    fn send_claim(&mut self, job: ClaimJob, record: FireRecord, version: i32) {
        let Some(epoch) = self.held_version(&job.task) else {
            return self.finish_claim(job, Ok(ClaimOutcome::NotLeader));
        };
        let tick = job.tick;
        let fresh = FireView {
            record: record.tick,
            claimed_to_run: record.run,
            leads: true,
            queued: record.queued,
            runs: record.runs,
            max_runs: self.max_runs_of(&job.task),
            ..FireView::default()
        };
        let verdict = match job.kind {
            ClaimKind::Fresh => record::admit(&fresh, tick, job.intent),
            ClaimKind::Rerun => {
                let Some(result) = job.result else {
                    return self.read_result_then_claim(job, record, version);
                };
                // A live run of the tick fails the multi-op's create of its run znode.
                let view = FireView {
                    record: record.tick,
                    claimed_to_run: record.run,
                    result,
                    leads: true,
                    run_live: false,
                    claimer_alive: self.session_alive(&record.session),
                    queued: record.queued,
                    ..FireView::default()
                };
                record::admit_rerun(&view, tick)
            }
        };
        if let Verdict::Refuse(outcome) = verdict {
            return self.finish_claim(job, Ok(outcome));
        }
        let Some(job) = self.note_lost(job, &record, version) else {
            return;
        };
        let mut new = self.claimed_record(&job.task, &record, tick, job.intent, &job.ticks);
        if job.kind == ClaimKind::Rerun {
            new.reruns = record.reruns + 1;
            // The same tick again: `max_runs` counted it once.
            new.runs = record.runs;
        }
        let run_path = self.paths.run(&job.task, tick);
        let ops = self.claim_ops(&job, &new, epoch, version, &run_path);
        let Some((job, new, run_path, ops)) = self.send_with_held_result(job, new, run_path, ops)
        else {
            return;
        };
        let sent = self.io.now.wall;
        self.call(
            ZkOp::Multi(ops),
            TaskStep::ClaimMulti {
                job,
                new,
                run_path,
                sent,
            },
        );
    }

    /// The record a won claim of `tick` of `task` (a task or a unit) with `intent` writes over
    /// `old`, with the ticks not run it carries (`plan::ledger`). [`ClaimIntent::Note`] writes only those: the claimer of
    /// `old`'s tick stays, for `on_node_loss`.
    pub(super) fn claimed_record(
        &self,
        task: &str,
        old: &FireRecord,
        tick: DateTime<Utc>,
        intent: ClaimIntent,
        ticks: &[TickEntry],
    ) -> FireRecord {
        let ledger = record::ledger_after(old, ticks);
        if intent == ClaimIntent::Note {
            return FireRecord {
                ticks: ledger,
                ..old.clone()
            };
        }
        let view = FireView {
            record: old.tick,
            claimed_to_run: old.run,
            leads: true,
            queued: old.queued,
            runs: old.runs,
            max_runs: self.max_runs_of(task),
            ..FireView::default()
        };
        let claimed = record::claimed(&view, tick, intent);
        FireRecord {
            format: FORMAT_VERSION,
            tick: Some(claimed.record),
            node: self.cfg.id.clone(),
            session: self.session_hex(),
            run: claimed.run,
            reruns: 0,
            claimed_at: Some(self.io.now.wall),
            queued: claimed.queued,
            ticks: ledger,
            runs: claimed.runs,
        }
    }

    /// The `max_runs` of `task` (a task, or a unit of one) as this node defines it.
    pub(super) fn max_runs_of(&self, task: &str) -> Option<u32> {
        if self.cfg.bugs.runs_unlimited {
            return None;
        }
        let (_, _, set) = self.view.my_set.as_ref()?;
        set.get(self.task_of(task))?.max_runs
    }

    /// The claim's multi-op: the lease and epoch checks, the record's write at `version`, and
    /// the run znode `run_path` when the tick runs (ARCHITECTURE.md, "The claim").
    fn claim_ops(
        &self,
        job: &ClaimJob,
        new: &FireRecord,
        epoch: i32,
        version: i32,
        run_path: &str,
    ) -> Vec<ZkOp> {
        let data = serde_json::to_vec(new).expect("serializes");
        let mut ops = Vec::with_capacity(4);
        if self.cfg.bugs.unfenced_claim {
            ops.push(ZkOp::SetData {
                path: self.paths.record(&job.task),
                data,
                version: None,
            });
        } else {
            // The lease exists (version 0: never modified) and is the incarnation this node
            // took (the epoch is bumped by every take): it is this node's.
            ops.push(ZkOp::Check {
                path: self.paths.lease(&job.task),
                version: 0,
            });
            ops.push(ZkOp::Check {
                path: self.paths.epoch(&job.task),
                version: epoch,
            });
            ops.push(ZkOp::SetData {
                path: self.paths.record(&job.task),
                data,
                version: Some(version),
            });
        }
        if job.intent.runs() {
            let run_data = serde_json::to_vec(&RunRecord {
                format: FORMAT_VERSION,
                node: self.cfg.id.clone(),
                session: new.session.clone(),
                tick: job.tick,
                started_at: new.claimed_at.unwrap_or(self.io.now.wall),
            })
            .expect("serializes");
            ops.push(ZkOp::Create {
                path: run_path.to_string(),
                data: run_data,
                mode: CreateMode::Ephemeral,
                acl: self.cfg.acl,
            });
        }
        ops
    }

    pub(super) fn on_claim_multi(
        &mut self,
        mut job: ClaimJob,
        new: FireRecord,
        run_path: String,
        sent: DateTime<Utc>,
        result: Result<ZkOk, ZkFail>,
    ) {
        let set_index = if self.cfg.bugs.unfenced_claim { 0 } else { 2 };
        let run_index = set_index + 1;
        match result {
            Ok(ZkOk::Multi(results)) => {
                if let Some(ZkOk::Stat(stat)) = results.get(set_index) {
                    self.measure_skew(sent, stat);
                    self.tasks.state_mut(&job.task).record = Some((new, stat.version));
                }
                if job.intent.runs() {
                    let runs = std::slice::from_ref(&run_path);
                    if self.withhold_paused_run(&job.task, job.tick, job.intent, runs) {
                        let record = job.tick;
                        return self.finish_claim(job, Ok(ClaimOutcome::AlreadyClaimed { record }));
                    }
                    self.runs.own_runs.insert(run_path);
                }
                self.finish_claim(job, Ok(ClaimOutcome::Claimed));
            }
            Err(ZkFail::Multi { index, .. }) if index < set_index => {
                // The lease or the epoch is not what this node took: lost, or changed under
                // it. Ask whose the lease is.
                let path = self.paths.lease(&job.task);
                self.call(ZkOp::Exists { path }, TaskStep::ClaimLeaseCheck { job });
            }
            Err(ZkFail::Multi { index, error }) => {
                self.report(Level::Debug, "claim conflicted; re-reading the record")
                    .field("task", &job.task)
                    .field("index", index)
                    .field("source", &error)
                    .field("attempt", job.conflicts);
                if job.kind == ClaimKind::Rerun && index == run_index {
                    // Someone else's run znode for this tick exists: it was reclaimed.
                    let record = job.tick;
                    return self.finish_claim(job, Ok(ClaimOutcome::AlreadyClaimed { record }));
                }
                if index == run_index && *error == ZkFail::NodeExists && job.conflicts == 0 {
                    // A run znode of a tick nobody claimed yet: whose is it?
                    job.conflicts += 1;
                    self.call(ZkOp::Exists { path: run_path }, TaskStep::RunBlocks { job });
                    return;
                }
                job.conflicts += 1;
                let task = job.task.clone();
                self.forget_record(&task);
                self.read_record(task, AfterRead::Claim(job));
            }
            Err(ZkFail::SessionExpired) => {
                // Refused by an expired session: the server applied nothing for it after
                // expiry, and anything before went with the session's run znode.
                self.finish_claim(
                    job,
                    Err(CoordError::SessionExpired {
                        context: "claiming",
                    }),
                );
            }
            Ok(_) => self.start_resolve(job, new, run_path, "unexpected answer".into()),
            Err(error) => self.start_resolve(job, new, run_path, error.to_string()),
        }
    }

    pub(super) fn on_claim_lease_check(&mut self, job: ClaimJob, result: Result<ZkOk, ZkFail>) {
        if self.claim_found_lease(&job.task.clone(), result) == LeaseFound::Regaining {
            // The claim waits for the lease to be taken again.
            return;
        }
        self.finish_claim(job, Ok(ClaimOutcome::NotLeader));
    }

    /// A claim failed on the lease or the epoch of `task`, and `result` says whose the lease
    /// is: this node gives it up (to take it again when only the epoch changed) or counts it
    /// lost.
    pub(super) fn claim_found_lease(
        &mut self,
        task: &str,
        result: Result<ZkOk, ZkFail>,
    ) -> LeaseFound {
        match result {
            Ok(ZkOk::Exists(Some(stat))) if Some(stat.ephemeral_owner) == self.my_session() => {
                let why = if stat.version != 0 {
                    "its data was changed by someone else (claims require the version this node created)"
                } else {
                    "the task's epoch was changed by someone else (or tasks/ was deleted and recreated)"
                };
                self.give_up(task.to_string(), why);
                if stat.version == 0 {
                    // Only the epoch changed: the claim waits for the lease to be taken again
                    // (a task without a fire record would otherwise lose this tick: the
                    // planner starts it from now when leadership comes back).
                    self.tasks.set_regain(task, Some(Regain::GivingUp));
                    return LeaseFound::Regaining;
                }
            }
            _ => {
                self.report(Level::Warn, "claim refused: this node's lease is gone")
                    .field("task", task);
                self.lease_lost(task);
                if result.is_err() {
                    // Unknown whose the lease is: it may still be this session's, which no
                    // other node deletes (simulation seed 23229).
                    self.stray_lease(task);
                }
            }
        }
        LeaseFound::Lost
    }

    /// A claim found a run znode for its tick: one no live member wrote (persistent, or of a
    /// session that is no member's) is reported and deleted, and the claim tried again.
    pub(super) fn on_run_blocks(&mut self, job: ClaimJob, result: Result<ZkOk, ZkFail>) {
        let path = self.paths.run(&job.task, job.tick);
        if let Ok(ZkOk::Exists(Some(stat))) = result
            && !self.live_run_owner(stat.ephemeral_owner)
        {
            self.report_once(
                format!("foreign run {path} {}", stat.czxid),
                Level::Error,
                format!(
                    "deleting the run record {path}: no live zkcron node wrote it, and it kept the tick from being claimed. If it comes back, find what writes it; to remove it by hand: {cli} delete {path}", cli = self.zk_cli()
                ),
            )
            .field("task", &job.task);
            self.call(
                ZkOp::Delete {
                    path,
                    version: Some(stat.version),
                },
                Then::Ignore,
            );
        }
        let task = job.task.clone();
        self.forget_record(&task);
        self.read_record(task, AfterRead::Claim(job));
    }

    /// Answers the claim and starts the next job on its task.
    pub(super) fn finish_claim(
        &mut self,
        job: ClaimJob,
        outcome: Result<ClaimOutcome, CoordError>,
    ) {
        if let Ok(ClaimOutcome::AlreadyClaimed { record }) = &outcome
            && *record > job.tick
        {
            let record = *record;
            self.check_claim_behind(&job.task, record);
        }
        self.answer(job.req, outcome.map(Answered::Claim));
        self.finish_task_job(&job.task);
    }

    // ---- unknown outcomes ----

    fn start_resolve(&mut self, job: ClaimJob, new: FireRecord, run_path: String, why: String) {
        self.report(
            Level::Warn,
            "claim outcome unknown; re-reading the fire record",
        )
        .field("task", &job.task)
        .field("tick", job.tick)
        .field("why", &why);
        self.forget_record(&job.task);
        self.resolve_read(ResolveJob {
            claim: job,
            new,
            run_path,
            why,
            delay: Duration::from_millis(100),
        });
    }

    /// Syncs and re-reads the record (the sync makes the read see every write before it).
    pub(super) fn resolve_read(&mut self, job: ResolveJob) {
        if self.life.session.is_none() {
            return self.abort_read(AfterRead::Resolve(job));
        }
        let path = self.paths.record(&job.claim.task);
        self.call(ZkOp::Sync { path }, TaskStep::ResolveSync);
        let task = job.claim.task.clone();
        self.read_record(task, AfterRead::Resolve(job));
    }

    fn resolve_after_read(
        &mut self,
        mut job: ResolveJob,
        read: Result<(FireRecord, i32), CoordError>,
    ) {
        let (record, _) = match read {
            Ok(found) => found,
            Err(error) => {
                if self.life.stopping {
                    let claim = job.claim;
                    return self.finish_claim(claim, Err(error));
                }
                // The session lives (ZooKeeper restarting, a partition shorter than the
                // session): the answer is coming, and giving up would lose a claimed tick.
                self.report(
                    Level::Debug,
                    format!("re-reading the fire record failed ({error}); retrying"),
                )
                .field("task", &job.claim.task);
                let at = self.io.now.mono + job.delay;
                job.delay = (job.delay * 2).min(Duration::from_secs(1));
                return self.at(at, Timer::Resolve(job));
            }
        };
        let tick = job.claim.tick;
        // A queued tick's start leaves the record's tick as it was: it is ours when the record
        // is exactly what it wrote.
        let exact = matches!(job.claim.intent, ClaimIntent::RunQueued | ClaimIntent::Note);
        let ours = if exact {
            record == job.new
        } else {
            record.tick == Some(tick)
                && record.session == job.new.session
                && record.node == job.new.node
                && record.reruns == job.new.reruns
        };
        if ours {
            self.report(Level::Info, "the claim had been applied")
                .field("task", &job.claim.task)
                .field("tick", tick);
            if job.claim.intent.runs() {
                let runs = std::slice::from_ref(&job.run_path);
                if self.withhold_paused_run(&job.claim.task, tick, job.claim.intent, runs) {
                    let outcome = ClaimOutcome::AlreadyClaimed { record: tick };
                    return self.finish_claim(job.claim, Ok(outcome));
                }
                self.runs.own_runs.insert(job.run_path);
            }
            return self.finish_claim(job.claim, Ok(ClaimOutcome::Claimed));
        }
        let still_queued =
            job.claim.intent == ClaimIntent::RunQueued && record.queued == Some(tick);
        let outcome = match record.tick {
            Some(current) if current >= tick && !still_queued && !exact => {
                Ok(ClaimOutcome::AlreadyClaimed { record: current })
            }
            _ => Err(CoordError::Unknown {
                context: format!("claiming {} at {tick}", job.claim.task),
                why: job.why,
            }),
        };
        self.finish_claim(job.claim, outcome);
    }

    /// Reads the stored result of the claim's task; the claim goes on with it when it is
    /// answered ([`Node::on_rerun_result`]).
    pub(super) fn read_result_then_claim(
        &mut self,
        job: ClaimJob,
        record: FireRecord,
        version: i32,
    ) {
        let path = self.paths.result(&job.task);
        self.call(
            ZkOp::GetData { path },
            TaskStep::RerunResult {
                job,
                record,
                version,
            },
        );
    }

    /// A rerun read the stored result: decide with the rules.
    pub(super) fn on_rerun_result(
        &mut self,
        mut job: ClaimJob,
        record: FireRecord,
        version: i32,
        result: Result<ZkOk, ZkFail>,
    ) {
        match super::runs::decode_result(result) {
            Ok(stored) => {
                job.result = Some(stored.map(|r| r.tick));
                self.send_claim(job, record, version);
            }
            Err(error) => self.finish_claim(job, Err(error)),
        }
    }

    /// Whether the session named (in hex) by a record is alive: this node's, or a member's.
    pub(super) fn session_alive(&self, hex: &str) -> bool {
        let Ok(id) = i64::from_str_radix(hex, 16) else {
            return false;
        };
        Some(id) == self.my_session() || self.view.member_sessions.values().any(|&s| s == id)
    }
}

/// The answer to a claim whose unknown outcome was still being resolved when the session ended.
pub(super) fn resolve_ended() -> CoordError {
    CoordError::ZooKeeper {
        context: "resolving a claim".into(),
        message: "the session ended".into(),
    }
}
