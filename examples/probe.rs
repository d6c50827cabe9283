//! The outside observer of `benches/probe.py`: a job that records when it started.
//!
//! Reads the wall clock first thing, then appends one line to the file named by its first
//! argument: `<ZKCRON_TASK> <ZKCRON_SCHEDULED_AT> <unix nanoseconds at start>`. One `write` of
//! an `O_APPEND` file, so the lines of processes started at the same instant do not mix. It
//! does nothing else, so what it measures is zkcron's timer, claim and spawn plus one exec.
//!
//! Build: `cargo build --release --example probe`.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

// The probe is the shell of a benchmark, not zkcron's core: it reads the clock on purpose.
#[allow(clippy::disallowed_methods)]
fn main() {
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    let Some(out) = std::env::args_os().nth(1) else {
        eprintln!("usage: probe FILE");
        std::process::exit(2);
    };
    let task = std::env::var("ZKCRON_TASK").unwrap_or_else(|_| "-".into());
    let scheduled = std::env::var("ZKCRON_SCHEDULED_AT").unwrap_or_else(|_| "-".into());
    let line = format!("{task} {scheduled} {started}\n");
    let written = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&out)
        .and_then(|mut file| file.write_all(line.as_bytes()));
    if let Err(e) = written {
        eprintln!("probe: cannot append to {}: {e}", out.to_string_lossy());
        std::process::exit(1);
    }
}
