//! What the Docker API proxy adds per request: 1 000 `GET /containers/json` through the
//! proxy of a real `sandguard watch --docker-proxy` sidecar and 1 000 against the daemon's own
//! socket, interleaved (so drift in the daemon's load hits both alike), each side on one
//! kept-alive connection as Docker clients use them. Prints median and p99 per request for
//! both and the added median.
//!
//! Then P7 for creates: 200 `POST /containers/create` each straight to the daemon, through a
//! proxy without limits and through one with every limit on (`sandboxes`, `creates`, `spend`,
//! `lifetime`: each create then takes a journaled slot first, decided against the held count
//! and the metered sandbox time, and is stamped with `sandguard.expires`), interleaved; the
//! added median of each (each side takes each place in a round in turn).
//! The containers (created, never started, labelled `sandguard-bench=create`) are removed at
//! the end.
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
    let creates = creates(&daemon, &state, requests / 5);
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
    println!("{creates}");
}

/// The create of a container that is never started, marked for the clean-up.
const CREATE: &str = r#"{"Image":"sandguard-test/busybox:latest","Cmd":["true"],"Labels":{"sandguard-bench":"create"},"HostConfig":{"NetworkMode":"none"}}"#;

/// P7 for creates: `n` each direct, through a proxy, and through a proxy with limits on.
fn creates(daemon: &str, state: &std::path::Path, n: usize) -> String {
    let request = format!(
        "POST /containers/create HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{CREATE}",
        CREATE.len()
    );
    let sidecar = |limits: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandguard"));
        cmd.env("XDG_STATE_HOME", state)
            .env("DOCKER_HOST", format!("unix://{daemon}"))
            .env_remove("SANDGUARD_CONFIG");
        // Flags after `watch`, which `proxy_sidecar` puts first: given through the config.
        let config = state.join(format!("limits{}.toml", limits.len()));
        std::fs::write(&config, limits.join("\n")).expect("config");
        cmd.env("SANDGUARD_CONFIG", &config);
        proxy_sidecar(cmd, "--docker-proxy", "DOCKER_HOST")
    };
    let (plain, plain_at) = sidecar(&[]);
    let (limited, limited_at) = sidecar(&[
        "[limits]",
        "sandboxes = 1000000",
        "creates = 1000000",
        "spend = \"100000h\"",
        "lifetime = \"1000h\"",
    ]);
    let mut direct = Client::unix(daemon);
    let mut through = Client::unix(&plain_at);
    let mut limits = Client::unix(&limited_at);
    let (mut d, mut p, mut l) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n + 10 {
        // Each side takes each place in the round in turn: what a create leaves the daemon
        // doing afterwards falls on all three alike.
        let mut took = [std::time::Duration::ZERO; 3];
        for k in 0..3 {
            let side = (i + k) % 3;
            let client = match side {
                0 => &mut direct,
                1 => &mut through,
                _ => &mut limits,
            };
            took[side] = client.call(request.as_bytes(), 201);
        }
        if i >= 10 {
            d.push(took[0]);
            p.push(took[1]);
            l.push(took[2]);
        }
    }
    stop(plain);
    stop(limited);
    let _ = Command::new("sh")
        .args([
            "-c",
            "docker rm -f $(docker ps -aq --filter label=sandguard-bench=create) >/dev/null 2>&1",
        ])
        .status();
    let (dm, pm, lm) = (pct(&mut d, 50), pct(&mut p, 50), pct(&mut l, 50));
    format!(
        "POST /containers/create, {n} each, interleaved:\n  direct: median {:.3} ms\n  proxy: median {:.3} ms (added {:.3} ms)\n  proxy with limits on: median {:.3} ms (added {:.3} ms; P7 goal < 1 ms)",
        ms(dm),
        ms(pm),
        ms(pm.saturating_sub(dm)),
        ms(lm),
        ms(lm.saturating_sub(dm)),
    )
}
