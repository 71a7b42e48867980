//! A Modal control-plane emulator: a tonic gRPC server on 127.0.0.1 (port 0) answering
//! `ClientHello`, `SandboxList`, `SandboxTerminate` and `SandboxTagsGet` of `modal.client.ModalClient` from
//! in-memory sandboxes, with the driver's own hand-written messages.
//!
//! Faithful to what Modal's clients rely on: token metadata checked on every call
//! (UNAUTHENTICATED otherwise), listings newest first and paged by `before_timestamp`
//! (strictly older), `include_finished`, tag filters as AND, an empty tag name refused with
//! INVALID_ARGUMENT, terminate a no-op on a finished sandbox (its earlier result echoed), and
//! NOT_FOUND for an unknown id. Listings can leave `SandboxInfo.tags` empty (Modal marks the
//! field "not yet exposed"; see [`ModalEmu::hide_tags_in_listings`]). The page size ([`PAGE_SIZE`]) is the emulator's choice: Modal
//! does not publish one.
//!
//! Faults are applied before the API sees a call, like the HTTP framework's (`emu.rs`, which
//! speaks HTTP/1.1 and so cannot serve gRPC): an outage (every call UNAVAILABLE), UNAVAILABLE
//! at a rate, latency, and throttling at a rate as RESOURCE_EXHAUSTED carrying Modal's
//! `RPCStatus` with an `RPCRetryPolicy` in `grpc-status-details-bin`. Dropped connections are
//! not emulated: every call shares one HTTP/2 connection, which tonic's server does not let a
//! handler cut. Every call is logged; a call to an RPC
//! that arrives while a throttle it was given is still running counts as early. Calls that
//! arrive within [`IN_FLIGHT`] of the throttle were sent before the client could see it and
//! do not count.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sandguard::providers::modal::wire::{self, SandboxInfo, SandboxTag};
use tonic::body::Body;
use tonic::codegen::{http, BoxFuture, Context, Poll, Service};
use tonic::server::{Grpc, UnaryService};
use tonic::{Code, Status};

pub const TOKEN_ID: &str = "ak-emulatortoken0001";
pub const TOKEN_SECRET: &str = "as-emulatorsecret0001";
/// Sandboxes per `SandboxList` page.
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

/// One sandbox as the emulator keeps it.
#[derive(Debug, Clone)]
struct Sb {
    id: String,
    created_at: f64,
    tags: Vec<SandboxTag>,
    /// The `GenericStatus` it finished with.
    finished: Option<i32>,
}

struct State {
    sandboxes: Mutex<Vec<Sb>>,
    faults: Mutex<Faults>,
    hits: Mutex<Vec<Hit>>,
    blocked: Mutex<HashMap<String, (Instant, Instant)>>,
    rng: Mutex<u64>,
    clock: Mutex<f64>,
    next_id: Mutex<u64>,
    hide_tags: std::sync::atomic::AtomicBool,
}

/// A running emulator; it stops with the test process.
#[derive(Clone)]
pub struct ModalEmu {
    pub url: String,
    state: Arc<State>,
}

impl ModalEmu {
    pub fn start() -> ModalEmu {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let state = Arc::new(State {
            sandboxes: Mutex::new(Vec::new()),
            faults: Mutex::new(Faults::default()),
            hits: Mutex::new(Vec::new()),
            blocked: Mutex::new(HashMap::new()),
            rng: Mutex::new(0x2545_F491_4F6C_DD1D),
            clock: Mutex::new(now),
            next_id: Mutex::new(0),
            hide_tags: Default::default(),
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener.set_nonblocking(true).expect("nonblocking");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let svc = Svc(state.clone());
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

    /// Adds a running sandbox with these tags; returns its id (`sb-` and 22 characters, like
    /// a V1 sandbox). Each one is created a little after the previous one.
    pub fn insert(&self, tags: &[(&str, &str)]) -> String {
        let id = {
            let mut n = self.state.next_id.lock().unwrap();
            *n += 1;
            format!("sb-{:022}", *n)
        };
        let created_at = {
            let mut clock = self.state.clock.lock().unwrap();
            *clock += 0.001;
            *clock
        };
        self.state.sandboxes.lock().unwrap().push(Sb {
            id: id.clone(),
            created_at,
            tags: tags
                .iter()
                .map(|(k, v)| SandboxTag {
                    tag_name: k.to_string(),
                    tag_value: v.to_string(),
                })
                .collect(),
            finished: None,
        });
        id
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

    /// From now on, listings leave every sandbox's tags empty (the filter still applies).
    pub fn hide_tags_in_listings(&self) {
        use std::sync::atomic::Ordering;
        self.state.hide_tags.store(true, Ordering::SeqCst);
    }

    pub fn set_faults(&self, faults: Faults) {
        *self.state.faults.lock().unwrap() = faults;
    }

    pub fn hits(&self) -> Vec<Hit> {
        self.state.hits.lock().unwrap().clone()
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

impl State {
    /// The injected fault for a call to `path`, if any (and the throttle bookkeeping).
    fn fault(&self, path: &str, now: Instant) -> Option<Status> {
        let faults = self.faults.lock().unwrap().clone();
        let draws = {
            let mut rng = self.rng.lock().unwrap();
            [next(&mut rng), next(&mut rng)]
        };
        if faults.outage {
            return Some(Status::unavailable(
                "upstream connect error (emulated outage)",
            ));
        }
        if draws[0] < faults.throttle_rate {
            let secs = faults.retry_after_secs.max(0.1);
            let until = now + Duration::from_secs_f32(secs);
            self.blocked
                .lock()
                .unwrap()
                .insert(path.to_string(), (now + IN_FLIGHT, until));
            let message = "rate limit exceeded";
            let details = wire::retry_details(Code::ResourceExhausted as i32, message, secs);
            return Some(Status::with_details(
                Code::ResourceExhausted,
                message,
                details.into(),
            ));
        }
        if draws[1] < faults.error_rate {
            return Some(Status::unavailable("service temporarily unavailable"));
        }
        None
    }

    fn early(&self, path: &str, now: Instant) -> bool {
        self.blocked
            .lock()
            .unwrap()
            .get(path)
            .is_some_and(|(from, until)| *from <= now && now < *until)
    }

    fn log(&self, path: &str, at: Instant, early: bool, code: i32) {
        self.hits.lock().unwrap().push(Hit {
            at,
            path: path.to_string(),
            code,
            early,
        });
    }

    fn authorize(&self, metadata: &tonic::metadata::MetadataMap) -> Result<(), Status> {
        let get = |k: &str| metadata.get(k).and_then(|v| v.to_str().ok());
        if get("x-modal-token-id") != Some(TOKEN_ID)
            || get("x-modal-token-secret") != Some(TOKEN_SECRET)
        {
            return Err(Status::unauthenticated(
                "Token ID is malformed or invalid. Please check your Modal token.",
            ));
        }
        if get("x-modal-client-type").is_none() || get("x-modal-client-version").is_none() {
            return Err(Status::failed_precondition(
                "missing client type or version",
            ));
        }
        Ok(())
    }

    fn list(&self, req: wire::SandboxListRequest) -> Result<wire::SandboxListResponse, Status> {
        if req.tags.iter().any(|t| t.tag_name.is_empty()) {
            return Err(Status::invalid_argument("tag names must not be empty"));
        }
        let hide_tags = self.hide_tags.load(std::sync::atomic::Ordering::SeqCst);
        let all = self.sandboxes.lock().unwrap();
        let mut matching: Vec<&Sb> = all
            .iter()
            .filter(|s| req.include_finished || s.finished.is_none())
            .filter(|s| req.before_timestamp <= 0.0 || s.created_at < req.before_timestamp)
            .filter(|s| req.tags.iter().all(|t| s.tags.contains(t)))
            .collect();
        matching.sort_by(|a, b| b.created_at.total_cmp(&a.created_at));
        let sandboxes = matching
            .into_iter()
            .take(PAGE_SIZE)
            .map(|s| SandboxInfo {
                id: s.id.clone(),
                created_at: s.created_at,
                tags: if hide_tags { vec![] } else { s.tags.clone() },
                image_id: "im-emulated".into(),
                task_info: Some(wire::TaskInfo {
                    id: format!("ta-{}", &s.id[3..]),
                    started_at: s.created_at + 0.5,
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect();
        Ok(wire::SandboxListResponse { sandboxes })
    }

    fn terminate(
        &self,
        req: wire::SandboxTerminateRequest,
    ) -> Result<wire::SandboxTerminateResponse, Status> {
        let mut all = self.sandboxes.lock().unwrap();
        let Some(sb) = all.iter_mut().find(|s| s.id == req.sandbox_id) else {
            return Err(Status::not_found(format!(
                "Sandbox {} not found",
                req.sandbox_id
            )));
        };
        let existing_result = sb.finished.map(|status| wire::GenericResult {
            status,
            ..Default::default()
        });
        sb.finished.get_or_insert(3);
        Ok(wire::SandboxTerminateResponse { existing_result })
    }

    fn tags_get(
        &self,
        req: wire::SandboxTagsGetRequest,
    ) -> Result<wire::SandboxTagsGetResponse, Status> {
        let all = self.sandboxes.lock().unwrap();
        let sb = all.iter().find(|s| s.id == req.sandbox_id);
        let sb =
            sb.ok_or_else(|| Status::not_found(format!("Sandbox {} not found", req.sandbox_id)))?;
        Ok(wire::SandboxTagsGetResponse {
            tags: sb.tags.clone(),
        })
    }
}

/// One RPC: authorization, then the handler.
struct Unary<Req, Resp> {
    state: Arc<State>,
    handler: fn(&State, Req) -> Result<Resp, Status>,
}

impl<Req: Send + 'static, Resp: Send + 'static> UnaryService<Req> for Unary<Req, Resp> {
    type Response = Resp;
    type Future = std::future::Ready<Result<tonic::Response<Resp>, Status>>;

    fn call(&mut self, request: tonic::Request<Req>) -> Self::Future {
        let result = self
            .state
            .authorize(request.metadata())
            .and_then(|()| (self.handler)(&self.state, request.into_inner()))
            .map(tonic::Response::new);
        std::future::ready(result)
    }
}

async fn unary<Req, Resp>(
    state: Arc<State>,
    handler: fn(&State, Req) -> Result<Resp, Status>,
    request: http::Request<Body>,
) -> http::Response<Body>
where
    Req: prost::Message + Default + Send + 'static,
    Resp: prost::Message + Send + 'static,
{
    let codec = tonic_prost::ProstCodec::<Resp, Req>::default();
    Grpc::new(codec)
        .unary(Unary { state, handler }, request)
        .await
}

/// The whole service: faults, routing, the log.
#[derive(Clone)]
struct Svc(Arc<State>);

impl Service<http::Request<Body>> for Svc {
    type Response = http::Response<Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let state = self.0.clone();
        Box::pin(async move {
            let latency = state.faults.lock().unwrap().latency;
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            let path = request.uri().path().to_string();
            let now = Instant::now();
            let early = state.early(&path, now);
            let response = if let Some(status) = state.fault(&path, now) {
                status.into_http()
            } else {
                match path.as_str() {
                    wire::CLIENT_HELLO => {
                        unary(state.clone(), |_, _: wire::Empty| hello(), request).await
                    }
                    wire::SANDBOX_LIST => unary(state.clone(), State::list, request).await,
                    wire::SANDBOX_TERMINATE => {
                        unary(state.clone(), State::terminate, request).await
                    }
                    wire::SANDBOX_TAGS_GET => unary(state.clone(), State::tags_get, request).await,
                    _ => Status::unimplemented(format!("unknown method {path}")).into_http(),
                }
            };
            let code = response
                .headers()
                .get("grpc-status")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            state.log(&path, now, early, code);
            Ok(response)
        })
    }
}

fn hello() -> Result<wire::ClientHelloResponse, Status> {
    Ok(wire::ClientHelloResponse::default())
}

/// A uniform draw in [0, 1) (xorshift64*).
fn next(state: &mut u64) -> f64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
}
