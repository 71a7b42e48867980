//! Sandbox ids as each provider writes them: the one place that says what an id of a provider
//! may look like, so that every id that reaches a provider (a claim, a release, a detach, a
//! journaled claim read back, a plugin's listing) was read by that provider's parser first.
//!
//! Every id, whatever its provider, is first checked for its *structure*
//! ([`structural_refusal`]): never empty, never `.` or `..`, no `/`, no percent sign, no
//! whitespace or control character, and it does not start with `-` (a plugin or a tool
//! would take it for an option). Then for the provider's own shape, as the reference
//! (`shared/reference/providers.md` and the sources it names) gives it:
//!
//! | provider | shape | why this narrow |
//! |---|---|---|
//! | `e2b` | 1 to 64 of `a-z A-Z 0-9 - _`, starting with a letter or digit | the spec types `sandboxID` as a bare string; the API makes lowercase alphanumerics (older SDKs joined `ID-CLIENT`); the same set as its other path names (`^[a-zA-Z0-9_-]+$`) |
//! | `daytona` | a UUID (`8-4-4-4-12` hex digits) | the API's entity generates its id as a UUID; its paths also take a sandbox *name*, which a claim must never stand for |
//! | `flyio` | 1 to 32 lowercase hex digits | machine ids are 14 hex digits (`73d8d46dbee589`); the length is left open |
//! | `tenki` | a UUID | `SandboxSession.id` is a UUID |
//! | `modal` | `sb-` and 1 to 64 ASCII letters and digits | V1 ids are `sb-` and 22 alphanumerics; V2 ids are `sb-…` of another length |
//! | plugins, anything else | 1 to 128 of `a-z A-Z 0-9 - _ . :`, starting with a letter or digit | a conservative generic set: nothing a shell, a URL or a path could read as more than one word |
//! | `docker` | its own parser, `docker::claim` | |
//!
//! Decisions:
//! - A refusal is final ([`Refusal`]): a claim is journaled `refused` and reported once; an id
//!   a plugin lists that no parser accepts is dropped from the listing with a warning, never
//!   removed (it cannot be named back to the plugin safely).
//! - The rules are narrow where the provider's own ids are known (a UUID is a UUID), and
//!   generic where they are not; a shape too narrow refuses a claim loudly, one too wide lets
//!   a name or a path stand for an id silently.
//! - The HTTP layer checks each path segment again ([`super::http::encode_segment`]), whatever
//!   the caller passed: defence in depth, not the rule.

use super::{Kind, Refusal, Sandbox};

/// What a provider's ids look like: a name for messages and the test.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    /// How the rule reads in a refusal: "a UUID", "`sb-` and letters or digits", …
    pub what: &'static str,
    pub accepts: fn(&str) -> bool,
}

pub(crate) const E2B: Shape = Shape {
    what: "1 to 64 letters, digits, '-' or '_'",
    accepts: |id| word(id, 64, b"-_"),
};

/// A UUID: Daytona's and Tenki's ids alike.
const UUID: Shape = Shape {
    what: "a UUID",
    accepts: is_uuid,
};

pub(crate) const DAYTONA: Shape = UUID;

pub(crate) const FLYIO: Shape = Shape {
    what: "1 to 32 lowercase hex digits",
    accepts: |id| {
        (1..=32).contains(&id.len()) && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    },
};

pub(crate) const TENKI: Shape = UUID;

pub(crate) const MODAL: Shape = Shape {
    what: "'sb-' and 1 to 64 letters or digits",
    accepts: |id| {
        id.strip_prefix("sb-").is_some_and(|rest| {
            (1..=64).contains(&rest.len()) && rest.bytes().all(|b| b.is_ascii_alphanumeric())
        })
    },
};

/// Plugins, and any provider without a rule of its own.
pub(crate) const GENERIC: Shape = Shape {
    what: "1 to 128 letters, digits, '-', '_', '.' or ':', starting with a letter or digit",
    accepts: |id| word(id, 128, b"-_.:"),
};

/// Why `id` can never be any provider's id, if it cannot: the rule every shape includes.
pub(crate) fn structural_refusal(id: &str) -> Option<&'static str> {
    if id.is_empty() {
        Some("an id is never empty")
    } else if id == "." || id == ".." {
        Some("an id is never '.' or '..'")
    } else if id.contains('/') {
        Some("an id never contains '/'")
    } else if id.contains('%') {
        Some("an id never contains '%'")
    } else if id.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("an id never contains whitespace or control characters")
    } else if id.starts_with('-') {
        Some("an id never starts with '-'")
    } else {
        None
    }
}

/// `id` read as an instance of `provider` with ids of `shape`, or why it cannot be one.
pub(crate) fn parse(provider: &str, shape: Shape, id: &str) -> Result<Sandbox, Refusal> {
    let shown = crate::protocol::echo(id.as_bytes());
    if let Some(why) = structural_refusal(id) {
        return Err(Refusal(format!("refusing {provider} id {shown:?}: {why}")));
    }
    if !(shape.accepts)(id) {
        return Err(Refusal(format!(
            "refusing {provider} id {shown:?}: a {provider} id is {}",
            shape.what
        )));
    }
    Ok(Sandbox::claimed(provider, Kind::Instance, id))
}

/// A claim of a provider this process has no driver for, kept as written until one that has
/// it reads it: refused only when no provider could ever read it, so a Docker `network/ID`
/// (whose `/` only Docker's parser understands) survives, and `..` or an empty segment never.
pub(crate) fn unknown_provider_refusal(id: &str) -> Option<String> {
    let bad = id.is_empty()
        || id
            .split('/')
            .any(|part| part.is_empty() || structural_refusal(part).is_some());
    bad.then(|| {
        format!(
            "refusing id {:?}: no provider's id looks like this",
            crate::protocol::echo(id.as_bytes())
        )
    })
}

/// 1 to `max` ASCII letters, digits and `extra` bytes, starting with a letter or digit.
fn word(id: &str, max: usize, extra: &[u8]) -> bool {
    (1..=max).contains(&id.len())
        && id.as_bytes()[0].is_ascii_alphanumeric()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || extra.contains(&b))
}

/// `8-4-4-4-12` hex digits, either case.
fn is_uuid(id: &str) -> bool {
    let groups: Vec<&str> = id.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests;
