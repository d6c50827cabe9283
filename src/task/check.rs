//! Checking a task file's keys into a [`TaskSpec`]: the schedule and its zone, the command and
//! what Linux lets it pass to `execve`, the environment, retries, `version_req`, and the user and
//! group it runs as.

use std::ops::Range;

use super::checker::Value;
use super::*;
use crate::diag::string_value_span;
use crate::schedule::{ScheduleError, parse_timezone};
use toml::de::{DeTable, DeValue};

/// Checks every key of a task file; `None` when anything is wrong (the problems are in
/// `checker`).
pub(super) fn check_task(
    checker: &mut Checker<'_>,
    name: &str,
    path: &Path,
    defaults: &TaskDefaults,
) -> Option<TaskSpec> {
    let text = checker.text;
    let root = match DeTable::parse(text) {
        Ok(root) => root,
        Err(error) => {
            checker.syntax_error(&error);
            return None;
        }
    };
    let c = checker;

    let mut description = None;
    let mut schedule_value = None;
    let mut timezone = defaults.timezone;
    let mut command_value = None;
    let mut user = None;
    let mut group = None;
    let mut working_dir = None;
    let mut env = BTreeMap::new();
    let mut timeout = None;
    let mut kill_grace = DEFAULT_KILL_GRACE;
    let mut overlap = OverlapPolicy::default();
    let mut catch_up = CatchUpPolicy::default();
    let mut starting_deadline = None;
    let mut jitter = Duration::ZERO;
    let mut retries = RetryPolicy::default();
    let mut version_req = None;
    let mut kill_on_session_loss = false;
    let mut on_node_loss = NodeLossPolicy::default();
    let mut enabled = true;
    let mut require_labels = BTreeMap::new();
    let mut on_failure = None;

    for (key, value) in root.get_ref().iter() {
        let k: &str = key.get_ref();
        match k {
            "description" => description = c.string(k, value).map(str::to_string),
            "schedule" => schedule_value = Some(value),
            "timezone" => {
                if let Some(zone) = c.string(k, value) {
                    match parse_timezone(zone) {
                        Ok(tz) => timezone = tz,
                        Err(error) => c.report(c.content_span(value), error.to_string(), None),
                    }
                }
            }
            "command" => command_value = Some(value),
            "user" => user = c.non_empty_string(k, value).map(|s| (s, value.span())),
            "group" => group = c.non_empty_string(k, value).map(|s| (s, value.span())),
            "working_dir" => working_dir = c.absolute_path(k, value),
            "env" => env = c.env(value),
            "timeout" => {
                timeout = c.positive_duration(
                    k,
                    value,
                    "remove `timeout` to let runs take as long as they need",
                )
            }
            "kill_grace" => kill_grace = c.duration(k, value).unwrap_or(kill_grace),
            "overlap" => {
                let choices = [
                    ("skip", OverlapPolicy::Skip),
                    ("allow", OverlapPolicy::Allow),
                    ("replace", OverlapPolicy::Replace),
                ];
                overlap = c.choice(k, value, &choices).unwrap_or(overlap);
            }
            "catch_up" => {
                let choices = [
                    ("skip", CatchUpPolicy::Skip),
                    ("once", CatchUpPolicy::Once),
                    ("all", CatchUpPolicy::All),
                ];
                catch_up = c.choice(k, value, &choices).unwrap_or(catch_up);
            }
            "starting_deadline" => {
                starting_deadline = c.positive_duration(
                    k,
                    value,
                    "remove `starting_deadline` to run missed ticks however late they are",
                )
            }
            "jitter" => jitter = c.duration(k, value).unwrap_or(jitter),
            "retries" => retries = c.retries(value).unwrap_or(retries),
            "version_req" => version_req = c.version_req(value),
            "kill_on_session_loss" => {
                kill_on_session_loss = c.boolean(k, value).unwrap_or(kill_on_session_loss)
            }
            "on_node_loss" => {
                let choices = [
                    ("skip", NodeLossPolicy::Skip),
                    ("rerun", NodeLossPolicy::Rerun),
                ];
                on_node_loss = c.choice(k, value, &choices).unwrap_or(on_node_loss);
            }
            "enabled" => enabled = c.boolean(k, value).unwrap_or(enabled),
            "require_labels" => {
                require_labels = c
                    .string_map(k, value, "{ zone = \"eu\" }")
                    .into_iter()
                    .map(|(name, value)| (name.into_inner(), value))
                    .collect()
            }
            "on_failure" => on_failure = c.on_failure(value),
            _ => c.unknown_key(key, TASK_KEYS, None),
        }
    }

    // After the loop: the schedule is read in the task's zone, whichever key came first.
    let schedule = match schedule_value {
        None => {
            c.problems.push(Problem::whole_file(
                "missing `schedule`: every task needs one".into(),
                Some("add a line like `schedule = \"30 2 * * *\"`".into()),
            ));
            None
        }
        Some(value) => c.string("schedule", value).and_then(|expression| {
            Schedule::parse(expression, timezone)
                .map_err(|error| {
                    let span = schedule_error_span(text, value.span(), expression, &error);
                    c.report(span, error.to_string(), None);
                })
                .ok()
        }),
    };
    let command = match command_value {
        None => {
            c.problems.push(Problem::whole_file(
                "missing `command`: every task needs one".into(),
                Some("add a line like `command = [\"/usr/local/bin/backup\", \"--full\"]`".into()),
            ));
            None
        }
        Some(value) => c.command(value),
    };

    if let (Some(command), Some(value)) = (&command, command_value) {
        let size = exec_size(command, &env);
        if size > MAX_EXEC_BYTES {
            c.report(
                value.span(),
                format!(
                    "`command` and `env` take {size} bytes as the program's arguments and \
                     environment (each string with its NUL and an 8-byte pointer, plus {} bytes \
                     kept for the variables zkcron sets); Linux allows at most {} bytes ({} MiB, \
                     a quarter of the usual 8 MiB stack limit), so every run would fail",
                    ZKCRON_ENV_BYTES,
                    MAX_EXEC_BYTES,
                    MAX_EXEC_BYTES >> 20
                ),
                Some("pass large data in a file, and run a script that reads it".into()),
            );
        }
    }

    let user = c.effective_user(user, defaults);
    let group = c.group(group, &defaults.identity);

    if !c.problems.is_empty() {
        return None;
    }
    Some(TaskSpec {
        name: name.into(),
        path: path.to_path_buf(),
        schedule: schedule?,
        command: command?,
        user,
        overlap,
        catch_up,
        jitter,
        kill_on_session_loss,
        on_node_loss,
        enabled,
        extras: TaskExtras {
            description,
            group,
            working_dir,
            env,
            timeout,
            kill_grace,
            starting_deadline,
            retries,
            version_req,
            require_labels,
            on_failure,
        }
        .into(),
    })
}

/// Narrows a schedule error to the field it blames, so the caret points at `61` rather than at
/// the whole expression, wherever the string puts it (escapes, multi-line strings).
fn schedule_error_span(
    text: &str,
    span: Range<usize>,
    expression: &str,
    error: &ScheduleError,
) -> Range<usize> {
    const NAMES: [&str; 6] = [
        "second",
        "minute",
        "hour",
        "day-of-month",
        "month",
        "day-of-week",
    ];
    let ScheduleError::Field { field, .. } = error else {
        return span;
    };
    let mut fields = Vec::new();
    let mut start = None;
    for (i, ch) in expression
        .char_indices()
        .chain(std::iter::once((expression.len(), ' ')))
    {
        match (ch.is_whitespace(), start) {
            (false, None) => start = Some(i),
            (true, Some(s)) => {
                fields.push(s..i);
                start = None;
            }
            _ => {}
        }
    }
    let Some(offset) = 6usize.checked_sub(fields.len()) else {
        return span;
    };
    NAMES
        .iter()
        .position(|name| name == field)
        .and_then(|index| index.checked_sub(offset))
        .and_then(|index| fields.get(index))
        .and_then(|field| string_value_span(text, span.clone(), expression, field.clone()))
        .unwrap_or(span)
}

impl<'a> Checker<'a> {
    fn env(&mut self, value: &Value<'_>) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        for (name, item) in self.string_map("env", value, "{ PGHOST = \"db1\" }") {
            let text = name.get_ref();
            // The child gets it as one `NAME=value` string.
            let entry_len = text.len() + 1 + item.len();
            if too_long_for_exec(entry_len) {
                let (message, help) = arg_too_long(&format!("`env.{text}`"), entry_len);
                self.report(name.span(), message, Some(help));
            } else if !is_valid_env_name(text) {
                self.report(
                    name.span(),
                    format!("`{text}` is not a valid environment variable name"),
                    Some("names must match [A-Za-z_][A-Za-z0-9_]*".into()),
                );
            } else if text.starts_with("ZKCRON_") {
                self.report(
                    name.span(),
                    format!("`env` must not set `{text}`: names starting with ZKCRON_ are reserved for the variables zkcron sets"),
                    Some("rename the variable".into()),
                );
            } else {
                env.insert(name.into_inner(), item);
            }
        }
        env
    }

    fn command(&mut self, value: &Value<'_>) -> Option<CommandLine> {
        const EXAMPLE: &str = "write an array like [\"/usr/local/bin/backup\", \"--full\"], or a string for /bin/sh -c";
        match value.get_ref() {
            DeValue::String(s) if s.trim().is_empty() => {
                self.report(
                    value.span(),
                    "`command` is empty".into(),
                    Some(EXAMPLE.into()),
                );
                None
            }
            DeValue::String(s) if s.contains('\0') => {
                self.report(
                    value.span(),
                    "`command` contains a NUL character".into(),
                    None,
                );
                None
            }
            DeValue::String(s) => {
                if too_long_for_exec(s.len()) {
                    let (message, help) = arg_too_long("`command`", s.len());
                    self.report(value.span(), message, Some(help));
                    return None;
                }
                Some(CommandLine::Shell(s.to_string()))
            }
            DeValue::Array(items) => {
                if items.is_empty() {
                    self.report(
                        value.span(),
                        "`command` is an empty array".into(),
                        Some(EXAMPLE.into()),
                    );
                    return None;
                }
                let mut argv = Vec::with_capacity(items.len());
                for (index, item) in items.iter().enumerate() {
                    match item.get_ref().as_str() {
                        Some(s) if s.contains('\0') => {
                            self.report(
                                item.span(),
                                "`command` contains a NUL character".into(),
                                None,
                            );
                        }
                        Some(s) if too_long_for_exec(s.len()) => {
                            let what = format!("element {} of `command`", index + 1);
                            let (message, help) = arg_too_long(&what, s.len());
                            self.report(item.span(), message, Some(help));
                        }
                        Some(s) => argv.push(s.to_string()),
                        None => {
                            let message = format!(
                                "every element of `command` must be a string, found {}",
                                self.found(item)
                            );
                            self.report(
                                item.span(),
                                message,
                                Some(format!("quote it: \"{}\"", self.raw(item))),
                            );
                        }
                    }
                }
                if items[0]
                    .get_ref()
                    .as_str()
                    .is_some_and(|s| s.trim().is_empty())
                {
                    self.report(
                        items[0].span(),
                        "the program (the first element of `command`) is empty".into(),
                        Some(EXAMPLE.into()),
                    );
                    return None;
                }
                (argv.len() == items.len()).then_some(CommandLine::Argv(argv))
            }
            _ => {
                let message = format!(
                    "`command` must be an array of strings or a string, found {}",
                    self.found(value)
                );
                self.report(value.span(), message, Some(EXAMPLE.into()));
                None
            }
        }
    }

    /// `on_failure`: an argv array, checked like `command` in that form (a string is refused:
    /// the hook is a program, not a script line).
    fn on_failure(&mut self, value: &Value<'_>) -> Option<Vec<String>> {
        if !matches!(value.get_ref(), DeValue::Array(_)) {
            let message = format!(
                "`on_failure` must be an array of strings, found {}",
                self.found(value)
            );
            let help = "write an array like [\"/usr/local/bin/page-oncall\", \"--team\", \"db\"]";
            self.report(value.span(), message, Some(help.into()));
            return None;
        }
        let before = self.problems.len();
        let argv = match self.command(value) {
            Some(CommandLine::Argv(argv)) => Some(argv),
            _ => None,
        };
        // The checks are `command`'s; name the key the admin wrote.
        for problem in &mut self.problems[before..] {
            problem.message = problem.message.replace("`command`", "`on_failure`");
        }
        argv
    }

    fn retries(&mut self, value: &Value<'_>) -> Option<RetryPolicy> {
        let table = self.table("retries", value, "{ attempts = 2, backoff = \"30s\" }")?;
        let mut retries = RetryPolicy::default();
        for (key, item) in table.iter() {
            match key.get_ref().as_ref() {
                "attempts" => {
                    if let Some(n) = self.integer("retries.attempts", item, 0..=100) {
                        retries.attempts = n as u32;
                    }
                }
                "backoff" => {
                    retries.backoff = self
                        .duration("retries.backoff", item)
                        .unwrap_or(retries.backoff)
                }
                "max_backoff" => {
                    retries.max_backoff = self
                        .duration("retries.max_backoff", item)
                        .unwrap_or(retries.max_backoff)
                }
                _ => self.unknown_key(key, RETRY_KEYS, Some("retries")),
            }
        }
        if retries.max_backoff < retries.backoff {
            let message = format!(
                "`retries.max_backoff` ({}) is shorter than `retries.backoff` ({})",
                humantime::format_duration(retries.max_backoff),
                humantime::format_duration(retries.backoff)
            );
            self.report(
                value.span(),
                message,
                Some("raise `max_backoff` or lower `backoff`".into()),
            );
            return None;
        }
        Some(retries)
    }

    fn version_req(&mut self, value: &Value<'_>) -> Option<semver::VersionReq> {
        let s = self.string("version_req", value)?;
        match semver::VersionReq::parse(s) {
            Ok(req) => Some(req),
            Err(error) => {
                let message =
                    format!("`version_req` = {s:?} is not a version requirement: {error}");
                let help = "write a semver requirement like \">=2.1\" or \">=2.1, <3\"".to_string();
                self.report(self.content_span(value), message, Some(help));
                None
            }
        }
    }

    /// The user a task runs as (see [`TaskSpec::user`]), checking what this host and this
    /// process allow.
    fn effective_user(
        &mut self,
        user: Option<(&str, Range<usize>)>,
        defaults: &TaskDefaults,
    ) -> Option<String> {
        let identity = &defaults.identity;
        if !identity.is_root() {
            if let Some((name, span)) = user
                && name != identity.user_name
            {
                let message = format!(
                    "task runs as user {name:?} but zkcron runs as {:?} (not root) and cannot switch users",
                    identity.user_name
                );
                self.report(
                    span,
                    message,
                    Some("remove `user` or run zkcron as root".into()),
                );
            }
            // Running as the daemon's own user needs no switch.
            return None;
        }
        match user {
            Some((name, span)) => {
                if let Some(problem) = missing_account("user", name, user_exists(name)) {
                    self.report(span, problem.0, Some(problem.1));
                }
                Some(name.to_string())
            }
            None => {
                let name = defaults.user.as_ref()?;
                if let Some((message, help)) = missing_account("user", name, user_exists(name)) {
                    self.problems.push(Problem::whole_file(
                        format!("{message} (it is [scheduler].default_user)"),
                        Some(help),
                    ));
                }
                Some(name.clone())
            }
        }
    }

    fn group(
        &mut self,
        group: Option<(&str, Range<usize>)>,
        identity: &Identity,
    ) -> Option<String> {
        let (name, span) = group?;
        if !identity.is_root() {
            let message = format!(
                "task runs as group {name:?} but zkcron runs as {:?} (not root) and cannot switch groups",
                identity.user_name
            );
            self.report(
                span,
                message,
                Some("remove `group` or run zkcron as root".into()),
            );
            return None;
        }
        let exists = nix::unistd::Group::from_name(name).map(|g| g.is_some());
        if let Some((message, help)) = missing_account("group", name, exists) {
            self.report(span, message, Some(help));
        }
        Some(name.to_string())
    }
}

/// Linux refuses to start a program (E2BIG) when one of its arguments or environment strings,
/// with its terminating NUL, is longer than this: `MAX_ARG_STRLEN`, 32 pages of 4 KiB.
pub const MAX_ARG_BYTES: usize = 128 * 1024;

/// Linux refuses to start a program when its arguments and environment (the strings with their
/// NULs, and a pointer to each) take more than this: a quarter of the stack limit, which is
/// usually 8 MiB.
pub const MAX_EXEC_BYTES: usize = 2 * 1024 * 1024;

/// What the variables zkcron sets itself may take of [`MAX_EXEC_BYTES`] (`PATH`, `HOME` up to
/// `PATH_MAX`, `ZKCRON_*`, ...).
const ZKCRON_ENV_BYTES: usize = 8 * 1024;

/// Whether Linux would refuse a string of `len` bytes as an argument or environment string.
fn too_long_for_exec(len: usize) -> bool {
    len + 1 > MAX_ARG_BYTES
}

/// The message and help for a string of `len` bytes that a run would pass to the program
/// (`what`) and that is over [`MAX_ARG_BYTES`].
fn arg_too_long(what: &str, len: usize) -> (String, String) {
    (
        format!(
            "{what} is {len} bytes; Linux refuses to start a program with any single argument or \
             environment string over 128 KiB ({} bytes and its NUL), so every run would fail",
            MAX_ARG_BYTES - 1
        ),
        "put the script or data in a file, and run that file: command = [\"/usr/local/bin/job\"]"
            .into(),
    )
}

/// The bytes a run of `command` with `env` takes as the program's arguments and environment,
/// counted as Linux counts them, with room for the variables zkcron sets.
fn exec_size(command: &CommandLine, env: &BTreeMap<String, String>) -> usize {
    const POINTER: usize = std::mem::size_of::<usize>();
    let string = |len: usize| len + 1 + POINTER;
    let argv: usize = match command {
        CommandLine::Shell(script) => string("/bin/sh".len()) + string(2) + string(script.len()),
        CommandLine::Argv(argv) => argv.iter().map(|arg| string(arg.len())).sum(),
    };
    let env: usize = env
        .iter()
        .map(|(name, value)| string(name.len() + 1 + value.len()))
        .sum();
    argv + env + ZKCRON_ENV_BYTES
}

/// `[A-Za-z_][A-Za-z0-9_]*`: what shells accept as a variable name.
fn is_valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
