//! The Tenki driver: ConnectRPC's unary JSON protocol over HTTP/1.1, on the shared HTTP layer.
//!
//! Wire contract (service `tenki.sandbox.v1.SandboxService`):
//! - Every call is `POST {url}/tenki.sandbox.v1.SandboxService/<Method>` with
//!   `Content-Type: application/json`, `Connect-Protocol-Version: 1` and
//!   `Authorization: Bearer <TENKI_AUTH_TOKEN or TENKI_API_KEY>`. Bodies are proto3 JSON:
//!   lowerCamelCase, defaults omitted, enums as `SESSION_STATE_*`, durations as `"<secs>s"`.
//! - List: `ListWorkspaceSandboxes {"pageSize":100,"pageToken"?,"tags"?}` →
//!   `{"sessions":[…],"nextPageToken"?}`, walked until the token is empty (the shared walk
//!   refuses a token that does not advance). Terminated sessions are not asked for, and any
//!   in `TERMINATING`/`TERMINATED` that come back anyway are skipped.
//! - Remove: `TerminateSession {"sessionId"}`. `not_found` (404) and `failed_precondition`
//!   (400) whose message says "terminated" mean the session is gone already.
//! - Renew: `ExtendSession {"sessionId","additionalDuration"}` *adds* to the timeout, so the
//!   driver remembers each session's `timeoutAt` from the last listing (or extension) and asks
//!   for `max(0, now + ttl - timeoutAt)`; with no known `timeoutAt` it extends by the ttl.
//! - Check: a one-item listing.
//! - Errors are Connect bodies `{"code","message"}` with Connect's fixed code→status mapping,
//!   which the shared layer classifies by status: 404 gone, 429 (`resource_exhausted`, with
//!   `Retry-After` when sent) and 5xx transient, 400/401/403 fatal. A 404 on a listing is a
//!   misconfigured URL, so it is fatal there.
//!
//! Labels. Tenki filters only by `tags`, and its API accepts at most 20 tags per session, each
//! at most 32 characters of `[a-z0-9_:.-]` starting with a letter or digit (the constraint
//! `LuxorLabs/tenki-mcp` `src/tools/common.ts` validates against, "matching the API's";
//! providers.md does not list it). `sandguard.session=<32 hex>` is 50 characters and
//! has an `=`, so it could never be stamped; the session is stamped as **one tag,
//! `sandguard:` followed by the first 22 characters of the session id** (88 random bits of a
//! generated id: unique in practice). That tag is what makes a sandbox managed, in every
//! listing alike. Everything else (the full session id, `sandguard.owner`, whose label is
//! longer than any tag, `sandguard.expires`, `sandguard.detached`) is read from the session's
//! `metadata` map under the same keys as the other providers' labels, when the program put it
//! there. A selector's session term becomes the tag filter (one tag per term, so AND and ANY
//! readings of Tenki's filter agree); `Selector::managed()` lists without a filter and keeps
//! sessions carrying a `sandguard:` tag. The selector is re-checked on every session.
//!
//! The session label of a tagged sandbox is the full id from `metadata` when it agrees with
//! the tag; else, in a listing for one session whose tag it is, that session's id; else the
//! tag's 22 characters (what `ps` then shows). Two session ids alike in their first 22
//! characters (never for generated ids; possible for hand-picked `watch --session` ids) are
//! told apart only by the full id in `metadata`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::{Method, RequestBuilder};
use serde::Deserialize;
use serde_json::{json, Value};

use super::http::{decode_json, walk, Http};
use super::{Capabilities, Entry, EntryState, Kind, Provider, ProviderError, Refusal, Sandbox};
use crate::config::{CloudSettings, Secret};
use crate::labels::{self, Selector};

const NAME: &str = "tenki";
const SERVICE: &str = "/tenki.sandbox.v1.SandboxService/";
/// The Go SDK's page size.
const PAGE_SIZE: u32 = 100;
/// The tag that carries the session: this prefix, then the start of the session id.
pub(crate) const TAG_PREFIX: &str = "sandguard:";
/// Tenki's longest tag.
pub(crate) const TAG_MAX: usize = 32;

/// The registry entry: configured when `TENKI_AUTH_TOKEN` or `TENKI_API_KEY` (or
/// `[providers.tenki] api_key`) is set.
pub(crate) fn entry(settings: &CloudSettings) -> Entry {
    let state = match &settings.token {
        None => EntryState::Unconfigured(
            "TENKI_API_KEY is not set (nor TENKI_AUTH_TOKEN, nor [providers.tenki] api_key)".into(),
        ),
        Some(token) => match TenkiProvider::new(settings, token) {
            Ok(p) => EntryState::Configured(Arc::new(p)),
            Err(e) => EntryState::Unconfigured(e.to_string()),
        },
    };
    Entry { name: NAME, state }
}

/// The tag that marks a sandbox of `session`: what a program stamps and what a session's
/// listing filters by. Tenki lowercases tags, so this does too.
///
/// `session` may come from a listing's metadata or a `--session` flag, so it need not be
/// ASCII: the tag is cut at the last character boundary within `TAG_MAX` bytes.
pub fn session_tag(session: &str) -> String {
    let mut tag = format!("{TAG_PREFIX}{}", session.trim().to_ascii_lowercase());
    let mut end = TAG_MAX.min(tag.len());
    while !tag.is_char_boundary(end) {
        end -= 1;
    }
    tag.truncate(end);
    tag
}

/// Tenki sandboxes of one workspace (the one the credential belongs to).
pub struct TenkiProvider {
    http: Http,
    url: String,
    /// `timeoutAt` (Unix seconds) per session, from the last listing or extension.
    timeouts: Mutex<HashMap<String, i64>>,
}

impl TenkiProvider {
    pub fn new(settings: &CloudSettings, token: &Secret) -> Result<Self, ProviderError> {
        let bearer = Secret::new(format!("Bearer {}", token.expose()));
        Ok(TenkiProvider {
            http: Http::new(
                NAME,
                &settings.url,
                settings.timeout,
                vec![("authorization", bearer)],
            )?
            .redacting(token.clone()),
            url: settings.url.trim_end_matches('/').to_string(),
            timeouts: Mutex::new(HashMap::new()),
        })
    }

    fn call(&self, method: &str, body: &Value) -> Result<RequestBuilder, ProviderError> {
        Ok(self
            .http
            .request(Method::POST, &format!("{SERVICE}{method}"))?
            .header("connect-protocol-version", "1")
            .json(body))
    }
    /// One page of `ListWorkspaceSandboxes`.
    async fn page(
        &self,
        tags: &[String],
        size: u32,
        token: Option<String>,
    ) -> Result<ListReply, ProviderError> {
        let body = list_body(tags, size, token.as_deref());
        let what = "failed to list sandboxes";
        let reply = self
            .http
            .read(|| self.call("ListWorkspaceSandboxes", &body), what)
            .await
            .map_err(|e| match e {
                // The collection itself missing is a wrong URL, not a sandbox that went away.
                ProviderError::Gone(m) => ProviderError::Fatal(m),
                other => other,
            })?;
        decode_json(&reply.body, NAME, what)
    }

    fn remember(&self, id: &str, timeout_at: Option<i64>) {
        let mut map = self
            .timeouts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match timeout_at {
            Some(t) => map.insert(id.to_string(), t),
            None => map.remove(id),
        };
    }

    fn timeout_of(&self, id: &str) -> Option<i64> {
        let map = self
            .timeouts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.get(id).copied()
    }

    /// A mutation on one session, with "already terminated" mapped to gone.
    async fn mutate(&self, method: &str, body: Value, what: &str) -> Result<Value, ProviderError> {
        match self.http.send(self.call(method, &body)?, what).await {
            Ok(reply) => reply.json(NAME, what),
            Err(e) => Err(already_gone(e, what)),
        }
    }
}

#[async_trait::async_trait]
impl Provider for TenkiProvider {
    fn name(&self) -> &str {
        NAME
    }

    fn parse_claim(&self, id: &str) -> Result<Sandbox, Refusal> {
        super::ids::parse(NAME, super::ids::TENKI, id)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    async fn list(&self, selector: &Selector) -> Result<Vec<Sandbox>, ProviderError> {
        let tags = tag_filter(selector);
        let sessions = walk(NAME, |token| {
            let tags = &tags;
            async move {
                let page = self.page(tags, PAGE_SIZE, token).await?;
                Ok((page.sessions, Some(page.next_page_token)))
            }
        })
        .await?;
        let mut found = Vec::new();
        for (sandbox, timeout_at) in sessions
            .into_iter()
            .filter_map(|s| s.into_live(selector.session_id()))
        {
            self.remember(&sandbox.id, timeout_at);
            found.push(sandbox);
        }
        Ok(found)
    }

    async fn remove(&self, sandbox: &Sandbox) -> Result<(), ProviderError> {
        let what = format!("failed to remove sandbox {}", sandbox.id);
        let body = json!({ "sessionId": sandbox.id });
        let result = self.mutate("TerminateSession", body, &what).await;
        if matches!(result, Ok(_) | Err(ProviderError::Gone(_))) {
            self.remember(&sandbox.id, None);
        }
        result.map(|_| ())
    }

    async fn check(&self) -> Result<String, ProviderError> {
        self.page(&[], 1, None).await?;
        Ok(format!("Tenki API at {}", self.url))
    }

    async fn renew(&self, sandbox: &Sandbox, ttl: Duration) -> Result<(), ProviderError> {
        let now = crate::timefmt::now_unix();
        let Some(additional) = extension(now, ttl, self.timeout_of(&sandbox.id)) else {
            return Ok(());
        };
        let what = format!("failed to extend sandbox {}", sandbox.id);
        let body = json!({
            "sessionId": sandbox.id,
            "additionalDuration": format!("{additional}s"),
        });
        let reply = self.mutate("ExtendSession", body, &what).await?;
        let timeout_at = reply
            .get("session")
            .and_then(|s| s.get("timeoutAt"))
            .and_then(Value::as_str)
            .and_then(crate::timefmt::parse_rfc3339);
        self.remember(&sandbox.id, timeout_at);
        Ok(())
    }
}

/// The request body of one listing page (defaults omitted, as proto3 JSON does).
fn list_body(tags: &[String], size: u32, token: Option<&str>) -> Value {
    let mut body = json!({ "pageSize": size });
    if let Some(t) = token.filter(|t| !t.is_empty()) {
        body["pageToken"] = json!(t);
    }
    if !tags.is_empty() {
        body["tags"] = json!(tags);
    }
    body
}

/// The selector's terms Tenki can filter by: a session id becomes its tag. Other terms (and a
/// bare "has a session") are checked here after listing.
fn tag_filter(selector: &Selector) -> Vec<String> {
    selector
        .terms()
        .iter()
        .filter_map(|(k, v)| match (k.as_str(), v) {
            (labels::SESSION, Some(v)) => Some(session_tag(v)),
            _ => None,
        })
        .collect()
}

/// Seconds to add so that the timeout lands `ttl` from `now`; `None` when it is that far
/// out already. An unknown timeout is extended by the whole ttl.
fn extension(now: i64, ttl: Duration, timeout_at: Option<i64>) -> Option<u64> {
    let ttl = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    let Some(at) = timeout_at else {
        return (ttl > 0).then_some(ttl);
    };
    let wanted = now.saturating_add(i64::try_from(ttl).unwrap_or(i64::MAX));
    u64::try_from(wanted.saturating_sub(at))
        .ok()
        .filter(|s| *s > 0)
}

/// `failed_precondition` saying the session is terminated already counts as gone; so does
/// `not_found`, which the shared layer classifies as gone by its status.
fn already_gone(err: ProviderError, what: &str) -> ProviderError {
    match err {
        ProviderError::Fatal(m)
            if m.status == Some(400) && server_text(&m, what).contains("terminated") =>
        {
            ProviderError::Gone(m)
        }
        other => other,
    }
}

/// The server's own words in a message the shared layer built as `tenki: WHAT: TEXT (HTTP n)`.
fn server_text(message: &str, what: &str) -> String {
    let prefix = format!("{NAME}: {what}: ");
    message
        .strip_prefix(&prefix)
        .unwrap_or(message)
        .to_ascii_lowercase()
}

mod wire;

pub use wire::parse_list_body;
use wire::ListReply;

#[cfg(test)]
mod tests;
