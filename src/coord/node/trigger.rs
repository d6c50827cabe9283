//! Manual and chained runs (`zkcron trigger`, `after`): the trigger znodes under
//! `control/triggers`, and the rule of their claim.
//!
//! Every node watches `control/triggers` (a persistent recursive watch added at setup; the
//! directory is created there and again if deleted) and lists it at setup and after each
//! reconnect, keeping each trigger's record, version and mtime. The pending triggers of the
//! tasks this node leads go into [`Leadership::triggers`](crate::coord::Leadership::triggers).
//!
//! A claim (`request_claim.rs`, the flow every request kind shares) sets the trigger to running
//! on this node at the version read, if [`record::admit_manual`] admits it (pending, leading);
//! the trigger running on this node with the `claimed_at` this node sent is its own claim. The
//! end (`request_end.rs`) sets it to ended with the run's history entry. Ended triggers are
//! deleted after [`record::TRIGGER_KEEP_ENDED`]; one left running by a node that left is ended
//! by the task's lease holder.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::io::{Level, Stat, WatchKind, ZkFail, ZkOk, ZkOp};
use super::request_dir::{RequestDir, WatchedPath, watched_path};
use super::{Node, RequestStep, Then};
use crate::coord::Trigger;
use crate::coord::record;
use crate::coord::records::{Paths, TriggerRecord, TriggerState};

/// How often ended triggers are looked for to delete.
pub(super) const GC_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// The triggers directory, for the code the request directories share.
const TRIGGERS: RequestDir<Known> = RequestDir {
    known: |node: &mut Node| &mut node.requests.triggers,
    read: Node::read_trigger,
    parse: |name, data, stat| {
        Known::read(data, stat).filter(|k| record::trigger_task(name) == Some(&*k.record.task))
    },
    version: |known| known.version,
    path: Paths::trigger,
    noun: "a manual run",
    made_by: "`zkcron trigger TASK` creates them",
};

/// A trigger as this node last read it.
#[derive(Debug, Clone)]
pub(crate) struct Known {
    pub(crate) record: TriggerRecord,
    pub(super) version: i32,
    /// Server time of its last change (for an ended one: when it ended).
    pub(super) mtime_ms: i64,
}

impl Known {
    /// The trigger read as `data` at `stat`, if it is one.
    pub(super) fn read(data: &[u8], stat: Stat) -> Option<Known> {
        let record = serde_json::from_slice(data).ok()?;
        Some(Known {
            record,
            version: stat.version,
            mtime_ms: stat.mtime_ms,
        })
    }
}

/// Where a trigger call is.
#[derive(Debug)]
pub(crate) enum Step {
    List,
    Read { name: String },
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
                Ok(ZkOk::Data(data, stat)) => self.learn_request(&TRIGGERS, name, &data, stat),
                Err(ZkFail::NoNode) => self.forget_request(&TRIGGERS, &name),
                _ => {}
            },
            Step::Recreate => {
                if let Ok(ZkOk::Created(_)) | Err(ZkFail::NodeExists) = result {
                    self.list_triggers();
                }
            }
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

    /// A session ended with a trigger call in flight: its request is answered.
    pub(super) fn abort_trigger(&mut self, step: Step) {
        match step {
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

/// A call's failure (or unexpected answer), for a report.
pub(super) fn describe(result: &Result<ZkOk, ZkFail>) -> String {
    match result {
        Ok(_) => "unexpected answer".into(),
        Err(error) => error.to_string(),
    }
}

/// The continuation of a trigger call.
fn then(step: Step) -> Then {
    Then::Request(RequestStep::Trigger(step))
}
