//! Unit tests of `daytona`.

use super::*;
use crate::labels::SESSION;

#[test]
fn only_valued_terms_reach_the_filter() {
    assert_eq!(
        label_filter(&Selector::session("s1")).as_deref(),
        Some(r#"{"sandguard.session":"s1"}"#)
    );
    assert_eq!(label_filter(&Selector::managed()), None);
}

#[test]
fn both_list_shapes_parse() {
    let paged: ListAnswer = serde_json::from_str(
        r#"{"items":[{"id":"a","state":"started","createdAt":"2026-06-01T10:00:00.123Z",
            "snapshot":"daytonaio/sandbox:0.4","labels":{"sandguard.session":"s"},
            "cpu":1,"memory":1,"disk":3,"gpu":0,"public":false,"target":"eu",
            "organizationId":"o","name":"n","user":"daytona","toolboxProxyUrl":"x"}],
            "nextCursor":"c2"}"#,
    )
    .unwrap();
    let (items, next) = paged.into_page();
    assert_eq!(next.as_deref(), Some("c2"));
    let s = items.into_iter().next().unwrap().into_sandbox();
    assert_eq!(s.id, "a");
    assert_eq!(s.status, "started");
    assert_eq!(s.created_at, Some(1_780_308_000));
    assert_eq!(s.image.as_deref(), Some("daytonaio/sandbox:0.4"));
    assert_eq!(s.labels[SESSION], "s");
    assert_eq!(s.kind, Kind::Instance);

    let last: ListAnswer = serde_json::from_str(r#"{"items":[],"nextCursor":null}"#).unwrap();
    let (items, next) = last.into_page();
    assert!(items.is_empty() && next.is_none());

    let legacy: ListAnswer =
        serde_json::from_str(r#"[{"id":"b","labels":null},{"id":"c"}]"#).unwrap();
    let (items, next) = legacy.into_page();
    assert_eq!(next, None);
    let ids: Vec<String> = items.iter().map(|i| i.id.clone()).collect();
    assert_eq!(ids, ["b", "c"]);
    let s = items.into_iter().next().unwrap().into_sandbox();
    assert_eq!(s.status, "unknown");
    assert!(s.labels.is_empty() && s.created_at.is_none() && s.image.is_none());
}

#[test]
fn autostop_rounds_up_to_whole_minutes_and_never_disables() {
    assert_eq!(autostop_minutes(Duration::ZERO), 1);
    assert_eq!(autostop_minutes(Duration::from_secs(1)), 1);
    assert_eq!(autostop_minutes(Duration::from_secs(60)), 1);
    assert_eq!(autostop_minutes(Duration::from_secs(61)), 2);
    assert_eq!(autostop_minutes(Duration::from_secs(3600)), 60);
}

#[test]
fn a_missing_collection_is_fatal() {
    assert!(matches!(
        listing_error(ProviderError::Gone("nope".into())),
        ProviderError::Fatal(_)
    ));
}

#[test]
fn the_bare_key_is_scrubbed() {
    let p = DaytonaProvider::new(
        &Secret::new("dtn_secret"),
        "http://127.0.0.1:1/api",
        Duration::from_secs(1),
    )
    .unwrap();
    assert_eq!(
        p.http.redact("key dtn_secret refused"),
        "key [redacted] refused"
    );
    assert_eq!(p.http.redact("Bearer dtn_secret"), "[redacted]");
}

#[test]
fn path_segments_are_encoded() {
    assert_eq!(encode_segment("3f2a-b_c.d~"), "3f2a-b_c.d~");
    assert_eq!(encode_segment("a/b c"), "a%2Fb%20c");
}

#[test]
fn unconfigured_names_the_variable() {
    let settings = CloudSettings {
        token: None,
        secret: None,
        url: "https://app.daytona.io/api".into(),
        app: None,
        timeout: Duration::from_secs(30),
        rate: None,
    };
    let e = entry(&settings);
    assert_eq!(e.name, "daytona");
    match e.state {
        EntryState::Unconfigured(reason) => assert!(reason.contains("DAYTONA_API_KEY")),
        EntryState::Configured(_) => panic!("configured without a key"),
    }
}
