//! The Daytona driver, over Daytona's REST API (`https://app.daytona.io/api` by default).
//!
//! Wire contract (as of the last public Daytona source, mid-2026):
//! - Auth: `Authorization: Bearer <DAYTONA_API_KEY>`. Only API keys: a JWT would also need
//!   `X-Daytona-Organization-ID`, which sandguard does not send. The base URL already carries
//!   the `/api` prefix, so routes here start at `/sandbox`.
//! - Labels: sandguard's labels are Daytona's own `labels` map, key for key
//!   (`sandguard.session`, `sandguard.owner`, …).
//! - List: `GET /sandbox?limit=200&labels=<JSON object>[&cursor=…]`, answered
//!   `{"items": [...], "nextCursor": "…" | null}`. Daytona filters labels by containment
//!   (every given pair present with that value), so only the selector's *valued* terms go on
//!   the wire; a key-only term (`sandguard.session` present, whatever its value) cannot be
//!   said in that filter, so it is checked here, and `ps`/`stop --all` list the whole
//!   organisation. No `states` parameter: Daytona's default is every state but `destroyed`.
//!   Servers from before 2026-05-24 answer a bare array of sandboxes and ignore paging; both
//!   shapes are accepted. Every listed sandbox is checked against the selector again.
//! - Mapping: `id`; `state` as the status (`started`, `stopped`, `destroying`, …); `createdAt`
//!   (ISO 8601) as Unix seconds; `snapshot` as the image; `labels` as the labels.
//! - Remove: `DELETE /sandbox/{id}`, 200 with the sandbox (deletion then runs
//!   asynchronously: `destroying`, then gone). 404 is gone. 409 "Sandbox state change in
//!   progress" (a delete, start or stop still landing) is transient: the sandbox is tried
//!   again later, paced by reclaim's own backoff (Daytona sends no wait hint with a 409, and
//!   none is invented here: a hint pauses every removal on the provider, while a 409
//!   concerns one sandbox only).
//! - 429: Daytona's named throttlers answer `Retry-After-<throttler>` (for example
//!   `Retry-After-sandbox-lifecycle`) rather than `Retry-After`; the shared HTTP layer reads
//!   both. 5xx and transport failures are transient; other 4xx are fatal. A 404 on the
//!   listing itself is fatal (a wrong base URL), never "gone".
//! - Check: `GET /sandbox?limit=1`, the cheapest call that proves the key can list.
//! - Renew (TTL): Daytona has no absolute lifetime, only an *idle* auto-stop, so a renewal is
//!   three calls, each answered 201 (any 2xx is accepted):
//!   1. `POST /sandbox/{id}/last-activity` marks the sandbox as used now, so the idle clock
//!      starts at the renewal (a live owner may well leave its sandbox idle for longer than
//!      the TTL). A 404 from this call alone is not taken as "gone": step 2 decides.
//!   2. `POST /sandbox/{id}/autostop/{minutes}`: the TTL rounded up to whole minutes, at
//!      least 1 (0 would disable auto-stop).
//!   3. `POST /sandbox/{id}/autodelete/0`: a stopped sandbox is deleted at once. GPU
//!      sandboxes refuse any auto-delete change because they are always deleted on stop; that
//!      refusal counts as done.
//!
//!   What this guarantees: once renewals stop (the machine running sandguard died or slept),
//!   the sandbox is stopped and deleted about `ttl` (rounded up to a minute, plus the period
//!   of Daytona's own check) after the last renewal *or the last use*, whichever is later.
//!   What it does not: Daytona counts toolbox and preview traffic as activity, so a sandbox
//!   that something keeps using lives on; this bounds abandoned sandboxes, not busy ones.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde::Deserialize;

use super::http::{decode_json, encode_segment, walk, Http};
use super::{Capabilities, Entry, EntryState, Kind, Provider, ProviderError, Sandbox};
use crate::config::{CloudSettings, Secret};
use crate::labels::Selector;

const NAME: &str = "daytona";
/// Daytona's largest page.
const PAGE_SIZE: u32 = 200;

/// Builds the registry entry: configured exactly when `DAYTONA_API_KEY` (or
/// `[providers.daytona] api_key`) is set.
pub fn entry(settings: &CloudSettings) -> Entry {
    let state = match &settings.token {
        None => EntryState::Unconfigured(
            "DAYTONA_API_KEY is not set (nor [providers.daytona] api_key)".into(),
        ),
        Some(key) => match DaytonaProvider::new(key, &settings.url, settings.timeout) {
            Ok(p) => EntryState::Configured(Arc::new(p)),
            Err(e) => EntryState::Unconfigured(e.to_string()),
        },
    };
    Entry { name: NAME, state }
}

pub struct DaytonaProvider {
    http: Http,
    url: String,
}

impl DaytonaProvider {
    pub fn new(key: &Secret, url: &str, timeout: Duration) -> Result<Self, ProviderError> {
        let bearer = Secret::new(format!("Bearer {}", key.expose()));
        Ok(DaytonaProvider {
            http: Http::new(NAME, url, timeout, vec![("authorization", bearer)])?
                .redacting(key.clone()),
            url: url.trim_end_matches('/').to_string(),
        })
    }

    /// One page of the listing and the cursor of the next.
    async fn page(
        &self,
        filter: Option<&str>,
        cursor: Option<String>,
    ) -> Result<(Vec<Sandbox>, Option<String>), ProviderError> {
        let build = || {
            let mut req = self
                .http
                .request(Method::GET, "/sandbox")?
                .query(&[("limit", PAGE_SIZE.to_string())]);
            if let Some(f) = filter {
                req = req.query(&[("labels", f)]);
            }
            if let Some(c) = &cursor {
                req = req.query(&[("cursor", c)]);
            }
            Ok(req)
        };
        let reply = self
            .http
            .read(build, "failed to list sandboxes")
            .await
            .map_err(listing_error)?;
        parse_list_body(&reply.body)
    }
    /// `POST /sandbox/{id}/{action}`; any 2xx will do (Daytona answers 201).
    async fn post(&self, id: &str, action: &str) -> Result<(), ProviderError> {
        let path = format!("/sandbox/{}/{action}", encode_segment(id));
        let what = format!("failed to renew sandbox {id} ({action})");
        self.http
            .send(self.http.request(Method::POST, &path)?, &what)
            .await
            .map(|_| ())
    }
}

#[async_trait::async_trait]
impl Provider for DaytonaProvider {
    fn name(&self) -> &str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            labels: true,
            ttl: true,
            pagination: true,
        }
    }

    async fn list(&self, selector: &Selector) -> Result<Vec<Sandbox>, ProviderError> {
        let filter = label_filter(selector);
        walk(NAME, |cursor| self.page(filter.as_deref(), cursor)).await
    }

    async fn remove(&self, sandbox: &Sandbox) -> Result<(), ProviderError> {
        let path = format!("/sandbox/{}", encode_segment(&sandbox.id));
        let what = format!("failed to remove sandbox {}", sandbox.id);
        self.http.delete(&path, &what).await
    }

    async fn check(&self) -> Result<String, ProviderError> {
        self.http
            .probe("/sandbox", "failed to query the API")
            .await
            .map_err(listing_error)?;
        Ok(format!("daytona API at {}", self.url))
    }

    async fn renew(&self, sandbox: &Sandbox, ttl: Duration) -> Result<(), ProviderError> {
        let id = &sandbox.id;
        // First the activity, so that a shorter auto-stop never catches a sandbox whose last
        // use is older than it. A 404 here may be a server without this route: the auto-stop
        // call below says for certain whether the sandbox is gone.
        match self.post(id, "last-activity").await {
            Ok(()) | Err(ProviderError::Gone(_)) => {}
            Err(e) => return Err(e),
        }
        self.post(id, &format!("autostop/{}", autostop_minutes(ttl)))
            .await?;
        match self.post(id, "autodelete/0").await {
            Err(ProviderError::Fatal(m)) if m.contains("must remain ephemeral") => Ok(()),
            other => other,
        }
    }
}

/// The listing's answer: the paged object, or the bare array of servers before 2026-05-24.
#[derive(Deserialize)]
#[serde(untagged)]
enum ListAnswer {
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
    fn into_page(self) -> (Vec<Item>, Option<String>) {
        match self {
            ListAnswer::Page { items, next_cursor } => (items, next_cursor),
            ListAnswer::Legacy(items) => (items, None),
        }
    }
}

/// The fields of a `SandboxListItem` (or a legacy `Sandbox`) that sandguard reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Item {
    id: String,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    snapshot: Option<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
}

impl Item {
    fn into_sandbox(self) -> Sandbox {
        Sandbox {
            provider: NAME.into(),
            kind: Kind::Instance,
            id: self.id,
            status: self
                .state
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "unknown".into()),
            created_at: self
                .created_at
                .as_deref()
                .and_then(crate::timefmt::parse_rfc3339),
            expires_at: None,
            image: self.snapshot.filter(|s| !s.is_empty()),
            labels: self.labels.unwrap_or_default(),
        }
    }
}

/// The selector's valued terms as Daytona's `labels` JSON, or `None` when it has none.
fn label_filter(selector: &Selector) -> Option<String> {
    let pairs: serde_json::Map<String, serde_json::Value> = selector
        .terms()
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), serde_json::Value::String(v.clone()?))))
        .collect();
    (!pairs.is_empty()).then(|| serde_json::Value::Object(pairs).to_string())
}

/// A listing that answers 404 has the wrong base URL: that is a configuration error.
fn listing_error(err: ProviderError) -> ProviderError {
    match err {
        ProviderError::Gone(m) => ProviderError::fatal(format!("{m}; is DAYTONA_API_URL right?")),
        other => other,
    }
}

/// Daytona counts auto-stop in whole minutes and treats 0 as "never".
fn autostop_minutes(ttl: Duration) -> i64 {
    let minutes = ttl.as_secs().div_ceil(60).max(1);
    i64::try_from(minutes).unwrap_or(i64::MAX)
}
#[cfg(test)]
mod tests;
