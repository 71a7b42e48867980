//! Reclaiming 1 000 E2B sandboxes while the emulator answers 20 % of requests with 429 and
//! `Retry-After: 1`: the real binary (`sandguard stop --all --session S`) against the E2B
//! emulator of the test suite, on loopback. Prints the wall time, the requests sent (by
//! status), and how many requests reached a route before its Retry-After had elapsed (must
//! be 0). Run: `cargo bench --bench e2b_reclaim` (`COUNT=…`, `RATE=…` to vary).

#[path = "../tests/support/e2b.rs"]
mod e2b;
#[path = "../tests/support/emu.rs"]
mod emu;
#[path = "common/report.rs"]
mod report;

use std::process::Command;
use std::time::Instant;

fn main() {
    let count: usize = std::env::var("COUNT")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(1000);
    let rate: f64 = std::env::var("RATE")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(0.2);
    let key = "e2b_00000000000000000000000000000000";
    let (emu, state) = e2b::start(key);
    for i in 0..count {
        state.insert(&format!("bench{i:05}"), &[("sandguard.session", "bench")]);
    }
    let dir = std::env::temp_dir().join(format!("sandguard-e2b-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        "[providers.docker]\nenabled = false\n[reclaim]\ndeadline = \"10m\"\n",
    )
    .expect("config");
    emu.set_faults(emu::Faults {
        throttle_rate: rate,
        retry_after_secs: 1,
        ..Default::default()
    });

    let started = Instant::now();
    let status = Command::new(env!("CARGO_BIN_EXE_sandguard"))
        .args(["stop", "--all", "--provider", "e2b", "--session", "bench"])
        .env("E2B_API_KEY", key)
        .env("E2B_API_URL", &emu.url)
        .env("SANDGUARD_CONFIG", &config)
        .env("XDG_STATE_HOME", &dir)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run sandguard");
    let elapsed = started.elapsed();
    let hits = emu.hits();
    let by = |code: u16| hits.iter().filter(|h| h.status == code).count();
    let line = format!(
        "{count} sandboxes, {:.0}% 429 with Retry-After 1 s: exit {}, {:.1} s, {} requests ({} x 204, {} x 429, {} x 200 list pages), {} left, {} sent before their Retry-After",
        rate * 100.0,
        status.code().unwrap_or(-1),
        elapsed.as_secs_f64(),
        hits.len(),
        by(204),
        by(429),
        by(200),
        state.count(),
        emu.early_hits()
    );
    report::record(
        "E2B reclaim under 429s (cargo bench --bench e2b_reclaim)",
        &line,
    );
    let _ = std::fs::remove_dir_all(&dir);
}
