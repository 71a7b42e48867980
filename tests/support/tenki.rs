//! A Tenki control plane in memory, on the emulator framework: the Connect unary JSON protocol
//! of `tenki.sandbox.v1.SandboxService` as `reference/providers.md` §5 describes it.
//!
//! - `POST /tenki.sandbox.v1.SandboxService/<Method>` only; another verb is 405, an unknown
//!   path a plain 404 (Go's mux). `Content-Type` must be JSON (415 otherwise) and
//!   `Connect-Protocol-Version: 1` present (400 `invalid_argument`).
//! - `Authorization: Bearer <TOKEN>`, else 401 `unauthenticated`.
//! - `ListWorkspaceSandboxes {pageSize, pageToken, tags, includeTerminated}`: creation order,
//!   page size capped at 100 (0 means 100), an opaque `nextPageToken` omitted on the last
//!   page, every tag required (AND), terminated sessions omitted unless asked for. A tag that
//!   breaks Tenki's rules (≤20 tags of ≤32 chars of `[a-z0-9_:.-]`, starting with a letter
//!   or digit) or a bad token is 400 `invalid_argument`.
//! - `GetSession`, `TerminateSession`, `ExtendSession {sessionId, additionalDuration}`:
//!   404 `not_found` for an unknown id; 400 `failed_precondition` ("session is already
//!   terminated") on a terminated one. Terminated sessions stay in memory, as on Tenki.
//! - Errors are `{"code","message"}` with Connect's code→status mapping; a throttled request
//!   is 429 `resource_exhausted` "rate limit exceeded" with `Retry-After`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::emu::{Api, Emulator, Request, Response};

/// The credential the emulator accepts.
pub const TOKEN: &str = "tk_emulated_5f1e2d3c4b5a69788796a5b4";
const SERVICE: &str = "/tenki.sandbox.v1.SandboxService/";
const MAX_PAGE: usize = 100;

#[derive(Debug, Clone)]
struct Session {
    id: String,
    state: &'static str,
    created_at: i64,
    timeout_at: Option<i64>,
    tags: Vec<String>,
    metadata: BTreeMap<String, String>,
}

impl Session {
    fn terminated(&self) -> bool {
        matches!(
            self.state,
            "SESSION_STATE_TERMINATED" | "SESSION_STATE_TERMINATING"
        )
    }

    /// proto3 JSON: lowerCamelCase, empty fields omitted.
    fn to_json(&self) -> Value {
        let mut v = json!({
            "id": self.id,
            "state": self.state,
            "ownerType": "OWNER_TYPE_WORKSPACE",
            "workspaceId": "ws-emulated",
            "createdAt": sandguard::testing::timefmt::format_rfc3339(self.created_at),
            "cpuCores": 2,
            "memoryMb": 4096,
            "diskSizeGb": 5,
            "sourceRegistryRef": "tenki/base@sha256:00",
        });
        if let Some(t) = self.timeout_at {
            v["timeoutAt"] = json!(sandguard::testing::timefmt::format_rfc3339(t));
        }
        if !self.tags.is_empty() {
            v["tags"] = json!(self.tags);
        }
        if !self.metadata.is_empty() {
            v["metadata"] = json!(self.metadata);
        }
        v
    }
}

#[derive(Default)]
struct State {
    sessions: Vec<Session>,
}

struct TenkiApi {
    state: Arc<Mutex<State>>,
}

/// A running Tenki emulator and a handle on its state.
pub struct Tenki {
    pub emu: Emulator,
    state: Arc<Mutex<State>>,
}

impl Tenki {
    pub fn start() -> Tenki {
        let state = Arc::new(Mutex::new(State::default()));
        let emu = Emulator::start(TenkiApi {
            state: state.clone(),
        });
        Tenki { emu, state }
    }

    pub fn url(&self) -> &str {
        &self.emu.url
    }

    /// A running session with these tags and metadata, as `CreateSession` would make it
    /// (tags lowercased and trimmed, and checked against Tenki's rules). Returns its id.
    pub fn insert(&self, tags: &[&str], metadata: &[(&str, &str)]) -> String {
        let tags: Vec<String> = tags.iter().map(|t| t.trim().to_ascii_lowercase()).collect();
        if let Err(e) = check_tags(&tags) {
            panic!("CreateSession would refuse these tags: {e}");
        }
        let id = format!(
            "{}-0000-4000-8000-{}",
            &super::unique()[..8],
            super::unique()
        );
        let now = sandguard::testing::timefmt::now_unix();
        self.state.lock().unwrap().sessions.push(Session {
            id: id.clone(),
            state: "SESSION_STATE_RUNNING",
            created_at: now,
            timeout_at: Some(now + 3600),
            tags,
            metadata: metadata
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        });
        id
    }

    /// Whether `id` exists and is not terminated.
    pub fn alive(&self, id: &str) -> bool {
        self.state
            .lock()
            .unwrap()
            .sessions
            .iter()
            .any(|s| s.id == id && !s.terminated())
    }

    /// The ids of every session not terminated.
    pub fn alive_ids(&self) -> Vec<String> {
        self.state
            .lock()
            .unwrap()
            .sessions
            .iter()
            .filter(|s| !s.terminated())
            .map(|s| s.id.clone())
            .collect()
    }

    pub fn timeout_at(&self, id: &str) -> Option<i64> {
        let state = self.state.lock().unwrap();
        state.sessions.iter().find(|s| s.id == id)?.timeout_at
    }

    /// How many requests reached `method`.
    pub fn calls(&self, method: &str) -> usize {
        let path = format!("{SERVICE}{method}");
        self.emu.hits().iter().filter(|h| h.path == path).count()
    }
}

/// Connect's error body with its fixed HTTP status.
pub fn connect_error(code: &str, message: &str) -> Response {
    let status = match code {
        "invalid_argument" | "failed_precondition" | "out_of_range" => 400,
        "unauthenticated" => 401,
        "permission_denied" => 403,
        "not_found" => 404,
        "already_exists" | "aborted" => 409,
        "resource_exhausted" => 429,
        "unimplemented" => 501,
        "unavailable" => 503,
        "deadline_exceeded" => 504,
        _ => 500,
    };
    Response::json(status, json!({ "code": code, "message": message }))
}

/// Tenki's tag rules: at most 20, each 1 to 32 characters of `[a-z0-9_:.-]`, starting with a
/// letter or digit.
fn check_tags(tags: &[String]) -> Result<(), String> {
    if tags.len() > 20 {
        return Err("at most 20 tags".into());
    }
    for t in tags {
        let ok = (1..=32).contains(&t.len())
            && t.as_bytes()[0].is_ascii_alphanumeric()
            && t.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_:.-".contains(&b));
        if !ok {
            return Err(format!("invalid tag {t:?}"));
        }
    }
    Ok(())
}

impl Api for TenkiApi {
    fn handle(&self, req: &Request) -> Response {
        if req.method != "POST" {
            return Response::empty(405).with_header("allow", "POST");
        }
        let Some(method) = req.path.strip_prefix(SERVICE) else {
            return Response::empty(404);
        };
        let json_body = req
            .header("content-type")
            .is_some_and(|c| c.starts_with("application/json"));
        if !json_body {
            return Response::empty(415).with_header("accept-post", "application/json");
        }
        if req.header("connect-protocol-version") != Some("1") {
            return connect_error(
                "invalid_argument",
                "missing required header: set Connect-Protocol-Version to \"1\"",
            );
        }
        if req.header("authorization") != Some(&format!("Bearer {TOKEN}")) {
            return connect_error("unauthenticated", "invalid or missing credentials");
        }
        let Some(body) = req.json().filter(Value::is_object) else {
            return connect_error("invalid_argument", "request body is not a JSON object");
        };
        let mut state = self.state.lock().unwrap();
        match method {
            "ListWorkspaceSandboxes" | "ListSessions" => list(&state, &body),
            "GetSession" => with_session(&mut state, &body, |s| Ok(s.clone())),
            "TerminateSession" => with_session(&mut state, &body, |s| {
                if s.terminated() {
                    return Err(connect_error(
                        "failed_precondition",
                        "session is already terminated",
                    ));
                }
                s.state = "SESSION_STATE_TERMINATED";
                Ok(s.clone())
            }),
            "ExtendSession" => {
                let Some(secs) = body["additionalDuration"].as_str().and_then(duration) else {
                    return connect_error("invalid_argument", "invalid additional_duration");
                };
                with_session(&mut state, &body, |s| {
                    if s.terminated() {
                        return Err(connect_error(
                            "failed_precondition",
                            "session is terminated",
                        ));
                    }
                    let Some(at) = s.timeout_at else {
                        return Err(connect_error(
                            "failed_precondition",
                            "sticky sessions have no timeout",
                        ));
                    };
                    s.timeout_at = Some(at + secs);
                    Ok(s.clone())
                })
            }
            _ => Response::empty(404),
        }
    }

    fn throttled(&self, secs: u64) -> Response {
        connect_error("resource_exhausted", "rate limit exceeded")
            .with_header("retry-after", secs.to_string())
    }

    fn unavailable(&self) -> Response {
        connect_error("unavailable", "upstream connect error")
    }
}

/// A proto3 JSON duration (`"600s"`, `"1.5s"`) in whole seconds, rounded up.
fn duration(text: &str) -> Option<i64> {
    let secs: f64 = text.strip_suffix('s')?.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| secs.ceil() as i64)
}

fn with_session(
    state: &mut State,
    body: &Value,
    change: impl FnOnce(&mut Session) -> Result<Session, Response>,
) -> Response {
    let Some(id) = body["sessionId"].as_str().filter(|s| !s.is_empty()) else {
        return connect_error("invalid_argument", "session_id is required");
    };
    let Some(session) = state.sessions.iter_mut().find(|s| s.id == id) else {
        return connect_error("not_found", &format!("session {id} not found"));
    };
    match change(session) {
        Ok(s) => Response::json(200, json!({ "session": s.to_json() })),
        Err(r) => r,
    }
}

fn list(state: &State, body: &Value) -> Response {
    let size = match body.get("pageSize").map(Value::as_i64) {
        None | Some(Some(0)) => MAX_PAGE,
        Some(Some(n)) if n > 0 => (n as usize).min(MAX_PAGE),
        _ => return connect_error("invalid_argument", "page_size must be a non-negative int32"),
    };
    // The token is a position in creation order, which terminations do not shift.
    let start = match body["pageToken"].as_str() {
        None | Some("") => 0,
        Some(t) => match t.strip_prefix("pt_").and_then(|n| n.parse::<usize>().ok()) {
            Some(n) => n,
            None => return connect_error("invalid_argument", "invalid page token"),
        },
    };
    let tags: Vec<String> = match &body["tags"] {
        Value::Null => Vec::new(),
        Value::Array(a) if a.iter().all(Value::is_string) => a
            .iter()
            .filter_map(|t| t.as_str().map(str::to_string))
            .collect(),
        _ => return connect_error("invalid_argument", "tags must be a list of strings"),
    };
    if let Err(e) = check_tags(&tags) {
        return connect_error("invalid_argument", &format!("tags: {e}"));
    }
    let with_terminated = body["includeTerminated"].as_bool().unwrap_or(false);
    let mut matching = state
        .sessions
        .iter()
        .enumerate()
        .skip(start)
        .filter(|(_, s)| with_terminated || !s.terminated())
        .filter(|(_, s)| tags.iter().all(|t| s.tags.contains(t)));
    let page: Vec<(usize, &Session)> = matching.by_ref().take(size).collect();
    let mut reply =
        json!({ "sessions": page.iter().map(|(_, s)| s.to_json()).collect::<Vec<_>>() });
    if let (Some((last, _)), Some(_)) = (page.last(), matching.next()) {
        reply["nextPageToken"] = json!(format!("pt_{}", last + 1));
    }
    Response::json(200, reply)
}
