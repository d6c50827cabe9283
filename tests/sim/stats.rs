//! What a scenario did, counted (claims, runs, fenced claims, expiries, ...), summed over
//! the scenarios of a shard or a test and printed with its result.

#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Stats {
    pub(crate) scenarios: u64,
    pub(crate) events: u64,
    pub(crate) claims: u64,
    pub(crate) runs: u64,
    pub(crate) already_claimed: u64,
    pub(crate) not_leader: u64,
    pub(crate) conflicts: u64,
    /// Claims the server refused: session expired, lease check failed, record version moved.
    pub(crate) fenced_expired: u64,
    pub(crate) fenced_lease: u64,
    pub(crate) fenced_version: u64,
    pub(crate) replies_lost: u64,
    pub(crate) expiries: u64,
    /// Claims won at the server that no node ran: the claimer crashed or stopped before the
    /// reply, or could not tell from the record after losing the reply (at most once).
    pub(crate) claimed_not_run: u64,
    pub(crate) live_ticks: u64,
    /// Ticks the ledger check found claimed or recorded as not run.
    pub(crate) ledger_ticks: u64,
    /// Tasks and units with `max_runs` whose runs were counted.
    pub(crate) limited_slots: u64,
    pub(crate) on_time_checked: u64,
    /// Queued ticks started (`overlap = "queue"`).
    pub(crate) queued_started: u64,
    /// Backfill ticks run.
    pub(crate) backfill_runs: u64,
    /// Chained runs (`after`) run.
    pub(crate) chained_runs: u64,
    /// Chained runs of a paused task, claimed and skipped.
    pub(crate) chained_skipped: u64,
    /// Failed runs that paused a pooled task (every item of it).
    pub(crate) pooled_failure_pauses: u64,
}

impl Stats {
    pub(crate) fn add(&mut self, o: &Stats) {
        self.scenarios += o.scenarios;
        self.events += o.events;
        self.claims += o.claims;
        self.runs += o.runs;
        self.already_claimed += o.already_claimed;
        self.not_leader += o.not_leader;
        self.conflicts += o.conflicts;
        self.queued_started += o.queued_started;
        self.fenced_expired += o.fenced_expired;
        self.fenced_lease += o.fenced_lease;
        self.fenced_version += o.fenced_version;
        self.replies_lost += o.replies_lost;
        self.expiries += o.expiries;
        self.claimed_not_run += o.claimed_not_run;
        self.live_ticks += o.live_ticks;
        self.ledger_ticks += o.ledger_ticks;
        self.limited_slots += o.limited_slots;
        self.on_time_checked += o.on_time_checked;
        self.backfill_runs += o.backfill_runs;
        self.chained_runs += o.chained_runs;
        self.chained_skipped += o.chained_skipped;
        self.pooled_failure_pauses += o.pooled_failure_pauses;
    }
}
