use std::os::unix::fs::PermissionsExt;

use chrono::TimeZone;

use super::*;

fn clock() -> Clock {
    Clock::tokio_paused(Utc.with_ymd_and_hms(2026, 12, 7, 3, 0, 0).unwrap())
}

fn store(dir: &Path, limit: u64, keep: usize) -> OutputStore {
    OutputStore {
        dir: dir.join("output"),
        limit,
        keep,
    }
}

/// The records of the file at `path`, without their times.
fn records(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .skip(1)
        .map(|line| line.split_once(' ').unwrap().1.to_string())
        .collect()
}

use chrono::Utc;

#[tokio::test(start_paused = true)]
async fn a_run_keeps_its_lines_in_order_with_streams_attempts_and_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path(), 1 << 20, 5);
    let kept = KeptOutput::new(&store, "backup@1796600000", "node-a", clock());
    kept.attempt(1);
    kept.line("stdout", "copying");
    kept.line("stderr", "disk slow");
    kept.attempt(2);
    kept.line("stdout", "done");
    kept.finish("exit code 0", 5);
    let path = store.path("backup@1796600000");
    assert_eq!(path, dir.path().join("output/backup/backup@1796600000"));
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.starts_with("zkcron-output 1 backup@1796600000 node-a\n"),
        "{text}"
    );
    assert_eq!(
        records(&path),
        [
            "a 1",
            "o copying",
            "e disk slow",
            "a 2",
            "o done",
            "x exit code 0"
        ]
    );
    // Output can hold secrets: only the daemon's user reads it.
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().unwrap()), 0o700);
}

#[tokio::test(start_paused = true)]
async fn output_past_the_limit_keeps_the_head_and_the_tail_and_says_what_was_cut() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path(), 4096, 5);
    let kept = KeptOutput::new(&store, "flood@1", "n", clock());
    for i in 0..10_000 {
        kept.line("stdout", &format!("line {i:05}"));
    }
    kept.finish("exit code 0", 5);
    let path = store.path("flood@1");
    let size = std::fs::metadata(&path).unwrap().len();
    // The limit, plus the header, the cut marker and the end.
    assert!(size <= 4096 + 200, "{size} bytes kept");
    let records = records(&path);
    assert_eq!(records[0], "o line 00000");
    let cut = records
        .iter()
        .position(|r| r.starts_with("c "))
        .expect("a cut marker");
    assert_eq!(records[cut - 1], format!("o line {:05}", cut - 1));
    let (lines, bytes) = records[cut][2..].split_once(' ').unwrap();
    let kept_lines = records.len() - 2; // the cut and the end
    assert_eq!(lines.parse::<usize>().unwrap() + kept_lines, 10_000);
    assert!(bytes.parse::<u64>().unwrap() > 100_000);
    assert_eq!(records[records.len() - 2], "o line 09999");
    assert_eq!(records.last().unwrap(), "x exit code 0");
}

#[tokio::test(start_paused = true)]
async fn a_task_keeps_only_its_newest_runs() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path(), 1 << 20, 2);
    for tick in 1..=4 {
        let kept = KeptOutput::new(&store, &format!("t@{tick}"), "n", clock());
        kept.line("stdout", "hi");
        kept.finish("exit code 0", 2);
        // Modification times a clear step apart, whatever the file system's granularity.
        let at = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(tick * 100);
        std::fs::File::options()
            .write(true)
            .open(store.path(&format!("t@{tick}")))
            .unwrap()
            .set_modified(at)
            .unwrap();
    }
    let kept = KeptOutput::new(&store, "t@5", "n", clock());
    kept.finish("exit code 0", 2);
    let mut left: Vec<String> = std::fs::read_dir(store.task_dir("t"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["t@4", "t@5"]);
}

/// Run `t@1`, which printed `working` and goes on, and a reader of its file.
fn working_run(store: &OutputStore) -> (KeptOutput, OutputFile) {
    let kept = KeptOutput::new(store, "t@1", "n", clock());
    kept.line("stdout", "working");
    kept.flush();
    let file = OutputFile::open(&store.path("t@1")).unwrap().unwrap();
    (kept, file)
}

#[tokio::test(start_paused = true)]
async fn a_reader_tells_a_live_run_from_an_ended_one_and_one_whose_writer_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path(), 1 << 20, 5);
    let (kept, mut file) = working_run(&store);
    let polled = file.poll().unwrap();
    let read = String::from_utf8(polled.bytes).unwrap();
    assert!(read.ends_with(" o working\n"), "{read}");
    assert_eq!((polled.standing, polled.more), (Standing::Live, false));
    assert_eq!(file.standing_now().unwrap(), Standing::Live);
    kept.finish("exit code 0", 5);
    let polled = file.poll().unwrap();
    assert!(
        String::from_utf8(polled.bytes)
            .unwrap()
            .contains(" x exit code 0")
    );
    assert_eq!(polled.standing, Standing::Ended);
    assert_eq!(file.standing_now().unwrap(), Standing::Ended);

    // A writer dropped without an end (its daemon was killed): incomplete.
    let cut_short = KeptOutput::new(&store, "t@2", "n", clock());
    cut_short.line("stdout", "half");
    cut_short.flush();
    drop(cut_short);
    let mut file = OutputFile::open(&store.path("t@2")).unwrap().unwrap();
    assert_eq!(file.poll().unwrap().standing, Standing::Incomplete);
    assert_eq!(file.standing_now().unwrap(), Standing::Incomplete);
}

/// A run whose end is written after a reader's last read is ended at the next poll, never
/// incomplete (the poll reads again once its writer let go: the follow printed "ended" and then
/// "incomplete" when the end came between the read and the look at the lock).
#[tokio::test(start_paused = true)]
async fn a_reader_sees_the_end_written_after_its_last_read() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path(), 1 << 20, 5);
    let (kept, mut file) = working_run(&store);
    // Everything so far is read; then the run ends before the reader looks at the lock.
    let (read, _) = file.read_new().unwrap();
    assert!(String::from_utf8(read).unwrap().ends_with(" o working\n"));
    kept.finish("exit code 0", 5);
    let polled = file.poll().unwrap();
    assert_eq!(polled.standing, Standing::Ended);
    assert!(
        String::from_utf8(polled.bytes)
            .unwrap()
            .contains(" x exit code 0")
    );
}

/// Output a background process prints after the run's end is dropped, not held.
#[tokio::test(start_paused = true)]
async fn output_after_the_end_is_not_held() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path(), 1 << 20, 5);
    let kept = KeptOutput::new(&store, "t@1", "n", clock());
    kept.finish("exit code 0", 5);
    kept.line("stdout", "from a background process");
    kept.flush();
    let state = kept.state.lock().unwrap();
    assert!(state.pending.is_empty() && state.tail.is_empty());
}

#[test]
fn a_file_that_is_not_a_kept_output_is_refused_not_guessed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t@1");
    std::fs::write(&path, "hello\n").unwrap();
    let error = OutputFile::open(&path).unwrap_err();
    assert!(
        error.contains("is not a kept output of this release"),
        "{error}"
    );
    assert!(
        OutputFile::open(&dir.path().join("none"))
            .unwrap()
            .is_none()
    );
    std::os::unix::fs::symlink(&path, dir.path().join("link")).unwrap();
    let error = OutputFile::open(&dir.path().join("link")).unwrap_err();
    assert!(error.contains("not a regular file"), "{error}");
}

#[test]
fn names_become_one_safe_path_element() {
    assert_eq!(file_name("backup@1796600000"), "backup@1796600000");
    assert_eq!(
        file_name("t@item-eu/west@after-x"),
        "t@item-eu%2Fwest@after-x"
    );
    assert_eq!(file_name(".."), "%2E.");
    assert_eq!(file_name(""), "%00");
    assert_eq!(task_of("t@item-a@after-p@1"), "t");
}

#[test]
fn records_parse_by_their_kind_and_nothing_else_is_guessed() {
    assert_eq!(
        parse_record("zkcron-output 1 t@1 node-a"),
        Some(Record::Header {
            fire_id: "t@1",
            node: "node-a"
        })
    );
    assert_eq!(
        parse_record("17 e  two  spaces "),
        Some(Record::Line {
            at_ms: 17,
            stderr: true,
            text: " two  spaces "
        })
    );
    assert_eq!(
        parse_record("17 o"),
        Some(Record::Line {
            at_ms: 17,
            stderr: false,
            text: ""
        })
    );
    assert_eq!(
        parse_record("17 c 3 66"),
        Some(Record::Cut {
            at_ms: 17,
            lines: "3",
            bytes: "66"
        })
    );
    assert_eq!(
        parse_record("17 x timed out"),
        Some(Record::End {
            at_ms: 17,
            exit: "timed out"
        })
    );
    assert_eq!(parse_record("17 i"), Some(Record::Incomplete { at_ms: 17 }));
    assert_eq!(parse_record("17 z what"), None);
    assert_eq!(parse_record("soon o text"), None);
}
