//! The per-task tick planner: which ticks to fire, and when to wake next.
//!
//! This is the scheduling core. It is a plain state machine: the shell tells it the current
//! instant and the last tick anyone claimed, and it answers with ticks to fire or the instant to
//! sleep until. It reads no clock, does no I/O and holds no timers, so every rule here (catch-up,
//! starting deadline, jitter, clock jumps) is tested on injected time.
//!
//! A tick is *on time* when the planner was already running when it came due and it is at most
//! [`ON_TIME_TOLERANCE`] late: it fires (a slow timer is not a missed tick) unless it is older than
//! `starting_deadline`. Every other due tick is *missed*: it came and went while the task had no
//! running timer (daemon down, task not led by this node) or while the node could not fire
//! (process stopped, machine suspended, clock jumped far) and is handled by `catch_up`.

use chrono::{DateTime, TimeDelta, Utc};
use xxhash_rust::xxh3::xxh3_64;

use crate::schedule::Schedule;
use crate::task::{CatchUpPolicy, OverlapPolicy, TaskSpec};

/// The most missed ticks `catch_up = "all"` runs at once; older ones are dropped with a warning,
/// as Kubernetes CronJobs give up past 100 missed schedules.
pub const MAX_CATCH_UP: usize = 100;

/// A running loop fires every tick that came due within this long, however many: the node was
/// firing, only slowly (a loaded machine, a short clock step). Older due ticks were missed.
pub const ON_TIME_TOLERANCE: TimeDelta = TimeDelta::seconds(60);

/// A fire record at most this far ahead of the clock is waited out quietly: a clock stepped back
/// a little (an NTP step) holds the task for as long, and the clock watcher logs the step.
/// Further ahead the task is reported as held ([`Step::Held`]): the record was claimed by a clock
/// that ran ahead, or the clock was set back, and the task fires no tick up to it.
pub const FUTURE_RECORD_TOLERANCE: TimeDelta = TimeDelta::seconds(60);

/// The fire record `record` if it holds its task at `now`: it is ahead of `now` by more than
/// [`FUTURE_RECORD_TOLERANCE`].
pub fn holding_record(record: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    record.filter(|record| *record - now > FUTURE_RECORD_TOLERANCE)
}

/// What the shell says about a task held by a fire record ahead of the clock (the daemon's log,
/// `zkcron next`): which record, how far ahead, when the task fires by itself, and `fix`.
pub fn held_report(
    task: &str,
    record: DateTime<Utc>,
    until: DateTime<Utc>,
    now: DateTime<Utc>,
    fix: &str,
) -> String {
    let ahead = (record - now).to_std().unwrap_or_default();
    let ahead = humantime::format_duration(std::time::Duration::from_secs(ahead.as_secs()));
    let instant = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
    format!(
        "task {task} is held by its fire record {record}, {ahead} ahead of the clock: every tick \
         up to it counts as done (it was claimed while the clock was ahead, or the clock was set \
         back since), so the task fires next at {until}. {fix}",
        record = instant(record),
        until = instant(until),
    )
}

/// How the operator clears a holding fire record: `zkcron reset TASK` with `reset_flags` pointing
/// at the node's state dir, or, with `None` (the ZooKeeper backend), that there is no way yet.
pub fn held_fix(task: &str, reset_flags: Option<&str>) -> String {
    match reset_flags {
        Some(flags) => format!(
            "To fire it from now on: stop zkcron, run `zkcron reset {task}{flags}` (moves the \
             record back to now; no past tick runs again), start zkcron."
        ),
        None => "Moving a fire record back in a ZooKeeper cluster is not supported yet; the task \
                 fires again when the clock passes the record."
            .to_string(),
    }
}

/// A tick to fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tick {
    /// The scheduled instant: the tick's identity, and `ZKCRON_SCHEDULED_AT`.
    pub instant: DateTime<Utc>,
    /// When the spawn is meant to happen: `instant` plus the tick's jitter.
    pub due_at: DateTime<Utc>,
    /// True when the tick was missed and is run by `catch_up`.
    pub catch_up: bool,
}

/// What the planner wants the shell to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Fire these ticks, oldest first. `skipped` counts due ticks dropped by `catch_up` or
    /// `starting_deadline`, for the log.
    Fire { ticks: Vec<Tick>, skipped: u64 },
    /// Nothing is due; ask again at this instant (or earlier).
    SleepUntil(DateTime<Utc>),
    /// Nothing fires before `until` because every tick up to `record` counts as handled and
    /// `record` is far ahead of the clock (see [`FUTURE_RECORD_TOLERANCE`]). The planner never
    /// repeats a tick at or before a record (it may have run), so it cannot rewind on its own:
    /// the shell says so loudly, and only an operator moves the record back. Ask again at
    /// `until` or earlier.
    Held {
        record: DateTime<Utc>,
        until: DateTime<Utc>,
    },
    /// The schedule has no further tick.
    Finished,
}

/// The rules the planner applies, taken from a [`TaskSpec`].
#[derive(Debug, Clone, PartialEq)]
pub struct PlanRules {
    pub task: String,
    pub schedule: Schedule,
    pub catch_up: CatchUpPolicy,
    pub starting_deadline: Option<std::time::Duration>,
    pub jitter: std::time::Duration,
}

impl PlanRules {
    pub fn from_spec(spec: &TaskSpec) -> PlanRules {
        PlanRules {
            task: spec.name.clone(),
            schedule: spec.schedule.clone(),
            catch_up: spec.catch_up,
            starting_deadline: spec.starting_deadline,
            jitter: spec.jitter,
        }
    }
}

/// The planner of one task on one node, from the moment the node starts firing it.
#[derive(Debug, Clone)]
pub struct TickPlanner {
    rules: PlanRules,
    /// Every tick at or before this instant has been handled (fired, claimed elsewhere or
    /// dropped); the planner never returns it again.
    cursor: DateTime<Utc>,
    /// The tick the planner is waiting for: the first tick after `cursor`. `None` once the
    /// schedule has run out.
    armed: Option<DateTime<Utc>>,
    /// Missed ticks found at start, not yet returned.
    pending_start: bool,
}

impl TickPlanner {
    /// Starts planning at `now`. `last_claimed` is the task's fire record: the newest tick any
    /// node claimed. Ticks after it and at or before `now` are missed and go to `catch_up`; with
    /// no record (a task never fired) nothing is missed.
    pub fn start(
        rules: PlanRules,
        last_claimed: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Self {
        let cursor = match last_claimed {
            // A record ahead of our clock (clock skew, or the clock went back): ticks up to the
            // record are done, never repeat them. Far ahead, `poll` reports the task as held.
            Some(record) => record,
            None => now,
        };
        let armed = rules.schedule.next_after(cursor);
        let mut planner = TickPlanner {
            rules,
            cursor,
            armed,
            pending_start: false,
        };
        // Ticks are missed only if one was already due when the planner started.
        planner.pending_start =
            last_claimed.is_some() && armed.is_some_and(|tick| planner.due_at(tick) <= now);
        planner
    }

    /// The rules in force.
    pub fn rules(&self) -> &PlanRules {
        &self.rules
    }

    /// The tick the planner is waiting for, if any.
    pub fn armed(&self) -> Option<Tick> {
        self.armed.map(|instant| self.tick(instant, false))
    }

    /// Advances to `now` and says what to do.
    pub fn poll(&mut self, now: DateTime<Utc>) -> Step {
        let Some(armed) = self.armed else {
            return Step::Finished;
        };
        let armed_due = armed + jitter_offset(&self.rules.task, armed, self.rules.jitter);
        if let Some(record) = holding_record(Some(self.cursor), now) {
            return Step::Held {
                record,
                until: armed_due,
            };
        }
        if now < armed_due {
            return Step::SleepUntil(armed_due);
        }
        let from_start = std::mem::take(&mut self.pending_start);

        // The newest tick that is due now. Ticks between `armed` and it are due too; with jitter
        // a tick's instant can be past while its due time is not, so step back over those.
        let mut latest_due = armed;
        if let Some(mut candidate) = self.rules.schedule.latest_at_or_before(now) {
            while candidate > armed && self.due_at(candidate) > now {
                match self
                    .rules
                    .schedule
                    .latest_at_or_before(candidate - TimeDelta::seconds(1))
                {
                    Some(earlier) => candidate = earlier,
                    None => break,
                }
            }
            if candidate > latest_due {
                latest_due = candidate;
            }
        }

        let deadline_ok = |instant: DateTime<Utc>| match self.rules.starting_deadline {
            Some(deadline) => {
                now - instant <= TimeDelta::from_std(deadline).unwrap_or(TimeDelta::MAX)
            }
            None => true,
        };

        // Split the due ticks into on time and missed. At start every due tick is missed. In a
        // running loop a tick is on time when it came due within ON_TIME_TOLERANCE: the node was
        // firing, just slow. Ticks older than that can only be due after a suspend, a stopped
        // process or a clock jump, and are missed. Ticks before `split` are certainly missed;
        // the few after it are classified one by one.
        let jitter = TimeDelta::from_std(self.rules.jitter).unwrap_or(TimeDelta::MAX);
        let split = if from_start {
            latest_due
        } else {
            self.cursor
                .max(now - ON_TIME_TOLERANCE - jitter)
                .min(latest_due)
        };
        let mut on_time: Vec<Tick> = Vec::new();
        let mut missed_after_split: Vec<DateTime<Utc>> = Vec::new();
        for instant in self.rules.schedule.ticks_after(split) {
            if instant > latest_due {
                break;
            }
            if self.due_at(instant) + ON_TIME_TOLERANCE >= now {
                on_time.push(self.tick(instant, false));
            } else {
                missed_after_split.push(instant);
            }
        }
        let missed_count = self.count_between(self.cursor, split) + missed_after_split.len() as u64;
        let latest_missed = missed_after_split.last().copied().or_else(|| {
            self.rules
                .schedule
                .latest_at_or_before(split)
                .filter(|instant| *instant > self.cursor)
        });

        let mut ticks = Vec::new();
        let mut skipped = 0u64;
        match (self.rules.catch_up, latest_missed) {
            (_, None) => {}
            (CatchUpPolicy::Skip, Some(_)) => skipped += missed_count,
            (CatchUpPolicy::Once, Some(latest)) => {
                // `once` runs the latest missed tick, unless a newer tick runs on time anyway.
                if on_time.is_empty() && deadline_ok(latest) {
                    ticks.push(self.tick(latest, true));
                    skipped += missed_count - 1;
                } else {
                    skipped += missed_count;
                }
            }
            (CatchUpPolicy::All, Some(latest)) => {
                // Only the missed ticks inside the deadline run; start the walk there to keep
                // it short, and keep the newest MAX_CATCH_UP.
                let mut walk_from = self.cursor;
                if let Some(deadline) = self.rules.starting_deadline {
                    let edge = now - TimeDelta::from_std(deadline).unwrap_or(TimeDelta::MAX);
                    walk_from = walk_from.max(edge - TimeDelta::nanoseconds(1));
                }
                let mut eligible: std::collections::VecDeque<DateTime<Utc>> = Default::default();
                for instant in self.rules.schedule.ticks_after(walk_from) {
                    if instant > latest {
                        break;
                    }
                    if deadline_ok(instant) {
                        eligible.push_back(instant);
                        if eligible.len() > MAX_CATCH_UP {
                            eligible.pop_front();
                        }
                    }
                }
                skipped += missed_count - eligible.len() as u64;
                ticks.extend(eligible.into_iter().map(|i| self.tick(i, true)));
            }
        }
        for tick in on_time {
            if deadline_ok(tick.instant) {
                ticks.push(tick);
            } else {
                skipped += 1;
            }
        }
        self.cursor = latest_due;
        self.armed = self.rules.schedule.next_after(latest_due);
        Step::Fire { ticks, skipped }
    }

    fn due_at(&self, instant: DateTime<Utc>) -> DateTime<Utc> {
        instant + jitter_offset(&self.rules.task, instant, self.rules.jitter)
    }

    fn tick(&self, instant: DateTime<Utc>, catch_up: bool) -> Tick {
        Tick {
            instant,
            due_at: self.due_at(instant),
            catch_up,
        }
    }

    /// Counts ticks in (after, until], stopping at a bound so that a long outage of an
    /// every-second task cannot stall the planner; the count is for logs only.
    fn count_between(&self, after: DateTime<Utc>, until: DateTime<Utc>) -> u64 {
        const COUNT_LIMIT: u64 = 100_000;
        let mut count = 0;
        for instant in self.rules.schedule.ticks_after(after) {
            if instant > until || count == COUNT_LIMIT {
                break;
            }
            count += 1;
        }
        count
    }
}

/// The deterministic jitter of a tick: the same on every node and every release.
///
/// Specification: `xxh3_64` (seed 0) of the UTF-8 bytes `"<task>@<unix-seconds>"` (the fire id),
/// taken modulo the jitter in milliseconds. Zero jitter gives zero.
pub fn jitter_offset(task: &str, instant: DateTime<Utc>, jitter: std::time::Duration) -> TimeDelta {
    let range = jitter.as_millis() as u64;
    if range == 0 {
        return TimeDelta::zero();
    }
    let hash = xxh3_64(fire_id(task, instant).as_bytes());
    TimeDelta::milliseconds((hash % range) as i64)
}

/// The fire id of a tick: `<task>@<unix-seconds>`, the same on every node.
pub fn fire_id(task: &str, instant: DateTime<Utc>) -> String {
    format!("{task}@{}", instant.timestamp())
}

/// What to do with a tick given the runs of the same task still going.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverlapAction {
    Start,
    /// Do not start: an earlier run is still going and the policy is `skip`.
    Skip,
    /// Stop the running runs, then start.
    ReplaceThenStart,
}

pub fn overlap_action(policy: OverlapPolicy, running: usize) -> OverlapAction {
    match (policy, running) {
        (_, 0) => OverlapAction::Start,
        (OverlapPolicy::Allow, _) => OverlapAction::Start,
        (OverlapPolicy::Skip, _) => OverlapAction::Skip,
        (OverlapPolicy::Replace, _) => OverlapAction::ReplaceThenStart,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono_tz::Tz;
    use std::time::Duration;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn rules(expr: &str, catch_up: CatchUpPolicy, deadline: Option<u64>) -> PlanRules {
        PlanRules {
            task: "t".into(),
            schedule: Schedule::parse(expr, Tz::UTC).unwrap(),
            catch_up,
            starting_deadline: deadline.map(Duration::from_secs),
            jitter: Duration::ZERO,
        }
    }

    fn fired(step: Step) -> Vec<String> {
        match step {
            Step::Fire { ticks, .. } => ticks.iter().map(|t| t.instant.to_rfc3339()).collect(),
            other => panic!("expected Fire, got {other:?}"),
        }
    }

    #[test]
    fn a_new_task_sleeps_until_its_first_tick_then_fires_it_on_time() {
        let mut planner = TickPlanner::start(
            rules("*/10 * * * *", CatchUpPolicy::Once, None),
            None,
            utc("2026-01-01T00:03:00Z"),
        );
        assert_eq!(
            planner.poll(utc("2026-01-01T00:03:00Z")),
            Step::SleepUntil(utc("2026-01-01T00:10:00Z"))
        );
        let step = planner.poll(utc("2026-01-01T00:10:00.002Z"));
        assert_eq!(
            step,
            Step::Fire {
                ticks: vec![Tick {
                    instant: utc("2026-01-01T00:10:00Z"),
                    due_at: utc("2026-01-01T00:10:00Z"),
                    catch_up: false
                }],
                skipped: 0
            }
        );
        assert_eq!(
            planner.poll(utc("2026-01-01T00:10:00.003Z")),
            Step::SleepUntil(utc("2026-01-01T00:20:00Z"))
        );
    }

    #[test]
    fn a_late_timer_fires_its_tick_on_time_within_the_tolerance_even_with_catch_up_skip() {
        let mut planner = TickPlanner::start(
            rules("*/10 * * * *", CatchUpPolicy::Skip, None),
            None,
            utc("2026-01-01T00:03:00Z"),
        );
        assert_eq!(
            fired(planner.poll(utc("2026-01-01T00:10:59Z"))),
            ["2026-01-01T00:10:00+00:00"]
        );
        // Beyond the tolerance the node was evidently not firing (suspended): the tick is missed.
        let mut planner = TickPlanner::start(
            rules("*/10 * * * *", CatchUpPolicy::Skip, None),
            None,
            utc("2026-01-01T00:03:00Z"),
        );
        assert_eq!(
            planner.poll(utc("2026-01-01T00:19:00Z")),
            Step::Fire {
                ticks: vec![],
                skipped: 1
            }
        );
    }

    #[test]
    fn a_task_never_fired_before_catches_nothing_up() {
        let mut planner = TickPlanner::start(
            rules("* * * * *", CatchUpPolicy::All, None),
            None,
            utc("2026-01-01T00:03:30Z"),
        );
        assert_eq!(
            planner.poll(utc("2026-01-01T00:03:30Z")),
            Step::SleepUntil(utc("2026-01-01T00:04:00Z"))
        );
    }

    #[test]
    fn catch_up_once_runs_only_the_latest_missed_tick() {
        let mut planner = TickPlanner::start(
            rules("*/10 * * * *", CatchUpPolicy::Once, None),
            Some(utc("2026-01-01T00:00:00Z")),
            utc("2026-01-01T00:35:00Z"),
        );
        let step = planner.poll(utc("2026-01-01T00:35:00Z"));
        assert_eq!(
            step,
            Step::Fire {
                ticks: vec![Tick {
                    instant: utc("2026-01-01T00:30:00Z"),
                    due_at: utc("2026-01-01T00:30:00Z"),
                    catch_up: true
                }],
                skipped: 2
            }
        );
        assert_eq!(
            planner.poll(utc("2026-01-01T00:35:00Z")),
            Step::SleepUntil(utc("2026-01-01T00:40:00Z"))
        );
    }

    #[test]
    fn catch_up_all_runs_every_missed_tick_oldest_first() {
        let mut planner = TickPlanner::start(
            rules("*/10 * * * *", CatchUpPolicy::All, None),
            Some(utc("2026-01-01T00:00:00Z")),
            utc("2026-01-01T00:35:00Z"),
        );
        assert_eq!(
            fired(planner.poll(utc("2026-01-01T00:35:00Z"))),
            [
                "2026-01-01T00:10:00+00:00",
                "2026-01-01T00:20:00+00:00",
                "2026-01-01T00:30:00+00:00"
            ]
        );
    }

    #[test]
    fn catch_up_skip_drops_missed_ticks_and_waits_for_the_next() {
        let mut planner = TickPlanner::start(
            rules("*/10 * * * *", CatchUpPolicy::Skip, None),
            Some(utc("2026-01-01T00:00:00Z")),
            utc("2026-01-01T00:35:00Z"),
        );
        assert_eq!(
            planner.poll(utc("2026-01-01T00:35:00Z")),
            Step::Fire {
                ticks: vec![],
                skipped: 3
            }
        );
        assert_eq!(
            planner.poll(utc("2026-01-01T00:35:00Z")),
            Step::SleepUntil(utc("2026-01-01T00:40:00Z"))
        );
    }

    #[test]
    fn starting_deadline_drops_missed_ticks_older_than_it() {
        // Missed 00:10, 00:20, 00:30; now 00:35; deadline 20 min keeps 00:20 and 00:30.
        let mut planner = TickPlanner::start(
            rules("*/10 * * * *", CatchUpPolicy::All, Some(20 * 60)),
            Some(utc("2026-01-01T00:00:00Z")),
            utc("2026-01-01T00:35:00Z"),
        );
        let step = planner.poll(utc("2026-01-01T00:35:00Z"));
        let Step::Fire { ticks, skipped } = step else {
            panic!()
        };
        assert_eq!(
            ticks.iter().map(|t| t.instant).collect::<Vec<_>>(),
            [utc("2026-01-01T00:20:00Z"), utc("2026-01-01T00:30:00Z")]
        );
        assert_eq!(skipped, 1);

        // With `once`, a latest missed tick beyond the deadline is not run either.
        let mut planner = TickPlanner::start(
            rules("*/10 * * * *", CatchUpPolicy::Once, Some(60)),
            Some(utc("2026-01-01T00:00:00Z")),
            utc("2026-01-01T00:35:00Z"),
        );
        assert_eq!(
            planner.poll(utc("2026-01-01T00:35:00Z")),
            Step::Fire {
                ticks: vec![],
                skipped: 3
            }
        );
    }

    #[test]
    fn starting_deadline_also_drops_an_on_time_tick_whose_timer_woke_too_late() {
        let mut planner = TickPlanner::start(
            rules("0 * * * *", CatchUpPolicy::Once, Some(60)),
            None,
            utc("2026-01-01T00:30:00Z"),
        );
        assert_eq!(
            planner.poll(utc("2026-01-01T01:05:00Z")),
            Step::Fire {
                ticks: vec![],
                skipped: 1
            }
        );
    }

    #[test]
    fn a_restart_with_nothing_missed_fires_the_next_tick_on_time() {
        // Regression: the first tick after a restart was taken for a missed one and dropped by
        // `catch_up = "skip"`.
        let mut planner = TickPlanner::start(
            rules("*/10 * * * *", CatchUpPolicy::Skip, None),
            Some(utc("2026-01-01T00:00:00Z")),
            utc("2026-01-01T00:05:00Z"),
        );
        assert_eq!(
            planner.poll(utc("2026-01-01T00:05:00Z")),
            Step::SleepUntil(utc("2026-01-01T00:10:00Z"))
        );
        assert_eq!(
            fired(planner.poll(utc("2026-01-01T00:10:00Z"))),
            ["2026-01-01T00:10:00+00:00"]
        );
    }

    #[test]
    fn catch_up_all_is_bounded() {
        let mut planner = TickPlanner::start(
            rules("* * * * * *", CatchUpPolicy::All, None),
            Some(utc("2026-01-01T00:00:00Z")),
            utc("2026-01-01T01:00:00Z"),
        );
        let Step::Fire { ticks, skipped } = planner.poll(utc("2026-01-01T01:00:00Z")) else {
            panic!()
        };
        assert_eq!(ticks.len(), MAX_CATCH_UP);
        assert_eq!(ticks.last().unwrap().instant, utc("2026-01-01T01:00:00Z"));
        assert_eq!(skipped, 3600 - MAX_CATCH_UP as u64);
    }

    #[test]
    fn a_paused_process_that_overslept_several_ticks_treats_them_as_missed() {
        let mut planner = TickPlanner::start(
            rules("*/10 * * * *", CatchUpPolicy::Once, None),
            None,
            utc("2026-01-01T00:03:00Z"),
        );
        // Armed for 00:10, woke at 00:25: 00:10 and 00:20 are missed, `once` runs 00:20.
        let Step::Fire { ticks, skipped } = planner.poll(utc("2026-01-01T00:25:00Z")) else {
            panic!()
        };
        assert_eq!(
            ticks
                .iter()
                .map(|t| (t.instant, t.catch_up))
                .collect::<Vec<_>>(),
            [(utc("2026-01-01T00:20:00Z"), true)]
        );
        assert_eq!(skipped, 1);
    }

    #[test]
    fn a_slow_timer_fires_every_tick_that_came_due_within_the_tolerance() {
        // Regression: on a loaded machine an every-second task woke 3 s late and `once` ran
        // only the newest of the due ticks, losing two.
        let mut planner = TickPlanner::start(
            rules("* * * * * *", CatchUpPolicy::Once, None),
            None,
            utc("2026-01-01T00:00:00.5Z"),
        );
        assert_eq!(
            fired(planner.poll(utc("2026-01-01T00:00:03.2Z"))),
            [
                "2026-01-01T00:00:01+00:00",
                "2026-01-01T00:00:02+00:00",
                "2026-01-01T00:00:03+00:00"
            ]
        );
    }

    #[test]
    fn after_a_long_suspend_older_ticks_are_missed_and_recent_ones_on_time() {
        // Woke 5 minutes late: ticks of the last minute fire; older ones go to `catch_up`.
        let mut planner = TickPlanner::start(
            rules("*/30 * * * * *", CatchUpPolicy::All, None),
            None,
            utc("2026-01-01T00:00:10Z"),
        );
        let Step::Fire { ticks, skipped } = planner.poll(utc("2026-01-01T00:05:10Z")) else {
            panic!()
        };
        assert_eq!(skipped, 0);
        assert_eq!(ticks.len(), 10);
        assert!(ticks[..8].iter().all(|t| t.catch_up));
        assert!(ticks[8..].iter().all(|t| !t.catch_up));
        let mut planner = TickPlanner::start(
            rules("*/30 * * * * *", CatchUpPolicy::Once, None),
            None,
            utc("2026-01-01T00:00:10Z"),
        );
        let Step::Fire { ticks, skipped } = planner.poll(utc("2026-01-01T00:05:10Z")) else {
            panic!()
        };
        assert_eq!(
            ticks.iter().map(|t| t.catch_up).collect::<Vec<_>>(),
            [false, false]
        );
        assert_eq!(skipped, 8);
    }

    #[test]
    fn a_fire_record_ahead_of_the_clock_is_never_repeated() {
        // The record says 00:30 was claimed, our clock says 00:15 (it went back, or skew).
        let mut planner = TickPlanner::start(
            rules("*/10 * * * *", CatchUpPolicy::All, None),
            Some(utc("2026-01-01T00:30:00Z")),
            utc("2026-01-01T00:15:00Z"),
        );
        assert_eq!(
            planner.poll(utc("2026-01-01T00:15:00Z")),
            Step::Held {
                record: utc("2026-01-01T00:30:00Z"),
                until: utc("2026-01-01T00:40:00Z")
            }
        );
        assert_eq!(
            planner.poll(utc("2026-01-01T00:31:00Z")),
            Step::SleepUntil(utc("2026-01-01T00:40:00Z"))
        );
    }

    #[test]
    fn a_fire_record_a_year_ahead_holds_the_task_visibly_until_the_clock_passes_it() {
        // Regression: after the clock ran a year ahead for two seconds, the task slept until the
        // record's next tick, a year away, and nothing said so.
        let record = utc("2027-01-01T00:00:10Z");
        let now = utc("2026-01-01T00:00:03Z");
        let mut planner = TickPlanner::start(
            rules("*/10 * * * * *", CatchUpPolicy::Once, None),
            Some(record),
            now,
        );
        let held = Step::Held {
            record,
            until: utc("2027-01-01T00:00:20Z"),
        };
        assert_eq!(planner.poll(now), held);
        assert_eq!(holding_record(Some(record), now), Some(record));
        // Nothing up to the record ever fires again on the planner's own: the ticks in between
        // may have run (the clock was a year ahead when they were claimed).
        assert_eq!(planner.poll(utc("2026-06-01T00:00:00Z")), held);
        assert_eq!(
            planner.poll(record + TimeDelta::seconds(5)),
            Step::SleepUntil(utc("2027-01-01T00:00:20Z"))
        );
        assert_eq!(
            fired(planner.poll(utc("2027-01-01T00:00:20Z"))),
            ["2027-01-01T00:00:20+00:00"]
        );
    }

    #[test]
    fn a_clock_that_ran_ahead_and_came_back_holds_the_running_loop_visibly() {
        // The loop fires while the clock is a year ahead, then the clock is corrected.
        let mut planner = TickPlanner::start(
            rules("*/10 * * * * *", CatchUpPolicy::Once, None),
            None,
            utc("2026-01-01T00:00:03Z"),
        );
        let ran_ahead = fired(planner.poll(utc("2027-01-01T00:00:01Z")));
        assert_eq!(ran_ahead.last().unwrap(), "2027-01-01T00:00:00+00:00");
        assert_eq!(
            planner.poll(utc("2026-01-01T00:00:05Z")),
            Step::Held {
                record: utc("2027-01-01T00:00:00Z"),
                until: utc("2027-01-01T00:00:10Z")
            }
        );
    }

    #[test]
    fn a_held_task_is_reported_with_its_record_how_far_ahead_and_the_fix() {
        let report = |fix: &str| {
            held_report(
                "backup",
                utc("2026-03-02T10:00:00Z"),
                utc("2026-03-03T02:30:00Z"),
                utc("2026-03-01T08:30:00Z"),
                fix,
            )
        };
        assert_eq!(
            report(&held_fix("backup", Some(" --state-dir /srv/zkcron"))),
            "task backup is held by its fire record 2026-03-02T10:00:00Z, 1day 1h 30m ahead of the \
             clock: every tick up to it counts as done (it was claimed while the clock was ahead, \
             or the clock was set back since), so the task fires next at 2026-03-03T02:30:00Z. To \
             fire it from now on: stop zkcron, run `zkcron reset backup --state-dir /srv/zkcron` \
             (moves the record back to now; no past tick runs again), start zkcron."
        );
        assert!(
            report(&held_fix("backup", None))
                .ends_with("in a ZooKeeper cluster is not supported yet; the task fires again when the clock passes the record.")
        );
    }

    #[test]
    fn a_fire_record_slightly_ahead_is_waited_out_quietly() {
        // A small step back (NTP): within the tolerance the task just sleeps.
        let now = utc("2026-01-01T00:00:03Z");
        let record = now + FUTURE_RECORD_TOLERANCE;
        let mut planner = TickPlanner::start(
            rules("*/10 * * * * *", CatchUpPolicy::Once, None),
            Some(record),
            now,
        );
        assert_eq!(
            planner.poll(now),
            Step::SleepUntil(utc("2026-01-01T00:01:10Z"))
        );
        assert_eq!(holding_record(Some(record), now), None);
        assert_eq!(holding_record(None, now), None);
    }

    #[test]
    fn a_clock_jumping_back_does_not_refire_handled_ticks() {
        let mut planner = TickPlanner::start(
            rules("*/10 * * * *", CatchUpPolicy::All, None),
            None,
            utc("2026-01-01T00:05:00Z"),
        );
        assert_eq!(
            fired(planner.poll(utc("2026-01-01T00:10:00Z"))),
            ["2026-01-01T00:10:00+00:00"]
        );
        // The wall clock jumps back an hour: nothing fires until 00:20 comes again, and the
        // task says it is held by the tick it fired.
        assert_eq!(
            planner.poll(utc("2025-12-31T23:10:00Z")),
            Step::Held {
                record: utc("2026-01-01T00:10:00Z"),
                until: utc("2026-01-01T00:20:00Z")
            }
        );
    }

    #[test]
    fn jitter_delays_the_spawn_but_not_the_tick_identity() {
        let mut jittered = rules("*/10 * * * *", CatchUpPolicy::Once, None);
        jittered.jitter = Duration::from_secs(30);
        let mut planner = TickPlanner::start(jittered, None, utc("2026-01-01T00:03:00Z"));
        let offset = jitter_offset("t", utc("2026-01-01T00:10:00Z"), Duration::from_secs(30));
        assert!(offset >= TimeDelta::zero() && offset < TimeDelta::seconds(30));
        let due = utc("2026-01-01T00:10:00Z") + offset;
        assert_eq!(
            planner.poll(utc("2026-01-01T00:10:00Z") - TimeDelta::milliseconds(1)),
            Step::SleepUntil(due)
        );
        if offset > TimeDelta::zero() {
            assert_eq!(
                planner.poll(due - TimeDelta::milliseconds(1)),
                Step::SleepUntil(due)
            );
        }
        let Step::Fire { ticks, .. } = planner.poll(due) else {
            panic!()
        };
        assert_eq!(ticks[0].instant, utc("2026-01-01T00:10:00Z"));
        assert_eq!(ticks[0].due_at, due);
    }

    #[test]
    fn jitter_is_deterministic_per_tick_and_spreads_ticks() {
        let jitter = Duration::from_secs(60);
        let instant = utc("2026-01-01T00:10:00Z");
        // Same input, same offset: every node computes the same value.
        assert_eq!(
            jitter_offset("backup", instant, jitter),
            jitter_offset("backup", instant, jitter)
        );
        // The specification is fixed: xxh3_64 of the fire id, modulo the range in ms.
        assert_eq!(
            jitter_offset("backup", instant, jitter),
            TimeDelta::milliseconds((xxh3_64(b"backup@1767226200") % 60_000) as i64)
        );
        // Different ticks and tasks spread over the range.
        let offsets: std::collections::BTreeSet<i64> = (0..100)
            .map(|i| jitter_offset(&format!("task-{i}"), instant, jitter).num_milliseconds())
            .collect();
        assert!(offsets.len() > 90, "{} distinct offsets", offsets.len());
        assert!(offsets.iter().all(|o| (0..60_000).contains(o)));
        assert_eq!(
            jitter_offset("backup", instant, Duration::ZERO),
            TimeDelta::zero()
        );
    }

    #[test]
    fn fire_id_is_task_and_unix_seconds() {
        assert_eq!(
            fire_id("nightly-backup", utc("2026-01-01T02:30:00Z")),
            "nightly-backup@1767234600"
        );
    }

    #[test]
    fn overlap_decisions() {
        assert_eq!(overlap_action(OverlapPolicy::Skip, 0), OverlapAction::Start);
        assert_eq!(overlap_action(OverlapPolicy::Skip, 1), OverlapAction::Skip);
        assert_eq!(
            overlap_action(OverlapPolicy::Allow, 3),
            OverlapAction::Start
        );
        assert_eq!(
            overlap_action(OverlapPolicy::Replace, 0),
            OverlapAction::Start
        );
        assert_eq!(
            overlap_action(OverlapPolicy::Replace, 1),
            OverlapAction::ReplaceThenStart
        );
    }

    #[test]
    fn planning_across_dst_follows_the_schedule() {
        let schedule = Schedule::parse("30 2 * * *", "America/New_York".parse().unwrap()).unwrap();
        let rules = PlanRules {
            task: "t".into(),
            schedule,
            catch_up: CatchUpPolicy::Once,
            starting_deadline: None,
            jitter: Duration::ZERO,
        };
        let mut planner = TickPlanner::start(rules, None, utc("2026-03-07T12:00:00Z"));
        // 02:30 does not exist on 2026-03-08; it fires at 03:00 EDT = 07:00Z.
        assert_eq!(
            planner.poll(utc("2026-03-07T12:00:00Z")),
            Step::SleepUntil(utc("2026-03-08T07:00:00Z"))
        );
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Driving a planner with arbitrary forward time steps fires strictly increasing
            /// ticks, never one it fired before, and none in the future.
            #[test]
            fn fired_ticks_strictly_increase_and_are_never_in_the_future(
                steps in proptest::collection::vec(0i64..5_000, 1..60),
                catch_up in prop_oneof![Just(CatchUpPolicy::Skip), Just(CatchUpPolicy::Once), Just(CatchUpPolicy::All)],
                record in proptest::option::of(0i64..10_000),
            ) {
                let start = utc("2026-01-01T00:00:00Z");
                let mut rules = rules("*/7 * * * * *", catch_up, None);
                rules.jitter = Duration::from_secs(3);
                let mut planner = TickPlanner::start(rules, record.map(|s| start - TimeDelta::seconds(s)), start);
                let mut now = start;
                let mut last: Option<DateTime<Utc>> = None;
                for step in steps {
                    now += TimeDelta::milliseconds(step * 10);
                    if let Step::Fire { ticks, .. } = planner.poll(now) {
                        for tick in ticks {
                            prop_assert!(tick.instant <= now && tick.due_at <= now);
                            prop_assert!(last.is_none_or(|l| tick.instant > l));
                            last = Some(tick.instant);
                        }
                    }
                }
            }
        }
    }
}
