//! Pooled tasks (`Knobs::pools`): the default faults and operator's actions with each item's
//! unit checked as a task of its own, so that the checker counts (tick, item) pairs, and the
//! node bug that runs every item on each node that claims a tick (two owners for an item),
//! which the per-item count must catch.

use crate::checker::Kind;
use crate::scenario::{Knobs, NodeBug, Scenario};
use crate::{SHARDS, env_u64, run_real};

/// Scenarios with pooled tasks (`Knobs::pools`), every fault and every operator's action on:
/// each item's unit is checked as a task of its own, so no (tick, item) is claimed twice or
/// runs twice, none runs without its unit's claim (a run counts for each item its claim won),
/// a run lost with its node is not run again (`on_node_loss = "skip"`), and every item's
/// missed ticks are caught up by its owner at the end. `ZKCRON_SIM_SCENARIOS` sets how many.
#[test]
fn pooled_tasks_keep_the_guarantee_per_tick_and_item() {
    // Without `pause_on_failure`: its checker keeps a failure pause per slot, but a failed
    // run of one item pauses the whole task (every item's slot).
    let knobs = Knobs {
        pools: true,
        pause_on_failure: false,
        ..Knobs::DEFAULT
    };
    // Fewer than the every-node test's 200: each costs CI about 0.15 s of CPU.
    let count = env_u64("ZKCRON_SIM_SCENARIOS").map_or(120, |n| n / SHARDS);
    let seeds: Vec<u64> = match env_u64("ZKCRON_SIM_SEED") {
        Some(seed) => vec![seed],
        None => (0..count).collect(),
    };
    let mut items = 0;
    let mut failed: Vec<(u64, Kind)> = Vec::new();
    for &seed in &seeds {
        items += Scenario::generate(seed, knobs)
            .tasks
            .iter()
            .filter(|t| t.item_of.is_some())
            .count();
        let outcome = run_real(seed, knobs, false);
        if let Some(v) = outcome.violations.first() {
            if failed.is_empty() {
                eprintln!("{}", outcome.report);
            }
            failed.push((seed, v.kind));
        }
    }
    assert!(items > seeds.len(), "few items drawn: {items}");
    assert!(
        failed.is_empty(),
        "{} scenario(s) with pooled tasks violated an invariant (seed, first violation): {failed:?}",
        failed.len()
    );
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
    let seed = (0..100).find(|&seed| {
        let scenario = Scenario::generate(seed, knobs);
        run_real(seed, knobs, false).violations.iter().any(|v| {
            matches!(v.kind, Kind::RunWithoutClaim | Kind::RunTwice)
                && v.task.is_some_and(|t| scenario.tasks[t].item_of.is_some())
        })
    });
    assert!(
        seed.is_some(),
        "no item run without its claim in 100 scenarios with {knobs:?}"
    );
    // Without the bug the same scenario keeps every item's ticks.
    let fixed = Knobs {
        bug: NodeBug::None,
        ..knobs
    };
    let seed = seed.unwrap();
    let violations = run_real(seed, fixed, false).violations;
    assert!(violations.is_empty(), "seed {seed}: {violations:?}");
}
