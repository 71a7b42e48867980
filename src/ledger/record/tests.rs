use super::*;

fn round_trip(record: Record) {
    let entry = Entry { t: 42, record };
    let line = entry.encode().unwrap();
    assert_eq!(line.last(), Some(&b'\n'));
    assert_eq!(Entry::decode(&line[..line.len() - 1]).unwrap(), entry);
}

#[test]
fn every_record_round_trips() {
    let labels = BTreeMap::from([("sandguard.session".to_string(), "abc".to_string())]);
    let (provider, id) = ("docker".to_string(), "3f2a".to_string());
    for record in [
        Record::Start {
            owner: "o".into(),
            pid: 7,
            grace_ms: 600_000,
            labels,
        },
        Record::Claim {
            provider: provider.clone(),
            id: id.clone(),
            size: None,
        },
        Record::Claim {
            provider: provider.clone(),
            id: id.clone(),
            size: Some("base".into()),
        },
        Record::Detach {
            provider: provider.clone(),
            id: id.clone(),
            size: Some("base".into()),
        },
        Record::Resume {
            owner: "o2".into(),
            pid: 8,
            grace_ms: 5_000,
            labels: BTreeMap::new(),
        },
        Record::LeaseExpired,
        Record::OwnerDead {
            reason: "exited".into(),
        },
        Record::OwnerExit {
            code: None,
            signal: Some(9),
        },
        Record::OwnerExit {
            code: Some(3),
            signal: None,
        },
        Record::ReclaimStart { cause: None },
        Record::ReclaimStart {
            cause: Some(EndCause::OwnerGoneAtStart),
        },
        Record::Removed {
            provider: provider.clone(),
            id: id.clone(),
            outcome: "gone".into(),
            at: Some(41),
            limit: None,
        },
        Record::Removed {
            provider: provider.clone(),
            id: id.clone(),
            outcome: "removed".into(),
            at: Some(42),
            limit: Some(crate::budget::Limit::Lifetime),
        },
        Record::Failed {
            provider,
            id,
            error: "daemon unreachable".into(),
            pending: true,
        },
        Record::End {
            state: SessionState::Pending,
        },
        Record::CreateRefused {
            provider: "e2b".into(),
            limit: "providers.e2b.limits.spend".into(),
            max: "$3.00 estimated".into(),
            reached: "$3.12".into(),
            n: 4,
            at: 41,
            create: BTreeMap::from([("template".to_string(), "base".to_string())]),
        },
    ] {
        round_trip(record);
    }
}

#[test]
fn the_line_format_is_flat_and_stable() {
    let entry = Entry {
        t: 1,
        record: Record::Claim {
            provider: "docker".into(),
            id: "abc".into(),
            size: None,
        },
    };
    let line = String::from_utf8(entry.encode().unwrap()).unwrap();
    assert_eq!(
        line, "{\"t\":1,\"ev\":\"claim\",\"provider\":\"docker\",\"id\":\"abc\"}\n",
        "no size, no field: a claim reads as it always did"
    );
    let sized = Entry::decode(br#"{"t":1,"ev":"claim","provider":"e2b","id":"i","size":"base"}"#);
    assert_eq!(
        sized.unwrap().record,
        Record::claim_sized(&Target::new("e2b", "i").unwrap(), Some("base".into()))
    );
    let end = Entry::decode(br#"{"t":2,"ev":"end","state":"reclaimed"}"#).unwrap();
    assert_eq!(
        end.record,
        Record::End {
            state: SessionState::Reclaimed
        }
    );
}

#[test]
fn unknown_kinds_decode_as_unknown_and_cannot_be_written() {
    let e = Entry::decode(br#"{"t":3,"ev":"teleport","to":"mars","n":1}"#).unwrap();
    assert_eq!(e.record, Record::Unknown);
    assert!(e.encode().is_err());
    // A known kind with broken fields is corrupt, not unknown.
    assert!(Entry::decode(br#"{"t":3,"ev":"claim","provider":"docker"}"#).is_err());
    assert!(Entry::decode(br#"{"ev":"renew"}"#).is_err());
}

#[test]
fn states_print_lower_case_and_know_when_they_are_final() {
    assert_eq!(SessionState::Reclaiming.to_string(), "reclaiming");
    assert_eq!(
        serde_json::to_string(&SessionState::Clean).unwrap(),
        "\"clean\""
    );
    assert!(SessionState::Clean.is_final() && SessionState::Reclaimed.is_final());
    assert!(!SessionState::Pending.is_final() && !SessionState::Active.is_final());
}

#[test]
fn a_refused_create_reads_as_it_is_written_and_names_nothing_it_was_not_given() {
    let line = br#"{"t":5,"ev":"create_refused","provider":"docker","limit":"sandboxes","max":"2","reached":"2","n":1,"at":4,"create":{"image":"busybox"}}"#;
    let entry = Entry::decode(line).unwrap();
    assert_eq!(
        entry.record,
        Record::CreateRefused {
            provider: "docker".into(),
            limit: "sandboxes".into(),
            max: "2".into(),
            reached: "2".into(),
            n: 1,
            at: 4,
            create: BTreeMap::from([("image".to_string(), "busybox".to_string())]),
        }
    );
    let bare = Entry {
        t: 5,
        record: Record::CreateRefused {
            provider: "docker".into(),
            limit: "creates".into(),
            max: "3".into(),
            reached: "3".into(),
            n: 2,
            at: 5,
            create: BTreeMap::new(),
        },
    };
    let text = String::from_utf8(bare.encode().unwrap()).unwrap();
    assert!(
        !text.contains("create\":"),
        "no create named, no field: {text}"
    );
    assert_eq!(Entry::decode(text.trim_end().as_bytes()).unwrap(), bare);
}
