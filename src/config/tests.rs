use super::*;

#[test]
fn zookeeper_auth_is_user_colon_password_and_auth_file_is_relative_to_the_config() {
    let path = Path::new("/etc/zkcron/zkcron.toml");
    let config = parse_config(
        path,
        "[coordination.zookeeper]\nauth_file = \"zk.secret\"\n",
    )
    .unwrap();
    assert_eq!(
        config.coordination.zookeeper.auth,
        AuthSource::File("/etc/zkcron/zk.secret".into())
    );
    let config = parse_config(path, "[coordination.zookeeper]\nauth = \"u:p\"\n").unwrap();
    assert_eq!(
        config.coordination.zookeeper.auth,
        AuthSource::Inline(ZkAuth::parse("u:p").unwrap())
    );
    let error = parse_config(path, "[coordination.zookeeper]\nauth = \"secret\"\n").unwrap_err();
    let messages: Vec<&str> = error.problems.iter().map(|p| p.message.as_str()).collect();
    assert_eq!(
        messages,
        [
            "`coordination.zookeeper.auth` is not `user:password` (a user name, a colon, a \
          password; neither empty)"
        ]
    );
    let error = parse_config(
        path,
        "[coordination.zookeeper]\nauth_file = \"/x\"\nauth = \"u:p\"\n",
    )
    .unwrap_err();
    assert_eq!(
        error.problems[0].message,
        "`coordination.zookeeper.auth` and `auth_file` are both set; set one of them"
    );
}

#[test]
fn state_dir_prefers_systemd_then_state_then_cache() {
    let state = Some(PathBuf::from("/home/u/.local/state"));
    let cache = Some(PathBuf::from("/home/u/.cache"));
    assert_eq!(
        default_state_dir(
            Some("/var/lib/zkcron:/var/lib/other".into()),
            state.clone(),
            cache.clone()
        ),
        PathBuf::from("/var/lib/zkcron")
    );
    assert_eq!(
        default_state_dir(None, state, cache.clone()),
        PathBuf::from("/home/u/.local/state/zkcron")
    );
    assert_eq!(
        default_state_dir(None, None, cache),
        PathBuf::from("/home/u/.cache/zkcron")
    );
    assert_eq!(
        default_state_dir(None, None, None),
        PathBuf::from("./state")
    );
}

#[test]
fn history_runs_defaults_to_100_and_must_be_1_to_1000() {
    let path = Path::new("/etc/zkcron/zkcron.toml");
    let config = parse_config(path, "").unwrap();
    assert_eq!(config.scheduler.history_runs, 100);
    let config = parse_config(path, "[scheduler]\nhistory_runs = 7\n").unwrap();
    assert_eq!(config.scheduler.history_runs, 7);
    for bad in ["0", "1001"] {
        let error = parse_config(path, &format!("[scheduler]\nhistory_runs = {bad}\n"))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(&format!(
                "`scheduler.history_runs` must be between 1 and 1000, found {bad}"
            )),
            "{error}"
        );
    }
}

#[test]
fn http_listen_defaults_to_loopback_9464_empty_is_off_and_a_name_is_refused() {
    let path = Path::new("/etc/zkcron/zkcron.toml");
    let listen = |text: &str| parse_config(path, text).map(|c| c.http.listen);
    assert_eq!(listen("").unwrap(), Some("127.0.0.1:9464".parse().unwrap()));
    assert_eq!(listen("[http]\nlisten = \"\"\n").unwrap(), None);
    assert_eq!(
        listen("[http]\nlisten = \"[::1]:80\"\n").unwrap(),
        Some("[::1]:80".parse().unwrap())
    );
    let error = listen("[http]\nlisten = \"localhost\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("`http.listen` must be an IP address and port"),
        "{error}"
    );
}

#[test]
fn http_admin_token_file_is_relative_to_the_config_and_off_by_default() {
    let path = Path::new("/etc/zkcron/zkcron.toml");
    let token = |text: &str| parse_config(path, text).map(|c| c.http.admin_token_file);
    assert_eq!(token("").unwrap(), None);
    assert_eq!(
        token("[http]\nadmin_token_file = \"admin.token\"\n").unwrap(),
        Some(PathBuf::from("/etc/zkcron/admin.token"))
    );
    let error = token("[http]\nadmin_token_file = \"\"\n")
        .unwrap_err()
        .to_string();
    assert!(error.contains("`http.admin_token_file`"), "{error}");
}

#[test]
fn an_admin_token_file_is_private_and_holds_one_long_token() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("admin.token");
    let shown = path.display();
    std::fs::write(&path, "0123456789abcdef0123\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(read_admin_token(&path).unwrap(), "0123456789abcdef0123");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(
        read_admin_token(&path).unwrap_err(),
        format!(
            "the admin_token_file {shown} may be read by group or others (mode 640); run `chmod \
             600 {shown}`"
        )
    );
    std::fs::write(&path, "two words here and there\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(
        read_admin_token(&path)
            .unwrap_err()
            .contains("must hold one token of at least 16 characters without spaces")
    );
    let missing = dir.path().join("missing");
    assert!(
        read_admin_token(&missing)
            .unwrap_err()
            .starts_with(&format!(
                "cannot read the admin_token_file {}",
                missing.display()
            ))
    );
}

#[test]
fn auto_log_format_follows_journal_stream() {
    assert_eq!(LogFormat::Auto.resolve_with(true), LogFormat::Journald);
    assert_eq!(LogFormat::Auto.resolve_with(false), LogFormat::Text);
    assert_eq!(LogFormat::Json.resolve_with(true), LogFormat::Json);
}

#[test]
fn zookeeper_tls_names_its_files_relative_to_the_config() {
    let path = Path::new("/etc/zkcron/zkcron.toml");
    let tls = |text: &str| {
        parse_config(path, &format!("[coordination.zookeeper]\n{text}"))
            .map(|c| c.coordination.zookeeper.tls)
    };
    assert_eq!(tls("").unwrap(), None);
    assert_eq!(tls("tls = false\n").unwrap(), None);
    assert_eq!(
        tls("tls = true\ntls_ca_file = \"ca.pem\"\n").unwrap(),
        Some(TlsSource {
            ca_file: "/etc/zkcron/ca.pem".into(),
            identity: None
        })
    );
    assert_eq!(
        tls("tls = true\ntls_ca_file = \"/ca.pem\"\ntls_cert_file = \"node.pem\"\ntls_key_file = \"node.key\"\n")
            .unwrap(),
        Some(TlsSource {
            ca_file: "/ca.pem".into(),
            identity: Some(("/etc/zkcron/node.pem".into(), "/etc/zkcron/node.key".into()))
        })
    );
}

#[test]
fn zookeeper_tls_keys_that_do_not_go_together_are_refused_naming_them() {
    let path = Path::new("/etc/zkcron/zkcron.toml");
    for (text, expected, help) in [
        (
            "tls = true\n",
            "`coordination.zookeeper.tls` is true but `tls_ca_file` is not set",
            "set `tls_ca_file` to the CA certificate (PEM) that signed the ZooKeeper servers' \
             certificates",
        ),
        (
            "tls_ca_file = \"ca.pem\"\n",
            "`coordination.zookeeper.tls_ca_file` is set but `tls` is not true",
            "set `tls = true` to reach ZooKeeper over TLS",
        ),
        (
            "tls = false\ntls_ca_file = \"ca.pem\"\n",
            "`coordination.zookeeper.tls_ca_file` is set but `tls` is not true",
            "set `tls = true` to reach ZooKeeper over TLS",
        ),
        (
            "tls = true\ntls_ca_file = \"ca.pem\"\ntls_cert_file = \"n.pem\"\n",
            "`coordination.zookeeper.tls_cert_file` is set without `tls_key_file`",
            "a client certificate needs its private key: set both, or neither",
        ),
        (
            "tls = true\ntls_ca_file = \"ca.pem\"\ntls_key_file = \"n.key\"\n",
            "`coordination.zookeeper.tls_key_file` is set without `tls_cert_file`",
            "a client certificate needs its private key: set both, or neither",
        ),
        (
            "tls_cert_file = \"n.pem\"\ntls_key_file = \"n.key\"\n",
            "`coordination.zookeeper.tls_cert_file` and `tls_key_file` are set but `tls` is not \
             true",
            "set `tls = true` and `tls_ca_file`",
        ),
        (
            "tls = \"true\"\n",
            "`coordination.zookeeper.tls` must be true or false, found string \"true\"",
            "remove the quotes",
        ),
        (
            "tls = true\ntls_ca_file = \"\"\n",
            "`coordination.zookeeper.tls_ca_file` is empty",
            "remove `coordination.zookeeper.tls_ca_file` or give it a value",
        ),
    ] {
        let error = parse_config(path, &format!("[coordination.zookeeper]\n{text}")).unwrap_err();
        let problems: Vec<(&str, Option<&str>)> = error
            .problems
            .iter()
            .map(|p| (p.message.as_str(), p.help.as_deref()))
            .collect();
        assert_eq!(problems, [(expected, Some(help))], "{text}");
    }
    let error = parse_config(path, "[coordination.zookeeper]\ntls_ca = \"x\"\n").unwrap_err();
    assert_eq!(
        error.problems[0].help.as_deref(),
        Some("did you mean `tls_ca_file`?")
    );
}
