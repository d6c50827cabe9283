//! Calls in flight and timers: the node's part that sends calls and keeps what their
//! replies continue with ([`Io::pending`]), its timers and the outputs not polled yet.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use super::{Now, OpId, Output, Pending, Timer};

/// Calls in flight and timers: what the node asked of ZooKeeper and when to wake up, the
/// outputs not polled yet, and the time of the input being handled.
#[derive(Debug)]
pub(super) struct Io {
    /// The time of the input being handled (the node reads no clock).
    pub(super) now: Now,
    /// Outputs not polled yet, in order.
    pub(super) out: VecDeque<Output>,
    /// The id of the next call.
    pub(super) next_op: OpId,
    /// The calls in flight, with what their replies continue with.
    pub(super) pending: BTreeMap<OpId, Pending>,
    /// Bumped whenever a session ends: replies and timers of older generations are dropped.
    pub(super) generation: u64,
    /// The node's timers, by due time (monotonic) and the order they were set.
    pub(super) timers: BTreeMap<(Duration, u64), Timer>,
    /// The sequence number of the last timer set: timers due at once fire in order.
    pub(super) timer_seq: u64,
    /// Setup, registration or a take failed: try again at this time.
    pub(super) retry_at: Option<Duration>,
    /// The delay before the next retry: doubled by each failure (up to 10 s), reset once
    /// registered.
    pub(super) retry_delay: Duration,
    /// Problems already reported (by key), so each is logged once per change.
    pub(super) reported: BTreeSet<String>,
}

impl Io {
    /// No call in flight and no timer yet, at `now`.
    pub(super) fn new(now: Now) -> Io {
        Io {
            now,
            out: VecDeque::new(),
            next_op: 1,
            pending: BTreeMap::new(),
            generation: 0,
            timers: BTreeMap::new(),
            timer_seq: 0,
            retry_at: None,
            retry_delay: Duration::from_millis(200),
            reported: BTreeSet::new(),
        }
    }
}
