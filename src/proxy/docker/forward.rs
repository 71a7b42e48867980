//! One request from the client, judged and answered: passed on as it came, stamped, or
//! refused.
//!
//! - The request as hyper's server parsed it is judged first: a header value that is not
//!   UTF-8, a `CONNECT` (no Docker route has one) or a target Go would refuse is answered
//!   `400` here, and a head over 64 KiB that hyper let through (its limit is on its read
//!   buffer, and one read may pass it) `431`. Its target is routed as Docker routes it ([`target::route`]), on exactly the
//!   path and query that is then sent ([`Conn::send`]).
//! - A create or a commit has its body read whole (at most [`MAX_CREATE_BODY`], else `413`),
//!   rewritten ([`create`]; a body that cannot be rewritten is `400`), and sent with a fresh
//!   `Content-Length`; a container create's named volumes are made first ([`volumes`]). A
//!   create's `2xx` answer is read whole and claimed (when [`create::claimable`]; as a detach
//!   when its stamped labels asked for it) before it reaches the client.
//! - An attach or exec start that asks for an upgrade (`Upgrade: tcp`, as the docker CLI,
//!   the Go SDK, docker-py and compose do) is answered `101` and becomes a raw copy both ways
//!   ([`Conn::splice`]). Without the header (Docker's older hijack, which dockerode sends for
//!   `exec.start()` without `hijack`, as testcontainers-node does) the daemon answers `200`
//!   and streams the output raw until it closes: that answer is streamed back like any other
//!   (hyper's client reads it to the daemon's close). Decision: passed, not refused, so
//!   output-only execs and attaches work; what such a client writes after its request (stdin
//!   through the old hijack) cannot reach the container: hyper's server reads it as the next
//!   request, which is judged like any other or refused as malformed. A client that needs
//!   stdin asks for the upgrade, as every current client does.
//! - A removal (`DELETE` of a container, network or volume) goes on as it came; a prune has
//!   its answer read whole. When the daemon says the object is gone, its claim is released
//!   before the answer reaches the client ([`removal`]).
//! - Every other request goes on with its body streamed as it arrives, and its answer comes
//!   back streamed (`logs -f`, `events`, pulls); an upgrade answered `101` becomes a raw copy
//!   both ways ([`Conn::splice`]).
//! - The proxy's own answers carry a JSON `message` starting `sandguard:`, which Docker
//!   clients print as they print the daemon's errors, and close the connection.

use http_body_util::{Either, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, UPGRADE};
use hyper::http::request::Parts;
use hyper::{Method, Request, Response, StatusCode, Version};

use super::create;
use super::target::{self, Create, Route};
use super::upstream::{as_is, Conn};
use super::{claim, removal, volumes, Body, Hold, Shared, MAX_HEAD};
use crate::proxy::headers::strip_hop_by_hop;
use crate::proxy::stamp::{collect, TooLarge, MAX_CREATE_BODY};

/// A request the proxy answers itself instead of forwarding it.
#[derive(Debug)]
pub(super) struct Refusal {
    pub status: u16,
    pub message: String,
}

impl Refusal {
    pub(super) fn new(status: u16, message: impl Into<String>) -> Refusal {
        Refusal {
            status,
            message: message.into(),
        }
    }

    fn answer(self) -> Response<Body> {
        tracing::info!("docker proxy: refused ({}): {}", self.status, self.message);
        answer(self.status, &self.message)
    }
}

/// An answer of the proxy's own, closing the connection; the JSON body carries `message`.
pub(super) fn answer(status: u16, message: &str) -> Response<Body> {
    let body = format!("{}\n", serde_json::json!({ "message": message }));
    let mut resp = Response::new(Either::Right(Full::from(body)));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    let headers = resp.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    resp
}

/// One request and its answer.
pub(super) async fn handle(req: Request<Incoming>, conn: &Conn) -> Response<Body> {
    let (target, route) = match judge(&req) {
        Ok(judged) => judged,
        Err(refusal) => return refusal.answer(),
    };
    // Docker looks for the header alone; hyper switches only an HTTP/1.1 connection.
    let upgrade = req.headers().contains_key(UPGRADE) && req.version() == Version::HTTP_11;
    let result = match route {
        Route::Create { .. } | Route::Commit => rewrite(req, &target, &route, conn).await,
        Route::Remove { kind, given } => {
            let resp = pass(req, &target, upgrade, conn).await;
            let status = resp.status();
            if status.is_success() || status == StatusCode::NOT_FOUND {
                removal::removed(&conn.shared, kind, &given).await;
            }
            Ok(resp)
        }
        Route::Prune { kind } => Ok(prune(req, &target, kind, conn).await),
        Route::Libpod => Err(Refusal::new(403, target::LIBPOD_REFUSED)),
        _ => Ok(pass(req, &target, upgrade, conn).await),
    };
    result.unwrap_or_else(Refusal::answer)
}

/// The target to send (origin form) and its route; a refusal for what cannot be judged.
fn judge(req: &Request<Incoming>) -> Result<(String, Route), Refusal> {
    let refuse = |why: &str| Err(Refusal::new(400, format!("sandguard: {why}")));
    if req.method() == Method::CONNECT {
        return refuse("the Docker API has no CONNECT");
    }
    if head_size(req) > MAX_HEAD {
        let why = "sandguard: the request head is over 64 KiB";
        return Err(Refusal::new(431, why));
    }
    if req
        .headers()
        .values()
        .any(|v| std::str::from_utf8(v.as_bytes()).is_err())
    {
        return refuse("a request header value is not UTF-8");
    }
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
    match target::route(req.method().as_str(), target) {
        Ok(route) => Ok((target.to_string(), route)),
        Err(why) => refuse(why),
    }
}

/// The size of a request head as sent (its request line and header lines). hyper's own
/// limit ([`MAX_HEAD`] of read buffer) is approximate: a head that arrives in one read may
/// exceed it, and is refused here.
fn head_size(req: &Request<Incoming>) -> usize {
    let line = req.method().as_str().len() + req.uri().to_string().len() + 12;
    let fields = req.headers().iter();
    line + fields
        .map(|(n, v)| n.as_str().len() + v.len() + 4)
        .sum::<usize>()
}

/// A request passed on as it came; an upgrade answered `101` is then copied raw both ways.
async fn pass(
    mut req: Request<Incoming>,
    target: &str,
    upgrade: bool,
    conn: &Conn,
) -> Response<Body> {
    let client = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (parts, body) = req.into_parts();
    let mut resp = match conn.send(parts, target, Either::Left(body), upgrade).await {
        Ok(resp) => resp,
        Err(resp) => return resp,
    };
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        let Some(client) = client else {
            return answer(
                502,
                "sandguard: the Docker daemon switched protocols unasked",
            );
        };
        conn.splice(client, hyper::upgrade::on(&mut resp));
    }
    as_is(resp)
}

/// A request body read whole for rewriting or judging; `413` over [`MAX_CREATE_BODY`].
async fn whole(body: Incoming) -> Result<Bytes, Refusal> {
    collect(body, MAX_CREATE_BODY)
        .await
        .map_err(|TooLarge(over)| match over {
            true => {
                let mb = MAX_CREATE_BODY >> 20;
                let why =
                    format!("sandguard: a create or commit body over {mb} MiB cannot be stamped");
                Refusal::new(413, why)
            }
            false => Refusal::new(400, "sandguard: its body could not be read"),
        })
}

/// Sends a request with a body of the proxy's making (a fresh `Content-Length`).
async fn send_whole(
    mut parts: Parts,
    target: &str,
    body: Vec<u8>,
    conn: &Conn,
) -> Result<Response<Incoming>, Response<Body>> {
    parts.headers.remove(hyper::header::TRANSFER_ENCODING);
    parts.headers.insert(CONTENT_LENGTH, body.len().into());
    if !parts.headers.contains_key(CONTENT_TYPE) && !body.is_empty() {
        let json = HeaderValue::from_static("application/json");
        parts.headers.insert(CONTENT_TYPE, json);
    }
    conn.send(parts, target, Either::Right(Full::from(body)), false)
        .await
}

/// Reads a create or commit body, rewrites it and sends it on; a create's `2xx` answer is
/// claimed before the client sees it.
async fn rewrite(
    req: Request<Incoming>,
    target: &str,
    route: &Route,
    conn: &Conn,
) -> Result<Response<Body>, Refusal> {
    let (parts, body) = req.into_parts();
    let body = whole(body).await?;
    let (new_target, body, hold) = rewritten(target, route, &body, &conn.shared).await?;
    let name = match route {
        Route::Create { kind, .. } => removal::given_name(*kind, target, &body),
        _ => None,
    };
    let target = new_target.as_deref().unwrap_or(target);
    let resp = match send_whole(parts, target, body, conn).await {
        Ok(resp) => resp,
        Err(resp) => return Ok(resp),
    };
    match route {
        Route::Create { kind, .. } if resp.status().is_success() => {
            Ok(claimed(resp, *kind, hold, name, &conn.shared).await)
        }
        _ => Ok(as_is(resp)),
    }
}

/// A create's answer, read whole and claimed when it names what this session made; `name`:
/// what the create named it.
async fn claimed(
    resp: Response<Incoming>,
    kind: Create,
    hold: Hold,
    name: Option<String>,
    shared: &Shared,
) -> Response<Body> {
    let (parts, data) = match read_answer(resp, "create").await {
        Ok(read) => read,
        Err(resp) => return resp,
    };
    if let Some(made) = create::claimable(kind, &data, &shared.session) {
        claim(shared, kind, made, name, hold).await;
    }
    rebuilt(parts, data)
}

/// A prune: passed on, and what its answer names as deleted released (`removal`).
async fn prune(req: Request<Incoming>, target: &str, kind: Create, conn: &Conn) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let resp = match conn.send(parts, target, Either::Left(body), false).await {
        Ok(resp) => resp,
        Err(resp) => return resp,
    };
    if !resp.status().is_success() {
        return as_is(resp);
    }
    let (parts, data) = match read_answer(resp, "prune").await {
        Ok(read) => read,
        Err(resp) => return resp,
    };
    removal::pruned(&conn.shared, kind, &data).await;
    rebuilt(parts, data)
}

/// An answer read whole (at most [`MAX_CREATE_BODY`]), or the proxy's own answer saying it
/// could not be.
async fn read_answer(
    resp: Response<Incoming>,
    what: &str,
) -> Result<(hyper::http::response::Parts, Bytes), Response<Body>> {
    let (parts, body) = resp.into_parts();
    match collect(body, MAX_CREATE_BODY).await {
        Ok(data) => Ok((parts, data)),
        Err(_) => Err(answer(
            502,
            &format!("sandguard: the Docker daemon's {what} answer could not be read"),
        )),
    }
}

/// An answer read whole, sent on with a fresh `Content-Length`.
fn rebuilt(mut parts: hyper::http::response::Parts, data: Bytes) -> Response<Body> {
    strip_hop_by_hop(&mut parts.headers, false);
    parts.headers.insert(CONTENT_LENGTH, data.len().into());
    Response::from_parts(parts, Either::Right(Full::from(data)))
}

/// The new target (commits only) and body of a create or commit, and what the sidecar is to
/// journal for what it creates; a container's named volumes are made first.
async fn rewritten(
    target: &str,
    route: &Route,
    body: &[u8],
    shared: &Shared,
) -> Result<(Option<String>, Vec<u8>, Hold), Refusal> {
    fn cannot(what: &'static str) -> impl Fn(String) -> Refusal {
        move |e| Refusal::new(400, format!("sandguard: cannot {what}: {e}"))
    }
    match route {
        Route::Create { kind, version } => {
            let (stamped, hold) =
                create::stamp(body, &shared.labels).map_err(cannot("stamp this create"))?;
            if *kind == Create::Container {
                let named = create::named_volumes(&stamped)
                    .map_err(cannot("read this container's volumes"))?;
                for v in &named {
                    volumes::precreate(shared, version, v, hold).await?;
                }
            }
            Ok((None, stamped.to_vec(), hold))
        }
        _ => {
            let body = create::scrub_commit(body).map_err(cannot("rewrite this commit"))?;
            Ok((Some(create::commit_target(target)), body, Hold::Claim))
        }
    }
}
