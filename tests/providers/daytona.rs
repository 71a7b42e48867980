//! Daytona in the conformance suite: the adapter for `support/daytona.rs` (labels are sandbox
//! labels, a bearer key or a JWT with its organisation, 200 a page, deletion that takes a
//! moment), and Daytona's quirks: the legacy bare-array listing, a delete refused with 409
//! while a start lands, renewal through the absolute TTL (never auto-delete), JWT auth, the
//! emulator's contract itself (`emulator.rs`) and the vendor's SDK against it (`sdk.rs`).

use std::process::Command;
use std::time::Duration;

use super::{session_id, Cloud, Config, Rig, Support};
use crate::support::daytona::{Credential, Daytona, ORGANIZATION};
use crate::support::emu::{Faults, Hit};
use crate::support::{eventually, json, run};
use sandguard::labels::SESSION;

mod emulator;
mod renew;
mod sdk;

const KEY: &str = "dtn_0123456789abcdef0123456789abcdef";
/// A user's token, shaped as Daytona's (RS256 JWT).
const JWT: &str =
    "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1c2VyLTEifQ.c2lnbmF0dXJlLXNlY3JldA";

impl Cloud for Daytona {
    const NAME: &'static str = "daytona";
    const PAGE: Option<usize> = Some(200);
    const UNAUTHORIZED: &'static str = "HTTP 401";
    const RUNNING: &'static str = "started";
    const IMAGE: &'static str = "daytonaio/sandbox:0.4.3";
    const CREDENTIAL_VAR: &'static str = "DAYTONA_API_KEY";
    const DROPPED_CONNECTIONS: Support = Support::Yes;
    const SERVER_TTL: Support = Support::Yes;

    fn start() -> Daytona {
        Daytona::start(KEY)
    }

    /// The API key; the JWT and its organisation instead when the emulator takes one.
    fn configure(&self, cmd: &mut Command) {
        cmd.env("DAYTONA_API_URL", self.api_url())
            .env_remove("DAYTONA_SERVER_URL");
        match self.jwt() {
            None => cmd
                .env("DAYTONA_API_KEY", KEY)
                .env_remove("DAYTONA_JWT_TOKEN")
                .env_remove("DAYTONA_ORGANIZATION_ID"),
            Some((token, org)) => cmd
                .env_remove("DAYTONA_API_KEY")
                .env("DAYTONA_JWT_TOKEN", token)
                .env("DAYTONA_ORGANIZATION_ID", org),
        };
    }

    fn wrong_credential(cmd: &mut Command) -> &'static str {
        let wrong = "dtn_wrongwrongwrongwrongwrongwrong";
        cmd.env("DAYTONA_API_KEY", wrong);
        wrong
    }

    fn secrets() -> &'static [&'static str] {
        &[KEY]
    }

    fn detail(&self) -> String {
        format!("daytona API at {}", self.api_url())
    }

    fn insert(&self, labels: &[(&str, &str)]) -> String {
        Daytona::insert(self, labels)
    }

    /// Neither destroying nor destroyed.
    fn exists(&self, id: &str) -> bool {
        self.is_live(id)
    }

    fn set_faults(&self, faults: Faults) {
        self.emu.set_faults(faults);
    }

    fn hits(&self) -> Vec<Hit> {
        self.emu.hits()
    }

    fn is_listing(hit: &Hit) -> bool {
        hit.method == "GET" && hit.path == "/api/sandbox"
    }

    /// Daytona's TTL is `autoDestroyAt`: destroyed then, whatever the state.
    fn expires_at(&self, id: &str) -> Option<i64> {
        self.auto_destroy_ms(id).map(|ms| ms / 1000)
    }
}

conformance!(Daytona; dropped_connections, server_ttl);

#[test]
fn the_legacy_bare_array_is_understood() {
    let rig = Rig::<Daytona>::new(Config::deadline(3));
    rig.cloud.set_legacy(true);
    let session = session_id();
    let mine = rig.many(&session, 250);
    let stranger = rig.stranger();
    let out = rig.run(&["ps", "--json", "--provider", "daytona"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let mut listed: Vec<String> = crate::support::json(&out.stdout)["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["instance_id"].as_str().unwrap().to_string())
        .collect();
    listed.sort();
    let mut want = mine.clone();
    want.sort();
    assert_eq!(listed, want);
    let out = rig.stop_session(&session);
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert_eq!(rig.cloud.live(), vec![stranger]);
}

#[test]
fn a_delete_refused_while_a_start_lands_is_retried() {
    let rig = Rig::<Daytona>::new(Config::deadline(3));
    let busy = rig
        .cloud
        .insert_busy(&[(SESSION, &session_id())], Duration::from_millis(600));
    let out = rig.run(&["stop", "--json", &busy]);
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert!(!rig.cloud.is_live(&busy));
    let conflicts = rig.cloud.hits().iter().filter(|h| h.status == 409).count();
    assert!(
        conflicts >= 1,
        "the emulator should have answered 409 first"
    );
}

/// One request to the emulator, as a user's own client would send it; the status and body.
fn call(
    emu: &Daytona,
    method: reqwest::Method,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, serde_json::Value) {
    let url = format!("{}{path}", emu.api_url());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut req = reqwest::Client::new().request(method, url);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        let body = r.json().await.unwrap_or(serde_json::Value::Null);
        (status, body)
    })
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// Through the real binary: the sidecar's TTL keeper renews a live owner's sandbox through
/// Daytona's absolute TTL (`/ttl/N`, N = grace + 2 × renew_every in minutes, rounded up) and
/// never sets auto-delete. So when the user stops the sandbox on purpose, it stays, stopped,
/// while its owner lives; before 2026-12 the keeper set auto-delete to 0 and Daytona deleted
/// the sandbox at that stop. `ps` shows `autoDestroyAt` as the expiry.
#[test]
fn a_live_owners_sandbox_is_renewed_by_ttl_and_survives_a_stop_on_purpose() {
    let grace = Duration::from_secs(2 * 3600);
    let rig = Rig::<Daytona>::new(Config {
        deadline: Duration::from_secs(3),
        renewal: Some((grace, Duration::from_secs(1))),
        rate: None,
    });
    let (owner, ids) = rig.owner_with(1);
    let id = &ids[0];
    let hits = || rig.cloud.hits();
    // A keeper round lists the session, then renews what it found.
    let rounds = || {
        hits()
            .iter()
            .filter(|h| h.method == "GET" && h.path == "/api/sandbox")
            .count()
    };
    let renewed = || {
        hits()
            .iter()
            .any(|h| h.method == "POST" && h.path.starts_with(&format!("/api/sandbox/{id}/")))
    };
    eventually(Duration::from_secs(15), "the keeper renews", renewed);

    // The user stops it on purpose, and it stays, stopped, round after round.
    let (status, _) = call(
        &rig.cloud,
        reqwest::Method::POST,
        &format!("/sandbox/{id}/stop"),
        &[("authorization", &bearer(KEY))],
    );
    assert_eq!(status, 200);
    eventually(Duration::from_secs(5), "the stop lands", || {
        !matches!(
            rig.cloud.state_of(id).as_deref(),
            Some("started" | "stopping")
        )
    });
    let stopped = || rig.cloud.state_of(id);
    assert_eq!(
        stopped().as_deref(),
        Some("stopped"),
        "a live owner's sandbox was deleted when its user stopped it"
    );
    let before = rounds();
    eventually(Duration::from_secs(15), "two more renewal rounds", || {
        rounds() >= before + 2
    });
    assert_eq!(stopped().as_deref(), Some("stopped"));

    // Renewed through the absolute TTL, to grace + 2 s in whole minutes; auto-delete never.
    let renewal = format!("/api/sandbox/{id}/ttl/121");
    assert!(
        hits().iter().any(|h| h.path == renewal && h.status == 200),
        "no {renewal}"
    );
    let ttl = rig.cloud.auto_destroy_ms(id).unwrap() / 1000;
    assert!(ttl >= sandguard::testing::timefmt::now_unix() + grace.as_secs() as i64);
    assert_eq!(
        rig.cloud.intervals(id),
        Some((15, -1)),
        "auto-delete untouched"
    );
    assert!(
        !hits().iter().any(|h| h.path.contains("/autodelete/")),
        "auto-delete must never be set on a live owner's sandbox"
    );

    let out = rig.run(&["ps", "--json", "--provider", "daytona"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let listed = json(&out.stdout);
    let sb = listed["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["instance_id"] == id.as_str())
        .expect("ps lists the sandbox")
        .clone();
    assert_eq!(sb["status"], "stopped");
    let expiry =
        sandguard::testing::timefmt::format_rfc3339(rig.cloud.auto_destroy_ms(id).unwrap() / 1000);
    assert_eq!(sb["expires_at"], expiry.as_str());
    let out = rig.run(&["ps", "--provider", "daytona"]);
    assert!(
        out.stdout.lines().next().unwrap().contains("EXPIRES"),
        "{}",
        out.stdout
    );
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with(id.as_str()))
        .unwrap();
    assert!(line.contains("in 2h0"), "{line}");
    drop(owner);
}

/// A JWT works with its organisation, for listing and removal alike (every request carries
/// `X-Daytona-Organization-ID`, or the emulator would refuse it with 403). A JWT without one
/// is a configuration error that names the missing variable, sends nothing and never
/// prints the token. With both an API key and a JWT, the key wins, as in the SDK.
#[test]
fn a_jwt_works_with_its_organization_and_alone_is_refused_clearly() {
    let emu = Daytona::start(KEY);
    emu.set_jwt(JWT, ORGANIZATION);
    let rig = Rig::around(emu, Config::deadline(3));
    let session = session_id();
    let mut mine = rig.many(&session, 3);
    mine.sort();
    let stranger = rig.stranger();
    let out = rig.run(&["ps", "--json", "--provider", "daytona"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let mut listed: Vec<String> = json(&out.stdout)["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["instance_id"].as_str().unwrap().to_string())
        .collect();
    listed.sort();
    assert_eq!(listed, mine);
    let out = rig.run(&["providers"]);
    assert!(
        out.stdout.contains(&format!("organization {ORGANIZATION}")),
        "{}",
        out.stdout
    );
    let out = rig.stop_session(&session);
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert_eq!(rig.cloud.live(), vec![stranger]);
    let seen = rig.cloud.credentials();
    assert!(
        !seen.is_empty() && seen.iter().all(|c| *c == Credential::Jwt),
        "{seen:?}"
    );
    assert!(rig.cloud.hits().iter().all(|h| h.status < 400));

    let sent = rig.cloud.hits().len();
    let mut alone = rig.cmd();
    alone.env_remove("DAYTONA_ORGANIZATION_ID");
    let out = run(alone.args(["ps", "--provider", "daytona"]));
    assert_eq!(out.code, 2, "{} {}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("DAYTONA_ORGANIZATION_ID"),
        "{}",
        out.stderr
    );
    for text in [&out.stdout, &out.stderr] {
        assert!(
            !text.contains(JWT) && !text.contains("c2lnbmF0dXJl"),
            "{text}"
        );
    }
    assert_eq!(rig.cloud.hits().len(), sent, "nothing is sent");

    let mut both = rig.cmd();
    both.env("DAYTONA_API_KEY", KEY);
    let out = run(both.args(["ps", "--provider", "daytona"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(rig.cloud.credentials().last(), Some(&Credential::ApiKey));
}
