//! The in-memory tails write exactly the file the whole-file rewrite wrote, and the writer
//! thread writes them behind the runs.
// The writer is a thread of its own that waits on the real clock; so do these tests.
#![allow(clippy::disallowed_methods)]

use chrono::{DateTime, Utc};

use std::time::{Duration, Instant};

use super::{CACHE_BYTES, HistoryFiles, Tails};
use crate::coord::record::{self, HISTORY_MAX_BYTES};
use crate::coord::records::{HistoryEntry, HistoryRecord, RunTrigger};

fn entry(fire_id: &str, s: i64) -> HistoryEntry {
    let at = DateTime::<Utc>::from_timestamp(1_767_225_600 + s, 0).unwrap();
    HistoryEntry {
        fire_id: fire_id.into(),
        tick: at,
        node: "here".into(),
        release: "0.1.0".into(),
        started_at: at,
        duration_ms: 12,
        exit_code: Some(0),
        signal: None,
        success: true,
        attempts: 1,
        trigger: RunTrigger::Schedule,
        backfill: false,
        after: None,
        items: None,
        output_tail: None,
    }
}

/// The old way: the whole record through `record::append_history` and serde.
fn whole(runs: &mut Vec<HistoryEntry>, entry: HistoryEntry, limit: usize) -> Option<Vec<u8>> {
    record::append_history(runs, entry, limit).then(|| {
        serde_json::to_vec(&HistoryRecord {
            format: 1,
            runs: runs.clone(),
        })
        .unwrap()
    })
}

/// [`Tails::append`], and the file it leaves to write if it changed the history.
fn append(
    tails: &mut Tails,
    task: &str,
    stored: impl FnOnce() -> Vec<HistoryEntry>,
    entry: HistoryEntry,
    limit: usize,
) -> Option<Vec<u8>> {
    tails
        .append(task, stored, entry, limit, Instant::now())
        .then(|| tails.render(task).unwrap())
}

#[test]
fn appends_write_the_bytes_the_whole_record_rewrite_wrote() {
    // From a file an older release wrote (3 runs), with a repeat and past the limit.
    let stored: Vec<HistoryEntry> = (0..3).map(|i| entry(&format!("t@{i}"), i)).collect();
    let mut old = stored.clone();
    let mut tails = Tails::default();
    let mut read = 0;
    for (i, fire_id) in ["t@3", "t@1", "t@4", "t@5", "t@6", "t@6"]
        .iter()
        .enumerate()
    {
        let new = entry(fire_id, 10 + i as i64);
        let expected = whole(&mut old, new.clone(), 4);
        let got = append(
            &mut tails,
            "t",
            || {
                read += 1;
                stored.clone()
            },
            new,
            4,
        );
        assert_eq!(
            got.as_deref().map(String::from_utf8_lossy),
            expected.as_deref().map(String::from_utf8_lossy),
            "after {fire_id}"
        );
    }
    assert_eq!(
        read, 1,
        "the file is read once, when the task is not in memory"
    );
    // And what it writes reads back as the record.
    let bytes = append(&mut tails, "t", Vec::new, entry("t@7", 30), 4).unwrap();
    let record: HistoryRecord = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(record.runs.len(), 4);
    assert_eq!(record.runs[3].fire_id, "t@7");
}

#[test]
fn the_byte_bound_drops_the_oldest_runs_as_the_whole_record_did() {
    let long = "x".repeat(20_000);
    let mut old = Vec::new();
    let mut tails = Tails::default();
    for i in 0..30 {
        let new = entry(&format!("{long}@{i}"), i);
        let expected = whole(&mut old, new.clone(), 1000);
        assert_eq!(append(&mut tails, "t", Vec::new, new, 1000), expected);
    }
    assert!(old.len() < 30);
    assert!(serde_json::to_vec(&old).unwrap().len() <= HISTORY_MAX_BYTES);
}

#[test]
fn memory_is_bounded_and_an_evicted_task_is_read_from_its_file_again() {
    let long = "y".repeat(10_000);
    let mut tails = Tails::default();
    // Enough tasks of ~10 kB each to pass the bound several times over.
    let tasks = 3 * CACHE_BYTES / 10_000;
    for t in 0..tasks {
        tails.append(
            &format!("t{t}"),
            Vec::new,
            entry(&long, 0),
            100,
            Instant::now(),
        );
        // The writer keeps up: what it wrote may go.
        tails.take_dirty();
    }
    assert!(tails.bytes <= CACHE_BYTES, "{} bytes held", tails.bytes);
    assert!(!tails.holds("t0"), "the least recently used went first");
    assert!(tails.holds(&format!("t{}", tasks - 1)));
    let mut read = false;
    let bytes = append(
        &mut tails,
        "t0",
        || {
            read = true;
            vec![entry("t0@old", 0)]
        },
        entry("t0@new", 1),
        100,
    );
    assert!(read, "an evicted task's history comes from its file");
    let record: HistoryRecord = serde_json::from_slice(&bytes.unwrap()).unwrap();
    let ids: Vec<&str> = record.runs.iter().map(|r| r.fire_id.as_str()).collect();
    assert_eq!(ids, ["t0@old", "t0@new"]);
}

#[test]
fn a_dirty_tail_is_never_dropped_before_its_file_is_written() {
    let long = "z".repeat(10_000);
    let mut tails = Tails::default();
    let tasks = 2 * CACHE_BYTES / 10_000;
    for t in 0..tasks {
        tails.append(
            &format!("t{t}"),
            Vec::new,
            entry(&long, 0),
            100,
            Instant::now(),
        );
    }
    assert!(
        tails.holds("t0"),
        "unwritten runs stay until the writer took them"
    );
    let files = tails.take_dirty();
    assert_eq!(files.len(), tasks, "every dirty tail is written");
    assert!(
        tails.bytes <= CACHE_BYTES,
        "then the clean ones over the bound go"
    );
    assert!(
        tails.take_dirty().is_empty(),
        "and nothing is written twice"
    );
}

fn stored_ids(dir: &std::path::Path, task: &str) -> Option<Vec<String>> {
    let bytes = std::fs::read(dir.join("history").join(format!("{task}.json"))).ok()?;
    let record: HistoryRecord = serde_json::from_slice(&bytes).unwrap();
    Some(record.runs.into_iter().map(|r| r.fire_id).collect())
}

#[test]
fn a_run_is_in_the_history_at_once_and_in_its_file_once_written() {
    let dir = tempfile::tempdir().unwrap();
    let history = HistoryFiles::with_flush_after(dir.path(), Duration::from_secs(3600)).unwrap();
    history.append("t", entry("t@1", 1));
    history.append("t", entry("t@2", 2));
    let newest_first: Vec<_> = history
        .history("t", 10)
        .into_iter()
        .map(|r| r.fire_id)
        .collect();
    assert_eq!(
        newest_first,
        ["t@2", "t@1"],
        "`zkcron history` sees runs not yet written"
    );
    assert_eq!(stored_ids(dir.path(), "t"), None, "written behind the runs");
    history.flush();
    assert_eq!(stored_ids(dir.path(), "t").unwrap(), ["t@1", "t@2"]);
}

#[test]
fn the_writer_writes_a_dirty_history_after_its_delay() {
    let dir = tempfile::tempdir().unwrap();
    let history = HistoryFiles::with_flush_after(dir.path(), Duration::from_millis(20)).unwrap();
    history.append("t", entry("t@1", 1));
    let deadline = Instant::now() + Duration::from_secs(10);
    while stored_ids(dir.path(), "t").is_none() {
        assert!(
            Instant::now() < deadline,
            "the writer never wrote the history"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(stored_ids(dir.path(), "t").unwrap(), ["t@1"]);
}

#[test]
fn a_history_dropped_with_unwritten_runs_writes_them_first() {
    let dir = tempfile::tempdir().unwrap();
    let history = HistoryFiles::with_flush_after(dir.path(), Duration::from_secs(3600)).unwrap();
    history.append("a", entry("a@1", 1));
    history.append("b", entry("b@1", 1));
    drop(history);
    assert_eq!(stored_ids(dir.path(), "a").unwrap(), ["a@1"]);
    assert_eq!(stored_ids(dir.path(), "b").unwrap(), ["b@1"]);
    // And a later daemon reads them from the files.
    let history = HistoryFiles::open(dir.path()).unwrap();
    history.append("a", entry("a@2", 2));
    let ids: Vec<_> = history
        .history("a", 10)
        .into_iter()
        .map(|r| r.fire_id)
        .collect();
    assert_eq!(ids, ["a@2", "a@1"]);
}

#[test]
fn a_history_written_after_its_state_dir_was_removed_does_not_recreate_it() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let history = HistoryFiles::with_flush_after(&state, Duration::from_secs(3600)).unwrap();
    history.append("t", entry("t@1", 1));
    std::fs::remove_dir(&state).unwrap();
    drop(history);
    assert!(
        !state.exists(),
        "the history writer made the removed state dir again"
    );
}

#[test]
fn the_tasks_with_a_history_are_those_with_runs_held_or_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let history = HistoryFiles::with_flush_after(dir.path(), Duration::from_secs(3600)).unwrap();
    history.append("written", entry("written@1", 1));
    history.flush();
    let reopened = HistoryFiles::with_flush_after(dir.path(), Duration::from_secs(3600)).unwrap();
    reopened.append("held", entry("held@2", 2));
    let mut tasks: Vec<String> = reopened.tasks_with_history().into_iter().collect();
    tasks.sort();
    assert_eq!(
        tasks,
        ["held", "written"],
        "a file, and runs not yet written"
    );
}
