//! An E2B API emulator, faithful to `reference/providers.md` §1: `X-API-Key` auth (401
//! otherwise), `GET /v2/sandboxes` with the double-encoded `metadata` filter (400 "Error
//! parsing metadata" when a pair lacks its `=`), `limit` clamped to 100, `X-Next-Token` paging
//! (400 "Invalid next token" for a forged one), newest first; `GET /sandboxes/{id}`;
//! `DELETE /sandboxes/{id}` (204, 404 with E2B's body); `POST /sandboxes/{id}/timeout` (204,
//! sets `endAt` to now + timeout); 429 with `Retry-After`, 503 with E2B's error body.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::json;

use super::emu::{percent_decode, Api, Emulator, Request, Response};

#[derive(Debug, Clone)]
pub struct Sb {
    pub id: String,
    pub started_at: i64,
    pub end_at: i64,
    pub state: &'static str,
    pub metadata: BTreeMap<String, String>,
}

#[derive(Default)]
pub struct State {
    sandboxes: Mutex<BTreeMap<String, Sb>>,
    clock: Mutex<i64>,
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
        };
        self.sandboxes.lock().unwrap().insert(id.to_string(), sb);
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
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn rfc3339(t: i64) -> String {
    sandguard::timefmt::format_rfc3339(t)
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
        "templateID": "base", "sandboxID": sb.id, "clientID": "emulator", "startedAt": rfc3339(sb.started_at),
        "endAt": rfc3339(sb.end_at), "cpuCount": 2, "memoryMB": 512, "diskSizeMB": 0, "state": sb.state,
        "envdVersion": "0.2.0", "metadata": sb.metadata,
    })
}

/// `k=v&k2=v2`, each part percent-encoded.
fn parse_metadata(text: &str) -> Option<Vec<(String, String)>> {
    text.split('&')
        .map(|pair| {
            let parts: Vec<&str> = pair.split('=').collect();
            (parts.len() == 2).then(|| (percent_decode(parts[0]), percent_decode(parts[1])))
        })
        .collect()
}

impl E2bApi {
    fn list(&self, req: &Request) -> Response {
        let filter = match req.query("metadata") {
            Some(m) if !m.is_empty() => match parse_metadata(m) {
                Some(f) => f,
                None => return error(400, "Error parsing metadata"),
            },
            _ => Vec::new(),
        };
        let limit = req
            .query("limit")
            .and_then(|l| l.parse::<usize>().ok())
            .unwrap_or(100)
            .clamp(1, 100);
        let mut all: Vec<Sb> = self
            .state
            .sandboxes
            .lock()
            .unwrap()
            .values()
            .filter(|sb| filter.iter().all(|(k, v)| sb.metadata.get(k) == Some(v)))
            .cloned()
            .collect();
        all.sort_by(|a, b| {
            b.started_at
                .cmp(&a.started_at)
                .then_with(|| a.id.cmp(&b.id))
        });
        let start = match req.query("nextToken") {
            None => 0,
            Some(token) => match decode_token(token) {
                // The page after the last sandbox of the previous page, by (startedAt, id).
                Some((t, id)) => all
                    .iter()
                    .position(|sb| (sb.started_at, sb.id.as_str()) < (t, id.as_str()))
                    .unwrap_or(all.len()),
                None => return error(400, "Invalid next token"),
            },
        };
        let page: Vec<&Sb> = all.iter().skip(start).take(limit).collect();
        let body = json!(page.iter().map(|sb| listed(sb)).collect::<Vec<_>>());
        let mut response = Response::json(200, body);
        if start + limit < all.len() {
            if let Some(last) = page.last() {
                response =
                    response.with_header("X-Next-Token", encode_token(last.started_at, &last.id));
            }
        }
        response
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
                .map_or_else(missing, |sb| Response::json(200, listed(sb))),
            ("DELETE", None) => match all.remove(id) {
                Some(_) => Response::empty(204),
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
}

/// The real API's token is base64url of `<RFC3339Nano>__<id>`; here a readable form of the
/// same pair is enough to be opaque to the driver and checkable here.
fn encode_token(started_at: i64, id: &str) -> String {
    format!("{started_at}__{id}")
}

fn decode_token(token: &str) -> Option<(i64, String)> {
    let (t, id) = token.split_once("__")?;
    Some((t.parse().ok()?, id.to_string()))
}

impl Api for E2bApi {
    fn handle(&self, req: &Request) -> Response {
        if req.header("x-api-key") != Some(self.key.as_str()) {
            return error(401, "Invalid API key");
        }
        let segs = req.segments();
        match (req.method.as_str(), segs.as_slice()) {
            ("GET", ["v2", "sandboxes"]) => self.list(req),
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

    fn unavailable(&self) -> Response {
        error(503, "Service unavailable")
    }
}
