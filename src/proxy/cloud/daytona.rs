//! Daytona's side of the cloud proxy: which requests create a sandbox, where their labels go,
//! and where the answer names the new sandbox.
//!
//! Routes are matched as the service (NestJS on Express) matches them: without regard to ASCII
//! case (Express's `caseSensitive` is off by default, so `/api/Sandbox` is `/api/sandbox`; the
//! base path `/api` is part of the route too, see [`super::route`]) and with a trailing `/`
//! ignored (the segments are cleaned before this sees them). Only ASCII folds: Express matches
//! its regular expressions (no `u` flag) against the raw request line, where a non-ASCII
//! character never equals an ASCII one.
//!
//! - `POST <base>/sandbox` and the deprecated `POST <base>/workspace` (the same create,
//!   still served, answering 200) create; the body's `labels` (NestJS reads it with
//!   `JSON.parse`: that spelling exactly, the last one winning) gets the session's labels. The
//!   answer's `id` is the new id.
//! - `POST <base>/{sandbox,workspace}/{id}/fork` creates a sandbox whose body has no `labels`:
//!   refused.
//! - Any other POST to a sandbox collection path (one or two segments whose first names
//!   sandboxes or workspaces: `/api/sandboxes`, `/api/sandbox/new`, `/api/workspace-v2`) is
//!   refused: the service has no route there today, so nothing real is lost, and a create
//!   added there later is refused rather than passed on unstamped. POSTs to one sandbox's
//!   operations (`/api/sandbox/{id}/stop`, ...) and to other collections (volumes, snapshots)
//!   pass.
//! - `DELETE <base>/{sandbox,workspace}/{idOrName}` removes: passed on, and what this proxy
//!   claimed (by its id, or the name the create answer gave it) is released once the service
//!   accepts the delete (`super::removal`). Whether the service routes it is judged on the
//!   path as sent ([`removal_routed`]), as Express matches it: still percent-encoded (so
//!   `/api/%73andbox/x` is no route of its: Express decodes only the parameter), in any ASCII
//!   case, with one trailing `/` allowed, and no doubled slash or dot segment resolved.

use std::collections::BTreeMap;

use super::{Hold, Route, UNKNOWN_CREATE};
use crate::proxy::refusal::Unstampable;
use crate::proxy::stamp::{id_at, merge, Keys};

/// The variable the `daytona` SDKs read their API's base URL from.
pub(crate) const VARIABLE: &str = "DAYTONA_API_URL";

/// The collections the service creates sandboxes at (`workspace` is the deprecated name).
const COLLECTIONS: [&str; 2] = ["sandbox", "workspace"];

pub(crate) fn route(post: bool, rest: &[&str]) -> Route {
    if !post {
        return Route::Pass;
    }
    let collection = |s: &str| COLLECTIONS.iter().any(|c| s.eq_ignore_ascii_case(c));
    let sandboxes = |s: &str| {
        let s = s.to_ascii_lowercase();
        COLLECTIONS.iter().any(|c| s.contains(c))
    };
    match rest {
        [c] if collection(c) => Route::Create,
        [c, _, op] if collection(c) && op.eq_ignore_ascii_case("fork") => {
            Route::Refuse("a fork's body carries no labels")
        }
        [c] | [c, _] if sandboxes(c) => Route::Refuse(UNKNOWN_CREATE),
        _ => Route::Pass,
    }
}

/// The sandbox a `DELETE` removes: `<base>/{sandbox,workspace}/{idOrName}`.
pub(crate) fn removal(rest: &[&str]) -> Option<String> {
    match rest {
        [c, id] if COLLECTIONS.iter().any(|x| c.eq_ignore_ascii_case(x)) => Some(id.to_string()),
        _ => None,
    }
}

/// Whether the service routes a `DELETE` of `path` (as sent, percent-encoded; `base` is the
/// upstream's own path) to its delete of `given`: `<base>/{sandbox,workspace}/{idOrName}` with
/// at most one trailing `/`, the base and the collection in any ASCII case, the id segment
/// decoding to `given`.
pub(crate) fn removal_routed(path: &str, base: &str, given: &str) -> bool {
    let under = path.len() >= base.len()
        && path.is_char_boundary(base.len())
        && path[..base.len()].eq_ignore_ascii_case(base);
    if !under {
        return false;
    }
    let rest = &path[base.len()..];
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let parts: Vec<&str> = rest.split('/').collect();
    let [first, collection, id] = parts[..] else {
        return false;
    };
    let decoded = crate::proxy::path::decode(id).ok().map(String::from_utf8);
    first.is_empty()
        && COLLECTIONS
            .iter()
            .any(|c| collection.eq_ignore_ascii_case(c))
        && !id.is_empty()
        && matches!(decoded, Some(Ok(id)) if id == given)
}

pub(crate) fn stamp(
    body: &[u8],
    labels: &BTreeMap<String, String>,
) -> Result<(Vec<u8>, Hold), Unstampable> {
    merge(body, Keys::Exact("labels"), labels)
}

/// The snapshot the create names (`snapshot`, as `JSON.parse` reads it): the sandbox's size.
pub(crate) fn size(body: &[u8]) -> Option<String> {
    crate::proxy::size::named(body, Keys::Exact("snapshot"))
}

pub(crate) fn created(answer: &[u8]) -> Option<String> {
    id_at(answer, "id")
}

/// The new sandbox's name in a create answer (a delete may name it so).
pub(crate) fn name(answer: &[u8]) -> Option<String> {
    id_at(answer, "name")
}
