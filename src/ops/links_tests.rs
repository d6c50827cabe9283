//! The `after` links in `status`, `explain` and their JSON (`super::links`).

use super::explain::explain;
use super::fixtures::{at, cluster, entry, mark};
use super::links::{ParentLink, UNDEFINED, with_parents};
use super::model::Snapshot;
use super::render;
use crate::coord::records::TaskSetEntry;

/// The cluster of `ops::tests` with `load` after `backup` and `gone`, which no node defines.
fn chained() -> Snapshot {
    let mut snapshot = cluster();
    for set in snapshot.tasksets.values_mut() {
        let load = TaskSetEntry {
            after: vec!["backup".into(), "gone".into()],
            ..entry("eeeeeeeeeeeeeeee", None)
        };
        set.tasks.insert("load".into(), load);
    }
    snapshot
}

#[test]
fn status_names_each_tasks_parents_and_children_in_text_and_json() {
    let status = crate::ops::live::status(chained(), at(10, 0, 1));
    let task = |name: &str| status.tasks.iter().find(|t| t.name == name).unwrap();
    assert_eq!(task("load").after, ["backup", "gone"]);
    assert_eq!(task("backup").children, ["load"]);
    assert!(task("report").after.is_empty() && task("report").children.is_empty());
    let json = serde_json::to_value(&status).unwrap();
    let tasks = json["tasks"].as_array().unwrap();
    let backup = tasks.iter().find(|t| t["name"] == "backup").unwrap();
    assert_eq!(backup["children"], serde_json::json!(["load"]));
    let load = tasks.iter().find(|t| t["name"] == "load").unwrap();
    assert_eq!(load["after"], serde_json::json!(["backup", "gone"]));
    // A task without links has neither key.
    let report = tasks.iter().find(|t| t["name"] == "report").unwrap();
    assert!(report.get("after").is_none() && report.get("children").is_none());
    let text = render::status(&status, at(10, 0, 1));
    assert!(
        text.contains("then load") && text.contains("after backup, gone"),
        "{text}"
    );
}

#[test]
fn explain_gives_each_parents_state_since_the_childs_runs_wait_on_it() {
    let mut snapshot = chained();
    snapshot.paused.insert("backup".into(), mark(at(9, 59, 0)));
    let explained = explain(&snapshot, "load", at(10, 0, 1)).unwrap();
    assert_eq!(
        explained.parents,
        [
            ParentLink {
                task: "backup".into(),
                problem: Some("paused".into())
            },
            ParentLink {
                task: "gone".into(),
                problem: Some(UNDEFINED.into())
            }
        ]
    );
    let text = render::explain(&explained, at(10, 0, 1));
    assert!(
        text.contains(
            "  after:    backup: not firing: paused; the runs of load after it wait on it\n"
        ) && text.contains("  after:    gone: not firing: no live node defines it;"),
        "{text}"
    );
    let json = serde_json::to_value(&explained).unwrap();
    assert_eq!(json["parents"][1]["problem"], UNDEFINED);
    // A parent that fires is said to.
    let explained = explain(&chained(), "load", at(10, 0, 1)).unwrap();
    assert_eq!(explained.parents[0].problem, None);
    let text = render::explain(&explained, at(10, 0, 1));
    assert!(text.contains("  after:    backup: firing\n"), "{text}");
    let parent = explain(&chained(), "backup", at(10, 0, 1)).unwrap();
    let text = render::explain(&parent, at(10, 0, 1));
    assert!(text.contains("  then:     load: "), "{text}");
    assert!(
        serde_json::to_value(&parent)
            .unwrap()
            .get("parents")
            .is_none()
    );
}

#[test]
fn explain_reads_the_task_and_each_parent_once() {
    let snapshot = chained();
    assert_eq!(
        with_parents(&snapshot, &["load".into()]),
        ["load", "backup", "gone"]
    );
    assert_eq!(with_parents(&snapshot, &["backup".into()]), ["backup"]);
    assert_eq!(with_parents(&snapshot, &["nope".into()]), ["nope"]);
}
