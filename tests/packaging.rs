//! The packaging inputs in `packaging/` agree with the code: the shipped `zkcron.toml` goes
//! through the real config parser, and the unit's numbers fit the daemon's defaults.

use std::path::Path;
use std::time::Duration;

use zkcron::config::{Backend, Config, load_config, parse_config};

fn packaging(file: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging")
        .join(file)
}

/// The value of `Key=` in the unit file.
fn unit_setting(key: &str) -> String {
    let unit = std::fs::read_to_string(packaging("zkcron.service")).unwrap();
    let prefix = format!("{key}=");
    let values: Vec<&str> = unit
        .lines()
        .filter_map(|l| l.strip_prefix(prefix.as_str()))
        .collect();
    assert_eq!(values.len(), 1, "{key}= in the unit: {values:?}");
    values[0].to_string()
}

#[test]
fn the_packaged_config_selects_zookeeper_on_localhost_and_the_zkcron_user() {
    let config = load_config(&packaging("zkcron.toml")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.coordination.backend, Backend::Zookeeper);
    assert_eq!(
        config.coordination.zookeeper.connect.as_deref(),
        Some("127.0.0.1:2181")
    );
    assert_eq!(config.scheduler.default_user.as_deref(), Some("zkcron"));
    // Everything else is left at its default.
    let defaults = Config::default();
    assert_eq!(config.node, defaults.node);
    assert_eq!(config.log, defaults.log);
    assert_eq!(config.scheduler.jobs_dir, None);
    assert_eq!(config.scheduler.state_dir, None);
    assert_eq!(
        config.scheduler.shutdown_grace,
        defaults.scheduler.shutdown_grace
    );
    assert_eq!(
        config.coordination.zookeeper.session_timeout,
        defaults.coordination.zookeeper.session_timeout
    );
}

/// An operator uncommenting a line must get a valid file: every commented `key = value` line
/// (except placeholders in angle brackets) parses when uncommented.
#[test]
fn every_commented_setting_of_the_packaged_config_is_valid_when_uncommented() {
    let path = packaging("zkcron.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let settings: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with('#') && !l.starts_with("# ") && l.contains(" = "))
        .collect();
    assert!(settings.len() >= 10, "{settings:?}");
    let mut uncommented = 0;
    for line in settings {
        if line.contains('<') {
            continue;
        }
        let text = text.replacen(line, &line[1..], 1);
        parse_config(&path, &text).unwrap_or_else(|e| panic!("uncommenting {line:?}: {e}"));
        uncommented += 1;
    }
    assert!(uncommented >= 8);
}

#[test]
fn the_unit_runs_the_default_config_and_waits_longer_than_shutdown_grace() {
    assert_eq!(
        unit_setting("ExecStart"),
        format!(
            "/usr/bin/zkcron run --config {}",
            zkcron::cli::DEFAULT_CONFIG_PATH
        )
    );
    let stop = humantime::parse_duration(&unit_setting("TimeoutStopSec")).unwrap();
    // The daemon waits shutdown_grace, then up to 10 s for killed jobs, then closes its session.
    let grace = Config::default().scheduler.shutdown_grace;
    assert!(stop >= grace + Duration::from_secs(20), "{stop:?}");
    assert_eq!(unit_setting("Type"), "notify");
    assert_eq!(unit_setting("KillMode"), "mixed");
    assert_eq!(unit_setting("StateDirectory"), "zkcron");
}
