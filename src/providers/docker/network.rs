//! Removing a network, and what to do when Docker says it still has active endpoints.
//!
//! "Active endpoints" (Docker 20.10 answers 403, newer daemons may answer 409) is transient:
//! usually a container removal that is still landing, and the reclaim path retries until its
//! deadline. But dockerd sometimes keeps a stale endpoint of a container that no longer
//! exists, and then the network could never go. So on that answer the network is inspected
//! and every endpoint that provably belongs to no existing container is force-disconnected
//! before the error is reported (as transient) for the retry.
//!
//! Decisions:
//! - An endpoint is stale only when its container id (the key in `Containers`; `ep-…` keys
//!   have no container) answers 404 *and* its endpoint name answers 404 too. Anything that
//!   exists, or that could not be checked, is left: a live container is never disconnected,
//!   ours or not, and unknown is not dead. Other keys (`lb-…`, swarm's load balancer) are
//!   dockerd's own and left alone.
//! - The force disconnect names the endpoint by its *name*: for a container that does not
//!   exist, dockerd deletes the endpoint found by that name (`ForceEndpointDelete` looks the
//!   endpoint up by name, so a container id would find nothing). Since Docker would first
//!   resolve that name to a container (by name or id prefix), it is sent only after the same
//!   name was checked to resolve to none. An endpoint without a name is named by its
//!   container's id (which 404'd).
//! - **The endpoints are looked at before the removal, on every engine.** Podman (4.3, its
//!   Docker-compatible API) removes a network that live containers are attached to, answering
//!   204 and leaving them without it, where Docker refuses: sandguard would cut a stranger's
//!   container off its network. So the network is inspected first: stale endpoints are
//!   force-disconnected as above, and while a live (or unknown) container is attached the
//!   removal is not sent and is reported as transient, as Docker's refusal is, for the reclaim
//!   to retry until its deadline. One inspect more per network removal; a container attaching
//!   between the inspect and the removal is still refused by Docker, and on Podman is the one
//!   window left.

use bollard::errors::Error as BollardError;
use bollard::models::NetworkDisconnectRequest;
use bollard::Docker;

use super::error::{classify, short};
use crate::config::docker::DaemonAddress;
use crate::providers::ProviderError;

/// Removes the network with the full id `id`.
pub(super) async fn remove(
    docker: &Docker,
    host: &DaemonAddress,
    id: &str,
) -> Result<(), ProviderError> {
    let doing = format!("remove network {} on", short(id));
    let (cleared, attached) = endpoints(docker, id).await;
    if attached > 0 {
        return Err(ProviderError::transient(format!(
            "cannot {doing} {host}: it has active endpoints ({attached} live container(s) \
             attached){}",
            cleared_note(cleared)
        )));
    }
    let err = match docker.remove_network(id).await {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    if !has_active_endpoints(&err) {
        return Err(classify(host, &doing, err));
    }
    let (cleared, _) = endpoints(docker, id).await;
    let message = format!("{}{}", classify(host, &doing, err), cleared_note(cleared));
    Err(ProviderError::transient(message))
}

fn cleared_note(cleared: usize) -> String {
    match cleared {
        0 => String::new(),
        n => format!("; force-disconnected {n} endpoint(s) of containers that no longer exist"),
    }
}

/// Docker's refusal to remove a network that containers are still attached to.
fn has_active_endpoints(err: &BollardError) -> bool {
    matches!(
        err,
        BollardError::DockerResponseServerError { status_code: 403 | 409, message }
            if message.to_ascii_lowercase().contains("active endpoints")
    )
}

/// Force-disconnects the network's stale endpoints (module docs): how many it did, and how
/// many endpoints of live (or unknown) containers are attached. A disconnect that fails only
/// leaves the endpoint there: the removal is retried anyway. A network that cannot be
/// inspected counts none: its removal says what the daemon thinks.
async fn endpoints(docker: &Docker, network: &str) -> (usize, usize) {
    let inspected = match docker
        .inspect_network(
            network,
            None::<bollard::query_parameters::InspectNetworkOptions>,
        )
        .await
    {
        Ok(n) => n,
        Err(e) => {
            tracing::debug!(network = short(network), "cannot inspect endpoints: {e}");
            return (0, 0);
        }
    };
    let (mut cleared, mut attached) = (0, 0);
    for (key, endpoint) in inspected.containers.unwrap_or_default() {
        let name = endpoint.name.unwrap_or_default();
        let container = match key.strip_prefix("ep-") {
            Some(_) => None,
            None if is_full_id(&key) => Some(key.as_str()),
            // Neither a container nor a plain endpoint (`lb-…`, a swarm load balancer):
            // dockerd's own business.
            None => continue,
        };
        if !is_stale(docker, container, &name).await {
            attached += 1;
            continue;
        }
        let target = if name.is_empty() { key.clone() } else { name };
        let request = NetworkDisconnectRequest {
            container: target.clone(),
            force: Some(true),
        };
        match docker.disconnect_network(network, request).await {
            Ok(()) => {
                tracing::info!(
                    network = short(network),
                    "force-disconnected the stale endpoint {target:?} of a container that no longer exists"
                );
                cleared += 1;
            }
            Err(e) => {
                tracing::debug!(network = short(network), "disconnecting {target:?}: {e}");
                attached += 1;
            }
        }
    }
    (cleared, attached)
}

fn is_full_id(key: &str) -> bool {
    key.len() == 64 && key.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Neither the endpoint's container (when it has one) nor its name resolves to a container.
async fn is_stale(docker: &Docker, container: Option<&str>, name: &str) -> bool {
    if container.is_none() && name.is_empty() {
        return false;
    }
    for reference in container
        .into_iter()
        .chain(Some(name).filter(|n| !n.is_empty()))
    {
        if !container_is_gone(docker, reference).await {
            return false;
        }
    }
    true
}

/// Docker says no container answers to `reference` (404). Any other answer, an error
/// included, is not proof.
async fn container_is_gone(docker: &Docker, reference: &str) -> bool {
    matches!(
        docker
            .inspect_container(
                reference,
                None::<bollard::query_parameters::InspectContainerOptions>
            )
            .await,
        Err(BollardError::DockerResponseServerError {
            status_code: 404,
            ..
        })
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn active_endpoints_are_recognised_in_both_dialects() {
        let err = |status_code, message: &str| BollardError::DockerResponseServerError {
            status_code,
            message: message.into(),
        };
        assert!(has_active_endpoints(&err(
            403,
            "error while removing network: network n id abc has active endpoints"
        )));
        assert!(has_active_endpoints(&err(
            409,
            "error while removing network: network n has active endpoints (name:\"c\" id:\"1\")"
        )));
        assert!(!has_active_endpoints(&err(
            403,
            "bridge is a pre-defined network and cannot be removed"
        )));
        assert!(!has_active_endpoints(&err(404, "network n not found")));
    }
}
