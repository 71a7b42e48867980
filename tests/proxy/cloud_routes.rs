//! The cloud proxy's routes and detached creates, through the real binary and the emulators:
//!
//! - Every spelling of a Daytona create the service accepts (`/api/sandbox`, the deprecated
//!   `/api/workspace`, any ASCII case of the prefix and the collection, a trailing `/`) is
//!   stamped and claimed: after the owner's SIGKILL nothing it created is left. A POST to a
//!   sandbox collection path the proxy does not know how to stamp is refused with a
//!   `sandguard:` message and never reaches the emulator.
//! - An E2B create whose metadata asks `sandguard.detached: "true"` is journaled as a detach:
//!   it survives its owner, while the plain one beside it is reclaimed.

use std::time::Duration;

use crate::proxy::cloud::{first_line, guarded, kill, DAYTONA_KEY, E2B_KEY};
use crate::support::daytona::Daytona;
use crate::support::{cloud_config, e2b, eventually, Scratch};

/// POSTs every path in `$CREATES` and `$UNKNOWN` (JSON lists, relative to the proxy's origin)
/// with a small labelled body; prints what each answered, then waits to be killed.
const DAYTONA_ROUTES: &str = r#"
import json, os, time, urllib.request, urllib.error

base = os.environ["DAYTONA_API_URL"]
origin = base[: -len("/api")]

def post(path):
    req = urllib.request.Request(origin + path, data=b'{"labels": {"app": "mine"}}', method="POST",
                                 headers={"Authorization": "Bearer " + os.environ["DAYTONA_API_KEY"],
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return [r.status, r.read().decode()]
    except urllib.error.HTTPError as e:
        return [e.code, e.read().decode()]

out = {"session": os.environ["SANDGUARD_SESSION"], "base": base}
for name in ("CREATES", "UNKNOWN"):
    out[name] = {p: post(p) for p in json.loads(os.environ[name])}
print(json.dumps(out), flush=True)
time.sleep(600)
"#;

/// The spellings Express routes to a create: each collection under each prefix, in several
/// ASCII cases, every other one with a trailing `/`.
fn daytona_create_paths() -> Vec<String> {
    fn spellings(word: &str) -> Vec<String> {
        let alternating: String = word
            .chars()
            .enumerate()
            .map(|(i, c)| match i % 2 {
                0 => c.to_ascii_uppercase(),
                _ => c,
            })
            .collect();
        let mut capital = word.to_string();
        capital[..1].make_ascii_uppercase();
        vec![
            word.to_string(),
            word.to_ascii_uppercase(),
            capital,
            alternating,
        ]
    }
    let mut paths = Vec::new();
    for collection in ["sandbox", "workspace"] {
        for prefix in ["api", "API", "Api"] {
            for spelled in spellings(collection) {
                let slash = if paths.len() % 2 == 1 { "/" } else { "" };
                paths.push(format!("/{prefix}/{spelled}{slash}"));
            }
        }
    }
    paths
}

/// POSTs to sandbox collection paths the service has no create at: refused, never forwarded.
const UNKNOWN: [&str; 6] = [
    "/api/sandboxes",
    "/api/Workspaces",
    "/api/sandbox/new",
    "/API/WORKSPACE/from-snapshot",
    "/api/sandbox-v2",
    "/api/Sandbox/x/Fork",
];

#[test]
fn every_daytona_create_route_is_stamped_and_claimed_and_unknown_ones_are_refused() {
    let s = Scratch::new("tpr-daytona");
    let config = cloud_config(&s, "");
    let cloud = Daytona::start(DAYTONA_KEY);
    let stranger = cloud.insert(&[("app", "x")]);
    let url = cloud.api_url();
    let creates = daytona_create_paths();
    let creates_json = serde_json::to_string(&creates).unwrap();
    let unknown_json = serde_json::to_string(&UNKNOWN).unwrap();
    let env = [
        ("DAYTONA_API_KEY", DAYTONA_KEY),
        ("DAYTONA_API_URL", url.as_str()),
        ("CREATES", creates_json.as_str()),
        ("UNKNOWN", unknown_json.as_str()),
    ];
    let mut child = guarded(&s, &config, &env, &["run", "--cloud-proxy"], DAYTONA_ROUTES)
        .spawn()
        .unwrap();
    let said = first_line(&mut child);
    let session = said["session"].as_str().unwrap().to_string();
    let mut faults = Vec::new();
    let mut ids = Vec::new();
    for path in &creates {
        let answer = &said["CREATES"][path];
        let body: serde_json::Value =
            serde_json::from_str(answer[1].as_str().unwrap_or("")).unwrap_or_default();
        match (answer[0].as_u64(), body["id"].as_str()) {
            (Some(200), Some(id)) => ids.push((path.clone(), id.to_string())),
            _ => faults.push(format!("{path}: not created: {answer}")),
        }
    }
    for (path, id) in &ids {
        let labels = cloud.labels(id).unwrap_or_default();
        if labels.get("sandguard.session") != Some(&session) {
            faults.push(format!("{path}: {id} is not stamped: {labels:?}"));
        }
    }
    let hits = cloud.hits();
    for path in UNKNOWN {
        let answer = &said["UNKNOWN"][path];
        let message = answer[1].as_str().unwrap_or("");
        if answer[0] != 400 || !message.contains("sandguard:") {
            faults.push(format!("{path}: not refused by sandguard: {answer}"));
        }
        if hits.iter().any(|h| h.path == path) {
            faults.push(format!("{path}: reached the emulator"));
        }
    }

    kill(child);
    let left = || {
        ids.iter()
            .filter(|(_, id)| cloud.is_live(id))
            .map(|(path, id)| format!("{path} made {id}"))
            .collect::<Vec<_>>()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !left().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    for what in left() {
        faults.push(format!("{what}, still there after the owner's SIGKILL"));
    }
    assert!(cloud.is_live(&stranger), "a stranger's sandbox was removed");
    assert!(
        faults.is_empty(),
        "{} failed:\n{}",
        faults.len(),
        faults.join("\n")
    );
}

const E2B_DETACHED: &str = r#"
import json, os, time
from e2b import Sandbox

kept = Sandbox.create(metadata={"app": "keep", "sandguard.detached": "true"}).sandbox_id
gone = Sandbox.create(metadata={"app": "plain"}).sandbox_id
print(json.dumps({"kept": kept, "gone": gone, "session": os.environ["SANDGUARD_SESSION"]}), flush=True)
time.sleep(600)
"#;

#[test]
fn an_e2b_create_asking_to_be_detached_survives_its_owner() {
    let s = Scratch::new("tpr-e2b-detached");
    let config = cloud_config(&s, "");
    let (emu, state) = e2b::start(E2B_KEY);
    let env = [("E2B_API_KEY", E2B_KEY), ("E2B_API_URL", emu.url.as_str())];
    let mut child = guarded(&s, &config, &env, &["run", "--cloud-proxy"], E2B_DETACHED)
        .spawn()
        .unwrap();
    let said = first_line(&mut child);
    let (kept, gone) = (
        said["kept"].as_str().unwrap(),
        said["gone"].as_str().unwrap(),
    );
    let journal = s
        .path()
        .join("state/sandguard/sessions")
        .join(format!("{}.journal", said["session"].as_str().unwrap()));
    let metadata = state.get(kept).map(|sb| sb.metadata).unwrap_or_default();
    assert!(
        metadata.contains_key("sandguard.session"),
        "the detached create is stamped like any other: {metadata:?}"
    );

    kill(child);
    let read = || std::fs::read_to_string(&journal).unwrap_or_default();
    eventually(Duration::from_secs(20), "the reclaim ended", || {
        read().contains(r#""ev":"end""#)
    });
    assert!(!state.exists(gone), "the plain sandbox is reclaimed");
    assert!(
        state.exists(kept),
        "the sandbox created detached was removed; journal:\n{}",
        read()
    );
}
