//! A fleet sweep over many dead sessions: `COUNT` sessions (default 1 000) registered in a real
//! `redis-server` (started here on a free loopback port, killed at the end) with leases that
//! have expired, each owning one sandbox on the E2B emulator of the test suite; then the real
//! binary runs `sandguard sweep --fleet` once. Prints the wall time, the peak RSS of the
//! sweep, the sandboxes left and the sessions the store shows reclaimed.
//! Run: `cargo bench --bench fleet_sweep` (`COUNT=…` to vary). With `ALIVE=n`, the first `n`
//! sessions hold a live lease (a minute): the sweep only judges them and leaves their
//! sandboxes, as a central sweep of a healthy fleet does on most passes.

// wait4 for the sweep's peak RSS.
#![allow(unsafe_code)]

#[path = "../tests/support/e2b.rs"]
mod e2b;
#[path = "../tests/support/emu.rs"]
mod emu;
#[path = "common/redis.rs"]
mod redis_server;
#[path = "common/report.rs"]
mod report;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandguard::testing::config::FleetSettings;
use sandguard::testing::config::StoreUrl;
use sandguard::testing::fleet::RedisStore;
use sandguard::testing::fleet::{Holdings, SessionRecord, Store};

const PASSWORD: &str = "bench-pw";

fn main() {
    let count: usize = std::env::var("COUNT")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(1000);
    let alive: usize = std::env::var("ALIVE")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
        .min(count);
    let (mut redis, port) = redis_server::start(PASSWORD, &[]);
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{port}");
    let settings = FleetSettings {
        store: StoreUrl::parse(&url).unwrap(),
        user: None,
        password: None,
        lease: Duration::from_secs(3),
        prefix: "sandguard".into(),
    };
    let key = "e2b_00000000000000000000000000000000";
    let (emu, state) = e2b::start(key);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = Arc::new(RedisStore::new(&settings).unwrap());
    runtime.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(10);
        while store.sessions().await.is_err() {
            assert!(Instant::now() < deadline, "redis-server did not answer");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for i in 0..count {
            let id = format!("bench{i:06}");
            let record = SessionRecord {
                id: id.clone(),
                host: "gone".into(),
                owner: "aaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-1-1".into(),
                pid: 1,
                labels: Default::default(),
                providers: vec!["e2b".into()],
                started_ms: i as u64,
            };
            let lease = if i < alive {
                Duration::from_secs(60)
            } else {
                Duration::from_millis(1)
            };
            store
                .register(&record, &Holdings::default(), lease)
                .await
                .unwrap();
            state.insert(&format!("sb{i:06}"), &[("sandguard.session", &id)]);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    });
    let dir = std::env::temp_dir().join(format!("sandguard-fleet-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        "[providers.docker]\nenabled = false\n[reclaim]\nsettle = \"0\"\n",
    )
    .expect("config");

    let started = Instant::now();
    // Waited for by wait4 (for its rusage), not by Child::wait.
    #[allow(clippy::zombie_processes)]
    let child = Command::new(env!("CARGO_BIN_EXE_sandguard"))
        .args(["sweep", "--fleet"])
        .env("E2B_API_KEY", key)
        .env("E2B_API_URL", &emu.url)
        .env("SANDGUARD_CONFIG", &config)
        .env("SANDGUARD_FLEET_STORE", &url)
        .env("XDG_STATE_HOME", &dir)
        .env("HOME", &dir)
        .stdout(Stdio::null())
        .spawn()
        .expect("run sandguard");
    let (code, rss_kib, cpu) = wait_with_rss(child.id());
    let elapsed = started.elapsed();
    let reclaimed = runtime
        .block_on(store.sessions())
        .map_or(0, |s| count - s.len());
    let line = format!(
        "{count} sessions in Redis ({} dead, {alive} alive), one E2B sandbox each: exit {code}, {:.2} s ({:.2} s of CPU), peak RSS {:.1} MiB, {} sandboxes left, {reclaimed} sessions out of the index",
        count - alive,
        elapsed.as_secs_f64(),
        cpu.as_secs_f64(),
        rss_kib as f64 / 1024.0,
        state.count(),
    );
    report::record("Fleet sweep (cargo bench --bench fleet_sweep)", &line);
    let _ = redis.kill();
    let _ = redis.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Waits for `pid` and returns its exit code and peak RSS (KiB), from `wait4`.
/// The exit status, the peak RSS (KiB) and the CPU time (user + system) of child `pid`.
fn wait_with_rss(pid: u32) -> (i32, i64, Duration) {
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 writes into it and into `status`, both live
    // for the call.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our own child, not yet waited for.
    let r = unsafe { libc::wait4(pid as i32, &mut status, 0, &mut usage) };
    assert_eq!(r, pid as i32, "wait4");
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    (
        libc::WEXITSTATUS(status),
        usage.ru_maxrss,
        tv(usage.ru_utime) + tv(usage.ru_stime),
    )
}
