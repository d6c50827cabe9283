//! The local backend's control socket: `<state_dir>/zkcron.sock`, served by the daemon
//! (`daemon::control`), one JSON request and one JSON reply per connection, each a single line.
//! Only the daemon's user can connect (the socket is 0600 in the 0700 state dir).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::model::Status;
use crate::coord::backfill::BackfillRecord;
use crate::coord::records::{HistoryEntry, TriggerRecord};

/// The socket's file name in the state dir.
pub const SOCKET: &str = "zkcron.sock";

/// How long the client waits for the daemon's reply.
const REPLY_DEADLINE: Duration = Duration::from_secs(10);

/// A request to the daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    Status,
    History {
        task: String,
        n: usize,
    },
    /// The task's tick ledger (`history --ticks`).
    Ticks {
        task: String,
    },
    Trigger {
        task: String,
        by: String,
    },
    TriggerState {
        fire_id: String,
    },
    /// A backfill of `task`'s ticks in `[from, to)`.
    Backfill {
        task: String,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        by: String,
    },
    /// Every backfill request kept.
    Backfills,
    CancelBackfill {
        name: String,
        by: String,
    },
    Pause {
        task: String,
        by: String,
        /// `zkcron pause --reason`; absent from older clients.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    Resume {
        task: String,
        by: String,
    },
}

/// The daemon's reply: `ok` and the field of the request, or `error`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<HistoryEntry>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticks: Option<Vec<crate::plan::ledger::Line>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fire_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<TriggerRecord>,
    /// Backfill requests by name: all of them (`backfills`), or the one requested or cancelled
    /// (as it was before the cancel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backfills: Option<BTreeMap<String, BackfillRecord>>,
    /// For pause and resume: whether the state changed (false: it already was so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed: Option<bool>,
}

impl Reply {
    pub fn error(message: impl Into<String>) -> Reply {
        Reply {
            ok: false,
            error: Some(message.into()),
            ..Reply::default()
        }
    }
}

/// The socket of the daemon using `state_dir`.
pub fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join(SOCKET)
}

/// Sends `request` to the daemon of `state_dir` and returns its reply; an error reply is an
/// error here.
pub fn ask(state_dir: &Path, request: &Request) -> anyhow::Result<Reply> {
    ask_within(state_dir, request, REPLY_DEADLINE)
}

/// [`ask`], waiting at most `deadline` for each of sending and the reply.
pub(crate) fn ask_within(
    state_dir: &Path,
    request: &Request,
    deadline: Duration,
) -> anyhow::Result<Reply> {
    let path = socket_path(state_dir);
    let stream = match UnixStream::connect(&path) {
        Ok(stream) => stream,
        Err(error) => {
            let why = match error.kind() {
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                    "no zkcron daemon is running with this state dir".to_string()
                }
                std::io::ErrorKind::PermissionDenied => {
                    "permission denied: only the daemon's user may use it (run as that user, \
                     e.g. with sudo -u)"
                        .to_string()
                }
                _ => error.to_string(),
            };
            bail!(
                "cannot reach the zkcron daemon at {}: {why}; this host uses the local backend, \
                 whose daemon answers this command: start it (`systemctl start zkcron`, or \
                 `zkcron run --state-dir {}`), or point --state-dir or [scheduler] state_dir at \
                 its state dir",
                path.display(),
                state_dir.display()
            );
        }
    };
    stream.set_read_timeout(Some(deadline))?;
    stream.set_write_timeout(Some(deadline))?;
    let mut line = serde_json::to_string(request).expect("requests serialize");
    line.push('\n');
    (&stream)
        .write_all(line.as_bytes())
        .with_context(|| format!("sending the request to {}", path.display()))?;
    let mut reply = String::new();
    match BufReader::new(&stream).read_line(&mut reply) {
        // A read timeout is EAGAIN ("Resource temporarily unavailable") on a Unix socket.
        Err(error)
            if matches!(
                error.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            bail!(
                "the zkcron daemon at {} did not answer within {}s; it is busy or stuck (with \
                 tens of thousands of tasks `status` can take longer: see docs/BENCHMARKS.md, \
                 \"100,000 task files\"); try again, and look at its log",
                path.display(),
                deadline.as_secs_f64()
            );
        }
        result => {
            result
                .with_context(|| format!("reading the daemon's reply from {}", path.display()))?;
        }
    }
    let reply: Reply = serde_json::from_str(&reply)
        .with_context(|| format!("the daemon at {} sent no valid reply", path.display()))?;
    if !reply.ok {
        bail!(
            "{}",
            reply
                .error
                .unwrap_or_else(|| "the daemon refused the request".into())
        );
    }
    Ok(reply)
}
