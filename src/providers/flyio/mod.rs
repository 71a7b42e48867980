//! The Fly.io Machines driver, on the shared HTTP layer ([`super::http`]). Fly publishes no
//! Python SDK, so the contract is the one `providers.md` §3 reads from the docs and from
//! fly-go's source (`superfly/fly-go@22d6e518f42d`: `tokens/tokens.go`,
//! `flaps/flaps_machines.go`), with its 2026-12 corrections.
//!
//! - Configuration: `FLY_API_TOKEN` (or `[providers.flyio] api_token`) and `FLY_APP_NAME` (or
//!   `app`) must both be present; the Unconfigured reason names whichever is missing. Base URL:
//!   `FLY_API_HOSTNAME` or `api_hostname`, default `https://api.machines.dev`; a trailing `/v1`
//!   is tolerated since the docs quote the base with it.
//! - Labels: a sandbox's labels are its machine's `config.metadata` (`incomplete_config.metadata`
//!   when the host cannot return the full config). All of it is read back; only the selector's
//!   keys decide ownership.
//! - List: `GET /v1/apps/{app}/machines` with one `metadata.KEY=VALUE` per valued term of the
//!   selector. A term without a value (`Selector::managed()`) cannot be said in Fly's filter, so
//!   that listing is the whole app, narrowed here. The answer is one bare JSON array (Fly does
//!   not page this endpoint). Machines in a terminal state (`destroyed`, `replaced`, `migrated`)
//!   are skipped: the API still returns them for a while after their end. A 404 on the listing
//!   (unknown app) is fatal, not "gone".
//! - Check: `GET /v1/apps/{app}/machines?summary=true`, the cheapest documented authenticated
//!   call that also proves the app exists.
//! - TTL: Fly has no server-side lifetime limit (`auto_destroy` only acts when the process
//!   exits), so `ttl: false` and the trait's default `renew` (an error) stay.
//!
//! Decisions:
//! - Auth: the scheme follows the token, as fly-go decides it (`auth.rs`): a pasted `FlyV1 ` or
//!   `Bearer ` is stripped, then `FlyV1 <macaroons>` when any part is a macaroon (`fm1r_`,
//!   `fm1a_`, `fm2_`), else `Bearer <token>`. A bare `fm2_…` sent as `Bearer`, which the API
//!   refuses, was this driver's mistake before. Every part is redacted from every message.
//! - Remove: `POST …/machines/{id}/stop`, then `DELETE …/machines/{id}?kill=true&force=true`
//!   (200 `{"ok":true}`): `kill` is what fly-go's `Destroy` sends, `force` what the docs and
//!   OpenAPI name; both are asked for, so whichever the server reads kills a machine that is
//!   still running. The stop goes first even for a machine listed at rest, because a leased
//!   machine refuses it: the DELETE is only ever sent once the lock is gone.
//! - A stop refused for the machine's state, not a lock, falls through to the destroy: any
//!   fatal answer (a 412 `failed_precondition`), and a 409 that is not a lease conflict (the
//!   docs record `409 unable to stop machine, not currently started` for a machine at rest).
//!   The destroy then decides; the API refuses it too while a lease is held. This is also
//!   what lets a removal retried after its stop went through (a 5xx or a dropped connection
//!   on the DELETE) get past a second stop of a machine no longer started. Which of 409 and
//!   412 today's API sends here is not settled, so both are taken.
//! - Not stopped yet: a DELETE right after a stop can meet the machine still `stopping`, which
//!   the API answers 412. That DELETE alone is sent again after 250 ms, 500 ms and 1 s (Fly
//!   allows one call per second and action on a machine, with bursts of three); a machine
//!   still not stopped after that is a Transient failure carrying the 412, so reclaim tries
//!   again at its own pace and, past its deadline, reports the machine unfinished: unknown is
//!   not dead. A 412 is never "gone" and never fatal. The in-driver waits add at most 1.75 s
//!   to one removal call, which may run that long past reclaim's deadline.
//! - Gone: a 404 whose error says `machine not found` (the text flyctl matches). Any other 404
//!   on a machine path (say `app not found`) is fatal: a wrong app must never read as "removed".
//! - Status codes are read from the error ([`ProviderError::status`], filled by the shared
//!   layer), never out of the message text.
//! - Leases (`lease.rs`): a leased machine refuses stop and delete with 409 `aborted: machine ID
//!   … lease currently held by …, expires at <RFC 3339>`. The driver never sends the lease
//!   nonce and never fights the lock: it answers Transient with `retry_after` = the time left
//!   on the lease, read from the message or, when that does not carry it, from
//!   `GET …/{id}/lease` (`data.expires_at`, unix seconds). The reclaim path then waits the
//!   lease out (or, past its deadline, leaves the session pending). Other 409s are plain
//!   Transient. Since reclaim's retry gate is per provider, a lease also delays the app's other
//!   removals until it ends.
//! - 429: Fly documents no `Retry-After`; the shared layer honours one when sent. When a 429 on a
//!   removal carries none, the driver asks for 1 s, Fly's documented per-action rate (1/s per
//!   machine and action). Listings retry inside the shared layer with its own backoff.

mod auth;
mod lease;
mod wire;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use reqwest::Method;

use super::http::{encode_segment, Http};
use super::{Capabilities, Detail, Entry, EntryState, Provider, ProviderError, Refusal, Sandbox};
use crate::config::{CloudSettings, Secret};
use crate::labels::Selector;
pub use lease::lease_wait;
use lease::{is_lease_conflict, lease_expiry_in, parse_lease_body, wait_until};
pub use wire::parse_list_body;

const NAME: &str = "flyio";
/// The wait a 429 without `Retry-After` asks for: Fly's documented per-action rate.
const DEFAULT_THROTTLE_WAIT: Duration = Duration::from_secs(1);
/// The waits before a DELETE answered 412 (the machine is still stopping) is sent again.
const STILL_STOPPING_WAITS: [Duration; 3] = [
    Duration::from_millis(250),
    Duration::from_millis(500),
    Duration::from_secs(1),
];

/// Builds the registry entry: configured only with both a token and an app.
pub(crate) fn entry(settings: &CloudSettings) -> Entry {
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
pub(crate) struct FlyProvider {
    http: Http,
    app: String,
    base: String,
}

impl FlyProvider {
    pub(crate) fn new(
        token: &Secret,
        app: &str,
        settings: &CloudSettings,
    ) -> Result<Self, ProviderError> {
        let header = auth::header(token)?;
        let base = settings.url.trim_end_matches('/');
        let base = base.strip_suffix("/v1").unwrap_or(base).to_string();
        let mut http = Http::new(
            NAME,
            &base,
            settings.timeout,
            vec![("authorization", header.value)],
        )?
        .redacting(Secret::new(token.expose().trim()));
        for part in header.parts {
            http = http.redacting(part);
        }
        Ok(FlyProvider {
            http,
            app: app.to_string(),
            base,
        })
    }

    fn machines_path(&self) -> Result<String, ProviderError> {
        Ok(format!("/v1/apps/{}/machines", encode_segment(&self.app)?))
    }

    fn machine_path(&self, id: &str) -> Result<String, ProviderError> {
        Ok(format!("{}/{}", self.machines_path()?, encode_segment(id)?))
    }

    /// `POST …/{id}/stop`, its failure mapped for reclaim.
    async fn stop(&self, id: &str) -> Result<(), ProviderError> {
        let path = format!("{}/stop", self.machine_path(id)?);
        let what = format!("failed to stop machine {id} of app {}", self.app);
        match self
            .http
            .send(self.http.request(Method::POST, &path)?, &what)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => Err(self.explain(e, id).await),
        }
    }

    /// `DELETE …/{id}?kill=true&force=true`, sent again while the machine is still stopping
    /// (412), up to [`STILL_STOPPING_WAITS`].
    async fn destroy(&self, id: &str) -> Result<(), ProviderError> {
        let path = self.machine_path(id)?;
        let what = format!("failed to delete machine {id} of app {}", self.app);
        let mut waits = STILL_STOPPING_WAITS.iter();
        loop {
            let request = self
                .http
                .request(Method::DELETE, &path)?
                .query(&[("kill", "true"), ("force", "true")]);
            let Err(err) = self.http.send(request, &what).await else {
                return Ok(());
            };
            if err.status() != Some(412) {
                return Err(self.explain(err, id).await);
            }
            match waits.next() {
                Some(wait) => tokio::time::sleep(*wait).await,
                None => return Err(still_stopping(err)),
            }
        }
    }

    /// Turns a failed mutation into what reclaim should do about it.
    async fn explain(&self, err: ProviderError, id: &str) -> ProviderError {
        let status = err.status();
        match err {
            ProviderError::Gone(d) if d.contains("machine not found") => ProviderError::Gone(d),
            ProviderError::Gone(d) => ProviderError::Fatal(d),
            ProviderError::Transient { message, .. }
                if status == Some(409) && is_lease_conflict(&message) =>
            {
                let expiry = match lease_expiry_in(&message) {
                    Some(at) => Some(at),
                    None => self.lease_expiry(id).await,
                };
                ProviderError::Transient {
                    retry_after: Some(wait_until(expiry, SystemTime::now())),
                    message: Detail {
                        message: format!("{}; waiting for the lease to end", message.message),
                        ..message
                    },
                }
            }
            ProviderError::Transient {
                message,
                retry_after,
            } if status == Some(429) => ProviderError::Transient {
                retry_after: retry_after.or(Some(DEFAULT_THROTTLE_WAIT)),
                message,
            },
            other => other,
        }
    }

    /// When the lease on `id` ends, from `GET …/lease`; `None` when there is none (anymore) or
    /// the call failed, which makes the next attempt come after the usual backoff.
    async fn lease_expiry(&self, id: &str) -> Option<i64> {
        let path = format!("{}/lease", self.machine_path(id).ok()?);
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

    fn parse_claim(&self, id: &str) -> Result<Sandbox, Refusal> {
        super::ids::parse(NAME, super::ids::FLYIO, id)
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
        let path = self.machines_path()?;
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
        match self.stop(id).await {
            Ok(()) => {}
            // Refused for the machine's state (at rest, say): the destroy decides. A credential
            // problem fails the destroy the same way, with the same message.
            Err(e) if stop_refused_for_its_state(&e) => {
                tracing::debug!("{e}; destroying it with kill");
            }
            Err(e) => return Err(e),
        }
        self.destroy(id).await
    }

    async fn check(&self) -> Result<String, ProviderError> {
        let what = format!("failed to reach app {}", self.app);
        let request = self
            .http
            .request(Method::GET, &self.machines_path()?)?
            .query(&[("summary", "true")]);
        match self.http.send(request, &what).await {
            Ok(_) => Ok(format!("{NAME} API at {} (app {})", self.base, self.app)),
            Err(ProviderError::Gone(m)) => Err(ProviderError::Fatal(m)),
            Err(e) => Err(e),
        }
    }
}

/// A stop refused because of the state the machine is in, not because someone holds it: a
/// fatal answer, or a 409 that is not a lease conflict.
fn stop_refused_for_its_state(e: &ProviderError) -> bool {
    match e {
        ProviderError::Fatal(_) => true,
        ProviderError::Transient { message, .. } => {
            e.status() == Some(409) && !is_lease_conflict(message)
        }
        _ => false,
    }
}

/// A DELETE still answered 412 after every wait: not removed, and not known to be dead, so
/// reclaim tries again (and reports the machine unfinished past its deadline).
fn still_stopping(err: ProviderError) -> ProviderError {
    let tries = STILL_STOPPING_WAITS.len() + 1;
    let message = match err {
        ProviderError::Fatal(d) | ProviderError::Gone(d) => d,
        ProviderError::Transient { message, .. } => message,
        refused @ ProviderError::Refused(_) => return refused,
    };
    ProviderError::Transient {
        message: Detail {
            message: format!("{}; not stopped yet after {tries} tries", message.message),
            ..message
        },
        retry_after: None,
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

#[cfg(test)]
mod tests;
