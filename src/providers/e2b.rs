//! The E2B driver (REST, `X-API-Key`), through the shared HTTP layer. Checked against the
//! vendor's Python SDK, `e2b` 2.63.0 (its requests recorded, and run against the emulator in
//! `tests/providers/e2b.rs`).
//!
//! - Base URL: `E2B_API_URL`, else `[providers.e2b] api_url`, else `https://api.${E2B_DOMAIN}`
//!   with `E2B_DOMAIN` defaulting to `e2b.app` (resolved in `config/cloud.rs`).
//! - List: `GET /v2/sandboxes?metadata=…&limit=100[&nextToken=…]`, running and paused
//!   sandboxes alike (the default when `state` is omitted). Pages follow the `X-Next-Token`
//!   response header (absent on the last page). A selector term without a value
//!   (`sandguard.session` present, any session) cannot be said in E2B's exact-match filter,
//!   so `ps` lists all and filters locally.
//! - Labels: the sandguard labels are E2B `metadata` entries, as SDKs stamp them at create.
//! - Remove: `DELETE /sandboxes/{id}` → 204 (a paused sandbox's snapshot goes too); 404 means
//!   it is gone.
//! - Look-up ([`Provider::describe`]): `GET /sandboxes/{id}` (the detail, with its metadata);
//!   404 is gone. The keepers look a claim up this way when their listing did not answer for
//!   it, and a sandbox that E2B ended by itself (its own timeout) is then released
//!   (`crate::watch::gone`); the look-up is made only after a listing of the same API
//!   answered in full, so a 404 there is E2B's word for the sandbox, not a path nothing
//!   routes.
//! - TTL: E2B ends a sandbox at its `endAt`. [`Provider::renew`] reads it
//!   (`GET /sandboxes/{id}`) and only when it falls short of `ttl` from now calls
//!   `POST /sandboxes/{id}/timeout {"timeout": secs}` (204). That call *sets* the expiry, and
//!   could shorten a longer one, hence the read first: renewing never cuts a sandbox's life.
//! - 429 carries `Retry-After` (seconds), honoured by the shared layer and the reclaim gate.
//!
//! Decisions:
//! - The `metadata` filter is encoded byte for byte as the SDK does it
//!   (`sandbox_sync/paginator.py`): each key and value through Python's `quote` (everything
//!   but letters, digits, `-._~` and `/` percent-encoded), the `k=v&k2=v2` string built from
//!   them through `urlencode` (which encodes each part again, `/` and `%` included), and that
//!   string encoded once more as the query value. The service decodes three times to match
//!   (gin's query parsing, then `parseFilters` on the whole value, then on each key and
//!   value), so a key or value may hold `&`, `=`, `+`, `%` or `/`. Encoded only twice, as this
//!   driver once did, a value holding `=` or `&` is refused (400) and one holding `+` matches
//!   nothing. The query string is written here, not by the HTTP client, so nothing re-encodes
//!   it differently.
//! - `Should-Retry` is honoured as the SDK honours it (the shared layer's [`should_retry`]):
//!   present, it alone decides whether an error answer is retried; `false` on a 429 or 5xx
//!   leaves the sandbox and reports it rather than retrying.
//! - `E2B_DEBUG` is ignored. In the SDK it points the client at `http://localhost:3000`, E2B's
//!   own development stack; sandguard goes where `E2B_API_URL` or `E2B_DOMAIN` say.
//! - The client-side key-format check is not made: deprecated, and without effect in 2.63.0.
//! - `expires_at` (`ps`'s `EXPIRES`) is the listing's `endAt` while the sandbox runs: E2B stops
//!   it then, whatever sandguard does (it kills it, or pauses it when it was created with
//!   auto-pause; the listing does not say which, and either way it stops running and billing
//!   compute). A paused sandbox has none: E2B keeps a paused one, its state whole, until it
//!   is deleted or resumed (e2b.dev/docs/sandbox: "preserved indefinitely"), so the `endAt`
//!   it still lists says nothing of its end.
//!
//! [`should_retry`]: super::http::should_retry

use std::collections::BTreeMap;
use std::time::Duration;

use percent_encoding::{utf8_percent_encode, AsciiSet};
use reqwest::Method;
use serde::Deserialize;

use super::http::{decode_json, encode_segment, listing_error, walk, Http, NOT_UNRESERVED};
use super::{
    Capabilities, Described, Entry, EntryState, Kind, Provider, ProviderError, Refusal, Sandbox,
};
use crate::config::CloudSettings;
use crate::labels::Selector;
use crate::timefmt;

/// E2B's largest page.
const PAGE: &str = "100";

pub(crate) fn entry(settings: &CloudSettings) -> Entry {
    let state = match &settings.token {
        None => {
            EntryState::Unconfigured("E2B_API_KEY is not set (nor [providers.e2b] api_key)".into())
        }
        Some(key) => match Http::new(
            "e2b",
            &settings.url,
            settings.timeout,
            vec![("x-api-key", key.clone())],
        ) {
            Ok(http) => EntryState::Configured(std::sync::Arc::new(E2b {
                http: http.honouring_should_retry(),
                url: settings.url.clone(),
            })),
            Err(e) => EntryState::Unconfigured(e.to_string()),
        },
    };
    Entry { name: "e2b", state }
}

pub(crate) struct E2b {
    http: Http,
    url: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Listed {
    #[serde(rename = "sandboxID")]
    sandbox_id: String,
    #[serde(rename = "templateID", default)]
    template_id: Option<String>,
    #[serde(default)]
    alias: Option<String>,
    #[serde(default)]
    started_at: Option<String>,
    #[serde(default)]
    end_at: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    metadata: Option<BTreeMap<String, String>>,
}

impl Listed {
    /// When E2B ends it (see the module's decisions): its `endAt` unless it is paused.
    fn ends_at(&self) -> Option<i64> {
        if self.state.as_deref() == Some("paused") {
            return None;
        }
        self.end_at.as_deref().and_then(timefmt::parse_rfc3339)
    }

    fn into_sandbox(self) -> Sandbox {
        let expires_at = self.ends_at();
        Sandbox {
            inherited: false,
            identity: None,
            provider: "e2b".into(),
            kind: Kind::Instance,
            id: self.sandbox_id,
            status: self.state.unwrap_or_else(|| "running".into()),
            created_at: self.started_at.as_deref().and_then(timefmt::parse_rfc3339),
            expires_at,
            image: self.alias.or(self.template_id),
            labels: self.metadata.unwrap_or_default(),
        }
    }
}

/// Python's `urllib.parse.quote`: everything but letters, digits and `-._~` (and `/` when
/// `keep_slash`) percent-encoded, upper-case hex, byte by byte of the UTF-8.
fn quote(s: &str, keep_slash: bool) -> String {
    const BUT_SLASH: &AsciiSet = &NOT_UNRESERVED.remove(b'/');
    let set = if keep_slash {
        BUT_SLASH
    } else {
        NOT_UNRESERVED
    };
    utf8_percent_encode(s, set).to_string()
}

/// The selector as E2B's `metadata` query value, ready for the URL (see the module's
/// decisions): `urlencode({quote(k): quote(v)})`, encoded once more. `None` when a term has no
/// value (it cannot be expressed; filter locally) or there is no term (an empty filter is a
/// 400).
fn metadata_filter(selector: &Selector) -> Option<String> {
    // `urlencode` quotes with nothing safe (its `quote_plus` would write a space as `+`, but
    // no space is left after `quote`).
    let part = |s: &str| quote(&quote(s, true), false);
    let pairs: Option<Vec<String>> = selector
        .terms()
        .iter()
        .map(|(k, v)| v.as_ref().map(|v| format!("{}={}", part(k), part(v))))
        .collect();
    pairs
        .filter(|p| !p.is_empty())
        .map(|p| quote(&p.join("&"), false))
}

impl E2b {
    /// `GET /sandboxes/{id}`: the sandbox as E2B details it (404: `Gone`).
    async fn read_one(&self, id: &str) -> Result<Listed, ProviderError> {
        let path = format!("/sandboxes/{}", encode_segment(id)?);
        let what = format!("failed to read sandbox {id}");
        let reply = self
            .http
            .read(|| self.http.request(Method::GET, &path), &what)
            .await?;
        reply.json("e2b", &what)
    }

    async fn page(
        &self,
        filter: Option<&str>,
        token: Option<String>,
    ) -> Result<(Vec<Sandbox>, Option<String>), ProviderError> {
        // Written out here: `filter` is encoded already (see `metadata_filter`).
        let mut query = Vec::new();
        if let Some(f) = filter {
            query.push(format!("metadata={f}"));
        }
        if let Some(t) = token.as_deref() {
            query.push(format!("nextToken={}", quote(t, false)));
        }
        query.push(format!("limit={PAGE}"));
        let path = format!("/v2/sandboxes?{}", query.join("&"));
        let build = || self.http.request(Method::GET, &path);
        let reply = self
            .http
            .read(build, "failed to list sandboxes")
            .await
            .map_err(listing_error)?;
        let sandboxes = parse_list_body(&reply.body)?;
        let next = reply.header("x-next-token").map(str::to_string);
        Ok((sandboxes, next))
    }
}

/// One page of `GET /v2/sandboxes` as sandboxes. Public for the fuzz target `e2b_list`.
#[doc(hidden)]
pub fn parse_list_body(body: &[u8]) -> Result<Vec<Sandbox>, ProviderError> {
    let listed: Vec<Listed> = decode_json(body, "e2b", "failed to list sandboxes")?;
    Ok(listed.into_iter().map(Listed::into_sandbox).collect())
}

#[async_trait::async_trait]
impl Provider for E2b {
    fn name(&self) -> &str {
        "e2b"
    }

    fn parse_claim(&self, id: &str) -> Result<Sandbox, Refusal> {
        super::ids::parse("e2b", super::ids::E2B, id)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    async fn list(&self, selector: &Selector) -> Result<Vec<Sandbox>, ProviderError> {
        let filter = metadata_filter(selector);
        walk("e2b", |token| self.page(filter.as_deref(), token)).await
    }

    async fn describe(&self, claimed: &Sandbox) -> Result<Described, ProviderError> {
        match self.read_one(&claimed.id).await {
            Ok(listed) => Ok(Described::Found(listed.into_sandbox())),
            Err(ProviderError::Gone(_)) => Ok(Described::Gone),
            Err(e) => Err(e),
        }
    }

    async fn remove(&self, sandbox: &Sandbox) -> Result<(), ProviderError> {
        let path = format!("/sandboxes/{}", encode_segment(&sandbox.id)?);
        let what = format!("failed to remove sandbox {}", sandbox.id);
        self.http.delete(&path, &what).await
    }

    async fn check(&self) -> Result<String, ProviderError> {
        self.http
            .probe("/v2/sandboxes", "failed to reach the API")
            .await
            .map_err(listing_error)?;
        Ok(format!("E2B API at {}", self.url))
    }

    async fn renew(&self, sandbox: &Sandbox, ttl: Duration) -> Result<(), ProviderError> {
        let path = format!("/sandboxes/{}", encode_segment(&sandbox.id)?);
        let current = self.read_one(&sandbox.id).await?;
        let wanted = timefmt::now_unix() + ttl.as_secs() as i64;
        if current
            .end_at
            .as_deref()
            .and_then(timefmt::parse_rfc3339)
            .is_some_and(|end| end >= wanted)
        {
            return Ok(());
        }
        let body = serde_json::json!({ "timeout": ttl.as_secs().min(i32::MAX as u64) });
        let what = format!("failed to extend sandbox {}", sandbox.id);
        let request = self
            .http
            .request(Method::POST, &format!("{path}/timeout"))?
            .json(&body);
        self.http.send(request, &what).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_filter_is_encoded_as_the_sdk_encodes_it() {
        // What e2b 2.63.0 puts on the wire for `SandboxQuery(metadata={"sandguard.session":
        // "ab12"})`, then for a value holding every character that matters.
        assert_eq!(
            metadata_filter(&Selector::session("ab12")).as_deref(),
            Some("sandguard.session%3Dab12")
        );
        assert_eq!(
            metadata_filter(&Selector::session("x=y&z+w%~é a/b")).as_deref(),
            Some(
                "sandguard.session%3Dx%25253Dy%252526z%25252Bw%252525~%2525C3%2525A9%252520a%252Fb"
            )
        );
        assert_eq!(metadata_filter(&Selector::managed()), None);
        assert_eq!(quote("a b/c~", true), "a%20b/c~");
        assert_eq!(quote("a b/c~", false), "a%20b%2Fc~");
    }

    #[test]
    fn listed_sandboxes_map_to_sandboxes() {
        let json = r#"[{"templateID":"base","alias":"py","sandboxID":"i1","clientID":"c","startedAt":"2026-01-01T00:00:00Z",
            "endAt":"2026-01-01T00:05:00Z","cpuCount":2,"memoryMB":512,"diskSizeMB":0,"state":"paused","envdVersion":"1",
            "metadata":{"sandguard.session":"s1"}},
            {"templateID":"base","sandboxID":"i2","clientID":"c","startedAt":"2026-01-01T00:00:00Z","endAt":"2026-01-01T00:05:00Z",
            "cpuCount":2,"memoryMB":512,"diskSizeMB":0,"state":"running","envdVersion":"1"}]"#;
        let listed: Vec<Listed> = serde_json::from_str(json).unwrap();
        let s: Vec<Sandbox> = listed.into_iter().map(Listed::into_sandbox).collect();
        assert_eq!(s[0].id, "i1");
        assert_eq!(s[0].status, "paused");
        assert_eq!(s[0].image.as_deref(), Some("py"));
        assert_eq!(s[0].session(), Some("s1"));
        assert_eq!(s[0].created_at, Some(1_767_225_600));
        assert_eq!(
            s[0].expires_at, None,
            "paused: E2B keeps it until it is deleted"
        );
        assert_eq!(s[1].expires_at, Some(1_767_225_900), "running: its endAt");
        assert!(s[1].labels.is_empty());
    }
}
