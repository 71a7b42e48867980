//! The Docker API proxy: any Docker client, unchanged, creates only labelled, claimed objects.
//!
//! The sidecar listens on a private unix socket (mode 0600 in a 0700 directory) and the
//! guarded program gets `DOCKER_HOST` pointing at it. Each client connection gets its own
//! connection to the real daemon, and the proxy speaks just enough HTTP/1.1 to find message
//! boundaries ([`http`], [`body`]): heads are parsed, bodies are framed by `Content-Length`,
//! chunked encoding or the end of the connection, and copied as they arrive, byte for byte.
//! `exchange` handles one request and its answer. Connections are accepted by the loop both
//! proxies share (`providers::proxy_accept`), creates are stamped by the step both share
//! (`providers::proxy_stamp`), and claims go through `providers::proxy_claim`.
//!
//! Why the client's requests are relayed here and not through hyper's server (which the cloud
//! proxy uses, and which this proxy uses for its own volume creates, [`volumes`]): each of these
//! is a documented behaviour (README, "the Docker proxy") that hyper's HTTP/1 server cannot
//! keep (checked against hyper 1.12's HTTP/1 code for issue #24, point 6):
//!
//! - The older hijack: an attach or exec start without `Upgrade` is answered `200` and then
//!   both ways are raw. hyper's server and client upgrade only on `101` (or a `CONNECT`), so
//!   the client's stdin after the request would be parsed as a next request, and the answer
//!   would be re-framed as chunked.
//! - Refusals that say why: a head hyper cannot parse gets hyper's own `400`/`431` with an
//!   empty body (no `sandguard:` message), and a head cut short gets no answer at all; hyper
//!   has no hook for either. Header values that are not UTF-8 (obs-text) reach the service.
//! - Byte for byte: hyper decodes bodies and re-frames them (chunk extensions and trailers
//!   dropped, an answer the end of the connection delimits re-sent chunked, header names
//!   lower-cased unless told otherwise).
//!
//! So the relay stays: what it parses is parsed strictly (a head it cannot read is refused,
//! never passed on), and its request heads are fuzzed (`fuzz/fuzz_targets/docker_proxy_head.rs`;
//! the chunked-body reader is not yet).
//!
//! The trust rules it keeps (issue #10):
//!
//! - Requests are routed as Docker routes them ([`target`]): percent-encoded paths (`%63reate`,
//!   `containers%2Fcreate`), absolute-form targets and dot segments cannot hide a create.
//! - `POST [/vX.Y]/{containers,networks,volumes}/create`: the body's labels, under every key Go
//!   reads as `Labels`, are merged into one `Labels` with the session's values winning
//!   ([`create`], [`json`]); a container create's named volumes (`-v NAME:/path`, `--mount
//!   type=volume`) are made first, labelled (`volumes`). The id in a 2xx answer (`Id`;
//!   volumes: `Name`) is sent to the sidecar loop as a claim, which journals it like a
//!   control-line claim and acknowledges it before the answer reaches the client.
//! - A create whose labels, as stamped, carry `sandguard.detached=true` is handed to the
//!   sidecar as a detach ([`Hold::Detach`]), never a claim: it outlives its owner. The named
//!   volumes made for such a container are detached with it (they carry the label too), so
//!   the reclaim does not try to take a volume from a container it keeps.
//! - A claim names only what this session brought into being: an answer that carries labels
//!   (a volume's) is claimed only when they carry this session's id, so a volume that existed
//!   before (Docker's volume create is idempotent) is never claimed, and never removed.
//! - `POST [/vX.Y]/commit`: sandguard's labels are kept out of the image (removed from the
//!   body, and blanked by one more `changes` instruction), so no container started from it
//!   looks owned.
//! - A create the proxy cannot stamp is refused, never passed on unstamped: a head it cannot
//!   parse (400, or 431 over 64 KiB; the connection then closes), a body over 8 MiB (413) or
//!   one it cannot read as Docker would (400).
//! - A raw bidirectional copy happens only after an upgrade (`101 Switching Protocols`) or a
//!   hijack (attach, exec start: an answer without a length), each direction half-closed when
//!   its source ends. Any I/O error ends that one connection only.
//!
//! Claims name networks as `network/ID` and volumes as `volume/NAME` (see
//! `Provider::parse_claim` of the Docker driver), so a reclaim removes the right kind of object.

pub(crate) mod body;
pub(crate) mod create;
mod exchange;
pub(crate) mod http;
pub(crate) mod json;
pub mod target;
mod volumes;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

use crate::protocol::Target;
use crate::providers::proxy_claim::claim as claim_target;
pub(crate) use crate::providers::proxy_claim::{Claim, Hold};
use target::Create;

/// Where the real daemon listens.
#[derive(Debug, Clone)]
pub(crate) enum Upstream {
    Unix(PathBuf),
    Tcp(String),
}

impl Upstream {
    /// From a Docker host address: `unix:///path`, `tcp://host:port` or `http://host:port`.
    pub(crate) fn parse(host: &str) -> Result<Upstream, String> {
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
    /// The session id (`sandguard.session` in `labels`): what a claimable answer must carry.
    session: String,
    claims: mpsc::UnboundedSender<Claim>,
}

/// A bound proxy, not yet serving.
pub(crate) struct Proxy {
    listener: UnixListener,
    shared: Arc<Shared>,
}

/// The proxy's private directory; dropping it removes the socket and the directory.
#[derive(Debug)]
pub(crate) struct SocketDir {
    dir: PathBuf,
    socket: PathBuf,
}

impl SocketDir {
    pub(crate) fn socket(&self) -> &Path {
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
    pub(crate) fn bind(
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
        let session = labels
            .get(crate::labels::SESSION)
            .cloned()
            .unwrap_or_default();
        let shared = Arc::new(Shared {
            upstream,
            labels,
            session,
            claims,
        });
        Ok((Proxy { listener, shared }, guard))
    }

    /// Serves until dropped; dropping the future ends every connection with it.
    pub(crate) async fn run(self) {
        let shared = self.shared;
        crate::providers::proxy_accept::serve("docker proxy", self.listener, move |client| {
            serve(client, shared.clone())
        })
        .await;
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
            let text = format!("sandguard: cannot reach the Docker daemon: {e}");
            return client.write_all(&http::answer(502, &text)).await;
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
        match exchange::exchange(&mut c, &mut u, shared).await? {
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

/// Tells the sidecar about a created object (a claim, or a detach as `hold` says) and waits
/// until it is journaled.
async fn claim(shared: &Shared, kind: Create, id: &str, hold: Hold) {
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
    // Not acknowledged: the daemon's answer goes on all the same; the labels mark the object.
    if let Err(e) = claim_target(&shared.claims, target, hold).await {
        tracing::debug!("docker proxy: {id} not claimed ({e}); its labels still mark it");
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
