//! The order in which tasks starting together read their fire records.

use super::*;

/// Task `name` with the cron expression `schedule`.
fn on_schedule(name: &str, schedule: &str) -> Arc<TaskSpec> {
    let defaults = TaskDefaults::for_tests();
    let text = format!("schedule = \"{schedule}\"\ncommand = [\"true\"]\n");
    let path = PathBuf::from(format!("{name}.toml"));
    Arc::new(task::parse_task(name, &path, &text, &defaults).unwrap_or_else(|e| panic!("{e:?}")))
}

/// Each start computes a tick from croner's parse of the task's expression, kept in a small
/// cache: 100,000 tasks over 3,600 expressions started in name order made a parse for nearly
/// every start. Tasks starting together start grouped by schedule, in name order within one.
#[test]
fn tasks_starting_together_read_their_records_grouped_by_schedule() {
    let specs: Vec<Arc<TaskSpec>> = (0..8)
        .map(|i| {
            let schedule = if i % 2 == 0 {
                "30 * * * * *"
            } else {
                "0 * * * * *"
            };
            on_schedule(&format!("t{i}"), schedule)
        })
        .collect();
    let shell = Shell::new(
        at(0),
        specs,
        &["t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"],
    );
    let reads: Vec<&str> = shell
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::ReadFireRecord { task, .. } => Some(&**task),
            _ => None,
        })
        .collect();
    assert_eq!(reads, ["t1", "t3", "t5", "t7", "t0", "t2", "t4", "t6"]);
}
