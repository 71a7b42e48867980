//! Claims: what a claimed Docker id names, and how an id is resolved to exactly one object
//! before anything is removed.
//!
//! Docker resolves container and network *names* wherever it takes an id, and it tries a name
//! before an id prefix, so a name (or a prefix that happens to be a name) could reach a
//! stranger. A claim therefore names an id, never a name:
//!
//! | claim | names |
//! |---|---|
//! | `HEX` (12 to 64 lowercase hex digits) | a container, by id or unique id prefix |
//! | `network/HEX` | a network, likewise |
//! | `volume/NAME` (Docker's rule `[a-zA-Z0-9][a-zA-Z0-9_.-]+`) | a volume: volumes have only names |
//! | `volume/NAME@CREATED` | the volume of that name created at `CREATED` (unix seconds) |
//!
//! Anything else is refused for good. Uppercase hex is refused too: Docker ids are lowercase,
//! so `ABC…` could only ever match a name.
//!
//! **A volume's name is not its identity**: once removed, anyone may make another volume of
//! the same name, and a claim of the name alone would name it. So a volume claim is *pinned*
//! to the volume it named when it was made: the Docker proxy claims what it made as
//! `volume/NAME@CREATED` (its `CreatedAt` from the create's answer), and the sidecar pins a
//! `volume/NAME` line to the volume of that name there at that moment
//! (`crate::providers::Provider::pins`). A pinned claim names only the volume created at that
//! time ([`names`]), and before one is removed it is inspected and refused when it is another
//! ([`resolve`]). Docker dates volumes in whole seconds: two volumes of one name made within
//! the same second cannot be told apart by its API.
//!
//! Before a container or network is removed, claimed or listed, its id is [`resolve`]d: the
//! object is inspected and accepted only when the inspected full `Id` starts with the given
//! id; the removal then names that full id, which Docker matches before any name. A stranger
//! *named* like our id (even like our full id, once ours is gone) is refused, never removed.

use bollard::Docker;

use super::error::{classify, short};
use crate::config::docker::DaemonAddress;
use crate::providers::{Kind, ProviderError, Sandbox};

/// The shortest id prefix a claim may use (what `docker ps` shows).
const MIN_ID: usize = 12;
/// A full Docker id.
const FULL_ID: usize = 64;

/// 12 to 64 lowercase hex digits.
fn is_id(s: &str) -> bool {
    (MIN_ID..=FULL_ID).contains(&s.len())
        && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Docker's own rule for volume names: `[a-zA-Z0-9][a-zA-Z0-9_.-]+`.
fn is_volume_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.len() >= 2
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// A claim that names no id: nothing sandguard may remove (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "refusing docker claim {0:?}: a claim must name an id, never a name (a container id of 12 \
     to 64 hex digits, network/ID, or volume/NAME[@CREATED])"
)]
pub(super) struct NotAnId(pub(super) String);

/// What the claimed `id` names (a sandbox of its kind, id or volume name, and the identity a
/// pinned volume claim carries), or why it names nothing sandguard may remove.
pub(super) fn parse(id: &str) -> Result<Sandbox, NotAnId> {
    let (kind, rest) = match id.split_once('/') {
        Some(("network", rest)) => (Kind::Network, rest),
        Some(("volume", rest)) => (Kind::Volume, rest),
        _ => (Kind::Instance, id),
    };
    let (rest, identity) = match (kind, rest.split_once('@')) {
        (Kind::Volume, Some((name, created))) => (name, Some(created)),
        _ => (rest, None),
    };
    let valid = match kind {
        Kind::Volume => {
            is_volume_name(rest)
                && identity.is_none_or(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        }
        Kind::Instance | Kind::Network => is_id(rest),
    };
    if !valid {
        return Err(NotAnId(id.to_string()));
    }
    let mut sandbox = Sandbox::claimed("docker", kind, rest);
    sandbox.identity = identity.map(str::to_string);
    Ok(sandbox)
}

/// The claim that names `sandbox`: what [`parse`] reads back as the same kind (a volume pinned
/// to its identity, when it has one).
pub(super) fn render(sandbox: &Sandbox) -> String {
    let id = &sandbox.id;
    match (sandbox.kind, &sandbox.identity) {
        (Kind::Instance, _) => id.to_string(),
        (Kind::Network, _) => format!("network/{id}"),
        (Kind::Volume, Some(created)) => format!("volume/{id}@{created}"),
        (Kind::Volume, None) => format!("volume/{id}"),
    }
}

/// A volume's identity: its creation time in unix seconds, as Docker dates it.
pub(super) fn volume_identity(created_at: Option<i64>) -> Option<String> {
    created_at.map(|t| t.to_string())
}

/// Whether `listed` is what the claim (or detach) `claimed` names: the same kind, and for
/// containers and networks a listed full id that starts with the claimed id (as Docker's own
/// prefix lookup would); volumes by exact name, and the same identity when the claim is
/// pinned.
pub(super) fn names(claimed: &Sandbox, listed: &Sandbox) -> bool {
    claimed.kind == listed.kind
        && match claimed.kind {
            Kind::Volume => {
                claimed.id == listed.id && crate::providers::same_identity(claimed, listed)
            }
            Kind::Instance | Kind::Network => {
                is_id(&claimed.id) && listed.id.starts_with(&claimed.id)
            }
        }
}

/// The full id of the container or network that `id` names, checked against what Docker
/// resolved it to (see the module docs). A volume name is returned as it is.
pub(super) async fn resolve(
    docker: &Docker,
    host: &DaemonAddress,
    sandbox: &Sandbox,
) -> Result<String, ProviderError> {
    let (kind, id) = (sandbox.kind, sandbox.id.as_str());
    let noun = match kind {
        Kind::Instance => "container",
        Kind::Network => "network",
        Kind::Volume => return volume(docker, host, sandbox).await,
    };
    // Final: the claim names something that is not ours, now or ever.
    let refuse = |detail: &str| {
        ProviderError::Refused(format!(
            "refusing to remove docker {noun} {id:?}: {detail}; a claim must name an id \
             (12 or more hex digits), never a name"
        ))
    };
    if !is_id(id) {
        return Err(refuse("not an id"));
    }
    let doing = format!("inspect {noun} {} on", short(id));
    let inspected = match kind {
        Kind::Network => docker
            .inspect_network(id, None::<bollard::query_parameters::InspectNetworkOptions>)
            .await
            .map(|n| n.id),
        _ => docker
            .inspect_container(
                id,
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await
            .map(|c| c.id),
    }
    .map_err(|e| classify(host, &doing, e))?;
    match inspected {
        Some(full) if full.starts_with(id) => Ok(full),
        Some(other) => Err(refuse(&format!(
            "Docker resolved it to {noun} {}, which Docker found by that name",
            short(&other)
        ))),
        None => Err(refuse("Docker answered without an id")),
    }
}

/// The name of the volume `sandbox` names, checked, when it is pinned, against the volume of
/// that name now: another one (made since under the same name) is refused.
async fn volume(
    docker: &Docker,
    host: &DaemonAddress,
    sandbox: &Sandbox,
) -> Result<String, ProviderError> {
    let name = &sandbox.id;
    let Some(claimed) = &sandbox.identity else {
        return Ok(name.clone());
    };
    let inspected = docker
        .inspect_volume(name)
        .await
        .map_err(|e| classify(host, &format!("inspect volume {name} on"), e))?;
    let now = volume_identity(
        inspected
            .created_at
            .as_deref()
            .and_then(crate::timefmt::parse_rfc3339),
    );
    if now.as_ref() == Some(claimed) {
        return Ok(name.clone());
    }
    Err(ProviderError::Refused(format!(
        "refusing to remove docker volume {name:?}: it is not the volume claimed (created at \
         {claimed}), but one made later under the same name (created at {}): a name is not an \
         identity",
        now.as_deref().unwrap_or("an unknown time")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NET: &str = "0123456789abcdef0123";

    fn parsed(id: &str) -> Result<(Kind, String, Option<String>), NotAnId> {
        parse(id).map(|s| (s.kind, s.id, s.identity))
    }

    #[test]
    fn claims_name_ids_never_names() {
        let ok = |kind, id: &str| Ok((kind, id.to_string(), None));
        assert_eq!(parsed("0123456789ab"), ok(Kind::Instance, "0123456789ab"));
        let full = "f".repeat(64);
        assert_eq!(parsed(&full), ok(Kind::Instance, &full));
        assert_eq!(parsed(&format!("network/{NET}")), ok(Kind::Network, NET));
        for (kind, id, identity) in [
            (Kind::Instance, NET, None),
            (Kind::Network, NET, None),
            (Kind::Volume, "v_1.x", None),
            (Kind::Volume, "v_1.x", Some("1764864565")),
        ] {
            let mut s = Sandbox::claimed("docker", kind, id);
            s.identity = identity.map(str::to_string);
            assert_eq!(
                parsed(&render(&s)),
                Ok((kind, id.to_string(), s.identity.clone())),
                "{kind:?} reads back"
            );
        }
        assert_eq!(parsed("volume/v1"), ok(Kind::Volume, "v1"));
        assert_eq!(parsed("volume/a_b.c-d"), ok(Kind::Volume, "a_b.c-d"));
        assert_eq!(
            parsed("volume/v1@17"),
            Ok((Kind::Volume, "v1".to_string(), Some("17".to_string())))
        );
        for refused in [
            "web",                 // a container name
            "0123456789a",         // 11 digits: too short to be a unique prefix
            "0123456789AB",        // Docker ids are lowercase: only a name can match
            &"f".repeat(65),       // longer than any id
            "network/name",        // a network name
            "network/0123456789a", // too short
            "network/",
            "volume/",
            "volume/x",  // Docker requires two characters
            "volume/-x", // and an alphanumeric first one
            "volume/a/b",
            "volume/a b",
            "volume/v1@",     // a pin with no identity
            "volume/v1@x",    // an identity is a time
            "volume/v1@1@2",  // one pin
            "0123456789ab@1", // containers are not pinned: their ids are identities
            "container/0123456789ab",
            "",
        ] {
            let err = parsed(refused).expect_err(refused).to_string();
            assert!(err.contains("never a name"), "{err}");
        }
    }

    #[test]
    fn names_match_kind_and_id_prefix_or_exact_volume() {
        let sb = |kind, id: &str| Sandbox::claimed("docker", kind, id);
        let full = format!("{NET}{}", "0".repeat(44));
        let listed = sb(Kind::Network, &full);
        assert!(names(&sb(Kind::Network, NET), &listed));
        assert!(names(&sb(Kind::Network, &full), &listed));
        assert!(!names(&sb(Kind::Instance, NET), &listed), "another kind");
        assert!(!names(&sb(Kind::Network, "0123456789ac"), &listed));
        assert!(!names(&sb(Kind::Network, "0123"), &listed), "too short");
        assert!(names(&sb(Kind::Instance, NET), &sb(Kind::Instance, &full)));
        assert!(names(&sb(Kind::Volume, "v1"), &sb(Kind::Volume, "v1")));
        assert!(!names(&sb(Kind::Volume, "v"), &sb(Kind::Volume, "v1")));
        // A pinned claim names the volume created then, not one made later under its name.
        let at = |t: &str| Sandbox {
            identity: Some(t.to_string()),
            ..sb(Kind::Volume, "v1")
        };
        assert!(names(&at("100"), &at("100")));
        assert!(!names(&at("100"), &at("101")));
        assert!(!names(&at("100"), &sb(Kind::Volume, "v1")));
        assert!(
            names(&sb(Kind::Volume, "v1"), &at("101")),
            "a bare name names any"
        );
    }
}
