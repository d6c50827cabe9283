//! Unit tests of the firing rules on injected time: no runtime, no sleeps, no coordinator. The
//! test plays the shell: it answers the core's calls by hand and moves the clock.

use std::path::PathBuf;
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};

use super::*;
use crate::coord::Leadership;
use crate::task::{self, TaskDefaults};

/// The prepared process of the tests: the fire id it was prepared for.
type Prep = String;

fn at(seconds: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
}

fn ms(millis: i64) -> TimeDelta {
    TimeDelta::milliseconds(millis)
}

/// Task `name` every minute (at second 0), with `more` lines of its file.
fn every_minute(name: &str, more: &str) -> Arc<TaskSpec> {
    let defaults = TaskDefaults::for_tests();
    let text = format!("schedule = \"0 * * * * *\"\ncommand = [\"true\"]\n{more}");
    let path = PathBuf::from(format!("{name}.toml"));
    Arc::new(task::parse_task(name, &path, &text, &defaults).unwrap_or_else(|e| panic!("{e:?}")))
}

fn leading(names: &[&str]) -> Leadership {
    Leadership {
        tasks: Arc::new(names.iter().map(|n| Arc::from(*n)).collect()),
        ..Leadership::default()
    }
}

fn lost() -> CoordError {
    CoordError::NotConnected { context: "claim" }
}

/// The core and the actions it asked for, not yet looked at.
struct Shell {
    core: Firing<Prep>,
    now: DateTime<Utc>,
    actions: VecDeque<Action<Prep>>,
}

impl Shell {
    /// A node at `now` that loaded `specs` and leads `led`.
    fn new(now: DateTime<Utc>, specs: Vec<Arc<TaskSpec>>, led: &[&str]) -> Shell {
        let mut shell = Shell {
            core: Firing::new(FiringConfig::default(), now),
            now,
            actions: VecDeque::new(),
        };
        shell.handle(Input::Load(specs));
        shell.handle(Input::Leadership(leading(led)));
        shell
    }

    fn handle(&mut self, input: Input<Prep>) {
        self.core.handle(input, self.now);
        self.drain();
    }

    fn drain(&mut self) {
        while let Some(action) = self.core.poll() {
            self.actions.push_back(action);
        }
    }

    /// Moves the clock to `until`, handling every wake-up on the way at its instant.
    fn run_until(&mut self, until: DateTime<Utc>) {
        while let Some(next) = self.core.poll_timeout()
            && next <= until
        {
            self.now = self.now.max(next);
            self.core.handle_timeout(self.now);
            self.drain();
        }
        self.now = until;
    }

    /// The first pending action `pick` accepts (and removes), or a panic listing them.
    fn take<T>(&mut self, what: &str, pick: impl Fn(&Action<Prep>) -> Option<T>) -> T {
        let i = self.actions.iter().position(|a| pick(a).is_some());
        let Some(i) = i else {
            panic!("no {what} at {}; pending: {:?}", self.now, self.actions);
        };
        pick(&self.actions.remove(i).unwrap()).unwrap()
    }

    /// Whether an action `pick` accepts is pending.
    fn has(&self, pick: impl Fn(&Action<Prep>) -> bool) -> bool {
        self.actions.iter().any(pick)
    }

    fn answer(&mut self, call: CallId, answer: Answer<Prep>) {
        self.handle(Input::Answer { call, answer });
    }

    /// Answers the fire record read of the task with `record`.
    fn read_record(&mut self, record: Option<DateTime<Utc>>) {
        let call = self.take("fire record read", |a| match a {
            Action::ReadFireRecord { call, .. } => Some(*call),
            _ => None,
        });
        self.answer(call, Answer::FireRecord(Ok(record)));
    }

    /// Answers a preparation; returns the tick it was for.
    fn prepare(&mut self) -> Tick {
        let (call, tick, fire_id) = self.take("preparation", |a| match a {
            Action::Prepare {
                call,
                tick,
                fire_id,
                ..
            } => Some((*call, *tick, fire_id.clone())),
            _ => None,
        });
        self.answer(call, Answer::Prepared(fire_id));
        tick
    }

    /// The pending claim: its call, tick and intent (no run elsewhere, if the core asks).
    fn claim(&mut self) -> (CallId, DateTime<Utc>, ClaimIntent) {
        if self.has(|a| matches!(a, Action::CountRunsElsewhere { .. })) {
            self.count_elsewhere(0);
        }
        self.take("claim", |a| match a {
            Action::Claim {
                call, tick, intent, ..
            } => Some((*call, *tick, *intent)),
            _ => None,
        })
    }

    fn count_elsewhere(&mut self, runs: usize) {
        let call = self.take("count of runs elsewhere", |a| match a {
            Action::CountRunsElsewhere { call, .. } => Some(*call),
            _ => None,
        });
        self.answer(call, Answer::RunsElsewhere(Ok(runs)));
    }

    /// The pending spawn: its run, fire id, due time and retries.
    fn spawned(&mut self) -> (RunId, String, DateTime<Utc>, Retries) {
        self.take("spawn", |a| match a {
            Action::Spawn(s) => Some((s.run, s.fire_id.clone(), s.tick.due_at, s.retries)),
            _ => None,
        })
    }

    fn has_claim(&self) -> bool {
        self.has(|a| matches!(a, Action::Claim { .. }))
    }

    /// Starts a led task with no fire record and runs its first tick (at 60 s): claimed and
    /// spawned; returns the run.
    fn first_run(&mut self) -> RunId {
        self.read_record(None);
        self.run_until(at(60));
        self.prepare();
        let (call, tick, intent) = self.claim();
        assert_eq!((tick, intent), (at(60), ClaimIntent::Run));
        self.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
        self.spawned().0
    }
}

#[test]
fn a_tick_is_prepared_a_second_ahead_claimed_within_the_claim_lead_and_spawned_at_its_instant() {
    let mut shell = Shell::new(at(0), vec![every_minute("t", "")], &["t"]);
    shell.read_record(None);

    shell.run_until(at(59) - ms(1));
    assert!(shell.actions.is_empty(), "{:?}", shell.actions);
    shell.run_until(at(59));
    assert_eq!(shell.prepare().instant, at(60));
    assert!(!shell.has_claim());
    shell.run_until(at(60) - plan::CLAIM_AHEAD);
    let (call, tick, intent) = shell.claim();
    assert_eq!((tick, intent), (at(60), ClaimIntent::Run));
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    let (_, fire_id, due, retries) = shell.spawned();
    assert_eq!(fire_id, plan::fire_id("t", at(60)));
    assert_eq!((due, retries), (at(60), Retries::Allowed));
}

#[test]
fn overlap_skip_with_a_run_here_decides_at_the_instant_and_claims_the_tick_as_skipped() {
    let mut shell = Shell::new(at(0), vec![every_minute("t", "overlap = \"skip\"")], &["t"]);
    shell.first_run();

    shell.run_until(at(120) - ms(1));
    // Prepared ahead, but with a run live the check and the claim wait for the instant.
    assert_eq!(shell.prepare().instant, at(120));
    assert!(!shell.has_claim(), "{:?}", shell.actions);
    shell.run_until(at(120));
    let (call, tick, intent) = shell.claim();
    assert_eq!((tick, intent), (at(120), ClaimIntent::Skip));
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    assert!(!shell.has(|a| matches!(a, Action::Spawn(_))));
}

/// Simulation seed 74: the node lost and regained the lease of a task with `overlap = "skip"`
/// while its claim of one tick was on its way; the task, fired again, claimed the next tick to
/// run, and both claims were won: two runs at once. A run claim still on its way from the
/// task's earlier firing now counts as a live run here.
#[test]
fn overlap_skip_counts_a_run_claim_on_its_way_from_before_the_task_was_stopped() {
    let mut shell = Shell::new(at(0), vec![every_minute("t", "overlap = \"skip\"")], &["t"]);
    shell.read_record(None);
    shell.run_until(at(60) - plan::CLAIM_AHEAD);
    shell.prepare();
    let (old_claim, tick, intent) = shell.claim();
    assert_eq!((tick, intent), (at(60), ClaimIntent::Run));
    // The lease goes and comes back while the claim is on its way.
    shell.handle(Input::Leadership(leading(&[])));
    shell.handle(Input::Leadership(leading(&["t"])));
    shell.read_record(Some(at(60)));
    shell.run_until(at(120) - plan::CLAIM_AHEAD);
    shell.prepare();
    assert!(
        !shell.has_claim(),
        "claimed with a run claim on its way: {:?}",
        shell.actions
    );
    // The old claim is won: its run starts; at the instant the next tick is skipped.
    shell.answer(old_claim, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    let (_, fire_id, _, _) = shell.spawned();
    assert_eq!(fire_id, plan::fire_id("t", at(60)));
    shell.run_until(at(120));
    let (_, tick, intent) = shell.claim();
    assert_eq!((tick, intent), (at(120), ClaimIntent::Skip));
}

#[test]
fn overlap_skip_with_a_run_elsewhere_counts_again_at_the_instant() {
    let mut shell = Shell::new(at(0), vec![every_minute("t", "overlap = \"skip\"")], &["t"]);
    shell.read_record(None);
    shell.run_until(at(60) - plan::CLAIM_AHEAD);
    shell.prepare();
    shell.count_elsewhere(1);
    assert!(!shell.has_claim());

    shell.run_until(at(60));
    // The run elsewhere ended by the instant: the tick runs.
    shell.count_elsewhere(0);
    let (_, tick, intent) = shell.claim();
    assert_eq!((tick, intent), (at(60), ClaimIntent::Run));
}

/// A count of runs elsewhere that failed was taken as none: with a run live on another node,
/// the tick was claimed to run beside it. It is counted again after a backoff instead.
#[test]
fn overlap_skip_counts_again_after_a_failed_count_of_runs_elsewhere() {
    let mut shell = Shell::new(at(0), vec![every_minute("t", "overlap = \"skip\"")], &["t"]);
    shell.read_record(None);
    shell.run_until(at(60) - plan::CLAIM_AHEAD);
    shell.prepare();
    let call = shell.take("count of runs elsewhere", |a| match a {
        Action::CountRunsElsewhere { call, .. } => Some(*call),
        _ => None,
    });
    shell.answer(call, Answer::RunsElsewhere(Err(lost())));
    assert!(
        !shell.has_claim(),
        "claimed on a failed count: {:?}",
        shell.actions
    );
    assert!(!shell.has(|a| matches!(a, Action::CountRunsElsewhere { .. })));

    // Counted again after the backoff: a run is live elsewhere, so the tick is skipped.
    shell.run_until(at(60) - plan::CLAIM_AHEAD + FIRST_RETRY);
    shell.count_elsewhere(1);
    assert!(!shell.has_claim());
    shell.run_until(at(60));
    shell.count_elsewhere(1);
    let (_, tick, intent) = shell.claim();
    assert_eq!((tick, intent), (at(60), ClaimIntent::Skip));
}

#[test]
fn overlap_replace_stops_the_run_and_claims_only_once_it_has_ended() {
    let mut shell = Shell::new(
        at(0),
        vec![every_minute("t", "overlap = \"replace\"")],
        &["t"],
    );
    let old = shell.first_run();

    shell.run_until(at(119));
    shell.prepare();
    shell.run_until(at(120));
    let (runs, how) = shell.take("stop", |a| match a {
        Action::StopRuns { runs, how } => Some((runs.clone(), *how)),
        _ => None,
    });
    assert_eq!((runs, how), (vec![old], StopHow::Terminate));
    assert!(!shell.has_claim());
    shell.run_until(at(125));
    assert!(!shell.has_claim());

    shell.handle(Input::RunEnded { run: old });
    let (call, tick, intent) = shell.claim();
    assert_eq!((tick, intent), (at(120), ClaimIntent::Run));
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    assert_eq!(shell.spawned().1, plan::fire_id("t", at(120)));
}

#[test]
fn overlap_allow_claims_ahead_though_a_run_is_live() {
    let spec = every_minute("t", "overlap = \"allow\"");
    let mut shell = Shell::new(at(0), vec![spec], &["t"]);
    shell.first_run();

    shell.run_until(at(119));
    shell.prepare();
    shell.run_until(at(120) - plan::CLAIM_AHEAD);
    let (_, tick, intent) = shell.claim();
    assert_eq!((tick, intent), (at(120), ClaimIntent::Run));
    assert!(!shell.has(|a| matches!(a, Action::CountRunsElsewhere { .. })));
}

#[test]
fn a_refused_claim_starts_nothing_and_the_next_tick_fires() {
    for refusal in [
        ClaimOutcome::AlreadyClaimed { record: at(60) },
        ClaimOutcome::NotLeader,
    ] {
        let mut shell = Shell::new(at(0), vec![every_minute("t", "")], &["t"]);
        shell.read_record(None);
        shell.run_until(at(60));
        shell.prepare();
        let (call, _, _) = shell.claim();
        shell.answer(call, Answer::Claim(Ok(refusal)));
        assert!(!shell.has(|a| matches!(a, Action::Spawn(_))), "{refusal:?}");
        shell.run_until(at(61));
        assert!(!shell.has_claim(), "{refusal:?}: claimed again");

        shell.run_until(at(120));
        shell.prepare();
        assert_eq!(shell.claim().1, at(120), "{refusal:?}");
    }
}

#[test]
fn a_failed_claim_is_retried_with_backoff_and_dropped_once_the_lease_is_lost() {
    let mut shell = Shell::new(at(0), vec![every_minute("t", "")], &["t"]);
    shell.read_record(None);
    shell.run_until(at(60));
    shell.prepare();
    // Prepared at the instant: claimed then.
    let mut sent = at(60);
    for backoff in [100, 200, 400, 800, 1000, 1000] {
        let (call, tick, _) = shell.claim();
        assert_eq!(tick, at(60));
        shell.answer(call, Answer::Claim(Err(lost())));
        shell.run_until(sent + ms(backoff) - ms(1));
        assert!(!shell.has_claim(), "retried before {backoff} ms");
        sent += ms(backoff);
        shell.run_until(sent);
    }

    // The claim is on its way when the lease goes: its failure ends it.
    let (call, _, _) = shell.claim();
    shell.handle(Input::Leadership(leading(&[])));
    shell.answer(call, Answer::Claim(Err(lost())));
    shell.run_until(at(200));
    assert!(!shell.has_claim(), "{:?}", shell.actions);
}

#[test]
fn a_tick_claimed_ahead_is_spawned_at_its_instant_though_the_task_stops_before_it() {
    let mut shell = Shell::new(at(0), vec![every_minute("t", "")], &["t"]);
    shell.read_record(None);
    shell.run_until(at(60) - plan::CLAIM_AHEAD);
    shell.prepare();
    let (call, _, _) = shell.claim();
    // The lease goes while the claim is on its way: the claim is honoured, without retries.
    shell.handle(Input::Leadership(leading(&[])));
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    let (_, _, due, retries) = shell.spawned();
    assert_eq!((due, retries), (at(60), Retries::Cancelled));
    assert!(!shell.has(|a| matches!(a, Action::StopRuns { .. })));
}

#[test]
fn a_task_gained_with_missed_ticks_catches_them_up_one_run_after_another() {
    let spec = every_minute("t", "overlap = \"skip\"\ncatch_up = \"all\"");
    let mut shell = Shell::new(at(190), vec![spec], &["t"]);
    shell.read_record(Some(at(0)));

    let mut previous = None;
    for missed in [60, 120, 180] {
        if let Some(run) = previous {
            // The next caught-up tick waits for the previous run's end.
            assert!(!shell.has_claim(), "{missed}: claimed with a run live");
            shell.handle(Input::RunEnded { run });
        }
        if shell.has(|a| matches!(a, Action::CountRunsElsewhere { .. })) {
            shell.count_elsewhere(0);
        }
        shell.prepare();
        let (call, tick, intent) = shell.claim();
        assert_eq!((tick, intent), (at(missed), ClaimIntent::Run));
        shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
        previous = Some(shell.spawned().0);
    }
}

/// Simulation seed 86: a tick caught up within its task's `starting_deadline` waited behind
/// a long run (`overlap = "skip"`) until it was older than the deadline, and was run all the
/// same. It is dropped when it comes to fire that late.
#[test]
fn a_caught_up_tick_that_waited_past_its_starting_deadline_is_dropped() {
    let spec = every_minute(
        "t",
        "overlap = \"skip\"\ncatch_up = \"all\"\nstarting_deadline = \"100s\"",
    );
    let mut shell = Shell::new(at(190), vec![spec], &["t"]);
    shell.read_record(Some(at(60)));
    // 120 and 180 are within the deadline: 120 runs, 180 waits for its end.
    shell.count_elsewhere(0);
    shell.prepare();
    let (call, tick, intent) = shell.claim();
    assert_eq!((tick, intent), (at(120), ClaimIntent::Run));
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    let run = shell.spawned().0;
    // The run ends when 180 is 110 s old: 180 is dropped; 240, 50 s old, is caught up.
    shell.run_until(at(290));
    assert!(!shell.has_claim(), "claimed with a run live");
    shell.handle(Input::RunEnded { run });
    if shell.has(|a| matches!(a, Action::CountRunsElsewhere { .. })) {
        shell.count_elsewhere(0);
    }
    assert_eq!(shell.prepare().instant, at(240));
    let (_, tick, _) = shell.claim();
    assert_eq!(tick, at(240));
}

/// Simulation seed 4664: a caught-up tick's count of runs elsewhere was answered 25 s late (the
/// process stopped meanwhile), when the tick was older than its `starting_deadline`, and the
/// tick was claimed all the same. The deadline is checked again at the claim.
#[test]
fn a_tick_older_than_its_starting_deadline_by_its_claim_is_not_claimed() {
    let spec = every_minute("t", "overlap = \"skip\"\nstarting_deadline = \"30s\"");
    let mut shell = Shell::new(at(70), vec![spec], &["t"]);
    shell.read_record(Some(at(0)));
    // Tick 60 is caught up (10 s old); its count of runs elsewhere comes back at 95.
    let call = shell.take("count of runs elsewhere", |a| match a {
        Action::CountRunsElsewhere { call, .. } => Some(*call),
        _ => None,
    });
    shell.now = at(95);
    shell.answer(call, Answer::RunsElsewhere(Ok(0)));
    if shell.has(|a| matches!(a, Action::Prepare { .. })) {
        shell.prepare();
    }
    assert!(
        !shell.has(|a| matches!(a, Action::Claim { tick, .. } if *tick == at(60))),
        "{:?}",
        shell.actions
    );
}

#[test]
fn an_orphaned_tick_is_reclaimed_and_rerun_at_its_instant_not_before() {
    let spec = every_minute("t", "on_node_loss = \"rerun\"");
    let mut shell = Shell::new(at(10), vec![spec], &["t"]);
    shell.read_record(Some(at(30)));
    let call = shell.take("orphan check", |a| match a {
        Action::ReadOrphan { call, .. } => Some(*call),
        _ => None,
    });
    shell.answer(call, Answer::Orphan(Ok(Some(at(30)))));
    shell.run_until(at(30) - ms(1));
    assert!(shell.actions.is_empty(), "{:?}", shell.actions);

    shell.run_until(at(30));
    assert!(shell.prepare().catch_up);
    let (call, tick) = shell.take("reclaim", |a| match a {
        Action::Reclaim { call, tick, .. } => Some((*call, *tick)),
        _ => None,
    });
    assert_eq!(tick, at(30));
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    assert_eq!(shell.spawned().1, plan::fire_id("t", at(30)));

    // Then the task is planned from its record as usual.
    shell.run_until(at(60));
    shell.prepare();
    assert_eq!(shell.claim().1, at(60));
}

#[test]
fn a_listed_trigger_is_claimed_once_and_run_as_a_manual_run_even_while_the_task_is_paused() {
    let mut shell = Shell::new(at(0), vec![every_minute("t", "")], &["t"]);
    shell.read_record(None);
    let trigger = Trigger {
        fire_id: "t@manual-0000000001".into(),
        requested_at: at(-5),
    };
    let mut leadership = leading(&["t"]);
    leadership.paused_tasks = Arc::new(["t".to_string()].into());
    leadership.triggers = Arc::new([("t".to_string(), vec![trigger.clone()])].into());
    shell.handle(Input::Leadership(leadership.clone()));
    shell.handle(Input::Leadership(leadership.clone()));

    let tick = shell.prepare();
    assert_eq!((tick.instant, tick.due_at), (at(-5), at(0)));
    let call = shell.take("manual claim", |a| match a {
        Action::ClaimManual { call, trigger, .. } => Some((*call, trigger.clone())),
        _ => None,
    });
    assert_eq!(call.1, trigger);
    shell.answer(call.0, Answer::Claim(Err(lost())));
    shell.run_until(at(0) + ms(100));
    let call = shell.take("manual claim", |a| match a {
        Action::ClaimManual { call, .. } => Some(*call),
        _ => None,
    });
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    let kind = shell.take("spawn", |a| match a {
        Action::Spawn(s) => Some((s.kind, s.fire_id.clone())),
        _ => None,
    });
    assert_eq!(kind, (RunKind::Manual, trigger.fire_id.clone()));
    // A manual run does not count for `overlap`.
    assert_eq!(shell.core.running_of("t"), 0);

    // Listed again: not run again.
    shell.handle(Input::Leadership(leadership));
    assert!(shell.actions.is_empty(), "{:?}", shell.actions);
}

#[test]
fn a_task_paused_by_the_operator_fires_nothing_and_resumes_from_its_fire_record() {
    let mut shell = Shell::new(at(0), vec![every_minute("t", "")], &["t"]);
    shell.read_record(None);
    let mut paused = leading(&["t"]);
    paused.paused_tasks = Arc::new(["t".to_string()].into());
    shell.handle(Input::Leadership(paused));
    shell.run_until(at(130));
    assert!(shell.actions.is_empty(), "{:?}", shell.actions);

    shell.handle(Input::Leadership(leading(&["t"])));
    shell.read_record(Some(at(120)));
    shell.run_until(at(180));
    shell.prepare();
    assert_eq!(shell.claim().1, at(180));
}

#[test]
fn a_node_that_is_not_sure_of_its_leases_fires_nothing() {
    let mut shell = Shell::new(at(0), vec![every_minute("t", "")], &["t"]);
    shell.read_record(None);
    let mut unsure = leading(&["t"]);
    unsure.paused = true;
    shell.handle(Input::Leadership(unsure));
    shell.run_until(at(130));
    assert!(shell.actions.is_empty(), "{:?}", shell.actions);
}

#[test]
fn a_changed_task_is_fired_again_from_its_record_and_still_sees_its_earlier_run() {
    let mut shell = Shell::new(at(0), vec![every_minute("t", "")], &["t"]);
    let old_read = shell.first_run();
    let changed = every_minute("t", "overlap = \"skip\"");
    shell.handle(Input::Unload(vec![("t".into(), Unload::Changed)]));
    shell.handle(Input::Load(vec![changed]));
    shell.handle(Input::Leadership(leading(&["t"])));
    shell.read_record(Some(at(60)));

    shell.run_until(at(120));
    shell.prepare();
    // The run of the old definition is live: the new one skips.
    let (_, tick, intent) = shell.claim();
    assert_eq!((tick, intent), (at(120), ClaimIntent::Skip));
    assert_eq!(shell.core.running_of("t"), 1, "run {old_read}");
}

#[test]
fn a_removed_task_stops_firing_and_its_runs_get_no_further_retries() {
    let mut shell = Shell::new(at(0), vec![every_minute("t", "")], &["t"]);
    let run = shell.first_run();
    shell.handle(Input::Unload(vec![("t".into(), Unload::Removed)]));
    let cancelled = shell.take("cancelled retries", |a| match a {
        Action::CancelRetries { runs } => Some(runs.clone()),
        _ => None,
    });
    assert_eq!(cancelled, [run]);
    shell.handle(Input::Load(Vec::new()));
    shell.run_until(at(300));
    assert!(shell.actions.is_empty(), "{:?}", shell.actions);
}

#[test]
fn the_earliest_wake_up_of_many_idle_tasks_is_the_next_due() {
    let specs: Vec<Arc<TaskSpec>> = (0..1000)
        .map(|i| every_minute(&format!("t{i:04}"), ""))
        .collect();
    let names: Vec<String> = specs.iter().map(|s| s.name.to_string()).collect();
    let led: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut shell = Shell::new(at(0), specs, &led);
    // At most STARTS_IN_FLIGHT fire records are read at once.
    for _ in 0..1000 {
        let reads = shell
            .actions
            .iter()
            .filter(|a| matches!(a, Action::ReadFireRecord { .. }))
            .count();
        assert!(reads <= STARTS_IN_FLIGHT, "{reads} reads at once");
        shell.read_record(None);
    }
    assert_eq!(shell.core.poll_timeout(), Some(at(60) - PREPARE_AHEAD));
}

#[test]
fn after_a_session_loss_the_runs_of_a_task_with_kill_on_session_loss_are_stopped() {
    let specs = vec![
        every_minute("keep", ""),
        every_minute("kill", "kill_on_session_loss = true"),
    ];
    let mut shell = Shell::new(at(0), specs, &["keep", "kill"]);
    shell.read_record(None);
    shell.read_record(None);
    shell.run_until(at(60));
    let mut runs = Vec::new();
    for _ in 0..2 {
        shell.prepare();
    }
    for _ in 0..2 {
        let (call, _, _) = shell.claim();
        shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
        runs.push(shell.take("spawn", |a| match a {
            Action::Spawn(s) => Some((s.run, s.task.to_string())),
            _ => None,
        }));
    }
    let mut lost = leading(&["keep", "kill"]);
    lost.session_losses = 1;
    shell.handle(Input::Leadership(lost));

    let stopped = shell.take("stop", |a| match a {
        Action::StopRuns {
            runs,
            how: StopHow::Terminate,
        } => Some(runs.clone()),
        _ => None,
    });
    let kill_run = runs.iter().find(|(_, task)| task == "kill").unwrap().0;
    assert_eq!(stopped, [kill_run]);
    assert!(!shell.has(|a| matches!(
        a,
        Action::StopRuns {
            how: StopHow::Terminate | StopHow::KillNow,
            ..
        }
    )));
}

/// Seed 17417 of the simulation: a node won its claim of a tick, then its clock was stepped
/// back, so its spawn waited 17 s for the instant on that clock; meanwhile its session expired
/// and its run record with it, another node took the lease and ran the next tick, and the
/// first node then started the old tick beside it (`overlap = "skip"` broken). After a session
/// loss, every run whose spawn still waits is withdrawn.
#[test]
fn a_claimed_run_whose_session_ended_before_its_spawn_is_withdrawn() {
    let mut shell = Shell::new(at(0), vec![every_minute("t", "")], &["t"]);
    shell.read_record(None);
    shell.run_until(at(60));
    shell.prepare();
    let (call, _, _) = shell.claim();
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    let run = shell.take("spawn", |a| match a {
        Action::Spawn(s) => Some(s.run),
        _ => None,
    });

    let mut lost = leading(&[]);
    lost.session_losses = 1;
    shell.handle(Input::Leadership(lost));
    let withdrawn = shell.take("withdraw", |a| match a {
        Action::StopRuns {
            runs,
            how: StopHow::Unspawned,
        } => Some(runs.clone()),
        _ => None,
    });
    assert_eq!(withdrawn, [run]);
}

#[test]
fn at_shutdown_a_claim_on_its_way_is_honoured_without_retries_and_nothing_more_is_claimed() {
    let mut shell = Shell::new(at(0), vec![every_minute("t", "")], &["t"]);
    let run = shell.first_run();
    shell.run_until(at(119));
    shell.prepare();
    shell.run_until(at(120) - plan::CLAIM_AHEAD);
    // `first_run`'s run is still live, so the default `overlap = "skip"` decides at the instant.
    shell.handle(Input::RunEnded { run });
    shell.run_until(at(120));
    let (call, _, _) = shell.claim();

    shell.handle(Input::Shutdown);
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    assert_eq!(shell.spawned().3, Retries::Cancelled);
    shell.handle(Input::Leadership(leading(&["t"])));
    shell.run_until(at(600));
    assert!(shell.actions.is_empty(), "{:?}", shell.actions);
}

#[test]
fn a_wall_clock_jump_asks_every_sleeping_planner_again_at_once() {
    let mut shell = Shell::new(at(0), vec![every_minute("t", "")], &["t"]);
    shell.read_record(None);
    assert_eq!(shell.core.poll_timeout(), Some(at(59)));
    // The clock was stepped forward past the tick: it is fired now, not at the old wake-up.
    shell.now = at(61);
    shell.handle(Input::ClockJumped);
    assert_eq!(shell.core.poll_timeout(), Some(at(61)));
    shell.run_until(at(61));
    shell.count_elsewhere(0);
    shell.prepare();
    assert_eq!(shell.claim().1, at(60));
}

/// An idle task is one table entry, not a task of its own: it must stay small, because a node
/// keeps one for each of 10,000 tasks.
#[test]
fn an_idle_tasks_entry_stays_small() {
    let entry = std::mem::size_of::<Option<Entry<crate::executor::PreparedRun>>>();
    let loaded = std::mem::size_of::<Loaded>();
    assert!(entry + loaded <= 128, "{entry} + {loaded} bytes a task");
}

mod backfill;
mod chained;
mod ledger;
mod pool;
mod queue;
mod reload;
mod start_order;
