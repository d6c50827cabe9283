//! The shell's clock: a [`Clock`] handed to the daemon, the HTTP server, the operator commands
//! and the coordination backends, so that a test can move their calendar time.
//!
//! The core (schedule, plan, task validation, the cluster rules) never reads a clock: it takes
//! `now` as an argument. The shell reads it from the `Clock` it was given, which is the system
//! clock in a real process ([`Clock::system`], built once at the outermost entry, `cli`) and,
//! in a test, [`Clock::tokio_paused`]: a fixed calendar instant plus the time tokio's clock moved
//! since, so that `tokio::time::pause` and `advance` move calendar time too (linkerd2-proxy's
//! habit). This module sits below all of the shell, so none of it imports the daemon for it.
//!
//! `clippy.toml` disallows the clock methods everywhere else, and `tests/suite_rules.rs` keeps
//! [`Clock::system`] out of the shell's production code: the shell is given its clock.

use chrono::{DateTime, TimeDelta, Utc};

/// Where the shell reads calendar time: cheap to copy, and every copy reads the same clock.
#[derive(Debug, Clone, Copy)]
pub struct Clock(Source);

#[derive(Debug, Clone, Copy)]
enum Source {
    /// The system's wall clock.
    System,
    /// `base` when tokio's clock read `start`, moving with tokio's clock from there.
    Tokio {
        base: DateTime<Utc>,
        start: tokio::time::Instant,
    },
}

impl Clock {
    /// The system's wall clock: what a real process runs on. Built at the outermost entry
    /// (`cli`) and handed down; the shell never builds one itself.
    pub fn system() -> Clock {
        Clock(Source::System)
    }

    /// A clock that reads `base` now and moves as tokio's clock does from here: with
    /// `tokio::time::pause`, only when a test advances it. Tokio's clock is read now, so
    /// call it inside the runtime whose time it should follow.
    pub fn tokio_paused(base: DateTime<Utc>) -> Clock {
        Clock(Source::Tokio {
            base,
            start: tokio::time::Instant::now(),
        })
    }

    /// The current calendar time on this clock.
    #[allow(clippy::disallowed_methods)] // the one read of the system clock
    pub fn now(&self) -> DateTime<Utc> {
        match self.0 {
            Source::System => Utc::now(),
            Source::Tokio { base, start } => {
                let elapsed = tokio::time::Instant::now() - start;
                base + TimeDelta::from_std(elapsed).unwrap_or(TimeDelta::MAX)
            }
        }
    }

    /// Whether this clock moves with tokio's timers: threads that sleep on the operating
    /// system's clock (the spawner's) cannot follow it, and the shell then waits on tokio.
    pub fn follows_tokio(&self) -> bool {
        matches!(self.0, Source::Tokio { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Given a clock on paused tokio time, when a test advances tokio's clock, then calendar
    /// time moves by as much, and not otherwise.
    #[tokio::test(start_paused = true)]
    async fn a_paused_clock_moves_only_when_tokio_time_is_advanced() {
        let base = DateTime::from_timestamp(1_900_000_000, 0).unwrap();
        let clock = Clock::tokio_paused(base);
        assert_eq!(clock.now(), base);

        tokio::time::advance(std::time::Duration::from_secs(90)).await;

        assert_eq!(clock.now(), base + TimeDelta::seconds(90));
        assert!(clock.follows_tokio());
        assert!(!Clock::system().follows_tokio());
    }
}
