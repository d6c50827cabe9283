//! Schedules: the instants a task fires at, from its `schedule` and its active window.
//!
//! This module owns the meaning of a `schedule = ...` line. A [`Schedule`] is one expression or
//! the union of a list of them, each a cron expression read in the task's zone
//! (`cron`: croner 4 with cronie's aliases, day rules and DST rules) or an `@every` interval
//! counted from the Unix epoch (`every`), cut to the task's `active_from` / `active_until`
//! ([`Window`]). One code path answers for every shape: the union's next tick is the earliest of
//! its parts' (an instant two parts share is one tick), and the window clamps the answer.
//! `at` is a one-shot (`@at`, one instant); `calendar` the days and periods a task excludes
//! (`exclude`), which a schedule passes over whole.
//! It reads no clock: every function takes the instant to count from. `parsed` keeps croner's
//! parses of the expressions in use in a small bounded cache; `dst` lists the ticks a clock
//! change moves, skips or doubles (by the task's `dst_gap` / `dst_repeat`, else cronie's rule).

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;

mod at;
mod calendar;
mod cron;
mod dst;
mod every;
mod parsed;
#[cfg(test)]
mod shape_tests;
#[cfg(test)]
mod tests;

use at::At;
pub use calendar::{Calendar, Calendars, excluding};
use cron::CronExpr;
#[cfg(test)]
use cron::FIELDS;
pub use dst::{DstChange, DstEffect};
use every::Every;

/// Drops the cached parses of cron expressions; they are made again when needed. For after
/// a burst of loads and timer starts, when what the cache holds is not what comes due next.
pub fn forget_cached_parses() {
    parsed::forget_all();
}

/// A parsed schedule: one expression or a list of them, the time zone cron fields are read in,
/// and the window outside which nothing fires.
#[derive(Clone)]
pub struct Schedule {
    parts: Parts,
    /// The zone cron expressions are read in (intervals ignore it).
    timezone: Tz,
    /// The window, the DST choice and the calendars; boxed because most tasks have none.
    rare: Option<Box<Rare>>,
}

/// The parts of a schedule most tasks leave at their defaults.
#[derive(Clone, Default, PartialEq)]
struct Rare {
    /// `active_from` / `active_until`.
    window: Window,
    /// What the task file says of DST changes (`dst_gap`, `dst_repeat`); its cron parts apply it.
    dst: DstChoice,
    /// The calendars whose days and periods no tick falls in (`exclude`).
    exclude: Vec<Arc<Calendar>>,
}

/// What a task says of DST changes; a side it does not set follows cronie's rule for each
/// expression (a fixed-time job runs after a gap and once in a repeat, a wildcard job skips the
/// gap and runs in both passes of the repeat).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DstChoice {
    /// `dst_gap`: a local time that spring-forward skips.
    pub gap: Option<DstGap>,
    /// `dst_repeat`: a local time that fall-back repeats.
    pub repeat: Option<DstRepeat>,
}

/// What a local time skipped by spring-forward does (`dst_gap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DstGap {
    /// It runs at the first instant after the gap (cronie's rule for fixed-time jobs).
    RunAfter,
    /// It does not run (cronie's rule for wildcard jobs).
    Skip,
}

/// What a local time that fall-back repeats does (`dst_repeat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DstRepeat {
    /// It runs once, on its first pass (cronie's rule for fixed-time jobs).
    First,
    /// It runs on both passes (cronie's rule for wildcard jobs).
    Both,
}

impl DstChoice {
    /// The choice of a task whose `dst_gap` and `dst_repeat` are written as these names (as
    /// a task set or the command line carries them); a name this release does not know
    /// leaves cronie's rule on that side.
    pub fn from_names(gap: Option<&str>, repeat: Option<&str>) -> DstChoice {
        fn pick<T: Copy>(name: Option<&str>, choices: &[(&str, T)]) -> Option<T> {
            let name = name?;
            choices.iter().find(|(n, _)| *n == name).map(|(_, c)| *c)
        }
        DstChoice {
            gap: pick(gap, &DstGap::CHOICES),
            repeat: pick(repeat, &DstRepeat::CHOICES),
        }
    }
}

impl DstGap {
    /// The values of `dst_gap`, as written.
    pub const CHOICES: [(&'static str, DstGap); 2] =
        [("run_after", DstGap::RunAfter), ("skip", DstGap::Skip)];

    /// The value as written in a task file.
    pub fn as_str(self) -> &'static str {
        match self {
            DstGap::RunAfter => "run_after",
            DstGap::Skip => "skip",
        }
    }
}

impl DstRepeat {
    /// The values of `dst_repeat`, as written.
    pub const CHOICES: [(&'static str, DstRepeat); 2] =
        [("first", DstRepeat::First), ("both", DstRepeat::Both)];

    /// The value as written in a task file.
    pub fn as_str(self) -> &'static str {
        match self {
            DstRepeat::First => "first",
            DstRepeat::Both => "both",
        }
    }
}

/// Consecutive ticks of a schedule that one calendar removes ([`Schedule::excluded_between`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExcludedRun {
    pub first: DateTime<Utc>,
    pub last: DateTime<Utc>,
    pub count: u64,
    pub calendar: Arc<str>,
}

/// What the user wrote: one expression (a string) or a list.
#[derive(Clone)]
enum Parts {
    One(Part),
    /// Never empty.
    Union(Box<[Part]>),
    /// No `schedule` at all: a task that only runs after others (`after`) has no tick.
    Nothing,
}

/// One expression of a schedule.
#[derive(Clone)]
enum Part {
    Cron(CronExpr),
    Every(Every),
    /// `@at`: one tick.
    At(At),
}

impl Part {
    fn parse(expression: &str, timezone: Tz) -> Result<Part, ScheduleError> {
        let trimmed = expression.trim();
        if At::is_one_shot(trimmed) {
            return At::parse(trimmed).map(Part::At);
        }
        if Every::is_interval(trimmed) {
            let every = Every::parse(trimmed)?;
            // A period so long that its first tick is beyond chrono's range never fires.
            if every.next_after(reference_instant()).is_none() {
                return Err(ScheduleError::NeverFires {
                    expression: trimmed.to_string(),
                });
            }
            return Ok(Part::Every(every));
        }
        CronExpr::parse(expression, timezone).map(Part::Cron)
    }

    fn expression(&self) -> &str {
        match self {
            Part::Cron(cron) => cron.expression(),
            Part::Every(every) => every.expression(),
            Part::At(at) => at.expression(),
        }
    }

    fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Part::Cron(cron) => cron.next_after(after),
            Part::Every(every) => every.next_after(after),
            Part::At(at) => at.next_after(after),
        }
    }

    fn latest_at_or_before(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Part::Cron(cron) => cron.latest_at_or_before(at),
            Part::Every(every) => every.latest_at_or_before(at),
            Part::At(one) => one.latest_at_or_before(at),
        }
    }
}

/// Whether `expression` (trimmed) starts with `keyword` (`@every`, `@at`; any case) as a word
/// of its own.
fn has_keyword(expression: &str, keyword: &str) -> bool {
    expression
        .get(..keyword.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(keyword))
        && expression[keyword.len()..]
            .chars()
            .next()
            .is_none_or(char::is_whitespace)
}

/// An instant every schedule must have a tick after, or it never fires.
fn reference_instant() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).unwrap()
}

/// The stretch of time a task fires in: no tick before `from` nor after `until` (both
/// inclusive, either open).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    pub from: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
}

/// Where an instant stands against a task's [`Window`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowState {
    /// Before `active_from`: the task starts at this instant.
    Before(DateTime<Utc>),
    /// Inside the window (or there is none).
    Within,
    /// After `active_until`: the task ended at this instant and fires no more.
    Ended(DateTime<Utc>),
}

impl Window {
    /// Where `now` stands.
    pub fn state(&self, now: DateTime<Utc>) -> WindowState {
        match (self.from, self.until) {
            (Some(from), _) if now < from => WindowState::Before(from),
            (_, Some(until)) if now > until => WindowState::Ended(until),
            _ => WindowState::Within,
        }
    }

    fn is_open(&self) -> bool {
        self.from.is_none() && self.until.is_none()
    }
}

impl PartialEq for Part {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Part::Cron(a), Part::Cron(b)) => a == b,
            (Part::Every(a), Part::Every(b)) => a.expression() == b.expression(),
            (Part::At(a), Part::At(b)) => a.instant() == b.instant(),
            _ => false,
        }
    }
}

impl PartialEq for Parts {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Parts::One(a), Parts::One(b)) => a == b,
            (Parts::Union(a), Parts::Union(b)) => a == b,
            (Parts::Nothing, Parts::Nothing) => true,
            _ => false,
        }
    }
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.parts == other.parts && self.timezone == other.timezone && self.rare() == other.rare()
    }
}

impl Eq for Schedule {}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("Schedule");
        debug
            .field("expression", &self.expression())
            .field("timezone", &self.timezone.name());
        if let Some(rare) = &self.rare {
            if !rare.window.is_open() {
                debug.field("window", &rare.window);
            }
            if rare.dst != DstChoice::default() {
                debug.field("dst", &rare.dst);
            }
            if !rare.exclude.is_empty() {
                let names: Vec<&str> = rare.exclude.iter().map(|c| &*c.name).collect();
                debug.field("exclude", &names);
            }
        }
        debug.finish()
    }
}

/// Why an expression or a time zone was refused. The `Display` text is meant for the user: it
/// says what is wrong and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error(
        "the schedule is empty; write five fields like \"30 2 * * *\" or an alias like \"@daily\""
    )]
    Empty,
    #[error(
        "@reboot is not supported: zkcron runs each tick once in the whole cluster, and a cluster \
         has no single boot; use a systemd unit with WantedBy=multi-user.target for start-up work"
    )]
    Reboot,
    #[error(
        "unknown alias {alias:?}; allowed: @yearly, @annually, @monthly, @weekly, @daily, @midnight, \
         @hourly, or an interval like @every 15m"
    )]
    UnknownAlias { alias: String },
    #[error(
        "expected 5 fields (minute hour day-of-month month day-of-week) or 6 (with seconds first), \
         found {found} in {expression:?}"
    )]
    FieldCount { expression: String, found: usize },
    #[error("{field} field {value:?} is invalid; {allowed}")]
    Field {
        field: &'static str,
        value: String,
        allowed: &'static str,
    },
    #[error("invalid schedule {expression:?}: {detail}")]
    Other { expression: String, detail: String },
    #[error("the schedule {expression:?} never fires")]
    NeverFires { expression: String },
    #[error(
        "\"@every\" needs an interval, like \"@every 15m\", \"@every 1h30m\", or \"@every 1h/10m\" \
         (ticks 10 minutes past each hour)"
    )]
    EveryMissing,
    #[error(
        "invalid interval {value:?} in {expression:?}: {detail}; write a duration like \"15m\", \
         \"1h30m\" or \"90s\""
    )]
    EveryDuration {
        expression: String,
        value: String,
        detail: String,
    },
    #[error(
        "{value:?} in {expression:?} is not a whole number of seconds; ticks fall on whole \
         seconds, so write one like \"1s\" or \"90s\""
    )]
    EveryFraction { expression: String, value: String },
    #[error(
        "\"@at\" needs an RFC 3339 instant with its offset, like \
         \"@at 2026-12-31T23:00:00+01:00\" or \"@at 2026-12-31T22:00:00Z\""
    )]
    AtMissing,
    #[error(
        "{value:?} in {expression:?} is not an RFC 3339 instant ({detail}); write one with its \
         offset, like \"@at 2026-12-31T23:00:00+01:00\""
    )]
    AtInstant {
        expression: String,
        value: String,
        detail: String,
    },
    #[error(
        "the instant of {expression:?} has a fraction of a second; ticks fall on whole seconds, \
         so leave it out"
    )]
    AtFraction { expression: String },
    #[error("the interval of {expression:?} is zero; the shortest is \"@every 1s\"")]
    EveryTooShort { expression: String },
    #[error(
        "the offset {offset:?} of {expression:?} is not smaller than the interval; write an \
         offset below it, like \"@every 1h/10m\""
    )]
    EveryOffset { expression: String, offset: String },
    #[error(
        "the schedule list is empty; write at least one expression, like \
         [\"0 9 * * MON-FRI\"]"
    )]
    EmptyList,
    #[error("unknown time zone {name:?}{}; use an IANA name like \"Europe/Berlin\" or \"UTC\"", did_you_mean(.suggestion))]
    UnknownTimezone {
        name: String,
        suggestion: Option<String>,
    },
}

fn did_you_mean(suggestion: &Option<String>) -> String {
    match suggestion {
        Some(s) => format!(" (did you mean {s:?}?)"),
        None => String::new(),
    }
}

impl Schedule {
    /// Parses `expression` (a cron expression, an alias or `@every ...`) to be read in
    /// `timezone`.
    pub fn parse(expression: &str, timezone: Tz) -> Result<Schedule, ScheduleError> {
        Ok(Schedule {
            parts: Parts::One(Part::parse(expression, timezone)?),
            timezone,
            rare: None,
        })
    }

    /// The union of `schedules` (each parsed by [`Schedule::parse`], in one zone): a schedule
    /// written as a list. An empty list is refused.
    pub fn union(schedules: Vec<Schedule>) -> Result<Schedule, ScheduleError> {
        let timezone = schedules.first().ok_or(ScheduleError::EmptyList)?.timezone;
        let parts = schedules
            .into_iter()
            .flat_map(|schedule| match schedule.parts {
                Parts::One(part) => vec![part],
                Parts::Union(parts) => parts.into_vec(),
                Parts::Nothing => Vec::new(),
            })
            .collect();
        Ok(Schedule {
            parts: Parts::Union(parts),
            timezone,
            rare: None,
        })
    }

    /// No schedule: no tick ever (a task that only runs after others).
    pub fn nothing(timezone: Tz) -> Schedule {
        Schedule {
            parts: Parts::Nothing,
            timezone,
            rare: None,
        }
    }

    /// Whether the task has no schedule of its own ([`Schedule::nothing`]).
    pub fn is_nothing(&self) -> bool {
        matches!(self.parts, Parts::Nothing)
    }

    /// The same schedule with no tick outside `window`.
    pub fn within(self, window: Window) -> Schedule {
        self.with_rare(|rare| rare.window = window)
    }

    /// The rare parts, at their defaults when the schedule has none.
    fn rare(&self) -> Rare {
        self.rare.as_deref().cloned().unwrap_or_default()
    }

    /// The same schedule with `change` made to its rare parts (boxed only when not default).
    fn with_rare(mut self, change: impl FnOnce(&mut Rare)) -> Schedule {
        let mut rare = self.rare.take().map(|r| *r).unwrap_or_default();
        change(&mut rare);
        self.rare = (rare != Rare::default()).then(|| Box::new(rare));
        self
    }

    /// The same schedule meeting DST changes as `choice` says: each cron expression applies it
    /// (cronie's rule for what it leaves unset); intervals have no local time to change.
    pub fn with_dst(mut self, choice: DstChoice) -> Schedule {
        let with = |part: Part| match part {
            Part::Cron(cron) => Part::Cron(cron.with_dst(choice)),
            other => other,
        };
        self.parts = match self.parts {
            Parts::One(part) => Parts::One(with(part)),
            Parts::Union(parts) => Parts::Union(parts.into_vec().into_iter().map(with).collect()),
            Parts::Nothing => Parts::Nothing,
        };
        self.with_rare(|rare| rare.dst = choice)
    }

    /// The same schedule with no tick in a day or period of `calendars` (`exclude`).
    pub fn excluding(self, calendars: Vec<Arc<Calendar>>) -> Schedule {
        self.with_rare(|rare| rare.exclude = calendars)
    }

    /// The calendars no tick falls in (`exclude`), in the task's order.
    pub fn exclusions(&self) -> &[Arc<Calendar>] {
        self.rare.as_deref().map_or(&[], |rare| &rare.exclude)
    }

    /// The same schedule without its calendars: the ticks they remove are among its own.
    pub fn without_exclusions(&self) -> Schedule {
        self.clone().with_rare(|rare| rare.exclude = Vec::new())
    }

    /// The runs of ticks the calendars remove after `after` and before `before` (at most
    /// `limit` ticks looked at): each run's first and last tick, count, and calendar.
    pub fn excluded_between(
        &self,
        after: DateTime<Utc>,
        before: DateTime<Utc>,
        limit: usize,
    ) -> Vec<ExcludedRun> {
        let all = self.without_exclusions();
        let mut runs: Vec<ExcludedRun> = Vec::new();
        // The tick before this one was the last of the run being built: this one extends it.
        let mut extends = false;
        for tick in all
            .ticks_after(after)
            .take_while(|t| *t < before)
            .take(limit)
        {
            let Some(calendar) = excluding(self.exclusions(), tick) else {
                extends = false;
                continue;
            };
            let follows = std::mem::replace(&mut extends, true);
            match runs.last_mut() {
                Some(run) if run.calendar == calendar.name && follows => {
                    run.last = tick;
                    run.count += 1;
                }
                _ => runs.push(ExcludedRun {
                    first: tick,
                    last: tick,
                    count: 1,
                    calendar: calendar.name.clone(),
                }),
            }
        }
        runs
    }

    /// The stretch `[from, until)` some calendar of the schedule excludes around `at`, if any.
    fn excluded_at(&self, at: DateTime<Utc>) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        self.exclusions().iter().find_map(|c| c.excluded_at(at))
    }

    /// What the task says of DST changes (nothing: cronie's rule).
    pub fn dst(&self) -> DstChoice {
        self.rare
            .as_deref()
            .map_or_else(DstChoice::default, |rare| rare.dst)
    }

    /// The window the schedule fires in (open on both sides when none was given).
    pub fn window(&self) -> Window {
        self.rare
            .as_deref()
            .map_or_else(Window::default, |rare| rare.window)
    }

    /// The expression as written; a list is shown as a TOML array of its expressions.
    pub fn expression(&self) -> Cow<'_, str> {
        match &self.parts {
            Parts::One(part) => Cow::Borrowed(part.expression()),
            Parts::Union(parts) => {
                let quoted: Vec<String> = parts
                    .iter()
                    .map(|part| format!("{:?}", part.expression()))
                    .collect();
                Cow::Owned(format!("[{}]", quoted.join(", ")))
            }
            Parts::Nothing => Cow::Borrowed(""),
        }
    }

    /// The expressions as written: one, or each of a list.
    pub fn expressions(&self) -> Vec<&str> {
        self.parts().iter().map(Part::expression).collect()
    }

    /// Whether the schedule was written as a list (no schedule reads as an empty one).
    pub fn is_list(&self) -> bool {
        matches!(self.parts, Parts::Union(_) | Parts::Nothing)
    }

    /// The instant of a one-shot: a schedule of `@at` expressions alone has its earliest; a
    /// task that never claimed a tick of it has missed it once it passed (`plan`).
    pub fn one_shot(&self) -> Option<DateTime<Utc>> {
        let parts = self.parts();
        let instants: Option<Vec<DateTime<Utc>>> = parts
            .iter()
            .map(|part| match part {
                Part::At(at) => Some(at.instant()),
                _ => None,
            })
            .collect();
        instants?.into_iter().min()
    }

    /// Whether any expression reads the time zone (a cron expression does, an interval not).
    pub fn uses_timezone(&self) -> bool {
        self.parts()
            .iter()
            .any(|part| matches!(part, Part::Cron(_)))
    }

    /// The zone cron expressions are read in.
    pub fn timezone(&self) -> Tz {
        self.timezone
    }

    fn parts(&self) -> &[Part] {
        match &self.parts {
            Parts::One(part) => std::slice::from_ref(part),
            Parts::Union(parts) => parts,
            Parts::Nothing => &[],
        }
    }

    /// The fields of the only cron expression, as croner reads them.
    #[cfg(test)]
    fn expanded(&self) -> &str {
        match self.parts() {
            [Part::Cron(cron)] => cron.expanded(),
            _ => panic!("not a single cron expression"),
        }
    }

    /// The first tick strictly after `after` (inside the window, outside the calendars), or
    /// `None` when there is none (within croner's search horizon). An excluded tick is passed
    /// over with the whole day or period it falls in.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut cursor = after;
        loop {
            let next = self.next_in_window(cursor)?;
            match self.excluded_at(next) {
                None => return Some(next),
                // The stretch holds `next`: the walk moves forward.
                Some((_, until)) => {
                    cursor = until
                        .checked_sub_signed(TimeDelta::nanoseconds(1))?
                        .max(next)
                }
            }
        }
    }

    /// The last tick at or before `at` (inside the window, outside the calendars), or `None`.
    pub fn latest_at_or_before(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut cursor = at;
        loop {
            let latest = self.latest_in_window(cursor)?;
            match self.excluded_at(latest) {
                None => return Some(latest),
                Some((from, _)) => {
                    let before = latest.checked_sub_signed(TimeDelta::nanoseconds(1))?;
                    cursor = from
                        .checked_sub_signed(TimeDelta::nanoseconds(1))?
                        .min(before)
                }
            }
        }
    }

    /// [`Schedule::next_after`] before the calendars.
    fn next_in_window(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let window = self.window();
        // Ticks at or after `from`: those after the instant just before it.
        let after = match window.from {
            Some(from) if after < from => from.checked_sub_signed(TimeDelta::nanoseconds(1))?,
            _ => after,
        };
        let next = self
            .parts()
            .iter()
            .filter_map(|part| part.next_after(after))
            .min()?;
        window
            .until
            .is_none_or(|until| next <= until)
            .then_some(next)
    }

    /// [`Schedule::latest_at_or_before`] before the calendars.
    fn latest_in_window(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let window = self.window();
        let at = window.until.map_or(at, |until| at.min(until));
        let latest = self
            .parts()
            .iter()
            .filter_map(|part| part.latest_at_or_before(at))
            .max()?;
        window
            .from
            .is_none_or(|from| latest >= from)
            .then_some(latest)
    }

    /// Ticks strictly after `after`, in increasing order, without end (but the window's).
    pub fn ticks_after(&self, after: DateTime<Utc>) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        let mut cursor = after;
        std::iter::from_fn(move || {
            let next = self.next_after(cursor)?;
            cursor = next;
            Some(next)
        })
    }
}

/// Looks up an IANA time-zone name, suggesting the closest known name when it is not one.
pub fn parse_timezone(name: &str) -> Result<Tz, ScheduleError> {
    if let Ok(tz) = name.parse::<Tz>() {
        return Ok(tz);
    }
    // Case-insensitive match first: "europe/berlin" is clearly meant as "Europe/Berlin".
    let lower = name.to_ascii_lowercase();
    let mut best: Option<(f64, &str)> = None;
    for candidate in chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name()) {
        if candidate.to_ascii_lowercase() == lower {
            best = Some((2.0, candidate));
            break;
        }
        let score = strsim::jaro_winkler(&lower, &candidate.to_ascii_lowercase());
        if score > 0.85 && best.is_none_or(|(b, _)| score > b) {
            best = Some((score, candidate));
        }
    }
    Err(ScheduleError::UnknownTimezone {
        name: name.to_string(),
        suggestion: best.map(|(_, s)| s.to_string()),
    })
}
