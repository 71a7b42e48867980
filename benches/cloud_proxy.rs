//! What the cloud API proxy adds per API call: the E2B emulator of the test suite on loopback,
//! called through the proxy of a real `sandguard watch --cloud-proxy` sidecar and directly,
//! interleaved (so drift in load hits both alike), each side on one kept-alive connection as
//! the SDKs' HTTP clients keep them.
//!
//! - 2 000 (`REQUESTS`) `GET /sandboxes/{id}`: a call passed through as it is (the goal: under
//!   1 ms added);
//! - 200 (`CREATES`) `POST /v2/sandboxes`: a create, stamped, and answered only once its claim
//!   is journaled (an fsync of the session's journal: the disk's cost, not the proxy's).
//!
//! Prints median and p99 per call for both sides and the added median, and appends them to
//! `bench-results/results.md`. Run: `cargo bench --bench cloud_proxy`.

#[path = "../tests/support/e2b.rs"]
mod e2b;
#[path = "../tests/support/emu.rs"]
mod emu;
#[path = "common/http.rs"]
mod http;
#[path = "common/report.rs"]
mod report;

use std::process::Command;
use std::time::Duration;

use http::{ms, pct, proxy_sidecar, stop, Client};

const KEY: &str = "e2b_00000000000000000000000000000000";

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let (requests, creates) = (env("REQUESTS", 2000), env("CREATES", 200));
    let (emu, state) = e2b::start(KEY);
    state.insert("bench", &[("app", "bench")]);
    let dir = std::env::temp_dir().join(format!("sandguard-bench-cloud-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let config = dir.join("sandguard.toml");
    std::fs::write(&config, "[providers.docker]\nenabled = false\n").expect("config");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandguard"));
    cmd.env("XDG_STATE_HOME", &dir)
        .env("SANDGUARD_CONFIG", &config)
        .env("E2B_API_KEY", KEY)
        .env("E2B_API_URL", &emu.url)
        .env_remove("DAYTONA_API_KEY");
    let (sidecar, proxy) = proxy_sidecar(cmd, "--cloud-proxy", "E2B_API_URL");
    let upstream = emu.url.trim_start_matches("http://").to_string();

    let mut direct = Client::tcp(&upstream);
    let mut proxied = Client::tcp(&proxy);
    let get = b"GET /sandboxes/bench HTTP/1.1\r\nHost: api\r\nX-API-Key: ".to_vec();
    let get = [get, format!("{KEY}\r\n\r\n").into_bytes()].concat();
    let body = r#"{"templateID":"base","metadata":{"app":"bench"}}"#;
    let post = format!(
        "POST /v2/sandboxes HTTP/1.1\r\nHost: api\r\nX-API-Key: {KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes();
    for _ in 0..50 {
        direct.call(&get, 200);
        proxied.call(&get, 200);
    }
    let (d, p) = interleave(
        requests,
        || direct.call(&get, 200),
        || proxied.call(&get, 200),
    );
    report("GET /sandboxes/{id}", requests, d, p);
    let (d, p) = interleave(
        creates,
        || direct.call(&post, 201),
        || proxied.call(&post, 201),
    );
    report("POST /v2/sandboxes (claim journaled)", creates, d, p);

    stop(sidecar);
    let _ = std::fs::remove_dir_all(&dir);
}

fn interleave(
    n: usize,
    mut direct: impl FnMut() -> Duration,
    mut proxied: impl FnMut() -> Duration,
) -> (Vec<Duration>, Vec<Duration>) {
    let (mut d, mut p) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        d.push(direct());
        p.push(proxied());
    }
    (d, p)
}

fn report(what: &str, n: usize, mut d: Vec<Duration>, mut p: Vec<Duration>) {
    let (dm, pm) = (pct(&mut d, 50), pct(&mut p, 50));
    report::record(
        "cloud_proxy",
        &format!(
            "{what}, {n} each, interleaved: direct p50 {:.3} ms, p99 {:.3} ms; proxy p50 {:.3} ms, \
             p99 {:.3} ms; added (median) {:.3} ms",
            ms(dm),
            ms(pct(&mut d, 99)),
            ms(pm),
            ms(pct(&mut p, 99)),
            ms(pm.saturating_sub(dm))
        ),
    );
}
