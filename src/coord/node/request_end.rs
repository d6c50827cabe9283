//! The end of a requested run: a manual run, a chained run (both under `control/triggers`) or
//! a backfill tick (under `control/backfills`), recorded on its request after the history
//! append. One flow serves every kind; only the request's path and the rule that ends its
//! record differ ([`record::trigger_ended`], [`backfill::ended`]).
//!
//! The end is one write at the version read: `set_data(request, ended)` with the creates of the
//! chained runs the run requests and the pause it carries (`pause_on_failure`), in one
//! multi-op. The record this node knows is written on without a read first; a stale one fails
//! on its version and is read again. A write whose chained runs exist already (an earlier
//! write's answer was lost) goes again without them; a pause found there, or gone since (a
//! resume landed), is checked or created again with the next write ([`Node::pause_retry`]).
//! A request ended already, deleted, or unreadable ends nothing more: the history has the run.

use super::io::{Answered, Level, ReqId, ZkFail, ZkOk, ZkOp};
use super::request_claim::Kind;
use super::{Node, RequestStep, Then};
use crate::coord::backfill::{self, BackfillRecord};
use crate::coord::record;
use crate::coord::records::{HistoryEntry, TriggerRecord, TriggerState};
use crate::coord::{CoordError, RunResult};

fn to_vec(record: &impl serde::Serialize) -> Vec<u8> {
    serde_json::to_vec(record).expect("serializes")
}

/// How often a read of the request is tried before the end gives up.
const RESOLVE_READS: u8 = 10;

/// Recording a requested run's end on its request.
#[derive(Debug)]
pub(crate) struct End {
    pub(super) req: ReqId,
    /// The run's fire id: a trigger's name, or a backfill tick's fire id.
    pub(super) name: String,
    pub(super) entry: HistoryEntry,
    pub(super) reason: Option<String>,
    /// The creates of the chained runs' requests (`after`), sent with the end's write.
    pub(super) chain: Vec<ZkOp>,
    /// The pause the end carries (`pause_on_failure`), in `chain`, for the report.
    pub(super) pause: Option<super::mark::PauseNote>,
    /// The create of that pause's mark, to send again when a resume removed a mark found.
    pub(super) pause_create: Option<ZkOp>,
    reads: u8,
}

/// Where an end is.
#[derive(Debug)]
pub(crate) enum Step {
    Read { end: End },
    Write { end: End },
}

impl End {
    pub(super) fn new(req: ReqId, task: &str, result: &RunResult, release: &str) -> End {
        let entry = HistoryEntry::of_run(task, result, release);
        let reason = result.end_reason().map(str::to_string);
        End {
            req,
            name: entry.fire_id.clone(),
            entry,
            reason,
            chain: Vec::new(),
            pause: None,
            pause_create: None,
            reads: 0,
        }
    }

    fn kind(&self) -> Kind {
        Kind::of(&self.name)
    }

    /// The error messages' name of the run.
    fn what(&self) -> &'static str {
        match self.kind() {
            Kind::Manual => "manual run",
            Kind::Backfill { .. } => "backfill run",
        }
    }

    fn context(&self) -> &'static str {
        match self.kind() {
            Kind::Manual => "recording the manual run's end",
            Kind::Backfill { .. } => "recording the backfill run's end",
        }
    }

    /// The session ended before the request was written: the daemon hears so.
    pub(super) fn abort(self, node: &mut Node) {
        let context = self.context();
        node.answer(self.req, Err(CoordError::SessionEnded { context }));
    }
}

impl Node {
    /// Records `end` on its request.
    pub(super) fn end_request(&mut self, end: End) {
        if self.life.session.is_none() {
            let context = end.context();
            return self.answer(end.req, Err(CoordError::NotConnected { context }));
        }
        match self.known_request(&end) {
            Some((data, version)) => self.write_end(end, &data, version),
            None => self.read_end(end),
        }
    }

    /// The request's record as this node knows it, as stored, and its version (a running
    /// trigger's, any backfill's).
    fn known_request(&self, end: &End) -> Option<(Vec<u8>, i32)> {
        match end.kind() {
            Kind::Manual => self
                .requests
                .triggers
                .get(&end.name)
                .filter(|known| known.record.state == TriggerState::Running)
                .map(|known| (to_vec(&known.record), known.version)),
            Kind::Backfill { name, .. } => self
                .requests
                .backfills
                .get(&name)
                .map(|known| (to_vec(&known.record), known.version)),
        }
    }

    /// The request's record `data` once `end` is recorded on it; `None` when there is
    /// nothing to write (ended already, or not a record zkcron can read).
    fn ended_data(&self, end: &End, data: &[u8]) -> Option<Vec<u8>> {
        let reason = end.reason.as_deref();
        match end.kind() {
            Kind::Manual => {
                let record = serde_json::from_slice::<TriggerRecord>(data).ok()?;
                let new = record::trigger_ended(&record, &end.entry, reason)?;
                Some(serde_json::to_vec(&new).expect("serializes"))
            }
            Kind::Backfill { .. } => {
                let record = serde_json::from_slice::<BackfillRecord>(data).ok()?;
                let new = backfill::ended(&record, &end.entry, reason, self.io.now.wall);
                (new != record).then(|| serde_json::to_vec(&new).expect("serializes"))
            }
        }
    }

    fn read_end(&mut self, mut end: End) {
        end.reads += 1;
        let path = self.request_path(&end.kind(), &end.name);
        self.call(
            ZkOp::GetData { path },
            Then::Request(RequestStep::End(Box::new(Step::Read { end }))),
        );
    }

    /// Writes `end` on the request read as `data` at `version`, with its chained runs and pause.
    fn write_end(&mut self, end: End, data: &[u8], version: i32) {
        let Some(new) = self.ended_data(&end, data) else {
            // Ended already (a retried write that had been applied) or unreadable.
            return self.answer(end.req, Ok(Answered::Done));
        };
        let write = ZkOp::SetData {
            path: self.request_path(&end.kind(), &end.name),
            data: new,
            version: Some(version),
        };
        self.call(
            Node::with_chain(write, &end.chain),
            Then::Request(RequestStep::End(Box::new(Step::Write { end }))),
        );
    }

    pub(super) fn on_end_step(&mut self, step: Step, result: Result<ZkOk, ZkFail>) {
        match step {
            Step::Read { end } => self.on_end_read(end, result),
            Step::Write { end } => self.on_end_write(end, result),
        }
    }

    fn on_end_read(&mut self, end: End, result: Result<ZkOk, ZkFail>) {
        match result {
            Ok(ZkOk::Data(data, stat)) => self.write_end(end, &data, stat.version),
            // Deleted meanwhile (`--wait` gave up, or collected): the history has the run.
            Err(ZkFail::NoNode) => self.answer(end.req, Ok(Answered::Done)),
            _ if end.reads < RESOLVE_READS && self.life.session.is_some() => self.read_end(end),
            other => {
                let message = match other {
                    Err(error) => error.to_string(),
                    Ok(_) => "unexpected answer".into(),
                };
                let context = format!("recording the end of the {} {}", end.what(), end.name);
                self.answer(end.req, Err(CoordError::ZooKeeper { context, message }))
            }
        }
    }

    fn on_end_write(&mut self, mut end: End, result: Result<ZkOk, ZkFail>) {
        match result {
            Ok(_) => {
                self.report(Level::Debug, format!("{} ended", end.what()))
                    .field("fire_id", &end.name);
                self.report_end_pause(&end);
                self.answer(end.req, Ok(Answered::Done));
            }
            Err(ZkFail::NoNode) => self.answer(end.req, Ok(Answered::Done)),
            Err(ZkFail::Multi { index: 0, error }) if *error == ZkFail::NoNode => {
                self.answer(end.req, Ok(Answered::Done))
            }
            Err(ZkFail::Multi { index, error })
                if index >= 1
                    && end
                        .chain
                        .get(index - 1)
                        .is_some_and(|op| self.pause_retry(op, &error).is_some()) =>
            {
                // A mark found there is checked to be there still with the end; a mark gone
                // since (a resume landed) is created again with it. Read, then write again.
                let stored = self
                    .pause_retry(&end.chain[index - 1], &error)
                    .expect("a pause op");
                let create = end.pause_create.clone().expect("a failed run's");
                self.replace_pause_op(&mut end.chain, &create, stored);
                self.read_end(end)
            }
            Err(ZkFail::Multi { index: 1.., error }) if *error == ZkFail::NodeExists => {
                // The chained runs were requested by an earlier write whose answer was lost.
                end.chain.clear();
                self.read_end(end)
            }
            // Changed meanwhile, or the outcome is unknown: read it and decide again.
            _ => self.read_end(end),
        }
    }

    /// Reports the pause a requested run's stored end carried: made by the end's write, or
    /// found there (the create then a check in `chain`).
    fn report_end_pause(&mut self, end: &End) {
        let stored = self.pause_stored_by(&end.chain);
        self.report_pause(end.pause.as_ref(), stored);
    }

    /// The creates of the chained runs' triggers that `task`'s run that ended with `result`
    /// requests, to go into the multi-op that stores the run's end (empty unless it succeeded
    /// and tasks run after it).
    pub(super) fn chain_creates(&self, task: &str, result: &RunResult) -> Vec<ZkOp> {
        record::chained_requests(task, result, &format!("zkcron@{}", self.cfg.id))
            .into_iter()
            .map(|(name, record)| {
                let data = serde_json::to_vec(&record).expect("serializes");
                self.put_record(self.paths.trigger(&name), data, None)
            })
            .collect()
    }

    /// A multi-op of `op` and the chained runs' creates (`op` alone when there are none).
    pub(super) fn with_chain(op: ZkOp, creates: &[ZkOp]) -> ZkOp {
        if creates.is_empty() {
            return op;
        }
        let mut ops = vec![op];
        ops.extend(creates.iter().cloned());
        ZkOp::Multi(ops)
    }
}
