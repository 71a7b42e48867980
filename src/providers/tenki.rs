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
use super::{Capabilities, Entry, EntryState, Kind, Provider, ProviderError, Sandbox};
use crate::config::{CloudSettings, Secret};
use crate::labels::{self, Selector};

const NAME: &str = "tenki";
const SERVICE: &str = "/tenki.sandbox.v1.SandboxService/";
/// The Go SDK's page size.
const PAGE_SIZE: u32 = 100;
/// The tag that carries the session: this prefix, then the start of the session id.
pub const TAG_PREFIX: &str = "sandguard:";
/// Tenki's longest tag.
pub const TAG_MAX: usize = 32;

/// The registry entry: configured when `TENKI_AUTH_TOKEN` or `TENKI_API_KEY` (or
/// `[providers.tenki] api_key`) is set.
pub fn entry(settings: &CloudSettings) -> Entry {
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
/// ASCII: the tag is cut at the last character boundary within [`TAG_MAX`] bytes.
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

    fn call(&self, method: &str, body: &Value) -> RequestBuilder {
        self.http
            .request(Method::POST, &format!("{SERVICE}{method}"))
            .header("connect-protocol-version", "1")
            .json(body)
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
        let mut map = self.timeouts.lock().unwrap_or_else(|e| e.into_inner());
        match timeout_at {
            Some(t) => map.insert(id.to_string(), t),
            None => map.remove(id),
        };
    }

    fn timeout_of(&self, id: &str) -> Option<i64> {
        let map = self.timeouts.lock().unwrap_or_else(|e| e.into_inner());
        map.get(id).copied()
    }

    /// A mutation on one session, with "already terminated" mapped to gone.
    async fn mutate(&self, method: &str, body: Value, what: &str) -> Result<Value, ProviderError> {
        match self.http.send(self.call(method, &body), what).await {
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

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            labels: true,
            ttl: true,
            pagination: true,
        }
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
            if m.ends_with("(HTTP 400)") && server_text(&m, what).contains("terminated") =>
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

/// One `ListWorkspaceSandboxes` answer as the live sandboxes it lists (for a listing that asked
/// for session `wanted`) and the next page token, as [`TenkiProvider`] reads it. Public for
/// the fuzz target `tenki_list`.
#[doc(hidden)]
pub fn parse_list_body(
    body: &[u8],
    wanted: Option<&str>,
) -> Result<(Vec<Sandbox>, String), ProviderError> {
    let page: ListReply = decode_json(body, NAME, "failed to list sandboxes")?;
    let sandboxes = page
        .sessions
        .into_iter()
        .filter_map(|s| s.into_live(wanted).map(|(sandbox, _)| sandbox))
        .collect();
    Ok((sandboxes, page.next_page_token))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListReply {
    #[serde(default)]
    sessions: Vec<Session>,
    #[serde(default)]
    next_page_token: String,
}

/// The `SandboxSession` fields sandguard reads.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Session {
    #[serde(default)]
    id: String,
    state: Option<String>,
    created_at: Option<String>,
    timeout_at: Option<String>,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
    #[serde(default)]
    tags: Vec<String>,
    source_registry_ref: Option<String>,
    source_template_id: Option<String>,
    snapshot_id: Option<String>,
}

impl Session {
    fn is_terminal(&self) -> bool {
        matches!(
            self.state.as_deref(),
            Some("SESSION_STATE_TERMINATED" | "SESSION_STATE_TERMINATING")
        )
    }

    /// `SESSION_STATE_RUNNING` → `running`; an omitted state is proto3's zero value.
    fn status(&self) -> String {
        self.state
            .as_deref()
            .map(|s| s.strip_prefix("SESSION_STATE_").unwrap_or(s))
            .filter(|s| !s.is_empty())
            .map(str::to_ascii_lowercase)
            .unwrap_or_else(|| "unspecified".into())
    }

    /// A live session as a sandbox, with its `timeoutAt` (Unix seconds); `None` for one that
    /// is terminal or has no id.
    fn into_live(self, wanted: Option<&str>) -> Option<(Sandbox, Option<i64>)> {
        if self.id.is_empty() || self.is_terminal() {
            return None;
        }
        let timeout_at = self
            .timeout_at
            .as_deref()
            .and_then(crate::timefmt::parse_rfc3339);
        Some((self.into_sandbox(wanted), timeout_at))
    }

    fn into_sandbox(self, wanted: Option<&str>) -> Sandbox {
        let labels = read_labels(&self.tags, &self.metadata, wanted);
        let status = self.status();
        let image = [
            &self.source_registry_ref,
            &self.source_template_id,
            &self.snapshot_id,
        ]
        .into_iter()
        .flatten()
        .find(|s| !s.is_empty())
        .cloned();
        Sandbox {
            provider: NAME.into(),
            kind: Kind::Instance,
            created_at: self
                .created_at
                .as_deref()
                .and_then(crate::timefmt::parse_rfc3339),
            id: self.id,
            status,
            image,
            labels,
        }
    }
}

/// The sandguard labels of a session. Its `sandguard:` tag decides whether it is managed at
/// all and by which session; `metadata` adds the full session id (when it agrees with the
/// tag), the owner and the rest. When the tag holds only the start of a long id and the
/// listing asked for one session (`wanted`) whose tag it is, the label is that full id.
fn read_labels(
    tags: &[String],
    metadata: &BTreeMap<String, String>,
    wanted: Option<&str>,
) -> BTreeMap<String, String> {
    let tags: Vec<String> = tags
        .iter()
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| t.len() > TAG_PREFIX.len() && t.starts_with(TAG_PREFIX))
        .collect();
    if tags.is_empty() {
        return BTreeMap::new();
    }
    let mut labels: BTreeMap<String, String> = metadata
        .iter()
        .filter(|(k, _)| k.starts_with("sandguard."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let agrees = |session: &str| tags.contains(&session_tag(session));
    let session = match labels.get(labels::SESSION) {
        Some(s) if agrees(s) => s.clone(),
        _ => match wanted {
            Some(w) if agrees(w) => w.to_string(),
            _ => tags[0][TAG_PREFIX.len()..].to_string(),
        },
    };
    labels.insert(labels::SESSION.to_string(), session);
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn meta(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const ID: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn the_session_tag_fits_tenkis_tag_rules() {
        let tag = session_tag(ID);
        assert_eq!(tag, "sandguard:0123456789abcdef012345");
        assert_eq!(tag.len(), TAG_MAX);
        assert!(tag
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b":_.-".contains(&b)));
        assert_eq!(session_tag(" Short1 "), "sandguard:short1");
    }

    /// Found while writing the fuzz target `tenki_list` (its input reproduces it): a listed
    /// session whose `sandguard.session` metadata put a multi-byte character across the
    /// 32-byte cut panicked the whole listing.
    #[test]
    fn a_non_ascii_session_is_cut_at_a_character_boundary() {
        let session = format!("{}é", "a".repeat(TAG_MAX - TAG_PREFIX.len() - 1));
        let tag = session_tag(&session);
        assert_eq!(tag, format!("{TAG_PREFIX}{}", "a".repeat(21)));
        assert_eq!(session_tag(&"€".repeat(10)).len(), TAG_MAX - 1);

        let body = json!({"sessions": [{
            "id": "s",
            "tags": ["sandguard:aaaa"],
            "metadata": {"sandguard.session": session},
        }]});
        let (listed, _) = parse_list_body(body.to_string().as_bytes(), None).unwrap();
        assert_eq!(listed[0].labels[labels::SESSION], "aaaa");
    }

    #[test]
    fn selectors_become_one_tag_per_session_term() {
        assert_eq!(tag_filter(&Selector::session(ID)), vec![session_tag(ID)]);
        assert!(tag_filter(&Selector::managed()).is_empty());
        let body = list_body(&tag_filter(&Selector::session("s1")), 100, Some("t2"));
        assert_eq!(
            body,
            json!({"pageSize": 100, "pageToken": "t2", "tags": ["sandguard:s1"]})
        );
        assert_eq!(list_body(&[], 1, Some("")), json!({"pageSize": 1}));
    }

    #[test]
    fn labels_come_from_the_tag_and_metadata() {
        // Tag only: a short id whole, a long one by its start unless the listing asked for it.
        let l = read_labels(&strings(&["x", "sandguard:s1"]), &BTreeMap::new(), None);
        assert_eq!(l, meta(&[(labels::SESSION, "s1")]));
        let tags = strings(&[&session_tag(ID)]);
        let l = read_labels(&tags, &BTreeMap::new(), None);
        assert_eq!(l[labels::SESSION], "0123456789abcdef012345");
        let l = read_labels(&tags, &BTreeMap::new(), Some(ID));
        assert_eq!(l[labels::SESSION], ID);
        // Ids alike in their first 22 characters: the tag alone cannot tell them apart
        // (documented); the full id in metadata can.
        let other = "0123456789abcdef012345ffffffffff";
        let l = read_labels(&tags, &BTreeMap::new(), Some(other));
        assert_eq!(l[labels::SESSION], other);
        let l = read_labels(&tags, &meta(&[(labels::SESSION, ID)]), Some(other));
        assert_eq!(l[labels::SESSION], ID);

        // Metadata adds the full id and the owner when it agrees with the tag.
        let m = meta(&[
            (labels::SESSION, ID),
            (labels::OWNER, "aa-bb-1-2"),
            ("team", "x"),
        ]);
        let l = read_labels(&tags, &m, None);
        assert_eq!(
            l,
            meta(&[(labels::SESSION, ID), (labels::OWNER, "aa-bb-1-2")])
        );
        let l = read_labels(&strings(&["sandguard:s2"]), &m, None);
        assert_eq!(l[labels::SESSION], "s2", "the tag wins over metadata");

        // No tag: not managed, whatever the metadata says.
        assert!(read_labels(&strings(&["sandguard:", "sandguard.x"]), &m, None).is_empty());
    }

    #[test]
    fn sessions_map_to_sandboxes() {
        let s: Session = serde_json::from_value(json!({
            "id": "7d3c2e9a-0000-4000-8000-000000000001",
            "state": "SESSION_STATE_RUNNING",
            "createdAt": "2026-05-01T12:00:00.250Z",
            "timeoutAt": "2026-05-01T13:00:00Z",
            "tags": ["sandguard:s1"],
            "sourceRegistryRef": "ws/base@sha256:ab",
            "cpuCores": 2,
            "memoryMb": "4096"
        }))
        .unwrap();
        assert!(!s.is_terminal());
        let sb = s.into_sandbox(None);
        assert_eq!(sb.status, "running");
        assert_eq!(sb.created_at, Some(1_777_636_800));
        assert_eq!(sb.image.as_deref(), Some("ws/base@sha256:ab"));
        assert_eq!(sb.session(), Some("s1"));
        let gone: Session =
            serde_json::from_value(json!({"id": "x", "state": "SESSION_STATE_TERMINATING"}))
                .unwrap();
        assert!(gone.is_terminal());
        let bare: Session = serde_json::from_value(json!({"id": "y"})).unwrap();
        assert_eq!(bare.status(), "unspecified");
    }

    #[test]
    fn extensions_aim_at_ttl_from_now() {
        let ttl = Duration::from_secs(600);
        assert_eq!(extension(1000, ttl, Some(1300)), Some(300));
        assert_eq!(extension(1000, ttl, Some(1600)), None);
        assert_eq!(extension(1000, ttl, Some(5000)), None);
        assert_eq!(extension(1000, ttl, None), Some(600));
        assert_eq!(extension(1000, Duration::from_millis(1500), None), Some(2));
    }

    #[test]
    fn terminated_sessions_are_gone() {
        let what = "failed to remove sandbox abc";
        let fatal = |text: &str| ProviderError::Fatal(format!("tenki: {what}: {text} (HTTP 400)"));
        assert!(matches!(
            already_gone(fatal("session abc is already terminated"), what),
            ProviderError::Gone(_)
        ));
        assert!(matches!(
            already_gone(fatal("session is sticky"), what),
            ProviderError::Fatal(_)
        ));
        let unauth = ProviderError::Fatal(format!("tenki: {what}: terminated (HTTP 401)"));
        assert!(matches!(
            already_gone(unauth, what),
            ProviderError::Fatal(_)
        ));
    }
}
