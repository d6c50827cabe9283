//! Time read the way the jobs see it: the wall clock in Unix seconds, the tick an instant falls
//! in, and a wait for the middle of a second (far from the instants ticks are claimed and
//! spawned at: a node killed between its claim and its spawn loses that tick by design).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The wall clock in Unix seconds.
#[allow(clippy::disallowed_methods)] // the tests observe real processes on the real clock
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The tick (Unix second) the wall clock is in.
pub fn now_second() -> i64 {
    second_of(now())
}

/// The tick a wall-clock instant falls in.
pub fn second_of(t: f64) -> i64 {
    t.floor() as i64
}

/// Waits until the clock is in the middle of a second, far from the claims and spawns at its
/// start.
pub fn wait_mid_second() {
    super::wait_for("the middle of a second", Duration::from_secs(3), || {
        (0.35..0.65).contains(&now().fract())
    });
}
