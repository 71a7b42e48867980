//! `sandguard sweep` against the real daemon and the real ledger: dead sidecars, dead owners,
//! orphans by label, expired TTLs, adoption of a live owner, dry runs.

use std::time::Duration;

use crate::support::*;
use crate::watch::wrapper::{guarded, script, sidecar_pid, unsafe_kill, wait_for_file};
use sandguard::labels::{DETACHED, EXPIRES, OWNER, SESSION};

fn session_of(s: &Scratch) -> String {
    let v = json(&run(sandguard(s).args(["sessions", "--json"])).stdout);
    v["sessions"][0]["session"]
        .as_str()
        .expect("one session")
        .to_string()
}

fn kill_sidecar(session: &str) {
    let pid = sidecar_pid(session);
    unsafe_kill(pid as i32, libc::SIGKILL);
    eventually(Duration::from_secs(5), "the sidecar is gone", || {
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
    });
}

#[test]
fn a_dead_sidecar_and_then_a_dead_owner_are_swept_claims_included() {
    require_docker();
    let _g = exclusive();
    let s = Scratch::new("sweep-dead");
    let ids = s.path().join("ids");
    let mut owner = guarded(&s, &script(&ids, "sleep 3600"));
    let containers = wait_for_file(&ids, &mut owner);
    let session = session_of(&s);
    kill_sidecar(&session);
    // Owner alive, sidecar dead: a one-shot sweep adopts (reports) and removes nothing.
    let out = run(sandguard(&s).args(["sweep"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains(&format!("adopt session {session}")),
        "{}",
        out.stdout
    );
    assert!(containers.iter().all(|c| container_exists(c)));
    // Now the owner dies with nobody watching: only the sweep can clean up.
    unsafe_kill(owner.id() as i32, libc::SIGKILL);
    let _ = owner.wait();
    // Nobody is left to reclaim: the ledger says the session is still active, with no
    // sidecar (its lock is free), and everything is still there.
    let v = json(&run(sandguard(&s).args(["sessions", "--json"])).stdout);
    assert_eq!(
        (
            &v["sessions"][0]["state"],
            &v["sessions"][0]["sidecar_alive"]
        ),
        (&serde_json::json!("active"), &serde_json::json!(false)),
        "{v}"
    );
    assert!(
        containers.iter().all(|c| container_exists(c)),
        "nothing reclaims without a sidecar"
    );
    let dry = run(sandguard(&s).args(["sweep", "--dry-run"]));
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    assert!(
        dry.stdout
            .contains(&format!("would reclaim session {session}")),
        "{}",
        dry.stdout
    );
    assert!(
        containers.iter().all(|c| container_exists(c)),
        "a dry run touches nothing"
    );
    let out = run(sandguard(&s).args(["sweep", "--json"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let v = json(&out.stdout);
    assert_eq!(v["clean"], true);
    assert!(
        containers.iter().all(|c| !container_exists(c)),
        "all four, the merely claimed one too"
    );
    let v = json(&run(sandguard(&s).args(["sessions", "--json"])).stdout);
    assert_eq!(v["sessions"][0]["state"], "reclaimed");
}

#[test]
fn orphans_are_judged_by_owner_ttl_and_detachment() {
    require_docker();
    let _g = exclusive();
    let s = Scratch::new("sweep-orphans");
    let mut r = Resources::default();
    let (dead, alive) = (dead_owner_label(), live_owner_label());
    let elsewhere = "aaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-1-1";
    let past = (sandguard::testing::timefmt::now_unix() - 10).to_string();
    let session = format!("o{}", unique());
    let dead_owner = r.container(&[(SESSION, &session), (OWNER, &dead)]);
    let live_owner = r.container(&[(SESSION, &session), (OWNER, &alive)]);
    let other_machine = r.container(&[(SESSION, &session), (OWNER, elsewhere)]);
    let expired = r.container(&[(SESSION, &session), (OWNER, &alive), (EXPIRES, &past)]);
    let detached = r.container(&[(SESSION, &session), (OWNER, &dead), (DETACHED, "true")]);
    let expired_detached = r.container(&[
        (SESSION, &session),
        (OWNER, &alive),
        (DETACHED, "true"),
        (EXPIRES, &past),
    ]);
    let stranger = r.container(&[(OWNER, &dead)]);
    let out = run(sandguard(&s).args(["sweep", "--provider", "docker"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(!container_exists(&dead_owner), "dead owner: reclaimed");
    assert!(
        !container_exists(&expired),
        "expired: reclaimed even with a live owner"
    );
    assert!(
        !container_exists(&expired_detached),
        "expired and detached: reclaimed"
    );
    assert!(container_exists(&live_owner), "live owner: left");
    assert!(
        container_exists(&other_machine),
        "another machine: TTL only"
    );
    assert!(container_exists(&detached), "detached: only its TTL");
    assert!(container_exists(&stranger), "no session label: not ours");
}

#[test]
fn the_service_adopts_a_live_owner_and_reclaims_when_it_dies() {
    require_docker();
    let _g = exclusive();
    let s = Scratch::new("sweep-every");
    let ids = s.path().join("ids");
    let mut owner = guarded(&s, &script(&ids, "sleep 3600"));
    let containers = wait_for_file(&ids, &mut owner);
    kill_sidecar(&session_of(&s));
    let mut service = sandguard(&s)
        .args(["sweep", "--every", "1s", "--provider", "docker"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    eventually(
        Duration::from_secs(10),
        "the service adopted the session",
        || {
            let v = json(&run(sandguard(&s).args(["sessions", "--json"])).stdout);
            v["sessions"][0]["sidecar_alive"] == true
        },
    );
    unsafe_kill(owner.id() as i32, libc::SIGKILL);
    let _ = owner.wait();
    eventually(
        Duration::from_secs(5),
        "the adopted owner's containers are reclaimed at its death",
        || containers.iter().all(|c| !container_exists(c)),
    );
    unsafe_kill(service.id() as i32, libc::SIGTERM);
    assert!(service.wait().unwrap().success());
}

/// A sweep whose stderr is read line by line until it says it waits for `sweep.lock`.
struct WaitingSweep {
    child: std::process::Child,
    waiting: std::sync::mpsc::Receiver<()>,
    reader: std::thread::JoinHandle<String>,
}

impl WaitingSweep {
    fn start(s: &Scratch) -> WaitingSweep {
        use std::io::BufRead;
        let mut child = sandguard(s)
            .env("SANDGUARD_LOG", "info")
            .args(["sweep", "--provider", "docker", "--json"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, waiting) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut text = String::new();
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if line.contains("waiting for another sweep") {
                    let _ = tx.send(());
                }
                text.push_str(&line);
                text.push('\n');
            }
            text
        });
        WaitingSweep {
            child,
            waiting,
            reader,
        }
    }

    /// Its `--json` report, once it has ended (successfully).
    fn finish(mut self) -> serde_json::Value {
        let mut stdout = String::new();
        std::io::Read::read_to_string(self.child.stdout.as_mut().unwrap(), &mut stdout).unwrap();
        let status = self.child.wait().unwrap();
        let stderr = self.reader.join().unwrap();
        assert!(status.success(), "{status}: {stdout}{stderr}");
        json(&stdout)
    }
}

#[test]
fn concurrent_sweeps_serialise_and_agree() {
    require_docker();
    let _g = exclusive();
    let s = Scratch::new("sweep-twice");
    let mut r = Resources::default();
    let dead = dead_owner_label();
    let session = format!("c{}", unique());
    let ids: Vec<String> = (0..4)
        .map(|_| r.container(&[(SESSION, &session), (OWNER, &dead)]))
        .collect();
    // The state directory exists once any command has opened it; then this test holds the
    // lock a sweep takes.
    assert_eq!(run(sandguard(&s).args(["sessions"])).code, 0);
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(s.path().join("state/sandguard/sweep.lock"))
        .unwrap();
    assert!(sandguard::testing::unix::try_lock_exclusive(&lock).unwrap());
    let sweeps = [WaitingSweep::start(&s), WaitingSweep::start(&s)];
    for sweep in &sweeps {
        assert!(
            sweep.waiting.recv_timeout(Duration::from_secs(30)).is_ok(),
            "a sweep went ahead while another held sweep.lock"
        );
    }
    assert!(
        ids.iter().all(|c| container_exists(c)),
        "nothing is removed while the lock is held"
    );
    drop(lock);
    let reports = sweeps.map(WaitingSweep::finish);
    assert!(ids.iter().all(|c| !container_exists(c)));
    // One after the other: the first removed all four, the second found none of them.
    let removed = |v: &serde_json::Value| -> Vec<String> {
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| ids.iter().any(|c| x["instance_id"] == c.as_str()))
            .map(|x| x["outcome"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let mut counts = reports.iter().map(|v| removed(v).len()).collect::<Vec<_>>();
    counts.sort();
    assert_eq!(counts, [0, 4], "{reports:?}");
    assert!(reports.iter().all(|v| v["clean"] == true), "{reports:?}");
}
