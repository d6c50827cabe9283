//! Telling the service manager what the daemon is doing: systemd's `sd_notify` protocol for the
//! packaged unit (`Type=notify`, `WatchdogSec=`).
//!
//! The daemon reports `READY=1` once its tasks are loaded and its loops started, `RELOADING=1`
//! around a SIGHUP reload, `STOPPING=1` when a graceful stop begins (asking for more stop time
//! when `shutdown_grace` needs it), a one-line `STATUS=` that `systemctl status` shows, and
//! `WATCHDOG=1` pings while the async runtime is responsive.
//!
//! Without `NOTIFY_SOCKET` (a terminal, the tests, another supervisor) every call is a silent
//! no-op. A failed send is logged once and never stops the daemon: the service manager is an
//! observer, not a dependency. Jobs never see `NOTIFY_SOCKET`: the executor clears their
//! environment.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sd_notify::NotifyState;

use crate::coord::Leadership;

/// Extra stop time asked for beyond `shutdown_grace`: the daemon waits up to 10 s for killed
/// process groups to be reaped, then closes its ZooKeeper session.
const STOP_MARGIN: Duration = Duration::from_secs(20);

static SEND_FAILED: AtomicBool = AtomicBool::new(false);

fn notify(states: &[NotifyState]) {
    if let Err(error) = sd_notify::notify(states)
        && !SEND_FAILED.swap(true, Ordering::Relaxed)
    {
        tracing::warn!("cannot notify the service manager ({error}); status updates are off");
    }
}

/// The tasks are loaded and their loops started.
pub fn ready(status: &str) {
    notify(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// A SIGHUP reload begins; [`ready`] ends it.
pub fn reloading() {
    let mut states = vec![
        NotifyState::Reloading,
        NotifyState::Status("reloading task files"),
    ];
    // systemd 253+ wants the reload's start time; older ones ignore it.
    if let Ok(now) = NotifyState::monotonic_usec_now() {
        states.push(now);
    }
    notify(&states);
}

/// What the node is doing now, for `systemctl status`.
pub fn status(status: &str) {
    notify(&[NotifyState::Status(status)]);
}

/// A graceful stop begins. Asks for `shutdown_grace` plus a margin, so that a grace longer
/// than the unit's `TimeoutStopSec=` is not cut short (systemd only ever extends with this).
pub fn stopping(status: &str, shutdown_grace: Duration) {
    let extend = (shutdown_grace + STOP_MARGIN).as_micros();
    notify(&[
        NotifyState::Stopping,
        NotifyState::Status(status),
        NotifyState::ExtendTimeoutUsec(u32::try_from(extend).unwrap_or(u32::MAX)),
    ]);
}

/// If the service manager runs a watchdog for this process (`WatchdogSec=`), starts a task that
/// pings it at half the interval. The pings come from the async runtime, so a runtime that stops
/// scheduling tasks stops pinging and systemd restarts the daemon.
pub fn spawn_watchdog() -> Option<tokio::task::JoinHandle<()>> {
    let interval = sd_notify::watchdog_enabled()? / 2;
    tracing::info!(
        interval = %humantime::format_duration(interval),
        "pinging the systemd watchdog"
    );
    Some(tokio::spawn(async move {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            notify(&[NotifyState::Watchdog]);
        }
    }))
}

/// The one-line status of a node with the given leadership that has loaded `loaded` tasks and
/// leads `leading` of them.
pub fn status_line(leadership: &Leadership, leading: usize, loaded: usize) -> String {
    if leadership.paused {
        let why = leadership
            .why_paused
            .as_deref()
            .unwrap_or("not connected to the cluster");
        return format!("paused: {why}; firing nothing");
    }
    format!("leading {leading} of {loaded} tasks")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::sync::Arc;

    /// The status of a node that loaded `names`.
    fn status(leadership: &Leadership, names: &[&str]) -> String {
        let leading = names
            .iter()
            .filter(|name| leadership.tasks.contains(**name))
            .count();
        status_line(leadership, leading, names.len())
    }

    fn leadership(tasks: &[&str]) -> Leadership {
        Leadership {
            tasks: Arc::new(tasks.iter().map(|t| Arc::from(*t)).collect::<BTreeSet<_>>()),
            ..Leadership::default()
        }
    }

    #[test]
    fn status_counts_the_loaded_tasks_this_node_leads() {
        let line = status(&leadership(&["a", "c", "gone"]), &["a", "b", "c"]);
        assert_eq!(line, "leading 2 of 3 tasks");
        // Counted from the loaded side when more are led than loaded.
        let line = status(&leadership(&["a", "c", "gone", "x", "y"]), &["a", "b", "c"]);
        assert_eq!(line, "leading 2 of 3 tasks");
    }

    #[test]
    fn status_of_a_paused_node_says_why_and_that_nothing_fires() {
        let mut paused = leadership(&["a"]);
        paused.paused = true;
        paused.why_paused = Some("cannot reach ZooKeeper at 127.0.0.1:2181 (refused)".into());
        assert_eq!(
            status(&paused, &["a"]),
            "paused: cannot reach ZooKeeper at 127.0.0.1:2181 (refused); firing nothing"
        );
        paused.why_paused = None;
        assert_eq!(
            status(&paused, &["a"]),
            "paused: not connected to the cluster; firing nothing"
        );
    }
}
