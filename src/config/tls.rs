//! The TLS keys of `[coordination.zookeeper]`: `tls`, `tls_ca_file`, `tls_cert_file`,
//! `tls_key_file`. The files are named here (relative to the config file's directory) and read,
//! and checked, when a session is set up, like `auth_file`.

use std::ops::Range;
use std::path::{Path, PathBuf};

use toml::Spanned;
use toml::de::DeValue;

use crate::coord::zk::TlsSource;
use crate::task::Checker;

/// The TLS keys as found in the section, with where they are, until the section is read.
#[derive(Default)]
pub(super) struct TlsKeys {
    tls: Option<(bool, Range<usize>)>,
    ca_file: Option<(PathBuf, Range<usize>)>,
    cert_file: Option<(PathBuf, Range<usize>)>,
    key_file: Option<(PathBuf, Range<usize>)>,
    /// A key was already reported (wrong type, empty): say nothing more about how they combine.
    reported: bool,
}

impl TlsKeys {
    /// Takes one of the keys (`k` is its name in the section).
    pub(super) fn take(
        &mut self,
        c: &mut Checker<'_>,
        k: &str,
        value: &Spanned<DeValue<'_>>,
        base: &Path,
    ) {
        let q = format!("coordination.zookeeper.{k}");
        if k == "tls" {
            self.tls = c.boolean(&q, value).map(|on| (on, value.span()));
            self.reported |= self.tls.is_none();
            return;
        }
        let Some(path) = c.path(&q, value) else {
            self.reported = true;
            return;
        };
        let found = Some((base.join(path), value.span()));
        match k {
            "tls_ca_file" => self.ca_file = found,
            "tls_cert_file" => self.cert_file = found,
            _ => self.key_file = found,
        }
    }

    /// The TLS settings, or `None` (plain TCP), reporting keys that do not go together.
    pub(super) fn finish(self, c: &mut Checker<'_>) -> Option<TlsSource> {
        if self.reported {
            return None;
        }
        let identity = match (self.cert_file, self.key_file) {
            (Some((cert, span)), Some((key, _))) => Some((cert, key, span)),
            (Some((_, span)), None) => {
                c.report(
                    span,
                    "`coordination.zookeeper.tls_cert_file` is set without `tls_key_file`".into(),
                    Some("a client certificate needs its private key: set both, or neither".into()),
                );
                return None;
            }
            (None, Some((_, span))) => {
                c.report(
                    span,
                    "`coordination.zookeeper.tls_key_file` is set without `tls_cert_file`".into(),
                    Some("a client certificate needs its private key: set both, or neither".into()),
                );
                return None;
            }
            (None, None) => None,
        };
        match (self.tls, self.ca_file) {
            (Some((true, _)), Some((ca_file, _))) => Some(TlsSource {
                ca_file,
                identity: identity.map(|(cert, key, _)| (cert, key)),
            }),
            (Some((true, span)), None) => {
                c.report(
                    span,
                    "`coordination.zookeeper.tls` is true but `tls_ca_file` is not set".into(),
                    Some(
                        "set `tls_ca_file` to the CA certificate (PEM) that signed the \
                         ZooKeeper servers' certificates"
                            .into(),
                    ),
                );
                None
            }
            (_, Some((_, span))) => {
                c.report(
                    span,
                    "`coordination.zookeeper.tls_ca_file` is set but `tls` is not true".into(),
                    Some("set `tls = true` to reach ZooKeeper over TLS".into()),
                );
                None
            }
            _ => {
                if let Some((_, _, span)) = identity {
                    // Only reached with `tls` false or unset and no CA file.
                    c.report(
                        span,
                        "`coordination.zookeeper.tls_cert_file` and `tls_key_file` are set \
                         but `tls` is not true"
                            .into(),
                        Some("set `tls = true` and `tls_ca_file`".into()),
                    );
                }
                None
            }
        }
    }
}
