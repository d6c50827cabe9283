//! When a cluster's live snapshot may be served: after it caught up with the API's changes,
//! with a note while its connection is lost, and not once that lasts longer than
//! `serve_stale_for`; a view made again only when something changed.

use super::*;
use crate::coord::records::Paths;
use crate::daemon::LoadedTasks;
use crate::http::cache::{Ages, Source};
use crate::ops::live::TriggerRuns;
use crate::ops::model::Snapshot;

const AGES: Ages = Ages {
    refresh_after: Duration::from_secs(60),
    serve_stale_for: Duration::from_secs(30),
    watched_for: Duration::from_secs(30),
};

/// A cache of a cluster nobody reads (no reader runs: the tests play its part), its live
/// snapshot installed.
fn cluster_cache() -> Arc<Cache> {
    let settings = ZkSettings {
        connect: "127.0.0.1:1".into(),
        cluster: "test".into(),
        session_timeout: Duration::from_secs(10),
        max_clock_skew: None,
        node_id: "node-a".into(),
        release: semver::Version::new(1, 0, 0),
        labels: Default::default(),
        history_runs: 10,
        http: None,
        auth: Default::default(),
        tls: None,
    };
    let source = Source::Cluster {
        settings,
        loaded: LoadedTasks::default(),
        clock: crate::clock::Clock::system(),
    };
    let cache = Arc::new(Cache::with_ages(source, AGES));
    let live = Live::new(
        Snapshot::default(),
        TriggerRuns::new(),
        crate::clock::Clock::system().now(),
    );
    let mut shared = cache.live.lock().unwrap();
    shared.live = Some(live);
    shared.sync = Sync::Current;
    shared.installs = 1;
    drop(shared);
    cache
}

fn apply_a_change(cache: &Cache) {
    let mut shared = cache.live.lock().unwrap();
    let live = shared.live.as_mut().unwrap();
    let paths = Paths {
        base: "/zkcron/test".into(),
    };
    live.apply(&paths, "/zkcron/test/control/drained/node-b", Some(b"{}"));
}

#[test]
fn one_view_is_served_until_something_changes() {
    let cache = cluster_cache();
    let first = cache.live_ready(cache.generation()).unwrap();
    assert_eq!(first.behind, None);
    let again = cache.live_ready(cache.generation()).unwrap();
    assert!(
        Arc::ptr_eq(&first, &again),
        "nothing changed: the same view"
    );
    apply_a_change(&cache);
    let changed = cache.live_ready(cache.generation()).unwrap();
    assert!(!Arc::ptr_eq(&first, &changed), "a change: a new view");
}

/// A change made through the API: no view until the reader caught up with it.
#[tokio::test]
async fn after_a_change_through_the_api_no_view_until_the_reader_caught_up() {
    let cache = cluster_cache();
    let before = cache.live_ready(cache.generation()).unwrap();
    cache.forget().await;
    assert!(cache.live_ready(cache.generation()).is_none());
    cache.live.lock().unwrap().caught_up = cache.generation().0;
    let after = cache.live_ready(cache.generation()).unwrap();
    assert!(!Arc::ptr_eq(&before, &after));
}

/// A lost connection may lose events: the view says since when it may miss changes, and once
/// that lasts longer than `serve_stale_for` it is not served (the request waits for a read).
#[test]
fn a_lost_connection_shows_in_the_view_and_stops_it_being_served_after_a_while() {
    let cache = cluster_cache();
    let current = cache.live_ready(cache.generation()).unwrap();
    cache.behind("the dashboard's ZooKeeper connection was lost; reconnecting");
    let behind = cache.live_ready(cache.generation()).unwrap();
    assert!(!Arc::ptr_eq(&current, &behind));
    let note = behind.behind.clone().unwrap();
    assert!(
        note.starts_with("this view may miss changes made since ")
            && note.ends_with(": the dashboard's ZooKeeper connection was lost; reconnecting"),
        "{note}"
    );
    if let Sync::Behind { since, .. } = &mut cache.live.lock().unwrap().sync {
        *since -= chrono::TimeDelta::seconds(31);
    }
    assert!(cache.live_ready(cache.generation()).is_none());
    // A full read puts it right.
    cache.live.lock().unwrap().sync = Sync::Current;
    assert_eq!(cache.live_ready(cache.generation()).unwrap().behind, None);
}
