//! The invariant checker: the violations it records as a scenario runs, and the liveness,
//! convergence and timeliness it judges at the end (the scenario's statistics: `stats.rs`).

use zkcron::plan::ON_TIME_TOLERANCE;
use zkcron::task::OverlapPolicy;

use super::*;

// ------------------------------------------------------------------------------------------------
// The invariant checker
// ------------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    DoubleClaim,
    RecordBackwards,
    ClaimWithoutLease,
    /// A node deleted a lease another session holds.
    ForeignLeaseDelete,
    TickEarly,
    RunWithoutClaim,
    RunTwice,
    TickLost,
    TickLate,
    /// After settling, a task's lease is not held by the node ranked first for it.
    NotConverged,
    /// A node keeps asking for work at one instant (a busy loop in virtual time).
    BusyLoop,
    /// A manual run (`zkcron trigger`) was claimed to run twice.
    ManualRunTwice,
    /// A backfill tick (`zkcron backfill`) was claimed to run twice.
    BackfillTickTwice,
    /// A chained run (`after`) was claimed to run twice.
    ChainedRunTwice,
    /// A chained run requested with a success's stored end never ran, and no node that
    /// claimed it died.
    ChainedRunLost,
    /// The daemon asked to claim a scheduled tick to run while its leadership said the
    /// operator had paused the task.
    ClaimWhilePaused,
    /// The daemon asked to claim a tick to run that was older than the task's
    /// `starting_deadline` by its node's clock.
    TickPastDeadline,
    /// The daemon asked to claim a tick of a task with `catch_up = "skip"` to run that was
    /// older than the planner's on-time tolerance by its node's clock: a missed tick.
    MissedTickRun,
    /// A run of a task with `overlap = "skip"` or `"queue"` started while another run of the
    /// task was live (its process not exited, its node's session alive).
    OverlapRun,
    /// A fire record's queued tick was replaced by another (`overlap = "queue"`: at most one
    /// waits).
    TwoQueued,
    /// A tick of a task with `pause_on_failure`, claimed after a failed run's result was
    /// stored (and no resume since), ran.
    RanAfterFailurePause,
    /// An operator's write (`zkcron resume`) cleared a fire record's queued tick without
    /// starting it: a claimed tick that never runs.
    QueuedTickDropped,
    /// A tick up to the newest one a fire record accounts for was neither claimed nor in the
    /// record's tick ledger.
    TickUnaccounted,
    /// A ledger entry's reason does not hold for its task or ticks.
    ReasonWrong,
    /// A task (or unit) ran more distinct scheduled ticks than its `max_runs`.
    RunsPastMax,
}

/// A run whose process has not exited.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LiveRun {
    pub(crate) task: TaskIx,
    pub(crate) tick: DateTime<Utc>,
    pub(crate) node: NodeIx,
    pub(crate) session: SessionId,
}

#[derive(Debug, Clone)]
pub(crate) struct Violation {
    pub(crate) kind: Kind,
    pub(crate) at: Ms,
    pub(crate) task: Option<TaskIx>,
    pub(crate) tick: Option<DateTime<Utc>>,
    pub(crate) detail: String,
}

impl Violation {
    pub(crate) fn is_safety(&self) -> bool {
        !matches!(
            self.kind,
            Kind::TickLost
                | Kind::TickLate
                | Kind::NotConverged
                | Kind::QueuedTickDropped
                | Kind::TickUnaccounted
                | Kind::ReasonWrong
        )
    }

    /// Whether the run stops here. Claims without the lease and deletes of another's lease are
    /// recorded and the run goes on: it shows whether the record's version check still
    /// prevents a double claim.
    pub(crate) fn stops_run(&self) -> bool {
        self.is_safety()
            && !matches!(
                self.kind,
                Kind::ClaimWithoutLease | Kind::ForeignLeaseDelete
            )
    }
}

/// A successful write of a fire record that moved it to a new tick: a claim, as the server saw
/// it (decoded from the record's JSON).
pub(crate) struct RecordWrite {
    pub(crate) task: TaskIx,
    pub(crate) previous: Option<DateTime<Utc>>,
    pub(crate) tick: DateTime<Utc>,
    /// The node whose session wrote it.
    pub(crate) node: NodeIx,
    pub(crate) session: SessionId,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimRec {
    pub(crate) at: Ms,
    pub(crate) node: NodeIx,
    pub(crate) session: SessionId,
}

/// A run: when, which node, in which session.
pub(crate) type RunRec = (Ms, NodeIx, SessionId);

#[derive(Debug, Default)]
pub(crate) struct Checker {
    pub(crate) claims: BTreeMap<(TaskIx, DateTime<Utc>), Vec<ClaimRec>>,
    pub(crate) runs: BTreeMap<(TaskIx, DateTime<Utc>), Vec<RunRec>>,
    pub(crate) violations: Vec<Violation>,
    /// Manual runs claimed, by fire id: when and by which node.
    pub(crate) manual_runs: BTreeMap<String, Vec<(Ms, usize)>>,
    /// Backfill ticks claimed, by fire id: when and by which node.
    pub(crate) backfill_runs: BTreeMap<String, Vec<(Ms, usize)>>,
    /// Chained runs claimed, by fire id: when and by which node.
    pub(crate) chained_runs: BTreeMap<String, Vec<(Ms, usize)>>,
    /// Chained runs requested with an end a node answered as stored: since when.
    pub(crate) chained_expected: BTreeMap<String, Ms>,
    /// Chained runs claimed and skipped because their task was paused (by the operator or a
    /// failure), as documented: one decision, no run.
    pub(crate) chained_skipped: BTreeSet<String>,
    /// Fire records `zkcron resume` moved past a paused period: the task, the tick the record
    /// named before (if any) and the resume instant. The ticks in between are not caught up.
    pub(crate) resumed: Vec<(TaskIx, Option<DateTime<Utc>>, DateTime<Utc>)>,
    /// Runs whose process has not exited (ended when it exits or its node's process dies).
    pub(crate) live_runs: Vec<LiveRun>,
    /// Tasks whose runs may not overlap (`overlap` other than `allow`) of which a run lasted
    /// longer than 5 s (`Knobs::long_runs`): their caught-up ticks wait one behind another's
    /// run, so they fall behind the schedule by design and are held to no tick's claim.
    pub(crate) outlasted: BTreeSet<TaskIx>,
    /// Tasks with `pause_on_failure` paused by a failed run: the task (never a unit: a pooled
    /// task's pause holds every item), when the failure's result was stored, and when the task
    /// was resumed since (`None`: still paused).
    pub(crate) failure_pauses: Vec<(TaskIx, Ms, Option<Ms>)>,
}

impl Checker {
    /// The process of the run of `tick` of `task` on `node` exited.
    /// The oldest tick of task (or unit) `t` any node claimed.
    pub(crate) fn first_claim(&self, t: TaskIx) -> Option<DateTime<Utc>> {
        self.claims
            .range((t, DateTime::<Utc>::MIN_UTC)..=(t, DateTime::<Utc>::MAX_UTC))
            .next()
            .map(|((_, tick), _)| *tick)
    }

    pub(crate) fn run_exited(&mut self, task: TaskIx, tick: DateTime<Utc>, node: NodeIx) {
        self.live_runs
            .retain(|r| !(r.task == task && r.tick == tick && r.node == node));
    }

    pub(crate) fn violation(
        &mut self,
        kind: Kind,
        at: Ms,
        task: TaskIx,
        tick: DateTime<Utc>,
        detail: String,
    ) {
        self.violations.push(Violation {
            kind,
            at,
            task: Some(task),
            tick: Some(tick),
            detail,
        });
    }

    pub(crate) fn on_claim(
        &mut self,
        at: Ms,
        write: &RecordWrite,
        holder: Option<SessionId>,
        latest: DateTime<Utc>,
    ) {
        let RecordWrite {
            task,
            tick,
            node,
            session,
            ..
        } = *write;
        let earlier = self.claims.entry((task, tick)).or_default();
        let first = earlier.first().copied();
        earlier.push(ClaimRec { at, node, session });
        if let Some(first) = first {
            self.violation(
                Kind::DoubleClaim,
                at,
                task,
                tick,
                format!(
                    "claimed by n{node} (session {}) at {at} ms, already claimed by n{} (session {}) at {} ms",
                    session.0, first.node, first.session.0, first.at
                ),
            );
        }
        if write.previous.is_some_and(|p| p >= tick) {
            self.violation(
                Kind::RecordBackwards,
                at,
                task,
                tick,
                format!(
                    "n{node} moved the record from {:.3}s to {:.3}s",
                    secs(write.previous.unwrap()),
                    secs(tick)
                ),
            );
        }
        if holder != Some(session) {
            self.violation(
                Kind::ClaimWithoutLease,
                at,
                task,
                tick,
                format!(
                    "n{node} claimed with session {} while the lease was held by {:?}",
                    session.0,
                    holder.map(|s| s.0)
                ),
            );
        }
        if tick > latest {
            self.violation(
                Kind::TickEarly,
                at,
                task,
                tick,
                format!("n{node} claimed a tick no node's clock has reached"),
            );
        }
    }

    pub(crate) fn on_run(
        &mut self,
        at: Ms,
        task: TaskIx,
        tick: DateTime<Utc>,
        node: NodeIx,
        session: SessionId,
    ) {
        let won = self.claims.get(&(task, tick)).is_some_and(|claims| {
            claims
                .iter()
                .any(|c| c.node == node && c.session == session && c.at <= at)
        });
        if !won {
            self.violation(
                Kind::RunWithoutClaim,
                at,
                task,
                tick,
                format!(
                    "n{node} (session {}) ran a tick it did not claim",
                    session.0
                ),
            );
        }
        let runs = self.runs.entry((task, tick)).or_default();
        runs.push((at, node, session));
        if runs.len() > 1 {
            let detail = format!("run {} times (time, node, session): {runs:?}", runs.len());
            self.violation(Kind::RunTwice, at, task, tick, detail);
        }
    }
}

/// How long after its tick's age passed `starting_deadline` (or the planner's on-time
/// tolerance) a claim may still be asked for: the planner judges the age when the tick comes
/// due, and the claim can wait behind the claim in flight before it.
const DEADLINE_SLACK: TimeDelta = TimeDelta::seconds(2);

impl Sim<'_> {
    /// The policies the daemon applies before a claim, checked as it asks the node to claim
    /// `tick` of `task` to run, with what it knew then: the node's last leadership (pause) and
    /// its clock (`starting_deadline`; `catch_up = "skip"`: a tick older than the planner's
    /// on-time tolerance was missed).
    pub(crate) fn check_claim_request(&mut self, n: NodeIx, task: &str, tick: DateTime<Utc>) {
        let Some(&t) = self.by_name.get(task) else {
            return;
        };
        if self.procs[n].leadership.paused_tasks.contains(task) {
            self.check.violation(
                Kind::ClaimWhilePaused,
                self.now,
                t,
                tick,
                format!(
                    "n{n} asked to claim tick {:.3}s to run while its leadership said {task} is paused",
                    secs(tick)
                ),
            );
        }
        let age = self.wall(n) - tick;
        if self.sc.tasks[t].rules.catch_up == CatchUpPolicy::Skip
            && age > ON_TIME_TOLERANCE + DEADLINE_SLACK
        {
            self.check.violation(
                Kind::MissedTickRun,
                self.now,
                t,
                tick,
                format!(
                    "n{n} asked to claim tick {:.3}s to run {} ms after it, by its clock: a missed tick, and catch_up = \"skip\"",
                    secs(tick),
                    age.num_milliseconds()
                ),
            );
        }
        if let Some(deadline) = self.sc.tasks[t].rules.starting_deadline
            && age > TimeDelta::from_std(deadline).expect("small") + DEADLINE_SLACK
        {
            self.check.violation(
                Kind::TickPastDeadline,
                self.now,
                t,
                tick,
                format!(
                    "n{n} asked to claim tick {:.3}s to run {} ms after it, by its clock; starting_deadline {deadline:?}",
                    secs(tick),
                    age.num_milliseconds()
                ),
            );
        }
    }

    /// `overlap = "skip"`: a run of `tick` of `task` starts on `n` (its session alive); no
    /// other run of the task may be live anywhere the cluster can see it (a run counts while
    /// its node's session lives: its run record goes with the session). Then it is live
    /// itself.
    pub(crate) fn check_overlap(&mut self, n: NodeIx, task: TaskIx, tick: DateTime<Utc>) {
        let session = self.procs[n]
            .session
            .map_or(SessionId(0), |s| SessionId(s as u64));
        let zk = &self.zk;
        let live: Vec<LiveRun> = self
            .check
            .live_runs
            .iter()
            .filter(|r| r.task == task && zk.alive(r.session.0 as i64))
            .copied()
            .collect();
        // A run started by a node whose session has already expired (a process stopped
        // between its claim and the tick's instant, that spawns the run as it resumes, before
        // it hears of the expiry) is out of the cluster's sight, as the runs of dead sessions.
        if matches!(
            self.sc.tasks[task].overlap,
            OverlapPolicy::Skip | OverlapPolicy::Queue
        ) && zk.alive(session.0 as i64)
            && let Some(other) = live.first()
        {
            self.check.violation(
                Kind::OverlapRun,
                self.now,
                task,
                tick,
                format!(
                    "n{n} started tick {:.3}s while n{}'s run of tick {:.3}s was live (overlap = \"skip\")",
                    secs(tick),
                    other.node,
                    secs(other.tick)
                ),
            );
        }
        self.check.live_runs.push(LiveRun {
            task,
            tick,
            node: n,
            session,
        });
    }

    /// Whether a tick of task `t` may go unclaimed because the operator paused the task: it
    /// lies in a paused period (from shortly before the pause, when a claim may have been
    /// waiting, to the resume), or a resume moved the fire record past it.
    pub(crate) fn paused_over(&self, t: TaskIx, tick: DateTime<Utc>) -> bool {
        // A unit is paused with its task (its own record is what a resume moves).
        let slot = t;
        let t = self.sc.tasks[t].task_of(t);
        let at = |ms: Ms| epoch() + TimeDelta::milliseconds(ms as i64);
        let mut paused_since: Option<Ms> = None;
        for (ms, fault) in &self.sc.faults {
            match fault {
                Fault::Stranger(Meddle::Pause(p)) if *p == t => {
                    paused_since.get_or_insert(*ms);
                }
                Fault::Stranger(Meddle::Resume(p)) if *p == t => {
                    if let Some(since) = paused_since.take()
                        && tick >= at(since.saturating_sub(10_000))
                        && tick <= at(*ms)
                    {
                        return true;
                    }
                }
                Fault::HealAll => {
                    if let Some(since) = paused_since.take()
                        && tick >= at(since.saturating_sub(10_000))
                        && tick <= at(*ms)
                    {
                        return true;
                    }
                }
                _ => {}
            }
        }
        self.check.failure_paused_over(slot, t, tick)
            || self.check.resumed.iter().any(|&(p, from, to)| {
                p == slot && from.is_none_or(|from| tick > from) && tick <= to
            })
    }
}

// ------------------------------------------------------------------------------------------------
// Liveness, convergence and timeliness, judged at the end of a run of the real node
// ------------------------------------------------------------------------------------------------

/// How often a node that claims nothing measures its clock's offset (the node's
/// `CLOCK_PROBE`; README, "Clock skew": "every 30 s").
const CLOCK_PROBE_MS: Ms = 30_000;

impl Sim<'_> {
    /// The state (release, skew) of node `n` at `at`, `None` if it was down.
    pub(crate) fn node_state_at(&self, n: NodeIx, at: Ms) -> Option<NodeState> {
        self.node_log
            .iter()
            .rfind(|(t, node, _)| *node == n && *t <= at)
            .and_then(|(_, _, s)| s.clone())
    }

    pub(crate) fn can_lead(&self, n: NodeIx, task: TaskIx, state: &NodeState) -> bool {
        let def = &self.sc.tasks[task];
        // A task that runs on every node has no lease; a unit is its own node's alone.
        let defined = match (def.unit_of, def.item_of) {
            _ if def.every_node || def.items.is_some() => false,
            (Some((t, node)), _) => node == n && self.procs[n].defines.contains(&t),
            (None, Some((t, _))) => self.procs[n].defines.contains(&t),
            (None, None) => self.procs[n].defines.contains(&task),
        };
        defined
            && def.version_req.as_ref().is_none_or(|r| r.matches(&state.0))
            && state.1.abs() <= self.sc.max_clock_skew_ms
    }

    pub(crate) fn check_liveness(&mut self) {
        let sc = self.sc;
        for ((n, _), start) in std::mem::take(&mut self.open_disturbance) {
            self.disturbed.push((Some(n), start, sc.end));
        }
        let horizon = epoch() + TimeDelta::milliseconds((sc.end - sc.settle) as i64);
        let healed = epoch() + TimeDelta::milliseconds((sc.fault_end + sc.settle) as i64);
        let clock_settled = epoch() + TimeDelta::milliseconds(self.clock_settled() as i64);
        for (t, task) in sc.tasks.iter().enumerate() {
            if task.rules.catch_up != CatchUpPolicy::All || self.check.outlasted.contains(&t) {
                continue;
            }
            // A missed tick older than a short deadline is dropped: such a task is only held
            // to firing on time.
            let every_tick = task
                .rules
                .starting_deadline
                .is_none_or(|d| d.as_millis() as Ms >= sc.end);
            let leaders_at_end = (0..self.procs.len())
                .filter(|&n| !sc.drained_at_end.contains(&n))
                .filter(|&n| {
                    self.node_state_at(n, sc.end)
                        .is_some_and(|s| self.can_lead(n, t, &s))
                })
                .count();
            if leaders_at_end == 0 {
                continue;
            }
            let designated = self.designated_at_end(t);
            let first_claim = self.check.first_claim(t);
            let from = if task.initial_record {
                epoch()
            } else {
                // Without a record nothing before the first claim is missed; but once the
                // cluster has settled, the first tick must be claimed.
                let settled = healed.max(clock_settled) - TimeDelta::seconds(1);
                first_claim.map_or(settled, |c| (c - TimeDelta::milliseconds(1)).min(settled))
            };
            let last = epoch() + TimeDelta::milliseconds(sc.end as i64);
            // Caught-up ticks run one after another (`overlap` other than `allow`): a backlog
            // found late may still be draining at the end (seed 86098: 24 ticks missed until
            // 121 s, runs of 1–3 s). Its newest claim then came long after its tick, and the
            // ticks after it wait their turn: not lost.
            let draining = self
                .check
                .claims
                .range((t, DateTime::<Utc>::MIN_UTC)..=(t, DateTime::<Utc>::MAX_UTC))
                .next_back()
                .and_then(|((_, tick), claims)| Some((*tick, claims.first()?.at)))
                .filter(|(tick, at)| {
                    let tick_ms = (*tick - epoch()).num_milliseconds();
                    task.overlap != OverlapPolicy::Allow
                        && *at as i64 > tick_ms + 5_000
                        && *at + 10_000 > sc.end
                })
                .map(|(tick, _)| tick);
            // A task that ran its `max_runs` fires no more.
            let done = self.done_after(t);
            let mut prev_claim: Option<Ms> = None;
            for tick in task.rules.schedule.ticks_after(from) {
                if tick > last {
                    break;
                }
                let claims = self
                    .check
                    .claims
                    .get(&(t, tick))
                    .cloned()
                    .unwrap_or_default();
                let tick_ms = (tick - epoch()).num_milliseconds();
                // A tick that waits behind a backlog of caught-up earlier ticks (the one before
                // it was claimed after its instant: runs that may not overlap catch up one
                // after another) is late by design, not by its leader's fault.
                let behind = prev_claim.is_some_and(|at| at as i64 > tick_ms);
                prev_claim = claims.first().map(|c| c.at);
                if self.paused_over(t, tick)
                    || draining.is_some_and(|newest| tick > newest)
                    || done.is_some_and(|last| tick > last)
                {
                    continue;
                }
                if tick > horizon || !every_tick {
                    // Too late to require (or the task's deadline may drop it once missed),
                    // but still expected on time in a quiet stretch.
                    if tick_ms >= 0 && !behind {
                        self.check_on_time(t, tick, tick_ms as Ms, claims.first().map(|c| c.at));
                    }
                    continue;
                }
                self.stats.live_ticks += 1;
                match claims.len() {
                    0 => {
                        self.check.violation(
                            Kind::TickLost,
                            sc.end,
                            t,
                            tick,
                            format!(
                                "tick {:.3}s never claimed ({} node(s) could lead the task at the end; {designated})",
                                secs(tick),
                                leaders_at_end
                            ),
                        );
                        continue;
                    }
                    1 => {}
                    _ => continue, // reported as a double claim
                }
                if tick_ms >= 0 && !behind {
                    self.check_on_time(t, tick, tick_ms as Ms, Some(claims[0].at));
                }
            }
        }
    }

    /// When every node whose clock a fault stepped back within `max_clock_skew` while it was
    /// up may lead again. The node measures its skew "before it registers, then every 30 s
    /// and with every claim" (README, "Clock skew"; `CLOCK_PROBE` in the node), and a node
    /// that leads nothing claims nothing: it notices the fixed clock at its next probe, up to
    /// 30 s later, which `settle` (session timeout, vacancy bounds, 10 s) does not cover. Until
    /// then it is not eligible, and a task without a fire record has nothing to catch up
    /// from (seed 2531 with drains: n1's clock stepped back in line 2.5 s before the faults
    /// ended, its probe saw it 29 s later, after tick 60 of t00 and t05, which no other node
    /// could lead). 0 if no such step.
    fn clock_settled(&self) -> Ms {
        let max = self.sc.max_clock_skew_ms;
        self.sc
            .faults
            .iter()
            .filter_map(|(at, fault)| match fault {
                Fault::Skew(n, skew)
                    if skew.abs() <= max
                        && self
                            .node_state_at(*n, at.saturating_sub(1))
                            .is_some_and(|s| s.1.abs() > max) =>
                {
                    // The probe, then registering and taking: a round trip or a few.
                    Some(at + CLOCK_PROBE_MS + 2_000)
                }
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// The node the registered members rank first for `task` now, with its session.
    pub(crate) fn designated_now(&self, task: TaskIx) -> Option<(NodeIx, SessionId)> {
        let registered = &self.member_log.last().expect("starts empty").1;
        let members: Vec<Member> = registered.iter().map(|(_, _, m)| m.clone()).collect();
        let top = designated_for(&self.sc.tasks[task].name, &members)?;
        registered
            .iter()
            .find(|(_, _, m)| m.id == top)
            .map(|(n, s, _)| (*n, *s))
    }

    /// The session holding `task`'s lease znode (0 for a persistent one).
    pub(crate) fn lease_owner(&self, task: TaskIx) -> Option<SessionId> {
        let path = format!("{BASE}/leases/{}", self.sc.tasks[task].name);
        self.zk
            .nodes
            .get(&path)
            .map(|z| SessionId(z.stat.ephemeral_owner as u64))
    }

    /// After settling, every lease is with the node ranked first for its task (a newer
    /// release joining took its tasks over, a holder that was no longer first let go).
    pub(crate) fn check_converged(&mut self) {
        for t in 0..self.sc.tasks.len() {
            let Some((n, session)) = self.designated_now(t) else {
                continue;
            };
            if self.procs[n].skew_ms.abs() > self.sc.max_clock_skew_ms {
                continue; // It may not lead: see the liveness check and the known bug.
            }
            let holder = self.lease_owner(t);
            if holder != Some(session) {
                self.check.violations.push(Violation {
                    kind: Kind::NotConverged,
                    at: self.now,
                    task: Some(t),
                    tick: None,
                    detail: format!(
                        "lease held by session {:x?}, but n{n} (session {:x}) ranks first; ranking: {}",
                        holder.map(|s| s.0),
                        session.0,
                        self.ranking_now(t)
                    ),
                });
            }
        }
    }

    /// The registered members in rank order for `task`: id, release, seed, session.
    pub(crate) fn ranking_now(&self, task: TaskIx) -> String {
        let registered = &self.member_log.last().expect("starts empty").1;
        let members: Vec<Member> = registered.iter().map(|(_, _, m)| m.clone()).collect();
        lease::ranking(&self.sc.tasks[task].name, &members)
            .iter()
            .map(|c| {
                let (_, session, m) = registered
                    .iter()
                    .find(|(_, _, m)| m.id == c.id)
                    .expect("ranked from these");
                format!("{} {} {:016x} {:x}", m.id, m.release, m.seed, session.0)
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Who the registered members rank first for `task` at the end, and whether it may lead.
    pub(crate) fn designated_at_end(&self, task: TaskIx) -> String {
        match self.designated_now(task) {
            None => "no registered member is eligible".to_string(),
            Some((n, _)) => {
                let skew = self.procs[n].skew_ms;
                if skew.abs() > self.sc.max_clock_skew_ms {
                    format!(
                        "designated n{n} may not lead: its clock is off by {skew} ms, so the backups take the lease and release it at once"
                    )
                } else {
                    format!("designated n{n} may lead")
                }
            }
        }
    }

    /// A tick fires about on time when one node was ranked first for the task, healthy and
    /// able to lead, from `settle` before the tick until `grace` after it, whatever happened to
    /// the other nodes. `grace` is how far that node's clock is behind, plus 2 s.
    pub(crate) fn check_on_time(
        &mut self,
        t: TaskIx,
        tick: DateTime<Utc>,
        tick_ms: Ms,
        claimed_at: Option<Ms>,
    ) {
        let sc = self.sc;
        if tick_ms < sc.settle {
            return;
        }
        let from = tick_ms - sc.settle;
        let name = &sc.tasks[t].name;
        let designated = |members: &[Registered]| {
            let list: Vec<Member> = members.iter().map(|(_, _, m)| m.clone()).collect();
            let top = designated_for(name, &list)?;
            members
                .iter()
                .find(|(_, _, m)| m.id == top)
                .map(|(n, s, _)| (*n, *s))
        };
        let first = self.member_log.partition_point(|(at, _)| *at <= from) - 1;
        let Some((leader, session)) = designated(&self.member_log[first].1) else {
            return;
        };
        let Some(state) = self.node_state_at(leader, from) else {
            return;
        };
        if !self.can_lead(leader, t, &state) {
            return;
        }
        let grace = (-state.1).max(0) as Ms + 2_000;
        let to = tick_ms + grace;
        if to > sc.end {
            return;
        }
        let stable = self.member_log[first + 1..]
            .iter()
            .take_while(|(at, _)| *at <= to)
            .all(|(_, members)| designated(members) == Some((leader, session)));
        let healthy = !self
            .disturbed
            .iter()
            .any(|&(n, s, e)| n.is_none_or(|n| n == leader) && s <= to && e >= from);
        if !stable || !healthy {
            return;
        }
        self.stats.on_time_checked += 1;
        match claimed_at {
            Some(at) if at <= to => {}
            Some(at) => self.check.violation(
                Kind::TickLate,
                at,
                t,
                tick,
                format!(
                    "tick {:.3}s claimed at {:.3}s, {} ms late, though n{leader} was ranked first and healthy throughout (grace {grace} ms)",
                    secs(tick),
                    at as f64 / 1000.0,
                    at - tick_ms
                ),
            ),
            None => self.check.violation(
                Kind::TickLate,
                to,
                t,
                tick,
                format!(
                    "tick {:.3}s not claimed within {grace} ms, though n{leader} was ranked first and healthy throughout",
                    secs(tick)
                ),
            ),
        }
    }
}

/// The member the nodes designate for the lease `name` among `members`: the best ranked for a
/// task's lease, the item's owner under the pool's assignment for a pooled task's unit
/// (`lease::position` is 0 for it alone).
pub(crate) fn designated_for(name: &str, members: &[Member]) -> Option<String> {
    match lease::split_unit(name) {
        Some(_) => members
            .iter()
            .find(|m| lease::position(name, &m.id, members) == Some(0))
            .map(|m| m.id.clone()),
        None => lease::ranking(name, members)
            .first()
            .map(|c| c.id.to_string()),
    }
}
