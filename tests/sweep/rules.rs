//! Trust, on the sweep's side: owners that cannot be judged are left, a session
//! stays the owner of its label after it ends, detaches in the ledger are honoured, a session
//! is final only when every provider in it is done, failures are reported, journals and the
//! ledger do not grow without bound. Real binary, real daemon; each test failed before its fix.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::*;
use crate::watch::sidecar::{journal, session, wait_state, LABEL_ARGS};
use crate::watch::wrapper::{
    guarded, path_with_sandguard, sidecar_pid, unsafe_kill, wait_for_file,
};
use sandguard::labels::{OWNER, SESSION};

/// A guarded owner that makes one labelled container, writes its id and session, and sleeps.
fn owner_with_container(s: &Scratch, extra: &str) -> (crate::watch::wrapper::Job, String, String) {
    let ids = s.path().join(format!("ids-{}", unique()));
    let script = format!(
        "set -e\n{LABEL_ARGS}\n\
         c=$(docker run -d --network none $L {IMAGE} sleep 600)\n\
         {extra}\n\
         printf '%s\\n%s\\n' \"$c\" \"$SANDGUARD_SESSION\" > {ids}.tmp; mv {ids}.tmp {ids}\n\
         exec sleep 600",
        ids = ids.display()
    );
    let mut owner = guarded(s, &script);
    let got = wait_for_file(&ids, &mut owner);
    (owner, got[0].clone(), got[1].clone())
}

fn sweep(s: &Scratch, args: &[&str]) -> Run {
    run(sandguard(s).args(["sweep"]).args(args))
}

/// A live owner in another pid namespace (a CI job in a container that shares the host's
/// Docker socket) is unknown from here, never dead: a sweep from the host leaves its
/// container. Before, its pid was looked up in the host's /proc and found dead.
#[test]
fn an_owner_in_another_pid_namespace_is_unknown_not_dead() {
    require_docker();
    let _g = exclusive();
    let inner = Scratch::new("trust-ns-inner");
    let host = Scratch::new("trust-ns-host");
    let ids = inner.path().join("ids");
    let mut unshare = crate::watch::sidecar::unshared_owner(&inner, &ids);
    let job = unshare
        .env("PATH", path_with_sandguard())
        .process_group(0)
        .quiet()
        .spawn()
        .unwrap();
    let mut job = crate::watch::wrapper::Job(job);
    let container = wait_for_file(&ids, &mut job).remove(0);
    let mut r = Resources::default();
    r.adopt_container(&container);
    let out = sweep(&host, &["--provider", "docker", "--json"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        container_exists(&container),
        "a live owner's container was removed"
    );
    let v = json(&out.stdout);
    let decision = v["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["instance_id"] == container.as_str())
        .cloned()
        .unwrap_or_default();
    assert_eq!(decision["verdict"], "leave", "{v}");
}

/// An owner on "this machine, another boot" is dead only if this machine is known to
/// have run that boot (the state directory's list of boots); a boot it never recorded (a
/// cloned image with a baked-in machine id) is unknown. Before, any other boot was dead.
#[test]
fn an_unrecorded_boot_is_unknown_and_a_recorded_one_is_dead() {
    require_docker();
    let _g = exclusive();
    let s = Scratch::new("trust-boots");
    let me = sandguard::testing::identity::Identity::current().unwrap();
    let other_boot = "0123456789abcdef";
    let owner = sandguard::testing::identity::Identity {
        boot: other_boot.into(),
        ..me
    }
    .to_label();
    let mut r = Resources::default();
    let session_id = format!("b{}", unique());
    let c = r.container(&[(SESSION, &session_id), (OWNER, &owner)]);
    let out = sweep(&s, &["--provider", "docker"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        container_exists(&c),
        "an owner from a boot never recorded here was judged dead"
    );
    // This machine ran that boot: now its owners are dead.
    let boots = s.path().join("state/sandguard/boots");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&boots)
        .unwrap();
    writeln!(f, "{other_boot}").unwrap();
    let out = sweep(&s, &["--provider", "docker"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        !container_exists(&c),
        "an owner from an ended boot of this machine is dead"
    );
}

/// #4b: a container detached by its full id survives its session's reclaim *and* the next
/// sweep: the sweep honours the ledger's detach records, not only the label. Before, the
/// sweep removed it (its owner was dead).
#[test]
fn a_detached_container_survives_the_next_sweep() {
    require_docker();
    let _g = exclusive();
    let s = Scratch::new("trust-detach-sweep");
    let (mut owner, container, session_id) =
        owner_with_container(&s, "sandguard detach docker \"$c\"");
    let mut r = Resources::default();
    r.adopt_container(&container);
    unsafe_kill(owner.id() as i32, libc::SIGKILL);
    let _ = owner.wait();
    assert_eq!(wait_state(&s, &session_id, &["reclaimed"]), "reclaimed");
    assert!(container_exists(&container));
    let out = sweep(&s, &["--provider", "docker"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        container_exists(&container),
        "the sweep removed a detached container"
    );
}

/// A container created after the session's last listing (a child that finished after
/// its owner exited), stamped with the session label only (README's quick start), is the
/// session's: the ledger knows the session ended and its owner is dead, so a sweep reclaims
/// it. Before, it "names no owner" and was left to a TTL it does not have.
#[test]
fn a_container_that_appears_after_the_reclaim_is_swept() {
    require_docker();
    let _g = exclusive();
    let s = Scratch::new("trust-late");
    let config = s.file("fast.toml", "[reclaim]\nsettle = \"300ms\"\n");
    let out = s.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let script = format!(
        "echo \"$SANDGUARD_SESSION\" > {o}/session\n\
         (while [ ! -e {o}/go ]; do sleep 0.05; done; \
          docker run -d --network none --label sandguard.session=$SANDGUARD_SESSION {IMAGE} sleep 600 > {o}/late.tmp; \
          mv {o}/late.tmp {o}/late) >/dev/null 2>&1 &\n\
         exit 0",
        o = out.display()
    );
    let mut cmd = sandguard(&s);
    let status = cmd
        .env("SANDGUARD_CONFIG", &config)
        .env("PATH", path_with_sandguard())
        .args(["--", "sh", "-c", &script])
        .quiet()
        .status()
        .unwrap();
    assert!(status.success());
    let session_id = std::fs::read_to_string(out.join("session"))
        .unwrap()
        .trim()
        .to_string();
    assert_eq!(
        wait_state(&s, &session_id, &["reclaimed", "clean"]),
        "reclaimed"
    );
    std::fs::write(out.join("go"), "").unwrap();
    eventually(Duration::from_secs(20), "the late container exists", || {
        out.join("late").exists()
    });
    let late = std::fs::read_to_string(out.join("late"))
        .unwrap()
        .trim()
        .to_string();
    let mut r = Resources::default();
    r.adopt_container(&late);
    let swept =
        run(sandguard(&s)
            .env("SANDGUARD_CONFIG", &config)
            .args(["sweep", "--provider", "docker"]));
    assert_eq!(swept.code, 0, "{}{}", swept.stdout, swept.stderr);
    assert!(!container_exists(&late), "{}", swept.stdout);
}

/// A plugin whose listing fails while `broken` exists beside it, and whose removal always
/// fails while `stuck` exists; otherwise it holds nothing.
fn flaky_plugin(dir: &Path) -> PathBuf {
    let script = dir.join("bin/sandguard-provider-flaky");
    std::fs::create_dir_all(script.parent().unwrap()).unwrap();
    let text = format!(
        r#"#!/bin/sh
d={d}
for verb; do :; done
case "$verb" in
list) cat >/dev/null; [ -e "$d/broken" ] && {{ echo "listing is down" >&2; exit 1; }}
  if [ -e "$d/held" ]; then cat "$d/held"; else echo '{{"sandboxes":[]}}'; fi ;;
remove) cat >/dev/null; [ -e "$d/stuck" ] && {{ echo '{{"error":"quota frozen","retry":false}}'; exit 0; }}
  echo '{{"result":"removed"}}' ;;
describe) echo '{{"capabilities":{{"labels":true,"ttl":false}}}}' ;;
*) exit 2 ;;
esac
"#,
        d = dir.display()
    );
    write_executable(&script, &text);
    script
}

/// `sandguard -- sh -c SCRIPT` with the plugin and `config`, its owner SIGKILLed (and waited
/// for) once it has written `file`; the lines of `file`.
fn killed_owner(s: &Scratch, config: &Path, script: &str, file: &Path) -> Vec<String> {
    let mut cmd = sandguard(s);
    with_plugin(s, &mut cmd);
    let job = cmd
        .env("SANDGUARD_CONFIG", config)
        .args(["--", "sh", "-c", script])
        .quiet()
        .spawn()
        .unwrap();
    let mut owner = crate::watch::wrapper::Job(job);
    let got = wait_for_file(file, &mut owner);
    unsafe_kill(owner.id() as i32, libc::SIGKILL);
    let _ = owner.wait();
    got
}

/// `sandguard ARGS` with the flaky plugin on its PATH and `config`, run to its end.
fn sweep_with_plugin(s: &Scratch, config: &Path, args: &[&str]) -> Run {
    let mut cmd = sandguard(s);
    with_plugin(s, &mut cmd);
    run(cmd.env("SANDGUARD_CONFIG", config).args(args))
}

fn with_plugin(s: &Scratch, cmd: &mut Command) {
    cmd.env(
        "PATH",
        format!(
            "{}:{}",
            s.path().join("bin").display(),
            path_with_sandguard()
        ),
    );
}

/// `sweep --provider docker` must not end a session that is pending on another provider
/// (a plugin whose listing failed); only a sweep that lists that provider too finishes it.
/// Before, the docker-only sweep marked it reclaimed and the next full sweep left it.
#[test]
fn a_sweep_of_one_provider_does_not_end_a_session_pending_on_another() {
    require_docker();
    let _g = exclusive();
    let s = Scratch::new("trust-subset");
    flaky_plugin(s.path());
    std::fs::write(s.path().join("broken"), "").unwrap();
    let config = s.file("short.toml", "[reclaim]\ndeadline = \"2s\"\nsettle = \"0\"\nretry_max = \"200ms\"\nretry_initial = \"50ms\"\n");
    let ids = s.path().join("ids");
    let script = format!(
        "set -e\n{LABEL_ARGS}\n\
         c=$(docker run -d --network none $L {IMAGE} sleep 600)\n\
         printf '%s\\n%s\\n' \"$c\" \"$SANDGUARD_SESSION\" > {ids}.tmp; mv {ids}.tmp {ids}\n\
         exec sleep 600",
        ids = ids.display()
    );
    let got = killed_owner(&s, &config, &script, &ids);
    let (container, session_id) = (&got[0], &got[1]);
    assert_eq!(
        wait_state(&s, session_id, &["pending", "reclaimed"]),
        "pending"
    );
    assert!(
        !container_exists(container),
        "docker was reclaimed by the sidecar"
    );
    std::fs::remove_file(s.path().join("broken")).unwrap();
    let out = sweep_with_plugin(&s, &config, &["sweep", "--provider", "docker"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(
        session(&s, session_id)["state"],
        "pending",
        "a docker-only sweep ended a session pending on the plugin"
    );
    let out = sweep_with_plugin(&s, &config, &["sweep"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(session(&s, session_id)["state"], "reclaimed");
}

/// A session that cannot be finished (a removal the provider keeps refusing) stays
/// pending, and sweeping it again and again adds nothing to its journal. Before, every sweep
/// appended reclaim_start, failed and end again.
#[test]
fn sweeping_an_unfinishable_session_does_not_grow_its_journal() {
    require_docker();
    let _g = exclusive();
    let s = Scratch::new("trust-growth");
    flaky_plugin(s.path());
    std::fs::write(s.path().join("stuck"), "").unwrap();
    let config = s.file(
        "short.toml",
        "[reclaim]\ndeadline = \"2s\"\nsettle = \"0\"\n",
    );
    let out = s.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let script = format!(
        "sandguard claim flaky box-1\necho \"$SANDGUARD_SESSION\" > {o}/s.tmp; mv {o}/s.tmp {o}/s\nexec sleep 600",
        o = out.display()
    );
    let session_id = killed_owner(&s, &config, &script, &out.join("s")).remove(0);
    assert_eq!(
        wait_state(&s, &session_id, &["pending", "reclaimed"]),
        "pending"
    );
    let lines = || {
        std::fs::read_to_string(journal(&s, &session_id))
            .unwrap()
            .lines()
            .count()
    };
    let sweep_all = || {
        let out = sweep_with_plugin(&s, &config, &["sweep", "--provider", "flaky"]);
        assert_eq!(
            out.code, 1,
            "a pending removal is a failure: {}{}",
            out.stdout, out.stderr
        );
    };
    sweep_all();
    let after_one = lines();
    sweep_all();
    sweep_all();
    assert_eq!(lines(), after_one, "the journal grew while nothing changed");
    assert_eq!(session(&s, &session_id)["state"], "pending");
}

/// A sweep that cannot take a dead owner's journal (a reader holds it) reports an
/// error and exits 1; nothing is printed as reclaimed and nothing is removed. Before, it
/// exited 0 as if it had reclaimed.
#[test]
fn a_sweep_that_cannot_take_a_journal_fails_and_says_so() {
    require_docker();
    let _g = exclusive();
    let s = Scratch::new("trust-locked");
    let (mut owner, container, session_id) = owner_with_container(&s, "");
    let sidecar = sidecar_pid(&session_id);
    unsafe_kill(sidecar as i32, libc::SIGKILL);
    eventually(Duration::from_secs(5), "the sidecar is gone", || {
        !Path::new(&format!("/proc/{sidecar}")).exists()
    });
    unsafe_kill(owner.id() as i32, libc::SIGKILL);
    let _ = owner.wait();
    let reader = Command::new("flock")
        .args(["-s"])
        .arg(journal(&s, &session_id))
        .args(["sleep", "60"])
        .process_group(0)
        .spawn()
        .unwrap();
    let reader = crate::watch::wrapper::Job(reader);
    eventually(Duration::from_secs(5), "the reader holds the lock", || {
        let f = std::fs::File::open(journal(&s, &session_id)).unwrap();
        !sandguard::testing::unix::try_lock_exclusive(&f).unwrap_or(true)
    });
    let out = sweep(&s, &["--provider", "docker"]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(
        format!("{}{}", out.stdout, out.stderr).contains("was not reclaimed"),
        "{}{}",
        out.stdout,
        out.stderr
    );
    assert!(container_exists(&container));
    drop(reader);
    let out = sweep(&s, &["--provider", "docker"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(!container_exists(&container));
}

/// Ended sessions are pruned (by `sessions --prune` and by every sweep, after
/// `[sweep] prune_after`); a session that is not final never is. Before, the ledger kept two
/// files per session forever.
#[test]
fn ended_sessions_are_pruned_and_others_kept() {
    let s = Scratch::new("trust-prune");
    let config = s.file("quiet.toml", "[providers.docker]\nenabled = false\n[reclaim]\nsettle = \"0\"\n[sweep]\nprune_after = \"1ms\"\n");
    let sg = || {
        let mut c = sandguard(&s);
        c.env("SANDGUARD_CONFIG", &config);
        c
    };
    for _ in 0..3 {
        assert_eq!(run(sg().args(["--", "true"])).code, 0);
    }
    let listed = || {
        json(&run(sg().args(["sessions", "--json"])).stdout)["sessions"]
            .as_array()
            .unwrap()
            .len()
    };
    eventually(Duration::from_secs(10), "three sessions ended", || {
        let v = json(&run(sg().args(["sessions", "--json"])).stdout);
        v["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["state"] == "reclaimed" || x["state"] == "clean")
            .count()
            == 3
    });
    // One that is still running must stay.
    let mut live = sg().args(["--", "sleep", "60"]).quiet().spawn().unwrap();
    eventually(Duration::from_secs(10), "the live session is there", || {
        listed() == 4
    });
    let out = run(sg().args(["sessions", "--prune", "--older-than", "1ms"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(listed(), 1, "only the live session is left");
    let files = std::fs::read_dir(s.path().join("state/sandguard/sessions"))
        .unwrap()
        .count();
    assert!(files <= 2, "{files} files left for one session");
    let _ = live.kill();
    let _ = live.wait();
    eventually(Duration::from_secs(10), "it ended", || {
        let v = json(&run(sg().args(["sessions", "--json"])).stdout);
        v["sessions"][0]["sidecar_alive"] == false
    });
    // Not a wait for anything: the session must be older than `prune_after` (1 ms).
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(run(sg().args(["sweep"])).code, 0);
    assert_eq!(listed(), 0, "the sweep pruned it");
}

/// A TCP forwarder to the Docker socket that can be taken down (every connection, live ones
/// included, is cut, and new ones are closed at once) and brought back.
struct Outage {
    addr: String,
    down: Arc<AtomicBool>,
    live: Arc<Mutex<Vec<TcpStream>>>,
    /// When connections were cut at once, while down.
    refused: Arc<Mutex<Vec<Instant>>>,
}

impl Outage {
    fn start() -> Outage {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = format!("tcp://{}", listener.local_addr().unwrap());
        let down = Arc::new(AtomicBool::new(false));
        let live: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let refused: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let (d, l, r) = (down.clone(), live.clone(), refused.clone());
        std::thread::spawn(move || {
            for tcp in listener.incoming().flatten() {
                if d.load(Ordering::SeqCst) {
                    r.lock().unwrap().push(Instant::now());
                    let _ = tcp.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(unix) = std::os::unix::net::UnixStream::connect("/var/run/docker.sock")
                else {
                    continue;
                };
                l.lock().unwrap().push(tcp.try_clone().unwrap());
                let (mut tr, mut uw) = (tcp.try_clone().unwrap(), unix.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut tr, &mut uw);
                    let _ = uw.shutdown(Shutdown::Write);
                });
                let (mut ur, mut tw) = (unix, tcp);
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16384];
                    while let Ok(n) = ur.read(&mut buf) {
                        if n == 0 || tw.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = tw.shutdown(Shutdown::Both);
                });
            }
        });
        Outage {
            addr,
            down,
            live,
            refused,
        }
    }

    /// The time between the first and the last connection refused while down.
    fn refused_over(&self) -> Duration {
        let refused = self.refused.lock().unwrap();
        match (refused.first(), refused.last()) {
            (Some(first), Some(last)) => *last - *first,
            _ => Duration::ZERO,
        }
    }

    fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
        if down {
            for c in self.live.lock().unwrap().drain(..) {
                let _ = c.shutdown(Shutdown::Both);
            }
        }
    }
}

/// A Docker outage of a few seconds during the reclaim leaves nothing behind: listings
/// are retried with backoff until the deadline, like removals. Before, the listing was tried
/// twice (first pass, settle pass), the session left pending and the container running.
#[test]
fn a_short_docker_outage_during_the_reclaim_leaves_nothing_behind() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("trust-outage");
    let outage = Outage::start();
    let config = s.file("outage.toml", "[reclaim]\ndeadline = \"30s\"\nsettle = \"1s\"\nretry_initial = \"100ms\"\nretry_max = \"500ms\"\n");
    let ids = s.path().join("ids");
    let script = format!(
        "set -e\n{LABEL_ARGS}\nexport DOCKER_HOST=unix:///var/run/docker.sock\n\
         c=$(docker run -d --network none $L {IMAGE} sleep 600)\n\
         printf '%s\\n%s\\n' \"$c\" \"$SANDGUARD_SESSION\" > {ids}.tmp; mv {ids}.tmp {ids}\n\
         exec sleep 600",
        ids = ids.display()
    );
    let job = sandguard(&s)
        .env("SANDGUARD_CONFIG", &config)
        .env("DOCKER_HOST", &outage.addr)
        .env("PATH", path_with_sandguard())
        .args(["--", "sh", "-c", &script])
        .quiet()
        .spawn()
        .unwrap();
    let mut owner = crate::watch::wrapper::Job(job);
    let got = wait_for_file(&ids, &mut owner);
    let (container, session_id) = (&got[0], &got[1]);
    let mut r = Resources::default();
    r.adopt_container(container);
    outage.set_down(true);
    unsafe_kill(owner.id() as i32, libc::SIGKILL);
    let _ = owner.wait();
    // The outage lasts past the first listing and the settle listing: the sidecar's
    // connections are refused over more than the settle time (1 s), so it has retried.
    eventually(
        Duration::from_secs(25),
        "the sidecar's listings are refused past the settle listing",
        || outage.refused_over() > Duration::from_millis(1500),
    );
    assert!(
        container_exists(container),
        "nothing can be removed during the outage"
    );
    outage.set_down(false);
    assert_eq!(
        wait_state(&s, session_id, &["reclaimed", "pending"]),
        "reclaimed"
    );
    assert!(!container_exists(container));
}
