//! E2B in the conformance suite: the adapter for `support/e2b.rs` (labels are sandbox
//! metadata, `X-API-Key`, 100 a page), then the emulator's own fidelity: the thrice-decoded
//! `metadata` filter and rate limits kept per route template.

use std::io::{Read, Write};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Cloud, Support};
use crate::support::e2b::{self, State};
use crate::support::emu::{Bucket, Emulator, Faults, Hit};
use crate::support::unique;

const KEY: &str = "e2b_0123456789abcdef0123456789abcdef";

pub struct E2b {
    emu: Emulator,
    state: Arc<State>,
}

impl Cloud for E2b {
    const NAME: &'static str = "e2b";
    const PAGE: Option<usize> = Some(100);
    const UNAUTHORIZED: &'static str = "HTTP 401";
    const RUNNING: &'static str = "running";
    const IMAGE: &'static str = "base";
    const CREDENTIAL_VAR: &'static str = "E2B_API_KEY";
    const DROPPED_CONNECTIONS: Support = Support::Yes;
    const SERVER_TTL: Support = Support::Yes;

    fn start() -> E2b {
        let (emu, state) = e2b::start(KEY);
        E2b { emu, state }
    }

    fn configure(&self, cmd: &mut Command) {
        cmd.env("E2B_API_KEY", KEY)
            .env("E2B_API_URL", &self.emu.url);
    }

    fn wrong_credential(cmd: &mut Command) -> &'static str {
        let wrong = "e2b_fedcba9876543210fedcba9876543210";
        cmd.env("E2B_API_KEY", wrong);
        wrong
    }

    fn secrets() -> &'static [&'static str] {
        &[KEY]
    }

    fn detail(&self) -> String {
        format!("E2B API at {}", self.emu.url)
    }

    fn insert(&self, labels: &[(&str, &str)]) -> String {
        let id = format!("i{}", unique());
        self.state.insert(&id, labels);
        id
    }

    fn exists(&self, id: &str) -> bool {
        self.state.exists(id)
    }

    fn set_faults(&self, faults: Faults) {
        self.emu.set_faults(faults);
    }

    fn hits(&self) -> Vec<Hit> {
        self.emu.hits()
    }

    fn is_listing(hit: &Hit) -> bool {
        hit.method == "GET" && hit.path == "/v2/sandboxes"
    }

    fn expires_at(&self, id: &str) -> Option<i64> {
        self.state.get(id).map(|sb| sb.end_at)
    }
}

conformance!(E2b; dropped_connections, server_ttl);

/// One request straight to the emulator, as a client that knows nothing of Retry-After would
/// send it: (status, headers with lower-case names, body).
fn raw(emu: &Emulator, method: &str, target: &str) -> (u16, Vec<(String, String)>, String) {
    let addr = emu.url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "{method} {target} HTTP/1.1\r\nhost: {addr}\r\nx-api-key: {KEY}\r\ncontent-length: 0\r\n\r\n"
    )
    .unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, body.to_string())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn ids(list: &serde_json::Value) -> Vec<String> {
    let mut ids: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sandboxID"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

/// The emulator reads `metadata` as the service does: gin drops a parameter that does not
/// decode (so the listing is unfiltered), `parseFilters` refuses a pair without exactly one
/// `=` after its second decoding, and an empty filter.
#[test]
fn the_emulator_reads_the_metadata_filter_as_the_service_does() {
    let (emu, state) = e2b::start(KEY);
    state.insert("a", &[("k", "a=b")]);
    state.insert("b", &[("k", "v")]);
    let list = |query: &str| {
        let (status, _, body) = raw(&emu, "GET", &format!("/v2/sandboxes?{query}"));
        (
            status,
            serde_json::from_str::<serde_json::Value>(&body).unwrap(),
        )
    };
    // The SDK's encoding of {"k": "a=b"}.
    let (status, body) = list("metadata=k%3Da%25253Db");
    assert_eq!((status, ids(&body)), (200, vec!["a".to_string()]));
    // Encoded once too few times: `a=b` splits into three parts.
    let (status, body) = list("metadata=k%3Da%253Db");
    assert_eq!(
        (status, body["message"].as_str()),
        (400, Some("Error parsing metadata"))
    );
    for refused in [
        "metadata=",
        "metadata=k",
        "metadata=k%3Dv%26",
        "metadata=k%3D%2525zz",
    ] {
        let (status, body) = list(refused);
        assert_eq!(status, 400, "{refused}: {body}");
    }
    // Not decodable by gin: dropped, so everything is listed.
    for dropped in ["metadata=k%3Dv%zz", "metadata=k%3Dv;x"] {
        let (status, body) = list(dropped);
        assert_eq!((status, ids(&body).len()), (200, 2), "{dropped}");
    }
    let (status, body) = list("metadata=k%3Dv&metadata=k%3Dv");
    assert_eq!(status, 400, "{body}");
}

/// The service keys its rate limit by route template (gin's `c.FullPath()`), not by sandbox:
/// after a 429 for one sandbox, a request for any other sandbox on that route is early too.
/// The emulator once kept a bucket per sandbox, so a client ignoring Retry-After across
/// sandboxes passed.
#[test]
fn a_429_holds_back_the_route_for_every_sandbox() {
    let (emu, state) = e2b::start(KEY);
    state.insert("a", &[]);
    emu.set_faults(Faults {
        throttle_rate: 1.0,
        retry_after_secs: 5,
        ..Faults::default()
    });
    let (status, headers, _) = raw(&emu, "DELETE", "/sandboxes/a");
    assert_eq!((status, header(&headers, "retry-after")), (429, Some("5")));
    emu.set_faults(Faults::default());
    // Past what could have been in flight when the 429 was sent.
    std::thread::sleep(Duration::from_millis(150));
    raw(&emu, "DELETE", "/sandboxes/b");
    raw(&emu, "GET", "/sandboxes/c");
    raw(&emu, "GET", "/v2/sandboxes");
    let early: Vec<(String, bool)> = emu
        .hits()
        .iter()
        .map(|h| (format!("{} {}", h.method, h.path), h.early))
        .collect();
    assert_eq!(
        early,
        [
            ("DELETE /sandboxes/a".to_string(), false),
            ("DELETE /sandboxes/b".to_string(), true),
            ("GET /sandboxes/c".to_string(), true),
            ("GET /v2/sandboxes".to_string(), false),
        ]
    );
}

/// The token-bucket fault answers as E2B's limiter: per route template, a request over the
/// bucket gets 429 with `Retry-After` (the wait rounded down, at least 1) and the
/// `RateLimit-*` headers; another route has its own bucket; the bucket refills.
#[test]
fn the_token_bucket_answers_as_the_service_s_limiter() {
    let (emu, state) = e2b::start(KEY);
    state.insert("a", &[]);
    emu.set_faults(Faults {
        bucket: Some(Bucket {
            rate: 0.4,
            burst: 2,
        }),
        ..Faults::default()
    });
    let started = Instant::now();
    assert_eq!(raw(&emu, "GET", "/sandboxes/a").0, 200);
    assert_eq!(raw(&emu, "DELETE", "/sandboxes/b").0, 404);
    let (status, headers, body) = raw(&emu, "DELETE", "/sandboxes/a");
    assert_eq!(status, 429, "{body}");
    // 2.5 s until a token is back: `Retry-After: 2`; 5 s until the bucket is full.
    for (name, value) in [
        ("retry-after", "2"),
        ("ratelimit-limit", "2"),
        ("ratelimit-remaining", "0"),
        ("ratelimit-reset", "5"),
    ] {
        assert_eq!(header(&headers, name), Some(value), "{name}");
    }
    assert_eq!(raw(&emu, "GET", "/v2/sandboxes").0, 200, "its own bucket");
    assert!(started.elapsed() < Duration::from_secs(2));
    std::thread::sleep(Duration::from_millis(2600) - started.elapsed());
    assert_eq!(raw(&emu, "DELETE", "/sandboxes/a").0, 204);
    assert_eq!(state.count(), 0);
    let statuses: Vec<u16> = emu.hits().iter().map(|h| h.status).collect();
    assert_eq!(statuses, [200, 404, 429, 200, 204]);
}
