//! The end-to-end tests' cluster: a chroot of its own on a ZooKeeper (the binary's shared server,
//! or one of the test's own that it may stop), a temp dir with the shared jobs dir `jobs.d/` and
//! one home dir per node, and the nodes, spawned by [`ClusterNode`].
//!
//! Nodes the cluster holds are killed when it drops, before its files go; the temp dir is kept
//! (and its path printed) when the test fails, for the nodes' logs.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::DaemonProcess;
use super::fires::Fires;
use super::zk::{ClusterNode, TestServer};

/// How long a node may take to register.
const REGISTER_LIMIT: Duration = Duration::from_secs(30);

/// Fields drop in order: the nodes are killed before the server and before their files go.
pub struct Cluster {
    /// The nodes started with [`Cluster::start`], by id.
    pub nodes: BTreeMap<String, DaemonProcess>,
    pub zk: TestServer,
    /// The connect string with this cluster's chroot.
    pub connect: String,
    /// The cluster's name (`--cluster`).
    pub name: String,
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

    /// The cluster's root znode from the server's root: `<chroot>/zkcron/<name>`.
    pub fn base(&self) -> String {
        let chroot = &self.connect[self.connect.find('/').unwrap()..];
        format!("{chroot}/zkcron/{}", self.name)
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
    pub fn node(&self, id: &str) -> ClusterNode {
        ClusterNode {
            cluster: self.name.clone(),
            ..ClusterNode::new(&self.path().join(id), &self.jobs(), &self.connect, id)
        }
    }

    /// Spawns `node`, waits until it registered in ZooKeeper and keeps it as `nodes[id]`.
    pub fn start(&mut self, node: ClusterNode) -> &DaemonProcess {
        let process = node.spawn();
        process.wait_for_log("registered in ZooKeeper", REGISTER_LIMIT);
        self.nodes.insert(node.id.clone(), process);
        &self.nodes[&node.id]
    }

    /// For failure messages: every node's log.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|(id, node)| format!("--- {id} log:\n{}", node.log()))
            .collect()
    }
}
