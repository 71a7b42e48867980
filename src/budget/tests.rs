use super::*;

/// What a session holds and used, per provider, as a test sets it.
#[derive(Default)]
struct Held(BTreeMap<String, (u64, Duration)>);

impl Held {
    fn of(pairs: &[(&str, u64, u64)]) -> Held {
        Held(
            pairs
                .iter()
                .map(|(p, n, secs)| (p.to_string(), (*n, Duration::from_secs(*secs))))
                .collect(),
        )
    }
}

impl Usage for Held {
    fn held(&self, provider: Option<&str>) -> u64 {
        self.0
            .iter()
            .filter(|(p, _)| provider.is_none_or(|x| x == p.as_str()))
            .map(|(_, (n, _))| n)
            .sum()
    }
    fn used(&self, provider: Option<&str>, _: Spend) -> Spend {
        Spend::Time(
            self.0
                .iter()
                .filter(|(p, _)| provider.is_none_or(|x| x == p.as_str()))
                .map(|(_, (_, d))| *d)
                .sum(),
        )
    }
}

fn session(limits: Limits) -> Budget {
    limits.into()
}

fn ten() -> Budget {
    session(Limits {
        sandboxes: Some(10),
        ..Default::default()
    })
}

fn over(e: Result<u64, Exceeded>) -> Over {
    e.unwrap_err().over
}

#[test]
fn exactly_the_limit_of_concurrent_slots_is_taken() {
    let mut slots = Slots::default();
    let none = Held::default();
    let taken: Vec<_> = (0..50)
        .filter_map(|_| slots.take(&ten(), "docker", &none).ok())
        .collect();
    assert_eq!(taken, (0..10).collect::<Vec<u64>>());
    assert_eq!(
        over(slots.take(&ten(), "docker", &none)),
        Over::Sandboxes {
            limit: 10,
            alive: 10
        }
    );
}

#[test]
fn held_sandboxes_count_and_a_failed_create_gives_its_slot_back() {
    let mut slots = Slots::default();
    let nine = Held::of(&[("e2b", 9, 0)]);
    let n = slots.take(&ten(), "e2b", &nine).expect("the tenth");
    assert!(slots.take(&ten(), "e2b", &nine).is_err(), "9 held + 1 open");
    slots.done(n, false);
    assert_eq!(slots.made, 0);
    assert!(
        slots.take(&ten(), "e2b", &nine).is_ok(),
        "the slot came back"
    );
}

#[test]
fn creates_count_what_was_made_and_what_is_open_never_what_failed() {
    let three = session(Limits {
        creates: Some(3),
        ..Default::default()
    });
    let mut slots = Slots::default();
    let (none, five) = (Held::default(), Held::of(&[("docker", 5, 0)]));
    let a = slots.take(&three, "docker", &none).unwrap();
    let b = slots.take(&three, "docker", &none).unwrap();
    slots.done(a, true);
    slots.done(b, false);
    slots.done(b, true); // done twice: the second changes nothing
    let c = slots.take(&three, "docker", &five).unwrap();
    let _open = slots.take(&three, "docker", &five).unwrap();
    slots.done(c, true);
    assert_eq!(
        over(slots.take(&three, "docker", &none)),
        Over::Creates { limit: 3, made: 3 }
    );
}

#[test]
fn a_slot_replayed_from_the_journal_keeps_the_numbers_and_the_count() {
    let mut slots = Slots::default();
    slots.taken(4, "docker");
    slots.taken(2, "docker");
    slots.done(2, true);
    assert_eq!(slots.next, 5);
    let two = session(Limits {
        sandboxes: Some(2),
        ..Default::default()
    });
    // Slot 4, open when the sidecar died, still counts as alive.
    assert!(slots
        .take(&two, "docker", &Held::of(&[("docker", 1, 0)]))
        .is_err());
    assert_eq!(slots.take(&two, "docker", &Held::default()), Ok(5));
}

#[test]
fn a_refusal_names_the_limit_as_the_config_does() {
    let e = |provider: Option<&str>, over| Exceeded {
        provider: provider.map(str::to_string),
        over,
    };
    let full = Over::Sandboxes {
        limit: 10,
        alive: 10,
    };
    assert!(e(None, full)
        .to_string()
        .starts_with("limit `sandboxes` reached"));
    assert_eq!(
        e(Some("e2b"), full).to_string(),
        "limit `providers.e2b.limits.sandboxes` reached (at most 10 alive at once on e2b; this \
         session has 10 there); nothing was created"
    );
    let e = e(None, Over::Creates { limit: 3, made: 3 });
    assert!(e.to_string().starts_with("limit `creates` reached"));
    assert_eq!(e.key(), "creates");
    assert!(!Budget::default().any());
    assert!(ten().any());
}

#[test]
fn at_the_spend_limit_every_create_is_refused() {
    let hour = session(Limits {
        spend: Some(Spend::Time(Duration::from_secs(3600))),
        ..Default::default()
    });
    let mut slots = Slots::default();
    assert!(slots
        .take(&hour, "e2b", &Held::of(&[("e2b", 3, 3599)]))
        .is_ok());
    let refused = slots.take(&hour, "e2b", &Held::of(&[("e2b", 0, 3600)]));
    assert_eq!(
        refused.clone().unwrap_err().over,
        Over::Spend {
            limit: Spend::Time(Duration::from_secs(3600)),
            used: Spend::Time(Duration::from_secs(3600))
        }
    );
    assert_eq!(
        refused.unwrap_err().to_string(),
        "limit `spend` reached (at most 1h of sandbox time; this session used 1h); nothing was \
         created"
    );
}

#[test]
fn a_providers_limits_hold_its_own_creates_beside_the_sessions() {
    let budget = Budget {
        session: Limits {
            sandboxes: Some(10),
            ..Default::default()
        },
        providers: [(
            "e2b".to_string(),
            Limits {
                sandboxes: Some(2),
                spend: Some(Spend::Time(Duration::from_secs(60))),
                lifetime: Some(Duration::from_secs(600)),
                ..Default::default()
            },
        )]
        .into(),
        ..Budget::default()
    };
    let mut slots = Slots::default();
    let held = Held::of(&[("docker", 5, 100), ("e2b", 1, 0)]);
    assert!(
        slots.take(&budget, "e2b", &held).is_ok(),
        "1 held + 1 open of 2"
    );
    let refused = slots.take(&budget, "e2b", &held).unwrap_err();
    assert_eq!(refused.provider.as_deref(), Some("e2b"));
    assert_eq!(refused.over, Over::Sandboxes { limit: 2, alive: 2 });
    assert!(
        slots.take(&budget, "docker", &held).is_ok(),
        "docker's creates count toward the session's 10 only"
    );
    let spent = Held::of(&[("docker", 0, 0), ("e2b", 0, 60)]);
    let mut fresh = Slots::default();
    assert!(matches!(
        fresh.take(&budget, "e2b", &spent).unwrap_err().over,
        Over::Spend { .. }
    ));
    assert!(fresh.take(&budget, "docker", &spent).is_ok());
    assert_eq!(budget.lifetime("e2b"), Some(Duration::from_secs(600)));
    assert_eq!(budget.lifetime("docker"), None);
}

/// Each limit in grammatical English, the session's and a provider's (issue 56: "this session
/// sandboxes: 2" read as a form, and the book quotes "this session has 1").
#[test]
fn every_refusal_reads_as_a_sentence() {
    let e = |provider: Option<&str>, over| {
        Exceeded {
            provider: provider.map(str::to_string),
            over,
        }
        .to_string()
    };
    let said = [
        (
            e(None, Over::Sandboxes { limit: 1, alive: 1 }),
            "limit `sandboxes` reached (at most 1 alive at once; this session has 1); nothing \
             was created",
        ),
        (
            e(None, Over::Creates { limit: 2, made: 2 }),
            "limit `creates` reached (at most 2 over the session; this session has made 2); \
             nothing was created",
        ),
        (
            e(Some("daytona"), Over::Creates { limit: 2, made: 2 }),
            "limit `providers.daytona.limits.creates` reached (at most 2 over the session on \
             daytona; this session has made 2 there); nothing was created",
        ),
        (
            e(
                Some("e2b"),
                Over::Spend {
                    limit: Spend::Cost(3.0),
                    used: Spend::Cost(3.1234),
                },
            ),
            "limit `providers.e2b.limits.spend` reached (at most $3.00 estimated on e2b; this \
             session used $3.12 there); nothing was created",
        ),
    ];
    for (got, want) in said {
        assert_eq!(got, want);
    }
    let over = Over::Spend {
        limit: Spend::Time(Duration::from_secs(4)),
        used: Spend::Time(Duration::from_secs(5)),
    };
    assert_eq!(
        (over.max().as_str(), over.reached().as_str()),
        ("4s of sandbox time", "5s")
    );
}

/// The error for a money limit with no price cites the book's section on prices, which
/// must exist there (it once cited a README section that did not).
#[test]
fn an_unpriced_spend_points_to_a_section_the_book_has() {
    let budget = session(Limits {
        spend: Some(Spend::Cost(5.0)),
        ..Default::default()
    });
    let said = budget.unpriced().unwrap().to_string();
    assert!(said.contains("(book/src/budgets.md, \"Prices\")"), "{said}");
    let book = include_str!("../../book/src/budgets.md");
    assert!(
        book.lines().any(|l| l == "## Prices"),
        "the section it cites"
    );
}
