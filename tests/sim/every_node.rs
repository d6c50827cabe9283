//! Tasks that run on every node (`Knobs::every_node`): the default faults and operator's
//! actions with each node's unit checked as a task of its own, and the node bug that runs such
//! a task as a leader's, which the per-node count must catch.

use crate::checker::Kind;
use crate::scenario::{Knobs, NodeBug};
use crate::{assert_unit_checks_find, run_unit_scenarios};

/// Scenarios with tasks that run on every node (`Knobs::every_node`), every fault and every
/// operator's action on: each node's unit of such a task is checked as a task of its own, so
/// no (tick, node) runs twice, none is claimed without the node's unit lease, and every node
/// up at the end catches up its own missed ticks. `ZKCRON_SIM_SCENARIOS` sets how many.
#[test]
fn every_node_tasks_keep_the_guarantee_per_tick_and_node() {
    let knobs = Knobs {
        every_node: true,
        ..Knobs::DEFAULT
    };
    run_unit_scenarios(knobs, 200, "every-node tasks", |t| t.unit_of.is_some());
}

/// The per-node count fails when every-node ticks are run as a leader's task's (the real
/// node's `bugs.every_node_as_leader`): a node's run is claimed on no unit of its own.
#[test]
fn the_checker_reports_every_node_ticks_run_as_a_leaders_task() {
    let knobs = Knobs {
        every_node: true,
        bug: NodeBug::EveryNodeAsLeader,
        ..Knobs::CONTRACT
    };
    let kinds = [Kind::RunWithoutClaim];
    assert_unit_checks_find(knobs, 0..100, &kinds, |t| t.unit_of.is_some());
}
