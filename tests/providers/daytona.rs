//! Daytona in the conformance suite: the adapter for `support/daytona.rs` (labels are sandbox
//! labels, a bearer key, 200 a page, deletion that takes a moment), and Daytona's quirks: the
//! legacy bare-array listing, a delete refused with 409 while a start lands, the renewal's
//! own calls (activity, auto-stop, auto-delete), and the emulator's contract itself.

use std::process::Command;
use std::time::Duration;

use super::{session_id, Cloud, Config, Rig, Support};
use crate::support::daytona::Daytona;
use crate::support::emu::{Faults, Hit};
use crate::support::eventually;
use sandguard::labels::SESSION;

const KEY: &str = "dtn_0123456789abcdef0123456789abcdef";

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

    fn configure(&self, cmd: &mut Command) {
        cmd.env("DAYTONA_API_KEY", KEY)
            .env("DAYTONA_API_URL", self.api_url())
            .env_remove("DAYTONA_SERVER_URL");
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

    /// Daytona's TTL is its idle auto-stop: the last activity plus the interval.
    fn expires_at(&self, id: &str) -> Option<i64> {
        let (auto_stop, _) = self.intervals(id)?;
        Some(self.last_activity_ms(id)? / 1000 + auto_stop * 60)
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

#[test]
fn renew_marks_activity_and_sets_an_idle_autostop_with_delete_on_stop() {
    use sandguard::config::Secret;
    use sandguard::labels::Selector;
    use sandguard::providers::daytona::DaytonaProvider;
    use sandguard::providers::{Provider, ProviderError};

    let emu = Daytona::start(KEY);
    let session = session_id();
    let id = emu.insert(&[(SESSION, &session)]);
    assert_eq!(emu.intervals(&id), Some((15, -1)));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let p = DaytonaProvider::new(&Secret::new(KEY), &emu.api_url(), Duration::from_secs(5))
            .unwrap();
        let listed = p.list(&Selector::session(&session)).await.unwrap();
        assert_eq!(listed.len(), 1);
        let sandbox = &listed[0];
        let before = emu.last_activity_ms(&id).unwrap();
        p.renew(sandbox, Duration::from_secs(90)).await.unwrap();
        assert_eq!(emu.intervals(&id), Some((2, 0)));
        assert!(emu.last_activity_ms(&id).unwrap() > before);
        p.remove(sandbox).await.unwrap();
        assert!(matches!(
            p.remove(sandbox).await,
            Err(ProviderError::Transient { .. })
        ));
        eventually(Duration::from_secs(3), "the deletion completes", || {
            emu.intervals(&id).is_none()
        });
        assert!(matches!(
            p.renew(sandbox, Duration::from_secs(60)).await,
            Err(ProviderError::Gone(_))
        ));
        assert!(matches!(
            p.remove(sandbox).await,
            Err(ProviderError::Gone(_))
        ));
    });
    let posts: Vec<String> = emu
        .hits()
        .into_iter()
        .filter(|h| h.method == "POST")
        .map(|h| format!("{} {}", h.status, h.path))
        .collect();
    assert_eq!(
        posts,
        [
            format!("201 /api/sandbox/{id}/last-activity"),
            format!("201 /api/sandbox/{id}/autostop/2"),
            format!("201 /api/sandbox/{id}/autodelete/0"),
            format!("404 /api/sandbox/{id}/last-activity"),
            format!("404 /api/sandbox/{id}/autostop/1"),
        ]
    );
}

/// The emulator itself keeps Daytona's contract: what the driver relies on, and the errors it
/// must never trigger.
#[test]
fn the_emulator_speaks_daytona() {
    let emu = Daytona::start(KEY);
    for _ in 0..3 {
        emu.insert(&[(SESSION, "s")]);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let http = reqwest::Client::new();
        let get = |query: &'static str, key: &'static str| {
            let url = format!("{}/sandbox{query}", emu.api_url());
            let req = http.get(url).bearer_auth(key);
            async move {
                let r = req.send().await.unwrap();
                let status = r.status().as_u16();
                let headers = r.headers().clone();
                (
                    status,
                    headers,
                    r.json::<serde_json::Value>().await.unwrap(),
                )
            }
        };
        let (status, _, body) = get("", "dtn_wrong").await;
        assert_eq!((status, body["statusCode"].as_i64()), (401, Some(401)));
        let (status, _, body) = get("?labels=%7Bnope", KEY).await;
        assert_eq!(status, 400);
        assert_eq!(body["message"], "Invalid labels JSON format");
        assert_eq!(get("?limit=201", KEY).await.0, 400);
        assert_eq!(get("?cursor=zz", KEY).await.0, 400);

        let (status, _, page) = get("?limit=2", KEY).await;
        assert_eq!(status, 200);
        assert_eq!(page["items"].as_array().unwrap().len(), 2);
        let cursor = page["nextCursor"].as_str().unwrap().to_string();
        let url = format!("{}/sandbox", emu.api_url());
        let last: serde_json::Value = http
            .get(&url)
            .bearer_auth(KEY)
            .query(&[("limit", "2"), ("cursor", &cursor)])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(last["items"].as_array().unwrap().len(), 1);
        assert!(last["nextCursor"].is_null());

        let (status, _, body) = get("/nope", KEY).await;
        assert_eq!(status, 404);
        assert_eq!(body["message"], "Sandbox with ID or name nope not found");

        // A 429 names the throttler of its route, never a plain Retry-After.
        emu.set_faults(Faults {
            throttle_rate: 1.0,
            retry_after_secs: 2,
            ..Faults::default()
        });
        let (status, headers, _) = get("", KEY).await;
        assert_eq!(status, 429);
        assert_eq!(headers["retry-after-authenticated"], "2");
        assert!(headers.get("retry-after").is_none());
        let r = http
            .delete(format!("{url}/x"))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 429);
        assert_eq!(r.headers()["retry-after-sandbox-lifecycle"], "2");
    });
}
