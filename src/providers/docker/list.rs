//! Listing: containers in every state (`all=true`), networks and volumes, each filtered by the
//! selector's labels on the daemon side (the reclaim path checks them again).

use std::collections::{BTreeMap, HashMap};

use bollard::query_parameters::{ListContainersOptions, ListNetworksOptions, ListVolumesOptions};
use bollard::Docker;

use super::error::classify;
use super::DockerProvider;
use crate::labels::Selector;
use crate::providers::{Kind, ProviderError, Sandbox};

impl DockerProvider {
    pub(super) async fn list_containers(
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

    pub(super) async fn list_networks(
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

    pub(super) async fn list_volumes(
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
}
