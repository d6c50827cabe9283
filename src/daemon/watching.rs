//! What the daemon watches besides its tasks: the jobs dir (with [`Debounce`], which collects
//! the names of the changed files so that a reload reads only those) and the wall clock's jumps.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::time::Duration;

use inotify::EventMask;
use tokio::sync::{mpsc, watch};

use super::{CLOCK_CHECK, CLOCK_JUMP};
use crate::clock::Clock;

/// One change in the jobs dir, as the watch reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum DirChange {
    /// The entry of this name was created, deleted, written, renamed in or out, or changed in
    /// mode or owner: reading it again (or finding it gone) is enough.
    Named(OsString),
    /// The names cannot be trusted (the kernel's queue overflowed, the dir itself was deleted
    /// or moved, the watch was lost, an event this watch does not know): every file is looked
    /// at again, for this reason.
    Rescan(&'static str),
}

/// The changes seen since the last reload, and so what the next one must look at.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Pending {
    /// The names of the entries that changed.
    pub(super) names: BTreeSet<OsString>,
    /// Why every file must be looked at again, if the names are not enough.
    pub(super) rescan: Option<&'static str>,
}

impl Pending {
    /// Every file is to be looked at, for `reason`.
    pub(super) fn everything(reason: &'static str) -> Pending {
        Pending {
            names: BTreeSet::new(),
            rescan: Some(reason),
        }
    }

    fn add(&mut self, change: DirChange) {
        match change {
            // Once every file is looked at, the names add nothing.
            DirChange::Named(_) if self.rescan.is_some() => {}
            DirChange::Named(name) => {
                self.names.insert(name);
            }
            DirChange::Rescan(reason) => {
                self.rescan = Some(reason);
                self.names = BTreeSet::new();
            }
        }
    }
}

/// When to reload after changes in `jobs_dir`: once no change came for `quiet`, but never later
/// than `max_delay` after the first change of a burst, so that a directory that never goes quiet
/// still gets reloaded. Pure: the caller passes the time of each change.
#[derive(Debug)]
pub(super) struct Debounce {
    quiet: Duration,
    max_delay: Duration,
    /// The first and the latest change not yet handled by a reload.
    burst: Option<(tokio::time::Instant, tokio::time::Instant)>,
    /// What the changes of the burst were.
    pending: Pending,
}

impl Debounce {
    pub(super) fn new(quiet: Duration, max_delay: Duration) -> Debounce {
        Debounce {
            quiet,
            max_delay,
            burst: None,
            pending: Pending::default(),
        }
    }

    /// Changes were seen at `now`.
    pub(super) fn change(
        &mut self,
        now: tokio::time::Instant,
        changes: impl IntoIterator<Item = DirChange>,
    ) {
        let first = self.burst.map_or(now, |(first, _)| first);
        self.burst = Some((first, now));
        for change in changes {
            self.pending.add(change);
        }
    }

    /// When the reload is due; `None` when nothing changed since the last one.
    pub(super) fn due(&self) -> Option<tokio::time::Instant> {
        self.burst
            .map(|(first, last)| (last + self.quiet).min(first + self.max_delay))
    }

    /// A reload is starting: the changes seen so far are handled by it, which looks at what
    /// this returns (a reload that looks at every file ignores it).
    pub(super) fn take(&mut self) -> Pending {
        self.burst = None;
        std::mem::take(&mut self.pending)
    }
}

/// Compares `clock` with the monotonic clock every [`CLOCK_CHECK`] and counts a jump on `jumps`
/// when they disagree, so that the timers re-plan every task against the new time.
pub(super) async fn watch_wall_clock(jumps: watch::Sender<u64>, clock: Clock) {
    let mut interval = tokio::time::interval(CLOCK_CHECK);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = (tokio::time::Instant::now(), clock.now());
    loop {
        interval.tick().await;
        let now = (tokio::time::Instant::now(), clock.now());
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

/// Watches `dir` and sends, for each burst of events, the changes of its entries
/// ([`DirChange`]): a file created, deleted, renamed, written or changed in mode or owner, and
/// the dir itself deleted or moved. Through inotify itself, asking for exactly those events: a
/// general-purpose watcher (the `notify` crate) also asks for every open of a file in the dir,
/// so reading 10,000 task files at start-up woke its thread 10,000 times for events it then
/// ignored (about a sixth of the start-up's CPU on two cores). Returns the watch, which must be
/// kept alive (dropping it stops it); `None` (logged) if the dir cannot be watched, in which
/// case SIGHUP still works.
pub(super) fn watch_jobs_dir(
    dir: &std::path::Path,
    tx: mpsc::UnboundedSender<Vec<DirChange>>,
) -> Option<JobsDirWatch> {
    watch_dir(dir, tx, None)
}

/// Watches the calendars dir `dir`, if it exists: any change in it is a reload of every task
/// file (a calendar may change the ticks of any task that excludes it).
pub(super) fn watch_calendars_dir(
    dir: &std::path::Path,
    tx: mpsc::UnboundedSender<Vec<DirChange>>,
) -> Option<JobsDirWatch> {
    dir.is_dir()
        .then(|| watch_dir(dir, tx, Some("a change in the calendars dir")))
        .flatten()
}

/// [`watch_jobs_dir`]; with `every_change_is` set, each change is a [`DirChange::Rescan`] of
/// that reason.
fn watch_dir(
    dir: &std::path::Path,
    tx: mpsc::UnboundedSender<Vec<DirChange>>,
    every_change_is: Option<&'static str>,
) -> Option<JobsDirWatch> {
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
            tracing::warn!(dir = %dir.display(), "cannot watch the dir ({error}); reload with SIGHUP");
            return None;
        }
    };
    // The events ready together (those of one read of the kernel's queue, at most) are one
    // message: a burst of them wakes the daemon once.
    let mut bursts = events.ready_chunks(EVENTS_PER_READ);
    let watch = tokio::spawn(async move {
        let mut names = NamesTrusted::Yes;
        while let Some(burst) = bursts.next().await {
            let mut changes = Vec::with_capacity(burst.len());
            let mut failed = None;
            for event in burst {
                match event {
                    Ok(event) => changes.push(match every_change_is {
                        Some(reason) => DirChange::Rescan(reason),
                        None => names.classify(event.mask, event.name),
                    }),
                    Err(error) => failed = Some(error),
                }
            }
            // The daemon has stopped when nobody receives.
            if !changes.is_empty() && tx.send(changes).is_err() {
                return;
            }
            if let Some(error) = failed {
                tracing::warn!("cannot watch the jobs dir any more ({error}); reload with SIGHUP");
                let _ = tx.send(vec![DirChange::Rescan("the watch of the jobs dir failed")]);
                return;
            }
        }
    });
    Some(JobsDirWatch(watch))
}

/// Whether the names in the events of a watch still say which entries of the jobs dir changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NamesTrusted {
    Yes,
    /// The dir was deleted or moved (a moved dir's watch goes with it and names its entries), or
    /// the watch removed: from then on every event means "look at every file", as it did before
    /// changes were named.
    No,
}

impl NamesTrusted {
    /// What an event of the watch (its mask and name) says changed.
    fn classify(&mut self, mask: EventMask, name: Option<OsString>) -> DirChange {
        let entry = EventMask::ATTRIB
            | EventMask::CREATE
            | EventMask::DELETE
            | EventMask::MODIFY
            | EventMask::MOVED_FROM
            | EventMask::MOVED_TO;
        let lost =
            EventMask::DELETE_SELF | EventMask::MOVE_SELF | EventMask::IGNORED | EventMask::UNMOUNT;
        if mask.contains(EventMask::Q_OVERFLOW) {
            return DirChange::Rescan("the kernel's queue of events overflowed");
        }
        if mask.intersects(lost) {
            *self = NamesTrusted::No;
            return DirChange::Rescan("the jobs dir was deleted or moved, or its watch lost");
        }
        if *self == NamesTrusted::No {
            return DirChange::Rescan("the watch of the jobs dir no longer names its entries");
        }
        match name {
            // `ISDIR` says the entry is a directory: as named, which loading reports.
            Some(name) if mask.intersects(entry) && !name.is_empty() => DirChange::Named(name),
            _ => DirChange::Rescan("an event of the jobs dir's watch that names no entry"),
        }
    }
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
        debounce.change(ms(0), []);
        debounce.change(ms(50), []);
        assert_eq!(debounce.due(), Some(ms(350)));
        debounce.take();
        assert_eq!(debounce.due(), None);
    }

    /// Regression: a file rewritten every 100 ms postponed the reload for ever.
    #[test]
    fn debounce_of_a_dir_that_never_goes_quiet_reloads_within_the_max_delay() {
        let start = tokio::time::Instant::now();
        let ms = |n: u64| start + Duration::from_millis(n);
        let mut debounce = Debounce::new(WATCH_QUIET, WATCH_MAX_DELAY);
        for t in (0..5_000).step_by(100) {
            debounce.change(ms(t), []);
            let due = debounce.due().expect("a change is pending");
            assert!(
                due <= ms(2_000),
                "due at {:?} after a change at {t} ms",
                due - start
            );
            if due <= ms(t + 100) {
                // The timer fires before the next change: the reload clears the burst.
                assert_eq!(due, ms(2_000));
                debounce.take();
                break;
            }
        }
        assert_eq!(debounce.due(), None, "the reload came");
        // The next burst gets its own bound.
        debounce.change(ms(2_100), []);
        assert_eq!(debounce.due(), Some(ms(2_400)));
    }

    fn named(name: &str) -> DirChange {
        DirChange::Named(name.into())
    }

    #[test]
    fn debounce_collects_the_names_changed_in_a_burst_once_each() {
        let start = tokio::time::Instant::now();
        let mut debounce = Debounce::new(WATCH_QUIET, WATCH_MAX_DELAY);
        debounce.change(start, [named("a.toml"), named("b.toml")]);
        debounce.change(start, [named("a.toml")]);
        let pending = debounce.take();
        assert_eq!(pending.rescan, None);
        let names: Vec<_> = pending.names.iter().map(|n| n.to_str().unwrap()).collect();
        assert_eq!(names, ["a.toml", "b.toml"]);
        assert_eq!(debounce.take(), Pending::default(), "the reload took them");
    }

    #[test]
    fn debounce_of_a_burst_with_a_rescan_looks_at_every_file() {
        let start = tokio::time::Instant::now();
        let mut debounce = Debounce::new(WATCH_QUIET, WATCH_MAX_DELAY);
        debounce.change(start, [named("a.toml")]);
        debounce.change(start, [DirChange::Rescan("overflow"), named("b.toml")]);
        assert_eq!(debounce.take(), Pending::everything("overflow"));
    }

    /// Each event the watch asks for, as inotify reports it for an entry of the dir.
    #[test]
    fn each_event_of_an_entry_names_it() {
        let kinds = [
            ("create", EventMask::CREATE),
            ("delete", EventMask::DELETE),
            ("write", EventMask::MODIFY),
            ("chmod or chown", EventMask::ATTRIB),
            (
                "rename out (or the old name of a rename within)",
                EventMask::MOVED_FROM,
            ),
            (
                "rename in (or the new name, over another inode)",
                EventMask::MOVED_TO,
            ),
            (
                "a subdirectory created",
                EventMask::CREATE | EventMask::ISDIR,
            ),
        ];
        for (kind, mask) in kinds {
            let mut names = NamesTrusted::Yes;
            let change = names.classify(mask, Some("a.toml".into()));
            assert_eq!(change, named("a.toml"), "{kind}");
        }
    }

    #[test]
    fn an_overflow_or_an_unknown_event_asks_for_a_full_scan() {
        let mut names = NamesTrusted::Yes;
        let overflow = names.classify(EventMask::Q_OVERFLOW, None);
        assert!(matches!(overflow, DirChange::Rescan(why) if why.contains("overflowed")));
        // An event this watch does not ask for, and an entry's event without a name.
        let open = names.classify(EventMask::OPEN, Some("a.toml".into()));
        assert!(matches!(open, DirChange::Rescan(_)), "{open:?}");
        let nameless = names.classify(EventMask::MODIFY, None);
        assert!(matches!(nameless, DirChange::Rescan(_)), "{nameless:?}");
        assert_eq!(names, NamesTrusted::Yes, "the watch is still on the dir");
    }

    #[test]
    fn once_the_dir_is_deleted_or_moved_every_event_asks_for_a_full_scan() {
        for lost in [
            EventMask::DELETE_SELF,
            EventMask::MOVE_SELF,
            EventMask::IGNORED,
            EventMask::UNMOUNT,
        ] {
            let mut names = NamesTrusted::Yes;
            let change = names.classify(lost, None);
            assert!(matches!(change, DirChange::Rescan(_)), "{lost:?}");
            // A moved dir's watch names the entries of the dir elsewhere.
            let later = names.classify(EventMask::MODIFY, Some("a.toml".into()));
            assert!(
                matches!(later, DirChange::Rescan(_)),
                "{lost:?} then {later:?}"
            );
        }
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
