//! What sandguard reads of Daytona's answers: a listing page (either shape) and one sandbox.
//! Written for sandguard from the OpenAPI's field names; only the fields used are here.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::NAME;
use crate::providers::http::decode_json;
use crate::providers::{Kind, ProviderError, Sandbox};
use crate::timefmt::parse_rfc3339;

/// The listing's answer: the paged object, or the bare array of servers before 2026-05-24.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum ListAnswer {
    Page {
        items: Vec<Item>,
        #[serde(rename = "nextCursor", default)]
        next_cursor: Option<String>,
    },
    Legacy(Vec<Item>),
}

/// One page of `GET /sandbox` (either shape) as sandboxes and the next cursor. Public for the
/// fuzz target `daytona_list`.
#[doc(hidden)]
pub fn parse_list_body(body: &[u8]) -> Result<(Vec<Sandbox>, Option<String>), ProviderError> {
    let answer: ListAnswer = decode_json(body, NAME, "failed to list sandboxes")?;
    let (items, next) = answer.into_page();
    Ok((items.into_iter().map(Item::into_sandbox).collect(), next))
}

impl ListAnswer {
    pub(super) fn into_page(self) -> (Vec<Item>, Option<String>) {
        match self {
            ListAnswer::Page { items, next_cursor } => (items, next_cursor),
            ListAnswer::Legacy(items) => (items, None),
        }
    }
}

/// The fields of a `SandboxListItem` (or a `Sandbox`, which `GET /sandbox/{id}` and the legacy
/// listing answer) that sandguard reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Item {
    pub(super) id: String,
    #[serde(default)]
    pub(super) state: Option<String>,
    #[serde(default)]
    created_at: Option<String>,
    /// Set only while a TTL is: absent or `null` otherwise.
    #[serde(default)]
    auto_destroy_at: Option<String>,
    #[serde(default)]
    snapshot: Option<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
}

impl Item {
    /// When Daytona will destroy it whatever its state (Unix seconds), if a TTL is set.
    pub(super) fn destroy_at(&self) -> Option<i64> {
        self.auto_destroy_at.as_deref().and_then(parse_rfc3339)
    }

    pub(super) fn into_sandbox(self) -> Sandbox {
        Sandbox {
            inherited: false,
            identity: None,
            provider: NAME.into(),
            kind: Kind::Instance,
            expires_at: self.destroy_at(),
            id: self.id,
            status: self
                .state
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "unknown".into()),
            created_at: self.created_at.as_deref().and_then(parse_rfc3339),
            image: self.snapshot.filter(|s| !s.is_empty()),
            labels: self.labels.unwrap_or_default(),
        }
    }
}
