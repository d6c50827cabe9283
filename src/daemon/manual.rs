//! Manual runs (`zkcron trigger`): each pending trigger the coordinator lists in
//! [`Leadership::triggers`] is claimed with [`Coordinator::claim_manual`] and, only when
//! `Claimed`, run once: fire id = the trigger's name, `ZKCRON_SCHEDULED_AT` = when it was
//! requested. A manual run ignores `overlap` (it neither waits for nor skips because of a live
//! run, and a scheduled tick does not count it: it is kept apart, under `<task>@manual` in
//! the runs map, so shutdown still waits for it) and `jitter`, moves no fire record, and is
//! never caught up or rerun. A paused task's trigger runs: the operator asked for it.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::runs::{RunKind, run_request, start_run};
use super::{Shared, TaskTable, wall_clock};
use crate::coord::{ClaimOutcome, Coordinator, Leadership, Trigger};
use crate::executor;
use crate::plan::Tick;
use crate::task::TaskSpec;

/// The manual runs this daemon is claiming or has claimed (until the coordinator no longer
/// lists them).
#[derive(Default)]
pub(super) struct ManualRuns {
    claiming: Mutex<BTreeSet<String>>,
    claimed: Mutex<BTreeSet<String>>,
}

/// The key of a task's manual runs in the runs map (`@` is never part of a task name).
fn runs_key(task: &str) -> String {
    format!("{task}@manual")
}

/// Starts a claim for every listed trigger of a task this node fires and is not claiming or
/// has not claimed yet.
pub(super) fn start_manual_runs<C: Coordinator>(
    shared: &Arc<Shared<C>>,
    tasks: &TaskTable,
    leadership: &Leadership,
) {
    let listed: BTreeSet<&str> = leadership
        .triggers
        .values()
        .flatten()
        .map(|t| t.fire_id.as_str())
        .collect();
    shared
        .manual
        .claimed
        .lock()
        .expect("manual runs lock poisoned")
        .retain(|id| listed.contains(id.as_str()));
    if leadership.paused {
        return;
    }
    for (task, triggers) in leadership.triggers.iter() {
        let Some(loaded) = tasks.get(task).filter(|t| t.spec.enabled) else {
            continue;
        };
        if !leadership.tasks.contains(task.as_str()) {
            continue;
        }
        for trigger in triggers {
            let new = {
                let claimed = shared.manual.claimed.lock().expect("poisoned");
                let mut claiming = shared.manual.claiming.lock().expect("poisoned");
                !claimed.contains(&trigger.fire_id) && claiming.insert(trigger.fire_id.clone())
            };
            if new {
                tokio::spawn(manual_run(
                    loaded.spec.clone(),
                    shared.clone(),
                    trigger.clone(),
                ));
            }
        }
    }
}

/// Claims `trigger` and, if won, starts its run at once.
async fn manual_run<C: Coordinator>(spec: Arc<TaskSpec>, shared: Arc<Shared<C>>, trigger: Trigger) {
    let name = &*spec.name;
    let fire_id = trigger.fire_id.as_str();
    let tick = Tick {
        instant: trigger.requested_at,
        due_at: wall_clock(),
        catch_up: false,
    };
    // Everything the spawn needs first, as for a tick: after the claim only the spawn is left.
    let prepared = executor::prepare(run_request(&spec, &shared, tick, fire_id)).await;
    let leads = |shared: &Shared<C>| {
        let l = shared.leadership.borrow();
        !l.paused && l.tasks.contains(name)
    };
    let mut delay = Duration::from_millis(100);
    let outcome = loop {
        match shared.coordinator.claim_manual(name, &trigger).await {
            Ok(outcome) => break outcome,
            Err(error) if leads(&shared) => {
                tracing::warn!(task = %name, %fire_id, "claiming the manual run failed ({error}); retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(1));
            }
            Err(error) => {
                tracing::warn!(task = %name, %fire_id, "claiming the manual run failed ({error}) and this node no longer leads the task; the next leader runs it");
                break ClaimOutcome::NotLeader;
            }
        }
    };
    shared
        .manual
        .claiming
        .lock()
        .expect("manual runs lock poisoned")
        .remove(fire_id);
    match outcome {
        ClaimOutcome::Claimed => {
            shared
                .manual
                .claimed
                .lock()
                .expect("manual runs lock poisoned")
                .insert(fire_id.to_string());
            let claimed_at = tokio::time::Instant::now();
            tracing::info!(task = %name, %fire_id, requested_at = %trigger.requested_at, "manual run claimed; starting it");
            let runs = shared.runs.of(&runs_key(name));
            // Nothing stops a manual run's loop: it has none (shutdown reaches it in `runs`).
            let (_never, stop) = watch::channel(false);
            start_run(
                &shared,
                &runs,
                name,
                tick,
                prepared,
                claimed_at,
                &stop,
                RunKind::Manual {
                    fire_id: fire_id.to_string(),
                },
            );
        }
        ClaimOutcome::AlreadyClaimed { .. } => {
            tracing::info!(task = %name, %fire_id, "manual run already claimed (or gone); not running it");
        }
        ClaimOutcome::NotLeader => {
            tracing::info!(task = %name, %fire_id, "manual run not claimed: not the leader");
        }
    }
}
