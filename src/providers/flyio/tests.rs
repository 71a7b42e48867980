//! Unit tests of `flyio`.

use super::lease::LEASE_MARGIN;
use super::wire::Machine;
use super::*;
use crate::providers::http::classify;
use reqwest::StatusCode;

fn settings(token: Option<&str>, app: Option<&str>) -> CloudSettings {
    CloudSettings {
        token: token.map(Secret::new),
        secret: None,
        url: "http://127.0.0.1:1".into(),
        app: app.map(str::to_string),
        timeout: Duration::from_secs(1),
        rate: None,
    }
}

/// An error as the shared layer makes it for an answer with `status`.
fn answered(status: u16, message: &str) -> ProviderError {
    classify(
        StatusCode::from_u16(status).unwrap(),
        None,
        format!("flyio: x: {message} (HTTP {status})"),
    )
}

#[test]
fn entries_say_what_is_missing() {
    let reason = |s: &CloudSettings| match entry(s).state {
        EntryState::Unconfigured(r) => r,
        EntryState::Configured(_) => "configured".into(),
    };
    assert!(reason(&settings(None, Some("a"))).starts_with("FLY_API_TOKEN is not set"));
    assert!(reason(&settings(Some("t"), None)).starts_with("FLY_APP_NAME is not set"));
    assert!(reason(&settings(None, None)).contains("FLY_API_TOKEN and FLY_APP_NAME"));
    assert_eq!(reason(&settings(Some("t"), Some("a"))), "configured");
    assert!(reason(&settings(Some(" FlyV1 "), Some("a"))).contains("holds no token"));
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
    assert!(lease::is_lease_conflict(m));
    let expiry = lease_expiry_in(m).unwrap();
    assert_eq!(
        crate::timefmt::format_rfc3339(expiry),
        "2026-08-14T09:57:35Z"
    );
    assert_eq!(lease_expiry_in("expires at never (HTTP 409)"), None);
    assert!(lease_wait(m, b"").is_some());
    assert_eq!(lease_wait("flyio: x: machine busy (HTTP 409)", b""), None);
}

#[tokio::test]
async fn statuses_come_from_the_error_not_its_text() {
    let fly = FlyProvider::new(&Secret::new("fo1_t"), "a", &settings(None, None)).unwrap();
    let m = "aborted: machine ID x lease currently held by o, expires at 2000-01-01T00:00:00Z";
    let lease = fly.explain(answered(409, m), "x").await;
    assert_eq!(lease.status(), Some(409));
    assert!(matches!(
        lease,
        ProviderError::Transient { retry_after: Some(w), .. } if w == LEASE_MARGIN
    ));
    // The same words with another status, or none, are not a lease.
    let text_only = ProviderError::transient(format!("{m} (HTTP 409)"));
    assert!(matches!(
        fly.explain(text_only, "x").await,
        ProviderError::Transient {
            retry_after: None,
            ..
        }
    ));
    let throttled = fly.explain(answered(429, "rate limit exceeded"), "x").await;
    assert!(matches!(
        throttled,
        ProviderError::Transient { retry_after: Some(w), .. } if w == DEFAULT_THROTTLE_WAIT
    ));
    let gone = fly.explain(answered(404, "machine not found"), "x").await;
    assert!(matches!(gone, ProviderError::Gone(_)));
    let wrong_app = fly.explain(answered(404, "app not found"), "x").await;
    assert!(matches!(wrong_app, ProviderError::Fatal(_)));
}

#[test]
fn a_stop_refused_for_the_machines_state_falls_through_but_a_lease_does_not() {
    assert!(stop_refused_for_its_state(&answered(
        409,
        "unable to stop machine, not currently started"
    )));
    assert!(stop_refused_for_its_state(&answered(
        412,
        "failed_precondition: not started"
    )));
    assert!(!stop_refused_for_its_state(&answered(
        409,
        "aborted: machine ID x lease currently held by o"
    )));
    assert!(!stop_refused_for_its_state(&answered(503, "unavailable")));
    assert!(!stop_refused_for_its_state(&answered(429, "slow down")));
    assert!(!stop_refused_for_its_state(&answered(
        404,
        "machine not found"
    )));
}

#[test]
fn a_machine_still_stopping_is_transient_and_keeps_its_412() {
    let e = still_stopping(answered(412, "failed_precondition: not currently stopped"));
    assert_eq!(e.status(), Some(412));
    assert!(matches!(
        e,
        ProviderError::Transient {
            retry_after: None,
            ..
        }
    ));
    assert!(
        e.to_string().ends_with("not stopped yet after 4 tries"),
        "{e}"
    );
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
    assert_eq!(encode_segment("my-app_1").unwrap(), "my-app_1");
    assert_eq!(encode_segment("a..b c").unwrap(), "a..b%20c");
    assert!(
        encode_segment("a/../b").is_err(),
        "a '/' is refused, never encoded"
    );
}
