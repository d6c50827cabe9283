//! Chaining: `after = ["extract"]`, the tasks a task runs after. A file's own checks read the
//! key (an array of task names, none twice, not the task itself); [`check_chains`] checks what
//! only the whole jobs dir shows (every parent exists, no cycle) and turns the tasks that fail
//! into errors of their own files, so that the others load.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};

use toml::de::DeValue;

use super::checker::Value;
use super::*;
use crate::diag::Position;

/// A task named in `after`, and where its name is written (for the errors only the whole jobs
/// dir shows). Two parents are equal when their names are: moving a line changes no task.
#[derive(Debug, Clone)]
pub struct Parent {
    pub name: Arc<str>,
    pub(crate) at: Position,
}

impl Parent {
    /// A parent named in code rather than read from a file (no position).
    pub fn named(name: &str) -> Parent {
        Parent {
            name: name.into(),
            at: Position::default(),
        }
    }
}

impl PartialEq for Parent {
    fn eq(&self, other: &Parent) -> bool {
        self.name == other.name
    }
}

const AFTER_HELP: &str =
    "write the names of the tasks (their file names without .toml), like `after = [\"extract\"]`";

impl Checker<'_> {
    /// The `after` key of the task `name`: an array of other tasks' names, each once.
    pub(super) fn after(&mut self, name: &str, value: &Value<'_>) -> Vec<Parent> {
        let DeValue::Array(items) = value.get_ref() else {
            let message = format!(
                "`after` must be an array of task names, found {}",
                self.found(value)
            );
            self.report(value.span(), message, Some(AFTER_HELP.into()));
            return Vec::new();
        };
        if items.is_empty() {
            self.report(
                value.span(),
                "`after` is empty: it names no task to run after".into(),
                Some(format!("{AFTER_HELP}, or remove `after`")),
            );
            return Vec::new();
        }
        let mut parents: Vec<Parent> = Vec::with_capacity(items.len());
        for item in items.iter() {
            let Some(parent) = self.string("after", item) else {
                continue;
            };
            let span = item.span();
            if !is_valid_task_name(parent) {
                let message = format!(
                    "`after` names {parent:?}, which is no task name (task names match {TASK_NAME_PATTERN})"
                );
                self.report(span, message, Some(AFTER_HELP.into()));
            } else if parent == name {
                let message =
                    format!("`after` names {name:?} itself: a task cannot run after its own runs");
                self.report(span, message, Some(format!("remove {name:?} from `after`")));
            } else if parents.iter().any(|p| &*p.name == parent) {
                let message = format!("`after` names {parent:?} twice");
                self.report(span, message, Some("name each task once".into()));
            } else {
                parents.push(Parent {
                    name: parent.into(),
                    at: Position::of_span(self.text, span),
                });
            }
        }
        parents
    }
}

/// Checks what only the whole jobs dir shows: every task named in an `after` exists (as a task
/// or as a file that failed to load), and no chain comes back to where it started. A task that
/// fails is moved from `tasks` into `errors`, one error per problem, at the name in `after`.
pub(super) fn check_chains<T: Borrow<TaskSpec>>(
    tasks: &mut Vec<T>,
    errors: &mut Vec<TaskFileError>,
) {
    if tasks.iter().all(|t| t.borrow().extras.after.is_empty()) {
        return;
    }
    let mut found = missing_parents(tasks, errors);
    split_parents(tasks, &mut found);
    for (component, cycle) in cycles(tasks) {
        cycle_errors(tasks, &component, &cycle, &mut found);
    }
    if found.is_empty() {
        return;
    }
    tasks.retain(|t| !found.contains_key(&t.borrow().name));
    errors.extend(found.into_values().flatten());
    errors.sort_by(|a, b| (&a.path, a.line, a.column).cmp(&(&b.path, b.line, b.column)));
}

/// A strongly connected component of "runs after" and one cycle through it (in run order).
type Knot = (Vec<Arc<str>>, Vec<Arc<str>>);

/// The errors found, by task.
type Found = BTreeMap<Arc<str>, Vec<TaskFileError>>;

/// An error for each name in an `after` that is no task of the jobs dir (loaded, or a file
/// that failed to load).
fn missing_parents<T: Borrow<TaskSpec>>(tasks: &[T], errors: &[TaskFileError]) -> Found {
    let mut found = Found::new();
    let defined: BTreeSet<&str> = tasks
        .iter()
        .map(|t| &*t.borrow().name)
        .chain(errors.iter().filter_map(|e| e.task.as_deref()))
        .collect();
    for task in tasks.iter().map(Borrow::borrow) {
        for parent in &task.extras.after {
            if defined.contains(&*parent.name) {
                continue;
            }
            let help = match closest(&parent.name, defined.iter().copied()) {
                Some(near) => format!("did you mean {near:?}? Or add {}.toml", parent.name),
                None => format!(
                    "add {}.toml to the jobs dir, or remove {:?} from `after`",
                    parent.name, parent.name
                ),
            };
            let message = format!(
                "`after` names {:?}, which is no task in this jobs dir",
                parent.name
            );
            found
                .entry(task.name.clone())
                .or_default()
                .push(error_at(task, parent, message, help));
        }
    }
    found
}

/// An error for each name in an `after` that is a task running on every node: its nodes'
/// runs of one tick share the tick's fire id, so "one run after each parent run" has no id to
/// count by, and a child would run once per tick, not once per parent run, without saying so.
/// A pooled parent (`work_items`) is no error: each of its items runs once per tick, and a
/// child runs once per item of each successful run.
fn split_parents<T: Borrow<TaskSpec>>(tasks: &[T], found: &mut Found) {
    for task in tasks.iter().map(Borrow::borrow) {
        for parent in &task.extras.after {
            let run_on = tasks
                .iter()
                .map(Borrow::borrow)
                .find(|t| t.name == parent.name)
                .map(|t| &t.extras.run_on);
            if run_on != Some(&RunOn::EveryNode) {
                continue;
            }
            let message = format!(
                "`after` names {:?}, which runs on every node (`run_on = \"every_node\"`): a chained run follows a task whose tick runs once",
                parent.name
            );
            let help = format!(
                "remove {:?} from `after`, or give it `run_on = \"leader\"` (the default)",
                parent.name
            );
            found
                .entry(task.name.clone())
                .or_default()
                .push(error_at(task, parent, message, help));
        }
    }
}

/// An error for each task of a strongly connected `component`, with `cycle` (one cycle
/// through it, in run order) shown to the tasks on it.
fn cycle_errors<T: Borrow<TaskSpec>>(
    tasks: &[T],
    component: &[Arc<str>],
    cycle: &[Arc<str>],
    found: &mut Found,
) {
    let task_of = |name: &Arc<str>| {
        tasks
            .iter()
            .map(Borrow::borrow)
            .find(|t| t.name == *name)
            .expect("a loaded task")
    };
    for name in component {
        let task = task_of(name);
        let (parent, message) = match cycle.iter().position(|n| n == name) {
            Some(i) => {
                // This task runs after the one before it on the cycle: it names it in `after`.
                let before = &cycle[(i + cycle.len() - 1) % cycle.len()];
                let parent = task.extras.after.iter().find(|p| p.name == *before);
                let mut path: Vec<&str> =
                    cycle[i..].iter().chain(&cycle[..i]).map(|n| &**n).collect();
                path.push(path[0]);
                let message = format!(
                    "`after` makes a cycle: {} (each runs after the one before it; a chain must end)",
                    path.join(" → ")
                );
                (parent, message)
            }
            None => {
                // Off the cycle shown: it too runs, through others, after itself.
                let parent = task
                    .extras
                    .after
                    .iter()
                    .find(|p| component.contains(&p.name));
                let message = format!(
                    "`after` makes a cycle: {name} runs after {}, which runs, through others, after {name} (a chain must end)",
                    parent.map_or("", |p| &*p.name)
                );
                (parent, message)
            }
        };
        let parent = parent.expect("an edge inside the component");
        let help = format!(
            "remove {:?} from `after` here, or break the cycle elsewhere",
            parent.name
        );
        found
            .entry(task.name.clone())
            .or_default()
            .push(error_at(task, parent, message, help));
    }
}

fn error_at(task: &TaskSpec, parent: &Parent, message: String, help: String) -> TaskFileError {
    TaskFileError {
        path: task.path.clone(),
        task: Some(task.name.to_string()),
        line: parent.at.line,
        column: parent.at.column,
        snippet: parent.at.snippet.clone(),
        width: parent.at.width,
        message,
        help: Some(help),
    }
}

/// The cycles of the graph "runs after": each strongly connected component with more than
/// one task (Tarjan's algorithm, iteratively), with one cycle through it as its tasks in the
/// order they run. Deterministic: tasks are visited in name order.
fn cycles<T: Borrow<TaskSpec>>(tasks: &[T]) -> Vec<Knot> {
    let index_of: BTreeMap<&str, usize> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (&*t.borrow().name, i))
        .collect();
    // Edges from a task to the tasks it runs after.
    let edges: Vec<Vec<usize>> = tasks
        .iter()
        .map(|t| {
            t.borrow()
                .extras
                .after
                .iter()
                .filter_map(|p| index_of.get(&*p.name).copied())
                .collect()
        })
        .collect();
    let n = tasks.len();
    let (mut index, mut low, mut on_stack) = (vec![usize::MAX; n], vec![0; n], vec![false; n]);
    let (mut stack, mut next, mut found) = (Vec::new(), 0, Vec::new());
    for root in 0..n {
        if index[root] != usize::MAX || edges[root].is_empty() {
            continue;
        }
        let mut work = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut edge)) = work.last_mut() {
            if *edge == 0 && index[v] == usize::MAX {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = edges[v].get(*edge) {
                *edge += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    let names = component
                        .iter()
                        .map(|&i| tasks[i].borrow().name.clone())
                        .collect();
                    found.push((names, cycle_order(&component, &edges, tasks)));
                }
            }
        }
    }
    found
}

/// The tasks of a strongly connected component in the order of one cycle through the first
/// by name (a component that is not one simple cycle is shown by one of its cycles).
fn cycle_order<T: Borrow<TaskSpec>>(
    component: &[usize],
    edges: &[Vec<usize>],
    tasks: &[T],
) -> Vec<Arc<str>> {
    let start = *component
        .iter()
        .min_by_key(|&&i| &*tasks[i].borrow().name)
        .expect("non-empty");
    // Walk edges inside the component until back at the start (a DFS path).
    let inside: BTreeSet<usize> = component.iter().copied().collect();
    let mut path = vec![start];
    let mut seen = BTreeSet::from([start]);
    let mut tried: Vec<usize> = vec![0];
    while let Some(&v) = path.last() {
        let edge = tried.last_mut().expect("beside path");
        let Some(&w) = edges[v].get(*edge) else {
            path.pop();
            tried.pop();
            continue;
        };
        *edge += 1;
        if w == start {
            break;
        }
        if inside.contains(&w) && seen.insert(w) {
            path.push(w);
            tried.push(0);
        }
    }
    // `path` follows "runs after" edges: the order the tasks run in is the reverse.
    path.iter()
        .rev()
        .map(|&i| tasks[i].borrow().name.clone())
        .collect()
}

#[cfg(test)]
mod tests;
