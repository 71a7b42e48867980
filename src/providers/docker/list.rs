//! Listing: containers in every state (`all=true`), networks and volumes, each filtered by the
//! selector's labels on the daemon side and checked again here (the guard against a daemon,
//! or a proxy, that ignored the filter).
//!
//! Containers lose the `sandguard.*` labels they inherited from their image (`image`): those
//! are not ownership; an inherited `sandguard.session` is kept but marked, for the judgement
//! to count only while its session lived.
//!
//! The three kinds are listed independently: one that fails (a broken volume plugin fails
//! every volume listing) is reported in [`Listing::errors`] beside what the others found, so
//! it never hides a session's containers. [`combined`] folds the errors back into one for the
//! all-or-nothing [`crate::providers::Provider::list`].

use std::collections::{BTreeMap, HashMap};

use bollard::models::ContainerSummary;
use bollard::query_parameters::{ListContainersOptions, ListNetworksOptions, ListVolumesOptions};
use bollard::Docker;

use super::error::{classify, short};
use super::image::{bare, own_labels, Image};
use super::DockerProvider;
use crate::labels::Selector;
use crate::providers::{Kind, Listing, ProviderError, Sandbox};

/// Podman's Docker-compatible API lists a container in a state of its own for a moment,
/// `stopped` (its process ended, Podman's clean-up not yet done), which the Engine API's
/// schema, and so bollard, does not have: the whole listing then fails to parse, whoever's
/// the container. The listing is asked again, [`UNPARSED_PAUSE`] later, up to
/// [`UNPARSED_RETRIES`] times; an answer that still does not parse is the error it was (and
/// unknown is not dead: nothing is judged on it).
const UNPARSED_RETRIES: u32 = 5;
const UNPARSED_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

impl DockerProvider {
    /// Containers, networks and volumes, each on its own: what failed is reported beside what
    /// was found.
    pub(super) async fn list_each(&self, selector: &Selector) -> Listing {
        let docker = match self.client().await {
            Ok(docker) => docker,
            Err(e) => return Listing::from(Err(e)),
        };
        let filters = label_filters(selector);
        let (containers, networks, volumes) = tokio::join!(
            self.list_containers(docker, filters.clone(), selector),
            self.list_networks(docker, filters.clone()),
            self.list_volumes(docker, filters),
        );
        let mut listing = containers;
        for part in [networks, volumes] {
            match part {
                Ok(found) => listing.found.extend(found),
                Err(e) => listing.errors.push(e),
            }
        }
        listing
    }

    /// Containers in every state, with the labels inherited from their images dropped
    /// (`image`); a container whose image could not be checked is an error, not a sandbox.
    pub(super) async fn list_containers(
        &self,
        docker: &Docker,
        filters: HashMap<String, Vec<String>>,
        selector: &Selector,
    ) -> Listing {
        let options = ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        };
        let mut unparsed = 0;
        let containers = loop {
            match docker.list_containers(Some(options.clone())).await {
                Ok(containers) => break containers,
                Err(bollard::errors::Error::JsonDataError { .. })
                    if unparsed < UNPARSED_RETRIES =>
                {
                    unparsed += 1;
                    tokio::time::sleep(UNPARSED_PAUSE).await;
                }
                Err(e) => return Listing::from(Err(classify(&self.host, "list containers on", e))),
            }
        };
        // Only what the selector wants is worth an image lookup.
        let wanted: Vec<ContainerSummary> = containers
            .into_iter()
            .filter(|c| c.id.is_some())
            .filter(|c| selector.matches(&sorted(c.labels.clone().unwrap_or_default())))
            .collect();
        let image_ids = wanted.iter().filter_map(|c| c.image_id.clone()).collect();
        let images = self.images.lookup(docker, &self.host, image_ids).await;
        let mut listing = Listing::default();
        for c in wanted {
            match container(c, &images) {
                Ok(Some(sandbox)) => listing.found.push(sandbox),
                Ok(None) => {}
                Err(e) => listing.errors.push(e),
            }
        }
        listing
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
                    inherited: false,
                    identity: None,
                    provider: "docker".into(),
                    kind: Kind::Network,
                    id: n.id?,
                    status: "network".into(),
                    created_at: n.created.as_deref().and_then(crate::timefmt::parse_rfc3339),
                    expires_at: None,
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
            .map(volume)
            .collect())
    }
}

/// One volume as a sandbox: its name is its id, its creation time its identity (`claim`).
pub(super) fn volume(v: bollard::models::Volume) -> Sandbox {
    let created_at = v
        .created_at
        .as_deref()
        .and_then(crate::timefmt::parse_rfc3339);
    Sandbox {
        inherited: false,
        identity: super::claim::volume_identity(created_at),
        provider: "docker".into(),
        kind: Kind::Volume,
        id: v.name,
        status: "volume".into(),
        created_at,
        expires_at: None,
        image: None,
        labels: sorted(v.labels),
    }
}

/// One listed container as a sandbox, its inherited sandguard labels dropped; `None` when it
/// has no id; an error when its image could not be checked (see `image`).
pub(super) fn container(
    c: ContainerSummary,
    images: &HashMap<String, Result<Image, ProviderError>>,
) -> Result<Option<Sandbox>, ProviderError> {
    let Some(id) = c.id else { return Ok(None) };
    let labels = sorted(c.labels.unwrap_or_default());
    let left_out = |why: String| {
        format!(
            "docker container {} left out: its own sandguard labels cannot be told from its image's ({why})",
            short(&id)
        )
    };
    let image = c.image_id.as_deref().filter(|i| !i.is_empty());
    let (labels, inherited) = match image.map(|i| (i, images.get(i))) {
        Some((_, Some(Ok(Image::Exists(from_image))))) => own_labels(labels, from_image),
        Some((_, Some(Ok(Image::Gone)))) => (labels, false),
        Some((_, Some(Err(e)))) => {
            return Err(match e {
                ProviderError::Transient {
                    message,
                    retry_after,
                } => ProviderError::Transient {
                    message: left_out(message.message.clone()).into(),
                    retry_after: *retry_after,
                },
                other => ProviderError::fatal(left_out(other.to_string())),
            })
        }
        Some((i, None)) => {
            return Err(ProviderError::fatal(left_out(format!(
                "image {} was not looked up",
                bare(i)
            ))))
        }
        None => {
            return Err(ProviderError::fatal(left_out(
                "Docker did not say which image it was created from".into(),
            )))
        }
    };
    Ok(Some(Sandbox {
        inherited,
        identity: None,
        provider: "docker".into(),
        kind: Kind::Instance,
        id,
        status: c
            .state
            .map(|s| s.to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "unknown".into()),
        created_at: c.created,
        expires_at: None,
        image: c.image,
        labels,
    }))
}

/// The selector as Docker's `label` filter (all terms must match).
pub(super) fn label_filters(selector: &Selector) -> HashMap<String, Vec<String>> {
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

/// All of a listing's errors as one: the first one's class, every message.
pub(super) fn combined(mut errors: Vec<ProviderError>) -> Option<ProviderError> {
    if errors.is_empty() {
        return None;
    }
    let first = errors.remove(0);
    if errors.is_empty() {
        return Some(first);
    }
    let also: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let more = |m: String| format!("{m}; also: {}", also.join("; "));
    Some(first.map_message(more))
}

pub(super) fn sorted(labels: HashMap<String, String>) -> BTreeMap<String, String> {
    labels.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_become_label_filters() {
        let f = label_filters(&Selector::session("s1"));
        assert_eq!(f["label"], vec!["sandguard.session=s1".to_string()]);
        let f = label_filters(&Selector::managed());
        assert_eq!(f["label"], vec!["sandguard.session".to_string()]);
    }

    #[test]
    fn a_containers_image_decides_its_labels_or_leaves_it_out() {
        use std::sync::Arc;
        let session = BTreeMap::from([("sandguard.session".to_string(), "S".to_string())]);
        let summary = |image: Option<&str>| ContainerSummary {
            id: Some("0123456789abcdef".into()),
            image_id: image.map(str::to_string),
            labels: Some(session.clone().into_iter().collect()),
            ..Default::default()
        };
        let images = HashMap::from([
            (
                "sha256:inherits".to_string(),
                Ok(Image::Exists(Arc::new(session.clone()))),
            ),
            (
                "sha256:plain".to_string(),
                Ok(Image::Exists(Arc::default())),
            ),
            ("sha256:deleted".to_string(), Ok(Image::Gone)),
            (
                "sha256:flaky".to_string(),
                Err(ProviderError::transient("timed out")),
            ),
        ]);
        let labels = |image| {
            container(summary(Some(image)), &images)
                .map(|s| s.map(|s| (s.labels, s.inherited)))
                .map_err(|e| e.to_string())
        };
        // Inherited: kept, marked (the judgement counts it only while its session lived).
        assert_eq!(labels("sha256:inherits"), Ok(Some((session.clone(), true))));
        assert_eq!(labels("sha256:plain"), Ok(Some((session.clone(), false))));
        assert_eq!(labels("sha256:deleted"), Ok(Some((session.clone(), false))));
        let Err(ProviderError::Transient { message, .. }) =
            container(summary(Some("sha256:flaky")), &images)
        else {
            panic!("a failed image lookup must be a transient listing error")
        };
        assert!(
            message.contains("0123456789ab") && message.contains("timed out"),
            "{message}"
        );
        assert!(container(summary(None), &images).is_err());
    }

    #[test]
    fn listing_errors_combine_into_the_first_ones_class() {
        assert_eq!(combined(vec![]), None);
        let one = ProviderError::Fatal("a".into());
        assert_eq!(combined(vec![one.clone()]), Some(one));
        let both = combined(vec![
            ProviderError::transient("volumes failed"),
            ProviderError::Fatal("networks failed".into()),
        ]);
        assert_eq!(
            both,
            Some(ProviderError::transient(
                "volumes failed; also: networks failed"
            ))
        );
    }
}
