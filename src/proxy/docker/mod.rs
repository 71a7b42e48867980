//! The Docker API proxy: any Docker client, unchanged, creates only labelled, claimed objects.
//!
//! The sidecar listens on a private unix socket (mode 0600 in a 0700 directory) and the
//! guarded program gets `DOCKER_HOST` pointing at it. Connections are accepted by the loop both
//! proxies share (`proxy::accept`) and each is served by hyper's HTTP/1 server, with
//! keep-alive and upgrades; each request is judged and answered in [`forward`], and sent on the
//! client connection's own connection to the real daemon through hyper's client
//! ([`upstream`]). Creates go through the pipeline both proxies run (`proxy::create`: read,
//! stamp, decide, forward, claim), Docker's part of it in [`forward`]; refusals are
//! `proxy::refusal`'s, answered in Docker's shape.
//!
//! Why hyper on both sides (issue #24, point 6): every byte the daemon receives before an
//! upgrade is a request hyper parsed, the proxy judged, and hyper wrote anew, so no framing
//! the proxy and the daemon could read differently (request smuggling) passes through, and
//! there is no hand-written HTTP parser to get wrong. What that changed, deliberately:
//!
//! - Docker's older hijack (an attach or exec start without `Upgrade`, answered `200` and then
//!   raw both ways) is refused with a `400` saying the proxy needs `Upgrade: tcp`: hyper
//!   switches protocols only on `101`. The docker CLI, the Go SDK, docker-py, docker-modem's
//!   `hijack` and compose all ask for the upgrade. A detached exec start (`docker exec -d`),
//!   which the daemon does not hijack, passes.
//! - A request head hyper cannot parse gets hyper's own answer, `400` (`431` over 64 KiB),
//!   with an empty body, and the connection closes; a head cut short by the end of the
//!   connection gets none. Nothing of either reaches the daemon.
//! - Bodies are framed anew: chunk extensions and trailers are dropped, an answer the end of
//!   the daemon's connection delimits reaches the client chunked, and the next request goes
//!   on a fresh daemon connection, judged like any other.
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
//! - A create the proxy cannot stamp is refused, never passed on unstamped: a head hyper cannot
//!   parse (400, or 431 over 64 KiB; the connection then closes), a body over 8 MiB (413) or
//!   one it cannot read as Docker would (400).
//! - Podman's own API (`[/vX.Y]/libpod/…`), but for reads, is refused (403, `sandguard:`):
//!   its creates are not stamped ([`target::LIBPOD_REFUSED`] says why that is enough).
//! - A raw bidirectional copy happens only after an upgrade (`101 Switching Protocols`), each
//!   direction half-closed when its source ends. Any I/O error ends that one connection only.
//!
//! - A removal the program makes through the proxy (`DELETE` of a container, network or
//!   volume, or a prune) releases the claim of what went, journaled before the answer reaches
//!   the program ([`removal`]).
//!
//! Claims name networks as `network/ID` and volumes as `volume/NAME@CREATED`, pinned to the
//! volume the create made (see `Provider::parse_claim` of the Docker driver: a volume's name
//! is not its identity), so a reclaim removes the right kind of object, and only that one.

pub(crate) mod create;
mod forward;
mod removal;
pub(crate) mod target;
mod upstream;
mod volumes;

#[cfg(test)]
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io;
use std::os::unix::net::UnixListener as StdUnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

use crate::protocol::Target;
use crate::providers::docker::daemon::Upstream;
use crate::proxy::claim::claim as claim_target;
pub(crate) use crate::proxy::claim::{Ask, Hold};
use target::Create;

struct Shared {
    upstream: Upstream,
    labels: crate::proxy::stamp::Labels,
    /// The session id (`sandguard.session` in `labels`): what a claimable answer must carry.
    session: String,
    claims: mpsc::UnboundedSender<Ask>,
    /// What this proxy claimed, to release what the program removes (`removal`).
    claimed: removal::Claimed,
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

    /// Creates `dir` (mode 0700; it must not exist) and listens on `dir/docker.sock` (0600),
    /// without serving yet (std's listener: the wrapper binds it before it execs the program
    /// and hands it to the sidecar, `crate::session::handoff`). A path too long for a unix
    /// socket falls back to a fresh directory `fallback` ([`socket_dir`]).
    pub(crate) fn bind(dir: &Path, fallback: &str) -> io::Result<(StdUnixListener, SocketDir)> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let dir = socket_dir(dir, fallback, &std::env::temp_dir())?;
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
        let listener = StdUnixListener::bind(&socket).map_err(|e| at(e, &socket))?;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| at(e, &socket))?;
        Ok((listener, guard))
    }

    /// The directory of a socket another process bound ([`SocketDir::bind`]), now this
    /// process's to remove.
    pub(crate) fn adopt(socket: PathBuf) -> SocketDir {
        let dir = socket.parent().map(Path::to_path_buf).unwrap_or_default();
        SocketDir { dir, socket }
    }
}

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The longest path a Unix socket can be bound at, in bytes (the platform's: 107 on Linux,
/// 103 on macOS).
const MAX_SOCKET_PATH: usize = crate::unix::MAX_SOCKET_PATH;

/// Where the proxy's socket directory goes: `dir`, else `fallback` in `temp`, else `fallback`
/// in `/tmp`, the first whose `docker.sock` fits in [`MAX_SOCKET_PATH`]. `/tmp` is there for
/// macOS, whose per-user temp dir (`/var/folders/…/T/`, about 49 bytes) leaves no room for
/// the fallback's name (78 bytes with the socket); the name is random and the directory is
/// made 0700 where none exists, so a shared `/tmp` is as safe as a private one.
fn socket_dir(dir: &Path, fallback: &str, temp: &Path) -> io::Result<PathBuf> {
    let fits = |d: &PathBuf| d.join("docker.sock").as_os_str().len() <= MAX_SOCKET_PATH;
    let places = [
        dir.to_path_buf(),
        temp.join(fallback),
        Path::new("/tmp").join(fallback),
    ];
    places.into_iter().find(fits).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{}: too long for a unix socket ({MAX_SOCKET_PATH} bytes at most here), and so \
                 is {fallback} in {} and in /tmp",
                dir.join("docker.sock").display(),
                temp.display()
            ),
        )
    })
}

impl Proxy {
    /// [`SocketDir::bind`], then [`Proxy::serve`].
    #[cfg(test)]
    pub(crate) fn bind(
        dir: &Path,
        fallback: &str,
        upstream: Upstream,
        labels: BTreeMap<String, String>,
        claims: mpsc::UnboundedSender<Ask>,
    ) -> io::Result<(Proxy, SocketDir)> {
        let (listener, guard) = SocketDir::bind(dir, fallback)?;
        Ok((
            Proxy::serve(listener, upstream, labels.into(), claims)?,
            guard,
        ))
    }

    /// The proxy on a bound listener (inside the runtime), forwarding to `upstream`.
    pub(crate) fn serve(
        listener: StdUnixListener,
        upstream: Upstream,
        labels: crate::proxy::stamp::Labels,
        claims: mpsc::UnboundedSender<Ask>,
    ) -> io::Result<Proxy> {
        listener.set_nonblocking(true)?;
        let listener = UnixListener::from_std(listener)?;
        let session = labels.session_id();
        let shared = Arc::new(Shared {
            upstream,
            labels,
            session,
            claims,
            claimed: removal::Claimed::default(),
        });
        Ok(Proxy { listener, shared })
    }

    /// Serves until dropped; dropping the future ends every connection with it.
    pub(crate) async fn run(self) {
        let shared = self.shared;
        crate::proxy::accept::serve("docker proxy", self.listener, move |client| {
            serve(client, shared.clone())
        })
        .await;
    }
}

use crate::proxy::create::Body;

/// One client connection: hyper's HTTP/1 server, keep-alive and upgrades, until the client
/// leaves; errors end only this connection. Then the tasks it started (its daemon
/// connection's, a hijack's copy) are waited for: they end when their streams do.
async fn serve(client: UnixStream, shared: Arc<Shared>) {
    let conn = Arc::new(upstream::Conn::new(shared));
    let service = {
        let conn = conn.clone();
        hyper::service::service_fn(move |req| {
            let conn = conn.clone();
            async move { Ok::<_, Infallible>(forward::handle(req, &conn).await) }
        })
    };
    let served = hyper::server::conn::http1::Builder::new()
        // A client that half-closes after its request still gets the answer.
        .half_close(true)
        .preserve_header_case(true)
        .title_case_headers(true)
        .max_buf_size(MAX_HEAD)
        .serve_connection(TokioIo::new(client), service)
        .with_upgrades()
        .await;
    if let Err(e) = served {
        tracing::debug!("docker proxy: connection ended: {e}");
    }
    conn.finish().await;
}

/// The longest request head read (hyper's read buffer); a longer one is answered `431`.
const MAX_HEAD: usize = 64 * 1024;

/// The claim's target for an object this proxy made: its `id` (a volume's name), pinned to
/// `created` where the object's id is a name (a volume).
fn claimed_target(
    kind: Create,
    id: &str,
    created: Option<&str>,
) -> Result<Target, crate::proxy::create::Unclaimed> {
    let claimed = match (kind, created) {
        (Create::Container, _) => id.to_string(),
        (Create::Network, _) => format!("network/{id}"),
        (Create::Volume, Some(created)) => format!("volume/{id}@{created}"),
        (Create::Volume, None) => format!("volume/{id}"),
    };
    Target::new("docker", &claimed).map_err(|why| crate::proxy::create::Unclaimed::BadId {
        id: claimed.clone(),
        why,
    })
}

/// Tells the sidecar about a volume made for a container create (a claim, or a detach as
/// `hold` says) and waits until it is journaled. Not acknowledged, the container create goes
/// on all the same: the volume carries the session's labels.
async fn claim_volume(shared: &Shared, (id, created): (String, Option<String>), hold: Hold) {
    let target = match claimed_target(Create::Volume, &id, created.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(
                "docker proxy: volume {id} not claimed ({e:?}); its labels still mark it"
            );
            return;
        }
    };
    shared.claimed.made(Create::Volume, &id, None);
    if let Err(e) = claim_target(&shared.claims, target, hold, None).await {
        tracing::debug!("docker proxy: volume {id} not claimed ({e}); its labels still mark it");
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod socket_path {
    use super::*;

    /// A path of exactly [`MAX_SOCKET_PATH`] bytes binds on this system; one byte more is
    /// refused: the limit is the system's, not a guess.
    #[test]
    fn the_limit_is_what_this_system_binds() {
        let base = std::env::temp_dir().join(format!("sg-sun-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let at = |len: usize| {
            let name = "s".repeat(len - base.as_os_str().len() - 1);
            base.join(name)
        };
        let longest = at(MAX_SOCKET_PATH);
        assert_eq!(longest.as_os_str().len(), MAX_SOCKET_PATH);
        assert!(StdUnixListener::bind(&longest).is_ok());
        assert!(StdUnixListener::bind(at(MAX_SOCKET_PATH + 1)).is_err());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_path_too_long_moves_to_the_temp_dir_then_to_tmp() {
        let session = "0123456789abcdef0123456789abcdef";
        let fallback = format!("sandguard-{session}-0123456789abcdef.docker");
        let home = |user: &str| {
            PathBuf::from(format!(
                "/Users/{user}/.local/state/sandguard/sessions/{session}.docker"
            ))
        };
        let mac_temp = Path::new("/var/folders/7b/f9yh3wzs2nb20tm_0zlnmp5h0000gn/T/");
        // A Mac user name of up to 12 bytes keeps the socket in the state dir under macOS's
        // 104-byte sun_path (103 bytes and the NUL).
        let twelve = home("twelve_bytes").join("docker.sock");
        assert_eq!(twelve.as_os_str().len(), 103);
        let short = home("me");
        assert_eq!(socket_dir(&short, &fallback, mac_temp).unwrap(), short);
        let long = home(&"u".repeat(MAX_SOCKET_PATH));
        let tmp = socket_dir(&long, &fallback, Path::new("/tmp")).unwrap();
        assert_eq!(tmp, Path::new("/tmp").join(&fallback));
        assert_eq!(socket_dir(&long, &fallback, mac_temp).unwrap(), tmp);
        let e = socket_dir(&long, &"f".repeat(MAX_SOCKET_PATH), mac_temp).unwrap_err();
        assert!(e.to_string().contains("too long for a unix socket"), "{e}");
    }
}
