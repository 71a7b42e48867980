//! An E2B API emulator, faithful to `reference/providers.md` §1 and its 2026-12 corrections,
//! and to the service's source (`e2b-dev/infra`, `packages/api`) where that says more:
//!
//! - Auth: `X-API-Key` (401 otherwise).
//! - `GET /v2/sandboxes`: the `metadata` filter read as the service reads it. gin decodes the
//!   query once, as Go's `url.ParseQuery` does: a parameter that does not decode (a bad `%`
//!   escape, a `;`) is *dropped*, so a broken filter lists everything unfiltered. Then
//!   `parseFilters` unescapes the value once more as a whole, splits it on `&` and `=`, and
//!   unescapes each key and value a third time; a pair without exactly one `=`, or a part that
//!   does not unescape, is 400 "Error parsing metadata" (an empty filter too: it is one pair
//!   without `=`). The SDK encodes to match (see the driver's doc). `state` (`running,paused`,
//!   both when omitted), `limit` clamped to 1..=100, newest first, `X-Next-Token` paging with
//!   the service's token (`base64url("<RFC3339>__<id>")`; 400 "Invalid next token" for
//!   anything else), `X-Total-Running` when running sandboxes were asked for.
//! - `GET /sandboxes/{id}` (the detail, with `lifecycle`); `DELETE /sandboxes/{id}` (204, 404
//!   with E2B's body); `POST /sandboxes/{id}/timeout` (204, sets `endAt` to now + timeout, a
//!   negative timeout counting as 0).
//! - Rate limits are kept per route *template*, as the service's limiter keys them (team and
//!   gin's `c.FullPath()`, no method): `DELETE /sandboxes/a` and `GET /sandboxes/b` share the
//!   bucket `/sandboxes/:sandboxID`, so a request to any sandbox before the Retry-After given
//!   for another is early. A 429 carries `Retry-After` (whole seconds, the limiter's wait
//!   rounded *down*, at least 1, as the service computes it) and `RateLimit-Limit` (the
//!   burst), `RateLimit-Remaining`, `RateLimit-Reset`.
//! - `POST /sandboxes` and `POST /v2/sandboxes` (the SDK's create): a running sandbox with the
//!   body's `metadata` (strings; `templateID` required), answered 201 with E2B's `Sandbox`
//!   (`sandboxID`, `templateID`, `clientID`, `envdVersion`); every create's headers and body
//!   are recorded ([`State::creates`]). The sandbox keeps the template it was made from, and
//!   lists with it (`templateID`).
//! - Each sandbox made through the API has its life recorded on the wall clock, as the
//!   service's own record of it (its `startedAt`, and when a kill ended it): the moment the
//!   create was served, and the moment a `DELETE` removed it ([`State::lives`]), in unix
//!   milliseconds, for tests that check what sandguard counted against what ran.
//! - 503 with E2B's error body; [`State::answer_next`] scripts answers with a `Should-Retry`
//!   header, which the service may send on any answer.

#![allow(dead_code)]

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use super::emu::{Api, Emulator, Limit, Request, Response};

#[derive(Debug, Clone)]
pub struct Sb {
    pub id: String,
    pub started_at: i64,
    pub end_at: i64,
    pub state: &'static str,
    pub metadata: BTreeMap<String, String>,
    /// The template it was made from (`base` for one put in by a test).
    pub template: String,
}

/// A sandbox's life, as the emulator served it: unix milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Life {
    /// When its create was served.
    pub created_ms: u64,
    /// When a `DELETE` removed it; `None` while it lives.
    pub removed_ms: Option<u64>,
}

/// One scripted answer: (method, status, `Should-Retry` value).
type Scripted = (String, u16, Option<String>);

#[derive(Default)]
pub struct State {
    sandboxes: Mutex<BTreeMap<String, Sb>>,
    clock: Mutex<i64>,
    scripted: Mutex<VecDeque<Scripted>>,
    metadata_wire: Mutex<Vec<String>>,
    creates: Mutex<Vec<Created>>,
    counter: Mutex<u64>,
    lives: Mutex<BTreeMap<String, Life>>,
}

/// One create request as it reached the emulator.
#[derive(Debug, Clone)]
pub struct Created {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl State {
    /// Adds a running sandbox with this metadata; ids are unique per call.
    pub fn insert(&self, id: &str, metadata: &[(&str, &str)]) {
        let mut clock = self.clock.lock().unwrap();
        *clock += 1;
        let started_at = 1_790_000_000 + *clock;
        let sb = Sb {
            id: id.to_string(),
            started_at,
            end_at: now() + 300,
            state: "running",
            metadata: metadata
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            template: "base".to_string(),
        };
        self.sandboxes.lock().unwrap().insert(id.to_string(), sb);
    }

    /// Pauses a sandbox (it stays listed, as `paused`).
    pub fn pause(&self, id: &str) {
        if let Some(sb) = self.sandboxes.lock().unwrap().get_mut(id) {
            sb.state = "paused";
        }
    }

    /// Ends a sandbox as its own timeout would: gone, with no request for it.
    pub fn time_out(&self, id: &str) {
        self.sandboxes.lock().unwrap().remove(id);
    }

    pub fn exists(&self, id: &str) -> bool {
        self.sandboxes.lock().unwrap().contains_key(id)
    }

    pub fn get(&self, id: &str) -> Option<Sb> {
        self.sandboxes.lock().unwrap().get(id).cloned()
    }

    pub fn count(&self) -> usize {
        self.sandboxes.lock().unwrap().len()
    }

    /// The next authenticated `method` request is answered `status` (E2B's error body) with
    /// `Should-Retry: <should_retry>` when given, instead of being served. Queued in order.
    pub fn answer_next(&self, method: &str, status: u16, should_retry: Option<&str>) {
        self.scripted.lock().unwrap().push_back((
            method.to_string(),
            status,
            should_retry.map(str::to_string),
        ));
    }

    /// The `metadata` parameter of every listing so far, exactly as it came on the wire
    /// (still encoded).
    pub fn metadata_on_the_wire(&self) -> Vec<String> {
        self.metadata_wire.lock().unwrap().clone()
    }

    /// Every authenticated create request so far, in order.
    pub fn creates(&self) -> Vec<Created> {
        self.creates.lock().unwrap().clone()
    }

    /// The life of every sandbox made through the API, by id (see the module docs).
    pub fn lives(&self) -> BTreeMap<String, Life> {
        self.lives.lock().unwrap().clone()
    }

    /// The ids of every sandbox, sorted.
    pub fn ids(&self) -> Vec<String> {
        self.sandboxes.lock().unwrap().keys().cloned().collect()
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn rfc3339(t: i64) -> String {
    sandguard::testing::timefmt::format_rfc3339(t)
}

struct E2bApi {
    key: String,
    state: Arc<State>,
}

/// Starts an emulator that accepts `key`.
pub fn start(key: &str) -> (Emulator, Arc<State>) {
    let state = Arc::new(State::default());
    let emu = Emulator::start(E2bApi {
        key: key.to_string(),
        state: state.clone(),
    });
    (emu, state)
}

fn error(code: u16, message: &str) -> Response {
    Response::json(code, json!({ "code": code, "message": message }))
}

fn listed(sb: &Sb) -> serde_json::Value {
    json!({
        "templateID": sb.template, "sandboxID": sb.id, "clientID": "emulator", "startedAt": rfc3339(sb.started_at),
        "endAt": rfc3339(sb.end_at), "cpuCount": 2, "memoryMB": 512, "diskSizeMB": 0, "state": sb.state,
        "envdVersion": "0.2.0", "metadata": sb.metadata,
    })
}

fn detail(sb: &Sb) -> serde_json::Value {
    let mut v = listed(sb);
    v["lifecycle"] = json!({ "autoResume": false, "onTimeout": "kill" });
    v
}

/// Go's `url.QueryUnescape`: `%XX` with two hex digits (anything else is an error) and `+` as
/// a space. The result is bytes, which need not be UTF-8.
fn go_unescape(s: &[u8]) -> Option<Vec<u8>> {
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'%' => {
                let hi = hex(*s.get(i + 1)?)?;
                let lo = hex(*s.get(i + 2)?)?;
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Some(out)
}

/// Go's `url.ParseQuery`, as gin hands parameters to the handler: pairs split on `&`; a pair
/// holding `;`, or whose key or value does not unescape, is dropped without a word.
fn go_query(raw: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    raw.split('&')
        .filter(|pair| !pair.is_empty() && !pair.contains(';'))
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Some((go_unescape(k.as_bytes())?, go_unescape(v.as_bytes())?))
        })
        .collect()
}

/// The service's `parseFilters`: the value unescaped as a whole, split on `&`, each pair on
/// `=` (exactly two parts), each part unescaped again. Later keys win, as in a Go map.
fn parse_filters(value: &[u8]) -> Option<BTreeMap<Vec<u8>, Vec<u8>>> {
    let whole = go_unescape(value)?;
    let mut filters = BTreeMap::new();
    for pair in whole.split(|b| *b == b'&') {
        let parts: Vec<&[u8]> = pair.split(|b| *b == b'=').collect();
        if parts.len() != 2 {
            return None;
        }
        filters.insert(go_unescape(parts[0])?, go_unescape(parts[1])?);
    }
    Some(filters)
}

fn matches(sb: &Sb, filters: &BTreeMap<Vec<u8>, Vec<u8>>) -> bool {
    filters.iter().all(|(k, v)| {
        std::str::from_utf8(k)
            .ok()
            .and_then(|k| sb.metadata.get(k))
            .is_some_and(|have| have.as_bytes() == v.as_slice())
    })
}

/// The raw value of the first parameter named `name` (its name decoded, its value not).
fn raw_param<'a>(raw: &'a str, name: &str) -> Option<&'a str> {
    raw.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (go_unescape(k.as_bytes()).as_deref() == Some(name.as_bytes())).then_some(v)
    })
}

impl E2bApi {
    fn list(&self, req: &Request) -> Response {
        let params = go_query(&req.raw_query);
        let values = |name: &str| -> Vec<&Vec<u8>> {
            params
                .iter()
                .filter(|(k, _)| k == name.as_bytes())
                .map(|(_, v)| v)
                .collect()
        };
        for single in ["metadata", "state", "limit", "nextToken"] {
            if values(single).len() > 1 {
                return error(400, &format!("Invalid format for parameter {single}"));
            }
        }
        if let Some(raw) = raw_param(&req.raw_query, "metadata") {
            self.state
                .metadata_wire
                .lock()
                .unwrap()
                .push(raw.to_string());
        }
        let filters = match values("metadata").first() {
            Some(value) => match parse_filters(value) {
                Some(f) => Some(f),
                None => return error(400, "Error parsing metadata"),
            },
            None => None,
        };
        let states: Option<Vec<String>> = values("state").first().map(|v| {
            String::from_utf8_lossy(v)
                .split(',')
                .map(str::to_string)
                .collect()
        });
        let wants = |state: &str| states.as_ref().is_none_or(|s| s.iter().any(|x| x == state));
        let limit = match values("limit").first() {
            None => 100,
            Some(v) => match std::str::from_utf8(v)
                .ok()
                .and_then(|l| l.parse::<i32>().ok())
            {
                Some(l) => l.clamp(1, 100) as usize,
                None => return error(400, "Invalid format for parameter limit"),
            },
        };
        let mut all: Vec<Sb> = self
            .state
            .sandboxes
            .lock()
            .unwrap()
            .values()
            .filter(|sb| wants(sb.state))
            .filter(|sb| filters.as_ref().is_none_or(|f| matches(sb, f)))
            .cloned()
            .collect();
        all.sort_by(|a, b| {
            b.started_at
                .cmp(&a.started_at)
                .then_with(|| a.id.cmp(&b.id))
        });
        let start = match values("nextToken").first() {
            None => 0,
            Some(token) => match decode_token(token) {
                // The page after the last sandbox of the previous page, by (startedAt, id).
                Some((t, id)) => all
                    .iter()
                    .position(|sb| sb.started_at < t || (sb.started_at == t && sb.id > id))
                    .unwrap_or(all.len()),
                None => return error(400, "Invalid next token"),
            },
        };
        let running = all.iter().filter(|sb| sb.state == "running").count();
        let page: Vec<&Sb> = all.iter().skip(start).take(limit).collect();
        let body = json!(page.iter().map(|sb| listed(sb)).collect::<Vec<_>>());
        let mut response = Response::json(200, body);
        if wants("running") {
            response = response.with_header("X-Total-Running", running.to_string());
        }
        if start + limit < all.len() {
            if let Some(last) = page.last() {
                response =
                    response.with_header("X-Next-Token", encode_token(last.started_at, &last.id));
            }
        }
        response
    }

    fn create(&self, req: &Request) -> Response {
        self.state.creates.lock().unwrap().push(Created {
            headers: req.headers.clone(),
            body: req.body.clone(),
        });
        let body = req.json().unwrap_or_default();
        if body
            .get("templateID")
            .and_then(serde_json::Value::as_str)
            .is_none()
        {
            return error(400, "Invalid request body");
        }
        let mut metadata = Vec::new();
        if let Some(map) = body.get("metadata").and_then(serde_json::Value::as_object) {
            for (k, v) in map {
                let Some(v) = v.as_str() else {
                    return error(400, "Invalid request body");
                };
                metadata.push((k.as_str(), v));
            }
        }
        let id = {
            let mut n = self.state.counter.lock().unwrap();
            *n += 1;
            format!("icreated{:06}p{}", *n, std::process::id())
        };
        self.state.insert(&id, &metadata);
        // A created sandbox starts now, and E2B ends it `timeout` seconds later (15 by
        // default). (Only recorded: nothing here ends it.)
        let timeout = body
            .get("timeout")
            .and_then(serde_json::Value::as_i64)
            .unwrap_or(15);
        if let Some(sb) = self.state.sandboxes.lock().unwrap().get_mut(&id) {
            sb.started_at = now();
            sb.end_at = sb.started_at + timeout.max(0);
        }
        if let Some(sb) = self.state.sandboxes.lock().unwrap().get_mut(&id) {
            sb.template = body["templateID"].as_str().unwrap_or_default().to_string();
        }
        let life = Life {
            created_ms: now_ms(),
            removed_ms: None,
        };
        self.state.lives.lock().unwrap().insert(id.clone(), life);
        Response::json(
            201,
            json!({
                "templateID": body["templateID"], "sandboxID": id, "clientID": "emulator",
                "envdVersion": "0.2.0", "envdAccessToken": "envd-token", "domain": null,
            }),
        )
    }

    fn by_id(&self, req: &Request, id: &str, action: Option<&str>) -> Response {
        let missing = || {
            error(
                404,
                &format!("Sandbox \"{id}\" doesn't exist or you don't have access to it"),
            )
        };
        let mut all = self.state.sandboxes.lock().unwrap();
        match (req.method.as_str(), action) {
            ("GET", None) => all
                .get(id)
                .map_or_else(missing, |sb| Response::json(200, detail(sb))),
            ("DELETE", None) => match all.remove(id) {
                Some(_) => {
                    if let Some(life) = self.state.lives.lock().unwrap().get_mut(id) {
                        life.removed_ms = Some(now_ms());
                    }
                    Response::empty(204)
                }
                None => missing(),
            },
            ("POST", Some("timeout")) => {
                let Some(secs) = req
                    .json()
                    .and_then(|b| b.get("timeout").and_then(serde_json::Value::as_i64))
                else {
                    return error(400, "Invalid request body");
                };
                match all.get_mut(id) {
                    Some(sb) => {
                        sb.end_at = now() + secs.max(0);
                        Response::empty(204)
                    }
                    None => missing(),
                }
            }
            _ => error(404, "Not found"),
        }
    }

    fn scripted(&self, req: &Request) -> Option<Response> {
        let mut queue = self.state.scripted.lock().unwrap();
        if queue.front().is_none_or(|(m, _, _)| *m != req.method) {
            return None;
        }
        let (_, status, should_retry) = queue.pop_front()?;
        let message = match status {
            404 => "Sandbox doesn't exist or you don't have access to it",
            409 => "Sandbox is changing state",
            429 => "Rate limit exceeded",
            500..=599 => "Service unavailable",
            _ => "Invalid request",
        };
        let mut response = error(status, message);
        if let Some(v) = should_retry {
            response = response.with_header("Should-Retry", v);
        }
        Some(response)
    }
}

/// The service's page token: URL-safe base64 (padded) of `<RFC3339Nano>__<sandboxID>`.
fn encode_token(started_at: i64, id: &str) -> String {
    base64url(format!("{}__{id}", rfc3339(started_at)).as_bytes())
}

fn decode_token(token: &[u8]) -> Option<(i64, String)> {
    let text = String::from_utf8(unbase64url(token)?).ok()?;
    let parts: Vec<&str> = text.split("__").collect();
    if parts.len() != 2 {
        return None;
    }
    Some((
        sandguard::testing::timefmt::parse_rfc3339(parts[0])?,
        parts[1].to_string(),
    ))
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn base64url(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Go's `base64.URLEncoding.DecodeString`: padded, URL alphabet, nothing else.
fn unbase64url(text: &[u8]) -> Option<Vec<u8>> {
    if text.len() % 4 != 0 {
        return None;
    }
    let mut out = Vec::new();
    for (c, chunk) in text.chunks(4).enumerate() {
        let last = c + 1 == text.len() / 4;
        let pad = chunk.iter().rev().take_while(|b| **b == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for (i, b) in chunk[..4 - pad].iter().enumerate() {
            let v = B64.iter().position(|x| x == b)? as u32;
            n |= v << (18 - 6 * i);
        }
        out.extend_from_slice(&n.to_be_bytes()[1..4 - pad]);
    }
    Some(out)
}

impl Api for E2bApi {
    fn handle(&self, req: &Request) -> Response {
        if req.header("x-api-key") != Some(self.key.as_str()) {
            return error(401, "Invalid API key");
        }
        if let Some(response) = self.scripted(req) {
            return response;
        }
        let segs = req.segments();
        match (req.method.as_str(), segs.as_slice()) {
            ("GET", ["v2", "sandboxes"]) => self.list(req),
            ("POST", ["sandboxes"] | ["v2", "sandboxes"]) => self.create(req),
            (_, ["sandboxes", id]) => self.by_id(req, id, None),
            (_, ["sandboxes", id, action]) => self.by_id(req, id, Some(action)),
            _ => error(404, "Not found"),
        }
    }

    fn throttled(&self, secs: u64) -> Response {
        error(429, "Rate limit exceeded")
            .with_header("Retry-After", secs.to_string())
            .with_header("RateLimit-Limit", "20")
            .with_header("RateLimit-Remaining", "0")
            .with_header("RateLimit-Reset", secs.to_string())
    }

    fn limited(&self, secs: u64, limit: &Limit) -> Response {
        error(429, "Rate limit exceeded")
            .with_header("Retry-After", secs.to_string())
            .with_header("RateLimit-Limit", limit.burst.to_string())
            .with_header("RateLimit-Remaining", "0")
            .with_header(
                "RateLimit-Reset",
                (limit.reset.as_secs_f64().ceil() as u64).to_string(),
            )
    }

    /// `max(int(res.RetryAfter.Seconds()), 1)`: rounded down, at least 1.
    fn retry_secs(&self, wait: Duration) -> u64 {
        wait.as_secs().max(1)
    }

    fn unavailable(&self) -> Response {
        error(503, "Service unavailable")
    }

    /// gin's `c.FullPath()`, the limiter's key: the route template, without the method.
    fn route(&self, req: &Request) -> String {
        match req.segments().as_slice() {
            ["sandboxes", _] => "/sandboxes/:sandboxID".into(),
            ["sandboxes", _, action] => format!("/sandboxes/:sandboxID/{action}"),
            _ => req.path.clone(),
        }
    }
}
