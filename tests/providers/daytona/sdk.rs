//! The vendor's `daytona` SDK (0.226.1) against the emulator, beside sandguard: both must see
//! the same sandboxes, and a TTL the SDK sets is the expiry `ps` shows.
//!
//! Calls exercised: `Daytona()` from the environment (`DAYTONA_API_KEY`, `DAYTONA_API_URL`),
//! `Daytona.list(ListSandboxesQuery(labels=…))` (`GET /api/sandbox?labels=<JSON>`, following
//! `nextCursor`), `Sandbox.set_ttl(minutes)` (`POST /api/sandbox/{id}/ttl/{minutes}`),
//! `Daytona.get(id)` (`GET /api/sandbox/{id}`) and `Sandbox.delete()`
//! (`DELETE /api/sandbox/{id}`).
//!
//! Not emulated: the SDK's event stream. `Daytona()` opens a Socket.IO websocket to
//! `/api/socket.io/` on a background thread (its token inside the Socket.IO handshake, the
//! organisation as a query parameter) and ignores its failure: the events only speed up the
//! SDK's own waits for a state. The emulator has no Socket.IO server and turns the upgrade
//! away (401: no `Authorization` header); none of the calls above waits on events
//! (`delete()` is called without `wait=True`).

use std::time::Duration;

use super::super::{session_id, Config, Rig};
use super::KEY;
use crate::support::daytona::Daytona;
use crate::support::{eventually, json, sdk};

/// Ids (sorted) and `autoDestroyAt` by id, as one SDK run prints them.
const SCRIPT: &str = r#"
import json, os
from daytona import Daytona, ListSandboxesQuery

d = Daytona()
query = ListSandboxesQuery(labels={"sandguard.session": os.environ["SESSION"]})
found = list(d.list(query))
if os.environ.get("ACT") == "ttl":
    for s in found:
        s.set_ttl(45)
if os.environ.get("ACT") == "delete":
    for s in found:
        s.delete()
print(json.dumps({s.id: d.get(s.id).auto_destroy_at for s in found}))
"#;

fn sdk(rig: &Rig<Daytona>, session: &str, act: &str) -> serde_json::Value {
    let url = rig.cloud.api_url();
    let out = sdk::ok(
        SCRIPT,
        &[
            ("DAYTONA_API_KEY", KEY),
            ("DAYTONA_API_URL", &url),
            ("DAYTONA_TARGET", ""),
            ("SESSION", session),
            ("ACT", act),
        ],
    );
    json(out.lines().last().unwrap_or_default())
}

/// `ps --json`'s sandboxes of `session`: id → `expires_at`.
fn ps(rig: &Rig<Daytona>, session: &str) -> serde_json::Map<String, serde_json::Value> {
    let out = rig.run(&["ps", "--json", "--provider", "daytona"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    json(&out.stdout)["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["session"] == session)
        .map(|s| {
            (
                s["instance_id"].as_str().unwrap().to_string(),
                s["expires_at"].clone(),
            )
        })
        .collect()
}

fn ids(map: &serde_json::Map<String, serde_json::Value>) -> Vec<String> {
    let mut ids: Vec<String> = map.keys().cloned().collect();
    ids.sort();
    ids
}

#[test]
fn the_sdk_and_sandguard_see_the_same_sandboxes_and_the_same_ttl() {
    let rig = Rig::<Daytona>::new(Config::deadline(3));
    let session = session_id();
    let mut mine = rig.many(&session, 3);
    mine.sort();
    let stranger = rig.stranger();
    let other = rig.many(&session_id(), 1);

    let listed = sdk(&rig, &session, "list");
    let listed = listed.as_object().unwrap();
    assert_eq!(ids(listed), mine, "the SDK's label filter");
    assert_eq!(ids(&ps(&rig, &session)), mine);

    let renewed = sdk(&rig, &session, "ttl");
    let seen = ps(&rig, &session);
    assert_eq!(ids(&seen), mine);
    let now = sandguard::testing::timefmt::now_unix();
    for id in &mine {
        let at = renewed[id].as_str().expect("the SDK reads the TTL it set");
        let at = sandguard::testing::timefmt::parse_rfc3339(at).unwrap();
        assert!((at - (now + 45 * 60)).abs() <= 60, "{at} vs {now}");
        assert_eq!(
            seen[id].as_str(),
            Some(sandguard::testing::timefmt::format_rfc3339(at).as_str()),
            "ps shows the TTL the SDK set"
        );
    }

    sdk(&rig, &session, "delete");
    eventually(Duration::from_secs(5), "the deletions land", || {
        mine.iter().all(|id| !rig.cloud.is_live(id))
    });
    assert!(sdk(&rig, &session, "list").as_object().unwrap().is_empty());
    assert!(ps(&rig, &session).is_empty());
    assert!(rig.cloud.is_live(&stranger) && rig.cloud.is_live(&other[0]));
}
