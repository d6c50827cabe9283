use super::*;
use chrono_tz::Tz;
use std::time::Duration;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn rules(expr: &str, catch_up: CatchUpPolicy, deadline: Option<u64>) -> PlanRules {
    PlanRules {
        task: "t".into(),
        schedule: Schedule::parse(expr, Tz::UTC).unwrap(),
        catch_up,
        starting_deadline: deadline.map(Duration::from_secs),
        jitter: Duration::ZERO,
    }
}

/// A planner with `rules` whose fire record last claimed `last` (none: a new task), started at
/// `now` (times in RFC 3339).
fn skipped_list(list: &[(&str, &str, u64, Reason)]) -> Vec<TickEntry> {
    list.iter()
        .map(|(from, to, count, reason)| TickEntry {
            from: utc(from),
            to: utc(to),
            count: *count,
            reason: *reason,
        })
        .collect()
}

fn started(rules: PlanRules, last: Option<&str>, now: &str) -> TickPlanner {
    TickPlanner::start(rules, last.map(utc), utc(now))
}

fn fired(step: Step) -> Vec<String> {
    match step {
        Step::Fire { ticks, .. } => ticks.iter().map(|t| t.instant.to_rfc3339()).collect(),
        other => panic!("expected Fire, got {other:?}"),
    }
}

#[test]
fn a_new_task_sleeps_until_its_first_tick_then_fires_it_on_time() {
    let mut planner = started(
        rules("*/10 * * * *", CatchUpPolicy::Once, None),
        None,
        "2026-01-01T00:03:00Z",
    );
    assert_eq!(
        planner.poll(utc("2026-01-01T00:03:00Z")),
        Step::SleepUntil(utc("2026-01-01T00:10:00Z"))
    );
    let step = planner.poll(utc("2026-01-01T00:10:00.002Z"));
    assert_eq!(
        step,
        Step::Fire {
            ticks: vec![Tick {
                instant: utc("2026-01-01T00:10:00Z"),
                due_at: utc("2026-01-01T00:10:00Z"),
                catch_up: false
            }],
            skipped: vec![]
        }
    );
    assert_eq!(
        planner.poll(utc("2026-01-01T00:10:00.003Z")),
        Step::SleepUntil(utc("2026-01-01T00:20:00Z"))
    );
}

#[test]
fn a_late_timer_fires_its_tick_on_time_within_the_tolerance_even_with_catch_up_skip() {
    let mut planner = started(
        rules("*/10 * * * *", CatchUpPolicy::Skip, None),
        None,
        "2026-01-01T00:03:00Z",
    );
    assert_eq!(
        fired(planner.poll(utc("2026-01-01T00:10:59Z"))),
        ["2026-01-01T00:10:00+00:00"]
    );
    // Beyond the tolerance the node was evidently not firing (suspended): the tick is missed.
    let mut planner = started(
        rules("*/10 * * * *", CatchUpPolicy::Skip, None),
        None,
        "2026-01-01T00:03:00Z",
    );
    assert_eq!(
        planner.poll(utc("2026-01-01T00:19:00Z")),
        Step::Fire {
            ticks: vec![],
            skipped: skipped_list(&[(
                "2026-01-01T00:10:00Z",
                "2026-01-01T00:10:00Z",
                1,
                Reason::CatchUp
            )])
        }
    );
}

#[test]
fn a_task_never_fired_before_catches_nothing_up() {
    let mut planner = started(
        rules("* * * * *", CatchUpPolicy::All, None),
        None,
        "2026-01-01T00:03:30Z",
    );
    assert_eq!(
        planner.poll(utc("2026-01-01T00:03:30Z")),
        Step::SleepUntil(utc("2026-01-01T00:04:00Z"))
    );
}

#[test]
fn catch_up_once_runs_only_the_latest_missed_tick() {
    let mut planner = started(
        rules("*/10 * * * *", CatchUpPolicy::Once, None),
        Some("2026-01-01T00:00:00Z"),
        "2026-01-01T00:35:00Z",
    );
    let step = planner.poll(utc("2026-01-01T00:35:00Z"));
    assert_eq!(
        step,
        Step::Fire {
            ticks: vec![Tick {
                instant: utc("2026-01-01T00:30:00Z"),
                due_at: utc("2026-01-01T00:30:00Z"),
                catch_up: true
            }],
            skipped: skipped_list(&[(
                "2026-01-01T00:10:00Z",
                "2026-01-01T00:20:00Z",
                2,
                Reason::NoNode
            )])
        }
    );
    assert_eq!(
        planner.poll(utc("2026-01-01T00:35:00Z")),
        Step::SleepUntil(utc("2026-01-01T00:40:00Z"))
    );
}

#[test]
fn catch_up_all_runs_every_missed_tick_oldest_first() {
    let mut planner = started(
        rules("*/10 * * * *", CatchUpPolicy::All, None),
        Some("2026-01-01T00:00:00Z"),
        "2026-01-01T00:35:00Z",
    );
    assert_eq!(
        fired(planner.poll(utc("2026-01-01T00:35:00Z"))),
        [
            "2026-01-01T00:10:00+00:00",
            "2026-01-01T00:20:00+00:00",
            "2026-01-01T00:30:00+00:00"
        ]
    );
}

#[test]
fn catch_up_skip_drops_missed_ticks_and_waits_for_the_next() {
    let mut planner = started(
        rules("*/10 * * * *", CatchUpPolicy::Skip, None),
        Some("2026-01-01T00:00:00Z"),
        "2026-01-01T00:35:00Z",
    );
    assert_eq!(
        planner.poll(utc("2026-01-01T00:35:00Z")),
        Step::Fire {
            ticks: vec![],
            skipped: skipped_list(&[(
                "2026-01-01T00:10:00Z",
                "2026-01-01T00:30:00Z",
                3,
                Reason::NoNode
            )])
        }
    );
    assert_eq!(
        planner.poll(utc("2026-01-01T00:35:00Z")),
        Step::SleepUntil(utc("2026-01-01T00:40:00Z"))
    );
}

#[test]
fn starting_deadline_drops_missed_ticks_older_than_it() {
    // Missed 00:10, 00:20, 00:30; now 00:35; deadline 20 min keeps 00:20 and 00:30.
    let mut planner = started(
        rules("*/10 * * * *", CatchUpPolicy::All, Some(20 * 60)),
        Some("2026-01-01T00:00:00Z"),
        "2026-01-01T00:35:00Z",
    );
    let step = planner.poll(utc("2026-01-01T00:35:00Z"));
    let Step::Fire { ticks, skipped } = step else {
        panic!()
    };
    assert_eq!(
        ticks.iter().map(|t| t.instant).collect::<Vec<_>>(),
        [utc("2026-01-01T00:20:00Z"), utc("2026-01-01T00:30:00Z")]
    );
    assert_eq!(
        skipped,
        skipped_list(&[(
            "2026-01-01T00:10:00Z",
            "2026-01-01T00:10:00Z",
            1,
            Reason::NoNode
        )])
    );

    // With `once`, a latest missed tick beyond the deadline is not run either.
    let mut planner = started(
        rules("*/10 * * * *", CatchUpPolicy::Once, Some(60)),
        Some("2026-01-01T00:00:00Z"),
        "2026-01-01T00:35:00Z",
    );
    assert_eq!(
        planner.poll(utc("2026-01-01T00:35:00Z")),
        Step::Fire {
            ticks: vec![],
            skipped: skipped_list(&[(
                "2026-01-01T00:10:00Z",
                "2026-01-01T00:30:00Z",
                3,
                Reason::NoNode
            )])
        }
    );
}

#[test]
fn starting_deadline_also_drops_an_on_time_tick_whose_timer_woke_too_late() {
    let mut planner = started(
        rules("0 * * * *", CatchUpPolicy::Once, Some(60)),
        None,
        "2026-01-01T00:30:00Z",
    );
    assert_eq!(
        planner.poll(utc("2026-01-01T01:05:00Z")),
        Step::Fire {
            ticks: vec![],
            skipped: skipped_list(&[(
                "2026-01-01T01:00:00Z",
                "2026-01-01T01:00:00Z",
                1,
                Reason::Deadline
            )])
        }
    );
}

#[test]
fn a_restart_with_nothing_missed_fires_the_next_tick_on_time() {
    // Regression: the first tick after a restart was taken for a missed one and dropped by
    // `catch_up = "skip"`.
    let mut planner = started(
        rules("*/10 * * * *", CatchUpPolicy::Skip, None),
        Some("2026-01-01T00:00:00Z"),
        "2026-01-01T00:05:00Z",
    );
    assert_eq!(
        planner.poll(utc("2026-01-01T00:05:00Z")),
        Step::SleepUntil(utc("2026-01-01T00:10:00Z"))
    );
    assert_eq!(
        fired(planner.poll(utc("2026-01-01T00:10:00Z"))),
        ["2026-01-01T00:10:00+00:00"]
    );
}

#[test]
fn catch_up_all_is_bounded() {
    let mut planner = started(
        rules("* * * * * *", CatchUpPolicy::All, None),
        Some("2026-01-01T00:00:00Z"),
        "2026-01-01T01:00:00Z",
    );
    let Step::Fire { ticks, skipped } = planner.poll(utc("2026-01-01T01:00:00Z")) else {
        panic!()
    };
    assert_eq!(ticks.len(), MAX_CATCH_UP);
    assert_eq!(ticks.last().unwrap().instant, utc("2026-01-01T01:00:00Z"));
    assert_eq!(
        skipped,
        skipped_list(&[(
            "2026-01-01T00:00:01Z",
            "2026-01-01T00:58:20Z",
            3600 - MAX_CATCH_UP as u64,
            Reason::NoNode
        )])
    );
}

#[test]
fn a_paused_process_that_overslept_several_ticks_treats_them_as_missed() {
    let mut planner = started(
        rules("*/10 * * * *", CatchUpPolicy::Once, None),
        None,
        "2026-01-01T00:03:00Z",
    );
    // Armed for 00:10, woke at 00:25: 00:10 and 00:20 are missed, `once` runs 00:20.
    let Step::Fire { ticks, skipped } = planner.poll(utc("2026-01-01T00:25:00Z")) else {
        panic!()
    };
    assert_eq!(
        ticks
            .iter()
            .map(|t| (t.instant, t.catch_up))
            .collect::<Vec<_>>(),
        [(utc("2026-01-01T00:20:00Z"), true)]
    );
    assert_eq!(
        skipped,
        skipped_list(&[(
            "2026-01-01T00:10:00Z",
            "2026-01-01T00:10:00Z",
            1,
            Reason::CatchUp
        )])
    );
}

/// Issue [5] item 7: a sleeping task keeps its planner's state, not its rules; resumed with
/// the same rules it decides exactly as the planner it was taken from, pending catch-up
/// included.
#[test]
fn a_planner_resumed_from_its_state_decides_as_the_original() {
    let rules = || rules("*/10 * * * *", CatchUpPolicy::All, None);
    let start = utc("2026-01-01T00:25:00Z");
    let record = Some(utc("2026-01-01T00:00:00Z"));
    let mut original = TickPlanner::start(rules(), record, start);
    let mut resumed = TickPlanner::resume(rules(), original.clone().into_state());
    for now in [
        "2026-01-01T00:25:00Z",
        "2026-01-01T00:29:00Z",
        "2026-01-01T00:30:00.5Z",
    ] {
        assert_eq!(resumed.poll(utc(now)), original.poll(utc(now)), "at {now}");
        resumed = TickPlanner::resume(rules(), resumed.into_state());
    }
    assert_eq!(resumed.armed(), original.armed());
}

#[test]
fn a_slow_timer_fires_every_tick_that_came_due_within_the_tolerance() {
    // Regression: on a loaded machine an every-second task woke 3 s late and `once` ran
    // only the newest of the due ticks, losing two.
    let mut planner = started(
        rules("* * * * * *", CatchUpPolicy::Once, None),
        None,
        "2026-01-01T00:00:00.5Z",
    );
    assert_eq!(
        fired(planner.poll(utc("2026-01-01T00:00:03.2Z"))),
        [
            "2026-01-01T00:00:01+00:00",
            "2026-01-01T00:00:02+00:00",
            "2026-01-01T00:00:03+00:00"
        ]
    );
}

#[test]
fn after_a_long_suspend_older_ticks_are_missed_and_recent_ones_on_time() {
    // Woke 5 minutes late: ticks of the last minute fire; older ones go to `catch_up`.
    let mut planner = started(
        rules("*/30 * * * * *", CatchUpPolicy::All, None),
        None,
        "2026-01-01T00:00:10Z",
    );
    let Step::Fire { ticks, skipped } = planner.poll(utc("2026-01-01T00:05:10Z")) else {
        panic!()
    };
    assert_eq!(skipped, []);
    assert_eq!(ticks.len(), 10);
    assert!(ticks[..8].iter().all(|t| t.catch_up));
    assert!(ticks[8..].iter().all(|t| !t.catch_up));
    let mut planner = started(
        rules("*/30 * * * * *", CatchUpPolicy::Once, None),
        None,
        "2026-01-01T00:00:10Z",
    );
    let Step::Fire { ticks, skipped } = planner.poll(utc("2026-01-01T00:05:10Z")) else {
        panic!()
    };
    assert_eq!(
        ticks.iter().map(|t| t.catch_up).collect::<Vec<_>>(),
        [false, false]
    );
    assert_eq!(
        skipped,
        skipped_list(&[(
            "2026-01-01T00:00:30Z",
            "2026-01-01T00:04:00Z",
            8,
            Reason::CatchUp
        )])
    );
}

#[test]
fn jitter_delays_the_spawn_but_not_the_tick_identity() {
    let mut jittered = rules("*/10 * * * *", CatchUpPolicy::Once, None);
    jittered.jitter = Duration::from_secs(30);
    let mut planner = TickPlanner::start(jittered, None, utc("2026-01-01T00:03:00Z"));
    let offset = jitter_offset("t", utc("2026-01-01T00:10:00Z"), Duration::from_secs(30));
    assert!(offset >= TimeDelta::zero() && offset < TimeDelta::seconds(30));
    let due = utc("2026-01-01T00:10:00Z") + offset;
    assert_eq!(
        planner.poll(utc("2026-01-01T00:10:00Z") - TimeDelta::milliseconds(1)),
        Step::SleepUntil(due)
    );
    if offset > TimeDelta::zero() {
        assert_eq!(
            planner.poll(due - TimeDelta::milliseconds(1)),
            Step::SleepUntil(due)
        );
    }
    let Step::Fire { ticks, .. } = planner.poll(due) else {
        panic!()
    };
    assert_eq!(ticks[0].instant, utc("2026-01-01T00:10:00Z"));
    assert_eq!(ticks[0].due_at, due);
}

#[test]
fn jitter_is_deterministic_per_tick_and_spreads_ticks() {
    let jitter = Duration::from_secs(60);
    let instant = utc("2026-01-01T00:10:00Z");
    // Same input, same offset: every node computes the same value.
    assert_eq!(
        jitter_offset("backup", instant, jitter),
        jitter_offset("backup", instant, jitter)
    );
    // The specification is fixed: xxh3_64 of the fire id, modulo the range in ms.
    assert_eq!(
        jitter_offset("backup", instant, jitter),
        TimeDelta::milliseconds((xxh3_64(b"backup@1767226200") % 60_000) as i64)
    );
    // Different ticks and tasks spread over the range.
    let offsets: std::collections::BTreeSet<i64> = (0..100)
        .map(|i| jitter_offset(&format!("task-{i}"), instant, jitter).num_milliseconds())
        .collect();
    assert!(offsets.len() > 90, "{} distinct offsets", offsets.len());
    assert!(offsets.iter().all(|o| (0..60_000).contains(o)));
    assert_eq!(
        jitter_offset("backup", instant, Duration::ZERO),
        TimeDelta::zero()
    );
}

#[test]
fn fire_id_is_task_and_unix_seconds() {
    assert_eq!(
        fire_id("nightly-backup", utc("2026-01-01T02:30:00Z")),
        "nightly-backup@1767234600"
    );
}

#[test]
fn overlap_decisions() {
    assert_eq!(overlap_action(OverlapPolicy::Skip, 0), OverlapAction::Start);
    assert_eq!(overlap_action(OverlapPolicy::Skip, 1), OverlapAction::Skip);
    assert_eq!(
        overlap_action(OverlapPolicy::Allow, 3),
        OverlapAction::Start
    );
    assert_eq!(
        overlap_action(OverlapPolicy::Replace, 0),
        OverlapAction::Start
    );
    assert_eq!(
        overlap_action(OverlapPolicy::Replace, 1),
        OverlapAction::ReplaceThenStart
    );
}

#[test]
fn planning_across_dst_follows_the_schedule() {
    let schedule = Schedule::parse("30 2 * * *", "America/New_York".parse().unwrap()).unwrap();
    let rules = PlanRules {
        task: "t".into(),
        schedule,
        catch_up: CatchUpPolicy::Once,
        starting_deadline: None,
        jitter: Duration::ZERO,
    };
    let mut planner = TickPlanner::start(rules, None, utc("2026-03-07T12:00:00Z"));
    // 02:30 does not exist on 2026-03-08; it fires at 03:00 EDT = 07:00Z.
    assert_eq!(
        planner.poll(utc("2026-03-07T12:00:00Z")),
        Step::SleepUntil(utc("2026-03-08T07:00:00Z"))
    );
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Driving a planner with arbitrary forward time steps fires strictly increasing
        /// ticks, never one it fired before, and none in the future.
        #[test]
        fn fired_ticks_strictly_increase_and_are_never_in_the_future(
            steps in proptest::collection::vec(0i64..5_000, 1..60),
            catch_up in prop_oneof![Just(CatchUpPolicy::Skip), Just(CatchUpPolicy::Once), Just(CatchUpPolicy::All)],
            record in proptest::option::of(0i64..10_000),
        ) {
            let start = utc("2026-01-01T00:00:00Z");
            let mut rules = rules("*/7 * * * * *", catch_up, None);
            rules.jitter = Duration::from_secs(3);
            let mut planner = TickPlanner::start(rules, record.map(|s| start - TimeDelta::seconds(s)), start);
            let mut now = start;
            let mut last: Option<DateTime<Utc>> = None;
            for step in steps {
                now += TimeDelta::milliseconds(step * 10);
                if let Step::Fire { ticks, .. } = planner.poll(now) {
                    for tick in ticks {
                        prop_assert!(tick.instant <= now && tick.due_at <= now);
                        prop_assert!(last.is_none_or(|l| tick.instant > l));
                        last = Some(tick.instant);
                    }
                }
            }
        }
    }
}

/// A stall longer than [`ON_TIME_TOLERANCE`] with jitter: some ticks of the stall are missed
/// while older ones, whose jitter is longer, are still on time. `catch_up = "all"` ran those
/// twice in one step (on time and caught up) and counted more catch-ups than missed ticks, an
/// underflow of `skipped` (a panic in debug builds).
#[test]
fn catch_up_all_with_jitter_after_a_stall_runs_no_tick_twice() {
    let start = utc("2026-03-29T00:59:00Z");
    let mut rules = rules("* * * * * *", CatchUpPolicy::All, None);
    rules.jitter = Duration::from_secs(4);
    let mut planner = TickPlanner::start(rules, None, start);
    let mut now = start;
    for step in [0, 53_082, 21_659, 1_252, 43_235, 111_536, 152_914] {
        now += TimeDelta::milliseconds(step);
        if let Step::Fire { ticks, skipped } = planner.poll(now) {
            let instants: Vec<_> = ticks.iter().map(|tick| tick.instant).collect();
            assert!(instants.windows(2).all(|w| w[0] < w[1]), "{instants:?}");
            let skipped: u64 = skipped.iter().map(|e| e.count).sum();
            assert!(skipped < 1_000, "skipped {skipped}");
        }
    }
}

/// `poll` without its on-time shortcut: the general path, for the property below.
fn poll_without_shortcut(planner: &mut TickPlanner, now: DateTime<Utc>) -> Step {
    let Some(armed) = planner.armed else {
        return Step::Finished;
    };
    let armed_due = planner.due_at(armed);
    if let Some(record) = holding_record(Some(planner.cursor), now) {
        return Step::Held {
            record,
            until: armed_due,
        };
    }
    if now < armed_due {
        return Step::SleepUntil(armed_due);
    }
    planner.poll_due(armed, now)
}

fn state_of(planner: &TickPlanner) -> PlannerState {
    PlannerState {
        cursor: planner.cursor,
        armed: planner.armed,
        pending_start: planner.pending_start,
    }
}

mod shortcut {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // Each case parses two schedules and polls twice per step: few cases keep it to seconds.
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// The on-time shortcut of `poll` decides exactly as the general path, whatever the
        /// schedule, jitter, deadline, catch-up, fire record and timer delays: the same step
        /// and the same state after it.
        #[test]
        fn the_on_time_shortcut_decides_as_the_general_path(
            steps in proptest::collection::vec(prop_oneof![0i64..2_000, 0i64..200_000], 1..30),
            expr in prop_oneof![Just("* * * * * *"), Just("*/7 * * * * *"), Just("30 2 * * *"), Just("@every 90s"), Just("0 */5 1-3 * * *")],
            catch_up in prop_oneof![Just(CatchUpPolicy::Skip), Just(CatchUpPolicy::Once), Just(CatchUpPolicy::All)],
            jitter in 0u64..5,
            deadline in proptest::option::of(1u64..120),
            record in proptest::option::of(-100_000i64..100_000),
        ) {
            let start = utc("2026-03-29T00:59:00Z");
            let mut rules = super::rules("@every 1h", catch_up, deadline);
            rules.jitter = Duration::from_secs(jitter);
            rules.schedule = Schedule::parse(expr, "Europe/Berlin".parse::<Tz>().unwrap()).unwrap();
            let record = record.map(|s| start - TimeDelta::seconds(s));
            let mut planner = TickPlanner::start(rules.clone(), record, start);
            let mut now = start;
            for step in steps {
                now += TimeDelta::milliseconds(step);
                let mut general = TickPlanner::resume(rules.clone(), state_of(&planner));
                let expected = poll_without_shortcut(&mut general, now);
                prop_assert_eq!(planner.poll(now), expected);
                prop_assert_eq!(state_of(&planner), state_of(&general));
            }
        }
    }
}

/// Rules for `@every 10m` with `catch_up`, firing from 01:00 to 02:00 on 2026-01-01.
fn windowed(catch_up: CatchUpPolicy) -> PlanRules {
    let window = crate::schedule::Window {
        from: Some(utc("2026-01-01T01:00:00Z")),
        until: Some(utc("2026-01-01T02:00:00Z")),
    };
    PlanRules {
        schedule: Schedule::parse("@every 10m", Tz::UTC)
            .unwrap()
            .within(window),
        ..rules("* * * * *", catch_up, None)
    }
}

#[test]
fn catch_up_never_reaches_before_active_from() {
    // Given a record from before the window and a node that comes back inside it,
    let record = Some(utc("2026-01-01T00:00:00Z"));
    let now = utc("2026-01-01T01:35:00Z");
    // when every missed tick is caught up, only those from active_from on run,
    let mut all = TickPlanner::start(windowed(CatchUpPolicy::All), record, now);
    assert_eq!(
        all.poll(now),
        Step::Fire {
            ticks: ["01:00", "01:10", "01:20", "01:30"]
                .iter()
                .map(|t| Tick {
                    instant: utc(&format!("2026-01-01T{t}:00Z")),
                    due_at: utc(&format!("2026-01-01T{t}:00Z")),
                    catch_up: true,
                })
                .collect(),
            skipped: vec![]
        }
    );
    // and `once` runs the latest of those.
    let mut once = TickPlanner::start(windowed(CatchUpPolicy::Once), record, now);
    assert_eq!(fired(once.poll(now)), ["2026-01-01T01:30:00+00:00"]);
}

#[test]
fn a_task_waits_for_active_from_and_finishes_after_active_until() {
    let mut planner = TickPlanner::start(
        windowed(CatchUpPolicy::Once),
        None,
        utc("2026-01-01T00:00:00Z"),
    );
    assert_eq!(
        planner.poll(utc("2026-01-01T00:00:00Z")),
        Step::SleepUntil(utc("2026-01-01T01:00:00Z"))
    );
    // The tick at active_until is the last.
    let mut planner = TickPlanner::start(
        windowed(CatchUpPolicy::Once),
        Some(utc("2026-01-01T01:50:00Z")),
        utc("2026-01-01T01:55:00Z"),
    );
    assert_eq!(
        planner.poll(utc("2026-01-01T01:55:00Z")),
        Step::SleepUntil(utc("2026-01-01T02:00:00Z"))
    );
    assert_eq!(
        fired(planner.poll(utc("2026-01-01T02:00:00.001Z"))),
        ["2026-01-01T02:00:00+00:00"]
    );
    assert_eq!(planner.poll(utc("2026-01-01T02:30:00Z")), Step::Finished);
    // A node that starts after the window has nothing to catch up.
    let mut late = TickPlanner::start(
        windowed(CatchUpPolicy::All),
        Some(utc("2026-01-01T02:00:00Z")),
        utc("2026-03-01T00:00:00Z"),
    );
    assert_eq!(late.poll(utc("2026-03-01T00:00:00Z")), Step::Finished);
}

#[test]
fn jitter_and_starting_deadline_apply_to_interval_ticks_as_to_cron_ticks() {
    let mut rules = rules("* * * * *", CatchUpPolicy::All, Some(15 * 60));
    rules.schedule = Schedule::parse("@every 10m", Tz::UTC).unwrap();
    rules.jitter = Duration::from_secs(60);
    let tick = utc("2026-01-01T00:10:00Z");
    let due = tick + jitter_offset("t", tick, rules.jitter);
    let mut planner = TickPlanner::start(rules.clone(), None, utc("2026-01-01T00:05:00Z"));
    assert_eq!(
        planner.poll(utc("2026-01-01T00:05:00Z")),
        Step::SleepUntil(due)
    );
    // Missed ticks older than the deadline are dropped.
    let now = utc("2026-01-01T01:00:30Z");
    let mut planner = TickPlanner::start(rules, Some(utc("2026-01-01T00:00:00Z")), now);
    match planner.poll(now) {
        Step::Fire { ticks, skipped } => {
            let instants: Vec<_> = ticks.iter().map(|t| t.instant).collect();
            assert_eq!(
                instants,
                [utc("2026-01-01T00:50:00Z"), utc("2026-01-01T01:00:00Z")]
            );
            assert_eq!(
                skipped,
                skipped_list(&[(
                    "2026-01-01T00:10:00Z",
                    "2026-01-01T00:40:00Z",
                    4,
                    Reason::NoNode
                )])
            );
        }
        other => panic!("expected Fire, got {other:?}"),
    }
}

mod held;
mod one_shot;
