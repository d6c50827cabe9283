//! Pooled tasks (`Knobs::pools`): the default faults and operator's actions with each item's
//! unit checked as a task of its own, so that the checker counts (tick, item) pairs, and the
//! node bug that runs every item on each node that claims a tick (two owners for an item),
//! which the per-item count must catch. With `pause_on_failure` (on, as by default), one
//! node's failed run pauses every item of the task cluster-wide, which the checker holds
//! every item to.

use crate::checker::Kind;
use crate::scenario::{Knobs, NodeBug};
use crate::{assert_unit_checks_find, run_unit_scenarios};

/// Scenarios with pooled tasks (`Knobs::pools`), every fault and every operator's action on:
/// each item's unit is checked as a task of its own, so no (tick, item) is claimed twice or
/// runs twice, none runs without its unit's claim (a run counts for each item its claim won),
/// a run lost with its node is not run again (`on_node_loss = "skip"`), and every item's
/// missed ticks are caught up by its owner at the end. A quarter of the tasks, pooled ones
/// among them, have `pause_on_failure`: after a failed run's end is stored, no item's tick
/// claimed later runs until a resume. `ZKCRON_SIM_SCENARIOS` sets how many.
#[test]
fn pooled_tasks_keep_the_guarantee_per_tick_and_item() {
    let knobs = Knobs {
        pools: true,
        ..Knobs::DEFAULT
    };
    // Fewer than the every-node test's 200: each costs CI about 0.15 s of CPU.
    let stats = run_unit_scenarios(knobs, 120, "pooled tasks", |t| t.item_of.is_some());
    if std::env::var_os("ZKCRON_SIM_SEED").is_none() {
        assert!(
            stats.pooled_failure_pauses > 0,
            "no failed run paused a pooled task: {stats:?}"
        );
    }
}

/// The per-item count fails when a node runs every item of a tick it claimed some of (the
/// real node's `bugs.pool_runs_every_item`): an item's run without its unit's claim.
#[test]
fn the_checker_reports_an_item_run_by_a_node_that_does_not_own_it() {
    let knobs = Knobs {
        pools: true,
        bug: NodeBug::PoolRunsEveryItem,
        ..Knobs::CONTRACT
    };
    let kinds = [Kind::RunWithoutClaim, Kind::RunTwice];
    assert_unit_checks_find(knobs, 0..100, &kinds, |t| t.item_of.is_some());
}

/// The real node with its test-only switch `bugs.pause_apart` (a failed run's pause is created
/// in a call of its own after its end is stored, for a pooled run as for a task's) loses the
/// pause when its node dies or its session ends between the two; the checker, which holds
/// every item's tick claimed after a stored failure to stay unrun until a resume, says so.
#[test]
fn the_checker_reports_item_ticks_run_after_a_failure_when_the_pause_is_written_apart() {
    let knobs = Knobs {
        pools: true,
        bug: NodeBug::PauseApart,
        pause_on_failure: true,
        ..Knobs::CONTRACT
    };
    // Only the faults and features the bug needs (pools, pause on failure, the contract's node
    // deaths and session losses), so that a scenario costs less. A node lost between a failed
    // run's end and its pause is rare, about one scenario in a thousand: the first that shows
    // it is 904 with the code of 2026-12-08. The search starts a little before it, over a range,
    // not one seed, so that it survives changes of the draws, and stops at the first it finds.
    let kinds = [Kind::RanAfterFailurePause];
    assert_unit_checks_find(knobs, 850..5000, &kinds, |t| t.item_of.is_some());
}
