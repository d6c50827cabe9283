//! The cache's rules, on the local backend's source: one read per view shared by every
//! viewer, a view refreshed ahead while watched and no read once nobody watches, a change
//! shown by the next request, and a read begun before a change never kept.

use std::collections::BTreeMap;

use super::*;
use crate::coord::local::LocalCoordinator;
use crate::daemon::LoadedTasks;
use crate::daemon::control::ControlConfig;
use crate::task::TaskDefaults;

const AGES: Ages = Ages {
    refresh_after: Duration::from_millis(100),
    serve_stale_for: Duration::from_millis(600),
    watched_for: Duration::from_millis(300),
};

fn local_cache(state: &std::path::Path) -> Arc<Cache> {
    let coordinator =
        Arc::new(LocalCoordinator::open(state, crate::clock::Clock::system()).unwrap());
    let config = ControlConfig {
        state_dir: state.to_path_buf(),
        node_id: "node-a".into(),
        release: "1.0.0".into(),
        labels: BTreeMap::new(),
        jobs_dir: state.join("jobs.d"),
        task_defaults: TaskDefaults::for_tests(),
        started_at: crate::clock::Clock::system().now(),
        loaded: LoadedTasks::default(),
    };
    let source = Source::Local {
        config,
        coordinator,
    };
    Arc::new(Cache::with_ages(source, AGES))
}

/// Waits, with a deadline, until `condition` holds (the refresher works on its own thread).
async fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn reads(cache: &Cache) -> u64 {
    cache.reads.borrow().0
}

/// Every viewer of a view gets the one read; while someone asks, the refresher replaces it
/// behind them; once nobody asks it stops reading, and a view too old to serve is read again
/// on the next request.
#[tokio::test]
async fn viewers_share_one_read_refreshed_ahead_while_watched_and_none_once_left_alone() {
    let state = tempfile::tempdir().unwrap();
    let cache = local_cache(state.path());
    let first = cache.view().await.unwrap();
    let again = cache.view().await.unwrap();
    assert!(Arc::ptr_eq(&first, &again), "one read for both viewers");

    // A viewer polling is served from memory while the refresher replaces the view behind it.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let polled = cache.view().await.unwrap();
        if !Arc::ptr_eq(&first, &polled) {
            break;
        }
        assert!(Instant::now() < deadline, "the view was never refreshed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    wait_until("the refresher to stop once nobody asks", || {
        !cache.refreshing.load(Ordering::SeqCst)
    })
    .await;
    let stopped_at = reads(&cache);
    tokio::time::sleep(AGES.serve_stale_for).await;
    assert_eq!(reads(&cache), stopped_at, "no read while nobody watches");
    let before = cache.cached().map(|(_, view)| view).unwrap();
    let too_old = cache.view().await.unwrap();
    assert!(
        !Arc::ptr_eq(&before, &too_old),
        "too old to serve: read now"
    );
}

/// A change forgets the view: the next request waits for a read begun after it.
#[tokio::test]
async fn a_request_after_a_change_sees_a_read_begun_after_it() {
    let state = tempfile::tempdir().unwrap();
    let cache = local_cache(state.path());
    let before = cache.view().await.unwrap();
    let generation = cache.generation();
    cache.forget().await;
    // The refresher may already hold a read begun after the change: never the one before it.
    assert!(
        cache
            .cached()
            .is_none_or(|(_, view)| !Arc::ptr_eq(&view, &before)),
        "forgotten"
    );
    let after = cache.view().await.unwrap();
    assert!(!Arc::ptr_eq(&before, &after), "read again after the change");
    assert_ne!(cache.generation(), generation);
}

/// The rule behind it: a read begun before a change is not kept, one begun after is.
#[test]
fn a_read_started_before_the_change_is_not_kept() {
    let state = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let cache = runtime.block_on(async { local_cache(state.path()) });
    let view = || {
        let snapshot = Snapshot::default();
        Arc::new(View::new(
            snapshot,
            &cache.source,
            crate::clock::Clock::system().now(),
        ))
    };
    let begun_before = cache.generation();
    runtime.block_on(cache.forget());
    cache.keep(begun_before, view());
    assert!(cache.cached().is_none(), "the read begun before was kept");

    let begun_after = cache.generation();
    cache.keep(begun_after, view());
    assert!(
        cache.cached().is_some(),
        "the read begun after was not kept"
    );
}
