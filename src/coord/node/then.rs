//! The continuations of calls in flight: what the node does with each reply ([`Then`],
//! keyed by op id in `Node::pending`, dropped when the session generation changes), and the
//! dispatch of a reply to its handler.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::claim::{AfterRead, ClaimJob};
use super::io::{OpId, ReqId, Stat, ZkFail, ZkOk, ZkOp};
use super::leases::{TakeJob, TakeKind};
use super::members::MemberRead;
use super::runs::RunEndedJob;
use super::{
    Node, backfill, control, foreign, gc, history, pool, pool_end, queued_start, request_claim,
    request_end, trigger,
};
use crate::coord::records::FireRecord;

/// What a pending call continues with when its reply arrives.
#[derive(Debug)]
pub(super) enum Then {
    /// Nothing: a call whose outcome changes nothing (a give-back after stopping, a trigger
    /// setup call, deleting a foreign run znode).
    Ignore,
    /// A step of the task-set collection.
    Gc(gc::GcStep),
    /// A read of the operator's marks.
    Control {
        read: control::ControlRead,
        phase: control::Phase,
    },
    /// A step of an operator's request: a manual or chained run's trigger, a backfill, the
    /// end of a requested run.
    Request(RequestStep),
    /// A step of appending to a task's history.
    History(history::Step),
    /// Setup, registration, the member and lease listings and the tree: `session.rs`,
    /// `members.rs`, `clock.rs`.
    Member(MemberStep),
    /// Takes, releases, give-ups and the checks of others' leases: `leases.rs`, `acting.rs`,
    /// `foreign.rs`.
    Lease(LeaseStep),
    /// Claims, runs, results and leaving the cluster: `claim.rs`, `runs.rs`, `queued_start.rs`.
    Task(TaskStep),
    /// Pooled tasks' reads, claims and ends: `pool.rs`, `pool_end.rs`, `request_claim.rs`.
    Pool(PoolStep),
}

/// The continuations of the operator's requests: `trigger.rs`, `backfill.rs`,
/// `request_claim.rs`, `request_end.rs`.
#[derive(Debug)]
pub(super) enum RequestStep {
    Trigger(trigger::Step),
    Backfill(backfill::Step),
    Claim(request_claim::Step),
    End(Box<request_end::Step>),
}

/// The continuations of setup, registration, the member and lease listings and the tree:
/// `session.rs`, `members.rs`, `clock.rs`.
#[derive(Debug)]
pub(super) enum MemberStep {
    /// One of the session's setup calls (tree, watches, marks): counted until all answered.
    SetupStep,
    /// A write of the `clock` znode, whose mtime measures this node's clock skew.
    Probe {
        /// When the write was sent, by the local clock.
        sent: DateTime<Utc>,
        /// It creates the znode (the set found none); else it sets it.
        create: bool,
        /// A setup step: registering waits for it.
        setup: bool,
    },
    /// Writing one chunk of this node's task set before registering.
    Chunk,
    /// Creating this node's ephemeral member znode (its reply measures the skew too).
    MemberCreate {
        /// When the create was sent, by the local clock.
        sent: DateTime<Utc>,
    },
    /// The member znode existed: reading whose it is (this session's is updated).
    MemberCheck,
    /// Updating this session's member znode with a new record.
    MemberSet {
        /// When the write was sent, by the local clock.
        sent: DateTime<Utc>,
    },
    /// The listing of `members/` of a re-listing.
    ListMembers,
    /// The listing of `leases/` of a re-listing.
    ListLeases,
    /// The listing of `tasks/` (the fire records) of a re-listing.
    ListRecords,
    /// The listing in flight reads whose a lease this node holds (at `epoch`) is.
    RelistLeaseOwner { task: String, epoch: i32 },
    /// Reading a member znode: its record, and the session that owns it.
    ReadMember {
        id: String,
        /// Part of the listing in flight, or a change applied at once.
        read: MemberRead,
    },
    /// Reading one chunk of a member's task set.
    ReadChunk { digest: String, index: usize },
    /// Creating one directory of the tree again (reported if it was missing).
    RecreateDir { path: String },
    /// Creating the tree's last directory again: then what was waiting for the tree.
    Recreated { after: AfterRecreate },
    /// Creating a task's fire record if absent (its epoch's create, sent after, continues).
    EnsureRecord { task: String },
    /// Creating a task's epoch if absent: then what needed the task's znodes.
    Ensured { task: String, after: AfterEnsure },
}

impl From<MemberStep> for Then {
    fn from(step: MemberStep) -> Then {
        Then::Member(step)
    }
}

/// The continuations of takes, releases, give-ups and the checks of others' leases: `leases.rs`,
/// `acting.rs`, `foreign.rs`.
#[derive(Debug)]
pub(super) enum LeaseStep {
    /// A take: creating the ephemeral lease and bumping the epoch in one multi.
    Take(TakeJob),
    /// The first take of a task: its fire record, its epoch and the lease in one multi.
    TakeFresh(TakeJob),
    /// A take found the lease present: reading whose it is (it may be this session's, from a
    /// take whose answer was lost).
    TakeOwner(TakeJob),
    /// The lease is this session's: reading the epoch, whose version the take owns.
    TakeEpoch(TakeJob),
    /// Deleting a lease this node gave up, conditional on its epoch.
    Released { task: String },
    /// A release found the epoch moved: reading it before checking the lease again.
    ReleaseEpoch { task: String },
    /// Checking that the lease to release is still this session's (then deleted at `epoch`).
    ReleaseCheck { task: String, epoch: Option<i32> },
    /// A lease this node holds was reported deleted: checking it is gone (not an echo).
    LeaseCheck { task: String },
    /// Reading a foreign lease's owner (and data) to see whether a live member holds it.
    LeaseOwner {
        task: String,
        epoch: foreign::EpochRead,
    },
    /// Reading the epoch before reading again a foreign lease that is to be deleted.
    LeaseOwnerEpoch { task: String },
    /// Asking who holds a lease just created, to see whether its designated member acts.
    Acting {
        member: String,
        /// When the lease was seen created.
        seen: Duration,
    },
    /// Deleting a lease no live member holds (or this session's lost take), conditional on
    /// the epoch read before it.
    HealLease {
        task: String,
        foreign: Option<foreign::ForeignLease>,
        /// The index of the lease's delete in the multi (0 if it is no multi).
        lease_at: usize,
    },
    /// Deleting this node's lease that changed under it, conditional on the epoch read.
    GiveUp { task: String },
    /// Reading the epoch of a lease to give up.
    GiveUpEpoch { task: String },
    /// Checking that the lease to give up is still this session's (then deleted at `epoch`).
    GiveUpCheck { task: String, epoch: Option<i32> },
}

impl From<LeaseStep> for Then {
    fn from(step: LeaseStep) -> Then {
        Then::Lease(step)
    }
}

/// The continuations of claims, runs, results and leaving the cluster: `claim.rs`, `runs.rs`,
/// `queued_start.rs`.
#[derive(Debug)]
pub(super) enum TaskStep {
    /// The delete of a withheld run's znode ([`Node::withheld_runs`]).
    WithheldRun { path: String },
    /// Reading a task's fire record: then what the read is for.
    ReadRecord {
        task: String,
        after: AfterRead,
        /// The task's znodes were just created: a missing record is an error, not created
        /// again.
        ensured: bool,
    },
    /// A claim's fenced multi-op (record, and run znode when the tick runs).
    ClaimMulti {
        job: ClaimJob,
        /// The record the claim writes.
        new: FireRecord,
        run_path: String,
        /// When it was sent, by the local clock (its reply measures the skew).
        sent: DateTime<Utc>,
    },
    /// A claim failed on the lease or the epoch: asking whose the lease is.
    ClaimLeaseCheck { job: ClaimJob },
    /// A claim found a run znode for its tick: asking whose it is.
    RunBlocks { job: ClaimJob },
    /// The sync before re-reading the record of a claim whose outcome is unknown.
    ResolveSync,
    /// An orphan check read the record: reading the stored result.
    OrphanResult {
        req: ReqId,
        task: String,
        record: FireRecord,
    },
    /// An orphan check: whether the run znode of the claimed tick is live.
    OrphanRun {
        req: ReqId,
        record: FireRecord,
        /// The tick of the stored result.
        result: Option<DateTime<Utc>>,
    },
    /// A rerun reads the stored result before claiming again; so does a claim that moves past
    /// a tick claimed to run by a session that is gone (was it lost with its node?).
    RerunResult {
        job: ClaimJob,
        record: FireRecord,
        version: i32,
    },
    /// Listing a task's run znodes, to count the live runs of other nodes.
    RunsList {
        req: ReqId,
        task: String,
        /// The lease incarnation held when the listing was sent.
        incarnation: Option<i32>,
    },
    /// Whose one run znode is (only a live member's ephemeral counts).
    RunOwner { req: ReqId, path: String },
    /// Reading the fire record for a run znode of a session never seen as a member: whether
    /// the record names it as the claimer of that tick.
    RunClaimer {
        req: ReqId,
        path: String,
        /// The run znode's metadata as checked.
        stat: Stat,
    },
    /// Reading a task's stored result for the daemon.
    LastResult { req: ReqId },
    /// Reading the stored result before recording a run's end.
    ResultRead { job: Box<RunEndedJob> },
    /// Recording a run's end: deleting its run znode and writing the result, in one multi.
    ResultWrite {
        job: Box<RunEndedJob>,
        /// The multi deletes the run znode first.
        run_live: bool,
        /// The multi writes the result (it is newer than the stored one).
        newer: bool,
    },
    /// Recording a run's end and claiming the tick queued behind it, in one multi.
    ResultAndClaim(Box<queued_start::ResultAndClaim>),
    /// One multi of leaving the cluster (member znode and leases).
    ReleaseBatch { batch: Vec<Vec<ZkOp>> },
    /// One lease released alone after its batch failed.
    ReleaseOne,
}

impl From<TaskStep> for Then {
    fn from(step: TaskStep) -> Then {
        Then::Task(step)
    }
}

/// The continuations of pooled tasks' reads, claims and ends: `pool.rs`, `pool_end.rs`,
/// `request_claim.rs`.
#[derive(Debug)]
pub(super) enum PoolStep {
    /// Reading one unit's fire record for a request on a pooled task.
    PoolRecord { req: ReqId, unit: String },
    /// A pooled task's claim: one multi-op over its units' parts.
    PoolMulti {
        /// Boxed: a claim's job is large.
        job: Box<pool::PoolJob>,
        parts: Vec<pool::PoolPart>,
        /// When it was sent, by the local clock (its reply measures the skew).
        sent: DateTime<Utc>,
    },
    /// A claim (a pooled one on one unit, or a request's) failed on the lease or epoch of
    /// `unit`: asking whose the lease is.
    RefusedLeaseCheck { unit: String },
    /// Reading one unit's stored result before recording a pooled run's end.
    PoolResultRead { req: ReqId, unit: String },
    /// Recording a pooled run's end: these ops in one multi.
    PoolResultWrite {
        /// Boxed: a run's end is large.
        end: Box<pool_end::PoolEnd>,
        ops: Vec<ZkOp>,
    },
}

impl From<PoolStep> for Then {
    fn from(step: PoolStep) -> Then {
        Then::Pool(step)
    }
}

/// What to do once the tree is recreated.
#[derive(Debug)]
pub(super) enum AfterRecreate {
    /// Register again (the member znode went with the tree).
    Register,
    /// Create the task's znodes, then continue.
    Ensure { task: String, after: AfterEnsure },
    /// Send the take again.
    Take(TakeJob),
}

/// What to do once a task's persistent znodes exist.
#[derive(Debug)]
pub(super) enum AfterEnsure {
    /// Read the fire record again.
    Read(Box<AfterRead>),
    /// Send the take, of this kind.
    Take(TakeKind),
    /// A lease to be deleted found no epoch to condition its delete on: read it again.
    Heal,
}

impl Node {
    pub(super) fn on_reply(&mut self, op: OpId, result: Result<ZkOk, ZkFail>) {
        let Some(pending) = self.io.pending.remove(&op) else {
            return;
        };
        if pending.generation != self.io.generation {
            return;
        }
        match pending.then {
            Then::Ignore => {}
            Then::Member(step) => self.on_member_reply(step, result),
            Then::Lease(step) => self.on_lease_reply(step, result),
            Then::Task(step) => self.on_task_reply(step, result),
            Then::Pool(step) => self.on_pool_reply(step, result),
            Then::Gc(step) => self.on_gc(step, result, pending.sent),
            Then::Control { read, phase } => self.on_control(read, phase, result),
            Then::Request(RequestStep::Trigger(step)) => self.on_trigger_step(step, result),
            Then::Request(RequestStep::Backfill(step)) => self.on_backfill_step(step, result),
            Then::Request(RequestStep::Claim(step)) => self.on_claim_step(step, result),
            Then::Request(RequestStep::End(step)) => self.on_end_step(*step, result),
            Then::History(step) => self.on_history_step(step, result),
        }
    }

    /// The replies of setup, registration, the member and lease listings and the tree.
    fn on_member_reply(&mut self, then: MemberStep, result: Result<ZkOk, ZkFail>) {
        match then {
            MemberStep::SetupStep => self.on_setup_step(result),
            MemberStep::Probe {
                sent,
                create,
                setup,
            } => self.on_probe(result, sent, create, setup),
            MemberStep::Chunk => self.on_chunk(result),
            MemberStep::MemberCreate { sent } => self.on_member_create(result, sent),
            MemberStep::MemberCheck => self.on_member_check(result),
            MemberStep::MemberSet { sent } => self.on_member_set(result, sent),
            MemberStep::ListMembers => self.on_list_members(result),
            MemberStep::ListLeases => self.on_list_leases(result),
            MemberStep::ListRecords => self.on_list_records(result),
            MemberStep::RelistLeaseOwner { task, epoch } => {
                self.on_relist_lease_owner(task, epoch, result)
            }
            MemberStep::ReadMember { id, read } => self.on_read_member(id, read, result),
            MemberStep::ReadChunk { digest, index } => self.on_read_chunk(digest, index, result),
            MemberStep::RecreateDir { path } => self.on_recreate_dir(path, result),
            MemberStep::Recreated { after } => self.on_recreated(after, result),
            MemberStep::EnsureRecord { task } => self.on_ensure_record(task, result),
            MemberStep::Ensured { task, after } => self.on_ensured(task, after, result),
        }
    }

    /// The replies of takes, releases, give-ups and the checks of others' leases.
    fn on_lease_reply(&mut self, then: LeaseStep, result: Result<ZkOk, ZkFail>) {
        match then {
            LeaseStep::Take(job) => self.on_take(job, result),
            LeaseStep::TakeFresh(job) => self.on_take_fresh(job, result),
            LeaseStep::TakeOwner(job) => self.on_take_owner(job, result),
            LeaseStep::TakeEpoch(job) => self.on_take_epoch(job, result),
            LeaseStep::Released { task } => self.on_released(task, result),
            LeaseStep::ReleaseEpoch { task } => self.on_release_epoch(task, result),
            LeaseStep::ReleaseCheck { task, epoch } => self.on_release_check(task, epoch, result),
            LeaseStep::LeaseCheck { task } => self.on_lease_check(task, result),
            LeaseStep::LeaseOwner { task, epoch } => self.on_lease_owner(task, epoch, result),
            LeaseStep::LeaseOwnerEpoch { task } => self.on_lease_owner_epoch(task, result),
            LeaseStep::Acting { member, seen } => self.on_acting(member, seen, result),
            LeaseStep::HealLease {
                task,
                foreign,
                lease_at,
            } => self.on_heal_lease(task, foreign, lease_at, result),
            LeaseStep::GiveUp { task } => self.on_give_up(task, result),
            LeaseStep::GiveUpEpoch { task } => self.on_give_up_epoch(task, result),
            LeaseStep::GiveUpCheck { task, epoch } => self.on_give_up_check(task, epoch, result),
        }
    }

    /// The replies of pooled tasks' reads, claims and ends.
    fn on_pool_reply(&mut self, then: PoolStep, result: Result<ZkOk, ZkFail>) {
        match then {
            PoolStep::PoolRecord { req, unit } => self.on_pool_record(req, unit, result),
            PoolStep::PoolMulti { job, parts, sent } => {
                self.on_pool_multi(*job, parts, sent, result)
            }
            PoolStep::RefusedLeaseCheck { unit } => self.on_refused_lease_check(unit, result),
            PoolStep::PoolResultRead { req, unit } => self.on_pool_result_read(req, unit, result),
            PoolStep::PoolResultWrite { end, ops } => self.on_pool_result_write(*end, ops, result),
        }
    }

    /// The replies of claims, runs, results and leaving the cluster.
    fn on_task_reply(&mut self, then: TaskStep, result: Result<ZkOk, ZkFail>) {
        match then {
            TaskStep::ReadRecord {
                task,
                after,
                ensured,
            } => self.on_read_record(task, after, ensured, result),
            TaskStep::ClaimMulti {
                job,
                new,
                run_path,
                sent,
            } => self.on_claim_multi(job, new, run_path, sent, result),
            TaskStep::ClaimLeaseCheck { job } => self.on_claim_lease_check(job, result),
            TaskStep::RunBlocks { job } => self.on_run_blocks(job, result),
            TaskStep::ResolveSync => {}
            TaskStep::OrphanResult { req, task, record } => {
                self.on_orphan_result(req, task, record, result)
            }
            TaskStep::OrphanRun {
                req,
                record,
                result: stored,
            } => self.on_orphan_run(req, record, stored, result),
            TaskStep::RerunResult {
                job,
                record,
                version,
            } => self.on_rerun_result(job, record, version, result),
            TaskStep::RunsList {
                req,
                task,
                incarnation,
            } => self.on_runs_list(req, task, incarnation, result),
            TaskStep::RunOwner { req, path } => self.on_run_owner(req, path, result),
            TaskStep::RunClaimer { req, path, stat } => {
                self.on_run_claimer(req, path, stat, result)
            }
            TaskStep::LastResult { req } => self.on_last_result(req, result),
            TaskStep::ResultRead { job } => self.on_result_read(*job, result),
            TaskStep::ResultWrite {
                job,
                run_live,
                newer,
            } => self.on_result_write(*job, run_live, newer, result),
            TaskStep::ResultAndClaim(write) => self.on_result_and_claim(*write, result),
            TaskStep::ReleaseBatch { batch } => self.on_release_batch(batch, result),
            TaskStep::ReleaseOne => self.on_release_one(),
            TaskStep::WithheldRun { path } => self.on_withheld_run_deleted(path, result),
        }
    }
}
