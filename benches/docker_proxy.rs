//! What the Docker API proxy adds per request: 1 000 `GET /containers/json` through the
//! proxy of a real `sandguard watch --docker-proxy` sidecar and 1 000 against the daemon's own
//! socket, interleaved (so drift in the daemon's load hits both alike), each side on one
//! kept-alive connection as Docker clients use them. Prints median and p99 per request for
//! both and the added median.
//!
//! Run: `cargo bench --bench docker_proxy` (needs `docker info` to work; the daemon at
//! `DOCKER_HOST` if it is a `unix://` address, else `/var/run/docker.sock`).
//! `REQUESTS=5000 cargo bench --bench docker_proxy` for more.

#[path = "common/http.rs"]
mod http;

use std::process::Command;

use http::{ms, pct, proxy_sidecar, stop, Client};

/// One request: the container listing.
const LIST: &[u8] = b"GET /containers/json HTTP/1.1\r\nHost: docker\r\n\r\n";

fn main() {
    let requests: usize = std::env::var("REQUESTS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1000);
    let daemon = std::env::var("DOCKER_HOST")
        .ok()
        .and_then(|h| h.strip_prefix("unix://").map(str::to_string))
        .unwrap_or_else(|| "/var/run/docker.sock".into());
    let state = std::env::temp_dir().join(format!("sandguard-bench-proxy-{}", std::process::id()));
    std::fs::create_dir_all(&state).expect("state dir");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandguard"));
    cmd.env("XDG_STATE_HOME", &state)
        .env("DOCKER_HOST", format!("unix://{daemon}"))
        .env_remove("SANDGUARD_CONFIG");
    let (sidecar, proxy) = proxy_sidecar(cmd, "--docker-proxy", "DOCKER_HOST");

    let mut direct = Client::unix(&daemon);
    let mut proxied = Client::unix(&proxy);
    for _ in 0..50 {
        direct.call(LIST, 200);
        proxied.call(LIST, 200);
    }
    let (mut d, mut p) = (Vec::with_capacity(requests), Vec::with_capacity(requests));
    for _ in 0..requests {
        d.push(direct.call(LIST, 200));
        p.push(proxied.call(LIST, 200));
    }
    stop(sidecar);
    let _ = std::fs::remove_dir_all(&state);

    let (dm, pm) = (pct(&mut d, 50), pct(&mut p, 50));
    println!("GET /containers/json, {requests} requests each, one kept-alive connection per side:");
    println!(
        "  direct: median {:.3} ms, p99 {:.3} ms",
        ms(dm),
        ms(pct(&mut d, 99))
    );
    println!(
        "  proxy:  median {:.3} ms, p99 {:.3} ms",
        ms(pm),
        ms(pct(&mut p, 99))
    );
    println!(
        "  added by the proxy (median): {:.3} ms",
        ms(pm.saturating_sub(dm))
    );
}
