//! The marks this node writes itself: the pause of a task whose run failed with
//! `pause_on_failure`, as `control/paused/<task>` (the mark `zkcron pause` writes), created in
//! the multi-op that stores the failed run's end (`pause_create`), so that no stored failure
//! comes without its pause. Reading the marks and acting on them is `control.rs`'s: the node
//! sees its own mark through its watch, as every node sees an operator's.

use super::Node;
use super::io::{CreateMode, Level, ZkOp};
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

    /// Whether `op` is the creation of a pause mark.
    pub(super) fn is_pause_create(&self, op: &ZkOp) -> bool {
        let dir = self.paths.paused_dir();
        matches!(op, ZkOp::Create { path, .. } if path.strip_prefix(&dir).is_some_and(|p| p.starts_with('/')))
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
