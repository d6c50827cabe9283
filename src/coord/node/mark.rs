//! The marks this node writes itself: the pause of a task whose run failed with
//! `pause_on_failure`, as `control/paused/<task>` (the mark `zkcron pause` writes), created in
//! the multi-op that stores the failed run's end (`pause_op`), so that no stored failure
//! comes without its pause. A create that finds a mark there is sent again as a check that the
//! mark is still there, and a check that finds none as the create again: a resume that lands
//! between two attempts of the write cannot leave the failure stored without its pause. Reading the marks and acting on them is `control.rs`'s: the node
//! sees its own mark through its watch, as every node sees an operator's.

use super::Node;
use super::io::{CreateMode, Level, ZkFail, ZkOp};
use crate::coord::RunResult;

/// A pause a failed run's end carries (`pause_on_failure`), for the report once it is stored.
#[derive(Debug, Clone)]
pub(crate) struct PauseNote {
    task: String,
    fire_id: String,
    failure: String,
}

impl PauseNote {
    /// The note of the pause `result` carries for `task`, if it carries one.
    pub(super) fn of(task: &str, result: &RunResult) -> Option<PauseNote> {
        result.pause.as_ref()?;
        Some(PauseNote {
            task: task.to_string(),
            fire_id: result.fire_id_of(task),
            failure: result.exit.clone(),
        })
    }
}

/// Whether a pause stored with a run's end was made by that write or found there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PauseStored {
    /// The end's write created the mark.
    Created,
    /// A mark was there already (an operator's, another run's, or this write's earlier
    /// attempt whose answer was lost): it was kept, with its reason.
    Found,
}

impl Node {
    /// The create of `control/paused/<task>` that the end of `unit`'s failed run `result`
    /// carries (`pause_on_failure`), for the multi-op that stores the end; `None` without one.
    /// A unit's pause is its task's.
    pub(super) fn pause_create(&self, unit: &str, result: &RunResult) -> Option<ZkOp> {
        let mark = result.pause.as_ref()?;
        Some(ZkOp::Create {
            path: self.paths.paused(self.task_of(unit)),
            data: serde_json::to_vec(mark).expect("marks serialize"),
            mode: CreateMode::Persistent,
            acl: self.cfg.acl,
        })
    }

    /// The op of the pause that the end of `unit`'s failed run `result` carries: the mark's
    /// create, or, once an attempt found a mark there (`Found`), a check (any version) that
    /// it is still there, so that the end is stored only while the task is paused.
    pub(super) fn pause_op(
        &self,
        unit: &str,
        result: &RunResult,
        stored: PauseStored,
    ) -> Option<ZkOp> {
        let create = self.pause_create(unit, result)?;
        let mut ops = [create.clone()];
        self.replace_pause_op(&mut ops, &create, stored);
        let [op] = ops;
        Some(op)
    }

    fn is_pause_path(&self, path: &str) -> bool {
        let dir = self.paths.paused_dir();
        path.strip_prefix(&dir).is_some_and(|p| p.starts_with('/'))
    }

    /// How the pause op `op` of an end's write that failed with `error` is to be sent again:
    /// a create that found a mark as a check (`Found`), a check that found none as a create
    /// (`Created`: a resume landed since); `None` when `op` is not the pause's or failed
    /// otherwise.
    pub(super) fn pause_retry(&self, op: &ZkOp, error: &ZkFail) -> Option<PauseStored> {
        match (op, error) {
            (ZkOp::Create { path, .. }, ZkFail::NodeExists) if self.is_pause_path(path) => {
                Some(PauseStored::Found)
            }
            (ZkOp::Check { path, .. }, ZkFail::NoNode) if self.is_pause_path(path) => {
                Some(PauseStored::Created)
            }
            _ => None,
        }
    }

    /// Whether the pause among `ops` (an end's write) was found there or is created by it.
    pub(super) fn pause_stored_by(&self, ops: &[ZkOp]) -> PauseStored {
        let found = ops
            .iter()
            .any(|op| matches!(op, ZkOp::Check { path, .. } if self.is_pause_path(path)));
        if found {
            PauseStored::Found
        } else {
            PauseStored::Created
        }
    }

    /// Replaces the pause op among `ops` (an end's write) by the one `stored` asks for: the
    /// mark's `create` (as [`Node::pause_create`] made it), or the check of its path.
    pub(super) fn replace_pause_op(&self, ops: &mut [ZkOp], create: &ZkOp, stored: PauseStored) {
        let ZkOp::Create { path: mark, .. } = create else {
            return;
        };
        let new = match stored {
            PauseStored::Created => create.clone(),
            PauseStored::Found => ZkOp::Check {
                path: mark.clone(),
                version: -1,
            },
        };
        for op in ops.iter_mut() {
            if let ZkOp::Create { path, .. } | ZkOp::Check { path, .. } = op
                && path == mark
            {
                *op = new;
                return;
            }
        }
    }

    /// Reports the pause a stored end carried, as the operator reads it in the log.
    pub(super) fn report_pause(&mut self, note: Option<&PauseNote>, stored: PauseStored) {
        let Some(note) = note else { return };
        let (level, message) = match stored {
            PauseStored::Created => (
                Level::Warn,
                format!(
                    "task paused: its run failed (pause_on_failure); `zkcron resume {}` lets it \
                     fire again",
                    note.task
                ),
            ),
            PauseStored::Found => (
                Level::Info,
                "task already paused; its failed run changes nothing (pause_on_failure)"
                    .to_string(),
            ),
        };
        let (task, fire_id, failure) = (
            note.task.clone(),
            note.fire_id.clone(),
            note.failure.clone(),
        );
        self.report(level, message)
            .field("task", task)
            .field("fire_id", fire_id)
            .field("failure", failure);
    }
}
