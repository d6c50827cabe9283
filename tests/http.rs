//! The HTTP endpoint (`[http] listen`) of a real daemon: `/metrics`, `/healthz` and `/status`
//! with the local backend (a pool's items among the metrics), `/healthz` going 503 when
//! ZooKeeper stops, the dashboard's view following the cluster after ZooKeeper restarted, a
//! port in use, and a bad address refused at start.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::cluster::Cluster;
use common::zk::{ClusterNode, TestServer, ZkServer};
use common::{Scratch, http_get, http_request, run_zkcron, wait_for};

/// The deadline of the waits on a node or the dashboard.
const LIMIT: Duration = Duration::from_secs(30);

fn every_second_task(scratch: &Scratch, name: &str) {
    scratch.write_task(
        name,
        &format!(
            "schedule = \"* * * * * *\"\ncommand = 'echo \"$ZKCRON_FIRE_ID\" >> {}'\n",
            scratch.out(name).display()
        ),
    );
}

#[test]
fn given_the_local_backend_then_metrics_health_and_status_are_served() {
    let scratch = Scratch::new();
    scratch.write_config("[http]\nlisten = \"127.0.0.1:0\"\n");
    every_second_task(&scratch, "tick");
    let daemon = scratch.start_daemon(&[]);
    let address = daemon.served_address();

    let succeeded = |metrics: &str| {
        metrics.contains("zkcron_fires_total{task=\"tick\",outcome=\"success\"} ")
            && !metrics.contains("zkcron_fires_total{task=\"tick\",outcome=\"success\"} 0")
    };
    wait_for(
        "tick to succeed and be counted",
        Duration::from_secs(20),
        || succeeded(&http_get(&address, "/metrics").1),
    );
    let (code, metrics) = http_get(&address, "/metrics");
    assert_eq!(code, 200);
    for name in [
        "zkcron_fires_total{task=\"tick\",outcome=\"success\"}",
        "zkcron_fire_lateness_seconds_count",
        "zkcron_claims_total{result=\"won\"}",
        "zkcron_leases_held 1",
        "zkcron_running_jobs",
        "zkcron_last_success_timestamp_seconds{task=\"tick\"}",
        "zkcron_zookeeper_connected 0",
        "zkcron_zookeeper_reconnects_total",
        "zkcron_zookeeper_operation_duration_seconds_count",
        "zkcron_catch_up_runs_total{task=\"tick\"} 0",
        "zkcron_clock_skew_seconds",
        // What the leader says of the task: it leads it, its next tick every second, its
        // last success and no failure since.
        "zkcron_task_leader{task=\"tick\"} 1",
        "zkcron_task_next_tick_timestamp_seconds{task=\"tick\"}",
        "zkcron_task_interval_seconds{task=\"tick\"} 1.0",
        "zkcron_task_last_success_timestamp_seconds{task=\"tick\"}",
        "zkcron_task_consecutive_failures{task=\"tick\"} 0",
        "zkcron_build_info{version=\"",
    ] {
        assert!(
            metrics.contains(name),
            "{name} missing from /metrics:\n{metrics}"
        );
    }
    // Bounded labels: no fire id in any label.
    assert!(
        !metrics.contains("tick@"),
        "a fire id in a label:\n{metrics}"
    );
    // Without an Accept of OpenMetrics (curl, promtool): the text format 0.0.4, a counter's
    // HELP and TYPE named as its samples; Prometheus, which asks for it, gets OpenMetrics.
    assert!(
        metrics.contains("# TYPE zkcron_fires_total counter\n") && !metrics.contains("# EOF"),
        "{metrics}"
    );
    let accept = [("Accept", "application/openmetrics-text;version=1.0.0")];
    let (code, openmetrics) = http_request(&address, "GET", "/metrics", &accept, "");
    assert_eq!(code, 200);
    assert!(
        openmetrics.contains("# TYPE zkcron_fires counter\n") && openmetrics.ends_with("# EOF\n"),
        "{openmetrics}"
    );

    let (code, body) = http_get(&address, "/healthz");
    assert_eq!((code, body.as_str()), (200, "ok: local backend\n"));

    let (code, body) = http_get(&address, "/status");
    assert_eq!(code, 200, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["backend"], "local");
    assert_eq!(status["nodes"][0]["id"], "test-node");
    assert_eq!(status["tasks"][0]["name"], "tick");
    assert_eq!(status["tasks"][0]["leader"], "test-node");
    // The same JSON as `zkcron status --json` through the control socket.
    let config = scratch.path().join("zkcron.toml");
    let state = scratch.path().join("state");
    let cli = run_zkcron(&[
        "status",
        "--json",
        "--config",
        config.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    assert!(
        cli.status.success(),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    let cli: serde_json::Value = serde_json::from_slice(&cli.stdout).unwrap();
    let keys = |v: &serde_json::Value| {
        v.as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect::<Vec<String>>()
    };
    assert_eq!(keys(&status), keys(&cli));
    assert_eq!(keys(&status["tasks"][0]), keys(&cli["tasks"][0]));
    assert_eq!(keys(&status["nodes"][0]), keys(&cli["nodes"][0]));

    let (code, _) = http_get(&address, "/nope");
    assert_eq!(code, 404);
}

#[test]
fn given_a_pooled_task_on_the_local_backend_then_metrics_count_every_item_as_run_here() {
    // Given a pool of 3 items and a plain task on one host (nothing needs to fire).
    let scratch = Scratch::new();
    scratch.write_config("[http]\nlisten = \"127.0.0.1:0\"\n");
    let daily = "schedule = \"0 3 * * *\"\ncommand = [\"true\"]\n";
    scratch.write_task(
        "shards",
        &format!("{daily}work_items = [\"eu\", \"us\", \"ap\"]\n"),
    );
    scratch.write_task("plain", daily);
    let daemon = scratch.start_daemon(&[]);
    let address = daemon.served_address();
    // Then its one node runs every item, and only the pooled task has the series.
    let series = "zkcron_work_items{task=\"shards\"} 3";
    wait_for(
        "the pool's items on /metrics",
        Duration::from_secs(20),
        || http_get(&address, "/metrics").1.contains(series),
    );
    let (_, metrics) = http_get(&address, "/metrics");
    assert!(
        !metrics.contains("zkcron_work_items{task=\"plain\"}"),
        "{metrics}"
    );
}

#[test]
fn given_the_port_is_in_use_then_the_daemon_says_so_and_keeps_firing() {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = holder.local_addr().unwrap().to_string();
    let scratch = Scratch::new();
    scratch.write_config(&format!("[http]\nlisten = \"{taken}\"\n"));
    every_second_task(&scratch, "tick");
    let daemon = scratch.start_daemon(&[]);
    daemon.wait_for_log(
        &format!("cannot serve the HTTP endpoint on {taken}"),
        Duration::from_secs(20),
    );
    let log = daemon.log();
    let line = log
        .lines()
        .find(|l| l.contains("cannot serve the HTTP endpoint"))
        .unwrap();
    assert!(line.contains("ERROR"), "{line}");
    assert!(
        line.contains("set [http] listen in zkcron.toml to a free address"),
        "{line}"
    );
    wait_for("tick to fire all the same", Duration::from_secs(20), || {
        !scratch.lines("tick").is_empty()
    });
}

#[test]
fn given_listen_is_empty_then_nothing_is_served() {
    let scratch = Scratch::new();
    scratch.write_config("[http]\nlisten = \"\"\n");
    let daemon = scratch.start_daemon(&[]);
    daemon.wait_for_log(
        "HTTP endpoint off ([http] listen = \"\")",
        Duration::from_secs(20),
    );
    assert!(!daemon.log().contains("serving /metrics"));
}

#[test]
fn given_an_invalid_listen_address_then_run_refuses_to_start_naming_it() {
    let scratch = Scratch::new();
    let config = scratch.write_config("[http]\nlisten = \"localhost:9464\"\n");
    let output = common::zkcron()
        .arg("run")
        .arg("--config")
        .arg(&config)
        .arg("--jobs-dir")
        .arg(scratch.jobs())
        .arg("--state-dir")
        .arg(scratch.path().join("state"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "`http.listen` must be an IP address and port such as \"127.0.0.1:9464\" or \
             \"[::1]:9464\" (\"\" turns the endpoint off), found \"localhost:9464\""
        ),
        "{stderr}"
    );
}

#[test]
fn given_zookeeper_stops_then_healthz_goes_503_and_back_to_200() {
    let mut zk = ZkServer::start();
    let scratch = Scratch::new();
    scratch.write_config(
        "[http]\nlisten = \"127.0.0.1:0\"\n\n[coordination.zookeeper]\nsession_timeout = \"4s\"\n",
    );
    every_second_task(&scratch, "tick");
    let connect = zk.chroot_connect();
    let daemon = scratch.start_daemon(&["--zookeeper", &connect, "--cluster", "http"]);
    let address = daemon.served_address();
    wait_for(
        "/healthz 200 with a session",
        Duration::from_secs(30),
        || http_get(&address, "/healthz").0 == 200,
    );
    assert!(
        http_get(&address, "/healthz")
            .1
            .starts_with("ok: connected to ZooKeeper")
    );
    wait_for("tick to succeed", Duration::from_secs(30), || {
        !http_get(&address, "/metrics")
            .1
            .contains("zkcron_fires_total{task=\"tick\",outcome=\"success\"} 0")
    });
    let metrics = http_get(&address, "/metrics").1;
    assert!(
        metrics.contains("zkcron_zookeeper_connected 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("zkcron_clock_skew_measured 1"),
        "{metrics}"
    );
    let (code, body) = http_get(&address, "/status");
    assert_eq!(code, 200, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["backend"], "zookeeper");
    assert_eq!(status["cluster"], "http");

    zk.stop();
    wait_for(
        "/healthz 503 without ZooKeeper",
        Duration::from_secs(30),
        || http_get(&address, "/healthz").0 == 503,
    );
    let (_, body) = http_get(&address, "/healthz");
    assert!(body.contains("ZooKeeper"), "{body}");
    assert!(
        http_get(&address, "/metrics")
            .1
            .contains("zkcron_zookeeper_connected 0")
    );
    let (code, body) = http_get(&address, "/status");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("cannot reach ZooKeeper"), "{body}");

    zk.start_again();
    wait_for("/healthz 200 again", Duration::from_secs(60), || {
        http_get(&address, "/healthz").0 == 200
    });
    let metrics = http_get(&address, "/metrics").1;
    assert!(
        !metrics.contains("zkcron_zookeeper_reconnects_total 0"),
        "a reconnect not counted:\n{metrics}"
    );
}

#[test]
fn given_ticks_missed_while_the_daemon_was_down_then_catch_up_runs_are_counted() {
    let scratch = Scratch::new();
    scratch.write_config("[http]\nlisten = \"127.0.0.1:0\"\n");
    every_second_task(&scratch, "tick");
    let mut daemon = scratch.start_daemon(&[]);
    wait_for("tick to fire", Duration::from_secs(20), || {
        !scratch.lines("tick").is_empty()
    });
    daemon.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(daemon.wait_exit(Duration::from_secs(20)), Some(0));
    let fired = scratch.lines("tick").len();
    // Down for a few ticks.
    wait_for("a few ticks to pass", Duration::from_secs(10), || {
        std::fs::metadata(scratch.out("tick"))
            .and_then(|m| m.modified())
            .is_ok_and(|m| m.elapsed().unwrap_or_default() > Duration::from_secs(3))
    });
    assert_eq!(scratch.lines("tick").len(), fired);
    std::fs::remove_file(&daemon.log_path).unwrap();
    let daemon = scratch.start_daemon(&[]);
    let address = daemon.served_address();
    wait_for(
        "a catch-up run to be counted",
        Duration::from_secs(20),
        || {
            let metrics = http_get(&address, "/metrics").1;
            metrics.contains("zkcron_catch_up_runs_total{task=\"tick\"} ")
                && !metrics.contains("zkcron_catch_up_runs_total{task=\"tick\"} 0")
        },
    );
}

/// Regression: ZooKeeper drops a connection's watches with it, and the client did not set the
/// dashboard's persistent watches again: after ZooKeeper restarted within the dashboard's
/// session, its view stayed as read then, and a node joining later never showed.
#[test]
fn given_zookeeper_restarted_within_the_dashboards_session_then_a_node_joining_later_shows() {
    let mut cluster = Cluster::on(TestServer::own(), "default");
    let node = |cluster: &Cluster, id: &str, config: &str| ClusterNode {
        config: config.into(),
        session_timeout: Duration::from_secs(10),
        ..cluster.new_node(id)
    };
    let n1 = node(&cluster, "n1", "[http]\nlisten = \"127.0.0.1:0\"\n");
    let address = cluster.start(n1).served_address();
    let nodes = || -> Vec<String> {
        let (_, body) = http_get(&address, "/api/status");
        let status: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let nodes = status["nodes"].as_array().cloned().unwrap_or_default();
        let id = |n: &serde_json::Value| n["id"].as_str().unwrap_or_default().to_string();
        nodes.iter().map(id).collect()
    };
    wait_for("the dashboard to show n1", LIMIT, || nodes() == ["n1"]);
    cluster.zk.own_mut().stop();
    cluster.zk.own_mut().start_again();
    cluster.wait_log("n1", "reconnected to ZooKeeper within the session", 1);
    wait_for("the dashboard to read again", LIMIT, || {
        http_get(&address, "/api/status").0 == 200 && nodes() == ["n1"]
    });
    cluster.start(node(&cluster, "n2", ""));
    wait_for("the dashboard to show n2", LIMIT, || {
        nodes() == ["n1", "n2"]
    });
}

/// The leader's series follow the task: its leader says it leads it and counts its failures,
/// the other node says nothing of it; when the leader stops, the node that takes the task over
/// says it leads it and counts its failures.
#[test]
fn given_a_failing_task_when_its_leader_stops_then_the_new_leader_exports_its_series() {
    let mut cluster = Cluster::new();
    cluster.write_task(
        "fails",
        "schedule = \"* * * * * *\"\ncommand = [\"false\"]\n",
    );
    let config = "[http]\nlisten = \"127.0.0.1:0\"\n";
    for id in ["m1", "m2"] {
        cluster.start(ClusterNode {
            config: config.into(),
            ..cluster.new_node(id)
        });
    }
    let address = |id: &str| cluster.nodes[id].served_address();
    let leads = |address: &str| {
        http_get(address, "/metrics")
            .1
            .contains("zkcron_task_leader{task=\"fails\"} 1")
    };
    let failures = |address: &str| -> u64 {
        let (_, metrics) = http_get(address, "/metrics");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("zkcron_task_consecutive_failures{task=\"fails\"} "))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let (a1, a2) = (address("m1"), address("m2"));
    let mut leader = None;
    wait_for("one node to lead fails and count 2 failures", LIMIT, || {
        leader = [("m1", &a1), ("m2", &a2)]
            .into_iter()
            .find(|(_, a)| leads(a) && failures(a) >= 2)
            .map(|(id, _)| id);
        leader.is_some()
    });
    let leader = leader.unwrap();
    let (other, other_address) = if leader == "m1" {
        ("m2", &a2)
    } else {
        ("m1", &a1)
    };
    assert!(
        !leads(other_address),
        "only the leader says it leads the task"
    );
    cluster.stop(leader);
    wait_for(
        &format!("{other} to take fails over and count its failures"),
        LIMIT,
        || leads(other_address) && failures(other_address) >= 1,
    );
}
