//! What the packaged systemd unit relies on: the daemon's side of the `sd_notify` protocol
//! (`Type=notify`, `WatchdogSec=`) and `$STATE_DIRECTORY` (`StateDirectory=`). The real binary
//! runs with `NOTIFY_SOCKET` pointing at a datagram socket the test binds, and the test reads
//! what a service manager would read.

mod common;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{DaemonProcess, Scratch, wait_for};
use nix::sys::signal::Signal;

const LIMIT: Duration = Duration::from_secs(20);

/// A bound datagram socket standing in for systemd's notification socket.
struct ServiceManager {
    socket: UnixDatagram,
    /// Every datagram received so far, in order.
    messages: Vec<String>,
}

impl ServiceManager {
    fn bind(path: &Path) -> ServiceManager {
        let socket = UnixDatagram::bind(path).expect("bind the notify socket");
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        ServiceManager {
            socket,
            messages: Vec::new(),
        }
    }

    /// The first datagram so far that satisfies `wanted`, else the next one received that does
    /// (within `limit`).
    fn wait_for(&mut self, what: &str, limit: Duration, wanted: impl Fn(&str) -> bool) -> String {
        if let Some(found) = self.messages.iter().find(|m| wanted(m)) {
            return found.clone();
        }
        self.wait_for_next(what, limit, wanted)
    }

    /// The next datagram received that satisfies `wanted`; panics when `limit` passes first.
    #[allow(clippy::disallowed_methods)]
    fn wait_for_next(
        &mut self,
        what: &str,
        limit: Duration,
        wanted: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + limit;
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            if Instant::now() > deadline {
                panic!(
                    "timed out after {limit:?} waiting for {what}; received: {:#?}",
                    self.messages
                );
            }
            if let Ok(n) = self.socket.recv(&mut buffer) {
                let message = String::from_utf8_lossy(&buffer[..n]).into_owned();
                self.messages.push(message.clone());
                if wanted(&message) {
                    return message;
                }
            }
        }
    }
}

fn has_line(message: &str, line: &str) -> bool {
    message.lines().any(|l| l == line)
}

fn status_of(message: &str) -> Option<&str> {
    message.lines().find_map(|l| l.strip_prefix("STATUS="))
}

/// Starts `zkcron run` on the scratch dir with `NOTIFY_SOCKET` set and more `env`; the log goes
/// to `log.txt`.
fn start_notifying_daemon(scratch: &Scratch, socket: &Path, env: &[(&str, &str)]) -> DaemonProcess {
    let mut command = scratch.daemon_command();
    command
        .arg("--state-dir")
        .arg(scratch.path().join("state"))
        .args(["--node-id", "test-node"])
        .env("NOTIFY_SOCKET", socket)
        .envs(env.iter().copied());
    scratch.spawn_daemon(command)
}

#[test]
fn given_a_notify_socket_when_the_daemon_starts_reloads_and_stops_then_systemd_hears_each_step() {
    // Given: a local-backend node with two tasks, one disabled.
    let scratch = Scratch::new();
    scratch.write_config("");
    scratch.write_task("hourly", "schedule = \"@hourly\"\ncommand = \"true\"\n");
    scratch.write_task(
        "off",
        "schedule = \"@hourly\"\ncommand = \"true\"\nenabled = false\n",
    );
    let socket = scratch.path().join("notify.sock");
    let mut manager = ServiceManager::bind(&socket);

    // When it starts: READY with a status naming what it leads.
    let mut child = start_notifying_daemon(&scratch, &socket, &[]);
    // The disabled task is loaded but not led: it fires nowhere, on either backend (the
    // embedded backend used to count it as led).
    let ready = manager.wait_for("READY=1", LIMIT, |m| has_line(m, "READY=1"));
    assert_eq!(status_of(&ready), Some("leading 1 of 2 tasks"), "{ready}");

    // When SIGHUP asks for a reload: RELOADING, then READY again.
    child.signal(Signal::SIGHUP);
    manager.wait_for_next("RELOADING=1", LIMIT, |m| has_line(m, "RELOADING=1"));
    let ready = manager.wait_for_next("READY=1 after the reload", LIMIT, |m| {
        has_line(m, "READY=1")
    });
    assert_eq!(status_of(&ready), Some("leading 1 of 2 tasks"), "{ready}");

    // When SIGTERM arrives: STOPPING, with more stop time asked for than shutdown_grace (30s).
    child.signal(Signal::SIGTERM);
    let stopping = manager.wait_for("STOPPING=1", LIMIT, |m| has_line(m, "STOPPING=1"));
    assert!(
        status_of(&stopping).is_some_and(|s| s.starts_with("stopping (SIGTERM)")),
        "{stopping}"
    );
    let extend: u64 = stopping
        .lines()
        .find_map(|l| l.strip_prefix("EXTEND_TIMEOUT_USEC="))
        .expect("EXTEND_TIMEOUT_USEC with STOPPING")
        .parse()
        .unwrap();
    assert!(extend > 30_000_000, "{stopping}");
    assert_eq!(child.wait_exit(LIMIT), Some(0), "{}", child.log());
}

#[test]
fn given_no_notify_socket_when_the_daemon_runs_then_it_works_and_says_nothing_about_systemd() {
    let scratch = Scratch::new();
    scratch.write_task("hourly", "schedule = \"@hourly\"\ncommand = \"true\"\n");
    let mut daemon = scratch.start_daemon(&[]);
    daemon.signal(Signal::SIGTERM);
    assert_eq!(daemon.wait_exit(LIMIT), Some(0));
    let log = daemon.log();
    assert!(!log.contains("service manager"), "{log}");
    assert!(!log.contains("watchdog"), "{log}");
}

#[test]
fn given_a_notify_socket_that_is_gone_when_the_daemon_runs_then_it_warns_once_and_keeps_going() {
    let scratch = Scratch::new();
    scratch.write_config("");
    let out = scratch.out("fired");
    scratch.write_task(
        "tick",
        &format!(
            "schedule = \"* * * * * *\"\ncommand = 'echo x >> {}'\n",
            out.display()
        ),
    );
    let mut child =
        start_notifying_daemon(&scratch, &scratch.path().join("nobody-listens.sock"), &[]);
    wait_for("a tick to fire", LIMIT, || {
        !scratch.lines("fired").is_empty()
    });
    let text = child.log();
    assert_eq!(
        text.matches("cannot notify the service manager").count(),
        1,
        "{text}"
    );
    assert!(text.contains("status updates are off"), "{text}");
    child.signal(Signal::SIGTERM);
    assert_eq!(child.wait_exit(LIMIT), Some(0), "{}", child.log());
}

#[test]
#[allow(clippy::disallowed_methods)] // the daemon pings on the real clock
fn given_a_watchdog_when_the_daemon_runs_then_it_pings_at_half_the_interval() {
    let scratch = Scratch::new();
    scratch.write_config("");
    scratch.write_task("hourly", "schedule = \"@hourly\"\ncommand = \"true\"\n");
    let socket = scratch.path().join("notify.sock");
    let mut manager = ServiceManager::bind(&socket);
    // A watchdog of 600 ms. WATCHDOG_PID is left out: sd_notify then accepts WATCHDOG_USEC for
    // any pid.
    let mut child = start_notifying_daemon(&scratch, &socket, &[("WATCHDOG_USEC", "600000")]);
    let mut pings = Vec::new();
    for n in 0..7 {
        manager.wait_for_next(&format!("WATCHDOG=1 #{n}"), LIMIT, |m| {
            has_line(m, "WATCHDOG=1")
        });
        pings.push(Instant::now());
    }
    let log = child.log();
    assert!(log.contains("pinging the systemd watchdog"), "{log}");
    assert!(log.contains("interval=300ms"), "{log}");
    // Pings 300 ms apart, half the watchdog's 600 ms: a daemon pinging at the whole interval,
    // or twice as often as it should, is outside these bounds. The median is read, so that a
    // ping that the daemon or this test was late for does not decide.
    let mut gaps: Vec<Duration> = pings.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort();
    let median = gaps[gaps.len() / 2];
    assert!(
        (Duration::from_millis(225)..=Duration::from_millis(450)).contains(&median),
        "gaps between pings: {gaps:?}"
    );
    child.signal(Signal::SIGTERM);
    assert_eq!(child.wait_exit(LIMIT), Some(0), "{}", child.log());
}

#[test]
fn given_zookeeper_is_unreachable_when_the_daemon_runs_then_status_says_paused_and_nothing_fires() {
    // Given: the zookeeper backend pointed at a port nobody listens on, and a task due every
    // second.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let scratch = Scratch::new();
    scratch.write_config(&format!(
        "[coordination]\nbackend = \"zookeeper\"\n\n[coordination.zookeeper]\nconnect = \"127.0.0.1:{port}\"\nsession_timeout = \"1s\"\n"
    ));
    let out = scratch.out("fired");
    scratch.write_task(
        "every-second",
        &format!(
            "schedule = \"* * * * * *\"\ncommand = 'echo x >> {}'\n",
            out.display()
        ),
    );
    let socket = scratch.path().join("notify.sock");
    let mut manager = ServiceManager::bind(&socket);

    // When: it runs.
    let mut child = start_notifying_daemon(&scratch, &socket, &[]);

    // Then: it is ready (the service is up) but paused while connecting...
    let ready = manager.wait_for("READY=1", LIMIT, |m| has_line(m, "READY=1"));
    let connect = format!("127.0.0.1:{port}");
    assert_eq!(
        status_of(&ready),
        Some(format!("paused: connecting to ZooKeeper at {connect}; firing nothing").as_str()),
        "{ready}"
    );
    // ...then says it cannot reach ZooKeeper, and why.
    let unreachable = manager.wait_for("STATUS= cannot reach ZooKeeper", LIMIT, |m| {
        status_of(m).is_some_and(|s| s.contains("cannot reach ZooKeeper"))
    });
    let status = status_of(&unreachable).unwrap();
    assert!(
        status.starts_with(&format!("paused: cannot reach ZooKeeper at {connect} (")),
        "{status}"
    );
    assert!(status.ends_with("; firing nothing"), "{status}");
    // Several connection attempts (seconds, each with a due tick) pass, and nothing fires.
    wait_for("a third failed connection attempt", LIMIT, || {
        child.log().matches("cannot connect to ZooKeeper").count() >= 3
    });
    assert!(scratch.lines("fired").is_empty(), "{}", child.log());
    child.signal(Signal::SIGTERM);
    manager.wait_for("STOPPING=1", LIMIT, |m| has_line(m, "STOPPING=1"));
    assert_eq!(child.wait_exit(LIMIT), Some(0), "{}", child.log());
    assert!(scratch.lines("fired").is_empty(), "{}", child.log());
}

#[test]
fn given_a_zookeeper_node_when_the_server_goes_away_and_returns_then_status_follows() {
    // Given: a node on a real ZooKeeper, leading its one task.
    let mut server = common::zk::ZkServer::start();
    let connect = server.chroot_connect();
    let scratch = Scratch::new();
    scratch.write_config(&format!(
        "[coordination]\nbackend = \"zookeeper\"\n\n[coordination.zookeeper]\nconnect = \"{connect}\"\nsession_timeout = \"30s\"\n"
    ));
    scratch.write_task("hourly", "schedule = \"@hourly\"\ncommand = \"true\"\n");
    let socket = scratch.path().join("notify.sock");
    let mut manager = ServiceManager::bind(&socket);
    let mut child = start_notifying_daemon(&scratch, &socket, &[]);
    manager.wait_for("STATUS=leading 1 of 1 tasks", LIMIT, |m| {
        status_of(m) == Some("leading 1 of 1 tasks")
    });

    // When the server stops: paused, saying it is disconnected.
    server.stop();
    let paused = manager.wait_for_next("a paused STATUS", LIMIT, |m| {
        status_of(m).is_some_and(|s| s.starts_with("paused:"))
    });
    assert_eq!(
        status_of(&paused),
        Some(
            format!(
                "paused: disconnected from ZooKeeper at {connect}; waiting to reconnect; firing nothing"
            )
            .as_str()
        ),
        "{paused}"
    );

    // When it is back (within the session timeout): leading again, the reason gone.
    server.start_again();
    manager.wait_for_next("STATUS=leading 1 of 1 tasks again", LIMIT, |m| {
        status_of(m) == Some("leading 1 of 1 tasks")
    });
    child.signal(Signal::SIGTERM);
    assert_eq!(child.wait_exit(LIMIT), Some(0), "{}", child.log());
}

#[test]
fn given_systemd_state_directory_when_run_names_no_state_dir_then_the_records_go_there() {
    // Given: what StateDirectory=zkcron hands the daemon, and a config that names no state_dir.
    let scratch = Scratch::new();
    scratch.write_config("");
    let state = scratch.path().join("var-lib-zkcron");
    std::fs::create_dir(&state).unwrap();
    let out = scratch.out("fired");
    scratch.write_task(
        "tick",
        &format!(
            "schedule = \"* * * * * *\"\ncommand = 'echo x >> {}'\n",
            out.display()
        ),
    );

    // When: `zkcron run` starts without --state-dir, as the unit's ExecStart does.
    let mut command = scratch.daemon_command();
    command.env("STATE_DIRECTORY", &state);
    let mut child = scratch.spawn_daemon(command);

    // Then: its lock and fire records are in that directory.
    wait_for("a tick to fire", LIMIT, || {
        !scratch.lines("fired").is_empty()
    });
    assert!(state.join("zkcron.lock").exists(), "{}", child.log());
    assert!(
        child
            .log()
            .contains(&format!("state_dir={}", state.display())),
        "{}",
        child.log()
    );
    child.signal(Signal::SIGTERM);
    assert_eq!(child.wait_exit(LIMIT), Some(0), "{}", child.log());
    let records: Vec<String> = std::fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        records
            .iter()
            .any(|name| name.starts_with("journal") || name.starts_with("snapshot")),
        "{records:?}"
    );
}
