//! `--max-lifetime` through the proxies: a sandbox (a container, a cloud sandbox) made
//! through a proxy carries `sandguard.expires` at its creation plus the limit and is removed
//! at that age while the program runs on, only the session's own; a session's networks and
//! volumes are never aged (DESIGN, "Ownership before age"): they carry no `sandguard.expires`,
//! and a `sandguard sweep` while the owner lives leaves them, with their data.

use std::time::Duration;

use crate::proxy::limits::journal;
use crate::support::*;
use crate::support::{daytona, e2b};
use crate::watch::wrapper::{guarded_with, unsafe_kill, wait_for_file};

/// `--max-lifetime`: the program's old container is removed while the program runs, with a
/// line on its terminal and the cause in the journal; a younger one stays until it too is
/// that old (made on the label path, by the program's own `--label`, not through the proxy);
/// a stranger's container as old is never touched. Every container made through the proxy
/// carries `sandguard.expires` at its creation plus the limit.
#[test]
fn max_lifetime_removes_the_running_programs_old_container_and_only_its_own() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("limit-lifetime");
    let out = s.path();
    let stranger = {
        let made = std::process::Command::new("docker")
            .args(["run", "-d", "--network", "none", IMAGE, "sleep", "600"])
            .output()
            .unwrap();
        assert!(made.status.success(), "{made:?}");
        String::from_utf8_lossy(&made.stdout).trim().to_string()
    };
    let real =
        std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into());
    let script = format!(
        r#"set -e
old=$(docker run -d --network none {IMAGE} sleep 600)
expires=$(docker inspect -f '{{{{index .Config.Labels "sandguard.expires"}}}}' "$old")
sleep 4
young=$(DOCKER_HOST={real} docker run -d --network none --label sandguard.session=$SANDGUARD_SESSION {IMAGE} sleep 600)
while docker inspect "$old" > /dev/null 2>&1; do sleep 0.2; done
running=$(docker inspect -f '{{{{.State.Running}}}}' "$young")
printf '%s\n' "$SANDGUARD_SESSION" "$old" "$young" "$running" "$expires" "$(date +%s)" > {out}/done.tmp
mv {out}/done.tmp {out}/done
exec sleep 3600
"#,
        out = out.display(),
    );
    let mut terminal = crate::support::terminal::Terminal::open();
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let mut child = crate::proxy::defaults::wrapped(
        &s,
        &["run", "--docker-proxy", "--max-lifetime", "6s"],
        &script,
        &mut terminal,
    );
    let lines = wait_for_file(&out.join("done"), &mut child);
    let [session, old, young, running, expires, _] = <[String; 6]>::try_from(lines).unwrap();
    assert_eq!(
        running, "true",
        "the younger container still runs when the old one is gone"
    );
    let expires: i64 = expires.parse().expect("sandguard.expires is stamped");
    assert!(
        (started + 6..=started + 12).contains(&expires),
        "stamped at its creation plus the limit: {expires} (started {started})"
    );
    eventually(
        Duration::from_secs(20),
        "the younger one goes at its age too",
        || !container_exists(&young),
    );
    assert!(child.try_wait().unwrap().is_none(), "the program runs on");
    assert!(
        container_exists(&stranger),
        "a stranger's container as old stays"
    );
    for id in [&old, &young] {
        eventually(
            Duration::from_secs(5),
            "the removal is journaled with its cause",
            || removed_for_its_age(&s, &session, &id[..12]),
        );
    }
    eventually(
        Duration::from_secs(5),
        "the terminal is told of both",
        || {
            let said = terminal.text();
            [&old, &young].iter().all(|id| {
                said.contains(&format!("sandguard: removed docker sandbox {}", &id[..12]))
            }) && said.contains("past the lifetime limit (6s); the program runs on")
        },
    );
    unsafe_kill(child.id() as i32, libc::SIGKILL);
    child.wait().unwrap();
    let _ = std::process::Command::new("docker")
        .args(["rm", "-f", &stranger])
        .output();
}

const E2B_ONE_FOR_LONG: &str = r#"
import json, os, time
from e2b import Sandbox

sandbox = Sandbox.create(timeout=300)
print(json.dumps({"ids": [sandbox.sandbox_id], "session": os.environ["SANDGUARD_SESSION"]}), flush=True)
time.sleep(600)
"#;

const DAYTONA_ONE: &str = r#"
import json, os, time
from daytona import Daytona

sandbox = Daytona().create()
print(json.dumps({"ids": [sandbox.id], "session": os.environ["SANDGUARD_SESSION"]}), flush=True)
time.sleep(600)
"#;

/// Runs an SDK `script` that makes one sandbox, guarded with the cloud proxy and
/// `--max-lifetime 4s`: the program, the sandbox's id and the session.
fn one_with_a_lifetime(
    s: &Scratch,
    env: &[(&str, &str)],
    script: &str,
) -> (std::process::Child, String, String) {
    use crate::proxy::cloud::{first_line, guarded};
    let config = cloud_config(s, "");
    let args = ["run", "--cloud-proxy", "--max-lifetime", "4s"];
    let mut child = guarded(s, &config, env, &args, script).spawn().unwrap();
    let said = first_line(&mut child);
    let id = said["ids"][0].as_str().unwrap().to_string();
    let session = said["session"].as_str().unwrap().to_string();
    (child, id, session)
}

/// The journal of `session` says `id` was removed for the lifetime limit.
fn removed_for_its_age(s: &Scratch, session: &str, id: &str) -> bool {
    journal(s, session).lines().any(|l| {
        l.contains(r#""ev":"removed""#) && l.contains(id) && l.contains(r#""limit":"lifetime""#)
    })
}

/// `--max-lifetime` on the cloud proxy: E2B's SDK asks for 300 s and the create reaches E2B
/// with its `timeout` cut to the limit and `sandguard.expires` in its metadata; Daytona's
/// sandbox carries `sandguard.expires` in its labels; both are removed at their age while the
/// program runs on.
#[test]
fn the_cloud_sdks_sandboxes_carry_the_lifetime_and_are_removed_at_it() {
    use crate::proxy::cloud::{DAYTONA_KEY, E2B_KEY};
    let s = Scratch::new("lifetime-e2b");
    let (emu, state) = e2b::start(E2B_KEY);
    let env = [("E2B_API_KEY", E2B_KEY), ("E2B_API_URL", emu.url.as_str())];
    let (child, id, session) = one_with_a_lifetime(&s, &env, E2B_ONE_FOR_LONG);
    let sent: serde_json::Value = serde_json::from_slice(&state.creates()[0].body).unwrap();
    assert_eq!(
        sent["timeout"], 4,
        "the SDK's 300 s cut to the limit: {sent}"
    );
    let sb = state.get(&id).expect("made");
    assert!(sb.end_at - sb.started_at <= 4, "E2B ends it at the limit");
    let expires: i64 = sb.metadata["sandguard.expires"].parse().unwrap();
    assert!(
        (sb.started_at + 3..=sb.started_at + 6).contains(&expires),
        "{expires}"
    );
    aged_out(&s, &session, &id, child, || !state.exists(&id));

    let s = Scratch::new("lifetime-daytona");
    let cloud = daytona::Daytona::start(DAYTONA_KEY);
    let url = cloud.api_url();
    let env = [
        ("DAYTONA_API_KEY", DAYTONA_KEY),
        ("DAYTONA_API_URL", url.as_str()),
    ];
    let (child, id, session) = one_with_a_lifetime(&s, &env, DAYTONA_ONE);
    let labels = cloud.labels(&id).expect("made");
    assert!(labels.contains_key("sandguard.expires"), "{labels:?}");
    aged_out(&s, &session, &id, child, || !cloud.is_live(&id));
}

/// Waits until the provider says `id` is `gone` and session's journal says it was removed
/// for its age, with the program `child` still running; then kills the program.
fn aged_out(
    s: &Scratch,
    session: &str,
    id: &str,
    mut child: std::process::Child,
    gone: impl Fn() -> bool,
) {
    eventually(
        Duration::from_secs(15),
        "the sandbox is removed at its age",
        gone,
    );
    eventually(
        Duration::from_secs(5),
        "the removal is journaled with its cause",
        || removed_for_its_age(s, session, id),
    );
    assert!(child.try_wait().unwrap().is_none(), "the program runs on");
    crate::proxy::cloud::kill(child);
}

/// The labels `docker {kind} inspect` shows on `name`, as JSON.
fn labels_of(kind: &str, name: &str) -> serde_json::Value {
    let out = std::process::Command::new("docker")
        .args([kind, "inspect", "-f", "{{json .Labels}}", name])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "docker {kind} inspect {name}: {out:?}"
    );
    json(&String::from_utf8_lossy(&out.stdout))
}

/// A lifetime ages the session's container, never its network or volume: made through the
/// proxy under `--max-lifetime 2s`, they carry the session's labels but no
/// `sandguard.expires`, and once the container is gone for its age a `sandguard sweep` (same
/// state directory) while the program lives leaves both, the volume with its data.
#[test]
fn a_lifetime_never_ages_the_sessions_network_or_volume() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("lifetime-kept");
    let out = s.path();
    let u = unique();
    let (volume, network) = (format!("sg-life-vol-{u}"), format!("sg-life-net-{u}"));
    let mut made = Resources::default();
    made.adopt_volume(&volume);
    made.adopt_network(&network);
    let script = format!(
        r#"set -e
docker volume create {volume} > /dev/null
docker network create --internal {network} > /dev/null
docker run --rm --network none -v {volume}:/data {IMAGE} sh -c 'echo kept > /data/file'
c=$(docker run -d --network {network} -v {volume}:/data {IMAGE} sleep 600)
printf '%s\n' "$SANDGUARD_SESSION" "$c" > {out}/done.tmp
mv {out}/done.tmp {out}/done
exec sleep 3600
"#,
        out = out.display(),
    );
    let args = ["run", "--docker-proxy", "--max-lifetime", "2s"];
    let mut child = guarded_with(&s, &args, &script);
    let lines = wait_for_file(&out.join("done"), &mut child);
    let [session, container] = <[String; 2]>::try_from(lines).unwrap();
    made.adopt_container(&container);
    let labels = [("volume", &volume), ("network", &network)]
        .map(|(kind, name)| (kind, labels_of(kind, name)));
    eventually(
        Duration::from_secs(20),
        "the container goes at its age",
        || !container_exists(&container),
    );
    // The volume and network were made before the container, so their lifetime is past too
    // (the wait is time passing, not a synchronisation: a whole second more, however an
    // expiry in unix seconds is rounded).
    std::thread::sleep(Duration::from_millis(1100));
    let swept = run(sandguard(&s).arg("sweep"));
    assert!(child.try_wait().unwrap().is_none(), "the program runs on");
    assert!(
        volume_exists(&volume),
        "the sweep left the volume: {}{}",
        swept.stdout,
        swept.stderr
    );
    assert!(
        network_exists(&network),
        "the sweep left the network: {}{}",
        swept.stdout,
        swept.stderr
    );
    let mount = format!("{volume}:/data");
    let read = std::process::Command::new("docker")
        .args(["run", "--rm", "--network", "none", "-v", &mount, IMAGE])
        .args(["cat", "/data/file"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&read.stdout).trim(),
        "kept",
        "with its data"
    );
    for (kind, labels) in labels {
        assert_eq!(labels["sandguard.session"], session.as_str(), "{labels}");
        assert!(
            labels.get("sandguard.expires").is_none(),
            "the {kind} carries no lifetime: {labels}"
        );
    }
    unsafe_kill(child.id() as i32, libc::SIGKILL);
    child.wait().unwrap();
    eventually(Duration::from_secs(10), "they go with the session", || {
        !volume_exists(&volume) && !network_exists(&network)
    });
}
