//! Backfills (`zkcron backfill`): the request znodes under `control/backfills`, the claim of
//! each tick and its end.
//!
//! Every node watches `control/backfills` (a persistent recursive watch added at setup; the
//! directory is created there) and lists it at setup and after each reconnect, keeping each
//! request's record and version. The requests of the tasks this node leads that want their
//! next tick go into [`Leadership::backfills`](crate::coord::Leadership::backfills).
//!
//! A tick's claim is one multi-op, fenced like a manual run's: `check(leases/<task>, 0)` +
//! `check(tasks/<task>/epoch, the version this node's take set)` + `set_data(request, done =
//! tick and running, the version read)`; the rule is [`backfill::admit`]. A claim whose answer
//! is lost is resolved by `sync` + re-read: the request running that tick on this node with
//! this claim's `claimed_at` is this claim. The end (after the history append) sets the
//! request at the version read, re-read on a conflict ([`backfill::ended`]). The lease holder
//! of a task ends a tick whose claimer's session is gone as lost ([`backfill::lost`]: failed,
//! not run again), and any node deletes requests ended [`backfill::KEEP_ENDED`] ago.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::io::{Answered, Level, ReqId, Stat, WatchKind, ZkFail, ZkOk, ZkOp};
use super::request_claim::ClaimReply;
use super::request_dir::{RequestDir, WatchedPath, watched_path};
use super::{Node, RequestStep, Then};
use crate::coord::backfill::{self, Backfill, BackfillRecord, Claimer};
use crate::coord::record::Verdict;
use crate::coord::{ClaimOutcome, CoordError, Trigger};

/// How often a read that resolves a claim or an end is tried before giving up.
const RESOLVE_READS: u8 = 10;

/// The backfills directory, for the code the request directories share.
const BACKFILLS: RequestDir<Known> = RequestDir {
    known: |node: &mut Node| &mut node.requests.backfills,
    read: Node::read_backfill,
};

/// A request as this node last read it.
#[derive(Debug, Clone)]
pub(crate) struct Known {
    pub(crate) record: BackfillRecord,
    pub(super) version: i32,
}

/// A claim of a backfill tick on its way.
#[derive(Debug)]
pub(crate) struct ClaimJob {
    req: ReqId,
    name: String,
    tick: DateTime<Utc>,
    claimed_at: DateTime<Utc>,
    conflicts: u8,
    reads: u8,
}

/// Where a backfill call is.
#[derive(Debug)]
pub(crate) enum Step {
    List,
    Read {
        name: String,
    },
    Claim(ClaimJob),
    /// Resolving a claim whose answer was lost (or a conflict): re-reading the request.
    ClaimRead(ClaimJob),
    /// Ending a lost tick, or deleting an ended request: nothing waits for it.
    Sweep {
        name: String,
    },
}

impl Node {
    /// Setup's calls for backfills: the directory and the watch.
    pub(super) fn backfill_setup_steps(&self) -> Vec<ZkOp> {
        self.request_dir_setup_steps(self.paths.backfills())
    }

    /// Lists the requests and reads each (setup, reconnects).
    pub(super) fn list_backfills(&mut self) {
        if self.life.session.is_none() {
            return;
        }
        let path = self.paths.backfills();
        self.call(ZkOp::GetChildren { path }, then(Step::List));
    }

    fn read_backfill(&mut self, name: String) {
        let path = self.paths.backfill(&name);
        self.call(ZkOp::GetData { path }, then(Step::Read { name }));
    }

    /// A watch event under `control/backfills`; false if `path` is not there.
    pub(super) fn on_backfill_watch(&mut self, path: &str, kind: WatchKind) -> bool {
        match watched_path(&self.paths.backfills(), path) {
            WatchedPath::Dir if kind == WatchKind::Deleted => self.forget_requests(&BACKFILLS),
            WatchedPath::Dir => {}
            WatchedPath::Request(name) => self.on_request_watch(&BACKFILLS, name, kind),
            WatchedPath::Elsewhere => return false,
        }
        true
    }

    pub(super) fn on_backfill_step(&mut self, step: Step, result: Result<ZkOk, ZkFail>) {
        match step {
            Step::List => match result {
                Ok(ZkOk::Children(names)) => self.on_request_list(&BACKFILLS, names),
                Err(ZkFail::NoNode) => self.forget_requests(&BACKFILLS),
                _ => {}
            },
            Step::Read { name } => match result {
                Ok(ZkOk::Data(data, stat)) => self.learn_backfill(name, &data, stat),
                Err(ZkFail::NoNode) => self.forget_request(&BACKFILLS, &name),
                _ => {}
            },
            Step::Claim(job) => self.on_backfill_claim(job, result),
            Step::ClaimRead(job) => self.on_backfill_claim_read(job, result),
            Step::Sweep { name } => {
                self.requests.backfill_sweeping.remove(&name);
            }
        }
    }

    /// Keeps a request's record; a znode that is not one is reported once and ignored.
    fn learn_backfill(&mut self, name: String, data: &[u8], stat: Stat) {
        let record = match serde_json::from_slice::<BackfillRecord>(data) {
            Ok(record) if backfill::request_task(&name) == Some(record.task.as_str()) => record,
            Ok(_) | Err(_) => {
                let path = self.paths.backfill(&name);
                let cli = self.zk_cli();
                self.report_once(
                    format!("foreign backfill {path} {}", stat.mzxid),
                    Level::Warn,
                    format!(
                        "ignoring {path}: not a backfill zkcron can read (`zkcron backfill` creates them); remove it: {cli} delete {path}"
                    ),
                );
                self.forget_request(&BACKFILLS, &name);
                return;
            }
        };
        let newer = self
            .requests
            .backfills
            .get(&name)
            .is_none_or(|known| known.version <= stat.version);
        if newer {
            let version = stat.version;
            self.requests
                .backfills
                .insert(name, Known { record, version });
            self.publish();
        }
    }

    /// The requests of the tasks in `tasks` that want their next tick, by task, oldest first.
    pub(super) fn led_backfills(
        &self,
        tasks: &BTreeSet<Arc<str>>,
    ) -> BTreeMap<String, Vec<Backfill>> {
        let mut led: BTreeMap<String, Vec<Backfill>> = BTreeMap::new();
        for (name, known) in &self.requests.backfills {
            if known.record.wants_tick() && tasks.contains(known.record.task.as_str()) {
                led.entry(known.record.task.clone())
                    .or_default()
                    .push(Backfill::of(name, &known.record));
            }
        }
        led
    }

    /// Whether the claimer of `record`'s running tick is gone (its session, else its node).
    fn running_lost(&self, record: &BackfillRecord) -> bool {
        let Some(run) = &record.running else {
            return false;
        };
        match run
            .session
            .as_deref()
            .map(|hex| i64::from_str_radix(hex, 16))
        {
            Some(Ok(id)) => {
                Some(id) != self.life.session.as_ref().map(|s| s.id)
                    && !self.view.member_sessions.values().any(|&s| s == id)
            }
            _ => run.node != self.cfg.id && !self.view.member_sessions.contains_key(&run.node),
        }
    }

    // ---- the claim ----

    pub(super) fn claim_backfill(&mut self, req: ReqId, task: String, trigger: Trigger) {
        let Some((name, tick)) = backfill::of_fire_id(&trigger.fire_id) else {
            let record = trigger.requested_at;
            return self.answer(
                req,
                Ok(Answered::Claim(ClaimOutcome::AlreadyClaimed { record })),
            );
        };
        let job = ClaimJob {
            req,
            name: name.to_string(),
            tick,
            claimed_at: self.io.now.wall,
            conflicts: 0,
            reads: 0,
        };
        let known = self
            .requests
            .backfills
            .get(&job.name)
            .filter(|k| k.record.task == task)
            .cloned();
        self.decide_backfill_claim(job, known);
    }

    /// Claims `job`'s tick of the request as `known` says it is (`None`: gone), or answers.
    fn decide_backfill_claim(&mut self, job: ClaimJob, known: Option<Known>) {
        let task = backfill::request_task(&job.name)
            .unwrap_or_default()
            .to_string();
        let leads = self.held_version(&task).is_some();
        if let Some(known) = &known
            && self.is_own_backfill_claim(&job, &known.record)
        {
            return self.answer(job.req, Ok(Answered::Claim(ClaimOutcome::Claimed)));
        }
        let record = known.as_ref().map(|k| &k.record);
        if let Verdict::Refuse(outcome) = backfill::admit(leads, record, job.tick, false) {
            return self.answer(job.req, Ok(Answered::Claim(outcome)));
        }
        let known = known.expect("admitted");
        let session = self.session_hex();
        let by = Claimer {
            node: &self.cfg.id,
            session: Some(&session),
        };
        let mut new = backfill::claimed(&known.record, &job.name, job.tick, by, job.claimed_at);
        if self.cfg.bugs.backfill_claim_keeps_progress {
            (new.done, new.claimed) = (known.record.done, known.record.claimed);
        }
        let path = self.paths.backfill(&job.name);
        let data = serde_json::to_vec(&new).expect("serializes");
        let req = job.req;
        let then = then(Step::Claim(job));
        if !self.send_request_claim(&task, path, data, known.version, then) {
            self.answer(req, Ok(Answered::Claim(ClaimOutcome::NotLeader)));
        }
    }

    /// Whether `record` runs `job`'s tick by this very claim (its answer may have been lost).
    fn is_own_backfill_claim(&self, job: &ClaimJob, record: &BackfillRecord) -> bool {
        record.running.as_ref().is_some_and(|run| {
            run.tick == job.tick && run.node == self.cfg.id && run.claimed_at == job.claimed_at
        })
    }

    fn on_backfill_claim(&mut self, job: ClaimJob, result: Result<ZkOk, ZkFail>) {
        match ClaimReply::of(result) {
            ClaimReply::Applied(_) => {
                // The watch brings the new record; until then the listing must not offer the
                // request again: re-read it now.
                self.read_backfill(job.name.clone());
                if let Some(known) = self.requests.backfills.get_mut(&job.name) {
                    known.record.running = Some(backfill::BackfillRun {
                        tick: job.tick,
                        node: self.cfg.id.clone(),
                        session: None,
                        claimed_at: job.claimed_at,
                    });
                }
                self.publish();
                self.answer(job.req, Ok(Answered::Claim(ClaimOutcome::Claimed)));
            }
            ClaimReply::NotLeader => {
                if let Some(known) = self.requests.backfills.get(&job.name) {
                    let unit = self.unit_of(&known.record.task).into_owned();
                    self.check_refused_lease(unit);
                }
                self.answer(job.req, Ok(Answered::Claim(ClaimOutcome::NotLeader)))
            }
            ClaimReply::SessionExpired => self.answer(
                job.req,
                Err(CoordError::SessionExpired {
                    context: "claiming a backfill tick",
                }),
            ),
            ClaimReply::Reread => self.resolve_backfill_claim(job),
        }
    }

    fn resolve_backfill_claim(&mut self, mut job: ClaimJob) {
        job.reads += 1;
        let path = self.paths.backfill(&job.name);
        let req = job.req;
        if !self.reread_request(path, then(Step::ClaimRead(job))) {
            self.answer(
                req,
                Err(CoordError::SessionEnded {
                    context: "claiming a backfill tick",
                }),
            );
        }
    }

    fn on_backfill_claim_read(&mut self, mut job: ClaimJob, result: Result<ZkOk, ZkFail>) {
        let known =
            match result {
                Ok(ZkOk::Data(data, stat)) => serde_json::from_slice::<BackfillRecord>(&data)
                    .ok()
                    .map(|record| Known {
                        record,
                        version: stat.version,
                    }),
                Err(ZkFail::NoNode) => None,
                other if job.reads < RESOLVE_READS => {
                    let _ = other;
                    return self.resolve_backfill_claim(job);
                }
                other => {
                    let why = match other {
                        Err(error) => error.to_string(),
                        Ok(_) => "unexpected answer".into(),
                    };
                    return self.answer(
                        job.req,
                        Err(CoordError::Unknown {
                            context: format!("claiming the backfill tick {}", job.name),
                            why,
                        }),
                    );
                }
            };
        match &known {
            Some(known) => {
                self.requests
                    .backfills
                    .insert(job.name.clone(), known.clone());
            }
            None => {
                self.requests.backfills.remove(&job.name);
            }
        }
        self.publish();
        job.conflicts += 1;
        if job.conflicts > 3
            && !known
                .as_ref()
                .is_some_and(|k| self.is_own_backfill_claim(&job, &k.record))
        {
            return self.answer(
                job.req,
                Err(CoordError::Unknown {
                    context: format!("claiming the backfill tick {}", job.name),
                    why: "the request kept changing".into(),
                }),
            );
        }
        self.decide_backfill_claim(job, known);
    }

    /// A session ended with a backfill call in flight: its request is answered.
    pub(super) fn abort_backfill(&mut self, step: Step) {
        match step {
            Step::Claim(job) | Step::ClaimRead(job) => self.answer(
                job.req,
                Err(CoordError::SessionEnded {
                    context: "claiming a backfill tick",
                }),
            ),
            Step::Sweep { name } => {
                self.requests.backfill_sweeping.remove(&name);
            }
            Step::List | Step::Read { .. } => {}
        }
    }

    // ---- lost ticks and collection ----

    /// Ends, as lost, the running ticks of the requests of tasks this node leads whose
    /// claimer's session is gone; with `collect`, deletes requests ended long enough ago. Only
    /// while firing: during a re-listing the live sessions are not all known.
    pub(super) fn sweep_backfills(&mut self, collect: bool) {
        if !self.firing() || self.requests.backfills.is_empty() {
            return;
        }
        let now = self.io.now.wall;
        let mut writes = Vec::new();
        for (name, known) in &self.requests.backfills {
            if self.requests.backfill_sweeping.contains(name) {
                continue;
            }
            let record = &known.record;
            if self.tasks.held(&record.task).is_some() && self.running_lost(record) {
                writes.push((name.clone(), Some(backfill::lost(record, name, now)), known));
            } else if collect && backfill::expired(record, now) {
                writes.push((name.clone(), None, known));
            }
        }
        let writes: Vec<(String, Option<BackfillRecord>, i32)> = writes
            .into_iter()
            .map(|(name, new, known)| (name, new, known.version))
            .collect();
        for (name, new, version) in writes {
            let path = self.paths.backfill(&name);
            let op = match new {
                Some(new) => {
                    let node = self.requests.backfills[&name]
                        .record
                        .running
                        .as_ref()
                        .map(|r| r.node.clone())
                        .unwrap_or_default();
                    self.report(
                        Level::Warn,
                        format!("backfill {name}: node {node} was lost while running a tick; it counts as failed and is not run again"),
                    )
                    .field("task", &new.task);
                    ZkOp::SetData {
                        path,
                        data: serde_json::to_vec(&new).expect("serializes"),
                        version: Some(version),
                    }
                }
                None => ZkOp::Delete {
                    path,
                    version: Some(version),
                },
            };
            self.requests.backfill_sweeping.insert(name.clone());
            self.call(op, then(Step::Sweep { name }));
        }
    }
}

/// The continuation of a backfill call.
fn then(step: Step) -> Then {
    Then::Request(RequestStep::Backfill(step))
}
