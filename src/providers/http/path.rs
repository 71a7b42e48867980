//! Paths a request may be sent to: a provider id percent-encoded into one path segment
//! ([`encode_segment`]), and a whole request path checked before it is sent
//! ([`path_refusal`]). Both refuse what a URL client would resolve to another path (dot
//! segments, plain or percent-encoded; empty segments; a `/` inside an id), so nothing a
//! provider or a user hands us can change which resource a request names.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::providers::ProviderError;

/// Every byte but RFC 3986's unreserved characters (letters, digits, `-._~`): what
/// [`encode_segment`] and the other URL encoders of the crate percent-encode (upper-case hex,
/// byte by byte of the UTF-8).
pub(crate) const NOT_UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes one path segment (everything but RFC 3986's unreserved characters), so a
/// provider id can never change the path it is put in; a segment that is empty, `.` or `..`
/// or contains `/` is refused ([`ProviderError::Refused`]) whatever the caller parsed before:
/// a URL client resolves dot segments, so `machines/..` would name the app and `sandbox/` the
/// collection.
pub(crate) fn encode_segment(s: &str) -> Result<String, ProviderError> {
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
pub(crate) fn path_refusal(path: &str) -> Option<String> {
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
