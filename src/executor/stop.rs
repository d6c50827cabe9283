//! Stop requests: how a run is told to stop, and how it watches for that.

use tokio::sync::watch;

/// How hard a run has been asked to stop. Requests only ever escalate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum StopKind {
    Running,
    /// Start no further attempt; a running one goes on (shutdown, or the task was removed).
    NoMoreAttempts,
    /// SIGTERM, then SIGKILL after `kill_grace`.
    Terminate,
    /// SIGKILL at once.
    KillNow,
}

/// Tells a run to stop: SIGTERM to its process group, SIGKILL after `kill_grace` (or at once
/// with [`StopHandle::kill_now`]), or only to start no further attempt
/// ([`StopHandle::cancel_retries`]). No further retries after any request. Dropping every handle
/// never stops a run.
#[derive(Debug, Clone)]
pub struct StopHandle {
    /// Holds the strongest request so far; the run watches it.
    sender: watch::Sender<StopKind>,
}

/// The receiving side of a [`StopHandle`], passed into [`run`](super::run).
#[derive(Debug)]
pub struct StopSignal {
    /// Sees the strongest request so far; a closed channel means no request will ever come.
    receiver: watch::Receiver<StopKind>,
}

impl StopHandle {
    /// A handle and the signal it controls.
    pub fn new() -> (StopHandle, StopSignal) {
        let (sender, receiver) = watch::channel(StopKind::Running);
        (StopHandle { sender }, StopSignal { receiver })
    }

    /// Lets a running attempt finish but starts no retry: a pending backoff ends the run at once.
    pub fn cancel_retries(&self) {
        self.escalate(StopKind::NoMoreAttempts);
    }

    /// Stops the run gracefully: SIGTERM now, SIGKILL after `kill_grace`.
    pub fn terminate(&self) {
        self.escalate(StopKind::Terminate);
    }

    /// Stops the run with SIGKILL at once, even if `terminate` was called before.
    pub fn kill_now(&self) {
        self.escalate(StopKind::KillNow);
    }

    fn escalate(&self, kind: StopKind) {
        self.sender.send_if_modified(|current| {
            if *current < kind {
                *current = kind;
                true
            } else {
                false
            }
        });
    }
}

impl StopSignal {
    /// The strongest request so far.
    pub(super) fn current(&self) -> StopKind {
        *self.receiver.borrow()
    }

    /// Waits until a request stronger than `seen` arrives; waits for ever when every handle is
    /// gone.
    pub(super) async fn stronger_than(&mut self, seen: StopKind) -> StopKind {
        // The borrowed value is copied out at once: holding it across an await would make the
        // run future `!Send`.
        let kind = self
            .receiver
            .wait_for(|kind| *kind > seen)
            .await
            .map(|k| *k);
        match kind {
            Ok(kind) => kind,
            Err(_) => std::future::pending().await,
        }
    }
}
