//! What `sandguard sweep --every` says, through the real binary: the removals of a watcher it adopted, a fleet verdict said once while it holds (and
//! again when it changes), and a fleet store whose host cannot be resolved named as such.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::support::redis::Redis;
use crate::support::*;
use crate::watch::wrapper::{guarded, script, sidecar_pid, unsafe_kill, wait_for_file};
use sandguard::labels::{OWNER, SESSION};

/// A running `sweep --every`, its stdout read line by line as it comes.
struct Service {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Service {
    fn start(mut cmd: Command) -> Service {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the sweep service");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Service {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Reads lines until `n` of them (counted since the start) match `pred`, or panics after
    /// `limit`.
    fn until(&mut self, n: usize, limit: Duration, what: &str, pred: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + limit;
        while self.seen.iter().filter(|l| pred(l)).count() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "{what}: not within {limit:?}; stdout so far:\n{}",
                        self.text()
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("{what}: the service ended; stdout:\n{}", self.text())
                }
            }
        }
    }

    /// Reads `n` more `Sweep:` summaries (passes).
    fn passes(&mut self, n: usize) {
        let have = self.count(|l| l.starts_with("Sweep:"));
        self.until(have + n, Duration::from_secs(20), "passes", |l| {
            l.starts_with("Sweep:")
        });
    }

    fn count(&self, pred: impl Fn(&str) -> bool) -> usize {
        self.seen.iter().filter(|l| pred(l)).count()
    }

    fn text(&self) -> String {
        self.seen.join("\n")
    }

    /// SIGTERM, and the exit must be a success.
    fn stop(mut self) {
        unsafe_kill(self.child.id() as i32, libc::SIGTERM);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}:\n{}", self.text());
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An owner whose sidecar was SIGKILLed, adopted by `sweep --every`, then killed: the
/// watcher the service started reclaims its session, and the service prints each removal and
/// a summary for it, as a one-shot sweep prints its own.
#[test]
fn the_service_prints_what_an_adopted_watcher_removes() {
    require_docker();
    let _g = exclusive();
    let s = Scratch::new("sweepout-adopt");
    let ids = s.path().join("ids");
    let mut owner = guarded(&s, &script(&ids, "sleep 3600"));
    let containers = wait_for_file(&ids, &mut owner);
    let v = json(&run(sandguard(&s).args(["sessions", "--json"])).stdout);
    let session = v["sessions"][0]["session"].as_str().unwrap().to_string();
    let sidecar = sidecar_pid(&session);
    unsafe_kill(sidecar as i32, libc::SIGKILL);
    eventually(Duration::from_secs(5), "the sidecar is gone", || {
        !std::path::Path::new(&format!("/proc/{sidecar}")).exists()
    });
    let mut cmd = sandguard(&s);
    cmd.args(["sweep", "--every", "1s", "--provider", "docker"]);
    let mut service = Service::start(cmd);
    service.until(1, Duration::from_secs(20), "the adoption", |l| {
        l.starts_with(&format!("adopt session {session}"))
    });
    eventually(
        Duration::from_secs(10),
        "the service holds the session",
        || {
            let v = json(&run(sandguard(&s).args(["sessions", "--json"])).stdout);
            v["sessions"][0]["sidecar_alive"] == true
        },
    );
    unsafe_kill(owner.id() as i32, libc::SIGKILL);
    let _ = owner.wait();
    for c in &containers {
        service.until(1, Duration::from_secs(15), "a removal line", |l| {
            l == format!("removed docker {c}")
        });
    }
    let summary = format!("Sweep (watcher of session {session}):");
    service.until(1, Duration::from_secs(5), "the watcher's summary", |l| {
        l.starts_with(&summary)
    });
    let line = service
        .seen
        .iter()
        .find(|l| l.starts_with(&summary))
        .unwrap();
    assert!(
        line.contains(&format!(
            "{} removed, 0 could not be removed",
            containers.len()
        )),
        "{}",
        service.text()
    );
    assert_eq!(
        service.count(|l| l.starts_with(&format!("reclaim session {session}: its owner"))),
        1,
        "{}",
        service.text()
    );
    assert!(containers.iter().all(|c| !container_exists(c)));
    // The passes after it go on as before: nothing of the session is said again. (Other
    // sessions on the shared daemon may be swept meanwhile: only ours are counted.)
    service.passes(2);
    assert_eq!(
        service.count(|l| containers
            .iter()
            .any(|c| l == format!("removed docker {c}"))),
        containers.len(),
        "{}",
        service.text()
    );
    service.stop();
}

const KEY: &str = "e2b_0123456789abcdef0123456789abcdef";
/// Another machine's owner: judged by the fleet lease only.
const ELSEWHERE: &str = "aaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-1-1";

/// A fleet session whose lease another host holds is left, said once (with when the lease
/// runs out) and not on every pass; when its lease is gone the new verdict is said, once.
#[test]
fn a_held_fleet_lease_is_said_once_and_a_changed_verdict_again() {
    let _g = shared();
    let redis = Redis::start();
    let (emu, e2b) = e2b::start(KEY);
    let s = Scratch::new("sweepout-fleet");
    let config = cloud_config(&s, "[fleet]\nlease = \"2s\"\n");
    let session = format!("held{}", unique());
    redis.write_session(&session, "host-a", ELSEWHERE, 60000);
    let lease = format!("sandguard:lease:{session}");
    redis.cli(&["SET", &lease, "host-a", "PX", "60000"]);
    let sb = format!("sb-{session}");
    e2b.insert(&sb, &[(SESSION, session.as_str()), (OWNER, ELSEWHERE)]);
    let mut cmd = sandguard(&s);
    cmd.env("SANDGUARD_CONFIG", &config)
        .env("SANDGUARD_FLEET_STORE", redis.url())
        .env("SANDGUARD_HOST_ID", "host-b")
        .env("E2B_API_KEY", KEY)
        .env("E2B_API_URL", &emu.url)
        .args(["sweep", "--fleet", "--every", "300ms"]);
    let mut service = Service::start(cmd);
    service.passes(4);
    let leave = format!("leave session {session}: ");
    assert_eq!(
        service.count(|l| l.starts_with(&leave)),
        1,
        "{}",
        service.text()
    );
    let line = service.seen.iter().find(|l| l.starts_with(&leave)).unwrap();
    assert!(line.contains("held by host host-a"), "{line}");
    assert!(line.contains("runs out in"), "said once, with when: {line}");
    assert!(!line.contains("ms left"), "{line}");
    assert!(
        service
            .seen
            .iter()
            .filter(|l| l.starts_with("Sweep:"))
            .skip(1)
            .all(|l| l.contains("unchanged since the last pass")),
        "{}",
        service.text()
    );
    // The lease is gone (the host died): the verdict changed, and is said.
    redis.cli(&["DEL", &lease]);
    let reclaim = format!("reclaim session {session}: its fleet lease expired");
    service.until(1, Duration::from_secs(20), "the new verdict", |l| {
        l.starts_with(&reclaim)
    });
    service.until(1, Duration::from_secs(20), "the removal", |l| {
        l == format!("removed e2b {sb}")
    });
    service.passes(3);
    assert_eq!(
        service.count(|l| l.starts_with(&reclaim)),
        1,
        "{}",
        service.text()
    );
    assert_eq!(
        service.count(|l| l.starts_with(&leave)),
        1,
        "{}",
        service.text()
    );
    assert!(!e2b.exists(&sb));
    service.stop();
}

/// A store whose host no resolver finds is named as such, not as a connection lost: by a
/// fleet sweep (exit 1, no verdict) and by `sessions --fleet`.
#[test]
fn a_store_host_that_cannot_be_resolved_is_said_so() {
    let s = Scratch::new("sweepout-dns");
    let config = cloud_config(&s, "");
    let store = "redis://no-such-host.invalid:6379";
    for args in [&["sweep", "--fleet"][..], &["sessions", "--fleet"]] {
        let out = run(sandguard(&s)
            .env("SANDGUARD_CONFIG", &config)
            .env("SANDGUARD_FLEET_STORE", store)
            .args(args));
        // `sweep` reports what it could not query with its report (stdout); `sessions`
        // fails on stderr.
        let all = format!("{}{}", out.stdout, out.stderr);
        assert_eq!(out.code, 1, "{args:?}: {all}");
        assert!(
            all.contains("cannot resolve the fleet store host no-such-host.invalid"),
            "{args:?}: {all}"
        );
        assert!(!all.contains("connection lost"), "{args:?}: {all}");
    }
}

/// Issue 24: what the ledger could not do is no provider. A plugin provider named `ledger`
/// that fails, and a pending session whose journal a reader holds: `sweep --json` lists the
/// plugin under `errors` and the session under `store_errors`, and the text still says both.
/// Before, the ledger's failure was an `errors` entry of a fake provider named `ledger`.
#[test]
fn a_plugin_named_ledger_is_not_the_ledger() {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    use std::os::unix::process::CommandExt;
    let s = Scratch::new("sweep-ledger-plugin");
    let plugin = s.path().join("plugins/ledger");
    write_executable(
        &plugin,
        "#!/bin/sh\necho 'the plugin fell over' >&2\nexit 3\n",
    );
    let extra = format!(
        "\n[providers.ledger]\ncommand = [\"{}\"]\n",
        plugin.display()
    );
    let config = cloud_config(&s, &extra);
    // A pending session: a sweep finishes it whatever its owner, so it must take its journal.
    let state = s.path().join("state");
    let sessions = state.join("sandguard/sessions");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&sessions)
        .unwrap();
    for d in [state.clone(), state.join("sandguard")] {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let session = format!("held{}", unique());
    let journal = sessions.join(format!("{session}.journal"));
    let owner = "0123456789abcdef-0123456789abcdef-4242-1-4026531836";
    let text = format!(
        "{{\"t\":1000,\"ev\":\"start\",\"owner\":\"{owner}\",\"pid\":4242,\"grace_ms\":600000,\"labels\":{{}}}}\n\
         {{\"t\":1001,\"ev\":\"end\",\"state\":\"pending\"}}\n"
    );
    let mut f = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(&journal)
        .unwrap();
    std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
    let reader = Command::new("flock")
        .arg("-s")
        .arg(&journal)
        .args(["sleep", "60"])
        .process_group(0)
        .spawn()
        .unwrap();
    let _reader = crate::watch::wrapper::Job(reader);
    eventually(Duration::from_secs(5), "the reader holds the lock", || {
        let f = std::fs::File::open(&journal).unwrap();
        !sandguard::testing::unix::try_lock_exclusive(&f).unwrap_or(true)
    });
    let sweep = |args: &[&str]| {
        let mut cmd = sandguard(&s);
        run(cmd.env("SANDGUARD_CONFIG", &config).arg("sweep").args(args))
    };

    let out = sweep(&["--json"]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let v = json(&out.stdout);
    let errors = v["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "only the plugin is a provider: {v}");
    assert_eq!(errors[0]["provider"], "ledger");
    let said = errors[0]["error"].as_str().unwrap();
    assert!(said.contains("the plugin fell over"), "{v}");
    let store = v["store_errors"].as_array().unwrap();
    assert_eq!(store.len(), 1, "{v}");
    assert_eq!(store[0]["store"], "ledger");
    assert_eq!(store[0]["session"], session.as_str());
    let said = store[0]["error"].as_str().unwrap();
    assert!(
        said.contains("was not reclaimed") && said.contains("locked"),
        "{v}"
    );
    assert_eq!(v["clean"], false);

    let out = sweep(&[]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("error: could not query ledger: ") && l.contains("fell over")),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&format!(
            "error: could not query ledger: session {session} was not reclaimed"
        )),
        "{}",
        out.stdout
    );
}
