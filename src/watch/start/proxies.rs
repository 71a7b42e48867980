//! The proxies a sidecar serves its program, as [`ProxyMode`] decides (its decisions are
//! there), and the look at the Docker daemon that comes with them.
//!
//! - **Docker**: when Docker is configured ([`crate::providers::docker::configured`]) the
//!   sidecar connects once to the daemon's address (at most [`PROBE_TIMEOUT`]), before
//!   `ready`. A daemon that does not answer is one warning, whatever the mode: sandguard can
//!   neither see nor reclaim containers there. In auto mode the proxy is then not served; asked
//!   for (`On`) it is, and its clients get the daemon's errors through it. Docker not
//!   configured at all (no daemon named and no default socket) is no warning in auto mode: a
//!   machine without Docker is not a misconfiguration.
//! - **Cloud**: a proxy for each of E2B and Daytona whose credential is set. In auto mode a
//!   proxy that cannot be bound is a warning and the others are still served; none
//!   configured is silence. Asked for, either is an error, as before.
//! - The probe is a connect, not an API call: it costs a few microseconds on a Unix socket,
//!   which matters on the wrapper's path.

use std::collections::BTreeMap;
use std::time::Duration;

use super::StartError;
use crate::config::{ProxyMode, Settings};
use crate::providers::cloud_proxy::{Api, CloudProxy};
use crate::providers::docker::proxy::{Claim, Proxy, SocketDir, Upstream};
use crate::unix;

/// How long the look at the Docker daemon waits for a connection.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_millis(250);

type Claims = tokio::sync::mpsc::UnboundedSender<Claim>;

/// A bound Docker proxy and its private directory.
pub(crate) struct DockerProxy {
    pub proxy: Proxy,
    pub dir: SocketDir,
}

/// What the session serves, and what its program gets from it.
pub(crate) struct Served {
    pub docker: Option<DockerProxy>,
    pub cloud: Vec<CloudProxy>,
}

impl Served {
    /// The `NAME=VALUE`s of the ready line.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        let docker = self.docker.iter().map(|p| {
            let host = format!("unix://{}", p.dir.socket().display());
            ("DOCKER_HOST".to_string(), host)
        });
        docker
            .chain(self.cloud.iter().map(CloudProxy::assignment))
            .collect()
    }
}

/// Where the session's labels and journal are, for the proxies.
pub(crate) struct Session<'a> {
    pub id: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub journal: &'a std::path::Path,
}

/// Starts what `docker` and `cloud` ask for; warnings go to `warn`. With the Docker proxy off
/// the daemon is looked at only when `look_anyway` (someone hears the warning).
pub(crate) async fn start(
    settings: &Settings,
    (docker, cloud): (ProxyMode, ProxyMode),
    session: &Session<'_>,
    tx: &Claims,
    look_anyway: bool,
    warn: &mut dyn FnMut(&str),
) -> Result<Served, StartError> {
    let failure = StartError::Failed;
    let look = match docker {
        ProxyMode::Off if !look_anyway => Look::NotLooked,
        _ => look_at_docker(settings).await,
    };
    if let Look::Silent(why) = &look {
        let off = match docker {
            ProxyMode::Auto => "; the Docker proxy is off for this program",
            _ => "",
        };
        warn(&format!("{why}{off}"));
    }
    let docker = match (docker, look) {
        (ProxyMode::On, _) => Some(start_docker(settings, session, tx.clone()).map_err(failure)?),
        (ProxyMode::Auto, Look::Answers) => match start_docker(settings, session, tx.clone()) {
            Ok(proxy) => Some(proxy),
            Err(e) => {
                warn(&format!("{e}; the Docker proxy is off for this program"));
                None
            }
        },
        _ => None,
    };
    let cloud = match cloud {
        ProxyMode::Off => Vec::new(),
        mode => start_cloud(settings, session.labels, tx, mode, warn).await?,
    };
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
    Silent(String),
}

async fn look_at_docker(settings: &Settings) -> Look {
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
        Err(why) => return Look::Silent(format!("Docker{via} cannot be used: {why}")),
    };
    let upstream = match Upstream::parse(&host) {
        Ok(u) => u,
        Err(why) => return Look::Silent(format!("Docker{via} cannot be used: {why}")),
    };
    let connect = async {
        match &upstream {
            Upstream::Unix(path) => tokio::net::UnixStream::connect(path).await.map(drop),
            Upstream::Tcp(addr) => tokio::net::TcpStream::connect(addr).await.map(drop),
        }
    };
    match tokio::time::timeout(PROBE_TIMEOUT, connect).await {
        Ok(Ok(())) => Look::Answers,
        Ok(Err(e)) => Look::Silent(format!("no Docker daemon answers at {host}{via}: {e}")),
        Err(_) => Look::Silent(format!(
            "no Docker daemon answers at {host}{via} within {PROBE_TIMEOUT:?}"
        )),
    }
}

/// Binds the proxy beside the journal (`<session>.docker/docker.sock`), forwarding to the
/// daemon the Docker driver would use.
fn start_docker(
    settings: &Settings,
    session: &Session<'_>,
    tx: Claims,
) -> Result<DockerProxy, String> {
    let host = crate::providers::docker::address(&settings.docker)
        .map_err(|e| format!("cannot start the Docker proxy: {e}"))?;
    let upstream = Upstream::parse(&host)?;
    let dir = session.journal.with_extension("docker");
    // The fallback lives in a shared temp dir: a random name, so no one can squat on it.
    let salt = unix::random_hex(8).map_err(|e| format!("cannot make a random name: {e}"))?;
    let fallback = format!("sandguard-{}-{salt}.docker", session.id);
    let (proxy, dir) = Proxy::bind(&dir, &fallback, upstream, session.labels.clone(), tx)
        .map_err(|e| format!("cannot listen for the Docker proxy: {e}"))?;
    Ok(DockerProxy { proxy, dir })
}

/// One bound cloud proxy for each of E2B and Daytona that is configured (its credential set),
/// forwarding to the base URL its driver uses. Asked for (`On`), neither configured is a usage
/// error and a bind failure an error; in auto mode both are quiet or a warning.
async fn start_cloud(
    settings: &Settings,
    labels: &BTreeMap<String, String>,
    tx: &Claims,
    mode: ProxyMode,
    warn: &mut dyn FnMut(&str),
) -> Result<Vec<CloudProxy>, StartError> {
    let configured = [(Api::E2b, &settings.e2b), (Api::Daytona, &settings.daytona)];
    let mut proxies = Vec::new();
    for (api, cloud) in configured {
        if cloud.token.is_none() && cloud.secret.is_none() {
            continue;
        }
        match CloudProxy::bind(api, &cloud.url, labels.clone(), tx.clone()).await {
            Ok(proxy) => proxies.push(proxy),
            Err(e) if mode == ProxyMode::Auto => warn(&format!(
                "cannot start the {} cloud proxy: {e}; it is off for this program",
                api.name()
            )),
            Err(e) => {
                let message = format!("cannot start the {} cloud proxy: {e}", api.name());
                return Err(StartError::Failed(message));
            }
        }
    }
    if proxies.is_empty() && mode == ProxyMode::On {
        return Err(StartError::Usage(
            "--cloud-proxy: neither E2B nor Daytona is configured (set E2B_API_KEY or \
             DAYTONA_API_KEY, or api_key in [providers.e2b] / [providers.daytona])"
                .into(),
        ));
    }
    Ok(proxies)
}
