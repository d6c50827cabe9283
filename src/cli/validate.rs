//! `zkcron validate`: what `run` would refuse (the config, the preflight checks, the task
//! files) as errors, and as notes what this node would not take part in (a pool of work items
//! or a task that runs on every node whose requirements this node does not meet) and the ticks
//! of the next 12 months that a clock change touches.

use std::path::Path;
use std::process::ExitCode;

use super::ValidateArgs;
use crate::accounts::Identity;
use crate::clock::Clock;
use crate::config::{self, Backend, Config};
use crate::files::{self, PathProblem};
use crate::preflight::{self, Overrides, Plan, config_path, host_name};
use crate::task::{self, LoadedDir, RunOn, TaskDefaults, TaskSpec};

pub(super) fn validate(args: ValidateArgs) -> anyhow::Result<ExitCode> {
    let mut errors = 0usize;
    let mut tasks = 0usize;
    let config_path = config_path(&args.config);
    let (config, config_error) = match &config_path {
        Some(path) => config::load_config_partial(path),
        None => (Config::default(), None),
    };
    let flags = Overrides {
        calendars_dir: calendars_dir(&args, &config),
        ..Overrides::default()
    };
    let plan = Plan::resolve(config, config_path, flags, Identity::current(), host_name);
    match config_error {
        Some(error) => {
            eprintln!("{error}\n");
            errors += error.problems.len();
        }
        // What `run` would refuse to start with (the jobs dir is checked by loading it). With a
        // broken config `run` does not get that far.
        None => {
            for problem in preflight::check(&plan) {
                eprintln!("{problem}\n");
                errors += 1;
            }
        }
    }
    let (defaults, calendar_errors) = plan.task_defaults();
    for error in &calendar_errors {
        eprintln!("{error}\n");
    }
    errors += calendar_errors.len();
    let loads = if args.paths.is_empty() {
        vec![task::load_jobs_dir(&plan.jobs_dir, &defaults)]
    } else {
        args.paths
            .iter()
            .map(|path| load_path(path, &defaults))
            .collect()
    };
    for load in loads {
        match load {
            Ok(loaded) => {
                tasks += loaded.tasks.len();
                let now = Clock::system().now();
                for note in loaded.tasks.iter().flat_map(|spec| {
                    [
                        share_note(&plan, spec),
                        super::schedule_cmd::dst_note(spec, now),
                    ]
                    .into_iter()
                    .flatten()
                }) {
                    println!("{note}\n");
                }
                for error in &loaded.errors {
                    eprintln!("{error}\n");
                }
                errors += loaded.errors.len();
            }
            Err(problems) => {
                for problem in &problems {
                    eprintln!("{problem}\n");
                }
                errors += problems.len();
            }
        }
    }
    if errors > 0 {
        println!("zkcron: {errors} error(s); {tasks} valid task(s)");
        Ok(ExitCode::from(1))
    } else {
        println!("zkcron: configuration OK; {tasks} valid task(s)");
        Ok(ExitCode::SUCCESS)
    }
}

/// Loads a task file or a directory of them (whatever is at `path` that is not a directory is
/// read as a task file, which names what it is when it is not one).
fn load_path(path: &Path, defaults: &TaskDefaults) -> Result<LoadedDir, Vec<PathProblem>> {
    if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        return task::load_jobs_dir(path, defaults);
    }
    if let Err(error) = std::fs::symlink_metadata(path) {
        let message = match error.kind() {
            std::io::ErrorKind::NotFound => "no such file or directory".to_string(),
            std::io::ErrorKind::NotADirectory => {
                format!("cannot read it: {}", files::not_a_directory(path, &error))
            }
            _ => format!("cannot read it: {error}"),
        };
        return Err(vec![PathProblem {
            path: path.to_path_buf(),
            message,
            help: Some(
                "check the path: validate takes task files and directories of them".to_string(),
            ),
        }]);
    }
    let mut loaded = LoadedDir::default();
    match task::load_task_file(path, defaults) {
        Ok(spec) => loaded.tasks.push(spec),
        Err(errors) => loaded.errors.extend(errors),
    }
    Ok(loaded)
}

/// The calendars dir `validate` reads: `--calendars-dir`; else, for files checked from
/// elsewhere, the one beside them (unless the config names one); else the config's.
fn calendars_dir(args: &ValidateArgs, config: &Config) -> Option<std::path::PathBuf> {
    let beside_paths = args
        .paths
        .first()
        .filter(|_| config.scheduler.calendars_dir.is_none())
        .map(|path| {
            let jobs = if path.is_dir() {
                path.as_path()
            } else {
                path.parent().unwrap_or(path)
            };
            config.calendars_dir_or_default(jobs)
        });
    args.calendars_dir.clone().or(beside_paths)
}

/// Why this node takes no share of `spec` in a cluster, when `spec` is split over the nodes
/// (`work_items`) or runs on each (`run_on = "every_node"`) and this node's release or labels
/// do not meet its `version_req` or `require_labels`. A note, not an error: other nodes may
/// meet them; when no live node does, `zkcron status` says `no live node may run it`. `None`
/// for other tasks, a disabled one, the embedded backend (it runs every task), or when this
/// node takes its share.
fn share_note(plan: &Plan, spec: &TaskSpec) -> Option<String> {
    if plan.backend != Backend::Zookeeper || !spec.enabled {
        return None;
    }
    let share = match &spec.extras.run_on {
        RunOn::Leader => return None,
        RunOn::EveryNode => "does not run it on its own".to_string(),
        RunOn::Items(items) => format!("takes none of its {} work items", items.len()),
    };
    let why = spec.ineligibility(&plan.release, &plan.config.node.labels)?;
    Some(format!(
        "note: {}: task {}: this node ({}) {share}: {why}; it runs on the nodes that meet it, \
         and `zkcron status` says `no live node may run it` while none does",
        spec.path.display(),
        spec.name,
        plan.node_id
    ))
}
