//! How to reach the cluster: the `[zookeeper]` settings, connect-string parsing (the one place
//! it is done) and the checks of what ZooKeeper would refuse or silently change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use semver::Version;

use crate::coord::node::io::NodeAcl;
use crate::coord::node::{NodeBugs, NodeConfig};
use crate::coord::records::{NODE_ID_PATTERN, is_path_name};

use super::tls::check_secret_file;
pub use super::tls::{TlsSource, ZkTls};

/// How to reach the cluster, and who this node is.
#[derive(Debug, Clone)]
pub struct ZkSettings {
    /// `host:port[,host:port...][/chroot]`.
    pub connect: String,
    pub cluster: String,
    pub session_timeout: Duration,
    /// A node whose clock is further off ZooKeeper's than this leads nothing; `None` (the key
    /// is not set) means [`DEFAULT_MAX_CLOCK_SKEW`].
    pub max_clock_skew: Option<Duration>,
    pub node_id: String,
    pub release: Version,
    pub labels: BTreeMap<String, String>,
    /// `[scheduler] history_runs`.
    pub history_runs: usize,
    /// This node's HTTP endpoint as others reach it, advertised in its member record.
    pub http: Option<String>,
    /// `auth` / `auth_file`: the digest credentials, if any.
    pub auth: AuthSource,
    /// `tls = true` and its files; `None` for plain TCP.
    pub tls: Option<TlsSource>,
}

/// Digest credentials (`user:password`). Debug never shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct ZkAuth {
    pub user: String,
    password: String,
}

impl std::fmt::Debug for ZkAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ZkAuth({}:***)", self.user)
    }
}

impl ZkAuth {
    /// Parses `user:password`; the error says what is wrong without echoing the secret.
    pub fn parse(text: &str) -> Result<ZkAuth, String> {
        match text.split_once(':') {
            Some((user, password)) if !user.is_empty() && !password.is_empty() => Ok(ZkAuth {
                user: user.to_string(),
                password: password.to_string(),
            }),
            _ => Err(
                "is not `user:password` (a user name, a colon, a password; neither empty)".into(),
            ),
        }
    }

    /// The bytes of ZooKeeper's digest scheme.
    pub fn digest(&self) -> Vec<u8> {
        format!("{}:{}", self.user, self.password).into_bytes()
    }
}

/// Where the credentials come from: `[coordination.zookeeper] auth` or `auth_file`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum AuthSource {
    /// No authentication: znodes are created world-writable, as before.
    #[default]
    None,
    Inline(ZkAuth),
    /// Read (and its permissions checked) when the session is set up.
    File(PathBuf),
}

impl AuthSource {
    /// The credentials, reading and checking `auth_file`; `None` without authentication.
    pub fn resolve(&self) -> Result<Option<ZkAuth>, String> {
        match self {
            AuthSource::None => Ok(None),
            AuthSource::Inline(auth) => Ok(Some(auth.clone())),
            AuthSource::File(path) => read_auth_file(path).map(Some),
        }
    }
}

/// Reads a one-line `user:password` file, refusing one that others may read or that belongs
/// to neither this user nor root.
pub fn read_auth_file(path: &Path) -> Result<ZkAuth, String> {
    let shown = path.display();
    check_secret_file("auth_file", path)?;
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the ZooKeeper auth_file {shown}: {e}"))?;
    let mut lines = text.lines().filter(|line| !line.trim().is_empty());
    let (Some(line), None) = (lines.next(), lines.next()) else {
        return Err(format!(
            "the ZooKeeper auth_file {shown} must hold exactly one line `user:password`"
        ));
    };
    ZkAuth::parse(line.trim_end_matches('\r'))
        .map_err(|problem| format!("the line in the ZooKeeper auth_file {shown} {problem}"))
}

/// The one place that sets up a ZooKeeper session's options (the daemon's driver and the
/// cluster commands): session timeout, when given digest authentication, which the client sends
/// again on every connection of the session, and TLS. A new session (after expiry) is a new
/// connector, built here again.
pub fn connector(
    session_timeout: Duration,
    auth: Option<&ZkAuth>,
    tls: Option<&ZkTls>,
) -> Result<ZkConnector, String> {
    let connector = zookeeper_client::Client::connector().with_session_timeout(session_timeout);
    let connector = match auth {
        Some(auth) => connector.with_auth("digest", &auth.digest()),
        None => connector,
    };
    Ok(match tls {
        Some(tls) => ZkConnector {
            inner: connector.with_tls(tls.options()?),
            tls: Some(tls.clone()),
        },
        None => ZkConnector {
            inner: connector,
            tls: None,
        },
    })
}

/// A session's options from [`connector`]; [`ZkConnector::connect`] opens the session.
pub struct ZkConnector {
    inner: zookeeper_client::Connector,
    tls: Option<ZkTls>,
}

impl ZkConnector {
    /// How long one connection attempt to one server may take.
    pub fn with_connection_timeout(self, timeout: Duration) -> ZkConnector {
        ZkConnector {
            inner: self.inner.with_connection_timeout(timeout),
            ..self
        }
    }

    /// Opens a session on `hosts` (`host:port[,...][/chroot]`). With TLS, every server is
    /// reached over TLS, and a handshake of our own first says why TLS fails, when every server
    /// refuses it, instead of the library's retries until the session timeout.
    pub async fn connect(self, hosts: &str) -> Result<zookeeper_client::Client, String> {
        match self.tls {
            None => self.inner.connect(hosts).await.map_err(|e| e.to_string()),
            Some(tls) => {
                let servers = hosts.split('/').next().unwrap_or_default().to_string();
                tokio::task::spawn_blocking(move || tls.check_handshake(&servers, TLS_CHECK_LIMIT))
                    .await
                    .map_err(|e| format!("the TLS check did not finish: {e}"))??;
                self.inner
                    .secure_connect(hosts)
                    .await
                    .map_err(|e| e.to_string())
            }
        }
    }
}

/// How long the TLS check before a session may wait for each server.
const TLS_CHECK_LIMIT: Duration = Duration::from_secs(2);

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

/// `max_clock_skew` when the configuration does not set it. NTP keeps hosts within
/// milliseconds of each other; a node 2 s off has lost time sync. The claim's fencing does not
/// depend on clocks (no tick runs twice), but a node whose clock runs ahead fires its ticks early
/// and moves fire records ahead of the cluster's clock, so it must not lead. 2 s rather than
/// 1 s leaves room for the measurement's own error (it is bounded by a round trip) and for a
/// short step of a clock being corrected, without leadership flapping.
pub const DEFAULT_MAX_CLOCK_SKEW: Duration = Duration::from_secs(2);

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
    /// The node's configuration the driver runs with, from the settings: a random seed, this
    /// host, process and instant (`now`), and no deliberate protocol bug on.
    pub(super) fn node_config(
        &self,
        base: String,
        acl: NodeAcl,
        now: chrono::DateTime<chrono::Utc>,
    ) -> NodeConfig {
        NodeConfig {
            id: self.node_id.clone(),
            release: self.release.clone(),
            seed: rand::random(),
            base,
            connect: self.connect.clone(),
            session_timeout: self.session_timeout,
            max_clock_skew: Some(self.max_clock_skew.unwrap_or(DEFAULT_MAX_CLOCK_SKEW)),
            labels: self.labels.clone(),
            host: nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default(),
            pid: std::process::id(),
            http: self.http.clone(),
            started_at: now,
            history_runs: self.history_runs,
            acl,
            bugs: NodeBugs::default(),
        }
    }

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
        self.auth.resolve()?;
        if let Some(tls) = &self.tls {
            tls.resolve()?.options()?;
        }
        Ok((hosts, chroot))
    }
}

/// Checks that a node id or cluster name can be one element of a ZooKeeper path.
pub fn validate_name(what: &str, name: &str) -> Result<(), String> {
    if is_path_name(name) {
        Ok(())
    } else {
        Err(format!(
            "{what} `{name}` cannot be part of a ZooKeeper path; it must match {}",
            NODE_ID_PATTERN
        ))
    }
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

    #[test]
    fn credentials_must_be_user_colon_password_and_never_show_the_password() {
        let auth = ZkAuth::parse("zkcron:pa:ss").unwrap();
        assert_eq!(auth.user, "zkcron");
        assert_eq!(auth.digest(), b"zkcron:pa:ss");
        assert_eq!(format!("{auth:?}"), "ZkAuth(zkcron:***)");
        for bad in ["zkcron", ":pass", "zkcron:", ""] {
            assert_eq!(
                ZkAuth::parse(bad).unwrap_err(),
                "is not `user:password` (a user name, a colon, a password; neither empty)",
                "{bad:?}"
            );
        }
    }

    fn secret_file(text: &str, mode: u32) -> (tempfile::TempDir, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("zk.secret");
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        (dir, path)
    }

    #[test]
    fn an_auth_file_is_one_private_line() {
        let (_dir, path) = secret_file("zkcron:s3cret\n", 0o600);
        let auth = AuthSource::File(path.clone()).resolve().unwrap().unwrap();
        assert_eq!(auth.digest(), b"zkcron:s3cret");
        let (_dir, path) = secret_file("zkcron:s3cret\r\n", 0o400);
        assert_eq!(read_auth_file(&path).unwrap().digest(), b"zkcron:s3cret");
    }

    #[test]
    fn an_auth_file_others_may_read_is_refused_with_chmod_600() {
        let (_dir, path) = secret_file("zkcron:s3cret\n", 0o640);
        let shown = path.display();
        assert_eq!(
            read_auth_file(&path).unwrap_err(),
            format!(
                "the ZooKeeper auth_file {shown} may be read by group or others (mode 640); \
                 run `chmod 600 {shown}`"
            )
        );
        let (_dir, path) = secret_file("zkcron:s3cret\n", 0o604);
        assert!(read_auth_file(&path).unwrap_err().contains("(mode 604)"));
    }

    #[test]
    fn a_broken_auth_file_is_refused_naming_it() {
        let (_dir, path) = secret_file("zkcron:a\nzkcron:b\n", 0o600);
        let shown = path.display();
        assert_eq!(
            read_auth_file(&path).unwrap_err(),
            format!("the ZooKeeper auth_file {shown} must hold exactly one line `user:password`")
        );
        let (_dir, path) = secret_file("\n", 0o600);
        assert!(
            read_auth_file(&path)
                .unwrap_err()
                .contains("must hold exactly one line")
        );
        let (_dir, path) = secret_file("justapassword\n", 0o600);
        let shown = path.display();
        assert_eq!(
            read_auth_file(&path).unwrap_err(),
            format!(
                "the line in the ZooKeeper auth_file {shown} is not `user:password` (a user \
                 name, a colon, a password; neither empty)"
            )
        );
        let missing = path.with_file_name("absent");
        let error = read_auth_file(&missing).unwrap_err();
        assert!(
            error.starts_with(&format!(
                "cannot read the ZooKeeper auth_file {}: ",
                missing.display()
            )),
            "{error}"
        );
    }

    #[test]
    fn an_auth_file_of_another_user_is_refused() {
        // Only root can give a file away, so the owner rule is checked apart from the file,
        // for a root daemon and another user's alike (`tls::owner_problem`, which
        // `check_secret_file` applies to the file's owner); this user's own file reads.
        use super::super::tls::owner_problem;
        let (_dir, path) = secret_file("zkcron:s3cret\n", 0o600);
        assert!(read_auth_file(&path).is_ok());
        let shown = path.display();
        assert_eq!(
            owner_problem("auth_file", &path, 65534, 0),
            Some(format!(
                "the ZooKeeper auth_file {shown} belongs to uid 65534, neither this user (uid 0) \
                 nor root; `chown` it to the user zkcron runs as and `chmod 600 {shown}`"
            ))
        );
        assert!(owner_problem("auth_file", &path, 1000, 1001).is_some());
        assert_eq!(owner_problem("auth_file", &path, 0, 1000), None);
    }

    /// Every deliberate protocol bug the simulation proves its checker on is off in the node
    /// the driver runs: its claims are the fenced multi-op (`node::tests` shows what that
    /// sends).
    #[test]
    fn the_driver_s_node_has_no_deliberate_bug_on() {
        let settings = ZkSettings {
            connect: "127.0.0.1:1/chroot".into(),
            cluster: "test".into(),
            session_timeout: Duration::from_secs(10),
            max_clock_skew: None,
            node_id: "node-a".into(),
            release: semver::Version::new(1, 2, 3),
            labels: Default::default(),
            history_runs: 10,
            http: None,
            auth: Default::default(),
            tls: None,
        };
        let config = settings.node_config(
            "/chroot/zkcron/test".into(),
            NodeAcl::Open,
            chrono::DateTime::UNIX_EPOCH,
        );
        assert_eq!(
            config.bugs,
            NodeBugs {
                unfenced_claim: false,
                stray_leases_checked_only_when_leading: false,
                backfill_claim_keeps_progress: false,
                every_node_as_leader: false,
                chain_request_apart: false,
                pool_runs_every_item: false,
                pause_apart: false,
                runs_unlimited: false,
            }
        );
        assert_eq!(
            (
                config.id.as_str(),
                config.base.as_str(),
                config.max_clock_skew
            ),
            (
                "node-a",
                "/chroot/zkcron/test",
                Some(DEFAULT_MAX_CLOCK_SKEW)
            )
        );
    }
}
