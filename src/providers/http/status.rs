//! What an error answer means: its class ([`classify`]: gone, worth retrying, or fatal), E2B's
//! `Should-Retry` override ([`should_retry`]), the provider's wait hint ([`retry_after`]:
//! `Retry-After` in seconds or as an HTTP date, Daytona's named `Retry-After-<throttler>`),
//! and one short message from its body ([`error_message`]). [`super::Http::send`] applies them
//! to every non-2xx answer.

use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::StatusCode;

use crate::providers::{Detail, ProviderError};

/// For a listing, "not found" means a wrong URL or account, not a removed sandbox: fatal.
pub(crate) fn listing_error(e: ProviderError) -> ProviderError {
    match e {
        ProviderError::Gone(m) => ProviderError::Fatal(m),
        other => other,
    }
}

/// The classes reclaim decides by. 404 is "gone" (for a listing the driver maps it back to
/// fatal: a missing collection is a configuration error); 408, 425, 429 and 5xx are worth
/// retrying; 409 is a state change in progress, also retried; the rest is fatal.
pub(crate) fn classify(
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
pub(crate) fn should_retry(headers: &HeaderMap, error: ProviderError) -> ProviderError {
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
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
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
pub(crate) fn error_message(body: &[u8]) -> String {
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
