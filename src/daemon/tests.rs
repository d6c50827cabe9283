use super::*;
use crate::coord::CoordError;
use crate::coord::{ClaimIntent, ClaimOutcome, RunResult};
use crate::firing::{Firing, FiringConfig, Input, StopHow};
use crate::plan;
use chrono::{DateTime, TimeDelta, Utc};
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A coordinator that leads every task, remembers every claim, and takes `result_write` to
/// record a result: a ZooKeeper round trip on a busy cluster, or a journal fsync on a busy
/// disk.
struct SlowResults {
    leadership: watch::Sender<Leadership>,
    record: Mutex<Option<DateTime<Utc>>>,
    claims: Mutex<Vec<(DateTime<Utc>, ClaimIntent)>>,
    /// When each of `claims` was made (wall clock).
    claimed_at: Mutex<Vec<DateTime<Utc>>>,
    result_write: Duration,
    /// How long reading a fire record takes, how many were read, and how many were being read
    /// at once at most.
    read_delay: Duration,
    reads: AtomicUsize,
    reading: AtomicUsize,
    max_reading: AtomicUsize,
    /// The tick `orphaned_tick` names (a node died after claiming it), and when each reclaim
    /// of it came (wall clock).
    orphan: Mutex<Option<DateTime<Utc>>>,
    reclaimed_at: Mutex<Vec<DateTime<Utc>>>,
    /// Manual runs claimed (each fire id once), and every result recorded.
    manual_claims: Mutex<Vec<String>>,
    ended: Mutex<Vec<RunResult>>,
}

impl SlowResults {
    fn new(task: &str, record: Option<DateTime<Utc>>, result_write: Duration) -> Arc<Self> {
        let leadership = Leadership {
            tasks: Arc::new(BTreeSet::from([Arc::from(task)])),
            ..Leadership::default()
        };
        Arc::new(SlowResults {
            leadership: watch::Sender::new(leadership),
            record: Mutex::new(record),
            claims: Mutex::default(),
            claimed_at: Mutex::default(),
            result_write,
            read_delay: Duration::ZERO,
            reads: AtomicUsize::new(0),
            reading: AtomicUsize::new(0),
            max_reading: AtomicUsize::new(0),
            orphan: Mutex::default(),
            reclaimed_at: Mutex::default(),
            manual_claims: Mutex::default(),
            ended: Mutex::default(),
        })
    }

    fn claims(&self) -> Vec<(DateTime<Utc>, ClaimIntent)> {
        self.claims.lock().unwrap().clone()
    }
}

impl Coordinator for SlowResults {
    async fn publish<T: std::borrow::Borrow<TaskSpec> + Sync>(
        &self,
        _: &[T],
    ) -> Result<(), CoordError> {
        Ok(())
    }

    fn leadership(&self) -> watch::Receiver<Leadership> {
        self.leadership.subscribe()
    }

    async fn last_claimed(&self, _: &str) -> Result<Option<DateTime<Utc>>, CoordError> {
        let reading = self.reading.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_reading.fetch_max(reading, Ordering::SeqCst);
        tokio::time::sleep(self.read_delay).await;
        self.reading.fetch_sub(1, Ordering::SeqCst);
        self.reads.fetch_add(1, Ordering::SeqCst);
        Ok(*self.record.lock().unwrap())
    }

    async fn claim_noting(
        &self,
        _: &str,
        tick: DateTime<Utc>,
        intent: ClaimIntent,
        _: Vec<crate::plan::ledger::TickEntry>,
    ) -> Result<crate::coord::ClaimedShare, CoordError> {
        if intent == ClaimIntent::Note {
            return Ok((ClaimOutcome::Claimed, None));
        }
        let mut record = self.record.lock().unwrap();
        if let Some(previous) = *record
            && previous >= tick
        {
            return Ok((ClaimOutcome::AlreadyClaimed { record: previous }, None));
        }
        *record = Some(tick);
        self.claims.lock().unwrap().push((tick, intent));
        self.claimed_at.lock().unwrap().push(Clock::system().now());
        Ok((ClaimOutcome::Claimed, None))
    }

    async fn orphaned_tick(&self, _: &str) -> Result<Option<DateTime<Utc>>, CoordError> {
        Ok(*self.orphan.lock().unwrap())
    }

    async fn reclaim(&self, _: &str, tick: DateTime<Utc>) -> Result<ClaimOutcome, CoordError> {
        if self.orphan.lock().unwrap().take() != Some(tick) {
            return Ok(ClaimOutcome::AlreadyClaimed { record: tick });
        }
        self.reclaimed_at
            .lock()
            .unwrap()
            .push(Clock::system().now());
        Ok(ClaimOutcome::Claimed)
    }

    async fn runs_elsewhere(&self, _: &str) -> Result<usize, CoordError> {
        Ok(0)
    }

    async fn queued_tick(&self, _: &str) -> Result<Option<DateTime<Utc>>, CoordError> {
        Ok(None)
    }

    async fn runs_ended_elsewhere(&self, _: &str) -> Result<(), CoordError> {
        Ok(())
    }

    async fn run_ended(&self, _: &str, result: &RunResult) -> Result<(), CoordError> {
        tokio::time::sleep(self.result_write).await;
        self.ended.lock().unwrap().push(result.clone());
        Ok(())
    }

    async fn claim_manual(
        &self,
        _: &str,
        trigger: &crate::coord::Trigger,
    ) -> Result<ClaimOutcome, CoordError> {
        let mut claims = self.manual_claims.lock().unwrap();
        if claims.contains(&trigger.fire_id) {
            return Ok(ClaimOutcome::AlreadyClaimed {
                record: trigger.requested_at,
            });
        }
        claims.push(trigger.fire_id.clone());
        Ok(ClaimOutcome::Claimed)
    }

    async fn last_result(&self, _: &str) -> Result<Option<RunResult>, CoordError> {
        Ok(None)
    }

    async fn release_all(&self) {}
}

fn task(text: &str) -> Arc<TaskSpec> {
    task_named("t", text)
}

pub(super) fn task_named(name: &str, text: &str) -> Arc<TaskSpec> {
    let defaults = TaskDefaults::for_tests();
    let path = PathBuf::from(format!("{name}.toml"));
    let spec = task::parse_task(name, &path, text, &defaults).unwrap_or_else(|e| panic!("{e:?}"));
    Arc::new(spec)
}

/// The daemon settings of these tests.
pub(super) fn config() -> DaemonConfig {
    DaemonConfig {
        jobs_dir: PathBuf::new(),
        calendars_dir: PathBuf::new(),
        node_id: "node-a".into(),
        shutdown_grace: Duration::from_secs(1),
        task_defaults: TaskDefaults::for_tests(),
        job_output_lines: 10,
        output: None,
        reset_flags: None,
        metrics: crate::metrics::Metrics::new(),
        loaded: Default::default(),
        clock: Clock::system(),
    }
}

/// Every deliberate bug the simulation proves its checker on is off in the firing rules the
/// daemon runs (`Daemon::new` builds them with [`firing_config`]).
#[test]
fn the_daemon_s_firing_rules_have_no_deliberate_bug_on() {
    let config = DaemonConfig {
        reset_flags: Some(" --state-dir /var/lib/zkcron".into()),
        ..config()
    };
    let firing = firing_config(&config);
    assert_eq!(
        firing.bugs,
        crate::firing::FiringBugs {
            ignore_fire_record: false,
            catch_up_skip_tasks: false,
            ignore_starting_deadline: false,
            ignore_pause: false,
            ignore_overlap: false,
            queue_every_tick: false,
            forget_ledger: false,
        }
    );
    assert_eq!(firing.reset_flags, config.reset_flags);
}

/// The firing rules of a daemon around `shared`, firing `specs` with the coordinator's
/// leadership.
pub(super) fn fire<C: Coordinator>(
    shared: &Arc<Shared<C>>,
    mut specs: Vec<Arc<TaskSpec>>,
) -> FiringShell<C> {
    let firing = FiringShell::start(shared.clone(), FiringConfig::default());
    specs.sort_by(|a, b| a.name.cmp(&b.name));
    firing.engine().handle(Input::Load(specs));
    let leadership = shared.leadership.borrow().clone();
    firing.engine().handle(Input::Leadership(leadership));
    firing
}

/// Fires `spec` against `coordinator` until it has made `count` claims (within a
/// deadline) and returns them, and the daemon's shared state (its runs).
async fn claims_of(
    spec: Arc<TaskSpec>,
    coordinator: &Arc<SlowResults>,
    count: usize,
) -> (Vec<(DateTime<Utc>, ClaimIntent)>, Arc<Shared<SlowResults>>) {
    let (shared, _runs_alive) = Shared::new(coordinator.clone(), &config());
    let firing = fire(&shared, vec![spec]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while coordinator.claims().len() < count {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only these claims in 20 s: {:?}",
            coordinator.claims()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    firing.engine().handle(Input::Load(Vec::new()));
    (coordinator.claims()[..count].to_vec(), shared)
}

/// Issue [5] item 7: every fired task had a tokio task of its own sleeping until its next tick
/// (and its own planner), 10,000 of them for 10,000 tasks. Idle tasks now wait in the firing
/// table: once their fire records are read (a bounded number at once), no task of theirs is
/// left.
#[tokio::test(flavor = "multi_thread")]
async fn given_many_idle_tasks_when_they_are_planned_then_none_keeps_a_tokio_task_and_starts_are_bounded()
 {
    let mut coordinator = SlowResults::new("t", None, Duration::ZERO);
    Arc::get_mut(&mut coordinator).unwrap().read_delay = Duration::from_millis(2);
    let (shared, _runs_alive) = Shared::new(coordinator.clone(), &config());
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    // Daily, twelve hours from now: nothing comes due during the test.
    let hour = (Clock::system()
        .now()
        .format("%H")
        .to_string()
        .parse::<u32>()
        .unwrap()
        + 12)
        % 24;
    let count = 500;
    let specs: Vec<Arc<TaskSpec>> = (0..count)
        .map(|i| {
            let text = format!(
                "schedule = \"{} {hour} * * *\"\ncommand = [\"true\"]\n",
                i % 60
            );
            task_named(&format!("t{i}"), &text)
        })
        .collect();
    coordinator.leadership.send_modify(|l| {
        l.tasks = Arc::new(specs.iter().map(|s| s.name.clone()).collect());
    });
    let _firing = fire(&shared, specs);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    // The timer loop is the one task left.
    while coordinator.reads.load(Ordering::SeqCst) < count || metrics.num_alive_tasks() > before + 1
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {count} fire records read, {} tasks alive ({before} before the timers)",
            coordinator.reads.load(Ordering::SeqCst),
            metrics.num_alive_tasks()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let max_reading = coordinator.max_reading.load(Ordering::SeqCst);
    assert!(
        (2..=crate::firing::STARTS_IN_FLIGHT).contains(&max_reading),
        "{max_reading} fire records read at once"
    );
    assert!(coordinator.claims().is_empty());
}

/// Issue 9, item 3: "skipped: the previous run is still going" was logged 10 ms after
/// "finished", because a run stayed live until its result was written.
#[tokio::test(flavor = "multi_thread")]
async fn given_a_slow_result_write_when_a_run_ends_just_before_the_next_tick_then_that_tick_is_not_skipped()
 {
    // Each run ends within milliseconds; writing its result takes longer than a period.
    let coordinator = SlowResults::new("t", None, Duration::from_millis(1500));
    let spec = task("schedule = \"* * * * * *\"\ncommand = [\"true\"]\noverlap = \"skip\"\n");

    let (claims, _) = claims_of(spec, &coordinator, 3).await;

    let intents: Vec<ClaimIntent> = claims.iter().map(|(_, intent)| *intent).collect();
    assert_eq!(intents, [ClaimIntent::Run; 3], "{claims:?}");
    let seconds: Vec<i64> = claims.iter().map(|(t, _)| t.timestamp()).collect();
    assert!(seconds.windows(2).all(|w| w[1] == w[0] + 1), "{seconds:?}");
}

/// Issue 9, item 3: after a failover, a catch-up run ending a few ms before the next tick
/// made that tick skip.
#[tokio::test(flavor = "multi_thread")]
async fn given_a_catch_up_run_that_ends_just_before_the_next_tick_then_that_tick_runs() {
    // The case needs the caught-up run (a few ms) to end before the next tick, which is up to
    // the machine: a try in which it ended later (the tick was then rightly skipped) shows
    // nothing, and another is made, within a deadline.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut tries = Vec::new();
    loop {
        let missed = Clock::system().now() - TimeDelta::seconds(5);
        let record = missed - TimeDelta::seconds(5);
        let coordinator = SlowResults::new("t", Some(record), Duration::from_millis(1500));
        let spec = task(
            "schedule = \"* * * * * *\"\ncommand = [\"true\"]\noverlap = \"skip\"\ncatch_up = \"once\"\n",
        );
        let started = Clock::system().now();

        let (claims, _) = claims_of(spec, &coordinator, 2).await;

        // The latest missed tick, caught up at once, then the next on-time tick.
        let (caught_up, on_time) = (claims[0], claims[1]);
        // The run stops counting as live just before its `finished_at` is read.
        let caught_up_ended = loop {
            let ended = coordinator.ended.lock().unwrap().clone();
            if let Some(result) = ended.iter().find(|r| r.tick == caught_up.0) {
                break result.finished_at;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the caught-up run's result was never written: {claims:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        if caught_up_ended >= on_time.0 {
            tries.push((caught_up_ended, claims));
            assert!(
                tokio::time::Instant::now() < deadline,
                "in no try did the caught-up run end before the next tick (run end, claims): \
                 {tries:?}"
            );
            continue;
        }
        // Both run.
        assert!(caught_up.0 <= started, "{claims:?}");
        assert!(on_time.0 > started, "{claims:?}");
        assert_eq!(caught_up.1, ClaimIntent::Run, "{claims:?}");
        assert_eq!(
            on_time.1,
            ClaimIntent::Run,
            "the caught-up run ended at {caught_up_ended}: {claims:?}"
        );
        return;
    }
}

/// Issue 9, item 5: with `overlap = "replace"` the tick was claimed first and the old run
/// stopped after, so the tick stayed claimed but not started for up to `kill_grace` (a
/// kill -9 then lost it). The old run here ignores SIGTERM, so it cannot end before
/// `kill_grace` after the tick; the claim must come after that, and the spawn right after
/// the claim.
#[tokio::test(flavor = "multi_thread")]
async fn given_overlap_replace_when_the_old_run_ignores_sigterm_then_the_claim_waits_for_its_end_and_the_spawn_follows_the_claim()
 {
    let dir = tempfile::tempdir().unwrap();
    // The tick after the replacing one comes 2 s after it is spawned (ticks every 3 s, the
    // old run ends `kill_grace` = 1 s after its replacement's tick), so that tick's own
    // replace cannot kill it before it has written its start time.
    let kill_grace = Duration::from_secs(1);
    // Each run writes the wall-clock time of its start (bash's $EPOCHREALTIME, no fork),
    // then ignores SIGTERM; `exec` keeps the main process and the ignored signal.
    let script = format!(
        "echo \"$EPOCHREALTIME\" > {dir}/\"$ZKCRON_FIRE_ID\"; trap '' TERM; exec sleep 20",
        dir = dir.path().display()
    );
    let spec = task(&format!(
        "schedule = \"*/3 * * * * *\"\ncommand = [\"bash\", \"-c\", {script:?}]\n\
         overlap = \"replace\"\nkill_grace = \"1s\"\n"
    ));
    let coordinator = SlowResults::new("t", None, Duration::ZERO);

    let (claims, shared) = claims_of(spec, &coordinator, 2).await;
    let claimed_at = coordinator.claimed_at.lock().unwrap()[1];
    // The replacing run started: wait for its start time, then stop every run.
    let started_file = dir.path().join(plan::fire_id("t", claims[1].0));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let started = loop {
        if let Ok(text) = std::fs::read_to_string(&started_file)
            && text.ends_with('\n')
        {
            break text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the second run did not start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for mut done in shared.runs.stop_all(StopHow::KillNow) {
        let _ = done.wait_for(|ended| *ended).await;
    }

    let (replacing, _) = claims[1];
    assert_eq!(claims[0].1, ClaimIntent::Run, "{claims:?}");
    assert_eq!(claims[1].1, ClaimIntent::Run, "{claims:?}");
    // The old run got SIGTERM at the tick at the earliest and SIGKILL `kill_grace` later.
    assert!(
        claimed_at >= replacing + TimeDelta::from_std(kill_grace).unwrap(),
        "tick {replacing} claimed at {claimed_at}, before the old run could have ended"
    );
    let started: f64 = started.trim().parse().unwrap();
    let spawned = DateTime::from_timestamp_micros((started * 1e6) as i64).unwrap();
    let claim_to_spawn = spawned - claimed_at;
    // bash's start-up included; far below the `kill_grace` the old order put in between.
    assert!(
        claim_to_spawn < TimeDelta::milliseconds(500),
        "claimed at {claimed_at}, started at {spawned}"
    );
}

/// Waits (within 10 s) for `file` to hold a line, the `$EPOCHREALTIME` a job wrote at its start.
async fn start_time(file: &std::path::Path) -> DateTime<Utc> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(text) = std::fs::read_to_string(file)
            && text.ends_with('\n')
        {
            let seconds: f64 = text.trim().parse().unwrap();
            return DateTime::from_timestamp_micros((seconds * 1e6) as i64).unwrap();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} was not written",
            file.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Issue [5] benchmarks: the claim's round trip sat between the tick's instant and the spawn.
/// A tick is now claimed up to CLAIM_AHEAD before it is due and spawned at its instant, not
/// before.
#[tokio::test(flavor = "multi_thread")]
async fn a_tick_is_claimed_ahead_of_its_instant_and_spawned_at_its_instant_not_before() {
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "echo \"$EPOCHREALTIME\" > {dir}/\"$ZKCRON_FIRE_ID\"",
        dir = dir.path().display()
    );
    let spec = task(&format!(
        "schedule = \"* * * * * *\"\ncommand = [\"bash\", \"-c\", {script:?}]\n"
    ));
    let coordinator = SlowResults::new("t", None, Duration::ZERO);

    let (claims, _) = claims_of(spec, &coordinator, 2).await;

    // The first tick may have been armed within the lead; the second was not.
    let (tick, _) = claims[1];
    let claimed_at = coordinator.claimed_at.lock().unwrap()[1];
    assert!(
        claimed_at < tick && claimed_at >= tick - plan::CLAIM_AHEAD - TimeDelta::milliseconds(50),
        "tick {tick} claimed at {claimed_at}"
    );
    let spawned = start_time(&dir.path().join(plan::fire_id("t", tick))).await;
    assert!(spawned >= tick, "tick {tick} spawned early, at {spawned}");
}

/// A node that claimed a tick ahead and died before its instant leaves an orphan in the future:
/// with `on_node_loss = "rerun"` the new leader reruns it at its instant, never before.
#[tokio::test(flavor = "multi_thread")]
async fn a_tick_orphaned_before_its_instant_is_rerun_at_its_instant_not_before() {
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "echo \"$EPOCHREALTIME\" > {dir}/\"$ZKCRON_FIRE_ID\"",
        dir = dir.path().display()
    );
    let spec = task(&format!(
        "schedule = \"0 0 0 1 1 *\"\ncommand = [\"bash\", \"-c\", {script:?}]\non_node_loss = \"rerun\"\n"
    ));
    let orphan = DateTime::from_timestamp(Clock::system().now().timestamp() + 2, 0).unwrap();
    let coordinator = SlowResults::new("t", Some(orphan), Duration::ZERO);
    *coordinator.orphan.lock().unwrap() = Some(orphan);
    let (shared, _runs_alive) = Shared::new(coordinator.clone(), &config());
    let firing = fire(&shared, vec![spec]);

    let spawned = start_time(&dir.path().join(plan::fire_id("t", orphan))).await;
    firing.engine().handle(Input::Load(Vec::new()));

    let reclaimed = coordinator.reclaimed_at.lock().unwrap().clone();
    assert_eq!(reclaimed.len(), 1, "{reclaimed:?}");
    assert!(
        reclaimed[0] >= orphan,
        "reclaimed at {}, before {orphan}",
        reclaimed[0]
    );
    assert!(
        spawned >= orphan,
        "rerun spawned at {spawned}, before {orphan}"
    );
}

/// Issue 11 item 6: a listed trigger runs once (however often the leadership lists it before
/// it is claimed), with the trigger's name as fire id and the request time as scheduled time,
/// and its end goes to the coordinator as a manual run.
///
/// On one thread, so that the test can count the runtime's tasks around a listing: nothing
/// else starts or ends a task while the listing runs.
#[tokio::test(flavor = "current_thread")]
async fn given_a_listed_trigger_when_leadership_changes_repeatedly_then_it_runs_once_as_a_manual_run()
 {
    let coordinator = SlowResults::new("t", None, Duration::ZERO);
    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("env");
    let spec = task(&format!(
        "schedule = \"0 0 0 1 1 *\"\ncommand = ['/bin/sh', '-c', 'echo \"$ZKCRON_FIRE_ID $ZKCRON_SCHEDULED_AT\" >> {}; exit 4']\n",
        file.display()
    ));
    let (shared, _runs_alive) = Shared::new(coordinator.clone(), &config());
    let firing = fire(&shared, vec![spec]);
    let requested_at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
    let trigger = crate::coord::Trigger {
        fire_id: "t@manual-0000000007".into(),
        requested_at,
    };
    let mut leadership = coordinator.leadership.borrow().clone();
    leadership.triggers = Arc::new(std::collections::BTreeMap::from([(
        "t".to_string(),
        vec![trigger],
    )]));
    for _ in 0..3 {
        firing
            .engine()
            .handle(Input::Leadership(leadership.clone()));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while coordinator.ended.lock().unwrap().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the manual run never ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Listed again after its end (the coordinator had not dropped it yet): not run again. A
    // listing starts a task for each trigger it claims, and this one starts none.
    let metrics = tokio::runtime::Handle::current().metrics();
    let tasks_before = metrics.num_alive_tasks();
    firing
        .engine()
        .handle(Input::Leadership(leadership.clone()));
    assert_eq!(
        metrics.num_alive_tasks(),
        tasks_before,
        "the trigger listed again after its run is claimed again"
    );
    assert_eq!(
        *coordinator.manual_claims.lock().unwrap(),
        ["t@manual-0000000007"]
    );
    let ended = coordinator.ended.lock().unwrap().clone();
    assert_eq!(ended.len(), 1, "{ended:?}");
    let result = &ended[0];
    assert!(result.manual);
    assert_eq!(result.fire_id.as_deref(), Some("t@manual-0000000007"));
    assert_eq!(result.tick, requested_at);
    assert_eq!(
        (result.exit_code, result.signal, result.success),
        (Some(4), None, false)
    );
    assert!(result.started_at.is_some());
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "t@manual-0000000007 2027-01-15T08:00:00Z\n"
    );
}

/// A leadership change is applied only to the tasks whose lease or pause mark changed (a node
/// taking its share of a 20-node cold start walked all 10,000 loaded tasks per publication);
/// the tasks fired must still end up exactly as a pass over every task would leave them.
#[test]
fn leadership_changes_applied_to_the_changed_tasks_leave_the_timers_of_a_full_pass() {
    let now = Clock::system().now();
    let mut core: Firing<()> = Firing::new(FiringConfig::default(), now);
    let hour = (now.format("%H").to_string().parse::<u32>().unwrap() + 12) % 24;
    let specs = ["a", "b", "c", "d"]
        .into_iter()
        .map(|name| {
            let enabled = if name == "d" { "enabled = false\n" } else { "" };
            let text = format!("schedule = \"0 {hour} * * *\"\ncommand = [\"true\"]\n{enabled}");
            task_named(name, &text)
        })
        .collect();
    core.handle(Input::Load(specs), now);
    let led = |names: &[&str]| Arc::new(names.iter().map(|n| Arc::from(*n)).collect());
    let set = |names: &[&str]| Arc::new(names.iter().map(|n| n.to_string()).collect());
    type Led = Arc<BTreeSet<Arc<str>>>;
    type Names = Arc<BTreeSet<String>>;
    // (paused, led, paused by the operator, the tasks that must then have a timer)
    // and the status line then (loaded tasks led, the disabled one and operator-paused ones
    // included, as before).
    let steps: Vec<(bool, Led, Names, &[&str], &str)> = vec![
        (
            false,
            led(&["a", "b", "d"]),
            set(&[]),
            &["a", "b"],
            "leading 3 of 4 tasks",
        ),
        (
            false,
            led(&["b", "c", "d"]),
            set(&[]),
            &["b", "c"],
            "leading 3 of 4 tasks",
        ),
        (
            false,
            led(&["b", "c"]),
            set(&["c"]),
            &["b"],
            "leading 2 of 4 tasks",
        ),
        (
            true,
            led(&["a", "b", "c"]),
            set(&[]),
            &[],
            "paused: not connected to the cluster; firing nothing",
        ),
        (
            false,
            led(&["a", "b", "c"]),
            set(&[]),
            &["a", "b", "c"],
            "leading 3 of 4 tasks",
        ),
        (
            false,
            led(&["a", "gone"]),
            set(&["b"]),
            &["a"],
            "leading 1 of 4 tasks",
        ),
    ];
    let mut kept = None;
    for (step, (paused, tasks, paused_tasks, firing, status)) in steps.into_iter().enumerate() {
        let leadership = Leadership {
            paused,
            tasks,
            paused_tasks,
            ..Leadership::default()
        };
        core.handle(Input::Leadership(leadership.clone()), now);
        assert_eq!(core.firing(), firing, "step {step}");
        let line = service::status_line(&leadership, core.leading(), 4);
        assert_eq!(line, status, "step {step}");
        // A task led before and after keeps its timer (not stopped and started again).
        let b = format!("{:?}", core.entry_of("b"));
        if step == 1 {
            assert_eq!(Some(&b), kept.as_ref(), "step {step}");
        }
        kept = Some(b);
    }
}

/// A reload of one changed file compared the 100,000 unchanged tasks by name, twice each: they
/// are the daemon's own `Arc`s, compared as pointers. The diff says the same as a comparison of
/// every spec: here one changed, one re-read unchanged, one removed, one added, the rest kept.
#[test]
fn the_diff_of_a_one_file_reload_names_only_what_changed() {
    let hourly = |minute: usize| format!("schedule = \"{minute} * * * *\"\ncommand = [\"true\"]\n");
    let names: Vec<String> = (0..1000).map(|i| format!("t-{i:04}")).collect();
    let current: Vec<Arc<TaskSpec>> = names
        .iter()
        .enumerate()
        .map(|(i, name)| task_named(name, &hourly(i % 60)))
        .collect();
    let mut tasks = current.clone();
    tasks[10] = task_named("t-0010", &hourly(59));
    tasks[20] = task_named("t-0020", &hourly(20));
    tasks.remove(0);
    tasks.push(task_named("t-9999", &hourly(1)));

    let one = diff(&current, &mut tasks);
    assert_eq!((one.added, one.changed, one.removed), (1, 1, 1));
    assert_eq!(one.loaded_names, [Arc::<str>::from("t-9999")]);
    assert_eq!(
        one.unload,
        [
            ("t-0000".to_string(), Unload::Removed),
            ("t-0010".to_string(), Unload::Changed)
        ]
    );
    // The re-read unchanged spec is the daemon's own again; the changed one is the new one.
    assert!(Arc::ptr_eq(&tasks[19], &current[20]));
    assert!(!Arc::ptr_eq(&tasks[9], &current[10]));
    assert_eq!(tasks[9].schedule.expression(), "59 * * * *");
    // Nothing changed: nothing to do.
    let mut again = tasks.clone();
    let none = diff(&tasks, &mut again);
    assert_eq!(none, Diff::default());
}
