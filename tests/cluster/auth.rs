//! ZooKeeper security end to end: a `zkcron run` node with digest credentials (`auth_file`) on
//! a real ZooKeeper (see `tests/common/zk.rs`) creates every znode creator-only, so a second,
//! unauthenticated client can neither read, write nor delete any kind of znode under the
//! cluster root; the cluster commands work with the credentials and say "authentication"
//! without them.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use crate::common::DaemonProcess;
use crate::common::cluster::Cluster;
use crate::common::zk::{self, ClusterNode, TestServer};
use zookeeper_client::{Client, CreateMode, Error as ZkError};

const CLUSTER: &str = "secure";
const CREDENTIALS: &str = "zkcron:s3cret-pass";
const LIMIT: Duration = Duration::from_secs(30);

/// Whether node `n1` authenticates to ZooKeeper.
#[derive(Clone, Copy)]
enum Credentials {
    /// `auth_file` names `zk.secret`.
    Given,
    /// No credentials configured.
    Missing,
}

/// Cluster `secure` on a chroot of the shared server, its credentials in `zk.secret`, three
/// tasks and node `n1` started (authenticating with `credentials`).
fn secured(credentials: Credentials) -> Cluster {
    let mut cluster = Cluster::on(TestServer::shared(), CLUSTER);
    let secret = cluster.path().join("zk.secret");
    fs::write(&secret, format!("{CREDENTIALS}\n")).unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    cluster.write_task(
        "quick",
        "schedule = \"* * * * * *\"\ncommand = [\"/bin/true\"]\n",
    );
    // Only to be paused (pausing `quick` could stop it before it leaves a result).
    cluster.write_task(
        "parked",
        "schedule = \"0 0 0 1 1 *\"\ncommand = [\"/bin/true\"]\n",
    );
    // Runs long, so its run-<tick> znode is there to be attacked.
    cluster.write_task(
        "slow",
        "schedule = \"* * * * * *\"\ncommand = [\"/bin/sleep\", \"60\"]\n",
    );
    cluster.start_n1(credentials);
    cluster
}

/// What these tests do with a secured [`Cluster`].
trait Secured {
    fn start_n1(&mut self, credentials: Credentials);
    fn n1(&self) -> &DaemonProcess;
    fn config(&self) -> PathBuf;
    fn cli(&self, args: &[&str], with_config: bool) -> Output;
    fn ok(&self, args: &[&str]) -> String;
    fn as_owner<T>(&self, work: impl AsyncFnOnce(&Client) -> T) -> T;
    fn tree(&self) -> Vec<String>;
}

impl Secured for Cluster {
    /// Starts node `n1` (again), with `credentials`, and waits until it registered.
    fn start_n1(&mut self, credentials: Credentials) {
        let config = match credentials {
            Credentials::Given => format!(
                "[coordination.zookeeper]\nauth_file = \"{}\"\n",
                self.path().join("zk.secret").display()
            ),
            Credentials::Missing => String::new(),
        };
        self.start(ClusterNode {
            config,
            ..self.new_node("n1")
        });
    }

    fn n1(&self) -> &DaemonProcess {
        &self.nodes["n1"]
    }

    /// The node's config, and so its credentials.
    fn config(&self) -> PathBuf {
        self.path().join("n1").join("zkcron.toml")
    }

    /// `zkcron <args> --zookeeper .. --cluster secure`, with the node's config (and so its
    /// credentials) when `with_config`.
    fn cli(&self, args: &[&str], with_config: bool) -> Output {
        let mut command = crate::common::zkcron();
        command.args(args);
        if with_config {
            command.arg("--config").arg(self.config());
        } else {
            // No /etc/zkcron/zkcron.toml is read either: an empty config.
            let empty = self.path().join("empty.toml");
            write(&empty, "");
            command.arg("--config").arg(empty);
        }
        command
            .args(["--zookeeper", &self.connect, "--cluster", CLUSTER])
            .stdin(Stdio::null())
            .output()
            .expect("zkcron runs")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.cli(args, true);
        assert!(
            out.status.success(),
            "zkcron {args:?} failed: {}\n{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout),
            self.n1().log()
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs `work` with a session that authenticated with the cluster's credentials.
    fn as_owner<T>(&self, work: impl AsyncFnOnce(&Client) -> T) -> T {
        runtime().block_on(async {
            let client = Client::connector()
                .with_session_timeout(Duration::from_secs(10))
                .with_auth("digest", CREDENTIALS.as_bytes())
                .connect(&self.zk.connect_string())
                .await
                .expect("the owner connects");
            work(&client).await
        })
    }

    /// Every znode under `<chroot>/zkcron`, the root included, as the owner sees them.
    fn tree(&self) -> Vec<String> {
        let root = format!("{}/zkcron", self.chroot());
        self.as_owner(async |client| {
            let mut all = Vec::new();
            let mut todo = vec![root];
            while let Some(path) = todo.pop() {
                match client.list_children(&path).await {
                    Ok(children) => todo.extend(children.iter().map(|c| format!("{path}/{c}"))),
                    Err(ZkError::NoNode) => continue,
                    Err(error) => panic!("the owner lists {path}: {error}"),
                }
                all.push(path);
            }
            all.sort();
            all
        })
    }
}

fn write(path: &Path, text: &str) {
    fs::write(path, text).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o644)).unwrap();
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Which kind of znode `path` (relative to the cluster root) is, as the layout names them.
fn kind(relative: &str) -> String {
    let parts: Vec<&str> = relative.split('/').collect();
    match parts.as_slice() {
        [] | [""] => "root".into(),
        ["tasks", _] => "tasks/<t>".into(),
        ["tasks", _, leaf] if leaf.starts_with("run-") => "run".into(),
        ["tasks", _, leaf] => (*leaf).into(),
        ["tasks", _, "history", _] => "history entry".into(),
        ["control", dir] => format!("control/{dir}"),
        ["control", dir, _] => format!("control/{dir}/<x>"),
        [dir, _] => format!("{dir}/<x>"),
        parts => parts.join("/"),
    }
}

#[test]
fn an_unauthenticated_client_can_neither_read_write_nor_delete_any_znode_of_an_authenticated_cluster()
 {
    let secured = secured(Credentials::Given);
    let base = format!("{}/zkcron/{CLUSTER}", secured.chroot());
    // The operator's marks, made with the credentials: a trigger, a pause, a drained node.
    secured.ok(&["trigger", "quick"]);
    secured.ok(&["pause", "parked"]);
    secured.ok(&["drain", "ghost"]);
    let wanted = [
        "root",
        "members/<x>",
        "leases/<x>",
        "tasks/<t>",
        "epoch",
        "result",
        "history",
        "run",
        "tasksets/<x>",
        "control/drained/<x>",
        "control/paused/<x>",
        "control/triggers",
        "clock",
    ];
    let mut tree = Vec::new();
    crate::common::wait_for("every kind of znode to exist", LIMIT, || {
        tree = secured.tree();
        let kinds: BTreeSet<String> = tree
            .iter()
            .filter_map(|p| p.strip_prefix(&base))
            .map(|p| kind(p.trim_start_matches('/')))
            .collect();
        let missing: Vec<&str> = wanted
            .iter()
            .copied()
            .filter(|w| !kinds.contains(*w))
            .collect();
        if !missing.is_empty() {
            eprintln!("not there yet: {missing:?} (have {kinds:?})");
        }
        missing.is_empty()
    });

    let intruder = secured.zk.connect_string();
    let tried = runtime().block_on(async {
        let client = zk::connect_client(&intruder, Duration::from_secs(10)).await;
        let mut tried = 0;
        for path in &tree {
            let what = |op: &str, error: Result<(), ZkError>| {
                assert_eq!(
                    error,
                    Err(ZkError::NoAuth),
                    "an unauthenticated {op} of {path} was not refused with NoAuth"
                );
            };
            what("read", client.get_data(path).await.map(|_| ()));
            what("listing", client.list_children(path).await.map(|_| ()));
            what(
                "write",
                client.set_data(path, b"evil", None).await.map(|_| ()),
            );
            let options = CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
            what(
                "create below",
                client
                    .create(&format!("{path}/evil"), b"", &options)
                    .await
                    .map(|_| ()),
            );
            if path.ends_with("/zkcron") {
                // Its parent is the operator's open chroot: ZooKeeper checks the parent's ACL
                // for a delete, then refuses it as not empty.
                assert_eq!(client.delete(path, None).await, Err(ZkError::NotEmpty));
            } else {
                what("delete", client.delete(path, None).await);
            }
            tried += 1;
        }
        tried
    });
    assert_eq!(tried, tree.len());
    // The cluster still works: the owner's view is intact and the node keeps firing.
    let status = secured.ok(&["status", "--json"]);
    assert!(status.contains("\"quick\""), "{status}");
}

#[test]
fn the_cluster_commands_work_with_the_credentials_and_say_authentication_without_them() {
    let secured = secured(Credentials::Given);
    secured.ok(&["status"]);
    for args in [
        &["status"][..],
        &["explain", "quick"],
        &["history", "quick"],
        &["trigger", "quick"],
        &["pause", "quick"],
        &["resume", "quick"],
        &["drain", "n1"],
        &["undrain", "n1"],
    ] {
        let out = secured.cli(args, false);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "zkcron {args:?}: {stderr}");
        assert!(
            stderr.contains("authentication required, and no credentials are configured")
                && stderr.contains("set [coordination.zookeeper] auth or auth_file"),
            "zkcron {args:?}: {stderr}"
        );
    }
    // Wrong credentials: the user is named, the password is not.
    let wrong = secured.path().join("wrong.toml");
    write(
        &wrong,
        "[coordination.zookeeper]\nauth = \"mallory:guess\"\n",
    );
    let out = crate::common::zkcron()
        .args(["status", "--config"])
        .arg(&wrong)
        .args(["--zookeeper", &secured.connect, "--cluster", CLUSTER])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the user \"mallory\" is not the one the cluster uses")
            && !stderr.contains("guess"),
        "{stderr}"
    );
    // With them, every command works.
    for args in [
        &["explain", "quick"][..],
        &["history", "quick"],
        &["pause", "quick"],
        &["resume", "quick"],
        &["drain", "n1"],
        &["undrain", "n1"],
        &["trigger", "quick"],
    ] {
        secured.ok(args);
    }
}

#[test]
fn validate_refuses_an_auth_file_others_may_read_naming_it_and_chmod_600() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("jobs.d")).unwrap();
    let secret = dir.path().join("zk.secret");
    fs::write(&secret, "zkcron:s3cret\n").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o644)).unwrap();
    let config = dir.path().join("zkcron.toml");
    write(
        &config,
        "[coordination]\nbackend = \"zookeeper\"\n[coordination.zookeeper]\n\
         connect = \"127.0.0.1:2181\"\nauth_file = \"zk.secret\"\n",
    );
    let out = crate::common::zkcron()
        .args(["validate", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let shown = secret.display();
    assert!(
        stderr.contains(&format!(
            "the ZooKeeper auth_file {shown} may be read by group or others (mode 644); run \
             `chmod 600 {shown}`"
        )),
        "{stderr}"
    );
    // Fixed as told, it passes.
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    let out = crate::common::zkcron()
        .args(["validate", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_node_without_credentials_warns_and_a_root_left_open_is_reported_once_they_are_set() {
    let mut cluster = secured(Credentials::Missing);
    cluster.n1().wait_for_log(
        "ZooKeeper without authentication: every znode zkcron creates is world-readable and \
         world-writable",
        LIMIT,
    );
    let log = cluster.n1().log();
    assert!(
        log.contains("set [coordination.zookeeper] auth = \"user:password\" or auth_file = PATH"),
        "{log}"
    );
    cluster.nodes.remove("n1");
    cluster.start_n1(Credentials::Given);
    cluster.n1().wait_for_log(
        "the cluster root was created without authentication: its znodes stay world-readable",
        LIMIT,
    );
}
