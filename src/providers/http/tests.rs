//! Unit tests of `http`.

use super::*;
use reqwest::StatusCode;

#[test]
fn retry_after_reads_seconds_dates_and_named_throttlers() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777 - 10);
    let mut h = HeaderMap::new();
    h.insert("retry-after", HeaderValue::from_static("7"));
    assert_eq!(retry_after(&h, now), Some(Duration::from_secs(7)));
    h.insert(
        "retry-after",
        HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"),
    );
    assert_eq!(retry_after(&h, now), Some(Duration::from_secs(10)));
    let mut h = HeaderMap::new();
    h.insert("retry-after-authenticated", HeaderValue::from_static("2"));
    h.insert(
        "retry-after-sandbox-lifecycle",
        HeaderValue::from_static("5"),
    );
    h.insert(
        "x-ratelimit-reset-sandbox-lifecycle",
        HeaderValue::from_static("99"),
    );
    assert_eq!(retry_after(&h, now), Some(Duration::from_secs(5)));
    assert_eq!(retry_after(&HeaderMap::new(), now), None);
}

#[test]
fn statuses_are_classified() {
    let c = |s: u16| classify(StatusCode::from_u16(s).unwrap(), None, String::new());
    assert!(matches!(c(404), ProviderError::Gone(_)));
    for s in [408, 409, 429, 500, 502, 503, 504] {
        assert!(matches!(c(s), ProviderError::Transient { .. }), "{s}");
    }
    for s in [400, 401, 403, 422] {
        assert!(matches!(c(s), ProviderError::Fatal(_)), "{s}");
    }
}

#[test]
fn error_bodies_become_one_line() {
    assert_eq!(
        error_message(br#"{"code":404,"message":"Sandbox \"x\" doesn't exist"}"#),
        "Sandbox \"x\" doesn't exist"
    );
    assert_eq!(
        error_message(br#"{"error":"machine not found"}"#),
        "machine not found"
    );
    assert_eq!(
        error_message(b"<html>\nBad Gateway</html>"),
        "<html>Bad Gateway</html>"
    );
    assert_eq!(error_message(b""), "no details");
}

#[test]
fn secrets_are_redacted() {
    let http = Http::new(
        "e2b",
        "http://127.0.0.1:1",
        Duration::from_secs(1),
        vec![("x-api-key", Secret::new("e2b_deadbeef"))],
    )
    .unwrap();
    assert_eq!(
        http.redact("key e2b_deadbeef refused"),
        "key [redacted] refused"
    );
}

#[tokio::test]
async fn the_walk_follows_tokens_and_refuses_a_stuck_one() {
    let pages = walk("t", |token| async move {
        Ok(match token.as_deref() {
            None => (vec![1, 2], Some("a".to_string())),
            Some("a") => (vec![3], Some("b".to_string())),
            _ => (vec![4], None),
        })
    })
    .await
    .unwrap();
    assert_eq!(pages, vec![1, 2, 3, 4]);
    let stuck = walk("t", |_| async { Ok((vec![1], Some("same".to_string()))) }).await;
    assert!(matches!(stuck, Err(ProviderError::Fatal(_))));
}

#[test]
fn should_retry_decides_alone_when_present() {
    let answer = |status: u16, header: Option<&'static str>| {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("3"));
        if let Some(v) = header {
            h.insert("should-retry", HeaderValue::from_static(v));
        }
        let status = StatusCode::from_u16(status).unwrap();
        should_retry(
            &h,
            classify(status, Some(Duration::from_secs(3)), "m".into()),
        )
    };
    let transient = |e: &ProviderError| matches!(e, ProviderError::Transient { .. });
    // Absent: the status decides.
    assert!(transient(&answer(503, None)));
    assert!(matches!(answer(400, None), ProviderError::Fatal(_)));
    // `false` (or anything but `true`) on a retryable status: final, and saying why.
    for v in ["false", "FALSE", "no", ""] {
        match answer(503, Some(v)) {
            ProviderError::Fatal(d) => {
                assert_eq!(d.status, Some(503));
                assert!(d.message.contains("Should-Retry: false"), "{}", d.message);
            }
            other => panic!("{v:?}: {other:?}"),
        }
    }
    assert!(matches!(
        answer(429, Some("false")),
        ProviderError::Fatal(_)
    ));
    assert!(matches!(answer(404, Some("false")), ProviderError::Gone(_)));
    // `true`, trimmed and in any case, on anything: retried, with the answer's wait; a 404
    // that may be retried proves nothing gone.
    for (status, v) in [(400, "true"), (404, " True "), (401, "TRUE"), (503, "true")] {
        match answer(status, Some(v)) {
            ProviderError::Transient {
                message,
                retry_after,
            } => {
                assert_eq!(message.status, Some(status));
                assert_eq!(retry_after, Some(Duration::from_secs(3)));
            }
            other => panic!("{status} {v:?}: {other:?}"),
        }
    }
}

/// Issue 22, defence in depth: whatever a caller passed, no request leaves with a path
/// segment that is empty or a dot segment (plain or percent-encoded), and no segment put in a
/// path is empty, `.` or `..` or carries a `/`.
#[test]
fn a_path_with_an_empty_or_dot_segment_is_refused_before_anything_is_sent() {
    for seg in ["", ".", "..", "a/b", "/", "../x"] {
        assert!(
            matches!(encode_segment(seg), Err(ProviderError::Refused(_))),
            "{seg:?}"
        );
    }
    assert_eq!(encode_segment("..a").unwrap(), "..a");
    assert_eq!(encode_segment("%2e%2e").unwrap(), "%252e%252e");

    let http = Http::new(
        "t",
        "http://127.0.0.1:1/api",
        Duration::from_secs(1),
        vec![],
    )
    .unwrap();
    for path in [
        "/sandbox/",
        "/sandbox/.",
        "/sandbox/..",
        "/v1/apps/app/machines/../stop",
        "/v1/apps/app/machines/./x",
        "/sandbox//x",
        "/",
        "/sandbox/%2e%2e",
        "/sandbox/.%2E",
        "/sandbox/%2E?x=1",
        "/a/../?kill=true",
        "sandbox/x",
    ] {
        match http.request(Method::DELETE, path) {
            Err(ProviderError::Refused(m)) => assert!(m.starts_with("t: refusing"), "{m}"),
            other => panic!("{path:?} was not refused: {other:?}"),
        }
    }
    for path in [
        "/sandbox/x",
        "/v2/sandboxes?metadata=a%3D.",
        "/a/..b/c.d",
        "/sandbox/x?a=/../",
    ] {
        assert!(http.request(Method::GET, path).is_ok(), "{path}");
    }
}
