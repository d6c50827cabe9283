//! Checking the keys that say when a task runs beyond one expression: `schedule` written as a
//! list, `active_from` / `active_until`, `dst_gap` / `dst_repeat`, and `timezone` or the DST
//! keys next to a schedule that has no use for them (no cron expression). One expression is
//! checked by `check` itself.

use std::ops::Range;

use chrono::{DateTime, SecondsFormat, Utc};
use toml::de::DeValue;

use super::checker::Value;
use super::*;
use crate::schedule::{Calendar, Calendars, DstChoice, DstGap, DstRepeat, ScheduleError, Window};

/// The keys about when a task runs that are read with the others and checked once all are.
#[derive(Default)]
pub(super) struct WhenKeys<'v> {
    active_from: Option<&'v Value<'v>>,
    active_until: Option<&'v Value<'v>>,
    dst_gap: Option<&'v Value<'v>>,
    dst_repeat: Option<&'v Value<'v>>,
    exclude: Option<&'v Value<'v>>,
    /// Where `timezone` is set in the file, when it is.
    pub(super) timezone: Option<Range<usize>>,
}

impl<'v> WhenKeys<'v> {
    /// Keeps `value` if `k` is `active_from`, `active_until`, `dst_gap` or `dst_repeat`;
    /// `false` if it is none of them.
    pub(super) fn read(&mut self, k: &str, value: &'v Value<'v>) -> bool {
        match k {
            "active_from" => self.active_from = Some(value),
            "active_until" => self.active_until = Some(value),
            "dst_gap" => self.dst_gap = Some(value),
            "dst_repeat" => self.dst_repeat = Some(value),
            "exclude" => self.exclude = Some(value),
            _ => return false,
        }
        true
    }
}

/// The help for a window key that holds no RFC 3339 instant.
const INSTANT_HELP: &str = "write an RFC 3339 instant with its offset, like \"2026-12-01T00:00:00Z\" or \"2026-12-01T09:00:00+01:00\"";

impl Checker<'_> {
    /// A `schedule` written as the array `items`: the union of its expressions, each checked
    /// where it stands.
    pub(super) fn schedule_list(
        &mut self,
        value: &Value<'_>,
        items: &[Value<'_>],
        timezone: Tz,
    ) -> Option<Schedule> {
        if items.is_empty() {
            let error = ScheduleError::EmptyList;
            self.report(value.span(), error.to_string(), None);
            return None;
        }
        let mut parts = Vec::with_capacity(items.len());
        for item in items {
            let Some(expression) = item.get_ref().as_str() else {
                let message = format!(
                    "every element of `schedule` must be a string, found {}",
                    self.found(item)
                );
                let help = format!("quote it: \"{}\"", self.raw(item));
                self.report(item.span(), message, Some(help));
                continue;
            };
            if let Some(part) = self.schedule_expression(item, expression, timezone) {
                parts.push(part);
            }
        }
        if parts.len() < items.len() {
            return None;
        }
        Schedule::union(parts).ok()
    }

    /// The task's window from `active_from` and `active_until`; a side not given, or wrong
    /// (its problem is reported), is open.
    pub(super) fn window(&mut self, keys: &WhenKeys<'_>) -> Window {
        let from = keys
            .active_from
            .and_then(|value| self.instant("active_from", value));
        let until = keys
            .active_until
            .and_then(|value| self.instant("active_until", value));
        if let (Some(from), Some(until), Some(value)) = (from, until, keys.active_until)
            && from >= until
        {
            let show = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::AutoSi, true);
            let message = format!(
                "`active_until` ({}) is not after `active_from` ({}), so the task would never run",
                show(until),
                show(from)
            );
            let help = "make `active_until` later than `active_from`, or remove one of them";
            self.report(value.span(), message, Some(help.into()));
            return Window::default();
        }
        Window { from, until }
    }

    /// An instant key (`active_from`, `active_until`): an RFC 3339 string or a TOML offset
    /// date-time (the same text unquoted).
    fn instant(&mut self, key: &str, value: &Value<'_>) -> Option<DateTime<Utc>> {
        let text = match value.get_ref() {
            DeValue::String(text) => text.trim().to_string(),
            DeValue::Datetime(datetime) if datetime.offset.is_some() => datetime.to_string(),
            DeValue::Datetime(datetime) => {
                let message = format!(
                    "`{key}` = {datetime} has no UTC offset, so nodes in different zones would \
                     read different instants"
                );
                let help = match datetime.time {
                    Some(_) => format!("add `Z` for UTC or an offset: {key} = {datetime}Z"),
                    None => INSTANT_HELP.to_string(),
                };
                self.report(value.span(), message, Some(help));
                return None;
            }
            _ => {
                let message = format!(
                    "`{key}` must be an RFC 3339 instant, found {}",
                    self.found(value)
                );
                self.report(value.span(), message, Some(INSTANT_HELP.into()));
                return None;
            }
        };
        match DateTime::parse_from_rfc3339(&text) {
            Ok(instant) => Some(instant.with_timezone(&Utc)),
            Err(error) => {
                let message = format!("`{key}` = {text:?} is not an RFC 3339 instant: {error}");
                self.report(self.content_span(value), message, Some(INSTANT_HELP.into()));
                None
            }
        }
    }

    /// What `dst_gap` and `dst_repeat` choose; a key not given, or wrong (its problem is
    /// reported), leaves cronie's rule. Refused next to a schedule without a cron expression:
    /// it has no local time for a clock change to touch.
    pub(super) fn dst_choice(&mut self, schedule: &Schedule, keys: &WhenKeys<'_>) -> DstChoice {
        let gap = keys
            .dst_gap
            .and_then(|value| self.choice("dst_gap", value, &DstGap::CHOICES));
        let repeat = keys
            .dst_repeat
            .and_then(|value| self.choice("dst_repeat", value, &DstRepeat::CHOICES));
        for (key, value) in [("dst_gap", keys.dst_gap), ("dst_repeat", keys.dst_repeat)] {
            if let Some(value) = value
                && !schedule.uses_timezone()
            {
                let message = format!(
                    "`{key}` has no effect on this schedule: it has no cron expression, so no \
                     local time that a clock change could skip or repeat"
                );
                let help = format!("remove `{key}`");
                self.report(value.span(), message, Some(help));
            }
        }
        DstChoice { gap, repeat }
    }

    /// The calendars `exclude` names, each looked up in `calendars` (an unknown name is an
    /// error at its place, with the names there are).
    pub(super) fn exclusions(
        &mut self,
        keys: &WhenKeys<'_>,
        calendars: &Calendars,
    ) -> Vec<Arc<Calendar>> {
        let Some(value) = keys.exclude else {
            return Vec::new();
        };
        let help = "write the names of files in the calendars dir, without .toml: \
                    exclude = [\"holidays\"]";
        let DeValue::Array(items) = value.get_ref() else {
            let message = format!(
                "`exclude` must be an array of calendar names, found {}",
                self.found(value)
            );
            self.report(value.span(), message, Some(help.into()));
            return Vec::new();
        };
        let mut found = Vec::new();
        for item in items.iter() {
            let Some(name) = item.get_ref().as_str() else {
                let message = format!(
                    "each of `exclude` must be a calendar's name, found {}",
                    self.found(item)
                );
                self.report(item.span(), message, Some(help.into()));
                continue;
            };
            match calendars.get(name) {
                Some(calendar) => found.push(calendar.clone()),
                None => {
                    let known: Vec<&str> = calendars.keys().map(|n| &**n).collect();
                    let message = match known.is_empty() {
                        true => format!("unknown calendar {name:?}: the calendars dir has none"),
                        false => format!(
                            "unknown calendar {name:?}; the calendars dir has: {}",
                            known.join(", ")
                        ),
                    };
                    let help = closest(name, known.iter().copied())
                        .map(|near| format!("did you mean {near:?}?"))
                        .unwrap_or_else(|| {
                            format!("add calendars.d/{name}.toml, or remove it from `exclude`")
                        });
                    self.report(self.content_span(item), message, Some(help));
                }
            }
        }
        found
    }

    /// Refuses a `timezone` set next to a schedule that reads no zone: intervals count from the
    /// Unix epoch, and an operator who sets a zone expects it to move the ticks.
    pub(super) fn timezone_use(&mut self, schedule: &Schedule, keys: &WhenKeys<'_>) {
        if let Some(span) = keys.timezone.clone()
            && !schedule.uses_timezone()
        {
            if schedule.one_shot().is_some() {
                let message = "`timezone` has no effect on `@at` instants: each carries its own \
                               UTC offset"
                    .to_string();
                let help = "remove `timezone`, and give the instant the offset of the zone \
                            meant, like \"@at 2026-12-31T23:00:00+01:00\"";
                self.report(span, message, Some(help.into()));
                return;
            }
            let message = "`timezone` has no effect on `@every` intervals: they count from the \
                           Unix epoch, the same instants in every zone"
                .to_string();
            let help = "remove `timezone`; to shift the ticks, give an offset like \
                        \"@every 1d/7h\" (07:00 UTC each day), or use a cron expression";
            self.report(span, message, Some(help.into()));
        }
    }
}
