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
//!
//! Anything else is refused for good. Uppercase hex is refused too: Docker ids are lowercase,
//! so `ABC…` could only ever match a name.
//!
//! Before a container or network is removed, claimed or listed, its id is [`resolve`]d: the
//! object is inspected and accepted only when the inspected full `Id` starts with the given
//! id; the removal then names that full id, which Docker matches before any name. A stranger
//! *named* like our id (even like our full id, once ours is gone) is refused, never removed.

use bollard::Docker;

use super::error::{classify, short};
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

/// What the claimed `id` names (its kind and the bare id or volume name), or why it names
/// nothing sandguard may remove.
pub(super) fn parse(id: &str) -> Result<(Kind, &str), String> {
    let (kind, rest) = match id.split_once('/') {
        Some(("network", rest)) => (Kind::Network, rest),
        Some(("volume", rest)) => (Kind::Volume, rest),
        _ => (Kind::Instance, id),
    };
    let valid = match kind {
        Kind::Volume => is_volume_name(rest),
        Kind::Instance | Kind::Network => is_id(rest),
    };
    if valid {
        Ok((kind, rest))
    } else {
        Err(format!(
            "refusing docker claim {id:?}: a claim must name an id, never a name \
             (a container id of 12 to 64 hex digits, network/ID, or volume/NAME)"
        ))
    }
}

/// The claim that names a `kind` with `id`: what [`parse`] reads back as the same kind.
pub(super) fn render(kind: Kind, id: &str) -> String {
    match kind {
        Kind::Instance => id.to_string(),
        Kind::Network => format!("network/{id}"),
        Kind::Volume => format!("volume/{id}"),
    }
}

/// Whether `listed` is what the claim (or detach) `claimed` names: the same kind, and for
/// containers and networks a listed full id that starts with the claimed id (as Docker's own
/// prefix lookup would); volumes by exact name.
pub(super) fn names(claimed: &Sandbox, listed: &Sandbox) -> bool {
    claimed.kind == listed.kind
        && match claimed.kind {
            Kind::Volume => claimed.id == listed.id,
            Kind::Instance | Kind::Network => {
                is_id(&claimed.id) && listed.id.starts_with(&claimed.id)
            }
        }
}

/// The full id of the container or network that `id` names, checked against what Docker
/// resolved it to (see the module docs). A volume name is returned as it is.
pub(super) async fn resolve(
    docker: &Docker,
    host: &str,
    kind: Kind,
    id: &str,
) -> Result<String, ProviderError> {
    let noun = match kind {
        Kind::Instance => "container",
        Kind::Network => "network",
        Kind::Volume => return Ok(id.to_string()),
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

#[cfg(test)]
mod tests {
    use super::*;

    const NET: &str = "0123456789abcdef0123";

    #[test]
    fn claims_name_ids_never_names() {
        assert_eq!(parse("0123456789ab"), Ok((Kind::Instance, "0123456789ab")));
        let full = "f".repeat(64);
        assert_eq!(parse(&full), Ok((Kind::Instance, full.as_str())));
        assert_eq!(parse(&format!("network/{NET}")), Ok((Kind::Network, NET)));
        for (kind, id) in [
            (Kind::Instance, NET),
            (Kind::Network, NET),
            (Kind::Volume, "v_1.x"),
        ] {
            assert_eq!(
                parse(&render(kind, id)),
                Ok((kind, id)),
                "{kind:?} reads back"
            );
        }
        assert_eq!(parse("volume/v1"), Ok((Kind::Volume, "v1")));
        assert_eq!(parse("volume/a_b.c-d"), Ok((Kind::Volume, "a_b.c-d")));
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
            "container/0123456789ab",
            "",
        ] {
            let err = parse(refused).expect_err(refused);
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
    }
}
