//! TLS to ZooKeeper (`[coordination.zookeeper] tls = true`, `tls_ca_file`, `tls_cert_file`,
//! `tls_key_file`): reading and checking the PEM files, the client's TLS options, and a
//! handshake of our own before a session is opened, which says why TLS fails (the client library
//! only retries until the session timeout and reports a timeout).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// How an error from [`ZkTls::check_handshake`] begins: callers that add their own hint
/// leave it off, because this error already names the TLS settings to check.
pub const TLS_FAILED: &str = "TLS to ZooKeeper failed";

/// The TLS files of `[coordination.zookeeper]`, as configured (paths relative to the config
/// file already resolved). They are read, and checked, when a session is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSource {
    /// `tls_ca_file`: the CA certificate(s), PEM, that signed the servers' certificates.
    pub ca_file: PathBuf,
    /// `tls_cert_file` and `tls_key_file`: this node's certificate and private key, PEM, for
    /// servers that ask for client certificates (`ssl.clientAuth`).
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// The TLS material, read and checked.
#[derive(Clone)]
pub struct ZkTls {
    ca_pem: String,
    roots: Arc<rustls::RootCertStore>,
    identity: Option<(String, String)>,
    /// Where `identity` was read from, for messages.
    identity_files: Option<(PathBuf, PathBuf)>,
}

impl std::fmt::Debug for ZkTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ZkTls({} CA certificate(s)", self.roots.len())?;
        if self.identity.is_some() {
            write!(f, ", a client certificate")?;
        }
        write!(f, ")")
    }
}

impl TlsSource {
    /// Reads and checks the files: each readable and PEM, the key file private to this user.
    pub fn resolve(&self) -> Result<ZkTls, String> {
        let (ca_pem, ca) = read_certificates("tls_ca_file", &self.ca_file)?;
        let mut roots = rustls::RootCertStore::empty();
        for (n, cert) in ca.into_iter().enumerate() {
            roots.add(cert).map_err(|e| {
                format!(
                    "certificate {} in the ZooKeeper tls_ca_file {} is not a usable CA \
                     certificate: {e}",
                    n + 1,
                    self.ca_file.display()
                )
            })?;
        }
        let identity = match &self.identity {
            None => None,
            Some((cert_file, key_file)) => {
                let (cert_pem, _) = read_certificates("tls_cert_file", cert_file)?;
                let key_pem = read_private_key(key_file)?;
                Some((cert_pem, key_pem))
            }
        };
        let tls = ZkTls {
            ca_pem,
            roots: Arc::new(roots),
            identity,
            identity_files: self.identity.clone(),
        };
        // A key that is not the certificate's is refused now, not at the first connection.
        tls.client_config(Arc::default())?;
        Ok(tls)
    }
}

fn read_text(key: &str, path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the ZooKeeper {key} {}: {e}", path.display()))
}

/// The file's text and its certificates; an error naming `key` and the file when it has none.
fn read_certificates(
    key: &str,
    path: &Path,
) -> Result<(String, Vec<CertificateDer<'static>>), String> {
    let text = read_text(key, path)?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(text.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| {
            format!(
                "the ZooKeeper {key} {} is not valid PEM: {e}",
                path.display()
            )
        })?;
    if certs.is_empty() {
        return Err(format!(
            "the ZooKeeper {key} {} holds no PEM certificate (`-----BEGIN CERTIFICATE-----`)",
            path.display()
        ));
    }
    Ok((text, certs))
}

/// Refuses a secret file of `[coordination.zookeeper]` (`key`: `auth_file`, `tls_key_file`)
/// that group or others may read, or that belongs to neither this user nor root. Here, below
/// the settings, because the key file and the settings' `auth_file` are checked alike.
pub(super) fn check_secret_file(key: &str, path: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let shown = path.display();
    let meta = std::fs::metadata(path)
        .map_err(|e| format!("cannot read the ZooKeeper {key} {shown}: {e}"))?;
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "the ZooKeeper {key} {shown} may be read by group or others (mode {:o}); run `chmod 600 {shown}`",
            meta.mode() & 0o777
        ));
    }
    match owner_problem(key, path, meta.uid(), nix::unistd::geteuid().as_raw()) {
        Some(problem) => Err(problem),
        None => Ok(()),
    }
}

/// Why a secret file `key` at `path` owned by uid `owner` is refused to a daemon running as
/// uid `me`: it belongs to neither `me` nor root. Apart from the file so that every pair of
/// users is tested, not only those the tests' user can make.
pub(super) fn owner_problem(key: &str, path: &Path, owner: u32, me: u32) -> Option<String> {
    let shown = path.display();
    (owner != me && owner != 0).then(|| {
        format!(
            "the ZooKeeper {key} {shown} belongs to uid {owner}, neither this user (uid {me}) nor root; `chown` it to the user zkcron runs as and `chmod 600 {shown}`"
        )
    })
}

/// The key file's text, refused when group or others may read it or it belongs to neither this
/// user nor root (like `auth_file`), or when it holds no PEM private key.
fn read_private_key(path: &Path) -> Result<String, String> {
    let shown = path.display();
    check_secret_file("tls_key_file", path)?;
    let text = read_text("tls_key_file", path)?;
    match PrivateKeyDer::from_pem_slice(text.as_bytes()) {
        Ok(_) => Ok(text),
        Err(rustls::pki_types::pem::Error::NoItemsFound) => Err(format!(
            "the ZooKeeper tls_key_file {shown} holds no PEM private key (`-----BEGIN PRIVATE \
             KEY-----`, or an RSA or EC one)"
        )),
        Err(e) => Err(format!(
            "the ZooKeeper tls_key_file {shown} is not valid PEM: {e}"
        )),
    }
}

impl ZkTls {
    /// The client library's options: the CA and, when given, the client certificate. The
    /// server's certificate must name the host as written in the connect string (a DNS name or
    /// an IP address in its subject alternative names).
    pub fn options(&self) -> Result<zookeeper_client::TlsOptions, String> {
        let options = zookeeper_client::TlsOptions::new()
            .with_pem_ca(&self.ca_pem)
            .map_err(|e| format!("the ZooKeeper tls_ca_file: {e}"))?;
        match &self.identity {
            None => Ok(options),
            Some((cert, key)) => options
                .with_pem_identity(cert, key)
                .map_err(|e| format!("the ZooKeeper tls_cert_file and tls_key_file: {e}")),
        }
    }

    fn client_config(&self, asked: Arc<AtomicBool>) -> Result<rustls::ClientConfig, String> {
        let builder = rustls::ClientConfig::builder().with_root_certificates(self.roots.clone());
        match &self.identity {
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| e.to_string())?;
                let key =
                    PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| e.to_string())?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    let (cert_file, key_file) = self
                        .identity_files
                        .as_ref()
                        .map_or((Default::default(), Default::default()), |(c, k)| {
                            (c.display().to_string(), k.display().to_string())
                        });
                    format!(
                        "the ZooKeeper tls_key_file {key_file} is not the private key of the \
                         certificate in tls_cert_file {cert_file}: {e}"
                    )
                })
            }
            None => Ok(builder.with_client_cert_resolver(Arc::new(NoClientCert(asked)))),
        }
    }

    /// A TLS handshake of our own with each server of `hosts` in turn (blocking; at most
    /// `limit` per server), before the client library opens a session: `Ok` as soon as one
    /// server accepts us, or when none answers at all (then the session's own attempts report
    /// it); an error saying why when every server that answered refused TLS.
    pub fn check_handshake(&self, hosts: &str, limit: Duration) -> Result<(), String> {
        let mut refusals = Vec::new();
        for host in hosts.split(',') {
            match self.handshake(host, limit) {
                Ok(()) => return Ok(()),
                Err(Refusal::Unreachable) => {}
                Err(Refusal::Tls(why)) => refusals.push(format!("{host}: {why}")),
            }
        }
        if refusals.is_empty() {
            return Ok(());
        }
        Err(format!(
            "{TLS_FAILED}: {}; check tls_ca_file (the CA that signed the servers' \
             certificates), that each server's certificate names the host as the connect string \
             writes it, and tls_cert_file/tls_key_file if the servers ask for client certificates",
            refusals.join("; ")
        ))
    }

    fn handshake(&self, host: &str, limit: Duration) -> Result<(), Refusal> {
        let (name, _) = host.rsplit_once(':').ok_or(Refusal::Unreachable)?;
        let name = name.trim_start_matches('[').trim_end_matches(']');
        let server = ServerName::try_from(name.to_string())
            .map_err(|e| Refusal::Tls(format!("`{name}` is not a host name for TLS: {e}")))?;
        let address = host
            .to_socket_addrs()
            .ok()
            .and_then(|mut all| all.next())
            .ok_or(Refusal::Unreachable)?;
        let mut tcp =
            TcpStream::connect_timeout(&address, limit).map_err(|_| Refusal::Unreachable)?;
        let _ = tcp.set_read_timeout(Some(limit));
        let _ = tcp.set_write_timeout(Some(limit));
        let asked = Arc::new(AtomicBool::new(false));
        let config = self.client_config(asked.clone()).map_err(Refusal::Tls)?;
        let mut tls = rustls::ClientConnection::new(Arc::new(config), server)
            .map_err(|e| Refusal::Tls(e.to_string()))?;
        while tls.is_handshaking() {
            tls.complete_io(&mut tcp).map_err(|e| {
                // TLS 1.2: a server that needs a client certificate refuses in the handshake.
                if asked.load(Ordering::Relaxed) {
                    Refusal::Tls(format!(
                        "the server requires a client certificate ({}); set tls_cert_file and \
                         tls_key_file",
                        tls_error(e)
                    ))
                } else {
                    Refusal::Tls(tls_error(e))
                }
            })?;
        }
        if asked.load(Ordering::Relaxed) {
            // The server asked for a client certificate and got none: with `ssl.clientAuth =
            // need` it refuses us right after the handshake; with `want` it waits for our
            // request. A short read tells which.
            let _ = tcp.set_read_timeout(Some(Duration::from_millis(500)));
            let mut stream = rustls::Stream::new(&mut tls, &mut tcp);
            let _ = stream.flush();
            match stream.read(&mut [0; 1]) {
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                    return Err(Refusal::Tls(format!(
                        "the server requires a client certificate ({}); set tls_cert_file and \
                         tls_key_file",
                        tls_error(e)
                    )));
                }
                Ok(0) => {
                    return Err(Refusal::Tls(
                        "the server closed the connection after asking for a client \
                         certificate; set tls_cert_file and tls_key_file"
                            .into(),
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

enum Refusal {
    /// No TCP connection (down, or not there): not a TLS problem.
    Unreachable,
    Tls(String),
}

/// rustls' error inside an I/O error, e.g. "invalid peer certificate: UnknownIssuer".
fn tls_error(error: std::io::Error) -> String {
    match error.get_ref() {
        Some(inner) => inner.to_string(),
        None => error.to_string(),
    }
}

/// The client-certificate resolver without a certificate: it notes that the server asked.
#[derive(Debug)]
struct NoClientCert(Arc<AtomicBool>);

impl rustls::client::ResolvesClientCert for NoClientCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        self.0.store(true, Ordering::Relaxed);
        None
    }

    fn has_certs(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A throw-away self-signed CA made for these tests (`openssl req -x509 -newkey ec`), and
    /// its key: only parsed here, never trusted by anything.
    const CA_PEM: &str = "\
-----BEGIN CERTIFICATE-----\n\
MIIBlDCCATmgAwIBAgIUL3MrSbRliemOhc0PXkWdMa9lNtIwCgYIKoZIzj0EAwIw\n\
HjEcMBoGA1UEAwwTemtjcm9uIHVuaXQtdGVzdCBDQTAgFw0yNjExMjMxMjM0MjNa\n\
GA8yMTI2MTAzMDEyMzQyM1owHjEcMBoGA1UEAwwTemtjcm9uIHVuaXQtdGVzdCBD\n\
QTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABMc1RZSGFTYdKI9QUrTLADzGX+xV\n\
mV+yV4KOvzws2mgqKrvTOsSQBKK85qKoyRrJZ3m/2XTuwVVNqVvORPx1YCKjUzBR\n\
MB0GA1UdDgQWBBRT2UwZvHpJTvpJPmOCvkaeEhUDnTAfBgNVHSMEGDAWgBRT2UwZ\n\
vHpJTvpJPmOCvkaeEhUDnTAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0kA\n\
MEYCIQC8E+OBYWaJ0NgQqfpnUn3eX3fo2d4EOMdtV3eiIBWbTgIhAKUeUE9lF9rR\n\
plw8vJt05QBaZrNndQlv9KF6AMfzrbeg\n\
-----END CERTIFICATE-----\n\
";
    const KEY_PEM: &str = "\
-----BEGIN PRIVATE KEY-----\n\
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgFSfP/BqJb/9O4ui7\n\
bv2fXT6eigJ/qbUbJwl2pKMVK3+hRANCAATHNUWUhhU2HSiPUFK0ywA8xl/sVZlf\n\
sleCjr88LNpoKiq70zrEkASivOaiqMkayWd5v9l07sFVTalbzkT8dWAi\n\
-----END PRIVATE KEY-----\n\
";

    /// Another throw-away key (`openssl genpkey -algorithm ec`), not the one of `CA_PEM`.
    const OTHER_KEY_PEM: &str = "\
-----BEGIN PRIVATE KEY-----\n\
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgBnpTWDkgTQp84USg\n\
Jsr9yciCa4r5G4A/wTWLndniUuKhRANCAASFOPK3Tadyz8Zzwn1Nu1nDtfoqfPAp\n\
lgWOd2ku+478NO+Zky7ejOUSsqvHRfRdi+YBiZ4DokLFzbqud7JHPtNK\n\
-----END PRIVATE KEY-----\n\
";

    fn file(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn tls_files_that_are_pem_resolve_into_client_options() {
        let dir = tempfile::tempdir().unwrap();
        let ca_file = file(dir.path(), "ca.pem", CA_PEM, 0o644);
        let tls = TlsSource {
            ca_file: ca_file.clone(),
            identity: None,
        }
        .resolve()
        .unwrap();
        assert_eq!(format!("{tls:?}"), "ZkTls(1 CA certificate(s))");
        tls.options().unwrap();
        let tls = TlsSource {
            ca_file,
            identity: Some((
                file(dir.path(), "node.pem", CA_PEM, 0o644),
                file(dir.path(), "node.key", KEY_PEM, 0o600),
            )),
        }
        .resolve()
        .unwrap();
        assert_eq!(
            format!("{tls:?}"),
            "ZkTls(1 CA certificate(s), a client certificate)"
        );
        tls.options().unwrap();
    }

    #[test]
    fn each_broken_tls_file_is_refused_naming_its_key_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let good_ca = file(dir.path(), "ca.pem", CA_PEM, 0o644);
        let good_cert = file(dir.path(), "node.pem", CA_PEM, 0o644);
        let good_key = file(dir.path(), "node.key", KEY_PEM, 0o600);
        let missing = dir.path().join("absent.pem");
        let not_pem = file(dir.path(), "notes.txt", "hello\n", 0o600);
        let key_only = file(dir.path(), "key-only.pem", KEY_PEM, 0o600);
        let open_key = file(dir.path(), "open.key", KEY_PEM, 0o640);
        let resolve = |ca: &Path, identity: Option<(&Path, &Path)>| {
            TlsSource {
                ca_file: ca.to_path_buf(),
                identity: identity.map(|(c, k)| (c.to_path_buf(), k.to_path_buf())),
            }
            .resolve()
            .unwrap_err()
        };
        let error = resolve(&missing, None);
        assert!(
            error.starts_with(&format!(
                "cannot read the ZooKeeper tls_ca_file {}: ",
                missing.display()
            )),
            "{error}"
        );
        assert_eq!(
            resolve(&not_pem, None),
            format!(
                "the ZooKeeper tls_ca_file {} holds no PEM certificate (`-----BEGIN \
                 CERTIFICATE-----`)",
                not_pem.display()
            )
        );
        assert_eq!(
            resolve(&key_only, None),
            format!(
                "the ZooKeeper tls_ca_file {} holds no PEM certificate (`-----BEGIN \
                 CERTIFICATE-----`)",
                key_only.display()
            )
        );
        assert_eq!(
            resolve(&good_ca, Some((&not_pem, &good_key))),
            format!(
                "the ZooKeeper tls_cert_file {} holds no PEM certificate (`-----BEGIN \
                 CERTIFICATE-----`)",
                not_pem.display()
            )
        );
        let error = resolve(&good_ca, Some((&good_cert, &missing)));
        assert!(
            error.starts_with(&format!(
                "cannot read the ZooKeeper tls_key_file {}: ",
                missing.display()
            )),
            "{error}"
        );
        let shown = open_key.display();
        assert_eq!(
            resolve(&good_ca, Some((&good_cert, &open_key))),
            format!(
                "the ZooKeeper tls_key_file {shown} may be read by group or others (mode 640); \
                 run `chmod 600 {shown}`"
            )
        );
        assert_eq!(
            resolve(&good_ca, Some((&good_cert, &not_pem))),
            format!(
                "the ZooKeeper tls_key_file {} holds no PEM private key (`-----BEGIN PRIVATE \
                 KEY-----`, or an RSA or EC one)",
                not_pem.display()
            )
        );
        // A key of another user is refused as an auth_file is, for a root daemon and any other
        // (the rule apart from the file: only root can give a file away).
        let shown = good_key.display();
        assert_eq!(
            owner_problem("tls_key_file", &good_key, 65534, 0),
            Some(format!(
                "the ZooKeeper tls_key_file {shown} belongs to uid 65534, neither this user (uid \
                 0) nor root; `chown` it to the user zkcron runs as and `chmod 600 {shown}`"
            ))
        );
        assert!(owner_problem("tls_key_file", &good_key, 1000, 1001).is_some());
        for (owner, me) in [(0, 0), (0, 1000), (1000, 1000), (65534, 65534)] {
            assert_eq!(owner_problem("tls_key_file", &good_key, owner, me), None);
        }
        let other_key = file(dir.path(), "other.key", OTHER_KEY_PEM, 0o600);
        assert_eq!(
            resolve(&good_ca, Some((&good_cert, &other_key))),
            format!(
                "the ZooKeeper tls_key_file {} is not the private key of the certificate in \
                 tls_cert_file {}: keys may not be consistent: KeyMismatch",
                other_key.display(),
                good_cert.display()
            )
        );
        let truncated = file(dir.path(), "cut.pem", &CA_PEM[..CA_PEM.len() - 30], 0o644);
        let error = resolve(&truncated, None);
        assert!(
            error.starts_with(&format!(
                "the ZooKeeper tls_ca_file {} is not valid PEM: ",
                truncated.display()
            )),
            "{error}"
        );
    }
}
