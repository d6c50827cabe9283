//! The operator commands' arguments (clap) and how they find the scheduler: the same config
//! and flags as `zkcron run`.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use clap::Args;

use super::{OpsCommand, Target};
use crate::config::Backend;
use crate::coord::operator::check_reason;
use crate::preflight::{Overrides, Plan};

/// How to reach the scheduler, as for `run`.
// The field docs are clap's help text, which shows `[section].key` and `[/chroot]` as written:
// rustdoc must not read them as links.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Args)]
pub struct TargetArgs {
    /// The node config [default: /etc/zkcron/zkcron.toml if it exists, else built-in defaults]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The ZooKeeper cluster at HOST:PORT[,HOST:PORT...][/chroot] [default: as for `run`]
    #[arg(long, value_name = "CONNECT", value_parser = crate::preflight::parse_connect)]
    pub zookeeper: Option<String>,
    /// The cluster's name [default: as for `run`]
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
    /// The local backend's state dir, where its daemon's socket is [default: as for `run`]
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print one JSON object (docs/commands.md: "JSON interfaces")
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub target: TargetArgs,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The task to explain
    #[arg(value_name = "TASK")]
    pub task: String,
    /// Print one JSON object
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub target: TargetArgs,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// The task whose runs to print
    #[arg(value_name = "TASK")]
    pub task: String,
    /// How many runs, newest first
    #[arg(short = 'n', value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub count: u32,
    /// Print a JSON array (docs/commands.md: "JSON interfaces")
    #[arg(long)]
    pub json: bool,
    /// Print the tick ledger instead of the runs: every tick of the schedule, ran, skipped or
    /// missed, and why
    #[arg(long)]
    pub ticks: bool,
    /// With --ticks: only the entries that end at or after this RFC 3339 instant
    #[arg(long, value_name = "INSTANT", requires = "ticks", value_parser = parse_rfc3339)]
    pub since: Option<DateTime<Utc>>,
    #[command(flatten)]
    pub target: TargetArgs,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The task whose run's output to print
    #[arg(value_name = "TASK")]
    pub task: String,
    /// The run (`<task>@<unix>`, `<task>@manual-<n>`, as `zkcron history` lists them)
    /// [default: the task's newest]
    #[arg(value_name = "FIRE_ID")]
    pub fire_id: Option<String>,
    /// Stream a run still going until it ends
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Print each line's time and stream (stdout, stderr) before it
    #[arg(long)]
    pub timestamps: bool,
    #[command(flatten)]
    pub target: TargetArgs,
}

impl LogsArgs {
    /// The command, with what it needs of the node's config in `plan`.
    pub fn command(&self, plan: &Plan) -> super::logs::LogsCommand {
        let http = &plan.config.http;
        super::logs::LogsCommand {
            task: self.task.clone(),
            fire_id: self.fire_id.clone(),
            follow: self.follow,
            timestamps: self.timestamps,
            store: plan.output_store(),
            node_id: plan.node_id.clone(),
            token_file: http.read_token_file.clone(),
        }
    }
}

#[derive(Debug, Args)]
pub struct TriggerArgs {
    /// The task to run now
    #[arg(value_name = "TASK")]
    pub task: String,
    /// Wait for the run's end, print its result, exit 0 if it succeeded and 1 if it failed or
    /// could not run
    #[arg(long)]
    pub wait: bool,
    #[command(flatten)]
    pub target: TargetArgs,
}

#[derive(Debug, Args)]
pub struct BackfillArgs {
    /// The task whose ticks to run (with --status: list only its requests)
    #[arg(value_name = "TASK", required_unless_present_any = ["status", "cancel"])]
    pub task: Option<String>,
    /// The first instant of the range (RFC 3339; its ticks from here on run)
    #[arg(long, value_name = "RFC3339", value_parser = parse_rfc3339,
          required_unless_present_any = ["status", "cancel"])]
    pub from: Option<DateTime<Utc>>,
    /// The end of the range (RFC 3339; a tick at this instant does not run)
    #[arg(long, value_name = "RFC3339", value_parser = parse_rfc3339,
          required_unless_present_any = ["status", "cancel"])]
    pub to: Option<DateTime<Utc>>,
    /// Follow the backfill to its end, printing its progress; exit 0 only if every run
    /// succeeded
    #[arg(long, conflicts_with_all = ["status", "cancel"])]
    pub wait: bool,
    /// List the backfill requests: done of total, failures, the tick running now
    #[arg(long, conflicts_with_all = ["from", "to", "cancel"])]
    pub status: bool,
    /// Cancel the backfill ID (its running tick finishes; no other starts)
    #[arg(long, value_name = "ID", conflicts_with_all = ["task", "from", "to"])]
    pub cancel: Option<String>,
    #[command(flatten)]
    pub target: TargetArgs,
}

impl BackfillArgs {
    /// The command these arguments ask for (clap made sure the needed ones are there).
    pub fn command(&self) -> super::backfill::BackfillCommand {
        use super::backfill::BackfillCommand;
        if let Some(name) = &self.cancel {
            return BackfillCommand::Cancel { name: name.clone() };
        }
        match (&self.task, self.from, self.to) {
            (Some(task), Some(from), Some(to)) if !self.status => BackfillCommand::Request {
                task: task.clone(),
                from,
                to,
                wait: self.wait,
            },
            _ => BackfillCommand::Status {
                task: self.task.clone(),
            },
        }
    }
}

/// An RFC 3339 instant on the command line.
pub fn parse_rfc3339(value: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(value)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| {
            format!(
                "{e}; write an RFC 3339 instant like 2026-03-08T00:00:00Z or \
                 2026-03-08T01:00:00+01:00"
            )
        })
}

#[derive(Debug, Args)]
pub struct TaskArgs {
    /// The task
    #[arg(value_name = "TASK")]
    pub task: String,
    #[command(flatten)]
    pub target: TargetArgs,
}

#[derive(Debug, Args)]
pub struct PauseArgs {
    /// The task
    #[arg(value_name = "TASK")]
    pub task: String,
    /// Why, shown by `status` and `explain` until `zkcron resume` (at most 500 bytes)
    #[arg(long, value_name = "TEXT", value_parser = check_reason)]
    pub reason: Option<String>,
    #[command(flatten)]
    pub target: TargetArgs,
}

// The field docs are clap's help text, which shows `[section].key` and `[/chroot]` as written:
// rustdoc must not read them as links.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Args)]
pub struct DrainArgs {
    /// The node [default: --node-id, else [node].id, else the host name: this host's node]
    #[arg(value_name = "NODE")]
    pub node: Option<String>,
    /// This host's node id, the default NODE [default: as for `run`]
    #[arg(long, value_name = "ID")]
    pub node_id: Option<String>,
    #[command(flatten)]
    pub target: TargetArgs,
}

impl TargetArgs {
    /// The plan `run` would make with these flags.
    fn plan(&self, node_id: Option<String>) -> Result<Plan, crate::config::ConfigError> {
        let config_args = crate::preflight::ConfigArgs {
            config: self.config.clone(),
        };
        let (config, config_path) = crate::preflight::resolve_config(&config_args)?;
        let flags = Overrides {
            state_dir: self.state_dir.clone(),
            zookeeper: self.zookeeper.clone(),
            cluster: self.cluster.clone(),
            node_id,
            ..Overrides::default()
        };
        Ok(Plan::resolve(
            config,
            config_path,
            flags,
            crate::accounts::Identity::current(),
            crate::preflight::host_name,
        ))
    }
}

/// Where `command` goes and the command itself; `Err` with the config's problems printed.
pub fn resolve(
    target: &TargetArgs,
    node_id: Option<String>,
    command: impl FnOnce(&Plan) -> OpsCommand,
) -> anyhow::Result<Result<(Target, OpsCommand), crate::config::ConfigError>> {
    let plan = match target.plan(node_id) {
        Ok(plan) => plan,
        Err(error) => return Ok(Err(error)),
    };
    let command = command(&plan);
    let target = match plan.backend {
        Backend::Local => Target::Local {
            state_dir: plan.state_dir.clone(),
        },
        Backend::Zookeeper => match plan.connect.clone() {
            Some(connect) => Target::Cluster {
                connect,
                cluster: plan.cluster.clone(),
                auth: plan.config.coordination.zookeeper.auth.clone(),
                tls: plan.config.coordination.zookeeper.tls.clone(),
            },
            None => anyhow::bail!(
                "the config selects the zookeeper backend but names no server: set --zookeeper \
                 or [coordination.zookeeper] connect"
            ),
        },
    };
    Ok(Ok((target, command)))
}
