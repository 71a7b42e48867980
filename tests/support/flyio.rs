//! A Fly.io Machines API emulator on the shared framework ([`super::emu`]), faithful to
//! `providers.md` §3 and its 2026-12 corrections where it matters to a reaper:
//!
//! - Auth: the scheme must follow the token, as fly-go's `tokens` package sends it.
//!   `Authorization: FlyV1 <parts>` with exactly the macaroon parts (`fm1r_`, `fm1a_`, `fm2_`)
//!   the service issued, comma-separated; `Authorization: Bearer <token>` only for a token that
//!   is not a macaroon (`fo1_…`, personal tokens). A macaroon sent as `Bearer` (the case the
//!   corrections say breaks), a scheme left inside the credential (`Bearer FlyV1 …`) or any
//!   other token is 401 `{"error":"Authenticate: token validation error"}`. The scheme of
//!   every request is kept ([`Fly::schemes`]), never the credential.
//! - One app; any other app is 404 `{"error":"app not found"}`.
//! - `GET /v1/apps/{app}/machines`: a bare JSON array (no paging), filtered by
//!   `metadata.KEY=VALUE` (AND, exact), `state=a,b` and `include_deleted`; `summary=true` leaves
//!   `config` out. An empty metadata key or an unknown state is 400. Destroyed machines stay in
//!   the listing for a second, as the real API still returns them shortly after their end.
//! - `POST …/{id}/stop`: 200 `{"ok":true}` for a started machine, which is then `stopping` for
//!   a while ([`Fly::set_stop_takes`], 200 ms by default) before it is `stopped`. A machine
//!   that is not started is 409 `unable to stop machine, not currently started` (the answer
//!   `superfly/docs` `reference/machines/stop.html.md` records).
//! - `DELETE …/{id}`: 200 `{"ok":true}`. A machine still `stopping` is 412 `failed_precondition:
//!   … not currently stopped or suspended` whatever the query says (the corrections' "412
//!   right after a stop"); a started one is the same 412 unless `kill=true` (fly-go) or
//!   `force=true` (the docs) asks for it to be killed. Every DELETE's query is kept
//!   ([`Fly::deletes`]).
//! - 404 `{"error":"machine not found"}` for unknown or destroyed machines.
//! - Leases: `POST/GET/DELETE …/{id}/lease` with the `{"status":"success","data":{…}}`
//!   envelope. While a lease is held, stop and delete without its nonce are 409 `aborted:
//!   machine ID … lease currently held by …, expires at <RFC 3339>` (checked before the state).
//! - 429: `{"error":"rate limit exceeded"}`, with `Retry-After` unless switched off (Fly
//!   documents none, so the driver must cope either way); 503 `{"error":"…"}`.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};

use super::emu::{Api, Emulator, Request, Response};

const FILTER_STATES: &[&str] = &["created", "started", "stopped", "suspended"];
/// How long a destroyed machine still shows up in a listing.
const DESTROYED_VISIBLE: Duration = Duration::from_secs(1);
/// How long a machine stays `stopping` after a stop, unless a test says otherwise.
const STOP_TAKES: Duration = Duration::from_millis(200);
const NOT_STOPPED: &str =
    "failed_precondition: unable to destroy machine, not currently stopped or suspended";

#[derive(Debug, Clone)]
struct Machine {
    id: String,
    state: String,
    created_at: i64,
    metadata: BTreeMap<String, String>,
    /// While `stopping`: when the machine will be `stopped`.
    stopped_at: Option<Instant>,
    destroyed_at: Option<Instant>,
    lease: Option<Lease>,
}

impl Machine {
    /// The state now: a `stopping` machine whose time is up is `stopped`.
    fn settle(&mut self) {
        if self.state == "stopping" && self.stopped_at.is_some_and(|at| at <= Instant::now()) {
            self.state = "stopped".into();
            self.stopped_at = None;
        }
    }
}

#[derive(Debug, Clone)]
struct Lease {
    nonce: String,
    /// Unix seconds, as the API reports it.
    expires_at: i64,
    owner: String,
}

impl Lease {
    fn held(&self) -> bool {
        unix_now() < self.expires_at as f64
    }
}

/// One DELETE of a machine that reached the API.
#[derive(Debug, Clone)]
pub struct Delete {
    pub id: String,
    pub at: SystemTime,
    /// The query as sent, in order.
    pub query: Vec<(String, String)>,
}

impl Delete {
    pub fn asks(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct State {
    machines: BTreeMap<String, Machine>,
    deletes: Vec<Delete>,
    /// The scheme word of every request's `Authorization` (empty when there was none).
    schemes: Vec<String>,
    stop_takes: Option<Duration>,
}

/// What the service issued: the macaroon parts (sent as `FlyV1`) and the other tokens (sent
/// as `Bearer`).
struct Issued {
    macaroons: Vec<String>,
    others: Vec<String>,
}

fn is_macaroon(part: &str) -> bool {
    matches!(part.split('_').next(), Some("fm1r" | "fm1a" | "fm2")) && part.contains('_')
}

impl Issued {
    /// `token` as `fly tokens create` prints it: `FlyV1 ` (or nothing) before the parts.
    fn from(token: &str) -> Issued {
        let bare = token
            .strip_prefix("FlyV1 ")
            .or_else(|| token.strip_prefix("Bearer "))
            .unwrap_or(token);
        let (macaroons, others) = bare
            .split(',')
            .map(str::to_string)
            .partition(|p| is_macaroon(p));
        Issued { macaroons, others }
    }

    fn accepts(&self, header: &str) -> bool {
        let Some((scheme, credential)) = header.split_once(' ') else {
            return false;
        };
        match scheme {
            "FlyV1" => {
                let parts: Vec<&str> = credential.split(',').collect();
                !self.macaroons.is_empty() && parts == self.macaroons
            }
            "Bearer" => !is_macaroon(credential) && self.others.iter().any(|t| t == credential),
            _ => false,
        }
    }
}

struct FlyApi {
    app: String,
    issued: Issued,
    state: Arc<Mutex<State>>,
    retry_after_header: Arc<AtomicBool>,
    lease_expiry_in_errors: Arc<AtomicBool>,
}

/// A running emulator and the handle tests use to seed and inspect it. Derefs to the
/// [`Emulator`] (`url`, `set_faults`, `hits`, `early_hits`).
pub struct Fly {
    emu: Emulator,
    pub app: String,
    state: Arc<Mutex<State>>,
    retry_after_header: Arc<AtomicBool>,
    lease_expiry_in_errors: Arc<AtomicBool>,
    next_id: AtomicU64,
}

impl Deref for Fly {
    type Target = Emulator;
    fn deref(&self) -> &Emulator {
        &self.emu
    }
}

impl Fly {
    /// An emulator serving one app, having issued `token` (as `fly tokens create` prints it,
    /// with or without `FlyV1 `; or a `fo1_…` token).
    pub fn start(app: &str, token: &str) -> Fly {
        let state = Arc::new(Mutex::new(State::default()));
        let retry_after_header = Arc::new(AtomicBool::new(true));
        let lease_expiry_in_errors = Arc::new(AtomicBool::new(true));
        let emu = Emulator::start(FlyApi {
            app: app.to_string(),
            issued: Issued::from(token),
            state: state.clone(),
            retry_after_header: retry_after_header.clone(),
            lease_expiry_in_errors: lease_expiry_in_errors.clone(),
        });
        Fly {
            emu,
            app: app.to_string(),
            state,
            retry_after_header,
            lease_expiry_in_errors,
            next_id: AtomicU64::new(0x1d8e_0000_0000),
        }
    }

    /// A started machine with this `config.metadata`; returns its id.
    pub fn insert(&self, metadata: &[(&str, &str)]) -> String {
        self.insert_in_state(metadata, "started")
    }

    pub fn insert_in_state(&self, metadata: &[(&str, &str)], state: &str) -> String {
        let id = format!("{:014x}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let machine = Machine {
            id: id.clone(),
            state: state.to_string(),
            created_at: unix_now() as i64,
            metadata: metadata
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            stopped_at: None,
            destroyed_at: None,
            lease: None,
        };
        self.state
            .lock()
            .unwrap()
            .machines
            .insert(id.clone(), machine);
        id
    }

    /// Leases machine `id` to someone else for about `ttl` (rounded up to whole seconds, as the
    /// API keeps `expires_at`); returns when the lease ends.
    pub fn lease(&self, id: &str, ttl: Duration) -> SystemTime {
        let expires_at = (unix_now() + ttl.as_secs_f64()).ceil() as i64;
        let mut state = self.state.lock().unwrap();
        let m = state.machines.get_mut(id).expect("lease: unknown machine");
        m.lease = Some(Lease {
            nonce: format!("{:012x}", expires_at * 7919),
            expires_at,
            owner: "someone-else@tokens.fly.io".into(),
        });
        SystemTime::UNIX_EPOCH + Duration::from_secs(expires_at as u64)
    }

    /// Whether machine `id` exists and is not destroyed.
    pub fn exists(&self, id: &str) -> bool {
        self.state
            .lock()
            .unwrap()
            .machines
            .get(id)
            .is_some_and(|m| m.state != "destroyed")
    }

    /// The ids of every machine not destroyed.
    pub fn remaining(&self) -> Vec<String> {
        let state = self.state.lock().unwrap();
        state
            .machines
            .values()
            .filter(|m| m.state != "destroyed")
            .map(|m| m.id.clone())
            .collect()
    }

    /// When each DELETE of machine `id` reached the API (after the injected faults).
    pub fn deletes_of(&self, id: &str) -> Vec<SystemTime> {
        let state = self.state.lock().unwrap();
        state
            .deletes
            .iter()
            .filter(|d| d.id == id)
            .map(|d| d.at)
            .collect()
    }

    /// Every DELETE of a machine that reached the API (after the injected faults).
    pub fn deletes(&self) -> Vec<Delete> {
        self.state.lock().unwrap().deletes.clone()
    }

    /// The `Authorization` scheme of every request that reached the API, in order.
    pub fn schemes(&self) -> Vec<String> {
        self.state.lock().unwrap().schemes.clone()
    }

    /// How long a machine stays `stopping` after a stop (200 ms unless set).
    pub fn set_stop_takes(&self, d: Duration) {
        self.state.lock().unwrap().stop_takes = Some(d);
    }

    /// Whether a 429 carries `Retry-After` (it does by default).
    pub fn set_retry_after_header(&self, on: bool) {
        self.retry_after_header.store(on, Ordering::Relaxed);
    }

    /// Whether a lease conflict's message names the expiry (it does by default, as observed);
    /// without it a client has to ask `GET …/lease`.
    pub fn set_lease_expiry_in_errors(&self, on: bool) {
        self.lease_expiry_in_errors.store(on, Ordering::Relaxed);
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn error(status: u16, message: &str) -> Response {
    Response::json(status, json!({ "error": message }))
}

fn ok() -> Response {
    Response::json(200, json!({ "ok": true }))
}

fn machine_json(m: &Machine, summary: bool) -> Value {
    let mut v = json!({
        "id": m.id,
        "name": format!("machine-{}", &m.id[m.id.len() - 4..]),
        "state": m.state,
        "region": "cdg",
        "instance_id": format!("01H{}", m.id.to_uppercase()),
        "private_ip": "fdaa:0:1::2",
        "created_at": sandguard::testing::timefmt::format_rfc3339(m.created_at),
        "updated_at": sandguard::testing::timefmt::format_rfc3339(m.created_at),
        "image_ref": {"registry": "registry-1.docker.io", "repository": "library/busybox",
                      "tag": "latest", "digest": "sha256:0", "labels": {}},
        "host_status": "ok",
    });
    if !summary {
        v["config"] = json!({
            "image": "registry-1.docker.io/library/busybox:latest",
            "metadata": m.metadata,
            "auto_destroy": true,
            "restart": {"policy": "no"},
        });
        v["events"] = json!([{"type": "start", "status": "started", "source": "flyd",
                              "timestamp": m.created_at * 1000}]);
        if let Some(lease) = m.lease.as_ref().filter(|l| l.held()) {
            v["nonce"] = json!(lease.nonce);
        }
    }
    v
}

fn lease_json(l: &Lease) -> Response {
    Response::json(
        200,
        json!({"status": "success", "data": {"nonce": l.nonce, "expires_at": l.expires_at,
               "owner": l.owner, "description": "", "version": "01HQ0000000000000000000000"}}),
    )
}

impl FlyApi {
    fn authorized(&self, req: &Request) -> bool {
        let header = req.header("authorization");
        let scheme = header.and_then(|h| h.split(' ').next()).unwrap_or_default();
        self.state.lock().unwrap().schemes.push(scheme.to_string());
        header.is_some_and(|h| self.issued.accepts(h))
    }

    fn list(&self, req: &Request) -> Response {
        let mut wanted = Vec::new();
        for (k, v) in &req.query {
            if let Some(key) = k.strip_prefix("metadata.") {
                if key.is_empty() {
                    return error(400, "invalid metadata filter: empty key");
                }
                wanted.push((key.to_string(), v.clone()));
            }
        }
        let states: Vec<&str> = req
            .query("state")
            .map(|s| s.split(',').filter(|s| !s.is_empty()).collect())
            .unwrap_or_default();
        if let Some(bad) = states.iter().find(|s| !FILTER_STATES.contains(s)) {
            return error(400, &format!("invalid state filter: {bad}"));
        }
        let include_deleted = req.query("include_deleted") == Some("true");
        let summary = req.query("summary") == Some("true");
        let mut state = self.state.lock().unwrap();
        state.machines.values_mut().for_each(Machine::settle);
        let machines: Vec<Value> = state
            .machines
            .values()
            .filter(|m| {
                m.destroyed_at
                    .is_none_or(|at| include_deleted || at.elapsed() < DESTROYED_VISIBLE)
            })
            .filter(|m| states.is_empty() || states.contains(&m.state.as_str()))
            .filter(|m| wanted.iter().all(|(k, v)| m.metadata.get(k) == Some(v)))
            .map(|m| machine_json(m, summary))
            .collect();
        Response::json(200, Value::Array(machines))
    }

    /// Stop and delete: refused while someone else's lease is held, then as the state says.
    fn mutate(&self, req: &Request, id: &str) -> Response {
        let mut state = self.state.lock().unwrap();
        if req.method == "DELETE" {
            state.deletes.push(Delete {
                id: id.to_string(),
                at: SystemTime::now(),
                query: req.query.clone(),
            });
        }
        let stop_takes = state.stop_takes.unwrap_or(STOP_TAKES);
        let Some(m) = state
            .machines
            .get_mut(id)
            .filter(|m| m.state != "destroyed")
        else {
            return error(404, "machine not found");
        };
        if let Some(lease) = m.lease.as_ref().filter(|l| l.held()) {
            if req.header("fly-machine-lease-nonce") != Some(lease.nonce.as_str()) {
                return error(409, &self.lease_conflict(id, lease));
            }
        }
        m.settle();
        if req.method == "POST" {
            if m.state != "started" {
                return error(409, "unable to stop machine, not currently started");
            }
            m.state = "stopping".into();
            m.stopped_at = Some(Instant::now() + stop_takes);
            return ok();
        }
        let kill = req.query("kill") == Some("true") || req.query("force") == Some("true");
        match m.state.as_str() {
            "stopping" => error(412, NOT_STOPPED),
            "started" if !kill => error(412, NOT_STOPPED),
            _ => {
                m.state = "destroyed".into();
                m.destroyed_at = Some(Instant::now());
                m.lease = None;
                ok()
            }
        }
    }

    fn lease_conflict(&self, id: &str, lease: &Lease) -> String {
        let mut message = format!(
            "aborted: machine ID {id} lease currently held by {}",
            lease.owner
        );
        if self.lease_expiry_in_errors.load(Ordering::Relaxed) {
            message.push_str(&format!(
                ", expires at {}",
                sandguard::testing::timefmt::format_rfc3339(lease.expires_at)
            ));
        }
        message
    }

    fn lease(&self, req: &Request, id: &str) -> Response {
        let mut state = self.state.lock().unwrap();
        let Some(m) = state
            .machines
            .get_mut(id)
            .filter(|m| m.state != "destroyed")
        else {
            return error(404, "machine not found");
        };
        let held = m.lease.clone().filter(Lease::held);
        match (req.method.as_str(), held) {
            ("GET", Some(l)) => lease_json(&l),
            ("GET", None) => error(404, "lease not found"),
            ("POST", Some(_)) => error(409, "lease currently held by another client"),
            ("POST", None) => {
                let ttl: i64 = req.query("ttl").and_then(|t| t.parse().ok()).unwrap_or(30);
                let l = Lease {
                    nonce: format!("{:012x}", unix_now() as i64),
                    expires_at: unix_now() as i64 + ttl,
                    owner: "sandguard-test@tokens.fly.io".into(),
                };
                m.lease = Some(l.clone());
                Response {
                    status: 201,
                    ..lease_json(&l)
                }
            }
            ("DELETE", Some(l)) if req.header("fly-machine-lease-nonce") == Some(&l.nonce) => {
                m.lease = None;
                Response::json(200, json!({"status": "success", "data": {"ok": true}}))
            }
            ("DELETE", _) => error(400, "a valid fly-machine-lease-nonce header is required"),
            _ => error(405, "method not allowed"),
        }
    }

    fn get(&self, id: &str) -> Response {
        let mut state = self.state.lock().unwrap();
        state.machines.values_mut().for_each(Machine::settle);
        match state.machines.get(id) {
            Some(m)
                if m.destroyed_at
                    .is_none_or(|at| at.elapsed() < DESTROYED_VISIBLE) =>
            {
                Response::json(200, machine_json(m, false))
            }
            _ => error(404, "machine not found"),
        }
    }
}

impl Api for FlyApi {
    fn handle(&self, req: &Request) -> Response {
        if !self.authorized(req) {
            return error(401, "Authenticate: token validation error");
        }
        let segs = req.segments();
        let ["v1", "apps", app, rest @ ..] = segs.as_slice() else {
            return error(404, "not found");
        };
        if *app != self.app {
            return error(404, "app not found");
        }
        match (req.method.as_str(), rest) {
            ("GET", ["machines"]) => self.list(req),
            ("GET", ["machines", id]) => self.get(id),
            ("POST", ["machines", id, "stop"]) => self.mutate(req, id),
            ("DELETE", ["machines", id]) => self.mutate(req, id),
            (_, ["machines", id, "lease"]) => self.lease(req, id),
            _ => error(404, "not found"),
        }
    }

    fn throttled(&self, secs: u64) -> Response {
        let r = error(429, "rate limit exceeded");
        if self.retry_after_header.load(Ordering::Relaxed) {
            r.with_header("retry-after", secs.to_string())
        } else {
            r
        }
    }

    fn unavailable(&self) -> Response {
        error(503, "service unavailable, please retry")
    }

    /// Fly limits each action per machine (and the listing per app), so the bucket is the
    /// method and the whole path.
    fn route(&self, req: &Request) -> String {
        format!("{} {}", req.method, req.path)
    }
}
