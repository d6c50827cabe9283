//! The ticks not run on their way to the fire record (`firing/ledger.rs`): carried by the next
//! claim, written alone within `NOTE_AFTER` when none comes, given back by a failed claim.

use super::*;
use crate::plan::ledger::{NOTE_AFTER, Reason, TickEntry};

/// Task `name` on `schedule`, with `more` lines of its file.
fn task_on(name: &str, schedule: &str, more: &str) -> Arc<TaskSpec> {
    let defaults = TaskDefaults::for_tests();
    let text = format!("schedule = \"{schedule}\"\ncommand = [\"true\"]\n{more}");
    let path = PathBuf::from(format!("{name}.toml"));
    Arc::new(task::parse_task(name, &path, &text, &defaults).unwrap_or_else(|e| panic!("{e:?}")))
}

impl Shell {
    /// The pending claim with the ticks not run it carries.
    fn claim_carrying(&mut self) -> (CallId, DateTime<Utc>, ClaimIntent, Vec<TickEntry>) {
        if self.has(|a| matches!(a, Action::CountRunsElsewhere { .. })) {
            self.count_elsewhere(0);
        }
        self.take("claim", |a| match a {
            Action::Claim {
                call,
                tick,
                intent,
                ticks,
                ..
            } => Some((*call, *tick, *intent, ticks.clone())),
            _ => None,
        })
    }
}

fn entry(from: DateTime<Utc>, to: DateTime<Utc>, count: u64, reason: Reason) -> TickEntry {
    TickEntry {
        from,
        to,
        count,
        reason,
    }
}

#[test]
fn a_tick_skipped_for_overlap_rides_on_its_own_claim() {
    let mut shell = Shell::new(at(0), vec![every_minute("t", "")], &["t"]);
    shell.read_record(None);
    shell.run_until(at(60));
    shell.prepare();
    let (call, _, intent, ticks) = shell.claim_carrying();
    assert_eq!((intent, ticks), (ClaimIntent::Run, vec![]));
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    shell.spawned();
    // The run is still live at 120 s: the tick is claimed as skipped, with its reason.
    shell.run_until(at(120));
    if shell.has(|a| matches!(a, Action::Prepare { .. })) {
        shell.prepare();
    }
    let (_, tick, intent, ticks) = shell.claim_carrying();
    assert_eq!((tick, intent), (at(120), ClaimIntent::Skip));
    assert_eq!(ticks, [TickEntry::one(at(120), Reason::Overlap)]);
}

#[test]
fn ticks_missed_before_the_start_ride_on_the_next_claim_and_a_failed_claim_gives_them_back() {
    // The record is ten minutes old: the ten missed ticks are dropped (`catch_up = "skip"`) and
    // written with the claim of the next one, at 60 s.
    let specs = vec![every_minute("t", "catch_up = \"skip\"")];
    let mut shell = Shell::new(at(30), specs, &["t"]);
    shell.read_record(Some(at(-600)));
    shell.run_until(at(60));
    shell.prepare();
    let (call, tick, intent, ticks) = shell.claim_carrying();
    let missed = entry(at(-540), at(0), 10, Reason::NoNode);
    assert_eq!((tick, intent), (at(60), ClaimIntent::Run));
    assert_eq!(ticks, [missed]);
    // The claim fails: its retry carries them again.
    shell.answer(call, Answer::Claim(Err(lost())));
    shell.run_until(at(61));
    let (call, tick, _, ticks) = shell.claim_carrying();
    assert_eq!((tick, ticks), (at(60), vec![missed]));
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    shell.spawned();
    // Written: the next claim (skipped, the run is live) carries only its own tick.
    shell.run_until(at(120));
    if shell.has(|a| matches!(a, Action::Prepare { .. })) {
        shell.prepare();
    }
    let (_, _, _, ticks) = shell.claim_carrying();
    assert_eq!(ticks, [TickEntry::one(at(120), Reason::Overlap)]);
}

#[test]
fn ticks_not_run_with_no_claim_coming_are_written_alone_within_a_minute() {
    // Hourly, ten hours missed, `catch_up = "skip"`: no claim before 01:00.
    let specs = vec![task_on("t", "0 0 * * * *", "catch_up = \"skip\"")];
    let start = at(300); // at(0) is on the hour.
    let mut shell = Shell::new(start, specs, &["t"]);
    shell.read_record(Some(start - TimeDelta::hours(10)));
    shell.run_until(start + NOTE_AFTER - ms(1));
    assert!(!shell.has_claim(), "{:?}", shell.actions);
    shell.run_until(start + NOTE_AFTER);
    let (call, tick, intent, ticks) = shell.claim_carrying();
    let last = start - TimeDelta::minutes(5);
    let first = last - TimeDelta::hours(9);
    assert_eq!(intent, ClaimIntent::Note);
    assert_eq!(tick, last);
    assert_eq!(ticks, [entry(first, last, 10, Reason::NoNode)]);
    // Refused (no longer the leader): forgotten, not written again.
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::NotLeader)));
    shell.run_until(start + NOTE_AFTER * 3);
    assert!(!shell.has_claim(), "{:?}", shell.actions);
}

#[test]
fn a_tick_past_its_starting_deadline_is_noted_as_such() {
    // The timer wakes 5 minutes late (a suspend): the tick is older than its 60 s deadline.
    let specs = vec![task_on("t", "0 0 * * * *", "starting_deadline = \"1m\"")];
    let start = at(300); // at(0) is on the hour.
    let mut shell = Shell::new(start, specs, &["t"]);
    shell.read_record(None);
    let tick = start + TimeDelta::minutes(55);
    shell.now = tick + TimeDelta::minutes(5);
    shell.core.handle_timeout(shell.now);
    shell.drain();
    shell.run_until(shell.now + NOTE_AFTER);
    let (_, _, intent, ticks) = shell.claim_carrying();
    assert_eq!(intent, ClaimIntent::Note);
    assert_eq!(ticks, [TickEntry::one(tick, Reason::Deadline)]);
}

/// Simulation seed 135: a caught-up tick that waited behind a long run past its
/// `starting_deadline` was dropped with a log line and no ledger entry: nothing accounted for it.
#[test]
fn a_caught_up_tick_dropped_past_its_deadline_is_in_the_ledger() {
    let spec = every_minute(
        "t",
        "overlap = \"skip\"\ncatch_up = \"all\"\nstarting_deadline = \"100s\"",
    );
    let mut shell = Shell::new(at(190), vec![spec], &["t"]);
    shell.read_record(Some(at(60)));
    shell.count_elsewhere(0);
    shell.prepare();
    let (call, tick, _, _) = shell.claim_carrying();
    assert_eq!(tick, at(120));
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    let run = shell.spawned().0;
    // 180 waits for the run, which ends when 180 is 110 s old: dropped, and noted so.
    shell.run_until(at(290));
    shell.handle(Input::RunEnded { run });
    if shell.has(|a| matches!(a, Action::CountRunsElsewhere { .. })) {
        shell.count_elsewhere(0);
    }
    shell.prepare();
    let (_, tick, _, ticks) = shell.claim_carrying();
    assert_eq!(tick, at(240));
    assert_eq!(ticks, [TickEntry::one(at(180), Reason::Deadline)]);
}

/// A review found a claim refused as done dropping the ticks not run it carried: no claim of
/// the task comes after it. They are written alone at once, and the task fires no more.
#[test]
fn a_claim_refused_as_done_writes_the_ticks_it_carried_and_the_task_stops() {
    let specs = vec![every_minute("t", "catch_up = \"skip\"\nmax_runs = 3")];
    let mut shell = Shell::new(at(30), specs, &["t"]);
    shell.read_record(Some(at(-600)));
    shell.run_until(at(60));
    shell.prepare();
    let (call, _, _, ticks) = shell.claim_carrying();
    let missed = entry(at(-540), at(0), 10, Reason::NoNode);
    assert_eq!(ticks, [missed]);
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Done { runs: 3 })));
    let (call, tick, intent, ticks) = shell.claim_carrying();
    assert_eq!(
        (tick, intent, ticks),
        (at(0), ClaimIntent::Note, vec![missed])
    );
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    shell.run_until(at(600));
    assert!(!shell.has_claim(), "{:?}", shell.actions);
}
