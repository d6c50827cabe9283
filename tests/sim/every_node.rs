//! Tasks that run on every node (`Knobs::every_node`): the default faults and operator's
//! actions with each node's unit checked as a task of its own, and the node bug that runs such
//! a task as a leader's, which the per-node count must catch.

use crate::checker::Kind;
use crate::scenario::{Knobs, NodeBug, Scenario};
use crate::{run_real, run_unit_scenarios};

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
    let seed = (0..100).find(|&seed| {
        let scenario = Scenario::generate(seed, knobs);
        run_real(seed, knobs, false).violations.iter().any(|v| {
            v.kind == Kind::RunWithoutClaim
                && v.task.is_some_and(|t| scenario.tasks[t].unit_of.is_some())
        })
    });
    assert!(
        seed.is_some(),
        "no run without a claim of a unit in 100 scenarios with {knobs:?}"
    );
    // Without the bug the same scenarios keep every node's ticks.
    let fixed = Knobs {
        bug: NodeBug::None,
        ..knobs
    };
    let seed = seed.unwrap();
    let violations = run_real(seed, fixed, false).violations;
    assert!(violations.is_empty(), "seed {seed}: {violations:?}");
}
