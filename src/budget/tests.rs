use super::*;

const TEN: Limits = Limits {
    sandboxes: Some(10),
    creates: None,
    lifetime: None,
    spend: None,
    on_spend: None,
};

#[test]
fn exactly_the_limit_of_concurrent_slots_is_taken() {
    let mut slots = Slots::default();
    let taken: Vec<_> = (0..50)
        .filter_map(|_| slots.take(&TEN, "docker", 0, Duration::ZERO).ok())
        .collect();
    assert_eq!(taken, (0..10).collect::<Vec<u64>>());
    assert_eq!(
        slots.take(&TEN, "docker", 0, Duration::ZERO),
        Err(Exceeded::Sandboxes {
            limit: 10,
            alive: 10
        })
    );
}

#[test]
fn held_sandboxes_count_and_a_failed_create_gives_its_slot_back() {
    let mut slots = Slots::default();
    let n = slots
        .take(&TEN, "e2b", 9, Duration::ZERO)
        .expect("the tenth");
    assert!(
        slots.take(&TEN, "e2b", 9, Duration::ZERO).is_err(),
        "9 held + 1 open"
    );
    slots.done(n, false);
    assert_eq!(slots.made, 0);
    assert!(
        slots.take(&TEN, "e2b", 9, Duration::ZERO).is_ok(),
        "the slot came back"
    );
}

#[test]
fn creates_count_what_was_made_and_what_is_open_never_what_failed() {
    let three = Limits {
        sandboxes: None,
        creates: Some(3),
        lifetime: None,
        spend: None,
        on_spend: None,
    };
    let mut slots = Slots::default();
    let a = slots.take(&three, "docker", 0, Duration::ZERO).unwrap();
    let b = slots.take(&three, "docker", 0, Duration::ZERO).unwrap();
    slots.done(a, true);
    slots.done(b, false);
    slots.done(b, true); // done twice: the second changes nothing
    let c = slots.take(&three, "docker", 5, Duration::ZERO).unwrap();
    let _open = slots.take(&three, "docker", 5, Duration::ZERO).unwrap();
    slots.done(c, true);
    assert_eq!(
        slots.take(&three, "docker", 0, Duration::ZERO),
        Err(Exceeded::Creates { limit: 3, made: 3 })
    );
}

#[test]
fn a_slot_replayed_from_the_journal_keeps_the_numbers_and_the_count() {
    let mut slots = Slots::default();
    slots.taken(4, "docker");
    slots.taken(2, "docker");
    slots.done(2, true);
    assert_eq!(slots.next, 5);
    let one = Limits {
        sandboxes: Some(2),
        creates: None,
        lifetime: None,
        spend: None,
        on_spend: None,
    };
    // Slot 4, open when the sidecar died, still counts as alive.
    assert!(slots.take(&one, "docker", 1, Duration::ZERO).is_err());
    assert_eq!(slots.take(&one, "docker", 0, Duration::ZERO), Ok(5));
}

#[test]
fn a_refusal_names_the_limit_as_the_config_does() {
    let e = Exceeded::Sandboxes {
        limit: 10,
        alive: 10,
    };
    assert!(e.to_string().starts_with("limit `sandboxes` reached"));
    let e = Exceeded::Creates { limit: 3, made: 3 };
    assert!(e.to_string().starts_with("limit `creates` reached"));
    assert!(!Limits::default().any());
    assert!(TEN.any());
}

#[test]
fn at_the_spend_limit_every_create_is_refused() {
    let limits = Limits {
        spend: Some(Duration::from_secs(3600)),
        ..Limits::default()
    };
    let mut slots = Slots::default();
    assert!(slots
        .take(&limits, "e2b", 3, Duration::from_secs(3599))
        .is_ok());
    let refused = slots.take(&limits, "e2b", 0, Duration::from_secs(3600));
    assert_eq!(
        refused,
        Err(Exceeded::Spend {
            limit: Duration::from_secs(3600),
            used: Duration::from_secs(3600)
        })
    );
    assert_eq!(
        refused.unwrap_err().to_string(),
        "limit `spend` reached (at most 1h of sandbox time; this session used 1h); nothing was \
         created"
    );
}
