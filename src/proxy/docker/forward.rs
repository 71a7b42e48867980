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
//!   its answer read whole. When the daemon confirms the object gone (`2xx` on a path mux
//!   routes as sent, or its `404` for the claimed id: `crate::proxy::release`), its claim is
//!   released before the answer reaches the client ([`removal`]).
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

use super::target::{self, Create, Route};
use super::upstream::{as_is, Conn};
use super::{claimed_target, create, removal, volumes, Body, MAX_HEAD};
use crate::protocol::Target;
use crate::proxy::create::{self as pipeline, Creates, Stamped, Unclaimed};
use crate::proxy::refusal::Refusal;
use crate::proxy::stamp::{collect, MAX_CREATE_BODY};

/// A refusal, answered in Docker's shape and logged.
fn refused(refusal: Refusal) -> Response<Body> {
    let status = refusal.status();
    tracing::info!("docker proxy: refused ({status}): {refusal}");
    answer(status, &format!("sandguard: {refusal}"))
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
        Err(refusal) => return refused(refusal),
    };
    // Docker looks for the header alone; hyper switches only an HTTP/1.1 connection.
    let upgrade = req.headers().contains_key(UPGRADE) && req.version() == Version::HTTP_11;
    let result = match route {
        Route::Create { kind, version } => {
            let (parts, body) = req.into_parts();
            let creating = Creating {
                conn,
                target: &target,
                kind,
                version: &version,
            };
            pipeline::create(&creating, parts, body).await
        }
        Route::Commit => commit(req, &target, conn).await,
        Route::Remove {
            kind,
            given,
            routed,
        } => {
            let resp = pass(req, &target, upgrade, conn).await;
            Ok(removal::removed(&conn.shared, resp, kind, &given, routed).await)
        }
        Route::Prune { kind } => Ok(prune(req, &target, kind, conn).await),
        Route::Libpod => Err(Refusal::said(403, target::LIBPOD_REFUSED)),
        _ => Ok(pass(req, &target, upgrade, conn).await),
    };
    result.unwrap_or_else(refused)
}

/// The target to send (origin form) and its route; a refusal for what cannot be judged.
fn judge(req: &Request<Incoming>) -> Result<(String, Route), Refusal> {
    let refuse = |why: &str| Err(Refusal::said(400, format!("sandguard: {why}")));
    if req.method() == Method::CONNECT {
        return refuse("the Docker API has no CONNECT");
    }
    if head_size(req) > MAX_HEAD {
        let why = "sandguard: the request head is over 64 KiB";
        return Err(Refusal::said(431, why));
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

/// A container, network or volume create, through the pipeline both proxies share
/// ([`pipeline`]): Docker's part of it.
struct Creating<'a> {
    conn: &'a Conn,
    /// The request target, as judged and sent.
    target: &'a str,
    kind: Create,
    /// The API version prefix as routed, for the proxy's own volume creates.
    version: &'a str,
}

impl Creates for Creating<'_> {
    /// The name the create gave the object, by which the program may remove it (`removal`).
    type Made = Option<String>;

    /// The session's labels merged into `Labels` (a container's with its lifetime, a
    /// network's or a volume's never: `crate::proxy::stamp::Labels`); a container's named
    /// volumes are made first, labelled and claimed (`volumes`).
    async fn stamp(&self, body: &[u8]) -> Result<Stamped<Option<String>>, Refusal> {
        let shared = &self.conn.shared;
        let (stamped, hold) = create::stamp(body, &shared.labels.now(self.counted()))?;
        if self.kind == Create::Container {
            for v in &create::named_volumes(&stamped)? {
                volumes::precreate(shared, self.version, v, hold).await?;
            }
        }
        let body = stamped.to_vec();
        let made = removal::given_name(self.kind, self.target, &body);
        Ok(Stamped {
            body,
            hold,
            size: None,
            made,
        })
    }

    async fn forward(
        &self,
        parts: Parts,
        body: Vec<u8>,
    ) -> Result<Response<Incoming>, Response<Body>> {
        send_whole(parts, self.target, body, self.conn).await
    }

    fn as_is(&self, answer: Response<Incoming>) -> Response<Body> {
        as_is(answer)
    }

    /// Claimed only when the answer names what this session made (`create::claimable`).
    fn created(&self, name: Option<String>, answer: &[u8]) -> Result<Target, Unclaimed> {
        let shared = &self.conn.shared;
        let made = create::claimable(self.kind, answer, &shared.session);
        let (id, created) = made.ok_or(Unclaimed::NotOurs)?;
        let target = claimed_target(self.kind, &id, created.as_deref())?;
        shared.claimed.made(self.kind, &id, name);
        Ok(target)
    }

    /// A container is a sandbox; a network or a volume is not.
    fn counted(&self) -> Option<&str> {
        (self.kind == Create::Container).then_some("docker")
    }

    /// A container's image; nothing without limits (nothing is refused, so the body is not
    /// read again).
    fn named(&self, body: &[u8]) -> std::collections::BTreeMap<String, String> {
        if !self.conn.shared.labels.budget.any() {
            return Default::default();
        }
        crate::proxy::named::named(body, crate::proxy::named::DOCKER)
    }

    fn claims(&self) -> &tokio::sync::mpsc::UnboundedSender<super::Ask> {
        &self.conn.shared.claims
    }

    fn unreadable(&self) -> Response<Body> {
        answer(
            502,
            "sandguard: the Docker daemon's create answer could not be read",
        )
    }

    /// The daemon's answer goes on all the same: the object carries the session's labels.
    fn unclaimed(&self, why: Unclaimed) -> Option<Response<Body>> {
        match why {
            Unclaimed::NotOurs => {}
            Unclaimed::BadId { id, why } => {
                tracing::warn!("docker proxy: {id} not claimed ({why}); its labels still mark it");
            }
            Unclaimed::NotAcknowledged(target, e) => tracing::debug!(
                "docker proxy: {} not claimed ({e}); its labels still mark it",
                target.id
            ),
        }
        None
    }
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

/// A commit: its body read whole ([`pipeline::read`]) and kept free of sandguard's labels,
/// one more `changes` instruction blanking them in the image; nothing to claim.
async fn commit(
    req: Request<Incoming>,
    target: &str,
    conn: &Conn,
) -> Result<Response<Body>, Refusal> {
    let (parts, body) = req.into_parts();
    let body = pipeline::read(body).await?;
    let body = create::scrub_commit(&body)
        .map_err(|e| Refusal::said(400, format!("sandguard: cannot rewrite this commit: {e}")))?;
    let target = create::commit_target(target);
    Ok(match send_whole(parts, &target, body, conn).await {
        Ok(resp) => as_is(resp),
        Err(resp) => resp,
    })
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
    pipeline::rebuilt(parts, data)
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
