//! The emulator's gRPC server: faults applied before the API sees a call, routing, the log.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prost::Message;
use sandguard::testing::providers::modal::wire::{self, path, Any, RpcRetryPolicy, RpcStatus};
use tonic::body::Body;
use tonic::codegen::{http, BoxFuture, Context, Poll, Service};
use tonic::metadata::MetadataMap;
use tonic::server::{Grpc, UnaryService};
use tonic::{Code, Status};

use super::api::{Gen, State};
use super::{Faults, Hit, IN_FLIGHT};

/// Faults, their bookkeeping and the log.
pub struct Server {
    pub faults: Mutex<Faults>,
    pub hits: Mutex<Vec<Hit>>,
    /// Per RPC, the throttle still running: (counted from, until).
    blocked: Mutex<HashMap<String, (Instant, Instant)>>,
    rng: Mutex<u64>,
}

impl Default for Server {
    fn default() -> Server {
        Server {
            faults: Mutex::new(Faults::default()),
            hits: Mutex::new(Vec::new()),
            blocked: Mutex::new(HashMap::new()),
            rng: Mutex::new(0x2545_F491_4F6C_DD1D),
        }
    }
}

impl Server {
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
        if faults.denied.contains(&path) {
            return Some(Status::permission_denied(
                "this workspace may not use this method (emulated)",
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
            let details = retry_details(Code::ResourceExhausted as i32, message, secs);
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
}

type Handler<Req, Resp> = fn(&State, &MetadataMap, Req) -> Result<Resp, Status>;

/// One RPC: the token id and secret, then the handler.
struct Unary<Req, Resp> {
    state: Arc<State>,
    handler: Handler<Req, Resp>,
}

impl<Req: Send + 'static, Resp: Send + 'static> UnaryService<Req> for Unary<Req, Resp> {
    type Response = Resp;
    type Future = std::future::Ready<Result<tonic::Response<Resp>, Status>>;

    fn call(&mut self, request: tonic::Request<Req>) -> Self::Future {
        let state = &self.state;
        let result = state.authorize(request.metadata()).and_then(|()| {
            let metadata = request.metadata().clone();
            (self.handler)(state, &metadata, request.into_inner())
        });
        std::future::ready(result.map(tonic::Response::new))
    }
}

async fn unary<Req, Resp>(
    state: Arc<State>,
    handler: Handler<Req, Resp>,
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

/// Routes a call that no fault stopped.
async fn route(
    state: Arc<State>,
    path: &str,
    request: http::Request<Body>,
) -> http::Response<Body> {
    use Gen::{V1, V2};
    let s = state;
    match path {
        path::CLIENT_HELLO => {
            unary(
                s,
                |_, _, _: wire::Empty| Ok(wire::ClientHelloResponse::default()),
                request,
            )
            .await
        }
        path::AUTH_TOKEN_GET => unary(s, State::auth_token_get, request).await,
        path::SANDBOX_LIST => unary(s, |s, m, r| s.list(V1, m, r), request).await,
        path::SANDBOX_LIST_V2 => unary(s, |s, m, r| s.list(V2, m, r), request).await,
        path::SANDBOX_TERMINATE => unary(s, |s, m, r| s.terminate(V1, m, r), request).await,
        path::SANDBOX_TERMINATE_V2 => unary(s, |s, m, r| s.terminate(V2, m, r), request).await,
        path::SANDBOX_TAGS_GET => unary(s, |s, m, r| s.tags_get(V1, m, r), request).await,
        path::SANDBOX_TAGS_GET_V2 => unary(s, |s, m, r| s.tags_get(V2, m, r), request).await,
        path::SANDBOX_TAGS_SET => unary(s, |s, m, r| s.tags_set(V1, m, r), request).await,
        path::SANDBOX_TAGS_SET_V2 => unary(s, |s, m, r| s.tags_set(V2, m, r), request).await,
        _ => Status::unimplemented(format!("unknown method {path}")).into_http(),
    }
}

/// The whole service: faults, routing, the log.
#[derive(Clone)]
pub struct Svc(pub Arc<State>);

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
            let latency = state.server.faults.lock().unwrap().latency;
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            let path = request.uri().path().to_string();
            let now = Instant::now();
            let early = state.server.early(&path, now);
            let response = match state.server.fault(&path, now) {
                Some(status) => status.into_http(),
                None => route(state.clone(), &path, request).await,
            };
            let code = response
                .headers()
                .get("grpc-status")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            state.server.log(&path, now, early, code);
            Ok(response)
        })
    }
}

/// The details of a throttle: an `RPCRetryPolicy` asking for a wait of `secs`, packed under
/// Modal's `type.modal.com/` prefix.
fn retry_details(code: i32, message: &str, secs: f32) -> Vec<u8> {
    RpcStatus {
        code,
        message: message.to_string(),
        details: vec![Any {
            type_url: wire::RETRY_POLICY_TYPE.into(),
            value: RpcRetryPolicy {
                retry_after_secs: secs,
            }
            .encode_to_vec(),
        }],
    }
    .encode_to_vec()
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
