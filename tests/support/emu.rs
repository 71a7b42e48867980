//! The framework every REST/Connect provider emulator is built on: a small HTTP/1.1 server on
//! 127.0.0.1 (port 0) with fault injection, a log of every request, and a check that no
//! request reached a route before the `Retry-After` it was given had elapsed.
//!
//! An emulator implements [`Api`]: the provider's answer to a request (auth, routes, state),
//! and the provider's own shape of a 429 and of a 5xx. The server applies [`Faults`] before
//! the API sees a request: an outage (every request answered 503), dropped connections (closed
//! without an answer), latency, a rate limiter (a token bucket per route, [`Bucket`]), 429s
//! with the provider's retry header, and 5xx. The random draws come from the one seeded generator (`sandguard::testing::rng`),
//! so a run is repeatable. One more fault is about what an answer says rather than whether it
//! comes: with [`Faults::echo_auth`], every error answer (4xx or 5xx, the API's own or an
//! injected one) quotes the request's credential headers verbatim in its message, as a
//! careless server or proxy does.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use sandguard::testing::rng::Rng;

// By path: the benches include this file by path too, where a plain `mod` would look beside it.
#[path = "emu/echo.rs"]
mod echo;
pub use echo::echo_credentials;

/// One request as the emulator saw it. Header names are lower-case.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub query: Vec<(String, String)>,
    /// The query as it came, still encoded (empty without one), for an emulator whose
    /// service decodes it its own way.
    pub raw_query: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    pub fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    pub fn queries(&self, name: &str) -> Vec<&str> {
        self.query
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }
    /// The path split on `/`, without the empty first part.
    pub fn segments(&self) -> Vec<&str> {
        self.path.split('/').filter(|s| !s.is_empty()).collect()
    }
}

/// An answer.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn json(status: u16, value: serde_json::Value) -> Response {
        Response {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: value.to_string().into_bytes(),
        }
    }
    pub fn empty(status: u16) -> Response {
        Response {
            status,
            headers: vec![],
            body: vec![],
        }
    }
    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> Response {
        self.headers.push((name.to_string(), value.into()));
        self
    }
}

/// A provider's API, as an emulator implements it.
pub trait Api: Send + Sync + 'static {
    /// The answer to a request that got past the injected faults.
    fn handle(&self, req: &Request) -> Response;
    /// This provider's 429, asking the client to wait `secs` (in its own header).
    fn throttled(&self, secs: u64) -> Response;
    /// This provider's 503.
    fn unavailable(&self) -> Response;
    /// The 429 of this provider's rate limiter ([`Faults::bucket`]), asking the client to wait
    /// `secs` ([`Api::retry_secs`]); `limit` is the bucket's state, for the providers that say
    /// it in headers. Default: [`Api::throttled`].
    fn limited(&self, secs: u64, limit: &Limit) -> Response {
        let _ = limit;
        self.throttled(secs)
    }
    /// The whole seconds this provider's limiter names when its bucket frees a token in
    /// `wait`. Default: rounded up, at least 1.
    fn retry_secs(&self, wait: Duration) -> u64 {
        (wait.as_secs_f64().ceil() as u64).max(1)
    }
    /// The rate-limit bucket a request belongs to: both the 429 windows (a request reaching a
    /// route before the Retry-After it was given counts as early) and the token buckets are
    /// kept per route. Default: the method and the first two path segments, the rest as `*`
    /// (`DELETE/api/sandbox/*`), since providers limit per route, not per id; an API with ids
    /// nearer the root names its route templates itself.
    fn route(&self, req: &Request) -> String {
        let segs = req.segments();
        let mut key = req.method.clone();
        for (i, s) in segs.iter().enumerate() {
            key.push('/');
            key.push_str(if i < 2 { s } else { "*" });
        }
        key
    }
}

/// What goes wrong, on purpose. Rates are fractions of requests (0.0 to 1.0).
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Answer 503 (the provider's own body).
    pub error_rate: f64,
    /// Answer 429 with the provider's retry header.
    pub throttle_rate: f64,
    /// The wait a 429 asks for.
    pub retry_after_secs: u64,
    /// Close the connection without answering.
    pub drop_rate: f64,
    /// Delay before every answer.
    pub latency: Duration,
    /// Every request answered 503 while set.
    pub outage: bool,
    /// A rate limiter in front of the API: a token bucket per route ([`Api::route`]).
    pub bucket: Option<Bucket>,
    /// Every error answer (status 400 and up) quotes the request's credential headers
    /// (`authorization`, `x-api-key`, any name with `key`, `token`, `secret` or `auth` in it)
    /// verbatim in the fields a client reads (see [`echo_credentials`]).
    pub echo_auth: bool,
}

/// A token bucket, as a provider's rate limiter keeps one per route (per team): it holds
/// `burst` tokens at most, starts full, and refills at `rate` tokens a second; a request takes
/// one, and a request finding less than one is answered 429 ([`Api::limited`]), naming the
/// time until a token is back ([`Api::retry_secs`]), and takes nothing. This is the GCRA of
/// `redis_rate`, which E2B's limiter uses, seen as a bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    /// Tokens a second.
    pub rate: f64,
    /// The most tokens held, so the most requests at once.
    pub burst: u32,
}

/// A bucket when it turned a request away (empty), for the provider's rate-limit headers.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    pub burst: u32,
    /// Until the bucket is full again.
    pub reset: Duration,
}

/// Requests reaching a route this soon after its 429 were already on their way when the 429
/// was sent (a client cannot know of an answer before it arrives), so they do not count as
/// early. On loopback a request in flight lands well within this.
const IN_FLIGHT: Duration = Duration::from_millis(100);

/// One request in the log.
#[derive(Debug, Clone)]
pub struct Hit {
    pub at: Instant,
    pub method: String,
    pub path: String,
    /// 0 when the connection was dropped.
    pub status: u16,
    /// Sent to a route before the Retry-After it was given had elapsed (and not merely in
    /// flight when the 429 was sent: see [`IN_FLIGHT`]).
    pub early: bool,
}

struct Shared {
    api: Box<dyn Api>,
    faults: Mutex<Faults>,
    hits: Mutex<Vec<Hit>>,
    /// Per route: the window in which a request counts as early.
    blocked_until: Mutex<HashMap<String, (Instant, Instant)>>,
    /// Per route: the tokens of its bucket, and when they were counted.
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
    rng: Mutex<Rng>,
}

/// A running emulator; it stops with the test process.
pub struct Emulator {
    pub url: String,
    shared: Arc<Shared>,
}

impl Emulator {
    pub fn start(api: impl Api) -> Emulator {
        let shared = Arc::new(Shared {
            api: Box::new(api),
            faults: Mutex::new(Faults::default()),
            hits: Mutex::new(Vec::new()),
            blocked_until: Mutex::new(HashMap::new()),
            buckets: Mutex::new(HashMap::new()),
            rng: Mutex::new(Rng::new(0x9E37_79B9_7F4A_7C15)),
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener.set_nonblocking(true).expect("nonblocking");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let server = shared.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = TcpListener::from_std(listener).expect("tokio listener");
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let shared = server.clone();
                    tokio::spawn(async move { serve(stream, shared).await });
                }
            });
        });
        Emulator { url, shared }
    }

    pub fn set_faults(&self, faults: Faults) {
        *self.shared.faults.lock().unwrap() = faults;
    }

    pub fn hits(&self) -> Vec<Hit> {
        self.shared.hits.lock().unwrap().clone()
    }

    /// Requests that reached a route before its Retry-After had elapsed.
    pub fn early_hits(&self) -> usize {
        self.hits().iter().filter(|h| h.early).count()
    }
}

async fn serve(mut stream: TcpStream, shared: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::with_capacity(8192);
    loop {
        let Some(req) = read_request(&mut stream, &mut buf).await else {
            return;
        };
        let (faults, draw) = {
            let f = shared.faults.lock().unwrap().clone();
            let mut rng = shared.rng.lock().unwrap();
            let draws = [rng.unit(), rng.unit(), rng.unit()];
            (f, draws)
        };
        if !faults.latency.is_zero() {
            tokio::time::sleep(faults.latency).await;
        }
        let route = shared.api.route(&req);
        let now = Instant::now();
        let early = shared
            .blocked_until
            .lock()
            .unwrap()
            .get(&route)
            .is_some_and(|(from, until)| *from <= now && now < *until);
        let limited = match (&faults.bucket, faults.outage || draw[0] < faults.drop_rate) {
            (Some(bucket), false) => take_token(&shared, &route, bucket, now),
            _ => None,
        };
        let response = if faults.outage {
            Some(shared.api.unavailable())
        } else if draw[0] < faults.drop_rate {
            None
        } else if let Some((wait, limit)) = limited {
            let secs = shared.api.retry_secs(wait);
            shared
                .blocked_until
                .lock()
                .unwrap()
                .insert(route, (now + IN_FLIGHT, now + Duration::from_secs(secs)));
            Some(shared.api.limited(secs, &limit))
        } else if draw[1] < faults.throttle_rate {
            let secs = faults.retry_after_secs.max(1);
            shared
                .blocked_until
                .lock()
                .unwrap()
                .insert(route, (now + IN_FLIGHT, now + Duration::from_secs(secs)));
            Some(shared.api.throttled(secs))
        } else if draw[2] < faults.error_rate {
            Some(shared.api.unavailable())
        } else {
            Some(shared.api.handle(&req))
        };
        let response = match response {
            Some(r) if faults.echo_auth && r.status >= 400 => Some(echo_credentials(&req, r)),
            other => other,
        };
        let status = response.as_ref().map_or(0, |r| r.status);
        shared.hits.lock().unwrap().push(Hit {
            at: now,
            method: req.method.clone(),
            path: req.path.clone(),
            status,
            early,
        });
        let Some(response) = response else { return };
        if write_response(&mut stream, &response).await.is_err() {
            return;
        }
    }
}

/// Takes a token from `route`'s bucket; `None` when there was one, else the wait until there
/// is one and the bucket's state.
fn take_token(
    shared: &Shared,
    route: &str,
    bucket: &Bucket,
    now: Instant,
) -> Option<(Duration, Limit)> {
    let burst = f64::from(bucket.burst.max(1));
    let rate = bucket.rate.max(1e-9);
    let mut buckets = shared.buckets.lock().unwrap();
    let (tokens, at) = buckets.entry(route.to_string()).or_insert((burst, now));
    *tokens = (*tokens + now.saturating_duration_since(*at).as_secs_f64() * rate).min(burst);
    *at = now;
    if *tokens >= 1.0 {
        *tokens -= 1.0;
        return None;
    }
    let limit = Limit {
        burst: bucket.burst,
        reset: Duration::from_secs_f64((burst - *tokens) / rate),
    };
    Some((Duration::from_secs_f64((1.0 - *tokens) / rate), limit))
}

async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Request> {
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > 64 * 1024 {
            return None;
        }
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, target) = (first.next()?.to_string(), first.next()?.to_string());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let body_start = head_end + 4;
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked"));
    let (body, end) = if chunked {
        read_chunked(stream, buf, body_start).await?
    } else {
        fill(stream, buf, body_start + length).await?;
        (
            buf[body_start..body_start + length].to_vec(),
            body_start + length,
        )
    };
    buf.drain(..end);
    let (path, raw_query) = match target.split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (target, String::new()),
    };
    Some(Request {
        method,
        path: percent_decode(&path),
        query: parse_query(&raw_query),
        raw_query,
        headers,
        body,
    })
}

/// Reads until `buf` holds at least `len` bytes; `None` when the connection ends first.
async fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>, len: usize) -> Option<()> {
    while buf.len() < len {
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(())
}

/// The index of the first CRLF in `buf` at or after `from`, reading as needed.
async fn line_end(stream: &mut TcpStream, buf: &mut Vec<u8>, from: usize) -> Option<usize> {
    loop {
        if let Some(i) = buf[from..].windows(2).position(|w| w == b"\r\n") {
            return Some(from + i);
        }
        if buf.len() - from > 64 * 1024 {
            return None;
        }
        fill(stream, buf, buf.len() + 1).await?;
    }
}

/// A `Transfer-Encoding: chunked` body starting at `at` in `buf` (Node's `fetch`, so the
/// vendors' JS SDKs, send request bodies so): the body, and the end of the message (after
/// any trailers).
async fn read_chunked(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    mut at: usize,
) -> Option<(Vec<u8>, usize)> {
    let mut body = Vec::new();
    loop {
        let end = line_end(stream, buf, at).await?;
        let line = std::str::from_utf8(&buf[at..end]).ok()?;
        let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
        at = end + 2;
        if size == 0 {
            // Trailers, up to an empty line.
            loop {
                let end = line_end(stream, buf, at).await?;
                let empty = end == at;
                at = end + 2;
                if empty {
                    return Some((body, at));
                }
            }
        }
        if body.len() + size > 64 * 1024 * 1024 {
            return None;
        }
        fill(stream, buf, at + size + 2).await?;
        body.extend_from_slice(&buf[at..at + size]);
        at += size + 2;
    }
}

fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), String::new()),
        })
        .collect()
}

/// Decodes `%XX` and `+` (as a space) in a query component.
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                match u8::from_str_radix(
                    std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz"),
                    16,
                ) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn write_response(stream: &mut TcpStream, r: &Response) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\ncontent-length: {}\r\n",
        r.status,
        reason(r.status),
        r.body.len()
    );
    for (k, v) in &r.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(&r.body).await?;
    stream.flush().await
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        409 => "Conflict",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}
