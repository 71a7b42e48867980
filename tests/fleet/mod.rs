//! The fleet store through the real binary: a real `redis-server` (one per test, on a free
//! loopback port, with a password and no persistence, killed at the end), the E2B emulator
//! for the sandboxes, and "hosts" made of a state directory plus `SANDGUARD_HOST_ID`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::redis::{Redis, PASSWORD};
use crate::support::*;
use crate::watch::wrapper::{find_process, unsafe_kill};
use sandguard::labels::{OWNER, SESSION};

mod death;
mod deploy;
mod local;
mod metrics;
mod spend;
mod store_down;

const KEY: &str = "e2b_0123456789abcdef0123456789abcdef";
const LEASE: &str = "2s";

/// A machine: its own state directory and host id, sharing the store and the E2B emulator.
struct Host {
    scratch: Scratch,
    id: &'static str,
    config: PathBuf,
    store: String,
    e2b: String,
}

impl Host {
    fn new(id: &'static str, store: &str, e2b: &str) -> Host {
        Host::with_lease(id, store, e2b, LEASE)
    }

    fn with_lease(id: &'static str, store: &str, e2b: &str, lease: &str) -> Host {
        let scratch = Scratch::new(&format!("fleet-{id}"));
        let config = cloud_config(&scratch, &format!("[fleet]\nlease = \"{lease}\"\n"));
        Host {
            scratch,
            id,
            config,
            store: store.to_string(),
            e2b: e2b.to_string(),
        }
    }

    fn cmd(&self) -> Command {
        let mut cmd = sandguard(&self.scratch);
        cmd.env("SANDGUARD_CONFIG", &self.config)
            .env("SANDGUARD_FLEET_STORE", &self.store)
            .env("SANDGUARD_HOST_ID", self.id)
            .env("E2B_API_KEY", KEY)
            .env("E2B_API_URL", &self.e2b)
            .env("SANDGUARD_LOG", "info");
        cmd
    }

    /// A guarded owner that first claims `claims` (e2b ids), then sleeps.
    fn owner(&self, claims: &[&str]) -> FleetOwner {
        let bin = env!("CARGO_BIN_EXE_sandguard");
        let claim: String = claims
            .iter()
            .map(|c| format!("{bin} claim e2b {c} && "))
            .collect();
        self.owner_running(&claim)
    }

    /// A guarded owner that first runs `first` (shell, ending in `&&` or `;`), then sleeps.
    fn owner_running(&self, first: &str) -> FleetOwner {
        use std::os::unix::process::CommandExt;
        let file = self.scratch.path().join(format!("owner-{}", unique()));
        let script = format!(
            "{first}printf '%s\\n%s\\n' \"$SANDGUARD_SESSION\" \"$SANDGUARD_LABELS\" > {0}.tmp && mv {0}.tmp {0}; exec sleep 600",
            file.display()
        );
        let child = self
            .cmd()
            .args(["--", "sh", "-c", &script])
            .quiet()
            .process_group(0)
            .spawn()
            .expect("spawn the owner");
        let deadline = Instant::now() + Duration::from_secs(20);
        let text = loop {
            if let Ok(t) = std::fs::read_to_string(&file) {
                break t;
            }
            assert!(Instant::now() < deadline, "the guarded owner did not start");
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut lines = text.lines();
        let session = lines.next().unwrap_or_default().to_string();
        let labels = lines
            .next()
            .unwrap_or_default()
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        FleetOwner {
            child,
            session,
            labels,
        }
    }

    fn sweep(&self, extra: &[&str]) -> Run {
        run(self.cmd().args(["sweep", "--fleet"]).args(extra))
    }
}

struct FleetOwner {
    child: Child,
    session: String,
    labels: Vec<(String, String)>,
}

/// The owner label of a process on another machine: every "host" here runs on this one, so
/// the sandboxes carry a foreign owner, as a sweep on another machine would see them (judged
/// unknown by the local pass, never dead).
const ELSEWHERE: &str = "aaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-1-1";

impl FleetOwner {
    /// The session's labels, its owner as another machine's.
    fn label_refs(&self) -> Vec<(&str, &str)> {
        self.labels
            .iter()
            .map(|(k, v)| match k.as_str() {
                OWNER => (OWNER, ELSEWHERE),
                _ => (k.as_str(), v.as_str()),
            })
            .collect()
    }

    fn sidecar(&self) -> u32 {
        crate::watch::wrapper::sidecar_pid(&self.session)
    }

    /// The whole machine dies: owner and sidecar SIGKILLed at once.
    fn kill_host(&mut self) {
        let sidecar = self.sidecar();
        unsafe_kill(sidecar as i32, libc::SIGKILL);
        self.kill_owner();
        eventually(Duration::from_secs(5), "the sidecar is gone", || {
            !std::path::Path::new(&format!("/proc/{sidecar}")).exists()
        });
    }

    fn kill_owner(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for FleetOwner {
    fn drop(&mut self) {
        if let Some(pid) = find_process(&format!("--session {}", self.session)) {
            unsafe_kill(pid as i32, libc::SIGKILL);
        }
        self.kill_owner();
    }
}

/// Until the store shows the session registered (and `claims` mirrored), or panics.
fn registered(redis: &Redis, session: &str, claims: &[&str]) {
    eventually(
        Duration::from_secs(10),
        "the session is in the store",
        || {
            let members = redis.cli(&["SMEMBERS", &format!("sandguard:claims:{session}")]);
            redis
                .cli(&["EXISTS", &format!("sandguard:lease:{session}")])
                .trim()
                == "1"
                && claims
                    .iter()
                    .all(|c| members.lines().any(|m| m == format!("e2b:{c}")))
        },
    );
}

fn lease_expired(redis: &Redis, session: &str) {
    eventually(Duration::from_secs(15), "the lease expired", || {
        redis
            .cli(&["EXISTS", &format!("sandguard:lease:{session}")])
            .trim()
            == "0"
    });
}

fn sandguard_e2b() -> (
    crate::support::emu::Emulator,
    std::sync::Arc<crate::support::e2b::State>,
) {
    crate::support::e2b::start(KEY)
}

/// A session of a host that died, written straight into the store as its sidecar would have
/// (its lease already gone): `sessions` dead sessions with one labelled sandbox each.
fn dead_sessions(redis: &Redis, e2b: &crate::support::e2b::State, sessions: usize) -> Vec<String> {
    (0..sessions)
        .map(|i| {
            let session = format!("dead{i:03}x{}", unique().replace('-', ""));
            redis.write_session(&session, "host-a", ELSEWHERE, 2000);
            let sb = format!("sb-{session}");
            e2b.insert(&sb, &[(SESSION, session.as_str()), (OWNER, ELSEWHERE)]);
            sb
        })
        .collect()
}
