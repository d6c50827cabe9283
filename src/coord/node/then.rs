//! The continuations of calls in flight: what the node does with each reply ([`Then`],
//! keyed by op id in `Node::pending`, dropped when the session generation changes), and the
//! dispatch of a reply to its handler.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::claim::{AfterRead, ClaimJob};
use super::io::{OpId, ReqId, ZkFail, ZkOk, ZkOp};
use super::leases::{TakeJob, TakeKind};
use super::members::MemberRead;
use super::runs::RunEndedJob;
use super::{Node, control, foreign, gc, history, trigger};
use crate::coord::zk::wire::FireRecord;

/// What a pending call continues with when its reply arrives.
#[derive(Debug)]
pub(super) enum Then {
    Ignore,
    SetupStep,
    Probe {
        sent: DateTime<Utc>,
        create: bool,
        setup: bool,
    },
    Chunk,
    MemberCreate {
        sent: DateTime<Utc>,
    },
    MemberCheck,
    MemberSet {
        sent: DateTime<Utc>,
    },
    ListMembers,
    ListLeases,
    ReadMember {
        id: String,
        read: MemberRead,
    },
    ReadChunk {
        digest: String,
        index: usize,
    },
    RecreateDir {
        path: String,
    },
    Recreated {
        after: AfterRecreate,
    },
    EnsureRecord {
        task: String,
    },
    Ensured {
        task: String,
        after: AfterEnsure,
    },
    Take(TakeJob),
    TakeFresh(TakeJob),
    TakeOwner(TakeJob),
    TakeEpoch(TakeJob),
    Released {
        task: String,
    },
    ReleaseEpoch {
        task: String,
    },
    ReleaseCheck {
        task: String,
        epoch: Option<i32>,
    },
    LeaseCheck {
        task: String,
    },
    LeaseOwner {
        task: String,
        epoch: foreign::EpochRead,
    },
    LeaseOwnerEpoch {
        task: String,
    },
    Acting {
        member: String,
        seen: Duration,
    },
    HealLease {
        task: String,
        foreign: Option<foreign::ForeignLease>,
        /// The index of the lease's delete in the multi (0 if it is no multi).
        lease_at: usize,
    },
    GiveUp {
        task: String,
    },
    GiveUpEpoch {
        task: String,
    },
    GiveUpCheck {
        task: String,
        epoch: Option<i32>,
    },
    ReadRecord {
        task: String,
        after: AfterRead,
        ensured: bool,
    },
    ClaimMulti {
        job: ClaimJob,
        new: FireRecord,
        run_path: String,
        sent: DateTime<Utc>,
    },
    ClaimLeaseCheck {
        job: ClaimJob,
    },
    RunBlocks {
        job: ClaimJob,
    },
    ResolveSync,
    OrphanResult {
        req: ReqId,
        task: String,
        record: FireRecord,
    },
    OrphanRun {
        req: ReqId,
        record: FireRecord,
        result: Option<DateTime<Utc>>,
    },
    RerunResult {
        job: ClaimJob,
        record: FireRecord,
        version: i32,
    },
    RunsList {
        req: ReqId,
        task: String,
        incarnation: Option<i32>,
    },
    RunOwner {
        req: ReqId,
        path: String,
    },
    LastResult {
        req: ReqId,
    },
    ResultRead {
        job: RunEndedJob,
    },
    ResultWrite {
        job: RunEndedJob,
        run_live: bool,
        newer: bool,
    },
    ReleaseBatch {
        batch: Vec<Vec<ZkOp>>,
    },
    ReleaseOne,
    Gc(gc::GcStep),
    Control {
        read: control::ControlRead,
        phase: control::Phase,
    },
    Trigger(trigger::Step),
    History(history::Step),
}

/// What to do once the tree is recreated.
#[derive(Debug)]
pub(super) enum AfterRecreate {
    Register,
    Ensure { task: String, after: AfterEnsure },
    Take(TakeJob),
}

/// What to do once a task's persistent znodes exist.
#[derive(Debug)]
pub(super) enum AfterEnsure {
    Read(Box<AfterRead>),
    Take(TakeKind),
    /// A lease to be deleted found no epoch to condition its delete on: read it again.
    Heal,
}

impl Node {
    pub(super) fn on_reply(&mut self, op: OpId, result: Result<ZkOk, ZkFail>) {
        let Some(pending) = self.pending.remove(&op) else {
            return;
        };
        if pending.generation != self.generation {
            return;
        }
        let sent = pending.sent;
        match pending.then {
            Then::Ignore => {}
            Then::SetupStep => self.on_setup_step(result),
            Then::Probe {
                sent,
                create,
                setup,
            } => self.on_probe(result, sent, create, setup),
            Then::Chunk => self.on_chunk(result),
            Then::MemberCreate { sent } => self.on_member_create(result, sent),
            Then::MemberCheck => self.on_member_check(result),
            Then::MemberSet { sent } => self.on_member_set(result, sent),
            Then::ListMembers => self.on_list_members(result),
            Then::ListLeases => self.on_list_leases(result),
            Then::ReadMember { id, read } => self.on_read_member(id, read, result),
            Then::ReadChunk { digest, index } => self.on_read_chunk(digest, index, result),
            Then::RecreateDir { path } => self.on_recreate_dir(path, result),
            Then::Recreated { after } => self.on_recreated(after, result),
            Then::EnsureRecord { task } => self.on_ensure_record(task, result),
            Then::Ensured { task, after } => self.on_ensured(task, after, result),
            Then::Take(job) => self.on_take(job, result),
            Then::TakeFresh(job) => self.on_take_fresh(job, result),
            Then::TakeOwner(job) => self.on_take_owner(job, result),
            Then::TakeEpoch(job) => self.on_take_epoch(job, result),
            Then::Released { task } => self.on_released(task, result),
            Then::ReleaseEpoch { task } => self.on_release_epoch(task, result),
            Then::ReleaseCheck { task, epoch } => self.on_release_check(task, epoch, result),
            Then::LeaseCheck { task } => self.on_lease_check(task, result),
            Then::LeaseOwner { task, epoch } => self.on_lease_owner(task, epoch, result),
            Then::LeaseOwnerEpoch { task } => self.on_lease_owner_epoch(task, result),
            Then::Acting { member, seen } => self.on_acting(member, seen, result),
            Then::HealLease {
                task,
                foreign,
                lease_at,
            } => self.on_heal_lease(task, foreign, lease_at, result),
            Then::GiveUp { task } => self.on_give_up(task, result),
            Then::GiveUpEpoch { task } => self.on_give_up_epoch(task, result),
            Then::GiveUpCheck { task, epoch } => self.on_give_up_check(task, epoch, result),
            Then::ReadRecord {
                task,
                after,
                ensured,
            } => self.on_read_record(task, after, ensured, result),
            Then::ClaimMulti {
                job,
                new,
                run_path,
                sent,
            } => self.on_claim_multi(job, new, run_path, sent, result),
            Then::ClaimLeaseCheck { job } => self.on_claim_lease_check(job, result),
            Then::RunBlocks { job } => self.on_run_blocks(job, result),
            Then::ResolveSync => {}
            Then::OrphanResult { req, task, record } => {
                self.on_orphan_result(req, task, record, result)
            }
            Then::OrphanRun {
                req,
                record,
                result: stored,
            } => self.on_orphan_run(req, record, stored, result),
            Then::RerunResult {
                job,
                record,
                version,
            } => self.on_rerun_result(job, record, version, result),
            Then::RunsList {
                req,
                task,
                incarnation,
            } => self.on_runs_list(req, task, incarnation, result),
            Then::RunOwner { req, path } => self.on_run_owner(req, path, result),
            Then::LastResult { req } => self.on_last_result(req, result),
            Then::ResultRead { job } => self.on_result_read(job, result),
            Then::ResultWrite {
                job,
                run_live,
                newer,
            } => self.on_result_write(job, run_live, newer, result),
            Then::ReleaseBatch { batch } => self.on_release_batch(batch, result),
            Then::ReleaseOne => self.on_release_one(),
            Then::Gc(step) => self.on_gc(step, result, sent),
            Then::Control { read, phase } => self.on_control(read, phase, result),
            Then::Trigger(step) => self.on_trigger_step(step, result),
            Then::History(step) => self.on_history_step(step, result),
        }
    }
}
