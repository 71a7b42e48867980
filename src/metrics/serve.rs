//! Where the metrics are served (`--metrics ADDR`) and how: `GET /metrics` over HTTP/1 on a
//! loopback TCP port or a Unix socket.
//!
//! Decisions:
//! - **Loopback or a private socket only** (the project's rule for listeners): `ADDR` is
//!   `127.0.0.1:PORT`, `[::1]:PORT` or `localhost:PORT`, or a path (it holds a `/`). Any
//!   other address is a usage error, not a listener opened wider than asked: a scraper on
//!   another machine reaches it through whatever the operator trusts (an SSH tunnel, a
//!   reverse proxy, a node-local Prometheus agent).
//! - **A Unix socket is made 0600** in the directory the operator chose: the scraper runs as
//!   the sweep's user, or the operator opens it with the directory's own permissions. A
//!   socket file left by a sweep that died is replaced when nothing answers on it; one that
//!   answers is another service's, and is an error. The socket is removed when the service
//!   ends.
//! - **Bound before the first pass**, so an address in use fails the command at once (exit 1)
//!   instead of a service that runs without the metrics it was asked for.
//! - **Each scrape looks at the ledger first** ([`Metrics::look`], off the runtime's
//!   threads), so what sidecars reclaimed since the last pass is in it.
//! - Anything but `GET` or `HEAD /metrics` is answered 404 or 405; a connection's errors
//!   end only that connection.

use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};

use super::Metrics;
use crate::ledger::StateDir;
use crate::proxy::accept;

/// Where `--metrics` serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::str::FromStr for Endpoint {
    type Err = String;

    fn from_str(s: &str) -> Result<Endpoint, String> {
        if s.contains('/') {
            return Ok(Endpoint::Unix(PathBuf::from(s)));
        }
        let wider = || {
            format!(
                "--metrics serves on loopback (127.0.0.1:PORT, [::1]:PORT, localhost:PORT) or a unix socket path, not {s}"
            )
        };
        let addr = match s.strip_prefix("localhost:") {
            Some(port) => {
                let port = port.parse::<u16>().map_err(|_| wider())?;
                SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)
            }
            None => s.parse::<SocketAddr>().map_err(|_| wider())?,
        };
        if !addr.ip().is_loopback() {
            return Err(wider());
        }
        Ok(Endpoint::Tcp(addr))
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Tcp(addr) => write!(f, "http://{addr}/metrics"),
            Endpoint::Unix(path) => write!(f, "{} (unix socket)", path.display()),
        }
    }
}

/// A bound endpoint, not serving yet; a Unix socket is removed when it is dropped.
pub(crate) enum Bound {
    Tcp(TcpListener),
    Unix(UnixListener, SocketFile),
}

/// A Unix socket this process made, removed on drop.
pub(crate) struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl Bound {
    /// Where it listens (a TCP port given as 0 is the one the system chose).
    pub(crate) fn endpoint(&self) -> Endpoint {
        match self {
            Bound::Tcp(l) => match l.local_addr() {
                Ok(addr) => Endpoint::Tcp(addr),
                Err(_) => Endpoint::Tcp(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0)),
            },
            Bound::Unix(_, file) => Endpoint::Unix(file.0.clone()),
        }
    }
}

/// Binds `endpoint` (see the module docs). Call it inside the runtime.
pub(crate) async fn bind(endpoint: &Endpoint) -> io::Result<Bound> {
    let at = |e: io::Error, what: &dyn std::fmt::Display| {
        io::Error::new(e.kind(), format!("--metrics {what}: {e}"))
    };
    match endpoint {
        Endpoint::Tcp(addr) => Ok(Bound::Tcp(
            TcpListener::bind(addr).await.map_err(|e| at(e, addr))?,
        )),
        Endpoint::Unix(path) => {
            let shown = path.display();
            clear_stale(path).await.map_err(|e| at(e, &shown))?;
            let listener = UnixListener::bind(path).map_err(|e| at(e, &shown))?;
            let file = SocketFile(path.clone());
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| at(e, &shown))?;
            Ok(Bound::Unix(listener, file))
        }
    }
}

/// Removes a socket file nothing answers on (a sweep that died left it); leaves anything else
/// for `bind` to refuse.
async fn clear_stale(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Ok(());
    }
    match tokio::net::UnixStream::connect(path).await {
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            "another process serves on this socket",
        )),
        Err(_) => std::fs::remove_file(path),
    }
}

/// Serves `metrics` on `bound` until the returned future is dropped; each scrape looks at
/// `state`'s journals first.
pub(crate) async fn serve(bound: Bound, metrics: Arc<Metrics>, state: StateDir) {
    let shared = Arc::new((metrics, state));
    match bound {
        Bound::Tcp(listener) => {
            accept::serve("metrics", listener, |conn| connection(conn, shared.clone())).await;
        }
        Bound::Unix(listener, _file) => {
            accept::serve("metrics", listener, |conn| connection(conn, shared.clone())).await;
        }
    }
}

async fn connection<S>(conn: S, shared: Arc<(Arc<Metrics>, StateDir)>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(answer(req, shared).await) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(conn), service)
        .await;
    if let Err(e) = served {
        tracing::debug!("metrics: connection ended: {e}");
    }
}

async fn answer<B>(
    req: Request<B>,
    shared: Arc<(Arc<Metrics>, StateDir)>,
) -> Response<Full<Bytes>> {
    let plain = |status: StatusCode, text: &'static str| {
        let mut res = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
        *res.status_mut() = status;
        res
    };
    if req.uri().path() != "/metrics" {
        return plain(StatusCode::NOT_FOUND, "sandguard serves GET /metrics\n");
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "GET /metrics\n");
    }
    let accept = req
        .headers()
        .get(hyper::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let looked = shared.clone();
    let scrape = tokio::task::spawn_blocking(move || {
        let (metrics, state) = &*looked;
        metrics.look(state);
        metrics.scrape(&accept)
    })
    .await;
    let Ok(scrape) = scrape else {
        return plain(StatusCode::INTERNAL_SERVER_ERROR, "the scrape failed\n");
    };
    let mut res = Response::new(Full::new(Bytes::from(scrape.body)));
    res.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(scrape.content_type),
    );
    res
}
