//! The `after` links between tasks as `status` and `explain` show them: a task's parents (the
//! tasks whose successful runs run it, as its published definition names them), its children
//! (the tasks whose definitions name it), and each parent's state, since a child's chained runs
//! wait on its parent.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::model::{Snapshot, TaskStatus};
use crate::coord::records::TaskSetEntry;

/// A parent of a task, as `explain` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParentLink {
    pub task: String,
    /// Why the parent is not firing (paused, no live node defines it or may run it, ...), so
    /// the child's chained runs wait on it; `None` while it fires.
    pub problem: Option<String>,
}

/// What `explain` says of a parent that no live member defines.
pub const UNDEFINED: &str = "no live node defines it";

/// Sets each task's parents (`after`) from its definition (`entries`, one per task, in the same
/// order) and its children: the tasks whose definitions name it, by name.
pub fn link(tasks: &mut [TaskStatus], entries: &[Option<&TaskSetEntry>]) {
    let mut children: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (task, entry) in tasks.iter().zip(entries) {
        for parent in entry.map_or(&[][..], |e| e.after.as_slice()) {
            children
                .entry(parent.as_str())
                .or_default()
                .push(task.name.clone());
        }
    }
    for (task, entry) in tasks.iter_mut().zip(entries) {
        task.after = entry.map(|e| e.after.clone()).unwrap_or_default();
        task.children = children.remove(task.name.as_str()).unwrap_or_default();
        task.children.sort();
    }
}

/// The parents of `task` with their states, from the status of every task (`all`): a parent
/// missing from it is defined by no live member.
pub fn parents(task: &TaskStatus, all: &[TaskStatus]) -> Vec<ParentLink> {
    task.after
        .iter()
        .map(|parent| ParentLink {
            task: parent.clone(),
            problem: match all.iter().find(|t| &t.name == parent) {
                Some(status) => status.problem.clone(),
                None => Some(UNDEFINED.to_string()),
            },
        })
        .collect()
}

/// `tasks` and the parents any live member's definition of them names, each once: what
/// `explain` reads, so that it can say each parent's state.
pub fn with_parents(snapshot: &Snapshot, tasks: &[String]) -> Vec<String> {
    let mut names = tasks.to_vec();
    for set in snapshot.tasksets.values() {
        for task in tasks {
            if let Some(entry) = set.tasks.get(task) {
                names.extend(entry.after.iter().cloned());
            }
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    names.retain(|name| seen.insert(name.clone()));
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::explain::explain;
    use crate::ops::model::status;
    use crate::ops::render;
    use crate::ops::tests::{at, cluster, entry, mark};

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
        let status = status(&chained(), at(10, 0, 1));
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
}
