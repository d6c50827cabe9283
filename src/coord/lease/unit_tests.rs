//! Leases of tasks that run on every node: each node's unit is its own, nobody covers it.

use super::*;

/// A task set with `plain` (a leader's task) and `each` (run on every node).
fn set() -> Arc<TaskSet> {
    let entry = |holders| TaskEntry {
        max_runs: None,
        digest: "d".into(),
        version_req: None,
        require_labels: BTreeMap::new(),
        holders,
    };
    Arc::new(BTreeMap::from([
        ("each".to_string(), entry(Holders::EveryNode)),
        ("plain".to_string(), entry(Holders::Leader)),
    ]))
}

fn member(id: &str, tasks: &Arc<TaskSet>) -> Member {
    Member {
        id: id.into(),
        release: Version::parse("1.0.0").unwrap(),
        seed: id.len() as u64,
        tasks: tasks.clone(),
        may_lead: true,
        labels: Labels::default(),
        drained: false,
    }
}

fn decide_for(
    me: &str,
    members: &[Member],
    present: &BTreeSet<String>,
    held: &BTreeSet<String>,
    now: Duration,
) -> Decision {
    decide(&LeaseView {
        me,
        members,
        present,
        held,
        covering: &BTreeMap::new(),
        vacant_since: &BTreeMap::new(),
        members_changed: Duration::ZERO,
        now,
        may_lead: true,
    })
}

#[test]
fn a_unit_names_its_task_and_node_and_only_that_node_is_eligible_for_it() {
    let tasks = set();
    let (a, b) = (member("a", &tasks), member("b", &tasks));
    assert_eq!(unit_name("each", "a"), "each@a");
    assert_eq!(split_unit("each@a"), Some(("each", "a")));
    assert_eq!(split_unit("each"), None);
    assert!(a.eligible("each@a"));
    assert!(!b.eligible("each@a"), "another node's unit");
    assert!(!a.eligible("each"), "the task itself has no lease");
    assert!(!a.eligible("plain@a"), "a leader's task has no units");
    assert!(a.eligible("plain"));
    let drained = Member {
        may_lead: false,
        ..a.clone()
    };
    assert!(!drained.eligible("each@a"));
}

#[test]
fn every_node_takes_its_own_unit_at_once_and_never_covers_another_nodes() {
    let tasks = set();
    let members = vec![
        member("a", &tasks),
        member("b", &tasks),
        member("c", &tasks),
    ];
    let none = BTreeSet::new();
    // Each node takes its unit and nobody else's, however late.
    let late = VACANT_BOUND * 100;
    let mut plain_takers = 0;
    for me in ["a", "b", "c"] {
        let decision = decide_for(me, &members, &none, &none, late);
        let units: Vec<&LeaseAction> = decision
            .actions
            .iter()
            .filter(|a| !matches!(a, LeaseAction::Take(t) | LeaseAction::Cover(t) if t == "plain"))
            .collect();
        assert_eq!(
            units,
            [&LeaseAction::Take(format!("each@{me}"))],
            "{me}: {decision:?}"
        );
        plain_takers += decision.actions.len() - 1;
    }
    // The leader's task as before: its vacancy starts at this first decision, so only its
    // designated node takes it.
    assert_eq!(plain_takers, 1);
    // Right away too: a unit has no rank to wait for.
    let decision = decide_for("b", &members, &none, &none, Duration::ZERO);
    assert!(
        decision
            .actions
            .contains(&LeaseAction::Take("each@b".into()))
    );
}

#[test]
fn a_node_keeps_its_unit_and_releases_it_when_it_may_not_lead() {
    let tasks = set();
    let members = vec![member("a", &tasks), member("b", &tasks)];
    let held: BTreeSet<String> = ["each@a".to_string()].into();
    let decision = decide_for("a", &members, &held, &held, Duration::ZERO);
    assert!(
        !decision
            .actions
            .contains(&LeaseAction::Release("each@a".into()))
    );
    assert!(!decision.held_elsewhere.contains(&"each@a".to_string()));
    let drained = vec![
        Member {
            may_lead: false,
            ..members[0].clone()
        },
        members[1].clone(),
    ];
    let decision = decide_for("a", &drained, &held, &held, Duration::ZERO);
    assert!(
        decision
            .actions
            .contains(&LeaseAction::Release("each@a".into()))
    );
    // Its unit held by another session (its previous one) is checked like a task's.
    let decision = decide_for("a", &members, &held, &BTreeSet::new(), Duration::ZERO);
    assert_eq!(decision.held_elsewhere, ["each@a"]);
}

#[test]
fn the_rank_cache_gives_the_same_decisions_for_units() {
    let tasks = set();
    let members = vec![member("a", &tasks), member("b", &tasks)];
    let none = BTreeSet::new();
    let view = LeaseView {
        me: "b",
        members: &members,
        present: &none,
        held: &none,
        covering: &BTreeMap::new(),
        vacant_since: &BTreeMap::new(),
        members_changed: Duration::ZERO,
        now: VACANT_BOUND * 10,
        may_lead: true,
    };
    let mut cache = RankCache::default();
    let first = decide_cached(&view, &Acting::new(), &mut cache);
    let again = decide_cached(&view, &Acting::new(), &mut cache);
    assert_eq!(first, decide(&view));
    assert_eq!(again, first);
}
