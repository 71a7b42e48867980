//! The cloud API proxy: an unmodified E2B or Daytona SDK creates only labelled, claimed
//! sandboxes (`sandguard run --cloud-proxy`, `[watch] cloud_proxy = true`).
//!
//! Both SDKs take their API's base URL from the environment (`E2B_API_URL`,
//! `DAYTONA_API_URL`). For each such provider configured in the session, the sidecar listens on
//! a fresh loopback port (`127.0.0.1:0`) and the guarded program gets that variable pointing at
//! it (the ready line carries `E2B_API_URL=http://127.0.0.1:PORT`,
//! `DAYTONA_API_URL=http://127.0.0.1:PORT/api`: the upstream's own path after the loopback
//! origin, so every path the SDK builds is the upstream's).
//!
//! Decisions:
//!
//! - Upstream: the provider's base URL exactly as its driver resolved it (E2B: `E2B_API_URL`,
//!   `[providers.e2b] api_url`, `https://api.${E2B_DOMAIN}`; Daytona: `DAYTONA_API_URL`,
//!   `DAYTONA_SERVER_URL`, `api_url`), read in the sidecar before the program's variable is
//!   set. `https` goes over rustls with the webpki roots; `http` (an emulator, a local stack)
//!   as it is.
//! - Requests pass byte for byte, bodies streamed both ways without buffering (SSE, chunked
//!   logs), with the program's own credentials: the proxy adds no authority of its own, so a
//!   local user who connects to the port can do nothing they could not do with the key they
//!   send. HTTP's hop-by-hop headers (`Connection` and what it names, `Keep-Alive`, `TE`,
//!   `Trailer`, `Transfer-Encoding`, `Upgrade`, `Proxy-*`) and `Expect` stay on their hop;
//!   `Host` becomes the upstream's. An upgrade (Daytona's Socket.IO websocket) is passed on and,
//!   once answered `101`, copied raw both ways. Headers are never logged, so the API key reaches
//!   no log, journal or error.
//! - Every create route the service accepts is stamped ([`e2b`]: `POST [/vN]/sandboxes`;
//!   [`daytona`]: `POST <base>/sandbox` and the deprecated `POST <base>/workspace`, in any
//!   ASCII case, as Express routes them; the base path is matched in any ASCII case too), and
//!   any other POST to a sandbox collection path is refused ([`UNKNOWN_CREATE`]): a create the
//!   proxy does not know is never passed on unstamped. The create call is the one request
//!   buffered (at most [`MAX_CREATE_BODY`]): the session's labels are merged into its
//!   `metadata` / `labels`, the session's values winning, the program's other keys kept
//!   (`proxy::stamp`, the step the Docker proxy takes too); its `Accept-Encoding` is
//!   dropped, so the answer comes uncompressed and its id can be read (the program gets it
//!   uncompressed too). A create it cannot stamp is refused, never passed on unstamped: a
//!   body over the bound (413), one that is not a JSON object (400), and a fork (E2B's and
//!   Daytona's fork bodies carry no labels; 400). Paths are percent-decoded and dot segments
//!   resolved before routing (as the services route them), and the method matches in any case.
//! - The size a create names is read from its body and journaled with the claim, for prices
//!   (`crate::ledger::price`): E2B's `templateID` (the template the sandbox is made from, which
//!   fixes its CPU and memory), Daytona's `snapshot` (likewise; `reference/providers.md` §2's
//!   create body has no class or size field, and `sandboxClass`, on the answer, says only
//!   `linux-vm` or `container`). A Daytona create that names no snapshot (the default one, or
//!   an image with its own resources) has no size and is priced at `price_per_hour`.
//! - The id in a 2xx create answer is claimed through the sidecar's proxy channel
//!   ([`Claim`], as the Docker proxy's claims; a create whose stamped `metadata` / `labels`
//!   carry `sandguard.detached=true` is handed over as a detach, [`Hold::Detach`], so it
//!   outlives its owner) and the answer reaches the program only after
//!   the sidecar acknowledged it (journaled, fsynced). No acknowledgement within
//!   [`ACK_TIMEOUT`](crate::proxy::claim::ACK_TIMEOUT) (a sidecar that is reclaiming, a disk that hangs), or an answer whose id
//!   cannot be read, answers 503 with the reason: the program never holds a sandbox sandguard
//!   did not claim (the sandbox carries the session's labels, so a sweep finds it). Other
//!   answers, errors included (4xx, 5xx, 429 with their headers), pass through unchanged.
//!
//! - A `DELETE` of a sandbox (E2B's kill, Daytona's delete) passes on, and once the service
//!   confirms it (`2xx` on a path it routes as sent, or its `404` for the claimed id:
//!   `crate::proxy::release`) the claim this proxy made for that sandbox is released
//!   ([`removal`]), so the ledger knows when the program ended it and its time stops there.
//!   A `DELETE` it refused, or a path it does not route (E2B's `/v2/sandboxes/{id}`), releases
//!   nothing.
//!
//! - Connections are accepted by the loop both proxies share (`proxy::accept`),
//!   each served by hyper's HTTP/1 server with upgrades; a websocket's raw copy is a task of
//!   its connection (`proxy::tasks`), as the Docker proxy's are.
//! - A create goes through the pipeline both proxies run (`proxy::create`: read, stamp,
//!   decide, forward, claim); this API's part of it is [`Creating`], and its refusals
//!   (`proxy::refusal`) are answered in the shape both SDKs show.
//!
//! The proxy is a convenience for programs that are not hostile: a program holds its own API
//! key and can always call the real API directly.

pub(crate) mod daytona;
pub(crate) mod e2b;
mod forward;
mod removal;

#[cfg(test)]
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::protocol::Target;
#[cfg(test)]
use crate::proxy::claim::Claim;
pub(crate) use crate::proxy::claim::{Ask, Hold};
use crate::proxy::create::{self as pipeline, Creates, Stamped, Unclaimed};
use crate::proxy::refusal::{Refusal, Unstampable};
use crate::proxy::release::Routed;
use crate::proxy::stamp::MAX_CREATE_BODY;
use crate::proxy::tasks::Tasks;

pub(crate) use crate::proxy::create::Body;

/// Which API a proxy speaks; only [`e2b`] and [`daytona`] know their wire formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    E2b,
    Daytona,
}

/// Why a POST to a sandbox collection path the proxy has no create route for is refused.
pub(crate) const UNKNOWN_CREATE: &str =
    "a POST to a sandbox collection path that is not a create route sandguard knows how to stamp";

/// What the proxy does with one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    Pass,
    /// A sandbox create: stamped, its answer claimed.
    Create,
    /// A create the proxy cannot stamp, and why.
    Refuse(&'static str),
    /// A `DELETE` of the sandbox the path names (`given`: its id, or a Daytona name): passed
    /// on, and released once the service confirms it ([`removal`]); `routed`, whether the
    /// service routes the path as sent to its removal (`crate::proxy::release`).
    Remove {
        given: String,
        routed: Routed,
    },
}

impl Api {
    /// The API of that provider name, if it has a proxy.
    pub(crate) fn named(name: &str) -> Option<Api> {
        [Api::E2b, Api::Daytona]
            .into_iter()
            .find(|a| a.name() == name)
    }

    /// The provider's name, as claims and `sandguard claim` name it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Api::E2b => "e2b",
            Api::Daytona => "daytona",
        }
    }

    /// The variable the SDK reads its base URL from.
    pub(crate) fn variable(self) -> &'static str {
        match self {
            Api::E2b => e2b::VARIABLE,
            Api::Daytona => daytona::VARIABLE,
        }
    }

    /// Routes by method and the path's segments after the base URL's own.
    pub(crate) fn route(self, post: bool, rest: &[&str]) -> Route {
        match self {
            Api::E2b => e2b::route(post, rest),
            Api::Daytona => daytona::route(post, rest),
        }
    }

    /// The create body with the session's labels merged in, and what the sidecar journals for
    /// the sandbox it creates.
    /// With a lifetime limit, an E2B create's `timeout` is cut to it too.
    pub(crate) fn stamp(
        self,
        body: &[u8],
        labels: &crate::proxy::stamp::Labels,
    ) -> Result<(Vec<u8>, Hold), Unstampable> {
        match self {
            Api::E2b => e2b::stamp(
                body,
                &labels.now(Some("e2b")),
                labels.budget.lifetime("e2b"),
            ),
            Api::Daytona => daytona::stamp(body, &labels.now(Some("daytona"))),
        }
    }

    /// The sandbox a `DELETE` with these segments after the base URL's removes, if it is a
    /// sandbox's removal route.
    pub(crate) fn removal(self, rest: &[&str]) -> Option<String> {
        match self {
            Api::E2b => e2b::removal(rest),
            Api::Daytona => daytona::removal(rest),
        }
    }

    /// Whether the service routes a `DELETE` of `path`, as sent, to its removal of `given`
    /// (its router's own reading; the method is checked by the caller).
    pub(crate) fn removal_routed(self, path: &str, base: &str, given: &str) -> bool {
        match self {
            Api::E2b => e2b::removal_routed(path, base, given),
            Api::Daytona => daytona::removal_routed(path, base, given),
        }
    }

    /// The new sandbox's name in a create answer, where the service names sandboxes (a
    /// delete may name it so).
    pub(crate) fn sandbox_name(self, answer: &[u8]) -> Option<String> {
        match self {
            Api::E2b => None,
            Api::Daytona => daytona::name(answer),
        }
    }

    /// The size a create body names, for prices (`crate::proxy::size`).
    pub(crate) fn size(self, body: &[u8]) -> Option<String> {
        match self {
            Api::E2b => e2b::size(body),
            Api::Daytona => daytona::size(body),
        }
    }

    /// What a create body names (`crate::proxy::named`): E2B's template, Daytona's snapshot.
    pub(crate) fn create_names(self, body: &[u8]) -> std::collections::BTreeMap<String, String> {
        let fields = match self {
            Api::E2b => crate::proxy::named::E2B,
            Api::Daytona => crate::proxy::named::DAYTONA,
        };
        crate::proxy::named::named(body, fields)
    }

    /// The new sandbox's id in a successful create answer.
    pub(crate) fn created(self, answer: &[u8]) -> Option<String> {
        match self {
            Api::E2b => e2b::created(answer),
            Api::Daytona => daytona::created(answer),
        }
    }
}

/// Why a cloud proxy cannot be started: its upstream's base URL, or its loopback listener.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CloudError {
    /// The base URL does not parse.
    #[error("base URL {url:?}: {error}")]
    BaseUrl {
        url: String,
        error: <reqwest::Url as std::str::FromStr>::Err,
    },
    /// The base URL is not `http(s)://host…`.
    #[error("base URL {0:?}: not an http(s) URL with a host")]
    NotHttp(String),
    /// No loopback port could be bound.
    #[error("cannot listen on 127.0.0.1: {0}")]
    Listen(std::io::Error),
    /// The bound listener's address cannot be read.
    #[error("cannot read the listening address: {0}")]
    Address(std::io::Error),
    /// The bound listener cannot be served by the runtime.
    #[error("cannot serve on {address}: {error}")]
    Serve {
        address: SocketAddr,
        error: std::io::Error,
    },
}

/// The real API: scheme, authority and base path of the provider's resolved URL.
#[derive(Debug, Clone)]
pub(crate) struct Upstream {
    /// `http` or `https`.
    scheme: String,
    /// `host[:port]`.
    authority: String,
    /// The base URL's path without its trailing `/` (`""`, `/api`).
    base: String,
}

impl Upstream {
    pub(crate) fn parse(url: &str) -> Result<Upstream, CloudError> {
        let parsed = reqwest::Url::parse(url).map_err(|error| CloudError::BaseUrl {
            url: url.to_string(),
            error,
        })?;
        let scheme = parsed.scheme().to_string();
        let host = parsed.host_str().unwrap_or_default();
        if !matches!(scheme.as_str(), "http" | "https") || host.is_empty() {
            return Err(CloudError::NotHttp(url.to_string()));
        }
        let authority = match parsed.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        };
        Ok(Upstream {
            scheme,
            authority,
            base: parsed.path().trim_end_matches('/').to_string(),
        })
    }
}

struct Shared {
    api: Api,
    upstream: Upstream,
    /// The base path's segments, which every routed path must start with.
    base: Vec<String>,
    labels: crate::proxy::stamp::Labels,
    claims: mpsc::UnboundedSender<Ask>,
    client: forward::Client,
    /// What this proxy claimed, for the program's own removals ([`removal`]).
    claimed: removal::Claimed,
}

/// A bound proxy, not yet serving.
pub(crate) struct CloudProxy {
    listener: TcpListener,
    address: SocketAddr,
    shared: Arc<Shared>,
}

/// A fresh loopback port, not served yet.
pub(crate) fn listen() -> Result<std::net::TcpListener, CloudError> {
    std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(CloudError::Listen)
}

/// What the program gets for a proxy of `api` on `address` forwarding to `upstream`:
/// `NAME=http://127.0.0.1:PORT[/base]`.
pub(crate) fn assignment(
    api: Api,
    address: std::net::SocketAddr,
    upstream: &Upstream,
) -> (String, String) {
    let url = format!("http://{address}{}", upstream.base);
    (api.variable().to_string(), url)
}

impl CloudProxy {
    /// Listens on a fresh loopback port for `api`, forwarding to `base_url`.
    #[cfg(test)]
    pub(crate) async fn bind(
        api: Api,
        base_url: &str,
        labels: BTreeMap<String, String>,
        claims: mpsc::UnboundedSender<Ask>,
    ) -> Result<CloudProxy, CloudError> {
        let upstream = Upstream::parse(base_url)?;
        CloudProxy::serve(api, upstream, listen()?, labels.into(), claims)
    }

    /// The proxy on a bound listener ([`listen`]; the wrapper binds it before it execs the
    /// program and hands it to the sidecar, `crate::session::handoff`), inside the runtime.
    pub(crate) fn serve(
        api: Api,
        upstream: Upstream,
        listener: std::net::TcpListener,
        labels: crate::proxy::stamp::Labels,
        claims: mpsc::UnboundedSender<Ask>,
    ) -> Result<CloudProxy, CloudError> {
        let address = listener.local_addr().map_err(CloudError::Address)?;
        let listener = listener
            .set_nonblocking(true)
            .and_then(|()| TcpListener::from_std(listener))
            .map_err(|error| CloudError::Serve { address, error })?;
        let base = crate::proxy::path::clean(&upstream.base)
            .into_iter()
            .map(str::to_string)
            .collect();
        let shared = Arc::new(Shared {
            api,
            base,
            upstream,
            labels,
            claims,
            client: forward::client(),
            claimed: removal::Claimed::default(),
        });
        Ok(CloudProxy {
            listener,
            address,
            shared,
        })
    }

    /// What the program gets: `NAME=http://127.0.0.1:PORT[/base]`.
    pub(crate) fn assignment(&self) -> (String, String) {
        assignment(self.shared.api, self.address, &self.shared.upstream)
    }

    /// Serves until dropped; dropping the future ends every connection with it.
    pub(crate) async fn run(self) {
        let shared = self.shared;
        crate::proxy::accept::serve("cloud proxy", self.listener, move |client| {
            serve(client, shared.clone())
        })
        .await;
    }
}

/// One client connection, HTTP/1.1 with keep-alive and upgrades; errors end only it.
/// Then the tasks it started (a websocket's raw copy) are waited for: they end when their
/// streams do, and are aborted with the proxy.
async fn serve(client: tokio::net::TcpStream, shared: Arc<Shared>) {
    let tasks = Arc::new(Tasks::default());
    let service = {
        let tasks = tasks.clone();
        hyper::service::service_fn(move |req| {
            let (shared, tasks) = (shared.clone(), tasks.clone());
            async move { Ok::<_, Infallible>(handle(req, &shared, &tasks).await) }
        })
    };
    let served = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(client), service)
        .with_upgrades()
        .await;
    if let Err(e) = served {
        tracing::debug!("cloud proxy: connection ended: {e}");
    }
    tasks.finish().await;
}

async fn handle(req: Request<Incoming>, shared: &Shared, tasks: &Tasks) -> Response<Body> {
    match route(&req, shared) {
        Route::Pass => forward::pass(req, shared, tasks).await,
        Route::Create => {
            let (parts, body) = req.into_parts();
            pipeline::create(&Creating(shared), parts, body)
                .await
                .unwrap_or_else(|r| refused(shared.api, &r))
        }
        Route::Refuse(why) => answer(400, &refusal_message(shared.api, why)),
        Route::Remove { given, routed } => removal::remove(req, shared, &given, routed).await,
    }
}

/// Routes a request as the service would: percent-decoded, dot segments resolved, under the
/// base path.
fn route(req: &Request<Incoming>, shared: &Shared) -> Route {
    let post = req.method().as_str().eq_ignore_ascii_case("POST");
    let Ok(decoded) = crate::proxy::path::decode(req.uri().path()) else {
        // The services refuse such a path too; a POST might have been a create.
        return match post {
            true => Route::Refuse("its path has a bad % escape"),
            false => Route::Pass,
        };
    };
    let Ok(path) = String::from_utf8(decoded) else {
        return Route::Pass; // no sandbox route has bytes that are not UTF-8
    };
    let segments = crate::proxy::path::clean(&path);
    // The base path is part of the service's routes, matched in any ASCII case like them.
    let under = segments.len() >= shared.base.len()
        && segments
            .iter()
            .zip(&shared.base)
            .all(|(s, b)| s.eq_ignore_ascii_case(b));
    if !under {
        return Route::Pass;
    }
    let rest = &segments[shared.base.len()..];
    if req.method().as_str().eq_ignore_ascii_case("DELETE") {
        let Some(given) = shared.api.removal(rest) else {
            return Route::Pass;
        };
        // Recognised on the cleaned path (a superset); released only on the path as sent.
        let exact = req.method() == hyper::Method::DELETE
            && (shared.api).removal_routed(req.uri().path(), &shared.upstream.base, &given);
        let routed = if exact { Routed::Exactly } else { Routed::Not };
        return Route::Remove { given, routed };
    }
    shared.api.route(post, rest)
}

/// Worded so that no article hangs on the provider's name ("a sandbox create on e2b").
fn refusal_message(api: Api, why: &str) -> String {
    format!(
        "sandguard: refused a sandbox create on {} that it cannot stamp with the session's \
         labels ({why}); nothing was created",
        api.name()
    )
}

/// A refusal of the pipeline's, in the words of [`refusal`].
fn refused(api: Api, refusal: &Refusal) -> Response<Body> {
    if let Refusal::Limit(_) = refusal {
        let message = format!(
            "sandguard: refused a sandbox create on {}: {refusal}",
            api.name()
        );
        return answer(refusal.status(), &message);
    }
    let why = match refusal {
        Refusal::TooLarge => format!("its body is over {MAX_CREATE_BODY} bytes"),
        Refusal::Unstampable(why) => why.to_string(),
        other => other.to_string(),
    };
    answer(refusal.status(), &refusal_message(api, &why))
}

/// A sandbox create, through the pipeline both proxies share ([`pipeline`]): this API's part.
struct Creating<'a>(&'a Shared);

impl Creates for Creating<'_> {
    type Made = ();

    async fn stamp(&self, body: &[u8]) -> Result<Stamped<()>, Refusal> {
        let size = self.0.api.size(body);
        let (body, hold) = self.0.api.stamp(body, &self.0.labels)?;
        Ok(Stamped {
            body,
            hold,
            size,
            made: (),
        })
    }

    /// The answer must be read for its id: asked for as it is, never compressed.
    async fn forward(
        &self,
        mut parts: hyper::http::request::Parts,
        body: Vec<u8>,
    ) -> Result<Response<Incoming>, Response<Body>> {
        parts.headers.remove(hyper::header::ACCEPT_ENCODING);
        forward::send(parts, Either::Right(Full::from(body)), self.0).await
    }

    fn as_is(&self, answer: Response<Incoming>) -> Response<Body> {
        forward::answer_as_is(answer.map(Either::Left))
    }

    fn created(&self, (): (), answer: &[u8]) -> Result<Target, Unclaimed> {
        let api = self.0.api;
        let id = api.created(answer).ok_or(Unclaimed::NotOurs)?;
        let target = Target::new(api.name(), &id).map_err(|why| Unclaimed::BadId { id, why })?;
        self.0.claimed.made(&target.id, api.sandbox_name(answer));
        Ok(target)
    }

    /// Every create this proxy routes makes a sandbox.
    fn counted(&self) -> Option<&str> {
        Some(self.0.api.name())
    }

    /// Nothing without limits (nothing is refused, so the body is not read again).
    fn named(&self, body: &[u8]) -> std::collections::BTreeMap<String, String> {
        if !self.0.labels.budget.any() {
            return Default::default();
        }
        self.0.api.create_names(body)
    }

    fn claims(&self) -> &mpsc::UnboundedSender<Ask> {
        &self.0.claims
    }

    fn unreadable(&self) -> Response<Body> {
        unclaimed(self.0.api, "its create answer could not be read")
    }

    /// Withheld: the program never holds a sandbox sandguard did not claim.
    fn unclaimed(&self, why: Unclaimed) -> Option<Response<Body>> {
        let api = self.0.api;
        Some(match why {
            Unclaimed::NotOurs => unclaimed(api, "its create answer names no sandbox id"),
            Unclaimed::BadId { id, why } => {
                unclaimed(api, &format!("sandbox {id} was not claimed: {why}"))
            }
            Unclaimed::NotAcknowledged(target, why) => unclaimed(
                api,
                &format!("sandbox {} was not claimed: {why}", target.id),
            ),
        })
    }
}

/// A 503 for a create that may have made a sandbox sandguard could not claim.
fn unclaimed(api: Api, why: &str) -> Response<Body> {
    let message = format!(
        "sandguard: the {} create succeeded upstream but {why}; the sandbox carries the \
         session's labels (a `sandguard sweep` finds it), and the answer is withheld so no \
         unclaimed sandbox is used",
        api.name()
    );
    answer(503, &message)
}

/// An answer of the proxy's own: `{"code": N, "message": "..."}`, which both SDKs show.
pub(crate) fn answer(status: u16, message: &str) -> Response<Body> {
    let body = serde_json::json!({ "code": status, "message": message }).to_string();
    Response::builder()
        .status(status)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Either::Right(Full::from(body)))
        .unwrap_or_else(|_| Response::new(Either::Right(Full::default())))
}

#[cfg(test)]
mod tests;
