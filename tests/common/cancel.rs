//! What the backfill cancel tests of both backends check: what `zkcron backfill --cancel`
//! said, and that no tick started after it returned but the one it found running.

/// What `zkcron backfill --cancel` said the request had done: the ticks that ended, and whether
/// one was running (it finishes).
pub fn cancelled_after(said: &str) -> (usize, bool) {
    let after = said
        .split(" cancelled after ")
        .nth(1)
        .expect("cancelled after");
    let finished = after.split(' ').next().unwrap().parse().expect("a count");
    (finished, said.contains("; the run of "))
}

/// Asserts that the jobs that started (`starts`, in order) are the ticks the cancel counted,
/// `finished` and the one `running`, and that none started after the cancel returned (at
/// `cancelled`) but the one it found running, claimed before it.
#[track_caller]
pub fn assert_no_start_after(starts: &[f64], cancelled: f64, finished: usize, running: bool) {
    let counted = finished + usize::from(running);
    assert_eq!(
        starts.len(),
        counted,
        "{finished} tick(s) ended and {running} running at the cancel, but {} started: \
         {starts:?} (cancel at {cancelled})",
        starts.len()
    );
    let later = starts.iter().filter(|&&start| start > cancelled).count();
    assert!(
        later <= usize::from(running) && starts[..finished].iter().all(|&s| s <= cancelled),
        "ticks started after the cancel returned at {cancelled}: {starts:?}"
    );
}
