use super::*;
use semver::Version;

fn member_record(release: &str, seed: &str) -> MemberRecord {
    MemberRecord {
        format: FORMAT_VERSION,
        id: "n1".into(),
        release: release.into(),
        seed: seed.into(),
        host: "h".into(),
        pid: 1,
        http: None,
        started_at: DateTime::from_timestamp(1_767_225_600, 0).unwrap(),
        labels: BTreeMap::from([("zone".into(), "a".into())]),
        taskset: TaskSetRef {
            digest: "d".into(),
            chunks: 1,
            count: 0,
        },
        leads: true,
        drained: false,
    }
}

fn member(release: &str) -> Result<Member, Unranked> {
    member_record(release, "00000000000000ff").to_member(Arc::default())
}

/// Whether a member of release `a` ranks above one of release `b` (same seed; the ids
/// `a` and `b` decide a tie, so a tie reads as "above" both ways).
fn above(a: &str, b: &str) -> bool {
    let (a, b) = (member(a).unwrap(), member(b).unwrap());
    fn candidate<'a>(m: &'a Member, id: &'a str) -> crate::coord::rank::Candidate<'a> {
        crate::coord::rank::Candidate {
            id,
            release: &m.release,
            seed: m.seed,
        }
    }
    crate::coord::rank::compare("t", &candidate(&a, "a"), &candidate(&b, "b")).is_lt()
}

#[test]
fn releases_rank_by_semver_precedence_and_a_release_that_is_no_version_ranks_for_nothing() {
    assert!(above("2.2.0", "2.1.0") && !above("2.1.0", "2.2.0"));
    // A pre-release ranks below its release and above the release before it.
    assert!(above("2.2.0", "2.2.0-rc.1") && !above("2.2.0-rc.1", "2.2.0"));
    assert!(above("2.2.0-rc.1", "2.1.0") && !above("2.1.0", "2.2.0-rc.1"));
    assert!(above("2.2.0-rc.2", "2.2.0-rc.1") && !above("2.2.0-rc.1", "2.2.0-rc.2"));
    // Build metadata is kept but does not rank: a tie, decided by the rest.
    assert_eq!(member("2.1.0+b5").unwrap().release.build.as_str(), "b5");
    assert!(above("2.1.0+b5", "2.1.0") && above("2.1.0", "2.1.0+b5"));
    assert!(above("2.1.0+b5", "2.1.0+b6") && above("2.1.0+b6", "2.1.0+b5"));
    for invalid in ["2.1", "v2.1.0", "2.1.0.0", " 2.1.0", "latest", ""] {
        assert_eq!(
            member(invalid).unwrap_err(),
            Unranked::InvalidRelease(invalid.into()),
            "{invalid:?}"
        );
    }
    assert_eq!(
        member("2.1").unwrap_err().to_string(),
        "release \"2.1\" is not a semantic version: ranked for nothing"
    );
}

#[test]
fn a_member_record_becomes_the_member_it_describes_and_a_bad_seed_ranks_for_nothing() {
    let record = member_record("2.1.0", "ffffffffffffffff");
    let member = record.to_member(Arc::default()).unwrap();
    assert_eq!(
        (
            member.id.as_str(),
            member.seed,
            member.may_lead,
            member.drained
        ),
        ("n1", u64::MAX, true, false)
    );
    assert_eq!(*member.labels, record.labels);
    let refusing = MemberRecord {
        leads: false,
        ..record.clone()
    };
    assert!(!refusing.to_member(Arc::default()).unwrap().may_lead);
    let drained = MemberRecord {
        drained: true,
        ..record.clone()
    };
    let drained = drained.to_member(Arc::default()).unwrap();
    assert!(drained.drained && !drained.may_lead);
    for seed in ["", "xyz", "1ffffffffffffffff"] {
        assert_eq!(
            member_record("2.1.0", seed)
                .to_member(Arc::default())
                .unwrap_err(),
            Unranked::InvalidSeed(seed.into()),
            "{seed:?}"
        );
    }
}

#[test]
fn member_records_keep_64_bit_seeds_exact_and_ignore_unknown_fields() {
    let json = r#"{"format":1,"id":"n1","release":"1.2.3","seed":"ffffffffffffffff",
        "host":"h","pid":1,"started_at":"2026-01-01T00:00:00Z","labels":{},
        "taskset":{"digest":"d","chunks":1,"count":0},"from_the_future":true}"#;
    let record: MemberRecord = serde_json::from_str(json).unwrap();
    assert_eq!(u64::from_str_radix(&record.seed, 16).unwrap(), u64::MAX);
}

#[test]
fn an_unparsable_version_req_from_a_newer_release_matches_nothing() {
    let mut tasks = BTreeMap::new();
    tasks.insert(
        "t".to_string(),
        TaskSetEntry {
            digest: "d".into(),
            version_req: Some("~~>2 (future syntax)".into()),
            require_labels: BTreeMap::new(),
            schedule: None,
            timezone: None,
            ..Default::default()
        },
    );
    let set = decode_taskset(&TaskSetRecord {
        format: 1,
        tasks,
        calendars: Default::default(),
    });
    let req = set["t"].version_req.as_ref().unwrap();
    assert!(!req.matches(&Version::parse("99.0.0").unwrap()));
}

#[test]
fn run_on_every_node_decodes_to_units_and_an_unknown_run_on_admits_no_member() {
    let entry = |run_on: Option<&str>| TaskSetEntry {
        digest: "d".into(),
        run_on: run_on.map(str::to_string),
        ..Default::default()
    };
    let tasks = BTreeMap::from([
        ("e".to_string(), entry(Some(RUN_ON_EVERY_NODE))),
        ("f".to_string(), entry(Some("somewhere_new"))),
        ("t".to_string(), entry(None)),
    ]);
    let json = serde_json::to_value(&tasks).unwrap();
    assert_eq!(json["e"]["run_on"], "every_node");
    assert!(
        json["t"].get("run_on").is_none(),
        "absent for a leader's task"
    );
    let set = decode_taskset(&TaskSetRecord {
        format: 1,
        tasks,
        calendars: Default::default(),
    });
    assert_eq!(set["e"].holders, Holders::EveryNode);
    assert_eq!(set["t"].holders, Holders::Leader);
    let any = Version::parse("99.0.0").unwrap();
    assert!(set["e"].admits(&any, &BTreeMap::new()));
    assert!(!set["f"].admits(&any, &BTreeMap::new()));
}

#[test]
fn a_pooled_task_is_written_with_its_items_and_a_pool_without_items_admits_no_member() {
    let defaults = crate::task::TaskDefaults::for_tests();
    let text = "schedule = \"* * * * *\"\ncommand = \"true\"\n\
                work_items = [\"us-east\", \"eu-west\"]\n";
    let spec = crate::task::parse_task("p", std::path::Path::new("p.toml"), text, &defaults)
        .expect("valid task");
    let (_, chunks, set) = encode_taskset(&[spec]);
    let json: serde_json::Value = serde_json::from_slice(&chunks.concat()).unwrap();
    assert_eq!(json["tasks"]["p"]["run_on"], "work_items");
    let items = serde_json::json!(["us-east", "eu-west"]);
    assert_eq!(json["tasks"]["p"]["work_items"], items);
    let items: Arc<[String]> = ["us-east".to_string(), "eu-west".to_string()].into();
    assert_eq!(set["p"].holders, Holders::Items(items.clone()));
    let mut record: TaskSetRecord = serde_json::from_value(json).unwrap();
    assert_eq!(decode_taskset(&record)["p"].holders, Holders::Items(items));
    // Without its items (a damaged or foreign record) the pool is nobody's.
    let bare = &mut record;
    bare.tasks.get_mut("p").unwrap().work_items = None;
    let any = Version::parse("99.0.0").unwrap();
    assert!(!decode_taskset(bare)["p"].admits(&any, &BTreeMap::new()));
}
