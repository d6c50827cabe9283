//! Runs lost with their node: the orphan check (`on_node_loss = "rerun"` runs the tick again)
//! and the `node_lost` entry a claim records when it moves past a tick claimed to run by a
//! session that is gone with no result stored.

use chrono::{DateTime, Utc};

use super::Node;
use super::TaskStep;
use super::claim::{AfterRead, ClaimJob, ClaimKind};
use super::io::{Answered, ReqId, ZkFail, ZkOk, ZkOp};
use crate::coord::CoordError;
use crate::coord::record::{self, FireView};
use crate::coord::records::FireRecord;
use crate::plan::ledger::{Reason, TickEntry};

impl Node {
    /// A fresh claim that moves past a tick claimed to run by a session that is gone: unless
    /// that run's result was stored, the tick was lost with its node, and the claim records it
    /// (`node_lost`) in the record it overwrites. The result is read first, once (the claim
    /// goes on when it is answered: `None` until then); a claim after a live claimer's costs
    /// nothing.
    pub(super) fn note_lost(
        &mut self,
        mut job: ClaimJob,
        record: &FireRecord,
        version: i32,
    ) -> Option<ClaimJob> {
        let claimer_alive = self.session_alive(&record.session);
        let suspect = job.kind == ClaimKind::Fresh && record.run && !claimer_alive;
        if !suspect {
            return Some(job);
        }
        let Some(result) = job.result else {
            self.read_result_then_claim(job, record.clone(), version);
            return None;
        };
        // A live run of the tick is its claimer's, which is gone: none is left.
        let view = FireView {
            record: record.tick,
            claimed_to_run: record.run,
            result,
            claimer_alive,
            ..FireView::default()
        };
        if let Some(lost) = record::lost_with_its_node(&view, job.tick, job.intent) {
            let lost = TickEntry::one(lost, Reason::NodeLost);
            if !job.ticks.contains(&lost) {
                job.ticks.insert(0, lost);
            }
        }
        Some(job)
    }

    pub(super) fn orphaned_tick(&mut self, req: ReqId, task: String) {
        if self.life.session.is_none() {
            return self.answer(
                req,
                Err(CoordError::NotConnected {
                    context: "checking for a lost run",
                }),
            );
        }
        self.read_record(task, AfterRead::Orphan(req));
    }

    pub(super) fn orphan_after_record(&mut self, req: ReqId, task: String, record: FireRecord) {
        let Some(tick) = record.tick.filter(|_| record.run) else {
            return self.answer(req, Ok(Answered::Tick(None)));
        };
        if self.runs.own_runs.contains(&self.paths.run(&task, tick)) {
            return self.answer(req, Ok(Answered::Tick(None)));
        }
        let path = self.paths.result(&task);
        self.call(
            ZkOp::GetData { path },
            TaskStep::OrphanResult { req, task, record },
        );
    }

    pub(super) fn on_orphan_result(
        &mut self,
        req: ReqId,
        task: String,
        record: FireRecord,
        result: Result<ZkOk, ZkFail>,
    ) {
        match super::runs::decode_result(result) {
            Ok(stored) => {
                let tick = record.tick.unwrap_or_default();
                let path = self.paths.run(&task, tick);
                let result = stored.map(|r| r.tick);
                self.call(
                    ZkOp::Exists { path },
                    TaskStep::OrphanRun {
                        req,
                        record,
                        result,
                    },
                );
            }
            Err(error) => self.answer(req, Err(error)),
        }
    }

    pub(super) fn on_orphan_run(
        &mut self,
        req: ReqId,
        record: FireRecord,
        result: Option<DateTime<Utc>>,
        reply: Result<ZkOk, ZkFail>,
    ) {
        let run_live = match reply {
            // Only a live member's ephemeral, or the claimer's the record names, is a live
            // run; a persistent one is nobody's.
            Ok(ZkOk::Exists(Some(stat))) => {
                self.live_run_owner(stat.ephemeral_owner)
                    || super::runs::names_claimer(&record, stat.ephemeral_owner)
            }
            Ok(_) => false,
            Err(error) => {
                return self.answer(
                    req,
                    Err(CoordError::ZooKeeper {
                        context: "reading the run record".into(),
                        message: error.to_string(),
                    }),
                );
            }
        };
        let view = FireView {
            record: record.tick,
            claimed_to_run: record.run,
            result,
            leads: true,
            run_live,
            claimer_alive: self.session_alive(&record.session),
            queued: record.queued,
            ..FireView::default()
        };
        self.answer(req, Ok(Answered::Tick(record::orphan(&view))));
    }
}
