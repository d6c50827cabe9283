//! TLS to ZooKeeper end to end, against Debian's ZooKeeper serving TLS through its Netty server
//! (`ZkServer::start_tls` in tests/common/zk.rs) with a certificate for 127.0.0.1 from a test
//! CA and `ssl.clientAuth = need`: a node with the CA and a client certificate registers and
//! fires, the cluster commands read the cluster over TLS, and a client without the CA, or
//! without a client certificate, is refused with an error that says which.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use common::zk::{ClusterNode, TestPki, ZkServer};

const CLUSTER: &str = "tls";
const LIMIT: Duration = Duration::from_secs(30);

/// A config dir (`dir/<name>.toml`) naming TLS files of `pki`.
fn write_config(dir: &Path, name: &str, tls_keys: &str) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    fs::write(
        &path,
        format!("[coordination.zookeeper]\nsession_timeout = \"3s\"\n{tls_keys}"),
    )
    .unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    path
}

fn tls_keys(pki: &TestPki, ca: &str, client_certificate: bool) -> String {
    let mut keys = format!("tls = true\ntls_ca_file = \"{}\"\n", pki.path(ca).display());
    if client_certificate {
        keys += &format!(
            "tls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n",
            pki.path("client.pem").display(),
            pki.path("client.key").display()
        );
    }
    keys
}

/// `zkcron <args> --config <config> --zookeeper <connect> --cluster tls`.
fn cli(args: &[&str], config: &Path, connect: &str) -> Output {
    common::zkcron()
        .args(args)
        .arg("--config")
        .arg(config)
        .args(["--zookeeper", connect, "--cluster", CLUSTER])
        .stdin(Stdio::null())
        .output()
        .expect("zkcron runs")
}

fn dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("zkcron-tls-")
        .permissions(fs::Permissions::from_mode(0o755))
        .tempdir()
        .unwrap()
}

#[test]
fn a_node_with_the_ca_and_a_client_certificate_registers_over_tls_and_fires() {
    let pki = TestPki::new();
    let zk = ZkServer::start_tls(&pki, "need");
    let connect = zk.secure_connect_string();
    let dir = dir();
    let path = dir.path();
    fs::create_dir(path.join("jobs.d")).unwrap();
    let out = path.join("fired");
    fs::write(
        path.join("jobs.d/tick.toml"),
        format!(
            "schedule = \"* * * * * *\"\ncommand = [\"/bin/sh\", \"-c\", \"echo fired >> {}\"]\n",
            out.display()
        ),
    )
    .unwrap();
    let (home, jobs) = (path.join("n1"), path.join("jobs.d"));
    let node = ClusterNode {
        cluster: CLUSTER.into(),
        config: format!(
            "[coordination.zookeeper]\n{}",
            tls_keys(&pki, "ca.pem", true)
        ),
        ..ClusterNode::new(&home, &jobs, &connect, "n1")
    }
    .spawn();
    // The cluster commands read the node's config, and so its TLS settings.
    let config = home.join("zkcron.toml");
    node.wait_for_log("registered in ZooKeeper", LIMIT);
    common::wait_for("the task to fire over TLS", LIMIT, || {
        fs::read_to_string(&out).is_ok_and(|text| text.contains("fired"))
    });
    // The cluster commands go through the same connector: `status` reads the cluster over TLS.
    let status = cli(&["status"], &config, &connect);
    assert!(
        status.status.success(),
        "zkcron status over TLS failed: {}\n--- node log:\n{}",
        String::from_utf8_lossy(&status.stderr),
        node.log()
    );
    let stdout = String::from_utf8_lossy(&status.stdout);
    assert!(stdout.contains("n1") && stdout.contains("tick"), "{stdout}");
    // The server saw the client certificate: the sessions came over TLS, with this identity.
    let server_log = fs::read_to_string(zk.dir().join("zookeeper.log")).unwrap();
    assert!(
        server_log.contains("Authenticated Id 'CN=zkcron test client' for Scheme 'x509'"),
        "the server log shows no TLS client certificate:\n{}",
        zk.log_tail(60)
    );
}

#[test]
fn clients_without_the_ca_or_without_a_client_certificate_are_refused_saying_why() {
    let pki = TestPki::new();
    let zk = ZkServer::start_tls(&pki, "need");
    let connect = zk.secure_connect_string();
    let dir = dir();
    let refused = |config: &Path| {
        let out = cli(&["status"], config, &connect);
        assert!(!out.status.success(), "zkcron status succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };

    // A CA that did not sign the server's certificate.
    let config = write_config(
        dir.path(),
        "other-ca",
        &tls_keys(&pki, "other-ca.pem", true),
    );
    let stderr = refused(&config);
    assert!(
        stderr.contains(&format!(
            "cannot reach ZooKeeper at {connect}: TLS to ZooKeeper failed: {connect}: invalid \
             peer certificate: UnknownIssuer; check tls_ca_file"
        )),
        "{stderr}"
    );
    assert!(
        !stderr.contains("check --zookeeper"),
        "a TLS refusal points at the TLS settings, not the connect string: {stderr}"
    );

    // The right CA, but no client certificate for a server that needs one.
    let config = write_config(dir.path(), "no-cert", &tls_keys(&pki, "ca.pem", false));
    let stderr = refused(&config);
    assert!(
        stderr.contains(&format!(
            "cannot reach ZooKeeper at {connect}: TLS to ZooKeeper failed: {connect}: the server \
             requires a client certificate (received fatal alert: BadCertificate); set \
             tls_cert_file and tls_key_file"
        )),
        "{stderr}"
    );

    // A file named in the config that is not there.
    let missing = dir.path().join("absent.pem");
    let config = write_config(
        dir.path(),
        "missing",
        &format!("tls = true\ntls_ca_file = \"{}\"\n", missing.display()),
    );
    let stderr = refused(&config);
    assert!(
        stderr.contains(&format!(
            "cannot read the ZooKeeper tls_ca_file {}: ",
            missing.display()
        )),
        "{stderr}"
    );
}
