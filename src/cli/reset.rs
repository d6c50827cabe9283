//! `zkcron reset`: the operator's way to move a local fire record that is ahead of the clock
//! back, with the daemon stopped.

use std::path::Path;
use std::process::ExitCode;

use chrono::{DateTime, Timelike, Utc};

use super::{ResetArgs, ResolvedDirs};
use crate::config::Backend;
use crate::coord::local::StateDirEditor;
use crate::task;

/// `zkcron reset TASK`: moves a fire record that is ahead of the clock back to now (or `--to`),
/// with the daemon stopped (it takes the daemon's lock on the state dir).
pub(super) fn reset(args: ResetArgs) -> anyhow::Result<ExitCode> {
    let dirs = args.dirs.resolve()?;
    let defaults = dirs.task_defaults();
    let ResolvedDirs {
        config,
        config_path,
        jobs_dir,
        state_dir,
        ..
    } = dirs;
    if config.coordination.backend == Backend::Zookeeper {
        anyhow::bail!(
            "zkcron reset moves fire records in the local backend's state dir, and {} selects the \
             zookeeper backend: moving a fire record back in a ZooKeeper cluster is not supported \
             yet",
            config_path
                .as_deref()
                .map_or("the config".into(), |p| p.display().to_string())
        );
    }
    let now = crate::clock::Clock::system().now();
    let to = reset_to(args.to, now)?;
    if !state_dir.is_dir() {
        anyhow::bail!(
            "the state dir {} does not exist, so it holds no fire records; point --state-dir or \
             [scheduler].state_dir at the daemon's state dir",
            state_dir.display()
        );
    }
    // Damage found while reading the state is logged, as the daemon would log it.
    crate::logging::init(config.log.format);
    let mut editor = StateDirEditor::open(&state_dir, now)?;
    let task = args.task.as_str();
    let Some(record) = editor.last_claimed(task) else {
        return Err(no_record(task, &editor, &defaults, &jobs_dir, &state_dir));
    };
    if record <= now {
        anyhow::bail!(
            "the fire record of task {task} ({}) is not ahead of the clock ({}), so nothing holds \
             it; zkcron reset only moves a record in the future back (moving a past one back would \
             run its ticks again)",
            instant(record),
            instant(now)
        );
    }
    editor.set_fire_record(task, to)?;
    println!(
        "zkcron: task {task}: fire record moved back from {} to {}.",
        instant(record),
        instant(to)
    );
    let due = if to < now {
        " (those already due per its catch_up)"
    } else {
        ""
    };
    println!(
        "Start zkcron to fire it: ticks after {} run when they come due{due}, those up to {} \
         included.",
        instant(to),
        instant(record)
    );
    Ok(ExitCode::SUCCESS)
}

/// An instant as the operator reads it.
fn instant(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// Where the record moves to: `--to` (`to`) or `now`, rounded down to a whole second (ticks are
/// whole seconds; so is a fire record), and never in the future.
fn reset_to(to: Option<DateTime<Utc>>, now: DateTime<Utc>) -> anyhow::Result<DateTime<Utc>> {
    let to = to.unwrap_or(now);
    let to = to.with_nanosecond(0).unwrap_or(to);
    if to > now {
        anyhow::bail!(
            "--to {} is in the future: the record would hold the task again; give an instant at \
             or before now ({})",
            instant(to),
            instant(now)
        );
    }
    Ok(to)
}

/// The error for a `task` with no fire record in `state_dir`: a task defined in `jobs_dir` that
/// never fired, or an unknown task (with the closest name defined or recorded).
fn no_record(
    task: &str,
    editor: &StateDirEditor,
    defaults: &task::TaskDefaults,
    jobs_dir: &Path,
    state_dir: &Path,
) -> anyhow::Error {
    let defined: Vec<String> = task::load_jobs_dir(jobs_dir, defaults)
        .map(|loaded| {
            loaded
                .tasks
                .into_iter()
                .map(|t| t.name.to_string())
                .collect()
        })
        .unwrap_or_default();
    if defined.iter().any(|name| name == task) {
        return anyhow::anyhow!(
            "task {task} has no fire record in {}: it has not fired with this state dir, so \
             nothing holds it",
            state_dir.display()
        );
    }
    let known = defined.iter().map(String::as_str).chain(editor.tasks());
    let hint = task::closest(task, known)
        .map(|name| format!("; did you mean {name}?"))
        .unwrap_or_default();
    anyhow::anyhow!(
        "unknown task {task}: no task file {task}.toml in {} and no fire record in {}{hint}",
        jobs_dir.display(),
        state_dir.display()
    )
}
