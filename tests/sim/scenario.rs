//! Scenarios: what one seed draws (nodes, tasks, releases, skews, faults) and the knobs.

use zkcron::firing::FiringBugs;
use zkcron::task::OverlapPolicy;

use super::*;

// ------------------------------------------------------------------------------------------------
// Scenarios
// ------------------------------------------------------------------------------------------------

/// How a node claims a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClaimMode {
    /// The contract: the real node's fenced claim.
    Fenced,
    /// Deliberately broken: the real node's `bugs.unfenced_claim` (no lease, epoch or record
    /// version check).
    Unfenced,
}

/// Deliberate bugs, to show that the checker catches what they cause: two of the simulated
/// shell around the real core and node, the others test-only switches of the real firing core
/// (`FiringBugs`) and of the real node (`NodeBugs`; the node's claim bug is
/// [`ClaimMode::Unfenced`], its switch `bugs.unfenced_claim`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeBug {
    None,
    /// The shell hands the core a claim answered with an error (its outcome unknown) as won.
    AssumeClaimedOnLoss,
    /// The shell sets the core's timer 3 s late.
    SlowTimer,
    /// The core's `bugs.ignore_fire_record`: planners start as if no fire record existed, so
    /// missed ticks are never caught up.
    NoCatchUp,
    /// The core's `bugs.ignore_pause`: it fires the tasks the node leads whether or not the
    /// operator paused them.
    IgnorePause,
    /// The core's `bugs.ignore_starting_deadline`: missed ticks of any age are caught up.
    NoStartingDeadline,
    /// The core's `bugs.catch_up_skip_tasks`: planners catch up every missed tick of a task
    /// with `catch_up = "skip"`.
    SkipCaughtUp,
    /// The core's `bugs.ignore_overlap`: every task fires as if its `overlap` were `allow`.
    NoOverlapCheck,
    /// The core's `bugs.queue_every_tick`: with `overlap = "queue"` a tick due while one waits
    /// replaces it.
    QueueEveryTick,
    /// The real node's `bugs.stray_leases_checked_only_when_leading`: seed 47's bug, a lease
    /// released without an answer by a node that may not lead stays its session's.
    StrayLeasesOnlyWhenLeading,
    /// The real node's `bugs.backfill_claim_keeps_progress`: a backfill tick's claim does not
    /// move the request's progress, so the next leader runs its ticks again.
    BackfillKeepsProgress,
    /// The real node's `bugs.every_node_as_leader`: a task that runs on every node is run by
    /// one node per tick, as a leader's task.
    EveryNodeAsLeader,
    /// The real node's `bugs.chain_request_apart`: a chained run's request is created in a
    /// call of its own after the parent's result, so a node lost between the two loses it.
    ChainRequestApart,
    /// The real node's `bugs.pool_runs_every_item`: a pooled task's run gets every item, not
    /// only those its claim won, so an item has two owners.
    PoolRunsEveryItem,
    /// The real node's `bugs.pause_apart`: a failed run's pause is created in a call of its own
    /// after its result, so a node lost between the two loses it (the task goes on firing).
    PauseApart,
    /// The operator's rule `bugs.resume_drops_queued`: `zkcron resume` moves the fire record
    /// without its queued tick, which then never runs.
    ResumeDropsQueued,
    /// The core's `bugs.forget_ledger`: the ticks it does not run are recorded nowhere.
    ForgetLedger,
    /// The real node's `bugs.runs_unlimited`: claims do not apply `max_runs` (nothing counted,
    /// nothing refused).
    RunsUnlimited,
}

impl NodeBug {
    /// The real firing core's switches for this bug (none for the others).
    pub(crate) fn firing_bugs(self) -> FiringBugs {
        FiringBugs {
            ignore_fire_record: self == NodeBug::NoCatchUp,
            catch_up_skip_tasks: self == NodeBug::SkipCaughtUp,
            ignore_starting_deadline: self == NodeBug::NoStartingDeadline,
            ignore_pause: self == NodeBug::IgnorePause,
            ignore_overlap: self == NodeBug::NoOverlapCheck,
            queue_every_tick: self == NodeBug::QueueEveryTick,
            forget_ledger: self == NodeBug::ForgetLedger,
        }
    }
}

/// What the generator may draw.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Knobs {
    pub(crate) claim_mode: ClaimMode,
    pub(crate) bug: NodeBug,
    /// Let some nodes' clocks be off by more than `max_clock_skew` (they may not lead).
    pub(crate) big_skew: bool,
    /// A node of a newer release whose clock is 30 days ahead visits for a few seconds.
    pub(crate) far_clock: bool,
    /// A stranger client writes foreign or stale znodes (see [`Meddle`]).
    pub(crate) strangers: bool,
    /// The operator drains nodes and undrains them (`control/drained/<id>`; all undrained at
    /// the end of the fault phase).
    pub(crate) drains: bool,
    /// The operator pauses tasks and resumes them (`control/paused/<task>`; `zkcron resume`
    /// moves the fire record to the resume instant in the same multi; all resumed at the end
    /// of the fault phase).
    pub(crate) pauses: bool,
    /// Some tasks have a `starting_deadline` shorter than the scenario (5–60 s), so that
    /// missed ticks older than it are dropped.
    pub(crate) short_deadlines: bool,
    /// Some runs last 5–40 s, longer than their task's interval.
    pub(crate) long_runs: bool,
    /// Nodes reload their task files with a changed command of every task (the definition's
    /// digest changes; schedules and the set of tasks stay).
    pub(crate) reloads: bool,
    /// The operator drains a node, often while its connection drops replies, and leaves it
    /// drained to the end (a release lost then must still be cleaned up by the node).
    pub(crate) lasting_drains: bool,
    /// Tasks draw their `overlap`: 30 % `skip` (checked: no run starts while another of the
    /// task is live), 10 % `replace`, the others `allow`.
    pub(crate) overlap_skip: bool,
    /// With `overlap_skip`, 30 % of the tasks that do not allow overlap get `queue` (checked:
    /// no run starts while another is live, at most one tick waits, a queued tick starts once).
    pub(crate) overlap_queue: bool,
    /// The queued kind of scenario: besides the draws above, 60 % of the tasks that allow
    /// overlap get `queue` too, so that most ticks due during a long run wait behind it.
    pub(crate) queued: bool,
    /// 40 % of the tasks run on every node (`run_on = "every_node"`): each defining node's unit
    /// `<task>@<node-id>` is checked as a task of its own (its own slot in `Scenario::tasks`),
    /// so the checker counts (tick, node) pairs. Off in the default scenarios (their seeds stay
    /// what they were); `every_node_tasks_keep_the_guarantee_per_tick_and_node` turns it on.
    pub(crate) every_node: bool,
    /// The second task also runs after the first (`after`; checked: each success of the first
    /// whose end was stored causes one run of the second, unless its claimer died).
    pub(crate) chains: bool,
    /// 30 % of the tasks are pooled (`work_items`, 2–4 items): each item's unit
    /// `<task>@<item>` is checked as a task of its own (its own slot in `Scenario::tasks`), so
    /// the checker counts (tick, item) pairs; a run counts for each item its claim won. Off in
    /// the default scenarios; `pooled_tasks_keep_the_guarantee_per_tick_and_item` turns it on.
    pub(crate) pools: bool,
    /// A quarter of the tasks (not on every node) have `pause_on_failure`, a quarter of their
    /// runs fail (checked: no tick claimed after a stored failure runs, until a resume).
    pub(crate) pause_on_failure: bool,
    /// Some tasks have `max_runs` (1–3), some are one-shots (`@at`) (`limits::draw`; checked:
    /// no more ticks run than `max_runs`, per unit; a one-shot's tick at most once).
    pub(crate) limits: bool,
}

impl Knobs {
    pub(crate) const CONTRACT: Knobs = Knobs {
        claim_mode: ClaimMode::Fenced,
        bug: NodeBug::None,
        big_skew: false,
        far_clock: false,
        strangers: false,
        drains: false,
        pauses: false,
        short_deadlines: false,
        long_runs: false,
        reloads: false,
        lasting_drains: false,
        overlap_skip: false,
        overlap_queue: false,
        queued: false,
        every_node: false,
        chains: false,
        pools: false,
        pause_on_failure: false,
        limits: false,
    };

    /// What `cargo test --test sim` runs: every fault and every operator's action.
    pub(crate) const DEFAULT: Knobs = Knobs {
        big_skew: true,
        far_clock: true,
        strangers: true,
        drains: true,
        pauses: true,
        short_deadlines: true,
        long_runs: true,
        reloads: true,
        lasting_drains: true,
        overlap_skip: true,
        overlap_queue: true,
        chains: true,
        pause_on_failure: true,
        ..Knobs::CONTRACT
    };
}

#[derive(Debug, Clone)]
pub(crate) struct TaskDef {
    pub(crate) name: String,
    pub(crate) rules: PlanRules,
    pub(crate) version_req: Option<VersionReq>,
    /// A fire record exists at the start, naming the epoch (the task fired before).
    pub(crate) initial_record: bool,
    pub(crate) overlap: OverlapPolicy,
    /// The task runs on every node (`run_on = "every_node"`): it has no lease or record of its
    /// own, its units (the slots whose `unit_of` names it) do.
    pub(crate) every_node: bool,
    /// This slot is the unit `<task>@<node-id>` of the every-node task at this index, held by
    /// node `.1` alone; no node defines the slot as a task.
    pub(crate) unit_of: Option<(TaskIx, NodeIx)>,
    /// The task's work items (`work_items`): it has no lease or record of its own, each
    /// item's unit (the slots whose `item_of` names it) does.
    pub(crate) items: Option<Arc<[String]>>,
    /// This slot is the unit `<task>@<item>` of the pooled task at this index, for its item
    /// `.1`; no node defines the slot as a task.
    pub(crate) item_of: Option<(TaskIx, usize)>,
    /// The task it also runs after (`after`).
    pub(crate) after: Option<String>,
    /// `pause_on_failure = true`; some of its runs fail (`pause_failure::fails`).
    pub(crate) pause_on_failure: bool,
    /// `max_runs` (`limits::draw`); a unit's slot has its task's.
    pub(crate) max_runs: Option<u32>,
}

impl TaskDef {
    /// Whether this slot is a unit (of an every-node task or a pooled task's item), not a task.
    pub(crate) fn is_unit(&self) -> bool {
        self.unit_of.is_some() || self.item_of.is_some()
    }

    /// The task of a unit's slot; `None` for a task's own.
    pub(crate) fn unit_task(&self) -> Option<TaskIx> {
        self.unit_of
            .map(|(t, _)| t)
            .or(self.item_of.map(|(t, _)| t))
    }

    /// The task this slot counts for: its own index, or its unit's task's.
    pub(crate) fn task_of(&self, slot: TaskIx) -> TaskIx {
        self.unit_task().unwrap_or(slot)
    }
}

#[derive(Debug, Clone)]
pub(crate) struct NodeDef {
    pub(crate) id: String,
    pub(crate) release: Version,
    pub(crate) seed: u64,
    pub(crate) tasks: Arc<TaskSet>,
    pub(crate) skew_ms: i64,
    pub(crate) start_at: Ms,
    /// Comes once, leaves, and is not started again at the end of the fault phase.
    pub(crate) visitor: bool,
}

/// What a stranger client (not a zkcron node: an operator's script, an old tool) does to the
/// cluster's znodes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Meddle {
    /// A persistent `members/ghost` of a high release defining every task.
    GhostMember,
    /// A persistent `leases/<task>` (when the lease is vacant at that instant).
    PersistentLease(TaskIx),
    /// `set_data` on `leases/<task>` (its version changes under the holder).
    TamperLease(TaskIx),
    /// `set_data` on `tasks/<task>/epoch`.
    TamperEpoch(TaskIx),
    /// A persistent `tasks/<task>/run-<unix>` child.
    PersistentRun(TaskIx),
    /// Deletes `leases/` and everything under it.
    DeleteLeases,
    /// Deletes `members/` and everything under it.
    DeleteMembers,
    /// `zkcron drain <node>`: creates `control/drained/<id>`.
    Drain(NodeIx),
    /// `zkcron undrain <node>`: deletes it.
    Undrain(NodeIx),
    /// `zkcron pause <task>`: creates `control/paused/<task>`.
    Pause(TaskIx),
    /// `zkcron resume <task>`: deletes the mark and, in the same multi, moves the task's fire
    /// record to now when it is older, so the paused period is not caught up.
    Resume(TaskIx),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Fault {
    /// The node starts (at the beginning, or joining mid-run).
    Start(NodeIx),
    /// kill -9: the process is gone, its session lives until it expires.
    Crash(NodeIx),
    /// SIGTERM: member and leases deleted at once, session closed.
    Stop(NodeIx),
    /// A new process with a new session; maybe a new seed, maybe a newer release.
    Restart {
        node: NodeIx,
        seed: Option<u64>,
        release: Option<Version>,
    },
    LinkDown(NodeIx),
    LinkUp(NodeIx),
    /// SIGSTOP / SIGCONT.
    Freeze(NodeIx),
    Thaw(NodeIx),
    /// Replies to the node are lost with this percentage, each taking the connection down.
    LossOn(NodeIx, u32),
    LossOff(NodeIx),
    /// The node's clock is stepped to this offset from true time.
    Skew(NodeIx, i64),
    /// The node's task files change (every task's command) and the daemon reloads them.
    Reload(NodeIx),
    /// A stranger client writes to the cluster's znodes.
    Stranger(Meddle),
    /// End of the fault phase: links up, processes resumed, losses off, every node up.
    HealAll,
}

impl Fault {
    pub(crate) fn node(&self) -> Option<NodeIx> {
        match self {
            Fault::Start(n)
            | Fault::Crash(n)
            | Fault::Stop(n)
            | Fault::Restart { node: n, .. }
            | Fault::LinkDown(n)
            | Fault::LinkUp(n)
            | Fault::Freeze(n)
            | Fault::Thaw(n)
            | Fault::LossOn(n, _)
            | Fault::LossOff(n)
            | Fault::Skew(n, _)
            | Fault::Reload(n) => Some(*n),
            Fault::HealAll | Fault::Stranger(_) => None,
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Scenario {
    pub(crate) seed: u64,
    pub(crate) knobs: Knobs,
    pub(crate) tasks: Vec<TaskDef>,
    pub(crate) nodes: Vec<NodeDef>,
    pub(crate) session_timeout: Ms,
    pub(crate) max_clock_skew_ms: i64,
    /// The largest clock offset any node ever has, may it lead or not.
    pub(crate) max_abs_skew_ms: i64,
    pub(crate) faults: Vec<(Ms, Fault)>,
    /// Nodes the operator leaves drained: the end of the fault phase does not undrain them.
    pub(crate) drained_at_end: Vec<NodeIx>,
    pub(crate) fault_end: Ms,
    pub(crate) settle: Ms,
    pub(crate) end: Ms,
}

pub(crate) const EXPRESSIONS: &[&str] = &[
    "*/5 * * * * *",
    "*/10 * * * * *",
    "*/15 * * * * *",
    "2-59/20 * * * * *",
    "*/30 * * * * *",
    "0 * * * * *",
    "7,19,43 * * * * *",
    "* * * * *",
];

pub(crate) const RELEASES: &[&str] = &["1.4.0", "1.4.2", "1.5.0", "2.0.0"];
pub(crate) const NEWER_RELEASE: &str = "2.1.0";
pub(crate) const MAX_CLOCK_SKEW_MS: i64 = 10_000;

/// `expr` as written, or half the time as the `@every` interval (or list of them) with the same
/// ticks: the simulation then drives intervals and unions through the same faults, and the
/// checker's expectations (computed from the schedule) are unchanged.
fn schedule_in_some_shape(expr: &str, rng: &mut StdRng) -> Schedule {
    let parse = |e: &str| Schedule::parse(e, chrono_tz::Tz::UTC).unwrap();
    let same: &[&str] = match expr {
        "*/5 * * * * *" => &["@every 5s"],
        "*/10 * * * * *" => &["@every 10s"],
        "*/15 * * * * *" => &["@every 15s"],
        "2-59/20 * * * * *" => &["@every 20s/2s"],
        "*/30 * * * * *" => &["@every 30s"],
        "0 * * * * *" | "* * * * *" => &["@every 1m"],
        "7,19,43 * * * * *" => &["@every 1m/7s", "@every 1m/19s", "@every 1m/43s"],
        _ => &[],
    };
    match same {
        _ if same.is_empty() || rng.random_bool(0.5) => parse(expr),
        [one] => parse(one),
        list => Schedule::union(list.iter().map(|e| parse(e)).collect()).unwrap(),
    }
}

impl Scenario {
    pub(crate) fn generate(seed: u64, knobs: Knobs) -> Scenario {
        let mut rng = StdRng::seed_from_u64(seed);
        let session_timeout: Ms = *[2_000, 4_000, 6_000, 10_000].choose(&mut rng).unwrap();
        let node_count = rng.random_range(2..=6usize);
        let task_count = rng.random_range(1..=20usize);
        let fault_end: Ms = rng.random_range(20_000..=120_000);
        let settle = session_timeout + node_count as Ms * VACANT_BOUND.as_millis() as Ms + 10_000;
        let end = fault_end + settle + rng.random_range(10_000..=40_000);
        // The densest schedule ticks every 5 s: even a task missed for the whole scenario stays
        // within what `catch_up = "all"` runs at once, so a missed tick is never dropped for that.
        assert!(
            end / 5_000 < MAX_CATCH_UP as Ms,
            "scenario too long for MAX_CATCH_UP"
        );

        let mut tasks = Vec::with_capacity(task_count);
        // Whether a task's expression is written in its interval form is drawn from a stream of
        // its own, so the rest of every seed's scenario stays as it was.
        let mut shape_rng = StdRng::seed_from_u64(!seed);
        for t in 0..task_count {
            let name = format!("t{t:02}");
            let expr = *EXPRESSIONS.choose(&mut rng).unwrap();
            let schedule = schedule_in_some_shape(expr, &mut shape_rng);
            let catch_up = match rng.random_range(0..10) {
                0 => CatchUpPolicy::Once,
                1 => CatchUpPolicy::Skip,
                _ => CatchUpPolicy::All,
            };
            let version_req = rng
                .random_bool(0.2)
                .then(|| VersionReq::parse(">=1.5").unwrap());
            tasks.push(TaskDef {
                rules: PlanRules {
                    task: name.clone(),
                    schedule,
                    catch_up,
                    starting_deadline: Some(Duration::from_secs(3600)),
                    jitter: Duration::ZERO,
                },
                name,
                version_req,
                initial_record: rng.random_bool(0.8),
                overlap: OverlapPolicy::Allow,
                every_node: false,
                unit_of: None,
                items: None,
                item_of: None,
                after: None,
                pause_on_failure: false,
                max_runs: None,
            });
        }
        // Fixed, not drawn: the draws stay those of every earlier seed.
        if knobs.chains && tasks.len() >= 2 {
            tasks[1].after = Some(tasks[0].name.clone());
        }

        let usual = *RELEASES[..3].choose(&mut rng).unwrap();
        let joiner = rng.random_bool(0.35).then_some(node_count - 1);
        let mut defines: Vec<Vec<TaskIx>> = (0..node_count)
            .map(|_| (0..task_count).filter(|_| rng.random_bool(0.85)).collect())
            .collect();
        for t in 0..task_count {
            if !defines.iter().any(|d| d.contains(&t)) {
                let n = rng.random_range(0..node_count);
                defines[n].push(t);
                defines[n].sort();
            }
        }
        let mut nodes = Vec::with_capacity(node_count);
        for (n, defined) in defines.iter().enumerate() {
            let set: TaskSet = defined
                .iter()
                .map(|&t| {
                    (
                        tasks[t].name.clone(),
                        TaskEntry {
                            digest: format!("digest-{t}"),
                            holders: Default::default(),
                            version_req: tasks[t].version_req.clone(),
                            require_labels: Default::default(),
                            max_runs: None,
                        },
                    )
                })
                .collect();
            let release = if joiner == Some(n) && rng.random_bool(0.6) {
                NEWER_RELEASE
            } else if rng.random_bool(0.6) {
                usual
            } else {
                RELEASES.choose(&mut rng).unwrap()
            };
            let start_at = if joiner == Some(n) {
                rng.random_range(5_000..=fault_end * 4 / 5)
            } else {
                rng.random_range(0..2_000)
            };
            nodes.push(NodeDef {
                id: format!("node-{n}"),
                release: Version::parse(release).unwrap(),
                seed: rng.random(),
                tasks: Arc::new(set),
                skew_ms: draw_skew(&mut rng, knobs.big_skew),
                start_at,
                visitor: false,
            });
        }

        let mut faults: Vec<(Ms, Fault)> = nodes
            .iter()
            .enumerate()
            .map(|(n, def)| (def.start_at, Fault::Start(n)))
            .collect();
        // Some scenarios are calm (rare faults), which leaves quiet stretches to check that
        // ticks fire on time between faults.
        let mean_gap: Ms = if rng.random_bool(0.25) {
            rng.random_range(40_000..=120_000)
        } else {
            rng.random_range(8_000..=40_000)
        };
        for (n, def) in nodes.iter().enumerate() {
            let mut t = def.start_at + rng.random_range(1_000..=mean_gap);
            while t < fault_end {
                let long = rng.random_bool(0.5);
                let outage = if long {
                    rng.random_range(session_timeout * 11 / 10..=session_timeout * 3)
                } else {
                    rng.random_range(200..=session_timeout * 9 / 10)
                };
                let until = match rng.random_range(0..100) {
                    0..15 => {
                        faults.push((t, Fault::Crash(n)));
                        let down = rng.random_range(500..=30_000);
                        if rng.random_bool(0.8) {
                            faults.push((t + down, restart(&mut rng, n)));
                        }
                        t + down
                    }
                    15..25 => {
                        faults.push((t, Fault::Stop(n)));
                        let down = rng.random_range(200..=20_000);
                        faults.push((t + down, restart(&mut rng, n)));
                        t + down
                    }
                    25..50 => {
                        faults.push((t, Fault::LinkDown(n)));
                        faults.push((t + outage, Fault::LinkUp(n)));
                        t + outage
                    }
                    50..70 => {
                        faults.push((t, Fault::Freeze(n)));
                        faults.push((t + outage, Fault::Thaw(n)));
                        t + outage
                    }
                    70..88 => {
                        let span = rng.random_range(1_000..=15_000);
                        faults.push((t, Fault::LossOn(n, rng.random_range(10..=60))));
                        faults.push((t + span, Fault::LossOff(n)));
                        t + span
                    }
                    _ => {
                        faults.push((t, Fault::Skew(n, draw_skew(&mut rng, knobs.big_skew))));
                        t
                    }
                };
                t = until + rng.random_range(500..=mean_gap);
            }
        }
        // The new faults draw from their own stream, so that the scenarios without them stay as
        // they were.
        let mut extra = StdRng::seed_from_u64(seed ^ 0x0005_7a11_0e25);
        if knobs.far_clock && extra.random_bool(0.3) {
            let n = nodes.len();
            let at = extra.random_range(3_000..=fault_end * 3 / 4);
            let all: TaskSet = (0..task_count)
                .map(|t| {
                    (
                        tasks[t].name.clone(),
                        TaskEntry {
                            digest: format!("digest-{t}"),
                            holders: Default::default(),
                            version_req: tasks[t].version_req.clone(),
                            require_labels: Default::default(),
                            max_runs: None,
                        },
                    )
                })
                .collect();
            nodes.push(NodeDef {
                id: format!("node-{n}"),
                release: Version::parse("9.0.0").unwrap(),
                seed: extra.random(),
                tasks: Arc::new(all),
                skew_ms: 30 * 86_400_000,
                start_at: at,
                visitor: true,
            });
            faults.push((at, Fault::Start(n)));
            let stay = extra.random_range(2_000..=10_000);
            faults.push((
                at + stay,
                if extra.random_bool(0.5) {
                    Fault::Stop(n)
                } else {
                    Fault::Crash(n)
                },
            ));
        }
        if knobs.strangers && extra.random_bool(0.4) {
            for _ in 0..extra.random_range(1..=3) {
                let at = extra.random_range(2_000..fault_end);
                let t = extra.random_range(0..task_count);
                let meddle = match extra.random_range(0..7) {
                    0 => Meddle::GhostMember,
                    1 => Meddle::PersistentLease(t),
                    2 => Meddle::TamperLease(t),
                    3 => Meddle::TamperEpoch(t),
                    4 => Meddle::PersistentRun(t),
                    5 => Meddle::DeleteLeases,
                    _ => Meddle::DeleteMembers,
                };
                faults.push((at, Fault::Stranger(meddle)));
            }
        }
        if knobs.drains {
            // A stream of its own: the scenarios of seeds found without drains stay the same.
            let mut ops = StdRng::seed_from_u64(seed ^ 0x00d7_a125);
            let residents: Vec<NodeIx> = (0..nodes.len()).filter(|&n| !nodes[n].visitor).collect();
            if ops.random_bool(0.4) {
                for _ in 0..ops.random_range(1..=2) {
                    let n = *residents.choose(&mut ops).unwrap();
                    let at = ops.random_range(2_000..fault_end);
                    let undrain = at + ops.random_range(1_000..=15_000);
                    faults.push((at, Fault::Stranger(Meddle::Drain(n))));
                    faults.push((undrain, Fault::Stranger(Meddle::Undrain(n))));
                }
            }
        }
        if knobs.pauses {
            // Streams of their own, as for drains.
            let mut ops = StdRng::seed_from_u64(seed ^ 0x009a_05e5);
            if ops.random_bool(0.4) {
                for _ in 0..ops.random_range(1..=2) {
                    let t = ops.random_range(0..task_count);
                    let at = ops.random_range(2_000..fault_end);
                    let resume = at + ops.random_range(2_000..=30_000);
                    faults.push((at, Fault::Stranger(Meddle::Pause(t))));
                    faults.push((resume, Fault::Stranger(Meddle::Resume(t))));
                }
            }
        }
        let mut drained_at_end = Vec::new();
        if knobs.lasting_drains {
            let mut ops = StdRng::seed_from_u64(seed ^ 0x1a57_d2a1);
            let residents: Vec<NodeIx> = (0..nodes.len()).filter(|&n| !nodes[n].visitor).collect();
            if ops.random_bool(0.5) {
                let n = *residents.choose(&mut ops).unwrap();
                // Most often while the node's connection drops replies: its releases may be
                // sent on a connection already lost.
                let lossy: Vec<(Ms, Ms)> = faults
                    .iter()
                    .filter(|(_, f)| matches!(f, Fault::LossOn(m, _) if *m == n))
                    .map(|(at, _)| *at)
                    .map(|at| {
                        let off = faults
                            .iter()
                            .filter(|(t, f)| *t > at && matches!(f, Fault::LossOff(m) if *m == n))
                            .map(|(t, _)| *t)
                            .min()
                            .unwrap_or(fault_end);
                        (at, off)
                    })
                    .collect();
                let at = match lossy.choose(&mut ops) {
                    Some(&(on, off)) if ops.random_bool(0.8) => ops.random_range(on..=off),
                    _ => ops.random_range(2_000..fault_end),
                };
                faults.retain(|(t, f)| !(*t > at && *f == Fault::Stranger(Meddle::Undrain(n))));
                faults.push((at, Fault::Stranger(Meddle::Drain(n))));
                drained_at_end.push(n);
            }
        }
        if knobs.reloads {
            let mut ops = StdRng::seed_from_u64(seed ^ 0x002e_10ad);
            let residents: Vec<NodeIx> = (0..nodes.len()).filter(|&n| !nodes[n].visitor).collect();
            if ops.random_bool(0.3) {
                for _ in 0..ops.random_range(1..=3) {
                    let n = *residents.choose(&mut ops).unwrap();
                    faults.push((ops.random_range(2_000..fault_end), Fault::Reload(n)));
                }
            }
        }
        if knobs.overlap_skip {
            let mut ops = StdRng::seed_from_u64(seed ^ 0x0f1a_5c1b);
            for task in &mut tasks {
                task.overlap = match ops.random_range(0..10) {
                    0..3 => OverlapPolicy::Skip,
                    3 => OverlapPolicy::Replace,
                    _ => OverlapPolicy::Allow,
                };
            }
            // Drawn apart, so that the draws above stay those of every earlier seed.
            let mut queue = StdRng::seed_from_u64(seed ^ 0x0b0f_f3e0);
            for task in &mut tasks {
                if knobs.overlap_queue
                    && task.overlap != OverlapPolicy::Allow
                    && queue.random_bool(0.3)
                {
                    task.overlap = OverlapPolicy::Queue;
                }
            }
        }
        if knobs.queued {
            // Drawn apart, so that the draws above stay those of every earlier seed.
            let mut queue = StdRng::seed_from_u64(seed ^ 0x0e0e_d0ed);
            for task in &mut tasks {
                if task.overlap == OverlapPolicy::Allow && queue.random_bool(0.6) {
                    task.overlap = OverlapPolicy::Queue;
                }
            }
        }
        if knobs.short_deadlines {
            let mut ops = StdRng::seed_from_u64(seed ^ 0xdead_112e);
            for task in &mut tasks {
                if ops.random_bool(0.25) {
                    let deadline = Duration::from_secs(ops.random_range(5..=60));
                    task.rules.starting_deadline = Some(deadline);
                }
            }
        }
        if knobs.every_node {
            add_units(seed, &mut tasks, &mut nodes);
        }
        if knobs.pools {
            add_item_units(seed, &mut tasks, &mut nodes);
        }
        super::pause_failure::draw(seed, knobs, &mut tasks);
        super::limits::draw(seed, knobs, &mut tasks);
        // Whatever would end after the fault phase is ended by HealAll.
        faults.retain(|(at, _)| *at < fault_end);
        faults.push((fault_end, Fault::HealAll));
        faults.sort_by_key(|(at, _)| *at);

        // A visitor's clock is far beyond `max_clock_skew`: it may lead nothing, so it does not
        // widen what the checker accepts as reachable.
        let max_abs_skew_ms = nodes
            .iter()
            .filter(|n| !n.visitor)
            .map(|n| n.skew_ms.abs())
            .chain(faults.iter().filter_map(|(_, f)| match f {
                Fault::Skew(_, s) => Some(s.abs()),
                _ => None,
            }))
            .max()
            .unwrap_or(0);

        Scenario {
            seed,
            knobs,
            tasks,
            nodes,
            session_timeout,
            max_clock_skew_ms: MAX_CLOCK_SKEW_MS,
            max_abs_skew_ms,
            faults,
            drained_at_end,
            fault_end,
            settle,
            end,
        }
    }

    /// The tasks the nodes define: the slots before the units.
    pub(crate) fn task_count(&self) -> usize {
        self.tasks.iter().take_while(|t| !t.is_unit()).count()
    }

    pub(crate) fn describe(&self) -> String {
        let mut out = format!(
            "scenario {}: {} nodes, {} tasks, session timeout {} ms, faults until {} ms, settle {} ms, end {} ms, knobs {:?}\n",
            self.seed,
            self.nodes.len(),
            self.tasks.len(),
            self.session_timeout,
            self.fault_end,
            self.settle,
            self.end,
            self.knobs
        );
        for (n, node) in self.nodes.iter().enumerate() {
            let mut defined: Vec<&String> = node.tasks.keys().collect();
            defined.sort();
            out += &format!(
                "  n{n} {} release {} skew {} ms start {} ms tasks {:?}\n",
                node.id, node.release, node.skew_ms, node.start_at, defined
            );
        }
        for task in &self.tasks {
            out += &format!(
                "  {} \"{}\" catch_up {:?} starting_deadline {:?} overlap {:?} version_req {} record {}\n",
                task.name,
                task.rules.schedule.expression(),
                task.rules.catch_up,
                task.rules.starting_deadline,
                task.overlap,
                task.version_req
                    .as_ref()
                    .map_or("-".to_string(), |r| r.to_string()),
                if task.initial_record {
                    "at epoch"
                } else {
                    "none"
                }
            );
        }
        if !self.drained_at_end.is_empty() {
            out += &format!("  left drained: {:?}\n", self.drained_at_end);
        }
        out += "  faults:";
        for (at, fault) in &self.faults {
            out += &format!(" {at}:{fault:?}");
        }
        out.push('\n');
        out
    }
}

pub(crate) fn draw_skew(rng: &mut StdRng, big: bool) -> i64 {
    if big && rng.random_bool(0.05) {
        let s = rng.random_range(15_000..=40_000);
        if rng.random_bool(0.5) { s } else { -s }
    } else if rng.random_bool(0.2) {
        rng.random_range(-5_000..=5_000)
    } else {
        rng.random_range(-1_500..=1_500)
    }
}

pub(crate) fn restart(rng: &mut StdRng, node: NodeIx) -> Fault {
    Fault::Restart {
        node,
        seed: rng.random_bool(0.5).then(|| rng.random()),
        release: rng
            .random_bool(0.2)
            .then(|| Version::parse(NEWER_RELEASE).unwrap()),
    }
}

/// Makes 40 % of the tasks run on every node, and appends each defining node's unit of them to
/// `tasks` as a slot of its own (after every task: a task's index stays its name's).
fn add_units(seed: u64, tasks: &mut Vec<TaskDef>, nodes: &mut [NodeDef]) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x00e7_e2a0);
    for t in 0..tasks.len() {
        if !rng.random_bool(0.4) {
            continue;
        }
        // A chain's parent runs once per tick: `validate` refuses `after` naming an every-node task.
        let name = &tasks[t].name;
        if tasks.iter().any(|u| u.after.as_ref() == Some(name)) {
            continue;
        }
        tasks[t].every_node = true;
        tasks[t].initial_record = false;
        for (n, node) in nodes.iter_mut().enumerate() {
            let name = tasks[t].name.clone();
            let Some(entry) = Arc::make_mut(&mut node.tasks).get_mut(&name) else {
                continue;
            };
            entry.holders = zkcron::coord::lease::Holders::EveryNode;
            tasks.push(TaskDef {
                name: zkcron::coord::lease::unit_name(&name, &node.id),
                every_node: false,
                unit_of: Some((t, n)),
                ..tasks[t].clone()
            });
        }
    }
}

/// Makes 30 % of the tasks (not every-node ones, nor chained) pooled with 2–4 items, and
/// appends each item's unit to `tasks` as a slot of its own. A pooled task allows overlap: a
/// node's run never waits for another node's (`overlap` applies per node run), which the
/// checker's cluster-wide overlap check does not model.
fn add_item_units(seed: u64, tasks: &mut Vec<TaskDef>, nodes: &mut [NodeDef]) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x0009_0015);
    for t in 0..tasks.len() {
        let name = tasks[t].name.clone();
        let chained =
            tasks[t].after.is_some() || tasks.iter().any(|u| u.after.as_ref() == Some(&name));
        if tasks[t].every_node || tasks[t].is_unit() || chained || !rng.random_bool(0.3) {
            continue;
        }
        let items: Arc<[String]> = (0..rng.random_range(2..=4))
            .map(|i| format!("i{i}"))
            .collect();
        tasks[t].items = Some(items.clone());
        tasks[t].initial_record = false;
        tasks[t].overlap = OverlapPolicy::Allow;
        for node in nodes.iter_mut() {
            if let Some(entry) = Arc::make_mut(&mut node.tasks).get_mut(&name) {
                entry.holders = zkcron::coord::lease::Holders::Items(items.clone());
            }
        }
        for (i, item) in items.iter().enumerate() {
            tasks.push(TaskDef {
                name: zkcron::coord::lease::unit_name(&name, item),
                items: None,
                item_of: Some((t, i)),
                ..tasks[t].clone()
            });
        }
    }
}
