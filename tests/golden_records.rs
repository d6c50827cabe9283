//! Golden fixtures of every JSON record zkcron writes to ZooKeeper (`tests/fixtures/zk/*.json`)
//! and of the embedded backend's state dir (`tests/fixtures/state/*`).
//!
//! A cluster mixes releases during an upgrade, so the records are a wire format: a node of this
//! release must read what an older one wrote, ignore fields a newer one adds, and write records
//! with the same keys and value shapes. The fixtures were captured from the real encoders (the
//! ZooKeeper backend against a real ZooKeeper, the embedded backend in a temp dir) by
//! `records_this_release_writes_match_the_golden_fixtures` with `ZKCRON_CAPTURE_GOLDEN=1` at the
//! release before records gained canonical task digests; they are never regenerated to make a test pass. Changing a fixture
//! is changing the wire format: a new `format` version and the upgrade story come first.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::zk::{self, connect_client};
use serde_json::{Map, Value, json};
use zkcron::coord::backfill::{BackfillRecord, BackfillState};
use zkcron::coord::local::LocalCoordinator;
use zkcron::coord::records::{
    FireRecord, HistoryRecord, LeaseRecord, MemberRecord, RunRecord, RunTrigger, TaskSetEntry,
    TaskSetRecord, TaskSetRef, TriggerRecord, TriggerState,
};
use zkcron::coord::zk::{ZkCoordinator, ZkSettings};
use zkcron::coord::{ClaimIntent, ClaimOutcome, Coordinator, Leadership, RunResult};
use zkcron::plan::ledger::{Reason, TickEntry};
use zkcron::task::{Identity, TaskSpec, parse_task};

const LIMIT: Duration = Duration::from_secs(30);

fn fixtures(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{kind}"))
}

fn fixture(kind: &str, name: &str) -> Vec<u8> {
    let path = fixtures(kind).join(name);
    fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn zk_fixture(name: &str) -> Value {
    serde_json::from_slice(&fixture("zk", name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn capturing() -> bool {
    std::env::var_os("ZKCRON_CAPTURE_GOLDEN").is_some_and(|v| v == "1")
}

fn at(text: &str) -> DateTime<Utc> {
    text.parse().unwrap()
}

/// Decodes `value` as `T`, re-encodes it, and returns both.
fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(value: &Value) -> (T, Value) {
    let decoded: T = serde_json::from_value(value.clone()).expect("decodes with this release");
    let encoded = serde_json::to_value(&decoded).expect("encodes");
    (decoded, encoded)
}

/// `value` with a field a newer release might add, at the top level.
fn with_unknown_field(value: &Value) -> Value {
    let mut value = value.clone();
    value.as_object_mut().unwrap().insert(
        "added_by_a_newer_release".into(),
        json!({"nested": [1, 2, 3], "flag": true}),
    );
    value
}

#[test]
fn a_member_record_decodes_and_reencodes_to_the_same_json() {
    let golden = zk_fixture("member.json");
    let (member, encoded) = round_trip::<MemberRecord>(&golden);
    assert_eq!(encoded, golden);
    assert_eq!(member.format, 1);
    assert_eq!(member.id, "n1");
    assert_eq!(member.release, "2.0.0");
    assert_eq!(member.seed.len(), 16, "64 bits in hex: {}", member.seed);
    assert!(u64::from_str_radix(&member.seed, 16).is_ok());
    assert_eq!(
        member.labels,
        BTreeMap::from([("zone".to_string(), "a".to_string())])
    );
    assert_eq!(member.taskset.chunks, 1);
    assert_eq!(member.taskset.count, 2);
    assert_eq!(member.taskset.digest.len(), 32);
    assert!(member.leads);
    // A newer release's fields are ignored; an older release wrote no `leads` (it led).
    let (newer, _) = round_trip::<MemberRecord>(&with_unknown_field(&golden));
    assert_eq!(newer, member);
    let mut older = golden.clone();
    older.as_object_mut().unwrap().remove("leads");
    older.as_object_mut().unwrap().remove("labels");
    let (older, _) = round_trip::<MemberRecord>(&older);
    assert!(older.leads);
    assert!(older.labels.is_empty());
}

#[test]
fn a_task_set_chunk_decodes_and_reencodes_to_the_same_json() {
    let golden = zk_fixture("taskset-chunk.json");
    let (set, encoded) = round_trip::<TaskSetRecord>(&golden);
    assert_eq!(encoded, golden);
    assert_eq!(set.format, 1);
    assert_eq!(set.tasks.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(set.tasks["a"].version_req.as_deref(), Some(">=1.0"));
    assert_eq!(set.tasks["b"].version_req, None);
    for entry in set.tasks.values() {
        assert_eq!(entry.digest.len(), 16, "{}", entry.digest);
    }
    // No `version_req` key at all when there is none (not `null`).
    assert!(golden["tasks"]["b"].get("version_req").is_none());
    let (newer, _) = round_trip::<TaskSetRecord>(&with_unknown_field(&golden));
    assert_eq!(newer, set);
    let entry: TaskSetEntry =
        serde_json::from_value(json!({"digest": "d", "new": 1})).expect("unknown field ignored");
    assert_eq!(entry.digest, "d");
}

#[test]
fn a_task_set_entry_keeps_a_schedule_list_and_a_window_in_fields_of_their_own() {
    // A list goes into `schedules` with no `schedule`, so an older reader shows no next tick
    // rather than the first expression's; the window is two RFC 3339 instants.
    let written = json!({
        "digest": "d",
        "timezone": "UTC",
        "schedules": ["@every 6h", "0 9 * * MON-FRI"],
        "active_from": "2026-12-01T00:00:00Z",
        "active_until": "2027-01-01T00:00:00Z"
    });
    let (entry, encoded) = round_trip::<TaskSetEntry>(&written);
    assert_eq!(encoded, written);
    assert_eq!(entry.schedule, None);
    assert_eq!(
        entry.schedules.as_deref(),
        Some(&["@every 6h".to_string(), "0 9 * * MON-FRI".to_string()][..])
    );
    assert_eq!(
        entry.active_until.map(|t| t.timestamp()),
        Some(1_798_761_600)
    );
    // Absent, they are not written (a task without them publishes what it did before).
    let (plain, encoded) =
        round_trip::<TaskSetEntry>(&json!({"digest": "d", "schedule": "@daily"}));
    assert_eq!(encoded, json!({"digest": "d", "schedule": "@daily"}));
    assert_eq!((plain.schedules, plain.active_from), (None, None));
}

#[test]
fn a_task_set_entry_names_its_parents_in_after_and_an_older_entry_has_none() {
    let written = json!({"digest": "d", "after": ["extract", "fetch"]});
    let (entry, encoded) = round_trip::<TaskSetEntry>(&written);
    assert_eq!(encoded, written);
    assert_eq!(entry.after, ["extract", "fetch"]);
    // An older node's entry has no `after`: no parents; and none is written without parents.
    let (older, encoded) = round_trip::<TaskSetEntry>(&json!({"digest": "d"}));
    assert!(older.after.is_empty());
    assert_eq!(encoded, json!({"digest": "d"}));
}

#[test]
fn a_lease_record_decodes_and_reencodes_to_the_same_json() {
    let golden = zk_fixture("lease.json");
    let (lease, encoded) = round_trip::<LeaseRecord>(&golden);
    assert_eq!(encoded, golden);
    assert_eq!(lease.format, 1);
    assert_eq!(lease.node, "n1");
    assert!(
        u64::from_str_radix(&lease.session, 16).is_ok(),
        "{}",
        lease.session
    );
    let (newer, _) = round_trip::<LeaseRecord>(&with_unknown_field(&golden));
    assert_eq!(newer, lease);
}

#[test]
fn every_form_of_the_fire_record_decodes_and_reencodes_to_the_same_json() {
    // Created with the task's epoch, before any claim.
    let created = zk_fixture("fire-record-created.json");
    let (record, encoded) = round_trip::<FireRecord>(&created);
    assert_eq!(encoded, created);
    assert_eq!(record.format, 1);
    assert_eq!(record.tick, None);
    assert_eq!(record.claimed_at, None);
    assert!(!record.run);
    assert_eq!(record.reruns, 0);
    assert!(created.get("tick").is_none() && created.get("claimed_at").is_none());

    let run = zk_fixture("fire-record-claimed-run.json");
    let (record, encoded) = round_trip::<FireRecord>(&run);
    assert_eq!(encoded, run);
    assert_eq!(record.tick, Some(at("2026-01-01T00:01:00Z")));
    assert_eq!(record.node, "n1");
    assert!(record.run);
    assert_eq!(record.reruns, 0);
    assert!(record.claimed_at.is_some());

    let skip = zk_fixture("fire-record-claimed-skip.json");
    let (record, encoded) = round_trip::<FireRecord>(&skip);
    assert_eq!(encoded, skip);
    assert_eq!(record.tick, Some(at("2026-01-01T00:01:00Z")));
    assert!(!record.run);
    assert_eq!(
        record.ticks,
        [TickEntry::one(at("2026-01-01T00:01:00Z"), Reason::Overlap)]
    );

    let rerun = zk_fixture("fire-record-rerun.json");
    let (record, encoded) = round_trip::<FireRecord>(&rerun);
    assert_eq!(encoded, rerun);
    assert_eq!(record.tick, Some(at("2026-01-01T00:02:00Z")));
    assert_eq!(record.node, "n2");
    assert!(record.run);
    assert_eq!(record.reruns, 1);

    let (newer, _) = round_trip::<FireRecord>(&with_unknown_field(&rerun));
    assert_eq!(newer, record);
    // The oldest form a reader may meet: only the format.
    let (bare, _) = round_trip::<FireRecord>(&json!({"format": 1}));
    assert_eq!((bare.tick, bare.run, bare.reruns), (None, false, 0));
}

#[test]
fn a_run_record_decodes_and_reencodes_to_the_same_json() {
    let golden = zk_fixture("run.json");
    let (run, encoded) = round_trip::<RunRecord>(&golden);
    assert_eq!(encoded, golden);
    assert_eq!(run.format, 1);
    assert_eq!(run.node, "n1");
    assert_eq!(run.tick, at("2026-01-01T00:01:00Z"));
    let (newer, _) = round_trip::<RunRecord>(&with_unknown_field(&golden));
    assert_eq!(newer, run);
}

#[test]
fn a_result_record_decodes_and_reencodes_to_the_same_json() {
    // `tasks/<task>/result` is the run result flattened beside `format`.
    let golden = zk_fixture("result.json");
    assert_eq!(golden["format"], 1);
    let (result, encoded) = round_trip::<RunResult>(&golden);
    assert_eq!(result, result_of("n1", at("2026-01-01T00:01:00Z")));
    let mut expected = golden.as_object().unwrap().clone();
    expected.remove("format");
    assert_eq!(encoded, Value::Object(expected));
    let (newer, _) = round_trip::<RunResult>(&with_unknown_field(&golden));
    assert_eq!(newer, result);
}

/// Issue [6]'s records (`control/triggers/<name>`, `tasks/<task>/history`): written by hand in
/// the shapes the issue fixes (a history entry is exactly an element of `zkcron history
/// --json`), pinned from their first release on like the others.
#[test]
fn a_trigger_and_a_history_record_decode_and_reencode_to_the_same_json() {
    let golden = zk_fixture("trigger-ended.json");
    let (trigger, encoded) = round_trip::<TriggerRecord>(&golden);
    assert_eq!(encoded, golden);
    assert_eq!(trigger.state, TriggerState::Ended);
    let result = trigger.result.clone().unwrap();
    assert_eq!(result.fire_id, "backup@manual-0000000042");
    assert_eq!((result.exit_code, result.signal), (None, Some(9)));
    let (newer, _) = round_trip::<TriggerRecord>(&with_unknown_field(&golden));
    assert_eq!(newer, trigger);
    // A pending one, as `zkcron trigger` creates it, has no optional field.
    let pending = json!({"format": 1, "task": "backup", "requested_at": "2026-01-01T00:00:30Z",
        "by": "ops@host-a", "state": "pending"});
    assert_eq!(round_trip::<TriggerRecord>(&pending).1, pending);

    let golden = zk_fixture("history.json");
    let (history, encoded) = round_trip::<HistoryRecord>(&golden);
    assert_eq!(encoded, golden);
    let triggers: Vec<RunTrigger> = history.runs.iter().map(|r| r.trigger).collect();
    assert_eq!(triggers, [RunTrigger::Schedule, RunTrigger::Manual]);
    assert_eq!(history.runs[1], result);
    let mut newer = with_unknown_field(&golden);
    newer["runs"][0]["added_by_a_newer_release"] = json!(true);
    assert_eq!(round_trip::<HistoryRecord>(&newer).0, history);
}

/// The result every fixture's run ended with.
fn result_of(node: &str, tick: DateTime<Utc>) -> RunResult {
    RunResult {
        tick,
        node: node.into(),
        exit: "exit code 0".into(),
        success: true,
        attempts: 1,
        duration_ms: 1250,
        finished_at: tick + chrono::TimeDelta::milliseconds(1250),
        ..RunResult::default()
    }
}

fn spec(name: &str, extra: &str) -> TaskSpec {
    let defaults = common::task_defaults(Identity::current(), zkcron::task::TaskBackend::Local);
    let path = PathBuf::from(format!("{name}.toml"));
    let text = format!("schedule = \"0 0 1 1 *\"\ncommand = \"true\"\n{extra}");
    parse_task(name, &path, &text, &defaults).expect("valid task")
}

fn settings(connect: &str, node: &str, release: &str) -> ZkSettings {
    ZkSettings {
        connect: connect.into(),
        cluster: "golden".into(),
        session_timeout: Duration::from_secs(10),
        max_clock_skew: None,
        node_id: node.into(),
        release: release.parse().unwrap(),
        labels: BTreeMap::from([("zone".to_string(), "a".to_string())]),
        history_runs: 100,
        http: None,
        auth: Default::default(),
        tls: None,
    }
}

/// Waits until `node`'s leadership satisfies `condition`.
async fn wait_leadership(
    node: &ZkCoordinator,
    what: &str,
    condition: impl Fn(&Leadership) -> bool,
) {
    let mut leadership = node.leadership();
    tokio::time::timeout(LIMIT, leadership.wait_for(|l| condition(l)))
        .await
        .unwrap_or_else(|_| panic!("waiting for {what}: {:?}", *node.leadership().borrow()))
        .expect("the coordinator is alive");
}

/// Reads the data of `path` (under the client's chroot), waiting until it exists.
async fn read(client: &zookeeper_client::Client, path: &str) -> Vec<u8> {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        match client.get_data(path).await {
            Ok((data, _)) => return data,
            Err(zookeeper_client::Error::NoNode) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("reading {path}: {e}"),
        }
    }
}

/// Waits until `path` is gone.
async fn wait_gone(client: &zookeeper_client::Client, path: &str) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while client.check_stat(path).await.unwrap().is_some() {
        assert!(tokio::time::Instant::now() < deadline, "{path} stayed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Fields whose values differ from run to run (times, sessions, the process, the random seed),
/// and the digests (a canonical serialization since the fixtures were captured). For these
/// only the JSON type must match; every other value must be equal.
const VOLATILE: &[&str] = &[
    "seed",
    "host",
    "pid",
    "started_at",
    "since",
    "session",
    "claimed_at",
    "digest",
];

/// Optional keys later releases added to records (never removed, never renamed): a live record
/// may have them beyond its fixture. Issue [6]: task-set entries name their `schedule` and
/// `timezone` (and `require_labels` when set), a drained member says `drained`.
const ADDED: &[&str] = &["schedule", "timezone", "require_labels", "drained"];

/// Panics unless `live` has exactly the keys of `golden` (plus [`ADDED`] ones), at every level,
/// with equal values (for [`VOLATILE`] keys: values of the same JSON type).
fn assert_same_shape(name: &str, golden: &Value, live: &Value, key: &str) {
    match (golden, live) {
        (Value::Object(g), Value::Object(l)) => {
            let keys = |m: &Map<String, Value>| {
                m.keys()
                    .filter(|k| g.contains_key(*k) || !ADDED.contains(&k.as_str()))
                    .cloned()
                    .collect::<Vec<_>>()
            };
            assert_eq!(keys(g), keys(l), "{name}: the keys of {key:?} differ");
            for (k, v) in g {
                assert_same_shape(name, v, &l[k], k);
            }
        }
        _ if VOLATILE.contains(&key) => assert_eq!(
            std::mem::discriminant(golden),
            std::mem::discriminant(live),
            "{name}: {key} is {live}, the fixture has {golden}"
        ),
        _ => assert_eq!(golden, live, "{name}: {key:?} differs"),
    }
}

/// Compares a record read from ZooKeeper with its fixture (or, capturing, writes the fixture).
fn check_against_fixture(name: &str, bytes: &[u8]) {
    let path = fixtures("zk").join(name);
    if capturing() {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, bytes).unwrap();
    }
    let live: Value = serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_same_shape(name, &zk_fixture(name), &live, "");
}

#[test]
fn records_this_release_writes_match_the_golden_fixtures() {
    let server = zk::shared();
    let connect = server.chroot_connect();
    // n1 runs on a runtime of its own, so that it can die: dropping the runtime stops its
    // session's client without a goodbye, as a killed process does.
    let first = tokio::runtime::Runtime::new().unwrap();
    let main = tokio::runtime::Runtime::new().unwrap();
    let t1 = at("2026-01-01T00:01:00Z");
    let t2 = at("2026-01-01T00:02:00Z");
    let tasks = [spec("a", "version_req = \">=1.0\"\n"), spec("b", "")];
    let base = "/zkcron/golden";
    let client = main.block_on(connect_client(&connect, Duration::from_secs(10)));
    let read = |path: String| main.block_on(read(&client, &path));
    // n1 is of the newer release, so it is designated for every task while it is a member.
    let mut n1_settings = settings(&connect, "n1", "2.0.0");
    n1_settings.session_timeout = Duration::from_secs(2);
    let n1 = first.block_on(async {
        let n1 = ZkCoordinator::start(n1_settings, zkcron::clock::Clock::system()).unwrap();
        n1.publish(&tasks).await.unwrap();
        wait_leadership(&n1, "n1 to lead a and b", |l| {
            !l.paused && l.tasks.len() == 2
        })
        .await;
        n1
    });
    let n2 = main.block_on(async {
        let n2 = ZkCoordinator::start(
            settings(&connect, "n2", "1.0.0"),
            zkcron::clock::Clock::system(),
        )
        .unwrap();
        n2.publish(&tasks).await.unwrap();
        n2
    });
    read(format!("{base}/members/n2"));

    // A task's record as it is created, before any claim.
    assert_eq!(first.block_on(n1.last_claimed("never")).unwrap(), None);
    check_against_fixture(
        "fire-record-created.json",
        &read(format!("{base}/tasks/never")),
    );
    assert_eq!(read(format!("{base}/tasks/never/epoch")), b"");

    let member = read(format!("{base}/members/n1"));
    check_against_fixture("member.json", &member);
    let member: MemberRecord = serde_json::from_slice(&member).unwrap();
    let TaskSetRef { digest, chunks, .. } = member.taskset;
    assert_eq!(chunks, 1);
    check_against_fixture(
        "taskset-chunk.json",
        &read(format!("{base}/tasksets/{digest}-0")),
    );
    check_against_fixture("lease.json", &read(format!("{base}/leases/a")));

    first.block_on(async {
        assert_eq!(
            n1.claim("a", t1, ClaimIntent::Run).await.unwrap(),
            ClaimOutcome::Claimed
        );
        // A tick skipped for overlap carries its ledger entry in its claim.
        let skipped = vec![TickEntry::one(t1, Reason::Overlap)];
        assert_eq!(
            n1.claim_noting("b", t1, ClaimIntent::Skip, skipped)
                .await
                .unwrap()
                .0,
            ClaimOutcome::Claimed
        );
    });
    check_against_fixture(
        "fire-record-claimed-run.json",
        &read(format!("{base}/tasks/a")),
    );
    check_against_fixture(
        "fire-record-claimed-skip.json",
        &read(format!("{base}/tasks/b")),
    );
    let run_path = format!("{base}/tasks/a/run-{}", t1.timestamp());
    check_against_fixture("run.json", &read(run_path.clone()));
    first
        .block_on(n1.run_ended("a", &result_of("n1", t1)))
        .unwrap();
    main.block_on(wait_gone(&client, &run_path));
    check_against_fixture("result.json", &read(format!("{base}/tasks/a/result")));

    // n1 claims t2 to run and dies before the run ends: n2 takes over and reruns it.
    assert_eq!(
        first.block_on(n1.claim("a", t2, ClaimIntent::Run)).unwrap(),
        ClaimOutcome::Claimed
    );
    drop(n1);
    first.shutdown_background();
    main.block_on(async {
        wait_gone(&client, &format!("{base}/tasks/a/run-{}", t2.timestamp())).await;
        wait_leadership(&n2, "n2 to lead a", |l| l.may_fire("a")).await;
        assert_eq!(n2.orphaned_tick("a").await.unwrap(), Some(t2));
        assert_eq!(n2.reclaim("a", t2).await.unwrap(), ClaimOutcome::Claimed);
    });
    check_against_fixture("fire-record-rerun.json", &read(format!("{base}/tasks/a")));
    main.block_on(async {
        n2.run_ended("a", &result_of("n2", t2)).await.unwrap();
        n2.release_all().await;
        n2.close().await;
    });
}

// The embedded backend's state dir: `journal.jsonl` (one change per line) and `snapshot.json`.

fn state_fixture(name: &str) -> Vec<u8> {
    fixture("state", name)
}

/// What the embedded backend writes for: a claim to run `a`, a claim to skip for `s`, `a`'s
/// result; then, reopened, the journal folded into the snapshot.
#[test]
fn the_state_dir_this_release_writes_matches_the_golden_fixtures() {
    let dir = common::tempdir();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let t1 = at("2026-01-01T00:01:00Z");
    let journal_path = dir.path().join("journal.jsonl");
    let snapshot_path = dir.path().join("snapshot.json");
    runtime.block_on(async {
        let local =
            Arc::new(LocalCoordinator::open(dir.path(), zkcron::clock::Clock::system()).unwrap());
        local
            .publish(&[spec("a", ""), spec("s", "")])
            .await
            .unwrap();
        local.claim("a", t1, ClaimIntent::Run).await.unwrap();
        local.claim("s", t1, ClaimIntent::Skip).await.unwrap();
        local.run_ended("a", &result_of("n1", t1)).await.unwrap();
    });
    let journal = fs::read(&journal_path).unwrap();
    if capturing() {
        fs::create_dir_all(fixtures("state")).unwrap();
        fs::write(fixtures("state").join("journal.jsonl"), &journal).unwrap();
    }
    // The journal is byte for byte what it was: its lines are appended and replayed by any
    // release, and replay resynchronises on `{"format":` at the start of a record.
    assert_eq!(
        String::from_utf8(journal).unwrap(),
        String::from_utf8(state_fixture("journal.jsonl")).unwrap()
    );
    drop(LocalCoordinator::open(dir.path(), zkcron::clock::Clock::system()).unwrap());
    let snapshot: Value = serde_json::from_slice(&fs::read(&snapshot_path).unwrap()).unwrap();
    if capturing() {
        fs::write(
            fixtures("state").join("snapshot.json"),
            fs::read(&snapshot_path).unwrap(),
        )
        .unwrap();
    }
    // Tasks are a map: compared as JSON, not as bytes (their order is not fixed).
    let golden: Value = serde_json::from_slice(&state_fixture("snapshot.json")).unwrap();
    assert_eq!(snapshot, golden);
}

/// A state dir written by an earlier release (the fixtures) is read by this one.
#[test]
fn a_state_dir_of_the_golden_fixtures_is_read_by_this_release() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let t1 = at("2026-01-01T00:01:00Z");
    for files in [&["journal.jsonl"][..], &["snapshot.json"][..]] {
        let dir = common::tempdir();
        for name in files {
            fs::write(dir.path().join(name), state_fixture(name)).unwrap();
        }
        runtime.block_on(async {
            let local = LocalCoordinator::open(dir.path(), zkcron::clock::Clock::system()).unwrap();
            local
                .publish(&[spec("a", ""), spec("s", "")])
                .await
                .unwrap();
            assert_eq!(
                local.last_claimed("a").await.unwrap(),
                Some(t1),
                "{files:?}"
            );
            assert_eq!(
                local.last_claimed("s").await.unwrap(),
                Some(t1),
                "{files:?}"
            );
            assert_eq!(
                local.last_result("a").await.unwrap(),
                Some(result_of("n1", t1))
            );
            // `a` ran and ended; `s` was skipped: nothing is orphaned.
            assert_eq!(local.orphaned_tick("a").await.unwrap(), None);
            assert_eq!(local.orphaned_tick("s").await.unwrap(), None);
            assert_eq!(
                local.claim("a", t1, ClaimIntent::Run).await.unwrap(),
                ClaimOutcome::AlreadyClaimed { record: t1 }
            );
        });
    }
}

#[test]
fn a_pause_mark_reason_is_optional_both_ways() {
    use zkcron::coord::records::MarkRecord;
    // Given a mark as releases before `reason` wrote it, when read, then it has no reason.
    let old: MarkRecord =
        serde_json::from_str(r#"{"format":1,"at":"2026-01-01T00:00:00Z","by":"ops@h"}"#).unwrap();
    assert_eq!(old.reason, None);
    // A mark without a reason is written as before: an older reader sees the same keys.
    let written = serde_json::to_value(&old).unwrap();
    assert_eq!(
        written,
        json!({"format": 1, "at": "2026-01-01T00:00:00Z", "by": "ops@h"})
    );
    // A reason is one more key, which older readers ignore.
    let with = MarkRecord {
        reason: Some("disk full".into()),
        ..old
    };
    let written = serde_json::to_value(&with).unwrap();
    assert_eq!(written["reason"], json!("disk full"));
    let back: MarkRecord = serde_json::from_value(written).unwrap();
    assert_eq!(back, with);
}

/// A backfill request (`control/backfills/<task>@backfill-<10 digits>`, and each entry of the
/// local backend's `backfills.json`): its JSON is the protocol between releases too.
#[test]
fn a_backfill_record_decodes_and_reencodes_to_the_same_json() {
    let golden = zk_fixture("backfill-running.json");
    let (record, encoded) = round_trip::<BackfillRecord>(&golden);
    assert_eq!(encoded, golden);
    assert_eq!(record.state, BackfillState::Active);
    assert_eq!(
        (record.claimed, record.finished(), record.total),
        (6, 5, 24)
    );
    assert_eq!(
        round_trip::<BackfillRecord>(&with_unknown_field(&golden)).0,
        record
    );
    // A new one, as `zkcron backfill` creates it, has no optional field.
    let new = json!({"format": 1, "task": "report", "from": "2026-01-01T00:00:00Z",
        "to": "2026-01-02T00:00:00Z", "total": 24, "requested_at": "2026-02-01T09:00:00Z",
        "by": "ops@host-a", "state": "active", "claimed": 0, "succeeded": 0, "failed": 0});
    assert_eq!(round_trip::<BackfillRecord>(&new).1, new);
}

/// A backfill's history entry is written as a manual run with `"backfill": true`: a release
/// that knows only the `schedule` and `manual` triggers reads the history instead of failing
/// on an unknown trigger and starting it afresh (it did, while backfills wrote
/// `"trigger": "backfill"`).
#[test]
fn a_backfill_history_entry_reads_as_a_manual_run_to_releases_without_backfill() {
    use zkcron::coord::RunResult;
    use zkcron::coord::records::{HistoryEntry, RunTrigger};
    let result = RunResult {
        fire_id: Some("report@backfill-0000000001-1767225600".into()),
        manual: true,
        success: true,
        ..RunResult::default()
    };
    let entry = HistoryEntry::of_run("report", &result, "1.2.0");
    assert!(entry.backfill);
    let written = serde_json::to_value(&entry).unwrap();
    assert_eq!(written["trigger"], json!("manual"));
    assert_eq!(written["backfill"], json!(true));
    // A scheduled run's entry has no `backfill` key, as before.
    let scheduled = HistoryEntry::of_run(
        "report",
        &RunResult {
            manual: false,
            ..result
        },
        "1.2.0",
    );
    assert_eq!(scheduled.trigger, RunTrigger::Schedule);
    assert!(
        serde_json::to_value(&scheduled)
            .unwrap()
            .get("backfill")
            .is_none()
    );
}
