//! A restarted sidecar resumes its session: `sandguard watch --session S`
//! whose journal exists and whose sidecar is gone takes the session over and guards what the
//! session held (claims the dead sidecar journaled, sandboxes carrying S's label) as if it had
//! never stopped; only a live sidecar of S makes a second `watch` refuse (exit 1). The
//! Kubernetes native sidecar (packaging/kubernetes) restarts its `watch` with the pod's uid as
//! the session: before this, that restart failed with "session journal … already exists",
//! a crash loop while the workload ran.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

/// Docker only, and no settle delay: the reclaim is done as soon as its first pass is.
fn config(s: &Scratch) -> std::path::PathBuf {
    s.file("resume.toml", "[reclaim]\nsettle = \"0\"\n")
}

fn watch(s: &Scratch, config: &std::path::Path, owner: u32, session: &str) -> Command {
    let mut cmd = sandguard(s);
    cmd.env("SANDGUARD_CONFIG", config)
        .args([
            "watch",
            "--owner-pid",
            &owner.to_string(),
            "--session",
            session,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// The sidecar's first line on stdout (`ready S`, or `error …`).
fn first_line(child: &mut Child) -> String {
    let mut line = String::new();
    let out = child.stdout.take().expect("stdout is piped");
    BufReader::new(out).read_line(&mut line).unwrap();
    line
}

/// Waits (at most `limit`) for `child` to exit; its status code.
fn exit_code(child: &mut Child, limit: Duration) -> Option<i32> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the sidecar did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn claims(s: &Scratch, session: &str) -> Vec<String> {
    sandguard::testing::ledger::StateDir::open(&s.path().join("state/sandguard"))
        .and_then(|d| d.read_session(session))
        .map(|v| v.claims.into_iter().map(|t| t.id).collect())
        .unwrap_or_default()
}

#[test]
fn a_restarted_sidecar_resumes_its_session_and_reclaims_what_it_held() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("resume");
    let config = config(&s);
    let session = format!("resume{}", unique());
    let mut r = Resources::default();
    let claimed = r.container(&[]);
    let labelled = r.container(&[(sandguard::labels::SESSION, &session)]);
    let bystander = r.container(&[(sandguard::labels::SESSION, "someoneelse")]);
    let mut owner = Command::new("sleep").arg("600").spawn().unwrap();

    // The first sidecar, told of the unlabelled container through its control pipe.
    let (read_end, write_end) = sandguard::testing::unix::pipe().unwrap();
    let mut cmd = watch(&s, &config, owner.id(), &session);
    cmd.args(["--control-fd", "3"]);
    let mut first =
        sandguard::testing::unix::spawn_in_new_session(&mut cmd, read_end.as_raw_fd(), 3).unwrap();
    drop(read_end);
    assert_eq!(first_line(&mut first), format!("ready {session}\n"));
    let mut pipe = std::fs::File::from(write_end);
    pipe.write_all(format!("claim docker {claimed}\n").as_bytes())
        .unwrap();
    eventually(Duration::from_secs(10), "the claim is journaled", || {
        claims(&s, &session).contains(&claimed)
    });
    first.kill().unwrap();
    first.wait().unwrap();

    // The same command again (as kubelet restarts it): it resumes the session.
    let mut second = watch(&s, &config, owner.id(), &session).spawn().unwrap();
    let line = first_line(&mut second);
    if line != format!("ready {session}\n") {
        let code = exit_code(&mut second, Duration::from_secs(10));
        panic!("the restarted sidecar said {line:?} and exited {code:?}");
    }

    // A third while the second lives is refused, and says why.
    let refused = run(&mut watch(&s, &config, owner.id(), &session));
    assert_eq!(refused.code, 1, "{}{}", refused.stdout, refused.stderr);
    assert!(
        refused.stdout.starts_with("error ") && refused.stdout.contains("live sidecar"),
        "{}",
        refused.stdout
    );
    assert!(container_exists(&claimed) && container_exists(&labelled));
    // `sessions show` tells the session active under the resumed sidecar, the claim watched.
    let shown = show(&s, &session);
    assert_eq!(shown["state"], "active", "{shown}");
    assert_eq!(shown["sidecar_alive"], true, "{shown}");
    assert_eq!(
        fate(&shown, &claimed),
        ("claimed".into(), serde_json::Value::Null)
    );

    // The owner dies: what the session held is reclaimed by the resumed sidecar.
    owner.kill().unwrap();
    owner.wait().unwrap();
    assert_eq!(exit_code(&mut second, Duration::from_secs(20)), Some(0));
    assert!(
        !container_exists(&claimed),
        "the claim was not carried over"
    );
    assert!(
        !container_exists(&labelled),
        "the labelled container was kept"
    );
    assert!(container_exists(&bystander), "a bystander was removed");
    let shown = show(&s, &session);
    assert_eq!(shown["state"], "reclaimed", "{shown}");
    assert_eq!(shown["ending"]["cause"], "owner_dead", "{shown}");
    let removed = ("removed".into(), "owner_dead".into());
    assert_eq!(fate(&shown, &claimed), removed);
    assert_eq!(fate(&shown, &labelled), removed);
}

fn show(s: &Scratch, session: &str) -> serde_json::Value {
    let out = run(sandguard(s).args(["sessions", "show", session, "--json"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    json(&out.stdout)
}

/// A sandbox's `fate` and `cause` in `sessions show --json`.
fn fate(shown: &serde_json::Value, id: &str) -> (serde_json::Value, serde_json::Value) {
    let sandboxes = shown["sandboxes"].as_array().expect("sandboxes");
    let s = sandboxes
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("{id} is not in {shown}"));
    (s["fate"].clone(), s["cause"].clone())
}

/// The Kubernetes case once the workload has died and been restarted: the session ended
/// (`reclaimed`), and a sidecar started again with the same session and the new owner guards
/// it, instead of failing in a crash loop.
#[test]
fn an_ended_session_is_resumed_by_a_new_owner() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("resume-ended");
    let config = config(&s);
    let session = format!("ended{}", unique());
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    let out = run(&mut watch(&s, &config, gone_pid, &session));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(show(&s, &session)["state"], "reclaimed");

    let mut owner = Command::new("sleep").arg("600").spawn().unwrap();
    let mut sidecar = watch(&s, &config, owner.id(), &session).spawn().unwrap();
    assert_eq!(first_line(&mut sidecar), format!("ready {session}\n"));
    let shown = show(&s, &session);
    assert_eq!(shown["state"], "active", "{shown}");
    assert_eq!(shown["ending"], serde_json::Value::Null, "{shown}");
    let mut r = Resources::default();
    let labelled = r.container(&[(sandguard::labels::SESSION, &session)]);
    owner.kill().unwrap();
    owner.wait().unwrap();
    assert_eq!(exit_code(&mut sidecar, Duration::from_secs(20)), Some(0));
    assert!(!container_exists(&labelled));
    assert_eq!(show(&s, &session)["state"], "reclaimed");
}

/// A sidecar killed at a write of its journal (here by `SIGXFSZ`, under a file-size limit of
/// 0: the kernel kills it at the first byte it writes to a file) never blocks its session:
/// the next `watch --session S` becomes ready and guards the owner. Killed while it created
/// the journal, it left `S.new` behind, and every later start failed with "S.new already
/// exists" for good (a crash-looping Kubernetes sidecar, an owner unguarded).
#[test]
fn a_sidecar_killed_while_it_creates_its_journal_does_not_block_its_session() {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    require_docker();
    let _g = shared();
    let s = Scratch::new("resume-torn");
    let config = config(&s);
    let session = format!("torn{}", unique());
    let mut owner = Command::new("sleep").arg("600").spawn().unwrap();
    // The state directory (and its boots file) exists, as on any machine that ran sandguard:
    // the sidecar's first write is its journal's.
    let out = run(sandguard(&s).arg("sessions"));
    assert_eq!(out.code, 0, "{}", out.stderr);

    let mut limited = watch(&s, &config, owner.id(), &session);
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        limited.pre_exec(|| {
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: libc::RLIM_INFINITY,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &none) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let status = limited.output().unwrap().status;
    assert_eq!(
        status.signal(),
        Some(libc::SIGXFSZ),
        "the limited sidecar was not killed at its first write: {status:?}"
    );
    let sessions = s.path().join("state/sandguard/sessions");
    assert!(
        !sessions.join(format!("{session}.journal")).exists(),
        "killed before its journal was published"
    );

    let mut sidecar = watch(&s, &config, owner.id(), &session).spawn().unwrap();
    let line = first_line(&mut sidecar);
    if line != format!("ready {session}\n") {
        let code = exit_code(&mut sidecar, Duration::from_secs(10));
        panic!("the next start said {line:?} and exited {code:?}");
    }
    assert!(!sessions.join(format!("{session}.new")).exists());
    let mut r = Resources::default();
    let labelled = r.container(&[(sandguard::labels::SESSION, &session)]);
    owner.kill().unwrap();
    owner.wait().unwrap();
    assert_eq!(exit_code(&mut sidecar, Duration::from_secs(20)), Some(0));
    assert!(!container_exists(&labelled), "the owner went unguarded");
    assert_eq!(show(&s, &session)["state"], "reclaimed");
}
