//! The ZooKeeper backend: a thin driver that performs the sans-IO [`Node`]'s operations with
//! zookeeper-client and feeds replies, watch events and session states back.
//!
//! # Layout
//! Everything lives under `<chroot>/zkcron/<cluster>` (created if absent, chroot included):
//!
//! | path | kind | what |
//! |---|---|---|
//! | `members/<node-id>` | ephemeral | [`MemberRecord`]: release, seed, host, pid, labels, task set digest |
//! | `tasksets/<digest>-<i>` | persistent, immutable | chunk `i` of a task set ([`TaskSetRecord`]), content-addressed; deleted once unused for an hour |
//! | `leases/<task>` | ephemeral | the task's lease: [`LeaseRecord`] (holder and session) |
//! | `tasks/<task>` | persistent | the fire record [`FireRecord`]: newest claimed tick |
//! | `tasks/<task>/epoch` | persistent, empty | its version counts lease takes (one bump per take) |
//! | `tasks/<task>/run-<unix>` | ephemeral | a live run of that tick ([`RunRecord`]) |
//! | `tasks/<task>/result` | persistent | the last [`RunResult`] |
//! | `tasks/<task>/history` | persistent | the task's last runs ([`HistoryRecord`]) |
//! | `clock` | persistent | written now and then to measure clock skew |
//! | `control/drained/<node-id>`, `control/paused/<task>` | persistent | the operator's marks ([`MarkRecord`]) |
//! | `control/triggers/<task>@manual-<n>` | persistent, sequential | a manual run ([`TriggerRecord`]) |
//! | `control/backfills/<task>@backfill-<n>` | persistent, sequential | a backfill request and its progress ([`BackfillRecord`](crate::coord::backfill::BackfillRecord)) |
//!
//! Znodes grow as O(tasks + nodes): a task has at most a record, a result, a lease and its live
//! runs; a node has its member znode. Nodes with the same `jobs.d` share one task set, so 20
//! nodes × 10,000 tasks store the task list once.
//!
//! The protocol (leases, fencing, sessions, trust, clocks) is the node's: see
//! [`crate::coord::node`]; the records, their paths and the task-set codec are
//! [`crate::coord::records`], which the node and the local backend share. Files: [`settings`]
//! (connect strings, checks, credentials), `tls` (TLS files and a handshake of its own),
//! [`call`] (one operation with a deadline), this module (the loop). The node's `Now` is
//! tokio's clock since the start and calendar time on the [`Clock`] the coordinator is started
//! with (the daemon's): neither is read anywhere else.
//!
//! [`MemberRecord`]: crate::coord::records::MemberRecord
//! [`TaskSetRecord`]: crate::coord::records::TaskSetRecord
//! [`LeaseRecord`]: crate::coord::records::LeaseRecord
//! [`FireRecord`]: crate::coord::records::FireRecord
//! [`RunRecord`]: crate::coord::records::RunRecord
//! [`HistoryRecord`]: crate::coord::records::HistoryRecord
//! [`MarkRecord`]: crate::coord::records::MarkRecord
//! [`TriggerRecord`]: crate::coord::records::TriggerRecord

pub mod call;
pub mod settings;
pub mod tls;

use std::borrow::Borrow;
use std::pin::Pin;
use std::time::Duration;

use futures::stream::{FuturesUnordered, SelectAll};
use futures::{FutureExt, Stream, StreamExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use zookeeper_client::{Client, EventType, SessionState, WatchedEvent};

pub use settings::{
    AuthSource, DEFAULT_MAX_CLOCK_SKEW, MAX_SESSION_TIMEOUT, MIN_SESSION_TIMEOUT, TlsSource,
    ZkAuth, ZkSettings, session_timeout_problem, split_connect,
};

use super::node::io::{
    Answer, Answered, Input, Level, NodeAcl, Now, OpId, Output, Request, WatchKind, ZkOp,
};
use super::node::{CALL_DEADLINE, Node};
use super::{
    ClaimIntent, ClaimOutcome, ClaimedShare, CoordError, Coordinator, Leadership, RunResult,
    Trigger,
};
use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::task::TaskSpec;

type Ask = (Request, oneshot::Sender<Answer>);
type Events = SelectAll<Pin<Box<dyn Stream<Item = WatchedEvent> + Send>>>;
type Calls = FuturesUnordered<Pin<Box<dyn Future<Output = (u64, OpId, call::Performed)> + Send>>>;
type Connecting = Pin<Box<dyn Future<Output = Result<Client, String>> + Send>>;

/// The ZooKeeper coordinator. Create it with [`ZkCoordinator::start`]; it connects and
/// reconnects in the background.
pub struct ZkCoordinator {
    requests: mpsc::UnboundedSender<Ask>,
    leadership: watch::Receiver<Leadership>,
}

impl ZkCoordinator {
    /// Validates the settings and starts the driver; connecting happens there, so an
    /// unreachable ZooKeeper delays firing (logged), not the start.
    /// The node's `now` is read on `clock`.
    pub fn start(settings: ZkSettings, clock: Clock) -> Result<ZkCoordinator, String> {
        ZkCoordinator::start_with_metrics(settings, Metrics::new(), clock)
    }

    /// [`ZkCoordinator::start`], counting the session's state, reconnects, operation latency
    /// and clock skew in `metrics`.
    pub fn start_with_metrics(
        settings: ZkSettings,
        metrics: Metrics,
        clock: Clock,
    ) -> Result<ZkCoordinator, String> {
        let (hosts, chroot) = settings.check()?;
        let auth = settings.auth.resolve()?;
        let tls = settings.tls.as_ref().map(|tls| tls.resolve()).transpose()?;
        let acl = match &auth {
            Some(auth) => {
                tracing::info!(user = %auth.user, "ZooKeeper digest authentication: znodes zkcron creates are readable and writable only by this user");
                NodeAcl::CreatorAll
            }
            None => {
                tracing::warn!(
                    "ZooKeeper without authentication: every znode zkcron creates is world-readable and world-writable (any client reaching ZooKeeper can read results and stop or re-run tasks); set [coordination.zookeeper] auth = \"user:password\" or auth_file = PATH"
                );
                NodeAcl::Open
            }
        };
        let base = format!("{chroot}/zkcron/{}", settings.cluster);
        let config = settings.node_config(base.clone(), acl, clock.now());
        let epoch = Instant::now();
        let node = Node::new(config, now(epoch, clock));
        let (leadership_tx, leadership) = watch::channel(node.leadership().clone());
        let (requests, receiver) = mpsc::unbounded_channel();
        let driver = Driver {
            node,
            epoch,
            clock,
            hosts,
            timeout: settings.session_timeout,
            auth,
            tls,
            open_root_checked: false,
            base,
            leadership: leadership_tx,
            client: None,
            generation: 0,
            events: SelectAll::new(),
            watched: Vec::new(),
            calls: FuturesUnordered::new(),
            connecting: None,
            delay: Duration::from_millis(200),
            next_req: 1,
            waiting: Default::default(),
            metrics,
            connections: 0,
            session_losses: 0,
        };
        tokio::spawn(driver.run(receiver));
        Ok(ZkCoordinator {
            requests,
            leadership,
        })
    }

    async fn ask(&self, request: Request, context: &'static str) -> Answer {
        let (tx, rx) = oneshot::channel();
        if self.requests.send((request, tx)).is_err() {
            return Err(CoordError::NotConnected { context });
        }
        rx.await
            .unwrap_or(Err(CoordError::SessionEnded { context }))
    }
}

/// The node's `now`: tokio's clock since `epoch`, and calendar time on `clock`.
fn now(epoch: Instant, clock: Clock) -> Now {
    Now {
        mono: Instant::now() - epoch,
        wall: clock.now(),
    }
}

fn unexpected(context: &'static str) -> CoordError {
    CoordError::ZooKeeper {
        context: context.into(),
        message: "unexpected answer".into(),
    }
}

impl Coordinator for ZkCoordinator {
    async fn publish<T: Borrow<TaskSpec> + Sync>(&self, tasks: &[T]) -> Result<(), CoordError> {
        // The node writes it when connected; publishing never blocks the daemon on ZooKeeper.
        let tasks = tasks.iter().map(|task| task.borrow().clone()).collect();
        self.ask(Request::Publish(tasks), "publishing the task set")
            .await
            .map(|_| ())
    }

    fn leadership(&self) -> watch::Receiver<Leadership> {
        self.leadership.clone()
    }

    async fn last_claimed(
        &self,
        task: &str,
    ) -> Result<Option<chrono::DateTime<chrono::Utc>>, CoordError> {
        let request = Request::LastClaimed { task: task.into() };
        match self.ask(request, "reading the fire record").await? {
            Answered::Tick(tick) => Ok(tick),
            _ => Err(unexpected("reading the fire record")),
        }
    }

    async fn claim_noting(
        &self,
        task: &str,
        tick: chrono::DateTime<chrono::Utc>,
        intent: ClaimIntent,
        ticks: Vec<crate::plan::ledger::TickEntry>,
    ) -> Result<ClaimedShare, CoordError> {
        let request = Request::Claim {
            task: task.into(),
            tick,
            intent,
            ticks,
        };
        match self.ask(request, "claiming").await? {
            Answered::Claim(outcome) => Ok((outcome, None)),
            Answered::ClaimedItems(items) => Ok((ClaimOutcome::Claimed, Some(items.into()))),
            _ => Err(unexpected("claiming")),
        }
    }

    async fn orphaned_tick(
        &self,
        task: &str,
    ) -> Result<Option<chrono::DateTime<chrono::Utc>>, CoordError> {
        let request = Request::OrphanedTick { task: task.into() };
        match self.ask(request, "checking for a lost run").await? {
            Answered::Tick(tick) => Ok(tick),
            _ => Err(unexpected("checking for a lost run")),
        }
    }

    async fn reclaim(
        &self,
        task: &str,
        tick: chrono::DateTime<chrono::Utc>,
    ) -> Result<ClaimOutcome, CoordError> {
        Ok(self.reclaim_share(task, tick).await?.0)
    }

    async fn reclaim_share(
        &self,
        task: &str,
        tick: chrono::DateTime<chrono::Utc>,
    ) -> Result<ClaimedShare, CoordError> {
        let request = Request::Reclaim {
            task: task.into(),
            tick,
        };
        match self.ask(request, "claiming").await? {
            Answered::Claim(outcome) => Ok((outcome, None)),
            Answered::ClaimedItems(items) => Ok((ClaimOutcome::Claimed, Some(items.into()))),
            _ => Err(unexpected("claiming")),
        }
    }

    async fn runs_elsewhere(&self, task: &str) -> Result<usize, CoordError> {
        let request = Request::RunsElsewhere { task: task.into() };
        match self.ask(request, "listing live runs").await? {
            Answered::Count(count) => Ok(count),
            _ => Err(unexpected("listing live runs")),
        }
    }

    async fn queued_tick(
        &self,
        task: &str,
    ) -> Result<Option<chrono::DateTime<chrono::Utc>>, CoordError> {
        let request = Request::QueuedTick { task: task.into() };
        match self.ask(request, "reading the queued tick").await? {
            Answered::Tick(tick) => Ok(tick),
            _ => Err(unexpected("reading the queued tick")),
        }
    }

    async fn runs_ended_elsewhere(&self, task: &str) -> Result<(), CoordError> {
        let request = Request::RunsEndedElsewhere { task: task.into() };
        self.ask(request, "waiting for live runs to end")
            .await
            .map(|_| ())
    }

    async fn run_ended(&self, task: &str, result: &RunResult) -> Result<(), CoordError> {
        let request = Request::RunEnded {
            task: task.into(),
            result: result.clone(),
        };
        self.ask(request, "recording the run result")
            .await
            .map(|_| ())
    }

    async fn last_result(&self, task: &str) -> Result<Option<RunResult>, CoordError> {
        let request = Request::LastResult { task: task.into() };
        match self.ask(request, "reading the last result").await? {
            Answered::Result(result) => Ok(result.map(|r| *r)),
            _ => Err(unexpected("reading the last result")),
        }
    }

    async fn claim_manual(
        &self,
        task: &str,
        trigger: &Trigger,
    ) -> Result<ClaimOutcome, CoordError> {
        let request = Request::ClaimManual {
            task: task.into(),
            trigger: trigger.clone(),
        };
        match self.ask(request, "claiming a manual run").await? {
            Answered::Claim(outcome) => Ok(outcome),
            _ => Err(unexpected("claiming a manual run")),
        }
    }

    async fn release_all(&self) {
        let _ = self.ask(Request::ReleaseAll, "releasing leases").await;
    }

    async fn close(&self) {
        let _ = self.ask(Request::Close, "closing the session").await;
    }
}

/// The driver's state: one loop owns the node, the client and everything in flight.
struct Driver {
    node: Node,
    epoch: Instant,
    /// Where the node's wall-clock `now` is read: the daemon's clock.
    clock: Clock,
    hosts: String,
    timeout: Duration,
    /// Sent with every new session before any call.
    auth: Option<ZkAuth>,
    /// `tls = true`: the CA and client certificate, read at start-up.
    tls: Option<settings::ZkTls>,
    /// Whether the root's ACL was checked (once, on the first session with credentials).
    open_root_checked: bool,
    /// The cluster root, `<chroot>/zkcron/<cluster>`.
    base: String,
    leadership: watch::Sender<Leadership>,
    client: Option<Client>,
    /// Bumped with every new client: replies of an older client's calls are dropped.
    generation: u64,
    metrics: Metrics,
    /// Connections established so far (the second and later count as reconnects).
    connections: u64,
    /// `Leadership::session_losses` as last counted in `metrics`.
    session_losses: u64,
    events: Events,
    /// The paths of this client's persistent recursive watches, in the order the node added
    /// them: added again on a reconnect within the session (see [`Driver::rewatch`]).
    watched: Vec<String>,
    calls: Calls,
    connecting: Option<Connecting>,
    delay: Duration,
    next_req: u64,
    waiting: std::collections::HashMap<u64, oneshot::Sender<Answer>>,
}

/// What woke the loop.
enum Wake {
    Request(Option<Ask>),
    State(SessionState),
    Event(WatchedEvent),
    Reply(u64, OpId, call::Performed),
    Connected(Result<Client, String>),
    Timeout,
}

impl Driver {
    async fn run(mut self, mut requests: mpsc::UnboundedReceiver<Ask>) {
        self.connect(Duration::ZERO);
        let mut state = None::<zookeeper_client::StateWatcher>;
        loop {
            let wake = self.next_wake(&mut requests, &mut state).await;
            let at = now(self.epoch, self.clock);
            match wake {
                Wake::Request(None) => return,
                Wake::Request(Some((request, reply))) => {
                    let req = self.next_req;
                    self.next_req += 1;
                    self.waiting.insert(req, reply);
                    self.node.handle(Input::Request { req, request }, at);
                }
                Wake::State(new_state) => self.on_session_state(new_state, &mut state, at).await,
                Wake::Event(event) => self.on_watch_event(event, at),
                Wake::Reply(generation, op, performed) => {
                    self.on_reply(generation, op, performed, at)
                }
                Wake::Connected(Ok(client)) => self.on_connected(client, &mut state, at),
                Wake::Connected(Err(error)) => {
                    self.connecting = None;
                    self.node.handle(Input::ConnectFailed { error }, at);
                    let delay = self.delay;
                    self.delay = (self.delay * 2).min(Duration::from_secs(10));
                    self.connect(delay);
                }
                Wake::Timeout => self.node.handle_timeout(at),
            }
            if self.drain(&mut state).await {
                return;
            }
            self.metrics.set_clock_skew_ms(self.node.clock_offset_ms());
        }
    }

    /// Waits for the next input: a request, a session state, a reply, a watch event, a
    /// connection made or failed, or the node's timer.
    async fn next_wake(
        &mut self,
        requests: &mut mpsc::UnboundedReceiver<Ask>,
        state: &mut Option<zookeeper_client::StateWatcher>,
    ) -> Wake {
        let deadline = self.node.poll_timeout().map(|at| self.epoch + at);
        // Biased, the timer last: every input ready now is handled before the node's
        // timer (which also runs the lease decision asked for by those inputs, once).
        tokio::select! {
            biased;
            ask = requests.recv() => Wake::Request(ask),
            new_state = async { state.as_mut().expect("guarded").changed().await }, if state.is_some() => Wake::State(new_state),
            Some((generation, op, performed)) = self.calls.next(), if !self.calls.is_empty() => Wake::Reply(generation, op, performed),
            Some(event) = self.events.next(), if !self.events.is_empty() => Wake::Event(event),
            connected = async { self.connecting.as_mut().expect("guarded").await }, if self.connecting.is_some() => Wake::Connected(connected),
            _ = sleep_until(deadline) => Wake::Timeout,
        }
    }

    /// The session's state changed to `new_state`; a terminal state ends the watch of it
    /// (`state`).
    async fn on_session_state(
        &mut self,
        new_state: SessionState,
        state: &mut Option<zookeeper_client::StateWatcher>,
        at: Now,
    ) {
        match new_state {
            SessionState::Disconnected => {
                self.metrics.set_zk_connected(false);
                self.node.handle(Input::Disconnected, at)
            }
            SessionState::SyncConnected | SessionState::ConnectedReadOnly => {
                self.rewatch().await;
                if let Some(client) = &self.client {
                    self.metrics.set_zk_connected(true);
                    self.metrics.zk_reconnected();
                    let input = Input::Connected {
                        session_id: client.session_id().0,
                        negotiated_timeout: client.session_timeout(),
                    };
                    self.node.handle(input, at);
                }
            }
            SessionState::Expired | SessionState::AuthFailed | SessionState::Closed => {
                // A terminal state: the watcher must not be polled again.
                *state = None;
                self.metrics.set_zk_connected(false);
                self.node.handle(Input::Expired, at);
            }
        }
    }

    /// Adds this client's persistent watches again, before the node hears of the reconnect
    /// (its re-listing then sees every change the watches miss). ZooKeeper drops a
    /// connection's watches with it, and zookeeper-client 0.11.2 leaves persistent watches out
    /// of the `SetWatches` it sends on reconnecting (`resend_watches` never raises the index
    /// that selects `SetWatches2`): without this, a node that reconnected within its session
    /// never heard of a member joining again, and a newer node's leases and items stayed with
    /// the old nodes. The watcher each call returns is dropped: the first one of its path
    /// stays and gets the events, and the client keeps the server's watch while it does.
    async fn rewatch(&mut self) {
        let Some(client) = self.client.clone() else {
            return;
        };
        for path in &self.watched {
            let add = client.watch(path, zookeeper_client::AddWatchMode::PersistentRecursive);
            if let Ok(Err(error)) = tokio::time::timeout(CALL_DEADLINE, add).await {
                tracing::warn!(path = %path, %error, "cannot watch again after reconnecting");
            }
        }
    }

    /// A watch fired: the node hears of creations, deletions and data changes.
    fn on_watch_event(&mut self, event: WatchedEvent, at: Now) {
        let kind = match event.event_type {
            EventType::NodeCreated => Some(WatchKind::Created),
            EventType::NodeDeleted => Some(WatchKind::Deleted),
            EventType::NodeDataChanged => Some(WatchKind::DataChanged),
            _ => None,
        };
        if let Some(kind) = kind {
            let input = Input::Watch {
                path: event.path,
                kind,
            };
            self.node.handle(input, at);
        }
    }

    /// A call of connection `generation` was answered; a reply from an earlier connection is
    /// dropped.
    fn on_reply(&mut self, generation: u64, op: OpId, performed: call::Performed, at: Now) {
        if generation != self.generation {
            return;
        }
        let result = match performed {
            Ok((ok, watcher)) => {
                if let Some(watcher) = watcher {
                    self.events.push(watch_stream(watcher));
                }
                Ok(ok)
            }
            Err(fail) => Err(fail),
        };
        self.node.handle(Input::Reply { op, result }, at);
    }

    /// A connection was made: a new generation of calls and watches, with its session's state
    /// watched (`state`).
    fn on_connected(
        &mut self,
        client: Client,
        state: &mut Option<zookeeper_client::StateWatcher>,
        at: Now,
    ) {
        self.connecting = None;
        self.delay = Duration::from_millis(200);
        self.generation += 1;
        self.events = SelectAll::new();
        self.watched.clear();
        *state = Some(client.state_watcher());
        self.connections += 1;
        if self.connections > 1 {
            self.metrics.zk_reconnected();
        }
        self.metrics.set_zk_connected(true);
        let input = Input::Connected {
            session_id: client.session_id().0,
            negotiated_timeout: client.session_timeout(),
        };
        if self.auth.is_some() && !self.open_root_checked {
            self.open_root_checked = true;
            tokio::spawn(report_open_root(client.clone(), self.base.clone()));
        }
        self.client = Some(client);
        self.node.handle(input, at);
    }

    /// Performs the node's outputs; true when the driver is done (closed).
    async fn drain(&mut self, state: &mut Option<zookeeper_client::StateWatcher>) -> bool {
        while let Some(output) = self.node.poll() {
            match output {
                Output::Call { op, zk } => self.perform(op, zk),
                Output::NewSession => {
                    self.metrics.set_zk_connected(false);
                    self.client = None;
                    *state = None;
                    self.generation += 1;
                    self.events = SelectAll::new();
                    self.watched.clear();
                    self.connect(Duration::ZERO);
                }
                Output::CloseSession => {
                    *state = None;
                    self.events = SelectAll::new();
                    self.watched.clear();
                    self.connecting = None;
                    if let Some(client) = self.client.take() {
                        let mut closing = client.state_watcher();
                        drop(client);
                        // The last client dropped sends CloseSession; wait briefly so it
                        // leaves the process.
                        let _ = tokio::time::timeout(Duration::from_millis(300), async {
                            while !matches!(closing.changed().await, SessionState::Closed) {}
                        })
                        .await;
                    }
                }
                Output::Leadership(leadership) => {
                    for _ in self.session_losses..leadership.session_losses {
                        self.metrics.zk_session_lost();
                    }
                    self.session_losses = self.session_losses.max(leadership.session_losses);
                    self.leadership.send_replace(leadership);
                }
                Output::Answer { req, answer } => {
                    if let Some(reply) = self.waiting.remove(&req) {
                        let _ = reply.send(answer);
                    }
                }
                Output::Report(report) => log(&report),
            }
        }
        false
    }

    fn perform(&mut self, op: OpId, zk: ZkOp) {
        let generation = self.generation;
        let Some(client) = self.client.clone() else {
            // No session: the node resends what it still needs after the next one.
            let result = Err(super::node::io::ZkFail::ConnectionLoss);
            self.calls
                .push(Box::pin(async move { (generation, op, result) }));
            return;
        };
        if let ZkOp::AddPersistentRecursiveWatch { path } = &zk
            && !self.watched.contains(path)
        {
            self.watched.push(path.clone());
        }
        let metrics = self.metrics.clone();
        let sent = Instant::now();
        self.calls
            .push(Box::pin(call::perform(client, zk).map(move |performed| {
                metrics.zk_operation(sent.elapsed().as_secs_f64());
                (generation, op, performed)
            })));
    }

    fn connect(&mut self, after: Duration) {
        let hosts = self.hosts.clone();
        let timeout = self.timeout;
        let connector = settings::connector(timeout, self.auth.as_ref(), self.tls.as_ref());
        self.connecting = Some(Box::pin(async move {
            tokio::time::sleep(after).await;
            let connector = connector?;
            match tokio::time::timeout(timeout + CALL_DEADLINE, connector.connect(&hosts)).await {
                Err(_) => Err("connecting: no session established in time".to_string()),
                Ok(Err(error)) => Err(format!("connecting to {hosts}: {error}")),
                Ok(Ok(client)) => Ok(client),
            }
        }));
    }
}

/// Warns when a cluster root created before authentication was configured is still open:
/// its znodes keep the ACL they were created with (world:anyone), and zkcron does not rewrite
/// the ACLs of a tree other nodes may be using.
async fn report_open_root(client: Client, base: String) {
    if let Ok(Ok((acls, _))) = tokio::time::timeout(CALL_DEADLINE, client.get_acl(&base)).await
        && acls.iter().any(|acl| acl.scheme() == "world")
    {
        tracing::warn!(
            root = %base,
            "the cluster root was created without authentication: its znodes stay world-readable and world-writable although this node authenticates; stop the nodes, delete the root (zkCli.sh deleteall) and start them again with the credentials, so that it is re-created creator-only"
        );
    }
}

/// The events of `watcher`, ending after a terminal session state (the watcher must not be
/// polled again then); the dashboard's reader follows its watches the same way.
pub(crate) fn watch_stream(
    watcher: zookeeper_client::PersistentWatcher,
) -> Pin<Box<dyn Stream<Item = WatchedEvent> + Send>> {
    Box::pin(futures::stream::unfold(
        Some(watcher),
        |watcher| async move {
            let mut watcher = watcher?;
            let event = watcher.changed().await;
            // After a terminal session event the watcher must not be polled again.
            let terminal = event.event_type == EventType::Session
                && matches!(
                    event.session_state,
                    SessionState::Expired | SessionState::Closed | SessionState::AuthFailed
                );
            Some((event, (!terminal).then_some(watcher)))
        },
    ))
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Logs a node's report as a tracing event with structured fields (JSON logs keep numbers as
/// numbers: `leading`, `took_ms`, ...), as the backend logged before the node existed.
fn log(report: &super::node::io::Report) {
    let text = |key: &str| {
        report
            .fields
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| tracing::field::display(v.clone()))
    };
    let number = |key: &str| {
        report
            .fields
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.parse::<i64>().ok())
    };
    let flag = |key: &str| {
        report
            .fields
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.parse::<bool>().ok())
    };
    macro_rules! emit {
        ($level:ident) => {
            tracing::$level!(
                leading = number("leading"),
                paused = flag("paused"),
                task = text("task"),
                tick = text("tick"),
                node = text("node"),
                member = text("member"),
                release = text("release"),
                session = text("session"),
                tasks = number("tasks"),
                offset_ms = number("offset_ms"),
                max_clock_skew = text("max_clock_skew"),
                timeout = text("timeout"),
                zookeeper = text("zookeeper"),
                why = text("why"),
                index = number("index"),
                source = text("source"),
                attempt = number("attempt"),
                released = number("released"),
                took_ms = number("took_ms"),
                chunks = number("chunks"),
                "{}",
                report.message
            )
        };
    }
    match report.level {
        Level::Debug => emit!(debug),
        Level::Info => emit!(info),
        Level::Warn => emit!(warn),
        Level::Error => emit!(error),
    }
}
