//! A state the Engine API's schema does not have, as Podman's compatible API answers it for a
//! moment: the listing is asked again rather than failed (src/providers/docker/list.rs).

use std::sync::{Arc, Mutex};

use super::engine;
use crate::support::*;
use sandguard::labels::SESSION;

/// Podman lists a container as `stopped` between the end of its process and its clean-up.
/// That listing did not parse (bollard knows the Engine API's states only), so `ps`, `stop`
/// and the sweep failed on every container of the engine at that moment ("unknown variant
/// `stopped`"), as the rootless Podman layer of tests/run.sh once saw. Through the binary,
/// against a fake daemon whose first listing says `stopped` and whose next says `exited`:
/// `ps` lists the session's container, having asked twice.
#[test]
fn a_container_podman_lists_as_stopped_for_a_moment_does_not_fail_the_listing() {
    let s = Scratch::new("td-stopped");
    let session = format!("td{}", unique());
    let id = "5".repeat(64);
    let image = format!("sha256:{}", "6".repeat(64));
    let listings = Arc::new(Mutex::new(0u32));
    let (seen, sess, cid, img) = (listings.clone(), session.clone(), id.clone(), image.clone());
    let handler = move |req: &engine::Request| -> (u16, String) {
        let parts: Vec<&str> = req.path.trim_start_matches('/').split('/').collect();
        match (req.method.as_str(), parts.as_slice()) {
            ("GET", ["version"]) => (
                200,
                r#"{"ApiVersion":"1.41","Version":"5.4.2-fake"}"#.into(),
            ),
            ("GET", ["_ping"]) => (200, "OK".into()),
            ("GET", ["containers", "json"]) => {
                let mut n = seen.lock().unwrap();
                *n += 1;
                let state = if *n == 1 { "stopped" } else { "exited" };
                let container = serde_json::json!({
                    "Id": cid, "Names": ["/td-stopped"], "Image": "sandguard-test/busybox",
                    "ImageID": img, "Command": "sleep 1", "Created": 1_700_000_000,
                    "State": state, "Status": "Exited (0) 1 second ago",
                    "Labels": { SESSION: sess },
                });
                (200, serde_json::Value::from(vec![container]).to_string())
            }
            ("GET", ["images", _, "json"]) => (
                200,
                serde_json::json!({ "Id": img, "Config": { "Labels": {} } }).to_string(),
            ),
            ("GET", ["networks"]) => (200, "[]".into()),
            ("GET", ["volumes"]) => (200, r#"{"Volumes":[],"Warnings":[]}"#.into()),
            _ => (
                404,
                serde_json::json!({ "message": "page not found" }).to_string(),
            ),
        }
    };
    let host = engine::serve(&s.path().join("docker.sock"), Arc::new(handler));

    let out =
        run(sandguard(&s)
            .env("DOCKER_HOST", &host)
            .args(["ps", "--session", &session, "--json"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let listed = json(&out.stdout);
    let listed = listed["sandboxes"]
        .as_array()
        .expect("ps --json lists sandboxes");
    assert!(
        listed.len() == 1
            && listed[0]["instance_id"] == id.as_str()
            && listed[0]["status"] == "exited",
        "ps did not list the session's container: {}",
        out.stdout
    );
    assert!(*listings.lock().unwrap() >= 2);
}
