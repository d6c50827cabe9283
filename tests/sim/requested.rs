//! The checker's rule for runs a request asked for (`zkcron trigger`, `zkcron backfill`, a
//! parent's success with `after`): each has a fire id of its own, claimed to run at most once,
//! on any node, ever. One rule for the three, each counted in its own map.

use crate::checker::{Checker, Kind, Violation};
use crate::{Ms, NodeIx, TaskIx};

/// What asked for a run with a fire id of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Requested {
    /// A manual run (`zkcron trigger`).
    Manual,
    /// A backfill's tick (`zkcron backfill`).
    Backfill,
    /// A chained run (`after`).
    Chained,
}

impl Requested {
    /// The violation of a second claim to run, and what the report calls the run.
    fn twice(self) -> (Kind, &'static str) {
        match self {
            Requested::Manual => (Kind::ManualRunTwice, "manual run"),
            Requested::Backfill => (Kind::BackfillTickTwice, "backfill tick"),
            Requested::Chained => (Kind::ChainedRunTwice, "chained run"),
        }
    }
}

impl Checker {
    /// A run `what` asked for, `fire_id`, was claimed to run by `node` at `at`: at most once
    /// per fire id.
    pub(crate) fn on_requested_run(
        &mut self,
        what: Requested,
        at: Ms,
        fire_id: &str,
        task: TaskIx,
        node: NodeIx,
    ) {
        let claimed = match what {
            Requested::Manual => &mut self.manual_runs,
            Requested::Backfill => &mut self.backfill_runs,
            Requested::Chained => &mut self.chained_runs,
        };
        let runs = claimed.entry(fire_id.to_string()).or_default();
        runs.push((at, node));
        if runs.len() > 1 {
            let (kind, words) = what.twice();
            let detail = format!("{words} {fire_id} claimed to run again: {runs:?}");
            self.violations.push(Violation {
                kind,
                at,
                task: Some(task),
                tick: None,
                detail,
            });
        }
    }
}
