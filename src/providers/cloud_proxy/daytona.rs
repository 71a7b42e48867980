//! Daytona's side of the cloud proxy: which requests create a sandbox, where their labels go,
//! and where the answer names the new sandbox.
//!
//! - `POST <base>/sandbox` creates (the base URL's path is `/api`); the body's `labels`
//!   (NestJS reads it with `JSON.parse`: that spelling exactly, the last one winning) gets the
//!   session's labels. The answer's `id` is the new id.
//! - `POST <base>/sandbox/{id}/fork` creates a sandbox whose body has no `labels`: refused.

use std::collections::BTreeMap;

use super::stamp::{id_at, merge, Keys};
use super::Route;

/// The variable the `daytona` SDKs read their API's base URL from.
pub const VARIABLE: &str = "DAYTONA_API_URL";

pub fn route(post: bool, rest: &[&str]) -> Route {
    match rest {
        ["sandbox"] if post => Route::Create,
        ["sandbox", _, "fork"] if post => Route::Refuse("a fork's body carries no labels"),
        _ => Route::Pass,
    }
}

pub fn stamp(body: &[u8], labels: &BTreeMap<String, String>) -> Result<Vec<u8>, String> {
    merge(body, Keys::Exact("labels"), labels)
}

pub fn created(answer: &[u8]) -> Option<String> {
    id_at(answer, "id")
}
