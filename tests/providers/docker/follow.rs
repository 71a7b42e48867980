//! What a sidecar follows on Docker's event stream obeys the same judgement as what
//! it lists: a followed container is removed first at death and a detached one stays, and a
//! container that went is forgotten at once, so a stranger later *named* like its full id is
//! never removed without the look-alike inspect. Each test reads the sidecar's debug log to
//! know the follower saw what it needs before it acts, so the follow path is what is tested.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::docker_ok;
use crate::support::*;
use crate::watch::wrapper::{guarded_env, unsafe_kill, wait_for_file, Job};

/// `sandguard -- sh -c SCRIPT` with the sidecar logging at debug level.
fn guarded_debug(s: &Scratch, script: &str) -> Job {
    guarded_env(s, &[("SANDGUARD_LOG", "debug")], &[], script)
}

fn log(s: &Scratch, session: &str) -> String {
    std::fs::read_to_string(
        s.path()
            .join(format!("state/sandguard/sessions/{session}.log")),
    )
    .unwrap_or_default()
}

fn wait_log(s: &Scratch, session: &str, what: &str, needle: &str) {
    eventually(Duration::from_secs(15), what, || {
        log(s, session).contains(needle)
    });
}

fn reclaimed(s: &Scratch, session: &str) {
    eventually(Duration::from_secs(20), "the session is reclaimed", || {
        let v = json(&run(sandguard(s).args(["sessions", "--json"])).stdout);
        v["sessions"].as_array().unwrap().iter().any(|x| {
            x["session"] == session && x["state"] == "reclaimed" && x["sidecar_alive"] == false
        })
    });
}

/// The owner's script: `n` labelled containers (ids then the session in `ids`), and
/// `then` before it sleeps.
fn script(ids: &Path, n: usize, then: &str) -> String {
    format!(
        "L=$(echo \"$SANDGUARD_LABELS\" | sed 's/^/--label /; s/,/ --label /g')\n\
         for i in $(seq 1 {n}); do docker run -d --network none $L {IMAGE} sleep 600 >> {ids}.tmp; done\n\
         {then}\n\
         echo \"$SANDGUARD_SESSION\" >> {ids}.tmp; mv {ids}.tmp {ids}\n\
         exec sleep 600",
        ids = ids.display()
    )
}

#[test]
fn followed_containers_go_first_and_a_detached_one_stays() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("follow-first");
    let ids = s.path().join("ids");
    let mut owner = guarded_debug(
        &s,
        &script(
            &ids,
            2,
            &format!(
                "sandguard detach docker \"$(sed -n 2p {}.tmp)\"",
                ids.display()
            ),
        ),
    );
    let got = wait_for_file(&ids, &mut owner);
    let (mine, kept, session) = (got[0].clone(), got[1].clone(), got[2].clone());
    let _cleanup = Removes(vec![mine.clone(), kept.clone()]);
    for id in [&mine, &kept] {
        wait_log(
            &s,
            &session,
            "the sidecar follows both containers",
            &format!("following docker container {}", &id[..12]),
        );
    }
    unsafe_kill(owner.id() as i32, libc::SIGKILL);
    let _ = owner.wait();
    reclaimed(&s, &session);
    assert!(!container_exists(&mine), "the followed container was left");
    assert!(
        container_exists(&kept),
        "the detached container was removed"
    );
    let text = log(&s, &session);
    assert!(
        text.contains("removing 1 followed sandboxes beside the first listing"),
        "the followed container went first, the detached one was judged kept:\n{text}"
    );
}

#[test]
fn a_stranger_named_like_a_followed_container_that_went_is_kept() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("follow-lookalike");
    let ids = s.path().join("ids");
    let mut owner = guarded_debug(&s, &script(&ids, 1, ""));
    let got = wait_for_file(&ids, &mut owner);
    let (gone, session) = (got[0].clone(), got[1].clone());
    assert_eq!(gone.len(), 64, "docker run -d prints the full id");
    wait_log(
        &s,
        &session,
        "the sidecar follows the container",
        &format!("following docker container {}", &gone[..12]),
    );
    // Someone else removes it, and a stranger takes its full id as a name.
    docker_ok(&["rm", "-f", &gone]);
    wait_log(
        &s,
        &session,
        "the sidecar sees it destroyed",
        &format!("docker container {} destroyed", &gone[..12]),
    );
    let stranger = docker_ok(&[
        "run",
        "-d",
        "--network",
        "none",
        "--name",
        &gone,
        IMAGE,
        "sleep",
        "600",
    ]);
    let _cleanup = Removes(vec![stranger.clone()]);
    unsafe_kill(owner.id() as i32, libc::SIGKILL);
    let _ = owner.wait();
    reclaimed(&s, &session);
    assert!(
        container_exists(&stranger),
        "a stranger named like a container the sidecar once followed was removed"
    );
}

/// Force-removes containers when the test ends, whatever happened.
struct Removes(Vec<String>);

impl Drop for Removes {
    fn drop(&mut self) {
        for id in &self.0 {
            let _ = Command::new("docker").args(["rm", "-f", id]).output();
        }
    }
}
