//! A removal through a proxy releases what the provider confirmed gone, and nothing else
//! (DESIGN, "A removal is what the provider confirmed"): a `DELETE` the provider did not
//! route (dockerd's mux answers `/containers/ID/` with a trailing slash 404 "page not
//! found"; E2B kills only at `DELETE /sandboxes/{id}`, so `/v2/sandboxes/{id}` is a 404 of
//! the router's) releases no claim, so under `--max-sandboxes 1` the next create is still
//! refused; the removal the provider does route then releases as before. And what the
//! provider removes by itself is released when it says so: a container the daemon removes
//! once it exits (`docker run --rm`, the commonest agent pattern) gives its slot back and
//! stops counting toward the session's spend, from Docker's own `destroy` event, while the
//! owner lives (before 2026-12-07 the second `docker run --rm` under `--max-sandboxes 1` was
//! refused with nothing of the session left, "this session sandboxes: 1", and its time kept
//! counting).

use std::time::Duration;

use crate::proxy::limits::{journal, limited};
use crate::support::*;
use crate::watch::wrapper::{guarded_with, unsafe_kill, wait_for_file};

/// Whether `journal` has a `release` record naming `id`.
fn released(journal: &str, id: &str) -> bool {
    journal
        .lines()
        .any(|l| l.contains(r#""ev":"release""#) && l.contains(id))
}

#[test]
fn a_delete_dockerd_does_not_route_frees_no_slot_and_a_real_removal_does() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("release-unrouted");
    let out = s.path();
    let real =
        std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into());
    let real = real.strip_prefix("unix://").unwrap_or(&real).to_string();
    // The journal is copied before the real removal, whose release it must not yet hold.
    let script = format!(
        r#"set -e
c1=$(docker create --network none {IMAGE} true)
code=$(curl -s -o {out}/proxied -w '%{{http_code}}' --unix-socket "${{DOCKER_HOST#unix://}}" -X DELETE "http://d/v1.41/containers/$c1/")
curl -s -o {out}/direct --unix-socket {real} -X DELETE "http://d/v1.41/containers/$c1/"
if docker create --network none {IMAGE} true > {out}/second 2> {out}/err; then rc=0; else rc=$?; fi
there=$(docker inspect -f '{{{{.Id}}}}' "$c1" 2> /dev/null || true)
cp "$XDG_STATE_HOME/sandguard/sessions/$SANDGUARD_SESSION.journal" {out}/journal
docker rm "$c1" > /dev/null
if [ -s {out}/second ]; then docker rm "$(cat {out}/second)" > /dev/null; fi
c3=$(docker create --network none {IMAGE} true 2>> {out}/err || true)
printf '%s\n' "$SANDGUARD_SESSION" "$c1" "$code" "$rc" "$there" "$c3" > {out}/done.tmp
mv {out}/done.tmp {out}/done
exec sleep 3600
"#,
        out = out.display(),
    );
    let lines = limited(&s, &["--max-sandboxes", "1"], &script);
    let [session, c1, code, rc, there, c3] = <[String; 6]>::try_from(lines).unwrap();
    let err = std::fs::read_to_string(out.join("err")).unwrap();
    let before = std::fs::read_to_string(out.join("journal")).unwrap();
    assert_ne!(
        rc, "0",
        "the second create is refused: the unrouted DELETE freed no slot ({err})"
    );
    assert!(
        err.contains("sandguard: limit `sandboxes` reached"),
        "the CLI names the limit: {err}"
    );
    assert!(
        !released(&before, &c1),
        "the unrouted DELETE released nothing: {before}"
    );
    assert_eq!(code, "404", "dockerd does not route a trailing slash");
    let (proxied, direct) = (
        std::fs::read(out.join("proxied")),
        std::fs::read(out.join("direct")),
    );
    assert_eq!(
        proxied.unwrap(),
        direct.unwrap(),
        "the daemon's answer reaches the program as the daemon wrote it"
    );
    assert_eq!(there, c1, "the container is still there");
    assert!(!c3.is_empty(), "a real removal released its slot: {err}");
    assert!(
        released(&journal(&s, &session), &c1),
        "and journaled the release"
    );
    eventually(
        Duration::from_secs(10),
        "what the session made is reclaimed",
        || !container_exists(&c3),
    );
}

/// Makes a sandbox, sends `DELETE /v2/sandboxes/{id}` (no such route) past the SDK, tries a
/// second create, copies the journal, then kills the first through the SDK (the real route)
/// and creates again.
const E2B_UNROUTED_KILL: &str = r#"
import glob, json, os, shutil, time, urllib.error, urllib.request
from e2b import Sandbox

url, key = os.environ["E2B_API_URL"], os.environ["E2B_API_KEY"]
session = os.environ["SANDGUARD_SESSION"]
journal = glob.glob(os.path.join(os.environ["XDG_STATE_HOME"], "**", session + ".journal"), recursive=True)[0]
direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))

def delete(path):
    req = urllib.request.Request(url + path, method="DELETE", headers={"X-API-Key": key})
    try:
        with direct.open(req) as answer:
            return answer.status
    except urllib.error.HTTPError as e:
        return e.code

def create():
    try:
        return Sandbox.create(timeout=300), None
    except Exception as e:
        return None, str(e)

first, _ = create()
status = delete("/v2/sandboxes/" + first.sandbox_id)
second, error = create()
before = open(journal).read()
first.kill()
third, _ = create()
print(json.dumps({"session": session, "first": first.sandbox_id, "status": status,
                  "second": second and second.sandbox_id, "error": error, "before": before,
                  "third": third and third.sandbox_id}), flush=True)
time.sleep(600)
"#;

#[test]
fn an_e2b_delete_off_the_kill_route_frees_no_slot_and_the_sdks_kill_does() {
    use crate::proxy::cloud::{first_line, guarded, kill, E2B_KEY};
    let s = Scratch::new("release-e2b-unrouted");
    let (emu, state) = e2b::start(E2B_KEY);
    let env = [("E2B_API_KEY", E2B_KEY), ("E2B_API_URL", emu.url.as_str())];
    let config = cloud_config(&s, "");
    let args = ["run", "--cloud-proxy", "--max-sandboxes", "1"];
    let mut child = guarded(&s, &config, &env, &args, E2B_UNROUTED_KILL)
        .spawn()
        .unwrap();
    let said = first_line(&mut child);
    let first = said["first"].as_str().unwrap_or_default().to_string();
    let error = said["error"].as_str().unwrap_or_default();
    assert!(
        said["second"].is_null(),
        "the second create is refused: the unrouted DELETE freed no slot: {said}"
    );
    assert!(
        error.contains("sandguard: refused a sandbox create on e2b: limit `sandboxes` reached"),
        "the SDK raises with the limit: {said}"
    );
    let before = said["before"].as_str().unwrap_or_default();
    assert!(
        !released(before, &first),
        "the unrouted DELETE released nothing: {before}"
    );
    assert_eq!(said["status"], 404, "E2B has no such route: {said}");
    assert_eq!(
        state.creates().len(),
        2,
        "the refused create never reached E2B"
    );
    let third = said["third"].as_str().unwrap_or_default().to_string();
    assert!(
        !third.is_empty(),
        "the SDK's kill released its slot: {said}"
    );
    let session = said["session"].as_str().unwrap_or_default();
    assert!(
        released(&journal(&s, session), &first),
        "and journaled the release"
    );
    kill(child);
    eventually(Duration::from_secs(10), "the third is reclaimed", || {
        !state.exists(&third)
    });
}

#[test]
fn a_container_the_daemon_removed_by_itself_gives_its_slot_back_and_stops_counting() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("autoremove");
    let out = s.path();
    let script = format!(
        r#"docker run --rm --network none {IMAGE} true > /dev/null 2> {out}/err1; rc1=$?
docker run --rm --network none {IMAGE} true > /dev/null 2> {out}/err2; rc2=$?
printf '%s\n' "$SANDGUARD_SESSION" "$rc1" "$rc2" > {out}/done.tmp
mv {out}/done.tmp {out}/done
exec sleep 3600
"#,
        out = out.display(),
    );
    let args = ["run", "--docker-proxy", "--max-sandboxes", "1"];
    let mut job = guarded_with(&s, &args, &script);
    let lines = wait_for_file(&out.join("done"), &mut job.0);
    let [session, rc1, rc2] = <[String; 3]>::try_from(lines).unwrap();
    let err = |n| std::fs::read_to_string(out.join(format!("err{n}"))).unwrap_or_default();
    assert_eq!(rc1, "0", "the first run: {}", err(1));
    assert_eq!(
        rc2,
        "0",
        "the second run, its first container gone by itself: {}",
        err(2)
    );
    let show = || shown(&mut sandguard(&s), &session);
    // Both are gone, and seen so while the owner lives: none counts as alive, and their
    // time ended when the daemon removed them (each ran `true`: well under a second).
    eventually(
        Duration::from_secs(10),
        "both are seen gone while the owner lives",
        || show()["spend"]["alive"] == 0,
    );
    let shown = show();
    let sandboxes = shown["sandboxes"].as_array().unwrap();
    assert_eq!(sandboxes.len(), 2, "{shown}");
    for sandbox in sandboxes {
        assert_eq!(sandbox["fate"], "vanished", "{sandbox}");
        let seconds = sandbox["seconds"].as_f64().unwrap();
        assert!(seconds < 5.0, "counted {seconds} s: {sandbox}");
    }
    unsafe_kill(-(job.0.id() as i32), libc::SIGKILL);
    let _ = job.0.wait();
}
