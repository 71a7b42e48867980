//! E2B in the conformance suite: the adapter for `support/e2b.rs` (labels are sandbox
//! metadata, `X-API-Key`, 100 a page), then E2B's own quirks: the base URL from
//! `E2B_DOMAIN`, the `Should-Retry` header, the thrice-decoded `metadata` filter, rate limits
//! kept per route template, and the vendor's SDK (`e2b` 2.63.0) against the same emulator.

use std::io::{Read, Write};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{session_id, Cloud, Config, Rig, Support};
use crate::support::e2b::{self, State};
use crate::support::emu::{Bucket, Emulator, Faults, Hit};
use crate::support::{json, sdk, unique};
use sandguard::labels::SESSION;

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

/// `EXPIRES` is E2B's `endAt` for a running sandbox (the suite checks it), and none for a
/// paused one: E2B keeps a paused sandbox until it is deleted, whatever `endAt` it lists.
#[test]
fn a_paused_sandbox_has_no_expiry() {
    let rig = Rig::<E2b>::new(Config::deadline(3));
    let session = session_id();
    let (running, paused) = (rig.labelled(&session), rig.labelled(&session));
    rig.cloud.state.pause(&paused);
    let out = rig.run(&["ps", "--json", "--provider", "e2b"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = json(&out.stdout);
    let listed = |id: &str| -> serde_json::Value {
        v["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["instance_id"] == id)
            .unwrap_or_else(|| panic!("{id} not listed: {v}"))
            .clone()
    };
    let end = rig.cloud.state.get(&running).unwrap().end_at;
    let end = sandguard::testing::timefmt::format_rfc3339(end);
    assert_eq!(listed(&running)["expires_at"], end.as_str(), "{v}");
    assert_eq!(listed(&paused)["status"], "paused", "{v}");
    assert_eq!(
        listed(&paused)["expires_at"],
        serde_json::Value::Null,
        "{v}"
    );
}

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

/// With `E2B_DOMAIN` alone (no `E2B_API_URL`), the driver goes to `https://api.<domain>`, as
/// the SDK does; it once went to `https://api.e2b.app` whatever the domain. No network is
/// needed: `example.test` resolves nowhere, and `providers` names the URL it failed to reach.
#[test]
fn e2b_domain_alone_names_the_api_host() {
    let rig = Rig::<E2b>::new(Config::deadline(3));
    let mut cmd = rig.cmd();
    cmd.env_remove("E2B_API_URL")
        .env("E2B_DOMAIN", "example.test")
        .args(["providers"]);
    let out = crate::support::run(&mut cmd);
    let text = format!("{}{}", out.stdout, out.stderr);
    assert!(
        text.contains("https://api.example.test/v2/sandboxes"),
        "{text}"
    );
    assert!(!text.contains("e2b.app"), "{text}");
    assert!(rig.cloud.hits().is_empty(), "the emulator was not named");
}

/// `Should-Retry: false` makes an answer final whatever its status, as the SDK reads it: a
/// 503 so marked is not retried, neither a removal (the sandbox is left, and reported) nor a
/// listing page. Before, both were retried as any 503.
#[test]
fn should_retry_false_on_a_5xx_is_not_retried() {
    let rig = Rig::<E2b>::new(Config::deadline(5));
    let session = session_id();
    let id = rig.labelled(&session);
    rig.cloud.state.answer_next("DELETE", 503, Some("false"));
    let out = rig.stop_session(&session);
    let deletes = |hits: &[Hit]| hits.iter().filter(|h| h.method == "DELETE").count();
    assert_eq!(
        deletes(&rig.cloud.hits()),
        1,
        "{}{}",
        out.stdout,
        out.stderr
    );
    assert!(rig.cloud.exists(&id), "a removal not proven is not done");
    assert_ne!(out.code, 0, "{}", out.stdout);
    assert!(
        format!("{}{}", out.stdout, out.stderr).contains("Should-Retry: false"),
        "{}{}",
        out.stdout,
        out.stderr
    );

    let before = rig.cloud.hits().len();
    rig.cloud.state.answer_next("GET", 503, Some("false"));
    let out = rig.run(&["ps", "--json"]);
    assert_eq!(rig.cloud.hits().len() - before, 1, "{}", out.stdout);
    assert_ne!(out.code, 0);
    assert_eq!(json(&out.stdout)["errors"][0]["provider"], "e2b");
}

/// `Should-Retry: true` makes any answer worth retrying: a 400 so marked is retried (it was
/// final), and a 404 so marked proves nothing gone (it was taken for "already gone").
#[test]
fn should_retry_true_is_retried_even_on_a_4xx() {
    let rig = Rig::<E2b>::new(Config::deadline(5));
    let session = session_id();
    let id = rig.labelled(&session);
    rig.cloud.state.answer_next("DELETE", 400, Some("true"));
    rig.cloud.state.answer_next("DELETE", 404, Some(" True"));
    let out = rig.run(&[
        "stop",
        "--all",
        "--provider",
        "e2b",
        "--session",
        &session,
        "--json",
    ]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let v = json(&out.stdout);
    assert_eq!(v["results"][0]["outcome"], "removed", "{v}");
    assert_eq!(v["results"][0]["attempts"], 3, "{v}");
    assert!(!rig.cloud.exists(&id));
}

/// The `metadata` filter reaches the service as the SDK sends it (encoded three times, see
/// the driver's doc), byte for byte, so a session selects exactly its sandboxes, never one
/// whose label holds `=`, `&`, `%` or a space beside it. Encoded twice, as before, the
/// service refused a session holding such characters ("Error parsing metadata"). A session
/// id is `[0-9a-z_-]` now, the same for every command, so `--session` can no longer
/// carry them; the driver's unit test of `metadata_filter` still encodes them.
#[test]
fn the_metadata_filter_is_encoded_as_the_sdk_does() {
    let rig = Rig::<E2b>::new(Config::deadline(3));
    let session = "s_1-t";
    let mine = [rig.labelled(session), rig.labelled(session)];
    // Each would match if the filter were cut short or taken apart at `=`, `&` or `%`.
    let others = [
        rig.labelled("s_1"),
        rig.labelled("s_1-t&u"),
        rig.labelled("s_1-t=u"),
        rig.labelled("s_1-t%"),
        rig.labelled("s_1-t u"),
        rig.stranger(),
    ];
    let out = rig.stop_session(session);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(rig.all_gone(&mine), "{}", out.stdout);
    assert!(rig.all_exist(&others));
    // What e2b 2.63.0 sends for `SandboxQuery(metadata={"sandguard.session": session})`.
    assert_eq!(
        rig.cloud.state.metadata_on_the_wire(),
        ["sandguard.session%3Ds_1-t"]
    );
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

/// The vendor's SDK (`e2b` 2.63.0) against the emulator, beside `sandguard ps --json`: both
/// see the same sandboxes (the SDK listing by metadata, its filter on the wire equal byte for
/// byte to sandguard's), the SDK reads one
/// (`get_info`) and sets a timeout on it (`set_timeout`, seen in the emulator's `endAt`), and
/// kills them all (`kill`, then `False` for one already gone); after that neither sees any.
///
/// Not exercised, because they cannot work against an emulator of the REST API alone:
/// `Sandbox.create`, `Sandbox.connect` and everything inside a sandbox (commands, files,
/// `is_running`) talk to envd, the daemon inside each sandbox at
/// `https://49983-<id>.<domain>`, which the emulator does not run (nor `POST /sandboxes`:
/// sandguard never creates). The SDK is pointed at the emulator with `E2B_API_URL`, which it
/// still honours (deprecated); `E2B_DOMAIN` would make it `https://api.<domain>`, which a
/// plain-HTTP emulator on a port cannot serve, and `E2B_DEBUG` means `http://localhost:3000`.
#[test]
fn the_sdk_and_sandguard_see_the_same_sandboxes() {
    let rig = Rig::<E2b>::new(Config::deadline(3));
    let session = "sdk_s-1";
    let mine = [
        rig.labelled(session),
        rig.labelled(session),
        rig.labelled(session),
    ];
    let stranger = rig.stranger();
    let url = rig.cloud.emu.url.clone();
    // One script, three steps (`STEP`): list; read and set a timeout; kill.
    let script = format!(
        r#"
import json, os
from e2b import Sandbox
from e2b.sandbox.sandbox_api import SandboxQuery

def listed():
    query = SandboxQuery(metadata={{"{SESSION}": {session:?}}})
    pages = Sandbox.list(query=query, limit=2)
    found = []
    while pages.has_next:
        found += pages.next_items()
    return sorted(s.sandbox_id for s in found)

step, out = os.environ["STEP"], {{}}
out["listed"] = ids = listed()
if step == "touch":
    info = Sandbox.get_info(ids[0])
    out["info"] = [info.sandbox_id, info.metadata["{SESSION}"], info.state.value]
    Sandbox.set_timeout(ids[0], 3600)
if step == "kill":
    out["killed"] = [Sandbox.kill(i) for i in ids]
    out["again"] = Sandbox.kill(ids[0])
    out["after"] = listed()
print(json.dumps(out))
"#
    );
    let sdk = |step: &str| {
        let env = [
            ("E2B_API_URL", url.as_str()),
            ("E2B_API_KEY", KEY),
            ("STEP", step),
        ];
        json(&sdk::ok(&script, &env))
    };
    let ps = || {
        let out = rig.run(&["ps", "--json"]);
        assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
        let mut ids: Vec<String> = json(&out.stdout)["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["instance_id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    };
    let mut expected = mine.to_vec();
    expected.sort();

    let seen = sdk("list");
    assert_eq!(seen["listed"], serde_json::json!(expected));
    assert_eq!(ps(), expected);
    // sandguard's filter for the session, beside the SDK's (two pages of two).
    let dry = rig.run(&[
        "stop",
        "--all",
        "--provider",
        "e2b",
        "--session",
        session,
        "--dry-run",
    ]);
    assert_eq!(dry.code, 0, "{}{}", dry.stdout, dry.stderr);
    let wire = rig.cloud.state.metadata_on_the_wire();
    assert_eq!(wire.len(), 3, "{wire:?}");
    assert!(wire.iter().all(|w| *w == wire[0]), "{wire:?}");

    let touched = sdk("touch");
    let first = &expected[0];
    assert_eq!(
        touched["info"],
        serde_json::json!([first, session, "running"])
    );
    let end_at = rig.cloud.state.get(first).unwrap().end_at;
    let now = sandguard::testing::timefmt::now_unix();
    assert!(
        (now + 3590..=now + 3600).contains(&end_at),
        "{end_at} {now}"
    );

    let done = sdk("kill");
    assert_eq!(done["listed"], serde_json::json!(expected));
    assert_eq!(done["killed"], serde_json::json!([true, true, true]));
    assert_eq!(done["again"], false);
    assert_eq!(done["after"], serde_json::json!([]));
    assert!(rig.all_gone(&mine));
    assert!(rig.cloud.exists(&stranger));
    assert_eq!(ps(), Vec::<String>::new());
}

/// A `stop --all` against E2B's limiter (a token bucket per route: 20 calls a second, burst
/// 10) backs off instead of hammering it: every sandbox removed, no call before its
/// Retry-After, and few calls turned away. At a fixed 16 in flight, each 1-second pause
/// (E2B's smallest `Retry-After`) ends with 16 calls into a bucket of 10, so over a third of
/// the calls are 429s; the per-provider pace (`src/reclaim/pace.rs`) halves what it sends on a
/// 429 and then learns the rate the bucket lets through.
#[test]
fn a_stop_at_the_rate_limit_backs_off_instead_of_hammering_it() {
    let rig = Rig::<E2b>::new(Config::deadline(60));
    let session = session_id();
    let mine = rig.many(&session, 120);
    rig.cloud.set_faults(Faults {
        bucket: Some(Bucket {
            rate: 20.0,
            burst: 10,
        }),
        ..Faults::default()
    });
    let out = rig.stop_session(&session);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(rig.all_gone(&mine), "{}", out.stdout);
    let hits = rig.cloud.hits();
    let throttled = hits.iter().filter(|h| h.status == 429).count();
    assert!(throttled > 0, "the limiter never turned a call away");
    assert!(
        hits.iter().all(|h| !h.early),
        "a call came before its Retry-After"
    );
    assert!(
        throttled * 100 < hits.len() * 15,
        "{throttled} of {} calls were throttled (goal: under 15 %)",
        hits.len()
    );
}

/// `[providers.e2b] rate = 5`: calls are spaced to at most five a second from the first one,
/// listing included, though the provider would take more.
#[test]
fn a_rate_in_config_caps_the_calls_a_second() {
    let rig = Rig::<E2b>::new(Config {
        rate: Some(5.0),
        ..Config::deadline(30)
    });
    let session = session_id();
    let mine = rig.many(&session, 15);
    let out = rig.stop_session(&session);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(rig.all_gone(&mine), "{}", out.stdout);
    let at: Vec<Instant> = rig.cloud.hits().iter().map(|h| h.at).collect();
    assert!(at.len() >= 16, "a listing and 15 removals: {}", at.len());
    // In any second, at most 5 calls, and one more at the very edge of the window.
    for (i, first) in at.iter().enumerate() {
        let within = at[i..]
            .iter()
            .take_while(|t| t.duration_since(*first) < Duration::from_secs(1))
            .count();
        assert!(within <= 6, "{within} calls within a second of call {i}");
    }
    let span = at[at.len() - 1].duration_since(at[0]);
    assert!(
        span >= Duration::from_millis(2800),
        "{} calls in {span:?}: faster than 5 a second",
        at.len()
    );
}
