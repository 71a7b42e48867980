//! What `sandguard sweep --every` says, through the real binary (issue 23, "It says what it
//! did"): the removals of a watcher it adopted.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::support::*;
use crate::wrapper::{find_process, guarded, script, unsafe_kill, wait_for_file};

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
                    panic!("{what}: not within {limit:?}; stdout so far:\n{}", self.text())
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
    let sidecar = find_process(&format!("--session {session}")).expect("the sidecar runs");
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
    eventually(Duration::from_secs(10), "the service holds the session", || {
        let v = json(&run(sandguard(&s).args(["sessions", "--json"])).stdout);
        v["sessions"][0]["sidecar_alive"] == true
    });
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
    let line = service.seen.iter().find(|l| l.starts_with(&summary)).unwrap();
    assert!(
        line.contains(&format!("{} removed, 0 could not be removed", containers.len())),
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
        service.count(|l| containers.iter().any(|c| l == format!("removed docker {c}"))),
        containers.len(),
        "{}",
        service.text()
    );
    service.stop();
}
