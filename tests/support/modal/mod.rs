//! A Modal control-plane emulator: a tonic gRPC server on 127.0.0.1 (port 0) answering the
//! RPCs of `modal.client.ModalClient` that sandguard and Modal's own SDK use for sandboxes,
//! from in-memory sandboxes, with the messages and paths generated from `proto/modal.proto`
//! (`sandguard::testing::providers::modal::wire`, the driver's own: one copy of the schema, checked
//! against Modal by the driver's byte tests and by Modal's SDK in `providers::modal::sdk`).
//!
//! Faithful to what Modal's clients rely on (`api.rs`):
//! - Token metadata checked on every call (UNAUTHENTICATED otherwise).
//! - V1 and V2 sandboxes side by side. `SandboxList`, `SandboxTerminate`, `SandboxTagsGet`
//!   and `SandboxTagsSet` see V1 sandboxes only: a V2 id there is NOT_FOUND. The `*V2` RPCs
//!   want an auth token besides (UNAUTHENTICATED when it is missing, unknown or past its
//!   `exp`); `SandboxListV2` lists both generations, as the SDK's comment on it says, the
//!   other V2 RPCs see V2 sandboxes only.
//! - `AuthTokenGet` issues a JWT (base64url header, payload with `exp` as fractional Unix
//!   seconds, and a signature nobody checks) good for [`ModalEmu::set_token_lifetime`]
//!   (an hour unless set).
//! - A V1 id is `sb-` and 22 digits; a V2 id is the emulator's own choice of a shape the SDK
//!   takes for V2 (`sb-`, 22 digits and `V`, as V2 task ids end in `V`): Modal does not
//!   publish one.
//! - Environments: every sandbox lives in one; an empty `environment_name` is
//!   [`DEFAULT_ENVIRONMENT`], a name no sandbox was ever put in is NOT_FOUND.
//! - Listings newest first and paged by `before_timestamp` (strictly older),
//!   `include_finished`, `app_id`, tag filters as AND, an empty tag name refused with
//!   INVALID_ARGUMENT; terminate a no-op on a finished sandbox (its earlier result echoed).
//!   Listings can leave `SandboxInfo.tags` empty (Modal marks the field "not yet exposed"; see
//!   [`ModalEmu::hide_tags_in_listings`]). The page size ([`PAGE_SIZE`]) is the emulator's
//!   choice: Modal does not publish one.
//!
//! Faults are applied before the API sees a call (`server.rs`), like the HTTP framework's
//! (`emu.rs`, which speaks HTTP/1.1 and so cannot serve gRPC): an outage (every call
//! UNAVAILABLE), UNAVAILABLE at a rate, latency, and throttling at a rate as
//! RESOURCE_EXHAUSTED carrying Modal's `RPCStatus` with an `RPCRetryPolicy` in
//! `grpc-status-details-bin`. Dropped connections are not emulated: every call shares one
//! HTTP/2 connection, which tonic's server does not let a handler cut. Every call is logged; a
//! call to an RPC that arrives while a throttle it was given is still running counts as
//! early. Calls that arrive within [`IN_FLIGHT`] of the throttle were sent before the client
//! could see it and do not count.

mod api;
mod server;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic::Code;

pub use api::DEFAULT_ENVIRONMENT;
use api::{Gen, Sb, State};
use sandguard::testing::providers::modal::wire;
pub use wire::path;

pub const TOKEN_ID: &str = "ak-emulatortoken0001";
pub const TOKEN_SECRET: &str = "as-emulatorsecret0001";
/// Sandboxes per listing page, unless [`ModalEmu::set_page_size`] says otherwise.
pub const PAGE_SIZE: usize = 100;
/// Calls this close after a throttle are taken to have been in flight already.
pub const IN_FLIGHT: Duration = Duration::from_millis(50);

/// What goes wrong, on purpose. Rates are fractions of calls (0.0 to 1.0).
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Answer UNAVAILABLE.
    pub error_rate: f64,
    /// Answer RESOURCE_EXHAUSTED with a retry policy.
    pub throttle_rate: f64,
    /// The wait a throttle asks for.
    pub retry_after_secs: f32,
    /// Every call answered UNAVAILABLE while set.
    pub outage: bool,
    /// Delay before every answer.
    pub latency: Duration,
    /// RPC paths answered PERMISSION_DENIED (an account refused the V2 API, say).
    pub denied: Vec<&'static str>,
}

/// One call in the log.
#[derive(Debug, Clone)]
pub struct Hit {
    pub at: Instant,
    /// The RPC path.
    pub path: String,
    /// The gRPC status code (0 = OK).
    pub code: i32,
    /// Arrived while a throttle given for this RPC was still running.
    pub early: bool,
}

/// A running emulator; it stops with the test process.
#[derive(Clone)]
pub struct ModalEmu {
    pub url: String,
    state: Arc<State>,
}

impl ModalEmu {
    pub fn start() -> ModalEmu {
        let state = Arc::new(State::new(PAGE_SIZE));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener.set_nonblocking(true).expect("nonblocking");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let svc = server::Svc(state.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                let incoming = tonic::transport::server::TcpIncoming::from(listener);
                tonic::transport::Server::builder()
                    .serve_with_incoming(svc, incoming)
                    .await
                    .expect("the Modal emulator stopped");
            });
        });
        ModalEmu { url, state }
    }

    /// Adds a running V1 sandbox with these tags to the default environment; returns its id.
    /// Each sandbox is created a little after the previous one.
    pub fn insert(&self, tags: &[(&str, &str)]) -> String {
        self.insert_as(false, DEFAULT_ENVIRONMENT, tags)
    }

    /// Adds a running V2 sandbox with these tags to the default environment; returns its id.
    pub fn insert_v2(&self, tags: &[(&str, &str)]) -> String {
        self.insert_as(true, DEFAULT_ENVIRONMENT, tags)
    }

    /// Adds a running sandbox, V2 or V1, to `environment`; returns its id.
    pub fn insert_as(&self, v2: bool, environment: &str, tags: &[(&str, &str)]) -> String {
        let id = {
            let mut n = self.state.next_id.lock().unwrap();
            *n += 1;
            if v2 {
                format!("sb-{:022}V", *n)
            } else {
                format!("sb-{:022}", *n)
            }
        };
        let created_at = {
            let mut clock = self.state.clock.lock().unwrap();
            *clock += 0.001;
            *clock
        };
        self.state.sandboxes.lock().unwrap().push(Sb {
            id: id.clone(),
            generation: if v2 { Gen::V2 } else { Gen::V1 },
            environment: environment.to_string(),
            created_at,
            tags: tags
                .iter()
                .map(|(k, v)| wire::SandboxTag {
                    tag_name: k.to_string(),
                    tag_value: v.to_string(),
                })
                .collect(),
            finished: None,
        });
        id
    }

    /// Adds a running sandbox to the default environment, V1 and V2 in turn; returns its id.
    pub fn insert_mixed(&self, tags: &[(&str, &str)]) -> String {
        let v2 = self.state.sandboxes.lock().unwrap().len() % 2 == 1;
        self.insert_as(v2, DEFAULT_ENVIRONMENT, tags)
    }

    /// The running sandboxes of the default environment: (V1, V2).
    pub fn running_by_generation(&self) -> (usize, usize) {
        let all = self.state.sandboxes.lock().unwrap();
        let running = all
            .iter()
            .filter(|s| s.finished.is_none() && s.environment == DEFAULT_ENVIRONMENT);
        running.fold((0, 0), |(v1, v2), s| match s.generation {
            Gen::V1 => (v1 + 1, v2),
            Gen::V2 => (v1, v2 + 1),
        })
    }

    pub fn page_size(&self) -> usize {
        self.state.page_size.load(Ordering::SeqCst)
    }

    /// Whether `id` exists and has not finished.
    pub fn running(&self, id: &str) -> bool {
        self.state
            .sandboxes
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.id == id && s.finished.is_none())
    }

    /// How many of `ids` are still running.
    pub fn count_running(&self, ids: &[String]) -> usize {
        ids.iter().filter(|id| self.running(id)).count()
    }

    /// The tags of `id` as the emulator keeps them, sorted.
    pub fn tags(&self, id: &str) -> Vec<(String, String)> {
        let all = self.state.sandboxes.lock().unwrap();
        let mut tags: Vec<(String, String)> = all
            .iter()
            .filter(|s| s.id == id)
            .flat_map(|s| {
                s.tags
                    .iter()
                    .map(|t| (t.tag_name.clone(), t.tag_value.clone()))
            })
            .collect();
        tags.sort();
        tags
    }

    /// From now on, listings leave every sandbox's tags empty (the filter still applies).
    pub fn hide_tags_in_listings(&self) {
        self.state.hide_tags.store(true, Ordering::SeqCst);
    }

    /// Sandboxes per listing page from now on.
    pub fn set_page_size(&self, size: usize) {
        self.state.page_size.store(size, Ordering::SeqCst);
    }

    /// How long the auth tokens issued from now on are good for.
    pub fn set_token_lifetime(&self, lifetime: Duration) {
        *self.state.token_lifetime.lock().unwrap() = lifetime;
    }

    /// Every auth token issued so far.
    pub fn issued_tokens(&self) -> Vec<String> {
        let tokens = self.state.tokens.lock().unwrap();
        tokens.iter().map(|(t, _)| t.clone()).collect()
    }

    pub fn set_faults(&self, faults: Faults) {
        *self.state.server.faults.lock().unwrap() = faults;
    }

    pub fn hits(&self) -> Vec<Hit> {
        self.state.server.hits.lock().unwrap().clone()
    }

    /// Calls to the RPC `path`.
    pub fn calls(&self, path: &str) -> usize {
        self.hits().iter().filter(|h| h.path == path).count()
    }

    /// Calls that reached an RPC before the retry-after it was given had elapsed.
    pub fn early_hits(&self) -> usize {
        self.hits().iter().filter(|h| h.early).count()
    }

    /// Calls answered with `code`.
    pub fn hits_with(&self, code: Code) -> usize {
        self.hits().iter().filter(|h| h.code == code as i32).count()
    }
}
