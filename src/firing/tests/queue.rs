//! `overlap = "queue"` on injected time: a tick due while a run is live is claimed as queued,
//! a later one as dropped, and the queued one starts when no run is live, here or elsewhere.

use super::*;

impl Shell {
    /// Answers the read of the queued tick with `queued`.
    fn read_queued(&mut self, queued: Option<DateTime<Utc>>) {
        let call = self.take("queued tick read", |a| match a {
            Action::ReadQueued { call, .. } => Some(*call),
            _ => None,
        });
        self.answer(call, Answer::Queued(Ok(queued)));
    }

    /// The queued tick's start after the runs elsewhere were counted (none): prepared, claimed
    /// with `RunQueued`, won and spawned; returns the spawn's fire id and due time.
    fn start_queued(&mut self) -> (String, DateTime<Utc>) {
        self.count_elsewhere(0);
        let tick = self.prepare();
        let (call, claimed, intent) = self.claim();
        assert_eq!((claimed, intent), (tick.instant, ClaimIntent::RunQueued));
        self.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
        let (_, fire_id, due, _) = self.spawned();
        (fire_id, due)
    }
}

fn queue_task() -> Vec<Arc<TaskSpec>> {
    vec![every_minute("t", "overlap = \"queue\"")]
}

#[test]
fn a_tick_due_during_a_run_is_queued_a_later_one_dropped_and_the_queued_one_starts_at_the_end() {
    let mut shell = Shell::new(at(0), queue_task(), &["t"]);
    shell.read_record(None);
    shell.read_queued(None);
    shell.run_until(at(60));
    shell.prepare();
    let (call, _, intent) = shell.claim();
    assert_eq!(intent, ClaimIntent::Run);
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    let (run, ..) = shell.spawned();

    // At 120 s the run is live: decided at the instant, claimed as queued, not spawned.
    shell.run_until(at(120) - ms(1));
    shell.prepare();
    assert!(!shell.has_claim(), "{:?}", shell.actions);
    shell.run_until(at(120));
    let (call, tick, intent) = shell.claim();
    assert_eq!((tick, intent), (at(120), ClaimIntent::Queue));
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    assert!(!shell.has(|a| matches!(a, Action::Spawn(_))));

    // At 180 s one waits already: dropped.
    shell.run_until(at(180));
    if shell.has(|a| matches!(a, Action::Prepare { .. })) {
        shell.prepare();
    }
    let (call, tick, intent) = shell.claim();
    assert_eq!((tick, intent), (at(180), ClaimIntent::Drop));
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));

    // The run ends at 200 s: the queued tick starts at once, as itself.
    shell.run_until(at(200));
    shell.handle(Input::RunEnded { run });
    let (fire_id, due) = shell.start_queued();
    assert_eq!(fire_id, plan::fire_id("t", at(120)));
    assert_eq!(due, at(120), "due already: spawned at once");
    // Nothing waits any more: the next tick due during that run is queued again.
    shell.run_until(at(240));
    if shell.has(|a| matches!(a, Action::Prepare { .. })) {
        shell.prepare();
    }
    let (_, tick, intent) = shell.claim();
    assert_eq!((tick, intent), (at(240), ClaimIntent::Queue));
}

#[test]
fn a_queued_tick_read_at_the_start_waits_for_the_run_on_another_node_to_end() {
    // A new leader (after a handoff, a leader's death, a restart) finds a tick queued.
    let mut shell = Shell::new(at(130), queue_task(), &["t"]);
    shell.read_record(Some(at(120)));
    shell.read_queued(Some(at(120)));
    // A run of the task is live elsewhere: the core waits for its end, without polling.
    shell.count_elsewhere(1);
    let call = shell.take("wait for the runs elsewhere", |a| match a {
        Action::WaitRunsElsewhere { call, .. } => Some(*call),
        _ => None,
    });
    assert!(!shell.has_claim(), "{:?}", shell.actions);
    shell.run_until(at(150));
    shell.answer(call, Answer::RunsEnded(Ok(())));
    let (fire_id, _) = shell.start_queued();
    assert_eq!(fire_id, plan::fire_id("t", at(120)));
}

#[test]
fn a_queued_tick_whose_run_ended_while_its_claim_was_on_its_way_starts_when_won() {
    let mut shell = Shell::new(at(0), queue_task(), &["t"]);
    shell.read_record(None);
    shell.read_queued(None);
    shell.run_until(at(60));
    shell.prepare();
    let (call, ..) = shell.claim();
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    let (run, ..) = shell.spawned();
    shell.run_until(at(120) - ms(1));
    shell.prepare();
    shell.run_until(at(120));
    let (call, _, intent) = shell.claim();
    assert_eq!(intent, ClaimIntent::Queue);
    shell.handle(Input::RunEnded { run });
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    let (fire_id, _) = shell.start_queued();
    assert_eq!(fire_id, plan::fire_id("t", at(120)));
}

#[test]
fn a_refused_start_of_the_queued_tick_forgets_it_and_a_failed_one_keeps_it_waiting() {
    let mut shell = Shell::new(at(130), queue_task(), &["t"]);
    shell.read_record(Some(at(120)));
    shell.read_queued(Some(at(120)));
    shell.count_elsewhere(0);
    shell.prepare();
    let (call, _, intent) = shell.claim();
    assert_eq!(intent, ClaimIntent::RunQueued);
    shell.answer(call, Answer::Claim(Err(lost())));
    assert!(!shell.has(|a| matches!(a, Action::Spawn(_))));
    // Still waiting: the next tick (due with no run live) is dropped and the start tried again.
    shell.run_until(at(180));
    if shell.has(|a| matches!(a, Action::Prepare { .. })) {
        shell.prepare();
    }
    let (_, tick, intent) = shell.take("the tick's claim", |a| match a {
        Action::Claim {
            call, tick, intent, ..
        } if *intent != ClaimIntent::RunQueued => Some((*call, *tick, *intent)),
        _ => None,
    });
    assert_eq!((tick, intent), (at(180), ClaimIntent::Drop));
    shell.count_elsewhere(0);
    shell.prepare();
    let (call, tick, intent) = shell.claim();
    assert_eq!((tick, intent), (at(120), ClaimIntent::RunQueued));
    shell.answer(
        call,
        Answer::Claim(Ok(ClaimOutcome::AlreadyClaimed { record: at(180) })),
    );
    assert!(!shell.has(|a| matches!(a, Action::Spawn(_))));
}

/// A task with `overlap = "queue"` whose tick 60 runs (its run still live) and whose tick 120
/// is being claimed as queued: the shell, the run, and that claim (not answered yet).
fn run_at_60_and_tick_120_to_queue() -> (Shell, RunId, CallId) {
    let mut shell = Shell::new(at(0), queue_task(), &["t"]);
    shell.read_record(None);
    shell.read_queued(None);
    shell.run_until(at(60));
    shell.prepare();
    let (call, _, _) = shell.claim();
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    let (run, ..) = shell.spawned();
    shell.run_until(at(120));
    if shell.has(|a| matches!(a, Action::Prepare { .. })) {
        shell.prepare();
    }
    let (call, tick, intent) = shell.claim();
    assert_eq!((tick, intent), (at(120), ClaimIntent::Queue));
    (shell, run, call)
}

/// Simulation seed 413 (queued overlap on by default): the node lost and regained the lease of
/// a task with `overlap = "queue"` while the claim starting its queued tick was on its way;
/// the task, fired again, counted no live run and claimed the next tick to run, and both claims
/// were won: two runs at once. A queued tick's start still on its way from the task's earlier
/// firing now counts as a live run here, as a run claim does.
#[test]
fn a_queued_tick_s_start_on_its_way_from_before_the_task_was_stopped_counts_as_a_live_run() {
    let (mut shell, run, call) = run_at_60_and_tick_120_to_queue();
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    // The run ends: the queued tick's start is claimed, and the lease goes and comes back
    // while that claim is on its way.
    shell.run_until(at(125));
    shell.handle(Input::RunEnded { run });
    shell.count_elsewhere(0);
    shell.prepare();
    let (queued_claim, tick, intent) = shell.claim();
    assert_eq!((tick, intent), (at(120), ClaimIntent::RunQueued));
    shell.handle(Input::Leadership(leading(&[])));
    shell.handle(Input::Leadership(leading(&["t"])));
    shell.read_record(Some(at(120)));
    shell.read_queued(None);
    shell.run_until(at(180));
    if shell.has(|a| matches!(a, Action::Prepare { .. })) {
        shell.prepare();
    }
    let (call, tick, intent) = shell.claim();
    assert_eq!(
        (tick, intent),
        (at(180), ClaimIntent::Queue),
        "the next tick waits behind the queued tick's start: {:?}",
        shell.actions
    );
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    shell.answer(queued_claim, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    let (_, fire_id, _, _) = shell.spawned();
    assert_eq!(fire_id, plan::fire_id("t", at(120)));
}

/// Simulation seeds 29183, 67271 and 62413 of a 100,000-scenario run (`TwoQueued`): a claim
/// to queue tick 120 (a run was live) was on its way when the task was fired afresh; the new
/// firing read no queued tick and queued tick 180 too, and both claims were won: two ticks
/// waited, and 120 never ran. A claim to queue a tick on its way from an earlier firing now
/// counts as a queued tick (a tick due meanwhile is dropped), and once won its tick waits in
/// the current firing and starts when the run ends.
#[test]
fn a_claim_to_queue_on_its_way_from_before_the_task_was_fired_again_keeps_one_tick_waiting() {
    let (mut shell, run, queue_claim) = run_at_60_and_tick_120_to_queue();
    // The task is fired afresh while that claim is on its way; the queued tick read shows
    // none (it was read before the claim was applied).
    shell.handle(Input::Leadership(leading(&[])));
    shell.handle(Input::Leadership(leading(&["t"])));
    shell.read_record(Some(at(120)));
    shell.read_queued(None);
    // Tick 180 comes while the run is live and the claim to queue 120 is on its way: dropped.
    shell.run_until(at(180));
    if shell.has(|a| matches!(a, Action::Prepare { .. })) {
        shell.prepare();
    }
    let (call, tick, intent) = shell.claim();
    assert_eq!(
        (tick, intent),
        (at(180), ClaimIntent::Drop),
        "a tick due while a claim to queue is on its way is dropped: {:?}",
        shell.actions
    );
    shell.answer(call, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    // The earlier claim is won: its tick waits here and starts when the run ends.
    shell.answer(queue_claim, Answer::Claim(Ok(ClaimOutcome::Claimed)));
    shell.run_until(at(185));
    shell.handle(Input::RunEnded { run });
    let (fire_id, _) = shell.start_queued();
    assert_eq!(fire_id, plan::fire_id("t", at(120)));
}
