//! `@at <RFC 3339 instant>`: a one-shot, the part of a schedule with one tick. The instant
//! carries its own offset, so no time zone plays a part, and it must be a whole second, since a
//! tick (and its fire id) is one.

use chrono::{DateTime, Timelike, Utc};

use super::ScheduleError;

/// The prefix that makes an expression a one-shot.
const PREFIX: &str = "@at";

/// A parsed `@at` expression.
#[derive(Clone)]
pub(super) struct At {
    /// The expression as the user wrote it (trimmed), for messages and `zkcron next`.
    expression: Box<str>,
    instant: DateTime<Utc>,
}

impl At {
    /// Whether `expression` (trimmed) is meant as a one-shot.
    pub(super) fn is_one_shot(expression: &str) -> bool {
        super::has_keyword(expression, PREFIX)
    }

    /// Parses `expression`, trimmed and starting with `@at`.
    pub(super) fn parse(expression: &str) -> Result<At, ScheduleError> {
        let text = expression[PREFIX.len()..].trim();
        if text.is_empty() {
            return Err(ScheduleError::AtMissing);
        }
        let instant = DateTime::parse_from_rfc3339(text)
            .map_err(|error| ScheduleError::AtInstant {
                expression: expression.to_string(),
                value: text.to_string(),
                detail: error.to_string(),
            })?
            .with_timezone(&Utc);
        if instant.nanosecond() != 0 {
            return Err(ScheduleError::AtFraction {
                expression: expression.to_string(),
            });
        }
        Ok(At {
            expression: expression.into(),
            instant,
        })
    }

    pub(super) fn expression(&self) -> &str {
        &self.expression
    }

    /// The one tick.
    pub(super) fn instant(&self) -> DateTime<Utc> {
        self.instant
    }

    pub(super) fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        (self.instant > after).then_some(self.instant)
    }

    pub(super) fn latest_at_or_before(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        (self.instant <= at).then_some(self.instant)
    }
}
