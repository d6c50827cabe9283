//! Diagnostics for files zkcron reads (task files and `zkcron.toml`): where a problem is, and how
//! it is shown.
//!
//! A [`Problem`] has a [`Position`] (1-based line and character column, as rustc reports them)
//! and is rendered by [`Report`] in rustc's style through annotate-snippets, which lines the
//! carets up under wide characters (CJK, emoji) and tabs and shows control characters as
//! visible symbols. [`string_value_span`] finds where a part of a TOML string's value is written
//! in the file, through escapes and multi-line strings, so that a caret can point into the value.

use std::fmt;
use std::ops::Range;
use std::path::Path;

use annotate_snippets::{AnnotationKind, Level, Origin, Renderer, Snippet};

/// Where a problem is: 1-based line and column (0 for the whole file), the line's text, and how
/// many characters the caret line underlines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Position {
    pub line: usize,
    pub column: usize,
    pub width: usize,
    pub snippet: String,
}

impl Position {
    /// The position of byte range `span` of `text`. A span that runs over several lines is
    /// underlined to the end of its first line.
    pub(crate) fn of_span(text: &str, span: Range<usize>) -> Position {
        let mut start = span.start.min(text.len());
        while !text.is_char_boundary(start) {
            start -= 1;
        }
        let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
        let mut end = span.end.clamp(start, line_end);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        Position {
            line: text[..start].matches('\n').count() + 1,
            column: text[line_start..start].chars().count() + 1,
            width: text[start..end].chars().count().max(1),
            snippet: text[line_start..line_end]
                .trim_end_matches('\r')
                .to_string(),
        }
    }
}

/// One problem found in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    pub position: Position,
    pub message: String,
    pub help: Option<String>,
}

impl Problem {
    pub(crate) fn whole_file(message: String, help: Option<String>) -> Problem {
        Problem {
            position: Position::default(),
            message,
            help,
        }
    }
}

/// A problem ready to print, borrowed from whichever error type holds it.
pub(crate) struct Report<'a> {
    pub path: &'a Path,
    pub line: usize,
    pub column: usize,
    pub width: usize,
    pub snippet: &'a str,
    pub message: &'a str,
    pub help: Option<&'a str>,
}

impl Report<'_> {
    /// The rustc-style block: message, `--> file:line:col`, the line with carets, help.
    pub(crate) fn render(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = self.path.display().to_string();
        let title = Level::ERROR.primary_title(self.message);
        let mut group = if self.line == 0 {
            title.element(Origin::path(path.as_str()))
        } else {
            title.element(
                Snippet::source(self.snippet)
                    .line_start(self.line)
                    .path(path.as_str())
                    .annotation(AnnotationKind::Primary.span(self.underlined())),
            )
        };
        if let Some(help) = self.help {
            group = group.element(Level::HELP.message(help));
        }
        f.write_str(&Renderer::plain().render(&[group]))
    }

    /// The bytes of the snippet the carets go under: `width` characters from `column`.
    fn underlined(&self) -> Range<usize> {
        let byte_of = |column: usize| {
            self.snippet
                .char_indices()
                .nth(column)
                .map_or(self.snippet.len(), |(i, _)| i)
        };
        let start = self.column.saturating_sub(1);
        byte_of(start)..byte_of(start + self.width)
    }

    /// `path:line:col: message (help)`, or `path: message (help)` for a whole-file problem.
    pub(crate) fn one_line(&self) -> String {
        let mut line = if self.line == 0 {
            format!("{}: {}", self.path.display(), self.message)
        } else {
            format!(
                "{}:{}:{}: {}",
                self.path.display(),
                self.line,
                self.column,
                self.message
            )
        };
        if let Some(help) = self.help {
            line.push_str(&format!(" ({help})"));
        }
        line
    }
}

/// Where bytes `part` of the string `value` are written in `text`, whose bytes `span` hold the
/// TOML string (quotes included) that `value` was read from. Basic and literal strings, one- and
/// multi-line, escapes and line-ending backslashes are followed; `None` when `span` does not
/// hold a string that reads as `value`, or `part` is empty.
pub(crate) fn string_value_span(
    text: &str,
    span: Range<usize>,
    value: &str,
    part: Range<usize>,
) -> Option<Range<usize>> {
    let raw = text.get(span.clone())?;
    let (decoded, sources) = decode_toml_string(raw)?;
    if decoded != value {
        return None;
    }
    // `sources[i]` is where the character starting at byte `starts[i]` of the value comes from.
    let starts: Vec<usize> = decoded.char_indices().map(|(i, _)| i).collect();
    let first = starts.iter().position(|&i| i >= part.start)?;
    let last = starts.iter().rposition(|&i| i < part.end)?;
    (first <= last).then(|| span.start + sources[first].start..span.start + sources[last].end)
}

/// Reads a TOML string as written (quotes included): its value, and for each of its characters
/// the bytes of `raw` it was written as.
fn decode_toml_string(raw: &str) -> Option<(String, Vec<Range<usize>>)> {
    let (delimiter, escapes) = [("\"\"\"", true), ("'''", false), ("\"", true), ("'", false)]
        .into_iter()
        .find(|(delimiter, _)| raw.starts_with(delimiter))?;
    let multi_line = delimiter.len() == 3;
    if raw.len() < 2 * delimiter.len() || !raw.ends_with(delimiter) {
        return None;
    }
    let end = raw.len() - delimiter.len();
    let mut at = delimiter.len();
    if multi_line {
        // A newline right after the opening delimiter is not part of the value.
        for newline in ["\r\n", "\n"] {
            if raw[at..].starts_with(newline) {
                at += newline.len();
                break;
            }
        }
    }
    let mut value = String::new();
    let mut sources = Vec::new();
    while at < end {
        let rest = &raw[at..end];
        let c = rest.chars().next()?;
        if !(escapes && c == '\\') {
            value.push(c);
            sources.push(at..at + c.len_utf8());
            at += c.len_utf8();
            continue;
        }
        let escaped = &rest[1..];
        if multi_line {
            // A backslash ending a line drops the line break and the whitespace after it.
            let blanks = escaped.trim_start_matches([' ', '\t']);
            if blanks.starts_with('\n') || blanks.starts_with("\r\n") {
                let skipped = escaped.trim_start_matches([' ', '\t', '\r', '\n']);
                at += 1 + escaped.len() - skipped.len();
                continue;
            }
        }
        let hex = |digits: usize| {
            let code = u32::from_str_radix(escaped.get(1..1 + digits)?, 16).ok()?;
            Some((char::from_u32(code)?, 1 + digits))
        };
        let (decoded, length) = match escaped.chars().next()? {
            'b' => ('\u{8}', 1),
            't' => ('\t', 1),
            'n' => ('\n', 1),
            'f' => ('\u{c}', 1),
            'r' => ('\r', 1),
            'e' => ('\u{1b}', 1),
            '"' => ('"', 1),
            '\\' => ('\\', 1),
            'x' => hex(2)?,
            'u' => hex(4)?,
            'U' => hex(8)?,
            _ => return None,
        };
        value.push(decoded);
        sources.push(at..at + 1 + length);
        at += 1 + length;
    }
    Some((value, sources))
}

/// `path` as a shell word, so the fix commands in help lines can be pasted as they are.
pub(crate) fn shell_quote(path: &Path) -> String {
    let text = path.display().to_string();
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:@%,=".contains(c));
    if plain {
        text
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// Decodes a file as UTF-8; the error points at the first bad byte.
pub(crate) fn decode_utf8(bytes: Vec<u8>) -> Result<String, Problem> {
    String::from_utf8(bytes).map_err(|error| {
        let bad_at = error.utf8_error().valid_up_to();
        let bytes = error.as_bytes();
        let bad_byte = bytes[bad_at];
        // Everything before `bad_at` is valid UTF-8.
        let before = std::str::from_utf8(&bytes[..bad_at]).unwrap_or_default();
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let line_end = bytes[bad_at..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |i| bad_at + i);
        let line = before.matches('\n').count() + 1;
        let column = before[line_start..].chars().count() + 1;
        Problem {
            position: Position {
                line,
                column,
                width: 1,
                snippet: String::from_utf8_lossy(&bytes[line_start..line_end])
                    .trim_end_matches('\r')
                    .to_string(),
            },
            message: format!(
                "the file is not valid UTF-8: byte 0x{bad_byte:02x} at line {line}, column {column}"
            ),
            help: Some("save the file as UTF-8".into()),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quote_leaves_plain_paths_alone() {
        assert_eq!(
            shell_quote(Path::new("/etc/zkcron/jobs.d/a-b_c.toml")),
            "/etc/zkcron/jobs.d/a-b_c.toml"
        );
        assert_eq!(shell_quote(Path::new("/x/a b.toml")), "'/x/a b.toml'");
        assert_eq!(shell_quote(Path::new("/x/it's")), "'/x/it'\\''s'");
    }

    #[test]
    fn position_counts_characters_and_drops_carriage_returns() {
        let text = "a = 1\r\nmot = \"é\" # ü\r\n";
        let at = text.find('#').unwrap();
        let position = Position::of_span(text, at..at + 1);
        assert_eq!((position.line, position.column, position.width), (2, 11, 1));
        assert_eq!(position.snippet, "mot = \"é\" # ü");
    }

    #[test]
    fn position_at_end_of_file_is_past_the_last_line() {
        let text = "a = 1\n";
        let position = Position::of_span(text, text.len()..text.len());
        assert_eq!((position.line, position.column, position.width), (2, 1, 1));
        assert_eq!(position.snippet, "");
    }

    #[test]
    fn span_across_lines_is_underlined_to_the_end_of_its_first_line() {
        let text = "x = [\n  1,\n]\n";
        let position = Position::of_span(text, 4..text.len() - 1);
        assert_eq!((position.line, position.column, position.width), (1, 5, 1));
    }

    /// Where `part` of the value of `key`'s string is in `text`, as the text found there.
    fn written_as<'t>(text: &'t str, part: &str) -> Option<&'t str> {
        let document = toml::de::DeTable::parse(text).unwrap();
        let (_, value) = document.get_ref().iter().next().unwrap();
        let decoded = value.get_ref().as_str().unwrap();
        let at = decoded.find(part).unwrap();
        string_value_span(text, value.span(), decoded, at..at + part.len()).map(|r| &text[r])
    }

    #[test]
    fn a_part_of_a_string_value_is_found_through_every_kind_of_toml_string() {
        assert_eq!(written_as("s = \"0 61 * * *\"", "61"), Some("61"));
        assert_eq!(written_as("s = '0 61 * * *'", "61"), Some("61"));
        assert_eq!(written_as("s = \"\"\"\n0 61 * * *\"\"\"", "61"), Some("61"));
        assert_eq!(written_as("s = '''\r\n0 61 * * *'''", "61"), Some("61"));
        assert_eq!(
            written_as("s = \"\"\"\\\n    0 \\\n  61 * * *\"\"\"", "61"),
            Some("61")
        );
        assert_eq!(written_as("s = \"\\u0030 6\\x31 *\"", "61"), Some("6\\x31"));
        assert_eq!(written_as("s = \"\\u0030 61 *\"", "0"), Some("\\u0030"));
        assert_eq!(written_as("s = \"日本 61\"", "61"), Some("61"));
        assert_eq!(
            written_as("s = \"\"\"a\"\"b\"\"\"\"", "b\""),
            Some("b\""),
            "quotes before the closing delimiter belong to the value"
        );
    }

    #[test]
    fn a_span_that_is_not_the_string_finds_nothing() {
        let text = "s = 5";
        assert_eq!(string_value_span(text, 4..5, "5", 0..1), None);
        let text = "s = \"abc\"";
        assert_eq!(string_value_span(text, 4..9, "abd", 0..1), None);
        assert_eq!(string_value_span(text, 4..9, "abc", 1..1), None);
    }
}
