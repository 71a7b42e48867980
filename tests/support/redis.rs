//! A `redis-server` of a test's own, for the fleet store: on a free loopback port, with a
//! password and no persistence, killed when dropped (or [`Redis::stop`]ped, to play a store
//! that went away). The fleet tests and the sweep's output tests share it.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::eventually;

/// The password every test server requires (the fleet tests check it never shows).
pub const PASSWORD: &str = "fleet-pw-7c1e9a";

pub struct Redis {
    child: Option<Child>,
    pub port: u16,
}

impl Redis {
    pub fn start() -> Redis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Redis::start_on(port)
    }

    /// On `port` (a store that comes back where it was).
    pub fn start_on(port: u16) -> Redis {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--requirepass", PASSWORD, "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("these tests need redis-server ({e}): tests/run.sh installs it (apt-get install redis-server)")
            });
        let r = Redis {
            child: Some(child),
            port,
        };
        eventually(Duration::from_secs(10), "redis-server answers", || {
            r.cli(&["PING"]).trim() == "PONG"
        });
        r
    }

    /// The store's URL, password included.
    pub fn url(&self) -> String {
        format!("redis://:{PASSWORD}@127.0.0.1:{}", self.port)
    }

    /// One redis-cli command's output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args([
                "-p",
                &self.port.to_string(),
                "--no-auth-warning",
                "-a",
                PASSWORD,
            ])
            .args(args)
            .output()
            .expect("redis-cli (tests/run.sh installs redis-tools)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A session written straight into the store as the sidecar of `host` would have,
    /// with an E2B sandbox and an owner on that host (its lease, if any, is the caller's).
    pub fn write_session(&self, session: &str, host: &str, owner: &str, lease_ms: u64) {
        let lease_ms = lease_ms.to_string();
        self.cli(&[
            "HSET",
            &format!("sandguard:session:{session}"),
            "host",
            host,
            "owner",
            owner,
            "pid",
            "1",
            "labels",
            "{}",
            "providers",
            "[\"e2b\"]",
            "started_ms",
            "1",
            "lease_ms",
            &lease_ms,
            "state",
            "active",
        ]);
        self.cli(&["ZADD", "sandguard:sessions", "1", session]);
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}
