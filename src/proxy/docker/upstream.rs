//! One client connection's side toward the daemon: its own daemon connection (hyper's HTTP/1
//! client), the requests sent on it, and the raw copy after an upgrade.
//!
//! Decisions:
//!
//! - One daemon connection per client connection, opened at its first request (a client that
//!   sends nothing the proxy can read opens none) and kept alive as long as the daemon keeps
//!   it: a daemon that closed it (an answer the end of the connection delimits, a
//!   `Connection: close`) gets a fresh one at the client's next request, which is judged like
//!   every other.
//! - What is sent is what was judged: the request goes out in origin form, exactly the
//!   path and query [`super::target::route`] read, as HTTP/1.1 (with `Host: docker` when the
//!   client sent none, as Go's server demands). Its body is framed anew by hyper from what
//!   hyper's server decoded, so no framing the two ends could read differently is passed on.
//!   Header names keep the client's spelling.
//! - The headers of one hop stay on it (RFC 9110 §7.6.1: `Connection` and what it names,
//!   `Keep-Alive`, `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`, `Proxy-*`), and so does
//!   `Expect` (hyper's server answers `100 Continue` itself when the body is read). An upgrade
//!   keeps `Upgrade` and `Connection: Upgrade` both ways.
//! - After a `101 Switching Protocols` both upgraded streams are copied raw both ways, each
//!   direction shut down for writing when its source ends (`docker run -i` closing stdin
//!   still gets the container's output), in a task of this connection.
//! - Every task here (the daemon connection's driver, a copy) belongs to the client
//!   connection: [`Conn::finish`] waits for them once the client is served, and dropping the
//!   connection's future (the proxy ending) aborts them.

use crate::providers::retry::error_chain;
use crate::proxy::headers::strip_hop_by_hop;
use std::sync::{Arc, Mutex};

use crate::proxy::tasks::Tasks;
use http_body_util::Either;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderValue, EXPECT, HOST};
use hyper::http::request::Parts;
use hyper::upgrade::OnUpgrade;
use hyper::{Request, Response, Uri, Version};
use hyper_util::rt::TokioIo;

use super::forward::answer;
use super::{Body, Shared};

/// A client connection's state: its daemon connection and its tasks.
pub(super) struct Conn {
    pub shared: Arc<Shared>,
    /// The daemon connection, between requests (taken while one is sent).
    daemon: Mutex<Option<SendRequest<Body>>>,
    tasks: Tasks,
}

impl Conn {
    pub(super) fn new(shared: Arc<Shared>) -> Conn {
        Conn {
            shared,
            daemon: Mutex::new(None),
            tasks: Tasks::default(),
        }
    }

    /// Closes the daemon connection (once idle) and waits for this connection's tasks.
    pub(super) async fn finish(&self) {
        drop(lock(&self.daemon).take());
        self.tasks.finish().await;
    }

    /// Sends a judged request to the daemon as `target` (origin form); `upgrade` keeps its
    /// `Upgrade`. `Err` is the proxy's own `502`.
    pub(super) async fn send(
        &self,
        mut parts: Parts,
        target: &str,
        body: Body,
        upgrade: bool,
    ) -> Result<Response<Incoming>, Response<Body>> {
        parts.uri = target.parse::<Uri>().map_err(|e| {
            answer(
                400,
                &format!("sandguard: its request target cannot be sent: {e}"),
            )
        })?;
        parts.version = Version::HTTP_11;
        strip_hop_by_hop(&mut parts.headers, upgrade);
        parts.headers.remove(EXPECT);
        if !parts.headers.contains_key(HOST) {
            parts
                .headers
                .insert(HOST, HeaderValue::from_static("docker"));
        }
        let unreachable = |e: &dyn std::fmt::Display| {
            answer(
                502,
                &format!("sandguard: cannot reach the Docker daemon: {e}"),
            )
        };
        let mut daemon = self.daemon().await.map_err(|e| unreachable(&e))?;
        let sent = daemon.send_request(Request::from_parts(parts, body)).await;
        *lock(&self.daemon) = Some(daemon);
        sent.map_err(|e| unreachable(&error_chain(&e)))
    }

    /// The daemon connection, ready for a request: the kept one, or a fresh one.
    async fn daemon(&self) -> std::io::Result<SendRequest<Body>> {
        let kept = lock(&self.daemon).take();
        if let Some(mut daemon) = kept {
            if daemon.ready().await.is_ok() {
                return Ok(daemon);
            }
        }
        let io = TokioIo::new(self.shared.upstream.connect().await?);
        let (daemon, driver) = hyper::client::conn::http1::Builder::new()
            .preserve_header_case(true)
            .title_case_headers(true)
            .handshake(io)
            .await
            .map_err(std::io::Error::other)?;
        self.tasks.spawn(async move {
            if let Err(e) = driver.with_upgrades().await {
                tracing::debug!("docker proxy: daemon connection ended: {e}");
            }
        });
        Ok(daemon)
    }

    /// Copies both upgraded streams raw, once hyper hands them over.
    pub(super) fn splice(&self, client: OnUpgrade, daemon: OnUpgrade) {
        self.tasks.splice("docker proxy", client, daemon);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing panics while holding these locks; a poisoned one still holds good data.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The daemon's answer for the client: as it came, without its hop's headers (a `101`
/// keeps its upgrade), the body streamed as it arrives.
pub(super) fn as_is(resp: Response<Incoming>) -> Response<Body> {
    let upgrade = resp.status() == hyper::StatusCode::SWITCHING_PROTOCOLS;
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers, upgrade);
    Response::from_parts(parts, Either::Left(body))
}
