//! The `after` links as `explain` shows them: a task's parents (the tasks whose successful runs
//! run it, as its published definition names them; `status` gives them and the children,
//! [`super::model`]) with each parent's state, since a child's chained runs wait on its
//! parent, and which records `explain` reads for them.

use serde::{Deserialize, Serialize};

use super::model::{Snapshot, TaskStatus};

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
