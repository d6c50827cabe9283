//! zkcron: a distributed cron daemon.
//!
//! # Layout
//!
//! - [`accounts`]: who zkcron runs as ([`accounts::Identity`]) and user and group lookups.
//! - [`clock`]: `Clock`, where the shell reads calendar time: the system's, built by `cli` and
//!   handed down, or tokio's paused time in tests (the core takes `now` as an argument).
//! - [`schedule`]: cron expressions and time zones; the instants a schedule fires at.
//! - [`task`]: task files in `jobs.d/`: loading, validation and error reports.
//! - [`config`]: the node configuration `zkcron.toml`.
//! - `diag`: positions of problems in those files and their rustc-style rendering.
//! - [`files`]: what zkcron trusts on disk (owners, modes, symlinks, parents) and the bounded,
//!   non-blocking reader of task and config files.
//! - [`plan`]: the per-task tick planner, a pure state machine (catch-up, deadlines, jitter,
//!   overlap decisions); it reads no clock and does no I/O.
//! - [`firing`]: the daemon's per-task firing rules (overlap, claims, reruns, manual runs,
//!   pause, reload), a sans-IO state machine the daemon drives.
//! - [`coord`]: the coordination seam (`Coordinator`), the pure rules (`rank`, `lease`,
//!   `record`, the operator's writes `operator`), the cluster node as a sans-IO state machine (`node`), the ZooKeeper backend
//!   that drives it (`zk`) and the embedded `local` backend.
//! - [`executor`]: runs one tick's command as a process group, with timeout, retries and
//!   output streaming.
//! - [`daemon`]: the async shell that wires the above to timers, signals and file watching.
//! - [`service`]: `sd_notify` to systemd: ready, status, stopping, watchdog.
//! - [`http`]: the `[http] listen` endpoint: `/metrics`, `/healthz`, `/status`, the dashboard
//!   and the API under `/api/`.
//! - [`metrics`]: the daemon's Prometheus metrics.
//! - [`logging`]: the log output (text, JSON, journald).
//! - [`preflight`]: what `run` needs before it starts, checked the same way by `validate`.
//! - [`ops`]: the operator's commands (`status`, `explain`, `history`, `trigger`, `pause`,
//!   `resume`, `drain`, `undrain`), computed from ZooKeeper or asked of the local daemon.
//! - [`cli`]: the `zkcron` command line.
//! - [`manual`]: `zkcron(1)` and the shell completions, generated from the clap definition.

pub mod accounts;
pub mod cli;
pub mod clock;
pub mod config;
pub mod coord;
pub mod daemon;
mod diag;
pub mod executor;
pub mod files;
pub mod firing;
pub mod http;
pub mod logging;
pub mod manual;
pub mod metrics;
pub mod ops;
pub mod plan;
pub mod preflight;
pub mod schedule;
pub mod service;
pub mod task;
