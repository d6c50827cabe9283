//! Calendar files: `calendars.d/NAME.toml`, the days and periods a task's `exclude` keeps it
//! from running in (`schedule::Calendar`). Read and checked like task files: a regular file
//! nobody else may write, every mistake with its file, line, column and fix; a broken file
//! keeps its last good version, and a missing dir is no calendar at all.
//!
//! ```toml
//! timezone = "Europe/Berlin"            # default UTC
//! dates = ["2026-12-25", "2026-12-26"]  # whole local days
//! periods = [["2026-12-31T18:00", "2027-01-02T00:00"]]  # local, [from, until)
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{NaiveDate, NaiveDateTime};
use toml::de::{DeTable, DeValue};

use super::checker::{Checker, Value};
use super::{TaskFileError, is_valid_task_name};
use crate::accounts::Identity;
use crate::diag::{Problem, decode_utf8};
use crate::files::{self, FileRules};
use crate::schedule::{Calendar, Calendars, parse_timezone};

/// The keys a calendar file may set.
pub const CALENDAR_KEYS: &[&str] = &["description", "timezone", "dates", "periods"];

/// The rules calendar files are read by.
const CALENDAR_FILE: FileRules = FileRules {
    noun: "calendar file",
    limit: super::MAX_TASK_FILE_BYTES,
    follow_symlinks: true,
    not_regular_help: "zkcron loads regular files named NAME.toml from the calendars dir: \
                       remove it, or rename it so that its name does not end in .toml",
    too_large_help: "a calendar holds days and periods; split a larger one into several",
    missing_help: None,
};

/// What reading a calendars dir found: the calendars (a broken file's last good version in
/// its place), and the files' errors.
#[derive(Debug, Default)]
pub struct LoadedCalendars {
    pub calendars: Calendars,
    pub errors: Vec<TaskFileError>,
}

/// Reads every `*.toml` of `dir`; a file with errors keeps its version in `previous`, if any.
/// A dir that does not exist holds no calendar; one that cannot be read is an error.
pub fn load_calendars_dir(
    dir: &Path,
    identity: &Identity,
    previous: &Calendars,
) -> LoadedCalendars {
    let mut loaded = LoadedCalendars::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return loaded,
        Err(error) => {
            loaded.errors.push(whole_file_error(
                dir,
                format!("cannot read the calendars dir: {error}"),
                "make it a directory zkcron can read, or remove it (no calendars)",
            ));
            return loaded;
        }
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    paths.sort();
    for path in paths {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        match read_calendar(&name, &path, identity) {
            Ok(calendar) => {
                loaded.calendars.insert(name.into(), Arc::new(calendar));
            }
            Err(errors) => {
                if let Some(kept) = previous.get(name.as_str()) {
                    loaded.calendars.insert(name.into(), kept.clone());
                }
                loaded.errors.extend(errors);
            }
        }
    }
    loaded
}

fn whole_file_error(path: &Path, message: String, help: &str) -> TaskFileError {
    TaskFileError {
        path: path.to_path_buf(),
        task: None,
        line: 0,
        column: 0,
        snippet: String::new(),
        width: 0,
        message,
        help: Some(help.to_string()),
    }
}

/// Reads and checks one calendar file.
fn read_calendar(
    name: &str,
    path: &Path,
    identity: &Identity,
) -> Result<Calendar, Vec<TaskFileError>> {
    let to_errors = |problems: Vec<Problem>| -> Vec<TaskFileError> {
        problems
            .into_iter()
            .map(|p| p.into_task_error(path, &None))
            .collect()
    };
    let (bytes, meta) = files::read_regular(path, &CALENDAR_FILE, identity)
        .map_err(|problem| to_errors(vec![problem]))?;
    let problems = files::file_permission_problems(path, &meta, identity, "the days tasks skip");
    if !problems.is_empty() {
        return Err(to_errors(problems));
    }
    let text = decode_utf8(bytes).map_err(|problem| to_errors(vec![problem]))?;
    parse_calendar(name, path, &text)
}

/// Checks the text of calendar `name` (at `path`, for the errors).
pub fn parse_calendar(name: &str, path: &Path, text: &str) -> Result<Calendar, Vec<TaskFileError>> {
    let mut c = Checker::new(text);
    if !is_valid_task_name(name) {
        c.problems.push(Problem::whole_file(
            format!("{name:?} is not a calendar name: use letters, digits, '-', '_' and '.'"),
            Some("rename the file".into()),
        ));
    }
    let calendar = check_calendar(&mut c, name);
    let problems = c.finish();
    match calendar {
        Some(calendar) if problems.is_empty() => Ok(calendar),
        _ => Err(problems
            .into_iter()
            .map(|p| p.into_task_error(path, &None))
            .collect()),
    }
}

fn check_calendar(c: &mut Checker<'_>, name: &str) -> Option<Calendar> {
    let root = match DeTable::parse(c.text) {
        Ok(root) => root,
        Err(error) => {
            c.syntax_error(&error);
            return None;
        }
    };
    let mut calendar = Calendar {
        name: name.into(),
        timezone: chrono_tz::Tz::UTC,
        dates: Vec::new(),
        periods: Vec::new(),
    };
    for (key, value) in root.get_ref().iter() {
        match key.get_ref().as_ref() {
            "description" => {
                c.string("description", value);
            }
            "timezone" => {
                if let Some(zone) = c.string("timezone", value) {
                    match parse_timezone(zone) {
                        Ok(tz) => calendar.timezone = tz,
                        Err(error) => c.report(c.content_span(value), error.to_string(), None),
                    }
                }
            }
            "dates" => calendar.dates = dates(c, value),
            "periods" => calendar.periods = periods(c, value),
            _ => c.unknown_key(key, CALENDAR_KEYS, None),
        }
    }
    calendar.dates.sort();
    calendar.dates.dedup();
    calendar.periods.sort();
    Some(calendar)
}

const DATE_HELP: &str = "write a local day like \"2026-12-25\"";
const PERIOD_HELP: &str = "write a pair of local times, from and until, like [\"2026-12-31T18:00\", \"2027-01-02T00:00\"]";

/// The array `dates`: each a day, `"2026-12-25"` or the TOML date `2026-12-25`.
fn dates(c: &mut Checker<'_>, value: &Value<'_>) -> Vec<NaiveDate> {
    let Some(items) = array(c, "dates", value, DATE_HELP) else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|item| {
            let text = match item.get_ref() {
                DeValue::String(text) => text.trim().to_string(),
                DeValue::Datetime(d) if d.time.is_none() && d.offset.is_none() => d.to_string(),
                _ => {
                    let message = format!("each of `dates` must be a day, found {}", c.found(item));
                    c.report(item.span(), message, Some(DATE_HELP.into()));
                    return None;
                }
            };
            NaiveDate::parse_from_str(&text, "%Y-%m-%d")
                .map_err(|error| {
                    let message = format!("{text:?} in `dates` is not a day: {error}");
                    c.report(c.content_span(item), message, Some(DATE_HELP.into()));
                })
                .ok()
        })
        .collect()
}

/// The array `periods`: each a pair of local times `[from, until)`, from before until.
fn periods(c: &mut Checker<'_>, value: &Value<'_>) -> Vec<(NaiveDateTime, NaiveDateTime)> {
    let Some(items) = array(c, "periods", value, PERIOD_HELP) else {
        return Vec::new();
    };
    let mut periods = Vec::new();
    for item in items {
        let pair = match item.get_ref() {
            DeValue::Array(pair) if pair.len() == 2 => pair,
            _ => {
                let message = format!(
                    "each of `periods` must be a pair [from, until], found {}",
                    c.found(item)
                );
                c.report(item.span(), message, Some(PERIOD_HELP.into()));
                continue;
            }
        };
        let (Some(from), Some(until)) = (local_time(c, &pair[0]), local_time(c, &pair[1])) else {
            continue;
        };
        if until <= from {
            let message = format!(
                "the period ends ({until}) before it starts ({from}), so it excludes nothing"
            );
            c.report(
                item.span(),
                message,
                Some("swap them, or remove the period".into()),
            );
            continue;
        }
        periods.push((from, until));
    }
    periods
}

/// One end of a period: `"2026-12-31T18:00"` (seconds optional) or a TOML local date-time.
fn local_time(c: &mut Checker<'_>, value: &Value<'_>) -> Option<NaiveDateTime> {
    let text = match value.get_ref() {
        DeValue::String(text) => text.trim().to_string(),
        DeValue::Datetime(d) if d.offset.is_none() && d.time.is_some() => d.to_string(),
        DeValue::Datetime(d) if d.offset.is_some() => {
            let message =
                format!("{d} has a UTC offset: a calendar's times are local to its `timezone`");
            c.report(
                value.span(),
                message,
                Some("leave the offset out, and set `timezone`".into()),
            );
            return None;
        }
        _ => {
            let message = format!(
                "a period's end must be a local time, found {}",
                c.found(value)
            );
            c.report(value.span(), message, Some(PERIOD_HELP.into()));
            return None;
        }
    };
    NaiveDateTime::parse_from_str(&text, "%Y-%m-%dT%H:%M:%S")
        .or_else(|_| NaiveDateTime::parse_from_str(&text, "%Y-%m-%dT%H:%M"))
        .map_err(|error| {
            let message = format!("{text:?} is not a local time: {error}");
            c.report(c.content_span(value), message, Some(PERIOD_HELP.into()));
        })
        .ok()
}

/// The items of `value`, which must be an array.
fn array<'v>(
    c: &mut Checker<'_>,
    key: &str,
    value: &'v Value<'v>,
    help: &str,
) -> Option<&'v [Value<'v>]> {
    match value.get_ref() {
        DeValue::Array(items) => Some(&items[..]),
        _ => {
            let message = format!("`{key}` must be an array, found {}", c.found(value));
            c.report(value.span(), message, Some(help.into()));
            None
        }
    }
}

#[cfg(test)]
mod tests;
