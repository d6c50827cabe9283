use super::*;

fn set(tasks: &[&str]) -> Arc<TaskSet> {
    Arc::new(
        tasks
            .iter()
            .map(|t| {
                (
                    t.to_string(),
                    TaskEntry {
                        max_runs: None,
                        digest: "d".into(),
                        holders: Default::default(),
                        version_req: None,
                        require_labels: BTreeMap::new(),
                    },
                )
            })
            .collect(),
    )
}

fn member(id: &str, release: &str, seed: u64, tasks: &Arc<TaskSet>) -> Member {
    Member {
        id: id.into(),
        release: Version::parse(release).unwrap(),
        seed,
        tasks: tasks.clone(),
        may_lead: true,
        labels: Labels::default(),
        drained: false,
    }
}

/// The ids of the eligible members for `task`, best first.
fn ranked_ids(task: &str, members: &[Member]) -> Vec<String> {
    ranking(task, members)
        .iter()
        .map(|c| c.id.to_string())
        .collect()
}

fn names(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[derive(Default)]
struct Fixture {
    members: Vec<Member>,
    present: BTreeSet<String>,
    held: BTreeSet<String>,
    vacant_since: BTreeMap<String, Duration>,
    covering: BTreeMap<String, Duration>,
    members_changed: Duration,
}

impl Fixture {
    fn decide(&self, me: &str, now: Duration, may_lead: bool) -> Decision {
        decide(&LeaseView {
            me,
            members: &self.members,
            present: &self.present,
            held: &self.held,
            covering: &self.covering,
            vacant_since: &self.vacant_since,
            members_changed: self.members_changed,
            now,
            may_lead,
        })
    }
}

#[test]
fn the_designated_node_takes_a_vacant_lease_and_the_others_wait_their_turn() {
    let tasks = set(&["t"]);
    let members = vec![
        member("a", "1.0.0", 1, &tasks),
        member("b", "1.0.0", 2, &tasks),
        member("c", "1.0.0", 3, &tasks),
    ];
    let ranked = ranked_ids("t", &members);
    let fx = Fixture {
        members,
        present: BTreeSet::new(),
        held: BTreeSet::new(),
        vacant_since: [("t".to_string(), Duration::ZERO)].into(),
        ..Fixture::default()
    };
    let first = fx.decide(&ranked[0], Duration::ZERO, true);
    assert_eq!(first.actions, vec![LeaseAction::Take("t".into())]);
    let second = fx.decide(&ranked[1], Duration::ZERO, true);
    assert!(second.actions.is_empty());
    assert_eq!(second.recheck_at, Some(VACANT_BOUND));
    // After one bound the second-ranked takes it; the third waits for two.
    let later = fx.decide(&ranked[1], VACANT_BOUND, true);
    assert_eq!(later.actions, vec![LeaseAction::Cover("t".into())]);
    assert!(fx.decide(&ranked[2], VACANT_BOUND, true).actions.is_empty());
    assert_eq!(
        fx.decide(&ranked[2], VACANT_BOUND * 2, true).actions,
        vec![LeaseAction::Cover("t".into())]
    );
}

#[test]
fn a_holder_that_is_no_longer_designated_releases_and_a_held_lease_is_left_alone() {
    let tasks = set(&["t"]);
    let mut members = vec![member("old", "1.0.0", 1, &tasks)];
    let fx = Fixture {
        members: members.clone(),
        present: names(&["t"]),
        held: names(&["t"]),
        ..Fixture::default()
    };
    assert!(fx.decide("old", Duration::ZERO, true).actions.is_empty());
    members.push(member("new", "1.1.0", 2, &tasks));
    let fx = Fixture { members, ..fx };
    assert_eq!(
        fx.decide("old", Duration::ZERO, true).actions,
        vec![LeaseAction::Release("t".into())]
    );
    // The newcomer sees the lease held and waits for the release.
    let newcomer = Fixture {
        held: BTreeSet::new(),
        ..fx
    };
    assert!(
        newcomer
            .decide("new", Duration::from_secs(60), true)
            .actions
            .is_empty()
    );
}

#[test]
fn a_node_that_may_not_lead_releases_everything_and_takes_nothing() {
    let tasks = set(&["a", "b"]);
    let fx = Fixture {
        members: vec![member("n", "1.0.0", 1, &tasks)],
        present: names(&["a"]),
        held: names(&["a"]),
        ..Fixture::default()
    };
    let decision = fx.decide("n", Duration::ZERO, false);
    assert_eq!(decision.actions, vec![LeaseAction::Release("a".into())]);
    assert_eq!(decision.recheck_at, None);
}

#[test]
fn an_unregistered_node_releases_what_it_holds() {
    let tasks = set(&["a"]);
    let fx = Fixture {
        members: vec![member("other", "1.0.0", 1, &tasks)],
        present: names(&["a"]),
        held: names(&["a"]),
        ..Fixture::default()
    };
    assert_eq!(
        fx.decide("me", Duration::ZERO, true).actions,
        vec![LeaseAction::Release("a".into())]
    );
}

#[test]
fn a_member_that_announced_it_may_not_lead_is_passed_over_and_its_backup_keeps_the_lease() {
    let tasks = set(&["t"]);
    let mut members = vec![
        member("a", "1.0.0", 1, &tasks),
        member("b", "1.0.0", 2, &tasks),
    ];
    let ranked = ranked_ids("t", &members);
    let (top, backup) = (ranked[0].clone(), ranked[1].clone());
    members.iter_mut().find(|m| m.id == top).unwrap().may_lead = false;
    let fx = Fixture {
        members,
        present: names(&["t"]),
        held: names(&["t"]),
        ..Fixture::default()
    };
    // The backup holds the lease and is now the designated leader: it keeps it.
    assert!(fx.decide(&backup, Duration::ZERO, true).actions.is_empty());
    assert_eq!(position("t", &top, &fx.members), None);
    assert_eq!(position("t", &backup, &fx.members), Some(0));
}

#[test]
fn position_agrees_with_the_ranking_when_members_share_task_sets_or_not() {
    use rand::{Rng, SeedableRng, rngs::StdRng};
    // The fast path (one lookup per shared task set, this node's score once) must count
    // exactly the members the ranking puts above: mixed releases, a version_req, required
    // labels, members that may not lead, and a member with its own (unshared) copy of the set.
    let mut rng = StdRng::seed_from_u64(7);
    let mut entries = TaskSet::new();
    for i in 0..200 {
        let version_req = (i % 5 == 0).then(|| VersionReq::parse(">=1.1").unwrap());
        let mut require_labels = BTreeMap::new();
        if i % 3 == 0 {
            require_labels.insert("zone".to_string(), "eu".to_string());
        }
        if i % 7 == 0 {
            require_labels.insert("disk".to_string(), "ssd".to_string());
        }
        entries.insert(
            format!("task-{i:05}"),
            TaskEntry {
                max_runs: None,
                digest: "d".into(),
                holders: Default::default(),
                version_req,
                require_labels,
            },
        );
    }
    let shared = Arc::new(entries.clone());
    let mut partial = entries.clone();
    partial.retain(|name, _| name.ends_with('1') || name.ends_with('2'));
    let (own_copy, partial) = (Arc::new(entries), Arc::new(partial));
    let releases = ["1.0.0", "1.1.0", "1.1.0", "2.0.0-rc.1"];
    let members: Vec<Member> = (0..12)
        .map(|i| {
            let tasks = match i % 6 {
                4 => &own_copy,
                5 => &partial,
                _ => &shared,
            };
            let mut m = member(&format!("n{i:02}"), releases[i % 4], rng.random(), tasks);
            m.may_lead = i != 3;
            let mut labels = BTreeMap::new();
            if i % 2 == 0 {
                labels.insert("zone".to_string(), "eu".to_string());
            } else if i % 5 == 0 {
                labels.insert("zone".to_string(), "us".to_string());
            }
            if i % 4 < 2 {
                labels.insert("disk".to_string(), "ssd".to_string());
            }
            m.labels = Arc::new(labels);
            m
        })
        .collect();
    for i in 0..200 {
        let task = format!("task-{i:05}");
        let ranked = ranked_ids(&task, &members);
        for m in &members {
            let expected = ranked.iter().position(|id| *id == m.id);
            assert_eq!(
                position(&task, &m.id, &members),
                expected,
                "{task} {}",
                m.id
            );
        }
    }
}

#[test]
fn version_req_limits_eligibility_to_matching_releases() {
    let mut entries = TaskSet::new();
    entries.insert(
        "t".into(),
        TaskEntry {
            max_runs: None,
            digest: "d".into(),
            holders: Default::default(),
            version_req: Some(VersionReq::parse(">=2.1").unwrap()),
            require_labels: BTreeMap::new(),
        },
    );
    let tasks = Arc::new(entries);
    let members = vec![
        member("old", "2.0.5", 1, &tasks),
        member("new", "2.1.0", 2, &tasks),
    ];
    assert_eq!(position("t", "old", &members), None);
    assert_eq!(position("t", "new", &members), Some(0));
    let ranked = ranking("t", &members);
    assert_eq!(ranked.len(), 1);
    // A node that does not define a task is never eligible for it.
    assert_eq!(position("other-task", "new", &members), None);
}

#[test]
fn a_backup_keeps_a_lease_it_covers_for_the_hold_then_hands_it_back() {
    let tasks = set(&["t"]);
    let members = vec![
        member("a", "1.0.0", 1, &tasks),
        member("b", "1.0.0", 2, &tasks),
    ];
    let ranked = ranked_ids("t", &members);
    let backup = ranked[1].clone();
    let taken = VACANT_BOUND;
    let fx = Fixture {
        members,
        present: names(&["t"]),
        held: names(&["t"]),
        vacant_since: BTreeMap::new(),
        covering: [("t".to_string(), taken)].into(),
        ..Fixture::default()
    };
    // The designated node is registered but did not act: the backup keeps the lease and
    // looks again when the hold ends.
    let during = fx.decide(&backup, taken + Duration::from_millis(50), true);
    assert!(during.actions.is_empty(), "{during:?}");
    assert_eq!(during.recheck_at, Some(taken + COVER_HOLD));
    assert_eq!(
        fx.decide(&backup, taken + COVER_HOLD, true).actions,
        vec![LeaseAction::Release("t".into())]
    );
    // A lease the backup did not take as cover (it was designated when it took it) goes
    // back at once, as when a newer release joins.
    let designated_then = Fixture {
        covering: BTreeMap::new(),
        ..fx
    };
    assert_eq!(
        designated_then.decide(&backup, taken, true).actions,
        vec![LeaseAction::Release("t".into())]
    );
    // Cover or not, a node that may not lead lets go at once.
    let fx = Fixture {
        covering: [("t".to_string(), taken)].into(),
        ..designated_then
    };
    assert_eq!(
        fx.decide(&backup, taken, false).actions,
        vec![LeaseAction::Release("t".into())]
    );
}

/// Two members; the backup covers the designated node's only task `t`.
fn covered(taken: Duration) -> (Fixture, String, String) {
    let tasks = set(&["t"]);
    let members = vec![
        member("a", "1.0.0", 1, &tasks),
        member("b", "1.0.0", 2, &tasks),
    ];
    let ranked = ranked_ids("t", &members);
    let fx = Fixture {
        members,
        present: names(&["t"]),
        held: names(&["t"]),
        covering: [("t".to_string(), taken)].into(),
        ..Fixture::default()
    };
    (fx, ranked[0].clone(), ranked[1].clone())
}

#[test]
fn a_cover_goes_back_once_the_designated_node_acts_not_after_the_whole_hold() {
    // The cold start of 20 nodes took 17-19 s: backups covered for nodes still starting,
    // then kept the leases for COVER_HOLD although those nodes were acting by then.
    let taken = Duration::from_secs(3);
    let (fx, designated, backup) = covered(taken);
    let acted = taken + Duration::from_millis(200);
    let acting: Acting = [(designated.clone(), acted)].into();
    let decide = |now| {
        decide_with(
            &LeaseView {
                me: &backup,
                members: &fx.members,
                present: &fx.present,
                held: &fx.held,
                covering: &fx.covering,
                vacant_since: &fx.vacant_since,
                members_changed: fx.members_changed,
                now,
                may_lead: true,
            },
            &acting,
        )
    };
    // Not within the minimum hold (no burst of hand-backs right after the takes) ...
    let early = decide(acted);
    assert!(early.actions.is_empty(), "{early:?}");
    assert_eq!(early.recheck_at, Some(taken + COVER_MIN_HOLD));
    // ... then at once, long before the hold.
    assert_eq!(
        decide(taken + COVER_MIN_HOLD).actions,
        vec![LeaseAction::Release("t".into())]
    );
}

#[test]
fn a_designated_node_seen_acting_only_before_the_cover_keeps_the_hold() {
    // A node that acted once and then stopped (stuck, paused) does not get its leases
    // handed back every second: the cover is kept for the whole hold.
    let taken = Duration::from_secs(10);
    let (fx, designated, backup) = covered(taken);
    let acting: Acting = [(designated, Duration::from_secs(2))].into();
    let view = LeaseView {
        me: &backup,
        members: &fx.members,
        present: &fx.present,
        held: &fx.held,
        covering: &fx.covering,
        vacant_since: &fx.vacant_since,
        members_changed: fx.members_changed,
        now: taken + COVER_MIN_HOLD,
        may_lead: true,
    };
    let decision = decide_with(&view, &acting);
    assert!(decision.actions.is_empty(), "{decision:?}");
    assert_eq!(decision.recheck_at, Some(taken + COVER_HOLD));
}

#[test]
fn backups_wait_while_the_designated_node_is_working_through_its_leases() {
    // A designated node taking its leases one batch at a time is not stuck: the vacancy
    // of its remaining tasks counts from when it was last seen acting.
    let tasks = set(&["t"]);
    let members = vec![
        member("a", "1.0.0", 1, &tasks),
        member("b", "1.0.0", 2, &tasks),
    ];
    let ranked = ranked_ids("t", &members);
    let fx = Fixture {
        members,
        vacant_since: [("t".to_string(), Duration::ZERO)].into(),
        ..Fixture::default()
    };
    let acted = Duration::from_secs(2);
    let acting: Acting = [(ranked[0].clone(), acted)].into();
    let view = |now| LeaseView {
        me: &ranked[1],
        members: &fx.members,
        present: &fx.present,
        held: &fx.held,
        covering: &fx.covering,
        vacant_since: &fx.vacant_since,
        members_changed: fx.members_changed,
        now,
        may_lead: true,
    };
    let waiting = decide_with(&view(VACANT_BOUND), &acting);
    assert!(waiting.actions.is_empty(), "{waiting:?}");
    assert_eq!(waiting.recheck_at, Some(acted + VACANT_BOUND));
    // It stopped acting: the backup covers one bound after it was last seen acting.
    assert_eq!(
        decide_with(&view(acted + VACANT_BOUND), &acting).actions,
        vec![LeaseAction::Cover("t".into())]
    );
    // Without news of it, the bound counts from the vacancy, as before.
    assert_eq!(
        decide(&view(VACANT_BOUND)).actions,
        vec![LeaseAction::Cover("t".into())]
    );
}

#[test]
fn the_decision_lists_the_designated_tasks_whose_lease_another_holds() {
    let tasks = set(&["t", "u", "v"]);
    let members = vec![
        member("a", "1.0.0", 1, &tasks),
        member("b", "1.0.0", 2, &tasks),
    ];
    let me = ranked_ids("t", &members)[0].clone();
    let mine: Vec<String> = ["t", "u", "v"]
        .iter()
        .filter(|t| position(t, &me, &members) == Some(0))
        .map(|t| t.to_string())
        .collect();
    let fx = Fixture {
        members,
        present: names(&["t", "u", "v"]),
        ..Fixture::default()
    };
    assert_eq!(fx.decide(&me, Duration::ZERO, true).held_elsewhere, mine);
    assert!(mine.contains(&"t".to_string()));
}

#[test]
fn a_member_joining_restarts_the_vacancy_clock_of_the_backups() {
    let tasks = set(&["t"]);
    let members = vec![
        member("a", "1.0.0", 1, &tasks),
        member("b", "1.0.0", 2, &tasks),
    ];
    let backup = ranked_ids("t", &members)[1].clone();
    let joined = Duration::from_secs(60);
    let fx = Fixture {
        members,
        present: BTreeSet::new(),
        held: BTreeSet::new(),
        vacant_since: [("t".to_string(), Duration::ZERO)].into(),
        covering: BTreeMap::new(),
        members_changed: joined,
    };
    // Vacant for a minute, but the designated node joined just now: it gets its bound.
    let decision = fx.decide(&backup, joined, true);
    assert!(decision.actions.is_empty(), "{decision:?}");
    assert_eq!(decision.recheck_at, Some(joined + VACANT_BOUND));
    assert_eq!(
        fx.decide(&backup, joined + VACANT_BOUND, true).actions,
        vec![LeaseAction::Cover("t".into())]
    );
}

#[test]
fn require_labels_limit_eligibility_to_members_with_every_pair() {
    let mut entries = TaskSet::new();
    entries.insert(
        "t".into(),
        TaskEntry {
            max_runs: None,
            digest: "d".into(),
            holders: Default::default(),
            version_req: None,
            require_labels: [("zone", "eu"), ("disk", "ssd")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        },
    );
    let tasks = Arc::new(entries);
    let with = |id: &str, seed: u64, labels: &[(&str, &str)]| {
        let mut m = member(id, "1.0.0", seed, &tasks);
        m.labels = Arc::new(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        m
    };
    let members = vec![
        with("none", 1, &[]),
        with("half", 2, &[("zone", "eu")]),
        with("wrong", 3, &[("zone", "us"), ("disk", "ssd")]),
        with("all", 4, &[("zone", "eu"), ("disk", "ssd"), ("rack", "r1")]),
    ];
    assert_eq!(ranked_ids("t", &members), ["all"]);
    for m in &members[..3] {
        assert!(!m.eligible("t"), "{}", m.id);
        assert_eq!(position("t", &m.id, &members), None, "{}", m.id);
    }
    assert_eq!(position("t", "all", &members), Some(0));
}

#[test]
fn a_drained_member_is_eligible_for_nothing_and_its_lease_moves() {
    let tasks = set(&["t"]);
    let mut members = vec![
        member("a", "1.0.0", 1, &tasks),
        member("b", "1.0.0", 2, &tasks),
    ];
    let designated = ranked_ids("t", &members)[0].clone();
    let other = ranked_ids("t", &members)[1].clone();
    // The designated member is drained: it writes `leads: false` with `drained: true`.
    for m in &mut members {
        if m.id == designated {
            m.may_lead = false;
            m.drained = true;
        }
    }
    assert_eq!(ranked_ids("t", &members), std::slice::from_ref(&other));
    let fx = Fixture {
        members,
        held: names(&["t"]),
        present: names(&["t"]),
        ..Fixture::default()
    };
    // The drained node releases (its `may_lead` is false), the other takes at once once the
    // lease is vacant.
    let drained = fx.decide(&designated, Duration::ZERO, false);
    assert_eq!(drained.actions, [LeaseAction::Release("t".into())]);
    let fx = Fixture {
        held: BTreeSet::new(),
        present: BTreeSet::new(),
        ..fx
    };
    let taker = fx.decide(&other, Duration::ZERO, true);
    assert_eq!(taker.actions, [LeaseAction::Take("t".into())]);
}

#[test]
fn why_ineligible_names_the_first_rule_a_member_fails() {
    let entry = TaskEntry {
        max_runs: None,
        digest: "d".into(),
        holders: Default::default(),
        version_req: Some(VersionReq::parse(">=2.0").unwrap()),
        require_labels: [("zone".to_string(), "eu".to_string())].into(),
    };
    let tasks = Arc::new(TaskSet::from([("t".to_string(), entry.clone())]));
    let mut m = member("a", "1.0.0", 1, &tasks);
    assert_eq!(
        why_ineligible(&m, Some(&entry)).as_deref(),
        Some("release 1.0.0 does not match version_req >=2.0")
    );
    m.release = Version::new(2, 0, 0);
    assert_eq!(
        why_ineligible(&m, Some(&entry)).as_deref(),
        Some("labels (no labels) lack require_labels zone=eu")
    );
    m.labels = Arc::new([("zone".to_string(), "eu".to_string())].into());
    assert_eq!(why_ineligible(&m, Some(&entry)), None);
    assert!(m.eligible("t"));
    assert_eq!(
        why_ineligible(&m, None).as_deref(),
        Some("does not define the task")
    );
    m.may_lead = false;
    assert_eq!(
        why_ineligible(&m, Some(&entry)).as_deref(),
        Some("may not lead (clock too far off ZooKeeper's)")
    );
    m.drained = true;
    assert_eq!(why_ineligible(&m, Some(&entry)).as_deref(), Some("drained"));
}

#[test]
fn a_cached_ranking_decides_exactly_as_ranking_afresh_while_members_change() {
    use rand::{Rng, SeedableRng, rngs::StdRng};
    // One cache reused over a run of decisions while members join, leave, change release or
    // seed, stop being allowed to lead, or re-register with a new copy of their task set;
    // each decision must equal a fresh `decide_with` of the same view.
    let mut rng = StdRng::seed_from_u64(11);
    let names: Vec<String> = (0..300).map(|i| format!("task-{i:04}")).collect();
    let mut entries = TaskSet::new();
    for (i, name) in names.iter().enumerate() {
        let mut require_labels = BTreeMap::new();
        if i % 9 == 0 {
            require_labels.insert("zone".to_string(), "eu".to_string());
        }
        entries.insert(
            name.clone(),
            TaskEntry {
                max_runs: None,
                digest: "d".into(),
                holders: Default::default(),
                version_req: (i % 11 == 0).then(|| VersionReq::parse(">=1.1").unwrap()),
                require_labels,
            },
        );
    }
    let shared = Arc::new(entries);
    let releases = ["1.0.0", "1.1.0", "1.2.0"];
    let fresh = |i: usize, rng: &mut StdRng| {
        let mut m = member(&format!("n{i:02}"), releases[i % 3], rng.random(), &shared);
        if i.is_multiple_of(2) {
            m.labels = Arc::new([("zone".to_string(), "eu".to_string())].into());
        }
        m
    };
    let mut members: Vec<Member> = (0..8).map(|i| fresh(i, &mut rng)).collect();
    let me = "n01".to_string();
    let mut cache = RankCache::default();
    let mut acting = Acting::new();
    for step in 0..200u64 {
        match rng.random_range(0..8) {
            0 => {
                let i = rng.random_range(0..12);
                members.retain(|m| m.id != format!("n{i:02}"));
                if rng.random_bool(0.5) || format!("n{i:02}") == me {
                    members.push(fresh(i, &mut rng));
                    members.sort_by(|a, b| a.id.cmp(&b.id));
                }
            }
            1 => {
                let k = rng.random_range(0..members.len());
                members[k].may_lead = !members[k].may_lead;
            }
            2 => {
                let k = rng.random_range(0..members.len());
                members[k].tasks = Arc::new((*members[k].tasks).clone());
            }
            3 => {
                let k = rng.random_range(0..members.len());
                members[k].seed = rng.random();
            }
            _ => {}
        }
        let pick = |rng: &mut StdRng, p: f64| -> BTreeSet<String> {
            names
                .iter()
                .filter(|_| rng.random_bool(p))
                .cloned()
                .collect()
        };
        let present = pick(&mut rng, 0.5);
        let held: BTreeSet<String> = present
            .iter()
            .filter(|_| rng.random_bool(0.3))
            .cloned()
            .collect();
        let mut covering = BTreeMap::new();
        for task in &held {
            if rng.random_bool(0.3) {
                covering.insert(task.clone(), Duration::from_secs(rng.random_range(0..20)));
            }
        }
        let mut vacant_since = BTreeMap::new();
        for task in names.iter().filter(|t| !present.contains(*t)) {
            if rng.random_bool(0.7) {
                vacant_since.insert(task.clone(), Duration::from_secs(rng.random_range(0..20)));
            }
        }
        if rng.random_bool(0.3) {
            let k = rng.random_range(0..members.len());
            acting.insert(
                members[k].id.clone(),
                Duration::from_secs(rng.random_range(0..20)),
            );
        }
        let view = LeaseView {
            me: &me,
            members: &members,
            present: &present,
            held: &held,
            covering: &covering,
            vacant_since: &vacant_since,
            members_changed: Duration::from_secs(rng.random_range(0..10)),
            now: Duration::from_secs(rng.random_range(0..30)),
            may_lead: rng.random_bool(0.9),
        };
        let decision = decide_cached(&view, &acting, &mut cache);
        assert_eq!(decision, reference_decide(&view, &acting), "step {step}");
        assert_eq!(decision, decide_with(&view, &acting), "step {step}");
    }
}

/// The decision as made before the rank cache and the sorted walks: every task ranked afresh
/// with `position`/`ranking`, every set looked up by name. The reference the cached decision
/// is checked against.
fn reference_decide(view: &LeaseView<'_>, acting: &Acting) -> Decision {
    let mut decision = Decision::default();
    let Some(me) = view.members.iter().find(|m| m.id == view.me) else {
        decision.actions = view
            .held
            .iter()
            .map(|t| LeaseAction::Release(t.clone()))
            .collect();
        return decision;
    };
    let rank = |task: &str| -> Option<(usize, Option<String>)> {
        let ranked = ranked_ids(task, view.members);
        let pos = ranked.iter().position(|id| *id == me.id)?;
        Some((pos, (pos > 0).then(|| ranked[0].clone())))
    };
    let acted = |top: &Option<String>| top.as_ref().and_then(|d| acting.get(d)).copied();
    for task in view.held {
        let Some((pos, top)) = rank(task).filter(|_| view.may_lead) else {
            decision.actions.push(LeaseAction::Release(task.clone()));
            continue;
        };
        if pos == 0 {
            continue;
        }
        let Some(&taken) = view.covering.get(task) else {
            decision.actions.push(LeaseAction::Release(task.clone()));
            continue;
        };
        let until = match acted(&top) {
            Some(at) if at > taken => taken + COVER_MIN_HOLD,
            _ => taken + COVER_HOLD,
        };
        if view.now < until {
            decision.recheck(until);
        } else {
            decision.actions.push(LeaseAction::Release(task.clone()));
        }
    }
    if view.may_lead {
        for task in me.tasks.keys() {
            if view.held.contains(task) {
                continue;
            }
            let Some((pos, top)) = rank(task) else {
                continue;
            };
            if view.present.contains(task) {
                if pos == 0 {
                    decision.held_elsewhere.push(task.clone());
                }
                continue;
            }
            let mut since = view
                .vacant_since
                .get(task)
                .copied()
                .unwrap_or(view.now)
                .max(view.members_changed);
            if let Some(at) = acted(&top) {
                since = since.max(at);
            }
            let due = since + VACANT_BOUND * pos as u32;
            if due > view.now {
                decision.recheck(due);
            } else if pos == 0 {
                decision.actions.push(LeaseAction::Take(task.clone()));
            } else {
                decision.actions.push(LeaseAction::Cover(task.clone()));
            }
        }
    }
    decision.actions.sort();
    decision.held_elsewhere.sort();
    decision
}
