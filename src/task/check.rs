//! Checking a task file's keys into a [`TaskSpec`]: the schedule and its zone, the command and
//! what Linux lets it pass to `execve`, the environment, retries, `version_req`, and the user and
//! group it runs as.

use std::ops::Range;

use super::checker::Value;
use super::run_on::RunOnKeys;
use super::when::WhenKeys;
use super::*;
use crate::diag::string_value_span;
use crate::schedule::{ScheduleError, parse_timezone};
use toml::Spanned;
use toml::de::{DeString, DeTable, DeValue};

/// Checks every key of a task file; `None` when anything is wrong (the problems are in
/// `checker`).
pub(super) fn check_task(
    checker: &mut Checker<'_>,
    name: &str,
    path: &Path,
    defaults: &TaskDefaults,
) -> Option<TaskSpec> {
    let root = match DeTable::parse(checker.text) {
        Ok(root) => root,
        Err(error) => {
            checker.syntax_error(&error);
            return None;
        }
    };
    let c = checker;
    let mut keys = TaskKeys::read(c, root.get_ref(), defaults);

    // After every key is read: the schedule is read in the task's zone, whichever key came
    // first, and the command is measured with the environment.
    let chained = match keys.after {
        Some(value) => {
            keys.extras.after = c.after(name, value);
            Chained::Yes
        }
        None => Chained::No,
    };
    let schedule = c
        .schedule(keys.schedule, keys.timezone, &keys.when, chained)
        .map(|schedule| schedule.excluding(c.exclusions(&keys.when, &defaults.calendars)));
    keys.extras.run_on = c.run_on(std::mem::take(&mut keys.run_on));
    let command = c.task_command(keys.command, &keys.extras.env, &keys.extras.run_on);
    let user = c.effective_user(keys.user, defaults);
    keys.extras.group = c.group(keys.group, &defaults.identity);

    if !c.problems.is_empty() {
        return None;
    }
    Some(
        TaskSpec {
            name: name.into(),
            path: path.to_path_buf(),
            schedule: schedule?,
            command: command?,
            user,
            overlap: keys.overlap,
            catch_up: keys.catch_up,
            jitter: keys.jitter,
            kill_on_session_loss: keys.kill_on_session_loss,
            on_node_loss: keys.on_node_loss,
            enabled: keys.enabled,
            extras: keys.extras.into(),
            digest: KeptDigest::default(),
        }
        .with_digest(),
    )
}

/// Whether a task has `after`: then it needs no `schedule`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chained {
    Yes,
    No,
}

/// A task file's keys as each is read on its own; what needs several keys (the schedule and its
/// zone, the command and its environment, the user and group and who zkcron runs as) is
/// checked once all are read.
struct TaskKeys<'v> {
    schedule: Option<&'v Value<'v>>,
    timezone: Tz,
    /// `active_from`, `active_until` and where `timezone` is (`when`).
    when: WhenKeys<'v>,
    command: Option<&'v Value<'v>>,
    user: Option<(&'v str, Range<usize>)>,
    group: Option<(&'v str, Range<usize>)>,
    overlap: OverlapPolicy,
    catch_up: CatchUpPolicy,
    jitter: Duration,
    kill_on_session_loss: bool,
    on_node_loss: NodeLossPolicy,
    enabled: bool,
    /// `run_on` and `work_items`, checked together once both are read.
    run_on: RunOnKeys,
    /// `after`, read with the task's name.
    after: Option<&'v Value<'v>>,
    /// Every extra but `group` (checked with `user`) and `run_on`.
    extras: TaskExtras,
}

impl<'v> TaskKeys<'v> {
    /// Reads each key of `root` (reporting unknown keys and values of the wrong kind); a key
    /// not given keeps its default.
    fn read(c: &mut Checker<'_>, root: &'v DeTable<'v>, defaults: &TaskDefaults) -> TaskKeys<'v> {
        let mut keys = TaskKeys {
            schedule: None,
            timezone: defaults.timezone,
            when: WhenKeys::default(),
            command: None,
            user: None,
            group: None,
            overlap: OverlapPolicy::default(),
            catch_up: CatchUpPolicy::default(),
            jitter: Duration::ZERO,
            kill_on_session_loss: false,
            on_node_loss: NodeLossPolicy::default(),
            enabled: true,
            run_on: RunOnKeys::default(),
            after: None,
            extras: TaskExtras::default(),
        };
        for (key, value) in root.iter() {
            if !keys.read_spec_key(c, key.get_ref(), value) && !keys.when.read(key.get_ref(), value)
            {
                keys.read_extra_key(c, key, value);
            }
        }
        keys
    }

    /// Reads `k` if it is one of the settings of [`TaskSpec`] itself; `false` if it is not.
    fn read_spec_key(&mut self, c: &mut Checker<'_>, k: &str, value: &'v Value<'v>) -> bool {
        match k {
            "schedule" => self.schedule = Some(value),
            "timezone" => {
                self.when.timezone = Some(value.span());
                if let Some(zone) = c.string(k, value) {
                    match parse_timezone(zone) {
                        Ok(tz) => self.timezone = tz,
                        Err(error) => c.report(c.content_span(value), error.to_string(), None),
                    }
                }
            }
            "command" => self.command = Some(value),
            "user" => self.user = c.non_empty_string(k, value).map(|s| (s, value.span())),
            "overlap" => {
                let choices = [
                    ("skip", OverlapPolicy::Skip),
                    ("allow", OverlapPolicy::Allow),
                    ("replace", OverlapPolicy::Replace),
                    ("queue", OverlapPolicy::Queue),
                ];
                self.overlap = c.choice(k, value, &choices).unwrap_or(self.overlap);
            }
            "catch_up" => {
                let choices = [
                    ("skip", CatchUpPolicy::Skip),
                    ("once", CatchUpPolicy::Once),
                    ("all", CatchUpPolicy::All),
                ];
                self.catch_up = c.choice(k, value, &choices).unwrap_or(self.catch_up);
            }
            "jitter" => self.jitter = c.duration(k, value).unwrap_or(self.jitter),
            "kill_on_session_loss" => {
                self.kill_on_session_loss = c.boolean(k, value).unwrap_or(self.kill_on_session_loss)
            }
            "on_node_loss" => {
                let choices = [
                    ("skip", NodeLossPolicy::Skip),
                    ("rerun", NodeLossPolicy::Rerun),
                ];
                self.on_node_loss = c.choice(k, value, &choices).unwrap_or(self.on_node_loss);
            }
            "enabled" => self.enabled = c.boolean(k, value).unwrap_or(self.enabled),
            "after" => self.after = Some(value),
            _ => return false,
        }
        true
    }

    /// Reads `key` as one of the [`TaskExtras`], or reports it as unknown.
    fn read_extra_key(
        &mut self,
        c: &mut Checker<'_>,
        key: &Spanned<DeString<'_>>,
        value: &'v Value<'v>,
    ) {
        let extras = &mut self.extras;
        let k: &str = key.get_ref();
        match k {
            "description" => extras.description = c.string(k, value).map(str::to_string),
            "group" => self.group = c.non_empty_string(k, value).map(|s| (s, value.span())),
            "working_dir" => extras.working_dir = c.absolute_path(k, value),
            "env" => extras.env = c.env(value),
            "timeout" => {
                extras.timeout = c.positive_duration(
                    k,
                    value,
                    "remove `timeout` to let runs take as long as they need",
                )
            }
            "kill_grace" => extras.kill_grace = c.duration(k, value).unwrap_or(extras.kill_grace),
            "starting_deadline" => {
                extras.starting_deadline = c.positive_duration(
                    k,
                    value,
                    "remove `starting_deadline` to run missed ticks however late they are",
                )
            }
            "retries" => extras.retries = c.retries(value).unwrap_or(extras.retries),
            "version_req" => extras.version_req = c.version_req(value),
            "require_labels" => {
                extras.require_labels = c
                    .string_map(k, value, "{ zone = \"eu\" }")
                    .into_iter()
                    .map(|(name, value)| (name.into_inner(), value))
                    .collect()
            }
            "on_failure" => extras.on_failure = c.on_failure(value),
            "run_on" => self.run_on.run_on = c.run_on_key(value).map(|run_on| (run_on, key.span())),
            "work_items" => {
                self.run_on.work_items = c.work_items(value).map(|items| (items, key.span()))
            }
            "pause_on_failure" => {
                extras.pause_on_failure = c.boolean(k, value).unwrap_or(extras.pause_on_failure)
            }
            "max_runs" => {
                extras.max_runs = c
                    .integer(k, value, 1..=i64::from(u32::MAX))
                    .map(|n| n as u32)
            }
            _ => c.unknown_key(key, TASK_KEYS, None),
        }
    }
}

impl Checker<'_> {
    /// The `schedule` (`value`, `None` when the key is missing: a string or a list) read in
    /// `timezone`, in the window of `when`.
    fn schedule(
        &mut self,
        value: Option<&Value<'_>>,
        timezone: Tz,
        when: &WhenKeys<'_>,
        chained: Chained,
    ) -> Option<Schedule> {
        let window = self.window(when);
        let Some(value) = value else {
            if chained == Chained::Yes {
                // It runs only after the tasks `after` names.
                return Some(Schedule::nothing(timezone).within(window));
            }
            self.problems.push(Problem::whole_file(
                "missing `schedule`: every task needs one (or an `after` list of tasks to run after)".into(),
                Some("add a line like `schedule = \"30 2 * * *\"`".into()),
            ));
            return None;
        };
        let schedule = match value.get_ref() {
            DeValue::Array(items) => self.schedule_list(value, items, timezone)?,
            DeValue::String(expression) => self.schedule_expression(value, expression, timezone)?,
            _ => {
                let message = format!(
                    "`schedule` must be a string or an array of strings, found {}",
                    self.found(value)
                );
                let help = "write `schedule = \"30 2 * * *\"`, `schedule = \"@every 15m\"` or \
                            `schedule = [\"0 9 * * MON-FRI\", \"0 12 * * SAT\"]`";
                self.report(value.span(), message, Some(help.into()));
                return None;
            }
        };
        self.timezone_use(&schedule, when);
        let dst = self.dst_choice(&schedule, when);
        Some(schedule.within(window).with_dst(dst))
    }

    /// One schedule expression, the string `value` holds, read in `timezone`.
    pub(super) fn schedule_expression(
        &mut self,
        value: &Value<'_>,
        expression: &str,
        timezone: Tz,
    ) -> Option<Schedule> {
        Schedule::parse(expression, timezone)
            .map_err(|error| {
                let span = schedule_error_span(self.text, value.span(), expression, &error);
                self.report(span, error.to_string(), None);
            })
            .ok()
    }

    /// The `command` (`value`, `None` when the key is missing), which must fit with `env` (and
    /// the work items `run_on` passes) in what Linux lets a program be started with.
    fn task_command(
        &mut self,
        value: Option<&Value<'_>>,
        env: &BTreeMap<String, String>,
        run_on: &RunOn,
    ) -> Option<CommandLine> {
        let Some(value) = value else {
            self.problems.push(Problem::whole_file(
                "missing `command`: every task needs one".into(),
                Some("add a line like `command = [\"/usr/local/bin/backup\", \"--full\"]`".into()),
            ));
            return None;
        };
        let command = self.command(value)?;
        let size = exec_size(&command, env) + run_on.env_bytes();
        if size > MAX_EXEC_BYTES {
            self.report(
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
        Some(command)
    }
}

/// The forms of `command`, for the help of a `command` that is refused.
const COMMAND_EXAMPLE: &str =
    "write an array like [\"/usr/local/bin/backup\", \"--full\"], or a string for /bin/sh -c";

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

    /// `command`: a string for `/bin/sh -c`, or an argv array.
    fn command(&mut self, value: &Value<'_>) -> Option<CommandLine> {
        match value.get_ref() {
            DeValue::String(s) => self.shell_command(value, s),
            DeValue::Array(items) => self.argv_command(value, items),
            _ => {
                let message = format!(
                    "`command` must be an array of strings or a string, found {}",
                    self.found(value)
                );
                self.report(value.span(), message, Some(COMMAND_EXAMPLE.into()));
                None
            }
        }
    }

    /// `command` as the string `s`, run by `/bin/sh -c`.
    fn shell_command(&mut self, value: &Value<'_>, s: &str) -> Option<CommandLine> {
        if s.trim().is_empty() {
            self.report(
                value.span(),
                "`command` is empty".into(),
                Some(COMMAND_EXAMPLE.into()),
            );
            return None;
        }
        if s.contains('\0') {
            self.report(
                value.span(),
                "`command` contains a NUL character".into(),
                None,
            );
            return None;
        }
        if too_long_for_exec(s.len()) {
            let (message, help) = arg_too_long("`command`", s.len());
            self.report(value.span(), message, Some(help));
            return None;
        }
        Some(CommandLine::Shell(s.to_string()))
    }

    /// `command` as the argv array `items`: every element is checked, and the program must not
    /// be empty.
    fn argv_command(&mut self, value: &Value<'_>, items: &[Value<'_>]) -> Option<CommandLine> {
        if items.is_empty() {
            self.report(
                value.span(),
                "`command` is an empty array".into(),
                Some(COMMAND_EXAMPLE.into()),
            );
            return None;
        }
        let mut argv = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            if let Some(arg) = self.argv_element(index, item) {
                argv.push(arg);
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
                Some(COMMAND_EXAMPLE.into()),
            );
            return None;
        }
        (argv.len() == items.len()).then_some(CommandLine::Argv(argv))
    }

    /// Element `index` (from 0) of an argv `command`, if it is a string `execve` takes.
    fn argv_element(&mut self, index: usize, item: &Value<'_>) -> Option<String> {
        match item.get_ref().as_str() {
            Some(s) if s.contains('\0') => {
                self.report(
                    item.span(),
                    "`command` contains a NUL character".into(),
                    None,
                );
                None
            }
            Some(s) if too_long_for_exec(s.len()) => {
                let what = format!("element {} of `command`", index + 1);
                let (message, help) = arg_too_long(&what, s.len());
                self.report(item.span(), message, Some(help));
                None
            }
            Some(s) => Some(s.to_string()),
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
