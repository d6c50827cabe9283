//! What this node says of the tasks it leads, for the leader's metrics
//! ([`crate::metrics::leader`]): at each scrape the tasks it leads and their next ticks (from the
//! leadership and the loaded definitions), and, for a task it gains, the stored result of its
//! newest tick (its last success and failures, until this node's own runs say more).

use std::collections::BTreeSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use super::{LoadedTasks, Shared};
use crate::clock::Clock;
use crate::coord::{Coordinator, Leadership};
use crate::metrics::leader::{LeaderSource, LedTask};
use crate::task::TaskSpec;

/// The tasks this node leads now, each with its next tick and the gap before it. Units of an
/// every-node or pooled task (`task@...`) count as their task; a paused task has no next tick;
/// a node that may not fire (no session, clock off) leads nothing.
pub(super) fn source(
    leadership: watch::Receiver<Leadership>,
    loaded: LoadedTasks,
    clock: Clock,
) -> LeaderSource {
    Arc::new(move || {
        let leadership = leadership.borrow().clone();
        if leadership.paused {
            return Vec::new();
        }
        let now = clock.now();
        let specs = loaded.get();
        let led: BTreeSet<&str> = leadership
            .tasks
            .iter()
            .map(|name| name.split('@').next().unwrap_or(name))
            .collect();
        specs
            .iter()
            .filter(|spec| led.contains(&*spec.name))
            .map(|spec| led_task(spec, leadership.paused_tasks.contains(&*spec.name), now))
            .collect()
    })
}

fn led_task(spec: &TaskSpec, paused: bool, now: DateTime<Utc>) -> LedTask {
    let schedule = &spec.schedule;
    let next = (!paused).then(|| schedule.next_after(now)).flatten();
    let before = next.and_then(|next| {
        schedule
            .latest_at_or_before(now)
            .or_else(|| schedule.next_after(next).map(|after| next - (after - next)))
    });
    LedTask {
        task: spec.name.clone(),
        next_tick: next.map(unix),
        interval: next
            .zip(before)
            .map(|(next, before)| (next - before).as_seconds_f64()),
    }
}

fn unix(t: DateTime<Utc>) -> f64 {
    t.timestamp_millis() as f64 / 1000.0
}

/// Reads the stored result of each task in `leadership` not read since this node gained it
/// (`seeded`), one after another on a task of its own; forgets what it knew of the tasks it
/// lost.
pub(super) fn seed_gained<C: Coordinator>(
    shared: &Arc<Shared<C>>,
    leadership: &Leadership,
    seeded: &mut BTreeSet<Arc<str>>,
) {
    // A task lost is forgotten: gained again later, its stored result is read again.
    seeded.retain(|task| {
        let led = leadership.tasks.contains(task);
        if !led {
            shared.metrics.task_lost(task);
        }
        led
    });
    let gained: Vec<Arc<str>> = leadership
        .tasks
        .iter()
        .filter(|task| !task.contains('@') && !seeded.contains(&***task))
        .cloned()
        .collect();
    if gained.is_empty() {
        return;
    }
    seeded.extend(gained.iter().cloned());
    let shared = shared.clone();
    tokio::spawn(async move {
        for task in gained {
            if let Ok(Some(result)) = shared.coordinator.last_result(&task).await {
                let at = result.finished_at.timestamp_millis() as f64 / 1000.0;
                shared.metrics.task_result_read(&task, result.success, at);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn spec(schedule: &str) -> TaskSpec {
        let text = format!("schedule = \"{schedule}\"\ncommand = [\"true\"]\n");
        let defaults = crate::task::TaskDefaults::for_tests();
        crate::task::parse_task("t", std::path::Path::new("t.toml"), &text, &defaults)
            .expect("a valid task")
    }

    #[test]
    fn the_interval_is_the_gap_being_waited_and_a_paused_task_has_no_next_tick() {
        // Weekdays at 09:00; on Saturday the gap being waited is Friday to Monday.
        let weekdays = spec("0 9 * * 1-5");
        let saturday = Utc.with_ymd_and_hms(2026, 12, 5, 12, 0, 0).unwrap();
        let led = led_task(&weekdays, false, saturday);
        let monday = Utc.with_ymd_and_hms(2026, 12, 7, 9, 0, 0).unwrap();
        assert_eq!(led.next_tick, Some(monday.timestamp() as f64));
        assert_eq!(led.interval, Some(3.0 * 86_400.0));
        let paused = led_task(&weekdays, true, saturday);
        assert_eq!((paused.next_tick, paused.interval), (None, None));
    }
}
