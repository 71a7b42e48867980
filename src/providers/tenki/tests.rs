//! Unit tests of `tenki`.

use super::wire::{read_labels, Session};
use super::*;

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(std::string::ToString::to_string).collect()
}

fn meta(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

const ID: &str = "0123456789abcdef0123456789abcdef";

#[test]
fn the_session_tag_fits_tenkis_tag_rules() {
    let tag = session_tag(ID);
    assert_eq!(tag, "sandguard:0123456789abcdef012345");
    assert_eq!(tag.len(), TAG_MAX);
    assert!(tag
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b":_.-".contains(&b)));
    assert_eq!(session_tag(" Short1 "), "sandguard:short1");
}

/// Found while writing the fuzz target `tenki_list` (its input reproduces it): a listed
/// session whose `sandguard.session` metadata put a multi-byte character across the
/// 32-byte cut panicked the whole listing.
#[test]
fn a_non_ascii_session_is_cut_at_a_character_boundary() {
    let session = format!("{}é", "a".repeat(TAG_MAX - TAG_PREFIX.len() - 1));
    let tag = session_tag(&session);
    assert_eq!(tag, format!("{TAG_PREFIX}{}", "a".repeat(21)));
    assert_eq!(session_tag(&"€".repeat(10)).len(), TAG_MAX - 1);

    let body = json!({"sessions": [{
        "id": "s",
        "tags": ["sandguard:aaaa"],
        "metadata": {"sandguard.session": session},
    }]});
    let (listed, _) = parse_list_body(body.to_string().as_bytes(), None).unwrap();
    assert_eq!(listed[0].labels[labels::SESSION], "aaaa");
}

#[test]
fn selectors_become_one_tag_per_session_term() {
    assert_eq!(tag_filter(&Selector::session(ID)), vec![session_tag(ID)]);
    assert!(tag_filter(&Selector::managed()).is_empty());
    let body = list_body(&tag_filter(&Selector::session("s1")), 100, Some("t2"));
    assert_eq!(
        body,
        json!({"pageSize": 100, "pageToken": "t2", "tags": ["sandguard:s1"]})
    );
    assert_eq!(list_body(&[], 1, Some("")), json!({"pageSize": 1}));
}

#[test]
fn labels_come_from_the_tag_and_metadata() {
    // Tag only: a short id whole, a long one by its start unless the listing asked for it.
    let l = read_labels(&strings(&["x", "sandguard:s1"]), &BTreeMap::new(), None);
    assert_eq!(l, meta(&[(labels::SESSION, "s1")]));
    let tags = strings(&[&session_tag(ID)]);
    let l = read_labels(&tags, &BTreeMap::new(), None);
    assert_eq!(l[labels::SESSION], "0123456789abcdef012345");
    let l = read_labels(&tags, &BTreeMap::new(), Some(ID));
    assert_eq!(l[labels::SESSION], ID);
    // Ids alike in their first 22 characters: the tag alone cannot tell them apart
    // (documented); the full id in metadata can.
    let other = "0123456789abcdef012345ffffffffff";
    let l = read_labels(&tags, &BTreeMap::new(), Some(other));
    assert_eq!(l[labels::SESSION], other);
    let l = read_labels(&tags, &meta(&[(labels::SESSION, ID)]), Some(other));
    assert_eq!(l[labels::SESSION], ID);

    // Metadata adds the full id and the owner when it agrees with the tag.
    let m = meta(&[
        (labels::SESSION, ID),
        (labels::OWNER, "aa-bb-1-2"),
        ("team", "x"),
    ]);
    let l = read_labels(&tags, &m, None);
    assert_eq!(
        l,
        meta(&[(labels::SESSION, ID), (labels::OWNER, "aa-bb-1-2")])
    );
    let l = read_labels(&strings(&["sandguard:s2"]), &m, None);
    assert_eq!(l[labels::SESSION], "s2", "the tag wins over metadata");

    // No tag: not managed, whatever the metadata says.
    assert!(read_labels(&strings(&["sandguard:", "sandguard.x"]), &m, None).is_empty());
}

#[test]
fn sessions_map_to_sandboxes() {
    let s: Session = serde_json::from_value(json!({
        "id": "7d3c2e9a-0000-4000-8000-000000000001",
        "state": "SESSION_STATE_RUNNING",
        "createdAt": "2026-05-01T12:00:00.250Z",
        "timeoutAt": "2026-05-01T13:00:00Z",
        "tags": ["sandguard:s1"],
        "sourceRegistryRef": "ws/base@sha256:ab",
        "cpuCores": 2,
        "memoryMb": "4096"
    }))
    .unwrap();
    assert!(!s.is_terminal());
    let sb = s.into_sandbox(None);
    assert_eq!(sb.status, "running");
    assert_eq!(sb.created_at, Some(1_777_636_800));
    assert_eq!(sb.image.as_deref(), Some("ws/base@sha256:ab"));
    assert_eq!(sb.session(), Some("s1"));
    let gone: Session =
        serde_json::from_value(json!({"id": "x", "state": "SESSION_STATE_TERMINATING"})).unwrap();
    assert!(gone.is_terminal());
    let bare: Session = serde_json::from_value(json!({"id": "y"})).unwrap();
    assert_eq!(bare.status(), "unspecified");
}

#[test]
fn extensions_aim_at_ttl_from_now() {
    let ttl = Duration::from_secs(600);
    assert_eq!(extension(1000, ttl, Some(1300)), Some(300));
    assert_eq!(extension(1000, ttl, Some(1600)), None);
    assert_eq!(extension(1000, ttl, Some(5000)), None);
    assert_eq!(extension(1000, ttl, None), Some(600));
    assert_eq!(extension(1000, Duration::from_millis(1500), None), Some(2));
}

#[test]
fn terminated_sessions_are_gone() {
    let what = "failed to remove sandbox abc";
    let fatal = |text: &str| {
        ProviderError::Fatal(crate::providers::Detail::http(
            format!("tenki: {what}: {text} (HTTP 400)"),
            400,
        ))
    };
    assert!(matches!(
        already_gone(fatal("session abc is already terminated"), what),
        ProviderError::Gone(_)
    ));
    assert!(matches!(
        already_gone(fatal("session is sticky"), what),
        ProviderError::Fatal(_)
    ));
    let unauth = ProviderError::Fatal(crate::providers::Detail::http(
        format!("tenki: {what}: terminated (HTTP 401)"),
        401,
    ));
    assert!(matches!(
        already_gone(unauth, what),
        ProviderError::Fatal(_)
    ));
}
