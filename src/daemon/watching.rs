//! What the daemon watches besides its tasks: the jobs dir (with [`Debounce`]) and the wall
//! clock's jumps.

use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::{CLOCK_CHECK, CLOCK_JUMP, wall_clock};

/// When to reload after changes in `jobs_dir`: once no change came for `quiet`, but never later
/// than `max_delay` after the first change of a burst, so that a directory that never goes quiet
/// still gets reloaded. Pure: the caller passes the time of each change.
#[derive(Debug)]
pub(super) struct Debounce {
    quiet: Duration,
    max_delay: Duration,
    /// The first and the latest change not yet handled by a reload.
    burst: Option<(tokio::time::Instant, tokio::time::Instant)>,
}

impl Debounce {
    pub(super) fn new(quiet: Duration, max_delay: Duration) -> Debounce {
        Debounce {
            quiet,
            max_delay,
            burst: None,
        }
    }

    /// A change was seen at `now`.
    pub(super) fn change(&mut self, now: tokio::time::Instant) {
        let first = self.burst.map_or(now, |(first, _)| first);
        self.burst = Some((first, now));
    }

    /// When the reload is due; `None` when nothing changed since the last one.
    pub(super) fn due(&self) -> Option<tokio::time::Instant> {
        self.burst
            .map(|(first, last)| (last + self.quiet).min(first + self.max_delay))
    }

    /// A reload is starting: it looks at every file, so the changes seen so far are handled.
    pub(super) fn clear(&mut self) {
        self.burst = None;
    }
}

/// Compares the wall clock with the monotonic clock every [`CLOCK_CHECK`] and counts a jump on
/// `jumps` when they disagree, so that the timers re-plan every task against the new time.
pub(super) async fn watch_wall_clock(jumps: watch::Sender<u64>) {
    let mut interval = tokio::time::interval(CLOCK_CHECK);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = (tokio::time::Instant::now(), wall_clock());
    loop {
        interval.tick().await;
        let now = (tokio::time::Instant::now(), wall_clock());
        if let Some(jump) = clock_jump(now.0 - last.0, now.1 - last.1) {
            tracing::warn!(
                jump_ms = jump.num_milliseconds(),
                "the wall clock jumped (clock set, or resumed from suspend); re-planning every task"
            );
            jumps.send_modify(|count| *count += 1);
        }
        last = now;
        if jumps.is_closed() {
            return;
        }
    }
}

/// The wall clock's jump over an interval in which the monotonic clock advanced by `monotonic`
/// and the wall clock by `wall`, if it is large enough to re-plan for. A suspend shows as a
/// forward jump: the monotonic clock stops while the machine sleeps.
fn clock_jump(monotonic: Duration, wall: chrono::TimeDelta) -> Option<chrono::TimeDelta> {
    let drift = wall - chrono::TimeDelta::from_std(monotonic).unwrap_or(chrono::TimeDelta::MAX);
    (drift.abs() > CLOCK_JUMP).then_some(drift)
}

/// Watches `dir` and sends a message for each change of its entries: a file created, deleted,
/// renamed, written or changed in mode or owner, and the dir itself deleted or moved. Through
/// inotify itself, asking for exactly those events: a general-purpose watcher (the `notify`
/// crate) also asks for every open of a file in the dir, so reading 10,000 task files at
/// start-up woke its thread 10,000 times for events it then ignored (about a sixth of the
/// start-up's CPU on two cores). Returns the watch, which must be kept alive (dropping it stops
/// it); `None` (logged) if the dir cannot be watched, in which case SIGHUP still works.
pub(super) fn watch_jobs_dir(dir: &std::path::Path, tx: mpsc::Sender<()>) -> Option<JobsDirWatch> {
    use futures::StreamExt;
    use inotify::{Inotify, WatchMask};
    let changes = WatchMask::ATTRIB
        | WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MODIFY
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF;
    let events = Inotify::init().and_then(|inotify| {
        inotify.watches().add(dir, changes)?;
        inotify.into_event_stream([0; READ_BUFFER])
    });
    let events = match events {
        Ok(events) => events,
        Err(error) => {
            tracing::warn!(dir = %dir.display(), "cannot watch the jobs dir ({error}); reload with SIGHUP");
            return None;
        }
    };
    // The events ready together (those of one read of the kernel's queue, at most) are one
    // message: a burst of them wakes the daemon once.
    let mut bursts = events.ready_chunks(EVENTS_PER_READ);
    let watch = tokio::spawn(async move {
        while let Some(burst) = bursts.next().await {
            // Every event is a change (an overflow of the kernel's queue too).
            if burst.iter().any(Result::is_ok) {
                // Full means a message is already pending, which says the same.
                let _ = tx.try_send(());
            }
            if let Some(Err(error)) = burst.into_iter().find(Result::is_err) {
                tracing::warn!("cannot watch the jobs dir any more ({error}); reload with SIGHUP");
                return;
            }
        }
    });
    Some(JobsDirWatch(watch))
}

/// The bytes read from the inotify descriptor at once.
const READ_BUFFER: usize = 4096;

/// The most events that one read can hold (a 16-byte header each, with no name).
const EVENTS_PER_READ: usize = READ_BUFFER / 16;

/// The watch of the jobs dir ([`watch_jobs_dir`]); dropping it stops it.
pub(super) struct JobsDirWatch(tokio::task::JoinHandle<()>);

impl Drop for JobsDirWatch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::{WATCH_MAX_DELAY, WATCH_QUIET};
    use chrono::TimeDelta;

    #[test]
    fn debounce_reloads_once_the_dir_is_quiet() {
        let start = tokio::time::Instant::now();
        let ms = |n: u64| start + Duration::from_millis(n);
        let mut debounce = Debounce::new(WATCH_QUIET, WATCH_MAX_DELAY);
        assert_eq!(debounce.due(), None);
        debounce.change(ms(0));
        debounce.change(ms(50));
        assert_eq!(debounce.due(), Some(ms(350)));
        debounce.clear();
        assert_eq!(debounce.due(), None);
    }

    /// Regression: a file rewritten every 100 ms postponed the reload for ever.
    #[test]
    fn debounce_of_a_dir_that_never_goes_quiet_reloads_within_the_max_delay() {
        let start = tokio::time::Instant::now();
        let ms = |n: u64| start + Duration::from_millis(n);
        let mut debounce = Debounce::new(WATCH_QUIET, WATCH_MAX_DELAY);
        for t in (0..5_000).step_by(100) {
            debounce.change(ms(t));
            let due = debounce.due().expect("a change is pending");
            assert!(
                due <= ms(2_000),
                "due at {:?} after a change at {t} ms",
                due - start
            );
            if due <= ms(t + 100) {
                // The timer fires before the next change: the reload clears the burst.
                assert_eq!(due, ms(2_000));
                debounce.clear();
                break;
            }
        }
        assert_eq!(debounce.due(), None, "the reload came");
        // The next burst gets its own bound.
        debounce.change(ms(2_100));
        assert_eq!(debounce.due(), Some(ms(2_400)));
    }

    #[test]
    fn clock_jump_ignores_ordinary_drift_and_reports_steps_and_suspends() {
        let second = Duration::from_secs(1);
        // Timer slack and NTP slewing: no jump.
        assert_eq!(clock_jump(second, TimeDelta::milliseconds(1_020)), None);
        assert_eq!(clock_jump(second, TimeDelta::milliseconds(980)), None);
        // The clock set forward an hour, or a resume after an hour of suspend.
        assert_eq!(
            clock_jump(second, TimeDelta::seconds(3_601)),
            Some(TimeDelta::seconds(3_600))
        );
        // The clock set back two minutes.
        assert_eq!(
            clock_jump(second, TimeDelta::seconds(-119)),
            Some(TimeDelta::seconds(-120))
        );
    }
}
