//! `zkcron next [TASK]`: each task's next fire from this host's task files, why this node
//! never runs one, what holds one (a fire record ahead of the clock), and the ticks its
//! calendars remove before it.

use chrono::{DateTime, Utc};

use super::*;

pub(super) fn next(args: NextArgs) -> anyhow::Result<ExitCode> {
    let dirs = match args.dirs.resolve() {
        Ok(dirs) => dirs,
        Err(error) => return Ok(refuse_config(&error, "cannot list the tasks")),
    };
    let defaults = dirs.task_defaults();
    let ResolvedDirs {
        config,
        jobs_dir,
        state_dir,
        reset_flags: flags,
        ..
    } = dirs;
    let mut loaded = match task::load_jobs_dir(&jobs_dir, &defaults) {
        Ok(loaded) => loaded,
        Err(problems) => return Ok(refuse(&problems, "cannot list the tasks")),
    };
    if let Some(name) = &args.task {
        loaded.tasks.retain(|spec| *spec.name == **name);
        loaded
            .errors
            .retain(|error| error.task.as_ref() == Some(name));
        if loaded.tasks.is_empty() && loaded.errors.is_empty() {
            eprintln!("zkcron: no task {name} in {}", jobs_dir.display());
            return Ok(ExitCode::from(1));
        }
    }
    let now = Clock::system().now();
    // The local backend's fire records show which tasks a record ahead of the clock holds.
    let (records, records_error) = match config.coordination.backend {
        Backend::Zookeeper => (Default::default(), None),
        Backend::Local => match local::read_fire_records(&state_dir) {
            Ok(records) => (records, None),
            Err(error) => (Default::default(), Some(error)),
        },
    };
    let width = loaded
        .tasks
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let table = NextTable {
        now,
        config: &config,
        release: config.node.version.clone().unwrap_or_else(|| {
            semver::Version::parse(env!("CARGO_PKG_VERSION")).expect("crate version")
        }),
        records,
        reset_flags: &flags,
        width,
    };
    println!("{:width$}  {:25}  {:>12}  SCHEDULE", "TASK", "NEXT", "IN");
    for spec in &loaded.tasks {
        table.print_row(spec);
    }
    for error in &loaded.errors {
        eprintln!("{error}\n");
    }
    if let Some(error) = &records_error {
        eprintln!(
            "zkcron: error: cannot read the fire records in {}, so tasks held by a record ahead \
             of the clock are not shown: {error}",
            state_dir.display()
        );
    }
    Ok(if loaded.errors.is_empty() && records_error.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// What `zkcron next` prints each task's row with.
struct NextTable<'a> {
    now: DateTime<Utc>,
    config: &'a Config,
    /// This node's release, for `version_req`.
    release: semver::Version,
    /// The local backend's fire records (none for a cluster).
    records: std::collections::HashMap<String, DateTime<Utc>>,
    /// The flags `zkcron reset` needs to find this state dir.
    reset_flags: &'a str,
    /// The width of the task column.
    width: usize,
}

impl NextTable<'_> {
    /// Prints `spec`'s next fire, and below it why this node never runs it or what holds it.
    fn print_row(&self, spec: &task::TaskSpec) {
        let (now, width) = (self.now, self.width);
        let timezone = spec.schedule.timezone();
        // A held task fires next after its record, as the daemon's planner says.
        let held =
            plan::holding_record(self.records.get(&*spec.name).copied(), now).map(|record| {
                match TickPlanner::start(PlanRules::from_spec(spec), Some(record), now).poll(now) {
                    Step::Held { record, until } => (record, Some(until)),
                    _ => (record, None),
                }
            });
        let next_tick = match held {
            Some((_, until)) => until,
            None => spec.schedule.next_after(now),
        };
        let not_eligible = self.ineligibility(spec);
        let (next, within) = match next_tick {
            _ if !spec.enabled => ("disabled".to_string(), "-".to_string()),
            _ if not_eligible.is_some() => ("not eligible here".to_string(), "-".to_string()),
            Some(tick) => {
                let wait = (tick - now).to_std().unwrap_or_default();
                let wait = std::time::Duration::from_secs(
                    wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
                );
                (
                    tick.with_timezone(&timezone).to_rfc3339(),
                    humantime::format_duration(wait).to_string(),
                )
            }
            None => ("never".to_string(), "-".to_string()),
        };
        println!(
            "{:width$}  {:25}  {:>12}  {} ({})",
            spec.name,
            next,
            within,
            spec.schedule.expression(),
            timezone.name()
        );
        match spec.schedule.window().state(now) {
            WindowState::Before(from) => println!(
                "{:width$}  starts at {} (active_from): no tick before",
                "",
                instant(from)
            ),
            WindowState::Ended(until) => println!(
                "{:width$}  ended at {} (active_until): it fires no more",
                "",
                instant(until)
            ),
            WindowState::Within => {}
        }
        if let Some(tick) = next_tick.filter(|_| spec.enabled) {
            for run in spec.schedule.excluded_between(now, tick, 100_000) {
                println!(
                    "{:width$}  {}",
                    "",
                    schedule_cmd::excluded_line(&run, timezone)
                );
            }
        }
        if let (Some(why), true) = (&not_eligible, spec.enabled) {
            println!(
                "{:width$}  not eligible: this node never runs it: {why}",
                ""
            );
        }
        if let (Some((record, Some(until))), true) = (held, spec.enabled) {
            let fix = plan::held_fix(&spec.name, Some(self.reset_flags));
            println!(
                "{:width$}  held: {}",
                "",
                plan::held_report(&spec.name, record, until, now, &fix)
            );
        }
    }

    /// Why this node never runs `spec`: in a cluster a task whose `version_req` or
    /// `require_labels` this node does not meet never fires here (the local backend runs every
    /// task).
    fn ineligibility(&self, spec: &task::TaskSpec) -> Option<String> {
        match self.config.coordination.backend {
            Backend::Zookeeper => spec.ineligibility(&self.release, &self.config.node.labels),
            Backend::Local => None,
        }
    }
}
