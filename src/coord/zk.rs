//! The ZooKeeper backend: membership, per-task leases and fenced tick claims.
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
//! | `clock` | persistent | written now and then to measure clock skew |
//!
//! Znodes grow as O(tasks + nodes): a task has at most a record, a result, a lease and its live
//! runs; a node has its member znode. Nodes with the same `jobs.d` share one task set, so 20
//! nodes × 10,000 tasks store the task list once, and a member change costs one small read (the
//! set is read only when its digest is new).
//!
//! # Leases
//! A background manager keeps a view of members and leases (persistent recursive watches,
//! re-listed after every reconnect because watches can miss events across one) and applies
//! [`super::lease::decide`]: take vacant leases it is designated for (or that stayed vacant too
//! long), release leases it should not hold. It publishes the held set as [`Leadership`].
//!
//! # Fencing
//! Taking a lease is one multi-op: `create(leases/<task>, ephemeral)` + `set_data(tasks/<task>/epoch)`,
//! so every lease incarnation owns a distinct epoch version. A claim is one multi-op:
//! `check(leases/<task>, 0)` + `check(tasks/<task>/epoch, the version this node's take set)` +
//! `set_data(tasks/<task>, tick, the record version read)` (+ `create(run-<unix>)` when the tick
//! will run). It succeeds only while the lease this node took still exists (a lease released
//! and taken by another node bumped the epoch; an expired session's requests are refused by
//! the server) and nobody moved the record since it was read: no tick is claimed twice,
//! whatever the clocks, pauses or partitions. A claim whose reply is lost is
//! resolved by `sync` and re-reading the record, never by assuming success.
//!
//! # Sessions
//! Disconnected: leadership is paused (nothing fires), leases stay with the session.
//! Reconnected: members and leases are re-listed, firing resumes. Disconnected for longer than
//! the session timeout, or expired: counted as a session loss (tasks with
//! `kill_on_session_loss` stop their runs). Expired: all leases and run records are forgotten, a
//! new client is built, the node registers again and rejoins.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::{FutureExt, StreamExt};
use semver::Version;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use zookeeper_client::{
    Acls, AddWatchMode, Client, CreateMode, CreateOptions, EventType, MultiWriteError,
    MultiWriteResult, SessionState, Stat, WatchedEvent,
};

use super::lease::{self, LeaseAction, LeaseView, Member, TaskEntry, TaskSet};
use super::{ClaimIntent, ClaimOutcome, CoordError, Coordinator, Leadership, RunResult};
use crate::clock::wall_clock;
use crate::task::TaskSpec;

/// The version of every JSON record this backend writes; readers ignore unknown fields.
pub const FORMAT_VERSION: u32 = 1;

/// A task set is split into znodes of at most this many bytes (ZooKeeper's limit is 1 MiB).
const CHUNK_BYTES: usize = 512 * 1024;

/// The longest any single ZooKeeper call may take before it counts as failed.
const CALL_DEADLINE: Duration = Duration::from_secs(5);

/// Clock skew above this is logged as a warning.
const SKEW_WARNING: Duration = Duration::from_secs(1);

/// How often the clock offset is measured when no claim measured it.
const CLOCK_PROBE: Duration = Duration::from_secs(30);

/// How many operations go into one multi when releasing everything.
const RELEASE_BATCH: usize = 500;

/// Task sets that no member references are deleted once this old (a node publishes its set
/// just before it registers; an hour leaves room for any registration in flight).
const TASKSET_GC_AGE: Duration = Duration::from_secs(3600);

/// How often each node looks for task sets to delete (first at a random point of the period).
const TASKSET_GC_EVERY: Duration = Duration::from_secs(3600);

/// Lease takes one node keeps in flight at once.
const TAKES_IN_FLIGHT: usize = 64;

/// How to reach the cluster, and who this node is.
#[derive(Debug, Clone)]
pub struct ZkSettings {
    /// `host:port[,host:port...][/chroot]`.
    pub connect: String,
    pub cluster: String,
    pub session_timeout: Duration,
    /// A node whose clock is further off ZooKeeper's than this leads nothing.
    pub max_clock_skew: Option<Duration>,
    pub node_id: String,
    pub release: Version,
    pub labels: BTreeMap<String, String>,
}

/// `members/<node-id>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberRecord {
    pub format: u32,
    pub id: String,
    pub release: String,
    /// The random 64-bit rendezvous seed, in hex (JSON numbers lose precision past 2^53).
    pub seed: String,
    pub host: String,
    pub pid: u32,
    pub started_at: DateTime<Utc>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    pub taskset: TaskSetRef,
    /// False while the node refuses leadership (clock skew beyond `max_clock_skew`): others
    /// then rank without it. Missing (older writers) means true.
    #[serde(default = "yes")]
    pub leads: bool,
}

fn yes() -> bool {
    true
}

/// Where a member's task set is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSetRef {
    pub digest: String,
    pub chunks: usize,
    pub count: usize,
}

/// The tasks a node defines: the concatenated chunks `tasksets/<digest>-<i>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSetRecord {
    pub format: u32,
    pub tasks: BTreeMap<String, TaskSetEntry>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSetEntry {
    pub digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_req: Option<String>,
}

/// `leases/<task>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseRecord {
    pub format: u32,
    pub node: String,
    pub session: String,
    pub since: DateTime<Utc>,
}

/// `tasks/<task>`: the newest claimed tick.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FireRecord {
    pub format: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tick: Option<DateTime<Utc>>,
    #[serde(default)]
    pub node: String,
    #[serde(default)]
    pub session: String,
    /// The claim was made to run the tick (not to skip it for overlap).
    #[serde(default)]
    pub run: bool,
    /// How often the tick was claimed again after its node was lost (`on_node_loss = "rerun"`).
    #[serde(default)]
    pub reruns: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_at: Option<DateTime<Utc>>,
}

impl FireRecord {
    fn empty() -> FireRecord {
        FireRecord {
            format: FORMAT_VERSION,
            tick: None,
            node: String::new(),
            session: String::new(),
            run: false,
            reruns: 0,
            claimed_at: None,
        }
    }
}

/// `tasks/<task>/run-<unix>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub format: u32,
    pub node: String,
    pub session: String,
    pub tick: DateTime<Utc>,
    pub started_at: DateTime<Utc>,
}

/// `tasks/<task>/result`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ResultRecord {
    format: u32,
    #[serde(flatten)]
    result: RunResult,
}

/// The paths of one cluster.
#[derive(Debug, Clone)]
struct Paths {
    base: String,
}

impl Paths {
    fn members(&self) -> String {
        format!("{}/members", self.base)
    }
    fn member(&self, id: &str) -> String {
        format!("{}/members/{id}", self.base)
    }
    fn leases(&self) -> String {
        format!("{}/leases", self.base)
    }
    fn lease(&self, task: &str) -> String {
        format!("{}/leases/{task}", self.base)
    }
    fn tasks(&self) -> String {
        format!("{}/tasks", self.base)
    }
    fn record(&self, task: &str) -> String {
        format!("{}/tasks/{task}", self.base)
    }
    fn epoch(&self, task: &str) -> String {
        format!("{}/tasks/{task}/epoch", self.base)
    }
    fn result(&self, task: &str) -> String {
        format!("{}/tasks/{task}/result", self.base)
    }
    fn run(&self, task: &str, tick: DateTime<Utc>) -> String {
        format!("{}/tasks/{task}/run-{}", self.base, tick.timestamp())
    }
    fn tasksets(&self) -> String {
        format!("{}/tasksets", self.base)
    }
    fn chunk(&self, digest: &str, index: usize) -> String {
        format!("{}/tasksets/{digest}-{index}", self.base)
    }
    fn clock(&self) -> String {
        format!("{}/clock", self.base)
    }
}

/// Splits `hosts[/chroot]` into the hosts and the chroot ("" for none).
pub fn split_connect(connect: &str) -> Result<(String, String), String> {
    let (hosts, chroot) = match connect.find('/') {
        Some(at) => (&connect[..at], connect[at..].trim_end_matches('/')),
        None => (connect, ""),
    };
    if hosts.is_empty() {
        return Err(format!(
            "`{connect}` names no ZooKeeper server; expected HOST:PORT[,HOST:PORT...][/chroot]"
        ));
    }
    for host in hosts.split(',') {
        let Some((name, port)) = host.rsplit_once(':') else {
            return Err(format!(
                "`{host}` in `{connect}` has no port; expected HOST:PORT, e.g. `127.0.0.1:2181`"
            ));
        };
        if name.is_empty() || !matches!(port.parse::<u16>(), Ok(1..)) {
            return Err(format!(
                "`{host}` in `{connect}` is not HOST:PORT with a port from 1 to 65535"
            ));
        }
    }
    if let Some(problem) = chroot_problem(chroot) {
        return Err(format!("the chroot `{chroot}` in `{connect}` {problem}"));
    }
    Ok((hosts.to_string(), chroot.to_string()))
}

/// What ZooKeeper would refuse in a chroot (`/a/b`, trailing `/` already removed), as the end
/// of a sentence; `None` when it is a valid path (PathUtils.validatePath in ZooKeeper).
fn chroot_problem(chroot: &str) -> Option<String> {
    if chroot.is_empty() {
        return None;
    }
    let elements = chroot[1..].split('/');
    for element in elements.clone() {
        match element {
            "" => return Some("has an empty path element".into()),
            "." | ".." => {
                return Some(format!(
                    "has a `{element}` element; ZooKeeper paths are absolute, without `.` or \
                     `..`: write the path itself, like `/apps/cron`"
                ));
            }
            _ => {}
        }
    }
    if let Some(bad) = chroot.chars().find(|&c| {
        matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..='\u{ffff}')
    }) {
        return Some(format!(
            "contains the character {bad:?}, which ZooKeeper does not allow in paths (control \
             characters, U+E000 to U+F8FF, U+FFF0 to U+FFFF)"
        ));
    }
    if elements.clone().next() == Some("zookeeper") {
        return Some(
            "is under /zookeeper, which ZooKeeper reserves for itself; choose another path, \
             like `/apps`"
                .into(),
        );
    }
    None
}

/// ZooKeeper sends the session timeout as a 32-bit count of milliseconds.
pub const MAX_SESSION_TIMEOUT: Duration = Duration::from_millis(i32::MAX as u64);

/// The shortest session timeout zkcron accepts.
pub const MIN_SESSION_TIMEOUT: Duration = Duration::from_secs(1);

/// What is wrong with a session timeout, and the help; `None` when it is in range.
pub fn session_timeout_problem(timeout: Duration) -> Option<(String, String)> {
    if (MIN_SESSION_TIMEOUT..=MAX_SESSION_TIMEOUT).contains(&timeout) {
        return None;
    }
    Some((
        format!(
            "the session timeout {} is out of range: it must be from {} to {} (ZooKeeper sends \
             it as a 32-bit count of milliseconds)",
            humantime::format_duration(timeout),
            humantime::format_duration(MIN_SESSION_TIMEOUT),
            humantime::format_duration(MAX_SESSION_TIMEOUT)
        ),
        "the server then keeps it within its own minSessionTimeout..maxSessionTimeout (by \
         default 2 to 20 of its ticks: 4s to 40s); 10s is a good start"
            .into(),
    ))
}

impl ZkSettings {
    /// Checks what ZooKeeper would refuse, or silently change, in these settings; returns the
    /// hosts and the chroot. `run` starts the coordinator only with settings that pass, and
    /// `validate` calls it too.
    pub fn check(&self) -> Result<(String, String), String> {
        let (hosts, chroot) = split_connect(&self.connect)?;
        validate_name("cluster", &self.cluster)?;
        validate_name("node id", &self.node_id)?;
        if let Some((message, help)) = session_timeout_problem(self.session_timeout) {
            return Err(format!("{message}; {help}"));
        }
        Ok((hosts, chroot))
    }
}

/// The digest of one task's definition (its parsed form, file path excluded), for telling
/// nodes that load different definitions of one task apart.
fn task_digest(spec: &TaskSpec) -> String {
    let mut spec = spec.clone();
    spec.path = Default::default();
    format!(
        "{:016x}",
        xxhash_rust::xxh3::xxh3_64(format!("{spec:?}").as_bytes())
    )
}

/// Encodes this node's task set: its digest and chunks.
fn encode_taskset(tasks: &[TaskSpec]) -> (TaskSetRef, Vec<Vec<u8>>, Arc<TaskSet>) {
    let record = TaskSetRecord {
        format: FORMAT_VERSION,
        tasks: tasks
            .iter()
            .map(|t| {
                (
                    t.name.clone(),
                    TaskSetEntry {
                        digest: task_digest(t),
                        version_req: t.version_req.as_ref().map(|r| r.to_string()),
                    },
                )
            })
            .collect(),
    };
    let bytes = serde_json::to_vec(&record).expect("task sets serialize");
    let digest = format!("{:032x}", xxhash_rust::xxh3::xxh3_128(&bytes));
    let chunks: Vec<Vec<u8>> = bytes.chunks(CHUNK_BYTES).map(<[u8]>::to_vec).collect();
    let set = decode_taskset(&record);
    (
        TaskSetRef {
            digest,
            chunks: chunks.len().max(1),
            count: record.tasks.len(),
        },
        chunks,
        set,
    )
}

fn decode_taskset(record: &TaskSetRecord) -> Arc<TaskSet> {
    Arc::new(
        record
            .tasks
            .iter()
            .map(|(name, entry)| {
                (
                    name.clone(),
                    TaskEntry {
                        digest: entry.digest.clone(),
                        // A requirement this release cannot parse matches nothing, so an old
                        // node never leads a task written for a newer one.
                        version_req: entry.version_req.as_ref().map(|r| {
                            semver::VersionReq::parse(r).unwrap_or_else(|_| {
                                semver::VersionReq::parse("<0.0.0-0").expect("valid")
                            })
                        }),
                    },
                )
            })
            .collect(),
    )
}

/// A ZooKeeper failure, with what was being done.
fn zk_error(context: impl Into<String>, error: impl std::fmt::Display) -> CoordError {
    CoordError::ZooKeeper {
        context: context.into(),
        message: error.to_string(),
    }
}

/// Runs one ZooKeeper call with [`CALL_DEADLINE`].
async fn deadline<T, E: std::fmt::Display>(
    what: &str,
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, CoordError> {
    match tokio::time::timeout(CALL_DEADLINE, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(zk_error(what, error)),
        Err(_) => Err(zk_error(
            what,
            format!(
                "no answer within {}",
                humantime::format_duration(CALL_DEADLINE)
            ),
        )),
    }
}

/// Like [`deadline`], but keeps ZooKeeper's own error for the caller to match on.
async fn timed<T>(
    what: &str,
    call: impl Future<Output = Result<T, zookeeper_client::Error>>,
) -> Result<Result<T, zookeeper_client::Error>, CoordError> {
    tokio::time::timeout(CALL_DEADLINE, call)
        .await
        .map_err(|_| {
            zk_error(
                what,
                format!(
                    "no answer within {}",
                    humantime::format_duration(CALL_DEADLINE)
                ),
            )
        })
}

fn persistent() -> CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

fn ephemeral() -> CreateOptions<'static> {
    CreateMode::Ephemeral.with_acls(Acls::anyone_all())
}

fn session_hex(client: &Client) -> String {
    format!("{:x}", client.session_id().0)
}

/// One live session: the client and its identity.
struct Session {
    client: Client,
    id: String,
}

/// What the lease manager knows; guarded by one mutex, held briefly.
#[derive(Default)]
struct View {
    /// This node's task set, as published.
    my_set: Option<(TaskSetRef, Vec<Vec<u8>>, Arc<TaskSet>)>,
    /// Registered members by id (this node included once registered).
    members: HashMap<String, Member>,
    /// Task sets read so far, by digest.
    tasksets: HashMap<String, Arc<TaskSet>>,
    /// Leases that exist (held by anyone).
    present: HashSet<String>,
    /// Leases this node holds in the current session, with the version of the task's epoch
    /// znode that this lease incarnation set (claims check it).
    held: HashMap<String, i32>,
    /// When each vacant lease was first seen vacant (offset from `epoch`).
    vacant_since: HashMap<String, Duration>,
    /// Held leases taken as cover for a designated node that did not act, and when.
    covering: HashMap<String, Duration>,
    /// When another member last joined or changed (offset from `epoch`).
    members_changed: Duration,
}

/// What a clock offset means for the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SkewVerdict {
    Fine,
    /// Above [`SKEW_WARNING`]: logged.
    Warn,
    /// Above `max_clock_skew`: the node leads nothing.
    Refuse,
}

/// The offset of the local clock from ZooKeeper's (ms, positive = local ahead), from a write
/// sent and answered at local times `sent` and `answered` that the server stamped `mtime_ms`.
/// The server's stamp falls somewhere between the two, so the offset lies between
/// `sent - mtime` and `answered - mtime`; this returns the value of that range nearest zero. A
/// slow round trip therefore widens the range instead of raising the estimate: a probe answered
/// 3 s late by a busy server is not taken for a clock 1.5 s off.
fn clock_offset_ms(sent: DateTime<Utc>, answered: DateTime<Utc>, mtime_ms: i64) -> Option<i64> {
    if mtime_ms <= 0 || answered < sent {
        return None;
    }
    let low = sent.timestamp_millis() - mtime_ms;
    let high = answered.timestamp_millis() - mtime_ms;
    Some(if low > 0 {
        low
    } else if high < 0 {
        high
    } else {
        0
    })
}

fn skew_verdict(offset_ms: i64, max: Option<Duration>) -> SkewVerdict {
    let offset = offset_ms.unsigned_abs();
    match max {
        Some(max) if offset > max.as_millis() as u64 => SkewVerdict::Refuse,
        _ if offset > SKEW_WARNING.as_millis() as u64 => SkewVerdict::Warn,
        _ => SkewVerdict::Fine,
    }
}

struct Inner {
    settings: ZkSettings,
    hosts: String,
    chroot: String,
    paths: Paths,
    seed: u64,
    started_at: DateTime<Utc>,
    epoch: Instant,
    session: Mutex<Option<Arc<Session>>>,
    view: Mutex<View>,
    leadership: watch::Sender<Leadership>,
    /// Wakes the manager: the task set changed, a lease was lost, stop was asked.
    wake: Notify,
    stopping: AtomicBool,
    /// Held while lease decisions are applied; `release_all` takes it so that no lease is taken
    /// after the release.
    decide_lock: tokio::sync::Mutex<()>,
    /// Serialises claims and the release of a task's lease.
    task_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The fire records as last read or written, with their znode version.
    records: Mutex<HashMap<String, (FireRecord, i32)>>,
    /// Run znodes this node created and has not removed.
    own_runs: Mutex<HashSet<String>>,
    /// The newest result tick of each task and its znode version, as this node last wrote or
    /// read them, so that recording a result is one multi-op, not a read and a multi-op. A
    /// stale entry only makes the multi fail on the version; the result is then re-read.
    results: Mutex<HashMap<String, (DateTime<Utc>, i32)>>,
    /// The task-set digest and `leads` flag of the member record as last written; the session
    /// loop re-registers when either differs from what the node now has (registration writes
    /// `leads = false` while the clock offset is not measured yet).
    registered_as: Mutex<Option<(String, bool)>>,
    /// Tasks for which a listing, made while this node held the lease incarnation with the given
    /// epoch version, found no other node's live run. Nobody else can create a run znode while
    /// that incarnation lives (claims check the epoch), so until it changes the live runs of the
    /// task are this node's own and `runs_elsewhere` needs no round trip.
    no_foreign_runs: Mutex<HashMap<String, i32>>,
    /// The verdict on the latest clock-offset measurement; `None` before the first.
    skew: Mutex<Option<SkewVerdict>>,
}

/// The ZooKeeper coordinator. Create it with [`ZkCoordinator::start`]; it connects and
/// reconnects in the background.
pub struct ZkCoordinator {
    inner: Arc<Inner>,
}

impl ZkCoordinator {
    /// Validates the settings and starts the background manager; connecting happens there, so
    /// an unreachable ZooKeeper delays firing (logged), not the start.
    pub fn start(settings: ZkSettings) -> Result<ZkCoordinator, String> {
        let (hosts, chroot) = settings.check()?;
        let base = format!("{chroot}/zkcron/{}", settings.cluster);
        let (leadership, _) = watch::channel(Leadership {
            paused: true,
            why_paused: Some(format!("connecting to ZooKeeper at {}", settings.connect)),
            ..Leadership::default()
        });
        let inner = Arc::new(Inner {
            hosts,
            chroot,
            paths: Paths { base },
            seed: rand::random(),
            started_at: wall_clock(),
            epoch: Instant::now(),
            session: Mutex::new(None),
            view: Mutex::new(View::default()),
            leadership,
            wake: Notify::new(),
            stopping: AtomicBool::new(false),
            decide_lock: tokio::sync::Mutex::new(()),
            task_locks: Mutex::new(HashMap::new()),
            records: Mutex::new(HashMap::new()),
            own_runs: Mutex::new(HashSet::new()),
            results: Mutex::new(HashMap::new()),
            registered_as: Mutex::new(None),
            no_foreign_runs: Mutex::new(HashMap::new()),
            skew: Mutex::new(None),
            settings,
        });
        tokio::spawn(manage(inner.clone()));
        Ok(ZkCoordinator { inner })
    }
}

fn validate_name(what: &str, name: &str) -> Result<(), String> {
    if crate::config::is_path_name(name) {
        Ok(())
    } else {
        Err(format!(
            "{what} `{name}` cannot be part of a ZooKeeper path; it must match {}",
            crate::config::NODE_ID_PATTERN
        ))
    }
}

impl Inner {
    fn view(&self) -> std::sync::MutexGuard<'_, View> {
        self.view.lock().expect("view lock poisoned")
    }

    fn current(&self) -> Option<Arc<Session>> {
        self.session.lock().expect("session lock poisoned").clone()
    }

    fn now(&self) -> Duration {
        Instant::now() - self.epoch
    }

    fn task_lock(&self, task: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.task_locks
            .lock()
            .expect("task locks poisoned")
            .entry(task.to_string())
            .or_default()
            .clone()
    }

    fn may_lead(&self) -> bool {
        if self.stopping.load(Ordering::SeqCst) {
            return false;
        }
        let verdict = *self.skew.lock().expect("skew lock poisoned");
        match (self.settings.max_clock_skew, verdict) {
            (None, _) => true,
            // Not measured yet: registration measures it before any lease is taken.
            (Some(_), None) => false,
            (Some(_), Some(verdict)) => verdict != SkewVerdict::Refuse,
        }
    }

    /// Records a clock-offset measurement from a write's server mtime, sent and answered at
    /// the given local times, and logs when the verdict changes.
    fn measure_skew(&self, sent: DateTime<Utc>, answered: DateTime<Utc>, stat: &Stat) {
        let Some(offset) = clock_offset_ms(sent, answered, stat.mtime) else {
            return;
        };
        let verdict = skew_verdict(offset, self.settings.max_clock_skew);
        let before = self
            .skew
            .lock()
            .expect("skew lock poisoned")
            .replace(verdict);
        if before == Some(verdict) {
            return;
        }
        let max = self
            .settings
            .max_clock_skew
            .map(|m| humantime::format_duration(m).to_string())
            .unwrap_or_else(|| "unset".into());
        match verdict {
            SkewVerdict::Fine if before.is_some() => {
                tracing::info!(offset_ms = offset, "clock skew is back under 1s");
            }
            SkewVerdict::Fine => {}
            SkewVerdict::Warn => tracing::warn!(
                offset_ms = offset,
                max_clock_skew = %max,
                "this node's clock differs from ZooKeeper's by more than 1s; check NTP"
            ),
            SkewVerdict::Refuse => tracing::error!(
                offset_ms = offset,
                max_clock_skew = %max,
                "refusing leadership: this node's clock is further from ZooKeeper's than max_clock_skew; fix NTP"
            ),
        }
        self.wake.notify_one();
    }

    /// Publishes the held leases as leadership (paused while not connected).
    fn publish_leadership(&self, connected: bool) {
        let tasks: BTreeSet<String> = self.view().held.keys().cloned().collect();
        let paused = !connected;
        let changed = self.leadership.send_if_modified(|l| {
            let same =
                l.paused == paused && *l.tasks == tasks && (paused || l.why_paused.is_none());
            if !same {
                l.paused = paused;
                l.tasks = Arc::new(tasks.clone());
                if !paused {
                    l.why_paused = None;
                }
            }
            !same
        });
        if changed {
            tracing::info!(leading = tasks.len(), paused, "leases changed");
        }
    }

    /// Says why the node is paused, for the operator; cleared when leadership is published
    /// unpaused.
    fn set_why_paused(&self, why: String) {
        self.leadership.send_if_modified(|l| {
            let changed = l.why_paused.as_ref() != Some(&why);
            l.why_paused = Some(why);
            changed
        });
    }

    fn count_session_loss(&self) {
        self.leadership.send_modify(|l| l.session_losses += 1);
    }

    async fn read_record(
        &self,
        session: &Session,
        task: &str,
    ) -> Result<(FireRecord, i32), CoordError> {
        let path = self.paths.record(task);
        let read = timed("reading the fire record", session.client.get_data(&path)).await?;
        let (data, stat) = match read {
            Ok(found) => found,
            Err(zookeeper_client::Error::NoNode) => {
                self.ensure_task_nodes(session, task).await?;
                deadline("reading the fire record", session.client.get_data(&path)).await?
            }
            Err(error) => return Err(zk_error("reading the fire record", error)),
        };
        let record = if data.is_empty() {
            FireRecord::empty()
        } else {
            serde_json::from_slice(&data)
                .map_err(|e| zk_error(format!("the fire record {path} is not valid"), e))?
        };
        self.records
            .lock()
            .expect("records lock poisoned")
            .insert(task.to_string(), (record.clone(), stat.version));
        Ok((record, stat.version))
    }

    /// Creates the task's persistent znodes (fire record, epoch) if absent: first use of the
    /// task in this cluster.
    async fn ensure_task_nodes(&self, session: &Session, task: &str) -> Result<(), CoordError> {
        let empty = serde_json::to_vec(&FireRecord::empty()).expect("serializes");
        for (path, data) in [
            (self.paths.record(task), empty.as_slice()),
            (self.paths.epoch(task), b"".as_slice()),
        ] {
            match timed(
                "creating the task's znodes",
                session.client.create(&path, data, &persistent()),
            )
            .await?
            {
                Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
                Err(error) => return Err(zk_error("creating the task's znodes", error)),
            }
        }
        Ok(())
    }

    fn cached_record(&self, task: &str) -> Option<(FireRecord, i32)> {
        self.records
            .lock()
            .expect("records lock poisoned")
            .get(task)
            .cloned()
    }

    /// The lease version to check, if this node holds the lease in `session`.
    fn held_version(&self, session: &Session, task: &str) -> Option<i32> {
        let current = self.current()?;
        if current.id != session.id || self.leadership.borrow().paused {
            return None;
        }
        self.view().held.get(task).copied()
    }

    /// Claims `tick` (or re-claims it for a rerun) with one fenced multi-op.
    async fn fenced_claim(
        &self,
        task: &str,
        tick: DateTime<Utc>,
        intent: ClaimIntent,
        rerun: bool,
    ) -> Result<ClaimOutcome, CoordError> {
        let lock = self.task_lock(task);
        let _guard = lock.lock().await;
        let Some(session) = self.current() else {
            return Ok(ClaimOutcome::NotLeader);
        };
        let Some(epoch) = self.held_version(&session, task) else {
            return Ok(ClaimOutcome::NotLeader);
        };
        let (mut record, mut version) = match self.cached_record(task) {
            Some(cached) => cached,
            None => self.read_record(&session, task).await?,
        };
        for attempt in 0..2 {
            if rerun {
                if record.tick != Some(tick) {
                    return Ok(ClaimOutcome::AlreadyClaimed {
                        record: record.tick.unwrap_or(tick),
                    });
                }
            } else if let Some(previous) = record.tick
                && previous >= tick
            {
                return Ok(ClaimOutcome::AlreadyClaimed { record: previous });
            }
            let claimed_at = wall_clock();
            let new = FireRecord {
                format: FORMAT_VERSION,
                tick: Some(tick),
                node: self.settings.node_id.clone(),
                session: session.id.clone(),
                run: intent == ClaimIntent::Run,
                reruns: if rerun { record.reruns + 1 } else { 0 },
                claimed_at: Some(claimed_at),
            };
            let data = serde_json::to_vec(&new).expect("serializes");
            let run_path = self.paths.run(task, tick);
            let run_data = serde_json::to_vec(&RunRecord {
                format: FORMAT_VERSION,
                node: self.settings.node_id.clone(),
                session: session.id.clone(),
                tick,
                started_at: claimed_at,
            })
            .expect("serializes");
            let mut multi = session.client.new_multi_writer();
            let mut build = || -> Result<(), zookeeper_client::Error> {
                // The lease exists (version 0: never modified) and is the incarnation this
                // node took (the epoch is bumped by every take): it is this node's.
                multi.add_check_version(&self.paths.lease(task), 0)?;
                multi.add_check_version(&self.paths.epoch(task), epoch)?;
                multi.add_set_data(&self.paths.record(task), &data, Some(version))?;
                if intent == ClaimIntent::Run {
                    multi.add_create(&run_path, &run_data, &ephemeral())?;
                }
                Ok(())
            };
            build().map_err(|e| zk_error("building the claim", e))?;
            let sent = wall_clock();
            let outcome = tokio::time::timeout(CALL_DEADLINE, multi.commit()).await;
            let answered = wall_clock();
            match outcome {
                Ok(Ok(results)) => {
                    if let Some(MultiWriteResult::SetData { stat }) = results.get(2) {
                        self.measure_skew(sent, answered, stat);
                        self.records
                            .lock()
                            .expect("records lock poisoned")
                            .insert(task.to_string(), (new, stat.version));
                    }
                    if intent == ClaimIntent::Run {
                        self.own_runs
                            .lock()
                            .expect("own runs poisoned")
                            .insert(run_path);
                    }
                    return Ok(ClaimOutcome::Claimed);
                }
                Ok(Err(MultiWriteError::OperationFailed {
                    index: 0 | 1,
                    source,
                })) => {
                    tracing::warn!(task = %task, %source, "claim refused: this node's lease is gone");
                    self.lease_lost(task);
                    return Ok(ClaimOutcome::NotLeader);
                }
                Ok(Err(MultiWriteError::OperationFailed { index, source })) => {
                    tracing::debug!(task = %task, index, %source, attempt, "claim conflicted; re-reading the record");
                    if rerun && index == 3 {
                        // Someone else's run znode for this tick exists: it was reclaimed.
                        return Ok(ClaimOutcome::AlreadyClaimed { record: tick });
                    }
                    (record, version) = self.read_record(&session, task).await?;
                }
                Ok(Err(MultiWriteError::RequestFailed {
                    source: zookeeper_client::Error::SessionExpired,
                })) => {
                    // Refused by an expired session: the server applied nothing for it after
                    // expiry, and anything before went with the session's run znode.
                    return Err(zk_error("claiming", "session expired; not claimed"));
                }
                unknown @ (Ok(Err(MultiWriteError::RequestFailed { .. })) | Err(_)) => {
                    let why = match unknown {
                        Ok(Err(error)) => error.to_string(),
                        _ => "no answer in time".to_string(),
                    };
                    return self
                        .resolve_unknown(&session, task, tick, &new, &run_path, intent, &why)
                        .await;
                }
            }
        }
        Ok(ClaimOutcome::AlreadyClaimed {
            record: record.tick.unwrap_or(tick),
        })
    }

    /// A claim whose answer was lost: sync and re-read the record; claimed only if it names this
    /// tick, node and session.
    #[allow(clippy::too_many_arguments)]
    async fn resolve_unknown(
        &self,
        session: &Session,
        task: &str,
        tick: DateTime<Utc>,
        new: &FireRecord,
        run_path: &str,
        intent: ClaimIntent,
        why: &str,
    ) -> Result<ClaimOutcome, CoordError> {
        tracing::warn!(task = %task, %tick, why, "claim outcome unknown; re-reading the fire record");
        self.records
            .lock()
            .expect("records lock poisoned")
            .remove(task);
        let record_path = self.paths.record(task);
        let mut delay = Duration::from_millis(100);
        let reread = loop {
            let attempt = async {
                deadline("sync", session.client.sync(&record_path)).await?;
                self.read_record(session, task).await
            };
            match attempt.await {
                Ok(found) => break found,
                Err(error) => {
                    if self.current().is_none_or(|s| s.id != session.id) {
                        // The session ended: if the claim was applied its run znode is gone
                        // too, and the tick counts as claimed but not run (at most once).
                        return Err(zk_error("resolving a claim", "the session ended"));
                    }
                    if self.stopping.load(Ordering::SeqCst) {
                        return Err(error);
                    }
                    // The session lives (ZooKeeper restarting, a partition shorter than the
                    // session): the answer is coming, and giving up would lose a claimed tick.
                    tracing::debug!(
                        task = %task,
                        "re-reading the fire record failed ({error}); retrying"
                    );
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
            }
        };
        let (record, _) = reread;
        let ours = record.tick == Some(tick)
            && record.session == new.session
            && record.node == new.node
            && record.reruns == new.reruns;
        if ours {
            tracing::info!(task = %task, %tick, "the claim had been applied");
            if intent == ClaimIntent::Run {
                self.own_runs
                    .lock()
                    .expect("own runs poisoned")
                    .insert(run_path.to_string());
            }
            Ok(ClaimOutcome::Claimed)
        } else {
            match record.tick {
                Some(current) if current >= tick => {
                    Ok(ClaimOutcome::AlreadyClaimed { record: current })
                }
                _ => Err(zk_error(format!("claiming {task} at {tick}"), why)),
            }
        }
    }

    /// The lease turned out to be gone: forget it and let the manager decide again.
    fn lease_lost(&self, task: &str) {
        let removed = self.view().held.remove(task).is_some();
        if removed {
            // Not inline: the watch's read guard must be gone before publishing writes to it.
            let connected = !self.leadership.borrow().paused;
            self.publish_leadership(connected);
            self.wake.notify_one();
        }
    }
}

impl Coordinator for ZkCoordinator {
    async fn publish(&self, tasks: &[TaskSpec]) -> Result<(), CoordError> {
        // A node where a task is disabled is not eligible to lead it.
        let enabled: Vec<TaskSpec> = tasks.iter().filter(|t| t.enabled).cloned().collect();
        let encoded = encode_taskset(&enabled);
        {
            let mut view = self.inner.view();
            let unchanged = view
                .my_set
                .as_ref()
                .is_some_and(|(reference, _, _)| reference.digest == encoded.0.digest);
            if unchanged {
                return Ok(());
            }
            view.my_set = Some(encoded);
        }
        // The manager writes it when connected; publishing never blocks the daemon on ZooKeeper.
        self.inner.wake.notify_one();
        Ok(())
    }

    fn leadership(&self) -> watch::Receiver<Leadership> {
        self.inner.leadership.subscribe()
    }

    async fn last_claimed(&self, task: &str) -> Result<Option<DateTime<Utc>>, CoordError> {
        let session = self
            .inner
            .current()
            .ok_or_else(|| zk_error("reading the fire record", "not connected"))?;
        Ok(self.inner.read_record(&session, task).await?.0.tick)
    }

    async fn claim(
        &self,
        task: &str,
        tick: DateTime<Utc>,
        intent: ClaimIntent,
    ) -> Result<ClaimOutcome, CoordError> {
        self.inner.fenced_claim(task, tick, intent, false).await
    }

    async fn orphaned_tick(&self, task: &str) -> Result<Option<DateTime<Utc>>, CoordError> {
        let inner = &self.inner;
        let session = inner
            .current()
            .ok_or_else(|| zk_error("checking for a lost run", "not connected"))?;
        let (record, _) = inner.read_record(&session, task).await?;
        let Some(tick) = record.tick.filter(|_| record.run) else {
            return Ok(None);
        };
        let run_path = inner.paths.run(task, tick);
        if inner
            .own_runs
            .lock()
            .expect("own runs poisoned")
            .contains(&run_path)
        {
            return Ok(None);
        }
        if let Some(result) = self.last_result(task).await?
            && result.tick >= tick
        {
            return Ok(None);
        }
        let live = deadline(
            "reading the run record",
            session.client.check_stat(&run_path),
        )
        .await?;
        Ok(live.is_none().then_some(tick))
    }

    async fn reclaim(&self, task: &str, tick: DateTime<Utc>) -> Result<ClaimOutcome, CoordError> {
        self.inner
            .records
            .lock()
            .expect("records lock poisoned")
            .remove(task);
        self.inner
            .fenced_claim(task, tick, ClaimIntent::Run, true)
            .await
    }

    async fn runs_elsewhere(&self, task: &str) -> Result<usize, CoordError> {
        let inner = &self.inner;
        let session = inner
            .current()
            .ok_or_else(|| zk_error("listing live runs", "not connected"))?;
        // Read before the listing: a run another node created before this take shows in it.
        let incarnation = inner.view().held.get(task).copied();
        let known_clear = inner
            .no_foreign_runs
            .lock()
            .expect("poisoned")
            .get(task)
            .copied();
        if incarnation.is_some() && incarnation == known_clear {
            return Ok(0);
        }
        let children = deadline(
            "listing live runs",
            session.client.list_children(&inner.paths.record(task)),
        )
        .await?;
        let foreign = {
            let own = inner.own_runs.lock().expect("own runs poisoned");
            let prefix = format!("{}/", inner.paths.record(task));
            children
                .iter()
                .filter(|c| c.starts_with("run-"))
                .filter(|c| !own.contains(&format!("{prefix}{c}")))
                .count()
        };
        if let (0, Some(epoch)) = (foreign, incarnation) {
            inner
                .no_foreign_runs
                .lock()
                .expect("poisoned")
                .insert(task.to_string(), epoch);
        }
        Ok(foreign)
    }

    async fn run_ended(&self, task: &str, result: &RunResult) -> Result<(), CoordError> {
        let inner = &self.inner;
        let run_path = inner.paths.run(task, result.tick);
        let mut delay = Duration::from_millis(100);
        let mut last_error = None;
        for _ in 0..5 {
            let Some(session) = inner.current() else {
                tokio::time::sleep(delay).await;
                delay *= 2;
                continue;
            };
            match write_result(inner, &session, task, result, &run_path).await {
                Ok(()) => {
                    inner
                        .own_runs
                        .lock()
                        .expect("own runs poisoned")
                        .remove(&run_path);
                    return Ok(());
                }
                Err(error) => last_error = Some(error),
            }
            tokio::time::sleep(delay).await;
            delay *= 2;
        }
        inner
            .own_runs
            .lock()
            .expect("own runs poisoned")
            .remove(&run_path);
        Err(last_error.unwrap_or_else(|| zk_error("recording the run result", "not connected")))
    }

    async fn last_result(&self, task: &str) -> Result<Option<RunResult>, CoordError> {
        let inner = &self.inner;
        let session = inner
            .current()
            .ok_or_else(|| zk_error("reading the last result", "not connected"))?;
        let read = tokio::time::timeout(
            CALL_DEADLINE,
            session.client.get_data(&inner.paths.result(task)),
        )
        .await
        .map_err(|_| zk_error("reading the last result", "no answer in time"))?;
        match read {
            Ok((data, _)) => Ok(serde_json::from_slice::<ResultRecord>(&data)
                .ok()
                .map(|r| r.result)),
            Err(zookeeper_client::Error::NoNode) => Ok(None),
            Err(error) => Err(zk_error("reading the last result", error)),
        }
    }

    async fn release_all(&self) {
        let inner = &self.inner;
        inner.stopping.store(true, Ordering::SeqCst);
        // Lease decisions being applied finish first; later ones see `stopping`.
        let _deciding = inner.decide_lock.lock().await;
        let held: Vec<String> = inner.view().held.keys().cloned().collect();
        // Nothing fires from here on.
        inner
            .leadership
            .send_modify(|l| l.tasks = Arc::new(BTreeSet::new()));
        // Wait for claims in flight, so no claim follows the release.
        let locks: Vec<_> = held.iter().map(|t| inner.task_lock(t)).collect();
        let mut guards = Vec::with_capacity(locks.len());
        for lock in &locks {
            guards.push(lock.lock().await);
        }
        inner.view().held.clear();
        let Some(session) = inner.current() else {
            return;
        };
        // Leave the membership first, in the same multi as the first leases, so the next-ranked
        // nodes are designated the moment the leases go.
        let mut ops: Vec<String> = vec![inner.paths.member(&inner.settings.node_id)];
        ops.extend(held.iter().map(|t| inner.paths.lease(t)));
        let started = Instant::now();
        for batch in ops.chunks(RELEASE_BATCH) {
            let mut multi = session.client.new_multi_writer();
            for path in batch {
                let _ = multi.add_delete(path, None);
            }
            if let Err(error) = deadline("releasing leases", multi.commit()).await {
                // A missing znode fails the whole batch: delete one by one instead.
                tracing::debug!(%error, "batch release failed; releasing one by one");
                for path in batch {
                    let _ = deadline("releasing a lease", session.client.delete(path, None)).await;
                }
            }
        }
        drop(guards);
        tracing::info!(
            released = held.len(),
            took_ms = started.elapsed().as_millis() as u64,
            "left the cluster and released all leases"
        );
    }

    async fn close(&self) {
        let session = self
            .inner
            .session
            .lock()
            .expect("session lock poisoned")
            .take();
        if let Some(session) = session {
            let mut state = session.client.state_watcher();
            drop(session);
            // The last client dropped sends CloseSession; wait briefly so it leaves the process.
            let _ = tokio::time::timeout(Duration::from_millis(300), async {
                loop {
                    if matches!(state.changed().await, SessionState::Closed) {
                        return;
                    }
                }
            })
            .await;
        }
    }
}

/// Deletes the run znode and writes the result (only if it is not older than the stored one),
/// in one multi-op. The stored result's tick and version come from `Inner::results` when this
/// node knows them, so that the run's end is visible to other nodes after one round trip.
async fn write_result(
    inner: &Inner,
    session: &Session,
    task: &str,
    result: &RunResult,
    run_path: &str,
) -> Result<(), CoordError> {
    let client = &session.client;
    let result_path = inner.paths.result(task);
    let data = serde_json::to_vec(&ResultRecord {
        format: FORMAT_VERSION,
        result: result.clone(),
    })
    .expect("serializes");
    let cached = || {
        inner
            .results
            .lock()
            .expect("results lock poisoned")
            .get(task)
            .copied()
    };
    let forget = || {
        inner
            .results
            .lock()
            .expect("results lock poisoned")
            .remove(task)
    };
    for _ in 0..2 {
        // The stored result: absent, or its tick (if readable) and version.
        let existing = match cached() {
            Some((tick, version)) => Some((Some(tick), version)),
            None => match timed("reading the last result", client.get_data(&result_path)).await? {
                Ok((bytes, stat)) => Some((
                    serde_json::from_slice::<ResultRecord>(&bytes)
                        .ok()
                        .map(|r| r.result.tick),
                    stat.version,
                )),
                Err(zookeeper_client::Error::NoNode) => None,
                Err(error) => return Err(zk_error("reading the last result", error)),
            },
        };
        let newer = existing
            .and_then(|(tick, _)| tick)
            .is_none_or(|tick| tick <= result.tick);
        // Our run znode exists while its path is in `own_runs`: the set is emptied when the
        // session (and with it the ephemeral) goes. No read needed.
        let run_live = inner
            .own_runs
            .lock()
            .expect("own runs poisoned")
            .contains(run_path);
        if !run_live && !newer {
            return Ok(());
        }
        let mut multi = client.new_multi_writer();
        let mut build = || -> Result<(), zookeeper_client::Error> {
            if run_live {
                multi.add_delete(run_path, None)?;
            }
            if newer {
                match existing {
                    Some((_, version)) => multi.add_set_data(&result_path, &data, Some(version))?,
                    None => multi.add_create(&result_path, &data, &persistent())?,
                }
            }
            Ok(())
        };
        build().map_err(|e| zk_error("building the result write", e))?;
        let result_index = usize::from(run_live);
        match tokio::time::timeout(CALL_DEADLINE, multi.commit()).await {
            Ok(Ok(results)) => {
                let version = match results.get(result_index) {
                    Some(MultiWriteResult::SetData { stat }) => Some(stat.version),
                    Some(MultiWriteResult::Create { .. }) => Some(0),
                    _ => None,
                };
                if let Some(version) = version {
                    inner
                        .results
                        .lock()
                        .expect("results lock poisoned")
                        .insert(task.to_string(), (result.tick, version));
                }
                return Ok(());
            }
            Ok(Err(MultiWriteError::OperationFailed {
                index: 0,
                source: zookeeper_client::Error::NoNode,
            })) if run_live => {
                // The session that owned the run znode ended before it was forgotten: retry
                // with the result alone.
                inner
                    .own_runs
                    .lock()
                    .expect("own runs poisoned")
                    .remove(run_path);
                return Err(zk_error(
                    "recording the run result",
                    "the run record was already gone",
                ));
            }
            Ok(Err(MultiWriteError::OperationFailed { index, source }))
                if newer && index == result_index =>
            {
                // Someone else wrote a result since this node last saw it: read it and decide
                // again.
                tracing::debug!(task = %task, %source, "the stored result changed; re-reading it");
                forget();
            }
            Ok(Err(error)) => {
                forget();
                return Err(zk_error("recording the run result", error));
            }
            Err(_) => {
                forget();
                return Err(zk_error("recording the run result", "no answer in time"));
            }
        }
    }
    Err(zk_error(
        "recording the run result",
        "the stored result kept changing",
    ))
}

/// The background manager: connect, register, watch, decide, and start over on expiry.
async fn manage(inner: Arc<Inner>) {
    let mut delay = Duration::from_millis(200);
    loop {
        if inner.stopping.load(Ordering::SeqCst) {
            return;
        }
        let client = match connect(&inner).await {
            Ok(client) => {
                delay = Duration::from_millis(200);
                client
            }
            Err(error) => {
                tracing::error!(
                    zookeeper = %inner.settings.connect,
                    "paused: cannot connect to ZooKeeper ({error}); firing nothing until connected"
                );
                inner.set_why_paused(format!(
                    "cannot reach ZooKeeper at {} ({error})",
                    inner.settings.connect
                ));
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(10));
                continue;
            }
        };
        let session = Arc::new(Session {
            id: session_hex(&client),
            client,
        });
        match run_session(&inner, session.clone()).await {
            SessionEnd::Expired => {
                tracing::warn!(session = %session.id, "session expired: leases and run records are gone; rejoining with a new session");
                inner.set_why_paused("the ZooKeeper session expired; rejoining".into());
            }
            SessionEnd::Stopped => return,
            SessionEnd::Failed(error) => {
                tracing::error!(session = %session.id, "ZooKeeper session setup failed ({error}); starting over");
                inner.set_why_paused(format!(
                    "ZooKeeper session setup failed ({error}); retrying"
                ));
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(10));
            }
        }
        // Forget everything tied to the old session.
        *inner.session.lock().expect("session lock poisoned") = None;
        {
            let mut view = inner.view();
            view.held.clear();
            view.present.clear();
            view.members.clear();
        }
        inner.own_runs.lock().expect("own runs poisoned").clear();
        inner.records.lock().expect("records lock poisoned").clear();
        inner.publish_leadership(false);
    }
}

enum SessionEnd {
    Expired,
    Stopped,
    Failed(CoordError),
}

async fn connect(inner: &Inner) -> Result<Client, CoordError> {
    let connector = Client::connector().with_session_timeout(inner.settings.session_timeout);
    let client = tokio::time::timeout(
        inner.settings.session_timeout + CALL_DEADLINE,
        connector.connect(&inner.hosts),
    )
    .await
    .map_err(|_| zk_error("connecting", "no session established in time"))?
    .map_err(|e| zk_error(format!("connecting to {}", inner.hosts), e))?;
    // The chroot and the cluster root are created if absent.
    for dir in [
        inner.paths.members(),
        inner.paths.leases(),
        inner.paths.tasks(),
        inner.paths.tasksets(),
    ] {
        deadline(
            format!("creating {dir}").as_str(),
            client.mkdir(&dir, &persistent()),
        )
        .await?;
    }
    if !inner.chroot.is_empty() {
        tracing::debug!(chroot = %inner.chroot, "using chroot");
    }
    Ok(client)
}

/// Writes this node's task set (if new) and its member znode.
async fn register(inner: &Inner, session: &Session) -> Result<(), CoordError> {
    let client = &session.client;
    let Some((reference, chunks, set)) = inner.view().my_set.clone() else {
        return Err(zk_error("registering", "no task set published yet"));
    };
    for (index, chunk) in chunks.iter().enumerate() {
        let path = inner.paths.chunk(&reference.digest, index);
        // Content-addressed: a set another node already wrote is the same bytes.
        match timed(
            "writing the task set",
            client.create(&path, chunk, &persistent()),
        )
        .await?
        {
            Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
            Err(error) => return Err(zk_error("writing the task set", error)),
        }
    }
    inner.view().tasksets.insert(reference.digest.clone(), set);
    let record = MemberRecord {
        format: FORMAT_VERSION,
        id: inner.settings.node_id.clone(),
        release: inner.settings.release.to_string(),
        seed: format!("{:016x}", inner.seed),
        host: nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default(),
        pid: std::process::id(),
        started_at: inner.started_at,
        labels: inner.settings.labels.clone(),
        taskset: reference,
        leads: inner.may_lead(),
    };
    let data = serde_json::to_vec(&record).expect("serializes");
    let path = inner.paths.member(&inner.settings.node_id);
    let mut waited = false;
    loop {
        let sent = wall_clock();
        match timed("registering", client.create(&path, &data, &ephemeral())).await? {
            Ok((stat, _)) => {
                inner.measure_skew(sent, wall_clock(), &stat);
                break;
            }
            Err(zookeeper_client::Error::NodeExists) => {
                let (_, stat) =
                    match timed("reading the member znode", client.get_data(&path)).await? {
                        Ok(found) => found,
                        Err(zookeeper_client::Error::NoNode) => continue,
                        Err(error) => return Err(zk_error("reading the member znode", error)),
                    };
                if stat.ephemeral_owner == client.session_id().0 {
                    // Ours (a re-registration after a publish): update it.
                    let sent = wall_clock();
                    let stat = deadline(
                        "updating the member znode",
                        client.set_data(&path, &data, None),
                    )
                    .await?;
                    inner.measure_skew(sent, wall_clock(), &stat);
                    break;
                }
                if !waited {
                    tracing::warn!(
                        node = %inner.settings.node_id,
                        "another session is registered as this node (an earlier run that has not expired yet, or another host with the same node id); waiting for it to go"
                    );
                    waited = true;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(error) => return Err(zk_error("registering the member znode", error)),
        }
        if inner.stopping.load(Ordering::SeqCst) {
            return Ok(());
        }
    }
    *inner.registered_as.lock().expect("poisoned") =
        Some((record.taskset.digest.clone(), record.leads));
    tracing::info!(
        node = %inner.settings.node_id,
        release = %inner.settings.release,
        session = %session.id,
        tasks = record.taskset.count,
        "registered in ZooKeeper"
    );
    Ok(())
}

/// Reads one member znode (and its task set if new); `None` if it is gone or unreadable.
async fn read_member(
    inner: &Inner,
    client: &Client,
    id: &str,
) -> Result<Option<Member>, CoordError> {
    let path = inner.paths.member(id);
    let data = match timed("reading a member", client.get_data(&path)).await? {
        Ok((data, _)) => data,
        Err(zookeeper_client::Error::NoNode) => return Ok(None),
        Err(error) => return Err(zk_error("reading a member", error)),
    };
    let record: MemberRecord = match serde_json::from_slice(&data) {
        Ok(record) => record,
        Err(error) => {
            tracing::warn!(member = id, "ignoring an unreadable member znode ({error})");
            return Ok(None);
        }
    };
    let Ok(release) = Version::parse(&record.release) else {
        tracing::warn!(member = id, release = %record.release, "ignoring a member with an invalid release");
        return Ok(None);
    };
    let Ok(seed) = u64::from_str_radix(&record.seed, 16) else {
        tracing::warn!(member = id, "ignoring a member with an invalid seed");
        return Ok(None);
    };
    let known = inner.view().tasksets.get(&record.taskset.digest).cloned();
    let tasks = match known {
        Some(set) => set,
        None => {
            let mut bytes = Vec::new();
            for index in 0..record.taskset.chunks {
                let path = inner.paths.chunk(&record.taskset.digest, index);
                match timed("reading a task set", client.get_data(&path)).await? {
                    Ok((chunk, _)) => bytes.extend_from_slice(&chunk),
                    Err(zookeeper_client::Error::NoNode) => {
                        tracing::warn!(
                            member = id,
                            "the member's task set is missing; treating it as defining no tasks"
                        );
                        return Ok(None);
                    }
                    Err(error) => return Err(zk_error("reading a task set", error)),
                }
            }
            let set = match serde_json::from_slice::<TaskSetRecord>(&bytes) {
                Ok(record) => decode_taskset(&record),
                Err(error) => {
                    tracing::warn!(
                        member = id,
                        "ignoring a member whose task set is unreadable ({error})"
                    );
                    return Ok(None);
                }
            };
            inner
                .view()
                .tasksets
                .insert(record.taskset.digest.clone(), set.clone());
            set
        }
    };
    Ok(Some(Member {
        id: record.id,
        release,
        seed,
        tasks,
        may_lead: record.leads,
    }))
}

/// Re-lists members and leases from scratch (at start and after every reconnect).
async fn relist(inner: &Inner, session: &Session) -> Result<(), CoordError> {
    let client = &session.client;
    let ids = deadline(
        "listing members",
        client.list_children(&inner.paths.members()),
    )
    .await?;
    let mut members = HashMap::new();
    for id in ids {
        if let Some(member) = read_member(inner, client, &id).await? {
            members.insert(id, member);
        }
    }
    let leases: HashSet<String> = deadline(
        "listing leases",
        client.list_children(&inner.paths.leases()),
    )
    .await?
    .into_iter()
    .collect();
    let now = inner.now();
    let mut view = inner.view();
    view.members = members;
    // A lease this node believes it holds but that is gone was lost.
    let lost: Vec<String> = view
        .held
        .keys()
        .filter(|t| !leases.contains(*t))
        .cloned()
        .collect();
    for task in lost {
        tracing::warn!(task = %task, "lease found gone after reconnecting");
        view.held.remove(&task);
    }
    view.vacant_since.retain(|t, _| !leases.contains(t));
    let vacant: Vec<String> = view
        .my_set
        .as_ref()
        .map(|(_, _, set)| {
            set.keys()
                .filter(|t| !leases.contains(*t))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    for task in vacant {
        view.vacant_since.entry(task).or_insert(now);
    }
    view.present = leases;
    Ok(())
}

/// Applies lease decisions until the session ends.
async fn run_session(inner: &Arc<Inner>, session: Arc<Session>) -> SessionEnd {
    let client = session.client.clone();
    let mut state = client.state_watcher();
    // Published before anything reads through it (`last_claimed`, claims).
    *inner.session.lock().expect("session lock poisoned") = Some(session.clone());
    let setup = async {
        let members = deadline(
            "watching members",
            client.watch(&inner.paths.members(), AddWatchMode::PersistentRecursive),
        )
        .await?;
        let leases = deadline(
            "watching leases",
            client.watch(&inner.paths.leases(), AddWatchMode::PersistentRecursive),
        )
        .await?;
        // Wait for the daemon's first publish.
        while inner.view().my_set.is_none() {
            inner.wake.notified().await;
        }
        register(inner, &session).await?;
        relist(inner, &session).await?;
        Ok::<_, CoordError>((members, leases))
    };
    let (mut members_watch, mut leases_watch) = match setup.await {
        Ok(watches) => watches,
        Err(error) => return SessionEnd::Failed(error),
    };
    let mut connected = true;
    let mut disconnected_at: Option<Instant> = None;
    let mut loss_counted = false;
    let mut recheck: Option<Instant> = None;
    let mut probe = tokio::time::interval(CLOCK_PROBE);
    probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let first_gc = TASKSET_GC_EVERY.mul_f64(rand::random::<f64>());
    let mut gc = tokio::time::interval_at(Instant::now() + first_gc, TASKSET_GC_EVERY);
    gc.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    decide_and_apply(inner, &session, connected, &mut recheck).await;

    loop {
        let loss_deadline = disconnected_at.map(|at| at + inner.settings.session_timeout);
        let mut member_events: Vec<WatchedEvent> = Vec::new();
        let mut lease_events: Vec<WatchedEvent> = Vec::new();
        tokio::select! {
            new_state = state.changed() => match new_state {
                SessionState::Disconnected => {
                    connected = false;
                    disconnected_at = Some(Instant::now());
                    tracing::warn!("paused: disconnected from ZooKeeper; firing nothing until reconnected");
                    inner.set_why_paused(format!(
                        "disconnected from ZooKeeper at {}; waiting to reconnect",
                        inner.settings.connect
                    ));
                }
                SessionState::SyncConnected | SessionState::ConnectedReadOnly => {
                    if !connected {
                        tracing::info!("reconnected to ZooKeeper within the session; re-listing members and leases");
                        connected = true;
                        disconnected_at = None;
                        loss_counted = false;
                        if let Err(error) = relist(inner, &session).await {
                            tracing::warn!("re-listing after reconnect failed ({error})");
                        }
                    }
                }
                SessionState::Expired => {
                    if !loss_counted {
                        inner.count_session_loss();
                    }
                    return SessionEnd::Expired;
                }
                SessionState::AuthFailed | SessionState::Closed => {
                    if inner.stopping.load(Ordering::SeqCst) {
                        return SessionEnd::Stopped;
                    }
                    return SessionEnd::Failed(zk_error("session", format!("{new_state:?}")));
                }
            },
            event = members_watch.changed() => member_events.push(event),
            event = leases_watch.changed() => lease_events.push(event),
            _ = inner.wake.notified() => {}
            _ = sleep_until_opt(recheck) => {}
            _ = sleep_until_opt(loss_deadline), if !loss_counted => {
                tracing::warn!(
                    timeout = %humantime::format_duration(inner.settings.session_timeout),
                    "disconnected for longer than the session timeout: the session is presumed lost"
                );
                inner.count_session_loss();
                loss_counted = true;
            }
            _ = probe.tick() => {
                if connected {
                    probe_clock(inner, &session).await;
                }
            }
            _ = gc.tick() => {
                if connected {
                    match collect_tasksets(inner, &session).await {
                        Ok(0) => {}
                        Ok(deleted) => tracing::info!(chunks = deleted, "deleted task sets no member uses"),
                        Err(error) => tracing::warn!("cleaning up task sets failed ({error})"),
                    }
                }
            }
        }
        if inner.stopping.load(Ordering::SeqCst) {
            inner.publish_leadership(connected);
            if state.peek_state() == SessionState::Closed {
                return SessionEnd::Stopped;
            }
            // Keep the session (run znodes) until close(); just stop deciding.
            let _ = state.changed().await;
            continue;
        }
        // Drain whatever else is ready, then decide once for the whole batch. A watcher must not
        // be polled again after it reported a session event (it panics after a terminal one).
        let is_session = |events: &Vec<WatchedEvent>| {
            events
                .last()
                .is_some_and(|e| e.event_type == EventType::Session)
        };
        while !is_session(&member_events) {
            match members_watch.changed().now_or_never() {
                Some(event) => member_events.push(event),
                None => break,
            }
        }
        while !is_session(&lease_events) {
            match leases_watch.changed().now_or_never() {
                Some(event) => lease_events.push(event),
                None => break,
            }
        }
        for event in member_events.iter().chain(&lease_events) {
            if event.event_type == EventType::Session
                && matches!(
                    event.session_state,
                    SessionState::Expired | SessionState::Closed | SessionState::AuthFailed
                )
            {
                if !loss_counted {
                    inner.count_session_loss();
                }
                return SessionEnd::Expired;
            }
        }
        apply_lease_events(inner, &session, &lease_events).await;
        for event in &member_events {
            let prefix = format!("{}/", inner.paths.members());
            let Some(id) = event.path.strip_prefix(&prefix) else {
                continue;
            };
            match event.event_type {
                EventType::NodeDeleted => {
                    if id == inner.settings.node_id {
                        // Our registration vanished (deleted by hand?): register again. The
                        // event may be stale; register() keeps a znode that is still ours.
                        if let Err(error) = register(inner, &session).await {
                            tracing::warn!("re-registering failed ({error})");
                        }
                        if let Ok(Some(me)) = read_member(inner, &client, id).await {
                            inner.view().members.insert(id.to_string(), me);
                        }
                    } else {
                        inner.view().members.remove(id);
                    }
                }
                EventType::NodeCreated | EventType::NodeDataChanged => {
                    match read_member(inner, &client, id).await {
                        Ok(Some(member)) => {
                            let now = inner.now();
                            let mut view = inner.view();
                            view.members.insert(id.to_string(), member);
                            if id != inner.settings.node_id {
                                view.members_changed = now;
                            }
                        }
                        Ok(None) => {
                            inner.view().members.remove(id);
                        }
                        Err(error) => tracing::warn!(member = id, "cannot read member ({error})"),
                    }
                }
                _ => {}
            }
        }
        // A new task set from the daemon, or a change in whether this node may lead: write it
        // and re-register.
        let wanted = inner
            .view()
            .my_set
            .as_ref()
            .map(|s| (s.0.digest.clone(), inner.may_lead()));
        let registered = inner.registered_as.lock().expect("poisoned").clone();
        if connected && wanted.is_some() && wanted != registered {
            match register(inner, &session).await {
                Ok(()) => {
                    // Vacancy clocks for newly defined tasks start now.
                    let now = inner.now();
                    let mut view = inner.view();
                    let vacant: Vec<String> = view
                        .my_set
                        .as_ref()
                        .map(|(_, _, set)| {
                            set.keys()
                                .filter(|t| !view.present.contains(*t))
                                .cloned()
                                .collect()
                        })
                        .unwrap_or_default();
                    for task in vacant {
                        view.vacant_since.entry(task).or_insert(now);
                    }
                }
                Err(error) => tracing::warn!("publishing the task set failed ({error}); retrying"),
            }
        }
        decide_and_apply(inner, &session, connected, &mut recheck).await;
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Applies lease events to the view. Events are hints, applied in order: ZooKeeper 3.8 does not
/// say which transaction an event is for, so a deletion event for a lease this node holds is
/// checked against the server (it may be the echo of an earlier release of a lease since taken
/// again) before the lease counts as lost.
async fn apply_lease_events(inner: &Inner, session: &Session, events: &[WatchedEvent]) {
    if events.is_empty() {
        return;
    }
    let prefix = format!("{}/", inner.paths.leases());
    let now = inner.now();
    let mut suspect = Vec::new();
    {
        let mut view = inner.view();
        for event in events {
            let Some(task) = event.path.strip_prefix(&prefix) else {
                continue;
            };
            match event.event_type {
                EventType::NodeCreated => {
                    view.present.insert(task.to_string());
                    view.vacant_since.remove(task);
                }
                EventType::NodeDeleted => {
                    view.present.remove(task);
                    view.vacant_since.insert(task.to_string(), now);
                    if view.held.contains_key(task) {
                        suspect.push(task.to_string());
                    }
                }
                _ => {}
            }
        }
    }
    for task in suspect {
        let path = inner.paths.lease(&task);
        match deadline("checking a lease", session.client.check_stat(&path)).await {
            Ok(Some(stat)) if stat.ephemeral_owner == session.client.session_id().0 => {
                // Still ours: the event was the echo of an earlier release.
                let mut view = inner.view();
                view.present.insert(task.clone());
                view.vacant_since.remove(&task);
            }
            Ok(_) => {
                tracing::warn!(task = %task, "this node's lease is gone (session expired, or deleted by hand)");
                inner.lease_lost(&task);
            }
            Err(error) => {
                tracing::warn!(task = %task, "cannot check the lease ({error}); treating it as lost");
                inner.lease_lost(&task);
            }
        }
    }
}

/// Decides with the current view, applies the actions, publishes leadership.
async fn decide_and_apply(
    inner: &Arc<Inner>,
    session: &Arc<Session>,
    connected: bool,
    recheck: &mut Option<Instant>,
) {
    if !connected {
        inner.publish_leadership(false);
        *recheck = None;
        return;
    }
    let _deciding = inner.decide_lock.lock().await;
    let may_lead = inner.may_lead();
    let decision = {
        let mut view = inner.view();
        let members: Vec<Member> = view.members.values().cloned().collect();
        let held: HashSet<String> = view.held.keys().cloned().collect();
        view.covering.retain(|task, _| held.contains(task));
        lease::decide(&LeaseView {
            me: &inner.settings.node_id,
            members: &members,
            present: &view.present,
            held: &held,
            covering: &view.covering,
            vacant_since: &view.vacant_since,
            members_changed: view.members_changed,
            now: inner.now(),
            may_lead,
        })
    };
    *recheck = decision.recheck_at.map(|at| inner.epoch + at);
    let mut releases = Vec::new();
    let mut takes = Vec::new();
    for action in decision.actions {
        match action {
            LeaseAction::Release(task) => releases.push(task),
            LeaseAction::Take(task) => takes.push((task, false)),
            LeaseAction::Cover(task) => takes.push((task, true)),
        }
    }
    if !releases.is_empty() {
        // Stop firing them first, then wait for claims in flight, then delete.
        {
            let mut view = inner.view();
            for task in &releases {
                view.held.remove(task);
            }
        }
        inner.publish_leadership(connected);
        let deletes = releases.iter().map(|task| {
            let inner = inner.clone();
            let session = session.clone();
            async move {
                let lock = inner.task_lock(task);
                let _guard = lock.lock().await;
                match deadline(
                    "releasing a lease",
                    session.client.delete(&inner.paths.lease(task), None),
                )
                .await
                {
                    Ok(()) => tracing::debug!(task = %task, "lease released"),
                    Err(error) => {
                        tracing::warn!(task = %task, "releasing the lease failed ({error})")
                    }
                }
            }
        });
        futures::future::join_all(deletes).await;
    }
    if !takes.is_empty() {
        let creates = takes.into_iter().map(|(task, cover)| {
            let inner = inner.clone();
            let session = session.clone();
            async move {
                let data = serde_json::to_vec(&LeaseRecord {
                    format: FORMAT_VERSION,
                    node: inner.settings.node_id.clone(),
                    session: session.id.clone(),
                    since: wall_clock(),
                })
                .expect("serializes");
                match take_lease(&inner, &session, &task, &data).await {
                    Ok(Some(epoch)) => {
                        let now = inner.now();
                        let mut view = inner.view();
                        view.present.insert(task.clone());
                        view.vacant_since.remove(&task);
                        view.held.insert(task.clone(), epoch);
                        if cover {
                            tracing::info!(task = %task, "took the lease as cover: its designated node left it vacant");
                            view.covering.insert(task.clone(), now);
                        } else {
                            view.covering.remove(&task);
                        }
                    }
                    Ok(None) => {
                        let mut view = inner.view();
                        view.present.insert(task.clone());
                        view.vacant_since.remove(&task);
                    }
                    Err(error) => tracing::warn!(task = %task, "taking the lease failed ({error})"),
                }
            }
        });
        // A bounded number in flight: a node starting with thousands of vacant leases must not
        // queue them all at once behind one server, past every call's deadline.
        futures::stream::iter(creates)
            .buffer_unordered(TAKES_IN_FLIGHT)
            .collect::<()>()
            .await;
        // Something may have changed meanwhile; a failed take is retried at the next decision.
        if recheck.is_none() {
            *recheck = Some(Instant::now() + Duration::from_millis(500));
        }
    }
    inner.publish_leadership(connected);
}

/// Takes the lease of `task`: creates the ephemeral lease and bumps the task's epoch in one
/// multi-op. Returns the epoch version this lease incarnation owns (claims check it), or `None`
/// when another session holds the lease.
async fn take_lease(
    inner: &Inner,
    session: &Session,
    task: &str,
    data: &[u8],
) -> Result<Option<i32>, CoordError> {
    let lease = inner.paths.lease(task);
    let epoch = inner.paths.epoch(task);
    for _ in 0..2 {
        let mut multi = session.client.new_multi_writer();
        multi
            .add_create(&lease, data, &ephemeral())
            .and_then(|()| multi.add_set_data(&epoch, b"", None))
            .map_err(|e| zk_error("building the lease take", e))?;
        match tokio::time::timeout(CALL_DEADLINE, multi.commit()).await {
            Ok(Ok(results)) => {
                return match results.get(1) {
                    Some(MultiWriteResult::SetData { stat }) => Ok(Some(stat.version)),
                    _ => Err(zk_error("taking a lease", "unexpected multi answer")),
                };
            }
            Ok(Err(MultiWriteError::OperationFailed {
                index: 1,
                source: zookeeper_client::Error::NoNode,
            })) => {
                // First lease of this task in the cluster: create its record and epoch.
                inner.ensure_task_nodes(session, task).await?;
            }
            Ok(Err(MultiWriteError::OperationFailed {
                index: 0,
                source: zookeeper_client::Error::NodeExists,
            })) => {
                // Held by someone, perhaps by this very session (a take whose answer was lost):
                // ask the server whose it is. If ours, nobody could have bumped the epoch since.
                let owner = deadline("checking a lease", session.client.check_stat(&lease)).await?;
                let ours =
                    owner.is_some_and(|s| s.ephemeral_owner == session.client.session_id().0);
                if !ours {
                    return Ok(None);
                }
                let stat = deadline("reading the epoch", session.client.check_stat(&epoch)).await?;
                return Ok(stat.map(|s| s.version));
            }
            Ok(Err(error)) => return Err(zk_error("taking a lease", error)),
            Err(_) => return Err(zk_error("taking a lease", "no answer in time")),
        }
    }
    Err(zk_error(
        "taking a lease",
        "the task's znodes keep vanishing",
    ))
}

/// Deletes the task-set chunks no registered member references and that are older than
/// [`TASKSET_GC_AGE`] (each `jobs.d` change publishes a new set; without this they would pile
/// up). Returns how many chunks it deleted. Members are read afresh; if one cannot be read, it
/// deletes nothing.
async fn collect_tasksets(inner: &Inner, session: &Session) -> Result<usize, CoordError> {
    let client = &session.client;
    let mut referenced: HashSet<String> = inner
        .view()
        .my_set
        .iter()
        .map(|(reference, _, _)| reference.digest.clone())
        .collect();
    let ids = deadline(
        "listing members",
        client.list_children(&inner.paths.members()),
    )
    .await?;
    for id in ids {
        match timed(
            "reading a member",
            client.get_data(&inner.paths.member(&id)),
        )
        .await?
        {
            Ok((data, _)) => match serde_json::from_slice::<MemberRecord>(&data) {
                Ok(record) => {
                    referenced.insert(record.taskset.digest);
                }
                Err(_) => return Ok(0),
            },
            Err(zookeeper_client::Error::NoNode) => {}
            Err(error) => return Err(zk_error("reading a member", error)),
        }
    }
    let names = deadline(
        "listing task sets",
        client.list_children(&inner.paths.tasksets()),
    )
    .await?;
    let mut chunks = Vec::new();
    for name in names {
        let path = format!("{}/{name}", inner.paths.tasksets());
        if let Some(stat) = deadline("reading a task set", client.check_stat(&path)).await? {
            chunks.push((name, stat.ctime));
        }
    }
    let doomed = unreferenced_chunks(
        &chunks,
        &referenced,
        wall_clock().timestamp_millis(),
        TASKSET_GC_AGE,
    );
    let mut deleted = 0;
    for name in doomed {
        let path = format!("{}/{name}", inner.paths.tasksets());
        match timed("deleting a task set", client.delete(&path, None)).await? {
            Ok(()) => deleted += 1,
            Err(zookeeper_client::Error::NoNode) => {}
            Err(error) => return Err(zk_error("deleting a task set", error)),
        }
    }
    Ok(deleted)
}

/// Of the task-set chunks `(name, ctime ms)`, named `<digest>-<index>`, those whose digest is
/// not in `referenced` and that are at least `min_age` old at `now_ms`.
fn unreferenced_chunks(
    chunks: &[(String, i64)],
    referenced: &HashSet<String>,
    now_ms: i64,
    min_age: Duration,
) -> Vec<String> {
    chunks
        .iter()
        .filter(|(name, ctime)| {
            let digest = name.rsplit_once('-').map_or(name.as_str(), |(d, _)| d);
            !referenced.contains(digest) && now_ms - ctime >= min_age.as_millis() as i64
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// Writes `clock` to read ZooKeeper's time from its mtime.
async fn probe_clock(inner: &Inner, session: &Session) {
    let path = inner.paths.clock();
    let data = inner.settings.node_id.as_bytes();
    let sent = wall_clock();
    let stat = match timed(
        "probing the clock",
        session.client.set_data(&path, data, None),
    )
    .await
    {
        Ok(Ok(stat)) => stat,
        Ok(Err(zookeeper_client::Error::NoNode)) => {
            let create = session.client.create(&path, data, &persistent());
            match timed("probing the clock", create).await {
                Ok(Ok((stat, _))) => stat,
                _ => return,
            }
        }
        _ => return,
    };
    inner.measure_skew(sent, wall_clock(), &stat);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_strings_split_into_hosts_and_chroot() {
        assert_eq!(
            split_connect("127.0.0.1:2181").unwrap(),
            ("127.0.0.1:2181".into(), "".into())
        );
        assert_eq!(
            split_connect("a:1,b:2/apps/cron/").unwrap(),
            ("a:1,b:2".into(), "/apps/cron".into())
        );
        let error = split_connect("zk1").unwrap_err();
        assert!(error.contains("has no port"), "{error}");
        let error = split_connect("zk1:99999").unwrap_err();
        assert!(error.contains("port from 1 to 65535"), "{error}");
        let error = split_connect("/chroot").unwrap_err();
        assert!(error.contains("names no ZooKeeper server"), "{error}");
    }

    #[test]
    fn connect_strings_zookeeper_would_refuse_are_refused_with_the_rule() {
        for (connect, expected) in [
            (
                "zk1:0",
                "`zk1:0` in `zk1:0` is not HOST:PORT with a port from 1 to 65535",
            ),
            (
                "a:1,b:0/x",
                "`b:0` in `a:1,b:0/x` is not HOST:PORT with a port from 1 to 65535",
            ),
            (
                "zk1:2181/apps/../x",
                "the chroot `/apps/../x` in `zk1:2181/apps/../x` has a `..` element",
            ),
            ("zk1:2181/./x", "has a `.` element"),
            ("zk1:2181/a//b", "has an empty path element"),
            (
                "zk1:2181/zookeeper",
                "is under /zookeeper, which ZooKeeper reserves for itself",
            ),
            ("zk1:2181/zookeeper/quota", "is under /zookeeper"),
            ("zk1:2181/a\u{1}b", "contains the character '\\u{1}'"),
        ] {
            let error = split_connect(connect).unwrap_err();
            assert!(error.contains(expected), "{connect}: {error}");
        }
        // Near misses are fine.
        split_connect("zk1:65535/zookeepers/x").unwrap();
        split_connect("zk1:1/a.b/..c").unwrap();
    }

    #[test]
    fn session_timeouts_beyond_zookeepers_32_bit_milliseconds_are_refused() {
        assert_eq!(session_timeout_problem(Duration::from_secs(10)), None);
        assert_eq!(session_timeout_problem(MAX_SESSION_TIMEOUT), None);
        let (message, _) =
            session_timeout_problem(MAX_SESSION_TIMEOUT + Duration::from_millis(1)).unwrap();
        assert!(
            message.contains("must be from 1s to 24days 20h 31m 23s 647ms"),
            "{message}"
        );
        assert!(session_timeout_problem(Duration::from_millis(999)).is_some());
    }

    #[test]
    fn member_records_keep_64_bit_seeds_exact_and_ignore_unknown_fields() {
        let json = r#"{"format":1,"id":"n1","release":"1.2.3","seed":"ffffffffffffffff",
            "host":"h","pid":1,"started_at":"2026-01-01T00:00:00Z","labels":{},
            "taskset":{"digest":"d","chunks":1,"count":0},"from_the_future":true}"#;
        let record: MemberRecord = serde_json::from_str(json).unwrap();
        assert_eq!(u64::from_str_radix(&record.seed, 16).unwrap(), u64::MAX);
    }

    #[test]
    fn an_unparsable_version_req_from_a_newer_release_matches_nothing() {
        let mut tasks = BTreeMap::new();
        tasks.insert(
            "t".to_string(),
            TaskSetEntry {
                digest: "d".into(),
                version_req: Some("~~>2 (future syntax)".into()),
            },
        );
        let set = decode_taskset(&TaskSetRecord { format: 1, tasks });
        let req = set["t"].version_req.as_ref().unwrap();
        assert!(!req.matches(&Version::parse("99.0.0").unwrap()));
    }

    #[test]
    fn the_clock_offset_is_the_smallest_one_the_round_trip_allows() {
        let sent = DateTime::from_timestamp_millis(1_000_000).unwrap();
        let answered = DateTime::from_timestamp_millis(1_000_010).unwrap();
        // The server stamped the write about 2 s before we sent and got the answer: we are at
        // least 1,995 ms ahead.
        assert_eq!(clock_offset_ms(sent, answered, 998_005), Some(1_995));
        assert_eq!(clock_offset_ms(sent, answered, 1_000_005), Some(0));
        assert_eq!(clock_offset_ms(sent, answered, 1_003_005), Some(-2_995));
        // A probe answered 3 s late proves nothing about a clock that agrees with the server...
        let slow = DateTime::from_timestamp_millis(1_003_000).unwrap();
        assert_eq!(clock_offset_ms(sent, slow, 1_000_500), Some(0));
        // ...but a stamp outside the round trip still shows the offset it proves.
        assert_eq!(clock_offset_ms(sent, slow, 996_000), Some(4_000));
        assert_eq!(clock_offset_ms(sent, slow, 1_005_000), Some(-2_000));
        // No stamp, or a local clock that went backwards mid-call: no estimate.
        assert_eq!(clock_offset_ms(sent, answered, 0), None);
        assert_eq!(clock_offset_ms(answered, sent, 1_000_005), None);
    }

    #[test]
    fn only_old_task_sets_that_no_member_references_are_collected() {
        let hour = 3_600_000;
        let now = 10 * hour;
        let chunks: Vec<(String, i64)> = [
            ("inuse-0", 0),
            ("inuse-1", 0),
            ("old-0", now - 2 * hour),
            ("old-1", now - hour),
            ("fresh-0", now - hour + 1),
        ]
        .iter()
        .map(|(n, c)| (n.to_string(), *c))
        .collect();
        let referenced: HashSet<String> = ["inuse".to_string()].into();
        assert_eq!(
            unreferenced_chunks(&chunks, &referenced, now, Duration::from_secs(3600)),
            vec!["old-0".to_string(), "old-1".to_string()]
        );
    }

    #[test]
    fn skew_is_fine_then_warned_then_refused_beyond_max_clock_skew() {
        let max = Some(Duration::from_secs(2));
        assert_eq!(skew_verdict(900, max), SkewVerdict::Fine);
        assert_eq!(skew_verdict(-1_500, max), SkewVerdict::Warn);
        assert_eq!(skew_verdict(2_000, max), SkewVerdict::Warn);
        assert_eq!(skew_verdict(-2_001, max), SkewVerdict::Refuse);
        // Without max_clock_skew a large skew is only a warning.
        assert_eq!(skew_verdict(60_000, None), SkewVerdict::Warn);
    }

    #[test]
    fn node_ids_and_cluster_names_must_fit_in_a_path() {
        assert!(validate_name("node id", "web-1.example.com").is_ok());
        let error = validate_name("node id", "a/b").unwrap_err();
        assert!(
            error.contains("cannot be part of a ZooKeeper path"),
            "{error}"
        );
        assert!(validate_name("cluster", "..").is_err());
        assert!(validate_name("cluster", "").is_err());
    }
}
