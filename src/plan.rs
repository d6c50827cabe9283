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
//!
//! Files: `plan.rs` the planner; `ledger.rs` the tick ledger (what became of each tick not run,
//! and why: the planner's skipped ticks are its first entries).

use chrono::{DateTime, TimeDelta, Utc};
use xxhash_rust::xxh3::xxh3_64;

use crate::schedule::Schedule;
use crate::task::{CatchUpPolicy, OverlapPolicy, TaskSpec};

pub mod ledger;

use self::ledger::{Reason, TickEntry};

/// The most missed ticks `catch_up = "all"` runs at once; older ones are dropped with a warning,
/// as Kubernetes CronJobs give up past 100 missed schedules.
pub const MAX_CATCH_UP: usize = 100;

/// A running loop fires every tick that came due within this long, however many: the node was
/// firing, only slowly (a loaded machine, a short clock step). Older due ticks were missed.
pub const ON_TIME_TOLERANCE: TimeDelta = TimeDelta::seconds(60);

/// How long before a tick is due its claim is sent (the claim lead), so that at the tick's
/// instant only the spawn remains: the claim's round trip to ZooKeeper is off the path between
/// the instant and the spawn. ZooKeeper answers a claim in about 1 ms on average and in 19–26 ms
/// at worst on a loaded 2-core machine (docs/BENCHMARKS.md), so 200 ms leaves eight times the
/// worst round trip seen; a claim answered later than the instant spawns when it is answered,
/// late as before. Not longer, because the lead bounds three things: how far a fire record may
/// be ahead of the cluster's clock (it names the claimed tick up to this long before it is
/// due), how long a tick stays claimed but not started (a node that dies meanwhile leaves it to
/// `on_node_loss`), and how stale the overlap check made at the claim may be (see one tick's
/// fire in `firing`). Ticks caught up, and claims retried after a failure, are claimed when they
/// fire.
pub const CLAIM_AHEAD: TimeDelta = TimeDelta::milliseconds(200);

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
    /// Fire these ticks, oldest first. `skipped`: the due ticks not run, and why (missed and
    /// not caught up, or older than `starting_deadline`), for the ledger.
    Fire {
        ticks: Vec<Tick>,
        skipped: Vec<TickEntry>,
    },
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
            task: spec.name.to_string(),
            schedule: spec.schedule.clone(),
            catch_up: spec.catch_up,
            starting_deadline: spec.extras.starting_deadline,
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

/// The due ticks of one [`TickPlanner::poll`], classified.
#[derive(Debug)]
struct DueTicks {
    /// The ticks that came due while the planner was running, oldest first.
    on_time: Vec<Tick>,
    /// How many due ticks were missed.
    missed_count: u64,
    /// The newest missed tick, if any was missed.
    latest_missed: Option<DateTime<Utc>>,
}

/// A [`TickPlanner`]'s position without its rules (see [`TickPlanner::into_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannerState {
    cursor: DateTime<Utc>,
    armed: Option<DateTime<Utc>>,
    pending_start: bool,
}

impl TickPlanner {
    /// Starts planning at `now`. `last_claimed` is the task's fire record: the newest tick any
    /// node claimed. Ticks after it and at or before `now` are missed and go to `catch_up`; with
    /// no record (a task never fired) nothing is missed, but the instant of a one-shot (`@at`).
    pub fn start(
        rules: PlanRules,
        last_claimed: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Self {
        // A one-shot (`@at`) that nobody claimed is missed once its instant passed, as if a
        // record stood just before it: `catch_up` and `starting_deadline` decide.
        let one_shot = match last_claimed {
            None => rules
                .schedule
                .one_shot()
                .filter(|instant| *instant <= now)
                .map(|instant| instant - TimeDelta::seconds(1)),
            Some(_) => None,
        };
        let cursor = match last_claimed.or(one_shot) {
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
        planner.pending_start = last_claimed.or(one_shot).is_some()
            && armed.is_some_and(|tick| planner.due_at(tick) <= now);
        planner
    }

    /// Where the planner stands, without its rules: what a sleeping task keeps, so that
    /// 10,000 of them do not keep 10,000 copies of their rules. [`TickPlanner::resume`] with
    /// the same rules continues exactly where it stopped.
    pub fn into_state(self) -> PlannerState {
        PlannerState {
            cursor: self.cursor,
            armed: self.armed,
            pending_start: self.pending_start,
        }
    }

    /// The planner that [`TickPlanner::into_state`] left `state` of, with its `rules`.
    pub fn resume(rules: PlanRules, state: PlannerState) -> TickPlanner {
        TickPlanner {
            rules,
            cursor: state.cursor,
            armed: state.armed,
            pending_start: state.pending_start,
        }
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
        if !self.pending_start
            && let Some(step) = self.poll_on_time(armed, armed_due, now)
        {
            return step;
        }
        self.poll_due(armed, now)
    }

    /// The usual poll of a running loop, in one step of the schedule instead of five: the
    /// armed tick came due within [`ON_TIME_TOLERANCE`] and the tick after it has not come yet.
    /// Then nothing lies between the cursor and the armed tick (`armed` is always the next tick
    /// after `cursor`), nothing was missed, and [`TickPlanner::poll_due`] would fire the armed
    /// tick alone (or skip it past `starting_deadline`): so does this. `None` in any other case.
    fn poll_on_time(
        &mut self,
        armed: DateTime<Utc>,
        armed_due: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Option<Step> {
        let jitter = TimeDelta::from_std(self.rules.jitter).unwrap_or(TimeDelta::MAX);
        let on_time = armed_due + ON_TIME_TOLERANCE >= now
            && self.cursor.max(now - ON_TIME_TOLERANCE - jitter) < armed;
        if !on_time {
            return None;
        }
        let next = self.rules.schedule.next_after(armed);
        if next.is_some_and(|next| next <= now) {
            return None;
        }
        let (ticks, skipped) = if self.deadline_ok(armed, now) {
            (vec![self.tick(armed, false)], Vec::new())
        } else {
            (Vec::new(), vec![TickEntry::one(armed, Reason::Deadline)])
        };
        self.cursor = armed;
        self.armed = next;
        Some(Step::Fire { ticks, skipped })
    }

    /// Fires what is due at `now`, the armed tick being due: the ticks on time, and the missed
    /// ones as `catch_up` says.
    fn poll_due(&mut self, armed: DateTime<Utc>, now: DateTime<Utc>) -> Step {
        let from_start = std::mem::take(&mut self.pending_start);
        let latest_due = self.latest_due(armed, now);
        let due = self.classify_due(now, from_start, latest_due);

        let (mut ticks, dropped) = self.catch_up(now, &due);
        let mut skipped = Vec::new();
        if let Some(entry) = self.missed_entry(&due, &ticks, dropped, from_start, now) {
            skipped.push(entry);
        }
        for tick in due.on_time {
            if self.deadline_ok(tick.instant, now) {
                ticks.push(tick);
            } else {
                ledger::push(&mut skipped, TickEntry::one(tick.instant, Reason::Deadline));
            }
        }
        // With jitter a missed tick run by `catch_up` can be newer than one on time.
        ticks.sort_by_key(|tick| tick.instant);
        self.cursor = latest_due;
        self.armed = self.rules.schedule.next_after(latest_due);
        Step::Fire { ticks, skipped }
    }

    /// The newest tick that is due at `now`, given that `armed` is. Ticks between `armed` and
    /// it are due too; with jitter a tick's instant can be past while its due time is not, so
    /// this steps back over those.
    fn latest_due(&self, armed: DateTime<Utc>, now: DateTime<Utc>) -> DateTime<Utc> {
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
        latest_due
    }

    /// Splits the ticks after the cursor up to `latest_due` into on time and missed. At start
    /// (`from_start`) every due tick is missed. In a running loop a tick is on time when it came
    /// due within [`ON_TIME_TOLERANCE`]: the node was firing, just slow. Ticks older than that
    /// can only be due after a suspend, a stopped process or a clock jump, and are missed.
    /// Ticks before a split point are certainly missed and only counted; the few after it are
    /// classified one by one.
    fn classify_due(
        &self,
        now: DateTime<Utc>,
        from_start: bool,
        latest_due: DateTime<Utc>,
    ) -> DueTicks {
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
        DueTicks {
            on_time,
            missed_count,
            latest_missed,
        }
    }

    /// What `catch_up` makes of the missed ticks in `due`: the ticks to run, oldest first, and
    /// how many are dropped.
    fn catch_up(&self, now: DateTime<Utc>, due: &DueTicks) -> (Vec<Tick>, u64) {
        let Some(latest) = due.latest_missed else {
            return (Vec::new(), 0);
        };
        match self.rules.catch_up {
            CatchUpPolicy::Skip => (Vec::new(), due.missed_count),
            // `once` runs the latest missed tick, unless a newer tick runs on time anyway.
            CatchUpPolicy::Once if due.on_time.is_empty() && self.deadline_ok(latest, now) => {
                (vec![self.tick(latest, true)], due.missed_count - 1)
            }
            CatchUpPolicy::Once => (Vec::new(), due.missed_count),
            CatchUpPolicy::All => {
                let eligible = self.eligible_to_catch_up(now, latest, &due.on_time);
                let skipped = due.missed_count - eligible.len() as u64;
                let ticks = eligible.into_iter().map(|i| self.tick(i, true)).collect();
                (ticks, skipped)
            }
        }
    }

    /// The ledger's entry for the `dropped` missed ticks of `due` that `catch_up` does not run
    /// (`run`: the ticks it runs): they are the oldest missed ones. Missed at the start, no node
    /// fired them; missed by a running loop, the node fell behind and `starting_deadline`, or else
    /// `catch_up` (with `"all"`: [`MAX_CATCH_UP`]), left them.
    fn missed_entry(
        &self,
        due: &DueTicks,
        run: &[Tick],
        dropped: u64,
        from_start: bool,
        now: DateTime<Utc>,
    ) -> Option<TickEntry> {
        if dropped == 0 {
            return None;
        }
        let from = self.rules.schedule.next_after(self.cursor)?;
        let to = match run.iter().filter(|t| t.catch_up).map(|t| t.instant).min() {
            Some(first_run) => self
                .rules
                .schedule
                .latest_at_or_before(first_run - TimeDelta::seconds(1))?,
            None => due.latest_missed?,
        };
        let reason = if from_start {
            Reason::NoNode
        } else if !self.deadline_ok(to, now) {
            Reason::Deadline
        } else {
            Reason::CatchUp
        };
        (to >= from).then_some(TickEntry {
            from,
            to,
            count: dropped,
            reason,
        })
    }

    /// The missed ticks up to `latest` that `catch_up = "all"` runs: only those inside the
    /// deadline (the walk starts there to keep it short), not those that run `on_time`, and
    /// the newest [`MAX_CATCH_UP`].
    fn eligible_to_catch_up(
        &self,
        now: DateTime<Utc>,
        latest: DateTime<Utc>,
        on_time: &[Tick],
    ) -> std::collections::VecDeque<DateTime<Utc>> {
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
            // With jitter a tick on time can lie before a missed one: it runs on time, once.
            let runs_on_time = on_time.iter().any(|tick| tick.instant == instant);
            if !runs_on_time && self.deadline_ok(instant, now) {
                eligible.push_back(instant);
                if eligible.len() > MAX_CATCH_UP {
                    eligible.pop_front();
                }
            }
        }
        eligible
    }

    /// Whether the tick at `instant` may still start at `now` under `starting_deadline`.
    fn deadline_ok(&self, instant: DateTime<Utc>, now: DateTime<Utc>) -> bool {
        match self.rules.starting_deadline {
            Some(deadline) => {
                now - instant <= TimeDelta::from_std(deadline).unwrap_or(TimeDelta::MAX)
            }
            None => true,
        }
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
    /// Do not start now: an earlier run is still going and the policy is `queue`; the tick
    /// waits for its end (the firing rules drop it instead when one waits already).
    Queue,
    /// Do not start: a tick is queued already behind the running run (`queue`).
    Drop,
}

pub fn overlap_action(policy: OverlapPolicy, running: usize) -> OverlapAction {
    match (policy, running) {
        (_, 0) => OverlapAction::Start,
        (OverlapPolicy::Allow, _) => OverlapAction::Start,
        (OverlapPolicy::Skip, _) => OverlapAction::Skip,
        (OverlapPolicy::Replace, _) => OverlapAction::ReplaceThenStart,
        (OverlapPolicy::Queue, _) => OverlapAction::Queue,
    }
}

#[cfg(test)]
mod tests;
