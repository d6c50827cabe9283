//! The `zkcron` command line: argument parsing and the subcommands' output.
//!
//! Parsing happens in two layers, as in ripgrep: clap checks what the user wrote (usage errors
//! exit 2), then each subcommand builds the real objects from validated config and task files
//! (invalid input exits 1). `validate` only parses and checks; `run` builds the live daemon.
//!
//! Files: `validate` (`zkcron validate`), `reset` (`zkcron reset`: a local fire record ahead of
//! the clock moved back, with the daemon stopped), `next` (`zkcron next [TASK]`), `schedule_cmd`
//! (`zkcron schedule`, with `--dst` the ticks a clock change touches, with `--exclude` those a
//! calendar removes; `validate`'s note of them).

mod next;
mod reset;
mod schedule_cmd;
mod validate;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use chrono::{DateTime, Utc};
use clap::{Args, CommandFactory, Parser, Subcommand};

use crate::accounts::Identity;
use crate::clock::Clock;
use crate::config::Backend;
use crate::config::{self, Config};
use crate::coord::local::{self, LocalCoordinator};
use crate::coord::zk::ZkCoordinator;
use crate::daemon::{Daemon, DaemonConfig, control};
use crate::ops::render::instant;
use crate::ops::{self, OpsCommand};
use crate::plan::{self, PlanRules, Step, TickPlanner};
use crate::preflight::{
    self, ConfigArgs, Overrides, Plan, host_name, parse_connect, resolve_config,
};
use crate::schedule::WindowState;
use crate::task;

/// A distributed cron daemon: every node loads the same task files; a tick never runs twice, and
/// a tick nobody claimed is caught up.
#[derive(Debug, Parser)]
#[command(
    name = "zkcron",
    version,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: fire the tasks of the jobs dir on their schedules.
    Run(RunArgs),
    /// Check the config and task files; print every error; exit 1 if there is any.
    Validate(ValidateArgs),
    /// Print the next fire instants of a schedule expression.
    Schedule(ScheduleArgs),
    /// Print each task's next fire.
    Next(NextArgs),
    /// Move a task's fire record back from the future (after the clock ran ahead), so that the
    /// task fires from now on; the daemon must be stopped.
    Reset(ResetArgs),
    /// Show the nodes and tasks: leaders, next and last runs, problems (like `systemctl
    /// list-timers`).
    Status(ops::args::StatusArgs),
    /// Explain who may lead a task and why it is or is not firing (a cluster command).
    Explain(ops::args::ExplainArgs),
    /// Print a task's last runs, newest first.
    History(ops::args::HistoryArgs),
    /// Print a run's output, kept by the node that ran it (default: the task's newest run)
    Logs(ops::args::LogsArgs),
    /// Run a task now, once, on its leader.
    Trigger(ops::args::TriggerArgs),
    /// Run each tick of a task's schedule in a past range once, oldest first, on its leader;
    /// list (--status) or cancel (--cancel) backfills.
    Backfill(ops::args::BackfillArgs),
    /// Stop a task from firing, cluster-wide, until `zkcron resume`.
    Pause(ops::args::PauseArgs),
    /// Let a paused task fire again; the ticks of the paused period are not caught up.
    Resume(ops::args::TaskArgs),
    /// Make a node own no task (it stays registered; its running jobs finish), e.g. before
    /// maintenance (a cluster command).
    Drain(ops::args::DrainArgs),
    /// Let a drained node own tasks again (a cluster command).
    Undrain(ops::args::DrainArgs),
    /// Print a shell completion script to standard output.
    Completions(CompletionsArgs),
    /// Print a manual page in roff to standard output: zkcron(1), or zkcron-task(5).
    #[command(hide = true)]
    Man(crate::manual::ManArgs),
}

// The field docs are clap's help text, which shows `[section].key` and `[/chroot]` as written:
// rustdoc must not read them as links.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The directory of task files [default: [scheduler].jobs_dir, else jobs.d beside the config,
    /// else ./jobs.d]
    #[arg(long, value_name = "DIR")]
    pub jobs_dir: Option<PathBuf>,
    /// The directory of calendar files, the days and periods a task's `exclude` names
    /// [default: [scheduler].calendars_dir, else calendars.d beside the jobs dir]
    #[arg(long, value_name = "DIR")]
    pub calendars_dir: Option<PathBuf>,
    /// Where fire records are kept [default: [scheduler].state_dir, else $STATE_DIRECTORY, else
    /// the user's state dir]
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// This node's id [default: [node].id, else the host name]
    #[arg(long, value_name = "ID")]
    pub node_id: Option<String>,
    /// Use the ZooKeeper backend at HOST:PORT[,HOST:PORT...][/chroot] [default:
    /// [coordination.zookeeper].connect when [coordination].backend = "zookeeper"]
    #[arg(long, value_name = "CONNECT", value_parser = parse_connect)]
    pub zookeeper: Option<String>,
    /// The cluster to join; nodes of one cluster share tasks [default:
    /// [coordination.zookeeper].cluster, else "default"]
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
    /// The release this node announces for ranking and version_req [default: [node].version,
    /// else this binary's version]
    #[arg(long, value_name = "SEMVER", value_parser = parse_semver)]
    pub node_version: Option<semver::Version>,
}

fn parse_semver(value: &str) -> Result<semver::Version, String> {
    semver::Version::parse(value)
        .map_err(|e| format!("{e}; write a semantic version like 2.1.0 or 2.2.0-rc.1"))
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Task files or directories to check [default: the jobs dir of the config]
    #[arg(value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// The calendars the tasks may exclude [default: [scheduler].calendars_dir, else
    /// calendars.d beside the jobs dir, or beside the first PATH's dir]
    #[arg(long, value_name = "DIR")]
    pub calendars_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ScheduleArgs {
    /// A cron expression (5 fields, or 6 with seconds first), an alias like @daily, or an
    /// interval like "@every 15m" (multiples since the Unix epoch; "@every 1h/10m" adds 10 min)
    #[arg(value_name = "EXPR")]
    pub expression: String,
    /// The IANA time zone the expression is read in (an interval does not read it: its
    /// instants are only shown in it)
    #[arg(long, value_name = "TZ", default_value = "UTC")]
    pub tz: String,
    /// Count from this instant (RFC 3339) [default: now]
    #[arg(long, value_name = "RFC3339", value_parser = parse_rfc3339)]
    pub after: Option<DateTime<Utc>>,
    /// How many instants to print
    #[arg(
        short = 'n',
        long = "iterations",
        value_name = "N",
        default_value_t = 5
    )]
    pub count: usize,
    /// List the ticks of the next 12 months that a clock change moves, skips or doubles,
    /// instead of the next instants
    #[arg(long)]
    pub dst: bool,
    /// What a local time skipped by spring-forward does, as a task's `dst_gap` [default:
    /// cronie's rule for the expression]
    #[arg(long, value_name = "RULE", value_parser = ["run_after", "skip"])]
    pub dst_gap: Option<String>,
    /// What a local time repeated by fall-back does, as a task's `dst_repeat` [default:
    /// cronie's rule for the expression]
    #[arg(long, value_name = "RULE", value_parser = ["first", "both"])]
    pub dst_repeat: Option<String>,
    /// Leave out the ticks in this calendar's days and periods, as a task's `exclude`, and say
    /// which it removes (repeat it for several)
    #[arg(long, value_name = "CALENDAR")]
    pub exclude: Vec<String>,
    /// Where the calendars are [default: [scheduler].calendars_dir of the config, else
    /// calendars.d beside its jobs dir]
    #[arg(long, value_name = "DIR")]
    pub calendars_dir: Option<PathBuf>,
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// Where a node's tasks and fire records are, for the commands that read them beside `run`.
#[derive(Debug, Args)]
pub struct NodeDirs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The directory of task files [default: as for `run`]
    #[arg(long, value_name = "DIR")]
    pub jobs_dir: Option<PathBuf>,
    /// The directory of calendar files [default: as for `run`]
    #[arg(long, value_name = "DIR")]
    pub calendars_dir: Option<PathBuf>,
    /// Where the local backend keeps fire records [default: as for `run`]
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

/// [`NodeDirs`] with the defaults `run` uses filled in.
struct ResolvedDirs {
    config: Config,
    config_path: Option<PathBuf>,
    jobs_dir: PathBuf,
    calendars_dir: PathBuf,
    state_dir: PathBuf,
    /// The flags that point `zkcron reset` at the same tasks and state.
    reset_flags: String,
}

impl ResolvedDirs {
    /// What task files default to for these dirs, with the calendars they may exclude; a
    /// broken calendar file is said on stderr (the tasks that name it are then refused).
    fn task_defaults(&self) -> task::TaskDefaults {
        let identity = Identity::current();
        let mut defaults = self.config.task_defaults(
            identity.clone(),
            self.config.coordination.backend.for_tasks(),
        );
        let loaded = task::load_calendars_dir(&self.calendars_dir, &identity, &Default::default());
        for error in &loaded.errors {
            eprintln!("{error}\n");
        }
        defaults.calendars = Arc::new(loaded.calendars);
        defaults
    }
}

impl NodeDirs {
    fn resolve(&self) -> Result<ResolvedDirs, config::ConfigError> {
        let (config, config_path) = resolve_config(&self.config)?;
        let jobs_dir = self
            .jobs_dir
            .clone()
            .unwrap_or_else(|| config.jobs_dir_or_default(config_path.as_deref()));
        let calendars_dir = self
            .calendars_dir
            .clone()
            .unwrap_or_else(|| config.calendars_dir_or_default(&jobs_dir));
        let state_dir = self
            .state_dir
            .clone()
            .unwrap_or_else(|| config.state_dir_or_default());
        let reset_flags = reset_flags(
            self.config.config.as_deref(),
            self.jobs_dir.as_deref(),
            &state_dir,
        );
        Ok(ResolvedDirs {
            config,
            config_path,
            jobs_dir,
            calendars_dir,
            state_dir,
            reset_flags,
        })
    }
}

#[derive(Debug, Args)]
pub struct NextArgs {
    /// Only this task [default: every task]
    #[arg(value_name = "TASK")]
    pub task: Option<String>,
    #[command(flatten)]
    pub dirs: NodeDirs,
}

#[derive(Debug, Args)]
pub struct ResetArgs {
    /// The task whose fire record to move back
    #[arg(value_name = "TASK")]
    pub task: String,
    /// Move the record to this instant (RFC 3339, not in the future) instead of now; ticks after
    /// it that are already due are then caught up per the task's catch_up
    #[arg(long, value_name = "RFC3339", value_parser = parse_rfc3339)]
    pub to: Option<DateTime<Utc>>,
    #[command(flatten)]
    pub dirs: NodeDirs,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for; install the script where the shell looks, e.g.
    /// /usr/share/bash-completion/completions/zkcron
    #[arg(value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

fn parse_rfc3339(value: &str) -> Result<DateTime<Utc>, String> {
    ops::args::parse_rfc3339(value)
}

/// The binary's entry point.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run(args),
        Command::Validate(args) => validate::validate(args),
        Command::Schedule(args) => schedule_cmd::schedule(args),
        Command::Next(args) => next::next(args),
        Command::Reset(args) => reset::reset(args),
        Command::Status(args) => operate(&args.target, None, |_| OpsCommand::Status {
            json: args.json,
        }),
        Command::Explain(args) => operate(&args.target, None, |_| OpsCommand::Explain {
            task: args.task.clone(),
            json: args.json,
        }),
        Command::History(args) => operate(&args.target, None, |_| OpsCommand::History {
            task: args.task.clone(),
            n: args.count as usize,
            json: args.json,
            ticks: args.ticks.then_some(args.since),
        }),
        Command::Logs(args) => operate(&args.target, None, |plan| {
            OpsCommand::Logs(args.command(plan))
        }),
        Command::Trigger(args) => operate(&args.target, None, |_| OpsCommand::Trigger {
            task: args.task.clone(),
            wait: args.wait,
        }),
        Command::Backfill(args) => {
            operate(&args.target, None, |_| OpsCommand::Backfill(args.command()))
        }
        Command::Pause(args) => operate(&args.target, None, |_| OpsCommand::Pause {
            task: args.task.clone(),
            reason: args.reason.clone(),
        }),
        Command::Resume(args) => operate(&args.target, None, |_| OpsCommand::Resume {
            task: args.task.clone(),
        }),
        Command::Drain(args) => operate(&args.target, args.node_id.clone(), |plan| {
            OpsCommand::Drain {
                node: args.node.clone().unwrap_or_else(|| plan.node_id.clone()),
            }
        }),
        Command::Undrain(args) => operate(&args.target, args.node_id.clone(), |plan| {
            OpsCommand::Undrain {
                node: args.node.clone().unwrap_or_else(|| plan.node_id.clone()),
            }
        }),
        Command::Completions(args) => print_completions(args),
        Command::Man(args) => print_man_page(args.page),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("zkcron: error: {error:#}");
            ExitCode::from(1)
        }
    }
}

/// Prints `problems` (rendered `error:` blocks) to stderr, then what the command does not do
/// because of them; the exit code for it.
fn refuse<T: std::fmt::Display>(problems: &[T], not_doing: &str) -> ExitCode {
    for problem in problems {
        eprintln!("{problem}\n");
    }
    gave_up(problems.len(), not_doing)
}

/// [`refuse`] for a config file's problems.
fn refuse_config(error: &config::ConfigError, not_doing: &str) -> ExitCode {
    eprintln!("{error}\n");
    gave_up(error.problems.len(), not_doing)
}

fn gave_up(errors: usize, not_doing: &str) -> ExitCode {
    eprintln!("zkcron: {not_doing}: {errors} error(s)");
    ExitCode::from(1)
}

/// The flags that point `zkcron reset` at the same tasks and state as the command given these:
/// `--config` and `--jobs-dir` when they were given, and always `--state-dir` (absolute), since
/// a daemon's default may come from its environment (`$STATE_DIRECTORY`).
fn reset_flags(config: Option<&Path>, jobs_dir: Option<&Path>, state_dir: &Path) -> String {
    let mut flags = String::new();
    for (flag, path) in [
        ("--config", config),
        ("--jobs-dir", jobs_dir),
        ("--state-dir", Some(state_dir)),
    ] {
        if let Some(path) = path {
            let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
            flags.push_str(&format!(" {flag} {}", shell_word(&path)));
        }
    }
    flags
}

/// `path` as one word for a POSIX shell: as is when that is safe, else single-quoted.
fn shell_word(path: &Path) -> String {
    let text = path.to_string_lossy();
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        text.into_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// What the daemon starts with, resolved from `plan`; `reset_flags` is left to `run`, which
/// knows the flags it was given.
fn daemon_config(plan: &Plan) -> DaemonConfig {
    let (task_defaults, errors) = plan.task_defaults();
    for error in &errors {
        tracing::error!("invalid calendar file, not loaded: {}", error.one_line());
    }
    DaemonConfig {
        jobs_dir: plan.jobs_dir.clone(),
        calendars_dir: plan.calendars_dir.clone(),
        node_id: plan.node_id.clone(),
        shutdown_grace: plan.config.scheduler.shutdown_grace,
        task_defaults,
        reset_flags: None,
        job_output_lines: plan.config.log.job_output_lines,
        output: plan.output_store(),
        metrics: {
            let metrics = crate::metrics::Metrics::new();
            metrics.set_release(&plan.release.to_string());
            metrics
        },
        loaded: Default::default(),
        // The real clock, built here at the outermost entry and handed down.
        clock: Clock::system(),
    }
}

fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let (config, config_path) = match resolve_config(&args.config) {
        Ok(found) => found,
        Err(error) => return Ok(refuse_config(&error, "not starting")),
    };
    let jobs_dir_flag = args.jobs_dir.clone();
    let flags = Overrides {
        jobs_dir: args.jobs_dir,
        calendars_dir: args.calendars_dir,
        state_dir: args.state_dir,
        node_id: args.node_id,
        zookeeper: args.zookeeper,
        cluster: args.cluster,
        node_version: args.node_version,
    };
    let plan = Plan::resolve(config, config_path, flags, Identity::current(), host_name);
    // The checks `validate` makes: what it reports, `run` refuses to start with.
    let problems = preflight::check_for_run(&plan);
    if !problems.is_empty() {
        return Ok(refuse(&problems, "not starting"));
    }
    crate::logging::init(plan.config.log.format);
    let mut daemon_config = daemon_config(&plan);
    daemon_config.reset_flags = (plan.backend == Backend::Local).then(|| {
        reset_flags(
            args.config.config.as_deref(),
            jobs_dir_flag.as_deref(),
            &plan.state_dir,
        )
    });
    crate::daemon::use_one_heap();
    let admin = admin(&plan)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    match plan.backend {
        Backend::Local => runtime.block_on(async {
            let coordinator = Arc::new(
                LocalCoordinator::open(&plan.state_dir, daemon_config.clock)?
                    .with_history_runs(plan.config.scheduler.history_runs),
            );
            tracing::info!(backend = "local", state_dir = %plan.state_dir.display(), "coordination backend ready");
            if let Some(warning) = preflight::solo_node_warning(&plan) {
                tracing::warn!(backend = "local", "{warning}");
            }
            let control_config = control::ControlConfig::new(&plan, &daemon_config);
            let _control = control::serve_logged(control_config.clone(), &coordinator);
            let mut endpoint = crate::http::Endpoint::local(&daemon_config.metrics, &coordinator, control_config, admin);
            endpoint.read_token = read_token(&plan)?;
            endpoint.output = daemon_config.output.clone();
            let _http = crate::http::serve_logged(plan.config.http.listen, endpoint).await;
            let outcome = Daemon::new(daemon_config, coordinator.clone()).run().await;
            // The runs' ends are in; their histories are written behind them.
            coordinator.flush_history();
            outcome
        })?,
        Backend::Zookeeper => run_zookeeper(&runtime, &plan, daemon_config, admin)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether the HTTP API makes changes: with `[http] admin_token_file` (checked by
/// `preflight::check` before), read once here.
fn admin(plan: &Plan) -> anyhow::Result<crate::http::api::Admin> {
    Ok(match &plan.config.http.admin_token_file {
        Some(path) => crate::http::api::Admin::Token(
            config::read_admin_token(path).map_err(|e| anyhow::anyhow!(e))?,
        ),
        None => crate::http::api::Admin::Off,
    })
}

/// `[http] read_token_file`'s token (checked by `preflight::check` before), read once here.
fn read_token(plan: &Plan) -> anyhow::Result<Option<String>> {
    plan.config
        .http
        .read_token_file
        .as_deref()
        .map(|path| config::read_token(path, "read_token_file").map_err(|e| anyhow::anyhow!(e)))
        .transpose()
}

/// `run` on the ZooKeeper backend, once checked.
fn run_zookeeper(
    runtime: &tokio::runtime::Runtime,
    plan: &Plan,
    daemon_config: DaemonConfig,
    admin: crate::http::api::Admin,
) -> anyhow::Result<()> {
    let settings = plan
        .zk_settings()
        .context("checked above: the zookeeper backend has a connect string")?;
    runtime.block_on(async {
        // Bound before the node registers, which advertises where it answers (`zkcron logs`).
        let listener = crate::http::bind_logged(plan.config.http.listen).await;
        let mut settings = settings;
        settings.http = listener
            .as_ref()
            .and_then(|l| crate::http::advertised(l, &crate::preflight::host_name()));
        let coordinator = ZkCoordinator::start_with_metrics(
            settings.clone(),
            daemon_config.metrics.clone(),
            daemon_config.clock,
        )
        .map_err(|e| anyhow::anyhow!(e))?;
        let endpoint = crate::http::Endpoint::zookeeper(
            &daemon_config.metrics,
            &coordinator,
            &settings,
            daemon_config.loaded.clone(),
            admin,
            daemon_config.clock,
        );
        let mut endpoint = endpoint;
        endpoint.read_token = read_token(plan)?;
        endpoint.output = daemon_config.output.clone();
        let _http = listener.and_then(|l| crate::http::serve_listener_logged(l, endpoint));
        tracing::info!(
            backend = "zookeeper",
            zookeeper = %settings.connect,
            cluster = %settings.cluster,
            node = %settings.node_id,
            release = %settings.release,
            session_timeout = %humantime::format_duration(settings.session_timeout),
            "coordination backend ready"
        );
        Daemon::new(daemon_config, Arc::new(coordinator))
            .run()
            .await
    })
}

/// An operator command (`crate::ops`) against the scheduler the config and flags name.
fn operate(
    target: &ops::args::TargetArgs,
    node_id: Option<String>,
    command: impl FnOnce(&Plan) -> OpsCommand,
) -> anyhow::Result<ExitCode> {
    match ops::args::resolve(target, node_id, command)? {
        Ok((target, command)) => ops::run(command, target, Clock::system()),
        Err(error) => Ok(refuse_config(&error, "cannot reach the scheduler")),
    }
}

fn print_completions(args: CompletionsArgs) -> anyhow::Result<ExitCode> {
    let script = crate::manual::completions(Cli::command(), args.shell);
    write_stdout(&script).with_context(|| {
        format!(
            "cannot write the {} completion script to standard output",
            args.shell
        )
    })?;
    Ok(ExitCode::SUCCESS)
}

fn print_man_page(which: crate::manual::ManPage) -> anyhow::Result<ExitCode> {
    let mut page = Vec::new();
    match which {
        crate::manual::ManPage::Zkcron => crate::manual::write_man_page(Cli::command(), &mut page),
        crate::manual::ManPage::ZkcronTask => crate::manual::write_task_page(&mut page),
    }
    .context("cannot render the manual page")?;
    write_stdout(&page).context("cannot write the manual page to standard output")?;
    Ok(ExitCode::SUCCESS)
}

/// Writes `bytes` to stdout and flushes, so that a full or closed stdout is an error the user
/// sees, not a panic.
fn write_stdout(bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(bytes)?;
    stdout.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
