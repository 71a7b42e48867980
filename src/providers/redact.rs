//! The one redaction of credentials from text that may reach an error, a log line, the ledger
//! or output. The HTTP layer, Modal's gRPC errors and plugins all go through [`redact`].
//!
//! Two kinds of match: the values sandguard knows (each provider's configured credentials)
//! become `[redacted]` wherever they appear, and so does anything *shaped* like a credential, because
//! text sandguard did not write (an API's error body, a plugin's stderr or error reply) can
//! carry credentials sandguard never saw:
//!
//! - the value after a credential-like key and `=` or `:`, quoted or not: `token=…`,
//!   `"api_key": "…"`, `X-Api-Key: …`, `password=…`, `access_token=…` (a key whose name,
//!   case and `_`/`-`/`.` ignored, contains `token`, `secret`, `passw`, `apikey`, `accesskey`,
//!   `privatekey`, `credential`, `authorization`, `cookie`, or is `key` or `auth`);
//! - the credential after an auth scheme: `Bearer …` anywhere, and `Basic`, `Digest`, `Token`,
//!   `Negotiate` after such a key (`Authorization: Basic …`); the scheme word is kept;
//! - the password in a URL's user info: `https://user:…@host`.
//!
//! Decision: every match is found in the text as it came, and the union of them is hidden,
//! each run of overlapping or touching matches as one `[redacted]`: the longest secret and
//! the whole credential-shaped value go first, whatever the order of the secrets. Replacing
//! one match after another let a very short key cut a longer token (or a longer secret that
//! contains it) in two and leave the rest readable, since the marker ends an unquoted value.
//!
//! Decision: erring on the side of hiding. A word that only looks like a credential (the
//! `100` of `max_tokens=100`) is hidden too; an error message loses a detail, never a secret.
//!
//! A text known to be one URL (a Docker daemon's address, the fleet store's) is shown through
//! [`url`] (`redact/url.rs`), the one redaction of URLs; [`redact`] finds URLs' passwords in
//! free text.

mod url;

pub(crate) use url::url;

use crate::config::Secret;

/// What a credential is replaced by.
pub(crate) const MARK: &str = "[redacted]";

/// `text` with every known secret and every credential-shaped value replaced by [`MARK`].
pub(crate) fn redact<'a>(text: &str, secrets: impl IntoIterator<Item = &'a Secret>) -> String {
    let mut spans: Vec<(usize, usize)> = secrets
        .into_iter()
        .map(Secret::expose)
        .filter(|s| !s.is_empty())
        .flat_map(|s| text.match_indices(s).map(|(at, m)| (at, at + m.len())))
        .collect();
    spans.extend(url_passwords(text));
    spans.extend(shapes(text));
    hide(text, spans)
}

/// `text` with each of `spans` (byte ranges on character boundaries), overlapping or touching
/// ones merged, replaced by one [`MARK`].
fn hide(text: &str, mut spans: Vec<(usize, usize)>) -> String {
    spans.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut current: Option<(usize, usize)> = None;
    for (from, to) in spans {
        current = match current {
            Some((start, end)) if from <= end => Some((start, end.max(to))),
            Some((start, end)) => {
                out.push_str(&text[copied..start]);
                out.push_str(MARK);
                copied = end;
                Some((from, to))
            }
            None => Some((from, to)),
        };
    }
    if let Some((start, end)) = current {
        out.push_str(&text[copied..start]);
        out.push_str(MARK);
        copied = end;
    }
    out.push_str(&text[copied..]);
    out
}

/// Characters of a key or a scheme word.
fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

/// Where an unquoted value ends.
fn ends_value(b: u8) -> bool {
    b.is_ascii_whitespace()
        || matches!(
            b,
            b'"' | b'\''
                | b','
                | b';'
                | b'&'
                | b'('
                | b')'
                | b'['
                | b']'
                | b'{'
                | b'}'
                | b'<'
                | b'>'
        )
}

fn is_credential_key(word: &str) -> bool {
    let key: String = word
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    matches!(key.as_str(), "key" | "auth")
        || [
            "token",
            "secret",
            "passw",
            "apikey",
            "accesskey",
            "privatekey",
            "credential",
            "authorization",
            "cookie",
        ]
        .iter()
        .any(|part| key.contains(part))
}

/// An auth scheme whose next word is a credential, after a credential key.
fn is_scheme(word: &str) -> bool {
    ["bearer", "basic", "digest", "token", "negotiate"]
        .iter()
        .any(|s| word.eq_ignore_ascii_case(s))
}

/// The end of the word starting at `i`.
fn word_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && is_word(b[i]) {
        i += 1;
    }
    i
}

fn skip_spaces(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
        i += 1;
    }
    i
}

/// The value starting at `i`: `(start, end)` of what to hide, or `None` when there is none.
/// A quoted value runs to its closing quote (backslash escapes skipped).
fn value_at(b: &[u8], i: usize) -> Option<(usize, usize)> {
    match b.get(i) {
        Some(&q) if q == b'"' || q == b'\'' => {
            let mut j = i + 1;
            while j < b.len() && b[j] != q {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            let end = j.min(b.len());
            (end > i + 1).then_some((i + 1, end))
        }
        Some(_) => {
            let mut j = i;
            while j < b.len() && !ends_value(b[j]) {
                j += 1;
            }
            (j > i).then_some((i, j))
        }
        None => None,
    }
}

/// After a credential key at `[start, end)`: the span of its value to hide, and where to go on
/// scanning. `None` when no `=` or `:` follows.
fn key_value(b: &[u8], end: usize) -> Option<((usize, usize), usize)> {
    let mut j = end;
    if matches!(b.get(j), Some(b'"' | b'\'')) {
        j += 1; // the closing quote of a JSON key
    }
    j = skip_spaces(b, j);
    if !matches!(b.get(j), Some(b'=' | b':')) {
        return None;
    }
    j = skip_spaces(b, j + 1);
    // `Authorization: Basic …`: keep the scheme, hide what follows it.
    let scheme_end = word_end(b, j);
    if scheme_end > j {
        let after = skip_spaces(b, scheme_end);
        let word = std::str::from_utf8(&b[j..scheme_end]).unwrap_or("");
        if after > scheme_end && is_scheme(word) {
            return value_at(b, after).map(|span| (span, span.1));
        }
    }
    let span = value_at(b, j)?;
    Some((span, span.1))
}

/// Where the values of credential keys are, and whatever follows `Bearer`.
fn shapes(text: &str) -> Vec<(usize, usize)> {
    let b = text.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !is_word(b[i]) || (i > 0 && is_word(b[i - 1])) {
            i += 1;
            continue;
        }
        let end = word_end(b, i);
        let word = &text[i..end];
        let hide = if word.eq_ignore_ascii_case("bearer") {
            let after = skip_spaces(b, end);
            (after > end)
                .then(|| value_at(b, after))
                .flatten()
                .map(|span| (span, span.1))
        } else if is_credential_key(word) {
            key_value(b, end)
        } else {
            None
        };
        match hide {
            Some((span, next)) => {
                spans.push(span);
                i = next;
            }
            None => i = end,
        }
    }
    spans
}

/// Where the password of `scheme://user:password@host` is.
fn url_passwords(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("://") {
        let start = from + at + 3;
        let tail = &text[start..];
        let authority_end = tail
            .find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace())
            .unwrap_or(tail.len());
        let authority = &tail[..authority_end];
        if let (Some(user_end), Some(colon)) = (authority.rfind('@'), authority.find(':')) {
            if colon < user_end {
                spans.push((start + colon + 1, start + user_end));
            }
        }
        from = start + authority_end;
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Redacts, and checks that redacting again changes nothing (messages are redacted at
    /// more than one layer).
    fn shapes(text: &str) -> String {
        let once = redact(text, &[] as &[Secret]);
        assert_eq!(redact(&once, &[] as &[Secret]), once, "redacting twice");
        once
    }

    #[test]
    fn known_secrets_are_hidden_wherever_they_appear() {
        let secrets = [Secret::new("e2b_deadbeef"), Secret::new("")];
        assert_eq!(
            redact("key e2b_deadbeef refused", &secrets),
            "key [redacted] refused"
        );
    }

    /// Issue 22: a very short key replaced first, inside a longer secret or a credential-shaped
    /// token, cut it in two and left the rest readable. The longest match hides first: a token
    /// that holds a secret is hidden whole, once.
    #[test]
    fn the_longest_secret_and_credential_shaped_text_are_hidden_first() {
        let secrets = [Secret::new("k9"), Secret::new("tok_k9_long_secret")];
        for (text, want) in [
            ("refused tok_k9_long_secret", "refused [redacted]"),
            ("token=abck9defghij next", "token=[redacted] next"),
            ("sent Bearer eyJk9xyz.more ok", "sent Bearer [redacted] ok"),
            ("https://me:pwk9pw@host/x", "https://me:[redacted]@host/x"),
            ("id k9 and k9k9", "id [redacted] and [redacted]"),
        ] {
            let once = redact(text, &secrets);
            assert_eq!(once, want, "{text}");
            assert_eq!(redact(&once, &secrets), once, "redacting twice: {text}");
        }
        // Whatever order the secrets come in.
        let reversed = [Secret::new("tok_k9_long_secret"), Secret::new("k9")];
        assert_eq!(
            redact("a tok_k9_long_secret b", &reversed),
            "a [redacted] b"
        );
    }

    #[test]
    fn credential_keys_lose_their_values() {
        for (text, want) in [
            ("token=s3cr3t-1 next", "token=[redacted] next"),
            (
                "GET /x?access_token=abc&page=2",
                "GET /x?access_token=[redacted]&page=2",
            ),
            (
                r#"{"api_key": "a b c", "id": "sb-1"}"#,
                r#"{"api_key": "[redacted]", "id": "sb-1"}"#,
            ),
            ("X-Api-Key: k-123", "X-Api-Key: [redacted]"),
            ("PASSWORD = hunter2;", "PASSWORD = [redacted];"),
            (
                "E2B_API_KEY=e2b_1 FLY_API_TOKEN='fo1 x'",
                "E2B_API_KEY=[redacted] FLY_API_TOKEN='[redacted]'",
            ),
            ("clientSecret:xyz", "clientSecret:[redacted]"),
            ("secret=", "secret="),
        ] {
            assert_eq!(shapes(text), want, "{text}");
        }
    }

    #[test]
    fn auth_schemes_keep_the_scheme_and_lose_the_credential() {
        for (text, want) in [
            (
                "Authorization: Bearer eyJ.a-b_c",
                "Authorization: Bearer [redacted]",
            ),
            ("sent bearer abc123 twice", "sent bearer [redacted] twice"),
            (
                "authorization=Basic dXNlcjpwYXNz",
                "authorization=Basic [redacted]",
            ),
            (
                "Authorization: token ghp_1",
                "Authorization: token [redacted]",
            ),
            ("Authorization: ghp_1", "Authorization: [redacted]"),
        ] {
            assert_eq!(shapes(text), want, "{text}");
        }
    }

    #[test]
    fn url_passwords_are_hidden() {
        assert_eq!(
            shapes("cannot reach redis://me:pw@host:6379/0 or https://host/a:b@c"),
            "cannot reach redis://me:[redacted]@host:6379/0 or https://host/a:b@c"
        );
    }

    #[test]
    fn plain_text_and_other_scripts_pass_unchanged() {
        for text in [
            "sandbox sb-1 is gone; sandguard.session=abc",
            "über token",
            "a keyboard: fine",
            "",
            "token",
        ] {
            assert_eq!(shapes(text), text);
        }
        assert_eq!(shapes("naïve token=ünïcode!"), "naïve token=[redacted]");
    }
}
