//! Clock skew and the cluster's clock.
//!
//! Every write's reply carries the server's mtime; with the local times the write was sent and
//! answered it bounds this node's offset from ZooKeeper's clock. A node further off than
//! `max_clock_skew` leads nothing. ZooKeeper's time (local time minus the offset) is the
//! cluster's clock: a fire record ahead of it was claimed by a node whose clock ran ahead, and
//! no tick of that task fires until the clock catches up, so every node that sees one says so,
//! with the way to clear it.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::MemberStep;
use super::Node;
use super::io::{CreateMode, Level, Stat, ZkFail, ZkOk, ZkOp};
use crate::coord::records::FireRecord;

/// Clock skew above this is logged as a warning.
pub const SKEW_WARNING: Duration = Duration::from_secs(1);

/// How often the clock offset is measured when no claim measured it.
pub(super) const CLOCK_PROBE: Duration = Duration::from_secs(30);

/// How far ahead of the cluster's clock a fire record may be because the clock of the node that
/// claimed it was off: `max_clock_skew`'s default (2 s) plus the measurement's error (a round
/// trip) and a short step of a clock being corrected, with room to spare.
const SKEW_ALLOWANCE: Duration = Duration::from_secs(5);

/// A fire record further than this ahead of the cluster's clock is reported: a healthy leader
/// claims a tick up to [`crate::plan::CLAIM_AHEAD`] before it is due, by its own clock, which
/// may be off by up to [`SKEW_ALLOWANCE`].
pub(super) fn ahead_tolerance() -> chrono::Duration {
    crate::plan::CLAIM_AHEAD + chrono::Duration::from_std(SKEW_ALLOWANCE).expect("a few seconds")
}

/// What a clock offset means for the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SkewVerdict {
    Fine,
    /// Above [`SKEW_WARNING`]: logged.
    Warn,
    /// Above `max_clock_skew`: the node leads nothing.
    Refuse,
}

/// The offset of the local clock from ZooKeeper's (ms, positive = local ahead), from a write
/// sent and answered at local times `sent` and `answered` that the server stamped `mtime_ms`.
/// The server's stamp falls somewhere between the two, so the offset lies between
/// `sent - mtime` and `answered - mtime`; this returns the value of that range nearest zero. A
/// slow round trip therefore widens the range instead of raising the estimate: a probe answered
/// 3 s late by a busy server is not taken for a clock 1.5 s off.
pub fn clock_offset_ms(sent: DateTime<Utc>, answered: DateTime<Utc>, mtime_ms: i64) -> Option<i64> {
    if mtime_ms <= 0 || answered < sent {
        return None;
    }
    let low = sent.timestamp_millis() - mtime_ms;
    let high = answered.timestamp_millis() - mtime_ms;
    Some(if low > 0 {
        low
    } else if high < 0 {
        high
    } else {
        0
    })
}

pub(crate) fn skew_verdict(offset_ms: i64, max: Option<Duration>) -> SkewVerdict {
    let offset = offset_ms.unsigned_abs();
    match max {
        Some(max) if offset > max.as_millis() as u64 => SkewVerdict::Refuse,
        _ if offset > SKEW_WARNING.as_millis() as u64 => SkewVerdict::Warn,
        _ => SkewVerdict::Fine,
    }
}

impl Node {
    /// Records a clock-offset measurement from a write sent at `sent` and answered now, and
    /// reports when the verdict changes.
    pub(super) fn measure_skew(&mut self, sent: DateTime<Utc>, stat: &Stat) {
        let Some(offset) = clock_offset_ms(sent, self.io.now.wall, stat.mtime_ms) else {
            return;
        };
        self.life.offset_ms = Some(offset);
        let verdict = skew_verdict(offset, self.cfg.max_clock_skew);
        let before = self.life.skew.replace(verdict);
        if before == Some(verdict) {
            return;
        }
        let max = self
            .cfg
            .max_clock_skew
            .map(|m| humantime::format_duration(m).to_string())
            .unwrap_or_else(|| "unset".into());
        match verdict {
            SkewVerdict::Fine if before.is_some() => {
                self.report(Level::Info, "clock skew is back under 1s")
                    .field("offset_ms", offset);
            }
            SkewVerdict::Fine => {}
            SkewVerdict::Warn => {
                self.report(
                    Level::Warn,
                    "this node's clock differs from ZooKeeper's by more than 1s; check NTP",
                )
                .field("offset_ms", offset)
                .field("max_clock_skew", max);
            }
            SkewVerdict::Refuse => {
                self.report(
                    Level::Error,
                    "refusing leadership: this node's clock is further from ZooKeeper's than max_clock_skew; fix NTP",
                )
                .field("offset_ms", offset)
                .field("max_clock_skew", max);
            }
        }
        // Whether this node may lead changed: say so in the member record, and decide.
        self.maybe_register();
        self.decide();
    }

    /// Writes `clock` to read ZooKeeper's time from its mtime (`setup`: a step of the
    /// session's setup, which registers only after it).
    pub(super) fn probe(&mut self, setup: bool) {
        let Some(session) = &self.life.session else {
            return;
        };
        if !session.connected && !setup {
            return;
        }
        self.probe_write(setup);
    }

    fn probe_write(&mut self, setup: bool) {
        let sent = self.io.now.wall;
        let path = self.paths.clock();
        let data = self.cfg.id.as_bytes().to_vec();
        self.call(
            ZkOp::SetData {
                path,
                data,
                version: None,
            },
            MemberStep::Probe {
                sent,
                create: false,
                setup,
            },
        );
    }

    pub(super) fn on_probe(
        &mut self,
        result: Result<ZkOk, ZkFail>,
        sent: DateTime<Utc>,
        create: bool,
        setup: bool,
    ) {
        self.life.probe_failed = result.is_err();
        match result {
            Ok(ZkOk::Stat(stat)) | Ok(ZkOk::Created(stat)) => self.measure_skew(sent, &stat),
            Err(ZkFail::NodeExists) if create => {
                // Another node created it meanwhile: write it.
                return self.probe_write(setup);
            }
            Err(ZkFail::NoNode) if !create => {
                let sent = self.io.now.wall;
                let path = self.paths.clock();
                let data = self.cfg.id.as_bytes().to_vec();
                self.call(
                    ZkOp::Create {
                        path,
                        data,
                        mode: CreateMode::Persistent,
                        acl: self.cfg.acl,
                    },
                    MemberStep::Probe {
                        sent,
                        create: true,
                        setup,
                    },
                );
                return;
            }
            _ => {}
        }
        if setup {
            self.setup_step_done();
        }
    }

    /// The last measured offset of this node's clock from ZooKeeper's (ms, positive = local
    /// ahead), for `zkcron_clock_skew_seconds`.
    pub fn clock_offset_ms(&self) -> Option<i64> {
        self.life.offset_ms
    }

    /// ZooKeeper's time now, as far as this node knows (its own clock minus the offset).
    pub(super) fn cluster_now(&self) -> DateTime<Utc> {
        self.io.now.wall - chrono::Duration::milliseconds(self.life.offset_ms.unwrap_or(0))
    }

    /// Reports a fire record ahead of the cluster's clock (once per record).
    pub(super) fn check_record_clock(&mut self, task: &str, record: &FireRecord) {
        let Some(tick) = record.tick else {
            return;
        };
        let cluster_now = self.cluster_now();
        if tick <= cluster_now + ahead_tolerance() {
            return;
        }
        let path = self.paths.record(task);
        let ahead = (tick - cluster_now).to_std().unwrap_or_default();
        let ahead = humantime::format_duration(Duration::from_secs(ahead.as_secs()));
        let by = if record.node.is_empty() {
            String::new()
        } else {
            format!(" by node {}", record.node)
        };
        self.report_once(
            format!("ahead {path} {tick}"),
            Level::Error,
            format!(
                "the fire record {path} names the tick {tick}, {ahead} ahead of ZooKeeper's clock: it was claimed{by} while its clock ran ahead, and no tick of {task} fires until then. Once that node's clock is fixed, clear the record and restart zkcron on the node leading {task} (it then catches up per catch_up): {cli} set {path} '{{\"format\":1}}'", cli = self.zk_cli()
            ),
        )
        .field("task", task);
    }

    /// A claim found the record past its tick; if the record is ahead of the cluster's clock,
    /// that is the reason the task stays silent.
    pub(super) fn check_claim_behind(&mut self, task: &str, record: DateTime<Utc>) {
        if let Some((stored, _)) = self.tasks.get(task).and_then(|s| s.record.clone())
            && stored.tick == Some(record)
        {
            self.check_record_clock(task, &stored);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_offset_is_the_smallest_one_the_round_trip_allows() {
        let sent = DateTime::from_timestamp_millis(1_000_000).unwrap();
        let answered = DateTime::from_timestamp_millis(1_000_010).unwrap();
        // The server stamped the write about 2 s before we sent and got the answer: we are at
        // least 1,995 ms ahead.
        assert_eq!(clock_offset_ms(sent, answered, 998_005), Some(1_995));
        assert_eq!(clock_offset_ms(sent, answered, 1_000_005), Some(0));
        assert_eq!(clock_offset_ms(sent, answered, 1_003_005), Some(-2_995));
        // A probe answered 3 s late proves nothing about a clock that agrees with the server...
        let slow = DateTime::from_timestamp_millis(1_003_000).unwrap();
        assert_eq!(clock_offset_ms(sent, slow, 1_000_500), Some(0));
        // ...but a stamp outside the round trip still shows the offset it proves.
        assert_eq!(clock_offset_ms(sent, slow, 996_000), Some(4_000));
        assert_eq!(clock_offset_ms(sent, slow, 1_005_000), Some(-2_000));
        // No stamp, or a local clock that went backwards mid-call: no estimate.
        assert_eq!(clock_offset_ms(sent, answered, 0), None);
        assert_eq!(clock_offset_ms(answered, sent, 1_000_005), None);
    }

    #[test]
    fn skew_is_fine_then_warned_then_refused_beyond_max_clock_skew() {
        let max = Some(Duration::from_secs(2));
        assert_eq!(skew_verdict(900, max), SkewVerdict::Fine);
        assert_eq!(skew_verdict(-1_500, max), SkewVerdict::Warn);
        assert_eq!(skew_verdict(2_000, max), SkewVerdict::Warn);
        assert_eq!(skew_verdict(-2_001, max), SkewVerdict::Refuse);
        // Without max_clock_skew a large skew is only a warning.
        assert_eq!(skew_verdict(60_000, None), SkewVerdict::Warn);
    }
}
