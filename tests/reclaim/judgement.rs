//! Rules decided by the one ownership judgement, through the real binary and the real
//! daemon: a claim adopts and never steals, `stop --all --session` keeps what is detached,
//! pruning never forgets a detach, the detached label wins over a claim, a container from the
//! session's own commit is its own and a later stranger's is not (nor expired by the
//! `sandguard.expires` its image carries), and the TTL keeper renews nothing after its
//! owner's death. (The fleet's proof of life is checked where its path can
//! be driven without a store: the `sweep::fleet` unit tests.)

use std::time::Duration;

use crate::support::plugin::session_row;
use crate::support::*;
use crate::watch::wrapper::{guarded, guarded_with, wait_for_file};

/// Waits until `session`'s sidecar is gone and the session is over.
pub(super) fn ended(s: &Scratch, session: &str) {
    eventually(Duration::from_secs(30), "the session ends", || {
        let row = session_row(&mut sandguard(s), session);
        row["sidecar_alive"] == false
            && matches!(
                row["state"].as_str(),
                Some("reclaimed" | "clean" | "pending")
            )
    });
}

/// A script that runs `body` in a session, writes `$SANDGUARD_SESSION` and then whatever
/// `body` echoed into `file`, and exits.
fn in_session(s: &Scratch, name: &str, body: &str) -> (Vec<String>, std::path::PathBuf) {
    in_session_env(s, &[], name, body)
}

/// [`in_session`] with more variables for `sandguard` (a config, a provider's key).
pub(super) fn in_session_env(
    s: &Scratch,
    env: &[(&str, &str)],
    name: &str,
    body: &str,
) -> (Vec<String>, std::path::PathBuf) {
    let file = s.path().join(name);
    let script = format!(
        "{{ echo \"$SANDGUARD_SESSION\"; {body}; }} > {0}.tmp && mv {0}.tmp {0}",
        file.display()
    );
    let mut job = crate::watch::wrapper::guarded_env(s, env, &[], &script);
    let lines = wait_for_file(&file, &mut job.0);
    let _ = job.0.wait();
    (lines, file)
}

const RUN: &str = "docker run -d --network none";

/// `$SANDGUARD_LABELS` as `docker run` options, in a script.
const LABELS: &str =
    "$(echo \"$SANDGUARD_LABELS\" | tr ',' ' ' | sed 's/\\([^ ]*\\)/--label \\1/g')";

#[test]
fn a_claim_adopts_an_orphan_but_never_takes_a_live_sessions_sandbox() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("claim-steal");
    let mut res = Resources::default();
    let b = Owner::start(sandguard(&s), &s);
    let theirs = res.container(&pairs(&b.label_pairs()));
    let dead = dead_owner_label();
    let orphan_session = format!("{}{}", unique(), unique());
    let orphan = res.container(&[
        ("sandguard.session", orphan_session.as_str()),
        ("sandguard.owner", dead.as_str()),
    ]);
    let unlabelled = res.container(&[]);
    let (lines, _) = in_session(
        &s,
        "a",
        &format!(
            "sandguard claim docker {theirs} >&2; sandguard claim docker {orphan} >&2; \
             sandguard claim docker {unlabelled} >&2"
        ),
    );
    ended(&s, &lines[0]);
    assert!(
        container_exists(&theirs),
        "session A's claim took live session B's container"
    );
    assert!(!container_exists(&orphan), "an orphan claimed is adopted");
    assert!(
        !container_exists(&unlabelled),
        "an unlabelled claim is ours"
    );
}

#[test]
fn stop_all_of_a_session_keeps_what_it_detached_by_label_or_by_ledger() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("stop-all-detached");
    let file = s.path().join("ids");
    let script = format!(
        "L={LABELS}; a=$({RUN} $L {IMAGE} sleep 600); \
         b=$({RUN} $L --label sandguard.detached=true {IMAGE} sleep 600); \
         c=$({RUN} $L {IMAGE} sleep 600); sandguard detach docker $c; \
         printf '%s\\n%s\\n%s\\n%s\\n' \"$SANDGUARD_SESSION\" $a $b $c > {0}.tmp && mv {0}.tmp {0}; \
         exec sleep 600",
        file.display()
    );
    let mut job = guarded(&s, &script);
    let ids = wait_for_file(&file, &mut job.0);
    let mut res = Resources::default();
    for id in &ids[1..] {
        res.adopt_container(id);
    }
    let out = run(sandguard(&s).args(["stop", "--all", "--session", &ids[0]]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(!container_exists(&ids[1]), "the plain one is stopped");
    assert!(container_exists(&ids[2]), "detached by label: kept");
    assert!(container_exists(&ids[3]), "detached in the ledger: kept");
    assert!(out.stderr.contains("kept docker"), "{}", out.stderr);
}

#[test]
fn a_detach_outlives_the_pruning_of_its_session() {
    require_docker();
    let _g = exclusive();
    let s = Scratch::new("prune-detach");
    let mut res = Resources::default();
    let (lines, _) = in_session(
        &s,
        "d",
        &format!(
            "id=$({RUN} {LABELS} {IMAGE} sleep 600); sandguard detach docker $id >&2; echo $id"
        ),
    );
    let (session, kept) = (&lines[0], &lines[1]);
    res.adopt_container(kept);
    ended(&s, session);
    let out = run(sandguard(&s).args(["sessions", "--prune", "--older-than", "0s"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let out = run(sandguard(&s).args(["sweep", "--json"]));
    assert!(
        container_exists(kept),
        "a sweep after pruning removed a detached container: {}",
        out.stdout
    );
}

#[test]
fn the_detached_label_wins_over_a_claim() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("claim-detached");
    let mut res = Resources::default();
    let (lines, _) = in_session(
        &s,
        "c",
        &format!(
            "id=$({RUN} {LABELS} --label sandguard.detached=true {IMAGE} sleep 600); \
             sandguard claim docker $id >&2; echo $id"
        ),
    );
    res.adopt_container(&lines[1]);
    ended(&s, &lines[0]);
    assert!(
        container_exists(&lines[1]),
        "a claimed detached container was removed"
    );
}

fn pairs(labels: &[(String, String)]) -> Vec<(&str, &str)> {
    crate::support::plugin::pairs(labels)
}

/// Point 10: a container started from the session's own `docker commit`, labelled with
/// `$SANDGUARD_LABELS` (equal to its image's), is the session's and is reclaimed; one started
/// from that image after the session ended, by someone else, is left by every path.
#[test]
fn a_container_from_the_sessions_own_commit_is_its_own_and_a_later_strangers_is_not() {
    require_docker();
    let _g = exclusive();
    let s = Scratch::new("own-commit");
    let mut res = Resources::default();
    let image = format!("sandguard-test/own-commit-{}:latest", unique());
    let (lines, _) = in_session(
        &s,
        "commit",
        &format!(
            "L={LABELS}; a=$({RUN} $L {IMAGE} sleep 600); docker commit $a {image} >/dev/null; \
             b=$({RUN} $L {image} sleep 600); echo $a; echo $b"
        ),
    );
    let (session, from_commit) = (&lines[0], &lines[2]);
    res.adopt_container(&lines[1]);
    res.adopt_container(from_commit);
    ended(&s, session);
    eventually(Duration::from_secs(15), "the sidecar removes both", || {
        !container_exists(&lines[1]) && !container_exists(from_commit)
    });
    // A stranger starts the committed image after the session ended: its inherited label is
    // no ownership for `ps`, `stop --all --session` or a sweep.
    // Not a wait for anything: Docker dates a container to the second, so the stranger must
    // be created in a later second than the session's end to be told apart from a late create.
    std::thread::sleep(Duration::from_millis(1100));
    let later = {
        let out = std::process::Command::new("docker")
            .args(["run", "-d", "--network", "none", &image, "sleep", "600"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    res.adopt_container(&later);
    let out = run(sandguard(&s).args(["ps", "--json", "--session", session]));
    let journal = std::fs::read_to_string(
        s.path()
            .join("state/sandguard/sessions")
            .join(format!("{session}.journal")),
    )
    .unwrap_or_default();
    assert!(
        !out.stdout.contains(&later),
        "ps shows the stranger: {}\n{journal}",
        out.stdout
    );
    let out = run(sandguard(&s).args(["stop", "--all", "--session", session]));
    assert!(
        container_exists(&later),
        "stop --all took the stranger: {}{}",
        out.stdout,
        out.stderr
    );
    let out = run(sandguard(&s).args(["sweep", "--json"]));
    assert!(
        container_exists(&later),
        "a sweep took the stranger: {}",
        out.stdout
    );
    let _ = std::process::Command::new("docker")
        .args(["rmi", "-f", &image])
        .output();
}

/// Ownership before age: a container of a `--max-lifetime` session carries its
/// `sandguard.expires` with its session and owner labels; a plain `docker commit` of it (past
/// the proxy, which keeps sandguard's labels out of what it commits) puts all three into the
/// image. A stranger's unlabelled container started from that image after the session ended
/// is not the session's, so its inherited expiry ends nothing: a sweep, with this state
/// directory or with another, keeps it once the expiry passed (it removed it before
/// 2026-12-07: "its sandguard.expires has passed").
#[test]
fn an_expiry_a_strangers_container_inherited_from_an_image_ends_nothing() {
    require_docker();
    // Sweeps act on every session's orphans on the daemon.
    let _g = exclusive();
    let s = Scratch::new("inherited-expiry");
    let mut res = Resources::default();
    let image = format!("sandguard-test/expiry-commit-{}:latest", unique());
    let daemon =
        std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into());
    let file = s.path().join("ids");
    let script = format!(
        "set -e; a=$({RUN} {IMAGE} sleep 600); DOCKER_HOST={daemon} docker commit $a {image} \
         >/dev/null; printf '%s\n%s\n' \"$SANDGUARD_SESSION\" $a > {0}.tmp; mv {0}.tmp {0}",
        file.display()
    );
    let args = ["run", "--docker-proxy", "--max-lifetime", "2s"];
    let mut job = guarded_with(&s, &args, &script);
    let lines = wait_for_file(&file, &mut job.0);
    let _ = job.0.wait();
    let (session, made) = (&lines[0], &lines[1]);
    res.adopt_container(made);
    ended(&s, session);
    let label = |key: &str| {
        let format = format!("{{{{index .Config.Labels \"{key}\"}}}}");
        let out = std::process::Command::new("docker")
            .args(["image", "inspect", "--format", &format, &image])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(&label("sandguard.session"), session, "the commit kept it");
    let expires: i64 = label("sandguard.expires").parse().expect("an expiry");
    let later = {
        let out = std::process::Command::new("docker")
            .args(["run", "-d", "--network", "none", &image, "sleep", "600"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    res.adopt_container(&later);
    eventually(Duration::from_secs(10), "the expiry passes", || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .is_ok_and(|d| d.as_secs() as i64 > expires)
    });
    let out = run(sandguard(&s).args(["sweep", "--json"]));
    assert!(
        container_exists(&later),
        "a sweep took a stranger for the expiry its image carries: {}",
        out.stdout
    );
    let elsewhere = Scratch::new("inherited-expiry-elsewhere");
    let out = run(sandguard(&elsewhere).args(["sweep", "--json"]));
    assert!(
        container_exists(&later),
        "a sweep with another state directory took the stranger: {}",
        out.stdout
    );
    let _ = std::process::Command::new("docker")
        .args(["rmi", "-f", &image])
        .output();
}

/// Point 8: nothing is renewed after the owner's death. An E2B sandbox of the session is
/// renewed while its owner lives (`renew_every = 1s`); the owner is SIGKILLed while every
/// delete fails (503), so the reclaim keeps retrying: in the seconds after the death the
/// emulator sees deletes and no `POST /sandboxes/{id}/timeout`.
#[test]
fn the_ttl_keeper_renews_nothing_after_the_owners_death() {
    const KEY: &str = "e2b_0123456789abcdef0123456789abcdef";
    let s = Scratch::new("keeper-death");
    let (emu, e2b) = crate::support::e2b::start(KEY);
    let config = cloud_config(&s, "\n[watch]\nrenew_every = \"1s\"\n");
    let mut cmd = sandguard(&s);
    cmd.env("SANDGUARD_CONFIG", &config)
        .env("E2B_API_KEY", KEY)
        .env("E2B_API_URL", &emu.url);
    let mut owner = Owner::start(cmd, &s);
    let id = format!("i{}", unique());
    let labels = owner.label_pairs();
    e2b.insert(
        &id,
        &labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect::<Vec<_>>(),
    );
    let renewal = |h: &crate::support::emu::Hit| {
        h.method == "POST" && h.path == format!("/sandboxes/{id}/timeout")
    };
    eventually(
        Duration::from_secs(15),
        "the keeper renews while the owner lives",
        || emu.hits().iter().any(renewal),
    );
    // Every delete fails from now on (listings and renewals would still be answered).
    for _ in 0..200 {
        e2b.answer_next("DELETE", 503, None);
    }
    owner.kill();
    let died = std::time::Instant::now();
    eventually(
        Duration::from_secs(10),
        "the reclaim tries its delete",
        || {
            emu.hits()
                .iter()
                .any(|h| h.method == "DELETE" && h.at > died)
        },
    );
    // Several renewal periods with the delete still failing.
    std::thread::sleep(Duration::from_secs(3));
    let late: Vec<_> = emu
        .hits()
        .into_iter()
        .filter(|h| renewal(h) && h.at > died + Duration::from_millis(50))
        .collect();
    assert!(late.is_empty(), "renewed after the owner's death: {late:?}");
}
