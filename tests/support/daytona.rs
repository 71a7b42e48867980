//! An in-memory Daytona API on the emulator framework, after `providers.md` §2 and its
//! 2026-12 corrections:
//!
//! - Routes under `/api`, matched as Express matches them (ASCII case ignored, ids aside;
//!   `POST /api/sandbox` and the deprecated `POST /api/workspace` both create, answering
//!   200, and `workspace/{id}/...` reaches the same handlers as `sandbox/{id}/...`):
//!   `GET /api/sandbox` (the cursor-paged `{"items","nextCursor"}` shape
//!   by default, or the legacy bare array after [`Daytona::set_legacy`]), `GET` and `DELETE
//!   /api/sandbox/{id}`, `POST /api/sandbox/{id}/stop` (200), `POST
//!   /api/sandbox/{id}/ttl/{minutes}` (200, as the spec says; absent after
//!   [`Daytona::set_no_ttl_route`], as on a server built from the public source), `POST
//!   /api/sandbox/{id}/autostop|autodelete|autoarchive/{n}` and `POST
//!   /api/sandbox/{id}/last-activity` (201, as NestJS answers without `@HttpCode`).
//! - Auth: `Authorization: Bearer <key>`, or `Bearer <jwt>` with `X-Daytona-Organization-ID`
//!   after [`Daytona::set_jwt`]. An unknown bearer is 401; the JWT without the organisation
//!   header, or with another organisation, is 403 "Invalid authentication context" (the
//!   organisation guard's `ForbiddenException`). Errors carry NestJS's exception-filter body
//!   (`path`, `timestamp`, `statusCode`, `error`, `message`).
//! - Listing items are `SandboxListItem`s with the fields the 0.226.1 SDK requires (for
//!   example `networkBlockAll`), `autoDestroyAt` among them; `GET /api/sandbox/{id}`, the
//!   other routes and the legacy listing answer the whole `Sandbox` (`env`, `kvm`, …).
//! - The `labels` filter is JSON matched by containment; bad JSON is 400 "Invalid labels JSON
//!   format"; `limit` is 1..=200 (default 100); `states` defaults to every state but
//!   `destroyed`; `autoDestroyAtAfter`/`autoDestroyAtBefore` filter by the TTL (a sandbox
//!   without one matches neither); `includeWarm` must be a boolean (there is no warm pool
//!   here). Pages are keyset-ordered by creation (newest first), so a cursor stays valid
//!   while sandboxes come and go.
//! - Lifecycle, on an emulated wall clock that [`Daytona::advance`] moves (minutes pass in a
//!   test at once): `autoDestroyAt` (set by `/ttl`, `null` without a TTL) destroys the
//!   sandbox when it passes, whatever its state; auto-stop stops a started sandbox idle for
//!   its interval (`0`: never); auto-delete deletes a sandbox stopped for its interval, `0`
//!   as soon as it is stopped (and a stop of such an ephemeral sandbox deletes it outright);
//!   a negative auto-delete never deletes.
//! - Stop is asynchronous: 200 with the sandbox as it was, `stopping` for
//!   [`Daytona::set_destroy_delay`] (a delete or stop meanwhile is 409), then `stopped`. A
//!   stop of a sandbox neither started nor paused is 400 "Sandbox is not in a stoppable
//!   state".
//! - Delete is asynchronous: 200 with the sandbox as it was, then `destroying` for the same
//!   delay (a second delete meanwhile is 409 "Sandbox state change in progress"), then
//!   `destroyed`: unlisted, and 404 to every route.
//! - A 429 names its throttler: `Retry-After-sandbox-lifecycle` for lifecycle routes (delete,
//!   stop, …), `Retry-After-authenticated` for the rest; rate-limit buckets are those
//!   throttlers.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::emu::Emulator;

mod routes;
use routes::Handler;

/// A minute of the emulated clock, in milliseconds.
const MINUTE_MS: i64 = 60_000;

struct Sandbox {
    id: String,
    state: String,
    /// A start still landing until then (409 to a delete or stop).
    pending_until: Option<Instant>,
    /// `stopping` turns `stopped` then.
    stop_at: Option<Instant>,
    /// `destroying` turns `destroyed` then.
    destroy_at: Option<Instant>,
    created_ms: i64,
    labels: BTreeMap<String, String>,
    last_activity_ms: i64,
    /// When it last became `stopped` (emulated clock).
    stopped_ms: Option<i64>,
    auto_stop: i64,
    auto_delete: i64,
    /// `autoDestroyAt` (emulated clock): set by a TTL, `None` without one.
    auto_destroy_ms: Option<i64>,
}

impl Sandbox {
    /// Lands what is due at `now` (real time, for the transitions) and `clock` (the
    /// emulated wall clock, for the minute-long policies).
    fn settle(&mut self, now: Instant, clock: i64, delay: Duration) {
        if self.destroy_at.is_some_and(|t| t <= now) {
            self.state = "destroyed".into();
            self.destroy_at = None;
        }
        if self.pending_until.is_some_and(|t| t <= now) {
            self.pending_until = None;
            self.state = "started".into();
        }
        if self.stop_at.is_some_and(|t| t <= now) {
            self.stop_at = None;
            self.state = "stopped".into();
            self.stopped_ms = Some(clock);
        }
        if matches!(self.state.as_str(), "destroying" | "destroyed") {
            return;
        }
        // The TTL: destroyed whatever the state.
        if self.auto_destroy_ms.is_some_and(|t| t <= clock) {
            return self.destroy(now + delay);
        }
        let idle_until = self.last_activity_ms + self.auto_stop * MINUTE_MS;
        if self.state == "started" && !self.pending() && self.auto_stop > 0 && idle_until <= clock {
            self.state = "stopped".into();
            self.stopped_ms = Some(idle_until);
        }
        if self.state == "stopped"
            && self.auto_delete >= 0
            && self
                .stopped_ms
                .is_some_and(|t| t + self.auto_delete * MINUTE_MS <= clock)
        {
            self.destroy(now + delay);
        }
    }

    fn destroy(&mut self, at: Instant) {
        self.state = "destroying".into();
        self.destroy_at = Some(at);
        self.stop_at = None;
    }

    fn pending(&self) -> bool {
        self.pending_until.is_some() || self.stop_at.is_some() || self.destroy_at.is_some()
    }

    /// A `SandboxListItem`, as the paged listing answers (the 0.226.1 SDK's required fields).
    fn item(&self) -> Value {
        let at = iso(self.created_ms);
        let desired = if self.destroy_at.is_some() || self.state == "destroyed" {
            "destroyed"
        } else if matches!(self.state.as_str(), "stopping" | "stopped") {
            "stopped"
        } else {
            "started"
        };
        json!({
            "id": self.id,
            "organizationId": ORGANIZATION,
            "name": self.id,
            "target": "us",
            "runnerId": "runner-1",
            "sandboxClass": "container",
            "state": self.state,
            "desiredState": desired,
            "errorReason": null,
            "recoverable": false,
            "snapshot": "daytonaio/sandbox:0.4.3",
            "user": "daytona",
            "public": false,
            "networkBlockAll": false,
            "cpu": 1, "gpu": 0, "memory": 1, "disk": 3,
            "spot": false,
            "labels": self.labels,
            "backupState": "None",
            "autoStopInterval": self.auto_stop,
            "autoPauseInterval": 0,
            "autoArchiveInterval": 10080,
            "autoDeleteInterval": self.auto_delete,
            "autoDestroyAt": self.auto_destroy_ms.map(iso),
            "createdAt": at, "updatedAt": at, "lastActivityAt": iso(self.last_activity_ms),
            "daemonVersion": "0.1.0",
            "toolboxProxyUrl": "https://proxy.app.daytona.io/toolbox",
        })
    }

    /// A whole `Sandbox`: the list item and what only `GET /sandbox/{id}` (and the
    /// other routes, and the legacy listing) answer.
    fn json(&self) -> Value {
        let mut v = self.item();
        v["env"] = json!({});
        v["kvm"] = json!(false);
        v["volumes"] = json!([]);
        v
    }
}

/// The organisation every sandbox here belongs to.
pub const ORGANIZATION: &str = "org-emulated";

/// The credential a request was let in with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    ApiKey,
    Jwt,
}

#[derive(Default)]
struct State {
    sandboxes: Vec<Sandbox>,
    legacy: bool,
    /// No `/ttl` route, as a server built from the public source (June 2026).
    no_ttl_route: bool,
    destroy_delay: Duration,
    counter: u64,
    /// How far the emulated wall clock is ahead of the real one.
    offset_ms: i64,
    /// A JWT accepted with this organisation (token, organisation).
    jwt: Option<(String, String)>,
    /// The credential of every request let in, in order.
    credentials: Vec<Credential>,
    /// The throttler of the request being answered (see [`Handler::route`]).
    throttler: &'static str,
    /// Every `POST /api/sandbox` (create) let in: its headers and body, as they came.
    creates: Vec<Created>,
}

/// One create request as it reached the emulator.
#[derive(Debug, Clone)]
pub struct Created {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl State {
    fn clock(&self) -> i64 {
        now_ms() + self.offset_ms
    }

    fn settle(&mut self) {
        let (now, clock, delay) = (Instant::now(), self.clock(), self.destroy_delay);
        self.sandboxes
            .iter_mut()
            .for_each(|s| s.settle(now, clock, delay));
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
    /// A Daytona that accepts `key`, answers the paged shape, and stops or destroys in 200 ms.
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

    /// Answer as a server built from the public source (June 2026): no `/ttl` route.
    pub fn set_no_ttl_route(&self, missing: bool) {
        self.state.lock().unwrap().no_ttl_route = missing;
    }

    pub fn set_destroy_delay(&self, delay: Duration) {
        self.state.lock().unwrap().destroy_delay = delay;
    }

    /// Also accept the user JWT `token`, in organisation `organization` only.
    pub fn set_jwt(&self, token: &str, organization: &str) {
        self.state.lock().unwrap().jwt = Some((token.to_string(), organization.to_string()));
    }

    /// The JWT accepted, if any: `(token, organisation)`.
    pub fn jwt(&self) -> Option<(String, String)> {
        self.state.lock().unwrap().jwt.clone()
    }

    /// The credential of every request let in so far.
    pub fn credentials(&self) -> Vec<Credential> {
        self.state.lock().unwrap().credentials.clone()
    }

    /// Moves the emulated wall clock forward: TTLs, auto-stop and auto-delete come due.
    pub fn advance(&self, by: Duration) {
        let mut st = self.state.lock().unwrap();
        st.offset_ms += by.as_millis() as i64;
        st.settle();
    }

    /// A started sandbox with these labels, created as the SDK's `create(ttl_minutes=60)`
    /// makes one (15 idle minutes to auto-stop, no auto-delete); returns its id.
    pub fn insert(&self, labels: &[(&str, &str)]) -> String {
        self.seed(labels, Duration::ZERO, Some(60))
    }

    /// [`Daytona::insert`] without a TTL (`autoDestroyAt` null), Daytona's default.
    pub fn insert_without_ttl(&self, labels: &[(&str, &str)]) -> String {
        self.seed(labels, Duration::ZERO, None)
    }

    /// A sandbox whose start is still landing for `busy` (a delete meanwhile is 409).
    pub fn insert_busy(&self, labels: &[(&str, &str)], busy: Duration) -> String {
        self.seed(labels, busy, Some(60))
    }

    fn seed(&self, labels: &[(&str, &str)], busy: Duration, ttl: Option<i64>) -> String {
        let labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.state.lock().unwrap().add(labels, busy, ttl)
    }

    /// Every create request let in so far (`POST /api/sandbox`).
    pub fn creates(&self) -> Vec<Created> {
        self.state.lock().unwrap().creates.clone()
    }
}

impl State {
    fn add(
        &mut self,
        labels: BTreeMap<String, String>,
        busy: Duration,
        ttl: Option<i64>,
    ) -> String {
        let st = self;
        st.counter += 1;
        let n = st.counter;
        let id = format!(
            "{:08x}-{:04x}-4000-8000-{:012x}",
            std::process::id(),
            n & 0xffff,
            n
        );
        let pending_until = (!busy.is_zero()).then(|| Instant::now() + busy);
        let clock = st.clock();
        let sandbox = Sandbox {
            id: id.clone(),
            state: if pending_until.is_some() {
                "starting"
            } else {
                "started"
            }
            .into(),
            pending_until,
            stop_at: None,
            destroy_at: None,
            // Distinct creation times, one second apart, so keyset order is total.
            created_ms: 1_780_000_000_000 + n as i64 * 1000,
            labels,
            last_activity_ms: clock,
            stopped_ms: None,
            auto_stop: 15,
            auto_delete: -1,
            auto_destroy_ms: ttl.map(|m| clock + m * MINUTE_MS),
        };
        st.sandboxes.push(sandbox);
        id
    }
}

impl Daytona {
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

    /// The labels of a sandbox not yet destroyed.
    pub fn labels(&self, id: &str) -> Option<BTreeMap<String, String>> {
        let mut st = self.state.lock().unwrap();
        st.find(id).map(|s| s.labels.clone())
    }

    /// The state of a sandbox not yet destroyed.
    pub fn state_of(&self, id: &str) -> Option<String> {
        let mut st = self.state.lock().unwrap();
        st.find(id).map(|s| s.state.clone())
    }

    /// `(autoStopInterval, autoDeleteInterval)` of a sandbox.
    pub fn intervals(&self, id: &str) -> Option<(i64, i64)> {
        let mut st = self.state.lock().unwrap();
        st.find(id).map(|s| (s.auto_stop, s.auto_delete))
    }

    /// `autoDestroyAt` in Unix milliseconds of the emulated clock, if a TTL is set.
    pub fn auto_destroy_ms(&self, id: &str) -> Option<i64> {
        let mut st = self.state.lock().unwrap();
        st.find(id).and_then(|s| s.auto_destroy_ms)
    }

    /// The emulated clock, Unix milliseconds.
    pub fn clock_ms(&self) -> i64 {
        self.state.lock().unwrap().clock()
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// `2026-06-01T10:00:00.123Z`, as JavaScript's `toISOString` writes it.
fn iso(ms: i64) -> String {
    let secs = sandguard::testing::timefmt::format_rfc3339(ms.div_euclid(1000));
    format!("{}.{:03}Z", secs.trim_end_matches('Z'), ms.rem_euclid(1000))
}
