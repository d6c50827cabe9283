//! The cluster node as a deterministic state machine: no I/O, no clock, no tokio.

pub mod io;
