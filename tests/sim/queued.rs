//! The checker's rules of `overlap = "queue"`, from the fire-record writes the model sees: at
//! most one tick waits (a write never replaces one queued tick with another), and a queued
//! tick is started once (the write that clears it is its claim to run; a second is a double
//! claim), and an operator's write never drops one. That a queued tick starts only after the live run ended is `check_overlap`'s rule,
//! as for `skip`; that it runs once is `on_run`'s.

use chrono::{DateTime, Utc};

use crate::checker::{Checker, ClaimRec, Kind, Violation};
use crate::scenario::Knobs;
use crate::{Ms, NodeIx, ScenarioKind, SessionId, TaskIx, env_u64, knob_env, run_real, secs};
use zkcron::coord::records::FireRecord;

impl Checker {
    /// A write of task `t`'s fire record from `before` to `after` by `node` (`session`): what
    /// it did to the queued tick. Returns whether it started one (then it is no fresh claim).
    pub(crate) fn on_queue_write(
        &mut self,
        at: Ms,
        t: TaskIx,
        before: Option<&FireRecord>,
        after: &FireRecord,
        node: NodeIx,
        session: SessionId,
    ) -> bool {
        let was = before.and_then(|b| b.queued);
        match (was, after.queued) {
            (Some(old), Some(new)) if old != new => {
                self.violate(
                    Kind::TwoQueued,
                    at,
                    t,
                    new,
                    format!(
                        "n{node} queued tick {:.3}s while tick {:.3}s was queued already (at most one waits)",
                        secs(new),
                        secs(old)
                    ),
                );
                false
            }
            (Some(queued), None) => {
                let claims = self.claims.entry((t, queued)).or_default();
                let started = claims.len() > 1;
                claims.push(ClaimRec { at, node, session });
                if started {
                    self.violate(
                        Kind::DoubleClaim,
                        at,
                        t,
                        queued,
                        format!("n{node} started the queued tick {:.3}s again", secs(queued)),
                    );
                }
                true
            }
            _ => false,
        }
    }

    /// A write of task `t`'s fire record by the operator (no node): it may move the record
    /// past a paused period, never drop the tick queued behind a live run (claimed, it would
    /// never run). The queued tick of a record that moves on stays, as `zkcron resume` keeps it.
    pub(crate) fn on_operator_write(
        &mut self,
        at: Ms,
        t: TaskIx,
        before: Option<&FireRecord>,
        after: &FireRecord,
    ) {
        if let Some(queued) = before.and_then(|b| b.queued)
            && after.queued.is_none()
        {
            self.violate(
                Kind::QueuedTickDropped,
                at,
                t,
                queued,
                format!(
                    "an operator's write dropped the queued tick {:.3}s (claimed, it never runs)",
                    secs(queued)
                ),
            );
        }
    }

    fn violate(&mut self, kind: Kind, at: Ms, task: TaskIx, tick: DateTime<Utc>, detail: String) {
        self.violations.push(Violation {
            kind,
            at,
            task: Some(task),
            tick: Some(tick),
            detail,
        });
    }
}

/// The queued kind of scenario (`Knobs::queued`: most tasks have `overlap = "queue"`) among
/// every fault and operator's action: a tick queued behind a live run starts after it ended,
/// at most one waits, and nothing runs twice. A long run draws this kind among the others
/// (`ScenarioKind`).
#[test]
fn queued_overlap_holds_through_the_default_faults() {
    let knobs = ScenarioKind::Queued.knobs(Knobs::DEFAULT);
    let scenarios = env_u64("ZKCRON_SIM_QUEUE_SCENARIOS").unwrap_or(100);
    let mut started = 0;
    for seed in 0..scenarios {
        let outcome = run_real(seed, knobs, false);
        assert!(
            outcome.violations.is_empty(),
            "seed {seed}: {}\nreplay: ZKCRON_SIM_SEED={seed} {}cargo test --test sim shard_0",
            outcome.report,
            knob_env(knobs)
        );
        started += outcome.stats.queued_started;
    }
    assert!(
        started > 0,
        "no queued tick started in {scenarios} scenarios"
    );
}
