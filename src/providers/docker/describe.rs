//! One claimed object looked up ([`crate::providers::Provider::describe`]): a container, a
//! network or a volume as a listing would show it (its labels as ownership reads them, its
//! identity where it has no other), for a claim that no listing answered for, and to pin a
//! volume claim when it arrives.
//!
//! - Containers and networks are inspected by the claimed id and accepted only when the
//!   inspected full id starts with it (`claim::resolve`'s rule): Docker would answer a name
//!   too, and a stranger named like our id is refused, never described as ours. A container's
//!   labels go through the inheritance rule with its image's, as in a listing.
//! - Volumes are inspected by name; what is described is the volume of that name now, with
//!   its identity, and whether it is the one a pinned claim names is for `claim::names` to
//!   say.
//! - 404 is [`Described::Gone`]; other failures are the driver's errors (`error::classify`).

use std::collections::{BTreeSet, HashMap};

use bollard::errors::Error as BollardError;
use bollard::models::ContainerSummary;

use super::error::{classify, short};
use super::list::{sorted, volume};
use super::DockerProvider;
use crate::providers::{Described, Kind, ProviderError, Sandbox};

impl DockerProvider {
    /// What Docker says now of the object `claimed` names (see the module docs).
    pub(super) async fn describe_one(&self, claimed: &Sandbox) -> Result<Described, ProviderError> {
        let docker = self.client().await?;
        let id = claimed.id.as_str();
        let doing = |noun| format!("inspect {noun} {} on", short(id));
        let found = match claimed.kind {
            Kind::Volume => docker
                .inspect_volume(id)
                .await
                .map(|v| Some(volume(v)))
                .map_err(|e| (e, doing("volume"))),
            Kind::Network => docker
                .inspect_network(id, None::<bollard::query_parameters::InspectNetworkOptions>)
                .await
                .map(|n| {
                    let full = n.id?;
                    Some(Sandbox {
                        inherited: false,
                        identity: None,
                        provider: "docker".into(),
                        kind: Kind::Network,
                        id: full,
                        status: "network".into(),
                        created_at: n.created.as_deref().and_then(crate::timefmt::parse_rfc3339),
                        expires_at: None,
                        image: None,
                        labels: sorted(n.labels.unwrap_or_default()),
                    })
                })
                .map_err(|e| (e, doing("network"))),
            Kind::Instance => match docker
                .inspect_container(
                    id,
                    None::<bollard::query_parameters::InspectContainerOptions>,
                )
                .await
            {
                Ok(c) => return self.container(c).await,
                Err(e) => Err((e, doing("container"))),
            },
        };
        match found {
            Ok(Some(s)) if claimed.kind == Kind::Volume || s.id.starts_with(id) => {
                Ok(Described::Found(s))
            }
            Ok(Some(s)) => Err(look_alike(claimed, &s.id)),
            Ok(None) => Err(ProviderError::fatal(format!(
                "Docker answered without an id for {}",
                short(id)
            ))),
            Err((
                BollardError::DockerResponseServerError {
                    status_code: 404, ..
                },
                _,
            )) => Ok(Described::Gone),
            Err((e, doing)) => Err(classify(&self.host, &doing, e)),
        }
    }

    /// An inspected container as a listing shows it: its labels read with its image's.
    async fn container(
        &self,
        c: bollard::models::ContainerInspectResponse,
    ) -> Result<Described, ProviderError> {
        let docker = self.client().await?;
        let Some(full) = c.id.clone() else {
            return Err(ProviderError::fatal(
                "Docker answered without a container id",
            ));
        };
        let image_id = c.image.clone().filter(|i| !i.is_empty());
        let images = match &image_id {
            Some(i) => {
                self.images
                    .lookup(docker, &self.host, BTreeSet::from([i.clone()]))
                    .await
            }
            None => HashMap::new(),
        };
        let config = c.config.unwrap_or_default();
        let summary = ContainerSummary {
            id: Some(full),
            image_id,
            image: config.image,
            labels: config.labels,
            created: c.created.as_deref().and_then(crate::timefmt::parse_rfc3339),
            ..Default::default()
        };
        let status = c
            .state
            .and_then(|s| s.status)
            .map(|s| s.to_string())
            .filter(|s| !s.is_empty());
        match super::list::container(summary, &images)? {
            Some(mut s) => {
                s.status = status.unwrap_or_else(|| "unknown".into());
                Ok(Described::Found(s))
            }
            None => Err(ProviderError::fatal(
                "Docker answered without a container id",
            )),
        }
    }
}

/// A claim whose id Docker resolved to another object (one *named* like the id).
fn look_alike(claimed: &Sandbox, found: &str) -> ProviderError {
    ProviderError::Refused(format!(
        "refusing docker {} {:?}: Docker resolved it to {}, which it found by that name; a \
         claim must name an id, never a name",
        claimed.kind.as_str(),
        claimed.id,
        short(found)
    ))
}
