use super::*;

fn defaults() -> TaskDefaults {
    TaskDefaults::for_tests()
}

/// Parses each `(name, text)` as a task file `jobs.d/<name>.toml`.
fn tasks(files: &[(&str, &str)]) -> Vec<TaskSpec> {
    files
        .iter()
        .map(|(name, text)| {
            let path = PathBuf::from(format!("jobs.d/{name}.toml"));
            parse_task(name, &path, text, &defaults()).unwrap_or_else(|e| panic!("{e:?}"))
        })
        .collect()
}

fn checked(files: &[(&str, &str)]) -> (Vec<String>, Vec<TaskFileError>) {
    let mut tasks = tasks(files);
    let mut errors = Vec::new();
    check_chains(&mut tasks, &mut errors);
    (tasks.iter().map(|t| t.name.to_string()).collect(), errors)
}

const EXTRACT: &str = "schedule = \"@hourly\"\ncommand = [\"/bin/true\"]\n";

#[test]
fn a_chained_task_needs_no_schedule_and_has_none() {
    let tasks = tasks(&[("load", "command = [\"/bin/true\"]\nafter = [\"extract\"]\n")]);
    assert!(tasks[0].schedule.is_nothing());
    assert_eq!(&*tasks[0].extras.after[0].name, "extract");
    let at = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap();
    assert_eq!(tasks[0].schedule.next_after(at), None);
}

#[test]
fn a_parent_that_exists_passes() {
    let (names, errors) = checked(&[
        ("extract", EXTRACT),
        ("load", "command = [\"/bin/true\"]\nafter = [\"extract\"]\n"),
    ]);
    assert_eq!(names, ["extract", "load"]);
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
fn a_missing_parent_is_an_error_at_its_name_and_only_that_task_fails() {
    let (names, errors) = checked(&[
        ("extract", EXTRACT),
        (
            "load",
            "command = [\"/bin/true\"]\nafter = [\"extract\", \"extrac\"]\n",
        ),
    ]);
    assert_eq!(names, ["extract"]);
    assert_eq!(errors.len(), 1);
    let error = &errors[0];
    assert_eq!(error.path, PathBuf::from("jobs.d/load.toml"));
    assert_eq!((error.line, error.column), (2, 21));
    assert_eq!(
        error.message,
        "`after` names \"extrac\", which is no task in this jobs dir"
    );
    assert_eq!(
        error.help.as_deref(),
        Some("did you mean \"extract\"? Or add extrac.toml")
    );
}

#[test]
fn a_cycle_fails_every_task_on_it_naming_the_tasks() {
    let (names, errors) = checked(&[
        ("a", "command = [\"/bin/true\"]\nafter = [\"c\"]\n"),
        ("b", "command = [\"/bin/true\"]\nafter = [\"a\"]\n"),
        ("c", "command = [\"/bin/true\"]\nafter = [\"b\"]\n"),
        ("d", "command = [\"/bin/true\"]\nafter = [\"a\"]\n"),
        ("e", EXTRACT),
    ]);
    assert_eq!(names, ["d", "e"]);
    let messages: Vec<(String, usize, usize, &str)> = errors
        .iter()
        .map(|e| {
            (
                e.path.display().to_string(),
                e.line,
                e.column,
                e.message.as_str(),
            )
        })
        .collect();
    let cycle = "(each runs after the one before it; a chain must end)";
    assert_eq!(
        messages,
        [
            (
                "jobs.d/a.toml".to_string(),
                2,
                10,
                &*format!("`after` makes a cycle: a → b → c → a {cycle}")
            ),
            (
                "jobs.d/b.toml".to_string(),
                2,
                10,
                &*format!("`after` makes a cycle: b → c → a → b {cycle}")
            ),
            (
                "jobs.d/c.toml".to_string(),
                2,
                10,
                &*format!("`after` makes a cycle: c → a → b → c {cycle}")
            ),
        ]
    );
}

#[test]
fn the_after_key_is_checked_where_it_stands() {
    let cases: &[(&str, &str)] = &[
        (
            "after = \"extract\"",
            "`after` must be an array of task names, found string \"extract\"",
        ),
        (
            "after = []",
            "`after` is empty: it names no task to run after",
        ),
        (
            "after = [\"Extract\"]",
            "`after` names \"Extract\", which is no task name",
        ),
        (
            "after = [\"load\"]",
            "`after` names \"load\" itself: a task cannot run after its own runs",
        ),
        ("after = [\"x\", \"x\"]", "`after` names \"x\" twice"),
        ("after = [1]", "`after` must be a string, found integer 1"),
    ];
    for (line, message) in cases {
        let text = format!("command = [\"/bin/true\"]\n{line}\n");
        let errors =
            parse_task("load", Path::new("load.toml"), &text, &defaults()).expect_err(line);
        assert!(
            errors
                .iter()
                .any(|e| e.line == 2 && e.message.starts_with(message)),
            "{line}: {errors:?}"
        );
    }
}

#[test]
fn every_task_of_a_knot_of_cycles_fails_also_one_off_the_cycle_shown() {
    // a after b, b after a and c, c after b: one strongly connected component.
    let (names, errors) = checked(&[
        ("a", "command = [\"/bin/true\"]\nafter = [\"b\"]\n"),
        ("b", "command = [\"/bin/true\"]\nafter = [\"a\", \"c\"]\n"),
        ("c", "command = [\"/bin/true\"]\nafter = [\"b\"]\n"),
        ("d", EXTRACT),
    ]);
    assert_eq!(names, ["d"]);
    let failed: Vec<&str> = errors.iter().map(|e| e.task.as_deref().unwrap()).collect();
    assert_eq!(failed, ["a", "b", "c"], "{errors:#?}");
    assert!(
        errors
            .iter()
            .all(|e| e.message.starts_with("`after` makes a cycle: "))
    );
}

#[test]
fn a_parent_that_runs_on_every_node_is_an_error_at_its_name() {
    let (names, errors) = checked(&[
        (
            "clean",
            "schedule = \"@hourly\"\ncommand = [\"/bin/true\"]\nrun_on = \"every_node\"\n",
        ),
        ("report", "command = [\"/bin/true\"]\nafter = [\"clean\"]\n"),
    ]);
    assert_eq!(names, ["clean"]);
    assert_eq!(errors.len(), 1, "{errors:?}");
    let error = &errors[0];
    assert_eq!(error.path, PathBuf::from("jobs.d/report.toml"));
    assert_eq!((error.line, error.column), (2, 10));
    assert_eq!(
        error.message,
        "`after` names \"clean\", which runs on every node (`run_on = \"every_node\"`): a chained run follows a task whose tick runs once"
    );
    assert_eq!(
        error.help.as_deref(),
        Some("remove \"clean\" from `after`, or give it `run_on = \"leader\"` (the default)")
    );
}

#[test]
fn a_parent_with_work_items_is_a_parent_like_any_other() {
    let (names, errors) = checked(&[
        (
            "shards",
            "schedule = \"@hourly\"\ncommand = [\"/bin/true\"]\nwork_items = 4\n",
        ),
        (
            "report",
            "command = [\"/bin/true\"]\nafter = [\"shards\"]\n",
        ),
    ]);
    assert_eq!(names, ["shards", "report"]);
    assert!(errors.is_empty(), "{errors:?}");
}
