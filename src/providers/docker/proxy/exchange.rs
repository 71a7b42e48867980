//! One request and its answer on a client connection, and what may follow them.
//!
//! - The request head is read and parsed strictly ([`http::Message::request`]); a head the
//!   proxy cannot parse is answered `400` (`431` over 64 KiB) with `Connection: close` and the
//!   connection ends: nothing of it, and nothing after it, reaches the daemon.
//! - Its target is routed as Docker routes it ([`target::route`]). A create or a commit has
//!   its body read whole (at most 8 MiB, else `413`), rewritten ([`create`]; a body that cannot
//!   be rewritten is `400`), and sent with a new head; a container create's named volumes are
//!   made first ([`volumes`]). Every other request goes on as it came.
//! - The answer comes back as it arrives. A create's answer is read whole and claimed (when
//!   [`create::claimable`]; as a detach when its stamped labels asked for it) before it
//!   reaches the client.
//! - A raw bidirectional copy follows only a `101 Switching Protocols`, or an answer without
//!   a length to a request that asked for an upgrade or is an attach or exec start (Docker's
//!   older hijack). Any other answer delimited by the end of the connection is copied to the
//!   client and the connection closes: client bytes after it are never forwarded, since the
//!   proxy could no longer tell a create among them.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use super::create;
use super::target::{self, Create, Route};
use super::{body, claim, http, volumes, After, Hold, Shared, Side};
use http::{Framing, Head, Message};

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
}

/// How long a refused client's unread request is drained, so it reads the answer instead of
/// failing to write the rest.
const DRAIN: Duration = Duration::from_secs(2);

/// One request and its answer.
pub(super) async fn exchange<CR, CW, UR, UW>(
    c: &mut Side<CR, CW>,
    u: &mut Side<UR, UW>,
    shared: &Shared,
) -> io::Result<After>
where
    CR: AsyncRead + Unpin,
    CW: AsyncWrite + Unpin,
    UR: AsyncRead + Unpin,
    UW: AsyncWrite + Unpin,
{
    let (req, framing, route) = match read_request(&mut c.r).await? {
        Ok(Some(parsed)) => parsed,
        Ok(None) => return Ok(After::Close),
        Err(refusal) => return refuse(c, refusal).await,
    };
    let (framing, hold) = match &route {
        Route::Create { .. } | Route::Commit => {
            match rewrite(c, u, &req, &route, framing, shared).await? {
                Ok(hold) => (Framing::None, hold),
                Err(refusal) => return refuse(c, refusal).await,
            }
        }
        _ => {
            u.w.write_all(&req.head).await?;
            (framing, Hold::Claim)
        }
    };
    u.w.flush().await?;
    // The request body goes up while the answer comes down (a daemon may answer early, and
    // `Expect: 100-continue` needs it). A client that half-closes after its request still
    // gets the answer; one that left for good is noticed when the next write to it fails.
    let mut sent = false;
    let body = async {
        body::copy_body(&mut c.r, &mut u.w, framing, None).await?;
        sent = true;
        std::future::pending::<io::Result<After>>().await
    };
    let answer = respond(&mut u.r, &mut c.w, &req.message, (&route, hold), shared);
    let after = tokio::select! {
        after = answer => after?,
        failed = body => return failed,
    };
    Ok(match after {
        After::KeepAlive if !sent || req.message.wants_close() => After::Close,
        other => other,
    })
}

/// A parsed request head, as received.
struct Request {
    head: Vec<u8>,
    message: Message,
}

impl std::ops::Deref for Request {
    type Target = Message;
    fn deref(&self) -> &Message {
        &self.message
    }
}

/// Reads and judges one request head; `Ok(None)` at a clean end of the connection.
async fn read_request<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
) -> io::Result<Result<Option<(Request, Framing, Route)>, Refusal>> {
    let refuse = |status, why: &str| Ok(Err(Refusal::new(status, format!("sandguard: {why}"))));
    let head = match http::read_head(r).await? {
        None => return Ok(Ok(None)),
        Some(Head::Complete(head)) => head,
        Some(Head::TooLarge(_)) => return refuse(431, "the request head is over 64 KiB"),
        Some(Head::Partial(_)) => return refuse(400, "the request head ended early"),
    };
    let message = match Message::request(&head) {
        Ok(m) => m,
        Err(why) => return refuse(400, why),
    };
    let Some(framing) = message.framing(false) else {
        return refuse(
            400,
            "its Content-Length or Transfer-Encoding does not frame a body",
        );
    };
    let route = match target::route(message.method(), message.target()) {
        Ok(route) => route,
        Err(why) => return refuse(400, why),
    };
    Ok(Ok(Some((Request { head, message }, framing, route))))
}

/// Reads a create or commit body, rewrites it and sends the request on; what the sidecar is
/// to journal for what it creates, or a refusal (nothing of this request went upstream).
async fn rewrite<CR, CW, UR, UW>(
    c: &mut Side<CR, CW>,
    u: &mut Side<UR, UW>,
    req: &Message,
    route: &Route,
    framing: Framing,
    shared: &Shared,
) -> io::Result<Result<Hold, Refusal>>
where
    CR: AsyncRead + Unpin,
    CW: AsyncWrite + Unpin,
    UW: AsyncWrite + Unpin,
{
    let too_large = || {
        let mb = http::MAX_CREATE_BODY >> 20;
        Refusal::new(
            413,
            format!("sandguard: a create or commit body over {mb} MiB cannot be stamped"),
        )
    };
    if matches!(framing, Framing::Length(n) if n > http::MAX_CREATE_BODY) {
        return Ok(Err(too_large()));
    }
    if req.expects_continue() {
        c.w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
        c.w.flush().await?;
    }
    let body = match body::read_body(&mut c.r, framing, http::MAX_CREATE_BODY).await {
        Ok(b) => b,
        Err(e) if body::is_too_large(&e) => return Ok(Err(too_large())),
        Err(e) => return Err(e),
    };
    let (target, body, hold) = match rewritten(req, route, &body, shared).await {
        Ok(rewritten) => rewritten,
        Err(refusal) => return Ok(Err(refusal)),
    };
    u.w.write_all(&req.rewritten(target.as_deref(), body.len()))
        .await?;
    u.w.write_all(&body).await?;
    Ok(Ok(hold))
}

/// The new target (commits only) and body of a create or commit, and what the sidecar is to
/// journal for what it creates; a container's named volumes are made first.
async fn rewritten(
    req: &Message,
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
            Ok((Some(create::commit_target(req.target())), body, Hold::Claim))
        }
    }
}

/// Answers a refused request and ends the connection, after draining (for a short while)
/// what the client still sends, so it sees the answer rather than a reset.
async fn refuse<CR, CW>(c: &mut Side<CR, CW>, refusal: Refusal) -> io::Result<After>
where
    CR: AsyncRead + Unpin,
    CW: AsyncWrite + Unpin,
{
    tracing::info!(
        "docker proxy: refused ({}): {}",
        refusal.status,
        refusal.message
    );
    c.w.write_all(&http::answer(refusal.status, &refusal.message))
        .await?;
    c.w.shutdown().await?;
    let mut limit = (&mut c.r).take(64 << 20);
    let _ = tokio::time::timeout(DRAIN, tokio::io::copy(&mut limit, &mut tokio::io::sink())).await;
    Ok(After::Close)
}

/// Forwards the daemon's answer (interim `1xx` answers included).
async fn respond<UR, CW>(
    ur: &mut BufReader<UR>,
    cw: &mut CW,
    req: &Message,
    (route, hold): (&Route, Hold),
    shared: &Shared,
) -> io::Result<After>
where
    UR: AsyncRead + Unpin,
    CW: AsyncWrite + Unpin,
{
    loop {
        let head = match http::read_head(ur).await? {
            None => return Ok(After::Close),
            Some(Head::Complete(bytes)) => bytes,
            Some(Head::Partial(bytes) | Head::TooLarge(bytes)) => {
                return to_the_end(ur, cw, &bytes).await;
            }
        };
        let Some((resp, framing)) = Message::response(&head).and_then(|m| {
            let f = m.framing(true)?;
            Some((m, f))
        }) else {
            return to_the_end(ur, cw, &head).await;
        };
        let status = resp.status();
        if status == 101 {
            cw.write_all(&head).await?;
            return Ok(After::Raw);
        }
        if (100..200).contains(&status) {
            cw.write_all(&head).await?;
            cw.flush().await?;
            continue;
        }
        let framing = match (req.method(), status) {
            ("HEAD", _) | (_, 204 | 304) => Framing::None,
            _ => framing,
        };
        if framing == Framing::UntilClose {
            if *route == Route::Hijack || req.wants_upgrade() {
                cw.write_all(&head).await?;
                return Ok(After::Raw);
            }
            return to_the_end(ur, cw, &head).await;
        }
        deliver(ur, cw, &head, framing, status, (route, hold), shared).await?;
        cw.flush().await?;
        return Ok(if resp.wants_close() {
            After::Close
        } else {
            After::KeepAlive
        });
    }
}

/// Forwards a final answer; a create's is read whole and claimed before the client sees it.
async fn deliver<UR, CW>(
    ur: &mut BufReader<UR>,
    cw: &mut CW,
    head: &[u8],
    framing: Framing,
    status: u16,
    (route, hold): (&Route, Hold),
    shared: &Shared,
) -> io::Result<()>
where
    UR: AsyncRead + Unpin,
    CW: AsyncWrite + Unpin,
{
    match route {
        Route::Create { kind, .. } if (200..300).contains(&status) => {
            let (raw, data) = body::read_buffered(ur, framing, http::MAX_CREATE_BODY).await?;
            if let Some(id) = create::claimable(*kind, &data, &shared.session) {
                claim(shared, *kind, &id, hold).await;
            }
            cw.write_all(head).await?;
            cw.write_all(&raw).await
        }
        _ => {
            cw.write_all(head).await?;
            body::copy_body(ur, cw, framing, None).await
        }
    }
}

/// Copies `first` and then everything the daemon sends until it closes, then ends the
/// connection: an answer the proxy cannot frame ends it.
async fn to_the_end<UR, CW>(ur: &mut BufReader<UR>, cw: &mut CW, first: &[u8]) -> io::Result<After>
where
    UR: AsyncRead + Unpin,
    CW: AsyncWrite + Unpin,
{
    cw.write_all(first).await?;
    body::copy_body(ur, cw, Framing::UntilClose, None).await?;
    cw.flush().await?;
    Ok(After::Close)
}
