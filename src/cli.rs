//! The `zkcron` command line: argument parsing and the subcommands' output.
//!
//! Parsing happens in two layers, as in ripgrep: clap checks what the user wrote (usage errors
//! exit 2), then each subcommand builds the real objects from validated config and task files
//! (invalid input exits 1). `validate` only parses and checks; `run` builds the live daemon.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use chrono::{DateTime, Utc};
use clap::{Args, Parser, Subcommand};

use crate::config::Backend;
use crate::config::{self, Config};
use crate::coord::local::LocalCoordinator;
use crate::coord::zk::{ZkCoordinator, ZkSettings};
use crate::daemon::{self, Daemon, DaemonConfig};
use crate::schedule::{self, Schedule};
use crate::task::{self, Identity, LoadedDir, TaskDefaults};

/// Where the node config is read from when `--config` is not given and the file exists.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/zkcron/zkcron.toml";

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
    /// Print the next fire instants of a cron expression.
    Schedule(ScheduleArgs),
    /// Print each task's next fire.
    Next(NextArgs),
    /// Print a shell completion script to standard output.
    Completions(CompletionsArgs),
    /// Print the manual page zkcron(1) in roff to standard output.
    #[command(hide = true)]
    Man,
}

#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// The node config [default: /etc/zkcron/zkcron.toml if it exists, else built-in defaults]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The directory of task files [default: [scheduler].jobs_dir, else jobs.d beside the config,
    /// else ./jobs.d]
    #[arg(long, value_name = "DIR")]
    pub jobs_dir: Option<PathBuf>,
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

fn parse_connect(value: &str) -> Result<String, String> {
    crate::coord::zk::split_connect(value).map(|_| value.to_string())
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
}

#[derive(Debug, Args)]
pub struct ScheduleArgs {
    /// A cron expression: 5 fields, or 6 with seconds first, or an alias like @daily
    #[arg(value_name = "EXPR")]
    pub expression: String,
    /// The IANA time zone the expression is read in
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
}

#[derive(Debug, Args)]
pub struct NextArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The directory of task files [default: as for `run`]
    #[arg(long, value_name = "DIR")]
    pub jobs_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for; install the script where the shell looks, e.g.
    /// /usr/share/bash-completion/completions/zkcron
    #[arg(value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

fn parse_rfc3339(value: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(value)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("{e}; write an RFC 3339 instant like 2026-03-08T00:00:00Z or 2026-03-08T01:00:00+01:00"))
}

/// The binary's entry point.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run(args),
        Command::Validate(args) => validate(args),
        Command::Schedule(args) => schedule(args),
        Command::Next(args) => next(args),
        Command::Completions(args) => print_completions(args),
        Command::Man => print_man_page(),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("zkcron: error: {error:#}");
            ExitCode::from(1)
        }
    }
}

/// Reads the config named by `--config`, or the default file if it exists, or the defaults.
fn resolve_config(args: &ConfigArgs) -> anyhow::Result<(Config, Option<PathBuf>)> {
    let path = match &args.config {
        Some(path) => Some(path.clone()),
        None => Some(PathBuf::from(DEFAULT_CONFIG_PATH)).filter(|p| p.exists()),
    };
    match path {
        Some(path) => {
            let config = config::load_config(&path).map_err(|e| anyhow::anyhow!("{e}"))?;
            Ok((config, Some(path)))
        }
        None => Ok((Config::default(), None)),
    }
}

fn node_id(flag: Option<String>, config: &Config) -> String {
    flag.or_else(|| config.node.id.clone()).unwrap_or_else(|| {
        nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "localhost".to_string())
    })
}

fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let (config, config_path) = resolve_config(&args.config)?;
    crate::logging::init(config.log.format);
    let jobs_dir = args
        .jobs_dir
        .unwrap_or_else(|| config.jobs_dir_or_default(config_path.as_deref()));
    if !jobs_dir.is_dir() {
        anyhow::bail!(
            "the jobs dir {} does not exist; create it, or point --jobs-dir or [scheduler].jobs_dir at your task files",
            jobs_dir.display()
        );
    }
    let state_dir = args
        .state_dir
        .unwrap_or_else(|| config.state_dir_or_default());
    let daemon_config = DaemonConfig {
        jobs_dir,
        node_id: node_id(args.node_id, &config),
        shutdown_grace: config.scheduler.shutdown_grace,
        task_defaults: config.task_defaults(Identity::current()),
        job_output_lines: config.log.job_output_lines,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let backend = match args.zookeeper {
        Some(_) => Backend::Zookeeper,
        None => config.coordination.backend,
    };
    match backend {
        Backend::Local => runtime.block_on(async {
            let coordinator = LocalCoordinator::open(&state_dir)?;
            tracing::info!(backend = "local", state_dir = %state_dir.display(), "coordination backend ready");
            Daemon::new(daemon_config, Arc::new(coordinator)).run().await
        })?,
        Backend::Zookeeper => {
            let section = &config.coordination.zookeeper;
            let connect = args.zookeeper.or_else(|| section.connect.clone()).context(
                "the zookeeper backend needs to know where ZooKeeper is: set \
                 [coordination.zookeeper] connect = \"HOST:PORT\" or pass --zookeeper HOST:PORT",
            )?;
            let settings = ZkSettings {
                connect,
                cluster: args.cluster.unwrap_or_else(|| section.cluster.clone()),
                session_timeout: section.session_timeout,
                max_clock_skew: section.max_clock_skew,
                node_id: daemon_config.node_id.clone(),
                release: args
                    .node_version
                    .or_else(|| config.node.version.clone())
                    .unwrap_or_else(|| {
                        semver::Version::parse(env!("CARGO_PKG_VERSION")).expect("crate version")
                    }),
                labels: config.node.labels.clone(),
            };
            runtime.block_on(async {
                let coordinator =
                    ZkCoordinator::start(settings.clone()).map_err(|e| anyhow::anyhow!(e))?;
                tracing::info!(
                    backend = "zookeeper",
                    zookeeper = %settings.connect,
                    cluster = %settings.cluster,
                    node = %settings.node_id,
                    release = %settings.release,
                    session_timeout = %humantime::format_duration(settings.session_timeout),
                    "coordination backend ready"
                );
                Daemon::new(daemon_config, Arc::new(coordinator)).run().await
            })?
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn validate(args: ValidateArgs) -> anyhow::Result<ExitCode> {
    let mut errors = 0usize;
    let mut tasks = 0usize;
    let (config, config_path) = match resolve_config(&args.config) {
        Ok(found) => found,
        Err(error) => {
            eprintln!("{error:#}\n");
            errors += 1;
            (Config::default(), None)
        }
    };
    let defaults = config.task_defaults(Identity::current());
    let paths = if args.paths.is_empty() {
        vec![config.jobs_dir_or_default(config_path.as_deref())]
    } else {
        args.paths
    };
    for path in &paths {
        let loaded = load_path(path, &defaults)?;
        tasks += loaded.tasks.len();
        for error in &loaded.errors {
            eprintln!("{error}\n");
        }
        errors += loaded.errors.len();
    }
    if errors > 0 {
        println!("zkcron: {errors} error(s); {tasks} valid task(s)");
        Ok(ExitCode::from(1))
    } else {
        println!("zkcron: configuration OK; {tasks} valid task(s)");
        Ok(ExitCode::SUCCESS)
    }
}

/// Loads a task file or a directory of them.
fn load_path(path: &Path, defaults: &TaskDefaults) -> anyhow::Result<LoadedDir> {
    let metadata =
        std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    if metadata.is_dir() {
        return task::load_jobs_dir(path, defaults)
            .with_context(|| format!("cannot read the directory {}", path.display()));
    }
    let mut loaded = LoadedDir::default();
    match task::load_task_file(path, defaults) {
        Ok(spec) => loaded.tasks.push(spec),
        Err(errors) => loaded.errors.extend(errors),
    }
    Ok(loaded)
}

fn schedule(args: ScheduleArgs) -> anyhow::Result<ExitCode> {
    let timezone = schedule::parse_timezone(&args.tz)?;
    let schedule = Schedule::parse(&args.expression, timezone)?;
    let after = args.after.unwrap_or_else(daemon::wall_clock);
    let mut printed = 0;
    for tick in schedule.ticks_after(after).take(args.count) {
        let local = tick.with_timezone(&timezone);
        println!(
            "{}  {}  {}",
            local.to_rfc3339(),
            local.format("%a"),
            tick.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        );
        printed += 1;
    }
    if printed < args.count {
        eprintln!("zkcron: the schedule has no further instants");
    }
    Ok(ExitCode::SUCCESS)
}

fn next(args: NextArgs) -> anyhow::Result<ExitCode> {
    let (config, config_path) = resolve_config(&args.config)?;
    let jobs_dir = args
        .jobs_dir
        .unwrap_or_else(|| config.jobs_dir_or_default(config_path.as_deref()));
    let loaded = load_path(&jobs_dir, &config.task_defaults(Identity::current()))?;
    let now = daemon::wall_clock();
    let width = loaded
        .tasks
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    println!("{:width$}  {:25}  {:>12}  SCHEDULE", "TASK", "NEXT", "IN");
    for spec in &loaded.tasks {
        let timezone = spec.schedule.timezone();
        let (next, within) = match spec.schedule.next_after(now) {
            _ if !spec.enabled => ("disabled".to_string(), "-".to_string()),
            Some(tick) => {
                let wait = (tick - now).to_std().unwrap_or_default();
                let wait = std::time::Duration::from_secs(
                    wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
                );
                (
                    tick.with_timezone(&timezone).to_rfc3339(),
                    humantime::format_duration(wait).to_string(),
                )
            }
            None => ("never".to_string(), "-".to_string()),
        };
        println!(
            "{:width$}  {:25}  {:>12}  {} ({})",
            spec.name,
            next,
            within,
            spec.schedule.expression(),
            timezone.name()
        );
    }
    for error in &loaded.errors {
        eprintln!("{error}\n");
    }
    Ok(if loaded.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_completions(args: CompletionsArgs) -> anyhow::Result<ExitCode> {
    let script = crate::manual::completions(args.shell);
    write_stdout(&script).with_context(|| {
        format!(
            "cannot write the {} completion script to standard output",
            args.shell
        )
    })?;
    Ok(ExitCode::SUCCESS)
}

fn print_man_page() -> anyhow::Result<ExitCode> {
    let mut page = Vec::new();
    crate::manual::write_man_page(&mut page).context("cannot render the manual page")?;
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
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
