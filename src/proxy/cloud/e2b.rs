//! E2B's side of the cloud proxy: which requests create a sandbox, where their labels go, and
//! where the answer names the new sandbox.
//!
//! - `POST /sandboxes` creates (the only create route in the API's OpenAPI spec); `POST
//!   /vN/sandboxes` is stamped too (no such route is served today; a superset costs nothing).
//!   The body's `metadata` (decoded by Go's `encoding/json`, so any case-folded spelling
//!   counts) gets the session's labels. The answer's `sandboxID` is the new id.
//! - `POST [/vN]/sandboxes/{id}/fork` creates sandboxes from a running one, but its body has no
//!   `metadata` to stamp: refused.
//! - Any other POST to a sandbox collection path (one or two segments after the version whose
//!   first names sandboxes: `/sandbox`, `/sandboxes/new`, `/v3/sandboxes-beta`) is refused:
//!   no such route is served, and a create added there later is refused rather than passed on
//!   unstamped. `resume` and `connect` bring back a sandbox that exists already (created, and
//!   stamped, through its own create), so they pass, as do snapshots and templates.
//! - `DELETE [/vN]/sandboxes/{id}` is recognised as a removal (the SDK's kill): passed on, and
//!   what this proxy claimed is released once the service confirms it gone
//!   (`super::removal`). The service routes its kill only at `DELETE /sandboxes/{sandboxID}`
//!   (the spec's one kill): Go decodes the path, then gin matches it exactly, case-sensitively
//!   (a trailing slash is redirected, a doubled slash, a dot segment or a version prefix is
//!   not found), so only that path, as sent, is [`removal_routed`]; a `404` anywhere else is
//!   the router's, not "no such sandbox".
//! - gin routes case-sensitively; these routes match in any ASCII case all the same (a
//!   superset: stamping or refusing a path the service would answer 404 costs nothing).

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Hold, Route, UNKNOWN_CREATE};
use crate::proxy::json::{go_field, Json};
use crate::proxy::path::decode;
use crate::proxy::refusal::Unstampable;
use crate::proxy::stamp::{id_at, merge, Keys};

/// The variable the `e2b` SDKs read their API's base URL from.
pub(crate) const VARIABLE: &str = "E2B_API_URL";

pub(crate) fn route(post: bool, rest: &[&str]) -> Route {
    if !post {
        return Route::Pass;
    }
    let rest = match rest {
        [v, tail @ ..] if is_version(v) => tail,
        _ => rest,
    };
    let collection = |s: &str| s.eq_ignore_ascii_case("sandboxes");
    let sandboxes = |s: &str| s.to_ascii_lowercase().contains("sandbox");
    match rest {
        [c] if collection(c) => Route::Create,
        [c, _, op] if collection(c) && op.eq_ignore_ascii_case("fork") => {
            Route::Refuse("a fork's body carries no metadata")
        }
        [c] | [c, _] if sandboxes(c) => Route::Refuse(UNKNOWN_CREATE),
        _ => Route::Pass,
    }
}

/// The sandbox a `DELETE` removes: `[/vN]/sandboxes/{id}` (the kill; matched in any ASCII
/// case, as the creates are).
pub(crate) fn removal(rest: &[&str]) -> Option<String> {
    let rest = match rest {
        [v, tail @ ..] if is_version(v) => tail,
        _ => rest,
    };
    match rest {
        [c, id] if c.eq_ignore_ascii_case("sandboxes") => Some(id.to_string()),
        _ => None,
    }
}

/// Whether the service routes a `DELETE` of `path` (as sent, percent-encoded; `base` is the
/// upstream's own path) to its kill of `given`: decoded, exactly `<base>/sandboxes/{given}`.
pub(crate) fn removal_routed(path: &str, base: &str, given: &str) -> bool {
    match (decode(path), decode(base)) {
        (Ok(path), Ok(mut want)) => {
            want.extend_from_slice(format!("/sandboxes/{given}").as_bytes());
            path == want
        }
        _ => false,
    }
}

/// `v` and digits: the API's version prefix.
fn is_version(segment: &str) -> bool {
    segment
        .strip_prefix(['v', 'V'])
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The body with the session's labels in its `metadata`; with a `lifetime` limit, its
/// `timeout` (the seconds E2B kills the sandbox after, decoded by Go: every case-folded
/// spelling applies in order, the last winning) cut to the limit, so E2B itself ends the
/// sandbox at the limit if sandguard is gone. A create without a `timeout` keeps E2B's
/// default (15 s, shorter than any limit); one that is not a number is left for E2B to refuse.
pub(crate) fn stamp(
    body: &[u8],
    labels: &BTreeMap<String, String>,
    lifetime: Option<Duration>,
) -> Result<(Vec<u8>, Hold), Unstampable> {
    let (body, hold) = merge(body, Keys::Go("metadata"), labels)?;
    let Some(limit) = lifetime else {
        return Ok((body, hold));
    };
    let Ok(Json::Object(mut pairs)) = Json::parse(&body) else {
        return Ok((body, hold));
    };
    let asked = pairs
        .iter()
        .rev()
        .find(|(k, _)| go_field(k, "timeout"))
        .map(|(_, v)| match v {
            Json::Number(n) => n.as_f64(),
            _ => None,
        });
    let limit = limit.as_secs();
    match asked {
        Some(Some(asked)) if asked > limit as f64 => {
            pairs.retain(|(k, _)| !go_field(k, "timeout"));
            pairs.push(("timeout".into(), Json::Number(limit.into())));
            Ok((Json::Object(pairs).to_vec(), hold))
        }
        _ => Ok((body, hold)),
    }
}

/// The template the create names (`templateID`, as Go reads it): the sandbox's size.
pub(crate) fn size(body: &[u8]) -> Option<String> {
    crate::proxy::size::named(body, Keys::Go("templateID"))
}

pub(crate) fn created(answer: &[u8]) -> Option<String> {
    id_at(answer, "sandboxID")
}
