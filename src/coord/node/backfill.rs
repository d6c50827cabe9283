//! Backfills (`zkcron backfill`): the request znodes under `control/backfills`, the rule of
//! each tick's claim, and the ticks lost with their claimer.
//!
//! Every node watches `control/backfills` (a persistent recursive watch added at setup; the
//! directory is created there) and lists it at setup and after each reconnect, keeping each
//! request's record and version. The requests of the tasks this node leads that want their
//! next tick go into [`Leadership::backfills`](crate::coord::Leadership::backfills).
//!
//! A tick's claim (`request_claim.rs`, the flow every request kind shares) sets the request to
//! `done` = the tick and running it, at the version read, if [`backfill::admit`] admits it;
//! the request running that tick on this node with this claim's `claimed_at` is this claim.
//! The end (`request_end.rs`, after the history append) applies [`backfill::ended`]. The lease holder
//! of a task ends a tick whose claimer's session is gone as lost ([`backfill::lost`]: failed,
//! not run again), and any node deletes requests ended [`backfill::KEEP_ENDED`] ago.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::io::{Level, Stat, WatchKind, ZkFail, ZkOk, ZkOp};
use super::request_dir::{RequestDir, WatchedPath, watched_path};
use super::{Node, RequestStep, Then};
use crate::coord::backfill::{self, Backfill, BackfillRecord};
use crate::coord::records::Paths;

/// The backfills directory, for the code the request directories share.
const BACKFILLS: RequestDir<Known> = RequestDir {
    known: |node: &mut Node| &mut node.requests.backfills,
    read: Node::read_backfill,
    parse: |name, data, stat| {
        Known::read(data, stat).filter(|k| backfill::request_task(name) == Some(&*k.record.task))
    },
    version: |known| known.version,
    path: Paths::backfill,
    noun: "a backfill",
    made_by: "`zkcron backfill` creates them",
};

/// A request as this node last read it.
#[derive(Debug, Clone)]
pub(crate) struct Known {
    pub(crate) record: BackfillRecord,
    pub(super) version: i32,
}

impl Known {
    /// The request read as `data` at `stat`, if it is one.
    pub(super) fn read(data: &[u8], stat: Stat) -> Option<Known> {
        let record = serde_json::from_slice(data).ok()?;
        Some(Known {
            record,
            version: stat.version,
        })
    }
}

/// Where a backfill call is.
#[derive(Debug)]
pub(crate) enum Step {
    List,
    Read {
        name: String,
    },
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
                Ok(ZkOk::Data(data, stat)) => self.learn_request(&BACKFILLS, name, &data, stat),
                Err(ZkFail::NoNode) => self.forget_request(&BACKFILLS, &name),
                _ => {}
            },
            Step::Sweep { name } => {
                self.requests.backfill_sweeping.remove(&name);
            }
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

    /// A session ended with a backfill call in flight: its request is answered.
    pub(super) fn abort_backfill(&mut self, step: Step) {
        match step {
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
