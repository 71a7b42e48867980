//! The Fly.io Machines driver, on the shared HTTP layer ([`super::http`]).
//!
//! - Configuration: `FLY_API_TOKEN` (or `[providers.flyio] api_token`) and `FLY_APP_NAME` (or
//!   `app`) must both be present; the Unconfigured reason names whichever is missing. Base URL:
//!   `FLY_API_HOSTNAME` or `api_hostname`, default `https://api.machines.dev`; a trailing `/v1`
//!   is tolerated since the docs quote the base with it.
//! - Auth: `Authorization: <token>` when the token already starts with `FlyV1 ` (macaroons as
//!   `fly tokens` prints them), else `Authorization: Bearer <token>`.
//! - Labels: a sandbox's labels are its machine's `config.metadata` (`incomplete_config.metadata`
//!   when the host cannot return the full config). All of it is read back; only the selector's
//!   keys decide ownership.
//! - List: `GET /v1/apps/{app}/machines` with one `metadata.KEY=VALUE` per valued term of the
//!   selector. A term without a value (`Selector::managed()`) cannot be said in Fly's filter, so
//!   that listing is the whole app, narrowed here. The answer is one bare JSON array (Fly does
//!   not page this endpoint). Machines in a terminal state (`destroyed`, `replaced`, `migrated`)
//!   are skipped: the API still returns them for a while after their end. A 404 on the listing
//!   (unknown app) is fatal, not "gone".
//! - Remove: `POST …/machines/{id}/stop`, then `DELETE …/machines/{id}?force=true` (200
//!   `{"ok":true}`). The stop goes first even for a machine listed at rest, because a leased
//!   machine refuses it: the DELETE is only ever sent once the lock is gone. A stop the API
//!   refuses for good (a state it cannot stop from) falls through to the forced delete.
//! - Gone: a 404 whose error says `machine not found` (the text flyctl matches). Any other 404
//!   on a machine path (say `app not found`) is fatal: a wrong app must never read as "removed".
//! - Leases: a leased machine refuses stop and delete with 409 `aborted: machine ID … lease
//!   currently held by …, expires at <RFC 3339>`. The driver never sends the lease nonce and
//!   never fights the lock: it answers Transient with `retry_after` = the time left on the lease,
//!   read from the message or, when that does not carry it, from `GET …/{id}/lease`
//!   (`data.expires_at`, unix seconds). The reclaim path then waits the lease out (or, past its
//!   deadline, leaves the session pending). Other 409s are plain Transient. Since reclaim's
//!   retry gate is per provider, a lease also delays the app's other removals until it ends.
//! - Status codes: [`ProviderError`] does not carry one, so the 409 and 429 cases read the
//!   `(HTTP NNN)` the shared layer ends its messages with.
//! - 429: Fly documents no `Retry-After`; the shared layer honours one when sent. When a 429 on a
//!   removal carries none, the driver asks for 1 s, Fly's documented per-action rate (1/s per
//!   machine and action). Listings retry inside the shared layer with its own backoff.
//! - TTL: Fly has no server-side lifetime limit (`auto_destroy` only acts when the process
//!   exits), so `ttl: false` and the trait's default `renew` (an error) stay.
//! - Check: `GET /v1/apps/{app}/machines?summary=true`, the cheapest documented authenticated
//!   call that also proves the app exists.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use reqwest::Method;
use serde::Deserialize;

use super::http::{decode_json, encode_segment, Http};
use super::{Capabilities, Entry, EntryState, Kind, Provider, ProviderError, Sandbox};
use crate::config::{CloudSettings, Secret};
use crate::labels::Selector;

const NAME: &str = "flyio";
/// States a machine does not come back from; the listing still shows them for a while.
const TERMINAL: &[&str] = &["destroyed", "replaced", "migrated"];
/// The wait a 429 without `Retry-After` asks for: Fly's documented per-action rate.
const DEFAULT_THROTTLE_WAIT: Duration = Duration::from_secs(1);
/// Added to a lease's expiry so the retry lands after it, not on its last instant.
const LEASE_MARGIN: Duration = Duration::from_millis(200);

/// Builds the registry entry: configured only with both a token and an app.
pub fn entry(settings: &CloudSettings) -> Entry {
    let state = match (&settings.token, &settings.app) {
        (Some(token), Some(app)) => match FlyProvider::new(token, app, settings) {
            Ok(p) => EntryState::Configured(Arc::new(p)),
            Err(e) => EntryState::Unconfigured(e.to_string()),
        },
        (None, None) => EntryState::Unconfigured(
            "FLY_API_TOKEN and FLY_APP_NAME are not set (nor [providers.flyio] api_token, app)"
                .into(),
        ),
        (None, Some(_)) => EntryState::Unconfigured(
            "FLY_API_TOKEN is not set (nor [providers.flyio] api_token)".into(),
        ),
        (Some(_), None) => EntryState::Unconfigured(
            "FLY_APP_NAME is not set (nor [providers.flyio] app): machines live in one app".into(),
        ),
    };
    Entry { name: NAME, state }
}

/// The machines of one Fly app.
pub struct FlyProvider {
    http: Http,
    app: String,
    base: String,
}

impl FlyProvider {
    pub fn new(token: &Secret, app: &str, settings: &CloudSettings) -> Result<Self, ProviderError> {
        let token = Secret::new(token.expose().trim());
        let base = settings.url.trim_end_matches('/');
        let base = base.strip_suffix("/v1").unwrap_or(base).to_string();
        let http = Http::new(
            NAME,
            &base,
            settings.timeout,
            vec![("authorization", authorization(&token))],
        )?
        .redacting(token);
        Ok(FlyProvider {
            http,
            app: app.to_string(),
            base,
        })
    }

    fn machines_path(&self) -> String {
        format!("/v1/apps/{}/machines", encode_segment(&self.app))
    }

    fn machine_path(&self, id: &str) -> String {
        format!("{}/{}", self.machines_path(), encode_segment(id))
    }
    /// One mutation of a machine (stop, delete), with Fly's answers mapped for reclaim.
    async fn mutate(&self, method: Method, suffix: &str, id: &str) -> Result<(), ProviderError> {
        let verb = if method == Method::DELETE {
            "delete"
        } else {
            "stop"
        };
        let path = format!("{}{suffix}", self.machine_path(id));
        let mut request = self.http.request(method, &path)?;
        if verb == "delete" {
            request = request.query(&[("force", "true")]);
        }
        let what = format!("failed to {verb} machine {id} of app {}", self.app);
        match self.http.send(request, &what).await {
            Ok(_) => Ok(()),
            Err(e) => Err(self.explain(e, id).await),
        }
    }

    /// Turns a failed mutation into what reclaim should do about it.
    async fn explain(&self, err: ProviderError, id: &str) -> ProviderError {
        match err {
            ProviderError::Gone(m) if m.contains("machine not found") => ProviderError::Gone(m),
            ProviderError::Gone(m) => ProviderError::Fatal(m),
            ProviderError::Transient {
                message,
                retry_after,
            } => match status_of(&message) {
                Some(409) if is_lease_conflict(&message) => {
                    let expiry = match lease_expiry_in(&message) {
                        Some(at) => Some(at),
                        None => self.lease_expiry(id).await,
                    };
                    ProviderError::Transient {
                        retry_after: Some(wait_until(expiry, SystemTime::now())),
                        message: format!("{message}; waiting for the lease to end").into(),
                    }
                }
                Some(429) => ProviderError::Transient {
                    retry_after: retry_after.or(Some(DEFAULT_THROTTLE_WAIT)),
                    message,
                },
                _ => ProviderError::Transient {
                    message,
                    retry_after,
                },
            },
            fatal => fatal,
        }
    }

    /// When the lease on `id` ends, from `GET …/lease`; `None` when there is none (anymore) or
    /// the call failed, which makes the next attempt come after the usual backoff.
    async fn lease_expiry(&self, id: &str) -> Option<i64> {
        let path = format!("{}/lease", self.machine_path(id));
        let what = format!("failed to read the lease of machine {id}");
        let reply = self
            .http
            .send(self.http.request(Method::GET, &path).ok()?, &what)
            .await
            .ok()?;
        parse_lease_body(&reply.body)
    }
}

#[async_trait::async_trait]
impl Provider for FlyProvider {
    fn name(&self) -> &str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            labels: true,
            ttl: false,
            pagination: false,
        }
    }

    async fn list(&self, selector: &Selector) -> Result<Vec<Sandbox>, ProviderError> {
        let query = metadata_filter(selector);
        let path = self.machines_path();
        let what = format!("failed to list machines of app {}", self.app);
        let reply = self
            .http
            .read(
                || Ok(self.http.request(Method::GET, &path)?.query(&query)),
                &what,
            )
            .await
            .map_err(|e| match e {
                // The collection itself is missing: a wrong app, not a removed sandbox.
                ProviderError::Gone(m) => ProviderError::Fatal(m),
                other => other,
            })?;
        parse_list_body(&reply.body, &self.app)
    }

    async fn remove(&self, sandbox: &Sandbox) -> Result<(), ProviderError> {
        let id = sandbox.id.as_str();
        // Always stop first, even a machine listed at rest: a leased machine refuses the stop,
        // so no DELETE is ever sent while someone else holds the lock.
        match self.mutate(Method::POST, "/stop", id).await {
            Ok(()) => {}
            // Refused for good (a state it cannot stop from): the forced delete decides. A
            // credential problem fails the delete the same way, with the same message.
            Err(ProviderError::Fatal(m)) => tracing::debug!("{m}; deleting with force"),
            Err(e) => return Err(e),
        }
        self.mutate(Method::DELETE, "", id).await
    }

    async fn check(&self) -> Result<String, ProviderError> {
        let what = format!("failed to reach app {}", self.app);
        let request = self
            .http
            .request(Method::GET, &self.machines_path())?
            .query(&[("summary", "true")]);
        match self.http.send(request, &what).await {
            Ok(_) => Ok(format!("{NAME} API at {} (app {})", self.base, self.app)),
            Err(ProviderError::Gone(m)) => Err(ProviderError::Fatal(m)),
            Err(e) => Err(e),
        }
    }
}

/// `GET /apps/{app}/machines` as sandboxes, terminal machines left out. Public for the fuzz
/// target `flyio_list`.
#[doc(hidden)]
pub fn parse_list_body(body: &[u8], app: &str) -> Result<Vec<Sandbox>, ProviderError> {
    let what = format!("failed to list machines of app {app}");
    let machines: Vec<Machine> = decode_json(body, NAME, &what)?;
    Ok(machines
        .into_iter()
        .filter_map(Machine::into_sandbox)
        .collect())
}

/// The expiry (Unix seconds) in a `GET …/lease` body.
fn parse_lease_body(body: &[u8]) -> Option<i64> {
    let lease: LeaseEnvelope = decode_json(body, NAME, "failed to read a lease").ok()?;
    Some(lease.data.expires_at)
}

/// How long a lease conflict makes a removal wait, from the conflict `message` and, when it
/// names no expiry, the `GET …/lease` body, as [`FlyProvider`] decides it. For the fuzz target
/// `flyio_list`.
#[doc(hidden)]
pub fn lease_wait(message: &str, lease_body: &[u8]) -> Option<Duration> {
    (status_of(message) == Some(409) && is_lease_conflict(message)).then(|| {
        let expiry = lease_expiry_in(message).or_else(|| parse_lease_body(lease_body));
        wait_until(expiry, SystemTime::now())
    })
}

/// The header value: a `FlyV1 ` token as is, anything else as a bearer token.
fn authorization(token: &Secret) -> Secret {
    let t = token.expose();
    if t.starts_with("FlyV1 ") {
        Secret::new(t)
    } else {
        Secret::new(format!("Bearer {t}"))
    }
}

/// The valued terms as `metadata.KEY=VALUE`; valueless terms are checked after the listing.
fn metadata_filter(selector: &Selector) -> Vec<(String, String)> {
    selector
        .terms()
        .iter()
        .filter_map(|(k, v)| Some((format!("metadata.{k}"), v.clone()?)))
        .collect()
}
/// The status the shared layer put at the end of its message (`… (HTTP 409)`): it classifies
/// but does not carry the code, and a 409 lease or a 429 needs Fly-specific handling.
fn status_of(message: &str) -> Option<u16> {
    let rest = message.strip_suffix(')')?;
    let at = rest.rfind("(HTTP ")?;
    rest[at + 6..].parse().ok()
}

fn is_lease_conflict(message: &str) -> bool {
    message
        .to_ascii_lowercase()
        .contains("lease currently held")
}

/// The expiry a lease conflict message names: `…, expires at 2026-08-14T09:57:35Z`.
fn lease_expiry_in(message: &str) -> Option<i64> {
    let at = message.find("expires at ")? + "expires at ".len();
    let stamp: String = message[at..]
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != '(' && *c != ';')
        .collect();
    crate::timefmt::parse_rfc3339(stamp.trim_end_matches([',', '.']))
}

/// How long until `expiry` (unix seconds) has passed, with a small margin; a short wait when
/// the expiry is unknown or already past.
fn wait_until(expiry: Option<i64>, now: SystemTime) -> Duration {
    let Some(expiry) = expiry.and_then(|e| u64::try_from(e).ok()) else {
        return LEASE_MARGIN;
    };
    let end = SystemTime::UNIX_EPOCH + Duration::from_secs(expiry);
    end.duration_since(now).unwrap_or(Duration::ZERO) + LEASE_MARGIN
}

#[derive(Debug, Deserialize)]
struct Machine {
    id: String,
    #[serde(default)]
    state: String,
    created_at: Option<String>,
    config: Option<MachineConfig>,
    incomplete_config: Option<MachineConfig>,
    image_ref: Option<ImageRef>,
}

#[derive(Debug, Default, Deserialize)]
struct MachineConfig {
    image: Option<String>,
    #[serde(default)]
    metadata: Option<BTreeMap<String, serde_json::Value>>,
}

#[derive(Debug, Deserialize)]
struct ImageRef {
    repository: Option<String>,
    tag: Option<String>,
}

#[derive(Debug, Deserialize)]
struct LeaseEnvelope {
    data: LeaseData,
}

#[derive(Debug, Deserialize)]
struct LeaseData {
    expires_at: i64,
}

impl Machine {
    /// The machine as a sandbox; `None` for a machine in a terminal state.
    fn into_sandbox(self) -> Option<Sandbox> {
        if TERMINAL.contains(&self.state.as_str()) {
            return None;
        }
        let config = self.config.or(self.incomplete_config).unwrap_or_default();
        let labels = config
            .metadata
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(k, v)| match v {
                serde_json::Value::String(s) => Some((k, s)),
                _ => None,
            })
            .collect();
        let image = config.image.or_else(|| {
            let r = self.image_ref?;
            let repo = r.repository?;
            Some(match r.tag {
                Some(tag) if !tag.is_empty() => format!("{repo}:{tag}"),
                _ => repo,
            })
        });
        Some(Sandbox {
            provider: NAME.into(),
            kind: Kind::Instance,
            id: self.id,
            status: if self.state.is_empty() {
                "unknown".into()
            } else {
                self.state
            },
            created_at: self
                .created_at
                .as_deref()
                .and_then(crate::timefmt::parse_rfc3339),
            expires_at: None,
            image,
            labels,
        })
    }
}

#[cfg(test)]
mod tests;
