//! Tests of the ZooKeeper test harness itself (`tests/common/zk.rs`): a real server starts,
//! answers four-letter words, hands out isolated chroots, survives a restart with its data and
//! sessions, and is gone after drop; the binary's shared server is one, and is gone with its dir
//! when the binary exits. They need Debian's `zookeeper` package and never skip.

mod common;

use std::thread;
use std::time::Duration;

use common::process_alive;
use common::zk::{self, ZkServer};
use zookeeper_client::{Acls, CreateMode};

#[test]
fn given_zookeeper_installed_when_a_server_starts_then_it_serves_with_the_test_settings() {
    let server = ZkServer::start();

    assert_eq!(server.four_letter("ruok").unwrap(), "imok");
    let srvr = server.srvr();
    assert!(srvr.contains("Zookeeper version: 3."), "{srvr}");
    assert!(srvr.contains("Mode: standalone"), "{srvr}");
    assert!(srvr.contains("Node count:"), "{srvr}");
    assert!(
        server.mntr_value("zk_znode_count").is_some(),
        "{}",
        server.mntr()
    );
    assert_eq!(
        server.connect_string(),
        format!("127.0.0.1:{}", server.port())
    );
    // The settings the cluster tests rely on: a short tick, sessions from 1 s to 60 s.
    let conf = server.four_letter("conf").unwrap();
    for setting in [
        "tickTime=200",
        "minSessionTimeout=1000",
        "maxSessionTimeout=60000",
    ] {
        assert!(conf.contains(setting), "{setting} missing from:\n{conf}");
    }
}

#[test]
fn given_two_chroots_when_a_client_writes_in_one_then_the_other_does_not_see_it() {
    let server = ZkServer::start();
    let first = server.chroot_connect();
    let second = server.chroot_connect();
    assert_ne!(first, second);
    let prefix = format!("{}/zkcron-test-", server.connect_string());
    assert!(first.starts_with(&prefix), "{first}");
    let first_root = &first[server.connect_string().len()..];
    let second_root = &second[server.connect_string().len()..];

    // Both chroot znodes exist already: a daemon can use them as they are.
    let top = server.children("/");
    for root in [first_root, second_root] {
        assert!(
            top.contains(&root[1..].to_string()),
            "{root} missing from {top:?}"
        );
    }

    zk::with_client_at(&first, async |client| {
        let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
        client.create("/mine", b"1", &options).await.unwrap();
        assert_eq!(client.list_children("/").await.unwrap(), vec!["mine"]);
    });
    assert_eq!(server.children(first_root), vec!["mine"]);
    assert!(server.children(second_root).is_empty());
    zk::with_client_at(&second, async |client| {
        assert!(client.list_children("/").await.unwrap().is_empty());
    });
}

#[test]
fn given_a_session_with_an_ephemeral_when_the_server_restarts_then_data_and_session_survive() {
    let mut server = ZkServer::start();
    let port = server.port();
    server.create_persistent("/kept/deep");
    let count_before = server.mntr_value("zk_znode_count").unwrap();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let connect = server.connect_string();
    let client = runtime.block_on(async {
        let client = zk::connect_client(&connect, Duration::from_secs(10)).await;
        let options = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        client.create("/eph", b"", &options).await.unwrap();
        client
    });
    let session = client.session_id();

    assert!(server.describe_state().starts_with("running"));
    server.stop();
    assert!(!server.is_running());
    assert_eq!(server.describe_state(), "stopped by the test");
    assert!(
        zk::four_letter(port, "ruok").is_err(),
        "a stopped server answered"
    );

    server.start_again();
    assert_eq!(server.port(), port);
    assert_eq!(server.four_letter("ruok").unwrap(), "imok");
    assert_eq!(server.children("/kept"), vec!["deep"]);

    // The client reconnects on its own, within its session timeout, to the same session; its
    // ephemeral znode is still there.
    runtime.block_on(async {
        let stat = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                match client.check_stat("/eph").await {
                    Ok(stat) => break stat,
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        })
        .await
        .expect("the client to reconnect after the restart");
        assert!(
            stat.is_some(),
            "the ephemeral znode did not survive the restart"
        );
    });
    assert_eq!(client.session_id(), session);
    assert_eq!(
        server.mntr_value("zk_znode_count").unwrap(),
        count_before + 1
    );
    drop(client);
}

#[test]
fn given_a_server_started_on_a_thread_when_the_thread_ends_then_it_keeps_running_until_dropped() {
    // The parent-death signal is tied to the forking thread; servers must outlive the test
    // thread that started them (a shared server would), and die with their handle.
    let mut server = thread::spawn(ZkServer::start).join().unwrap();
    let pid = server.pid().unwrap() as i32;
    assert!(server.is_running());
    assert_eq!(server.four_letter("ruok").unwrap(), "imok");
    drop(server);
    assert!(!process_alive(pid), "the JVM {pid} outlived its ZkServer");
}

#[test]
fn given_a_server_killed_from_outside_then_failure_messages_say_it_died() {
    let server = ZkServer::start();
    let pid = server.pid().unwrap() as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    common::wait_for("the JVM to die", Duration::from_secs(10), || {
        !process_alive(pid)
    });
    assert!(
        server.describe_state().contains("DIED"),
        "{}",
        server.describe_state()
    );
}

#[test]
#[should_panic(expected = "apt-get install -y zookeeper")]
fn given_no_zookeeper_jar_when_a_server_is_required_then_it_fails_saying_how_to_install() {
    zk::require_zookeeper_at(std::path::Path::new("/nonexistent/zookeeper.jar"));
}

/// Run alone in a child test process by the test below, it prints the shared server's pid and
/// dir; in the whole suite it checks that the shared server serves and is one server.
#[test]
fn the_shared_server_serves_and_is_one_per_binary() {
    let server = zk::shared();
    assert_eq!(server.four_letter("ruok").unwrap(), "imok");
    assert!(std::ptr::eq(server, zk::shared()));
    let first = server.chroot_connect();
    assert_ne!(first, zk::shared().chroot_connect());
    println!(
        "shared server: pid {} dir {}",
        server.pid().unwrap(),
        server.dir().display()
    );
}

#[test]
fn given_the_shared_server_when_the_test_binary_exits_then_its_jvm_and_dir_are_gone() {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "the_shared_server_serves_and_is_one_per_binary",
            "--nocapture",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("shared server: pid "))
        .unwrap_or_else(|| panic!("the child test printed no server: {stdout}"));
    let (pid, dir) = line.split_once(" dir ").unwrap();
    let pid: i32 = pid.parse().unwrap();
    // The child process has exited and reaped its JVM: no wait needed, none allowed.
    assert!(
        !process_alive(pid),
        "the shared JVM {pid} outlived its test binary"
    );
    assert!(
        !std::path::Path::new(dir).exists(),
        "the shared server's dir {dir} outlived its test binary"
    );
}

/// ZooKeeper is started by this harness alone (`tests/common`): one server per test binary,
/// started once. A test file that ran a JVM of its own would start one per test again.
#[test]
fn no_test_file_outside_the_harness_starts_zookeeper_itself() {
    // Spelled in two halves, so that this file does not name them either.
    let main_classes = [
        concat!("ZooKeeper", "ServerMain"),
        concat!("Quorum", "PeerMain"),
    ];
    let tests = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut offenders = Vec::new();
    // A test binary of several files (`tests/daemon/main.rs` and its modules) is read whole;
    // the harness, `tests/common`, is the one place allowed to name them.
    let mut dirs = vec![tests.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() && path != tests.join("common") {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for class in main_classes.iter().filter(|c| text.contains(**c)) {
                    offenders.push(format!("{} names {class}", path.display()));
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "start ZooKeeper through tests/common/zk.rs (zk::shared, TestServer): {offenders:?}"
    );
}
