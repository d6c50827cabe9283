//! A real ZooKeeper for the cluster tests: Debian's `zookeeper` package (3.8) run as `java ...
//! ZooKeeperServerMain zoo.cfg` on a free port of 127.0.0.1, with its data and log in a temp dir;
//! and [`ZkEnsemble`], three such servers run as a quorum (`QuorumPeerMain`) for the ensemble
//! fault tests.
//!
//! Most tests use [`shared`]: one server per test binary, started on first use and stopped when
//! the binary exits, with a chroot of its own per test ([`ZkServer::chroot_connect`]). A test that
//! stops, restarts or cuts off its server starts one of its own with [`ZkServer::start`] (or
//! [`TestServer::own`]).
//!
//! The tests never skip: without ZooKeeper they fail, saying how to install it. Every JVM this
//! module starts is killed when its [`ZkServer`] is dropped (the shared one when the binary
//! exits), and also when the test process dies without unwinding (it is started with a
//! parent-death signal; see [`spawn_tied_to_process`]), so no orphaned `ZooKeeperServerMain`
//! outlives `cargo test`.

use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::ops::Deref;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// The jar of Debian's `zookeeper` package (via `libzookeeper-java`). Its manifest's Class-Path
/// names every dependency, so it alone is the class path.
pub const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";

/// slf4j's stderr binding, from `libslf4j-java`, which the package depends on. Without a binding
/// the server logs nothing, and a failed start would be a mystery.
const SLF4J_SIMPLE_JAR: &str = "/usr/share/java/slf4j-simple.jar";

/// How to get ZooKeeper, for failure messages.
pub const INSTALL_HINT: &str = "install Debian's ZooKeeper package (it pulls a Java runtime): \
     `apt-get update && apt-get install -y zookeeper` (as root). The cluster tests need a real \
     ZooKeeper and never skip; .ci/run installs it when missing";

/// The server's tick. Session expiry is checked once per tick, so a dead client's ephemeral
/// znodes vanish at most about two ticks after its session timeout; 200 ms keeps that small.
pub const TICK: Duration = Duration::from_millis(200);

/// How long a JVM may take to start serving (it usually takes 1-3 s).
const START_LIMIT: Duration = Duration::from_secs(60);

/// Counter for unique chroots, across all servers of the test process.
static CHROOTS: AtomicU32 = AtomicU32::new(0);

/// The test binary's shared server, once started.
static SHARED: OnceLock<ZkServer> = OnceLock::new();

/// The test binary's shared server: started on first use, stopped (and its temp dir removed)
/// when the binary exits. Tests share it through chroots of their own
/// ([`ZkServer::chroot_connect`]); a test that stops or restarts its server starts one of its
/// own instead ([`ZkServer::start`]).
pub fn shared() -> &'static ZkServer {
    SHARED.get_or_init(|| {
        let server = ZkServer::start();
        // SAFETY: `stop_shared` is a plain function that neither panics nor unwinds.
        let registered = unsafe { nix::libc::atexit(stop_shared) };
        assert_eq!(
            registered, 0,
            "registering the shared server's stop at exit"
        );
        server
    })
}

/// Kills the shared server, reaps it and removes its temp dir; run by the C library when the
/// test binary exits (statics are never dropped). Must not panic: it runs outside Rust's main.
extern "C" fn stop_shared() {
    let Some(server) = SHARED.get() else {
        return;
    };
    if let Some(pid) = server.pid() {
        let pid = Pid::from_raw(pid as i32);
        let _ = killpg(pid, Signal::SIGKILL);
        let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(pid, None);
    }
    let _ = fs::remove_dir_all(server.dir());
}

/// A test's ZooKeeper: the binary's [`shared`] server, a server of the test's own that it may
/// stop and start again, or an ensemble of its own. Dereferences to the [`ZkServer`] (not for
/// an ensemble: see [`TestServer::ensemble`]); chroots, clients and failure descriptions work
/// for all three.
pub enum TestServer {
    Shared(&'static ZkServer),
    Own(ZkServer),
    Ensemble(ZkEnsemble),
}

impl TestServer {
    /// The shared server.
    pub fn shared() -> TestServer {
        TestServer::Shared(shared())
    }

    /// A server of the test's own, which it may stop and start again.
    pub fn own() -> TestServer {
        TestServer::Own(ZkServer::start())
    }

    /// A three-server ensemble of the test's own.
    pub fn start_ensemble() -> TestServer {
        TestServer::Ensemble(ZkEnsemble::start())
    }

    /// The server, to stop or restart: only a server of the test's own.
    pub fn own_mut(&mut self) -> &mut ZkServer {
        match self {
            TestServer::Own(server) => server,
            _ => {
                panic!("only a test's own server may be stopped: start the test on TestServer::own")
            }
        }
    }

    /// The ensemble of a test started on [`TestServer::start_ensemble`].
    pub fn ensemble(&self) -> &ZkEnsemble {
        match self {
            TestServer::Ensemble(ensemble) => ensemble,
            _ => panic!("this test runs on one server, not an ensemble"),
        }
    }

    pub fn ensemble_mut(&mut self) -> &mut ZkEnsemble {
        match self {
            TestServer::Ensemble(ensemble) => ensemble,
            _ => panic!("this test runs on one server, not an ensemble"),
        }
    }

    /// A connect string with a chroot of its own (every server of an ensemble).
    pub fn chroot_connect(&self) -> String {
        match self {
            TestServer::Ensemble(ensemble) => {
                format!("{}{}", ensemble.connect_string(), ensemble.new_chroot())
            }
            _ => self.deref().chroot_connect(),
        }
    }

    /// Runs `work` with a fresh client session connected to the root (no chroot).
    pub fn with_client<T>(&self, work: impl AsyncFnOnce(&zookeeper_client::Client) -> T) -> T {
        match self {
            TestServer::Ensemble(ensemble) => ensemble.with_client(work),
            _ => self.deref().with_client(work),
        }
    }

    /// For failure messages: the state of each server and the last `lines` lines of its log
    /// (no stack frames).
    pub fn describe(&self, lines: usize) -> String {
        match self {
            TestServer::Ensemble(ensemble) => ensemble.describe(lines),
            _ => {
                let server = self.deref();
                let log = server.log_tail(20 * lines);
                let log: Vec<&str> = log.lines().filter(|l| !l.starts_with('\t')).collect();
                format!(
                    "--- ZooKeeper ({}), last lines (no stack frames) of {}/zookeeper.log:\n{}\n",
                    server.describe_state(),
                    server.dir().display(),
                    log[log.len().saturating_sub(lines)..].join("\n")
                )
            }
        }
    }
}

impl Deref for TestServer {
    type Target = ZkServer;

    fn deref(&self) -> &ZkServer {
        match self {
            TestServer::Shared(server) => server,
            TestServer::Own(server) => server,
            TestServer::Ensemble(_) => panic!(
                "an ensemble is three servers, not one: use TestServer::ensemble for its servers"
            ),
        }
    }
}

/// A standalone ZooKeeper server. Killed on drop.
pub struct ZkServer {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
    /// A member of a [`ZkEnsemble`]: run as `QuorumPeerMain`, serving as leader or follower.
    quorum: bool,
}

impl ZkServer {
    /// Starts a server on a free port of 127.0.0.1 and waits until it serves requests.
    ///
    /// Panics, saying how to install it, when ZooKeeper or Java is missing, and with the tail
    /// of the server's log when it does not come up.
    pub fn start() -> ZkServer {
        let java = require_zookeeper_at(Path::new(ZOOKEEPER_JAR));
        // The port is free when we ask, but another process may take it before the JVM binds
        // it; then the server exits at once, and we try another.
        let mut last_failure = String::new();
        for _ in 0..5 {
            let dir = tempfile::Builder::new()
                .prefix("zkcron-zk-")
                .tempdir()
                .expect("temp dir for ZooKeeper");
            fs::create_dir(dir.path().join("data")).unwrap();
            let mut server = ZkServer {
                dir,
                port: free_port(),
                child: None,
                quorum: false,
            };
            server.write_config();
            match server.spawn_and_wait(&java) {
                Ok(()) => return server,
                Err(failure) => {
                    server.kill();
                    let port_taken = server.log_tail(200).contains("Address already in use");
                    last_failure = failure;
                    if !port_taken {
                        break;
                    }
                }
            }
        }
        panic!("{last_failure}");
    }

    /// `127.0.0.1:PORT`.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's temp dir (holds `zoo.cfg`, `data/` and `zookeeper.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A connect string with a chroot of its own, `127.0.0.1:PORT/zkcron-test-<n>`, unique in
    /// this test process, so tests sharing a server do not see each other. The chroot znode is
    /// created here (a persistent, empty, world-writable znode), as an operator would before
    /// pointing nodes at it.
    pub fn chroot_connect(&self) -> String {
        let n = CHROOTS.fetch_add(1, Ordering::Relaxed);
        let chroot = format!("/zkcron-test-{n}");
        self.create_persistent(&chroot);
        format!("{}{chroot}", self.connect_string())
    }

    /// Creates a persistent empty znode at `path` (from the root), parents first.
    pub fn create_persistent(&self, path: &str) {
        self.with_client(async |client| {
            let options = zookeeper_client::CreateMode::Persistent
                .with_acls(zookeeper_client::Acls::anyone_all());
            client
                .mkdir(path, &options)
                .await
                .unwrap_or_else(|e| panic!("creating znode {path}: {e}"));
        });
    }

    /// The children of `path` (from the root), sorted; empty when it does not exist.
    pub fn children(&self, path: &str) -> Vec<String> {
        self.with_client(async |client| match client.list_children(path).await {
            Ok(mut children) => {
                children.sort();
                children
            }
            Err(zookeeper_client::Error::NoNode) => Vec::new(),
            Err(e) => panic!("listing the children of {path}: {e}"),
        })
    }

    /// Runs `work` with a fresh client session connected to the server's root (no chroot), on a
    /// throw-away runtime, and closes the session after it.
    pub fn with_client<T>(&self, work: impl AsyncFnOnce(&zookeeper_client::Client) -> T) -> T {
        with_client_at(&self.connect_string(), work)
    }

    /// Kills the server (SIGKILL, as a crash) and waits for it to be gone. Its data dir stays.
    pub fn stop(&mut self) {
        self.kill();
    }

    /// Starts the server again on the same port and data dir, and waits until it serves. Znodes
    /// survive, and so do sessions whose clients reconnect within their timeout.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "start_again: the server is running");
        let java = require_zookeeper_at(Path::new(ZOOKEEPER_JAR));
        if let Err(failure) = self.spawn_and_wait(&java) {
            self.kill();
            panic!("{failure}");
        }
    }

    /// Whether the JVM is running.
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => child.try_wait().unwrap().is_none(),
            None => false,
        }
    }

    /// For failure messages: whether the server runs, was stopped by the test, or died (killed
    /// from outside, or crashed: see its log).
    pub fn describe_state(&self) -> String {
        match &self.child {
            None => "stopped by the test".to_string(),
            Some(child) if super::process_alive(child.id() as i32) => {
                format!("running, pid {}", child.id())
            }
            Some(child) => format!(
                "DIED unexpectedly (pid {}): crashed, or killed by something outside the test",
                child.id()
            ),
        }
    }

    /// The JVM's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The `srvr` four-letter word's answer: version, latency, connections, mode, node count.
    pub fn srvr(&self) -> String {
        self.four_letter_or_panic("srvr")
    }

    /// The `mntr` four-letter word's answer: one `key\tvalue` line per metric
    /// (`zk_znode_count`, `zk_ephemerals_count`, `zk_watch_count`, ...).
    pub fn mntr(&self) -> String {
        self.four_letter_or_panic("mntr")
    }

    /// One metric of `mntr`, e.g. `zk_znode_count`.
    pub fn mntr_value(&self, key: &str) -> Option<u64> {
        self.mntr().lines().find_map(|line| {
            let (k, v) = line.split_once('\t')?;
            if k == key {
                v.trim().parse().ok()
            } else {
                None
            }
        })
    }

    /// Sends a four-letter word and returns the answer.
    pub fn four_letter(&self, word: &str) -> std::io::Result<String> {
        four_letter(self.port, word)
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = fs::read_to_string(self.log_path()).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    fn four_letter_or_panic(&self, word: &str) -> String {
        self.four_letter(word).unwrap_or_else(|e| {
            panic!(
                "ZooKeeper on port {} did not answer `{word}`: {e}\n--- its log:\n{}",
                self.port,
                self.log_tail(40)
            )
        })
    }

    fn log_path(&self) -> PathBuf {
        self.dir().join("zookeeper.log")
    }

    fn write_config(&self) {
        let config = format!(
            "# Written by tests/common/zk.rs\n\
             tickTime={tick}\n\
             dataDir={data}\n\
             clientPort={port}\n\
             clientPortAddress=127.0.0.1\n\
             # Sessions of 1 s to 60 s (the defaults, 2 and 20 ticks, would clamp to 0.4-4 s).\n\
             minSessionTimeout=1000\n\
             maxSessionTimeout=60000\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=*\n\
             # Each write still reaches the OS before the answer, so a killed server keeps it;\n\
             # only an OS crash could lose it. Saves an fsync per write on slow CI disks.\n\
             forceSync=no\n\
             # Test servers are small and short-lived: no periodic purge thread.\n\
             autopurge.purgeInterval=0\n",
            tick = TICK.as_millis(),
            data = self.dir().join("data").display(),
            port = self.port,
        );
        fs::write(self.dir().join("zoo.cfg"), config).unwrap();
    }

    /// The config of server `myid` of an ensemble whose servers have the (peer, election)
    /// ports `peers`, and its `data/myid`.
    fn write_quorum_config(&self, myid: usize, peers: &[(u16, u16)]) {
        let servers: String = peers
            .iter()
            .enumerate()
            .map(|(i, (peer, election))| format!("server.{}=127.0.0.1:{peer}:{election}\n", i + 1))
            .collect();
        let config = format!(
            "# Written by tests/common/zk.rs (an ensemble member)\n\
             tickTime={tick}\n\
             # Followers connect and sync within 5 s; one silent for 2 s is dropped. Generous for\n\
             # a loaded CI machine, short next to the tests' outages.\n\
             initLimit=25\n\
             syncLimit=10\n\
             dataDir={data}\n\
             clientPort={port}\n\
             clientPortAddress=127.0.0.1\n\
             minSessionTimeout=1000\n\
             maxSessionTimeout=60000\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=*\n\
             forceSync=no\n\
             autopurge.purgeInterval=0\n\
             {servers}",
            tick = TICK.as_millis(),
            data = self.dir().join("data").display(),
            port = self.port,
        );
        fs::write(self.dir().join("zoo.cfg"), config).unwrap();
        fs::write(self.dir().join("data").join("myid"), format!("{myid}\n")).unwrap();
    }

    /// Starts the JVM (appending to the log) and waits until it serves, or says why not.
    fn spawn_and_wait(&mut self, java: &Path) -> Result<(), String> {
        self.spawn(java);
        self.wait_serving()
    }

    /// Starts the JVM, appending to the log; does not wait.
    fn spawn(&mut self, java: &Path) {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        let mut command = Command::new(java);
        command
            // A small heap and the quick JIT tier: the server is tiny and short-lived, and CI
            // runs several at once on two cores.
            // No hsperfdata file in /tmp: a killed JVM would leave it behind.
            .args([
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-XX:-UsePerfData",
            ])
            .arg("-cp")
            .arg(class_path())
            .arg(if self.quorum {
                "org.apache.zookeeper.server.quorum.QuorumPeerMain"
            } else {
                "org.apache.zookeeper.server.ZooKeeperServerMain"
            })
            .arg(self.dir().join("zoo.cfg"))
            .current_dir(self.dir())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let child = spawn_tied_to_process(command)
            .unwrap_or_else(|e| panic!("starting {}: {e}; {INSTALL_HINT}", java.display()));
        self.child = Some(child);
    }

    /// Waits until the started JVM serves requests (standalone, or as leader or follower of an
    /// ensemble with a quorum), or says why not.
    #[allow(clippy::disallowed_methods)] // a real deadline for a real process
    fn wait_serving(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_LIMIT;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                return Err(format!(
                    "ZooKeeper exited during start-up ({status}) on port {}\n--- its log ({}):\n{}",
                    self.port,
                    self.log_path().display(),
                    self.log_tail(40)
                ));
            }
            // `ruok` answers `imok` as soon as the port listens, even before the database is
            // loaded; `srvr` names the mode only once the server serves requests.
            let ruok = four_letter(self.port, "ruok").unwrap_or_default();
            let serving = |srvr: String| {
                if self.quorum {
                    srvr.contains("Mode: leader") || srvr.contains("Mode: follower")
                } else {
                    srvr.contains("Mode: standalone")
                }
            };
            if ruok == "imok" && four_letter(self.port, "srvr").is_ok_and(serving) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "ZooKeeper did not serve on port {} within {START_LIMIT:?} (last `ruok` \
                     answer: {ruok:?})\n--- its log ({}):\n{}",
                    self.port,
                    self.log_path().display(),
                    self.log_tail(40)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // The JVM leads its own process group; kill the whole group.
            let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ZkServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A three-server ZooKeeper ensemble on 127.0.0.1: Debian's package run as `QuorumPeerMain`, each
/// server with a data dir and `myid` in a temp dir of its own and its own client, peer and
/// election ports (`server.N=127.0.0.1:PEER:ELECTION`). Every server is killed and every temp dir
/// removed when the ensemble is dropped (each server is a [`ZkServer`]), also on panic; the JVMs
/// die with the test process even without unwinding.
pub struct ZkEnsemble {
    servers: Vec<ZkServer>,
}

impl ZkEnsemble {
    /// The number of servers: a quorum is two.
    pub const SIZE: usize = 3;

    /// Starts three servers and waits until each serves (as leader or follower).
    ///
    /// Panics, saying how to install it, when ZooKeeper or Java is missing, and with the tail of
    /// each server's log when the ensemble does not come up.
    pub fn start() -> ZkEnsemble {
        let java = require_zookeeper_at(Path::new(ZOOKEEPER_JAR));
        let mut last_failure = String::new();
        // A port free when we ask may be taken before a JVM binds it: then try other ports.
        for _ in 0..3 {
            let mut ports: Vec<u16> = Vec::new();
            while ports.len() < 3 * Self::SIZE {
                let port = free_port();
                if !ports.contains(&port) {
                    ports.push(port);
                }
            }
            let peers: Vec<(u16, u16)> = (0..Self::SIZE)
                .map(|i| (ports[Self::SIZE + 2 * i], ports[Self::SIZE + 2 * i + 1]))
                .collect();
            let mut servers: Vec<ZkServer> = (0..Self::SIZE)
                .map(|i| {
                    let dir = tempfile::Builder::new()
                        .prefix("zkcron-zk-")
                        .tempdir()
                        .expect("temp dir for ZooKeeper");
                    fs::create_dir(dir.path().join("data")).unwrap();
                    let server = ZkServer {
                        dir,
                        port: ports[i],
                        child: None,
                        quorum: true,
                    };
                    server.write_quorum_config(i + 1, &peers);
                    server
                })
                .collect();
            // All at once: none serves before a quorum has elected a leader.
            for server in &mut servers {
                server.spawn(&java);
            }
            let failures: Vec<String> = servers
                .iter_mut()
                .enumerate()
                .filter_map(|(i, server)| {
                    server
                        .wait_serving()
                        .err()
                        .map(|failure| format!("server {}: {failure}", i + 1))
                })
                .collect();
            if failures.is_empty() {
                return ZkEnsemble { servers };
            }
            let port_taken = servers
                .iter()
                .any(|s| s.log_tail(200).contains("Address already in use"));
            last_failure = failures.join("\n");
            drop(servers);
            if !port_taken {
                break;
            }
        }
        panic!("the ZooKeeper ensemble did not come up: {last_failure}");
    }

    /// `127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`: every server, as a node's `--zookeeper`.
    pub fn connect_string(&self) -> String {
        self.servers
            .iter()
            .map(ZkServer::connect_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Creates a chroot of its own (`/zkcron-test-<n>`, unique in this test process) and returns
    /// its path; append it to a connect string.
    pub fn new_chroot(&self) -> String {
        let n = CHROOTS.fetch_add(1, Ordering::Relaxed);
        let chroot = format!("/zkcron-test-{n}");
        self.with_client(async |client| {
            let options = zookeeper_client::CreateMode::Persistent
                .with_acls(zookeeper_client::Acls::anyone_all());
            client
                .mkdir(&chroot, &options)
                .await
                .unwrap_or_else(|e| panic!("creating znode {chroot}: {e}"));
        });
        chroot
    }

    /// Server `i` (0-based; its `myid` is `i + 1`).
    pub fn server(&self, i: usize) -> &ZkServer {
        &self.servers[i]
    }

    /// Kills server `i` (SIGKILL, as a crash). Its data dir stays.
    pub fn stop(&mut self, i: usize) {
        self.servers[i].stop();
    }

    /// Starts server `i` again on its ports and data, and waits until it serves: it needs a
    /// quorum, so at least one other server must be running.
    pub fn start_again(&mut self, i: usize) {
        self.servers[i].start_again();
    }

    /// Which running server holds the connection of the session `session_hex` (the session id
    /// in lowercase hex without `0x`, as zkcron logs it), from each server's `cons` answer.
    pub fn server_of_session(&self, session_hex: &str) -> Option<usize> {
        let needle = format!("sid=0x{session_hex},");
        (0..Self::SIZE).find(|&i| {
            self.servers[i].child.is_some()
                && self.servers[i]
                    .four_letter("cons")
                    .is_ok_and(|cons| cons.contains(&needle))
        })
    }

    /// Runs `work` with a fresh client session connected to any running server (no chroot).
    pub fn with_client<T>(&self, work: impl AsyncFnOnce(&zookeeper_client::Client) -> T) -> T {
        with_client_at(&self.connect_string(), work)
    }

    /// For failure messages: each server's state and the last `lines` lines of its log (no
    /// stack frames).
    pub fn describe(&self, lines: usize) -> String {
        let mut out = String::new();
        for (i, server) in self.servers.iter().enumerate() {
            let log = server.log_tail(20 * lines);
            let log: Vec<&str> = log.lines().filter(|l| !l.starts_with('\t')).collect();
            out.push_str(&format!(
                "--- ZooKeeper server {} (port {}, {}), last lines of {}/zookeeper.log:\n{}\n",
                i + 1,
                server.port,
                server.describe_state(),
                server.dir().display(),
                log[log.len().saturating_sub(lines)..].join("\n")
            ));
        }
        out
    }
}

/// Checks that ZooKeeper (its jar at `jar`) and `java` are installed; returns the path of
/// `java`. Panics with [`INSTALL_HINT`] otherwise.
pub fn require_zookeeper_at(jar: &Path) -> PathBuf {
    let java = find_in_path("java");
    let mut missing = Vec::new();
    if !jar.exists() {
        missing.push(format!("{} does not exist", jar.display()));
    }
    if java.is_none() {
        missing.push("`java` is not on PATH".to_string());
    }
    if !missing.is_empty() {
        panic!(
            "ZooKeeper is not installed: {}; {INSTALL_HINT}",
            missing.join(" and ")
        );
    }
    java.unwrap()
}

fn class_path() -> String {
    let mut jars = vec![ZOOKEEPER_JAR];
    // Netty's jars that the package's manifest does not name but its Netty server (the one
    // that serves TLS, see [`ZkServer::start_tls`]) needs; `libnetty-java` ships them.
    jars.extend(
        [SLF4J_SIMPLE_JAR]
            .into_iter()
            .chain(NETTY_JARS_FOR_TLS)
            .filter(|jar| Path::new(jar).exists()),
    );
    jars.join(":")
}

fn find_in_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| {
            fs::metadata(candidate).is_ok_and(|m| {
                m.is_file()
                    && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
            })
        })
}

/// Runs `work` with a fresh client session (10 s timeout) connected to `connect` (which may
/// name a chroot), on a throw-away runtime, and closes the session after it.
pub fn with_client_at<T>(
    connect: &str,
    work: impl AsyncFnOnce(&zookeeper_client::Client) -> T,
) -> T {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = connect_client(connect, Duration::from_secs(10)).await;
        let result = work(&client).await;
        // Close the session now rather than leave it to expire on the server: the close request
        // goes out from the client's background task once the last handle is dropped.
        let mut state = client.state_watcher();
        drop(client);
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            while !state.changed().await.is_terminated() {}
        })
        .await;
        result
    })
}

/// Connects a client to `connect` with the given session timeout; panics after 30 s.
pub async fn connect_client(connect: &str, session_timeout: Duration) -> zookeeper_client::Client {
    tokio::time::timeout(
        Duration::from_secs(30),
        zookeeper_client::Client::connector()
            .with_session_timeout(session_timeout)
            .connect(connect),
    )
    .await
    .unwrap_or_else(|_| panic!("connecting to ZooKeeper at {connect}: timed out"))
    .unwrap_or_else(|e| panic!("connecting to ZooKeeper at {connect}: {e}"))
}

/// A port of 127.0.0.1 that nothing listens on right now, below the kernel's ephemeral range.
///
/// Not a port the kernel hands out (binding port 0): while a server is stopped, a client's
/// outgoing connection could get that very port as its source port (even connect to itself,
/// TCP's simultaneous open), and the server could not bind it again on restart.
pub fn free_port() -> u16 {
    let ephemeral_low = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000, ephemeral_low.max(10_100));
    for _ in 0..1000 {
        let port = rand::random_range(low..high);
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return port;
        }
    }
    panic!("no free port of 127.0.0.1 in {low}..{high}");
}

/// Sends a four-letter word to the server on `port` and returns its whole answer.
pub fn four_letter(port: u16, word: &str) -> std::io::Result<String> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(word.as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

/// Spawns `command` as the leader of a new process group, with SIGKILL as its parent-death
/// signal, so it dies with the test process even when that one is killed without unwinding.
///
/// The parent-death signal fires when the *thread* that forked the child exits, and every test
/// runs on a thread of its own that ends with the test; so all such children are forked by one
/// thread that lives as long as the process.
pub fn spawn_tied_to_process(mut command: Command) -> std::io::Result<Child> {
    type Request = (Command, mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: OnceLock<mpsc::Sender<Request>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (requests, incoming) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("spawner".into())
            .spawn(move || {
                for (mut command, reply) in incoming {
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("spawner thread");
        requests
    });
    let parent = std::process::id();
    command.process_group(0);
    // SAFETY: between fork and exec, only async-signal-safe calls (prctl, getppid, _exit).
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            // The parent may have died before the signal was armed.
            if nix::unistd::getppid().as_raw() as u32 != parent {
                nix::libc::_exit(1);
            }
            Ok(())
        });
    }
    let (reply, answer) = mpsc::channel();
    spawner
        .send((command, reply))
        .expect("spawner thread alive");
    answer.recv().expect("spawner thread answers")
}

/// A cluster node as the end-to-end tests start it, the one node spawner of the tests: `zkcron
/// run` on `connect` as `id` in `cluster`, with a home dir of its own (`<home>/zkcron.toml`,
/// `state/`, `log.txt`) and the jobs dir `jobs`.
///
/// - `release`: given as `--node-version` when set; otherwise the binary's own.
/// - `config`: TOML added to the node config (labels go in its `[node]` section); the session
///   timeout is `session_timeout` and the HTTP endpoint is off (every node would try the
///   default port otherwise).
/// - `log_filter`: the `ZKCRON_LOG` filter; `log`: the log's file name in `home`.
/// - The binary: `ZKCRON_TEST_BIN` runs the nodes from another build; [`ClusterNode::spawn_with`]
///   runs a wrapper such as `faketime`.
///
/// Build one with [`ClusterNode::new`] (or `common::cluster::Cluster::node`) and struct update
/// syntax: `ClusterNode { release: Some("1.0.0".into()), ..cluster.node("node-a") }`.
pub struct ClusterNode {
    pub home: PathBuf,
    pub jobs: PathBuf,
    pub connect: String,
    pub cluster: String,
    pub id: String,
    pub release: Option<String>,
    pub session_timeout: Duration,
    pub config: String,
    pub log_filter: String,
    /// The log's file name in `home` (appended to): `log.txt`.
    pub log: String,
}

impl ClusterNode {
    /// Node `id` in cluster `default` on `connect`, of the binary's release, with a 3 s session,
    /// no added config and `info` logs.
    pub fn new(home: &Path, jobs: &Path, connect: &str, id: &str) -> ClusterNode {
        ClusterNode {
            home: home.to_path_buf(),
            jobs: jobs.to_path_buf(),
            connect: connect.to_string(),
            cluster: "default".to_string(),
            id: id.to_string(),
            release: None,
            session_timeout: Duration::from_secs(3),
            config: String::new(),
            log_filter: "info".to_string(),
            log: "log.txt".to_string(),
        }
    }

    /// The binary the nodes run: `ZKCRON_TEST_BIN` when set, else this build's `zkcron`.
    pub fn binary() -> Command {
        match std::env::var_os("ZKCRON_TEST_BIN") {
            Some(binary) => Command::new(binary),
            None => super::zkcron(),
        }
    }

    /// `faketime` (Debian's package) running [`ClusterNode::binary`] with its wall clock
    /// `seconds` ahead, for [`ClusterNode::spawn_with`]; the monotonic clock is left alone so
    /// that timers still work. Fails saying how to install faketime when it is missing.
    pub fn binary_with_clock_ahead(seconds: u32) -> Command {
        let found = Command::new("faketime").arg("--help").output().is_ok();
        assert!(
            found,
            "this test needs faketime to skew a node's clock: apt-get install faketime"
        );
        let binary = ClusterNode::binary();
        let mut command = Command::new("faketime");
        command
            .args(["-m", "--exclude-monotonic", "-f", &format!("+{seconds}s")])
            .arg(binary.get_program());
        command
    }

    /// `faketime` running [`ClusterNode::binary`] with its wall clock starting at `start` (UTC,
    /// `2026-10-25 00:59:55`) and running at the real pace; the monotonic clock is left alone.
    /// The node needs a `max_clock_skew` that allows for the distance to ZooKeeper's clock.
    pub fn binary_with_clock_at(start: &str) -> Command {
        let found = Command::new("faketime").arg("--help").output().is_ok();
        assert!(
            found,
            "this test needs faketime to set a node's clock: apt-get install faketime"
        );
        let binary = ClusterNode::binary();
        let mut command = Command::new("faketime");
        command
            .args(["-m", "--exclude-monotonic", "-f", &format!("@{start}")])
            .arg(binary.get_program())
            .env("TZ", "UTC");
        command
    }

    /// Spawns the node, tied to this process; does not wait for it to register.
    pub fn spawn(&self) -> super::DaemonProcess {
        self.spawn_with(ClusterNode::binary())
    }

    /// The node's `zkcron.toml`: `config` with the session timeout added to its
    /// `[coordination.zookeeper]` section (or in one of its own), and `[http] listen = ""`
    /// unless `config` has an `[http]` section.
    fn config_text(&self) -> String {
        let header = "[coordination.zookeeper]\n";
        let timeout = format!(
            "session_timeout = \"{}ms\"\n",
            self.session_timeout.as_millis()
        );
        let mut text = if self.config.contains(header) {
            self.config
                .replacen(header, &format!("{header}{timeout}"), 1)
        } else {
            format!("{}\n{header}{timeout}", self.config)
        };
        if !self.config.contains("[http]") {
            text.push_str("\n[http]\nlisten = \"\"\n");
        }
        text
    }

    /// Spawns the node with `command` as the program (the zkcron binary, or a wrapper around
    /// it such as `faketime`); the arguments of `zkcron run` are added to it.
    pub fn spawn_with(&self, mut command: Command) -> super::DaemonProcess {
        use std::os::unix::fs::PermissionsExt;
        fs::create_dir_all(self.home.join("state")).unwrap();
        // zkcron refuses a config that others can write, or in a dir they can: not the umask's
        // say.
        fs::set_permissions(&self.home, fs::Permissions::from_mode(0o755)).unwrap();
        let config = self.home.join("zkcron.toml");
        fs::write(&config, self.config_text()).unwrap();
        fs::set_permissions(&config, fs::Permissions::from_mode(0o644)).unwrap();
        let log_path = self.home.join(&self.log);
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap();
        command
            .arg("run")
            .arg("--config")
            .arg(&config)
            .arg("--jobs-dir")
            .arg(&self.jobs)
            .arg("--state-dir")
            .arg(self.home.join("state"))
            .args(["--zookeeper", &self.connect, "--cluster", &self.cluster])
            .args(["--node-id", &self.id]);
        if let Some(release) = &self.release {
            command.args(["--node-version", release]);
        }
        command
            .env("ZKCRON_LOG", &self.log_filter)
            .env_remove("JOURNAL_STREAM")
            .env_remove("NOTIFY_SOCKET")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        let child = spawn_tied_to_process(command).expect("zkcron starts");
        super::DaemonProcess { child, log_path }
    }
}

// ---- A ZooKeeper serving TLS (tests/tls.rs) ----

/// The jars of `libnetty-java` (a dependency of Debian's `zookeeper`) that its Netty server needs
/// besides those the package's manifest names.
const NETTY_JARS_FOR_TLS: [&str; 3] = [
    "/usr/share/java/netty-codec.jar",
    "/usr/share/java/netty-resolver.jar",
    "/usr/share/java/netty-transport-native-unix-common.jar",
];

/// The password of the test server's PKCS#12 key store (the store lives in a temp dir).
const KEY_STORE_PASSWORD: &str = "zkcron-test";

/// Certificates for a TLS test: a CA, the server's certificate for 127.0.0.1 signed by it (in a
/// PKCS#12 key store for ZooKeeper), a client certificate signed by it, and a second CA that
/// signed nothing, all made by `openssl` (which Debian's Java runtime pulls in through
/// ca-certificates) in a temp dir.
pub struct TestPki {
    dir: tempfile::TempDir,
}

impl TestPki {
    pub fn new() -> TestPki {
        let dir = tempfile::Builder::new()
            .prefix("zkcron-pki-")
            .tempdir()
            .unwrap();
        let pki = TestPki { dir };
        pki.make_ca("ca");
        pki.make_ca("other-ca");
        pki.make_signed(
            "server",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        );
        pki.make_signed("client", "extendedKeyUsage=clientAuth\n");
        pki.openssl(&[
            "pkcs12",
            "-export",
            "-in",
            "server.pem",
            "-inkey",
            "server.key",
            "-certfile",
            "ca.pem",
            "-name",
            "server",
            "-out",
            "server.p12",
            "-passout",
            &format!("pass:{KEY_STORE_PASSWORD}"),
        ]);
        for key in ["ca.key", "other-ca.key", "server.key", "client.key"] {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(pki.path(key), fs::Permissions::from_mode(0o600)).unwrap();
        }
        pki
    }

    /// A file of the PKI: `ca.pem`, `other-ca.pem`, `client.pem`, `client.key`, ...
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn make_ca(&self, name: &str) {
        self.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-subj",
            &format!("/CN=zkcron test {name}"),
            "-addext",
            "basicConstraints=critical,CA:true",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
    }

    fn make_signed(&self, name: &str, extensions: &str) {
        fs::write(
            self.path(&format!("{name}.ext")),
            format!("basicConstraints=CA:false\nkeyUsage=digitalSignature\n{extensions}"),
        )
        .unwrap();
        self.openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN=zkcron test {name}"),
        ]);
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-set_serial",
            &rand::random_range(1..u32::MAX).to_string(),
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
            "-out",
            &format!("{name}.pem"),
        ]);
    }

    fn openssl(&self, args: &[&str]) {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap_or_else(|e| {
                panic!("running openssl: {e}; install it: `apt-get install -y openssl`")
            });
        assert!(
            output.status.success(),
            "openssl {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl ZkServer {
    /// Starts a standalone server that serves TLS on a second port of 127.0.0.1 (see
    /// [`ZkServer::secure_connect_string`]) with the certificate of `pki`, through ZooKeeper's
    /// Netty server; the plain port stays for the harness's own checks. `client_auth` is
    /// ZooKeeper's `ssl.clientAuth`: `need` (a client certificate signed by the CA is
    /// required), `want` or `none`.
    ///
    /// It starts as a plain server, then again with the TLS settings added to its `zoo.cfg`.
    pub fn start_tls(pki: &TestPki, client_auth: &str) -> ZkServer {
        let mut server = ZkServer::start();
        server.stop();
        let config = format!(
            "# TLS (tests/common/zk.rs, start_tls)\n\
             serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
             secureClientPort={port}\n\
             secureClientPortAddress=127.0.0.1\n\
             ssl.keyStore.location={key_store}\n\
             ssl.keyStore.password={KEY_STORE_PASSWORD}\n\
             ssl.keyStore.type=PKCS12\n\
             ssl.trustStore.location={trust_store}\n\
             ssl.trustStore.type=PEM\n\
             ssl.clientAuth={client_auth}\n",
            port = free_port(),
            key_store = pki.path("server.p12").display(),
            trust_store = pki.path("ca.pem").display(),
        );
        let mut zoo_cfg = fs::OpenOptions::new()
            .append(true)
            .open(server.dir().join("zoo.cfg"))
            .unwrap();
        zoo_cfg.write_all(config.as_bytes()).unwrap();
        server.start_again();
        server
    }

    /// `127.0.0.1:SECURE_PORT` of a server from [`ZkServer::start_tls`].
    pub fn secure_connect_string(&self) -> String {
        let config = fs::read_to_string(self.dir().join("zoo.cfg")).unwrap();
        let port = config
            .lines()
            .find_map(|line| line.strip_prefix("secureClientPort="))
            .expect("a server from start_tls");
        format!("127.0.0.1:{port}")
    }
}
