//! The Docker API proxy: any Docker client, unchanged, creates only labelled, claimed objects.
//!
//! The sidecar listens on a private unix socket (mode 0600 in a 0700 directory) and the
//! guarded program gets `DOCKER_HOST` pointing at it. Each client connection gets its own
//! connection to the real daemon, and the proxy speaks just enough HTTP/1.1 to find message
//! boundaries ([`http`], [`body`]): heads are parsed, bodies are framed by `Content-Length`, chunked
//! encoding or the end of the connection, and copied as they arrive, byte for byte.
//!
//! - `POST [/vX.Y]/{containers,networks,volumes}/create`: the JSON body gets the session's
//!   labels in its top-level `Labels` (a new `Content-Length`), and the id in a 2xx answer
//!   (`Id`; volumes: `Name`) is sent to the sidecar loop as a claim, which journals it like a
//!   control-line claim and acknowledges it before the answer reaches the client.
//! - An upgrade (attach, exec start: `101 Switching Protocols`, or the older `200` with no
//!   length) and any answer delimited by the end of the connection switch to a raw
//!   bidirectional copy, each direction half-closed when its source ends.
//! - A head that is not HTTP/1.x goes to the daemon as it is, followed by a raw copy: the
//!   daemon answers it. Any I/O error ends that one connection only.
//!
//! Claims name networks as `network/ID` and volumes as `volume/NAME` (see
//! `Provider::parse_claim` of the Docker driver), so a reclaim removes the right kind of object.

pub mod body;
pub mod http;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use crate::protocol::Target;
use http::{Create, Framing, Head, Message};

/// A claim from the proxy; the sidecar answers on `ack` once it is journaled.
#[derive(Debug)]
pub struct Claim {
    pub target: Target,
    pub ack: oneshot::Sender<()>,
}

/// How long a create answer waits for the sidecar to journal its claim.
const ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the real daemon listens.
#[derive(Debug, Clone)]
pub enum Upstream {
    Unix(PathBuf),
    Tcp(String),
}

impl Upstream {
    /// From a Docker host address: `unix:///path`, `tcp://host:port` or `http://host:port`.
    pub fn parse(host: &str) -> Result<Upstream, String> {
        if let Some(path) = host.strip_prefix("unix://") {
            return Ok(Upstream::Unix(PathBuf::from(path)));
        }
        for scheme in ["tcp://", "http://"] {
            if let Some(addr) = host.strip_prefix(scheme) {
                return Ok(Upstream::Tcp(addr.trim_end_matches('/').to_string()));
            }
        }
        Err(format!(
            "the Docker proxy cannot forward to {host:?}: use unix:///path or tcp://host:port"
        ))
    }

    async fn connect(&self) -> io::Result<Box<dyn Io>> {
        Ok(match self {
            Upstream::Unix(p) => Box::new(UnixStream::connect(p).await?),
            Upstream::Tcp(a) => {
                let s = tokio::net::TcpStream::connect(a).await?;
                s.set_nodelay(true)?;
                Box::new(s)
            }
        })
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

struct Shared {
    upstream: Upstream,
    labels: BTreeMap<String, String>,
    claims: mpsc::UnboundedSender<Claim>,
}

/// A bound proxy, not yet serving.
pub struct Proxy {
    listener: UnixListener,
    shared: Arc<Shared>,
}

/// The proxy's private directory; dropping it removes the socket and the directory.
#[derive(Debug)]
pub struct SocketDir {
    dir: PathBuf,
    socket: PathBuf,
}

impl SocketDir {
    pub fn socket(&self) -> &Path {
        &self.socket
    }
}

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The longest socket path sun_path holds comfortably (108 bytes on Linux, 104 on macOS).
const MAX_SOCKET_PATH: usize = 100;

impl Proxy {
    /// Creates `dir` (mode 0700; it must not exist) and listens on `dir/docker.sock` (0600).
    /// A path too long for a unix socket falls back to a fresh directory in the temp dir.
    pub fn bind(
        dir: &Path,
        fallback: &str,
        upstream: Upstream,
        labels: BTreeMap<String, String>,
        claims: mpsc::UnboundedSender<Claim>,
    ) -> io::Result<(Proxy, SocketDir)> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let mut dir = dir.to_path_buf();
        if dir.join("docker.sock").as_os_str().len() > MAX_SOCKET_PATH {
            dir = std::env::temp_dir().join(fallback);
        }
        let at = |e: io::Error, p: &Path| io::Error::new(e.kind(), format!("{}: {e}", p.display()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| at(e, &dir))?;
        let socket = dir.join("docker.sock");
        let guard = SocketDir {
            dir,
            socket: socket.clone(),
        };
        let listener = UnixListener::bind(&socket).map_err(|e| at(e, &socket))?;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| at(e, &socket))?;
        let shared = Arc::new(Shared {
            upstream,
            labels,
            claims,
        });
        Ok((Proxy { listener, shared }, guard))
    }

    /// Serves until dropped; dropping the future ends every connection with it.
    pub async fn run(self) {
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok((client, _)) => {
                        connections.spawn(serve(client, self.shared.clone()));
                    }
                    Err(e) => {
                        // Out of descriptors, most likely: let connections finish first.
                        tracing::warn!("docker proxy: accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
    }
}

/// One client connection, end to end; errors end only this connection.
async fn serve(client: UnixStream, shared: Arc<Shared>) {
    if let Err(e) = relay(client, &shared).await {
        tracing::debug!("docker proxy: connection ended: {e}");
    }
}

async fn relay(mut client: UnixStream, shared: &Shared) -> io::Result<()> {
    let upstream = match shared.upstream.connect().await {
        Ok(u) => u,
        Err(e) => {
            let text = format!("sandguard: cannot reach the Docker daemon: {e}\n");
            let answer = format!(
                "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            );
            return client.write_all(answer.as_bytes()).await;
        }
    };
    let (cr, cw) = client.into_split();
    let (ur, uw) = tokio::io::split(upstream);
    let mut c = Side {
        r: BufReader::new(cr),
        w: cw,
    };
    let mut u = Side {
        r: BufReader::new(ur),
        w: uw,
    };
    loop {
        match exchange(&mut c, &mut u, shared).await? {
            After::KeepAlive => {}
            After::Close => return Ok(()),
            After::Raw => return splice(c, u).await,
        }
    }
}

struct Side<R, W> {
    r: BufReader<R>,
    w: W,
}

/// What follows one request and its answer.
enum After {
    KeepAlive,
    Close,
    Raw,
}

/// One request and its answer.
async fn exchange<CR, CW, UR, UW>(
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
    let head = match http::read_head(&mut c.r).await? {
        None => return Ok(After::Close),
        Some(Head::Partial(bytes)) => {
            u.w.write_all(&bytes).await?;
            return Ok(After::Raw);
        }
        Some(Head::Complete(bytes)) => bytes,
    };
    let Some((req, framing)) = Message::parse(&head, false).and_then(|m| {
        let f = m.framing(false)?;
        Some((m, f))
    }) else {
        // Not HTTP we understand: the daemon answers it, and the connection goes raw.
        u.w.write_all(&head).await?;
        return Ok(After::Raw);
    };
    let create = req.creates();
    let framing = match create {
        Some(_) if fits(framing) => {
            let body = body::read_body(&mut c.r, framing, http::MAX_CREATE_BODY).await?;
            let body = http::stamp(&body, &shared.labels).unwrap_or(body);
            u.w.write_all(&req.with_length(body.len())).await?;
            u.w.write_all(&body).await?;
            Framing::None
        }
        _ => {
            u.w.write_all(&head).await?;
            framing
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
    let answer = respond(&mut u.r, &mut c.w, &req, create, shared);
    let after = tokio::select! {
        after = answer => after?,
        failed = body => return failed,
    };
    Ok(match after {
        After::KeepAlive if !sent || req.wants_close() => After::Close,
        other => other,
    })
}

fn fits(framing: Framing) -> bool {
    match framing {
        Framing::Length(n) => n <= http::MAX_CREATE_BODY,
        Framing::None | Framing::Chunked => true,
        Framing::UntilClose => false,
    }
}

/// Forwards the daemon's answer (interim `1xx` answers included).
async fn respond<UR, CW>(
    ur: &mut BufReader<UR>,
    cw: &mut CW,
    req: &Message,
    create: Option<Create>,
    shared: &Shared,
) -> io::Result<After>
where
    UR: AsyncRead + Unpin,
    CW: AsyncWrite + Unpin,
{
    loop {
        let head = match http::read_head(ur).await? {
            None => return Ok(After::Close),
            Some(Head::Partial(bytes)) => {
                cw.write_all(&bytes).await?;
                return Ok(After::Raw);
            }
            Some(Head::Complete(bytes)) => bytes,
        };
        let Some((resp, framing)) = Message::parse(&head, true).and_then(|m| {
            let f = m.framing(true)?;
            Some((m, f))
        }) else {
            cw.write_all(&head).await?;
            return Ok(After::Raw);
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
        let framing = match (req.first.0.as_str(), status) {
            ("HEAD", _) | (_, 204) | (_, 304) => Framing::None,
            _ => framing,
        };
        if framing == Framing::UntilClose {
            // The end of the body is the end of the connection; an old-style hijack (200 and
            // a raw stream) is the same thing, with the client still writing.
            cw.write_all(&head).await?;
            return Ok(After::Raw);
        }
        match create {
            Some(kind) if (200..300).contains(&status) => {
                let (raw, data) = body::read_buffered(ur, framing, http::MAX_CREATE_BODY).await?;
                if let Some(id) = http::created_id(kind, &data) {
                    claim(shared, kind, &id).await;
                }
                cw.write_all(&head).await?;
                cw.write_all(&raw).await?;
            }
            _ => {
                cw.write_all(&head).await?;
                body::copy_body(ur, cw, framing, None).await?;
            }
        }
        cw.flush().await?;
        return Ok(if resp.wants_close() {
            After::Close
        } else {
            After::KeepAlive
        });
    }
}

/// Tells the sidecar about a created object and waits until it is journaled.
async fn claim(shared: &Shared, kind: Create, id: &str) {
    let id = match kind {
        Create::Container => id.to_string(),
        Create::Network => format!("network/{id}"),
        Create::Volume => format!("volume/{id}"),
    };
    let target = match Target::new("docker", &id) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!("docker proxy: not claimed ({e}); its labels still mark it");
            return;
        }
    };
    let (ack, acked) = oneshot::channel();
    if shared.claims.send(Claim { target, ack }).is_ok() {
        let _ = tokio::time::timeout(ACK_TIMEOUT, acked).await;
    }
}

/// Raw bidirectional copy until both directions end; each is half-closed when its source
/// ends, so `docker run -i` sees the container's output after its stdin closed.
async fn splice<CR, CW, UR, UW>(c: Side<CR, CW>, u: Side<UR, UW>) -> io::Result<()>
where
    CR: AsyncRead + Unpin,
    CW: AsyncWrite + Unpin,
    UR: AsyncRead + Unpin,
    UW: AsyncWrite + Unpin,
{
    let (mut cr, mut cw, mut ur, mut uw) = (c.r, c.w, u.r, u.w);
    let up = async {
        tokio::io::copy_buf(&mut cr, &mut uw).await?;
        uw.shutdown().await
    };
    let down = async {
        tokio::io::copy_buf(&mut ur, &mut cw).await?;
        cw.shutdown().await
    };
    tokio::try_join!(up, down).map(|_| ())
}

#[cfg(test)]
mod tests;
