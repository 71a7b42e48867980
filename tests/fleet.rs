//! The fleet store through the real binary: a real `redis-server` (one per test, on a free
//! loopback port, with a password and no persistence, killed at the end), the E2B emulator
//! for the sandboxes, and "hosts" made of a state directory plus `SANDGUARD_HOST_ID`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;
use crate::wrapper::{find_process, unsafe_kill};
use sandguard::labels::{OWNER, SESSION};

const KEY: &str = "e2b_0123456789abcdef0123456789abcdef";
const PASSWORD: &str = "fleet-pw-7c1e9a";
const LEASE: &str = "2s";

/// A redis-server of this test's own; killed on drop.
struct Redis {
    child: Option<Child>,
    port: u16,
}

impl Redis {
    fn start() -> Redis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Redis::start_on(port)
    }

    fn start_on(port: u16) -> Redis {
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

    fn url(&self) -> String {
        format!("redis://:{PASSWORD}@127.0.0.1:{}", self.port)
    }

    /// One redis-cli command's output.
    fn cli(&self, args: &[&str]) -> String {
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

    fn stop(&mut self) {
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
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
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
        find_process(&format!("--session {}", self.session)).expect("the sidecar runs")
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

/// (a) A host dies whole: a fleet sweep on another host reclaims its labelled and its
/// claimed-only sandboxes after the lease; a live host's session and a stranger stay.
#[test]
fn a_dead_hosts_sandboxes_are_reclaimed_by_a_sweep_elsewhere() {
    let _g = shared();
    let mut redis = Redis::start();
    let (emu, e2b) = sandguard_e2b();
    // A's lease is long enough that the sweep right after its death surely falls within it,
    // on a loaded machine too.
    let (a, b, c) = (
        Host::with_lease("host-a", &redis.url(), &emu.url, "6s"),
        Host::new("host-b", &redis.url(), &emu.url),
        Host::with_lease("host-c", &redis.url(), &emu.url, "6s"),
    );
    let claimed = format!("sb-claimed-{}", unique());
    e2b.insert(&claimed, &[]);
    let mut dead = a.owner(&[&claimed]);
    let live = c.owner(&[]);
    let labelled = format!("sb-a-{}", unique());
    e2b.insert(&labelled, &dead.label_refs());
    let alive = format!("sb-c-{}", unique());
    e2b.insert(&alive, &live.label_refs());
    let stranger = format!("sb-x-{}", unique());
    e2b.insert(
        &stranger,
        &[(SESSION, "nobody"), (OWNER, "0000000000000000-1-1-1")],
    );
    registered(&redis, &dead.session, &[&claimed]);
    registered(&redis, &live.session, &[]);
    // Every machine sees the fleet: sessions with their hosts, leases and claims, and the
    // host of each sandbox in `ps`.
    let out = run(b.cmd().args(["sessions", "--fleet", "--json"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = json(&out.stdout);
    let row = |id: &str| {
        v["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["session"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("{id} in {v}"))
    };
    let ra = row(&dead.session);
    assert_eq!(
        (&ra["host"], &ra["state"]),
        (&"host-a".into(), &"active".into())
    );
    assert!(
        ra["lease_left_ms"].as_u64().is_some_and(|ms| ms > 0),
        "{ra}"
    );
    assert_eq!(ra["claims"][0]["id"], claimed.as_str());
    assert_eq!(row(&live.session)["host"], "host-c");
    let out = run(b.cmd().args(["ps", "--json"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = json(&out.stdout);
    let host_of = |id: &str| {
        v["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["instance_id"] == id)
            .map(|r| r["host"].clone())
    };
    assert_eq!(host_of(&labelled), Some("host-a".into()), "{v}");
    assert_eq!(host_of(&alive), Some("host-c".into()), "{v}");
    assert_eq!(host_of(&stranger), Some(serde_json::Value::Null), "{v}");

    dead.kill_host();
    // Before the lease runs out, host A is not judged dead.
    let early = b.sweep(&["--json"]);
    assert_eq!(early.code, 0, "{}{}", early.stdout, early.stderr);
    assert!(
        e2b.exists(&labelled) && e2b.exists(&claimed),
        "{}",
        early.stdout
    );

    lease_expired(&redis, &dead.session);
    let dry = b.sweep(&["--dry-run"]);
    assert_eq!(dry.code, 0, "{}{}", dry.stdout, dry.stderr);
    assert!(
        dry.stdout
            .contains(&format!("would reclaim session {}", dead.session)),
        "{}",
        dry.stdout
    );
    assert!(
        e2b.exists(&labelled) && e2b.exists(&claimed),
        "a dry run touches nothing"
    );
    let out = b.sweep(&["--json"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let v = json(&out.stdout);
    assert_eq!(v["clean"], true, "{v}");
    assert!(!e2b.exists(&labelled), "A's labelled sandbox: reclaimed");
    assert!(!e2b.exists(&claimed), "A's claimed-only sandbox: reclaimed");
    assert!(e2b.exists(&alive), "C's live session: untouched");
    assert!(e2b.exists(&stranger), "a stranger: untouched");
    let key = format!("sandguard:session:{}", dead.session);
    assert_eq!(redis.cli(&["HGET", &key, "state"]).trim(), "reclaimed");
    assert_eq!(redis.cli(&["HGET", &key, "reclaimed_by"]).trim(), "host-b");
    assert_eq!(redis.cli(&["HGET", &key, "host"]).trim(), "host-a");
    let v = json(&run(b.cmd().args(["sessions", "--fleet", "--json"])).stdout);
    let ids: Vec<&str> = v["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["session"].as_str())
        .collect();
    assert_eq!(
        ids,
        [live.session.as_str()],
        "a final session leaves the index"
    );
    drop(live);
    redis.stop();
}

/// (b) Redis stopped: the sidecar still reclaims on its owner's death; a fleet sweep exits 1
/// and removes nothing.
#[test]
fn without_the_store_sidecars_still_reclaim_and_a_fleet_sweep_makes_no_verdict() {
    let _g = shared();
    let mut redis = Redis::start();
    let (emu, e2b) = sandguard_e2b();
    let (a, b) = (
        Host::new("host-a", &redis.url(), &emu.url),
        Host::new("host-b", &redis.url(), &emu.url),
    );
    let mut owner = a.owner(&[]);
    let mine = format!("sb-a-{}", unique());
    e2b.insert(&mine, &owner.label_refs());
    // A session of a host that died earlier, known to the store.
    let mut gone = a.owner(&[]);
    let theirs = format!("sb-gone-{}", unique());
    e2b.insert(&theirs, &gone.label_refs());
    registered(&redis, &owner.session, &[]);
    registered(&redis, &gone.session, &[]);
    gone.kill_host();
    lease_expired(&redis, &gone.session);

    redis.stop();
    owner.kill_owner();
    eventually(
        Duration::from_secs(15),
        "the sidecar reclaims locally",
        || !e2b.exists(&mine),
    );
    let out = b.sweep(&[]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(all.contains("fleet store"), "{all}");
    assert!(all.contains("no fleet verdict"), "{all}");
    assert!(!all.contains(PASSWORD), "{all}");
    assert!(
        e2b.exists(&theirs),
        "no store, no fleet verdict: nothing removed"
    );
}

/// (c) Two fleet sweeps at once: each dead session is reclaimed exactly once.
#[test]
fn two_fleet_sweeps_at_once_reclaim_each_dead_session_once() {
    let _g = shared();
    let redis = Redis::start();
    let (emu, e2b) = sandguard_e2b();
    let a = Host::new("host-a", &redis.url(), &emu.url);
    let sweepers = [
        Host::new("host-b", &redis.url(), &emu.url),
        Host::new("host-d", &redis.url(), &emu.url),
    ];
    let mut owners: Vec<FleetOwner> = (0..3).map(|_| a.owner(&[])).collect();
    let mut boxes = Vec::new();
    for o in &owners {
        for _ in 0..3 {
            let id = format!("sb-{}", unique());
            e2b.insert(&id, &o.label_refs());
            boxes.push(id);
        }
        registered(&redis, &o.session, &[]);
    }
    for o in &mut owners {
        o.kill_host();
    }
    for o in &owners {
        lease_expired(&redis, &o.session);
    }
    let children: Vec<Child> = sweepers
        .iter()
        .map(|h| {
            h.cmd()
                .args(["sweep", "--fleet", "--json"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(boxes.iter().all(|b| !e2b.exists(b)), "everything reclaimed");
    for o in &owners {
        let key = format!("sandguard:session:{}", o.session);
        assert_eq!(redis.cli(&["HGET", &key, "state"]).trim(), "reclaimed");
        assert_eq!(
            redis.cli(&["HGET", &key, "reclaims"]).trim(),
            "1",
            "session {} reclaimed once",
            o.session
        );
    }
}

/// (d) A malformed store URL is a config error naming the key (exit 2); a wrong password is a
/// failed connection (exit 1) with no verdict, and the password is never printed.
#[test]
fn a_bad_store_is_named_and_a_wrong_password_is_no_verdict() {
    let _g = shared();
    let redis = Redis::start();
    let (emu, e2b) = sandguard_e2b();
    let b = Host::new("host-b", &redis.url(), &emu.url);
    let config = b.scratch.path().join("bad.toml");
    std::fs::write(
        &config,
        "[providers.docker]\nenabled = false\n\n[fleet]\nstore = \"localhost:6379\"\n",
    )
    .unwrap();
    let out = run(b
        .cmd()
        .env("SANDGUARD_CONFIG", &config)
        .env_remove("SANDGUARD_FLEET_STORE")
        .args(["sweep", "--fleet"]));
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("key `fleet.store`"), "{}", out.stderr);

    let out = run(b
        .cmd()
        .env_remove("SANDGUARD_FLEET_STORE")
        .args(["sweep", "--fleet"]));
    assert_eq!(out.code, 2, "--fleet without a store: {}", out.stderr);

    // A dead session in the store, which a sweep that cannot log in must not judge.
    let dead_session = format!("d{}", unique());
    let sb = format!("sb-{}", unique());
    e2b.insert(&sb, &[(SESSION, &dead_session)]);
    let wrong = "not-the-password-93f1";
    let out = run(b
        .cmd()
        .env(
            "SANDGUARD_FLEET_STORE",
            format!("redis://:{wrong}@127.0.0.1:{}", redis.port),
        )
        .args(["sweep", "--fleet", "--json"]));
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(!all.contains(wrong), "{all}");
    assert!(all.contains("authentication failed"), "{all}");
    let v = json(&out.stdout);
    assert_eq!(v["clean"], false);
    assert!(e2b.exists(&sb));
    // The password from the environment wins over the URL's, and is never shown either.
    let out = run(b
        .cmd()
        .env(
            "SANDGUARD_FLEET_STORE",
            format!("redis://127.0.0.1:{}", redis.port),
        )
        .env("SANDGUARD_FLEET_PASSWORD", wrong)
        .args(["sweep", "--fleet"]));
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(!format!("{}{}", out.stdout, out.stderr).contains(wrong));
}

fn sandguard_e2b() -> (
    crate::support::emu::Emulator,
    std::sync::Arc<crate::support::e2b::State>,
) {
    crate::support::e2b::start(KEY)
}

/// Redis restarted empty: a live sidecar registers again within a renewal or two, and a
/// fleet sweep in the gap removes nothing.
#[test]
fn a_store_restarted_empty_gets_the_live_sessions_back() {
    let _g = shared();
    let mut redis = Redis::start();
    let (emu, e2b) = sandguard_e2b();
    let (a, b) = (
        Host::new("host-a", &redis.url(), &emu.url),
        Host::new("host-b", &redis.url(), &emu.url),
    );
    let claimed = format!("sb-claimed-{}", unique());
    e2b.insert(&claimed, &[]);
    let owner = a.owner(&[&claimed]);
    let labelled = format!("sb-a-{}", unique());
    e2b.insert(&labelled, &owner.label_refs());
    registered(&redis, &owner.session, &[&claimed]);
    let port = redis.port;
    redis.stop();
    std::thread::sleep(Duration::from_millis(500));
    let redis = Redis::start_on(port);
    let gap = b.sweep(&["--json"]);
    assert_eq!(gap.code, 0, "{}{}", gap.stdout, gap.stderr);
    assert!(
        e2b.exists(&labelled) && e2b.exists(&claimed),
        "{}",
        gap.stdout
    );
    // Registered again, claims and all, well within the lease.
    let started = Instant::now();
    registered(&redis, &owner.session, &[&claimed]);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "registered again after {:?}",
        started.elapsed()
    );
    let key = format!("sandguard:session:{}", owner.session);
    assert_eq!(redis.cli(&["HGET", &key, "host"]).trim(), "host-a");
    // Data lost without a broken connection (a FLUSHALL, a failover to an empty replica): the
    // next renewal finds no record and registers again.
    assert_eq!(redis.cli(&["FLUSHALL"]).trim(), "OK");
    let started = Instant::now();
    registered(&redis, &owner.session, &[&claimed]);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "registered again after {:?}",
        started.elapsed()
    );
    assert_eq!(redis.cli(&["HGET", &key, "host"]).trim(), "host-a");
}

/// A sweeper SIGKILLed in the middle of a reclaim leaves the session `reclaiming` and its
/// lock to expire: the next sweep, on another host, finishes it.
#[test]
fn a_sweeper_killed_mid_reclaim_is_finished_by_the_next() {
    let _g = shared();
    let redis = Redis::start();
    let (emu, e2b) = sandguard_e2b();
    let (a, b, d) = (
        Host::new("host-a", &redis.url(), &emu.url),
        Host::new("host-b", &redis.url(), &emu.url),
        Host::new("host-d", &redis.url(), &emu.url),
    );
    let mut dead = a.owner(&[]);
    let sb = format!("sb-a-{}", unique());
    e2b.insert(&sb, &dead.label_refs());
    registered(&redis, &dead.session, &[]);
    dead.kill_host();
    lease_expired(&redis, &dead.session);
    // E2B down: the first sweeper retries until its deadline; it is killed before.
    emu.set_faults(crate::support::emu::Faults {
        outage: true,
        ..Default::default()
    });
    let mut sweeper = b
        .cmd()
        .args(["sweep", "--fleet"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let key = format!("sandguard:session:{}", dead.session);
    eventually(
        Duration::from_secs(10),
        "the first sweeper reclaims",
        || redis.cli(&["HGET", &key, "state"]).trim() == "reclaiming",
    );
    let _ = sweeper.kill();
    let _ = sweeper.wait();
    emu.set_faults(crate::support::emu::Faults::default());
    assert!(e2b.exists(&sb));
    // Its lock outlives it by at most the lease; then the next sweep finishes the session.
    eventually(
        Duration::from_secs(10),
        "the dead sweeper's lock expires",
        || {
            redis
                .cli(&["EXISTS", &format!("sandguard:lock:{}", dead.session)])
                .trim()
                == "0"
        },
    );
    let out = d.sweep(&["--json"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(!e2b.exists(&sb), "{}", out.stdout);
    assert_eq!(redis.cli(&["HGET", &key, "state"]).trim(), "reclaimed");
    assert_eq!(redis.cli(&["HGET", &key, "reclaims"]).trim(), "2");
    assert_eq!(redis.cli(&["HGET", &key, "reclaimed_by"]).trim(), "host-d");
}

/// The Kubernetes manifests parse (PyYAML; tests/run.sh installs python3-yaml), the
/// Deployment runs the fleet sweep with the store from a Secret, and the pod's sandguard is a
/// native sidecar registered in the same store.
#[test]
fn the_kubernetes_manifests_run_the_fleet_sweep_and_a_native_sidecar() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/kubernetes");
    let load = |name: &str| {
        let out = Command::new("python3")
            .args([
                "-c",
                "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
            ])
            .arg(dir.join(name))
            .output()
            .expect("python3 (tests/run.sh installs it)");
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        json(&String::from_utf8_lossy(&out.stdout))
    };
    let from_secret = |env: &serde_json::Value, var: &str| {
        env.as_array().unwrap().iter().any(|e| {
            e["name"] == var && e["valueFrom"]["secretKeyRef"]["name"] == "sandguard-fleet"
        })
    };
    let d = load("sweep-deployment.yaml");
    assert_eq!(d["kind"], "Deployment");
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert_eq!(args[..3], ["sweep", "--fleet", "--every"]);
    assert!(from_secret(&c["env"], "SANDGUARD_FLEET_STORE"), "{c}");
    assert!(from_secret(&c["env"], "SANDGUARD_FLEET_PASSWORD"), "{c}");
    let p = load("pod-native-sidecar.yaml");
    let sidecar = &p["spec"]["initContainers"][0];
    assert_eq!(sidecar["restartPolicy"], "Always", "a native sidecar");
    assert!(sidecar["args"][0]
        .as_str()
        .unwrap()
        .contains("sandguard watch --owner-pid"));
    assert!(
        from_secret(&sidecar["env"], "SANDGUARD_FLEET_STORE"),
        "{sidecar}"
    );
    assert_eq!(p["spec"]["shareProcessNamespace"], true);
}

/// README's `[fleet]` example is a valid config: `sandguard sessions --fleet` reads it, and
/// fails only for want of that Redis (exit 1, the password masked), not for the config.
#[test]
fn the_readmes_fleet_config_is_a_valid_config() {
    let readme =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .unwrap();
    let (_, _, text) = crate::readme::blocks(&readme)
        .into_iter()
        .find(|(m, _, _)| m.as_deref().is_some_and(|m| m.contains("run fleet-config")))
        .expect("README has the fleet-config block");
    let s = Scratch::new("fleet-readme");
    // The README's Redis does not exist here: point its host at a closed loopback port.
    let text = text.replace("redis.internal:6380", "127.0.0.1:1");
    let config = s.path().join("fleet.toml");
    std::fs::write(&config, text).unwrap();
    let out = run(sandguard(&s)
        .env("SANDGUARD_CONFIG", &config)
        .env("SANDGUARD_FLEET_PASSWORD", "readme-secret")
        .args(["sessions", "--fleet"]));
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr
            .contains("fleet store rediss://sandguard@127.0.0.1:1/0"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("readme-secret"), "{}", out.stderr);
}

/// A session of a host that died, written straight into the store as its sidecar would have
/// (its lease already gone): `sessions` dead sessions with one labelled sandbox each.
fn dead_sessions(redis: &Redis, e2b: &crate::support::e2b::State, sessions: usize) -> Vec<String> {
    (0..sessions)
        .map(|i| {
            let session = format!("dead{i:03}x{}", unique().replace('-', ""));
            let key = format!("sandguard:session:{session}");
            redis.cli(&[
                "HSET",
                &key,
                "host",
                "host-a",
                "owner",
                ELSEWHERE,
                "pid",
                "1",
                "labels",
                "{}",
                "providers",
                "[\"e2b\"]",
                "started_ms",
                "1",
                "lease_ms",
                "2000",
                "state",
                "active",
            ]);
            redis.cli(&["ZADD", "sandguard:sessions", "1", &session]);
            let sb = format!("sb-{session}");
            e2b.insert(&sb, &[(SESSION, session.as_str()), (OWNER, ELSEWHERE)]);
            sb
        })
        .collect()
}

/// A fleet sweep reclaims many dead sessions at once, but every session's calls to a provider
/// go through one pace for the whole pass: a 429's Retry-After holds back the calls of every
/// session, not only of the one that got it. (With a pace per session, the other sessions'
/// deletes and listings reached the throttled route within its Retry-After.)
#[test]
fn a_fleet_sweep_of_many_sessions_waits_out_every_retry_after() {
    let _g = shared();
    let redis = Redis::start();
    let (emu, e2b) = sandguard_e2b();
    let b = Host::new("host-b", &redis.url(), &emu.url);
    // Four sessions at a time, so that sessions start while others wait out a pause; time
    // enough for every session's removal to wait out the pauses of all the others.
    let config = std::fs::read_to_string(&b.config)
        .unwrap()
        .replace("deadline = \"4s\"", "deadline = \"60s\"\nconcurrency = 4");
    std::fs::write(&b.config, config).unwrap();
    let boxes = dead_sessions(&redis, &e2b, 24);
    emu.set_faults(crate::support::emu::Faults {
        throttle_rate: 0.15,
        retry_after_secs: 1,
        ..Default::default()
    });
    let out = b.sweep(&["--json"]);
    emu.set_faults(crate::support::emu::Faults::default());
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(boxes.iter().all(|sb| !e2b.exists(sb)), "{}", out.stdout);
    let hits = emu.hits();
    let throttled = hits.iter().filter(|h| h.status == 429).count();
    assert!(throttled > 0, "the faults throttled nothing: {hits:?}");
    let early: Vec<_> = hits.iter().filter(|h| h.early).collect();
    assert!(
        early.is_empty(),
        "{} of {} requests before their Retry-After: {early:?}",
        early.len(),
        hits.len()
    );
}

/// (a) with Docker: host A's owner runs a labelled container and claims an unlabelled one it
/// started; the host dies whole; a fleet sweep on host B (same daemon, another state
/// directory and host id) reclaims both after the lease, and leaves an unlabelled container
/// nobody claimed. The labelled container names an owner on another machine, so only the
/// fleet can judge it.
#[test]
fn a_dead_hosts_docker_containers_are_reclaimed_by_a_sweep_elsewhere() {
    let _g = shared();
    require_docker();
    let mut res = Resources::default();
    let redis = Redis::start();
    let (emu, _e2b) = sandguard_e2b();
    let docker_hosts = |id: &'static str| {
        let h = Host::new(id, &redis.url(), &emu.url);
        let config = format!(
            "[reclaim]\ndeadline = \"10s\"\nsettle = \"0\"\n[fleet]\nlease = \"{LEASE}\"\n"
        );
        std::fs::write(&h.config, config).unwrap();
        h
    };
    let (a, b) = (docker_hosts("host-a"), docker_hosts("host-b"));
    let ids = a.scratch.path().join(format!("ids-{}", unique()));
    let bin = env!("CARGO_BIN_EXE_sandguard");
    let first = format!(
        "set -e; \
         docker run -d --network none --label {SESSION}=\"$SANDGUARD_SESSION\" --label {OWNER}={ELSEWHERE} {IMAGE} sleep 600 > {ids}.tmp; \
         c=$(docker run -d --network none {IMAGE} sleep 600); echo \"$c\" >> {ids}.tmp; \
         {bin} claim docker \"$c\"; mv {ids}.tmp {ids}; set +e; ",
        ids = ids.display()
    );
    let mut dead = a.owner_running(&first);
    let text = std::fs::read_to_string(&ids).expect("the owner started its containers");
    let made: Vec<String> = text.lines().map(str::to_string).collect();
    for c in &made {
        res.adopt_container(c);
    }
    let (labelled, claimed) = (made[0].clone(), made[1].clone());
    let stranger = res.container(&[]);
    eventually(
        Duration::from_secs(10),
        "the claim is mirrored in the store",
        || {
            redis
                .cli(&["SMEMBERS", &format!("sandguard:claims:{}", dead.session)])
                .lines()
                .any(|m| m.starts_with("docker:") && claimed.starts_with(&m["docker:".len()..]))
        },
    );
    dead.kill_host();
    assert!(container_exists(&labelled) && container_exists(&claimed));
    lease_expired(&redis, &dead.session);
    let out = b.sweep(&["--json"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        !container_exists(&labelled),
        "A's labelled container: reclaimed"
    );
    assert!(
        !container_exists(&claimed),
        "A's claimed-only container: reclaimed"
    );
    assert!(
        container_exists(&stranger),
        "an unlabelled container: untouched"
    );
    let key = format!("sandguard:session:{}", dead.session);
    assert_eq!(redis.cli(&["HGET", &key, "state"]).trim(), "reclaimed");
    assert_eq!(redis.cli(&["HGET", &key, "reclaimed_by"]).trim(), "host-b");
}
