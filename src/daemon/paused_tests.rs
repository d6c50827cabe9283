//! The daemon's firing loop on tokio's paused time: the local backend, a real journal and a
//! real process, with calendar time read on [`Clock::tokio_paused`], so a task's ticks a minute
//! apart fire as the test advances virtual time, without waiting for them.
//!
//! What runs here is the daemon's `Shared` state and its `FiringShell` (the timer loop, the
//! firing core, the claims, the spawns through `runs`), not `Daemon::run`: that loop installs
//! signal handlers for the whole test process and watches the jobs dir with inotify, and stops
//! only on SIGTERM or SIGINT. The journal's writer thread and the child process take real
//! time: the test waits for them with virtual time held still (`until`), within a real
//! deadline.

use super::tests::{config, fire, task_named};
use super::*;
use crate::coord::RunResult;
use crate::coord::local::LocalCoordinator;
use chrono::{DateTime, TimeDelta, Utc};

/// How long the real work behind one step (a journal sync, a child's spawn and exit) may take.
const REAL_DEADLINE: Duration = Duration::from_secs(20);

/// Moves tokio's paused clock, and with it `clock`, to `at` in steps of 50 ms, letting the tasks
/// whose timers come due run at each step, as time passing would.
async fn advance_to(clock: &Clock, at: DateTime<Utc>) {
    while clock.now() < at {
        let left = (at - clock.now()).to_std().expect("ahead");
        tokio::time::advance(left.min(Duration::from_millis(50))).await;
        tokio::task::yield_now().await;
    }
}

/// Yields to the runtime until `done` says so, without moving virtual time, within
/// [`REAL_DEADLINE`] of real time. Tokio moves a paused clock whenever the runtime would sleep,
/// also while yielding, but not while a `spawn_blocking` task runs: one runs meanwhile.
#[allow(clippy::disallowed_methods)] // the work waited for is real: the deadline is too
async fn until<F: std::future::Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let holds_time = tokio::task::spawn_blocking(move || stopped.recv_timeout(REAL_DEADLINE));
    let deadline = std::time::Instant::now() + REAL_DEADLINE;
    while !done().await {
        assert!(
            std::time::Instant::now() < deadline,
            "not within {REAL_DEADLINE:?}: {what}"
        );
        tokio::task::yield_now().await;
    }
    drop(stop);
    let _ = holds_time.await;
}

async fn claimed(coordinator: &LocalCoordinator) -> Option<DateTime<Utc>> {
    coordinator.last_claimed("minutely").await.unwrap()
}

async fn result(coordinator: &LocalCoordinator) -> Option<RunResult> {
    coordinator.last_result("minutely").await.unwrap()
}

/// Issue [14] point 7: no daemon test could run on paused time, the shell read the system
/// clock. Given a task every minute on the local backend and a clock at 00:00:30, when virtual
/// time passes two of its ticks, then each is claimed `CLAIM_AHEAD` before its instant (not
/// earlier), its process starts on the instant, and its result is stored: two minutes of
/// schedule without a minute of waiting.
#[tokio::test(start_paused = true)]
async fn given_a_task_every_minute_when_virtual_time_passes_its_ticks_then_each_fires_on_its_tick()
{
    let base = DateTime::parse_from_rfc3339("2030-01-01T00:00:30Z")
        .unwrap()
        .to_utc();
    let clock = Clock::tokio_paused(base);
    let state = tempfile::tempdir().unwrap();
    let coordinator = Arc::new(LocalCoordinator::open(state.path(), clock).unwrap());
    let spec = task_named(
        "minutely",
        "schedule = \"* * * * *\"\ncommand = [\"true\"]\n",
    );
    coordinator
        .publish(std::slice::from_ref(&spec))
        .await
        .unwrap();
    let config = DaemonConfig { clock, ..config() };
    let (shared, _runs_alive) = Shared::new(coordinator.clone(), &config);
    let firing = fire(&shared, vec![spec]);

    for tick in [base + TimeDelta::seconds(30), base + TimeDelta::seconds(90)] {
        let claim_at = tick - crate::plan::CLAIM_AHEAD;
        let before = claimed(&coordinator).await;
        advance_to(&clock, claim_at - TimeDelta::milliseconds(100)).await;
        assert_eq!(
            claimed(&coordinator).await,
            before,
            "claimed before {claim_at}"
        );

        advance_to(&clock, claim_at).await;
        until("the claim", || async {
            claimed(&coordinator).await == Some(tick)
        })
        .await;
        assert_eq!(
            clock.now(),
            claim_at,
            "virtual time stood still while the journal synced"
        );

        advance_to(&clock, tick).await;
        until("the run's result", || async {
            result(&coordinator).await.is_some_and(|r| r.tick == tick)
        })
        .await;
        let ran = result(&coordinator).await.unwrap();
        assert!(ran.success, "{ran:?}");
        assert_eq!(
            ran.started_at,
            Some(tick),
            "started on its instant: {ran:?}"
        );
        assert_eq!(clock.now(), tick);
    }
    firing.engine().handle(Input::Load(Vec::new()));
}
