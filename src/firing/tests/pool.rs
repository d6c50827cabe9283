//! A pooled task whose backend splits its items over the nodes: the run gets the items its
//! claim won, and an item coming to this node fires the task afresh from its fire record.

use super::*;

/// `leading(&["p"])` with `gained` units of `p` counted.
fn leading_gained(gained: u64) -> Leadership {
    Leadership {
        gained: Arc::new([("p".to_string(), gained)].into()),
        ..leading(&["p"])
    }
}

#[test]
fn a_claim_that_names_its_items_gives_them_to_the_spawn() {
    let mut shell = Shell::new(
        at(0),
        vec![every_minute("p", "work_items = 4\noverlap = \"allow\"")],
        &["p"],
    );
    shell.read_record(None);
    shell.run_until(at(60));
    shell.prepare();
    let (call, _, _) = shell.claim();
    let won: Arc<[String]> = vec!["1".to_string(), "3".to_string()].into();
    shell.answer(call, Answer::ClaimedItems(won.clone()));
    let items = shell.take("spawn", |a| match a {
        Action::Spawn(s) => Some(s.work_items.clone()),
        _ => None,
    });
    assert_eq!(items, Some(won));
    // The next tick's claim that names none spawns for every item.
    shell.run_until(at(120));
    shell.prepare();
    let (call, _, _) = shell.claim();
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    let items = shell.take("spawn", |a| match a {
        Action::Spawn(s) => Some(s.work_items.clone()),
        _ => None,
    });
    assert_eq!(items, None);
}

#[test]
fn a_unit_gained_fires_the_task_afresh_from_its_fire_record_so_missed_ticks_are_caught_up() {
    let mut shell = Shell::new(
        at(0),
        vec![every_minute("p", "work_items = 4\noverlap = \"allow\"")],
        &["p"],
    );
    shell.handle(Input::Leadership(leading_gained(0)));
    shell.read_record(Some(at(0)));
    shell.run_until(at(130));
    shell.actions.clear();
    // A unit whose record is at 0 s comes to this node: the task starts again from the
    // oldest record, and its missed ticks are caught up (catch_up = "once": the latest).
    shell.handle(Input::Leadership(leading_gained(1)));
    shell.read_record(Some(at(0)));
    shell.prepare();
    let (_, tick, intent) = shell.claim();
    assert_eq!((tick, intent), (at(120), ClaimIntent::Run));
    // The same count again changes nothing.
    shell.handle(Input::Leadership(leading_gained(1)));
    assert!(
        !shell.has(|a| matches!(a, Action::ReadFireRecord { .. })),
        "{:?}",
        shell.actions
    );
}
