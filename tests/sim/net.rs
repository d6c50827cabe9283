//! The modelled network: connections, messages, timers and the event queue.

use super::*;

// ------------------------------------------------------------------------------------------------
// Network and events
// ------------------------------------------------------------------------------------------------

#[derive(Debug)]
pub(crate) enum ToServer {
    /// Open the session `session` on this connection, or a new one.
    Connect {
        session: Option<SessionId>,
    },
    Req {
        id: u64,
        op: Op,
    },
    Ping,
    /// The client closes this connection (its session lives on).
    Close,
    /// The client closes its session (graceful stop).
    CloseSession,
}

#[derive(Debug)]
pub(crate) enum ToNode {
    Connected(SessionId),
    /// The session the client asked for has expired.
    Expired,
    Reply {
        id: u64,
        result: Result<OpOk, OpErr>,
    },
    Watch(Change),
    Pong,
    /// The server closed the connection (the session expired).
    Closed,
}

#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) node: NodeIx,
    pub(crate) alive: bool,
    pub(crate) session: Option<SessionId>,
    /// Arrival time of the last message each way: each direction is FIFO.
    pub(crate) to_server_at: Ms,
    pub(crate) to_node_at: Ms,
}

#[derive(Debug)]
pub(crate) enum Timer {
    Ping(u64),
    Reconnect(u64),
    ConnectTimeout(ConnId),
    Recheck(Ms),
    Wake {
        task: TaskIx,
        generation: u64,
        seq: u64,
    },
    RegisterRetry,
    /// The node notices that a connection was reset.
    Reset(ConnId),
    /// Re-plan every task (after a clock step or a resume).
    Poke,
}

#[derive(Debug)]
pub(crate) enum Ev {
    Fault(Fault),
    ToServer {
        conn: ConnId,
        msg: ToServer,
    },
    ToNode {
        node: NodeIx,
        conn: ConnId,
        msg: ToNode,
        /// Already in the node's socket buffer (delivered while it was stopped).
        buffered: bool,
    },
    Timer {
        node: NodeIx,
        inc: u64,
        timer: Timer,
    },
    SessionCheck(SessionId),
}

pub(crate) struct Queued {
    pub(crate) at: Ms,
    pub(crate) seq: u64,
    pub(crate) ev: Ev,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    /// Reversed: `BinaryHeap` is a max-heap and the earliest event goes first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}
