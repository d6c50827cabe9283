//! The firing rules of backfills, on injected time.

use super::*;
use crate::coord::backfill::{self, Backfill};

const NAME: &str = "t@backfill-0000000000";

/// Leads `t` with one backfill of the ticks in [-600 s, -480 s), `done` the newest claimed.
fn backfilling(done: Option<DateTime<Utc>>) -> Leadership {
    let mut leadership = leading(&["t"]);
    let listed = Backfill {
        name: NAME.into(),
        from: at(-600),
        to: at(-480),
        done,
    };
    leadership.backfills = Arc::new([("t".to_string(), vec![listed])].into());
    leadership
}

impl Shell {
    /// Prepares and answers the pending backfill claim with `outcome`; its fire id.
    fn claim_backfill(&mut self, outcome: ClaimOutcome) -> String {
        self.prepare();
        let (call, trigger) = self.take("backfill claim", |a| match a {
            Action::ClaimManual { call, trigger, .. } => Some((*call, trigger.clone())),
            _ => None,
        });
        self.answer(call, Answer::Claim(Ok(outcome)));
        trigger.fire_id
    }

    fn spawned_backfill(&mut self) -> (RunId, String, DateTime<Utc>) {
        self.take("backfill spawn", |a| match a {
            Action::Spawn(s) if s.kind == RunKind::Backfill => {
                Some((s.run, s.fire_id.clone(), s.tick.instant))
            }
            _ => None,
        })
    }
}

#[test]
fn backfill_ticks_run_oldest_first_one_at_a_time_under_their_fire_ids() {
    let mut shell = Shell::new(at(0), vec![every_minute("t", "")], &["t"]);
    shell.read_record(None);
    shell.handle(Input::Leadership(backfilling(None)));
    let fire_id = shell.claim_backfill(ClaimOutcome::Claimed);
    assert_eq!(fire_id, backfill::fire_id(NAME, at(-600)));
    let (run, spawned_id, tick) = shell.spawned_backfill();
    assert_eq!((spawned_id, tick), (fire_id, at(-600)));
    // A backfill run does not count for the scheduled ticks' `overlap`.
    assert_eq!(shell.core.running_of("t"), 0);

    // Listed again while it runs (a listing out of date): nothing more starts.
    shell.handle(Input::Leadership(backfilling(None)));
    assert!(shell.actions.is_empty(), "{:?}", shell.actions);

    // It ended; the listing still says nothing was claimed: the next tick goes on after the
    // one this node claimed.
    shell.handle(Input::RunEnded { run });
    let fire_id = shell.claim_backfill(ClaimOutcome::Claimed);
    assert_eq!(fire_id, backfill::fire_id(NAME, at(-540)));
    let (run, _, _) = shell.spawned_backfill();
    shell.handle(Input::RunEnded { run });
    // The range holds no tick after -540 s.
    shell.handle(Input::Leadership(backfilling(Some(at(-540)))));
    assert!(
        !shell.has(|a| matches!(a, Action::Prepare { .. })),
        "{:?}",
        shell.actions
    );
}

#[test]
fn a_tick_the_backend_refuses_is_not_asked_again_until_the_listing_changes() {
    let mut shell = Shell::new(at(0), vec![every_minute("t", "")], &["t"]);
    shell.read_record(None);
    shell.handle(Input::Leadership(backfilling(None)));
    // Claimed by a leader before this one, which the listing does not show yet.
    shell.claim_backfill(ClaimOutcome::AlreadyClaimed { record: at(-600) });
    assert!(shell.actions.is_empty(), "{:?}", shell.actions);
    shell.handle(Input::Leadership(backfilling(Some(at(-600)))));
    let fire_id = shell.claim_backfill(ClaimOutcome::Claimed);
    assert_eq!(fire_id, backfill::fire_id(NAME, at(-540)));
}

#[test]
fn a_backfill_tick_waits_for_a_live_scheduled_run_of_a_task_that_does_not_allow_overlap() {
    let mut shell = Shell::new(at(0), vec![every_minute("t", "")], &["t"]);
    let scheduled = shell.first_run();
    shell.handle(Input::Leadership(backfilling(None)));
    assert!(
        !shell.has(|a| matches!(a, Action::ClaimManual { .. } | Action::Prepare { .. })),
        "{:?}",
        shell.actions
    );
    shell.handle(Input::RunEnded { run: scheduled });
    shell.claim_backfill(ClaimOutcome::Claimed);
    assert_eq!(shell.spawned_backfill().2, at(-600));
}

#[test]
fn a_paused_task_runs_no_backfill_tick() {
    let mut shell = Shell::new(at(0), vec![every_minute("t", "")], &["t"]);
    shell.read_record(None);
    let mut leadership = backfilling(None);
    leadership.paused_tasks = Arc::new(["t".to_string()].into());
    shell.handle(Input::Leadership(leadership));
    assert!(
        !shell.has(|a| matches!(a, Action::ClaimManual { .. } | Action::Prepare { .. })),
        "{:?}",
        shell.actions
    );
}
