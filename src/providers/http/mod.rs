//! The one HTTP layer every REST and Connect driver uses: one client per provider with its
//! timeout and auth headers, classification of every answer into [`ProviderError`], the
//! rate-limit hints (`Retry-After` in seconds or as an HTTP date, and Daytona's named
//! `Retry-After-<throttler>` headers), error bodies turned into one short message, secrets
//! redacted from anything that could reach a log, and the pagination walk.
//!
//! Reads (listings, one page each) are retried here a few times, honouring the provider's
//! hint, because a listing that fails fails the whole pass; removals are retried by the
//! reclaim path, which owns the deadline and the per-provider gate.
//!
//! Decisions:
//! - `Should-Retry` (an answer header that overrides the status: [`should_retry`]) is read
//!   only for the drivers that ask ([`Http::honouring_should_retry`]): it is E2B's own header,
//!   read as its SDK reads it. No other provider's spec or SDK names it, and on their answers
//!   it would be a stranger's header (a proxy's, say) changing what a status means.

use std::future::Future;
use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, RequestBuilder};

use super::ProviderError;
use crate::config::Secret;

mod path;
mod status;

pub(crate) use path::{encode_segment, path_refusal, NOT_UNRESERVED};
pub(crate) use status::{classify, error_message, listing_error, retry_after, should_retry};

/// An answer with a 2xx status.
#[derive(Debug)]
pub(crate) struct Reply {
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

/// One provider's HTTP client, built at its first request: building it (the TLS roots, the
/// connection pool) costs memory and start-up pages a sidecar whose owner never dies would
/// pay for nothing.
pub(crate) struct Http {
    provider: &'static str,
    base: String,
    headers: HeaderMap,
    timeout: Duration,
    client: std::sync::OnceLock<Result<reqwest::Client, reqwest::Error>>,
    secrets: Vec<Secret>,
    /// Whether an answer's `Should-Retry` header decides ([`should_retry`]).
    should_retry: bool,
}

impl Http {
    /// A client for `base` (no trailing slash needed) sending `headers` on every request. The
    /// values of `secrets` are redacted from every error message.
    pub(crate) fn new(
        provider: &'static str,
        base: &str,
        timeout: Duration,
        headers: Vec<(&'static str, Secret)>,
    ) -> Result<Http, ProviderError> {
        let mut map = HeaderMap::new();
        let mut secrets = Vec::new();
        for (name, value) in headers {
            let mut v = HeaderValue::from_str(value.expose()).map_err(|_| {
                ProviderError::fatal(format!(
                    "{provider}: the credential is not a valid header value"
                ))
            })?;
            v.set_sensitive(true);
            map.insert(HeaderName::from_static(name), v);
            secrets.push(value);
        }
        Ok(Http {
            provider,
            base: base.trim_end_matches('/').to_string(),
            headers: map,
            timeout,
            client: std::sync::OnceLock::new(),
            secrets,
            should_retry: false,
        })
    }

    /// The client, built the first time it is needed.
    fn client(&self) -> Result<&reqwest::Client, ProviderError> {
        self.client
            .get_or_init(|| {
                reqwest::Client::builder()
                    .default_headers(self.headers.clone())
                    .timeout(self.timeout)
                    .connect_timeout(self.timeout.min(Duration::from_secs(10)))
                    .user_agent(concat!("sandguard/", env!("CARGO_PKG_VERSION")))
                    .build()
            })
            .as_ref()
            .map_err(|e| {
                ProviderError::fatal(format!(
                    "{}: cannot build an HTTP client: {e}",
                    self.provider
                ))
            })
    }

    /// Also redacts `secret` from every message: a bare key whose header value carries a
    /// prefix (`Bearer …`), so neither form can reach a log.
    pub(crate) fn redacting(mut self, secret: Secret) -> Self {
        self.secrets.push(secret);
        self
    }

    /// Lets an error answer's `Should-Retry` header decide whether it is retried
    /// ([`should_retry`]).
    pub(crate) fn honouring_should_retry(mut self) -> Self {
        self.should_retry = true;
        self
    }

    /// Redacts every credential from `text`: this client's own, and anything shaped like one
    /// ([`super::redact`]).
    pub(crate) fn redact(&self, text: &str) -> String {
        super::redact::redact(text, &self.secrets)
    }

    /// A request to `path` (starting with `/`) under the base URL; a path with an empty or
    /// dot segment is refused before anything is sent ([`path_refusal`]).
    pub(crate) fn request(
        &self,
        method: Method,
        path: &str,
    ) -> Result<RequestBuilder, ProviderError> {
        if let Some(why) = path_refusal(path) {
            return Err(ProviderError::Refused(format!("{}: {why}", self.provider)));
        }
        Ok(self
            .client()?
            .request(method, format!("{}{}", self.base, path)))
    }

    /// Sends once; a non-2xx answer or a transport failure becomes a classified error whose
    /// message starts with `what` ("failed to list sandboxes", …).
    pub(crate) async fn send(
        &self,
        request: RequestBuilder,
        what: &str,
    ) -> Result<Reply, ProviderError> {
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => return Err(self.transport_error(what, &e)),
        };
        let status = response.status();
        let headers = response.headers().clone();
        let body = match response.bytes().await {
            Ok(b) => b.to_vec(),
            Err(e) => return Err(self.transport_error(what, &e)),
        };
        if status.is_success() {
            return Ok(Reply { headers, body });
        }
        let message = format!(
            "{}: {what}: {} (HTTP {})",
            self.provider,
            self.redact(&error_message(&body)),
            status.as_u16()
        );
        let error = classify(status, retry_after(&headers, SystemTime::now()), message);
        Err(if self.should_retry {
            should_retry(&headers, error)
        } else {
            error
        })
    }

    /// Sends a read, retried as [`super::retry::read`] says. `build` makes a fresh request for
    /// each attempt.
    pub(crate) async fn read(
        &self,
        build: impl Fn() -> Result<RequestBuilder, ProviderError>,
        what: &str,
    ) -> Result<Reply, ProviderError> {
        super::retry::read(|| async { self.send(build()?, what).await }).await
    }

    /// `DELETE path`, once (the reclaim path retries): a 404 is `Gone`.
    pub(crate) async fn delete(&self, path: &str, what: &str) -> Result<(), ProviderError> {
        self.send(self.request(Method::DELETE, path)?, what)
            .await
            .map(|_| ())
    }

    /// A cheap authenticated read of `path?limit=1`, for `check()`. A 404 comes back as
    /// `Gone`; the caller maps it (see [`listing_error`]).
    pub(crate) async fn probe(&self, path: &str, what: &str) -> Result<(), ProviderError> {
        let build = || Ok(self.request(Method::GET, path)?.query(&[("limit", "1")]));
        self.read(build, what).await.map(|_| ())
    }

    fn transport_error(&self, what: &str, err: &reqwest::Error) -> ProviderError {
        let text = super::retry::error_chain(err);
        let kind = if err.is_timeout() {
            "timed out"
        } else {
            "unreachable"
        };
        ProviderError::transient(format!(
            "{}: {what}: {kind}: {}",
            self.provider,
            self.redact(&text)
        ))
    }
}

impl Reply {
    /// The body as JSON of type `T`; a body that does not parse is a fatal error (the API
    /// changed under us), with a short excerpt.
    pub(crate) fn json<T: serde::de::DeserializeOwned>(
        &self,
        provider: &str,
        what: &str,
    ) -> Result<T, ProviderError> {
        decode_json(&self.body, provider, what)
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// A 2xx body as JSON of type `T`, as [`Reply::json`] reads it: a body that does not parse is
/// fatal, with a short excerpt. The drivers' fuzz entry points decode through this.
pub(crate) fn decode_json<T: serde::de::DeserializeOwned>(
    body: &[u8],
    provider: &str,
    what: &str,
) -> Result<T, ProviderError> {
    serde_json::from_slice(body).map_err(|e| {
        let excerpt: String = String::from_utf8_lossy(body).chars().take(120).collect();
        ProviderError::fatal(format!(
            "{provider}: {what}: unexpected answer ({e}): {excerpt:?}"
        ))
    })
}

/// Walks a listing paged by an opaque token ([`super::retry::walk`]); an empty next token, as
/// some APIs send, is the end.
pub(crate) async fn walk<T, F, Fut>(provider: &str, mut fetch: F) -> Result<Vec<T>, ProviderError>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, Option<String>), ProviderError>>,
{
    super::retry::walk(provider, |token| {
        let page = fetch(token);
        async move {
            let (items, next) = page.await?;
            Ok((items, next.filter(|t| !t.is_empty())))
        }
    })
    .await
}

#[cfg(test)]
mod tests;
