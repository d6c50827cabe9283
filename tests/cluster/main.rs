//! The cluster tests, one binary (ripgrep's single end-to-end binary): real `zkcron run`
//! processes on one real ZooKeeper from Debian's package (`common::zk::shared`), each test in a
//! chroot of its own, so they run in parallel without seeing each other; those that stop the
//! server, or need an ensemble or TLS, run one of their own. One module a subject:
//! - `failover`: nodes killed, paused, cut off, ZooKeeper restarted (`faults`: what the tests
//!   do to a cluster and check on it); `ensemble`: faults of a three-server ensemble;
//! - `cluster_runs`: running jobs when a node is lost; `pools`: every-node and pooled tasks;
//!   `chain`, `queue`: chained tasks, the queued overlap; `dst`: a task's DST rule; `pause`:
//!   pauses with a reason and on failure; `trigger_history`, `backfill_cluster`: manual runs,
//!   history, backfills;
//! - `control`, `ops`: the operator's controls and commands; `logs`: a run's output read
//!   from the node that ran it; `auth`: digest ACLs; `hostile`:
//!   stale, foreign and skewed state; `upgrade`: rolling upgrades and rollbacks.
//!
//! `ZKCRON_TEST_BIN=/path/to/zkcron cargo test --test cluster` runs the nodes from another build
//! (another branch's daemon against these tests).

#[path = "../common/mod.rs"]
mod common;
mod faults;

mod auth;
mod backfill_cluster;
mod chain;
mod cluster_runs;
mod control;
mod dst;
mod ensemble;
mod failover;
mod hostile;
mod logs;
mod ops;
mod pause;
mod pools;
mod queue;
mod ticks;
mod trigger_history;
mod upgrade;
