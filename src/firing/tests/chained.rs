//! Chained runs (`after`) on injected time: a chained run of a paused task is claimed as any
//! manual run, then skipped, not spawned; while the task is not paused it runs.

use super::*;

/// The leadership of `t` listing the chained run `trigger`, paused or not.
fn listing(trigger: &Trigger, paused: bool) -> Leadership {
    let mut leadership = leading(&["t"]);
    if paused {
        leadership.paused_tasks = Arc::new(["t".to_string()].into());
    }
    leadership.triggers = Arc::new([("t".to_string(), vec![trigger.clone()])].into());
    leadership
}

fn chained(n: u32) -> Trigger {
    Trigger {
        fire_id: format!("t@after-extract@180000000{n}"),
        requested_at: at(-5),
    }
}

#[test]
fn a_chained_run_of_a_paused_task_is_claimed_then_skipped_not_spawned() {
    let mut shell = Shell::new(at(0), vec![every_minute("t", "")], &["t"]);
    shell.read_record(None);
    let trigger = chained(1);
    shell.handle(Input::Leadership(listing(&trigger, true)));

    // Claimed without a preparation (nothing will start)...
    let call = shell.take("chained run's claim", |a| match a {
        Action::ClaimManual { call, trigger, .. } => Some((*call, trigger.clone())),
        _ => None,
    });
    assert_eq!(call.1, trigger);
    shell.answer(call.0, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    // ...then skipped: its end is recorded, nothing is spawned.
    let skipped = shell.take("skip", |a| match a {
        Action::SkipChained {
            task,
            fire_id,
            tick,
        } => Some((task.to_string(), fire_id.clone(), tick.instant)),
        _ => None,
    });
    assert_eq!(skipped, ("t".to_string(), trigger.fire_id.clone(), at(-5)));
    assert!(
        !shell.actions.iter().any(|a| matches!(a, Action::Spawn(_))),
        "{:?}",
        shell.actions
    );
    // Listed again (its end not seen yet): not claimed again.
    shell.handle(Input::Leadership(listing(&trigger, true)));
    assert!(shell.actions.is_empty(), "{:?}", shell.actions);
}

#[test]
fn a_chained_run_of_a_task_that_is_not_paused_is_prepared_claimed_and_spawned() {
    let mut shell = Shell::new(at(0), vec![every_minute("t", "")], &["t"]);
    shell.read_record(None);
    let trigger = chained(2);
    shell.handle(Input::Leadership(listing(&trigger, false)));
    shell.prepare();
    let call = shell.take("chained run's claim", |a| match a {
        Action::ClaimManual { call, .. } => Some(*call),
        _ => None,
    });
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    let spawned = shell.take("spawn", |a| match a {
        Action::Spawn(s) => Some(s.fire_id.clone()),
        _ => None,
    });
    assert_eq!(spawned, trigger.fire_id);
}
