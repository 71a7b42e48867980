//! Claims: what a claimed Docker id names, and how a claimed container is resolved to exactly
//! one container before it is removed.

use bollard::Docker;

use super::error::{classify, short};
use super::DockerProvider;
use crate::providers::{Kind, ProviderError};

impl DockerProvider {
    /// A claimed id that is not a full 64-hex id: Docker would also accept a container *name*
    /// or any unique id prefix in that place, so a claim could reach a stranger that merely
    /// has a matching name. Only an id prefix of at least 12 hex digits of the container it
    /// resolves to is accepted; anything else is refused.
    pub(super) async fn resolve_claim(
        &self,
        docker: &Docker,
        claim: &str,
    ) -> Result<String, ProviderError> {
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

pub(super) fn is_full_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
