//! The Daytona emulator's own contract: what the driver relies on, the errors it must never
//! trigger, and the lifecycle and auth rules the driver's decisions rest on.

use std::time::Duration;

use reqwest::Method;

use super::{bearer, call, JWT, KEY};
use crate::support::daytona::{Daytona, ORGANIZATION};
use crate::support::emu::Faults;
use crate::support::eventually;
use sandguard::labels::SESSION;
use sandguard::testing::timefmt::parse_rfc3339;

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

/// Daytona's lifecycle as the emulator plays it (providers.md and its 2026-12 corrections):
/// auto-delete 0 deletes a sandbox at its stop; a plain stop stops, and a stopped sandbox
/// without TTL or auto-delete stays; the TTL is set, listed, re-anchored and cleared through
/// `/ttl`, and destroys a sandbox when it passes even if it is stopped; auto-stop and
/// auto-delete run on minutes of the emulated clock.
#[test]
fn the_emulator_keeps_daytonas_lifecycle() {
    let emu = Daytona::start(KEY);
    let key = bearer(KEY);
    let auth = [("authorization", key.as_str())];
    let post = |path: String| call(&emu, Method::POST, &path, &auth);
    let minutes = |m: u64| Duration::from_secs(m * 60);

    let ephemeral = emu.insert_without_ttl(&[("app", "x")]);
    assert_eq!(post(format!("/sandbox/{ephemeral}/autodelete/0")).0, 201);
    let (status, body) = post(format!("/sandbox/{ephemeral}/stop"));
    assert_eq!((status, body["state"].as_str()), (200, Some("started")));
    eventually(
        Duration::from_secs(3),
        "an ephemeral sandbox is deleted at its stop",
        || emu.state_of(&ephemeral).is_none(),
    );

    let kept = emu.insert_without_ttl(&[("app", "x")]);
    assert_eq!(post(format!("/sandbox/{kept}/stop")).0, 200);
    assert_eq!(post(format!("/sandbox/{kept}/stop")).0, 409, "stopping");
    eventually(Duration::from_secs(3), "the stop lands", || {
        emu.state_of(&kept).as_deref() == Some("stopped")
    });
    let (status, body) = post(format!("/sandbox/{kept}/stop"));
    assert_eq!(status, 400);
    assert_eq!(body["message"], "Sandbox is not in a stoppable state");
    emu.advance(Duration::from_secs(24 * 3600));
    assert_eq!(
        emu.state_of(&kept).as_deref(),
        Some("stopped"),
        "nothing ends it"
    );

    let (status, body) = post(format!("/sandbox/{kept}/ttl/30"));
    assert_eq!(status, 200);
    let at = parse_rfc3339(body["autoDestroyAt"].as_str().unwrap()).unwrap();
    assert!((at - (emu.clock_ms() / 1000 + 1800)).abs() <= 1, "{at}");
    let (_, page) = call(&emu, Method::GET, "/sandbox", &auth);
    let item = &page["items"][0];
    assert_eq!(
        (item["id"].as_str(), item["state"].as_str()),
        (Some(kept.as_str()), Some("stopped"))
    );
    assert_eq!(item["autoDestroyAt"], body["autoDestroyAt"]);
    let (_, none) = call(
        &emu,
        Method::GET,
        "/sandbox?autoDestroyAtBefore=2000-01-01T00:00:00Z",
        &auth,
    );
    assert_eq!(none["items"].as_array().unwrap().len(), 0);
    let (_, cleared) = post(format!("/sandbox/{kept}/ttl/0"));
    assert!(cleared["autoDestroyAt"].is_null());
    assert_eq!(post(format!("/sandbox/{kept}/ttl/-1")).0, 400);
    assert_eq!(post(format!("/sandbox/{kept}/ttl/x")).0, 400);
    assert_eq!(post(format!("/sandbox/{kept}/ttl/30")).0, 200);
    emu.advance(minutes(29));
    assert_eq!(emu.state_of(&kept).as_deref(), Some("stopped"));
    emu.advance(minutes(2));
    eventually(
        Duration::from_secs(3),
        "the TTL destroys a stopped sandbox",
        || emu.state_of(&kept).is_none(),
    );

    let idle = emu.insert_without_ttl(&[("app", "x")]);
    assert_eq!(post(format!("/sandbox/{idle}/autodelete/10")).0, 201);
    emu.advance(minutes(16));
    assert_eq!(emu.state_of(&idle).as_deref(), Some("stopped"), "auto-stop");
    emu.advance(minutes(11));
    eventually(
        Duration::from_secs(3),
        "auto-delete after ten stopped minutes",
        || emu.state_of(&idle).is_none(),
    );
}

/// A user's JWT is let in only with its organisation in `X-Daytona-Organization-ID`: without
/// it, or with another, the organisation guard answers 403 "Invalid authentication context".
#[test]
fn the_emulator_takes_a_jwt_only_with_its_organization() {
    let emu = Daytona::start(KEY);
    emu.set_jwt(JWT, ORGANIZATION);
    emu.insert(&[(SESSION, "s")]);
    let jwt = bearer(JWT);
    let get = |headers: &[(&str, &str)]| call(&emu, Method::GET, "/sandbox", headers);
    let (status, body) = get(&[("authorization", &jwt)]);
    assert_eq!(status, 403);
    assert_eq!(body["message"], "Invalid authentication context");
    let (status, _) = get(&[
        ("authorization", &jwt),
        ("x-daytona-organization-id", "org-other"),
    ]);
    assert_eq!(status, 403);
    let (status, page) = get(&[
        ("authorization", &jwt),
        ("x-daytona-organization-id", ORGANIZATION),
    ]);
    assert_eq!(status, 200);
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    assert_eq!(get(&[("authorization", "Bearer eyJnope")]).0, 401);
}
