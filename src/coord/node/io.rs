//! The seam between the sans-IO [`Node`](super::Node) and its drivers (the ZooKeeper driver in
//! `coord::zk`, the simulation in `tests/sim`).
//!
//! The node speaks *generic* ZooKeeper operations ([`ZkOp`], from [`crate::coord::zkop`], which
//! the operator's writes in [`crate::coord::operator`] share) and receives their replies, watch
//! events and session states ([`Input`]); the daemon's [`Coordinator`](crate::coord::Coordinator)
//! calls become [`Request`]s answered by [`Output::Answer`]. A driver executes exactly what the
//! node asks, so the simulation's in-memory ZooKeeper judges the same code the real driver runs.
//!
//! Ordering: a driver applies the calls of one session in the order the node emitted them (the
//! ZooKeeper client's FIFO order) and delivers replies, watch events and session states in the
//! order ZooKeeper produced them.

use std::time::Duration;

use chrono::{DateTime, Utc};

pub use crate::coord::zkop::{CreateMode, NodeAcl, ZkOp};
use crate::coord::{ClaimIntent, ClaimOutcome, CoordError, Leadership, RunResult, Trigger};
use crate::plan::ledger::TickEntry;
use crate::task::TaskSpec;

/// The node numbers its calls.
pub type OpId = u64;
/// The driver numbers the daemon's requests.
pub type ReqId = u64;

/// The time an input arrives at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// Monotonic time since the driver started; all deadlines are in this time.
    pub mono: Duration,
    /// This node's wall clock (maybe skewed): written into records, compared with ZooKeeper's.
    pub wall: DateTime<Utc>,
}

/// A znode's metadata (the subset the node uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stat {
    pub version: i32,
    /// The session that owns an ephemeral znode; 0 for a persistent one.
    pub ephemeral_owner: i64,
    /// Server time of the last change, in ms since the epoch.
    pub mtime_ms: i64,
    pub ctime_ms: i64,
    pub czxid: i64,
    pub mzxid: i64,
}

/// A successful reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZkOk {
    Created(Stat),
    Stat(Stat),
    Done,
    Data(Vec<u8>, Stat),
    Children(Vec<String>),
    Exists(Option<Stat>),
    Multi(Vec<ZkOk>),
}

/// A failed reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZkFail {
    NoNode,
    NodeExists,
    BadVersion,
    NotEmpty,
    NoAuth,
    /// The session is gone; the server applied nothing for this call.
    SessionExpired,
    /// The outcome is unknown (the call may or may not have been applied).
    ConnectionLoss,
    /// No answer within the driver's deadline; the outcome is unknown.
    Timeout,
    /// Operation `index` of a multi failed (nothing of the multi was applied).
    Multi {
        index: usize,
        error: Box<ZkFail>,
    },
    Other(String),
}

impl ZkFail {
    /// Whether the call may have been applied.
    pub fn outcome_unknown(&self) -> bool {
        matches!(
            self,
            ZkFail::ConnectionLoss | ZkFail::Timeout | ZkFail::Other(_)
        )
    }
}

impl std::fmt::Display for ZkFail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ZkFail::NoNode => f.write_str("no node"),
            ZkFail::NodeExists => f.write_str("node exists"),
            ZkFail::BadVersion => f.write_str("bad version"),
            ZkFail::NotEmpty => f.write_str("node not empty"),
            ZkFail::NoAuth => f.write_str("not authorized"),
            ZkFail::SessionExpired => f.write_str("session expired"),
            ZkFail::ConnectionLoss => f.write_str("connection lost"),
            ZkFail::Timeout => f.write_str("no answer in time"),
            ZkFail::Multi { index, error } => write!(f, "operation {index} of the multi: {error}"),
            ZkFail::Other(message) => f.write_str(message),
        }
    }
}

/// What a watch reports about a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchKind {
    Created,
    Deleted,
    DataChanged,
}

/// What the daemon asks (the [`Coordinator`](crate::coord::Coordinator) methods).
#[derive(Debug, Clone)]
pub enum Request {
    Publish(Vec<TaskSpec>),
    LastClaimed {
        task: String,
    },
    Claim {
        task: String,
        tick: DateTime<Utc>,
        intent: ClaimIntent,
        /// The ticks not run the claim writes into the record (`plan::ledger`).
        ticks: Vec<TickEntry>,
    },
    OrphanedTick {
        task: String,
    },
    Reclaim {
        task: String,
        tick: DateTime<Utc>,
    },
    RunsElsewhere {
        task: String,
    },
    /// [`Coordinator::queued_tick`](crate::coord::Coordinator::queued_tick).
    QueuedTick {
        task: String,
    },
    /// [`Coordinator::runs_ended_elsewhere`](crate::coord::Coordinator::runs_ended_elsewhere).
    RunsEndedElsewhere {
        task: String,
    },
    RunEnded {
        task: String,
        result: RunResult,
    },
    LastResult {
        task: String,
    },
    /// [`Coordinator::claim_manual`](crate::coord::Coordinator::claim_manual).
    ClaimManual {
        task: String,
        trigger: Trigger,
    },
    ReleaseAll,
    Close,
}

/// The answer to a [`Request`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answered {
    Done,
    Claim(ClaimOutcome),
    /// A pooled task's claim won on these items (in the task file's order): run them.
    ClaimedItems(Vec<String>),
    Tick(Option<DateTime<Utc>>),
    Count(usize),
    Result(Option<Box<RunResult>>),
}

/// An answer: what was asked for, or why not.
pub type Answer = Result<Answered, CoordError>;

/// Everything that goes into the node.
#[derive(Debug)]
pub enum Input {
    /// A session is established: a new one, or the same one resumed after a disconnect.
    Connected {
        session_id: i64,
        negotiated_timeout: Duration,
    },
    /// Establishing a session failed (the driver retries); said in `why_paused`.
    ConnectFailed {
        error: String,
    },
    Disconnected,
    Expired,
    Watch {
        path: String,
        kind: WatchKind,
    },
    Reply {
        op: OpId,
        result: Result<ZkOk, ZkFail>,
    },
    Request {
        req: ReqId,
        request: Request,
    },
}

/// How loud a [`Report`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Debug,
    Info,
    Warn,
    Error,
}

/// A log line for the operator: what happened and, for problems, the fix. Fields render as
/// `key=value` after the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub level: Level,
    pub message: String,
    pub fields: Vec<(&'static str, String)>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)?;
        for (key, value) in &self.fields {
            write!(f, " {key}={value}")?;
        }
        Ok(())
    }
}

/// Everything that comes out of the node.
#[derive(Debug)]
pub enum Output {
    /// Perform `zk` in the current session; reply with [`Input::Reply`] and this `op`.
    Call {
        op: OpId,
        zk: ZkOp,
    },
    /// The session expired: build a new client; then [`Input::Connected`].
    NewSession,
    /// Close the session (after [`Request::Close`]): the node's ephemerals go at once.
    CloseSession,
    /// The leadership changed.
    Leadership(Leadership),
    Answer {
        req: ReqId,
        answer: Answer,
    },
    Report(Report),
}
