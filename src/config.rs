//! The node configuration, `zkcron.toml` (docs/operating.md).
//!
//! This module owns the config file's format: it parses and validates it into a [`Config`] whose
//! every field has a documented default, and reports every problem with file, line and column
//! (rendered like task-file errors, by the same code, in `diag`). Unknown sections and
//! keys are errors with a did-you-mean. It resolves relative directories against the config
//! file's directory, but it leaves defaults that depend on the environment (where the jobs and
//! state directories are when not set) to the `*_or_default` methods, which the caller uses.
//!
//! Files: `zookeeper` (the keys of `[coordination.zookeeper]`), `tls` (its TLS keys), `tokens`
//! (the token files of `[http]`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono_tz::Tz;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::accounts::Identity;
use crate::coord::zk::{AuthSource, TlsSource, ZkAuth};
use crate::diag::decode_utf8;
use crate::diag::{Problem, Report};
use crate::schedule::parse_timezone;
use crate::task::{Checker, TaskBackend, TaskDefaults, closest};

/// The sections of `zkcron.toml` and their keys.
const SECTIONS: &[(&str, &[&str])] = &[
    ("node", &["id", "version", "labels"]),
    (
        "scheduler",
        &[
            "jobs_dir",
            "calendars_dir",
            "state_dir",
            "default_timezone",
            "shutdown_grace",
            "default_user",
            "history_runs",
        ],
    ),
    ("coordination", &["backend", "zookeeper"]),
    ("log", &["format", "job_output_lines", "output_limit"]),
    ("http", &["listen", "admin_token_file", "read_token_file"]),
];

// The node-id rule lives with the ZooKeeper paths it protects; config checks the key with it
// (config imports coord::records, never the other way round).
use crate::coord::records::{NODE_ID_PATTERN, is_path_name};

/// The whole node configuration, defaults applied.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Config {
    pub node: NodeSection,
    pub scheduler: SchedulerSection,
    pub coordination: CoordinationSection,
    pub log: LogSection,
    pub http: HttpSection,
}

/// `[http]`: the metrics, health and status endpoint ([`crate::http`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSection {
    /// `listen`: the address served; `None` (`listen = ""`) serves nothing.
    pub listen: Option<std::net::SocketAddr>,
    /// `admin_token_file`: the file holding the token the HTTP API's changes need (relative
    /// paths from the config's dir); `None`: the API and the dashboard change nothing.
    pub admin_token_file: Option<std::path::PathBuf>,
    /// `read_token_file`: the file holding a token that reads runs' output over HTTP (as the
    /// admin token does), same rules; `None`: only the admin token reads it.
    pub read_token_file: Option<std::path::PathBuf>,
}

/// The default of `[http] listen`: loopback only, the port Prometheus' registry lists for no
/// other exporter.
pub const DEFAULT_HTTP_LISTEN: &str = "127.0.0.1:9464";

impl Default for HttpSection {
    fn default() -> HttpSection {
        HttpSection {
            listen: Some(DEFAULT_HTTP_LISTEN.parse().expect("a valid address")),
            admin_token_file: None,
            read_token_file: None,
        }
    }
}

/// `[node]`: who this node is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeSection {
    /// The node's id in the cluster; `None` lets the caller derive one (e.g. from the host name).
    pub id: Option<String>,
    /// The release this node announces for ranking and `version_req`; `None` means the binary's
    /// own version.
    pub version: Option<semver::Version>,
    /// Free-form labels, shown by `status`.
    pub labels: BTreeMap<String, String>,
}

/// `[scheduler]`: where tasks and state live, and the defaults of task files.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerSection {
    /// Set when the file names it (made absolute against the config file's directory); see
    /// [`Config::jobs_dir_or_default`].
    pub jobs_dir: Option<PathBuf>,
    /// Set when the file names it (made absolute against the config file's directory); see
    /// [`Config::calendars_dir_or_default`].
    pub calendars_dir: Option<PathBuf>,
    /// Set when the file names it (made absolute against the config file's directory); see
    /// [`Config::state_dir_or_default`].
    pub state_dir: Option<PathBuf>,
    /// The zone of tasks that name none. Default UTC.
    pub default_timezone: Tz,
    /// How long running jobs may finish after SIGTERM before their process groups are killed.
    /// Default 30s.
    pub shutdown_grace: Duration,
    /// The user root runs tasks as when they name none; `None` runs them as root.
    pub default_user: Option<String>,
    /// How many runs per task the history keeps (`zkcron history`). Default 100.
    pub history_runs: usize,
}

/// The largest `[scheduler] history_runs`: a task's history is one znode (and one state file),
/// which also never grows past 256 KiB.
pub const MAX_HISTORY_RUNS: i64 = 1000;

impl Default for SchedulerSection {
    fn default() -> Self {
        SchedulerSection {
            jobs_dir: None,
            calendars_dir: None,
            state_dir: None,
            default_timezone: chrono_tz::UTC,
            shutdown_grace: Duration::from_secs(30),
            default_user: None,
            history_runs: crate::coord::record::DEFAULT_HISTORY_RUNS,
        }
    }
}

/// The coordination backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// The embedded single-host backend; fire records live in `state_dir`.
    #[default]
    Local,
    /// A cluster coordinated through ZooKeeper (`[coordination.zookeeper]`).
    Zookeeper,
}

impl Backend {
    /// The backend as task files know it: the keys it honours depend on it.
    pub fn for_tasks(self) -> TaskBackend {
        match self {
            Backend::Local => TaskBackend::Local,
            Backend::Zookeeper => TaskBackend::Zookeeper,
        }
    }
}

/// The keys of `[coordination.zookeeper]`.
const ZOOKEEPER_KEYS: &[&str] = &[
    "connect",
    "cluster",
    "session_timeout",
    "max_clock_skew",
    "auth",
    "auth_file",
    "tls",
    "tls_ca_file",
    "tls_cert_file",
    "tls_key_file",
];

/// `[coordination]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CoordinationSection {
    pub backend: Backend,
    pub zookeeper: ZookeeperSection,
}

/// `[coordination.zookeeper]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZookeeperSection {
    /// `HOST:PORT[,HOST:PORT...][/chroot]`; required with the zookeeper backend unless
    /// `--zookeeper` gives it.
    pub connect: Option<String>,
    /// Nodes of one cluster share tasks; the root is `/zkcron/<cluster>`. Default "default".
    pub cluster: String,
    /// The ZooKeeper session timeout: how long a silent node keeps its leases. Default 10s.
    pub session_timeout: Duration,
    /// A node whose clock is further than this from ZooKeeper's leads nothing. Default: no limit
    /// (a skew above 1s is only logged).
    pub max_clock_skew: Option<Duration>,
    /// `auth = "user:password"` or `auth_file = PATH` (at most one): digest authentication,
    /// and creator-only ACLs on every znode zkcron creates.
    pub auth: AuthSource,
    /// `tls = true` with `tls_ca_file` (and optionally `tls_cert_file` + `tls_key_file`);
    /// `None`: plain TCP.
    pub tls: Option<TlsSource>,
}

impl Default for ZookeeperSection {
    fn default() -> Self {
        ZookeeperSection {
            connect: None,
            cluster: "default".to_string(),
            session_timeout: Duration::from_secs(10),
            max_clock_skew: None,
            auth: AuthSource::None,
            tls: None,
        }
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Journald when started by systemd with its output on the journal (`JOURNAL_STREAM` is
    /// set), else text.
    #[default]
    Auto,
    Text,
    Json,
    Journald,
}

impl LogFormat {
    /// Resolves `Auto` from this process's environment.
    pub fn resolve(self) -> LogFormat {
        self.resolve_with(std::env::var_os("JOURNAL_STREAM").is_some())
    }

    /// Resolves `Auto`, given whether `JOURNAL_STREAM` is set.
    pub fn resolve_with(self, journal_stream_set: bool) -> LogFormat {
        match self {
            LogFormat::Auto if journal_stream_set => LogFormat::Journald,
            LogFormat::Auto => LogFormat::Text,
            other => other,
        }
    }
}

/// `[log]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSection {
    pub format: LogFormat,
    /// At most this many lines of each attempt's output (stdout and stderr together) are logged:
    /// the first half (rounded down) as they come, the last lines when the output ends; what lies
    /// between is counted and reported in one line between the two. Default
    /// [`DEFAULT_JOB_OUTPUT_LINES`].
    pub job_output_lines: usize,
    /// The bytes of one run's output kept on disk for `zkcron logs` (head and tail, half each);
    /// 0 keeps none. Default [`crate::executor::kept::DEFAULT_OUTPUT_LIMIT`].
    pub output_limit: u64,
}

/// The largest `[log] output_limit` (1 GiB).
const MAX_OUTPUT_LIMIT: i64 = 1 << 30;

/// The default of `[log] job_output_lines`. journald lets one unit log 10,000 lines per 30 s
/// by default (`RateLimitBurst=`, scaled with free disk space) and drops the rest, zkcron's own
/// messages included: at 100 lines it takes a hundred chatty runs within 30 s to reach that.
pub const DEFAULT_JOB_OUTPUT_LINES: usize = 100;

/// The largest `[log] job_output_lines`. The tail half is held in memory until the attempt's
/// output ends (up to half the cap per stream, lines cut at 4 KiB): 10,000 bounds that at 40 MiB
/// per running attempt, and is as much as journald takes from a unit in 30 s anyway.
const MAX_JOB_OUTPUT_LINES: i64 = 10_000;

impl Default for LogSection {
    fn default() -> Self {
        LogSection {
            format: LogFormat::default(),
            job_output_lines: DEFAULT_JOB_OUTPUT_LINES,
            output_limit: crate::executor::kept::DEFAULT_OUTPUT_LIMIT,
        }
    }
}

impl Config {
    /// The jobs directory: `[scheduler].jobs_dir` when set, else `jobs.d` beside the config file
    /// when there is one, else `./jobs.d`.
    pub fn jobs_dir_or_default(&self, config_path: Option<&Path>) -> PathBuf {
        if let Some(dir) = &self.scheduler.jobs_dir {
            return dir.clone();
        }
        match config_path {
            Some(path) => path.parent().unwrap_or(Path::new("")).join("jobs.d"),
            None => PathBuf::from("./jobs.d"),
        }
    }

    /// The calendars directory: `[scheduler].calendars_dir` when set, else `calendars.d` beside
    /// the jobs dir `jobs_dir` (a dir that does not exist holds no calendar).
    pub fn calendars_dir_or_default(&self, jobs_dir: &Path) -> PathBuf {
        match &self.scheduler.calendars_dir {
            Some(dir) => dir.clone(),
            None => jobs_dir
                .parent()
                .unwrap_or(Path::new(""))
                .join("calendars.d"),
        }
    }

    /// The state directory: `[scheduler].state_dir` when set, else `$STATE_DIRECTORY` (set by
    /// systemd's `StateDirectory=`), else the user's state dir, else the user's cache dir (both
    /// with `zkcron` appended), else `./state`.
    pub fn state_dir_or_default(&self) -> PathBuf {
        if let Some(dir) = &self.scheduler.state_dir {
            return dir.clone();
        }
        default_state_dir(
            std::env::var_os("STATE_DIRECTORY"),
            dirs::state_dir(),
            dirs::cache_dir(),
        )
    }

    /// What task files default to, loaded by `identity` for `backend`.
    pub fn task_defaults(&self, identity: Identity, backend: TaskBackend) -> TaskDefaults {
        TaskDefaults {
            timezone: self.scheduler.default_timezone,
            user: self.scheduler.default_user.clone(),
            identity,
            backend,
            calendars: Default::default(),
        }
    }
}

/// The state-dir fallbacks, given what the environment provides.
fn default_state_dir(
    systemd: Option<OsString>,
    state: Option<PathBuf>,
    cache: Option<PathBuf>,
) -> PathBuf {
    // systemd joins several StateDirectory= entries with ':'; the first is ours.
    if let Some(first) = systemd.as_ref().and_then(|value| {
        let text = value.to_string_lossy();
        text.split(':').find(|s| !s.is_empty()).map(PathBuf::from)
    }) {
        return first;
    }
    if let Some(dir) = state {
        return dir.join("zkcron");
    }
    if let Some(dir) = cache {
        return dir.join("zkcron");
    }
    PathBuf::from("./state")
}

/// A config file that could not be loaded: every problem found in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub path: PathBuf,
    /// At least one; whole-file problems first, then by position.
    pub problems: Vec<ConfigProblem>,
}

/// One problem in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// 1-based; 0 when the problem is about the file as a whole.
    pub line: usize,
    /// 1-based; 0 when the problem is about the file as a whole.
    pub column: usize,
    /// How many characters the caret line underlines.
    pub width: usize,
    /// The offending source line, empty for whole-file problems.
    pub snippet: String,
    pub message: String,
    /// How to fix it, e.g. "did you mean `[scheduler]`?".
    pub help: Option<String>,
}

impl ConfigError {
    fn new(path: &Path, problems: Vec<Problem>) -> ConfigError {
        ConfigError {
            path: path.to_path_buf(),
            problems: problems
                .into_iter()
                .map(|p| ConfigProblem {
                    line: p.position.line,
                    column: p.position.column,
                    width: p.position.width,
                    snippet: p.position.snippet,
                    message: p.message,
                    help: p.help,
                })
                .collect(),
        }
    }

    /// One `path:line:col: message (help)` line per problem, for logs.
    pub fn one_line_each(&self) -> Vec<String> {
        self.reports().map(|r| r.one_line()).collect()
    }

    fn reports(&self) -> impl Iterator<Item = Report<'_>> {
        self.problems.iter().map(|p| Report {
            path: &self.path,
            line: p.line,
            column: p.column,
            width: p.width,
            snippet: &p.snippet,
            message: &p.message,
            help: p.help.as_deref(),
        })
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, report) in self.reports().enumerate() {
            if index > 0 {
                f.write_str("\n\n")?;
            }
            report.render(f)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// Config files larger than this are refused unread.
pub const MAX_CONFIG_FILE_BYTES: u64 = 1024 * 1024;

/// The rules the config file is read by: like a task file, but a symlink is followed (the
/// config is read once at start, so a change of its target cannot go unnoticed).
const CONFIG_FILE: crate::files::FileRules = crate::files::FileRules {
    noun: "config file",
    limit: MAX_CONFIG_FILE_BYTES,
    follow_symlinks: true,
    not_regular_help: "point --config at a regular file, like /etc/zkcron/zkcron.toml",
    too_large_help: "a config file needs a few hundred bytes; is --config pointing at the right file?",
    missing_help: Some(
        "create it, or pass --config with the right path; without --config zkcron reads \
         /etc/zkcron/zkcron.toml only if it exists",
    ),
};

/// Reads and parses the config file at `path`, with the bounded, non-blocking reader of task
/// files: a FIFO, a device or a huge file is refused, never waited on or read to the end.
pub fn load_config(path: &Path) -> Result<Config, ConfigError> {
    match load_config_partial(path) {
        (config, None) => Ok(config),
        (_, Some(error)) => Err(error),
    }
}

/// Like [`load_config`], but also returns what could be read when there are problems (a value
/// in error keeps its default), so that `validate` goes on to check the task files of the jobs
/// dir the config names.
pub fn load_config_partial(path: &Path) -> (Config, Option<ConfigError>) {
    let text = crate::files::read_regular(path, &CONFIG_FILE, &Identity::current())
        .and_then(|(bytes, _)| decode_utf8(bytes));
    let text = match text {
        Ok(text) => text,
        Err(problem) => {
            return (
                Config::default(),
                Some(ConfigError::new(path, vec![problem])),
            );
        }
    };
    parse_config_partial(path, &text)
}

/// Parses and validates config `text`, read from `path` (used for messages and to resolve
/// relative directories).
pub fn parse_config(path: &Path, text: &str) -> Result<Config, ConfigError> {
    match parse_config_partial(path, text) {
        (config, None) => Ok(config),
        (_, Some(error)) => Err(error),
    }
}

fn parse_config_partial(path: &Path, text: &str) -> (Config, Option<ConfigError>) {
    let mut checker = Checker::new(text);
    let config = check_config(&mut checker, path);
    let problems = checker.finish();
    let error = (!problems.is_empty()).then(|| ConfigError::new(path, problems));
    (config, error)
}

fn check_config(c: &mut Checker<'_>, path: &Path) -> Config {
    let mut config = Config::default();
    let root = match DeTable::parse(c.text) {
        Ok(root) => root,
        Err(error) => {
            c.syntax_error(&error);
            return config;
        }
    };
    let base = path.parent().unwrap_or(Path::new(""));
    for (key, value) in root.get_ref().iter() {
        let name: &str = key.get_ref();
        let Some((section, keys)) = SECTIONS.iter().find(|(s, _)| *s == name) else {
            unknown_top_level(c, key, value);
            continue;
        };
        let DeValue::Table(table) = value.get_ref() else {
            let message = format!(
                "`{section}` must be a section ([{section}]), found {}",
                c.found(value)
            );
            c.report(value.span(), message, None);
            continue;
        };
        for (key, value) in table.iter() {
            let k: &str = key.get_ref();
            let qualified = format!("{section}.{k}");
            let at = SectionKey {
                key: k,
                qualified: &qualified,
                value,
            };
            let known = match *section {
                "node" => node_key(c, at, &mut config.node),
                "scheduler" => scheduler_key(c, at, base, &mut config.scheduler),
                "coordination" => coordination_key(c, at, base, &mut config.coordination),
                "log" => log_key(c, at, &mut config.log),
                "http" => http_key(c, at, base, &mut config.http),
                _ => false,
            };
            if !known {
                unknown_section_key(c, section, keys, key);
            }
        }
    }
    config
}

/// One key of a section as the config file gives it.
#[derive(Clone, Copy)]
struct SectionKey<'a, 'v> {
    /// The key within its section (`id`).
    key: &'a str,
    /// The key with its section, as messages name it (`node.id`).
    qualified: &'a str,
    value: &'a Spanned<DeValue<'v>>,
}

/// Reads a key of `[node]`; `false` if there is no such key.
fn node_key(c: &mut Checker<'_>, at: SectionKey<'_, '_>, into: &mut NodeSection) -> bool {
    let (q, value) = (at.qualified, at.value);
    match at.key {
        "id" => into.id = node_id(c, q, value),
        "version" => into.version = version(c, q, value),
        "labels" => {
            into.labels = c
                .string_map(q, value, "{ rack = \"r1\" }")
                .into_iter()
                .map(|(name, value)| (name.into_inner(), value))
                .collect()
        }
        _ => return false,
    }
    true
}

/// Reads a key of `[scheduler]` (paths relative to `base`); `false` if there is no such key.
fn scheduler_key(
    c: &mut Checker<'_>,
    at: SectionKey<'_, '_>,
    base: &Path,
    into: &mut SchedulerSection,
) -> bool {
    let (q, value) = (at.qualified, at.value);
    match at.key {
        "jobs_dir" => into.jobs_dir = c.path(q, value).map(|p| base.join(p)),
        "calendars_dir" => into.calendars_dir = c.path(q, value).map(|p| base.join(p)),
        "state_dir" => into.state_dir = c.path(q, value).map(|p| base.join(p)),
        "default_timezone" => {
            if let Some(zone) = c.string(q, value) {
                match parse_timezone(zone) {
                    Ok(tz) => into.default_timezone = tz,
                    Err(error) => c.report(c.content_span(value), error.to_string(), None),
                }
            }
        }
        "shutdown_grace" => {
            if let Some(grace) = c.duration(q, value) {
                into.shutdown_grace = grace;
            }
        }
        "default_user" => into.default_user = c.non_empty_string(q, value).map(String::from),
        "history_runs" => {
            if let Some(runs) = c.integer(q, value, 1..=MAX_HISTORY_RUNS) {
                into.history_runs = runs as usize;
            }
        }
        _ => return false,
    }
    true
}

/// Reads a key of `[coordination]` (paths relative to `base`); `false` if there is no such key.
fn coordination_key(
    c: &mut Checker<'_>,
    at: SectionKey<'_, '_>,
    base: &Path,
    into: &mut CoordinationSection,
) -> bool {
    match at.key {
        "backend" => {
            let choices = [("local", Backend::Local), ("zookeeper", Backend::Zookeeper)];
            into.backend = c
                .choice(at.qualified, at.value, &choices)
                .unwrap_or_default();
        }
        "zookeeper" => zookeeper::section(c, at.value, base, &mut into.zookeeper),
        _ => return false,
    }
    true
}

/// Reads a key of `[log]`; `false` if there is no such key.
fn log_key(c: &mut Checker<'_>, at: SectionKey<'_, '_>, into: &mut LogSection) -> bool {
    let (q, value) = (at.qualified, at.value);
    match at.key {
        "format" => {
            let choices = [
                ("auto", LogFormat::Auto),
                ("text", LogFormat::Text),
                ("json", LogFormat::Json),
                ("journald", LogFormat::Journald),
            ];
            into.format = c.choice(q, value, &choices).unwrap_or_default();
        }
        "job_output_lines" => {
            if let Some(lines) = c.integer(q, value, 0..=MAX_JOB_OUTPUT_LINES) {
                into.job_output_lines = lines as usize;
            }
        }
        "output_limit" => {
            if let Some(bytes) = c.integer(q, value, 0..=MAX_OUTPUT_LIMIT) {
                into.output_limit = bytes as u64;
            }
        }
        _ => return false,
    }
    true
}

/// Reads a key of `[http]` (paths relative to `base`); `false` if there is no such key.
fn http_key(
    c: &mut Checker<'_>,
    at: SectionKey<'_, '_>,
    base: &Path,
    into: &mut HttpSection,
) -> bool {
    let (q, value) = (at.qualified, at.value);
    match at.key {
        "admin_token_file" => into.admin_token_file = c.path(q, value).map(|p| base.join(p)),
        "read_token_file" => into.read_token_file = c.path(q, value).map(|p| base.join(p)),
        "listen" => {
            if let Some(text) = c.string(q, value) {
                if text.is_empty() {
                    into.listen = None;
                } else {
                    match text.parse::<std::net::SocketAddr>() {
                        Ok(address) => into.listen = Some(address),
                        Err(_) => c.report(
                            c.content_span(value),
                            format!(
                                "`{q}` must be an IP address and port such as \"{DEFAULT_HTTP_LISTEN}\" or \"[::1]:9464\" (\"\" turns the endpoint off), found {text:?}"
                            ),
                            None,
                        ),
                    }
                }
            }
        }
        _ => return false,
    }
    true
}

/// A top-level entry that is not a known section: a misspelt section, or a key that belongs
/// inside one.
fn unknown_top_level(
    c: &mut Checker<'_>,
    key: &Spanned<toml::de::DeString<'_>>,
    value: &Spanned<DeValue<'_>>,
) {
    let name: &str = key.get_ref();
    let sections = SECTIONS.iter().map(|(s, _)| *s);
    if value.get_ref().is_table() {
        let help = match closest(name, sections.clone()) {
            Some(s) => format!("did you mean `[{s}]`?"),
            None => format!("known sections: {}", section_list()),
        };
        c.report(
            key.span(),
            format!("unknown section `[{name}]`"),
            Some(help),
        );
        return;
    }
    let help = match home_of(name) {
        Some(section) => format!("`{name}` belongs in the [{section}] section"),
        None => format!("keys go inside a section: {}", section_list()),
    };
    c.report(
        key.span(),
        format!("unknown top-level key `{name}`"),
        Some(help),
    );
}

fn unknown_section_key(
    c: &mut Checker<'_>,
    section: &str,
    keys: &[&str],
    key: &Spanned<toml::de::DeString<'_>>,
) {
    let name: &str = key.get_ref();
    let help = match (closest(name, keys.iter().copied()), home_of(name)) {
        (Some(k), _) => format!("did you mean `{k}`?"),
        (None, Some(other)) => format!("`{name}` belongs in the [{other}] section"),
        (None, None) => format!("known keys in [{section}]: {}", keys.join(", ")),
    };
    c.report(
        key.span(),
        format!("unknown key `{name}` in [{section}]"),
        Some(help),
    );
}

/// The section a key belongs to, if any.
fn home_of(key: &str) -> Option<&'static str> {
    SECTIONS
        .iter()
        .find(|(_, keys)| keys.contains(&key))
        .map(|(section, _)| *section)
}

fn section_list() -> String {
    SECTIONS
        .iter()
        .map(|(s, _)| format!("[{s}]"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn node_id(c: &mut Checker<'_>, key: &str, value: &Spanned<DeValue<'_>>) -> Option<String> {
    let id = c.string(key, value)?;
    if !is_path_name(id) {
        let message = format!(
            "`{key}` = {id:?} is not a valid node id: it must match {NODE_ID_PATTERN}, because it \
             becomes part of ZooKeeper paths"
        );
        c.report(c.content_span(value), message, None);
        return None;
    }
    Some(id.to_string())
}

fn version(
    c: &mut Checker<'_>,
    key: &str,
    value: &Spanned<DeValue<'_>>,
) -> Option<semver::Version> {
    let text = c.string(key, value)?;
    match semver::Version::parse(text) {
        Ok(version) => Some(version),
        Err(error) => {
            let message = format!("`{key}` = {text:?} is not a semantic version: {error}");
            c.report(
                c.content_span(value),
                message,
                Some("write a version like \"2.1.0\"".into()),
            );
            None
        }
    }
}

#[cfg(test)]
mod tests;
mod tls;
mod tokens;
mod zookeeper;

pub use tokens::{MIN_ADMIN_TOKEN, read_admin_token, read_token};
