//! The journal writer's tests: a failed append cut back, group commit, results synced late.

use super::*;
use std::sync::mpsc;

use crate::coord::local::queue::Pusher;
use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use tokio::sync::oneshot;

use crate::coord::local::Change;
use nix::errno::Errno;

fn at(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_767_225_600 + s, 0).unwrap()
}

/// A journal file in memory whose steps fail on demand.
#[derive(Default)]
struct FlakyJournal {
    bytes: Arc<Mutex<Vec<u8>>>,
    /// The next append writes this many bytes, then fails with ENOSPC.
    short_write: Option<usize>,
    /// The next this-many truncations fail with EIO.
    failing_truncates: usize,
}

impl JournalFile for FlakyJournal {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut file = self.bytes.lock().unwrap();
        match self.short_write.take() {
            Some(written) => {
                file.extend_from_slice(&bytes[..written]);
                Err(io::Error::from_raw_os_error(Errno::ENOSPC as i32))
            }
            None => {
                file.extend_from_slice(bytes);
                Ok(())
            }
        }
    }

    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        if self.failing_truncates > 0 {
            self.failing_truncates -= 1;
            return Err(io::Error::from_raw_os_error(Errno::EIO as i32));
        }
        self.bytes.lock().unwrap().truncate(len as usize);
        Ok(())
    }
}

fn flaky_writer(dir: &Path) -> (JournalWriter<FlakyJournal>, Arc<Mutex<Vec<u8>>>) {
    let journal = FlakyJournal::default();
    let bytes = journal.bytes.clone();
    let writer = JournalWriter {
        state_dir: dir.to_path_buf(),
        journal,
        good_len: 0,
        torn: false,
        lines: 0,
        mirror: HashMap::new(),
        unsynced_since: None,
        sync_failing: false,
    };
    (writer, bytes)
}

/// A batch of claims of `tasks` at `tick`.
fn batch(tasks: &[&str], tick: DateTime<Utc>) -> Vec<PendingWrite> {
    tasks
        .iter()
        .map(|task| PendingWrite {
            change: Change {
                claimed: Some(tick),
                run: true,
                ..Change::of(task)
            },
            durability: Durability::Synced,
            batching: Batching::Gather,
            durable: oneshot::channel().0,
        })
        .collect()
}

#[test]
fn given_a_write_cut_short_by_a_full_disk_then_the_batch_fails_and_the_journal_is_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let (mut writer, bytes) = flaky_writer(dir.path());
    writer.append(&batch(&["a"], at(60))).unwrap();
    let before = bytes.lock().unwrap().clone();

    writer.journal.short_write = Some(30);
    let error = writer.append(&batch(&["a", "b"], at(120))).unwrap_err();
    assert!(
        error.contains(&format!(
            "state_dir {} is full: free space on ",
            dir.path().display()
        )),
        "{error}"
    );
    assert_eq!(*bytes.lock().unwrap(), before, "the torn write was cut off");
    // The failed batch changed nothing: neither task's claim counts.
    assert_eq!(writer.mirror["a"].last_claimed, Some(at(60)));
    assert!(!writer.mirror.contains_key("b"));

    // The next record starts on a line of its own.
    writer.append(&batch(&["b"], at(120))).unwrap();
    let text = String::from_utf8(bytes.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    for line in lines {
        serde_json::from_str::<Change>(line).unwrap();
    }
}

#[test]
fn given_a_torn_write_that_cannot_be_cut_off_then_nothing_is_appended_until_it_can() {
    let dir = tempfile::tempdir().unwrap();
    let (mut writer, bytes) = flaky_writer(dir.path());
    writer.append(&batch(&["a"], at(60))).unwrap();
    let before = bytes.lock().unwrap().clone();

    writer.journal.short_write = Some(30);
    writer.journal.failing_truncates = 2;
    let error = writer.append(&batch(&["a"], at(120))).unwrap_err();
    assert!(error.contains("cannot be cut off"), "{error}");
    let torn = bytes.lock().unwrap().clone();
    assert_eq!(torn.len(), before.len() + 30);

    // Still torn: the claim fails and nothing is glued onto the torn rest.
    let error = writer.append(&batch(&["a"], at(180))).unwrap_err();
    assert!(
        error.contains("ends in the torn rest of a write that failed"),
        "{error}"
    );
    assert!(
        error.contains("no change is recorded until it can be"),
        "{error}"
    );
    assert_eq!(*bytes.lock().unwrap(), torn);
    assert_eq!(writer.mirror["a"].last_claimed, Some(at(60)));

    // Once the truncation works, the torn rest goes first and claims succeed again.
    writer.append(&batch(&["a"], at(180))).unwrap();
    let text = String::from_utf8(bytes.lock().unwrap().clone()).unwrap();
    assert!(text.starts_with(std::str::from_utf8(&before).unwrap()));
    assert_eq!(text.lines().count(), 2, "{text}");
    assert_eq!(writer.mirror["a"].last_claimed, Some(at(180)));
}

/// A journal file in memory that records how many lines each sync made durable, and whose
/// first sync can be held until the test lets it go.
struct CountingJournal {
    appended: usize,
    /// Lines made durable by each sync, in order.
    synced: Arc<Mutex<Vec<usize>>>,
    /// (told when the first sync starts, waited on before it ends)
    hold: Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>,
}

impl JournalFile for CountingJournal {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.appended += bytes.iter().filter(|&&b| b == b'\n').count();
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        if let Some((started, release)) = self.hold.take() {
            started.send(()).unwrap();
            release.recv().unwrap();
        }
        self.synced
            .lock()
            .unwrap()
            .push(std::mem::take(&mut self.appended));
        Ok(())
    }

    fn truncate(&mut self, _len: u64) -> io::Result<()> {
        Ok(())
    }
}

/// Starts a writer thread on a [`CountingJournal`]; returns its queue, the lines per sync,
/// and the thread to join once the queue is dropped.
fn counting_writer(
    dir: &Path,
    gather: Gather,
    hold: Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>,
) -> (Pusher, Arc<Mutex<Vec<usize>>>, std::thread::JoinHandle<()>) {
    let synced = Arc::new(Mutex::new(Vec::new()));
    let writer = JournalWriter {
        state_dir: dir.to_path_buf(),
        journal: CountingJournal {
            appended: 0,
            synced: synced.clone(),
            hold,
        },
        good_len: 0,
        torn: false,
        lines: 0,
        mirror: HashMap::new(),
        unsynced_since: None,
        sync_failing: false,
    };
    let queue = Arc::new(Queue::default());
    let pusher = Pusher(queue.clone());
    let thread = std::thread::spawn(move || writer.run(&queue, gather));
    (pusher, synced, thread)
}

/// Queues a claim of `task` at `tick`; the receiver is answered once it is durable.
fn claim(queue: &Pusher, task: &str, tick: DateTime<Utc>) -> oneshot::Receiver<Result<(), String>> {
    let (durable, done) = oneshot::channel();
    let mut write = batch(&[task], tick).pop().unwrap();
    write.durable = durable;
    queue.0.push(write).unwrap();
    done
}

#[test]
fn given_claims_of_one_instant_arriving_one_by_one_then_one_sync_commits_them_all() {
    const TASKS: usize = 10;
    let dir = tempfile::tempdir().unwrap();
    // A quiet window far longer than the senders need, so that the count, not the
    // machine's timing, is what is checked.
    let gather = Gather {
        quiet: Duration::from_millis(500),
        at_most: Duration::from_secs(30),
        results: Duration::ZERO,
    };
    let (queue, synced, writer) = counting_writer(dir.path(), gather, None);
    let queue = Arc::new(queue);
    let start = Arc::new(std::sync::Barrier::new(TASKS));
    let senders: Vec<_> = (0..TASKS)
        .map(|i| {
            let (queue, start) = (queue.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                claim(&queue, &format!("task-{i}"), at(60))
            })
        })
        .collect();
    for sender in senders {
        let done = sender.join().unwrap();
        done.blocking_recv().unwrap().unwrap();
    }
    assert_eq!(*synced.lock().unwrap(), vec![TASKS], "lines per sync");
    drop(queue);
    writer.join().unwrap();
}

#[test]
fn given_claims_arriving_while_a_sync_is_in_flight_then_the_next_sync_commits_them_all() {
    const TASKS: usize = 10;
    let dir = tempfile::tempdir().unwrap();
    let (started, sync_started) = mpsc::channel();
    let (release, released) = mpsc::channel();
    let gather = Gather {
        quiet: Duration::ZERO,
        at_most: Duration::ZERO,
        results: Duration::ZERO,
    };
    let (queue, synced, writer) = counting_writer(dir.path(), gather, Some((started, released)));
    let first = claim(&queue, "task-0", at(60));
    sync_started.recv().unwrap();
    let rest: Vec<_> = (1..TASKS)
        .map(|i| claim(&queue, &format!("task-{i}"), at(60)))
        .collect();
    release.send(()).unwrap();
    first.blocking_recv().unwrap().unwrap();
    for done in rest {
        done.blocking_recv().unwrap().unwrap();
    }
    assert_eq!(
        *synced.lock().unwrap(),
        vec![1, TASKS - 1],
        "lines per sync"
    );
    drop(queue);
    writer.join().unwrap();
}

/// Queues a result of `task` for `tick`; the receiver is answered once it is written.
fn result(
    queue: &Pusher,
    task: &str,
    tick: DateTime<Utc>,
) -> oneshot::Receiver<Result<(), String>> {
    let (durable, done) = oneshot::channel();
    queue
        .0
        .push(PendingWrite {
            change: Change {
                result: Some(crate::coord::RunResult {
                    tick,
                    ..crate::coord::RunResult::default()
                }),
                ..Change::of(task)
            },
            durability: Durability::Written,
            batching: Batching::Gather,
            durable,
        })
        .unwrap();
    done
}

const NO_GATHER: Gather = Gather {
    quiet: Duration::ZERO,
    at_most: Duration::ZERO,
    results: Duration::ZERO,
};

#[test]
// The writer's gathering runs on the real monotonic clock.
#[allow(clippy::disallowed_methods)]
fn a_batch_of_results_takes_the_results_of_its_window_and_a_claim_ends_the_window() {
    let queue = Arc::new(Queue::default());
    let pusher = Pusher(queue.clone());
    let _a = result(&pusher, "a", at(60));
    let first = queue.take();
    let _b = result(&pusher, "b", at(60));
    let gather = Gather {
        results: Duration::from_millis(1),
        ..NO_GATHER
    };
    let batch = gather_batch(first, &queue, gather, Instant::now);
    let tasks: Vec<&str> = batch.iter().map(|w| w.change.task.as_str()).collect();
    assert_eq!(tasks, ["a", "b"]);

    let _c = result(&pusher, "c", at(60));
    let first = queue.take();
    let _d = claim(&pusher, "d", at(120));
    let gather = Gather {
        results: Duration::from_secs(3600),
        ..NO_GATHER
    };
    let (sent, batch) = mpsc::channel();
    let writer = queue.clone();
    std::thread::spawn(move || {
        let batch = gather_batch(first, &writer, gather, Instant::now);
        let _ = sent.send(
            batch
                .iter()
                .map(|w| w.change.task.clone())
                .collect::<Vec<_>>(),
        );
    });
    let tasks = batch
        .recv_timeout(Duration::from_secs(30))
        .expect("a queued claim does not wait for the results' window");
    assert_eq!(tasks, ["c", "d"]);
}

#[test]
// The writer's gathering runs on the real monotonic clock.
#[allow(clippy::disallowed_methods)]
fn a_change_at_once_is_committed_without_gathering_and_takes_what_is_queued_with_it() {
    // Windows of an hour: a batch that gathered would not come back within the test.
    let gather = Gather {
        quiet: Duration::from_secs(3600),
        at_most: Duration::from_secs(3600),
        results: Duration::from_secs(3600),
    };
    let queue = Arc::new(Queue::default());
    let pusher = Pusher(queue.clone());
    let gathered = |first: Vec<PendingWrite>| {
        let (sent, batch) = mpsc::channel();
        let writer = queue.clone();
        std::thread::spawn(move || {
            let batch = gather_batch(first, &writer, gather, Instant::now);
            let tasks: Vec<String> = batch.iter().map(|w| w.change.task.clone()).collect();
            let _ = sent.send(tasks);
        });
        batch
            .recv_timeout(Duration::from_secs(30))
            .expect("a change at once does not wait for others")
    };
    let at_once = |durability| {
        let _answer = claim(&pusher, "queued", at(120));
        let mut first = queue.take();
        first[0].durability = durability;
        first[0].batching = Batching::AtOnce;
        first
    };
    // The end of the run a tick was queued behind, with the claim that came meanwhile.
    let first = at_once(Durability::Written);
    let _claim = claim(&pusher, "other", at(120));
    assert_eq!(gathered(first), ["queued", "other"]);
    // The queued tick's claim, alone.
    assert_eq!(gathered(at_once(Durability::Synced)), ["queued"]);
}

#[test]
fn results_are_answered_unsynced_and_the_next_claim_syncs_them_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let (queue, synced, writer) = counting_writer(dir.path(), NO_GATHER, None);
    for task in ["a", "b"] {
        result(&queue, task, at(60))
            .blocking_recv()
            .unwrap()
            .unwrap();
    }
    assert!(synced.lock().unwrap().is_empty(), "results cost no sync");
    claim(&queue, "a", at(120))
        .blocking_recv()
        .unwrap()
        .unwrap();
    assert_eq!(
        *synced.lock().unwrap(),
        vec![3],
        "the claim's sync made the results durable too"
    );
    drop(queue);
    writer.join().unwrap();
    assert_eq!(synced.lock().unwrap().len(), 1, "nothing was left to sync");
}

#[test]
#[allow(clippy::disallowed_methods)] // the writer thread syncs on the real clock
fn results_with_no_claim_after_them_are_synced_within_a_second() {
    assert_eq!(SYNC_WRITTEN_WITHIN, Duration::from_secs(1));
    // The writer's timed wait may wake this much late on a loaded machine; a writer that
    // waited a second period, or for a claim, is later still.
    let scheduling = Duration::from_millis(500);
    let dir = tempfile::tempdir().unwrap();
    let (sync_started, sync_starts) = mpsc::channel();
    let (release_sync, sync_released) = mpsc::channel();
    let (queue, synced, writer) =
        counting_writer(dir.path(), NO_GATHER, Some((sync_started, sync_released)));
    let written = Instant::now();
    result(&queue, "a", at(60))
        .blocking_recv()
        .unwrap()
        .unwrap();
    let deadline = written + SYNC_WRITTEN_WITHIN + scheduling;
    sync_starts
        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .unwrap_or_else(|_| {
            panic!("the result was not synced within {SYNC_WRITTEN_WITHIN:?} (+{scheduling:?})")
        });
    assert!(
        written.elapsed() >= SYNC_WRITTEN_WITHIN.mul_f32(0.9),
        "synced after {:?}: the writer did not wait for more results to sync with",
        written.elapsed()
    );
    release_sync.send(()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while synced.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the sync never ended");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(*synced.lock().unwrap(), vec![1]);
    drop(queue);
    writer.join().unwrap();
}

#[test]
fn results_written_when_the_backend_is_dropped_are_synced_before_the_writer_ends() {
    let dir = tempfile::tempdir().unwrap();
    let (queue, synced, writer) = counting_writer(dir.path(), NO_GATHER, None);
    result(&queue, "a", at(60))
        .blocking_recv()
        .unwrap()
        .unwrap();
    drop(queue);
    writer.join().unwrap();
    assert_eq!(*synced.lock().unwrap(), vec![1]);
}

#[test]
fn atomic_write_replaces_content_and_leaves_no_temp_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.json");
    write_atomically(&path, b"one").unwrap();
    write_atomically(&path, b"two").unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"two");
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
}
