//! The keys of `[coordination.zookeeper]`: the connect string, the cluster name, the session
//! timeout and the credentials (`auth_file`), with the TLS keys in `tls`. Values are checked with
//! the ZooKeeper backend's own parsers, so `validate` and `run` agree.

use super::*;

/// `[coordination.zookeeper]`.
pub(super) fn section(
    c: &mut Checker<'_>,
    value: &Spanned<DeValue<'_>>,
    base: &Path,
    into: &mut ZookeeperSection,
) {
    let DeValue::Table(table) = value.get_ref() else {
        let message = format!(
            "`coordination.zookeeper` must be a section ([coordination.zookeeper]), found {}",
            c.found(value)
        );
        c.report(value.span(), message, None);
        return;
    };
    let mut tls = tls::TlsKeys::default();
    for (key, value) in table.iter() {
        let k: &str = key.get_ref();
        let qualified = format!("coordination.zookeeper.{k}");
        let q = qualified.as_str();
        match k {
            "connect" => {
                if let Some(connect) = c.string(q, value) {
                    match crate::coord::zk::split_connect(connect) {
                        Ok(_) => into.connect = Some(connect.to_string()),
                        Err(message) => {
                            c.report(c.content_span(value), format!("`{q}`: {message}"), None)
                        }
                    }
                }
            }
            "cluster" => {
                if let Some(cluster) = cluster_name(c, q, value) {
                    into.cluster = cluster;
                }
            }
            "session_timeout" => {
                if let Some(timeout) = c.duration(q, value) {
                    match crate::coord::zk::session_timeout_problem(timeout) {
                        Some((message, help)) => c.report(
                            c.content_span(value),
                            format!("`{q}`: {message}"),
                            Some(help),
                        ),
                        None => into.session_timeout = timeout,
                    }
                }
            }
            "max_clock_skew" => into.max_clock_skew = c.duration(q, value),
            "tls" | "tls_ca_file" | "tls_cert_file" | "tls_key_file" => tls.take(c, k, value, base),
            "auth" | "auth_file" => zookeeper_auth(c, key, value, base, &mut into.auth),
            _ => unknown_zookeeper_key(c, key),
        }
    }
    into.tls = tls.finish(c);
}

/// `coordination.zookeeper.cluster` (`q`), if it is a name that can be part of a path.
fn cluster_name(c: &mut Checker<'_>, q: &str, value: &Spanned<DeValue<'_>>) -> Option<String> {
    let cluster = c.string(q, value)?;
    if !is_path_name(cluster) {
        let message = format!(
            "`{q}` = {cluster:?} is not a valid cluster name: it must match \
             {NODE_ID_PATTERN}, because it becomes part of ZooKeeper paths"
        );
        c.report(c.content_span(value), message, None);
        return None;
    }
    Some(cluster.to_string())
}

/// `coordination.zookeeper.auth` or `auth_file` (`key`) into `auth`, which must not be set by
/// the other already.
fn zookeeper_auth(
    c: &mut Checker<'_>,
    key: &Spanned<toml::de::DeString<'_>>,
    value: &Spanned<DeValue<'_>>,
    base: &Path,
    auth: &mut AuthSource,
) {
    let k: &str = key.get_ref();
    let q = format!("coordination.zookeeper.{k}");
    if *auth != AuthSource::None {
        let message = "`coordination.zookeeper.auth` and `auth_file` are both set; set one of them"
            .to_string();
        c.report(
            key.span(),
            message,
            Some("auth_file keeps the password out of a config file others may read".into()),
        );
        return;
    }
    if k == "auth_file" {
        if let Some(path) = c.path(&q, value) {
            *auth = AuthSource::File(base.join(path));
        }
    } else if let Some(text) = c.string(&q, value) {
        match ZkAuth::parse(text) {
            Ok(parsed) => *auth = AuthSource::Inline(parsed),
            Err(problem) => c.report(c.content_span(value), format!("`{q}` {problem}"), None),
        }
    }
}

/// Reports `key` as not a key of `[coordination.zookeeper]`, with the closest one.
fn unknown_zookeeper_key(c: &mut Checker<'_>, key: &Spanned<toml::de::DeString<'_>>) {
    let k: &str = key.get_ref();
    let help = match closest(k, ZOOKEEPER_KEYS.iter().copied()) {
        Some(known) => format!("did you mean `{known}`?"),
        None => format!(
            "known keys in [coordination.zookeeper]: {}",
            ZOOKEEPER_KEYS.join(", ")
        ),
    };
    c.report(
        key.span(),
        format!("unknown key `{k}` in [coordination.zookeeper]"),
        Some(help),
    );
}
