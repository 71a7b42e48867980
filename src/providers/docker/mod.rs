//! The Docker driver, on bollard.
//!
//! - Address: `DOCKER_HOST` (`unix://` or `tcp://`), else the Docker context `DOCKER_CONTEXT`
//!   names, else `[providers.docker] host`, else the Docker CLI's current context (`docker
//!   context use`), else the first engine socket that exists (Docker Desktop, Colima, …, then
//!   `/var/run/docker.sock` on macOS; rootless Docker, rootless Podman, rootful Podman, then
//!   `/var/run/docker.sock` on Linux: `crate::config::docker::sockets`), else
//!   `unix:///var/run/docker.sock` (`crate::config::docker` says why in that order). The
//!   driver is configured when an address was named or a socket found, or when `enabled =
//!   true`; `enabled = false` switches it off. A context that cannot be followed leaves the
//!   driver configured and failing every call with an error naming the context and its file,
//!   never falling back to a socket. What chose the address is in every `check` (`sandguard
//!   providers`), reachable or not, and in a debug line when the registry is built.
//! - API version: `DOCKER_API_VERSION` or `api_version` pins it; otherwise it is negotiated
//!   with the daemon once per process, so Engine API 1.41 (Docker 20.10) and newer all work.
//! - Listing (`list`): containers in every state (`all=true`), networks and volumes, each
//!   filtered by the selector's labels on the daemon side and checked again here; each kind
//!   on its own, so one that fails does not hide the others ([`Provider::list_parts`]). A
//!   container's `sandguard.*` labels inherited from its image are not ownership and are
//!   dropped (`image`).
//! - Claims (`claim`): a container id, `network/ID` or `volume/NAME`, never a name; a volume
//!   claim is pinned to the volume it named when it was made (`volume/NAME@CREATED`): a name is
//!   not an identity.
//! - One claimed object looked up (`describe`): for a claim no listing answered for, its labels
//!   and identity as a listing would show them, for the judgement.
//! - Following (`follow`, sidecars only): the session's containers as Docker's event stream
//!   creates and destroys them, so the reclaim at death removes them before it lists, and a
//!   full id the stream proves exists is removed without the inspect below.
//! - Removal: containers and networks are first resolved to the one full id Docker inspects
//!   them as (`claim`: a stranger that merely carries our id as its name is refused), then
//!   removed by that id; containers with `force` and their anonymous volumes (`v=true`);
//!   volumes by name. "No such …" (404) and "removal … already in progress" (409) mean the
//!   resource is gone. A network with active endpoints is retried, after the endpoints of
//!   containers that no longer exist were force-disconnected (`network`). Order across kinds
//!   is the reclaim path's job ([`super::Kind`]).
//!
//! Podman, through its Docker-compatible API (`podman system service`; proven on rootless
//! Podman 4.3 by `tests/run.sh` step 1b), differs in these ways, each handled where named:
//! - **Events**: a container's removal comes as `remove`, never `destroy` (`follow`).
//! - **Networks**: removed with live containers attached (204) where Docker refuses, so their
//!   endpoints are looked at first on every engine (`network`).
//! - **Pods**: a pod made with the session's labels lists as its infra container, which
//!   Podman refuses to remove alone (500); that refusal removes the pod, unless it holds a
//!   container that is not the session's (`pod`). A pod without an infra container (`podman
//!   pod create --infra=false`) has nothing to list and nothing running; emptied, it stays.
//!   A container in a pod takes Podman's stop timeout to remove even when forced (10.1 s on
//!   4.3, against 0.2 s for one alone, measured with the compatible `DELETE ?force=1`,
//!   which is also what `docker rm -f` sends): Podman's work, left as it is; the pod's own
//!   removal kills at once (`timeout=0`).
//! - **"Already gone"**: 404 with "no such container" / "no such volume" / "network not
//!   found", and concurrent forced removals of one container answer 204 or 404, never
//!   Docker's 409 "already in progress" (measured: 29 × 204 and 61 × 404 over 15 containers
//!   removed 6 times at once); a volume in use answers 409 as Docker does. All map as on
//!   Docker (`error`).
//! - **Label filters** (`label=KEY=VALUE`, on containers, networks and volumes, and on
//!   events) match as Docker's do; the listing checks the labels again anyway.
//! - **API version**: `/version` says `ApiVersion` 1.41 (Podman 4.3) and Podman accepts any
//!   `/vX.Y` prefix, so negotiation settles on 1.41 and nothing is pinned.
//! - **Podman's own API** (`/libpod/`) is not the Docker API: the proxy refuses all but its
//!   reads (`proxy::target::LIBPOD_REFUSED`); what Podman's own clients make, reaching the
//!   engine directly, is sandguard's when it carries `$SANDGUARD_LABELS`.

mod claim;
pub(crate) mod daemon;
mod describe;
mod error;
mod follow;
mod image;
mod list;
mod network;
mod pod;

use std::sync::Arc;

use bollard::query_parameters::RemoveContainerOptions;
use bollard::{ClientVersion, Docker};
use tokio::sync::OnceCell;

use super::{
    Capabilities, Described, Entry, EntryState, GoneTx, Kind, Listing, Provider, ProviderError,
    Refusal, Sandbox,
};
use crate::config::docker::{DaemonAddress, HostError, Origin, DEFAULT_HOST};
use crate::config::DockerSettings;
use crate::labels::Selector;
use error::{classify, short};

/// What bollard's client starts at before negotiation lowers it to what the daemon speaks.
const NEWEST_API: ClientVersion = ClientVersion {
    major_version: 1,
    minor_version: 53,
};

/// Whether Docker is configured: enabled in the config, or a daemon named (`DOCKER_HOST`, a
/// context, the file's `host`) or an engine's socket found, even one skipped as unsafe (a
/// socket there says Docker is used here: every use then fails saying why, never silently);
/// never when disabled. Settings without a resolved host (built by hand) are the default
/// address, not looked for.
pub(crate) fn configured(settings: &DockerSettings) -> bool {
    match settings.enabled {
        Some(enabled) => enabled,
        None => settings
            .host
            .as_ref()
            .is_some_and(|h| !matches!(h.origin, Origin::Default { .. })),
    }
}

/// Builds the registry entry from settings: configured or not, and why.
pub(crate) fn entry(settings: &DockerSettings) -> Entry {
    let host = address(settings);
    if let Some(h) = &settings.host {
        match &h.address {
            Ok(address) => tracing::debug!("Docker daemon: {address} ({})", h.via),
            Err(_) => tracing::debug!("Docker daemon: - ({})", h.via),
        }
    }
    let state = match (settings.enabled, configured(settings)) {
        (Some(false), _) => EntryState::Unconfigured(
            "disabled in config ([providers.docker] enabled = false)".into(),
        ),
        (_, true) => EntryState::Configured(Arc::new(DockerProvider::new(host, settings))),
        (_, false) => {
            let looked = match settings.host.as_ref().map(|h| &h.origin) {
                Some(Origin::Default { looked }) => crate::config::docker::sockets::shown(looked),
                _ => DEFAULT_HOST.trim_start_matches("unix://").to_string(),
            };
            EntryState::Unconfigured(format!(
                "no DOCKER_HOST, no Docker context, no [providers.docker] host, and no engine \
                 socket exists at {looked}"
            ))
        }
    };
    Entry {
        name: "docker",
        state,
    }
}

/// The daemon's address, or why there is none (a Docker context that cannot be followed,
/// every engine socket skipped: `crate::config::docker`); the latter fails every use, naming
/// its cause.
pub(crate) fn address(settings: &DockerSettings) -> Result<DaemonAddress, HostError> {
    match &settings.host {
        Some(h) => h.address.clone(),
        None => Ok(DaemonAddress::new(DEFAULT_HOST)),
    }
}

/// A Docker daemon reached through bollard. The client is built on first use, so building the
/// registry never touches the daemon.
pub(crate) struct DockerProvider {
    /// Printed only redacted, wherever an error or `check` names it.
    host: DaemonAddress,
    /// Why there is no address to use (a Docker context that cannot be followed, every
    /// engine socket skipped); every use fails with it.
    unusable: Option<HostError>,
    /// What named the address (`DOCKER_HOST`, a context, …), for `check`.
    via: Option<String>,
    api_version: Option<String>,
    timeout: std::time::Duration,
    client: OnceCell<Docker>,
    /// Images' sandguard labels, to drop what containers inherited (`image`).
    images: image::ImageCache,
    /// What a sidecar's event stream proved of its session's containers (`follow`).
    followed: follow::Followed,
}

impl DockerProvider {
    /// `host`: the address, or why it cannot be had (every call then fails with that).
    pub(crate) fn new(host: Result<DaemonAddress, HostError>, settings: &DockerSettings) -> Self {
        let (host, unusable) = match host {
            Ok(h) => (h, None),
            Err(why) => (DaemonAddress::new(""), Some(why)),
        };
        DockerProvider {
            host,
            unusable,
            via: settings.host.as_ref().map(|h| h.via.clone()),
            api_version: settings.api_version.clone(),
            timeout: settings.timeout,
            client: OnceCell::new(),
            images: image::ImageCache::default(),
            followed: follow::Followed::default(),
        }
    }

    pub(super) async fn client(&self) -> Result<&Docker, ProviderError> {
        self.client.get_or_try_init(|| self.connect()).await
    }

    async fn connect(&self) -> Result<Docker, ProviderError> {
        if let Some(why) = &self.unusable {
            return Err(ProviderError::fatal(why.to_string()));
        }
        let secs = self.timeout.as_secs().max(1);
        let pinned = self
            .api_version
            .as_deref()
            .map(parse_api_version)
            .transpose()?;
        let version = pinned.as_ref().unwrap_or(&NEWEST_API);
        let host = self.host.expose();
        let docker = if host.starts_with("unix://") {
            Docker::connect_with_unix(host, secs, version)
        } else if host.starts_with("tcp://") || host.starts_with("http://") {
            Docker::connect_with_http(host, secs, version)
        } else {
            return Err(ProviderError::fatal(format!(
                "unsupported Docker host {:?}: use unix:///path or tcp://host:port",
                self.host
            )));
        }
        .map_err(|e| classify(&self.host, "connect to", e))?;
        if pinned.is_some() {
            return Ok(docker);
        }
        docker
            .negotiate_version()
            .await
            .map_err(|e| classify(&self.host, "negotiate the API version with", e))
    }
}

#[async_trait::async_trait]
impl Provider for DockerProvider {
    fn name(&self) -> &str {
        "docker"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            labels: true,
            ttl: false,
            pagination: false,
        }
    }

    async fn list(&self, selector: &Selector) -> Result<Vec<Sandbox>, ProviderError> {
        let listing = self.list_each(selector).await;
        match list::combined(listing.errors) {
            Some(error) => Err(error),
            None => Ok(listing.found),
        }
    }

    async fn list_parts(&self, selector: &Selector) -> Listing {
        self.list_each(selector).await
    }

    /// A local daemon: connect (and negotiate the API version) soon after start, so the first
    /// removal after the owner's death goes out at once.
    fn warm_up(&self) -> bool {
        true
    }

    /// Follows the session's containers on Docker's event stream (`follow`).
    async fn follow(&self, session: &str, began_ms: Option<u64>, gone: GoneTx) {
        self.follow_session(session, began_ms, gone).await;
    }

    fn known(&self, session: &str) -> Option<crate::providers::Following> {
        self.followed.known(session)
    }

    fn parse_claim(&self, id: &str) -> Result<Sandbox, Refusal> {
        claim::parse(id).map_err(|e| Refusal(e.to_string()))
    }

    fn claim_id(&self, sandbox: &Sandbox) -> String {
        claim::render(sandbox)
    }

    /// A volume claim without its identity: volumes have only names (`claim`).
    fn pins(&self, claimed: &Sandbox) -> bool {
        claimed.kind == Kind::Volume && claimed.identity.is_none()
    }

    async fn describe(&self, claimed: &Sandbox) -> Result<Described, ProviderError> {
        self.describe_one(claimed).await
    }

    fn names(&self, claimed: &Sandbox, listed: &Sandbox) -> bool {
        claim::names(claimed, listed)
    }

    async fn remove(&self, sandbox: &Sandbox) -> Result<(), ProviderError> {
        let docker = self.client().await?;
        // A full id this sidecar's event stream proves exists names that container and no
        // other (`follow`); anything else is resolved, so a look-alike name is refused.
        let id = if sandbox.kind == Kind::Instance && self.followed.exists(&sandbox.id) {
            sandbox.id.clone()
        } else {
            claim::resolve(docker, &self.host, sandbox).await?
        };
        let result = match sandbox.kind {
            Kind::Instance => {
                let options = RemoveContainerOptions {
                    force: true,
                    v: true,
                    link: false,
                };
                match docker.remove_container(&id, Some(options)).await {
                    Err(e) if pod::is_infra_refusal(&e) => {
                        return pod::remove(&self.host, self.timeout, &id).await;
                    }
                    result => result,
                }
            }
            Kind::Network => return network::remove(docker, &self.host, &id).await,
            Kind::Volume => {
                docker
                    .remove_volume(&id, None::<bollard::query_parameters::RemoveVolumeOptions>)
                    .await
            }
        };
        result.map_err(|e| {
            classify(
                &self.host,
                &format!("remove {} {} on", sandbox.kind.as_str(), short(&id)),
                e,
            )
        })
    }

    /// The daemon's version, at which address and what chose it; a daemon that does not
    /// answer is said with what chose its address too (a stale engine socket: the others
    /// present are named there), unless the address could not be had at all (that error
    /// names its source already).
    async fn check(&self) -> Result<String, ProviderError> {
        let version = async {
            self.client()
                .await?
                .version()
                .await
                .map_err(|e| classify(&self.host, "query", e))
        };
        let version = version
            .await
            .map_err(|e| match (&self.unusable, &self.via) {
                (None, Some(via)) => noting(e, via),
                _ => e,
            })?;
        let via = self
            .via
            .as_ref()
            .map_or_else(String::new, |v| format!(" (from {v})"));
        Ok(format!(
            "Docker {} (API {}) at {}{via}",
            version.version.unwrap_or_else(|| "?".into()),
            version.api_version.unwrap_or_else(|| "?".into()),
            self.host
        ))
    }
}

/// `e`, its message followed by ` (from {via})`, its kind kept.
fn noting(mut e: ProviderError, via: &str) -> ProviderError {
    let from = format!(" (from {via})");
    match &mut e {
        ProviderError::Gone(d)
        | ProviderError::Fatal(d)
        | ProviderError::Transient { message: d, .. } => d.message.push_str(&from),
        ProviderError::Refused(m) => m.push_str(&from),
    }
    e
}

fn parse_api_version(v: &str) -> Result<ClientVersion, ProviderError> {
    let bad = || {
        ProviderError::fatal(format!(
            "invalid Docker API version {v:?}: expected MAJOR.MINOR such as 1.41"
        ))
    };
    let (major, minor) = v.trim_start_matches('v').split_once('.').ok_or_else(bad)?;
    Ok(ClientVersion {
        major_version: major.parse().map_err(|_| bad())?,
        minor_version: minor.parse().map_err(|_| bad())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every socket found skipped is Docker configured and failing, naming them: the user's
    /// own engine in a directory others can write is not silently left unguarded.
    #[test]
    fn every_socket_skipped_is_configured_and_fails_saying_why() {
        use crate::config::docker::{sockets, DockerHost};
        let fake = sockets::tests::fake_linux("untrusted-driver");
        let list = sockets::tests::linux_list(&fake);
        let _listener = sockets::tests::FakeMac::bind(&list[0].path);
        sockets::tests::chmod(list[0].path.parent().unwrap(), 0o1777);
        let host: DockerHost = sockets::search(&list);
        let settings = DockerSettings {
            enabled: None,
            host: Some(host),
            api_version: None,
            timeout: std::time::Duration::from_secs(1),
        };
        assert!(configured(&settings));
        let why = address(&settings).unwrap_err().to_string();
        assert!(
            why.contains("skipped as unsafe: rootless Docker's socket"),
            "{why}"
        );
    }

    #[test]
    fn api_versions_parse() {
        let v = parse_api_version("1.41").unwrap();
        assert_eq!((v.major_version, v.minor_version), (1, 41));
        assert!(parse_api_version("latest").is_err());
    }
}
