//! Where a task's ticks run: on the leader (the default), on every node (`run_on =
//! "every_node"`), or split into work items (`work_items`): the type, the checks of the two
//! keys, and what a run of a pooled task is told of its items.

use std::ops::Range;
use std::sync::Arc;

use toml::de::DeValue;

use super::checker::Value;
use super::*;

/// A pool holds at most this many items.
pub const MAX_WORK_ITEMS: usize = 1024;

/// The pattern a work item's name must match, as shown to users (a task name's).
pub const WORK_ITEM_PATTERN: &str = TASK_NAME_PATTERN;

/// Where each tick of a task runs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum RunOn {
    /// On the task's leader, once per tick.
    #[default]
    Leader,
    /// Once per tick on every node that may run the task.
    EveryNode,
    /// Split into these work items, in the task file's order: each item runs once per tick.
    Items(Arc<[String]>),
}

impl RunOn {
    /// The work items of a pooled task, in the task file's order.
    pub fn items(&self) -> Option<&[String]> {
        match self {
            RunOn::Items(items) => Some(items),
            RunOn::Leader | RunOn::EveryNode => None,
        }
    }

    /// The variables a run of `share` (items of this pool, in the file's order) gets:
    /// `ZKCRON_WORK_ITEMS` (comma-separated) and `ZKCRON_WORK_TOTAL` (the pool's size); none for
    /// a task without work items.
    pub fn work_env<'a>(
        &self,
        share: impl IntoIterator<Item = &'a String>,
    ) -> Vec<(String, String)> {
        let Some(items) = self.items() else {
            return Vec::new();
        };
        let share: Vec<&str> = share.into_iter().map(String::as_str).collect();
        vec![
            ("ZKCRON_WORK_ITEMS".into(), share.join(",")),
            ("ZKCRON_WORK_TOTAL".into(), items.len().to_string()),
        ]
    }

    /// The bytes [`RunOn::work_env`] of every item takes in a program's environment (each
    /// string with its NUL and a pointer), for the check of what `execve` accepts.
    pub(super) fn env_bytes(&self) -> usize {
        let all = self.items().unwrap_or_default();
        self.work_env(all)
            .iter()
            .map(|(name, value)| name.len() + 1 + value.len() + 1 + std::mem::size_of::<usize>())
            .sum()
    }
}

/// The keys `run_on` and `work_items` as each was read, with the span of its key, before they
/// are checked together.
#[derive(Debug, Default)]
pub(super) struct RunOnKeys {
    /// `run_on`: [`RunOn::Leader`] or [`RunOn::EveryNode`].
    pub run_on: Option<(RunOn, Range<usize>)>,
    /// `work_items`, when it was valid.
    pub work_items: Option<(Arc<[String]>, Range<usize>)>,
}

const COUNT_HELP: &str = "write `work_items = 16` for the items \"0\" to \"15\", or list their \
                          names: work_items = [\"eu-west\", \"us-east\"]";

impl Checker<'_> {
    /// `run_on`: `"leader"` or `"every_node"`.
    pub(super) fn run_on_key(&mut self, value: &Value<'_>) -> Option<RunOn> {
        #[derive(Clone, Copy)]
        enum Choice {
            Leader,
            EveryNode,
        }
        let choices = [
            ("leader", Choice::Leader),
            ("every_node", Choice::EveryNode),
        ];
        Some(match self.choice("run_on", value, &choices)? {
            Choice::Leader => RunOn::Leader,
            Choice::EveryNode => RunOn::EveryNode,
        })
    }

    /// `work_items`: a count (the items "0" to "n-1") or an array of item names.
    pub(super) fn work_items(&mut self, value: &Value<'_>) -> Option<Arc<[String]>> {
        match value.get_ref() {
            DeValue::Integer(integer) => {
                let count = i64::from_str_radix(integer.as_str(), integer.radix())
                    .ok()
                    .filter(|n| (1..=MAX_WORK_ITEMS as i64).contains(n));
                if count.is_none() {
                    let message = format!(
                        "`work_items` must be between 1 and {MAX_WORK_ITEMS}, found {}",
                        self.raw(value)
                    );
                    self.report(value.span(), message, Some(COUNT_HELP.into()));
                }
                Some((0..count?).map(|i| i.to_string()).collect())
            }
            DeValue::Array(items) => self.work_item_names(value, items),
            _ => {
                let message = format!(
                    "`work_items` must be a number of items or an array of item names, found {}",
                    self.found(value)
                );
                self.report(value.span(), message, Some(COUNT_HELP.into()));
                None
            }
        }
    }

    /// `work_items` as the array `items`: at least one, at most [`MAX_WORK_ITEMS`], each a
    /// valid name, none twice.
    fn work_item_names(&mut self, value: &Value<'_>, items: &[Value<'_>]) -> Option<Arc<[String]>> {
        if items.is_empty() {
            let help = "list at least one item, or remove `work_items` to run each tick once";
            self.report(
                value.span(),
                "`work_items` is an empty array".into(),
                Some(help.into()),
            );
            return None;
        }
        if items.len() > MAX_WORK_ITEMS {
            let message = format!(
                "`work_items` lists {} items; a pool holds at most {MAX_WORK_ITEMS}",
                items.len()
            );
            let help = "let one item stand for several (a range of shards), or split the task \
                        into several task files";
            self.report(value.span(), message, Some(help.into()));
            return None;
        }
        let before = self.problems.len();
        let mut names: Vec<String> = Vec::with_capacity(items.len());
        for item in items {
            if let Some(name) = self.work_item_name(item, &names) {
                names.push(name);
            }
        }
        (self.problems.len() == before).then(|| names.into())
    }

    /// One element of a `work_items` array, if it is a valid name not among `earlier`.
    fn work_item_name(&mut self, item: &Value<'_>, earlier: &[String]) -> Option<String> {
        let Some(name) = item.get_ref().as_str() else {
            let message = format!(
                "every element of `work_items` must be a string, found {}",
                self.found(item)
            );
            let help = format!("quote it: \"{}\"", self.raw(item));
            self.report(item.span(), message, Some(help));
            return None;
        };
        if !is_valid_task_name(name) {
            let message = format!(
                "work item {name:?} is not a valid item name: names must match \
                 {WORK_ITEM_PATTERN}, because they become part of ZooKeeper paths"
            );
            let lower = name.to_ascii_lowercase();
            let help = if is_valid_task_name(&lower) {
                format!("did you mean {lower:?}?")
            } else {
                "use lowercase letters, digits, `.`, `_` and `-`, starting with a letter or digit"
                    .into()
            };
            self.report(self.content_span(item), message, Some(help));
            return None;
        }
        if let Some(first) = earlier.iter().position(|e| e == name) {
            let message = format!(
                "work item {name:?} is listed twice (it is also element {} of `work_items`)",
                first + 1
            );
            let help = "remove one of them: each item runs once per tick";
            self.report(item.span(), message, Some(help.into()));
            return None;
        }
        Some(name.to_string())
    }

    /// Where the task's ticks run, from `run_on` and `work_items` together: they exclude each
    /// other.
    pub(super) fn run_on(&mut self, keys: RunOnKeys) -> RunOn {
        match (keys.run_on, keys.work_items) {
            (Some((_, run_on_span)), Some(_)) => {
                let message = "`run_on` and `work_items` cannot be used together: a task with \
                               work items runs each tick on the nodes that own its items";
                let help = "remove `run_on`, or remove `work_items` to run the whole task";
                self.report(run_on_span, message.into(), Some(help.into()));
                RunOn::Leader
            }
            (Some((run_on, _)), None) => run_on,
            (None, Some((items, _))) => RunOn::Items(items),
            (None, None) => RunOn::Leader,
        }
    }
}
