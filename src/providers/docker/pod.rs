//! Podman's pods: removing a container that is a pod's infra container.
//!
//! A Podman pod is a set of containers sharing namespaces, held open by its *infra*
//! container (a `podman-pause` process). Podman copies the pod's labels onto the infra
//! container, so a pod made with the session's labels (`podman pod create --label …` with
//! `$SANDGUARD_LABELS`) shows in a Docker listing as one more labelled container, and is
//! judged as one. But Podman will not remove an infra container alone: its Docker-compatible
//! `DELETE /containers/{id}` answers 500, "… is the infra container of pod … and cannot be
//! removed without removing the pod" (Podman 4.3), which the driver would otherwise retry
//! until the deadline and report as a failure at every reclaim and sweep. Docker has no pods,
//! so nothing here runs against dockerd.
//!
//! Decisions:
//! - **That answer, and only it, removes the pod**, through Podman's own API (`DELETE
//!   /libpod/pods/{id}?force=true&timeout=0`, which kills and removes its members, then the
//!   infra container). `timeout=0` as `docker rm -f` kills at once: without it Podman waits
//!   each container's stop timeout (10 s for the infra container on Podman 4.3, measured:
//!   10.58 s against 0.18 s).
//! - **The pod goes only once it holds nothing but its infra container.** The infra
//!   container was judged the session's by the one judgement (its labels are the pod's); its
//!   members are judged one by one by that same judgement, as every listed container is, and
//!   this driver decides nothing of them. So while any other member still exists, or could
//!   not be looked at (unknown is not dead), the pod's removal is not sent and is reported as
//!   transient, naming the pod and those members, like a network a live container is
//!   attached to (`network`). The session's own members are removed by the same reclaim and
//!   the retry then finds the pod empty; a stranger's container that joined the pod by name,
//!   a detached member, or one whose session label only came from its image is never taken
//!   by the pod's force removal: it keeps the pod until it goes. (Until 2026-12-05 the driver
//!   compared the members' labels itself, a second judgement that missed detaches in the
//!   ledger and labels inherited from an image.)
//! - The members are read from the pod's inspect and each inspected on its own, one request
//!   at a time: a pod holds a handful of containers, and this runs once per pod. A container
//!   joining the pod between those inspects and the removal is the one window left, as with
//!   networks on Podman.
//! - Podman's own API is spoken here with hyper, over the driver's address (bollard speaks
//!   the Docker API only), at API version 4.0.0 (the oldest Podman 4 and 5 serve), each
//!   request bounded by the driver's timeout.

use std::collections::HashMap;
use std::time::Duration;

use bollard::errors::Error as BollardError;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use serde::Deserialize;

use super::daemon::Upstream;
use super::error::{classify_status, short};
use crate::config::docker::DaemonAddress;
use crate::providers::ProviderError;

/// Podman's refusal to remove a pod's infra container alone.
pub(super) fn is_infra_refusal(err: &BollardError) -> bool {
    matches!(
        err,
        BollardError::DockerResponseServerError { message, .. }
            if message.contains("is the infra container of pod")
    )
}

/// Removes the pod whose infra container is `id` (full id), unless it holds containers that
/// are still there (module docs).
pub(super) async fn remove(
    host: &DaemonAddress,
    timeout: Duration,
    id: &str,
) -> Result<(), ProviderError> {
    let libpod = Libpod::new(host, timeout)?;
    let doing = format!("remove container {} on {host}", short(id));
    let infra: Container = match libpod.get(&format!("containers/{id}/json")).await? {
        Answer::Found(c) => c,
        Answer::Missing(why) => return Err(ProviderError::gone(format!("cannot {doing}: {why}"))),
    };
    let Some(pod_id) = infra.pod.filter(|p| !p.is_empty()) else {
        return Err(ProviderError::transient(format!(
            "cannot {doing}: Podman called it a pod's infra container, but its inspect names \
             no pod"
        )));
    };
    let pod: Pod = match libpod.get(&format!("pods/{pod_id}/json")).await? {
        Answer::Found(p) => p,
        // The pod went meanwhile, its infra container with it: the retry will say so.
        Answer::Missing(why) => {
            return Err(ProviderError::transient(format!("cannot {doing}: {why}")));
        }
    };
    let mut remaining = Vec::new();
    for member in pod.containers.iter().filter(|m| m.id != id) {
        let path = format!("containers/{}/json", member.id);
        if !matches!(libpod.get::<Container>(&path).await, Ok(Answer::Missing(_))) {
            remaining.push(format!("{} ({})", member.name, short(&member.id)));
        }
    }
    let name = format!("{} ({})", pod.name, short(&pod_id));
    if !remaining.is_empty() {
        return Err(ProviderError::transient(format!(
            "cannot {doing}: it is the infra container of Podman pod {name}, which still holds \
             {} other container(s): {}; the pod goes once they have (what is not of this \
             session keeps it)",
            remaining.len(),
            remaining.join(", ")
        )));
    }
    let (status, body) = libpod
        .send(
            Method::DELETE,
            &format!("pods/{pod_id}?force=true&timeout=0"),
        )
        .await?;
    if status == 404 {
        return Err(ProviderError::gone(format!(
            "cannot {doing}: its pod {name} is gone"
        )));
    }
    if !(200..300).contains(&status) {
        let message = message_of(&body);
        let text = format!("failed to {doing} (its Podman pod {name}): {message} (HTTP {status})");
        return Err(classify_status(status, &message, text));
    }
    // A 200 may still carry the pod's own error, or a member's.
    let report: PodRemoval = serde_json::from_slice(&body).unwrap_or_default();
    let errors: Vec<String> = report
        .err
        .into_iter()
        .chain(report.removed.into_values().flatten())
        .filter(|e| !e.is_empty())
        .collect();
    if !errors.is_empty() {
        return Err(ProviderError::transient(format!(
            "failed to {doing} (its Podman pod {name}): {}",
            errors.join("; ")
        )));
    }
    tracing::info!("docker: removed Podman pod {name} with its infra container");
    Ok(())
}

/// What Podman's container inspect says that matters here.
#[derive(Deserialize)]
struct Container {
    #[serde(rename = "Pod", default)]
    pod: Option<String>,
}

#[derive(Deserialize)]
struct Pod {
    #[serde(rename = "Name", default)]
    name: String,
    #[serde(rename = "Containers", default, deserialize_with = "null_is_empty")]
    containers: Vec<Member>,
}

#[derive(Deserialize)]
struct Member {
    #[serde(rename = "Id")]
    id: String,
    #[serde(rename = "Name", default)]
    name: String,
}

/// `DELETE /libpod/pods/{id}`'s answer: the pod's error, and each member's.
#[derive(Deserialize, Default)]
struct PodRemoval {
    #[serde(rename = "Err", default)]
    err: Option<String>,
    #[serde(rename = "RemovedCtrs", default, deserialize_with = "null_is_empty")]
    removed: HashMap<String, Option<String>>,
}

fn null_is_empty<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A lookup's answer: the object, or Podman's 404 message.
enum Answer<T> {
    Found(T),
    Missing(String),
}

/// Podman's own API at the driver's address.
struct Libpod {
    upstream: Upstream,
    host: DaemonAddress,
    timeout: Duration,
}

impl Libpod {
    fn new(host: &DaemonAddress, timeout: Duration) -> Result<Libpod, ProviderError> {
        Ok(Libpod {
            upstream: Upstream::parse(host).map_err(ProviderError::fatal)?,
            host: host.clone(),
            timeout,
        })
    }

    async fn get<T: for<'de> Deserialize<'de>>(
        &self,
        path: &str,
    ) -> Result<Answer<T>, ProviderError> {
        let (status, body) = self.send(Method::GET, path).await?;
        match status {
            200 => serde_json::from_slice(&body)
                .map(Answer::Found)
                .map_err(|e| {
                    ProviderError::transient(format!(
                    "Podman at {} answered GET /libpod/{path} with what is not its inspect: {e}",
                    self.host
                ))
                }),
            404 => Ok(Answer::Missing(message_of(&body))),
            _ => {
                let message = message_of(&body);
                let text = format!(
                    "Podman at {} answered GET /libpod/{path}: {message} (HTTP {status})",
                    self.host
                );
                Err(classify_status(status, &message, text))
            }
        }
    }

    /// One request on a connection of its own, its whole answer read, within the timeout.
    async fn send(&self, method: Method, path: &str) -> Result<(u16, Bytes), ProviderError> {
        let uri = format!("/v4.0.0/libpod/{path}");
        let failed = |why: String| {
            ProviderError::transient(format!(
                "failed to send {method} {uri} to Podman at {}: {why}",
                self.host
            ))
        };
        let exchange = async {
            let io = self.upstream.connect().await.map_err(|e| e.to_string())?;
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
                .await
                .map_err(|e| e.to_string())?;
            let driver = tokio::spawn(conn);
            let req = Request::builder()
                .method(method.clone())
                .uri(&uri)
                .header("Host", "d")
                .body(Empty::<Bytes>::new())
                .map_err(|e| e.to_string())?;
            let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
            let status = resp.status().as_u16();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?;
            driver.abort();
            Ok::<_, String>((status, body.to_bytes()))
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(result) => result.map_err(failed),
            Err(_) => Err(failed(format!("no answer in {:?}", self.timeout))),
        }
    }
}

/// The `message` of a Podman error answer, else its text.
fn message_of(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Error {
        message: String,
    }
    serde_json::from_slice::<Error>(body).map_or_else(
        |_| String::from_utf8_lossy(body).trim().to_string(),
        |e| e.message,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_podmans_infra_refusal_removes_a_pod() {
        let err = |status_code, message: &str| BollardError::DockerResponseServerError {
            status_code,
            message: message.into(),
        };
        assert!(is_infra_refusal(&err(
            500,
            "container abc is the infra container of pod def and cannot be removed without \
             removing the pod"
        )));
        assert!(!is_infra_refusal(&err(500, "something else broke")));
        assert!(!is_infra_refusal(&err(404, "no such container")));
    }

    #[test]
    fn a_pod_removal_report_with_errors_is_read() {
        let report: PodRemoval = serde_json::from_str(
            r#"{"Err":null,"Id":"p","RemovedCtrs":{"a":null,"b":"device busy"}}"#,
        )
        .unwrap();
        assert_eq!(report.err, None);
        assert_eq!(report.removed["b"].as_deref(), Some("device busy"));
        let empty: PodRemoval = serde_json::from_str(r#"{"Err":null,"RemovedCtrs":null}"#).unwrap();
        assert!(empty.removed.is_empty());
    }
}
