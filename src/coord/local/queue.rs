//! The journal writer's queue: changes go in from the tokio workers, batches come out on the
//! writer's thread.
//!
//! Only a change that finds the writer idle wakes it, or a claim that finds it lingering over
//! results ([`Queue::linger`]). While the writer gathers a batch (it
//! sleeps [`super::journal::Gather::quiet`] and then takes what came) or writes one, changes are
//! only pushed: the ten claims of an instant cost one wake-up of the writer instead of ten, each
//! a futex wake on a worker and a context switch on the writer (a channel wakes its receiver
//! on every send it waits for, and the gathering waited for each).

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;

use super::Change;

/// A change on its way to the disk, and who to tell when it is there.
#[derive(Debug)]
pub(super) struct PendingWrite {
    pub(super) change: Change,
    pub(super) durability: Durability,
    pub(super) batching: Batching,
    pub(super) durable: oneshot::Sender<Result<(), String>>,
}

/// Whether the writer waits for more changes to commit with a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Batching {
    /// Its batch gathers what arrives around it ([`super::journal::Gather`]): a claim made
    /// ahead of its tick's instant loses nothing by the wait.
    Gather,
    /// Its batch is committed as soon as the writer takes it, with whatever is queued then: a
    /// process waits for it (the start of a tick queued behind a run that has just ended).
    AtOnce,
}

/// When a change is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Durability {
    /// Once its batch is synced (claims).
    Synced,
    /// Once its batch is written; synced within [`super::journal::SYNC_WRITTEN_WITHIN`] (results).
    Written,
}

/// The queue, shared by the backend (which pushes and closes) and the writer thread.
#[derive(Default)]
pub(super) struct Queue {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    items: Vec<PendingWrite>,
    /// The writer waits for a change (and must be woken by the next push).
    idle: bool,
    /// The writer lets results gather ([`Queue::linger`]): only a claim wakes it.
    lingering: bool,
    /// The backend is gone: no change comes any more.
    closed: bool,
}

/// The queue is closed: the writer has ended or is ending.
#[derive(Debug)]
pub(super) struct Closed;

/// What the writer finds when it asks for changes.
pub(super) enum Next {
    /// The changes queued since it last took them, oldest first.
    Changes(Vec<PendingWrite>),
    /// None came within the time it was willing to wait.
    TimedOut,
    /// None is queued, and none will come.
    Closed,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("journal queue lock poisoned")
    }

    /// Queues `write`, waking the writer if it is idle; fails if the queue is closed.
    pub(super) fn push(&self, write: PendingWrite) -> Result<(), Closed> {
        let mut state = self.lock();
        if state.closed {
            return Err(Closed);
        }
        let claim = write.durability == Durability::Synced;
        state.items.push(write);
        if std::mem::take(&mut state.idle) || (state.lingering && claim) {
            self.wake.notify_one();
        }
        Ok(())
    }

    /// No change comes any more; the writer takes what is queued, then ends.
    pub(super) fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        if std::mem::take(&mut state.idle) || state.lingering {
            self.wake.notify_one();
        }
    }

    /// Waits (for at most `limit`, or for ever) until a change is queued or the queue is closed.
    pub(super) fn wait(&self, limit: Option<Duration>) -> Next {
        let mut state = self.lock();
        loop {
            if !state.items.is_empty() {
                state.idle = false;
                return Next::Changes(std::mem::take(&mut state.items));
            }
            if state.closed {
                return Next::Closed;
            }
            state.idle = true;
            match limit {
                None => state = self.wake.wait(state).expect("journal queue lock poisoned"),
                Some(limit) => {
                    let (woken, waited) = self
                        .wake
                        .wait_timeout(state, limit)
                        .expect("journal queue lock poisoned");
                    state = woken;
                    if waited.timed_out() && state.items.is_empty() && !state.closed {
                        state.idle = false;
                        return Next::TimedOut;
                    }
                }
            }
        }
    }

    /// Waits `window` for more results to join the ones the writer holds, but no longer than
    /// until a change that must be synced (a claim, which someone awaits) is queued or the
    /// queue is closed. Results pushed meanwhile do not wake the writer.
    // The writer's waits are real time, outside tokio.
    #[allow(clippy::disallowed_methods)]
    pub(super) fn linger(&self, window: Duration) {
        let deadline = std::time::Instant::now() + window;
        let mut state = self.lock();
        state.lingering = true;
        loop {
            let claim = state
                .items
                .iter()
                .any(|w| w.durability == Durability::Synced);
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if claim || state.closed || left.is_zero() {
                break;
            }
            state = self
                .wake
                .wait_timeout(state, left)
                .expect("journal queue lock poisoned")
                .0;
        }
        state.lingering = false;
    }

    /// What was queued since the writer last took changes, without waiting or waking anyone.
    pub(super) fn take(&self) -> Vec<PendingWrite> {
        std::mem::take(&mut self.lock().items)
    }
}

/// The backend's end of the queue: dropping it closes the queue, so the writer ends.
pub(super) struct Pusher(pub(super) std::sync::Arc<Queue>);

impl Drop for Pusher {
    fn drop(&mut self) {
        self.0.close();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::coord::local::Change;

    fn change(task: &str) -> PendingWrite {
        PendingWrite {
            change: Change::of(task),
            durability: Durability::Synced,
            batching: Batching::Gather,
            durable: tokio::sync::oneshot::channel().0,
        }
    }

    fn result(task: &str) -> PendingWrite {
        PendingWrite {
            durability: Durability::Written,
            ..change(task)
        }
    }

    fn tasks(changes: &[PendingWrite]) -> Vec<&str> {
        changes.iter().map(|w| w.change.task.as_str()).collect()
    }

    #[test]
    fn changes_pushed_while_the_writer_is_busy_are_taken_together_in_order() {
        let queue = Queue::default();
        queue.push(change("a")).unwrap();
        let Next::Changes(first) = queue.wait(None) else {
            panic!("a change was queued")
        };
        assert_eq!(tasks(&first), ["a"]);
        // The writer is busy (gathering): these do not wake it, and all come out at once.
        for task in ["b", "c", "d"] {
            queue.push(change(task)).unwrap();
        }
        assert!(!queue.lock().idle);
        assert_eq!(tasks(&queue.take()), ["b", "c", "d"]);
        assert!(queue.take().is_empty());
    }

    #[test]
    fn a_push_wakes_an_idle_writer_and_a_close_ends_it_after_what_is_queued() {
        let queue = Arc::new(Queue::default());
        let writer = {
            let queue = queue.clone();
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                loop {
                    match queue.wait(None) {
                        Next::Changes(changes) => {
                            seen.extend(changes.into_iter().map(|w| w.change.task))
                        }
                        Next::TimedOut => unreachable!("no limit was given"),
                        Next::Closed => return seen,
                    }
                }
            })
        };
        let pusher = Pusher(queue.clone());
        pusher.0.push(change("a")).unwrap();
        pusher.0.push(change("b")).unwrap();
        drop(pusher);
        assert_eq!(writer.join().unwrap(), ["a", "b"]);
        assert!(
            queue.push(change("c")).is_err(),
            "a closed queue takes nothing"
        );
    }

    #[test]
    fn an_idle_writer_with_a_limit_times_out_and_is_busy_again() {
        let queue = Queue::default();
        assert!(matches!(
            queue.wait(Some(Duration::from_millis(1))),
            Next::TimedOut
        ));
        assert!(
            !queue.lock().idle,
            "a timed-out writer is syncing, not waiting"
        );
    }

    /// Lingers on another thread for an hour; the receiver hears when it returned.
    // Waits for another thread, on the real clock (the queue's waits are real time).
    #[allow(clippy::disallowed_methods)]
    fn linger_an_hour(queue: &Arc<Queue>) -> std::sync::mpsc::Receiver<()> {
        let (returned, heard) = std::sync::mpsc::channel();
        let writer = queue.clone();
        std::thread::spawn(move || {
            writer.linger(Duration::from_secs(3600));
            let _ = returned.send(());
        });
        // Lingering, and so not woken by results.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !queue.lock().lingering {
            assert!(
                std::time::Instant::now() < deadline,
                "the writer never lingered"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        heard
    }

    #[test]
    fn a_lingering_writer_lets_results_gather_and_a_claim_ends_the_wait_at_once() {
        let queue = Arc::new(Queue::default());
        let returned = linger_an_hour(&queue);
        queue.push(result("b")).unwrap();
        queue.push(result("c")).unwrap();
        assert!(queue.lock().lingering, "results do not end the wait");
        queue.push(change("d")).unwrap();
        returned
            .recv_timeout(Duration::from_secs(30))
            .expect("a claim ends the wait");
        assert!(!queue.lock().lingering);
        assert_eq!(tasks(&queue.take()), ["b", "c", "d"]);
    }

    #[test]
    fn a_close_ends_a_lingering_wait() {
        let queue = Arc::new(Queue::default());
        let returned = linger_an_hour(&queue);
        queue.close();
        returned
            .recv_timeout(Duration::from_secs(30))
            .expect("a close ends the wait");
    }

    #[test]
    fn a_linger_returns_after_its_window() {
        let queue = Queue::default();
        queue.push(result("b")).unwrap();
        queue.linger(Duration::from_millis(1));
        assert_eq!(tasks(&queue.take()), ["b"]);
    }
}
