//! `zkcron schedule EXPR`: the next instants of an expression, or with `--dst` the ticks of the
//! next 12 months that a clock change moves, skips or doubles; and the note `validate` gives a
//! task that has such a tick.

use std::process::ExitCode;
use std::sync::Arc;

use chrono::{DateTime, NaiveDateTime, SecondsFormat, TimeDelta, Utc};
use chrono_tz::Tz;

use super::ScheduleArgs;
use crate::accounts::Identity;
use crate::clock::Clock;
use crate::schedule::{self, Calendar, DstChange, DstChoice, DstEffect, ExcludedRun, Schedule};
use crate::task::{self, TaskSpec};

/// How far ahead `--dst` and `validate` look for clock changes.
const DST_HORIZON: TimeDelta = TimeDelta::days(366);

pub(super) fn schedule(args: ScheduleArgs) -> anyhow::Result<ExitCode> {
    let timezone = schedule::parse_timezone(&args.tz)?;
    let choice = DstChoice::from_names(args.dst_gap.as_deref(), args.dst_repeat.as_deref());
    let schedule = Schedule::parse(&args.expression, timezone)?
        .with_dst(choice)
        .excluding(calendars(&args)?);
    let after = args.after.unwrap_or_else(|| Clock::system().now());
    if args.dst {
        let changes = schedule.dst_changes(after, after + DST_HORIZON);
        if changes.is_empty() {
            println!(
                "no tick of the next 12 months is moved, skipped or doubled by a clock change in {}",
                timezone.name()
            );
        }
        for change in &changes {
            println!("{}", dst_line(change, timezone, schedule.is_list()));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut printed = 0;
    let mut from = after;
    for tick in schedule.ticks_after(after).take(args.count) {
        for run in schedule.excluded_between(from, tick, EXCLUDED_LOOKED_AT) {
            println!("{}", excluded_line(&run, timezone));
        }
        from = tick;
        let local = tick.with_timezone(&timezone);
        println!(
            "{}  {}  {}",
            local.to_rfc3339(),
            local.format("%a"),
            tick.to_rfc3339_opts(SecondsFormat::Secs, true)
        );
        printed += 1;
    }
    if printed < args.count {
        eprintln!("zkcron: the schedule has no further instants");
    }
    Ok(ExitCode::SUCCESS)
}

/// How many ticks of a schedule are looked at for the ones its calendars remove, between two
/// ticks it fires.
const EXCLUDED_LOOKED_AT: usize = 100_000;

/// The calendars `--exclude` names, from `--calendars-dir` or the config's calendars dir.
fn calendars(args: &ScheduleArgs) -> anyhow::Result<Vec<Arc<Calendar>>> {
    if args.exclude.is_empty() {
        return Ok(Vec::new());
    }
    let dir = match &args.calendars_dir {
        Some(dir) => dir.clone(),
        None => {
            let (config, path) = super::resolve_config(&args.config)?;
            config.calendars_dir_or_default(&config.jobs_dir_or_default(path.as_deref()))
        }
    };
    let loaded = task::load_calendars_dir(&dir, &Identity::current(), &Default::default());
    for error in &loaded.errors {
        eprintln!("{error}\n");
    }
    args.exclude
        .iter()
        .map(|name| {
            loaded.calendars.get(name.as_str()).cloned().ok_or_else(|| {
                let known: Vec<&str> = loaded.calendars.keys().map(|n| &**n).collect();
                anyhow::anyhow!(
                    "no calendar {name:?} in {} (it has: {}); write calendars.d/{name}.toml or \
                     point --calendars-dir at the calendars",
                    dir.display(),
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                )
            })
        })
        .collect()
}

/// A run of ticks a calendar removes, as `schedule` and `next` show it.
pub(super) fn excluded_line(run: &ExcludedRun, timezone: Tz) -> String {
    let local = |t: DateTime<Utc>| t.with_timezone(&timezone).to_rfc3339();
    match run.count {
        1 => format!(
            "{}  excluded by calendar {}",
            local(run.first),
            run.calendar
        ),
        n => format!(
            "{} .. {}  {n} ticks excluded by calendar {}",
            local(run.first),
            local(run.last),
            run.calendar
        ),
    }
}

/// One tick a clock change touches: its local time and what happens to it (and, for a list,
/// the expression it comes from).
pub(super) fn dst_line(change: &DstChange, timezone: Tz, list: bool) -> String {
    let at = |t: DateTime<Utc>| {
        format!(
            "{} ({})",
            t.with_timezone(&timezone).to_rfc3339(),
            t.to_rfc3339_opts(SecondsFormat::Secs, true)
        )
    };
    let what = match change.effect {
        DstEffect::Moved { at: moved } => {
            format!("moved: the clock skips it; runs at {}", at(moved))
        }
        DstEffect::Skipped => "skipped: the clock skips it; it does not run".to_string(),
        DstEffect::Doubled { first, second } => format!(
            "doubled: the clock repeats it; runs at {} and at {}",
            at(first),
            at(second)
        ),
        DstEffect::Once { at: once, not } => format!(
            "once: the clock repeats it; runs at {}, not at {}",
            at(once),
            at(not)
        ),
    };
    let local = local_time(change.local);
    match list {
        true => format!("{local}  {what}  [{}]", change.expression),
        false => format!("{local}  {what}"),
    }
}

fn local_time(local: NaiveDateTime) -> String {
    local.format("%Y-%m-%d %H:%M:%S %a").to_string()
}

/// The note `validate` gives a task with a tick of the next 12 months that a clock change
/// touches: how many, the first, and how to see them all and to choose the rule.
pub(super) fn dst_note(spec: &TaskSpec, now: DateTime<Utc>) -> Option<String> {
    let changes = spec.schedule.dst_changes(now, now + DST_HORIZON);
    let first = changes.first()?;
    let zone = spec.schedule.timezone();
    let dst = spec.schedule.dst();
    let mut command = format!(
        "zkcron schedule '{}' --tz {} --dst",
        first.expression,
        zone.name()
    );
    if let Some(gap) = dst.gap {
        command.push_str(&format!(" --dst-gap {}", gap.as_str()));
    }
    if let Some(repeat) = dst.repeat {
        command.push_str(&format!(" --dst-repeat {}", repeat.as_str()));
    }
    Some(format!(
        "note: {}: task {}: a clock change in {} touches {} tick(s) of the next 12 months; the \
         first: {}\n  see them all with `{command}`; `dst_gap` and `dst_repeat` choose what \
         happens",
        spec.path.display(),
        spec.name,
        zone.name(),
        changes.len(),
        dst_line(first, zone, false)
    ))
}
