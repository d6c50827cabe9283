//! A pooled task's runs lost with their node (`on_node_loss`), per unit: the orphan check of
//! each held unit is a task's (`claim`: the record names a run of a session that is gone,
//! with no result and no live run znode), asked as a sub-request whose answer is gathered
//! here rather than sent to the daemon; the daemon is told the newest lost tick. Its rerun is
//! a pooled claim over the held units whose run of that tick was lost, each fenced as a claim
//! and its record's `reruns` counted up, so each lost (tick, item) runs again at most once.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::Node;
use super::io::{Answer, Answered, ReqId};
use crate::coord::record::Verdict;
use crate::coord::records::FireRecord;
use crate::coord::{ClaimOutcome, CoordError};

/// The first id of the node's own sub-requests: far above any driver's request numbers.
const FIRST_SUB_REQ: ReqId = 1 << 62;

/// An orphan check of a pooled task in flight: its units' checks not answered yet, and the
/// lost ticks found.
#[derive(Debug)]
pub(crate) struct PoolOrphans {
    task: String,
    outstanding: usize,
    lost: BTreeMap<String, DateTime<Utc>>,
    failed: Option<CoordError>,
}

/// The sub-requests of the orphan checks in flight, and what the checks found.
#[derive(Debug, Default)]
pub(crate) struct OrphanChecks {
    /// Each sub-request's check and unit.
    subs: BTreeMap<ReqId, (ReqId, String)>,
    checks: BTreeMap<ReqId, PoolOrphans>,
    next_sub: ReqId,
    /// The units whose run was found lost, with its tick, by pooled task, until rerun.
    pub(super) lost: BTreeMap<String, BTreeMap<String, DateTime<Utc>>>,
}

impl Node {
    /// The newest tick of the pooled `task` whose run on one of the held units was lost.
    pub(super) fn pool_orphaned_tick(&mut self, req: ReqId, task: String) {
        if self.life.session.is_none() {
            let error = CoordError::NotConnected {
                context: "checking for a lost run",
            };
            return self.answer(req, Err(error));
        }
        let units = self.held_units(&task);
        if units.is_empty() {
            return self.answer(req, Ok(Answered::Tick(None)));
        }
        let checks = &mut self.pool.orphans;
        checks.checks.insert(
            req,
            PoolOrphans {
                task,
                outstanding: units.len(),
                lost: BTreeMap::new(),
                failed: None,
            },
        );
        for unit in units {
            let sub = FIRST_SUB_REQ + self.pool.orphans.next_sub;
            self.pool.orphans.next_sub += 1;
            self.pool.orphans.subs.insert(sub, (req, unit.clone()));
            self.orphaned_tick(sub, unit);
        }
    }

    /// Takes the answer to `req` if it is a sub-request of an orphan check (true), and
    /// answers the check once all its units are.
    pub(super) fn pool_sub_answer(&mut self, req: ReqId, answer: &Answer) -> bool {
        let Some((check, unit)) = self.pool.orphans.subs.remove(&req) else {
            return false;
        };
        let Some(orphans) = self.pool.orphans.checks.get_mut(&check) else {
            return true;
        };
        orphans.outstanding -= 1;
        match answer {
            Ok(Answered::Tick(Some(tick))) => {
                orphans.lost.insert(unit, *tick);
            }
            Ok(_) => {}
            Err(error) => {
                orphans.failed.get_or_insert(CoordError::ZooKeeper {
                    context: "checking for a lost run".into(),
                    message: error.to_string(),
                });
            }
        }
        if orphans.outstanding == 0 {
            let orphans = self.pool.orphans.checks.remove(&check).expect("present");
            let answer = match orphans.failed {
                Some(error) => Err(error),
                None => Ok(Answered::Tick(orphans.lost.values().max().copied())),
            };
            self.pool.orphans.lost.insert(orphans.task, orphans.lost);
            self.answer(check, answer);
        }
        true
    }

    /// Whether the held `unit` of `task`, whose record is `record`, may rerun `tick`: its
    /// check found that tick's run lost, and the record (read since) still names it, claimed
    /// to run by a session that is gone.
    pub(super) fn admit_pool_rerun(
        &self,
        task: &str,
        unit: &str,
        record: &FireRecord,
        tick: DateTime<Utc>,
    ) -> Verdict {
        let lost = self
            .pool
            .orphans
            .lost
            .get(task)
            .and_then(|lost| lost.get(unit))
            == Some(&tick);
        if lost && record.tick == Some(tick) && record.run && !self.session_alive(&record.session) {
            Verdict::Admit
        } else {
            Verdict::Refuse(ClaimOutcome::AlreadyClaimed {
                record: record.tick.unwrap_or(tick),
            })
        }
    }
}
