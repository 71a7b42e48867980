//! What the program removes itself through the proxy: released at once.
//!
//! A `DELETE` of a container, network or volume, or a prune, that the daemon answers as done
//! (`2xx`, or `404`: it is not there) releases the claim the proxy made for that object,
//! journaled (and acknowledged) before the answer reaches the program, exactly as a create's
//! claim is. So the ledger never keeps a claim on an id that no longer names what was made: a
//! volume's name, once free, may be taken by anyone (and its pinned claim would be refused
//! anyway, `crate::providers::docker::claim`), and `sessions show` says the program removed it.
//!
//! Decisions:
//! - **Only what this proxy claimed is released**, found by what the request names: a full id
//!   or an id prefix that names one claimed object alone, or the name it was created with
//!   (a container's `?name=`, a network's `Name`; a volume's name is its id). Anything else
//!   (a stranger's object, a container renamed since) is passed on untouched and nothing is
//!   journaled: a claim left behind is harmless (the reclaim finds the object gone).
//! - A volume is released by its bare name (`volume/NAME`), which ends its pinned claim
//!   (`crate::protocol::Target::answers`).

use std::sync::Mutex;

use super::target::Create;
use super::{Hold, Shared};
use crate::protocol::Target;

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

    /// Forgets the object `given` names (see the module docs) and returns the claim to
    /// release, if it is one this proxy claimed.
    fn take(&self, kind: Create, given: &str) -> Option<Target> {
        let mut made = self.lock();
        let of_kind = |m: &Made| m.kind == kind;
        let exact = made
            .iter()
            .position(|m| of_kind(m) && (m.id == given || m.name.as_deref() == Some(given)));
        let at = exact.or_else(|| {
            let prefixed: Vec<usize> = (0..made.len())
                .filter(|&i| of_kind(&made[i]) && kind != Create::Volume)
                .filter(|&i| !given.is_empty() && made[i].id.starts_with(given))
                .collect();
            (prefixed.len() == 1).then(|| prefixed[0])
        })?;
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

/// The daemon removed (or did not have) what `given` names: its claim, if this proxy made
/// one, is released and journaled before the answer goes on.
pub(super) async fn removed(shared: &Shared, kind: Create, given: &str) {
    if let Some(target) = shared.claimed.take(kind, given) {
        release(shared, target).await;
    }
}

/// A prune's answer: what it names as deleted is released, as [`removed`] does.
pub(super) async fn pruned(shared: &Shared, kind: Create, answer: &[u8]) {
    let key = match kind {
        Create::Container => "ContainersDeleted",
        Create::Network => "NetworksDeleted",
        Create::Volume => "VolumesDeleted",
    };
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(answer) else {
        return;
    };
    let gone = value
        .get(key)
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten();
    for given in gone.filter_map(|v| v.as_str()) {
        removed(shared, kind, given).await;
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

    #[test]
    fn only_what_was_claimed_is_found_by_id_prefix_or_name() {
        let c = Claimed::default();
        let a = format!("aaaa{}", "0".repeat(60));
        let b = format!("aaab{}", "0".repeat(60));
        c.made(Create::Container, &a, Some("web".into()));
        c.made(Create::Container, &b, None);
        c.made(Create::Network, "n0123456789ab", Some("net".into()));
        c.made(Create::Volume, "v1", None);
        assert_eq!(c.take(Create::Container, "aaa"), None, "ambiguous prefix");
        assert_eq!(c.take(Create::Container, "other"), None);
        assert_eq!(c.take(Create::Volume, "web"), None, "another kind");
        assert_eq!(
            c.take(Create::Container, "web").map(|t| t.id),
            Some(a.clone())
        );
        assert_eq!(c.take(Create::Container, &a), None, "released once");
        assert_eq!(c.take(Create::Container, "aaa").map(|t| t.id), Some(b));
        assert_eq!(
            c.take(Create::Network, "net").map(|t| t.id).as_deref(),
            Some("network/n0123456789ab")
        );
        assert_eq!(
            c.take(Create::Volume, "v").map(|t| t.id),
            None,
            "volumes by name"
        );
        assert_eq!(
            c.take(Create::Volume, "v1").map(|t| t.id).as_deref(),
            Some("volume/v1")
        );
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
