//! What the tests' jobs write: `fires.log`, which the cluster tests' jobs append to (one line
//! per run, `<task>@<unix second> <node id>`) and the checks made on it (no fire id twice, no
//! gap); and [`words`], for files of any other line format.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;

/// One line of `fires.log`: `<task>@<unix second> <node id>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fire {
    pub task: String,
    pub second: i64,
    pub node: String,
}

impl Fire {
    pub fn id(&self) -> String {
        format!("{}@{}", self.task, self.second)
    }
}

/// The fires in file order.
#[derive(Debug, Default)]
pub struct Fires(pub Vec<Fire>);

impl Fires {
    /// Parses the complete lines of the file (a line still being written is left for later).
    pub fn read(path: &std::path::Path) -> Fires {
        let text = fs::read_to_string(path).unwrap_or_default();
        let complete = match text.rfind('\n') {
            Some(end) => &text[..=end],
            None => "",
        };
        Fires(complete.lines().map(Fires::parse).collect())
    }

    pub fn parse(line: &str) -> Fire {
        fn malformed(line: &str) -> ! {
            panic!("malformed line in fires.log: {line:?}")
        }
        let (id, node) = line.split_once(' ').unwrap_or_else(|| malformed(line));
        let (task, second) = id.rsplit_once('@').unwrap_or_else(|| malformed(line));
        Fire {
            task: task.to_string(),
            second: second.parse().unwrap_or_else(|_| malformed(line)),
            node: node.to_string(),
        }
    }

    /// Fire ids that appear more than once, with the nodes that fired them.
    pub fn duplicates(&self) -> BTreeMap<String, Vec<String>> {
        let mut by_id: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for fire in &self.0 {
            by_id.entry(fire.id()).or_default().push(fire.node.clone());
        }
        by_id.retain(|_, nodes| nodes.len() > 1);
        by_id
    }

    /// For each task with a missing second in `from..=to`, the missing seconds.
    pub fn gaps(&self, tasks: &[String], from: i64, to: i64) -> BTreeMap<String, Vec<i64>> {
        let mut fired: BTreeMap<&str, BTreeSet<i64>> = BTreeMap::new();
        for fire in &self.0 {
            fired.entry(&fire.task).or_default().insert(fire.second);
        }
        let mut gaps = BTreeMap::new();
        for task in tasks {
            let seconds = fired.get(task.as_str());
            let missing: Vec<i64> = (from..=to)
                .filter(|s| !seconds.is_some_and(|set| set.contains(s)))
                .collect();
            if !missing.is_empty() {
                gaps.insert(task.clone(), missing);
            }
        }
        gaps
    }

    /// Which node fired each task's tick at `second`.
    pub fn leaders_at(&self, second: i64) -> BTreeMap<String, String> {
        self.0
            .iter()
            .filter(|f| f.second == second)
            .map(|f| (f.task.clone(), f.node.clone()))
            .collect()
    }

    pub fn last_second(&self, task: &str) -> Option<i64> {
        self.0
            .iter()
            .filter(|f| f.task == task)
            .map(|f| f.second)
            .max()
    }

    /// Each task's first fired second.
    pub fn first_seconds(&self) -> BTreeMap<String, i64> {
        let mut first = BTreeMap::new();
        for fire in &self.0 {
            let entry = first.entry(fire.task.clone()).or_insert(fire.second);
            *entry = (*entry).min(fire.second);
        }
        first
    }

    pub fn fired_by(&self, task: &str, node: &str) -> bool {
        self.0.iter().any(|f| f.task == task && f.node == node)
    }

    pub fn fired_by_at(&self, task: &str, node: &str, second: i64) -> bool {
        self.0
            .iter()
            .any(|f| f.task == task && f.node == node && f.second == second)
    }

    /// One row per task over `from..=to`: the last letter of the node that fired each second,
    /// `.` for none, `*` for more than one.
    pub fn table(&self, tasks: &[String], from: i64, to: i64) -> String {
        let mut cells: BTreeMap<(&str, i64), Vec<&str>> = BTreeMap::new();
        for fire in &self.0 {
            cells
                .entry((&fire.task, fire.second))
                .or_default()
                .push(&fire.node);
        }
        let mut out =
            format!("fires from {from} to {to} (node's last letter; . none, * several):\n");
        for task in tasks {
            let row: String = (from..=to)
                .map(
                    |s| match cells.get(&(task.as_str(), s)).map(Vec::as_slice) {
                        None => '.',
                        Some([node]) => node.chars().last().unwrap_or('?'),
                        Some(_) => '*',
                    },
                )
                .collect();
            let _ = writeln!(out, "  {task:>4} {row}");
        }
        out
    }
}

/// The complete lines of `path`, a file that jobs append to, each split into words (a line
/// still being written is left for later; no file yet is no lines).
pub fn words(path: &std::path::Path) -> Vec<Vec<String>> {
    let text = fs::read_to_string(path).unwrap_or_default();
    let complete = text.rfind('\n').map_or("", |end| &text[..=end]);
    complete
        .lines()
        .map(|line| line.split_whitespace().map(String::from).collect())
        .collect()
}
