//! The checks of single TOML values, shared by task files and `zkcron.toml`: a [`Checker`]
//! collects every problem of one file while its values are checked one by one.

use std::ops::Range;

use toml::Spanned;
use toml::de::{DeString, DeTable, DeValue};

use super::*;
use crate::diag::{Position, string_value_span};

// ---------------------------------------------------------------------------------------------
// Shared with `config`: the checks of single TOML values.

/// The closest of `candidates` to `word`, when one is close enough to be a likely typo.
pub(crate) fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let word = word.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|candidate| (strsim::jaro_winkler(&word, candidate), candidate))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| candidate)
}

const DURATION_HELP: &str =
    "write a number and a unit, like \"90s\", \"15m\", \"2h\" or \"1h 30m\"";

/// Collects the problems of one file while its values are checked one by one, so that a file's
/// problems are all reported together.
pub(crate) struct Checker<'a> {
    pub text: &'a str,
    pub problems: Vec<Problem>,
}

pub(super) type Value<'i> = Spanned<DeValue<'i>>;

impl<'a> Checker<'a> {
    pub(crate) fn new(text: &'a str) -> Checker<'a> {
        Checker {
            text,
            problems: Vec::new(),
        }
    }

    /// The problems, whole-file ones first, then by position.
    pub(crate) fn finish(mut self) -> Vec<Problem> {
        self.problems
            .sort_by_key(|p| (p.position.line, p.position.column));
        self.problems
    }

    pub(crate) fn report(&mut self, span: Range<usize>, message: String, help: Option<String>) {
        self.problems.push(Problem {
            position: Position::of_span(self.text, span),
            message,
            help,
        });
    }

    pub(crate) fn syntax_error(&mut self, error: &toml::de::Error) {
        let message = format!("invalid TOML: {}", error.message().trim_end());
        match error.span() {
            Some(span) => self.report(span, message, None),
            None => self.problems.push(Problem::whole_file(message, None)),
        }
    }

    /// How a value is described in "found ..." messages: its type and, for scalars, its text.
    pub(crate) fn found(&self, value: &Value<'_>) -> String {
        let kind = value.get_ref().type_str();
        match value.get_ref() {
            DeValue::Table(_) | DeValue::Array(_) => kind.to_string(),
            _ => {
                let raw = self.text.get(value.span()).unwrap_or_default();
                let mut shown: String = raw.chars().take(40).collect();
                if shown.len() < raw.len() {
                    shown.push('…');
                }
                format!("{kind} {shown}")
            }
        }
    }

    pub(super) fn raw(&self, value: &Value<'_>) -> &'a str {
        self.text.get(value.span()).unwrap_or_default()
    }

    /// Where an error about the content of a string value points: the whole value, quotes
    /// included, as for any value, when it is written on one line; else (a multi-line string,
    /// whose first line may hold only `"""`) its text without the blanks around it.
    pub(crate) fn content_span(&self, value: &Value<'_>) -> Range<usize> {
        let Some(s) = value.get_ref().as_str() else {
            return value.span();
        };
        if !self.raw(value).contains('\n') {
            return value.span();
        }
        let start = s.len() - s.trim_start().len();
        let end = s.trim_end().len().max(start);
        string_value_span(self.text, value.span(), s, start..end).unwrap_or(value.span())
    }

    pub(crate) fn unknown_key(
        &mut self,
        key: &Spanned<DeString<'_>>,
        known: &[&str],
        table: Option<&str>,
    ) {
        let name: &str = key.get_ref();
        let message = match table {
            Some(table) => format!("unknown key `{name}` in `{table}`"),
            None => format!("unknown key `{name}`"),
        };
        let help = match closest(name, known.iter().copied()) {
            Some(suggestion) => format!("did you mean `{suggestion}`?"),
            None => format!("known keys: {}", known.join(", ")),
        };
        self.report(key.span(), message, Some(help));
    }

    pub(crate) fn string<'v>(&mut self, key: &str, value: &'v Value<'_>) -> Option<&'v str> {
        match value.get_ref() {
            DeValue::String(s) => Some(s.as_ref()),
            _ => {
                let message = format!("`{key}` must be a string, found {}", self.found(value));
                self.report(value.span(), message, None);
                None
            }
        }
    }

    pub(crate) fn non_empty_string<'v>(
        &mut self,
        key: &str,
        value: &'v Value<'_>,
    ) -> Option<&'v str> {
        let s = self.string(key, value)?;
        if s.trim().is_empty() {
            self.report(
                value.span(),
                format!("`{key}` is empty"),
                Some(format!("remove `{key}` or give it a value")),
            );
            return None;
        }
        if s.contains('\0') {
            self.report(
                value.span(),
                format!("`{key}` contains a NUL character"),
                None,
            );
            return None;
        }
        Some(s)
    }

    pub(crate) fn boolean(&mut self, key: &str, value: &Value<'_>) -> Option<bool> {
        if let Some(b) = value.get_ref().as_bool() {
            return Some(b);
        }
        let message = format!("`{key}` must be true or false, found {}", self.found(value));
        let help = match value.get_ref().as_str() {
            Some("true" | "false") => Some("remove the quotes".to_string()),
            _ => None,
        };
        self.report(value.span(), message, help);
        None
    }

    pub(crate) fn integer(
        &mut self,
        key: &str,
        value: &Value<'_>,
        range: std::ops::RangeInclusive<i64>,
    ) -> Option<i64> {
        let DeValue::Integer(integer) = value.get_ref() else {
            let message = format!("`{key}` must be an integer, found {}", self.found(value));
            let help = value
                .get_ref()
                .as_str()
                .filter(|s| s.trim().parse::<i64>().is_ok())
                .map(|_| "remove the quotes".to_string());
            self.report(value.span(), message, help);
            return None;
        };
        match i64::from_str_radix(integer.as_str(), integer.radix()) {
            Ok(n) if range.contains(&n) => Some(n),
            _ => {
                let message = format!(
                    "`{key}` must be between {} and {}, found {}",
                    range.start(),
                    range.end(),
                    self.raw(value)
                );
                self.report(value.span(), message, None);
                None
            }
        }
    }

    pub(crate) fn duration(&mut self, key: &str, value: &Value<'_>) -> Option<Duration> {
        match value.get_ref() {
            DeValue::String(s) => match humantime::parse_duration(s.trim()) {
                Ok(duration) => Some(duration),
                Err(error) => {
                    // The value, on one line (`\n` for a line break), whatever quotes it had.
                    let message = format!("`{key}` = {s:?} is not a valid duration: {error}");
                    self.report(
                        self.content_span(value),
                        message,
                        Some(DURATION_HELP.into()),
                    );
                    None
                }
            },
            other => {
                let message = format!(
                    "`{key}` must be a duration string like \"90s\" or \"2h\", found {}",
                    self.found(value)
                );
                let help = match other {
                    DeValue::Integer(_) => format!(
                        "durations need a unit: write `{key} = \"{}s\"` for {} seconds",
                        self.raw(value),
                        self.raw(value)
                    ),
                    _ => DURATION_HELP.to_string(),
                };
                self.report(value.span(), message, Some(help));
                None
            }
        }
    }

    pub(super) fn positive_duration(
        &mut self,
        key: &str,
        value: &Value<'_>,
        help: &str,
    ) -> Option<Duration> {
        let duration = self.duration(key, value)?;
        if duration.is_zero() {
            self.report(
                self.content_span(value),
                format!("`{key}` must be greater than zero"),
                Some(help.to_string()),
            );
            return None;
        }
        Some(duration)
    }

    pub(crate) fn choice<T: Copy>(
        &mut self,
        key: &str,
        value: &Value<'_>,
        choices: &[(&str, T)],
    ) -> Option<T> {
        let s = self.string(key, value)?;
        if let Some((_, choice)) = choices.iter().find(|(name, _)| *name == s) {
            return Some(*choice);
        }
        let names: Vec<String> = choices
            .iter()
            .map(|(name, _)| format!("{name:?}"))
            .collect();
        let message = format!("`{key}` must be one of {}, found {s:?}", names.join(", "));
        let help = closest(s, choices.iter().map(|(name, _)| *name))
            .map(|name| format!("did you mean {name:?}?"));
        self.report(self.content_span(value), message, help);
        None
    }

    pub(crate) fn table<'v, 'i>(
        &mut self,
        key: &str,
        value: &'v Value<'i>,
        example: &str,
    ) -> Option<&'v DeTable<'i>> {
        match value.get_ref() {
            DeValue::Table(table) => Some(table),
            _ => {
                let message = format!(
                    "`{key}` must be a table like {example}, found {}",
                    self.found(value)
                );
                self.report(value.span(), message, None);
                None
            }
        }
    }

    pub(crate) fn path(&mut self, key: &str, value: &Value<'_>) -> Option<PathBuf> {
        self.non_empty_string(key, value).map(PathBuf::from)
    }

    pub(super) fn absolute_path(&mut self, key: &str, value: &Value<'_>) -> Option<PathBuf> {
        let path = self.path(key, value)?;
        if !path.is_absolute() {
            let message = format!("`{key}` must be an absolute path, found {path:?}");
            let help = "a relative path would depend on where zkcron was started".to_string();
            self.report(self.content_span(value), message, Some(help));
            return None;
        }
        Some(path)
    }

    /// A table of string values, like `env` or `[node].labels`.
    pub(crate) fn string_map(
        &mut self,
        key: &str,
        value: &Value<'_>,
        example: &str,
    ) -> Vec<(Spanned<String>, String)> {
        let Some(table) = self.table(key, value, example) else {
            return Vec::new();
        };
        let mut entries = Vec::new();
        for (name, item) in table.iter() {
            let name_text: &str = name.get_ref();
            match item.get_ref() {
                DeValue::String(s) if s.contains('\0') => {
                    self.report(
                        item.span(),
                        format!("`{key}.{name_text}` contains a NUL character"),
                        None,
                    );
                }
                DeValue::String(s) => {
                    entries.push((
                        Spanned::new(name.span(), name_text.to_string()),
                        s.to_string(),
                    ));
                }
                _ => {
                    let message = format!(
                        "`{key}.{name_text}` must be a string, found {}",
                        self.found(item)
                    );
                    let help = match item.get_ref() {
                        DeValue::Integer(_) | DeValue::Float(_) | DeValue::Boolean(_) => {
                            Some(format!("quote it: {name_text} = \"{}\"", self.raw(item)))
                        }
                        _ => None,
                    };
                    self.report(item.span(), message, help);
                }
            }
        }
        entries
    }
}
