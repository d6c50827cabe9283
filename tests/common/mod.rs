//! Shared helpers for the end-to-end tests: a scratch directory with a jobs dir, the real
//! `zkcron` binary, a running daemon, and waiting for conditions with a deadline that says what
//! it waited for (never sleep-and-hope). The cluster tests build on [`zk`] (ZooKeeper, one per
//! test binary, and the one node spawner, `ClusterNode`), [`cluster`] (a cluster in a chroot of
//! its own) and [`fires`] (the one reader of what the jobs write); [`cancel`] what both
//! backends' backfill cancels are held to.
#![allow(dead_code)]

pub mod browser;
pub mod cancel;
pub mod cluster;
pub mod fires;
pub mod tmpfs;
pub mod wall;
pub mod zk;

use std::fs::{self, Permissions};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use zkcron::task::{Identity, TaskBackend, TaskDefaults};

/// The tests' task defaults (`TaskDefaults::for_tests`, which the unit tests use too) for a
/// load by `identity` for `backend`. A test of the defaults themselves changes a field of these
/// (`TaskDefaults { user: .., ..task_defaults(..) }`).
pub fn task_defaults(identity: Identity, backend: TaskBackend) -> TaskDefaults {
    TaskDefaults {
        identity,
        backend,
        ..TaskDefaults::for_tests()
    }
}

/// The identity of a load as root (so `user` and `group` are allowed), whoever runs the tests.
pub fn root_identity() -> Identity {
    Identity {
        uid: 0,
        user_name: "root".into(),
    }
}

pub fn zkcron() -> Command {
    Command::new(env!("CARGO_BIN_EXE_zkcron"))
}

/// Runs `zkcron args...` to completion.
pub fn run_zkcron(args: &[&str]) -> Output {
    zkcron()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("zkcron runs")
}

/// Makes the calling test run as root, for what only root may do but root of a user namespace
/// does as well (zkcron's checks of its own effective uid). As root it returns false and the
/// test goes on; otherwise see [`rerun_in_namespace`]: `needs` says what the test does as root.
pub fn rerun_as_namespace_root(test: &str, needs: &str) -> bool {
    rerun_in_namespace(test, &["--user", "--map-root-user"], needs)
}

/// When this process is not root, re-runs `test` of this test binary under `unshare
/// <namespaces>` (with `--map-root-user`: as root there) and returns true once that run passed:
/// the caller returns, the re-run did the work. As root it returns false. It panics, saying what
/// the test `needs` and how to run it, when that is impossible or the re-run failed.
pub fn rerun_in_namespace(test: &str, namespaces: &[&str], needs: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return false;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = Command::new("unshare")
        .args(namespaces)
        .arg("--")
        .arg(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .output()
        .unwrap_or_else(|error| {
            panic!(
                "{test} {needs} and needs root: run the tests as root, or install util-linux's \
                 `unshare` to run it in a user namespace ({error})"
            )
        });
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{test} under `unshare {}` failed ({}); it {needs} and needs root, or unprivileged user \
         namespaces (sysctl kernel.unprivileged_userns_clone=1):\n{stdout}\n{stderr}",
        namespaces.join(" "),
        output.status
    );
    print!("{stdout}");
    eprint!("{stderr}");
    true
}

/// Polls `condition` every 20 ms until it holds or `limit` passes; panics with `what` then.
#[allow(clippy::disallowed_methods)]
pub fn wait_for(what: &str, limit: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        if Instant::now() > deadline {
            panic!("timed out after {limit:?} waiting for: {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A temp dir that only its owner can write, whatever the umask. zkcron refuses a jobs dir or
/// config file in a directory others can write, and the tempfile crate's dirs follow the umask
/// (0775 under the common umask 002).
pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .permissions(Permissions::from_mode(0o700))
        .tempdir()
        .expect("temp dir")
}

/// A scratch directory with `jobs.d/`, `state/` and `out/`.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Scratch {
        let dir = tempdir();
        for sub in ["jobs.d", "state", "out"] {
            fs::create_dir(dir.path().join(sub)).unwrap();
        }
        // Whatever the umask: zkcron refuses a jobs dir that others can write.
        fs::set_permissions(dir.path().join("jobs.d"), Permissions::from_mode(0o755)).unwrap();
        Scratch { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn jobs(&self) -> PathBuf {
        self.path().join("jobs.d")
    }

    pub fn out(&self, name: &str) -> PathBuf {
        self.path().join("out").join(name)
    }

    /// Writes a task file atomically (write + rename), as config management tools do, so the
    /// daemon never reads half a file.
    pub fn write_task(&self, name: &str, text: &str) {
        let temp = self.path().join(format!(".{name}.tmp"));
        fs::write(&temp, text).unwrap();
        fs::set_permissions(&temp, Permissions::from_mode(0o644)).unwrap();
        fs::rename(&temp, self.jobs().join(format!("{name}.toml"))).unwrap();
    }

    pub fn remove_task(&self, name: &str) {
        fs::remove_file(self.jobs().join(format!("{name}.toml"))).unwrap();
    }

    /// Writes the node config. Without an `[http]` section the endpoint is turned off: every
    /// test daemon would otherwise try the default 127.0.0.1:9464 (one wins, the others log an
    /// error), and a zkcron running on the host would be in the way. Tests of the endpoint
    /// give `[http] listen` themselves.
    pub fn write_config(&self, text: &str) -> PathBuf {
        let path = self.path().join("zkcron.toml");
        let text = if text.contains("[http]") {
            text.to_string()
        } else {
            format!("{text}\n[http]\nlisten = \"\"\n")
        };
        fs::write(&path, text).unwrap();
        fs::set_permissions(&path, Permissions::from_mode(0o644)).unwrap();
        path
    }

    /// Lines of an output file (empty when it does not exist yet).
    pub fn lines(&self, name: &str) -> Vec<String> {
        fs::read_to_string(self.out(name))
            .map(|s| s.lines().map(str::to_string).collect())
            .unwrap_or_default()
    }

    /// `zkcron run` on this scratch dir (its config and jobs dir), with stdin and stdout closed
    /// and no systemd environment inherited; add arguments and environment, then
    /// [`Scratch::spawn_daemon`].
    pub fn daemon_command(&self) -> Command {
        let mut command = zkcron();
        command
            .arg("run")
            .arg("--config")
            .arg(self.config_path())
            .arg("--jobs-dir")
            .arg(self.jobs())
            .env("ZKCRON_LOG", "info")
            .env_remove("JOURNAL_STREAM")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        command
    }

    /// Spawns `command` with its stderr (the log) appended to `log.txt`.
    pub fn spawn_daemon(&self, mut command: Command) -> DaemonProcess {
        let log_path = self.path().join("log.txt");
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap();
        command.stderr(log);
        let child = zk::spawn_tied_to_process(command).expect("zkcron starts");
        DaemonProcess { child, log_path }
    }

    /// Starts `zkcron run` on this scratch dir (state in `state/`, node id `test-node`) and
    /// waits until it has started; the log goes to `log.txt`.
    pub fn start_daemon(&self, extra: &[&str]) -> DaemonProcess {
        let mut command = self.daemon_command();
        command
            .arg("--state-dir")
            .arg(self.path().join("state"))
            .args(["--node-id", "test-node"])
            .args(extra);
        let daemon = self.spawn_daemon(command);
        daemon.wait_for_log("zkcron started", Duration::from_secs(20));
        daemon
    }

    /// Runs `zkcron args...` to completion against the daemon [`Scratch::start_daemon`]
    /// starts: its config and state dir (the control socket's), no standard input.
    pub fn cli(&self, args: &[&str]) -> Output {
        zkcron()
            .args(args)
            .arg("--config")
            .arg(self.config_path())
            .arg("--state-dir")
            .arg(self.path().join("state"))
            .stdin(Stdio::null())
            .output()
            .expect("zkcron runs")
    }

    fn config_path(&self) -> PathBuf {
        let path = self.path().join("zkcron.toml");
        if !path.exists() {
            fs::write(&path, "[http]\nlisten = \"\"\n").unwrap();
        }
        path
    }
}

/// Writes an admin token file holding `token` in `dir`, mode 0600 (as `[http]
/// admin_token_file` requires); its path.
pub fn admin_token_file(dir: &Path, token: &str) -> PathBuf {
    let path = dir.join("admin.token");
    fs::write(&path, format!("{token}\n")).unwrap();
    fs::set_permissions(&path, Permissions::from_mode(0o600)).unwrap();
    path
}

/// A node config's `[http]` section: served on a free port of 127.0.0.1, with changes through
/// the API on when `token_file` is given.
pub fn http_config(token_file: Option<&Path>) -> String {
    let mut text = "[http]\nlisten = \"127.0.0.1:0\"\n".to_string();
    if let Some(file) = token_file {
        text.push_str(&format!("admin_token_file = \"{}\"\n", file.display()));
    }
    text
}

/// A local-backend daemon serving its HTTP endpoint: the set-up of the dashboard's and the
/// API's tests. Fields drop in order: the daemon is stopped before its files go.
pub struct Served {
    pub daemon: DaemonProcess,
    /// `127.0.0.1:<port>` it serves on.
    pub address: String,
    pub scratch: Scratch,
}

impl Served {
    /// Starts a daemon with `tasks` (name, task file) serving `[http]` on a free port, with
    /// an admin token file holding `token` when given.
    pub fn start(token: Option<&str>, tasks: &[(&str, &str)]) -> Served {
        let scratch = Scratch::new();
        let token_file = token.map(|token| admin_token_file(scratch.path(), token));
        scratch.write_config(&http_config(token_file.as_deref()));
        for (name, text) in tasks {
            scratch.write_task(name, text);
        }
        let daemon = scratch.start_daemon(&[]);
        let address = daemon.served_address();
        Served {
            daemon,
            address,
            scratch,
        }
    }
}

/// A running `zkcron run`. Killed on drop if still running.
pub struct DaemonProcess {
    pub child: Child,
    pub log_path: PathBuf,
}

impl DaemonProcess {
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    pub fn wait_for_log(&self, needle: &str, limit: Duration) {
        self.wait_for_log_line(
            &format!("a log line containing {needle:?}"),
            &[needle],
            limit,
        );
    }

    /// Waits for `what`: one line of the log that contains each of `needles`; fails saying
    /// what it waited for, with the log's last lines.
    pub fn wait_for_log_line(&self, what: &str, needles: &[&str], limit: Duration) {
        let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_for(
                &format!("{what} (a log line containing each of {needles:?})"),
                limit,
                || {
                    self.log()
                        .lines()
                        .any(|line| needles.iter().all(|n| line.contains(n)))
                },
            )
        }));
        if let Err(timed_out) = found {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            panic!(
                "{}\n--- the last lines of {}:\n{}",
                timed_out
                    .downcast_ref::<String>()
                    .map_or("timed out", String::as_str),
                self.log_path.display(),
                lines[lines.len().saturating_sub(40)..].join("\n")
            );
        }
    }

    /// Waits until `needle` appears `count` times in the log.
    pub fn wait_for_log_count(&self, needle: &str, count: usize, limit: Duration) {
        wait_for(
            &format!("{count} log lines containing {needle:?}"),
            limit,
            || self.log().matches(needle).count() >= count,
        );
    }

    /// The address of the daemon's HTTP endpoint, from its log: a daemon given `[http] listen
    /// = "127.0.0.1:0"` says which port it got (no race for a port).
    pub fn served_address(&self) -> String {
        const SERVING: &str = "serving /metrics, /healthz and /status on http://";
        self.wait_for_log(SERVING, Duration::from_secs(20));
        let log = self.log();
        let after = log.split(SERVING).nth(1).unwrap();
        after
            .split(|c: char| c.is_whitespace() || c == '"')
            .next()
            .unwrap()
            .to_string()
    }

    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), signal).unwrap();
    }

    /// Waits for the process to exit and returns its exit code.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let mut status = None;
        wait_for("zkcron to exit", limit, || {
            status = self.child.try_wait().unwrap();
            status.is_some()
        });
        status.unwrap().code()
    }
}

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        kill_process_tree(&mut self.child);
    }
}

/// Kills `child` and everything it started, with SIGKILL, and reaps `child`.
///
/// A daemon runs each job in a process group of its own, and a wrapper such as `faketime` runs
/// the daemon as its child, so killing the child alone leaves processes behind. This collects
/// every descendant first (from `/proc`, while the tree is still linked), then kills the
/// process group of each and each process itself.
pub fn kill_process_tree(child: &mut Child) {
    let root = child.id() as i32;
    if child.try_wait().ok().flatten().is_none() {
        let mut tree = vec![root];
        tree.extend(descendants(root));
        for pid in tree {
            let pid = nix::unistd::Pid::from_raw(pid);
            if let Ok(group) = nix::unistd::getpgid(Some(pid)) {
                // Never the test process's own group.
                if group != nix::unistd::getpgrp() {
                    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
                }
            }
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
    }
    let _ = child.wait();
}

/// Every live descendant of `pid`, read from `/proc/*/stat` (children before grandchildren).
pub fn descendants(pid: i32) -> Vec<i32> {
    let mut parents: Vec<(i32, i32)> = Vec::new();
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(p) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may contain spaces and parentheses.
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|ppid| ppid.parse::<i32>().ok());
        if let Some(ppid) = ppid {
            parents.push((p, ppid));
        }
    }
    let mut found = vec![pid];
    let mut next = 0;
    while next < found.len() {
        let parent = found[next];
        found.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        next += 1;
    }
    found.remove(0);
    found
}

/// True while a process with this pid exists (and is not a zombie).
pub fn process_alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Entries named like task files that are no task files, each with what zkcron calls it:
/// a directory, a FIFO, a socket, a dangling symlink and a symlink loop.
pub const ODD_ENTRIES: [(&str, &str); 5] = [
    ("dangling", "a symbolic link to gone, which does not exist"),
    ("fifo", "a named pipe (FIFO), not a task file"),
    (
        "loop",
        "a symbolic link that loops: resolving it never reaches a file (it points to loop.toml)",
    ),
    ("socket", "a socket, not a task file"),
    ("subdir", "a directory, not a task file"),
];

/// Creates the [`ODD_ENTRIES`] in `dir`, as `<name>.toml`. The socket exists while the returned
/// listener lives.
pub fn make_odd_entries(dir: &Path) -> std::os::unix::net::UnixListener {
    fs::create_dir(dir.join("subdir.toml")).unwrap();
    nix::unistd::mkfifo(
        &dir.join("fifo.toml"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    std::os::unix::fs::symlink("gone", dir.join("dangling.toml")).unwrap();
    std::os::unix::fs::symlink("loop.toml", dir.join("loop.toml")).unwrap();
    std::os::unix::net::UnixListener::bind(dir.join("socket.toml")).unwrap()
}

/// `GET path` from the HTTP endpoint at `address`: the status code and the body.
pub fn http_get(address: &str, path: &str) -> (u16, String) {
    http_request(address, "GET", path, &[], "")
}

/// `method path` with `headers` and `body` to the HTTP server at `address`: the status code
/// and the body (with a length, or in chunks, which are joined).
pub fn http_request(
    address: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream =
        std::net::TcpStream::connect(address).expect("the endpoint accepts connections");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut request =
        format!("{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if method != "GET" {
        request.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"));
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status code in {head:?}"));
    let chunked = head
        .lines()
        .any(|l| l.eq_ignore_ascii_case("transfer-encoding: chunked"));
    if !chunked {
        return (code, body.to_string());
    }
    // <hex size>\r\n<data>\r\n ... 0\r\n\r\n
    let mut joined = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16)
            .unwrap_or_else(|_| panic!("not a chunk size: {size:?} in {body:?}"));
        if size == 0 {
            break;
        }
        joined.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
    (code, joined)
}

/// The lines a child writes to `stdout`, read on a thread of their own, so that a test waits
/// for each with a deadline instead of blocking for ever.
pub fn lines_of(stdout: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (sender, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

/// The next line from [`lines_of`], failing after `limit` with `what`; `None` once the child
/// closed its output.
pub fn next_line(
    lines: &std::sync::mpsc::Receiver<String>,
    what: &str,
    limit: Duration,
) -> Option<String> {
    match lines.recv_timeout(limit) {
        Ok(line) => Some(line),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => None,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("timed out after {limit:?} waiting for {what}")
        }
    }
}
