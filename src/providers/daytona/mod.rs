//! The Daytona driver, over Daytona's REST API (`https://app.daytona.io/api` by default).
//!
//! Wire contract (the last public Daytona source, mid-2026, and the `daytona` 0.226.1 SDK):
//! - Auth: `Authorization: Bearer <DAYTONA_API_KEY>`, or `Authorization: Bearer
//!   <DAYTONA_JWT_TOKEN>` with `X-Daytona-Organization-ID: <DAYTONA_ORGANIZATION_ID>`. The
//!   base URL already carries the `/api` prefix, so routes here start at `/sandbox`.
//! - Labels: sandguard's labels are Daytona's own `labels` map, key for key
//!   (`sandguard.session`, `sandguard.owner`, …).
//! - List: `GET /sandbox?limit=200&labels=<JSON object>[&cursor=…]`, answered
//!   `{"items": [...], "nextCursor": "…" | null}`. Daytona filters labels by containment
//!   (every given pair present with that value), so only the selector's *valued* terms go on
//!   the wire; a key-only term (`sandguard.session` present, whatever its value) cannot be
//!   said in that filter, so it is checked here, and `ps`/`stop --all` list the whole
//!   organisation. Servers from before 2026-05-24 answer a bare array of sandboxes and ignore
//!   paging; both shapes are accepted. Every listed sandbox is checked against the selector
//!   again.
//! - Mapping: `id`; `state` as the status (`started`, `stopped`, `destroying`, …); `createdAt`
//!   (ISO 8601) as Unix seconds; `autoDestroyAt` (set only while a TTL is) as the expiry `ps`
//!   shows; `snapshot` as the image; `labels` as the labels.
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
//! - Check: `GET /sandbox?limit=1`, the cheapest call that proves the credential can list.
//! - Renew (TTL): `GET /sandbox/{id}` reads `autoDestroyAt`; only when it is unset or falls
//!   short of `ttl` from now, `POST /sandbox/{id}/ttl/{minutes}` (no body; the spec says 200
//!   with the sandbox, any 2xx is accepted) sets it to now plus `minutes`. Daytona destroys
//!   the sandbox when `autoDestroyAt` passes, "regardless of its state": once renewals stop
//!   (the machine running sandguard died or slept), the sandbox goes about `ttl` (rounded up
//!   to a minute) after the last renewal, started, stopped, paused or archived alike.
//!
//! Decisions:
//! - Renewal never touches auto-delete or auto-stop. Auto-delete `0` means "delete as soon as
//!   it is stopped", and a user may stop a sandbox on purpose while its owner lives; the
//!   driver set it before 2026-12, so a stop lost the sandbox. Auto-stop is the user's idle
//!   policy, not a lifetime. The absolute TTL is the one setting that bounds a sandbox whose
//!   owner's machine is gone without deciding anything while the owner lives.
//! - The TTL is read first, as E2B's is, because `/ttl` re-anchors from now and would shorten
//!   a longer TTL the user set. Minutes are `ttl` rounded up, at least 1: `0` disables the
//!   TTL. The SDK refuses negative minutes and the spec gives no upper bound; an
//!   organisation's maximum lifespan, where it has one, may refuse or cap a longer TTL, and a
//!   refusal is reported (the keeper logs it and tries again next round).
//! - A 404 from `/ttl` right after the sandbox was read is not "gone": it is most likely a
//!   server without the route (self-hosted Daytona from the public source, frozen in June
//!   2026, has none), so it is a fatal error that says so, and the keeper logs it each
//!   round; a sandbox really deleted in between is gone at the next round's read. A sandbox
//!   already `destroying` is not renewed (gone).
//! - Credentials, as the SDK reads its environment: `DAYTONA_API_KEY` wins when it is set
//!   (here also `[providers.daytona] api_key`); otherwise `DAYTONA_JWT_TOKEN`, which needs
//!   `DAYTONA_ORGANIZATION_ID` because a user's token is valid in each of the user's
//!   organisations (the SDK raises "DAYTONA_ORGANIZATION_ID is required when authenticating
//!   with DAYTONA_JWT_TOKEN"; sandguard refuses the configuration the same way, see
//!   `config::cloud::daytona`). With an API key the organisation header is not sent: the key
//!   names its organisation. Both the key and the token are redacted from every message.
//! - `DAYTONA_API_URL`, then the deprecated `DAYTONA_SERVER_URL`, from the environment
//!   (never from a dotenv file, which sandguard does not read either). `DAYTONA_TARGET` is
//!   the SDK's default region for *creating* sandboxes; its listing does not filter by it, so
//!   neither does sandguard: a session's sandboxes are found in every region.
//! - `includeWarm` is not sent: unclaimed warm-pool sandboxes (excluded by default) carry
//!   no session of ours. `autoDestroyAtAfter`/`autoDestroyAtBefore` are not needed.

use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;

use super::http::{encode_segment, walk, Http};
use super::{Capabilities, Detail, Entry, EntryState, Provider, ProviderError, Refusal, Sandbox};
use crate::config::{CloudSettings, Secret};
use crate::labels::Selector;

mod wire;
pub use wire::parse_list_body;
use wire::Item;

const NAME: &str = "daytona";
/// Daytona's largest page.
const PAGE_SIZE: u32 = 200;

/// How sandguard proves itself to Daytona.
#[derive(Debug, Clone, Copy)]
pub enum Auth<'a> {
    /// An API key: it names its organisation.
    ApiKey(&'a Secret),
    /// A user's JWT, valid in each of the user's organisations: the one meant goes with it.
    Jwt {
        token: &'a Secret,
        organization: &'a str,
    },
}

/// Builds the registry entry: configured when `DAYTONA_API_KEY` (or `[providers.daytona]
/// api_key`) is set, or `DAYTONA_JWT_TOKEN` with `DAYTONA_ORGANIZATION_ID` (settings carry
/// the JWT as `secret` and the organisation as `app`; a JWT without one never gets here).
pub(crate) fn entry(settings: &CloudSettings) -> Entry {
    let auth = match (&settings.token, &settings.secret, &settings.app) {
        (Some(key), _, _) => Some(Auth::ApiKey(key)),
        (None, Some(token), Some(organization)) => Some(Auth::Jwt {
            token,
            organization,
        }),
        _ => None,
    };
    let state = match auth {
        None => EntryState::Unconfigured(
            "DAYTONA_API_KEY is not set (nor [providers.daytona] api_key), nor \
             DAYTONA_JWT_TOKEN with DAYTONA_ORGANIZATION_ID"
                .into(),
        ),
        Some(auth) => match DaytonaProvider::new(auth, &settings.url, settings.timeout) {
            Ok(p) => EntryState::Configured(Arc::new(p)),
            Err(e) => EntryState::Unconfigured(e.to_string()),
        },
    };
    Entry { name: NAME, state }
}

pub struct DaytonaProvider {
    http: Http,
    url: String,
    organization: Option<String>,
}

impl DaytonaProvider {
    pub fn new(auth: Auth<'_>, url: &str, timeout: Duration) -> Result<Self, ProviderError> {
        let (token, organization) = match auth {
            Auth::ApiKey(key) => (key, None),
            Auth::Jwt {
                token,
                organization,
            } => (token, Some(organization.to_string())),
        };
        let mut headers = vec![(
            "authorization",
            Secret::new(format!("Bearer {}", token.expose())),
        )];
        if let Some(org) = &organization {
            headers.push(("x-daytona-organization-id", Secret::new(org.clone())));
        }
        Ok(DaytonaProvider {
            http: Http::new(NAME, url, timeout, headers)?.redacting(token.clone()),
            url: url.trim_end_matches('/').to_string(),
            organization,
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

    /// `GET /sandbox/{id}`: the sandbox as Daytona has it now.
    async fn inspect(&self, id: &str) -> Result<Item, ProviderError> {
        let path = format!("/sandbox/{}", encode_segment(id)?);
        let what = format!("failed to read sandbox {id}");
        let reply = self
            .http
            .read(|| self.http.request(Method::GET, &path), &what)
            .await?;
        reply.json(NAME, &what)
    }
}

#[async_trait::async_trait]
impl Provider for DaytonaProvider {
    fn name(&self) -> &str {
        NAME
    }

    fn parse_claim(&self, id: &str) -> Result<Sandbox, Refusal> {
        super::ids::parse(NAME, super::ids::DAYTONA, id)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    async fn list(&self, selector: &Selector) -> Result<Vec<Sandbox>, ProviderError> {
        let filter = label_filter(selector);
        walk(NAME, |cursor| self.page(filter.as_deref(), cursor)).await
    }

    async fn remove(&self, sandbox: &Sandbox) -> Result<(), ProviderError> {
        let path = format!("/sandbox/{}", encode_segment(&sandbox.id)?);
        let what = format!("failed to remove sandbox {}", sandbox.id);
        self.http.delete(&path, &what).await
    }

    async fn check(&self) -> Result<String, ProviderError> {
        self.http
            .probe("/sandbox", "failed to query the API")
            .await
            .map_err(listing_error)?;
        Ok(match &self.organization {
            None => format!("daytona API at {}", self.url),
            Some(org) => format!("daytona API at {} (organization {org})", self.url),
        })
    }

    async fn renew(&self, sandbox: &Sandbox, ttl: Duration) -> Result<(), ProviderError> {
        let id = &sandbox.id;
        let current = self.inspect(id).await?;
        if matches!(current.state.as_deref(), Some("destroying" | "destroyed")) {
            return Err(ProviderError::gone(format!(
                "daytona: sandbox {id} is being destroyed"
            )));
        }
        let wanted = crate::timefmt::now_unix().saturating_add(ttl.as_secs() as i64);
        if current.destroy_at().is_some_and(|at| at >= wanted) {
            return Ok(());
        }
        let path = format!("/sandbox/{}/ttl/{}", encode_segment(id)?, ttl_minutes(ttl));
        let what = format!("failed to renew the TTL of sandbox {id}");
        match self
            .http
            .send(self.http.request(Method::POST, &path)?, &what)
            .await
        {
            Ok(_) => Ok(()),
            // It was there a moment ago: the route is what is missing.
            Err(ProviderError::Gone(d)) => Err(ProviderError::Fatal(Detail {
                message: format!(
                    "{d}; this Daytona server seems to have no sandbox TTL route (the public \
                     source, which self-hosted servers run, has none)"
                ),
                status: d.status,
            })),
            Err(e) => Err(e),
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

/// Daytona counts the TTL in whole minutes and treats 0 as "no TTL".
fn ttl_minutes(ttl: Duration) -> i64 {
    let minutes = ttl.as_secs().div_ceil(60).max(1);
    i64::try_from(minutes).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
