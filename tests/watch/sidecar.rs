//! Trust, on the sidecar's side: nothing that is not ours is removed, nothing
//! that is ours is leaked. Each test runs the real binary against the real daemon and failed
//! on the code before its fix; the name of the point it proves is in its doc comment.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;
use crate::watch::wrapper::{find_process, guarded, unsafe_kill, wait_for_file};

/// The labels as `docker run` arguments, for a guarded `sh` script.
pub(crate) const LABEL_ARGS: &str =
    r#"L=$(echo "$SANDGUARD_LABELS" | sed 's/^/--label /; s/,/ --label /g')"#;

/// The session's journal in the scratch state directory.
pub(crate) fn journal(s: &Scratch, session: &str) -> PathBuf {
    s.path()
        .join("state/sandguard/sessions")
        .join(format!("{session}.journal"))
}

/// One session as `sandguard sessions --json` shows it.
pub(crate) fn session(s: &Scratch, id: &str) -> serde_json::Value {
    let v = json(&run(sandguard(s).args(["sessions", "--json"])).stdout);
    v["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["session"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("session {id} is not in the ledger: {v}"))
}

/// Waits until the session's state is one of `states`.
pub(crate) fn wait_state(s: &Scratch, id: &str, states: &[&str]) -> String {
    let mut last = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        last = session(s, id)["state"].as_str().unwrap_or("").to_string();
        if states.contains(&last.as_str()) && session(s, id)["sidecar_alive"] == false {
            return last;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("session {id} did not reach {states:?} (it is {last})");
}

fn sidecar_of(session: &str) -> u32 {
    crate::watch::wrapper::sidecar_pid(session)
}

/// `sandguard -- sh -c SCRIPT` as pid 1 of a new pid namespace (`unshare --pid --fork
/// --mount-proc`), with `s`'s isolated environment: the script starts one container with the
/// session's labels, writes its id to `ids`, and sleeps.
pub(crate) fn unshared_owner(s: &Scratch, ids: &Path) -> Command {
    let script = format!(
        "set -e\n{LABEL_ARGS}\n\
         c=$(docker run -d --network none $L {IMAGE} sleep 600)\n\
         echo \"$c\" > {ids}.tmp; mv {ids}.tmp {ids}\n\
         sleep 600",
        ids = ids.display()
    );
    let mut unshare = Command::new("unshare");
    unshare
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(env!("CARGO_BIN_EXE_sandguard"))
        .args(["--", "sh", "-c", &script]);
    for (k, v) in sandguard(s).get_envs() {
        match v {
            Some(v) => unshare.env(k, v),
            None => unshare.env_remove(k),
        };
    }
    unshare
}

/// #4a: `sandguard detach docker <12-hex prefix>` spares the container it names, whose full
/// id is 64 hex digits; before, the prefix was compared as given and the container removed.
#[test]
fn a_detach_by_id_prefix_survives_the_owner() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("trust-detach-prefix");
    let ids = s.path().join("ids");
    let script = format!(
        "set -e\n{LABEL_ARGS}\n\
         kept=$(docker run -d --network none $L {IMAGE} sleep 600)\n\
         gone=$(docker run -d --network none $L {IMAGE} sleep 600)\n\
         sandguard detach docker $(echo $kept | cut -c1-12)\n\
         printf '%s\\n%s\\n%s\\n' \"$kept\" \"$gone\" \"$SANDGUARD_SESSION\" > {ids}.tmp; mv {ids}.tmp {ids}\n\
         exec sleep 600",
        ids = ids.display()
    );
    let mut owner = guarded(&s, &script);
    let got = wait_for_file(&ids, &mut owner);
    let (kept, gone, session) = (&got[0], &got[1], &got[2]);
    let mut r = Resources::default();
    r.adopt_container(kept);
    unsafe_kill(owner.id() as i32, libc::SIGKILL);
    let _ = owner.wait();
    assert_eq!(wait_state(&s, session, &["reclaimed"]), "reclaimed");
    assert!(!container_exists(gone), "the other container is reclaimed");
    assert!(
        container_exists(kept),
        "the container detached by prefix survives"
    );
}

/// SIGTERM to the owner and the sidecar together (systemd stop, `kill -TERM` of both)
/// reclaims. The owner here is *dying*, not dead, when the sidecar gets its SIGTERM: it
/// cleans up for 300 ms first, as programs do. Before, the stop won the `biased` select and
/// nothing was reclaimed.
#[test]
fn sigterm_to_owner_and_sidecar_together_still_reclaims() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("trust-term-both");
    let ids = s.path().join("ids");
    let script = format!(
        "set -e\n{LABEL_ARGS}\n\
         trap 'sleep 0.3; exit 0' TERM\n\
         c=$(docker run -d --network none $L {IMAGE} sleep 600)\n\
         printf '%s\\n%s\\n' \"$c\" \"$SANDGUARD_SESSION\" > {ids}.tmp; mv {ids}.tmp {ids}\n\
         sleep 600 & wait $!",
        ids = ids.display()
    );
    let mut owner = guarded(&s, &script);
    let got = wait_for_file(&ids, &mut owner);
    let sidecar = sidecar_of(&got[1]);
    let status = Command::new("kill")
        .args(["-TERM", &sidecar.to_string(), &owner.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let _ = owner.wait();
    assert_eq!(
        wait_state(&s, &got[1], &["reclaimed", "active"]),
        "reclaimed"
    );
    assert!(
        !container_exists(&got[0]),
        "the owner's container is reclaimed"
    );
}

/// The other half: SIGTERM to the sidecar alone, while its owner lives, stops it
/// without reclaiming (the session stays active for a sweep to judge).
#[test]
fn sigterm_to_the_sidecar_alone_reclaims_nothing() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("trust-term-sidecar");
    let ids = s.path().join("ids");
    let script = format!(
        "set -e\n{LABEL_ARGS}\n\
         c=$(docker run -d --network none $L {IMAGE} sleep 600)\n\
         printf '%s\\n%s\\n' \"$c\" \"$SANDGUARD_SESSION\" > {ids}.tmp; mv {ids}.tmp {ids}\n\
         exec sleep 600",
        ids = ids.display()
    );
    let mut owner = guarded(&s, &script);
    let got = wait_for_file(&ids, &mut owner);
    let mut r = Resources::default();
    r.adopt_container(&got[0]);
    unsafe_kill(sidecar_of(&got[1]) as i32, libc::SIGTERM);
    assert_eq!(wait_state(&s, &got[1], &["active", "reclaimed"]), "active");
    assert!(container_exists(&got[0]), "nothing was reclaimed");
}

/// `sandguard claim` returns 0 only once the claim is journaled and on disk. With the
/// sidecar frozen it does not return; once it thaws it does, and a SIGKILL of the sidecar
/// right after cannot lose the claim: the next sweep reclaims the container. Before, `claim`
/// returned at once while nothing was journaled.
#[test]
fn a_claim_is_durable_when_claim_returns() {
    require_docker();
    let _g = exclusive();
    let s = Scratch::new("trust-claim-durable");
    let dir = s.path().join("out");
    std::fs::create_dir_all(&dir).unwrap();
    let script = format!(
        "set -e\n\
         c=$(docker run -d --network none {IMAGE} sleep 600)\n\
         printf '%s\\n%s\\n' \"$c\" \"$SANDGUARD_SESSION\" > {d}/ids.tmp; mv {d}/ids.tmp {d}/ids\n\
         while [ ! -e {d}/go ]; do sleep 0.05; done\n\
         sandguard claim docker \"$c\"; touch {d}/claimed\n\
         exec sleep 600",
        d = dir.display()
    );
    let mut owner = guarded(&s, &script);
    let got = wait_for_file(&dir.join("ids"), &mut owner);
    let (container, session) = (&got[0], &got[1]);
    let mut r = Resources::default();
    r.adopt_container(container);
    let sidecar = sidecar_of(session);
    unsafe_kill(sidecar as i32, libc::SIGSTOP);
    // Whatever happens below, the sidecar does not stay frozen.
    struct Thaw(u32);
    impl Drop for Thaw {
        fn drop(&mut self) {
            let _ = Command::new("kill")
                .args(["-KILL", &self.0.to_string()])
                .status();
        }
    }
    let _thaw = Thaw(sidecar);
    std::fs::write(dir.join("go"), "").unwrap();
    // The claim has opened the journal to read its answer (it writes the line right after):
    // from then on it must keep waiting while the sidecar is frozen.
    let journal_path = journal(&s, session);
    eventually(
        Duration::from_secs(30),
        "`sandguard claim` has the journal open",
        || claim_reading(container, &journal_path),
    );
    let until = Instant::now() + Duration::from_millis(800);
    while Instant::now() < until {
        assert!(
            !dir.join("claimed").exists(),
            "`sandguard claim` returned while the sidecar could not journal the claim"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    unsafe_kill(sidecar as i32, libc::SIGCONT);
    eventually(Duration::from_secs(10), "the claim returns", || {
        dir.join("claimed").exists()
    });
    unsafe_kill(sidecar as i32, libc::SIGKILL);
    let text = std::fs::read_to_string(journal(&s, session)).unwrap();
    assert!(text.contains(&format!(
        "\"ev\":\"claim\",\"provider\":\"docker\",\"id\":\"{container}\""
    )));
    unsafe_kill(owner.id() as i32, libc::SIGKILL);
    let _ = owner.wait();
    let out = run(sandguard(&s).args(["sweep", "--provider", "docker"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        !container_exists(container),
        "the sweep reclaims the claimed container"
    );
}

/// Whether a `sandguard claim docker ID` process has `journal` open (it opens it just before
/// it writes its line, to read the sidecar's answer).
fn claim_reading(id: &str, journal: &Path) -> bool {
    let Some(pid) = find_process(&format!("claim docker {id}")) else {
        return false;
    };
    std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|mut fds| {
        fds.any(|fd| fd.is_ok_and(|fd| std::fs::read_link(fd.path()).is_ok_and(|p| p == journal)))
    })
}

/// A claim the sidecar can never act on (a Docker container *name*, a provider
/// that is not configured) is refused at once, `claim` exits 1 with the reason, and the
/// session still ends reclaimed, not pending. Before, `claim` exited 0 and the session stayed
/// pending forever.
#[test]
fn a_claim_that_can_never_be_acted_on_is_refused_at_once() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("trust-refuse");
    let dir = s.path().join("out");
    std::fs::create_dir_all(&dir).unwrap();
    let script = format!(
        "sandguard claim docker my-database > {d}/name.out 2>&1; echo $? > {d}/name.code\n\
         sandguard claim nosuchprovider abc > {d}/prov.out 2>&1; echo $? > {d}/prov.code\n\
         echo \"$SANDGUARD_SESSION\" > {d}/session.tmp; mv {d}/session.tmp {d}/session\n\
         exec sleep 600",
        d = dir.display()
    );
    let mut owner = guarded(&s, &script);
    let session = wait_for_file(&dir.join("session"), &mut owner).remove(0);
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    assert_eq!(read("name.code").trim(), "1", "{}", read("name.out"));
    assert!(read("name.out").contains("refused"), "{}", read("name.out"));
    assert!(
        read("name.out").contains("never a name"),
        "{}",
        read("name.out")
    );
    assert_eq!(read("prov.code").trim(), "1", "{}", read("prov.out"));
    assert!(
        read("prov.out").contains("not configured"),
        "{}",
        read("prov.out")
    );
    unsafe_kill(owner.id() as i32, libc::SIGKILL);
    let _ = owner.wait();
    assert_eq!(
        wait_state(&s, &session, &["reclaimed", "pending"]),
        "reclaimed"
    );
}

/// Sandguard as pid 1 of a pid namespace stays as init: when its program is SIGKILLed
/// the sidecar still reclaims, and the wrapper exits with the program's status (137) only
/// after that. Before, the exec made the program pid 1 and its death killed the sidecar.
#[test]
fn as_pid_1_the_wrapper_stays_init_until_the_reclaim_is_done() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("trust-pid1");
    let ids = s.path().join("ids");
    let mut unshare = unshared_owner(&s, &ids);
    let mut job = unshare
        .env("PATH", crate::watch::wrapper::path_with_sandguard())
        .quiet()
        .process_group(0)
        .spawn()
        .expect("unshare (util-linux) runs as root");
    let container = wait_for_file(&ids, &mut job).remove(0);
    let mut r = Resources::default();
    r.adopt_container(&container);
    // The program: the `sh -c` whose parent is the wrapper (pid 1 inside).
    let wrapper = children(job.id())
        .into_iter()
        .next()
        .expect("the wrapper runs");
    let program = children(wrapper)
        .into_iter()
        .find(|&p| cmdline(p).starts_with("sh -c"))
        .expect("the guarded program runs as the wrapper's child");
    unsafe_kill(program as i32, libc::SIGKILL);
    let status = job.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(137),
        "the program's status passes through"
    );
    assert!(
        !container_exists(&container),
        "the reclaim was done before pid 1 exited"
    );
}

/// Issue 25: the wrapper execs the program without waiting for its sidecar, which it starts
/// detached through a process between. The program inherits no child of sandguard's (that
/// process was reaped before the exec), and the sidecar is nobody's child, in another
/// session (the terminal's signals never reach it), in `/`.
#[test]
fn the_program_inherits_no_child_and_its_sidecar_is_detached() {
    let s = Scratch::new("trust-detached");
    let out = s.path().join("out");
    // `read` is a shell builtin: the check starts no child of its own.
    let script = format!(
        "read -r kids < /proc/$$/task/$$/children || true\n\
         echo \"$$ $SANDGUARD_SESSION [$kids]\" > {out}.tmp; mv {out}.tmp {out}\n\
         sleep 600",
        out = out.display()
    );
    let mut job = crate::watch::wrapper::guarded(&s, &script);
    let got = wait_for_file(&out, &mut job).remove(0);
    let (program, rest) = got.split_once(' ').unwrap();
    let (session, kids) = rest.split_once(' ').unwrap();
    assert_eq!(kids, "[]", "the program was given a child of sandguard's");
    let program: u32 = program.parse().unwrap();
    assert_eq!(
        program,
        job.id(),
        "the program is the wrapper's pid, exec'd"
    );
    let sidecar = sidecar_of(session);
    // (parent, session) from /proc/PID/stat.
    let stat = |pid: u32| -> (u32, u32) {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<&str> = text.rsplit_once(") ").unwrap().1.split(' ').collect();
        (fields[1].parse().unwrap(), fields[3].parse().unwrap())
    };
    let (parent, sid) = stat(sidecar);
    assert_ne!(parent, program, "the sidecar is the program's child");
    assert!(
        !children(program).contains(&sidecar),
        "the sidecar is the program's child"
    );
    assert_ne!(
        sid,
        stat(program).1,
        "the sidecar shares the program's session"
    );
    assert_eq!(
        std::fs::read_link(format!("/proc/{sidecar}/cwd")).unwrap(),
        Path::new("/")
    );
}

fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn cmdline(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&raw).replace('\0', " ")
}

/// The daemonized sidecar keeps none of the wrapper's other descriptors (a parent
/// waiting for EOF on a pipe it gave the wrapper gets it when the program ends, not when the
/// reclaim does) and leaves the working directory. Before, EOF came only after the sidecar
/// exited, and its cwd was the wrapper's.
#[test]
fn the_sidecar_keeps_no_inherited_descriptor_and_leaves_the_cwd() {
    let s = Scratch::new("trust-fds");
    let config = s.path().join("slow.toml");
    // A long settle keeps the sidecar alive well after the program ended.
    std::fs::write(
        &config,
        "[providers.docker]\nenabled = false\n[reclaim]\nsettle = \"6s\"\n",
    )
    .unwrap();
    let work = s.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let (read_end, write_end) = sandguard::testing::unix::pipe().unwrap();
    let inherited = write_end.as_raw_fd();
    let mut cmd = sandguard(&s);
    cmd.env("SANDGUARD_CONFIG", &config)
        .current_dir(&work)
        .args(["--", "sh", "-c", "echo $SANDGUARD_SESSION"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: between fork and exec only fcntl runs; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            let flags = libc::fcntl(inherited, libc::F_GETFD);
            libc::fcntl(inherited, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    drop(write_end);
    let session = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let sidecar = sidecar_of(&session);
    let cwd = std::fs::read_link(format!("/proc/{sidecar}/cwd")).unwrap();
    assert_eq!(cwd, Path::new("/"), "the sidecar left the wrapper's cwd");
    let started = Instant::now();
    let mut pipe = std::fs::File::from(unsafe_owned(read_end));
    let mut buf = Vec::new();
    let _ = pipe.read_to_end(&mut buf);
    assert!(
        Path::new(&format!("/proc/{sidecar}")).exists(),
        "EOF on the inherited pipe came only when the sidecar exited ({:?} later)",
        started.elapsed()
    );
}

fn unsafe_owned(fd: OwnedFd) -> OwnedFd {
    // A plain move; kept as a function so the test reads as "the read end".
    // SAFETY: into_raw_fd gives up ownership, from_raw_fd takes it back, once.
    unsafe { OwnedFd::from_raw_fd(std::os::fd::IntoRawFd::into_raw_fd(fd)) }
}

/// `~` in `state_dir` is the home directory (the shipped example's default made
/// `./~/…` before), and a relative state directory is a config error naming the key.
#[test]
fn the_state_dir_expands_tilde_and_refuses_relative_paths() {
    let s = Scratch::new("trust-tilde");
    let work = s.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let config = s.file(
        "tilde.toml",
        "state_dir = \"~/sg-state\"\n[providers.docker]\nenabled = false\n",
    );
    let out = run(sandguard(&s)
        .env("SANDGUARD_CONFIG", &config)
        .current_dir(&work)
        .args(["--", "true"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(s.path().join("sg-state/sessions").is_dir(), "~ is $HOME");
    assert!(!work.join("~").exists(), "no ./~ directory");

    std::fs::write(&config, "state_dir = \"rel/state\"\n").unwrap();
    let out = run(sandguard(&s)
        .env("SANDGUARD_CONFIG", &config)
        .current_dir(&work)
        .args(["sessions"]));
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("tilde.toml:1: key `state_dir`"),
        "{}",
        out.stderr
    );
    let out = run(sandguard(&s)
        .env("SANDGUARD_CONFIG", &config)
        .current_dir(&work)
        .args(["--", "true"]));
    assert_eq!(out.code, 125, "the wrapper's own failure: {}", out.stderr);
    assert!(!work.join("rel").exists());
}

/// A grace of 0 makes no sense: a config error (2), the wrapper's own failure (125).
#[test]
fn a_zero_grace_is_a_config_error() {
    let s = Scratch::new("trust-grace0");
    let out = run(sandguard(&s).args(["run", "--grace", "0", "--", "true"]));
    assert_eq!(out.code, 125, "{}", out.stderr);
    assert!(out.stderr.contains("--grace"), "{}", out.stderr);
    let out = run(sandguard(&s).env("SANDGUARD_GRACE", "0").args(["sessions"]));
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("SANDGUARD_GRACE"), "{}", out.stderr);
}
