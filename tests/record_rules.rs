//! One table of fire-record cases (a record's state, a request, the answer) run against every
//! backend through the public [`Coordinator`] API: a model built on `coord::record` alone (the
//! rules, no storage), the embedded backend, and the ZooKeeper backend against a real server.
//!
//! Each case owns a task. Its record is set up by two nodes: the first claims (and perhaps ends
//! runs), then dies — a crash: no goodbye, its live runs lost — and the second takes over, may
//! claim more, and is asked. The embedded backend's "second node" is the same state dir opened
//! again; the ZooKeeper backend's nodes are two `ZkCoordinator`s, the first of a newer release
//! (so it leads every task while it lives) on a runtime of its own that the test drops.
//!
//! A backend is added with a [`Backend`] impl; the table does not change.

mod common;

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::zk::{self, ZkServer};
use tokio::runtime::Runtime;
use tokio::sync::watch;
use zkcron::coord::local::LocalCoordinator;
use zkcron::coord::record::{self, FireView, Verdict};
use zkcron::coord::zk::{ZkCoordinator, ZkSettings};
use zkcron::coord::{ClaimIntent, ClaimOutcome, CoordError, Coordinator, Leadership, RunResult};
use zkcron::task::{Identity, TaskSpec, parse_task};

const LIMIT: Duration = Duration::from_secs(30);

fn at(minute: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_767_225_600 + 60 * minute, 0).unwrap()
}

/// The ticks of every case: before, at and after the record's tick.
const EARLIER: i64 = 1;
const TICK: i64 = 2;
const LATER: i64 = 3;

/// A step that sets a case's record up.
#[derive(Debug, Clone, Copy)]
enum Step {
    Claim(i64, ClaimIntent),
    /// The run of this tick ends; the result names this node.
    End(i64, &'static str),
    Rerun(i64),
}

/// What is asked of the second node, and what it answers.
#[derive(Debug, Clone, Copy)]
enum Ask {
    Claim(i64),
    Orphan,
    Rerun(i64),
    LastResult,
    Leads,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Outcome(ClaimOutcome),
    Orphan(Option<DateTime<Utc>>),
    LastResult(Option<(DateTime<Utc>, String)>),
    Leads(bool),
}

fn claimed() -> Answer {
    Answer::Outcome(ClaimOutcome::Claimed)
}

fn already(minute: i64) -> Answer {
    Answer::Outcome(ClaimOutcome::AlreadyClaimed { record: at(minute) })
}

fn not_leader() -> Answer {
    Answer::Outcome(ClaimOutcome::NotLeader)
}

struct Case {
    name: &'static str,
    enabled: bool,
    /// By the first node, which then dies.
    first: &'static [Step],
    /// By the second node, after it took over.
    second: &'static [Step],
    ask: Ask,
    expect: fn() -> Answer,
}

use Step::{Claim, End, Rerun};
const RUN: ClaimIntent = ClaimIntent::Run;
const SKIP: ClaimIntent = ClaimIntent::Skip;

/// The first node claimed TICK to run and died mid-run.
const LOST: &[Step] = &[Claim(TICK, RUN)];

const CASES: &[Case] = &[
    Case {
        name: "no record: a claim wins",
        enabled: true,
        first: &[],
        second: &[],
        ask: Ask::Claim(TICK),
        expect: claimed,
    },
    Case {
        name: "no record: nothing is orphaned",
        enabled: true,
        first: &[],
        second: &[],
        ask: Ask::Orphan,
        expect: || Answer::Orphan(None),
    },
    Case {
        name: "no record: a rerun is refused as claimed, not as not-leader",
        enabled: true,
        first: &[],
        second: &[],
        ask: Ask::Rerun(TICK),
        expect: || already(TICK),
    },
    Case {
        name: "lost run: its tick is not claimed again",
        enabled: true,
        first: LOST,
        second: &[],
        ask: Ask::Claim(TICK),
        expect: || already(TICK),
    },
    Case {
        name: "lost run: an earlier tick is not claimed",
        enabled: true,
        first: LOST,
        second: &[],
        ask: Ask::Claim(EARLIER),
        expect: || already(TICK),
    },
    Case {
        name: "lost run: a later tick wins",
        enabled: true,
        first: LOST,
        second: &[],
        ask: Ask::Claim(LATER),
        expect: claimed,
    },
    Case {
        name: "lost run: it is the orphan",
        enabled: true,
        first: LOST,
        second: &[],
        ask: Ask::Orphan,
        expect: || Answer::Orphan(Some(at(TICK))),
    },
    Case {
        name: "lost run: its rerun is admitted",
        enabled: true,
        first: LOST,
        second: &[],
        ask: Ask::Rerun(TICK),
        expect: claimed,
    },
    Case {
        name: "lost run: another tick is not rerun",
        enabled: true,
        first: LOST,
        second: &[],
        ask: Ask::Rerun(EARLIER),
        expect: || already(TICK),
    },
    Case {
        name: "lost run: rerun once",
        enabled: true,
        first: LOST,
        second: &[Rerun(TICK)],
        ask: Ask::Rerun(TICK),
        expect: || already(TICK),
    },
    Case {
        name: "lost run: rerunning is not orphaned",
        enabled: true,
        first: LOST,
        second: &[Rerun(TICK)],
        ask: Ask::Orphan,
        expect: || Answer::Orphan(None),
    },
    Case {
        name: "ended run: not orphaned",
        enabled: true,
        first: &[Claim(TICK, RUN), End(TICK, "first")],
        second: &[],
        ask: Ask::Orphan,
        expect: || Answer::Orphan(None),
    },
    Case {
        name: "ended run: no rerun",
        enabled: true,
        first: &[Claim(TICK, RUN), End(TICK, "first")],
        second: &[],
        ask: Ask::Rerun(TICK),
        expect: || already(TICK),
    },
    Case {
        name: "skipped tick: not orphaned",
        enabled: true,
        first: &[Claim(TICK, SKIP)],
        second: &[],
        ask: Ask::Orphan,
        expect: || Answer::Orphan(None),
    },
    Case {
        name: "skipped tick: no rerun",
        enabled: true,
        first: &[Claim(TICK, SKIP)],
        second: &[],
        ask: Ask::Rerun(TICK),
        expect: || already(TICK),
    },
    Case {
        name: "own live run: not orphaned",
        enabled: true,
        first: &[],
        second: &[Claim(TICK, RUN)],
        ask: Ask::Orphan,
        expect: || Answer::Orphan(None),
    },
    Case {
        name: "own live run: no rerun",
        enabled: true,
        first: &[],
        second: &[Claim(TICK, RUN)],
        ask: Ask::Rerun(TICK),
        expect: || already(TICK),
    },
    Case {
        name: "results: the newer tick is kept when an older run ends last",
        enabled: true,
        first: &[],
        second: &[
            Claim(EARLIER, RUN),
            Claim(TICK, RUN),
            End(TICK, "second"),
            End(EARLIER, "second"),
        ],
        ask: Ask::LastResult,
        expect: || Answer::LastResult(Some((at(TICK), "second".into()))),
    },
    Case {
        name: "results: a newer tick replaces",
        enabled: true,
        first: &[Claim(EARLIER, RUN), End(EARLIER, "first")],
        second: &[Claim(TICK, RUN), End(TICK, "second")],
        ask: Ask::LastResult,
        expect: || Answer::LastResult(Some((at(TICK), "second".into()))),
    },
    Case {
        name: "results: of one tick the later written wins",
        enabled: true,
        first: LOST,
        second: &[Rerun(TICK), End(TICK, "second"), End(TICK, "late")],
        ask: Ask::LastResult,
        expect: || Answer::LastResult(Some((at(TICK), "late".into()))),
    },
    Case {
        name: "disabled: not led",
        enabled: false,
        first: &[],
        second: &[],
        ask: Ask::Leads,
        expect: || Answer::Leads(false),
    },
    Case {
        name: "disabled: not claimed",
        enabled: false,
        first: &[],
        second: &[],
        ask: Ask::Claim(TICK),
        expect: not_leader,
    },
    Case {
        name: "disabled: not rerun",
        enabled: false,
        first: &[],
        second: &[],
        ask: Ask::Rerun(TICK),
        expect: not_leader,
    },
    Case {
        name: "enabled: led",
        enabled: true,
        first: &[],
        second: &[],
        ask: Ask::Leads,
        expect: || Answer::Leads(true),
    },
];

/// A case the ZooKeeper backend answers otherwise: its name, that answer, why. None since the
/// node decides claims, reruns, orphans and results by `coord::record`.
type Difference = (&'static str, fn() -> Answer, &'static str);

const ZK_TODAY: &[Difference] = &[];

fn task_name(index: usize) -> String {
    format!("case-{index}")
}

fn spec(name: &str, enabled: bool) -> TaskSpec {
    let defaults = common::task_defaults(Identity::current(), zkcron::task::TaskBackend::Local);
    let path = PathBuf::from(format!("{name}.toml"));
    let text = format!(
        "schedule = \"0 0 1 1 *\"\ncommand = \"true\"\noverlap = \"allow\"\nenabled = {enabled}\n"
    );
    parse_task(name, &path, &text, &defaults).expect("valid task")
}

fn specs() -> Vec<TaskSpec> {
    CASES
        .iter()
        .enumerate()
        .map(|(i, case)| spec(&task_name(i), case.enabled))
        .collect()
}

fn result_of(node: &str, minute: i64) -> RunResult {
    RunResult {
        tick: at(minute),
        node: node.into(),
        exit: "exit code 0".into(),
        success: true,
        attempts: 1,
        duration_ms: 5,
        finished_at: at(minute) + chrono::TimeDelta::seconds(1),
        ..RunResult::default()
    }
}

/// A node of some backend, driven from the test's thread.
trait Node {
    fn step(&self, task: &str, step: Step);
    fn ask(&self, task: &str, ask: Ask) -> Answer;
}

/// A [`Coordinator`] and the runtime it lives on.
struct Driven<C> {
    coordinator: C,
    runtime: Arc<Runtime>,
}

impl<C: Coordinator> Node for Driven<C> {
    fn step(&self, task: &str, step: Step) {
        let c = &self.coordinator;
        self.runtime.block_on(async {
            match step {
                Claim(minute, intent) => {
                    let outcome = c.claim(task, at(minute), intent).await.unwrap();
                    assert_eq!(outcome, ClaimOutcome::Claimed, "{task}: {step:?}");
                }
                End(minute, node) => c.run_ended(task, &result_of(node, minute)).await.unwrap(),
                Rerun(minute) => {
                    let outcome = c.reclaim(task, at(minute)).await.unwrap();
                    assert_eq!(outcome, ClaimOutcome::Claimed, "{task}: {step:?}");
                }
            }
        });
    }

    fn ask(&self, task: &str, ask: Ask) -> Answer {
        let c = &self.coordinator;
        self.runtime.block_on(async {
            match ask {
                Ask::Claim(minute) => {
                    Answer::Outcome(c.claim(task, at(minute), RUN).await.unwrap())
                }
                Ask::Orphan => Answer::Orphan(c.orphaned_tick(task).await.unwrap()),
                Ask::Rerun(minute) => Answer::Outcome(c.reclaim(task, at(minute)).await.unwrap()),
                Ask::LastResult => {
                    Answer::LastResult(c.last_result(task).await.unwrap().map(|r| (r.tick, r.node)))
                }
                Ask::Leads => Answer::Leads(c.leadership().borrow().may_fire(task)),
            }
        })
    }
}

/// A backend: two nodes that share its records, the first of which can die.
trait Backend {
    fn name(&self) -> &'static str;
    /// The first node, leading every enabled task.
    fn first(&mut self) -> &dyn Node;
    /// The first node dies (its live runs are lost) and the second leads every enabled task.
    fn kill_first_and_start_second(&mut self);
    fn second(&self) -> &dyn Node;
    /// What the backend answers today where it has not adopted the rules yet.
    fn known_today(&self, _case: &str) -> Option<Answer> {
        None
    }
}

fn run_table(backend: &mut dyn Backend) {
    for (i, case) in CASES.iter().enumerate() {
        for step in case.first {
            backend.first().step(&task_name(i), *step);
        }
    }
    backend.kill_first_and_start_second();
    let mut wrong = Vec::new();
    for (i, case) in CASES.iter().enumerate() {
        let task = task_name(i);
        for step in case.second {
            backend.second().step(&task, *step);
        }
        let expected = backend
            .known_today(case.name)
            .unwrap_or_else(|| (case.expect)());
        let answer = backend.second().ask(&task, case.ask);
        if answer != expected {
            wrong.push(format!(
                "{}: {} ({:?}): answered {answer:?}, expected {expected:?}",
                backend.name(),
                case.name,
                case.ask
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

// The rules alone: records in memory, every decision by `coord::record`.

#[derive(Default)]
struct ModelRecord {
    view: FireView,
    result: Option<RunResult>,
    claimer: String,
}

#[derive(Default)]
struct Store {
    records: HashMap<String, ModelRecord>,
    /// Live runs: (task, tick) → the node running it.
    live: HashMap<(String, DateTime<Utc>), String>,
    alive: HashSet<String>,
    /// Manual runs claimed (by fire id): a trigger is pending until then.
    manual: HashSet<String>,
}

struct Model {
    id: String,
    store: Arc<Mutex<Store>>,
    leadership: watch::Sender<Leadership>,
}

impl Model {
    fn new(id: &str, store: Arc<Mutex<Store>>) -> Model {
        store.lock().unwrap().alive.insert(id.to_string());
        Model {
            id: id.into(),
            store,
            leadership: watch::channel(Leadership::default()).0,
        }
    }

    /// The record of `task` as `coord::record` sees it from this node.
    fn view(&self, store: &Store, task: &str) -> FireView {
        let record = store.records.get(task);
        let mut view = record.map(|r| r.view).unwrap_or_default();
        view.leads = self.leadership.borrow().may_fire(task);
        view.claimer_alive = record.is_some_and(|r| store.alive.contains(&r.claimer));
        view.run_live = view
            .record
            .is_some_and(|tick| store.live.contains_key(&(task.to_string(), tick)));
        view
    }

    fn write_claim(&self, store: &mut Store, task: &str, tick: DateTime<Utc>, run: bool) {
        let record = store.records.entry(task.to_string()).or_default();
        record.view.record = Some(tick);
        record.view.claimed_to_run = run;
        record.claimer = self.id.clone();
        if run {
            store.live.insert((task.to_string(), tick), self.id.clone());
        }
    }
}

impl Coordinator for Model {
    async fn publish<T: Borrow<TaskSpec> + Sync>(&self, tasks: &[T]) -> Result<(), CoordError> {
        let led: BTreeSet<Arc<str>> = tasks
            .iter()
            .map(Borrow::borrow)
            .filter(|t| record::eligible(t))
            .map(|t| t.name.clone())
            .collect();
        self.leadership.send_modify(|l| l.tasks = Arc::new(led));
        Ok(())
    }

    fn leadership(&self) -> watch::Receiver<Leadership> {
        self.leadership.subscribe()
    }

    async fn last_claimed(&self, task: &str) -> Result<Option<DateTime<Utc>>, CoordError> {
        let store = self.store.lock().unwrap();
        Ok(store.records.get(task).and_then(|r| r.view.record))
    }

    /// This model keeps no ledger: the tick ledger's rules are `plan::ledger`'s, tested there
    /// and in the simulation.
    async fn claim_noting(
        &self,
        task: &str,
        tick: DateTime<Utc>,
        intent: ClaimIntent,
        _ticks: Vec<zkcron::plan::ledger::TickEntry>,
    ) -> Result<zkcron::coord::ClaimedShare, CoordError> {
        let mut store = self.store.lock().unwrap();
        if intent == ClaimIntent::Note {
            return Ok((ClaimOutcome::Claimed, None));
        }
        match record::admit_claim(&self.view(&store, task), tick) {
            Verdict::Refuse(outcome) => Ok((outcome, None)),
            Verdict::Admit => {
                self.write_claim(&mut store, task, tick, intent == RUN);
                Ok((ClaimOutcome::Claimed, None))
            }
        }
    }

    async fn orphaned_tick(&self, task: &str) -> Result<Option<DateTime<Utc>>, CoordError> {
        let store = self.store.lock().unwrap();
        Ok(record::orphan(&self.view(&store, task)))
    }

    async fn reclaim(&self, task: &str, tick: DateTime<Utc>) -> Result<ClaimOutcome, CoordError> {
        let mut store = self.store.lock().unwrap();
        match record::admit_rerun(&self.view(&store, task), tick) {
            Verdict::Refuse(outcome) => Ok(outcome),
            Verdict::Admit => {
                self.write_claim(&mut store, task, tick, true);
                Ok(ClaimOutcome::Claimed)
            }
        }
    }

    async fn runs_elsewhere(&self, _task: &str) -> Result<usize, CoordError> {
        Ok(0)
    }

    async fn queued_tick(&self, _task: &str) -> Result<Option<DateTime<Utc>>, CoordError> {
        Ok(None)
    }

    async fn runs_ended_elsewhere(&self, _task: &str) -> Result<(), CoordError> {
        Ok(())
    }

    async fn run_ended(&self, task: &str, result: &RunResult) -> Result<(), CoordError> {
        let mut store = self.store.lock().unwrap();
        store.live.remove(&(task.to_string(), result.tick));
        let record = store.records.entry(task.to_string()).or_default();
        if record::supersedes(record.view.result, result.tick) {
            record.view.result = Some(result.tick);
            record.result = Some(result.clone());
        }
        Ok(())
    }

    async fn last_result(&self, task: &str) -> Result<Option<RunResult>, CoordError> {
        let store = self.store.lock().unwrap();
        Ok(store.records.get(task).and_then(|r| r.result.clone()))
    }

    async fn claim_manual(
        &self,
        task: &str,
        trigger: &zkcron::coord::Trigger,
    ) -> Result<ClaimOutcome, CoordError> {
        let mut store = self.store.lock().unwrap();
        let pending = !store.manual.contains(&trigger.fire_id);
        let leads = self.leadership.borrow().may_fire(task);
        match record::admit_manual(leads, pending, trigger.requested_at) {
            Verdict::Refuse(outcome) => Ok(outcome),
            Verdict::Admit => {
                store.manual.insert(trigger.fire_id.clone());
                Ok(ClaimOutcome::Claimed)
            }
        }
    }

    async fn release_all(&self) {
        self.leadership
            .send_modify(|l| l.tasks = Arc::new(BTreeSet::new()));
    }
}

struct ModelBackend {
    store: Arc<Mutex<Store>>,
    runtime: Arc<Runtime>,
    first: Option<Driven<Model>>,
    second: Option<Driven<Model>>,
}

impl ModelBackend {
    fn start(&self, id: &str) -> Driven<Model> {
        let model = Model::new(id, self.store.clone());
        self.runtime.block_on(model.publish(&specs())).unwrap();
        Driven {
            coordinator: model,
            runtime: self.runtime.clone(),
        }
    }
}

impl Backend for ModelBackend {
    fn name(&self) -> &'static str {
        "coord::record"
    }

    fn first(&mut self) -> &dyn Node {
        if self.first.is_none() {
            self.first = Some(self.start("first"));
        }
        self.first.as_ref().unwrap()
    }

    fn kill_first_and_start_second(&mut self) {
        self.first();
        self.first = None;
        let mut store = self.store.lock().unwrap();
        store.alive.remove("first");
        store.live.retain(|_, node| node != "first");
        drop(store);
        self.second = Some(self.start("second"));
    }

    fn second(&self) -> &dyn Node {
        self.second.as_ref().unwrap()
    }
}

#[test]
fn the_rules_alone_answer_the_table() {
    run_table(&mut ModelBackend {
        store: Default::default(),
        runtime: Arc::new(Runtime::new().unwrap()),
        first: None,
        second: None,
    });
}

// The embedded backend: the second node is the state dir opened again after a crash.

struct LocalBackend {
    // Dropped first: the backend writes its history as it goes, before the dir is removed.
    node: Option<Driven<LocalCoordinator>>,
    runtime: Arc<Runtime>,
    dir: tempfile::TempDir,
}

impl LocalBackend {
    fn open(&mut self) {
        let coordinator =
            LocalCoordinator::open(self.dir.path(), zkcron::clock::Clock::system()).unwrap();
        self.runtime
            .block_on(coordinator.publish(&specs()))
            .unwrap();
        self.node = Some(Driven {
            coordinator,
            runtime: self.runtime.clone(),
        });
    }
}

impl Backend for LocalBackend {
    fn name(&self) -> &'static str {
        "local"
    }

    fn first(&mut self) -> &dyn Node {
        if self.node.is_none() {
            self.open();
        }
        self.node.as_ref().unwrap()
    }

    fn kill_first_and_start_second(&mut self) {
        self.first();
        // Dropped without ending its runs: what a crash leaves in the state dir.
        self.node = None;
        self.open();
    }

    fn second(&self) -> &dyn Node {
        self.node.as_ref().unwrap()
    }
}

#[test]
fn the_local_backend_answers_the_table() {
    run_table(&mut LocalBackend {
        dir: common::tempdir(),
        runtime: Arc::new(Runtime::new().unwrap()),
        node: None,
    });
}

// The ZooKeeper backend against a real server.

struct ZkBackend {
    server: &'static ZkServer,
    connect: String,
    runtime: Arc<Runtime>,
    first: Option<Driven<ZkCoordinator>>,
    second: Option<Driven<ZkCoordinator>>,
}

impl ZkBackend {
    /// Starts a node on `runtime` and waits until it leads every enabled task.
    fn start(&self, id: &str, release: &str, runtime: Arc<Runtime>) -> Driven<ZkCoordinator> {
        let settings = ZkSettings {
            connect: self.connect.clone(),
            cluster: "table".into(),
            // The first node dies by losing its connection: its session then expires soon.
            session_timeout: Duration::from_secs(2),
            max_clock_skew: None,
            node_id: id.into(),
            release: release.parse().unwrap(),
            labels: BTreeMap::new(),
            history_runs: 100,
            http: None,
            auth: Default::default(),
            tls: None,
        };
        let enabled = CASES.iter().filter(|c| c.enabled).count();
        let coordinator = runtime.block_on(async {
            let coordinator =
                ZkCoordinator::start(settings, zkcron::clock::Clock::system()).unwrap();
            coordinator.publish(&specs()).await.unwrap();
            let mut leadership = coordinator.leadership();
            tokio::time::timeout(
                LIMIT,
                leadership.wait_for(|l| !l.paused && l.tasks.len() == enabled),
            )
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{id} did not come to lead the {enabled} enabled tasks: {:?}\n{}",
                    *coordinator.leadership().borrow(),
                    self.server.describe_state()
                )
            })
            .unwrap();
            coordinator
        });
        Driven {
            coordinator,
            runtime,
        }
    }
}

impl Backend for ZkBackend {
    fn name(&self) -> &'static str {
        "zookeeper"
    }

    fn first(&mut self) -> &dyn Node {
        if self.first.is_none() {
            // Of a newer release than the second: it leads every task while it lives.
            self.first = Some(self.start("first", "2.0.0", Arc::new(Runtime::new().unwrap())));
        }
        self.first.as_ref().unwrap()
    }

    fn kill_first_and_start_second(&mut self) {
        self.first();
        let Driven {
            coordinator,
            runtime,
        } = self.first.take().unwrap();
        drop(coordinator);
        // The runtime and its client go without closing the session, as with a killed
        // process: the session expires, and its lease and run znodes with it.
        Arc::into_inner(runtime)
            .expect("only the first node uses its runtime")
            .shutdown_background();
        self.second = Some(self.start("second", "1.0.0", self.runtime.clone()));
    }

    fn second(&self) -> &dyn Node {
        self.second.as_ref().unwrap()
    }

    fn known_today(&self, case: &str) -> Option<Answer> {
        ZK_TODAY
            .iter()
            .find(|(name, _, _)| *name == case)
            .map(|(_, answer, _)| answer())
    }
}

#[test]
fn the_zookeeper_backend_answers_the_table() {
    let server = zk::shared();
    let connect = server.chroot_connect();
    let mut backend = ZkBackend {
        server,
        connect,
        runtime: Arc::new(Runtime::new().unwrap()),
        first: None,
        second: None,
    };
    run_table(&mut backend);
    if let Some(second) = backend.second.take() {
        second.runtime.block_on(async {
            second.coordinator.release_all().await;
            second.coordinator.close().await;
        });
    }
}

#[test]
fn every_known_difference_of_the_zookeeper_backend_names_a_case_of_the_table() {
    for (name, answer, why) in ZK_TODAY {
        let case = CASES.iter().find(|c| c.name == *name);
        let case = case.unwrap_or_else(|| panic!("{name:?} is not a case"));
        assert_ne!(
            (case.expect)(),
            answer(),
            "{name}: not a difference ({why})"
        );
    }
}
