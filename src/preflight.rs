//! What `zkcron run` needs before it starts, checked by one function that `run` and `validate`
//! share: `validate` reports exactly what would make `run` refuse to start, in the same words,
//! and `run` refuses it (exit 1) instead of starting a daemon that would fail on every tick or
//! never reach its cluster.
//!
//! The checks: the config file may be trusted ([`files::check_config_file`]); the jobs dir
//! exists and may be trusted ([`files::check_jobs_dir`]; `validate` gets this from loading the
//! dir); with the local backend, the state dir is a directory or can be created, and zkcron's
//! user can write it (or, when it is missing, the directory it would be created in); with the
//! ZooKeeper backend, a connect string is given and the settings pass [`ZkSettings::check`];
//! when zkcron runs as root, `[scheduler].default_user` exists. (The config's own values are
//! checked when it is parsed, with line and column.)
//!
//! Resolving a [`Plan`] starts from what the command line gives, so the pieces every command
//! that reads the node config shares live here too: `--config` ([`ConfigArgs`], the default
//! file), the parser of `--zookeeper` and the host name that is the default node id. Both
//! `cli` and the operator commands' arguments (`ops::args`) use them.

use std::fmt;
use std::path::{Path, PathBuf};

use clap::Args;

use crate::accounts::{self, Identity};
use crate::config::{self, Backend, Config};
use crate::coord::zk::ZkSettings;
use crate::files::{self, PathProblem, kind_of};

/// What `run` starts with: the config and the flags that override it, resolved.
#[derive(Debug, Clone)]
pub struct Plan {
    pub config: Config,
    /// The config file read, if any.
    pub config_path: Option<PathBuf>,
    pub jobs_dir: PathBuf,
    /// `--calendars-dir`, else `[scheduler] calendars_dir`, else `calendars.d` beside the jobs dir.
    pub calendars_dir: PathBuf,
    pub state_dir: PathBuf,
    pub backend: Backend,
    pub node_id: String,
    /// `--zookeeper`, else `[coordination.zookeeper].connect`.
    pub connect: Option<String>,
    pub cluster: String,
    pub release: semver::Version,
    pub identity: Identity,
}

/// Where the node config is read from when `--config` is not given and the file exists.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/zkcron/zkcron.toml";

/// `--config`, the flag of every command that reads the node config.
#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// The node config [default: /etc/zkcron/zkcron.toml if it exists, else built-in defaults]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// The config file to read: `--config`, else the default file if it exists.
pub(crate) fn config_path(args: &ConfigArgs) -> Option<PathBuf> {
    match &args.config {
        Some(path) => Some(path.clone()),
        None => Some(PathBuf::from(DEFAULT_CONFIG_PATH)).filter(|p| p.exists()),
    }
}

/// Reads the config named by `--config`, or the default file if it exists, or the defaults.
pub(crate) fn resolve_config(
    args: &ConfigArgs,
) -> Result<(Config, Option<PathBuf>), config::ConfigError> {
    match config_path(args) {
        Some(path) => Ok((config::load_config(&path)?, Some(path))),
        None => Ok((Config::default(), None)),
    }
}

/// The value parser of `--zookeeper`: a connect string ZooKeeper accepts, kept as written.
pub(crate) fn parse_connect(value: &str) -> Result<String, String> {
    crate::coord::zk::split_connect(value).map(|_| value.to_string())
}

/// The host name, the node id when neither `--node-id` nor `[node].id` names one.
pub(crate) fn host_name() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "localhost".to_string())
}

/// The flags of `run` that override the config (`validate` has none).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub jobs_dir: Option<PathBuf>,
    pub calendars_dir: Option<PathBuf>,
    pub state_dir: Option<PathBuf>,
    pub node_id: Option<String>,
    pub zookeeper: Option<String>,
    pub cluster: Option<String>,
    pub node_version: Option<semver::Version>,
}

impl Plan {
    /// What task files default to for this plan, with the calendars of its calendars dir, and
    /// the calendar files' errors.
    pub fn task_defaults(&self) -> (crate::task::TaskDefaults, Vec<crate::task::TaskFileError>) {
        let mut defaults = self
            .config
            .task_defaults(self.identity.clone(), self.backend.for_tasks());
        let loaded = crate::task::load_calendars_dir(
            &self.calendars_dir,
            &self.identity,
            &Default::default(),
        );
        defaults.calendars = std::sync::Arc::new(loaded.calendars);
        (defaults, loaded.errors)
    }

    /// Where the runs' output is kept: `<state_dir>/output`, bounded by `[log] output_limit`
    /// (0: nowhere), a task's newest `[scheduler] history_runs` runs.
    pub fn output_store(&self) -> Option<crate::executor::OutputStore> {
        let limit = self.config.log.output_limit;
        (limit > 0).then(|| crate::executor::OutputStore {
            dir: self.state_dir.join("output"),
            limit,
            keep: self.config.scheduler.history_runs.max(1),
        })
    }

    /// Resolves what `run` would use. `host_name` is the node id when neither flag nor config
    /// names one.
    pub fn resolve(
        config: Config,
        config_path: Option<PathBuf>,
        flags: Overrides,
        identity: Identity,
        host_name: impl FnOnce() -> String,
    ) -> Plan {
        let jobs_dir = flags
            .jobs_dir
            .unwrap_or_else(|| config.jobs_dir_or_default(config_path.as_deref()));
        let calendars_dir = flags
            .calendars_dir
            .unwrap_or_else(|| config.calendars_dir_or_default(&jobs_dir));
        let state_dir = flags
            .state_dir
            .unwrap_or_else(|| config.state_dir_or_default());
        let backend = match flags.zookeeper {
            Some(_) => Backend::Zookeeper,
            None => config.coordination.backend,
        };
        let section = &config.coordination.zookeeper;
        Plan {
            jobs_dir,
            calendars_dir,
            state_dir,
            backend,
            node_id: flags
                .node_id
                .or_else(|| config.node.id.clone())
                .unwrap_or_else(host_name),
            connect: flags.zookeeper.or_else(|| section.connect.clone()),
            cluster: flags.cluster.unwrap_or_else(|| section.cluster.clone()),
            release: flags
                .node_version
                .or_else(|| config.node.version.clone())
                .unwrap_or_else(|| {
                    semver::Version::parse(env!("CARGO_PKG_VERSION")).expect("crate version")
                }),
            identity,
            config_path,
            config,
        }
    }

    /// The ZooKeeper settings, when a connect string is given.
    pub fn zk_settings(&self) -> Option<ZkSettings> {
        let section = &self.config.coordination.zookeeper;
        Some(ZkSettings {
            connect: self.connect.clone()?,
            cluster: self.cluster.clone(),
            session_timeout: section.session_timeout,
            max_clock_skew: section.max_clock_skew,
            node_id: self.node_id.clone(),
            release: self.release.clone(),
            labels: self.config.node.labels.clone(),
            history_runs: self.config.scheduler.history_runs,
            http: None,
            auth: section.auth.clone(),
            tls: section.tls.clone(),
        })
    }
}

/// What a node that coordinates with nobody says at start-up (at warn): with the local backend
/// and no ZooKeeper named anywhere (no `--zookeeper`, no `[coordination.zookeeper] connect`),
/// it fires every task on its own, and a second host started the same way fires the same
/// ticks again (a forgotten `--zookeeper` did exactly that). `None` for a ZooKeeper node, and
/// for a local node whose config names a ZooKeeper (the admin chose `backend = "local"` on
/// purpose).
pub fn solo_node_warning(plan: &Plan) -> Option<String> {
    if plan.backend != Backend::Local || plan.connect.is_some() {
        return None;
    }
    let unnamed = match &plan.config_path {
        Some(path) => format!("the config {} names no ZooKeeper", path.display()),
        None => "no config file was read, so no ZooKeeper is named".to_string(),
    };
    Some(format!(
        "this node fires every task on its own: the local backend coordinates with no other \
         node, and {unnamed}; a second node started like this runs the same ticks again. To \
         join a cluster, pass --zookeeper HOST:PORT[,HOST:PORT...] or set [coordination] \
         backend = \"zookeeper\" and [coordination.zookeeper] connect = \"HOST:PORT\" in the \
         config, the same on every node"
    ))
}

/// A reason `run` would not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartProblem {
    /// The file or directory at fault; `None` for a value given on the command line.
    pub path: Option<PathBuf>,
    pub message: String,
    pub help: Option<String>,
}

impl From<PathProblem> for StartProblem {
    fn from(problem: PathProblem) -> StartProblem {
        StartProblem {
            path: Some(problem.path),
            message: problem.message,
            help: problem.help,
        }
    }
}

impl fmt::Display for StartProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(path) => files::path_report(path, &self.message, self.help.as_deref()).render(f),
            None => {
                write!(f, "error: {}", self.message)?;
                if let Some(help) = &self.help {
                    write!(f, "\n   = help: {help}")?;
                }
                Ok(())
            }
        }
    }
}

/// Everything `run` checks before it starts, but the jobs dir (which loading it checks; see
/// [`check_for_run`]).
pub fn check(plan: &Plan) -> Vec<StartProblem> {
    let mut problems: Vec<StartProblem> = Vec::new();
    if let Some(path) = &plan.config_path {
        problems.extend(
            files::check_config_file(path, &plan.identity)
                .into_iter()
                .map(StartProblem::from),
        );
    }
    match plan.backend {
        Backend::Local => problems.extend(state_dir_problem(&plan.state_dir, &plan.identity)),
        Backend::Zookeeper => match plan.zk_settings() {
            None => problems.push(StartProblem {
                path: plan.config_path.clone(),
                message: "the zookeeper backend needs to know where ZooKeeper is".into(),
                help: Some(
                    "set [coordination.zookeeper] connect = \"HOST:PORT\" or pass --zookeeper \
                     HOST:PORT"
                        .into(),
                ),
            }),
            Some(settings) => {
                if let Err(message) = settings.check() {
                    problems.push(StartProblem {
                        path: None,
                        message,
                        help: None,
                    });
                }
            }
        },
    }
    if let Some(path) = &plan.config.http.admin_token_file
        && let Err(message) = crate::config::read_admin_token(path)
    {
        problems.push(StartProblem {
            path: None,
            message,
            help: None,
        });
    }
    if let Some(path) = &plan.config.http.read_token_file
        && let Err(message) = crate::config::read_token(path, "read_token_file")
    {
        problems.push(StartProblem {
            path: None,
            message,
            help: None,
        });
    }
    if plan.identity.is_root()
        && let Some(user) = &plan.config.scheduler.default_user
        && let Some((message, help)) =
            accounts::missing_account("user", user, accounts::user_exists(user))
    {
        problems.push(StartProblem {
            path: plan.config_path.clone(),
            message: format!("{message} ([scheduler].default_user)"),
            help: Some(help),
        });
    }
    problems
}

/// Everything `run` checks before it starts: [`check`] and the jobs dir.
pub fn check_for_run(plan: &Plan) -> Vec<StartProblem> {
    let mut problems = check(plan);
    problems.extend(
        files::check_jobs_dir(&plan.jobs_dir, &plan.identity)
            .into_iter()
            .map(StartProblem::from),
    );
    problems
}

/// The state dir must be a directory, or be creatable: its nearest existing ancestor is one;
/// and zkcron's user must be able to write that directory (`access(2)` with the process's own
/// ids, which `identity` names).
fn state_dir_problem(dir: &Path, identity: &Identity) -> Option<StartProblem> {
    let help = "point --state-dir or [scheduler].state_dir at a directory (zkcron creates it if \
                it is missing)";
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    for (index, path) in dir.ancestors().enumerate() {
        let meta = match std::fs::metadata(path) {
            Ok(meta) => meta,
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                continue;
            }
            Err(error) => {
                return Some(StartProblem {
                    path: Some(path.to_path_buf()),
                    message: format!("cannot read the state dir: {error}"),
                    help: None,
                });
            }
        };
        if meta.is_dir() {
            return not_writable(&dir, path, &meta, identity);
        }
        let message = if index == 0 {
            format!(
                "the state dir is {}, not a directory",
                kind_of(meta.file_type())
            )
        } else {
            format!(
                "the state dir {} cannot be created: {} is {}, not a directory",
                dir.display(),
                path.display(),
                kind_of(meta.file_type())
            )
        };
        return Some(StartProblem {
            path: Some(path.to_path_buf()),
            message,
            help: Some(help.into()),
        });
    }
    None
}

/// Whether zkcron can write `path`, the state dir `dir` or (when that does not exist yet) its
/// nearest existing ancestor, in which `run` would create it.
fn not_writable(
    dir: &Path,
    path: &Path,
    meta: &std::fs::Metadata,
    identity: &Identity,
) -> Option<StartProblem> {
    use nix::unistd::{AccessFlags, access};
    use std::os::unix::fs::MetadataExt;
    let errno = access(path, AccessFlags::W_OK | AccessFlags::X_OK).err()?;
    let user = &identity.user_name;
    let what = format!(
        "not writable by {user:?}, who zkcron runs as (mode {:04o}, owned by {}): {}",
        meta.mode() & 0o7777,
        files::describe_uid(meta.uid()),
        std::io::Error::from(errno)
    );
    let message = if path == dir {
        format!("the state dir is {what}")
    } else {
        format!(
            "the state dir {} cannot be created: {} is {what}",
            dir.display(),
            path.display()
        )
    };
    Some(StartProblem {
        path: Some(path.to_path_buf()),
        message,
        help: Some(crate::coord::local::not_writable_fix(dir, user, errno)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(config: Config, config_path: Option<PathBuf>, zookeeper: Option<&str>) -> Plan {
        let flags = Overrides {
            zookeeper: zookeeper.map(str::to_string),
            ..Overrides::default()
        };
        Plan::resolve(config, config_path, flags, Identity::current(), || {
            "host".into()
        })
    }

    #[test]
    fn a_local_node_without_a_config_file_warns_that_nothing_names_a_zookeeper() {
        let warning = solo_node_warning(&plan(Config::default(), None, None)).unwrap();
        assert!(
            warning.contains("no config file was read, so no ZooKeeper is named"),
            "{warning}"
        );
        assert!(warning.contains("pass --zookeeper HOST:PORT"), "{warning}");
    }

    #[test]
    fn a_node_given_zookeeper_on_the_command_line_does_not_warn() {
        let plan = plan(Config::default(), None, Some("127.0.0.1:2181"));
        assert_eq!(plan.backend, Backend::Zookeeper);
        assert_eq!(solo_node_warning(&plan), None);
    }
}
