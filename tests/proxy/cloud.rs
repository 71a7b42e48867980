//! The cloud API proxy (`run --cloud-proxy`, `[watch] cloud_proxy = true`), through the real
//! binary, the project's E2B and Daytona emulators and the vendors' own Python SDKs (`e2b`,
//! `daytona`; see `support::sdk`): the guarded scripts are plain SDK code, with no sandguard
//! import and no labels of sandguard's, and reach the emulators only through the proxy.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::daytona::Daytona;
use crate::support::{cloud_config, e2b, eventually, json, sandguard, sdk, Scratch};

pub(crate) const E2B_KEY: &str = "e2b_c10dc10dc10dc10dc10dc10dc10dc10d";
pub(crate) const DAYTONA_KEY: &str = "dtn_c10dc10dc10dc10dc10dc10dc10dc10d";

/// The SDKs' own variables, none of which may leak in from the test's environment.
const SDK_VARS: [&str; 8] = [
    "E2B_API_KEY",
    "E2B_DOMAIN",
    "E2B_API_URL",
    "DAYTONA_API_KEY",
    "DAYTONA_API_URL",
    "DAYTONA_SERVER_URL",
    "DAYTONA_JWT_TOKEN",
    "DAYTONA_ORGANIZATION_ID",
];

/// `sandguard ARGS -- python -c SCRIPT` with `config` and `env` (the emulators' URLs and keys).
pub(crate) fn guarded(
    s: &Scratch,
    config: &Path,
    env: &[(&str, &str)],
    args: &[&str],
    script: &str,
) -> Command {
    let mut cmd = sandguard(s);
    for var in SDK_VARS {
        cmd.env_remove(var);
    }
    cmd.env("SANDGUARD_CONFIG", config)
        .env("HOME", s.path())
        .envs(env.iter().copied())
        .args(args)
        .arg("--")
        .arg(sdk::python())
        .args(["-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// The first line the guarded script prints (JSON), leaving it running.
pub(crate) fn first_line(child: &mut Child) -> serde_json::Value {
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    if line.trim().is_empty() {
        let _ = child.kill();
        let mut err = String::new();
        let _ = child.stderr.as_mut().unwrap().read_to_string(&mut err);
        panic!("the guarded script said nothing; its stderr:\n{err}");
    }
    json(&line)
}

/// SIGKILL to the guarded program (the wrapper exec'd into it: same pid); its stderr.
pub(crate) fn kill(mut child: Child) -> String {
    crate::watch::wrapper::unsafe_kill(child.id() as i32, libc::SIGKILL);
    let _ = child.wait();
    let mut err = String::new();
    let _ = child.stderr.as_mut().unwrap().read_to_string(&mut err);
    err
}

/// Every file under `dir`, read whole, must not hold `secret`.
fn assert_nowhere(dir: &Path, secret: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            assert_nowhere(&path, secret);
        } else if let Ok(bytes) = std::fs::read(&path) {
            let text = String::from_utf8_lossy(&bytes);
            assert!(
                !text.contains(secret),
                "{} holds the API key",
                path.display()
            );
        }
    }
}

/// Reads the session's journal right after each create returns: the claim must be there.
const E2B_AGENT: &str = r#"
import glob, json, os, time
from e2b import Sandbox

session = os.environ["SANDGUARD_SESSION"]
journal = glob.glob(os.path.join(os.environ["XDG_STATE_HOME"], "**", session + ".journal"), recursive=True)[0]
ids, journaled = [], []
for metadata in ({"app": "mine", "sandguard.session": "forged"}, None):
    sandbox = Sandbox.create(metadata=metadata)
    ids.append(sandbox.sandbox_id)
    journaled.append(sandbox.sandbox_id in open(journal).read())
print(json.dumps({"ids": ids, "journaled": journaled, "session": session,
                  "url": os.environ["E2B_API_URL"]}), flush=True)
time.sleep(600)
"#;

#[test]
fn an_unmodified_e2b_agent_killed_leaves_no_sandbox_and_never_leaks_its_key() {
    let s = Scratch::new("cloud-proxy-e2b");
    let config = cloud_config(&s, "");
    let (emu, state) = e2b::start(E2B_KEY);
    state.insert("stranger", &[("app", "x")]);
    state.insert(
        "other-session",
        &[("sandguard.session", "someoneelse0000"), ("app", "x")],
    );
    let env = [("E2B_API_KEY", E2B_KEY), ("E2B_API_URL", emu.url.as_str())];
    let mut child = guarded(&s, &config, &env, &["run", "--cloud-proxy"], E2B_AGENT)
        .spawn()
        .unwrap();
    let said = first_line(&mut child);
    let ids: Vec<String> = serde_json::from_value(said["ids"].clone()).unwrap();
    let session = said["session"].as_str().unwrap().to_string();
    assert_eq!(said["journaled"], serde_json::json!([true, true]), "{said}");
    assert!(
        said["url"]
            .as_str()
            .unwrap()
            .starts_with("http://127.0.0.1:")
            && said["url"] != emu.url,
        "{said}"
    );
    assert!(ids.iter().all(|id| state.exists(id)));

    let creates = state.creates();
    assert_eq!(creates.len(), 2);
    for created in &creates {
        let key = created.headers.iter().find(|(k, _)| k == "x-api-key");
        assert_eq!(
            key.map(|(_, v)| v.as_str()),
            Some(E2B_KEY),
            "the key passes as it is"
        );
        let body = json(&String::from_utf8_lossy(&created.body));
        assert_eq!(body["metadata"]["sandguard.session"], session.as_str());
        assert!(body["metadata"]["sandguard.owner"].is_string(), "{body}");
        assert_eq!(body["templateID"], "base", "the SDK's own keys are kept");
        // The answer is read for its id: never asked for compressed (httpx asks for gzip).
        assert!(
            created.headers.iter().all(|(k, _)| k != "accept-encoding"),
            "{:?}",
            created.headers
        );
    }
    let first = json(&String::from_utf8_lossy(&creates[0].body));
    assert_eq!(
        first["metadata"]["app"], "mine",
        "the program's other metadata is kept"
    );

    let stderr = kill(child);
    eventually(
        Duration::from_secs(10),
        "every sandbox it created is gone",
        || ids.iter().all(|id| !state.exists(id)),
    );
    assert!(state.exists("stranger") && state.exists("other-session"));
    assert!(!stderr.contains(E2B_KEY), "{stderr}");
    assert_nowhere(s.path(), E2B_KEY);
}

const DAYTONA_AGENT: &str = r#"
import json, os, time
from daytona import Daytona, CreateSandboxFromSnapshotParams

d = Daytona()
ids = []
for labels in ({"app": "mine", "sandguard.session": "forged"}, None):
    ids.append(d.create(CreateSandboxFromSnapshotParams(labels=labels)).id)
print(json.dumps({"ids": ids, "session": os.environ["SANDGUARD_SESSION"],
                  "url": os.environ["DAYTONA_API_URL"]}), flush=True)
time.sleep(600)
"#;

#[test]
fn an_unmodified_daytona_agent_killed_leaves_no_sandbox() {
    let s = Scratch::new("cloud-proxy-daytona");
    let config = cloud_config(&s, "");
    let cloud = Daytona::start(DAYTONA_KEY);
    let stranger = cloud.insert(&[("app", "x")]);
    let other = cloud.insert(&[("sandguard.session", "someoneelse0000")]);
    let url = cloud.api_url();
    let env = [
        ("DAYTONA_API_KEY", DAYTONA_KEY),
        ("DAYTONA_API_URL", url.as_str()),
        ("DAYTONA_TARGET", ""),
    ];
    let mut child = guarded(&s, &config, &env, &["run", "--cloud-proxy"], DAYTONA_AGENT)
        .spawn()
        .unwrap();
    let said = first_line(&mut child);
    let ids: Vec<String> = serde_json::from_value(said["ids"].clone()).unwrap();
    let session = said["session"].as_str().unwrap();
    let proxied = said["url"].as_str().unwrap();
    assert!(
        proxied.starts_with("http://127.0.0.1:") && proxied.ends_with("/api"),
        "{said}"
    );
    let creates = cloud.creates();
    assert_eq!(creates.len(), 2);
    for created in &creates {
        let auth = created.headers.iter().find(|(k, _)| k == "authorization");
        let expected = format!("Bearer {DAYTONA_KEY}");
        assert_eq!(auth.map(|(_, v)| v.as_str()), Some(expected.as_str()));
        let body = json(&String::from_utf8_lossy(&created.body));
        assert_eq!(body["labels"]["sandguard.session"], session, "{body}");
    }
    let first = json(&String::from_utf8_lossy(&creates[0].body));
    assert_eq!(first["labels"]["app"], "mine");

    let stderr = kill(child);
    eventually(
        Duration::from_secs(10),
        "every sandbox it created is gone",
        || ids.iter().all(|id| !cloud.is_live(id)),
    );
    assert!(cloud.is_live(&stranger) && cloud.is_live(&other));
    assert!(!stderr.contains(DAYTONA_KEY), "{stderr}");
    assert_nowhere(s.path(), DAYTONA_KEY);
}

/// Plain HTTP through the proxy and straight to the emulator, side by side.
const RAW: &str = r#"
import json, os, urllib.request, urllib.error

def call(base, method, path, body=None, key=os.environ["E2B_API_KEY"]):
    req = urllib.request.Request(base + path, data=body, method=method,
                                 headers={"X-API-Key": key, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            status, headers, text = r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        status, headers, text = e.code, e.headers, e.read().decode()
    kept = {k.lower(): v for k, v in headers.items() if k.lower() not in ("date", "connection", "keep-alive")}
    return {"status": status, "headers": kept, "body": text}

proxy, direct = os.environ["E2B_API_URL"], os.environ["DIRECT"]
out = {
    "not_json": call(proxy, "POST", "/sandboxes", b"templateID=base"),
    "not_object": call(proxy, "POST", "/v2/sandboxes", b"[1]"),
    "fork": call(proxy, "POST", "/sandboxes/stranger/fork", b"{}"),
    "encoded": call(proxy, "POST", "/v2/%73andboxes", b'{"templateID": "base"}'),
}
for name in ("throttled", "unknown", "bad_key"):
    path = "/sandboxes/none" if name != "throttled" else "/sandboxes/stranger"
    key = "e2b_ffff" if name == "bad_key" else os.environ["E2B_API_KEY"]
    out[name] = [call(base, "GET", path, key=key) for base in (proxy, direct)]
print(json.dumps(out), flush=True)
"#;

#[test]
fn what_cannot_be_stamped_is_refused_and_upstream_errors_pass_unchanged() {
    let s = Scratch::new("cloud-proxy-raw");
    let config = cloud_config(&s, "");
    let (emu, state) = e2b::start(E2B_KEY);
    state.insert("stranger", &[("app", "x")]);
    // The two `throttled` calls (proxied, direct) are the first two GETs: both get the 429.
    state.answer_next("GET", 429, Some("true"));
    state.answer_next("GET", 429, Some("true"));
    let env = [
        ("E2B_API_KEY", E2B_KEY),
        ("E2B_API_URL", emu.url.as_str()),
        ("DIRECT", emu.url.as_str()),
    ];
    let out = guarded(&s, &config, &env, &["run", "--cloud-proxy"], RAW)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = json(stdout.lines().last().unwrap());
    for refused in ["not_json", "not_object", "fork"] {
        assert_eq!(said[refused]["status"], 400, "{refused}: {said}");
        let message = said[refused]["body"].as_str().unwrap();
        assert!(message.contains("cannot stamp"), "{message}");
    }
    // Only the percent-encoded create reached the emulator, stamped.
    let creates = state.creates();
    assert_eq!(creates.len(), 1, "nothing unstampable was passed on");
    let body = json(&String::from_utf8_lossy(&creates[0].body));
    assert!(body["metadata"]["sandguard.session"].is_string(), "{body}");
    assert_eq!(said["encoded"]["status"], 201, "{said}");
    for name in ["throttled", "unknown", "bad_key"] {
        assert_eq!(
            said[name][0], said[name][1],
            "{name}: the proxy changed the answer"
        );
    }
    assert_eq!(said["throttled"][0]["status"], 429);
    assert_eq!(said["throttled"][0]["headers"]["should-retry"], "true");
    assert_eq!(said["unknown"][0]["status"], 404);
    assert_eq!(said["bad_key"][0]["status"], 401);
}

#[test]
fn readmes_agent_is_guarded_by_the_config_alone_and_a_bad_value_names_file_line_and_key() {
    let s = Scratch::new("cloud-proxy-config");
    let (emu, state) = e2b::start(E2B_KEY);
    state.insert("stranger", &[("app", "x")]);
    let env = [("E2B_API_KEY", E2B_KEY), ("E2B_API_URL", emu.url.as_str())];

    // README's agent, as written, under `sandguard --` with the proxy on in the config only.
    let config = cloud_config(&s, "\n[watch]\ncloud_proxy = true\n");
    let agent = crate::cli::readme::block("cloud_agent");
    let mut child = guarded(&s, &config, &env, &[], &agent).spawn().unwrap();
    let mut id = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut id)
        .unwrap();
    let id = id.trim().to_string();
    assert!(state.exists(&id), "{id:?}");
    let created = json(&String::from_utf8_lossy(&state.creates()[0].body));
    assert_eq!(created["metadata"]["task"], "demo");
    assert!(
        created["metadata"]["sandguard.session"].is_string(),
        "{created}"
    );
    kill(child);
    eventually(
        Duration::from_secs(10),
        "the agent's sandbox is gone",
        || !state.exists(&id),
    );
    assert!(state.exists("stranger"));

    let config = cloud_config(&s, "\n[watch]\ncloud_proxy = \"yes\"\n");
    let out = guarded(&s, &config, &env, &[], "print('ran')")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(out.stdout.is_empty(), "the program never ran");
    let at = format!("{}:11: key `watch.cloud_proxy`", config.display());
    assert!(stderr.contains(&at), "{stderr}");
}

#[test]
fn the_cloud_proxy_without_e2b_or_daytona_is_a_clear_error() {
    let s = Scratch::new("cloud-proxy-none");
    let config = cloud_config(&s, "");
    let out = guarded(&s, &config, &[], &["run", "--cloud-proxy"], "print('ran')")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("neither E2B nor Daytona is configured"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "the program never ran");
}

#[test]
fn the_ready_line_carries_one_assignment_per_configured_provider() {
    // The SDK-facing contract (the Python helper reads it): `ready SESSION NAME=VALUE ...`.
    let s = Scratch::new("cloud-proxy-ready");
    let config = cloud_config(&s, "");
    let (emu, _state) = e2b::start(E2B_KEY);
    let cloud = Daytona::start(DAYTONA_KEY);
    let session = format!("cloudready{}", crate::support::unique());
    let daytona = [
        ("DAYTONA_API_KEY", DAYTONA_KEY),
        ("DAYTONA_API_URL", &cloud.api_url()),
    ];
    let (mut watch, line) =
        cloud_sidecar(&s, &config, &emu.url, &daytona, &["--session", &session]);
    crate::watch::wrapper::unsafe_kill(watch.id() as i32, libc::SIGTERM);
    let _ = watch.wait();
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words.len(), 4, "{line:?}");
    assert_eq!(&words[..2], ["ready", session.as_str()]);
    let e2b = words[2]
        .strip_prefix("E2B_API_URL=http://127.0.0.1:")
        .unwrap();
    assert!(e2b.parse::<u16>().is_ok(), "{line:?}");
    let daytona = words[3]
        .strip_prefix("DAYTONA_API_URL=http://127.0.0.1:")
        .unwrap();
    assert!(daytona.ends_with("/api"), "{line:?}");
}

/// `sandguard watch --cloud-proxy` (plus `args`) for an owner that never dies (pid 1), with
/// E2B at `e2b` and `env` besides, and no other SDK variable from the harness; the sidecar
/// and its ready line.
fn cloud_sidecar(
    s: &Scratch,
    config: &Path,
    e2b: &str,
    env: &[(&str, &str)],
    args: &[&str],
) -> (Child, String) {
    let mut cmd = sandguard(s);
    for var in SDK_VARS {
        cmd.env_remove(var);
    }
    let mut watch = cmd
        .env("SANDGUARD_CONFIG", config)
        .env("E2B_API_KEY", E2B_KEY)
        .env("E2B_API_URL", e2b)
        .envs(env.iter().copied())
        .args(["watch", "--cloud-proxy", "--owner-pid", "1"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(watch.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    (watch, line)
}

/// A hand-written upstream on loopback: `GET /events` answers a chunked stream whose second
/// chunk is sent only once the first has come back through the proxy (`gate`); `GET /ws` with
/// `Upgrade` answers `101` and echoes raw bytes. Connections are kept alive (the proxy pools
/// them).
fn stream_and_upgrade_server(gate: std::sync::mpsc::Receiver<()>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let gate = std::sync::Arc::new(std::sync::Mutex::new(gate));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let (stream, gate) = (stream.unwrap(), gate.clone());
            std::thread::spawn(move || serve_one(stream, &gate));
        }
    });
    url
}

fn serve_one(
    mut stream: std::net::TcpStream,
    gate: &std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
) {
    use std::io::Write;
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    loop {
        let mut head = String::new();
        while !head.ends_with("\r\n\r\n") {
            if reader.read_line(&mut head).unwrap_or(0) == 0 {
                return;
            }
        }
        if head.starts_with("GET /events") {
            let start = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                         Transfer-Encoding: chunked\r\n\r\n8\r\ndata: 1\n\r\n";
            stream.write_all(start.as_bytes()).unwrap();
            gate.lock().unwrap().recv().unwrap();
            stream.write_all(b"8\r\ndata: 2\n\r\n0\r\n\r\n").unwrap();
            continue;
        }
        assert!(
            head.to_ascii_lowercase().contains("upgrade: websocket"),
            "{head}"
        );
        let switch = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                      Connection: Upgrade\r\n\r\n";
        stream.write_all(switch.as_bytes()).unwrap();
        let mut buf = [0u8; 4];
        reader.read_exact(&mut buf).unwrap();
        stream.write_all(&buf).unwrap();
        return;
    }
}

#[test]
fn streams_flow_as_they_come_and_an_upgrade_becomes_a_raw_copy() {
    use std::io::Write;
    let s = Scratch::new("cloud-proxy-stream");
    let config = cloud_config(&s, "");
    let (gate_tx, gate) = std::sync::mpsc::channel();
    let upstream = stream_and_upgrade_server(gate);
    let (mut watch, line) = cloud_sidecar(&s, &config, &upstream, &[], &[]);
    let proxy = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("E2B_API_URL=http://"))
        .unwrap_or_else(|| panic!("{line:?}"))
        .to_string();
    let connect = || {
        let c = std::net::TcpStream::connect(&proxy).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c
    };

    // The first event arrives while the upstream still holds the second.
    let mut events = connect();
    events
        .write_all(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut reader = BufReader::new(events.try_clone().unwrap());
    let mut seen = String::new();
    while !seen.contains("data: 1") {
        assert!(reader.read_line(&mut seen).unwrap() > 0, "{seen}");
    }
    gate_tx.send(()).unwrap();
    while !seen.contains("data: 2") {
        assert!(reader.read_line(&mut seen).unwrap() > 0, "{seen}");
    }

    let mut ws = connect();
    ws.write_all(
        b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    )
    .unwrap();
    let mut reader = BufReader::new(ws.try_clone().unwrap());
    let mut head = String::new();
    while !head.ends_with("\r\n\r\n") {
        assert!(reader.read_line(&mut head).unwrap() > 0, "{head}");
    }
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    ws.write_all(b"ping").unwrap();
    let mut echoed = [0u8; 4];
    reader.read_exact(&mut echoed).unwrap();
    crate::watch::wrapper::unsafe_kill(watch.id() as i32, libc::SIGTERM);
    let _ = watch.wait();
    assert_eq!(&echoed, b"ping");
}
