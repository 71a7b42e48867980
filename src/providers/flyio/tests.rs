//! Unit tests of `flyio`.

use super::*;

#[test]
fn tokens_get_the_right_scheme() {
    let h = |t: &str| authorization(&Secret::new(t)).expose().to_string();
    assert_eq!(h("fo1_abc"), "Bearer fo1_abc");
    assert_eq!(h("FlyV1 fm2_abc,fm2_def"), "FlyV1 fm2_abc,fm2_def");
}

#[test]
fn entries_say_what_is_missing() {
    let settings = |token: Option<&str>, app: Option<&str>| CloudSettings {
        token: token.map(Secret::new),
        secret: None,
        url: "http://127.0.0.1:1".into(),
        app: app.map(str::to_string),
        timeout: Duration::from_secs(1),
        rate: None,
    };
    let reason = |s: &CloudSettings| match entry(s).state {
        EntryState::Unconfigured(r) => r,
        EntryState::Configured(_) => "configured".into(),
    };
    assert!(reason(&settings(None, Some("a"))).starts_with("FLY_API_TOKEN is not set"));
    assert!(reason(&settings(Some("t"), None)).starts_with("FLY_APP_NAME is not set"));
    assert!(reason(&settings(None, None)).contains("FLY_API_TOKEN and FLY_APP_NAME"));
    assert_eq!(reason(&settings(Some("t"), Some("a"))), "configured");
}

#[test]
fn only_valued_terms_become_metadata_filters() {
    assert_eq!(
        metadata_filter(&Selector::session("s1")),
        vec![("metadata.sandguard.session".to_string(), "s1".to_string())]
    );
    assert!(metadata_filter(&Selector::managed()).is_empty());
}

#[test]
fn machines_map_to_sandboxes_and_terminal_ones_are_skipped() {
    let json = r#"[
      {"id":"73d8d46dbee589","name":"m","state":"started","region":"cdg",
       "created_at":"2023-10-31T02:30:10Z",
       "config":{"image":"registry-1.docker.io/library/alpine:3","auto_destroy":true,
                 "metadata":{"sandguard.session":"s1","sandguard.owner":"o","n":"1"}},
       "events":[{"type":"start","status":"started","timestamp":1698719726615}]},
      {"id":"aaa","state":"destroyed","config":{"metadata":{"sandguard.session":"s1"}}},
      {"id":"bbb","state":"stopped","host_status":"unreachable",
       "incomplete_config":{"metadata":{"sandguard.session":"s2","bad":7}},
       "image_ref":{"repository":"library/busybox","tag":"1"}},
      {"id":"ccc","state":"started","config":{}}
    ]"#;
    let machines: Vec<Machine> = serde_json::from_str(json).unwrap();
    let sandboxes: Vec<Sandbox> = machines
        .into_iter()
        .filter_map(Machine::into_sandbox)
        .collect();
    assert_eq!(sandboxes.len(), 3);
    let a = &sandboxes[0];
    assert_eq!(
        (a.id.as_str(), a.status.as_str(), a.session()),
        ("73d8d46dbee589", "started", Some("s1"))
    );
    assert_eq!(a.created_at, Some(1_698_719_410));
    assert_eq!(
        a.image.as_deref(),
        Some("registry-1.docker.io/library/alpine:3")
    );
    assert_eq!(a.labels.len(), 3);
    let b = &sandboxes[1];
    assert_eq!(b.session(), Some("s2"));
    assert!(!b.labels.contains_key("bad"));
    assert_eq!(b.image.as_deref(), Some("library/busybox:1"));
    assert!(sandboxes[2].labels.is_empty());
}

#[test]
fn lease_conflicts_are_read() {
    let m = "flyio: failed to stop machine x of app a: aborted: machine ID x lease currently \
             held by 1234@tokens.fly.io, expires at 2026-08-14T09:57:35Z (HTTP 409)";
    assert_eq!(status_of(m), Some(409));
    assert!(is_lease_conflict(m));
    let expiry = lease_expiry_in(m).unwrap();
    assert_eq!(
        crate::timefmt::format_rfc3339(expiry),
        "2026-08-14T09:57:35Z"
    );
    assert_eq!(lease_expiry_in("expires at never (HTTP 409)"), None);
    assert_eq!(
        status_of("flyio: x: rate limit exceeded (HTTP 429)"),
        Some(429)
    );
    assert_eq!(status_of("flyio: x: unreachable: reset"), None);
}

#[test]
fn lease_waits_end_after_the_expiry() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
    assert_eq!(
        wait_until(Some(1002), now),
        Duration::from_secs(2) + LEASE_MARGIN
    );
    assert_eq!(wait_until(Some(900), now), LEASE_MARGIN);
    assert_eq!(wait_until(None, now), LEASE_MARGIN);
}

#[test]
fn path_segments_are_encoded() {
    assert_eq!(encode_segment("my-app_1"), "my-app_1");
    assert_eq!(encode_segment("a/../b c"), "a%2F..%2Fb%20c");
}
