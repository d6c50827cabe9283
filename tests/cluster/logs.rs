//! A run's output in a cluster: `zkcron logs` on another node's host reads it from the node that
//! ran it over that node's HTTP endpoint (which its member record advertises), with the read
//! token, following a run still going; without a token it says what to set; after the node
//! that ran it was killed, its own host shows what the run wrote, marked incomplete, and the
//! other hosts say where the output stays.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use crate::common::cluster::Cluster;
use crate::common::zk::{ClusterNode, TestServer};
use crate::common::{lines_of, next_line};

const LIMIT: Duration = Duration::from_secs(30);
const TOKEN: &str = "read-token-for-the-logs-test";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A cluster of `ids`, each serving HTTP on a free port with the same read token.
fn cluster_of(name: &str, ids: &[&str]) -> Cluster {
    let mut cluster = Cluster::on(TestServer::shared(), name);
    let token = cluster.path().join("read.token");
    fs::write(&token, format!("{TOKEN}\n")).unwrap();
    fs::set_permissions(&token, fs::Permissions::from_mode(0o600)).unwrap();
    for id in ids {
        let config = format!(
            "[http]\nlisten = \"127.0.0.1:0\"\nread_token_file = \"{}\"\n",
            token.display()
        );
        cluster.start(ClusterNode {
            config,
            ..cluster.new_node(id)
        });
    }
    cluster
}

/// `zkcron args` with node `id`'s config and state dir (as on its host).
fn logs_on(cluster: &Cluster, id: &str, args: &[&str]) -> Output {
    let home = cluster.path().join(id);
    crate::common::zkcron()
        .args(args)
        .arg("--config")
        .arg(home.join("zkcron.toml"))
        .arg("--state-dir")
        .arg(home.join("state"))
        .args([
            "--zookeeper",
            &cluster.connect.clone(),
            "--cluster",
            &cluster.name,
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The run of `task` whose job wrote its fire id to `fire`, once the node that runs it keeps
/// `printed` of its output: its fire id and that node.
fn printing_run(
    cluster: &Cluster,
    ids: &[&str],
    task: &str,
    fire: &Path,
    printed: &str,
) -> (String, String) {
    cluster.wait("the run to start", LIMIT, |_| {
        fs::read_to_string(fire).is_ok_and(|f| f.ends_with('\n'))
    });
    let fire_id = fs::read_to_string(fire).unwrap().trim().to_string();
    let mut ran = None;
    cluster.wait(&format!("the run to print {printed:?}"), LIMIT, |c| {
        ran = ids
            .iter()
            .find(|id| kept(c, id, task, &fire_id).is_some_and(|t| t.contains(printed)))
            .map(|id| id.to_string());
        ran.is_some()
    });
    (fire_id, ran.unwrap())
}

fn kept(cluster: &Cluster, id: &str, task: &str, fire_id: &str) -> Option<String> {
    let path: PathBuf = cluster
        .path()
        .join(id)
        .join("state/output")
        .join(task)
        .join(fire_id);
    fs::read_to_string(path).ok()
}

#[test]
fn zkcron_logs_reads_a_run_from_the_node_that_ran_it_and_follows_it() {
    let ids = ["logs-a", "logs-b"];
    let cluster = cluster_of("logs-http", &ids);
    let (fire, release) = (cluster.path().join("fire"), cluster.path().join("release"));
    cluster.write_task(
        "talk",
        &format!(
            "schedule = \"* * * * * *\"\n\
             command = '[ -e {fire} ] && exit 0; echo \"$ZKCRON_FIRE_ID\" > {fire}; \
             echo \"hello from $ZKCRON_NODE\"; while [ ! -e {release} ]; do sleep 0.05; done; \
             echo \"<b>done</b>\" >&2; exit 4'\n",
            fire = fire.display(),
            release = release.display()
        ),
    );
    let (fire_id, ran) = printing_run(&cluster, &ids, "talk", &fire, "hello from");
    let other = ids.iter().find(|id| **id != ran).unwrap();

    // From the other node's host, while the run goes on: what it printed so far.
    let out = logs_on(&cluster, other, &["logs", "talk", &fire_id]);
    assert!(out.status.success(), "{out:?}\n{}", cluster.diagnostics());
    assert_eq!(text(&out.stdout), format!("hello from {ran}\n"));
    assert!(
        text(&out.stderr).contains("is still going (--follow streams it)"),
        "{out:?}"
    );

    // --follow streams it to its end: the first line while the run waits, the rest after.
    let home = cluster.path().join(other);
    let mut follow = crate::common::zkcron()
        .args(["logs", "talk", &fire_id, "--follow", "--config"])
        .arg(home.join("zkcron.toml"))
        .arg("--state-dir")
        .arg(home.join("state"))
        .args(["--zookeeper", &cluster.connect, "--cluster", &cluster.name])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(follow.stdout.take().unwrap());
    let line = |what: &str| next_line(&lines, what, LIMIT);
    assert_eq!(line("the first line").unwrap(), format!("hello from {ran}"));
    fs::write(&release, "").unwrap();
    assert_eq!(
        line("the line after the release").as_deref(),
        Some("<b>done</b>")
    );
    assert_eq!(
        line("the end of --follow"),
        None,
        "--follow ends with the run"
    );
    let out = follow.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        text(&out.stderr).contains(&format!("run {fire_id} on node {ran} ended at ")),
        "{out:?}"
    );
    assert!(text(&out.stderr).contains(": exit code 4"), "{out:?}");

    // The newest run by default, once it is in the history (later ticks exit at once).
    cluster.wait("the run in the history", LIMIT, |c| {
        c.zkcron_ok(&["history", "talk", "--json", "-n", "100"])
            .contains(&fire_id)
    });
    let history = cluster.zkcron_ok(&["history", "talk", "--json", "-n", "100"]);
    let runs: serde_json::Value = serde_json::from_str(&history).unwrap();
    let failed = runs
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["fire_id"] == fire_id.as_str())
        .unwrap();
    assert_eq!(
        failed["output_tail"],
        format!("hello from {ran}\n<b>done</b>")
    );

    // Without a token file (no config: /etc/zkcron/zkcron.toml is not there), the CLI says
    // what to set.
    let out = crate::common::zkcron()
        .args(["logs", "talk", &fire_id, "--state-dir"])
        .arg(cluster.path().join("no-state"))
        .args([
            "--zookeeper",
            &cluster.connect.clone(),
            "--cluster",
            &cluster.name,
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    assert!(
        text(&out.stderr).contains(&format!(
            "ran on node {ran}: reading it over HTTP needs a token"
        )),
        "{out:?}"
    );
}

#[test]
fn a_run_whose_node_was_killed_shows_what_it_wrote_on_its_host() {
    let ids = ["cut-a", "cut-b"];
    let mut cluster = cluster_of("logs-killed", &ids);
    let (fire, pid) = (cluster.path().join("fire"), cluster.path().join("pid"));
    cluster.write_task(
        "cut",
        &format!(
            "schedule = \"* * * * * *\"\n\
             command = '[ -e {fire} ] && exit 0; echo $$ > {pid}; echo \"$ZKCRON_FIRE_ID\" > {fire}; \
             echo before the kill; exec sleep 60'\n",
            fire = fire.display(),
            pid = pid.display()
        ),
    );
    let (fire_id, ran) = printing_run(&cluster, &ids, "cut", &fire, "before the kill");
    let other = ids.iter().find(|id| **id != ran).unwrap().to_string();
    let mut node = cluster.nodes.remove(&ran).unwrap();
    node.signal(nix::sys::signal::Signal::SIGKILL);
    node.wait_exit(LIMIT);
    let job: i32 = fs::read_to_string(&pid).unwrap().trim().parse().unwrap();
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(job), nix::sys::signal::SIGKILL);

    let out = logs_on(&cluster, &ran, &["logs", "cut", &fire_id]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text(&out.stdout), "before the kill\n");
    assert!(
        text(&out.stderr).contains(&format!(
            "incomplete: node {ran} stopped before run {fire_id}"
        )),
        "{out:?}"
    );
    // Elsewhere: where the output stays. The records name the dead node while its session
    // lives (it is not live by then, or soon not); once the other node claims a newer tick,
    // no record names the run's node.
    let out = logs_on(&cluster, &other, &["logs", "cut", &fire_id]);
    assert!(!out.status.success(), "{out:?}");
    let said = text(&out.stderr);
    assert!(
        said.contains(&format!(
            "node {ran}, which ran {fire_id}, is not live or serves no HTTP endpoint"
        )) || said.contains(&format!("cannot reach node {ran} at "))
            || said.contains(&format!("no record names the node that ran {fire_id}")),
        "{out:?}"
    );
    assert!(
        said.contains("its output stays in that node's state dir"),
        "{out:?}"
    );
}
