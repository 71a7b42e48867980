//! What the program removes itself through the proxy: released at once.
//!
//! A `DELETE` of a container, network or volume that the daemon confirms
//! (`crate::proxy::release`: `2xx` on a path mux routes as sent, or its `404` for the very id
//! the claim holds), or a prune whose answer names it as deleted, releases the claim the proxy
//! made for that object, journaled (and acknowledged) before the answer reaches the program,
//! exactly as a create's claim is. So the ledger never keeps a claim on an id that no longer
//! names what was made: a volume's name, once free, may be taken by anyone (and its pinned
//! claim would be refused anyway, `crate::providers::docker::claim`), and `sessions show`
//! says the program removed it.
//!
//! Decisions:
//! - **Only what this proxy claimed is released**, found by what the request names: a full id
//!   or an id prefix that names one claimed object alone, or the name it was created with
//!   (a container's `?name=`, a network's `Name`; a volume's name is its id). Anything else
//!   (a stranger's object, a container renamed since) is passed on untouched and nothing is
//!   journaled: a claim left behind is harmless (the reclaim finds the object gone).
//! - **A `404` releases only a claim named by its id** (a volume: its name): "no such
//!   container" for a name or a prefix does not say the claimed object is gone (it may have
//!   been renamed). The daemon's answer is read for it only then, and passed on byte for byte.
//! - **A refused `DELETE` releases nothing** (`crate::proxy::release`): a `409`, a `5xx`, and
//!   any path mux does not route as sent (`/containers/ID/`, answered `404 page not found`).
//! - A volume is released by its bare name (`volume/NAME`), which ends its pinned claim
//!   (`crate::protocol::Target::answers`).

use std::sync::Mutex;

use hyper::Response;

use super::target::{Create, Routed};
use super::{Body, Hold, Shared};
use crate::protocol::Target;
use crate::proxy::release;

/// One object this proxy claimed: its kind, its id (a volume's name) and the name it was
/// created with, if any.
#[derive(Debug, Clone)]
struct Made {
    kind: Create,
    id: String,
    name: Option<String>,
}

/// What this proxy claimed and has not seen removed.
#[derive(Debug, Default)]
pub(super) struct Claimed(Mutex<Vec<Made>>);

impl Claimed {
    /// Remembers an object the proxy claimed.
    pub(super) fn made(&self, kind: Create, id: &str, name: Option<String>) {
        self.lock().push(Made {
            kind,
            id: id.to_string(),
            name,
        });
    }

    /// The id of the object `given` names (see the module docs), if this proxy claimed it.
    fn find(&self, kind: Create, given: &str) -> Option<String> {
        let made = self.lock();
        let of_kind = |m: &&Made| m.kind == kind;
        let exact = made
            .iter()
            .filter(of_kind)
            .find(|m| m.id == given || m.name.as_deref() == Some(given));
        let found = exact.or_else(|| {
            let mut prefixed = made
                .iter()
                .filter(of_kind)
                .filter(|m| kind != Create::Volume && !given.is_empty() && m.id.starts_with(given));
            match (prefixed.next(), prefixed.next()) {
                (Some(one), None) => Some(one),
                _ => None,
            }
        })?;
        Some(found.id.clone())
    }

    /// Forgets the object claimed as `id` and returns the claim to release, once: `None` when
    /// it was released already.
    fn take(&self, kind: Create, id: &str) -> Option<Target> {
        let mut made = self.lock();
        let at = made.iter().position(|m| m.kind == kind && m.id == id)?;
        let m = made.remove(at);
        let id = match kind {
            Create::Container => m.id,
            Create::Network => format!("network/{}", m.id),
            Create::Volume => format!("volume/{}", m.id),
        };
        Target::new("docker", &id).ok()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Made>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The daemon's answer to a `DELETE` of what `given` names, `routed` as mux took it: when it
/// confirms the removal (`crate::proxy::release`), the claim this proxy made for the object
/// is released and journaled before the answer goes on.
pub(super) async fn removed(
    shared: &Shared,
    answer: Response<Body>,
    kind: Create,
    given: &str,
    routed: Routed,
) -> Response<Body> {
    let Some(id) = shared.claimed.find(kind, given) else {
        return answer;
    };
    let by_id = (id == given).then_some(given);
    match release::judge(answer, routed, by_id).await {
        Ok((answer, true)) => {
            gone(shared, kind, &id).await;
            answer
        }
        Ok((answer, false)) => answer,
        Err(release::Unread) => super::forward::answer(
            502,
            "sandguard: the Docker daemon's answer to a removal could not be read",
        ),
    }
}

/// The object claimed as `id` is gone: its claim, if not released yet, is released.
async fn gone(shared: &Shared, kind: Create, id: &str) {
    if let Some(target) = shared.claimed.take(kind, id) {
        release(shared, target).await;
    }
}

/// A prune's answer: what it names as deleted is released (a `2xx` answer's list is the
/// daemon's confirmation).
pub(super) async fn pruned(shared: &Shared, kind: Create, answer: &[u8]) {
    let key = match kind {
        Create::Container => "ContainersDeleted",
        Create::Network => "NetworksDeleted",
        Create::Volume => "VolumesDeleted",
    };
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(answer) else {
        return;
    };
    let deleted = value
        .get(key)
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten();
    for given in deleted.filter_map(|v| v.as_str()) {
        if let Some(id) = shared.claimed.find(kind, given) {
            gone(shared, kind, &id).await;
        }
    }
}

async fn release(shared: &Shared, target: Target) {
    let id = target.id.clone();
    if let Err(e) = crate::proxy::claim::claim(&shared.claims, target, Hold::Release, None).await {
        tracing::debug!("docker proxy: the release of {id} was not journaled ({e})");
    }
}

/// The name a create gives its object: a container's `?name=` (percent-decoded), a
/// network's `Name` in the body; a volume is named by its id.
pub(super) fn given_name(kind: Create, target: &str, body: &[u8]) -> Option<String> {
    match kind {
        Create::Container => {
            let query = target.split_once('?')?.1;
            query.split('&').find_map(|pair| {
                let value = pair.strip_prefix("name=")?;
                let bytes = crate::proxy::path::decode(&value.replace('+', " ")).ok()?;
                String::from_utf8(bytes).ok().filter(|n| !n.is_empty())
            })
        }
        Create::Network => serde_json::from_slice::<serde_json::Value>(body)
            .ok()?
            .get("Name")?
            .as_str()
            .map(str::to_string),
        Create::Volume => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The claim a removal of what `given` names releases, found then taken.
    fn released(c: &Claimed, kind: Create, given: &str) -> Option<String> {
        let id = c.find(kind, given)?;
        c.take(kind, &id).map(|t| t.id)
    }

    #[test]
    fn only_what_was_claimed_is_found_by_id_prefix_or_name() {
        let c = Claimed::default();
        let a = format!("aaaa{}", "0".repeat(60));
        let b = format!("aaab{}", "0".repeat(60));
        c.made(Create::Container, &a, Some("web".into()));
        c.made(Create::Container, &b, None);
        c.made(Create::Network, "n0123456789ab", Some("net".into()));
        c.made(Create::Volume, "v1", None);
        let r = |kind, given: &str| released(&c, kind, given);
        assert_eq!(r(Create::Container, "aaa"), None, "ambiguous prefix");
        assert_eq!(r(Create::Container, "other"), None);
        assert_eq!(r(Create::Volume, "web"), None, "another kind");
        assert_eq!(c.find(Create::Container, "web"), Some(a.clone()));
        assert_eq!(r(Create::Container, "web"), Some(a.clone()));
        assert_eq!(r(Create::Container, &a), None, "released once");
        assert_eq!(c.take(Create::Container, &a), None, "taken once");
        assert_eq!(r(Create::Container, "aaa"), Some(b));
        assert_eq!(
            r(Create::Network, "net").as_deref(),
            Some("network/n0123456789ab")
        );
        assert_eq!(r(Create::Volume, "v"), None, "volumes by name");
        assert_eq!(r(Create::Volume, "v1").as_deref(), Some("volume/v1"));
    }

    #[test]
    fn names_given_at_create() {
        let n = |kind, target: &str, body: &str| given_name(kind, target, body.as_bytes());
        assert_eq!(
            n(
                Create::Container,
                "/v1.41/containers/create?name=w%20b&x=1",
                ""
            ),
            Some("w b".into())
        );
        assert_eq!(n(Create::Container, "/containers/create", ""), None);
        assert_eq!(
            n(Create::Network, "/networks/create", r#"{"Name":"net"}"#),
            Some("net".into())
        );
        assert_eq!(
            n(Create::Volume, "/volumes/create", r#"{"Name":"v"}"#),
            None
        );
    }
}
