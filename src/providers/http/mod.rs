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

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, RequestBuilder, StatusCode};

use super::{Detail, ProviderError};
use crate::config::Secret;

/// An answer with a 2xx status.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

/// One provider's HTTP client, built at its first request: building it (the TLS roots, the
/// connection pool) costs memory and start-up pages a sidecar whose owner never dies would
/// pay for nothing.
pub struct Http {
    provider: &'static str,
    base: String,
    headers: HeaderMap,
    timeout: Duration,
    client: std::sync::OnceLock<Result<reqwest::Client, String>>,
    secrets: Vec<Secret>,
    /// Whether an answer's `Should-Retry` header decides ([`should_retry`]).
    should_retry: bool,
}

impl Http {
    /// A client for `base` (no trailing slash needed) sending `headers` on every request. The
    /// values of `secrets` are redacted from every error message.
    pub fn new(
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
                    .map_err(|e| e.to_string())
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
    pub fn redacting(mut self, secret: Secret) -> Self {
        self.secrets.push(secret);
        self
    }

    /// Lets an error answer's `Should-Retry` header decide whether it is retried
    /// ([`should_retry`]).
    pub fn honouring_should_retry(mut self) -> Self {
        self.should_retry = true;
        self
    }

    /// Redacts every credential from `text`: this client's own, and anything shaped like one
    /// ([`super::redact`]).
    pub fn redact(&self, text: &str) -> String {
        super::redact::redact(text, &self.secrets)
    }

    /// A request to `path` (starting with `/`) under the base URL; a path with an empty or
    /// dot segment is refused before anything is sent ([`path_refusal`]).
    pub fn request(&self, method: Method, path: &str) -> Result<RequestBuilder, ProviderError> {
        if let Some(why) = path_refusal(path) {
            return Err(ProviderError::Refused(format!("{}: {why}", self.provider)));
        }
        Ok(self
            .client()?
            .request(method, format!("{}{}", self.base, path)))
    }

    /// Sends once; a non-2xx answer or a transport failure becomes a classified error whose
    /// message starts with `what` ("failed to list sandboxes", …).
    pub async fn send(&self, request: RequestBuilder, what: &str) -> Result<Reply, ProviderError> {
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
            return Ok(Reply {
                status,
                headers,
                body,
            });
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
    pub async fn read(
        &self,
        build: impl Fn() -> Result<RequestBuilder, ProviderError>,
        what: &str,
    ) -> Result<Reply, ProviderError> {
        super::retry::read(|| async { self.send(build()?, what).await }).await
    }

    /// `DELETE path`, once (the reclaim path retries): a 404 is `Gone`.
    pub async fn delete(&self, path: &str, what: &str) -> Result<(), ProviderError> {
        self.send(self.request(Method::DELETE, path)?, what)
            .await
            .map(|_| ())
    }

    /// A cheap authenticated read of `path?limit=1`, for `check()`. A 404 comes back as
    /// `Gone`; the caller maps it (see [`listing_error`]).
    pub async fn probe(&self, path: &str, what: &str) -> Result<(), ProviderError> {
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
    pub fn json<T: serde::de::DeserializeOwned>(
        &self,
        provider: &str,
        what: &str,
    ) -> Result<T, ProviderError> {
        decode_json(&self.body, provider, what)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// A 2xx body as JSON of type `T`, as [`Reply::json`] reads it: a body that does not parse is
/// fatal, with a short excerpt. The drivers' fuzz entry points decode through this.
pub fn decode_json<T: serde::de::DeserializeOwned>(
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

/// Every byte but RFC 3986's unreserved characters (letters, digits, `-._~`): what
/// [`encode_segment`] and the other URL encoders of the crate percent-encode (upper-case hex,
/// byte by byte of the UTF-8).
pub const NOT_UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes one path segment (everything but RFC 3986's unreserved characters), so a
/// provider id can never change the path it is put in; a segment that is empty, `.` or `..`
/// or contains `/` is refused ([`ProviderError::Refused`]) whatever the caller parsed before:
/// a URL client resolves dot segments, so `machines/..` would name the app and `sandbox/` the
/// collection.
pub fn encode_segment(s: &str) -> Result<String, ProviderError> {
    if s.is_empty() || s == "." || s == ".." || s.contains('/') {
        return Err(ProviderError::Refused(format!(
            "refusing to put {:?} in a URL path: a path segment is never empty, '.' or '..' \
             and never contains '/'",
            crate::protocol::echo(s.as_bytes())
        )));
    }
    Ok(utf8_percent_encode(s, NOT_UNRESERVED).to_string())
}

/// Why the path of a request (`/a/b?query`) cannot be sent, if it cannot: it must start with
/// `/`, and none of its segments may be empty or a dot segment, plain or percent-encoded
/// (`.`, `..`, `%2e`, `.%2E`, …), which a URL client would resolve to another path.
pub fn path_refusal(path: &str) -> Option<String> {
    let bare = path.split(['?', '#']).next().unwrap_or_default();
    let Some(rest) = bare.strip_prefix('/') else {
        return Some(format!(
            "refusing request path {path:?}: it must start with '/'"
        ));
    };
    let dot = |seg: &str| {
        let lower = seg.to_ascii_lowercase().replace("%2e", ".");
        lower == "." || lower == ".."
    };
    rest.split('/')
        .any(|seg| seg.is_empty() || dot(seg))
        .then(|| {
            format!(
                "refusing request path {:?}: an empty or dot segment would change what it names",
                crate::protocol::echo(path.as_bytes())
            )
        })
}

/// For a listing, "not found" means a wrong URL or account, not a removed sandbox: fatal.
pub fn listing_error(e: ProviderError) -> ProviderError {
    match e {
        ProviderError::Gone(m) => ProviderError::Fatal(m),
        other => other,
    }
}

/// The classes reclaim decides by. 404 is "gone" (for a listing the driver maps it back to
/// fatal: a missing collection is a configuration error); 408, 425, 429 and 5xx are worth
/// retrying; 409 is a state change in progress, also retried; the rest is fatal.
pub fn classify(
    status: StatusCode,
    retry_after: Option<Duration>,
    message: String,
) -> ProviderError {
    let code = status.as_u16();
    let detail = Detail::http(message, code);
    match code {
        404 | 410 => ProviderError::Gone(detail),
        408 | 409 | 425 | 429 | 500..=599 => ProviderError::Transient {
            message: detail,
            retry_after,
        },
        _ => ProviderError::Fatal(detail),
    }
}

/// An error answer as its `Should-Retry` header says, the way E2B's SDK reads it (2.63.0,
/// `e2b/retry.py`): when present, the header alone decides, whatever the status. `true`
/// (trimmed, any case) makes the answer worth retrying, even a 4xx or a 404 (which then
/// proves nothing gone); any other value makes it final: a 429 or 5xx is then not retried but
/// reported (and a 404 stays gone, as the SDK's `kill` takes it). Absent, the status decides
/// ([`classify`]). The wait is the answer's `Retry-After`, as the SDK's.
pub fn should_retry(headers: &HeaderMap, error: ProviderError) -> ProviderError {
    let Some(value) = headers.get("should-retry") else {
        return error;
    };
    let retry = value
        .to_str()
        .is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"));
    match (retry, error) {
        (true, ProviderError::Gone(detail) | ProviderError::Fatal(detail)) => {
            ProviderError::Transient {
                message: detail,
                retry_after: retry_after(headers, SystemTime::now()),
            }
        }
        (false, ProviderError::Transient { mut message, .. }) => {
            message.message.push_str(" (Should-Retry: false)");
            ProviderError::Fatal(message)
        }
        (_, error) => error,
    }
}

/// The provider's wait hint: `Retry-After` (delta seconds or an HTTP date), else the longest
/// `Retry-After-<name>` (Daytona names its throttlers; whichever throttler tripped, waiting out
/// the longest is safe).
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let parse = |v: &HeaderValue| {
        v.to_str()
            .ok()
            .and_then(|s| parse_retry_after(s.trim(), now))
    };
    if let Some(d) = headers.get("retry-after").and_then(parse) {
        return Some(d);
    }
    headers
        .iter()
        .filter(|(name, _)| name.as_str().starts_with("retry-after-"))
        .filter_map(|(_, v)| parse(v))
        .max()
}

fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0)
            .then(|| Duration::from_secs_f64(secs.min(86_400.0)));
    }
    let at = parse_http_date(value)?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` (the only form RFC 9110 asks senders to use).
fn parse_http_date(s: &str) -> Option<SystemTime> {
    let parts: Vec<&str> = s.split_whitespace().collect();
    if parts.len() != 6 || parts[5] != "GMT" {
        return None;
    }
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = months.iter().position(|m| *m == parts[2])? + 1;
    let iso = format!(
        "{}-{:02}-{:02}T{}Z",
        parts[3],
        month,
        parts[1].parse::<u32>().ok()?,
        parts[4]
    );
    let secs = crate::timefmt::parse_rfc3339(&iso)?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).ok()?))
}

/// One short line from an error body: the `message` or `error` field of a JSON body (E2B,
/// Daytona, Fly, Connect), else the text itself, cut to 200 characters.
pub fn error_message(body: &[u8]) -> String {
    let from_json = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            let field = |v: &serde_json::Value, k: &str| {
                v.get(k).and_then(|m| m.as_str()).map(str::to_string)
            };
            field(&v, "message")
                .or_else(|| field(&v, "error"))
                .or_else(|| v.get("error").and_then(|e| field(e, "message")))
        });
    let text = from_json.unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string());
    let text: String = text.chars().filter(|c| !c.is_control()).take(200).collect();
    if text.is_empty() {
        "no details".into()
    } else {
        text
    }
}

/// Walks a listing paged by an opaque token ([`super::retry::walk`]); an empty next token, as
/// some APIs send, is the end.
pub async fn walk<T, F, Fut>(provider: &str, mut fetch: F) -> Result<Vec<T>, ProviderError>
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
