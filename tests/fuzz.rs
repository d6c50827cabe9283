//! Hostile input, fuzzed: task files, schedules (parsed and evaluated at arbitrary instants in
//! arbitrary zones), every ZooKeeper record decoder and the local state dir's files must never
//! make zkcron panic, whatever bytes they hold.
//!
//! Each property runs `ZKCRON_FUZZ_CASES` cases (default 256, which keeps this file well under
//! a minute on two cores, for CI). Run it longer with, for example,
//! `ZKCRON_FUZZ_CASES=200000 cargo test --release --locked --test fuzz`. A failure prints the
//! shrunk input; it is fixed at its root and kept as a named regression test (no failure files
//! are written into the tree).
// The state-dir readers are driven through the real file system, as the daemon reads them.
#![allow(clippy::disallowed_methods)]

mod common;

use std::path::Path;

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde::de::DeserializeOwned;

use zkcron::coord::local::{LocalCoordinator, StateDirEditor, read_fire_records};
use zkcron::coord::records::{
    FireRecord, HistoryRecord, LeaseRecord, MarkRecord, MemberRecord, ResultRecord, RunRecord,
    TaskSetRecord, TaskSetRef, TriggerRecord, decode_taskset,
};
use zkcron::schedule::{Schedule, parse_timezone};
use zkcron::task::{TASK_KEYS, TaskBackend, TaskDefaults, parse_task};

/// How many cases each property runs: `ZKCRON_FUZZ_CASES`, default 256.
fn cases() -> u32 {
    match std::env::var("ZKCRON_FUZZ_CASES") {
        Ok(n) => n
            .parse()
            .unwrap_or_else(|_| panic!("ZKCRON_FUZZ_CASES={n:?} is not a whole number")),
        Err(_) => 256,
    }
}

fn config() -> Config {
    Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    }
}

fn defaults() -> TaskDefaults {
    common::task_defaults(common::root_identity(), TaskBackend::Local)
}

/// A TOML value of any kind, written loosely: strings of odd characters, numbers at the edges,
/// arrays and inline tables, and bits of syntax that are not values at all.
fn toml_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        any::<String>().prop_map(|s| format!("{s:?}")),
        "[ -~]{0,12}".prop_map(|s| format!("\"{s}\"")),
        "[0-9*/,LW#?-]{1,6}( [0-9*/,LW#?A-Za-z-]{1,6}){4,6}".prop_map(|s| format!("\"{s}\"")),
        "@[a-z]{0,10}".prop_map(|s| format!("\"{s}\"")),
        "[0-9]{1,25}[smhdw ]{0,3}".prop_map(|s| format!("\"{s}\"")),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|n| format!("{n:?}")),
        Just("true".to_string()),
        Just("\"\"".to_string()),
        Just("1979-05-27T07:32:00Z".to_string()),
        "[\\[\\]{}=,\"'#. \\n]{1,8}",
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(", "))),
            prop::collection::vec(("[a-z_]{1,8}", inner), 0..4).prop_map(|v| {
                let pairs: Vec<String> = v.iter().map(|(k, v)| format!("{k} = {v}")).collect();
                format!("{{ {} }}", pairs.join(", "))
            }),
        ]
    })
}

/// A task file: lines of known (sometimes misspelt) keys with generated values, or any text.
fn task_file() -> impl Strategy<Value = String> {
    let line = (prop::sample::select(TASK_KEYS), "[a-z_]{0,2}", toml_value())
        .prop_map(|(key, typo, value)| format!("{key}{typo} = {value}\n"));
    prop_oneof![
        prop::collection::vec(line, 0..12).prop_map(|lines| lines.concat()),
        any::<String>(),
        prop::collection::vec(any::<u8>(), 0..512)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]
}

/// Cron-like expressions: five to seven fields of the characters cron uses, or any string.
fn expression() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::collection::vec("[0-9*/,LW#?A-Za-z-]{1,8}", 5..=7).prop_map(|f| f.join(" ")),
        1 => prop::collection::vec(
            prop_oneof![
                (0u64..100).prop_map(|n| n.to_string()),
                any::<u64>().prop_map(|n| n.to_string()),
                Just("*".to_string()),
                (0u64..70, 0u64..70).prop_map(|(a, b)| format!("{a}-{b}")),
                (0u64..70, 0u64..100).prop_map(|(a, b)| format!("{a}/{b}")),
                Just("L".to_string()),
                (0u64..40).prop_map(|n| format!("{n}W")),
                (0u64..10, 0u64..8).prop_map(|(a, b)| format!("{a}#{b}")),
            ],
            5..=6
        )
        .prop_map(|f| f.join(" ")),
        1 => "@[a-z]{0,9}",
        1 => any::<String>(),
    ]
}

/// Any instant chrono can represent, weighted towards the years schedules are used in.
fn instant() -> impl Strategy<Value = DateTime<Utc>> {
    let min = DateTime::<Utc>::MIN_UTC.timestamp();
    let max = DateTime::<Utc>::MAX_UTC.timestamp();
    prop_oneof![
        3 => 0i64..4_102_444_800,
        1 => min..=max,
        1 => prop_oneof![Just(min), Just(max), Just(max - 60), Just(min + 60)],
    ]
    .prop_map(|s| DateTime::from_timestamp(s, 0).expect("in range"))
}

fn zone() -> impl Strategy<Value = chrono_tz::Tz> {
    prop::sample::select(&chrono_tz::TZ_VARIANTS[..])
}

/// A stored record of each kind, as zkcron writes it (tests/fixtures/zk), for mutation.
const GOLDEN_RECORDS: &[&str] = &[
    include_str!("fixtures/zk/fire-record-claimed-run.json"),
    include_str!("fixtures/zk/fire-record-claimed-skip.json"),
    include_str!("fixtures/zk/fire-record-created.json"),
    include_str!("fixtures/zk/fire-record-rerun.json"),
    include_str!("fixtures/zk/history.json"),
    include_str!("fixtures/zk/lease.json"),
    include_str!("fixtures/zk/member.json"),
    include_str!("fixtures/zk/result.json"),
    include_str!("fixtures/zk/run.json"),
    include_str!("fixtures/zk/taskset-chunk.json"),
    include_str!("fixtures/zk/trigger-ended.json"),
];

/// A JSON value that may replace any part of a record: values at the edges of every type.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::{Value, json};
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|n| json!(n)),
        any::<String>().prop_map(Value::String),
        prop_oneof![
            Just("+262142-12-31T23:59:59.999999999Z"),
            Just("-262143-01-01T00:00:00Z"),
            Just("9999-12-31T23:59:59Z"),
            Just("1970-01-01T00:00:00Z"),
            Just("pending"),
            Just("claimed"),
            Just("ended"),
            Just("schedule"),
            Just("manual"),
            Just("ffffffffffffffff"),
            Just(""),
        ]
        .prop_map(|s| Value::String(s.to_string())),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,10}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Replaces the `pick`-th node (in a depth-first walk) of `value` by `with`.
fn replace_nth(value: &mut serde_json::Value, pick: &mut usize, with: &serde_json::Value) {
    if *pick == 0 {
        *value = with.clone();
        *pick = usize::MAX;
        return;
    }
    *pick -= 1;
    match value {
        serde_json::Value::Array(items) => {
            for item in items {
                if *pick == usize::MAX {
                    return;
                }
                replace_nth(item, pick, with);
            }
        }
        serde_json::Value::Object(map) => {
            for (_, item) in map.iter_mut() {
                if *pick == usize::MAX {
                    return;
                }
                replace_nth(item, pick, with);
            }
        }
        _ => {}
    }
}

/// The bytes of a record: a golden record with one part replaced or a field removed, a golden
/// record with its bytes cut or changed, or any bytes.
fn record_bytes() -> impl Strategy<Value = Vec<u8>> {
    let golden = prop::sample::select(GOLDEN_RECORDS);
    prop_oneof![
        3 => (golden.clone(), any::<usize>(), json_value()).prop_map(|(text, pick, with)| {
            let mut value: serde_json::Value = serde_json::from_str(text).expect("golden JSON");
            let nodes = count_nodes(&value);
            let mut pick = pick % nodes;
            replace_nth(&mut value, &mut pick, &with);
            serde_json::to_vec(&value).expect("a JSON value serializes")
        }),
        1 => (golden.clone(), any::<usize>()).prop_map(|(text, pick)| {
            let mut value: serde_json::Value = serde_json::from_str(text).expect("golden JSON");
            if let serde_json::Value::Object(map) = &mut value
                && !map.is_empty()
            {
                let key = map.keys().nth(pick % map.len()).cloned().expect("in range");
                map.remove(&key);
            }
            serde_json::to_vec(&value).expect("a JSON value serializes")
        }),
        2 => (golden, prop::collection::vec((any::<usize>(), any::<u8>()), 0..6), any::<usize>())
            .prop_map(|(text, changes, cut)| {
                let mut bytes = text.as_bytes().to_vec();
                for (at, byte) in changes {
                    let at = at % bytes.len();
                    bytes[at] = byte;
                }
                bytes.truncate(cut % (bytes.len() + 1));
                bytes
            }),
        1 => prop::collection::vec(any::<u8>(), 0..256),
    ]
}

fn count_nodes(value: &serde_json::Value) -> usize {
    1 + match value {
        serde_json::Value::Array(items) => items.iter().map(count_nodes).sum(),
        serde_json::Value::Object(map) => map.values().map(count_nodes).sum(),
        _ => 0,
    }
}

/// Decodes `bytes` as a `T`, as the ZooKeeper driver and the cluster commands do; an error is
/// fine, a panic is not. Decoded records are encoded again, as nodes rewrite them.
fn decode<T: DeserializeOwned + serde::Serialize>(bytes: &[u8]) -> Option<T> {
    let record = serde_json::from_slice::<T>(bytes).ok()?;
    serde_json::to_vec(&record).expect("a decoded record encodes");
    Some(record)
}

/// The local state dir's files, each absent or holding bytes derived from its golden form.
fn state_file(golden: &'static str) -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![
        1 => Just(None),
        1 => Just(Some(golden.as_bytes().to_vec())),
        3 => (prop::collection::vec((any::<usize>(), any::<u8>()), 0..6), any::<usize>())
            .prop_map(move |(changes, cut)| {
                let mut bytes = golden.as_bytes().to_vec();
                for (at, byte) in changes {
                    let at = at % bytes.len();
                    bytes[at] = byte;
                }
                bytes.truncate(cut % (bytes.len() + 1));
                Some(bytes)
            }),
        1 => prop::collection::vec(any::<u8>(), 0..256).prop_map(Some),
    ]
}

const GOLDEN_JOURNAL: &str = include_str!("fixtures/state/journal.jsonl");
const GOLDEN_SNAPSHOT: &str = include_str!("fixtures/state/snapshot.json");
const GOLDEN_PAUSED: &str =
    r#"{"format":1,"tasks":{"t":{"by":"ops@host","at":"2026-01-01T00:00:00Z"}}}"#;
const GOLDEN_TRIGGERS: &str = r#"{"format":1,"triggers":{"t@manual-0000000001":{"format":1,"task":"t","requested_at":"2026-01-01T00:00:00Z","by":"ops@host","state":"pending"}}}"#;
const GOLDEN_HISTORY: &str = include_str!("fixtures/zk/history.json");

fn write_state(dir: &Path, name: &str, bytes: &Option<Vec<u8>>) {
    if let Some(bytes) = bytes {
        if let Some(parent) = Path::new(name).parent() {
            std::fs::create_dir_all(dir.join(parent)).unwrap();
        }
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn task_file_parsing_never_panics(text in task_file()) {
        let _ = parse_task("t", Path::new("/jobs/t.toml"), &text, &defaults());
    }

    #[test]
    fn schedule_parsing_and_evaluation_never_panic(
        expression in expression(),
        zone in zone(),
        at in instant(),
    ) {
        if let Ok(schedule) = Schedule::parse(&expression, zone) {
            let _ = schedule.next_after(at);
            let _ = schedule.latest_at_or_before(at);
            for _ in schedule.ticks_after(at).take(3) {}
        }
    }

    #[test]
    fn timezone_parsing_never_panics(name in any::<String>()) {
        let _ = parse_timezone(&name);
    }

    #[test]
    fn zookeeper_record_decoders_never_panic(bytes in record_bytes()) {
        let _ = decode::<MemberRecord>(&bytes);
        let _ = decode::<TaskSetRef>(&bytes);
        if let Some(record) = decode::<TaskSetRecord>(&bytes) {
            let _ = decode_taskset(&record);
        }
        let _ = decode::<MarkRecord>(&bytes);
        let _ = decode::<LeaseRecord>(&bytes);
        let _ = decode::<FireRecord>(&bytes);
        let _ = decode::<RunRecord>(&bytes);
        let _ = decode::<ResultRecord>(&bytes);
        let _ = decode::<TriggerRecord>(&bytes);
        if let Some(record) = decode::<HistoryRecord>(&bytes) {
            for entry in &record.runs {
                let _ = zkcron::coord::record::manual_task(&entry.fire_id);
            }
        }
    }

    #[test]
    fn local_state_readers_never_panic(
        journal in state_file(GOLDEN_JOURNAL),
        snapshot in state_file(GOLDEN_SNAPSHOT),
        paused in state_file(GOLDEN_PAUSED),
        triggers in state_file(GOLDEN_TRIGGERS),
        history in state_file(GOLDEN_HISTORY),
    ) {
        let dir = tempfile::tempdir().unwrap();
        write_state(dir.path(), "journal.jsonl", &journal);
        write_state(dir.path(), "snapshot.json", &snapshot);
        write_state(dir.path(), "paused.json", &paused);
        write_state(dir.path(), "triggers.json", &triggers);
        write_state(dir.path(), "history/t.json", &history);
        let _ = read_fire_records(dir.path());
        if let Ok(editor) = StateDirEditor::open(dir.path(), zkcron::clock::Clock::system().now()) {
            let _ = editor.tasks().count();
        }
        if let Ok(local) = LocalCoordinator::open(dir.path(), zkcron::clock::Clock::system()) {
            let _ = local.history("t", 10);
            let _ = local.trigger_state("t@manual-0000000001");
        }
    }
}

/// The golden state files the fuzzing starts from are valid, so that mutating them reaches
/// the readers' checks past JSON syntax.
#[test]
fn golden_state_files_are_read() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [
        ("journal.jsonl", GOLDEN_JOURNAL),
        ("snapshot.json", GOLDEN_SNAPSHOT),
        ("paused.json", GOLDEN_PAUSED),
        ("triggers.json", GOLDEN_TRIGGERS),
        ("history/t.json", GOLDEN_HISTORY),
    ] {
        write_state(dir.path(), name, &Some(text.as_bytes().to_vec()));
    }
    let local = LocalCoordinator::open(dir.path(), zkcron::clock::Clock::system())
        .expect("golden state opens");
    assert!(local.paused().contains("t"));
    assert!(local.trigger_state("t@manual-0000000001").is_some());
    assert!(!local.history("t", 10).is_empty());
}

/// Found by `schedule_parsing_and_evaluation_never_panic`: an instant at either end of chrono's
/// range (a fire record or result of `+262142-12-31T23:59:59Z` written by a hostile client)
/// has no local time in a zone east (or, at the start, west) of UTC, and evaluating a schedule
/// there panicked in chrono ("Local time out of range"), taking the daemon down.
#[test]
fn schedule_evaluation_at_the_ends_of_chronos_range_does_not_panic() {
    let max = DateTime::<Utc>::MAX_UTC;
    let min = DateTime::<Utc>::MIN_UTC;
    for zone in [
        chrono_tz::Asia::Tokyo,
        chrono_tz::America::New_York,
        chrono_tz::Pacific::Kiritimati,
        chrono_tz::UTC,
    ] {
        for expression in ["* * * * *", "30 2 * * *", "0 0 29 2 *", "*/7 * * * * *"] {
            let schedule = Schedule::parse(expression, zone).unwrap();
            for at in [max, max - chrono::TimeDelta::days(1)] {
                assert_eq!(schedule.next_after(at), None, "{zone} {expression} {at}");
            }
            for at in [max, min, max - chrono::TimeDelta::days(1)] {
                let _ = schedule.latest_at_or_before(at);
                let _ = schedule.ticks_after(at).take(2).count();
            }
            assert_eq!(schedule.latest_at_or_before(min), None);
            // Ordinary instants are unaffected.
            let now = DateTime::from_timestamp(1_767_225_600, 0).unwrap();
            assert!(schedule.next_after(now).is_some_and(|t| t > now));
        }
    }
}
