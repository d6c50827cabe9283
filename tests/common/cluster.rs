//! The end-to-end tests' cluster: a chroot of its own on a ZooKeeper (the binary's shared server,
//! a server of the test's own that it may stop, or an ensemble), a temp dir with the shared jobs
//! dir `jobs.d/` and one home dir per node, and the nodes, spawned by [`ClusterNode`]; waits with
//! a deadline that fail with the fires, the nodes' logs and the servers' state.
//!
//! Nodes the cluster holds are killed when it drops, before its files go; the temp dir is kept
//! (and its path printed) when the test fails, for the nodes' logs.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use super::DaemonProcess;
use super::fires::Fires;
use super::zk::{ClusterNode, TestServer};

/// The deadline of the cluster's own waits: a node registering, stopping or logging a line.
pub const LIMIT: Duration = Duration::from_secs(30);

/// Fields drop in order: the nodes are killed before the server and before their files go.
pub struct Cluster {
    /// The nodes started with [`Cluster::start`], by id.
    pub nodes: BTreeMap<String, DaemonProcess>,
    pub zk: TestServer,
    /// The connect string with this cluster's chroot.
    pub connect: String,
    /// The cluster's name (`--cluster`).
    pub name: String,
    /// The session timeout of nodes made from now on ([`Cluster::new_node`]); 3 s.
    pub session_timeout: Duration,
    /// Holds `jobs.d/` and one dir per node; kept when a test fails.
    dir: Option<tempfile::TempDir>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.nodes.clear();
        if std::thread::panicking()
            && let Some(dir) = self.dir.take()
        {
            eprintln!("cluster files kept in {}", dir.keep().display());
        }
    }
}

impl Cluster {
    /// Cluster `default` on a chroot of the binary's shared server.
    pub fn new() -> Cluster {
        Cluster::on(TestServer::shared(), "default")
    }

    /// Cluster `name` on a chroot of `zk`.
    pub fn on(zk: TestServer, name: &str) -> Cluster {
        let connect = zk.chroot_connect();
        let dir = tempfile::Builder::new()
            .prefix("zkcron-cluster-")
            .permissions(fs::Permissions::from_mode(0o700))
            .tempdir()
            .unwrap();
        let cluster = Cluster {
            nodes: BTreeMap::new(),
            zk,
            connect,
            name: name.to_string(),
            session_timeout: Duration::from_secs(3),
            dir: Some(dir),
        };
        cluster.jobs_dir("jobs.d");
        cluster
    }

    /// The cluster's temp dir.
    pub fn path(&self) -> &Path {
        self.dir.as_ref().unwrap().path()
    }

    /// The shared jobs dir, `jobs.d/`.
    pub fn jobs(&self) -> PathBuf {
        self.path().join("jobs.d")
    }

    /// The tasks in the shared jobs dir, sorted: the stems of its task files.
    pub fn task_names(&self) -> Vec<String> {
        let mut tasks: Vec<String> = fs::read_dir(self.jobs())
            .unwrap()
            .filter_map(|entry| {
                let name = entry.ok()?.file_name().into_string().ok()?;
                name.strip_suffix(".toml").map(str::to_string)
            })
            .collect();
        tasks.sort();
        tasks
    }

    /// The jobs dir `name` (created, mode 0755, when missing): nodes may have one each.
    pub fn jobs_dir(&self, name: &str) -> PathBuf {
        let jobs = self.path().join(name);
        if !jobs.exists() {
            fs::create_dir(&jobs).unwrap();
            // zkcron refuses a jobs dir that others can write: not the umask's say.
            fs::set_permissions(&jobs, fs::Permissions::from_mode(0o755)).unwrap();
        }
        jobs
    }

    /// `fires.log` in the cluster's dir, which the tests' jobs append `<fire id> <node>` to.
    pub fn fires_path(&self) -> PathBuf {
        self.path().join("fires.log")
    }

    pub fn fires(&self) -> Fires {
        Fires::read(&self.fires_path())
    }

    /// The cluster's chroot, e.g. `/zkcron-test-3`.
    pub fn chroot(&self) -> &str {
        &self.connect[self.connect.find('/').unwrap()..]
    }

    /// The cluster's root znode from the server's root: `<chroot>/zkcron/<name>`.
    pub fn base(&self) -> String {
        format!("{}/zkcron/{}", self.chroot(), self.name)
    }

    /// Writes task `name` into the shared jobs dir, mode 0644 (group- or world-writable task
    /// files are refused), atomically (write and rename) so that no node reads half of it.
    pub fn write_task(&self, name: &str, text: &str) {
        self.write_task_in("jobs.d", name, text);
    }

    /// Writes task `name` into the jobs dir `jobs` (see [`Cluster::jobs_dir`]).
    pub fn write_task_in(&self, jobs: &str, name: &str, text: &str) {
        let temp = self.path().join(format!(".{name}.toml.tmp"));
        fs::write(&temp, text).unwrap();
        fs::set_permissions(&temp, fs::Permissions::from_mode(0o644)).unwrap();
        fs::rename(&temp, self.jobs_dir(jobs).join(format!("{name}.toml"))).unwrap();
    }

    /// Node `id` of this cluster, with its home `<dir>/<id>` and the shared jobs dir; change
    /// what else it needs with struct update syntax, then [`ClusterNode::spawn`] it or give it
    /// to [`Cluster::start`].
    pub fn new_node(&self, id: &str) -> ClusterNode {
        ClusterNode {
            cluster: self.name.clone(),
            session_timeout: self.session_timeout,
            ..ClusterNode::new(&self.path().join(id), &self.jobs(), &self.connect, id)
        }
    }

    /// Spawns `node`, waits until it registered in ZooKeeper and keeps it as `nodes[id]`.
    pub fn start(&mut self, node: ClusterNode) -> &DaemonProcess {
        let process = node.spawn();
        process.wait_for_log("registered in ZooKeeper", LIMIT);
        self.nodes.insert(node.id.clone(), process);
        &self.nodes[&node.id]
    }

    /// Starts a node of each of `ids` at `release` ([`Cluster::start`]).
    pub fn start_each_at(&mut self, ids: &[&str], release: &str) {
        for id in ids {
            let node = ClusterNode {
                release: Some(release.to_string()),
                ..self.new_node(id)
            };
            self.start(node);
        }
    }

    /// For failure messages: every node's log.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|(id, node)| format!("--- {id} log:\n{}", node.log()))
            .collect()
    }

    /// Stops node `id` with SIGTERM, waits for it to exit and checks that it exited with 0.
    pub fn stop(&mut self, id: &str) {
        let mut node = self.nodes.remove(id).unwrap();
        node.signal(nix::sys::signal::Signal::SIGTERM);
        assert_eq!(node.wait_exit(LIMIT), Some(0), "{}", node.log());
    }

    /// The number of tasks node `id` said it leads in its last `leases changed` log line.
    pub fn leading(&self, id: &str) -> Option<usize> {
        leading_in_log(&self.nodes[id].log())
    }

    /// Polls `condition` every 20 ms until it holds; after `limit` panics with `what` and the
    /// cluster's [`Cluster::diagnostics`].
    #[allow(clippy::disallowed_methods)] // real processes, real deadline
    pub fn wait(&self, what: &str, limit: Duration, mut condition: impl FnMut(&Cluster) -> bool) {
        let deadline = Instant::now() + limit;
        while !condition(self) {
            if Instant::now() > deadline {
                panic!(
                    "timed out after {limit:?} waiting for: {what}\n{}",
                    self.diagnostics()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until node `id`'s log has `needle` at least `count` times (for [`LIMIT`]); fails
    /// at once when the node exits first.
    pub fn wait_log(&self, id: &str, needle: &str, count: usize) {
        self.wait(
            &format!("{id} to log {needle:?} {count} time(s)"),
            LIMIT,
            |cluster| {
                let node = &cluster.nodes[id];
                let done = node.log().matches(needle).count() >= count;
                if !done && !super::process_alive(node.child.id() as i32) {
                    panic!(
                        "{id} exited while we waited for it to log {needle:?}\n{}",
                        cluster.diagnostics()
                    );
                }
                done
            },
        );
    }

    /// The children of `<base>/<dir>` (`leases`, `members`) with the session that owns each
    /// (0 for a persistent znode).
    pub fn znode_owners(&self, dir: &str) -> BTreeMap<String, i64> {
        let dir = format!("{}/{dir}", self.base());
        self.zk.with_client(async |client| {
            let mut owners = BTreeMap::new();
            for child in client.list_children(&dir).await.unwrap_or_default() {
                if let Ok(Some(stat)) = client.check_stat(&format!("{dir}/{child}")).await {
                    owners.insert(child, stat.ephemeral_owner);
                }
            }
            owners
        })
    }

    /// Runs `zkcron ARGS` against this cluster (its `--zookeeper` and `--cluster` added): its
    /// output, whatever the exit.
    pub fn zkcron(&self, args: &[&str]) -> Output {
        super::zkcron()
            .args(args)
            .args(["--zookeeper", &self.connect, "--cluster", &self.name])
            .stdin(Stdio::null())
            .output()
            .expect("zkcron runs")
    }

    /// [`Cluster::zkcron`], failing with its output unless it succeeded: its stdout.
    pub fn zkcron_ok(&self, args: &[&str]) -> String {
        let out = self.zkcron(args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    /// Polls `condition` with the fires every 20 ms until it holds; after `limit` panics with
    /// `what` and the cluster's state.
    pub fn wait_fires(
        &self,
        what: &str,
        limit: Duration,
        mut condition: impl FnMut(&Fires, &Cluster) -> bool,
    ) {
        self.wait(what, limit, |c| condition(&c.fires(), c));
    }

    /// Fails, with the cluster's state, if any fire id fired twice.
    pub fn assert_no_duplicates(&self) {
        let duplicates = self.fires().duplicates();
        self.check(
            duplicates.is_empty(),
            &format!("fire ids fired more than once (by nodes): {duplicates:?}"),
        );
    }

    /// Fails, with the cluster's state, if a tick of `tasks` from `from` to `to` never fired.
    pub fn assert_no_gaps_in(&self, tasks: &[String], from: i64, to: i64) {
        let gaps = self.fires().gaps(tasks, from, to);
        self.check(
            gaps.is_empty(),
            &format!("ticks from {from} to {to} never fired (task: seconds): {gaps:?}"),
        );
    }

    /// Panics with `failure` and the cluster's state unless `ok`.
    pub fn check(&self, ok: bool, failure: &str) {
        if !ok {
            panic!("{failure}\n{}", self.diagnostics());
        }
    }

    /// For failure messages: the last minute of `fires.log` as a table, the last lines of each
    /// node's log, and the server's state.
    pub fn diagnostics(&self) -> String {
        let fires = self.fires();
        let mut out = String::new();
        let mut tasks: Vec<String> = fires.0.iter().map(|f| f.task.clone()).collect();
        tasks.sort();
        tasks.dedup();
        match (
            fires.0.iter().map(|f| f.second).min(),
            fires.0.iter().map(|f| f.second).max(),
        ) {
            (Some(first), Some(last)) => {
                out.push_str(&fires.table(&tasks, first.max(last - 59), last))
            }
            _ => out.push_str("no fires\n"),
        }
        for (id, node) in &self.nodes {
            let log = node.log();
            let lines: Vec<&str> = log.lines().collect();
            let _ = writeln!(
                out,
                "--- {id} (leading={:?}), last lines of {}:\n{}",
                leading_in_log(&log),
                node.log_path.display(),
                lines[lines.len().saturating_sub(30)..].join("\n")
            );
        }
        out.push_str(&self.zk.describe(12));
        out
    }
}

/// The number of tasks a node said it leads in the last `leases changed` line of its log.
pub fn leading_in_log(log: &str) -> Option<usize> {
    let line = log.lines().rev().find(|l| l.contains("leases changed"))?;
    let value = line.split("leading").nth(1)?;
    let digits: String = value
        .trim_start_matches(['=', ':', '"', ' '])
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}
