//! `@every <duration>[/<offset>]`: a fixed interval, the part of a schedule that needs no
//! calendar.
//!
//! The ticks are the instants `k × interval + offset` seconds after the Unix epoch, for every
//! integer `k`: counted from a fixed origin, not from when a node loaded the task, so every
//! node (and `zkcron schedule`) computes the same ticks. A time zone plays no part. Durations
//! are read as task files read them (`humantime`: `15m`, `1h30m`, `90s`) and must be whole
//! seconds, since a tick (and its fire id) is a whole second.

use chrono::{DateTime, Utc};

use super::ScheduleError;

/// The prefix that makes an expression an interval.
pub(super) const PREFIX: &str = "@every";

/// A parsed `@every` expression.
#[derive(Clone)]
pub(super) struct Every {
    /// The expression as the user wrote it (trimmed), for messages and `zkcron next`.
    expression: Box<str>,
    /// The interval in seconds, at least 1.
    period: i64,
    /// The shift of every tick from a multiple of `period`, in seconds: `0 <= offset < period`.
    offset: i64,
}

impl Every {
    /// Whether `expression` (trimmed) is meant as an interval.
    pub(super) fn is_interval(expression: &str) -> bool {
        super::has_keyword(expression, PREFIX)
    }

    /// Parses `expression`, trimmed and starting with `@every`.
    pub(super) fn parse(expression: &str) -> Result<Every, ScheduleError> {
        let spec = expression[PREFIX.len()..].trim();
        if spec.is_empty() {
            return Err(ScheduleError::EveryMissing);
        }
        let (period, offset) = match spec.split_once('/') {
            Some((period, offset)) => (period.trim(), Some(offset.trim())),
            None => (spec, None),
        };
        let period = seconds(expression, period)?;
        if period == 0 {
            return Err(ScheduleError::EveryTooShort {
                expression: expression.to_string(),
            });
        }
        let offset = match offset {
            Some(text) => {
                let offset = seconds(expression, text)?;
                if offset >= period {
                    return Err(ScheduleError::EveryOffset {
                        expression: expression.to_string(),
                        offset: text.to_string(),
                    });
                }
                offset
            }
            None => 0,
        };
        Ok(Every {
            expression: expression.into(),
            period,
            offset,
        })
    }

    pub(super) fn expression(&self) -> &str {
        &self.expression
    }

    /// The first tick strictly after `after`; `None` beyond chrono's range.
    pub(super) fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Ticks are whole seconds: one after `after` is one after its whole second.
        let k = (after.timestamp() - self.offset).div_euclid(self.period);
        let tick = k.checked_add(1)?.checked_mul(self.period)?;
        DateTime::from_timestamp(tick.checked_add(self.offset)?, 0)
    }

    /// The last tick at or before `at`; `None` beyond chrono's range.
    pub(super) fn latest_at_or_before(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let k = (at.timestamp() - self.offset).div_euclid(self.period);
        let tick = k.checked_mul(self.period)?.checked_add(self.offset)?;
        DateTime::from_timestamp(tick, 0)
    }
}

/// `text`, a duration of `expression`, in whole seconds.
fn seconds(expression: &str, text: &str) -> Result<i64, ScheduleError> {
    let duration =
        humantime::parse_duration(text).map_err(|error| ScheduleError::EveryDuration {
            expression: expression.to_string(),
            value: text.to_string(),
            detail: error.to_string(),
        })?;
    if duration.subsec_nanos() != 0 {
        return Err(ScheduleError::EveryFraction {
            expression: expression.to_string(),
            value: text.to_string(),
        });
    }
    i64::try_from(duration.as_secs()).map_err(|_| ScheduleError::NeverFires {
        expression: expression.to_string(),
    })
}
