//! Manual runs (`zkcron trigger`): the trigger znodes under `control/triggers`, their claim and
//! their end.
//!
//! Every node watches `control/triggers` (a persistent recursive watch added at setup; the
//! directory is created there and again if deleted) and lists it at setup and after each
//! reconnect, keeping each trigger's record, version and mtime. The pending triggers of the
//! tasks this node leads go into [`Leadership::triggers`](crate::coord::Leadership::triggers).
//!
//! A claim is one multi-op, fenced like a tick's: `check(leases/<task>, 0)` +
//! `check(tasks/<task>/epoch, the version this node's take set)` + `set_data(trigger, running,
//! the version read)`. The rule (pending, leading) is [`record::admit_manual`]. A claim whose
//! answer is lost is resolved by `sync` + re-read: the trigger running on this node with this
//! node's `claimed_at` is this claim. The end sets the trigger to ended with the run's
//! [`HistoryEntry`] at the version read (re-read on a conflict), after the history append.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::io::{Answered, Level, ReqId, Stat, WatchKind, ZkFail, ZkOk, ZkOp};
use super::request_claim::ClaimReply;
use super::request_dir::{RequestDir, WatchedPath, watched_path};
use super::{Node, RequestStep, Then};
use crate::coord::record::{self, Verdict};
use crate::coord::records::{TriggerRecord, TriggerState};
use crate::coord::{ClaimOutcome, CoordError, Trigger};

/// How often ended triggers are looked for to delete.
pub(super) const GC_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// How often a read that resolves a claim or an end is tried before giving up.
const RESOLVE_READS: u8 = 10;

/// The triggers directory, for the code the request directories share.
const TRIGGERS: RequestDir<Known> = RequestDir {
    known: |node: &mut Node| &mut node.requests.triggers,
    read: Node::read_trigger,
};

/// A trigger as this node last read it.
#[derive(Debug, Clone)]
pub(crate) struct Known {
    pub(crate) record: TriggerRecord,
    pub(super) version: i32,
    /// Server time of its last change (for an ended one: when it ended).
    mtime_ms: i64,
}

/// Where a trigger call is.
#[derive(Debug)]
pub(crate) enum Step {
    List,
    Read {
        name: String,
    },
    Claim {
        req: ReqId,
        name: String,
        new: TriggerRecord,
        conflicts: u8,
    },
    /// Resolving a claim whose answer was lost (or a conflict): re-reading the trigger.
    ClaimRead {
        req: ReqId,
        name: String,
        new: TriggerRecord,
        conflicts: u8,
        reads: u8,
    },
    Recreate,
}

impl Node {
    /// Setup's calls for triggers: the directory and the watch (`control/` above it is
    /// created by the control setup, which comes first).
    pub(super) fn trigger_setup_steps(&self) -> Vec<ZkOp> {
        self.request_dir_setup_steps(self.paths.triggers())
    }

    /// Lists the triggers and reads each (setup, reconnects, the directory recreated).
    pub(super) fn list_triggers(&mut self) {
        if self.life.session.is_none() {
            return;
        }
        let path = self.paths.triggers();
        self.call(ZkOp::GetChildren { path }, then(Step::List));
    }

    fn read_trigger(&mut self, name: String) {
        let path = self.paths.trigger(&name);
        self.call(ZkOp::GetData { path }, then(Step::Read { name }));
    }

    /// A watch event under `control/triggers`; false if `path` is not there.
    pub(super) fn on_trigger_watch(&mut self, path: &str, kind: WatchKind) -> bool {
        let dir = self.paths.triggers();
        match watched_path(&dir, path) {
            WatchedPath::Dir if kind == WatchKind::Deleted => {
                self.report(
                    Level::Warn,
                    format!("{dir} was deleted; recreating it (pending manual runs went with it)"),
                );
                self.forget_requests(&TRIGGERS);
                // `control/` may have gone with it.
                for path in [self.paths.control(), dir.clone()] {
                    self.call(self.create_dir(path), then(Step::Recreate));
                }
            }
            WatchedPath::Dir => {}
            WatchedPath::Request(name) => self.on_request_watch(&TRIGGERS, name, kind),
            WatchedPath::Elsewhere => return false,
        }
        true
    }

    pub(super) fn on_trigger_step(&mut self, step: Step, result: Result<ZkOk, ZkFail>) {
        match step {
            Step::List => match result {
                Ok(ZkOk::Children(names)) => self.on_request_list(&TRIGGERS, names),
                Err(ZkFail::NoNode) => self.forget_requests(&TRIGGERS),
                other => {
                    // A lost connection lists again on reconnecting; anything else is worth
                    // a warning (new triggers still arrive through the watch).
                    let level = match &other {
                        Err(error) if error.outcome_unknown() => Level::Debug,
                        Err(ZkFail::SessionExpired) => Level::Debug,
                        _ => Level::Warn,
                    };
                    self.report(
                        level,
                        format!(
                            "listing manual runs failed ({}); they are read as they change",
                            describe(&other)
                        ),
                    );
                }
            },
            Step::Read { name } => match result {
                Ok(ZkOk::Data(data, stat)) => self.learn_trigger(name, &data, stat),
                Err(ZkFail::NoNode) => self.forget_request(&TRIGGERS, &name),
                _ => {}
            },
            Step::Claim {
                req,
                name,
                new,
                conflicts,
            } => self.on_manual_claim(req, name, new, conflicts, result),
            Step::ClaimRead {
                req,
                name,
                new,
                conflicts,
                reads,
            } => self.on_manual_claim_read(req, name, new, conflicts, reads, result),
            Step::Recreate => {
                if let Ok(ZkOk::Created(_)) | Err(ZkFail::NodeExists) = result {
                    self.list_triggers();
                }
            }
        }
    }

    /// Keeps a trigger's record; a znode that is not a trigger of its own name is reported once
    /// and ignored.
    fn learn_trigger(&mut self, name: String, data: &[u8], stat: Stat) {
        let record = match serde_json::from_slice::<TriggerRecord>(data) {
            Ok(record) if record::trigger_task(&name) == Some(record.task.as_str()) => record,
            Ok(_) | Err(_) => {
                let path = self.paths.trigger(&name);
                let cli = self.zk_cli();
                self.report_once(
                    format!("foreign trigger {path} {}", stat.mzxid),
                    Level::Warn,
                    format!(
                        "ignoring {path}: not a manual run zkcron can read (`zkcron trigger TASK` creates them); remove it: {cli} delete {path}"
                    ),
                );
                self.forget_request(&TRIGGERS, &name);
                return;
            }
        };
        let newer = self
            .requests
            .triggers
            .get(&name)
            .is_none_or(|known| known.version <= stat.version);
        if newer {
            self.requests.triggers.insert(
                name,
                Known {
                    record,
                    version: stat.version,
                    mtime_ms: stat.mtime_ms,
                },
            );
            self.publish();
        }
    }

    /// The pending triggers of the tasks in `tasks`, by task, oldest first.
    pub(super) fn led_triggers(
        &self,
        tasks: &BTreeSet<Arc<str>>,
    ) -> BTreeMap<String, Vec<Trigger>> {
        let mut led: BTreeMap<String, Vec<Trigger>> = BTreeMap::new();
        for (name, known) in &self.requests.triggers {
            if known.record.state == TriggerState::Pending
                && tasks.contains(known.record.task.as_str())
            {
                led.entry(known.record.task.clone())
                    .or_default()
                    .push(Trigger {
                        fire_id: name.clone(),
                        requested_at: known.record.requested_at,
                    });
            }
        }
        led
    }

    // ---- the claim ----

    pub(super) fn claim_manual(&mut self, req: ReqId, task: String, trigger: Trigger) {
        let name = trigger.fire_id;
        let leads = self.held_version(&task).is_some();
        let known = self
            .requests
            .triggers
            .get(&name)
            .filter(|k| k.record.task == task)
            .cloned();
        let pending = known
            .as_ref()
            .is_some_and(|k| k.record.state == TriggerState::Pending);
        // Asked again after an error: the trigger already runs here by this node's claim.
        if let Some(known) = &known
            && leads
            && self.is_own_claim(&name, &known.record)
        {
            self.requests.manual_sent.remove(&name);
            return self.answer(req, Ok(Answered::Claim(ClaimOutcome::Claimed)));
        }
        if let Verdict::Refuse(outcome) = record::admit_manual(leads, pending, trigger.requested_at)
        {
            return self.answer(req, Ok(Answered::Claim(outcome)));
        }
        let known = known.expect("pending");
        let new = TriggerRecord {
            state: TriggerState::Running,
            node: Some(self.cfg.id.clone()),
            claimed_at: Some(self.io.now.wall),
            ..known.record
        };
        self.send_manual_claim(req, name, new, known.version, 0);
    }

    fn send_manual_claim(
        &mut self,
        req: ReqId,
        name: String,
        new: TriggerRecord,
        version: i32,
        conflicts: u8,
    ) {
        let task = new.task.clone();
        let path = self.paths.trigger(&name);
        let data = serde_json::to_vec(&new).expect("serializes");
        let claimed_at = new.claimed_at.unwrap_or_default();
        let then = then(Step::Claim {
            req,
            name: name.clone(),
            new,
            conflicts,
        });
        if !self.send_request_claim(&task, path, data, version, then) {
            return self.answer(req, Ok(Answered::Claim(ClaimOutcome::NotLeader)));
        }
        self.requests.manual_sent.insert(name, claimed_at);
    }

    /// Whether `record` is this node's claim of trigger `name` (sent by this node, which may
    /// not have had the answer).
    fn is_own_claim(&self, name: &str, record: &TriggerRecord) -> bool {
        record.state == TriggerState::Running
            && record.node.as_deref() == Some(self.cfg.id.as_str())
            && record.claimed_at.is_some()
            && self.requests.manual_sent.get(name) == record.claimed_at.as_ref()
    }

    fn on_manual_claim(
        &mut self,
        req: ReqId,
        name: String,
        new: TriggerRecord,
        conflicts: u8,
        result: Result<ZkOk, ZkFail>,
    ) {
        match ClaimReply::of(result) {
            ClaimReply::Applied(stat) => {
                if let Some(stat) = stat {
                    self.requests.triggers.insert(
                        name.clone(),
                        Known {
                            record: new,
                            version: stat.version,
                            mtime_ms: stat.mtime_ms,
                        },
                    );
                }
                self.requests.manual_sent.remove(&name);
                self.publish();
                self.answer(req, Ok(Answered::Claim(ClaimOutcome::Claimed)));
            }
            ClaimReply::NotLeader => {
                self.requests.manual_sent.remove(&name);
                let unit = self.unit_of(&new.task).into_owned();
                self.check_refused_lease(unit);
                self.answer(req, Ok(Answered::Claim(ClaimOutcome::NotLeader)));
            }
            ClaimReply::SessionExpired => {
                self.requests.manual_sent.remove(&name);
                self.answer(
                    req,
                    Err(CoordError::SessionExpired {
                        context: "claiming a manual run",
                    }),
                );
            }
            ClaimReply::Reread => self.resolve_manual_claim(req, name, new, conflicts + 1, 0),
        }
    }

    fn resolve_manual_claim(
        &mut self,
        req: ReqId,
        name: String,
        new: TriggerRecord,
        conflicts: u8,
        reads: u8,
    ) {
        let path = self.paths.trigger(&name);
        let then = then(Step::ClaimRead {
            req,
            name,
            new,
            conflicts,
            reads: reads + 1,
        });
        if !self.reread_request(path, then) {
            self.answer(
                req,
                Err(CoordError::SessionEnded {
                    context: "claiming a manual run",
                }),
            );
        }
    }

    fn on_manual_claim_read(
        &mut self,
        req: ReqId,
        name: String,
        new: TriggerRecord,
        conflicts: u8,
        reads: u8,
        result: Result<ZkOk, ZkFail>,
    ) {
        let (record, stat) = match result {
            Ok(ZkOk::Data(data, stat)) => match serde_json::from_slice::<TriggerRecord>(&data) {
                Ok(record) => (record, stat),
                Err(_) => {
                    self.requests.manual_sent.remove(&name);
                    return self.answer(req, Ok(Answered::Claim(ClaimOutcome::NotLeader)));
                }
            },
            Err(ZkFail::NoNode) => {
                // Deleted (`--wait` gave up, or by hand): nothing to run.
                self.requests.manual_sent.remove(&name);
                self.requests.triggers.remove(&name);
                let record = new.requested_at;
                return self.answer(
                    req,
                    Ok(Answered::Claim(ClaimOutcome::AlreadyClaimed { record })),
                );
            }
            other if reads < RESOLVE_READS => {
                self.report(
                    Level::Debug,
                    format!(
                        "re-reading a manual run failed ({}); retrying",
                        describe(&other)
                    ),
                )
                .field("fire_id", &name);
                return self.resolve_manual_claim(req, name, new, conflicts, reads);
            }
            other => {
                return self.answer(
                    req,
                    Err(CoordError::Unknown {
                        context: format!("claiming the manual run {name}"),
                        why: describe(&other),
                    }),
                );
            }
        };
        self.decide_manual_claim(req, name, new, conflicts, record, stat);
    }

    /// The trigger as re-read after a manual claim whose outcome was unknown: the claim was
    /// applied, is sent again at the version read, or is refused.
    fn decide_manual_claim(
        &mut self,
        req: ReqId,
        name: String,
        new: TriggerRecord,
        conflicts: u8,
        record: TriggerRecord,
        stat: Stat,
    ) {
        self.requests.triggers.insert(
            name.clone(),
            Known {
                record: record.clone(),
                version: stat.version,
                mtime_ms: stat.mtime_ms,
            },
        );
        self.publish();
        if self.is_own_claim(&name, &record) {
            self.report(Level::Info, "the manual run's claim had been applied")
                .field("fire_id", &name);
            self.requests.manual_sent.remove(&name);
            return self.answer(req, Ok(Answered::Claim(ClaimOutcome::Claimed)));
        }
        if record.state == TriggerState::Pending && conflicts < 3 {
            // Changed while pending (rewritten by hand?): claim the version read.
            let new = TriggerRecord {
                state: TriggerState::Running,
                node: new.node,
                claimed_at: new.claimed_at,
                ..record
            };
            return self.send_manual_claim(req, name, new, stat.version, conflicts);
        }
        self.requests.manual_sent.remove(&name);
        let leads = self.held_version(&record.task).is_some();
        let outcome = match record::admit_manual(
            leads,
            record.state == TriggerState::Pending,
            record.requested_at,
        ) {
            Verdict::Refuse(outcome) => Ok(outcome),
            Verdict::Admit => Err(CoordError::Unknown {
                context: format!("claiming the manual run {name}"),
                why: "the trigger kept changing".into(),
            }),
        };
        self.answer(req, outcome.map(Answered::Claim));
    }

    /// A session ended with a trigger call in flight: its request is answered.
    pub(super) fn abort_trigger(&mut self, step: Step) {
        match step {
            Step::Claim { req, .. } | Step::ClaimRead { req, .. } => self.answer(
                req,
                Err(CoordError::SessionEnded {
                    context: "claiming a manual run",
                }),
            ),
            Step::List | Step::Read { .. } | Step::Recreate => {}
        }
    }

    // ---- collection ----

    /// The periodic collection of ended triggers (`Timer::Triggers`).
    pub(super) fn on_triggers_timer(&mut self) {
        self.collect_triggers();
        self.sweep_backfills(true);
        self.at(self.io.now.mono + GC_EVERY, super::Timer::Triggers);
    }

    /// Deletes the triggers that ended [`record::TRIGGER_KEEP_ENDED`] ago or more (any node
    /// may; a conflict or a trigger gone already is fine).
    pub(super) fn collect_triggers(&mut self) {
        if !self.ready() {
            return;
        }
        let now = self.io.now.wall;
        let doomed: Vec<(String, i32)> = self
            .requests
            .triggers
            .iter()
            .filter(|(_, known)| {
                known.record.state == TriggerState::Ended
                    && DateTime::<Utc>::from_timestamp_millis(known.mtime_ms)
                        .is_some_and(|ended| record::trigger_expired(ended, now))
            })
            .map(|(name, known)| (name.clone(), known.version))
            .collect();
        for (name, version) in doomed {
            let path = self.paths.trigger(&name);
            self.call(
                ZkOp::Delete {
                    path,
                    version: Some(version),
                },
                Then::Ignore,
            );
        }
        // A trigger left running by a node that left the cluster would stay forever: the
        // task's lease holder ends it (never runs it again) once it has not changed for
        // `TRIGGER_KEEP_ENDED`; it is deleted as ended after that.
        let lost: Vec<(String, TriggerRecord, i32)> = self
            .requests
            .triggers
            .iter()
            .filter(|(_, known)| {
                let record = &known.record;
                record.state == TriggerState::Running
                    && self.tasks.held(&record.task).is_some()
                    && record.node.as_ref().is_some_and(|node| {
                        *node != self.cfg.id && !self.view.member_sessions.contains_key(node)
                    })
                    && DateTime::<Utc>::from_timestamp_millis(known.mtime_ms)
                        .is_some_and(|changed| record::trigger_expired(changed, now))
            })
            .map(|(name, known)| (name.clone(), known.record.clone(), known.version))
            .collect();
        for (name, record, version) in lost {
            let node = record.node.clone().unwrap_or_default();
            self.report(
                Level::Warn,
                format!("manual run {name}: node {node} left the cluster while running it; ending it (it is not run again)"),
            )
            .field("task", &record.task);
            let ended = TriggerRecord {
                state: TriggerState::Ended,
                reason: Some(format!("node {node} was lost while running it")),
                ..record
            };
            self.call(
                ZkOp::SetData {
                    path: self.paths.trigger(&name),
                    data: serde_json::to_vec(&ended).expect("serializes"),
                    version: Some(version),
                },
                Then::Ignore,
            );
        }
    }
}

fn describe(result: &Result<ZkOk, ZkFail>) -> String {
    match result {
        Ok(_) => "unexpected answer".into(),
        Err(error) => error.to_string(),
    }
}

/// The continuation of a trigger call.
fn then(step: Step) -> Then {
    Then::Request(RequestStep::Trigger(step))
}
