//! Limits per session, enforced in the Docker proxy with the unmodified docker CLI: a create
//! over `--max-sandboxes` or `--max-creates` fails in the CLI with the proxy's `sandguard:`
//! message naming the limit, and the daemon makes nothing; 50 concurrent creates against a
//! limit of 10 make exactly 10; a removal through the proxy gives the slot back, a failed
//! create never takes one for good. Through the cloud proxy, the E2B and Daytona SDKs raise
//! their own API error carrying the message, and the emulators see no create past the limit.

use std::time::Duration;

use crate::support::*;
use crate::support::{daytona, e2b};
use crate::watch::wrapper::{guarded_with, unsafe_kill, wait_for_file};

/// Runs `script` guarded with the Docker proxy and `limits`; waits for the file `done` it
/// writes (its lines returned), then kills the program and waits for the reclaim.
pub(super) fn limited(s: &Scratch, limits: &[&str], script: &str) -> Vec<String> {
    let mut args = vec!["run", "--docker-proxy"];
    args.extend_from_slice(limits);
    let mut child = guarded_with(s, &args, script);
    let lines = wait_for_file(&s.path().join("done"), &mut child);
    unsafe_kill(child.id() as i32, libc::SIGKILL);
    child.wait().unwrap();
    lines
}

/// The journal of `session`, as written so far.
pub(super) fn journal(s: &Scratch, session: &str) -> String {
    std::fs::read_to_string(crate::watch::sidecar::journal(s, session)).unwrap_or_default()
}

#[test]
fn a_create_over_max_sandboxes_is_refused_in_the_docker_cli_and_nothing_is_made() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("limit-sandboxes");
    let out = s.path();
    let u = unique();
    let script = format!(
        r#"set -e
c1=$(docker create --network none {IMAGE} true)
c2=$(docker create --network none {IMAGE} true)
n=$(docker ps -aq --filter "label=sandguard.session=$SANDGUARD_SESSION" | wc -l)
if docker create --network none -v sg-limit-{u}:/data {IMAGE} true > {out}/third 2> {out}/err; then rc=0; else rc=$?; fi
n3=$(docker ps -aq --filter "label=sandguard.session=$SANDGUARD_SESSION" | wc -l)
docker rm "$c1" > /dev/null
c4=$(docker create --network none {IMAGE} true)
printf '%s\n' "$SANDGUARD_SESSION" "$rc" "$n" "$n3" "$c2" "$c4" > {out}/done.tmp
mv {out}/done.tmp {out}/done
exec sleep 3600
"#,
        out = out.display(),
        u = u,
    );
    let lines = limited(&s, &["--max-sandboxes", "2"], &script);
    let [session, rc, before, after, c2, c4] = <[String; 6]>::try_from(lines).unwrap();
    let err = std::fs::read_to_string(out.join("err")).unwrap();
    assert_ne!(rc, "0", "the third create fails in the docker CLI");
    assert!(
        err.contains("sandguard: limit `sandboxes` reached"),
        "the CLI shows the proxy's message naming the limit: {err}"
    );
    assert_eq!(before.trim(), "2");
    assert_eq!(after.trim(), "2", "the refused create made nothing");
    assert!(
        !volume_exists(&format!("sg-limit-{u}")),
        "nor the named volume it asked for"
    );
    assert!(
        std::fs::read_to_string(out.join("third"))
            .unwrap()
            .is_empty(),
        "no id came back for the refused create"
    );
    assert!(
        !c4.is_empty(),
        "a removal through the proxy gave its slot back"
    );
    let journal = journal(&s, &session);
    assert_eq!(
        journal.matches(r#""ev":"slot""#).count(),
        3,
        "each create that went on took a journaled slot; the refused one none: {journal}"
    );
    eventually(
        Duration::from_secs(10),
        "what the session made is reclaimed",
        || !container_exists(&c2) && !container_exists(&c4),
    );
}

#[test]
fn fifty_concurrent_creates_against_ten_make_exactly_ten() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("limit-race");
    let out = s.path();
    let script = format!(
        r#"mkdir {out}/r
for i in $(seq 1 50); do
  (if docker create --network none {IMAGE} true > /dev/null 2> {out}/r/err$i; then touch {out}/r/ok$i; fi) &
done
wait
ok=$(ls {out}/r | grep -c '^ok')
limited=$(cat {out}/r/err* | grep -c 'limit `sandboxes` reached')
n=$(docker ps -aq --filter "label=sandguard.session=$SANDGUARD_SESSION" | wc -l)
printf '%s\n' "$SANDGUARD_SESSION" "$ok" "$limited" "$n" > {out}/done.tmp
mv {out}/done.tmp {out}/done
exec sleep 3600
"#,
        out = out.display()
    );
    let lines = limited(&s, &["--max-sandboxes", "10"], &script);
    let [session, ok, refused, made] = <[String; 4]>::try_from(lines).unwrap();
    assert_eq!(ok.trim(), "10", "exactly the limit succeeds");
    assert_eq!(refused.trim(), "40", "every other create names the limit");
    assert_eq!(made.trim(), "10", "the daemon made exactly ten");
    eventually(Duration::from_secs(20), "the ten are reclaimed", || {
        session_containers(&session).is_empty()
    });
}

#[test]
fn max_creates_counts_what_was_made_over_the_session_not_what_is_alive() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("limit-creates");
    let out = s.path();
    let script = format!(
        r#"set -e
c1=$(docker create --network none {IMAGE} true)
docker rm "$c1" > /dev/null
docker create --pull never --network none no-such-image:never > /dev/null 2>&1 || true
c2=$(docker create --network none {IMAGE} true)
docker rm "$c2" > /dev/null
if docker create --network none {IMAGE} true > /dev/null 2> {out}/err; then rc=0; else rc=$?; fi
printf '%s\n' "$SANDGUARD_SESSION" "$rc" > {out}/done.tmp
mv {out}/done.tmp {out}/done
exec sleep 3600
"#,
        out = out.display()
    );
    let lines = limited(&s, &["--max-creates", "2"], &script);
    let [session, rc] = <[String; 2]>::try_from(lines).unwrap();
    let err = std::fs::read_to_string(out.join("err")).unwrap();
    assert_ne!(rc, "0", "the third sandbox is refused with none alive");
    assert!(
        err.contains("sandguard: limit `creates` reached"),
        "the CLI names the limit: {err}"
    );
    let journal = journal(&s, &session);
    assert!(
        journal.contains(r#""ev":"slot_done","n":1,"made":false"#),
        "the create of a missing image gave its slot back: {journal}"
    );
    assert!(session_containers(&session).is_empty());
}

/// Creates until one fails; prints what was made and what the SDK raised.
const E2B_OVER_THE_LIMIT: &str = r#"
import json, time
from e2b import Sandbox

ids, error = [], None
for _ in range(3):
    try:
        ids.append(Sandbox.create().sandbox_id)
    except Exception as e:
        error = {"type": type(e).__name__, "message": str(e)}
        break
print(json.dumps({"ids": ids, "error": error}), flush=True)
time.sleep(600)
"#;

const DAYTONA_OVER_THE_LIMIT: &str = r#"
import json, time
from daytona import Daytona

d = Daytona()
ids, error = [], None
for _ in range(3):
    try:
        sandbox = d.create()
        ids.append(sandbox.id)
        d.delete(sandbox)
    except Exception as e:
        error = {"type": type(e).__name__, "message": str(e)}
        break
print(json.dumps({"ids": ids, "error": error}), flush=True)
time.sleep(600)
"#;

/// Runs an SDK `script` (which creates until one fails) guarded with the cloud proxy and
/// `limit` (`--max-…`, `2`); asserts two were made and the SDK raised with `message`. Returns
/// the guarded program, still running, and the ids made.
fn over_the_limit(
    s: &Scratch,
    env: &[(&str, &str)],
    limit: &str,
    script: &str,
    message: &str,
) -> (std::process::Child, Vec<String>) {
    use crate::proxy::cloud::{first_line, guarded};
    let config = cloud_config(s, "");
    let args = ["run", "--cloud-proxy", limit, "2"];
    let mut child = guarded(s, &config, env, &args, script).spawn().unwrap();
    let said = first_line(&mut child);
    let ids: Vec<String> = serde_json::from_value(said["ids"].clone()).unwrap();
    assert_eq!(ids.len(), 2, "{said}");
    let raised = said["error"]["message"].as_str().unwrap_or_default();
    assert!(
        raised.contains(message),
        "the SDK raises with the proxy's message: {said}"
    );
    (child, ids)
}

#[test]
fn the_e2b_sdk_gets_its_own_error_at_max_sandboxes_and_the_service_makes_nothing_more() {
    use crate::proxy::cloud::{kill, E2B_KEY};
    let s = Scratch::new("limit-e2b");
    let (emu, state) = e2b::start(E2B_KEY);
    let env = [("E2B_API_KEY", E2B_KEY), ("E2B_API_URL", emu.url.as_str())];
    let message = "sandguard: refused a sandbox create on e2b: limit `sandboxes` reached";
    let (child, ids) = over_the_limit(&s, &env, "--max-sandboxes", E2B_OVER_THE_LIMIT, message);
    assert_eq!(state.creates().len(), 2, "the third never reached E2B");
    kill(child);
    eventually(Duration::from_secs(10), "both are reclaimed", || {
        ids.iter().all(|id| !state.exists(id))
    });
}

#[test]
fn the_daytona_sdk_gets_its_own_error_at_max_creates_though_none_is_alive() {
    use crate::proxy::cloud::{kill, DAYTONA_KEY};
    let s = Scratch::new("limit-daytona");
    let cloud = daytona::Daytona::start(DAYTONA_KEY);
    let url = cloud.api_url();
    let env = [
        ("DAYTONA_API_KEY", DAYTONA_KEY),
        ("DAYTONA_API_URL", url.as_str()),
    ];
    let message = "limit `creates` reached";
    let script = DAYTONA_OVER_THE_LIMIT;
    let (child, _) = over_the_limit(&s, &env, "--max-creates", script, message);
    assert_eq!(cloud.creates().len(), 2, "the third never reached Daytona");
    kill(child);
}

/// A `watch` sidecar for `owner` and `session` with the Docker proxy and `--max-sandboxes`;
/// returns it and its proxy's `DOCKER_HOST`.
fn limited_sidecar(s: &Scratch, owner: u32, session: &str) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = sandguard(s)
        .args(["watch", "--docker-proxy", "--max-sandboxes", "3"])
        .args(["--owner-pid", &owner.to_string(), "--session", session])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let host = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("DOCKER_HOST="))
        .unwrap_or_else(|| panic!("no DOCKER_HOST on {line:?}"))
        .to_string();
    (child, host)
}

/// `docker create` through `host`: whether it made a container, and what the CLI said.
fn create_through(host: &str) -> (bool, String) {
    let out = std::process::Command::new("docker")
        .env("DOCKER_HOST", host)
        .args(["create", "--network", "none", IMAGE, "true"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success(), said)
}

/// A sidecar killed between a limit's decision and the create's answer leaves its slot open
/// in the journal; the restarted sidecar counts it, and what the session held, from there.
#[test]
fn a_restarted_sidecar_counts_on_from_the_journal_an_open_slot_included() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("limit-restart");
    let session = format!("limits{}", unique());
    let mut owner = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    let (mut first, host) = limited_sidecar(&s, owner.id(), &session);
    let (made, said) = create_through(&host);
    assert!(made, "{said}");
    // The create's end is journaled just after its answer: killed before that, the sidecar
    // would leave this slot open too (counted, the safe side), not the one written below.
    let path = crate::watch::sidecar::journal(&s, &session);
    eventually(
        Duration::from_secs(5),
        "the slot's end is journaled",
        || std::fs::read_to_string(&path).is_ok_and(|j| j.contains(r#""ev":"slot_done""#)),
    );
    first.kill().unwrap();
    first.wait().unwrap();
    // What a sidecar killed right after journaling a slot leaves: a `slot` without its end.
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(r#"{"t":1,"ev":"slot","provider":"docker","n":9}"#);
    text.push('\n');
    std::fs::write(&path, text).unwrap();

    let (mut second, host) = limited_sidecar(&s, owner.id(), &session);
    let (made, said) = create_through(&host);
    assert!(made, "1 held + 1 open slot leave one of 3: {said}");
    let (made, said) = create_through(&host);
    assert!(!made, "the fourth would pass the limit");
    assert!(said.contains("limit `sandboxes` reached"), "{said}");
    assert_eq!(session_containers(&session).len(), 2);
    owner.kill().unwrap();
    owner.wait().unwrap();
    second.wait().unwrap();
    assert!(
        session_containers(&session).is_empty(),
        "both are reclaimed"
    );
}

/// `--max-spend`: once the session's sandbox time reaches the limit a create through the proxy
/// is refused with the CLI's own error naming `spend`, and what runs, runs on (the default);
/// with `--on-spend reclaim`, every container the session holds is removed too, while the
/// program runs, each journaled with its cause and told on the terminal.
#[test]
fn max_spend_refuses_creates_past_it_and_on_spend_reclaim_removes_what_the_session_holds() {
    require_docker();
    let _g = shared();
    for reclaim in [false, true] {
        let s = Scratch::new(if reclaim {
            "spend-reclaim"
        } else {
            "spend-refuse"
        });
        let out = s.path();
        // Two containers use the 4 s of sandbox time in 2 s.
        let script = format!(
            r#"set -e
a=$(docker run -d --network none {IMAGE} sleep 600)
b=$(docker run -d --network none {IMAGE} sleep 600)
sleep 3
if docker run -d --network none {IMAGE} sleep 600 > {out}/third 2> {out}/err; then rc=0; else rc=$?; fi
sleep 1
n=$(docker ps -q --filter "label=sandguard.session=$SANDGUARD_SESSION" | wc -l)
printf '%s\n' "$SANDGUARD_SESSION" "$a" "$b" "$rc" "$n" > {out}/done.tmp
mv {out}/done.tmp {out}/done
exec sleep 3600
"#,
            out = out.display(),
        );
        let mut args = vec!["run", "--docker-proxy", "--max-spend", "4s"];
        if reclaim {
            args.extend(["--on-spend", "reclaim"]);
        }
        let mut terminal = crate::support::terminal::Terminal::open();
        let mut child = crate::proxy::defaults::wrapped(&s, &args, &script, &mut terminal);
        let lines = wait_for_file(&out.join("done"), &mut child);
        let [session, a, b, rc, running] = <[String; 5]>::try_from(lines).unwrap();
        let err = std::fs::read_to_string(out.join("err")).unwrap();
        assert_ne!(
            rc, "0",
            "reclaim={reclaim}: the create past the spend is refused"
        );
        assert!(
            err.contains("sandguard: limit `spend` reached (at most 4s of sandbox time"),
            "the CLI shows the limit: {err}"
        );
        let said = terminal.text();
        assert!(
            said.contains(
                "sandguard: this session's spend reached its limit `spend` (4s of sandbox time)"
            ),
            "{said:?}"
        );
        let journal = journal(&s, &session);
        if reclaim {
            assert_eq!(running.trim(), "0", "everything it held was removed");
            for id in [&a, &b] {
                assert!(!container_exists(id));
                assert!(
                    journal.lines().any(|l| l.contains(r#""ev":"removed""#)
                        && l.contains(&id[..12])
                        && l.contains(r#""limit":"spend""#)),
                    "{id} journaled as removed for the spend: {journal}"
                );
                assert!(
                    said.contains(&format!("removed docker sandbox {}", &id[..12])),
                    "{said:?}"
                );
            }
        } else {
            assert_eq!(running.trim(), "2", "what runs, runs on");
            assert!(
                !journal
                    .lines()
                    .any(|l| l.contains(r#""ev":"removed""#) && l.contains(r#""limit":"spend""#)),
                "nothing removed for it (its refusal is journaled, with the limit): {journal}"
            );
            assert!(
                journal
                    .lines()
                    .any(|l| l.contains(r#""ev":"create_refused""#)
                        && l.contains(r#""limit":"spend""#)),
                "the refused create is on the record: {journal}"
            );
        }
        assert!(child.try_wait().unwrap().is_none(), "the program runs on");
        unsafe_kill(child.id() as i32, libc::SIGKILL);
        child.wait().unwrap();
        eventually(
            Duration::from_secs(10),
            "the session's containers are gone",
            || !container_exists(&a) && !container_exists(&b),
        );
    }
}

const E2B_ONE_THEN_ANOTHER: &str = r#"
import json, time
from e2b import Sandbox

first = Sandbox.create(timeout=300).sandbox_id
time.sleep(4)
error = None
try:
    Sandbox.create(timeout=300)
except Exception as e:
    error = {"type": type(e).__name__, "message": str(e)}
print(json.dumps({"ids": [first], "error": error}), flush=True)
time.sleep(600)
"#;

/// A money `spend` at the configured prices: E2B at $3600 a sandbox-hour (a dollar a
/// second), `--max-spend '$3'`: one sandbox run for 4 s has spent it, and the SDK's next
/// create raises with the limit, never reaching E2B. A money limit with no price to count
/// it by is refused before the program starts.
#[test]
fn a_money_spend_at_the_configured_prices_refuses_the_create_past_it() {
    use crate::proxy::cloud::{first_line, guarded, kill, E2B_KEY};
    let s = Scratch::new("spend-money");
    let (emu, state) = e2b::start(E2B_KEY);
    let env = [("E2B_API_KEY", E2B_KEY), ("E2B_API_URL", emu.url.as_str())];
    let config = cloud_config(&s, "[providers.e2b]\nprice_per_hour = 3600\n");
    let args = ["run", "--cloud-proxy", "--max-spend", "$3"];
    let mut child = guarded(&s, &config, &env, &args, E2B_ONE_THEN_ANOTHER)
        .spawn()
        .unwrap();
    let said = first_line(&mut child);
    let raised = said["error"]["message"].as_str().unwrap_or_default();
    assert!(
        raised.contains("sandguard: refused a sandbox create on e2b: limit `spend` reached (at most $3.00 estimated; this session used $"),
        "the SDK raises with the limit: {said}"
    );
    assert_eq!(state.creates().len(), 1, "the second never reached E2B");
    kill(child);

    let s = Scratch::new("spend-unpriced");
    let config = cloud_config(&s, "");
    let out = guarded(&s, &config, &env, &args, "print('ran')")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("limit `spend` is money ($3.00 estimated) but no price is set"),
        "{err}"
    );
    assert!(
        err.contains("book/src/budgets.md, \"Prices\"") && !err.contains("README"),
        "it points to the book's section on prices, which exists: {err}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("ran"),
        "the program never ran"
    );
}
