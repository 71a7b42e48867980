//! What the Docker API proxy adds per request: 1 000 `GET /containers/json` through the
//! proxy of a real `sandguard watch --docker-proxy` sidecar and 1 000 against the daemon's own
//! socket, interleaved (so drift in the daemon's load hits both alike), each side on one
//! kept-alive connection as Docker clients use them. Prints median and p99 per request for
//! both and the added median.
//!
//! Run: `cargo bench --bench docker_proxy` (needs `docker info` to work; the daemon at
//! `DOCKER_HOST` if it is a `unix://` address, else `/var/run/docker.sock`).
//! `REQUESTS=5000 cargo bench --bench docker_proxy` for more.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
    let mut sidecar = Command::new(env!("CARGO_BIN_EXE_sandguard"))
        .args(["watch", "--docker-proxy", "--owner-pid"])
        .arg(std::process::id().to_string())
        .env("XDG_STATE_HOME", &state)
        .env("DOCKER_HOST", format!("unix://{daemon}"))
        .env_remove("SANDGUARD_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the sidecar");
    let mut line = String::new();
    BufReader::new(sidecar.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("ready line");
    let proxy = line
        .split_whitespace()
        .nth(2)
        .and_then(|h| h.strip_prefix("DOCKER_HOST=unix://"))
        .unwrap_or_else(|| panic!("no proxy address in {line:?}"))
        .to_string();

    let mut direct = Client::connect(&daemon);
    let mut proxied = Client::connect(&proxy);
    for _ in 0..50 {
        direct.list();
        proxied.list();
    }
    let (mut d, mut p) = (Vec::with_capacity(requests), Vec::with_capacity(requests));
    for _ in 0..requests {
        d.push(direct.list());
        p.push(proxied.list());
    }
    let _ = Command::new("kill").arg(sidecar.id().to_string()).status();
    let _ = sidecar.wait();
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

struct Client(BufReader<UnixStream>);

impl Client {
    fn connect(path: &str) -> Client {
        let s = UnixStream::connect(path).unwrap_or_else(|e| panic!("connect {path}: {e}"));
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Client(BufReader::new(s))
    }

    /// One request and its whole answer; returns the time it took.
    fn list(&mut self) -> Duration {
        let started = Instant::now();
        self.0
            .get_mut()
            .write_all(b"GET /containers/json HTTP/1.1\r\nHost: docker\r\n\r\n")
            .expect("write");
        let (mut length, mut chunked) = (None, false);
        let mut status = String::new();
        self.0.read_line(&mut status).expect("status");
        assert!(status.starts_with("HTTP/1.1 200"), "{status:?}");
        loop {
            let mut h = String::new();
            self.0.read_line(&mut h).expect("header");
            let lower = h.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse::<usize>().ok();
            }
            chunked |= lower.starts_with("transfer-encoding:") && lower.contains("chunked");
            if h == "\r\n" {
                break;
            }
        }
        if chunked {
            loop {
                let mut size = String::new();
                self.0.read_line(&mut size).expect("chunk size");
                let n = usize::from_str_radix(size.trim(), 16).expect("chunk size");
                let mut data = vec![0; n + 2];
                self.0.read_exact(&mut data).expect("chunk");
                if n == 0 {
                    break;
                }
            }
        } else {
            let mut body = vec![0; length.expect("a framed answer")];
            self.0.read_exact(&mut body).expect("body");
        }
        started.elapsed()
    }
}

fn pct(samples: &mut [Duration], p: usize) -> Duration {
    samples.sort();
    samples[((samples.len() - 1) * p) / 100]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
