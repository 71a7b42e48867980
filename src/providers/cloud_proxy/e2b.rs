//! E2B's side of the cloud proxy: which requests create a sandbox, where their labels go, and
//! where the answer names the new sandbox.
//!
//! - `POST /sandboxes` and `POST /vN/sandboxes` (the `e2b` SDK 2.x posts to `/v2/sandboxes`)
//!   create; the body's `metadata` (decoded by Go's `encoding/json`, so any case-folded
//!   spelling counts) gets the session's labels. The answer's `sandboxID` is the new id.
//! - `POST [/vN]/sandboxes/{id}/fork` creates sandboxes from a running one, but its body has no
//!   `metadata` to stamp: refused.

use std::collections::BTreeMap;

use super::stamp::{id_at, merge, Keys};
use super::Route;

/// The variable the `e2b` SDKs read their API's base URL from.
pub const VARIABLE: &str = "E2B_API_URL";

pub fn route(post: bool, rest: &[&str]) -> Route {
    let rest = match rest {
        [v, tail @ ..] if is_version(v) => tail,
        _ => rest,
    };
    match rest {
        ["sandboxes"] if post => Route::Create,
        ["sandboxes", _, "fork"] if post => Route::Refuse("a fork's body carries no metadata"),
        _ => Route::Pass,
    }
}

/// `v` and digits: the API's version prefix.
fn is_version(segment: &str) -> bool {
    segment
        .strip_prefix('v')
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

pub fn stamp(body: &[u8], labels: &BTreeMap<String, String>) -> Result<Vec<u8>, String> {
    merge(body, Keys::Go("metadata"), labels)
}

pub fn created(answer: &[u8]) -> Option<String> {
    id_at(answer, "sandboxID")
}
