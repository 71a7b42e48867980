//! An in-memory Daytona API on the emulator framework, after `providers.md` §2:
//!
//! - Routes under `/api`: `GET /api/sandbox` (the cursor-paged `{"items","nextCursor"}` shape
//!   by default, or the legacy bare array after [`Daytona::set_legacy`]), `GET` and `DELETE
//!   /api/sandbox/{id}`, `POST /api/sandbox/{id}/autostop|autodelete|autoarchive/{n}` and
//!   `POST /api/sandbox/{id}/last-activity` (answered 201, as NestJS does without
//!   `@HttpCode`).
//! - `Authorization: Bearer <key>`, else 401. Errors carry NestJS's exception-filter body
//!   (`path`, `timestamp`, `statusCode`, `error`, `message`).
//! - The `labels` filter is JSON matched by containment; bad JSON is 400 "Invalid labels JSON
//!   format"; `limit` is 1..=200 (default 100); `states` defaults to every state but
//!   `destroyed`. Pages are keyset-ordered by creation (newest first), so a cursor stays valid
//!   while sandboxes come and go.
//! - Delete is asynchronous: 200 with the sandbox as it was, then `destroying` for
//!   [`Daytona::set_destroy_delay`] (a second delete meanwhile is 409 "Sandbox state change in
//!   progress"), then `destroyed`: unlisted, and 404 to every route.
//! - A 429 names its throttler: `Retry-After-sandbox-lifecycle` for lifecycle routes (delete),
//!   `Retry-After-authenticated` for the rest; rate-limit buckets are those throttlers.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::emu::{Api, Emulator, Request, Response};

const STATES: &[&str] = &[
    "creating",
    "restoring",
    "destroyed",
    "destroying",
    "started",
    "stopped",
    "starting",
    "stopping",
    "error",
    "build_failed",
    "pending_build",
    "building_snapshot",
    "unknown",
    "pulling_snapshot",
    "archived",
    "archiving",
    "resizing",
    "snapshotting",
    "forking",
    "pausing",
    "paused",
    "resuming",
];

struct Sandbox {
    id: String,
    state: String,
    /// A state change in progress until then (409 to a delete).
    pending_until: Option<Instant>,
    /// `destroying` turns `destroyed` then.
    destroy_at: Option<Instant>,
    created_ms: i64,
    labels: BTreeMap<String, String>,
    last_activity_ms: i64,
    auto_stop: i64,
    auto_delete: i64,
}

impl Sandbox {
    fn settle(&mut self, now: Instant) {
        if self.destroy_at.is_some_and(|t| t <= now) {
            self.state = "destroyed".into();
            self.destroy_at = None;
        }
        if self.pending_until.is_some_and(|t| t <= now) {
            self.pending_until = None;
            self.state = "started".into();
        }
    }

    fn pending(&self) -> bool {
        self.pending_until.is_some() || self.destroy_at.is_some()
    }

    fn json(&self) -> Value {
        let at = iso(self.created_ms);
        json!({
            "id": self.id,
            "organizationId": "org-emulated",
            "name": self.id,
            "target": "us",
            "runnerId": "runner-1",
            "sandboxClass": "small",
            "state": self.state,
            "desiredState": if self.destroy_at.is_some() { "destroyed" } else { "started" },
            "errorReason": null,
            "recoverable": false,
            "snapshot": "daytonaio/sandbox:0.4.3",
            "user": "daytona",
            "public": false,
            "cpu": 1, "gpu": 0, "memory": 1, "disk": 3,
            "labels": self.labels,
            "backupState": "None",
            "autoStopInterval": self.auto_stop,
            "autoArchiveInterval": 10080,
            "autoDeleteInterval": self.auto_delete,
            "createdAt": at, "updatedAt": at, "lastActivityAt": iso(self.last_activity_ms),
            "daemonVersion": "0.1.0",
            "toolboxProxyUrl": "https://proxy.app.daytona.io/toolbox",
        })
    }
}

#[derive(Default)]
struct State {
    sandboxes: Vec<Sandbox>,
    legacy: bool,
    destroy_delay: Duration,
    counter: u64,
    /// The throttler of the request being answered (see [`Handler::route`]).
    throttler: &'static str,
}

impl State {
    fn settle(&mut self) {
        let now = Instant::now();
        self.sandboxes.iter_mut().for_each(|s| s.settle(now));
    }

    fn find(&mut self, id: &str) -> Option<&mut Sandbox> {
        self.settle();
        self.sandboxes
            .iter_mut()
            .find(|s| s.id == id && s.state != "destroyed")
    }
}

/// The emulator and a handle on its state. Derefs to the [`Emulator`] (faults, hits).
pub struct Daytona {
    pub emu: Emulator,
    state: Arc<Mutex<State>>,
}

impl std::ops::Deref for Daytona {
    type Target = Emulator;
    fn deref(&self) -> &Emulator {
        &self.emu
    }
}

impl Daytona {
    /// A Daytona that accepts `key`, answers the paged shape, and destroys in 200 ms.
    pub fn start(key: &str) -> Daytona {
        let state = Arc::new(Mutex::new(State {
            destroy_delay: Duration::from_millis(200),
            throttler: "authenticated",
            ..State::default()
        }));
        let emu = Emulator::start(Handler {
            key: key.to_string(),
            state: state.clone(),
        });
        Daytona { emu, state }
    }

    /// What `DAYTONA_API_URL` should be: the base with its `/api` prefix.
    pub fn api_url(&self) -> String {
        format!("{}/api", self.emu.url)
    }

    /// Answer listings with the pre-2026-05-24 bare array (no paging).
    pub fn set_legacy(&self, legacy: bool) {
        self.state.lock().unwrap().legacy = legacy;
    }

    pub fn set_destroy_delay(&self, delay: Duration) {
        self.state.lock().unwrap().destroy_delay = delay;
    }

    /// A started sandbox with these labels; returns its id.
    pub fn insert(&self, labels: &[(&str, &str)]) -> String {
        self.insert_busy(labels, Duration::ZERO)
    }

    /// A sandbox whose start is still landing for `busy` (a delete meanwhile is 409).
    pub fn insert_busy(&self, labels: &[(&str, &str)], busy: Duration) -> String {
        let mut st = self.state.lock().unwrap();
        st.counter += 1;
        let n = st.counter;
        let id = format!(
            "{:08x}-{:04x}-4000-8000-{:012x}",
            std::process::id(),
            n & 0xffff,
            n
        );
        let pending_until = (!busy.is_zero()).then(|| Instant::now() + busy);
        let sandbox = Sandbox {
            id: id.clone(),
            state: if pending_until.is_some() {
                "starting"
            } else {
                "started"
            }
            .into(),
            pending_until,
            destroy_at: None,
            // Distinct creation times, one second apart, so keyset order is total.
            created_ms: 1_780_000_000_000 + n as i64 * 1000,
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            last_activity_ms: 1_780_000_000_000 + n as i64 * 1000,
            auto_stop: 15,
            auto_delete: -1,
        };
        st.sandboxes.push(sandbox);
        id
    }

    /// The ids of sandboxes neither destroying nor destroyed, sorted.
    pub fn live(&self) -> Vec<String> {
        let mut st = self.state.lock().unwrap();
        st.settle();
        let mut ids: Vec<String> = st
            .sandboxes
            .iter()
            .filter(|s| !matches!(s.state.as_str(), "destroying" | "destroyed"))
            .map(|s| s.id.clone())
            .collect();
        ids.sort();
        ids
    }

    pub fn is_live(&self, id: &str) -> bool {
        self.live().iter().any(|l| l == id)
    }

    /// `(autoStopInterval, autoDeleteInterval)` of a sandbox.
    pub fn intervals(&self, id: &str) -> Option<(i64, i64)> {
        let mut st = self.state.lock().unwrap();
        st.find(id).map(|s| (s.auto_stop, s.auto_delete))
    }

    /// When the sandbox was last used (or marked used), in Unix milliseconds.
    pub fn last_activity_ms(&self, id: &str) -> Option<i64> {
        let mut st = self.state.lock().unwrap();
        st.find(id).map(|s| s.last_activity_ms)
    }
}

struct Handler {
    key: String,
    state: Arc<Mutex<State>>,
}

impl Api for Handler {
    fn handle(&self, req: &Request) -> Response {
        if req.header("authorization") != Some(&format!("Bearer {}", self.key)) {
            return nest_error(req, 401, "Unauthorized");
        }
        let segs = req.segments();
        let mut st = self.state.lock().unwrap();
        match (req.method.as_str(), segs.as_slice()) {
            ("GET", ["api", "sandbox"]) => list(&mut st, req),
            ("GET", ["api", "sandbox", id]) => match st.find(id) {
                Some(s) => Response::json(200, s.json()),
                None => not_found(req, id),
            },
            ("DELETE", ["api", "sandbox", id]) => delete(&mut st, req, id),
            ("POST", ["api", "sandbox", id, "last-activity"]) => match st.find(id) {
                Some(s) => {
                    s.last_activity_ms = now_ms();
                    Response::empty(201)
                }
                None => not_found(req, id),
            },
            ("POST", ["api", "sandbox", id, setting, n])
                if matches!(*setting, "autostop" | "autodelete" | "autoarchive") =>
            {
                interval(&mut st, req, id, setting, n)
            }
            _ => nest_error(req, 404, &format!("Cannot {} {}", req.method, req.path)),
        }
    }

    fn throttled(&self, secs: u64) -> Response {
        let name = self.state.lock().unwrap().throttler;
        Response::json(
            429,
            json!({"statusCode": 429, "error": "Too Many Requests",
                   "message": "ThrottlerException: Too Many Requests"}),
        )
        .with_header(&format!("retry-after-{name}"), secs.to_string())
        .with_header(&format!("x-ratelimit-limit-{name}"), "10")
        .with_header(&format!("x-ratelimit-remaining-{name}"), "0")
        .with_header(&format!("x-ratelimit-reset-{name}"), secs.to_string())
    }

    fn unavailable(&self) -> Response {
        Response::json(
            503,
            json!({"statusCode": 503, "error": "Service Unavailable",
                   "message": "Service Unavailable"}),
        )
    }

    /// Daytona limits per named throttler, not per route. The framework asks for the route
    /// right before it may answer 429 for the same request, on its single-threaded server,
    /// so the throttler is remembered here for [`Api::throttled`] to name in its header.
    fn route(&self, req: &Request) -> String {
        let lifecycle = req.method == "DELETE"
            || (req.method == "POST"
                && req.segments().get(3).is_some_and(|op| {
                    matches!(
                        *op,
                        "stop" | "start" | "pause" | "resize" | "recover" | "archive"
                    )
                }));
        let name = if lifecycle {
            "sandbox-lifecycle"
        } else {
            "authenticated"
        };
        self.state.lock().unwrap().throttler = name;
        name.to_string()
    }
}

fn list(st: &mut State, req: &Request) -> Response {
    st.settle();
    let wanted: BTreeMap<String, String> = match req.query("labels") {
        None => BTreeMap::new(),
        Some(text) => match serde_json::from_str(text) {
            Ok(map) => map,
            Err(_) => return nest_error(req, 400, "Invalid labels JSON format"),
        },
    };
    let states: Vec<&str> = req.queries("states");
    if let Some(bad) = states
        .iter()
        .find(|s| !STATES.contains(s) || **s == "destroyed")
    {
        return validation_error(req, &format!("states: invalid value {bad:?}"));
    }
    let mut matching: Vec<&Sandbox> = st
        .sandboxes
        .iter()
        .filter(|s| {
            if states.is_empty() {
                s.state != "destroyed"
            } else {
                states.contains(&s.state.as_str())
            }
        })
        .filter(|s| wanted.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
        .collect();
    matching.sort_by(|a, b| (b.created_ms, &b.id).cmp(&(a.created_ms, &a.id)));
    if st.legacy {
        return Response::json(
            200,
            Value::Array(matching.iter().map(|s| s.json()).collect()),
        );
    }
    let limit = match req.query("limit").map(str::parse::<usize>) {
        None => 100,
        Some(Ok(n)) if (1..=200).contains(&n) => n,
        Some(_) => return validation_error(req, "limit must be an integer from 1 to 200"),
    };
    let start = match req.query("cursor") {
        None => 0,
        Some(c) => match decode_cursor(c) {
            Some((ms, id)) => matching
                .iter()
                .position(|s| (s.created_ms, s.id.as_str()) < (ms, id.as_str()))
                .unwrap_or(matching.len()),
            None => return nest_error(req, 400, "Invalid cursor"),
        },
    };
    let page: Vec<&Sandbox> = matching.iter().skip(start).take(limit).copied().collect();
    let next = (start + page.len() < matching.len())
        .then(|| page.last().map(|s| encode_cursor(s.created_ms, &s.id)))
        .flatten();
    Response::json(
        200,
        json!({"items": page.iter().map(|s| s.json()).collect::<Vec<_>>(), "nextCursor": next}),
    )
}

fn delete(st: &mut State, req: &Request, id: &str) -> Response {
    let delay = st.destroy_delay;
    let Some(s) = st.find(id) else {
        return not_found(req, id);
    };
    if s.pending() {
        return nest_error(req, 409, "Sandbox state change in progress");
    }
    let before = s.json();
    s.state = "destroying".into();
    s.destroy_at = Some(Instant::now() + delay);
    Response::json(200, before)
}

fn interval(st: &mut State, req: &Request, id: &str, setting: &str, n: &str) -> Response {
    let Ok(n) = n.parse::<i64>() else {
        return nest_error(req, 400, "Validation failed (numeric string is expected)");
    };
    let Some(s) = st.find(id) else {
        return not_found(req, id);
    };
    match setting {
        "autostop" if n < 0 => {
            return nest_error(
                req,
                400,
                "Auto-stop interval must be a non-negative integer",
            )
        }
        "autostop" => s.auto_stop = n,
        "autodelete" => s.auto_delete = n,
        _ => {}
    }
    Response::json(201, s.json())
}

fn not_found(req: &Request, id: &str) -> Response {
    nest_error(req, 404, &format!("Sandbox with ID or name {id} not found"))
}

/// NestJS's `AllExceptionsFilter` body.
fn nest_error(req: &Request, status: u16, message: &str) -> Response {
    Response::json(status, error_body(req, status, json!(message)))
}

/// class-validator's 400: `message` is a list.
fn validation_error(req: &Request, message: &str) -> Response {
    Response::json(400, error_body(req, 400, json!([message])))
}

fn error_body(req: &Request, status: u16, message: Value) -> Value {
    let error = match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        409 => "Conflict",
        _ => "Error",
    };
    json!({"path": req.path, "timestamp": iso(now_ms()), "statusCode": status,
           "error": error, "message": message})
}

fn encode_cursor(ms: i64, id: &str) -> String {
    format!("{ms}:{id}")
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn decode_cursor(c: &str) -> Option<(i64, String)> {
    let bytes: Option<Vec<u8>> = (0..c.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(c.get(i..i + 2)?, 16).ok())
        .collect();
    let text = String::from_utf8(bytes?).ok()?;
    let (ms, id) = text.split_once(':')?;
    Some((ms.parse().ok()?, id.to_string()))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// `2026-06-01T10:00:00.123Z`, as JavaScript's `toISOString` writes it.
fn iso(ms: i64) -> String {
    let secs = sandguard::timefmt::format_rfc3339(ms.div_euclid(1000));
    format!("{}.{:03}Z", secs.trim_end_matches('Z'), ms.rem_euclid(1000))
}
