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
        text.contains("removing 1 followed sandboxes; following is whole, the settle pass lists"),
        "the followed container went first without a listing (its following whole since the \
         session began), the detached one was judged kept:\n{text}"
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

/// A sidecar whose following was whole since its session began removes what it followed
/// without listing first, and leaves completeness to its settle pass (issue 44). What
/// following cannot hold is still reclaimed at the owner's death, with no sweep: a labelled
/// network and a labelled container made behind the proxy's back in the program's last
/// instant (a network is never followed; the container's news may still be on its way).
/// Whether the first pass took the followed path here depends on whether the late
/// container's lookup was done at the kill (almost always); the test above shows that path
/// deterministically. Were the settle pass to skip its listing too, the network would stay.
#[test]
fn what_following_cannot_know_is_reclaimed_at_death_by_the_settle_pass() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("follow-whole-late");
    let ids = s.path().join("ids");
    let daemon =
        std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into());
    // After the first container (through the proxy, so claimed and followed) and the
    // sidecar's warm-up, the rest straight on the daemon, and the owner SIGKILLs itself.
    let late = format!(
        "sleep 1\n\
         n=$(docker -H {daemon} network create --internal $L sg-it-late-$$)\n\
         c=$(docker -H {daemon} run -d --network none $L {IMAGE} sleep 600)\n\
         printf '%s\\n%s\\n%s\\n' \"$n\" \"$c\" \"$SANDGUARD_SESSION\" >> {ids}.tmp\n\
         mv {ids}.tmp {ids}\n\
         kill -9 $$",
        ids = ids.display()
    );
    let mut owner = guarded_debug(&s, &script(&ids, 1, &late));
    let got = wait_for_file(&ids, &mut owner);
    let (followed, network, made_late, session) = (&got[0], &got[1], &got[2], &got[3]);
    let _cleanup = Removes(vec![followed.clone(), made_late.clone()]);
    let mut networks = Resources::default();
    networks.adopt_network(network);
    let _ = owner.wait();
    reclaimed(&s, session);
    let gone = |what: &str, id: &str| {
        !Command::new("docker")
            .args([what, "inspect", id])
            .output()
            .unwrap()
            .status
            .success()
    };
    let text = log(&s, session);
    assert!(
        gone("container", followed),
        "the followed container:\n{text}"
    );
    assert!(gone("container", made_late), "the late container:\n{text}");
    assert!(gone("network", network), "the labelled network:\n{text}");
}
