//! The daemon's Prometheus metrics (docs/metrics.md): one [`Metrics`] handle, cloned into the
//! daemon's shared state and the ZooKeeper driver, encoded for `/metrics` ([`crate::http`]).
//!
//! Every name is `zkcron_*` in base units (seconds, totals). Labels are bounded: a task's
//! name (the tasks ever loaded by this process), an outcome or a claim result from a fixed set;
//! never a fire id.
//!
//! Files: `classic` writes the text format 0.0.4 from the OpenMetrics text, for a scraper that
//! does not ask for OpenMetrics; `leader` holds the series a task's leader exports for it;
//! `ticks` counts the ticks not run (the tick ledger).

pub mod classic;
pub mod leader;
pub mod ticks;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClaimLabel {
    result: &'static str,
}

/// How a tick this node handled ended, the `outcome` label of `zkcron_fires_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FireOutcome {
    /// The job ran and succeeded (after its retries).
    Success,
    /// The job ran and failed, or could not be spawned.
    Failure,
    /// Claimed as skipped: the previous run was still going (`overlap = "skip"`).
    Skipped,
    /// Claimed, then stopped before its instant (never spawned).
    NotStarted,
    /// Claimed as queued behind the previous run, which was still going (`overlap =
    /// "queue"`): it runs when that run ends (and then counts as a success or failure too).
    Queued,
    /// Claimed as dropped: a tick was queued already behind the previous run (`overlap =
    /// "queue"`: at most one waits).
    Dropped,
}

impl FireOutcome {
    /// In the order their series are encoded.
    const ALL: [FireOutcome; 6] = [
        FireOutcome::Success,
        FireOutcome::Failure,
        FireOutcome::Skipped,
        FireOutcome::NotStarted,
        FireOutcome::Queued,
        FireOutcome::Dropped,
    ];

    fn label(self) -> &'static str {
        match self {
            FireOutcome::Success => "success",
            FireOutcome::Failure => "failure",
            FireOutcome::Skipped => "skipped",
            FireOutcome::NotStarted => "not_started",
            FireOutcome::Queued => "queued",
            FireOutcome::Dropped => "dropped",
        }
    }
}

/// The per-task series of one task: its `zkcron_fires_total` counters by outcome, its
/// `zkcron_catch_up_runs_total` and its `zkcron_last_success_timestamp_seconds`, in 72 bytes.
/// A `Family` of prometheus-client costs a label set, an atomic and a hash-map slot per series:
/// three series per loaded task made it about 3 MB for 10,000 idle tasks.
#[derive(Debug, Default, Clone, Copy)]
struct TaskCounts {
    fires: [u64; 6],
    catch_up: u64,
    last_success: f64,
    /// Which series exist: bit `i` for `fires[i]` (outcome `FireOutcome::ALL[i]`), then
    /// [`CATCH_UP`] and [`LAST_SUCCESS`]. A series exists from its first update, or from the
    /// task's load for the ones it starts at 0.
    present: u8,
}

const CATCH_UP: u8 = 1 << 6;
const LAST_SUCCESS: u8 = 1 << 7;

/// The series a task has from its load: its success and failure fires and its catch-up runs,
/// all at 0.
const LOADED: TaskCounts = TaskCounts {
    fires: [0; 6],
    catch_up: 0,
    last_success: 0.0,
    present: (1 << FireOutcome::Success as u8) | (1 << FireOutcome::Failure as u8) | CATCH_UP,
};

/// The per-task series of every task ever loaded by this process, by task name. A task that
/// never fired has `None`: its series are [`LOADED`], and 10,000 idle tasks keep 8 bytes each
/// for them instead of 72.
#[derive(Debug, Default)]
struct TaskSeries(Mutex<BTreeMap<Arc<str>, Option<Box<TaskCounts>>>>);

impl TaskSeries {
    /// The tasks' zero series (see [`Metrics::tasks_loaded`]).
    fn loaded(&self, loaded: impl IntoIterator<Item = Arc<str>>) {
        let mut tasks = self.0.lock().expect("task metrics poisoned");
        let mut new = Vec::new();
        for task in loaded {
            match tasks.get_mut(&*task) {
                Some(Some(counts)) => counts.present |= LOADED.present,
                Some(None) => {}
                None => new.push((task, None)),
            }
        }
        if new.is_empty() {
            return;
        }
        // Built again in one go rather than inserted one by one: inserts in name order leave
        // every node of the tree half full (about 250 KB more for 10,000 tasks).
        let mut all: Vec<_> = std::mem::take(&mut *tasks).into_iter().collect();
        all.append(&mut new);
        *tasks = all.into_iter().collect();
    }

    fn update(&self, task: &str, change: impl FnOnce(&mut TaskCounts)) {
        let mut tasks = self.0.lock().expect("task metrics poisoned");
        let counts = match tasks.get_mut(task) {
            Some(counts) => counts,
            None => tasks.entry(task.into()).or_insert(Some(Box::default())),
        };
        change(counts.get_or_insert_with(|| Box::new(LOADED)));
    }
}

/// Which per-task family a [`TaskFamily`] encodes.
#[derive(Debug, Clone, Copy)]
enum TaskFamilyKind {
    Fires,
    CatchUp,
    LastSuccess,
}

/// One of the per-task families, encoded from the shared [`TaskSeries`] exactly as a
/// `Family` with the labels `task` (and `outcome`) would be.
#[derive(Debug)]
struct TaskFamily {
    series: Arc<TaskSeries>,
    kind: TaskFamilyKind,
}

impl TaskFamily {
    fn mask(&self) -> u8 {
        match self.kind {
            TaskFamilyKind::Fires => 0b11_1111,
            TaskFamilyKind::CatchUp => CATCH_UP,
            TaskFamilyKind::LastSuccess => LAST_SUCCESS,
        }
    }
}

impl EncodeMetric for TaskFamily {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let tasks = self.series.0.lock().expect("task metrics poisoned");
        for (task, counts) in tasks.iter() {
            let task: &str = task;
            let counts = counts.as_deref().unwrap_or(&LOADED);
            match self.kind {
                TaskFamilyKind::Fires => {
                    for (i, outcome) in FireOutcome::ALL.into_iter().enumerate() {
                        if counts.present & (1 << i) != 0 {
                            let labels = [("task", task), ("outcome", outcome.label())];
                            encoder
                                .encode_family(&labels)?
                                .encode_counter::<NoLabelSet, _, u64>(&counts.fires[i], None)?;
                        }
                    }
                }
                TaskFamilyKind::CatchUp if counts.present & CATCH_UP != 0 => {
                    encoder
                        .encode_family(&[("task", task)])?
                        .encode_counter::<NoLabelSet, _, u64>(&counts.catch_up, None)?;
                }
                TaskFamilyKind::LastSuccess if counts.present & LAST_SUCCESS != 0 => {
                    encoder
                        .encode_family(&[("task", task)])?
                        .encode_gauge(&counts.last_success)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        match self.kind {
            TaskFamilyKind::Fires | TaskFamilyKind::CatchUp => {
                prometheus_client::metrics::MetricType::Counter
            }
            TaskFamilyKind::LastSuccess => prometheus_client::metrics::MetricType::Gauge,
        }
    }

    /// As a `Family`: no series, no descriptor.
    fn is_empty(&self) -> bool {
        let mask = self.mask();
        let tasks = self.series.0.lock().expect("task metrics poisoned");
        !tasks
            .values()
            .any(|counts| counts.as_deref().unwrap_or(&LOADED).present & mask != 0)
    }
}

struct Inner {
    registry: Registry,
    /// `zkcron_fires_total`, `zkcron_catch_up_runs_total`, `zkcron_last_success_timestamp_seconds`.
    tasks: Arc<TaskSeries>,
    firing: FiringMetrics,
    zookeeper: ZookeeperMetrics,
    backfill: BackfillMetrics,
    chain: ChainMetrics,
    leader: Arc<leader::Leader>,
    build_info: Family<leader::VersionLabel, Gauge>,
    ticks: Arc<ticks::Ticks>,
}

/// `zkcron_chained_runs_total` by outcome and `zkcron_chain_requests_total`.
struct ChainMetrics {
    runs: Family<OutcomeLabel, Counter>,
    requests: Counter,
}

impl ChainMetrics {
    fn register(registry: &mut Registry) -> ChainMetrics {
        let runs = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "chained_runs",
            "Chained runs (after) this node ran, by outcome: success, failure, or skipped (the task was paused)",
            runs.clone(),
        );
        for outcome in ["success", "failure", "skipped"] {
            let _ = runs.get_or_create(&OutcomeLabel { outcome });
        }
        let requests = Counter::default();
        registry.register(
            "chain_requests",
            "Chained runs (after) requested with the stored ends of this node's successful runs",
            requests.clone(),
        );
        ChainMetrics { runs, requests }
    }
}

/// `zkcron_backfill_runs_total` by outcome and `zkcron_backfills_waiting`.
struct BackfillMetrics {
    runs: Family<OutcomeLabel, Counter>,
    waiting: Gauge,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

impl BackfillMetrics {
    fn register(registry: &mut Registry) -> BackfillMetrics {
        let runs = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "backfill_runs",
            "Backfill ticks (zkcron backfill) this node ran, by outcome: success or failure",
            runs.clone(),
        );
        for outcome in ["success", "failure"] {
            let _ = runs.get_or_create(&OutcomeLabel { outcome });
        }
        let waiting = Gauge::default();
        registry.register(
            "backfills_waiting",
            "Backfill requests of the tasks this node leads that wait for their next tick",
            waiting.clone(),
        );
        BackfillMetrics { runs, waiting }
    }
}

/// The node-wide metrics of firing: lateness, claims, leases and running jobs.
struct FiringMetrics {
    lateness: Histogram,
    claims: Family<ClaimLabel, Counter>,
    leases_held: Gauge,
    running_jobs: Gauge,
    /// `zkcron_work_items` by pooled task, with the tasks it has series for (to remove the
    /// series of a task no longer loaded or no longer pooled).
    work_items: Family<TaskLabel, Gauge>,
    pooled: Mutex<BTreeMap<String, i64>>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabel {
    task: String,
}

/// The metrics of the ZooKeeper session and of the clock measured against it.
struct ZookeeperMetrics {
    connected: Gauge,
    reconnects: Counter,
    session_losses: Counter,
    operation: Histogram,
    clock_skew: Gauge<f64, AtomicU64>,
    clock_skew_known: Gauge<i64, AtomicI64>,
}

/// The metrics of one daemon; clones share them.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl FiringMetrics {
    /// Registers the firing metrics, the per-task families over `tasks` among them, in the
    /// order they are exposed.
    fn register(registry: &mut Registry, tasks: &Arc<TaskSeries>) -> FiringMetrics {
        let family = |kind| TaskFamily {
            series: tasks.clone(),
            kind,
        };
        registry.register(
            "fires",
            "Ticks this node claimed, by task and outcome (success, failure, skipped, not_started)",
            family(TaskFamilyKind::Fires),
        );
        // 1 ms to ~65 s.
        let lateness = Histogram::new(exponential_buckets(0.001, 2.0, 17));
        registry.register_with_unit(
            "fire_lateness",
            "Seconds from a tick's due time (instant plus jitter) to its process's spawn",
            prometheus_client::registry::Unit::Seconds,
            lateness.clone(),
        );
        let claims = Family::<ClaimLabel, Counter>::default();
        registry.register(
            "claims",
            "Claims of ticks this node sent, by result (won, lost)",
            claims.clone(),
        );
        let leases_held = Gauge::default();
        registry.register(
            "leases_held",
            "Tasks this node leads now",
            leases_held.clone(),
        );
        let running_jobs = Gauge::default();
        registry.register(
            "running_jobs",
            "Jobs running on this node now",
            running_jobs.clone(),
        );
        let work_items = Family::<TaskLabel, Gauge>::default();
        registry.register(
            "work_items",
            "Items of a pooled task this node runs each tick now",
            work_items.clone(),
        );
        registry.register_with_unit(
            "last_success_timestamp",
            "Unix time at which a run of the task last ended successfully on this node",
            prometheus_client::registry::Unit::Seconds,
            family(TaskFamilyKind::LastSuccess),
        );
        registry.register(
            "catch_up_runs",
            "Missed ticks this node ran late by catch_up",
            family(TaskFamilyKind::CatchUp),
        );
        for result in ["won", "lost"] {
            let _ = claims.get_or_create(&ClaimLabel { result });
        }
        FiringMetrics {
            lateness,
            claims,
            leases_held,
            running_jobs,
            work_items,
            pooled: Mutex::default(),
        }
    }
}

impl ZookeeperMetrics {
    /// Registers the ZooKeeper metrics, in the order they are exposed.
    fn register(registry: &mut Registry) -> ZookeeperMetrics {
        let connected = Gauge::default();
        registry.register(
        "zookeeper_connected",
        "1 while this node has a connected ZooKeeper session, else 0 (always 0 with the local backend)",
        connected.clone(),
    );
        let reconnects = Counter::default();
        registry.register(
            "zookeeper_reconnects",
            "Connections to ZooKeeper established after the first one",
            reconnects.clone(),
        );
        let session_losses = Counter::default();
        registry.register(
            "zookeeper_session_losses",
            "ZooKeeper sessions lost (expired, or disconnected past the session timeout)",
            session_losses.clone(),
        );
        // 0.5 ms to ~16 s.
        let operation = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        registry.register_with_unit(
            "zookeeper_operation_duration",
            "Seconds a ZooKeeper operation took, from send to answer",
            prometheus_client::registry::Unit::Seconds,
            operation.clone(),
        );
        let clock_skew = Gauge::<f64, AtomicU64>::default();
        registry.register_with_unit(
            "clock_skew",
            "Estimated offset of this node's clock from ZooKeeper's (positive: this node ahead)",
            prometheus_client::registry::Unit::Seconds,
            clock_skew.clone(),
        );
        let clock_skew_known = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "clock_skew_measured",
            "1 once the clock skew has been measured against ZooKeeper, else 0",
            clock_skew_known.clone(),
        );
        ZookeeperMetrics {
            connected,
            reconnects,
            session_losses,
            operation,
            clock_skew,
            clock_skew_known,
        }
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("zkcron");
        let tasks = Arc::new(TaskSeries::default());
        let firing = FiringMetrics::register(&mut registry, &tasks);
        let zookeeper = ZookeeperMetrics::register(&mut registry);
        let backfill = BackfillMetrics::register(&mut registry);
        let chain = ChainMetrics::register(&mut registry);
        let (leader, build_info) = leader::register(&mut registry);
        let ticks = ticks::register(&mut registry);
        Metrics(Arc::new(Inner {
            registry,
            tasks,
            firing,
            zookeeper,
            backfill,
            chain,
            leader,
            build_info,
            ticks,
        }))
    }

    /// The OpenMetrics text, which Prometheus asks for; [`classic::from_openmetrics`] makes the
    /// text format 0.0.4 from it.
    pub fn encode(&self) -> String {
        self.0.leader.refresh();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.0.registry)
            .expect("writing to a String cannot fail");
        text
    }

    /// Starts the task's counters at 0, so that `rate()` and `increase()` see its first fire
    /// (a series that appears at 1 shows no increase).
    pub fn task_loaded(&self, task: &Arc<str>) {
        self.tasks_loaded([task.clone()]);
    }

    /// [`Metrics::task_loaded`] for many tasks at once (a reload).
    pub fn tasks_loaded(&self, tasks: impl IntoIterator<Item = Arc<str>>) {
        self.0.tasks.loaded(tasks);
    }

    pub fn fired(&self, task: &str, outcome: FireOutcome) {
        self.0.tasks.update(task, |counts| {
            counts.present |= outcome_bit(outcome);
            counts.fires[outcome as usize] += 1;
        });
    }

    /// `count` ticks of `task` recorded as not run (`zkcron_ticks_total`).
    pub fn ticks_not_run(
        &self,
        task: &str,
        outcome: &'static str,
        reason: &'static str,
        count: u64,
    ) {
        self.0.ticks.add(task, outcome, reason, count);
    }

    /// The tasks no live node may run now (`zkcron_task_no_eligible_node`).
    pub fn set_no_eligible(&self, tasks: &std::collections::BTreeSet<String>) {
        self.0.ticks.set_no_eligible(tasks);
    }

    /// A run ended successfully at `at_unix` (seconds since the epoch).
    pub fn succeeded(&self, task: &str, at_unix: f64) {
        self.0.tasks.update(task, |counts| {
            counts.present |= LAST_SUCCESS;
            counts.last_success = at_unix;
        });
    }

    pub fn lateness(&self, seconds: f64) {
        self.0.firing.lateness.observe(seconds.max(0.0));
    }

    pub fn claim(&self, won: bool) {
        let result = if won { "won" } else { "lost" };
        self.0
            .firing
            .claims
            .get_or_create(&ClaimLabel { result })
            .inc();
    }

    pub fn catch_up_run(&self, task: &str) {
        self.0.tasks.update(task, |counts| {
            counts.present |= CATCH_UP;
            counts.catch_up += 1;
        });
    }

    pub fn set_leases_held(&self, held: usize) {
        self.0.firing.leases_held.set(held as i64);
    }

    pub fn set_running_jobs(&self, running: usize) {
        self.0.firing.running_jobs.set(running as i64);
    }

    /// The items of each pooled task this node runs each tick now (0 for a pooled task it
    /// runs none of), by task: every pooled task loaded, and only those, has a series.
    pub fn set_work_items(&self, items: BTreeMap<String, usize>) {
        let firing = &self.0.firing;
        let mut pooled = firing.pooled.lock().expect("pool metrics poisoned");
        for gone in pooled.keys().filter(|task| !items.contains_key(*task)) {
            firing.work_items.remove(&TaskLabel { task: gone.clone() });
        }
        let items: BTreeMap<String, i64> = items
            .into_iter()
            .map(|(task, count)| (task, count as i64))
            .collect();
        for (task, &count) in &items {
            if pooled.get(task) != Some(&count) {
                let label = TaskLabel { task: task.clone() };
                firing.work_items.get_or_create(&label).set(count);
            }
        }
        *pooled = items;
    }

    /// A backfill tick's run ended.
    pub fn backfill_run(&self, succeeded: bool) {
        let outcome = if succeeded { "success" } else { "failure" };
        self.0
            .backfill
            .runs
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    /// A chained run (`after`) ended.
    pub fn chained_run(&self, succeeded: bool) {
        let outcome = if succeeded { "success" } else { "failure" };
        self.0
            .chain
            .runs
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    /// A chained run (`after`) of a paused task was skipped.
    pub fn chained_run_skipped(&self) {
        self.0
            .chain
            .runs
            .get_or_create(&OutcomeLabel { outcome: "skipped" })
            .inc();
    }

    /// A run's stored end requested `count` chained runs.
    pub fn chain_requests(&self, count: usize) {
        self.0.chain.requests.inc_by(count as u64);
    }

    pub fn set_backfills_waiting(&self, waiting: usize) {
        self.0.backfill.waiting.set(waiting as i64);
    }

    pub fn set_zk_connected(&self, connected: bool) {
        self.0.zookeeper.connected.set(i64::from(connected));
    }

    pub fn zk_reconnected(&self) {
        self.0.zookeeper.reconnects.inc();
    }

    pub fn zk_session_lost(&self) {
        self.0.zookeeper.session_losses.inc();
    }

    pub fn zk_operation(&self, seconds: f64) {
        self.0.zookeeper.operation.observe(seconds);
    }

    /// Whether the ZooKeeper session is connected now (`/healthz`).
    pub fn zk_connected(&self) -> bool {
        self.0.zookeeper.connected.get() == 1
    }

    /// The clock offset from ZooKeeper's in seconds, once measured (`/healthz`).
    pub fn clock_skew_seconds(&self) -> Option<f64> {
        (self.0.zookeeper.clock_skew_known.get() == 1).then(|| self.0.zookeeper.clock_skew.get())
    }

    /// The clock offset from ZooKeeper's, once measured.
    pub fn set_clock_skew_ms(&self, offset_ms: Option<i64>) {
        if let Some(offset) = offset_ms {
            self.0.zookeeper.clock_skew.set(offset as f64 / 1000.0);
            self.0.zookeeper.clock_skew_known.set(1);
        }
    }
}

/// The bit of `outcome`'s series in [`TaskCounts::present`].
fn outcome_bit(outcome: FireOutcome) -> u8 {
    1 << (outcome as usize)
}

#[cfg(test)]
mod tests;
