//! The fleet lease's costs, against a real `redis-server` (started here on a free loopback
//! port with a password, killed at the end):
//!
//! 1. **Renewals**: `SIDECARS` simulated sidecars (default 1 000), each with its own
//!    connection as a sidecar has, registered with a 30 s lease and renewing it every
//!    `EVERY_S` seconds (default 10, spread evenly over the period) for `ROUNDS` periods
//!    (default 3), through the same [`RedisStore::renew`] a sidecar calls. Prints the renewals,
//!    Redis's CPU over the run (`INFO cpu` deltas), the commands per renewal (`INFO
//!    commandstats`), the reads Redis processed per renewal (`INFO stats`
//!    `total_reads_processed`: one read per pipelined round trip), and the renewal latency.
//! 2. **Death to first removal**: for each `lease` × `--every` in `POINTS` (default
//!    `3:1,3:5,10:1,10:5`, seconds), a guarded owner on host A (the real binary, one labelled
//!    sandbox on the E2B emulator) is SIGKILLed together with its sidecar while a real
//!    `sandguard sweep --fleet --every` runs on host B; the time from the kill to the first
//!    `DELETE` the emulator receives, the death at a random phase of the renewals and the
//!    passes. `RUNS` runs a point (default 3).
//!
//! Run: `cargo bench --bench fleet_lease`.

#[path = "../tests/support/e2b.rs"]
mod e2b;
#[path = "../tests/support/emu.rs"]
mod emu;
#[path = "common/redis.rs"]
mod redis_server;
#[path = "common/report.rs"]
mod report;

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandguard::testing::config::FleetSettings;
use sandguard::testing::config::StoreUrl;
use sandguard::testing::fleet::RedisStore;
use sandguard::testing::fleet::{Changes, Holdings, SessionRecord, Store};

const PASSWORD: &str = "bench-pw";
const KEY: &str = "e2b_00000000000000000000000000000000";

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Redis {
    child: Child,
    url: String,
    port: u16,
}

impl Redis {
    fn start() -> Redis {
        let (child, port) = redis_server::start(PASSWORD, &["--maxclients", "4096"]);
        Redis {
            child,
            url: format!("redis://:{PASSWORD}@127.0.0.1:{port}"),
            port,
        }
    }

    /// `INFO all` as key → value (commandstats lines keep their `calls=…,` value).
    async fn info(&self) -> BTreeMap<String, String> {
        let client = redis::Client::open(self.url.as_str()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut c = loop {
            match client.get_multiplexed_async_connection().await {
                Ok(c) => break c,
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("redis-server did not answer: {e}"),
            }
        };
        let text: String = redis::cmd("INFO")
            .arg("all")
            .query_async(&mut c)
            .await
            .unwrap();
        text.lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.to_string(), v.trim().to_string()))
            .collect()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn settings(url: &str, lease: Duration) -> FleetSettings {
    FleetSettings {
        store: StoreUrl::parse(url).unwrap(),
        user: None,
        password: None,
        lease,
        prefix: "sandguard".into(),
    }
}

fn num(info: &BTreeMap<String, String>, key: &str) -> f64 {
    info.get(key).and_then(|v| v.parse().ok()).unwrap_or(0.0)
}

/// The `calls=` of a command in `INFO commandstats`.
fn calls(info: &BTreeMap<String, String>, cmd: &str) -> f64 {
    info.get(&format!("cmdstat_{cmd}"))
        .and_then(|v| v.split(',').next())
        .and_then(|c| c.strip_prefix("calls="))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0.0)
}

fn renewals(runtime: &tokio::runtime::Runtime) {
    let sidecars: usize = env_or("SIDECARS", 1000);
    let every = Duration::from_secs(env_or("EVERY_S", 10));
    let rounds: u32 = env_or("ROUNDS", 3);
    let redis = Redis::start();
    let lease = Duration::from_secs(30);
    let line = runtime.block_on(async {
        redis.info().await;
        let mut stores = Vec::with_capacity(sidecars);
        for i in 0..sidecars {
            let store = Arc::new(RedisStore::new(&settings(&redis.url, lease)).unwrap());
            let record = SessionRecord {
                id: format!("side{i:05}"),
                host: format!("host{}", i % 50),
                owner: "aaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-1-1".into(),
                pid: 1,
                labels: Default::default(),
                providers: vec!["e2b".into()],
                started_ms: i as u64,
            };
            store
                .register(&record, &Holdings::default(), lease)
                .await
                .unwrap();
            stores.push((store, record));
        }
        let before = redis.info().await;
        let started = Instant::now();
        let tasks: Vec<_> = stores
            .into_iter()
            .enumerate()
            .map(|(i, (store, record))| {
                let phase = every.mul_f64(i as f64 / sidecars as f64);
                tokio::spawn(async move {
                    let mut took = Vec::new();
                    let first = tokio::time::Instant::now() + phase;
                    for round in 0..rounds {
                        tokio::time::sleep_until(first + every * round).await;
                        let t = Instant::now();
                        let ok = store
                            .renew(&record.id, &record.host, lease, &Changes::default())
                            .await;
                        assert_eq!(ok.ok(), Some(true), "renewal of {}", record.id);
                        took.push(t.elapsed());
                    }
                    took
                })
            })
            .collect();
        let mut took = Vec::new();
        for t in tasks {
            took.extend(t.await.unwrap());
        }
        let wall = started.elapsed().as_secs_f64();
        let after = redis.info().await;
        let n = took.len() as f64;
        let cpu = |i: &BTreeMap<String, String>| num(i, "used_cpu_sys") + num(i, "used_cpu_user");
        let redis_cpu = cpu(&after) - cpu(&before);
        let commands: f64 = ["set", "exists", "sadd", "srem"]
            .iter()
            .map(|c| calls(&after, c) - calls(&before, c))
            .sum();
        // The INFO call itself is one read.
        let reads = num(&after, "total_reads_processed") - num(&before, "total_reads_processed") - 1.0;
        took.sort();
        let pct = |p: f64| took[((n - 1.0) * p) as usize].as_secs_f64() * 1e3;
        format!(
            "{sidecars} sidecars renewing every {}s, {rounds} rounds ({n} renewals in {wall:.1} s): Redis CPU {redis_cpu:.3} s ({:.2} % of one core), {:.2} commands and {:.2} reads (round trips) per renewal, latency p50 {:.2} ms, p99 {:.2} ms",
            every.as_secs(),
            redis_cpu / wall * 100.0,
            commands / n,
            reads / n,
            pct(0.5),
            pct(0.99),
        )
    });
    report::record(
        "Fleet lease renewals (cargo bench --bench fleet_lease)",
        &line,
    );
    let _ = redis.port;
}

/// A host: a state directory, a host id and a config with the fleet's lease.
fn host(dir: &Path, id: &str, lease: u64, redis: &Redis, emu: &str) -> Command {
    let home = dir.join(id);
    std::fs::create_dir_all(&home).unwrap();
    let config = home.join("config.toml");
    std::fs::write(
        &config,
        format!("[providers.docker]\nenabled = false\n[reclaim]\nsettle = \"0\"\n[fleet]\nlease = \"{lease}s\"\n"),
    )
    .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandguard"));
    cmd.env("SANDGUARD_CONFIG", &config)
        .env("SANDGUARD_FLEET_STORE", &redis.url)
        .env("SANDGUARD_HOST_ID", id)
        .env("E2B_API_KEY", KEY)
        .env("E2B_API_URL", emu)
        .env("XDG_STATE_HOME", &home)
        .env("HOME", &home)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// Seconds from host A's death to the first DELETE on the emulator, with `lease` and
/// `--every`.
fn death_to_remove(dir: &Path, lease: u64, every: u64) -> f64 {
    let redis = Redis::start();
    let (emu, state) = e2b::start(KEY);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(redis.info());
    let file = dir.join(format!("owner-{lease}-{every}"));
    let _ = std::fs::remove_file(&file);
    let script = format!(
        "printf '%s\\n' \"$SANDGUARD_SESSION\" > {0}.tmp && mv {0}.tmp {0}; exec sleep 600",
        file.display()
    );
    let mut owner = host(dir, "host-a", lease, &redis, &emu.url)
        .args(["--", "sh", "-c", &script])
        .process_group(0)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let session = loop {
        if let Ok(t) = std::fs::read_to_string(&file) {
            break t.trim().to_string();
        }
        assert!(Instant::now() < deadline, "the owner did not start");
        std::thread::sleep(Duration::from_millis(10));
    };
    let sb = format!("sb-{session}");
    state.insert(
        &sb,
        &[
            ("sandguard.session", session.as_str()),
            ("sandguard.owner", "aaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-1-1"),
        ],
    );
    let mut sweeper = host(dir, "host-b", lease, &redis, &emu.url)
        .args(["sweep", "--fleet", "--every", &format!("{every}s")])
        .spawn()
        .unwrap();
    // The sidecar registered and the sweeper has run; then the host dies at a random phase of
    // both the renewals and the sweep's passes.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let phase = Duration::from_secs(lease + every).mul_f64(f64::from(nanos % 1000) / 1000.0);
    std::thread::sleep(Duration::from_secs(2) + phase);
    // The whole host dies: the owner's process group and its sidecar (in its own group).
    // The sidecar first: killed after its owner, it would reclaim the session itself.
    let sidecars = Command::new("pgrep")
        .args(["-f", "--", &format!("--session {session}")])
        .output()
        .unwrap();
    let pids: Vec<i32> = String::from_utf8_lossy(&sidecars.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    assert!(!pids.is_empty(), "the sidecar runs");
    let killed = Instant::now();
    for pid in &pids {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", owner.id())])
        .status();
    let _ = owner.wait();
    let limit = killed + Duration::from_secs(lease + every + 30);
    let first = loop {
        if let Some(h) = emu
            .hits()
            .iter()
            .find(|h| h.method == "DELETE" && h.at >= killed)
        {
            break h.at.duration_since(killed);
        }
        assert!(
            Instant::now() < limit,
            "no removal within lease + every + 30 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    let _ = sweeper.kill();
    let _ = sweeper.wait();
    first.as_secs_f64()
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    if std::env::var("SKIP_RENEWALS").is_err() {
        renewals(&runtime);
    }
    let points: String = env_or("POINTS", "3:1,3:5,10:1,10:5".to_string());
    let runs: usize = env_or("RUNS", 3);
    let dir = std::env::temp_dir().join(format!("sandguard-lease-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut parts = Vec::new();
    for point in points.split(',').filter(|p| !p.is_empty()) {
        let (lease, every) = point.split_once(':').expect("POINTS: lease:every,…");
        let (lease, every): (u64, u64) = (lease.parse().unwrap(), every.parse().unwrap());
        let times: Vec<String> = (0..runs)
            .map(|_| format!("{:.2}", death_to_remove(&dir, lease, every)))
            .collect();
        parts.push(format!(
            "lease {lease}s, --every {every}s: {} s",
            times.join(" / ")
        ));
    }
    if !parts.is_empty() {
        report::record(
            "Fleet host death to first removal (cargo bench --bench fleet_lease)",
            &format!("host death → first DELETE: {}", parts.join("; ")),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
