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
            zkcron::preflight::DEFAULT_CONFIG_PATH
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

/// Jobs see the file system as under cron: `certbot renew` writes /etc, package updates write
/// /usr, and jobs share the host's /tmp. Hardening is an admin's drop-in (the operator's guide,
/// docs/operating.md, "Sandboxing"), not the default.
#[test]
fn the_unit_lets_jobs_write_etc_and_usr_and_share_the_hosts_tmp() {
    assert_eq!(unit_setting("ProtectSystem"), "no");
    assert_eq!(unit_setting("PrivateTmp"), "no");
    let guide =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operating.md"))
            .unwrap();
    for needle in [
        "**Sandboxing",
        "sudo systemctl edit zkcron",
        "ProtectSystem=full",
        "PrivateTmp=yes",
        "ReadWritePaths=",
    ] {
        assert!(guide.contains(needle), "docs/operating.md lacks {needle:?}");
    }
}

/// `Cargo.toml` as a TOML table.
fn manifest() -> toml::Table {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    text.parse().unwrap()
}

fn package_str(manifest: &toml::Table, key: &str) -> String {
    manifest["package"][key]
        .as_str()
        .unwrap_or_else(|| panic!("[package] {key} is missing"))
        .to_string()
}

/// The deb's synopsis (first line of Description) and the rpm's Summary are the crate
/// description. cargo-deb wraps it at 79 characters, so a longer one was split mid-sentence.
#[test]
fn the_package_synopsis_is_one_short_whole_line() {
    let manifest = manifest();
    let description = package_str(&manifest, "description");
    assert!(
        description.chars().count() <= 79,
        "{} characters: {description:?}",
        description.chars().count()
    );
    assert!(!description.ends_with('.'), "a synopsis has no full stop");
    assert!(!description.contains('\n'));
    let spec = rpm_spec();
    assert!(
        spec.contains("\nSummary:        %{zkcron_summary}\n"),
        "the rpm's Summary must come from [package] description"
    );
}

/// packaging/rpm/zkcron.spec, which scripts/package builds with rpmbuild.
fn rpm_spec() -> String {
    std::fs::read_to_string(packaging("rpm/zkcron.spec")).unwrap()
}

/// cargo-generate-rpm 0.21.1 wrote no %description (the summary was repeated) and could not
/// own /etc/zkcron and jobs.d; the spec does both, the description from the deb's one source
/// (scripts/package writes it from extended-description; scripts/check-packages checks
/// `rpm -qi` and `rpm -qf` on the built and installed rpm).
#[test]
fn the_rpm_has_the_long_description_and_owns_its_config_dirs() {
    let spec = rpm_spec();
    assert!(spec.contains("\n%description\n%include %{zkcron_assets}/description\n"));
    for dir in ["/etc/zkcron", "/etc/zkcron/jobs.d"] {
        assert!(spec.contains(&format!("\n%dir {dir}\n")), "%dir {dir}");
    }
    let script =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/package"))
            .unwrap();
    assert!(script.contains(r#"["metadata"]["deb"]["extended-description"]"#));
}

/// Homepage, repository and maintainer are set once, in `[package]`; the deb and rpm metadata
/// do not repeat them, and the hand-written copyright and changelog name the same ones.
#[test]
fn homepage_repository_and_maintainer_live_in_one_place() {
    let manifest = manifest();
    let homepage = package_str(&manifest, "homepage");
    let repository = package_str(&manifest, "repository");
    for url in [&homepage, &repository] {
        assert!(url.starts_with("https://"), "{url}");
    }
    let authors = manifest["package"]["authors"].as_array().unwrap();
    let maintainer = authors[0].as_str().unwrap();
    assert!(
        maintainer.contains(" <") && maintainer.ends_with('>') && maintainer.contains('@'),
        "authors[0] is the deb's Maintainer, `Name <address>`: {maintainer:?}"
    );
    let deb = manifest["package"]["metadata"]["deb"].as_table().unwrap();
    assert!(!deb.contains_key("maintainer"), "maintainer: use authors");
    let spec = rpm_spec();
    for tag in [
        "URL:            %{zkcron_url}",
        "Packager:       %{zkcron_packager}",
    ] {
        assert!(spec.contains(&format!("\n{tag}\n")), "{tag}");
    }

    let copyright = std::fs::read_to_string(packaging("copyright")).unwrap();
    assert!(
        copyright.contains(&format!("\nUpstream-Contact: {maintainer}\n")),
        "packaging/copyright must name {maintainer}"
    );
    assert!(
        copyright.contains(&format!("\nSource: {repository}\n")),
        "packaging/copyright must name {repository}"
    );
    let changelog = std::fs::read_to_string(packaging("changelog")).unwrap();
    let newest = changelog
        .lines()
        .find(|l| l.starts_with(" -- "))
        .expect("a changelog trailer");
    assert!(
        newest.starts_with(&format!(" -- {maintainer}  ")),
        "{newest:?} is not signed by {maintainer}"
    );
}

/// cargo-deb 3.8.0 writes no md5sums; scripts/package adds them (scripts/check-packages
/// checks the built deb has them).
#[test]
fn the_deb_build_adds_md5sums() {
    let script =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/package"))
            .unwrap();
    assert!(script.contains(">DEBIAN/md5sums"), "scripts/package");
    // Repacked with xz, as cargo-deb packs it (fast gzip only for check-packages' upgrade test).
    assert!(
        script.contains("deb_compression=(-Zxz)\n"),
        "scripts/package"
    );
    assert!(script.contains("dpkg-deb --root-owner-group \"${deb_compression[@]}\" --build"));
}

/// Both packages ship both manual pages, as scripts/package renders them.
#[test]
fn both_packages_ship_zkcron_1_and_zkcron_task_5() {
    let manifest = manifest();
    let metadata = &manifest["package"]["metadata"];
    let deb = format!("{:?}", metadata["deb"]["assets"]);
    let rpm = rpm_spec();
    let script =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/package"))
            .unwrap();
    for page in ["man1/zkcron.1.gz", "man5/zkcron-task.5.gz"] {
        assert!(
            deb.contains(&format!("usr/share/man/{page}")),
            "deb: {page}"
        );
        assert!(
            rpm.contains(&format!("/usr/share/man/{page}")),
            "rpm: {page}"
        );
    }
    assert!(script.contains("man zkcron-task | gzip -9n > \"$assets/zkcron-task.5.gz\""));
}

/// The images the shipped documents show (`![...](path)`), as paths from the source tree's
/// root, by document (README.md and the guides the deb ships).
fn images_of_shipped_documents(deb_assets: &[(String, String)]) -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut images = Vec::new();
    for (source, _) in deb_assets.iter().filter(|(s, _)| s.ends_with(".md")) {
        let text = std::fs::read_to_string(root.join(source)).unwrap();
        let dir = Path::new(source).parent().unwrap();
        for link in text.split("](").skip(1) {
            let Some(end) = link.find(')') else { continue };
            let target = &link[..end];
            let is_image = [".png", ".svg", ".jpg"].iter().any(|e| target.ends_with(e));
            if is_image && !target.contains("://") {
                let path = dir.join(target).to_string_lossy().into_owned();
                images.push((source.clone(), path));
            }
        }
    }
    images
}

/// README.md shows docs/dashboard.png: the packages ship every image a shipped document shows
/// beside it, so that the document's link works where it is installed as in the source tree
/// (found missing: the packaged README pointed at no image).
#[test]
fn the_packages_ship_the_images_their_documents_show() {
    let manifest = manifest();
    let assets: Vec<(String, String)> = manifest["package"]["metadata"]["deb"]["assets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let a = a.as_array().unwrap();
            (a[0].as_str().unwrap().into(), a[1].as_str().unwrap().into())
        })
        .collect();
    let images = images_of_shipped_documents(&assets);
    assert!(
        images.contains(&("README.md".into(), "docs/dashboard.png".into())),
        "{images:?}"
    );
    let rpm = rpm_spec();
    for (document, image) in images {
        let installed = format!("usr/share/doc/zkcron/{image}");
        assert!(
            assets.contains(&(image.clone(), installed.clone())),
            "the deb does not ship {image}, which {document} shows"
        );
        assert!(
            rpm.contains(&format!(
                "install -D -m 644 %{{zkcron_source}}/{image} %{{buildroot}}/{installed}\n"
            )) && rpm.contains(&format!("\n%doc /{installed}\n")),
            "the rpm does not ship {image}, which {document} shows"
        );
    }
}
