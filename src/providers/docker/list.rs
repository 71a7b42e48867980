//! Listing: containers in every state (`all=true`), networks and volumes, each filtered by the
//! selector's labels on the daemon side and checked again here (the guard against a daemon,
//! or a proxy, that ignored the filter).
//!
//! The three kinds are listed independently: one that fails (a broken volume plugin fails
//! every volume listing) is reported in [`Listing::errors`] beside what the others found, so
//! it never hides a session's containers. [`combined`] folds the errors back into one for the
//! all-or-nothing [`crate::providers::Provider::list`].

use std::collections::{BTreeMap, HashMap};

use bollard::query_parameters::{ListContainersOptions, ListNetworksOptions, ListVolumesOptions};
use bollard::Docker;

use super::error::classify;
use super::DockerProvider;
use crate::labels::Selector;
use crate::providers::{Kind, Listing, ProviderError, Sandbox};

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
            self.list_containers(docker, filters.clone()),
            self.list_networks(docker, filters.clone()),
            self.list_volumes(docker, filters),
        );
        let mut listing = Listing::default();
        for part in [containers, networks, volumes] {
            match part {
                Ok(found) => listing.found.extend(found),
                Err(e) => listing.errors.push(e),
            }
        }
        listing.found.retain(|s| selector.matches(&s.labels));
        listing
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
    Some(match first {
        ProviderError::Gone(m) => ProviderError::Gone(more(m)),
        ProviderError::Fatal(m) => ProviderError::Fatal(more(m)),
        ProviderError::Transient {
            message,
            retry_after,
        } => ProviderError::Transient {
            message: more(message),
            retry_after,
        },
    })
}

fn sorted(labels: HashMap<String, String>) -> BTreeMap<String, String> {
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
