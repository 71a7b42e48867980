//! The Docker driver, on bollard.
//!
//! - Address: `DOCKER_HOST` (`unix://` or `tcp://`), else `[providers.docker] host`, else
//!   `unix:///var/run/docker.sock`. The driver is configured when an address was given, when
//!   `enabled = true`, or when the default socket exists; `enabled = false` switches it off.
//! - API version: `DOCKER_API_VERSION` or `api_version` pins it; otherwise it is negotiated
//!   with the daemon once per process, so Engine API 1.41 (Docker 20.10) and newer all work.
//! - Listing: containers in every state (`all=true`), networks and volumes, each filtered by
//!   the selector's labels on the daemon side and checked again here.
//! - Removal: containers with `force` and their anonymous volumes (`v=true`); networks and
//!   volumes by id/name. "No such …" (404) and "removal … already in progress" (409) mean the
//!   resource is gone. Order across kinds is the reclaim path's job ([`super::Kind`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bollard::errors::Error as BollardError;
use bollard::query_parameters::{
    ListContainersOptions, ListNetworksOptions, ListVolumesOptions, RemoveContainerOptions,
};
use bollard::{ClientVersion, Docker};
use tokio::sync::OnceCell;

use super::{Capabilities, Entry, EntryState, Kind, Provider, ProviderError, Sandbox};
use crate::config::DockerSettings;
use crate::labels::Selector;

/// Where the daemon listens when nothing says otherwise.
pub const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";
/// What bollard's client starts at before negotiation lowers it to what the daemon speaks.
const NEWEST_API: ClientVersion = ClientVersion {
    major_version: 1,
    minor_version: 53,
};

/// Builds the registry entry from settings: configured or not, and why.
pub fn entry(settings: &DockerSettings) -> Entry {
    let host = settings
        .host
        .clone()
        .unwrap_or_else(|| DEFAULT_HOST.to_string());
    let state = match settings.enabled {
        Some(false) => EntryState::Unconfigured(
            "disabled in config ([providers.docker] enabled = false)".into(),
        ),
        Some(true) => EntryState::Configured(Arc::new(DockerProvider::new(host, settings))),
        None if settings.host.is_some() => {
            EntryState::Configured(Arc::new(DockerProvider::new(host, settings)))
        }
        None if std::path::Path::new(DEFAULT_HOST.trim_start_matches("unix://")).exists() => {
            EntryState::Configured(Arc::new(DockerProvider::new(host, settings)))
        }
        None => EntryState::Unconfigured(format!(
            "no DOCKER_HOST, no [providers.docker] host, and {} does not exist",
            DEFAULT_HOST.trim_start_matches("unix://")
        )),
    };
    Entry {
        name: "docker",
        state,
    }
}

/// A Docker daemon reached through bollard. The client is built on first use, so building the
/// registry never touches the daemon.
pub struct DockerProvider {
    host: String,
    api_version: Option<String>,
    timeout: std::time::Duration,
    client: OnceCell<Docker>,
}

impl DockerProvider {
    pub fn new(host: String, settings: &DockerSettings) -> Self {
        DockerProvider {
            host,
            api_version: settings.api_version.clone(),
            timeout: settings.timeout,
            client: OnceCell::new(),
        }
    }

    async fn client(&self) -> Result<&Docker, ProviderError> {
        self.client.get_or_try_init(|| self.connect()).await
    }

    async fn connect(&self) -> Result<Docker, ProviderError> {
        let secs = self.timeout.as_secs().max(1);
        let pinned = self
            .api_version
            .as_deref()
            .map(parse_api_version)
            .transpose()?;
        let version = pinned.as_ref().unwrap_or(&NEWEST_API);
        let docker = if self.host.starts_with("unix://") {
            Docker::connect_with_unix(&self.host, secs, version)
        } else if self.host.starts_with("tcp://") || self.host.starts_with("http://") {
            Docker::connect_with_http(&self.host, secs, version)
        } else {
            return Err(ProviderError::Fatal(format!(
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

    async fn list_containers(
        &self,
        docker: &Docker,
        filters: HashMap<String, Vec<String>>,
    ) -> Result<Vec<Sandbox>, ProviderError> {
        let options = ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        };
        let containers = docker
            .list_containers(Some(options))
            .await
            .map_err(|e| classify(&self.host, "list containers on", e))?;
        Ok(containers
            .into_iter()
            .filter_map(|c| {
                Some(Sandbox {
                    provider: "docker".into(),
                    kind: Kind::Instance,
                    id: c.id?,
                    status: c
                        .state
                        .map(|s| s.to_string())
                        .filter(|s| !s.is_empty())
                        .unwrap_or_else(|| "unknown".into()),
                    created_at: c.created,
                    image: c.image,
                    labels: sorted(c.labels.unwrap_or_default()),
                })
            })
            .collect())
    }

    async fn list_networks(
        &self,
        docker: &Docker,
        filters: HashMap<String, Vec<String>>,
    ) -> Result<Vec<Sandbox>, ProviderError> {
        let options = ListNetworksOptions {
            filters: Some(filters),
        };
        let networks = docker
            .list_networks(Some(options))
            .await
            .map_err(|e| classify(&self.host, "list networks on", e))?;
        Ok(networks
            .into_iter()
            .filter_map(|n| {
                Some(Sandbox {
                    provider: "docker".into(),
                    kind: Kind::Network,
                    id: n.id?,
                    status: "network".into(),
                    created_at: n.created.as_deref().and_then(crate::timefmt::parse_rfc3339),
                    image: None,
                    labels: sorted(n.labels.unwrap_or_default()),
                })
            })
            .collect())
    }

    async fn list_volumes(
        &self,
        docker: &Docker,
        filters: HashMap<String, Vec<String>>,
    ) -> Result<Vec<Sandbox>, ProviderError> {
        let options = ListVolumesOptions {
            filters: Some(filters),
        };
        let response = docker
            .list_volumes(Some(options))
            .await
            .map_err(|e| classify(&self.host, "list volumes on", e))?;
        Ok(response
            .volumes
            .unwrap_or_default()
            .into_iter()
            .map(|v| Sandbox {
                provider: "docker".into(),
                kind: Kind::Volume,
                id: v.name,
                status: "volume".into(),
                created_at: v
                    .created_at
                    .as_deref()
                    .and_then(crate::timefmt::parse_rfc3339),
                image: None,
                labels: sorted(v.labels),
            })
            .collect())
    }
}

impl DockerProvider {
    /// A claimed id that is not a full 64-hex id: Docker would also accept a container *name*
    /// or any unique id prefix in that place, so a claim could reach a stranger that merely
    /// has a matching name. Only an id prefix of at least 12 hex digits of the container it
    /// resolves to is accepted; anything else is refused.
    async fn resolve_claim(&self, docker: &Docker, claim: &str) -> Result<String, ProviderError> {
        let refuse = || {
            ProviderError::Fatal(format!(
                "refusing to remove docker container {claim:?}: a claim must name a container id (12 or more hex digits), not a name"
            ))
        };
        if claim.len() < 12 || !claim.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(refuse());
        }
        let inspected = docker
            .inspect_container(
                claim,
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await
            .map_err(|e| {
                classify(
                    &self.host,
                    &format!("inspect container {}", short(claim)),
                    e,
                )
            })?;
        match inspected.id {
            Some(full) if full.starts_with(claim) => Ok(full),
            _ => Err(refuse()),
        }
    }
}

fn is_full_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())
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
        let docker = self.client().await?;
        let filters = label_filters(selector);
        let (containers, networks, volumes) = tokio::try_join!(
            self.list_containers(docker, filters.clone()),
            self.list_networks(docker, filters.clone()),
            self.list_volumes(docker, filters),
        )?;
        let mut all = containers;
        all.extend(networks);
        all.extend(volumes);
        // The daemon filtered already; this is the guard against a daemon (or proxy) that
        // ignored the filter.
        all.retain(|s| selector.matches(&s.labels));
        Ok(all)
    }

    async fn remove(&self, sandbox: &Sandbox) -> Result<(), ProviderError> {
        let docker = self.client().await?;
        let resolved;
        let id = match sandbox.kind {
            Kind::Instance if !is_full_id(&sandbox.id) => {
                resolved = self.resolve_claim(docker, &sandbox.id).await?;
                resolved.as_str()
            }
            _ => sandbox.id.as_str(),
        };
        let result = match sandbox.kind {
            Kind::Instance => {
                let options = RemoveContainerOptions {
                    force: true,
                    v: true,
                    link: false,
                };
                docker.remove_container(id, Some(options)).await
            }
            Kind::Network => docker.remove_network(id).await,
            Kind::Volume => {
                docker
                    .remove_volume(id, None::<bollard::query_parameters::RemoveVolumeOptions>)
                    .await
            }
        };
        result.map_err(|e| {
            classify(
                &self.host,
                &format!("remove {} {} on", sandbox.kind.as_str(), short(id)),
                e,
            )
        })
    }

    async fn check(&self) -> Result<String, ProviderError> {
        let docker = self.client().await?;
        let version = docker
            .version()
            .await
            .map_err(|e| classify(&self.host, "query", e))?;
        Ok(format!(
            "Docker {} (API {}) at {}",
            version.version.unwrap_or_else(|| "?".into()),
            version.api_version.unwrap_or_else(|| "?".into()),
            self.host
        ))
    }
}

/// What a claimed Docker id names: `network/ID` a network (an id of 12 or more hex digits;
/// anything else is left as a container claim, which removal then refuses), `volume/NAME` a
/// volume (volumes have only names), anything else a container (the Docker API proxy claims networks and volumes this way; a bare id
/// would be taken for a container, and Docker resolves container names too).
pub fn claimed_kind(id: &str) -> (Kind, &str) {
    match id.split_once('/') {
        // Ids only: Docker resolves network names too, and a name could reach a stranger.
        Some(("network", rest))
            if rest.len() >= 12 && rest.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            (Kind::Network, rest)
        }
        Some(("volume", rest)) if !rest.is_empty() => (Kind::Volume, rest),
        _ => (Kind::Instance, id),
    }
}

/// The selector as Docker's `label` filter (all terms must match).
fn label_filters(selector: &Selector) -> HashMap<String, Vec<String>> {
    let terms = selector
        .terms()
        .iter()
        .map(|(k, v)| match v {
            Some(v) => format!("{k}={v}"),
            None => k.clone(),
        })
        .collect();
    HashMap::from([("label".to_string(), terms)])
}

fn sorted(labels: HashMap<String, String>) -> BTreeMap<String, String> {
    labels.into_iter().collect()
}

/// The first 12 characters of an id, as `docker ps` shows it.
fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

fn parse_api_version(v: &str) -> Result<ClientVersion, ProviderError> {
    let bad = || {
        ProviderError::Fatal(format!(
            "invalid Docker API version {v:?}: expected MAJOR.MINOR such as 1.41"
        ))
    };
    let (major, minor) = v.trim_start_matches('v').split_once('.').ok_or_else(bad)?;
    Ok(ClientVersion {
        major_version: major.parse().map_err(|_| bad())?,
        minor_version: minor.parse().map_err(|_| bad())?,
    })
}

/// Maps a bollard error onto the classes reclaim decides by.
fn classify(host: &str, doing: &str, err: BollardError) -> ProviderError {
    match err {
        BollardError::DockerResponseServerError {
            status_code,
            message,
        } => {
            let text = format!("failed to {doing} {host}: {message} (HTTP {status_code})");
            classify_status(status_code, &message, text)
        }
        BollardError::SocketNotFoundError(path) => ProviderError::transient(format!(
            "failed to {doing} {host}: socket {path} does not exist (is dockerd running?)"
        )),
        BollardError::RequestTimeoutError => {
            ProviderError::transient(format!("failed to {doing} {host}: request timed out"))
        }
        other => ProviderError::transient(format!("failed to {doing} {host}: {}", flatten(&other))),
    }
}

fn classify_status(status: u16, message: &str, text: String) -> ProviderError {
    let lower = message.to_ascii_lowercase();
    match status {
        404 => ProviderError::Gone(text),
        409 if lower.contains("already in progress") => ProviderError::Gone(text),
        // Running-without-force, paused, a network with endpoints, a volume in use: the
        // container removal that precedes these is usually still landing.
        409 => ProviderError::transient(text),
        429 | 500..=599 => ProviderError::transient(text),
        _ => ProviderError::Fatal(text),
    }
}

/// An error and its sources on one line: hyper's top-level messages alone say little.
fn flatten(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removal_races_count_as_gone() {
        let gone =
            |s, m: &str| matches!(classify_status(s, m, String::new()), ProviderError::Gone(_));
        assert!(gone(404, "No such container: abc"));
        assert!(gone(409, "removal of container abc is already in progress"));
        assert!(!gone(409, "container is paused and must be unpaused first"));
        assert!(matches!(
            classify_status(500, "boom", String::new()),
            ProviderError::Transient { .. }
        ));
        assert!(matches!(
            classify_status(400, "bad", String::new()),
            ProviderError::Fatal(_)
        ));
    }

    #[test]
    fn selectors_become_label_filters() {
        let f = label_filters(&Selector::session("s1"));
        assert_eq!(f["label"], vec!["sandguard.session=s1".to_string()]);
        let f = label_filters(&Selector::managed());
        assert_eq!(f["label"], vec!["sandguard.session".to_string()]);
    }

    #[test]
    fn claimed_ids_name_their_kind() {
        assert_eq!(claimed_kind("abc"), (Kind::Instance, "abc"));
        let net = "0123456789abcdef0123";
        assert_eq!(
            claimed_kind(&format!("network/{net}")),
            (Kind::Network, net)
        );
        assert_eq!(
            claimed_kind("network/name"),
            (Kind::Instance, "network/name")
        );
        assert_eq!(claimed_kind("volume/v1"), (Kind::Volume, "v1"));
        assert_eq!(claimed_kind("volume/"), (Kind::Instance, "volume/"));
    }

    #[test]
    fn api_versions_parse() {
        let v = parse_api_version("1.41").unwrap();
        assert_eq!((v.major_version, v.minor_version), (1, 41));
        assert!(parse_api_version("latest").is_err());
    }
}
