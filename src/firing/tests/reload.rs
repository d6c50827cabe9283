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
    shell.handle(Input::Unload(vec![("a".into(), Unload::Changed)]));
    shell.handle(Input::Unload(vec![("c".into(), Unload::Removed)]));
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
    shell.handle(Input::Unload(vec![("t".into(), Unload::Changed)]));
    shell.handle(Input::Load(vec![t]));
    assert_eq!(reads(&mut shell), ["t"]);
    assert_eq!(shell.core.leading(), 1);
}

/// `count` tasks named `t-00000`, ... (in name order), each `spec` under another name.
fn many(spec: &Arc<TaskSpec>, count: usize) -> Vec<Arc<TaskSpec>> {
    let named = |i: usize| {
        let mut spec = (**spec).clone();
        spec.name = Arc::from(format!("t-{i:05}"));
        spec.digest = Default::default();
        Arc::new(spec)
    };
    (0..count).map(named).collect()
}

/// Regression: each removed task left the loaded tasks with `Vec::remove`, which shifts every
/// task after it, so a reload removing most of 100,000 tasks moved tens of gigabytes.
#[test]
fn unloading_most_of_a_large_load_at_once_is_one_pass_not_one_shift_per_task() {
    let specs = many(&every_minute("t", ""), 100_000);
    let mut shell = Shell::new(at(0), specs.clone(), &["t-00000", "t-99999"]);
    assert_eq!(reads(&mut shell).len(), 2);
    let mut gone: Vec<(String, Unload)> = specs[1..]
        .iter()
        .map(|spec| (spec.name.to_string(), Unload::Removed))
        .collect();
    // Named twice in one batch: counted once.
    gone.push(("t-99999".into(), Unload::Removed));
    #[allow(clippy::disallowed_methods)] // The test times the core; the core reads no clock.
    let started = std::time::Instant::now();
    shell.handle(Input::Unload(gone));
    #[allow(clippy::disallowed_methods)]
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(2),
        "unloading took {took:?}"
    );
    assert_eq!(shell.core.leading(), 1, "only t-00000 is left to lead");
    shell.handle(Input::Load(vec![specs[0].clone()]));
    assert_eq!(shell.core.leading(), 1);
    assert!(reads(&mut shell).is_empty(), "t-00000 keeps its entry");
}

/// A load compares each unchanged task (the same `Arc` in the same place) as a pointer: among
/// 1,000 tasks, one removed, one changed and one added, only the changed and the added one
/// start again, and the others keep their entries.
#[test]
fn a_one_file_reload_among_many_tasks_starts_only_what_changed() {
    let specs = many(&every_minute("t", ""), 1000);
    let led = ["t-00000", "t-00005", "t-00999", "t-01000"];
    let mut shell = Shell::new(at(0), specs.clone(), &led);
    assert_eq!(reads(&mut shell), ["t-00000", "t-00005", "t-00999"]);
    let mut reloaded = specs[1..].to_vec();
    reloaded[4] = every_minute("t-00005", "overlap = \"allow\"");
    reloaded.extend(many(&every_minute("t", ""), 1001).pop());
    shell.handle(Input::Unload(vec![
        ("t-00000".into(), Unload::Removed),
        ("t-00005".into(), Unload::Changed),
    ]));
    shell.handle(Input::Load(reloaded));
    assert_eq!(reads(&mut shell), ["t-00005", "t-01000"]);
    assert_eq!(shell.core.leading(), 3);
}
