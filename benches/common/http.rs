//! A minimal HTTP/1.1 client for the proxy benches: one kept-alive connection (a unix socket
//! or TCP), one request at a time, its whole answer read (framed by `Content-Length` or
//! chunked); each call returns the time it took. Plus the percentile and millisecond helpers
//! the benches print with, and the sidecar whose proxy they measure.

// Each bench connects one way only.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One connection: to a unix socket's path, or to a TCP address.
pub struct Client<S: Read + Write>(BufReader<S>);

impl Client<UnixStream> {
    pub fn unix(path: &str) -> Self {
        let s = UnixStream::connect(path).unwrap_or_else(|e| panic!("connect {path}: {e}"));
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Client(BufReader::new(s))
    }
}

impl Client<TcpStream> {
    pub fn tcp(addr: &str) -> Self {
        let s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Client(BufReader::new(s))
    }
}

impl<S: Read + Write> Client<S> {
    /// Sends `request` (whole, head and body) and reads the answer, which must have status
    /// `expect`; returns the time it took.
    pub fn call(&mut self, request: &[u8], expect: u16) -> Duration {
        let started = Instant::now();
        self.0.get_mut().write_all(request).expect("write");
        let (mut length, mut chunked) = (None, false);
        let mut status = String::new();
        self.0.read_line(&mut status).expect("status");
        assert!(
            status.starts_with(&format!("HTTP/1.1 {expect}")),
            "{status:?}"
        );
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

/// The `p`th percentile of `samples` (sorted in place).
pub fn pct(samples: &mut [Duration], p: usize) -> Duration {
    samples.sort();
    samples[((samples.len() - 1) * p) / 100]
}

/// `d` in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Starts `sandguard watch` with `proxy_flag` (`--docker-proxy`, `--cloud-proxy`) for this
/// process as its owner, `cmd` carrying the environment; returns it and the value of `var` in
/// its ready line, without its scheme (`unix://`, `http://`).
pub fn proxy_sidecar(mut cmd: Command, proxy_flag: &str, var: &str) -> (Child, String) {
    let mut sidecar = cmd
        .args(["watch", proxy_flag, "--owner-pid"])
        .arg(std::process::id().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the sidecar");
    let mut line = String::new();
    BufReader::new(sidecar.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("ready line");
    let address = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix(var)?.strip_prefix('='))
        .and_then(|v| v.split_once("://"))
        .map_or_else(
            || panic!("no {var} in {line:?}"),
            |(_, rest)| rest.to_string(),
        );
    (sidecar, address)
}

/// Stops a sidecar started by [`proxy_sidecar`] (SIGTERM: it leaves without reclaiming).
pub fn stop(mut sidecar: Child) {
    let _ = Command::new("kill").arg(sidecar.id().to_string()).status();
    let _ = sidecar.wait();
}
