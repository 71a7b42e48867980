//! The proxies a sidecar serves its program, as [`ProxyMode`] decides (its decisions are
//! there), and the look at the Docker daemon that comes with them.
//!
//! - **Docker**: when Docker is configured ([`crate::providers::docker::configured`]) the
//!   sidecar connects once to the daemon's address (at most [`PROBE_TIMEOUT`]), before
//!   `ready`. A daemon that does not answer is one warning in auto mode and with the proxy
//!   off: sandguard can neither see nor reclaim containers there, and in auto mode the proxy
//!   is then not served. Asked for (`On`: `--docker-proxy`, `docker_proxy = true`), a daemon
//!   that does not answer, or none configured, is the start's failure (the wrapper exits 125
//!   before the program runs, leaving no session): whoever asks for the proxy means the
//!   program to reach Docker through it, and a proxy to nothing would only turn that into the
//!   program's own errors and a session left `pending` by reclaims that cannot reach the
//!   daemon either (issue 40; until 2026-12-05 it was served anyway). A daemon still starting
//!   (Docker Desktop after a login) is what auto mode is for. Docker not configured at all (no
//!   daemon named and no default socket) is no warning in auto mode: a machine without
//!   Docker is not a misconfiguration.
//! - **Cloud**: a proxy for each of E2B and Daytona whose credential is set. In auto mode a
//!   proxy that cannot be bound is a warning and the others are still served; none
//!   configured is silence. Asked for, either is an error, as before.
//! - The probe is a connect, not an API call: it costs a few microseconds on a Unix socket,
//!   which matters on the wrapper's path.
//! - **Two halves**: [`bind`] decides, warns and binds the listeners (std's, synchronous: the
//!   wrapper runs it itself before it execs the program, `crate::session::handoff`), and
//!   [`serve`] turns what was bound into the proxies, inside the sidecar's runtime. A sidecar
//!   started by an SDK runs both ([`start`]); one the wrapper started serves what the wrapper
//!   bound ([`Bound::handed`]). One decision, wherever it is made.

use std::time::Duration;

use crate::config::docker::{DaemonAddress, HostError};
use crate::config::{ProxyMode, Ryuk, Settings, RYUK_DISABLED};
use crate::providers::docker::daemon::{UnsupportedHost, Upstream};
use crate::proxy::cloud::{self, Api, CloudError, CloudProxy, Upstream as CloudUpstream};
use crate::proxy::docker::{Ask, Proxy, SocketDir};
use crate::unix;

/// How long the look at the Docker daemon waits for a connection.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_millis(250);

type Claims = tokio::sync::mpsc::UnboundedSender<Ask>;

/// Why the proxies a start asked for cannot be bound or served.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProxyError {
    /// The Docker proxy was asked for and the daemon cannot be reached.
    #[error("cannot start the Docker proxy (--docker-proxy, docker_proxy = true): {0}")]
    DockerSilent(Box<Silence>),
    /// The Docker proxy was asked for and no daemon is configured.
    #[error(
        "cannot start the Docker proxy (--docker-proxy, docker_proxy = true): no Docker daemon \
         is configured or found (see `sandguard providers`)"
    )]
    NoDocker,
    /// There is no address to forward to: the Docker context that names the daemon cannot
    /// be followed, or every engine socket found was skipped.
    #[error("cannot start the Docker proxy: {0}")]
    DockerContext(Box<HostError>),
    /// The daemon's address is not one the proxy can forward to.
    #[error(transparent)]
    DockerHost(UnsupportedHost),
    /// No random name for the fallback socket directory.
    #[error("cannot make a random name: {0}")]
    Random(std::io::Error),
    /// The Docker proxy's socket cannot be bound.
    #[error("cannot listen for the Docker proxy: {0}")]
    DockerListen(std::io::Error),
    /// The bound Docker proxy cannot be served by the runtime.
    #[error("cannot serve the Docker proxy: {0}")]
    DockerServe(std::io::Error),
    /// A handed cloud proxy's upstream, as the settings name it, cannot be used.
    #[error(transparent)]
    CloudUpstream(CloudError),
    /// A cloud proxy cannot be bound.
    #[error("cannot start the {} cloud proxy: {error}", api.name())]
    Cloud { api: Api, error: CloudError },
    /// A bound cloud proxy cannot be served.
    #[error("cannot serve the {} cloud proxy: {error}", api.name())]
    CloudServe { api: Api, error: CloudError },
    /// The cloud proxy was asked for and no cloud provider is configured: a usage error.
    #[error(
        "--cloud-proxy: neither E2B nor Daytona is configured (set E2B_API_KEY or \
         DAYTONA_API_KEY, or api_key in [providers.e2b] / [providers.daytona])"
    )]
    NoCloud,
}

/// A bound Docker proxy and its private directory.
pub(crate) struct DockerProxy {
    pub proxy: Proxy,
    pub dir: SocketDir,
    ryuk: Ryuk,
}

/// What the session serves, and what its program gets from it.
pub(crate) struct Served {
    pub docker: Option<DockerProxy>,
    pub cloud: Vec<CloudProxy>,
}

impl Served {
    /// The `NAME=VALUE`s of the ready line.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        let docker = self.docker.iter().flat_map(|p| docker_env(&p.dir, p.ryuk));
        docker
            .chain(self.cloud.iter().map(CloudProxy::assignment))
            .collect()
    }
}

/// What a program gets from the Docker proxy listening in `dir`: `DOCKER_HOST`, and
/// `TESTCONTAINERS_RYUK_DISABLED=true` unless `ryuk` says otherwise ([`Ryuk`] has why).
fn docker_env(dir: &SocketDir, ryuk: Ryuk) -> Vec<(String, String)> {
    let host = format!("unix://{}", dir.socket().display());
    let mut env = vec![("DOCKER_HOST".to_string(), host)];
    if ryuk == Ryuk::Disabled {
        env.push((RYUK_DISABLED.to_string(), "true".to_string()));
    }
    env
}

/// The Docker proxy's listener, bound, not served.
pub(crate) struct BoundDocker {
    pub listener: std::os::unix::net::UnixListener,
    pub dir: SocketDir,
    upstream: Upstream,
    ryuk: Ryuk,
}

/// One cloud proxy's listener, bound, not served.
pub(crate) struct BoundCloud {
    pub api: Api,
    pub listener: std::net::TcpListener,
    upstream: CloudUpstream,
}

/// What [`bind`] decided and bound.
pub(crate) struct Bound {
    pub docker: Option<BoundDocker>,
    pub cloud: Vec<BoundCloud>,
}

impl Bound {
    /// What the program gets (`DOCKER_HOST`, `E2B_API_URL`, …): the ready line's `NAME=VALUE`s.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        let docker = self.docker.iter().flat_map(|p| docker_env(&p.dir, p.ryuk));
        let cloud = self.cloud.iter().filter_map(|c| {
            let address = c.listener.local_addr().ok()?;
            Some(cloud::assignment(c.api, address, &c.upstream))
        });
        docker.chain(cloud).collect()
    }

    /// What the wrapper bound and handed over: the listeners, and where each forwards to as
    /// the same settings say (the wrapper decided with them).
    pub(crate) fn handed(
        settings: &Settings,
        docker: Option<(std::os::unix::net::UnixListener, std::path::PathBuf)>,
        cloud: Vec<(Api, std::net::TcpListener)>,
    ) -> Result<Bound, ProxyError> {
        let docker = match docker {
            Some((listener, socket)) => {
                let dir = SocketDir::adopt(socket);
                let upstream = docker_upstream(settings)?;
                Some(BoundDocker {
                    listener,
                    dir,
                    upstream,
                    ryuk: ryuk(settings),
                })
            }
            None => None,
        };
        let cloud = cloud
            .into_iter()
            .map(|(api, listener)| {
                let upstream = CloudUpstream::parse(&cloud_settings(settings, api).url)
                    .map_err(ProxyError::CloudUpstream)?;
                Ok(BoundCloud {
                    api,
                    listener,
                    upstream,
                })
            })
            .collect::<Result<_, ProxyError>>()?;
        Ok(Bound { docker, cloud })
    }
}

/// Where the session's labels and journal are, for the proxies.
pub(crate) struct Session<'a> {
    pub id: &'a str,
    pub labels: &'a crate::proxy::stamp::Labels,
    pub journal: &'a std::path::Path,
}

/// [`bind`], then [`serve`]: an SDK's sidecar, which decides for itself.
pub(crate) fn start(
    settings: &Settings,
    modes: (ProxyMode, ProxyMode),
    session: &Session<'_>,
    tx: &Claims,
    look_anyway: bool,
    warn: &mut dyn FnMut(&str),
) -> Result<Served, ProxyError> {
    let bound = bind(
        settings,
        modes,
        (session.id, session.journal),
        look_anyway,
        warn,
    )?;
    serve(bound, session.labels, tx)
}

/// Decides what `docker` and `cloud` ask for and binds it; warnings go to `warn`. With the
/// Docker proxy off the daemon is looked at only when `look_anyway` (someone hears the
/// warning). `(session, journal)`: the session id and its journal's path, beside which the
/// Docker proxy's socket lives.
pub(crate) fn bind(
    settings: &Settings,
    (docker, cloud): (ProxyMode, ProxyMode),
    (session, journal): (&str, &std::path::Path),
    look_anyway: bool,
    warn: &mut dyn FnMut(&str),
) -> Result<Bound, ProxyError> {
    let look = match docker {
        ProxyMode::Off if !look_anyway => Look::NotLooked,
        _ => look_at_docker(settings),
    };
    let look = match (look, docker) {
        (Look::Silent(why), ProxyMode::On) => return Err(ProxyError::DockerSilent(Box::new(why))),
        (Look::Absent, ProxyMode::On) => return Err(ProxyError::NoDocker),
        (Look::Silent(why), ProxyMode::Auto) => {
            warn(&format!("{why}; the Docker proxy is off for this program"));
            Look::NotLooked
        }
        (Look::Silent(why), _) => {
            warn(&why.to_string());
            Look::NotLooked
        }
        (look, _) => look,
    };
    let docker = match (docker, look) {
        (ProxyMode::On, _) => Some(bind_docker(settings, session, journal)?),
        (ProxyMode::Auto, Look::Answers) => match bind_docker(settings, session, journal) {
            Ok(bound) => Some(bound),
            Err(e) => {
                warn(&format!("{e}; the Docker proxy is off for this program"));
                None
            }
        },
        _ => None,
    };
    let cloud = match cloud {
        ProxyMode::Off => Vec::new(),
        mode => bind_cloud(settings, mode, warn)?,
    };
    Ok(Bound { docker, cloud })
}

/// The proxies on what [`bind`] bound (inside the runtime).
pub(crate) fn serve(
    bound: Bound,
    labels: &crate::proxy::stamp::Labels,
    tx: &Claims,
) -> Result<Served, ProxyError> {
    let docker = match bound.docker {
        Some(b) => {
            let proxy = Proxy::serve(b.listener, b.upstream, labels.clone(), tx.clone())
                .map_err(ProxyError::DockerServe)?;
            Some(DockerProxy {
                proxy,
                dir: b.dir,
                ryuk: b.ryuk,
            })
        }
        None => None,
    };
    let cloud = bound
        .cloud
        .into_iter()
        .map(|b| {
            CloudProxy::serve(b.api, b.upstream, b.listener, labels.clone(), tx.clone())
                .map_err(|error| ProxyError::CloudServe { api: b.api, error })
        })
        .collect::<Result<_, _>>()?;
    Ok(Served { docker, cloud })
}

/// What the look at the Docker daemon found.
enum Look {
    NotLooked,
    /// Docker is not configured here.
    Absent,
    /// A daemon accepted a connection.
    Answers,
    /// Docker is configured, and this is why it cannot be reached.
    Silent(Silence),
}

/// Why a configured Docker daemon cannot be reached: a warning, or the start's failure when
/// the Docker proxy was asked for. `via` is ` (what named the address)`, or empty.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Silence {
    /// There is no address: the Docker context that names it cannot be followed, or every
    /// engine socket found was skipped.
    #[error("Docker{via} cannot be used: {error}")]
    Context { via: String, error: HostError },
    /// Its address is not one sandguard can connect to.
    #[error("Docker{via} cannot be used: {error}")]
    Unsupported { via: String, error: UnsupportedHost },
    /// Nothing answered within [`PROBE_TIMEOUT`].
    #[error("no Docker daemon answers at {host}{via} within {PROBE_TIMEOUT:?}")]
    TimedOut { host: DaemonAddress, via: String },
    /// The connection failed.
    #[error("no Docker daemon answers at {host}{via}: {error}")]
    Refused {
        host: DaemonAddress,
        via: String,
        error: std::io::Error,
    },
}

/// One connect to the daemon's address, at most [`PROBE_TIMEOUT`] (a Unix socket answers or
/// refuses at once).
fn look_at_docker(settings: &Settings) -> Look {
    if !crate::providers::docker::configured(&settings.docker) {
        return Look::Absent;
    }
    let via = settings
        .docker
        .host
        .as_ref()
        .map_or(String::new(), |h| format!(" ({})", h.via));
    let host = match crate::providers::docker::address(&settings.docker) {
        Ok(host) => host,
        Err(error) => return Look::Silent(Silence::Context { via, error }),
    };
    let upstream = match Upstream::parse(&host) {
        Ok(u) => u,
        Err(error) => return Look::Silent(Silence::Unsupported { via, error }),
    };
    let connected = match &upstream {
        Upstream::Unix(path) => std::os::unix::net::UnixStream::connect(path).map(drop),
        Upstream::Tcp(addr) => connect_tcp(addr),
    };
    match connected {
        Ok(()) => Look::Answers,
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
            Look::Silent(Silence::TimedOut { host, via })
        }
        Err(error) => Look::Silent(Silence::Refused { host, via, error }),
    }
}

/// A TCP connect to `host:port`, each resolved address tried for at most [`PROBE_TIMEOUT`].
fn connect_tcp(addr: &str) -> std::io::Result<()> {
    use std::net::ToSocketAddrs;
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
    for a in addr.to_socket_addrs()? {
        match std::net::TcpStream::connect_timeout(&a, PROBE_TIMEOUT) {
            Ok(_) => return Ok(()),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The daemon the Docker driver would use, as the proxy forwards to it.
fn docker_upstream(settings: &Settings) -> Result<Upstream, ProxyError> {
    let host = crate::providers::docker::address(&settings.docker)
        .map_err(|e| ProxyError::DockerContext(Box::new(e)))?;
    Upstream::parse(&host).map_err(ProxyError::DockerHost)
}

/// Binds the proxy beside the journal (`<session>.docker/docker.sock`), forwarding to the
/// daemon the Docker driver would use.
fn bind_docker(
    settings: &Settings,
    session: &str,
    journal: &std::path::Path,
) -> Result<BoundDocker, ProxyError> {
    let upstream = docker_upstream(settings)?;
    let dir = journal.with_extension("docker");
    // The fallback lives in a shared temp dir: a random name, so no one can squat on it.
    let salt = unix::random_hex(8).map_err(ProxyError::Random)?;
    let fallback = format!("sandguard-{session}-{salt}.docker");
    let (listener, dir) = SocketDir::bind(&dir, &fallback).map_err(ProxyError::DockerListen)?;
    Ok(BoundDocker {
        listener,
        dir,
        upstream,
        ryuk: ryuk(settings),
    })
}

/// What the settings say of Ryuk, said in the debug log (once a proxy is bound).
fn ryuk(settings: &Settings) -> Ryuk {
    let ryuk = settings.watch.ryuk;
    match ryuk {
        Ryuk::Disabled => tracing::debug!(
            "the program gets {RYUK_DISABLED}=true with the Docker proxy: testcontainers \
             starts no Ryuk, and what it makes through the proxy is reclaimed \
             (keep_ryuk = true under [watch] keeps Ryuk)"
        ),
        Ryuk::Kept => tracing::debug!("keep_ryuk = true: {RYUK_DISABLED} is not set"),
        Ryuk::UsersOwn => tracing::debug!("{RYUK_DISABLED} is set already: left as it is"),
    }
    ryuk
}

fn cloud_settings(settings: &Settings, api: Api) -> &crate::config::CloudSettings {
    match api {
        Api::E2b => &settings.e2b,
        Api::Daytona => &settings.daytona,
    }
}

/// One bound listener for each of E2B and Daytona that is configured (its credential set),
/// forwarding to the base URL its driver uses. Asked for (`On`), neither configured is a usage
/// error and a bind failure an error; in auto mode both are quiet or a warning.
fn bind_cloud(
    settings: &Settings,
    mode: ProxyMode,
    warn: &mut dyn FnMut(&str),
) -> Result<Vec<BoundCloud>, ProxyError> {
    let mut bound = Vec::new();
    for api in [Api::E2b, Api::Daytona] {
        let cloud = cloud_settings(settings, api);
        if cloud.token.is_none() && cloud.secret.is_none() {
            continue;
        }
        let listening =
            CloudUpstream::parse(&cloud.url).and_then(|upstream| Ok((upstream, cloud::listen()?)));
        match listening {
            Ok((upstream, listener)) => bound.push(BoundCloud {
                api,
                listener,
                upstream,
            }),
            Err(error) => {
                let error = ProxyError::Cloud { api, error };
                match mode {
                    ProxyMode::Auto => warn(&format!("{error}; it is off for this program")),
                    _ => return Err(error),
                }
            }
        }
    }
    if bound.is_empty() && mode == ProxyMode::On {
        return Err(ProxyError::NoCloud);
    }
    Ok(bound)
}
