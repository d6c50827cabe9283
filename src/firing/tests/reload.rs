//! Reloads: the leadership is applied again only to the tasks a load changed, and what it
//! leaves is what applying it to every task would.

use super::*;

/// The fire-record reads pending, by task.
fn reads(shell: &mut Shell) -> Vec<String> {
    let mut tasks = Vec::new();
    while shell.has(|a| matches!(a, Action::ReadFireRecord { .. })) {
        tasks.push(shell.take("fire record read", |a| match a {
            Action::ReadFireRecord { task, .. } => Some(task.to_string()),
            _ => None,
        }));
    }
    tasks
}

/// A reload applied the leadership to every loaded task again: with 100,000 tasks that was
/// most of the daemon's work for a one-file change. Unchanged tasks keep their entries.
#[test]
fn a_reload_starts_only_the_added_and_changed_tasks_and_counts_the_led_ones() {
    let a = every_minute("a", "");
    let b = every_minute("b", "");
    let c = every_minute("c", "");
    let mut shell = Shell::new(
        at(0),
        vec![a.clone(), b.clone(), c.clone()],
        &["a", "b", "d"],
    );
    assert_eq!(reads(&mut shell), ["a", "b"]);
    assert_eq!(shell.core.leading(), 2);

    // `a` changed, `c` removed, `d` added; `b` is the same spec.
    let changed_a = every_minute("a", "overlap = \"skip\"");
    shell.handle(Input::Unload {
        task: "a".into(),
        why: Unload::Changed,
    });
    shell.handle(Input::Unload {
        task: "c".into(),
        why: Unload::Removed,
    });
    let d = every_minute("d", "");
    shell.handle(Input::Load(vec![changed_a, b.clone(), d]));
    assert_eq!(reads(&mut shell), ["a", "d"], "b keeps its entry");
    assert_eq!(shell.core.leading(), 3);

    // Gone without an unload: counted out all the same.
    shell.handle(Input::Load(vec![b]));
    assert!(reads(&mut shell).is_empty());
    assert_eq!(shell.core.leading(), 1);
    shell.handle(Input::Leadership(leading(&["c"])));
    assert_eq!(shell.core.leading(), 0);
}

/// A task unloaded (as changed) and loaded again with the very same spec fires again: the
/// load does not take it for an unchanged task whose entry was kept.
#[test]
fn a_task_unloaded_and_loaded_again_with_the_same_spec_fires_again() {
    let t = every_minute("t", "");
    let mut shell = Shell::new(at(0), vec![t.clone()], &["t"]);
    assert_eq!(reads(&mut shell), ["t"]);
    shell.handle(Input::Unload {
        task: "t".into(),
        why: Unload::Changed,
    });
    shell.handle(Input::Load(vec![t]));
    assert_eq!(reads(&mut shell), ["t"]);
    assert_eq!(shell.core.leading(), 1);
}
