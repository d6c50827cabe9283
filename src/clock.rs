//! The shell's one wall-clock read.
//!
//! The core (schedule, plan, task validation, the cluster rules) never reads a clock: it takes
//! `now` as an argument. The shell (daemon, executor, coordination backends) reads it here, so
//! this module sits below all of them and none of them has to import the daemon for it.
//! `clippy.toml` disallows the clock methods everywhere else.

use chrono::{DateTime, Utc};

/// The current wall-clock time. The core never calls this; the shell passes it in.
#[allow(clippy::disallowed_methods)]
pub fn wall_clock() -> DateTime<Utc> {
    Utc::now()
}
