//! The operator's marks: drain and pause, and the reports about tasks no live
//! node may run and tasks live nodes define differently.
//!
//! - `control/drained/<node-id>`: this node's own mark makes it re-register with `drained:
//!   true, leads: false` (so it leads nothing, and nodes of older releases, which do not know
//!   `drained`, rank without it too) and release every lease; it stays registered, and its
//!   running jobs finish (timers never own processes). The mark is read during session setup,
//!   before registering, so a drained node never leads between a restart and the read.
//! - `control/paused/<task>`: a paused task is in [`Leadership::paused_tasks`]; the leader
//!   keeps its lease and fires nothing ([`Leadership::may_fire`]).
//!
//! Both directories are created at session setup (and again when deleted), watched with
//! persistent recursive watches, and read again with every re-listing after a reconnect (a
//! persistent watch delivers nothing of what happened while disconnected).
//!
//! [`Leadership::paused_tasks`]: crate::coord::Leadership::paused_tasks
//! [`Leadership::may_fire`]: crate::coord::Leadership::may_fire

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::io::{Level, Output, WatchKind, ZkFail, ZkOk, ZkOp};
use super::{MemberStep, TaskStep};
use super::{Node, Then};
use crate::coord::ClaimIntent;
use crate::coord::lease::{self, Member, TaskEntry, TaskSet};
use crate::coord::records::MarkRecord;

/// What the node knows of the operator's marks, and the problems it last reported.
#[derive(Debug, Default)]
pub(crate) struct Control {
    /// This node's drain mark (`Some(None)`: present but unreadable).
    drained: Option<Option<MarkRecord>>,
    /// The paused tasks and their marks (`None`: unreadable or not read yet, still a pause).
    paused: BTreeMap<String, Option<MarkRecord>>,
    /// Tasks paused at their mark's creation event whose pause is reported once the mark is
    /// read.
    unreported: BTreeSet<String>,
    /// The member view changed: look for tasks no live node may run and for drift again.
    pub(super) check_due: bool,
    /// The last reported "no live node may run it", by task.
    problems: BTreeMap<String, String>,
    /// The last reported drift, by task.
    drift: BTreeMap<String, String>,
    /// A re-read of the marks is scheduled (`Timer::ControlRead`).
    reread_due: bool,
}

/// How long after a failed read of a mark the marks are read again.
const REREAD_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// At most this many tasks are reported one by one per check; the rest in one line (a drained
/// single node would otherwise log a line for each of its thousands of tasks).
const REPORTS_PER_CHECK: usize = 20;

/// One read of the marks.
#[derive(Debug)]
pub(crate) enum ControlRead {
    /// This node's drain mark.
    Drain,
    /// The list of paused tasks.
    PausedList,
    /// One task's pause mark.
    Paused(String),
}

/// Which piece of work a read of the marks is part of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Session setup: counted in `setup_outstanding`, so registration waits for it.
    Setup,
    /// A re-listing after a reconnect: counted in its outstanding calls.
    Relist,
    /// A watch event.
    Event,
}

impl Node {
    /// Whether this node's own drain mark is present (as last read).
    pub(super) fn drained(&self) -> bool {
        self.control.drained.is_some()
    }

    /// The control directories, parent first.
    fn control_dirs(&self) -> [String; 3] {
        [
            self.paths.control(),
            self.paths.drained(),
            self.paths.paused_dir(),
        ]
    }

    /// The setup calls: the directories and their watches (before any read, so no change
    /// between a read and the watch is missed).
    pub(super) fn control_setup_ops(&self) -> Vec<ZkOp> {
        let mut ops: Vec<ZkOp> = self
            .control_dirs()
            .into_iter()
            .map(|path| self.create_dir(path))
            .collect();
        for path in [self.paths.drained(), self.paths.paused_dir()] {
            ops.push(ZkOp::AddPersistentRecursiveWatch { path });
        }
        ops
    }

    /// Reads this node's drain mark and every pause mark. Returns the number of calls sent
    /// (what the phase counts).
    pub(super) fn read_control(&mut self, phase: Phase) -> usize {
        let path = self.paths.drain(&self.cfg.id);
        self.call(
            ZkOp::GetData { path },
            Then::Control {
                read: ControlRead::Drain,
                phase,
            },
        );
        let path = self.paths.paused_dir();
        self.call(
            ZkOp::GetChildren { path },
            Then::Control {
                read: ControlRead::PausedList,
                phase,
            },
        );
        2
    }

    fn read_pause(&mut self, task: String, phase: Phase) {
        let path = self.paths.paused(&task);
        self.call(
            ZkOp::GetData { path },
            Then::Control {
                read: ControlRead::Paused(task),
                phase,
            },
        );
    }

    pub(super) fn on_control(
        &mut self,
        read: ControlRead,
        phase: Phase,
        result: Result<ZkOk, ZkFail>,
    ) {
        let outcome = match read {
            ControlRead::Drain => match result {
                Ok(ZkOk::Data(data, _)) => {
                    self.set_drained(Some(serde_json::from_slice(&data).ok()));
                    Ok(())
                }
                Ok(_) | Err(ZkFail::NoNode) => {
                    self.set_drained(None);
                    Ok(())
                }
                Err(error) => Err(("reading this node's drain mark", error)),
            },
            ControlRead::PausedList => self.on_paused_list(phase, result),
            ControlRead::Paused(task) => match result {
                Ok(ZkOk::Data(data, _)) => {
                    self.set_paused(task, Some(serde_json::from_slice(&data).ok()));
                    Ok(())
                }
                Ok(_) | Err(ZkFail::NoNode) => {
                    self.set_paused(task, None);
                    Ok(())
                }
                Err(error) => Err(("reading a pause mark", error)),
            },
        };
        self.control_read_done(phase, outcome);
    }

    /// The listing of the pause marks: the tasks no longer listed are resumed, and each mark
    /// listed is read.
    fn on_paused_list(
        &mut self,
        phase: Phase,
        result: Result<ZkOk, ZkFail>,
    ) -> Result<(), (&'static str, ZkFail)> {
        match result {
            Ok(ZkOk::Children(names)) => {
                let listed: BTreeSet<&String> = names.iter().collect();
                let gone: Vec<String> = self
                    .control
                    .paused
                    .keys()
                    .filter(|t| !listed.contains(t))
                    .cloned()
                    .collect();
                for task in gone {
                    self.set_paused(task, None);
                }
                self.count_reads(phase, names.len());
                for task in names {
                    self.read_pause(task, phase);
                }
                Ok(())
            }
            Ok(_) | Err(ZkFail::NoNode) => {
                // Deleted (its watch event recreates it): nothing is paused.
                let all: Vec<String> = self.control.paused.keys().cloned().collect();
                for task in all {
                    self.set_paused(task, None);
                }
                Ok(())
            }
            Err(error) => Err(("listing the paused tasks", error)),
        }
    }

    /// One read of the marks is done: the phase it belongs to goes on, or a failed read after
    /// a watch event has the marks read again.
    fn control_read_done(&mut self, phase: Phase, outcome: Result<(), (&'static str, ZkFail)>) {
        match (phase, outcome) {
            (Phase::Setup, Ok(())) => self.setup_step_done(),
            (Phase::Setup, Err((_, error))) => self.on_setup_step(Err(error)),
            (Phase::Relist, Ok(())) => self.relist_step(),
            (Phase::Relist, Err((what, error))) => self.relist_failed(what, error),
            (Phase::Event, Ok(())) => {}
            (Phase::Event, Err((what, error))) => {
                // The view of the marks may be stale. A lost connection re-reads them with the
                // re-listing after the reconnect (or the new session's setup); anything else is
                // read again in a second, once however many reads failed.
                if matches!(error, ZkFail::ConnectionLoss | ZkFail::SessionExpired)
                    || self.control.reread_due
                {
                    return;
                }
                self.report(
                    Level::Warn,
                    format!(
                        "{what} failed ({error}); reading the drain and pause marks again in 1s"
                    ),
                );
                self.control.reread_due = true;
                let generation = self.io.generation;
                self.at(
                    self.io.now.mono + REREAD_AFTER,
                    super::Timer::ControlRead { generation },
                );
            }
        }
    }

    pub(super) fn reread_control(&mut self, generation: u64) {
        self.control.reread_due = false;
        if generation == self.io.generation && self.life.session.is_some() {
            self.read_control(Phase::Event);
        }
    }

    /// More reads belong to `phase`.
    fn count_reads(&mut self, phase: Phase, count: usize) {
        match phase {
            Phase::Setup => {
                if let Some(outstanding) = self
                    .life
                    .session
                    .as_mut()
                    .and_then(|s| s.setup_outstanding.as_mut())
                {
                    *outstanding += count;
                }
            }
            Phase::Relist => self.relist_more(count),
            Phase::Event => {}
        }
    }

    fn set_drained(&mut self, mark: Option<Option<MarkRecord>>) {
        if mark.is_some() == self.control.drained.is_some() {
            self.control.drained = mark;
            return;
        }
        let id = self.cfg.id.clone();
        match &mark {
            Some(mark) => {
                self.report(
                    Level::Warn,
                    format!(
                        "drained{}: this node leads no task until `zkcron undrain {id}`; its running jobs finish",
                        mark_words(mark.as_ref())
                    ),
                )
                .field("node", &id);
            }
            None => {
                self.report(Level::Info, "undrained: this node may lead tasks again")
                    .field("node", &id);
            }
        }
        self.control.drained = mark;
        self.control.check_due = true;
        // The member record says it (`drained`, `leads`), and the leases follow.
        self.maybe_register();
        self.decide();
    }

    /// Whether `task` is paused, as last read.
    pub(super) fn is_paused(&self, task: &str) -> bool {
        self.control.paused.contains_key(task)
    }

    fn set_paused(&mut self, task: String, mark: Option<Option<MarkRecord>>) {
        let defines = self
            .view
            .my_set
            .as_ref()
            .is_some_and(|(_, _, set)| set.contains_key(&task));
        let unreported = self.control.unreported.remove(&task);
        match mark {
            Some(mark) => {
                let new = !self.control.paused.contains_key(&task);
                if (new || unreported) && defines {
                    self.report(
                        Level::Info,
                        format!("task {task} is paused{}", mark_words(mark.as_ref())),
                    )
                    .field("task", &task);
                }
                self.control.paused.insert(task, mark);
                if !new {
                    return;
                }
            }
            None => {
                if self.control.paused.remove(&task).is_none() {
                    return;
                }
                if defines && !unreported {
                    self.report(Level::Info, format!("task {task} is no longer paused"))
                        .field("task", &task);
                }
            }
        }
        self.publish_paused();
    }

    /// A pause mark of `task` was created: the task is paused at once, before its mark is
    /// read. ZooKeeper delivers a session's watch events and replies in commit order, so every
    /// claim answered from now on was committed after the pause (see
    /// [`Node::withhold_paused_run`]); the pause is reported when the mark is read.
    fn pause_arrived(&mut self, task: &str) {
        if self.control.paused.contains_key(task) {
            return;
        }
        self.control.paused.insert(task.to_string(), None);
        self.control.unreported.insert(task.to_string());
        self.publish_paused();
    }

    /// Publishes the paused tasks with the leadership.
    fn publish_paused(&mut self) {
        let paused: BTreeSet<String> = self.control.paused.keys().cloned().collect();
        self.leases.leadership.paused_tasks = Arc::new(paused);
        self.io
            .out
            .push_back(Output::Leadership(self.leases.leadership.clone()));
    }

    /// A claim of `tick` of `task` (a task, or one of its units) to run it was applied while
    /// this node knows the task paused: its pause mark arrived before the claim's reply, so the
    /// claim was committed after the pause, and no tick claimed after a pause runs. The run
    /// does not start: its run znodes (`run_paths`) are deleted and the caller answers that
    /// the tick is claimed already (consumed, as any tick of a paused period). Returns whether
    /// it was withheld. The start of a queued tick (`RunQueued`) is left as it is: its tick
    /// was claimed before, and the node does not start one of a paused task itself.
    pub(super) fn withhold_paused_run(
        &mut self,
        task: &str,
        tick: DateTime<Utc>,
        intent: ClaimIntent,
        run_paths: &[String],
    ) -> bool {
        let task = self.task_of(task);
        if intent != ClaimIntent::Run || !self.is_paused(task) {
            return false;
        }
        self.report(
            Level::Info,
            format!("tick {tick} of task {task} was claimed while the task's pause was arriving; it is not run"),
        )
        .field("task", task)
        .field("tick", tick);
        self.runs.withheld_runs.extend(run_paths.iter().cloned());
        for path in run_paths {
            self.delete_withheld_run(path.clone());
        }
        true
    }

    fn delete_withheld_run(&mut self, path: String) {
        let zk = ZkOp::Delete {
            path: path.clone(),
            version: None,
        };
        self.call(zk, TaskStep::WithheldRun { path });
    }

    /// Sends again the deletes of withheld runs not confirmed (on reconnecting within the
    /// session: a delete whose answer was lost may not have been applied).
    pub(super) fn delete_withheld_runs(&mut self) {
        let paths: Vec<String> = self.runs.withheld_runs.iter().cloned().collect();
        for path in paths {
            self.delete_withheld_run(path);
        }
    }

    /// A withheld run's znode is gone once deleted (or found gone); any other outcome leaves
    /// it to be deleted again on reconnecting, or to go with the session.
    pub(super) fn on_withheld_run_deleted(&mut self, path: String, result: Result<ZkOk, ZkFail>) {
        match result {
            Ok(_) | Err(ZkFail::NoNode) => {
                self.runs.withheld_runs.remove(&path);
            }
            Err(error) => {
                self.report(
                    Level::Warn,
                    "deleting the run record of a tick withheld by its task's pause failed; deleting it again on reconnecting",
                )
                .field("path", &path)
                .field("error", &error);
            }
        }
    }

    /// A watch event under `control/`: returns false when `path` is not there.
    pub(super) fn on_control_event(&mut self, path: &str, kind: WatchKind) -> bool {
        let drained = self.paths.drained();
        let paused = self.paths.paused_dir();
        if path == drained || path == paused {
            if kind == WatchKind::Deleted {
                self.report(Level::Warn, format!("{path} was deleted; recreating it"));
                for path in self.control_dirs() {
                    self.call(
                        self.create_dir(path.clone()),
                        MemberStep::RecreateDir { path },
                    );
                }
            }
            return true;
        }
        if let Some(id) = path
            .strip_prefix(&drained)
            .and_then(|rest| rest.strip_prefix('/'))
        {
            if id == self.cfg.id {
                let path = self.paths.drain(id);
                self.call(
                    ZkOp::GetData { path },
                    Then::Control {
                        read: ControlRead::Drain,
                        phase: Phase::Event,
                    },
                );
            }
            return true;
        }
        if let Some(task) = path
            .strip_prefix(&paused)
            .and_then(|rest| rest.strip_prefix('/'))
        {
            if kind == WatchKind::Created {
                self.pause_arrived(task);
            }
            self.read_pause(task.to_string(), Phase::Event);
            return true;
        }
        false
    }

    // ---- tasks no live node may run, and drift ----

    /// Reports, once per change, each task this node defines that no live member may run, and
    /// each task live members define differently (`check_due` set by member changes).
    pub(super) fn check_tasks(&mut self) {
        if !std::mem::take(&mut self.control.check_due) {
            return;
        }
        let Some((_, _, mine)) = self.view.my_set.clone() else {
            return;
        };
        let members: Vec<&Member> = self.view.members.values().map(|m| &m.member).collect();
        // Members sharing a task set share its entries: look each task up once per set.
        let mut sets: Vec<(&Arc<TaskSet>, Vec<&Member>)> = Vec::new();
        for member in &members {
            match sets
                .iter_mut()
                .find(|(set, _)| Arc::ptr_eq(set, &member.tasks))
            {
                Some((_, group)) => group.push(member),
                None => sets.push((&member.tasks, vec![member])),
            }
        }
        let mut problems = BTreeMap::new();
        let mut drift = BTreeMap::new();
        for task in mine.keys() {
            let (problem, drifted) = judge_task(task, &sets);
            if let Some(problem) = problem {
                problems.insert(task.clone(), problem);
            }
            if let Some(drifted) = drifted {
                drift.insert(task.clone(), drifted);
            }
        }
        let old = std::mem::take(&mut self.control.problems);
        self.report_changes(&old, &problems, "a live node may run it again");
        if old.keys().ne(problems.keys()) {
            self.leases.leadership.no_eligible = Arc::new(problems.keys().cloned().collect());
            self.io
                .out
                .push_back(Output::Leadership(self.leases.leadership.clone()));
        }
        self.control.problems = problems;
        let old = std::mem::take(&mut self.control.drift);
        self.report_changes(&old, &drift, "live nodes define it alike again");
        self.control.drift = drift;
    }

    fn report_changes(
        &mut self,
        old: &BTreeMap<String, String>,
        new: &BTreeMap<String, String>,
        cleared: &str,
    ) {
        let changed: Vec<(&String, &String)> = new
            .iter()
            .filter(|(task, message)| old.get(*task) != Some(*message))
            .collect();
        for (task, message) in changed.iter().take(REPORTS_PER_CHECK) {
            self.report(Level::Warn, (*message).clone())
                .field("task", task);
        }
        if changed.len() > REPORTS_PER_CHECK {
            let (first, _) = changed[REPORTS_PER_CHECK];
            let more = changed.len() - REPORTS_PER_CHECK;
            self.report(
                Level::Warn,
                format!(
                    "and {more} more tasks likewise (from {first} on, by name); `zkcron status` lists them"
                ),
            );
        }
        let defined = self.view.my_set.as_ref().map(|(_, _, set)| set.clone());
        let gone: Vec<&String> = old
            .keys()
            .filter(|task| !new.contains_key(*task))
            .filter(|task| defined.as_ref().is_some_and(|set| set.contains_key(*task)))
            .collect();
        for task in gone.iter().take(REPORTS_PER_CHECK) {
            self.report(Level::Info, format!("task {task}: {cleared}"))
                .field("task", task);
        }
        if gone.len() > REPORTS_PER_CHECK {
            let more = gone.len() - REPORTS_PER_CHECK;
            self.report(Level::Info, format!("and {more} more tasks: {cleared}"));
        }
    }
}

/// " since <at> by <by>" for a mark, or nothing for an unreadable one.
fn mark_words(mark: Option<&MarkRecord>) -> String {
    match mark {
        Some(mark) => format!(
            " since {} by {}",
            mark.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            mark.by
        ),
        None => String::new(),
    }
}

/// What to say of `task` given the live members' task sets (`sets`: each distinct set with the
/// members sharing it): that no live node may run it, and that live nodes define it
/// differently (`None`: nothing to say).
fn judge_task(
    task: &str,
    sets: &[(&Arc<TaskSet>, Vec<&Member>)],
) -> (Option<String>, Option<String>) {
    // The definitions of `task` among live members: one per distinct task set.
    let entries: Vec<(&TaskEntry, &Vec<&Member>)> = sets
        .iter()
        .filter_map(|(set, group)| set.get(task).map(|entry| (entry, group)))
        .collect();
    if entries.is_empty() {
        return (None, None); // not registered yet: nothing to say
    }
    let runnable = entries.iter().any(|(entry, group)| {
        group
            .iter()
            .any(|m| m.may_lead && entry.admits(&m.release, &m.labels))
    });
    let drifted = entries.iter().any(|(e, _)| e.digest != entries[0].0.digest);
    if runnable && !drifted {
        return (None, None);
    }
    let mut defining: Vec<(&Member, &TaskEntry)> = entries
        .iter()
        .flat_map(|(entry, group)| group.iter().map(move |m| (*m, *entry)))
        .collect();
    defining.sort_by(|a, b| a.0.id.cmp(&b.0.id));
    let problem = (!runnable).then(|| {
        format!(
            "task {task}: no live node may run it: {}",
            lease::why_none_eligible(&defining)
        )
    });
    let drift = drifted.then(|| {
        let mut digests: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (member, entry) in &defining {
            digests
                .entry(entry.digest.as_str())
                .or_default()
                .push(member.id.as_str());
        }
        let groups: Vec<String> = digests
            .iter()
            .map(|(digest, ids)| format!("{} on {}", &digest[..digest.len().min(12)], ids.join(", ")))
            .collect();
        format!(
            "task {task}: live nodes define it differently: {}; the leader runs its own definition; make the task files equal",
            groups.join("; ")
        )
    });
    (problem, drift)
}
