//! The fixtures the node's unit tests share: a node's config and clock, task specs, a small
//! in-memory ZooKeeper ([`Store`], the simulation's [`ModelZk`] as one session: the tests
//! deliver the events they mean, or [`pump`] delivers those of the node's watches), the loop that runs the
//! node against it until it is quiet, a node started on it, asking it a request, and the
//! records a test plants (a pause or drain mark, a pending manual run).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use semver::Version;

use super::io::{
    Answer, Answered, Input, Now, Output, Request, Stat, WatchKind, ZkFail, ZkOk, ZkOp,
};
use super::model_zk::ModelZk;
use super::{MemberInfo, Node, NodeBugs, NodeConfig};
use crate::coord::lease::Member;
use crate::coord::records::{HistoryRecord, MarkRecord, MemberRecord, TriggerRecord, TriggerState};
use crate::coord::{ClaimOutcome, RunResult, Trigger};
use crate::task::{TaskDefaults, TaskSpec, parse_task};

/// The tick the tests claim, run and end, in Unix seconds.
pub(super) const TICK: i64 = 1_800_000_000;

/// [`TICK`] as an instant.
pub(super) fn tick() -> DateTime<Utc> {
    DateTime::from_timestamp(TICK, 0).unwrap()
}

pub(super) const BASE: &str = "/zkcron/test";

/// The config of node `id`: release 1.0.0, a 10 s session, no deliberate bug.
pub(super) fn config(id: &str) -> NodeConfig {
    NodeConfig {
        id: id.into(),
        release: Version::new(1, 0, 0),
        // The last millionth of the period: the first task-set collection is an hour away.
        seed: 999_999,
        base: BASE.into(),
        connect: "127.0.0.1:2181".into(),
        session_timeout: Duration::from_secs(10),
        max_clock_skew: None,
        labels: Default::default(),
        host: "h".into(),
        pid: 1,
        http: None,
        started_at: DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
        bugs: NodeBugs::default(),
        history_runs: 100,
        acl: Default::default(),
    }
}

/// `ms` milliseconds after the node started (its wall clock: [`TICK`] and `ms`).
pub(super) fn at(ms: u64) -> Now {
    Now {
        mono: Duration::from_millis(ms),
        wall: DateTime::from_timestamp_millis(1_800_000_000_000 + ms as i64).unwrap(),
    }
}

/// `secs` seconds after the node started: [`at`] in whole seconds.
pub(super) fn at_secs(secs: u64) -> Now {
    at(secs * 1_000)
}

/// What the node has to say now.
pub(super) fn drain(node: &mut Node) -> Vec<Output> {
    std::iter::from_fn(|| node.poll()).collect()
}

/// Task `name`, every second, running `true`, with the task-file lines `extra`.
pub(super) fn spec(name: &str, extra: &str) -> TaskSpec {
    let defaults = TaskDefaults::for_tests();
    let text = format!("schedule = \"* * * * * *\"\ncommand = \"true\"\n{extra}\n");
    parse_task(name, Path::new("t.toml"), &text, &defaults).expect("valid task")
}

/// A mark (pause or drain) as the operator writes it.
pub(super) fn mark() -> Vec<u8> {
    serde_json::to_vec(&MarkRecord {
        format: 1,
        at: DateTime::from_timestamp(1_799_999_000, 0).unwrap(),
        by: "ops@h".into(),
        reason: None,
    })
    .unwrap()
}

/// The node's ZooKeeper: the in-memory server the simulation runs on ([`ModelZk`]), with
/// sessions 1 and 2 open for ever (the tests expire nothing), its clock the node's wall clock.
/// Watch events go to [`Store::events`] for the tests' pump to deliver (or not).
pub(super) struct Store {
    pub(super) zk: ModelZk,
    /// Watch events of the node's persistent recursive watches, not delivered yet.
    pub(super) events: Vec<(String, WatchKind)>,
    /// Znodes whose ACL keeps the node from reading them.
    pub(super) unreadable: Vec<String>,
    /// The session of the client being pumped, owner of what it creates as ephemeral, if not
    /// session 1 (a second node's).
    pub(super) session: Option<i64>,
}

impl Default for Store {
    fn default() -> Store {
        let mut zk = ModelZk::new(0);
        for session in [1, 2] {
            zk.open_session_as(session, u64::MAX / 2, 0);
        }
        Store {
            zk,
            events: Vec::new(),
            unreadable: Vec::new(),
            session: None,
        }
    }
}

impl Store {
    /// Applies `zk` as the pumped session's call at `now`, noting the watch events it causes.
    pub(super) fn apply(&mut self, zk: &ZkOp, now: Now) -> Result<ZkOk, ZkFail> {
        if let ZkOp::GetData { path } = zk
            && self.unreadable.contains(path)
        {
            return Err(ZkFail::NoAuth);
        }
        let session = self.session.unwrap_or(1);
        let ms = u64::try_from(now.wall.timestamp_millis()).expect("after 1970");
        let (result, events) = self.zk.apply(session, zk, ms, &mut Vec::new());
        for event in events {
            if !self.zk.watchers(&event.path).is_empty() {
                self.events.push((event.path, event.kind));
            }
        }
        result
    }

    /// Plants `path` with `data` (version 0, no owner), its missing parents empty.
    pub(super) fn put(&mut self, path: impl AsRef<str>, data: Vec<u8>) {
        self.zk.plant(path.as_ref(), data, Stat::default());
    }

    /// Plants `path` with `data` and `stat`.
    pub(super) fn put_with(&mut self, path: impl AsRef<str>, data: Vec<u8>, stat: Stat) {
        self.zk.plant(path.as_ref(), data, stat);
    }

    /// Removes `path` and what is under it, as a stranger does; whether it was there.
    pub(super) fn remove(&mut self, path: impl AsRef<str>) -> bool {
        self.zk.remove_tree(path.as_ref())
    }

    pub(super) fn has(&self, path: impl AsRef<str>) -> bool {
        self.zk.nodes.contains_key(path.as_ref())
    }

    /// The data and stat of `path`, if it exists.
    pub(super) fn get(&self, path: impl AsRef<str>) -> Option<(&[u8], Stat)> {
        let znode = self.zk.nodes.get(path.as_ref())?;
        Some((&znode.data, znode.stat))
    }

    /// The data and stat of `path`, which exists.
    pub(super) fn znode(&self, path: impl AsRef<str>) -> (&[u8], Stat) {
        let path = path.as_ref();
        self.get(path).unwrap_or_else(|| panic!("no znode {path}"))
    }

    pub(super) fn data(&self, path: impl AsRef<str>) -> &[u8] {
        self.znode(path).0
    }

    pub(super) fn stat(&self, path: impl AsRef<str>) -> Stat {
        self.znode(path).1
    }

    /// The stat of `path`, which exists, to change as a stranger's write would.
    pub(super) fn stat_mut(&mut self, path: impl AsRef<str>) -> &mut Stat {
        let path = path.as_ref();
        let znode = self.zk.nodes.get_mut(path);
        &mut znode.unwrap_or_else(|| panic!("no znode {path}")).stat
    }

    /// Every path, in order.
    pub(super) fn paths(&self) -> impl Iterator<Item = &String> {
        self.zk.nodes.keys()
    }

    pub(super) fn member(&self, id: &str) -> MemberRecord {
        serde_json::from_slice(self.data(format!("{BASE}/members/{id}"))).unwrap()
    }
}

/// Runs the node against the store until it is quiet at `now`; returns the reports.
pub(super) fn pump(node: &mut Node, store: &mut Store, now: Now) -> Vec<String> {
    pump_with(node, store, now, |_, _, _| {})
}

/// [`pump`], calling `after` with each operation once the store has applied it, and its
/// answer, before the node sees it: a test's way to interleave another client's writes, or to
/// lose an answer.
pub(super) fn pump_with(
    node: &mut Node,
    store: &mut Store,
    now: Now,
    mut after: impl FnMut(&ZkOp, &mut Store, &mut Result<ZkOk, ZkFail>),
) -> Vec<String> {
    pump_delivering(node, store, now, |_, zk, store, result| {
        after(zk, store, result);
        true
    })
}

/// [`pump_with`], where `after` also gets the operation's id and says whether the node gets
/// the answer now (`false`: the test keeps it, to deliver later or never).
pub(super) fn pump_delivering(
    node: &mut Node,
    store: &mut Store,
    now: Now,
    mut after: impl FnMut(u64, &ZkOp, &mut Store, &mut Result<ZkOk, ZkFail>) -> bool,
) -> Vec<String> {
    let mut said = Vec::new();
    for _ in 0..100 {
        if node.poll_timeout().is_some_and(|t| t <= now.mono) {
            node.handle_timeout(now);
        }
        let outputs: Vec<Output> = std::iter::from_fn(|| node.poll()).collect();
        let events = std::mem::take(&mut store.events);
        if outputs.is_empty()
            && events.is_empty()
            && node.poll_timeout().is_none_or(|t| t > now.mono)
        {
            return said;
        }
        for (path, kind) in events {
            node.handle(Input::Watch { path, kind }, now);
        }
        for output in outputs {
            match output {
                Output::Call { op, zk } => {
                    let mut result = store.apply(&zk, now);
                    if after(op, &zk, store, &mut result) {
                        node.handle(Input::Reply { op, result }, now);
                    }
                }
                Output::Report(report) => said.push(report.to_string()),
                _ => {}
            }
        }
    }
    panic!("the node never went quiet: {said:?}");
}

/// Node n1 with `tasks` published and session 1 connected at 0, before any call is answered.
pub(super) fn connected(tasks: Vec<TaskSpec>) -> Node {
    let mut node = Node::new(config("n1"), at(0));
    node.handle(
        Input::Request {
            req: 1,
            request: Request::Publish(tasks),
        },
        at(0),
    );
    node.handle(
        Input::Connected {
            session_id: 1,
            negotiated_timeout: Duration::from_secs(10),
        },
        at(0),
    );
    node
}

/// [`connected`], run until quiet at 0: the node and its reports. Then, as the daemon does
/// for each task it comes to lead, the fire record of each pooled task it leads is read.
pub(super) fn started(store: &mut Store, tasks: Vec<TaskSpec>) -> (Node, Vec<String>) {
    let mut node = connected(tasks);
    let said = pump(&mut node, store, at(0));
    plan_pooled(&mut node, store, at(0));
    (node, said)
}

/// Reads the fire record of each pooled task the node leads (`LastClaimed`), as the daemon
/// does when it comes to lead one and when it gains a unit: its claims cover the units held
/// then.
pub(super) fn plan_pooled(node: &mut Node, store: &mut Store, now: Now) {
    let led: Vec<String> = node
        .leadership()
        .tasks
        .iter()
        .map(|t| t.to_string())
        .collect();
    let pooled: Vec<String> = led.into_iter().filter(|task| node.pooled(task)).collect();
    for task in pooled {
        serve_request(node, store, now, Request::LastClaimed { task });
    }
}

/// The leases in `store`, by task or unit.
pub(super) fn leases(store: &Store) -> Vec<String> {
    let prefix = format!("{BASE}/leases/");
    store
        .paths()
        .filter_map(|p| p.strip_prefix(&prefix))
        .map(str::to_string)
        .collect()
}

/// Member `id` of `release` defining `tasks`, with `labels`, as the node keeps it.
pub(super) fn member(
    id: &str,
    release: &str,
    tasks: &[TaskSpec],
    labels: &[(&str, &str)],
) -> MemberInfo {
    let (_, _, set) = crate::coord::records::encode_taskset(tasks);
    MemberInfo {
        member: Member {
            id: id.into(),
            release: Version::parse(release).unwrap(),
            seed: 1,
            tasks: set,
            may_lead: true,
            labels: Arc::new(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            drained: false,
        },
    }
}

/// What the node did while a test served it ([`serve_with`]).
#[derive(Default)]
pub(super) struct Served {
    /// Its calls, in order.
    pub(super) calls: Vec<ZkOp>,
    /// Its answers, by request id.
    pub(super) answers: BTreeMap<u64, Answer>,
    /// Its reports.
    pub(super) said: Vec<String>,
}

/// How a test answers a call instead of the store (`None`: the store answers).
pub(super) type Answering<'a> =
    Box<dyn FnMut(&ZkOp, &mut Store) -> Option<Result<ZkOk, ZkFail>> + 'a>;

/// Whether [`serve_with`] fires the node's timers that are due (as the driver does) or
/// leaves them, so that only the inputs a test gives act.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Timers {
    Fire,
    Leave,
}

/// The input that asks the node `request` as request `req`.
pub(super) fn request(req: u64, request: Request) -> Input {
    Input::Request { req, request }
}

/// Feeds `inputs` to the node at `now`, and answers its calls from `store` (or `answer`)
/// until it is quiet.
pub(super) fn serve_with(
    node: &mut Node,
    store: &mut Store,
    now: Now,
    inputs: impl IntoIterator<Item = Input>,
    timers: Timers,
    mut answer: Answering,
) -> Served {
    for input in inputs {
        node.handle(input, now);
    }
    let mut served = Served::default();
    for _ in 0..50 {
        if timers == Timers::Fire && node.poll_timeout().is_some_and(|t| t <= now.mono) {
            node.handle_timeout(now);
        }
        let outputs: Vec<Output> = std::iter::from_fn(|| node.poll()).collect();
        if outputs.is_empty() {
            break;
        }
        for output in outputs {
            match output {
                Output::Call { op, zk } => {
                    let result = answer(&zk, store).unwrap_or_else(|| store.apply(&zk, now));
                    served.calls.push(zk);
                    node.handle(Input::Reply { op, result }, now);
                }
                Output::Answer { req, answer } => {
                    served.answers.insert(req, answer);
                }
                Output::Report(report) => served.said.push(report.to_string()),
                _ => {}
            }
        }
    }
    served
}

/// Asks the node `request` (as request 900) at `now`, answering its calls from `store`; what
/// it did.
pub(super) fn serve_request(
    node: &mut Node,
    store: &mut Store,
    now: Now,
    request: Request,
) -> Served {
    let inputs = [self::request(900, request)];
    serve_with(
        node,
        store,
        now,
        inputs,
        Timers::Leave,
        Box::new(|_, _| None),
    )
}

/// Asks the node `request` at `now`, answering its calls from `store`: its answer.
pub(super) fn ask_at(node: &mut Node, store: &mut Store, now: Now, request: Request) -> Answered {
    let mut served = serve_request(node, store, now, request);
    let answer = served.answers.remove(&900);
    answer.expect("answered").expect("no error")
}

/// A manual run of `task` (`zkcron trigger`) requested by an operator at `requested_at`, not
/// claimed yet.
pub(super) fn pending_trigger(task: &str, requested_at: DateTime<Utc>) -> TriggerRecord {
    TriggerRecord::pending(task, "op@host", requested_at)
}

/// A manual run of `task` (defined with the task-file lines `extra`) that an operator
/// requested before node n1 started, alone: n1 lists it for the task, claims it (the trigger
/// is then running) and stores its success. Returns the store and the run's fire id.
pub(super) fn manual_run_claimed_and_ended(task: &str, extra: &str) -> (Store, String) {
    let mut store = Store::default();
    let name = format!("{task}@manual-0000000001");
    let path = format!("{BASE}/control/triggers/{name}");
    let pending = serde_json::to_vec(&pending_trigger(task, tick())).unwrap();
    store.put(path.clone(), pending);
    let (mut node, _) = started(&mut store, vec![spec(task, extra)]);
    let trigger = Trigger {
        fire_id: name.clone(),
        requested_at: tick(),
    };
    assert_eq!(
        node.leadership().triggers[task],
        std::slice::from_ref(&trigger)
    );
    let claim = Request::ClaimManual {
        task: task.into(),
        trigger,
    };
    let answer = ask_at(&mut node, &mut store, at(100), claim);
    assert_eq!(answer, Answered::Claim(ClaimOutcome::Claimed));
    let running: TriggerRecord = serde_json::from_slice(store.data(&path)).unwrap();
    assert_eq!(running.state, TriggerState::Running);
    let result = RunResult {
        tick: tick(),
        node: "n1".into(),
        exit: "exit code 0".into(),
        success: true,
        fire_id: Some(name.clone()),
        manual: true,
        ..RunResult::default()
    };
    let ended = Request::RunEnded {
        task: task.into(),
        result,
    };
    assert_eq!(
        ask_at(&mut node, &mut store, at(200), ended),
        Answered::Done
    );
    (store, name)
}

/// The fire ids of the runs in the history of `unit` (a task or a unit), oldest first.
pub(super) fn history_fire_ids(store: &Store, unit: &str) -> Vec<String> {
    let (data, _) = store.znode(format!("{BASE}/tasks/{unit}/history"));
    let history: HistoryRecord = serde_json::from_slice(data).unwrap();
    history.runs.into_iter().map(|r| r.fire_id).collect()
}

/// Feeds the requests (by request id) to the node at `ms`, firing its due timers, and answers
/// its calls from `store` until it is quiet.
pub(super) fn serve_requests(
    node: &mut Node,
    store: &mut Store,
    ms: u64,
    requests: Vec<(u64, Request)>,
) -> Served {
    let inputs = requests.into_iter().map(|(req, r)| request(req, r));
    serve_with(
        node,
        store,
        at(ms),
        inputs,
        Timers::Fire,
        Box::new(|_, _| None),
    )
}
