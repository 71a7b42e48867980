//! The Daytona emulator's routes: authentication, then one function per route, and NestJS's
//! error bodies. The state they act on, and the lifecycle rules, are in `daytona.rs`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{json, Value};

use super::{iso, now_ms, Credential, Sandbox, State, MINUTE_MS};
use crate::support::emu::{Api, Request, Response};

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

pub(super) struct Handler {
    pub(super) key: String,
    pub(super) state: Arc<Mutex<State>>,
}

impl Handler {
    /// Who the request is, or the answer that turns it away.
    fn authenticate(&self, st: &State, req: &Request) -> Result<Credential, Response> {
        let bearer = req
            .header("authorization")
            .and_then(|v| v.strip_prefix("Bearer "));
        if bearer == Some(self.key.as_str()) {
            return Ok(Credential::ApiKey);
        }
        match &st.jwt {
            Some((token, org)) if bearer == Some(token.as_str()) => {
                if req.header("x-daytona-organization-id") == Some(org.as_str()) {
                    Ok(Credential::Jwt)
                } else {
                    Err(nest_error(req, 403, "Invalid authentication context"))
                }
            }
            _ => Err(nest_error(req, 401, "Unauthorized")),
        }
    }
}

impl Api for Handler {
    fn handle(&self, req: &Request) -> Response {
        let mut st = self.state.lock().unwrap();
        match self.authenticate(&st, req) {
            Ok(credential) => st.credentials.push(credential),
            Err(refusal) => return refusal,
        }
        let routed = routed(&req.segments());
        let segs: Vec<&str> = routed.iter().map(String::as_str).collect();
        match (req.method.as_str(), segs.as_slice()) {
            ("GET", ["api", "sandbox"]) if !req.segments()[1].eq_ignore_ascii_case("workspace") => {
                list(&mut st, req)
            }
            ("POST", ["api", "sandbox"]) => create(&mut st, req),
            ("GET", ["api", "sandbox", id]) => match st.find(id) {
                Some(s) => Response::json(200, s.json()),
                None => not_found(req, id),
            },
            ("DELETE", ["api", "sandbox", id]) => delete(&mut st, req, id),
            ("POST", ["api", "sandbox", id, "stop"]) => stop(&mut st, req, id),
            ("POST", ["api", "sandbox", id, "ttl", n]) if !st.no_ttl_route => {
                ttl(&mut st, req, id, n)
            }
            ("POST", ["api", "sandbox", id, "last-activity"]) => {
                let clock = st.clock();
                match st.find(id) {
                    Some(s) => {
                        s.last_activity_ms = clock;
                        Response::empty(201)
                    }
                    None => not_found(req, id),
                }
            }
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

/// The path as Express routes it: every segment but the id (the third) matched without regard
/// to ASCII case (`caseSensitive` is off by default), and the deprecated `workspace` controller
/// served by the same handlers as `sandbox` (its create takes the same body; the list, whose
/// old paged shape is not modelled, is not aliased).
fn routed(segs: &[&str]) -> Vec<String> {
    segs.iter()
        .enumerate()
        .map(|(i, s)| match i {
            2 => s.to_string(),
            1 if s.eq_ignore_ascii_case("workspace") => "sandbox".to_string(),
            _ => s.to_ascii_lowercase(),
        })
        .collect()
}

/// An ISO date-time query parameter, in Unix milliseconds.
fn time_query(req: &Request, name: &str) -> Result<Option<i64>, Response> {
    match req.query(name) {
        None => Ok(None),
        Some(text) => sandguard::testing::timefmt::parse_rfc3339(text)
            .map(|secs| Some(secs * 1000))
            .ok_or_else(|| {
                validation_error(req, &format!("{name} must be a valid ISO 8601 date string"))
            }),
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
    if req
        .query("includeWarm")
        .is_some_and(|v| v != "true" && v != "false")
    {
        return validation_error(req, "includeWarm must be a boolean value");
    }
    let (after, before) = match (
        time_query(req, "autoDestroyAtAfter"),
        time_query(req, "autoDestroyAtBefore"),
    ) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(r), _) | (_, Err(r)) => return r,
    };
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
        .filter(|s| after.is_none_or(|a| s.auto_destroy_ms.is_some_and(|t| t > a)))
        .filter(|s| before.is_none_or(|b| s.auto_destroy_ms.is_some_and(|t| t < b)))
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
        json!({"items": page.iter().map(|s| s.item()).collect::<Vec<_>>(), "nextCursor": next}),
    )
}

/// `POST /api/sandbox` (or `/api/workspace`): a started sandbox with the body's `labels` (strings only, as the
/// service validates them), answered with the whole `Sandbox`; the request is recorded.
fn create(st: &mut State, req: &Request) -> Response {
    st.creates.push(super::Created {
        headers: req.headers.clone(),
        body: req.body.clone(),
    });
    let Some(body) = req.json().filter(Value::is_object) else {
        return validation_error(req, "the body must be a JSON object");
    };
    let mut labels = BTreeMap::new();
    match body.get("labels") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (k, v) in map {
                let Some(v) = v.as_str() else {
                    return validation_error(req, "labels must be strings");
                };
                labels.insert(k.clone(), v.to_string());
            }
        }
        Some(_) => return validation_error(req, "labels must be an object"),
    }
    let id = st.add(labels, std::time::Duration::ZERO, None);
    match st.find(&id) {
        Some(s) => Response::json(200, s.json()),
        None => not_found(req, &id),
    }
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
    s.destroy(Instant::now() + delay);
    Response::json(200, before)
}

fn stop(st: &mut State, req: &Request, id: &str) -> Response {
    let delay = st.destroy_delay;
    let Some(s) = st.find(id) else {
        return not_found(req, id);
    };
    if s.pending() {
        return nest_error(req, 409, "Sandbox state change in progress");
    }
    if !matches!(s.state.as_str(), "started" | "paused") {
        return nest_error(req, 400, "Sandbox is not in a stoppable state");
    }
    let before = s.json();
    if s.auto_delete == 0 {
        // Ephemeral: the stop deletes it.
        s.destroy(Instant::now() + delay);
    } else {
        s.state = "stopping".into();
        s.stop_at = Some(Instant::now() + delay);
    }
    Response::json(200, before)
}

fn ttl(st: &mut State, req: &Request, id: &str, minutes: &str) -> Response {
    let Ok(minutes) = minutes.parse::<i64>() else {
        return nest_error(req, 400, "Validation failed (numeric string is expected)");
    };
    if minutes < 0 {
        return nest_error(req, 400, "TTL must be a non-negative integer");
    }
    let clock = st.clock();
    let Some(s) = st.find(id) else {
        return not_found(req, id);
    };
    // Re-anchored from now; 0 disables.
    s.auto_destroy_ms = (minutes > 0).then(|| clock + minutes * MINUTE_MS);
    Response::json(200, s.json())
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
        403 => "Forbidden",
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
