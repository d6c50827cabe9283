//! The canonical task digest (`TaskSpec::canonical_digest`): pinned for a
//! fixed task file, so that a release that changes it by accident fails here; every field that
//! defines behaviour counts; the file path, the description and `env` values do not.

mod common;

use std::path::{Path, PathBuf};

use zkcron::task::{KeptDigest, TaskBackend, TaskDefaults, TaskSpec, parse_task};

fn fixture() -> (PathBuf, String) {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tasks/nightly-backup.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    (path, text)
}

/// The defaults of a load as root (so `user` and `group` are allowed), zone UTC.
fn root_defaults() -> TaskDefaults {
    common::task_defaults(common::root_identity(), TaskBackend::Local)
}

/// Loads `text` as root would (so `user` and `group` are allowed), zone UTC by default.
fn load(path: &Path, text: &str) -> TaskSpec {
    parse_task("nightly-backup", path, text, &root_defaults())
        .unwrap_or_else(|errors| panic!("{}", errors[0]))
}

/// Fails, showing them, unless `spec`'s canonical bytes end with `tail`.
fn assert_canonical_ends_with(spec: &TaskSpec, tail: &str) {
    let bytes = String::from_utf8(spec.canonical_bytes()).unwrap();
    assert!(bytes.ends_with(tail), "{bytes}");
}

/// Fails, showing them, unless `spec`'s canonical bytes contain `part`.
fn assert_canonical_contains(spec: &TaskSpec, part: &str) {
    let bytes = String::from_utf8(spec.canonical_bytes()).unwrap();
    assert!(bytes.contains(part), "{bytes}");
}

/// The serialization of the fixture, byte for byte: the module documentation of
/// `task::digest` specifies it, and this is that specification applied.
const PINNED_BYTES: &str = "zkcron task digest v1
name=14:nightly-backup
schedule=10:30 2 * * *
timezone=13:Europe/Berlin
command=argv 3 21:/usr/local/bin/backup 6:--full 9:two words
user=6:nobody
group=7:nogroup
working_dir=12:/var/backups
env=2 6:PGHOST 10:PGPASSWORD
timeout=7200000000000ns
kill_grace=15000000000ns
overlap=replace
catch_up=all
starting_deadline=900000000000ns
jitter=30000000000ns
retries=2 30000000000ns 300000000000ns
version_req=5:>=2.1
kill_on_session_loss=true
on_node_loss=rerun
enabled=true
";

/// The xxh3-64 of [`PINNED_BYTES`]. If this changes, the digest changed for every task in
/// every cluster: a mixed-release cluster would report every task as defined differently.
const PINNED_DIGEST: &str = "5bcd6e82a4b766c8";

#[test]
fn the_digest_of_a_fixed_task_file_is_pinned() {
    let (path, text) = fixture();
    let spec = load(&path, &text);
    assert_eq!(
        String::from_utf8(spec.canonical_bytes()).unwrap(),
        PINNED_BYTES
    );
    assert_eq!(spec.canonical_digest(), PINNED_DIGEST);
}

#[test]
fn the_path_the_description_and_env_values_do_not_count() {
    let (path, text) = fixture();
    let digest = load(&path, &text).canonical_digest();
    for (what, path, text) in [
        (
            "another path",
            PathBuf::from("/etc/zkcron/jobs.d/nightly-backup.toml"),
            text.clone(),
        ),
        (
            "another description",
            path.clone(),
            text.replace("Full backup", "Backup"),
        ),
        (
            "another env value",
            path.clone(),
            text.replace("s3cret", "another secret"),
        ),
        (
            "other whitespace in the schedule",
            path.clone(),
            text.replace("\"30  2 * * *\"", "\" 30 2  *  * * \""),
        ),
    ] {
        assert_eq!(load(&path, &text).canonical_digest(), digest, "{what}");
    }
    // The secret is nowhere in what is hashed.
    let bytes = load(&path, &text).canonical_bytes();
    assert!(!bytes.windows(6).any(|w| w == b"s3cret"));
}

/// One edit of the fixture per field that defines behaviour: (the text, its replacement).
const EDITS: [(&str, &str); 21] = [
    ("\"30  2 * * *\"", "\"31 2 * * *\""),
    ("\"Europe/Berlin\"", "\"Europe/Paris\""),
    ("\"two words\"", "\"two\", \"words\""),
    (
        "command = [\"/usr/local/bin/backup\", \"--full\", \"two words\"]",
        "command = \"/usr/local/bin/backup --full 'two words'\"",
    ),
    ("\"nobody\"", "\"daemon\""),
    ("group = \"nogroup\"\n", ""),
    ("\"/var/backups\"", "\"/var/backup\""),
    ("PGHOST = \"db1\", ", ""),
    ("\"2h\"", "\"1h\""),
    ("\"15s\"", "\"10s\""),
    ("\"replace\"", "\"allow\""),
    ("\"all\"", "\"once\""),
    ("\"15m\"", "\"16m\""),
    ("jitter = \"30s\"", "jitter = \"31s\""),
    ("attempts = 2", "attempts = 3"),
    ("backoff = \"30s\", max", "backoff = \"20s\", max"),
    ("\"5m\"", "\"6m\""),
    ("\">=2.1\"", "\">=2.2\""),
    (
        "kill_on_session_loss = true",
        "kill_on_session_loss = false",
    ),
    ("\"rerun\"", "\"skip\""),
    ("on_node_loss", "enabled = false\non_node_loss"),
];

#[test]
fn every_field_that_defines_behaviour_changes_the_digest() {
    let (path, text) = fixture();
    let digest = load(&path, &text).canonical_digest();
    for (from, to) in EDITS {
        assert_eq!(text.matches(from).count(), 1, "{from:?} is not unique");
        let edited = load(&path, &text.replacen(from, to, 1)).canonical_digest();
        assert_ne!(
            edited, digest,
            "{from:?} -> {to:?} did not change the digest"
        );
    }
    // The name (file stem) too.
    let renamed = parse_task("nightly-backup-2", &path, &text, &root_defaults()).unwrap();
    assert_ne!(renamed.canonical_digest(), digest);
}

#[test]
fn require_labels_count_only_when_present_so_older_digests_stay() {
    // `require_labels` was added at the end of version 1, written only when the task has any:
    // the pinned digest above (a task without it) is the one older releases computed.
    let (path, text) = fixture();
    let digest = load(&path, &text).canonical_digest();
    assert_eq!(digest, PINNED_DIGEST);
    let with = format!("{text}\n[require_labels]\nzone = \"eu\"\ndisk = \"ssd\"\n");
    let spec = load(&path, &with);
    assert_canonical_ends_with(
        &spec,
        "enabled=true\nrequire_labels=2 4:disk 3:ssd 4:zone 2:eu\n",
    );
    assert_ne!(spec.canonical_digest(), digest);
    let other = load(&path, &with.replace("\"eu\"", "\"us\""));
    assert_ne!(other.canonical_digest(), spec.canonical_digest());
    let empty = load(&path, &format!("{text}\nrequire_labels = {{}}\n"));
    assert_eq!(empty.canonical_digest(), digest);
}

#[test]
fn on_failure_counts_only_when_present_so_older_digests_stay() {
    // `on_failure` was added at the end of version 1, written only when the task has one:
    // a task without it keeps the digest older releases computed.
    let (path, text) = fixture();
    let digest = load(&path, &text).canonical_digest();
    assert_eq!(digest, PINNED_DIGEST);
    let with = format!("on_failure = [\"/usr/local/bin/page\", \"db\"]\n{text}");
    let spec = load(&path, &with);
    assert_canonical_ends_with(
        &spec,
        "enabled=true\non_failure=2 19:/usr/local/bin/page 2:db\n",
    );
    assert_ne!(spec.canonical_digest(), digest);
    let other = load(&path, &with.replace("\"db\"", "\"web\""));
    assert_ne!(other.canonical_digest(), spec.canonical_digest());
}

#[test]
fn work_items_and_run_on_count_only_when_set_so_older_digests_stay() {
    // `run_on` and `work_items` came after the first release, written only when the task sets
    // them (and `run_on` only when it is not the default): a task without them keeps the
    // digest older releases computed.
    let (path, text) = fixture();
    assert_eq!(load(&path, &text).canonical_digest(), PINNED_DIGEST);
    let leader = load(&path, &format!("run_on = \"leader\"\n{text}"));
    assert_eq!(leader.canonical_digest(), PINNED_DIGEST);

    let counted = load(&path, &format!("work_items = 3\n{text}"));
    assert_canonical_ends_with(&counted, "enabled=true\nwork_items=3 1:0 1:1 1:2\n");
    // The count form is the list of the same names; the order of the names counts.
    let named = load(
        &path,
        &format!("work_items = [\"0\", \"1\", \"2\"]\n{text}"),
    );
    assert_eq!(named.canonical_digest(), counted.canonical_digest());
    let reordered = load(
        &path,
        &format!("work_items = [\"1\", \"0\", \"2\"]\n{text}"),
    );
    assert_ne!(reordered.canonical_digest(), counted.canonical_digest());
    assert_ne!(counted.canonical_digest(), PINNED_DIGEST);

    let every = load(&path, &format!("run_on = \"every_node\"\n{text}"));
    assert_canonical_ends_with(&every, "enabled=true\nrun_on=every_node\n");
}

#[test]
fn pause_on_failure_counts_only_when_true_so_older_digests_stay() {
    // `pause_on_failure` was added at the end of version 1, written only when true: a task
    // without it (or with `false`) keeps the digest older releases computed.
    let (path, text) = fixture();
    let digest = load(&path, &text).canonical_digest();
    assert_eq!(digest, PINNED_DIGEST);
    let off = load(&path, &format!("pause_on_failure = false\n{text}"));
    assert_eq!(off.canonical_digest(), digest);
    let on = load(&path, &format!("pause_on_failure = true\n{text}"));
    assert_canonical_ends_with(&on, "enabled=true\npause_on_failure=true\n");
    assert_ne!(on.canonical_digest(), digest);
}

#[test]
fn a_window_counts_only_when_present_and_a_list_never_reads_as_one_expression() {
    // `active_from` / `active_until` were added at the end of version 1, each written only when
    // the task has it: a task without them keeps the digest older releases computed.
    let (path, text) = fixture();
    assert_eq!(load(&path, &text).canonical_digest(), PINNED_DIGEST);
    let with = format!(
        "active_from = \"2026-12-01T01:00:00+01:00\"\nactive_until = \"2027-01-01T00:00:00.5Z\"\n{text}"
    );
    let spec = load(&path, &with);
    assert_canonical_ends_with(
        &spec,
        "enabled=true\nactive_from=20:2026-12-01T00:00:00Z\nactive_until=24:2027-01-01T00:00:00.500Z\n",
    );
    // A list, even of the one expression, is another definition: the file says another thing.
    let list = load(
        &path,
        &text.replace("schedule = \"30  2 * * *\"", "schedule = [\"30  2 * * *\"]"),
    );
    assert_canonical_contains(&list, "\nschedule=list 1 10:30 2 * * *\n");
    assert_ne!(list.canonical_digest(), PINNED_DIGEST);
    let interval = load(
        &path,
        &text.replace(
            "schedule = \"30  2 * * *\"",
            "schedule = [\"30  2 * * *\", \"@every 1h\"]",
        ),
    );
    assert_canonical_contains(&interval, "\nschedule=list 2 10:30 2 * * * 9:@every 1h\n");
}

/// The digest a spec keeps (worked out at load, so that publishing the task set or answering
/// `zkcron status` does not serialize every task again) is its fields' digest, for the fixture
/// and every edit of it; it is not part of equality.
#[test]
fn the_kept_digest_is_the_digest_of_the_fields_it_sits_beside() {
    let (path, text) = fixture();
    let spec = load(&path, &text);
    assert_eq!(spec.digest(), PINNED_DIGEST);
    for (from, to) in EDITS {
        let edited = load(&path, &text.replacen(from, to, 1));
        assert_eq!(
            edited.digest(),
            edited.canonical_digest(),
            "{from:?} -> {to:?}"
        );
        assert_ne!(edited.digest(), PINNED_DIGEST, "{from:?} -> {to:?}");
    }
    // A clone keeps it; a spec made field by field works it out at its first use.
    assert_eq!(spec.clone().digest(), PINNED_DIGEST);
    let fresh = TaskSpec {
        digest: KeptDigest::default(),
        ..spec.clone()
    };
    assert_eq!(format!("{:?}", fresh.digest), "KeptDigest(not worked out)");
    assert_eq!(fresh, spec, "equality does not depend on the kept digest");
    assert_eq!(fresh.digest(), PINNED_DIGEST);
    assert_eq!(
        format!("{:?}", fresh.digest),
        format!("KeptDigest({PINNED_DIGEST})")
    );
    // A spec changed field by field and given a new `KeptDigest` has the new fields' digest.
    let mut changed = spec.clone();
    changed.enabled = false;
    changed.digest = KeptDigest::default();
    assert_eq!(changed.digest(), changed.canonical_digest());
    assert_ne!(changed.digest(), PINNED_DIGEST);
}

/// A field changed after the digest was worked out, without a new `KeptDigest`, would publish
/// the old definition's digest: a debug build (every test) refuses to use it.
#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "the kept digest is not its fields'")]
fn a_kept_digest_left_behind_by_a_changed_field_is_caught_in_debug_builds() {
    let (path, text) = fixture();
    let mut spec = load(&path, &text);
    spec.enabled = false;
    let _ = spec.digest();
}
