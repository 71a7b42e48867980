//! `sandguard stop --all --session S` of many E2B sandboxes against the E2B emulator of the
//! test suite, on loopback, in two scenarios (`SCENARIO=throttle|bucket`, both by default):
//!
//! - `throttle`: 1 000 sandboxes (`COUNT`) while 20 % of requests (`RATE`) are answered 429
//!   with `Retry-After: 1` at random. Shows that nothing is lost and that no request reaches
//!   a route before its Retry-After (must be 0).
//! - `bucket`: 600 sandboxes (`BUCKET_COUNT`) behind a token-bucket limiter of 20 requests a
//!   second (`BUCKET_RATE`) and a burst of 20 (`BUCKET_BURST`), one bucket per route as E2B's
//!   limiter keeps them, with E2B's whole-second `Retry-After` (at least 1 s). The limiter's
//!   capacity for the removals is `(count - burst) / rate` seconds; a polite client finishes
//!   close to it (goal: within 1.05×) while few of its requests are turned away (goal: under
//!   10 % of all requests 429). Sending faster cannot finish sooner, only spend the limit
//!   that the team's other programs share.
//!
//! Prints the wall time, the requests sent by status, what was left and how many requests
//! came early. Run: `cargo bench --bench e2b_reclaim`.

#[path = "../tests/support/e2b.rs"]
mod e2b;
#[path = "../tests/support/emu.rs"]
mod emu;
#[path = "common/report.rs"]
mod report;

use std::path::PathBuf;
use std::process::{Command, ExitStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEY: &str = "e2b_00000000000000000000000000000000";

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let scenario = std::env::var("SCENARIO").unwrap_or_default();
    if scenario.is_empty() || scenario == "throttle" {
        throttle();
    }
    if scenario.is_empty() || scenario == "bucket" {
        bucket();
    }
}

/// An emulator holding `count` sandboxes of session `bench`, and a scratch state directory.
fn rig(count: usize) -> (emu::Emulator, Arc<e2b::State>, PathBuf) {
    let (emu, state) = e2b::start(KEY);
    for i in 0..count {
        state.insert(&format!("bench{i:05}"), &[("sandguard.session", "bench")]);
    }
    let dir = std::env::temp_dir().join(format!("sandguard-e2b-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    std::fs::write(
        dir.join("config.toml"),
        "[providers.docker]\nenabled = false\n[reclaim]\ndeadline = \"10m\"\n",
    )
    .expect("config");
    (emu, state, dir)
}

/// Runs the stop; returns its exit status and wall time.
fn stop(emu: &emu::Emulator, dir: &std::path::Path) -> (ExitStatus, Duration) {
    let started = Instant::now();
    let status = Command::new(env!("CARGO_BIN_EXE_sandguard"))
        .args(["stop", "--all", "--provider", "e2b", "--session", "bench"])
        .env("E2B_API_KEY", KEY)
        .env("E2B_API_URL", &emu.url)
        .env("SANDGUARD_CONFIG", dir.join("config.toml"))
        .env("XDG_STATE_HOME", dir)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run sandguard");
    (status, started.elapsed())
}

fn throttle() {
    let count: usize = env("COUNT", 1000);
    let rate: f64 = env("RATE", 0.2);
    let (emu, state, dir) = rig(count);
    emu.set_faults(emu::Faults {
        throttle_rate: rate,
        retry_after_secs: 1,
        ..Default::default()
    });
    let (status, elapsed) = stop(&emu, &dir);
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

fn bucket() {
    let count: usize = env("BUCKET_COUNT", 600);
    let rate: f64 = env("BUCKET_RATE", 20.0);
    let burst: u32 = env("BUCKET_BURST", 20);
    let (emu, state, dir) = rig(count);
    emu.set_faults(emu::Faults {
        bucket: Some(emu::Bucket { rate, burst }),
        ..Default::default()
    });
    let (status, elapsed) = stop(&emu, &dir);
    let hits = emu.hits();
    let throttled = hits.iter().filter(|h| h.status == 429).count();
    let capacity = count.saturating_sub(burst as usize) as f64 / rate;
    let line = format!(
        "{count} sandboxes behind a token bucket of {rate} req/s, burst {burst}: exit {}, {:.1} s for a capacity of {capacity:.1} s ({:.2}x), {} requests of which {throttled} x 429 ({:.1}%), {} left, {} sent before their Retry-After",
        status.code().unwrap_or(-1),
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() / capacity,
        hits.len(),
        100.0 * throttled as f64 / hits.len().max(1) as f64,
        state.count(),
        emu.early_hits()
    );
    report::record(
        "E2B reclaim at a token-bucket limiter (cargo bench --bench e2b_reclaim)",
        &line,
    );
    let _ = std::fs::remove_dir_all(&dir);
}
