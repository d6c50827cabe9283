//! The marks this node writes itself: the pause of a task whose run failed with
//! `pause_on_failure`, as `control/paused/<task>` (the mark `zkcron pause` writes). Reading the
//! marks and acting on them is `control.rs`'s: the node sees its own mark through its watch,
//! as every node sees an operator's.

use super::io::{Answered, CreateMode, ReqId, ZkFail, ZkOk, ZkOp};
use super::{Node, Then};
use crate::coord::CoordError;
use crate::coord::records::MarkRecord;

impl Node {
    /// Pauses `task` cluster-wide with `mark`; answers whether it was not paused before.
    pub(super) fn pause_task(&mut self, req: ReqId, task: String, mark: MarkRecord) {
        if self.session.is_none() {
            return self.answer(
                req,
                Err(CoordError::NotConnected {
                    context: "pausing the task",
                }),
            );
        }
        let data = serde_json::to_vec(&mark).expect("marks serialize");
        let create = ZkOp::Create {
            path: self.paths.paused(&task),
            data,
            mode: CreateMode::Persistent,
            acl: self.cfg.acl,
        };
        self.call(create, Then::Paused { req });
    }

    /// The pause mark's creation answered: created, or there already (paused before).
    pub(super) fn on_paused(&mut self, req: ReqId, result: Result<ZkOk, ZkFail>) {
        let answer = match result {
            Ok(_) => Ok(Answered::Changed(true)),
            Err(ZkFail::NodeExists) => Ok(Answered::Changed(false)),
            Err(error) => Err(CoordError::ZooKeeper {
                context: "pausing the task".into(),
                message: error.to_string(),
            }),
        };
        self.answer(req, answer);
    }
}
