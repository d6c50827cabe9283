//! Spawns prepared runs at their instants, from threads of its own.
//!
//! A run claimed ahead waits for its instant. On a tokio timer it woke 1-2 ms late (the
//! timer wheel and the driver's `epoll_wait` round up to whole milliseconds), and the runs
//! of one instant were spawned one after another on the workers that woke them, behind each
//! other's `posix_spawn` (about 0.5 ms each on a small VM, the caller blocked until the child
//! has exec'd). Here [`SPAWN_THREADS`] threads sleep until the earliest instant with a
//! nanosecond timeout and then take the due runs one by one, so an instant's runs start
//! together on two cores, on time. Each thread enters the runtime, so what it spawns is a
//! `tokio::process::Child` whose output and exit the workers watch as before.
//!
//! A run is handed over with [`Spawner::spawn_at`] and comes back spawned through
//! [`Scheduled::spawned`]; [`Scheduled::withdraw`] takes it back unless a thread has already
//! taken it (then it is spawned, as if the withdrawal came just after the spawn).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use chrono::{DateTime, Utc};

use crate::clock::Clock;
use tokio::sync::oneshot;

use super::{PreparedRun, StartedRun};

/// Threads that spawn: an instant's runs start on two cores at once.
pub const SPAWN_THREADS: usize = 2;

/// Whether a spawner thread sleeps before its next spawn.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sleep {
    /// A run is due now.
    No,
    /// Until the earliest run is due.
    For(std::time::Duration),
    /// Until a run comes or the spawner closes.
    UntilWoken,
}

/// A spawner thread hands its spawned runs back at the latest once it holds this many.
const HAND_BACK_AFTER: usize = 16;

/// Sends each spawned run to the task that awaits it.
fn hand_back(spawned: &mut Vec<(oneshot::Sender<Spawned>, Spawned)>) {
    for (reply, run) in spawned.drain(..) {
        // A task that stopped waiting drops the run, and with it the child (killed on drop).
        let _ = reply.send(run);
    }
}

/// A run spawned by a spawner thread.
pub struct Spawned {
    pub started: StartedRun,
    /// The wall clock just before the spawn.
    pub at: DateTime<Utc>,
}

/// The spawner threads. Dropping it stops them; runs not yet spawned are then never spawned
/// ([`Scheduled::spawned`] says `None`). If no thread could be started, runs are spawned by
/// the task that awaits them, on a tokio timer, as before the spawner.
pub struct Spawner {
    inner: Arc<Inner>,
    threads: Vec<JoinHandle<()>>,
}

struct Inner {
    /// What the instants are read on: the threads sleep on the system's clock between reads.
    clock: Clock,
    state: Mutex<State>,
    /// Signalled when the earliest instant moves earlier, and on close.
    wake: Condvar,
    runtime: tokio::runtime::Handle,
}

#[derive(Default)]
struct State {
    /// Instants of the waiting runs, earliest first. Keyed by the wall clock, so that the
    /// runs of one instant share a key and only the first of them wakes the threads.
    due: BinaryHeap<Reverse<(DateTime<Utc>, u64)>>,
    waiting: HashMap<u64, Waiting>,
    next_id: u64,
    closed: bool,
}

struct Waiting {
    prepared: PreparedRun,
    claimed_at: Option<tokio::time::Instant>,
    reply: oneshot::Sender<Spawned>,
}

/// A run handed to the spawner.
pub struct Scheduled(Handed);

enum Handed {
    /// To the threads.
    Threads {
        id: u64,
        inner: Arc<Inner>,
        reply: oneshot::Receiver<Spawned>,
    },
    /// Kept by the awaiting task, which waits on tokio's timer and reads `Clock`: no spawner
    /// thread could be started, or the clock is tokio's (a thread cannot follow paused time).
    Inline(Clock, Option<Box<(DateTime<Utc>, Waiting)>>),
}

impl Spawner {
    /// Starts the threads, which read instants on `clock`; must be called within the tokio
    /// runtime, which they enter. A thread that cannot be started is logged. A clock that
    /// follows tokio's (a test's paused time) gets no thread: its runs wait on tokio's timer.
    pub fn start(clock: Clock) -> Spawner {
        let threads = if clock.follows_tokio() {
            0
        } else {
            SPAWN_THREADS
        };
        Spawner::with_threads(threads, clock)
    }

    /// [`Spawner::start`] with `count` threads; with none, runs take the fallback that a
    /// spawner whose threads could not start takes (tests exercise it so).
    #[doc(hidden)]
    pub fn with_threads(count: usize, clock: Clock) -> Spawner {
        let inner = Arc::new(Inner {
            clock,
            state: Mutex::default(),
            wake: Condvar::new(),
            runtime: tokio::runtime::Handle::current(),
        });
        let mut threads = Vec::with_capacity(count);
        for i in 0..count {
            let serving = inner.clone();
            match std::thread::Builder::new()
                .name(format!("zkcron-spawn-{i}"))
                .spawn(move || serving.serve())
            {
                Ok(thread) => threads.push(thread),
                Err(error) => tracing::error!(
                    "cannot start a thread to spawn runs ({}); {} run them",
                    error,
                    if threads.is_empty() && i + 1 == count {
                        "the tokio workers spawn runs themselves, up to 2 ms late"
                    } else {
                        "the other spawner threads"
                    }
                ),
            }
        }
        Spawner { inner, threads }
    }

    /// Spawns `prepared` at `at` by the wall clock (at once if it has passed). `claimed_at` is
    /// logged with the spawn as `claim_to_spawn_us`.
    pub fn spawn_at(
        &self,
        at: DateTime<Utc>,
        prepared: PreparedRun,
        claimed_at: Option<tokio::time::Instant>,
    ) -> Scheduled {
        let (reply, spawned) = oneshot::channel();
        let run = Waiting {
            prepared,
            claimed_at,
            reply,
        };
        if self.threads.is_empty() {
            let clock = self.inner.clock;
            return Scheduled(Handed::Inline(clock, Some(Box::new((at, run)))));
        }
        let mut state = self.inner.lock();
        let id = state.next_id;
        state.next_id += 1;
        let earlier = state
            .due
            .peek()
            .is_none_or(|Reverse((first, _))| at < *first);
        state.due.push(Reverse((at, id)));
        state.waiting.insert(id, run);
        if earlier {
            self.inner.wake.notify_all();
        }
        Scheduled(Handed::Threads {
            id,
            inner: self.inner.clone(),
            reply: spawned,
        })
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        {
            let mut state = self.inner.lock();
            state.closed = true;
            // Their awaiting tasks hear `None`.
            state.waiting.clear();
            state.due.clear();
        }
        self.inner.wake.notify_all();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Scheduled {
    /// The run, once spawned; `None` if the spawner stopped first (or it was withdrawn).
    pub async fn spawned(&mut self) -> Option<Spawned> {
        match &mut self.0 {
            Handed::Threads { reply, .. } => reply.await.ok(),
            Handed::Inline(clock, run) => {
                let at = run.as_ref()?.0;
                // Cancel-safe: the run is taken only after the only await.
                if let Ok(wait) = (at - clock.now()).to_std() {
                    tokio::time::sleep(wait).await;
                }
                let (_, run) = *run.take()?;
                let at = clock.now();
                let started = super::start(run.prepared, run.claimed_at);
                Some(Spawned { started, at })
            }
        }
    }

    /// Takes the run back if it has not been taken to be spawned yet (it is then never
    /// spawned); whether it was taken back.
    pub fn withdraw(&mut self) -> bool {
        match &mut self.0 {
            // Its heap entry stays and is skipped when it comes due.
            Handed::Threads { id, inner, .. } => inner.lock().waiting.remove(id).is_some(),
            Handed::Inline(_, run) => run.take().is_some(),
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("spawner lock poisoned")
    }

    /// A spawner thread: sleeps until the earliest instant (with a nanosecond timeout, where a
    /// tokio timer rounds up to whole milliseconds), spawns what is due, until closed. The
    /// wall clock is read again at every wake-up, so a clock step moves the instants with it.
    ///
    /// The spawned runs go back to their tasks together, once no more run is due (or
    /// [`HAND_BACK_AFTER`] are held): each hand-back wakes a tokio worker, and an instant's
    /// runs then cost one wake-up instead of one each. Their children are watched from the
    /// spawn on (the runtime registers them), so nothing is missed meanwhile.
    fn serve(&self) {
        let _runtime = self.runtime.enter();
        let mut spawned: Vec<(oneshot::Sender<Spawned>, Spawned)> = Vec::new();
        let mut state = self.lock();
        loop {
            let sleep = match state.due.peek() {
                _ if state.closed => Sleep::UntilWoken,
                None => Sleep::UntilWoken,
                Some(&Reverse((at, _))) => match (at - self.clock.now()).to_std() {
                    Ok(wait) if !wait.is_zero() => Sleep::For(wait),
                    _ => Sleep::No,
                },
            };
            if sleep != Sleep::No {
                // Nothing more to spawn now: hand back what was, then sleep (or end).
                if !spawned.is_empty() {
                    drop(state);
                    hand_back(&mut spawned);
                    state = self.lock();
                    continue;
                }
                if state.closed {
                    return;
                }
                state = match sleep {
                    Sleep::For(wait) => {
                        self.wake
                            .wait_timeout(state, wait)
                            .expect("spawner lock poisoned")
                            .0
                    }
                    _ => self.wake.wait(state).expect("spawner lock poisoned"),
                };
                continue;
            }
            let Some(Reverse((_, id))) = state.due.pop() else {
                continue;
            };
            let Some(run) = state.waiting.remove(&id) else {
                continue; // withdrawn
            };
            drop(state);
            let at = self.clock.now();
            let started = super::start(run.prepared, run.claimed_at);
            spawned.push((run.reply, Spawned { started, at }));
            if spawned.len() >= HAND_BACK_AFTER {
                hand_back(&mut spawned);
            }
            state = self.lock();
        }
    }
}
